//! Engine throughput (issue 4, "Benchmarks"): events per second of the segment-level network
//! and the window loop, on one thread and on two.
//!
//! `cargo bench -p coordinator --bench engine`. Each benchmark reports elements = simulated
//! events, so criterion prints events/s directly.

use std::path::Path;
use std::sync::Arc;

use coordinator::embedded;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sim::engine::{FlowSpec, SimModel};
use sim::experiment::Experiment;

fn model(experiment: &str, sets: &[&str]) -> SimModel {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let exp = Experiment::load(&root.join(experiment), &sets).expect("experiment");
    SimModel::from_experiment(&exp, false).expect("model")
}

/// 128 H100s exchanging 8 MiB with the GPU one host over (rail-aligned) at 4 KiB segments.
fn permutation_model() -> SimModel {
    model(
        "configs/experiments/quickstart.toml",
        &["network.segment_bytes=4096"],
    )
    .only_flows(
        (0..128u32)
            .map(|src| FlowSpec {
                src,
                dst: (src + 8) % 128,
                bytes: 8 << 20,
                start_ps: 0,
            })
            .collect(),
    )
}

fn run(model: &Arc<SimModel>, threads: usize) -> u64 {
    let a = partitioner::by_host(&model.topology);
    let lookahead = partitioner::lookahead_ps(&model.topology, &a);
    let (_, stats) = embedded::run(
        Arc::clone(model),
        a.partition_of,
        lookahead,
        embedded::Split::new(1, threads),
        None,
        None,
    )
    .expect("run");
    stats.events
}

fn engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    let cases = [
        ("permutation-8MiB-128gpu-4k", Arc::new(permutation_model())),
        (
            "allreduce-64MiB-128gpu-4k",
            Arc::new(model(
                "configs/experiments/allreduce-64m-h100-128.toml",
                &[],
            )),
        ),
    ];
    for (name, m) in &cases {
        let events = run(m, 1);
        g.throughput(Throughput::Elements(events));
        for threads in [1, 2] {
            g.bench_function(format!("{name}/threads-{threads}"), |b| {
                b.iter(|| run(m, threads))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
