//! Connections whose chunks go in order with bounded buffering, as NCCL's FIFO sends them
//! (a tree's links): over the network at most NCCL_STEPS chunks unacknowledged, over
//! analytical links one at a time, so connections sharing a link interleave chunk by chunk.

use std::collections::VecDeque;

use super::Sent;
use crate::collective;
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::time::SimTime;
use crate::topology::NodeId;
use crate::{Body, Ctx, NO_NODE, SimModel, Tag};

/// A connection whose chunks go in order with bounded buffering, as NCCL's FIFO sends
/// them: over the network at most [`collective::NCCL_STEPS`] chunks are unacknowledged
/// (the receiver's slots); over analytical links the next chunk starts when the previous
/// one has left the GPU, so connections sharing a link interleave chunk by chunk.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(in crate::gpu) struct SerialConnection {
    pub(in crate::gpu) stream: u8,
    pub(in crate::gpu) dst: NodeId,
    channel: u16,
    in_flight: u32,
    limit: u32,
    queue: VecDeque<(u64, Tag)>,
}

impl GpuLp {
    /// Queues a chunk of the op on stream `s` for GPU `dst` on connection `channel`: it
    /// starts when the connection has a free slot ([`SerialConnection`]).
    pub(in crate::gpu) fn send_serial(
        &mut self,
        model: &SimModel,
        s: usize,
        dst: NodeId,
        step: u16,
        channel: u16,
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &mut self.running[s] else {
            return;
        };
        let tag = Tag {
            stream: s as u8,
            group: run.group,
            seq: run.seq,
            step,
        };
        run.queued += 1;
        let bytes = run.step_bytes;
        let stream = s as u8;
        let i = match self
            .serial
            .iter()
            .position(|c| c.stream == stream && c.dst == dst && c.channel == channel)
        {
            Some(i) => i,
            None => {
                self.serial.push(SerialConnection {
                    stream,
                    dst,
                    channel,
                    in_flight: 0,
                    limit: 1,
                    queue: VecDeque::new(),
                });
                self.serial.len() - 1
            }
        };
        self.serial[i].queue.push_back((bytes, tag));
        self.serial_pump(model, i, ctx);
    }

    /// Starts the queued chunks of connection `i` while it has room.
    fn serial_pump(&mut self, model: &SimModel, i: usize, ctx: &mut Ctx) {
        loop {
            let conn = &mut self.serial[i];
            if conn.in_flight >= conn.limit {
                return;
            }
            let Some((bytes, tag)) = conn.queue.pop_front() else {
                return;
            };
            let (stream, dst) = (conn.stream, conn.dst);
            if let Running::Comm(run) = &mut self.running[usize::from(stream)] {
                run.queued -= 1;
            }
            let sent = self.transmit(
                model,
                (dst, NO_NODE),
                bytes,
                tag,
                (Some(stream), i as u32),
                ctx,
            );
            match sent {
                Sent::Flow(id) => {
                    if self.flows.get(id as usize).is_some_and(Option::is_some) {
                        let conn = &mut self.serial[i];
                        conn.in_flight += 1;
                        conn.limit = collective::NCCL_STEPS as u32;
                    }
                }
                Sent::Analytical { leaves_ps } if leaves_ps > ctx.now.as_ps() => {
                    let conn = &mut self.serial[i];
                    conn.in_flight += 1;
                    conn.limit = 1;
                    let connection = i as u32;
                    ctx.emit(
                        self.node,
                        SimTime::from_ps(leaves_ps),
                        Body::ConnectionFree { connection },
                    );
                }
                Sent::Analytical { .. } | Sent::Failed => {}
            }
        }
    }

    /// A slot of connection `connection` is free: its next chunk may start.
    pub(in crate::gpu) fn connection_free(
        &mut self,
        model: &SimModel,
        connection: u32,
        ctx: &mut Ctx,
    ) {
        self.serial[connection as usize].in_flight -= 1;
        self.serial_pump(model, connection as usize, ctx);
    }
}
