//! What an LP does when an event arrives (DESIGN.md, "The event model"): the semantics of the
//! simulation, independent of how it is executed. `worker/` owns queues, windows and threads;
//! this module owns LP state and event handlers.
//!
//! - One LP per topology node ([`Lp`]): a GPU runs its rank's program ([`gpu`]); every node
//!   with queued output ports (NICs, switches, and in `intra_host = "packet"` mode NVSwitches
//!   and PCIe switches) forwards segments ([`net`]).
//! - An LP touches only its own state. It talks to other LPs only through events it emits via
//!   [`Ctx`], each at least one link latency in the future when it crosses a link, so any
//!   partition's lookahead (the smallest latency of a cut link) is respected.
//! - Every event key is `(time, origin LP, origin sequence)`; an LP numbers the events it
//!   emits. Same inputs, same event sequence per LP, whatever the partitioning.

pub mod cut;
pub mod dcqcn;
pub mod flow;
pub mod gpu;
pub mod host_memory;
mod memory_node;
pub mod net;
pub mod params;
pub(crate) mod reach;
pub mod results;
pub mod symmetry;

use serde::{Deserialize, Serialize};

// The layers below under the names the engine's code uses (`crate::time`, `crate::topology`),
// each from the crate it lives in.
use sim::{experiment, load, segments, workload};
use sim_config as config;
use sim_ir::{event, hash, layout, slab, time};
use sim_models::{collective, compute, fault, topology};

use crate::compute::{ComputeModel, Interference};
use crate::event::EventKey;
use crate::experiment::Experiment;
use crate::hash::splitmix64;
use crate::layout::GroupKind;
use crate::time::SimTime;
use crate::topology::{LinkId, NodeId, NodeKind, Topology};
use crate::workload::{Op, OpKind, Program, Stream, Workload};

pub use params::NetworkParams;

/// Serialisation time of `bytes` at `ps_per_byte`, integer picoseconds: LP-internal
/// arithmetic (ARCHITECTURE.md, `time.rs`), never part of the engine's API.
pub(crate) fn serialisation_ps(bytes: u64, ps_per_byte: f64) -> u64 {
    crate::time::round_ps(bytes as f64 * ps_per_byte)
}
pub use results::{CollectiveKey, Incomplete, LpReport, RunResults};

/// Identifies a message at its receiver: the receiver's stream; the communicator (a group
/// kind, or [`P2P`]) and the op's sequence number on it (the k-th collective of a group
/// matches the k-th on every member, as NCCL communicators order their operations); and the
/// algorithm step or chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Tag {
    pub stream: u8,
    pub group: u8,
    pub seq: u32,
    pub step: u16,
}

/// [`Tag::group`] of point-to-point sends and receives: their sequence is the op's position
/// on its stream (the k-th send to the next stage matches its k-th receive from the previous).
pub const P2P: u8 = u8::MAX;

/// [`Tag::group`] of a collective: its communicator. A group kind's collectives share one
/// (NCCL runs a process group's collectives in order), except those on [`Stream::Amax`],
/// whose process group is its own: they match among themselves, numbered apart.
pub fn communicator(group: GroupKind, stream: Stream) -> u8 {
    match stream {
        Stream::Amax => group as u8 + GroupKind::COUNT as u8,
        _ => group as u8,
    }
}

/// How many communicators [`communicator`] numbers.
pub const COMMUNICATORS: usize = 2 * GroupKind::COUNT;

/// The group kind of communicator `comm` ([`communicator`]); `None` for [`P2P`] and the
/// other tags that are not collectives'.
pub fn communicator_group(comm: u8) -> Option<GroupKind> {
    if usize::from(comm) >= COMMUNICATORS {
        return None;
    }
    GroupKind::from_index(comm % GroupKind::COUNT as u8)
}

/// [`Tag::group`] of injected flows ([`SimModel::flows`]); `seq` is the flow's index.
pub const INJECTED: u8 = u8::MAX - 1;

/// [`Tag::group`] of CXL memory transfers; `seq` is the op's index in its program.
pub const MEMORY_GROUP: u8 = u8::MAX - 2;

/// A flow injected outside any workload: traffic patterns for network experiments and
/// tests (incast, ECMP collisions, congestion control), between GPU ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub start: SimTime,
}

/// A piece of a flow on its way through the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Sending and receiving GPU nodes.
    pub src: NodeId,
    pub dst: NodeId,
    /// The sender's flow slot, echoed in acknowledgements.
    pub flow: u32,
    pub bytes: u32,
    pub hash: u64,
    pub tag: Tag,
    /// One-way latency of the flow's path: acknowledgements take it back to the sender.
    pub(crate) path_ps: u64,
    /// The queued link the segment arrived on, [`NO_LINK`] when it skipped analytical links.
    pub ingress: LinkId,
    /// The reverse of `ingress` among the receiving node's out links, from the sending port
    /// ([`net::NO_PORT`] when unknown): the receiver charges its buffer there.
    pub ingress_port: u8,
    /// The whole route, planned by the sender; empty when each hop routes itself.
    pub route: net::Route,
    /// Links crossed so far; ECMP picks by `(hash, hop)` as [`Topology::path`] does.
    pub hop: u8,
    pub last: bool,
    /// What makes the message whole at the receiver. Routed by ECMP: the queue pairs the
    /// flow's segments are split over (NCCL_IB_SPLIT_DATA_ON_QPS, 1 unsplit), each taking
    /// its own path in order and marking its final segment `last`: the message is complete
    /// when that many `last` segments have arrived. Routed adaptively: the flow's segment
    /// count modulo 2^16, which the receiver counts, since segments overtake each other.
    pub completion: u16,
    /// ECN and PXN relay marks ([`Segment::ecn`], [`Segment::relayed`]): one byte, so that
    /// an event keeps within 80 bytes with `completion`.
    marks: u8,
    /// PXN relay: the GPU whose NIC carries the segment, [`NO_NODE`] when none. Routing goes
    /// to it first, then on from it as if it had sent the segment.
    pub via: NodeId,
    /// Picoseconds from the segment's head reaching the node its event is for to its tail
    /// reaching it: switches forward MTU packets as they come (cut-through at segment
    /// level, [`net::cut_through`]), so a segment is spread over its path. 0 at the sender.
    pub(crate) lag_ps: u32,
}

/// "No node" in [`Segment::via`].
pub const NO_NODE: NodeId = u32::MAX;

impl Segment {
    const ECN: u8 = 1;
    const RELAYED: u8 = 2;

    /// ECN congestion-experienced mark.
    pub fn ecn(&self) -> bool {
        self.marks & Self::ECN != 0
    }

    pub fn set_ecn(&mut self) {
        self.marks |= Self::ECN;
    }

    /// The segment has passed `via`.
    pub fn relayed(&self) -> bool {
        self.marks & Self::RELAYED != 0
    }

    pub fn set_relayed(&mut self) {
        self.marks |= Self::RELAYED;
    }

    /// The (source, destination) its next hop is routed for.
    pub fn leg(&self) -> (NodeId, NodeId) {
        match (self.via, self.relayed()) {
            (NO_NODE, _) => (self.src, self.dst),
            (via, false) => (self.src, via),
            (via, true) => (via, self.dst),
        }
    }
}

/// "No link" in [`Segment::ingress`].
pub const NO_LINK: LinkId = u32::MAX;

/// What happens to an LP.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// The last kernel of the compute stream's chain planned as generation `chain` finished
    /// (an older generation's is stale: the chain was planned again).
    ComputeDone {
        chain: u32,
    },
    /// A segment reaches the target node.
    Segment(Segment),
    /// The target's port `port` (an index among its out links) finished serialising its
    /// head segment.
    TxDone {
        port: u32,
    },
    /// PFC pause / resume of the target's output port on `link`.
    Pause {
        link: LinkId,
    },
    Resume {
        link: LinkId,
    },
    /// The receiver got `bytes` of a flow; `ecn` echoes a congestion mark (DCQCN's CNP).
    Ack {
        flow: u32,
        bytes: u32,
        ecn: bool,
    },
    /// A whole message, delivered by the analytical model.
    Message {
        tag: Tag,
    },
    /// A member reached a collective that completes in closed form: sent to the group's
    /// leader with `done_ps`, the time the member's link was free to start it plus the
    /// collective's duration. It is due at the leader at `due_ps` (one latency after the
    /// member started) but delivered at `max(due_ps, done_ps − longest link)`: the leader
    /// reckons from `due_ps`, so the result is the same, answers no sooner than `done_ps`,
    /// so it still answers at least one lookahead after handling it, and partitions run on
    /// meanwhile.
    Arrived {
        tag: Tag,
        done_ps: u64,
        due_ps: u64,
        /// The group lies within one NVLink domain ([`gpu`]'s closed form): where the
        /// leader is in the sender's partition, the runner hands the arrival over at once
        /// ([`Lp::arrive_inline`]) instead of queuing it. The answer is the same either way:
        /// the leader reckons from `due_ps` and answers under keys of its own
        /// ([`Ctx::emit_derived`]).
        inline: bool,
    },
    /// The analytical sends of the op on stream `stream` have been delivered.
    SendDone {
        stream: u8,
    },
    /// The receiver posted the receive matching `tag` (NCCL rendezvous for send/receive).
    ClearToSend {
        tag: Tag,
    },
    /// DCQCN pacing: the flow may send its next segment.
    Pace {
        flow: u32,
    },
    /// The chunk a serial connection sent over analytical links has left the GPU: the
    /// connection may start its next one.
    ConnectionFree {
        connection: u32,
    },
    /// Start injected flow `index` of [`SimModel::flows`].
    StartFlow {
        index: u32,
    },
    /// To a CXL memory node: move `bytes` between it and GPU `reply_to`, then answer with
    /// a [`Body::Message`] carrying `tag`. The GPU's route gives the path's one-way latency
    /// and bottleneck rate.
    MemoryRead {
        bytes: u64,
        reply_to: NodeId,
        tag: Tag,
        latency_ps: u64,
        bytes_per_s: f64,
    },
    /// A CXL memory node's link finished a chunk: serve the next.
    MemoryTick,
    /// To the fabric's flow LP: a transfer over shared links starts (`network.model =
    /// "flow"`).
    FlowStart(flow::FlowRequest),
    /// To the fabric's flow LP: a member of a ring collective is ready; the ring runs as
    /// one flow per lane once every member is (`network.model = "flow"`).
    RingJoin(Box<flow::RingJoin>),
    /// The flow LP's next flow finishes.
    FlowTick,
    /// To the sender: transfer `flow` was delivered (the fluid model's last acknowledgement).
    FlowDone {
        flow: u32,
    },
    /// To a GPU whose job starts later (`[[jobs]] start_s`): start the program now.
    JobStart,
    /// The host has issued an op a stream of this GPU waits for ([`crate::compute::host`]).
    HostIssued,
}

impl Body {
    /// How many kinds of event there are: the length of a table by [`Body::kind_index`].
    pub const KINDS: usize = 21;

    /// Every kind's name, indexed by [`Body::kind_index`].
    pub const KIND_NAMES: [&'static str; Body::KINDS] = [
        "ComputeDone",
        "Segment",
        "TxDone",
        "Pause",
        "Resume",
        "Ack",
        "Message",
        "Arrived",
        "SendDone",
        "ClearToSend",
        "Pace",
        "ConnectionFree",
        "StartFlow",
        "MemoryRead",
        "MemoryTick",
        "FlowStart",
        "RingJoin",
        "FlowTick",
        "FlowDone",
        "JobStart",
        "HostIssued",
    ];

    /// The event kind's name, for diagnostics (a causality error names what crossed) and the
    /// count of events by kind.
    pub fn kind_name(&self) -> &'static str {
        Body::KIND_NAMES[self.kind_index()]
    }

    /// The event kind's place in [`Body::KIND_NAMES`].
    pub fn kind_index(&self) -> usize {
        match self {
            Body::ComputeDone { .. } => 0,
            Body::Segment(_) => 1,
            Body::TxDone { .. } => 2,
            Body::Pause { .. } => 3,
            Body::Resume { .. } => 4,
            Body::Ack { .. } => 5,
            Body::Message { .. } => 6,
            Body::Arrived { .. } => 7,
            Body::SendDone { .. } => 8,
            Body::ClearToSend { .. } => 9,
            Body::Pace { .. } => 10,
            Body::ConnectionFree { .. } => 11,
            Body::StartFlow { .. } => 12,
            Body::MemoryRead { .. } => 13,
            Body::MemoryTick => 14,
            Body::FlowStart(_) => 15,
            Body::RingJoin(_) => 16,
            Body::FlowTick => 17,
            Body::FlowDone { .. } => 18,
            Body::JobStart => 19,
            Body::HostIssued => 20,
        }
    }
}

/// Bytes from an address that an event's handler will read ([`Lp::hot_state`]): a hint to
/// load them early, never read through.
pub type HotSpan = (*const u8, usize);

/// No hint.
pub const NO_SPAN: HotSpan = (std::ptr::null(), 0);

/// The spans an event's handler reads ([`Lp::hot_state`]), [`NO_SPAN`] where fewer.
pub type HotSpans = [HotSpan; 4];

/// An event addressed to an LP (a topology node).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub target: NodeId,
    pub body: Body,
}

/// The sequences at and above this are derived keys ([`Ctx::emit_derived`]); an LP's
/// running count stays below it (the runner stops a run that reaches it).
pub const DERIVED_SEQ: u64 = 1 << 31;

/// A derived id's low bits name a member; the bits above, its family: one closed-form
/// collective's answers and its leader's own end.
pub const DERIVED_MEMBER_BITS: u32 = 7;

/// The family of a key's sequence when it is derived ([`DERIVED_MEMBER_BITS`]), `None` for a
/// running count. An LP emits a family's events from one handler, so among every event
/// pending anywhere, nothing lies between those of one family at one time: a runner may
/// queue them as one and hand them out in turn, until one it hands out queues an event at
/// that same time.
pub fn derived_family(origin_seq: u64) -> Option<u64> {
    (origin_seq & DERIVED_SEQ != 0).then_some(origin_seq >> DERIVED_MEMBER_BITS)
}

/// How an LP emits events. The runner routes what lands in `out` to the local queue or a
/// mailbox. `seq` is the LP's origin sequence counter, kept by the runner beside the LP.
#[derive(Debug)]
pub struct Ctx<'a> {
    pub now: SimTime,
    pub lp: NodeId,
    seq: &'a mut u64,
    pub out: &'a mut Vec<(EventKey, Event)>,
    /// Scratch for routing.
    pub hops: &'a mut Vec<LinkId>,
}

impl<'a> Ctx<'a> {
    pub fn new(
        now: SimTime,
        lp: NodeId,
        seq: &'a mut u64,
        out: &'a mut Vec<(EventKey, Event)>,
        hops: &'a mut Vec<LinkId>,
    ) -> Self {
        Ctx {
            now,
            lp,
            seq,
            out,
            hops,
        }
    }

    /// Schedules `body` at `target` at time `at` (≥ now), under a key whose sequence is
    /// `id` among the LP's derived keys ([`DERIVED_SEQ`]) rather than its running count: for
    /// an event whose key must not depend on when the LP created it (a closed-form answer,
    /// created when the last arrival is applied, which an inline arrival does early).
    pub fn emit_derived(&mut self, target: NodeId, at: SimTime, body: Body, id: u32) {
        debug_assert!(at >= self.now);
        let key = EventKey {
            time: at,
            origin_lp: self.lp,
            origin_seq: DERIVED_SEQ | u64::from(id & (DERIVED_SEQ as u32 - 1)),
        };
        self.out.push((key, Event { target, body }));
    }

    /// Schedules `body` at `target` at time `at` (≥ now).
    pub fn emit(&mut self, target: NodeId, at: SimTime, body: Body) {
        debug_assert!(at >= self.now);
        let key = EventKey {
            time: at,
            origin_lp: self.lp,
            origin_seq: *self.seq,
        };
        *self.seq += 1;
        self.out.push((key, Event { target, body }));
    }
}

/// Per-program lookup tables the GPU LPs share.
#[derive(Debug)]
pub struct ProgramIndex {
    /// Op indices of each stream, in order.
    pub stream_ops: [Vec<u32>; Stream::COUNT],
    /// Position of every op on its stream.
    pub position: Vec<u32>,
    /// For every op, the streams of the ops that depend on it (a bit per stream): when it
    /// finishes, only those streams' heads, and its own stream's, can become ready.
    pub dependent_streams: Vec<u32>,
    /// For every position on the compute stream: the kernel there and the next one form a
    /// chain. The next starts the moment this one ends (it waits for nothing else), and
    /// nothing on another stream waits for this one, so one event can stand for both.
    pub chains_into_next: Vec<bool>,
    /// For every op, its collective's slot in [`Self::collective_keys`] ([`NO_SLOT`] for
    /// other ops): a rank keeps its plan and statistics of each there, found by index.
    pub collective_slot: Vec<u16>,
    /// The program's distinct collectives, (group kind, operation, bytes), sorted.
    pub collective_keys: Vec<CollectiveKey>,
}

/// One program's kernel times on one GPU type summed along its compute stream: entry `i`
/// covers the kernels at positions `[0, i)`. A GPU's promise asks for the least time of a
/// run of kernels ([`Self::least_ps`]) once per window; summing them one by one made the
/// promises most of a many-threaded MoE run (EP all-to-alls cross partitions every layer).
#[derive(Debug, Clone, Default)]
pub struct ComputePrefix {
    /// Compute-bound kernels (they follow the chip's clock), ps.
    clocked_ps: Vec<u64>,
    /// How many kernels those are.
    clocked: Vec<u32>,
    /// The other kernels, ps.
    other_ps: Vec<u64>,
}

impl ComputePrefix {
    fn new(program: &Program, compute_ops: &[u32], times: &[SimTime], clocked: &[bool]) -> Self {
        let n = compute_ops.len() + 1;
        let mut prefix = ComputePrefix {
            clocked_ps: Vec::with_capacity(n),
            clocked: Vec::with_capacity(n),
            other_ps: Vec::with_capacity(n),
        };
        let (mut on_clock, mut count, mut other) = (0u64, 0u32, 0u64);
        for &op in compute_ops {
            prefix.clocked_ps.push(on_clock);
            prefix.clocked.push(count);
            prefix.other_ps.push(other);
            if let OpKind::Compute { kernel } = program.ops[op as usize].kind {
                let t = times[kernel as usize].as_ps();
                if clocked[kernel as usize] {
                    on_clock += t;
                    count += 1;
                } else {
                    other += t;
                }
            }
        }
        prefix.clocked_ps.push(on_clock);
        prefix.clocked.push(count);
        prefix.other_ps.push(other);
        prefix
    }

    /// No more than the time of the kernels at positions `[from, to)` on a chip whose
    /// compute-bound kernels take `slowdown` times their table's time, each rounded to the
    /// picosecond, then divided by `rate` (floored) where it exceeds 1: it may fall short by
    /// a few picoseconds per kernel, as a promise may, and never exceeds the true sum.
    pub fn least_ps(&self, from: u32, to: u32, slowdown: f64, rate: f64) -> u64 {
        let (a, b) = (from as usize, to as usize);
        let kernels = (b - a) as u64;
        let clocked = self.clocked_ps[b] - self.clocked_ps[a];
        let rounded = u64::from(self.clocked[b] - self.clocked[a]);
        // Each kernel rounds to at least its exact product less half a picosecond; one more
        // picosecond for the float product.
        let chip = (self.other_ps[b] - self.other_ps[a])
            + ((clocked as f64 * slowdown).floor() as u64).saturating_sub(rounded + 1);
        if rate > 1.0 {
            // Each kernel's quotient is floored: a picosecond less at most.
            ((chip as f64 / rate).floor() as u64).saturating_sub(kernels + 1)
        } else {
            chip
        }
    }
}

/// "Not a collective" in [`ProgramIndex::collective_slot`].
pub const NO_SLOT: u16 = u16::MAX;

impl ProgramIndex {
    pub fn new(program: &Program) -> Self {
        let mut stream_ops: [Vec<u32>; Stream::COUNT] = Default::default();
        let mut position = Vec::with_capacity(program.ops.len());
        let mut dependent_streams = vec![0u32; program.ops.len()];
        for (i, op) in program.ops.iter().enumerate() {
            let s = &mut stream_ops[op.stream.index()];
            position.push(s.len() as u32);
            s.push(i as u32);
            for &d in program.deps(i) {
                dependent_streams[d as usize] |= 1 << op.stream.index();
            }
        }
        let compute = &stream_ops[Stream::Compute.index()];
        let only_compute = 1u32 << Stream::Compute.index();
        let is_kernel = |op: u32| matches!(program.ops[op as usize].kind, OpKind::Compute { .. });
        let chains_into_next = (0..compute.len())
            .map(|p| {
                let Some(&next) = compute.get(p + 1) else {
                    return false;
                };
                let this = compute[p];
                // A host sync between them: the host issues `next` only once it is resolved.
                let syncs = &program.host_syncs;
                let first_after = syncs.partition_point(|&op| op < this);
                let synced = syncs.get(first_after).is_some_and(|&op| op <= next);
                is_kernel(this)
                    && is_kernel(next)
                    && !synced
                    && dependent_streams[this as usize] & !only_compute == 0
                    && program
                        .deps(next as usize)
                        .iter()
                        .all(|&d| program.ops[d as usize].stream == Stream::Compute)
            })
            .collect();
        let key = |op: &Op| match op.kind {
            OpKind::Collective { op, group, bytes } => Some((group as u8, op as u8, bytes)),
            _ => None,
        };
        let mut collective_keys: Vec<CollectiveKey> = program.ops.iter().filter_map(key).collect();
        collective_keys.sort_unstable();
        collective_keys.dedup();
        let collective_slot = program
            .ops
            .iter()
            .map(|op| {
                key(op).map_or(NO_SLOT, |k| {
                    collective_keys
                        .binary_search(&k)
                        .map_or(NO_SLOT, |i| i as u16)
                })
            })
            .collect();
        ProgramIndex {
            stream_ops,
            position,
            dependent_streams,
            chains_into_next,
            collective_slot,
            collective_keys,
        }
    }
}

/// Everything LPs read and nobody writes during a run: shared by all partitions and threads.
#[derive(Debug)]
pub struct SimModel {
    pub topology: Topology,
    pub workload: Workload,
    pub programs: Vec<ProgramIndex>,
    /// Kernel durations, `kernel_times[program * gpu_types + gpu_type][kernel]`.
    pub kernel_times: Vec<Vec<SimTime>>,
    /// Whether each of those kernels is compute-bound (follows the GPU's own clock).
    pub kernel_clocked: Vec<Vec<bool>>,
    /// Running sums of those times along each program's compute stream, indexed as
    /// `kernel_times`: the least time of any run of kernels in O(1) ([`ComputePrefix`]).
    pub compute_prefix: Vec<ComputePrefix>,
    /// When the host has issued each op if it never waits for the GPU, from the rank's
    /// start: the running sum of [`crate::compute::host::issue_costs`], indexed as
    /// `kernel_times`. Empty where issuing costs nothing (every op in a CUDA graph, or a
    /// collective benchmark's C loop).
    pub host_issued: Vec<Vec<SimTime>>,
    /// Chip-to-chip spread of the sustained clock, per GPU type.
    pub clock_spread: Vec<f64>,
    pub gpu_types: usize,
    pub net: NetworkParams,
    pub interference: Interference,
    pub seed: u64,
    /// Record per-op and per-link spans for the trace.
    pub trace: bool,
    /// Flows injected besides the workload (empty for training runs).
    pub flows: Vec<FlowSpec>,
    pub collectives: CollectiveModel,
    /// `network.model = "flow"`: the fabric node whose LP solves every flow's rate
    /// ([`flow::FlowHome`]); `None` in the other models or without shared links.
    pub flow_home: Option<NodeId>,
    /// How far in the future a GPU's request reaches the flow LP, and the least delay of
    /// its answers: the smallest latency of a shared link. Caps the lookahead.
    pub flow_delay: SimTime,
    /// The largest latency of any link: no partitioning's lookahead (its cut links' least
    /// latency) exceeds it, so an LP may hold back an event by up to this much before it is
    /// needed ([`Body::Arrived`]) without knowing the partitioning.
    pub longest_link: SimTime,
    /// `[[faults]]` on GPUs and the job: slow GPUs, kernel jitter, parts that go down.
    pub faults: crate::fault::Faults,
    /// Whether one data-parallel replica stands for all ([`symmetry::Symmetry`]); the
    /// workload's `one_replica` follows it.
    pub symmetry: symmetry::Symmetry,
    /// `engine.chain_ends_ahead`: a GPU may handle a chain's end as the chain starts
    /// (`GpuLp::chain_end_is_foregone`).
    pub chain_ends_ahead: bool,
}

/// What the collective model needs beyond the topology.
#[derive(Debug, Clone)]
pub struct CollectiveModel {
    pub settings: crate::collective::Settings,
    /// Per GPU type.
    pub arch: Vec<crate::collective::Arch>,
    pub nics_per_host: u32,
    /// The cluster has a CXL tier: hosts of one group may be reached over different link
    /// classes (CXL behind a shared switch, the network beyond).
    pub cxl_fabric: bool,
}

impl CollectiveModel {
    pub fn from_experiment(
        exp: &Experiment,
        topology: &Topology,
    ) -> Result<CollectiveModel, crate::config::ConfigError> {
        let c = &exp.loaded.config.collectives;
        let mut settings = crate::collective::Settings::from_config(c);
        use crate::collective::deepep::{FlexBackend, FlexDispatch, MoeRouting};
        let backend = match exp.loaded.config.training.moe_token_dispatcher {
            crate::config::MoeTokenDispatcher::Alltoall => None,
            crate::config::MoeTokenDispatcher::Deepep => Some(FlexBackend::DeepEp),
            crate::config::MoeTokenDispatcher::Hybridep => Some(FlexBackend::HybridEp),
        };
        settings.flex = backend.and_then(|backend| {
            let moe = exp.model.as_ref().and_then(|m| m.moe)?;
            Some(FlexDispatch {
                routing: MoeRouting {
                    experts: moe.experts,
                    top_k: moe.top_k,
                    groups: moe.router_groups,
                },
                backend,
            })
        });
        // The coherent ring needs cache-coherent memory; a non-coherent CXL tier only moves data.
        if exp.cxl_coherent() == Some(false) {
            if settings.algorithm == Some(crate::collective::Algorithm::CoherentRing) {
                return Err(exp.loaded.error(
                    "collectives.algorithm",
                    "coherent-ring needs a coherent CXL fabric, but cluster.cxl.coherent = false; choose another algorithm or make the fabric coherent",
                ));
            }
            settings.coherent_ring = false;
        }
        for (key, v) in [
            ("min_channels", c.min_channels),
            ("max_channels", c.max_channels),
        ] {
            if let Some(v) = v
                && !(1..=32).contains(&v)
            {
                return Err(exp.loaded.error(
                    &format!("collectives.{key}"),
                    format!("{v} is outside NCCL's 1 to 32 channels"),
                ));
            }
        }
        // (key, value, NCCL's default, smallest, largest accepted)
        for (key, v, default, min, max) in [
            ("buffsize", c.buffsize, 4u64 << 20, 4 << 10, 1 << 30),
            (
                "p2p_net_chunksize",
                c.p2p_net_chunksize,
                128 << 10,
                4 << 10,
                64 << 20,
            ),
        ] {
            if !(min..=max).contains(&v) {
                return Err(exp.loaded.error(
                    &format!("collectives.{key}"),
                    format!(
                        "{v} bytes is outside {} KiB to {} MiB; NCCL's default is {default}",
                        min >> 10,
                        max >> 20
                    ),
                ));
            }
        }
        // (key, value, values accepted, what they mean)
        for (key, v, accepted, meaning) in [
            (
                "cross_nic",
                u32::from(c.cross_nic),
                0..=2,
                "0 (rings stay on one rail), 1 (rings may cross rails) or 2 (NCCL's default: on one rail where possible)",
            ),
            (
                "ib_split_data_on_qps",
                u32::from(c.ib_split_data_on_qps),
                0..=1,
                "0 (NCCL's default: messages take turns on the QPs) or 1 (every message is split over all QPs)",
            ),
            (
                "ib_qps_per_connection",
                c.ib_qps_per_connection,
                1..=128,
                "1 to 128 queue pairs per connection (NCCL's default is 1)",
            ),
        ] {
            if !accepted.contains(&v) {
                return Err(exp.loaded.error(
                    &format!("collectives.{key}"),
                    format!("{v} is not valid; use {meaning}"),
                ));
            }
        }
        if settings.min_channels > settings.max_channels {
            return Err(exp.loaded.error(
                "collectives.min_channels",
                format!(
                    "{} is above collectives.max_channels ({}); lower it or raise the maximum",
                    settings.min_channels, settings.max_channels
                ),
            ));
        }
        let kinds = topology.count_by_kind();
        let nics = kinds.get(&NodeKind::Nic).copied().unwrap_or(0);
        Ok(CollectiveModel {
            settings,
            arch: exp
                .gpu_types
                .iter()
                .map(|g| crate::collective::Arch::from_name(&g.architecture))
                .collect(),
            nics_per_host: nics / topology.host_count().max(1),
            cxl_fabric: kinds.contains_key(&NodeKind::CxlSwitch),
        })
    }
}

impl SimModel {
    /// The GPU whose NIC carries rank `rank`'s send to GPU node `peer` (PXN, unless
    /// `collectives.pxn_disable`: [`crate::topology::Topology::p2p_relay`]), or [`NO_NODE`].
    pub fn p2p_via(&self, rank: u32, peer: NodeId) -> NodeId {
        if self.collectives.settings.pxn_disable {
            return NO_NODE;
        }
        let topology = &self.topology;
        let peer_rank = topology.nodes()[peer as usize].index;
        topology
            .p2p_relay(rank, peer_rank)
            .map_or(NO_NODE, |relay| topology.gpu(relay))
    }

    /// The experiment's model as a run simulates it: its workload loaded or compiled
    /// ([`crate::load::load_or_compile`]), every kernel timed by the experiment's compute
    /// model, and the topology built.
    pub fn from_experiment(
        exp: &Experiment,
        trace: bool,
    ) -> Result<SimModel, crate::config::ConfigError> {
        let workload = crate::load::load_or_compile(exp, None)?;
        let compute = exp.compute_model()?;
        SimModel::build(exp, workload, &compute, trace)
    }

    /// Builds the topology and times every kernel of `workload`.
    pub fn build(
        exp: &Experiment,
        workload: Workload,
        compute: &ComputeModel,
        trace: bool,
    ) -> Result<SimModel, crate::config::ConfigError> {
        let (topology, timed_link_faults) = exp.build_topology_and_timed_faults()?;
        let net = NetworkParams::from_experiment(exp, &topology)?;
        let collectives = CollectiveModel::from_experiment(exp, &topology)?;
        // With [[jobs]], each job's kernels are timed by its own compute model (its
        // training.attention_backend) and issued under its own CUDA graphs.
        let job_computes = exp
            .jobs
            .iter()
            .map(|job| job.exp.compute_model())
            .collect::<Result<Vec<_>, _>>()?;
        let ((programs, kernel_times, kernel_clocked), host_issued) = match &workload.jobs {
            Some(set) if job_computes.len() == set.jobs.len() => {
                let job = |p: usize| set.job_of_program(p);
                (
                    workload_tables(exp, &workload, |p| &job_computes[job(p)]),
                    host_tables(exp, &workload, |p| {
                        exp.jobs[job(p)].exp.loaded.config.training.cuda_graphs
                    })?,
                )
            }
            _ => (
                workload_tables(exp, &workload, |_| compute),
                host_tables(exp, &workload, |_| exp.loaded.config.training.cuda_graphs)?,
            ),
        };
        let gpu_types = exp.gpu_types.len();
        check_slow_gpus(exp, &workload, |rank| {
            let program = workload.program_index(rank);
            let table = program * gpu_types + usize::from(topology.gpu_type(rank));
            (kernel_times[table].clone(), kernel_clocked[table].clone())
        })?;
        let (flow_home, flow_delay) = flow_home(&topology, &net);
        let longest_link = topology
            .links()
            .map(|l| l.latency)
            .max()
            .unwrap_or(SimTime::ZERO);
        let clock_spread: Vec<f64> = exp
            .gpu_types
            .iter()
            .map(|g| compute.clock_spread(g))
            .collect();
        let symmetry = symmetry::Symmetry::decide(exp, &workload, &topology, &net, &clock_spread);
        let mut workload = workload;
        workload.one_replica = matches!(symmetry, symmetry::Symmetry::OneReplica { .. });
        Ok(SimModel {
            topology,
            workload,
            programs,
            kernel_times,
            kernel_clocked,
            compute_prefix: Vec::new(),
            host_issued,
            clock_spread,
            gpu_types,
            net,
            interference: Interference::from_config(&exp.loaded.config.compute),
            seed: exp.loaded.config.engine.seed,
            trace,
            flows: Vec::new(),
            collectives,
            flow_home,
            flow_delay,
            longest_link,
            faults: exp.faults.clone().with_timed_links(timed_link_faults),
            symmetry,
            chain_ends_ahead: exp.loaded.config.engine.chain_ends_ahead,
        }
        .with_compute_prefix())
    }

    /// [`Self::compute_prefix`] of the programs and kernel times as they now are.
    fn with_compute_prefix(mut self) -> SimModel {
        self.compute_prefix = (0..self.kernel_times.len())
            .map(|table| {
                let p = table / self.gpu_types.max(1);
                let (index, program) = (&self.programs[p], &self.workload.programs[p]);
                ComputePrefix::new(
                    program,
                    &index.stream_ops[Stream::Compute.index()],
                    &self.kernel_times[table],
                    &self.kernel_clocked[table],
                )
            })
            .collect();
        self
    }

    /// The lookahead of a partitioning whose cut links' smallest latency is `cut`: that,
    /// but no more than the flow LP's delay in flow mode (its events cross partitions
    /// without following a link). `None` when nothing is cut.
    pub fn lookahead(&self, cut: Option<SimTime>) -> Option<SimTime> {
        match self.flow_home {
            Some(_) => cut.map(|c| c.min(self.flow_delay)),
            None => cut,
        }
    }

    /// This model running `workload` instead: the topology and parameters are kept, so a
    /// series of workloads on one cluster (`fleetsim collective`) builds them once.
    pub fn with_workload(
        mut self,
        exp: &Experiment,
        workload: Workload,
        compute: &ComputeModel,
    ) -> SimModel {
        (self.programs, self.kernel_times, self.kernel_clocked) =
            workload_tables(exp, &workload, |_| compute);
        // nccl-tests-style benchmarks issue from a C loop: no Python host in the way.
        self.host_issued = vec![Vec::new(); self.kernel_times.len()];
        self.workload = workload;
        self.symmetry = symmetry::Symmetry::Full {
            why: "a benchmark's workload runs on every rank".into(),
        };
        self.with_compute_prefix()
    }

    /// This model with the workload's ops removed and `flows` injected instead: network
    /// experiments (traffic patterns, congestion control) on the same cluster.
    pub fn only_flows(mut self, flows: Vec<FlowSpec>) -> SimModel {
        for p in &mut self.workload.programs {
            p.ops.clear();
        }
        self.programs = self
            .workload
            .programs
            .iter()
            .map(ProgramIndex::new)
            .collect();
        self.flows = flows;
        self.workload.one_replica = false;
        self.symmetry = symmetry::Symmetry::Full {
            why: "injected flows run between any ranks".into(),
        };
        self.with_compute_prefix()
    }

    /// The LP of topology node `node`, in its state at time zero.
    pub fn new_lp(&self, node: NodeId) -> Lp {
        let n = self.topology.nodes()[node as usize];
        match n.kind {
            NodeKind::Gpu if self.workload.is_rank(n.index) => {
                Lp::Gpu(Box::new(gpu::GpuLp::new(self, node, n.index)))
            }
            _ => Lp::Fabric(net::FabricLp::new(self, node)),
        }
    }
}

/// In flow mode, the fabric node that hosts the flow LP (the first that sends on a shared
/// link and is not a GPU) and the smallest shared link latency ([`NetworkParams`] refuses
/// zero): it is how far ahead the flow LP's events travel.
fn flow_home(topology: &Topology, net: &NetworkParams) -> (Option<NodeId>, SimTime) {
    if !net.flow {
        return (None, SimTime::ZERO);
    }
    let shared = || topology.links().filter(|l| net.is_shared(l.class));
    let Some(delay) = shared().map(|l| l.latency).min() else {
        return (None, SimTime::ZERO);
    };
    let nodes = topology.nodes();
    let home = shared()
        .map(|l| l.src)
        // A memory node serves reads; the home is a switch (`net::FabricRole`).
        .filter(|&n| !matches!(nodes[n as usize].kind, NodeKind::Gpu | NodeKind::MemoryNode))
        .min()
        .or_else(|| shared().map(|l| l.src).min());
    (home, delay)
}

/// Refuses a `gpu-slow` fault under which a GPU's kernels alone would run past
/// [`SimTime::LIMIT`] ([`crate::fault::Faults::check_time_limit`]). `tables(rank)` gives
/// the rank's kernel times and which follow its clock; asked for slow ranks only.
pub fn check_slow_gpus(
    exp: &Experiment,
    workload: &Workload,
    tables: impl Fn(u32) -> (Vec<SimTime>, Vec<bool>),
) -> Result<(), crate::config::ConfigError> {
    exp.faults.check_time_limit(&exp.loaded, |rank| {
        let (kernel_times, clocked) = tables(rank);
        let program = &workload.programs[workload.program_index(rank)];
        let (mut on_clock, mut other) = (0.0, 0.0);
        for op in &program.ops {
            if let OpKind::Compute { kernel } = op.kind {
                let s = kernel_times[kernel as usize].as_secs_f64();
                match clocked[kernel as usize] {
                    true => on_clock += s,
                    false => other += s,
                }
            }
        }
        (on_clock, other)
    })
}

/// Per-program lookup tables, and kernel times (and whether they are compute-bound) per
/// program and GPU type, program `i` timed by `compute_of(i)`.
#[allow(clippy::type_complexity)]
fn workload_tables<'c>(
    exp: &Experiment,
    workload: &Workload,
    compute_of: impl Fn(usize) -> &'c ComputeModel,
) -> (Vec<ProgramIndex>, Vec<Vec<SimTime>>, Vec<Vec<bool>>) {
    let programs = workload.programs.iter().map(ProgramIndex::new).collect();
    let (kernel_times, clocked) = workload
        .programs
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            let compute = compute_of(i);
            exp.gpu_types
                .iter()
                .map(move |g| compute.program_times_and_clocked(p, g))
        })
        .unzip();
    (programs, kernel_times, clocked)
}

/// [`SimModel::host_issued`] of every program on every GPU type, program `i` with the CUDA
/// graphs of `graphs_of(i)`; a table whose ops all cost nothing is left empty.
fn host_tables(
    exp: &Experiment,
    workload: &Workload,
    graphs_of: impl Fn(usize) -> crate::config::CudaGraphs,
) -> Result<Vec<Vec<SimTime>>, crate::config::ConfigError> {
    use crate::compute::host::{HostCosts, issue_costs};
    let costs = exp
        .gpu_types
        .iter()
        .map(|g| HostCosts::of(g.host_cpu))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tables = Vec::with_capacity(workload.programs.len() * costs.len());
    for (i, p) in workload.programs.iter().enumerate() {
        for c in &costs {
            let mut issued = SimTime::ZERO;
            let mut prefix: Vec<SimTime> = issue_costs(p, c, graphs_of(i))
                .into_iter()
                .map(|cost| {
                    issued += cost;
                    issued
                })
                .collect();
            if issued == SimTime::ZERO {
                prefix = Vec::new();
            }
            tables.push(prefix);
        }
    }
    Ok(tables)
}

/// How much longer GPU `gpu`'s compute-bound kernels take than the part's nominal ones: its
/// chip's sustained clock is `1 + spread · z` times the nominal, with `z` a standard normal
/// drawn from the seed and the GPU's index alone (so every worker and thread draws the same),
/// clamped to ±4. Sinha et al., "Not All GPUs Are Created Equal" (SC'22): identical GPUs
/// running identical code differ by 8% on average between the fastest and slowest, from
/// manufacturing variation under the power limit.
pub fn chip_slowdown(seed: u64, gpu: u32, spread: f64) -> f64 {
    if spread <= 0.0 {
        return 1.0;
    }
    let a = splitmix64(seed ^ splitmix64(u64::from(gpu).wrapping_add(0x9e37_79b9_7f4a_7c15)));
    1.0 / (1.0 + spread * crate::hash::standard_normal(a))
}

/// A logical process: one topology node and its state.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum Lp {
    Gpu(Box<gpu::GpuLp>),
    Fabric(net::FabricLp),
}

impl Lp {
    /// Called once at time zero, before any event.
    pub fn start(&mut self, model: &SimModel, ctx: &mut Ctx) {
        if let Lp::Gpu(g) = self {
            g.start(model, ctx);
        }
    }

    /// An arrival handed over by a member in the same partition at the member's time,
    /// before it is due ([`Body::Arrived`]'s `inline`): applied to the collective's state
    /// only, with no accounting up to now, which is the member's time, not this LP's.
    pub fn arrive_inline(&mut self, model: &SimModel, body: Body, ctx: &mut Ctx) {
        if let Lp::Gpu(g) = self {
            g.arrive_inline(model, body, ctx);
        }
    }

    pub fn handle(&mut self, model: &SimModel, body: Body, ctx: &mut Ctx) {
        match self {
            Lp::Gpu(g) => g.handle(model, body, ctx),
            Lp::Fabric(f) => f.handle(model, body, ctx),
        }
    }

    /// Where handling `body` will read first beyond the LP's own inline fields, as spans
    /// for a cache hint ([`NO_SPAN`] where nothing is known): the runner asks while the
    /// events before run. Shallow needs only the inline fields; deep reads what the shallow
    /// spans hold, so it comes an event later. Nothing is read through the spans.
    pub fn hot_state(&self, model: &SimModel, body: &Body, deep: bool) -> HotSpans {
        match self {
            Lp::Gpu(g) => g.hot_state(model, body, deep),
            Lp::Fabric(f) => f.ports.hot_state(body, deep),
        }
    }

    /// What the LP contributes to the results, at the end of the run.
    pub fn report(&self, model: &SimModel) -> LpReport {
        match self {
            Lp::Gpu(g) => g.report(model),
            Lp::Fabric(f) => f.report(model),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::GroupKind;
    use crate::workload::{CollectiveOp, Label};

    /// The clock spread from chip to chip is a pure function of the seed and the GPU (the same on
    /// every worker and thread), centred on the nominal clock with the given relative spread.
    #[test]
    fn chip_slowdowns_are_deterministic_and_spread_as_configured() {
        let spread = 0.01;
        let draws: Vec<f64> = (0..20_000).map(|g| chip_slowdown(42, g, spread)).collect();
        assert_eq!(draws[17], chip_slowdown(42, 17, spread));
        assert_ne!(draws[17], chip_slowdown(43, 17, spread));
        let clocks: Vec<f64> = draws.iter().map(|s| 1.0 / s - 1.0).collect();
        let n = clocks.len() as f64;
        let mean = clocks.iter().sum::<f64>() / n;
        let sd = (clocks.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(mean.abs() < 0.0005, "{mean}");
        assert!((sd / spread - 1.0).abs() < 0.05, "{sd}");
        assert_eq!(chip_slowdown(42, 17, 0.0), 1.0);
    }

    proptest::proptest! {
        /// The running sums never promise more than the kernels take one by one (each
        /// rounded as `GpuLp::chip_kernel_ps` rounds it, then floored by the interference
        /// rate), and fall short by no more than a few picoseconds a kernel.
        #[test]
        fn compute_prefix_bounds_the_kernels_one_by_one(
            kernels in proptest::collection::vec((1u64..5_000_000_000, proptest::bool::ANY), 1..40),
            from in 0usize..40,
            len in 0usize..40,
            slowdown in 0.9f64..1.2,
            rate in 0.5f64..2.0,
        ) {
            let mut p = Program::new(0, 1);
            for k in 0..kernels.len() as u32 {
                p.push(OpKind::Compute { kernel: k }, Stream::Compute, Label::imported(), &[]);
            }
            let times: Vec<SimTime> = kernels.iter().map(|&(t, _)| SimTime::from_ps(t)).collect();
            let clocked: Vec<bool> = kernels.iter().map(|&(_, c)| c).collect();
            let index = ProgramIndex::new(&p);
            let prefix = ComputePrefix::new(&p, &index.stream_ops[0], &times, &clocked);
            let from = from.min(kernels.len());
            let to = (from + len).min(kernels.len());
            let exact: u64 = (from..to)
                .map(|k| {
                    let chip = match clocked[k] {
                        true => crate::time::round_ps(times[k].as_ps() as f64 * slowdown),
                        false => times[k].as_ps(),
                    };
                    if rate > 1.0 { (chip as f64 / rate).floor() as u64 } else { chip }
                })
                .sum();
            let least = prefix.least_ps(from as u32, to as u32, slowdown, rate);
            proptest::prop_assert!(least <= exact, "{least} > {exact}");
            proptest::prop_assert!(exact - least <= 3 * (to - from) as u64 + 3, "{least} vs {exact}");
        }
    }

    #[test]
    fn kernels_chain_only_where_nothing_else_waits() {
        let label = Label::imported();
        let kernel = OpKind::Compute { kernel: 0 };
        let mut p = Program::new(0, 1);
        let a = p.push(kernel, Stream::Compute, label, &[]);
        let b = p.push(kernel, Stream::Compute, label, &[a]);
        // The all-gather waits for b: b cannot stand for itself and c.
        let gather = OpKind::Collective {
            op: CollectiveOp::AllGather,
            group: GroupKind::Tp,
            bytes: 1 << 20,
        };
        let ag = p.push(gather, Stream::Tp, label, &[b]);
        let c = p.push(kernel, Stream::Compute, label, &[]);
        // d waits for the all-gather: it starts when that ends, not when c does.
        let d = p.push(kernel, Stream::Compute, label, &[ag]);
        p.push(kernel, Stream::Compute, label, &[c, d]);
        let index = ProgramIndex::new(&p);
        assert_eq!(
            index.chains_into_next,
            vec![true, false, false, true, false],
            "a-b chain, b feeds the all-gather, c-d waits for it, d-e chain, e is last"
        );
    }
}
