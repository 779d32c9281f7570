//! Broadcast as a chain from the group's first rank, pipelined in n chunks (NCCL's
//! `doc/PERFORMANCE.md`): each rank passes a chunk on to the next as it arrives.

use super::{Algo, Call, Schedule, Start};
use crate::collective::{self, Plan, Protocol, Settings};
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::{Ctx, NO_NODE, SimModel};

/// [`Algo::Chain`]: `chunks` chunks flow down the chain from position 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Chain {
    chunks: u32,
}

impl Chain {
    /// Plans the broadcast of `call`: position 0 sends every chunk, the others receive them.
    pub(super) fn start(call: &Call) -> Start {
        let chunks = call.ring.n;
        let needed = if call.ring.pos == 0 { 0 } else { chunks };
        Start {
            algo: Algo::Chain(Chain { chunks }),
            step_bytes: call.wire(call.bytes.div_ceil(u64::from(call.ring.n))),
            recv_needed: needed,
        }
    }
}

impl Schedule for Chain {
    fn net_window(self, settings: &Settings, plan: &Plan) -> u64 {
        if plan.protocol == Protocol::Simple {
            collective::collective_window(settings, plan.channels)
        } else {
            u64::MAX
        }
    }

    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let Running::Comm(run) = &gpu.running[s] else {
            return;
        };
        let (ring, step_bytes) = (run.ring, run.step_bytes);
        if ring.pos == 0 {
            for c in 0..self.chunks {
                gpu.send(model, s, (ring.next, NO_NODE), step_bytes, s, c as u16, ctx);
            }
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
        let (ring, step_bytes) = (run.ring, run.step_bytes);
        if ring.pos + 1 < ring.n {
            gpu.send(model, s, (ring.next, NO_NODE), step_bytes, s, step, ctx);
        }
    }
}
