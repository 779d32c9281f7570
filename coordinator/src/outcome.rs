//! What a run ends with, whichever way it ran (embedded, over gRPC, under Slurm): its output
//! or its error, and how the engine ran. `run`, `distributed` and the reports all speak these
//! types, and this file imports none of them.

use sim_config::ConfigError;
use sim_engine::{RunResults, SimModel};
use sim_ir::time::SimTime;

use crate::checkpoint::Mark;
use crate::embedded::EngineStats;
use crate::output::summary::Summary;

impl From<sim_engine::Incomplete> for RunError {
    fn from(e: sim_engine::Incomplete) -> Self {
        RunError::Unfinished(e)
    }
}

impl From<worker::EngineError> for RunError {
    fn from(e: worker::EngineError) -> Self {
        RunError::Engine(e)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Partition(ConfigError),
    /// Not a `#[source]`: the message already holds the engine's, and `{:#}` would repeat it.
    #[error("simulation failed: {0}")]
    Engine(worker::EngineError),
    /// A distributed run's processes could not serve, reach each other or finish. Not a
    /// `#[source]`: the message holds it, and `{:#}` would print it twice.
    #[cfg(feature = "server")]
    #[error("simulation did not complete: {0}")]
    Transport(crate::distributed::failure::TransportError),
    /// The run's model was still held elsewhere when its results were assembled (a bug).
    #[error("simulation did not complete: the simulation model is still shared after the run")]
    ModelStillShared,
    /// More workers than partitions: a worker would have nothing to simulate.
    #[error(
        "{workers} workers, but engine.partition = \"{strategy}\" cuts this experiment into {partitions} partition(s) when asked for {workers} (hosts are never cut), and a worker needs at least one; start {partitions} workers or fewer"
    )]
    TooManyWorkers {
        workers: u32,
        partitions: u32,
        strategy: sim_config::PartitionStrategy,
    },
    /// The simulation ran, but a rank failed or never finished. Not a `#[source]`: the
    /// message holds it, and `{:#}` would print it twice.
    #[error("simulation did not complete: {0}")]
    Unfinished(sim_engine::Incomplete),
    /// A host or NIC of `[[faults]]` went down while the job ran.
    #[error(transparent)]
    JobStopped(#[from] sim_models::fault::JobStopped),
    /// A distributed run could not start: its token, TLS files or an address.
    #[cfg(feature = "server")]
    #[error(transparent)]
    Setup(#[from] crate::distributed::failure::SetupError),
    /// Checkpoints could not be set up or resumed from.
    /// Boxed: its resume errors carry four names, and a `RunError` travels in every result.
    #[error(transparent)]
    Checkpoint(Box<crate::checkpoint::CheckpointError>),
    /// One point of a sweep could not be loaded: names its combination of `--vary` values.
    #[error("sweep point {point}: {error}")]
    Point { point: String, error: Box<RunError> },
    /// Asked to stop (SIGTERM, SIGUSR1), the run wrote a checkpoint and stopped.
    #[error(
        "stopped on request at simulated time {:.6} s (window {}); the checkpoint is in {dir}; continue with `--resume {dir}`",
        mark.time.as_secs_f64(),
        mark.window
    )]
    Stopped { mark: Mark, dir: String },
}

#[cfg(feature = "server")]
impl From<crate::distributed::failure::TransportError> for RunError {
    fn from(e: crate::distributed::failure::TransportError) -> Self {
        RunError::Transport(e)
    }
}

impl From<crate::checkpoint::CheckpointError> for RunError {
    fn from(error: crate::checkpoint::CheckpointError) -> Self {
        RunError::Checkpoint(Box::new(error))
    }
}

#[derive(Debug)]
pub struct RunOutput {
    pub model: SimModel,
    pub results: RunResults,
    /// The slowest rank's finish.
    pub iteration_ps: SimTime,
    pub summary: Summary,
}

/// How the engine ran, for summary.json.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    pub mode: &'static str,
    /// What the run should say about how it was placed.
    pub warnings: Vec<String>,
    pub strategy: sim_config::PartitionStrategy,
    pub stats: EngineStats,
    pub peak_rss_bytes: u64,
}

/// Peak resident set size of this process (Linux `VmHWM`), 0 where unknown.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}
