//! Workloads of one communication operation, as nccl-tests runs them
//! (github.com/NVIDIA/nccl-tests, `src/common.cu`): every rank issues the same collective on
//! one communicator of all ranks, or sends to its successor while receiving from its
//! predecessor (`sendrecv_perf`). `fleetsim collective` simulates one per message size.

use super::{Label, OpKind, Peer, Program, Stream, Workload};
use crate::layout::{Dim, GroupKind, ParallelLayout};

pub use super::CollectiveOp;

/// What one nccl-tests binary measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchOp {
    Collective(CollectiveOp),
    /// `sendrecv_perf`: rank r sends to r+1 and receives from r−1, all at once (a ring shift).
    SendRecv,
}

impl BenchOp {
    pub const NAMES: [&'static str; 6] = [
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "broadcast",
        "send-recv",
    ];

    /// Accepts nccl-tests' binary names too (`all_reduce`, `alltoall`, `sendrecv`).
    pub fn parse(name: &str) -> Option<BenchOp> {
        let key: String = name
            .trim()
            .trim_end_matches("_perf")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        Some(match key.as_str() {
            "allreduce" => BenchOp::Collective(CollectiveOp::AllReduce),
            "allgather" => BenchOp::Collective(CollectiveOp::AllGather),
            "reducescatter" => BenchOp::Collective(CollectiveOp::ReduceScatter),
            "alltoall" => BenchOp::Collective(CollectiveOp::AllToAll),
            "broadcast" => BenchOp::Collective(CollectiveOp::Broadcast),
            "sendrecv" => BenchOp::SendRecv,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            BenchOp::Collective(op) => op.name(),
            BenchOp::SendRecv => "send-recv",
        }
    }

    /// nccl-tests' bus bandwidth factor (`doc/PERFORMANCE.md`): busbw = algbw × factor.
    pub fn bus_factor(self, ranks: u32) -> f64 {
        match self {
            BenchOp::Collective(op) => crate::collective::bus_factor(op, ranks),
            BenchOp::SendRecv => 1.0,
        }
    }

    /// The size nccl-tests runs for a requested `bytes` of elements of `word` bytes: whole
    /// elements, and for the ops that split the buffer across ranks a whole number of
    /// elements per rank (`AllGatherGetCollByteCount` and its siblings round down).
    pub fn round_size(self, bytes: u64, ranks: u32, word: u64) -> u64 {
        let unit = match self {
            BenchOp::Collective(
                CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll,
            ) => word * u64::from(ranks.max(1)),
            _ => word,
        };
        (bytes / unit * unit).max(unit)
    }
}

/// The workload in which each of `ranks` ranks runs `op` once on `bytes` (nccl-tests'
/// "size": the all-reduce buffer, the gathered output, the scattered input, the all-to-all
/// send buffer, the broadcast buffer, the bytes each rank sends).
pub fn workload(op: BenchOp, ranks: u32, bytes: u64) -> Workload {
    let ranks = ranks.max(1);
    // A send/recv ring is the pipeline ring with one stage per rank (the last stage's next is
    // the first); a collective is one data-parallel communicator over every rank.
    let (dp, pp) = match op {
        BenchOp::Collective(_) => (ranks, 1),
        BenchOp::SendRecv => (1, ranks),
    };
    let layout = ParallelLayout {
        tp: 1,
        cp: 1,
        ep: 1,
        etp: 1,
        dp,
        pp,
        vp: 1,
        order: [Dim::Tp, Dim::Cp, Dim::Ep, Dim::Dp, Dim::Pp],
    };
    let label = Label::imported();
    let programs = (0..pp)
        .map(|stage| {
            let mut program = Program::new(stage, 1);
            match op {
                BenchOp::Collective(op) => {
                    program.push(
                        OpKind::Collective {
                            op,
                            group: GroupKind::Dp,
                            bytes,
                        },
                        Stream::Dp,
                        label,
                        &[],
                    );
                }
                BenchOp::SendRecv if ranks > 1 => {
                    let send = OpKind::Send {
                        peer: Peer::PpNext,
                        bytes,
                    };
                    let recv = OpKind::Recv {
                        peer: Peer::PpPrev,
                        bytes,
                    };
                    program.push(send, Stream::SendNext, label, &[]);
                    program.push(recv, Stream::RecvPrev, label, &[]);
                }
                BenchOp::SendRecv => {}
            }
            program
        })
        .collect();
    Workload {
        layout,
        micro_batch: 1,
        stage_layers: vec![0; pp as usize],
        replica_class: vec![0; dp as usize],
        programs,
        tokens: 0,
        source: format!("fleetsim collective: {} of {bytes} B", op.name()),
        line_names: Vec::new(),
        jobs: None,
        one_replica: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_in_both_spellings() {
        for name in BenchOp::NAMES {
            let op = BenchOp::parse(name).expect(name);
            assert_eq!(op.name(), name);
        }
        assert_eq!(
            BenchOp::parse("all_reduce_perf"),
            Some(BenchOp::Collective(CollectiveOp::AllReduce))
        );
        assert_eq!(BenchOp::parse("sendrecv"), Some(BenchOp::SendRecv));
        assert_eq!(BenchOp::parse("reduce"), None);
    }

    #[test]
    fn sizes_round_to_whole_elements_per_rank() {
        let ag = BenchOp::Collective(CollectiveOp::AllGather);
        assert_eq!(ag.round_size(1000, 8, 4), 992);
        assert_eq!(ag.round_size(1, 8, 4), 32);
        let ar = BenchOp::Collective(CollectiveOp::AllReduce);
        assert_eq!(ar.round_size(1001, 8, 4), 1000);
    }

    #[test]
    fn every_rank_runs_the_op_once() {
        let w = workload(BenchOp::Collective(CollectiveOp::AllReduce), 16, 1 << 20);
        assert_eq!(w.layout.world(), 16);
        assert_eq!(w.layout.group_size(GroupKind::Dp), 16);
        assert_eq!(w.programs.len(), 1);
        assert_eq!(w.programs[0].ops.len(), 1);

        let w = workload(BenchOp::SendRecv, 4, 1 << 20);
        assert_eq!(w.layout.world(), 4);
        assert_eq!(w.programs.len(), 4);
        assert!(w.programs.iter().all(|p| p.ops.len() == 2));
    }
}
