//! `fleetsim validate`'s measurement tables (`configs/validation/*.csv`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = fleetsim::cli::validate::parse_cases(text, "fuzz.csv");
});
