//! How much later than the lookahead cross-partition events arrive.
//!
//! A conservative window is `[T, T + lookahead)` with the lookahead the smallest latency of a
//! cut link (DESIGN.md, "Windows and mailboxes"), because an event sent across a cut could
//! arrive that soon. Most do not: a segment arrives after its serialisation as well, an
//! acknowledgement after the whole path back. Counting each cross-partition event by how many
//! lookaheads after its sending it arrives shows how much a lookahead computed from the
//! senders' state (an earliest output time, Chandy and Misra's null messages or UNISON's
//! per-LP lookahead, Bai et al., EuroSys'24 §4) could widen the windows.

use sim_ir::time::SimTime;

/// Multiples of the lookahead that bound the counters of [`CrossPartitionSlack`].
pub const SLACK_MULTIPLES: [u64; 6] = [1, 2, 4, 8, 16, 32];

/// Cross-partition events by the delay from their sending to their arrival, in lookaheads.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CrossPartitionSlack {
    /// `events[i]`: arrived at least `SLACK_MULTIPLES[i]` lookaheads after they were sent,
    /// and less than `SLACK_MULTIPLES[i + 1]` (the last has no upper limit). An event sent
    /// across a cut arrives one lookahead later at the earliest.
    pub events: [u64; SLACK_MULTIPLES.len()],
}

impl CrossPartitionSlack {
    /// Counts an event that arrives `delay` after it was sent.
    pub fn count(&mut self, delay: SimTime, lookahead: SimTime) {
        let multiple = delay.as_ps() / lookahead.as_ps().max(1);
        let i = SLACK_MULTIPLES
            .iter()
            .rposition(|&m| multiple >= m)
            .unwrap_or(0);
        self.events[i] += 1;
    }

    pub fn add(&mut self, other: &CrossPartitionSlack) {
        for (a, b) in self.events.iter_mut().zip(other.events) {
            *a += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_counts_under_the_largest_multiple_its_delay_reaches() {
        let mut s = CrossPartitionSlack::default();
        for delay in [1_000, 1_999, 2_000, 3_999, 7_000, 31_999, 32_000, 1 << 40] {
            s.count(SimTime::from_ps(delay), SimTime::from_ns(1));
        }
        assert_eq!(s.events, [2, 2, 1, 0, 1, 2]);
        // Sooner than the lookahead (it cannot happen across a cut) counts in the first.
        s.count(SimTime::from_ps(10), SimTime::from_ns(1));
        assert_eq!(s.events[0], 3);
        let mut sum = CrossPartitionSlack::default();
        sum.add(&s);
        sum.add(&s);
        assert_eq!(sum.events, s.events.map(|n| 2 * n));
    }
}
