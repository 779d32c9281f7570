//! The `fleetsim` command line (SPEC.md, "Commands"): one module per command, each holding
//! its arguments (`Args`) and what it does (`Args::execute`), with the reports only it
//! prints. The runtime they share (running, checkpoints, the output directory) is the
//! `coordinator` crate's.
//!
//! `coordinator`, `worker` and `slurm` exist with the `server` feature (the default): the
//! rest, `check` above all, neither links nor starts tokio.

use clap::{Parser, Subcommand};

#[macro_use]
pub mod stdout;

pub mod check;
pub mod collective;
#[cfg(feature = "server")]
pub mod coordinator;
pub mod kernel_report;
pub mod partition;
pub mod plan;
pub mod progress;
pub mod report;
pub mod run;
pub mod side_by_side;
#[cfg(feature = "server")]
pub mod slurm;
pub mod sweep;
pub mod validate;
#[cfg(feature = "server")]
pub mod worker;
pub mod workload;

/// Exit status of a run that stopped at a checkpoint on SIGTERM or SIGUSR1 (sysexits.h's
/// EX_TEMPFAIL): `fleetsim.sbatch` requeues the job on it.
pub const EXIT_STOPPED: u8 = 75;

#[derive(Parser, Debug)]
#[command(
    name = "fleetsim",
    version,
    about = "Simulates LLM training on GPU clusters"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log lines on stderr as text or as JSON objects (one per line).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// The least severe log lines shown: error, warn, info or debug.
    #[arg(long, global = true, default_value = "warn")]
    pub log_level: tracing_subscriber::filter::LevelFilter,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Validates an experiment and prints what it derives: cluster, groups, lookahead, memory.
    Check(check::Args),
    /// Compiles the experiment's workload and prints per stage: op counts, FLOPs, bytes per
    /// collective and group, and the schedule's bubble; or exports it.
    Workload(workload::Args),
    /// Simulates one training iteration embedded (in-process workers) and writes the output
    /// directory: summary.json, ranks.csv, collectives.csv, links.csv (and trace.json).
    Run(run::Args),
    /// Distributed run: waits for N workers over gRPC, partitions, drives the windows and
    /// writes the same output directory as `run`.
    #[cfg(feature = "server")]
    Coordinator(coordinator::Args),
    /// A distributed run as the tasks of `srun`: task 0 is the coordinator, the others are
    /// workers; they meet through SLURM_JOB_NODELIST and a port, or a file in the submit
    /// directory. Threads come from SLURM_CPUS_PER_TASK.
    #[cfg(feature = "server")]
    Slurm(slurm::Args),
    /// Joins a coordinator and runs the partitions it is given.
    #[cfg(feature = "server")]
    Worker(worker::Args),
    /// Partitions an experiment's topology with each strategy (or one) without simulating:
    /// LPs per partition, load imbalance, cut links, lookahead and expected cut traffic;
    /// writes partition-report.csv and partition-report.svg.
    Partition(partition::Args),
    /// Runs the cross product of --vary settings embedded; writes sweep.csv and sweep.svg.
    /// With --slurm, submits one Slurm array job instead (a task per point); then
    /// `fleetsim sweep --collect DIR` writes the same table and plot.
    Sweep(sweep::Args),
    /// Heterogeneity-aware placement: searches TP/PP/VP/micro-batch and how layers and
    /// micro-batches split over the device types with a fast analytical model, confirms the
    /// best with the engine, and prints the plan and its gain over the naive placement.
    Plan(plan::Args),
    /// Runs every row of a table of real training measurements (columns as in
    /// configs/validation/e2e_iterations.csv): predicted beside measured, the error per row
    /// and the MAPE; writes validation.csv, parity.svg and each row's experiment file.
    Validate(validate::Args),
    /// nccl-tests' performance table for one operation over N GPUs of a cluster: size, count,
    /// type, time, algbw, busbw, and the algorithm, protocol and channels NCCL would choose.
    Collective(collective::Args),
    /// One self-contained HTML page of where a run's time went (headline, stages, timeline,
    /// links by tier, collectives), of several runs side by side, or of a sweep's or
    /// validation's folder: report.html.
    Report(report::Args),
}

impl Command {
    /// Runs the command.
    pub fn execute(self) -> anyhow::Result<()> {
        match self {
            Command::Check(args) => args.execute(),
            Command::Workload(args) => args.execute(),
            Command::Run(args) => args.execute(),
            #[cfg(feature = "server")]
            Command::Coordinator(args) => args.execute(),
            #[cfg(feature = "server")]
            Command::Slurm(args) => args.execute(),
            #[cfg(feature = "server")]
            Command::Worker(args) => args.execute(),
            Command::Partition(args) => args.execute(),
            Command::Sweep(args) => args.execute(),
            Command::Plan(args) => args.execute(),
            Command::Validate(args) => args.execute(),
            Command::Collective(args) => args.execute(),
            Command::Report(args) => args.execute(),
        }
    }

    /// Whether this process is a worker of a distributed run (`worker`, or a `slurm` task),
    /// which waits at window barriers rather than computing most of the time.
    pub fn is_worker_process(&self) -> bool {
        match self {
            #[cfg(feature = "server")]
            Command::Worker(_) | Command::Slurm(_) => true,
            _ => false,
        }
    }
}
