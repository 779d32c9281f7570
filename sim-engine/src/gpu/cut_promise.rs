//! What a GPU promises a distributed run's cut ([`Cut`]): lower bounds on when its program,
//! its flows, or the op an event belongs to can next send to another partition.

use super::Running;
use super::collective::{GroupInfo, plan_for};
use super::{COMPUTE, GpuLp, STREAMS};
use crate::layout::GroupKind;
use crate::reach::Cut;
use crate::topology::NodeId;
use crate::workload::{CollectiveOp, OpKind};
use crate::{Body, NO_NODE, ProgramIndex, Segment, SimModel};

/// The ops of a GPU's program that may cross the run's cut ([`GpuLp::cut_promise`]).
#[derive(Debug)]
pub(super) struct Crossing {
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

impl GpuLp {
    /// The least delay from what flow slot `flow` sends to another partition of `cut`: its
    /// op's group's reach, or for a send or receive its one peer's; `None` for an empty slot.
    pub(crate) fn flow_reach_ps(&self, cut: &Cut, flow: u32) -> Option<u64> {
        let f = self.flows.get(flow as usize)?.as_ref()?;
        let sender = if f.via == NO_NODE { self.node } else { f.via };
        Some(cut.tag_reach_ps(self.rank, self.node, f.tag, || {
            cut.peer_reach_ps(sender, f.dst)
        }))
    }

    /// The least of [`GpuLp::flow_reach_ps`] over every flow the GPU has: its transport
    /// serves them all, so an event of one flow (an acknowledgement freeing its window, a
    /// port's `TxDone`) may put another's segments on the wire.
    pub(crate) fn flows_reach_ps(&self, cut: &Cut) -> u64 {
        (0..self.flows.len() as u32)
            .filter_map(|f| self.flow_reach_ps(cut, f))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The GPU's output ports, with the segments they hold queued.
    pub fn ports(&self) -> &crate::net::Ports {
        &self.ports
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
    /// ([`Cut::group_reach_ps`], or for a send or receive its peer's): a member
    /// in another partition, or a route through one. A running op sends on only when an
    /// event arrives, and those carry their own promises
    /// ([`Cut::event_promise`]), so the first bound is only for what runs like
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
    pub(crate) fn stream_reach_ps(&self, cut: &Cut, stream: Option<usize>) -> u64 {
        match (&self.crossing, stream) {
            (Some(c), Some(s)) if s < STREAMS => c.stream_least[s],
            (Some(c), _) => c.least,
            (None, _) => cut.gpu_reach_ps(self.rank),
        }
    }

    /// The compute stream at `at`, no sooner than the GPU's last event: the least end of the
    /// kernel running then, and the position of the first kernel not started. A chain runs on
    /// without events, each kernel at the rate the GPU has now (which only an event changes),
    /// so the kernel running at `at` may be further along the chain than the one the state
    /// names. From `at` a collective may end beside it, so its least end is the rest of its
    /// time alone at the fastest rate ([`GpuLp::retime_kernel`]).
    fn compute_at(&self, model: &SimModel, at: u64) -> (Option<u64>, u32) {
        let done = self.done[COMPUTE];
        if !matches!(self.running[COMPUTE], Running::Compute { .. }) {
            return (None, done);
        }
        let ops = &model.programs[self.program as usize].stream_ops[COMPUTE];
        let (mut start, mut left) = (self.kernel_since_ps, self.kernel_left_ps);
        let (mut end, mut next) = (self.kernel_end_ps, done + 1);
        while end < at && next <= self.chain_last {
            (start, left) = (end, self.alone_ps(model, ops[next as usize]));
            end += self.kernel_ps(model, ops[next as usize]);
            next += 1;
        }
        let rate = model.interference.compute_rate;
        let now_rate = if self.kernel_slowed { rate } else { 1.0 };
        // Progress rounded up and the rest at the fastest rate, less a picosecond: never
        // later than the end any event can give it.
        let done_by_at = (at.saturating_sub(start) as f64 * now_rate).ceil() as u64;
        let rest = (left.saturating_sub(done_by_at) as f64 / rate.max(1.0)).floor() as u64;
        let least = (at.max(start) + rest).saturating_sub(1);
        (Some(least.min(end).max(at)), next)
    }

    /// The least time of the compute-stream kernels at positions `[from, to)`: from the
    /// program's running sums ([`crate::ComputePrefix`]), or, where faults stretch kernels one
    /// by one, sliding [`GpuLp::least_compute`] there.
    fn least_compute_ps(&mut self, model: &SimModel, from: u32, to: u32) -> u64 {
        if !model.faults.slows_kernels() {
            return model.compute_prefix[self.kernel_table as usize].least_ps(
                from,
                to,
                self.chip_slowdown,
                model.interference.compute_rate,
            );
        }
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
        let Some(base) = self.chip_kernel_ps(model, op) else {
            return 0;
        };
        let rate = model.interference.compute_rate;
        if rate > 1.0 {
            (base as f64 / rate).floor() as u64
        } else {
            base
        }
    }
}

/// Per collective of a program ([`ProgramIndex::collective_keys`]), the least delay
/// from its start to its first message when its group completes in closed form: a member's
/// arrival reaches the leader no sooner than the collective's duration less the longest
/// link (`Body::Arrived`), and the leader answers no sooner than the duration. 0 where the
/// group is not known yet or not closed.
fn closed_form_least_ps(
    model: &SimModel,
    groups: &[Option<Box<GroupInfo>>],
    index: &ProgramIndex,
) -> Vec<u64> {
    index
        .collective_keys
        .iter()
        .map(|&(kind, cop, bytes)| {
            let kind = GroupKind::from_index(kind);
            let group = kind.and_then(|k| groups[k as usize].as_ref());
            let (Some(kind), Some(g), Some(&cop)) =
                (kind, group, CollectiveOp::ALL.get(usize::from(cop)))
            else {
                return 0;
            };
            if !g.closed || g.ring.n <= 1 {
                return 0;
            }
            plan_for(model, &g.shape, true, (kind, cop), bytes).map_or(0, |plan| {
                plan.time().saturating_sub(model.longest_link).as_ps()
            })
        })
        .collect()
}
