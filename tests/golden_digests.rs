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
        "2c94b4a92696a7dae5067816a8ac8800",
    ),
    (
        "quickstart, flow",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"flow\"",
        ],
        "eab1d858b60b657478747fde4c4ce06e",
    ),
    (
        "quickstart, analytical",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "9d317bd9208f253d9614e86d45b9f104",
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
        "1bcf8b9f92d219159e8f89c92f8436c0",
    ),
    (
        "two jobs interleaved",
        &["tests/fixtures/jobs/interleaved.toml"],
        "77edd2fac70aaa46d6327cf60c56ef38",
    ),
    (
        "jobs of mixed kinds",
        &["tests/fixtures/jobs/mixed.toml"],
        "2eb2002614519ed4161470d14c3a47cc",
    ),
    (
        "a straggler GPU",
        &["tests/fixtures/faults/straggler.toml"],
        "72f6a8e05f07a4a21a366914bf9ff044",
    ),
    (
        "link faults on a spine-leaf fabric",
        &["tests/fixtures/faults/spine-leaf.toml"],
        "615e44addee7b2f2364742628ae09370",
    ),
    (
        "a Chakra trace",
        &["tests/fixtures/chakra/experiment.toml"],
        "821afe6f68e2880469bf26d55fff8d9d",
    ),
    (
        "A100 and H100 in one job",
        &["configs/experiments/hetero-a100-h100-128.toml"],
        "fa832c6766126e122d3e47dbffef9ae6",
    ),
    (
        "Mixtral, alltoall dispatcher, analytical",
        &[
            "configs/experiments/mixtral-8x7b-h100-256.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "cc4daa4ec5d3feabd73aa6f747a159df",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, packet",
        &["tests/fixtures/moe/deepep-32.toml"],
        "b45d3b41e0b7cccb6ddc7a20e45b8ee6",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, analytical",
        &[
            "tests/fixtures/moe/deepep-32.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "965846a062931e6943d8801d66fa3d02",
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
