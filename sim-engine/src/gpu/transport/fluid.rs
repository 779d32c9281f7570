//! The flow model's transport (`network.model = "flow"`), for routes with a link that shares
//! its bandwidth max-min among flows: the GPU hands a flow whole to the fabric's flow LP
//! ([`crate::flow`]), which answers with [`Body::FlowDone`] once the receiver has
//! it.

use crate::flow::FlowRequest;
use crate::gpu::GpuLp;
use crate::{Body, Ctx, SimModel};

impl GpuLp {
    /// Flow mode: hands flow `id` whole to the fabric's flow LP, which answers with
    /// [`Body::FlowDone`] once the receiver has it.
    pub(super) fn start_fluid(&mut self, model: &SimModel, id: u32, ctx: &mut Ctx) {
        let Some(Some(f)) = self.flows.get_mut(id as usize) else {
            return;
        };
        let Some(home) = model.flow_home else {
            return self.fail("a transfer crosses shared links but the fabric has no flow LP");
        };
        f.sent = f.total;
        f.sent_any = true;
        f.in_flight = f.total;
        let request = FlowRequest {
            src: self.node,
            dst: f.dst,
            via: f.via,
            flow: id,
            bytes: f.total,
            hash: f.hash,
            tag: f.tag,
            fifo_rate: f.fifo_rate,
            parts: f.parts,
        };
        ctx.emit(home, ctx.now + model.flow_delay, Body::FlowStart(request));
    }

    /// The flow LP delivered flow `id` whole: every byte in flight is acknowledged.
    pub(in crate::gpu) fn fluid_done(&mut self, model: &SimModel, id: u32, ctx: &mut Ctx) {
        if let Some(Some(f)) = self.flows.get(id as usize) {
            let bytes = f.in_flight;
            self.acked(model, id, bytes, false, ctx);
        }
    }
}
