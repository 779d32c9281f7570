//! The threads of one worker: the worker thread plus `threads − 1` helpers that stay alive
//! for the whole run. Every partition has a home thread, chosen from measured load (UNISON's
//! load-adaptive scheduling, Bai et al., EuroSys'24 §4.3) and changed rarely, so LP state stays
//! in one core's cache; in a window each thread runs its partitions longest first, then takes
//! the ones other threads have not started. Helpers spin briefly between windows (windows are
//! short and back to back), then sleep until the next one.
//!
//! A thread that finished a partition's window sorts that partition's outbox by target
//! partition into buffers of its own, without locks; once it has run all its partitions of
//! the window, it moves each buffer into its target's incoming box (UNISON's per-LP
//! mailboxes, §4.2), in parallel with the other threads. A partition moves its incoming box
//! into its queue when it next runs. What each thread did is left in its [`ThreadResult`]
//! for the worker thread to fold in between windows, so the serial part of a window stays
//! small.
//!
//! Shared mutable state: the claim counters, each partition's mutex (taken once per window
//! by the one thread that claimed it) and each incoming box's mutex (taken once per window
//! by each thread that has events for it), each on cache lines of its own. Nothing in the
//! event loop locks.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use sim::engine::{Event, SimModel};
use sim::event::EventKey;

use crate::partition::{CausalityError, LpMap, Partition};

/// Rounds a waiting thread spins before it sleeps: windows are short and back to back, so a
/// sleep and wake-up per window would dominate.
const SPINS: u32 = 50_000;
/// Rounds a waiting thread yields its core before it sleeps, when threads outnumber cores.
const YIELDS_OVERSUBSCRIBED: u32 = 200;

/// Waits a little for `ready` without sleeping: spins when every thread has a core of its
/// own, yields the core when threads outnumber cores. Returns whether `ready` came true; if
/// not, the caller goes to sleep on its condition variable.
pub fn wait_briefly(oversubscribed: bool, ready: impl Fn() -> bool) -> bool {
    let rounds = if oversubscribed {
        YIELDS_OVERSUBSCRIBED
    } else {
        SPINS
    };
    for _ in 0..rounds {
        if ready() {
            return true;
        }
        relax(oversubscribed);
    }
    ready()
}

/// One round of waiting awake: a spin when every thread has a core of its own, else the
/// core is yielded to a thread that may need it.
fn relax(oversubscribed: bool) {
    if oversubscribed {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Keeps a value on its own cache line (two, for adjacent-line prefetch) so threads that
/// write neighbouring values do not slow each other down.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Keyed events in transit between partitions.
pub type Events = Vec<(EventKey, Event)>;

/// Where the events of a partition go: partitions of this worker by slot, others by worker.
#[derive(Debug)]
pub struct Routing {
    /// Slot of each partition in this worker, `u32::MAX` when another worker owns it.
    pub slot_of: Vec<u32>,
    /// Worker owning each partition.
    pub owner: Arc<Vec<u32>>,
    pub workers: u32,
}

/// What one thread did in the last window (or at start-up), for the worker thread to fold in.
#[derive(Debug, Default)]
pub struct ThreadResult {
    pub events: u64,
    /// Every partition that ran: slot, its earliest pending event afterwards, its events.
    pub ran: Vec<(usize, Option<u64>, u64)>,
    /// Events put into incoming boxes: slot and the earliest time among them.
    pub delivered: Vec<(usize, u64)>,
    /// Events for partitions of other workers, by worker.
    pub outgoing: Vec<Events>,
    pub cross_partition_events: u64,
    pub error: Option<CausalityError>,
    /// Events for this worker's partitions, by slot, until the thread's window ends.
    staged: Vec<Events>,
    /// Slots with staged events, in the order they got their first.
    staged_slots: Vec<usize>,
}

/// Partitions, incoming boxes and thread results are padded to their own cache lines:
/// neighbours in these vectors run on different threads, and a line shared at their border
/// would be written by both on every event. The gain is within this VM's noise
/// (docs/engine.md, "What wider windows would buy").
pub struct Shared {
    pub partitions: Vec<Padded<Mutex<Partition>>>,
    /// Events for each partition from other partitions, not yet in its queue.
    pub incoming: Vec<Padded<Mutex<Events>>>,
    pub results: Vec<Padded<Mutex<ThreadResult>>>,
    model: Arc<SimModel>,
    map: Arc<LpMap>,
    pub routing: Routing,
    /// The current window: end time and, per thread, the slots homed there, longest first.
    job: Mutex<(u64, Vec<Vec<usize>>)>,
    generation: Padded<AtomicU64>,
    /// Claim counter of each thread's list.
    next: Vec<Padded<AtomicUsize>>,
    finished_helpers: Padded<AtomicUsize>,
    /// Threads take partitions other threads have not started (set per window).
    steal: AtomicBool,
    stop: AtomicBool,
    sleepers: Mutex<u32>,
    wake: Condvar,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Runs the thread's own partitions, longest first, then (when stealing) helps the
    /// others, taking what they have not started, until nothing is left.
    fn work(&self, end: u64, lists: &[Vec<usize>], me: usize) {
        let mut res = lock(&self.results[me]);
        let lists_worked = if self.steal.load(Ordering::Relaxed) {
            lists.len()
        } else {
            1
        };
        for k in 0..lists_worked {
            let t = (me + k) % lists.len();
            loop {
                let i = self.next[t].fetch_add(1, Ordering::Relaxed);
                let Some(&slot) = lists[t].get(i) else {
                    break;
                };
                self.run_partition(slot, end, &mut res);
            }
        }
        self.deliver_staged(&mut res);
    }

    /// Runs `order` on the calling thread alone (thread 0's result).
    pub fn work_inline(&self, end: u64, order: &[usize]) {
        let mut res = lock(&self.results[0]);
        for &slot in order {
            self.run_partition(slot, end, &mut res);
        }
        self.deliver_staged(&mut res);
    }

    /// One partition's window: take in its incoming box, run it, stage its outbox.
    fn run_partition(&self, slot: usize, end: u64, res: &mut ThreadResult) {
        let mut p = lock(&self.partitions[slot]);
        p.absorb(&mut lock(&self.incoming[slot]));
        p.run_window(&self.model, &self.map, end);
        res.events += p.last_window_events;
        res.ran.push((slot, p.next_time_ps(), p.last_window_events));
        if let Some(e) = p.error.take() {
            res.error.get_or_insert(e);
        }
        self.stage(&mut p.outbox, res);
    }

    /// Moves `outbox` into the thread's buffers for this worker's partitions and the
    /// outgoing lists of other workers. Takes no lock: an event crossing partitions is due
    /// after the window, so it can wait in the thread until [`Shared::deliver_staged`].
    fn stage(&self, outbox: &mut Events, res: &mut ThreadResult) {
        res.cross_partition_events += outbox.len() as u64;
        let workers = self.routing.workers as usize;
        if res.outgoing.len() < workers {
            res.outgoing.resize_with(workers, Vec::new);
        }
        if res.staged.len() < self.incoming.len() {
            res.staged.resize_with(self.incoming.len(), Vec::new);
        }
        for (key, event) in outbox.drain(..) {
            let target = self.map.partition_of[event.target as usize];
            let slot = self.routing.slot_of[target as usize];
            if slot == u32::MAX {
                res.outgoing[self.routing.owner[target as usize] as usize].push((key, event));
                continue;
            }
            let staged = &mut res.staged[slot as usize];
            if staged.is_empty() {
                res.staged_slots.push(slot as usize);
            }
            staged.push((key, event));
        }
    }

    /// Moves the thread's staged events into their partitions' incoming boxes: one lock per
    /// target partition and window, where routing event by event took one per event.
    fn deliver_staged(&self, res: &mut ThreadResult) {
        let ThreadResult {
            staged,
            staged_slots,
            delivered,
            ..
        } = res;
        for slot in staged_slots.drain(..) {
            let events = &mut staged[slot];
            let earliest = events.iter().map(|(k, _)| k.time_ps).min();
            if let Some(earliest) = earliest {
                let mut inbox = lock(&self.incoming[slot]);
                if inbox.is_empty() {
                    // Hand the buffer over instead of copying the events.
                    std::mem::swap(&mut *inbox, events);
                } else {
                    inbox.append(events);
                }
                delivered.push((slot, earliest));
            }
        }
    }
}

pub struct Team {
    pub shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    /// More threads than cores: wait for the helpers by yielding the core they may need.
    oversubscribed: bool,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("helpers", &self.helpers.len())
            .finish_non_exhaustive()
    }
}

impl Team {
    pub fn new(
        partitions: Vec<Partition>,
        model: Arc<SimModel>,
        map: Arc<LpMap>,
        routing: Routing,
        threads: usize,
        oversubscribed: bool,
        worker: u32,
    ) -> Team {
        let threads = threads.max(1);
        let shared = Arc::new(Shared {
            incoming: partitions
                .iter()
                .map(|_| Padded(Mutex::new(Vec::new())))
                .collect(),
            partitions: partitions
                .into_iter()
                .map(|p| Padded(Mutex::new(p)))
                .collect(),
            results: (0..threads)
                .map(|_| Padded(Mutex::new(ThreadResult::default())))
                .collect(),
            model,
            map,
            routing,
            job: Mutex::new((0, Vec::new())),
            generation: Padded(AtomicU64::new(0)),
            next: (0..threads).map(|_| Padded(AtomicUsize::new(0))).collect(),
            finished_helpers: Padded(AtomicUsize::new(0)),
            steal: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let helpers = (1..threads)
            .filter_map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("fleetsim-w{worker}-t{i}"))
                    .spawn(move || helper(&shared, i, oversubscribed))
                    .ok()
            })
            .collect();
        Team {
            shared,
            helpers,
            oversubscribed,
        }
    }

    pub fn threads(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Runs the window `[.., end)`: `lists[t]` are the active partitions placed on thread
    /// `t`, longest first; `steal`: threads that finish take what others have not started,
    /// which evens out what the placement mispredicted.
    pub fn run(&mut self, end: u64, lists: &[Vec<usize>], steal: bool) {
        let s = &*self.shared;
        s.steal.store(steal, Ordering::Relaxed);
        {
            let mut job = lock(&s.job);
            job.0 = end;
            job.1.resize_with(lists.len(), Vec::new);
            for (to, from) in job.1.iter_mut().zip(lists) {
                to.clear();
                to.extend_from_slice(from);
            }
        }
        for n in &s.next {
            n.store(0, Ordering::Relaxed);
        }
        s.finished_helpers.store(0, Ordering::Relaxed);
        s.generation.fetch_add(1, Ordering::Release);
        if *lock(&s.sleepers) > 0 {
            s.wake.notify_all();
        }
        s.work(end, lists, 0);
        while s.finished_helpers.load(Ordering::Acquire) < self.helpers.len() {
            relax(self.oversubscribed);
        }
    }

    /// Runs `order` on the worker thread alone.
    pub fn run_inline(&mut self, end: u64, order: &[usize]) {
        self.shared.work_inline(end, order);
    }

    /// Routes the outboxes partitions filled at start-up (worker thread, thread 0's result).
    pub fn route_start(&mut self) {
        let s = &*self.shared;
        let mut res = lock(&s.results[0]);
        for (slot, p) in s.partitions.iter().enumerate() {
            let mut p = lock(p);
            res.ran.push((slot, p.next_time_ps(), 0));
            s.stage(&mut p.outbox, &mut res);
        }
        s.deliver_staged(&mut res);
    }
}

fn helper(s: &Shared, me: usize, oversubscribed: bool) {
    let mut seen = 0u64;
    let mut lists: Vec<Vec<usize>> = Vec::new();
    loop {
        // Wait for the next window: briefly awake, then asleep.
        let next_or_stop =
            || s.stop.load(Ordering::Acquire) || s.generation.load(Ordering::Acquire) != seen;
        if !wait_briefly(oversubscribed, next_or_stop) {
            let mut sleepers = lock(&s.sleepers);
            *sleepers += 1;
            while !next_or_stop() {
                sleepers = s
                    .wake
                    .wait(sleepers)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            *sleepers -= 1;
        }
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = s.generation.load(Ordering::Acquire);
        let end = {
            let job = lock(&s.job);
            lists.resize_with(job.1.len(), Vec::new);
            for (to, from) in lists.iter_mut().zip(&job.1) {
                to.clear();
                to.extend_from_slice(from);
            }
            job.0
        };
        s.work(end, &lists, me);
        s.finished_helpers.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = lock(&self.shared.sleepers);
            self.shared.wake.notify_all();
        }
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}
