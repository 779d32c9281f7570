//! Engine throughput (issue 4, "Benchmarks"): events per second of the segment-level network
//! and the window loop, on one thread and on two, with a barrier every window and with
//! asynchronous threads (`fleetsim run`'s default on one worker); also two jobs sharing
//! one fabric (`[[jobs]]`).
//!
//! `cargo bench -p coordinator --bench engine`. Each benchmark reports elements = simulated
//! events, so criterion prints events/s directly.

mod support;

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use support::{model, permutation_model, run, run_scheduled};
use worker::Scheduling;

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
        // [[jobs]]: two jobs sharing 2:1 oversubscribed spines (docs/jobs.md).
        (
            "two-jobs-interleaved-32gpu",
            Arc::new(model("tests/fixtures/jobs/interleaved.toml", &[])),
        ),
    ];
    for (name, m) in &cases {
        let events = run(m, 1);
        g.throughput(Throughput::Elements(events));
        for scheduling in [Scheduling::LoadAdaptive, Scheduling::Asynchronous] {
            for threads in [1, 2] {
                let id = format!("{name}/{}/threads-{threads}", scheduling.name());
                g.bench_function(id, |b| b.iter(|| run_scheduled(m, threads, scheduling)));
            }
        }
    }
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
