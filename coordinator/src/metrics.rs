//! Live run metrics through the `metrics` crate, served to Prometheus at `--metrics-listen`
//! (metrics-exporter-prometheus' HTTP listener, on its own thread). The final values are
//! also in `metrics.json` in the output directory (`output::report::write_outputs`).
//!
//! - Coordinator (or embedded run), after every window: `fleetsim_simulated_seconds`,
//!   `fleetsim_windows_total`, `fleetsim_events` and `fleetsim_events_per_second`.
//! - Worker process: `fleetsim_bytes_sent_total` and `fleetsim_barrier_wait_seconds`.
//! - `metrics.json` adds the final cross-partition events and, per worker, events, bytes
//!   sent and barrier wait.

use std::time::Instant;

use metrics::{counter, gauge};

use crate::driver::ProgressHook;

/// Why `--metrics-listen` cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("--metrics-listen {listen}: not a HOST:PORT address ({error})")]
    Address {
        listen: String,
        error: std::net::AddrParseError,
    },
    #[cfg(feature = "server")]
    #[error("--metrics-listen {listen}: {error}")]
    Exporter {
        listen: String,
        error: metrics_exporter_prometheus::BuildError,
    },
    #[cfg(not(feature = "server"))]
    #[error(
        "--metrics-listen {listen}: this fleetsim was built without the `server` feature, which serves metrics; build it with default features"
    )]
    NotBuilt { listen: String },
}

/// Serves the metrics of this process at `http://LISTEN/metrics`.
pub fn serve(listen: &str) -> Result<(), ServeError> {
    let addr: std::net::SocketAddr = listen.parse().map_err(|error| ServeError::Address {
        listen: listen.to_string(),
        error,
    })?;
    install(listen, addr)
}

#[cfg(feature = "server")]
fn install(listen: &str, addr: std::net::SocketAddr) -> Result<(), ServeError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|error| ServeError::Exporter {
            listen: listen.to_string(),
            error,
        })
}

/// Without the `server` feature there is no HTTP endpoint to serve from.
#[cfg(not(feature = "server"))]
fn install(listen: &str, _: std::net::SocketAddr) -> Result<(), ServeError> {
    Err(ServeError::NotBuilt {
        listen: listen.to_string(),
    })
}

/// A progress hook that also records each window's metrics, then calls `inner`.
pub fn window_hook(mut inner: Option<ProgressHook>) -> ProgressHook {
    // From the first window: a resumed run's counts start at its checkpoint's.
    let mut start: Option<(Instant, u64)> = None;
    Box::new(move |time, events| {
        gauge!("fleetsim_simulated_seconds").set(time.as_secs_f64());
        counter!("fleetsim_windows_total").increment(1);
        gauge!("fleetsim_events").set(events as f64);
        let (started, first) = *start.get_or_insert((Instant::now(), events));
        let wall = started.elapsed().as_secs_f64().max(1e-9);
        gauge!("fleetsim_events_per_second").set((events - first) as f64 / wall);
        if let Some(hook) = inner.as_mut() {
            hook(time, events);
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
