//! `fleetsim workload`: the per-stage report, SimAI export and import, and clear errors for
//! malformed SimAI files.

mod common;

use std::fs;
use std::path::PathBuf;

use common::{QUICKSTART, fleetsim, json_ok, one_clear_error, scratch, stdout_ok};

#[test]
fn text_report_lists_every_stage() {
    let text = stdout_ok(fleetsim().args(["workload", QUICKSTART]));
    for want in [
        "stage 0",
        "stage 1",
        "(p-1)/(m*v) = 0.1250",
        "reduce-scatter  dp-cp",
        "1F1B",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
}

#[test]
fn json_report_has_flops_bytes_and_bubble() {
    let v = json_ok(fleetsim().args([
        "workload",
        QUICKSTART,
        "--json",
        "--set",
        "parallel.vp=2",
        "--set",
        "parallel.global_batch=256",
    ]));
    assert_eq!(v["parallel"]["vp"], 2);
    assert_eq!(v["stages"].as_array().map(Vec::len), Some(2));
    // 16 micro-batches per replica, PP 2, VP 2.
    let analytical = v["bubble_fraction"]["analytical"].as_f64().expect("bubble");
    assert!((analytical - 1.0 / 32.0).abs() < 1e-12);
    assert!(v["bubble_fraction"]["roofline_no_communication"]["bubble_fraction"].is_number());
    assert!(v["model_flops_per_iteration"].as_f64().expect("flops") > 1e16);
    let stage = &v["stages"][0];
    assert!(stage["ops"]["compute"].as_u64().expect("ops") > 1000);
    assert!(
        stage["collectives"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    );
}

/// Each stage reports what its host takes to issue the iteration beside its kernels: eager
/// PyTorch costs the x86 host something, a whole-iteration CUDA graph nothing.
#[test]
fn each_stage_reports_its_host_issue_time_beside_its_kernels() {
    let text = stdout_ok(fleetsim().args(["workload", QUICKSTART]));
    assert!(
        text.contains("s to issue on x86 beside"),
        "no host line in:\n{text}"
    );
    let host = |graphs: &str| {
        let v = json_ok(fleetsim().args([
            "workload",
            QUICKSTART,
            "--json",
            "--set",
            &format!("training.cuda_graphs={graphs}"),
        ]));
        let h = v["stages"][0]["host"].clone();
        assert_eq!(h["cpu"], "x86");
        (
            h["issue_s"].as_f64().expect("issue_s"),
            h["kernels_s"].as_f64().expect("kernels_s"),
        )
    };
    let (eager, kernels) = host("none");
    assert!(
        eager > 0.0 && kernels > eager,
        "{eager} s to issue, {kernels} s of kernels"
    );
    let (graphed, same_kernels) = host("full-iteration");
    assert_eq!(graphed, 0.0);
    assert_eq!(same_kernels, kernels);
}

#[test]
fn simai_export_imports_back() {
    let file = scratch("simai-export").join("quickstart.simai.txt");
    stdout_ok(
        fleetsim()
            .args(["workload", QUICKSTART, "--export", "simai", "--out"])
            .arg(&file),
    );
    let text = fs::read_to_string(&file).expect("export");
    assert!(text.starts_with("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4"));
    let v = json_ok(
        fleetsim()
            .args(["workload", QUICKSTART, "--json", "--workload-file"])
            .arg(&file),
    );
    assert_eq!(v["parallel"]["tp"], 4);
    assert_eq!(v["parallel"]["pp"], 2);
    assert_eq!(v["stages"][0]["micro_batches"], 8);
}

#[test]
fn shipped_simai_experiment_runs_its_file() {
    let v = json_ok(fleetsim().args([
        "workload",
        "configs/experiments/simai-gpt3-175b-h100-1024.toml",
        "--json",
    ]));
    assert!(v["source"].as_str().is_some_and(|s| s.ends_with(".txt")));
    assert_eq!(v["stages"][0]["micro_batches"], 32);
}

/// A SimAI workload gives kernel times, not FLOPs or tokens: the run says n/a, and
/// summary.json holds null, never a made-up 0.
#[test]
fn a_simai_run_reports_what_it_cannot_know_as_n_a() {
    let out = scratch("simai-run");
    let run = fleetsim()
        .args([
            "run",
            "configs/experiments/simai-gpt3-175b-h100-1024.toml",
            "--quiet",
            "--set",
            "network.model=analytical",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run fleetsim");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "{stderr}");
    assert!(stdout.contains("n/a TFLOP/s per GPU, MFU n/a"), "{stdout}");
    assert!(
        stderr.contains("warning: TFLOP/s per GPU and MFU are n/a"),
        "{stderr}"
    );
    let summary = common::summary(&out);
    for key in ["tflops_per_gpu", "mfu", "tokens_per_s", "samples_per_s"] {
        assert!(summary[key].is_null(), "{key}: {summary}");
    }
    assert!(
        summary["iteration_time_s"]
            .as_f64()
            .is_some_and(|t| t > 0.0)
    );
}

/// An experiment that runs an imported workload needs no `[model]`: `check` and `run` work
/// and say n/a for what only a model knows, the result is the one the same experiment gives
/// with a model, and `plan`, which compiles the model, refuses in one clear line.
#[test]
fn a_model_less_simai_experiment_runs_like_one_with_a_model() {
    let model_less = "tests/fixtures/model-less/simai-allreduce-16.toml";
    let check = json_ok(fleetsim().args(["check", model_less, "--json"]));
    for key in ["model", "memory"] {
        assert!(check[key].is_null(), "{key}: {check}");
    }
    assert!(check["batch"]["tokens_per_iteration"].is_null(), "{check}");
    let text = stdout_ok(fleetsim().args(["check", model_less]));
    assert!(text.contains("model       n/a"), "{text}");
    let digest = |experiment: &str, dir: &str| {
        let out = scratch(dir);
        stdout_ok(
            fleetsim()
                .args(["run", experiment, "--quiet", "--out"])
                .arg(&out),
        );
        let summary = common::summary(&out);
        for key in ["tflops_per_gpu", "mfu", "tokens_per_s", "samples_per_s"] {
            assert!(summary[key].is_null(), "{experiment}: {key}: {summary}");
        }
        summary["result_digest"]
            .as_str()
            .expect("digest")
            .to_string()
    };
    assert_eq!(
        digest(model_less, "model-less-run"),
        digest(
            "tests/fixtures/model-less/with-model.toml",
            "with-model-run"
        )
    );
    let stderr = one_clear_error(fleetsim().args(["plan", model_less]), "plan");
    assert!(stderr.contains("needs a model"), "{stderr}");
    assert!(stderr.contains("simai-allreduce-16.toml"), "{stderr}");
}

fn bad_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .expect("fixtures")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

/// Every malformed SimAI file, given to a real command, is one clear line naming the file.
#[test]
fn malformed_simai_files_fail_with_one_clear_line() {
    let mut seen = 0;
    for dir in [
        "tests/fixtures/bad-simai",
        "tests/fixtures/bad-simai-import",
    ] {
        for path in bad_files(dir) {
            seen += 1;
            common::bad_workload_file(QUICKSTART, &path);
        }
    }
    assert!(seen >= 18, "only {seen} bad SimAI fixtures");
}

#[test]
fn a_missing_workload_file_is_one_clear_error() {
    let stderr = one_clear_error(
        fleetsim().args([
            "workload",
            QUICKSTART,
            "--workload-file",
            "does/not/exist.txt",
        ]),
        "missing workload file",
    );
    assert!(stderr.contains("does/not/exist.txt"), "{stderr}");
}
