//! What LPs report at the end of a run, and the run's results assembled from them.
//!
//! Reports are plain serialisable data: in a distributed run they travel to the coordinator.
//! [`RunResults::assemble`] sorts them by LP id, so the results (and the digest) do not depend
//! on which worker ran which LP.

use serde::{Deserialize, Serialize};

use crate::hash::mix;
use crate::time::SimTime;
use crate::topology::{LinkClass, LinkId, NodeId};

pub use crate::segments::class_index;

pub const CLASSES: [LinkClass; 4] = [
    LinkClass::NvLink,
    LinkClass::Pcie,
    LinkClass::Network,
    LinkClass::Cxl,
];

/// A busy interval: an op on a stream (`name` = op index) or a link transmitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub start: SimTime,
    pub end: SimTime,
    pub name: u32,
}

/// One pipeline stage's busy spans over the iteration, `(start, end)` ps, each list merged
/// where spans touch or overlap: what the report's timeline draws. Kept for one rank per
/// stage of data-parallel replica 0 (tensor and context rank 0), so its size does not grow
/// with the cluster.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The compute stream's kernels.
    pub compute: Vec<(u64, u64)>,
    /// Collectives (and context-parallel ring transfers and CXL reads).
    pub comm: Vec<(u64, u64)>,
    /// Sends to and receives from the neighbour stages: a receive spans its wait.
    pub pipeline: Vec<(u64, u64)>,
}

impl Timeline {
    /// Adds `[start, end)` to `spans` (sorted by start as ops complete), merging it into the
    /// last span when they touch. Ops on several streams complete out of start order, so
    /// a span may start before the last one ends.
    pub fn add(spans: &mut Vec<(u64, u64)>, start: u64, end: u64) {
        match spans.last_mut() {
            Some(last) if start <= last.1 && end >= last.0 => {
                last.0 = last.0.min(start);
                last.1 = last.1.max(end);
            }
            _ => spans.push((start, end)),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PortReport {
    pub link: LinkId,
    pub bytes: u64,
    pub segments: u64,
    pub busy_ps: SimTime,
    pub max_queue_bytes: u64,
    pub pauses: u64,
    pub ecn_marks: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    pub rank: u32,
    pub stage: u32,
    /// When the rank's last op finished; `None` if it never did.
    pub finish_ps: Option<SimTime>,
    pub compute_ps: SimTime,
    pub exposed_comm_ps: SimTime,
    pub bubble_ps: SimTime,
    pub ops_done: u64,
    /// Most live HBM bytes at any time (resident state plus activations in flight).
    pub peak_memory_bytes: u64,
    /// Why the rank did not finish: the op each unfinished stream waits at.
    pub blocked: Option<String>,
    /// What stopped the rank: a routing failure, a collective it cannot run as configured.
    pub error: Option<String>,
}

/// Time of one kind of collective on one rank: count, sum, extremes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CollectiveStats {
    pub count: u64,
    pub total_ps: SimTime,
    pub min_ps: SimTime,
    pub max_ps: SimTime,
    pub group_size: u64,
    /// The plan, as `algorithm/protocol/channels` (NCCL's words).
    pub plan: String,
}

impl CollectiveStats {
    pub fn add(&mut self, ps: SimTime, group_size: u64) {
        self.min_ps = if self.count == 0 {
            ps
        } else {
            self.min_ps.min(ps)
        };
        self.count += 1;
        self.total_ps += ps;
        self.max_ps = self.max_ps.max(ps);
        self.group_size = group_size;
    }

    pub fn merge(&mut self, other: &CollectiveStats) {
        if other.count == 0 {
            return;
        }
        self.min_ps = if self.count == 0 {
            other.min_ps
        } else {
            self.min_ps.min(other.min_ps)
        };
        self.count += other.count;
        self.total_ps += other.total_ps;
        self.max_ps = self.max_ps.max(other.max_ps);
        self.group_size = other.group_size;
        if self.plan.is_empty() {
            self.plan.clone_from(&other.plan);
        }
    }
}

/// (group kind, collective op, bytes) as their discriminants.
pub type CollectiveKey = (u8, u8, u64);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LpReport {
    /// The LP's running hash over its completion times.
    pub digest: u64,
    pub gpu: Option<GpuReport>,
    pub ports: Vec<PortReport>,
    /// Deepest ingress buffer occupancy at this node (PFC accounting).
    pub max_ingress_bytes: u64,
    /// Bytes this GPU sent analytically, per link class crossed.
    pub analytical_bytes: [u64; 4],
    /// The same bytes counted once per link they crossed, per class (link utilisation).
    pub analytical_link_bytes: [u64; 4],
    /// Injected flows that arrived at this GPU: (flow index, time).
    pub flow_arrivals: Vec<(u32, SimTime)>,
    pub collectives: Vec<(CollectiveKey, CollectiveStats)>,
    /// Trace: op spans per stream, busy spans per link.
    pub op_spans: Vec<(u8, Vec<Span>)>,
    pub link_spans: Vec<(LinkId, Vec<Span>)>,
    /// The flow LP's counters (flow mode).
    pub flow: Option<FlowStats>,
    /// When and why a segment found no path left at this node (a link fault).
    pub fabric_failure: Option<(SimTime, String)>,
    /// The stage's timeline, on the one rank per stage that keeps it.
    pub timeline: Option<Box<Timeline>>,
}

/// Every LP's report, in LP id order.
#[derive(Debug, Clone, Default)]
pub struct RunResults {
    pub reports: Vec<(NodeId, LpReport)>,
}

impl RunResults {
    pub fn assemble(mut reports: Vec<(NodeId, LpReport)>) -> Self {
        reports.sort_by_key(|(id, _)| *id);
        RunResults { reports }
    }

    /// Hash over every LP's completion times, 128 bits as hex. Independent of partitioning:
    /// each LP's digest depends only on its own event sequence.
    pub fn digest(&self) -> String {
        let (mut a, mut b) = (0x6a09_e667_f3bc_c908u64, 0xbb67_ae85_84ca_a73bu64);
        for (id, r) in &self.reports {
            a = mix(a, u64::from(*id), r.digest);
            b = mix(b ^ 0x5555, r.digest, u64::from(*id));
        }
        format!("{a:016x}{b:016x}")
    }

    /// The flow model's counters, when it ran.
    pub fn flow_stats(&self) -> Option<FlowStats> {
        self.reports
            .iter()
            .filter_map(|(_, r)| r.flow)
            .reduce(|mut a, b| {
                a.merge(&b);
                a
            })
    }

    pub fn gpus(&self) -> impl Iterator<Item = &GpuReport> {
        self.reports.iter().filter_map(|(_, r)| r.gpu.as_ref())
    }

    /// The iteration time: when the last rank finished. `Err` gives the first rank's error,
    /// the first segment that found no path, or the ranks that never finished.
    pub fn iteration_ps(&self) -> Result<SimTime, Incomplete> {
        if let Some((rank, e)) = self
            .gpus()
            .find_map(|g| g.error.as_ref().map(|e| (g.rank, e)))
        {
            return Err(Incomplete::RankFailed {
                rank,
                error: e.clone(),
            });
        }
        // A segment that found no path leaves its flow, and the ranks waiting on it,
        // unfinished: the first such failure is the cause.
        if let Some((_, e)) = self
            .reports
            .iter()
            .filter_map(|(_, r)| r.fabric_failure.as_ref())
            .min_by_key(|(at, _)| *at)
        {
            return Err(Incomplete::NoPath(e.clone()));
        }
        let mut end = SimTime::ZERO;
        let mut stuck = Vec::new();
        for g in self.gpus() {
            match (g.finish_ps, &g.blocked) {
                (Some(t), _) => end = end.max(t),
                (None, why) => stuck.push(format!(
                    "rank {}: {}",
                    g.rank,
                    why.as_deref().unwrap_or("unknown")
                )),
            }
        }
        if stuck.is_empty() {
            Ok(end)
        } else {
            let ranks = stuck.len();
            stuck.truncate(3);
            Err(Incomplete::Deadlock {
                ranks,
                first: stuck.join(" | "),
            })
        }
    }
}

/// Why a run has no iteration time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incomplete {
    /// A rank stopped: a routing failure, a collective it cannot run as configured.
    #[error("rank {rank}: {error}")]
    RankFailed { rank: u32, error: String },
    /// A segment found no path left (a link fault).
    #[error("{0}")]
    NoPath(String),
    #[error("{ranks} rank(s) never finished (a deadlock in the workload); first: {first}")]
    Deadlock { ranks: usize, first: String },
}

/// What the run reports about the flow model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowStats {
    /// Flows started (a transfer split over queue pairs counts each part).
    pub flows: u64,
    /// Rate recomputations: one per batch of starts or ends at one picosecond.
    pub recomputations: u64,
    /// Flows whose rate was re-solved, summed over recomputations.
    pub flows_touched: u64,
    /// Most flows active at once.
    pub max_active: u64,
}

impl FlowStats {
    pub fn merge(&mut self, other: &FlowStats) {
        self.flows += other.flows;
        self.recomputations += other.recomputations;
        self.flows_touched += other.flows_touched;
        self.max_active = self.max_active.max(other.max_active);
    }
}
