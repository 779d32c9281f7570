//! fleetsim's domain model: what is simulated, independent of how the simulation is executed.
//!
//! Invariants: no threads, sockets, tokio or file output here (files are only read while
//! parsing configuration); nothing iterates a randomly seeded hash map; simulated time is an
//! integer number of picoseconds, a [`time::SimTime`], converted to seconds only through it.

pub mod collective;
pub mod compute;
pub mod config;
pub mod csv_line;
mod embedded;
pub mod engine;
pub mod event;
pub mod experiment;
pub mod fault;
pub mod framework;
pub mod gpu;
pub mod hash;
pub mod hostlist;
pub mod interop;
pub mod jobs;
pub mod layout;
pub mod load;
pub mod memory;
pub mod model;
pub mod pipeline_layout;
pub mod planner;
pub mod segments;
pub mod slab;
pub mod time;
pub mod topology;
pub mod workload;
