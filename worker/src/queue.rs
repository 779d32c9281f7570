//! The pending-event queue of one partition, ordered by [`EventKey`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use sim::event::EventKey;

/// A min-queue of events keyed by `(time, origin LP, origin sequence)`. Keys are unique, so the
/// pop order is total and independent of insertion order: the basis of partition-independent
/// results.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
}

#[derive(Debug)]
struct Entry<E> {
    key: EventKey,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
        }
    }
}

impl<E> EventQueue<E> {
    pub fn push(&mut self, key: EventKey, event: E) {
        self.heap.push(Reverse(Entry { key, event }));
    }

    /// Time of the earliest pending event.
    pub fn next_time_ps(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse(e)| e.key.time_ps)
    }

    /// Pops the earliest event if it is before `end_ps` (the window's end, exclusive).
    pub fn pop_before(&mut self, end_ps: u64) -> Option<(EventKey, E)> {
        if self.next_time_ps()? >= end_ps {
            return None;
        }
        self.heap.pop().map(|Reverse(e)| (e.key, e.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
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
        /// Whatever order events arrive in, they leave in key order.
        #[test]
        fn pops_in_key_order_regardless_of_push_order(
            mut keys in proptest::collection::vec((0u64..50, 0u32..4, 0u64..1000), 1..200)
        ) {
            keys.sort();
            keys.dedup();
            let mut shuffled = keys.clone();
            shuffled.reverse();
            let mut q = EventQueue::default();
            for &(t, lp, seq) in &shuffled {
                q.push(EventKey { time_ps: t, origin_lp: lp, origin_seq: seq }, ());
            }
            let mut out = Vec::new();
            while let Some((k, ())) = q.pop_before(u64::MAX) {
                out.push((k.time_ps, k.origin_lp, k.origin_seq));
            }
            prop_assert_eq!(out, keys);
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
}
