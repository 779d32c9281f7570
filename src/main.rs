//! `fleetsim`: simulates LLM training iterations on GPU clusters (see SPEC.md for commands).

use std::process::ExitCode;

use clap::Parser as _;

use coordinator::run::RunError;
use fleetsim::cli::{Cli, EXIT_STOPPED, LogFormat};

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

/// A usage error (an unknown flag, a bad value) as one line, like every other error: clap's
/// own rendering adds a usage block and a hint on lines of their own.
fn parse_cli() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            let text = e.render().to_string();
            let words: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{} (see --help)", words.join(" "));
            std::process::exit(2);
        }
        // --help and --version.
        Err(e) => e.exit(),
    }
}

fn main() -> ExitCode {
    let cli = parse_cli();
    let logs = tracing_subscriber::fmt()
        .with_max_level(cli.log_level)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.with_ansi(false).init(),
    }
    #[cfg(feature = "jemalloc")]
    if cli.command.is_worker_process() {
        restart_without_huge_pages();
    }
    match cli.command.execute() {
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
