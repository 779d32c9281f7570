//! The large presets, run whole and checked against their recorded answers (issue 15: an
//! answer must not move without a note saying which change moved it and why).
//!
//! `cargo bench --bench large_presets [-- NAME...]` runs `fleetsim run` (the release binary,
//! jemalloc, as users run it) once per case in its own process, and prints its wall time,
//! events/s and peak RSS. A case whose digest or iteration differs from the one recorded
//! here fails the benchmark, naming both: a change that moves one must record the new
//! answer here, and its commit and `docs/engine.md` ("Recorded answers of the large
//! presets") must say why. Not in `cargo test`: the 131,072-GPU cases take 6-17 minutes each
//! on two cores, so they (and the 1,048,576-GPU one) run only with `FLEETSIM_BENCH_HUGE=1`.
//! The `-symmetric` cases run one data-parallel replica for all (`engine.symmetry`, on the
//! analytical network without clock spread): seconds at any scale.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// One preset as recorded: what to run and what it answered.
struct Case {
    name: &'static str,
    experiment: &'static str,
    sets: &'static [&'static str],
    digest: &'static str,
    iteration_s: f64,
    /// 131,072 GPUs or more: only with `FLEETSIM_BENCH_HUGE=1`.
    huge: bool,
}

/// The analytical network without chip-to-chip spread: one replica stands for all.
const SYMMETRIC: [&str; 2] = ["network.model=\"analytical\"", "compute.clock_spread=0"];

const CASES: &[Case] = &[
    // Llama 3 405B cut to 8,192 GPUs (DP 64), as docs/engine.md runs it on several workers.
    Case {
        name: "llama3-405b-8k-analytical",
        experiment: "configs/experiments/llama3-405b-h100-16384.toml",
        sets: &[
            "network.model=\"analytical\"",
            "cluster.gpus=8192",
            "parallel.global_batch=1024",
        ],
        // 12.810633080061 s, e7e93613 without host dispatch (before 8d541d6, or today with
        // `training.cuda_graphs = "full-iteration"`). 8d541d6: the x86 host issues the first
        // op 7 us in (12.810640, 29b631fe). 838c468: 1F1B's synchronise after each step's
        // transfers makes the host issue the next step's first op only then, 413 us more.
        digest: "a714ab48626cf46cf63b0ee6659b75f6",
        iteration_s: 12.811053080061,
        huge: false,
    },
    Case {
        name: "llama3-405b-8k-flow",
        experiment: "configs/experiments/llama3-405b-h100-131072.toml",
        sets: &[
            "network.model=\"flow\"",
            "cluster.gpus=8192",
            "parallel.global_batch=1024",
        ],
        // 12.857125587283 s, 352f90c7 before host dispatch (8d541d6); 7 us and 413 us
        // later (8d541d6, 838c468: 12.857133, 57ee8785), as above.
        digest: "31228c7a4ae160c3881d7b908f395cd5",
        iteration_s: 12.857545587283,
        huge: false,
    },
    Case {
        name: "llama3-405b-131k-flow",
        experiment: "configs/experiments/llama3-405b-h100-131072.toml",
        sets: &["network.model=\"flow\""],
        // 12.987601110073 s, e533df5b before host dispatch (8d541d6): 7 us later, as above
        // (12.987608, 9dde6630); 838c468: 406 us more.
        digest: "cab4b1cf86a734b640f2e2bc824fa283",
        iteration_s: 12.988014110073,
        huge: true,
    },
    Case {
        name: "llama3-405b-131k-analytical",
        experiment: "configs/experiments/llama3-405b-h100-131072.toml",
        sets: &["network.model=\"analytical\""],
        // 12.863099273656 s, af4be1ed before host dispatch (8d541d6): 7 us later, as above
        // (12.863106, 9695ca29); 838c468: 413 us more.
        digest: "f30d9676ba74dc81331ae928c2928d9e",
        iteration_s: 12.863519273656,
        huge: true,
    },
    Case {
        name: "gpt3-175b-1k-symmetric",
        experiment: "configs/experiments/gpt3-175b-h100-1024.toml",
        sets: &SYMMETRIC,
        // 7.295836296179 s, d5afa4d6 before 838c468 (1F1B's synchronise: 763 us later).
        digest: "913efb51af910e75e81ccc80331fc7dd",
        iteration_s: 7.296599296179,
        huge: false,
    },
    Case {
        name: "llama3-405b-131k-symmetric",
        experiment: "configs/experiments/llama3-405b-h100-131072.toml",
        sets: &SYMMETRIC,
        // 12.574806181881 s, 3878632f before 838c468 (413 us later, as the 8K case).
        digest: "680661afe65d408fd4ac686861008900",
        iteration_s: 12.575219181881,
        huge: true,
    },
    Case {
        name: "llama3-405b-1m-symmetric",
        experiment: "configs/experiments/llama3-405b-1m.toml",
        sets: &SYMMETRIC,
        // 12.426116351809 s, b5df27c3 before 838c468 (413 us later, as the 8K case).
        digest: "3d05fafae6413e73067219f66e111de9",
        iteration_s: 12.426529351809,
        huge: true,
    },
];

fn main() {
    // `cargo bench` passes `--bench`; names select cases.
    let names: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = std::env::temp_dir().join("fleetsim-large-presets");
    let huge = std::env::var("FLEETSIM_BENCH_HUGE").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for case in CASES {
        if !names.is_empty() && !names.iter().any(|n| case.name.contains(n.as_str())) {
            continue;
        }
        if case.huge && !huge {
            println!("{}: skipped (FLEETSIM_BENCH_HUGE=1 runs it)", case.name);
            continue;
        }
        let out = scratch.join(case.name);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fleetsim"));
        cmd.current_dir(root)
            .args(["run", case.experiment, "--quiet", "--no-alone", "--out"])
            .arg(&out);
        for set in case.sets {
            cmd.args(["--set", set]);
        }
        let started = Instant::now();
        let status = cmd.status().expect("start fleetsim");
        let wall = started.elapsed().as_secs_f64();
        if !status.success() {
            failures.push(format!("{}: fleetsim run failed ({status})", case.name));
            continue;
        }
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
        )
        .expect("summary.json is JSON");
        let digest = summary["result_digest"].as_str().unwrap_or_default();
        let iteration = summary["iteration_time_s"].as_f64().unwrap_or(f64::NAN);
        let engine = &summary["engine"];
        let gpus = summary["gpus"].as_f64().unwrap_or(f64::NAN);
        let events = engine["events"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{}: iteration {iteration:.6} s, digest {digest}; {events} events ({:.0} per GPU), {:.3e} events/s, {wall:.1} s wall, peak RSS {:.0} MB",
            case.name,
            events / gpus,
            engine["events_per_s"].as_f64().unwrap_or(f64::NAN),
            engine["peak_rss_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6,
        );
        if digest != case.digest || (iteration - case.iteration_s).abs() > 5e-7 {
            failures.push(format!(
                "{}: iteration {iteration:.6} s, digest {digest}, but {:.6} s, {} is recorded",
                case.name, case.iteration_s, case.digest
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "answers moved (record them with the reason):\n{}",
        failures.join("\n")
    );
}
