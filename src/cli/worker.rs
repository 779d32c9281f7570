//! `fleetsim worker`: joins a coordinator over gRPC and runs the partitions it is given.

use std::path::PathBuf;

use coordinator::distributed;

use crate::cli::coordinator::load_tls;

/// `fleetsim worker`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The coordinator's HOST:PORT.
    #[arg(long)]
    pub coordinator: String,
    /// HOST:PORT this worker's peers reach it on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Threads (default: the cores other processes leave idle).
    #[arg(long)]
    pub threads: Option<usize>,
    /// File holding the run's shared token (the coordinator's --token-file, or the token
    /// it printed).
    #[arg(long)]
    pub token_file: PathBuf,
    /// Mutual TLS: a directory with ca.pem, cert.pem and key.pem (see docs/distributed.md).
    #[arg(long)]
    pub tls_dir: Option<PathBuf>,
    /// Serve live metrics for Prometheus at http://HOST:PORT/metrics.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        if let Some(listen) = &self.metrics_listen {
            coordinator::metrics::serve(listen)?;
        }
        let token = distributed::read_token(&self.token_file)?;
        let address = self.coordinator;
        let summary = distributed::run_worker_process(
            &|| address.clone(),
            &self.listen,
            self.threads,
            &token,
            load_tls(self.tls_dir.as_deref())?.as_ref(),
            coordinator::checkpoint::stop_on_signals()?,
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
}
