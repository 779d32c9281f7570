//! Shared helpers of the sim integration tests: experiments from TOML text.
#![allow(dead_code)]

use std::path::PathBuf;

use sim::experiment::Experiment;

/// The `include` line of the shipped rail-optimised H100 cluster, for experiments written
/// outside `configs/`.
pub fn rail_h100_include() -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    format!("include = [\"{root}/configs/clusters/rail-h100.toml\"]\n")
}

/// Writes `body` as experiment `name` in the test target's temporary folder `dir` (through a
/// real file, as users do) and loads it.
pub fn experiment(dir: &str, name: &str, body: &str) -> Experiment {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(dir);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, format!("name = \"{name}\"\n{body}")).expect("write experiment");
    Experiment::load(&path, &[]).unwrap_or_else(|e| panic!("{name}: {e}"))
}
