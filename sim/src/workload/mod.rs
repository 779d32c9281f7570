//! Compiling, evaluating and summarising the workload IR. The IR itself (`Workload`,
//! `Program`, `Op`, `Stream`, `Kernel` and the execution semantics the engine honours) is
//! `sim_ir::workload`, re-exported here.

pub mod bench;
pub mod compile;
pub(crate) mod layer;
pub mod live_memory;
pub mod schedule;

pub mod summary;
pub mod userbuffers;

pub use compile::{CompileOptions, compile};

pub use sim_models::workload::*;
