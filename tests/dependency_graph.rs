//! The module graph's promises, checked on the real dependency graph (`cargo tree`): the
//! simulation crate and a build without the `server` feature (what `fleetsim check`,
//! `run`, `sweep` and the reports need) link no tokio, tonic or hyper.

use std::process::Command;

/// The crates of `cargo tree -e normal` for these arguments, one name per line.
fn crates(args: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn network_runtimes(crates: &[String]) -> Vec<&str> {
    crates
        .iter()
        .map(String::as_str)
        .filter(|c| matches!(*c, "tokio" | "tonic" | "hyper"))
        .collect()
}

#[test]
fn the_simulation_crate_links_no_async_runtime() {
    let sim = crates(&["-p", "sim"]);
    assert!(sim.iter().any(|c| c == "sim"), "{sim:?}");
    assert_eq!(network_runtimes(&sim), Vec::<&str>::new());
}

#[test]
fn only_the_server_feature_brings_tokio() {
    let without = crates(&["-p", "fleetsim", "--no-default-features"]);
    assert!(without.iter().any(|c| c == "coordinator"), "{without:?}");
    assert_eq!(network_runtimes(&without), Vec::<&str>::new());
    let with = crates(&["-p", "fleetsim"]);
    assert!(network_runtimes(&with).contains(&"tokio"), "{with:?}");
}

/// The partitioner never knows the engine (ARCHITECTURE.md, `partitioner/`): what it needs of
/// how transfers are cut comes from `sim::segments`, so no source file of it names
/// `sim::engine`.
#[test]
fn the_partitioner_does_not_import_the_engine() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("partitioner/src");
    let mut files = vec![dir];
    let mut checked = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("partitioner/src is readable") {
                files.push(entry.expect("entry").path());
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("source is readable");
            assert!(
                !text.contains("sim::engine"),
                "{} imports the engine",
                path.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "found {checked} partitioner sources");
}
