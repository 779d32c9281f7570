//! `fleetsim`: simulates LLM training iterations on GPU clusters (see SPEC.md for commands).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use coordinator::check::CheckReport;
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
        /// Override a key of the experiment file, e.g. --set parallel.tp=4.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
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
            sets,
        } => {
            let exp = Experiment::load(&experiment, &sets)?;
            let started = Instant::now();
            let topology = exp.build_topology()?;
            let report = CheckReport {
                experiment: &exp,
                topology: &topology,
                build_s: started.elapsed().as_secs_f64(),
            };
            if json {
                let text = serde_json::to_string_pretty(&report.to_json())
                    .context("rendering the report as JSON")?;
                println!("{text}");
            } else {
                print!("{}", report.to_text());
            }
            Ok(())
        }
    }
}
