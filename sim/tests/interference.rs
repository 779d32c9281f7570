//! Compute–communication interference in the analytical evaluator.

use std::path::Path;

use sim::compute::{ComputeModel, Interference};
use sim::config::ComputeConfig;
use sim::experiment::Experiment;
use sim::time::SimTime;
use sim::workload::evaluate::{evaluate, evaluate_with_interference};
use sim::workload::{Op, OpKind, Program, compile};

#[test]
fn overlapped_collectives_slow_compute_and_none_changes_nothing() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/experiments/quickstart.toml");
    let exp = Experiment::load(&path, &sim::config::Overrides::none()).expect("quickstart");
    let workload = compile(&exp).expect("compiles");
    let model = ComputeModel::embedded().expect("model");
    let gpu = exp.stage_gpus()[0].clone();
    let times: Vec<Vec<SimTime>> = (0..workload.layout.pp)
        .map(|s| model.program_times(workload.program(0, s), &gpu))
        .collect();
    // Communication at 100 GB/s: DP buckets overlap backward, TP collectives partly overlap.
    let cost = |p: &Program, op: &Op| match op.kind {
        OpKind::Compute { kernel } => times[p.stage as usize][kernel as usize],
        OpKind::Collective { bytes, .. }
        | OpKind::Send { bytes, .. }
        | OpKind::MemoryRead { bytes } => SimTime::from_ps(bytes * 10),
        OpKind::Recv { .. } => SimTime::ZERO,
    };
    let plain = evaluate(&workload, 0, &cost).expect("no deadlock");
    let none = evaluate_with_interference(&workload, 0, &cost, &Interference::NONE).unwrap();
    assert_eq!(plain, none);
    let slowed = Interference::from_config(&ComputeConfig::default());
    let with = evaluate_with_interference(&workload, 0, &cost, &slowed).unwrap();
    assert!(with.iteration > plain.iteration, "{with:?} vs {plain:?}");
    // Never more than every op fully slowed.
    let bound = plain.iteration.as_ps() as f64 / slowed.compute_rate.min(slowed.comm_rate);
    assert!((with.iteration.as_ps() as f64) < bound);
    // Free communication overlaps nothing.
    let free = |p: &Program, op: &Op| match op.kind {
        OpKind::Compute { .. } => cost(p, op),
        _ => SimTime::ZERO,
    };
    assert_eq!(
        evaluate(&workload, 0, &free).unwrap(),
        evaluate_with_interference(&workload, 0, &free, &slowed).unwrap()
    );
}
