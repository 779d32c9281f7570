//! Where a run's partitions meet, and how soon anything can cross them: the promises that
//! let a window end later than one lookahead (`worker/src/promise.rs` keeps them).
//!
//! An event's promise is a lower bound on the time of anything it leads to in another
//! partition. By default that is its time plus its target's distance to the cut (the
//! shortest latency path to another partition). Where the event says more, the bound is
//! tighter: a segment follows its carried route, so what it leads to crosses only where the
//! route does, where it came from (PFC back-pressure), or after its destination; a port's
//! `TxDone` sends the head of its queue and nothing else.

use crate::time::{SimTime, ps_per_byte};
use std::collections::HashMap;

use super::{Body, Event, Lp, NO_LINK, P2P, Segment, SimModel, Tag};
use crate::event::EventKey;
use crate::layout::GroupKind;
use crate::segments::serialisation_ps;
use crate::topology::{HOST_NONE, LinkClass, LinkId, NodeId, NodeKind};

/// Group kinds by discriminant ([`GroupKind::from_index`]), [`GroupKind::Embedding`] included.
const GROUP_KINDS: usize = GroupKind::COUNT;

/// Groups larger than this are not searched member by member: what their ops do is bounded
/// by the GPU's distance to the cut alone. Keeps building a cut linear at 131,072 GPUs.
const SEARCHED_GROUP: usize = 256;

/// The queued segments of one port searched one by one for [`Cut::queued_bound`]; those
/// behind them count at their wait plus the node's distance to the cut. Segments of a
/// megabyte wait tens of microseconds each, so the first few set the bound.
const QUEUE_SEARCHED: usize = 8;

/// Two state bounds `(from, reach)` as one that promises no later than either: the least
/// `from` and the least reach (a bound with no reach is none).
fn merge_bounds(a: (u64, u64), b: (u64, u64)) -> (u64, u64) {
    match (a.1, b.1) {
        (u64::MAX, _) => b,
        (_, u64::MAX) => a,
        _ => (a.0.min(b.0), a.1.min(b.1)),
    }
}

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

/// What the holder of a pending event knows of its target: its LP, and for a segment the
/// bytes of the segments pending for it over the same link, itself included.
#[derive(Debug, Clone, Copy)]
pub struct TargetState<'a> {
    pub lp: &'a Lp,
    pub arriving_bytes: u64,
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
    pub fn group_reach_ps(&self, rank: u32, kind: GroupKind) -> u64 {
        self.owned_reach(rank)
            .map_or_else(|| self.gpu_distance_ps(rank), |row| row[kind as usize])
    }

    /// The least of [`Cut::group_reach_ps`] over every group kind: a bound for whatever op
    /// GPU `rank` runs.
    pub fn gpu_reach_ps(&self, rank: u32) -> u64 {
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
    pub fn peer_reach_ps(&self, sender: NodeId, peer: NodeId) -> u64 {
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
                // need not be a member (`gpu::p2p_via`): where one does, the pair counts at
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
                        } else if sends && super::gpu::p2p_via(model, rank, m) != super::NO_NODE {
                            let least = self.distances[g as usize];
                            if kept {
                                peer_reach.insert(PeerReach::key(g, m), PeerReach::narrow(least));
                            }
                            least
                        } else {
                            // From the GPU, or through a member in its host: PXN relays
                            // a ring's lane by one (`collective::ring::lane_links`).
                            let (partition_of, distances) = (&self.partition_of, &self.distances);
                            let mut least = u64::MAX;
                            let pairs = if kept {
                                &mut peer_reach
                            } else {
                                &mut group_pairs
                            };
                            for &v in members.iter().filter(|&&v| host_of(v) == host) {
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

    /// What LP `lp` at `node` can still send across the cut whatever arrives meanwhile, as
    /// bounds `(from, reach)` like [`super::gpu::GpuLp::cut_promise`]'s: a GPU's program; a
    /// node's resumes to the ports of other partitions it holds paused (at any time, so
    /// from 0). `None` for LPs whose promise follows their pending events alone.
    /// `not_before_ps`: the LP handles no event before then (a window end its last event
    /// precedes), so a GPU's state is as of then.
    pub fn state_bounds(
        &self,
        model: &SimModel,
        node: NodeId,
        lp: &mut Lp,
        not_before_ps: u64,
    ) -> Option<[(u64, u64); 2]> {
        const NONE: (u64, u64) = (u64::MAX, u64::MAX);
        if !self.watches(node) {
            return None;
        }
        match lp {
            Lp::Gpu(g) if self.gpu_state[node as usize] => {
                let [live, next] = g.cut_promise(model, self, not_before_ps);
                let queued = self.queued_bound(model, node, g.ports());
                Some([merge_bounds(live, queued), next])
            }
            Lp::Gpu(_) => Some([(0, self.distances[node as usize]), NONE]),
            Lp::Fabric(f) => {
                let own = self.partition_of[node as usize];
                let paused = f
                    .ports
                    .paused_upstream_latency(model, |up| self.partition_of[up as usize] != own);
                Some([
                    paused.map_or(NONE, |l| (0, l)),
                    self.queued_bound(model, node, &f.ports),
                ])
            }
        }
    }

    /// What the queued ports of node `node` will still send, as one bound `(from, reach)`:
    /// a queued segment leaves on a later `TxDone` or resume, which promises only the head
    /// of its queue as it was when it was sent, so the segments behind it are the node's
    /// state. Per port, from when it can next send: the least over its first
    /// [`QUEUE_SEARCHED`] segments of their wait behind those ahead plus their reach
    /// ([`Cut::segment_reach_ps`]), and for the rest their wait plus the node's distance to
    /// the cut. Merged over ports as the least `from` and the least reach, a lower bound
    /// of each.
    fn queued_bound(
        &self,
        model: &SimModel,
        node: NodeId,
        ports: &super::net::Ports,
    ) -> (u64, u64) {
        let generic = self.distances[node as usize];
        let mut bound = (u64::MAX, u64::MAX);
        if generic == u64::MAX {
            return bound;
        }
        for (busy_until, waits) in ports.queued() {
            let mut least = u64::MAX;
            for (k, (wait, seg)) in waits.enumerate() {
                if wait >= least {
                    break;
                }
                if k == QUEUE_SEARCHED {
                    least = least.min(wait.saturating_add(generic));
                    break;
                }
                let reach = self.segment_reach_ps(model, node, seg, false);
                least = least.min(wait.saturating_add(reach));
            }
            bound = merge_bounds(bound, (busy_until, least));
        }
        bound
    }

    /// The promise of `event` at its time: nothing it leads to reaches another partition
    /// sooner. [`SimTime::MAX`] when its target's own promise covers it ([`Cut::state_bounds`]):
    /// a GPU's events other than segments (valid whatever arrives when), and a PFC pause,
    /// which only stops a port. `target` is what the caller knows of the target LP: a
    /// `TxDone` then promises from the segment it will send, and a segment sends a pause
    /// back only if its ingress buffer can fill.
    pub fn event_promise(
        &self,
        model: &SimModel,
        key: &EventKey,
        event: &Event,
        target: Option<TargetState>,
    ) -> SimTime {
        let node = event.target;
        let generic = self.distances[node as usize];
        if model.faults.has_timed_links()
            && matches!(event.body, Body::Segment(_) | Body::TxDone { .. })
        {
            // A link fault may reroute the segment off its carried route, past whatever
            // that route promised: only the node's own distance to the cut holds.
            return key.time.saturating_add(SimTime::from_ps(generic));
        }
        let reach = match (&event.body, target) {
            (Body::Segment(seg), known) => {
                let may_pause = match known {
                    Some(TargetState {
                        lp: Lp::Fabric(f),
                        arriving_bytes,
                    }) => f
                        .ports
                        .ingress_state(model, seg)
                        .is_some_and(|(bytes, paused)| {
                            paused || bytes + arriving_bytes >= model.net.xoff_bytes
                        }),
                    _ => true,
                };
                let reach = self.segment_reach_ps(model, node, seg, may_pause);
                if node == seg.dst && is_gpu_lp(model, node) {
                    reach.min(self.op_end_reach_ps(model, node, &event.body, known))
                } else {
                    reach
                }
            }
            (Body::Pause { .. }, _) => return SimTime::MAX,
            (body, known) if is_gpu_lp(model, node) => {
                let gpu = match known {
                    Some(TargetState { lp: Lp::Gpu(g), .. }) => Some(&**g),
                    _ => None,
                };
                let ends_op = self.op_end_reach_ps(model, node, body, known);
                match self.gpu_event_reach_ps(model, node, key, body, gpu) {
                    Some(reach) => reach.min(ends_op),
                    None if ends_op != u64::MAX => ends_op,
                    None => return SimTime::MAX,
                }
            }
            // Stale, or it sends the head of its port's queue: the port is busy until this
            // `TxDone`, so nothing else sends that segment before it. A resume it may send
            // back is the node's state bound.
            (
                Body::TxDone { port },
                Some(TargetState {
                    lp: Lp::Fabric(f), ..
                }),
            ) => match f.ports.queue_head(*port as usize) {
                Some(head) => self.segment_reach_ps(model, node, head, false),
                None => return SimTime::MAX,
            },
            _ => generic,
        };
        key.time.saturating_add(SimTime::from_ps(reach))
    }

    /// What GPU `node` may start on handling `body` when that ends an op: the ops after it
    /// on its stream ([`super::gpu::GpuLp::stream_reach_ps`]; any of the GPU's without its
    /// state). `u64::MAX` for events that end no communication op: a kernel chain's end,
    /// which the GPU's state bound covers, a port's transmission, a pacing tick.
    fn op_end_reach_ps(
        &self,
        model: &SimModel,
        node: NodeId,
        body: &Body,
        known: Option<TargetState>,
    ) -> u64 {
        if matches!(
            body,
            Body::ComputeDone { .. } | Body::TxDone { .. } | Body::Pace { .. } | Body::HostIssued
        ) {
            return u64::MAX;
        }
        match known {
            Some(TargetState { lp: Lp::Gpu(g), .. }) => {
                g.stream_reach_ps(self, g.event_stream(body))
            }
            _ => self.gpu_reach_ps(model.topology.nodes()[node as usize].index),
        }
    }

    /// The reach of an event other than a segment for GPU `node`: what
    /// handling it may send on at once. `None` where the GPU's state bound covers it (it
    /// completes an op, or starts the next: [`super::gpu::GpuLp::cut_promise`]). `gpu` is
    /// the GPU's state where the caller holds it.
    fn gpu_event_reach_ps(
        &self,
        model: &SimModel,
        node: NodeId,
        key: &EventKey,
        body: &Body,
        gpu: Option<&super::gpu::GpuLp>,
    ) -> Option<u64> {
        let rank = model.topology.nodes()[node as usize].index;
        let generic = self.distances[node as usize];
        Some(match (body, gpu) {
            // A job's start: what it starts is the GPU's state bound, as of its start.
            (
                Body::ComputeDone { .. }
                | Body::SendDone { .. }
                | Body::JobStart
                | Body::HostIssued,
                _,
            ) => return None,
            // The next segments of the flow, or of any other (its own is among them): the
            // transport serves all of the GPU's flows, and an acknowledgement that frees
            // one's window may send another's (so may a `TxDone` below).
            (Body::Ack { .. }, Some(g)) => match g.flows_reach_ps(self) {
                u64::MAX => return None,
                reach => reach,
            },
            // A serial connection's chunks leave from the GPU itself, by no relay.
            (Body::ConnectionFree { connection }, Some(g)) => {
                match g.connection_peer(*connection) {
                    Some(peer) => self.peer_reach_ps(node, peer),
                    None => generic,
                }
            }
            (Body::TxDone { port }, Some(g)) => {
                let head = g.queue_head(*port as usize).map_or(u64::MAX, |head| {
                    self.segment_reach_ps(model, node, head, false)
                });
                match head.min(g.flows_reach_ps(self)) {
                    u64::MAX => return None,
                    reach => reach,
                }
            }
            // The next step of a collective, or for a send the transfer to the receiver
            // that cleared it.
            (Body::Message { tag }, _) => self.tag_reach_ps(rank, node, *tag, || u64::MAX),
            // The leader answers no sooner than the collective can finish, nor than one
            // latency after the member was due (`GpuLp::apply_arrival`).
            (
                Body::Arrived {
                    tag,
                    done_ps,
                    due_ps,
                },
                _,
            ) => {
                let answer = self.tag_reach_ps(rank, node, *tag, || u64::MAX);
                (*done_ps)
                    .max(due_ps.saturating_add(answer))
                    .saturating_sub(key.time.as_ps())
            }
            (Body::ClearToSend { tag }, _) => {
                self.tag_reach_ps(rank, node, *tag, || self.peer_reach_ps(node, key.origin_lp))
            }
            // A paced flow's slot may hold another flow by now: the GPU's least reach.
            (Body::Pace { .. }, _) => self.gpu_reach_ps(rank),
            _ => generic,
        })
    }

    /// The reach of what GPU `rank` (node `node`) sends for a message tagged `tag`: its
    /// group's, `p2p` for a send or receive, the GPU's distance for anything else.
    pub fn tag_reach_ps(
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
    pub fn segment_reach_ps(
        &self,
        model: &SimModel,
        at: NodeId,
        seg: &Segment,
        may_pause: bool,
    ) -> u64 {
        let generic = self.distances[at as usize];
        if seg.route.is_empty() || generic == u64::MAX {
            return generic;
        }
        let own = self.partition_of[at as usize];
        let mut reach = u64::MAX;
        if may_pause && seg.ingress != NO_LINK {
            let up = model.topology.link(seg.ingress);
            if self.partition_of[up.src as usize] != own {
                reach = up.latency_ps;
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
            travelled += link.latency_ps + serialisation_ps(head, ps_per_byte(link.bytes_per_s));
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
fn route_reach_ps(
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
struct FabricMemo(HashMap<(u32, NodeId, NodeId), u64>);

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
            least = least.min(rest.saturating_add(l.latency_ps));
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
fn is_gpu_lp(model: &SimModel, node: NodeId) -> bool {
    let n = model.topology.nodes()[node as usize];
    n.kind == NodeKind::Gpu && model.workload.is_rank(n.index)
}

/// For every topology node, the least time an event there can take to cause an event
/// in another partition of `partition_of` (indexed by node): the shortest latency path
/// to any node of another partition, over the links and, in flow mode, over the flow
/// LP's edges (each GPU to and from it in [`SimModel::flow_delay_ps`]); `u64::MAX`
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
            .out_neighbours(x as NodeId)
            .iter()
            .zip(topology.out_links(x as NodeId))
            .map(|(&from, &l)| (from, topology.link(l).latency_ps));
        let from_home = home.filter(|_| gpu(x)).map(|h| (h, model.flow_delay_ps));
        let gpus = if home == Some(x as NodeId) {
            0..nodes.len()
        } else {
            0..0
        };
        let from_gpus = gpus
            .filter(move |&g| gpu(g))
            .map(|g| (g as NodeId, model.flow_delay_ps));
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

#[cfg(test)]
mod route_tests {
    use std::collections::BTreeSet;

    use super::super::net::Route;
    use super::super::net::tests::{
        network_queues, quickstart_with, segment, two_hosts_per_leaf, walk,
    };
    use super::*;
    use crate::segments::serialisation_ps;

    /// Quickstart's fabric with two hosts per leaf, cut so that partition 0 holds hosts 0
    /// and 1 and the leaves their NICs hang from; everything else is partition 1.
    fn two_hosts_cut(model: &SimModel) -> Cut {
        Cut::new(model, &hosts_and_their_leaves(model, &[0, 1], 0), &[0, 1])
    }

    /// A two-partition map: the nodes of `hosts` and the leaves their NICs hang from in
    /// partition `theirs`, every other node (spines included) in the other.
    fn hosts_and_their_leaves(model: &SimModel, hosts: &[u32], theirs: u32) -> Vec<u32> {
        let t = &model.topology;
        let inside = |n: NodeId| hosts.contains(&t.nodes()[n as usize].host);
        (0..t.nodes().len() as NodeId)
            .map(|n| {
                let their_leaf = t.nodes()[n as usize].kind == NodeKind::Leaf
                    && t.out_links(n).iter().any(|&l| inside(t.link(l).dst));
                if inside(n) || their_leaf {
                    theirs
                } else {
                    1 - theirs
                }
            })
            .collect()
    }

    /// A segment from GPU rank `src` to rank `dst` at the hop where it reaches the leaf,
    /// with its route carried, and that leaf.
    fn at_the_leaf(model: &SimModel, src: u32, dst: u32, bytes: u32) -> (Segment, NodeId) {
        let t = &model.topology;
        let (src, dst) = (t.gpu(src), t.gpu(dst));
        let mut seg = segment(src, dst, 3);
        seg.bytes = bytes;
        seg.tag.group = P2P;
        seg.route = Route::plan(t, network_queues(t), src, seg, &mut Vec::new());
        let links = walk(t, src, &seg.route);
        let hop = links
            .iter()
            .position(|&l| t.nodes()[t.link(l).dst as usize].kind == NodeKind::Leaf)
            .expect("the route passes a leaf");
        seg.hop = hop as u8 + 1;
        (seg, t.link(links[hop]).dst)
    }

    /// Latency plus the serialisation of the segment's head (one MTU packet) over the rest
    /// of `seg`'s route from `at`.
    fn rest_of_route_ps(model: &SimModel, at: NodeId, seg: &Segment) -> u64 {
        let t = &model.topology;
        let (mut node, mut total) = (at, 0);
        let mut hop = seg.hop;
        while let Some(port) = seg.route.port(hop) {
            hop += 1;
            let l = t.link(t.out_links(node)[port]);
            let head = model.net.head_bytes(u64::from(seg.bytes));
            total += l.latency_ps + serialisation_ps(head, ps_per_byte(l.bytes_per_s));
            node = l.dst;
        }
        total
    }

    /// The promise invariant at one node, directly: segments queued on one uplink of a
    /// leaf (some bound for a host of the same partition over the spines, some for a host
    /// of another) drain on their own, and nothing the leaf's events lead to in the other
    /// partition comes before the least of the pending events' promises and the leaf's
    /// state bounds, as they stood once the segments were queued. A `TxDone` promises the
    /// segment it sends; the segments behind it are the node's state ([`Cut::queued_bound`]).
    /// Without that, a crossing segment queued behind one bound inside had no promise at
    /// all (issue 15: gpt3-175b-h100-1024 on 2 workers).
    #[test]
    fn nothing_queued_at_a_node_crosses_before_what_it_promised() {
        use super::super::{Ctx, net::FabricLp};
        let model = two_hosts_per_leaf();
        let t = &model.topology;
        // Partition 1: hosts 2 and 3 (GPUs 16-31) and their leaves; the spines and every
        // other segment are partition 0.
        let partition_of = hosts_and_their_leaves(&model, &[2, 3], 1);
        let cut = Cut::new(&model, &partition_of, &[0, 1]);
        let mut draw = crate::topology::draws_from(15);
        let mut behind_one_inside = 0;
        for case in 0..200 {
            // From GPU 8: to GPU 32 over a spine, staying in partition 0; to GPU 16 or 24,
            // crossing where the spine comes down to their leaf.
            let (_, leaf) = at_the_leaf(&model, 8, 32, 4096);
            let mut lp = Lp::Fabric(FabricLp::new(&model, leaf));
            let mut pending: Vec<(EventKey, Event)> = Vec::new();
            let (mut seq, mut hops) = (0, Vec::new());
            let mut dsts = Vec::new();
            for _ in 0..1 + draw(12) {
                let dst = [32, 32, 16, 24][draw(4) as usize];
                dsts.push(dst);
                let (seg, at) = at_the_leaf(&model, 8, dst, 4096 * (1 + draw(256) as u32));
                assert_eq!(at, leaf);
                let mut out = Vec::new();
                let mut ctx = Ctx::new(SimTime::ZERO, leaf, &mut seq, &mut out, &mut hops);
                if let Lp::Fabric(f) = &mut lp {
                    f.handle(&model, Body::Segment(seg), &mut ctx);
                }
                pending.extend(out);
            }
            if dsts.len() > 2 && dsts[1] == 32 && dsts[2..].iter().any(|&d| d != 32) {
                behind_one_inside += 1;
            }
            // What the leaf promised once everything was queued.
            let mut promised = u64::MAX;
            for (key, event) in &pending {
                let target = (event.target == leaf).then_some(TargetState {
                    lp: &lp,
                    arriving_bytes: 0,
                });
                promised = promised.min(cut.event_promise(&model, key, event, target).as_ps());
            }
            if let Some(bounds) = cut.state_bounds(&model, leaf, &mut lp, 0) {
                for (from, reach) in bounds {
                    promised = promised.min(from.saturating_add(reach));
                }
            }
            // Drain: the events of partition 0 in time order (only what this leaf sent
            // on), every event for partition 1 checked.
            while let Some(i) = (0..pending.len()).min_by_key(|&i| pending[i].0) {
                let (key, event) = pending.swap_remove(i);
                if cut.partition_of[event.target as usize] != 0 {
                    assert!(
                        key.time.as_ps() >= promised,
                        "case {case} {dsts:?}: {} reaches node {} at {} ps, before the promise {promised} ps",
                        event.body.kind_name(),
                        event.target,
                        key.time.as_ps()
                    );
                    continue;
                }
                let target = event.target;
                let mut out = Vec::new();
                let mut ctx = Ctx::new(key.time, target, &mut seq, &mut out, &mut hops);
                match &mut lp {
                    Lp::Fabric(f) if target == leaf => f.handle(&model, event.body, &mut ctx),
                    // A spine of partition 0 passes the segment on as it would.
                    _ if t.nodes()[target as usize].kind == NodeKind::Spine => {
                        FabricLp::new(&model, target).handle(&model, event.body, &mut ctx)
                    }
                    _ => {}
                }
                pending.extend(out);
            }
        }
        assert!(
            behind_one_inside > 20,
            "{behind_one_inside} cases put a crossing segment behind one that stays inside"
        );
    }

    #[test]
    fn a_segment_whose_route_stays_inside_its_partition_promises_nothing() {
        let model = two_hosts_per_leaf();
        let cut = two_hosts_cut(&model);
        // Host 1's first GPU to host 0's, through their shared leaf.
        let (seg, leaf) = at_the_leaf(&model, 8, 0, 1 << 20);
        assert_eq!(cut.partition_of[leaf as usize], 0);
        let near = cut.distances[leaf as usize];
        assert!(near < u64::MAX, "the leaf is next to the cut (its spines)");
        // The receiver's acknowledgement goes to a sender inside, and a receive's end is the
        // receiving GPU's own promise: nothing the segment leads to crosses.
        assert_eq!(cut.segment_reach_ps(&model, leaf, &seg, true), u64::MAX);
    }

    #[test]
    fn a_segment_from_outside_reaches_back_after_its_route_and_acknowledgement() {
        let model = two_hosts_per_leaf();
        let cut = two_hosts_cut(&model);
        let (mut seg, leaf) = at_the_leaf(&model, 8, 0, 1 << 20);
        // As if sent from outside, the acknowledgement crosses `path_ps` after delivery.
        seg.src = model.topology.gpu(16);
        seg.path_ps = 7_000_000;
        let expected = rest_of_route_ps(&model, leaf, &seg) + seg.path_ps;
        assert_eq!(cut.segment_reach_ps(&model, leaf, &seg, false), expected);
        // The head's serialisation counts at every hop: a segment smaller than an MTU packet
        // gets there sooner.
        seg.bytes = 1024;
        let smaller = rest_of_route_ps(&model, leaf, &seg) + seg.path_ps;
        assert!(smaller < expected);
        assert_eq!(cut.segment_reach_ps(&model, leaf, &seg, false), smaller);
    }

    /// What `Walk::least_ps` relies on to follow one hop at a fabric switch when it looks
    /// for a route's latency ([`Topology::fabric_choices_are_alike`]).
    #[test]
    fn every_route_between_two_gpus_of_a_generated_fabric_takes_as_long() {
        let packet = two_hosts_per_leaf();
        let analytical = quickstart_with(&[
            "cluster.hosts_per_segment=2",
            "network.model=\"analytical\"",
        ]);
        let t = &packet.topology;
        assert!(t.fabric_choices_are_alike());
        let gpus = t.gpu_count();
        for (a, b) in (0..gpus)
            .step_by(3)
            .flat_map(|a| (0..gpus).step_by(5).map(move |b| (a, b)))
        {
            if a == b {
                continue;
            }
            let latencies: BTreeSet<u64> = (0..16)
                .map(|hash| {
                    let path = t.path(t.gpu(a), t.gpu(b), hash).expect("routed");
                    path.iter().map(|&l| t.link(l).latency_ps).sum()
                })
                .collect();
            assert_eq!(latencies.len(), 1, "GPU {a} -> {b}: {latencies:?}");
            // b alone in another partition: every route's first node outside is b, so the
            // search over every route (packet) and along one at each switch (analytical)
            // both give the route's latency.
            let b_apart: Vec<u32> = (0..t.nodes().len())
                .map(|n| u32::from(n as NodeId == t.gpu(b)))
                .collect();
            for model in [&packet, &analytical] {
                let reach = route_reach_ps(
                    model,
                    &b_apart,
                    &vec![0; t.nodes().len()],
                    (t.gpu(a), t.gpu(b)),
                    &mut FabricMemo::default(),
                    &mut Vec::new(),
                );
                assert_eq!(Some(&reach), latencies.first(), "GPU {a} -> {b}");
            }
        }
    }

    #[test]
    fn a_segment_that_may_pause_a_sender_outside_reaches_back_one_link() {
        let model = two_hosts_per_leaf();
        let cut = two_hosts_cut(&model);
        let t = &model.topology;
        let (mut seg, leaf) = at_the_leaf(&model, 8, 0, 1 << 20);
        // Arriving from a spine (partition 1): a pause would go back up that link.
        let up = t
            .out_links(leaf)
            .iter()
            .map(|&l| l ^ 1)
            .find(|&l| cut.partition_of[t.link(l).src as usize] == 1)
            .expect("a link from a spine");
        seg.ingress = up;
        let latency = t.link(up).latency_ps;
        assert_eq!(
            cut.segment_reach_ps(&model, leaf, &seg, true),
            latency.max(cut.distances[leaf as usize])
        );
        assert_eq!(cut.segment_reach_ps(&model, leaf, &seg, false), u64::MAX);
    }

    #[test]
    fn a_segment_leaving_its_partition_reaches_the_first_node_outside() {
        let model = two_hosts_per_leaf();
        let cut = two_hosts_cut(&model);
        let t = &model.topology;
        // Host 0's first GPU to host 2's: up to a spine, outside.
        let (seg, leaf) = at_the_leaf(&model, 0, 16, 1 << 20);
        let first = t.link(t.out_links(leaf)[seg.route.port(seg.hop).expect("carried")]);
        assert_eq!(cut.partition_of[first.dst as usize], 1);
        // Its head, one MTU packet, is there first (cut-through).
        let one_hop = first.latency_ps
            + serialisation_ps(model.net.mtu_bytes, ps_per_byte(first.bytes_per_s));
        assert_eq!(cut.segment_reach_ps(&model, leaf, &seg, true), one_hop);
        // Without a carried route, only the leaf's distance is known.
        let mut unrouted = seg;
        unrouted.route = Route::default();
        assert_eq!(
            cut.segment_reach_ps(&model, leaf, &unrouted, true),
            cut.distances[leaf as usize]
        );
    }
}
