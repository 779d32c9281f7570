//! The window loop's side of the protocol: [`GrpcCoordination`].

use super::wire_time::{required, to_wire};
use super::*;

/// The window loop's side of the gRPC protocol: blocking calls on the worker's runtime.
pub(super) struct GrpcCoordination<'a> {
    pub(super) runtime: &'a tokio::runtime::Runtime,
    pub(super) stop: StopReason,
    /// The first batch a peer did not take (sends run in the background).
    pub(super) failed_send: Arc<Mutex<Option<String>>>,
    pub(super) tls: Option<&'a TlsFiles>,
    pub(super) id: u32,
    pub(super) token: String,
    pub(super) coordinator: CoordinatorClient<Channel>,
    pub(super) peer_addresses: Vec<String>,
    /// One long-lived `Deliver` stream per peer, opened at the first batch for it: a batch
    /// is one more message on the stream, not a new call.
    pub(super) peers: Vec<Option<tokio::sync::mpsc::UnboundedSender<pb::EventBatch>>>,
    pub(super) inbox: Arc<Inbox>,
}

impl GrpcCoordination<'_> {
    /// The first failure of a background send, as an error.
    pub(super) fn check_sends(&self) -> Result<(), EngineError> {
        match self.failed_send.lock().clone() {
            Some(why) => Err(transport(why)),
            None => Ok(()),
        }
    }
}

impl Coordination for GrpcCoordination<'_> {
    fn send_batch(&mut self, to_worker: u32, batch: EventBatch) -> Result<(), EngineError> {
        let to = to_worker as usize;
        let address = self
            .peer_addresses
            .get(to)
            .ok_or_else(|| transport(format!("no worker {to_worker} to send a batch to")))?;
        if self.peers[to].is_none() {
            let endpoint = endpoint(address, self.tls).map_err(transport)?;
            let channel = self.runtime.block_on(endpoint.connect()).map_err(|e| {
                transport(format!("cannot reach worker {to_worker} at {address}: {e}"))
            })?;
            let mut peer = WorkerClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            let stream =
                tonic::codegen::tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
            let request = with_token(stream, &self.token)?;
            // The stream runs in the background: the receiver waits for the batches the
            // coordinator announces, so this worker never waits for an acknowledgement. A
            // failure surfaces at the next window.
            let (failed, address) = (Arc::clone(&self.failed_send), address.clone());
            self.runtime.spawn(async move {
                if let Err(e) = peer.deliver(request).await {
                    failed.lock().get_or_insert(format!(
                        "worker {to_worker} at {address} did not take a batch: {}",
                        e.message()
                    ));
                }
            });
            self.peers[to] = Some(sender);
        }
        let Some(peer) = self.peers[to].as_ref() else {
            return Err(transport(format!("no stream to worker {to_worker}")));
        };
        let message = pb::EventBatch {
            from_worker: batch.from_worker,
            window: batch.window,
            events: batch.events,
        };
        crate::metrics::batch_sent(message.events.len());
        if peer.send(message).is_err() {
            self.check_sends()?;
            return Err(transport(format!(
                "the stream to worker {to_worker} at {address} closed"
            )));
        }
        self.check_sends()
    }

    fn exchange(&mut self, report: WindowReport) -> Result<WindowGrant, EngineError> {
        self.check_sends()?;
        let request = with_token(
            pb::WindowReport {
                worker_id: self.id,
                window: report.window,
                next_event: to_wire(report.next_event),
                earliest_sent: to_wire(report.earliest_sent),
                promise: to_wire(report.promise),
                waiting_distance: to_wire(report.waiting_distance),
                batches_sent: report.batches_sent,
                events_processed: report.events_processed,
                checkpointed: report.checkpointed,
                stop_requested: report.stop_requested,
            },
            &self.token,
        )?;
        let (coordinator, stop) = (&mut self.coordinator, &self.stop);
        let waiting = Instant::now();
        let g = self.runtime.block_on(async {
            tokio::select! {
                r = coordinator.report_window(request) => r.map(Response::into_inner).map_err(|e| {
                    transport(format!("the coordinator stopped the run: {}", e.message()))
                }),
                why = stopped(stop) => Err(transport(why)),
            }
        })?;
        crate::metrics::barrier_wait(waiting.elapsed().as_secs_f64());
        Ok(WindowGrant {
            window: g.window,
            end: required(g.end, "window grant", "end").map_err(transport)?,
            batches_expected: g.batches_expected,
            finished: g.finished,
            checkpoint: g.checkpoint,
            stop: g.stop,
        })
    }

    fn receive_batches(
        &mut self,
        window: u64,
        expected: u32,
    ) -> Result<Vec<EventBatch>, EngineError> {
        let mut batches = self.inbox.batches.lock();
        loop {
            let ready = batches.iter().filter(|b| b.window < window).count();
            if ready >= expected as usize {
                break;
            }
            if let Some(why) = self.stop.lock().clone() {
                return Err(transport(why));
            }
            self.inbox
                .arrived
                .wait_for(&mut batches, Duration::from_millis(200));
        }
        let (now, later): (Vec<EventBatch>, Vec<EventBatch>) =
            batches.drain(..).partition(|b| b.window < window);
        *batches = later;
        if now.len() != expected as usize {
            return Err(transport(format!(
                "worker {} expected {expected} batches before window {window}, got {}",
                self.id,
                now.len()
            )));
        }
        Ok(now)
    }
}
