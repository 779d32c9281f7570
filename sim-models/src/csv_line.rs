//! Line numbers for errors in CSV files read with the `csv` crate.

/// The line a record starts on. csv's record position is where the reader started looking,
/// before the comment and empty lines it skipped; this steps over those as it does.
pub fn record_line(text: &str, position: &csv::Position) -> u64 {
    let mut line = position.line();
    let mut rest = text.get(position.byte() as usize..).unwrap_or_default();
    while rest.starts_with(['#', '\n', '\r']) {
        let Some(end) = rest.find('\n') else { break };
        rest = &rest[end + 1..];
        line += 1;
    }
    line
}
