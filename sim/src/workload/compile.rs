//! Compiles an experiment into per-stage programs: Megatron-LM's schedule around the layer
//! kernels of [`super::layer`], pipeline sends and receives, data-parallel gradient buckets
//! and the optimizer step.
//!
//! Sources (Megatron-LM):
//! - Pipeline communication: `megatron/core/pipeline_parallel/schedules.py` and
//!   `p2p_communication.py`. 1F1B's `send_forward_recv_backward` & co. are blocking batched
//!   isend/irecv: the next kernel waits for every transfer issued since the previous kernel.
//!   The interleaved schedule overlaps them (`overlap_p2p_comm`, on by default): receives are
//!   posted ahead and waited on right before use, sends are not waited on. Each receive is
//!   posted right after the kernels of the last step of its direction, and PyTorch starts it
//!   only once they are done (`ProcessGroupNCCL::pointToPoint`'s `syncStreams`).
//!   Activations travel as `(s/cp/tp if SP else s/cp) × b × h` tensors (`get_tensor_shapes`).
//! - Gradient buckets: `megatron/core/distributed/param_and_grad_buffer.py`; parameters in
//!   reverse order fill buckets of `bucket_size` (`training.py`: max(40M, 1M × DP)). With
//!   `overlap_grad_reduce` each bucket is all-reduced (reduce-scattered with the distributed
//!   optimizer) as soon as its last gradient is computed in the last micro-batch; otherwise
//!   all at the end (`finalize_model_grads`). Gradients are fp32 (`accumulate_allreduce_grads_
//!   in_fp32`), reduced over DP × CP, expert gradients over expert-DP.
//! - `finalize_model_grads.py`: after the DP sync, SP LayerNorm gradients are all-reduced over
//!   TP and tied word-embedding gradients over the first and last stage.
//! - Distributed optimizer (`distrib_optimizer.py`): shard step, then parameter all-gather per
//!   bucket, overlapped with the next forward under `overlap_param_gather`.
//! - ZeRO-2 (Rajbhandari et al. SC'20 §5) reduce-scatters each micro-batch's gradients;
//!   ZeRO-3 / FSDP also gathers each layer's parameters before its forward and backward,
//!   prefetching one layer ahead.

use crate::compute::attention_backend::{self, AttentionKernels};
use crate::config::{ConfigError, Precision, TeRelease, TensorClass};
use crate::experiment::Experiment;
use crate::layout::{GroupKind, ParallelLayout};
use crate::memory::{MemoryInputs, ParamBytes, layer_params_per_rank, output_params_per_rank};
use crate::model::ModelSpec;
use crate::workload::userbuffers::UserbufferSms;

use super::layer::{Builder, Dims, LayerEmitter};
use super::live_memory;
use super::schedule::{Step, Unit, combined_units, stage_steps};
use super::{
    CollectiveOp, Kernel, KernelName, Module, NO_LAYER, Pass, Peer, Phase, Program, Shape, Stream,
    Workload,
};

/// Knobs of the compiler beyond the model and layout.
#[derive(Debug, Clone)]
pub struct CompileOptions {
    pub micro_batch: u64,
    /// Micro-batches of every DP replica (index = DP coordinate).
    pub replica_micro_batches: Vec<u64>,
    /// Layers of every pipeline stage (all chunks together).
    pub stage_layers: Vec<u64>,
    /// Layer ids of every model chunk of every stage, `[stage][chunk]`.
    pub chunk_layers: crate::memory::ChunkLayers,
    pub dims: Dims,
    pub zero: u32,
    pub overlap_grad_reduce: bool,
    pub overlap_param_gather: bool,
    pub bucket_params: u64,
    pub overlap_p2p_comm: bool,
    /// The combined 1F1B schedule (`training.overlap_moe_expert_parallel_comm`).
    pub overlap_moe_expert_parallel_comm: bool,
    pub p2p_scatter_gather: bool,
    pub fp8_param_gather: bool,
    pub grad_reduce_in_bf16: bool,
    /// Tensor classes in CXL memory and how kernels reach them.
    pub remote: RemoteMemory,
}

/// CXL-resident tensors (HCSim, Li et al., "Performance Modeling and Optimization for
/// Large-Scale Heterogeneous Consistency Integrated Computing System", workload graph, its
/// Figure 3 b/c): in a *coherent* system a layer's kernels read their remote operands while
/// they run, so the layer ends when both its compute and the transfer have (max of the two);
/// in a *non-coherent* one the operands are first copied into HBM, then computed on (sum).
/// Per layer and micro-batch a transfer moves the layer's weights (forward, backward and
/// recomputation), its gradients (read and written back in backward) and its stashed
/// activations (written in forward, read in backward); the optimizer step moves the state,
/// gradients and weights it reads and writes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteMemory {
    pub coherent: bool,
    pub classes: Vec<TensorClass>,
}

impl RemoteMemory {
    pub fn has(&self, class: TensorClass) -> bool {
        self.classes.contains(&class)
    }
}

impl CompileOptions {
    /// The options of the experiment's own model; an error when it has none (an imported
    /// `workload_file` without `[model]`).
    pub fn from_experiment(exp: &Experiment) -> Result<Self, ConfigError> {
        let model = exp.model("compiling the workload")?;
        let cfg = &exp.loaded.config;
        let t = &cfg.training;
        let p = &cfg.parallel;
        let layout = exp.layout;
        // Where Transformer Engine has no fused kernel that trains these heads on a GPU in
        // use, it runs the unfused path (compute::attention_backend).
        // The whole run compiles unfused attention then (its workload is one for every type).
        let unfused = attention_backend::per_gpu_type(t, Some(model), &exp.gpu_types)
            .iter()
            .any(|(_, k)| *k == Some(AttentionKernels::Unfused));
        let bucket_params = t
            .bucket_params
            .unwrap_or_else(|| 40_000_000u64.max(1_000_000 * u64::from(layout.dp)));
        Ok(CompileOptions {
            micro_batch: exp.micro_batch,
            replica_micro_batches: exp.replica_micro_batches.clone(),
            stage_layers: exp.stage_layers.clone(),
            chunk_layers: exp.chunk_layers.clone(),
            dims: Dims {
                tp: u64::from(layout.tp),
                cp: u64::from(layout.cp),
                ep: u64::from(layout.ep),
                etp: u64::from(layout.etp),
                expert_tp_group: if layout.expert_tp_is_tp() {
                    GroupKind::Tp
                } else {
                    GroupKind::ExpertTp
                },
                batch: exp.micro_batch,
                seq: model.seq_len,
                sequence_parallel: p.sequence_parallel,
                precision: t.precision,
                recompute: t.recompute,
                recompute_modules: t.recomputed_modules(),
                flash: t.flash_attention && !unfused,
                tp_comm_overlap: t.tp_comm_overlap,
                userbuffer_sms: UserbufferSms::resolve(
                    &t.tp_comm_overlap_sms,
                    t.transformer_engine.unwrap_or(TeRelease::NEWEST),
                ),
                moe_shared_expert_overlap: t.moe_shared_expert_overlap,
                delay_wgrad_compute: t.delay_wgrad_compute,
                moe_router_fusion: t.moe_router_fusion,
                moe_permute_fusion: t.moe_permute_fusion,
                moe_router_padding_for_quantization: t.moe_router_padding_for_quantization,
                cross_entropy_fusion: t.cross_entropy_fusion,
                moe_alltoall_dispatcher: t.moe_token_dispatcher
                    == crate::config::MoeTokenDispatcher::Alltoall,
                cp_comm: p.cp_comm,
                fp8_attention: t.fp8_attention,
                fp8_recipe: t.fp8_recipe(),
                transformer_engine: t.transformer_engine.unwrap_or(TeRelease::NEWEST),
            },
            zero: p.zero,
            overlap_grad_reduce: t.overlap_grad_reduce,
            overlap_param_gather: t.overlap_param_gather,
            bucket_params: bucket_params.max(1),
            overlap_p2p_comm: t.overlap_p2p_comm,
            overlap_moe_expert_parallel_comm: t.overlap_moe_expert_parallel_comm,
            p2p_scatter_gather: t.p2p_scatter_gather,
            fp8_param_gather: t.fp8_param_gather,
            grad_reduce_in_bf16: t.grad_reduce_in_bf16,
            remote: RemoteMemory {
                coherent: exp.cxl_coherent().unwrap_or(true),
                classes: exp.cxl_tensors.clone(),
            },
        })
    }

    /// What the memory model reads for a replica class of `micro_batches`.
    pub fn memory_inputs(&self, micro_batches: u64) -> MemoryInputs {
        MemoryInputs {
            precision: self.dims.precision,
            zero: self.zero,
            recompute: self.dims.recompute,
            recompute_modules: self.dims.recompute_modules,
            sequence_parallel: self.dims.sequence_parallel,
            flash_attention: self.dims.flash,
            micro_batch: self.micro_batch,
            micro_batches,
            fp8_recipe: self.dims.fp8_recipe,
            fp8_param_gather: self.fp8_param_gather,
            grad_reduce_in_bf16: self.grad_reduce_in_bf16,
        }
    }

    /// Bytes per parameter of the model state.
    pub fn param_bytes(&self) -> ParamBytes {
        self.memory_inputs(1).param_bytes()
    }
}

/// Compiles the experiment's model and parallel layout into its workload.
pub fn compile(exp: &Experiment) -> Result<Workload, ConfigError> {
    let options = CompileOptions::from_experiment(exp)?;
    let model = exp.model("compiling the workload")?;
    Ok(compile_with(model, &exp.layout, &options, exp.name()))
}

/// Compiles with explicit options (non-uniform micro-batches per replica, planner output).
pub fn compile_with(
    model: &ModelSpec,
    layout: &ParallelLayout,
    options: &CompileOptions,
    source: &str,
) -> Workload {
    // Replica classes: DP replicas with the same micro-batch count share programs.
    let mut class_counts: Vec<u64> = Vec::new();
    let replica_class: Vec<u16> = options
        .replica_micro_batches
        .iter()
        .map(|m| {
            let i = class_counts.iter().position(|c| c == m).unwrap_or_else(|| {
                class_counts.push(*m);
                class_counts.len() - 1
            });
            i as u16
        })
        .collect();
    let mut programs = Vec::with_capacity(class_counts.len() * layout.pp as usize);
    for &m in &class_counts {
        let inputs = options.memory_inputs(m);
        for stage in 0..layout.pp {
            let mut program = StageCompiler::new(model, layout, options, stage, m as u32).compile();
            live_memory::annotate(
                &mut program,
                model,
                layout,
                &options.chunk_layers,
                &inputs,
                &options.remote.classes,
            );
            programs.push(program);
        }
    }
    let samples: u64 = options
        .replica_micro_batches
        .iter()
        .map(|m| m * options.micro_batch)
        .sum();
    Workload {
        layout: *layout,
        micro_batch: options.micro_batch,
        stage_layers: options.stage_layers.clone(),
        replica_class,
        programs,
        tokens: samples * model.seq_len,
        source: source.to_string(),
        line_names: Vec::new(),
        jobs: None,
        one_replica: false,
    }
}

/// Where a program sits in the pipeline, for [`run_schedule`].
#[derive(Debug, Clone, Copy)]
pub struct PipelinePosition {
    pub pp: u32,
    pub vp: u32,
    pub stage: u32,
    pub micro_batches: u32,
    /// Bytes of one activation (or gradient) crossing a stage boundary, per rank.
    pub boundary_bytes: u64,
    /// Whether the interleaved schedule overlaps its transfers (1F1B never does).
    pub overlap_p2p: bool,
    /// Scatter-gather: bytes of the whole boundary tensor, all-gathered over TP after each
    /// receive of a 1/TP piece; `None` when ranks send whole tensors.
    pub gather_bytes: Option<u64>,
}

impl PipelinePosition {
    fn virtual_stage(&self, chunk: u32) -> u32 {
        chunk * self.pp + self.stage
    }

    fn virtual_stages(&self) -> u32 {
        self.pp * self.vp
    }
}

/// Emits a combined step: a steady-state forward and the backward merged with it.
pub type CombinedBody<'a> = dyn FnMut(&mut Builder, &Step, &Step) + 'a;

/// Runs Megatron's schedule for one stage: for each step, receives its input from the
/// neighbouring stage, lets `body` emit the step's work, and sends its output on. With
/// `combined` (the expert-parallel all-to-all overlap), each steady-state forward and the
/// backward beside it are one step: both receive, `combined` emits their merged work, both
/// send.
pub fn run_schedule(
    b: &mut Builder,
    pipeline: &PipelinePosition,
    body: &mut dyn FnMut(&mut Builder, &Step),
    mut combined: Option<&mut CombinedBody>,
) {
    let steps = stage_steps(
        pipeline.pp,
        pipeline.vp,
        pipeline.stage,
        pipeline.micro_batches,
        combined.is_some(),
    );
    let units = combined_units(&steps, combined.is_some());
    // 1F1B's transfers block; the interleaved schedule posts its receives ahead, and without
    // `overlap_p2p_comm` its kernels still wait for each send (Megatron-LM 2022's
    // `_communicate` waits on every request and synchronises the device).
    let blocking = pipeline.vp == 1;
    let wait_sends = blocking || !pipeline.overlap_p2p;
    let mut p2p_since_compute: Vec<u32> = Vec::new();
    // The last kernel of the latest forward and backward step: where Megatron posts the next
    // receive of that direction (`send_forward_recv_forward` after a forward,
    // `send_backward_recv_backward` after a backward; the first backward's after the last
    // warm-up forward).
    let mut posted_after: [Option<u32>; 2] = [None, None];
    for unit in &units {
        let passes: &[Step] = match unit {
            Unit::One(step) => std::slice::from_ref(step),
            Unit::Combined { forward, backward } => &[*forward, *backward],
        };
        let mut received_any = false;
        for step in passes {
            label_step(b, step);
            let direction = usize::from(!step.forward);
            let after = if blocking {
                b.last_compute()
            } else {
                posted_after[direction].or(b.last_compute())
            };
            if let Some(r) = receive(b, pipeline, step, after) {
                p2p_since_compute.push(r);
                received_any = true;
            }
        }
        // 1F1B's batched transfers end in `torch.cuda.synchronize()` (Megatron-Core
        // `p2p_communication.py` `_communicate` with `batch_p2p_comm` and `batch_p2p_sync`, both
        // on unless `overlap_p2p_comm`): the host issues the step's first op only once they
        // are done. Interleaved without `overlap_p2p_comm` synchronises too, but once per
        // forward-backward pair of steps (`send_forward_backward_recv_forward_backward`);
        // a sync per step there would wait on transfers its peer posts only after its own.
        let host_waits = blocking && !p2p_since_compute.is_empty();
        for op in p2p_since_compute.drain(..) {
            b.wait(op);
        }
        let first = b.program.ops.len() as u32;
        if let (true, Some(bytes)) = (received_any, pipeline.gather_bytes) {
            // `gather_split_1d_tensor` on the critical path before the step's first kernel.
            let module = b.label.module;
            b.label.module = Module::Pipeline;
            b.blocking(CollectiveOp::AllGather, GroupKind::Tp, bytes);
            b.label.module = module;
        }
        match (unit, combined.as_deref_mut()) {
            (Unit::Combined { forward, backward }, Some(merged)) => merged(b, forward, backward),
            _ => body(b, &passes[0]),
        }
        if host_waits && (b.program.ops.len() as u32) > first {
            let syncs = &mut b.program.host_syncs;
            let at = syncs.partition_point(|&s| s < first);
            syncs.insert(at, first);
        }
        for step in passes {
            label_step(b, step);
            posted_after[usize::from(!step.forward)] = b.last_compute();
            if let Some(s) = send(b, pipeline, step)
                && wait_sends
            {
                p2p_since_compute.push(s);
            }
        }
    }
    // Megatron waits for outstanding transfers before leaving the schedule.
    for op in p2p_since_compute.drain(..) {
        b.wait(op);
    }
}

/// Labels what the builder emits next as `step`'s.
fn label_step(b: &mut Builder, step: &Step) {
    b.label.micro_batch = step.micro_batch;
    b.label.chunk = step.chunk as u16;
    b.label.phase = if step.forward {
        Phase::Forward
    } else {
        Phase::Backward
    };
}

/// Makes the next kernel wait for the parameter gathers `gather_waits` holds for gradient
/// unit `unit` (none outside the first micro-batch).
fn wait_for_gathers(b: &mut Builder, gather_waits: Option<&UnitWaits>, unit: usize) {
    for &g in gather_waits
        .and_then(|w| w.get(unit))
        .map_or(&[][..], Vec::as_slice)
    {
        b.wait(g);
    }
}

/// The pipeline neighbour a step's input comes from (`input`) or its output goes to, with the
/// lane it travels on; `None` at the ends of the virtual pipeline. Forward activations flow
/// to the next stage, backward gradients to the previous one.
fn boundary(pipeline: &PipelinePosition, step: &Step, input: bool) -> Option<(Peer, Stream)> {
    let v = pipeline.virtual_stage(step.chunk);
    let to_next = step.forward != input;
    if to_next {
        let lane = if input {
            Stream::RecvNext
        } else {
            Stream::SendNext
        };
        (v + 1 < pipeline.virtual_stages()).then_some((Peer::PpNext, lane))
    } else {
        let lane = if input {
            Stream::RecvPrev
        } else {
            Stream::SendPrev
        };
        (v > 0).then_some((Peer::PpPrev, lane))
    }
}

/// Issues one pipeline transfer of `step`, labelled as pipeline work.
fn transfer(
    b: &mut Builder,
    pipeline: &PipelinePosition,
    step: &Step,
    input: bool,
    deps: &[u32],
) -> Option<u32> {
    let (peer, stream) = boundary(pipeline, step, input)?;
    let module = b.label.module;
    b.label.module = Module::Pipeline;
    let op = b.p2p(!input, peer, pipeline.boundary_bytes, stream, deps);
    b.label.module = module;
    Some(op)
}

/// Posts the receive of `step`'s input once kernel `after` is done: PyTorch starts a
/// point-to-point op only after the work issued before it on the compute stream
/// (`ProcessGroupNCCL::pointToPoint`: `syncStreams` makes the pair's NCCL stream wait for
/// the current stream), and Megatron issues each receive right after the kernels of the step
/// before it (blocking 1F1B) or of the last step of the same direction (interleaved).
fn receive(
    b: &mut Builder,
    pipeline: &PipelinePosition,
    step: &Step,
    after: Option<u32>,
) -> Option<u32> {
    let deps: Vec<u32> = after.into_iter().collect();
    transfer(b, pipeline, step, true, &deps)
}

fn send(b: &mut Builder, pipeline: &PipelinePosition, step: &Step) -> Option<u32> {
    let deps: Vec<u32> = b.last_compute().into_iter().collect();
    transfer(b, pipeline, step, false, &deps)
}

/// Parameters whose gradients become ready together, in backward order.
#[derive(Debug, Clone, Copy)]
struct GradUnit {
    dense: u64,
    expert: u64,
}

/// Gradient buckets of a chunk: (parameters, index of the bucket's last unit), dense then
/// expert.
type Buckets = [Vec<(u64, usize)>; 2];

/// Per gradient unit of a chunk, the ops its first forward kernel waits for.
type UnitWaits = Vec<Vec<u32>>;

struct StageCompiler<'a> {
    model: &'a ModelSpec,
    layout: &'a ParallelLayout,
    options: &'a CompileOptions,
    pipeline: PipelinePosition,
    /// Layers of each chunk on this stage.
    chunk_layers: Vec<Vec<u64>>,
    /// Gradient units of each chunk, in the order backward completes them.
    chunk_units: Vec<Vec<GradUnit>>,
    chunk_buckets: Vec<Buckets>,
}

impl<'a> StageCompiler<'a> {
    fn new(
        model: &'a ModelSpec,
        layout: &'a ParallelLayout,
        options: &'a CompileOptions,
        stage: u32,
        micro_batches: u32,
    ) -> Self {
        let chunk_layers = options.chunk_layers[stage as usize].clone();
        let d = &options.dims;
        let boundary = d.sp_tokens() * model.hidden * d.act_bytes();
        let scatter = if options.p2p_scatter_gather && !d.sp() && boundary.is_multiple_of(d.tp) {
            d.tp
        } else {
            1
        };
        let mut compiler = StageCompiler {
            model,
            layout,
            options,
            pipeline: PipelinePosition {
                pp: layout.pp,
                vp: layout.vp,
                stage,
                micro_batches,
                boundary_bytes: boundary / scatter,
                overlap_p2p: options.overlap_p2p_comm,
                gather_bytes: (scatter > 1).then_some(boundary),
            },
            chunk_layers,
            chunk_units: Vec::new(),
            chunk_buckets: Vec::new(),
        };
        compiler.chunk_units = (0..layout.vp).map(|c| compiler.grad_units(c)).collect();
        compiler.chunk_buckets = compiler
            .chunk_units
            .iter()
            .map(|units| {
                [
                    compiler.buckets(units, false),
                    compiler.buckets(units, true),
                ]
            })
            .collect();
        compiler
    }

    fn has_embedding(&self, chunk: u32) -> bool {
        self.pipeline.virtual_stage(chunk) == 0
    }

    fn has_logits(&self, chunk: u32) -> bool {
        self.pipeline.virtual_stage(chunk) + 1 == self.pipeline.virtual_stages()
    }

    fn emitter(&self) -> LayerEmitter<'a> {
        LayerEmitter {
            model: self.model,
            dims: self.options.dims,
        }
    }

    fn tp(&self) -> u64 {
        u64::from(self.layout.tp)
    }

    /// Gradients of layer `layer` on this rank.
    fn layer_unit(&self, layer: u64) -> GradUnit {
        let (dense, expert) = layer_params_per_rank(self.model, self.layout, layer);
        GradUnit {
            dense: dense as u64,
            expert: expert as u64,
        }
    }

    /// Gradient units of `chunk` in the order backward completes them.
    fn grad_units(&self, chunk: u32) -> Vec<GradUnit> {
        let mut units = Vec::new();
        if self.has_logits(chunk) {
            units.push(GradUnit {
                dense: output_params_per_rank(self.model, self.layout) as u64
                    + self.model.norm_params(),
                expert: 0,
            });
        }
        units.extend(
            self.chunk_layers[chunk as usize]
                .iter()
                .rev()
                .map(|&l| self.layer_unit(l)),
        );
        if self.has_embedding(chunk) {
            units.push(GradUnit {
                dense: self.model.embedding_params() / self.tp(),
                expert: 0,
            });
        }
        units
    }

    /// Splits units into buckets of at least `bucket_params` (the last may be smaller);
    /// returns for each bucket its parameter count and the index of its last unit.
    fn buckets(&self, units: &[GradUnit], expert: bool) -> Vec<(u64, usize)> {
        let mut out = Vec::new();
        let mut acc = 0;
        for (i, u) in units.iter().enumerate() {
            acc += if expert { u.expert } else { u.dense };
            if acc >= self.options.bucket_params {
                out.push((acc, i));
                acc = 0;
            }
        }
        if acc > 0 {
            out.push((acc, units.len() - 1));
        }
        out
    }

    fn compile(&self) -> Program {
        let mut program = Program::new(self.pipeline.stage, self.pipeline.micro_batches);
        let mut b = Builder::new(&mut program);
        let zero = self.options.zero;
        let distributed = zero >= 1;

        // Parameter gathers of the distributed optimizer, overlapped with this forward: the
        // first forward of each chunk waits for a bucket's gather before the first unit that
        // uses it (Megatron's forward pre-hook, `_finish_param_sync_helper`), so the forward
        // of one bucket's layers hides the next bucket's gather.
        let mut gather_waits: Vec<UnitWaits> = vec![Vec::new(); self.layout.vp as usize];
        if distributed && zero < 3 && self.options.overlap_param_gather {
            b.label.phase = Phase::Optimizer;
            b.label.module = Module::GradSync;
            for chunk in 0..self.layout.vp {
                let mut by_unit = vec![Vec::new(); self.chunk_units[chunk as usize].len()];
                for (gather, unit) in self.param_gathers(&mut b, chunk) {
                    by_unit[unit].push(gather);
                }
                gather_waits[chunk as usize] = by_unit;
            }
        }

        let last_micro_batch = self.pipeline.micro_batches - 1;
        let waits_of =
            |step: &Step| (step.micro_batch == 0).then(|| &gather_waits[step.chunk as usize]);
        let mut merged = |b: &mut Builder, f: &Step, bk: &Step| {
            self.combined(b, f, waits_of(f), bk, bk.micro_batch == last_micro_batch);
        };
        run_schedule(
            &mut b,
            &self.pipeline,
            &mut |b, step| {
                if step.forward {
                    self.forward(b, step.chunk, waits_of(step));
                } else {
                    self.backward(b, step.chunk, step.micro_batch == last_micro_batch);
                }
            },
            self.options
                .overlap_moe_expert_parallel_comm
                .then_some(&mut merged as &mut CombinedBody),
        );
        self.finalize(&mut b);
        program
    }

    /// One forward of `chunk`; `gather_waits` (the first micro-batch's) holds, per gradient
    /// unit, the parameter gathers to wait for before that unit's first kernel.
    fn forward(&self, b: &mut Builder, chunk: u32, gather_waits: Option<&UnitWaits>) {
        let e = self.emitter();
        let layers = &self.chunk_layers[chunk as usize];
        // Units run in backward order: the output layer (if here), the layers in reverse,
        // the embedding (if here).
        let first_layer_unit = usize::from(self.has_logits(chunk));
        let wait_for_unit = |b: &mut Builder, unit: usize| wait_for_gathers(b, gather_waits, unit);
        if self.has_embedding(chunk) {
            wait_for_unit(b, first_layer_unit + layers.len());
            e.embedding_forward(b);
        }
        let zero3 = self.options.zero >= 3;
        let mut gathers: Vec<u32> = Vec::new();
        for (i, &l) in layers.iter().enumerate() {
            if zero3 {
                if i == 0 {
                    gathers.push(self.layer_gather(b, l));
                }
                if let Some(&next) = layers.get(i + 1) {
                    gathers.push(self.layer_gather(b, next));
                }
                b.wait(gathers[i]);
            }
            wait_for_unit(b, first_layer_unit + layers.len() - 1 - i);
            b.label.layer = l as u32;
            let bytes = self.remote_layer_bytes(l, Phase::Forward);
            self.remote(b, bytes, &mut |b| e.layer_forward(b, l));
        }
        if self.has_logits(chunk) {
            wait_for_unit(b, 0);
            e.logits_forward(b);
        }
        self.amax_reduction(b, chunk, Phase::Forward);
    }

    /// Delayed scaling's amax reduction when a model chunk leaves `fp8_autocast`: Transformer
    /// Engine concatenates the amaxes of the chunk's FP8 modules and all-reduces their maximum
    /// (`FP8GlobalStateManager.reduce_and_update_fp8_tensors`) over the stage's data-,
    /// context- and tensor-parallel ranks, waited on before the next kernel. Each layer has
    /// four TE modules with three forward and two backward amaxes of 4 bytes. Modelled over
    /// the DP × CP group, whose inter-node latency dominates; the intra-node TP hop is left out.
    /// It runs on its own stream ([`Stream::Amax`]): a chunk's last backward does not wait
    /// for the gradient buckets reducing beside it.
    fn amax_reduction(&self, b: &mut Builder, chunk: u32, phase: Phase) {
        let d = &self.options.dims;
        if d.precision != Precision::Fp8 || d.fp8_recipe != crate::config::Fp8Recipe::Delayed {
            return;
        }
        if self.layout.group_size(GroupKind::DpCp) <= 1 {
            return;
        }
        let layers = self.chunk_layers[chunk as usize].len() as u64;
        let per_layer = if phase == Phase::Forward {
            4 * 3 * 4
        } else {
            4 * 2 * 4
        };
        let label = b.label;
        b.label.module = Module::GradSync;
        b.blocking_on(
            Stream::Amax,
            CollectiveOp::AllReduce,
            GroupKind::DpCp,
            per_layer * layers.max(1),
        );
        b.label = label;
    }

    /// Whether the gradient buckets reduce during this backward: in the last micro-batch
    /// (ZeRO-2: every micro-batch) when overlapped.
    fn reduces_now(&self, last_micro_batch: bool) -> bool {
        let zero = self.options.zero;
        self.options.overlap_grad_reduce && zero < 3 && (last_micro_batch || zero == 2)
    }

    /// Reduces the buckets of `chunk` whose last gradient unit is `unit`.
    fn reduce_ready(&self, b: &mut Builder, chunk: u32, unit: usize) {
        let [dense, expert] = &self.chunk_buckets[chunk as usize];
        for &(params, last) in dense {
            if last == unit {
                self.reduce_bucket(b, params, false);
            }
        }
        for &(params, last) in expert {
            if last == unit {
                self.reduce_bucket(b, params, true);
            }
        }
    }

    fn backward(&self, b: &mut Builder, chunk: u32, last_micro_batch: bool) {
        let e = self.emitter();
        let units = &self.chunk_units[chunk as usize];
        let zero = self.options.zero;
        let reduce_now = self.reduces_now(last_micro_batch);
        let mut unit = 0usize;
        let reduce_done = |b: &mut Builder, unit: usize| {
            if reduce_now {
                self.reduce_ready(b, chunk, unit);
            }
        };
        if self.has_logits(chunk) {
            e.logits_backward(b);
            reduce_done(b, unit);
            unit += 1;
        }
        let layers = &self.chunk_layers[chunk as usize];
        let zero3 = zero >= 3;
        let mut gathers: Vec<u32> = Vec::new();
        for (i, &l) in layers.iter().enumerate().rev() {
            if zero3 {
                let j = layers.len() - 1 - i;
                if j == 0 {
                    gathers.push(self.layer_gather(b, l));
                }
                if i > 0 {
                    gathers.push(self.layer_gather(b, layers[i - 1]));
                }
                b.wait(gathers[j]);
            }
            b.label.layer = l as u32;
            let bytes = self.remote_layer_bytes(l, Phase::Backward);
            self.remote(b, bytes, &mut |b| e.layer_backward(b, l));
            if zero3 {
                // ZeRO-3 reduce-scatters each layer's gradients every micro-batch.
                let u = units[unit];
                let label = b.label;
                b.label.module = Module::GradSync;
                self.reduce_bucket(b, u.dense, false);
                if u.expert > 0 {
                    self.reduce_bucket(b, u.expert, true);
                }
                b.label = label;
            }
            reduce_done(b, unit);
            unit += 1;
        }
        if self.has_embedding(chunk) {
            e.embedding_backward(b);
            reduce_done(b, unit);
        }
        self.amax_reduction(b, chunk, Phase::Backward);
    }

    /// A steady-state forward `f` merged with the backward `bk` of another micro-batch (the
    /// combined 1F1B step, Megatron-Core `ModelChunkSchedulePlan.run`): the forward's
    /// embedding and the backward's output layer, then the forward's layers in order paired
    /// with the backward's in reverse ([`LayerEmitter`]'s `combined_*` parts), the
    /// backward's and then the forward's unpaired layers, the forward's output layer and the
    /// backward's embedding. ZeRO-3 is refused with the overlap (`Experiment`); a layer in
    /// CXL memory waits for its transfer before its first kernel.
    fn combined(
        &self,
        b: &mut Builder,
        f: &Step,
        gather_waits: Option<&UnitWaits>,
        bk: &Step,
        last_micro_batch: bool,
    ) {
        let e = self.emitter();
        let as_forward = |b: &mut Builder| label_step(b, f);
        let as_backward = |b: &mut Builder| label_step(b, bk);
        let (fc, bc) = (f.chunk, bk.chunk);
        let f_layers = &self.chunk_layers[fc as usize];
        let b_layers = &self.chunk_layers[bc as usize];
        let reduce_now = self.reduces_now(last_micro_batch);
        let reduce_done = |b: &mut Builder, unit: usize| {
            if reduce_now {
                self.reduce_ready(b, bc, unit);
            }
        };
        let first_f_unit = usize::from(self.has_logits(fc));
        let wait_for_unit = |b: &mut Builder, unit: usize| wait_for_gathers(b, gather_waits, unit);
        let remote = |b: &mut Builder, layer: u64, phase: Phase| {
            let bytes = self.remote_layer_bytes(layer, phase);
            if bytes > 0 {
                let transfer = b.memory_transfer(bytes);
                b.wait(transfer);
            }
        };
        as_forward(b);
        if self.has_embedding(fc) {
            wait_for_unit(b, first_f_unit + f_layers.len());
            e.embedding_forward(b);
        }
        as_backward(b);
        let mut b_unit = 0usize;
        if self.has_logits(bc) {
            e.logits_backward(b);
            reduce_done(b, b_unit);
            b_unit += 1;
        }
        // The forward's combine of the previous layer, waited for by its unpermutation.
        let mut f_pending: Option<(u64, Option<u32>)> = None;
        for i in 0..f_layers.len().max(b_layers.len()) {
            let fl = f_layers.get(i).copied();
            let bl = (i < b_layers.len()).then(|| b_layers[b_layers.len() - 1 - i]);
            let mut combine_bwd = None;
            if let Some(l) = bl {
                as_backward(b);
                remote(b, l, Phase::Backward);
                combine_bwd = e.combined_backward_combine(b, l);
            }
            let mut permute = None;
            if let Some(l) = fl {
                as_forward(b);
                if let Some((prev, combined)) = f_pending.take() {
                    e.combined_forward_post(b, prev, combined);
                }
                wait_for_unit(b, first_f_unit + f_layers.len() - 1 - i);
                remote(b, l, Phase::Forward);
                permute = e.combined_forward_pre(b, l);
            }
            let mut dgrad = None;
            if let Some(l) = bl {
                as_backward(b);
                dgrad = e.combined_backward_mlp(b, l, combine_bwd);
            }
            let mut dispatched = None;
            if let Some(l) = fl {
                as_forward(b);
                dispatched = e.combined_forward_dispatch(b, l, permute);
            }
            let mut dispatch_bwd = None;
            if let Some(l) = bl {
                as_backward(b);
                dispatch_bwd = e.combined_backward_dispatch(b, l, dgrad);
            }
            if let Some(l) = fl {
                as_forward(b);
                e.combined_forward_mlp(b, l, dispatched);
                f_pending = Some((l, e.combined_forward_combine(b, l)));
            }
            if let Some(l) = bl {
                as_backward(b);
                e.combined_backward_pre(b, l, dispatch_bwd);
                reduce_done(b, b_unit);
                b_unit += 1;
            }
        }
        as_forward(b);
        if let Some((prev, combined)) = f_pending.take() {
            e.combined_forward_post(b, prev, combined);
        }
        if self.has_logits(fc) {
            wait_for_unit(b, 0);
            e.logits_forward(b);
        }
        self.amax_reduction(b, fc, Phase::Forward);
        as_backward(b);
        if self.has_embedding(bc) {
            e.embedding_backward(b);
            reduce_done(b, b_unit);
        }
        self.amax_reduction(b, bc, Phase::Backward);
    }

    fn grad_bytes(&self) -> u64 {
        self.options.param_bytes().gradients as u64
    }

    /// Bytes per parameter a parameter all-gather moves, and the optimizer writes back.
    fn weight_bytes(&self) -> u64 {
        self.options.param_bytes().gathered as u64
    }

    /// Reduces one bucket of gradients over its data-parallel group.
    fn reduce_bucket(&self, b: &mut Builder, params: u64, expert: bool) -> Option<u32> {
        let group = if expert {
            GroupKind::ExpertDp
        } else {
            GroupKind::DpCp
        };
        if self.layout.group_size(group) <= 1 {
            return None;
        }
        let op = if self.options.zero >= 1 {
            CollectiveOp::ReduceScatter
        } else {
            CollectiveOp::AllReduce
        };
        let label = b.label;
        b.label.module = Module::GradSync;
        let c = b.collective(op, group, params * self.grad_bytes());
        b.label = label;
        Some(c)
    }

    /// ZeRO-3: gathers one layer's parameters.
    fn layer_gather(&self, b: &mut Builder, layer: u64) -> u32 {
        let GradUnit { dense, expert } = self.layer_unit(layer);
        let label = b.label;
        b.label.module = Module::GradSync;
        b.label.layer = layer as u32;
        let deps: Vec<u32> = b.last_compute().into_iter().collect();
        let w = self.weight_bytes();
        let mut c = b.collective_after(CollectiveOp::AllGather, GroupKind::DpCp, dense * w, &deps);
        if expert > 0 && self.layout.group_size(GroupKind::ExpertDp) > 1 {
            c = b.collective_after(
                CollectiveOp::AllGather,
                GroupKind::ExpertDp,
                expert * w,
                &deps,
            );
        }
        b.label = label;
        c
    }

    /// Distributed optimizer: one parameter all-gather per bucket of `chunk`, each with the
    /// gradient unit the forward meets first in its bucket (the bucket's last in backward order).
    fn param_gathers(&self, b: &mut Builder, chunk: u32) -> Vec<(u32, usize)> {
        let w = self.weight_bytes();
        let mut out = Vec::new();
        for (expert, group) in [(false, GroupKind::DpCp), (true, GroupKind::ExpertDp)] {
            if self.layout.group_size(group) <= 1 {
                continue;
            }
            // Forward needs the buckets in the reverse of their backward order.
            let buckets = &self.chunk_buckets[chunk as usize][usize::from(expert)];
            for &(params, last_unit) in buckets.iter().rev() {
                let deps: Vec<u32> = b.last_compute().into_iter().collect();
                let gather = b.collective_after(CollectiveOp::AllGather, group, params * w, &deps);
                out.push((gather, last_unit));
            }
        }
        out
    }

    /// After the schedule: remaining gradient reduction, SP norm and tied-embedding
    /// gradients, gradient norm, optimizer step, parameter gather.
    fn finalize(&self, b: &mut Builder) {
        b.label.phase = Phase::Optimizer;
        b.label.module = Module::GradSync;
        b.label.micro_batch = self.pipeline.micro_batches.saturating_sub(1);
        b.label.layer = NO_LAYER;
        let zero = self.options.zero;
        let mut waits = Vec::new();
        if !self.options.overlap_grad_reduce && zero < 3 {
            for chunk in 0..self.layout.vp {
                b.label.chunk = chunk as u16;
                for (expert, buckets) in [false, true]
                    .into_iter()
                    .zip(&self.chunk_buckets[chunk as usize])
                {
                    for &(params, _) in buckets {
                        waits.extend(self.reduce_bucket(b, params, expert));
                    }
                }
            }
        }
        b.label.chunk = 0;
        // Wait for every bucket: later steps read the reduced gradients.
        let dp_ops: Vec<u32> = (0..b.program.ops.len() as u32)
            .filter(|&i| b.program.ops[i as usize].stream == Stream::Dp)
            .collect();
        if let Some(&last) = dp_ops.last() {
            waits.push(last);
        }
        for w in waits {
            b.wait(w);
        }
        let d = self.options.dims;
        let g = self.grad_bytes();
        if d.sp() {
            // `_allreduce_layernorm_grads`: norm weights are replicated across TP under SP.
            let norms: u64 = self
                .chunk_layers
                .iter()
                .map(|c| c.len() as u64)
                .sum::<u64>()
                * 2
                * self.model.norm_params();
            b.compute(self.grad_copy(norms));
            b.blocking(CollectiveOp::AllReduce, GroupKind::Tp, norms * g);
        }
        let stage = self.pipeline.stage;
        let ends = stage == 0 || stage + 1 == self.layout.pp;
        if self.model.tied_embeddings && self.layout.pp > 1 && ends {
            let params = self.model.vocab * self.model.hidden / self.tp();
            b.compute(self.grad_copy(params));
            b.blocking(CollectiveOp::AllReduce, GroupKind::Embedding, params * g);
        }
        b.label.module = Module::Optimizer;
        // Gradient clipping: local squared norm, then a scalar all-reduce over model parallel.
        let local = self.local_params(zero >= 1);
        b.compute(self.optimizer_pass(KernelName::GradNorm, local, 2 * local, local * g));
        if self.layout.group_size(GroupKind::ModelParallel) > 1 {
            b.blocking(CollectiveOp::AllReduce, GroupKind::ModelParallel, 4);
        }
        // Megatron's `MixedPrecisionOptimizer.step` (megatron/core/optimizer/optimizer.py):
        // fused Adam reads the fp32 master, m, v and the gradient and writes master, m and v;
        // `_copy_main_params_to_model_params` then reads the master again and writes the
        // model's weights.
        let r = &self.options.remote;
        let ParamBytes {
            weights: w,
            optimizer: o,
            ..
        } = self.options.param_bytes();
        let remote = u64::from(r.has(TensorClass::Optimizer)) * local * 2 * o as u64
            + u64::from(r.has(TensorClass::Gradients)) * local * g
            + u64::from(r.has(TensorClass::Weights)) * local * w as u64;
        let step = self.optimizer_pass(
            KernelName::OptimizerStep,
            local,
            12 * local,
            local * (4 * 3 + g + 4 * 3),
        );
        self.remote(b, remote, &mut |b| {
            b.compute(step);
        });
        b.compute(self.optimizer_pass(
            KernelName::ParamCopy,
            local,
            0,
            local * (4 + self.weight_bytes()),
        ));
        if (1..3).contains(&zero) && !self.options.overlap_param_gather {
            b.label.module = Module::GradSync;
            for chunk in 0..self.layout.vp {
                b.label.chunk = chunk as u16;
                for (gather, _) in self.param_gathers(b, chunk) {
                    b.wait(gather);
                }
            }
            b.label.chunk = 0;
        }
        // `train_step` zeroes every model chunk's gradient buffer (`zero_grad_buffer`) at the
        // start of each iteration; one iteration pays it once, here. The buffer holds all of
        // this rank's gradients unless ZeRO-2/3 shards them.
        b.label.module = Module::Optimizer;
        let grads = self.local_params(zero >= 2);
        b.compute(self.optimizer_pass(KernelName::GradZero, grads, 0, grads * g));
    }

    /// One pass of the optimizer step over `elements` parameters or gradients.
    fn optimizer_pass(&self, name: KernelName, elements: u64, flops: u64, bytes: u64) -> Kernel {
        Kernel {
            name,
            pass: Pass::Forward,
            shape: Shape::Elementwise {
                elements,
                kernels: 1,
            },
            flops,
            bytes,
            dtype: self.options.dims.precision,
        }
    }

    /// A memory pass over `params` gradients (copy into the communication buffer).
    fn grad_copy(&self, params: u64) -> Kernel {
        let d = self.options.dims;
        Kernel {
            name: KernelName::OptimizerStep,
            pass: Pass::Backward,
            shape: Shape::Elementwise {
                elements: params,
                kernels: 1,
            },
            flops: 0,
            bytes: 2 * params * self.grad_bytes(),
            dtype: d.precision,
        }
    }

    /// Bytes layer `layer` moves to and from CXL memory in one micro-batch's forward or
    /// backward ([`RemoteMemory`]).
    fn remote_layer_bytes(&self, layer: u64, phase: Phase) -> u64 {
        let r = &self.options.remote;
        if r.classes.is_empty() {
            return 0;
        }
        let (dense, expert) = layer_params_per_rank(self.model, self.layout, layer);
        let recompute = self.options.dims.recompute == crate::config::Recompute::Full;
        let inputs = self
            .options
            .memory_inputs(u64::from(self.pipeline.micro_batches));
        let (weights, gradients, _) =
            crate::memory::state_bytes(dense, expert, self.layout, &inputs);
        let stash = crate::memory::layer_activation_bytes(self.model, self.layout, &inputs, layer);
        let mut bytes = 0.0;
        if r.has(TensorClass::Weights) {
            let passes = if phase == Phase::Backward && recompute {
                2.0
            } else {
                1.0
            };
            bytes += passes * weights;
        }
        if r.has(TensorClass::Gradients) && phase == Phase::Backward {
            bytes += 2.0 * gradients;
        }
        if r.has(TensorClass::Activations) {
            bytes += stash;
        }
        bytes.round() as u64
    }

    /// Emits `body` (one layer, or the optimizer step) with its CXL transfer of `bytes`,
    /// coherent or not ([`RemoteMemory`]).
    fn remote(&self, b: &mut Builder, bytes: u64, body: &mut dyn FnMut(&mut Builder)) {
        if bytes == 0 {
            body(b);
            return;
        }
        let transfer = b.memory_transfer(bytes);
        if self.options.remote.coherent {
            body(b);
            b.wait(transfer);
        } else {
            b.wait(transfer);
            body(b);
        }
    }

    /// Parameters this rank updates: its shard under the distributed optimizer.
    fn local_params(&self, sharded: bool) -> u64 {
        let mut dense = 0;
        let mut expert = 0;
        for chunk in 0..self.layout.vp {
            for u in &self.chunk_units[chunk as usize] {
                dense += u.dense;
                expert += u.expert;
            }
        }
        if sharded {
            let d = u64::from(self.layout.group_size(GroupKind::DpCp));
            let e = u64::from(self.layout.group_size(GroupKind::ExpertDp));
            dense.div_ceil(d) + expert.div_ceil(e)
        } else {
            dense + expert
        }
    }
}
