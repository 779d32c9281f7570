//! The analytical transport, for routes with no queued or shared link: a transfer takes a
//! FIFO share of the GPU's first link and arrives as one message, with no event on the way.
//! Also what closed-form collectives need of the links: when one is free, and their traffic
//! counted per link class.

use super::{PathInfo, Sent, Transfer};
use crate::engine::gpu::program::Running;
use crate::engine::gpu::{COMPUTE, GpuLp};
use crate::engine::net::serialisation_ps;
use crate::engine::{Body, Ctx, SimModel};
use crate::time::{SimTime, ps_per_byte};
use crate::topology::NodeId;

impl GpuLp {
    /// Sends `t` over analytical links: a FIFO share of the first link at the path's
    /// bottleneck bandwidth, or at what NCCL's FIFO sustains across the network when that is
    /// less; it arrives as one message.
    pub(super) fn transmit_analytical(
        &mut self,
        model: &SimModel,
        t: &Transfer,
        ctx: &mut Ctx,
    ) -> Sent {
        let path = &t.path;
        let computing = matches!(self.running[COMPUTE], Running::Compute { .. });
        let i = model
            .topology
            .out_links(self.node)
            .binary_search(&path.first_link)
            .unwrap_or(0);
        let rate = path.bytes_per_s.min(t.fifo_rate);
        let mut ser = serialisation_ps(t.bytes, ps_per_byte(rate));
        if computing {
            ser = crate::time::round_ps(ser as f64 / model.interference.comm_rate);
        }
        let start = ctx.now.as_ps().max(self.link_free_ps[i]);
        self.link_free_ps[i] = start + ser;
        let arrive = start + ser + path.latency_ps;
        self.account_path(path, t.bytes);
        ctx.emit(
            t.dst,
            SimTime::from_ps(arrive),
            Body::Message { tag: t.tag },
        );
        if let Some(s) = t.notify
            && let Running::Comm(run) = &mut self.running[usize::from(s)]
        {
            run.analytical_sends_until = run.analytical_sends_until.max(arrive);
        }
        Sent::Analytical {
            leaves_ps: start + ser,
        }
    }

    /// When this GPU's first link towards `dst` is free of analytical transfers.
    pub(in crate::engine::gpu) fn link_free_toward(
        &mut self,
        model: &SimModel,
        dst: NodeId,
    ) -> u64 {
        let Ok(p) = self.paths.get(model, self.node, dst, 0) else {
            return 0;
        };
        model
            .topology
            .out_links(self.node)
            .binary_search(&p.first_link)
            .map_or(0, |i| self.link_free_ps[i])
    }

    /// Counts `bytes` of closed-form collective traffic on the link classes towards `dst`.
    pub(in crate::engine::gpu) fn account_analytical(
        &mut self,
        model: &SimModel,
        dst: NodeId,
        bytes: u64,
    ) {
        if let Ok(p) = self.paths.get(model, self.node, dst, 0) {
            self.account_path(&p, bytes);
        }
    }

    /// Counts `bytes` sent analytically along `path`: once per link class it crosses, and
    /// once per link it crosses (what links.csv's utilisation needs).
    fn account_path(&mut self, path: &PathInfo, bytes: u64) {
        for (c, hops) in path.class_hops.iter().enumerate() {
            if *hops > 0 {
                self.analytical_bytes[c] += bytes;
                self.analytical_link_bytes[c] += bytes * u64::from(*hops);
            }
        }
    }
}
