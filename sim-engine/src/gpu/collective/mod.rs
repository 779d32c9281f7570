//! Communication ops on a GPU: collectives and the sends and receives between pipeline (or
//! context-parallel) peers. This file holds what they share: the state of a running op
//! ([`CommRun`]), the enum with one arm per algorithm ([`Algo`]), the interface every arm
//! implements ([`Schedule`]) and the dispatch to it, the choice among the arms
//! ([`GpuLp::start_collective`]), planning, arrivals that come early, and completion.
//!
//! One file per algorithm, each with the struct its arm holds, a `start` that plans it and
//! its [`Schedule`]: `ring.rs`, `fluid.rs` (the ring run by the flow LP), `closed.rs`
//! (closed form), `tree.rs` (double binary tree and NVLS-tree), `pat.rs`, `chain.rs`
//! (broadcast), `direct.rs` (all-to-all), `deepep.rs` (DeepEP's all-to-all) and `p2p.rs` (send and receive). A new algorithm
//! is a file, an arm of [`Algo`] (and of `with_algo!`) and the arm of
//! [`GpuLp::start_collective`] that picks it. `group.rs` holds a rank's view of its groups.

mod chain;
mod closed;
mod deepep;
mod direct;
mod fluid;
mod group;
mod p2p;
mod pat;
mod ring;
mod tree;

pub(super) use group::GroupInfo;

use super::GpuLp;
use super::Running;
use crate::collective::{self, Algorithm, CommShape, Plan, Settings};
use crate::layout::GroupKind;
use crate::results::CollectiveStats;
use crate::time::SimTime;
use crate::topology::NodeId;
use crate::workload::{CollectiveOp, Stream};
use crate::{Body, Ctx, SimModel, Tag};
use chain::Chain;
use closed::Closed;
use deepep::DeepEp;
use direct::Direct;
use fluid::Fluid;
use p2p::{Receiver, Sender};
use pat::Pat;
use ring::Ring;
use tree::Tree;

/// Whether stream `s` runs a group's collectives: while one runs, kernels are slowed.
pub(in crate::gpu) fn is_collective_stream(s: usize) -> bool {
    matches!(
        Stream::ALL[s],
        Stream::Tp | Stream::Cp | Stream::Ep | Stream::Dp | Stream::Pp | Stream::Amax
    )
}

/// A rank's place in a group: position, size and ring neighbours (GPU nodes).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(super) struct RingPos {
    pub(super) pos: u32,
    pub(super) n: u32,
    pub(super) next: NodeId,
    pub(super) prev: NodeId,
}

/// The algorithm a communication op runs on this rank, with what it was planned with: one
/// arm per algorithm, each implemented in its own file behind [`Schedule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Algo {
    /// NCCL's ring on lanes of channels.
    Ring(Ring),
    /// A ring run by the flow LP as one flow per lane.
    Fluid(Fluid),
    /// Completes in closed form once every member arrived.
    Closed(Closed),
    /// NCCL's double binary tree, or NVLS-tree.
    Tree(Tree),
    /// PAT all-gather or reduce-scatter.
    Pat(Pat),
    /// Broadcast down a chain.
    Chain(Chain),
    /// All-to-all as direct sends, or a group of one.
    Direct(Direct),
    /// DeepEP's dispatch or combine: RDMA to rail peers, NVLink within the node.
    DeepEp(DeepEp),
    /// A send to a pipeline or context-parallel peer.
    Send(Sender),
    /// A receive from one.
    Recv(Receiver),
}

/// Binds `$a` to the algorithm in whichever arm of [`Algo`] `$algo` is and evaluates
/// `$body`: with [`Algo`], the one list of the arms.
macro_rules! with_algo {
    ($algo:expr, $a:ident => $body:expr) => {
        match $algo {
            Algo::Ring($a) => $body,
            Algo::Fluid($a) => $body,
            Algo::Closed($a) => $body,
            Algo::Tree($a) => $body,
            Algo::Pat($a) => $body,
            Algo::Chain($a) => $body,
            Algo::Direct($a) => $body,
            Algo::DeepEp($a) => $body,
            Algo::Send($a) => $body,
            Algo::Recv($a) => $body,
        }
    };
}

/// What an algorithm does on this rank once chosen: the window and latency it is planned
/// with, its first transfers, and what each arrival sets off. Each arm of [`Algo`]
/// implements it; the defaults suit an algorithm the FIFO does not bound and whose latency
/// the fabric does not simulate.
trait Schedule: Copy {
    /// Bytes a transfer may have in flight across the network ([`CommRun::net_window`]).
    fn net_window(self, _settings: &Settings, _plan: &Plan) -> u64 {
        u64::MAX
    }

    /// The latency steps the fabric simulates along the critical path, (all, across
    /// nodes), which the plan's latency already counts; `None`: none.
    fn simulated_hops(self, _call: &Call) -> Option<(u32, u32)> {
        None
    }

    /// The op's run is in place on stream `s`: its first transfers.
    fn begin(self, _gpu: &mut GpuLp, _model: &SimModel, _s: usize, _ctx: &mut Ctx) {}

    /// A message (or a clear-to-send) of step `step` arrived for the op on stream `s`; a
    /// closed-form member's arrival carries when it is done and when it was due.
    fn arrive(
        self,
        gpu: &mut GpuLp,
        model: &SimModel,
        s: usize,
        step: u16,
        done_and_due: (u64, u64),
        ctx: &mut Ctx,
    );
}

impl Schedule for Algo {
    fn net_window(self, settings: &Settings, plan: &Plan) -> u64 {
        with_algo!(self, a => a.net_window(settings, plan))
    }

    fn simulated_hops(self, call: &Call) -> Option<(u32, u32)> {
        with_algo!(self, a => a.simulated_hops(call))
    }

    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        with_algo!(self, a => a.begin(gpu, model, s, ctx))
    }

    fn arrive(
        self,
        gpu: &mut GpuLp,
        model: &SimModel,
        s: usize,
        step: u16,
        done_and_due: (u64, u64),
        ctx: &mut Ctx,
    ) {
        with_algo!(self, a => a.arrive(gpu, model, s, step, done_and_due, ctx))
    }
}

/// A collective as it starts on this rank: its group, op and size, and the plan every
/// member made alike. An algorithm's `start` plans its transfers from it.
#[derive(Debug, Clone, Copy)]
struct Call {
    kind: GroupKind,
    op: CollectiveOp,
    bytes: u64,
    ring: RingPos,
    shape: CommShape,
    plan: Plan,
}

impl Call {
    /// Bytes a transfer of `payload` puts on the wire under the plan.
    fn wire(&self, payload: u64) -> u64 {
        wire_bytes(payload, &self.plan, &self.shape)
    }
}

/// What an algorithm's `start` planned: the op's [`Algo`] arm, the bytes of one step, and
/// how many arrivals the op waits for.
#[derive(Debug, Clone, Copy)]
struct Start {
    algo: Algo,
    step_bytes: u64,
    recv_needed: u32,
}

/// A communication op running on a stream: what every algorithm keeps.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct CommRun {
    pub(super) op: u32,
    pub(super) start_ps: u64,
    /// Communicator ([`crate::P2P`] or a group kind) and sequence number on it.
    pub(super) group: u8,
    pub(super) seq: u32,
    algo: Algo,
    pub(super) ring: RingPos,
    pub(super) step_bytes: u64,
    recv_needed: u32,
    recv_got: u32,
    /// Segment-level flows not yet fully acknowledged.
    pub(super) sends_open: u32,
    /// When the last analytical send is delivered: the op cannot finish before. Tracked as a
    /// time, not an event per send; one wake-up event is scheduled only if the op would
    /// otherwise be done earlier.
    pub(super) analytical_sends_until: u64,
    wake_scheduled: bool,
    /// The op ends with its scheduled wake-up, not before, even where the wake-up's time
    /// has come: a closed-form leader's answer ([`closed`]), which may be worked out before
    /// its time.
    completes_on_wake: bool,
    waiting_clear_to_send: bool,
    /// Peer of a send or receive.
    peer: NodeId,
    pub(super) collective: Option<(GroupKind, CollectiveOp, u64)>,
    /// Closed form: the latest time a member was ready (leader only).
    ready_ps: u64,
    /// Closed form: the latest time a member's arrival was due at the leader, or the
    /// leader's own start (leader only).
    arrived_by_ps: u64,
    /// Latency added once the transfers are done (the plan's latency part).
    tail_ps: u64,
    /// `algorithm/protocol/channels`, for collectives.csv.
    pub(super) plan: Option<(Algorithm, collective::Protocol, u32)>,
    /// Bytes a transfer may have in flight across the network: NCCL's FIFO for the op
    /// (`collective::collective_window`, `collective::p2p_window`); `u64::MAX` when unbounded.
    pub(super) net_window: u64,
    /// Tree: up-arrivals per (lane, tree, chunk).
    arrivals: Vec<u8>,
    /// Sends waiting behind an earlier chunk on their connection.
    pub(super) queued: u32,
}

impl CommRun {
    /// The group kind of a collective's run ([`GroupKind::Dp`] for a send or receive).
    fn group_kind(&self) -> GroupKind {
        self.collective.map_or(GroupKind::Dp, |c| c.0)
    }
}

/// What a rank keeps of one of its program's collectives
/// ([`crate::ProgramIndex::collective_slot`]).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct CollectiveSlot {
    /// Made on first use: a program repeats a handful of collectives many times, and
    /// planning weighs every algorithm and protocol.
    plan: Option<Plan>,
    pub(super) stats: CollectiveStats,
}

impl GpuLp {
    /// Starts collective op `op`, `cop` of `bytes` in this rank's group of `kind`, on stream
    /// `s`: plans it, picks the algorithm that runs the plan here and sets it running.
    pub(super) fn start_collective(
        &mut self,
        model: &SimModel,
        s: usize,
        op: u32,
        (comm_group, seq): (u8, u32),
        (cop, kind, bytes): (CollectiveOp, GroupKind, u64),
        ctx: &mut Ctx,
    ) {
        let Some((ring, shape, closed)) = self.group_info(model, kind) else {
            return;
        };
        if ring.n <= 1 {
            let run = self.comm(op, (comm_group, seq), Algo::Direct(Direct), ring, 0, ctx);
            self.running[s] = Running::Comm(self.boxed(run));
            self.complete(model, s, ctx);
            return;
        }
        let plan = match self.plan(model, op, kind, cop, bytes) {
            Ok(p) => p,
            Err(e) => return self.fail(e),
        };
        let call = Call {
            kind,
            op: cop,
            bytes,
            ring,
            shape,
            plan,
        };
        // NCCL's choice, as the engine runs it: in closed form on analytical groups, else
        // transfer by transfer.
        let start = if closed {
            Some(Closed::start(self, &call))
        } else {
            match (plan.algorithm, cop) {
                (Algorithm::Tree | Algorithm::NvlsTree, CollectiveOp::AllReduce) => {
                    Tree::start(self, model, &call)
                }
                (Algorithm::Pat, CollectiveOp::AllGather | CollectiveOp::ReduceScatter) => {
                    Pat::start(self, model, &call)
                }
                (
                    _,
                    CollectiveOp::AllReduce | CollectiveOp::AllGather | CollectiveOp::ReduceScatter,
                ) if Fluid::runs(model, &shape) => Fluid::start(self, model, &call),
                (
                    _,
                    CollectiveOp::AllReduce | CollectiveOp::AllGather | CollectiveOp::ReduceScatter,
                ) => Ring::start(self, model, &call),
                (Algorithm::DeepEp | Algorithm::HybridEp, CollectiveOp::AllToAll) => {
                    Some(DeepEp::start(model, &call))
                }
                (_, CollectiveOp::AllToAll) => Some(Direct::start(&call)),
                (_, CollectiveOp::Broadcast) => Some(Chain::start(&call)),
            }
        };
        let Some(Start {
            algo,
            step_bytes,
            recv_needed,
        }) = start
        else {
            return;
        };
        let mut run = self.comm(op, (comm_group, seq), algo, ring, step_bytes, ctx);
        run.recv_needed = recv_needed;
        run.collective = Some((kind, cop, bytes));
        run.plan = Some((plan.algorithm, plan.protocol, plan.channels));
        run.net_window = algo.net_window(&model.collectives.settings, &plan);
        // The fabric already simulates each step's link latency along the critical path;
        // what is left of the plan's latency is software: the call and the per-step
        // handshakes.
        if let Some((steps, inter_steps)) = algo.simulated_hops(&call) {
            let (intra_ps, inter_ps) = self.hop_latencies(kind);
            let simulated =
                u64::from(steps - inter_steps) * intra_ps + u64::from(inter_steps) * inter_ps;
            let call_ps = SimTime::from_micros_f64(shape.arch.params().call_us).as_ps();
            run.tail_ps = plan
                .latency()
                .as_ps()
                .saturating_sub(simulated)
                .max(call_ps);
        } else if !closed {
            run.tail_ps = plan.latency().as_ps();
        }
        self.running[s] = Running::Comm(self.boxed(run));
        if is_collective_stream(s) {
            self.comm_active += 1;
        }
        algo.begin(self, model, s, ctx);
    }

    /// Applies the arrivals that came before the op (`group`, `seq`) on stream `s` started.
    pub(super) fn drain_early(
        &mut self,
        model: &SimModel,
        s: usize,
        group: u8,
        seq: u32,
        ctx: &mut Ctx,
    ) {
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
            let (tag, count, done_and_due) = self.early.swap_remove(i);
            // A closed-form member may be ready later than now, and one handed over inline
            // due later ([`crate::Lp::arrive_inline`]).
            for _ in 0..count {
                self.apply_arrival(model, s, tag.step, done_and_due, ctx);
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

    /// The run of op `op` starting now: nothing received or sent yet.
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
            start_ps: ctx.now.as_ps(),
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
            completes_on_wake: false,
            waiting_clear_to_send: false,
            peer: self.node,
            collective: None,
            ready_ps: 0,
            arrived_by_ps: ctx.now.as_ps(),
            tail_ps: 0,
            plan: None,
            net_window: u64::MAX,
            arrivals: Vec::new(),
            queued: 0,
        }
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
    ) -> Result<Plan, PlanError> {
        let slot = self.collective_slot(model, op);
        if let Some(p) = slot.plan {
            return Ok(p);
        }
        let Some(g) = self.groups[kind as usize].as_ref() else {
            return Err(PlanError::NoGroup(kind));
        };
        let plan = plan_for(model, &g.shape, g.closed, (kind, cop), bytes)?;
        self.collective_slot(model, op).plan = Some(plan);
        Ok(plan)
    }

    /// What this rank keeps of collective op `op`.
    pub(super) fn collective_slot(&mut self, model: &SimModel, op: u32) -> &mut CollectiveSlot {
        let index = &model.programs[self.program as usize];
        if self.collectives.is_empty() {
            self.collectives = vec![CollectiveSlot::default(); index.collective_keys.len()];
        }
        &mut self.collectives[usize::from(index.collective_slot[op as usize])]
    }

    /// A message, or a clear-to-send, for stream `tag.stream`.
    pub(super) fn arrived(
        &mut self,
        model: &SimModel,
        tag: Tag,
        done_and_due: (u64, u64),
        ctx: &mut Ctx,
    ) {
        let s = usize::from(tag.stream);
        let current = matches!(&self.running[s], Running::Comm(r) if r.seq == tag.seq && r.group == tag.group);
        if current {
            self.apply_arrival(model, s, tag.step, done_and_due, ctx);
            self.check_done(model, s, ctx);
        } else {
            let (done_ps, due_ps) = done_and_due;
            match self.early.iter_mut().find(|(t, ..)| *t == tag) {
                Some((_, count, (done, due))) => {
                    *count += 1;
                    *done = (*done).max(done_ps);
                    *due = (*due).max(due_ps);
                }
                None => self.early.push((tag, 1, done_and_due)),
            }
        }
    }

    /// Applies a message of step `step` to the op on stream `s`, as its algorithm does.
    fn apply_arrival(
        &mut self,
        model: &SimModel,
        s: usize,
        step: u16,
        done_and_due: (u64, u64),
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let algo = run.algo;
        algo.arrive(self, model, s, step, done_and_due, ctx);
    }

    pub(super) fn check_done(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        if let Running::Comm(r) = &mut self.running[s]
            && r.recv_got >= r.recv_needed
            && r.sends_open == 0
            && r.queued == 0
            && !r.waiting_clear_to_send
        {
            if r.tail_ps > 0 {
                // The transfers are done; the plan's latency part follows once.
                r.analytical_sends_until =
                    r.analytical_sends_until.max(ctx.now.as_ps() + r.tail_ps);
                r.tail_ps = 0;
            }
            if r.completes_on_wake {
                // Its wake-up completes it.
            } else if ctx.now.as_ps() >= r.analytical_sends_until {
                self.complete(model, s, ctx);
            } else if !r.wake_scheduled {
                r.wake_scheduled = true;
                let stream = s as u8;
                ctx.emit(
                    self.node,
                    SimTime::from_ps(r.analytical_sends_until),
                    Body::SendDone { stream },
                );
            }
        }
    }

    /// A segment-level flow of the op on stream `s` was fully acknowledged.
    pub(super) fn flow_done(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        if let Running::Comm(r) = &mut self.running[s] {
            r.sends_open = r.sends_open.saturating_sub(1);
        }
        self.check_done(model, s, ctx);
    }

    /// The last analytical send of the op on stream `s` was delivered.
    pub(super) fn analytical_sends_delivered(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        if let Running::Comm(r) = &mut self.running[s] {
            r.wake_scheduled = false;
            r.completes_on_wake = false;
        }
        self.check_done(model, s, ctx);
    }
}

/// Why a collective has no plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum PlanError {
    #[error("no {0:?} group was set up")]
    NoGroup(GroupKind),
    #[error(
        "collectives.algorithm = \"{algorithm}\" cannot run {op} on groups with packet-level links (fleetsim runs {runs} there transfer by transfer): set network.model = \"analytical\" (or network.intra_host = \"analytical\" for groups inside a host) or collectives.algorithm = \"auto\""
    )]
    NotTransferByTransfer {
        algorithm: &'static str,
        op: &'static str,
        runs: String,
    },
    #[error(
        "no NCCL algorithm runs {op} of {bytes} bytes on {ranks} ranks over {nodes} nodes with collectives.algorithm = {algorithm} and collectives.protocol = {protocol}; set them to \"auto\""
    )]
    NoAlgorithm {
        op: &'static str,
        bytes: u64,
        ranks: u32,
        nodes: u32,
        algorithm: &'static str,
        protocol: &'static str,
    },
}

/// The plan of a collective: NCCL's choice. Where the group's links are analytical it runs
/// in closed form; where packet-level links are involved the engine runs its transfers, so
/// the choice is among the algorithms it runs transfer by transfer (all but single-node NVLS,
/// whose reduction happens inside the switch). `Err` says why no plan fits. The
/// expert-parallel all-to-alls run DeepEP or HybridEP instead where the experiment dispatches
/// with it.
pub(super) fn plan_for(
    model: &SimModel,
    shape: &CommShape,
    closed: bool,
    (kind, op): (GroupKind, CollectiveOp),
    bytes: u64,
) -> Result<Plan, PlanError> {
    let settings = model.collectives.settings;
    if let (Some(flex), GroupKind::Ep, CollectiveOp::AllToAll) = (settings.flex, kind, op) {
        return Ok(shape.flex_plan(bytes, &flex));
    }
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
        return Err(PlanError::NotTransferByTransfer {
            algorithm: a.name(),
            op: op.name(),
            runs: names.join(", "),
        });
    }
    shape
        .plan_among(op, bytes, &settings, allowed)
        .ok_or_else(|| PlanError::NoAlgorithm {
            op: op.name(),
            bytes,
            ranks: shape.ranks,
            nodes: shape.nodes,
            algorithm: settings.algorithm.map_or("auto", Algorithm::name),
            protocol: settings.protocol.map_or("auto", |p| p.name()),
        })
}

/// Bytes a collective's transfer of `payload` puts on the wire.
fn wire_bytes(payload: u64, plan: &Plan, shape: &CommShape) -> u64 {
    collective::wire_bytes(payload, plan.protocol, shape.arch, shape.nodes > 1)
}
