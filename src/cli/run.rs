//! `fleetsim run`: one training iteration simulated in this process, and the output
//! directory. Also what the distributed commands share with it: checkpoint options, the
//! output folder, the metrics endpoint and the closing lines.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use coordinator::checkpoint::{CheckpointEvery, CheckpointOptions};
use coordinator::embedded::ProgressHook;
use coordinator::output::report::write_outputs;
use coordinator::run::{RunOptions, RunOutput, run_embedded};
use sim::experiment::Experiment;
use sim_config::{Origin, Overrides};

use crate::cli::progress;

/// `fleetsim run`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    pub experiment: PathBuf,
    /// Output directory. Default: runs/<experiment name>.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// In-process workers, each with its own partitions and mailboxes.
    #[arg(long, value_parser = at_least_one_worker)]
    pub workers: Option<u32>,
    /// Threads per worker (default: engine.threads, 0 = the idle cores, shared among the
    /// workers).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Partition strategy (like --set engine.partition=S).
    #[arg(long)]
    pub partition: Option<String>,
    /// Override a key of the experiment file, e.g. --set parallel.tp=4.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Also write trace.json (Chrome / Perfetto trace event format).
    #[arg(long)]
    pub trace: bool,
    /// No progress display.
    #[arg(long)]
    pub quiet: bool,
    /// Serve live metrics for Prometheus at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// With [[jobs]]: skip running each job alone on its hosts, which gives its slowdown.
    #[arg(long)]
    pub no_alone: bool,
    /// Also write report.html beside the other outputs (`fleetsim report`).
    #[arg(long)]
    pub report: bool,
    #[command(flatten)]
    pub checkpoints: CheckpointArgs,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let Args {
            experiment,
            out,
            workers,
            threads,
            partition,
            sets,
            trace,
            quiet,
            metrics_listen,
            no_alone,
            report,
            checkpoints,
        } = self;
        let mut overrides = Overrides::from_sets(&sets)?;
        if let Some(p) = partition {
            overrides.set(
                "engine.partition",
                p,
                &Origin::Derived("--partition".into()),
            );
        }
        let loaded = Experiment::load(&experiment, &overrides)?;
        let (exp, _) =
            crate::cli::plan::as_planned(&experiment, &overrides, loaded, threads, quiet)?;
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
        if let Some(note) = options.one_thread_note(&exp).filter(|_| !quiet) {
            eprintln!("note: {note}");
        }
        let progress = with_metrics(
            metrics_listen.as_deref(),
            (!quiet).then(|| progress::hook(&exp)),
        )?;
        let mut output = run_embedded(&exp, &options, progress)?;
        if !no_alone {
            coordinator::run::run_jobs_alone(&exp, &options, &mut output)?;
        }
        report_run(&exp, &output, &out)?;
        if report {
            let html = crate::cli::report::render(std::slice::from_ref(&out))?;
            let path = out.join("report.html");
            std::fs::write(&path, html).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// Checkpoints and resuming (`run`, `coordinator`, `slurm`).
#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {
    /// Where checkpoints are written (default: OUT/checkpoint). Under a distributed run
    /// every worker writes its part here too: use a shared file system.
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Take a checkpoint at a window barrier this often: simulated time (`500us`, `2ms`;
    /// units ps, ns, us, ms, s) or wall-clock time (`wall:30s`, `wall:15m`; units s, m, h).
    /// SIGTERM or SIGUSR1 always takes one and stops.
    #[arg(long, value_name = "INTERVAL", value_parser = parse_checkpoint_every)]
    pub checkpoint_every: Option<CheckpointEvery>,
    /// Continue the run whose checkpoint directory is DIR (with any number of workers or
    /// partitions); the result_digest is the uninterrupted run's.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
}

fn parse_checkpoint_every(
    s: &str,
) -> Result<CheckpointEvery, coordinator::checkpoint::IntervalError> {
    s.parse()
}

impl CheckpointArgs {
    /// The run's checkpoint options; SIGTERM and SIGUSR1 are watched from now on.
    pub fn options(self, out: &Path) -> anyhow::Result<CheckpointOptions> {
        Ok(CheckpointOptions {
            dir: self
                .checkpoint_dir
                .unwrap_or_else(|| out.join("checkpoint")),
            every: self.checkpoint_every,
            resume: self.resume,
            stop: coordinator::checkpoint::stop_on_signals()?,
        })
    }
}

/// `--workers N`: a whole number of at least 1.
pub fn at_least_one_worker(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("a run needs at least 1 worker (1 runs it all in this process)".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of workers, at least 1".into()),
    }
}

/// The output directory: `--out`, else runs/<experiment name>; created, and proven writable
/// before anything runs, so that a read-only folder is named at once and not after the run.
pub fn out_dir(exp: &Experiment, out: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    writable_dir(out.unwrap_or_else(|| PathBuf::from("runs").join(exp.name())))
}

/// Creates `dir` and proves it writable by writing and removing a file in it.
pub fn writable_dir(dir: PathBuf) -> anyhow::Result<PathBuf> {
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

/// Writes a finished run's output directory and prints its two summary lines.
pub fn report_run(exp: &Experiment, output: &RunOutput, dir: &Path) -> anyhow::Result<()> {
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
    for job in s.jobs.iter().flatten() {
        let alone = match (job.alone_iteration_time_s, job.slowdown) {
            (Some(a), Some(x)) => format!(", alone {a:.6} s, slowdown {x:.3}x"),
            _ => String::new(),
        };
        outln!(
            "  job {} ({} GPUs on {}, {}): iteration {:.6} s (compute {:.6} s, exposed communication {:.6} s, bubble {:.6} s){alone}",
            job.name,
            job.gpus,
            job.hosts,
            job.placement,
            job.iteration_time_s,
            job.breakdown_s.compute,
            job.breakdown_s.exposed_comm,
            job.breakdown_s.bubble,
        );
    }
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
        "network: {} (intra-host {}){flow}; {}",
        net.model,
        net.intra_host,
        other_network_models(&net.model)
    );
    let e = &s.engine;
    outln!("symmetry: {}", e.symmetry);
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

/// With `--metrics-listen`, serves metrics and records every window (then shows `progress`).
pub fn with_metrics(
    listen: Option<&str>,
    progress: Option<ProgressHook>,
) -> anyhow::Result<Option<ProgressHook>> {
    match listen {
        Some(listen) => {
            coordinator::metrics::serve(listen)?;
            Ok(Some(coordinator::metrics::window_hook(progress)))
        }
        None => Ok(progress),
    }
}

/// How to get the other fidelities than `model` (docs/engine.md, "Which network model").
fn other_network_models(model: &str) -> &'static str {
    match model {
        "packet" => {
            "faster: --set network.model=flow (shared links as fluid flows) or analytical (no congestion)"
        }
        "flow" => {
            "segment by segment: --set network.model=packet; faster, without congestion: analytical"
        }
        _ => "with congestion: --set network.model=flow or packet",
    }
}
