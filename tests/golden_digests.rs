//! Golden digests (issue 18): the `result_digest` of the quickstart at its three network models
//! and of fixtures that exercise jobs, faults, Chakra traces, heterogeneous GPUs and MoE
//! dispatchers, as of the commit that wrote this file. A refactoring must leave every one
//! as it is; a change of behaviour updates the value here in the same commit and says why
//! in its message and in docs/validation.md.

mod common;

use common::{fleetsim, scratch, stdout_ok, summary};

/// (case, arguments after `fleetsim run`, digest).
const GOLDEN: [(&str, &[&str], &str); 13] = [
    (
        "quickstart, packet",
        &["configs/experiments/quickstart.toml"],
        "ec3d5cf2e1d255da936584cf1e564e3b",
    ),
    (
        "quickstart, flow",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"flow\"",
        ],
        "faeaf74d7cabe6ab7a9de69751ebcb2e",
    ),
    (
        "quickstart, analytical",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "932923e39515c3854d56a31ced985348",
    ),
    (
        // A 1F1B pipeline of eight stages: where the host waits for each step's transfers
        // (838c468 moved every deeper pipeline, and no case here saw it).
        "quickstart at PP 8, analytical",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "parallel.pp=8",
            "--set",
            "network.model=\"analytical\"",
        ],
        "b96819bc9fa0237c9137bad18498a292",
    ),
    (
        "two jobs interleaved",
        &["tests/fixtures/jobs/interleaved.toml"],
        "5bf44211494e59389dfd384af9fdabee",
    ),
    (
        "jobs of mixed kinds",
        &["tests/fixtures/jobs/mixed.toml"],
        "3bebb22fab4bd1d1c381075fef2ff9d7",
    ),
    (
        "a straggler GPU",
        &["tests/fixtures/faults/straggler.toml"],
        "2bcceaeae10906da7f9fb7bf5fcf0a84",
    ),
    (
        "link faults on a spine-leaf fabric",
        &["tests/fixtures/faults/spine-leaf.toml"],
        "456decd8d1b551bcf0a47cb76b16f161",
    ),
    (
        "a Chakra trace",
        &["tests/fixtures/chakra/experiment.toml"],
        "821afe6f68e2880469bf26d55fff8d9d",
    ),
    (
        "A100 and H100 in one job",
        &["configs/experiments/hetero-a100-h100-128.toml"],
        "06458cd0b9c8afb4fdb4f43192729174",
    ),
    (
        "Mixtral, alltoall dispatcher, analytical",
        &[
            "configs/experiments/mixtral-8x7b-h100-256.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "9cb7d8bdd88ca5adf2f3ed181e1859c6",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, packet",
        &["tests/fixtures/moe/deepep-32.toml"],
        "c80b2923cb8a68e5d9deac9acea8d907",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, analytical",
        &[
            "tests/fixtures/moe/deepep-32.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "2b2ffd287b8d9db8798f382afd8f0152",
    ),
];

#[test]
fn every_golden_run_keeps_its_digest() {
    let mut changed = Vec::new();
    for (i, (case, args, golden)) in GOLDEN.iter().enumerate() {
        let dir = scratch(&format!("golden-{i}"));
        stdout_ok(
            fleetsim()
                .arg("run")
                .args(*args)
                .args(["--quiet", "--out"])
                .arg(&dir),
        );
        let digest = summary(&dir)["result_digest"]
            .as_str()
            .expect("a digest")
            .to_string();
        if digest != *golden {
            changed.push(format!("{case} ({}): {golden} -> {digest}", args.join(" ")));
        }
    }
    assert!(
        changed.is_empty(),
        "digests changed:\n{}",
        changed.join("\n")
    );
}
