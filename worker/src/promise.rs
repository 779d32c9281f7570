//! A partition's promise: the earliest time anything it does can reach another partition.
//!
//! An event at time `t` for an LP at node `x` causes nothing in another partition before
//! `t + d[x]`, `d` being [`Cut::distances`], or sooner than what the event itself says
//! ([`Cut::event_promise`]). The least of that over a
//! partition's pending events is its promise; the least promise over every partition (and
//! every event already in flight between them) ends the next window: a lower bound on the
//! time stamp of the next event any partition can send, as YAWNS computes it (Nicol,
//! "The cost of conservative synchronization in parallel discrete event simulations",
//! JACM 1993), with a lookahead per event instead of one per run. Windows then span the
//! stretches where every event is far, in latency, from every cut.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;

pub use sim_engine::cut::Cut;
use sim_engine::cut::TargetState;
use sim_engine::{Body, Event, Lp, SimModel};
use sim_ir::event::EventKey;
use sim_ir::time::SimTime;
use sim_models::topology::LinkId;

/// The promises of a partition's pending events, kept as a min-heap alongside its queue,
/// and of its GPUs' states. Entries of events already processed are dropped lazily: one
/// whose time is before the queue's next event cannot be pending. One at that time may stay
/// a little longer, which only makes the promise earlier, never wrong.
#[derive(Debug)]
pub struct PendingPromises {
    cut: Arc<Cut>,
    /// `(promise, t)` of the events pushed ([`Cut::event_promise`]).
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    /// LPs' promises from their states ([`StatePromises`]).
    states: StatePromises,
    /// Per link from another partition: the bytes of the segments pending here that
    /// arrive over it ([`TargetState::arriving_bytes`]).
    arriving: HashMap<LinkId, u64>,
    /// LPs with a state promise that handled events since it was last computed.
    touched: Vec<u32>,
    is_touched: Vec<bool>,
}

impl PendingPromises {
    pub fn new(cut: Arc<Cut>, lps: usize) -> Self {
        PendingPromises {
            cut,
            heap: BinaryHeap::new(),
            arriving: HashMap::new(),
            states: StatePromises::new(lps),
            touched: Vec::new(),
            is_touched: vec![false; lps],
        }
    }

    /// `event` at `key` was queued for `lp` (the target's state, [`Cut::event_promise`]);
    /// returns its promise.
    pub fn push(
        &mut self,
        model: &SimModel,
        key: &EventKey,
        event: &Event,
        lp: Option<&Lp>,
    ) -> u64 {
        let arriving_bytes = match self.arriving_link(model, event) {
            Some((link, bytes)) => {
                let total = self.arriving.entry(link).or_insert(0);
                *total += bytes;
                *total
            }
            None => 0,
        };
        let target = lp.map(|lp| TargetState { lp, arriving_bytes });
        let promise = self.cut.event_promise(model, key, event, target).as_ps();
        if promise != u64::MAX {
            self.heap.push(Reverse((promise, key.time.as_ps())));
        }
        promise
    }

    /// The link from another partition that segment `event` arrives over, and its bytes.
    fn arriving_link(&self, model: &SimModel, event: &Event) -> Option<(LinkId, u64)> {
        let Body::Segment(seg) = &event.body else {
            return None;
        };
        let up = model.topology.get_link(seg.ingress)?;
        let p = &self.cut.partition_of;
        (p[up.src as usize] != p[event.target as usize])
            .then_some((seg.ingress, u64::from(seg.bytes)))
    }

    /// `event` is being handled: it no longer arrives.
    pub fn handled(&mut self, model: &SimModel, event: &Event) {
        if let Some((link, bytes)) = self.arriving_link(model, event)
            && let Some(total) = self.arriving.get_mut(&link)
        {
            *total -= bytes;
            if *total == 0 {
                self.arriving.remove(&link);
            }
        }
    }

    /// Whether LP `node` has a state promise to compute again after it handles an event
    /// ([`Cut::watches`]).
    pub fn watches(&self, node: u32) -> bool {
        self.cut.watches(node)
    }

    /// LP `local` handled an event: its state promise is computed again before the next
    /// report.
    pub fn touch(&mut self, local: u32) {
        let flag = &mut self.is_touched[local as usize];
        if !*flag {
            *flag = true;
            self.touched.push(local);
        }
    }

    /// Computes the promise of LP `local` (topology node `node`) from its state, if it has
    /// one ([`Cut::state_bounds`]), as of `not_before_ps` at the earliest.
    pub fn settle_lp(
        &mut self,
        model: &SimModel,
        local: u32,
        node: u32,
        lp: &mut Lp,
        not_before_ps: u64,
    ) {
        if let Some(bounds) = self.cut.state_bounds(model, node, lp, not_before_ps) {
            self.states.set(local as usize, bounds);
        }
    }

    /// The LPs whose state bounds a window ending at `window_end_ps` passed and that were
    /// not settled again as of that end: settled then, they may promise later
    /// ([`StatePromises::take_passed`]).
    pub fn take_passed(&mut self, window_end_ps: u64) -> Vec<u32> {
        self.states.take_passed(window_end_ps)
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
        pending: impl FnOnce() -> Vec<(EventKey, &'a Event, Option<&'a Lp>)>,
    ) -> Promise {
        let (states, waiting_distance_ps) = self.states.min(window_end_ps);
        let promise = |at_ps: u64| Promise {
            at: SimTime::from_ps(at_ps),
            waiting_distance: SimTime::from_ps(waiting_distance_ps),
        };
        let Some(next) = next_time_ps else {
            self.heap.clear();
            return promise(states);
        };
        if self.heap.len() > 2 * queued + 64 {
            self.heap.clear();
            self.arriving.clear();
            for (key, event, lp) in pending() {
                self.push(model, &key, event, lp);
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
/// before `at`, nor, from its waiting GPUs, before the next event anywhere plus
/// `waiting_distance` ([`SimTime::MAX`]: none waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promise {
    pub at: SimTime,
    pub waiting_distance: SimTime,
}

impl Promise {
    pub const NONE: Promise = Promise {
        at: SimTime::MAX,
        waiting_distance: SimTime::MAX,
    };
}

/// The LPs' state promises: one sends across the cut no sooner than `from + reach` for each
/// of its bounds ([`Cut::state_bounds`]), and only while handling an event, which is no sooner
/// than the next event anywhere: so at `max(from, next event) + reach`. A lazy min-heap on
/// `from + reach` holds the bounds whose `from` is still ahead of the last window's end;
/// those it passed wait, each promising the next event plus its reach, and a count per
/// reach keeps the least of them.
#[derive(Debug)]
struct StatePromises {
    heap: BinaryHeap<Reverse<Bound>>,
    /// Per LP: the version of its bounds, and the reaches of those waiting.
    version: Vec<u32>,
    waiting_reach: Vec<[u64; 2]>,
    /// Per LP: the window end its bounds were last settled as of ([`StatePromises::take_passed`]).
    settled_at: Vec<u64>,
    /// How many waiting bounds have each reach.
    waiting: BTreeMap<u64, u32>,
    /// The heap's length beyond which its stale entries are dropped.
    compact_above: usize,
}

/// A state bound in the heap: ordered by its promise `from + reach` first, then by `from`,
/// `reach`, `local` and `version`. The promise is not stored: 24 bytes where 32 were, and
/// a worker of four at 131,072 GPUs holds half a million of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bound {
    from: u64,
    reach: u64,
    local: u32,
    version: u32,
}

impl Bound {
    fn at(&self) -> u64 {
        self.from.saturating_add(self.reach)
    }

    fn key(&self) -> (u64, u64, u64, u32, u32) {
        (self.at(), self.from, self.reach, self.local, self.version)
    }
}

impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl StatePromises {
    fn new(lps: usize) -> Self {
        StatePromises {
            heap: BinaryHeap::new(),
            version: vec![0; lps],
            waiting_reach: vec![[u64::MAX; 2]; lps],
            settled_at: vec![u64::MAX; lps],
            waiting: BTreeMap::new(),
            compact_above: 64,
        }
    }

    /// LP `local`'s bounds are now `bounds`, each `(from, reach)`.
    fn set(&mut self, local: usize, bounds: [(u64, u64); 2]) {
        self.version[local] = self.version[local].wrapping_add(1);
        for reach in std::mem::replace(&mut self.waiting_reach[local], [u64::MAX; 2]) {
            self.unwait(reach);
        }
        for (from, reach) in bounds {
            if from != u64::MAX && reach != u64::MAX {
                self.heap.push(Reverse(Bound {
                    from,
                    reach,
                    local: local as u32,
                    version: self.version[local],
                }));
            }
        }
        // Bounds set again leave their old entries behind until those reach the top, and
        // far ones never do while nearer ones come: at 131,072 GPUs on 4 workers they held
        // most of a gigabyte per worker. Dropped once the heap holds more than twice (plus
        // 64) what was live at the last drop, so it stays within about twice its live
        // entries (two per LP at most), and the pushes since the last drop pay for the next:
        // O(1) amortised. Stale entries are skipped when they reach the top anyway, so when
        // they go changes no promise.
        if self.heap.len() > self.compact_above {
            let version = &self.version;
            self.heap
                .retain(|Reverse(b)| b.version == version[b.local as usize]);
            self.compact_above = 2 * self.heap.len() + 64;
        }
    }

    /// Pops the bounds a window ending at `window_end_ps` passed whose LPs were not yet
    /// settled as of that end, and returns those LPs: an LP handles no event before the
    /// window's end, so settled as of it, its bounds move on by the time passed (the
    /// kernels a GPU waits for cannot all have run by then). Bounds passed again, settled
    /// as of this end already, wait ([`StatePromises::min`]).
    fn take_passed(&mut self, window_end_ps: u64) -> Vec<u32> {
        let mut passed = Vec::new();
        while let Some(&Reverse(b)) = self.heap.peek() {
            let l = b.local as usize;
            if b.version != self.version[l] {
                self.heap.pop();
            } else if b.from < window_end_ps && self.settled_at[l] != window_end_ps {
                self.heap.pop();
                // Its other bound, if any, is set again with it.
                self.version[l] = self.version[l].wrapping_add(1);
                self.settled_at[l] = window_end_ps;
                passed.push(b.local);
            } else {
                break;
            }
        }
        passed
    }

    fn unwait(&mut self, reach: u64) {
        if reach == u64::MAX {
            return;
        }
        if let Some(n) = self.waiting.get_mut(&reach) {
            *n -= 1;
            if *n == 0 {
                self.waiting.remove(&reach);
            }
        }
    }

    /// The least promise of the bounds not waiting, and the least reach of those waiting.
    fn min(&mut self, window_end_ps: u64) -> (u64, u64) {
        while let Some(&Reverse(bound)) = self.heap.peek() {
            let Bound {
                from,
                reach,
                local,
                version,
            } = bound;
            let l = local as usize;
            if version != self.version[l] {
                self.heap.pop();
            } else if from < window_end_ps
                || (from == window_end_ps && self.settled_at[l] == window_end_ps)
            {
                self.heap.pop();
                let slot = &mut self.waiting_reach[l];
                let free = if slot[0] == u64::MAX { 0 } else { 1 };
                slot[free] = reach;
                *self.waiting.entry(reach).or_insert(0) += 1;
            } else {
                return (bound.at(), self.waiting_reach());
            }
        }
        (u64::MAX, self.waiting_reach())
    }

    fn waiting_reach(&self) -> u64 {
        self.waiting.keys().next().copied().unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: (u64, u64) = (u64::MAX, u64::MAX);

    #[test]
    fn a_gpu_promises_from_each_bound_or_the_window_end_plus_its_reach() {
        let mut g = StatePromises::new(3);
        g.set(0, [(1_000, 50), NONE]);
        g.set(1, [(400, 50), NONE]);
        g.set(2, [(u64::MAX, 50), (100, u64::MAX)]);
        // GPU 1's bound is ahead of the window end: its own promise.
        assert_eq!(g.min(300), (450, u64::MAX));
        // Passed by the window end, it waits for the next event.
        assert_eq!(g.min(600), (1_050, 50));
        assert_eq!(g.min(2_000), (u64::MAX, 50));
        // Set again, they stop waiting.
        g.set(1, [(5_000, 50), NONE]);
        g.set(0, [(6_000, 50), NONE]);
        assert_eq!(g.min(2_000), (5_050, u64::MAX));
    }

    #[test]
    fn a_passed_bound_is_settled_again_as_of_the_window_end_once() {
        let mut g = StatePromises::new(2);
        g.set(0, [(100, 50), (200, 70)]);
        g.set(1, [(5_000, 50), NONE]);
        // The window ended at 300: LP 0's bounds are passed, LP 1's are not.
        assert_eq!(g.take_passed(300), vec![0]);
        assert_eq!(g.take_passed(300), Vec::<u32>::new());
        // Settled as of 300, its kernels still to run: it promises on, waiting for nothing.
        g.set(0, [(900, 50), NONE]);
        assert_eq!(g.min(300), (950, u64::MAX));
        // Passed again at 1,000 and settled as of then with nothing left to run: it waits.
        assert_eq!(g.take_passed(1_000), vec![0]);
        g.set(0, [(1_000, 50), NONE]);
        assert_eq!(g.min(1_000), (5_050, 50));
    }

    #[test]
    fn bounds_set_again_do_not_pile_up() {
        let mut g = StatePromises::new(2);
        g.set(1, [(10, 5), NONE]);
        for i in 0..10_000 {
            // Far bounds, set again and again, never reach the top past LP 1's.
            g.set(0, [(1_000_000 + i, 50), (2_000_000 + i, 70)]);
        }
        // Three live bounds: the heap is compacted past twice them plus 64.
        assert!(g.heap.len() <= 2 * 3 + 64 + 2, "{} entries", g.heap.len());
        assert_eq!(g.min(0), (15, u64::MAX));
        g.set(1, [NONE, NONE]);
        assert_eq!(g.min(0), (1_000_000 + 9_999 + 50, u64::MAX));
    }

    #[test]
    fn only_the_bounds_still_waiting_give_the_waiting_reach() {
        let mut g = StatePromises::new(2);
        // GPU 0 runs an op reaching far, and may start one reaching near at 10,000.
        g.set(0, [(100, 9_000), (10_000, 20)]);
        g.set(1, [(100, 7_000), NONE]);
        assert_eq!(g.min(500), (10_020, 7_000));
        // GPU 1's op ended: the waiting reach is GPU 0's alone, not the least ever seen.
        g.set(1, [NONE, NONE]);
        assert_eq!(g.min(600), (10_020, 9_000));
        // Past 10,000 GPU 0's second bound waits too, and is the nearer.
        assert_eq!(g.min(10_500), (u64::MAX, 20));
        g.set(0, [NONE, NONE]);
        assert_eq!(g.min(10_600), (u64::MAX, u64::MAX));
    }
}
