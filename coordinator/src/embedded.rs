//! The embedded run: N in-process workers, each on its own thread with its own mailboxes and
//! thread pool, as if on separate machines. They run the same window loop
//! ([`worker::run_worker`]) as distributed workers; only [`Coordination`] differs: the window
//! driver is a combining barrier (the last worker to report computes every grant) and
//! mailboxes are per-worker inboxes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use std::time::Instant;

use sim_engine::{RunResults, SimModel};
use sim_ir::time::SimTime;
use worker::{
    Coordination, EngineError, EventBatch, LpMap, RoundTrips, Scheduling, WindowGrant,
    WindowReport, WorkerSetup, WorkerStats, run_worker, wait_briefly,
};

use crate::checkpoint::Prepared;
pub use crate::driver::ProgressHook;
use crate::driver::{CombiningBarrier, WindowDriver};

struct Barrier {
    rounds: CombiningBarrier,
    aborted: Option<String>,
    /// Workers asleep on the condition variable: the last to report wakes them only then.
    sleepers: usize,
}

struct Shared {
    state: Mutex<Barrier>,
    cv: Condvar,
    /// Mirrors `Barrier::generation` (`u64::MAX` on abort) so waiting workers can spin
    /// briefly without the lock: windows are short, and a futex round trip per window would
    /// dominate.
    released: AtomicU64,
    /// More threads than cores: waiting workers yield their core rather than spin.
    oversubscribed: bool,
    inboxes: Vec<Mutex<Vec<EventBatch>>>,
}

impl Shared {
    fn abort(&self, why: String) {
        let mut s = self.state.lock();
        s.aborted.get_or_insert(why);
        self.released.store(u64::MAX, Ordering::Release);
        self.cv.notify_all();
    }
}

/// One worker's handle on the in-process coordinator.
struct InProcess {
    id: u32,
    shared: Arc<Shared>,
}

impl Coordination for InProcess {
    fn send_batch(&mut self, to_worker: u32, batch: EventBatch) -> Result<(), EngineError> {
        let inbox = self.shared.inboxes.get(to_worker as usize).ok_or_else(|| {
            EngineError::Transport(format!("no worker {to_worker} to send a batch to"))
        })?;
        inbox.lock().push(batch);
        Ok(())
    }

    fn exchange(&mut self, report: WindowReport) -> Result<WindowGrant, EngineError> {
        let me = self.id as usize;
        let mut s = self.shared.state.lock();
        let generation = s.rounds.arrive(me, report);
        if let Some(why) = s.rounds.failed.clone() {
            drop(s);
            self.shared.abort(why.clone());
            return Err(EngineError::Transport(why));
        }
        if s.rounds.generation != generation {
            self.shared
                .released
                .store(s.rounds.generation, Ordering::Release);
            if s.sleepers > 0 {
                self.shared.cv.notify_all();
            }
        } else {
            drop(s);
            let released = &self.shared.released;
            wait_briefly(self.shared.oversubscribed, || {
                released.load(Ordering::Acquire) != generation
            });
            s = self.shared.state.lock();
            while s.rounds.generation == generation && s.aborted.is_none() {
                s.sleepers += 1;
                self.shared.cv.wait(&mut s);
                s.sleepers -= 1;
            }
        }
        if let Some(why) = &s.aborted {
            return Err(EngineError::Transport(why.clone()));
        }
        s.rounds.grant(me, generation).ok_or_else(|| {
            EngineError::Transport(format!("worker {me} woke before its window was granted"))
        })
    }

    fn receive_batches(
        &mut self,
        window: u64,
        expected: u32,
    ) -> Result<Vec<EventBatch>, EngineError> {
        let mut inbox = (self.shared.inboxes[self.id as usize]).lock();
        let (batches, later): (Vec<EventBatch>, Vec<EventBatch>) =
            inbox.drain(..).partition(|b| b.window < window);
        *inbox = later;
        drop(inbox);
        if batches.len() != expected as usize {
            return Err(EngineError::Transport(format!(
                "worker {} expected {expected} batches, got {}",
                self.id,
                batches.len()
            )));
        }
        Ok(batches)
    }
}

/// Engine statistics of a finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineStats {
    pub workers: u32,
    pub threads: usize,
    pub partitions: u32,
    pub windows: u64,
    pub events: u64,
    /// Of `events`, those counted before the checkpoint this run resumed from (0 when it
    /// started at time zero): `wall_s` and the per-worker figures cover only the rest.
    pub resumed_events: u64,
    pub cross_partition_events: u64,
    pub lookahead: Option<SimTime>,
    pub wall_s: f64,
    /// Share of the workers' time spent outside window processing.
    pub sync_fraction: f64,
    /// Windows run on all threads of a worker, and the events they held.
    pub parallel_windows: u64,
    pub parallel_events: u64,
    /// Each worker's own statistics, by worker id.
    pub per_worker: Vec<WorkerStats>,
    /// Several workers: mean over busiest worker's events per window, summed over the run
    /// ([`crate::driver::WorkerBalance`]).
    pub emulated_efficiency: Option<f64>,
    /// Every worker's window-barrier round trips.
    pub barrier_round_trips: RoundTrips,
    /// Bytes of window reports and grants the coordinator received and sent (encoded
    /// protobuf; 0 in process). Independent of how many events cross partitions.
    pub coordinator_bytes: u64,
}

impl EngineStats {
    /// The run's statistics from every worker's. Windows and events are the window
    /// driver's: a resumed run also counts those before its checkpoint, which the workers
    /// did not run.
    pub fn from_workers(
        stats: &[WorkerStats],
        threads: usize,
        partitions: u32,
        driver: &WindowDriver,
        lookahead: Option<SimTime>,
        wall_s: f64,
    ) -> EngineStats {
        let wall: f64 = stats.iter().map(|s| s.wall_s).sum();
        let busy: f64 = stats.iter().map(|s| s.busy_s).sum();
        EngineStats {
            workers: stats.len() as u32,
            threads: threads.max(1),
            partitions,
            windows: driver.windows(),
            events: driver.events,
            resumed_events: driver
                .events
                .saturating_sub(stats.iter().map(|s| s.events).sum()),
            cross_partition_events: stats.iter().map(|s| s.cross_partition_events).sum(),
            lookahead,
            wall_s,
            parallel_windows: stats.iter().map(|s| s.parallel_windows).sum(),
            parallel_events: stats.iter().map(|s| s.parallel_events).sum(),
            per_worker: stats.to_vec(),
            emulated_efficiency: driver.balance.efficiency(),
            barrier_round_trips: stats.iter().fold(RoundTrips::default(), |mut all, s| {
                all.add(&s.barrier_round_trips);
                all
            }),
            coordinator_bytes: 0,
            sync_fraction: if wall > 0.0 {
                (1.0 - busy / wall).clamp(0.0, 1.0)
            } else {
                0.0
            },
        }
    }
}

/// Which worker runs each partition: contiguous blocks of partition ids (neighbours in the
/// topology stay on one worker), balanced by `weights` (expected events per partition) when
/// given, else by count.
pub fn assign_workers(partitions: u32, workers: u32, weights: &[f64]) -> Vec<u32> {
    if weights.len() == partitions as usize && workers > 1 && workers < partitions {
        let each: Vec<u32> = (0..partitions).collect();
        return partitioner::atoms::pack(&each, weights, workers);
    }
    (0..partitions)
        .map(|p| (u64::from(p) * u64::from(workers) / u64::from(partitions.max(1))) as u32)
        .collect()
}

/// Whether `workers` in-process workers of `threads` threads each outnumber the machine's
/// cores. Only our own threads count: under load from other processes, yielding waits for a
/// whole time slice per window and is slower than spinning (measured: 10 s against 3 s).
pub fn oversubscribed(workers: u32, threads: usize) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    workers.max(1) as usize * threads.max(1) > cores
}

/// How a run is spread: in-process workers, threads per worker, and how each worker places
/// its partitions on its threads.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub workers: u32,
    pub threads: usize,
    pub scheduling: Scheduling,
    /// Expected events per partition, to balance workers by; empty: by partition count.
    pub partition_weights: Vec<f64>,
    /// Windows end at the partitions' least promise (`engine.promises`).
    pub promises: bool,
}

impl Split {
    pub fn new(workers: u32, threads: usize) -> Self {
        Split {
            workers,
            threads,
            scheduling: Scheduling::default(),
            partition_weights: Vec::new(),
            promises: true,
        }
    }
}

/// Runs the simulation as `split` says, taking checkpoints (or resuming from one) when
/// `checkpoints` says so.
pub fn run(
    model: Arc<SimModel>,
    partition_of: Vec<u32>,
    lookahead: Option<SimTime>,
    split: Split,
    progress: Option<ProgressHook>,
    checkpoints: Option<Prepared>,
) -> Result<(RunResults, EngineStats), EngineError> {
    let started = Instant::now();
    let Split {
        workers,
        threads,
        scheduling,
        partition_weights,
        promises,
    } = split;
    let workers = workers.max(1);
    let map = Arc::new(LpMap::new(partition_of));
    let owner = Arc::new(assign_workers(map.partitions, workers, &partition_weights));
    let oversubscribed = oversubscribed(workers, threads);
    let mut rounds = CombiningBarrier::new(workers, lookahead, progress);
    if scheduling.wide_windows(workers) {
        rounds = rounds.widening();
    }
    let (mut checkpoint_dir, mut resume) = (None, None);
    if let Some(c) = checkpoints {
        rounds = rounds.with_checkpoints(c.schedule);
        checkpoint_dir = Some(c.dir);
        resume = c.resume_parts;
    }
    let shared = Arc::new(Shared {
        state: Mutex::new(Barrier {
            rounds,
            aborted: None,
            sleepers: 0,
        }),
        cv: Condvar::new(),
        released: AtomicU64::new(0),
        oversubscribed,
        inboxes: (0..workers).map(|_| Mutex::new(Vec::new())).collect(),
    });
    let outcomes = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|id| {
                let setup = WorkerSetup {
                    id,
                    workers,
                    model: Arc::clone(&model),
                    map: Arc::clone(&map),
                    owner: Arc::clone(&owner),
                    threads: threads.max(1),
                    oversubscribed,
                    checkpoint_dir: checkpoint_dir.clone(),
                    resume: resume.clone(),
                    stop_requested: None,
                    scheduling,
                    lookahead,
                    promises,
                };
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("fleetsim-worker-{id}"))
                    .spawn_scoped(scope, move || {
                        let mut coord = InProcess {
                            id,
                            shared: Arc::clone(&shared),
                        };
                        let out = run_worker(&setup, &mut coord);
                        if let Err(e) = &out {
                            shared.abort(format!("worker {id} failed: {e}"));
                        }
                        out
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(EngineError::Transport("a worker thread panicked".into()))
                }),
                Err(e) => Err(EngineError::Transport(format!(
                    "cannot start a worker thread: {e}"
                ))),
            })
            .collect::<Vec<_>>()
    });
    let mut reports = Vec::new();
    let mut stats: Vec<WorkerStats> = Vec::new();
    let mut first_error = None;
    for o in outcomes {
        match o {
            Ok(o) => {
                reports.extend(o.reports);
                stats.push(o.stats);
            }
            Err(e) => {
                // The worker that failed first explains; the others only saw the abort.
                if first_error.is_none() || matches!(e, EngineError::Partition(_)) {
                    first_error = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let driver = &shared.state.lock().rounds.driver;
    if let Some(m) = driver.stopped {
        return Err(EngineError::Stopped {
            window: m.window,
            time: m.time,
        });
    }
    let engine = EngineStats::from_workers(
        &stats,
        threads,
        map.partitions,
        driver,
        lookahead,
        started.elapsed().as_secs_f64(),
    );
    Ok((RunResults::assemble(reports), engine))
}
