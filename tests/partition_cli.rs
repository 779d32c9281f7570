//! Partitioning strategies: every one gives the same `result_digest` (on the quickstart and on
//! a 1,024-GPU cluster), and `fleetsim partition` compares them in a table, a CSV and a plot.

mod common;

use common::{QUICKSTART, SMALL, fleetsim, one_clear_error, scratch, stdout_ok, summary};

/// Every name `engine.partition` takes.
const STRATEGIES: [&str; 11] = [
    "by-host",
    "round-robin",
    "linear",
    "random",
    "by-segment",
    "by-rack",
    "by-pod",
    "by-rail",
    "latency-aware",
    "metis",
    "auto",
];

/// Runs with every strategy, at its natural partition count and packed into each of `parts`
/// (`engine.partitions`), split as `split` says; every digest must be the first one's.
fn every_strategy_agrees(name: &str, parts: &[&str], split: &[&str], sets: &[&str]) {
    let dir = scratch(name);
    let mut digests = Vec::new();
    for strategy in STRATEGIES {
        for &parts in parts {
            let out = dir.join(format!("{strategy}-{parts}"));
            stdout_ok(
                fleetsim()
                    .args(["run", QUICKSTART, "--quiet"])
                    .args(split)
                    .args(["--partition", strategy, "--set"])
                    .arg(format!("engine.partitions={parts}"))
                    .arg("--out")
                    .arg(&out)
                    .args(sets),
            );
            let s = summary(&out);
            if parts == "5" {
                assert!(s["engine"]["partitions"].as_u64().expect("partitions") <= 5);
            }
            digests.push((format!("{strategy} k={parts}"), s["result_digest"].clone()));
        }
    }
    for (which, d) in &digests {
        assert_eq!(d, &digests[0].1, "{which} differs from {}", digests[0].0);
    }
}

#[test]
fn every_strategy_gives_the_same_digest_on_the_quickstart() {
    every_strategy_agrees(
        "partition-digest-small",
        &["0", "5"],
        &["--workers", "2", "--threads", "1"],
        &SMALL,
    );
}

#[test]
fn every_strategy_gives_the_same_digest_on_1024_gpus() {
    every_strategy_agrees(
        "partition-digest-1024",
        &["0"],
        &["--workers", "1", "--threads", "2"],
        &[
            "--set",
            "cluster.gpus=1024",
            "--set",
            "model.layers=4",
            "--set",
            "parallel.tp=8",
            "--set",
            "parallel.pp=4",
            "--set",
            "parallel.global_batch=32",
            "--set",
            "network.segment_bytes=4194304",
        ],
    );
}

#[test]
fn the_comparison_lists_every_strategy_and_writes_a_report_and_a_plot() {
    let dir = scratch("partition-report");
    let table = stdout_ok(
        fleetsim()
            .args(["partition", QUICKSTART, "--parts", "4", "--out"])
            .arg(&dir),
    );
    for s in STRATEGIES.iter().filter(|&&s| s != "by-rack") {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{s} "))),
            "{s} missing:\n{table}"
        );
    }
    assert!(
        table.contains("imbalance") && table.contains("lookahead"),
        "{table}"
    );
    let csv = std::fs::read_to_string(dir.join("partition-report.csv")).expect("csv");
    let mut lines = csv.lines();
    let header = lines.next().expect("header");
    assert!(header.starts_with(
        "strategy,parts,lps_min,lps_mean,lps_max,imbalance,lookahead_ns,cut_bytes,cut_traffic_share"
    ));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), STRATEGIES.len() - 1, "{csv}");
    for row in &rows {
        let parts: u32 = row
            .split(',')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("parts");
        assert!((1..=4).contains(&parts), "{row}");
    }
    let svg = std::fs::read_to_string(dir.join("partition-report.svg")).expect("svg");
    assert!(svg.starts_with("<svg") && svg.contains("metis"), "plot");
    // METIS balances expected load within a few percent and cuts less traffic than
    // dealing hosts round-robin.
    let column = |strategy: &str, i: usize| -> f64 {
        rows.iter()
            .find(|r| r.starts_with(&format!("{strategy},")))
            .and_then(|r| r.split(',').nth(i))
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    assert!(column("metis", 5) < 1.1, "metis imbalance");
    assert!(
        column("metis", 8) < column("round-robin", 8),
        "metis cut traffic"
    );
}

#[test]
fn an_unknown_strategy_to_compare_is_one_clear_error() {
    let stderr = one_clear_error(
        fleetsim().args([
            "partition",
            QUICKSTART,
            "--parts",
            "4",
            "--strategy",
            "metis,scatter",
        ]),
        "partition --strategy scatter",
    );
    assert!(
        stderr.contains("unknown partition strategy `scatter`"),
        "{stderr}"
    );
}
