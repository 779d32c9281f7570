//! Issue 10's workload mechanisms, each pinned to its source: FP8 as Transformer Engine runs
//! it (BF16 attention unless asked, casts before every FP8 GEMM, FP8 activations), Megatron-
//! Core's uneven virtual-pipeline split, and the per-chip clock spread.

mod support;

use support::kernels_named;

use sim::compute::ComputeModel;
use sim::config::Precision;
use sim::experiment::Experiment;
use sim::layout::GroupKind;
use sim::workload::{CollectiveOp, Kernel, KernelName, OpKind, Pass, Shape, Stream, compile};

fn experiment(name: &str, body: &str) -> Experiment {
    support::experiment("fp8-tests", name, body)
}

/// Llama2-7B at TP 2 with SP on 16 H100s (NeMo's 16K long-sequence row, at 4K).
fn llama(name: &str, training: &str) -> Experiment {
    experiment(
        name,
        &format!(
            r#"
[cluster]
gpus = 16
gpu = "H100-SXM"
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

/// Transformer Engine's `fp8_dpa` is off by default: FP8 training runs core attention in BF16,
/// at exactly the BF16 run's kernel time; with `training.fp8_attention` it runs in FP8.
#[test]
fn fp8_attention_runs_at_the_bf16_rate_by_default() {
    let bf16 = compile(&llama("bf16", "precision = \"bf16\"")).expect("bf16");
    let fp8 = compile(&llama("fp8", "precision = \"fp8\"")).expect("fp8");
    let fp8_dpa = compile(&llama(
        "fp8-dpa",
        "precision = \"fp8\"\nfp8_attention = true",
    ))
    .expect("fp8 dpa");
    let model = ComputeModel::embedded().expect("model");
    let db = sim::gpu::GpuDatabase::embedded().expect("gpus");
    let h100 = db.get("H100-SXM").expect("H100");
    let attention =
        |w: &sim::workload::Workload| kernels_named(w.program(0, 0), KernelName::CoreAttention);
    let (b, f, d) = (attention(&bf16), attention(&fp8), attention(&fp8_dpa));
    assert_eq!(b.len(), 2);
    for ((kb, _), ((kf, _), (kd, _))) in b.iter().zip(f.iter().zip(&d)) {
        assert_eq!(kf.dtype, Precision::Bf16);
        assert_eq!(kd.dtype, Precision::Fp8);
        assert_eq!(
            model.kernel_time(kf, h100).duration,
            model.kernel_time(kb, h100).duration
        );
        assert!(model.kernel_time(kd, h100).duration < model.kernel_time(kb, h100).duration);
    }
}

/// Every FP8 GEMM's operands are quantized by a cast: per layer and micro-batch four in the
/// forward (the inputs of QKV, output projection, fc1, fc2) and four in the backward (the
/// output gradients), each reading 2 and writing 2 bytes per element (the FP8 tensor and its
/// transpose), plus a 2-byte amax pass under current scaling. The output layer is Megatron's
/// own module and stays BF16, uncast.
#[test]
fn fp8_gemms_are_preceded_by_casts_as_transformer_engine_issues_them() {
    for (recipe, per_element) in [("delayed", 4), ("current", 6)] {
        let exp = llama(
            &format!("fp8-{recipe}"),
            &format!("precision = \"fp8\"\nfp8_recipe = \"{recipe}\""),
        );
        let micro_batches = exp.micro_batches;
        let w = compile(&exp).expect("fp8");
        let p = w.program(0, 0);
        let casts = kernels_named(p, KernelName::Fp8Cast);
        let layers = 32;
        let (fwd, bwd): (u64, u64) = casts.iter().fold((0, 0), |(f, b), (k, n)| {
            assert_eq!(k.bytes, per_element * elements(k), "{k:?}");
            if k.pass == Pass::Forward {
                (f + n, b)
            } else {
                (f, b + n)
            }
        });
        assert_eq!(fwd, 4 * layers * micro_batches, "{recipe} forward casts");
        assert_eq!(bwd, 4 * layers * micro_batches, "{recipe} backward casts");
        for (k, _) in kernels_named(p, KernelName::Logits) {
            assert_eq!(k.dtype, Precision::Bf16);
        }
        for (k, _) in kernels_named(p, KernelName::MlpUp) {
            assert_eq!(k.dtype, Precision::Fp8);
        }
    }
    let bf16 = compile(&llama("bf16-nocast", "precision = \"bf16\"")).expect("bf16");
    assert!(kernels_named(bf16.program(0, 0), KernelName::Fp8Cast).is_empty());
}

fn elements(k: &Kernel) -> u64 {
    match k.shape {
        Shape::Elementwise { elements, .. } => elements,
        _ => panic!("a cast is elementwise"),
    }
}

/// NVIDIA's MLPerf Training v4.0 GPT-3 175B on 512 H100s (mlcommons/training_results_v4.0,
/// NVIDIA `config_DGXH100_64x8x128x4x8_mbs2.sh`): TP 4, PP 8, VP 4, micro-batch 2, SP, no
/// recompute, FP8 with FP8 parameters, BF16 gradient reduction, distributed fused Adam
/// (gradients sharded: ZeRO-2). It ran, so it fits in 80 GB.
#[test]
fn the_mlperf_gpt3_fp8_recipe_fits_in_hbm_with_fp8_activations() {
    let body = |precision: &str| {
        format!(
            r#"
[cluster]
gpus = 512
gpu = "H100-SXM"
gpus_per_host = 8
[model]
preset = "gpt3-175b"
[parallel]
tp = 4
pp = 8
vp = 4
sequence_parallel = true
zero = 2
micro_batch = 2
global_batch = 2304
[training]
precision = "{precision}"
recompute = "none"
fp8_param_gather = true
grad_reduce_in_bf16 = true
memory_check = "off"
"#
        )
    };
    let fp8 = experiment("mlperf-fp8", &body("fp8"));
    let peak = |e: &Experiment| e.memory.iter().map(|m| m.total()).fold(0.0, f64::max) / 1e9;
    assert!(peak(&fp8) < 80.0, "{} GB", peak(&fp8));
    // Per layer, 34·s·b·h/t in BF16 (Korthikanti et al. §4, flash attention) becomes 29: the
    // QKV and fc1 inputs and the fc2 input (4h wide) in FP8, plus delayed scaling's FP8 copy of
    // the attention output.
    let bf16 = experiment("mlperf-bf16", &body("bf16"));
    let (a8, a16) = (fp8.memory[3].activations, bf16.memory[3].activations);
    let lse = 4.0 * 96.0 / (34.0 * 12288.0);
    let want = (29.0 + lse) / (34.0 + lse);
    assert!(
        (a8 / a16 / want - 1.0).abs() < 0.01,
        "{a8} / {a16} against {want}"
    );
}

/// Megatron-Core's split with the embedding and the loss counted as layers
/// (`get_num_layers_to_build`): Llama 3.1 405B's 126 layers on PP 8 × VP 8 give the first
/// and last virtual stages one layer and every other two; the same follows from
/// `first_stage_layers = last_stage_layers = 15`.
#[test]
fn llama_405b_splits_126_layers_over_pp8_vp8_as_megatron_core_does() {
    let body = |parallel: &str| {
        format!(
            r#"
[cluster]
gpus = 1024
gpu = "H100-SXM"
gpus_per_host = 8
[model]
preset = "llama3.1-405b"
[parallel]
tp = 8
pp = 8
vp = 8
cp = 2
sequence_parallel = true
global_batch = 64
{parallel}
[training]
memory_check = "off"
"#
        )
    };
    for (name, parallel) in [
        (
            "account-for",
            "account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true",
        ),
        (
            "first-last",
            "first_stage_layers = 15\nlast_stage_layers = 15",
        ),
    ] {
        let exp = experiment(&format!("l405-{name}"), &body(parallel));
        assert_eq!(exp.stage_layers, [15, 16, 16, 16, 16, 16, 16, 15]);
        let chunks = |stage: usize| exp.chunk_layers[stage].clone();
        let sizes = |stage| chunks(stage).iter().map(Vec::len).collect::<Vec<_>>();
        assert_eq!(sizes(0), [1, 2, 2, 2, 2, 2, 2, 2]);
        assert_eq!(sizes(3), [2; 8]);
        assert_eq!(sizes(7), [2, 2, 2, 2, 2, 2, 2, 1]);
        // Virtual stages hold consecutive layers: (stage 0, chunk 0) has layer 0, (stage 1,
        // chunk 0) layers 1-2, ... and the last layer sits in (stage 7, chunk 7).
        assert_eq!(chunks(0)[0], [0]);
        assert_eq!(chunks(1)[0], [1, 2]);
        assert_eq!(chunks(7)[7], [125]);
        let all: usize = (0..8).map(|s| sizes(s).iter().sum::<usize>()).sum();
        assert_eq!(all, 126);
    }
}

/// Delayed scaling's amax all-reduce runs on Megatron-Core's amax group
/// (`parallel_state.get_amax_reduction_group`), a process group of its own: its own NCCL
/// communicator and stream. So it never queues behind the data-parallel group's gradient
/// buckets, which run on the DP group's stream. MLPerf Training v4.0's GPT-3 at 10,752 and
/// 11,616 H100s (`configs/validation/mlperf_gpt3.csv`, 0.921 s a step) came out at 1.0 s
/// with them on one stream, every virtual stage's last backward waiting for a 1.8 GB
/// reduce-scatter.
#[test]
fn amax_reductions_have_a_communicator_of_their_own() {
    let body = |precision: &str| {
        format!(
            r#"
[cluster]
gpus = 16
gpu = "H100-SXM"
gpus_per_host = 4
[model]
layers = 8
hidden = 4096
ffn_hidden = 16384
heads = 32
seq_len = 2048
vocab = 32000
[parallel]
tp = 2
pp = 2
vp = 2
sequence_parallel = true
global_batch = 32
[training]
precision = "{precision}"
overlap_grad_reduce = true
overlap_param_gather = true
"#
        )
    };
    let workload = compile(&experiment("amax-stream", &body("fp8"))).expect("compiles");
    let p = workload.program(0, 0);
    let on = |stream: Stream, op: CollectiveOp, small: bool| {
        p.ops
            .iter()
            .filter(|o| o.stream == stream)
            .filter(|o| {
                matches!(o.kind, OpKind::Collective { op: c, group: GroupKind::DpCp, bytes }
                    if c == op && (bytes < 1024) == small)
            })
            .count()
    };
    // Two chunks (VP 2), each once forward and once backward per micro-batch (8 per DP rank).
    assert_eq!(on(Stream::Amax, CollectiveOp::AllReduce, true), 2 * 2 * 8);
    assert_eq!(on(Stream::Dp, CollectiveOp::AllReduce, true), 0);
    assert!(on(Stream::Dp, CollectiveOp::ReduceScatter, false) > 0);
    assert_eq!(on(Stream::Amax, CollectiveOp::ReduceScatter, false), 0);
    // BF16 has no amaxes to reduce.
    let bf16 = compile(&experiment("amax-stream-bf16", &body("bf16"))).expect("compiles");
    assert!(
        bf16.program(0, 0)
            .ops
            .iter()
            .all(|o| o.stream != Stream::Amax)
    );
}

/// Transformer Engine's delayed and current scaling run the forward FP8 GEMM with fast
/// accumulation; `Float8BlockScaling` requires the split accumulator for every GEMM
/// (`recipe/__init__.py`), so a blockwise run's forward GEMMs take the fitted time.
#[test]
fn blockwise_fp8_forward_gemms_keep_the_split_accumulator() {
    let db = sim::gpu::GpuDatabase::embedded().expect("gpus");
    let h100 = db.get("H100-SXM").expect("H100");
    let forward_gemm = |recipe: &str| {
        let exp = llama(
            recipe,
            &format!("precision = \"fp8\"\nfp8_recipe = \"{recipe}\""),
        );
        let w = compile(&exp).expect(recipe);
        let model = exp.compute_model().expect("model");
        let (kernel, _) = kernels_named(w.program(0, 0), KernelName::MlpDown)
            .into_iter()
            .find(|(k, _)| k.pass == Pass::Forward)
            .expect("mlp_down forward");
        (
            model.table_time(&kernel, h100).seconds(),
            model.kernel_time(&kernel, h100).seconds(),
        )
    };
    for recipe in ["delayed", "current"] {
        let (table, engine) = forward_gemm(recipe);
        assert!(
            (1.1..=1.2).contains(&(table / engine)),
            "{recipe}: {table} / {engine}"
        );
    }
    let (table, engine) = forward_gemm("blockwise");
    assert_eq!(table, engine);
}
