//! A GPU LP: runs its rank's program on a compute stream and communication streams, with the
//! execution semantics of [`crate::workload`] (FIFO streams, explicit dependencies, k-th
//! collective of a stream matches the k-th on every member, send/receive rendezvous).
//!
//! Collectives become point-to-point flows. Until the NCCL algorithms arrive (issue 5) every
//! collective uses the bandwidth-optimal plain algorithm of NCCL's `doc/PERFORMANCE.md`:
//! all-reduce is a ring of 2(n−1) steps of size/n (reduce-scatter then all-gather),
//! all-gather and reduce-scatter rings of n−1 steps, all-to-all direct pairwise sends, and
//! broadcast a chain from the group's first rank, pipelined in n chunks. A ring step is sent
//! when the previous step arrived from the ring predecessor; collective data is sent eagerly
//! into the peer's (preallocated, as NCCL's) buffers, while point-to-point sends wait for the
//! receiver's clear-to-send (NCCL's rendezvous for `ncclSend`/`ncclRecv`).
//!
//! Time accounting, per rank: `compute` while a kernel runs; `exposed_comm` while no kernel
//! runs and a collective does; `bubble` for every other moment before the rank finishes
//! (waiting for pipeline sends and receives, or for dependencies).

use std::collections::BTreeMap;

use super::dcqcn::Dcqcn;
use super::net::{Ports, serialisation_ps};
use super::results::{CollectiveStats, GpuReport, LpReport, Span};
use super::{Body, Ctx, INJECTED, P2P, Segment, SimModel, Tag};
use crate::layout::GroupKind;
use crate::topology::{NodeId, splitmix64};
use crate::workload::{CollectiveOp, OpKind, Peer, Stream};

const STREAMS: usize = Stream::COUNT;
const COMPUTE: usize = 0;

/// A rank's place in a group: position, size and ring neighbours (GPU nodes).
#[derive(Debug, Clone, Copy)]
struct RingPos {
    pos: u32,
    n: u32,
    next: NodeId,
    prev: NodeId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Algo {
    Ring {
        steps: u32,
    },
    /// Broadcast: chunks flow down the chain from position 0.
    Chain {
        chunks: u32,
    },
    Direct,
    Send,
    Recv,
}

#[derive(Debug, Clone)]
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
}

#[derive(Debug, Clone)]
enum Running {
    Idle,
    Compute { op: u32, start_ps: u64 },
    Comm(Box<CommRun>),
}

/// A flow being sent segment by segment.
#[derive(Debug)]
struct Flow {
    dst: NodeId,
    total: u64,
    sent: u64,
    sent_any: bool,
    acked: u64,
    in_flight: u64,
    window: u64,
    hash: u64,
    tag: Tag,
    path_ps: u64,
    notify: Option<u8>,
    line_rate: f64,
    dcqcn: Option<Dcqcn>,
    next_tx_ps: u64,
    pace_scheduled: bool,
}

#[derive(Debug)]
pub struct GpuLp {
    node: NodeId,
    rank: u32,
    program: u32,
    kernel_table: u32,
    done: [u32; STREAMS],
    running: [Running; STREAMS],
    /// Messages and clear-to-sends that arrived before the op they belong to started.
    early: BTreeMap<Tag, u32>,
    flows: Vec<Option<Flow>>,
    free_flows: Vec<u32>,
    ports: Ports,
    paths: PathCache,
    /// Analytical transfers: when each out link is free again (a FIFO share of it).
    link_free_ps: Vec<u64>,
    groups: [Option<RingPos>; 9],
    /// Collectives started per group kind: the sequence number of the next one.
    group_seq: [u32; 9],
    /// Collective streams with an op running.
    comm_active: u32,
    accounted_to_ps: u64,
    compute_ps: u64,
    exposed_comm_ps: u64,
    bubble_ps: u64,
    finish_ps: Option<u64>,
    ops_done: u64,
    /// Streams whose head op may have become ready (a bit per stream): set when an op
    /// finishes, for its own stream and the streams of its dependents.
    pump_streams: u32,
    digest: u64,
    collectives: BTreeMap<(u8, u8, u64), CollectiveStats>,
    analytical_bytes: [u64; 4],
    spans: Vec<Vec<Span>>,
    error: Option<String>,
    /// Injected flows ([`SimModel::flows`]) that arrived here: (index, time).
    flow_arrivals: Vec<(u32, u64)>,
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

/// The ECMP hash of a flow: fixed by the experiment seed, the endpoints and the message, so
/// one flow keeps one path and reruns take the same paths.
pub fn flow_hash(seed: u64, src: NodeId, dst: NodeId, tag: Tag) -> u64 {
    let a = (u64::from(src) << 32) | u64::from(dst);
    let b = (u64::from(tag.stream) << 56)
        | (u64::from(tag.group) << 48)
        | (u64::from(tag.step) << 32)
        | u64::from(tag.seq);
    splitmix64(seed ^ splitmix64(a) ^ splitmix64(b).rotate_left(17))
}

/// The tag of injected flow `index`.
pub fn injected_tag(index: u32) -> Tag {
    Tag {
        stream: 0,
        group: INJECTED,
        seq: index,
        step: 0,
    }
}

/// Folds a completion into a digest.
pub fn mix(digest: u64, a: u64, b: u64) -> u64 {
    splitmix64(digest ^ splitmix64(a ^ splitmix64(b)))
}

/// A path's one-way latency, bottleneck bandwidth, first link and whether any link is queued.
#[derive(Debug, Clone, Copy)]
struct PathInfo {
    latency_ps: u64,
    bytes_per_s: f64,
    first_link: u32,
    hops: u32,
    queued: bool,
    /// Link classes the path crosses, to account analytical traffic.
    classes: [bool; 4],
}

/// Routes from one GPU: paths with a single choice at every hop (the same for every flow
/// hash, such as NVLink inside a host) are computed once per destination.
#[derive(Debug, Default)]
struct PathCache {
    fixed: Vec<(NodeId, PathInfo)>,
    path: Vec<u32>,
    hops: Vec<u32>,
}

impl PathCache {
    fn get(
        &mut self,
        model: &SimModel,
        src: NodeId,
        dst: NodeId,
        hash: u64,
    ) -> Result<PathInfo, String> {
        if let Some((_, info)) = self.fixed.iter().find(|(d, _)| *d == dst) {
            return Ok(*info);
        }
        let single_choice = model
            .topology
            .path_into(src, dst, hash, &mut self.path, &mut self.hops)
            .map_err(|e| format!("no route from node {src} to node {dst}: {e}"))?;
        let links = model.topology.links();
        let mut info = PathInfo {
            latency_ps: 0,
            bytes_per_s: f64::INFINITY,
            first_link: self.path.first().copied().unwrap_or(u32::MAX),
            hops: self.path.len() as u32,
            queued: false,
            classes: [false; 4],
        };
        for &l in &self.path {
            let lk = links[l as usize];
            info.latency_ps += lk.latency_ps;
            info.bytes_per_s = info.bytes_per_s.min(lk.bytes_per_s);
            info.queued |= model.net.is_queued(lk.class);
            info.classes[super::results::class_index(lk.class)] = true;
        }
        if single_choice {
            self.fixed.push((dst, info));
        }
        Ok(info)
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
            done: [0; STREAMS],
            running: std::array::from_fn(|_| Running::Idle),
            early: BTreeMap::new(),
            flows: Vec::new(),
            free_flows: Vec::new(),
            ports: Ports::new(model, node),
            paths: PathCache::default(),
            link_free_ps: vec![0; out],
            groups: [None; 9],
            group_seq: [0; 9],
            comm_active: 0,
            accounted_to_ps: 0,
            compute_ps: 0,
            exposed_comm_ps: 0,
            bubble_ps: 0,
            finish_ps: None,
            ops_done: 0,
            pump_streams: (1 << STREAMS) - 1,
            digest: splitmix64(u64::from(node)),
            collectives: BTreeMap::new(),
            analytical_bytes: [0; 4],
            spans: if model.trace {
                vec![Vec::new(); STREAMS]
            } else {
                Vec::new()
            },
            error: None,
            flow_arrivals: Vec::new(),
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
        match body {
            Body::ComputeDone => self.complete(model, COMPUTE, ctx),
            Body::Segment(seg) if seg.dst == self.node => {
                ctx.emit(
                    seg.src,
                    ctx.now + seg.path_ps,
                    Body::Ack {
                        flow: seg.flow,
                        bytes: seg.bytes,
                        ecn: seg.ecn,
                    },
                );
                if seg.last && seg.tag.group == INJECTED {
                    self.flow_arrivals.push((seg.tag.seq, ctx.now));
                    self.digest = mix(self.digest, u64::from(seg.tag.seq) | (1 << 41), ctx.now);
                } else if seg.last {
                    self.arrived(model, seg.tag, ctx);
                }
            }
            Body::Segment(seg) => self.ports.forward(model, seg, ctx),
            Body::Message { tag } | Body::ClearToSend { tag } if tag.group == INJECTED => {
                self.flow_arrivals.push((tag.seq, ctx.now));
                self.digest = mix(self.digest, u64::from(tag.seq) | (1 << 41), ctx.now);
            }
            Body::Message { tag } | Body::ClearToSend { tag } => self.arrived(model, tag, ctx),
            Body::StartFlow { index } => {
                let f = model.flows[index as usize];
                let dst = model.topology.gpu(f.dst);
                self.transmit(model, dst, f.bytes, injected_tag(index), None, ctx);
            }
            Body::SendDone { stream } => {
                self.analytical_sends_delivered(model, usize::from(stream), ctx)
            }
            Body::Ack { flow, bytes, ecn } => self.acked(model, flow, bytes, ecn, ctx),
            Body::Pace { flow } => {
                if let Some(Some(f)) = self.flows.get_mut(flow as usize) {
                    f.pace_scheduled = false;
                }
                self.pump_flow(model, flow, ctx);
            }
            other => self.ports.handle(model, &other, ctx),
        }
        self.pump(model, ctx);
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
        } else if self.comm_active > 0 {
            self.exposed_comm_ps += dt;
        } else {
            self.bubble_ps += dt;
        }
    }

    /// Starts every op whose stream is free and whose dependencies are done.
    fn pump(&mut self, model: &SimModel, ctx: &mut Ctx) {
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
            OpKind::Compute { kernel } => {
                let base = model.kernel_ps[self.kernel_table as usize][kernel as usize];
                let ps = if self.comm_active > 0 {
                    (base as f64 / model.interference.compute_rate).round() as u64
                } else {
                    base
                };
                self.running[s] = Running::Compute {
                    op,
                    start_ps: ctx.now,
                };
                ctx.emit(self.node, ctx.now + ps, Body::ComputeDone);
            }
            OpKind::Collective {
                op: cop,
                group,
                bytes,
            } => {
                let ring = self.ring(model, group);
                if ring.n <= 1 {
                    self.running[s] = Running::Comm(Box::new(self.comm(
                        op,
                        (comm_group, seq),
                        Algo::Direct,
                        ring,
                        0,
                        ctx,
                    )));
                    self.complete(model, s, ctx);
                    return;
                }
                let n = u64::from(ring.n);
                let (algo, step_bytes, recv_needed) = match cop {
                    CollectiveOp::AllReduce => {
                        let steps = 2 * (ring.n - 1);
                        (Algo::Ring { steps }, bytes.div_ceil(n), steps)
                    }
                    CollectiveOp::AllGather | CollectiveOp::ReduceScatter => {
                        let steps = ring.n - 1;
                        (Algo::Ring { steps }, bytes.div_ceil(n), steps)
                    }
                    CollectiveOp::AllToAll => (Algo::Direct, bytes.div_ceil(n), ring.n - 1),
                    CollectiveOp::Broadcast => {
                        let chunks = ring.n;
                        let needed = if ring.pos == 0 { 0 } else { chunks };
                        (Algo::Chain { chunks }, bytes.div_ceil(n), needed)
                    }
                };
                let mut run = self.comm(op, (comm_group, seq), algo, ring, step_bytes, ctx);
                run.recv_needed = recv_needed;
                run.collective = Some((group, cop, bytes));
                self.running[s] = Running::Comm(Box::new(run));
                if is_collective_stream(s) {
                    self.comm_active += 1;
                }
                match algo {
                    Algo::Ring { .. } => self.send(model, s, ring.next, step_bytes, s, 0, ctx),
                    Algo::Direct => {
                        let members = model.workload.layout.group(group, self.rank);
                        let me = self.rank;
                        for m in members.into_iter().filter(|&m| m != me) {
                            let dst = model.topology.gpu(m);
                            self.send(model, s, dst, step_bytes, s, ring.pos as u16, ctx);
                        }
                    }
                    Algo::Chain { chunks } if ring.pos == 0 => {
                        for c in 0..chunks {
                            self.send(model, s, ring.next, step_bytes, s, c as u16, ctx);
                        }
                    }
                    _ => {}
                }
            }
            OpKind::Send { peer, bytes } => {
                let peer = self.peer(model, peer);
                let mut run = self.comm(
                    op,
                    (comm_group, seq),
                    Algo::Send,
                    self.ring_of_peer(),
                    bytes,
                    ctx,
                );
                run.peer = peer;
                run.waiting_clear_to_send = true;
                self.running[s] = Running::Comm(Box::new(run));
            }
            OpKind::Recv { peer, bytes } => {
                let peer = self.peer(model, peer);
                let mut run = self.comm(
                    op,
                    (comm_group, seq),
                    Algo::Recv,
                    self.ring_of_peer(),
                    bytes,
                    ctx,
                );
                run.peer = peer;
                run.recv_needed = 1;
                self.running[s] = Running::Comm(Box::new(run));
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
        let early: Vec<(Tag, u32)> = self
            .early
            .range(first..=last)
            .map(|(t, c)| (*t, *c))
            .collect();
        for (tag, count) in early {
            self.early.remove(&tag);
            for _ in 0..count {
                self.apply_arrival(model, s, tag.step, ctx);
            }
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

    /// This rank's position and ring neighbours in its group of `kind`, cached.
    fn ring(&mut self, model: &SimModel, kind: GroupKind) -> RingPos {
        if let Some(r) = self.groups[kind as usize] {
            return r;
        }
        let members = model.workload.layout.group(kind, self.rank);
        let n = members.len() as u32;
        let pos = members.iter().position(|&m| m == self.rank).unwrap_or(0) as u32;
        let r = RingPos {
            pos,
            n,
            next: model.topology.gpu(members[((pos + 1) % n) as usize]),
            prev: model.topology.gpu(members[((pos + n - 1) % n) as usize]),
        };
        self.groups[kind as usize] = Some(r);
        r
    }

    fn peer(&mut self, model: &SimModel, peer: Peer) -> NodeId {
        match peer {
            Peer::PpNext => self.ring(model, GroupKind::Pp).next,
            Peer::PpPrev => self.ring(model, GroupKind::Pp).prev,
            Peer::CpNext => self.ring(model, GroupKind::Cp).next,
            Peer::CpPrev => self.ring(model, GroupKind::Cp).prev,
        }
    }

    fn flow_hash(&self, model: &SimModel, dst: NodeId, tag: Tag) -> u64 {
        flow_hash(model.seed, self.node, dst, tag)
    }

    /// A message, or a clear-to-send, for stream `tag.stream`.
    fn arrived(&mut self, model: &SimModel, tag: Tag, ctx: &mut Ctx) {
        let s = usize::from(tag.stream);
        let current = matches!(&self.running[s], Running::Comm(r) if r.seq == tag.seq && r.group == tag.group);
        if current {
            self.apply_arrival(model, s, tag.step, ctx);
            self.check_done(model, s, ctx);
        } else {
            *self.early.entry(tag).or_insert(0) += 1;
        }
    }

    fn apply_arrival(&mut self, model: &SimModel, s: usize, step: u16, ctx: &mut Ctx) {
        let Running::Comm(run) = &mut self.running[s] else {
            return;
        };
        let (algo, ring, step_bytes, peer) = (run.algo, run.ring, run.step_bytes, run.peer);
        match algo {
            Algo::Send => {
                run.waiting_clear_to_send = false;
                let to = mirror(Stream::ALL[s]).index();
                self.send(model, s, peer, step_bytes, to, 0, ctx);
            }
            Algo::Ring { steps } => {
                run.recv_got += 1;
                if u32::from(step) + 1 < steps {
                    self.send(model, s, ring.next, step_bytes, s, step + 1, ctx);
                }
            }
            Algo::Chain { .. } => {
                run.recv_got += 1;
                if ring.pos + 1 < ring.n {
                    self.send(model, s, ring.next, step_bytes, s, step, ctx);
                }
            }
            Algo::Direct | Algo::Recv => run.recv_got += 1,
        }
    }

    fn check_done(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        if let Running::Comm(r) = &mut self.running[s]
            && r.recv_got >= r.recv_needed
            && r.sends_open == 0
            && !r.waiting_clear_to_send
        {
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

    /// The op on stream `s` finished now.
    fn complete(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let running = std::mem::replace(&mut self.running[s], Running::Idle);
        let (op, start) = match running {
            Running::Idle => return,
            Running::Compute { op, start_ps } => (op, start_ps),
            Running::Comm(run) => {
                if run.ring.n > 1 && is_collective_stream(s) && run.collective.is_some() {
                    self.comm_active -= 1;
                }
                if let Some((group, cop, bytes)) = run.collective {
                    let st = self
                        .collectives
                        .entry((group as u8, cop as u8, bytes))
                        .or_default();
                    st.add(ctx.now - run.start_ps, u64::from(run.ring.n));
                }
                (run.op, run.start_ps)
            }
        };
        self.done[s] += 1;
        self.ops_done += 1;
        self.pump_streams |=
            (1 << s) | model.programs[self.program as usize].dependent_streams[op as usize];
        self.digest = mix(self.digest, u64::from(op), ctx.now);
        if model.trace {
            self.spans[s].push(Span {
                start_ps: start,
                end_ps: ctx.now,
                name: op,
            });
        }
    }

    /// Sends `bytes` to GPU `dst` for the op on stream `s`; the receiver sees it on stream
    /// `to_stream` at `step`.
    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        model: &SimModel,
        s: usize,
        dst: NodeId,
        bytes: u64,
        to_stream: usize,
        step: u16,
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let tag = Tag {
            stream: to_stream as u8,
            group: run.group,
            seq: run.seq,
            step,
        };
        self.transmit(model, dst, bytes, tag, Some(s as u8), ctx);
    }

    /// Starts a flow of `bytes` to GPU `dst`, delivered as `tag`; when it completes, the op
    /// on stream `notify` hears of it.
    fn transmit(
        &mut self,
        model: &SimModel,
        dst: NodeId,
        bytes: u64,
        tag: Tag,
        notify: Option<u8>,
        ctx: &mut Ctx,
    ) {
        let hash = self.flow_hash(model, dst, tag);
        let path = match self.paths.get(model, self.node, dst, hash) {
            Ok(p) => p,
            Err(e) => return self.fail(e),
        };
        let computing = matches!(self.running[COMPUTE], Running::Compute { .. });
        if !path.queued {
            // Analytical: a FIFO share of the first link at the path's bottleneck bandwidth.
            let i = model
                .topology
                .out_links(self.node)
                .binary_search(&path.first_link)
                .unwrap_or(0);
            let mut ser = serialisation_ps(bytes, 1e12 / path.bytes_per_s);
            if computing {
                ser = (ser as f64 / model.interference.comm_rate).round() as u64;
            }
            let start = ctx.now.max(self.link_free_ps[i]);
            self.link_free_ps[i] = start + ser;
            let arrive = start + ser + path.latency_ps;
            for (c, used) in path.classes.iter().enumerate() {
                if *used {
                    self.analytical_bytes[c] += bytes;
                }
            }
            ctx.emit(dst, arrive, Body::Message { tag });
            if let Some(s) = notify
                && let Running::Comm(run) = &mut self.running[usize::from(s)]
            {
                run.analytical_sends_until = run.analytical_sends_until.max(arrive);
            }
            return;
        }
        if let Some(s) = notify
            && let Running::Comm(run) = &mut self.running[usize::from(s)]
        {
            run.sends_open += 1;
        }
        let seg = model.net.segment_bytes;
        let window = model.net.window_bytes.unwrap_or_else(|| {
            let bdp = (path.bytes_per_s * 2.0 * path.latency_ps as f64 * 1e-12).ceil() as u64;
            (bdp + u64::from(path.hops + 1) * seg).max(2 * seg)
        });
        let flow = Flow {
            dst,
            total: bytes,
            sent: 0,
            sent_any: false,
            acked: 0,
            in_flight: 0,
            window,
            hash,
            tag,
            path_ps: path.latency_ps,
            notify,
            line_rate: path.bytes_per_s,
            dcqcn: model
                .net
                .dcqcn
                .as_ref()
                .map(|_| Dcqcn::new(path.bytes_per_s, ctx.now)),
            next_tx_ps: ctx.now,
            pace_scheduled: false,
        };
        let id = match self.free_flows.pop() {
            Some(id) => {
                self.flows[id as usize] = Some(flow);
                id
            }
            None => {
                self.flows.push(Some(flow));
                (self.flows.len() - 1) as u32
            }
        };
        self.pump_flow(model, id, ctx);
    }

    /// Emits the flow's next segments while its window (and DCQCN rate) allows.
    fn pump_flow(&mut self, model: &SimModel, id: u32, ctx: &mut Ctx) {
        let seg_bytes = model.net.segment_bytes;
        loop {
            let Some(Some(f)) = self.flows.get_mut(id as usize) else {
                return;
            };
            if f.sent_any && f.sent >= f.total {
                return;
            }
            let bytes = seg_bytes.min(f.total - f.sent);
            if f.in_flight > 0 && f.in_flight + bytes > f.window {
                return;
            }
            if let (Some(dc), Some(p)) = (f.dcqcn.as_mut(), model.net.dcqcn.as_ref()) {
                dc.advance(ctx.now, p);
                if ctx.now < f.next_tx_ps {
                    if !f.pace_scheduled {
                        f.pace_scheduled = true;
                        ctx.emit(self.node, f.next_tx_ps, Body::Pace { flow: id });
                    }
                    return;
                }
                let gap = serialisation_ps(bytes.max(1), 1e12 / dc.rate.min(f.line_rate));
                f.next_tx_ps = ctx.now + gap;
                dc.on_sent(ctx.now, bytes, p);
            }
            f.sent += bytes;
            f.sent_any = true;
            f.in_flight += bytes;
            let seg = Segment {
                src: self.node,
                dst: f.dst,
                flow: id,
                bytes: bytes as u32,
                hash: f.hash,
                tag: f.tag,
                path_ps: f.path_ps,
                ingress: super::NO_LINK,
                hop: 0,
                last: f.sent >= f.total,
                ecn: false,
            };
            self.ports.forward(model, seg, ctx);
        }
    }

    fn acked(&mut self, model: &SimModel, id: u32, bytes: u32, ecn: bool, ctx: &mut Ctx) {
        let Some(Some(f)) = self.flows.get_mut(id as usize) else {
            return;
        };
        f.in_flight -= u64::from(bytes);
        f.acked += u64::from(bytes);
        if ecn && let (Some(dc), Some(p)) = (f.dcqcn.as_mut(), model.net.dcqcn.as_ref()) {
            dc.on_congestion(ctx.now, p);
        }
        if f.sent >= f.total && f.in_flight == 0 {
            let notify = f.notify;
            self.digest = mix(self.digest, u64::from(id) | (1 << 40), ctx.now);
            self.flows[id as usize] = None;
            self.free_flows.push(id);
            if let Some(stream) = notify {
                self.flow_done(model, usize::from(stream), ctx);
            }
        } else {
            self.pump_flow(model, id, ctx);
        }
    }

    fn fail(&mut self, message: String) {
        if self.error.is_none() {
            self.error = Some(format!("rank {}: {message}", self.rank));
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
                blocked: match (&self.error, self.finish_ps) {
                    (Some(e), _) => Some(e.clone()),
                    (None, Some(_)) => None,
                    (None, None) => Some(blocked.join("; ")),
                },
            }),
            analytical_bytes: self.analytical_bytes,
            flow_arrivals: self.flow_arrivals.clone(),
            collectives: self
                .collectives
                .iter()
                .map(|(k, v)| (*k, v.clone()))
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
