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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

use fleetsim_proto::Message as _;
use fleetsim_proto::v1 as pb;
use pb::coordinator_client::CoordinatorClient;
use pb::coordinator_server::{Coordinator, CoordinatorServer};
use pb::worker_client::WorkerClient;
use pb::worker_server::{Worker, WorkerServer};
use sim::engine::{LpReport, RunResults, SimModel};
use sim::experiment::Experiment;
use sim::time::SimTime;
use sim::topology::NodeId;
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
use crate::output::report::EngineInfo;
use crate::run::{Placement, RunError, RunOutput, partition, peak_rss_bytes};

/// Metadata entry every call carries the run's token in.
pub const TOKEN_HEADER: &str = "x-fleetsim-token";
/// Largest gRPC message either side accepts (tonic's default is 4 MiB; a window's batch
/// for one peer can be far larger).
const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// How long a worker keeps trying to reach the coordinator when it starts first.
const CONNECT_PATIENCE: Duration = Duration::from_secs(30);
/// How long a coordinator waits by default for all its workers to register.
pub const REGISTRATION_PATIENCE: Duration = Duration::from_secs(300);
/// How often a worker says it is alive.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// Silence after which the coordinator gives a worker up, and a worker its coordinator: a
/// dead or stalled process stops the run within 10 s.
const SILENCE_LIMIT: Duration = Duration::from_secs(5);

fn transport(what: impl std::fmt::Display) -> EngineError {
    EngineError::Transport(what.to_string())
}

/// Refuses a call that does not carry `token`.
fn check_token<T>(request: &Request<T>, token: &str) -> Result<(), Status> {
    match request.metadata().get(TOKEN_HEADER).map(|v| v.to_str()) {
        Some(Ok(t)) if t == token => Ok(()),
        Some(_) => Err(Status::unauthenticated("wrong fleetsim token")),
        None => Err(Status::unauthenticated(
            "no fleetsim token: pass the coordinator's token with --token-file",
        )),
    }
}

/// A request carrying `token`.
fn with_token<T>(message: T, token: &str) -> Result<Request<T>, EngineError> {
    let mut request = Request::new(message);
    let value = token
        .parse()
        .map_err(|_| transport("the token holds characters gRPC metadata cannot carry"))?;
    request.metadata_mut().insert(TOKEN_HEADER, value);
    Ok(request)
}

/// What keeps a distributed run from starting: its token, its TLS files, an address.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot draw a random run token from the system: {0}")]
    RandomToken(getrandom::Error),
    #[error("cannot read the token file {path}: {error}")]
    TokenFile { path: String, error: std::io::Error },
    #[error("the token file {path} is empty; write the token on its first line")]
    EmptyToken { path: String },
    #[error(
        "--tls-dir {dir}: cannot read {name} ({error}); it needs ca.pem, and cert.pem and key.pem for the name `{TLS_NAME}` signed by that CA"
    )]
    TlsFile {
        dir: String,
        name: &'static str,
        error: std::io::Error,
    },
    #[error("the TLS certificate or key cannot be used: {0}")]
    Tls(tonic::transport::Error),
    #[error("{address} is not a HOST:PORT address: {error}")]
    Address {
        address: String,
        error: tonic::codegen::http::uri::InvalidUri,
    },
}

/// A new token for a run: 128 bits from the operating system's random source, so that no
/// one who knows when and where the run started can guess it.
pub fn new_token() -> Result<String, SetupError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(SetupError::RandomToken)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The name every process's certificate is issued for: peers check it instead of host
/// names, so one certificate serves a whole cluster.
pub const TLS_NAME: &str = "fleetsim";

/// `--tls-dir`: the CA every process trusts and this process's certificate and key, all
/// PEM. Both ends present their certificate (mutual TLS).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl TlsFiles {
    /// Reads `ca.pem`, `cert.pem` and `key.pem` from `dir`.
    pub fn load(dir: &Path) -> Result<TlsFiles, SetupError> {
        let read = |name: &'static str| {
            std::fs::read(dir.join(name)).map_err(|error| SetupError::TlsFile {
                dir: dir.display().to_string(),
                name,
                error,
            })
        };
        Ok(TlsFiles {
            ca: read("ca.pem")?,
            cert: read("cert.pem")?,
            key: read("key.pem")?,
        })
    }

    fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
    }

    fn client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(TLS_NAME)
    }
}

/// A server builder, with TLS when `tls` is given.
fn server(tls: Option<&TlsFiles>) -> Result<Server, SetupError> {
    let builder = Server::builder().http2_adaptive_window(Some(true));
    match tls {
        Some(t) => builder.tls_config(t.server()).map_err(SetupError::Tls),
        None => Ok(builder),
    }
}

/// The endpoint of `address`, over TLS when `tls` is given.
fn endpoint(address: &str, tls: Option<&TlsFiles>) -> Result<Endpoint, SetupError> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let e = Channel::from_shared(format!("{scheme}://{address}"))
        .map_err(|error| SetupError::Address {
            address: address.to_string(),
            error,
        })?
        .tcp_nodelay(true);
    match tls {
        Some(t) => e.tls_config(t.client()).map_err(SetupError::Tls),
        None => Ok(e),
    }
}

/// Whether a failed connection only means nothing listens there yet (the coordinator may
/// start after its workers); anything else will not get better by waiting.
fn not_listening_yet(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::TimedOut
            );
        }
        cause = c.source();
    }
    // No I/O cause (e.g. a name that does not resolve yet): keep trying until the deadline.
    true
}

/// An error and its causes, one line.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
        cause = c.source();
    }
    out
}

/// Reads a token file (its first line, trimmed).
pub fn read_token(path: &Path) -> Result<String, SetupError> {
    let text = std::fs::read_to_string(path).map_err(|error| SetupError::TokenFile {
        path: path.display().to_string(),
        error,
    })?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(SetupError::EmptyToken {
            path: path.display().to_string(),
        });
    }
    Ok(token)
}

/// What a worker submits at the end: its LPs' reports and its statistics.
type WorkerResults = (Vec<(NodeId, LpReport)>, WorkerStats);

/// One `SubmitResults` call: some of a worker's reports, and with the last of them its
/// statistics. A worker sends its results in parts, so that neither side ever holds them
/// all encoded (once in the payload, once more in gRPC's buffer) beside the reports: at
/// 131,072 GPUs on 4 workers that was a worker's peak.
type ResultsPart = (Vec<(NodeId, LpReport)>, Option<WorkerStats>);

/// LP reports per [`ResultsPart`]: a few MB encoded.
const REPORTS_PER_PART: usize = 4096;

/// A worker's results as the parts it sends, `per_part` reports each (any order: the
/// coordinator sorts them), the statistics with the last.
fn results_parts(
    mut reports: Vec<(NodeId, LpReport)>,
    stats: WorkerStats,
    per_part: usize,
) -> impl Iterator<Item = ResultsPart> {
    let mut stats = Some(stats);
    std::iter::from_fn(move || {
        stats.as_ref()?;
        let part = reports.split_off(reports.len().saturating_sub(per_part.max(1)));
        let last = reports.is_empty().then(|| stats.take()).flatten();
        Some((part, last))
    })
}

/// Adds a received part to the reports of the worker's `earlier` parts: its whole results
/// once the part is its last.
fn gather_part(
    earlier: &mut Vec<(NodeId, LpReport)>,
    (reports, stats): ResultsPart,
) -> Option<WorkerResults> {
    earlier.extend(reports);
    stats.map(|stats| (std::mem::take(earlier), stats))
}

/// What the coordinator needs besides the loaded experiment.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// `HOST:PORT`; port 0 picks a free one (reported to `on_listening`).
    pub listen: String,
    pub workers: u32,
    pub token: String,
    /// The experiment file and overrides the workers load (absolute path).
    pub experiment_path: PathBuf,
    pub sets: Vec<String>,
    /// When `listen`'s port is taken, bind any free port instead (Slurm: the address file
    /// tells the workers).
    pub any_port_fallback: bool,
    pub tls: Option<TlsFiles>,
    /// How long to wait for every worker to register ([`REGISTRATION_PATIENCE`] by default).
    pub registration_patience: Duration,
    pub checkpoints: CheckpointOptions,
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

/// The coordinator's shared state.
struct Hub {
    /// Where checkpoints go (absolute).
    checkpoint_dir: PathBuf,
    expected: u32,
    reply: pb::RegisterReply,
    addresses: Vec<String>,
    hosts: Vec<String>,
    /// Most threads any worker runs.
    threads: u32,
    /// When each registered worker was last heard from.
    last_seen: Vec<Instant>,
    rounds: CombiningBarrier,
    results: Vec<Option<WorkerResults>>,
    /// Per worker, the reports of the parts it sent before its last.
    early_reports: Vec<Vec<(NodeId, LpReport)>>,
    submitted: u32,
    /// Encoded window reports and grants, bytes.
    window_bytes: u64,
    failed: Option<String>,
}

impl Hub {
    /// Where a stopped run can go on from, in words.
    fn last_checkpoint(&self) -> String {
        let dir = self.checkpoint_dir.display();
        match self.rounds.driver.checkpoints.as_ref().and_then(|c| c.last) {
            Some(m) => format!(
                "The last checkpoint is in {dir} (window {}, simulated time {:.6} s): go on with `--resume {dir}`",
                m.window,
                m.time().as_secs_f64()
            ),
            None => "No checkpoint had completed; start again (with --checkpoint-every to be able to resume)".to_string(),
        }
    }
}

#[derive(Clone)]
struct CoordinatorService {
    hub: Arc<Mutex<Hub>>,
    /// Rings on every change a waiting call may be waiting for.
    changed: Arc<Notify>,
    /// The run's token; fixed, so outside the hub's lock.
    token: Arc<str>,
}

impl CoordinatorService {
    /// Waits until `ready` holds for the hub (checked under its lock), or the run stopped.
    async fn wait_until<R>(
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

    /// Notes that worker `id` was heard from.
    fn seen(&self, id: u32) {
        if let Some(t) = self.hub.lock().last_seen.get_mut(id as usize) {
            *t = Instant::now();
        }
    }

    /// Stops the run if a registered worker that has not finished went silent, or if the
    /// workers did not all register within `patience` of `started`.
    fn watch(&self, started: Instant, patience: Duration) {
        let mut hub = self.hub.lock();
        if hub.failed.is_some() {
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
        let silent = (0..hub.last_seen.len()).find(|&w| {
            all_registered
                && hub.results.get(w).is_some_and(Option::is_none)
                && hub.last_seen[w].elapsed() > SILENCE_LIMIT
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
            hub.last_seen.push(Instant::now());
            if hub.addresses.len() as u32 == hub.expected {
                let now = Instant::now();
                hub.last_seen.iter_mut().for_each(|t| *t = now);
            }
            (hub.addresses.len() - 1) as u32
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
                    next_event_ps: r.next_event_ps,
                    earliest_sent_ps: r.earliest_sent_ps,
                    promise_ps: r.promise_ps,
                    waiting_distance_ps: r.waiting_distance_ps,
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
            end_ps: grant.end_ps,
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

/// Runs a distributed simulation of `exp`: serves until every worker submitted its results.
/// `on_listening` hears the bound address (with the real port when `listen` asked for 0).
pub fn run_coordinator(
    exp: &Experiment,
    options: &CoordinatorOptions,
    progress: Option<ProgressHook>,
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> Result<RunOutput, RunError> {
    let started = Instant::now();
    let model = SimModel::from_experiment(exp, false)?;
    let workers = options.workers.max(1);
    let partition = partition(exp, &model, Placement::remote(exp, workers))?;
    let map = LpMap::new(partition.partition_of.clone());
    let owners = assign_workers(map.partitions, workers, &partition.weights);
    let checkpoints = checkpoint::prepare(exp, &model, &options.checkpoints, workers)?;
    let resume_parts = checkpoints
        .resume_parts
        .iter()
        .flatten()
        .map(|f| f.display().to_string())
        .collect();
    let checkpoint_dir = checkpoints.dir.clone();
    let mut runs: Vec<pb::PartitionRun> = Vec::new();
    for &p in &partition.partition_of {
        match runs.last_mut() {
            Some(r) if r.partition == p => r.count += 1,
            _ => runs.push(pb::PartitionRun {
                partition: p,
                count: 1,
            }),
        }
    }
    let service = CoordinatorService {
        hub: Arc::new(Mutex::new(Hub {
            expected: workers,
            reply: pb::RegisterReply {
                worker_id: 0,
                experiment_path: options.experiment_path.display().to_string(),
                sets: options.sets.clone(),
                partition_runs: runs,
                partition_owner: owners,
                peer_addresses: Vec::new(),
                lookahead_ps: partition.lookahead_ps.unwrap_or(0),
                checkpoint_dir: checkpoint_dir.display().to_string(),
                resume_parts,
                fingerprint: checkpoints.fingerprint.clone(),
            },
            checkpoint_dir: checkpoint_dir.clone(),
            addresses: Vec::new(),
            hosts: Vec::new(),
            threads: 1,
            last_seen: Vec::new(),
            rounds: {
                let lookahead = partition.lookahead_ps.map(SimTime::from_ps);
                let rounds = CombiningBarrier::new(workers, lookahead, progress)
                    .with_checkpoints(checkpoints.schedule);
                let scheduling = worker::Scheduling::for_run(
                    &exp.loaded.config.engine.scheduling,
                    workers,
                    false,
                );
                if scheduling.wide_windows(workers) {
                    rounds.widening()
                } else {
                    rounds
                }
            },
            results: vec![None; workers as usize],
            early_reports: vec![Vec::new(); workers as usize],
            submitted: 0,
            window_bytes: 0,
            failed: None,
        })),
        changed: Arc::new(Notify::new()),
        token: Arc::from(options.token.as_str()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| {
            RunError::Incomplete(format!("cannot start the coordinator's runtime: {e}"))
        })?;
    let addr: std::net::SocketAddr = options.listen.parse().map_err(|e| {
        RunError::Incomplete(format!(
            "--listen {}: not a HOST:PORT address ({e})",
            options.listen
        ))
    })?;
    let served = runtime.block_on(async {
        // Windows are short and back to back: no Nagle delay on the replies.
        let bound = match TcpIncoming::bind(addr) {
            Err(_) if options.any_port_fallback => {
                TcpIncoming::bind(std::net::SocketAddr::new(addr.ip(), 0))
            }
            other => other,
        };
        let incoming = bound
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?
            .with_nodelay(Some(true));
        let local = incoming
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        on_listening(local);
        let watchdog = service.clone();
        let (listening, patience) = (Instant::now(), options.registration_patience);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT_EVERY / 2).await;
                watchdog.watch(listening, patience);
            }
        });
        let done = service.clone();
        let all_in = async move {
            // Ends on the last results, or at once (with an error) when the run stopped.
            let _ = done
                .wait_until(|hub| (hub.submitted == hub.expected).then_some(()))
                .await;
        };
        server(options.tls.as_ref())
            .map_err(|e| e.to_string())?
            .add_service(
                CoordinatorServer::new(service.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, all_in)
            .await
            .map_err(|e| format!("the coordinator's server failed: {e}"))
    });
    served.map_err(RunError::Incomplete)?;
    let mut hub = service.hub.lock();
    if let Some(why) = hub.failed.take() {
        return Err(RunError::Incomplete(why));
    }
    if let Some(mark) = hub.rounds.driver.stopped {
        return Err(RunError::Stopped {
            mark,
            dir: checkpoint_dir.display().to_string(),
        });
    }
    let mut reports = Vec::new();
    let mut stats = Vec::new();
    for (r, s) in hub.results.iter_mut().filter_map(Option::take) {
        reports.extend(r);
        stats.push(s);
    }
    let threads = hub.threads as usize;
    let mut stats = EngineStats::from_workers(
        &stats,
        threads,
        map.partitions,
        &hub.rounds.driver,
        partition.lookahead_ps,
        started.elapsed().as_secs_f64(),
    );
    stats.coordinator_bytes = hub.window_bytes;
    let engine = EngineInfo {
        mode: "distributed",
        warnings: partition.warnings.clone(),
        strategy: exp.loaded.config.engine.partition.clone(),
        stats,
        peak_rss_bytes: peak_rss_bytes(),
    };
    drop(hub);
    RunOutput::new(exp, model, RunResults::assemble(reports), &engine)
}

/// Batches peers delivered, waiting for the window loop to take them.
#[derive(Default)]
struct Inbox {
    batches: Mutex<Vec<EventBatch>>,
    arrived: Condvar,
}

struct WorkerService {
    inbox: Arc<Inbox>,
    token: String,
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

/// Why this worker must stop (the coordinator went silent or stopped the run), once known.
type StopReason = Arc<Mutex<Option<String>>>;

/// Resolves when a stop reason is set.
async fn stopped(stop: &StopReason) -> String {
    loop {
        if let Some(why) = stop.lock().clone() {
            return why;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The window loop's side of the gRPC protocol: blocking calls on the worker's runtime.
struct GrpcCoordination<'a> {
    runtime: &'a tokio::runtime::Runtime,
    stop: StopReason,
    /// The first batch a peer did not take (sends run in the background).
    failed_send: Arc<Mutex<Option<String>>>,
    tls: Option<&'a TlsFiles>,
    id: u32,
    token: String,
    coordinator: CoordinatorClient<Channel>,
    peer_addresses: Vec<String>,
    /// One long-lived `Deliver` stream per peer, opened at the first batch for it: a batch
    /// is one more message on the stream, not a new call.
    peers: Vec<Option<tokio::sync::mpsc::UnboundedSender<pb::EventBatch>>>,
    inbox: Arc<Inbox>,
}

impl GrpcCoordination<'_> {
    /// The first failure of a background send, as an error.
    fn check_sends(&self) -> Result<(), EngineError> {
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
                next_event_ps: report.next_event_ps,
                earliest_sent_ps: report.earliest_sent_ps,
                promise_ps: report.promise_ps,
                waiting_distance_ps: report.waiting_distance_ps,
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
            end_ps: g.end_ps,
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

/// What a worker process reports when its part is done.
#[derive(Debug, Clone)]
pub struct WorkerSummary {
    pub id: u32,
    pub workers: u32,
    pub partitions: u32,
    pub events: u64,
    /// The run stopped at a checkpoint instead of completing.
    pub stopped: bool,
}

/// Runs a worker: serves `Worker` on `listen`, registers with the coordinator at the address
/// `coordinator` gives (asked again on every connection attempt, so a rendezvous file that
/// appears late is seen), runs its partitions and submits their reports.
pub fn run_worker_process(
    coordinator: &dyn Fn() -> String,
    listen: &str,
    threads: Option<usize>,
    token: &str,
    tls: Option<&TlsFiles>,
    stop_requested: Arc<AtomicBool>,
) -> Result<WorkerSummary, RunError> {
    let fail = |what: String| RunError::Incomplete(what);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| fail(format!("cannot start the worker's runtime: {e}")))?;
    let addr: std::net::SocketAddr = listen
        .parse()
        .map_err(|e| fail(format!("--listen {listen}: not a HOST:PORT address ({e})")))?;
    let inbox = Arc::new(Inbox::default());
    let incoming = runtime
        .block_on(async { TcpIncoming::bind(addr) })
        .map_err(|e| fail(format!("cannot listen on {addr}: {e}")))?
        .with_nodelay(Some(true));
    let local = incoming
        .local_addr()
        .map_err(|e| fail(format!("cannot read the bound address: {e}")))?;
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let service = WorkerService {
        inbox: Arc::clone(&inbox),
        token: token.to_string(),
    };
    let server = runtime.spawn(
        server(tls)?
            .add_service(
                WorkerServer::new(service)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, async {
                let _ = server_stopped.await;
            }),
    );
    let deadline = Instant::now() + CONNECT_PATIENCE;
    let (channel, coordinator) = loop {
        let coordinator = coordinator();
        let endpoint = endpoint(&coordinator, tls)?;
        match runtime.block_on(endpoint.connect()) {
            Ok(c) => break (c, coordinator),
            Err(e) if !not_listening_yet(&e) => {
                return Err(fail(format!(
                    "cannot talk to the coordinator at {coordinator}: {} (do both use --tls-dir, or neither?)",
                    error_chain(&e)
                )));
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(fail(format!(
                    "cannot reach the coordinator at {coordinator} within {} s: {}",
                    CONNECT_PATIENCE.as_secs(),
                    error_chain(&e)
                )));
            }
            // SIGTERM or SIGUSR1 before registering: nothing ran, nothing to checkpoint.
            Err(_) if stop_requested.load(Ordering::Relaxed) => {
                return Err(fail(format!(
                    "asked to stop while waiting for the coordinator at {coordinator}; nothing ran"
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut client = CoordinatorClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let host = host_name();
    // Peers on other hosts cannot reach 0.0.0.0: advertise the host name instead.
    let advertised = if local.ip().is_unspecified() {
        format!("{host}:{}", local.port())
    } else {
        local.to_string()
    };
    let threads = threads
        .filter(|&t| t > 0)
        .unwrap_or_else(crate::run::idle_cores);
    let request = with_token(
        pb::RegisterRequest {
            listen_address: advertised,
            threads: threads as u32,
            host,
        },
        token,
    )?;
    tracing::info!(coordinator = %coordinator, listen = %local, "registering");
    let reply = runtime
        .block_on(client.register(request))
        .map_err(|e| {
            let hint = if e.code() == tonic::Code::Unauthenticated {
                ""
            } else {
                " (do both sides use --tls-dir, or neither?)"
            };
            fail(format!(
                "the coordinator at {coordinator} refused to register this worker: {}{hint}",
                e.message()
            ))
        })?
        .into_inner();
    tracing::info!(
        worker = reply.worker_id,
        workers = reply.peer_addresses.len(),
        experiment = %reply.experiment_path,
        "registered; building the model"
    );
    // Heartbeats from registration on, so that building a large model (seconds at 131,072
    // GPUs, more under a profiler) does not look like silence: the coordinator learns this
    // worker is alive; this worker learns whether the run goes on, and stops by itself when
    // the coordinator goes silent.
    let stop: StopReason = Arc::new(Mutex::new(None));
    let beat = {
        let (mut client, stop, inbox) = (client.clone(), Arc::clone(&stop), Arc::clone(&inbox));
        let (token, id, coordinator) =
            (token.to_string(), reply.worker_id, coordinator.to_string());
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
    };
    let exp = Experiment::load(Path::new(&reply.experiment_path), &reply.sets)
        .map_err(|e| fail(format!("cannot load the run's experiment: {e}")))?;
    let model = SimModel::from_experiment(&exp, false)?;
    let partition_of: Vec<u32> = reply
        .partition_runs
        .iter()
        .flat_map(|r| std::iter::repeat_n(r.partition, r.count as usize))
        .collect();
    let fingerprint = crate::checkpoint::fingerprint(&exp, &model);
    if fingerprint != reply.fingerprint {
        return Err(fail(format!(
            "this worker's copy of {} builds another model than the coordinator's (fingerprint {fingerprint}, the coordinator's {}): every process must read the same experiment files, at the same path, with the same --set",
            reply.experiment_path, reply.fingerprint
        )));
    }
    if partition_of.len() != model.topology.nodes().len() {
        return Err(fail(format!(
            "the coordinator partitioned {} LPs, this worker's topology has {}: do both read the same experiment file?",
            partition_of.len(),
            model.topology.nodes().len()
        )));
    }
    let map = LpMap::new(partition_of);
    let workers = reply.peer_addresses.len() as u32;
    // This process's own threads against its cores: peers elsewhere do not share them.
    let oversubscribed = crate::embedded::oversubscribed(1, threads);
    let setup = WorkerSetup {
        id: reply.worker_id,
        workers,
        model: Arc::new(model),
        map: Arc::new(map),
        owner: Arc::new(reply.partition_owner.clone()),
        threads,
        oversubscribed,
        checkpoint_dir: Some(PathBuf::from(&reply.checkpoint_dir))
            .filter(|d| !d.as_os_str().is_empty()),
        resume: (!reply.resume_parts.is_empty())
            .then(|| reply.resume_parts.iter().map(PathBuf::from).collect()),
        stop_requested: Some(stop_requested),
        scheduling: worker::Scheduling::for_run(
            &exp.loaded.config.engine.scheduling,
            workers,
            oversubscribed,
        ),
        lookahead_ps: (reply.lookahead_ps > 0).then_some(reply.lookahead_ps),
        promises: exp.loaded.config.engine.promises,
    };
    let mut coordination = GrpcCoordination {
        runtime: &runtime,
        stop: Arc::clone(&stop),
        failed_send: Arc::new(Mutex::new(None)),
        tls,
        id: reply.worker_id,
        token: token.to_string(),
        coordinator: client.clone(),
        peers: vec![None; workers as usize],
        peer_addresses: reply.peer_addresses.clone(),
        inbox,
    };
    let outcome = run_worker(&setup, &mut coordination);
    // Closes the streams to the peers, so their servers can shut down.
    drop(coordination);
    beat.abort();
    let mut outcome = outcome?;
    outcome.stats.peak_rss_bytes = peak_rss_bytes();
    tracing::info!(
        worker = reply.worker_id,
        events = outcome.stats.events,
        windows = outcome.stats.windows,
        bytes_sent = outcome.stats.bytes_sent,
        "partitions done; submitting results"
    );
    let summary = WorkerSummary {
        id: reply.worker_id,
        workers,
        partitions: outcome.stats.partitions,
        events: outcome.stats.events,
        stopped: outcome.stopped,
    };
    for part in results_parts(outcome.reports, outcome.stats, REPORTS_PER_PART) {
        let payload = bitcode::serialize(&part)
            .map_err(|e| fail(format!("cannot encode this worker's results: {e}")))?;
        let request = with_token(
            pb::ResultsChunk {
                worker_id: reply.worker_id,
                payload,
            },
            token,
        )?;
        runtime
            .block_on(client.submit_results(request))
            .map_err(|e| {
                fail(format!(
                    "the coordinator did not take this worker's results: {e}"
                ))
            })?;
    }
    let _ = stop_server.send(());
    let _ = runtime.block_on(server);
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(digest: u64) -> LpReport {
        LpReport {
            digest,
            ..LpReport::default()
        }
    }

    /// Sent in parts and gathered again, a worker's results are all there, once, with its
    /// statistics; a worker without LPs still sends its statistics.
    #[test]
    fn results_sent_in_parts_are_gathered_whole() {
        for (lps, per_part, parts) in [(10, 3, 4), (9, 3, 3), (0, 3, 1), (5, 4096, 1)] {
            let reports: Vec<_> = (0..lps).map(|i| (i as NodeId, report(i))).collect();
            let stats = WorkerStats {
                events: 7,
                ..WorkerStats::default()
            };
            let sent: Vec<ResultsPart> = results_parts(reports, stats, per_part).collect();
            assert_eq!(sent.len(), parts, "{lps} LPs in parts of {per_part}");
            let mut earlier = Vec::new();
            let mut whole = None;
            for (i, part) in sent.into_iter().enumerate() {
                assert_eq!(part.1.is_some(), i + 1 == parts, "statistics come last");
                // Encoded as they travel.
                let bytes = bitcode::serialize(&part).expect("encode");
                let part: ResultsPart = bitcode::deserialize(&bytes).expect("decode");
                whole = gather_part(&mut earlier, part);
            }
            let (mut got, stats) = whole.expect("complete after the last part");
            got.sort_by_key(|(id, _)| *id);
            let want: Vec<_> = (0..lps).map(|i| (i as NodeId, report(i))).collect();
            assert_eq!(got, want);
            assert_eq!(stats.events, 7);
            assert!(earlier.is_empty());
        }
    }
}
