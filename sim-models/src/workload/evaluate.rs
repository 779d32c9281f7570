//! Times one iteration of a workload's pipeline without a network: one representative rank per
//! stage, every group symmetric (all members of a TP, CP, EP or DP group run the same program
//! at the same time), op durations from a caller-supplied cost function.
//!
//! This is the schedule's own timing: with free communication it gives the pipeline bubble
//! (Narayanan et al. SC'21 §2.2: `(pp − 1)/(m·vp)` of the ideal time); with costed
//! communication it is a quick analytical estimate. It also proves a program free of
//! deadlocks: every op must complete. The engine (with a network) is separate.

use super::{Op, OpKind, Peer, Program, Stream, Workload};
use crate::compute::Interference;
use crate::layout::GroupKind;
use crate::time::SimTime;

/// Result of [`evaluate`].
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineTiming {
    /// When the last op of any stage finished.
    pub iteration: SimTime,
    /// Busy time of each stage's compute stream.
    pub compute: Vec<SimTime>,
    /// When each stage finished.
    pub finish: Vec<SimTime>,
}

impl PipelineTiming {
    /// Idle time of the busiest stage's compute stream over its busy time: the pipeline
    /// bubble in the no-communication limit.
    pub fn bubble_fraction(&self) -> f64 {
        let busy = self.compute.iter().copied().max().unwrap_or(SimTime::ZERO);
        if busy == SimTime::ZERO {
            return 0.0;
        }
        (self.iteration - busy).as_ps() as f64 / busy.as_ps() as f64
    }
}

struct StageState<'a> {
    program: &'a Program,
    /// Op indices of each stream, in order.
    lanes: Vec<Vec<u32>>,
    /// Next op to resolve on each stream.
    cursor: Vec<usize>,
    finish: Vec<Option<u64>>,
    /// Position of each op among the ops of its match key (for cross-stage pairing).
    ordinal: Vec<u32>,
}

impl<'a> StageState<'a> {
    fn new(program: &'a Program) -> Self {
        let mut lanes = vec![Vec::new(); Stream::COUNT];
        let mut ordinal = vec![0; program.ops.len()];
        let mut counts = std::collections::BTreeMap::<(usize, Option<GroupKind>), u32>::new();
        for (i, op) in program.ops.iter().enumerate() {
            lanes[op.stream.index()].push(i as u32);
            let key = (op.stream.index(), group_of(op));
            let c = counts.entry(key).or_insert(0);
            ordinal[i] = *c;
            *c += 1;
        }
        StageState {
            program,
            lanes,
            cursor: vec![0; Stream::COUNT],
            finish: vec![None; program.ops.len()],
            ordinal,
        }
    }

    /// When `op` may start on this rank, if everything it waits for is done.
    fn ready(&self, op: u32) -> Option<u64> {
        let o = &self.program.ops[op as usize];
        let lane = &self.lanes[o.stream.index()];
        let pos = self.cursor[o.stream.index()];
        let mut t = if pos > 0 {
            self.finish[lane[pos - 1] as usize]?
        } else {
            0
        };
        for &d in self.program.deps(op as usize) {
            t = t.max(self.finish[d as usize]?);
        }
        Some(t)
    }

    fn head(&self, stream: Stream) -> Option<u32> {
        self.lanes[stream.index()]
            .get(self.cursor[stream.index()])
            .copied()
    }

    fn complete(&mut self, op: u32, at: u64) {
        let s = self.program.ops[op as usize].stream.index();
        self.finish[op as usize] = Some(at);
        self.cursor[s] += 1;
    }
}

fn group_of(op: &Op) -> Option<GroupKind> {
    match op.kind {
        OpKind::Collective { group, .. } => Some(group),
        _ => None,
    }
}

/// Stages taking part in a collective of `group` that spans pipeline stages.
fn stages_of(group: GroupKind, pp: u32) -> Option<Vec<u32>> {
    match group {
        GroupKind::Pp | GroupKind::ModelParallel => Some((0..pp).collect()),
        GroupKind::Embedding => Some(if pp > 1 { vec![0, pp - 1] } else { vec![0] }),
        _ => None,
    }
}

/// The programs cannot complete: `stage` waits forever at op `index` of `stream`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stage {stage} is stuck at op {index} ({op:?}) on stream {}", .stream.name())]
pub struct Deadlock {
    pub stage: u32,
    pub index: u32,
    pub op: Op,
    pub stream: Stream,
}

/// Times replica class `class` of `workload`. `cost` gives an op's duration (for a send,
/// the transfer). Fails, naming the first stuck op, when the programs deadlock.
pub fn evaluate(
    workload: &Workload,
    class: usize,
    cost: &dyn Fn(&Program, &Op) -> SimTime,
) -> Result<PipelineTiming, Deadlock> {
    run(workload, class, &|p, i| cost(p, &p.ops[i as usize]).as_ps()).map(|(timing, _)| timing)
}

/// Every op's finish time (ps), per stage; `None` for ops that never ran.
type OpFinishes = Vec<Vec<Option<u64>>>;

/// Op duration by op index: what the evaluation itself uses.
type IndexCost<'a> = dyn Fn(&Program, u32) -> u64 + 'a;

/// [`evaluate`] with compute–communication interference: a first pass finds, on every
/// stage, how long each compute op ran beside communication ops (collectives, sends and
/// receives: all NCCL kernels) and vice versa; the second pass stretches each op by
/// [`Interference`]'s delay for that overlap. One pass of the fixed point, deterministic;
/// the engine applies the rates exactly as kernels start and stop.
pub fn evaluate_with_interference(
    workload: &Workload,
    class: usize,
    cost: &dyn Fn(&Program, &Op) -> SimTime,
    interference: &Interference,
) -> Result<PipelineTiming, Deadlock> {
    let cost = |p: &Program, op: &Op| cost(p, op).as_ps();
    let (_, finish) = run(workload, class, &|p, i| cost(p, &p.ops[i as usize]))?;
    let delays: Vec<Vec<u64>> = finish
        .iter()
        .enumerate()
        .map(|(s, fin)| {
            let program = workload.program(class, s as u32);
            let interval = |i: usize| {
                let end = fin[i].unwrap_or(0);
                (end - cost(program, &program.ops[i]).min(end), end)
            };
            let is_compute = |i: usize| matches!(program.ops[i].kind, OpKind::Compute { .. });
            let union = |compute: bool| {
                crate::time::span_union(
                    (0..program.ops.len())
                        .filter(|&i| is_compute(i) == compute)
                        .map(interval),
                )
            };
            let (compute, comm) = (union(true), union(false));
            (0..program.ops.len())
                .map(|i| {
                    let (a, b) = interval(i);
                    if is_compute(i) {
                        interference.compute_delay(SimTime::from_ps(overlap(&comm, a, b)))
                    } else {
                        interference.comm_delay(SimTime::from_ps(overlap(&compute, a, b)))
                    }
                    .as_ps()
                })
                .collect()
        })
        .collect();
    let stretched =
        |p: &Program, i: u32| cost(p, &p.ops[i as usize]) + delays[p.stage as usize][i as usize];
    run(workload, class, &stretched).map(|(timing, _)| timing)
}

/// Length of `[a, b)` covered by the disjoint sorted `union`.
fn overlap(union: &[(u64, u64)], a: u64, b: u64) -> u64 {
    let first = union.partition_point(|&(_, end)| end <= a);
    union[first..]
        .iter()
        .take_while(|&&(start, _)| start < b)
        .map(|&(start, end)| end.min(b).saturating_sub(start.max(a)))
        .sum()
}

/// The evaluation itself: the timing and every op's finish time per stage.
fn run(
    workload: &Workload,
    class: usize,
    cost: &IndexCost,
) -> Result<(PipelineTiming, OpFinishes), Deadlock> {
    let pp = workload.layout.pp;
    let mut stages: Vec<StageState> = (0..pp)
        .map(|s| StageState::new(workload.program(class, s)))
        .collect();
    loop {
        let mut progressed = false;
        for s in 0..pp as usize {
            for stream in Stream::ALL {
                while let Some(op) = stages[s].head(stream) {
                    if !resolve(&mut stages, s, op, pp, cost) {
                        break;
                    }
                    progressed = true;
                }
            }
        }
        if !progressed {
            break;
        }
    }
    for (s, st) in stages.iter().enumerate() {
        if let Some((stream, op)) = Stream::ALL
            .iter()
            .find_map(|&x| st.head(x).map(|op| (x, op)))
        {
            return Err(Deadlock {
                stage: s as u32,
                index: op,
                op: st.program.ops[op as usize],
                stream,
            });
        }
    }
    let finish: Vec<SimTime> = stages
        .iter()
        .map(|st| SimTime::from_ps(st.finish.iter().flatten().copied().max().unwrap_or(0)))
        .collect();
    let compute = stages
        .iter()
        .map(|st| {
            st.program
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.stream == Stream::Compute)
                .map(|(i, _)| cost(st.program, i as u32))
                .sum::<u64>()
        })
        .map(SimTime::from_ps)
        .collect();
    let timing = PipelineTiming {
        iteration: finish.iter().copied().max().unwrap_or(SimTime::ZERO),
        compute,
        finish,
    };
    Ok((timing, stages.into_iter().map(|st| st.finish).collect()))
}

/// Tries to complete `op`, the head of its stream on stage `s`.
fn resolve(stages: &mut [StageState], s: usize, op: u32, pp: u32, cost: &IndexCost) -> bool {
    let Some(ready) = stages[s].ready(op) else {
        return false;
    };
    let o = stages[s].program.ops[op as usize];
    let duration = cost(stages[s].program, op);
    match o.kind {
        OpKind::Compute { .. } | OpKind::MemoryRead { .. } => {
            stages[s].complete(op, ready + duration);
            true
        }
        OpKind::Collective { group, .. } => match stages_of(group, pp) {
            None => {
                stages[s].complete(op, ready + duration);
                true
            }
            Some(members) => {
                // Every member stage must have this collective at the head of its stream.
                let k = stages[s].ordinal[op as usize];
                let mut start = ready;
                let mut heads = Vec::new();
                for &m in &members {
                    let st = &stages[m as usize];
                    let Some(h) = st.head(o.stream) else {
                        return false;
                    };
                    let ho = &st.program.ops[h as usize];
                    if group_of(ho) != Some(group) || st.ordinal[h as usize] != k {
                        return false;
                    }
                    let Some(r) = st.ready(h) else {
                        return false;
                    };
                    start = start.max(r);
                    heads.push((m as usize, h));
                }
                for (m, h) in heads {
                    stages[m].complete(h, start + duration);
                }
                true
            }
        },
        OpKind::Send { peer, .. } | OpKind::Recv { peer, .. } => {
            let send = matches!(o.kind, OpKind::Send { .. });
            let (other, mirror) = match (peer, send) {
                (Peer::PpNext, true) => ((s + 1) % pp as usize, Stream::RecvPrev),
                (Peer::PpPrev, false) => ((s + pp as usize - 1) % pp as usize, Stream::SendNext),
                (Peer::PpPrev, true) => ((s + pp as usize - 1) % pp as usize, Stream::RecvNext),
                (Peer::PpNext, false) => ((s + 1) % pp as usize, Stream::SendPrev),
                // CP ring: symmetric ranks, my neighbour's send mirrors mine.
                (Peer::CpNext, _) | (Peer::CpPrev, _) => (s, Stream::CpRecvPrev),
            };
            if matches!(peer, Peer::CpNext | Peer::CpPrev) {
                if !send {
                    // Completed together with the send it pairs with.
                    return false;
                }
                let Some(r) = stages[s].head(mirror) else {
                    return false;
                };
                let Some(rr) = stages[s].ready(r) else {
                    return false;
                };
                let at = ready.max(rr) + duration;
                stages[s].complete(op, at);
                stages[s].complete(r, at);
                return true;
            }
            let Some(h) = stages[other].head(mirror) else {
                return false;
            };
            let Some(r) = stages[other].ready(h) else {
                return false;
            };
            let start = ready.max(r);
            let d = if send {
                duration
            } else {
                cost(stages[other].program, h)
            };
            stages[s].complete(op, start + d);
            stages[other].complete(h, start + d);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::overlap;
    use crate::time::span_union;

    #[test]
    fn interval_union_and_overlap() {
        let u = span_union([(5, 8), (0, 2), (1, 3), (7, 10), (4, 4)]);
        assert_eq!(u, [(0, 3), (5, 10)]);
        assert_eq!(overlap(&u, 2, 6), 2);
        assert_eq!(overlap(&u, 3, 5), 0);
        assert_eq!(overlap(&u, 0, 100), 8);
        assert_eq!(overlap(&[], 0, 100), 0);
    }
}
