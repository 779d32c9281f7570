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

mod collective;
mod program;
mod transport;

pub use collective::p2p_via;
pub use transport::{flow_hash, injected_tag, segment_size};

use super::cut::Cut;
use super::net::Ports;
use super::results::{GpuReport, LpReport, Span};
use super::{Body, Ctx, HotSpan, INJECTED, MEMORY_GROUP, NO_NODE, NO_SPAN, Segment, SimModel, Tag};
use crate::hash::{mix, splitmix64};
use crate::layout::GroupKind;
use crate::topology::NodeId;
use crate::workload::{CollectiveOp, OpKind, Stream};
use collective::{CollectiveSlot, CommRun, GroupInfo, plan_for};
use program::Running;
use transport::{Flow, PathCache, SerialConnection};

const STREAMS: usize = Stream::COUNT;
const COMPUTE: usize = 0;
const MEMORY: usize = Stream::Memory as usize;

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
