//! Routing from structure: which links a flow takes, hop by hop, without per-destination tables.
//!
//! Endpoints are GPUs and memory nodes; every other node forwards. For a flow `src → dst` in a
//! generated topology the route is, in order of preference:
//!
//! 1. same NVLink domain → NVLink: GPU → NVSwitch → GPU, or the direct mesh link;
//! 2. same host without NVLink → PCIe: GPU → PCIe switch → (CPU → PCIe switch, when the two
//!    GPUs sit under different switches) → GPU;
//! 3. same CXL switch (a memory node at either end, or GPUs of different hosts or domains that
//!    share a CXL switch) → CXL: endpoint → CXL switch → endpoint. A memory node is unreachable
//!    from outside its CXL switch ([`RoutingError::Unreachable`]);
//! 4. otherwise the network: source GPU → (PCIe) → the NIC the GPU is bound to (NCCL binds a
//!    GPU to its nearest NIC, `src/graph/paths.cc` `ncclTopoGetLocalNet`; this rail affinity is what a
//!    rail-optimised fabric is built for) → up/down through the Clos → the destination GPU's NIC
//!    → (PCIe) → destination GPU. Up/down (Al-Fares et al., SIGCOMM'08 §3: up to any core,
//!    then the one way down): the source NIC spreads over its ports (planes or ToRs); a leaf that holds a port
//!    of the destination NIC goes down to it, otherwise up to every spine of its pod and plane;
//!    a spine of the destination's pod goes down to the leaves (of its plane) holding the
//!    destination NIC's ports, otherwise up to every core of its group; a core goes down to the
//!    spine of its group in the destination's pod.
//!
//! Every choice is computed from node coordinates (host block offsets, switch plane/pod/index)
//! in O(degree of the NIC) per hop. Equal-cost choices are returned in ascending link id order;
//! [`Topology::path`] picks among them with a SplitMix64 hash of the flow hash and hop index.
//!
//! Explicit graphs use shortest paths in which GPUs and memory nodes never forward: one BFS
//! distance array per destination, computed on first use and cached, so memory grows only with
//! the destinations actually used.

use std::collections::VecDeque;
use std::sync::OnceLock;

use super::clos::{FabricLayout, SwitchCoord};
use super::host::{CxlLayout, DomainFabric, HostLayout, ScaleUpLayout};
use super::{LinkClass, LinkId, NodeId, NodeKind, Topology};
use crate::hash::splitmix64;

/// Why no route could be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    #[error("node {node} does not exist (the topology has {count} nodes)")]
    UnknownNode { node: NodeId, count: u32 },
    #[error("node {node} is a {kind:?}; flows start and end at GPUs and memory nodes")]
    NotEndpoint { node: NodeId, kind: NodeKind },
    #[error("no route from node {src} to node {dst}: {reason}")]
    Unreachable {
        src: NodeId,
        dst: NodeId,
        reason: &'static str,
    },
    #[error("node {at} ({kind:?}) is not on any route from node {src} to node {dst}")]
    NotOnPath {
        at: NodeId,
        kind: NodeKind,
        src: NodeId,
        dst: NodeId,
    },
}

/// The routing structure of a topology.
#[derive(Debug)]
pub(crate) enum Routing {
    Structured(Box<Structured>),
    Graph(GraphRoutes),
}

/// Coordinates of a generated topology; enough to route arithmetically.
#[derive(Debug)]
pub(crate) struct Structured {
    pub hosts: HostLayout,
    pub scale_up: ScaleUpLayout,
    pub cxl: Option<CxlLayout>,
    pub fabric: FabricLayout,
}

/// Cached shortest-path distances for explicit graphs.
#[derive(Debug)]
pub(crate) struct GraphRoutes {
    /// Per node: its endpoint index (GPU or memory node), or `u32::MAX`.
    endpoint_of: Vec<u32>,
    /// Per endpoint: hops from every node to it, computed on first use.
    dist: Vec<OnceLock<Box<[u32]>>>,
}

const FAR: u32 = u32::MAX;

/// More hops than any route of a generated topology takes (GPU, PCIe, NIC, three switch
/// tiers up and down, NIC, PCIe, GPU).
const MAX_HOPS: u32 = 16;

/// The route class of a flow in a generated topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    NvSwitch(NodeId),
    Mesh,
    Pcie,
    Cxl(NodeId),
    Network,
}

/// The equal-cost hop a flow with `flow_hash` takes as its `hop`-th link:
/// `splitmix64(flow_hash ^ splitmix64(hop))`, so independent flows spread over ECMP paths and
/// one flow keeps one path (no reordering). `None` when `hops` is empty.
pub fn ecmp_pick(flow_hash: u64, hop: u32, hops: &[LinkId]) -> Option<LinkId> {
    let h = splitmix64(flow_hash ^ splitmix64(u64::from(hop)));
    // Lemire's multiply-shift maps the hash onto [0, n) without a division.
    let pick = ((u128::from(h) * hops.len() as u128) >> 64) as usize;
    hops.get(pick).copied()
}

impl Topology {
    /// Equal-cost next links from `at` for a flow `src → dst` (GPUs or memory nodes), in
    /// ascending id order; empty when `at == dst`. The policy is in the module documentation.
    pub fn next_hops(
        &self,
        at: NodeId,
        src: NodeId,
        dst: NodeId,
        out: &mut Vec<LinkId>,
    ) -> Result<(), RoutingError> {
        self.next_hops_avoiding(at, src, dst, out, None)
    }

    /// [`Topology::next_hops`], avoiding as well the links `also_down` says are down (link
    /// faults that start mid-iteration, which the engine knows by the time).
    pub fn next_hops_avoiding(
        &self,
        at: NodeId,
        src: NodeId,
        dst: NodeId,
        out: &mut Vec<LinkId>,
        also_down: Option<&dyn Fn(LinkId) -> bool>,
    ) -> Result<(), RoutingError> {
        out.clear();
        self.check_endpoint(src)?;
        self.check_endpoint(dst)?;
        self.check_node(at)?;
        if at == dst {
            return Ok(());
        }
        self.equal_cost_hops(at, src, dst, out)?;
        // Graph routing's distances already leave out the cables that are down.
        let static_down = self.has_down_cables() && matches!(self.routing, Routing::Structured(_));
        if (static_down || also_down.is_some()) && !out.is_empty() {
            let down = |l: LinkId| self.is_down(l) || also_down.is_some_and(|d| d(l));
            // A fabric's ECMP groups shrink to the hops that still reach `dst`.
            // Graph routes only step closer to `dst`, so their length bounds the search.
            let hops = match self.routing {
                Routing::Structured(_) => MAX_HOPS,
                Routing::Graph(_) => self.nodes.len() as u32,
            };
            out.retain(|&l| !down(l) && self.reaches(self.link_dst(l), src, dst, &down, hops));
            if out.is_empty() {
                return Err(RoutingError::Unreachable {
                    src,
                    dst,
                    reason: "every path between them crosses a link that is down ([[faults]]); \
                             the job stops, as NCCL's does on a transport error",
                });
            }
        }
        Ok(())
    }

    /// The next hops routing's structure gives, before any fault.
    fn equal_cost_hops(
        &self,
        at: NodeId,
        src: NodeId,
        dst: NodeId,
        out: &mut Vec<LinkId>,
    ) -> Result<(), RoutingError> {
        match &self.routing {
            Routing::Structured(s) => s.next_hops(self, at, src, dst, out),
            Routing::Graph(g) => g.next_hops(self, at, src, dst, out),
        }
    }

    /// Whether a flow `src → dst` at `at` can still reach `dst` over links that are not
    /// `down`, in at most `hops` more hops.
    fn reaches(
        &self,
        at: NodeId,
        src: NodeId,
        dst: NodeId,
        down: &dyn Fn(LinkId) -> bool,
        hops: u32,
    ) -> bool {
        if at == dst {
            return true;
        }
        let mut next = Vec::new();
        hops > 0
            && self.equal_cost_hops(at, src, dst, &mut next).is_ok()
            && next
                .iter()
                .any(|&l| !down(l) && self.reaches(self.link_dst(l), src, dst, down, hops - 1))
    }

    /// The whole route of a flow, choosing among equal-cost hops by
    /// `splitmix64(flow_hash ^ splitmix64(hop))`: deterministic, and independent flows spread
    /// over ECMP paths.
    pub fn path(
        &self,
        src: NodeId,
        dst: NodeId,
        flow_hash: u64,
    ) -> Result<Vec<LinkId>, RoutingError> {
        let mut path = Vec::with_capacity(12);
        self.path_into(src, dst, flow_hash, &mut path, &mut Vec::with_capacity(8))?;
        Ok(path)
    }

    /// [`Topology::path`] into caller-owned buffers (`hops` is scratch). Returns whether the
    /// route had a single choice at every hop, i.e. is the same for every flow hash.
    pub fn path_into(
        &self,
        src: NodeId,
        dst: NodeId,
        flow_hash: u64,
        path: &mut Vec<LinkId>,
        hops: &mut Vec<LinkId>,
    ) -> Result<bool, RoutingError> {
        path.clear();
        let mut single_choice = true;
        let mut at = src;
        // Checks src and dst even for an empty path.
        self.next_hops(at, src, dst, hops)?;
        while at != dst {
            if path.len() > self.nodes.len() {
                return Err(RoutingError::Unreachable {
                    src,
                    dst,
                    reason: "routing loop",
                });
            }
            if !path.is_empty() {
                self.next_hops(at, src, dst, hops)?;
            }
            single_choice &= hops.len() <= 1;
            let Some(l) = ecmp_pick(flow_hash, path.len() as u32, hops) else {
                return Err(RoutingError::Unreachable {
                    src,
                    dst,
                    reason: "no next hop",
                });
            };
            path.push(l);
            at = self.link_dst(l);
        }
        Ok(single_choice)
    }

    fn check_node(&self, n: NodeId) -> Result<NodeKind, RoutingError> {
        self.nodes
            .get(n as usize)
            .map(|node| node.kind)
            .ok_or(RoutingError::UnknownNode {
                node: n,
                count: self.nodes.len() as u32,
            })
    }

    fn check_endpoint(&self, n: NodeId) -> Result<(), RoutingError> {
        let kind = self.check_node(n)?;
        if kind.is_endpoint() {
            Ok(())
        } else {
            Err(RoutingError::NotEndpoint { node: n, kind })
        }
    }

    fn kind(&self, n: NodeId) -> NodeKind {
        self.nodes[n as usize].kind
    }

    /// The link `a → b`, looked up from the side with fewer links (the reverse of `b → a` is
    /// `(b → a) ^ 1`).
    fn link_between(&self, a: NodeId, b: NodeId) -> Option<LinkId> {
        let (from_a, from_b) = (self.out_links(a), self.out_links(b));
        if from_a.len() <= from_b.len() {
            from_a.iter().copied().find(|&l| self.link_dst(l) == b)
        } else {
            from_b
                .iter()
                .copied()
                .find(|&l| self.link_dst(l) == a)
                .map(|l| l ^ 1)
        }
    }

    /// A NIC's network links and their far ends (routing asks this for every segment at
    /// every switch): a NIC has a handful of links, each read from its cable.
    fn network_links(&self, nic: NodeId) -> impl Iterator<Item = (LinkId, NodeId)> + '_ {
        self.out_links(nic)
            .iter()
            .filter(|&&l| self.link_class(l) == LinkClass::Network)
            .map(|&l| (l, self.link_dst(l)))
    }
}

fn missing(src: NodeId, dst: NodeId) -> RoutingError {
    RoutingError::Unreachable {
        src,
        dst,
        reason: "the topology lacks a link its structure implies",
    }
}

impl Structured {
    fn classify(&self, t: &Topology, src: NodeId, dst: NodeId) -> Result<Route, RoutingError> {
        let (s, d) = (t.nodes[src as usize], t.nodes[dst as usize]);
        let cxl_switch = |n: &super::Node| -> Option<NodeId> {
            let cxl = self.cxl.as_ref()?;
            Some(match n.kind {
                NodeKind::MemoryNode => cxl.switch_of_memory(n.index),
                _ => cxl.switch_of_host(n.host),
            })
        };
        if s.kind == NodeKind::Gpu && d.kind == NodeKind::Gpu {
            let domain = s.index / self.scale_up.domain_size;
            if domain == d.index / self.scale_up.domain_size {
                match self.scale_up.fabric[domain as usize] {
                    DomainFabric::NvSwitch => {
                        return Ok(Route::NvSwitch(self.scale_up.nvswitch[domain as usize]));
                    }
                    DomainFabric::Mesh => return Ok(Route::Mesh),
                    DomainFabric::None => {}
                }
            }
            if s.host == d.host {
                return Ok(Route::Pcie);
            }
        }
        match (cxl_switch(&s), cxl_switch(&d)) {
            (Some(a), Some(b)) if a == b => Ok(Route::Cxl(a)),
            _ if s.kind == NodeKind::MemoryNode || d.kind == NodeKind::MemoryNode => {
                Err(RoutingError::Unreachable {
                    src,
                    dst,
                    reason: "a memory node is reached only through its own CXL switch",
                })
            }
            _ => Ok(Route::Network),
        }
    }

    fn next_hops(
        &self,
        t: &Topology,
        at: NodeId,
        src: NodeId,
        dst: NodeId,
        out: &mut Vec<LinkId>,
    ) -> Result<(), RoutingError> {
        let not_on_path = || RoutingError::NotOnPath {
            at,
            kind: t.kind(at),
            src,
            dst,
        };
        let one = |out: &mut Vec<LinkId>, a: NodeId, b: NodeId| -> Result<(), RoutingError> {
            out.push(t.link_between(a, b).ok_or_else(|| missing(src, dst))?);
            Ok(())
        };
        match self.classify(t, src, dst)? {
            Route::NvSwitch(sw) if at == src => one(out, src, sw),
            Route::NvSwitch(sw) if at == sw => one(out, sw, dst),
            Route::Mesh if at == src => one(out, src, dst),
            Route::Cxl(sw) if at == src => one(out, src, sw),
            Route::Cxl(sw) if at == sw => one(out, sw, dst),
            Route::Pcie => {
                let node = t.nodes[at as usize];
                let on_path = match node.kind {
                    NodeKind::Gpu => at == src,
                    NodeKind::PcieSwitch | NodeKind::Cpu => node.host == t.nodes[src as usize].host,
                    _ => false,
                };
                if !on_path {
                    return Err(not_on_path());
                }
                self.pcie_step(t, at, dst, out)
                    .map_err(|()| missing(src, dst))
            }
            Route::Network => {
                let (src_host, dst_host) = (t.nodes[src as usize].host, t.nodes[dst as usize].host);
                let nic_src = self.nic_of_gpu(src);
                let nic_dst = self.nic_of_gpu(dst);
                let node = t.nodes[at as usize];
                match node.kind {
                    NodeKind::Gpu if at == src => self
                        .pcie_step(t, at, nic_src, out)
                        .map_err(|()| missing(src, dst)),
                    NodeKind::Nic if at == nic_src => {
                        out.extend(t.network_links(at).map(|(l, _)| l));
                        Ok(())
                    }
                    NodeKind::Nic if at == nic_dst => self
                        .pcie_step(t, at, dst, out)
                        .map_err(|()| missing(src, dst)),
                    NodeKind::PcieSwitch | NodeKind::Cpu if node.host == src_host => self
                        .pcie_step(t, at, nic_src, out)
                        .map_err(|()| missing(src, dst)),
                    NodeKind::PcieSwitch | NodeKind::Cpu if node.host == dst_host => self
                        .pcie_step(t, at, dst, out)
                        .map_err(|()| missing(src, dst)),
                    NodeKind::Leaf | NodeKind::Spine | NodeKind::Core => {
                        self.fabric_step(t, at, nic_dst, out, src, dst)
                    }
                    _ => Err(not_on_path()),
                }
            }
            _ => Err(not_on_path()),
        }
    }

    fn nic_of_gpu(&self, gpu: NodeId) -> NodeId {
        let (h, g) = self.hosts.split(gpu);
        self.hosts.nic(h, self.hosts.nic_of_gpu(g))
    }

    /// One PCIe hop from `at` (a GPU, NIC, PCIe switch or CPU) towards `target` (a GPU or NIC
    /// of the same host): up to the switch, across the CPU when the switches differ, down.
    fn pcie_step(
        &self,
        t: &Topology,
        at: NodeId,
        target: NodeId,
        out: &mut Vec<LinkId>,
    ) -> Result<(), ()> {
        let to_switch = self.hosts.switch_above(target);
        let next = match t.kind(at) {
            NodeKind::Gpu | NodeKind::Nic => self.hosts.switch_above(at),
            NodeKind::PcieSwitch if at == to_switch => target,
            NodeKind::PcieSwitch => self.hosts.cpu(self.hosts.split(at).0),
            NodeKind::Cpu => to_switch,
            _ => return Err(()),
        };
        out.push(t.link_between(at, next).ok_or(())?);
        Ok(())
    }

    fn fabric_step(
        &self,
        t: &Topology,
        at: NodeId,
        nic_dst: NodeId,
        out: &mut Vec<LinkId>,
        src: NodeId,
        dst: NodeId,
    ) -> Result<(), RoutingError> {
        let c = self.fabric.coord(at);
        let up = |out: &mut Vec<LinkId>, c: SwitchCoord| -> Result<(), RoutingError> {
            // A contiguous run of the ascending out-list: sorted and unique already.
            let ups = &t.out_links(at)[c.down as usize..];
            if ups.is_empty() {
                return Err(missing(src, dst));
            }
            out.extend_from_slice(ups);
            Ok(())
        };
        match t.kind(at) {
            NodeKind::Leaf => {
                // Down when this leaf holds a port of the destination NIC (the reverse of the
                // NIC's port link), else up to every spine.
                out.extend(
                    t.network_links(nic_dst)
                        .filter(|&(_, leaf)| leaf == at)
                        .map(|(l, _)| l ^ 1),
                );
                if out.is_empty() {
                    return up(out, c);
                }
            }
            NodeKind::Spine => {
                for (_, leaf) in t.network_links(nic_dst) {
                    let lc = self.fabric.coord(leaf);
                    if lc.plane == c.plane && lc.pod == c.pod {
                        // The leaf's j-th up-link goes to spine j of its pod (clos.rs id order).
                        let Some(&l_up) = t.out_links(leaf).get((lc.down + c.j) as usize) else {
                            return Err(missing(src, dst));
                        };
                        debug_assert_eq!(t.link_dst(l_up), at);
                        out.push(l_up ^ 1);
                    }
                }
                if out.is_empty() {
                    return up(out, c);
                }
            }
            NodeKind::Core => {
                let pod = t
                    .network_links(nic_dst)
                    .map(|(_, leaf)| self.fabric.coord(leaf))
                    .find(|lc| lc.plane == c.plane)
                    .map(|lc| lc.pod)
                    .ok_or_else(|| missing(src, dst))?;
                // A core's out-link p goes to its group's spine in pod p (clos.rs id order).
                let l = *t
                    .out_links(at)
                    .get(pod as usize)
                    .ok_or_else(|| missing(src, dst))?;
                out.push(l);
            }
            _ => return Err(missing(src, dst)),
        }
        // Down-links: parallel ports of one NIC on one leaf give the same spine→leaf link twice.
        out.sort_unstable();
        out.dedup();
        Ok(())
    }
}

impl GraphRoutes {
    pub fn new(kinds: impl Iterator<Item = NodeKind>) -> Self {
        let mut count = 0u32;
        let endpoint_of = kinds
            .map(|kind| {
                if kind.is_endpoint() {
                    count += 1;
                    count - 1
                } else {
                    FAR
                }
            })
            .collect();
        GraphRoutes {
            endpoint_of,
            dist: (0..count).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Drops the distances computed so far: a cable went down.
    pub fn forget_distances(&mut self) {
        for d in &mut self.dist {
            d.take();
        }
    }

    /// Hops from every node to `dst` over paths whose inner nodes are not endpoints.
    pub fn distances<'a>(&'a self, t: &Topology, dst: NodeId) -> &'a [u32] {
        let e = self.endpoint_of[dst as usize] as usize;
        self.dist[e].get_or_init(|| {
            let mut dist = vec![FAR; t.nodes.len()].into_boxed_slice();
            let mut queue = VecDeque::new();
            dist[dst as usize] = 0;
            queue.push_back(dst);
            while let Some(v) = queue.pop_front() {
                // Endpoints are reached but never pass a flow on.
                if v != dst && self.endpoint_of[v as usize] != FAR {
                    continue;
                }
                // Cables are symmetric: a neighbour u reaches v over the reverse of v → u.
                for &l in t.out_links(v) {
                    if t.is_down(l) {
                        continue;
                    }
                    let u = t.link_dst(l);
                    if dist[u as usize] == FAR {
                        dist[u as usize] = dist[v as usize] + 1;
                        queue.push_back(u);
                    }
                }
            }
            dist
        })
    }

    fn next_hops(
        &self,
        t: &Topology,
        at: NodeId,
        src: NodeId,
        dst: NodeId,
        out: &mut Vec<LinkId>,
    ) -> Result<(), RoutingError> {
        if at != src && self.endpoint_of[at as usize] != FAR {
            return Err(RoutingError::NotOnPath {
                at,
                kind: t.kind(at),
                src,
                dst,
            });
        }
        let dist = self.distances(t, dst);
        let here = dist[at as usize];
        if here == FAR {
            return Err(RoutingError::Unreachable {
                src,
                dst,
                reason: if t.has_down_cables() {
                    "no path in the graph file that avoids other GPUs, memory nodes and links that are \
                     down ([[faults]]); the job stops, as NCCL's does on a transport error"
                } else {
                    "no path in the graph file that avoids passing through other GPUs or memory nodes"
                },
            });
        }
        out.extend(t.out_links(at).iter().copied().filter(|&l| {
            let v = t.link_dst(l);
            // `here ≥ 1`: `at != dst`.
            dist[v as usize] == here - 1 && (v == dst || self.endpoint_of[v as usize] == FAR)
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::testutil::*;
    use super::super::*;

    fn mid() -> Topology {
        // 256 GPUs, 4 pods, dual-plane: every kind of hop.
        build_toml(
            "gpus = 256\nnic_ports = 2\ndual_plane = true\nhosts_per_segment = 4\nsegments_per_pod = 2\n",
            &[h100()],
            None,
        )
    }

    #[test]
    fn routes_avoid_cables_that_are_down_and_fail_when_none_is_left() {
        let mut t = mid();
        let (src, dst) = (t.gpu(0), t.gpu(255));
        let hashes = 0..64u64;
        let before: Vec<Vec<LinkId>> = hashes
            .clone()
            .map(|h| t.path(src, dst, h).unwrap())
            .collect();
        // The cable some route takes up out of the first leaf, and one down from the far spine.
        let up = before[0][3];
        let down_from_spine = before[1][before[1].len() - 4];
        t.set_cable_down(up / 2);
        t.set_cable_down(down_from_spine / 2);
        for (h, old) in hashes.clone().zip(&before) {
            let path = t.path(src, dst, h).unwrap();
            assert_eq!(path.len(), old.len(), "a detour: hash {h}");
            assert!(path.iter().all(|&l| !t.is_down(l)), "hash {h}: {path:?}");
            // Still a walk from src to dst.
            assert_eq!(t.link(path[0]).src, src);
            assert_eq!(t.link(*path.last().unwrap()).dst, dst);
            assert!(
                path.windows(2)
                    .all(|w| t.link(w[0]).dst == t.link(w[1]).src)
            );
        }
        // Every network cable of the source's NIC down: nothing is left.
        let nic = before[0]
            .iter()
            .map(|&l| t.link(l).src)
            .find(|&n| t.nodes()[n as usize].kind == NodeKind::Nic)
            .unwrap();
        for l in t.out_links(nic).to_vec() {
            if t.link(l).class == LinkClass::Network {
                t.set_cable_down(l / 2);
            }
        }
        let err = t.path(src, dst, 0).unwrap_err();
        assert!(
            err.to_string().contains("crosses a link that is down"),
            "{err}"
        );
    }

    #[test]
    fn errors_for_bad_nodes() {
        let t = build_toml("gpus = 16\n", &[h100()], None);
        let nic = (0..t.nodes().len() as u32)
            .find(|&n| t.nodes()[n as usize].kind == NodeKind::Nic)
            .unwrap();
        assert!(matches!(
            t.path(t.gpu(0), nic, 0),
            Err(RoutingError::NotEndpoint { .. })
        ));
        assert!(matches!(
            t.path(t.gpu(0), 1 << 30, 0),
            Err(RoutingError::UnknownNode { .. })
        ));
        let mut hops = vec![7];
        // A third GPU does not forward.
        assert!(matches!(
            t.next_hops(t.gpu(2), t.gpu(0), t.gpu(9), &mut hops),
            Err(RoutingError::NotOnPath { .. })
        ));
        t.next_hops(t.gpu(9), t.gpu(0), t.gpu(9), &mut hops)
            .unwrap();
        assert!(hops.is_empty());
        assert!(t.path(t.gpu(3), t.gpu(3), 0).unwrap().is_empty());
    }

    #[test]
    fn mid_size_all_pairs_sample() {
        let t = mid();
        // Every pair from a few sources, several hashes.
        check_pairs(&t, &[0, 1, 77, 255], &[0, 1, 2, 3]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn random_flows_are_valid_shortest_paths(src in 0u32..256, dst in 0u32..256, hash: u64) {
            let t = mid_cached();
            check_flow(t, t.gpu(src), t.gpu(dst), hash);
        }
    }

    fn mid_cached() -> &'static Topology {
        static T: std::sync::OnceLock<Topology> = std::sync::OnceLock::new();
        T.get_or_init(mid)
    }
}
