//! The coordinator: builds the experiment, partitions it, drives windows and writes reports.
//!
//! Invariant: knows nothing of LP internals; it talks to workers through the window-driver
//! interface only. Today it hosts the experiment checks behind `fleetsim check`.

pub mod check;
pub mod checkpoint;
pub mod collective_bench;
pub mod distributed;
pub mod driver;
pub mod embedded;
pub mod kernel_report;
pub mod metrics;
pub mod partition_report;
pub mod plan;
pub mod plot;
pub mod run;
pub mod run_report;
pub mod slurm;
pub mod summary;
pub mod sweep;
pub mod validate;
pub mod workload_report;
