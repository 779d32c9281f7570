//! Engine throughput (issue 4, "Benchmarks"): events per second of the segment-level network
//! and the window loop, on one thread and on two.
//!
//! `cargo bench -p coordinator --bench engine`. Each benchmark reports elements = simulated
//! events, so criterion prints events/s directly.

mod support;

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use support::{model, permutation_model, run};

fn engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    let cases = [
        (
            "permutation-8MiB-128gpu-4k",
            Arc::new(permutation_model(8 << 20)),
        ),
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
