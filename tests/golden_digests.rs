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
        "793f78b5db97657bb8dada805c09bd98",
    ),
    (
        "quickstart, flow",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"flow\"",
        ],
        "815e89208aa571bef7def1c0a2ad3047",
    ),
    (
        "quickstart, analytical",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "adc4d730f0b36a08dcef26514db9d008",
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
        "60202cca02e1297d27c4a5a9e36fd766",
    ),
    (
        "two jobs interleaved",
        &["tests/fixtures/jobs/interleaved.toml"],
        "c97cde904b7887b50d5ce757a65b088c",
    ),
    (
        "jobs of mixed kinds",
        &["tests/fixtures/jobs/mixed.toml"],
        "bad075d27b46c93cfa40be548c952e15",
    ),
    (
        "a straggler GPU",
        &["tests/fixtures/faults/straggler.toml"],
        "72f6a8e05f07a4a21a366914bf9ff044",
    ),
    (
        "link faults on a spine-leaf fabric",
        &["tests/fixtures/faults/spine-leaf.toml"],
        "4283bd8966da5abdcb0f2d98e1b29c4c",
    ),
    (
        "a Chakra trace",
        &["tests/fixtures/chakra/experiment.toml"],
        "821afe6f68e2880469bf26d55fff8d9d",
    ),
    (
        "A100 and H100 in one job",
        &["configs/experiments/hetero-a100-h100-128.toml"],
        "71a7b8cd3cc29005bccb197a00461b14",
    ),
    (
        "Mixtral, alltoall dispatcher, analytical",
        &[
            "configs/experiments/mixtral-8x7b-h100-256.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "5354d5b66c41200a01c936c03551db82",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, packet",
        &["tests/fixtures/moe/deepep-32.toml"],
        "4f6065f3f91da1a0339483e1085f84f9",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, analytical",
        &[
            "tests/fixtures/moe/deepep-32.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "9871305b1ece4d45aa151e083638b2a5",
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
