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
//!
//! The parts: `program.rs` walks the rank's program (streams, kernels and their chains, CXL
//! reads, completion, time accounting); `collective/` runs communication ops, one file per
//! algorithm behind one interface; `transport/` carries their transfers over analytical
//! links, the packet-level fabric or the flow LP; `cut_promise.rs` bounds what the GPU can
//! still send across a distributed run's cut. This file holds the LP: its state, event
//! dispatch, prefetch hints and report.

mod collective;
mod cut_promise;
mod program;
mod transport;

pub use transport::{flow_hash, injected_tag, segment_size};

use super::net::Ports;
use super::results::{GpuReport, LpReport, Span, Timeline};
use super::{
    Body, Ctx, HotSpan, HotSpans, INJECTED, MEMORY_GROUP, NO_NODE, NO_SPAN, SimModel, Tag,
};
use crate::hash::{mix, splitmix64};
use crate::layout::GroupKind;
use crate::time::SimTime;
use crate::topology::NodeId;
use crate::workload::{OpKind, Stream};
use collective::{CollectiveSlot, CommRun, GroupInfo};
use cut_promise::Crossing;
use transport::{Flow, PathCache, SerialConnection};

const STREAMS: usize = Stream::COUNT;
const COMPUTE: usize = 0;
const MEMORY: usize = Stream::Memory as usize;

/// What a stream is running.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(in crate::gpu) enum Running {
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

/// The most bytes one hint asks for beyond the LP's own fields: a struct read in full, up to
/// four lines.
const HINT_LIMIT: usize = 256;

/// A hint for all of `value`, up to [`HINT_LIMIT`] bytes.
fn hint_whole<T>(value: &T) -> HotSpan {
    (
        std::ptr::from_ref(value).cast(),
        size_of::<T>().min(HINT_LIMIT),
    )
}

/// The leading fields of a [`GpuLp`] that every event reads, its running ops included: a
/// chain's end asks whether every other stream is idle ([`GpuLp::chain_end_is_foregone`]).
const HOT_BYTES: usize = std::mem::offset_of!(GpuLp, running) + size_of::<[Running; STREAMS]>();

/// `repr(C)`, hot fields first: an event at 131K GPUs finds its GPU cold, and
/// [`GpuLp::hot_state`] asks for the lines every handler reads (the first [`HOT_BYTES`]).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[repr(C)]
pub struct GpuLp {
    accounted_to_ps: u64,
    finish_ps: Option<SimTime>,
    compute_ps: SimTime,
    exposed_comm_ps: SimTime,
    bubble_ps: SimTime,
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
    /// When the running kernel ends, at the rate it runs now.
    kernel_end_ps: u64,
    /// The running kernel pro rata: since `kernel_since_ps` (its start, or when a collective
    /// last started or ended beside it) it has run slowed or not (`kernel_slowed`), with
    /// `kernel_left_ps` of its time alone still to do then ([`GpuLp::retime_kernel`]).
    kernel_since_ps: u64,
    kernel_left_ps: u64,
    kernel_slowed: bool,
    /// The compute stream's chain of kernels ([`super::ProgramIndex::chains_into_next`]):
    /// the stream position of its last kernel, the generation of its one pending
    /// [`Body::ComputeDone`], and whether it was planned with a collective running.
    chain_last: u32,
    chain_gen: u32,
    chain_slowed: bool,
    done: [u32; STREAMS],
    /// Collectives started per communicator (`engine::communicator`): the next one's number.
    group_seq: [u32; crate::COMMUNICATORS],
    memory_cursor: u32,
    /// The host issuing this rank's ops ([`crate::compute::host`]): an op at or after
    /// `host_settled` is issued at `host_anchor_ps` plus the issue costs since the op whose
    /// running sum is `host_anchor_prefix`; the ones before are issued. The program's host
    /// sync `host_sync_cursor` is the next the host waits at.
    host_anchor_ps: u64,
    host_anchor_prefix: u64,
    host_settled: u32,
    host_sync_cursor: u32,
    /// When the pending [`Body::HostIssued`] fires (0: none pending).
    host_wake_ps: u64,
    /// Live HBM bytes and their peak; the next of the program's memory events is
    /// `memory_cursor`.
    live_bytes: u64,
    peak_bytes: u64,
    /// The run of the last op that finished, kept for the next one to start in, so that
    /// starting and finishing communication ops does not allocate: not part of a checkpoint.
    #[serde(skip)]
    spare_run: Option<Box<CommRun>>,
    groups: [Option<Box<GroupInfo>>; GroupKind::COUNT],
    running: [Running; STREAMS],
    /// Messages and clear-to-sends that arrived before the op they belong to started, with
    /// their counts, and of closed-form arrivals the latest ready and due times. A short
    /// list searched in place: a map would allocate a node for the first entry and free it
    /// with the last, several million times a run.
    early: Vec<(Tag, u32, (u64, u64))>,
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
    /// The stage's busy spans, on the one rank per stage that keeps them
    /// ([`crate::results::Timeline`]).
    timeline: Option<Box<Timeline>>,
    error: Option<String>,
    /// Injected flows ([`SimModel::flows`]) that arrived here: (index, time).
    flow_arrivals: Vec<(u32, SimTime)>,
    /// Messages being received in pieces, per (sender, flow slot): the pieces counted so far
    /// and whether one marked `last` was among them (`transport::packet`, `completes`).
    pieces_seen: Vec<((NodeId, u32), u32, bool)>,
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

/// Whether `rank` keeps its stage's timeline: tensor, context and data-parallel rank 0 of
/// its job, one rank per pipeline stage of each job.
fn keeps_timeline(workload: &crate::workload::Workload, rank: u32) -> bool {
    let c = match &workload.jobs {
        None => workload.layout.coords(rank),
        Some(jobs) => match (jobs.job_of(rank), jobs.local_rank(rank)) {
            (Some(j), Some(local)) => jobs.jobs[j].workload.layout.coords(local),
            _ => return false,
        },
    };
    c.tp == 0 && c.cp == 0 && c.dp == 0
}

impl GpuLp {
    pub fn new(model: &SimModel, node: NodeId, rank: u32) -> Self {
        let w = &model.workload;
        let program = w.program_index(rank) as u32;
        let gpu_type = usize::from(model.topology.gpu_type(rank));
        let out = model.topology.out_links(node).len();
        GpuLp {
            node,
            rank,
            program,
            kernel_table: (program as usize * model.gpu_types + gpu_type) as u32,
            chip_slowdown: super::chip_slowdown(model.seed, rank, model.clock_spread[gpu_type])
                * model.faults.clock_slowdown(rank),
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
            group_seq: [0; crate::COMMUNICATORS],
            comm_active: 0,
            // Accounting (and the cut promise's "as of") begin when the job starts.
            accounted_to_ps: w.start_of(rank).as_ps(),
            compute_ps: SimTime::ZERO,
            exposed_comm_ps: SimTime::ZERO,
            bubble_ps: SimTime::ZERO,
            finish_ps: None,
            ops_done: 0,
            pump_streams: (1 << STREAMS) - 1,
            kernel_end_ps: 0,
            kernel_since_ps: 0,
            kernel_left_ps: 0,
            kernel_slowed: false,
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
            timeline: keeps_timeline(w, rank).then(Box::default),
            error: None,
            flow_arrivals: Vec::new(),
            pieces_seen: Vec::new(),
            least_compute: (0, 0, 0),
            crossing: None,
            live_bytes: w.programs[program as usize].resident_bytes,
            peak_bytes: w.programs[program as usize].resident_bytes,
            memory_cursor: 0,
            host_anchor_ps: w.start_of(rank).as_ps(),
            host_anchor_prefix: 0,
            host_settled: 0,
            host_sync_cursor: 0,
            host_wake_ps: 0,
        }
    }

    pub fn start(&mut self, model: &SimModel, ctx: &mut Ctx) {
        let start = model.workload.start_of(self.rank);
        if start > SimTime::ZERO {
            // A job out of phase: nothing of it runs before its start (no event reaches a
            // GPU whose job has not started: its peers have not either).
            ctx.emit(self.node, start, Body::JobStart);
            return;
        }
        for (i, f) in model.flows.iter().enumerate() {
            if f.src == self.rank {
                ctx.emit(self.node, f.start, Body::StartFlow { index: i as u32 });
            }
        }
        self.pump(model, ctx);
    }

    /// [`crate::Lp::arrive_inline`].
    pub fn arrive_inline(&mut self, model: &SimModel, body: Body, ctx: &mut Ctx) {
        if let Body::Arrived {
            tag,
            done_ps,
            due_ps,
            ..
        } = body
        {
            self.arrived(model, tag, (done_ps, due_ps), ctx);
        }
    }

    pub fn handle(&mut self, model: &SimModel, body: Body, ctx: &mut Ctx) {
        // The chain's kernels that ended first (each accounted up to its end), then the rest.
        self.settle_chain(model, ctx.now.as_ps());
        self.account(ctx.now.as_ps());
        match body {
            Body::ComputeDone { chain } if chain == self.chain_gen => {
                self.complete(model, COMPUTE, ctx)
            }
            Body::ComputeDone { .. } => {}
            Body::Segment(seg) if seg.dst == self.node => self.receive_segment(model, &seg, ctx),
            Body::Segment(seg) => self.ports.forward(model, seg, ctx),
            Body::Message { tag } | Body::ClearToSend { tag } if tag.group == INJECTED => {
                self.injected_arrived(tag.seq, ctx.now.as_ps())
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
                ..
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
            Body::JobStart => {}
            Body::HostIssued => {
                self.host_wake_ps = 0;
                self.pump_streams = (1 << STREAMS) - 1;
            }
            other => self.ports.handle(model, &other, ctx),
        }
        self.pump(model, ctx);
    }

    /// [`super::Lp::hot_state`] for a GPU. Shallow: the fields every handler reads (the
    /// first [`HOT_BYTES`], the running ops with them), and the flow slot the event names or
    /// the table of collective slots. Deep, read through those: the flow; a communication
    /// op's run, its group, its slot (its statistics when it ends) and the slot of the op
    /// after it on its stream (its plan when it starts); or, for a finished chain, the spare
    /// run its successor may start in, with that collective's slot and group. For a segment
    /// passing through, the port it takes.
    pub fn hot_state(&self, model: &SimModel, body: &Body, deep: bool) -> HotSpans {
        const FLOW_BYTES: usize = 128;
        let tag = match body {
            Body::Message { tag } | Body::ClearToSend { tag } | Body::Arrived { tag, .. } => {
                Some(tag)
            }
            _ => None,
        };
        let stream = match body {
            Body::ComputeDone { .. } => Some(COMPUTE),
            Body::SendDone { stream } => Some(usize::from(*stream)),
            _ => tag.map(|t| usize::from(t.stream)),
        };
        if !deep {
            let second = match body {
                Body::Ack { flow, .. } | Body::FlowDone { flow } => (
                    self.flows.as_ptr().wrapping_add(*flow as usize).cast(),
                    size_of::<Option<Box<Flow>>>(),
                ),
                _ if stream.is_some() => (
                    std::ptr::from_ref(&self.collectives).cast(),
                    size_of::<Vec<CollectiveSlot>>(),
                ),
                _ => NO_SPAN,
            };
            return [
                (std::ptr::from_ref(self).cast(), HOT_BYTES),
                second,
                NO_SPAN,
                NO_SPAN,
            ];
        }
        match (body, stream) {
            (Body::Ack { flow, .. } | Body::FlowDone { flow }, _) => {
                match self.flows.get(*flow as usize) {
                    Some(Some(f)) => [
                        (std::ptr::from_ref(&**f).cast(), FLOW_BYTES),
                        NO_SPAN,
                        NO_SPAN,
                        NO_SPAN,
                    ],
                    _ => [NO_SPAN; 4],
                }
            }
            (Body::Segment(seg), _) if seg.dst != self.node => self.ports.hot_state(body, false),
            (Body::ComputeDone { .. }, _) => {
                let spare = self.spare_run.as_deref().map_or(NO_SPAN, hint_whole);
                let (slot, group) = self.released_collective_state(model);
                [spare, slot, group, NO_SPAN]
            }
            (_, Some(s)) => {
                let Running::Comm(run) = &self.running[s] else {
                    return [NO_SPAN; 4];
                };
                let index = &model.programs[self.program as usize];
                let slot_at = |position: usize| {
                    let op = index.stream_ops[s].get(position)?;
                    self.slot_span(index, *op)
                };
                // The group from the tag: the run's own fields are only now asked for.
                let group = tag
                    .and_then(|t| crate::communicator_group(t.group))
                    .map_or(NO_SPAN, |k| self.group_span(k));
                [
                    hint_whole(&**run),
                    group,
                    slot_at(self.done[s] as usize).unwrap_or(NO_SPAN),
                    slot_at(self.done[s] as usize + 1).unwrap_or(NO_SPAN),
                ]
            }
            _ => [NO_SPAN; 4],
        }
    }

    /// The slot and group a collective that a finished chain releases will read: the head
    /// of the first idle stream that waits on the chain's last kernel, if a collective.
    fn released_collective_state(&self, model: &SimModel) -> (HotSpan, HotSpan) {
        let index = &model.programs[self.program as usize];
        let program = &model.workload.programs[self.program as usize];
        let Some(&last) = index.stream_ops[COMPUTE].get(self.chain_last as usize) else {
            return (NO_SPAN, NO_SPAN);
        };
        let streams = index.dependent_streams[last as usize] & !(1 << COMPUTE);
        for s in (0..STREAMS).filter(|s| streams & (1 << s) != 0) {
            if !matches!(self.running[s], Running::Idle) {
                continue;
            }
            let Some(&op) = index.stream_ops[s].get(self.done[s] as usize) else {
                continue;
            };
            let OpKind::Collective { group, .. } = program.ops[op as usize].kind else {
                continue;
            };
            let slot = self.slot_span(index, op).unwrap_or(NO_SPAN);
            return (slot, self.group_span(group));
        }
        (NO_SPAN, NO_SPAN)
    }

    /// Where this rank keeps collective op `op`'s plan and statistics; `None` for another op.
    fn slot_span(&self, index: &super::ProgramIndex, op: u32) -> Option<HotSpan> {
        let slot = *index.collective_slot.get(op as usize)?;
        (slot != super::NO_SLOT).then(|| {
            (
                self.collectives
                    .as_ptr()
                    .wrapping_add(usize::from(slot))
                    .cast(),
                size_of::<CollectiveSlot>(),
            )
        })
    }

    /// This rank's view of its group of `kind`, once made.
    fn group_span(&self, kind: GroupKind) -> HotSpan {
        self.groups[kind as usize]
            .as_deref()
            .map_or(NO_SPAN, hint_whole)
    }

    /// Injected flow `index` ([`SimModel::flows`]) arrived here at `now`.
    fn injected_arrived(&mut self, index: u32, now: u64) {
        self.flow_arrivals.push((index, SimTime::from_ps(now)));
        self.digest = mix(self.digest, u64::from(index) | (1 << 41), now);
    }

    /// Records a failure where a value was expected.
    fn fail_none<T>(&mut self, error: impl std::fmt::Display) -> Option<T> {
        self.fail(error);
        None
    }

    /// Stops this rank: what went wrong is in its report (the first error only).
    fn fail(&mut self, error: impl std::fmt::Display) {
        if self.error.is_none() {
            self.error = Some(error.to_string());
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
            timeline: self.timeline.clone(),
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
