//! Sends and receives between pipeline (or context-parallel) peers, with NCCL's rendezvous:
//! the receiver sends a clear-to-send when its op starts, and the sender's data goes once
//! it arrives; NCCL's point-to-point protocol sets the wire bytes and latency.

use super::{Algo, Schedule};
use crate::collective;
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::layout::GroupKind;
use crate::time::SimTime;
use crate::topology::NodeId;
use crate::workload::{Peer, Stream};
use crate::{Body, Ctx, SimModel, Tag};

/// [`Algo::Send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Sender;

/// [`Algo::Recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Receiver;

impl Schedule for Sender {
    /// The receiver's clear-to-send: the data goes.
    fn arrive(
        self,
        gpu: &mut GpuLp,
        model: &SimModel,
        s: usize,
        _: u16,
        _: (u64, u64),
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &mut gpu.running[s] else {
            return;
        };
        run.waiting_clear_to_send = false;
        let (peer, step_bytes) = (run.peer, run.step_bytes);
        let to = mirror(Stream::ALL[s]).index();
        let via = model.p2p_via(gpu.rank, peer);
        gpu.send(model, s, (peer, via), step_bytes, to, 0, ctx);
    }
}

impl Schedule for Receiver {
    /// The data.
    fn arrive(self, gpu: &mut GpuLp, _: &SimModel, s: usize, _: u16, _: (u64, u64), _: &mut Ctx) {
        if let Running::Comm(run) = &mut gpu.running[s] {
            run.recv_got += 1;
        }
    }
}

impl GpuLp {
    /// Starts send op `op` of `bytes` to `peer` on stream `s`: it waits for the receiver's
    /// clear-to-send (NCCL's rendezvous for `ncclSend`/`ncclRecv`).
    pub(in crate::gpu) fn start_send(
        &mut self,
        model: &SimModel,
        s: usize,
        op: u32,
        (comm_group, seq): (u8, u32),
        (peer, bytes): (Peer, u64),
        ctx: &mut Ctx,
    ) {
        let peer = self.peer(model, peer);
        let (wire, tail_ps) = self.p2p_cost(model, peer, bytes);
        let mut run = self.comm(
            op,
            (comm_group, seq),
            Algo::Send(Sender),
            self.ring_of_peer(),
            wire,
            ctx,
        );
        run.peer = peer;
        run.tail_ps = tail_ps;
        run.net_window = collective::p2p_window(&model.collectives.settings);
        run.waiting_clear_to_send = true;
        self.running[s] = Running::Comm(self.boxed(run));
    }

    /// Starts receive op `op` of `bytes` from `peer` on stream `s`, and tells the sender it
    /// may send.
    pub(in crate::gpu) fn start_recv(
        &mut self,
        model: &SimModel,
        s: usize,
        op: u32,
        (comm_group, seq): (u8, u32),
        (peer, bytes): (Peer, u64),
        ctx: &mut Ctx,
    ) {
        let peer = self.peer(model, peer);
        let (wire, tail_ps) = self.p2p_cost(model, peer, bytes);
        let mut run = self.comm(
            op,
            (comm_group, seq),
            Algo::Recv(Receiver),
            self.ring_of_peer(),
            wire,
            ctx,
        );
        run.peer = peer;
        run.tail_ps = tail_ps;
        run.recv_needed = 1;
        self.running[s] = Running::Comm(self.boxed(run));
        let tag = Tag {
            stream: mirror(Stream::ALL[s]).index() as u8,
            group: comm_group,
            seq,
            step: 0,
        };
        let hash = self.flow_hash(model, peer, tag);
        match self.paths.get(model, self.node, peer, hash) {
            Ok(p) => ctx.emit(
                peer,
                ctx.now + SimTime::from_ps(p.latency_ps),
                Body::ClearToSend { tag },
            ),
            Err(e) => self.fail(e),
        }
    }

    /// Wire bytes and latency of a send to (or receive from) GPU `peer`: NCCL's point-to-point
    /// protocol and efficiency over NVLink or the network; both ends pay the latency.
    fn p2p_cost(&self, model: &SimModel, peer: NodeId, bytes: u64) -> (u64, u64) {
        let topo = &model.topology;
        let across = topo.nccl_node(topo.nodes()[peer as usize].index) != topo.nccl_node(self.rank);
        let arch = model.collectives.arch[usize::from(topo.gpu_type(self.rank))];
        let plan = collective::p2p_plan(arch, bytes, across);
        (
            collective::wire_bytes(bytes, plan.protocol, arch, across),
            plan.latency().as_ps(),
        )
    }

    /// The GPU of `peer`, a neighbour in this rank's pipeline or context-parallel ring.
    fn peer(&mut self, model: &SimModel, peer: Peer) -> NodeId {
        match peer {
            Peer::PpNext => self.ring(model, GroupKind::Pp).next,
            Peer::PpPrev => self.ring(model, GroupKind::Pp).prev,
            Peer::CpNext => self.ring(model, GroupKind::Cp).next,
            Peer::CpPrev => self.ring(model, GroupKind::Cp).prev,
        }
    }
}

/// The receiving stream that matches a sending one.
fn mirror(s: Stream) -> Stream {
    match s {
        Stream::SendNext => Stream::RecvPrev,
        Stream::SendPrev => Stream::RecvNext,
        Stream::RecvPrev => Stream::SendNext,
        Stream::RecvNext => Stream::SendPrev,
        Stream::CpSendNext => Stream::CpRecvPrev,
        Stream::CpRecvPrev => Stream::CpSendNext,
        other => other,
    }
}
