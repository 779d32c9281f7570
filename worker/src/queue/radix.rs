//! The queue for large partitions: a radix heap on the time stamp (Ahuja, Mehlhorn, Orlin
//! and Tarjan, "Faster algorithms for the shortest path problem", JACM 1990, §3): an event
//! at time `t`, later than the last popped time `last`, sits in bucket
//! `1 + ⌊log2(t XOR last)⌋`, and only the lowest non-empty bucket is ever scanned and split.
//! Pushes append to a vector and pops walk vectors front to back, so the queue streams
//! through memory instead of chasing a heap's cache lines: at 131,072 GPUs a partition holds
//! tens of thousands of pending events, and a 4-ary heap of them spent a third of the run in
//! cache misses. Events live in the buckets themselves (no slab to miss in). Bucket 0 holds
//! the events at (or, for a late push, before) `last`: a vector sorted by the full key once
//! per split (ties in time pop by origin LP, then origin sequence), plus a small binary heap
//! for pushes that land on `last` while it drains: a symmetric workload puts thousands of
//! events on the same picosecond, and sorting them once is cheaper than sifting each through
//! a heap.
//!
//! The engine's time never runs backwards inside a partition: an LP emits at or after its
//! event's time, and a peer's event is at or after the window it was sent in ends. Should a
//! push still land before `last`, bucket 0 takes it and it pops first, in key order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use sim_ir::event::EventKey;

/// Buckets: 0 for `time <= last`, then one per bit position of `time XOR last`.
const BUCKETS: usize = 65;

/// Entries an emptied bucket keeps room for beyond the events pending, and every bucket once
/// the queue is empty. A burst leaves every bucket it passed through as large as it got:
/// kept whole, those buffers held room for 1.6 times the burst for the rest of the run
/// (`a_drained_burst_leaves_bounded_room`), and at 131,072 GPUs on 4 workers they were
/// 155 MB of one worker's 645 MB heap peak (heaptrack). Room up to the pending count is
/// kept: shrinking to 1,024 at every split made a steady 65,536-event queue 67% slower
/// (`cargo bench -p worker --bench queue`).
const KEPT_ROOM: usize = 1024;

/// A min-queue of events by [`EventKey`]: a radix heap on time.
#[derive(Debug)]
pub struct RadixQueue<E> {
    /// The time of the last bucket split (the latest popped time, or earlier).
    last: u64,
    /// Events at `last` from the last split, sorted latest key first (pop from the end).
    now: Vec<Entry<E>>,
    /// Events pushed at or before `last` since the split, earliest key on top.
    late: BinaryHeap<Entry<E>>,
    /// `buckets[b]` (b ≥ 1): events whose `time XOR last` has its highest set bit at `b - 1`.
    buckets: Vec<Vec<Entry<E>>>,
    /// The earliest time in each bucket (`u64::MAX` when empty).
    bucket_min: [u64; BUCKETS],
    /// Bit `b` set when `buckets[b]` is not empty.
    occupied: u128,
    len: usize,
}

#[derive(Debug)]
struct Entry<E> {
    key: EventKey,
    event: E,
}

// `BinaryHeap` is a max-heap: the earliest key compares greatest.
impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

impl<E> Default for RadixQueue<E> {
    fn default() -> Self {
        RadixQueue {
            last: 0,
            now: Vec::new(),
            late: BinaryHeap::new(),
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            bucket_min: [u64::MAX; BUCKETS],
            occupied: 0,
            len: 0,
        }
    }
}

impl<E> RadixQueue<E> {
    pub fn push(&mut self, key: EventKey, event: E) {
        self.len += 1;
        self.place(Entry { key, event });
    }

    fn place(&mut self, entry: Entry<E>) {
        if entry.key.time.as_ps() <= self.last {
            self.late.push(entry);
            return;
        }
        self.place_ahead(entry);
    }

    /// Files an event later than `last` in its bucket.
    fn place_ahead(&mut self, entry: Entry<E>) {
        let b = (u64::BITS - (entry.key.time.as_ps() ^ self.last).leading_zeros()) as usize;
        self.bucket_min[b] = self.bucket_min[b].min(entry.key.time.as_ps());
        self.occupied |= 1 << b;
        self.buckets[b].push(entry);
    }

    /// Time of the earliest pending event.
    pub fn next_time_ps(&self) -> Option<u64> {
        match (self.now.last(), self.late.peek()) {
            (Some(a), Some(b)) => return Some(a.key.time.min(b.key.time).as_ps()),
            (Some(a), None) => return Some(a.key.time.as_ps()),
            (None, Some(b)) => return Some(b.key.time.as_ps()),
            (None, None) => {}
        }
        (self.occupied != 0).then(|| self.bucket_min[self.occupied.trailing_zeros() as usize])
    }

    /// Pops the earliest event if it is before `end_ps` (the window's end, exclusive).
    pub fn pop_before(&mut self, end_ps: u64) -> Option<(EventKey, E)> {
        if self.next_time_ps()? >= end_ps {
            return None;
        }
        if self.now.is_empty() && self.late.is_empty() {
            self.split_lowest();
        }
        // `Entry`'s order is reversed: the greater entry is the earlier key.
        let from_late = match (self.now.last(), self.late.peek()) {
            (Some(a), Some(b)) => b > a,
            (None, _) => true,
            (Some(_), None) => false,
        };
        let entry = if from_late {
            self.late.pop()?
        } else {
            self.now.pop()?
        };
        self.len -= 1;
        if self.len == 0 {
            self.now.shrink_to(KEPT_ROOM);
            self.late.shrink_to(KEPT_ROOM);
            for bucket in &mut self.buckets {
                bucket.shrink_to(KEPT_ROOM);
            }
        }
        Some((entry.key, entry.event))
    }

    /// Moves `last` up to the lowest bucket's earliest time and spreads that bucket over the
    /// lower ones; its earliest events land in `now`. Only called with `now` and `late`
    /// empty.
    fn split_lowest(&mut self) {
        if self.occupied == 0 {
            return;
        }
        let b = self.occupied.trailing_zeros() as usize;
        self.last = self.bucket_min[b];
        self.bucket_min[b] = u64::MAX;
        self.occupied &= !(1 << b);
        let mut moving = std::mem::take(&mut self.buckets[b]);
        let kept = KEPT_ROOM.max(self.len);
        self.now.shrink_to(kept);
        for entry in moving.drain(..) {
            if entry.key.time.as_ps() == self.last {
                self.now.push(entry);
            } else {
                self.place_ahead(entry);
            }
        }
        // Ascending `Entry` order is latest key first.
        if self.now.len() > 1 {
            self.now.sort_unstable();
        }
        // Keep the emptied vector's capacity for the next events of this bucket, up to a
        // bound.
        moving.shrink_to(kept);
        self.buckets[b] = moving;
    }

    /// The `n`-th event to pop from now, where that is known without a split: a hint.
    pub fn peek(&self, n: usize) -> Option<&E> {
        if let Some(late) = self.late.peek() {
            return match (n, self.now.last()) {
                (0, Some(a)) if a > late => Some(&a.event),
                (0, _) => Some(&late.event),
                _ => None,
            };
        }
        let i = self.now.len().checked_sub(1 + n)?;
        Some(&self.now[i].event)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Takes every pending event out, in no particular order.
    pub fn drain(&mut self) -> impl Iterator<Item = (EventKey, E)> + '_ {
        self.len = 0;
        self.occupied = 0;
        self.bucket_min = [u64::MAX; BUCKETS];
        self.now
            .drain(..)
            .chain(self.late.drain())
            .chain(self.buckets.iter_mut().flat_map(|b| b.drain(..)))
            .map(|e| (e.key, e.event))
    }

    /// Every pending event, in no particular order (checkpoints sort them).
    pub fn iter(&self) -> impl Iterator<Item = (EventKey, &E)> {
        self.now
            .iter()
            .chain(self.late.iter())
            .chain(self.buckets.iter().flatten())
            .map(|e| (e.key, &e.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim_ir::time::SimTime;

    impl<E> RadixQueue<E> {
        /// Entries the queue has room for, pending or not.
        fn room(&self) -> usize {
            self.now.capacity()
                + self.late.capacity()
                + self.buckets.iter().map(Vec::capacity).sum::<usize>()
        }
    }

    /// A burst's buffers go once it has drained: the room kept is bounded per bucket, not
    /// by the largest burst (which every bucket it passes through once held).
    #[test]
    fn a_drained_burst_leaves_bounded_room() {
        let mut q = RadixQueue::default();
        let burst = 200_000u64;
        for i in 0..burst {
            // Spread over many buckets, so each split passes the burst down a level.
            let key = EventKey {
                time: SimTime::from_ps(1 + i * 7919 % (1 << 30)),
                origin_lp: 0,
                origin_seq: i,
            };
            q.push(key, i);
        }
        assert!(q.room() >= burst as usize);
        let mut last = 0;
        while let Some((key, _)) = q.pop_before(u64::MAX) {
            assert!(key.time.as_ps() >= last);
            last = key.time.as_ps();
        }
        assert_eq!(q.len(), 0);
        assert!(
            q.room() <= BUCKETS * KEPT_ROOM,
            "{} entries of room kept after the burst drained",
            q.room()
        );
    }
}
