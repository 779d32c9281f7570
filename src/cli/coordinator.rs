//! `fleetsim coordinator`: a distributed run's coordinator, which waits for its workers over
//! gRPC, partitions, drives the windows and writes the output directory as `run` does.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use coordinator::distributed::{self, CoordinatorOptions};
use sim::experiment::Experiment;
use sim_config::Overrides;

use crate::cli::progress;
use crate::cli::run::{CheckpointArgs, at_least_one_worker, out_dir, report_run, with_metrics};

/// `fleetsim coordinator`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML); workers read it from the same path (shared file system).
    pub experiment: PathBuf,
    /// HOST:PORT to serve on; port 0 picks a free port (printed).
    #[arg(long)]
    pub listen: String,
    /// Workers to wait for.
    #[arg(long, value_parser = at_least_one_worker)]
    pub workers: u32,
    /// Seconds to wait for every worker to register before giving up.
    #[arg(long, default_value_t = 300)]
    pub register_timeout: u64,
    #[command(flatten)]
    pub run: DistributedArgs,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let Args {
            experiment,
            listen,
            workers,
            register_timeout,
            run,
        } = self;
        let generated = run.token_file.is_none();
        let token = match &run.token_file {
            Some(f) => distributed::read_token(f)?,
            None => distributed::new_token()?,
        };
        let patience = std::time::Duration::from_secs(register_timeout);
        let tune = |o: &mut CoordinatorOptions| o.registration_patience = patience;
        coordinate(&experiment, run, (listen, workers, &token), tune, |addr| {
            eprintln!("fleetsim coordinator: listening on {addr}, waiting for {workers} worker(s)");
            if generated {
                eprintln!("fleetsim coordinator: token {token}");
            }
        })
    }
}

/// What `coordinator` and `slurm` share.
#[derive(clap::Args, Debug)]
pub struct DistributedArgs {
    /// Output directory (default: runs/<experiment name>), written by the coordinator.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// File holding the run's shared token; without it the coordinator makes one (printed,
    /// or under Slurm written beside the rendezvous file).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Mutual TLS: a directory with ca.pem, cert.pem and key.pem (see docs/distributed.md).
    #[arg(long)]
    pub tls_dir: Option<PathBuf>,
    /// Override a key of the experiment file, e.g. --set parallel.tp=4.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// No progress display.
    #[arg(long)]
    pub quiet: bool,
    /// Serve live metrics for Prometheus at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    #[command(flatten)]
    pub checkpoints: CheckpointArgs,
}

/// `--tls-dir`, loaded.
pub fn load_tls(dir: Option<&Path>) -> anyhow::Result<Option<distributed::TlsFiles>> {
    Ok(dir.map(distributed::TlsFiles::load).transpose()?)
}

/// Loads `experiment` as `run` asks, serves as its coordinator on `listen` for `workers`
/// workers with `token` (`tune` adjusts the defaults; `on_listening` hears the bound
/// address), and writes the results as `fleetsim run` does.
pub fn coordinate(
    experiment: &Path,
    run: DistributedArgs,
    (listen, workers, token): (String, u32, &str),
    tune: impl FnOnce(&mut CoordinatorOptions),
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> anyhow::Result<()> {
    let overrides = Overrides::from_sets(&run.sets)?;
    let loaded = Experiment::load(experiment, &overrides)?;
    let (exp, planned) =
        crate::cli::plan::as_planned(experiment, &overrides, loaded, None, run.quiet)?;
    let out = out_dir(&exp, run.out)?;
    // Workers load the file with the user's `--set`s, then the plan's layout, if any.
    let mut sets = run.sets.clone();
    sets.extend(planned.to_assignments());
    let mut options = CoordinatorOptions {
        listen,
        workers,
        token: token.to_string(),
        // Workers load the same file: its absolute path.
        experiment_path: std::fs::canonicalize(experiment)
            .with_context(|| format!("resolving {}", experiment.display()))?,
        sets,
        any_port_fallback: false,
        tls: load_tls(run.tls_dir.as_deref())?,
        registration_patience: distributed::REGISTRATION_PATIENCE,
        checkpoints: run.checkpoints.options(&out)?,
    };
    tune(&mut options);
    let progress = with_metrics(
        run.metrics_listen.as_deref(),
        (!run.quiet).then(|| progress::hook(&exp)),
    )?;
    let output = distributed::run_coordinator(&exp, &options, progress, on_listening)?;
    report_run(&exp, &output, &out)
}
