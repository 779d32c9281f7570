//! A rank's view of one of its groups ([`GroupInfo`]), computed on first use: its ring
//! position, the shape NCCL plans for (seen from the group's first member, so every member
//! plans alike), whether it completes in closed form, and the links each algorithm builds on
//! it (lane rings, trees, PAT's peers).

use super::RingPos;
use super::closed::closed_leader;
use super::tree::{TreeHop, TreesOf};
use crate::SimModel;
use crate::collective::{Arch, CommShape, ring};
use crate::gpu::GpuLp;
use crate::gpu::transport::{PathCache, PathInfo};
use crate::layout::GroupKind;
use crate::topology::{LinkClass, NodeId};

/// One lane ring's neighbours of this rank: (next, prev, PXN relay).
pub(super) type LaneLinks = (NodeId, NodeId, NodeId);

/// A rank's view of one of its groups, computed once.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(in crate::gpu) struct GroupInfo {
    pub(in crate::gpu) ring: RingPos,
    pub(in crate::gpu) shape: CommShape,
    /// Every member is reached over analytical links only.
    pub(in crate::gpu) closed: bool,
    /// The group's first member, by which the flow LP knows a fluid ring.
    pub(super) leader: NodeId,
    /// Lane rings per lane count asked for: (count, (next, prev, PXN relay) per lane). Two
    /// collectives of one group may run at once on different communicators (an FP8 amax
    /// reduction beside a gradient bucket) with different lane counts.
    pub(super) lanes: Vec<(u32, Vec<LaneLinks>)>,
    /// Both trees of every lane, per (lanes, NVLS-tree) asked for.
    pub(super) trees: Vec<(TreesOf, Vec<[TreeHop; 2]>)>,
    /// PAT's peers at distance 2^k: (position − 2^k, position + 2^k).
    pub(super) pat: Vec<(NodeId, NodeId)>,
    /// One-way latency to a member on this host and to one on another host, ps.
    hop_ps: (u64, u64),
    /// A closed group's messages, with each one's one-way latency: the leader's to every
    /// other member, another member's to the leader.
    pub(super) closed_peers: Vec<(NodeId, u64)>,
    /// This rank gathers the group's arrivals when a collective completes in closed form
    /// ([`closed_leader`]).
    pub(super) gathers: bool,
    /// A closed group's path to `ring.next`: each closed-form collective starts on its
    /// first link, so it is routed once here.
    pub(in crate::gpu) next_path: Option<PathInfo>,
    /// A closed group of at most 127 members that all sit in one NVLink domain (NCCL's
    /// node), in a workload whose programs have at most 2^24 ops: its arrivals may be handed
    /// to the gatherer inline ([`crate::Body::Arrived`]), its answers bundled
    /// ([`crate::derived_family`]).
    pub(super) within_domain: bool,
    /// The group reaches into mirrored replicas ([`crate::symmetry`]).
    pub(super) mirror: Option<Box<Mirror>>,
}

/// A group whose other members mirror this rank ([`crate::symmetry`]): a closed-form
/// collective ends here, with no message, as it ends for the group's last member in the
/// full run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(in crate::gpu) struct Mirror {
    /// The longest member-to-gatherer latency plus the longest gatherer-to-member latency:
    /// the last member hears the answer no earlier than that after the start.
    pub(super) latency_ps: u64,
    /// A GPU this rank reaches over the same kind of first link as each kind of ring hop in
    /// the group: every member is ready when its first link is, whose state this rank's
    /// link of that kind mirrors.
    pub(super) probes: Vec<NodeId>,
    pub(super) members: u32,
    /// Per link class: how many members' paths to their ring neighbour cross it, and over
    /// how many links of it in all (what the full run counts of the group's traffic).
    pub(super) crosses: [u32; 4],
    pub(super) link_hops: [u32; 4],
    /// A hash of the members: another kind of group with the same members (data-parallel,
    /// with context parallelism, of the experts, when CP and EP are 1) shares this.
    members_key: u64,
}

impl GpuLp {
    /// The ring of a send or receive: two ranks, this one first, with this GPU standing in
    /// for its neighbours.
    pub(super) fn ring_of_peer(&self) -> RingPos {
        RingPos {
            pos: 0,
            n: 2,
            next: self.node,
            prev: self.node,
        }
    }

    /// This rank's position and ring neighbours in its group of `kind`.
    pub(super) fn ring(&mut self, model: &SimModel, kind: GroupKind) -> RingPos {
        self.group_info(model, kind)
            .map_or_else(|| self.ring_of_peer(), |g| g.0)
    }

    /// This rank's view of its group of `kind` (computed once): ring neighbours, the shape
    /// the collective model plans for, and whether every member is reached over analytical
    /// links. `None` after a routing failure (recorded).
    pub(super) fn group_info(
        &mut self,
        model: &SimModel,
        kind: GroupKind,
    ) -> Option<(RingPos, CommShape, bool)> {
        if let Some(g) = &self.groups[kind as usize] {
            return Some((g.ring, g.shape, g.closed));
        }
        let topo = &model.topology;
        let members = model.workload.group(kind, self.rank);
        let n = members.len() as u32;
        let pos = members.iter().position(|&m| m == self.rank).unwrap_or(0) as u32;
        let ring = RingPos {
            pos,
            n,
            next: topo.gpu(members[((pos + 1) % n) as usize]),
            prev: topo.gpu(members[((pos + n - 1) % n) as usize]),
        };
        // NCCL's node: the host, or a multi-host NVLink domain.
        let node = |r: u32| topo.nccl_node(r);
        let (nodes, ppn) = ring::spread(&members, node);
        // Every member must plan alike (NCCL tunes from one shared view of the topology), so
        // the shape is seen from the group's first member, whatever this rank's own paths.
        let first = members[0];
        let home = node(first);
        let same = members
            .windows(2)
            .find(|w| node(w[0]) == node(w[1]))
            .map(|w| (w[0], w[1]));
        let other = members.iter().copied().find(|&m| node(m) != home);
        let mixed = model.gpu_types > 1;
        // Mixed generations tune with the oldest (NCCL's minCompCap).
        let arch_of = |m: u32| model.collectives.arch[usize::from(topo.gpu_type(m))];
        let arch = if mixed {
            members
                .iter()
                .map(|&m| arch_of(m))
                .min()
                .unwrap_or(Arch::Volta)
        } else {
            arch_of(first)
        };
        let mut shape = CommShape {
            ranks: n,
            nodes,
            ranks_per_node: ppn,
            arch,
            nvlink: false,
            nvswitch: false,
            intra_bytes_per_s: 0.0,
            nic_bytes_per_s: 0.0,
            nics_per_node: model.collectives.nics_per_host.max(1) * topo.hosts_per_nccl_node(),
            coherent: false,
            coherent_hop_us: 0.0,
        };
        let mut closed = true;
        let mut hop_ps = (0, 0);
        let path =
            |paths: &mut PathCache, a: u32, b: u32| paths.get(model, topo.gpu(a), topo.gpu(b), 0);
        if let Some((a, b)) = same {
            let p = match path(&mut self.paths, a, b) {
                Ok(p) => p,
                Err(e) => return self.fail_none(e),
            };
            closed &= !(p.queued || p.shared);
            hop_ps.0 = p.latency_ps;
            shape.intra_bytes_per_s = p.bytes_per_s;
            shape.nvlink = p.crosses(LinkClass::NvLink);
            shape.nvswitch = shape.nvlink && p.hops == 2;
            if mixed {
                // The slowest host's scale-up link bounds the group.
                for w in members.windows(2).filter(|w| node(w[0]) == node(w[1])) {
                    match path(&mut self.paths, w[0], w[1]) {
                        Ok(q) => {
                            shape.intra_bytes_per_s = shape.intra_bytes_per_s.min(q.bytes_per_s)
                        }
                        Err(e) => return self.fail_none(e),
                    }
                }
            }
        }
        if let Some(o) = other {
            let p = match path(&mut self.paths, first, o) {
                Ok(p) => p,
                Err(e) => return self.fail_none(e),
            };
            closed &= !(p.queued || p.shared);
            hop_ps.1 = p.latency_ps;
            shape.nic_bytes_per_s = p.bytes_per_s;
            if model.collectives.cxl_fabric {
                // Some hosts may sit behind the first member's CXL switch and others beyond
                // the network: look at every host once. The group is coherent if all are
                // behind the switch, closed if no path to any of them is queued.
                let cxl =
                    |p: &PathInfo| p.crosses(LinkClass::Cxl) && !p.crosses(LinkClass::Network);
                let mut seen = vec![home];
                let mut coherent = true;
                for &m in &members {
                    let h = node(m);
                    if seen.contains(&h) {
                        continue;
                    }
                    seen.push(h);
                    match path(&mut self.paths, first, m) {
                        Ok(q) => {
                            closed &= !(q.queued || q.shared);
                            coherent &= cxl(&q);
                        }
                        Err(e) => return self.fail_none(e),
                    }
                }
                if coherent {
                    shape.coherent = true;
                    shape.nics_per_node = ppn;
                    shape.coherent_hop_us = hop_ps.1 as f64 * 1e-6;
                }
            }
        }
        let leader = topo.gpu(members[0]);
        let gatherer = members[closed_leader(&members)];
        let mirrored = members.iter().any(|&m| !model.workload.is_rank(m));
        let mirror = if mirrored {
            match self.mirror_of(model, kind, &members, gatherer, closed) {
                Ok(m) => Some(m),
                Err(e) => return self.fail_none(e),
            }
        } else {
            None
        };
        let is_gatherer = gatherer == self.rank && !mirrored;
        let mut closed_peers = Vec::new();
        if closed && !mirrored {
            let peers: Vec<u32> = if is_gatherer {
                members.iter().copied().filter(|&m| m != gatherer).collect()
            } else {
                vec![gatherer]
            };
            for m in peers {
                match path(&mut self.paths, self.rank, m) {
                    Ok(p) => closed_peers.push((topo.gpu(m), p.latency_ps)),
                    Err(e) => return self.fail_none(e),
                }
            }
        }
        let next_path = match closed && !mirrored {
            true => self.paths.get(model, self.node, ring.next, 0).ok(),
            false => None,
        };
        self.groups[kind as usize] = Some(Box::new(GroupInfo {
            ring,
            shape,
            closed,
            leader,
            lanes: Vec::new(),
            trees: Vec::new(),
            pat: Vec::new(),
            hop_ps,
            closed_peers,
            gathers: is_gatherer,
            next_path,
            // Its answers' keys tell up to 127 members and 2^24 ops apart
            // (`closed::answer_key`).
            within_domain: closed
                && !mirrored
                && nodes == 1
                && n > 1
                && n <= 127
                && model
                    .workload
                    .programs
                    .iter()
                    .all(|p| p.ops.len() <= super::closed::OPS_ANSWERED_DERIVED as usize),
            mirror,
        }));
        Some((ring, shape, closed))
    }

    /// This rank's [`Mirror`] of group `kind` (`members`, gathered by `gatherer` in the full
    /// run): another kind's when its members are the same, else worked out from the routes
    /// of every member. `Err` says why the group cannot be mirrored.
    fn mirror_of(
        &mut self,
        model: &SimModel,
        kind: GroupKind,
        members: &[u32],
        gatherer: u32,
        closed: bool,
    ) -> Result<Box<Mirror>, String> {
        let members_key = members.iter().fold(members.len() as u64, |h, &m| {
            crate::hash::mix(h, u64::from(m), 0)
        });
        let same_members = self
            .groups
            .iter()
            .flatten()
            .filter_map(|g| g.mirror.as_ref())
            .find(|m| m.members_key == members_key);
        if let Some(found) = same_members {
            return Ok(found.clone());
        }
        if !closed {
            return Err(format!(
                "the {} group reaches mirrored replicas over links that are not analytical (engine.symmetry = \"off\" runs every rank)",
                kind.name()
            ));
        }
        let topo = &model.topology;
        let (mut crosses, mut link_hops) = ([0u32; 4], [0u32; 4]);
        for (i, &m) in members.iter().enumerate() {
            let next = members[(i + 1) % members.len()];
            let p = self
                .paths
                .once(model, topo.gpu(m), topo.gpu(next))
                .map_err(|e| e.to_string())?;
            for (c, &h) in p.class_hops.iter().enumerate() {
                crosses[c] += u32::from(h > 0);
                link_hops[c] += u32::from(h);
            }
        }
        let (mut to_gatherer, mut from_gatherer) = (0, 0);
        for &m in members.iter().filter(|&&m| m != gatherer) {
            let (a, b) = (topo.gpu(m), topo.gpu(gatherer));
            let there = self.paths.once(model, a, b).map_err(|e| e.to_string())?;
            let back = self.paths.once(model, b, a).map_err(|e| e.to_string())?;
            to_gatherer = to_gatherer.max(there.latency_ps);
            from_gatherer = from_gatherer.max(back.latency_ps);
        }
        let node = |r: u32| topo.nccl_node(r);
        let hops = crate::symmetry::mirror_hops(members, self.rank, node).ok_or_else(|| {
            format!(
                "rank {} cannot stand for its mirrors' {} ring hops",
                self.rank,
                kind.name()
            )
        })?;
        Ok(Box::new(Mirror {
            latency_ps: to_gatherer + from_gatherer,
            probes: hops.into_iter().map(|(m, _)| topo.gpu(m)).collect(),
            members: members.len() as u32,
            crosses,
            link_hops,
            members_key,
        }))
    }

    /// One-way latency to a member of group `kind` on this host and on another host, ps.
    pub(super) fn hop_latencies(&self, kind: GroupKind) -> (u64, u64) {
        self.groups[kind as usize]
            .as_ref()
            .map_or((0, 0), |g| g.hop_ps)
    }
}
