//! The `Worker` gRPC service: event batches from peers, for the window loop to take.

use super::*;

/// Batches peers delivered, waiting for the window loop to take them.
#[derive(Default)]
pub(super) struct Inbox {
    pub(super) batches: Mutex<Vec<EventBatch>>,
    pub(super) arrived: Condvar,
}

pub(super) struct WorkerService {
    pub(super) inbox: Arc<Inbox>,
    pub(super) token: String,
}

#[tonic::async_trait]
impl Worker for WorkerService {
    async fn deliver(
        &self,
        request: Request<tonic::Streaming<pb::EventBatch>>,
    ) -> Result<Response<pb::Ack>, Status> {
        check_token(&request, &self.token)?;
        let mut stream = request.into_inner();
        while let Some(b) = stream.message().await? {
            self.inbox.batches.lock().push(EventBatch {
                from_worker: b.from_worker,
                window: b.window,
                events: b.events,
            });
            self.inbox.arrived.notify_all();
        }
        Ok(Response::new(pb::Ack {}))
    }
}
