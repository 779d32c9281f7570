//! Engine cost in instructions (issue 4, "Benchmarks"): what the window loop and the LPs
//! execute for a run, counted by callgrind, so a change of a few percent shows on this
//! project's noisy shared VMs where wall time cannot (docs/engine.md).
//!
//! `cargo bench -p coordinator --bench engine_instructions` needs valgrind and
//! `gungraun-runner` at the version of the `gungraun` dependency
//! (`cargo install gungraun-runner --version 0.20.0`). Counting starts where the worker's
//! window loop does (`worker::window::run_worker`), on its own thread: building the model and
//! partitioning it are not counted. One thread only: two threads spin while they wait, and the
//! spins vary from run to run.

mod support;

use std::hint::black_box;
use std::sync::Arc;

use gungraun::{
    Callgrind, EntryPoint, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main,
};
use sim_engine::SimModel;
use support::{model, permutation_model, run};

/// A training iteration of the quickstart experiment (8 hosts of H100s).
fn quickstart() -> Arc<SimModel> {
    Arc::new(model("configs/experiments/quickstart.toml", &[]))
}

/// The quickstart on the analytical network without clock spread: one data-parallel
/// replica of 16 simulated for all (`engine.symmetry`).
fn quickstart_symmetric() -> Arc<SimModel> {
    Arc::new(model(
        "configs/experiments/quickstart.toml",
        &["network.model=analytical", "compute.clock_spread=0"],
    ))
}

/// The same, every rank simulated: the yardstick of the symmetric case.
fn quickstart_analytical() -> Arc<SimModel> {
    Arc::new(model(
        "configs/experiments/quickstart.toml",
        &[
            "network.model=analytical",
            "compute.clock_spread=0",
            "engine.symmetry=off",
        ],
    ))
}

/// 128 GPUs sending 1 MiB each to the GPU one host over, at 4 KiB segments: the
/// segment-level network alone.
fn permutation() -> Arc<SimModel> {
    Arc::new(permutation_model(1 << 20))
}

#[library_benchmark]
#[bench::quickstart(setup = quickstart)]
#[bench::quickstart_analytical(setup = quickstart_analytical)]
#[bench::quickstart_symmetric(setup = quickstart_symmetric)]
#[bench::permutation_1mib_128gpu_4k(setup = permutation)]
fn one_thread(model: Arc<SimModel>) -> u64 {
    black_box(run(&model, 1))
}

library_benchmark_group!(name = engine; benchmarks = one_thread);

main!(
    config = LibraryBenchmarkConfig::default()
        .tool(Callgrind::default().entry_point(EntryPoint::Custom(
            "worker::window::run_worker".to_string()
        )));
    library_benchmark_groups = engine
);
