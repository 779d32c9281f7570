//! Fits the compute model's efficiency parameters (`configs/compute/*.toml`) to measurements in
//! `sim/tests/calibration/`, and prints the fit and its errors.
//!
//! `cargo run --release -p sim --example fit_compute`
//!
//! Every efficiency is a fraction of the tensor peak at the clock the kernel ran at, so each
//! data set is fitted at its own clock:
//! - **Hopper**: H100 kernels measured at the IR's shapes in steady state, at the sustained
//!   clock (`h100-measured/`): `kernels-steady.csv` (BF16 GEMMs and elementwise kernels),
//!   `gemm-fp8-steady.csv` (FP8 GEMMs) and `attention-cudnn-steady.csv` (cuDNN fused
//!   attention, the backend Megatron-Core runs on Hopper).
//! - **Ampere**: `gemm_tflops.csv`'s A100 FP16 column and FlashAttention-2's A100 benchmark,
//!   at the sustained clock: looped benchmarks settle at the power-capped clock within a
//!   fraction of a second (an H100 does within 250 ms, `clock-probe-h100.txt`), and the fit
//!   then matches a Megatron layer measured in training (Korthikanti et al. Table 4).
//!
//! Each family is fitted by coordinate descent over grids, from the values in its file: one
//! parameter at a time takes the best grid value, until a round changes nothing. The
//! objective counts cases off by more than 10% first, then sums squared log errors.

use sim::compute::calibration::{
    Comparison, compare_flash_attention, compare_gemm, compare_table, heated,
};
use sim::compute::{ArchEfficiency, EfficiencyTable, KernelTables, model_time, model_time_at};
use sim::config::{Origin, Precision};
use sim::gpu::{ClockState, GpuDatabase, GpuSpec};
use sim::workload::Kernel;

fn score(cases: &[Comparison]) -> f64 {
    cases
        .iter()
        .map(|c| {
            let miss = if c.error().abs() > 0.10 { 1000.0 } else { 0.0 };
            miss + (c.predicted / c.measured).ln().powi(2)
        })
        .sum()
}

/// Sum of squared log errors alone: smooth, for fits whose miss count has many local minima.
fn squared(cases: &[Comparison]) -> f64 {
    cases
        .iter()
        .map(|c| (c.predicted / c.measured).ln().powi(2))
        .sum()
}

/// One fitted parameter: its name, how to set it, and the values to try.
struct Param {
    set: fn(&mut ArchEfficiency, f64),
    grid: Vec<f64>,
}

fn param(set: fn(&mut ArchEfficiency, f64), from: f64, to: f64, step: f64) -> Param {
    Param {
        set,
        grid: grid(from, to, step),
    }
}

fn grid(from: f64, to: f64, step: f64) -> Vec<f64> {
    let n = ((to - from) / step).round() as usize;
    (0..=n).map(|i| from + step * i as f64).collect()
}

/// Coordinate descent of `params` from `start`, minimising `score(cases(e))`.
fn descend(
    start: &ArchEfficiency,
    params: &[Param],
    cases: &dyn Fn(&ArchEfficiency) -> Vec<Comparison>,
) -> ArchEfficiency {
    descend_by(start, params, cases, score)
}

fn descend_by(
    start: &ArchEfficiency,
    params: &[Param],
    cases: &dyn Fn(&ArchEfficiency) -> Vec<Comparison>,
    score: fn(&[Comparison]) -> f64,
) -> ArchEfficiency {
    let mut best = start.clone();
    let mut best_score = score(&cases(&best));
    for _round in 0..30 {
        let mut changed = false;
        for p in params {
            for &v in &p.grid {
                let mut e = best.clone();
                (p.set)(&mut e, v);
                let s = score(&cases(&e));
                if s < best_score - 1e-12 {
                    best_score = s;
                    best = e;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    best
}

fn print(title: &str, cases: &[Comparison]) {
    println!(
        "\n{title}\n| column | case | measured | predicted | error |\n|---|---|---:|---:|---:|"
    );
    for c in cases {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:+.1}% |",
            c.column,
            c.case,
            c.measured,
            c.predicted,
            100.0 * c.error()
        );
    }
}

/// Per column: cases, median and worst error, share within 5% and 10%.
fn summary(title: &str, cases: &[Comparison]) {
    let mut columns: Vec<&str> = cases.iter().map(|c| c.column.as_str()).collect();
    columns.sort_unstable();
    columns.dedup();
    println!(
        "\n{title}\n| column | cases | median error | within 5% | within 10% | worst |\n|---|---:|---:|---:|---:|---:|"
    );
    for col in columns {
        let mut errors: Vec<f64> = cases
            .iter()
            .filter(|c| c.column == col)
            .map(Comparison::error)
            .collect();
        errors.sort_by(f64::total_cmp);
        let n = errors.len();
        let within = |p: f64| errors.iter().filter(|e| e.abs() <= p).count();
        let worst = errors
            .iter()
            .copied()
            .max_by(|a, b| a.abs().total_cmp(&b.abs()))
            .unwrap_or(0.0);
        println!(
            "| {col} | {n} | {:+.1}% | {} | {} | {:+.1}% |",
            100.0 * errors[n / 2],
            within(0.05),
            within(0.10),
            100.0 * worst
        );
    }
}

/// The H100 tables of `h100-measured/` for one clock (`steady` or `burst`), one per file, each
/// with whether its attention rows count: `kernels-*.csv`'s attention ran the flash backend,
/// which Megatron does not run on Hopper; `attention-cudnn-*.csv` holds the same shapes on
/// cuDNN.
fn h100_tables(db: &GpuDatabase, dir: &str, clock: &str) -> Vec<(KernelTables, bool)> {
    [
        (format!("kernels-{clock}.csv"), false),
        (format!("gemm-fp8-{clock}.csv"), true),
        (format!("attention-cudnn-{clock}.csv"), true),
    ]
    .into_iter()
    .map(|(file, attention)| {
        let path = std::path::PathBuf::from(format!("{dir}/h100-measured/{file}"));
        let origin = Origin::Derived("fit_compute".into());
        let t = KernelTables::load(&[(path, origin)], &|name| db.get(name).cloned())
            .expect("valid table");
        (t, attention)
    })
    .collect()
}

/// Every row of `tables` against the model `seconds`.
fn compare_tables(
    tables: &[(KernelTables, bool)],
    seconds: &dyn Fn(&Kernel, &GpuSpec) -> f64,
) -> Vec<Comparison> {
    tables
        .iter()
        .flat_map(|(t, attention)| {
            compare_table(t, seconds)
                .into_iter()
                .filter(move |c| *attention || !c.column.starts_with("attention"))
        })
        .collect()
}

fn seconds(e: &ArchEfficiency) -> impl Fn(&Kernel, &GpuSpec) -> f64 + '_ {
    move |k, g| model_time(k, g, e, true).seconds()
}

/// The model at the clocks of `profile_kernels.py --clock steady` (after BF16 heaters).
fn steady_seconds(e: &ArchEfficiency) -> impl Fn(&Kernel, &GpuSpec) -> f64 + '_ {
    move |k, g| model_time(k, &heated(g), e, true).seconds()
}

/// The model at the burst clock of a kernel timed after an idle GPU.
fn burst_seconds(e: &ArchEfficiency) -> impl Fn(&Kernel, &GpuSpec) -> f64 + '_ {
    move |k, g| model_time_at(k, g, e, true, ClockState::Burst).seconds()
}

fn print_family(e: &ArchEfficiency) {
    let (g, a) = (&e.gemm, &e.attention);
    println!(
        "\n## {}\nlaunch_us = {}\nmemory_efficiency = {}\n[gemm] k_overhead = {}, tile_intensity_half = {}\n[gemm.peak_fraction] bf16 = {}, fp8 = {}\n[attention] peak_fraction_hd64 = {}, peak_fraction_hd128 = {}, seq_half = {}, causal_blocks = {}, backward_relative = {}, causal_peak = {}, blocks_per_sm_half = {}, seq_half_backward = {:?}",
        e.architecture,
        e.launch_us,
        e.memory_efficiency,
        g.k_overhead,
        g.tile_intensity_half,
        g.peak_fraction.bf16,
        g.peak_fraction.fp8,
        a.peak_fraction_hd64,
        a.peak_fraction_hd128,
        a.seq_half,
        a.causal_blocks,
        a.backward_relative,
        a.causal_peak,
        a.blocks_per_sm_half,
        a.seq_half_backward
    );
}

fn launch_param() -> Param {
    param(|e, v| e.launch_us = v, 0.5, 12.0, 0.25)
}

/// The GEMM parameters: tile costs, then `launch` (where GEMMs fit the launch cost), then the
/// peak fraction of each of `dtypes`.
fn gemm_params(launch: Option<Param>, dtypes: &[Precision]) -> Vec<Param> {
    let mut params = vec![
        param(|e, v| e.gemm.k_overhead = v, 0.0, 1024.0, 16.0),
        param(|e, v| e.gemm.tile_intensity_half = v, 0.0, 96.0, 2.0),
    ];
    params.extend(launch);
    for dtype in dtypes {
        params.push(match dtype {
            Precision::Fp8 => param(|e, v| e.gemm.peak_fraction.fp8 = v, 0.40, 1.0, 0.005),
            Precision::Fp16 => param(|e, v| e.gemm.peak_fraction.fp16 = v, 0.40, 1.0, 0.005),
            _ => param(|e, v| e.gemm.peak_fraction.bf16 = v, 0.40, 1.0, 0.005),
        });
    }
    params
}

fn attention_params() -> Vec<Param> {
    vec![
        param(|e, v| e.attention.peak_fraction_hd64 = v, 0.20, 1.0, 0.005),
        param(|e, v| e.attention.peak_fraction_hd128 = v, 0.20, 1.0, 0.005),
        param(|e, v| e.attention.seq_half = v, 0.0, 600.0, 10.0),
        param(|e, v| e.attention.causal_blocks = v, 0.0, 6.0, 0.125),
        param(|e, v| e.attention.backward_relative = v, 0.5, 1.0, 0.005),
        param(|e, v| e.attention.causal_peak = v, 0.6, 1.0, 0.005),
        param(|e, v| e.attention.blocks_per_sm_half = v, 0.0, 4.0, 0.05),
        param(
            |e, v| e.attention.seq_half_backward = Some(v),
            0.0,
            1200.0,
            10.0,
        ),
    ]
}

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/calibration");
    let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).expect("calibration file");
    let db = GpuDatabase::embedded().expect("GPU database");
    let families = EfficiencyTable::embedded().expect("efficiency files");

    // ----- Hopper: H100 kernels at the IR's shapes, steady state -----
    let (hopper, _) = families.for_architecture("hopper");
    let steady = h100_tables(&db, dir, "steady");
    let steady_cases = |e: &ArchEfficiency| compare_tables(&steady, &steady_seconds(e));
    let steady_cases = &steady_cases;
    let kind = |prefix: &'static str| {
        move |e: &ArchEfficiency| -> Vec<Comparison> {
            steady_cases(e)
                .into_iter()
                .filter(|c| c.column.starts_with(prefix))
                .collect()
        }
    };
    // Memory-bound kernels: the rows timed with profile_kernels.py's bandwidth proxy (a copy
    // moving the row's bytes). Its eager norms, activations and dropout-adds run as several
    // kernels where Megatron fuses them, so they say little about fused kernels' bandwidth.
    // The HBM efficiency comes from the long ones (over 100 µs), the launch cost from all.
    let bandwidth = |long: bool| {
        move |e: &ArchEfficiency| -> Vec<Comparison> {
            kind("memory")(e)
                .into_iter()
                .filter(|c| {
                    !["norm ", "activation ", "dropout_add "]
                        .iter()
                        .any(|k| c.case.contains(k))
                })
                .filter(|c| !long || c.measured_seconds > 100e-6)
                .collect()
        }
    };
    let memory = [param(|e, v| e.memory_efficiency = v, 0.60, 1.0, 0.0025)];
    let e = descend(hopper, &memory, &bandwidth(true));
    let e = descend(&e, &[launch_param()], &bandwidth(false));
    // The launch cost is the memory-bound kernels'; the GEMMs fit the rest.
    let gemm = gemm_params(None, &[Precision::Bf16, Precision::Fp8]);
    let e = descend(&e, &gemm, &kind("gemm"));
    let mut e = descend_by(&e, &attention_params(), &kind("attention"), squared);
    // FlashAttention-2 on Hopper: its H100 benchmark, at the burst clock (30 back-to-back
    // calls per point are too short to settle at the sustained clock).
    let fa_csv = read("flash_attention_tflops.csv");
    let h100_fa = |e: &ArchEfficiency| -> Vec<Comparison> {
        compare_flash_attention(&fa_csv, &db, &burst_seconds(e))
            .expect("attention table")
            .into_iter()
            .filter(|c| c.column == "H100")
            .collect()
    };
    let mut flash2 = e.clone();
    flash2.attention = e
        .attention_flash2
        .clone()
        .expect("hopper has attention_flash2");
    let flash2 = descend(&flash2, &attention_params()[..5], &h100_fa);
    e.attention_flash2 = Some(flash2.attention.clone());
    // FP16 and TF32 / FP32 run on the same tensor cores as BF16 at the same (or a fixed
    // fraction of the) rate: they share the BF16 efficiency.
    let bf16 = e.gemm.peak_fraction.bf16;
    (e.gemm.peak_fraction.fp16, e.gemm.peak_fraction.tf32) = (bf16, bf16);
    e.gemm.peak_fraction.fp32 = bf16;
    print_family(&e);
    let a = &flash2.attention;
    println!(
        "[attention_flash2] peak_fraction_hd64 = {}, peak_fraction_hd128 = {}, seq_half = {}, causal_blocks = {}, backward_relative = {}",
        a.peak_fraction_hd64,
        a.peak_fraction_hd128,
        a.seq_half,
        a.causal_blocks,
        a.backward_relative
    );
    print(
        "FlashAttention-2 fwd+bwd (hopper, burst clock)",
        &h100_fa(&flash2),
    );
    let all = steady_cases(&e);
    summary("Hopper, steady H100 kernels (h100-measured/)", &all);
    // The same model at the burst clock against the burst tables and the public benchmarks.
    let at_burst = burst_seconds(&e);
    let burst_cases = compare_tables(&h100_tables(&db, dir, "burst"), &at_burst);
    summary(
        "Hopper at the burst clock, burst H100 kernels",
        &burst_cases,
    );
    let public: Vec<Comparison> = compare_gemm(&read("gemm_tflops.csv"), &db, &at_burst)
        .expect("GEMM table")
        .into_iter()
        .filter(|c| c.column != "a100_fp16")
        .collect();
    print(
        "Hopper at the burst clock, gemm_tflops.csv (cuBLASLt FP8)",
        &public,
    );
    if std::env::args().any(|a| a == "--rows") {
        print("Hopper, every steady row", &all);
    }

    // ----- Ampere: public A100 benchmarks, at the sustained clock -----
    let (ampere, _) = families.for_architecture("ampere");
    let gemm_csv = read("gemm_tflops.csv");
    let a100_gemm = |e: &ArchEfficiency| -> Vec<Comparison> {
        compare_gemm(&gemm_csv, &db, &seconds(e))
            .expect("GEMM table")
            .into_iter()
            .filter(|c| c.column == "a100_fp16")
            .collect()
    };
    let gemm = gemm_params(Some(launch_param()), &[Precision::Fp16]);
    let mut e = descend(ampere, &gemm, &a100_gemm);
    // BF16 runs on the same tensor cores at the same rate as FP16.
    let fp16 = e.gemm.peak_fraction.fp16;
    (e.gemm.peak_fraction.bf16, e.gemm.peak_fraction.tf32) = (fp16, fp16);
    e.gemm.peak_fraction.fp32 = fp16;
    let a100_fa = |e: &ArchEfficiency| -> Vec<Comparison> {
        compare_flash_attention(&fa_csv, &db, &seconds(e))
            .expect("attention table")
            .into_iter()
            .filter(|c| c.column == "A100")
            .collect()
    };
    let e = descend(&e, &attention_params()[..4], &a100_fa);
    print_family(&e);
    print("GEMM (ampere, gemm_tflops.csv)", &a100_gemm(&e));
    print("FlashAttention-2 fwd+bwd (ampere)", &a100_fa(&e));
}
