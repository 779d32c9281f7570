//! PAT, NCCL's all-gather and reduce-scatter in log2(n) steps to peers 2^k positions away
//! (Bruck-style, [`crate::collective::pat`]): step k+1 is sent once step k arrived.

use super::{Algo, Call, Schedule, Start};
use crate::collective::{self, Plan, Protocol, Settings, pat};
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::layout::GroupKind;
use crate::topology::NodeId;
use crate::workload::CollectiveOp;
use crate::{Ctx, NO_NODE, SimModel};

/// [`Algo::Pat`]: all-gather, or reduce-scatter when `reduce`, in `steps` steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Pat {
    steps: u32,
    reduce: bool,
}

impl Pat {
    /// Plans `call` as PAT, finding this rank's peers.
    pub(super) fn start(gpu: &mut GpuLp, model: &SimModel, call: &Call) -> Option<Start> {
        gpu.pat_peers(model, call.kind);
        let steps = pat::steps(call.ring.n);
        let reduce = call.op == CollectiveOp::ReduceScatter;
        // step_bytes is one block; step k sends several.
        Some(Start {
            algo: Algo::Pat(Pat { steps, reduce }),
            step_bytes: call.wire(call.bytes.div_ceil(u64::from(call.ring.n))),
            recv_needed: steps,
        })
    }
}

impl Schedule for Pat {
    fn net_window(self, settings: &Settings, plan: &Plan) -> u64 {
        if plan.protocol == Protocol::Simple {
            collective::collective_window(settings, plan.channels)
        } else {
            u64::MAX
        }
    }

    fn simulated_hops(self, _: &Call) -> Option<(u32, u32)> {
        Some((self.steps, self.steps))
    }

    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        gpu.pat_send(model, s, 0, ctx);
    }

    fn arrive(
        self,
        gpu: &mut GpuLp,
        model: &SimModel,
        s: usize,
        step: u16,
        _: (u64, u64),
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &mut gpu.running[s] else {
            return;
        };
        run.recv_got += 1;
        if u32::from(step) + 1 < self.steps {
            gpu.pat_send(model, s, u32::from(step) + 1, ctx);
        }
    }
}

impl GpuLp {
    /// Computes PAT's peers in group `kind` once.
    fn pat_peers(&mut self, model: &SimModel, kind: GroupKind) {
        let Some(g) = self.groups[kind as usize].as_mut() else {
            return;
        };
        if !g.pat.is_empty() {
            return;
        }
        let topo = &model.topology;
        let members = model.workload.group(kind, self.rank);
        let (n, pos) = (g.ring.n, g.ring.pos);
        g.pat = (0..pat::steps(n))
            .map(|k| {
                let d = (1u32 << k) % n;
                (
                    topo.gpu(members[((pos + n - d) % n) as usize]),
                    topo.gpu(members[((pos + d) % n) as usize]),
                )
            })
            .collect();
    }

    /// PAT's peer `2^k` positions before (`before`) or after this rank.
    fn pat_peer(&self, kind: GroupKind, k: u32, before: bool) -> NodeId {
        self.groups[kind as usize]
            .as_ref()
            .and_then(|g| g.pat.get(k as usize))
            .map_or(self.node, |&(b, a)| if before { b } else { a })
    }

    /// Sends PAT's step `k` of the op on stream `s`.
    fn pat_send(&mut self, model: &SimModel, s: usize, k: u32, ctx: &mut Ctx) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let Algo::Pat(Pat { reduce, .. }) = run.algo else {
            return;
        };
        let kind = run.group_kind();
        let n = run.ring.n;
        let (distance, blocks) = if reduce {
            pat::reduce_scatter_step(n, k)
        } else {
            pat::all_gather_step(n, k)
        };
        let peer = self.pat_peer(kind, distance.trailing_zeros(), !reduce);
        let bytes = run.step_bytes * u64::from(blocks);
        self.send(model, s, (peer, NO_NODE), bytes, s, k as u16, ctx);
    }
}
