//! Where a run's partitions meet, and how soon anything can cross them: the promises that
//! let a window end later than one lookahead (`worker/src/promise.rs` keeps them).
//!
//! An event's promise is a lower bound on the time of anything it leads to in another
//! partition. By default that is its time plus its target's distance to the cut (the
//! shortest latency path to another partition). Where the event says more, the bound is
//! tighter: a segment follows its carried route, so what it leads to crosses only where the
//! route does, where it came from (PFC back-pressure), or after its destination; a port's
//! `TxDone` sends the head of its queue and nothing else.

pub use super::reach::Cut;
use super::reach::is_gpu_lp;
use super::{Body, Event, Lp, SimModel};
use crate::event::EventKey;
use crate::time::SimTime;
use crate::topology::NodeId;

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

/// What the holder of a pending event knows of its target: its LP, and for a segment the
/// bytes of the segments pending for it over the same link, itself included.
#[derive(Debug, Clone, Copy)]
pub struct TargetState<'a> {
    pub lp: &'a Lp,
    pub arriving_bytes: u64,
}

impl Cut {
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
                    ..
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
}

#[cfg(test)]
mod route_tests {
    use std::collections::BTreeSet;

    use super::super::net::Route;
    use super::super::net::tests::{
        network_queues, quickstart_with, segment, two_hosts_per_leaf, walk,
    };
    use super::*;
    use crate::reach::{FabricMemo, route_reach_ps};
    use crate::serialisation_ps;
    use crate::time::ps_per_byte;
    use crate::topology::NodeKind;
    use crate::{P2P, Segment};

    /// Quickstart's fabric with two hosts per leaf, cut so that partition 0 holds hosts 0
    /// and 1 and the leaves their NICs hang from; everything else is partition 1.
    fn two_hosts_cut(model: &SimModel) -> Cut {
        Cut::new(model, &hosts_and_their_leaves(model, &[0, 1], 0), &[0, 1])
    }

    /// A two-partition map: the nodes of `hosts` and the leaves their NICs hang from in
    /// partition `theirs`, every other node (spines included) in the other.
    fn hosts_and_their_leaves(model: &SimModel, hosts: &[u32], theirs: u32) -> Vec<u32> {
        let t = &model.topology;
        let inside = |n: NodeId| hosts.contains(&{ t.nodes()[n as usize].host });
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
            total += l.latency.as_ps() + serialisation_ps(head, ps_per_byte(l.bytes_per_s));
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
                    path.iter().map(|&l| t.link(l).latency.as_ps()).sum()
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
        let latency = t.link(up).latency.as_ps();
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
        let one_hop = first.latency.as_ps()
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
