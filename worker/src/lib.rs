//! Executes the LPs of the partitions a worker owns.
//!
//! Invariants: knows nothing of how partitions were chosen; no locks or atomics on per-LP state
//! in the hot loop; no tokio in the hot loop.

pub mod queue;
