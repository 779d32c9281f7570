//! Event identity (DESIGN.md, "The event model").

use crate::time::SimTime;

/// The key every event is ordered by. It is unique: an LP numbers the events it creates, so
/// `(time, origin LP, origin sequence)` never repeats and does not depend on how the topology
/// was partitioned or how many workers or threads run it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct EventKey {
    /// When the event happens.
    pub time: SimTime,
    /// The LP (topology node) that created the event.
    pub origin_lp: u32,
    /// The creating LP's running count of events it created.
    pub origin_seq: u64,
}
