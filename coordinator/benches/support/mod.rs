//! Models and runs shared by the engine benchmarks (`engine.rs`, wall time with criterion;
//! `engine_instructions.rs`, instruction counts with gungraun).

use std::path::Path;
use std::sync::Arc;

use coordinator::embedded;
use sim::experiment::Experiment;
use sim_engine::{FlowSpec, SimModel};
use worker::Scheduling;

/// The model of `experiment` (relative to the repository root) with `sets` applied.
pub fn model(experiment: &str, sets: &[&str]) -> SimModel {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let exp = Experiment::load(
        &root.join(experiment),
        &sim_config::Overrides::from_sets(&sets).expect("sets"),
    )
    .expect("experiment");
    SimModel::from_experiment(&exp, false).expect("model")
}

/// 128 H100s exchanging `bytes` with the GPU one host over (rail-aligned) at 4 KiB segments.
pub fn permutation_model(bytes: u64) -> SimModel {
    model(
        "configs/experiments/quickstart.toml",
        &["network.segment_bytes=4096"],
    )
    .only_flows(
        (0..128u32)
            .map(|src| FlowSpec {
                src,
                dst: (src + 8) % 128,
                bytes,
                start: sim_ir::time::SimTime::ZERO,
            })
            .collect(),
    )
}

/// Runs `model` in one embedded worker on `threads` threads, one partition per host and per
/// switch, with a barrier every window (load-adaptive scheduling); returns the events
/// processed.
pub fn run(model: &Arc<SimModel>, threads: usize) -> u64 {
    run_scheduled(model, threads, Scheduling::LoadAdaptive)
}

/// [`run`] with `scheduling` (`fleetsim run` schedules a lone worker asynchronously).
pub fn run_scheduled(model: &Arc<SimModel>, threads: usize, scheduling: Scheduling) -> u64 {
    let a = partitioner::by_host(&model.topology);
    let lookahead = model.lookahead(partitioner::lookahead(&model.topology, &a));
    let (_, stats) = embedded::run(
        Arc::clone(model),
        a.partition_of,
        lookahead,
        embedded::Split {
            scheduling,
            ..embedded::Split::new(1, threads)
        },
        None,
        None,
    )
    .expect("run");
    stats.events
}
