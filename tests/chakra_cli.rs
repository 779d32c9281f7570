//! Chakra execution traces: a real trace (ASTRA-sim's all-reduce microbenchmark) runs as the
//! collective fleetsim itself runs, a compiled workload exported to Chakra and imported back
//! gives the same iteration, and every malformed trace is one clear line.

mod common;

use std::fs;
use std::path::PathBuf;

use common::{QUICKSTART, SMALL, fleetsim, json_ok, one_clear_error, scratch, stdout_ok};

const EXPERIMENT: &str = "tests/fixtures/chakra/experiment.toml";

/// `fleetsim run`'s summary.json for `args`.
fn run_summary(args: &[&str], dir: &str) -> serde_json::Value {
    let out = scratch(dir);
    stdout_ok(
        fleetsim()
            .arg("run")
            .args(args)
            .args(["--quiet", "--out"])
            .arg(&out),
    );
    common::summary(&out)
}

fn iteration_s(summary: &serde_json::Value) -> f64 {
    summary["iteration_time_s"].as_f64().expect("iteration")
}

/// ASTRA-sim's 1 MiB all-reduce traces take the time `fleetsim collective` gives the same
/// all-reduce on the same 16 GPUs, within 1%.
#[test]
fn a_real_all_reduce_trace_runs_like_fleetsims_own_all_reduce() {
    let workload = json_ok(fleetsim().args(["workload", EXPERIMENT, "--json"]));
    assert_eq!(workload["stages"][0]["ops"]["collective"], 1, "{workload}");
    let summary = run_summary(&[EXPERIMENT], "chakra-all-reduce");
    let csv = stdout_ok(fleetsim().args([
        "collective",
        EXPERIMENT,
        "--op",
        "all-reduce",
        "--gpus",
        "16",
        "--sizes",
        "1M",
        "--csv",
    ]));
    let row: Vec<&str> = csv.lines().nth(1).expect("a row").split(',').collect();
    let collective_s = row[3].parse::<f64>().expect("time_us") * 1e-6;
    let imported_s = iteration_s(&summary);
    assert!(
        (imported_s / collective_s - 1.0).abs() < 0.01,
        "trace {imported_s} s, fleetsim collective {collective_s} s"
    );
}

/// Exports the quickstart cut down to 32 GPUs as `quickstart.<rank>.et` in a fresh folder.
fn export_small(name: &str) -> PathBuf {
    let dir = scratch(name);
    stdout_ok(
        fleetsim()
            .args(["workload", QUICKSTART, "--export", "chakra", "--out"])
            .arg(dir.join("quickstart"))
            .args(SMALL),
    );
    dir
}

/// The quickstart cut down to 32 GPUs (TP 4, PP 2, DP 4), exported to Chakra and run from
/// the traces: the same iteration within 1% (in fact the same result digest) as the compiled
/// run without host issue costs. A trace holds the GPU's ops with their times, and nothing
/// issues an imported op (`sim_models::compute::host`), so the compiled run it matches is the one
/// whose every op is in a CUDA graph.
#[test]
fn an_exported_workload_imports_back_with_the_same_iteration() {
    let dir = export_small("chakra-export");
    let ranks = (0..32)
        .filter(|r| dir.join(format!("quickstart.{r}.et")).is_file())
        .count();
    assert_eq!(ranks, 32);
    let groups: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("comm_groups.json")).expect("groups"))
            .expect("JSON");
    assert!(
        groups.as_object().is_some_and(|g| !g.is_empty()),
        "{groups}"
    );

    let mut compiled: Vec<&str> = vec![QUICKSTART];
    compiled.extend(SMALL);
    compiled.extend(["--set", "training.cuda_graphs=\"full-iteration\""]);
    let compiled = run_summary(&compiled, "chakra-compiled");
    let set = format!("workload_file=\"{}\"", dir.display());
    let mut imported: Vec<&str> = vec![QUICKSTART];
    imported.extend(SMALL);
    imported.extend(["--set", &set]);
    let imported = run_summary(&imported, "chakra-imported");
    let (a, b) = (iteration_s(&compiled), iteration_s(&imported));
    assert!((a / b - 1.0).abs() < 0.01, "compiled {a} s, imported {b} s");
    assert_eq!(compiled["result_digest"], imported["result_digest"]);
}

fn bad_traces() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir("tests/fixtures/bad-chakra")
        .expect("fixtures")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|e| e == "et"))
        .collect();
    paths.sort();
    paths
}

/// Every malformed trace, given to a real command, is one clear line naming the file.
#[test]
fn malformed_chakra_traces_fail_with_one_clear_line() {
    let paths = bad_traces();
    assert!(paths.len() >= 10, "{paths:?}");
    for path in paths {
        common::bad_workload_file(EXPERIMENT, &path);
    }
}

/// A trace exported for one layout refuses another, naming both.
#[test]
fn a_trace_for_another_layout_is_refused() {
    let dir = export_small("chakra-layout");
    let set = format!("workload_file=\"{}\"", dir.display());
    let stderr = one_clear_error(
        fleetsim().args(["check", QUICKSTART]).args(SMALL).args([
            "--set",
            "parallel.tp=2",
            "--set",
            &set,
        ]),
        "layout",
    );
    assert!(stderr.contains("was exported from the layout"), "{stderr}");
}

/// A path that is not there names itself and what a workload file may be, whether it looks
/// like a trace or not.
#[test]
fn a_workload_file_that_is_not_there_is_one_clear_line() {
    for path in ["no-such-trace.et", "no-such-workload", "no-such-folder/"] {
        let stderr = one_clear_error(
            fleetsim().args(["workload", EXPERIMENT, "--workload-file", path]),
            path,
        );
        assert!(stderr.contains("does not exist"), "{stderr}");
    }
}

/// `--out` of a Chakra export is a prefix: a folder or an existing file is refused before
/// anything is written beside it.
#[test]
fn a_chakra_export_refuses_a_folder_or_an_existing_file_as_its_prefix() {
    let dir = scratch("chakra-bad-prefix");
    let file = dir.join("taken");
    fs::write(&file, "x").expect("write");
    let folder = format!("{}/", dir.display());
    for (out, why) in [
        (folder.as_str(), "is a folder"),
        (file.to_str().expect("utf-8"), "is an existing file"),
    ] {
        let stderr = one_clear_error(
            fleetsim()
                .args(["workload", QUICKSTART, "--export", "chakra", "--out", out])
                .args(SMALL),
            why,
        );
        assert!(stderr.contains("give a prefix such as"), "{stderr}");
    }
    let mut left: Vec<_> = fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["taken"], "nothing written");
}
