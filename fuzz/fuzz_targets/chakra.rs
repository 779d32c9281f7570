//! Chakra `.et` traces: the framing and messages (`fleetsim_chakra::decode`), then the import
//! into the IR as the one trace every rank of tests/fixtures/chakra/experiment.toml runs (16
//! H100s, DP 16).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sim::experiment::Experiment;
use sim::interop::chakra_convert::{ImportContext, import};

fn experiment() -> &'static Experiment {
    static EXP: OnceLock<Experiment> = OnceLock::new();
    EXP.get_or_init(|| {
        let path = fleetsim_fuzz::repo().join("tests/fixtures/chakra/experiment.toml");
        Experiment::load(&path, &sim_config::Overrides::none()).expect("the Chakra fixture's experiment")
    })
}

fuzz_target!(|data: &[u8]| {
    let exp = experiment();
    let decoded = sim::interop::chakra::decode_bytes(data, "fuzz.et");
    let path = fleetsim_fuzz::scratch().join("trace.et");
    std::fs::write(&path, data).expect("write the trace");
    let imported = import(&path, &ImportContext::from_experiment(exp));
    // A trace that does not decode does not import.
    if decoded.is_err() {
        assert!(imported.is_err());
    }
});
