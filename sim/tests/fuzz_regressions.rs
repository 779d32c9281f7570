//! The inputs the fuzz targets (fuzz/, cargo-fuzz) found a problem with, and the hand-made
//! bad inputs they were seeded with, replayed on the stable toolchain through the same
//! parsers: each reads as a result (most as an error), never a panic. One folder per target
//! under tests/fixtures/fuzz-regressions/.

use std::path::{Path, PathBuf};

use sim::experiment::Experiment;
use sim::hostlist;
use sim::interop::chakra_convert::{ImportContext, import, parse_comm_groups};
use sim::interop::{chakra, simai, simai_convert};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("sim/ is inside the repository")
        .to_path_buf()
}

/// Every input of `target`'s folder, by name; at least one.
fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = repo().join("tests/fixtures/fuzz-regressions").join(target);
    let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.expect("an entry").path();
            let name = path.display().to_string();
            (name, std::fs::read(&path).expect("a regression input"))
        })
        .collect();
    all.sort();
    assert!(!all.is_empty(), "no inputs in {}", dir.display());
    all
}

/// What the fuzz target `hostlist` checks: the scan bounds the expansion, and what it cannot
/// read the crate refuses.
#[test]
fn hostlist_regressions() {
    for (name, bytes) in inputs("hostlist") {
        let Ok(list) = std::str::from_utf8(&bytes) else {
            continue;
        };
        match hostlist::scan(list) {
            Ok(None) => assert!(
                matches!(
                    hostlist::expand(list, 1 << 16, "the limit"),
                    Err(hostlist::HostListError::Syntax { .. })
                ),
                "{name}"
            ),
            Ok(Some(s)) => {
                if let Ok(names) = hostlist::expand(list, 1 << 16, "the limit") {
                    assert!(names.len() as u64 <= s.names, "{name}");
                }
            }
            Err(_) => {}
        }
    }
}

#[test]
fn simai_regressions() {
    for (name, bytes) in inputs("simai") {
        let Ok(file) = simai::parse_bytes(&bytes, &name) else {
            continue;
        };
        let back = simai::parse(&simai::write(&file), "written.txt");
        assert_eq!(back.as_ref().ok(), Some(&file), "{name}: {back:?}");
        let world = file.header.all_gpus.filter(|&w| w <= 4096).unwrap_or(16);
        let _ = simai_convert::import(&file, &name, world);
    }
}

#[test]
fn chakra_regressions() {
    let exp = Experiment::load(
        &repo().join("tests/fixtures/chakra/experiment.toml"),
        &sim::config::Overrides::none(),
    )
    .expect("the Chakra fixture's experiment");
    let dir = std::env::temp_dir().join(format!(
        "fleetsim-chakra-regressions-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("scratch");
    let trace = dir.join("trace.et");
    for (name, bytes) in inputs("chakra") {
        let decoded = chakra::decode_bytes(&bytes, &name);
        std::fs::write(&trace, &bytes).expect("write");
        let imported = import(&trace, &ImportContext::from_experiment(&exp));
        if decoded.is_err() {
            assert!(imported.is_err(), "{name}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn comm_groups_regressions() {
    for (name, bytes) in inputs("comm_groups") {
        let Ok(text) = std::str::from_utf8(&bytes) else {
            continue;
        };
        if let Ok(groups) = parse_comm_groups(text, &name, 16) {
            for members in groups.values() {
                assert!(members.len() <= 16, "{name}");
            }
        }
    }
}

/// Inputs of the fuzz target `config`: an experiment's text, then after a line `#--set` one
/// override per line, read as tests/fixtures/bad/fuzz-input.toml.
#[test]
fn config_regressions() {
    let path = repo().join("tests/fixtures/bad/fuzz-input.toml");
    for (_, bytes) in inputs("config") {
        let Ok(input) = std::str::from_utf8(&bytes) else {
            continue;
        };
        let (text, sets) = match input.split_once("\n#--set\n") {
            Some((text, sets)) => (text, sets.lines().map(str::to_string).collect()),
            None => (input, Vec::new()),
        };
        if let Ok(overrides) = sim::config::Overrides::from_sets(&sets) {
            let _ = Experiment::from_text(&path, text, &overrides);
        }
    }
}
