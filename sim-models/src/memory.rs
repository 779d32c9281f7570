//! Memory per GPU: weights, gradients, optimizer state and activations, per pipeline stage.
//!
//! Sources:
//! - Bytes per parameter by precision and their sharding under the distributed optimizer:
//!   Megatron-LM `docs/source/api-guide/dist_optimizer.md` (bf16 params with fp32 grads:
//!   18 bytes, or 6 + 12/d distributed; fp16: 20 or 4 + 16/d; fp32: 16 or 8 + 8/d).
//! - ZeRO stages 2 and 3 additionally shard gradients, then parameters (Rajbhandari et al.,
//!   "ZeRO", SC'20, §5.1, Figure 1).
//! - Activations per layer: Korthikanti et al., "Reducing Activation Recomputation in Large
//!   Transformer Models" (MLSys'23), §4: `sbh(34/t + 5as/(ht))` with sequence parallelism,
//!   `sbh(10 + 24/t + 5as/(ht))` without, `34sbh/t` with selective recompute, `2sbh` for full
//!   recompute. We keep the same terms but generalise them to GQA widths, any FFN size and
//!   SwiGLU (three `f`-wide tensors instead of two), and with flash attention (the default of
//!   Megatron-Core with Transformer Engine) the `5as²b` softmax term becomes the fp32
//!   log-sum-exp, `4·a·s·b`.
//! - Micro-batches in flight on stage `s`: Megatron's 1F1B warm-up `pp − s − 1` plus one
//!   (`megatron/core/pipeline_parallel/schedules.py`); interleaved:
//!   `2(pp − s − 1) + (vp − 1)·pp` warm-up model chunks plus one.

use crate::config::{
    Fp8Recipe, Precision, Recompute, RecomputeModule, RecomputeModules, TensorClass,
};
use crate::layout::ParallelLayout;
use crate::model::{Activation, ModelSpec, Moe};

/// What the memory estimate depends on beyond model and layout.
#[derive(Debug, Clone, Copy)]
pub struct MemoryInputs {
    pub precision: Precision,
    pub zero: u32,
    pub recompute: Recompute,
    /// What selective recompute re-runs (`TrainingConfig::recomputed_modules`; empty unless
    /// `recompute` is `Selective`).
    pub recompute_modules: RecomputeModules,
    pub sequence_parallel: bool,
    pub flash_attention: bool,
    pub micro_batch: u64,
    /// Micro-batches per iteration per replica (gradient accumulation steps).
    pub micro_batches: u64,
    pub fp8_recipe: Fp8Recipe,
    /// FP8 weights, gathered in FP8 (`training.fp8_param_gather`).
    pub fp8_param_gather: bool,
    /// BF16 gradient buffers (`training.grad_reduce_in_bf16`).
    pub grad_reduce_in_bf16: bool,
}

/// Bytes per parameter of the model state, before sharding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamBytes {
    /// Resident weights, with Transformer Engine's FP8 copies under FP8.
    pub weights: f64,
    /// What the distributed optimizer's parameter all-gather moves per parameter.
    pub gathered: f64,
    pub gradients: f64,
    pub optimizer: f64,
}

impl MemoryInputs {
    /// Bytes per parameter of weights, gradients and optimizer state.
    /// - BF16 (Megatron `docs/source/api-guide/dist_optimizer.md`): bf16 weights, fp32
    ///   gradients, fp32 master + Adam m, v; FP16 adds loss-scaled fp16 gradients' fp32 copy;
    ///   FP32 has no master copy.
    /// - FP8 (Transformer Engine): the bf16 weights plus the FP8 copy and its transpose that TE
    ///   caches across micro-batches (`is_first_microbatch`); with `fp8_param_gather` the
    ///   weights are FP8 (data and transpose) and gather as 1 byte.
    /// - `grad_reduce_in_bf16` halves the gradient buffer.
    /// - MXFP8 / NVFP4 (Transformer Engine `MXFP8BlockScaling`, `NVFP4BlockScaling`): the
    ///   bf16 weights plus the cached quantized copies TE computes from them, rowwise and
    ///   columnwise, each with its scales: 2 × (1 + 1/32) bytes for MXFP8, 2 × (1/2 + 1/16)
    ///   for NVFP4; parameters gather in bf16.
    pub fn param_bytes(&self) -> ParamBytes {
        let (weights, gathered, gradients, optimizer) = match self.precision {
            Precision::Bf16 => (2.0, 2.0, 4.0, 12.0),
            Precision::Mxfp8 => (2.0 + 2.0 * (1.0 + 1.0 / 32.0), 2.0, 4.0, 12.0),
            Precision::Nvfp4 => (2.0 + 2.0 * (0.5 + 1.0 / 16.0), 2.0, 4.0, 12.0),
            Precision::Fp8 if self.fp8_param_gather => (2.0, 1.0, 4.0, 12.0),
            Precision::Fp8 => (4.0, 2.0, 4.0, 12.0),
            Precision::Fp16 => (2.0, 2.0, 2.0, 16.0),
            Precision::Fp32 | Precision::Tf32 => (4.0, 4.0, 4.0, 8.0),
        };
        let gradients = if self.grad_reduce_in_bf16 && gradients > 2.0 {
            2.0
        } else {
            gradients
        };
        ParamBytes {
            weights,
            gathered,
            gradients,
            optimizer,
        }
    }
}

/// Bytes per GPU on one pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageMemory {
    pub stage: u32,
    /// Parameters held by one GPU of this stage (before ZeRO-3 sharding).
    pub params: f64,
    pub weights: f64,
    pub gradients: f64,
    pub optimizer: f64,
    pub activations: f64,
}

impl StageMemory {
    pub fn total(&self) -> f64 {
        self.weights + self.gradients + self.optimizer + self.activations
    }

    pub fn of(&self, class: TensorClass) -> f64 {
        match class {
            TensorClass::Weights => self.weights,
            TensorClass::Gradients => self.gradients,
            TensorClass::Optimizer => self.optimizer,
            TensorClass::Activations => self.activations,
        }
    }

    /// What stays in HBM when the classes `in_cxl` live in CXL memory.
    pub fn in_hbm(&self, in_cxl: &[TensorClass]) -> f64 {
        self.total() - in_cxl.iter().map(|&c| self.of(c)).sum::<f64>()
    }
}

/// Layers of each model chunk of a stage holding `count` layers in `vp` chunks: as even as
/// possible. Where `count` is not a multiple of `vp` the short chunks sit next to the
/// embedding on the first stage and next to the loss on the last, as Megatron-Core's
/// `account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split` leave them
/// (`transformer_block.py`, `get_num_layers_to_build`: one layer fewer on the first and last
/// virtual stage); elsewhere the first chunks are short.
pub fn chunk_counts(count: u64, vp: u64, first: bool, last: bool) -> Vec<u64> {
    let vp = vp.max(1);
    let base = count.div_ceil(vp);
    let short = base * vp - count;
    let (front, back) = match (first, last) {
        (true, true) => (short.div_ceil(2), short / 2),
        (false, true) => (0, short),
        _ => (short, 0),
    };
    (0..vp)
        .map(|c| {
            if c < front || c >= vp - back {
                base - 1
            } else {
                base
            }
        })
        .collect()
}

/// Layer ids of every model chunk of every pipeline stage, `[stage][chunk]` (MTP modules are
/// ids from `model.layers` on).
pub type ChunkLayers = Vec<Vec<Vec<u64>>>;

/// Layer ids of every model chunk of every stage, `[stage][chunk]`, given the layer count of
/// every stage. Megatron's interleaved assignment: virtual stage `chunk·pp + s` holds the next
/// contiguous block of layers, virtual stages in order, each of the size [`chunk_counts`]
/// gives it. `mtp_layers` multi-token prediction modules (ids after the last layer) go to the
/// last virtual stage, beside the loss, as Megatron-Core builds them without a layout.
pub fn split_chunks(vp: u32, per_stage: &[u64], mtp_layers: u64) -> ChunkLayers {
    let chunks = vp.max(1) as usize;
    let vp = chunks as u64;
    let pp = per_stage.len();
    let counts: Vec<Vec<u64>> = per_stage
        .iter()
        .enumerate()
        .map(|(s, &c)| chunk_counts(c, vp, s == 0, s + 1 == pp))
        .collect();
    let mut out = vec![Vec::with_capacity(chunks); pp];
    let mut start = 0;
    for chunk in 0..chunks {
        for (s, c) in counts.iter().enumerate() {
            let n = c[chunk];
            out[s].push((start..start + n).collect::<Vec<u64>>());
            start += n;
        }
    }
    if let Some(last) = out.last_mut().and_then(|chunks| chunks.last_mut()) {
        last.extend(start..start + mtp_layers);
    }
    out
}

/// Dense and expert parameters of layer `layer` held by one GPU. Norms are replicated across
/// TP; everything else is split (column/row-parallel linears). Expert weights split over EP and
/// expert-TP.
pub fn layer_params_per_rank(model: &ModelSpec, layout: &ParallelLayout, layer: u64) -> (f64, f64) {
    let t = f64::from(layout.tp);
    let norms = 2.0 * model.norm_params() as f64;
    let dense = (model.layer_dense_params(layer) as f64 - norms) / t + norms;
    let expert =
        model.layer_expert_params(layer) as f64 / (f64::from(layout.ep) * f64::from(layout.etp));
    (dense, expert)
}

/// Output-layer parameters on one GPU of the last stage (vocab-parallel). With tied embeddings
/// and PP > 1 the last stage keeps its own copy of the word embeddings (Megatron-LM
/// `shared_embedding_or_output_weight`).
pub fn output_params_per_rank(model: &ModelSpec, layout: &ParallelLayout) -> f64 {
    let output = if model.tied_embeddings && layout.pp > 1 {
        model.vocab * model.hidden
    } else {
        model.output_params()
    };
    output as f64 / f64::from(layout.tp)
}

/// Activation bytes of one layer for one micro-batch on one GPU.
pub fn layer_activation_bytes(
    model: &ModelSpec,
    layout: &ParallelLayout,
    inputs: &MemoryInputs,
    layer: u64,
) -> f64 {
    let t = f64::from(layout.tp);
    let sp = inputs.sequence_parallel && layout.tp > 1;
    let s = (model.seq_len / u64::from(layout.cp)) as f64;
    let sb = s * inputs.micro_batch as f64;
    let h = model.hidden as f64;
    if inputs.recompute == Recompute::Full {
        // Only each layer's input is kept.
        return 2.0 * sb * h / if sp { t } else { 1.0 };
    }
    let (q, kv) = model.qkv_widths();
    let (q, kv) = (q as f64, kv as f64);
    // Under FP8, Transformer Engine's linears keep their inputs as FP8 (Linear and
    // LayerNormLinear save the quantized input, `save_for_backward` in `module/linear.py`,
    // `layernorm_linear.py`): 1 byte instead of 2 for the QKV, fc1 and fc2 inputs; with delayed
    // scaling the output projection also keeps an FP8 copy of the attention output, which
    // attention keeps in BF16 anyway (Megatron-Core avoids it for other recipes with
    // `save_original_input`).
    let fp8 = inputs.precision == Precision::Fp8;
    let modules = inputs.recompute_modules;
    let moe_layer = model.is_moe_layer(layer);
    // Bytes per element of a stashed GEMM input: the quantized copy wgrad reads. FP8: 1; under
    // block scaling that copy is the columnwise one with its scales (`blockwise`: an FP32
    // scale per 128, MXFP8: an E8M0 byte per 32, NVFP4: half a byte and an E4M3 byte per 16).
    let gemm_input = match (inputs.precision, inputs.fp8_recipe) {
        (Precision::Fp8, Fp8Recipe::Blockwise) => 1.0 + 4.0 / 128.0,
        (Precision::Fp8, _) => 1.0,
        (Precision::Mxfp8, _) => 1.0 + 1.0 / 32.0,
        (Precision::Nvfp4, _) => 0.5 + 1.0 / 16.0,
        _ => 2.0,
    };
    // Kept whole on every TP rank unless sequence parallel: the inputs of QKV and of the MLP,
    // two dropout masks and two norm inputs.
    let replicated = if fp8 {
        8.0 * sb * h
    } else if inputs.precision.is_quantized() {
        (6.0 + 2.0 * gemm_input) * sb * h
    } else {
        10.0 * sb * h
    };
    // Selective recompute drops a norm's output, the input of the GEMM after it, where the
    // norm is a module of its own (`layernorm`: the input norm under MLA, the pre-MLP norm of
    // MoE layers; elsewhere Transformer Engine fuses it into the QKV / fc1 linear and
    // Megatron-Core has nothing to recompute), and fc1's input with the dense MLP (`mlp`, whose
    // checkpoint keeps the norm's input). Under FP8 Megatron-Core then makes the linear keep
    // its BF16 input (`set_save_original_input`), which the checkpoint frees: the FP8 copy
    // goes.
    let norm_outputs = u8::from(modules.has(RecomputeModule::Layernorm) && model.mla.is_some())
        + u8::from(modules.has(RecomputeModule::Layernorm) && moe_layer)
        + u8::from(modules.has(RecomputeModule::Mlp) && !moe_layer);
    let replicated = if norm_outputs > 0 {
        replicated - f64::from(norm_outputs) * gemm_input * sb * h
    } else {
        replicated
    };
    let core = match (
        modules.has(RecomputeModule::CoreAttn),
        inputs.flash_attention,
    ) {
        (true, _) => 0.0,
        (_, true) => 4.0 * model.heads as f64 * sb,
        (_, false) => 5.0 * model.heads as f64 * s * sb,
    };
    // Q and K, V, and the attention output feeding the output projection.
    let out_proj_copy = if fp8 && inputs.fp8_recipe == Fp8Recipe::Delayed {
        sb * q
    } else {
        0.0
    };
    let attention = if modules.has(RecomputeModule::MlaUpProj) && model.mla.is_some() {
        // `mla_up_proj` drops the up-projections' outputs after RoPE, Q, K and V, and
        // rebuilds them from the latents when core attention's backward starts.
        2.0 * sb * q + out_proj_copy + core
    } else {
        2.0 * sb * (q + kv) + 2.0 * sb * kv + 2.0 * sb * q + out_proj_copy + core
    };
    // The activation's input (fc1's output) in BF16 and its output (fc2's input), quantized
    // under FP8, MXFP8 and NVFP4.
    let fc2_input = gemm_input;
    // Bytes per token of an MLP's inner activations at fc1 width `f` (per TP shard).
    let mlp_inner = |f: f64| match model.activation {
        // GELU keeps its input; squared ReLU keeps relu's output, which both relu's and the
        // square's backward read: one tensor of fc1's width either way.
        Activation::Gelu | Activation::Relu2 => (2.0 + fc2_input) * f,
        Activation::Swiglu => (4.0 + fc2_input) * f,
    };
    let (mlp, experts) = match model.moe {
        // The whole MoE layer is recomputed from its input (`moe`).
        Some(_) if moe_layer && modules.has(RecomputeModule::Moe) => (0.0, 0.0),
        Some(m) if moe_layer => {
            let f = m.ffn_hidden as f64;
            // `moe_act` drops the routed experts' activation output, fc2's input.
            let routed_inner = |width: f64| {
                if modules.has(RecomputeModule::MoeAct) {
                    mlp_inner(width) - fc2_input * width
                } else {
                    mlp_inner(width)
                }
            };
            // The routed experts keep fc1's input and their inner activations for the
            // tokens this rank's experts compute.
            let tokens = expert_tokens(layout, sp, sb, &m);
            let routed = tokens * (fc2_input * h + routed_inner(f / f64::from(layout.etp)));
            // Shared experts run on every token like a dense MLP; `shared_experts` keeps
            // nothing of them but their input, which is the MoE layer's.
            let shared = if modules.has(RecomputeModule::SharedExperts) {
                0.0
            } else {
                m.shared_experts as f64 * (2.0 * sb * h + sb * mlp_inner(f))
            };
            (shared, routed)
        }
        // The dense MLP is recomputed from its input (`mlp`).
        _ if modules.has(RecomputeModule::Mlp) => (0.0, 0.0),
        _ => (sb * mlp_inner(model.ffn_hidden as f64), 0.0),
    };
    experts
        + if sp {
            (replicated + attention + mlp) / t
        } else {
            replicated + (attention + mlp) / t
        }
}

/// Tokens the routed experts of one GPU compute per micro-batch: the `sb` tokens of this CP
/// rank, split over TP when sequence parallel, copied to `top_k` experts, all-to-all over EP,
/// then gathered over expert-TP ([`crate::layout::expert_tp_gather`]); on the most loaded EP
/// rank ([`Moe::hottest_rank_share`]), the one that runs out of memory first.
fn expert_tokens(layout: &ParallelLayout, sp: bool, sb: f64, moe: &Moe) -> f64 {
    let gather = f64::from(crate::layout::expert_tp_gather(layout.tp, layout.etp, sp));
    let routing = if sp { sb / f64::from(layout.tp) } else { sb };
    let ep = u64::from(layout.ep);
    let share = moe.hottest_rank_share(ep, (routing * gather).round() as u64);
    routing * moe.top_k as f64 * gather * share
}

/// Memory of every pipeline stage, its chunks holding `chunks[stage][chunk]` layers.
pub fn estimate(
    model: &ModelSpec,
    layout: &ParallelLayout,
    chunks: &[Vec<Vec<u64>>],
    inputs: &MemoryInputs,
) -> Vec<StageMemory> {
    (0..layout.pp)
        .map(|stage| stage_memory(model, layout, chunks, inputs, stage))
        .collect()
}

/// Bytes per GPU of the weights, gradients and optimizer state of `dense` and `expert`
/// parameters, sharded over their data-parallel group as the ZeRO stage says (dense over
/// DP × CP, experts over the expert data-parallel group).
pub fn state_bytes(
    dense: f64,
    expert: f64,
    layout: &ParallelLayout,
    inputs: &MemoryInputs,
) -> (f64, f64, f64) {
    let ParamBytes {
        weights: w,
        gradients: g,
        optimizer: o,
        ..
    } = inputs.param_bytes();
    let d_dense = f64::from(layout.dp * layout.cp);
    let d_expert = f64::from(layout.expert_dp());
    let part = |bytes: f64, sharded: bool| {
        if sharded {
            dense * bytes / d_dense + expert * bytes / d_expert
        } else {
            (dense + expert) * bytes
        }
    };
    let z = inputs.zero;
    (part(w, z >= 3), part(g, z >= 2), part(o, z >= 1))
}

/// The embedding's dropout mask for one micro-batch in flight, bytes per GPU.
pub fn embedding_activation_bytes(
    model: &ModelSpec,
    layout: &ParallelLayout,
    inputs: &MemoryInputs,
) -> f64 {
    let sp = inputs.sequence_parallel && layout.tp > 1;
    let sb = (model.seq_len / u64::from(layout.cp) * inputs.micro_batch) as f64;
    sb * model.hidden as f64 / if sp { f64::from(layout.tp) } else { 1.0 }
}

/// The fp32 logits of one micro-batch for its cross-entropy (Korthikanti et al. §4.3), bytes
/// per GPU.
pub fn logits_activation_bytes(
    model: &ModelSpec,
    layout: &ParallelLayout,
    inputs: &MemoryInputs,
) -> f64 {
    let sb = (model.seq_len / u64::from(layout.cp) * inputs.micro_batch) as f64;
    4.0 * sb * model.vocab as f64 / f64::from(layout.tp)
}

/// Memory of pipeline stage `stage` when its chunks hold `chunks[stage][chunk]` layers.
pub fn stage_memory(
    model: &ModelSpec,
    layout: &ParallelLayout,
    chunks: &[Vec<Vec<u64>>],
    inputs: &MemoryInputs,
    stage: u32,
) -> StageMemory {
    let t = f64::from(layout.tp);
    let layers = chunks[stage as usize].concat();
    let first = stage == 0;
    let last = stage + 1 == layout.pp;
    let norm = model.norm_params() as f64;

    let mut dense = 0.0;
    let mut expert = 0.0;
    for &l in &layers {
        let (d, e) = layer_params_per_rank(model, layout, l);
        dense += d;
        expert += e;
    }
    if first {
        dense += model.embedding_params() as f64 / t;
    }
    if last {
        dense += norm + output_params_per_rank(model, layout);
    }

    let (weights, gradients, optimizer) = state_bytes(dense, expert, layout, inputs);

    let vp = u64::from(layout.vp);
    let pp = u64::from(layout.pp);
    let m = inputs.micro_batches;
    let s = u64::from(stage);
    let chunks_in_flight = if vp == 1 {
        (pp - s).min(m)
    } else {
        ((pp - s - 1) * 2 + (vp - 1) * pp + 1).min(m * vp)
    };
    let per_layer_avg = layers
        .iter()
        .map(|&l| layer_activation_bytes(model, layout, inputs, l))
        .sum::<f64>()
        / layers.len().max(1) as f64;
    let layers_per_chunk = layers.len() as f64 / vp as f64;
    let mut activations = chunks_in_flight as f64 * layers_per_chunk * per_layer_avg;
    if first {
        activations += chunks_in_flight as f64 * embedding_activation_bytes(model, layout, inputs);
    }
    // The loss's logits, and an MTP module's own (its output head runs on this stage).
    let heads = u64::from(last) + layers.iter().filter(|&&l| model.is_mtp_layer(l)).count() as u64;
    activations += heads as f64 * logits_activation_bytes(model, layout, inputs);
    StageMemory {
        stage,
        params: dense + expert,
        weights,
        gradients,
        optimizer,
        activations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigError;
    use crate::layout::parse_order;

    fn gpt3_175b() -> ModelSpec {
        let cfg = crate::model::preset("gpt3-175b").unwrap();
        ModelSpec::resolve(&cfg, &|k, m| ConfigError::plain("t", k, m)).unwrap()
    }

    /// Megatron's default order with TP 8 and no CP or EP.
    fn tp8(dp: u32, pp: u32) -> ParallelLayout {
        ParallelLayout {
            tp: 8,
            cp: 1,
            ep: 1,
            etp: 8,
            dp,
            pp,
            vp: 1,
            order: parse_order("tp-cp-ep-dp-pp").unwrap(),
        }
    }

    /// The most loaded EP rank holds the activations of the tokens it receives: Mixtral 8x7B
    /// at EP 8 keeps its routed experts' activations for the skewed share of its tokens.
    #[test]
    fn the_hottest_expert_rank_holds_its_share_of_activations() {
        let cfg = crate::model::preset("mixtral-8x7b").unwrap();
        let skewed = ModelSpec::resolve(&cfg, &|k, m| ConfigError::plain("t", k, m)).unwrap();
        let mut balanced = skewed.clone();
        let moe = balanced.moe.as_mut().unwrap();
        moe.routing = crate::model::Routing::Balanced;
        let layout = ParallelLayout {
            tp: 1,
            cp: 1,
            ep: 8,
            etp: 1,
            dp: 8,
            pp: 1,
            vp: 1,
            order: parse_order("tp-cp-ep-dp-pp").unwrap(),
        };
        let inputs = MemoryInputs {
            precision: Precision::Bf16,
            zero: 1,
            recompute: Recompute::None,
            recompute_modules: RecomputeModules::NONE,
            sequence_parallel: false,
            flash_attention: true,
            micro_batch: 1,
            micro_batches: 8,
            fp8_recipe: Fp8Recipe::Delayed,
            fp8_param_gather: false,
            grad_reduce_in_bf16: false,
        };
        let layer = |m: &ModelSpec| layer_activation_bytes(m, &layout, &inputs, 0);
        let expert_bytes = |m: &ModelSpec| {
            let mut dense = m.clone();
            dense.moe.as_mut().unwrap().top_k = 0;
            layer(m) - layer(&dense)
        };
        let tokens = skewed.seq_len;
        let share = |m: &ModelSpec| {
            let moe = m.moe.unwrap();
            moe.hottest_rank_share(8, tokens)
        };
        let ratio = expert_bytes(&skewed) / expert_bytes(&balanced);
        assert!(
            (ratio - share(&skewed) / share(&balanced)).abs() < 1e-9,
            "{ratio}"
        );
        assert!(ratio > 1.2, "{ratio}");
    }

    /// GPT-3 175B on 1,024 GPUs, TP 8, PP 8, DP 16, ZeRO-1 (Megatron distributed optimizer),
    /// bf16 with fp32 master weights and Adam, micro-batch 1, global batch 1536, sequence
    /// parallel, no recompute, flash attention. Computed by hand here, independently of the
    /// code above.
    #[test]
    fn gpt3_175b_tp8_pp8_zero1_matches_hand_computation() {
        let model = gpt3_175b();
        let layout = tp8(16, 8);
        let inputs = MemoryInputs {
            precision: Precision::Bf16,
            zero: 1,
            recompute: Recompute::None,
            recompute_modules: RecomputeModules::NONE,
            sequence_parallel: true,
            flash_attention: true,
            micro_batch: 1,
            micro_batches: 1536 / 16,
            fp8_recipe: Fp8Recipe::Delayed,
            fp8_param_gather: false,
            grad_reduce_in_bf16: false,
        };
        let stages = estimate(
            &model,
            &layout,
            &split_chunks(layout.vp, &[12; 8], 0),
            &inputs,
        );

        let (h, v, s, a) = (12288.0_f64, 51200.0_f64, 2048.0_f64, 96.0_f64);
        // One layer: QKV 3h² + 3h, out-proj h² + h, MLP 8h² + 4h + h, two LayerNorms 4h.
        // Split by TP 8 except the LayerNorms.
        let layer = (12.0 * h * h + 9.0 * h) / 8.0 + 4.0 * h;
        let middle_params = 12.0 * layer;
        // bf16 weights 2 B + fp32 grads 4 B + (fp32 master, Adam m, v) 12 B / DP 16.
        let bytes_per_param = 2.0 + 4.0 + 12.0 / 16.0;
        // Per layer per micro-batch with SP: 34·s·b·h/8 plus flash's fp32 LSE 4·a·s·b/8.
        let act_layer = (34.0 * s * h + 4.0 * a * s) / 8.0;

        // Stage 3 (a middle stage): 8 − 3 = 5 micro-batches in flight.
        let mid = &stages[3];
        assert!((mid.params - middle_params).abs() < 1.0);
        let want = middle_params * bytes_per_param + 5.0 * 12.0 * act_layer;
        assert!(
            (mid.total() - want).abs() / want < 1e-9,
            "{} vs {want}",
            mid.total()
        );
        // ≈ 24.8 GB: the GPT-3 175B layout of Narayanan et al. fits an 80 GB GPU.
        assert!(
            (mid.total() / 1e9 - 24.8).abs() < 0.1,
            "{}",
            mid.total() / 1e9
        );

        // Stage 0: + vocab-parallel word and position embeddings; 8 micro-batches in flight,
        // each also keeping the embedding dropout mask s·h/8.
        let first_params = middle_params + (v * h + s * h) / 8.0;
        let want0 = first_params * bytes_per_param + 8.0 * (12.0 * act_layer + s * h / 8.0);
        assert!((stages[0].total() - want0).abs() / want0 < 1e-9);

        // Last stage: + final LayerNorm and its copy of the tied word embeddings; one
        // micro-batch in flight plus fp32 logits 4·s·V/8.
        let last_params = middle_params + 2.0 * h + v * h / 8.0;
        let want7 = last_params * bytes_per_param + 12.0 * act_layer + 4.0 * s * v / 8.0;
        assert!((stages[7].total() - want7).abs() / want7 < 1e-9);
    }

    #[test]
    fn zero_stages_shrink_memory_monotonically() {
        let model = gpt3_175b();
        let layout = tp8(16, 8);
        let mut last = f64::INFINITY;
        for zero in 0..=3 {
            let inputs = MemoryInputs {
                precision: Precision::Bf16,
                zero,
                recompute: Recompute::Full,
                recompute_modules: RecomputeModules::NONE,
                sequence_parallel: true,
                flash_attention: true,
                micro_batch: 1,
                micro_batches: 96,
                fp8_recipe: Fp8Recipe::Delayed,
                fp8_param_gather: false,
                grad_reduce_in_bf16: false,
            };
            let total = estimate(
                &model,
                &layout,
                &split_chunks(layout.vp, &[12; 8], 0),
                &inputs,
            )[0]
            .total();
            assert!(total < last);
            last = total;
        }
    }

    #[test]
    fn recompute_modes_order_activation_memory() {
        let model = gpt3_175b();
        let layout = tp8(1, 1);
        let act = |recompute| {
            let inputs = MemoryInputs {
                precision: Precision::Bf16,
                zero: 0,
                recompute,
                recompute_modules: crate::config::TrainingConfig {
                    recompute,
                    ..Default::default()
                }
                .recomputed_modules(),
                sequence_parallel: false,
                flash_attention: false,
                micro_batch: 1,
                micro_batches: 1,
                fp8_recipe: Fp8Recipe::Delayed,
                fp8_param_gather: false,
                grad_reduce_in_bf16: false,
            };
            layer_activation_bytes(&model, &layout, &inputs, 0)
        };
        let (s, h, a, t) = (2048.0, 12288.0, 96.0, 8.0);
        // Korthikanti et al. Table 2: no SP, no recompute: sbh(10 + 24/t + 5as/(ht)).
        let paper = s * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t));
        assert!((act(Recompute::None) - paper).abs() / paper < 1e-12);
        assert!((act(Recompute::Selective) - s * h * (10.0 + 24.0 / t)).abs() < 1.0);
        assert!((act(Recompute::Full) - 2.0 * s * h).abs() < 1.0);
    }
}
