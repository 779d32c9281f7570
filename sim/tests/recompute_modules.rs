//! `training.recompute_modules` (issue 16, item 3), Megatron-Core's `--recompute-modules`:
//! each module's forward kernels run again in the backward pass (`Phase::Recompute`), its
//! stashed activations leave the memory estimate, and what Megatron-Core rejects, or what a
//! model does not have, is one error naming the key.

mod support;

use std::collections::BTreeSet;

use sim::experiment::Experiment;
use sim::workload::{KernelName, OpKind, Phase, Program, compile};

/// A small Llama (dense, GQA), Mixtral (MoE, no shared experts) or DeepSeek-V3 (MLA, MoE with a
/// shared expert and dense first layers) on 16 H100s.
fn body(model: &str, training: &str) -> String {
    let (preset, extra, ep) = match model {
        "llama" => ("llama2-7b", "layers = 4", 1),
        "mixtral" => ("mixtral-8x7b", "layers = 4", 8),
        _ => ("deepseek-v3", "layers = 4\nexperts = 16", 8),
    };
    format!(
        r#"
[cluster]
gpus = 16
gpu = "H100-SXM"
gpus_per_host = 8
[model]
preset = "{preset}"
{extra}
[parallel]
tp = 2
ep = {ep}
sequence_parallel = true
global_batch = 16
[training]
memory_check = "off"
{training}
"#
    )
}

fn load(model: &str, training: &str) -> Result<Experiment, String> {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("recompute-modules");
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let name: String = format!("{model}-{training}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, format!("name = \"x\"\n{}", body(model, training))).expect("write");
    Experiment::load(&path, &sim::config::Overrides::none()).map_err(|e| e.to_string())
}

fn selective(model: &str, modules: &[&str]) -> Experiment {
    let list: Vec<String> = modules.iter().map(|m| format!("\"{m}\"")).collect();
    let training = format!(
        "recompute = \"selective\"\nrecompute_modules = [{}]",
        list.join(", ")
    );
    load(model, &training).unwrap_or_else(|e| panic!("{model} {modules:?}: {e}"))
}

/// Names of the kernels the first stage runs as recomputation.
fn recomputed(p: &Program) -> BTreeSet<KernelName> {
    p.ops
        .iter()
        .filter(|op| op.label.phase == Phase::Recompute)
        .filter_map(|op| match op.kind {
            OpKind::Compute { kernel } => Some(p.kernels[kernel as usize].name),
            _ => None,
        })
        .collect()
}

fn recomputed_of(exp: &Experiment) -> BTreeSet<KernelName> {
    recomputed(compile(exp).expect("compile").program(0, 0))
}

/// Activation bytes per GPU of the first stage.
fn activations(exp: &Experiment) -> f64 {
    exp.memory[0].activations
}

#[test]
fn selective_alone_keeps_its_meaning_core_attention() {
    let plain = load("llama", "recompute = \"selective\"").expect("selective");
    let explicit = selective("llama", &["core_attn"]);
    assert_eq!(
        recomputed_of(&plain),
        BTreeSet::from([KernelName::CoreAttention])
    );
    let (a, b) = (compile(&plain).expect("a"), compile(&explicit).expect("b"));
    assert_eq!(a.program(0, 0).ops.len(), b.program(0, 0).ops.len());
    assert_eq!(activations(&plain), activations(&explicit));
}

#[test]
fn each_module_recomputes_its_own_forward_kernels() {
    use KernelName::*;
    let cases: [(&str, &[&str], &[KernelName]); 7] = [
        (
            "llama",
            &["mlp"],
            &[PreMlpNorm, MlpUp, MlpActivation, MlpDown],
        ),
        ("mixtral", &["moe_act"], &[ExpertActivation]),
        ("mixtral", &["layernorm"], &[PreMlpNorm]),
        (
            "mixtral",
            &["moe"],
            &[
                Router,
                RouterTopk,
                Permute,
                ExpertUp,
                ExpertActivation,
                ExpertDown,
                Unpermute,
            ],
        ),
        ("deepseek", &["mla_up_proj"], &[MlaQUp, MlaKvUp, Rope]),
        ("deepseek", &["layernorm"], &[InputNorm, PreMlpNorm]),
        (
            "deepseek",
            &["shared_experts"],
            &[SharedUp, SharedActivation, SharedDown],
        ),
    ];
    for (model, modules, want) in cases {
        let got = recomputed_of(&selective(model, modules));
        assert_eq!(
            got,
            want.iter().copied().collect::<BTreeSet<_>>(),
            "{model} {modules:?}"
        );
    }
    // Nothing is recomputed without recompute, and a selective list adds up its modules.
    assert!(recomputed_of(&load("mixtral", "").expect("none")).is_empty());
    let both = recomputed_of(&selective("mixtral", &["core_attn", "moe_act"]));
    assert_eq!(both, BTreeSet::from([CoreAttention, ExpertActivation]));
}

/// DeepSeek-V3's up-projections are recomputed at their own shapes: the kv up-projection
/// from the 512-wide latent, the q one from the 1,536-wide one, split over TP.
#[test]
fn mla_up_projection_recompute_runs_the_up_projection_gemms() {
    let exp = selective("deepseek", &["mla_up_proj"]);
    let w = compile(&exp).expect("compile");
    let p = w.program(0, 0);
    let mut ks: Vec<u64> = p
        .ops
        .iter()
        .filter(|op| op.label.phase == Phase::Recompute)
        .filter_map(|op| match op.kind {
            OpKind::Compute { kernel } => Some(p.kernels[kernel as usize]),
            _ => None,
        })
        .filter(|k| matches!(k.name, KernelName::MlaQUp | KernelName::MlaKvUp))
        .map(|k| match k.shape {
            sim::workload::Shape::Gemm { k, n, .. } => {
                assert_eq!(n, 128 * if k == 1536 { 192 } else { 256 } / 2);
                k
            }
            _ => panic!("a GEMM"),
        })
        .collect();
    ks.sort_unstable();
    ks.dedup();
    assert_eq!(ks, vec![512, 1536]);
}

#[test]
fn activation_memory_falls_as_modules_are_added() {
    let ladders: [(&str, &[&[&str]]); 3] = [
        ("llama", &[&[], &["core_attn"], &["core_attn", "mlp"]]),
        (
            "mixtral",
            &[
                &[],
                &["core_attn"],
                &["core_attn", "moe_act"],
                &["core_attn", "moe_act", "layernorm"],
                &["core_attn", "moe", "layernorm"],
            ],
        ),
        (
            "deepseek",
            &[
                &[],
                &["core_attn"],
                &["core_attn", "mla_up_proj"],
                &["core_attn", "mla_up_proj", "shared_experts"],
                &["core_attn", "mla_up_proj", "moe", "layernorm", "mlp"],
            ],
        ),
    ];
    for (model, ladder) in ladders {
        let mut last = f64::INFINITY;
        for modules in ladder {
            let a = activations(&selective(model, modules));
            assert!(a < last, "{model} {modules:?}: {a} not below {last}");
            last = a;
        }
        // Full recompute keeps only each layer's input: less than any selective set.
        let full = load(model, "recompute = \"full\"").expect("full");
        assert!(activations(&full) < last, "{model}: full");
    }
}

#[test]
fn bad_module_lists_are_one_error_naming_the_key() {
    let cases = [
        ("llama", "[\"attn\"]", "unknown value `attn`"),
        ("llama", "[\"mlp\", \"mlp\"]", "`mlp` is listed twice"),
        ("llama", "[\"mla_up_proj\"]", "needs multi-latent attention"),
        ("llama", "[\"moe_act\"]", "needs a mixture-of-experts model"),
        ("llama", "[\"layernorm\"]", "fuses both norms"),
        ("mixtral", "[\"shared_experts\"]", "with shared experts"),
    ];
    for (model, list, want) in cases {
        let e = load(
            model,
            &format!("recompute = \"selective\"\nrecompute_modules = {list}"),
        )
        .expect_err(list);
        assert!(e.contains("training.recompute_modules"), "{list}: {e}");
        assert!(e.contains(want), "{list}: {e}");
        assert!(!e.contains('\n'), "{list}: one line: {e}");
    }
    let e = load(
        "mixtral",
        "precision = \"fp8\"\nrecompute = \"selective\"\nrecompute_modules = [\"moe_act\"]",
    )
    .expect_err("delayed");
    assert!(e.contains("delayed scaling"), "{e}");
    // Megatron-Core ignores the list outside selective recompute: so does fleetsim, saying so.
    let full = load(
        "llama",
        "recompute = \"full\"\nrecompute_modules = [\"mlp\"]",
    )
    .expect("full");
    assert!(full.warnings.iter().any(|w| w.contains("ignored")));
    assert_eq!(
        recomputed_of(&full),
        recomputed_of(&load("llama", "recompute = \"full\"").expect("full"))
    );
}

/// MLA's four projections do, per TP rank and token, 2 FLOPs per projection parameter over
/// TP: 2 × (11,010,048 + 37,748,736 + 4,128,768 + 16,777,216) / 2 for DeepSeek-V3 at TP 2
/// (arXiv 2412.19437 §2.1.1; docs/models.md), not the parameters of a QKV projection as wide
/// as MLA's heads.
#[test]
fn mla_projections_do_two_flops_per_parameter_per_token() {
    use sim::workload::{Pass, Shape};
    let exp = load("deepseek", "").expect("deepseek");
    let w = compile(&exp).expect("compile");
    let p = w.program(0, 0);
    let mut forward_flops = 0u64;
    let mut widths = BTreeSet::new();
    let mut tokens = 0;
    for k in p.kernels.iter().filter(|k| k.pass == Pass::Forward) {
        if let (
            KernelName::MlaQDown | KernelName::MlaKvDown | KernelName::MlaQUp | KernelName::MlaKvUp,
            Shape::Gemm { m, n, k: k_in, .. },
        ) = (k.name, k.shape)
        {
            forward_flops += k.flops;
            widths.insert((k.name, k_in, n));
            tokens = m;
        }
    }
    let params: u64 = 11_010_048 + 37_748_736 + 4_128_768 + 16_777_216;
    assert_eq!(forward_flops, 2 * tokens * params / 2, "{widths:?}");
    assert_eq!(
        widths,
        BTreeSet::from([
            (KernelName::MlaQDown, 7168, 1536 / 2),
            (KernelName::MlaKvDown, 7168, (512 + 64) / 2),
            (KernelName::MlaQUp, 1536, 128 * 192 / 2),
            (KernelName::MlaKvUp, 512, 128 * 256 / 2),
        ])
    );
    assert!(
        !p.kernels.iter().any(|k| k.name == KernelName::QkvProj),
        "MLA has no fused QKV projection"
    );
}

/// `mlp` recomputes the dense MLPs, wherever `model.moe_layer_freq` puts them: Mixtral with
/// every other layer dense (no leading `dense_layers`) accepts it and recomputes them, and
/// refuses it when every layer is a MoE layer.
#[test]
fn mlp_recompute_finds_dense_layers_between_moe_layers() {
    let training = "recompute = \"selective\"\nrecompute_modules = [\"mlp\"]";
    let all_moe = load("mixtral", training).expect_err("all MoE");
    assert!(all_moe.contains("needs dense MLP layers"), "{all_moe}");
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("recompute-modules");
    let path = dir.join("mixtral-interleaved-mlp.toml");
    let text = body("mixtral", training)
        .replace("layers = 4", "layers = 4\nmoe_layer_freq = [0, 1, 0, 1]");
    std::fs::write(&path, format!("name = \"x\"\n{text}")).expect("write");
    let exp = Experiment::load(&path, &sim::config::Overrides::none())
        .unwrap_or_else(|e| panic!("interleaved dense layers: {e}"));
    assert!(
        recomputed_of(&exp).contains(&KernelName::MlpUp),
        "{:?}",
        recomputed_of(&exp)
    );
}
