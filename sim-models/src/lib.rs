//! The models of what is simulated, each a pure function of its inputs: the GPU database and
//! sustained clocks ([`gpu`]), the checked model ([`model`]) and its memory ([`memory`]),
//! kernel times ([`compute`]), NCCL's collective algorithms in closed form ([`collective`]),
//! the cluster's topology and routes ([`topology`]), faults ([`fault`]) and the schedule
//! evaluator over the workload IR ([`workload::evaluate`]).
//!
//! Invariants: stands on `sim-ir` and `sim-config` alone; knows no experiment, no engine and
//! no LP. Each model takes what it needs (a config section, a GPU spec, a topology), never a
//! whole experiment, so the engine, the planner and the reports ask the same model the same
//! question.

pub mod collective;
pub mod compute;
pub mod csv_line;
pub mod fault;
pub mod gpu;
pub mod memory;
pub mod model;
pub mod topology;
pub mod workload;

// The layers below under the names the models' code uses (`crate::config`, `crate::time`).
pub use sim_config as config;
use sim_config::embedded;
pub use sim_ir::{hash, layout, time};
