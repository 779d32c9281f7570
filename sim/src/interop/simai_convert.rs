//! SimAI workload files to and from the IR.
//!
//! Import: a SimAI file describes one representative rank (AICB writes stage 0's layers with
//! `ga` micro-batch copies). Every pipeline stage runs its lines:
//! - with `pp` = 1, exactly in SimAI's order: every line's forward top to bottom, then every
//!   line's input and weight gradient bottom to top;
//! - with `pp` > 1, each `embedding_layer` line opens a micro-batch (AICB's layout) and the
//!   micro-batches run Megatron's 1F1B schedule with `pp_comm` bytes sent across every stage
//!   boundary; lines before the first micro-batch (DP gradient sync, optimizer compute) run
//!   forward first and backward last, as SimAI runs them; lines after the last micro-batch
//!   join it.
//! - forward and input-gradient communication is on the TP group, weight-gradient
//!   communication on the DP group, unless suffixed `_EP` (EP group) or `_DP_EP` (expert-DP);
//!   forward and input-gradient collectives block the next kernel, weight-gradient ones
//!   overlap it. `wg_update_ns` runs after the schedule, line by line.
//!
//! Export writes the program of the first stage in the same layout, so the import of an export
//! gives back the same lines; compiled kernels are timed with the roofline.

use crate::compute::ComputeModel;
use crate::config::{ConfigError, Origin, Precision};
use crate::experiment::Experiment;
use crate::layout::{GroupKind, ParallelLayout, parse_order};

use super::simai::{
    SimaiComm, SimaiCommGroup, SimaiCommKind, SimaiFile, SimaiHeader, SimaiLayer, SimaiPolicy,
};
use crate::workload::compile::{PipelinePosition, run_schedule};
use crate::workload::layer::Builder;
use crate::workload::{
    CollectiveOp, Kernel, KernelName, Module, OpKind, Pass, Phase, Program, Shape, Stream, Workload,
};

fn header_error(file: &str, key: &str, message: String) -> ConfigError {
    ConfigError::new(
        Origin::File {
            file: file.to_string(),
            line: 1,
        },
        key,
        message,
    )
}

fn fixed(ns: u64, pass: Pass) -> Kernel {
    Kernel {
        name: KernelName::Imported,
        pass,
        shape: Shape::Fixed { ns },
        flops: 0,
        bytes: 0,
        dtype: Precision::Bf16,
    }
}

/// Which group a SimAI comm runs on: fwd/ig default to TP, wg to DP.
fn group_of(comm: &SimaiComm, weight_gradient: bool) -> GroupKind {
    match comm.group {
        SimaiCommGroup::Ep => GroupKind::Ep,
        SimaiCommGroup::DpEp => GroupKind::ExpertDp,
        SimaiCommGroup::Default if weight_gradient => GroupKind::Dp,
        SimaiCommGroup::Default => GroupKind::Tp,
    }
}

fn ops_of(kind: SimaiCommKind) -> &'static [CollectiveOp] {
    match kind {
        SimaiCommKind::None => &[],
        SimaiCommKind::AllReduce => &[CollectiveOp::AllReduce],
        SimaiCommKind::AllGather => &[CollectiveOp::AllGather],
        SimaiCommKind::ReduceScatter => &[CollectiveOp::ReduceScatter],
        SimaiCommKind::AllToAll => &[CollectiveOp::AllToAll],
        // SimAI's DLRM flavour: an all-reduce then an all-to-all of the same message.
        SimaiCommKind::AllReduceAllToAll => &[CollectiveOp::AllReduce, CollectiveOp::AllToAll],
    }
}

/// Emits one SimAI comm field; blocking ones hold back the next kernel.
fn emit_comm(b: &mut Builder, comm: &SimaiComm, weight_gradient: bool) {
    let group = group_of(comm, weight_gradient);
    for &op in ops_of(comm.kind) {
        if weight_gradient {
            b.collective(op, group, comm.bytes);
        } else {
            b.blocking(op, group, comm.bytes);
        }
    }
}

fn line_forward(b: &mut Builder, index: usize, line: &SimaiLayer) {
    b.label.layer = index as u32;
    b.compute(fixed(line.fwd_ns, Pass::Forward));
    emit_comm(b, &line.fwd, false);
}

fn line_backward(b: &mut Builder, index: usize, line: &SimaiLayer) {
    b.label.layer = index as u32;
    b.compute(fixed(line.ig_ns, Pass::Dgrad));
    emit_comm(b, &line.ig, false);
    b.compute(fixed(line.wg_ns, Pass::Wgrad));
    emit_comm(b, &line.wg, true);
}

/// Splits the lines into (prologue, micro-batch groups) after AICB's layout.
fn micro_batch_groups(layers: &[SimaiLayer]) -> (usize, Vec<std::ops::Range<usize>>) {
    let starts: Vec<usize> = layers
        .iter()
        .enumerate()
        .filter(|(_, l)| l.name == "embedding_layer")
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = starts.first() else {
        return (0, std::iter::once(0..layers.len()).collect());
    };
    let mut groups: Vec<std::ops::Range<usize>> = starts.windows(2).map(|w| w[0]..w[1]).collect();
    if let Some(&last) = starts.last() {
        groups.push(last..layers.len());
    }
    (first, groups)
}

/// The most stage lines (pipeline stages × layer lines) an import builds: every stage runs
/// every line, at most ten ops each (a few hundred bytes). 2^22 is far above what AICB writes
/// (its 1024-GPU GPT-3 175B file: 8 stages × 814 lines), and bounds a file whose `pp` and
/// line count multiply to more than memory holds.
pub const MAX_STAGE_LINES: u64 = 1 << 22;

/// Builds the workload a SimAI file describes. `file` names it in errors; `world` is the
/// experiment's GPU count, which `all_gpus` must match.
pub fn import(simai: &SimaiFile, file: &str, world: u32) -> Result<Workload, ConfigError> {
    let h = &simai.header;
    let tp = h.tp.unwrap_or(1);
    let pp = h.pp.unwrap_or(1);
    let ep = h.ep.unwrap_or(1);
    let all = h.all_gpus.unwrap_or(world);
    if all != world {
        return Err(header_error(
            file,
            "header.all_gpus",
            format!(
                "the workload is for {all} GPUs but the experiment's cluster.gpus = {world}; make them equal"
            ),
        ));
    }
    let model = u64::from(tp) * u64::from(pp);
    if model == 0 || u64::from(all) % model != 0 {
        return Err(header_error(
            file,
            "header.all_gpus",
            format!("{all} GPUs are not divisible by model_parallel_NPU_group {tp} x pp {pp}"),
        ));
    }
    let dp = (u64::from(all) / model) as u32;
    if ep == 0 || !dp.is_multiple_of(ep) {
        return Err(header_error(
            file,
            "header.ep",
            format!("ep {ep} must divide the data-parallel size {dp} (all_gpus / (TP x PP))"),
        ));
    }
    let order =
        parse_order("tp-cp-ep-dp-pp").map_err(|e| header_error(file, "header", e.to_string()))?;
    // SimAI's workloads shard experts over TP like the attention (no expert-TP key).
    let layout = ParallelLayout {
        tp,
        cp: 1,
        ep,
        etp: tp,
        dp,
        pp,
        vp: 1,
        order,
    };
    let layers = &simai.layers;
    let stage_lines = u64::from(pp).saturating_mul(layers.len() as u64);
    if stage_lines > MAX_STAGE_LINES {
        return Err(header_error(
            file,
            "header.pp",
            format!(
                "{pp} pipeline stages each run the file's {} layer lines: {stage_lines} stage lines, more than the {MAX_STAGE_LINES} fleetsim imports (about 2 GiB of programs); import a workload with fewer stages or lines",
                layers.len()
            ),
        ));
    }
    let (prologue, groups) = if pp > 1 {
        micro_batch_groups(layers)
    } else {
        (0, std::iter::once(0..layers.len()).collect())
    };
    let micro_batches = groups.len() as u32;
    let boundary_bytes = h.pp_comm.unwrap_or(0);
    let mut programs = Vec::with_capacity(pp as usize);
    for stage in 0..pp {
        let mut program = Program::new(stage, micro_batches);
        let mut b = Builder::new(&mut program);
        b.label.module = Module::Imported;
        b.label.phase = Phase::Forward;
        for (i, line) in layers[..prologue].iter().enumerate() {
            line_forward(&mut b, i, line);
        }
        let pipeline = PipelinePosition {
            pp,
            vp: 1,
            stage,
            micro_batches,
            boundary_bytes,
            overlap_p2p: false,
            gather_bytes: None,
        };
        run_schedule(
            &mut b,
            &pipeline,
            &mut |b, step| {
                b.label.module = Module::Imported;
                let range = groups[step.micro_batch as usize].clone();
                if step.forward {
                    for i in range {
                        line_forward(b, i, &layers[i]);
                    }
                } else {
                    for i in range.rev() {
                        line_backward(b, i, &layers[i]);
                    }
                }
            },
            None,
        );
        b.label.module = Module::Imported;
        b.label.phase = Phase::Backward;
        for (i, line) in layers[..prologue].iter().enumerate().rev() {
            line_backward(&mut b, i, line);
        }
        // Wait for the weight-gradient communication, then the per-layer updates.
        let last_dp = b
            .program
            .ops
            .iter()
            .rposition(|o| o.stream != Stream::Compute && o.label.phase != Phase::Forward);
        if let Some(last) = last_dp {
            b.wait(last as u32);
        }
        b.label.phase = Phase::Optimizer;
        for (i, line) in layers.iter().enumerate() {
            b.label.layer = i as u32;
            b.compute(fixed(line.wg_update_ns, Pass::Forward));
        }
        programs.push(program);
    }
    let mut names: Vec<String> = layers.iter().map(|l| l.name.clone()).collect();
    names.shrink_to_fit();
    Ok(Workload {
        layout,
        micro_batch: 1,
        stage_layers: vec![u64::from(h.vpp.unwrap_or(0)); pp as usize],
        replica_class: vec![0; dp as usize],
        programs,
        tokens: 0,
        source: file.to_string(),
        line_names: names,
        jobs: None,
        one_replica: false,
    })
}

fn to_simai_comm(op: CollectiveOp, group: GroupKind, bytes: u64) -> SimaiComm {
    let kind = match op {
        CollectiveOp::AllReduce => SimaiCommKind::AllReduce,
        CollectiveOp::AllGather => SimaiCommKind::AllGather,
        CollectiveOp::ReduceScatter => SimaiCommKind::ReduceScatter,
        CollectiveOp::AllToAll => SimaiCommKind::AllToAll,
        // SimAI has no broadcast; an all-gather moves the same bytes per rank.
        CollectiveOp::Broadcast => SimaiCommKind::AllGather,
    };
    let group = match group {
        GroupKind::Ep => SimaiCommGroup::Ep,
        GroupKind::ExpertDp => SimaiCommGroup::DpEp,
        _ => SimaiCommGroup::Default,
    };
    SimaiComm { kind, group, bytes }
}

/// Adds a collective to a comm field, merging all-reduce + all-to-all into SimAI's combined
/// kind and summing repeated collectives of one kind.
fn merge_comm(slot: &mut SimaiComm, add: SimaiComm) {
    if slot.kind == SimaiCommKind::None {
        *slot = add;
    } else if slot.kind == SimaiCommKind::AllReduce
        && add.kind == SimaiCommKind::AllToAll
        && slot.bytes == add.bytes
    {
        slot.kind = SimaiCommKind::AllReduceAllToAll;
    } else {
        slot.bytes += add.bytes;
    }
}

/// Lines of an imported workload, rebuilt from its first program.
fn imported_lines(w: &Workload) -> Vec<SimaiLayer> {
    let p = w.program(0, 0);
    let mut lines: Vec<SimaiLayer> = w.line_names.iter().map(SimaiLayer::new).collect();
    // Which field a collective belongs to: the last compute op of its line decides.
    let mut last_pass: Vec<Pass> = vec![Pass::Forward; lines.len()];
    for op in &p.ops {
        let i = op.label.layer as usize;
        if op.label.module != Module::Imported || i >= lines.len() {
            continue;
        }
        let line = &mut lines[i];
        match op.kind {
            OpKind::Compute { kernel } => {
                let k = &p.kernels[kernel as usize];
                let Shape::Fixed { ns } = k.shape else {
                    continue;
                };
                match (op.label.phase, k.pass) {
                    (Phase::Optimizer, _) => line.wg_update_ns = ns,
                    (_, Pass::Forward) => line.fwd_ns = ns,
                    (_, Pass::Dgrad) => line.ig_ns = ns,
                    _ => line.wg_ns = ns,
                }
                last_pass[i] = k.pass;
            }
            OpKind::Collective {
                op: c,
                group,
                bytes,
            } => {
                let comm = to_simai_comm(c, group, bytes);
                let slot = match last_pass[i] {
                    Pass::Forward => &mut line.fwd,
                    Pass::Dgrad => &mut line.ig,
                    _ => &mut line.wg,
                };
                merge_comm(slot, comm);
            }
            _ => {}
        }
    }
    lines
}

/// Lines of a compiled workload's first stage: per micro-batch and (layer, module), one line
/// per forward collective segment; backward work and collectives fill the same lines.
fn compiled_lines(w: &Workload, kernel_ns: &dyn Fn(&Kernel) -> u64) -> Vec<SimaiLayer> {
    let p = w.program(0, 0);
    let mut head: Vec<SimaiLayer> = Vec::new();
    let mut grad_comm = SimaiLayer::new("grad_param_comm");
    let mut grad_gather = SimaiLayer::new("grad_gather");
    let mut grad_compute = SimaiLayer::new("grad_param_compute");
    let mut other_sync = SimaiLayer::new("embedding_grads");
    let mut optimizer = SimaiLayer::new("optimizer1");
    // (micro_batch, layer, module) → lines in forward order, plus backward cursors.
    type Key = (u32, u32, Module);
    let mut order: Vec<Key> = Vec::new();
    let mut by_key: std::collections::BTreeMap<Key, Vec<SimaiLayer>> =
        std::collections::BTreeMap::new();
    let mut bwd_cursor: std::collections::BTreeMap<Key, usize> = std::collections::BTreeMap::new();
    let name_of = |m: Module| match m {
        Module::Embedding => "embedding_layer",
        Module::Attention => "attention_layer",
        Module::Mlp => "mlp_layer",
        Module::Moe => "mlp_moelayer",
        Module::Logits => "final_layer",
        _ => "layer",
    };
    for op in &p.ops {
        let l = op.label;
        let sync =
            matches!(l.module, Module::GradSync | Module::Optimizer) || l.phase == Phase::Optimizer;
        if l.module == Module::Pipeline {
            continue;
        }
        if sync {
            match op.kind {
                OpKind::Compute { kernel } => {
                    grad_compute.ig_ns += kernel_ns(&p.kernels[kernel as usize]);
                }
                OpKind::Collective {
                    op: c,
                    group,
                    bytes,
                } => {
                    let comm = to_simai_comm(c, group, bytes);
                    match (c, group) {
                        (CollectiveOp::AllGather, GroupKind::DpCp | GroupKind::ExpertDp) => {
                            merge_comm(&mut grad_gather.wg, comm)
                        }
                        (_, GroupKind::DpCp | GroupKind::Dp | GroupKind::ExpertDp) => {
                            merge_comm(&mut grad_comm.wg, comm)
                        }
                        (_, GroupKind::ModelParallel) => merge_comm(&mut optimizer.fwd, comm),
                        _ => merge_comm(&mut other_sync.ig, comm),
                    }
                }
                _ => {}
            }
            continue;
        }
        let key = (l.micro_batch, l.layer, l.module);
        let lines = by_key.entry(key).or_insert_with(|| {
            order.push(key);
            vec![SimaiLayer::new(name_of(l.module))]
        });
        let forward = l.phase == Phase::Forward;
        match op.kind {
            OpKind::Compute { kernel } => {
                let k = &p.kernels[kernel as usize];
                let ns = kernel_ns(k);
                if forward {
                    if let Some(x) = lines.last_mut() {
                        x.fwd_ns += ns;
                    }
                } else if k.pass == Pass::Wgrad {
                    lines[0].wg_ns += ns;
                } else {
                    lines[0].ig_ns += ns;
                }
            }
            OpKind::Collective {
                op: c,
                group,
                bytes,
            } => {
                let comm = to_simai_comm(c, group, bytes);
                if forward {
                    let last = lines.len() - 1;
                    if lines[last].fwd.kind == SimaiCommKind::None {
                        lines[last].fwd = comm;
                    } else {
                        merge_comm(&mut lines[last].fwd, comm);
                    }
                    let name = lines[0].name.clone();
                    lines.push(SimaiLayer::new(name));
                } else {
                    let cursor = bwd_cursor.entry(key).or_insert(0);
                    if *cursor >= lines.len() {
                        let name = lines[0].name.clone();
                        lines.push(SimaiLayer::new(name));
                    }
                    merge_comm(&mut lines[*cursor].ig, comm);
                    *cursor += 1;
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for line in [grad_gather, grad_comm, grad_compute, other_sync] {
        head.push(line);
    }
    out.extend(head);
    for key in order {
        let lines = by_key.remove(&key).unwrap_or_default();
        let n = lines.len();
        out.extend(
            lines
                .into_iter()
                .enumerate()
                .filter(|(i, l)| {
                    // Drop the empty tail line a final forward collective leaves behind.
                    !(*i + 1 == n && n > 1 && *l == SimaiLayer::new(l.name.clone()))
                })
                .map(|(_, l)| l),
        );
    }
    out.push(optimizer);
    out
}

/// The SimAI file of a workload (its first stage); compiled kernels timed by `kernel_ns`.
pub fn to_simai(w: &Workload, kernel_ns: &dyn Fn(&Kernel) -> u64) -> SimaiFile {
    let layers = if w.line_names.is_empty() {
        compiled_lines(w, kernel_ns)
    } else {
        imported_lines(w)
    };
    let p = w.program(0, 0);
    let pp_comm = p.ops.iter().find_map(|o| match o.kind {
        OpKind::Send { bytes, .. } => Some(bytes),
        _ => None,
    });
    let mut header = SimaiHeader::new(SimaiPolicy::HybridTransformerFwdInBckwd);
    header.tp = Some(w.layout.tp);
    header.ep = Some(w.layout.ep);
    header.pp = Some(w.layout.pp);
    header.vpp = Some(w.stage_layers.first().copied().unwrap_or(0) as u32);
    header.ga = Some(p.micro_batches);
    header.all_gpus = Some(w.layout.world());
    header.pp_comm = pp_comm.or((w.layout.pp > 1).then_some(0));
    SimaiFile {
        header,
        layers,
        warnings: Vec::new(),
    }
}

/// `fleetsim workload --export simai`: the text of the first stage's SimAI file, kernel times
/// from the compute model (measured tables first).
pub fn export(w: &Workload, exp: &Experiment, model: &ComputeModel) -> String {
    let gpu = exp.stage_gpus()[0];
    let ns = |k: &Kernel| model.kernel_time(k, gpu).duration.as_ps().div_ceil(1000);
    super::simai::write(&to_simai(w, &ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pp stages × layer lines is bounded before a program is built: a header's `pp` and a
    /// file's lines cannot multiply into more programs than memory holds.
    #[test]
    fn stage_lines_are_bounded_before_anything_is_built() {
        let mut header = SimaiHeader::new(SimaiPolicy::HybridTransformerFwdInBckwd);
        header.pp = Some(128);
        header.all_gpus = Some(128);
        let lines = (MAX_STAGE_LINES / 128 + 1) as usize;
        let file = SimaiFile {
            header,
            layers: vec![SimaiLayer::new("embedding_layer"); lines],
            warnings: Vec::new(),
        };
        let e = import(&file, "big.txt", 128).expect_err("too many stage lines");
        assert_eq!(
            e.to_string(),
            format!(
                "big.txt:1: `header.pp`: 128 pipeline stages each run the file's {lines} layer lines: {} stage lines, more than the 4194304 fleetsim imports (about 2 GiB of programs); import a workload with fewer stages or lines",
                128 * lines
            )
        );
        let mut small = file.clone();
        small.layers.truncate(4);
        assert_eq!(
            import(&small, "small.txt", 128)
                .expect("imports")
                .programs
                .len(),
            128
        );
    }
}
