//! `fleetsim`: simulates LLM training iterations on GPU clusters (see SPEC.md for commands).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use coordinator::check::CheckReport;
use coordinator::checkpoint::{CheckpointEvery, CheckpointOptions};
use coordinator::distributed::CoordinatorOptions;
use coordinator::kernel_report;
use coordinator::run::{RunError, RunOptions, run_embedded};
use coordinator::run_report::write_outputs;
use coordinator::workload_report::WorkloadReport;
use sim::compute::ComputeModel;
use sim::experiment::Experiment;

mod progress;

/// jemalloc, with transparent huge pages (`.cargo/config.toml`): at 131,072 GPUs every
/// event reads a GPU's state cold from gigabytes, and 2 MiB pages save most page walks.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The variable through which jemalloc takes options at start-up (its symbols are prefixed).
#[cfg(feature = "jemalloc")]
const JEMALLOC_CONF: &str = "_RJEM_MALLOC_CONF";

/// Worker processes (and Slurm tasks, which may be one) run without transparent huge pages,
/// unless `_RJEM_MALLOC_CONF` says otherwise: a worker waits at window barriers, so 2 MiB
/// pages bought it no time at 131,072 GPUs on 4 workers (20-21 min either way), but cost
/// it 30-58 MB of a 300 MB peak, rounding its partly used extents up
/// (docs/distributed.md, "Memory per worker"). jemalloc reads its options once, before
/// `main`, so the process starts itself again with them; it goes on with huge pages if
/// that fails.
#[cfg(feature = "jemalloc")]
fn restart_without_huge_pages() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(JEMALLOC_CONF).is_some() {
        return;
    }
    let error = match std::env::current_exe() {
        Ok(exe) => std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env(JEMALLOC_CONF, "thp:never,metadata_thp:disabled")
            .exec(),
        Err(e) => e,
    };
    eprintln!("warning: cannot restart without huge pages, running with them: {error}");
}

#[derive(Parser, Debug)]
#[command(
    name = "fleetsim",
    version,
    about = "Simulates LLM training on GPU clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines on stderr as text or as JSON objects (one per line).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// The least severe log lines shown: error, warn, info or debug.
    #[arg(long, global = true, default_value = "warn")]
    log_level: tracing_subscriber::filter::LevelFilter,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

/// Checkpoints and resuming (`run`, `coordinator`, `slurm`).
#[derive(clap::Args, Debug)]
struct CheckpointArgs {
    /// Where checkpoints are written (default: OUT/checkpoint). Under a distributed run
    /// every worker writes its part here too: use a shared file system.
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Take a checkpoint at a window barrier this often: simulated time (`500us`, `2ms`;
    /// units ps, ns, us, ms, s) or wall-clock time (`wall:30s`, `wall:15m`; units s, m, h).
    /// SIGTERM or SIGUSR1 always takes one and stops.
    #[arg(long, value_name = "INTERVAL", value_parser = parse_checkpoint_every)]
    checkpoint_every: Option<CheckpointEvery>,
    /// Continue the run whose checkpoint directory is DIR (with any number of workers or
    /// partitions); the result_digest is the uninterrupted run's.
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
}

fn parse_vary(s: &str) -> Result<coordinator::sweep::Vary, String> {
    s.parse()
}

fn parse_checkpoint_every(s: &str) -> Result<CheckpointEvery, String> {
    s.parse()
}

impl CheckpointArgs {
    /// The run's checkpoint options; SIGTERM and SIGUSR1 are watched from now on.
    fn options(self, out: &std::path::Path) -> anyhow::Result<CheckpointOptions> {
        Ok(CheckpointOptions {
            dir: self
                .checkpoint_dir
                .unwrap_or_else(|| out.join("checkpoint")),
            every: self.checkpoint_every,
            resume: self.resume,
            stop: coordinator::checkpoint::stop_on_signals().map_err(anyhow::Error::msg)?,
        })
    }
}

/// `--workers N`: a whole number of at least 1.
fn at_least_one_worker(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("a run needs at least 1 worker (1 runs it all in this process)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of workers, at least 1".into()),
    }
}

/// The output directory: `--out`, else runs/<experiment name>; created, and proven writable
/// before anything runs, so that a read-only folder is named at once and not after the run.
fn out_dir(exp: &Experiment, out: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = out.unwrap_or_else(|| PathBuf::from("runs").join(exp.name()));
    let cannot = |e: std::io::Error| {
        anyhow::anyhow!(
            "cannot write the results to {}: {e}; choose a writable folder with --out",
            dir.display()
        )
    };
    std::fs::create_dir_all(&dir).map_err(cannot)?;
    let probe = dir.join(format!(".fleetsim-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(cannot)?;
    std::fs::remove_file(&probe).map_err(cannot)?;
    Ok(dir)
}

/// What `coordinator` and `slurm` share.
#[derive(clap::Args, Debug)]
struct DistributedArgs {
    /// Output directory (default: runs/<experiment name>), written by the coordinator.
    #[arg(long)]
    out: Option<PathBuf>,
    /// File holding the run's shared token; without it the coordinator makes one (printed,
    /// or under Slurm written beside the rendezvous file).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Mutual TLS: a directory with ca.pem, cert.pem and key.pem (see docs/distributed.md).
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// Override a key of the experiment file, e.g. --set parallel.tp=4.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// No progress display.
    #[arg(long)]
    quiet: bool,
    /// Serve live metrics for Prometheus at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    checkpoints: CheckpointArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Validates an experiment and prints what it derives: cluster, groups, lookahead, memory.
    Check {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also list per stage the kernels taking the most time: bound, efficiency, source.
        #[arg(long)]
        kernels: bool,
        /// How many kernels per stage `--kernels` lists.
        #[arg(long, default_value_t = 10, requires = "kernels")]
        top: usize,
        /// Override a key of the experiment file, e.g. --set parallel.tp=4.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Compiles the experiment's workload and prints per stage: op counts, FLOPs, bytes per
    /// collective and group, and the schedule's bubble; or exports it.
    Workload {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Export format (simai: SimAI's workload text file; kernels: the measured-kernel
        /// table template, every distinct kernel with the model's time).
        #[arg(long, value_enum, requires = "output")]
        export: Option<ExportFormat>,
        /// File the export is written to (`--output` also works).
        #[arg(
            long = "out",
            alias = "output",
            value_name = "FILE",
            requires = "export"
        )]
        output: Option<PathBuf>,
        /// Run a SimAI workload file instead of compiling the model (like `workload_file`).
        #[arg(long, value_name = "FILE")]
        workload_file: Option<PathBuf>,
        /// Override a key of the experiment file, e.g. --set parallel.tp=4.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Simulates one training iteration embedded (in-process workers) and writes the output
    /// directory: summary.json, ranks.csv, collectives.csv, links.csv (and trace.json).
    Run {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// Output directory. Default: runs/<experiment name>.
        #[arg(long)]
        out: Option<PathBuf>,
        /// In-process workers, each with its own partitions and mailboxes.
        #[arg(long, value_parser = at_least_one_worker)]
        workers: Option<u32>,
        /// Threads per worker (default: engine.threads, 0 = the idle cores, shared among the
        /// workers).
        #[arg(long)]
        threads: Option<usize>,
        /// Partition strategy (like --set engine.partition=S).
        #[arg(long)]
        partition: Option<String>,
        /// Override a key of the experiment file, e.g. --set parallel.tp=4.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Also write trace.json (Chrome / Perfetto trace event format).
        #[arg(long)]
        trace: bool,
        /// No progress display.
        #[arg(long)]
        quiet: bool,
        /// Serve live metrics for Prometheus at http://HOST:PORT/metrics.
        #[arg(long, value_name = "HOST:PORT")]
        metrics_listen: Option<String>,
        #[command(flatten)]
        checkpoints: CheckpointArgs,
    },
    /// Distributed run: waits for N workers over gRPC, partitions, drives the windows and
    /// writes the same output directory as `run`.
    Coordinator {
        /// Experiment file (TOML); workers read it from the same path (shared file system).
        experiment: PathBuf,
        /// HOST:PORT to serve on; port 0 picks a free port (printed).
        #[arg(long)]
        listen: String,
        /// Workers to wait for.
        #[arg(long, value_parser = at_least_one_worker)]
        workers: u32,
        /// Seconds to wait for every worker to register before giving up.
        #[arg(long, default_value_t = 300)]
        register_timeout: u64,
        #[command(flatten)]
        run: DistributedArgs,
    },
    /// A distributed run as the tasks of `srun`: task 0 is the coordinator, the others are
    /// workers; they meet through SLURM_JOB_NODELIST and a port, or a file in the submit
    /// directory. Threads come from SLURM_CPUS_PER_TASK.
    Slurm {
        /// Experiment file (TOML), on a file system every task shares.
        experiment: PathBuf,
        /// Port task 0 serves on (default: derived from SLURM_JOB_ID).
        #[arg(long)]
        port: Option<u16>,
        #[command(flatten)]
        run: DistributedArgs,
    },
    /// Joins a coordinator and runs the partitions it is given.
    Worker {
        /// The coordinator's HOST:PORT.
        #[arg(long)]
        coordinator: String,
        /// HOST:PORT this worker's peers reach it on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Threads (default: the cores other processes leave idle).
        #[arg(long)]
        threads: Option<usize>,
        /// File holding the run's shared token (the coordinator's --token-file, or the token
        /// it printed).
        #[arg(long)]
        token_file: PathBuf,
        /// Mutual TLS: a directory with ca.pem, cert.pem and key.pem (see docs/distributed.md).
        #[arg(long)]
        tls_dir: Option<PathBuf>,
        /// Serve live metrics for Prometheus at http://HOST:PORT/metrics.
        #[arg(long, value_name = "HOST:PORT")]
        metrics_listen: Option<String>,
    },
    /// Partitions an experiment's topology with each strategy (or one) without simulating:
    /// LPs per partition, load imbalance, cut links, lookahead and expected cut traffic;
    /// writes partition-report.csv and partition-report.svg.
    Partition {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// Partitions to cut into (0: each strategy's natural count).
        #[arg(long)]
        parts: u32,
        /// A strategy, a comma-separated list, or `all`.
        #[arg(long, default_value = "all")]
        strategy: String,
        /// Where the report and plot go. Default: runs/<experiment name>-partition.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the CSV instead of the table.
        #[arg(long)]
        csv: bool,
        /// Override a key of the experiment file, e.g. --set cluster.gpus=4096.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Runs the cross product of --vary settings embedded; writes sweep.csv and sweep.svg.
    /// With --slurm, submits one Slurm array job instead (a task per point); then
    /// `fleetsim sweep --collect DIR` writes the same table and plot.
    Sweep {
        /// Experiment file (TOML).
        #[arg(required_unless_present_any = ["collect", "point"])]
        experiment: Option<PathBuf>,
        /// KEY=V1,V2,...: a dotted key of the experiment file and the values it takes, e.g.
        /// --vary engine.partition=by-host,metis --vary engine.workers=1,2,4.
        #[arg(long, value_parser = parse_vary, required_unless_present_any = ["collect", "point"])]
        vary: Vec<coordinator::sweep::Vary>,
        /// Where sweep.csv and sweep.svg go (with --slurm: the sweep's folder, which every
        /// node must see). Default: runs/<experiment name>-sweep.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The column of sweep.csv the plot shows (default: iteration_time_s, or wall_s when
        /// only engine.* keys vary), e.g. batches_per_s. (`--plot` also works.)
        #[arg(long = "plot-column", alias = "plot", value_name = "COLUMN")]
        plot: Option<String>,
        /// Override a key of the experiment file for every run.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Submit the sweep as one Slurm array job (one task per point, results in
        /// OUT/points/NNNN) instead of running it here.
        #[arg(long)]
        slurm: bool,
        /// An option for sbatch when submitting with --slurm, e.g. --sbatch-arg=--time=60
        /// --sbatch-arg=--partition=gpu (overrides the script's own #SBATCH lines).
        #[arg(
            long = "sbatch-arg",
            value_name = "OPTION",
            allow_hyphen_values = true,
            requires = "slurm"
        )]
        sbatch_args: Vec<String>,
        /// Write sweep.csv and sweep.svg in DIR from the points a --slurm sweep ran there.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["experiment", "vary", "out", "sets", "slurm", "point"])]
        collect: Option<PathBuf>,
        /// Run one point of the --slurm sweep in DIR (what each array task runs): the one
        /// --index names, else SLURM_ARRAY_TASK_ID's.
        #[arg(long, value_name = "DIR", conflicts_with_all = ["experiment", "vary", "out", "sets", "slurm", "plot"])]
        point: Option<PathBuf>,
        /// With --point: which point (0-based).
        #[arg(long, requires = "point")]
        index: Option<usize>,
    },
    /// Heterogeneity-aware placement: searches TP/PP/VP/micro-batch and how layers and
    /// micro-batches split over the device types with a fast analytical model, confirms the
    /// best with the engine, and prints the plan and its gain over the naive placement.
    Plan {
        /// Experiment file (TOML).
        experiment: PathBuf,
        /// Where plan.json and plan.txt go (optional).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Threads per engine run (0 = the cores other processes leave idle).
        #[arg(long)]
        threads: Option<usize>,
        /// Override a key of the experiment file.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Runs every row of a table of real training measurements (columns as in
    /// ../shared/calibration/e2e_iterations.csv): predicted beside measured, the error per
    /// row and the MAPE; writes validation.csv, parity.svg and each row's experiment file.
    Validate {
        /// The measurement table (CSV).
        cases: PathBuf,
        /// Where the results go. Default: runs/validate-<table name>.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only these rows (1-based, data rows only), e.g. --rows 1,2,10.
        #[arg(long, value_delimiter = ',')]
        rows: Option<Vec<usize>>,
        /// Override a key of every row's experiment, e.g. --set network.model=analytical.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Threads per run (0 = the cores other processes leave idle).
        #[arg(long)]
        threads: Option<usize>,
        /// Exit with status 1 when the MAPE (percent) is above this.
        #[arg(long, value_name = "PERCENT")]
        max_mape: Option<f64>,
        /// Exit with status 1 when any row's absolute error (percent) is above this.
        #[arg(long, value_name = "PERCENT")]
        max_error: Option<f64>,
    },
    /// nccl-tests' performance table for one operation over N GPUs of a cluster: size, count,
    /// type, time, algbw, busbw, and the algorithm, protocol and channels NCCL would choose.
    Collective {
        /// A cluster file (configs/clusters/) or an experiment file; only its cluster,
        /// network, collectives and engine settings are used.
        cluster_or_experiment: PathBuf,
        /// all-reduce, all-gather, reduce-scatter, all-to-all, broadcast or send-recv
        /// (nccl-tests' names such as all_reduce also work).
        #[arg(long)]
        op: String,
        /// GPUs taking part: ranks 0..N, on whole hosts of the cluster.
        #[arg(long)]
        gpus: u32,
        /// MIN:MAX (doubling), MIN:MAX:FACTOR, or a list such as 1M,64M,1G.
        #[arg(long, default_value = "1M:8G")]
        sizes: String,
        /// Element type (nccl-tests -d): only the count column depends on it.
        #[arg(long, default_value = "float")]
        dtype: String,
        /// Print CSV instead of the table.
        #[arg(long)]
        csv: bool,
        /// Also write busbw against size as an SVG plot to this file.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
        /// Threads per size's run (default: engine.threads, 0 = the idle cores, shared among
        /// engine.workers).
        #[arg(long)]
        threads: Option<usize>,
        /// Override a key of the file, e.g. --set collectives.algorithm=ring.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ExportFormat {
    Simai,
    Kernels,
}

/// Exit status of a run that stopped at a checkpoint on SIGTERM or SIGUSR1 (sysexits.h's
/// EX_TEMPFAIL): `fleetsim.sbatch` requeues the job on it.
const EXIT_STOPPED: u8 = 75;

/// Writes to standard output. When the reader has gone away (`fleetsim … | head`), the
/// process ends quietly with success, as ripgrep does, instead of panicking like `print!`.
fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// `print!` through [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => { write_stdout(format_args!($($arg)*)) };
}

/// `println!` through [`write_stdout`].
macro_rules! outln {
    () => { write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_max_level(cli.log_level)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.with_ansi(false).init(),
    }
    #[cfg(feature = "jemalloc")]
    if matches!(cli.command, Command::Worker { .. } | Command::Slurm { .. }) {
        restart_without_huge_pages();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(stopped @ RunError::Stopped { .. }) = e.downcast_ref::<RunError>() {
                // Asked to stop: not a failure, but not a result either (EX_TEMPFAIL, so a
                // batch script can tell it apart and requeue).
                eprintln!("fleetsim: {stopped}");
                return ExitCode::from(EXIT_STOPPED);
            }
            // One line: the chain of causes joined, most specific last.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Check {
            experiment,
            json,
            kernels,
            top,
            sets,
        } => {
            let exp = Experiment::load(&experiment, &sets)?;
            let started = Instant::now();
            let topology = exp.build_topology()?;
            let build_s = started.elapsed().as_secs_f64();
            tracing::info!(
                experiment = exp.name(),
                nodes = topology.nodes().len(),
                links = topology.link_count(),
                seconds = build_s,
                "topology built"
            );
            // Validates `[network]` against the links it will run on.
            sim::engine::NetworkParams::from_experiment(&exp, &topology)?;
            sim::engine::CollectiveModel::from_experiment(&exp, &topology)?;
            let started = Instant::now();
            let workload = sim::workload::load_or_compile(&exp, None)?;
            tracing::info!(
                programs = workload.programs.len(),
                seconds = started.elapsed().as_secs_f64(),
                "workload compiled"
            );
            // Validates `[compute]` and any measured kernel tables even without --kernels.
            let model = ComputeModel::from_experiment(&exp)?;
            let summaries = sim::workload::summary::summarize(&workload);
            let report = CheckReport {
                experiment: &exp,
                topology: &topology,
                build_s,
                workload: &summaries,
            };
            if !kernels {
                return print_report(json, || report.to_json(), || report.to_text());
            }
            let stages = kernel_report::stage_kernels(&workload, &model, &exp.stage_gpus());
            print_report(
                json,
                || {
                    let mut v = report.to_json();
                    v["kernels"] = kernel_report::to_json(&stages, top);
                    v
                },
                || report.to_text() + &kernel_report::to_text(&stages, top),
            )
        }
        Command::Workload {
            experiment,
            json,
            export,
            output,
            workload_file,
            sets,
        } => workload_command(&experiment, json, export, output, workload_file, &sets),
        Command::Coordinator {
            experiment,
            listen,
            workers,
            register_timeout,
            run,
        } => {
            let generated = run.token_file.is_none();
            let token = match &run.token_file {
                Some(f) => coordinator::distributed::read_token(f).map_err(anyhow::Error::msg)?,
                None => coordinator::distributed::new_token().map_err(anyhow::Error::msg)?,
            };
            let patience = std::time::Duration::from_secs(register_timeout);
            let tune = |o: &mut CoordinatorOptions| o.registration_patience = patience;
            coordinate(&experiment, run, (listen, workers, &token), tune, |addr| {
                eprintln!(
                    "fleetsim coordinator: listening on {addr}, waiting for {workers} worker(s)"
                );
                if generated {
                    eprintln!("fleetsim coordinator: token {token}");
                }
            })
        }
        Command::Slurm {
            experiment,
            port,
            run,
        } => slurm_command(&experiment, port, run),
        Command::Worker {
            coordinator,
            listen,
            threads,
            token_file,
            tls_dir,
            metrics_listen,
        } => {
            if let Some(listen) = &metrics_listen {
                coordinator::metrics::serve(listen).map_err(anyhow::Error::msg)?;
            }
            let token =
                coordinator::distributed::read_token(&token_file).map_err(anyhow::Error::msg)?;
            let summary = coordinator::distributed::run_worker_process(
                &|| coordinator.clone(),
                &listen,
                threads,
                &token,
                load_tls(tls_dir.as_deref())?.as_ref(),
                coordinator::checkpoint::stop_on_signals().map_err(anyhow::Error::msg)?,
            )?;
            outln!(
                "worker {} of {}: {} partitions, {} events{}",
                summary.id,
                summary.workers,
                summary.partitions,
                summary.events,
                if summary.stopped {
                    "; the run stopped at a checkpoint"
                } else {
                    ""
                }
            );
            Ok(())
        }
        Command::Partition {
            experiment,
            parts,
            strategy,
            out,
            csv,
            sets,
        } => {
            use coordinator::partition_report as report;
            let exp = Experiment::load(&experiment, &sets)?;
            let strategies: Vec<String> =
                strategy.split(',').map(|s| s.trim().to_string()).collect();
            let comparison = report::compare(&exp, parts, &strategies)?;
            let dir = out
                .unwrap_or_else(|| PathBuf::from("runs").join(format!("{}-partition", exp.name())));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let csv_text = report::to_csv(&comparison);
            std::fs::write(dir.join("partition-report.csv"), &csv_text).with_context(|| {
                format!("writing {}", dir.join("partition-report.csv").display())
            })?;
            let svg = report::plot_svg(&comparison)
                .map_err(|e| anyhow::anyhow!("plotting the comparison: {e}"))?;
            std::fs::write(dir.join("partition-report.svg"), svg).with_context(|| {
                format!("writing {}", dir.join("partition-report.svg").display())
            })?;
            if csv {
                out!("{csv_text}");
            } else {
                out!("{}", report::to_text(&comparison));
                outln!("report in {}", dir.display());
            }
            Ok(())
        }
        Command::Sweep {
            experiment,
            vary,
            out,
            plot,
            sets,
            slurm,
            sbatch_args,
            collect,
            point,
            index,
        } => {
            use coordinator::sweep;
            let y = plot
                .as_deref()
                .map(|c| sweep::plot_column(c).map_err(anyhow::Error::msg))
                .transpose()?;
            if let Some(dir) = point {
                return sweep_point(&dir, index);
            }
            if let Some(dir) = collect {
                let manifest = sweep::SweepManifest::read(&dir)?;
                let rows = manifest.collect(&dir)?;
                return write_sweep(&dir, &manifest.varies, &rows, y);
            }
            let Some(experiment) = experiment else {
                anyhow::bail!("sweep needs an experiment file");
            };
            let out = match out {
                Some(out) => out,
                None => {
                    let name = Experiment::load(&experiment, &sets)?.name().to_string();
                    PathBuf::from("runs").join(format!("{name}-sweep"))
                }
            };
            if slurm {
                let manifest = sweep::SweepManifest::new(&experiment, &sets, &vary)?;
                let fleetsim = std::env::current_exe().context("locating this fleetsim binary")?;
                let workdir = std::env::current_dir().context("reading the working directory")?;
                let script = manifest.write_array_job(&out, &fleetsim, &workdir)?;
                let job = sweep::submit(&script, &sbatch_args)?;
                outln!(
                    "sweep: {} point(s) submitted as Slurm array job {job} ({}); when it is done: fleetsim sweep --collect {}",
                    manifest.points.len(),
                    script.display(),
                    out.display()
                );
                return Ok(());
            }
            let rows = sweep::run_sweep(&experiment, &sets, &vary, |r| {
                outln!("{}", sweep::row_line(r));
            })?;
            write_sweep(&out, &vary, &rows, y)
        }
        Command::Plan {
            experiment,
            out,
            json,
            threads,
            sets,
        } => {
            let report = coordinator::plan::plan(&experiment, &sets, threads)?;
            let text = report.to_text();
            let value = report.to_json();
            if let Some(out) = out {
                std::fs::create_dir_all(&out)
                    .with_context(|| format!("creating {}", out.display()))?;
                for (file, body) in [
                    ("plan.txt", text.clone()),
                    ("plan.json", serde_json::to_string_pretty(&value)? + "\n"),
                ] {
                    let path = out.join(file);
                    std::fs::write(&path, body)
                        .with_context(|| format!("writing {}", path.display()))?;
                }
            }
            if json {
                outln!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                out!("{text}");
            }
            Ok(())
        }
        Command::Validate {
            cases,
            out,
            rows,
            sets,
            threads,
            max_mape,
            max_error,
        } => validate_command(
            &cases,
            out,
            rows.as_deref(),
            &sets,
            threads,
            max_mape,
            max_error,
        ),
        Command::Collective {
            cluster_or_experiment,
            op,
            gpus,
            sizes,
            dtype,
            csv,
            plot,
            threads,
            sets,
        } => collective_command(
            &cluster_or_experiment,
            &op,
            gpus,
            &sizes,
            &dtype,
            csv,
            plot,
            threads,
            &sets,
        ),
        Command::Run {
            experiment,
            out,
            workers,
            threads,
            partition,
            mut sets,
            trace,
            quiet,
            metrics_listen,
            checkpoints,
        } => {
            if let Some(p) = partition {
                sets.push(format!("engine.partition={p}"));
            }
            let mut exp = Experiment::load(&experiment, &sets)?;
            if exp.loaded.config.engine.planner == sim::config::Planner::Hetero {
                let report = coordinator::plan::plan(&experiment, &sets, threads)?;
                if !quiet {
                    eprint!("{}", report.to_text());
                }
                exp = report.best_experiment().clone();
            }
            let out = out_dir(&exp, out)?;
            let options = RunOptions {
                workers,
                threads,
                trace,
                checkpoints: Some(checkpoints.options(&out)?),
            };
            for warning in options.placement_warnings(&exp) {
                eprintln!("warning: {warning}");
            }
            let progress = with_metrics(
                metrics_listen.as_deref(),
                (!quiet).then(|| progress::hook(&exp)),
            )?;
            let output = run_embedded(&exp, &options, progress)?;
            report_run(&exp, &output, &out)
        }
    }
}

/// One point of a `--slurm` sweep: `index`, else the array task's.
fn sweep_point(dir: &std::path::Path, index: Option<usize>) -> anyhow::Result<()> {
    use coordinator::sweep::SweepManifest;
    let index = match index {
        Some(i) => i,
        None => {
            let id = std::env::var("SLURM_ARRAY_TASK_ID").map_err(|_| {
                anyhow::anyhow!(
                    "--point: SLURM_ARRAY_TASK_ID is not set; run it as a task of the sweep's array job, or name the point with --index N"
                )
            })?;
            id.trim().parse().map_err(|_| {
                anyhow::anyhow!("--point: SLURM_ARRAY_TASK_ID `{id}` is not a point number")
            })?
        }
    };
    let manifest = SweepManifest::read(dir)?;
    // A task takes the CPUs Slurm gave it; other tasks of the array may share the node.
    let threads = coordinator::slurm::cpus_per_task(|k| std::env::var(k).ok());
    let options = coordinator::run::RunOptions {
        threads,
        ..Default::default()
    };
    let row = manifest.run_point(dir, index, &options)?;
    outln!("point {index}: {}", coordinator::sweep::row_line(&row));
    Ok(())
}

/// `sweep.csv` and `sweep.svg` in `out`.
fn write_sweep(
    out: &std::path::Path,
    varies: &[coordinator::sweep::Vary],
    rows: &[coordinator::sweep::SweepRow],
    y: Option<coordinator::sweep::Column>,
) -> anyhow::Result<()> {
    use coordinator::sweep;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let csv = out.join("sweep.csv");
    std::fs::write(&csv, sweep::to_csv(varies, rows))
        .with_context(|| format!("writing {}", csv.display()))?;
    let svg =
        sweep::plot_svg(varies, rows, y).map_err(|e| anyhow::anyhow!("plotting the sweep: {e}"))?;
    let plot = out.join("sweep.svg");
    std::fs::write(&plot, svg).with_context(|| format!("writing {}", plot.display()))?;
    outln!("sweep: {} run(s) in {}", rows.len(), out.display());
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn collective_command(
    path: &std::path::Path,
    op: &str,
    gpus: u32,
    sizes: &str,
    dtype: &str,
    csv: bool,
    plot: Option<PathBuf>,
    threads: Option<usize>,
    sets: &[String],
) -> anyhow::Result<()> {
    use coordinator::collective_bench::{self as bench, BenchSpec};
    let op = sim::workload::bench::BenchOp::parse(op).with_context(|| {
        format!(
            "--op: unknown operation `{op}`; use one of {}",
            sim::workload::bench::BenchOp::NAMES.join(", ")
        )
    })?;
    if gpus < 2 {
        anyhow::bail!("--gpus: {gpus} GPUs have nothing to communicate; give 2 or more");
    }
    let sizes = bench::parse_sizes(sizes).map_err(|e| anyhow::anyhow!("--sizes: {e}"))?;
    let (dtype, word) = bench::DTYPES
        .iter()
        .copied()
        .find(|(name, _)| *name == dtype)
        .with_context(|| {
            let names: Vec<&str> = bench::DTYPES.iter().map(|(n, _)| *n).collect();
            format!(
                "--dtype: unknown type `{dtype}`; use one of {}",
                names.join(", ")
            )
        })?;
    let exp = Experiment::load_cluster(path, sets, gpus)?;
    let spec = BenchSpec {
        op,
        gpus,
        sizes,
        dtype,
        word,
    };
    let options = RunOptions {
        threads,
        ..RunOptions::default()
    };
    // Printed once every size ran: an error part-way leaves no partial table on stdout.
    let rows = bench::run_bench(&exp, &spec, &options)?;
    if csv {
        out!("{}", bench::to_csv(&rows, dtype));
    } else {
        out!("{}", bench::to_text(&exp, &spec, &rows));
    }
    if let Some(path) = plot {
        let svg = bench::to_svg(&exp, &spec, &rows).map_err(anyhow::Error::msg)?;
        std::fs::write(&path, svg)
            .with_context(|| format!("writing the plot to {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn workload_command(
    experiment: &std::path::Path,
    json: bool,
    export: Option<ExportFormat>,
    output: Option<PathBuf>,
    workload_file: Option<PathBuf>,
    sets: &[String],
) -> anyhow::Result<()> {
    let exp = Experiment::load(experiment, sets)?;
    let started = Instant::now();
    let workload = sim::workload::load_or_compile(&exp, workload_file.as_deref())?;
    let compile_s = started.elapsed().as_secs_f64();
    let model = ComputeModel::from_experiment(&exp)?;
    let stage_gpus = exp.stage_gpus();
    if let (Some(format), Some(path)) = (export, output) {
        let (text, what) = match format {
            ExportFormat::Simai => (
                sim::interop::simai_convert::export(&workload, &exp, &model),
                "the SimAI workload",
            ),
            ExportFormat::Kernels => {
                let stages = kernel_report::stage_kernels(&workload, &model, &stage_gpus);
                (kernel_report::kernel_table(&stages), "the kernel table")
            }
        };
        std::fs::write(&path, text)
            .with_context(|| format!("writing {what} to {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        return Ok(());
    }
    let report = WorkloadReport::new(exp.name(), workload, &stage_gpus, &model, compile_s);
    print_report(json, || report.to_json(), || report.to_text())
}

/// Prints a report as pretty JSON or as text.
fn print_report(
    json: bool,
    to_json: impl FnOnce() -> serde_json::Value,
    to_text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if json {
        let text =
            serde_json::to_string_pretty(&to_json()).context("rendering the report as JSON")?;
        outln!("{text}");
    } else {
        out!("{}", to_text());
    }
    Ok(())
}

/// Writes a finished run's output directory and prints its two summary lines.
fn report_run(
    exp: &Experiment,
    output: &coordinator::run::RunOutput,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    write_outputs(dir, exp, output)
        .with_context(|| format!("writing the results to {}", dir.display()))?;
    let s = &output.summary;
    let b = &s.breakdown_s;
    let or_na =
        |v: Option<f64>, decimals: usize| v.map_or("n/a".into(), |v| format!("{v:.decimals$}"));
    outln!(
        "{}: iteration {:.6} s (per rank: compute {:.6} s, exposed communication {:.6} s, bubble {:.6} s), {} TFLOP/s per GPU, MFU {}, digest {}",
        exp.name(),
        s.iteration_time_s,
        b.compute,
        b.exposed_comm,
        b.bubble,
        or_na(s.tflops_per_gpu, 1),
        or_na(s.mfu, 3),
        s.result_digest
    );
    for warning in &s.warnings {
        eprintln!("warning: {warning}");
    }
    let net = &s.network;
    let flow = net.flow.as_ref().map_or(String::new(), |flow| {
        format!(
            "; {} flows, {} rate recomputations touching {} flows",
            flow.flows, flow.rate_recomputations, flow.flows_touched
        )
    });
    outln!(
        "network: {} (intra-host {}){flow}",
        net.model,
        net.intra_host,
    );
    let e = &s.engine;
    // After a resume, this process ran only the events past its checkpoint.
    let events = if e.resumed_events > 0 {
        format!(
            "{} events, {} of them since the checkpoint,",
            e.events,
            e.events - e.resumed_events
        )
    } else {
        format!("{} events", e.events)
    };
    outln!(
        "engine: {events} in {:.2} s ({:.2e} events/s), {} windows, {} worker(s); results in {}",
        e.wall_s,
        e.events_per_s,
        e.windows,
        e.workers,
        dir.display()
    );
    let workers_rss: Vec<String> = e
        .per_worker
        .iter()
        .filter_map(|w| w.peak_rss_bytes)
        .map(|b| format!("{:.0}", b as f64 / 1e6))
        .collect();
    if !workers_rss.is_empty() {
        outln!(
            "memory: peak RSS {:.0} MB here, {} MB in the workers",
            e.peak_rss_bytes as f64 / 1e6,
            workers_rss.join(", ")
        );
    }
    Ok(())
}

/// `fleetsim slurm`: this task's part of the run.
fn slurm_command(
    experiment: &std::path::Path,
    port: Option<u16>,
    run: DistributedArgs,
) -> anyhow::Result<()> {
    use coordinator::distributed::{self as dist, read_token};
    use coordinator::slurm::{SlurmTask, wait_for_file, write_private};
    let task = SlurmTask::from_env(|k| std::env::var(k).ok())?;
    let port = task.port(port);
    let patience = std::time::Duration::from_secs(120);
    let token = match run.token_file.as_deref() {
        Some(f) => read_token(f).map_err(anyhow::Error::msg)?,
        None if task.is_coordinator() => {
            let token = dist::new_token().map_err(anyhow::Error::msg)?;
            write_private(&task.file("token"), &token)?;
            token
        }
        None => wait_for_file(&task.file("token"), patience)?,
    };
    if task.is_coordinator() {
        let workers = task.ntasks - 1;
        let listen = format!("0.0.0.0:{port}");
        let address_file = task.file("addr");
        let mut written = Ok(());
        let tune = |o: &mut CoordinatorOptions| o.any_port_fallback = true;
        let done = coordinate(experiment, run, (listen, workers, &token), tune, |addr| {
            let reachable = format!("{}:{}", dist::host_name(), addr.port());
            written = write_private(&address_file, &reachable);
            eprintln!(
                "fleetsim slurm: coordinator on {reachable}, waiting for {workers} worker(s)"
            );
        });
        let _ = std::fs::remove_file(task.file("addr"));
        let _ = std::fs::remove_file(task.file("token"));
        written?;
        done
    } else {
        let tls = load_tls(run.tls_dir.as_deref())?;
        if let Some(listen) = &run.metrics_listen {
            coordinator::metrics::serve(listen).map_err(anyhow::Error::msg)?;
        }
        // The address file when task 0 wrote it (it may have had to take another port),
        // else the first host of the job at the agreed port.
        let address_file = task.file("addr");
        let first_host = format!("{}:{port}", task.hosts[0]);
        let coordinator = move || {
            std::fs::read_to_string(&address_file)
                .ok()
                .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
                .filter(|a| !a.is_empty())
                .unwrap_or_else(|| first_host.clone())
        };
        let summary = dist::run_worker_process(
            &coordinator,
            "0.0.0.0:0",
            task.cpus_per_task,
            &token,
            tls.as_ref(),
            coordinator::checkpoint::stop_on_signals().map_err(anyhow::Error::msg)?,
        )?;
        if !run.quiet {
            eprintln!(
                "fleetsim slurm: worker {} of {} {}: {} partitions, {} events",
                summary.id,
                summary.workers,
                if summary.stopped {
                    "stopped at a checkpoint"
                } else {
                    "done"
                },
                summary.partitions,
                summary.events
            );
        }
        Ok(())
    }
}

/// `--tls-dir`, loaded.
fn load_tls(
    dir: Option<&std::path::Path>,
) -> anyhow::Result<Option<coordinator::distributed::TlsFiles>> {
    dir.map(coordinator::distributed::TlsFiles::load)
        .transpose()
        .map_err(anyhow::Error::msg)
}

/// With `--metrics-listen`, serves metrics and records every window (then shows `progress`).
fn with_metrics(
    listen: Option<&str>,
    progress: Option<coordinator::embedded::ProgressHook>,
) -> anyhow::Result<Option<coordinator::embedded::ProgressHook>> {
    match listen {
        Some(listen) => {
            coordinator::metrics::serve(listen).map_err(anyhow::Error::msg)?;
            Ok(Some(coordinator::metrics::window_hook(progress)))
        }
        None => Ok(progress),
    }
}

/// Loads `experiment` as `run` asks, serves as its coordinator on `listen` for `workers`
/// workers with `token` (`tune` adjusts the defaults; `on_listening` hears the bound
/// address), and writes the results as `fleetsim run` does.
fn coordinate(
    experiment: &std::path::Path,
    run: DistributedArgs,
    (listen, workers, token): (String, u32, &str),
    tune: impl FnOnce(&mut CoordinatorOptions),
    on_listening: impl FnOnce(std::net::SocketAddr),
) -> anyhow::Result<()> {
    let exp = Experiment::load(experiment, &run.sets)?;
    let out = out_dir(&exp, run.out)?;
    let mut options = CoordinatorOptions {
        listen,
        workers,
        token: token.to_string(),
        // Workers load the same file: its absolute path.
        experiment_path: std::fs::canonicalize(experiment)
            .with_context(|| format!("resolving {}", experiment.display()))?,
        sets: run.sets.clone(),
        any_port_fallback: false,
        tls: load_tls(run.tls_dir.as_deref())?,
        registration_patience: coordinator::distributed::REGISTRATION_PATIENCE,
        checkpoints: run.checkpoints.options(&out)?,
    };
    tune(&mut options);
    let progress = with_metrics(
        run.metrics_listen.as_deref(),
        (!run.quiet).then(|| progress::hook(&exp)),
    )?;
    let output = coordinator::distributed::run_coordinator(&exp, &options, progress, on_listening)?;
    report_run(&exp, &output, &out)
}

/// `fleetsim validate`: every row simulated, the table printed as rows finish, then the files.
fn validate_command(
    cases: &Path,
    out: Option<PathBuf>,
    rows: Option<&[usize]>,
    sets: &[String],
    threads: Option<usize>,
    max_mape: Option<f64>,
    max_error: Option<f64>,
) -> anyhow::Result<()> {
    use coordinator::validate;
    let file = cases.display().to_string();
    let all = validate::read_cases(cases)?;
    let selected = validate::select(all, rows).map_err(anyhow::Error::msg)?;
    let out = out.unwrap_or_else(|| {
        let stem = cases
            .file_stem()
            .map_or_else(|| "cases".into(), |s| s.to_string_lossy().into_owned());
        PathBuf::from("runs").join(format!("validate-{stem}"))
    });
    let prepared = validate::prepare(&out, &selected, sets, &file)?;
    let options = coordinator::run::RunOptions {
        threads,
        ..Default::default()
    };
    outln!("{}", validate::table_header());
    let mut outcomes = Vec::new();
    for (case, exp) in prepared {
        let outcome = validate::run_case(case, &exp, &options, &file)?;
        outln!("{}", validate::table_line(&outcome));
        outcomes.push(outcome);
    }
    let verdict = validate::verdict(&outcomes);
    outln!("{verdict}");
    let csv = out.join("validation.csv");
    std::fs::write(&csv, validate::to_csv(&outcomes))
        .with_context(|| format!("writing {}", csv.display()))?;
    let svg = out.join("parity.svg");
    std::fs::write(&svg, validate::parity_svg(&outcomes)?)
        .with_context(|| format!("writing {}", svg.display()))?;
    outln!("results in {}", out.display());
    let mape = validate::mape(&outcomes);
    if let Some(limit) = max_mape.filter(|&l| mape > l) {
        anyhow::bail!("MAPE {mape:.2}% is above --max-mape {limit}%");
    }
    if let (Some(limit), Some(w)) = (max_error, validate::worst(&outcomes))
        && 100.0 * w.error.abs() > limit
    {
        anyhow::bail!(
            "line {} of {file} is off by {:+.1}%, above --max-error {limit}%",
            w.case.line,
            100.0 * w.error
        );
    }
    Ok(())
}
