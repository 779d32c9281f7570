//! Other simulators' files, to and from fleetsim's workload IR: SimAI's workload text format
//! (`simai`: parser and writer) and its conversion (`simai_convert`: import as a workload,
//! export of a compiled one); Chakra execution traces (`chakra`: finding and reading per-rank
//! trace files; `chakra_convert`: import and export). The simulation never depends on this
//! module.

pub mod chakra;
pub mod chakra_convert;
pub mod simai;
pub mod simai_convert;
