//! The `Coordinator` gRPC service: registration, window reports and grants, results.

use super::wire_time::to_wire;
use super::*;

/// The coordinator's shared state.
pub(super) struct Hub {
    /// Where checkpoints go (absolute).
    pub(super) checkpoint_dir: PathBuf,
    pub(super) expected: u32,
    pub(super) reply: pb::RegisterReply,
    pub(super) addresses: Vec<String>,
    pub(super) hosts: Vec<String>,
    /// Most threads any worker runs.
    pub(super) threads: u32,
    pub(super) rounds: CombiningBarrier,
    pub(super) results: Vec<Option<WorkerResults>>,
    /// Per worker, the reports of the parts it sent before its last.
    pub(super) early_reports: Vec<Vec<(NodeId, LpReport)>>,
    pub(super) submitted: u32,
    /// Encoded window reports and grants, bytes.
    pub(super) window_bytes: u64,
    pub(super) failed: Option<String>,
}

impl Hub {
    /// Where a stopped run can go on from, in words.
    pub(super) fn last_checkpoint(&self) -> String {
        let dir = self.checkpoint_dir.display();
        match self.rounds.driver.checkpoints.as_ref().and_then(|c| c.last) {
            Some(m) => format!(
                "The last checkpoint is in {dir} (window {}, simulated time {:.6} s): go on with `--resume {dir}`",
                m.window,
                m.time.as_secs_f64()
            ),
            None => "No checkpoint had completed; start again (with --checkpoint-every to be able to resume)".to_string(),
        }
    }
}

#[derive(Clone)]
pub(super) struct CoordinatorService {
    pub(super) hub: Arc<Mutex<Hub>>,
    /// Rings on every change a waiting call may be waiting for.
    pub(super) changed: Arc<Notify>,
    /// The run's token; fixed, so outside the hub's lock.
    pub(super) token: Arc<str>,
    /// When each registered worker was last heard from, by worker id: the registry every
    /// heartbeat handler writes, outside the hub's lock (a concurrent map, so a heartbeat
    /// never waits behind a window round or a results part).
    pub(super) last_seen: Arc<DashMap<u32, Instant>>,
}

impl CoordinatorService {
    /// Waits until `ready` holds for the hub (checked under its lock), or the run stopped.
    pub(super) async fn wait_until<R>(
        &self,
        mut ready: impl FnMut(&mut Hub) -> Option<R>,
    ) -> Result<R, Status> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut hub = self.hub.lock();
                if let Some(why) = &hub.failed {
                    return Err(Status::aborted(why.clone()));
                }
                if let Some(r) = ready(&mut hub) {
                    return Ok(r);
                }
            }
            notified.await;
        }
    }
}

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterReply>, Status> {
        check_token(&request, &self.token)?;
        let r = request.into_inner();
        let id = {
            let mut hub = self.hub.lock();
            if hub.addresses.len() as u32 >= hub.expected {
                return Err(Status::resource_exhausted(format!(
                    "the run already has its {} workers",
                    hub.expected
                )));
            }
            tracing::info!(
                worker = hub.addresses.len(),
                address = %r.listen_address,
                host = %r.host,
                threads = r.threads,
                "worker registered"
            );
            hub.addresses.push(r.listen_address);
            hub.hosts.push(r.host);
            hub.threads = hub.threads.max(r.threads);
            let id = (hub.addresses.len() - 1) as u32;
            self.last_seen.insert(id, Instant::now());
            if hub.addresses.len() as u32 == hub.expected {
                let now = Instant::now();
                self.last_seen.iter_mut().for_each(|mut t| *t = now);
            }
            id
        };
        self.changed.notify_waiters();
        let reply = self
            .wait_until(|hub| {
                (hub.addresses.len() as u32 == hub.expected).then(|| pb::RegisterReply {
                    worker_id: id,
                    peer_addresses: hub.addresses.clone(),
                    ..hub.reply.clone()
                })
            })
            .await?;
        Ok(Response::new(reply))
    }

    async fn report_window(
        &self,
        request: Request<pb::WindowReport>,
    ) -> Result<Response<pb::WindowGrant>, Status> {
        check_token(&request, &self.token)?;
        let r = request.into_inner();
        let id = r.worker_id as usize;
        let report_bytes = r.encoded_len() as u64;
        let time = |field, name| {
            super::wire_time::required(field, "window report", name)
                .map_err(Status::invalid_argument)
        };
        self.seen(r.worker_id);
        let generation = {
            let mut hub = self.hub.lock();
            if id >= hub.rounds.workers() {
                return Err(Status::invalid_argument(format!(
                    "no worker {id} in this run"
                )));
            }
            let generation = hub.rounds.arrive(
                id,
                WindowReport {
                    worker: r.worker_id,
                    window: r.window,
                    next_event: time(r.next_event, "next_event")?,
                    earliest_sent: time(r.earliest_sent, "earliest_sent")?,
                    promise: time(r.promise, "promise")?,
                    waiting_distance: time(r.waiting_distance, "waiting_distance")?,
                    batches_sent: r.batches_sent,
                    events_processed: r.events_processed,
                    checkpointed: r.checkpointed,
                    stop_requested: r.stop_requested,
                },
            );
            if let Some(why) = hub.rounds.failed.clone() {
                hub.failed.get_or_insert(why);
            }
            generation
        };
        self.changed.notify_waiters();
        let grant = self
            .wait_until(|hub| hub.rounds.grant(id, generation))
            .await?;
        let grant = pb::WindowGrant {
            window: grant.window,
            end: to_wire(grant.end),
            batches_expected: grant.batches_expected,
            finished: grant.finished,
            checkpoint: grant.checkpoint,
            stop: grant.stop,
        };
        self.hub.lock().window_bytes += report_bytes + grant.encoded_len() as u64;
        Ok(Response::new(grant))
    }

    async fn submit_results(
        &self,
        request: Request<pb::ResultsChunk>,
    ) -> Result<Response<pb::Ack>, Status> {
        check_token(&request, &self.token)?;
        let r = request.into_inner();
        // A worker sending its results is alive.
        self.seen(r.worker_id);
        let decoded: Result<ResultsPart, _> = bitcode::deserialize(&r.payload);
        {
            let mut hub = self.hub.lock();
            let id = r.worker_id as usize;
            match decoded {
                Ok(part) if id < hub.results.len() => {
                    if let Some(results) = gather_part(&mut hub.early_reports[id], part) {
                        tracing::info!(worker = id, lps = results.0.len(), "results received");
                        if hub.results[id].replace(results).is_none() {
                            hub.submitted += 1;
                        }
                    }
                }
                Ok(_) => return Err(Status::invalid_argument(format!("no worker {id}"))),
                Err(e) => {
                    let host = hub.hosts.get(id).cloned().unwrap_or_default();
                    hub.failed.get_or_insert(format!(
                        "worker {id} on {host} sent results that cannot be decoded: {e}"
                    ));
                }
            }
        }
        self.changed.notify_waiters();
        Ok(Response::new(pb::Ack {}))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatReply>, Status> {
        check_token(&request, &self.token)?;
        self.seen(request.into_inner().worker_id);
        let stopped = self.hub.lock().failed.clone().unwrap_or_default();
        Ok(Response::new(pb::HeartbeatReply { stopped }))
    }
}
