//! How soon anything at a node can reach another partition of a run: per topology node its
//! distance to the cut, per GPU and group the reach of what its collectives and sends lead
//! to, and a segment's reach along its carried route ([`Cut`]). Read off the model and the
//! partitioning alone; what an event promises given its target LP's state is
//! [`super::cut`]'s, above the LPs.

use crate::time::ps_per_byte;
use std::collections::HashMap;

use super::{NO_LINK, P2P, Segment, SimModel, Tag};
use crate::layout::GroupKind;
use crate::serialisation_ps;
use crate::topology::{HOST_NONE, LinkClass, LinkId, NodeId, NodeKind};

/// Group kinds by discriminant ([`GroupKind::from_index`]), [`GroupKind::Embedding`] included.
const GROUP_KINDS: usize = GroupKind::COUNT;

/// Groups larger than this are not searched member by member: what their ops do is bounded
/// by the GPU's distance to the cut alone. Keeps building a cut linear at 131,072 GPUs.
const SEARCHED_GROUP: usize = 256;

/// [`Cut::reach_row`] of a rank the holder does not own.
const NOT_OWNED: u32 = u32::MAX;

/// A partitioning seen from the model: per topology node its partition, its distance to the
/// cut, and whether a GPU there may promise from its own state.
#[derive(Debug)]
pub struct Cut {
    pub partition_of: Vec<u32>,
    /// Per node, the least delay from an event there to another partition ([`distances_ps`]).
    pub distances: Vec<u64>,
    /// Per node, whether it is a GPU whose whole host is in its partition
    /// ([`gpus_with_whole_host`]).
    pub gpu_state: Vec<bool>,
    /// Per rank the holder owns, and group kind (by discriminant): the least delay from
    /// anything the GPU does in an op of that group to another partition
    /// ([`Cut::group_reach_ps`]). Other ranks are at their GPU's distance.
    group_reach: Vec<[u64; GROUP_KINDS]>,
    /// Per rank: its row of `group_reach`, or [`NOT_OWNED`].
    reach_row: Vec<u32>,
    /// Per rank: its GPU's node.
    gpu_of_rank: Vec<NodeId>,
    /// Per (sending GPU node, peer GPU node) searched: [`Cut::peer_reach_ps`].
    peer_reach: PeerReach,
    /// Per node: [`Cut::watches`].
    state_watched: Vec<bool>,
}

/// [`Cut::peer_reach_ps`]'s searched pairs, read-only once the cut is built: per sending node
/// a row of (peer, reach) sorted by peer. 8 bytes a pair where the hash map that searched them
/// takes 17 to 34; a worker holds every pair of the groups its ranks belong to.
#[derive(Debug, Default)]
struct PeerReach {
    /// Where each node's row starts in `pairs`, and one more entry for the end.
    row_start: Vec<u32>,
    /// (peer, reach in picoseconds): [`PeerReach::NEVER`] for `u64::MAX`, and a finite
    /// reach beyond `u32` range saturated below it, which only lowers the bound.
    pairs: Vec<(NodeId, u32)>,
}

impl PeerReach {
    const NEVER: u32 = u32::MAX;

    /// A searched pair as the search's memo holds it: sender in the high half.
    fn key(sender: NodeId, peer: NodeId) -> u64 {
        u64::from(sender) << 32 | u64::from(peer)
    }

    fn narrow(reach: u64) -> u32 {
        match reach {
            u64::MAX => Self::NEVER,
            r => u32::try_from(r).map_or(Self::NEVER - 1, |r| r.min(Self::NEVER - 1)),
        }
    }

    fn widen(reach: u32) -> u64 {
        match reach {
            Self::NEVER => u64::MAX,
            r => u64::from(r),
        }
    }

    /// From the search's memo ([`PeerReach::key`] to [`PeerReach::narrow`]ed reach).
    fn new(searched: &HashMap<u64, u32>, nodes: usize) -> Self {
        let sender = |key: u64| (key >> 32) as usize;
        let mut row_start = vec![0u32; nodes + 1];
        for &key in searched.keys() {
            row_start[sender(key) + 1] += 1;
        }
        for n in 0..nodes {
            row_start[n + 1] += row_start[n];
        }
        // Filled row by row in the map's order, then each row sorted: no copy of the map.
        let mut next = row_start.clone();
        let mut pairs = vec![(0, 0); searched.len()];
        for (&key, &reach) in searched {
            let at = &mut next[sender(key)];
            pairs[*at as usize] = (key as NodeId, reach);
            *at += 1;
        }
        for n in 0..nodes {
            pairs[row_start[n] as usize..row_start[n + 1] as usize].sort_unstable();
        }
        PeerReach { row_start, pairs }
    }

    fn get(&self, sender: NodeId, peer: NodeId) -> Option<u64> {
        let (Some(&start), Some(&end)) = (
            self.row_start.get(sender as usize),
            self.row_start.get(sender as usize + 1),
        ) else {
            return None;
        };
        let row = &self.pairs[start as usize..end as usize];
        let i = row.binary_search_by_key(&peer, |&(p, _)| p).ok()?;
        Some(Self::widen(row[i].1))
    }
}

impl Cut {
    /// The cut of `partition_of` as the holder of partitions `owned` sees it: what GPUs of
    /// other partitions reach is left at their distances (the holder asks only for events
    /// in flight there, where it knows no state).
    pub fn new(model: &SimModel, partition_of: &[u32], owned: &[u32]) -> Self {
        let mut cut = Cut {
            partition_of: partition_of.to_vec(),
            distances: distances_ps(model, partition_of),
            gpu_state: gpus_with_whole_host(model, partition_of),
            group_reach: Vec::new(),
            reach_row: Vec::new(),
            gpu_of_rank: Vec::new(),
            peer_reach: PeerReach::default(),
            state_watched: Vec::new(),
        };
        cut.search_groups(model, owned);
        let entered_from_outside = |n: usize| {
            model.topology.out_links(n as NodeId).iter().any(|&l| {
                let back = model.topology.link(l);
                partition_of[back.dst as usize] != partition_of[n]
            })
        };
        // Queued ports hold segments segments that no pending event promises (a node's
        // state, [`Cut::queued_bound`]), so every node with one is watched there.
        let has_ports = |n: usize| {
            model
                .topology
                .out_links(n as NodeId)
                .iter()
                .any(|&l| model.net.is_queued(model.topology.link(l).class))
        };
        cut.state_watched = (0..partition_of.len())
            .map(|n| is_gpu_lp(model, n as NodeId) || entered_from_outside(n) || has_ports(n))
            .collect();
        cut
    }

    /// The least delay from anything GPU `rank` does in an op of group `kind` (segments,
    /// acknowledgements, messages to its members) to another partition: `u64::MAX` when
    /// every member is in its partition and every route to one stays there, so that all it
    /// leads to is handled there. What a member then does is that member's own promise.
    pub(crate) fn group_reach_ps(&self, rank: u32, kind: GroupKind) -> u64 {
        self.owned_reach(rank)
            .map_or_else(|| self.gpu_distance_ps(rank), |row| row[kind as usize])
    }

    /// The least of [`Cut::group_reach_ps`] over every group kind: a bound for whatever op
    /// GPU `rank` runs.
    pub(crate) fn gpu_reach_ps(&self, rank: u32) -> u64 {
        self.owned_reach(rank).map_or_else(
            || self.gpu_distance_ps(rank),
            |row| row.iter().copied().min().unwrap_or(u64::MAX),
        )
    }

    /// The group reach of a rank the holder owns; `None` for the others.
    fn owned_reach(&self, rank: u32) -> Option<&[u64; GROUP_KINDS]> {
        match self.reach_row[rank as usize] {
            NOT_OWNED => None,
            row => Some(&self.group_reach[row as usize]),
        }
    }

    /// Rank `rank`'s GPU's distance to the cut: the reach of a rank the holder does not own.
    fn gpu_distance_ps(&self, rank: u32) -> u64 {
        self.distances[self.gpu_of_rank[rank as usize] as usize]
    }

    /// [`Cut::group_reach_ps`] for one flow: from GPU node `sender` (the GPU itself, or
    /// the PXN relay its segments leave by) to GPU node `peer`; the sender's distance to
    /// the cut where the pair was not searched.
    pub(crate) fn peer_reach_ps(&self, sender: NodeId, peer: NodeId) -> u64 {
        self.peer_reach
            .get(sender, peer)
            .unwrap_or(self.distances[sender as usize])
    }

    /// Fills `group_reach` and `peer_reach`: for each group of each kind once, each
    /// member's least reach to the others.
    fn search_groups(&mut self, model: &SimModel, owned: &[u32]) {
        let partitions = self
            .partition_of
            .iter()
            .max()
            .map_or(0, |&p| p as usize + 1);
        let mut is_owned = vec![false; partitions];
        for &p in owned {
            if let Some(o) = is_owned.get_mut(p as usize) {
                *o = true;
            }
        }
        let workload = &model.workload;
        let world = workload.rank_bound() as usize;
        let topology = &model.topology;
        let gpu_node = |rank: u32| topology.gpu(rank);
        // Rows for the owned ranks only: a worker of four holds a quarter of them.
        self.gpu_of_rank = (0..world as u32).map(gpu_node).collect();
        self.reach_row = vec![NOT_OWNED; world];
        for (rank, &g) in self.gpu_of_rank.iter().enumerate() {
            if is_owned[self.partition_of[g as usize] as usize] {
                self.reach_row[rank] = self.group_reach.len() as u32;
                self.group_reach
                    .push([self.distances[g as usize]; GROUP_KINDS]);
            }
        }
        // Flows through the flow LP, which sits in one partition, do not follow routes:
        // only a group inside one host stays away from the cut.
        let through_flow_lp = model.flow_home.is_some()
            && (model.net.is_shared(LinkClass::NvLink) || model.net.is_shared(LinkClass::Pcie));
        let host_of = |n: NodeId| topology.nodes()[n as usize].host;
        let mut hops = Vec::with_capacity(8);
        let mut fabric = FabricMemo::default();
        let mut group_pairs = HashMap::new();
        let mut peer_reach = HashMap::new();
        for kind in GroupKind::ALL {
            let mut seen = vec![false; world];
            for r in 0..world {
                if seen[r]
                    || !workload.is_rank(r as u32)
                    || workload.group_size(kind, r as u32) as usize > SEARCHED_GROUP
                {
                    continue;
                }
                let ranks = workload.group(kind, r as u32);
                let members: Vec<NodeId> = ranks.iter().map(|&m| gpu_node(m)).collect();
                // Its pairs are kept for later sends and connections ([`Cut::peer_reach_ps`])
                // only where they are few: a model-parallel group (TP × PP) has members ×
                // TP of them, 3.9 M per worker at 131,072 GPUs on 4 workers.
                let in_host = members
                    .iter()
                    .filter(|&&v| host_of(v) == host_of(members[0]));
                let kept = members.len() * in_host.count() <= SEARCHED_GROUP;
                group_pairs.clear();
                // Its members' walks share the switches above their hosts; another group's
                // walks go elsewhere, so what this one learnt is dropped.
                fabric.clear();
                for &m in &ranks {
                    seen[m as usize] = true;
                }
                // Sends (pipeline and context-parallel neighbours) leave by a PXN relay that
                // need not be a member (`SimModel::p2p_via`): where one does, the pair counts at
                // the sender's distance to the cut.
                let sends = matches!(kind, GroupKind::Pp | GroupKind::Cp);
                for (&rank, &g) in ranks.iter().zip(&members) {
                    if !is_owned[self.partition_of[g as usize] as usize] {
                        continue;
                    }
                    let host = host_of(g);
                    let mut reach = u64::MAX;
                    for &m in &members {
                        let same_host = host != HOST_NONE && host_of(m) == host;
                        let to_m = if m == g || (same_host && !through_flow_lp) {
                            continue;
                        } else if model.flow_home.is_some() || host == HOST_NONE {
                            self.distances[g as usize]
                        } else if sends && model.p2p_via(rank, m) != super::NO_NODE {
                            let least = self.distances[g as usize];
                            if kept {
                                peer_reach.insert(PeerReach::key(g, m), PeerReach::narrow(least));
                            }
                            least
                        } else {
                            // From the GPU, or through a member of its NCCL node: PXN
                            // relays a ring's lane by one (`collective::ring::lane_links`),
                            // and NCCL's node is the NVLink domain where that spans hosts
                            // (GB200 NVL72), so the relay may sit in another tray, and
                            // another partition's neighbour.
                            let (partition_of, distances) = (&self.partition_of, &self.distances);
                            let mut least = u64::MAX;
                            let pairs = if kept {
                                &mut peer_reach
                            } else {
                                &mut group_pairs
                            };
                            let nccl_node = topology.nccl_node(rank);
                            let relays = ranks
                                .iter()
                                .zip(&members)
                                .filter(|&(&vr, _)| topology.nccl_node(vr) == nccl_node)
                                .map(|(_, &v)| v);
                            for v in relays {
                                let from_v =
                                    *pairs.entry(PeerReach::key(v, m)).or_insert_with(|| {
                                        PeerReach::narrow(route_reach_ps(
                                            model,
                                            partition_of,
                                            distances,
                                            (v, m),
                                            &mut fabric,
                                            &mut hops,
                                        ))
                                    });
                                least = least.min(PeerReach::widen(from_v));
                            }
                            least
                        };
                        reach = reach.min(to_m);
                    }
                    let row = self.reach_row[rank as usize] as usize;
                    self.group_reach[row][kind as usize] = reach;
                }
            }
        }
        self.peer_reach = PeerReach::new(&peer_reach, self.partition_of.len());
    }

    /// Whether LP `node` may promise from its state ([`Cut::state_bounds`]), so that the
    /// holder settles it again after it handles an event: GPUs, and nodes that a link
    /// from another partition enters (their PFC state).
    pub fn watches(&self, node: NodeId) -> bool {
        self.state_watched[node as usize]
    }

    /// The reach of what GPU `rank` (node `node`) sends for a message tagged `tag`: its
    /// group's, `p2p` for a send or receive, the GPU's distance for anything else.
    pub(crate) fn tag_reach_ps(
        &self,
        rank: u32,
        node: NodeId,
        tag: Tag,
        p2p: impl FnOnce() -> u64,
    ) -> u64 {
        match tag.group {
            P2P => p2p(),
            g => match super::communicator_group(g) {
                Some(kind) => self.group_reach_ps(rank, kind),
                None => self.distances[node as usize],
            },
        }
    }

    /// The least delay from `seg`, at node `at` (arriving, or queued there), to anything it
    /// leads to in another partition: a PFC pause back up the link it came in on (if
    /// `may_pause`), the first node of another partition on the rest of its carried route,
    /// or, at its destination, what the destination does: a GPU's acknowledgement to a
    /// sender in another partition (the rest is the GPU's own promise), any other node's
    /// distance to the cut. Never less than `at`'s distance, also a bound; that alone
    /// without a carried route.
    pub(crate) fn segment_reach_ps(
        &self,
        model: &SimModel,
        at: NodeId,
        seg: &Segment,
        may_pause: bool,
    ) -> u64 {
        let generic = self.distances[at as usize];
        // Adaptive routing may take a segment off its carried route at any later switch,
        // past whatever the route promised: only the node's own distance holds.
        if seg.route.is_empty() || generic == u64::MAX || model.net.adaptive_routing {
            return generic;
        }
        let own = self.partition_of[at as usize];
        let mut reach = u64::MAX;
        if may_pause && seg.ingress != NO_LINK {
            let up = model.topology.link(seg.ingress);
            if self.partition_of[up.src as usize] != own {
                reach = up.latency.as_ps();
            }
        }
        let (mut node, mut hop, mut travelled) = (at, seg.hop, 0u64);
        while node != seg.dst {
            if travelled >= reach {
                return reach.max(generic);
            }
            let Some(next) = seg
                .route
                .port(hop)
                .and_then(|i| model.topology.out_links(node).get(i))
            else {
                return generic;
            };
            let link = model.topology.link(*next);
            // Cut through: the segment's head crosses each link in one MTU packet's
            // serialisation and the latency, queued or not (`net::cut_through`); its tail,
            // which the destination waits for, comes no sooner.
            let head = model.net.head_bytes(u64::from(seg.bytes));
            travelled +=
                link.latency.as_ps() + serialisation_ps(head, ps_per_byte(link.bytes_per_s));
            node = link.dst;
            hop += 1;
            if self.partition_of[node as usize] != own {
                return reach.min(travelled).max(generic);
            }
        }
        // At its destination: a GPU acknowledges it to the sender, and what else it does
        // there its own promise covers ([`super::gpu::GpuLp::cut_promise`]); any other
        // node, or a GPU without a promise of its own, is bounded by its distance.
        let after = if is_gpu_lp(model, node) && self.gpu_state[node as usize] {
            // The acknowledgement, and a collective's next step (a receive's end only
            // starts later ops, the GPU's state bound).
            let ack = if self.partition_of[seg.src as usize] == own {
                u64::MAX
            } else {
                seg.path_ps
            };
            let rank = model.topology.nodes()[node as usize].index;
            ack.min(self.tag_reach_ps(rank, node, seg.tag, || u64::MAX))
        } else {
            self.distances[node as usize]
        };
        reach.min(travelled.saturating_add(after)).max(generic)
    }
}

/// The least delay, over every route from GPU node `sender` to GPU node `peer`, to the
/// first node of another partition than the sender's: `u64::MAX` when none leaves it.
/// Without events on the way (the analytical network delivers a whole message at the peer,
/// no sooner than the route's latency: `gpu::GpuLp::transmit`), only the peer's partition
/// counts.
pub(super) fn route_reach_ps(
    model: &SimModel,
    partition_of: &[u32],
    distances: &[u64],
    (sender, peer): (NodeId, NodeId),
    fabric: &mut FabricMemo,
    hops: &mut Vec<LinkId>,
) -> u64 {
    let own = partition_of[sender as usize];
    let mut walk = Walk {
        model,
        partition_of,
        own,
        src: sender,
        dst: peer,
        memo: HashMap::new(),
        fabric,
    };
    if !model.net.packet {
        return if partition_of[peer as usize] == own {
            u64::MAX
        } else {
            walk.least_latency_ps(sender, hops)
                .max(distances[sender as usize])
        };
    }
    walk.first_foreign_ps(sender, hops)
}

/// `Walk::least_ps` looking for the latency to the destination, not for another partition.
const LATENCY: u32 = u32::MAX;

/// What walks to one destination learnt at fabric switches (leaf, spine, core), for the
/// next walk to it from another source: a switch's next hops depend only on the
/// destination (`routing.rs`: `fabric_step`, and a graph file's shortest paths), so its
/// least value does too, given what the walk looks for ([`LATENCY`], or the first node
/// outside that partition). Keyed by (what, destination,
/// switch).
#[derive(Default)]
pub(super) struct FabricMemo(HashMap<(u32, NodeId, NodeId), u64>);

impl FabricMemo {
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Routes of one flow `src → dst`, searched for the first node outside partition `own`.
struct Walk<'a> {
    model: &'a SimModel,
    partition_of: &'a [u32],
    own: u32,
    src: NodeId,
    dst: NodeId,
    /// The nodes done, for this flow and what it looks for.
    memo: HashMap<NodeId, u64>,
    fabric: &'a mut FabricMemo,
}

impl Walk<'_> {
    /// From node `at` (in `own`), the least latency to a node outside it over every route
    /// on to `dst`; `u64::MAX` when none leaves.
    fn first_foreign_ps(&mut self, at: NodeId, hops: &mut Vec<LinkId>) -> u64 {
        let (partition_of, own, dst) = (self.partition_of, self.own, self.dst);
        let reached = |node: NodeId| {
            if partition_of[node as usize] != own {
                Some(0)
            } else {
                (node == dst).then_some(u64::MAX)
            }
        };
        self.least_ps(at, own, &reached, hops)
    }

    /// From node `at`, the least summed latency over every route on to `dst`.
    fn least_latency_ps(&mut self, at: NodeId, hops: &mut Vec<LinkId>) -> u64 {
        let dst = self.dst;
        self.least_ps(at, LATENCY, &|node| (node == dst).then_some(0), hops)
    }

    /// From node `at`, the least over every route on to `dst` of the latency to the first
    /// node `reached` gives a value for, plus that value. `what` names `reached` in the
    /// fabric memo.
    fn least_ps(
        &mut self,
        at: NodeId,
        what: u32,
        reached: &dyn Fn(NodeId) -> Option<u64>,
        hops: &mut Vec<LinkId>,
    ) -> u64 {
        if let Some(end) = reached(at) {
            return end;
        }
        let topology = &self.model.topology;
        let shared = matches!(
            topology.nodes()[at as usize].kind,
            NodeKind::Leaf | NodeKind::Spine | NodeKind::Core
        );
        let known = if shared {
            self.fabric.0.get(&(what, self.dst, at))
        } else {
            self.memo.get(&at)
        };
        if let Some(&known) = known {
            return known;
        }
        // A route the engine could not take either: nothing is known, so promise nothing.
        if topology.next_hops(at, self.src, self.dst, hops).is_err() {
            return 0;
        }
        let mut next = hops.clone();
        // The latency on from a switch is the same whichever equal-cost hop is taken
        // there, so one will do (what lies in another partition differs between them).
        if shared && what == LATENCY && topology.fabric_choices_are_alike() {
            next.truncate(1);
        }
        let mut least = u64::MAX;
        for link in next {
            let l = self.model.topology.link(link);
            let rest = self.least_ps(l.dst, what, reached, hops);
            least = least.min(rest.saturating_add(l.latency.as_ps()));
        }
        if shared {
            self.fabric.0.insert((what, self.dst, at), least);
        } else {
            self.memo.insert(at, least);
        }
        least
    }
}

/// Whether `node` is a GPU running a rank (its LP is a [`super::gpu::GpuLp`]).
pub(super) fn is_gpu_lp(model: &SimModel, node: NodeId) -> bool {
    let n = model.topology.nodes()[node as usize];
    n.kind == NodeKind::Gpu && model.workload.is_rank(n.index)
}

/// For every topology node, the least time an event there can take to cause an event
/// in another partition of `partition_of` (indexed by node): the shortest latency path
/// to any node of another partition, over the links and, in flow mode, over the flow
/// LP's edges (each GPU to and from it in [`SimModel::flow_delay`]); `u64::MAX`
/// when none is reachable.
///
/// Sound because an event an LP emits for another LP is never sooner than the path
/// between them: a segment crosses each link's latency, and an acknowledgement, message
/// or closed-form arrival takes its route's summed latency. A chain of events inside a
/// partition is then never faster than the shortest path (triangle inequality), so an
/// event at time `t` at node `x` leads to nothing in another partition before
/// `t + d[x]`: a conservative earliest output time per event, as Chandy and Misra's
/// lookahead per channel (Misra, "Distributed discrete-event simulation", Computing
/// Surveys 1986, §3), and never less than the cut's smallest latency.
fn distances_ps(model: &SimModel, partition_of: &[u32]) -> Vec<u64> {
    let topology = &model.topology;
    let nodes = topology.nodes();
    let gpu = |x: usize| nodes[x].kind == NodeKind::Gpu;
    let home = model.flow_home;
    // A link's reverse is its cable's other direction, of the same latency (topology
    // conventions), so the links into a node are its out links turned round: read in
    // place, where a copy of the reversed graph took 40 MB at 131,072 GPUs.
    let into = |x: usize| {
        let wired = topology
            .out_links(x as NodeId)
            .iter()
            .map(|&l| topology.link(l))
            .map(|link| (link.dst, link.latency.as_ps()));
        let from_home = home
            .filter(|_| gpu(x))
            .map(|h| (h, model.flow_delay.as_ps()));
        let gpus = if home == Some(x as NodeId) {
            0..nodes.len()
        } else {
            0..0
        };
        let from_gpus = gpus
            .filter(move |&g| gpu(g))
            .map(|g| (g as NodeId, model.flow_delay.as_ps()));
        wired.chain(from_home).chain(from_gpus)
    };
    nearest_other_partition(nodes.len(), into, partition_of)
}

/// For every topology node, whether it is a GPU whose whole host lies in its partition
/// of `partition_of`: only such a GPU's promise can rest on its program
/// ([`super::gpu::GpuLp::cut_promise`]), since what it sends inside its host then stays in
/// its partition. The partitioner never cuts a host; a map given by hand may.
fn gpus_with_whole_host(model: &SimModel, partition_of: &[u32]) -> Vec<bool> {
    let nodes = model.topology.nodes();
    let hosts = nodes
        .iter()
        .filter(|n| n.host != crate::topology::HOST_NONE)
        .map(|n| n.host as usize + 1)
        .max()
        .unwrap_or(0);
    // Per host: its one partition, or u32::MAX once two are seen.
    let mut host_partition = vec![None::<u32>; hosts];
    for (n, node) in nodes.iter().enumerate() {
        if node.host == crate::topology::HOST_NONE {
            continue;
        }
        let slot = &mut host_partition[node.host as usize];
        match *slot {
            None => *slot = Some(partition_of[n]),
            Some(p) if p != partition_of[n] => *slot = Some(u32::MAX),
            Some(_) => {}
        }
    }
    nodes
        .iter()
        .map(|n| {
            n.kind == NodeKind::Gpu
                && n.host != crate::topology::HOST_NONE
                && host_partition[n.host as usize] != Some(u32::MAX)
        })
        .collect()
}

/// For each of `nodes` nodes, the distance to the nearest node of another partition, given
/// the edges into each node (`into(x)`: from where, how long). The first node outside on any
/// route ends it, so `d[x]` is the least over links `x → y` of their latency plus `d[y]`
/// where `y` shares `x`'s partition and nothing where it does not: Dijkstra over the
/// reversed edges, from the nodes with a link leaving their partition, each node settled
/// once. `u64::MAX` where no other partition is reachable.
fn nearest_other_partition<I>(
    nodes: usize,
    into: impl Fn(usize) -> I,
    partition_of: &[u32],
) -> Vec<u64>
where
    I: Iterator<Item = (NodeId, u64)>,
{
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut distance = vec![u64::MAX; nodes];
    for y in 0..nodes {
        for (x, latency) in into(y) {
            let x = x as usize;
            if partition_of[x] != partition_of[y] {
                distance[x] = distance[x].min(latency);
            }
        }
    }
    let mut heap: BinaryHeap<Reverse<(u64, NodeId)>> = (0..nodes)
        .filter(|&x| distance[x] != u64::MAX)
        .map(|x| Reverse((distance[x], x as NodeId)))
        .collect();
    while let Some(Reverse((d, y))) = heap.pop() {
        let y = y as usize;
        if d > distance[y] {
            continue;
        }
        for (x, latency) in into(y) {
            let x_i = x as usize;
            let through_y = d.saturating_add(latency);
            if partition_of[x_i] == partition_of[y] && through_y < distance[x_i] {
                distance[x_i] = through_y;
                heap.push(Reverse((through_y, x)));
            }
        }
    }
    distance
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_its_shortest_latency_to_another_partition() {
        // 0 -1- 1 -2- 2 -4- 3, both ways, and a slow shortcut 0 -10- 3; partitions 0 0 1 1.
        let mut into: Vec<Vec<(NodeId, u64)>> = vec![Vec::new(); 4];
        for (a, b, l) in [(0, 1, 1), (1, 2, 2), (2, 3, 4), (0, 3, 10)] {
            into[b as usize].push((a, l));
            into[a as usize].push((b, l));
        }
        let nearest = |partition_of: &[u32]| {
            nearest_other_partition(4, |x| into[x].iter().copied(), partition_of)
        };
        assert_eq!(nearest(&[0, 0, 1, 1]), [3, 2, 2, 6]);
        // One partition: nothing to reach.
        assert_eq!(nearest(&[0, 0, 0, 0]), [u64::MAX; 4]);
        // Three: node 1 is next to both others.
        assert_eq!(nearest(&[0, 1, 2, 2]), [1, 1, 2, 6]);
    }

    /// Against all-pairs shortest paths (Floyd-Warshall) on random directed graphs: the
    /// nearest node of another partition over every route, wherever the route passes.
    #[test]
    fn the_nearest_other_partition_is_the_least_of_all_shortest_paths() {
        let mut draw = crate::topology::draws_from(7);
        for _ in 0..200 {
            let n = 2 + draw(9) as usize;
            let partition_of: Vec<u32> = (0..n).map(|_| draw(3) as u32).collect();
            let mut into: Vec<Vec<(NodeId, u64)>> = vec![Vec::new(); n];
            let mut path = vec![vec![u64::MAX; n]; n];
            for (x, row) in path.iter_mut().enumerate() {
                row[x] = 0;
            }
            for _ in 0..draw(3 * n as u64) {
                let (a, b, latency) = (draw(n as u64) as usize, draw(n as u64) as usize, draw(20));
                into[b].push((a as NodeId, latency));
                path[a][b] = path[a][b].min(latency);
            }
            for k in 0..n {
                for a in 0..n {
                    for b in 0..n {
                        let via = path[a][k].saturating_add(path[k][b]);
                        path[a][b] = path[a][b].min(via);
                    }
                }
            }
            let want: Vec<u64> = (0..n)
                .map(|x| {
                    (0..n)
                        .filter(|&s| partition_of[s] != partition_of[x])
                        .map(|s| path[x][s])
                        .min()
                        .unwrap_or(u64::MAX)
                })
                .collect();
            let got = nearest_other_partition(n, |x| into[x].iter().copied(), &partition_of);
            assert_eq!(got, want, "{partition_of:?} {into:?}");
        }
    }

    #[test]
    fn searched_pairs_read_back_as_the_map_held_them() {
        let searched: HashMap<u64, u32> = [
            ((3, 9), 1_500_000),
            ((3, 1), 700),
            ((0, 2), u64::MAX),
            ((5, 4), 1 << 40),
        ]
        .into_iter()
        .map(|((s, p), r)| (PeerReach::key(s, p), PeerReach::narrow(r)))
        .collect();
        let reach = PeerReach::new(&searched, 6);
        assert_eq!(reach.get(3, 9), Some(1_500_000));
        assert_eq!(reach.get(3, 1), Some(700));
        assert_eq!(reach.get(0, 2), Some(u64::MAX));
        // Beyond u32 picoseconds (4.3 ms) a reach saturates: a lower bound, still a bound.
        assert_eq!(reach.get(5, 4), Some(u64::from(u32::MAX - 1)));
        assert_eq!(reach.get(3, 2), None);
        assert_eq!(reach.get(1, 2), None);
        assert_eq!(reach.get(6, 0), None);
        assert_eq!(reach.get(1_000, 0), None);
    }
}
