//! Distributed runs over gRPC (DESIGN.md, "Windows and mailboxes"): `fleetsim coordinator`
//! and `fleetsim worker`.
//!
//! The coordinator partitions the topology and serves the `Coordinator` service: workers
//! register (their `Worker` service address, their host), and once all have, each learns its
//! id, the experiment (path and overrides, read from the shared file system as under Slurm),
//! the partition of every LP, the owner of every partition and its peers' addresses. Each
//! worker builds the model and only its own partitions' LPs, then runs the same window loop
//! as an embedded worker ([`worker::run_worker`]) through [`GrpcCoordination`]: event batches
//! go straight to the peer that owns their partitions (`Worker.Deliver`), window reports to
//! the coordinator, whose combining barrier answers every worker with the next window
//! ([`WindowDriver`], shared with the embedded run). At the end each worker submits its LP
//! reports; the coordinator assembles the same results an embedded run gives.
//!
//! Every call carries the run's token in [`TOKEN_HEADER`]; calls without it are refused.
//! The async runtime serves RPCs only: the window loop runs on plain threads and blocks on
//! its calls, so tokio stays out of the simulation's hot path.
//!
//! The modules: `auth` (the run's token and TLS), `coordinator_service` (the `Coordinator`
//! gRPC service and its hub), `coordinator` (`run_coordinator`: partition, serve, assemble),
//! `heartbeat` (who is alive, on both sides), `results` (results sent in parts),
//! `worker_service` (the `Worker` gRPC service: batches from peers), `worker_client` (the
//! window loop's calls, [`GrpcCoordination`]) and `worker_process` (`run_worker_process`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dashmap::DashMap;
use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

use fleetsim_proto::Message as _;
use fleetsim_proto::v1 as pb;
use pb::coordinator_client::CoordinatorClient;
use pb::coordinator_server::{Coordinator, CoordinatorServer};
use pb::worker_client::WorkerClient;
use pb::worker_server::{Worker, WorkerServer};
use sim::experiment::Experiment;
use sim_engine::{LpReport, RunResults, SimModel};
use sim_models::topology::NodeId;
use tokio::sync::Notify;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};
use tonic::{Request, Response, Status};
use worker::{
    Coordination, EngineError, EventBatch, LpMap, WindowGrant, WindowReport, WorkerSetup,
    WorkerStats, run_worker,
};

use crate::checkpoint::{self, CheckpointOptions};
use crate::driver::{CombiningBarrier, ProgressHook};
use crate::embedded::{EngineStats, assign_workers};
use crate::outcome::{EngineInfo, RunError, RunOutput, peak_rss_bytes};
use crate::run::{Placement, partition};

/// Metadata entry every call carries the run's token in.
pub const TOKEN_HEADER: &str = "x-fleetsim-token";
/// Largest gRPC message either side accepts (tonic's default is 4 MiB; a window's batch
/// for one peer can be far larger).
const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// How long a worker keeps trying to reach the coordinator when it starts first.
const CONNECT_PATIENCE: Duration = Duration::from_secs(30);
/// How long a coordinator waits by default for all its workers to register.
pub const REGISTRATION_PATIENCE: Duration = Duration::from_secs(300);

fn transport(what: impl std::fmt::Display) -> EngineError {
    EngineError::Transport(what.to_string())
}

/// This machine's host name (Linux), for addresses peers on other hosts can reach.
pub fn host_name() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

mod auth;
mod coordinator;
mod coordinator_service;
pub mod failure;
mod heartbeat;
mod results;
mod wire_time;
mod worker_client;
mod worker_process;
mod worker_service;

pub use auth::{TlsFiles, new_token, read_token};
pub use coordinator::{CoordinatorOptions, run_coordinator};
pub use failure::{SetupError, TransportError};
use failure::{TLS_NAME, listen_address, rpc_runtime};
pub use worker_process::{WorkerSummary, run_worker_process};

use auth::{check_token, endpoint, error_chain, not_listening_yet, server, with_token};
use coordinator_service::{CoordinatorService, Hub};
use heartbeat::{HEARTBEAT_EVERY, StopReason, stopped, worker_heartbeats};
use results::{REPORTS_PER_PART, ResultsPart, WorkerResults, gather_part, results_parts};
use worker_client::GrpcCoordination;
use worker_service::{Inbox, WorkerService};

/// A duration in milliseconds that a test sets in the environment variable `var`, to make
/// a small run wait or give up as a huge one would; `None` when unset or not a number.
fn test_millis(var: &str) -> Option<Duration> {
    std::env::var(var)
        .ok()?
        .parse()
        .ok()
        .map(Duration::from_millis)
}
