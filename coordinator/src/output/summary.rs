//! `summary.json` as a type (SPEC.md, "Output directory"): what a run wrote, and what `sweep`,
//! `validate`, `plan` and the closing lines of `run` read back. A field that is missing or
//! misspelt is an error when read, never a zero.
//!
//! Written with its keys sorted at every level (through `serde_json::Value`, whose maps are
//! ordered), as summary.json always was; the field order here is for reading.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One run's headline numbers, where its time went, and how the engine ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub name: String,
    pub gpus: u32,
    pub iteration_time_s: f64,
    /// None (n/a) when the workload names no tokens (a SimAI workload file).
    pub tokens_per_s: Option<f64>,
    /// Global batches (iterations) per second.
    pub batches_per_s: f64,
    /// Sequences per second; None with the tokens.
    pub samples_per_s: Option<f64>,
    /// Model TFLOP/s per GPU; None (n/a) when the workload carries no FLOPs (a SimAI
    /// workload file gives kernel times).
    pub tflops_per_gpu: Option<f64>,
    pub mfu: Option<f64>,
    /// Mean over ranks.
    pub breakdown_s: Breakdown,
    /// `[[jobs]]`: each job's figures; absent for one job. With jobs, the rates above are
    /// their sums, the per-GPU figures rank-weighted means, and the iteration the last
    /// job's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<JobSummary>>,
    pub result_digest: String,
    pub network: NetworkSummary,
    pub engine: EngineSummary,
    pub warnings: Vec<String>,
    /// The experiment's key settings by key (`parallel.tp`, `network.model`, ...): what
    /// `fleetsim report` shows and compares between runs.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
}

/// One job of a multi-job run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSummary {
    pub name: String,
    pub gpus: u32,
    /// Its hosts as a Slurm host list (`host[0-15,32-47]`).
    pub hosts: String,
    /// `packed`, `spread`, `random` or `hosts` (named in the experiment).
    pub placement: String,
    /// When it started its iteration (`start_s`).
    pub start_s: f64,
    /// From its start to its slowest rank's finish.
    pub iteration_time_s: f64,
    pub tokens_per_s: Option<f64>,
    pub samples_per_s: Option<f64>,
    pub tflops_per_gpu: Option<f64>,
    pub mfu: Option<f64>,
    /// Mean over the job's ranks; idle counted to the job's own end.
    pub breakdown_s: Breakdown,
    /// The same job on the same hosts with the cluster to itself; None where not run
    /// (`--no-alone`, distributed runs).
    pub alone_iteration_time_s: Option<f64>,
    /// `iteration_time_s / alone_iteration_time_s`: what sharing the fabric costs it.
    pub slowdown: Option<f64>,
}

/// Where a rank's iteration went, seconds, averaged over ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Breakdown {
    pub compute: f64,
    pub exposed_comm: f64,
    pub bubble: f64,
    /// Finished before the slowest rank.
    pub idle: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSummary {
    pub model: String,
    pub intra_host: String,
    pub segment_bytes: u64,
    pub congestion_control: String,
    /// Flow mode only.
    pub flow: Option<FlowSummary>,
}

/// Flows started, rate recomputations and the flows they re-solved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSummary {
    pub flows: u64,
    pub rate_recomputations: u64,
    pub flows_touched: u64,
    pub max_active_flows: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSummary {
    /// `embedded` or `distributed`.
    pub mode: String,
    /// Data-parallel replicas each simulated one stands for: 1 when every rank ran, the
    /// replica count when one replica ran for all (`sim_engine::symmetry`).
    #[serde(default = "one_replica")]
    pub replicas_per_simulated: u32,
    /// Which ranks ran, and why not one replica for all when every rank did.
    #[serde(default)]
    pub symmetry: String,
    /// Events this process's workers ran, by kind (those that ran at all).
    #[serde(default)]
    pub events_by_kind: BTreeMap<String, u64>,
    pub workers: u32,
    pub partitions: u32,
    pub strategy: String,
    pub threads: usize,
    pub events: u64,
    pub windows: u64,
    pub events_per_window: f64,
    pub cross_partition_events: u64,
    /// Cross-partition events by how many lookaheads after their sending they arrived.
    pub cross_partition_slack: BTreeMap<String, u64>,
    /// None with one partition.
    pub lookahead_s: Option<f64>,
    /// What ended the windows: `promise`, `lookahead`, `widening` or `uncut`.
    pub window_end: String,
    pub wall_s: f64,
    /// Events run before the checkpoint this run resumed from.
    pub resumed_events: u64,
    /// Events this process ran per second of wall time.
    pub events_per_s: f64,
    pub sync_fraction: f64,
    pub scheduling: String,
    pub thread_wait_s: f64,
    pub parallel_windows: u64,
    pub parallel_events: u64,
    pub peak_rss_bytes: u64,
    pub coordinator_bytes_per_window: f64,
    /// Several workers: how evenly windows loaded them.
    pub emulated_efficiency: Option<f64>,
    pub barrier_round_trip_s: RoundTripSummary,
    pub per_worker: Vec<WorkerSummary>,
}

/// What each barrier of a distributed run cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoundTripSummary {
    pub median: Option<f64>,
    pub p99: Option<f64>,
    pub count: u64,
}

/// One worker's part of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSummary {
    pub worker: usize,
    pub partitions: u32,
    pub events: u64,
    pub cross_worker_events: u64,
    pub bytes_sent: u64,
    pub busy_s: f64,
    pub barrier_wait_s: f64,
    pub scheduling: String,
    pub sub_windows: u64,
    pub thread_wait_s: f64,
    /// Best speed-up over one thread on 2, 4, 8, 16 and unlimited threads; None with
    /// asynchronous scheduling.
    pub speedup_bound: Option<BTreeMap<String, f64>>,
    /// A worker process's own peak; None in process.
    pub peak_rss_bytes: Option<u64>,
}

impl Summary {
    /// The sorted-key, pretty JSON text of summary.json, without the final newline.
    pub fn to_json_text(&self) -> String {
        serde_json::to_value(self)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .expect("a summary is plain data")
    }

    pub fn from_json_text(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

fn one_replica() -> u32 {
    1
}
