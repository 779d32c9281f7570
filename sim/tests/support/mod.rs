//! Shared helpers of the sim integration tests: experiments from TOML text.
#![allow(dead_code)]

use std::path::PathBuf;

use sim::experiment::Experiment;
use sim::workload::{Kernel, KernelName, Op, OpKind, Program};

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
    Experiment::load(&path, &sim::config::Overrides::none())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A program's distinct compute kernels, with how often each runs.
pub fn kernels(p: &Program) -> Vec<(Kernel, u64)> {
    let mut counts = vec![0u64; p.kernels.len()];
    for op in &p.ops {
        if let OpKind::Compute { kernel } = op.kind {
            counts[kernel as usize] += 1;
        }
    }
    p.kernels.iter().copied().zip(counts).collect()
}

/// [`kernels`] named `name`.
pub fn kernels_named(p: &Program, name: KernelName) -> Vec<(Kernel, u64)> {
    kernels(p)
        .into_iter()
        .filter(|(k, _)| k.name == name)
        .collect()
}

/// A program's compute ops in program order, each with the kernel it launches.
pub fn compute_ops(p: &Program) -> impl Iterator<Item = (&Op, &Kernel)> {
    p.ops.iter().filter_map(|op| match op.kind {
        OpKind::Compute { kernel } => Some((op, &p.kernels[kernel as usize])),
        _ => None,
    })
}
