//! `run_coordinator`: partitions, serves the workers, and assembles their results.

use super::*;

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

/// Runs a distributed simulation of `exp`: serves until every worker submitted its results.
/// `on_listening` hears the bound address (with the real port when `listen` asked for 0).
pub fn run_coordinator(
    exp: &Experiment,
    options: &CoordinatorOptions,
    progress: Option<ProgressHook>,
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> Result<RunOutput, RunError> {
    let started = Instant::now();
    // Listen before building: workers started beside the coordinator (srun's tasks,
    // tools/grpc-local.sh) connect at once and wait in their registration while a large
    // model is built and partitioned (a minute at 1,048,576 GPUs), instead of giving up
    // after CONNECT_PATIENCE of refused connections.
    let listener = bind(options)?;
    let local = listener
        .local_addr()
        .map_err(|e| TransportError::BoundAddress(e.to_string()))?;
    on_listening(local);
    if let Some(hold) = test_hold_build() {
        std::thread::sleep(hold);
    }
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
                lookahead: partition.lookahead.and_then(super::wire_time::to_wire),
                checkpoint_dir: checkpoint_dir.display().to_string(),
                resume_parts,
                fingerprint: checkpoints.fingerprint.clone(),
            },
            checkpoint_dir: checkpoint_dir.clone(),
            addresses: Vec::new(),
            hosts: Vec::new(),
            threads: 1,
            rounds: {
                let lookahead = partition.lookahead;
                let rounds = CombiningBarrier::new(workers, lookahead, progress)
                    .with_checkpoints(checkpoints.schedule);
                let scheduling = worker::Scheduling::for_run(
                    exp.loaded.config.engine.scheduling,
                    worker::RunShape {
                        workers,
                        threads: 0,
                        oversubscribed: false,
                        // The coordinator cannot know a remote worker's threads; a lone gRPC
                        // worker stays asynchronous, as it decides for itself below.
                        closed_form: false,
                    },
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
        last_seen: Arc::new(DashMap::new()),
    };
    let runtime = rpc_runtime("coordinator")?;
    let served = runtime.block_on(async {
        // Windows are short and back to back: no Nagle delay on the replies.
        let incoming = tokio::net::TcpListener::from_std(listener)
            .map(TcpIncoming::from)
            .map_err(|e| TransportError::Listen {
                address: local,
                error: e.to_string(),
            })?
            .with_nodelay(Some(true));
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
        server(options.tls.as_ref())?
            .add_service(
                CoordinatorServer::new(service.clone())
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, all_in)
            .await
            .map_err(|e| TransportError::Server(e.to_string()))
    });
    served?;
    let mut hub = service.hub.lock();
    if let Some(why) = hub.failed.take() {
        return Err(TransportError::Stopped(why).into());
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
        partition.lookahead,
        started.elapsed().as_secs_f64(),
    );
    stats.coordinator_bytes = hub.window_bytes;
    let engine = EngineInfo {
        mode: "distributed",
        warnings: partition.warnings.clone(),
        strategy: exp.loaded.config.engine.partition,
        stats,
        peak_rss_bytes: peak_rss_bytes(),
    };
    drop(hub);
    if let Some(hold) = test_hold_output() {
        std::thread::sleep(hold);
    }
    RunOutput::new(exp, model, RunResults::assemble(reports), &engine)
}

/// The coordinator's listening socket: `options.listen`, or any free port of its address when
/// that is taken and `any_port_fallback` allows.
fn bind(options: &CoordinatorOptions) -> Result<std::net::TcpListener, RunError> {
    let addr = listen_address(&options.listen)?;
    let bound = match std::net::TcpListener::bind(addr) {
        Err(_) if options.any_port_fallback => {
            std::net::TcpListener::bind(std::net::SocketAddr::new(addr.ip(), 0))
        }
        other => other,
    };
    let listener = bound
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| TransportError::Listen {
            address: addr,
            error: e.to_string(),
        })?;
    Ok(listener)
}

/// A test's pause between taking the workers' results and writing the output
/// (`FLEETSIM_TEST_HOLD_OUTPUT_MS`): stands in for the time a million GPUs' output takes,
/// while the finished workers have exited.
fn test_hold_output() -> Option<Duration> {
    test_millis("FLEETSIM_TEST_HOLD_OUTPUT_MS")
}

/// A test's pause between listening and building the model (`FLEETSIM_TEST_HOLD_BUILD_MS`):
/// stands in for the minute a million-GPU model takes to build and partition.
fn test_hold_build() -> Option<Duration> {
    test_millis("FLEETSIM_TEST_HOLD_BUILD_MS")
}
