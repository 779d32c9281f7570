//! Blackwell's block-scaled precisions (issue 16, item 2): `training.precision = "mxfp8"`
//! (Transformer Engine `MXFP8BlockScaling`, Megatron-Core `--fp8-recipe mxfp8`) and `"nvfp4"`
//! (`NVFP4BlockScaling`, `--fp4-recipe nvfp4`), and the FP8 recipes by Megatron-Core's names
//! (`tensorwise`, `blockwise`).

mod support;

use support::{kernels, kernels_named};

use sim::compute::ComputeModel;
use sim::config::Precision;
use sim::experiment::Experiment;
use sim::layout::GroupKind;
use sim::workload::{
    CollectiveOp, Kernel, KernelName, OpKind, Pass, Program, Shape, Workload, compile,
};

/// Llama2-7B at TP 2 with SP on 8 B200s (or another GPU).
fn llama(gpu: &str, name: &str, training: &str) -> Experiment {
    support::experiment(
        "block-scaling",
        name,
        &format!(
            r#"
[cluster]
gpus = 8
gpu = "{gpu}"
gpus_per_host = 8
[model]
preset = "llama2-7b"
[parallel]
tp = 2
sequence_parallel = true
global_batch = 8
[training]
{training}
"#
        ),
    )
}

fn b200(name: &str, precision: &str) -> Experiment {
    llama("B200", name, &format!("precision = \"{precision}\""))
}

fn elements(k: &Kernel) -> u64 {
    match k.shape {
        Shape::Elementwise { elements, .. } => elements,
        _ => panic!("a cast is elementwise"),
    }
}

/// The TE GEMMs run in the block-scaled type in forward, dgrad and wgrad; Megatron's output
/// layer and router, and core attention, stay BF16.
#[test]
fn te_gemms_run_block_scaled_and_the_rest_stays_bf16() {
    for (name, precision) in [("mxfp8", Precision::Mxfp8), ("nvfp4", Precision::Nvfp4)] {
        let w = compile(&b200(name, name)).expect("compile");
        let p = w.program(0, 0);
        for gemm in [
            KernelName::QkvProj,
            KernelName::OutProj,
            KernelName::MlpUp,
            KernelName::MlpDown,
        ] {
            let ks = kernels_named(p, gemm);
            assert_eq!(ks.len(), 3, "{name} {gemm:?}: forward, dgrad, wgrad");
            assert!(ks.iter().all(|(k, _)| k.dtype == precision), "{name}");
        }
        for high in [KernelName::Logits, KernelName::CoreAttention] {
            assert!(
                kernels_named(p, high)
                    .iter()
                    .all(|(k, _)| k.dtype == Precision::Bf16),
                "{name} {high:?}"
            );
        }
    }
}

/// Every quantized GEMM operand is cast from BF16 once per use, four inputs forward and four
/// output gradients backward per layer and micro-batch, writing a rowwise and a columnwise copy
/// with their scales: MXFP8 read 2 + 2 × (1 + 1/32) bytes per element; NVFP4 an amax read 2,
/// read 2, 2 × (1/2 + 1/16), with the Hadamard transform's FLOPs. FP8 `blockwise` writes FP32
/// scales per 128 (the same bytes as MXFP8) and needs no amax reduction.
#[test]
fn casts_write_both_copies_with_their_scales() {
    for (gpu, name, training, bytes_of) in [
        (
            "B200",
            "cast-mxfp8",
            "precision = \"mxfp8\"",
            (|e| 4 * e + 2 * (e / 32)) as fn(u64) -> u64,
        ),
        ("B200", "cast-nvfp4", "precision = \"nvfp4\"", |e| {
            2 * e + 2 * e + 2 * (e / 2 + e / 16)
        }),
        (
            "H100-SXM",
            "cast-blockwise",
            "precision = \"fp8\"\nfp8_recipe = \"blockwise\"",
            |e| 4 * e + 2 * (e / 32),
        ),
    ] {
        let exp = llama(gpu, name, training);
        let micro_batches = exp.micro_batches;
        let w = compile(&exp).expect("compile");
        let p = w.program(0, 0);
        let (mut fwd, mut bwd) = (0, 0);
        for (k, n) in kernels_named(p, KernelName::Fp8Cast) {
            let e = elements(&k);
            assert_eq!(k.bytes, bytes_of(e), "{name}: {k:?}");
            let rht = if name == "cast-nvfp4" { 32 * e } else { 0 };
            assert_eq!(k.flops, 4 * e + rht, "{name}");
            match k.pass {
                Pass::Forward => fwd += n,
                _ => bwd += n,
            }
        }
        assert_eq!(fwd, 4 * 32 * micro_batches, "{name}");
        assert_eq!(bwd, 4 * 32 * micro_batches, "{name}");
        // Per-tensor amaxes: NVFP4's global scale is all-reduced over TP before each SP-gathered
        // cast, as current scaling's; block scales need none.
        let scalar_tp_reductions = |p: &Program| {
            p.ops
                .iter()
                .filter(|op| {
                    matches!(
                        op.kind,
                        OpKind::Collective {
                            op: CollectiveOp::AllReduce,
                            group: GroupKind::Tp,
                            bytes: 4,
                        }
                    )
                })
                .count()
        };
        let bf16 = compile(&llama(gpu, &format!("{name}-bf16"), "")).expect("bf16");
        let extra = scalar_tp_reductions(p) - scalar_tp_reductions(bf16.program(0, 0));
        // Before the QKV and fc1 inputs forward and the output projection's and fc2's output
        // gradients backward: four per layer and micro-batch.
        let want = if name == "cast-nvfp4" {
            4 * 32 * micro_batches
        } else {
            0
        };
        assert_eq!(extra as u64, want, "{name}");
    }
}

/// Megatron-Core's spellings are the same programs: `fp8` with `fp8_recipe = "mxfp8"` is
/// `mxfp8`, `tensorwise` is `current`.
#[test]
fn megatron_recipe_names_are_the_same_programs() {
    let shape = |w: &Workload| {
        let p = w.program(0, 0);
        (p.ops.len(), kernels(p))
    };
    let a = compile(&b200("mx-a", "mxfp8")).expect("a");
    let b = compile(&llama(
        "B200",
        "mx-b",
        "precision = \"fp8\"\nfp8_recipe = \"mxfp8\"",
    ))
    .expect("b");
    assert_eq!(shape(&a), shape(&b));
    let c = compile(&llama(
        "H100-SXM",
        "cs-a",
        "precision = \"fp8\"\nfp8_recipe = \"current\"",
    ))
    .expect("c");
    let d = compile(&llama(
        "H100-SXM",
        "cs-b",
        "precision = \"fp8\"\nfp8_recipe = \"tensorwise\"",
    ))
    .expect("d");
    assert_eq!(shape(&c), shape(&d));
}

/// A compute-bound GEMM's time follows the GPU file's rate for its type through the same
/// per-clock efficiency: MXFP8 as FP8 less what its block scales cost (the compute family's
/// `gemm.peak_fraction.mxfp8`), NVFP4 at twice FP8's rate, BF16 at half.
#[test]
fn gemm_rates_come_from_the_gpu_file() {
    let model = ComputeModel::embedded().expect("model");
    let db = sim::gpu::GpuDatabase::embedded().expect("gpus");
    let b200 = db.get("B200").expect("B200");
    let time = |dtype| {
        let k = sim::compute::calibration::gemm_kernel(8192, 8192, 8192, dtype);
        model.kernel_time(&k, b200).duration.as_secs_f64()
    };
    let (bf16, fp8, mx, nv) = (
        time(Precision::Bf16),
        time(Precision::Fp8),
        time(Precision::Mxfp8),
        time(Precision::Nvfp4),
    );
    assert!(
        (mx / fp8 - 0.87 / 0.8276).abs() < 0.005,
        "MXFP8 {mx}, FP8 {fp8}"
    );
    assert!(nv < fp8 && mx < bf16, "{nv} {fp8} {mx} {bf16}");
    // Launch cost and the per-tile overhead keep the ratio just under the peaks' 2x.
    assert!((1.6..=2.0).contains(&(fp8 / nv)), "{}", fp8 / nv);
}

/// Memory per parameter: BF16 weights with TE's cached quantized copies (rowwise and
/// columnwise with scales), and activations whose quantized GEMM inputs shrink with the format.
#[test]
fn memory_counts_quantized_copies_and_scales() {
    let bf16 = b200("mem-bf16", "bf16");
    let mx = b200("mem-mxfp8", "mxfp8");
    let nv = b200("mem-nvfp4", "nvfp4");
    assert_eq!(
        mx.memory_inputs().param_bytes().weights,
        2.0 + 2.0 * 33.0 / 32.0
    );
    assert_eq!(
        nv.memory_inputs().param_bytes().weights,
        2.0 + 2.0 * 9.0 / 16.0
    );
    let act = |e: &Experiment| e.memory[0].activations;
    assert!(act(&nv) < act(&mx) && act(&mx) < act(&bf16));
}
