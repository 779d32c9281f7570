//! Kernels and communication of one model chunk's forward and backward, per rank, as
//! Megatron-Core with Transformer Engine issues them.
//!
//! Sources (Megatron-LM, `megatron/core/`):
//! - `tensor_parallel/layers.py`: `ColumnParallelLinear` / `RowParallelLinear` and
//!   `LinearWithGradAccumulationAndAsyncCommunication`. Forward: column-parallel input is
//!   copied (TP) or all-gathered (SP); row-parallel output is all-reduced (TP) or
//!   reduce-scattered (SP). Backward of a column-parallel linear: with SP the input is
//!   all-gathered again (overlapping dgrad) and the input gradient reduce-scattered
//!   (overlapping wgrad); without SP the input gradient is all-reduced asynchronously,
//!   overlapping wgrad. Backward of a row-parallel linear under SP all-gathers the output
//!   gradient on the critical path.
//! - `tensor_parallel/cross_entropy.py`: vocab-parallel cross entropy, three all-reduces of
//!   one fp32 value per token (max, predicted logit, sum of exponentials).
//! - `tensor_parallel/layers.py` `VocabParallelEmbedding`: lookup then all-reduce (TP) or
//!   reduce-scatter (SP).
//! - `transformer/moe/token_dispatcher.py` `MoEAlltoAllTokenDispatcher`: permute, all-to-all
//!   in the EP group, all-gather over expert-TP (= TP), grouped expert GEMMs, reduce-scatter,
//!   all-to-all back, unpermute; shared experts run as a TP MLP.
//! - Context parallelism (Transformer Engine `attention.py`, `AttnFuncWithCPAndKVP2P`): the
//!   load-balanced ring passes KV blocks to the next CP rank while the current block's
//!   attention runs (`cp` steps, `cp − 1` transfers; backward passes KV and dKV); the
//!   `all-gather` flavour gathers KV first and reduce-scatters dKV.
//! - Recomputation (`transformer/transformer_block.py` `_checkpointed_forward`, uniform, one
//!   layer per checkpoint): full recompute re-runs each layer's forward right before its
//!   backward; selective recomputes the modules of `training.recompute_modules` (Megatron-Core's
//!   `--recompute-modules`, default core attention: Korthikanti et al., MLSys'23 §5), each
//!   right before the backward that needs its output, where Megatron-Core's checkpoint or its
//!   `CheckpointWithoutOutput` gradient hook runs it: `layernorm` when the attention's or the
//!   MLP's output gradient arrives (`transformer_layer.py`), `mla_up_proj` and `core_attn`
//!   before core attention's backward (`multi_latent_attention.py`, `attention.py`),
//!   `moe_act` before fc2's backward (`moe/experts.py`), `mlp`, `moe` and `shared_experts`
//!   before their module's backward (`transformer_layer.py`, `moe/moe_layer.py`).

use crate::config::{
    CpComm, CrossEntropyFusion, Fp8Recipe, Precision, Recompute, RecomputeModule, RecomputeModules,
    TeRelease,
};
use crate::layout::GroupKind;
use crate::model::{Activation, ModelSpec, Moe, Norm, Position};
use crate::workload::userbuffers::UserbufferSms;

use super::{
    CollectiveOp, Kernel, KernelName, Label, Module, NO_LAYER, OpKind, Pass, Peer, Phase, Program,
    Shape, Stream,
};

/// The cross entropy's forward kernels: Megatron-Core's three passes (unfused or `jit_fuser`),
/// with all-reduces between them over TP, or Transformer Engine's two, with an all-gather.
enum CrossEntropyPasses {
    Megatron([Kernel; 3]),
    TransformerEngine([Kernel; 2]),
}

/// Everything about a rank's slice of the model that fixes its kernel shapes.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    pub tp: u64,
    pub cp: u64,
    pub ep: u64,
    /// Expert tensor parallel: the shards of each expert's FFN.
    pub etp: u64,
    /// The group the MoE dispatcher gathers tokens over: `Tp` when expert-TP groups are the TP
    /// groups, else `ExpertTp`.
    pub expert_tp_group: GroupKind,
    /// Micro-batch size.
    pub batch: u64,
    /// Sequence length of the whole model.
    pub seq: u64,
    pub sequence_parallel: bool,
    pub precision: Precision,
    pub recompute: Recompute,
    /// What selective recompute re-runs (empty unless `recompute` is `Selective`).
    pub recompute_modules: RecomputeModules,
    pub flash: bool,
    pub tp_comm_overlap: bool,
    /// SMs Transformer Engine's userbuffers hold back from the GEMMs they overlap.
    pub userbuffer_sms: UserbufferSms,
    /// Shared experts run beside the MoE all-to-alls (`training.moe_shared_expert_overlap`).
    pub moe_shared_expert_overlap: bool,
    /// Under the all-to-all overlap, the experts' weight gradients run after the dispatch's
    /// backward all-to-all is issued (`training.delay_wgrad_compute`).
    pub delay_wgrad_compute: bool,
    /// The MoE router's ops fused (`training.moe_router_fusion`).
    pub moe_router_fusion: bool,
    /// The MoE token permutations fused (`training.moe_permute_fusion`).
    pub moe_permute_fusion: bool,
    /// The router pads each expert's tokens to the quantized GEMM's alignment
    /// (`training.moe_router_padding_for_quantization`), so the experts copy nothing to pad
    /// them.
    pub moe_router_padding_for_quantization: bool,
    /// How the loss's cross entropy runs (`training.cross_entropy_fusion`).
    pub cross_entropy_fusion: CrossEntropyFusion,
    /// Tokens move through Megatron-Core's all-to-all dispatcher
    /// (`training.moe_token_dispatcher = "alltoall"`), which sizes its all-to-alls with an
    /// all-gather of every rank's token counts; DeepEP and HybridEP exchange them inside
    /// their own kernels.
    pub moe_alltoall_dispatcher: bool,
    pub cp_comm: CpComm,
    /// FP8 core attention (`training.fp8_attention`); otherwise FP8 runs attention in BF16.
    pub fp8_attention: bool,
    pub fp8_recipe: Fp8Recipe,
    /// The Transformer Engine release the run used (`training.transformer_engine`): how it
    /// handles block scales ([`Dims::scale_swizzle_kernels`], [`Dims::scale_fills`]).
    pub transformer_engine: TeRelease,
}

/// Transformer Engine releases that change how block scales (MXFP8, NVFP4) are prepared
/// for cuBLAS, which reads them in a swizzled layout (each tag read in NVIDIA/TransformerEngine):
/// - every block-scaled GEMM call swizzles the scales of each operand whose scales are not
///   already in that layout (`swizzle_scaling_factors` in `csrc/extensions/gemm.cpp`, 2.3 on;
///   from Python in 2.1-2.2), a kernel per member of a grouped GEMM before
///   [`MULTI_TENSOR_SWIZZLE_FROM`];
/// - MXFP8 quantizers allocate their scales with `at::zeros` before
///   [`MULTI_TENSOR_SWIZZLE_FROM`] (`csrc/quantizer.cpp`), a fill kernel per usage.
///
/// The first release that swizzles a grouped GEMM's operand in one multi-tensor kernel (at
/// most [`MULTI_TENSOR_SWIZZLE_MAX`] tensors each) and zero-pads the scales there, so
/// quantizers allocate them with `at::empty` (PR #2019, first in v2.7).
const MULTI_TENSOR_SWIZZLE_FROM: TeRelease = TeRelease::new(2, 7);
/// Tensors one multi-tensor swizzle kernel takes (`swizzle.cu` `kMaxTensorsPerKernel`).
const MULTI_TENSOR_SWIZZLE_MAX: u64 = 64;
/// The first release whose grouped quantization allocates every expert's MXFP8 tensors from
/// one zeroed buffer per usage, data and scales (`bulk_allocate_mxfp8_tensors`, PR #1934).
const BULK_SCALES_FROM: TeRelease = TeRelease::new(2, 6);
/// The first release whose modules ask their activation and gradient quantizers for
/// GEMM-ready scales (`optimize_for_gemm`): all but a column-parallel linear's input and a
/// row-parallel linear's output gradient under SP, which are quantized before the TP
/// all-gather (`module/linear.py`, `layernorm_mlp.py`, `grouped_linear.py`, v2.12).
const GEMM_READY_ACTIVATIONS_FROM: TeRelease = TeRelease::new(2, 12);
/// The first release that quantizes weights with GEMM-ready scales
/// (`_enable_weight_preswizzle`, grouped linears' cached weights included; v2.18).
const GEMM_READY_WEIGHTS_FROM: TeRelease = TeRelease::new(2, 18);
/// The first release whose NVFP4 quantizer writes GEMM-ready scales where asked, from its
/// Hadamard-transform cast (activations and gradients) and, from 2.18, its 2D weight
/// quantization (`quantizer.cpp` `nvfp4_emits_gemm_swizzled_scales`); before it
/// `with_gemm_swizzled_scales = false` always (v2.12-v2.16).
const NVFP4_GEMM_READY_FROM: TeRelease = TeRelease::new(2, 17);

/// A TE linear whose input Megatron all-gathers over TP under SP (`column_forward`).
fn column_parallel(name: KernelName) -> bool {
    matches!(
        name,
        KernelName::QkvProj
            | KernelName::MlaQDown
            | KernelName::MlaKvDown
            | KernelName::MlaQUp
            | KernelName::MlaKvUp
            | KernelName::MlpUp
            | KernelName::SharedUp
            | KernelName::MtpProj
    )
}

/// A TE linear whose output gradient Megatron all-gathers over TP under SP (`row_backward`).
fn row_parallel(name: KernelName) -> bool {
    matches!(
        name,
        KernelName::OutProj | KernelName::MlpDown | KernelName::SharedDown
    )
}

impl Dims {
    /// Whether Transformer Engine's userbuffers overlap the TP communication (SP over a TP
    /// group of more than one rank, `tp_comm_overlap`).
    pub fn userbuffers_active(&self) -> bool {
        self.tp_comm_overlap && self.sp()
    }

    /// Tokens of one micro-batch on this CP rank (what TP GEMMs see).
    pub fn tokens(&self) -> u64 {
        self.batch * self.seq / self.cp
    }

    /// Tokens of the norms and residuals on this rank (split over TP with SP).
    pub fn sp_tokens(&self) -> u64 {
        if self.sp() {
            self.tokens() / self.tp
        } else {
            self.tokens()
        }
    }

    pub fn sp(&self) -> bool {
        self.sequence_parallel && self.tp > 1
    }

    /// How many expert-TP ranks' tokens this rank's experts compute.
    pub fn expert_tp_gather(&self) -> u64 {
        let [tp, etp] = [self.tp, self.etp].map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        u64::from(crate::layout::expert_tp_gather(
            tp,
            etp,
            self.sequence_parallel,
        ))
    }

    /// Bytes of an activation element.
    pub fn act_bytes(&self) -> u64 {
        self.precision.activation_bytes()
    }

    /// Bytes of a GEMM operand.
    pub fn gemm_bytes(&self) -> u64 {
        self.precision.gemm_operand_bytes()
    }

    /// Whether Transformer Engine's GEMMs run quantized (FP8, MXFP8 or NVFP4).
    pub fn quantizes(&self) -> bool {
        self.precision.is_quantized()
    }

    /// The data type of work Transformer Engine does not quantize (`fp8_autocast` only
    /// affects TE modules): activations, and GEMMs of Megatron's own modules.
    pub fn unquantized(&self) -> Precision {
        if self.quantizes() {
            Precision::Bf16
        } else {
            self.precision
        }
    }

    /// Core attention's data type: BF16 under FP8 and MXFP8 unless FP8 attention is on
    /// (Transformer Engine's `fp8_dpa` defaults to off; its FP8 attention is per-tensor FP8
    /// whatever the GEMM recipe); `NVFP4BlockScaling` never quantizes attention.
    pub fn attention_precision(&self) -> Precision {
        if self.fp8_attention && self.quantizes() {
            Precision::Fp8
        } else {
            self.unquantized()
        }
    }

    /// Bytes of `elements` of one quantized copy of a GEMM operand with its scales (FP8 under
    /// `blockwise`: an FP32 scale per 1x128 block).
    pub fn quantized_bytes(&self, elements: u64) -> u64 {
        match (self.precision, self.fp8_recipe) {
            (Precision::Fp8, Fp8Recipe::Blockwise) => elements + elements / 32,
            (p, _) => p.quantized_bytes(elements),
        }
    }

    /// Whether each quantized tensor needs its amax first, over the whole tensor (an extra
    /// read, and under SP an all-reduce over TP): FP8 current scaling, and NVFP4's per-tensor
    /// FP32 scale. Delayed scaling takes it from the history; MXFP8 and `blockwise` scale
    /// each block from its own values, in the quantizing kernel.
    pub fn tensor_amax(&self) -> bool {
        match self.precision {
            Precision::Fp8 => self.fp8_recipe == Fp8Recipe::Current,
            Precision::Nvfp4 => true,
            _ => false,
        }
    }

    /// Kernels Transformer Engine launches to quantize one tensor: current scaling computes the
    /// amax, then the scale, then casts (`Float8CurrentScalingQuantizer::quantize`:
    /// `nvte_compute_amax`, `nvte_compute_scale_from_amax`, `nvte_quantize_v2`); NVFP4 takes an
    /// amax pass (of the tensor and of its Hadamard transform) and a rowwise and a columnwise
    /// quantization (`NVFP4Quantizer::quantize_impl`); delayed scaling, MXFP8 and blockwise
    /// scaling quantize in one kernel (TE 2.7-2.10 `csrc/quantizer.cpp`).
    pub fn quantize_launches(&self) -> u32 {
        match (self.precision, self.fp8_recipe) {
            (Precision::Fp8, Fp8Recipe::Current) | (Precision::Nvfp4, _) => 3,
            _ => 1,
        }
    }

    /// Kernels Transformer Engine launches to swizzle the block scales of `name`'s GEMM call
    /// in `pass`, of `batch` members: one per operand whose scales arrive unswizzled (the
    /// weight in forward and dgrad, the input in forward and wgrad, the output gradient in
    /// dgrad and wgrad; see [`GEMM_READY_ACTIVATIONS_FROM`], [`GEMM_READY_WEIGHTS_FROM`],
    /// [`NVFP4_GEMM_READY_FROM`]), per member of a grouped GEMM before
    /// [`MULTI_TENSOR_SWIZZLE_FROM`] and per [`MULTI_TENSOR_SWIZZLE_MAX`] members after.
    pub fn scale_swizzle_kernels(&self, name: KernelName, pass: Pass, batch: u64) -> u32 {
        if !self.precision.is_block_scaled() {
            return 0;
        }
        let te = self.transformer_engine;
        let members = batch.max(1);
        let per_operand = if te < MULTI_TENSOR_SWIZZLE_FROM {
            members
        } else {
            members.div_ceil(MULTI_TENSOR_SWIZZLE_MAX)
        };
        let nvfp4_unready = self.precision == Precision::Nvfp4 && te < NVFP4_GEMM_READY_FROM;
        let operands: u64 = if te < GEMM_READY_ACTIVATIONS_FROM || nvfp4_unready {
            2
        } else {
            let weight = pass != Pass::Wgrad && te < GEMM_READY_WEIGHTS_FROM;
            let gathered_input = self.sp() && column_parallel(name) && pass != Pass::Dgrad;
            let gathered_grad = self.sp() && row_parallel(name) && pass != Pass::Forward;
            [weight, gathered_input, gathered_grad]
                .into_iter()
                .map(u64::from)
                .sum()
        };
        u32::try_from(operands * per_operand).unwrap_or(u32::MAX)
    }

    /// Fill kernels, and the bytes they write, of one MXFP8 quantization of `elements` in
    /// `splits` expert splits for `usages` copies (rowwise, columnwise) before TE 2.7:
    /// `MXFP8Quantizer::create_tensor` allocates each copy's scales with `at::zeros`
    /// (`csrc/quantizer.cpp`, 2.1-2.6), per split; 2.6 quantizes a grouped input's splits
    /// into one buffer per usage, data and scales, zeroed whole (`bulk_allocate_mxfp8_tensors`).
    /// Megatron-LM's DeepSeek-V3 GB200 guide found these `torch.zeros` kernels fragmenting the
    /// experts' part (`docs/discussions/deepseek-v3-gb200-optimization`, section 2.1.2).
    pub fn scale_fills(&self, splits: u64, elements: u64, usages: u32) -> (u32, u64) {
        let te = self.transformer_engine;
        if self.precision != Precision::Mxfp8 || te >= MULTI_TENSOR_SWIZZLE_FROM {
            return (0, 0);
        }
        let usages_u64 = u64::from(usages);
        let scales = self.precision.block_scale_bytes(elements);
        let (fills, bytes) = if splits > 1 && te >= BULK_SCALES_FROM {
            (
                usages_u64,
                usages_u64 * self.precision.quantized_bytes(elements),
            )
        } else {
            (usages_u64 * splits.max(1), usages_u64 * scales)
        };
        (u32::try_from(fills).unwrap_or(u32::MAX), bytes)
    }

    /// Whether a grouped GEMM's input is quantized one expert's split at a time: Transformer
    /// Engine's `split_quantize` fuses the splits into one multi-tensor kernel only for delayed
    /// scaling (`csrc/extensions/cast.cpp` `multi_tensor_quantize_impl`, "Currently only have
    /// fused kernel for FP8 delayed scaling", TE 2.7 to 2.10); every other recipe calls each
    /// expert's quantizer in turn.
    pub fn quantizes_per_split(&self) -> bool {
        !(self.precision == Precision::Fp8 && self.fp8_recipe == Fp8Recipe::Delayed)
    }

    /// Bytes moved quantizing `elements` of one BF16 tensor for a GEMM as Transformer Engine
    /// does: the tensor is read (2 bytes each) and two copies are written, one per operand
    /// layout the forward and backward GEMMs need (FP8: the tensor and its transpose, TE's
    /// `cast_transpose`; the block-scaled recipes quantize the rowwise and the columnwise copy
    /// each from the BF16 input, `MXFP8BlockScaling`, `Float8BlockScaling`,
    /// `NVFP4BlockScaling`), each with its scales ([`Self::quantized_bytes`]); a per-tensor
    /// amax ([`Self::tensor_amax`]) reads the tensor once more first (NVFP4: one pass for the
    /// amaxes of the tensor and of its Hadamard transform).
    pub fn cast_bytes(&self, elements: u64) -> u64 {
        match (self.precision, self.fp8_recipe) {
            // Kept as whole bytes per element, as fitted and recorded.
            (Precision::Fp8, Fp8Recipe::Delayed) => elements * 4,
            (Precision::Fp8, Fp8Recipe::Current) => elements * 6,
            _ => {
                let amax = if self.tensor_amax() { 2 * elements } else { 0 };
                amax + 2 * elements + 2 * self.quantized_bytes(elements)
            }
        }
    }
}

/// Appends ops to a program, tracking what the next kernel must wait for.
#[derive(Debug)]
pub struct Builder<'a> {
    pub program: &'a mut Program,
    pub label: Label,
    /// The most recent compute op: what a collective's data comes from.
    last_compute: Option<u32>,
    /// Ops the next compute op must wait for.
    pending: Vec<u32>,
}

impl<'a> Builder<'a> {
    pub fn new(program: &'a mut Program) -> Self {
        Builder {
            program,
            label: Label {
                phase: Phase::Forward,
                module: Module::Embedding,
                micro_batch: 0,
                chunk: 0,
                layer: NO_LAYER,
            },
            last_compute: None,
            pending: Vec::new(),
        }
    }

    pub fn last_compute(&self) -> Option<u32> {
        self.last_compute
    }

    /// The next compute op waits for `op`.
    pub fn wait(&mut self, op: u32) {
        self.pending.push(op);
    }

    pub fn compute(&mut self, kernel: Kernel) -> u32 {
        let k = self.program.intern(kernel);
        let deps = std::mem::take(&mut self.pending);
        let id = self.program.push(
            OpKind::Compute { kernel: k },
            Stream::Compute,
            self.label,
            &deps,
        );
        self.last_compute = Some(id);
        id
    }

    /// A transfer to or from CXL memory, issued when the last compute op is done.
    pub fn memory_transfer(&mut self, bytes: u64) -> u32 {
        let deps: Vec<u32> = self.last_compute.into_iter().collect();
        self.program.push(
            OpKind::MemoryRead { bytes },
            Stream::Memory,
            self.label,
            &deps,
        )
    }

    /// Issues a collective whose input is what the last compute op produced.
    pub fn collective(&mut self, op: CollectiveOp, group: GroupKind, bytes: u64) -> u32 {
        self.collective_on(Stream::of_group(group), op, group, bytes)
    }

    /// [`Self::collective`] on `stream` instead of its group's: one whose process group is
    /// its own.
    pub fn collective_on(
        &mut self,
        stream: Stream,
        op: CollectiveOp,
        group: GroupKind,
        bytes: u64,
    ) -> u32 {
        let deps: Vec<u32> = self.last_compute.into_iter().collect();
        self.push_collective(stream, op, group, bytes, &deps)
    }

    pub fn collective_after(
        &mut self,
        op: CollectiveOp,
        group: GroupKind,
        bytes: u64,
        deps: &[u32],
    ) -> u32 {
        self.push_collective(Stream::of_group(group), op, group, bytes, deps)
    }

    fn push_collective(
        &mut self,
        stream: Stream,
        op: CollectiveOp,
        group: GroupKind,
        bytes: u64,
        deps: &[u32],
    ) -> u32 {
        self.program.push(
            OpKind::Collective { op, group, bytes },
            stream,
            self.label,
            deps,
        )
    }

    /// A collective on the critical path: the next kernel waits for it.
    pub fn blocking(&mut self, op: CollectiveOp, group: GroupKind, bytes: u64) -> u32 {
        self.blocking_on(Stream::of_group(group), op, group, bytes)
    }

    /// [`Self::blocking`] on `stream` ([`Self::collective_on`]).
    pub fn blocking_on(
        &mut self,
        stream: Stream,
        op: CollectiveOp,
        group: GroupKind,
        bytes: u64,
    ) -> u32 {
        let c = self.collective_on(stream, op, group, bytes);
        self.wait(c);
        c
    }

    pub fn p2p(&mut self, send: bool, peer: Peer, bytes: u64, stream: Stream, deps: &[u32]) -> u32 {
        let kind = if send {
            OpKind::Send { peer, bytes }
        } else {
            OpKind::Recv { peer, bytes }
        };
        self.program.push(kind, stream, self.label, deps)
    }
}

/// `moe_utils.get_capacity`'s `min_capacity`: an expert's capacity is never below 4 tokens.
const MIN_EXPERT_CAPACITY: u64 = 4;

/// A MoE layer's token counts on one rank ([`LayerEmitter::moe_sizes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MoeSizes {
    /// Token copies this rank permutes and sends.
    sent: u64,
    /// Token copies per rank each all-to-all moves: what the most loaded rank receives.
    moved: u64,
    local_experts: u64,
    /// Tokens each local expert computes on the most loaded rank.
    per_expert: u64,
}

/// Where a MoE layer's forward makes the host wait for the GPU ([`LayerEmitter::moe_host_sync`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MoeHostSync {
    /// Dropless with EP: the all-to-all's splits (`"before_ep_alltoall"`).
    BeforeAllToAll,
    /// Token drop without padding, or dropless with the router's padding for quantization:
    /// the kept or padded count, before the first permutation (`"before_permutation_1"`).
    BeforePermute,
    /// Padded to capacity: every size is known on the host (`"no_sync"`). Also dropless
    /// without EP, where Megatron-Core still reads the tokens per expert before the grouped
    /// GEMM; fleetsim leaves that sync out.
    Never,
}

/// Chunks of a GEMM whose reduce-scatter userbuffers pipelines (`initialize_ub`'s default
/// `num_splits` for the `pipeline` method).
const UB_PIPELINE_SPLITS: u64 = 4;

/// FLOPs of one elementwise pass: a handful per element (norms, activations, dropout).
const ELEMENTWISE_FLOPS: u64 = 4;

/// Whether Transformer Engine runs the GEMM `name` (and quantizes its operands under FP8).
/// Megatron's output layer and MoE router are its own modules, not TE's: under FP8 they stay
/// in BF16.
fn runs_in_te(name: KernelName) -> bool {
    !matches!(name, KernelName::Logits | KernelName::Router)
}

fn gemm(name: KernelName, pass: Pass, m: u64, n: u64, k: u64, batch: u64, d: &Dims) -> Kernel {
    let dtype = if runs_in_te(name) {
        d.precision
    } else {
        d.unquantized()
    };
    let operands = if dtype == d.precision {
        d.quantized_bytes(batch * (m * k + k * n))
    } else {
        batch * (m * k + k * n) * dtype.gemm_operand_bytes()
    };
    let scale_swizzles = if dtype == d.precision {
        d.scale_swizzle_kernels(name, pass, batch)
    } else {
        0
    };
    Kernel {
        name,
        pass,
        shape: Shape::Gemm {
            m,
            n,
            k,
            batch,
            comm_sms: if d.userbuffers_active() {
                d.userbuffer_sms.of(name, pass)
            } else {
                0
            },
            scale_swizzles,
        },
        flops: 2 * m * n * k * batch,
        bytes: operands + batch * m * n * d.act_bytes(),
        dtype,
    }
}

/// Elementwise kernel `k` run as a chain of `kernels` small ops instead of one kernel.
fn chained(mut k: Kernel, kernels: u32) -> Kernel {
    if let Shape::Elementwise { kernels: n, .. } = &mut k.shape {
        *n = kernels;
    }
    k
}

fn elementwise(name: KernelName, pass: Pass, elements: u64, bytes: u64, d: &Dims) -> Kernel {
    Kernel {
        name,
        pass,
        shape: Shape::Elementwise {
            elements,
            kernels: 1,
        },
        flops: ELEMENTWISE_FLOPS * elements,
        bytes,
        dtype: d.precision,
    }
}

/// A weight-bearing linear layer of a rank: `tokens × k_in` by `k_in × n_out`, `batch` copies.
#[derive(Clone, Copy)]
struct Linear {
    name: KernelName,
    tokens: u64,
    k_in: u64,
    n_out: u64,
    batch: u64,
}

impl Linear {
    /// Elements of the forward input (tokens × k_in per copy).
    fn input_elements(&self) -> u64 {
        self.tokens * self.k_in * self.batch
    }

    /// Elements of the output and of its gradient.
    fn output_elements(&self) -> u64 {
        self.tokens * self.n_out * self.batch
    }

    fn forward(&self, d: &Dims) -> Kernel {
        gemm(
            self.name,
            Pass::Forward,
            self.tokens,
            self.n_out,
            self.k_in,
            self.batch,
            d,
        )
    }
    fn dgrad(&self, d: &Dims) -> Kernel {
        gemm(
            self.name,
            Pass::Dgrad,
            self.tokens,
            self.k_in,
            self.n_out,
            self.batch,
            d,
        )
    }
    fn wgrad(&self, d: &Dims) -> Kernel {
        gemm(
            self.name,
            Pass::Wgrad,
            self.k_in,
            self.n_out,
            self.tokens,
            self.batch,
            d,
        )
    }
}

/// Multi-head latent attention's projections on a rank ([`LayerEmitter::mla`]).
#[derive(Clone, Copy)]
struct Mla {
    /// The query down-projection to its LoRA rank; none without one.
    q_down: Option<Linear>,
    /// The key-value down-projection to its latent and the shared RoPE key.
    kv_down: Linear,
    q_up: Linear,
    kv_up: Linear,
}

/// A memory-bound op: forward reads `read` and writes `write` elements; backward moves twice.
#[derive(Clone, Copy)]
struct Pointwise {
    name: KernelName,
    elements: u64,
    read: u64,
    write: u64,
}

impl Pointwise {
    fn forward(&self, d: &Dims) -> Kernel {
        let bytes = (self.read + self.write) * d.act_bytes();
        elementwise(self.name, Pass::Forward, self.elements, bytes, d)
    }
    fn backward(&self, d: &Dims) -> Kernel {
        let bytes = 2 * (self.read + self.write) * d.act_bytes();
        let mut k = elementwise(self.name, Pass::Backward, self.elements, bytes, d);
        k.flops *= 2;
        k
    }
}

/// Emits the kernels and communication of transformer layers, embedding and logits.
pub struct LayerEmitter<'m> {
    pub model: &'m ModelSpec,
    pub dims: Dims,
}

/// Emits `body` as recomputation (`Phase::Recompute`).
fn recomputing(b: &mut Builder, body: impl FnOnce(&mut Builder)) {
    let phase = b.label.phase;
    b.label.phase = Phase::Recompute;
    body(b);
    b.label.phase = phase;
}

impl LayerEmitter<'_> {
    /// Whether selective recompute re-runs `module`.
    fn recomputes(&self, module: RecomputeModule) -> bool {
        self.dims.recompute_modules.has(module)
    }

    /// Whether `layernorm` recompute re-runs the input norm: only where it is a module of its
    /// own (MLA's layer spec); Transformer Engine fuses it into the QKV linear otherwise
    /// (`gpt_layer_specs.py`: `input_layernorm = IdentityOp`).
    fn recomputes_input_norm(&self) -> bool {
        self.recomputes(RecomputeModule::Layernorm) && self.model.mla.is_some()
    }

    /// Under FP8, a linear whose BF16 input a checkpoint dropped keeps that input instead of
    /// its FP8 copy (`set_save_original_input`) and quantizes it again in the backward pass
    /// for its wgrad.
    fn requantize_input(&self, b: &mut Builder, l: &Linear, elements: u64) {
        recomputing(b, |b| self.cast_copies(b, l, Pass::Backward, elements, 1));
    }

    fn tp_group_active(&self) -> bool {
        self.dims.tp > 1
    }

    /// Passes a norm makes over each element beyond reading it: LayerNorm computes mean and
    /// variance, RMSNorm only the mean square.
    fn norm_passes(&self) -> u64 {
        match self.model.norm {
            Norm::Layernorm => 2,
            Norm::Rmsnorm => 1,
        }
    }

    fn norm(&self, name: KernelName) -> Pointwise {
        let t = self.dims.sp_tokens();
        let h = self.model.hidden;
        Pointwise {
            name,
            elements: t * h * self.norm_passes(),
            read: t * h,
            write: t * h,
        }
    }

    /// The norms `model.qk_layernorm` adds, each its own module (Megatron-Core
    /// `SelfAttention.get_query_key_value_tensors`: `q_layernorm` over each query head, then
    /// `k_layernorm` over each key head, of the model's norm kind). Under MLA they are the
    /// query and key-value latents' norms before the up-projections (`MLASelfAttention`).
    fn qk_norms(&self) -> Vec<Pointwise> {
        if !self.model.qk_layernorm {
            return Vec::new();
        }
        let d = &self.dims;
        let widths: Vec<u64> = match &self.model.mla {
            // The latents are whole on every TP rank (gathered where the query has a rank).
            Some(m) => [m.q_lora_rank, m.kv_lora_rank]
                .into_iter()
                .filter(|&w| w > 0)
                .collect(),
            None => {
                let (q, kv) = self.model.qkv_widths();
                // With fewer key heads than TP ranks each rank holds one head's copy.
                vec![q / d.tp, (kv / d.tp).max(self.model.head_dim)]
            }
        };
        let t = d.tokens();
        widths
            .into_iter()
            .map(|w| Pointwise {
                name: KernelName::QkNorm,
                elements: t * w * self.norm_passes(),
                read: t * w,
                write: t * w,
            })
            .collect()
    }

    fn residual(&self, name: KernelName) -> Pointwise {
        let t = self.dims.sp_tokens();
        let h = self.model.hidden;
        // Fused bias + dropout + add: read the output and the residual, write the sum.
        Pointwise {
            name,
            elements: t * h,
            read: 2 * t * h,
            write: t * h,
        }
    }

    /// Bytes of a full `tokens × hidden` activation of this CP rank.
    fn hidden_bytes(&self) -> u64 {
        self.dims.tokens() * self.model.hidden * self.dims.act_bytes()
    }

    /// Whether `l`'s operands are quantized (FP8, MXFP8, NVFP4).
    fn quantized(&self, l: &Linear) -> bool {
        self.dims.quantizes() && runs_in_te(l.name)
    }

    /// Bytes of `elements` in the SP all-gathers around `l`: Transformer Engine quantizes the
    /// local shard first and gathers the quantized copy with its scales (`_all_gather_fp8`,
    /// `_all_gather_mxfp8`, `_all_gather_nvfp4`); reduce-scatters stay BF16.
    fn gather_bytes(&self, l: &Linear, elements: u64) -> u64 {
        if self.quantized(l) {
            self.dims.quantized_bytes(elements)
        } else {
            elements * self.dims.act_bytes()
        }
    }

    /// Quantizing `elements` of a BF16 tensor (an input or an output gradient) for `l`'s
    /// quantized GEMMs (none in higher precision). NVFP4 applies a 16-point random Hadamard
    /// transform to the columnwise copy of inputs and gradients, the one wgrad reads
    /// (`NVFP4BlockScaling`: `fp4_quant_fwd_inp`, `fp4_quant_bwd_grad`): 32 more FLOPs per
    /// element, inside the memory-bound kernel.
    ///
    /// A grouped GEMM's input (the local experts' tokens) is quantized expert by expert where
    /// Transformer Engine does so ([`Dims::quantizes_per_split`]): the same bytes, in as many
    /// launches as the experts times [`Dims::quantize_launches`].
    fn cast(&self, b: &mut Builder, l: &Linear, pass: Pass, elements: u64) {
        self.cast_copies(b, l, pass, elements, 2);
    }

    /// [`Self::cast`] writing `usages` copies' scales (rowwise and columnwise: 2; the
    /// columnwise copy a requantized wgrad input needs: 1).
    fn cast_copies(&self, b: &mut Builder, l: &Linear, pass: Pass, elements: u64, usages: u32) {
        if !self.quantized(l) || elements == 0 {
            return;
        }
        let d = &self.dims;
        let splits = if d.quantizes_per_split() { l.batch } else { 1 };
        let (fills, zeroed_bytes) = d.scale_fills(splits, elements, usages);
        let launches = u32::try_from(splits.max(1))
            .unwrap_or(u32::MAX)
            .saturating_mul(d.quantize_launches())
            .saturating_add(fills);
        let mut k = chained(
            elementwise(
                KernelName::Fp8Cast,
                pass,
                elements,
                d.cast_bytes(elements) + zeroed_bytes,
                d,
            ),
            launches,
        );
        if d.precision == Precision::Nvfp4 {
            k.flops += 32 * elements;
        }
        k.dtype = d.precision;
        b.compute(k);
    }

    /// Current scaling of a tensor all-gathered over TP (SP): the shards' amaxes are
    /// all-reduced (one fp32) before the cast, and the cast waits for it
    /// (`Float8CurrentScalingQuantizer` with `with_amax_reduction`).
    fn gathered_cast(&self, b: &mut Builder, l: &Linear, pass: Pass, elements: u64) {
        let d = &self.dims;
        if self.quantized(l) && d.sp() && d.tensor_amax() {
            b.blocking(CollectiveOp::AllReduce, GroupKind::Tp, 4);
        }
        self.cast(b, l, pass, elements);
    }

    /// `l`'s forward or dgrad GEMM as `chunks` GEMMs over as many slices of its tokens, as
    /// Transformer Engine's userbuffers overlap runs it (`transformer_engine/pytorch/module/
    /// base.py` `initialize_ub`: ring exchange for the all-gathers before QKV / fc1 and before
    /// the output projection's and fc2's dgrad, a pipeline of 4 splits for the reduce-scatters
    /// after the output projection and fc2). Smaller GEMMs fill fewer waves.
    fn chunked(&self, b: &mut Builder, l: &Linear, pass: Pass, chunks: u64) {
        let chunks = chunks.max(1);
        if !l.tokens.is_multiple_of(chunks) {
            b.compute(match pass {
                Pass::Dgrad => l.dgrad(&self.dims),
                _ => l.forward(&self.dims),
            });
            return;
        }
        let part = Linear {
            tokens: l.tokens / chunks,
            ..*l
        };
        for chunk in 0..chunks {
            let mut k = match pass {
                Pass::Dgrad => part.dgrad(&self.dims),
                _ => part.forward(&self.dims),
            };
            // TE swizzles the scales once per `gemm` call, before the overlap splits it.
            if let Shape::Gemm { scale_swizzles, .. } = &mut k.shape
                && chunk > 0
            {
                *scale_swizzles = 0;
            }
            b.compute(k);
        }
    }

    /// Elements of `l`'s forward input held on this rank before an SP all-gather.
    fn local_input(&self, l: &Linear) -> u64 {
        if self.dims.sp() {
            l.input_elements() / self.dims.tp
        } else {
            l.input_elements()
        }
    }

    // ----- TP communication patterns around column- and row-parallel linears -----

    /// Forward into a column-parallel linear: quantize (FP8) and all-gather (SP) its input.
    fn column_forward(&self, b: &mut Builder, l: &Linear) {
        self.gathered_cast(b, l, Pass::Forward, self.local_input(l));
        let linear = l.forward(&self.dims);
        if self.dims.sp() {
            let bytes = self.gather_bytes(l, l.input_elements());
            let ag = b.collective(CollectiveOp::AllGather, GroupKind::Tp, bytes);
            if self.dims.tp_comm_overlap {
                // Transformer Engine's userbuffers ring exchange: one GEMM per TP rank's
                // chunk while the next chunk arrives.
                self.chunked(b, l, Pass::Forward, self.dims.tp);
                b.wait(ag);
                return;
            }
            b.wait(ag);
        }
        b.compute(linear);
    }

    /// Forward out of a row-parallel linear: all-reduce (TP) or reduce-scatter (SP).
    fn row_forward(&self, b: &mut Builder, l: &Linear, bytes: u64) {
        self.cast(b, l, Pass::Forward, l.input_elements());
        let linear = l.forward(&self.dims);
        if !self.tp_group_active() {
            b.compute(linear);
            return;
        }
        let op = if self.dims.sp() {
            CollectiveOp::ReduceScatter
        } else {
            CollectiveOp::AllReduce
        };
        if self.dims.sp() && self.dims.tp_comm_overlap {
            // Userbuffers' pipelined reduce-scatter: the GEMM runs in `UB_PIPELINE_SPLITS`
            // chunks, each chunk's reduce-scatter overlapping the next.
            let before: Vec<u32> = b.last_compute().into_iter().collect();
            self.chunked(b, l, Pass::Forward, UB_PIPELINE_SPLITS);
            let rs = b.collective_after(op, GroupKind::Tp, bytes, &before);
            b.wait(rs);
            return;
        }
        b.compute(linear);
        b.blocking(op, GroupKind::Tp, bytes);
    }

    /// Backward of a row-parallel linear: quantize the output gradient (FP8), all-gather it
    /// (SP), dgrad, wgrad.
    fn row_backward(&self, b: &mut Builder, l: &Linear, bytes: u64) {
        if self.dims.sp() {
            self.gathered_cast(b, l, Pass::Backward, l.output_elements() / self.dims.tp);
            let bytes = if self.quantized(l) {
                self.dims.quantized_bytes(bytes / self.dims.act_bytes())
            } else {
                bytes
            };
            let ag = b.collective(CollectiveOp::AllGather, GroupKind::Tp, bytes);
            if self.dims.tp_comm_overlap {
                // Ring exchange of the output gradient, one dgrad GEMM per chunk.
                self.chunked(b, l, Pass::Dgrad, self.dims.tp);
                b.wait(ag);
            } else {
                b.wait(ag);
                b.compute(l.dgrad(&self.dims));
            }
        } else {
            self.cast(b, l, Pass::Backward, l.output_elements());
            b.compute(l.dgrad(&self.dims));
        }
        b.compute(l.wgrad(&self.dims));
    }

    /// Backward of a column-parallel linear: dgrad, then the input-gradient reduction
    /// overlapping wgrad; under SP the input is re-gathered for wgrad while dgrad runs.
    fn column_backward(&self, b: &mut Builder, l: &Linear, bytes: u64) {
        let regather = if self.dims.sp() {
            // The input is kept as its local shard (FP8 under FP8) and gathered again.
            let gathered = self.gather_bytes(l, l.input_elements());
            Some(b.collective(CollectiveOp::AllGather, GroupKind::Tp, gathered))
        } else {
            None
        };
        self.cast(b, l, Pass::Backward, l.output_elements());
        b.compute(l.dgrad(&self.dims));
        let reduce = if !self.tp_group_active() {
            None
        } else if self.dims.sp() {
            Some(b.collective(CollectiveOp::ReduceScatter, GroupKind::Tp, bytes))
        } else {
            Some(b.collective(CollectiveOp::AllReduce, GroupKind::Tp, bytes))
        };
        if let Some(ag) = regather {
            b.wait(ag);
        }
        b.compute(l.wgrad(&self.dims));
        if let Some(r) = reduce {
            b.wait(r);
        }
    }

    // ----- attention -----

    /// The fused QKV projection of multi-head (or grouped-query) attention.
    fn qkv(&self) -> Linear {
        let (q, kv) = self.model.qkv_widths();
        Linear {
            name: KernelName::QkvProj,
            tokens: self.dims.tokens(),
            k_in: self.model.hidden,
            n_out: (q + 2 * kv) / self.dims.tp,
            batch: 1,
        }
    }

    /// MLA's projections as Megatron-Core 0.12 builds them (`gpt_layer_specs.py`, MLA spec;
    /// `multi_latent_attention.py`, `MLASelfAttention.get_query_key_value_tensors`):
    /// `linear_q_down_proj` and `linear_kv_down_proj` are column-parallel linears over the
    /// gathered sequence, `linear_q_up_proj` and `linear_kv_up_proj` column-parallel linears
    /// (their latent RMSNorms fused in) over the latents. Without a query LoRA rank the
    /// query has one projection from the hidden state (`linear_q_proj`), put in `q_up`.
    fn mla(&self) -> Option<Mla> {
        let m = self.model.mla.as_ref()?;
        let d = &self.dims;
        let heads = self.model.heads;
        let linear = |name, k_in: u64, width: u64| Linear {
            name,
            tokens: d.tokens(),
            k_in,
            n_out: (width / d.tp).max(1),
            batch: 1,
        };
        let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
        let h = self.model.hidden;
        let (q_down, q_up) = if m.q_lora_rank > 0 {
            (
                Some(linear(KernelName::MlaQDown, h, m.q_lora_rank)),
                linear(KernelName::MlaQUp, m.q_lora_rank, heads * qk),
            )
        } else {
            (None, linear(KernelName::MlaQUp, h, heads * qk))
        };
        Some(Mla {
            q_down,
            kv_down: linear(
                KernelName::MlaKvDown,
                h,
                m.kv_lora_rank + m.qk_rope_head_dim,
            ),
            q_up,
            kv_up: linear(
                KernelName::MlaKvUp,
                m.kv_lora_rank,
                heads * (m.qk_nope_head_dim + m.v_head_dim),
            ),
        })
    }

    /// Bytes of the latents all-gathered over TP between MLA's down- and up-projections: the
    /// down-projections' outputs are split over TP along their width and gathered back
    /// (`gather_from_tensor_model_parallel_region`) before the up-projections; in the backward
    /// the latents' gradients are gathered along the sequence (the backward of
    /// `scatter_to_sequence_parallel_region`), less the RoPE key's, which stays whole.
    fn mla_latent_bytes(&self, mla: &Mla, forward: bool) -> u64 {
        let rope = self.model.mla.as_ref().map_or(0, |m| m.qk_rope_head_dim);
        let q = mla.q_down.map_or(0, |l| l.n_out * self.dims.tp);
        let kv = mla.kv_down.n_out * self.dims.tp - if forward { 0 } else { rope };
        self.dims.tokens() * (q + kv) * self.dims.act_bytes()
    }

    fn mla_forward(&self, b: &mut Builder, mla: &Mla) {
        for down in mla.q_down.iter().chain([&mla.kv_down]) {
            self.column_forward(b, down);
        }
        if mla.q_down.is_some() && self.tp_group_active() {
            let bytes = self.mla_latent_bytes(mla, true);
            b.blocking(CollectiveOp::AllGather, GroupKind::Tp, bytes);
        }
        for norm in self.qk_norms() {
            b.compute(norm.forward(&self.dims));
        }
        self.column_forward(b, &mla.q_up);
        self.column_forward(b, &mla.kv_up);
    }

    fn mla_backward(&self, b: &mut Builder, mla: &Mla) {
        let bytes = |l: &Linear| l.input_elements() * self.dims.act_bytes();
        self.column_backward(b, &mla.kv_up, bytes(&mla.kv_up));
        self.column_backward(b, &mla.q_up, bytes(&mla.q_up));
        for norm in self.qk_norms().iter().rev() {
            b.compute(norm.backward(&self.dims));
        }
        if mla.q_down.is_some() && self.tp_group_active() {
            let latents = self.mla_latent_bytes(mla, false);
            b.blocking(CollectiveOp::AllGather, GroupKind::Tp, latents);
        }
        self.column_backward(b, &mla.kv_down, self.hidden_bytes());
        if let Some(q_down) = &mla.q_down {
            self.column_backward(b, q_down, self.hidden_bytes());
        }
    }

    /// MLA's up-projections, then RoPE: what `mla_up_proj` recomputes
    /// (`MLASelfAttention.get_query_key_value_tensors` under `qkv_up_checkpoint`).
    fn mla_up_projections(&self, b: &mut Builder) {
        let Some(mla) = self.mla() else {
            return;
        };
        let d = self.dims;
        // Without a query LoRA rank the query projection reads the hidden state: no up.
        let q_up = mla.q_down.is_some().then_some(&mla.q_up);
        for l in q_up.into_iter().chain([&mla.kv_up]) {
            self.cast(b, l, Pass::Forward, l.input_elements());
            b.compute(l.forward(&d));
        }
        if let Some(r) = self.rope() {
            b.compute(r.forward(&d));
        }
    }

    fn out_proj(&self) -> Linear {
        let q = match &self.model.mla {
            Some(m) => self.model.heads * m.v_head_dim,
            None => self.model.qkv_widths().0,
        };
        Linear {
            name: KernelName::OutProj,
            tokens: self.dims.tokens(),
            k_in: q / self.dims.tp,
            n_out: self.model.hidden,
            batch: 1,
        }
    }

    fn head_dim(&self) -> u64 {
        self.model.qk_head_dim()
    }

    /// Core attention over `seq_kv` keys for this rank's queries, scaled by `share` (1/cp per
    /// ring step). In a sliding-window layer each query sees itself and `window` tokens
    /// before it: Transformer Engine's fused kernels then compute only the key blocks of that
    /// band, so the kernel is an attention over `window + 1` keys with no causal half to skip
    /// (Megatron-LM's FLOP accounting still counts the whole sequence).
    fn attention_kernel(
        &self,
        pass: Pass,
        seq_kv: u64,
        causal: bool,
        steps: u64,
        window: Option<u64>,
    ) -> Kernel {
        // `ModelSpec::attention_window` is `None` where the window covers the sequence.
        let (seq_kv, causal) = match window {
            Some(left) => (left + 1, false),
            None => (seq_kv, causal),
        };
        let d = &self.dims;
        let heads = self.model.heads / d.tp;
        let kv_heads = (self.model.kv_heads / d.tp).max(1);
        let hd = self.head_dim();
        let seq_q = d.seq / d.cp;
        let e = d.act_bytes();
        // Megatron-LM's accounting: QKᵀ and AV over the full s × s matrix, 2 FLOPs per MAC;
        // the whole sequence's keys spread over `steps` ring steps.
        let fwd_flops = 4 * d.batch * seq_q * d.seq * heads * hd / steps;
        let t = d.batch * seq_q;
        let io = t * (2 * heads + 2 * kv_heads) * hd * e;
        let scores = if d.flash {
            0
        } else {
            // Unfused: scores and softmax go through HBM, and the dropout mask (a byte per
            // score) where there is dropout.
            let mask = u64::from(self.model.attention_dropout > 0.0);
            d.batch * heads * seq_q * seq_kv * (2 * e + mask)
        };
        let (flops, bytes) = match pass {
            Pass::Forward => (fwd_flops, io + scores),
            _ => (2 * fwd_flops, 2 * io + 2 * scores),
        };
        Kernel {
            name: KernelName::CoreAttention,
            pass,
            shape: Shape::Attention {
                batch: d.batch,
                heads,
                kv_heads,
                seq_q,
                seq_kv,
                head_dim: hd,
                causal,
                flash: d.flash,
                dropout: self.model.attention_dropout > 0.0,
            },
            flops,
            bytes,
            dtype: d.attention_precision(),
        }
    }

    /// KV bytes of this CP rank's block (keys and values of its `s/cp` tokens).
    fn kv_block_bytes(&self) -> u64 {
        let d = &self.dims;
        let kv_heads = (self.model.kv_heads / d.tp).max(1);
        2 * d.tokens() * kv_heads * self.head_dim() * d.act_bytes()
    }

    fn core_attention_forward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        if d.cp == 1 {
            let window = self.model.attention_window(layer);
            b.compute(self.attention_kernel(Pass::Forward, d.seq, true, 1, window));
            return;
        }
        let block = d.seq / d.cp;
        match d.cp_comm {
            CpComm::AllGather => {
                b.blocking(
                    CollectiveOp::AllGather,
                    GroupKind::Cp,
                    d.cp * self.kv_block_bytes(),
                );
                b.compute(self.attention_kernel(Pass::Forward, d.seq, true, 1, None));
            }
            CpComm::P2p => self.ring(b, Pass::Forward, block, self.kv_block_bytes()),
        }
    }

    /// Ring attention: `cp` block steps; while step `i` computes, the KV block moves on.
    fn ring(&self, b: &mut Builder, pass: Pass, block: u64, bytes: u64) {
        let cp = self.dims.cp;
        let mut data = b.last_compute();
        for step in 0..cp {
            let transfer = if step + 1 < cp {
                let deps: Vec<u32> = data.into_iter().collect();
                let send = b.p2p(true, Peer::CpNext, bytes, Stream::CpSendNext, &deps);
                let recv = b.p2p(false, Peer::CpPrev, bytes, Stream::CpRecvPrev, &[]);
                Some((send, recv))
            } else {
                None
            };
            // Load-balanced split (each rank holds chunks i and 2cp−1−i): the diagonal step is
            // causal over the whole block; every other step attends the block's queries to
            // half of the arriving keys (or half the queries to all of them), so it does the
            // same work as the diagonal one: 1/cp of the rank's share.
            let seq_kv = if step == 0 { block } else { block / 2 };
            b.compute(self.attention_kernel(pass, seq_kv, step == 0, cp, None));
            if let Some((send, recv)) = transfer {
                b.wait(send);
                b.wait(recv);
                data = Some(recv);
            }
        }
    }

    fn core_attention_backward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        if d.cp == 1 {
            let window = self.model.attention_window(layer);
            b.compute(self.attention_kernel(Pass::Backward, d.seq, true, 1, window));
            return;
        }
        match d.cp_comm {
            CpComm::AllGather => {
                let bytes = d.cp * self.kv_block_bytes();
                b.blocking(CollectiveOp::AllGather, GroupKind::Cp, bytes);
                b.compute(self.attention_kernel(Pass::Backward, d.seq, true, 1, None));
                b.blocking(CollectiveOp::ReduceScatter, GroupKind::Cp, bytes);
            }
            // KV and dKV travel together.
            CpComm::P2p => self.ring(b, Pass::Backward, d.seq / d.cp, 2 * self.kv_block_bytes()),
        }
    }

    fn rope(&self) -> Option<Pointwise> {
        if self.model.position != Position::Rope {
            return None;
        }
        let l = self.qkv();
        let (q, kv) = self.model.qkv_widths();
        let width = (q + kv) / self.dims.tp;
        Some(Pointwise {
            name: KernelName::Rope,
            elements: l.tokens * width,
            read: l.tokens * width,
            write: l.tokens * width,
        })
    }

    pub fn attention_forward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        b.label.module = Module::Attention;
        b.compute(self.norm(KernelName::InputNorm).forward(&d));
        match self.mla() {
            Some(mla) => self.mla_forward(b, &mla),
            None => {
                self.column_forward(b, &self.qkv());
                for norm in self.qk_norms() {
                    b.compute(norm.forward(&d));
                }
            }
        }
        if let Some(r) = self.rope() {
            b.compute(r.forward(&d));
        }
        self.core_attention_forward(b, layer);
        self.row_forward(b, &self.out_proj(), self.hidden_bytes());
        b.compute(self.residual(KernelName::AttnResidual).forward(&d));
    }

    pub fn attention_backward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        b.label.module = Module::Attention;
        b.compute(self.residual(KernelName::AttnResidual).backward(&d));
        if self.recomputes_input_norm() {
            recomputing(b, |b| {
                b.compute(self.norm(KernelName::InputNorm).forward(&d));
            });
        }
        self.row_backward(b, &self.out_proj(), self.hidden_bytes());
        if self.recomputes(RecomputeModule::MlaUpProj) {
            recomputing(b, |b| self.mla_up_projections(b));
        }
        if self.recomputes(RecomputeModule::CoreAttn) {
            recomputing(b, |b| self.core_attention_forward(b, layer));
        }
        self.core_attention_backward(b, layer);
        if let Some(r) = self.rope() {
            b.compute(r.backward(&d));
        }
        match self.mla() {
            Some(mla) => {
                if self.recomputes_input_norm() {
                    for down in mla.q_down.iter().chain([&mla.kv_down]) {
                        self.requantize_input(b, down, self.local_input(down));
                    }
                }
                self.mla_backward(b, &mla);
            }
            None => {
                for norm in self.qk_norms().iter().rev() {
                    b.compute(norm.backward(&d));
                }
                self.column_backward(b, &self.qkv(), self.hidden_bytes());
            }
        }
        b.compute(self.norm(KernelName::InputNorm).backward(&d));
    }

    // ----- MLP -----

    fn gated(&self) -> u64 {
        match self.model.activation {
            Activation::Swiglu => 2,
            Activation::Gelu | Activation::Relu2 => 1,
        }
    }

    /// fc1 and fc2 of an MLP whose FFN width `ffn` is split over `shards` GPUs (TP for dense
    /// MLPs and shared experts, expert-TP for routed experts).
    fn mlp_linears(
        &self,
        tokens: u64,
        ffn: u64,
        shards: u64,
        batch: u64,
        names: [KernelName; 2],
    ) -> [Linear; 2] {
        let tp = shards;
        let h = self.model.hidden;
        [
            Linear {
                name: names[0],
                tokens,
                k_in: h,
                n_out: self.gated() * ffn / tp,
                batch,
            },
            Linear {
                name: names[1],
                tokens,
                k_in: ffn / tp,
                n_out: h,
                batch,
            },
        ]
    }

    fn activation(
        &self,
        name: KernelName,
        tokens: u64,
        ffn: u64,
        shards: u64,
        batch: u64,
    ) -> Pointwise {
        let f = ffn / shards * batch;
        Pointwise {
            name,
            elements: tokens * f,
            read: self.gated() * tokens * f,
            write: tokens * f,
        }
    }

    /// A TP-split MLP on this CP rank's tokens (dense MLP or shared experts).
    fn dense_mlp_forward(&self, b: &mut Builder, ffn: u64, names: [KernelName; 3]) {
        self.dense_mlp_up_forward(b, ffn, names);
        self.dense_mlp_down_forward(b, ffn, names);
    }

    /// A dense MLP's fc1 (its input gathered over TP under SP) and activation.
    fn dense_mlp_up_forward(&self, b: &mut Builder, ffn: u64, names: [KernelName; 3]) {
        let d = self.dims;
        let [up, _] = self.mlp_linears(d.tokens(), ffn, d.tp, 1, [names[0], names[2]]);
        self.column_forward(b, &up);
        b.compute(
            self.activation(names[1], d.tokens(), ffn, d.tp, 1)
                .forward(&d),
        );
    }

    /// A dense MLP's fc2 and the reduction of its output over TP.
    fn dense_mlp_down_forward(&self, b: &mut Builder, ffn: u64, names: [KernelName; 3]) {
        let d = self.dims;
        let [_, down] = self.mlp_linears(d.tokens(), ffn, d.tp, 1, [names[0], names[2]]);
        self.row_forward(b, &down, self.hidden_bytes());
    }

    fn dense_mlp_backward(&self, b: &mut Builder, ffn: u64, names: [KernelName; 3]) {
        let d = self.dims;
        let [up, down] = self.mlp_linears(d.tokens(), ffn, d.tp, 1, [names[0], names[2]]);
        self.row_backward(b, &down, self.hidden_bytes());
        b.compute(
            self.activation(names[1], d.tokens(), ffn, d.tp, 1)
                .backward(&d),
        );
        self.column_backward(b, &up, self.hidden_bytes());
    }

    const MLP: [KernelName; 3] = [
        KernelName::MlpUp,
        KernelName::MlpActivation,
        KernelName::MlpDown,
    ];
    const SHARED: [KernelName; 3] = [
        KernelName::SharedUp,
        KernelName::SharedActivation,
        KernelName::SharedDown,
    ];
    const EXPERT: [KernelName; 3] = [
        KernelName::ExpertUp,
        KernelName::ExpertActivation,
        KernelName::ExpertDown,
    ];

    fn mlp_module(&self, layer: u64) -> Module {
        if self.model.is_moe_layer(layer) {
            Module::Moe
        } else {
            Module::Mlp
        }
    }

    pub fn mlp_forward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        b.label.module = self.mlp_module(layer);
        b.compute(self.norm(KernelName::PreMlpNorm).forward(&d));
        match self.model.moe {
            Some(moe) if self.model.is_moe_layer(layer) => {
                self.moe_forward_with_shared(b, moe);
            }
            _ => {
                self.dense_mlp_forward(b, self.model.ffn_hidden, Self::MLP);
            }
        }
        b.compute(self.residual(KernelName::MlpResidual).forward(&d));
    }

    pub fn mlp_backward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        b.label.module = self.mlp_module(layer);
        b.compute(self.residual(KernelName::MlpResidual).backward(&d));
        match self.model.moe {
            Some(moe) if self.model.is_moe_layer(layer) => {
                // The pre-MLP norm of a MoE layer is a module of its own (`layernorm`).
                let norm = self.recomputes(RecomputeModule::Layernorm);
                let whole = self.recomputes(RecomputeModule::Moe);
                if norm {
                    recomputing(b, |b| {
                        b.compute(self.norm(KernelName::PreMlpNorm).forward(&d));
                    });
                }
                if whole {
                    // The MoE layer's forward again, shared experts included; the modules
                    // inside it are not recomputed a second time.
                    recomputing(b, |b| self.moe_forward_with_shared(b, moe));
                }
                if moe.shared_experts > 0 {
                    let again = !whole && self.recomputes(RecomputeModule::SharedExperts);
                    self.shared_experts_backward(b, &moe, again, norm);
                }
                let act = !whole && self.recomputes(RecomputeModule::MoeAct);
                self.moe_backward(b, &moe, act);
            }
            _ => {
                if self.recomputes(RecomputeModule::Mlp) {
                    // The dense MLP's checkpoint starts at the norm Transformer Engine fuses
                    // into fc1 (`TELayerNormColumnParallelLinear`).
                    recomputing(b, |b| {
                        b.compute(self.norm(KernelName::PreMlpNorm).forward(&d));
                        self.dense_mlp_forward(b, self.model.ffn_hidden, Self::MLP);
                    });
                }
                self.dense_mlp_backward(b, self.model.ffn_hidden, Self::MLP);
            }
        }
        b.compute(self.norm(KernelName::PreMlpNorm).backward(&d));
    }

    /// The shared experts' backward: their forward again first (`again`), or else, when the
    /// pre-MLP norm was dropped (`norm_dropped`), fc1's input quantized again: fc1 kept the
    /// norm output in BF16 for its wgrad (the router is not a TE module).
    fn shared_experts_backward(&self, b: &mut Builder, moe: &Moe, again: bool, norm_dropped: bool) {
        let d = self.dims;
        let ffn = moe.shared_experts * moe.ffn_hidden;
        if again {
            recomputing(b, |b| self.dense_mlp_forward(b, ffn, Self::SHARED));
        } else if norm_dropped {
            let [up, _] =
                self.mlp_linears(d.tokens(), ffn, d.tp, 1, [Self::SHARED[0], Self::SHARED[2]]);
            self.requantize_input(b, &up, self.local_input(&up));
        }
        self.dense_mlp_backward(b, ffn, Self::SHARED);
    }

    // ----- MoE -----

    /// Token copies this rank sends to the experts (routed, less what token drop drops, plus
    /// its padding), local experts and tokens per local expert after dispatch, and the copies
    /// each all-to-all moves per rank: those the most loaded rank of the EP group receives
    /// ([`Moe::hottest_rank_share`]), whose experts and all-to-alls every rank waits for.
    fn moe_sizes(&self, moe: &Moe) -> MoeSizes {
        let d = self.dims;
        let (experts, top_k) = (moe.experts, moe.top_k);
        let routed = d.sp_tokens() * top_k;
        let sent = match moe.capacity {
            None => routed,
            Some(c) => {
                // `moe_utils.get_capacity`: ceil(tokens / experts × factor), at least 4.
                let capacity = ((routed as f64 / experts as f64) * c.factor).ceil() as u64;
                let capacity = capacity.max(MIN_EXPERT_CAPACITY);
                if c.pad {
                    capacity * experts
                } else {
                    routed.min(capacity * experts)
                }
            }
        };
        let local_experts = experts / d.ep;
        // Expert-TP gathers the copies of the other expert-TP ranks when theirs differ, so the
        // hottest rank's count is a sum over that many more tokens.
        let gather = d.expert_tp_gather();
        let share = moe.hottest_rank_share(d.ep, d.sp_tokens() * gather);
        let moved = (sent as f64 * share).round() as u64;
        MoeSizes {
            sent,
            moved,
            local_experts,
            per_expert: moved * gather / local_experts,
        }
    }

    /// Where the forward's dispatcher waits on the host for the GPU's token counts
    /// (`MoEAlltoAllTokenDispatcher.preprocess`'s `cuda_sync_point`).
    fn moe_host_sync(&self) -> MoeHostSync {
        let router_pads = self.dims.moe_router_padding_for_quantization && self.dims.quantizes();
        match self.model.moe.and_then(|m| m.capacity) {
            // The padded routing map's size is dynamic: the host reads it before the
            // permutation (`preprocess`: `moe_router_padding_for_fp8`, "before_permutation_1").
            None if router_pads => MoeHostSync::BeforePermute,
            None if self.dims.ep > 1 => MoeHostSync::BeforeAllToAll,
            None => MoeHostSync::Never,
            Some(c) if c.pad => MoeHostSync::Never,
            Some(_) => MoeHostSync::BeforePermute,
        }
    }

    fn router(&self, experts: u64) -> Linear {
        Linear {
            name: KernelName::Router,
            tokens: self.dims.sp_tokens(),
            k_in: self.model.hidden,
            n_out: experts,
            batch: 1,
        }
    }

    /// The router's small ops after its gating GEMM, each a kernel issued from Python, as
    /// Megatron-Core 0.12 runs them (`router.py` `TopKRouter.routing` and `aux_loss_load_balancing`,
    /// `moe_utils.py` `topk_softmax_with_capacity`, `group_limited_topk`,
    /// `sequence_load_balancing_loss_func`), counted line by line for DeepSeek-V3's router:
    /// - forward: 2 casts to fp32 and back; 15 for scores, bias, top-k, gather, normalisation,
    ///   scaling, the gates' scatter and routing map (`group_limited_topk` is 10 where a plain
    ///   top-k is 1); 4 for the capacity's top-k and mask, 1 more to pad; 4 aux-loss scores, 7
    ///   for the sequence aux loss and 1 for its TP all-gather, 2 for its tracker, 2 for the
    ///   expert-bias token count: 48 with the GEMM for DeepSeek-V3;
    /// - backward: one kernel per differentiable forward op (the casts, scores, gather,
    ///   normalisation, scaling, scatter, aux-loss scores and loss, the pad's multiply).
    ///
    /// `training.moe_router_fusion` (Transformer Engine PR #1883, Megatron-Core 0.14) runs
    /// scores to routing map as one kernel (`fused_topk_with_score_function`) and the aux-loss
    /// scores as one (`fused_compute_score_for_moe_aux_loss`), forward and backward.
    /// Megatron-LM's DeepSeek-V3 GB200 guide counted its router falling from 72 kernels to
    /// 31 this way (`docs/discussions/deepseek-v3-gb200-optimization`, §2.1.4).
    fn router_ops(&self, moe: &Moe, pass: Pass) -> Kernel {
        let d = &self.dims;
        let groups = moe.router_groups.groups > 1;
        let capacity = moe.capacity;
        let pad = capacity.is_some_and(|c| c.pad);
        let fused = d.moe_router_fusion;
        let top_k_ops: u32 = match (fused, groups) {
            (true, _) => 1,
            (false, true) => 24,
            (false, false) => 15,
        };
        let aux_scores: u32 = if fused { 1 } else { 4 };
        let kernels = match pass {
            Pass::Forward => {
                2 + top_k_ops
                    + if capacity.is_some() { 4 } else { 0 }
                    + u32::from(pad)
                    + aux_scores
                    + 8
                    + 2
                    + 2
            }
            _ => {
                // Differentiable: casts 2; scores, gather, normalisation 3, scaling, scatter 2
                // (1 fused); aux-loss scores; the sequence aux loss 7; the pad's multiply.
                let routing = if fused { 1 } else { 8 };
                2 + routing + aux_scores + 7 + u32::from(pad)
            }
        };
        // Each kernel reads and writes a tokens × experts fp32 tensor.
        let elements = d.sp_tokens() * moe.experts;
        let bytes = u64::from(kernels) * 2 * elements * 4;
        chained(
            elementwise(KernelName::RouterTopk, pass, elements, bytes, d),
            kernels,
        )
    }

    /// Tokens copied in or out of expert order. Unfused (Megatron-Core 0.12 `moe_utils.py`
    /// `permute` / `unpermute`, drop-and-pad or dropless), the permutation is a chain of
    /// PyTorch ops: the routing map cast, transposed and sorted, then an `index_select` (5
    /// kernels; backward 2); unpermuting multiplies by the probabilities and scatter-adds
    /// back, with casts (9; backward 5). `training.moe_permute_fusion` (Transformer Engine's
    /// `moe_permute` / `moe_unpermute`) runs the permutation as two row-id-map kernels and
    /// one copy, the unpermutation as one (1 each backward). With EP and more than one local
    /// expert the dispatcher also regroups the received tokens by local expert (a second
    /// copy: `token_dispatcher.py`, the drop-and-pad view-transpose-contiguous or
    /// `sort_chunks_by_idxs`), after the dispatch and before the combine.
    fn permute(&self, name: KernelName, routed: u64, local_experts: u64, pass: Pass) -> Kernel {
        let d = &self.dims;
        let h = self.model.hidden;
        let forward = pass == Pass::Forward;
        let chain: u32 = match (name, d.moe_permute_fusion, forward) {
            (KernelName::Permute, false, true) => 5,
            (KernelName::Permute, false, false) => 2,
            (KernelName::Permute, true, true) => 3,
            (_, false, true) => 9,
            (_, false, false) => 5,
            (_, true, _) => 1,
        };
        let regroup = d.ep > 1 && local_experts > 1;
        let copies = 1 + u64::from(regroup);
        let moved = routed * h;
        let p = Pointwise {
            name,
            elements: moved,
            read: copies * moved,
            write: copies * moved,
        };
        let k = if forward { p.forward(d) } else { p.backward(d) };
        chained(k, chain + u32::from(regroup))
    }

    /// Tokens to their experts: all-to-all over EP, then a gather over expert-TP of the tokens
    /// the other expert-TP ranks routed. Also the backward of [`Self::moe_combine`].
    ///
    /// In the forward (`forward`) the host waits for the GPU before the all-to-all: a
    /// dropless dispatcher reads the tokens per expert on the host to size it
    /// (Megatron-Core `token_dispatcher.py`, `MoEAlltoAllTokenDispatcher.preprocess`:
    /// `cuda_sync_point = "before_ep_alltoall"`). The backward reuses those sizes.
    fn moe_dispatch(
        &self,
        b: &mut Builder,
        routed: u64,
        forward: bool,
        beside: &mut dyn FnMut(&mut Builder),
    ) {
        let all_to_all = self.moe_dispatch_issue(b, routed, forward, None);
        // The expert-TP gather takes the all-to-all's output, so it starts after it.
        let tokens_from = all_to_all.or(b.last_compute());
        beside(b);
        self.moe_dispatch_finish(b, routed, all_to_all, tokens_from);
    }

    /// [`Self::moe_dispatch`]'s all-to-all, of the output of `input` (else of the last
    /// kernel); `None` without EP.
    fn moe_dispatch_issue(
        &self,
        b: &mut Builder,
        routed: u64,
        forward: bool,
        input: Option<u32>,
    ) -> Option<u32> {
        let d = self.dims;
        let bytes = routed * self.model.hidden * d.act_bytes();
        let all_to_all = (d.ep > 1).then(|| match input {
            Some(i) => b.collective_after(CollectiveOp::AllToAll, GroupKind::Ep, bytes, &[i]),
            None => b.collective(CollectiveOp::AllToAll, GroupKind::Ep, bytes),
        });
        if forward && self.moe_host_sync() == MoeHostSync::BeforeAllToAll {
            b.program.host_syncs.extend(all_to_all);
        }
        all_to_all
    }

    /// What follows [`Self::moe_dispatch`]'s all-to-all: the next kernel waits for it, and the
    /// expert-TP gather of the tokens from `tokens_from`.
    fn moe_dispatch_finish(
        &self,
        b: &mut Builder,
        routed: u64,
        all_to_all: Option<u32>,
        tokens_from: Option<u32>,
    ) {
        let d = self.dims;
        let bytes = routed * self.model.hidden * d.act_bytes();
        if let Some(a) = all_to_all {
            b.wait(a);
        }
        let gather = d.expert_tp_gather();
        if gather > 1 {
            let all_gather = b.collective_after(
                CollectiveOp::AllGather,
                d.expert_tp_group,
                gather * bytes,
                tokens_from.as_slice(),
            );
            b.wait(all_gather);
        }
    }

    /// Expert outputs back to their tokens: reduce over expert-TP (scattered back to the ranks
    /// that routed them, or all-reduced when they routed the same tokens), then all-to-all over
    /// EP. Also the backward of [`Self::moe_dispatch`].
    fn moe_combine(&self, b: &mut Builder, routed: u64, beside: &mut dyn FnMut(&mut Builder)) {
        let done = self.moe_combine_issue(b, routed, None);
        beside(b);
        // The next kernel takes the all-to-all's output, or the reduction's without EP.
        if let Some(done) = done {
            b.wait(done);
        }
    }

    /// [`Self::moe_combine`]'s reduction and all-to-all, of the output of `input` (else of the
    /// last kernel); returns what the next kernel waits for.
    fn moe_combine_issue(&self, b: &mut Builder, routed: u64, input: Option<u32>) -> Option<u32> {
        let d = self.dims;
        let bytes = routed * self.model.hidden * d.act_bytes();
        let gather = d.expert_tp_gather();
        let from: Vec<u32> = input.or(b.last_compute()).into_iter().collect();
        // The all-to-all sends what the expert-TP reduction produced, so it starts after it.
        let reduced = if gather > 1 {
            Some(b.collective_after(
                CollectiveOp::ReduceScatter,
                d.expert_tp_group,
                gather * bytes,
                &from,
            ))
        } else if d.etp > 1 {
            Some(b.collective_after(CollectiveOp::AllReduce, d.expert_tp_group, bytes, &from))
        } else {
            None
        };
        let all_to_all = (d.ep > 1).then(|| {
            let input: Vec<u32> = reduced.map_or_else(|| from.clone(), |r| vec![r]);
            b.collective_after(CollectiveOp::AllToAll, GroupKind::Ep, bytes, &input)
        });
        all_to_all.or(reduced)
    }

    /// fc1, fc2 and the activation of this rank's `local` experts, `per_expert` tokens each,
    /// their FFN split over expert TP.
    fn expert_kernels(&self, per_expert: u64, ffn: u64, local: u64) -> ([Linear; 2], Pointwise) {
        let etp = self.dims.etp;
        let linears = self.mlp_linears(
            per_expert,
            ffn,
            etp,
            local,
            [Self::EXPERT[0], Self::EXPERT[2]],
        );
        let act = self.activation(Self::EXPERT[1], per_expert, ffn, etp, local);
        (linears, act)
    }

    /// A MoE layer's forward with its shared experts: after the routed experts, or beside the
    /// all-to-alls under `moe_shared_expert_overlap` (Megatron-Core `moe_layer.py` with
    /// `shared_experts.py`: fc1 and the activation while the dispatch runs, fc2 while the
    /// combine runs, on a stream of their own; the backward is autograd's and not overlapped).
    fn moe_forward_with_shared(&self, b: &mut Builder, moe: Moe) {
        let shared = moe.shared_experts * moe.ffn_hidden;
        if shared > 0 && self.dims.moe_shared_expert_overlap && self.dims.ep > 1 {
            let mut up = |b: &mut Builder| self.dense_mlp_up_forward(b, shared, Self::SHARED);
            let mut down = |b: &mut Builder| self.dense_mlp_down_forward(b, shared, Self::SHARED);
            self.moe_forward(b, moe, [&mut up, &mut down]);
            return;
        }
        self.moe_forward(
            b,
            moe,
            [&mut |_: &mut Builder| {}, &mut |_: &mut Builder| {}],
        );
        if shared > 0 {
            self.dense_mlp_forward(b, shared, Self::SHARED);
        }
    }

    /// The routed experts' forward; `beside[0]` is issued while the dispatch all-to-all runs,
    /// `beside[1]` while the combine does.
    fn moe_forward(&self, b: &mut Builder, moe: Moe, beside: [&mut dyn FnMut(&mut Builder); 2]) {
        let [during_dispatch, during_combine] = beside;
        let sizes = self.moe_sizes(&moe);
        self.route_forward(b, &moe);
        self.moe_dispatch(b, sizes.moved, true, during_dispatch);
        self.experts_forward(b, &moe);
        self.moe_combine(b, sizes.moved, during_combine);
        self.permutation(b, &moe, KernelName::Unpermute, Pass::Forward, None);
    }

    /// The router, its ops and the permutation of a MoE layer's forward; returns the
    /// permutation, the dispatch's input.
    fn route_forward(&self, b: &mut Builder, moe: &Moe) -> u32 {
        let d = self.dims;
        b.compute(self.router(moe.experts).forward(&d));
        b.compute(self.router_ops(moe, Pass::Forward));
        self.gather_token_counts(b, moe);
        let permute = self.permutation(b, moe, KernelName::Permute, Pass::Forward, None);
        if self.moe_host_sync() == MoeHostSync::BeforePermute {
            b.program.host_syncs.push(permute);
        }
        permute
    }

    /// Every rank's tokens per expert, all-gathered over the expert TP × EP group before the
    /// permutation, to size the all-to-all (`MoEAlltoAllTokenDispatcher.preprocess`:
    /// `gather_from_sequence_parallel_region(num_local_tokens_per_expert, group=tp_ep_group)`,
    /// an int64 per expert and rank, on the compute stream's order). Padded to capacity,
    /// every size is known and nothing is gathered. Over EP the group is taken as the EP
    /// group, whose latency it has with expert TP 1.
    fn gather_token_counts(&self, b: &mut Builder, moe: &Moe) {
        let d = self.dims;
        if !d.moe_alltoall_dispatcher || moe.capacity.is_some_and(|c| c.pad) {
            return;
        }
        let (group, ranks) = if d.ep > 1 {
            (GroupKind::Ep, d.ep)
        } else if d.etp > 1 {
            (d.expert_tp_group, d.etp)
        } else {
            return;
        };
        b.blocking(CollectiveOp::AllGather, group, moe.experts * 8 * ranks);
    }

    /// The local experts' forward: fc1, the activation and fc2, each GEMM's input cast first;
    /// under FP8 the input and the router's probabilities padded first and the output unpadded
    /// after ([`Self::pads_expert_splits`]).
    fn experts_forward(&self, b: &mut Builder, moe: &Moe) {
        let d = self.dims;
        let sizes = self.moe_sizes(moe);
        let ([up, down], act) =
            self.expert_kernels(sizes.per_expert, moe.ffn_hidden, sizes.local_experts);
        let pads = self.pads_expert_splits(moe, &up);
        if pads {
            b.compute(self.expert_padding(Pass::Forward, up.input_elements()));
            b.compute(self.probs_padding(Pass::Forward, up.tokens * up.batch));
        }
        self.cast(b, &up, Pass::Forward, up.input_elements());
        b.compute(up.forward(&d));
        b.compute(act.forward(&d));
        self.cast(b, &down, Pass::Forward, down.input_elements());
        b.compute(down.forward(&d));
        if pads {
            b.compute(self.expert_padding(Pass::Forward, down.output_elements()));
        }
    }

    /// Whether `moe`'s FP8 expert GEMMs (`up` quantized) copy their tokens into a buffer with
    /// each expert's rows padded to the GEMM's alignment, and back: Megatron-Core's
    /// `TEGroupedMLP` (0.10 on, `moe/experts.py`) calls Transformer Engine's `Fp8Padding` on
    /// its input and the router's probabilities and `Fp8Unpadding` on its output, and each
    /// copies unless every expert's count is already a multiple of 16 (32 for MXFP8;
    /// `module/fp8_padding.py`). Dropless counts are not, even under forced balance (random
    /// logits, `moe_utils.RandomSTE`); the router's own padding
    /// (`--moe-router-padding-for-quantization`) makes them so, and so does padding to a
    /// capacity that is.
    fn pads_expert_splits(&self, moe: &Moe, up: &Linear) -> bool {
        let d = &self.dims;
        if !self.quantized(up) || d.moe_router_padding_for_quantization {
            return false;
        }
        let align = if d.precision == Precision::Mxfp8 {
            32
        } else {
            16
        };
        match moe.capacity {
            // `up` runs each local expert on `tokens` rows: the capacity when padded to it.
            Some(c) if c.pad => !up.tokens.is_multiple_of(align),
            _ => true,
        }
    }

    /// One `Fp8Padding` / `Fp8Unpadding` copy of `elements` BF16 values (TE's
    /// `fused_multi_row_padding` or `fused_multi_row_unpadding`: one kernel, each value read
    /// and written once).
    fn expert_padding(&self, pass: Pass, elements: u64) -> Kernel {
        let d = &self.dims;
        let bytes = 2 * elements * d.unquantized().activation_bytes();
        let mut k = elementwise(KernelName::ExpertPadding, pass, elements, bytes, d);
        k.dtype = d.unquantized();
        k
    }

    /// The same copy of the router's fp32 probability per token.
    fn probs_padding(&self, pass: Pass, tokens: u64) -> Kernel {
        let mut k = self.expert_padding(pass, tokens);
        k.bytes = 2 * tokens * 4;
        k
    }

    /// The MoE layer's backward; `recompute_act` (`moe_act`) runs the experts' activation again
    /// when fc2's output gradient arrives, and under FP8 quantizes its output again for fc2's
    /// wgrad.
    fn moe_backward(&self, b: &mut Builder, moe: &Moe, recompute_act: bool) {
        let sizes = self.moe_sizes(moe);
        self.permutation(b, moe, KernelName::Unpermute, Pass::Backward, None);
        self.moe_dispatch(b, sizes.moved, false, &mut |_| {});
        self.experts_backward(b, moe, recompute_act, true);
        self.moe_combine(b, sizes.moved, &mut |_| {});
        self.route_backward(b, moe, None);
    }

    /// The local experts' backward: fc2's and fc1's data gradients, with their weight
    /// gradients beside them when `wgrads` (else [`Self::experts_wgrads`] runs them later);
    /// `recompute_act` as in [`Self::moe_backward`].
    fn experts_backward(&self, b: &mut Builder, moe: &Moe, recompute_act: bool, wgrads: bool) {
        let d = self.dims;
        let sizes = self.moe_sizes(moe);
        let ([up, down], act) =
            self.expert_kernels(sizes.per_expert, moe.ffn_hidden, sizes.local_experts);
        // Autograd runs the forward's copies backwards: the output gradient padded, the
        // input's and the probabilities' gradients unpadded.
        let pads = self.pads_expert_splits(moe, &up);
        if pads {
            b.compute(self.expert_padding(Pass::Backward, down.output_elements()));
        }
        if recompute_act {
            recomputing(b, |b| {
                b.compute(act.forward(&d));
            });
            self.requantize_input(b, &down, down.input_elements());
        }
        self.cast(b, &down, Pass::Backward, down.output_elements());
        b.compute(down.dgrad(&d));
        if wgrads {
            b.compute(down.wgrad(&d));
        }
        b.compute(act.backward(&d));
        self.cast(b, &up, Pass::Backward, up.output_elements());
        b.compute(up.dgrad(&d));
        if wgrads {
            b.compute(up.wgrad(&d));
        }
        if pads {
            b.compute(self.expert_padding(Pass::Backward, up.input_elements()));
            b.compute(self.probs_padding(Pass::Backward, up.tokens * up.batch));
        }
    }

    /// The local experts' weight gradients, when [`Self::experts_backward`] left them.
    fn experts_wgrads(&self, b: &mut Builder, moe: &Moe) {
        let d = self.dims;
        let sizes = self.moe_sizes(moe);
        let ([up, down], _) =
            self.expert_kernels(sizes.per_expert, moe.ffn_hidden, sizes.local_experts);
        b.compute(down.wgrad(&d));
        b.compute(up.wgrad(&d));
    }

    /// The permutation's and the router's backward, once `after` (an all-to-all) is done.
    fn route_backward(&self, b: &mut Builder, moe: &Moe, after: Option<u32>) {
        let d = self.dims;
        self.permutation(b, moe, KernelName::Permute, Pass::Backward, after);
        b.compute(self.router_ops(moe, Pass::Backward));
        let router = self.router(moe.experts);
        b.compute(router.dgrad(&d));
        b.compute(router.wgrad(&d));
    }

    // ----- the combined 1F1B step (expert-parallel all-to-all overlap) -----
    //
    // Megatron-Core `models/common/model_chunk_schedule_plan.py`,
    // `TransformerLayerSchedulePlan.run`, merges a forward layer `f` of one micro-batch with a
    // backward layer `b` of another:
    //   comm stream: combine-bwd(b)   | dispatch(f) -> dispatch-bwd(b) | combine(f)
    //   compute:     pre-dispatch(f)  | mlp-bwd(b) -> [dw(b)] -> mlp(f) | pre-dispatch-bwd(b)
    // where pre-dispatch is attention, the pre-MLP norm, the router, the permutation and the
    // shared experts (`gpt/fine_grained_callables.py`), and the combine's node ends with the
    // unpermutation and the residual. Each all-to-all is waited for only by the kernel that
    // takes its output. A layer without expert all-to-alls runs its attention as
    // pre-dispatch and its MLP as mlp; a multi-token prediction module runs whole.

    /// Layer `layer`'s MoE if it moves its tokens over expert parallelism (not a multi-token
    /// prediction module's, which runs whole).
    fn exchanging(&self, layer: u64) -> Option<Moe> {
        let moe = self.model.moe.filter(|_| self.model.is_moe_layer(layer))?;
        (self.dims.ep > 1 && !self.model.is_mtp_layer(layer)).then_some(moe)
    }

    /// Labels what follows as layer `layer`'s MLP; returns its MoE if it exchanges tokens.
    fn mlp_part(&self, b: &mut Builder, layer: u64) -> Option<Moe> {
        b.label.layer = layer as u32;
        let moe = self.exchanging(layer)?;
        b.label.module = self.mlp_module(layer);
        Some(moe)
    }

    /// A token permutation (`Permute`) or unpermutation of `moe`'s routed copies, once `after`
    /// (an all-to-all) is done.
    fn permutation(
        &self,
        b: &mut Builder,
        moe: &Moe,
        name: KernelName,
        pass: Pass,
        after: Option<u32>,
    ) -> u32 {
        if let Some(a) = after {
            b.wait(a);
        }
        let sizes = self.moe_sizes(moe);
        b.compute(self.permute(name, sizes.sent, sizes.local_experts, pass))
    }

    /// Forward, up to the dispatch; returns the permutation the dispatch sends.
    pub fn combined_forward_pre(&self, b: &mut Builder, layer: u64) -> Option<u32> {
        b.label.layer = layer as u32;
        if self.model.is_mtp_layer(layer) {
            self.mtp_forward(b, layer);
            return None;
        }
        self.attention_forward(b, layer);
        let moe = self.mlp_part(b, layer)?;
        b.compute(self.norm(KernelName::PreMlpNorm).forward(&self.dims));
        let permute = self.route_forward(b, &moe);
        if moe.shared_experts > 0 {
            self.dense_mlp_forward(b, moe.shared_experts * moe.ffn_hidden, Self::SHARED);
        }
        Some(permute)
    }

    /// The forward dispatch of the tokens `permute` ordered.
    pub fn combined_forward_dispatch(
        &self,
        b: &mut Builder,
        layer: u64,
        permute: Option<u32>,
    ) -> Option<u32> {
        let moe = self.mlp_part(b, layer)?;
        self.moe_dispatch_issue(b, self.moe_sizes(&moe).moved, true, permute)
    }

    /// The forward's experts on what `dispatched` brought; a dense MLP whole.
    pub fn combined_forward_mlp(&self, b: &mut Builder, layer: u64, dispatched: Option<u32>) {
        if self.model.is_mtp_layer(layer) {
            return;
        }
        let Some(moe) = self.mlp_part(b, layer) else {
            self.mlp_forward(b, layer);
            return;
        };
        self.moe_dispatch_finish(b, self.moe_sizes(&moe).moved, dispatched, dispatched);
        self.experts_forward(b, &moe);
    }

    /// The forward combine; returns what the unpermutation waits for.
    pub fn combined_forward_combine(&self, b: &mut Builder, layer: u64) -> Option<u32> {
        let moe = self.mlp_part(b, layer)?;
        self.moe_combine_issue(b, self.moe_sizes(&moe).moved, None)
    }

    /// After the forward combine (`combined`): the unpermutation and the residual.
    pub fn combined_forward_post(&self, b: &mut Builder, layer: u64, combined: Option<u32>) {
        let Some(moe) = self.mlp_part(b, layer) else {
            return;
        };
        self.permutation(b, &moe, KernelName::Unpermute, Pass::Forward, combined);
        b.compute(self.residual(KernelName::MlpResidual).forward(&self.dims));
    }

    /// Backward, up to the combine's backward all-to-all (the residual and the
    /// unpermutation); returns that all-to-all.
    pub fn combined_backward_combine(&self, b: &mut Builder, layer: u64) -> Option<u32> {
        let moe = self.mlp_part(b, layer)?;
        b.compute(self.residual(KernelName::MlpResidual).backward(&self.dims));
        self.permutation(b, &moe, KernelName::Unpermute, Pass::Backward, None);
        self.moe_dispatch_issue(b, self.moe_sizes(&moe).moved, false, None)
    }

    /// The experts' backward on what `arrived` brought (a dense MLP's backward whole);
    /// returns the data gradient the dispatch's backward sends. With `delay_wgrad_compute`
    /// the weight gradients wait for [`Self::combined_backward_dispatch`].
    pub fn combined_backward_mlp(
        &self,
        b: &mut Builder,
        layer: u64,
        arrived: Option<u32>,
    ) -> Option<u32> {
        if self.model.is_mtp_layer(layer) {
            return None;
        }
        let Some(moe) = self.mlp_part(b, layer) else {
            self.mlp_backward(b, layer);
            return None;
        };
        let d = self.dims;
        self.moe_dispatch_finish(b, self.moe_sizes(&moe).moved, arrived, arrived);
        if self.recomputes(RecomputeModule::Layernorm) {
            recomputing(b, |b| {
                b.compute(self.norm(KernelName::PreMlpNorm).forward(&d));
            });
        }
        let act = self.recomputes(RecomputeModule::MoeAct);
        self.experts_backward(b, &moe, act, !d.delay_wgrad_compute);
        b.last_compute()
    }

    /// The delayed weight gradients, then the dispatch's backward all-to-all of `dgrad`;
    /// returns what the permutation's backward waits for.
    pub fn combined_backward_dispatch(
        &self,
        b: &mut Builder,
        layer: u64,
        dgrad: Option<u32>,
    ) -> Option<u32> {
        let moe = self.mlp_part(b, layer)?;
        if self.dims.delay_wgrad_compute {
            self.experts_wgrads(b, &moe);
        }
        self.moe_combine_issue(b, self.moe_sizes(&moe).moved, dgrad)
    }

    /// The rest of the backward once `dispatched` is back: the permutation, the router, the
    /// shared experts, the pre-MLP norm and the attention (a dense layer's attention; a
    /// multi-token prediction module's backward whole).
    pub fn combined_backward_pre(&self, b: &mut Builder, layer: u64, dispatched: Option<u32>) {
        b.label.layer = layer as u32;
        if self.model.is_mtp_layer(layer) {
            self.mtp_backward(b, layer);
            return;
        }
        if let Some(moe) = self.mlp_part(b, layer) {
            self.route_backward(b, &moe, dispatched);
            if moe.shared_experts > 0 {
                let again = self.recomputes(RecomputeModule::SharedExperts);
                let norm = self.recomputes(RecomputeModule::Layernorm);
                self.shared_experts_backward(b, &moe, again, norm);
            }
            b.compute(self.norm(KernelName::PreMlpNorm).backward(&self.dims));
        }
        self.attention_backward(b, layer);
    }

    // ----- whole layers -----

    /// Layer `layer`'s forward: a transformer layer, or a multi-token prediction module.
    pub fn layer_forward(&self, b: &mut Builder, layer: u64) {
        if self.model.is_mtp_layer(layer) {
            self.mtp_forward(b, layer);
        } else {
            self.transformer_forward(b, layer);
        }
    }

    pub fn layer_backward(&self, b: &mut Builder, layer: u64) {
        if self.model.is_mtp_layer(layer) {
            self.mtp_backward(b, layer);
        } else {
            self.transformer_backward(b, layer);
        }
    }

    fn transformer_forward(&self, b: &mut Builder, layer: u64) {
        b.label.layer = layer as u32;
        self.attention_forward(b, layer);
        self.mlp_forward(b, layer);
    }

    fn transformer_backward(&self, b: &mut Builder, layer: u64) {
        b.label.layer = layer as u32;
        if self.dims.recompute == Recompute::Full {
            recomputing(b, |b| self.transformer_forward(b, layer));
        }
        self.mlp_backward(b, layer);
        self.attention_backward(b, layer);
    }

    // ----- multi-token prediction -----

    /// `eh_proj`: the concatenated normed embedding and hidden state (2h) projected to h,
    /// column-parallel without gathering its output.
    fn mtp_projection(&self) -> Linear {
        Linear {
            name: KernelName::MtpProj,
            tokens: self.dims.tokens(),
            k_in: 2 * self.model.hidden,
            n_out: self.model.hidden / self.dims.tp,
            batch: 1,
        }
    }

    /// A multi-token prediction module's forward as Megatron-Core's
    /// `MultiTokenPredictionLayer` runs it (DeepSeek-V3 §2.2): the embedding of the tokens
    /// shifted by one more position (the shared embedding), RMSNorm of it (`enorm`) and of the
    /// previous depth's hidden state (`hnorm`), their concatenation through `eh_proj`, whose
    /// TP-split output is all-gathered along the hidden dimension
    /// (`all_gather_last_dim_from_tensor_parallel_region`), a transformer layer of the model's
    /// kind, then its final norm, the shared output head and a cross-entropy loss.
    fn mtp_forward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        self.embedding_forward(b);
        b.label.module = Module::Mtp;
        b.label.layer = layer as u32;
        b.compute(self.norm(KernelName::MtpNorm).forward(&d));
        b.compute(self.norm(KernelName::MtpNorm).forward(&d));
        self.column_forward(b, &self.mtp_projection());
        if d.tp > 1 {
            b.blocking(CollectiveOp::AllGather, GroupKind::Tp, self.hidden_bytes());
        }
        self.transformer_forward(b, layer);
        self.logits_forward(b);
    }

    /// The backward of [`Self::mtp_forward`]: the gather's backward is a reduce-scatter along
    /// the hidden dimension.
    fn mtp_backward(&self, b: &mut Builder, layer: u64) {
        let d = self.dims;
        self.logits_backward(b);
        self.transformer_backward(b, layer);
        b.label.module = Module::Mtp;
        b.label.layer = layer as u32;
        if d.tp > 1 {
            b.blocking(
                CollectiveOp::ReduceScatter,
                GroupKind::Tp,
                self.hidden_bytes(),
            );
        }
        let projection = self.mtp_projection();
        self.column_backward(b, &projection, 2 * self.hidden_bytes());
        b.compute(self.norm(KernelName::MtpNorm).backward(&d));
        b.compute(self.norm(KernelName::MtpNorm).backward(&d));
        self.embedding_backward(b);
    }

    // ----- embedding and logits -----

    pub fn embedding_forward(&self, b: &mut Builder) {
        let d = self.dims;
        b.label.module = Module::Embedding;
        b.label.layer = NO_LAYER;
        let t = d.tokens();
        let h = self.model.hidden;
        let lookup = Pointwise {
            name: KernelName::Embedding,
            elements: t * h,
            read: t * h,
            write: t * h,
        };
        b.compute(lookup.forward(&d));
        if d.tp > 1 {
            let op = if d.sp() {
                CollectiveOp::ReduceScatter
            } else {
                CollectiveOp::AllReduce
            };
            b.blocking(op, GroupKind::Tp, self.hidden_bytes());
        }
    }

    pub fn embedding_backward(&self, b: &mut Builder) {
        let d = self.dims;
        b.label.module = Module::Embedding;
        b.label.layer = NO_LAYER;
        if d.sp() {
            b.blocking(CollectiveOp::AllGather, GroupKind::Tp, self.hidden_bytes());
        }
        let t = d.tokens();
        let h = self.model.hidden;
        let shard = self.model.vocab / d.tp * h;
        // PyTorch's `embedding_dense_backward` zero-fills a dense gradient of this rank's
        // vocabulary shard and scatter-adds the token gradients into it; Megatron's gradient
        // hook then adds it to the fp32 main gradient (read 4 + the dense gradient, write 4):
        // the embedding is the one weight without `gradient_accumulation_fusion`.
        let grad = elementwise(
            KernelName::Embedding,
            Pass::Wgrad,
            t * h,
            3 * t * h * d.act_bytes() + shard * (2 * d.act_bytes() + 8),
            &d,
        );
        b.compute(grad);
    }

    fn logits_linear(&self) -> Linear {
        Linear {
            name: KernelName::Logits,
            tokens: self.dims.tokens(),
            k_in: self.model.hidden,
            n_out: self.model.vocab / self.dims.tp,
            batch: 1,
        }
    }

    /// Logits this rank holds: its tokens times its share of the vocabulary.
    fn logits_per_rank(&self) -> u64 {
        self.dims.tokens() * self.model.vocab / self.dims.tp
    }

    /// Vocab-parallel cross entropy's forward passes, in bytes per logit, by
    /// `training.cross_entropy_fusion`:
    /// - `none`, Megatron's PyTorch ops (`tensor_parallel/cross_entropy.py`, fp32 unless
    ///   `--fp16-lm-cross-entropy`): cast to fp32 and take the max (read 2, write 4, read 4);
    ///   subtract the max, exponentiate in place and sum (8 + 8 + 4); divide by the sum in
    ///   place, keeping the softmax for backward (8);
    /// - `native`, the same three steps as `jit_fuser` functions
    ///   (`fusions/fused_cross_entropy.py`): the fp32 copy written as the max is taken (2 + 4),
    ///   exponentiated in place with its sum (8), divided in place (8);
    /// - `te`, Transformer Engine's Triton kernels (`pytorch/triton/cross_entropy.py`): an
    ///   online softmax reads the logits once (2), and a second kernel reads them again and
    ///   writes their gradient in place (4).
    fn cross_entropy_forward(&self) -> CrossEntropyPasses {
        let d = self.dims;
        let n = self.logits_per_rank();
        let pass =
            |bytes: u64| elementwise(KernelName::CrossEntropy, Pass::Forward, n, n * bytes, &d);
        match d.cross_entropy_fusion {
            CrossEntropyFusion::None => {
                CrossEntropyPasses::Megatron([pass(d.act_bytes() + 8), pass(20), pass(8)])
            }
            CrossEntropyFusion::Native => {
                CrossEntropyPasses::Megatron([pass(d.act_bytes() + 4), pass(8), pass(8)])
            }
            CrossEntropyFusion::Te => CrossEntropyPasses::TransformerEngine([
                pass(d.act_bytes()),
                pass(2 * d.act_bytes()),
            ]),
        }
    }

    /// Backward: unfused, the saved softmax minus the one-hot target, times the loss
    /// gradient, in place (8 bytes per logit), then cast back to the logits' dtype (4 + 2);
    /// `native` fuses the two (4 + 2); `te` scales the gradient its forward wrote by the
    /// per-token loss gradient (`element_mul_kernel`, read and write in the logits' dtype).
    fn cross_entropy_backward(&self) -> Kernel {
        let d = self.dims;
        let n = self.logits_per_rank();
        let bytes = match d.cross_entropy_fusion {
            CrossEntropyFusion::None => 12 + d.act_bytes(),
            CrossEntropyFusion::Native => 4 + d.act_bytes(),
            CrossEntropyFusion::Te => 2 * d.act_bytes(),
        };
        elementwise(KernelName::CrossEntropy, Pass::Backward, n, n * bytes, &d)
    }

    pub fn logits_forward(&self, b: &mut Builder) {
        let d = self.dims;
        b.label.module = Module::Logits;
        b.label.layer = NO_LAYER;
        b.compute(self.norm(KernelName::FinalNorm).forward(&d));
        self.column_forward(b, &self.logits_linear());
        // Megatron's: all-reduces of one fp32 per token, the max after the first pass, then
        // the predicted logit and the sum of exponentials. Transformer Engine's: one
        // all-gather of each rank's max, sum and target logit (3 fp32 per token, gathered from
        // every rank) between its two kernels.
        let all_reduces = |b: &mut Builder, count: usize| {
            if d.tp > 1 {
                for _ in 0..count {
                    b.blocking(CollectiveOp::AllReduce, GroupKind::Tp, d.tokens() * 4);
                }
            }
        };
        match self.cross_entropy_forward() {
            CrossEntropyPasses::Megatron([max, exp_sum, normalize]) => {
                b.compute(max);
                all_reduces(b, 1);
                b.compute(exp_sum);
                all_reduces(b, 2);
                b.compute(normalize);
            }
            CrossEntropyPasses::TransformerEngine([online_softmax, loss_and_gradient]) => {
                b.compute(online_softmax);
                if d.tp > 1 {
                    b.blocking(
                        CollectiveOp::AllGather,
                        GroupKind::Tp,
                        d.tp * d.tokens() * 12,
                    );
                }
                b.compute(loss_and_gradient);
            }
        }
    }

    pub fn logits_backward(&self, b: &mut Builder) {
        let d = self.dims;
        b.label.module = Module::Logits;
        b.label.layer = NO_LAYER;
        b.compute(self.cross_entropy_backward());
        self.column_backward(b, &self.logits_linear(), self.hidden_bytes());
        b.compute(self.norm(KernelName::FinalNorm).backward(&d));
    }
}
