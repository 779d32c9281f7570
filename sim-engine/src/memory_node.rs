//! A CXL memory node (HCSim's remote operands, docs/model.md): it serves the reads GPUs send
//! it round-robin, one chunk at a time over its link. Part of the fabric LP of its node
//! ([`super::net::FabricLp`]).

use std::collections::VecDeque;

use super::{Body, Ctx, SimModel, Tag};
use crate::serialisation_ps;
use crate::time::{SimTime, ps_per_byte};
use crate::topology::NodeId;

/// Most turns a CXL transfer takes at its memory node.
const MEMORY_TURNS: u64 = 64;

/// A CXL memory node serves its transfers round-robin, one chunk at a time over its link, the
/// way a memory controller interleaves requests: concurrent transfers share the node's
/// bandwidth fairly (processor sharing at chunk granularity), and none goes faster than the
/// bottleneck of its own path to the GPU. A chunk is `network.segment_bytes`, or 1/64 of the
/// transfer when that is larger ([`MEMORY_TURNS`]): fair to within 1/64 of a transfer, and
/// at most 64 turns (events) per transfer, however large.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct MemoryServer {
    active: VecDeque<Transfer>,
    /// A chunk is on the link until this time (a tick is scheduled for it).
    busy_until: u64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Transfer {
    left: u64,
    gpu: NodeId,
    tag: Tag,
    /// The path's bottleneck and one-way latency to the GPU.
    ps_per_byte: f64,
    latency_ps: u64,
    /// Earliest start of its next chunk (its own path's pace).
    next_ps: u64,
    /// Bytes per turn.
    chunk: u64,
}

impl MemoryServer {
    /// Queues a GPU's read (`Body::MemoryRead`; any other event is not the server's) and
    /// serves it in turn.
    pub(super) fn read(&mut self, model: &SimModel, read: Body, ctx: &mut Ctx) {
        let Body::MemoryRead {
            bytes,
            reply_to,
            tag,
            latency_ps,
            bytes_per_s,
        } = read
        else {
            return;
        };
        self.active.push_back(Transfer {
            left: bytes,
            gpu: reply_to,
            tag,
            ps_per_byte: ps_per_byte(bytes_per_s),
            latency_ps,
            next_ps: ctx.now.as_ps(),
            chunk: bytes
                .div_ceil(MEMORY_TURNS)
                .max(model.net.segment_bytes)
                .max(1),
        });
        if ctx.now.as_ps() >= self.busy_until {
            self.serve_chunk(model, ctx);
        }
    }

    /// Puts the next chunk on the memory node's link: the first transfer in turn whose own
    /// path is ready, else waits for the earliest one.
    pub(super) fn serve_chunk(&mut self, model: &SimModel, ctx: &mut Ctx) {
        if self.active.is_empty() || ctx.now.as_ps() < self.busy_until {
            return;
        }
        let Some(i) = self
            .active
            .iter()
            .position(|t| t.next_ps <= ctx.now.as_ps())
        else {
            let at = self
                .active
                .iter()
                .map(|t| t.next_ps)
                .min()
                .unwrap_or(ctx.now.as_ps());
            self.busy_until = at;
            ctx.emit(ctx.lp, SimTime::from_ps(at), Body::MemoryTick);
            return;
        };
        let Some(mut t) = self.active.remove(i) else {
            return;
        };
        let link = model.topology.out_links(ctx.lp)[0];
        let own = ps_per_byte(model.topology.link(link).bytes_per_s);
        let chunk = t.left.min(t.chunk);
        let done = ctx.now.as_ps() + serialisation_ps(chunk, own);
        t.left -= chunk;
        t.next_ps = ctx.now.as_ps() + serialisation_ps(chunk, t.ps_per_byte);
        if t.left == 0 {
            let arrive = t.next_ps.max(done) + t.latency_ps.max(1);
            ctx.emit(
                t.gpu,
                SimTime::from_ps(arrive),
                Body::Message { tag: t.tag },
            );
        } else {
            self.active.push_back(t);
        }
        self.busy_until = done;
        ctx.emit(ctx.lp, SimTime::from_ps(done), Body::MemoryTick);
    }
}
