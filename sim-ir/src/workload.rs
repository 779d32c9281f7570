//! The workload IR: what every GPU runs in one training iteration, compiled (by
//! `sim::workload::compile`) from model + parallel layout + schedule the way Megatron-LM
//! runs them (DESIGN.md, "Workload IR").
//!
//! One [`Program`] per pipeline stage and replica class (DP replicas that run the same number
//! of micro-batches). A rank is its coordinates plus cursors into its stage's program; the
//! groups it talks to are computed from the coordinates ([`crate::layout`]), so 131,072 ranks
//! cost no more memory than the handful of distinct programs.
//!
//! ## Execution semantics (what the engine must honour)
//! - Every op runs on one [`Stream`]. A stream is a FIFO, like a CUDA stream or a NCCL
//!   communicator's stream: an op starts only after the previous op *on its stream* finished.
//! - An op also waits for its explicit `deps` (earlier ops of the same program, any stream):
//!   CUDA-event waits between streams.
//! - Because streams are FIFO and complete in order, a rank's whole progress is one counter of
//!   completed ops per stream: "op j is done" ⇔ `done[stream(j)] > position of j in its stream`.
//! - A collective completes when every member of the rank's group (of its [`GroupKind`]) has
//!   reached it; the k-th collective of a group kind matches the k-th of that kind on every
//!   member (one NCCL communicator per group: the `pp` stream carries both the embedding and
//!   the model-parallel group, which middle stages do not share). A send matches the receiving peer's next receive on the mirror stream
//!   (`SendNext` ↔ `RecvPrev`); the transfer starts when both are posted (NCCL rendezvous).
//! - Compute ops carry FLOPs, bytes and shapes; turning them into time is the compute model's
//!   job. FLOPs follow Megatron-LM's accounting (full attention matrix, backward = 2 × forward)
//!   so that `tflops_per_gpu` and MFU match what Megatron reports; shapes say what is really
//!   executed (causal masking, flash attention's recomputation in backward).

use crate::layout::{GroupKind, ParallelLayout};
use crate::precision::Precision;
use crate::time::SimTime;

/// Streams of a rank. FIFO each; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// Kernels, in program order.
    Compute,
    /// Tensor-parallel collectives (also sequence-parallel all-gather / reduce-scatter).
    Tp,
    /// Context-parallel collectives (all-gather flavour of CP).
    Cp,
    /// Expert-parallel all-to-all.
    Ep,
    /// Data-parallel gradient reduction and parameter gathers (dense and expert).
    Dp,
    /// Small collectives across pipeline stages: tied-embedding gradients, gradient norm.
    Pp,
    /// Point-to-point lanes to the next / previous pipeline stage.
    SendNext,
    SendPrev,
    RecvPrev,
    RecvNext,
    /// Ring-attention lanes inside the CP group.
    CpSendNext,
    CpRecvPrev,
    /// Reads from CXL memory (a copy engine's queue): HCSim's remote operands.
    Memory,
    /// FP8 amax reductions. Megatron-Core gives them their own process group
    /// (`parallel_state.get_amax_reduction_group`), so their NCCL stream never queues them
    /// behind the data-parallel group's gradient buckets.
    Amax,
}

impl Stream {
    /// The stream a collective over a group of `kind` runs on.
    pub fn of_group(kind: GroupKind) -> Stream {
        match kind {
            GroupKind::Tp | GroupKind::ExpertTp => Stream::Tp,
            GroupKind::Cp => Stream::Cp,
            GroupKind::Ep => Stream::Ep,
            GroupKind::Dp | GroupKind::DpCp | GroupKind::ExpertDp => Stream::Dp,
            GroupKind::Pp | GroupKind::ModelParallel | GroupKind::Embedding => Stream::Pp,
        }
    }

    pub const ALL: [Stream; 14] = [
        Stream::Compute,
        Stream::Tp,
        Stream::Cp,
        Stream::Ep,
        Stream::Dp,
        Stream::Pp,
        Stream::SendNext,
        Stream::SendPrev,
        Stream::RecvPrev,
        Stream::RecvNext,
        Stream::CpSendNext,
        Stream::CpRecvPrev,
        Stream::Memory,
        Stream::Amax,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::Tp => "tp",
            Stream::Cp => "cp",
            Stream::Ep => "ep",
            Stream::Dp => "dp",
            Stream::Pp => "pp",
            Stream::SendNext => "send-next",
            Stream::SendPrev => "send-prev",
            Stream::RecvPrev => "recv-prev",
            Stream::RecvNext => "recv-next",
            Stream::CpSendNext => "cp-send-next",
            Stream::CpRecvPrev => "cp-recv-prev",
            Stream::Memory => "memory",
            Stream::Amax => "amax",
        }
    }
}

/// NCCL collective operations.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
}

impl CollectiveOp {
    pub const ALL: [CollectiveOp; 5] = [
        CollectiveOp::AllReduce,
        CollectiveOp::AllGather,
        CollectiveOp::ReduceScatter,
        CollectiveOp::AllToAll,
        CollectiveOp::Broadcast,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all-reduce",
            CollectiveOp::AllGather => "all-gather",
            CollectiveOp::ReduceScatter => "reduce-scatter",
            CollectiveOp::AllToAll => "all-to-all",
            CollectiveOp::Broadcast => "broadcast",
        }
    }

    /// Bytes one rank sends with the bandwidth-optimal (ring / pairwise) algorithm, for a
    /// collective of `size` bytes (nccl-tests' "size": the all-reduce buffer, the gathered
    /// output, the scattered input, the all-to-all send buffer) over `n` ranks.
    /// NCCL `doc/PERFORMANCE.md`: all-reduce 2(n−1)/n, all-gather and reduce-scatter (n−1)/n.
    pub fn wire_bytes_per_rank(self, size: u64, n: u32) -> f64 {
        if n <= 1 {
            return 0.0;
        }
        let n = f64::from(n);
        let size = size as f64;
        match self {
            CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n * size,
            CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
                (n - 1.0) / n * size
            }
            CollectiveOp::Broadcast => size,
        }
    }
}

/// Point-to-point peers, relative to the rank's own coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// Next pipeline stage; the last stage's next is the first (interleaved schedules wrap).
    PpNext,
    PpPrev,
    /// Next / previous rank in the CP ring.
    CpNext,
    CpPrev,
}

/// What an op does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A kernel of [`Program::kernels`].
    Compute {
        kernel: u32,
    },
    /// A collective on the rank's group of `group`; `bytes` in nccl-tests' convention.
    Collective {
        op: CollectiveOp,
        group: GroupKind,
        bytes: u64,
    },
    Send {
        peer: Peer,
        bytes: u64,
    },
    Recv {
        peer: Peer,
        bytes: u64,
    },
    /// Moves `bytes` between the rank's CXL memory node and the GPU (HCSim's remote
    /// operands: reads, and write-backs counted on the same path).
    MemoryRead {
        bytes: u64,
    },
}

/// Where in the iteration an op belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Forward,
    Backward,
    /// Forward work redone in backward (activation recomputation).
    Recompute,
    /// Gradient reduction, optimizer step, parameter gather.
    Optimizer,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Recompute => "recompute",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// The part of the model an op belongs to; SimAI's submodules (Embedding, Attention, MLP,
/// Layernorm, Logits, Grad gather, Grad param).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Module {
    Embedding,
    Attention,
    Mlp,
    Moe,
    Logits,
    /// A multi-token prediction module's own work (its norms and projection); its
    /// transformer layer, embedding and output head carry their usual modules.
    Mtp,
    /// Pipeline send / receive.
    Pipeline,
    /// Data-parallel gradient reduction and parameter gathers.
    GradSync,
    Optimizer,
    /// An imported op without a finer label.
    Imported,
}

impl Module {
    pub fn name(self) -> &'static str {
        match self {
            Module::Embedding => "embedding",
            Module::Attention => "attention",
            Module::Mlp => "mlp",
            Module::Moe => "moe",
            Module::Logits => "logits",
            Module::Mtp => "mtp",
            Module::Pipeline => "pipeline",
            Module::GradSync => "grad-sync",
            Module::Optimizer => "optimizer",
            Module::Imported => "imported",
        }
    }
}

/// Sentinel for "no layer" in [`Label::layer`].
pub const NO_LAYER: u32 = u32::MAX;

/// Where an op comes from: enough to attribute time and to export it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label {
    pub phase: Phase,
    pub module: Module,
    pub micro_batch: u32,
    /// Model chunk (virtual pipeline stage index on this rank).
    pub chunk: u16,
    /// Global transformer layer index, or [`NO_LAYER`].
    pub layer: u32,
}

impl Label {
    /// The label of an op with no model behind it (a benchmark's, an imported file's):
    /// forward, micro-batch 0, no layer.
    pub fn imported() -> Label {
        Label {
            phase: Phase::Forward,
            module: Module::Imported,
            micro_batch: 0,
            chunk: 0,
            layer: NO_LAYER,
        }
    }
}

/// One op of a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub stream: Stream,
    pub label: Label,
    deps_start: u32,
    deps_len: u16,
}

/// What a kernel computes, with the shape the compute model needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// `batch` GEMMs of (m × k) · (k × n), on the GPU's SMs less `comm_sms` held back for
    /// communication overlapped with it (`sim::workload::userbuffers`; 0: all of them), after
    /// `scale_swizzles` small kernels that bring block-scaled operands' scales into the
    /// layout the tensor cores read (Transformer Engine's `swizzle_scaling_factors`; 0: none).
    Gemm {
        m: u64,
        n: u64,
        k: u64,
        batch: u64,
        comm_sms: u32,
        scale_swizzles: u32,
    },
    /// Fused (flash) attention of `batch × heads` query heads of `seq_q` tokens over `seq_kv`
    /// keys, with `kv_heads` key/value heads (GQA).
    Attention {
        batch: u64,
        heads: u64,
        kv_heads: u64,
        seq_q: u64,
        seq_kv: u64,
        head_dim: u64,
        causal: bool,
        flash: bool,
        /// Dropout on the attention probabilities (`model.attention_dropout` > 0): a fused
        /// kernel draws a random number per score, forward and again backward.
        dropout: bool,
    },
    /// Memory-bound elementwise / reduction work over `elements` values, in `kernels`
    /// launches one after another (1: one fused kernel; more: a chain of small PyTorch ops
    /// such as an unfused MoE router, each issued from Python and launched on its own).
    Elementwise { elements: u64, kernels: u32 },
    /// A fixed duration from an imported workload (SimAI compute times).
    Fixed { ns: u64 },
}

/// Kernel names, after Megatron-Core's modules and SimAI's kernel split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KernelName {
    Embedding,
    InputNorm,
    QkvProj,
    /// Multi-head latent attention's query down-projection (to `q_lora_rank`).
    MlaQDown,
    /// MLA's key-value down-projection (to `kv_lora_rank` plus the shared RoPE key).
    MlaKvDown,
    /// MLA's query up-projection (or its only query projection without a query LoRA rank).
    MlaQUp,
    /// MLA's key-value up-projection (per-head keys and values from the latent).
    MlaKvUp,
    Rope,
    /// `qk_layernorm`'s norm of the queries or keys (MLA: of a latent).
    QkNorm,
    CoreAttention,
    OutProj,
    AttnResidual,
    PreMlpNorm,
    /// fc1: up (and gate, fused, for SwiGLU) projection.
    MlpUp,
    MlpActivation,
    /// fc2.
    MlpDown,
    MlpResidual,
    Router,
    /// The router's small ops after its gating GEMM: scores, top-k, routing map, aux loss.
    RouterTopk,
    Permute,
    Unpermute,
    /// Transformer Engine's `Fp8Padding` / `Fp8Unpadding`: an FP8 grouped GEMM's input copied
    /// with each expert's rows padded to the GEMM's alignment, or its output copied back.
    ExpertPadding,
    ExpertUp,
    ExpertActivation,
    ExpertDown,
    SharedUp,
    SharedActivation,
    SharedDown,
    FinalNorm,
    Logits,
    CrossEntropy,
    GradNorm,
    OptimizerStep,
    /// The updated fp32 master weights copied into the model's bf16/fp16 weights.
    ParamCopy,
    /// The gradient buffer set to zero for the next iteration.
    GradZero,
    /// Transformer Engine quantizing a BF16 tensor for an FP8 GEMM (cast + transpose, and the
    /// amax pass of current scaling).
    Fp8Cast,
    /// A multi-token prediction module's norms of the embedding and of the hidden state.
    MtpNorm,
    /// A multi-token prediction module's projection of [embedding; hidden] (2h → h).
    MtpProj,
    /// An imported SimAI compute time.
    Imported,
}

impl KernelName {
    pub const ALL: [KernelName; 39] = [
        KernelName::Embedding,
        KernelName::InputNorm,
        KernelName::QkvProj,
        KernelName::MlaQDown,
        KernelName::MlaKvDown,
        KernelName::MlaQUp,
        KernelName::MlaKvUp,
        KernelName::Rope,
        KernelName::QkNorm,
        KernelName::CoreAttention,
        KernelName::OutProj,
        KernelName::AttnResidual,
        KernelName::PreMlpNorm,
        KernelName::MlpUp,
        KernelName::MlpActivation,
        KernelName::MlpDown,
        KernelName::MlpResidual,
        KernelName::Router,
        KernelName::RouterTopk,
        KernelName::Permute,
        KernelName::Unpermute,
        KernelName::ExpertPadding,
        KernelName::ExpertUp,
        KernelName::ExpertActivation,
        KernelName::ExpertDown,
        KernelName::SharedUp,
        KernelName::SharedActivation,
        KernelName::SharedDown,
        KernelName::FinalNorm,
        KernelName::Logits,
        KernelName::CrossEntropy,
        KernelName::GradNorm,
        KernelName::OptimizerStep,
        KernelName::ParamCopy,
        KernelName::GradZero,
        KernelName::Fp8Cast,
        KernelName::MtpNorm,
        KernelName::MtpProj,
        KernelName::Imported,
    ];

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            KernelName::Embedding => "embedding",
            KernelName::InputNorm => "input_norm",
            KernelName::QkvProj => "qkv_proj",
            KernelName::MlaQDown => "mla_q_down_proj",
            KernelName::MlaKvDown => "mla_kv_down_proj",
            KernelName::MlaQUp => "mla_q_up_proj",
            KernelName::MlaKvUp => "mla_kv_up_proj",
            KernelName::Rope => "rope",
            KernelName::QkNorm => "qk_norm",
            KernelName::CoreAttention => "core_attention",
            KernelName::OutProj => "out_proj",
            KernelName::AttnResidual => "attn_bias_dropout_add",
            KernelName::PreMlpNorm => "pre_mlp_norm",
            KernelName::MlpUp => "mlp_up",
            KernelName::MlpActivation => "mlp_activation",
            KernelName::MlpDown => "mlp_down",
            KernelName::MlpResidual => "mlp_bias_dropout_add",
            KernelName::Router => "router",
            KernelName::RouterTopk => "router_topk",
            KernelName::Permute => "moe_permute",
            KernelName::Unpermute => "moe_unpermute",
            KernelName::ExpertPadding => "moe_fp8_padding",
            KernelName::ExpertUp => "expert_up",
            KernelName::ExpertActivation => "expert_activation",
            KernelName::ExpertDown => "expert_down",
            KernelName::SharedUp => "shared_expert_up",
            KernelName::SharedActivation => "shared_expert_activation",
            KernelName::SharedDown => "shared_expert_down",
            KernelName::FinalNorm => "final_norm",
            KernelName::Logits => "logits",
            KernelName::CrossEntropy => "cross_entropy",
            KernelName::GradNorm => "grad_norm",
            KernelName::OptimizerStep => "optimizer_step",
            KernelName::ParamCopy => "param_copy",
            KernelName::GradZero => "grad_zero",
            KernelName::Fp8Cast => "fp8_cast",
            KernelName::MtpNorm => "mtp_norm",
            KernelName::MtpProj => "mtp_eh_proj",
            KernelName::Imported => "imported",
        }
    }
}

/// Which pass of a kernel: forward, or backward split into data and weight gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pass {
    Forward,
    /// Input (data) gradient.
    Dgrad,
    /// Weight gradient.
    Wgrad,
    /// Backward of a kernel without weights.
    Backward,
}

impl Pass {
    pub const ALL: [Pass; 4] = [Pass::Forward, Pass::Dgrad, Pass::Wgrad, Pass::Backward];

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Pass::Forward => "fwd",
            Pass::Dgrad => "dgrad",
            Pass::Wgrad => "wgrad",
            Pass::Backward => "bwd",
        }
    }
}

/// One distinct kernel of a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub name: KernelName,
    pub pass: Pass,
    pub shape: Shape,
    /// FLOPs in Megatron-LM's accounting (see the module docs).
    pub flops: u64,
    /// HBM bytes read plus written.
    pub bytes: u64,
    pub dtype: Precision,
}

/// The ops one rank of a pipeline stage runs in one iteration, in issue order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub stage: u32,
    /// Micro-batches this program runs (its replica class's share of the global batch).
    pub micro_batches: u32,
    pub ops: Vec<Op>,
    deps: Vec<u32>,
    pub kernels: Vec<Kernel>,
    /// HBM bytes held all iteration: weights, gradients, optimizer state, NCCL buffers.
    pub resident_bytes: u64,
    /// Activation allocations and frees on compute ops, in op order (`sim::workload::live_memory`).
    pub memory_events: Vec<MemoryEvent>,
    /// Ops, ascending, before whose issue the host waits for the GPU: the op's dependencies
    /// produce a value the framework reads on the host (a dropless MoE layer's tokens per
    /// expert, `.cpu()` then a stream synchronize), so nothing after it is issued until they
    /// are done (`sim::compute::host`).
    pub host_syncs: Vec<u32>,
}

/// Bytes a compute op allocates when it starts and frees when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryEvent {
    pub op: u32,
    pub alloc: u64,
    pub free: u64,
}

impl Program {
    pub fn new(stage: u32, micro_batches: u32) -> Self {
        Program {
            stage,
            micro_batches,
            ..Program::default()
        }
    }

    /// Earlier ops `op` waits for, besides its stream predecessor.
    pub fn deps(&self, op: usize) -> &[u32] {
        let o = &self.ops[op];
        &self.deps[o.deps_start as usize..o.deps_start as usize + usize::from(o.deps_len)]
    }

    /// Appends an op; `deps` must name earlier ops. Returns its index.
    pub fn push(&mut self, kind: OpKind, stream: Stream, label: Label, deps: &[u32]) -> u32 {
        let index = self.ops.len() as u32;
        debug_assert!(deps.iter().all(|&d| d < index), "deps must be earlier ops");
        let deps_start = self.deps.len() as u32;
        // Deduplicate; keep order for readable dumps.
        let mut len = 0u16;
        for &d in deps {
            if !self.deps[deps_start as usize..].contains(&d) {
                self.deps.push(d);
                len += 1;
            }
        }
        self.ops.push(Op {
            kind,
            stream,
            label,
            deps_start,
            deps_len: len,
        });
        index
    }

    /// Index of `kernel` in the kernel table, adding it when new.
    pub fn intern(&mut self, kernel: Kernel) -> u32 {
        // Programs hold tens of distinct kernels: a linear scan beats hashing here.
        if let Some(i) = self.kernels.iter().position(|k| *k == kernel) {
            return i as u32;
        }
        self.kernels.push(kernel);
        (self.kernels.len() - 1) as u32
    }

    pub fn kernel_of(&self, op: &Op) -> Option<&Kernel> {
        match op.kind {
            OpKind::Compute { kernel } => Some(&self.kernels[kernel as usize]),
            _ => None,
        }
    }

    /// Bytes the program holds, for the memory budget of huge runs.
    pub fn heap_bytes(&self) -> usize {
        self.ops.capacity() * std::mem::size_of::<Op>()
            + self.deps.capacity() * 4
            + self.kernels.capacity() * std::mem::size_of::<Kernel>()
            + self.memory_events.capacity() * std::mem::size_of::<MemoryEvent>()
            + self.host_syncs.capacity() * 4
    }
}

/// A compiled workload: the programs and how ranks map onto them.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub layout: ParallelLayout,
    pub micro_batch: u64,
    /// Transformer layers per pipeline stage.
    pub stage_layers: Vec<u64>,
    /// Replica class of every DP replica (index by the rank's `dp` coordinate).
    pub replica_class: Vec<u16>,
    /// Programs, `class × pp + stage`.
    pub programs: Vec<Program>,
    /// Tokens one iteration trains on (global batch × sequence length).
    pub tokens: u64,
    /// Where the workload came from (experiment or SimAI file), for reports.
    pub source: String,
    /// Names of an imported SimAI file's layer lines; ops of [`Module::Imported`] carry their
    /// line's index in [`Label::layer`]. Empty for compiled workloads.
    pub line_names: Vec<String>,
    /// Several jobs on one cluster (`[[jobs]]`): which GPU runs which job's rank. `None`
    /// for one job, whose ranks are GPUs `0..layout.world()`. With jobs, a rank is still a
    /// GPU's global index; read ranks, groups and programs through the methods below, not
    /// through `layout` (which is then the first job's).
    pub jobs: Option<Box<JobSet>>,
    /// Only data-parallel replica 0 runs; the others mirror it
    /// (`sim_engine::symmetry::Symmetry`). Set by the engine, never by a compiler.
    pub one_replica: bool,
}

impl Workload {
    /// Whether GPU `gpu` runs a rank.
    pub fn is_rank(&self, gpu: u32) -> bool {
        match &self.jobs {
            None if self.one_replica => {
                gpu < self.layout.world() && self.layout.coords(gpu).dp == 0
            }
            None => gpu < self.layout.world(),
            Some(jobs) => jobs.job_of(gpu).is_some(),
        }
    }

    /// When rank `rank` starts its iteration: its job's `start_s` (zero for one job).
    pub fn start_of(&self, rank: u32) -> SimTime {
        match &self.jobs {
            None => SimTime::ZERO,
            Some(jobs) => jobs.start_of(rank),
        }
    }

    /// Every rank is below this GPU index: the length of per-rank tables.
    pub fn rank_bound(&self) -> u32 {
        match &self.jobs {
            None => self.layout.world(),
            Some(jobs) => jobs.gpu_bound(),
        }
    }

    /// Rank `rank`'s group of `kind`, ascending in its job's group order.
    pub fn group(&self, kind: GroupKind, rank: u32) -> Vec<u32> {
        match &self.jobs {
            None => self.layout.group(kind, rank),
            Some(jobs) => jobs.group(kind, rank),
        }
    }

    /// The size of rank `rank`'s group of `kind`.
    pub fn group_size(&self, kind: GroupKind, rank: u32) -> u32 {
        match &self.jobs {
            None => self.layout.group_size(kind),
            Some(jobs) => jobs.group_size(kind, rank),
        }
    }

    /// The layout of the job that runs program `index` of `programs`.
    pub fn program_layout(&self, index: usize) -> &ParallelLayout {
        match &self.jobs {
            None => &self.layout,
            Some(jobs) => &jobs.jobs[jobs.job_of_program(index)].workload.layout,
        }
    }

    /// Index into `programs` of the program rank `rank` runs.
    pub fn program_index(&self, rank: u32) -> usize {
        match &self.jobs {
            None => {
                let c = self.layout.coords(rank);
                usize::from(self.replica_class[c.dp as usize]) * self.layout.pp as usize
                    + c.pp as usize
            }
            Some(jobs) => jobs.program_index(rank),
        }
    }

    /// Replica classes of a one-job workload (with `jobs`, ask [`Workload::job_workload`]).
    pub fn classes(&self) -> usize {
        self.programs.len() / self.layout.pp as usize
    }

    pub fn program(&self, class: usize, stage: u32) -> &Program {
        &self.programs[class * self.layout.pp as usize + stage as usize]
    }

    /// The program rank `rank` runs.
    pub fn program_of_rank(&self, rank: u32) -> &Program {
        &self.programs[self.program_index(rank)]
    }

    pub fn heap_bytes(&self) -> usize {
        self.programs.iter().map(Program::heap_bytes).sum::<usize>() + self.replica_class.len() * 2
    }
}

/// The jobs of a compiled multi-job workload: which GPU runs which job's rank.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSet {
    pub jobs: Vec<PlacedJob>,
    /// Per GPU: its job, or [`NO_JOB`].
    job_of_gpu: Vec<u32>,
    /// Per GPU: its rank within its job.
    local_of_gpu: Vec<u32>,
}

/// A GPU that runs no job.
pub const NO_JOB: u32 = u32::MAX;

/// One job of a [`JobSet`], as the engine needs it: its compiled workload (without its
/// programs, which the combined workload holds from `program_offset` on), its GPUs in rank
/// order and its start. Its name, hosts and placement are the experiment's `sim::experiment::Job`'s.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedJob {
    pub workload: Workload,
    pub program_offset: u32,
    pub gpus: Vec<u32>,
    /// When the job starts its iteration.
    pub start: SimTime,
}

impl JobSet {
    /// Jobs `jobs`, GPU `g` running job `job_of_gpu[g]` ([`NO_JOB`]: none) as its rank
    /// `local_of_gpu[g]`.
    pub fn new(jobs: Vec<PlacedJob>, job_of_gpu: Vec<u32>, local_of_gpu: Vec<u32>) -> JobSet {
        JobSet {
            jobs,
            job_of_gpu,
            local_of_gpu,
        }
    }

    /// When GPU `gpu`'s job starts (zero for an idle GPU).
    pub fn start_of(&self, gpu: u32) -> SimTime {
        self.job_of(gpu)
            .map_or(SimTime::ZERO, |j| self.jobs[j].start)
    }

    /// The job GPU `gpu` runs, if any.
    /// GPU `gpu`'s rank within its job, if it runs one.
    pub fn local_rank(&self, gpu: u32) -> Option<u32> {
        self.job_of(gpu).map(|_| self.local_of_gpu[gpu as usize])
    }

    pub fn job_of(&self, gpu: u32) -> Option<usize> {
        match self.job_of_gpu.get(gpu as usize) {
            Some(&j) if j != NO_JOB => Some(j as usize),
            _ => None,
        }
    }

    /// GPUs `0..bound` hold every rank.
    pub fn gpu_bound(&self) -> u32 {
        self.job_of_gpu.len() as u32
    }

    /// GPU `gpu`'s group of `kind`, by global GPU index: its job's group.
    pub fn group(&self, kind: GroupKind, gpu: u32) -> Vec<u32> {
        let job = &self.jobs[self.job_of_gpu[gpu as usize] as usize];
        job.workload
            .layout
            .group(kind, self.local_of_gpu[gpu as usize])
            .into_iter()
            .map(|local| job.gpus[local as usize])
            .collect()
    }

    /// The job that runs program `index` of the combined programs.
    pub fn job_of_program(&self, index: usize) -> usize {
        self.jobs
            .iter()
            .rposition(|j| j.program_offset as usize <= index)
            .unwrap_or(0)
    }

    pub fn group_size(&self, kind: GroupKind, gpu: u32) -> u32 {
        let job = &self.jobs[self.job_of_gpu[gpu as usize] as usize];
        job.workload.layout.group_size(kind)
    }

    /// Index into the combined programs of the program GPU `gpu` runs.
    pub fn program_index(&self, gpu: u32) -> usize {
        let job = &self.jobs[self.job_of_gpu[gpu as usize] as usize];
        job.program_offset as usize + job.workload.program_index(self.local_of_gpu[gpu as usize])
    }
}

impl Workload {
    /// Job `j` of a multi-job workload as a one-job workload of its own (its programs
    /// copied), for what reads a whole job: op counts, FLOPs, reports.
    pub fn job_workload(&self, j: usize) -> Workload {
        let jobs = self.jobs.as_ref().expect("a multi-job workload");
        let job = &jobs.jobs[j];
        let start = job.program_offset as usize;
        let end = jobs
            .jobs
            .get(j + 1)
            .map_or(self.programs.len(), |next| next.program_offset as usize);
        let mut w = job.workload.clone();
        w.programs = self.programs[start..end].to_vec();
        w
    }
}
