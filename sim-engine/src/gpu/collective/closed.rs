//! Closed form, for a group whose members are all reached over analytical links: the
//! collective completes in the planned time ([`crate::collective::Plan`]) once the last
//! member arrived. One member gathers the arrivals ([`closed_leader`]) and releases everyone
//! at the planned end: 2(n−1) messages instead of a ring's 2n(n−1). When the other members
//! are mirrors of this one ([`crate::symmetry`]) there is no message: this member
//! ends where the full run releases the group's last member.

use super::{Algo, Call, GroupInfo, Schedule, Start};
use crate::collective;
use crate::gpu::GpuLp;
use crate::gpu::Running;
use crate::hash::splitmix64;
use crate::layout::GroupKind;
use crate::time::SimTime;
use crate::{Body, Ctx, DERIVED_MEMBER_BITS, SimModel, Tag};

/// [`Algo::Closed`]: ends `duration_ps` after the last member was ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Closed {
    duration_ps: u64,
}

/// Which member of a group gathers the arrivals of a collective that completes in closed
/// form, and answers them: one picked by a hash of the group's first rank. Every member
/// computes the same. Not simply the first rank: the groups' first ranks all sit in one
/// data-parallel replica (or one stage), so a partition of the fabric would hold every
/// leader and every member's pending arrival (docs/distributed.md, "Memory").
pub(super) fn closed_leader(members: &[u32]) -> usize {
    (splitmix64(u64::from(members[0])) % members.len() as u64) as usize
}

/// Whether this rank gathers group `kind`'s arrivals in closed form ([`closed_leader`]). A
/// function of the groups alone, so it can be asked while a run is borrowed.
fn gathers(groups: &[Option<Box<GroupInfo>>], kind: GroupKind) -> bool {
    groups[kind as usize].as_ref().is_some_and(|g| g.gathers)
}

/// Whether group `kind` lies within one NVLink domain ([`GroupInfo::within_domain`]).
fn within_domain(groups: &[Option<Box<GroupInfo>>], kind: GroupKind) -> bool {
    groups[kind as usize]
        .as_ref()
        .is_some_and(|g| g.within_domain)
}

/// The key a leader answers member `slot` of op `op` under ([`crate::Ctx::emit_derived`]);
/// [`WAKE_SLOT`] is its own wake-up. The same whenever the leader works the answer out.
fn answer_key(op: u32, slot: u32) -> u32 {
    ((op & (OPS_ANSWERED_DERIVED - 1)) << DERIVED_MEMBER_BITS) | (slot & WAKE_SLOT)
}

/// Ops an [`answer_key`] tells apart: a program with more keeps counter keys throughout
/// ([`GroupInfo::within_domain`]), so no two ops share a family ([`crate::derived_family`]).
pub(crate) const OPS_ANSWERED_DERIVED: u32 = 1 << 24;

/// [`answer_key`]'s slot of the leader's own wake-up: a group answered under derived keys
/// has at most 127 members, so 126 others ([`GroupInfo::within_domain`]).
const WAKE_SLOT: u32 = (1 << DERIVED_MEMBER_BITS) - 1;

/// Whether group `kind`'s other members mirror this rank ([`GroupInfo::mirror`]).
fn mirrored(groups: &[Option<Box<GroupInfo>>], kind: GroupKind) -> bool {
    groups[kind as usize]
        .as_ref()
        .is_some_and(|g| g.mirror.is_some())
}

impl GpuLp {
    /// Whether a collective on group `kind` runs in closed form within one NVLink domain,
    /// not mirrored: a member started here only hands its arrival to the leader and waits
    /// for the answer; the leader only counts the arrivals, which apply alike before and
    /// after its start (a count and two maxima), and answers under derived keys
    /// ([`GpuLp::pump`] may run a chain that ends in one at once).
    pub(in crate::gpu) fn runs_closed_in_domain(
        &mut self,
        model: &SimModel,
        kind: GroupKind,
    ) -> bool {
        if !matches!(self.group_info(model, kind), Some((ring, _, true)) if ring.n > 1) {
            return false;
        }
        within_domain(&self.groups, kind) && !mirrored(&self.groups, kind)
    }
}

impl Closed {
    /// Plans `call` in closed form: the gatherer waits for every other member, the others
    /// for its answer.
    pub(super) fn start(gpu: &GpuLp, call: &Call) -> Start {
        let needed = if mirrored(&gpu.groups, call.kind) {
            0
        } else if gathers(&gpu.groups, call.kind) {
            call.ring.n - 1
        } else {
            1
        };
        let duration_ps = call.plan.time().as_ps();
        Start {
            algo: Algo::Closed(Closed { duration_ps }),
            step_bytes: 0,
            recv_needed: needed,
        }
    }
}

impl Schedule for Closed {
    /// Counts the collective's traffic on the links, and sends this member's arrival to the
    /// gatherer.
    fn begin(self, gpu: &mut GpuLp, model: &SimModel, s: usize, ctx: &mut Ctx) {
        let Running::Comm(run) = &gpu.running[s] else {
            return;
        };
        let (Some((kind, cop, bytes)), Some((_, protocol, _))) = (run.collective, run.plan) else {
            return;
        };
        let (ring, group, seq) = (run.ring, run.group, run.seq);
        let moved = bytes as f64 * collective::bus_factor(cop, ring.n) * protocol.wire_factor();
        let now = ctx.now.as_ps();
        if let Some(mirror) = gpu.groups[kind as usize]
            .as_mut()
            .and_then(|g| g.mirror.take())
        {
            // Every member started now; each is ready when its first link is, whose state
            // this rank's link of the same kind mirrors. The last member hears the
            // gatherer's answer after both latencies.
            let mut ready = now;
            for &to in &mirror.probes {
                ready = ready.max(gpu.link_start_toward(model, to, now, moved as u64));
            }
            let per_class = (&mirror.crosses, &mirror.link_hops);
            gpu.account_mirrored(model, moved as u64, per_class, mirror.members);
            let end = (ready + self.duration_ps).max(now + mirror.latency_ps);
            if let Some(g) = gpu.groups[kind as usize].as_mut() {
                g.mirror = Some(mirror);
            }
            if let Running::Comm(run) = &mut gpu.running[s] {
                run.analytical_sends_until = run.analytical_sends_until.max(end);
            }
            gpu.check_done(model, s, ctx);
            return;
        }
        // A collective's ring is its group's ([`GpuLp::start_collective`]).
        let next_path = gpu.groups[kind as usize].as_ref().and_then(|g| g.next_path);
        let ready = match next_path {
            Some(path) => gpu.start_and_account_on(model, &path, now, moved as u64),
            None => gpu.start_and_account_toward(model, ring.next, now, moved as u64),
        };
        if let Running::Comm(run) = &mut gpu.running[s] {
            run.ready_ps = ready;
        }
        if !gathers(&gpu.groups, kind) {
            let tag = Tag {
                stream: s as u8,
                group,
                seq,
                step: 0,
            };
            let to_leader = gpu.groups[kind as usize]
                .as_ref()
                .and_then(|g| g.closed_peers.first().copied());
            if let Some((leader, latency_ps)) = to_leader {
                let (due_ps, done_ps) = (ctx.now.as_ps() + latency_ps, ready + self.duration_ps);
                let body = Body::Arrived {
                    tag,
                    done_ps,
                    due_ps,
                    inline: within_domain(&gpu.groups, kind),
                };
                // Delivered as late as the leader may need it: see `Body::Arrived`.
                let deliver = done_ps.saturating_sub(model.longest_link.as_ps());
                ctx.emit(leader, SimTime::from_ps(due_ps.max(deliver)), body);
            }
        }
    }

    /// A member's arrival (at the gatherer), or the gatherer's answer.
    fn arrive(
        self,
        gpu: &mut GpuLp,
        _: &SimModel,
        s: usize,
        _: u16,
        (done_ps, due_ps): (u64, u64),
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &mut gpu.running[s] else {
            return;
        };
        let duration_ps = self.duration_ps;
        run.recv_got += 1;
        // Every member plans alike ([`GpuLp::group_info`]), so a member's `done_ps`
        // is its ready time plus this same duration.
        run.ready_ps = run.ready_ps.max(done_ps.saturating_sub(duration_ps));
        run.arrived_by_ps = run.arrived_by_ps.max(due_ps);
        let kind = run.group_kind();
        if gathers(&gpu.groups, kind) && run.recv_got == run.recv_needed {
            // As of the last arrival's due time, not of its delivery: a member sends
            // it no later than this finish (see `Body::Arrived`), so every message
            // below is still ahead of now.
            let arrived_by = run.arrived_by_ps;
            let finish = run.ready_ps.saturating_add(duration_ps).max(arrived_by);
            run.analytical_sends_until = finish;
            let (group, seq, op) = (run.group, run.seq, run.op);
            let tag = Tag {
                stream: s as u8,
                group,
                seq,
                step: 1,
            };
            let inline = within_domain(&gpu.groups, kind);
            if inline {
                // The arrivals may have been handed over before their time: the answers and
                // this rank's own end take keys that do not depend on when.
                run.wake_scheduled = true;
                run.completes_on_wake = true;
                let body = Body::SendDone { stream: s as u8 };
                let key = answer_key(op, WAKE_SLOT);
                ctx.emit_derived(gpu.node, SimTime::from_ps(finish), body, key);
            }
            if let Some(g) = &gpu.groups[kind as usize] {
                for (slot, &(member, latency_ps)) in g.closed_peers.iter().enumerate() {
                    let at = SimTime::from_ps(finish.max(arrived_by + latency_ps));
                    let body = Body::Message { tag };
                    match inline {
                        true => ctx.emit_derived(member, at, body, answer_key(op, slot as u32)),
                        false => ctx.emit(member, at, body),
                    }
                }
            }
        }
    }
}
