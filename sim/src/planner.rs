//! The heterogeneity-aware computation planner (`engine.planner = "hetero"`, `fleetsim plan`).
//!
//! HeteroSim (Yue et al., WWW 2026) plans work "by GPU performance, topology bandwidth and
//! memory"; its paper leaves the rules out, so the balancing follows Metis (Um et al., ATC'24,
//! `model/load_balancer.py`): layers go to pipeline stages in proportion to each stage's
//! measured speed, the batch to data-parallel groups in proportion to 1 / (their time per
//! sample), and a stage that would run out of memory gets fewer layers. Three placements are
//! searched for every TP / PP / VP / micro-batch candidate:
//! - **naive**: the experiment as written (rank order, even layers, equal micro-batches);
//! - **stages**: pipeline stages outermost in rank order (`tp-cp-ep-dp-pp`), so each stage
//!   sits on one stretch of hosts; stage layer counts ∝ the speed of the stage's slowest GPU
//!   *for the compiled kernels* (the compute model's times, not peak FLOPS), within HBM;
//! - **replicas**: data-parallel replicas outermost (`tp-cp-ep-pp-dp`), so each replica sits
//!   on one stretch; replica micro-batch counts ∝ the speed of the replica's slowest GPU.
//!   Each replica scales its loss by its share of the global batch (samples / global batch
//!   instead of 1 / DP), so the summed all-reduce is exactly the global-batch mean gradient:
//!   the all-reduce is unchanged in size and time.
//!
//! Tensor-parallel groups never span device types: a candidate whose TP group would is
//! dropped. Candidates are ranked by [`estimate`], a one-rank-per-stage pipeline evaluation
//! ([`crate::workload::evaluate`]) with kernel times on each stage's GPU and an α-β cost for
//! communication; the caller confirms the best ones with the full engine.

use crate::collective::bus_factor;
use crate::compute::ComputeModel;
use crate::config::{ConfigError, Origin, Overrides};
use crate::experiment::Experiment;
use crate::layout::GroupKind;
use crate::memory;
use crate::model::ModelSpec;
use crate::time::SimTime;
use crate::workload::{NO_LAYER, OpKind, Program, compile, evaluate::evaluate};

/// Rank order that puts pipeline stages outermost (Megatron-LM's default).
pub const STAGES_ORDER: &str = "tp-cp-ep-dp-pp";
/// Rank order that puts data-parallel replicas outermost.
pub const REPLICAS_ORDER: &str = "tp-cp-ep-pp-dp";

/// How a candidate places work on the device types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Placement {
    Naive,
    Stages,
    Replicas,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Naive => "naive",
            Placement::Stages => "stages",
            Placement::Replicas => "replicas",
        }
    }
}

/// One plan: a parallel layout, where it runs and how work is split.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub placement: Placement,
    pub tp: u32,
    pub pp: u32,
    pub vp: u32,
    pub micro_batch: u32,
    pub order: String,
    /// Layers per pipeline stage.
    pub stage_layers: Vec<u32>,
    /// Micro-batches per data-parallel replica.
    pub replica_micro_batches: Vec<u32>,
}

impl Candidate {
    /// The overrides that turn the base experiment (of `world` GPUs, CP `cp`) into this plan.
    pub fn overrides(&self, world: u32, cp: u32) -> Overrides {
        let origin = Origin::Derived(format!("plan candidate {}", self.describe()));
        let mut o = Overrides::none();
        o.set("parallel.tp", self.tp, &origin)
            .set("parallel.pp", self.pp, &origin)
            .set("parallel.dp", world / (self.tp * self.pp * cp), &origin)
            .set("parallel.vp", self.vp, &origin)
            .set("parallel.micro_batch", self.micro_batch, &origin)
            .set("parallel.order", self.order.as_str(), &origin);
        if !self.stage_layers.is_empty() {
            o.set("parallel.stage_layers", self.stage_layers.clone(), &origin);
        }
        if !self.replica_micro_batches.is_empty() {
            o.set(
                "parallel.replica_micro_batches",
                self.replica_micro_batches.clone(),
                &origin,
            );
        }
        o
    }

    /// One line: layout, placement and the splits.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} TP{} PP{} VP{} MBS{}",
            self.placement.name(),
            self.tp,
            self.pp,
            self.vp,
            self.micro_batch
        );
        if !self.stage_layers.is_empty() {
            s.push_str(&format!(" layers {:?}", self.stage_layers));
        }
        if !self.replica_micro_batches.is_empty() {
            s.push_str(&format!(" micro-batches {:?}", self.replica_micro_batches));
        }
        s
    }
}

/// A candidate and its estimated iteration time.
#[derive(Debug, Clone)]
pub struct Estimated {
    pub candidate: Candidate,
    /// The experiment exactly as written (the naive placement the plan is compared with).
    pub as_written: bool,
    pub experiment: Experiment,
    pub estimate_s: f64,
}

/// Searches the candidates of `base` and returns the feasible ones, fastest estimate first
/// (the naive plan of the experiment as written is always first among equals and always
/// present when it is feasible). `load` turns a candidate's overrides into an experiment on
/// the base's file, with the user's own overrides applied first.
pub fn search(
    base: &Experiment,
    compute: &ComputeModel,
    load: &dyn Fn(&Overrides) -> Result<Experiment, ConfigError>,
) -> Result<Vec<Estimated>, ConfigError> {
    let model = base.model("the planner (`fleetsim plan`)")?;
    let world = base.layout.world();
    let cp = base.layout.cp;
    let mut out = Vec::new();
    let naive = Candidate {
        placement: Placement::Naive,
        tp: base.layout.tp,
        pp: base.layout.pp,
        vp: base.layout.vp,
        micro_batch: base.micro_batch as u32,
        order: base.loaded.config.parallel.order.clone(),
        stage_layers: Vec::new(),
        replica_micro_batches: Vec::new(),
    };
    out.push(Estimated {
        estimate_s: estimate(base, compute)?,
        candidate: naive,
        as_written: true,
        experiment: base.clone(),
    });
    for (tp, pp, vp, mbs) in layouts(base, model) {
        for placement in [Placement::Naive, Placement::Stages, Placement::Replicas] {
            let uniform = Candidate {
                placement,
                tp,
                pp,
                vp,
                micro_batch: mbs,
                order: match placement {
                    Placement::Naive => base.loaded.config.parallel.order.clone(),
                    Placement::Stages => STAGES_ORDER.to_string(),
                    Placement::Replicas => REPLICAS_ORDER.to_string(),
                },
                stage_layers: Vec::new(),
                replica_micro_batches: Vec::new(),
            };
            // Memory is checked on the balanced plan, not the uniform one.
            let mut unchecked = uniform.overrides(world, cp);
            unchecked.set(
                "training.memory_check",
                "off",
                &Origin::Derived("the planner's uniform layout".into()),
            );
            let Ok(plain) = load(&unchecked) else {
                continue;
            };
            if tp_spans_types(&plain) {
                continue;
            }
            let candidate = match placement {
                Placement::Naive => {
                    if (tp, pp, vp, mbs)
                        == (
                            base.layout.tp,
                            base.layout.pp,
                            base.layout.vp,
                            base.micro_batch as u32,
                        )
                    {
                        continue; // the experiment as written, already in
                    }
                    uniform
                }
                Placement::Stages => {
                    let Some(layers) = balance_layers(&plain, compute) else {
                        continue;
                    };
                    Candidate {
                        stage_layers: layers,
                        ..uniform
                    }
                }
                Placement::Replicas => {
                    let Some(m) = balance_micro_batches(&plain, compute) else {
                        continue;
                    };
                    Candidate {
                        replica_micro_batches: m,
                        ..uniform
                    }
                }
            };
            // Skip splits that came out uniform: the naive candidate of this layout covers them.
            if placement != Placement::Naive
                && candidate.stage_layers.windows(2).all(|w| w[0] == w[1])
                && candidate
                    .replica_micro_batches
                    .windows(2)
                    .all(|w| w[0] == w[1])
            {
                continue;
            }
            let Ok(exp) = load(&candidate.overrides(world, cp)) else {
                continue;
            };
            out.push(Estimated {
                estimate_s: estimate(&exp, compute)?,
                candidate,
                as_written: false,
                experiment: exp,
            });
        }
    }
    // Stable: the experiment as written stays ahead of an equal estimate.
    out.sort_by(|a, b| a.estimate_s.total_cmp(&b.estimate_s));
    Ok(out)
}

/// TP / PP / VP / micro-batch combinations to try: TP within the NVLink domain and dividing
/// the model, PP up to 16 dividing the GPUs, VP 1 or the experiment's, micro-batch 1, 2, 4 and
/// the experiment's.
fn layouts(base: &Experiment, m: &ModelSpec) -> Vec<(u32, u32, u32, u32)> {
    let c = &base.loaded.config.cluster;
    let domain = c.nvlink_domain_gpus().max(1);
    let world = base.layout.world() / base.layout.cp;
    let divides = |n: u64, d: u32| n.is_multiple_of(u64::from(d));
    let tps: Vec<u32> = (0..8)
        .map(|k| 1u32 << k)
        .filter(|&t| {
            t <= domain
                && world.is_multiple_of(t)
                && divides(m.heads, t)
                && divides(m.kv_heads, t)
                && divides(m.ffn_hidden, t)
        })
        .collect();
    let mut vps = vec![1, base.layout.vp];
    vps.dedup();
    let mut mbss = vec![1, 2, 4, base.micro_batch as u32];
    mbss.sort_unstable();
    mbss.dedup();
    let mut out = Vec::new();
    for &tp in &tps {
        for pp in (1..=16u32).filter(|p| (world / tp).is_multiple_of(*p)) {
            if u64::from(pp) > m.layers {
                continue;
            }
            for &vp in &vps {
                if vp > 1 && pp < 2 {
                    continue;
                }
                for &mbs in &mbss {
                    let dp = u64::from(world / tp / pp);
                    if !base.global_batch.is_multiple_of(u64::from(mbs) * dp) {
                        continue;
                    }
                    out.push((tp, pp, vp, mbs));
                }
            }
        }
    }
    out
}

/// Whether any TP group of `exp` holds GPUs of two types.
pub fn tp_spans_types(exp: &Experiment) -> bool {
    let l = &exp.layout;
    let types = rank_types(exp);
    (0..l.group_count(GroupKind::Tp)).any(|g| {
        let members = l.nth_group(GroupKind::Tp, g);
        members
            .iter()
            .any(|&r| types[r as usize] != types[members[0] as usize])
    })
}

fn rank_types(exp: &Experiment) -> Vec<u16> {
    (0..exp.layout.world())
        .map(|r| exp.gpu_type_of_rank(r))
        .collect()
}

/// The slowest GPU type (the one with the most `per_type_time`) among `ranks`.
fn slowest(types: &[u16], ranks: impl Iterator<Item = u32>, per_type_time: &[u64]) -> usize {
    let mut worst = None::<usize>;
    for r in ranks {
        let t = usize::from(types[r as usize]);
        if worst.is_none_or(|w| per_type_time[t] > per_type_time[w]) {
            worst = Some(t);
        }
    }
    worst.unwrap_or(0)
}

/// Compute time of `program` on every GPU type, ps: (transformer layers, the rest).
fn program_split(program: &Program, exp: &Experiment, compute: &ComputeModel) -> Vec<(u64, u64)> {
    exp.gpu_types
        .iter()
        .map(|g| {
            let times = compute.program_times(program, g);
            let mut split = (0u64, 0u64);
            for op in &program.ops {
                if let OpKind::Compute { kernel } = op.kind {
                    let t = times[kernel as usize];
                    if op.label.layer == NO_LAYER {
                        split.1 += t.as_ps();
                    } else {
                        split.0 += t.as_ps();
                    }
                }
            }
            split
        })
        .collect()
}

/// Layers per stage for `exp` (uniform, stages outermost) so that the slowest stage is as fast
/// as it can be: stage time = layers × that stage's per-layer time on its slowest GPU + the
/// stage's other work (embedding, logits, loss, optimizer), each stage within the HBM of its
/// smallest GPU (less what lives in CXL memory, as the experiment's own check counts it).
/// A min-max split by dynamic programming over stages; `None` when no split fits.
pub fn balance_layers(exp: &Experiment, compute: &ComputeModel) -> Option<Vec<u32>> {
    let l = &exp.layout;
    let pp = l.pp as usize;
    if pp < 2 {
        return None;
    }
    let model = exp.model.as_ref()?;
    let workload = compile(exp).ok()?;
    let types = rank_types(exp);
    let vp = u64::from(l.vp);
    let total = model.layers;
    // Per stage: (per-layer ps, other ps, HBM bytes) on its slowest GPU.
    let mut stage_cost = Vec::with_capacity(pp);
    for s in 0..l.pp {
        let program = workload.program(0, s);
        let split = program_split(program, exp, compute);
        let per_layer: Vec<u64> = split
            .iter()
            .map(|(layers, _)| layers / exp.stage_layers[s as usize].max(1))
            .collect();
        let ranks = (0..l.world()).filter(|&r| l.coords(r).pp == s);
        let t = slowest(&types, ranks, &per_layer);
        let hbm = exp.stage_hbm[s as usize];
        stage_cost.push((per_layer[t], split[t].1, hbm));
    }
    let inputs = exp.memory_inputs();
    let fits = |s: usize, layers: u64| {
        // Stage s holding `layers` transformer layers (MTP modules are not moved by the split).
        let chunks = memory::split_chunks(l.vp, &vec![layers; pp], 0);
        let m = memory::stage_memory(model, l, &chunks, &inputs, s as u32);
        m.in_hbm(&exp.cxl_tensors) <= stage_cost[s].2
    };
    let time = |s: usize, layers: u64| layers * stage_cost[s].0 + stage_cost[s].1;
    // best[s][n]: the smallest bottleneck of stages s.. holding n layers (in units of vp).
    let units = (total / vp) as usize;
    let mut best = vec![vec![u64::MAX; units + 1]; pp + 1];
    let mut choice = vec![vec![0usize; units + 1]; pp + 1];
    best[pp][0] = 0;
    for s in (0..pp).rev() {
        for n in 1..=units {
            for k in 1..=n {
                let rest = best[s + 1][n - k];
                if rest == u64::MAX {
                    continue;
                }
                let layers = k as u64 * vp;
                if !fits(s, layers) {
                    break; // more layers need more memory
                }
                let b = time(s, layers).max(rest);
                if b < best[s][n] {
                    best[s][n] = b;
                    choice[s][n] = k;
                }
            }
        }
    }
    if best[0][units] == u64::MAX {
        return None;
    }
    let mut n = units;
    let mut layers = Vec::with_capacity(pp);
    for stage_choice in choice.iter().take(pp) {
        let k = stage_choice[n];
        layers.push((k as u64 * vp) as u32);
        n -= k;
    }
    Some(layers)
}

/// Micro-batches per replica for `exp` (uniform, replicas outermost): each replica's time is
/// (micro-batches + PP − 1) × its time per micro-batch on its slowest GPU (1F1B); micro-batches
/// go one at a time (PP at a time when interleaved) to the replica that would finish first.
/// Every replica keeps at least one step. `None` with a single replica.
pub fn balance_micro_batches(exp: &Experiment, compute: &ComputeModel) -> Option<Vec<u32>> {
    let l = &exp.layout;
    if l.dp < 2 {
        return None;
    }
    let workload = compile(exp).ok()?;
    let types = rank_types(exp);
    let m = exp.micro_batches.max(1);
    // Per-micro-batch time of each type: the slowest stage's compute over m micro-batches.
    let mut per_type = vec![0u64; exp.gpu_types.len()];
    for s in 0..l.pp {
        let split = program_split(workload.program(0, s), exp, compute);
        for (t, (a, b)) in split.iter().enumerate() {
            per_type[t] = per_type[t].max((a + b) / m);
        }
    }
    let step = if l.vp > 1 { u64::from(l.pp) } else { 1 };
    let total = exp.global_batch / exp.micro_batch;
    let replica_time: Vec<u64> = (0..l.dp)
        .map(|d| {
            let ranks = (0..l.world()).filter(|&r| l.coords(r).dp == d);
            per_type[slowest(&types, ranks, &per_type)]
        })
        .collect();
    let mut counts = vec![step; l.dp as usize];
    let mut left = total.checked_sub(step * u64::from(l.dp))?;
    let finish = |d: usize, n: u64| (n + u64::from(l.pp) - 1) * replica_time[d];
    while left >= step {
        let d = (0..counts.len())
            .min_by_key(|&d| (finish(d, counts[d] + step), d))
            .unwrap_or(0);
        counts[d] += step;
        left -= step;
    }
    if left != 0 {
        return None;
    }
    Some(counts.into_iter().map(|c| c as u32).collect())
}

/// Estimated iteration time of `exp`, seconds: every replica class's pipeline timed with one
/// rank per stage ([`evaluate`]), kernels on the slowest GPU of the class's stage, and an α-β
/// cost for communication: a collective moves bytes × NCCL's bus factor at the member's
/// scale-up rate inside a host, else at its share of the host's NICs, plus 10 µs; a pipeline
/// transfer moves its bytes the same way, plus 5 µs; a CXL transfer moves its bytes at the
/// GPU's share of its memory node, plus 1 µs.
pub fn estimate(exp: &Experiment, compute: &ComputeModel) -> Result<f64, ConfigError> {
    let workload = compile(exp)?;
    let l = &workload.layout;
    let c = &exp.loaded.config.cluster;
    let gph = c.gpus_per_host;
    let types = rank_types(exp);
    let nics = f64::from(c.nics_per_host.unwrap_or(gph));
    let nic_share = c.nic_gbps * 1e9 / 8.0 * nics / f64::from(gph);
    // A GPU's share of its CXL memory node, all GPUs under the switch reading at once.
    let cxl_rate = c.cxl.as_ref().map_or(f64::INFINITY, |x| {
        let sharers =
            f64::from(x.hosts_per_switch * gph) / f64::from(x.memory_nodes_per_switch.max(1));
        (x.link_gb_s * 1e9).min(x.memory_node_gb_s * 1e9 / sharers.max(1.0))
    });
    // A group's rate: the scale-up link when every member shares the first one's host, else
    // the GPU's NIC share.
    let group_rate = |kind: GroupKind, rank: u32, scale_up: f64| {
        let host = rank / gph;
        if l.group(kind, rank).iter().all(|&m| m / gph == host) {
            scale_up
        } else {
            nic_share
        }
    };
    let mut worst = SimTime::ZERO;
    for class in 0..workload.classes() {
        let class_ranks: Vec<u32> = (0..l.world())
            .filter(|&r| usize::from(workload.replica_class[l.coords(r).dp as usize]) == class)
            .collect();
        let mut times = Vec::with_capacity(l.pp as usize);
        // Per stage, the rate of each group kind (index: `GroupKind as usize`).
        let mut rates: Vec<Vec<f64>> = Vec::with_capacity(l.pp as usize);
        for s in 0..l.pp {
            let program = workload.program(class, s);
            let stage_ranks: Vec<u32> = class_ranks
                .iter()
                .copied()
                .filter(|&r| l.coords(r).pp == s)
                .collect();
            let mut per_type: Vec<Vec<SimTime>> = exp
                .gpu_types
                .iter()
                .map(|g| compute.program_times(program, g))
                .collect();
            let totals: Vec<u64> = per_type
                .iter()
                .map(|t| t.iter().map(|k| k.as_ps()).sum())
                .collect();
            let slow = slowest(&types, stage_ranks.iter().copied(), &totals);
            let gpu = &exp.gpu_types[slow];
            times.push(per_type.swap_remove(slow));
            let scale_up = gpu.nvlink_bytes_per_s().max(gpu.pcie.bytes_per_s());
            let rank = stage_ranks.first().copied().unwrap_or(0);
            rates.push(
                (0u8..)
                    .map_while(GroupKind::from_index)
                    .map(|kind| group_rate(kind, rank, scale_up))
                    .collect(),
            );
        }
        let timing = evaluate(&workload, class, &|p, op| {
            let rate = |kind: GroupKind| rates[p.stage as usize][kind as usize];
            match op.kind {
                OpKind::Compute { kernel } => times[p.stage as usize][kernel as usize],
                OpKind::Collective { op, group, bytes } => {
                    let n = l.group_size(group);
                    if n <= 1 {
                        return SimTime::ZERO;
                    }
                    let s = bytes as f64 * bus_factor(op, n) / rate(group) + 10e-6;
                    SimTime::from_secs_f64(s)
                }
                OpKind::Send { bytes, .. } => {
                    SimTime::from_secs_f64(bytes as f64 / rate(GroupKind::Pp) + 5e-6)
                }
                OpKind::Recv { .. } => SimTime::ZERO,
                OpKind::MemoryRead { bytes } => {
                    SimTime::from_secs_f64(bytes as f64 / cxl_rate + 1e-6)
                }
            }
        })
        .map_err(|e| {
            exp.loaded.error(
                "parallel",
                format!("the plan's schedule does not complete: {e}"),
            )
        })?;
        worst = worst.max(timing.iteration);
    }
    Ok(worst.as_secs_f64())
}
