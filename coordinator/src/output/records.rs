//! The aggregate records `fleetsim report` draws (issue 20): `timeline.csv`, one
//! data-parallel replica's stages over the iteration in a fixed number of bins, and
//! `tiers.csv`, link load by fabric tier as a distribution. Both stay the same size
//! whatever the cluster: never one row per rank or per link.

use sim::segments::class_index;
use sim_engine::{RunResults, SimModel};
use sim_ir::time::{SimTime, span_union};
use sim_models::topology::{LinkClass, NodeKind};

use super::table::CsvTable;

/// Bins per stage in `timeline.csv`: finer than a report's timeline is wide in pixels.
pub const TIMELINE_BINS: usize = 400;

/// `timeline.csv`: per pipeline stage of replica 0 (its tensor and context rank 0; of each
/// job with `[[jobs]]`, named in the `job` column), the share
/// of each bin of the iteration its compute stream ran, its collectives ran with no compute
/// beside them (exposed), it sent to or waited for a neighbour stage with neither (pipeline),
/// and nothing ran (idle: the host, the start and the end).
pub fn timeline_csv(
    model: &SimModel,
    job_names: &[&str],
    results: &RunResults,
    iteration_ps: SimTime,
) -> String {
    let mut table = CsvTable::new([
        "job",
        "stage",
        "rank",
        "bin",
        "start_s",
        "end_s",
        "compute",
        "exposed_comm",
        "pipeline",
        "idle",
    ]);
    let end = iteration_ps.as_ps().max(1);
    let width = end as f64 / TIMELINE_BINS as f64;
    let mut stages: Vec<_> = results
        .reports
        .iter()
        .filter_map(|(_, r)| Some((r.gpu.as_ref()?, r.timeline.as_deref()?)))
        .collect();
    let job_of = |rank: u32| {
        model
            .workload
            .jobs
            .as_ref()
            .and_then(|jobs| jobs.job_of(rank))
    };
    stages.sort_by_key(|(g, _)| (job_of(g.rank), g.stage, g.rank));
    for (gpu, timeline) in stages {
        let job = job_of(gpu.rank)
            .and_then(|j| job_names.get(j))
            .map_or(String::new(), |name| name.to_string());
        let compute = span_union(timeline.compute.iter().copied());
        let exposed = minus(&span_union(timeline.comm.iter().copied()), &compute);
        let busy = span_union(compute.iter().chain(&exposed).copied());
        let pipeline = minus(&span_union(timeline.pipeline.iter().copied()), &busy);
        let shares = [&compute, &exposed, &pipeline].map(|spans| binned(spans, width));
        for bin in 0..TIMELINE_BINS {
            let [c, e, p] = shares.each_ref().map(|s| s[bin].clamp(0.0, 1.0));
            table.row([
                job.clone(),
                gpu.stage.to_string(),
                gpu.rank.to_string(),
                bin.to_string(),
                format!("{:.9}", bin as f64 * width * 1e-12),
                format!("{:.9}", (bin + 1) as f64 * width * 1e-12),
                format!("{c:.4}"),
                format!("{e:.4}"),
                format!("{p:.4}"),
                format!("{:.4}", (1.0 - c - e - p).max(0.0)),
            ]);
        }
    }
    table.finish()
}

/// The parts of sorted, disjoint `a` that no span of sorted, disjoint `b` covers.
fn minus(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(start, end) in a {
        let mut at = start;
        while j < b.len() && b[j].1 <= at {
            j += 1;
        }
        let mut k = j;
        while at < end {
            match b.get(k) {
                Some(&(bs, be)) if bs < end => {
                    if bs > at {
                        out.push((at, bs));
                    }
                    at = at.max(be);
                    k += 1;
                }
                _ => {
                    out.push((at, end));
                    at = end;
                }
            }
        }
    }
    out
}

/// The share of each of [`TIMELINE_BINS`] bins of `width` ps that sorted, disjoint `spans`
/// cover.
fn binned(spans: &[(u64, u64)], width: f64) -> Vec<f64> {
    let mut bins = vec![0.0; TIMELINE_BINS];
    for &(start, end) in spans {
        let (s, e) = (start as f64, end as f64);
        let first = ((s / width) as usize).min(TIMELINE_BINS - 1);
        let last = ((e / width) as usize).min(TIMELINE_BINS - 1);
        for (b, share) in bins.iter_mut().enumerate().take(last + 1).skip(first) {
            let (lo, hi) = (b as f64 * width, (b + 1) as f64 * width);
            *share += (e.min(hi) - s.max(lo)).max(0.0) / width;
        }
    }
    bins
}

/// A fabric tier: where a link sits, by the kinds of node it joins.
pub fn tier(class: LinkClass, src: NodeKind, dst: NodeKind) -> &'static str {
    match class {
        LinkClass::NvLink => "nvlink",
        LinkClass::Pcie => "pcie",
        LinkClass::Cxl => "cxl",
        LinkClass::Network => {
            let has = |k: NodeKind| src == k || dst == k;
            if has(NodeKind::Core) {
                "spine-core"
            } else if has(NodeKind::Spine) {
                "leaf-spine"
            } else if has(NodeKind::Leaf) {
                "nic-leaf"
            } else {
                "network"
            }
        }
    }
}

/// What a tier's links carried: each link's utilisation, the bytes, the busiest link
/// (utilisation, id) and the links' class.
#[derive(Default)]
struct TierLoad {
    utils: Vec<f64>,
    bytes: u64,
    busiest: Option<(f64, u32)>,
    class: Option<LinkClass>,
}

/// The order tiers are listed in, host outwards.
pub const TIERS: [&str; 7] = [
    "nvlink",
    "pcie",
    "cxl",
    "nic-leaf",
    "leaf-spine",
    "spine-core",
    "network",
];

/// `tiers.csv`: per fabric tier, its links, the bytes they carried and the distribution of
/// their utilisation over the iteration (bytes over capacity × iteration), with the busiest
/// link. Per link only where the engine saw each link (packet-level and flow-level links);
/// a class it ran in closed form is one row under the class's name with its mean only
/// (`per_link` false).
pub fn tiers_csv(model: &SimModel, results: &RunResults, iteration_ps: SimTime) -> String {
    let topo = &model.topology;
    let t = iteration_ps.as_secs_f64().max(f64::MIN_POSITIVE);
    let nodes = topo.nodes();
    let tier_of = |l: sim_models::topology::Link| {
        tier(
            l.class,
            nodes[l.src as usize].kind,
            nodes[l.dst as usize].kind,
        )
    };
    let mut link_bytes: Vec<u64> = vec![0; topo.link_count()];
    let mut analytical_link_bytes = [0u64; 4];
    for (_, r) in &results.reports {
        for p in &r.ports {
            link_bytes[p.link as usize] += p.bytes;
        }
        for (c, b) in r.analytical_link_bytes.iter().enumerate() {
            analytical_link_bytes[c] += b;
        }
    }
    let mut table = CsvTable::new([
        "tier",
        "links",
        "per_link",
        "bytes",
        "utilisation_mean",
        "utilisation_p50",
        "utilisation_p90",
        "utilisation_p99",
        "utilisation_max",
        "busiest_link",
    ]);
    // One pass over the links: per tier, its links' utilisations, bytes, busiest link and
    // class; per class, its links and capacity (for a class run in closed form).
    let mut tiers: Vec<TierLoad> = TIERS.iter().map(|_| TierLoad::default()).collect();
    let mut classes = [(0usize, 0.0f64); 4];
    for (id, link) in topo.links().enumerate() {
        let c = class_index(link.class);
        classes[c].0 += 1;
        classes[c].1 += link.bytes_per_s;
        let Some(i) = TIERS.iter().position(|&t| t == tier_of(link)) else {
            continue;
        };
        let load = &mut tiers[i];
        let b = link_bytes[id];
        let u = b as f64 / (link.bytes_per_s * t);
        load.class = Some(link.class);
        load.bytes += b;
        if load.busiest.is_none_or(|(most, _)| u > most) {
            load.busiest = Some((u, id as u32));
        }
        load.utils.push(u);
    }
    let mut closed_classes = Vec::new();
    for (tier, load) in TIERS.iter().zip(&mut tiers) {
        let Some(class) = load.class else {
            continue;
        };
        let per_link = model.net.is_queued(class) || model.net.is_shared(class);
        let utils = &mut load.utils;
        let n = utils.len();
        if per_link {
            utils.sort_by(f64::total_cmp);
            let q = |f: f64| utils[((n - 1) as f64 * f).round() as usize];
            let mean = utils.iter().sum::<f64>() / n as f64;
            let (u, id) = load.busiest.unwrap_or((0.0, 0));
            let link = topo.link(id);
            table.row([
                tier.to_string(),
                n.to_string(),
                "true".to_string(),
                load.bytes.to_string(),
                format!("{mean:.6}"),
                format!("{:.6}", q(0.5)),
                format!("{:.6}", q(0.9)),
                format!("{:.6}", q(0.99)),
                format!("{u:.6}"),
                format!(
                    "{} -> {}",
                    topo.node_name(link.src),
                    topo.node_name(link.dst)
                ),
            ]);
        } else if !closed_classes.contains(&class) {
            // Closed form: the engine saw the class, not its links: one row for the class,
            // its bytes per link crossed over all its links' capacity.
            closed_classes.push(class);
            let c = class_index(class);
            let (links, capacity) = classes[c];
            let mean = analytical_link_bytes[c] as f64 / (capacity * t);
            let empty = String::new;
            table.row([
                class.name().to_string(),
                links.to_string(),
                "false".to_string(),
                analytical_link_bytes[c].to_string(),
                format!("{mean:.6}"),
                empty(),
                empty(),
                empty(),
                empty(),
                empty(),
            ]);
        }
    }
    table.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn communication_under_compute_is_not_exposed() {
        let compute = span_union([(0, 10), (20, 30), (5, 12)]);
        assert_eq!(compute, vec![(0, 12), (20, 30)]);
        let comm = span_union([(8, 25), (40, 50)]);
        assert_eq!(minus(&comm, &compute), vec![(12, 20), (40, 50)]);
        let bins = binned(&[(0, 50)], 100.0);
        assert!((bins[0] - 0.5).abs() < 1e-12);
        assert_eq!(bins[1], 0.0);
    }
}
