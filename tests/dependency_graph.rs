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

/// The workspace's own crates among `crates`, without the first (the crate asked about).
fn ours_below(crates: &[String]) -> Vec<&str> {
    crates
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|c| {
            matches!(
                *c,
                "sim-ir"
                    | "sim-config"
                    | "sim-models"
                    | "sim"
                    | "sim-engine"
                    | "fleetsim"
                    | "fleetsim-chakra"
                    | "fleetsim-proto"
                    | "partitioner"
                    | "worker"
                    | "coordinator"
            )
        })
        .collect()
}

/// `sim-ir` is the bottom layer, `sim-config` stands on it alone, `sim-models` on both, `sim`
/// on the three and `sim-engine` on `sim` (ARCHITECTURE.md): each may be used by every crate
/// above, and uses none of them, nor an async runtime.
#[test]
fn the_lower_layers_stand_on_nothing_above_them() {
    let layers: [(&str, &[&str]); 5] = [
        ("sim-ir", &[]),
        ("sim-config", &["sim-ir"]),
        ("sim-models", &["sim-config", "sim-ir"]),
        (
            "sim",
            &["fleetsim-chakra", "sim-config", "sim-ir", "sim-models"],
        ),
        (
            "sim-engine",
            &[
                "fleetsim-chakra",
                "sim",
                "sim-config",
                "sim-ir",
                "sim-models",
            ],
        ),
    ];
    for (layer, allowed) in layers {
        let tree = crates(&["-p", layer]);
        assert_eq!(tree.first().map(String::as_str), Some(layer), "{tree:?}");
        let mut below = ours_below(&tree);
        below.sort_unstable();
        below.dedup();
        assert_eq!(below, allowed, "{layer}");
        assert_eq!(network_runtimes(&tree), Vec::<&str>::new(), "{layer}");
    }
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
/// how transfers are cut comes from `sim::segments`, and `sim-engine` is not among its
/// dependencies, so it cannot name an LP.
#[test]
fn the_partitioner_does_not_depend_on_the_engine() {
    let tree = crates(&["-p", "partitioner"]);
    assert!(tree.iter().any(|c| c == "sim"), "{tree:?}");
    assert!(!tree.iter().any(|c| c == "sim-engine"), "{tree:?}");
}
