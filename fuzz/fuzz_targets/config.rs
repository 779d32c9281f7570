//! Experiment files with `--set` overrides: the text (as if it were
//! tests/fixtures/bad/fuzz-input.toml, so the fixtures' includes resolve), then, after a line
//! `#--set`, one `KEY=VALUE` per line; loaded and validated as `fleetsim check` does, without
//! building the topology.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim::experiment::Experiment;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    let (text, sets) = match input.split_once("\n#--set\n") {
        Some((text, sets)) => (text, sets.lines().map(str::to_string).collect()),
        None => (input, Vec::new()),
    };
    let path = fleetsim_fuzz::repo().join("tests/fixtures/bad/fuzz-input.toml");
    if let Ok(overrides) = sim_config::Overrides::from_sets(&sets) {
        let _ = Experiment::from_text(&path, text, &overrides);
    }
});
