//! The threads of one worker: the worker thread plus `threads − 1` helpers that stay alive
//! for the whole run. Every partition has a home thread, chosen from measured load (UNISON's
//! load-adaptive scheduling, Bai et al., EuroSys'24 §4.3) and changed rarely, so LP state stays
//! in one core's cache; in a window each thread runs its partitions longest first, then takes
//! the ones other threads have not started. Helpers spin briefly between windows (windows are
//! short and back to back), then sleep until the next one.
//!
//! The only shared mutable state is the claim counter and each partition's mutex, which the
//! one thread that claimed the partition takes once per window: nothing is contended inside a
//! window and nothing in the event loop locks.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use sim::engine::SimModel;

use crate::partition::{LpMap, Partition};

/// Spins before a helper goes to sleep waiting for the next window.
const SPINS: u32 = 20_000;

pub struct Shared {
    pub partitions: Vec<Mutex<Partition>>,
    model: Arc<SimModel>,
    map: Arc<LpMap>,
    /// The current window: end time and, per thread, the slots homed there, longest first.
    job: Mutex<(u64, Arc<Vec<Vec<usize>>>)>,
    generation: AtomicU64,
    /// Claim counter of each thread's list.
    next: Vec<AtomicUsize>,
    finished_helpers: AtomicUsize,
    events: AtomicU64,
    stop: AtomicBool,
    sleepers: Mutex<u32>,
    wake: Condvar,
}

pub fn lock(p: &Mutex<Partition>) -> std::sync::MutexGuard<'_, Partition> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Runs the thread's own partitions, longest first, then helps the others (taking what
    /// they have not started) until nothing is left.
    fn work(&self, end: u64, lists: &[Vec<usize>], me: usize) -> u64 {
        let mut events = 0;
        for k in 0..lists.len() {
            let t = (me + k) % lists.len();
            loop {
                let i = self.next[t].fetch_add(1, Ordering::Relaxed);
                let Some(&slot) = lists[t].get(i) else {
                    break;
                };
                let mut p = lock(&self.partitions[slot]);
                p.run_window(&self.model, &self.map, end);
                events += p.last_window_events;
            }
        }
        events
    }
}

pub struct Team {
    pub shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
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
        threads: usize,
        worker: u32,
    ) -> Team {
        let shared = Arc::new(Shared {
            partitions: partitions.into_iter().map(Mutex::new).collect(),
            model,
            map,
            job: Mutex::new((0, Arc::new(Vec::new()))),
            generation: AtomicU64::new(0),
            next: (0..threads.max(1)).map(|_| AtomicUsize::new(0)).collect(),
            finished_helpers: AtomicUsize::new(0),
            events: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let helpers = (1..threads.max(1))
            .filter_map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("fleetsim-w{worker}-t{i}"))
                    .spawn(move || helper(&shared, i))
                    .ok()
            })
            .collect();
        Team { shared, helpers }
    }

    pub fn threads(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Runs the window `[.., end)`: `lists[t]` are the active partitions homed on thread `t`,
    /// longest first. Homes keep a partition's LPs in one core's cache from window to
    /// window; stealing evens out what homes do not. Returns the events processed.
    pub fn run(&self, end: u64, lists: Vec<Vec<usize>>) -> u64 {
        let s = &*self.shared;
        if self.helpers.is_empty() {
            let all: Vec<usize> = lists.into_iter().flatten().collect();
            return s.work_inline(end, &all);
        }
        let lists = Arc::new(lists);
        *s.job.lock().unwrap_or_else(PoisonError::into_inner) = (end, Arc::clone(&lists));
        for n in &s.next {
            n.store(0, Ordering::Relaxed);
        }
        s.finished_helpers.store(0, Ordering::Relaxed);
        s.events.store(0, Ordering::Relaxed);
        s.generation.fetch_add(1, Ordering::Release);
        if *s.sleepers.lock().unwrap_or_else(PoisonError::into_inner) > 0 {
            s.wake.notify_all();
        }
        let mut events = s.work(end, &lists, 0);
        while s.finished_helpers.load(Ordering::Acquire) < self.helpers.len() {
            std::hint::spin_loop();
        }
        events += s.events.load(Ordering::Relaxed);
        events
    }
}

impl Shared {
    /// Runs `order` on the calling thread alone.
    pub fn work_inline(&self, end: u64, order: &[usize]) -> u64 {
        order
            .iter()
            .map(|&slot| {
                let mut p = lock(&self.partitions[slot]);
                p.run_window(&self.model, &self.map, end);
                p.last_window_events
            })
            .sum()
    }
}

fn helper(s: &Shared, me: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for the next window: spin, then sleep.
        let mut spins = 0;
        loop {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            if s.generation.load(Ordering::Acquire) != seen {
                break;
            }
            spins += 1;
            if spins < SPINS {
                std::hint::spin_loop();
                continue;
            }
            let mut sleepers = s.sleepers.lock().unwrap_or_else(PoisonError::into_inner);
            *sleepers += 1;
            while s.generation.load(Ordering::Acquire) == seen && !s.stop.load(Ordering::Acquire) {
                sleepers = s
                    .wake
                    .wait(sleepers)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            *sleepers -= 1;
        }
        seen = s.generation.load(Ordering::Acquire);
        let (end, lists) = s.job.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let events = s.work(end, &lists, me);
        s.events.fetch_add(events, Ordering::Relaxed);
        s.finished_helpers.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let _g = self
                .shared
                .sleepers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.shared.wake.notify_all();
        }
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}
