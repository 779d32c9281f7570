//! How a transfer crosses the network: which link classes queue it segment by segment, and
//! how big its segments are, and how long their bytes take on a link. The engine cuts transfers so (`engine/gpu/transport`); the
//! partitioner estimates the events the cuts make (`partitioner::Load`) from the same rules
//! without knowing the engine.

use crate::topology::LinkClass;

/// Index of a link class in per-class arrays.
pub fn class_index(class: LinkClass) -> usize {
    match class {
        LinkClass::NvLink => 0,
        LinkClass::Pcie => 1,
        LinkClass::Network => 2,
        LinkClass::Cxl => 3,
    }
}

/// Fewest segments a flow is cut into, and the smallest segment that rule makes.
const MIN_SEGMENTS: u64 = 8;
const MIN_SEGMENT_BYTES: u64 = 4 << 10;

/// Bytes per segment of a flow of `bytes`: `network.segment_bytes`, but small enough for
/// [`MIN_SEGMENTS`] segments (not below [`MIN_SEGMENT_BYTES`]), so that flows sharing a
/// port interleave at no coarser than an eighth of a flow, as MTU-sized packets would.
/// `largest` is `network.segment_bytes`.
///
/// The segments are equal but the last, which also carries the remainder (fewer bytes than
/// there are segments). A short last segment would overtake its predecessors across links
/// that run without a queue and end the message before they arrive.
pub fn segment_size(bytes: u64, largest: u64) -> u64 {
    let most = (bytes / MIN_SEGMENTS)
        .max(MIN_SEGMENT_BYTES)
        .min(largest)
        .max(1);
    (bytes / bytes.div_ceil(most).max(1)).max(1)
}

/// What the partitioner needs of `[network]`: which link classes have queued ports (segment
/// by segment) and the largest segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segmenting {
    /// Per [`LinkClass`] ([`class_index`]): queued ports, or analytical.
    pub queued: [bool; 4],
    /// `network.segment_bytes`.
    pub segment_bytes: u64,
}

impl Segmenting {
    /// Whether links of `class` have queued output ports.
    pub fn is_queued(&self, class: LinkClass) -> bool {
        self.queued[class_index(class)]
    }

    /// Bytes per segment of a transfer of `bytes` ([`segment_size`]).
    pub fn segment_size(&self, bytes: u64) -> u64 {
        segment_size(bytes, self.segment_bytes)
    }
}
