//! The compute model against public measurements (`sim/tests/calibration/`, copied from
//! `../shared/calibration/` with sources). The thresholds are issue 3's acceptance criteria;
//! `cargo run --release -p sim --example fit_compute` prints every residual.

use std::path::PathBuf;

use sim::compute::calibration::{
    Comparison, compare_flash_attention, compare_gemm, layer_seconds, nccl_busbw,
};
use sim::compute::{ComputeModel, Interference};
use sim::experiment::Experiment;
use sim::gpu::GpuDatabase;
use sim::workload::{CollectiveOp, compile};

fn calibration(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/calibration")
        .join(file);
    std::fs::read_to_string(&path).expect("calibration file")
}

fn model() -> ComputeModel {
    ComputeModel::embedded().expect("embedded compute model")
}

fn table(cases: &[Comparison]) -> String {
    cases
        .iter()
        .map(|c| {
            format!(
                "{:10} {:24} measured {:8.1} predicted {:8.1} error {:+6.1}%\n",
                c.column,
                c.case,
                c.measured,
                c.predicted,
                100.0 * c.error()
            )
        })
        .collect()
}

#[test]
fn gemm_throughput_within_10_percent_for_80_percent_of_shapes_per_gpu() {
    let m = model();
    let db = GpuDatabase::embedded().expect("GPU database");
    let cases = compare_gemm(&calibration("gemm_tflops.csv"), &db, &|k, g| {
        m.kernel_time(k, g).seconds()
    })
    .expect("GEMM table");
    let mut columns: Vec<&str> = cases.iter().map(|c| c.column.as_str()).collect();
    columns.sort_unstable();
    columns.dedup();
    assert_eq!(columns, ["a100_fp16", "h100_fp8", "h200_fp8"]);
    for column in columns {
        let of: Vec<&Comparison> = cases.iter().filter(|c| c.column == column).collect();
        let good = of.iter().filter(|c| c.error().abs() <= 0.10).count();
        assert!(
            good * 10 >= of.len() * 8,
            "{column}: only {good} of {} shapes within 10%:\n{}",
            of.len(),
            table(&cases)
        );
    }
}

#[test]
fn flash_attention_within_10_percent_from_1k_tokens() {
    let m = model();
    let db = GpuDatabase::embedded().expect("GPU database");
    let cases =
        compare_flash_attention(&calibration("flash_attention_tflops.csv"), &db, &|k, g| {
            m.kernel_time(k, g).seconds()
        })
        .expect("attention table");
    assert_eq!(cases.len(), 47);
    let long: Vec<&Comparison> = cases
        .iter()
        .filter(|c| !c.case.ends_with("seq 512"))
        .collect();
    assert_eq!(long.len(), 40);
    for c in long {
        assert!(c.error().abs() <= 0.10, "{c:?}\n{}", table(&cases));
    }
}

/// Korthikanti et al. 2022 Table 4: one layer of the 22B GPT, TP 8 on A100, per variant.
#[test]
fn layer_of_22b_gpt_within_10_percent_for_every_variant() {
    let m = model();
    let nccl = calibration("nccl_allreduce_1node.csv");
    let experiment =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/calibration/korthikanti-22b.toml");
    let measured = calibration("layer_times_22b.csv");
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    for line in measured.lines().skip(1).filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(',').collect();
        let (recompute, sp) = match f[0] {
            "no_recompute" => ("none", false),
            "sequence_parallel" => ("none", true),
            "full_recompute" => ("full", false),
            "selective_recompute" => ("selective", false),
            "selective_recompute+sequence_parallel" => ("selective", true),
            other => panic!("unknown variant {other}"),
        };
        let sets = [
            format!("training.recompute=\"{recompute}\""),
            format!("parallel.sequence_parallel={sp}"),
        ];
        let exp = Experiment::load(&experiment, &sets).expect("22B experiment");
        let gpu = exp.stage_gpus()[0].clone();
        let workload = compile(&exp).expect("compiles");
        let tp = 8.0;
        // TP communication from nccl-tests on the same 8-GPU A100 node: all-reduce moves
        // 2(n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n, at the bus bandwidth
        // nccl-tests measured for that buffer size.
        let collective = |op: CollectiveOp, bytes: u64| {
            let b = bytes as f64;
            let factor = match op {
                CollectiveOp::AllReduce => 2.0 * (tp - 1.0) / tp,
                _ => (tp - 1.0) / tp,
            };
            b * factor / nccl_busbw(&nccl, "a100_8gpu_busbw_gbs", b).expect("busbw")
        };
        let interference = Interference::from_config(&exp.loaded.config.compute);
        let (fwd, bwd) = layer_seconds(
            &workload,
            &|k| m.kernel_time(k, &gpu).seconds(),
            &collective,
            &interference,
        )
        .expect("layer times");
        let want: Vec<f64> = f[1..4]
            .iter()
            .map(|x| x.parse::<f64>().expect("ms") * 1e-3)
            .collect();
        let got = [fwd, bwd, fwd + bwd];
        for ((name, g), w) in ["forward", "backward", "total"].iter().zip(got).zip(&want) {
            let e = (g - w) / w;
            report.push_str(&format!(
                "{:40} {name:8} measured {:6.2} ms predicted {:6.2} ms error {:+5.1}%\n",
                f[0],
                w * 1e3,
                g * 1e3,
                100.0 * e
            ));
            worst = worst.max(e.abs());
        }
    }
    println!("{report}");
    assert!(
        worst <= 0.10,
        "a 22B layer time is off by more than 10%:\n{report}"
    );
}
