//! What a partitioning should balance and what it should not cut: the expected events of
//! every topology node and the expected bytes on every link, estimated from the compiled
//! workload before anything runs.
//!
//! - A rank's collectives send about `bytes × bus factor` (nccl-tests' convention, so an
//!   all-reduce moves `2(n−1)/n` of its buffer) to its ring neighbour in the group, in
//!   `bus factor × n` transfers (the ring's steps); sends go to their peer. Each such flow is
//!   routed over the fabric with the engine's routing, and its bytes are added to every link
//!   it crosses. All-to-all is counted on the ring neighbour too: an approximation, its
//!   traffic spreads over the group.
//! - Events, as the engine makes them (`sim-engine/src/net.rs`, `gpu/`): a GPU handles two
//!   per op. A flow whose path has a queued link is cut into segments, each transfer as the
//!   engine cuts it (`sim::segments::segment_size`); each segment is sent and
//!   acknowledged at its source, arrives at every other node that queues it (the near end of
//!   each queued link) and at its destination, and ends a transmission (about once per queued
//!   link); a node that only passes it on across analytical links gets no event. A flow that
//!   crosses analytical links only is one transfer: two events at each end.
//! - Event edges: bytes between the nodes that hand a flow's events to one another, its
//!   source, the near end of each queued link and its destination. A flow over analytical
//!   links joins its two ends directly: the switches it passes see nothing of it, so cutting
//!   between them costs nothing, and a partition that keeps both ends keeps the flow.
//! - Phases: where filling and draining the pipeline is a large share of it
//!   ([`PHASED_FILL_AND_DRAIN`]), events are also counted per pipeline stage of the rank
//!   whose op makes them (stages grouped into at most [`MAX_PHASES`]). Stages are busy at
//!   different times (warm-up, flush, a stage's own data-parallel reduction), so a
//!   partitioning that gives every partition its share of each stage keeps them evenly
//!   loaded through the iteration, not only on its total: the multi-phase balance of Karypis
//!   and Kumar ("Multilevel algorithms for multi-constraint graph partitioning", SC'98, §1).

use std::collections::BTreeMap;

use sim::segments::Segmenting;
use sim::workload::{OpKind, Peer, Workload};
use sim_ir::layout::GroupKind;
use sim_models::collective::bus_factor;
use sim_models::topology::{NodeId, Topology};

/// Most phases [`Load`] counts events in: pipeline stages beyond it are grouped.
pub const MAX_PHASES: u32 = 16;

/// The share of a pipeline's micro-batch slots spent filling and draining it from which
/// [`Load`] counts events per stage. Partitions that each hold whole stages then leave an
/// eighth of the workers idle or more with a barrier per window (half the stages wait
/// through fill and drain), which costs more than the data-parallel traffic that
/// per-stage balance makes cross: on the 8,192-GPU Llama 3 405B (PP 16, 16 micro-batches,
/// a 48% share) 8 workers ran 145,285 windows at 0.78 emulated efficiency with phases and
/// 680,551 at 0.40 without; on gpt3-175b-h100-1024 packet (PP 8, 96 micro-batches, 7%) 4
/// workers ran 674,516 windows without and 1,887,116 with (docs/partitioning.md).
pub const PHASED_FILL_AND_DRAIN: f64 = 0.25;

/// The share of a pipeline's micro-batch slots spent filling and draining it:
/// `(pp − 1) / (vp · m + pp − 1)` for `m` micro-batches per replica (Narayanan et al.,
/// SC'21, §2.2: the bubble of 1F1B, divided by the virtual stages with interleaving).
pub fn fill_and_drain_share(workload: &Workload) -> f64 {
    let layout = &workload.layout;
    let stages = f64::from(layout.pp.max(1));
    let slots = workload
        .programs
        .iter()
        .map(|p| p.micro_batches)
        .min()
        .unwrap_or(1)
        .max(1);
    let slots = f64::from(slots) * f64::from(layout.vp.max(1));
    (stages - 1.0) / (slots + stages - 1.0)
}

/// Expected load per node and per link.
#[derive(Debug, Clone)]
pub struct Load {
    pub link_bytes: Vec<f64>,
    /// Phases events are counted in (1 without pipeline stages), and each node's events
    /// per phase, `phase_events[node * phases + phase]`.
    pub phases: u32,
    pub phase_events: Vec<f64>,
    /// Bytes between nodes that hand each other a flow's events, `(a, b)` with `a < b`.
    pub event_edges: BTreeMap<(NodeId, NodeId), f64>,
    /// Whether it came from a workload ([`Load::estimate`]) or is [`Load::uniform`].
    pub from_workload: bool,
}

/// Traffic of one program, ops: bytes and transfers to each group's ring neighbour and to
/// each peer.
#[derive(Debug, Default)]
struct ProgramTraffic {
    ops: u64,
    to_group: BTreeMap<GroupKind, Flows>,
    to_peer: BTreeMap<u8, Flows>,
}

/// Bytes and the transfers that carry them.
#[derive(Debug, Default, Clone, Copy)]
struct Flows {
    bytes: f64,
    transfers: f64,
}

fn peer_index(p: Peer) -> u8 {
    match p {
        Peer::PpNext => 0,
        Peer::PpPrev => 1,
        Peer::CpNext => 2,
        Peer::CpPrev => 3,
    }
}

impl Load {
    /// Expected events of each of `groups` groups, given every node's group (an atom, a
    /// partition).
    pub fn events_by(&self, group_of: &[u32], groups: u32) -> Vec<f64> {
        let phases = self.phases as usize;
        let mut events = vec![0.0; groups as usize];
        for (node, &g) in group_of.iter().enumerate() {
            events[g as usize] += self.phase_events[node * phases..(node + 1) * phases]
                .iter()
                .sum::<f64>();
        }
        events
    }

    /// Expected events of each of `groups` groups per phase, `[group * phases + phase]`.
    pub fn phase_events_by(&self, group_of: &[u32], groups: u32) -> Vec<f64> {
        let phases = self.phases as usize;
        let mut events = vec![0.0; groups as usize * phases];
        for (node, &g) in group_of.iter().enumerate() {
            let from = &self.phase_events[node * phases..(node + 1) * phases];
            let to = &mut events[g as usize * phases..(g as usize + 1) * phases];
            for (t, f) in to.iter_mut().zip(from) {
                *t += f;
            }
        }
        events
    }

    /// One event per node and one byte per link: what partitions balance without a workload.
    pub fn uniform(topology: &Topology) -> Load {
        let nodes = topology.nodes().len();
        Load {
            link_bytes: vec![1.0; topology.links().len()],
            phases: 1,
            phase_events: vec![1.0; nodes],
            event_edges: BTreeMap::new(),
            from_workload: false,
        }
    }

    /// The load `workload` puts on `topology` under the network model `net`.
    pub fn estimate(topology: &Topology, workload: &Workload, net: &Segmenting) -> Load {
        let layout = &workload.layout;
        let traffic: Vec<ProgramTraffic> = workload
            .programs
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let program_layout = workload.program_layout(index);
                let group_size: BTreeMap<GroupKind, u32> = GroupKind::ALL
                    .iter()
                    .map(|&k| (k, program_layout.group(k, 0).len() as u32))
                    .collect();
                let mut t = ProgramTraffic {
                    ops: p.ops.len() as u64,
                    ..ProgramTraffic::default()
                };
                for op in &p.ops {
                    match op.kind {
                        OpKind::Collective { op, group, bytes } => {
                            let n = group_size.get(&group).copied().unwrap_or(1);
                            if n > 1 {
                                let bus = bus_factor(op, n);
                                let f = t.to_group.entry(group).or_default();
                                f.bytes += bytes as f64 * bus;
                                f.transfers += bus * f64::from(n);
                            }
                        }
                        OpKind::Send { peer, bytes } => {
                            let f = t.to_peer.entry(peer_index(peer)).or_default();
                            f.bytes += bytes as f64;
                            f.transfers += 1.0;
                        }
                        OpKind::Compute { .. }
                        | OpKind::Recv { .. }
                        | OpKind::MemoryRead { .. } => {}
                    }
                }
                t
            })
            .collect();
        let nodes = topology.nodes().len();
        let pp = layout.pp.max(1);
        // Several jobs fill and drain their pipelines apart: no common phases.
        let phases =
            if workload.jobs.is_none() && fill_and_drain_share(workload) >= PHASED_FILL_AND_DRAIN {
                pp.min(MAX_PHASES)
            } else {
                1
            };
        // With one phase every stage is in it (with jobs, a stage may exceed the first job's pp).
        let phase_of = |stage: u32| {
            (u64::from(stage.min(pp - 1)) * u64::from(phases) / u64::from(pp)) as usize
        };
        let mut events = PhaseEvents {
            phases: phases as usize,
            phase: 0,
            per_phase: vec![0.0; nodes * phases as usize],
        };
        let mut link_bytes = vec![0.0; topology.links().len()];
        let mut event_edges: BTreeMap<(NodeId, NodeId), f64> = BTreeMap::new();
        let (mut path, mut hops, mut handed) = (Vec::new(), Vec::new(), Vec::new());
        let mut flow = |src: NodeId, dst: NodeId, f: Flows, events: &mut PhaseEvents| {
            if src == dst || f.bytes <= 0.0 {
                return;
            }
            let hash = u64::from(src) << 32 | u64::from(dst);
            if topology
                .path_into(src, dst, hash, &mut path, &mut hops)
                .is_err()
            {
                return;
            }
            let queued = |l: u32| net.is_queued(topology.link(l).class);
            for &l in path.iter() {
                link_bytes[l as usize] += f.bytes;
            }
            // The nodes that hand the flow's events on: its ends and where it queues.
            handed.clear();
            handed.push(src);
            for &l in path.iter().filter(|&&l| queued(l)) {
                let near = topology.link(l).src;
                if handed.last() != Some(&near) {
                    handed.push(near);
                }
            }
            if handed.last() != Some(&dst) {
                handed.push(dst);
            }
            for pair in handed.windows(2) {
                let key = (pair[0].min(pair[1]), pair[0].max(pair[1]));
                *event_edges.entry(key).or_default() += f.bytes;
            }
            if !path.iter().any(|&l| queued(l)) {
                events.add(src, 2.0 * f.transfers);
                events.add(dst, 2.0 * f.transfers);
                return;
            }
            // Cut as the engine cuts each transfer.
            let per_transfer = (f.bytes / f.transfers).ceil() as u64;
            let size = net.segment_size(per_transfer) as f64;
            let segments = f.transfers * (per_transfer as f64 / size).ceil();
            // Sent and acknowledged at the source, arriving at the destination.
            events.add(src, 2.0 * segments);
            events.add(dst, segments);
            for &l in path.iter().filter(|&&l| queued(l)) {
                let queuing = topology.link(l).src;
                // A transmission, and an arrival unless the source queues it itself.
                let arrivals = if queuing == src { 0.0 } else { 1.0 };
                events.add(queuing, (1.0 + arrivals) * segments);
            }
        };
        let world = workload.rank_bound().min(topology.gpu_count());
        let is_rank = |r: u32| r < world && workload.is_rank(r);
        for rank in (0..world).filter(|&r| workload.is_rank(r)) {
            let program = workload.program_index(rank);
            let t = &traffic[program];
            let me = topology.gpu(rank);
            events.phase = phase_of(workload.programs[program].stage);
            events.add(me, 2.0 * t.ops as f64);
            for (&kind, &flows) in &t.to_group {
                let members = workload.group(kind, rank);
                let pos = members.iter().position(|&m| m == rank).unwrap_or(0);
                let next = members[(pos + 1) % members.len()];
                if is_rank(next) {
                    flow(me, topology.gpu(next), flows, &mut events);
                }
            }
            for (&peer, &flows) in &t.to_peer {
                let (kind, forward) = match peer {
                    0 => (GroupKind::Pp, true),
                    1 => (GroupKind::Pp, false),
                    2 => (GroupKind::Cp, true),
                    _ => (GroupKind::Cp, false),
                };
                let members = workload.group(kind, rank);
                let n = members.len();
                let pos = members.iter().position(|&m| m == rank).unwrap_or(0);
                let other = members[if forward {
                    (pos + 1) % n
                } else {
                    (pos + n - 1) % n
                }];
                if is_rank(other) {
                    flow(me, topology.gpu(other), flows, &mut events);
                }
            }
        }
        // Every node costs something, so no atom weighs nothing.
        let phases = events.phases;
        for node_phases in events.per_phase.chunks_mut(phases) {
            for e in node_phases {
                *e += 1.0 / phases as f64;
            }
        }
        Load {
            link_bytes,
            phases: phases as u32,
            phase_events: events.per_phase,
            event_edges,
            from_workload: true,
        }
    }
}

/// Events per node and phase, added in the phase of the rank being counted.
struct PhaseEvents {
    phases: usize,
    phase: usize,
    per_phase: Vec<f64>,
}

impl PhaseEvents {
    fn add(&mut self, node: NodeId, events: f64) {
        self.per_phase[node as usize * self.phases + self.phase] += events;
    }
}
