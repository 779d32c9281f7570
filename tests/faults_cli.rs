//! `[[faults]]` through the binary, as a user adds them: a straggler costs what the critical
//! path says, a link down reroutes at the closed-form price or stops the job with one clear
//! message, parts that go down mid-iteration stop it, jitter stays deterministic.

mod common;

use std::path::Path;

use common::{csv_table, fleetsim, one_clear_error, scratch, stdout_ok};

const STRAGGLER: &str = "tests/fixtures/faults/straggler.toml";
const TWO_PATHS: &str = "tests/fixtures/faults/two-paths.toml";
const SPINE_LEAF: &str = "tests/fixtures/faults/spine-leaf.toml";

/// A column of a CSV file by its header name.
fn column(path: &Path, name: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(path).expect("read CSV");
    let (header, rows) = csv_table(&text);
    let i = header.iter().position(|h| h == name).expect("column");
    rows.iter().map(|r| r[i].parse().expect("number")).collect()
}

/// `fleetsim run` of the straggler experiment with `sets`: ranks.csv's compute and finish
/// columns, and the digest.
fn run_straggler(name: &str, sets: &[&str]) -> (Vec<f64>, Vec<f64>, String) {
    let out = scratch(name);
    let mut cmd = fleetsim();
    cmd.args(["run", STRAGGLER, "--quiet", "--out"]).arg(&out);
    for s in sets {
        cmd.args(["--set", s]);
    }
    stdout_ok(&mut cmd);
    let ranks = out.join("ranks.csv");
    (
        column(&ranks, "compute_s"),
        column(&ranks, "finish_s"),
        digest_in(&out),
    )
}

/// The result digest of the run that wrote `out`.
fn digest_in(out: &Path) -> String {
    let text = std::fs::read_to_string(out.join("summary.json")).expect("summary.json");
    let summary: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    summary["result_digest"]
        .as_str()
        .expect("result_digest")
        .to_string()
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::MIN, f64::max)
}

/// Rank 3 of a DP group of 8 at 0.8× speed: its kernels take 1.25× as long, and with the
/// gradients reduced after the backward every one of them is on the critical path, so the
/// iteration grows by a quarter of that rank's compute time, to the nanosecond (the CSV's
/// precision); the other ranks wait for it in the all-reduce.
#[test]
fn a_straggler_slows_the_iteration_by_its_extra_kernel_time() {
    let (compute, finish, digest) = run_straggler("fault-none", &[]);
    let slow = r#"faults=[{kind="gpu-slow",gpu=3,factor=0.8,scope="all"}]"#;
    let (slow_compute, slow_finish, slow_digest) = run_straggler("fault-slow", &[slow]);
    assert!((slow_compute[3] / compute[3] - 1.25).abs() < 1e-6);
    for r in [0, 1, 2, 4, 5, 6, 7] {
        assert!((slow_compute[r] - compute[r]).abs() < 1e-9, "rank {r}");
    }
    let grown = max(&slow_finish) - max(&finish);
    let critical_path = 0.25 * compute[3];
    assert!(
        (grown - critical_path).abs() < 2e-9,
        "grew {grown} s, the critical path says {critical_path} s"
    );
    assert_ne!(digest, slow_digest);

    // The default scope slows only clock-bound kernels (a power or thermal cap lowers the SM
    // clock, not HBM's): more than nothing, less than every kernel.
    let clock = r#"faults=[{kind="gpu-slow",gpu=3,factor=0.8}]"#;
    let (clock_compute, _, _) = run_straggler("fault-clock", &[clock]);
    assert!(clock_compute[3] > compute[3] * 1.05, "{clock_compute:?}");
    assert!(clock_compute[3] < slow_compute[3], "{clock_compute:?}");
}

#[test]
fn kernel_jitter_is_deterministic_and_costs_the_wait_for_the_slowest() {
    let (_, finish, digest) = run_straggler("jitter-none", &[]);
    let jitter = r#"faults=[{kind="kernel-jitter",sigma=0.05,seed=3}]"#;
    let (compute_a, finish_a, digest_a) = run_straggler("jitter-a", &[jitter]);
    let (_, _, digest_b) = run_straggler("jitter-b", &[jitter]);
    let (_, _, digest_two_workers) = run_straggler(
        "jitter-workers",
        &[jitter, "engine.workers=2", "engine.threads=1"],
    );
    let reseeded = r#"faults=[{kind="kernel-jitter",sigma=0.05,seed=4}]"#;
    let (_, _, digest_reseeded) = run_straggler("jitter-seed", &[reseeded]);
    assert_eq!(digest_a, digest_b);
    assert_eq!(digest_a, digest_two_workers);
    assert_ne!(digest_a, digest_reseeded);
    assert_ne!(digest_a, digest);
    // Each kernel keeps its mean, so a rank's compute moves little; the all-reduce waits for
    // the slowest rank, so the iteration ends no sooner than that rank's compute.
    assert!(max(&finish_a) >= max(&compute_a));
    assert!((max(&finish_a) / max(&finish) - 1.0).abs() < 0.05);
}

/// The all-reduce time of 256 MiB between the two GPUs of `two-paths.toml`, microseconds.
fn all_reduce_us(faults: Option<&str>) -> f64 {
    all_reduce_on_us(TWO_PATHS, "2", "256M", faults)
}

/// The all-reduce time of `size` over `gpus` GPUs of `experiment`, microseconds.
fn all_reduce_on_us(experiment: &str, gpus: &str, size: &str, faults: Option<&str>) -> f64 {
    let mut cmd = fleetsim();
    cmd.args([
        "collective",
        experiment,
        "--op",
        "all-reduce",
        "--gpus",
        gpus,
        "--sizes",
        size,
        "--csv",
    ]);
    if let Some(f) = faults {
        cmd.args(["--set", f]);
    }
    let (header, rows) = csv_table(&stdout_ok(&mut cmd));
    let i = header
        .iter()
        .position(|h| h == "time_us")
        .expect("a time_us column");
    rows[0][i].parse().expect("a time")
}

/// The one clear error of an all-reduce of `size` on `two-paths.toml` with `faults`.
fn all_reduce_error(size: &str, faults: &str) -> String {
    one_clear_error(
        fleetsim().args([
            "collective",
            TWO_PATHS,
            "--op",
            "all-reduce",
            "--gpus",
            "2",
            "--sizes",
            size,
            "--set",
            faults,
        ]),
        faults,
    )
}

/// The ring's short path runs at 400 Gb/s; with its NIC cable down the fabric routes over
/// the long one at 200 Gb/s. A 2-GPU all-reduce of S bytes moves 2(n−1)/n·S = S over the
/// bottleneck, so it slows by S·(1/B_long − 1/B_short) (5.37 ms) and takes twice as long.
#[test]
fn a_link_down_reroutes_at_the_closed_form_price_or_stops_the_job() {
    let up = all_reduce_us(None);
    let down = r#"faults=[{kind="link-down",between=["nicA","fast"]}]"#;
    let rerouted = all_reduce_us(Some(down));
    let bytes = 256.0 * 1024.0 * 1024.0;
    let closed_form_us = bytes * (1.0 / 25e9 - 1.0 / 50e9) * 1e6;
    let slowed = rerouted - up;
    assert!(
        (slowed / closed_form_us - 1.0).abs() < 0.05,
        "slowed {slowed} us, closed form {closed_form_us} us"
    );
    assert!((rerouted / up - 2.0).abs() < 0.02, "{up} -> {rerouted}");

    // A degraded cable on the short path: half its rate, the same price.
    let degraded = r#"faults=[{kind="link-degraded",between=["fast","nicB"],factor=0.5}]"#;
    let half = all_reduce_us(Some(degraded));
    assert!((half / up - 2.0).abs() < 0.02, "{up} -> {half}");

    // Both paths cut: the job stops at its first transfer with the fault named.
    let both = r#"faults=[{kind="link-down",between=["nicA","fast"]},{kind="link-down",link=10}]"#;
    let stderr = all_reduce_error("1M", both);
    assert!(
        stderr.contains("no route from gpu0 to gpu1")
            && stderr.contains("links that are down ([[faults]]); the job stops"),
        "{stderr}"
    );
    // Said once: the message held its cause and printed it again after a colon.
    assert_eq!(stderr.matches("no route from").count(), 1, "{stderr}");
}

/// The analytical network times a transfer by its own path: a link down only moves
/// routes, and the traffic the others take over costs nothing. The run says so.
#[test]
fn a_link_down_under_the_analytical_model_is_named_as_costing_nothing() {
    let out = fleetsim()
        .args(["run", "tests/fixtures/faults/spine-leaf.toml", "--quiet"])
        .args(["--set", "network.model=analytical"])
        .args([
            "--set",
            r#"faults=[{kind="link-down",between=["leaf0","spine0"]}]"#,
        ])
        .arg("--out")
        .arg(scratch("faults-analytical-link-down"))
        .output()
        .expect("run fleetsim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: faults[0]: with network.model = \"analytical\" a link that is down only moves routes"),
        "{stderr}"
    );
}

#[test]
fn a_host_that_goes_down_mid_iteration_stops_the_job_and_one_after_it_does_not() {
    let during = r#"faults=[{kind="host-down",host=1,at_s=0.01}]"#;
    let stderr = one_clear_error(
        fleetsim().args([
            "run",
            STRAGGLER,
            "--quiet",
            "--set",
            "cluster.gpus_per_host=4",
            "--set",
            during,
        ]),
        "host down during the iteration",
    );
    assert!(
        stderr.contains("host 1 (ranks 4-7) went down at 0.010000 s (faults[0])"),
        "{stderr}"
    );
    let after = r#"faults=[{kind="host-down",host=1,at_s=5.0},{kind="nic-down",nic=3,at_s=5.0}]"#;
    let (_, _, digest) = run_straggler("host-down-after", &["cluster.gpus_per_host=4", after]);
    let (_, _, plain) = run_straggler("host-down-none", &["cluster.gpus_per_host=4"]);
    assert_eq!(digest, plain);
}

/// A cable that degrades mid-collective: what was sent before T went at the full rate, the
/// rest at half, so a bandwidth-bound all-reduce of time t ends at T + 2·(t − T).
#[test]
fn a_link_degraded_mid_collective_slows_what_is_left_of_it() {
    let up = all_reduce_us(None);
    let at_us = 2000.0;
    let degraded =
        r#"faults=[{kind="link-degraded",between=["fast","nicB"],factor=0.5,at_s=0.002}]"#;
    let slowed = all_reduce_us(Some(degraded));
    let closed_form = at_us + 2.0 * (up - at_us);
    assert!(
        (slowed / closed_form - 1.0).abs() < 0.02,
        "{slowed} us, closed form {closed_form} us"
    );
    // After the collective ended, a fault changes nothing.
    let late = r#"faults=[{kind="link-degraded",between=["fast","nicB"],factor=0.5,at_s=1.0}]"#;
    assert_eq!(all_reduce_us(Some(late)), up);
}

/// A cable that goes down mid-collective where no equal-cost hop is left (the graph's
/// long path is not one: a fabric's ECMP groups shrink at once, its routes are not
/// recomputed within an iteration) stops the job naming the cable and the time.
#[test]
fn a_link_down_mid_collective_without_another_equal_cost_path_stops_the_job() {
    let down = r#"faults=[{kind="link-down",between=["nicA","fast"],at_s=0.002}]"#;
    let stderr = all_reduce_error("256M", down);
    assert!(
        stderr.contains("has no path left (the cable nic0 - leaf0 (faults[0]) down at 0.002000 s)"),
        "{stderr}"
    );
}

/// On a spine-leaf fabric with two spines, a leaf uplink that goes down reroutes over the
/// other spine: the sooner it fails, the closer the time comes to the cable down from the
/// start; failing after the end changes nothing. (Segments relayed by PXN once skipped the
/// reroute and crossed the dead cable: a failure at 8 ms then made the collective faster.)
#[test]
fn a_leaf_uplink_down_mid_collective_reroutes_over_the_other_spine() {
    let exp = SPINE_LEAF;
    let run = |f: Option<&str>| all_reduce_on_us(exp, "16", "512M", f);
    let up = run(None);
    let from_start = run(Some(
        r#"faults=[{kind="link-down",between=["leaf0","spine0"]}]"#,
    ));
    let at_once = run(Some(
        r#"faults=[{kind="link-down",between=["leaf0","spine0"],at_s=1e-9}]"#,
    ));
    let late = run(Some(
        r#"faults=[{kind="link-down",between=["leaf0","spine0"],at_s=1.0}]"#,
    ));
    assert!(from_start > up * 1.2, "{up} -> {from_start}");
    assert!(
        (at_once / from_start - 1.0).abs() < 0.03,
        "{at_once} vs {from_start}"
    );
    assert_eq!(late, up);
    // The later it fails, the less of the collective is left to cross one spine.
    let early = run(Some(
        r#"faults=[{kind="link-down",between=["leaf0","spine0"],at_s=0.002}]"#,
    ));
    let midway = run(Some(
        r#"faults=[{kind="link-down",between=["leaf0","spine0"],at_s=0.008}]"#,
    ));
    assert!(
        from_start >= early && early > midway && midway > up,
        "{from_start} {early} {midway} {up}"
    );
}

/// Rerouted segments leave their carried route, so the engine's promises fall back to each
/// node's distance to the cut while link faults are timed: the same digest on any number
/// of workers.
#[test]
fn link_faults_mid_iteration_give_one_digest_on_any_number_of_workers() {
    let faults = r#"faults=[{kind="link-down",between=["leaf0","spine0"],at_s=0.01},{kind="link-degraded",between=["leaf1","spine1"],factor=0.5,at_s=0.02}]"#;
    let digest = |workers: &str, name: &str| {
        let out = scratch(name);
        let mut cmd = fleetsim();
        cmd.args([
            "run",
            SPINE_LEAF,
            "--quiet",
            "--threads",
            "1",
            "--workers",
            workers,
        ])
        .args(["--set", faults, "--out"])
        .arg(&out);
        stdout_ok(&mut cmd);
        digest_in(&out)
    };
    let one = digest("1", "faults-one-worker");
    assert_eq!(one, digest("3", "faults-three-workers"));
}

#[test]
fn check_lists_each_fault_in_words() {
    let faults = r#"faults=[{kind="link-down",between=["leaf0","spine0"],at_s=0.01},{kind="gpu-slow",gpu=3,factor=0.8}]"#;
    let text = stdout_ok(fleetsim().args(["check", SPINE_LEAF, "--set", faults]));
    assert!(
        text.contains("faults[0]   link-down between leaf0 and spine0 from 0.010000 s"),
        "{text}"
    );
    assert!(
        text.contains(
            "faults[1]   gpu-slow GPU 3 to 0.8 of its speed (clock-bound kernels) from the start"
        ),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout_ok(
        fleetsim().args(["check", SPINE_LEAF, "--json", "--set", faults]),
    ))
    .expect("JSON");
    assert_eq!(json["faults"].as_array().map(Vec::len), Some(2));
}
