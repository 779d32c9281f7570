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
//! With asynchronous scheduling ([`crate::Scheduling::Asynchronous`]) there is no barrier
//! inside a granted window: every thread owns the partitions `slot mod threads` and runs
//! them in sub-windows of its own, bounded by the promises the other threads publish
//! (Chandy and Misra's conservative synchronisation, with channel clocks in shared memory;
//! Fujimoto, "Parallel and Distributed Simulation Systems", 2000, §3.2). See
//! [`Shared::work_async`].
//!
//! Shared mutable state: the claim counters, each partition's mutex (taken once per window
//! by the one thread that claimed it) and each incoming box's mutex (taken once per window
//! by each thread that has events for it), each on cache lines of its own; in asynchronous
//! scheduling, each thread's promise and notice list. Nothing in the event loop locks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use sim_engine::{Event, SimModel};
use sim_ir::event::EventKey;
use sim_ir::time::SimTime;

use crate::next_times::NextTimes;
use crate::partition::{LpMap, Partition, PartitionError};
use crate::promise::{Cut, Promise};
use crate::protocol::EngineError;
use crate::sync;

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

/// A partition that ran in the last window.
#[derive(Debug, Clone, Copy)]
pub struct Ran {
    pub slot: usize,
    /// Its earliest pending event afterwards.
    pub next: Option<u64>,
    /// Its promise afterwards when tracked ([`Partition::promise`]), else none.
    pub promise: Promise,
    /// The events it processed.
    pub events: u64,
}

/// What one thread did in the last window (or at start-up), for the worker thread to fold in.
#[derive(Debug, Default)]
pub struct ThreadResult {
    pub events: u64,
    /// Every partition that ran.
    pub ran: Vec<Ran>,
    /// Events put into incoming boxes: slot, the earliest time among them and (when tracked)
    /// their least promise, else `u64::MAX`.
    pub delivered: Vec<(usize, u64, u64)>,
    /// Events for partitions of other workers, by worker.
    pub outgoing: Vec<Events>,
    pub cross_partition_events: u64,
    pub error: Option<PartitionError>,
    /// Events for this worker's partitions, by slot, until the thread's window ends.
    staged: Vec<Events>,
    /// Slots with staged events, in the order they got their first.
    staged_slots: Vec<usize>,
    /// Asynchronous scheduling: the earliest pending event of each partition this thread
    /// owns (indexed by slot; other slots stay empty).
    next: NextTimes,
    /// Asynchronous scheduling: the last promise this thread published.
    promised: u64,
    /// Asynchronous scheduling: notices to this thread counted when it last took them.
    notices_seen: u64,
    /// Asynchronous scheduling: notices for other threads, `(owner, slot, earliest)`, until
    /// the sub-window's deliveries are done.
    notices_out: Vec<(usize, usize, u64)>,
    /// Asynchronous scheduling: the partitions of the current sub-window.
    active: Vec<usize>,
    /// Asynchronous scheduling: sub-windows run, and time spent waiting for other threads'
    /// promises.
    pub sub_windows: u64,
    pub wait_s: f64,
}

/// Partitions, incoming boxes and thread results are padded to their own cache lines:
/// neighbours in these vectors run on different threads, and a line shared at their border
/// would be written by both on every event. The gain is within this VM's noise
/// (docs/engine.md, "What wider windows would buy").
pub struct Shared {
    pub partitions: Vec<CachePadded<Mutex<Partition>>>,
    /// Events for each partition from other partitions, not yet in its queue.
    pub incoming: Vec<CachePadded<Mutex<Events>>>,
    pub results: Vec<CachePadded<Mutex<ThreadResult>>>,
    model: Arc<SimModel>,
    map: Arc<LpMap>,
    pub routing: Routing,
    /// The current window: end time and, per thread, the slots homed there, longest first.
    job: Mutex<(u64, Vec<Vec<usize>>)>,
    generation: CachePadded<AtomicU64>,
    /// Claim counter of each thread's list.
    next: Vec<CachePadded<AtomicUsize>>,
    finished_helpers: CachePadded<AtomicUsize>,
    /// Threads take partitions other threads have not started (set per window).
    steal: AtomicBool,
    stop: AtomicBool,
    /// Asynchronous scheduling's promises and notices; `None` with a window barrier.
    promises: Option<Promises>,
    /// Where the partitions meet, when windows end at their least promise.
    cut: Option<Arc<Cut>>,
    sleepers: Mutex<u32>,
    wake: Condvar,
}

/// Partitions (by slot) that received events from another thread, with the earliest.
type Notices = Vec<(usize, u64)>;

/// What the threads of an asynchronously scheduled worker tell each other.
#[derive(Debug)]
struct Promises {
    /// Per thread: every event it will still send to a partition of another thread is at
    /// or after this time. Only grows within a granted window.
    at: Vec<CachePadded<sync::AtomicU64>>,
    /// Per thread: (slot, earliest) of the events other threads put into the incoming
    /// boxes of its partitions, for its next times.
    notices: Vec<CachePadded<sync::Mutex<Notices>>>,
    /// Per thread: notices pushed so far, counted after each push, so that a thread waiting
    /// for promises locks its notice list only when something is in it.
    posted: Vec<CachePadded<sync::AtomicU64>>,
    lookahead_ps: u64,
}

impl Promises {
    fn new(threads: usize, lookahead_ps: u64) -> Self {
        Promises {
            at: (0..threads)
                .map(|_| CachePadded::new(sync::AtomicU64::new(0)))
                .collect(),
            notices: (0..threads)
                .map(|_| CachePadded::new(sync::Mutex::new(Vec::new())))
                .collect(),
            posted: (0..threads)
                .map(|_| CachePadded::new(sync::AtomicU64::new(0)))
                .collect(),
            lookahead_ps,
        }
    }

    /// The thread that owns partition `slot`.
    fn owner(&self, slot: usize) -> usize {
        slot % self.at.len()
    }

    /// Lowers `next` by what other threads delivered to thread `me`'s partitions, if any
    /// were posted since `seen` notices. A notice still uncounted is at or after its
    /// sender's last promise read before this: the sender counts a notice before it next
    /// promises, so a promise read with Acquire brings every count made before it.
    fn take_notices(&self, me: usize, next: &mut NextTimes, seen: &mut u64) {
        let posted = self.posted[me].load(Ordering::Acquire);
        if posted == *seen {
            return;
        }
        *seen = posted;
        for (slot, t) in self.notices[me].lock().drain(..) {
            next.lower(slot, t);
        }
    }

    /// Thread `me` reads the other threads' promises, then takes its notices, and returns
    /// the least promise. In that order, every event sent to it and not yet noticed is at
    /// or after the returned time; read the other way round, a notice posted between the
    /// reads could be missed under a promise already past it. `between` runs between the
    /// two reads, so that a test can post there.
    fn observe(
        &self,
        me: usize,
        next: &mut NextTimes,
        seen: &mut u64,
        between: impl FnOnce(),
    ) -> u64 {
        let others = self
            .at
            .iter()
            .enumerate()
            .filter(|&(thread, _)| thread != me)
            .map(|(_, p)| p.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        between();
        self.take_notices(me, next, seen);
        others
    }

    /// Thread `me` promises that it sends nothing before `promise` from now on.
    fn promise(&self, me: usize, promise: u64) {
        self.at[me].store(promise, Ordering::Release);
    }

    /// Hands each notice `(owner, slot, earliest)` to thread `owner` (partition `slot` has
    /// an event at `earliest`), with one lock and one count per owner: each is a cache line
    /// the owner reads. The count moves while the list is locked, so an owner that saw it
    /// move and then takes the lock finds the notices in the list.
    fn post(&self, notices: &mut Vec<(usize, usize, u64)>) {
        notices.sort_unstable_by_key(|&(owner, _, _)| owner);
        for batch in notices.chunk_by(|a, b| a.0 == b.0) {
            let owner = batch[0].0;
            let mut list = self.notices[owner].lock();
            list.extend(batch.iter().map(|&(_, slot, t)| (slot, t)));
            self.posted[owner].fetch_add(batch.len() as u64, Ordering::Release);
        }
        notices.clear();
    }
}

impl Shared {
    /// Runs the thread's own partitions, longest first, then (when stealing) helps the
    /// others, taking what they have not started, until nothing is left.
    fn work(&self, end: u64, lists: &[Vec<usize>], me: usize, oversubscribed: bool) {
        if let Some(promises) = &self.promises {
            self.work_async(promises, end, me, oversubscribed);
            return;
        }
        let mut res = self.results[me].lock();
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
        self.deliver_staged(&mut res, None);
    }

    /// Runs `order` on the calling thread alone (thread 0's result).
    pub fn work_inline(&self, end: u64, order: &[usize]) {
        let mut res = self.results[0].lock();
        for &slot in order {
            self.run_partition(slot, end, &mut res);
        }
        self.deliver_staged(&mut res, None);
    }

    /// One partition's window: take in its incoming box, run it, stage its outbox.
    fn run_partition(&self, slot: usize, end: u64, res: &mut ThreadResult) {
        let ran = self.run_to(slot, end, res);
        res.ran.push(ran);
    }

    /// Runs partition `slot` up to `end` on the calling thread: its earliest pending event
    /// and promise afterwards, and the events it processed.
    fn run_to(&self, slot: usize, end: u64, res: &mut ThreadResult) -> Ran {
        let mut p = self.partitions[slot].lock();
        p.absorb(&self.model, &mut self.incoming[slot].lock());
        p.run_window(&self.model, &self.map, SimTime::from_ps(end));
        res.events += p.last_window_events;
        if let Some(e) = p.error.take() {
            res.error.get_or_insert(e);
        }
        self.stage(&mut p.outbox, res);
        Ran {
            slot,
            next: p.next_time().map(SimTime::as_ps),
            promise: p
                .promise(&self.model, SimTime::from_ps(end))
                .unwrap_or(Promise::NONE),
            events: p.last_window_events,
        }
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
    /// With a window barrier (`asynchronous` is `None`) the worker thread learns of them
    /// from `delivered`; in asynchronous scheduling thread `me` lowers its own partitions'
    /// next times and notifies the owners of the others.
    fn deliver_staged(&self, res: &mut ThreadResult, asynchronous: Option<(&Promises, usize)>) {
        let ThreadResult {
            staged,
            staged_slots,
            delivered,
            next,
            notices_out,
            ..
        } = res;
        for slot in staged_slots.drain(..) {
            let events = &mut staged[slot];
            let earliest = events.iter().map(|(k, _)| k.time.as_ps()).min();
            let promise = self.cut.as_deref().map_or(u64::MAX, |d| {
                events
                    .iter()
                    .map(|(k, e)| d.event_promise(&self.model, k, e, None).as_ps())
                    .min()
                    .unwrap_or(u64::MAX)
            });
            if let Some(earliest) = earliest {
                let mut inbox = self.incoming[slot].lock();
                if inbox.is_empty() {
                    // Hand the buffer over instead of copying the events.
                    std::mem::swap(&mut *inbox, events);
                } else {
                    inbox.append(events);
                }
                drop(inbox);
                match asynchronous {
                    None => delivered.push((slot, earliest, promise)),
                    Some((promises, me)) => match promises.owner(slot) {
                        owner if owner == me => next.lower(slot, earliest),
                        owner => notices_out.push((owner, slot, earliest)),
                    },
                }
            }
        }
        if let Some((promises, _)) = asynchronous {
            promises.post(notices_out);
        }
    }

    /// Asynchronous scheduling: thread `me` runs the partitions it owns up to `end` without
    /// a barrier. Each round it reads the other threads' promises, takes its notices and
    /// promises in turn that whatever it sends from now on is at least one lookahead after
    /// the earliest event it may still process: its own next event or the earliest the
    /// others may still send it. Then it runs its partitions in a sub-window of one
    /// lookahead from its next event, cut at the others' promises (nothing can arrive
    /// before them), or waits for the others to promise more. Reading the promises before
    /// the notices matters: what a thread sent before promising is then in the notices,
    /// and what it sends later is at or after its promise. Each LP still sees its events
    /// in key order, so results are those of any other schedule.
    fn work_async(&self, promises: &Promises, end: u64, me: usize, oversubscribed: bool) {
        let lookahead = promises.lookahead_ps;
        let mut guard = self.results[me].lock();
        let res = &mut *guard;
        if me >= self.partitions.len() {
            // Owns no partition (more threads than partitions): it will send nothing.
            promises.promise(me, end);
            res.promised = end;
            return;
        }
        let mut active = std::mem::take(&mut res.active);
        let mut waiting: Option<Instant> = None;
        loop {
            let others = promises.observe(me, &mut res.next, &mut res.notices_seen, || {});
            let next = res.next.min();
            let earliest = next.min(others);
            let promise = earliest.saturating_add(lookahead).min(end);
            if promise > res.promised {
                promises.promise(me, promise);
                res.promised = promise;
            }
            let sub_end = next.saturating_add(lookahead).min(others).min(end);
            if sub_end > next {
                if let Some(since) = waiting.take() {
                    res.wait_s += since.elapsed().as_secs_f64();
                }
                res.next.take_before(sub_end, &mut active);
                for &slot in &active {
                    let after = self.run_to(slot, sub_end, res).next;
                    res.next.set(slot, after);
                }
                self.deliver_staged(res, Some((promises, me)));
                res.sub_windows += 1;
            } else if earliest >= end {
                if let Some(since) = waiting.take() {
                    res.wait_s += since.elapsed().as_secs_f64();
                }
                break;
            } else if self.stop.load(Ordering::Acquire) {
                // The team is being dropped (its lead unwound from a panic): the promises this
                // thread waits for will never come.
                break;
            } else {
                waiting.get_or_insert_with(Instant::now);
                relax(oversubscribed);
            }
        }
        res.active = active;
    }

    /// Asynchronous scheduling, between windows: every thread's next times from its
    /// partitions' queues and incoming boxes, with no notice pending (at start-up and
    /// after a resume).
    pub fn init_next_times(&self) {
        let Some(promises) = &self.promises else {
            return;
        };
        for r in &self.results {
            let mut r = r.lock();
            r.next = NextTimes::new(self.partitions.len());
            r.delivered.clear();
        }
        for n in &promises.notices {
            n.lock().clear();
        }
        for (slot, (p, inbox)) in self.partitions.iter().zip(&self.incoming).enumerate() {
            // Partition, then incoming box: the order `run_to` takes them in.
            let queued = p.lock().next_time().map(SimTime::as_ps);
            let next = inbox
                .lock()
                .iter()
                .map(|(k, _)| k.time.as_ps())
                .chain(queued)
                .min();
            self.results[promises.owner(slot)]
                .lock()
                .next
                .set(slot, next);
        }
    }

    /// Asynchronous scheduling, between windows: the earliest pending event of the
    /// worker, every notice taken.
    pub fn async_next_time(&self) -> Option<u64> {
        let promises = self.promises.as_ref()?;
        let mut next = u64::MAX;
        for (me, r) in self.results.iter().enumerate() {
            let mut r = r.lock();
            let r = &mut *r;
            promises.take_notices(me, &mut r.next, &mut r.notices_seen);
            next = next.min(r.next.min());
        }
        Some(next)
    }

    /// Asynchronous scheduling, between windows: partition `slot` received an event at
    /// `time` from another worker.
    pub fn async_received(&self, slot: usize, time: u64) {
        if let Some(promises) = &self.promises {
            self.results[promises.owner(slot)]
                .lock()
                .next
                .lower(slot, time);
        }
    }

    /// Asynchronous scheduling: the window about to run starts at `start`, so nothing any
    /// thread sends is earlier than a lookahead after it.
    fn promise_from(&self, start: u64, end: u64) {
        let Some(promises) = &self.promises else {
            return;
        };
        let promise = start.saturating_add(promises.lookahead_ps).min(end);
        for (at, r) in promises.at.iter().zip(&self.results) {
            let mut r = r.lock();
            if promise > r.promised {
                r.promised = promise;
                at.store(promise, Ordering::Release);
            }
        }
    }
}

/// How a worker's threads run its partitions.
#[derive(Debug, Clone)]
pub struct ThreadPlan {
    pub threads: usize,
    /// More threads than cores: waiting threads yield their core.
    pub oversubscribed: bool,
    /// The worker's id, for the threads' names.
    pub worker: u32,
    /// Asynchronous scheduling, with the run's lookahead ([`SimTime::MAX`] when no link is
    /// cut); `None`: a barrier ends every window.
    pub asynchronous_lookahead: Option<SimTime>,
    /// Windows end at the partitions' least promise, with this cut ([`Cut`]).
    pub cut: Option<Arc<Cut>>,
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
        plan: ThreadPlan,
    ) -> Result<Team, EngineError> {
        let ThreadPlan {
            threads,
            oversubscribed,
            worker,
            asynchronous_lookahead,
            cut,
        } = plan;
        // A thread beyond the partitions would have nothing to run: capped there, so that
        // `--threads 100000` starts no more threads than there is work for.
        let threads = threads.clamp(1, partitions.len().max(1));
        let mut partitions = partitions;
        if let Some(d) = &cut {
            for p in &mut partitions {
                p.track_promises(&model, Arc::clone(d));
            }
        }
        let shared = Arc::new(Shared {
            incoming: partitions
                .iter()
                .map(|_| CachePadded::new(Mutex::new(Vec::new())))
                .collect(),
            partitions: partitions
                .into_iter()
                .map(|p| CachePadded::new(Mutex::new(p)))
                .collect(),
            results: (0..threads)
                .map(|_| CachePadded::new(Mutex::new(ThreadResult::default())))
                .collect(),
            model,
            map,
            routing,
            job: Mutex::new((0, Vec::new())),
            generation: CachePadded::new(AtomicU64::new(0)),
            next: (0..threads)
                .map(|_| CachePadded::new(AtomicUsize::new(0)))
                .collect(),
            finished_helpers: CachePadded::new(AtomicUsize::new(0)),
            steal: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            promises: asynchronous_lookahead
                .map(|lookahead| Promises::new(threads, lookahead.as_ps())),
            cut,
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let mut team = Team {
            shared,
            helpers: Vec::new(),
            oversubscribed,
        };
        for i in 1..threads {
            let shared = Arc::clone(&team.shared);
            let name = format!("fleetsim-w{worker}-t{i}");
            match std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || helper(&shared, i, oversubscribed))
            {
                Ok(h) => team.helpers.push(h),
                // Dropping the team stops the helpers already started.
                Err(e) => {
                    return Err(EngineError::Transport(format!(
                        "cannot start thread {name}: {e}"
                    )));
                }
            }
        }
        Ok(team)
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
            let mut job = s.job.lock();
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
        if *s.sleepers.lock() > 0 {
            s.wake.notify_all();
        }
        s.work(end, lists, 0, self.oversubscribed);
        while s.finished_helpers.load(Ordering::Acquire) < self.helpers.len() {
            relax(self.oversubscribed);
        }
    }

    /// Asynchronous scheduling: runs the window `[start, end)` on every thread, each on the
    /// partitions it owns, synchronised by promises instead of a barrier.
    pub fn run_async(&mut self, start: u64, end: u64) {
        self.shared.promise_from(start, end);
        self.run(end, &[], false);
    }

    /// Runs `order` on the worker thread alone.
    pub fn run_inline(&mut self, end: u64, order: &[usize]) {
        self.shared.work_inline(end, order);
    }

    /// Routes the outboxes partitions filled at start-up (worker thread, thread 0's result).
    pub fn route_start(&mut self) {
        let s = &*self.shared;
        let mut res = s.results[0].lock();
        for (slot, p) in s.partitions.iter().enumerate() {
            let mut p = p.lock();
            res.ran.push(Ran {
                slot,
                next: p.next_time().map(SimTime::as_ps),
                promise: p.promise(&s.model, SimTime::ZERO).unwrap_or(Promise::NONE),
                events: 0,
            });
            s.stage(&mut p.outbox, &mut res);
        }
        s.deliver_staged(&mut res, None);
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
            let mut sleepers = s.sleepers.lock();
            *sleepers += 1;
            while !next_or_stop() {
                s.wake.wait(&mut sleepers);
            }
            *sleepers -= 1;
        }
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = s.generation.load(Ordering::Acquire);
        let end = {
            let job = s.job.lock();
            lists.resize_with(job.1.len(), Vec::new);
            for (to, from) in lists.iter_mut().zip(&job.1) {
                to.clear();
                to.extend_from_slice(from);
            }
            job.0
        };
        s.work(end, &lists, me, oversubscribed);
        s.finished_helpers.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = self.shared.sleepers.lock();
            self.shared.wake.notify_all();
        }
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Thread 1 sends thread 0 an event at 150 ps and then promises 300 ps, while thread 0
    /// is between its two reads. Whatever thread 0 runs next must not pass 150 ps.
    #[test]
    fn a_notice_posted_between_the_reads_bounds_what_the_reader_runs() {
        let promises = Promises::new(2, 100);
        promises.promise(1, 100);
        let mut next = NextTimes::new(2);
        next.set(0, Some(400));
        let mut seen = 0;
        let others = promises.observe(0, &mut next, &mut seen, || {
            promises.post(&mut vec![(0, 0, 150)]);
            promises.promise(1, 300);
        });
        assert!(
            others.min(next.min()) <= 150,
            "thread 0 may run to {} past the event at 150",
            others.min(next.min())
        );
    }

    #[test]
    fn notices_are_taken_once_and_only_when_posted() {
        let promises = Promises::new(2, 100);
        let mut next = NextTimes::new(4);
        let mut seen = 0;
        promises.observe(0, &mut next, &mut seen, || {});
        assert_eq!(next.min(), u64::MAX);
        promises.post(&mut vec![(0, 2, 700), (1, 3, 100), (0, 0, 500)]);
        promises.observe(0, &mut next, &mut seen, || {});
        assert_eq!((seen, next.min()), (2, 500));
        next.set(0, None);
        promises.observe(0, &mut next, &mut seen, || {});
        assert_eq!(next.min(), 700, "a notice taken once is not taken again");
    }
}

/// `RUSTFLAGS="--cfg loom" cargo test -p worker --lib --release loom` (`.ci/run`): every
/// interleaving of the promise protocol, with loom's atomics and mutex (`crate::sync`).
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;

    /// A sender posts a notice at 150 ps to the reader's partition, then promises 300 ps,
    /// while the reader observes. A reader that sees the promise must see the notice (the
    /// order `Promises::observe` relies on), and one that observes after the sender is done
    /// always does.
    #[test]
    fn loom_a_reader_that_sees_a_promise_sees_the_notices_posted_before_it() {
        loom::model(|| {
            let promises = loom::sync::Arc::new(Promises::new(2, 100));
            let sender = {
                let promises = promises.clone();
                loom::thread::spawn(move || {
                    promises.post(&mut vec![(0, 0, 150)]);
                    promises.promise(1, 300);
                })
            };
            let mut next = NextTimes::new(2);
            let mut seen = 0;
            let others = promises.observe(0, &mut next, &mut seen, || {});
            if others >= 300 {
                assert_eq!(next.min(), 150, "promise 300 seen, notice at 150 missed");
            }
            sender.join().expect("the sender finishes");
            promises.observe(0, &mut next, &mut seen, || {});
            assert_eq!(next.min(), 150);
        });
    }
}
