//! `fleetsim collective`: nccl-tests' table, its CSV and plot, and one clear error for bad
//! arguments.

mod common;

use common::{fleetsim, one_clear_error, scratch, stdout_ok};

const RAIL_H100: &str = "configs/clusters/rail-h100.toml";

#[test]
fn the_table_has_nccl_tests_columns_and_the_plan() {
    let out = stdout_ok(fleetsim().args([
        "collective",
        RAIL_H100,
        "--op",
        "all_reduce",
        "--gpus",
        "8",
        "--sizes",
        "1M:8M",
    ]));
    let header = out
        .lines()
        .find(|l| l.contains("algbw"))
        .expect("column header");
    for column in [
        "size",
        "count",
        "type",
        "time",
        "algbw",
        "busbw",
        "algorithm",
        "protocol",
        "channels",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 4, "{out}");
    for (i, r) in rows.iter().enumerate() {
        let size: u64 = r[0].parse().expect("size");
        assert_eq!(size, (1 << 20) << i);
        assert_eq!(r[1].parse::<u64>().expect("count"), size / 4);
        assert_eq!(r[2], "float");
        let time: f64 = r[3].parse().expect("time");
        let algbw: f64 = r[4].parse().expect("algbw");
        let busbw: f64 = r[5].parse().expect("busbw");
        assert!((algbw - size as f64 / time / 1e3).abs() < 0.02 * algbw);
        assert!((busbw / algbw - 2.0 * 7.0 / 8.0).abs() < 0.01);
        assert!(["ring", "tree", "nvls"].contains(&r[6]), "{r:?}");
    }
    assert!(out.contains("# Avg bus bandwidth"));
}

#[test]
fn csv_and_plot_hold_the_same_rows() {
    let dir = scratch("collective-plot");
    let svg = dir.join("busbw.svg");
    let out = stdout_ok(
        fleetsim()
            .args([
                "collective",
                RAIL_H100,
                "--op",
                "all-gather",
                "--gpus",
                "16",
                "--sizes",
                "64K,4M",
                "--dtype",
                "bfloat16",
                "--csv",
                "--set",
                "network.model=analytical",
                "--plot",
            ])
            .arg(&svg),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("size_bytes,count,type,time_us,algbw_gb_s,busbw_gb_s"));
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[1].starts_with("65536,32768,bfloat16,"),
        "{}",
        lines[1]
    );
    let plot = std::fs::read_to_string(&svg).expect("plot written");
    assert!(plot.starts_with("<svg") && plot.contains("busbw (GB/s)"));
}

#[test]
fn send_recv_and_a_partial_host_run() {
    // Four GPUs of one eight-GPU host, as nccl-tests with -g 4 would.
    let out = stdout_ok(fleetsim().args([
        "collective",
        RAIL_H100,
        "--op",
        "sendrecv",
        "--gpus",
        "4",
        "--sizes",
        "64M",
    ]));
    assert!(out.contains("on 4 GPUs (1 host(s) x 4)"), "{out}");
    let row: Vec<&str> = out
        .lines()
        .find(|l| !l.starts_with('#'))
        .expect("row")
        .split_whitespace()
        .collect();
    let busbw: f64 = row[5].parse().expect("busbw");
    // One NVLink direction of an H100 (450 GB/s), less what NCCL loses to it.
    assert!(busbw > 300.0 && busbw < 450.0, "{row:?}");
}

#[test]
fn bad_arguments_get_one_clear_error() {
    let base = ["collective", RAIL_H100];
    for (args, says) in [
        (
            vec!["--op", "all-scatter", "--gpus", "8"],
            "unknown operation",
        ),
        (vec!["--op", "all-reduce", "--gpus", "1"], "2 or more"),
        (
            vec!["--op", "all-reduce", "--gpus", "8", "--sizes", "8M:1M"],
            "--sizes",
        ),
        (
            vec!["--op", "all-reduce", "--gpus", "8", "--dtype", "fp7"],
            "--dtype",
        ),
        (
            vec![
                "--op",
                "all-reduce",
                "--gpus",
                "8",
                "--set",
                "collectives.protocol=ll64",
            ],
            "collectives.protocol",
        ),
        (
            vec![
                "--op",
                "all-reduce",
                "--gpus",
                "16",
                "--sizes",
                "1M",
                "--set",
                "collectives.algorithm=pat",
            ],
            "collectives.algorithm",
        ),
    ] {
        let what = args.join(" ");
        let e = one_clear_error(fleetsim().args(base).args(&args), &what);
        assert!(e.contains(says), "{what}: {e}");
    }
    let e = one_clear_error(
        fleetsim().args([
            "collective",
            "configs/clusters/no-such.toml",
            "--op",
            "all-reduce",
            "--gpus",
            "8",
        ]),
        "missing file",
    );
    assert!(e.contains("no-such.toml"), "{e}");
}
