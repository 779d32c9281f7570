//! Output that does not reach its reader (`fleetsim … | head -1`) changes nothing but what
//! is printed: the command writes its files first and exits with its own status, so a
//! gate that pipes a failing `validate` still fails.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::scratch;

/// Runs fleetsim with `args`, reads the first line it prints and closes the pipe, as
/// `| head -1` does; returns that line, the exit status and stderr.
fn first_line_then_close(args: &[&str]) -> (String, Option<i32>, String) {
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("fleetsim"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fleetsim");
    let mut first = String::new();
    {
        let mut lines = BufReader::new(child.stdout.take().expect("stdout"));
        lines.read_line(&mut first).expect("read the first line");
        // Dropped here: the reader has gone.
    }
    let out = child.wait_with_output().expect("wait");
    (
        first,
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_failing_validate_piped_into_head_still_fails_and_writes_its_table() {
    let out = scratch("pipe-validate");
    let (first, status, stderr) = first_line_then_close(&[
        "validate",
        "configs/validation/e2e_iterations.csv",
        "--rows",
        "1,2",
        "--max-mape",
        "0.01",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(first.starts_with("row "), "{first}");
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("above --max-mape 0.01%"), "{stderr}");
    let csv = std::fs::read_to_string(out.join("validation.csv")).expect("validation.csv");
    assert_eq!(csv.lines().count(), 3, "both rows: {csv}");
}

#[test]
fn a_sweep_piped_into_head_writes_every_row() {
    let out = scratch("pipe-sweep");
    let (first, status, stderr) = first_line_then_close(&[
        "sweep",
        "tests/fixtures/jobs/packed.toml",
        "--vary",
        "network.model=analytical,flow",
        "--no-alone",
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(first.starts_with("network.model=analytical"), "{first}");
    assert_eq!(status, Some(0), "{stderr}");
    let csv = std::fs::read_to_string(out.join("sweep.csv")).expect("sweep.csv");
    assert_eq!(csv.lines().count(), 3, "both points: {csv}");
    assert!(out.join("sweep.svg").exists());
}
