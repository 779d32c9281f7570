//! `fleetsim plan` and `engine.planner = "hetero"`: the plan, its gain over the naive
//! placement, and a run of the plan.

mod common;

use common::{fleetsim, json_ok, scratch, stdout_ok, summary};

const HETERO: &str = "configs/experiments/hetero-a100-h100-128.toml";
const FAST: [&str; 4] = [
    "--set",
    "network.model=analytical",
    "--set",
    "parallel.global_batch=16",
];

#[test]
fn plan_finds_a_faster_placement_and_run_simulates_it() {
    let out = scratch("plan");
    let plan = json_ok(
        fleetsim()
            .args(["plan", HETERO, "--json", "--out"])
            .arg(&out)
            .args(FAST),
    );
    let gain = plan["gain"].as_f64().expect("gain");
    assert!(
        gain > 0.2,
        "A100 + H100 placed by speed beats rank order: {plan}"
    );
    assert!(plan["placement_gain"].as_f64().expect("placement gain") > 0.0);
    assert!(out.join("plan.txt").is_file() && out.join("plan.json").is_file());
    let planned = plan["plan_iteration_time_s"].as_f64().expect("plan time");

    // The plan's --set lines reproduce it; the planner inside `run` picks the same.
    let sets: Vec<String> = plan["sets"]
        .as_array()
        .expect("sets")
        .iter()
        .map(|s| s.as_str().expect("set").to_string())
        .collect();
    let by_sets = scratch("plan-sets");
    let mut cmd = fleetsim();
    cmd.args(["run", HETERO, "--quiet", "--out"])
        .arg(&by_sets)
        .args(FAST);
    for s in &sets {
        cmd.args(["--set", s]);
    }
    stdout_ok(&mut cmd);
    let by_planner = scratch("plan-run");
    stdout_ok(
        fleetsim()
            .args(["run", HETERO, "--quiet", "--out"])
            .arg(&by_planner)
            .args(FAST)
            .args(["--set", "engine.planner=\"hetero\""]),
    );
    let a = summary(&by_sets);
    let b = summary(&by_planner);
    assert_eq!(a["result_digest"], b["result_digest"]);
    // A sweep point under the planner is planned as `run` plans it.
    let swept = stdout_ok(
        fleetsim()
            .args(["sweep", HETERO, "--out"])
            .arg(scratch("plan-sweep"))
            .args(["--set", "network.model=analytical"])
            .args(["--set", "engine.planner=\"hetero\""])
            .args(["--vary", "parallel.global_batch=16"]),
    );
    let digest = b["result_digest"].as_str().expect("digest");
    assert!(swept.contains(&format!("digest {digest}")), "{swept}");
    let t = a["iteration_time_s"].as_f64().expect("time");
    assert!((t - planned).abs() < 1e-9 * planned, "{t} vs {planned}");
}

#[test]
fn plan_on_a_homogeneous_cluster_never_loses() {
    let plan = json_ok(fleetsim().args([
        "plan",
        "configs/experiments/quickstart.toml",
        "--json",
        "--set",
        "network.model=analytical",
    ]));
    assert!(plan["gain"].as_f64().expect("gain") >= 0.0, "{plan}");
    assert_eq!(plan["placement_gain"].as_f64(), Some(0.0), "{plan}");
}
