//! The runtime of a simulation: loads and partitions an experiment, drives the windows of
//! its workers (embedded, or over gRPC), takes checkpoints, meets under Slurm, and writes
//! the output directory. The commands that use it live in the `fleetsim` crate's `cli`.
//!
//! Invariants: knows nothing of LP internals; it talks to workers through the window-driver
//! interface only. `distributed` (the gRPC transport) and the Prometheus endpoint are the
//! only code that knows tokio, tonic or hyper, and they are behind the `server` feature.

pub mod checkpoint;
#[cfg(feature = "server")]
pub mod distributed;
pub mod driver;
pub mod embedded;
pub mod metrics;
pub mod outcome;
pub mod output;
pub mod run;
pub mod slurm;
