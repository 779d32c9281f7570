//! The window driver: from every worker's report, the global lower bound on time stamps and
//! the next window (DESIGN.md, "Windows and mailboxes"). Pure logic: the in-process and the
//! gRPC coordinators both call it.

use sim_ir::time::SimTime;
use worker::{WindowGrant, WindowReport};

use crate::checkpoint::{Mark, Schedule, Step};

/// Called after every grant with (window lower bound, events so far).
pub type ProgressHook = Box<dyn FnMut(SimTime, u64) + Send>;

/// Window length when no link is cut (one partition): any length gives the same results;
/// this one keeps the progress display moving.
pub const UNCUT_WINDOW: SimTime = SimTime::from_ns(1_000_000);

/// Wide windows (a lone worker scheduled asynchronously, [`WindowDriver::widening`]) double
/// after one with fewer events than this, so that barriers stay rare where events are
/// sparse...
const WIDEN_BELOW_EVENTS: u64 = 250_000;
/// ...and halve after one with more than this, so that a window stays a fraction of a
/// second of wall time: progress, checkpoints and stop requests are seen between windows.
const NARROW_ABOVE_EVENTS: u64 = 1_000_000;
/// The widest window: one simulated second.
const WIDEST_WINDOW: SimTime = SimTime::from_ps(SimTime::PS_PER_SECOND);

#[derive(Debug)]
pub struct WindowDriver {
    lookahead: SimTime,
    /// The next window's width: the lookahead, or more once widening.
    width: SimTime,
    widening: bool,
    /// The width the checkpoint this run resumed recorded, for its first grant.
    resumed_width: Option<SimTime>,
    /// Events when the last window was granted.
    events_granted: u64,
    window: u64,
    /// Lower bound of the last window granted, for progress.
    pub time: SimTime,
    pub events: u64,
    /// Windows and events of the run this one resumed, before its checkpoint.
    events_before: u64,
    pub checkpoints: Option<Schedule>,
    /// The run stopped at this checkpoint instead of completing.
    pub stopped: Option<Mark>,
    pub balance: WorkerBalance,
}

/// How evenly the windows loaded the workers: per window, the mean of the workers' events
/// and the busiest worker's, each summed over the run. With a barrier per window the run
/// waits for the busiest worker every window, so the ratio is the parallel efficiency of
/// the split were every event's work alike and the barrier free: what 8 or 64 machines
/// would get, measured on however few cores ran them.
#[derive(Debug, Clone, Default)]
pub struct WorkerBalance {
    /// Each worker's events at its last report, by worker id.
    reported: Vec<u64>,
    mean_sum: f64,
    busiest_sum: u64,
}

impl WorkerBalance {
    fn add(&mut self, reports: &[WindowReport]) {
        let (mut total, mut busiest) = (0, 0);
        for r in reports {
            let w = r.worker as usize;
            if self.reported.len() <= w {
                self.reported.resize(w + 1, 0);
            }
            let ran = r.events_processed.saturating_sub(self.reported[w]);
            self.reported[w] = r.events_processed;
            total += ran;
            busiest = busiest.max(ran);
        }
        self.mean_sum += total as f64 / reports.len().max(1) as f64;
        self.busiest_sum += busiest;
    }

    /// Mean over busiest, summed over windows; `None` on one worker or before any event.
    pub fn efficiency(&self) -> Option<f64> {
        (self.reported.len() > 1 && self.busiest_sum > 0)
            .then(|| self.mean_sum / self.busiest_sum as f64)
    }
}

impl WindowDriver {
    /// `lookahead`: the smallest latency of a link between two partitions; `None` when no
    /// link is cut.
    pub fn new(lookahead: Option<SimTime>) -> Self {
        let lookahead = lookahead.unwrap_or(UNCUT_WINDOW).max(SimTime::from_ps(1));
        WindowDriver {
            lookahead,
            width: lookahead,
            widening: false,
            resumed_width: None,
            events_granted: 0,
            window: 0,
            time: SimTime::ZERO,
            events: 0,
            events_before: 0,
            checkpoints: None,
            stopped: None,
            balance: WorkerBalance::default(),
        }
    }

    /// Grants windows wider than the lookahead, sized by the events the last one held: for
    /// a lone worker whose threads synchronise among themselves
    /// ([`worker::Scheduling::wide_windows`]). Any width gives the same results.
    pub fn widening(mut self) -> Self {
        self.widening = true;
        self
    }

    /// Takes checkpoints as `schedule` says; when it resumed a run, continues that run's
    /// window and event counts.
    pub fn with_checkpoints(mut self, schedule: Schedule) -> Self {
        if let Some(m) = schedule.last {
            self.window = m.window - 1;
            self.time = m.time;
            self.events_before = m.events;
            self.events = m.events;
            self.events_granted = m.events;
            self.resumed_width = (m.width > SimTime::ZERO).then_some(m.width);
        }
        self.checkpoints = Some(schedule);
        self
    }

    /// The next window's width: a lookahead, or when widening, from the events the last one
    /// held (the first after a resume: as the checkpoint recorded).
    fn size_window(&mut self) {
        let resumed = self.resumed_width.take();
        if !self.widening {
            self.width = self.lookahead;
        } else if let Some(width) = resumed {
            self.width = width;
        } else {
            let held = self.events - self.events_granted;
            if held < WIDEN_BELOW_EVENTS {
                self.width = self.width.saturating_add(self.width).min(WIDEST_WINDOW);
            } else if held > NARROW_ABOVE_EVENTS {
                self.width = SimTime::from_ps(self.width.as_ps() / 2).max(self.lookahead);
            }
        }
        self.width = self.width.max(self.lookahead);
        self.events_granted = self.events;
    }

    pub fn windows(&self) -> u64 {
        self.window
    }

    /// The next grant for every worker. `T` = min over workers of (next local event, earliest
    /// event in flight); every event before `T + lookahead` is safe to process, because any
    /// event crossing a partition boundary is at least one cut-link latency later than the
    /// event that caused it. Idle stretches are skipped: `T` jumps to the next event.
    ///
    /// With checkpoints, a grant may ask every worker to write its part before the window
    /// (and, on a stop request, not to run it); the round after, once every part is written,
    /// the checkpoint is completed. `Err` when completing it failed. Widening windows end
    /// no later than the next checkpoint due in simulated time, at least a lookahead on.
    pub fn grant(
        &mut self,
        reports: &[WindowReport],
    ) -> Result<Vec<WindowGrant>, crate::checkpoint::CheckpointError> {
        let t = reports
            .iter()
            .map(|r| r.next_event.min(r.earliest_sent))
            .min()
            .unwrap_or(SimTime::MAX);
        self.events = self.events_before + reports.iter().map(|r| r.events_processed).sum::<u64>();
        self.balance.add(reports);
        self.size_window();
        let mut finished = t == SimTime::MAX;
        let next = (!finished).then(|| Mark {
            window: self.window + 1,
            time: t,
            events: self.events,
            width: self.width,
        });
        let (mut checkpoint, mut stop) = (false, false);
        if let Some(schedule) = self.checkpoints.as_mut() {
            let asked = reports.iter().any(|r| r.stop_requested);
            match schedule.step(reports.iter().map(|r| r.checkpointed), asked, next)? {
                Step::Go {
                    checkpoint: c,
                    stop: s,
                } => (checkpoint, stop) = (c, s),
                Step::Stopped(mark) => {
                    self.stopped = Some(mark);
                    (finished, stop) = (true, true);
                }
            }
        }
        if !finished {
            self.window += 1;
            self.time = t;
        }
        // Every worker's promise bounds what can cross a partition (0: one that does not
        // track promises; the window is then one width wide).
        let promised = reports
            .iter()
            .map(|r| r.promise.min(t.saturating_add(r.waiting_distance)))
            .min()
            .unwrap_or(SimTime::ZERO);
        let mut end = if promised == SimTime::ZERO || self.widening {
            t.saturating_add(self.width)
        } else {
            promised.max(t.saturating_add(self.lookahead))
        };
        if let Some(due) = self.checkpoints.as_ref().and_then(Schedule::next_due) {
            end = end.min(due.max(t.saturating_add(self.lookahead)));
        }
        Ok((0..reports.len())
            .map(|w| WindowGrant {
                window: self.window,
                end,
                batches_expected: reports
                    .iter()
                    .map(|r| r.batches_sent.get(w).copied().unwrap_or(0))
                    .sum(),
                finished,
                checkpoint,
                stop,
            })
            .collect())
    }
}

/// The window driver as a combining barrier: every worker's report is kept until the last
/// one arrives, which computes every grant (and shows progress). The embedded and the gRPC
/// coordinators both wait on it, each in its own way.
pub struct CombiningBarrier {
    reports: Vec<Option<WindowReport>>,
    arrived: usize,
    /// Rounds completed; a worker's grant is ready once this moved past its round.
    pub generation: u64,
    grants: Vec<WindowGrant>,
    pub driver: WindowDriver,
    progress: Option<ProgressHook>,
    /// Why the run cannot go on (a checkpoint could not be completed).
    pub failed: Option<String>,
}

impl CombiningBarrier {
    pub fn new(workers: u32, lookahead: Option<SimTime>, progress: Option<ProgressHook>) -> Self {
        CombiningBarrier {
            reports: vec![None; workers as usize],
            arrived: 0,
            generation: 0,
            grants: Vec::new(),
            driver: WindowDriver::new(lookahead),
            progress,
            failed: None,
        }
    }

    /// Grants widening windows ([`WindowDriver::widening`]).
    pub fn widening(mut self) -> Self {
        self.driver = self.driver.widening();
        self
    }

    /// Takes checkpoints as `schedule` says ([`WindowDriver::with_checkpoints`]).
    pub fn with_checkpoints(mut self, schedule: Schedule) -> Self {
        self.driver = self.driver.with_checkpoints(schedule);
        self
    }

    /// Keeps `worker`'s report; the round it belongs to. The last report of a round
    /// computes the grants; if that fails, [`CombiningBarrier::failed`] says why and the
    /// round never completes.
    pub fn arrive(&mut self, worker: usize, report: WindowReport) -> u64 {
        let round = self.generation;
        self.reports[worker] = Some(report);
        self.arrived += 1;
        if self.arrived == self.reports.len() {
            let reports: Vec<WindowReport> =
                self.reports.iter_mut().filter_map(Option::take).collect();
            self.arrived = 0;
            match self.driver.grant(&reports) {
                Ok(grants) => self.grants = grants,
                Err(why) => {
                    self.failed.get_or_insert(why.to_string());
                    return round;
                }
            }
            self.generation += 1;
            let (t, events) = (self.driver.time, self.driver.events);
            if let Some(p) = self.progress.as_mut() {
                p(t, events);
            }
        }
        round
    }

    /// `worker`'s grant once `round` is complete.
    pub fn grant(&self, worker: usize, round: u64) -> Option<WindowGrant> {
        (self.generation != round).then(|| self.grants[worker].clone())
    }

    pub fn workers(&self) -> usize {
        self.reports.len()
    }
}

impl std::fmt::Debug for CombiningBarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CombiningBarrier")
            .field("generation", &self.generation)
            .field("arrived", &self.arrived)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    fn report(worker: u32, next: u64, sent: u64, batches: Vec<u32>) -> WindowReport {
        WindowReport {
            worker,
            window: 0,
            next_event: SimTime::from_ps(next),
            earliest_sent: SimTime::from_ps(sent),
            promise: SimTime::ZERO,
            waiting_distance: SimTime::MAX,
            batches_sent: batches,
            events_processed: 0,
            checkpointed: 0,
            stop_requested: false,
        }
    }

    #[test]
    fn a_window_ends_at_the_least_promise_but_at_least_a_lookahead_on() {
        let promising = |worker, next, promise, waiting| WindowReport {
            promise: SimTime::from_ps(promise),
            waiting_distance: SimTime::from_ps(waiting),
            ..report(worker, next, u64::MAX, vec![0, 0])
        };
        let mut d = WindowDriver::new(Some(SimTime::from_ps(1_000)));
        // Per grant: each worker's (next event, promise, waiting distance), the window's end.
        let grants = [
            // Worker 1 promises 9,000; worker 0's waiting GPUs the next event (5,000) plus
            // 2,500.
            ([(5_000, 20_000, 2_500), (6_000, 9_000, u64::MAX)], 7_500),
            (
                [(8_000, 30_000, u64::MAX), (9_000, 12_000, u64::MAX)],
                12_000,
            ),
            // A promise sooner than a lookahead on (it cannot be, but the bound holds).
            (
                [(13_000, 13_100, u64::MAX), (20_000, 40_000, u64::MAX)],
                14_000,
            ),
            // A worker that does not track promises (0) keeps windows one lookahead wide.
            ([(15_000, 0, u64::MAX), (20_000, 40_000, u64::MAX)], 16_000),
        ];
        for (workers, end_ps) in grants {
            let reports: Vec<WindowReport> = workers
                .iter()
                .zip(0..)
                .map(|(&(next, promise, waiting), w)| promising(w, next, promise, waiting))
                .collect();
            let g = d.grant(&reports).expect("grant");
            assert!(
                g.iter().all(|g| g.end.as_ps() == end_ps),
                "{g:?} against {end_ps}"
            );
        }
    }

    #[test]
    fn emulated_efficiency_is_the_mean_over_the_busiest_worker_per_window() {
        let mut d = WindowDriver::new(Some(SimTime::from_ps(1000)));
        assert_eq!(d.balance.efficiency(), None, "no events yet");
        // Reports carry each worker's events so far: windows of (10, 0) and (5, 5) events.
        for (a, b) in [(10, 0), (15, 5)] {
            let mut reports = [
                report(0, 5_000, u64::MAX, vec![0, 0]),
                report(1, 5_000, u64::MAX, vec![0, 0]),
            ];
            reports[0].events_processed = a;
            reports[1].events_processed = b;
            d.grant(&reports).expect("no checkpoints to fail");
        }
        // Means 5 and 5 against busiest 10 and 5.
        let e = d.balance.efficiency().expect("two workers");
        assert!((e - 10.0 / 15.0).abs() < 1e-12, "{e}");

        let mut lone = WindowDriver::new(None);
        let mut r = report(0, 5_000, u64::MAX, vec![0]);
        r.events_processed = 7;
        lone.grant(&[r]).expect("no checkpoints to fail");
        assert_eq!(lone.balance.efficiency(), None, "one worker");
    }

    #[test]
    fn the_window_starts_at_the_earliest_event_anywhere_including_in_flight() {
        let mut d = WindowDriver::new(Some(SimTime::from_ps(1000)));
        let g = d
            .grant(&[
                report(0, 5_000, u64::MAX, vec![0, 2]),
                report(1, 9_000, 4_200, vec![1, 0]),
            ])
            .expect("no checkpoints to fail");
        assert_eq!(g[0].end.as_ps(), 5_200);
        assert_eq!(g[0].batches_expected, 1);
        assert_eq!(g[1].batches_expected, 2);
        assert!(!g[0].finished);
    }

    fn one_worker(next: u64, events: u64) -> [WindowReport; 1] {
        let mut r = report(0, next, u64::MAX, vec![0]);
        r.events_processed = events;
        [r]
    }

    #[test]
    fn windows_stay_one_lookahead_wide_unless_widening() {
        let mut d = WindowDriver::new(Some(SimTime::from_ps(1000)));
        for i in 0..5 {
            let g = d.grant(&one_worker(i * 1000, 0)).expect("grant");
            assert_eq!(g[0].end.as_ps(), i * 1000 + 1000);
        }
    }

    #[test]
    fn widening_windows_double_while_sparse_and_halve_when_crowded() {
        let mut d = WindowDriver::new(Some(SimTime::from_ps(1000))).widening();
        let ends: Vec<u64> = (0..4)
            .map(|_| d.grant(&one_worker(0, 0)).expect("grant")[0].end.as_ps())
            .collect();
        assert_eq!(ends, [2000, 4000, 8000, 16_000]);
        // A window with more than a million events halves the next one.
        let g = d.grant(&one_worker(0, 2_000_000)).expect("grant");
        assert_eq!(g[0].end.as_ps(), 8000);
        // In between, the width holds.
        let g = d.grant(&one_worker(0, 2_500_000)).expect("grant");
        assert_eq!(g[0].end.as_ps(), 8000);
        // Never narrower than the lookahead.
        let mut events = 2_500_000;
        for _ in 0..10 {
            events += 2_000_000;
            let g = d.grant(&one_worker(0, events)).expect("grant");
            assert!(g[0].end.as_ps() >= 1000, "{}", g[0].end.as_ps());
        }
        let g = d.grant(&one_worker(0, events + 2_000_000)).expect("grant");
        assert_eq!(g[0].end.as_ps(), 1000);
    }

    /// A resumed driver over a checkpoint taken before window 3, granted 4 lookaheads wide.
    fn resumed(widening: bool) -> WindowDriver {
        let mark = Mark {
            window: 3,
            time: SimTime::from_ps(5000),
            events: 10,
            width: SimTime::from_ps(4000),
        };
        let schedule = Schedule::new(
            None,
            Arc::new(AtomicBool::new(false)),
            Some(mark),
            Box::new(|_| Ok(())),
        );
        let d = WindowDriver::new(Some(SimTime::from_ps(1000)));
        if widening {
            d.widening().with_checkpoints(schedule)
        } else {
            d.with_checkpoints(schedule)
        }
    }

    #[test]
    fn a_resumed_run_goes_on_with_the_width_its_checkpoint_recorded() {
        let mut d = resumed(true);
        let g = d.grant(&one_worker(5000, 0)).expect("grant");
        assert_eq!((g[0].window, g[0].end.as_ps()), (3, 9000));
        let g = d.grant(&one_worker(9000, 0)).expect("grant");
        assert_eq!(g[0].end.as_ps(), 9000 + 8000, "then widens as before");
        // Several workers keep a barrier per lookahead, whatever the checkpoint recorded.
        let mut d = resumed(false);
        let g = d.grant(&one_worker(5000, 0)).expect("grant");
        assert_eq!(g[0].end.as_ps(), 6000);
    }

    #[test]
    fn nothing_pending_anywhere_finishes() {
        let mut d = WindowDriver::new(None);
        let g = d
            .grant(&[report(0, u64::MAX, u64::MAX, vec![0])])
            .expect("no checkpoints to fail");
        assert!(g[0].finished);
    }
}
