//! The window protocol between a worker and the coordinator (DESIGN.md, "Windows and
//! mailboxes"): what a worker reports at the end of a window, the grant it gets back, the
//! event batches workers send each other, and the trait both the embedded and the gRPC
//! transport implement. The worker's loop ([`crate::window`]) and its threads
//! ([`crate::team`]) speak it; it knows neither.

use sim_engine::Event;
use sim_ir::event::EventKey;
use sim_ir::time::SimTime;

use crate::checkpoint::CheckpointError;
use crate::partition::PartitionError;

/// What a worker tells the coordinator at the end of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowReport {
    pub worker: u32,
    pub window: u64,
    /// Earliest pending event in the worker's partitions, [`SimTime::MAX`] when idle.
    pub next_event: SimTime,
    /// Earliest event sent to a peer worker, [`SimTime::MAX`] when none.
    pub earliest_sent: SimTime,
    /// Nothing this worker's partitions hold or sent can reach another partition before
    /// this time ([`crate::promise`]); [`SimTime::ZERO`] when the worker does not track
    /// promises (the window then ends one lookahead after its start), [`SimTime::MAX`] when
    /// idle.
    pub promise: SimTime,
    /// Nor can its GPUs that wait for an event before the next event anywhere plus this
    /// ([`SimTime::MAX`]: none waits).
    pub waiting_distance: SimTime,
    /// Batches sent to each worker, indexed by worker id.
    pub batches_sent: Vec<u32>,
    pub events_processed: u64,
    /// The window before which this worker last wrote its checkpoint part, 0 when none.
    pub checkpointed: u64,
    /// This worker's process was asked to stop (SIGTERM, SIGUSR1): checkpoint and stop.
    pub stop_requested: bool,
}

/// The coordinator's answer: process every event before `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowGrant {
    pub window: u64,
    pub end: SimTime,
    pub batches_expected: u32,
    pub finished: bool,
    /// Write a checkpoint part before running the window (after its batches arrived).
    pub checkpoint: bool,
    /// With `checkpoint`: do not run the window; the run stops once every part is written.
    /// With `finished`: the run stopped at a checkpoint instead of completing.
    pub stop: bool,
}

/// Events for another worker's partitions, encoded with bitcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventBatch {
    pub from_worker: u32,
    pub window: u64,
    pub events: Vec<u8>,
}

impl EventBatch {
    pub fn encode(
        from_worker: u32,
        window: u64,
        events: &[(EventKey, Event)],
    ) -> Result<Self, EngineError> {
        let events = bitcode::serialize(events).map_err(|e| {
            EngineError::Transport(format!(
                "worker {from_worker} could not encode a batch of window {window}: {e}"
            ))
        })?;
        Ok(EventBatch {
            from_worker,
            window,
            events,
        })
    }

    pub fn decode(&self) -> Result<Vec<(EventKey, Event)>, EngineError> {
        bitcode::deserialize(&self.events).map_err(|e| {
            EngineError::Transport(format!(
                "a batch from worker {} could not be decoded: {e}",
                self.from_worker
            ))
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error("{0}")]
    Transport(String),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// Not a failure of the simulation: it was asked to stop, and stopped at a complete
    /// checkpoint.
    #[error(
        "stopped on request at the checkpoint before window {window} (simulated time {} ps)",
        time.as_ps()
    )]
    Stopped { window: u64, time: SimTime },
}

/// The worker's side of the window protocol.
pub trait Coordination {
    /// Sends a batch directly to a peer worker (never through the coordinator).
    fn send_batch(&mut self, to_worker: u32, batch: EventBatch) -> Result<(), EngineError>;
    /// Reports the finished window and waits for the next grant.
    fn exchange(&mut self, report: WindowReport) -> Result<WindowGrant, EngineError>;
    /// The `expected` batches peers sent before window `window` (tagged with an earlier
    /// window). A fast peer may already have sent batches of `window` itself: they wait.
    fn receive_batches(
        &mut self,
        window: u64,
        expected: u32,
    ) -> Result<Vec<EventBatch>, EngineError>;
}
