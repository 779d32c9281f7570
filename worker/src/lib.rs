//! Executes the LPs of the partitions a worker owns.
//!
//! Invariants: knows nothing of how partitions were chosen; no locks or atomics on per-LP state
//! in the hot loop (a partition is run by one thread per window); no tokio in the hot loop.

pub mod checkpoint;
pub mod file;
mod lineage;
mod next_times;
pub mod partition;
mod prefetch;
mod promise;
pub mod protocol;
pub mod queue;
mod round_trips;
mod slack;
mod sync;
mod team;

pub use team::wait_briefly;
pub mod window;

pub use partition::{LpMap, Partition};
pub use protocol::{Coordination, EngineError, EventBatch, WindowGrant, WindowReport};
pub use round_trips::RoundTrips;
pub use slack::{CrossPartitionSlack, SLACK_MULTIPLES};
pub use window::{
    BOUND_THREADS, RunShape, Scheduling, WindowParallelism, WorkerOutcome, WorkerSetup,
    WorkerStats, run_worker,
};
