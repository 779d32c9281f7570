//! Other simulators' files, to and from fleetsim's workload IR: SimAI's workload text format
//! (`simai`: parser and writer) and its conversion (`simai_convert`: import as a workload,
//! export of a compiled one). The simulation never depends on this module.

pub mod simai;
pub mod simai_convert;
