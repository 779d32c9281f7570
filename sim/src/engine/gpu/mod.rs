//! A GPU LP: runs its rank's program on a compute stream and communication streams, with the
//! execution semantics of [`crate::workload`] (FIFO streams, explicit dependencies, k-th
//! collective of a stream matches the k-th on every member, send/receive rendezvous).
//!
//! Collectives follow [`crate::collective`]: a group reached only over analytical links completes
//! in the planned time once its last member arrives (its leader gathers arrivals and releases
//! everyone: 2(n−1) messages instead of a ring's 2n(n−1)); a group with packet-level links runs
//! NCCL's ring on lanes of channels (with PXN relays) transfer by transfer: all-reduce in
//! 2(n−1) steps of size/(n·lanes) per lane, all-gather and reduce-scatter in n−1; all-to-all
//! as direct pairwise sends, and broadcast as a chain from the group's first rank, pipelined
//! in n chunks (NCCL's `doc/PERFORMANCE.md`). A ring step is sent
//! when the previous step arrived from the ring predecessor; collective data is sent eagerly
//! into the peer's (preallocated, as NCCL's) buffers, while point-to-point sends wait for the
//! receiver's clear-to-send (NCCL's rendezvous for `ncclSend`/`ncclRecv`).
//!
//! Time accounting, per rank: `compute` while a kernel runs; `exposed_comm` while no kernel
//! runs and a collective does; `bubble` for every other moment before the rank finishes
//! (waiting for pipeline sends and receives, or for dependencies).

mod transport;

pub use transport::{flow_hash, injected_tag, segment_size};

use super::cut::Cut;
use super::net::Ports;
use super::results::{CollectiveStats, GpuReport, LpReport, Span};
use super::{
    Body, Ctx, HotSpan, INJECTED, MEMORY_GROUP, NO_NODE, NO_SPAN, P2P, Segment, SimModel, Tag,
};
use crate::collective::{self, Algorithm, Arch, CommShape, Plan, pat, ring, tree};
use crate::hash::{mix, splitmix64};
use crate::layout::GroupKind;
use crate::topology::{LinkClass, NodeId};
use crate::workload::{CollectiveOp, MemoryEvent, OpKind, Peer, Stream};
use transport::{Flow, PathCache, PathInfo, SerialConnection};

const STREAMS: usize = Stream::COUNT;
const COMPUTE: usize = 0;
const MEMORY: usize = Stream::Memory as usize;

/// A rank's place in a group: position, size and ring neighbours (GPU nodes).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct RingPos {
    pos: u32,
    n: u32,
    next: NodeId,
    prev: NodeId,
}

/// Which member of a group gathers the arrivals of a collective that completes in closed
/// form, and answers them: one picked by a hash of the group's first rank. Every member
/// computes the same. Not simply the first rank: the groups' first ranks all sit in one
/// data-parallel replica (or one stage), so a partition of the fabric would hold every
/// leader and every member's pending arrival (docs/distributed.md, "Memory").
fn closed_leader(members: &[u32]) -> usize {
    (splitmix64(u64::from(members[0])) % members.len() as u64) as usize
}

/// Whether this rank gathers group `kind`'s arrivals in closed form ([`closed_leader`]). A
/// function of the groups alone, so it can be asked while a run is borrowed.
fn gathers(groups: &[Option<Box<GroupInfo>>], kind: GroupKind) -> bool {
    groups[kind as usize].as_ref().is_some_and(|g| g.gathers)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Algo {
    /// NCCL's ring, on `lanes` parallel rings (channels grouped by route).
    Ring {
        steps: u32,
        lanes: u32,
    },
    /// A ring run by the flow LP as one flow per lane (`network.model = "flow"`, one member
    /// per host): every member joins, and all hear when it ends ([`super::flow::RingJoin`]).
    Fluid {
        steps: u32,
        lanes: u32,
    },
    /// Completes in closed form ([`collective::Plan`]) once every member arrived: the leader
    /// (position 0) gathers arrivals and releases everyone at the planned end.
    Closed {
        duration_ps: u64,
    },
    /// NCCL's double binary tree (all-reduce): on every lane both trees reduce `chunks`
    /// chunks up and broadcast them down, pipelined. With `intra_chunk_ps > 0` it is
    /// NVLS-tree: one lane whose chunks also come from the NVSwitch's in-node reduction,
    /// one every `intra_chunk_ps`.
    Tree {
        lanes: u32,
        chunks: u32,
        intra_chunk_ps: u64,
    },
    /// PAT (all-gather, or reduce-scatter when `reduce`): log2(n) steps to peers 2^k away.
    Pat {
        steps: u32,
        reduce: bool,
    },
    /// Broadcast: chunks flow down the chain from position 0.
    Chain {
        chunks: u32,
    },
    Direct,
    Send,
    Recv,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct CommRun {
    op: u32,
    start_ps: u64,
    /// Communicator ([`P2P`] or a group kind) and sequence number on it.
    group: u8,
    seq: u32,
    algo: Algo,
    ring: RingPos,
    step_bytes: u64,
    recv_needed: u32,
    recv_got: u32,
    /// Segment-level flows not yet fully acknowledged.
    sends_open: u32,
    /// When the last analytical send is delivered: the op cannot finish before. Tracked as a
    /// time, not an event per send; one wake-up event is scheduled only if the op would
    /// otherwise be done earlier.
    analytical_sends_until: u64,
    wake_scheduled: bool,
    waiting_clear_to_send: bool,
    /// Peer of a send or receive.
    peer: NodeId,
    collective: Option<(GroupKind, CollectiveOp, u64)>,
    /// Closed form: the latest time a member was ready (leader only).
    ready_ps: u64,
    /// Closed form: the latest time a member's arrival was due at the leader, or the
    /// leader's own start (leader only).
    arrived_by_ps: u64,
    /// Latency added once the transfers are done (the plan's latency part).
    tail_ps: u64,
    /// `algorithm/protocol/channels`, for collectives.csv.
    plan: Option<(Algorithm, collective::Protocol, u32)>,
    /// Bytes a transfer may have in flight across the network: NCCL's FIFO for the op
    /// (`collective::collective_window`, `collective::p2p_window`); `u64::MAX` when unbounded.
    net_window: u64,
    /// Tree: up-arrivals per (lane, tree, chunk).
    arrivals: Vec<u8>,
    /// Sends waiting behind an earlier chunk on their connection.
    queued: u32,
}

/// A rank's neighbours in one tree of one lane (GPU nodes, [`NO_NODE`] for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct TreeHop {
    parent: NodeId,
    children: [NodeId; 3],
    count: u8,
}

impl TreeHop {
    fn children(&self) -> &[NodeId] {
        &self.children[..usize::from(self.count)]
    }
}

/// A rank's view of one of its groups, computed once.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct GroupInfo {
    ring: RingPos,
    shape: CommShape,
    /// Every member is reached over analytical links only.
    closed: bool,
    leader: NodeId,
    /// Lane rings for the last lane count asked for: (next, prev, PXN relay).
    lanes: Vec<(NodeId, NodeId, NodeId)>,
    /// Both trees of every lane, for the last (lanes, NVLS-tree) asked for.
    trees: Vec<[TreeHop; 2]>,
    trees_for: (u32, bool),
    /// PAT's peers at distance 2^k: (position − 2^k, position + 2^k).
    pat: Vec<(NodeId, NodeId)>,
    /// One-way latency to a member on this host and to one on another host, ps.
    hop_ps: (u64, u64),
    /// A closed group's messages, with each one's one-way latency: the leader's to every
    /// other member, another member's to the leader.
    closed_peers: Vec<(NodeId, u64)>,
    /// This rank gathers the group's arrivals when a collective completes in closed form
    /// ([`closed_leader`]).
    gathers: bool,
}

/// What a rank keeps of one of its program's collectives ([`super::ProgramIndex::collective_slot`]).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct CollectiveSlot {
    /// Made on first use: a program repeats a handful of collectives many times, and
    /// planning weighs every algorithm and protocol.
    plan: Option<Plan>,
    stats: CollectiveStats,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Running {
    Idle,
    Compute {
        op: u32,
        start_ps: u64,
    },
    /// A transfer to or from the CXL memory node, waiting for the node's reply.
    Memory {
        op: u32,
        start_ps: u64,
    },
    Comm(Box<CommRun>),
}

/// The ops of a GPU's program that may cross the run's cut ([`GpuLp::cut_promise`]).
#[derive(Debug)]
struct Crossing {
    /// Which groups were known when it was made (bit `GroupKind as usize`).
    known: u16,
    /// The positions of the ops whose reach is finite, ascending, stream after stream: one
    /// allocation of the exact size per GPU, where a list per stream took twice the room.
    positions: Box<[u32]>,
    /// Where each stream's positions start in `positions`, and where the last ends.
    stream_start: [u32; STREAMS + 1],
    /// Per stream, the least reach of its ops ([`GpuLp::stream_reach_ps`]).
    stream_least: [u64; STREAMS],
    /// The least reach of any op of the program.
    least: u64,
}

impl Crossing {
    /// Stream `s`'s positions of ops whose reach is finite, ascending.
    fn stream_positions(&self, s: usize) -> &[u32] {
        &self.positions[self.stream_start[s] as usize..self.stream_start[s + 1] as usize]
    }
}

/// The leading fields of a [`GpuLp`] that every event reads: up to its running ops.
const HOT_BYTES: usize = std::mem::offset_of!(GpuLp, running);

/// `repr(C)`, hot fields first: an event at 131K GPUs finds its GPU cold, and
/// [`GpuLp::hot_state`] asks for the lines every handler reads (the first [`HOT_BYTES`]).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[repr(C)]
pub struct GpuLp {
    accounted_to_ps: u64,
    finish_ps: Option<u64>,
    compute_ps: u64,
    exposed_comm_ps: u64,
    bubble_ps: u64,
    digest: u64,
    ops_done: u64,
    /// This chip's compute-bound kernels take this times the part's nominal time
    /// ([`super::chip_slowdown`]).
    chip_slowdown: f64,
    node: NodeId,
    rank: u32,
    program: u32,
    kernel_table: u32,
    /// Collective streams with an op running.
    comm_active: u32,
    /// Streams whose head op may have become ready (a bit per stream): set when an op
    /// finishes, for its own stream and the streams of its dependents.
    pump_streams: u32,
    /// When the running kernel ends.
    kernel_end_ps: u64,
    /// The compute stream's chain of kernels ([`super::ProgramIndex::chains_into_next`]):
    /// the stream position of its last kernel, the generation of its one pending
    /// [`Body::ComputeDone`], and whether it was planned with a collective running.
    chain_last: u32,
    chain_gen: u32,
    chain_slowed: bool,
    done: [u32; STREAMS],
    /// Collectives started per group kind: the sequence number of the next one.
    group_seq: [u32; 9],
    memory_cursor: u32,
    /// Live HBM bytes and their peak; the next of the program's memory events is
    /// `memory_cursor`.
    live_bytes: u64,
    peak_bytes: u64,
    /// The run of the last op that finished, kept for the next one to start in, so that
    /// starting and finishing communication ops does not allocate: not part of a checkpoint.
    #[serde(skip)]
    spare_run: Option<Box<CommRun>>,
    groups: [Option<Box<GroupInfo>>; 9],
    running: [Running; STREAMS],
    /// Messages and clear-to-sends that arrived before the op they belong to started, with
    /// their counts. A short list searched in place: a map would allocate a node for the
    /// first entry and free it with the last, several million times a run.
    early: Vec<(Tag, u32, u64)>,
    /// Boxed, so that a free slot costs a pointer: a GPU's busiest moment sizes its table
    /// (llama3-405b-h100-131072's gradient reduce-scatter: 27 KB per GPU inline, 3.6 GB in
    /// all, for at most 0.34 M live flows, 2.6 per GPU).
    flows: Vec<Option<Box<Flow>>>,
    /// When each FIFO-paced connection (by destination GPU) may send its next segment.
    fifo_clock: Vec<(NodeId, u64)>,
    serial: Vec<SerialConnection>,
    free_flows: Vec<u32>,
    ports: Ports,
    /// A cache of routes, rebuilt on demand: not part of a checkpoint.
    #[serde(skip)]
    paths: PathCache,
    /// Analytical transfers: when each out link is free again (a FIFO share of it).
    link_free_ps: Vec<u64>,
    /// By [`super::ProgramIndex::collective_slot`]; a rank that runs no collective has none.
    collectives: Vec<CollectiveSlot>,
    analytical_bytes: [u64; 4],
    analytical_link_bytes: [u64; 4],
    spans: Vec<Vec<Span>>,
    error: Option<String>,
    /// Injected flows ([`SimModel::flows`]) that arrived here: (index, time).
    flow_arrivals: Vec<(u32, u64)>,
    /// Split flows being received: ((sender, flow slot), queue pairs complete).
    parts_seen: Vec<((NodeId, u32), u8)>,
    /// The least time of the compute-stream kernels at positions `[.0, .1)`: a window
    /// [`GpuLp::cut_promise`] slides along the stream, so each kernel is added and
    /// dropped about once. Not part of a checkpoint.
    #[serde(skip)]
    least_compute: (u32, u32, u64),
    /// The ops that may cross the run's cut, made by [`GpuLp::cut_promise`] again when a
    /// send or receive group becomes known: not part of a checkpoint.
    #[serde(skip)]
    crossing: Option<Crossing>,
}

fn is_collective_stream(s: usize) -> bool {
    matches!(
        Stream::ALL[s],
        Stream::Tp | Stream::Cp | Stream::Ep | Stream::Dp | Stream::Pp
    )
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

impl GpuLp {
    pub fn new(model: &SimModel, node: NodeId, rank: u32) -> Self {
        let w = &model.workload;
        let c = w.layout.coords(rank);
        let class = usize::from(w.replica_class[c.dp as usize]);
        let program = (class * w.layout.pp as usize + c.pp as usize) as u32;
        let gpu_type = usize::from(model.topology.gpu_type(rank));
        let out = model.topology.out_links(node).len();
        GpuLp {
            node,
            rank,
            program,
            kernel_table: (program as usize * model.gpu_types + gpu_type) as u32,
            chip_slowdown: super::chip_slowdown(model.seed, rank, model.clock_spread[gpu_type]),
            done: [0; STREAMS],
            running: std::array::from_fn(|_| Running::Idle),
            early: Vec::new(),
            spare_run: None,
            flows: Vec::new(),
            fifo_clock: Vec::new(),
            serial: Vec::new(),
            free_flows: Vec::new(),
            ports: Ports::new(model, node),
            paths: PathCache::default(),
            link_free_ps: vec![0; out],
            groups: std::array::from_fn(|_| None),
            group_seq: [0; 9],
            comm_active: 0,
            accounted_to_ps: 0,
            compute_ps: 0,
            exposed_comm_ps: 0,
            bubble_ps: 0,
            finish_ps: None,
            ops_done: 0,
            pump_streams: (1 << STREAMS) - 1,
            kernel_end_ps: 0,
            chain_last: 0,
            chain_gen: 0,
            chain_slowed: false,
            digest: splitmix64(u64::from(node)),
            collectives: Vec::new(),
            analytical_bytes: [0; 4],
            analytical_link_bytes: [0; 4],
            spans: if model.trace {
                vec![Vec::new(); STREAMS]
            } else {
                Vec::new()
            },
            error: None,
            flow_arrivals: Vec::new(),
            parts_seen: Vec::new(),
            least_compute: (0, 0, 0),
            crossing: None,
            live_bytes: w.programs[program as usize].resident_bytes,
            peak_bytes: w.programs[program as usize].resident_bytes,
            memory_cursor: 0,
        }
    }

    pub fn start(&mut self, model: &SimModel, ctx: &mut Ctx) {
        for (i, f) in model.flows.iter().enumerate() {
            if f.src == self.rank {
                ctx.emit(self.node, f.start_ps, Body::StartFlow { index: i as u32 });
            }
        }
        self.pump(model, ctx);
    }

    pub fn handle(&mut self, model: &SimModel, body: Body, ctx: &mut Ctx) {
        self.account(ctx.now);
        self.settle_chain(model, ctx.now);
        match body {
            Body::ComputeDone { chain } if chain == self.chain_gen => {
                self.complete(model, COMPUTE, ctx)
            }
            Body::ComputeDone { .. } => {}
            Body::Segment(seg) if seg.dst == self.node => self.receive_segment(model, &seg, ctx),
            Body::Segment(seg) => self.ports.forward(model, seg, ctx),
            Body::Message { tag } | Body::ClearToSend { tag } if tag.group == INJECTED => {
                self.injected_arrived(tag.seq, ctx.now)
            }
            Body::Message { tag } if tag.group == MEMORY_GROUP => {
                self.complete(model, usize::from(tag.stream), ctx)
            }
            Body::Message { tag } | Body::ClearToSend { tag } => {
                self.arrived(model, tag, (0, 0), ctx)
            }
            Body::Arrived {
                tag,
                done_ps,
                due_ps,
            } => self.arrived(model, tag, (done_ps, due_ps), ctx),
            Body::StartFlow { index } => {
                let f = model.flows[index as usize];
                let dst = model.topology.gpu(f.dst);
                self.transmit(
                    model,
                    (dst, NO_NODE),
                    f.bytes,
                    injected_tag(index),
                    (None, u32::MAX),
                    ctx,
                );
            }
            Body::SendDone { stream } => {
                self.analytical_sends_delivered(model, usize::from(stream), ctx)
            }
            Body::Ack { flow, bytes, ecn } => self.acked(model, flow, u64::from(bytes), ecn, ctx),
            Body::FlowDone { flow } => self.fluid_done(model, flow, ctx),
            Body::ConnectionFree { connection } => self.connection_free(model, connection, ctx),
            Body::Pace { flow } => self.paced(model, flow, ctx),
            other => self.ports.handle(model, &other, ctx),
        }
        self.pump(model, ctx);
    }

    /// How long `op`, a kernel starting now, takes on this chip.
    fn kernel_ps(&self, model: &SimModel, op: u32) -> u64 {
        let program = &model.workload.programs[self.program as usize];
        let OpKind::Compute { kernel } = program.ops[op as usize].kind else {
            unreachable!("op {op} is not a kernel");
        };
        let table = self.kernel_table as usize;
        let mut base = model.kernel_ps[table][kernel as usize];
        if model.kernel_clocked[table][kernel as usize] {
            base = (base as f64 * self.chip_slowdown).round() as u64;
        }
        if self.comm_active > 0 {
            (base as f64 / model.interference.compute_rate).round() as u64
        } else {
            base
        }
    }

    /// Starts kernel `op` at `at` on the compute stream.
    fn start_kernel(&mut self, model: &SimModel, op: u32, at: u64) {
        if let Some(e) = self.memory_event(model, op) {
            self.live_bytes += e.alloc;
            self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        }
        self.kernel_end_ps = at + self.kernel_ps(model, op);
        self.running[COMPUTE] = Running::Compute { op, start_ps: at };
    }

    /// The kernel just started and those chained after it run back to back: one
    /// [`Body::ComputeDone`] at the end of the last stands for all of them, and any event
    /// in between first settles the kernels that ended ([`GpuLp::settle_chain`]).
    fn plan_chain(&mut self, model: &SimModel, ctx: &mut Ctx) {
        let index = &model.programs[self.program as usize];
        let mut last = self.done[COMPUTE];
        while index.chains_into_next[last as usize] {
            last += 1;
        }
        self.chain_last = last;
        self.emit_chain_end(model, ctx);
    }

    /// Plans the chain's one [`Body::ComputeDone`] under a new generation, with the GPU
    /// slowed as it is now.
    fn emit_chain_end(&mut self, model: &SimModel, ctx: &mut Ctx) {
        self.chain_slowed = self.comm_active > 0;
        self.chain_gen = self.chain_gen.wrapping_add(1);
        let end = self.chain_end_ps(model);
        let chain = self.chain_gen;
        ctx.emit(self.node, end, Body::ComputeDone { chain });
    }

    /// When the chain's last kernel ends if the ones not started yet start at the running
    /// one's end, one after another, slowed as the GPU is now.
    fn chain_end_ps(&self, model: &SimModel) -> u64 {
        let ops = &model.programs[self.program as usize].stream_ops[COMPUTE];
        let next = self.done[COMPUTE] as usize + 1;
        let after: u64 = ops[next..=self.chain_last as usize]
            .iter()
            .map(|&op| self.kernel_ps(model, op))
            .sum();
        self.kernel_end_ps + after
    }

    /// Completes the chain's kernels that ended by `now` (before the event at `now`), each
    /// followed at once by the next.
    fn settle_chain(&mut self, model: &SimModel, now: u64) {
        while self.done[COMPUTE] < self.chain_last
            && self.kernel_end_ps <= now
            && matches!(self.running[COMPUTE], Running::Compute { .. })
        {
            let at = self.kernel_end_ps;
            self.complete_at(model, COMPUTE, at);
            let op = model.programs[self.program as usize].stream_ops[COMPUTE]
                [self.done[COMPUTE] as usize];
            self.start_kernel(model, op, at);
        }
    }

    /// A collective started or ended while a chain runs: the kernels not started yet take
    /// another time, so the chain's end moves (its old event goes stale).
    fn replan_chain(&mut self, model: &SimModel, ctx: &mut Ctx) {
        if self.done[COMPUTE] < self.chain_last
            && matches!(self.running[COMPUTE], Running::Compute { .. })
        {
            self.emit_chain_end(model, ctx);
        } else {
            // No chain runs: nothing to move until the next one is planned.
            self.chain_slowed = self.comm_active > 0;
        }
    }

    /// The least delay from what flow slot `flow` sends to another partition of `cut`: its
    /// op's group's reach, or for a send or receive its one peer's; `None` for an empty slot.
    pub fn flow_reach_ps(&self, cut: &Cut, flow: u32) -> Option<u64> {
        let f = self.flows.get(flow as usize)?.as_ref()?;
        let sender = if f.via == NO_NODE { self.node } else { f.via };
        Some(cut.tag_reach_ps(self.rank, self.node, f.tag, || {
            cut.peer_reach_ps(sender, f.dst)
        }))
    }

    /// The least of [`GpuLp::flow_reach_ps`] over every flow the GPU has: its transport
    /// serves them all, so an event of one flow (an acknowledgement freeing its window, a
    /// port's `TxDone`) may put another's segments on the wire.
    pub fn flows_reach_ps(&self, cut: &Cut) -> u64 {
        (0..self.flows.len() as u32)
            .filter_map(|f| self.flow_reach_ps(cut, f))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The segment the GPU's port `port` sends next.
    pub fn queue_head(&self, port: usize) -> Option<&Segment> {
        self.ports.queue_head(port)
    }

    /// The peer of serial connection `connection`.
    pub fn connection_peer(&self, connection: u32) -> Option<NodeId> {
        self.serial.get(connection as usize).map(|c| c.dst)
    }

    /// What this GPU can still send to another partition of `cut`, whatever arrives from
    /// its own partition meanwhile, as two bounds `(from, reach)`: nothing leaves before
    /// `from + reach` (`u64::MAX` reach: nothing). The GPU's state is as of its last event
    /// (`accounted_to_ps`), or as of `not_before_ps` when later: it handles no event
    /// before then (a window's end), so the kernels it waits for have run on meanwhile.
    ///
    /// An op can send across the cut when its reach is finite
    /// ([`super::cut::Cut::group_reach_ps`], or for a send or receive its peer's): a member
    /// in another partition, or a route through one. A running op sends on only when an
    /// event arrives, and those carry their own promises
    /// ([`super::cut::Cut::event_promise`]), so the first bound is only for what runs like
    /// a kernel off the compute stream (a CXL transfer), and injected flows. The ops after a
    /// running communication op on its stream start only as one of its events is handled,
    /// and those promise the stream's reach ([`GpuLp::stream_reach_ps`]), so such a stream
    /// adds nothing here. The second is
    /// every op still to start: the next such op of each idle stream cannot start before the
    /// compute-stream kernels it waits for have run, each at least its duration on this
    /// chip unslowed and after the running kernel's least end, and the ops after it start
    /// later still; from then, at the least reach of any op of its program. A GPU in the
    /// middle of a stage's forward pass, with only its tensor-parallel peers to talk to,
    /// promises the rest of the stage; one whose data-parallel reduction runs inside its
    /// partition promises until its next op that can cross. Ops on other streams it waits
    /// for count as instantaneous, which only makes the bound earlier.
    pub fn cut_promise(
        &mut self,
        model: &SimModel,
        cut: &Cut,
        not_before_ps: u64,
    ) -> [(u64, u64); 2] {
        let now = self.accounted_to_ps.max(not_before_ps);
        let rank = self.rank;
        // Injected flows start at their own events, outside any program.
        if !model.flows.is_empty() {
            let least = cut.gpu_reach_ps(rank);
            return [(now, least), (now, least)];
        }
        if self.finish_ps.is_some() {
            return [(u64::MAX, u64::MAX); 2];
        }
        // What running ops and their flows send next follows an event that carries its own
        // promise ([`Cut::event_promise`]), but for an op that runs like a kernel.
        let mut running = u64::MAX;
        let program = &model.workload.programs[self.program as usize];
        let index = &model.programs[self.program as usize];
        let distance = cut.distances[self.node as usize];
        let (running_end, first_unstarted) = self.compute_at(model, now);
        // Which groups are known: until one is, its ops count at the group's least reach
        // (a send or receive at its peer's, a closed-form collective at its duration); the
        // list is made again when it is.
        let known = self
            .groups
            .iter()
            .enumerate()
            .fold(0u16, |k, (i, g)| k | u16::from(g.is_some()) << i);
        let crossing = match &mut self.crossing {
            Some(c) if c.known == known => c,
            slot => {
                let closed_least = closed_form_least_ps(model, &self.groups, index);
                let p2p = |kind: GroupKind, next: bool| match &self.groups[kind as usize] {
                    // A send goes to its one peer, by no relay.
                    Some(g) => {
                        cut.peer_reach_ps(self.node, if next { g.ring.next } else { g.ring.prev })
                    }
                    None => cut.group_reach_ps(rank, kind),
                };
                let p2p = [
                    p2p(GroupKind::Pp, true),
                    p2p(GroupKind::Pp, false),
                    p2p(GroupKind::Cp, true),
                    p2p(GroupKind::Cp, false),
                ];
                let reach = |op: u32| match program.ops[op as usize].kind {
                    OpKind::Compute { .. } => u64::MAX,
                    OpKind::Collective { group, .. } => cut
                        .group_reach_ps(rank, group)
                        .max(closed_least[usize::from(index.collective_slot[op as usize])]),
                    OpKind::Send { peer, .. } | OpKind::Recv { peer, .. } => p2p[peer as usize],
                    OpKind::MemoryRead { .. } => distance,
                };
                let mut stream_least = [u64::MAX; STREAMS];
                let mut stream_start = [0u32; STREAMS + 1];
                let mut positions = Vec::new();
                for (s, ops) in index.stream_ops.iter().enumerate().take(STREAMS) {
                    for p in 0..ops.len() as u32 {
                        let r = reach(ops[p as usize]);
                        stream_least[s] = stream_least[s].min(r);
                        if r != u64::MAX {
                            positions.push(p);
                        }
                    }
                    stream_start[s + 1] = positions.len() as u32;
                }
                let least = stream_least.iter().copied().min().unwrap_or(u64::MAX);
                slot.insert(Crossing {
                    known,
                    positions: positions.into_boxed_slice(),
                    stream_start,
                    stream_least,
                    least,
                })
            }
        };
        let (crossing, least) = (&*crossing, crossing.least);
        // The least, over streams, of the last kernel their next crossing op waits for:
        // every stream's wait starts at the same kernel, so the least end is the bound.
        let mut waits_until: Option<u32> = None;
        let mut next_now = false;
        for s in 0..STREAMS {
            if s == COMPUTE {
                continue;
            }
            let candidates = crossing.stream_positions(s);
            let ops = &index.stream_ops[s];
            let mut pos = self.done[s] as usize;
            match &self.running[s] {
                Running::Idle => {}
                Running::Compute { .. } | Running::Memory { .. } => {
                    running = running.min(distance);
                    pos += 1;
                }
                // The ops after it start only as an event of this stream's op is handled,
                // and those promise the stream's reach ([`GpuLp::stream_reach_ps`]).
                Running::Comm(_) => continue,
            }
            // The next op of this stream that can cross.
            let from = candidates.partition_point(|&p| (p as usize) < pos);
            let Some(&next) = candidates.get(from) else {
                continue;
            };
            let op = ops[next as usize];
            let last = program
                .deps(op as usize)
                .iter()
                .filter(|&&d| program.ops[d as usize].stream.index() == COMPUTE)
                .map(|&d| index.position[d as usize])
                .max();
            match last {
                // The running kernel or one after it.
                Some(last) if last >= self.done[COMPUTE] => {
                    waits_until = Some(waits_until.map_or(last, |w| w.min(last)));
                }
                _ => next_now = true,
            }
        }
        let live = (now, running);
        let next = match waits_until {
            _ if next_now => now,
            None => return [live, (u64::MAX, u64::MAX)],
            // A kernel a crossing op waits for ends a chain, with an event of its own, so
            // it cannot have ended unseen; were it so, the op might start now.
            Some(last) if last + 1 < first_unstarted => now,
            Some(last) => {
                let after = self.least_compute_ps(model, first_unstarted, last + 1);
                running_end.unwrap_or(now).saturating_add(after)
            }
        };
        [live, (next, least)]
    }

    /// The stream of the op an event for this GPU belongs to, where it names one: handling
    /// it may end that op and start the next ones there.
    pub fn event_stream(&self, body: &Body) -> Option<usize> {
        let stream = match body {
            Body::Message { tag } | Body::ClearToSend { tag } | Body::Arrived { tag, .. } => {
                tag.stream
            }
            Body::SendDone { stream } => *stream,
            Body::Segment(seg) => seg.tag.stream,
            Body::Ack { flow, .. } | Body::FlowDone { flow } => {
                self.flows.get(*flow as usize)?.as_ref()?.tag.stream
            }
            Body::ConnectionFree { connection } => self.serial.get(*connection as usize)?.stream,
            _ => return None,
        };
        Some(usize::from(stream))
    }

    /// The least reach of the ops of stream `stream` (of any op where it is not one, or
    /// before they are listed): an event of an op there may end it, and the ops after it
    /// that wait for nothing else start at once. [`GpuLp::cut_promise`] leaves them out.
    pub fn stream_reach_ps(&self, cut: &Cut, stream: Option<usize>) -> u64 {
        match (&self.crossing, stream) {
            (Some(c), Some(s)) if s < STREAMS => c.stream_least[s],
            (Some(c), _) => c.least,
            (None, _) => cut.gpu_reach_ps(self.rank),
        }
    }

    /// The compute stream at `at`, no sooner than the GPU's last event: when the kernel
    /// running then ends, and the position of the first kernel not started. A chain runs on
    /// without events, each kernel taking the time it was given as it started (slowed as the
    /// GPU is now, which only an event changes), so the kernel running at `at` may be further
    /// along the chain than the one the state names.
    fn compute_at(&self, model: &SimModel, at: u64) -> (Option<u64>, u32) {
        let done = self.done[COMPUTE];
        if !matches!(self.running[COMPUTE], Running::Compute { .. }) {
            return (None, done);
        }
        let ops = &model.programs[self.program as usize].stream_ops[COMPUTE];
        let (mut end, mut next) = (self.kernel_end_ps, done + 1);
        while end < at && next <= self.chain_last {
            end += self.kernel_ps(model, ops[next as usize]);
            next += 1;
        }
        (Some(end.max(at)), next)
    }

    /// The least time of the compute-stream kernels at positions `[from, to)`, sliding
    /// [`GpuLp::least_compute`] there.
    fn least_compute_ps(&mut self, model: &SimModel, from: u32, to: u32) -> u64 {
        let ops = &model.programs[self.program as usize].stream_ops[COMPUTE];
        let (mut a, mut b, mut sum) = self.least_compute;
        if from >= b || to <= a {
            (a, b, sum) = (from, from, 0);
        }
        while b < to {
            sum += self.least_kernel_ps(model, ops[b as usize]);
            b += 1;
        }
        while b > to {
            b -= 1;
            sum -= self.least_kernel_ps(model, ops[b as usize]);
        }
        while a < from {
            sum -= self.least_kernel_ps(model, ops[a as usize]);
            a += 1;
        }
        while a > from {
            a -= 1;
            sum += self.least_kernel_ps(model, ops[a as usize]);
        }
        self.least_compute = (a, b, sum);
        sum
    }

    /// Kernel `op`'s shortest time on this chip: unslowed by communication.
    fn least_kernel_ps(&self, model: &SimModel, op: u32) -> u64 {
        let program = &model.workload.programs[self.program as usize];
        let OpKind::Compute { kernel } = program.ops[op as usize].kind else {
            return 0;
        };
        let table = self.kernel_table as usize;
        let mut base = model.kernel_ps[table][kernel as usize];
        if model.kernel_clocked[table][kernel as usize] {
            base = (base as f64 * self.chip_slowdown).round() as u64;
        }
        let rate = model.interference.compute_rate;
        if rate > 1.0 {
            (base as f64 / rate).floor() as u64
        } else {
            base
        }
    }

    /// [`super::Lp::hot_state`] for a GPU: shallow, the fields every handler reads (the
    /// first [`HOT_BYTES`]) and the running op or flow slot the event names; deep, that
    /// op's communication state or that flow (read through the slot), the spare run a
    /// finished kernel's successor may start in, or the port a segment passing through
    /// takes.
    pub fn hot_state(&self, body: &Body, deep: bool) -> [HotSpan; 2] {
        const HINT_BYTES: usize = 128;
        let stream = match body {
            Body::ComputeDone { .. } => Some(COMPUTE),
            Body::Message { tag } | Body::ClearToSend { tag } | Body::Arrived { tag, .. } => {
                Some(usize::from(tag.stream))
            }
            Body::SendDone { stream } => Some(usize::from(*stream)),
            _ => None,
        };
        let running = stream.and_then(|s| self.running.get(s));
        if !deep {
            let second = match (body, running) {
                (Body::Ack { flow, .. } | Body::FlowDone { flow }, _) => (
                    self.flows.as_ptr().wrapping_add(*flow as usize).cast(),
                    size_of::<Option<Box<Flow>>>(),
                ),
                (_, Some(r)) => (std::ptr::from_ref(r).cast(), size_of::<Running>()),
                _ => NO_SPAN,
            };
            return [(std::ptr::from_ref(self).cast(), HOT_BYTES), second];
        }
        match (body, running) {
            (Body::Ack { flow, .. } | Body::FlowDone { flow }, _) => {
                match self.flows.get(*flow as usize) {
                    Some(Some(f)) => [(std::ptr::from_ref(&**f).cast(), HINT_BYTES), NO_SPAN],
                    _ => [NO_SPAN; 2],
                }
            }
            (Body::Segment(seg), _) if seg.dst != self.node => self.ports.hot_state(body, false),
            (Body::ComputeDone { .. }, _) => match &self.spare_run {
                Some(run) => [(std::ptr::from_ref(&**run).cast(), HINT_BYTES), NO_SPAN],
                None => [NO_SPAN; 2],
            },
            (_, Some(Running::Comm(run))) => {
                [(std::ptr::from_ref(&**run).cast(), HINT_BYTES), NO_SPAN]
            }
            _ => [NO_SPAN; 2],
        }
    }

    /// Injected flow `index` ([`SimModel::flows`]) arrived here at `now`.
    fn injected_arrived(&mut self, index: u32, now: u64) {
        self.flow_arrivals.push((index, now));
        self.digest = mix(self.digest, u64::from(index) | (1 << 41), now);
    }

    /// Attributes the time since the last event to compute, exposed communication or bubble.
    fn account(&mut self, now: u64) {
        let dt = now - self.accounted_to_ps;
        self.accounted_to_ps = now;
        if self.finish_ps.is_some() || dt == 0 {
            return;
        }
        if matches!(self.running[COMPUTE], Running::Compute { .. }) {
            self.compute_ps += dt;
        } else if self.comm_active > 0 || matches!(self.running[MEMORY], Running::Memory { .. }) {
            self.exposed_comm_ps += dt;
        } else {
            self.bubble_ps += dt;
        }
    }

    /// Starts every op whose stream is free and whose dependencies are done; then moves the
    /// kernel chain's end if a collective started or ended meanwhile.
    fn pump(&mut self, model: &SimModel, ctx: &mut Ctx) {
        self.start_ready(model, ctx);
        if self.chain_slowed != (self.comm_active > 0) {
            self.replan_chain(model, ctx);
        }
    }

    fn start_ready(&mut self, model: &SimModel, ctx: &mut Ctx) {
        if self.pump_streams == 0 {
            return;
        }
        let index = &model.programs[self.program as usize];
        // Starting an op can finish it at once (a group of one), which marks more streams.
        while self.pump_streams != 0 {
            let s = self.pump_streams.trailing_zeros() as usize;
            self.pump_streams &= !(1 << s);
            if !matches!(self.running[s], Running::Idle) {
                continue;
            }
            let Some(&op) = index.stream_ops[s].get(self.done[s] as usize) else {
                continue;
            };
            let program = &model.workload.programs[self.program as usize];
            let ready = program.deps(op as usize).iter().all(|&d| {
                let ds = program.ops[d as usize].stream.index();
                self.done[ds] > index.position[d as usize]
            });
            if ready {
                self.start_op(model, s, op, ctx);
            }
        }
        if self.finish_ps.is_none()
            && (0..STREAMS).all(|s| self.done[s] as usize >= index.stream_ops[s].len())
        {
            self.finish_ps = Some(ctx.now);
            self.digest = mix(self.digest, u64::MAX, ctx.now);
        }
    }

    fn start_op(&mut self, model: &SimModel, s: usize, op: u32, ctx: &mut Ctx) {
        let program = &model.workload.programs[self.program as usize];
        let o = program.ops[op as usize];
        let (comm_group, seq) = match o.kind {
            OpKind::Collective { group, .. } => {
                let g = &mut self.group_seq[group as usize];
                *g += 1;
                (group as u8, *g - 1)
            }
            _ => (P2P, self.done[s]),
        };
        match o.kind {
            OpKind::Compute { .. } => {
                self.start_kernel(model, op, ctx.now);
                self.plan_chain(model, ctx);
            }
            OpKind::MemoryRead { bytes } => {
                let Some(memory) = model.topology.cxl_memory_of(self.rank) else {
                    self.fail(format!(
                        "rank {} reads CXL memory but its host has no CXL memory node",
                        self.rank
                    ));
                    return;
                };
                let path = match self.paths.get(model, self.node, memory, 0) {
                    Ok(p) => p,
                    Err(e) => {
                        self.fail(format!("rank {}: {e}", self.rank));
                        return;
                    }
                };
                self.running[s] = Running::Memory {
                    op,
                    start_ps: ctx.now,
                };
                let tag = Tag {
                    stream: s as u8,
                    group: MEMORY_GROUP,
                    seq: op,
                    step: 0,
                };
                // CXL links are cabled both ways alike: the reply takes the path back.
                ctx.emit(
                    memory,
                    ctx.now + path.latency_ps.max(1),
                    Body::MemoryRead {
                        bytes,
                        reply_to: self.node,
                        tag,
                        latency_ps: path.latency_ps,
                        bytes_per_s: path.bytes_per_s,
                    },
                );
            }
            OpKind::Collective {
                op: cop,
                group,
                bytes,
            } => {
                let Some((ring, shape, closed, leader)) = self.group_info(model, group) else {
                    return;
                };
                if ring.n <= 1 {
                    let run = self.comm(op, (comm_group, seq), Algo::Direct, ring, 0, ctx);
                    self.running[s] = Running::Comm(self.boxed(run));
                    self.complete(model, s, ctx);
                    return;
                }
                let plan = match self.plan(model, op, group, cop, bytes) {
                    Ok(p) => p,
                    Err(e) => return self.fail(e),
                };
                let n = u64::from(ring.n);
                let wire = |payload: u64| wire_bytes(payload, &plan, &shape);
                let gathers = gathers(&self.groups, group);
                let (algo, step_bytes, recv_needed) = if closed {
                    let needed = if gathers { ring.n - 1 } else { 1 };
                    let duration_ps = plan.time_ps();
                    (Algo::Closed { duration_ps }, 0, needed)
                } else {
                    match (plan.algorithm, cop) {
                        (Algorithm::Tree | Algorithm::NvlsTree, CollectiveOp::AllReduce) => {
                            let nvls = plan.algorithm == Algorithm::NvlsTree;
                            let lanes = if nvls {
                                1
                            } else {
                                ring::lane_count(
                                    shape.nodes,
                                    shape.ranks_per_node,
                                    plan.channels.div_ceil(2),
                                )
                            };
                            if !self.trees(model, group, lanes, nvls) {
                                return;
                            }
                            // NVLS-tree: every GPU heads one slice; the tree spans nodes only.
                            let (slices, tree_ranks) = if nvls {
                                (shape.ranks_per_node, shape.nodes)
                            } else {
                                (lanes, shape.ranks)
                            };
                            let chunk = tree::chunk_bytes(
                                plan.protocol,
                                model.collectives.settings.buffsize,
                                bytes,
                                plan.channels,
                                tree_ranks,
                                shape.nodes,
                            );
                            let most = (1u64 << 16) / u64::from(4 * lanes);
                            let chunks = bytes
                                .div_ceil(u64::from(plan.channels.max(1)))
                                .div_ceil(chunk.max(1))
                                .clamp(1, most) as u32;
                            let step = bytes.div_ceil(2 * u64::from(slices) * u64::from(chunks));
                            let intra_chunk_ps = if nvls {
                                let intra_us = shape.nvls_intra_us(cop, bytes as f64);
                                ((intra_us * 1e6 / f64::from(chunks)).round() as u64).max(1)
                            } else {
                                0
                            };
                            let needed = self.tree_receives(group, chunks, nvls);
                            let algo = Algo::Tree {
                                lanes,
                                chunks,
                                intra_chunk_ps,
                            };
                            (algo, wire(step), needed)
                        }
                        (Algorithm::Pat, CollectiveOp::AllGather | CollectiveOp::ReduceScatter) => {
                            self.pat_peers(model, group);
                            let steps = pat::steps(ring.n);
                            let reduce = cop == CollectiveOp::ReduceScatter;
                            // step_bytes is one block; step k sends several.
                            (Algo::Pat { steps, reduce }, wire(bytes.div_ceil(n)), steps)
                        }
                        (
                            _,
                            CollectiveOp::AllReduce
                            | CollectiveOp::AllGather
                            | CollectiveOp::ReduceScatter,
                        ) => {
                            // The coherent ring stops after its reduce-scatter half.
                            let full = cop == CollectiveOp::AllReduce
                                && plan.algorithm != Algorithm::CoherentRing;
                            let steps = if full { 2 * (ring.n - 1) } else { ring.n - 1 };
                            let lanes = self.lanes(model, group, plan.channels);
                            if u64::from(lanes) * u64::from(steps) > u64::from(u16::MAX) {
                                return self.fail(format!(
                                    "a ring of {} ranks on {lanes} lanes has more steps than fleetsim tags hold (65,535); use network.model = \"analytical\" for this group",
                                    ring.n
                                ));
                            }
                            let step = bytes.div_ceil(n * u64::from(lanes));
                            if model.net.flow && shape.nodes > 1 && shape.ranks_per_node == 1 {
                                // Every edge crosses the network alike: the ring as fluid.
                                (Algo::Fluid { steps, lanes }, wire(step), 1)
                            } else {
                                (Algo::Ring { steps, lanes }, wire(step), steps * lanes)
                            }
                        }
                        (_, CollectiveOp::AllToAll) => {
                            (Algo::Direct, wire(bytes.div_ceil(n)), ring.n - 1)
                        }
                        (_, CollectiveOp::Broadcast) => {
                            let chunks = ring.n;
                            let needed = if ring.pos == 0 { 0 } else { chunks };
                            (Algo::Chain { chunks }, wire(bytes.div_ceil(n)), needed)
                        }
                    }
                };
                let mut run = self.comm(op, (comm_group, seq), algo, ring, step_bytes, ctx);
                run.recv_needed = recv_needed;
                run.collective = Some((group, cop, bytes));
                run.plan = Some((plan.algorithm, plan.protocol, plan.channels));
                let settings = &model.collectives.settings;
                run.net_window = match algo {
                    Algo::Ring { lanes, .. } | Algo::Fluid { lanes, .. }
                        if plan.protocol == collective::Protocol::Simple =>
                    {
                        collective::collective_window(settings, plan.channels.div_ceil(lanes))
                    }
                    Algo::Tree { lanes, .. } if plan.protocol == collective::Protocol::Simple => {
                        collective::collective_window(settings, plan.channels.div_ceil(2 * lanes))
                    }
                    Algo::Chain { .. } | Algo::Pat { .. }
                        if plan.protocol == collective::Protocol::Simple =>
                    {
                        collective::collective_window(settings, plan.channels)
                    }
                    // NCCL runs all-to-all as grouped sends and receives.
                    Algo::Direct => collective::p2p_window(settings),
                    _ => u64::MAX,
                };
                // The fabric already simulates each step's link latency; what is left of the
                // plan's latency is software: the call and the per-step handshakes.
                // The fabric already simulates each step's link latency along the critical
                // path; what is left of the plan's latency is software: the call and the
                // per-step handshakes.
                let log_nodes = 31 - shape.nodes.max(1).leading_zeros();
                let simulated_hops = match algo {
                    Algo::Ring { steps, .. } | Algo::Fluid { steps, .. } => {
                        let op = if steps < 2 * (ring.n - 1) {
                            CollectiveOp::ReduceScatter
                        } else {
                            cop
                        };
                        Some(collective::ring_steps(op, shape.ranks, shape.nodes))
                    }
                    Algo::Tree { intra_chunk_ps, .. } if intra_chunk_ps > 0 => {
                        Some((2 * log_nodes, 2 * log_nodes))
                    }
                    Algo::Tree { .. } => {
                        let intra = shape.ranks_per_node.saturating_sub(1);
                        Some((2 * (intra + log_nodes), 2 * log_nodes))
                    }
                    Algo::Pat { steps, .. } => Some((steps, steps)),
                    _ => None,
                };
                if let Some((steps, inter_steps)) = simulated_hops {
                    let (intra_ps, inter_ps) = self.hop_latencies(group);
                    let simulated = u64::from(steps - inter_steps) * intra_ps
                        + u64::from(inter_steps) * inter_ps;
                    let call = (shape.arch.params().call_us * 1e6) as u64;
                    run.tail_ps = plan.latency_ps().saturating_sub(simulated).max(call);
                } else if !closed {
                    run.tail_ps = plan.latency_ps();
                }
                if let Algo::Tree {
                    intra_chunk_ps,
                    chunks,
                    ..
                } = algo
                    && intra_chunk_ps > 0
                {
                    // NVLS-tree: the node's multicast of the last chunk follows the network,
                    // and the NVSwitch phases take their own time however fast the network.
                    run.tail_ps += intra_chunk_ps;
                    run.analytical_sends_until = ctx.now + u64::from(chunks) * intra_chunk_ps;
                }
                if let Algo::Tree { lanes, chunks, .. } = algo {
                    run.arrivals = vec![0; (2 * lanes * chunks) as usize];
                }
                if let Algo::Closed { duration_ps } = algo {
                    let ready = ctx.now.max(self.link_free_toward(model, ring.next));
                    let moved = bytes as f64
                        * collective::bus_factor(cop, ring.n)
                        * plan.protocol.wire_factor();
                    self.account_analytical(model, ring.next, moved as u64);
                    run.ready_ps = ready;
                    if !gathers {
                        let tag = Tag {
                            stream: s as u8,
                            group: comm_group,
                            seq,
                            step: 0,
                        };
                        let to_leader = self.groups[group as usize]
                            .as_ref()
                            .and_then(|g| g.closed_peers.first().copied());
                        if let Some((leader, latency_ps)) = to_leader {
                            let (due_ps, done_ps) = (ctx.now + latency_ps, ready + duration_ps);
                            let body = Body::Arrived {
                                tag,
                                done_ps,
                                due_ps,
                            };
                            // Delivered as late as the leader may need it: see `Body::Arrived`.
                            let deliver = done_ps.saturating_sub(model.longest_link_ps);
                            ctx.emit(leader, due_ps.max(deliver), body);
                        }
                    }
                }
                self.running[s] = Running::Comm(self.boxed(run));
                if is_collective_stream(s) {
                    self.comm_active += 1;
                }
                match algo {
                    Algo::Ring { steps, lanes } => {
                        for lane in 0..lanes {
                            let (next, _, via) = self.lane(group, lane);
                            let step = (lane * steps) as u16;
                            self.send(model, s, (next, via), step_bytes, s, step, ctx);
                        }
                    }
                    Algo::Fluid { steps, lanes } => {
                        self.join_ring(model, s, (group, leader, ring.n), (steps, lanes), ctx)
                    }
                    Algo::Direct => {
                        let members = model.workload.layout.group(group, self.rank);
                        let me = self.rank;
                        for m in members.into_iter().filter(|&m| m != me) {
                            let dst = model.topology.gpu(m);
                            self.send(
                                model,
                                s,
                                (dst, NO_NODE),
                                step_bytes,
                                s,
                                ring.pos as u16,
                                ctx,
                            );
                        }
                    }
                    Algo::Tree {
                        lanes,
                        chunks,
                        intra_chunk_ps,
                    } => {
                        for lt in 0..2 * lanes {
                            if intra_chunk_ps > 0 {
                                // The NVSwitch's in-node reduction is one more child.
                                for c in 0..chunks {
                                    let tag = Tag {
                                        stream: s as u8,
                                        group: comm_group,
                                        seq,
                                        step: tree_step(lt, c, chunks, false),
                                    };
                                    let at = ctx.now + u64::from(c + 1) * intra_chunk_ps;
                                    ctx.emit(self.node, at, Body::Message { tag });
                                }
                            } else if self.tree_hop(group, lt).count == 0 {
                                for c in 0..chunks {
                                    self.tree_chunk_reduced(model, s, lt, c, ctx);
                                }
                            }
                        }
                    }
                    Algo::Pat { .. } => self.pat_send(model, s, 0, ctx),
                    Algo::Chain { chunks } if ring.pos == 0 => {
                        for c in 0..chunks {
                            self.send(model, s, (ring.next, NO_NODE), step_bytes, s, c as u16, ctx);
                        }
                    }
                    _ => {}
                }
            }
            OpKind::Send { peer, bytes } => {
                let peer = self.peer(model, peer);
                let (wire, tail_ps) = self.p2p_cost(model, peer, bytes);
                let mut run = self.comm(
                    op,
                    (comm_group, seq),
                    Algo::Send,
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
            OpKind::Recv { peer, bytes } => {
                let peer = self.peer(model, peer);
                let (wire, tail_ps) = self.p2p_cost(model, peer, bytes);
                let mut run = self.comm(
                    op,
                    (comm_group, seq),
                    Algo::Recv,
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
                    Ok(p) => ctx.emit(peer, ctx.now + p.latency_ps, Body::ClearToSend { tag }),
                    Err(e) => self.fail(e),
                }
            }
        }
        if matches!(self.running[s], Running::Comm(_)) {
            self.drain_early(model, s, comm_group, seq, ctx);
            self.check_done(model, s, ctx);
        }
    }

    /// Applies the arrivals that came before the op (`group`, `seq`) on stream `s` started.
    fn drain_early(&mut self, model: &SimModel, s: usize, group: u8, seq: u32, ctx: &mut Ctx) {
        let first = Tag {
            stream: s as u8,
            group,
            seq,
            step: 0,
        };
        let last = Tag {
            step: u16::MAX,
            ..first
        };
        // In step order, as every member applies them. The op is running now, so applying
        // an arrival adds none of its own to the list.
        while let Some(i) = (0..self.early.len())
            .filter(|&i| (first..=last).contains(&self.early[i].0))
            .min_by_key(|&i| self.early[i].0)
        {
            let (tag, count, done_ps) = self.early.swap_remove(i);
            // Due no later than now, but a closed-form member may be ready later than that.
            for _ in 0..count {
                self.apply_arrival(model, s, tag.step, (done_ps, 0), ctx);
            }
        }
    }

    /// A box for a starting op's run: the last finished op's when there is one.
    fn boxed(&mut self, run: CommRun) -> Box<CommRun> {
        match self.spare_run.take() {
            Some(mut spare) => {
                *spare = run;
                spare
            }
            None => Box::new(run),
        }
    }

    fn comm(
        &self,
        op: u32,
        (group, seq): (u8, u32),
        algo: Algo,
        ring: RingPos,
        step_bytes: u64,
        ctx: &Ctx,
    ) -> CommRun {
        CommRun {
            op,
            start_ps: ctx.now,
            group,
            seq,
            algo,
            ring,
            step_bytes,
            recv_needed: 0,
            recv_got: 0,
            sends_open: 0,
            analytical_sends_until: 0,
            wake_scheduled: false,
            waiting_clear_to_send: false,
            peer: self.node,
            collective: None,
            ready_ps: 0,
            arrived_by_ps: ctx.now,
            tail_ps: 0,
            plan: None,
            net_window: u64::MAX,
            arrivals: Vec::new(),
            queued: 0,
        }
    }

    fn ring_of_peer(&self) -> RingPos {
        RingPos {
            pos: 0,
            n: 2,
            next: self.node,
            prev: self.node,
        }
    }

    /// This rank's position and ring neighbours in its group of `kind`.
    fn ring(&mut self, model: &SimModel, kind: GroupKind) -> RingPos {
        self.group_info(model, kind)
            .map_or_else(|| self.ring_of_peer(), |g| g.0)
    }

    /// This rank's view of its group of `kind` (computed once): ring neighbours, the shape
    /// the collective model plans for, whether every member is reached over analytical
    /// links, and the leader. `None` after a routing failure (recorded).
    fn group_info(
        &mut self,
        model: &SimModel,
        kind: GroupKind,
    ) -> Option<(RingPos, CommShape, bool, NodeId)> {
        if let Some(g) = &self.groups[kind as usize] {
            return Some((g.ring, g.shape, g.closed, g.leader));
        }
        let topo = &model.topology;
        let members = model.workload.layout.group(kind, self.rank);
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
        let is_gatherer = gatherer == self.rank;
        let mut closed_peers = Vec::new();
        if closed {
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
        self.groups[kind as usize] = Some(Box::new(GroupInfo {
            ring,
            shape,
            closed,
            leader,
            lanes: Vec::new(),
            trees: Vec::new(),
            trees_for: (0, false),
            pat: Vec::new(),
            hop_ps,
            closed_peers,
            gathers: is_gatherer,
        }));
        Some((ring, shape, closed, leader))
    }

    /// Builds this rank's lane rings of group `kind` for `channels` channels (kept until the
    /// lane count changes); the lane count.
    fn lanes(&mut self, model: &SimModel, kind: GroupKind, channels: u32) -> u32 {
        let Some(g) = self.groups[kind as usize].as_mut() else {
            return 1;
        };
        let lanes = ring::lane_count(g.shape.nodes, g.shape.ranks_per_node, channels);
        if g.lanes.len() != lanes as usize {
            let topo = &model.topology;
            let node = |r: u32| topo.nccl_node(r);
            let members = model.workload.layout.group(kind, self.rank);
            let pxn = model.collectives.settings.rail_aligned_rings();
            g.lanes = ring::lane_links(&members, node, lanes, pxn, self.rank)
                .into_iter()
                .map(|l| {
                    (
                        topo.gpu(l.next),
                        topo.gpu(l.prev),
                        l.via.map_or(NO_NODE, |v| topo.gpu(v)),
                    )
                })
                .collect();
        }
        lanes
    }

    /// (next, prev, relay) of lane `lane` of group `kind`, built by [`Self::lanes`].
    fn lane(&self, kind: GroupKind, lane: u32) -> (NodeId, NodeId, NodeId) {
        self.groups[kind as usize]
            .as_ref()
            .and_then(|g| g.lanes.get(lane as usize).copied())
            .unwrap_or((self.node, self.node, NO_NODE))
    }

    /// Builds this rank's tree links of group `kind` for `lanes` lanes (NVLS-tree's when
    /// `nvls`), kept until that changes; false after a failure.
    fn trees(&mut self, model: &SimModel, kind: GroupKind, lanes: u32, nvls: bool) -> bool {
        let Some(g) = self.groups[kind as usize].as_mut() else {
            return false;
        };
        if g.trees_for != (lanes, nvls) || g.trees.is_empty() {
            let topo = &model.topology;
            let node = |r: u32| topo.nccl_node(r);
            let members = model.workload.layout.group(kind, self.rank);
            let hop = |l: &tree::TreeLinks| {
                let mut children = [NO_NODE; 3];
                for (slot, &c) in children.iter_mut().zip(&l.children) {
                    *slot = topo.gpu(c);
                }
                TreeHop {
                    parent: l.parent.map_or(NO_NODE, |p| topo.gpu(p)),
                    children,
                    count: l.children.len().min(3) as u8,
                }
            };
            g.trees = if nvls {
                vec![
                    tree::nvls_tree_links(&members, node, self.rank)
                        .each_ref()
                        .map(hop),
                ]
            } else {
                tree::tree_links(&members, node, lanes, self.rank)
                    .iter()
                    .map(|t| t.each_ref().map(hop))
                    .collect()
            };
            g.trees_for = (lanes, nvls);
        }
        true
    }

    /// The plan of collective op `op` (`cop` on `bytes` in this rank's group of `kind`),
    /// made on first use.
    fn plan(
        &mut self,
        model: &SimModel,
        op: u32,
        kind: GroupKind,
        cop: CollectiveOp,
        bytes: u64,
    ) -> Result<Plan, String> {
        let slot = self.collective_slot(model, op);
        if let Some(p) = slot.plan {
            return Ok(p);
        }
        let Some(g) = self.groups[kind as usize].as_ref() else {
            return Err(format!("no {kind:?} group was set up"));
        };
        let plan = plan_for(model, &g.shape, g.closed, cop, bytes)?;
        self.collective_slot(model, op).plan = Some(plan);
        Ok(plan)
    }

    /// What this rank keeps of collective op `op`.
    fn collective_slot(&mut self, model: &SimModel, op: u32) -> &mut CollectiveSlot {
        let index = &model.programs[self.program as usize];
        if self.collectives.is_empty() {
            self.collectives = vec![CollectiveSlot::default(); index.collective_keys.len()];
        }
        &mut self.collectives[usize::from(index.collective_slot[op as usize])]
    }

    /// One-way latency to a member of group `kind` on this host and on another host, ps.
    fn hop_latencies(&self, kind: GroupKind) -> (u64, u64) {
        self.groups[kind as usize]
            .as_ref()
            .map_or((0, 0), |g| g.hop_ps)
    }

    /// Tree `lt % 2` of lane `lt / 2` of group `kind`, built by [`Self::trees`].
    fn tree_hop(&self, kind: GroupKind, lt: u32) -> TreeHop {
        self.groups[kind as usize]
            .as_ref()
            .and_then(|g| g.trees.get((lt / 2) as usize))
            .map_or(
                TreeHop {
                    parent: NO_NODE,
                    children: [NO_NODE; 3],
                    count: 0,
                },
                |t| t[(lt % 2) as usize],
            )
    }

    /// Chunks this rank receives in a tree all-reduce: from each child going up (and from
    /// the NVSwitch under NVLS-tree), from the parent coming down.
    fn tree_receives(&self, kind: GroupKind, chunks: u32, nvls: bool) -> u32 {
        let Some(g) = self.groups[kind as usize].as_ref() else {
            return 0;
        };
        g.trees
            .iter()
            .flatten()
            .map(|t| {
                let from = u32::from(t.count) + u32::from(nvls) + u32::from(t.parent != NO_NODE);
                from * chunks
            })
            .sum()
    }

    /// Chunk `c` of lane-tree `lt` holds this rank's whole subtree: it goes up to the
    /// parent, or at the root turns into the broadcast down.
    fn tree_chunk_reduced(&mut self, model: &SimModel, s: usize, lt: u32, c: u32, ctx: &mut Ctx) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let Algo::Tree { chunks, .. } = run.algo else {
            return;
        };
        let kind = run.collective.map_or(GroupKind::Dp, |c| c.0);
        let hop = self.tree_hop(kind, lt);
        if hop.parent != NO_NODE {
            let step = tree_step(lt, c, chunks, false);
            self.send_serial(model, s, hop.parent, step, (2 * lt) as u16, ctx);
        } else {
            for &child in hop.children() {
                let step = tree_step(lt, c, chunks, true);
                self.send_serial(model, s, child, step, (2 * lt + 1) as u16, ctx);
            }
        }
    }

    /// Computes PAT's peers in group `kind` once.
    fn pat_peers(&mut self, model: &SimModel, kind: GroupKind) {
        let Some(g) = self.groups[kind as usize].as_mut() else {
            return;
        };
        if !g.pat.is_empty() {
            return;
        }
        let topo = &model.topology;
        let members = model.workload.layout.group(kind, self.rank);
        let (n, pos) = (g.ring.n, g.ring.pos);
        g.pat = (0..pat::steps(n))
            .map(|k| {
                let d = (1u32 << k) % n;
                (
                    topo.gpu(members[((pos + n - d) % n) as usize]),
                    topo.gpu(members[((pos + d) % n) as usize]),
                )
            })
            .collect();
    }

    /// PAT's peer `2^k` positions before (`before`) or after this rank.
    fn pat_peer(&self, kind: GroupKind, k: u32, before: bool) -> NodeId {
        self.groups[kind as usize]
            .as_ref()
            .and_then(|g| g.pat.get(k as usize))
            .map_or(self.node, |&(b, a)| if before { b } else { a })
    }

    /// Sends PAT's step `k` of the op on stream `s`.
    fn pat_send(&mut self, model: &SimModel, s: usize, k: u32, ctx: &mut Ctx) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let Algo::Pat { reduce, .. } = run.algo else {
            return;
        };
        let kind = run.collective.map_or(GroupKind::Dp, |c| c.0);
        let n = run.ring.n;
        let (distance, blocks) = if reduce {
            pat::reduce_scatter_step(n, k)
        } else {
            pat::all_gather_step(n, k)
        };
        let peer = self.pat_peer(kind, distance.trailing_zeros(), !reduce);
        let bytes = run.step_bytes * u64::from(blocks);
        self.send(model, s, (peer, NO_NODE), bytes, s, k as u16, ctx);
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
            plan.latency_ps(),
        )
    }

    fn peer(&mut self, model: &SimModel, peer: Peer) -> NodeId {
        match peer {
            Peer::PpNext => self.ring(model, GroupKind::Pp).next,
            Peer::PpPrev => self.ring(model, GroupKind::Pp).prev,
            Peer::CpNext => self.ring(model, GroupKind::Cp).next,
            Peer::CpPrev => self.ring(model, GroupKind::Cp).prev,
        }
    }

    /// A message, or a clear-to-send, for stream `tag.stream`.
    fn arrived(&mut self, model: &SimModel, tag: Tag, done_and_due: (u64, u64), ctx: &mut Ctx) {
        let s = usize::from(tag.stream);
        let current = matches!(&self.running[s], Running::Comm(r) if r.seq == tag.seq && r.group == tag.group);
        if current {
            self.apply_arrival(model, s, tag.step, done_and_due, ctx);
            self.check_done(model, s, ctx);
        } else {
            let (done_ps, _) = done_and_due;
            match self.early.iter_mut().find(|(t, ..)| *t == tag) {
                Some((_, count, done)) => {
                    *count += 1;
                    *done = (*done).max(done_ps);
                }
                None => self.early.push((tag, 1, done_ps)),
            }
        }
    }

    fn apply_arrival(
        &mut self,
        model: &SimModel,
        s: usize,
        step: u16,
        (done_ps, due_ps): (u64, u64),
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &mut self.running[s] else {
            return;
        };
        let (algo, ring, step_bytes, peer) = (run.algo, run.ring, run.step_bytes, run.peer);
        match algo {
            Algo::Send => {
                run.waiting_clear_to_send = false;
                let to = mirror(Stream::ALL[s]).index();
                let via = p2p_via(model, self.rank, peer);
                self.send(model, s, (peer, via), step_bytes, to, 0, ctx);
            }
            Algo::Ring { steps, .. } => {
                run.recv_got += 1;
                let (lane, k) = (u32::from(step) / steps, u32::from(step) % steps);
                if k + 1 < steps {
                    let kind = run.collective.map_or(GroupKind::Dp, |c| c.0);
                    let (next, _, via) = self.lane(kind, lane);
                    self.send(model, s, (next, via), step_bytes, s, step + 1, ctx);
                }
            }
            Algo::Fluid { .. } => run.recv_got += 1,
            Algo::Closed { duration_ps } => {
                run.recv_got += 1;
                // Every member plans alike ([`GpuLp::group_info`]), so a member's `done_ps`
                // is its ready time plus this same duration.
                run.ready_ps = run.ready_ps.max(done_ps.saturating_sub(duration_ps));
                run.arrived_by_ps = run.arrived_by_ps.max(due_ps);
                let kind = run.collective.map_or(GroupKind::Dp, |c| c.0);
                if gathers(&self.groups, kind) && run.recv_got == run.recv_needed {
                    // As of the last arrival's due time, not of its delivery: a member sends
                    // it no later than this finish (see `Body::Arrived`), so every message
                    // below is still ahead of now.
                    let arrived_by = run.arrived_by_ps;
                    let finish = run.ready_ps.saturating_add(duration_ps).max(arrived_by);
                    run.analytical_sends_until = finish;
                    let (kind, group, seq) = (
                        run.collective.map_or(GroupKind::Dp, |c| c.0),
                        run.group,
                        run.seq,
                    );
                    let tag = Tag {
                        stream: s as u8,
                        group,
                        seq,
                        step: 1,
                    };
                    if let Some(g) = &self.groups[kind as usize] {
                        for &(member, latency_ps) in &g.closed_peers {
                            let at = finish.max(arrived_by + latency_ps);
                            ctx.emit(member, at, Body::Message { tag });
                        }
                    }
                }
            }
            Algo::Tree {
                chunks,
                intra_chunk_ps,
                ..
            } => {
                run.recv_got += 1;
                let kind = run.collective.map_or(GroupKind::Dp, |c| c.0);
                let (lt, c, down) = tree_unstep(step, chunks);
                if down {
                    let hop = self.tree_hop(kind, lt);
                    for &child in hop.children() {
                        let step = tree_step(lt, c, chunks, true);
                        self.send_serial(model, s, child, step, (2 * lt + 1) as u16, ctx);
                    }
                } else {
                    let got = &mut run.arrivals[(lt * chunks + c) as usize];
                    *got += 1;
                    let got = *got;
                    let needed = self.tree_hop(kind, lt).count + u8::from(intra_chunk_ps > 0);
                    if got == needed {
                        self.tree_chunk_reduced(model, s, lt, c, ctx);
                    }
                }
            }
            Algo::Pat { steps, .. } => {
                run.recv_got += 1;
                if u32::from(step) + 1 < steps {
                    self.pat_send(model, s, u32::from(step) + 1, ctx);
                }
            }
            Algo::Chain { .. } => {
                run.recv_got += 1;
                if ring.pos + 1 < ring.n {
                    self.send(model, s, (ring.next, NO_NODE), step_bytes, s, step, ctx);
                }
            }
            Algo::Direct | Algo::Recv => run.recv_got += 1,
        }
    }

    fn check_done(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        if let Running::Comm(r) = &mut self.running[s]
            && r.recv_got >= r.recv_needed
            && r.sends_open == 0
            && r.queued == 0
            && !r.waiting_clear_to_send
        {
            if r.tail_ps > 0 {
                // The transfers are done; the plan's latency part follows once.
                r.analytical_sends_until = r.analytical_sends_until.max(ctx.now + r.tail_ps);
                r.tail_ps = 0;
            }
            if ctx.now >= r.analytical_sends_until {
                self.complete(model, s, ctx);
            } else if !r.wake_scheduled {
                r.wake_scheduled = true;
                let stream = s as u8;
                ctx.emit(
                    self.node,
                    r.analytical_sends_until,
                    Body::SendDone { stream },
                );
            }
        }
    }

    /// A segment-level flow of the op on stream `s` was fully acknowledged.
    fn flow_done(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        if let Running::Comm(r) = &mut self.running[s] {
            r.sends_open = r.sends_open.saturating_sub(1);
        }
        self.check_done(model, s, ctx);
    }

    /// The last analytical send of the op on stream `s` was delivered.
    fn analytical_sends_delivered(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        if let Running::Comm(r) = &mut self.running[s] {
            r.wake_scheduled = false;
        }
        self.check_done(model, s, ctx);
    }

    /// The memory event of compute op `op`, if it has one (the compute stream runs in program
    /// order, so it can only be the next one).
    fn memory_event(&self, model: &SimModel, op: u32) -> Option<MemoryEvent> {
        model.workload.programs[self.program as usize]
            .memory_events
            .get(self.memory_cursor as usize)
            .filter(|e| e.op == op)
            .copied()
    }

    /// The op on stream `s` finished now.
    fn complete(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        self.complete_at(model, s, ctx.now);
    }

    /// Finishes the op running on stream `s` at `at`.
    fn complete_at(&mut self, model: &SimModel, s: usize, at: u64) {
        let running = std::mem::replace(&mut self.running[s], Running::Idle);
        let (op, start) = match running {
            Running::Idle => return,
            Running::Memory { op, start_ps } => (op, start_ps),
            Running::Compute { op, start_ps } => {
                if let Some(e) = self.memory_event(model, op) {
                    self.live_bytes = self.live_bytes.saturating_sub(e.free);
                    self.memory_cursor += 1;
                }
                (op, start_ps)
            }
            Running::Comm(run) => {
                if run.ring.n > 1 && is_collective_stream(s) && run.collective.is_some() {
                    self.comm_active -= 1;
                }
                if run.collective.is_some() {
                    let st = &mut self.collective_slot(model, run.op).stats;
                    st.add(at - run.start_ps, u64::from(run.ring.n));
                    if let (true, Some((a, p, c))) = (st.plan.is_empty(), run.plan) {
                        st.plan = format!("{}/{}/{c}", a.name(), p.name());
                    }
                }
                let ended = (run.op, run.start_ps);
                self.spare_run = Some(run);
                ended
            }
        };
        self.done[s] += 1;
        self.ops_done += 1;
        self.pump_streams |=
            (1 << s) | model.programs[self.program as usize].dependent_streams[op as usize];
        self.digest = mix(self.digest, u64::from(op), at);
        if model.trace {
            self.spans[s].push(Span {
                start_ps: start,
                end_ps: at,
                name: op,
            });
        }
    }

    /// Fluid ring: hands this member's edges to the flow LP, which runs the ring once every
    /// member has, and tells each when it ends.
    fn join_ring(
        &mut self,
        model: &SimModel,
        s: usize,
        (kind, leader, n): (GroupKind, NodeId, u32),
        (steps, lanes): (u32, u32),
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let (group, seq, step_bytes) = (run.group, run.seq, run.step_bytes);
        let fifo_rate = collective::window_rate(run.net_window);
        let Some(home) = model.flow_home else {
            return self.fail("a ring crosses shared links but the fabric has no flow LP".into());
        };
        let tag = Tag {
            stream: s as u8,
            group,
            seq,
            step: 0,
        };
        let lanes = (0..lanes)
            .map(|lane| {
                let (next, _, via) = self.lane(kind, lane);
                let first = Tag {
                    step: (lane * steps) as u16,
                    ..tag
                };
                (next, via, self.flow_hash(model, next, first))
            })
            .collect();
        let join = super::flow::RingJoin {
            leader,
            group,
            seq,
            n,
            member: self.node,
            tag,
            lanes,
            steps,
            step_bytes,
            fifo_rate,
        };
        ctx.emit(
            home,
            ctx.now + model.flow_delay_ps,
            Body::RingJoin(Box::new(join)),
        );
    }

    /// Records a failure where a value was expected.
    fn fail_none<T>(&mut self, message: String) -> Option<T> {
        self.fail(message);
        None
    }

    fn fail(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(message);
        }
    }

    pub fn report(&self, model: &SimModel) -> LpReport {
        let index = &model.programs[self.program as usize];
        let program = &model.workload.programs[self.program as usize];
        let blocked: Vec<String> = (0..STREAMS)
            .filter_map(|s| {
                let &op = index.stream_ops[s].get(self.done[s] as usize)?;
                Some(format!(
                    "stream {} at op {op} ({:?})",
                    Stream::ALL[s].name(),
                    program.ops[op as usize].kind
                ))
            })
            .collect();
        let mut r = LpReport {
            digest: self.digest,
            gpu: Some(GpuReport {
                rank: self.rank,
                stage: program.stage,
                finish_ps: self.finish_ps,
                compute_ps: self.compute_ps,
                exposed_comm_ps: self.exposed_comm_ps,
                bubble_ps: self.bubble_ps,
                ops_done: self.ops_done,
                peak_memory_bytes: self.peak_bytes,
                error: self.error.clone(),
                blocked: self.finish_ps.is_none().then(|| blocked.join("; ")),
            }),
            analytical_bytes: self.analytical_bytes,
            analytical_link_bytes: self.analytical_link_bytes,
            flow_arrivals: self.flow_arrivals.clone(),
            collectives: index
                .collective_keys
                .iter()
                .zip(&self.collectives)
                .filter(|(_, c)| c.stats.count > 0)
                .map(|(k, c)| (*k, c.stats.clone()))
                .collect(),
            op_spans: self
                .spans
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_empty())
                .map(|(s, v)| (s as u8, v.clone()))
                .collect(),
            ..LpReport::default()
        };
        self.ports.report_into(&mut r);
        r
    }
}

/// The plan of a collective: NCCL's choice. Where the group's links are analytical it runs
/// in closed form; where packet-level links are involved the engine runs its transfers, so
/// the choice is among the algorithms it runs transfer by transfer (all but single-node NVLS,
/// whose reduction happens inside the switch).
/// Per collective of a program ([`super::ProgramIndex::collective_keys`]), the least delay
/// from its start to its first message when its group completes in closed form: a member's
/// arrival reaches the leader no sooner than the collective's duration less the longest
/// link (`Body::Arrived`), and the leader answers no sooner than the duration. 0 where the
/// group is not known yet or not closed.
fn closed_form_least_ps(
    model: &SimModel,
    groups: &[Option<Box<GroupInfo>>],
    index: &super::ProgramIndex,
) -> Vec<u64> {
    index
        .collective_keys
        .iter()
        .map(|&(kind, cop, bytes)| {
            let group = GroupKind::from_index(kind).and_then(|k| groups[k as usize].as_ref());
            let (Some(g), Some(&cop)) = (group, CollectiveOp::ALL.get(usize::from(cop))) else {
                return 0;
            };
            if !g.closed || g.ring.n <= 1 {
                return 0;
            }
            plan_for(model, &g.shape, true, cop, bytes).map_or(0, |plan| {
                plan.time_ps().saturating_sub(model.longest_link_ps)
            })
        })
        .collect()
}

fn plan_for(
    model: &SimModel,
    shape: &CommShape,
    closed: bool,
    op: CollectiveOp,
    bytes: u64,
) -> Result<Plan, String> {
    let settings = model.collectives.settings;
    let stepped: &[Algorithm] = match op {
        CollectiveOp::AllToAll => &[Algorithm::Direct],
        CollectiveOp::Broadcast => &[Algorithm::Ring],
        _ => &[
            Algorithm::Tree,
            Algorithm::Ring,
            Algorithm::NvlsTree,
            Algorithm::Pat,
            Algorithm::CoherentRing,
        ],
    };
    let allowed = if closed { &Algorithm::ALL[..] } else { stepped };
    if let Some(a) = settings.algorithm
        && !closed
        && !stepped.contains(&a)
    {
        let names: Vec<&str> = stepped.iter().map(|a| a.name()).collect();
        return Err(format!(
            "collectives.algorithm = \"{}\" cannot run {} on groups with packet-level links (fleetsim runs {} there transfer by transfer): set network.model = \"analytical\" (or network.intra_host = \"analytical\" for groups inside a host) or collectives.algorithm = \"auto\"",
            a.name(),
            op.name(),
            names.join(", "),
        ));
    }
    shape
        .plan_among(op, bytes, &settings, allowed)
        .ok_or_else(|| {
            format!(
                "no NCCL algorithm runs {} of {bytes} bytes on {} ranks over {} nodes with collectives.algorithm = {} and collectives.protocol = {}; set them to \"auto\"",
                op.name(),
                shape.ranks,
                shape.nodes,
                settings.algorithm.map_or("auto", Algorithm::name),
                settings.protocol.map_or("auto", |p| p.name()),
            )
        })
}

/// The GPU whose NIC carries rank `rank`'s send to GPU node `peer` (PXN, unless
/// `collectives.pxn_disable`: [`crate::topology::Topology::p2p_relay`]), or [`NO_NODE`].
pub fn p2p_via(model: &SimModel, rank: u32, peer: NodeId) -> NodeId {
    if model.collectives.settings.pxn_disable {
        return NO_NODE;
    }
    let topology = &model.topology;
    let peer_rank = topology.nodes()[peer as usize].index;
    topology
        .p2p_relay(rank, peer_rank)
        .map_or(NO_NODE, |relay| topology.gpu(relay))
}

/// The tag step of chunk `c` of lane-tree `lt` going up (reduce) or down (broadcast).
fn tree_step(lt: u32, c: u32, chunks: u32, down: bool) -> u16 {
    ((lt * chunks + c) * 2 + u32::from(down)) as u16
}

/// (lane-tree, chunk, down) of a tree tag step.
fn tree_unstep(step: u16, chunks: u32) -> (u32, u32, bool) {
    let s = u32::from(step);
    ((s / 2) / chunks, (s / 2) % chunks, s % 2 == 1)
}

/// Bytes a collective's transfer of `payload` puts on the wire.
fn wire_bytes(payload: u64, plan: &Plan, shape: &CommShape) -> u64 {
    collective::wire_bytes(payload, plan.protocol, shape.arch, shape.nodes > 1)
}
