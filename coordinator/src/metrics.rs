//! Live run metrics through the `metrics` crate, served to Prometheus at `--metrics-listen`
//! (metrics-exporter-prometheus' HTTP listener, on its own thread). The final values are
//! also in `metrics.json` in the output directory (`run_report::write_outputs`).
//!
//! - Coordinator (or embedded run), after every window: `fleetsim_simulated_seconds`,
//!   `fleetsim_windows_total`, `fleetsim_events` and `fleetsim_events_per_second`.
//! - Worker process: `fleetsim_bytes_sent_total` and `fleetsim_barrier_wait_seconds`.
//! - `metrics.json` adds the final cross-partition events and, per worker, events, bytes
//!   sent and barrier wait.

use std::time::Instant;

use metrics::{counter, gauge};
use metrics_exporter_prometheus::PrometheusBuilder;

use crate::driver::ProgressHook;

/// Serves the metrics of this process at `http://LISTEN/metrics`.
pub fn serve(listen: &str) -> Result<(), String> {
    let addr: std::net::SocketAddr = listen
        .parse()
        .map_err(|e| format!("--metrics-listen {listen}: not a HOST:PORT address ({e})"))?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| format!("--metrics-listen {listen}: {e}"))
}

/// A progress hook that also records each window's metrics, then calls `inner`.
pub fn window_hook(mut inner: Option<ProgressHook>) -> ProgressHook {
    // From the first window: a resumed run's counts start at its checkpoint's.
    let mut start: Option<(Instant, u64)> = None;
    Box::new(move |time_ps, events| {
        gauge!("fleetsim_simulated_seconds").set(time_ps as f64 * 1e-12);
        counter!("fleetsim_windows_total").increment(1);
        gauge!("fleetsim_events").set(events as f64);
        let (started, first) = *start.get_or_insert((Instant::now(), events));
        let wall = started.elapsed().as_secs_f64().max(1e-9);
        gauge!("fleetsim_events_per_second").set((events - first) as f64 / wall);
        if let Some(hook) = inner.as_mut() {
            hook(time_ps, events);
        }
    })
}

/// A worker process sent a batch of `bytes` to a peer.
pub fn batch_sent(bytes: usize) {
    counter!("fleetsim_bytes_sent_total").increment(bytes as u64);
}

/// A worker process waited `seconds` at a window barrier.
pub fn barrier_wait(seconds: f64) {
    gauge!("fleetsim_barrier_wait_seconds").increment(seconds);
}
