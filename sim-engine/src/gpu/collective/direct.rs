//! All-to-all as direct pairwise sends, every member to every other at once, as NCCL runs it
//! (grouped sends and receives). Also the arm of a group of one, which completes at once.

use super::{Algo, Call, Schedule, Start};
use crate::collective::{self, Plan, Settings};
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::{Ctx, NO_NODE, SimModel};

/// [`Algo::Direct`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Direct;

impl Direct {
    /// Plans the all-to-all of `call`: a block to, and from, every other member.
    pub(super) fn start(call: &Call) -> Start {
        Start {
            algo: Algo::Direct(Direct),
            step_bytes: call.wire(call.bytes.div_ceil(u64::from(call.ring.n))),
            recv_needed: call.ring.n - 1,
        }
    }
}

impl Schedule for Direct {
    /// NCCL runs all-to-all as grouped sends and receives.
    fn net_window(self, settings: &Settings, _: &Plan) -> u64 {
        collective::p2p_window(settings)
    }

    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let Running::Comm(run) = &gpu.running[s] else {
            return;
        };
        let (kind, pos, step_bytes) = (run.group_kind(), run.ring.pos, run.step_bytes);
        let members = model.workload.group(kind, gpu.rank);
        let me = gpu.rank;
        for m in members.into_iter().filter(|&m| m != me) {
            let dst = model.topology.gpu(m);
            gpu.send(model, s, (dst, NO_NODE), step_bytes, s, pos as u16, ctx);
        }
    }

    fn arrive(self, gpu: &mut GpuLp, _: &SimModel, s: usize, _: u16, _: (u64, u64), _: &mut Ctx) {
        if let Running::Comm(run) = &mut gpu.running[s] {
            run.recv_got += 1;
        }
    }
}
