//! Every malformed experiment in `tests/fixtures/bad/` exits non-zero with one clear line that
//! names the file (and line or key) and says what is wrong. None panics.

use std::fs;
use std::path::Path;

mod common;

use common::{QUICKSTART, fleetsim, one_clear_error};

/// What the error must say: the fixture's `# expect:` first line, or its `.expect` file.
fn expectation(path: &Path) -> String {
    let side = path.with_extension("expect");
    if side.exists() {
        return fs::read_to_string(side)
            .expect("read .expect")
            .trim()
            .to_string();
    }
    let bytes = fs::read(path).expect("read fixture");
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{} has no `# expect:` line or .expect file", path.display()))
        .trim()
        .to_string()
}

#[test]
fn every_bad_fixture_fails_with_one_clear_line() {
    let dir = Path::new("tests/fixtures/bad");
    let mut fixtures: Vec<_> = fs::read_dir(dir)
        .expect("fixtures dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 40, "only {} bad fixtures", fixtures.len());
    let mut transcript = String::new();
    for path in &fixtures {
        let name = path.display();
        let stderr = one_clear_error(fleetsim().arg("check").arg(path), &name.to_string());
        let file_name = path.file_name().unwrap().to_string_lossy();
        let names_file = stderr.contains(&*file_name)
            || stderr.contains("parts/")
            || stderr.contains("configs/");
        assert!(names_file, "{name}: error does not name the file: {stderr}");
        let want = expectation(path);
        assert!(
            stderr.contains(&want),
            "{name}: expected `{want}` in: {stderr}"
        );
        transcript.push_str(&stderr);
    }
    insta::assert_snapshot!("bad_input_messages", transcript);
}

#[test]
fn a_malformed_set_override_is_one_clear_error() {
    let stderr = one_clear_error(
        fleetsim().args(["check", QUICKSTART, "--set", "parallel.tp"]),
        "--set parallel.tp",
    );
    assert!(stderr.contains("expected KEY=VALUE"), "{stderr}");
}

#[test]
fn a_set_override_past_an_array_is_one_clear_error() {
    let hetero = "configs/experiments/hetero-a100-h100-128.toml";
    for (set, want) in [
        (
            "cluster.gpu_mix[2].gpu=H100-SXM",
            "has 2 element(s); index 2 is past its end",
        ),
        ("cluster.gpu_mix[x].gpu=H100-SXM", "is not NAME[INDEX]"),
    ] {
        let stderr = one_clear_error(fleetsim().args(["check", hetero, "--set", set]), set);
        assert!(stderr.contains(want), "{set}: {stderr}");
    }
}

#[test]
fn a_missing_experiment_file_is_one_clear_error() {
    let stderr = one_clear_error(
        fleetsim().args(["check", "no/such/experiment.toml"]),
        "missing experiment",
    );
    assert_eq!(
        stderr.trim(),
        "error: no/such/experiment.toml: file does not exist"
    );
}

/// `fleetsim ... | head -0`: a reader that has gone away ends the command quietly, with no
/// panic, no signal and no word (Rust ignores SIGPIPE, so every write must handle EPIPE).
#[test]
fn a_closed_standard_output_ends_every_command_without_a_panic() {
    let run_out = common::scratch("closed-stdout-run");
    let run_out = run_out.to_str().expect("utf-8 path");
    let commands: [&[&str]; 6] = [
        &["check", QUICKSTART],
        &["check", QUICKSTART, "--kernels", "--json"],
        &["workload", QUICKSTART, "--json"],
        &[
            "collective",
            QUICKSTART,
            "--op",
            "all-reduce",
            "--gpus",
            "16",
            "--sizes",
            "1M",
            "--csv",
        ],
        &["partition", QUICKSTART, "--parts", "2"],
        &["run", QUICKSTART, "--quiet", "--out", run_out],
    ];
    for args in commands {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("fleetsim"))
            .args(args)
            .args(if args[0] == "run" {
                &common::SMALL[..]
            } else {
                &[]
            })
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start fleetsim");
        // Close the reading end before fleetsim writes its first line.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait for fleetsim");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        if args[0] != "run" {
            // A run may warn of its placement; the others have nothing to say.
            assert!(stderr.is_empty(), "{args:?}: {stderr}");
        }
    }
}
