//! The progress display of `fleetsim run`: simulated time, wall time, events/s and ETA. A
//! live line when stderr is a terminal, a log line every few seconds otherwise.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use coordinator::embedded::ProgressHook;
use indicatif::{ProgressBar, ProgressStyle};
use sim::experiment::Experiment;

/// Log-line period when stderr is not a terminal.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Refresh period of the live line.
const DRAW_EVERY: Duration = Duration::from_millis(200);

pub fn hook(exp: &Experiment) -> ProgressHook {
    let name = exp.name().to_string();
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
    let mut last = Instant::now();
    let mut last_events = 0u64;
    let mut last_sim = 0u64;
    Box::new(move |sim_ps: u64, events: u64| {
        let every = if terminal { DRAW_EVERY } else { LOG_EVERY };
        let since = last.elapsed();
        if since < every {
            return;
        }
        let wall = started.elapsed().as_secs_f64();
        let eps = (events - last_events) as f64 / since.as_secs_f64();
        // Simulated seconds per wall second over the last period: the ETA assumes the rest
        // of the iteration goes as fast as the recent past, which is all a DES can know.
        let rate_sim_per_wall = (sim_ps - last_sim) as f64 * 1e-12 / since.as_secs_f64();
        last = Instant::now();
        last_events = events;
        last_sim = sim_ps;
        let msg = format!(
            "{name}: simulated {:.6} s, wall {:.1} s, {:.2e} events/s, {:.3e} simulated s per wall s",
            sim_ps as f64 * 1e-12,
            wall,
            eps,
            rate_sim_per_wall
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
