//! Checkpoints of embedded runs: `--checkpoint-every` writes one complete checkpoint (the
//! latest), `--resume` continues it on other numbers of workers and other partitionings to the
//! uninterrupted run's digest, SIGTERM stops a run at a checkpoint with exit status 75, and
//! every bad checkpoint is one clear error.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    QUICKSTART, SMALL, fleetsim, one_clear_error, scratch, small_embedded_digest, stdout_ok,
    summary,
};

fn digest(dir: &Path) -> String {
    summary(dir)["result_digest"]
        .as_str()
        .expect("a digest")
        .to_string()
}

/// Runs the small quickstart (with `sets`) and a checkpoint every 10 ms of simulated time
/// into `dir/checkpointed`; its checkpoint directory.
fn checkpointed_run(dir: &Path, sets: &[&str]) -> PathBuf {
    let out = dir.join("checkpointed");
    stdout_ok(
        fleetsim()
            .args([
                "run",
                QUICKSTART,
                "--quiet",
                "--checkpoint-every",
                "10ms",
                "--out",
            ])
            .arg(&out)
            .args(SMALL)
            .args(sets),
    );
    out.join("checkpoint")
}

#[test]
fn a_resumed_run_reaches_the_uninterrupted_digest_on_any_split() {
    let dir = scratch("checkpoint-resume");
    let expected = small_embedded_digest(&dir.join("embedded"));
    let checkpoint = checkpointed_run(&dir, &[]);
    assert_eq!(digest(&dir.join("checkpointed")), expected);
    // One complete checkpoint is kept: the manifest and the window it names.
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(checkpoint.join("checkpoint.json")).expect("manifest"),
    )
    .expect("JSON");
    assert!(manifest["time_ps"].as_u64().expect("time") >= 10_000_000_000);
    let windows: Vec<_> = std::fs::read_dir(&checkpoint)
        .expect("checkpoint dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("window-"))
        .collect();
    assert_eq!(windows.len(), 1, "older checkpoints are removed");
    for (name, split) in [
        ("three-workers", vec!["--workers", "3", "--threads", "1"]),
        // One worker on two threads: asynchronous, with windows wider than the lookahead.
        ("one-worker", vec!["--workers", "1", "--threads", "2"]),
        (
            "round-robin",
            vec!["--workers", "2", "--partition", "round-robin"],
        ),
    ] {
        let out = dir.join(name);
        stdout_ok(resume_command(&checkpoint, &out).args(SMALL).args(&split));
        assert_eq!(digest(&out), expected, "{name}");
        // The event count covers the whole run, before the checkpoint too; the rate, only
        // what this process ran, in its wall time.
        let engine = &summary(&out)["engine"];
        assert_eq!(
            engine["events"],
            summary(&dir.join("embedded"))["engine"]["events"],
            "{name}"
        );
        assert_eq!(engine["resumed_events"], manifest["events"], "{name}");
        let events = engine["events"].as_u64().expect("events");
        let ran = events - engine["resumed_events"].as_u64().expect("resumed events");
        let by_workers: u64 = engine["per_worker"]
            .as_array()
            .expect("per-worker statistics")
            .iter()
            .map(|w| w["events"].as_u64().expect("a worker's events"))
            .sum();
        assert_eq!(ran, by_workers, "{name}");
        assert!(ran > 0 && ran < events, "{name}: {ran} of {events}");
        let rate = engine["events_per_s"].as_f64().expect("events/s");
        let wall = engine["wall_s"].as_f64().expect("wall");
        assert!(
            (rate * wall - ran as f64).abs() <= 1e-6 * ran as f64,
            "{name}"
        );
    }
    // Resumed on one worker with the same checkpoints, the run goes on with the windows the
    // checkpointed run granted: the checkpoint records the width of the window it precedes.
    let again = dir.join("same-checkpoints");
    stdout_ok(resume_command(&checkpoint, &again).args(SMALL).args([
        "--workers",
        "1",
        "--threads",
        "2",
        "--checkpoint-every",
        "10ms",
    ]));
    assert_eq!(digest(&again), expected);
    assert_eq!(
        summary(&again)["engine"]["windows"],
        summary(&dir.join("checkpointed"))["engine"]["windows"]
    );
}

#[test]
fn sigterm_stops_a_run_at_a_checkpoint_that_resumes() {
    let dir = scratch("checkpoint-sigterm");
    let out = dir.join("stopped");
    // A checkpoint every 100 µs of simulated time makes the full quickstart take many
    // seconds in any build; the first one shows that the run is under way, with its signal
    // handler installed. A fixed sleep instead raced a release build to the end of the run.
    let mut run = Command::new(assert_cmd::cargo::cargo_bin("fleetsim"))
        .args(["run", QUICKSTART, "--quiet", "--threads", "1"])
        .args(["--checkpoint-every", "100us", "--out"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a run");
    let manifest = out.join("checkpoint").join("checkpoint.json");
    let until = Instant::now() + Duration::from_secs(60);
    while !manifest.exists() {
        if let Some(status) = run.try_wait().expect("wait") {
            let output = run.wait_with_output().expect("output");
            panic!(
                "the run ended ({status}) before its first checkpoint: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        assert!(Instant::now() < until, "no checkpoint within 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    common::send_sigterm(&run);
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = run.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < until, "the run did not stop within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = run.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    assert!(output.stdout.is_empty(), "no result is printed");
    assert!(!out.join("summary.json").exists(), "no result is written");
    let checkpoint = out.join("checkpoint");
    let resumed = dir.join("resumed");
    stdout_ok(
        // One thread per worker, whatever the machine's cores: a debug build is slow when
        // threads outnumber them.
        resume_command(&checkpoint, &resumed).args(["--workers", "2", "--threads", "1"]),
    );
    let whole = dir.join("whole");
    stdout_ok(
        fleetsim()
            .args(["run", QUICKSTART, "--quiet", "--out"])
            .arg(&whole),
    );
    assert_eq!(digest(&resumed), digest(&whole));
}

/// A copy of `from` (a checkpoint directory) in `to`, for damaging.
fn copy_checkpoint(from: &Path, to: &Path) {
    for entry in walk(from) {
        let target = to.join(entry.strip_prefix(from).expect("inside"));
        std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&entry, &target).expect("copy");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).expect("read dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

/// `fleetsim run QUICKSTART --quiet --resume CHECKPOINT --out OUT`, for more arguments.
fn resume_command(checkpoint: &Path, out: &Path) -> assert_cmd::Command {
    let mut cmd = fleetsim();
    cmd.args(["run", QUICKSTART, "--quiet", "--resume"])
        .arg(checkpoint)
        .arg("--out")
        .arg(out);
    cmd
}

fn resume_error(checkpoint: &Path, sets: &[&str], what: &str) -> String {
    one_clear_error(
        resume_command(checkpoint, &checkpoint.with_extension("out"))
            .args(SMALL)
            .args(sets),
        what,
    )
}

#[test]
fn bad_checkpoints_are_one_clear_error() {
    let dir = scratch("checkpoint-bad");
    let good = checkpointed_run(&dir, &[]);
    // Not a checkpoint directory at all.
    let e = resume_error(&dir.join("nowhere"), &[], "no directory");
    assert!(
        e.contains("checkpoint.json") && e.contains("--checkpoint-dir"),
        "{e}"
    );
    // Another experiment's checkpoint.
    let e = resume_error(&good, &["--set", "parallel.tp=2"], "other settings");
    assert!(e.contains("other settings") && e.contains("--set"), "{e}");
    // Fixtures: a manifest that is not JSON, one of a future format.
    for (fixture, says) in [
        (
            "tests/fixtures/bad-checkpoint/not-json",
            "not a fleetsim checkpoint manifest",
        ),
        ("tests/fixtures/bad-checkpoint/future-format", "format 99"),
    ] {
        let e = resume_error(Path::new(fixture), &[], fixture);
        assert!(e.contains(says), "{fixture}: {e}");
    }
    // A part cut short, and a part that is not one, each in a copy of the good checkpoint.
    let part = |root: &Path| {
        walk(root)
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "lps"))
            .expect("a part file")
    };
    let truncated = dir.join("truncated");
    copy_checkpoint(&good, &truncated);
    let file = part(&truncated);
    let bytes = std::fs::read(&file).expect("part");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("truncate");
    let e = resume_error(&truncated, &[], "truncated part");
    assert!(e.contains("damaged") && e.contains(".lps"), "{e}");
    let foreign = dir.join("foreign");
    copy_checkpoint(&good, &foreign);
    let file = part(&foreign);
    let mut junk = vec![b'x'; bytes.len()];
    junk[..4].copy_from_slice(b"junk");
    std::fs::write(&file, &junk).expect("overwrite");
    let e = resume_error(&foreign, &[], "foreign part");
    assert!(e.contains("not a fleetsim checkpoint part"), "{e}");
    // A part whose first record's length is damaged (its size unchanged, so only the reader
    // sees it): refused before a buffer of that length is made.
    let damaged = dir.join("damaged-length");
    copy_checkpoint(&good, &damaged);
    let file = part(&damaged);
    let mut damaged_bytes = std::fs::read(&file).expect("part");
    damaged_bytes[12..20].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&file, &damaged_bytes).expect("damage");
    let e = resume_error(&damaged, &[], "damaged length");
    assert!(
        e.contains("says it is 18446744073709551615 bytes long") && e.contains(".lps"),
        "{e}"
    );
}

#[test]
fn a_flow_mode_run_resumes_to_its_uninterrupted_digest() {
    let dir = scratch("checkpoint-flow");
    let flow = ["--set", "network.model=flow"];
    let plain = dir.join("plain");
    stdout_ok(
        fleetsim()
            .args(["run", QUICKSTART, "--quiet", "--out"])
            .arg(&plain)
            .args(SMALL)
            .args(flow),
    );
    let checkpoint = checkpointed_run(&dir, &flow);
    let expected = digest(&plain);
    assert_eq!(digest(&dir.join("checkpointed")), expected);
    let flows = &summary(&plain)["network"]["flow"];
    assert!(flows["flows"].as_u64().is_some_and(|n| n > 0), "{flows}");
    let resumed = dir.join("resumed");
    stdout_ok(
        resume_command(&checkpoint, &resumed)
            .args(SMALL)
            .args(flow)
            .args(["--workers", "2"]),
    );
    assert_eq!(digest(&resumed), expected);
    assert_eq!(summary(&resumed)["network"]["flow"], *flows);
}
