//! The ring as fluid (`network.model = "flow"`, one member per host, so that every edge
//! crosses the network alike): each member hands its lanes to the flow LP, which runs the
//! whole ring once every member joined and tells each when it ends
//! ([`crate::flow::RingJoin`]). The ring's shape is [`super::ring`]'s.

use super::{Algo, Call, Schedule, Start, ring};
use crate::collective::{self, CommShape, Plan, Settings};
use crate::flow::RingJoin;
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::{Body, Ctx, SimModel, Tag};

/// [`Algo::Fluid`]: a ring of `steps` steps on `lanes` lanes, run by the flow LP as one
/// flow per lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Fluid {
    steps: u32,
    lanes: u32,
}

impl Fluid {
    /// Whether a ring in a group of `shape` runs as fluid.
    pub(super) fn runs(model: &SimModel, shape: &CommShape) -> bool {
        model.net.flow && shape.nodes > 1 && shape.ranks_per_node == 1
    }

    /// Plans the ring of `call`; `None` after a failure (recorded).
    pub(super) fn start(gpu: &mut GpuLp, model: &SimModel, call: &Call) -> Option<Start> {
        let (steps, lanes, step) = ring::steps_and_lanes(gpu, model, call)?;
        Some(Start {
            algo: Algo::Fluid(Fluid { steps, lanes }),
            step_bytes: call.wire(step),
            recv_needed: 1,
        })
    }
}

impl Schedule for Fluid {
    fn net_window(self, settings: &Settings, plan: &Plan) -> u64 {
        ring::net_window(self.lanes, settings, plan)
    }

    fn simulated_hops(self, call: &Call) -> Option<(u32, u32)> {
        Some(ring::simulated_hops(self.steps, call))
    }

    /// Hands this member's edges to the flow LP.
    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let Running::Comm(run) = &gpu.running[s] else {
            return;
        };
        let (kind, n) = (run.group_kind(), run.ring.n);
        let (group, seq, step_bytes) = (run.group, run.seq, run.step_bytes);
        let fifo_rate = collective::window_rate(run.net_window);
        let Some(home) = model.flow_home else {
            return gpu.fail("a ring crosses shared links but the fabric has no flow LP");
        };
        let Some(leader) = gpu.groups[kind as usize].as_ref().map(|g| g.leader) else {
            return;
        };
        let tag = Tag {
            stream: s as u8,
            group,
            seq,
            step: 0,
        };
        let lanes = (0..self.lanes)
            .map(|lane| {
                let (next, _, via) = gpu.lane(kind, self.lanes, lane);
                let first = Tag {
                    step: (lane * self.steps) as u16,
                    ..tag
                };
                (next, via, gpu.flow_hash(model, next, first))
            })
            .collect();
        let join = RingJoin {
            leader,
            group,
            seq,
            n,
            member: gpu.node,
            tag,
            lanes,
            steps: self.steps,
            step_bytes,
            fifo_rate,
        };
        ctx.emit(
            home,
            ctx.now + model.flow_delay,
            Body::RingJoin(Box::new(join)),
        );
    }

    /// The flow LP's word that the ring ended.
    fn arrive(self, gpu: &mut GpuLp, _: &SimModel, s: usize, _: u16, _: (u64, u64), _: &mut Ctx) {
        if let Running::Comm(run) = &mut gpu.running[s] {
            run.recv_got += 1;
        }
    }
}
