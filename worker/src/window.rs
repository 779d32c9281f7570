//! The worker's window loop and the trait it talks to the coordinator through.
//!
//! Per window (DESIGN.md, "Windows and mailboxes"):
//! 1. events the last window produced for other partitions are routed: into the queue of a
//!    partition this worker owns, or into one batch per peer worker, sent directly to it;
//! 2. the worker reports its earliest pending event and the earliest event it sent, and gets
//!    the next window `[T, T + lookahead)` back ([`Coordination::exchange`]);
//! 3. it takes the batches peers sent it, then runs its partitions up to the window's end on
//!    its threads, longest first (UNISON's load-adaptive scheduling).
//!
//! The embedded run implements [`Coordination`] in-process; the distributed run implements it
//! over gRPC. Both drive this same loop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sim::engine::{Event, LpReport, SimModel};
use sim::event::EventKey;
use sim::topology::NodeId;

use crate::partition::{CausalityError, LpMap, Partition};

/// What a worker tells the coordinator at the end of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowReport {
    pub worker: u32,
    pub window: u64,
    /// Earliest pending event in the worker's partitions, `u64::MAX` when idle.
    pub next_event_ps: u64,
    /// Earliest event sent to a peer worker, `u64::MAX` when none.
    pub earliest_sent_ps: u64,
    /// Batches sent to each worker, indexed by worker id.
    pub batches_sent: Vec<u32>,
    pub events_processed: u64,
}

/// The coordinator's answer: process every event before `end_ps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowGrant {
    pub window: u64,
    pub end_ps: u64,
    pub batches_expected: u32,
    pub finished: bool,
}

/// Events for another worker's partitions, encoded with bitcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventBatch {
    pub from_worker: u32,
    pub window: u64,
    pub events: Vec<u8>,
}

impl EventBatch {
    pub fn encode(from_worker: u32, window: u64, events: &[(EventKey, Event)]) -> Self {
        EventBatch {
            from_worker,
            window,
            events: bitcode::serialize(events).unwrap_or_default(),
        }
    }

    pub fn decode(&self) -> Result<Vec<(EventKey, Event)>, EngineError> {
        bitcode::deserialize(&self.events).map_err(|e| {
            EngineError::Transport(format!(
                "a batch from worker {} could not be decoded: {e}",
                self.from_worker
            ))
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Causality(#[from] CausalityError),
    #[error("{0}")]
    Transport(String),
}

/// The worker's side of the window protocol.
pub trait Coordination {
    /// Sends a batch directly to a peer worker (never through the coordinator).
    fn send_batch(&mut self, to_worker: u32, batch: EventBatch) -> Result<(), EngineError>;
    /// Reports the finished window and waits for the next grant.
    fn exchange(&mut self, report: WindowReport) -> Result<WindowGrant, EngineError>;
    /// The `expected` batches peers sent for the coming window.
    fn receive_batches(&mut self, expected: u32) -> Result<Vec<EventBatch>, EngineError>;
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
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerStats {
    pub partitions: u32,
    pub events: u64,
    pub windows: u64,
    /// Events that crossed a partition boundary (within this worker or to a peer).
    pub cross_partition_events: u64,
    pub cross_worker_events: u64,
    pub wall_s: f64,
    /// Time spent processing windows; the rest is synchronisation.
    pub busy_s: f64,
}

#[derive(Debug)]
pub struct WorkerOutcome {
    pub reports: Vec<(NodeId, LpReport)>,
    pub stats: WorkerStats,
}

/// Runs the worker's partitions to the end of the simulation.
pub fn run_worker(
    setup: &WorkerSetup,
    coord: &mut dyn Coordination,
) -> Result<WorkerOutcome, EngineError> {
    let started = Instant::now();
    let model = &*setup.model;
    let map = &*setup.map;
    let mine: Vec<u32> = (0..map.partitions)
        .filter(|&p| setup.owner[p as usize] == setup.id)
        .collect();
    let mut slot_of = vec![u32::MAX; map.partitions as usize];
    for (i, &p) in mine.iter().enumerate() {
        slot_of[p as usize] = i as u32;
    }
    let partitions: Vec<Mutex<Partition>> = mine
        .iter()
        .map(|&p| Mutex::new(Partition::new(model, map, p)))
        .collect();
    let worker_id = setup.id;
    let pool = if setup.threads > 1 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(setup.threads)
            .thread_name(move |i| format!("fleetsim-w{worker_id}-t{i}"))
            .build()
            .ok()
    } else {
        None
    };
    let mut stats = WorkerStats {
        partitions: mine.len() as u32,
        ..WorkerStats::default()
    };
    for p in &partitions {
        lock(p).start(model, map);
    }
    let mut window = 0u64;
    let mut outgoing: Vec<Vec<(EventKey, Event)>> = vec![Vec::new(); setup.workers as usize];
    loop {
        // 1. Route what the last window produced for other partitions.
        let mut earliest_sent = u64::MAX;
        for p in &partitions {
            let mut p = lock(p);
            if let Some(e) = p.error.take() {
                return Err(e.into());
            }
            let outbox = std::mem::take(&mut p.outbox);
            drop(p);
            stats.cross_partition_events += outbox.len() as u64;
            for (key, event) in outbox {
                let target = map.partition_of[event.target as usize];
                let slot = slot_of[target as usize];
                if slot != u32::MAX {
                    lock(&partitions[slot as usize]).push(key, event);
                } else {
                    earliest_sent = earliest_sent.min(key.time_ps);
                    outgoing[setup.owner[target as usize] as usize].push((key, event));
                }
            }
        }
        let mut batches_sent = vec![0u32; setup.workers as usize];
        for (w, events) in outgoing.iter_mut().enumerate() {
            if events.is_empty() {
                continue;
            }
            stats.cross_worker_events += events.len() as u64;
            coord.send_batch(w as u32, EventBatch::encode(setup.id, window, events))?;
            events.clear();
            batches_sent[w] += 1;
        }
        // 2. Report; get the next window.
        let next_event_ps = partitions
            .iter()
            .filter_map(|p| lock(p).next_time_ps())
            .min()
            .unwrap_or(u64::MAX);
        let grant = coord.exchange(WindowReport {
            worker: setup.id,
            window,
            next_event_ps,
            earliest_sent_ps: earliest_sent,
            batches_sent,
            events_processed: stats.events,
        })?;
        if grant.finished {
            break;
        }
        window = grant.window;
        for batch in coord.receive_batches(grant.batches_expected)? {
            for (key, event) in batch.decode()? {
                let target = map.partition_of[event.target as usize];
                let slot = slot_of[target as usize];
                if slot == u32::MAX {
                    return Err(EngineError::Transport(format!(
                        "worker {} received an event for partition {target}, which it does not own",
                        setup.id
                    )));
                }
                lock(&partitions[slot as usize]).push(key, event);
            }
        }
        // 3. Run the window.
        let busy = Instant::now();
        let end = grant.end_ps;
        let mut active: Vec<(u64, usize)> = partitions
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let p = lock(p);
                (p.next_time_ps()? < end).then_some((p.last_window_events, i))
            })
            .collect();
        // Longest first: the partition that was busiest last window starts first.
        active.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let before: u64 = stats.events;
        let processed = match (&pool, active.len()) {
            (Some(pool), n) if n > 1 => {
                let next = AtomicUsize::new(0);
                let counts: Vec<u64> = pool.broadcast(|_| {
                    let mut events = 0;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(_, slot)) = active.get(i) else {
                            break events;
                        };
                        let mut p = lock(&partitions[slot]);
                        p.run_window(model, map, end);
                        events += p.last_window_events;
                    }
                });
                counts.iter().sum::<u64>()
            }
            _ => active
                .iter()
                .map(|&(_, slot)| {
                    let mut p = lock(&partitions[slot]);
                    p.run_window(model, map, end);
                    p.last_window_events
                })
                .sum(),
        };
        stats.events = before + processed;
        stats.windows += 1;
        stats.busy_s += busy.elapsed().as_secs_f64();
    }
    stats.wall_s = started.elapsed().as_secs_f64();
    let reports = partitions
        .iter()
        .flat_map(|p| lock(p).reports(model))
        .collect();
    Ok(WorkerOutcome { reports, stats })
}

/// Each partition's mutex is taken by the one thread that claimed the partition for the
/// window (or by the worker between windows): never contended, and never poisoned unless a
/// handler panicked, in which case the run is lost anyway.
fn lock(p: &Mutex<Partition>) -> std::sync::MutexGuard<'_, Partition> {
    p.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
