//! The queue for small partitions: a 4-ary min-heap of 24-byte keys ([`SlotKey`]), each
//! pointing into a slab that holds the events: sifting moves keys, never event bodies, and a 4-ary heap halves the depth a pop walks (pops are
//! as frequent as pushes here). Freed slab slots are reused, so a steady-state run does not
//! allocate. Each pop asks the cache for the next top's event: in a heap of thousands (131,072
//! GPUs in the reduce-scatter) that event was written long ago and is no longer cached.

use sim_ir::event::EventKey;

use super::{Bodies, SlotKey};

/// A min-queue of events by [`EventKey`]: a 4-ary heap of keys over a slab of events.
#[derive(Debug)]
pub struct HeapQueue<E> {
    heap: Vec<SlotKey>,
    bodies: Bodies<E>,
}

const ARITY: usize = 4;

impl<E> Default for HeapQueue<E> {
    fn default() -> Self {
        HeapQueue {
            heap: Vec::new(),
            bodies: Bodies::default(),
        }
    }
}

impl<E> HeapQueue<E> {
    pub fn push(&mut self, key: EventKey, event: E) {
        let slot = self.bodies.insert(event);
        let entry = SlotKey::new(&key, slot);
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
        let heap = &mut self.heap[..];
        let n = heap.len();
        if n > 0 {
            // Sift the last key down from the root. The best child is carried by value and
            // the others are walked as one slice, so the loop indexes little it has to check.
            let mut i = 0;
            loop {
                let first = i * ARITY + 1;
                if first >= n {
                    break;
                }
                let (mut best, mut best_at) = (heap[first], first);
                let others = &heap[first + 1..(first + ARITY).min(n)];
                for (offset, child) in others.iter().enumerate() {
                    if child.before(&best) {
                        (best, best_at) = (*child, first + 1 + offset);
                    }
                }
                if !best.before(&last) {
                    break;
                }
                heap[i] = best;
                i = best_at;
            }
            heap[i] = last;
        }
        let event = self.bodies.take(top.slot)?;
        // The next pop reads the new top's event, which was written long ago: start loading
        // it while this one is handled.
        if let Some(next) = self.heap.first() {
            self.bodies.prefetch(next.slot);
        }
        Some((top.key(), event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Takes every pending event out, in no particular order.
    pub fn drain(&mut self) -> impl Iterator<Item = (EventKey, E)> + '_ {
        let bodies = &mut self.bodies;
        self.heap
            .drain(..)
            .filter_map(move |k| Some((k.key(), bodies.take(k.slot)?)))
    }

    /// Every pending event, in no particular order (checkpoints sort them).
    pub fn iter(&self) -> impl Iterator<Item = (EventKey, &E)> {
        self.heap
            .iter()
            .filter_map(|k| Some((k.key(), self.bodies.get(k.slot)?)))
    }
}
