//! The progress display of `fleetsim run`: simulated time, wall time, events/s and ETA. A
//! live line when stderr is a terminal, a log line every few seconds otherwise.
//!
//! A discrete-event simulation does not know how much simulated time is left. The ETA
//! measures it against the planner's α-β estimate of the iteration (`planner::estimate`: the
//! schedule timed without congestion), at the simulated-time rate of the last period. Both
//! are rough: congestion makes the real iteration longer than the estimate, and dense
//! communication phases run slower than compute phases. So the line says what it assumes.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use coordinator::embedded::ProgressHook;
use indicatif::{ProgressBar, ProgressStyle};
use sim::experiment::Experiment;
use sim_ir::time::SimTime;

/// Log-line period when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Refresh period of the live line.
const DRAW_EVERY: Duration = Duration::from_millis(200);

/// The iteration's simulated length by the planner's α-β estimate, seconds (with `[[jobs]]`,
/// the slowest job's); `None` for a
/// SimAI workload file (the estimate compiles the model instead) or when it cannot be made.
fn expected_iteration_s(exp: &Experiment) -> Option<f64> {
    // Several jobs: the slowest job's, each estimated as if it ran alone.
    if !exp.jobs.is_empty() {
        return exp
            .jobs
            .iter()
            .filter_map(|job| expected_iteration_s(&job.exp))
            .reduce(f64::max);
    }
    if exp.loaded.config.workload_file.is_some() {
        return None;
    }
    let compute = exp.compute_model().ok()?;
    sim::planner::estimate(exp, &compute)
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
}

/// `ETA …` for a run at `simulated_s` that recently advanced `rate` simulated seconds per wall
/// second, measured against an iteration expected to last `expected_s`.
fn eta_text(simulated_s: f64, expected_s: Option<f64>, rate: f64) -> String {
    let Some(expected) = expected_s else {
        return "ETA unknown (no estimate of the iteration)".to_string();
    };
    if simulated_s >= expected {
        return format!("ETA unknown (past the {expected:.3} s estimate of the iteration)");
    }
    if rate <= 0.0 {
        return format!(
            "ETA unknown (no simulated progress; iteration estimated at {expected:.3} s)"
        );
    }
    let left = (expected - simulated_s) / rate;
    format!(
        "ETA ~{} (iteration estimated at {expected:.3} s)",
        duration_text(left)
    )
}

/// `42 s`, `7 min 5 s`, `3 h 20 min`.
fn duration_text(seconds: f64) -> String {
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// The iteration estimate: being computed, or known.
enum Estimate {
    Pending(std::thread::JoinHandle<Option<f64>>),
    Known(Option<f64>),
}

impl Estimate {
    /// The estimate once its thread has finished; `None` until then.
    fn get(&mut self) -> Option<f64> {
        match self {
            Estimate::Known(s) => *s,
            Estimate::Pending(handle) if !handle.is_finished() => None,
            Estimate::Pending(_) => {
                let known = match std::mem::replace(self, Estimate::Known(None)) {
                    Estimate::Pending(handle) => handle.join().ok().flatten(),
                    Estimate::Known(s) => s,
                };
                *self = Estimate::Known(known);
                known
            }
        }
    }
}

pub fn hook(exp: &Experiment) -> ProgressHook {
    let name = exp.name().to_string();
    // The estimate compiles the workload (seconds at 131,072 GPUs): off the run's path.
    let estimate = {
        let exp = exp.clone();
        std::thread::Builder::new()
            .name("fleetsim-eta".into())
            .spawn(move || expected_iteration_s(&exp))
            .ok()
    };
    let mut estimate = estimate.map(Estimate::Pending);
    let started = Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let bar = terminal.then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar
    });
    // When and at what counts the last line was shown, from the first window on: a resumed
    // run's counts start at its checkpoint's, not at 0.
    let mut last: Option<(Instant, u64, SimTime)> = None;
    Box::new(move |sim: SimTime, events: u64| {
        let (at, last_events, last_sim) = *last.get_or_insert((Instant::now(), events, sim));
        let every = if terminal { DRAW_EVERY } else { LOG_EVERY };
        let since = at.elapsed();
        if since < every {
            return;
        }
        let wall = started.elapsed().as_secs_f64();
        let eps = (events - last_events) as f64 / since.as_secs_f64();
        // Simulated seconds per wall second over the last period: the ETA assumes the rest
        // of the iteration goes as fast as the recent past, which is all a DES can know.
        let rate_sim_per_wall = (sim - last_sim).as_secs_f64() / since.as_secs_f64();
        last = Some((Instant::now(), events, sim));
        let simulated_s = sim.as_secs_f64();
        let expected_s = estimate.as_mut().and_then(Estimate::get);
        let msg = format!(
            "{name}: simulated {simulated_s:.6} s, wall {wall:.1} s, {eps:.2e} events/s, {:.3e} simulated s per wall s, {}",
            rate_sim_per_wall,
            eta_text(simulated_s, expected_s, rate_sim_per_wall)
        );
        match &bar {
            Some(bar) => {
                bar.set_message(msg);
                bar.tick();
            }
            None => eprintln!("progress: {msg}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_is_what_is_left_of_the_estimate_at_the_recent_rate() {
        // 0.5 s of a 2 s iteration left at 0.01 simulated s per wall s: 150 s.
        assert_eq!(
            eta_text(0.5, Some(2.0), 0.01),
            "ETA ~2 min 30 s (iteration estimated at 2.000 s)"
        );
        assert_eq!(
            eta_text(0.0, Some(1.0), 1e-4),
            "ETA ~2 h 46 min (iteration estimated at 1.000 s)"
        );
        assert_eq!(
            eta_text(3.0, Some(2.0), 0.01),
            "ETA unknown (past the 2.000 s estimate of the iteration)"
        );
        assert_eq!(
            eta_text(1.0, Some(2.0), 0.0),
            "ETA unknown (no simulated progress; iteration estimated at 2.000 s)"
        );
        assert_eq!(
            eta_text(1.0, None, 0.1),
            "ETA unknown (no estimate of the iteration)"
        );
    }

    #[test]
    fn the_estimate_exists_for_compiled_models_only() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let load = |name: &str| {
            Experiment::load(
                &root.join("configs/experiments").join(name),
                &sim_config::Overrides::none(),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let quickstart = expected_iteration_s(&load("quickstart.toml"))
            .expect("quickstart compiles its model, so it has an estimate");
        assert!(quickstart > 0.0);
        // A SimAI workload file replaces the model the estimate would compile.
        assert_eq!(
            expected_iteration_s(&load("simai-gpt3-175b-h100-1024.toml")),
            None
        );
    }
}
