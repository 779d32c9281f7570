//! Compute–communication interference in the engine: a kernel runs at `compute_rate` of its
//! speed while a collective runs beside it, pro rata, as the analytical evaluator charges it
//! (`Interference::compute_delay`: the shared wall time times `1 − rate`).

mod support;

use sim::workload::{CollectiveOp, Label, OpKind, Program, Stream};
use sim_config::ComputeConfig;
use sim_engine::SimModel;
use sim_ir::layout::GroupKind;
use sim_models::compute::Interference;
use support::*;

/// Two GPUs of one data-parallel group, the analytical network, every chip at the
/// nominal clock.
fn two_gpus() -> sim::experiment::Experiment {
    experiment(&one_gpu_hosts(
        "interference",
        2,
        2,
        "model = \"analytical\"\n[compute]\nclock_spread = 0.0",
    ))
}

/// Each rank runs kernel `short`, then kernel `long` beside an all-reduce of `bytes` that
/// starts with it: the collective ends while `long` runs. The kernels are `compiled`'s.
fn program(compiled: &Program, short: u32, long: u32, bytes: u64) -> Program {
    let label = Label::imported();
    let mut p = Program::new(0, 1);
    p.kernels = compiled.kernels.clone();
    let a = p.push(
        OpKind::Compute { kernel: short },
        Stream::Compute,
        label,
        &[],
    );
    p.push(
        OpKind::Compute { kernel: long },
        Stream::Compute,
        label,
        &[a],
    );
    let reduce = OpKind::Collective {
        op: CollectiveOp::AllReduce,
        group: GroupKind::Dp,
        bytes,
    };
    p.push(reduce, Stream::Dp, label, &[a]);
    p
}

/// The trace spans of rank 0's compute and data-parallel streams.
fn spans(model: SimModel) -> (Vec<(u64, u64)>, Vec<(u64, u64)>) {
    let (model, results) = run(model);
    let gpu0 = model.topology.gpu(0);
    let (_, report) = results
        .reports
        .iter()
        .find(|(id, _)| *id == gpu0)
        .expect("rank 0 reports");
    let stream = |s: Stream| -> Vec<(u64, u64)> {
        report
            .op_spans
            .iter()
            .filter(|(i, _)| usize::from(*i) == s.index())
            .flat_map(|(_, v)| v.iter().map(|sp| (sp.start.as_ps(), sp.end.as_ps())))
            .collect()
    };
    (stream(Stream::Compute), stream(Stream::Dp))
}

#[test]
fn a_kernel_is_slowed_only_while_a_collective_runs_beside_it() {
    let exp = two_gpus();
    let compute = exp.compute_model().expect("compute model");
    let compiled = SimModel::from_experiment(&exp, true).expect("model");
    // The shortest and the longest kernel of the compiled workload.
    let times = &compiled.kernel_times[0];
    let by_time = |k: &usize| times[*k];
    let short = (0..times.len()).min_by_key(by_time).unwrap() as u32;
    let long = (0..times.len()).max_by_key(by_time).unwrap() as u32;
    let (short_ps, long_ps) = (times[short as usize].as_ps(), times[long as usize].as_ps());
    let with_reduce_of = |bytes: u64| {
        let mut workload = compiled.workload.clone();
        for p in &mut workload.programs {
            *p = program(p, short, long, bytes);
        }
        let model = SimModel::from_experiment(&exp, true).expect("model");
        spans(model.with_workload(&exp, workload, &compute))
    };
    // An all-reduce that takes at least a quarter of the long kernel.
    let mut bytes = 1 << 20;
    let (mut kernels, mut reduce) = with_reduce_of(bytes);
    while reduce[0].1 - reduce[0].0 < long_ps / 4 {
        bytes *= 2;
        (kernels, reduce) = with_reduce_of(bytes);
    }
    let ((a_start, a_end), (k_start, k_end)) = (kernels[0], kernels[1]);
    let (r_start, r_end) = reduce[0];
    assert_eq!(a_end - a_start, short_ps, "the short kernel runs alone");
    assert_eq!((k_start, r_start), (a_end, a_end), "both start as it ends");
    assert!(
        r_end < k_end,
        "the collective ends inside the long kernel: {reduce:?} {kernels:?}"
    );
    // Slowed for the shared time only: its time alone plus the shared time times (1 − rate).
    let rate = Interference::from_config(&ComputeConfig::default()).compute_rate;
    let shared = r_end - r_start;
    let expected = long_ps as f64 + shared as f64 * (1.0 - rate);
    let took = (k_end - k_start) as f64;
    assert!(
        (took - expected).abs() <= 2.0,
        "took {took} ps, expected {expected} (alone {long_ps}, shared {shared})"
    );
    // Slowed for all of it (the rate fixed as the kernel starts) would be a sixth more.
    assert!(took < long_ps as f64 / rate - 1000.0);
}
