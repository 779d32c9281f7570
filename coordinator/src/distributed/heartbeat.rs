//! Who is alive: workers beat, the coordinator watches for silence, and a worker stops
//! when its coordinator goes silent or stops the run.

use super::*;

/// How often a worker says it is alive.
pub(super) const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// Silence after which the coordinator gives a worker up, and a worker its coordinator: a
/// dead or stalled process stops the run within 10 s.
pub(super) const SILENCE_LIMIT: Duration = Duration::from_secs(5);

impl CoordinatorService {
    /// Notes that worker `id` was heard from.
    pub(super) fn seen(&self, id: u32) {
        if let Some(mut t) = self.last_seen.get_mut(&id) {
            *t = Instant::now();
        }
    }

    /// Stops the run if a registered worker that has not submitted its results went silent,
    /// or if the workers did not all register within `patience` of `started`.
    pub(super) fn watch(&self, started: Instant, patience: Duration) {
        let mut hub = self.hub.lock();
        // Once every worker's results are in, a finished worker's silence is its exit: the
        // coordinator may still be writing a million GPUs' output.
        if hub.failed.is_some() || hub.submitted == hub.expected {
            return;
        }
        let registered = hub.addresses.len() as u32;
        if registered < hub.expected && started.elapsed() > patience {
            hub.failed = Some(format!(
                "only {registered} of {} workers registered within {} s; start the missing `fleetsim worker`s (same --coordinator, --token-file and --tls-dir) or lower --workers",
                hub.expected,
                patience.as_secs()
            ));
            drop(hub);
            self.changed.notify_waiters();
            return;
        }
        // A registered worker waits in its register call until the last one registers, and
        // heartbeats only once answered: silence counts from then.
        let all_registered = registered == hub.expected;
        // The lowest silent id, so the same worker is named whatever the map's order.
        let silent = (0..hub.addresses.len()).find(|&w| {
            all_registered
                && hub.results.get(w).is_some_and(Option::is_none)
                && self
                    .last_seen
                    .get(&(w as u32))
                    .is_some_and(|t| t.elapsed() > SILENCE_LIMIT)
        });
        if let Some(w) = silent {
            tracing::error!(worker = w, host = %hub.hosts[w], "worker went silent; stopping the run");
            hub.failed = Some(format!(
                "worker {w} on {} ({}) stopped answering for {} s; the run is stopped. {}",
                hub.hosts[w],
                hub.addresses[w],
                SILENCE_LIMIT.as_secs(),
                hub.last_checkpoint()
            ));
            drop(hub);
            self.changed.notify_waiters();
        }
    }
}

/// Why this worker must stop (the coordinator went silent or stopped the run), once known.
pub(super) type StopReason = Arc<Mutex<Option<String>>>;

/// Resolves when a stop reason is set.
pub(super) async fn stopped(stop: &StopReason) -> String {
    loop {
        if let Some(why) = stop.lock().clone() {
            return why;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A worker's heartbeats to its coordinator, every [`HEARTBEAT_EVERY`] until the coordinator
/// stops the run or goes silent for [`SILENCE_LIMIT`]: then `stop` says why and the window
/// loop, waiting on `inbox`, wakes to see it.
pub(super) fn worker_heartbeats(
    runtime: &tokio::runtime::Handle,
    mut client: CoordinatorClient<Channel>,
    stop: StopReason,
    inbox: Arc<Inbox>,
    token: &str,
    id: u32,
    coordinator: &str,
) -> tokio::task::JoinHandle<()> {
    let (token, coordinator) = (token.to_string(), coordinator.to_string());
    runtime.spawn(async move {
        let mut heard = Instant::now();
        loop {
            tokio::time::sleep(HEARTBEAT_EVERY).await;
            let call = with_token(pb::HeartbeatRequest { worker_id: id }, &token);
            let why = match call {
                Err(e) => Some(e.to_string()),
                Ok(call) => {
                    match tokio::time::timeout(HEARTBEAT_EVERY, client.heartbeat(call)).await {
                        Ok(Ok(r)) => {
                            heard = Instant::now();
                            Some(r.into_inner().stopped).filter(|s| !s.is_empty())
                        }
                        _ => (heard.elapsed() > SILENCE_LIMIT).then(|| {
                            format!(
                                "the coordinator at {coordinator} stopped answering for {} s",
                                SILENCE_LIMIT.as_secs()
                            )
                        }),
                    }
                }
            };
            if let Some(why) = why {
                *stop.lock() = Some(why);
                inbox.arrived.notify_all();
                return;
            }
        }
    })
}
