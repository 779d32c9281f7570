//! `fleetsim check` on the shipped experiments, `--set` overrides and `--json`.

use std::fs;

mod common;

use common::fleetsim;

fn check(args: &[&str]) -> (bool, String, String) {
    let out = fleetsim()
        .arg("check")
        .args(args)
        .output()
        .expect("fleetsim runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_shipped_experiment_except_the_largest_checks() {
    let mut n = 0;
    for entry in fs::read_dir("configs/experiments").unwrap() {
        let path = entry.unwrap().path();
        // The 131,072-GPU experiment is covered by the topology benchmark (release build).
        if path.to_string_lossy().contains("131072") {
            continue;
        }
        let (ok, stdout, stderr) = check(&[path.to_str().unwrap()]);
        assert!(ok, "{}: {stderr}", path.display());
        assert!(stdout.contains("memory/GPU"), "{stdout}");
        n += 1;
    }
    assert!(n >= 6);
}

#[test]
fn json_report_has_the_derived_numbers() {
    let (ok, stdout, stderr) = check(&["configs/experiments/gpt3-175b-h100-1024.toml", "--json"]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["cluster"]["gpus"], 1024);
    assert_eq!(v["cluster"]["hosts"], 128);
    assert_eq!(v["parallel"]["dp"], 16);
    assert_eq!(v["batch"]["micro_batches_per_replica"], 96);
    assert_eq!(v["lookahead_s"].as_f64().unwrap(), 1e-6);
    let tp = &v["parallel"]["groups"][0];
    assert_eq!(tp["kind"], "tp");
    assert_eq!(tp["max_hosts_spanned"], 1);
    assert!(
        v["memory"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["fits"] == true)
    );
}

/// `check` says what selective recompute re-runs, in text and JSON, and its activations
/// fall when a module is added.
#[test]
fn check_shows_the_recomputed_modules() {
    let mixtral = "configs/experiments/mixtral-8x7b-h100-256.toml";
    let (ok, stdout, stderr) = check(&[mixtral]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("training    precision bf16, recompute selective (core_attn)"),
        "{stdout}"
    );
    let modules = "training.recompute_modules=[\"core_attn\", \"moe_act\", \"layernorm\"]";
    let (ok, stdout, stderr) = check(&[mixtral, "--set", modules]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("recompute selective (core_attn, moe_act, layernorm)"),
        "{stdout}"
    );
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![mixtral, "--json"];
        args.extend_from_slice(extra);
        let (ok, stdout, stderr) = check(&args);
        assert!(ok, "{stderr}");
        serde_json::from_str(&stdout).unwrap()
    };
    let (plain, more) = (json(&[]), json(&["--set", modules]));
    assert_eq!(
        more["training"]["recompute_modules"],
        serde_json::json!(["core_attn", "moe_act", "layernorm"])
    );
    let activations = |v: &serde_json::Value| v["memory"][0]["activations_gb"].as_f64().unwrap();
    assert!(activations(&more) < activations(&plain));
}

/// `check` names the GEMM precision and FP8 recipe; Megatron-Core's `--fp8-recipe mxfp8`
/// spelling is the `mxfp8` precision.
#[test]
fn check_shows_the_precision_and_recipe() {
    let quickstart = "configs/experiments/quickstart.toml";
    for (sets, want) in [
        (
            &["training.precision=fp8", "training.fp8_recipe=tensorwise"][..],
            "precision fp8 (current scaling)",
        ),
        (
            &[
                "cluster.gpu=B200",
                "training.precision=fp8",
                "training.fp8_recipe=mxfp8",
            ][..],
            "precision mxfp8, recompute none",
        ),
        (
            &["cluster.gpu=B200", "training.precision=nvfp4"][..],
            "precision nvfp4, recompute none",
        ),
    ] {
        let mut args = vec![quickstart];
        for s in sets {
            args.extend(["--set", s]);
        }
        let (ok, stdout, stderr) = check(&args);
        assert!(ok, "{sets:?}: {stderr}");
        assert!(stdout.contains(want), "{sets:?}: {stdout}");
    }
}

#[test]
fn set_overrides_win_and_change_the_derivation() {
    let (ok, stdout, stderr) = check(&[
        "configs/experiments/quickstart.toml",
        "--json",
        "--set",
        "parallel.tp=8",
        "--set",
        "parallel.pp=1",
        "--set",
        "cluster.nic_gbps=200",
    ]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["parallel"]["tp"], 8);
    assert_eq!(v["parallel"]["dp"], 16);
}

/// MoE parallel folding (DeepSeek-V3's H100 recipe: TP 2, PP 16, EP 64, expert TP 1): the
/// expert groups are the ones Megatron-Core's expert `RankGenerator(tp=1, ep=64, dp=1, pp=16,
/// cp=1)` forms (megatron/core/parallel_state.py), 64 consecutive ranks spanning the
/// attention's TP 2 x DP 32 of one pipeline stage, while the attention keeps TP 2, DP 32.
#[test]
fn folded_experts_form_megatron_cores_groups() {
    let (ok, stdout, stderr) = check(&["configs/experiments/deepseek-v3-h100-1024.toml", "--json"]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let p = &v["parallel"];
    assert_eq!((p["tp"].as_u64(), p["dp"].as_u64()), (Some(2), Some(32)));
    assert_eq!((p["ep"].as_u64(), p["etp"].as_u64()), (Some(64), Some(1)));
    assert_eq!(p["expert_dp"], 1);
    let group = |kind: &str| {
        p["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} group in {p}"))
            .clone()
    };
    let ep = group("ep");
    assert_eq!(
        (ep["size"].as_u64(), ep["count"].as_u64()),
        (Some(64), Some(16))
    );
    let first: Vec<u64> = ep["first"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_u64())
        .collect();
    assert_eq!(first, (0..64).collect::<Vec<u64>>());
    assert_eq!(group("expert-tp")["size"], 1);
    assert_eq!(group("dp")["first"][1], 2);
    assert_eq!(group("pp")["first"][1], 64);
    // Expert weights per GPU are split over EP x expert TP: EP 32 x ETP 2 (half of 8 experts
    // each) holds as many as EP 64 x ETP 1 (4 whole experts).
    let (ok, stdout, stderr) = check(&[
        "configs/experiments/deepseek-v3-h100-1024.toml",
        "--set",
        "parallel.etp=2",
        "--set",
        "parallel.ep=32",
        "--set",
        "training.memory_check=warn",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let etp2: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let params = |v: &serde_json::Value| v["memory"][1]["params_per_gpu"].as_f64().unwrap();
    assert_eq!(etp2["parallel"]["expert_dp"], 1);
    assert!(
        (params(&etp2) - params(&v)).abs() / params(&v) < 1e-9,
        "EP 32 x ETP 2 holds as many expert weights as EP 64 x ETP 1"
    );
}

#[test]
fn later_includes_and_own_keys_win() {
    // quickstart includes rail-h100.toml (gpus_per_host 8) and sets its own gpus = 128.
    let (ok, stdout, _) = check(&["configs/experiments/quickstart.toml", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["cluster"]["gpus"], 128);
    assert_eq!(v["cluster"]["gpus_per_host"], 8);
}

#[test]
fn hugging_face_config_is_read() {
    let dir = tempdir();
    let exp = dir.join("hf.toml");
    let cfg = fs::canonicalize("tests/fixtures/hf/mixtral-8x7b-config.json").unwrap();
    fs::write(
        &exp,
        format!(
            "name = \"hf\"\n[cluster]\ngpus = 64\ngpu = \"H100-SXM\"\n[model]\nhf_config = {:?}\nseq_len = 4096\n[parallel]\ntp = 2\npp = 4\nep = 8\nsequence_parallel = true\n",
            cfg.display().to_string()
        ),
    )
    .unwrap();
    let (ok, stdout, stderr) = check(&[exp.to_str().unwrap(), "--json"]);
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let params = v["model"]["params"].as_f64().unwrap();
    assert!((params / 1e9 - 46.7).abs() < 0.5, "{params}");
    assert_eq!(v["model"]["seq_len"], 4096);
}

/// Squared ReLU (`hidden_act = "relu2"`, Nemotron) reads as `activation = "relu2"`, and
/// the file gives the preset's model: the same parameters.
#[test]
fn a_nemotron_config_reads_as_squared_relu() {
    let dir = tempdir();
    let cfg = fs::canonicalize("tests/fixtures/hf/nemotron4-340b-config.json").unwrap();
    let mut params = Vec::new();
    for (name, model) in [
        (
            "hf-nemotron",
            format!("hf_config = {:?}", cfg.display().to_string()),
        ),
        ("preset-nemotron", "preset = \"nemotron4-340b\"".to_string()),
    ] {
        let exp = dir.join(format!("{name}.toml"));
        fs::write(
            &exp,
            format!(
                "name = \"{name}\"\n[cluster]\ngpus = 1024\ngpu = \"H100-SXM\"\n[model]\n{model}\n[parallel]\ntp = 8\npp = 16\n"
            ),
        )
        .unwrap();
        let (ok, stdout, stderr) = check(&[exp.to_str().unwrap(), "--json"]);
        assert!(ok, "{stderr}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        params.push(v["model"]["params"].as_f64().unwrap());
    }
    assert_eq!(params[0], params[1]);
    assert!((params[0] / 1e9 - 340.0).abs() < 3.4, "{params:?}");
}

/// A Hugging Face config's sliding window: GPT-OSS's `sliding_window` on the layers its
/// `layer_types` mark (every other, from the first) reads as `window_size = 128` with
/// `window_attn_skip_freq = 2`, the preset's model; Qwen3 writes a window but switches it off
/// (`use_sliding_window: false`), so none of its layers is windowed, and its model type makes
/// its heads' queries and keys pass a norm (`qk_layernorm`).
#[test]
fn hugging_face_sliding_windows_read_as_megatron_places_them() {
    let dir = tempdir();
    let hf = |file: &str| {
        let path = fs::canonicalize(format!("tests/fixtures/hf/{file}")).unwrap();
        format!("hf_config = {:?}", path.display().to_string())
    };
    for (name, model, ep, window) in [
        (
            "hf-gpt-oss",
            hf("gpt-oss-120b-config.json"),
            64,
            Some("18 of 36 layers attend over a sliding window of 128 tokens"),
        ),
        (
            "preset-gpt-oss",
            "preset = \"gpt-oss-120b\"".to_string(),
            64,
            Some("18 of 36 layers attend over a sliding window of 128 tokens"),
        ),
        ("hf-qwen3", hf("qwen3-30b-a3b-config.json"), 8, None),
    ] {
        let exp = dir.join(format!("{name}.toml"));
        fs::write(
            &exp,
            format!(
                "name = \"{name}\"\n[cluster]\ngpus = 64\ngpu = \"H100-SXM\"\n[model]\n{model}\nseq_len = 4096\n[parallel]\nep = {ep}\n"
            ),
        )
        .unwrap();
        let (ok, stdout, stderr) = check(&[exp.to_str().unwrap()]);
        assert!(ok, "{name}: {stderr}");
        match window {
            Some(text) => assert!(stdout.contains(text), "{name}: {stdout}"),
            None => assert!(!stdout.contains("sliding window"), "{name}: {stdout}"),
        }
        // Qwen3's model type alone says its heads' queries and keys are normalised.
        assert_eq!(
            stdout.contains("qk norm   each head's query and key"),
            name == "hf-qwen3",
            "{name}: {stdout}"
        );
    }
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fleetsim-check-{}", std::process::id()));
    fs::create_dir_all(&d).expect("create temp dir");
    d
}

/// `check`'s host-memory estimate bounds what `run` on one worker then holds: its peak RSS
/// is at most `MARGIN` times the estimate and not below a third of it, on each network
/// model and with 4 KiB segments, where the segments in flight dominate.
#[test]
fn the_host_memory_estimate_bounds_the_runs_peak() {
    let cases: [(&str, &str); 5] = [
        (common::QUICKSTART, "analytical"),
        (common::QUICKSTART, "flow"),
        ("tests/fixtures/jobs/interleaved.toml", "packet"),
        ("configs/experiments/allreduce-64m-h100-128.toml", "packet"),
        ("configs/experiments/allreduce-64m-h100-128.toml", "flow"),
    ];
    for (i, (experiment, network)) in cases.into_iter().enumerate() {
        let set = format!("network.model=\"{network}\"");
        let (ok, stdout, stderr) = check(&[experiment, "--set", &set, "--json"]);
        assert!(ok, "{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        let memory = &report["host_memory"];
        let estimate = memory["run_estimate_bytes"].as_f64().expect("estimate");
        let margin = memory["margin"].as_f64().expect("margin");
        let out = common::scratch(&format!("host-memory-{i}"));
        common::stdout_ok(
            fleetsim()
                .args(["run", experiment, "--set", &set, "--quiet", "--out"])
                .arg(&out),
        );
        let peak = common::summary(&out)["engine"]["peak_rss_bytes"]
            .as_f64()
            .expect("peak");
        let ratio = peak / estimate;
        assert!(
            (1.0 / 3.0..=margin).contains(&ratio),
            "{experiment} ({network}): peak {:.1} MB, estimate {:.1} MB ({ratio:.2})",
            peak / 1e6,
            estimate / 1e6
        );
    }
}

/// `check` names the CPU that issues the GPUs' work and the CUDA graphs in use, in text and
/// JSON: x86 for an H100 cluster, Grace for GB200.
#[test]
fn check_names_the_host_and_the_cuda_graphs() {
    let quickstart = "configs/experiments/quickstart.toml";
    let (ok, stdout, stderr) = check(&[quickstart]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("issued by x86 host(s), CUDA graphs none"),
        "{stdout}"
    );
    let grace = [
        quickstart,
        "--set",
        "cluster.gpu=\"GB200\"",
        "--set",
        "cluster.gpus_per_host=4",
        "--set",
        "training.cuda_graphs=\"layers\"",
        "--json",
    ];
    let (ok, stdout, stderr) = check(&grace);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(json["training"]["host_cpus"], serde_json::json!(["grace"]));
    assert_eq!(json["training"]["cuda_graphs"], "layers");
}

/// `check` says which attention kernels train the heads: DeepSeek-V3's MLA heads (192/128)
/// on GB200 train unfused with Transformer Engine 2.4 and with cuDNN from 2.5 (TE PR #1797);
/// on H100 with cuDNN either way.
#[test]
fn check_names_the_attention_kernels_transformer_engine_can_train_with() {
    let dsv3 = |gpu: &str, per_host: &str, te: &str| {
        let (ok, stdout, stderr) = check(&[
            "configs/experiments/quickstart.toml",
            "--set",
            "model.preset=\"deepseek-v3\"",
            "--set",
            &format!("cluster.gpu=\"{gpu}\""),
            "--set",
            &format!("cluster.gpus_per_host={per_host}"),
            "--set",
            "cluster.gpus=64",
            "--set",
            "parallel.ep=64",
            "--set",
            "parallel.pp=1",
            "--set",
            "parallel.tp=1",
            "--set",
            "parallel.global_batch=64",
            "--set",
            &format!("training.transformer_engine=\"{te}\""),
            "--set",
            "training.memory_check=\"off\"",
            "--json",
        ]);
        assert!(ok, "{stderr}");
        let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        json["training"]["attention"][0]["kernels"]
            .as_str()
            .expect("kernels")
            .to_string()
    };
    assert_eq!(dsv3("GB200", "4", "2.4"), "unfused");
    assert_eq!(dsv3("GB200", "4", "2.5"), "cudnn");
    assert_eq!(dsv3("H100-SXM", "8", "2.4"), "cudnn");
}
