//! The bottom layer of fleetsim's domain: the words every other layer speaks. Simulated time
//! ([`time::SimTime`], whole picoseconds), the key that orders events ([`event::EventKey`]),
//! stable hashing for digests and seeded draws ([`hash`]), where a rank sits in the parallel
//! layout ([`layout`]), which layers a pipeline stage holds ([`pipeline_layout`]), numeric
//! formats ([`precision`]) and the workload IR every compiler emits and the engine runs
//! ([`workload`]).
//!
//! Invariants: depends on no other fleetsim crate and on nothing but serde and thiserror; no
//! I/O, no threads, no randomness but what [`hash`] derives from a seed.

pub mod event;
pub mod hash;
pub mod layout;
pub mod pipeline_layout;
pub mod precision;
pub mod slab;
pub mod time;
pub mod workload;
