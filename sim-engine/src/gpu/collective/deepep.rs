//! DeepEP's or HybridEP's dispatch or combine transfer by transfer ([`crate::collective::deepep`]): each
//! rank sends its tokens for another node once, over the network, to the member there in its
//! own position on that node (its rail), and to every other member of its own node over
//! NVLink what they receive from it and what it forwards to them. The plan's volumes, per
//! destination.

use super::{Algo, Call, Schedule, Start};
use crate::collective::{self, Plan, Settings};
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::layout::GroupKind;
use crate::{Ctx, NO_NODE, SimModel};

/// [`Algo::DeepEp`]: wire bytes to each member of this node and to each rail peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct DeepEp {
    local_bytes: u64,
    remote_bytes: u64,
}

/// `rank`'s group of `kind` by NCCL node, in group order: this rank's position on its node,
/// the index of its node, and every node's members.
fn by_node(model: &SimModel, kind: GroupKind, rank: u32) -> (usize, usize, Vec<Vec<u32>>) {
    let mut nodes: Vec<(u32, Vec<u32>)> = Vec::new();
    for m in model.workload.group(kind, rank) {
        let node = model.topology.nccl_node(m);
        match nodes.iter_mut().find(|(n, _)| *n == node) {
            Some((_, members)) => members.push(m),
            None => nodes.push((node, vec![m])),
        }
    }
    let (mine, pos) = nodes
        .iter()
        .enumerate()
        .find_map(|(i, (_, ms))| ms.iter().position(|&m| m == rank).map(|p| (i, p)))
        .unwrap_or((0, 0));
    (pos, mine, nodes.into_iter().map(|(_, ms)| ms).collect())
}

impl DeepEp {
    /// Plans the op of `call`: the bytes to each member of this node and to each rail peer.
    /// How many transfers arrive here follows from the group's layout, which
    /// [`Schedule::begin`] reads once for its sends and the count alike.
    pub(super) fn start(model: &SimModel, call: &Call) -> Start {
        let Some(flex) = model.collectives.settings.flex else {
            return super::Direct::start(call);
        };
        let v = flex.routing.volumes(call.bytes as f64, &call.shape);
        let wire = |b: f64| call.wire((b.round() as u64).max(1));
        Start {
            algo: Algo::DeepEp(DeepEp {
                local_bytes: wire(v.per_local_peer),
                remote_bytes: wire(v.per_remote_node),
            }),
            step_bytes: 0,
            recv_needed: 0,
        }
    }
}

impl Schedule for DeepEp {
    /// DeepEP moves data with its own kernels over NVSHMEM; bound like NCCL's sends.
    fn net_window(self, settings: &Settings, _: &Plan) -> u64 {
        collective::p2p_window(settings)
    }

    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let Running::Comm(run) = &gpu.running[s] else {
            return;
        };
        let (kind, step) = (run.group_kind(), run.ring.pos as u16);
        let me = gpu.rank;
        let (pos, mine, nodes) = by_node(model, kind, me);
        // From this node's other members, and from the members of other nodes whose rail
        // peer this rank is; set before any send, so nothing completes the op early.
        let here = nodes[mine].len();
        let from_rails: usize = nodes
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != mine)
            .map(|(_, ms)| (0..ms.len()).filter(|j| j % here == pos).count())
            .sum();
        if let Running::Comm(run) = &mut gpu.running[s] {
            run.recv_needed = (here - 1 + from_rails) as u32;
        }
        for (i, members) in nodes.iter().enumerate() {
            if i == mine {
                for &m in members.iter().filter(|&&m| m != me) {
                    let dst = model.topology.gpu(m);
                    gpu.send(model, s, (dst, NO_NODE), self.local_bytes, s, step, ctx);
                }
            } else {
                let peer = members[pos % members.len()];
                let dst = model.topology.gpu(peer);
                gpu.send(model, s, (dst, NO_NODE), self.remote_bytes, s, step, ctx);
            }
        }
    }

    fn arrive(self, gpu: &mut GpuLp, _: &SimModel, s: usize, _: u16, _: (u64, u64), _: &mut Ctx) {
        if let Running::Comm(run) = &mut gpu.running[s] {
            run.recv_got += 1;
        }
    }
}
