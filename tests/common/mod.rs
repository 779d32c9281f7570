//! Helpers shared by the integration tests that run the `fleetsim` binary. Each test crate
//! uses a subset.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub const QUICKSTART: &str = "configs/experiments/quickstart.toml";

/// The quickstart cut down to 32 GPUs and 4 layers: seconds in a debug build.
pub const SMALL: [&str; 6] = [
    "--set",
    "cluster.gpus=32",
    "--set",
    "model.layers=4",
    "--set",
    "parallel.global_batch=16",
];

pub fn fleetsim() -> Command {
    Command::cargo_bin("fleetsim").expect("binary")
}

/// Runs `cmd`, fails the test with its stderr unless it exited 0, and returns its stdout.
pub fn stdout_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run fleetsim");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Fails the test with `out`'s stderr unless the process exited 0.
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`stdout_ok`], parsed as JSON.
pub fn json_ok(cmd: &mut Command) -> serde_json::Value {
    serde_json::from_str(&stdout_ok(cmd)).expect("JSON")
}

/// A fresh, empty directory under Cargo's per-test scratch space.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Runs `cmd` on a bad input and checks the contract for every bad input: exit status 1,
/// nothing on stdout, and exactly one `error: …` line on stderr, never a panic. Returns that
/// line; `what` names the case in failures.
pub fn one_clear_error(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().expect("run fleetsim");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: exit status; stderr: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{what}: printed to stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!stderr.contains("panicked"), "{what}: panicked: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{what}: not one line: {stderr}");
    assert!(stderr.starts_with("error: "), "{what}: {stderr}");
    stderr
}

/// `summary.json` of the run written to `dir`.
pub fn summary(dir: &Path) -> serde_json::Value {
    let text = fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("summary.json is JSON")
}

/// The events `summary`'s `engine.cross_partition_slack` counts, over its six delay buckets.
pub fn slack_counted(summary: &serde_json::Value) -> u64 {
    let slack = summary["engine"]["cross_partition_slack"]
        .as_object()
        .expect("cross_partition_slack");
    assert_eq!(slack.len(), 6, "{slack:?}");
    slack.values().map(|v| v.as_u64().expect("a count")).sum()
}

/// The `result_digest` of the embedded run of [`QUICKSTART`] with [`SMALL`], written to
/// `dir`: what every split of that run must reproduce.
pub fn small_embedded_digest(dir: &Path) -> String {
    stdout_ok(
        fleetsim()
            .args(["run", QUICKSTART, "--quiet", "--out"])
            .arg(dir)
            .args(SMALL),
    );
    summary(dir)["result_digest"]
        .as_str()
        .expect("a digest")
        .to_string()
}

/// Sends SIGTERM to `child`, as Slurm does before a preemption.
pub fn send_sigterm(child: &std::process::Child) {
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -TERM {}", child.id());
}

/// A CSV file's header and rows, read as the standard CSV fleetsim writes (quoted fields,
/// `#` comment lines).
pub fn csv_table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header = reader
        .headers()
        .expect("a CSV header")
        .iter()
        .map(str::to_string)
        .collect();
    let rows = reader
        .records()
        .map(|r| r.expect("a CSV row").iter().map(str::to_string).collect())
        .collect();
    (header, rows)
}

/// Runs `fleetsim workload EXPERIMENT --workload-file PATH` on a malformed workload file (or
/// folder of traces) and checks the one clear line: it holds the text of `PATH` with the
/// extension `.expect` and names the file.
pub fn bad_workload_file(experiment: &str, path: &Path) {
    let name = path.display().to_string();
    let stderr = one_clear_error(
        fleetsim()
            .args(["workload", experiment, "--workload-file"])
            .arg(path),
        &name,
    );
    let want = fs::read_to_string(path.with_extension("expect")).expect("expect file");
    assert!(
        stderr.contains(want.trim()),
        "{name}: expected `{}` in {stderr}",
        want.trim()
    );
    let file_name = path.file_name().expect("name").to_string_lossy();
    assert!(stderr.contains(&*file_name), "{name}: {stderr}");
}
