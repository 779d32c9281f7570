//! `fleetsim slurm`: a distributed run as the tasks of `srun`. Task 0 is the coordinator,
//! the others are workers; they meet through SLURM_JOB_NODELIST and a port, or a file in the
//! submit directory (`coordinator::slurm`).

use std::path::PathBuf;

use coordinator::distributed::{self as dist, CoordinatorOptions, read_token};
use coordinator::slurm::{SlurmTask, wait_for_file, write_private};

use crate::cli::coordinator::{DistributedArgs, coordinate, load_tls};

/// `fleetsim slurm`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML), on a file system every task shares.
    pub experiment: PathBuf,
    /// Port task 0 serves on (default: derived from SLURM_JOB_ID).
    #[arg(long)]
    pub port: Option<u16>,
    #[command(flatten)]
    pub run: DistributedArgs,
}

impl Args {
    /// This task's part of the run.
    pub fn execute(self) -> anyhow::Result<()> {
        let Args {
            experiment,
            port,
            run,
        } = self;
        let experiment = experiment.as_path();
        let task = SlurmTask::from_env(|k| std::env::var(k).ok())?;
        let port = task.port(port);
        let patience = std::time::Duration::from_secs(120);
        let token = match run.token_file.as_deref() {
            Some(f) => read_token(f)?,
            None if task.is_coordinator() => {
                let token = dist::new_token()?;
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
                coordinator::metrics::serve(listen)?;
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
                coordinator::checkpoint::stop_on_signals()?,
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
}
