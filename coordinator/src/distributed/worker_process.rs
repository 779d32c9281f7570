//! `run_worker_process`: serve, register, build, run the window loop, submit.

use super::*;

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
    let runtime = rpc_runtime("worker")?;
    let addr = listen_address(listen)?;
    let inbox = Arc::new(Inbox::default());
    let incoming = runtime
        .block_on(async { TcpIncoming::bind(addr) })
        .map_err(|e| TransportError::Listen {
            address: addr,
            error: e.to_string(),
        })?
        .with_nodelay(Some(true));
    let local = incoming
        .local_addr()
        .map_err(|e| TransportError::BoundAddress(e.to_string()))?;
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
    let patience = connect_patience();
    let deadline = Instant::now() + patience;
    let (channel, coordinator) = loop {
        let coordinator = coordinator();
        let endpoint = endpoint(&coordinator, tls)?;
        match runtime.block_on(endpoint.connect()) {
            Ok(c) => break (c, coordinator),
            Err(e) if !not_listening_yet(&e) => {
                return Err(TransportError::Handshake {
                    coordinator,
                    error: error_chain(&e),
                }
                .into());
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(TransportError::Unreachable {
                    coordinator,
                    seconds: patience.as_secs_f64(),
                    error: error_chain(&e),
                }
                .into());
            }
            // SIGTERM or SIGUSR1 before registering: nothing ran, nothing to checkpoint.
            Err(_) if stop_requested.load(Ordering::Relaxed) => {
                return Err(TransportError::StoppedBeforeRegistering { coordinator }.into());
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
            TransportError::Refused {
                coordinator: coordinator.clone(),
                message: e.message().to_string(),
                hint,
            }
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
    let beat = worker_heartbeats(
        runtime.handle(),
        client.clone(),
        Arc::clone(&stop),
        Arc::clone(&inbox),
        token,
        reply.worker_id,
        &coordinator,
    );
    // The coordinator forwards its command line's `--set`s as the user typed them.
    let exp = sim_config::Overrides::from_sets(&reply.sets)
        .and_then(|overrides| Experiment::load(Path::new(&reply.experiment_path), &overrides))
        .map_err(TransportError::Experiment)?;
    let model = SimModel::from_experiment(&exp, false)?;
    let partition_of: Vec<u32> = reply
        .partition_runs
        .iter()
        .flat_map(|r| std::iter::repeat_n(r.partition, r.count as usize))
        .collect();
    let fingerprint = crate::checkpoint::fingerprint(&exp, &model);
    if fingerprint != reply.fingerprint {
        return Err(TransportError::OtherModel {
            path: reply.experiment_path.clone(),
            ours: fingerprint,
            theirs: reply.fingerprint.clone(),
        }
        .into());
    }
    if partition_of.len() != model.topology.nodes().len() {
        return Err(TransportError::OtherTopology {
            theirs: partition_of.len(),
            ours: model.topology.nodes().len(),
        }
        .into());
    }
    let id = reply.worker_id;
    let map = LpMap::keeping(partition_of, |p| {
        reply.partition_owner.get(p as usize) == Some(&id)
    });
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
            exp.loaded.config.engine.scheduling,
            worker::RunShape {
                workers,
                threads,
                oversubscribed,
                // As the coordinator decided its windows (`coordinator.rs`): a lone gRPC
                // worker stays asynchronous whatever the network.
                closed_form: false,
            },
        ),
        lookahead: super::wire_time::optional(reply.lookahead),
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
    // Heartbeats go on until the results are in: gathering and sending a million GPUs'
    // reports on a busy machine takes longer than the coordinator's silence limit.
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
    if let Some(hold) = results_hold() {
        std::thread::sleep(hold);
    }
    for part in results_parts(outcome.reports, outcome.stats, REPORTS_PER_PART) {
        let payload =
            bitcode::serialize(&part).map_err(|e| TransportError::Encode(e.to_string()))?;
        let request = with_token(
            pb::ResultsChunk {
                worker_id: reply.worker_id,
                payload,
            },
            token,
        )?;
        runtime
            .block_on(client.submit_results(request))
            .map_err(TransportError::Submit)?;
    }
    beat.abort();
    let _ = stop_server.send(());
    let _ = runtime.block_on(server);
    Ok(summary)
}

/// A test's pause before a worker submits its results (`FLEETSIM_TEST_HOLD_RESULTS_MS`):
/// stands in for the seconds a worker of a huge run spends gathering and sending them.
fn results_hold() -> Option<Duration> {
    test_millis("FLEETSIM_TEST_HOLD_RESULTS_MS")
}

/// How long a worker retries a coordinator that refuses connections: [`CONNECT_PATIENCE`],
/// or a test's `FLEETSIM_TEST_CONNECT_PATIENCE_MS`.
fn connect_patience() -> Duration {
    test_millis("FLEETSIM_TEST_CONNECT_PATIENCE_MS").unwrap_or(CONNECT_PATIENCE)
}
