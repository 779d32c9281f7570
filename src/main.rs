//! `fleetsim`: simulates LLM training iterations on GPU clusters (see SPEC.md for commands).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use coordinator::check::CheckReport;
use coordinator::kernel_report;
use coordinator::workload_report::WorkloadReport;
use sim::compute::ComputeModel;
use sim::experiment::Experiment;

#[derive(Parser, Debug)]
#[command(
    name = "fleetsim",
    version,
    about = "Simulates LLM training on GPU clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
        /// File the export is written to.
        #[arg(long, requires = "export")]
        output: Option<PathBuf>,
        /// Run a SimAI workload file instead of compiling the model (like `workload_file`).
        #[arg(long, value_name = "FILE")]
        workload_file: Option<PathBuf>,
        /// Override a key of the experiment file, e.g. --set parallel.tp=4.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ExportFormat {
    Simai,
    Kernels,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
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
            let workload = sim::workload::load_or_compile(&exp, None)?;
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
    }
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
                sim::workload::simai_convert::export(&workload, &exp, &model),
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
        println!("{text}");
    } else {
        print!("{}", to_text());
    }
    Ok(())
}
