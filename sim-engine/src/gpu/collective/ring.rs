//! NCCL's ring on lanes of channels, transfer by transfer: all-reduce in 2(n−1) steps of
//! size/(n·lanes) per lane, all-gather and reduce-scatter in n−1 (NCCL's
//! `doc/PERFORMANCE.md`). A lane sends step k+1 once step k arrived from its ring
//! predecessor. The lane rings (with PXN relays) are built here for the fluid ring too.

use super::group::LaneLinks;
use super::{Algo, Call, Schedule, Start};
use crate::collective::{self, Algorithm, Plan, Protocol, Settings, ring};
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::layout::GroupKind;
use crate::workload::CollectiveOp;
use crate::{Ctx, NO_NODE, SimModel};

/// [`Algo::Ring`]: `steps` steps on each of `lanes` parallel rings (channels grouped by
/// route).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Ring {
    steps: u32,
    lanes: u32,
}

impl Ring {
    /// Plans the ring of `call`; `None` after a failure (recorded).
    pub(super) fn start(gpu: &mut GpuLp, model: &SimModel, call: &Call) -> Option<Start> {
        let (steps, lanes, step) = steps_and_lanes(gpu, model, call)?;
        Some(Start {
            algo: Algo::Ring(Ring { steps, lanes }),
            step_bytes: call.wire(step),
            recv_needed: steps * lanes,
        })
    }
}

impl Schedule for Ring {
    fn net_window(self, settings: &Settings, plan: &Plan) -> u64 {
        net_window(self.lanes, settings, plan)
    }

    fn simulated_hops(self, call: &Call) -> Option<(u32, u32)> {
        Some(simulated_hops(self.steps, call))
    }

    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let Running::Comm(run) = &gpu.running[s] else {
            return;
        };
        let (kind, step_bytes) = (run.group_kind(), run.step_bytes);
        for lane in 0..self.lanes {
            let (next, _, via) = gpu.lane(kind, self.lanes, lane);
            let step = (lane * self.steps) as u16;
            gpu.send(model, s, (next, via), step_bytes, s, step, ctx);
        }
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
        let (lane, k) = (u32::from(step) / self.steps, u32::from(step) % self.steps);
        if k + 1 < self.steps {
            let (kind, step_bytes) = (run.group_kind(), run.step_bytes);
            let (next, _, via) = gpu.lane(kind, self.lanes, lane);
            gpu.send(model, s, (next, via), step_bytes, s, step + 1, ctx);
        }
    }
}

/// A ring's steps and lanes for `call`, and the payload of one step on one lane; `None`
/// when its tags cannot number the steps (recorded).
pub(super) fn steps_and_lanes(
    gpu: &mut GpuLp,
    model: &SimModel,
    call: &Call,
) -> Option<(u32, u32, u64)> {
    let n = call.ring.n;
    // The coherent ring stops after its reduce-scatter half.
    let full = call.op == CollectiveOp::AllReduce && call.plan.algorithm != Algorithm::CoherentRing;
    let steps = if full { 2 * (n - 1) } else { n - 1 };
    let lanes = gpu.lanes(model, call.kind, call.plan.channels);
    if u64::from(lanes) * u64::from(steps) > u64::from(u16::MAX) {
        gpu.fail(format!(
            "a ring of {n} ranks on {lanes} lanes has more steps than fleetsim tags hold (65,535); use network.model = \"analytical\" for this group"
        ));
        return None;
    }
    let step = call.bytes.div_ceil(u64::from(n) * u64::from(lanes));
    Some((steps, lanes, step))
}

/// A ring's window on `lanes` lanes: NCCL's FIFO of the channels each lane carries.
pub(super) fn net_window(lanes: u32, settings: &Settings, plan: &Plan) -> u64 {
    if plan.protocol == Protocol::Simple {
        collective::collective_window(settings, plan.channels.div_ceil(lanes))
    } else {
        u64::MAX
    }
}

/// The latency steps of a ring of `steps` steps along the critical path: (all, across
/// nodes).
pub(super) fn simulated_hops(steps: u32, call: &Call) -> (u32, u32) {
    let op = if steps < 2 * (call.ring.n - 1) {
        CollectiveOp::ReduceScatter
    } else {
        call.op
    };
    collective::ring_steps(op, call.shape.ranks, call.shape.nodes)
}

impl GpuLp {
    /// Builds this rank's lane rings of group `kind` for `channels` channels (kept until the
    /// lane count changes); the lane count.
    fn lanes(&mut self, model: &SimModel, kind: GroupKind, channels: u32) -> u32 {
        let Some(g) = self.groups[kind as usize].as_mut() else {
            return 1;
        };
        let lanes = ring::lane_count(g.shape.nodes, g.shape.ranks_per_node, channels);
        if !g.lanes.iter().any(|(count, _)| *count == lanes) {
            let topo = &model.topology;
            let node = |r: u32| topo.nccl_node(r);
            let members = model.workload.group(kind, self.rank);
            let pxn = model.collectives.settings.rail_aligned_rings();
            let links = ring::lane_links(&members, node, lanes, pxn, self.rank)
                .into_iter()
                .map(|l| {
                    (
                        topo.gpu(l.next),
                        topo.gpu(l.prev),
                        l.via.map_or(NO_NODE, |v| topo.gpu(v)),
                    )
                })
                .collect();
            g.lanes.push((lanes, links));
        }
        lanes
    }

    /// (next, prev, relay) of lane `lane` of group `kind`'s `lanes`-lane rings, built by
    /// [`Self::lanes`].
    pub(super) fn lane(&self, kind: GroupKind, lanes: u32, lane: u32) -> LaneLinks {
        self.groups[kind as usize]
            .as_ref()
            .and_then(|g| g.lanes.iter().find(|(count, _)| *count == lanes))
            .and_then(|(_, links)| links.get(lane as usize).copied())
            .unwrap_or((self.node, self.node, NO_NODE))
    }
}
