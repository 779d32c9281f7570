//! `fleetsim validate`'s measurement tables (`configs/validation/*.csv`).
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use sim::framework::Frameworks;

/// Parsed once: the tables are the input, not the framework table.
static FRAMEWORKS: LazyLock<Option<Frameworks>> = LazyLock::new(|| Frameworks::shipped().ok());

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(frameworks) = FRAMEWORKS.as_ref() {
        let _ = fleetsim::cli::validate::parse_cases(text, "fuzz.csv", frameworks);
    }
});
