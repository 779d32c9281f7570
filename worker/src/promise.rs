//! A partition's promise: the earliest time anything it does can reach another partition.
//!
//! An event at time `t` for an LP at node `x` causes nothing in another partition before
//! `t + d[x]`, `d` being [`sim::engine::SimModel::cut_distances_ps`]. The least of that over a
//! partition's pending events is its promise; the least promise over every partition (and
//! every event already in flight between them) ends the next window: a lower bound on the
//! time stamp of the next event any partition can send, as YAWNS computes it (Nicol,
//! "The cost of conservative synchronization in parallel discrete event simulations",
//! JACM 1993), with a lookahead per event instead of one per run. Windows then span the
//! stretches where every event is far, in latency, from every cut.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use sim::engine::{Event, Lp, SimModel};
use sim::event::EventKey;

/// Where a run's partitions meet: per topology node, the least delay from an event there to
/// another partition ([`SimModel::cut_distances_ps`]), and whether its promise may come from
/// its GPU's state ([`SimModel::gpus_with_whole_host`]).
#[derive(Debug)]
pub struct Cut {
    pub distances: Vec<u64>,
    pub gpu_state: Vec<bool>,
}

impl Cut {
    pub fn new(model: &SimModel, partition_of: &[u32]) -> Self {
        Cut {
            distances: model.cut_distances_ps(partition_of),
            gpu_state: model.gpus_with_whole_host(partition_of),
        }
    }
}

/// The promises of a partition's pending events, kept as a min-heap alongside its queue,
/// and of its GPUs' states. Entries of events already processed are dropped lazily: one
/// whose time is before the queue's next event cannot be pending. One at that time may stay
/// a little longer, which only makes the promise earlier, never wrong.
#[derive(Debug)]
pub struct PendingPromises {
    cut: Arc<Cut>,
    /// `(t + d[target], t)` of the events pushed.
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    /// GPUs' promises from their states ([`GpuPromises`]).
    gpus: GpuPromises,
    /// GPU LPs that handled events since their promise was last computed.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
}

impl PendingPromises {
    pub fn new(cut: Arc<Cut>, lps: usize) -> Self {
        PendingPromises {
            cut,
            heap: BinaryHeap::new(),
            gpus: GpuPromises::new(lps),
            touched: Vec::new(),
            is_touched: vec![false; lps],
        }
    }

    /// The promise of an event at `time_ps` for node `target`.
    pub fn of(distances: &[u64], target: u32, time_ps: u64) -> u64 {
        time_ps.saturating_add(distances[target as usize])
    }

    /// The promise of `event` at `key`, `u64::MAX` when its target's own promise covers it
    /// ([`SimModel::promise_follows_event`]).
    pub fn of_event(cut: &Cut, model: &SimModel, key: &EventKey, event: &Event) -> u64 {
        if model.promise_follows_event(event) {
            Self::of(&cut.distances, event.target, key.time_ps)
        } else {
            u64::MAX
        }
    }

    /// `event` at `key` was queued.
    pub fn push(&mut self, model: &SimModel, key: &EventKey, event: &Event) {
        let promise = Self::of_event(&self.cut, model, key, event);
        if promise != u64::MAX {
            self.heap.push(Reverse((promise, key.time_ps)));
        }
    }

    /// GPU LP `local` handled an event: its promise is computed again before the next
    /// report.
    pub fn touch(&mut self, local: u32) {
        let flag = &mut self.is_touched[local as usize];
        if !*flag {
            *flag = true;
            self.touched.push(local);
        }
    }

    /// Computes the promise of LP `local` (topology node `node`) from its state, if it has
    /// one (a GPU's [`Lp::off_host_quiet_until`]; a GPU whose host is split among
    /// partitions may send to it at any event, so it waits from the start).
    pub fn settle_lp(&mut self, model: &SimModel, local: u32, node: u32, lp: &mut Lp) {
        let n = node as usize;
        if let Some(quiet) = lp.off_host_quiet_until(model) {
            let quiet = if self.cut.gpu_state[n] { quiet } else { 0 };
            self.gpus.set(local as usize, quiet, self.cut.distances[n]);
        }
    }

    /// The LPs touched since the last call, clearing the list.
    pub fn take_touched(&mut self) -> Vec<u32> {
        for &l in &self.touched {
            self.is_touched[l as usize] = false;
        }
        std::mem::take(&mut self.touched)
    }

    /// The partition's promise given its queue's next event time and length, after a
    /// window that ended at `window_end_ps` (so no event anywhere is earlier): `u64::MAX`
    /// when nothing can ever leave it. Rebuilds the event heap from `pending` when processed
    /// entries outnumber the pending ones, so the heap stays within a few times the queue.
    pub fn promise<'a>(
        &mut self,
        model: &SimModel,
        window_end_ps: u64,
        next_time_ps: Option<u64>,
        queued: usize,
        pending: impl FnOnce() -> Vec<(EventKey, &'a Event)>,
    ) -> Promise {
        let (states, waiting_distance_ps) = self.gpus.min(window_end_ps);
        let promise = |at_ps: u64| Promise {
            at_ps,
            waiting_distance_ps,
        };
        let Some(next) = next_time_ps else {
            self.heap.clear();
            return promise(states);
        };
        if self.heap.len() > 2 * queued + 64 {
            self.heap.clear();
            for (key, event) in pending() {
                self.push(model, &key, event);
            }
        }
        while let Some(&Reverse((at, t))) = self.heap.peek() {
            if t >= next {
                return promise(at.min(states));
            }
            self.heap.pop();
        }
        promise(states)
    }
}

/// What a partition (or a worker) promises: nothing it holds reaches another partition
/// before `at_ps`, nor, from its waiting GPUs, before the next event anywhere plus
/// `waiting_distance_ps` (`u64::MAX`: none waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promise {
    pub at_ps: u64,
    pub waiting_distance_ps: u64,
}

impl Promise {
    pub const NONE: Promise = Promise {
        at_ps: u64::MAX,
        waiting_distance_ps: u64::MAX,
    };
}

/// The GPUs' promises: a GPU sends out of its host no sooner than its quiet time
/// ([`Lp::off_host_quiet_until`]), and only while handling an event, which is no sooner than
/// the next event anywhere: so at `max(quiet, next event)` plus its distance. A lazy
/// min-heap on quiet time plus distance holds the GPUs whose quiet time is still ahead of
/// the last window's end; those it passed wait, each promising the next event plus the
/// least distance of any.
#[derive(Debug)]
struct GpuPromises {
    heap: BinaryHeap<Reverse<(u64, u64, u32, u32)>>,
    /// Per LP: the version of its last entry, and whether that entry went low.
    version: Vec<u32>,
    low: Vec<bool>,
    lows: usize,
    least_low_distance: u64,
}

impl GpuPromises {
    fn new(lps: usize) -> Self {
        GpuPromises {
            heap: BinaryHeap::new(),
            version: vec![0; lps],
            low: vec![false; lps],
            lows: 0,
            least_low_distance: u64::MAX,
        }
    }

    /// GPU `local`'s quiet time is now `quiet`, its distance `distance`.
    fn set(&mut self, local: usize, quiet: u64, distance: u64) {
        self.version[local] = self.version[local].wrapping_add(1);
        if std::mem::take(&mut self.low[local]) {
            self.lows -= 1;
        }
        if quiet != u64::MAX {
            let promise = quiet.saturating_add(distance);
            self.heap
                .push(Reverse((promise, quiet, local as u32, self.version[local])));
        }
        // Kept as the least over every GPU ever set: no larger than the true one.
        self.least_low_distance = self.least_low_distance.min(distance);
    }

    /// The least promise of the GPUs not waiting, and the least distance of those waiting.
    fn min(&mut self, window_end_ps: u64) -> (u64, u64) {
        while let Some(&Reverse((promise, quiet, local, version))) = self.heap.peek() {
            let l = local as usize;
            if version != self.version[l] {
                self.heap.pop();
            } else if quiet < window_end_ps {
                self.heap.pop();
                self.low[l] = true;
                self.lows += 1;
            } else {
                return (promise, self.waiting_distance());
            }
        }
        (u64::MAX, self.waiting_distance())
    }

    fn waiting_distance(&self) -> u64 {
        if self.lows > 0 {
            self.least_low_distance
        } else {
            u64::MAX
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_promises_its_time_plus_its_targets_distance() {
        let d = [5, 100];
        assert_eq!(PendingPromises::of(&d, 1, 10), 110);
        assert_eq!(PendingPromises::of(&d, 0, u64::MAX - 1), u64::MAX);
    }

    #[test]
    fn a_gpu_promises_its_quiet_time_or_the_window_end_plus_its_distance() {
        let mut g = GpuPromises::new(3);
        g.set(0, 1_000, 50);
        g.set(1, 400, 50);
        g.set(2, u64::MAX, 50);
        // GPU 1's quiet time is ahead of the window end: its own promise.
        assert_eq!(g.min(300), (450, u64::MAX));
        // Passed by the window end, it waits for the next event.
        assert_eq!(g.min(600), (1_050, 50));
        assert_eq!(g.min(2_000), (u64::MAX, 50));
        // Set again, they stop waiting.
        g.set(1, 5_000, 50);
        g.set(0, 6_000, 50);
        assert_eq!(g.min(2_000), (5_050, u64::MAX));
    }
}
