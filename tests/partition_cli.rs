//! Partitioning strategies: every one gives the same `result_digest` (on the quickstart and on
//! a 1,024-GPU cluster), and `fleetsim partition` compares them in a table, a CSV and a plot.

mod common;

use common::{
    QUICKSTART, SMALL, csv_table, fleetsim, one_clear_error, scratch, stdout_ok, summary,
};

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
    let header = csv.lines().next().expect("header");
    assert!(header.starts_with(
        "strategy,parts,lps_min,lps_mean,lps_max,imbalance,lookahead_ns,cut_bytes,cut_traffic_share"
    ));
    let (_, rows) = csv_table(&csv);
    assert_eq!(rows.len(), STRATEGIES.len() - 1, "{csv}");
    for row in &rows {
        let parts: u32 = row[1].parse().expect("parts");
        assert!((1..=4).contains(&parts), "{row:?}");
    }
    let svg = std::fs::read_to_string(dir.join("partition-report.svg")).expect("svg");
    assert!(svg.starts_with("<svg") && svg.contains("metis"), "plot");
    // METIS balances expected load within a few percent and cuts less traffic than
    // dealing hosts round-robin.
    let column = |strategy: &str, i: usize| -> f64 {
        rows.iter()
            .find(|r| r[0] == strategy)
            .and_then(|r| r[i].parse().ok())
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

#[test]
fn a_sweep_runs_the_cross_product_into_one_table_and_plot() {
    let dir = scratch("sweep");
    let out = stdout_ok(
        fleetsim()
            .args(["sweep", QUICKSTART])
            .args(["--vary", "engine.partition=by-host,metis"])
            .args(["--vary", "engine.workers=1,2"])
            .args(["--set", "engine.threads=1", "--out"])
            .arg(&dir)
            .args(SMALL),
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("digest")).count(),
        4,
        "{out}"
    );
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).expect("sweep.csv");
    let (header, rows) = csv_table(&csv);
    assert_eq!(
        &header[..3],
        &["engine.partition", "engine.workers", "iteration_time_s"]
    );
    for column in [
        "wall_s",
        "sync_fraction",
        "cross_partition_events",
        "events_per_window",
    ] {
        assert!(header.iter().any(|h| h == column), "{column}");
    }
    let digest = header
        .iter()
        .position(|h| h == "result_digest")
        .expect("digest column");
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows.iter()
            .map(|r| (r[0].as_str(), r[1].as_str()))
            .collect::<Vec<_>>(),
        [
            ("by-host", "1"),
            ("by-host", "2"),
            ("metis", "1"),
            ("metis", "2")
        ]
    );
    assert!(rows.iter().all(|r| r[digest] == rows[0][digest]), "{csv}");
    // One worker runs asynchronously, two keep a barrier per window: the table says which.
    let scheduling = header
        .iter()
        .position(|h| h == "scheduling")
        .expect("scheduling column");
    assert_eq!(
        rows.iter()
            .map(|r| r[scheduling].as_str())
            .collect::<Vec<_>>(),
        [
            "asynchronous",
            "load-adaptive",
            "asynchronous",
            "load-adaptive"
        ],
        "{csv}"
    );
    assert!(header.iter().any(|h| h == "thread_wait_s"), "{csv}");
    let svg = std::fs::read_to_string(dir.join("sweep.svg")).expect("sweep.svg");
    assert!(svg.contains("engine.partition=metis") && svg.contains("wall time"));
}

#[test]
fn a_bad_vary_is_one_clear_error() {
    let stderr = one_clear_error(
        fleetsim()
            .args([
                "sweep",
                QUICKSTART,
                "--vary",
                "engine.workers=1,2",
                "--vary",
                "parallel.tp=3",
                "--out",
            ])
            .arg(scratch("sweep-bad")),
        "sweep with tp=3",
    );
    // The point's combination, and the flag that gave the bad value.
    assert!(
        stderr.contains("sweep point engine.workers=1 parallel.tp=3: --vary: `parallel.tp`"),
        "{stderr}"
    );
}

/// A sweep whose folder cannot be written says so before its first point runs.
#[test]
fn a_sweep_into_an_unwritable_folder_stops_before_running() {
    let file = scratch("sweep-out-is-a-file").join("results");
    std::fs::write(&file, "a file, not a folder").expect("write");
    let stderr = one_clear_error(
        fleetsim()
            .args(["sweep", QUICKSTART, "--vary", "engine.workers=1,2", "--out"])
            .arg(file.join("sweep"))
            .args(SMALL),
        "sweep --out under a file",
    );
    assert!(
        stderr.contains("cannot write the results to") && stderr.contains("--out"),
        "{stderr}"
    );
    assert!(!stderr.contains("digest"), "a point ran: {stderr}");
}

#[test]
fn static_scheduling_gives_the_same_digest() {
    let dir = scratch("static-scheduling");
    let out = dir.join("static");
    stdout_ok(
        fleetsim()
            .args(["run", QUICKSTART, "--quiet", "--threads", "2"])
            .args(["--set", "engine.scheduling=static", "--out"])
            .arg(&out)
            .args(SMALL),
    );
    assert_eq!(
        summary(&out)["result_digest"],
        common::small_embedded_digest(&dir.join("adaptive")).as_str()
    );
}

/// `--plot-column` names a column of numbers, checked before anything runs.
#[test]
fn a_plot_column_of_text_is_one_clear_error() {
    let stderr = one_clear_error(
        fleetsim()
            .args([
                "sweep",
                QUICKSTART,
                "--vary",
                "parallel.tp=2",
                "--plot-column",
                "scheduling",
                "--out",
            ])
            .arg(scratch("sweep-plot-text")),
        "--plot-column scheduling",
    );
    assert!(
        stderr.contains("--plot-column: `scheduling` holds text, not numbers; use one of"),
        "{stderr}"
    );
}

/// A sweep folder `--collect` or `--point` cannot use: one clear line each.
#[test]
fn a_bad_sweep_folder_is_one_clear_error() {
    let unfinished = "tests/fixtures/bad-sweep/unfinished";
    for (args, want) in [
        (
            vec!["--collect", "tests/fixtures/bad-sweep/not-json"],
            "not a sweep manifest",
        ),
        (
            vec!["--collect", "tests/fixtures/bad-sweep/no-such-folder"],
            "a sweep folder written by `fleetsim sweep ... --slurm`",
        ),
        (
            vec!["--collect", unfinished],
            "2 of 2 point(s) in tests/fixtures/bad-sweep/unfinished have no readable summary.json",
        ),
        (
            vec!["--collect", "tests/fixtures/bad-sweep/misspelt"],
            "point 0 (summary.json unreadable: unknown field `mfuu`",
        ),
        (
            vec!["--point", unfinished, "--index", "5"],
            "the sweep has 2 point(s), 0 to 1; there is no point 5",
        ),
        (
            vec!["--point", unfinished],
            "SLURM_ARRAY_TASK_ID is not set",
        ),
    ] {
        let stderr = one_clear_error(
            fleetsim()
                .env_remove("SLURM_ARRAY_TASK_ID")
                .arg("sweep")
                .args(&args),
            &args.join(" "),
        );
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// Like `run`, a sweep needs no `--out`: its results go to runs/<experiment name>-sweep.
#[test]
fn a_sweep_without_out_writes_under_runs() {
    let dir = scratch("sweep-default-out");
    let experiment = std::fs::canonicalize(QUICKSTART).expect("quickstart");
    stdout_ok(
        fleetsim()
            .current_dir(&dir)
            .arg("sweep")
            .arg(&experiment)
            .args(["--vary", "parallel.micro_batch=1"])
            .args(SMALL),
    );
    let csv = dir.join("runs/quickstart-gpt3-13b-h100-128-sweep/sweep.csv");
    assert!(csv.exists(), "no {}", csv.display());
}

/// Points run side by side (`--jobs`) give the digests and times they give one at a time,
/// in the points' order.
#[test]
fn sweep_points_side_by_side_match_one_at_a_time() {
    let mut seen = Vec::new();
    for jobs in ["1", "3"] {
        let out = scratch(&format!("sweep-jobs-{jobs}"));
        stdout_ok(
            fleetsim()
                .args(["sweep", QUICKSTART, "--vary", "parallel.tp=1,2,4"])
                .args([
                    "--set",
                    "network.model=\"analytical\"",
                    "--jobs",
                    jobs,
                    "--out",
                ])
                .arg(&out)
                .args(SMALL),
        );
        let csv = std::fs::read_to_string(out.join("sweep.csv")).expect("sweep.csv");
        let (header, rows) = csv_table(&csv);
        let column = |name: &str| header.iter().position(|h| h == name).expect(name);
        let (tp, digest, time) = (
            column("parallel.tp"),
            column("result_digest"),
            column("iteration_time_s"),
        );
        let kept: Vec<[String; 3]> = rows
            .iter()
            .map(|r| [r[tp].clone(), r[digest].clone(), r[time].clone()])
            .collect();
        seen.push(kept);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[0].len(), 3);
}

/// Points of a sweep over an engine.* key are compared by wall time: side by side they
/// would change it, so `--jobs` above 1 is refused with one clear line.
#[test]
fn jobs_with_a_varied_engine_key_is_one_clear_error() {
    let out = scratch("sweep-jobs-engine");
    let error = one_clear_error(
        fleetsim()
            .args([
                "sweep",
                QUICKSTART,
                "--vary",
                "engine.workers=1,2",
                "--jobs",
                "2",
            ])
            .arg("--out")
            .arg(&out),
        "sweep --jobs over engine.workers",
    );
    assert!(error.contains("an engine.* key varies"), "{error}");
}
