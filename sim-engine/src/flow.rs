//! `network.model = "flow"`: transfers as fluid flows whose rates are max-min fair over the
//! links they share (Bertsekas and Gallager, *Data Networks*, §6.5.2; the fluid model of
//! SimGrid and of m3's flowSim, SIGCOMM'24). Rates change only when a flow starts or ends.
//!
//! [`FlowSolver`] keeps every active flow, the load of every shared link and each flow's
//! finish time under its current rate. After a change it re-solves only a *region*: the
//! links whose flows may have to change rate, grown until the allocation is max-min fair
//! everywhere. It relies on the local characterisation of max-min fairness: an allocation
//! is max-min fair iff every flow has a *bottleneck*, a saturated link on its path where no
//! other flow gets more (or the flow runs at its own cap). A flow none of whose links
//! changed keeps its bottleneck, so only flows on changed links need re-solving:
//! 1. Start from the added flow (or the saturated links a removed flow leaves).
//! 2. Water-fill the flows of the region; links outside it keep their other flows' rates
//!    and offer what those leave.
//! 3. Grow the region by every outside link that a flow whose rate changed crosses, if it
//!    is (or was) saturated, and by every outside link a flow was frozen at below another
//!    flow's rate there. Repeat until nothing grows.
//!
//! At worst the region is the whole network (global water-filling); in a fabric whose
//! saturated links are the NICs it is the flows of a few NICs. Everything is deterministic:
//! one LP owns the solver, flows are slab slots, ties break by id.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use serde::{Deserialize, Serialize};

use super::results::{FlowStats, PortReport};
use super::{Ctx, SimModel, Tag};
use crate::hash::splitmix64;
use crate::segments::segment_size;
use crate::serialisation_ps;
use crate::time::{SimTime, ps_per_byte};
use crate::topology::{LinkId, NodeId};

/// Relative tolerance for "saturated" and "changed".
const EPS: f64 = 1e-9;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SharedLink {
    /// Bytes per second.
    capacity: f64,
    /// Sum of the rates of its flows.
    load: f64,
    flows: Vec<u32>,
    /// Bytes carried, for the link report.
    bytes: f64,
}

impl SharedLink {
    fn saturated(&self) -> bool {
        self.load >= self.capacity * (1.0 - EPS)
    }

    /// One flow crosses it, once (a flow listing it twice is listed twice here): that flow
    /// alone loads it, and re-solving it brings no other flow in.
    fn private(&self) -> bool {
        self.flows.len() == 1
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fluid<P> {
    links: Vec<u32>,
    /// Its own limit, bytes per second (the unshared links of its path, a FIFO).
    cap: f64,
    rate: f64,
    /// Bytes left at `since`.
    left: f64,
    since: u64,
    finish: u64,
    payload: P,
}

/// Active flows and the max-min fair rates of the links they share. Links are dense
/// indices into the capacities given at creation; a flow listing a link k times takes
/// its rate there k times (a ring lane whose edges share the link).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FlowSolver<P> {
    links: Vec<SharedLink>,
    flows: Vec<Option<Fluid<P>>>,
    free: Vec<u32>,
    /// (finish time, flow) of every active flow.
    finishes: BTreeSet<(u64, u32)>,
    active: u64,
    pub stats: FlowStats,
    /// Flows added or links freed since the last recomputation.
    #[serde(skip)]
    pending: Pending,
    #[serde(skip)]
    scratch: Scratch,
}

#[derive(Debug, Clone, Default)]
struct Pending {
    flows: Vec<u32>,
    links: Vec<u32>,
}

/// Reused buffers of a recomputation; marks are epochs, so nothing is cleared per call.
#[derive(Debug, Clone, Default)]
struct Scratch {
    epoch: u32,
    fill: u32,
    /// Constraint links of the current water-filling (== fill).
    link_mark: Vec<u32>,
    /// Region membership of a link (== epoch).
    region_mark: Vec<u32>,
    /// Local index of a constraint link, valid when `link_mark == epoch`.
    local_of: Vec<u32>,
    flow_mark: Vec<u32>,
    /// Local index of a member flow in the current water-filling.
    member_of: Vec<u32>,
}

/// [`Filled`]'s bottleneck of a flow limited by its own cap.
const NO_BOTTLENECK: u32 = u32::MAX;

/// One water-filling's state over its constraint links (local indices k) and members
/// (local indices i, in `members` order).
#[derive(Default)]
struct Filling {
    residual: Vec<f64>,
    /// Members crossing link k: `crossing[start[k]..start[k + 1]]`, once per listing.
    start: Vec<u32>,
    crossing: Vec<u32>,
    global: Vec<u32>,
    unfrozen: Vec<u32>,
    /// (share, link), lowest first. A link's share only grows as members freeze (each
    /// freezes at the lowest share), so an entry is pushed only when a share falls below
    /// the link's last pushed one (`queued`, rounding) and a stale entry is renewed when it
    /// comes to the top: the links of a long ring lane that never bottleneck stay put.
    heap: BinaryHeap<Reverse<(Level, u32)>>,
    queued: Vec<f64>,
    /// Per member: (rate, bottleneck).
    rate_of: Vec<Option<(f64, u32)>>,
}

impl Filling {
    fn share(&self, k: usize) -> Option<f64> {
        (self.unfrozen[k] > 0).then(|| self.residual[k].max(0.0) / f64::from(self.unfrozen[k]))
    }

    fn offer(&mut self, k: usize) {
        if let Some(share) = self.share(k)
            && share < self.queued[k]
        {
            self.queued[k] = share;
            self.heap.push(Reverse((Level(share), k as u32)));
        }
    }

    /// The link with the lowest fair share among those with unfrozen members (the lowest
    /// index among equals).
    fn lowest(&mut self) -> Option<(f64, usize)> {
        while let Some(&Reverse((Level(recorded), k))) = self.heap.peek() {
            let k = k as usize;
            let current = self.share(k);
            if current.is_some_and(|c| c.to_bits() == recorded.to_bits()) {
                return Some((recorded, k));
            }
            self.heap.pop();
            if let Some(c) = current
                && recorded.to_bits() == self.queued[k].to_bits()
            {
                self.queued[k] = c;
                self.heap.push(Reverse((Level(c), k as u32)));
            }
        }
        None
    }

    /// Fixes member `i` (crossing `links`) at `level`.
    fn freeze(
        &mut self,
        i: usize,
        links: &[u32],
        local: impl Fn(u32) -> Option<usize>,
        level: f64,
        bottleneck: u32,
    ) {
        self.rate_of[i] = Some((level, bottleneck));
        for &l in links {
            let Some(k) = local(l) else {
                continue;
            };
            self.residual[k] -= level;
            self.unfrozen[k] -= 1;
            self.offer(k);
        }
    }
}

/// Result of water-filling one region.
struct Filled {
    /// (flow, new rate, bottleneck link or `u32::MAX` for its own cap).
    rates: Vec<(u32, f64, u32)>,
}

impl<P> FlowSolver<P> {
    /// A network of links with these capacities (bytes per second).
    pub fn new(capacities: impl IntoIterator<Item = f64>) -> Self {
        FlowSolver {
            links: capacities
                .into_iter()
                .map(|capacity| SharedLink {
                    capacity,
                    ..SharedLink::default()
                })
                .collect(),
            flows: Vec::new(),
            free: Vec::new(),
            finishes: BTreeSet::new(),
            active: 0,
            stats: FlowStats::default(),
            pending: Pending::default(),
            scratch: Scratch::default(),
        }
    }

    /// Appends a link (a FIFO shared by one connection's flows); returns its index.
    pub fn add_link(&mut self, capacity: f64) -> u32 {
        self.links.push(SharedLink {
            capacity,
            ..SharedLink::default()
        });
        (self.links.len() - 1) as u32
    }

    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// Bytes each link carried so far (flows still active count up to their last change).
    pub fn link_bytes(&self, link: u32) -> f64 {
        self.links[link as usize].bytes
    }

    pub fn active(&self) -> u64 {
        self.active
    }

    /// Starts a flow of `bytes` over `links` at `now`, capped at `cap` bytes per second. Its
    /// rate is set by the next [`FlowSolver::recompute`].
    pub fn add(&mut self, now: u64, links: Vec<u32>, cap: f64, bytes: f64, payload: P) -> u32 {
        let fluid = Fluid {
            links,
            cap,
            rate: 0.0,
            left: bytes.max(0.0),
            since: now,
            finish: u64::MAX,
            payload,
        };
        let id = crate::slab::insert(&mut self.flows, &mut self.free, fluid);
        self.pending.flows.push(id);
        self.active += 1;
        self.stats.flows += 1;
        self.stats.max_active = self.stats.max_active.max(self.active);
        id
    }

    /// The current rate of flow `id`, bytes per second.
    pub fn rate(&self, id: u32) -> Option<f64> {
        self.flows.get(id as usize)?.as_ref().map(|f| f.rate)
    }

    /// When the flow finishing first does, if any flow is active.
    pub fn next_finish(&self) -> Option<u64> {
        self.finishes.first().map(|&(t, _)| t)
    }

    /// Removes every flow that has finished by `now`, earliest first, and returns their
    /// payloads with their finish times. Call [`FlowSolver::recompute`] after.
    pub fn take_finished(&mut self, now: u64, out: &mut Vec<(u64, P)>) {
        while let Some(&(t, id)) = self.finishes.first() {
            if t > now {
                break;
            }
            self.finishes.pop_first();
            let Some(f) = self.remove(id, t) else {
                continue;
            };
            out.push((t, f.payload));
        }
    }

    /// Takes flow `id` out at time `t`: its links lose its load, and those it saturated
    /// are re-solved by the next recomputation.
    fn remove(&mut self, id: u32, t: u64) -> Option<Fluid<P>> {
        let f = self.flows[id as usize].take()?;
        self.free.push(id);
        self.active -= 1;
        for &l in &f.links {
            let link = &mut self.links[l as usize];
            if link.saturated() {
                self.pending.links.push(l);
            }
            link.load -= f.rate;
            // Bytes/s × ps × 1e-12, in this order: not `SimTime::as_secs_f64`, whose
            // rounding comes first and would move results in the last bit.
            link.bytes += f.rate * t.saturating_sub(f.since) as f64 * 1e-12;
            if let Some(i) = link.flows.iter().position(|&g| g == id) {
                link.flows.swap_remove(i);
            }
            if link.flows.is_empty() {
                link.load = 0.0;
            }
        }
        Some(f)
    }

    #[cfg(test)]
    fn remove_for_test(&mut self, id: u32) {
        if let Some(f) = self.flows[id as usize].as_ref() {
            let key = (f.finish, id);
            self.finishes.remove(&key);
        }
        let since = self.flows[id as usize].as_ref().map_or(0, |f| f.since);
        self.remove(id, since);
    }

    /// Re-solves the rates the changes since the last call affect, at time `now`.
    pub fn recompute(&mut self, now: u64) {
        if self.pending.flows.is_empty() && self.pending.links.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        self.stats.recomputations += 1;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.begin(self.links.len(), self.flows.len());
        let epoch = scratch.epoch;
        // New flows join their links now, at rate 0; they are the region's first members.
        let mut members: Vec<u32> = Vec::new();
        for &id in &pending.flows {
            let Some(f) = self.flows[id as usize].as_ref() else {
                continue;
            };
            for &l in &f.links {
                self.links[l as usize].flows.push(id);
            }
            if scratch.flow_mark[id as usize] != epoch {
                scratch.flow_mark[id as usize] = epoch;
                members.push(id);
            }
        }
        let mut grow: Vec<u32> = pending.links;
        let mut filled: Option<Filled> = None;
        loop {
            let before = members.len();
            for l in grow.drain(..) {
                if scratch.region_mark[l as usize] == epoch {
                    continue;
                }
                scratch.region_mark[l as usize] = epoch;
                for &g in &self.links[l as usize].flows {
                    if scratch.flow_mark[g as usize] != epoch {
                        scratch.flow_mark[g as usize] = epoch;
                        members.push(g);
                    }
                }
            }
            if let Some(done) = filled.take_if(|_| members.len() == before) {
                // The region grew by links whose flows were all members already (a NIC
                // link only this flow crosses): filling the same members again would
                // give the same rates.
                self.apply(now, &done);
                break;
            }
            members.sort_unstable();
            let latest = filled.insert(self.fill(&members, &mut scratch));
            // Grow by what the new rates disturb outside the region.
            for &(id, rate, bottleneck) in &latest.rates {
                let f = self.flows[id as usize].as_ref().expect("member is active");
                if bottleneck != NO_BOTTLENECK && scratch.region_mark[bottleneck as usize] != epoch
                {
                    let link = &self.links[bottleneck as usize];
                    let larger_outside = link.flows.iter().any(|&g| {
                        scratch.flow_mark[g as usize] != epoch
                            && self.flows[g as usize]
                                .as_ref()
                                .is_some_and(|o| o.rate > rate * (1.0 + EPS))
                    });
                    if larger_outside {
                        grow.push(bottleneck);
                    }
                }
                if (rate - f.rate).abs() > EPS * rate.max(f.rate) {
                    for &l in &f.links {
                        if scratch.region_mark[l as usize] == epoch {
                            continue;
                        }
                        let link = &self.links[l as usize];
                        if link.private() {
                            // Only this member crosses it: the region would gain nothing.
                            continue;
                        }
                        let after = link.load - f.rate + rate;
                        if link.saturated() || after >= link.capacity * (1.0 - EPS) {
                            grow.push(l);
                        }
                    }
                }
            }
            if grow.is_empty() {
                self.apply(now, latest);
                break;
            }
        }
        self.scratch = scratch;
    }

    /// Of the links only flow `f` crosses, the one that would bind it first in [`Self::fill`]
    /// (the least share, the first in its list among equals). Its other private links can
    /// never be a member's lowest share while it is unfrozen, and no other member crosses
    /// them, so the filling leaves them out: a ring lane crosses thousands of NIC links
    /// that nothing else shares.
    fn tightest_private_link(&self, f: &Fluid<P>) -> Option<u32> {
        let mut best: Option<(f64, u32)> = None;
        for &l in &f.links {
            let link = &self.links[l as usize];
            if !link.private() {
                continue;
            }
            // The share `fill` would give it: its residual with the member's rate added
            // back, over one member, in the same operations.
            let share = (link.capacity - link.load + f.rate).max(0.0);
            if best.is_none_or(|(b, _)| share.total_cmp(&b).is_lt()) {
                best = Some((share, l));
            }
        }
        best.map(|(_, l)| l)
    }

    /// Max-min rates of `members` (sorted), every other flow's rate fixed: progressive
    /// filling over the links they cross, each offering its capacity less the fixed flows'
    /// load.
    fn fill(&self, members: &[u32], s: &mut Scratch) -> Filled {
        let mark = s.next_fill();
        let member = |id: u32| self.flows[id as usize].as_ref().expect("member is active");
        let mut w = Filling::default();
        // Constraint links: what the fixed flows leave, and how many members cross them.
        let mut count: Vec<u32> = Vec::new();
        for (i, &id) in members.iter().enumerate() {
            s.member_of[id as usize] = i as u32;
            let f = member(id);
            let kept = self.tightest_private_link(f);
            for &l in &f.links {
                let li = l as usize;
                if self.links[li].private() && Some(l) != kept {
                    continue;
                }
                if s.link_mark[li] != mark {
                    s.link_mark[li] = mark;
                    s.local_of[li] = w.residual.len() as u32;
                    let link = &self.links[li];
                    w.residual.push(link.capacity - link.load);
                    w.global.push(l);
                    count.push(0);
                }
                let k = s.local_of[li] as usize;
                // A member's current rate is not fixed load.
                w.residual[k] += f.rate;
                count[k] += 1;
            }
        }
        w.start = Vec::with_capacity(count.len() + 1);
        w.start.push(0);
        for &c in &count {
            w.start.push(w.start.last().copied().unwrap_or(0) + c);
        }
        let mut next: Vec<u32> = w.start[..count.len()].to_vec();
        w.crossing = vec![0; w.start.last().copied().unwrap_or(0) as usize];
        for (i, &id) in members.iter().enumerate() {
            for &l in &member(id).links {
                if s.link_mark[l as usize] != mark {
                    continue;
                }
                let k = s.local_of[l as usize] as usize;
                w.crossing[next[k] as usize] = i as u32;
                next[k] += 1;
            }
        }
        w.unfrozen = count;
        // Every constraint link has a member, so each offers its share: heapified at once
        // (linear), where pushing them one by one cost a sift each.
        w.queued = (0..w.residual.len())
            .map(|k| w.share(k).unwrap_or(f64::INFINITY))
            .collect();
        w.heap = w
            .queued
            .iter()
            .enumerate()
            .filter(|(_, share)| share.is_finite())
            .map(|(k, &share)| Reverse((Level(share), k as u32)))
            .collect::<Vec<_>>()
            .into();
        w.rate_of = vec![None; members.len()];
        let mut by_cap: Vec<u32> = (0..members.len() as u32).collect();
        by_cap.sort_by(|&a, &b| {
            let (a, b) = (members[a as usize], members[b as usize]);
            member(a).cap.total_cmp(&member(b).cap).then(a.cmp(&b))
        });
        let mut next_cap = 0;
        let mut left = members.len();
        let local =
            |l: u32| (s.link_mark[l as usize] == mark).then(|| s.local_of[l as usize] as usize);
        let mut frozen_here: Vec<u32> = Vec::new();
        while left > 0 {
            let link_level = w.lowest();
            while next_cap < by_cap.len() && w.rate_of[by_cap[next_cap] as usize].is_some() {
                next_cap += 1;
            }
            let cap_level = by_cap
                .get(next_cap)
                .map(|&i| (member(members[i as usize]).cap, i as usize));
            let by_link = match (link_level, cap_level) {
                (Some((share, k)), Some((cap, _))) if share <= cap => Some((share, k)),
                (Some(level), None) => Some(level),
                _ => None,
            };
            if let Some((share, k)) = by_link {
                frozen_here.clear();
                frozen_here.extend(
                    w.crossing[w.start[k] as usize..w.start[k + 1] as usize]
                        .iter()
                        .copied()
                        .filter(|&i| w.rate_of[i as usize].is_none()),
                );
                let bottleneck = w.global[k];
                for &i in &frozen_here {
                    let i = i as usize;
                    // A flow crossing the link twice is listed twice; it freezes once.
                    if w.rate_of[i].is_some() {
                        continue;
                    }
                    w.freeze(i, &member(members[i]).links, local, share, bottleneck);
                    left -= 1;
                }
            } else if let Some((cap, i)) = cap_level {
                w.freeze(i, &member(members[i]).links, local, cap, NO_BOTTLENECK);
                left -= 1;
            } else {
                // Members that cross no link and have no cap: nothing limits them (the
                // engine never starts one).
                for r in w.rate_of.iter_mut().filter(|r| r.is_none()) {
                    *r = Some((f64::INFINITY, NO_BOTTLENECK));
                    left -= 1;
                }
            }
        }
        Filled {
            rates: members
                .iter()
                .zip(w.rate_of)
                .map(|(&id, r)| {
                    let (rate, bottleneck) = r.expect("every member frozen");
                    (id, rate, bottleneck)
                })
                .collect(),
        }
    }

    /// Moves each member to its new rate at `now`: bytes sent so far at the old rate, the
    /// finish time at the new.
    fn apply(&mut self, now: u64, filled: &Filled) {
        self.stats.flows_touched += filled.rates.len() as u64;
        for &(id, rate, _) in &filled.rates {
            let f = self.flows[id as usize].as_mut().expect("member is active");
            // Bytes/s × ps × 1e-12, in this order (as in `FlowSolver::remove`).
            let sent = f.rate * (now - f.since) as f64 * 1e-12;
            f.left = (f.left - sent).max(0.0);
            f.since = now;
            for &l in &f.links {
                let link = &mut self.links[l as usize];
                link.load += rate - f.rate;
                link.bytes += sent;
            }
            let old_finish = f.finish;
            f.rate = rate;
            f.finish = if f.left <= 0.0 {
                now
            } else if rate > 0.0 {
                // A finish past the clock's limit still gets a tick, past the limit, which
                // stops the run with an overflow error instead of leaving the flow unfinished.
                now.saturating_add(SimTime::from_secs_f64_ceil(f.left / rate).as_ps())
                    .min(SimTime::LIMIT.as_ps())
            } else {
                u64::MAX
            };
            if old_finish != f.finish {
                if old_finish != u64::MAX {
                    self.finishes.remove(&(old_finish, id));
                }
                self.finishes.insert((f.finish, id));
            }
        }
    }
}

impl Scratch {
    fn begin(&mut self, links: usize, flows: usize) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.region_mark.iter_mut().for_each(|m| *m = 0);
            self.flow_mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        self.region_mark.resize(links, 0);
        self.link_mark.resize(links, 0);
        self.local_of.resize(links, 0);
        self.flow_mark.resize(flows, 0);
        self.member_of.resize(flows, 0);
    }

    /// A fresh mark for the constraint links of one water-filling.
    fn next_fill(&mut self) -> u32 {
        self.fill = self.fill.wrapping_add(1);
        if self.fill == 0 {
            self.link_mark.iter_mut().for_each(|m| *m = 0);
            self.fill = 1;
        }
        self.fill
    }
}

/// An f64 ordered totally (rates are finite and non-negative).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Level(f64);

impl Eq for Level {}

impl PartialOrd for Level {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Level {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A transfer a GPU hands to the fabric's flow LP ([`super::Body::FlowStart`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlowRequest {
    pub src: NodeId,
    pub dst: NodeId,
    /// PXN relay, [`super::NO_NODE`] when none.
    pub via: NodeId,
    /// The sender's flow slot, named in [`super::Body::FlowDone`].
    pub flow: u32,
    pub bytes: u64,
    pub hash: u64,
    pub tag: Tag,
    /// What NCCL's FIFO sustains on the connection (bytes/s), infinite when not a limit.
    pub fifo_rate: f64,
    /// Queue pairs the transfer is split over (NCCL_IB_SPLIT_DATA_ON_QPS).
    pub parts: u8,
}

/// A queue pair: (sender, receiver, PXN relay, ECMP hash). An RC queue pair executes its
/// send requests in order (InfiniBand Architecture Specification, vol. 1, §9.5), so a
/// connection's next message starts when the one before it has left; in the packet model
/// its segments queue behind the earlier message's at the same ports.
pub(crate) type QueuePair = (NodeId, NodeId, NodeId, u64);

impl FlowRequest {
    fn queue_pair(&self) -> QueuePair {
        (self.src, self.dst, self.via, self.hash)
    }
}

/// A member of a ring collective, ready to run it: its lanes' edges, to the next member.
/// The ring runs once all `n` members of the group led by `leader` joined.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingJoin {
    pub leader: NodeId,
    pub group: u8,
    pub seq: u32,
    pub n: u32,
    pub member: NodeId,
    /// Delivered to the member when the ring is done.
    pub tag: Tag,
    /// Per lane: (next member, PXN relay, ECMP hash) of this member's edge.
    pub lanes: Vec<(NodeId, NodeId, u64)>,
    pub steps: u32,
    /// Bytes each member sends its next per step and lane.
    pub step_bytes: u64,
    /// What NCCL's FIFO sustains on a connection (bytes/s), infinite when not a limit.
    pub fifo_rate: f64,
}

/// A ring collective gathering its members.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ring {
    members: Vec<(NodeId, Tag)>,
    /// Per lane: the shared links of every member's edge (a link two edges cross is listed
    /// twice: it carries the lane's stream twice) and the lowest cap of their other hops.
    lanes: Vec<(Vec<LinkId>, f64)>,
    /// Per lane, the sum over its edges of their cost per step beyond serialisation
    /// (latency and fill).
    overhead_ps: Vec<u64>,
}

/// Who hears of a transfer's end.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Done {
    /// A point-to-point transfer: its receiver, then its sender (both in its queue pair).
    Send {
        queue_pair: QueuePair,
        flow: u32,
        tag: Tag,
    },
    /// A ring collective: every member.
    Ring { members: Vec<(NodeId, Tag)> },
}

/// A transfer until its last part finishes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Transfer {
    done: Done,
    parts_left: u8,
    /// After its last byte leaves the fluid: when the receiver has it, and when the
    /// sender hears so.
    deliver_ps: u64,
    ack_ps: u64,
}

/// The fabric's flow LP: every flow over shared links, in one place so that rates are
/// max-min fair across the whole fabric. It lives in one fabric node's LP
/// ([`super::SimModel::flow_home`]). A GPU's request reaches it [`super::SimModel::flow_delay`]
/// after the transfer starts (the smallest latency of a shared link), and the rest of
/// the path's latency follows the fluid, so every event either way is at least that far
/// in the future.
#[derive(Debug, Serialize, Deserialize)]
pub struct FlowHome {
    solver: FlowSolver<u32>,
    transfers: Vec<Option<Transfer>>,
    free_transfers: Vec<u32>,
    /// NCCL's FIFO of a connection as a link its transfers share: (src, dst, rate bits).
    fifo_links: BTreeMap<(NodeId, NodeId, u64), u32>,
    /// Queue pairs with a transfer in progress, and the transfers waiting behind it.
    queue_pairs: BTreeMap<QueuePair, VecDeque<FlowRequest>>,
    /// Ring collectives gathering their members, by (leader, group, sequence).
    rings: BTreeMap<(NodeId, u8, u32), Ring>,
    /// The tick planned for the next finish (`u64::MAX`: none).
    tick_at: u64,
    #[serde(skip)]
    path: Vec<LinkId>,
    #[serde(skip)]
    hops: Vec<LinkId>,
    #[serde(skip)]
    finished: Vec<(u64, u32)>,
}

impl FlowHome {
    pub fn new(model: &SimModel) -> Self {
        FlowHome {
            solver: FlowSolver::new(model.topology.links().map(|l| l.bytes_per_s)),
            transfers: Vec::new(),
            free_transfers: Vec::new(),
            fifo_links: BTreeMap::new(),
            queue_pairs: BTreeMap::new(),
            rings: BTreeMap::new(),
            tick_at: u64::MAX,
            path: Vec::new(),
            hops: Vec::new(),
            finished: Vec::new(),
        }
    }

    /// A transfer reaches the flow LP: it starts now unless its queue pair is busy.
    pub fn start(&mut self, model: &SimModel, req: FlowRequest, ctx: &mut Ctx) {
        match self.queue_pairs.entry(req.queue_pair()) {
            std::collections::btree_map::Entry::Occupied(mut waiting) => {
                waiting.get_mut().push_back(req);
                return;
            }
            std::collections::btree_map::Entry::Vacant(free) => {
                free.insert(VecDeque::new());
            }
        }
        self.launch(model, req, ctx.now.as_ps());
        self.solver.recompute(ctx.now.as_ps());
        self.plan_tick(ctx);
    }

    /// Routes one edge from `src` to `dst` (through PXN relay `via`, or [`super::NO_NODE`])
    /// on ECMP hash `hash`: appends its shared links to `links` and returns the lowest
    /// bandwidth of its other hops, its latency, and the fill of a `segment` cut through
    /// every hop but the slowest (as the packet model's segments: the first one's head
    /// leads by an MTU packet's serialisation per hop and its tail by the slowest hop's
    /// whole serialisation, `net::cut_through`; the rest follow at the bottleneck's pace).
    fn route_edge(
        &mut self,
        model: &SimModel,
        (src, dst, via): (NodeId, NodeId, NodeId),
        hash: u64,
        segment: u64,
        links: &mut Vec<LinkId>,
    ) -> (f64, u64, u64) {
        let legs: &[(NodeId, NodeId)] = if via == super::NO_NODE {
            &[(src, dst)]
        } else {
            &[(src, via), (via, dst)]
        };
        let head = model.net.head_bytes(segment);
        let (mut cap, mut latency, mut fill) = (f64::INFINITY, 0, 0);
        let mut slowest = f64::INFINITY;
        for &(a, b) in legs {
            if let Err(e) = model
                .topology
                .path_into(a, b, hash, &mut self.path, &mut self.hops)
            {
                // The sender routed this edge before asking (split parts and ring edges
                // take other hashes over the same reachable fabric).
                unreachable!("flow route from {a} to {b} vanished: {e}");
            }
            for &l in &self.path {
                let link = model.topology.link(l);
                latency += link.latency.as_ps();
                fill += serialisation_ps(head, ps_per_byte(link.bytes_per_s));
                slowest = slowest.min(link.bytes_per_s);
                if model.net.is_shared(link.class) {
                    links.push(l);
                } else {
                    cap = cap.min(link.bytes_per_s);
                }
            }
        }
        let fill = fill.saturating_sub(serialisation_ps(head, ps_per_byte(slowest)));
        (cap, latency, fill)
    }

    /// Starts the parts of a transfer as flows (rates are set by the next recomputation).
    fn launch(&mut self, model: &SimModel, req: FlowRequest, now: u64) {
        let parts = req.parts.max(1);
        let segment = segment_size(req.bytes, model.net.segment_bytes);
        let (mut latency, mut fill) = (0, 0);
        let mut flows = Vec::with_capacity(usize::from(parts));
        for qp in 0..u64::from(parts) {
            let hash = if parts > 1 {
                splitmix64(req.hash ^ qp)
            } else {
                req.hash
            };
            let mut links = Vec::new();
            let (cap, part_latency, part_fill) = self.route_edge(
                model,
                (req.src, req.dst, req.via),
                hash,
                segment,
                &mut links,
            );
            // Both legs of a PXN transfer may cross one link only in odd fabrics; the
            // transfer takes it once.
            links.sort_unstable();
            links.dedup();
            if req.fifo_rate.is_finite() {
                let key = (req.src, req.dst, req.fifo_rate.to_bits());
                let solver = &mut self.solver;
                let fifo = *self
                    .fifo_links
                    .entry(key)
                    .or_insert_with(|| solver.add_link(req.fifo_rate));
                links.push(fifo);
            }
            latency = latency.max(part_latency);
            fill = fill.max(part_fill);
            flows.push((links, cap));
        }
        let delay = model.flow_delay.as_ps();
        let transfer = Transfer {
            done: Done::Send {
                queue_pair: req.queue_pair(),
                flow: req.flow,
                tag: req.tag,
            },
            parts_left: parts,
            deliver_ps: (latency + fill).saturating_sub(delay).max(delay),
            ack_ps: latency.max(delay),
        };
        let id = crate::slab::insert(&mut self.transfers, &mut self.free_transfers, transfer);
        let part_bytes = req.bytes as f64 / f64::from(parts);
        for (links, cap) in flows {
            self.solver.add(now, links, cap, part_bytes, id);
        }
    }

    /// A member of a ring collective is ready. With the last member the ring starts: one
    /// flow per lane over every member's edge, so that it moves at its slowest edge's
    /// share, as a ring's steps do, and each of its links carries it once per edge. The
    /// steps' latency and fill follow, as they chain along the edges in the packet model.
    pub fn join(&mut self, model: &SimModel, join: RingJoin, ctx: &mut Ctx) {
        let key = (join.leader, join.group, join.seq);
        let segment = segment_size(join.step_bytes, model.net.segment_bytes);
        let mut ring = self.rings.remove(&key).unwrap_or_else(|| Ring {
            members: Vec::with_capacity(join.n as usize),
            lanes: vec![(Vec::new(), join.fifo_rate); join.lanes.len()],
            overhead_ps: vec![0; join.lanes.len()],
        });
        ring.members.push((join.member, join.tag));
        for (lane, &(next, via, hash)) in join.lanes.iter().enumerate() {
            let Some((links, cap)) = ring.lanes.get_mut(lane) else {
                break;
            };
            let (edge_cap, latency, fill) =
                self.route_edge(model, (join.member, next, via), hash, segment, links);
            *cap = cap.min(edge_cap);
            ring.overhead_ps[lane] += latency + fill;
        }
        if ring.members.len() < join.n as usize {
            self.rings.insert(key, ring);
            return;
        }
        let delay = model.flow_delay.as_ps();
        // A member forwards a step once it has it whole, so a ring's steps chain along its
        // edges: over `steps` steps each edge's latency and fill count steps / n times.
        let lane_overhead = ring.overhead_ps.iter().copied().max().unwrap_or(0);
        let overhead =
            (u128::from(lane_overhead) * u128::from(join.steps) / u128::from(join.n.max(1))) as u64;
        let lanes = ring.lanes.len().max(1);
        let transfer = Transfer {
            done: Done::Ring {
                members: ring.members,
            },
            parts_left: lanes as u8,
            deliver_ps: overhead.saturating_sub(delay).max(delay),
            ack_ps: 0,
        };
        let id = crate::slab::insert(&mut self.transfers, &mut self.free_transfers, transfer);
        let bytes = (u64::from(join.steps) * join.step_bytes) as f64;
        for (mut links, cap) in ring.lanes {
            links.sort_unstable();
            self.solver.add(ctx.now.as_ps(), links, cap, bytes, id);
        }
        self.solver.recompute(ctx.now.as_ps());
        self.plan_tick(ctx);
    }

    /// Finishes what is due: each transfer whose last part ended reaches its receiver, and
    /// later its sender; a ring's end reaches every member.
    pub fn tick(&mut self, model: &SimModel, ctx: &mut Ctx) {
        if ctx.now.as_ps() == self.tick_at {
            self.tick_at = u64::MAX;
        }
        let mut finished = std::mem::take(&mut self.finished);
        self.solver.take_finished(ctx.now.as_ps(), &mut finished);
        for &(t, id) in &finished {
            let Some(tr) = self.transfers[id as usize].as_mut() else {
                continue;
            };
            tr.parts_left -= 1;
            if tr.parts_left > 0 {
                continue;
            }
            let tr = self.transfers[id as usize].take().expect("checked above");
            self.free_transfers.push(id);
            let arrive = t.max(ctx.now.as_ps()) + tr.deliver_ps;
            match tr.done {
                Done::Ring { members } => {
                    for (member, tag) in members {
                        ctx.emit(
                            member,
                            SimTime::from_ps(arrive),
                            super::Body::Message { tag },
                        );
                    }
                }
                Done::Send {
                    queue_pair,
                    flow,
                    tag,
                } => {
                    let (src, dst, _, _) = queue_pair;
                    ctx.emit(dst, SimTime::from_ps(arrive), super::Body::Message { tag });
                    ctx.emit(
                        src,
                        SimTime::from_ps(arrive + tr.ack_ps),
                        super::Body::FlowDone { flow },
                    );
                    // The queue pair's next transfer follows.
                    match self
                        .queue_pairs
                        .get_mut(&queue_pair)
                        .and_then(VecDeque::pop_front)
                    {
                        Some(next) => self.launch(model, next, ctx.now.as_ps()),
                        None => {
                            self.queue_pairs.remove(&queue_pair);
                        }
                    }
                }
            }
        }
        finished.clear();
        self.finished = finished;
        self.solver.recompute(ctx.now.as_ps());
        self.plan_tick(ctx);
    }

    /// Plans a tick at the next finish unless one is planned for then already.
    fn plan_tick(&mut self, ctx: &mut Ctx) {
        if let Some(t) = self.solver.next_finish() {
            let t = t.max(ctx.now.as_ps());
            if t < self.tick_at || self.tick_at < ctx.now.as_ps() {
                self.tick_at = t;
                ctx.emit(ctx.lp, SimTime::from_ps(t), super::Body::FlowTick);
            }
        }
    }

    pub fn stats(&self) -> FlowStats {
        self.solver.stats
    }

    /// Bytes each shared link carried, as port reports (busy: the bytes at line rate).
    pub fn link_reports(&self, model: &SimModel) -> Vec<PortReport> {
        model
            .topology
            .links()
            .enumerate()
            .filter_map(|(l, link)| {
                let bytes = self.solver.link_bytes(l as u32).round() as u64;
                (bytes > 0).then(|| PortReport {
                    link: l as LinkId,
                    bytes,
                    busy_ps: SimTime::from_ps(serialisation_ps(
                        bytes,
                        ps_per_byte(link.bytes_per_s),
                    )),
                    ..PortReport::default()
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: f64 = 1e9;
    const S: u64 = SimTime::PS_PER_SECOND;

    fn rates(s: &FlowSolver<u32>, ids: &[u32]) -> Vec<f64> {
        ids.iter().map(|&i| s.rate(i).unwrap()).collect()
    }

    fn close(a: f64, b: f64) -> bool {
        a == b
            || (a.is_finite()
                && b.is_finite()
                && (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0))
    }

    #[test]
    fn a_flow_listing_a_link_twice_takes_its_rate_there_twice() {
        let mut s = FlowSolver::new([9.0 * GB]);
        let twice = s.add(0, vec![0, 0], f64::INFINITY, GB, 0);
        let once = s.add(0, vec![0], f64::INFINITY, GB, 1);
        s.recompute(0);
        assert!(close(s.rate(twice).unwrap(), 3.0 * GB));
        assert!(close(s.rate(once).unwrap(), 3.0 * GB));
        s.remove_for_test(once);
        s.recompute(0);
        assert!(close(s.rate(twice).unwrap(), 4.5 * GB));
    }

    #[test]
    fn n_flows_on_one_bottleneck_get_a_nth_each() {
        for n in 1..=7u32 {
            let mut s = FlowSolver::new([10.0 * GB, 100.0 * GB]);
            let ids: Vec<u32> = (0..n)
                .map(|i| s.add(0, vec![0, 1], f64::INFINITY, GB, i))
                .collect();
            s.recompute(0);
            for r in rates(&s, &ids) {
                assert!(close(r, 10.0 * GB / f64::from(n)), "{n}: {r}");
            }
        }
    }

    #[test]
    fn a_flow_bottlenecked_elsewhere_leaves_its_share_to_the_others() {
        // Link 0: 10 GB/s, link 1: 4 GB/s. f0 crosses both, f1 only link 0, f2 only link 1.
        // Max-min: link 1 splits 2 + 2, and f1 takes the 8 f0 leaves on link 0 (an equal
        // split of link 0 would give it 5).
        let mut s = FlowSolver::new([10.0 * GB, 4.0 * GB]);
        let f0 = s.add(0, vec![0, 1], f64::INFINITY, GB, 0);
        let f1 = s.add(0, vec![0], f64::INFINITY, GB, 1);
        let f2 = s.add(0, vec![1], f64::INFINITY, GB, 2);
        s.recompute(0);
        let r = rates(&s, &[f0, f1, f2]);
        assert!(
            close(r[0], 2.0 * GB) && close(r[1], 8.0 * GB) && close(r[2], 2.0 * GB),
            "{r:?}"
        );
    }

    #[test]
    fn a_cap_is_a_private_bottleneck() {
        let mut s = FlowSolver::new([10.0 * GB]);
        let a = s.add(0, vec![0], 1.0 * GB, GB, 0);
        let b = s.add(0, vec![0], f64::INFINITY, GB, 1);
        s.recompute(0);
        assert_eq!(rates(&s, &[a, b]), vec![1.0 * GB, 9.0 * GB]);
    }

    #[test]
    fn a_lane_is_bound_by_the_tightest_of_the_links_it_alone_crosses() {
        // A ring lane over 40 links of its own (the 23rd the narrowest, 1.5 GB/s) and one it
        // shares with another flow: the filling keeps only the narrowest private link, and
        // the rates are the global water-filling's, before and after the other flow ends.
        let private: Vec<f64> = (0..40)
            .map(|i| {
                if i == 23 {
                    1.5 * GB
                } else {
                    (3 + i % 5) as f64 * GB
                }
            })
            .collect();
        let capacity: Vec<f64> = private.iter().copied().chain([4.0 * GB]).collect();
        let shared = private.len() as u32;
        let mut s = FlowSolver::new(capacity.iter().copied());
        let lane_links: Vec<u32> = (0..=shared).collect();
        let lane = s.add(0, lane_links.clone(), f64::INFINITY, 1e15, 0);
        let other = s.add(0, vec![shared], f64::INFINITY, 1e15, 1);
        s.recompute(0);
        let want = reference(
            &capacity,
            &[
                (lane_links.clone(), f64::INFINITY),
                (vec![shared], f64::INFINITY),
            ],
        );
        assert_eq!(want, vec![1.5 * GB, 2.5 * GB]);
        assert_eq!(rates(&s, &[lane, other]), want);
        s.remove_for_test(other);
        s.recompute(1);
        assert_eq!(rates(&s, &[lane]), vec![1.5 * GB]);
    }

    #[test]
    fn a_completion_moves_when_a_competitor_ends() {
        // Two flows share 1 GB/s: the 0.5 GB one ends at 1 s; the 1 GB one has 0.5 GB left
        // and takes the whole link: 1.5 s, not the 2 s of a fixed half.
        let mut s = FlowSolver::new([GB]);
        s.add(0, vec![0], f64::INFINITY, GB, 0);
        s.add(0, vec![0], f64::INFINITY, 0.5 * GB, 1);
        s.recompute(0);
        let mut done = Vec::new();
        let t = s.next_finish().unwrap();
        assert_eq!(t, S);
        s.take_finished(t, &mut done);
        s.recompute(t);
        assert_eq!(done, vec![(S, 1)]);
        let t = s.next_finish().unwrap();
        assert!(t.abs_diff(3 * S / 2) <= 1, "{t}");
        done.clear();
        s.take_finished(t, &mut done);
        assert_eq!(done.len(), 1);
        assert_eq!(s.active(), 0);
        assert!(close(s.link_bytes(0), 1.5 * GB), "{}", s.link_bytes(0));
    }

    #[test]
    fn a_late_flow_slows_the_first() {
        // 1 GB at 1 GB/s alone; a second 1 GB flow joins at 0.5 s: both at half, the first
        // ends at 1.5 s and the second, alone again, at 2 s.
        let mut s = FlowSolver::new([GB]);
        s.add(0, vec![0], f64::INFINITY, GB, 0);
        s.recompute(0);
        s.add(S / 2, vec![0], f64::INFINITY, GB, 1);
        s.recompute(S / 2);
        let mut done = Vec::new();
        while let Some(t) = s.next_finish() {
            s.take_finished(t, &mut done);
            s.recompute(t);
        }
        assert_eq!(done.len(), 2);
        assert!(
            done[0].0.abs_diff(3 * S / 2) <= 1 && done[0].1 == 0,
            "{done:?}"
        );
        assert!(done[1].0.abs_diff(2 * S) <= 1 && done[1].1 == 1, "{done:?}");
    }

    /// Global progressive filling from scratch: the reference the incremental solver must
    /// match.
    fn reference(capacity: &[f64], flows: &[(Vec<u32>, f64)]) -> Vec<f64> {
        let mut rate = vec![None::<f64>; flows.len()];
        let mut residual = capacity.to_vec();
        while rate.iter().any(Option::is_none) {
            let unfrozen_on = |l: u32, rate: &[Option<f64>]| {
                flows
                    .iter()
                    .zip(rate)
                    .filter(|((ls, _), x)| x.is_none() && ls.contains(&l))
                    .count()
            };
            let share: Vec<Option<f64>> = (0..residual.len())
                .map(|l| {
                    let n = unfrozen_on(l as u32, &rate);
                    (n > 0).then(|| residual[l].max(0.0) / n as f64)
                })
                .collect();
            let best = share
                .iter()
                .flatten()
                .copied()
                .chain(
                    flows
                        .iter()
                        .zip(&rate)
                        .filter(|(_, x)| x.is_none())
                        .map(|((_, c), _)| *c),
                )
                .fold(f64::INFINITY, f64::min);
            let frozen: Vec<usize> = (0..flows.len())
                .filter(|&i| {
                    rate[i].is_none()
                        && (close(flows[i].1, best)
                            || flows[i]
                                .0
                                .iter()
                                .any(|&l| share[l as usize].is_some_and(|x| close(x, best))))
                })
                .collect();
            for i in frozen {
                rate[i] = Some(best);
                for &l in &flows[i].0 {
                    residual[l as usize] -= best;
                }
            }
        }
        rate.into_iter().map(Option::unwrap).collect()
    }

    #[test]
    fn incremental_rates_equal_global_water_filling() {
        // Random networks of 12 links and random starts and ends; after every change the
        // incremental rates must be the global max-min allocation.
        let mut next = crate::topology::draws_from(7);
        for _ in 0..40 {
            let capacity: Vec<f64> = (0..12).map(|_| (1 + next(8)) as f64 * GB).collect();
            let mut s = FlowSolver::new(capacity.iter().copied());
            let mut live: Vec<(u32, Vec<u32>, f64)> = Vec::new();
            let mut now = 0;
            for step in 0..60u32 {
                now += 1 + next(1000);
                if live.is_empty() || next(3) > 0 {
                    let mut links: Vec<u32> = (0..1 + next(4)).map(|_| next(12) as u32).collect();
                    links.sort_unstable();
                    links.dedup();
                    let cap = if next(4) == 0 {
                        (1 + next(4)) as f64 * 0.5 * GB
                    } else {
                        f64::INFINITY
                    };
                    let id = s.add(now, links.clone(), cap, 1e15, step);
                    live.push((id, links, cap));
                } else {
                    // End a random flow by removing it through an early finish: rebuild the
                    // solver state as the engine would see it after that flow's end.
                    let i = next(live.len() as u64) as usize;
                    let (id, ..) = live.swap_remove(i);
                    s.remove_for_test(id);
                }
                s.recompute(now);
                let flows: Vec<(Vec<u32>, f64)> =
                    live.iter().map(|(_, l, c)| (l.clone(), *c)).collect();
                let want = reference(&capacity, &flows);
                for ((id, ..), w) in live.iter().zip(want.iter().copied()) {
                    let got = s.rate(*id).unwrap();
                    assert!(
                        close(got, w),
                        "flow {id}: {got} against {w}; capacity {capacity:?}, flows {live:?}, want {want:?}"
                    );
                }
            }
        }
    }
}
