//! Standard output that survives a closed pipe (`fleetsim … | head`).

/// Writes to standard output. When the reader has gone away, the process ends quietly with
/// success, as ripgrep does, instead of panicking like `print!`.
pub fn write_stdout(args: std::fmt::Arguments) {
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
pub fn print_report(
    json: bool,
    to_json: impl FnOnce() -> serde_json::Value,
    to_text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if json {
        let text =
            serde_json::to_string_pretty(&to_json()).context("rendering the report as JSON")?;
        outln!("{text}");
    } else {
        out!("{}", to_text());
    }
    Ok(())
}
