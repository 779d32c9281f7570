//! Golden digests (issue 18): the `result_digest` of the quickstart at its three network models
//! and of fixtures that exercise jobs, faults, Chakra traces, heterogeneous GPUs and MoE
//! dispatchers, as of the commit that wrote this file. A refactoring must leave every one
//! as it is; a change of behaviour updates the value here in the same commit and says why
//! in its message and in docs/validation.md.

mod common;

use common::{fleetsim, scratch, stdout_ok, summary};

/// (case, arguments after `fleetsim run`, digest).
const GOLDEN: [(&str, &[&str], &str); 12] = [
    (
        "quickstart, packet",
        &["configs/experiments/quickstart.toml"],
        "8d1c1945db9888006a92cd132097ac95",
    ),
    (
        "quickstart, flow",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"flow\"",
        ],
        "9e59a863c630c45ef67c2acc073b56da",
    ),
    (
        "quickstart, analytical",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "310262da0743f241f048901f17671288",
    ),
    (
        "two jobs interleaved",
        &["tests/fixtures/jobs/interleaved.toml"],
        "7b8bce07c61fb4f07ca9709a2f0a926f",
    ),
    (
        "jobs of mixed kinds",
        &["tests/fixtures/jobs/mixed.toml"],
        "8d894e5dd35654705c398eb7a99cf461",
    ),
    (
        "a straggler GPU",
        &["tests/fixtures/faults/straggler.toml"],
        "c3f163112f91e368ffd66a5ee193e98b",
    ),
    (
        "link faults on a spine-leaf fabric",
        &["tests/fixtures/faults/spine-leaf.toml"],
        "456c69c9872bcac5b11f72b27516867a",
    ),
    (
        "a Chakra trace",
        &["tests/fixtures/chakra/experiment.toml"],
        "821afe6f68e2880469bf26d55fff8d9d",
    ),
    (
        "A100 and H100 in one job",
        &["configs/experiments/hetero-a100-h100-128.toml"],
        "1ccf3159a37a66f12e8c7bde6f010f45",
    ),
    (
        "Mixtral, alltoall dispatcher, analytical",
        &[
            "configs/experiments/mixtral-8x7b-h100-256.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "066ec399c0138995f50e57a0f5fc3482",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, packet",
        &["tests/fixtures/moe/deepep-32.toml"],
        "b4ba83ab4452999164a247ac6fa6dfcd",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, analytical",
        &[
            "tests/fixtures/moe/deepep-32.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "c9920173304891b6635bb722a19ff0d2",
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
