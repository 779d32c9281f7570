//! The program cursor: each stream runs its ops in order once their dependencies are done
//! (the semantics of [`crate::workload`]). Kernels run on the compute stream, back to back in
//! chains with one event per chain; CXL reads on the memory stream; communication ops start
//! here and run in [`super::collective`]. Completion, the digest, HBM accounting and the split
//! of a rank's time into compute, exposed communication and bubble are kept here too.

use super::collective::is_collective_stream;
use super::{COMPUTE, GpuLp, MEMORY, Running, STREAMS};
use crate::hash::mix;
use crate::results::{Span, Timeline};
use crate::time::SimTime;
use crate::workload::{MemoryEvent, OpKind, Stream};
use crate::{Body, Ctx, MEMORY_GROUP, P2P, SimModel, Tag};

impl GpuLp {
    /// How long `op`, a kernel starting now, takes on this chip if nothing starts or ends
    /// beside it.
    pub(super) fn kernel_ps(&self, model: &SimModel, op: u32) -> u64 {
        slowed_ps(model, self.alone_ps(model, op), self.comm_active > 0)
    }

    /// [`GpuLp::chip_kernel_ps`] of an op the compute stream runs, which is always a kernel.
    pub(super) fn alone_ps(&self, model: &SimModel, op: u32) -> u64 {
        self.chip_kernel_ps(model, op)
            .unwrap_or_else(|| unreachable!("op {op} is not a kernel"))
    }

    /// How long `op` takes on this chip while nothing else runs: the part's time, this
    /// chip's clock and its faults; `None` if `op` is not a kernel.
    pub(super) fn chip_kernel_ps(&self, model: &SimModel, op: u32) -> Option<u64> {
        let program = &model.workload.programs[self.program as usize];
        let OpKind::Compute { kernel } = program.ops[op as usize].kind else {
            return None;
        };
        let table = self.kernel_table as usize;
        let mut base = model.kernel_times[table][kernel as usize].as_ps();
        if model.kernel_clocked[table][kernel as usize] {
            base = crate::time::round_ps(base as f64 * self.chip_slowdown);
        }
        if model.faults.slows_kernels() {
            base = crate::time::round_ps(base as f64 * model.faults.kernel_stretch(self.rank, op));
        }
        Some(base)
    }

    /// Starts kernel `op` at `at` on the compute stream.
    fn start_kernel(&mut self, model: &SimModel, op: u32, at: u64) {
        if let Some(e) = self.memory_event(model, op) {
            self.live_bytes += e.alloc;
            self.peak_bytes = self.peak_bytes.max(self.live_bytes);
        }
        let alone = self.alone_ps(model, op);
        self.kernel_slowed = self.comm_active > 0;
        self.kernel_since_ps = at;
        self.kernel_left_ps = alone;
        self.kernel_end_ps = at + slowed_ps(model, alone, self.kernel_slowed);
        self.running[COMPUTE] = Running::Compute { op, start_ps: at };
    }

    /// A collective started or ended beside the running kernel at `now`: the kernel has done
    /// what it did at its old rate and does the rest at the new one, so it is slowed for
    /// the time it shares with communication, not for all of it or none
    /// ([`crate::compute::Interference`]: the analytical evaluator's `overlap · (1 − rate)`).
    fn retime_kernel(&mut self, model: &SimModel, now: u64) {
        let slowed = self.comm_active > 0;
        if slowed == self.kernel_slowed || !matches!(self.running[COMPUTE], Running::Compute { .. })
        {
            return;
        }
        // A chained kernel waiting for the host has not started: it all runs at the new rate.
        if now > self.kernel_since_ps {
            let done = progress_ps(model, now - self.kernel_since_ps, self.kernel_slowed);
            self.kernel_left_ps = self.kernel_left_ps.saturating_sub(done);
            self.kernel_since_ps = now;
        }
        self.kernel_slowed = slowed;
        self.kernel_end_ps = self.kernel_since_ps + slowed_ps(model, self.kernel_left_ps, slowed);
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
    /// slowed as it is now. One planned earlier in this same handler (a kernel and the
    /// collective beside it starting at one instant) is taken back rather than left to
    /// arrive stale: its sequence number stays used, so every later key is the same.
    fn emit_chain_end(&mut self, model: &SimModel, ctx: &mut Ctx) {
        let (node, old) = (self.node, self.chain_gen);
        if let Some(i) = ctx.out.iter().rposition(|(_, e)| {
            e.target == node && matches!(e.body, Body::ComputeDone { chain } if chain == old)
        }) {
            ctx.out.remove(i);
        }
        self.chain_slowed = self.comm_active > 0;
        self.chain_gen = self.chain_gen.wrapping_add(1);
        let end = self.chain_end_ps(model);
        let chain = self.chain_gen;
        ctx.emit(
            self.node,
            SimTime::from_ps(end),
            Body::ComputeDone { chain },
        );
    }

    /// When the chain's last kernel ends if the ones not started yet start at the running
    /// one's end (or when the host has issued them, if later), one after another, slowed as
    /// the GPU is now.
    fn chain_end_ps(&self, model: &SimModel) -> u64 {
        let ops = &model.programs[self.program as usize].stream_ops[COMPUTE];
        let next = self.done[COMPUTE] as usize + 1;
        ops[next..=self.chain_last as usize]
            .iter()
            .fold(self.kernel_end_ps, |end, &op| {
                end.max(self.issued_ps(model, op)) + self.kernel_ps(model, op)
            })
    }

    /// Completes the chain's kernels that ended by `now` (before the event at `now`), each
    /// followed by the next as soon as the host has issued it; the time up to each end is
    /// accounted as the state then was.
    pub(super) fn settle_chain(&mut self, model: &SimModel, now: u64) {
        while self.done[COMPUTE] < self.chain_last
            && self.kernel_end_ps <= now
            && matches!(self.running[COMPUTE], Running::Compute { .. })
        {
            let at = self.kernel_end_ps;
            self.account(at);
            self.complete_at(model, COMPUTE, at);
            let op = model.programs[self.program as usize].stream_ops[COMPUTE]
                [self.done[COMPUTE] as usize];
            let start = at.max(self.issued_ps(model, op));
            self.start_kernel(model, op, start);
        }
    }

    /// When the host has issued `op`, which no unresolved host sync precedes (a kernel of a
    /// chain: [`crate::ProgramIndex::chains_into_next`] stops at syncs).
    fn issued_ps(&self, model: &SimModel, op: u32) -> u64 {
        let issued = &model.host_issued[self.kernel_table as usize];
        if issued.is_empty() || op < self.host_settled {
            return 0;
        }
        self.host_anchor_ps + issued[op as usize].as_ps() - self.host_anchor_prefix
    }

    /// When the host issues `op`, or `None` while it waits at an earlier host sync. At the
    /// next sync itself, once the op's dependencies are done (`now`): the host, having
    /// reached it, waited for them, and goes on from `now` ([`crate::compute::host`]); if it
    /// has not reached it yet, the answer is when it will.
    fn host_issue(&mut self, model: &SimModel, op: u32, now: u64) -> Option<u64> {
        let issued = &model.host_issued[self.kernel_table as usize];
        if issued.is_empty() {
            return Some(0);
        }
        let syncs = &model.workload.programs[self.program as usize].host_syncs;
        match syncs.get(self.host_sync_cursor as usize) {
            Some(&sync) if op > sync => None,
            Some(&sync) if op == sync => {
                let before = match sync {
                    0 => 0,
                    s => issued[s as usize - 1].as_ps(),
                };
                let reached = self.host_anchor_ps + before - self.host_anchor_prefix;
                if reached > now {
                    return Some(reached);
                }
                let at_sync = issued[sync as usize].as_ps();
                self.host_anchor_ps = now + (at_sync - before);
                self.host_anchor_prefix = at_sync;
                self.host_settled = sync;
                self.host_sync_cursor += 1;
                // Ops after the sync on other streams may go now.
                self.pump_streams = (1 << STREAMS) - 1;
                Some(self.host_anchor_ps)
            }
            _ => Some(self.issued_ps(model, op)),
        }
    }

    /// A collective started or ended while a chain runs: the running kernel goes on at the
    /// new rate and the kernels not started yet take another time, so the chain's end moves
    /// (its old event goes stale).
    fn replan_chain(&mut self, model: &SimModel, ctx: &mut Ctx) {
        if matches!(self.running[COMPUTE], Running::Compute { .. }) {
            self.retime_kernel(model, ctx.now.as_ps());
            self.emit_chain_end(model, ctx);
        } else {
            // No chain runs: nothing to move until the next one is planned.
            self.chain_slowed = self.comm_active > 0;
        }
    }

    /// Attributes the time since the last event to compute, exposed communication or bubble.
    pub(super) fn account(&mut self, now: u64) {
        // Saturating: a job that starts later accounts from its start.
        let dt = now.saturating_sub(self.accounted_to_ps);
        self.accounted_to_ps = self.accounted_to_ps.max(now);
        if self.finish_ps.is_some() || dt == 0 {
            return;
        }
        // A chained kernel the host had not issued when the one before ended starts later:
        // the gap is not compute.
        let (gap, dt) = match self.running[COMPUTE] {
            Running::Compute { start_ps, .. } if start_ps > now - dt => {
                let gap = (start_ps - (now - dt)).min(dt);
                (SimTime::from_ps(gap), SimTime::from_ps(dt - gap))
            }
            _ => (SimTime::ZERO, SimTime::from_ps(dt)),
        };
        if gap > SimTime::ZERO {
            if self.comm_active > 0 {
                self.exposed_comm_ps += gap;
            } else {
                self.bubble_ps += gap;
            }
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
    pub(super) fn pump(&mut self, model: &SimModel, ctx: &mut Ctx) {
        let chain = self.chain_gen;
        self.start_ready(model, ctx);
        if self.chain_slowed != (self.comm_active > 0) {
            self.replan_chain(model, ctx);
        }
        if self.chain_gen != chain {
            self.run_chain_to_end_if_foregone(model, ctx);
        }
    }

    /// Whether op `op` has finished on its stream.
    fn op_done(&self, model: &SimModel, op: u32) -> bool {
        let stream = model.workload.programs[self.program as usize].ops[op as usize]
            .stream
            .index();
        self.done[stream] > model.programs[self.program as usize].position[op as usize]
    }

    /// Whether nothing can happen on this GPU before the chain just planned ends but what
    /// its end starts, a closed-form collective within its NVLink domain
    /// ([`GpuLp::runs_closed_in_domain`]) and the compute stream's next kernel: every other
    /// stream idle, and each one's next op waiting for the chain's last kernel or for an op
    /// that cannot end before it (chained kernels release nothing,
    /// [`crate::ProgramIndex::chains_into_next`]). Then the chain's end is known now, and so
    /// is what it does: the link this rank sends on and its slowdown change only with its own
    /// streams, and the next chain runs beside the collective from the end, as it would
    /// (slowed until the collective's end, an event of its own). Nothing that arrives
    /// meanwhile touches it: a leader's answer comes after the arrival; the leader applies
    /// a member's arrival to the collective it runs ahead as it would have from the early
    /// list at the start; an arrival for another collective waits in the early list; a host
    /// wake-up finds nothing ready.
    fn chain_end_is_foregone(&mut self, model: &SimModel, end_ps: u64) -> bool {
        if !model.chain_ends_ahead
            || model.faults.has_timed_links()
            || model.workload.jobs.is_some()
            || !model.flows.is_empty()
            || self.error.is_some()
            || !matches!(self.running[COMPUTE], Running::Compute { .. })
            || (0..STREAMS).any(|s| s != COMPUTE && !matches!(self.running[s], Running::Idle))
        {
            return false;
        }
        let index = &model.programs[self.program as usize];
        let program = &model.workload.programs[self.program as usize];
        let last = index.stream_ops[COMPUTE][self.chain_last as usize];
        let done = |d: u32| self.op_done(model, d);
        let mut started = None;
        let mut computes_on = None;
        for s in 0..STREAMS {
            let head = match s {
                COMPUTE => self.chain_last as usize + 1,
                _ => self.done[s] as usize,
            };
            let Some(&op) = index.stream_ops[s].get(head) else {
                continue;
            };
            let deps = program.deps(op as usize);
            if !deps.iter().all(|&d| d == last || done(d)) {
                continue;
            }
            // The compute stream goes on from the chain's end (its stream is busy till then).
            if s == COMPUTE {
                computes_on = Some(op);
                continue;
            }
            // Ready before the chain ends (waiting for the host alone), or a second op.
            if started.is_some() || !deps.contains(&last) {
                return false;
            }
            started = Some(op);
        }
        let Some(op) = started else {
            return false;
        };
        let OpKind::Collective { group, .. } = program.ops[op as usize].kind else {
            return false;
        };
        if !model.host_issued[self.kernel_table as usize].is_empty() {
            let syncs = &program.host_syncs;
            // No host sync resolves ahead of time: each op starts as the host has issued it.
            let latest = computes_on.map_or(op, |c| c.max(op));
            if syncs
                .get(self.host_sync_cursor as usize)
                .is_some_and(|&sync| latest >= sync)
                || self.issued_ps(model, op) > end_ps
            {
                return false;
            }
        }
        self.runs_closed_in_domain(model, group)
    }

    /// Handles the chain's end now, as its [`Body::ComputeDone`] (just emitted) would at
    /// its time, where [`GpuLp::chain_end_is_foregone`] says nothing can change it: the
    /// event is taken back, the kernels settled, the collective started and its arrival
    /// sent. One event fewer per member and collective. The event's sequence number stays
    /// used, so every later key is the one it would have been.
    fn run_chain_to_end_if_foregone(&mut self, model: &SimModel, ctx: &mut Ctx) {
        let (node, chain) = (self.node, self.chain_gen);
        let Some(i) = ctx.out.iter().rposition(|(_, e)| {
            e.target == node && matches!(e.body, Body::ComputeDone { chain: c } if c == chain)
        }) else {
            return;
        };
        let end = ctx.out[i].0.time;
        if !self.chain_end_is_foregone(model, end.as_ps()) {
            return;
        }
        ctx.out.remove(i);
        let now = std::mem::replace(&mut ctx.now, end);
        let end = end.as_ps();
        self.settle_chain(model, end);
        self.account(end);
        self.complete(model, COMPUTE, ctx);
        self.pump(model, ctx);
        ctx.now = now;
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
            let ready = program
                .deps(op as usize)
                .iter()
                .all(|&d| self.op_done(model, d));
            if !ready {
                continue;
            }
            match self.host_issue(model, op, ctx.now.as_ps()) {
                Some(at) if at <= ctx.now.as_ps() => self.start_op(model, s, op, ctx),
                Some(at) => self.wake_when_issued(at, ctx),
                // Woken when the host sync before it resolves.
                None => {}
            }
        }
        if self.finish_ps.is_none()
            && (0..STREAMS).all(|s| self.done[s] as usize >= index.stream_ops[s].len())
        {
            self.finish_ps = Some(ctx.now);
            self.digest = mix(self.digest, u64::MAX, ctx.now.as_ps());
        }
    }

    /// Plans a [`Body::HostIssued`] at `at` unless one comes as early.
    fn wake_when_issued(&mut self, at: u64, ctx: &mut Ctx) {
        if self.host_wake_ps != 0 && self.host_wake_ps <= at && self.host_wake_ps > ctx.now.as_ps()
        {
            return;
        }
        self.host_wake_ps = at;
        ctx.emit(self.node, SimTime::from_ps(at), Body::HostIssued);
    }

    /// Starts op `op` on stream `s`: a kernel, a CXL read, or a communication op, which
    /// [`GpuLp::start_collective`], [`GpuLp::start_send`] or [`GpuLp::start_recv`] set
    /// running; then applies what arrived for it before it started.
    fn start_op(&mut self, model: &SimModel, s: usize, op: u32, ctx: &mut Ctx) {
        let program = &model.workload.programs[self.program as usize];
        let o = program.ops[op as usize];
        let (comm_group, seq) = match o.kind {
            OpKind::Collective { group, .. } => {
                let comm = crate::communicator(group, Stream::ALL[s]);
                let g = &mut self.group_seq[usize::from(comm)];
                *g += 1;
                (comm, *g - 1)
            }
            _ => (P2P, self.done[s]),
        };
        match o.kind {
            OpKind::Compute { .. } => {
                self.start_kernel(model, op, ctx.now.as_ps());
                self.plan_chain(model, ctx);
            }
            OpKind::MemoryRead { bytes } => self.read_memory(model, s, op, bytes, ctx),
            OpKind::Collective {
                op: cop,
                group,
                bytes,
            } => self.start_collective(model, s, op, (comm_group, seq), (cop, group, bytes), ctx),
            OpKind::Send { peer, bytes } => {
                self.start_send(model, s, op, (comm_group, seq), (peer, bytes), ctx)
            }
            OpKind::Recv { peer, bytes } => {
                self.start_recv(model, s, op, (comm_group, seq), (peer, bytes), ctx)
            }
        }
        if matches!(self.running[s], Running::Comm(_)) {
            self.drain_early(model, s, comm_group, seq, ctx);
            self.check_done(model, s, ctx);
        }
    }

    /// Starts CXL read `op` of `bytes` on stream `s`: a request to the host's CXL memory
    /// node, whose reply completes it.
    fn read_memory(&mut self, model: &SimModel, s: usize, op: u32, bytes: u64, ctx: &mut Ctx) {
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
            start_ps: ctx.now.as_ps(),
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
            ctx.now + SimTime::from_ps(path.latency_ps.max(1)),
            Body::MemoryRead {
                bytes,
                reply_to: self.node,
                tag,
                latency_ps: path.latency_ps,
                bytes_per_s: path.bytes_per_s,
            },
        );
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
    pub(super) fn complete(&mut self, model: &SimModel, s: usize, ctx: &mut Ctx) {
        self.complete_at(model, s, ctx.now.as_ps());
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
                    st.add(SimTime::from_ps(at - run.start_ps), u64::from(run.ring.n));
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
        if let Some(t) = &mut self.timeline {
            let spans = match Stream::ALL[s] {
                Stream::Compute => &mut t.compute,
                Stream::SendNext | Stream::SendPrev | Stream::RecvPrev | Stream::RecvNext => {
                    &mut t.pipeline
                }
                _ => &mut t.comm,
            };
            Timeline::add(spans, start, at);
        }
        if model.trace {
            self.spans[s].push(Span {
                start: SimTime::from_ps(start),
                end: SimTime::from_ps(at),
                name: op,
            });
        }
    }
}

/// `alone` ps of a kernel's time alone, run slowed by communication or not.
fn slowed_ps(model: &SimModel, alone: u64, slowed: bool) -> u64 {
    if slowed {
        crate::time::round_ps(alone as f64 / model.interference.compute_rate)
    } else {
        alone
    }
}

/// How much of its time alone a kernel does in `wall` ps, slowed by communication or not.
fn progress_ps(model: &SimModel, wall: u64, slowed: bool) -> u64 {
    if slowed {
        crate::time::round_ps(wall as f64 * model.interference.compute_rate)
    } else {
        wall
    }
}
