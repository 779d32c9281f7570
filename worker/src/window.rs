//! The worker's window loop, which talks to the coordinator through [`crate::protocol`].
//!
//! Per window (DESIGN.md, "Windows and mailboxes"):
//! 1. the threads already routed what the last window produced for other partitions (into
//!    incoming boxes, see `team.rs`); the worker folds in their results and sends the
//!    events for peer workers as one batch per peer, directly to it;
//! 2. the worker reports its earliest pending event and the earliest event it sent, and gets
//!    the next window `[T, T + lookahead)` back ([`Coordination::exchange`]);
//! 3. it puts the batches peers sent it into incoming boxes, then runs its active partitions
//!    up to the window's end on its threads, longest first (UNISON's load-adaptive
//!    scheduling).
//!
//! With asynchronous scheduling, step 3 has no barrier inside the window: each thread runs
//! the partitions it owns and waits only for the other threads' promises (`team.rs`). A lone
//! worker scheduled that way is granted windows much wider than the lookahead, so most
//! barriers go.
//!
//! The embedded run implements [`Coordination`] in-process; the distributed run implements it
//! over gRPC. Both drive this same loop.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use sim_config::SchedulingChoice;
use sim_engine::{Event, LpReport, SimModel};
use sim_ir::event::EventKey;
use sim_ir::time::SimTime;
use sim_models::topology::NodeId;

use crate::checkpoint::{self, CheckpointError, LpRecord, PartWriter};
use crate::next_times::NextTimes;
use crate::partition::{LpMap, Partition};
use crate::promise::{Cut, Promise};
use crate::protocol::{Coordination, EngineError, EventBatch, WindowGrant, WindowReport};
use crate::round_trips::RoundTrips;
use crate::slack::CrossPartitionSlack;
use crate::team::{Routing, Shared, Team, ThreadPlan};

/// How a worker runs its partitions on its threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Scheduling {
    /// Partition `p` on thread `p mod threads`; no barrier inside a window: each thread runs
    /// its partitions in sub-windows of its own, bounded by the other threads' promises
    /// (Chandy-Misra conservative synchronisation in shared memory, `team.rs`).
    Asynchronous,
    /// UNISON's load-adaptive scheduling (Bai et al., EuroSys'24 §4.3), every window: longest
    /// first by last window's events, kept on its last thread while that fits, with work
    /// stealing, then a barrier.
    #[default]
    LoadAdaptive,
    /// Partition `p` always on thread `p mod threads`, no stealing, a barrier every window:
    /// the baseline.
    Static,
}

/// What a run's scheduling depends on besides `engine.scheduling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunShape {
    pub workers: u32,
    /// Threads per worker; 0 where each worker decides (a distributed run).
    pub threads: usize,
    /// More threads than cores on this machine.
    pub oversubscribed: bool,
    /// `network.model = "analytical"`: every collective completes in closed form.
    pub closed_form: bool,
}

impl Scheduling {
    /// From `engine.scheduling` (validated when the experiment is loaded) for a run of
    /// `shape`. `auto` is asynchronous on one worker, which the coordinator then grants
    /// windows wider than the lookahead, and load-adaptive on several, whose windows must end
    /// at the lookahead for their batches anyway.
    ///
    /// `auto` is load-adaptive too when the worker's threads outnumber the cores
    /// (`oversubscribed`): threads that wait for each other's promises all the time need a
    /// core each (quickstart, 2 cores: 1.43 s on 3 threads against 0.60 s load-adaptive).
    ///
    /// And on a lone worker of several threads (`threads`; 0 where the worker decides) over
    /// a closed-form network (`closed_form`: `network.model = "analytical"`, where every
    /// collective completes in closed form): there the model's promises end a barrier's
    /// window hundreds of lookaheads out, while asynchronous threads still meet once a
    /// lookahead (docs/engine.md, "Windows from promises on one worker": 7.30 → 3.07 s on
    /// gpt3-175b-h100-1024, 3 min 51 s → 2 min 27 s at 131,072 GPUs). Packet and flow runs send across
    /// partitions every few microseconds, and stay asynchronous.
    pub fn for_run(choice: SchedulingChoice, shape: RunShape) -> Scheduling {
        let lone = shape.workers <= 1 && !shape.oversubscribed;
        match choice {
            SchedulingChoice::Asynchronous => Scheduling::Asynchronous,
            SchedulingChoice::LoadAdaptive => Scheduling::LoadAdaptive,
            SchedulingChoice::Static => Scheduling::Static,
            SchedulingChoice::Auto if lone && !(shape.closed_form && shape.threads > 1) => {
                Scheduling::Asynchronous
            }
            SchedulingChoice::Auto => Scheduling::LoadAdaptive,
        }
    }

    /// Whether the coordinator may grant windows wider than the lookahead: only a lone
    /// worker whose threads synchronise among themselves can run one safely.
    pub fn wide_windows(self, workers: u32) -> bool {
        self == Scheduling::Asynchronous && workers <= 1
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheduling::Asynchronous => "asynchronous",
            Scheduling::LoadAdaptive => "load-adaptive",
            Scheduling::Static => "static",
        }
    }
}

/// What a worker needs to run its share of the simulation.
#[derive(Debug, Clone)]
pub struct WorkerSetup {
    pub id: u32,
    pub workers: u32,
    pub model: Arc<SimModel>,
    pub map: Arc<LpMap>,
    /// Worker owning each partition.
    pub owner: Arc<Vec<u32>>,
    pub threads: usize,
    /// More threads than cores share this machine (e.g. several in-process workers): idle
    /// helpers then give their core up almost at once instead of spinning for the next window.
    pub oversubscribed: bool,
    /// Where checkpoint parts go, when the run takes checkpoints.
    pub checkpoint_dir: Option<PathBuf>,
    /// Resume from these checkpoint parts instead of starting at time zero.
    pub resume: Option<Vec<PathBuf>>,
    /// Set by a signal handler: ask the coordinator to checkpoint and stop.
    pub stop_requested: Option<Arc<AtomicBool>>,
    pub scheduling: Scheduling,
    /// The smallest latency of a link between two partitions; `None` when none is cut.
    pub lookahead: Option<SimTime>,
    /// With a barrier every window, end windows at the partitions' least promise
    /// (`engine.promises`).
    pub promises: bool,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkerStats {
    pub partitions: u32,
    pub events: u64,
    pub windows: u64,
    /// Events that crossed a partition boundary (within this worker or to a peer).
    pub cross_partition_events: u64,
    pub cross_worker_events: u64,
    pub wall_s: f64,
    /// Time spent processing windows, less (asynchronous scheduling) the threads' average
    /// wait for each other inside them; the rest is synchronisation.
    pub busy_s: f64,
    /// Windows big enough to run on all the worker's threads, and their events (a barrier
    /// every window; with asynchronous scheduling every window runs on all threads).
    pub parallel_windows: u64,
    pub parallel_events: u64,
    /// How the worker ran its partitions on its threads.
    pub scheduling: Scheduling,
    /// Its windows ended at the partitions' least promise ([`crate::promise`]).
    #[serde(default)]
    pub promises: bool,
    /// Asynchronous scheduling: the sub-windows the threads ran, and the time they spent
    /// waiting for each other's promises, both summed over the threads.
    pub sub_windows: u64,
    pub thread_wait_s: f64,
    /// Encoded event batches sent to peer workers, bytes.
    pub bytes_sent: u64,
    /// How much of each window more threads could have shared.
    pub parallelism: WindowParallelism,
    /// Events sent across partitions, by how many lookaheads later they arrived.
    pub cross_partition_slack: CrossPartitionSlack,
    /// The window barrier's round trips: from this worker's report to its grant.
    pub barrier_round_trips: RoundTrips,
    /// The peak resident set size of this worker's process by the end of its windows
    /// (Linux `VmHWM`), in bytes; 0 where the worker shares its process with the
    /// coordinator (in-process workers) or the system does not say.
    #[serde(default)]
    pub peak_rss_bytes: u64,
    /// Events processed, by kind ([`sim_engine::Body::KIND_NAMES`] order).
    #[serde(default)]
    pub events_by_kind: Vec<u64>,
}

/// Thread counts for which [`WindowParallelism`] bounds the speed-up.
pub const BOUND_THREADS: [u64; 4] = [2, 4, 8, 16];

/// How far a worker's windows could be shared among threads (measured with a barrier every
/// window only), measured from the events each
/// partition processed in each window. A window ends at a barrier and a partition runs on
/// one thread, so on `T` threads a window takes at least as long as its busiest partition
/// and at least its events over `T`; summed over windows, that is the work on the critical
/// path even with perfect placement and synchronisation that costs nothing. Events over it
/// bound the speed-up over one thread (Graham's bound for list scheduling, per window).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowParallelism {
    /// Σ over windows of the busiest partition's events: the bound with unlimited threads.
    pub busiest_partition_events: u64,
    /// Σ over windows of max(busiest partition's events, ⌈events / T⌉), T per
    /// [`BOUND_THREADS`].
    pub critical_events: [u64; BOUND_THREADS.len()],
}

impl WindowParallelism {
    /// Counts one window: its events and those of its busiest partition.
    pub fn add_window(&mut self, events: u64, busiest: u64) {
        self.busiest_partition_events += busiest;
        for (critical, threads) in self.critical_events.iter_mut().zip(BOUND_THREADS) {
            *critical += busiest.max(events.div_ceil(threads));
        }
    }

    /// The best speed-up over one thread that `events` (the windows' total) allow on each
    /// of [`BOUND_THREADS`], then with unlimited threads; 1 when nothing ran.
    pub fn speedup_bounds(&self, events: u64) -> ([f64; BOUND_THREADS.len()], f64) {
        let ratio = |critical: u64| {
            if critical == 0 {
                1.0
            } else {
                events as f64 / critical as f64
            }
        };
        (
            self.critical_events.map(ratio),
            ratio(self.busiest_partition_events),
        )
    }
}

#[derive(Debug)]
pub struct WorkerOutcome {
    /// Every LP's report; empty when the run stopped at a checkpoint.
    pub reports: Vec<(NodeId, LpReport)>,
    pub stats: WorkerStats,
    /// The run stopped at a checkpoint instead of completing.
    pub stopped: bool,
}

/// Windows with fewer predicted events than this run on the worker thread alone: waking the
/// helpers would cost more than it saves.
const PARALLEL_MIN_EVENTS: u64 = 12;

/// Runs the worker's partitions to the end of the simulation: per window, fold in what the
/// threads did, send the events bound for peer workers, report and get the next window, take
/// in the peers' events, checkpoint if asked, and run the window (the module docs).
pub fn run_worker(
    setup: &WorkerSetup,
    coord: &mut dyn Coordination,
) -> Result<WorkerOutcome, EngineError> {
    let started = Instant::now();
    let mut w = WindowLoop::start(setup)?;
    let stopped = loop {
        w.fold_results()?;
        w.refresh_stale_promises();
        let sent = w.collect_outgoing();
        let batches_sent = w.send_batches(coord)?;
        let grant = w.report(coord, sent, batches_sent)?;
        if grant.finished {
            break grant.stop;
        }
        w.window = grant.window;
        w.deliver(coord.receive_batches(grant.window, grant.batches_expected)?)?;
        if grant.checkpoint {
            write_part(setup, &w.shared, w.window)?;
            w.checkpointed = w.window;
            if grant.stop {
                continue;
            }
        }
        w.run_window(grant.end.as_ps());
    };
    Ok(w.finish(started, stopped))
}

/// The earliest event a window sent to a peer worker, and the earliest promise of those
/// events ([`Cut::event_promise`]; `u64::MAX` without promises).
struct Sent {
    earliest_ps: u64,
    promise_ps: u64,
}

/// A worker between windows: its partitions on their threads, and what it knows of them.
struct WindowLoop<'a> {
    setup: &'a WorkerSetup,
    team: Team,
    shared: Arc<Shared>,
    threads: usize,
    asynchronous: bool,
    /// Promises between partitions, with a barrier every window (`engine.promises`).
    cut: Option<Arc<Cut>>,
    /// Per partition slot: its next event, promise and waiting distance, and the events it
    /// processed when it last ran (its predicted cost).
    next: NextTimes,
    promises: NextTimes,
    waiting: Vec<u64>,
    cost: Vec<u64>,
    /// The thread each partition last ran on.
    home: Vec<usize>,
    active: Vec<usize>,
    lists: Vec<Vec<usize>>,
    outgoing: Vec<Vec<(EventKey, Event)>>,
    stats: WorkerStats,
    window: u64,
    last_parallel: bool,
    checkpointed: u64,
    /// The end of the last window run: no event anywhere is earlier.
    last_end: u64,
}

impl<'a> WindowLoop<'a> {
    /// Builds (or restores) the worker's partitions, starts them and their threads.
    fn start(setup: &'a WorkerSetup) -> Result<WindowLoop<'a>, EngineError> {
        let model = &*setup.model;
        let map = &*setup.map;
        let mine: Vec<u32> = (0..map.partitions)
            .filter(|&p| setup.owner[p as usize] == setup.id)
            .collect();
        let mut slot_of = vec![u32::MAX; map.partitions as usize];
        for (i, &p) in mine.iter().enumerate() {
            slot_of[p as usize] = i as u32;
        }
        let mut partitions: Vec<Partition> = match &setup.resume {
            None => mine
                .iter()
                .map(|&p| Partition::new(model, map, p))
                .collect(),
            Some(files) => restore_partitions(files, map, &mine, &slot_of)?,
        };
        for p in &mut partitions {
            // Before start-up: its events are counted in lookaheads too.
            p.lookahead = setup.lookahead.unwrap_or(SimTime::MAX);
            if setup.resume.is_none() {
                p.start(model, map);
            }
        }
        let slots = partitions.len();
        // With a barrier every window, the window ends at the partitions' least promise.
        // (Asynchronous threads keep their next times apart, and a lone asynchronous
        // worker's windows are as wide as it likes anyway.)
        let asynchronous = setup.scheduling == Scheduling::Asynchronous;
        let cut = (setup.promises && !asynchronous && setup.lookahead.is_some())
            .then(|| Arc::new(Cut::new(model, &map.partition_of, &mine)));
        let routing = Routing {
            slot_of,
            owner: Arc::clone(&setup.owner),
            workers: setup.workers,
        };
        let mut team = Team::new(
            partitions,
            Arc::clone(&setup.model),
            Arc::clone(&setup.map),
            routing,
            ThreadPlan {
                threads: setup.threads,
                oversubscribed: setup.oversubscribed,
                worker: setup.id,
                // At least 1 ps, as the coordinator's windows (a zero one is refused before).
                asynchronous_lookahead: asynchronous.then(|| {
                    setup
                        .lookahead
                        .unwrap_or(SimTime::MAX)
                        .max(SimTime::from_ps(1))
                }),
                cut: cut.clone(),
            },
        )?;
        team.route_start();
        team.shared.init_next_times();
        let shared = Arc::clone(&team.shared);
        let threads = team.threads();
        Ok(WindowLoop {
            setup,
            team,
            shared,
            threads,
            asynchronous,
            stats: WorkerStats {
                partitions: mine.len() as u32,
                scheduling: setup.scheduling,
                promises: cut.is_some(),
                ..WorkerStats::default()
            },
            cut,
            next: NextTimes::new(slots),
            promises: NextTimes::new(slots),
            waiting: vec![u64::MAX; slots],
            cost: vec![0; slots],
            home: (0..slots).map(|s| s % threads).collect(),
            active: Vec::new(),
            lists: vec![Vec::new(); threads],
            outgoing: vec![Vec::new(); setup.workers as usize],
            window: 0,
            last_parallel: false,
            checkpointed: 0,
            last_end: 0,
        })
    }

    /// Folds in what the threads did: partitions that ran first (their queues' next events),
    /// then deliveries (an incoming box can only lower a partition's next).
    fn fold_results(&mut self) -> Result<(), EngineError> {
        let (mut window_events, mut busiest) = (0, 0);
        for r in &self.shared.results {
            let mut r = r.lock();
            if let Some(e) = r.error.take() {
                return Err(e.into());
            }
            for ran in r.ran.drain(..) {
                self.next.set(ran.slot, ran.next);
                self.promises.set(ran.slot, Some(ran.promise.at.as_ps()));
                self.waiting[ran.slot] = ran.promise.waiting_distance.as_ps();
                self.cost[ran.slot] = ran.events;
                busiest = busiest.max(ran.events);
            }
            let events = std::mem::take(&mut r.events);
            window_events += events;
            self.stats.events += events;
            if self.last_parallel {
                self.stats.parallel_events += events;
            }
            self.stats.sub_windows += std::mem::take(&mut r.sub_windows);
            self.stats.thread_wait_s += std::mem::take(&mut r.wait_s);
        }
        if !self.asynchronous {
            self.stats.parallelism.add_window(window_events, busiest);
        }
        Ok(())
    }

    /// A partition that did not run keeps the promise it made when it last did, which a
    /// window end since may have passed: its GPUs then promise from this end instead, and
    /// the events in its inbox (from other workers) from their targets' states. Before this
    /// window's deliveries lower it.
    fn refresh_stale_promises(&mut self) {
        if self.cut.is_none() {
            return;
        }
        let model = &*self.setup.model;
        for slot in 0..self.shared.partitions.len() {
            if self.promises.get(slot) < self.last_end {
                let mut p = self.shared.partitions[slot].lock();
                p.absorb(model, &mut self.shared.incoming[slot].lock());
                let promise = p
                    .promise(model, SimTime::from_ps(self.last_end))
                    .unwrap_or(Promise::NONE);
                self.promises.set(slot, Some(promise.at.as_ps()));
                self.waiting[slot] = promise.waiting_distance.as_ps();
            }
        }
    }

    /// Takes in the threads' deliveries between this worker's partitions and gathers what
    /// they sent to peer workers.
    fn collect_outgoing(&mut self) -> Sent {
        let model = &*self.setup.model;
        let mut sent = Sent {
            earliest_ps: u64::MAX,
            promise_ps: u64::MAX,
        };
        for r in &self.shared.results {
            let mut r = r.lock();
            for (slot, t, promise) in r.delivered.drain(..) {
                self.next.lower(slot, t);
                self.promises.lower(slot, promise);
            }
            self.stats.cross_partition_events += std::mem::take(&mut r.cross_partition_events);
            for (w, events) in r.outgoing.iter_mut().enumerate() {
                for (k, e) in events.iter() {
                    sent.earliest_ps = sent.earliest_ps.min(k.time.as_ps());
                    if let Some(d) = self.cut.as_deref() {
                        let promise = d.event_promise(model, k, e, None).as_ps();
                        sent.promise_ps = sent.promise_ps.min(promise);
                    }
                }
                self.outgoing[w].append(events);
            }
        }
        sent
    }

    /// Sends one batch to each peer worker that has events; returns the batches per worker.
    fn send_batches(&mut self, coord: &mut dyn Coordination) -> Result<Vec<u32>, EngineError> {
        let mut batches_sent = vec![0u32; self.setup.workers as usize];
        for (w, events) in self.outgoing.iter_mut().enumerate() {
            if events.is_empty() {
                continue;
            }
            self.stats.cross_worker_events += events.len() as u64;
            let batch = EventBatch::encode(self.setup.id, self.window, events)?;
            self.stats.bytes_sent += batch.events.len() as u64;
            coord.send_batch(w as u32, batch)?;
            events.clear();
            batches_sent[w] += 1;
        }
        Ok(batches_sent)
    }

    /// Reports the window to the coordinator and waits for the next grant.
    fn report(
        &mut self,
        coord: &mut dyn Coordination,
        sent: Sent,
        batches_sent: Vec<u32>,
    ) -> Result<WindowGrant, EngineError> {
        let reported = Instant::now();
        let grant = coord.exchange(WindowReport {
            worker: self.setup.id,
            window: self.window,
            next_event: SimTime::from_ps(
                self.shared
                    .async_next_time()
                    .unwrap_or_else(|| self.next.min()),
            ),
            earliest_sent: SimTime::from_ps(sent.earliest_ps),
            promise: if self.cut.is_some() {
                SimTime::from_ps(self.promises.min().min(sent.promise_ps))
            } else {
                SimTime::ZERO
            },
            waiting_distance: SimTime::from_ps(
                self.waiting.iter().copied().min().unwrap_or(u64::MAX),
            ),
            batches_sent,
            events_processed: self.stats.events,
            checkpointed: self.checkpointed,
            stop_requested: self
                .setup
                .stop_requested
                .as_ref()
                .is_some_and(|s| s.load(Ordering::Relaxed)),
        })?;
        self.stats.barrier_round_trips.record(reported.elapsed());
        Ok(grant)
    }

    /// Puts the peers' events into the incoming boxes of the partitions they target.
    fn deliver(&mut self, batches: Vec<EventBatch>) -> Result<(), EngineError> {
        let model = &*self.setup.model;
        let map = &*self.setup.map;
        for batch in batches {
            for (key, event) in batch.decode()? {
                let target = map.partition_of[event.target as usize];
                let to = self.shared.routing.slot_of[target as usize];
                if to == u32::MAX {
                    return Err(EngineError::Transport(format!(
                        "worker {} received an event for partition {target}, which it does not own",
                        self.setup.id
                    )));
                }
                if self.asynchronous {
                    self.shared.async_received(to as usize, key.time.as_ps());
                } else {
                    self.next.lower(to as usize, key.time.as_ps());
                }
                if let Some(d) = self.cut.as_deref() {
                    self.promises.lower(
                        to as usize,
                        d.event_promise(model, &key, &event, None).as_ps(),
                    );
                }
                (self.shared.incoming[to as usize])
                    .lock()
                    .push((key, event));
            }
        }
        Ok(())
    }

    /// Runs the window up to `end`: shared among the threads, longest first; or on this
    /// thread alone, where order does not matter.
    fn run_window(&mut self, end: u64) {
        let busy = Instant::now();
        self.last_end = end;
        let threads = self.threads;
        if self.asynchronous {
            // Every thread runs the partitions it owns; promises, not a barrier, keep
            // them in step.
            let start = self.shared.async_next_time().unwrap_or(u64::MAX);
            self.team.run_async(start, end);
            self.last_parallel = threads > 1;
            if self.last_parallel {
                self.stats.parallel_windows += 1;
            }
        } else {
            self.next.take_before(end, &mut self.active);
            let cost = &self.cost;
            let predicted: u64 = self.active.iter().map(|&s| cost[s].max(1)).sum();
            if threads > 1 && predicted >= PARALLEL_MIN_EVENTS && self.active.len() > 1 {
                let steal = if self.setup.scheduling == Scheduling::LoadAdaptive {
                    self.active
                        .sort_by(|&a, &b| cost[b].cmp(&cost[a]).then(a.cmp(&b)));
                    assign_longest_first(
                        &self.active,
                        cost,
                        predicted,
                        &mut self.home,
                        &mut self.lists,
                    );
                    true
                } else {
                    self.lists.iter_mut().for_each(Vec::clear);
                    self.active.sort_unstable();
                    for &slot in &self.active {
                        self.lists[slot % threads].push(slot);
                    }
                    false
                };
                self.team.run(end, &self.lists, steal);
                self.stats.parallel_windows += 1;
                self.last_parallel = true;
            } else {
                self.team.run_inline(end, &self.active);
                self.last_parallel = false;
            }
        }
        self.stats.windows += 1;
        self.stats.busy_s += busy.elapsed().as_secs_f64();
    }

    /// The worker's outcome: its statistics, and every LP's report unless it `stopped` at a
    /// checkpoint.
    fn finish(mut self, started: Instant, stopped: bool) -> WorkerOutcome {
        let model = &*self.setup.model;
        let parts = &self.shared.partitions;
        self.stats.wall_s = started.elapsed().as_secs_f64();
        // Asynchronous threads wait for each other inside a window: that is
        // synchronisation, not processing, as the time between windows is.
        self.stats.busy_s =
            (self.stats.busy_s - self.stats.thread_wait_s / self.threads as f64).max(0.0);
        self.stats.events_by_kind = vec![0; sim_engine::Body::KINDS];
        for p in parts {
            self.stats.cross_partition_slack.add(&p.lock().slack);
            for (sum, n) in self
                .stats
                .events_by_kind
                .iter_mut()
                .zip(p.lock().events_by_kind)
            {
                *sum += n;
            }
        }
        let reports = if stopped {
            Vec::new()
        } else {
            let mut reports = Vec::with_capacity(parts.iter().map(|p| p.lock().lp_count()).sum());
            for p in parts {
                p.lock().take_reports(model, &mut reports);
            }
            reports
        };
        WorkerOutcome {
            reports,
            stats: self.stats,
            stopped,
        }
    }
}

/// Writes this worker's checkpoint part for the state before `window`: every LP of its
/// partitions with the events queued for it or waiting in an incoming box.
fn write_part(setup: &WorkerSetup, shared: &Shared, window: u64) -> Result<(), EngineError> {
    let dir = setup.checkpoint_dir.as_ref().ok_or_else(|| {
        EngineError::Transport(format!(
            "worker {} was asked for a checkpoint but has no checkpoint directory",
            setup.id
        ))
    })?;
    let dir = checkpoint::window_dir(dir, window);
    std::fs::create_dir_all(&dir).map_err(|error| CheckpointError::Write {
        path: dir.clone(),
        error,
    })?;
    let path = dir.join(checkpoint::part_file_name(setup.id));
    checkpoint::write_atomically(&path, |out| {
        let mut part = PartWriter::new(out)?;
        for (p, incoming) in shared.partitions.iter().zip(&shared.incoming) {
            p.lock()
                .write_records(&setup.map, &incoming.lock(), &mut part)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The partitions `mine` (owned by this worker) as the checkpoint in `files` holds them.
fn restore_partitions(
    files: &[PathBuf],
    map: &LpMap,
    mine: &[u32],
    slot_of: &[u32],
) -> Result<Vec<Partition>, EngineError> {
    let owned = |lp: NodeId| {
        map.partition_of
            .get(lp as usize)
            .is_some_and(|&p| slot_of[p as usize] != u32::MAX)
    };
    let mut records: Vec<Option<LpRecord>> = Vec::new();
    records.resize_with(map.partition_of.len(), || None);
    for (lp, record) in checkpoint::read_records(files, owned)? {
        records[lp as usize] = Some(record);
    }
    mine.iter()
        .map(|&p| {
            let lps = map
                .members(p)
                .iter()
                .map(|&lp| {
                    records[lp as usize]
                        .take()
                        .ok_or(CheckpointError::MissingLp { lp })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Partition::restore(map, p, lps))
        })
        .collect()
}

/// Places the window's active partitions (sorted longest first by predicted events) on
/// threads: longest-processing-time-first list scheduling (Graham 1969; UNISON's
/// load-adaptive scheduling, Bai et al., EuroSys'24 §4.3), except that a partition stays on
/// the thread it last ran on while that thread's share fits, which keeps its state in one
/// core's cache. Mispredictions are evened out by stealing when the window runs.
fn assign_longest_first(
    active: &[usize],
    cost: &[u64],
    predicted: u64,
    home: &mut [usize],
    lists: &mut [Vec<usize>],
) {
    let threads = lists.len();
    let share = predicted.div_ceil(threads as u64);
    let mut loads = [0u64; 64];
    let loads = &mut loads[..threads.min(64)];
    for l in lists.iter_mut() {
        l.clear();
    }
    for &slot in active {
        let c = cost[slot].max(1);
        let previous = home[slot] % loads.len();
        let t = if loads[previous] + c <= share {
            previous
        } else {
            (0..loads.len()).min_by_key(|&t| (loads[t], t)).unwrap_or(0)
        };
        loads[t] += c;
        home[slot] = t;
        lists[t].push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches and checkpoints carry event keys in bitcode: a key's time encodes exactly as
    /// the `u64` of picoseconds it was before it became a `SimTime`, so files and peers of
    /// either build read each other.
    #[test]
    fn an_event_key_encodes_as_its_picoseconds() {
        #[derive(serde::Serialize)]
        struct RawKey {
            time_ps: u64,
            origin_lp: u32,
            origin_seq: u64,
        }
        let key = EventKey {
            time: sim_ir::time::SimTime::from_ps(123_456_789_012),
            origin_lp: 7,
            origin_seq: 42,
        };
        let raw = RawKey {
            time_ps: 123_456_789_012,
            origin_lp: 7,
            origin_seq: 42,
        };
        assert_eq!(
            bitcode::serialize(&key).expect("encode"),
            bitcode::serialize(&raw).expect("encode")
        );
    }

    #[test]
    fn a_window_is_bounded_by_its_busiest_partition_and_by_an_even_share() {
        let mut p = WindowParallelism::default();
        // 10 events in one partition and 2 in another: 10 on any number of threads.
        p.add_window(12, 10);
        // 40 events spread evenly over 40 partitions: ⌈40 / T⌉ on T threads, 1 unlimited.
        p.add_window(40, 1);
        assert_eq!(p.critical_events, [10 + 20, 10 + 10, 10 + 5, 10 + 3]);
        assert_eq!(p.busiest_partition_events, 11);
        let (bounds, unlimited) = p.speedup_bounds(52);
        assert_eq!(bounds[0], 52.0 / 30.0);
        assert_eq!(bounds[3], 4.0);
        assert_eq!(unlimited, 52.0 / 11.0);
        for (bound, threads) in bounds.iter().zip(BOUND_THREADS) {
            assert!(
                (1.0..=threads as f64).contains(bound),
                "{bound} on {threads}"
            );
        }
    }

    #[test]
    fn auto_is_asynchronous_only_on_a_lone_worker_with_a_core_per_thread_off_closed_form_networks()
    {
        use Scheduling::*;
        let lone = RunShape {
            workers: 1,
            threads: 2,
            oversubscribed: false,
            closed_form: false,
        };
        let auto = |shape| Scheduling::for_run(SchedulingChoice::Auto, shape);
        assert_eq!(auto(lone), Asynchronous);
        let oversubscribed = RunShape {
            oversubscribed: true,
            ..lone
        };
        assert_eq!(auto(oversubscribed), LoadAdaptive);
        assert_eq!(auto(RunShape { workers: 2, ..lone }), LoadAdaptive);
        let three = RunShape {
            workers: 3,
            ..oversubscribed
        };
        assert_eq!(
            Scheduling::for_run(SchedulingChoice::Asynchronous, three),
            Asynchronous
        );
        assert_eq!(Scheduling::for_run(SchedulingChoice::Static, lone), Static);
        // Over a closed-form network a lone worker's threads take windows from promises;
        // one thread stays asynchronous (one partition, no one to meet).
        let closed = RunShape {
            closed_form: true,
            ..lone
        };
        assert_eq!(auto(closed), LoadAdaptive);
        assert_eq!(
            auto(RunShape {
                threads: 1,
                ..closed
            }),
            Asynchronous
        );
        // Only a lone asynchronous worker may be granted windows wider than the lookahead.
        assert!(Asynchronous.wide_windows(1));
        assert!(!Asynchronous.wide_windows(2));
        assert!(!LoadAdaptive.wide_windows(1));
    }

    #[test]
    fn nothing_run_bounds_nothing() {
        let (bounds, unlimited) = WindowParallelism::default().speedup_bounds(0);
        assert_eq!((bounds, unlimited), ([1.0; BOUND_THREADS.len()], 1.0));
    }
}
