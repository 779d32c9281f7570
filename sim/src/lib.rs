//! fleetsim's domain model: what is simulated, independent of how the simulation is executed.
//!
//! Invariants: no threads, sockets, tokio or file output here (files are only read while
//! parsing configuration); nothing iterates a randomly seeded hash map; simulated time is an
//! integer number of picoseconds, a [`time::SimTime`], converted to seconds only through it.

pub mod experiment;
pub mod framework;
pub mod hostlist;
pub mod interop;
pub mod jobs;
pub mod load;
pub mod planner;
pub mod segments;
pub mod workload;

// The layer below, re-exported so that `sim::time::SimTime` and `crate::layout` name the
// same items everywhere.
pub use sim_ir::{event, hash, layout, pipeline_layout, slab, time};

// The experiment file's layer: `crate::config` is `sim-config`, and the configs it embeds
// (GPUs, models, hosts, frameworks) are read through it.
pub use sim_config as config;
use sim_config::embedded;

// The models, which know no experiment and no engine.
pub use sim_models::{collective, compute, csv_line, fault, gpu, memory, model, topology};
