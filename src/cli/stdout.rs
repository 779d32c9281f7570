//! Standard output that survives a closed pipe (`fleetsim … | head`).

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once standard output's reader has gone: later writes are dropped.
static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Writes to standard output. When the reader has gone away (`| head -1`), what follows is
/// dropped and the command goes on: it still writes its files, and its exit status is
/// its own, so a failing run piped into `head` still fails (a CI gate that pipes is not
/// bypassed). `print!` would panic instead.
pub fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    if READER_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            READER_GONE.store(true, Ordering::Relaxed);
            return;
        }
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// `print!` through [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::stdout::write_stdout(format_args!($($arg)*)) };
}

/// `println!` through [`write_stdout`].
macro_rules! outln {
    () => { $crate::cli::stdout::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => {
        $crate::cli::stdout::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints a report as pretty JSON or as text.
pub fn print_report<T: serde::Serialize>(
    json: bool,
    to_json: impl FnOnce() -> anyhow::Result<T>,
    to_text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if json {
        let text =
            serde_json::to_string_pretty(&to_json()?).context("rendering the report as JSON")?;
        outln!("{text}");
    } else {
        out!("{}", to_text());
    }
    Ok(())
}
