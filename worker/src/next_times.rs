//! The earliest pending event of each partition, kept cheaply between windows.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Earliest pending event of each partition, with a lazy min-heap over them: between windows
/// only the partitions that ran or received events are looked at, never all of them.
#[derive(Debug, Default)]
pub struct NextTimes {
    time: Vec<u64>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
}

impl NextTimes {
    pub fn new(partitions: usize) -> Self {
        NextTimes {
            time: vec![u64::MAX; partitions],
            heap: BinaryHeap::new(),
        }
    }

    /// The partition's earliest pending event is now `time`.
    pub fn set(&mut self, slot: usize, time: Option<u64>) {
        let t = time.unwrap_or(u64::MAX);
        if self.time[slot] != t {
            self.time[slot] = t;
            if t != u64::MAX {
                self.heap.push(Reverse((t, slot)));
            }
        }
    }

    /// The partition's time as last set or lowered (`u64::MAX`: none).
    pub fn get(&self, slot: usize) -> u64 {
        self.time[slot]
    }

    /// The partition received an event at `t`.
    pub fn lower(&mut self, slot: usize, t: u64) {
        if t < self.time[slot] {
            self.time[slot] = t;
            self.heap.push(Reverse((t, slot)));
        }
    }

    /// Drops heap entries that no longer match their partition's next time.
    pub fn clean_top(&mut self) {
        while let Some(&Reverse((t, slot))) = self.heap.peek() {
            if self.time[slot] == t {
                return;
            }
            self.heap.pop();
        }
    }

    pub fn min(&mut self) -> u64 {
        self.clean_top();
        self.heap.peek().map_or(u64::MAX, |Reverse((t, _))| *t)
    }

    /// Partitions with an event before `end`, into `out`; their entries leave the heap.
    pub fn take_before(&mut self, end: u64, out: &mut Vec<usize>) {
        out.clear();
        loop {
            self.clean_top();
            match self.heap.peek() {
                Some(&Reverse((t, slot))) if t < end => {
                    self.heap.pop();
                    self.time[slot] = u64::MAX;
                    out.push(slot);
                }
                _ => return,
            }
        }
    }
}
