//! What a compiled workload does per rank of each stage: op counts, FLOPs, and bytes per
//! collective kind and group, for `fleetsim workload` and `fleetsim check`.

use std::collections::BTreeMap;

use super::{CollectiveOp, OpKind, Phase, Program, Shape, Workload};
use crate::layout::{GroupKind, ParallelLayout};

/// Totals of one collective kind on one group kind, per rank per iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommTotal {
    pub count: u64,
    /// Sum of message sizes (nccl-tests "size").
    pub bytes: u64,
    /// Bytes the rank sends with ring / pairwise algorithms.
    pub wire_bytes: f64,
}

/// One program's summary (a stage of one replica class).
#[derive(Debug, Clone, PartialEq)]
pub struct StageSummary {
    pub stage: u32,
    pub class: usize,
    pub micro_batches: u32,
    /// Ranks that run this program.
    pub ranks: u64,
    pub ops: u64,
    pub compute_ops: u64,
    pub collective_ops: u64,
    pub p2p_ops: u64,
    pub distinct_kernels: u64,
    /// GEMM and attention FLOPs of forward and backward, Megatron-LM's accounting, per rank.
    pub model_flops: f64,
    /// FLOPs of recomputed forward work, per rank.
    pub recompute_flops: f64,
    /// Memory-bound kernels' FLOPs (norms, activations, optimizer), per rank.
    pub other_flops: f64,
    pub collectives: BTreeMap<(CollectiveOp, GroupKind), CommTotal>,
    pub send_bytes: u64,
    pub recv_bytes: u64,
    /// Bytes moved to and from CXL memory (remote operands).
    pub memory_bytes: u64,
}

impl StageSummary {
    pub fn hardware_flops(&self) -> f64 {
        self.model_flops + self.recompute_flops
    }
}

fn is_matmul(shape: &Shape) -> bool {
    matches!(shape, Shape::Gemm { .. } | Shape::Attention { .. })
}

pub fn summarize_program(
    program: &Program,
    layout: &ParallelLayout,
    class: usize,
    ranks: u64,
) -> StageSummary {
    let mut s = StageSummary {
        stage: program.stage,
        class,
        micro_batches: program.micro_batches,
        ranks,
        ops: program.ops.len() as u64,
        compute_ops: 0,
        collective_ops: 0,
        p2p_ops: 0,
        distinct_kernels: program.kernels.len() as u64,
        model_flops: 0.0,
        recompute_flops: 0.0,
        other_flops: 0.0,
        collectives: BTreeMap::new(),
        send_bytes: 0,
        recv_bytes: 0,
        memory_bytes: 0,
    };
    for op in &program.ops {
        match op.kind {
            OpKind::Compute { kernel } => {
                s.compute_ops += 1;
                let k = &program.kernels[kernel as usize];
                let flops = k.flops as f64;
                if !is_matmul(&k.shape) {
                    s.other_flops += flops;
                } else if op.label.phase == Phase::Recompute {
                    s.recompute_flops += flops;
                } else {
                    s.model_flops += flops;
                }
            }
            OpKind::Collective {
                op: c,
                group,
                bytes,
            } => {
                s.collective_ops += 1;
                let n = layout.group_size(group);
                let t = s.collectives.entry((c, group)).or_insert(CommTotal {
                    count: 0,
                    bytes: 0,
                    wire_bytes: 0.0,
                });
                t.count += 1;
                t.bytes += bytes;
                t.wire_bytes += c.wire_bytes_per_rank(bytes, n);
            }
            OpKind::Send { bytes, .. } => {
                s.p2p_ops += 1;
                s.send_bytes += bytes;
            }
            OpKind::MemoryRead { bytes } => s.memory_bytes += bytes,
            OpKind::Recv { bytes, .. } => {
                s.p2p_ops += 1;
                s.recv_bytes += bytes;
            }
        }
    }
    s
}

/// Summaries of every program, class-major.
pub fn summarize(workload: &Workload) -> Vec<StageSummary> {
    let layout = &workload.layout;
    let per_replica = u64::from(layout.tp) * u64::from(layout.cp);
    let mut replicas = vec![0u64; workload.classes()];
    for &c in &workload.replica_class {
        replicas[usize::from(c)] += 1;
    }
    (0..workload.classes())
        .flat_map(|class| {
            let replicas = replicas[class];
            (0..layout.pp).map(move |stage| {
                summarize_program(
                    workload.program(class, stage),
                    layout,
                    class,
                    replicas * per_replica,
                )
            })
        })
        .collect()
}

/// Model FLOPs of one iteration over all ranks (Megatron-LM's accounting).
pub fn total_model_flops(summaries: &[StageSummary]) -> f64 {
    summaries
        .iter()
        .map(|s| s.model_flops * s.ranks as f64)
        .sum()
}

/// Model plus recomputed FLOPs of one iteration over all ranks.
pub fn total_hardware_flops(summaries: &[StageSummary]) -> f64 {
    summaries
        .iter()
        .map(|s| s.hardware_flops() * s.ranks as f64)
        .sum()
}
