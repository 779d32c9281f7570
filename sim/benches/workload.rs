//! Compile time of the workload IR at the largest shipped scale: Llama 3 405B on 131,072 GPUs
//! (target: under 5 s and 1 GiB, issue "Workload IR"), and on GPT-3 175B / 1,024 GPUs; and
//! the compute model's kernel-time lookup for every program (what a run does once per GPU
//! type before simulating).

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use sim::compute::ComputeModel;
use sim::experiment::Experiment;
use sim::workload::compile;

fn load(name: &str) -> Experiment {
    let path = format!(
        "{}/../configs/experiments/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    Experiment::load(Path::new(&path), &sim::config::Overrides::none())
        .expect("shipped experiment loads")
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("workload_compile");
    group.sample_size(10);
    for name in ["gpt3-175b-h100-1024.toml", "llama3-405b-h100-131072.toml"] {
        let exp = load(name);
        let w = compile(&exp).expect("compiles");
        eprintln!(
            "{name}: {} programs, {} ops, {:.2} MB",
            w.programs.len(),
            w.programs.iter().map(|p| p.ops.len()).sum::<usize>(),
            w.heap_bytes() as f64 / 1e6
        );
        group.bench_function(name, |b| b.iter(|| compile(&exp).expect("compiles")));
    }
    group.finish();
}

fn kernel_times(c: &mut Criterion) {
    let mut group = c.benchmark_group("compute_program_times");
    group.sample_size(20);
    let model = ComputeModel::embedded().expect("compute model");
    for name in ["gpt3-175b-h100-1024.toml", "llama3-405b-h100-131072.toml"] {
        let exp = load(name);
        let w = compile(&exp).expect("compiles");
        let kernels: usize = w.programs.iter().map(|p| p.kernels.len()).sum();
        eprintln!(
            "{name}: {kernels} distinct kernels over {} programs",
            w.programs.len()
        );
        let gpus = exp.stage_gpus();
        group.bench_function(name, |b| {
            b.iter(|| {
                w.programs
                    .iter()
                    .map(|p| model.program_times(p, gpus[p.stage as usize]).len())
                    .sum::<usize>()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, kernel_times);
criterion_main!(benches);
