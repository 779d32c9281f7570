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
        "fef1057b8ea9e1fdcd7bc72d182408a0",
    ),
    (
        "quickstart, flow",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"flow\"",
        ],
        "c6020b5a7bdc6f05a120dc43036e3f4e",
    ),
    (
        "quickstart, analytical",
        &[
            "configs/experiments/quickstart.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "80c0171f0b5c6c9e21f861e8ce8a410f",
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
        "93743fc70d28772b471d826945b1296e",
    ),
    (
        "two jobs interleaved",
        &["tests/fixtures/jobs/interleaved.toml"],
        "7b8bce07c61fb4f07ca9709a2f0a926f",
    ),
    (
        "jobs of mixed kinds",
        &["tests/fixtures/jobs/mixed.toml"],
        "4adc8150c67b1424ed1ab36c9ef85213",
    ),
    (
        "a straggler GPU",
        &["tests/fixtures/faults/straggler.toml"],
        "c3f163112f91e368ffd66a5ee193e98b",
    ),
    (
        "link faults on a spine-leaf fabric",
        &["tests/fixtures/faults/spine-leaf.toml"],
        "ab5808ca7bfb7c3544b1d801f463af44",
    ),
    (
        "a Chakra trace",
        &["tests/fixtures/chakra/experiment.toml"],
        "821afe6f68e2880469bf26d55fff8d9d",
    ),
    (
        "A100 and H100 in one job",
        &["configs/experiments/hetero-a100-h100-128.toml"],
        "f3ef16255c55bcc80344773e2c9208c7",
    ),
    (
        "Mixtral, alltoall dispatcher, analytical",
        &[
            "configs/experiments/mixtral-8x7b-h100-256.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "ab02509b9f249d5ead82907096855470",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, packet",
        &["tests/fixtures/moe/deepep-32.toml"],
        "0bcfce02231326b65b779d6db0ac33d5",
    ),
    (
        "DeepSeek-V3 cut down, DeepEP, analytical",
        &[
            "tests/fixtures/moe/deepep-32.toml",
            "--set",
            "network.model=\"analytical\"",
        ],
        "61f112fe772c30cc59def6967445b570",
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
