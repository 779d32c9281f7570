//! The pending-event queue of one partition, ordered by [`EventKey`].
//!
//! A 4-ary min-heap of 24-byte keys, each pointing into a slab that holds the events: sifting
//! moves keys, never event bodies, and a 4-ary heap halves the depth a pop walks (pops are
//! as frequent as pushes here). Freed slab slots are reused, so a steady-state run does not
//! allocate.

use sim::event::EventKey;

/// A min-queue of events keyed by `(time, origin LP, origin sequence)`. Keys are unique, so the
/// pop order is total and independent of insertion order: the basis of partition-independent
/// results.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: Vec<HeapKey>,
    slab: Vec<Option<E>>,
    free: Vec<u32>,
}

/// An [`EventKey`] and the slab slot of its event.
#[derive(Debug, Clone, Copy)]
struct HeapKey {
    time_ps: u64,
    origin_seq: u64,
    origin_lp: u32,
    slot: u32,
}

impl HeapKey {
    fn order(&self) -> (u64, u32, u64) {
        (self.time_ps, self.origin_lp, self.origin_seq)
    }

    fn before(&self, other: &HeapKey) -> bool {
        self.order() < other.order()
    }
}

const ARITY: usize = 4;

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: Vec::new(),
            slab: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<E> EventQueue<E> {
    pub fn push(&mut self, key: EventKey, event: E) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(event);
                s
            }
            None => {
                self.slab.push(Some(event));
                (self.slab.len() - 1) as u32
            }
        };
        let entry = HeapKey {
            time_ps: key.time_ps,
            origin_seq: key.origin_seq,
            origin_lp: key.origin_lp,
            slot,
        };
        let mut i = self.heap.len();
        self.heap.push(entry);
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if !entry.before(&self.heap[parent]) {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = entry;
    }

    /// Time of the earliest pending event.
    pub fn next_time_ps(&self) -> Option<u64> {
        self.heap.first().map(|k| k.time_ps)
    }

    /// Pops the earliest event if it is before `end_ps` (the window's end, exclusive).
    pub fn pop_before(&mut self, end_ps: u64) -> Option<(EventKey, E)> {
        let top = *self.heap.first()?;
        if top.time_ps >= end_ps {
            return None;
        }
        let last = self.heap.pop()?;
        let n = self.heap.len();
        if n > 0 {
            // Sift the last key down from the root.
            let mut i = 0;
            loop {
                let first = i * ARITY + 1;
                if first >= n {
                    break;
                }
                let mut best = first;
                for c in first + 1..(first + ARITY).min(n) {
                    if self.heap[c].before(&self.heap[best]) {
                        best = c;
                    }
                }
                if !self.heap[best].before(&last) {
                    break;
                }
                self.heap[i] = self.heap[best];
                i = best;
            }
            self.heap[i] = last;
        }
        let event = self.slab[top.slot as usize].take()?;
        self.free.push(top.slot);
        Some((
            EventKey {
                time_ps: top.time_ps,
                origin_lp: top.origin_lp,
                origin_seq: top.origin_seq,
            },
            event,
        ))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Every pending event, in no particular order (checkpoints sort them).
    pub fn iter(&self) -> impl Iterator<Item = (EventKey, &E)> {
        self.heap.iter().filter_map(|k| {
            let event = self.slab[k.slot as usize].as_ref()?;
            Some((
                EventKey {
                    time_ps: k.time_ps,
                    origin_lp: k.origin_lp,
                    origin_seq: k.origin_seq,
                },
                event,
            ))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever order events arrive in, they leave in key order, each with its own event.
        #[test]
        fn pops_in_key_order_regardless_of_push_order(
            mut keys in proptest::collection::vec((0u64..50, 0u32..4, 0u64..1000), 1..200),
            interleave in 0usize..200,
        ) {
            keys.sort();
            keys.dedup();
            let mut shuffled = keys.clone();
            shuffled.reverse();
            let mut q = EventQueue::default();
            let mut out = Vec::new();
            for (i, &(t, lp, seq)) in shuffled.iter().enumerate() {
                q.push(EventKey { time_ps: t, origin_lp: lp, origin_seq: seq }, (t, lp, seq));
                // Pop some early on to exercise slot reuse; the earliest stays the earliest
                // only among what was pushed, so compare as a multiset below.
                if i == interleave
                    && let Some((k, e)) = q.pop_before(u64::MAX)
                {
                    prop_assert_eq!((k.time_ps, k.origin_lp, k.origin_seq), e);
                    out.push(e);
                }
            }
            let mut rest = Vec::new();
            while let Some((k, e)) = q.pop_before(u64::MAX) {
                prop_assert_eq!((k.time_ps, k.origin_lp, k.origin_seq), e);
                rest.push(e);
            }
            let mut sorted_rest = rest.clone();
            sorted_rest.sort();
            prop_assert_eq!(&rest, &sorted_rest);
            out.extend(rest);
            out.sort();
            prop_assert_eq!(out, keys);
            prop_assert!(q.is_empty());
        }
    }

    #[test]
    fn window_end_is_exclusive() {
        let mut q = EventQueue::default();
        q.push(
            EventKey {
                time_ps: 10,
                origin_lp: 0,
                origin_seq: 0,
            },
            'a',
        );
        assert!(q.pop_before(10).is_none());
        assert_eq!(q.pop_before(11).map(|(_, e)| e), Some('a'));
    }

    #[test]
    fn ties_in_time_break_by_origin_then_sequence() {
        let mut q = EventQueue::default();
        for (lp, seq) in [(2, 0), (1, 5), (1, 3), (0, 9)] {
            q.push(
                EventKey {
                    time_ps: 7,
                    origin_lp: lp,
                    origin_seq: seq,
                },
                (lp, seq),
            );
        }
        let order: Vec<_> = std::iter::from_fn(|| q.pop_before(8).map(|(_, e)| e)).collect();
        assert_eq!(order, vec![(0, 9), (1, 3), (1, 5), (2, 0)]);
    }
}
