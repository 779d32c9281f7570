//! The output directory of a run (SPEC.md, "Output directory"): summary.json, ranks.csv,
//! collectives.csv, links.csv and, with `--trace`, trace.json.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use sim::experiment::Experiment;
use sim::workload::summary::{summarize, total_model_flops};
use sim::workload::{CollectiveOp, OpKind, Stream};
use sim_engine::results::{CLASSES, class_index};
use sim_engine::{RunResults, SimModel};
use sim_ir::layout::GroupKind;
use sim_ir::time::SimTime;

use crate::embedded::EngineStats;
use crate::outcome::{EngineInfo, RunOutput};
use crate::output::summary::{
    Breakdown, EngineSummary, FlowSummary, JobSummary, NetworkSummary, RoundTripSummary, Summary,
    WorkerSummary,
};
use crate::output::table::CsvTable;

fn group_name(g: u8) -> &'static str {
    GroupKind::from_index(g).map_or("?", GroupKind::name)
}

fn collective(op: u8) -> CollectiveOp {
    CollectiveOp::ALL
        .into_iter()
        .find(|c| *c as u8 == op)
        .unwrap_or(CollectiveOp::AllReduce)
}

/// nccl-tests' bus-bandwidth factor (`doc/PERFORMANCE.md`).
pub fn busbw_factor(op: CollectiveOp, n: u64) -> f64 {
    let n = n.max(1) as f64;
    match op {
        CollectiveOp::AllReduce => 2.0 * (n - 1.0) / n,
        CollectiveOp::AllGather | CollectiveOp::ReduceScatter | CollectiveOp::AllToAll => {
            (n - 1.0) / n
        }
        CollectiveOp::Broadcast => 1.0,
    }
}

/// Rates and where the time went for the ranks of one job.
struct JobFigures {
    tokens_per_s: Option<f64>,
    samples_per_s: Option<f64>,
    tflops_per_gpu: Option<f64>,
    mfu: Option<f64>,
    breakdown: Breakdown,
    ranks: u32,
}

/// [`JobFigures`] of the ranks `in_job` selects, which ran `workload` (one job's, with
/// `exp` its experiment) from `start` until the slowest finished at `end`.
fn job_figures(
    exp: &Experiment,
    workload: &sim::workload::Workload,
    in_job: impl Fn(u32) -> bool,
    results: &RunResults,
    (start, end): (SimTime, SimTime),
) -> JobFigures {
    let t = (end - start).as_secs_f64();
    let world = workload.layout.world().max(1);
    let (mut compute, mut comm, mut bubble, mut idle) = (0.0, 0.0, 0.0, 0.0);
    let mut simulated = 0u32;
    for g in results.gpus().filter(|g| in_job(g.rank)) {
        compute += g.compute_ps.as_secs_f64();
        comm += g.exposed_comm_ps.as_secs_f64();
        bubble += g.bubble_ps.as_secs_f64();
        idle += (end - g.finish_ps.unwrap_or(end)).as_secs_f64();
        simulated += 1;
    }
    let ranks = f64::from(world);
    // With symmetry only one replica's ranks ran, and they stand for all.
    let simulated = f64::from(simulated.max(1));
    let model_flops = total_model_flops(&summarize(workload));
    let precision = exp.loaded.config.training.precision;
    let peak: f64 = (0..world)
        .map(|r| exp.gpu_of_rank(r).peak_flops(precision))
        .sum::<f64>()
        / ranks;
    let per_second = |x: f64| if t > 0.0 { x / t } else { 0.0 };
    // A workload file of kernel times (SimAI's) carries no FLOPs: the rates are unknown.
    let tflops_per_gpu = (model_flops > 0.0).then(|| per_second(model_flops) / ranks / 1e12);
    let known_tokens = workload.tokens > 0;
    JobFigures {
        tokens_per_s: known_tokens.then(|| per_second(workload.tokens as f64)),
        samples_per_s: exp
            .model
            .as_ref()
            .filter(|_| known_tokens)
            .map(|m| per_second(workload.tokens as f64 / m.seq_len.max(1) as f64)),
        tflops_per_gpu,
        mfu: tflops_per_gpu.map(|tflops| {
            if peak > 0.0 {
                tflops * 1e12 / peak
            } else {
                0.0
            }
        }),
        breakdown: Breakdown {
            compute: compute / simulated,
            exposed_comm: comm / simulated,
            bubble: bubble / simulated,
            idle: idle / simulated,
        },
        ranks: world,
    }
}

/// Per job of a multi-job run: its figures, its own iteration (its slowest rank) and where
/// it ran. The figures over all jobs are their sums (rates) and rank-weighted means.
fn jobs_figures(
    exp: &Experiment,
    model: &SimModel,
    results: &RunResults,
    iteration_ps: SimTime,
) -> Option<(JobFigures, Vec<JobSummary>)> {
    let set = model.workload.jobs.as_ref()?;
    let mut jobs = Vec::with_capacity(set.jobs.len());
    let mut figures = Vec::with_capacity(set.jobs.len());
    for (j, (placed, job)) in set.jobs.iter().zip(&exp.jobs).enumerate() {
        let in_job = |r: u32| set.job_of(r) == Some(j);
        let end = results
            .gpus()
            .filter(|g| in_job(g.rank))
            .filter_map(|g| g.finish_ps)
            .max()
            .unwrap_or(job.start);
        let job_ps = end - job.start;
        let f = job_figures(
            &job.exp,
            &model.workload.job_workload(j),
            in_job,
            results,
            (job.start, end),
        );
        jobs.push(JobSummary {
            name: job.name.clone(),
            gpus: placed.gpus.len() as u32,
            hosts: sim::jobs::host_list(&job.hosts),
            placement: job.placement.clone(),
            start_s: job.start.as_secs_f64(),
            iteration_time_s: job_ps.as_secs_f64(),
            tokens_per_s: f.tokens_per_s,
            samples_per_s: f.samples_per_s,
            tflops_per_gpu: f.tflops_per_gpu,
            mfu: f.mfu,
            breakdown_s: f.breakdown.clone(),
            alone_iteration_time_s: None,
            slowdown: None,
        });
        figures.push(f);
    }
    // Over all ranks: idle against the run's end, not each job's.
    let all = job_figures_over_jobs(&figures, results, iteration_ps);
    Some((all, jobs))
}

/// The run-wide figures of several jobs: rates summed, per-GPU figures weighted by ranks,
/// the breakdown averaged over every rank with idle counted to the last job's end.
fn job_figures_over_jobs(
    figures: &[JobFigures],
    results: &RunResults,
    iteration_ps: SimTime,
) -> JobFigures {
    let ranks: u32 = figures.iter().map(|f| f.ranks).sum();
    let n = f64::from(ranks.max(1));
    let sum = |get: &dyn Fn(&JobFigures) -> Option<f64>| -> Option<f64> {
        figures.iter().map(get).sum::<Option<f64>>()
    };
    let weighted = |get: &dyn Fn(&JobFigures) -> Option<f64>| -> Option<f64> {
        sum(&|f| get(f).map(|x| x * f64::from(f.ranks))).map(|x| x / n)
    };
    let mean = |get: &dyn Fn(&Breakdown) -> f64| {
        figures
            .iter()
            .map(|f| get(&f.breakdown) * f64::from(f.ranks))
            .sum::<f64>()
            / n
    };
    let idle = results
        .gpus()
        .map(|g| (iteration_ps - g.finish_ps.unwrap_or(iteration_ps)).as_secs_f64())
        .sum::<f64>()
        / n;
    JobFigures {
        tokens_per_s: sum(&|f| f.tokens_per_s),
        samples_per_s: sum(&|f| f.samples_per_s),
        tflops_per_gpu: weighted(&|f| f.tflops_per_gpu),
        mfu: weighted(&|f| f.mfu),
        breakdown: Breakdown {
            compute: mean(&|b| b.compute),
            exposed_comm: mean(&|b| b.exposed_comm),
            bubble: mean(&|b| b.bubble),
            idle,
        },
        ranks,
    }
}

/// summary.json of a run whose slowest rank finished at `iteration_ps`.
pub fn summarize_run(
    exp: &Experiment,
    model: &SimModel,
    results: &RunResults,
    engine: &EngineInfo,
    iteration_ps: SimTime,
) -> Summary {
    let t = iteration_ps.as_secs_f64();
    let gpus = exp.loaded.config.cluster.gpus;
    let (figures, jobs) = match jobs_figures(exp, model, results, iteration_ps) {
        Some((figures, jobs)) => (figures, Some(jobs)),
        None => (
            job_figures(
                exp,
                &model.workload,
                |_| true,
                results,
                (SimTime::ZERO, iteration_ps),
            ),
            None,
        ),
    };
    let mut warnings = exp.warnings.clone();
    warnings.extend(engine.warnings.iter().cloned());
    for job in &exp.jobs {
        warnings.extend(
            job.exp
                .warnings
                .iter()
                .map(|w| format!("job `{}`: {w}", job.name)),
        );
    }
    if figures.tflops_per_gpu.is_none() {
        warnings.push(
            "TFLOP/s per GPU and MFU are n/a: the workload gives kernel times, not FLOPs".into(),
        );
    }
    if figures.tokens_per_s.is_none() {
        warnings.push("tokens/s and samples/s are n/a: the workload names no tokens".into());
    }
    let s = &engine.stats;
    let net = &exp.loaded.config.network;
    Summary {
        name: exp.name().to_string(),
        gpus,
        iteration_time_s: t,
        tokens_per_s: figures.tokens_per_s,
        batches_per_s: if t > 0.0 { 1.0 / t } else { 0.0 },
        samples_per_s: figures.samples_per_s,
        tflops_per_gpu: figures.tflops_per_gpu,
        mfu: figures.mfu,
        breakdown_s: figures.breakdown,
        jobs,
        result_digest: results.digest(),
        network: NetworkSummary {
            model: net.model.name().to_string(),
            intra_host: format!("{:?}", net.intra_host).to_lowercase(),
            segment_bytes: net.segment_bytes,
            congestion_control: format!("{:?}", net.congestion_control).to_lowercase(),
            flow: results.flow_stats().map(|f| FlowSummary {
                flows: f.flows,
                rate_recomputations: f.recomputations,
                flows_touched: f.flows_touched,
                max_active_flows: f.max_active,
            }),
        },
        engine: EngineSummary {
            mode: engine.mode.to_string(),
            replicas_per_simulated: model.symmetry.replicas(),
            symmetry: model.symmetry.describe(),
            events_by_kind: events_by_kind(&s.per_worker),
            workers: s.workers,
            partitions: s.partitions,
            strategy: engine.strategy.name().to_string(),
            threads: s.threads,
            events: s.events,
            windows: s.windows,
            events_per_window: s.events as f64 / s.windows.max(1) as f64,
            cross_partition_events: s.cross_partition_events,
            cross_partition_slack: cross_partition_slack(&s.per_worker),
            lookahead_s: s.lookahead.map(SimTime::as_secs_f64),
            window_end: window_end(s).to_string(),
            wall_s: s.wall_s,
            resumed_events: s.resumed_events,
            // What this process ran: after a resume, `events` also holds those before it.
            events_per_s: if s.wall_s > 0.0 {
                (s.events - s.resumed_events) as f64 / s.wall_s
            } else {
                0.0
            },
            sync_fraction: s.sync_fraction,
            scheduling: scheduling(&s.per_worker),
            thread_wait_s: s.per_worker.iter().map(|w| w.thread_wait_s).sum::<f64>(),
            parallel_windows: s.parallel_windows,
            parallel_events: s.parallel_events,
            peak_rss_bytes: engine.peak_rss_bytes,
            coordinator_bytes_per_window: s.coordinator_bytes as f64 / s.windows.max(1) as f64,
            emulated_efficiency: s.emulated_efficiency,
            barrier_round_trip_s: RoundTripSummary {
                median: s.barrier_round_trips.quantile_s(0.5),
                p99: s.barrier_round_trips.quantile_s(0.99),
                count: s.barrier_round_trips.count(),
            },
            per_worker: s
                .per_worker
                .iter()
                .enumerate()
                .map(|(w, ws)| per_worker(w, ws))
                .collect(),
        },
        warnings,
        settings: key_settings(exp, model),
    }
}

/// The settings a person compares runs by, by experiment key.
fn key_settings(exp: &Experiment, model: &SimModel) -> BTreeMap<String, String> {
    let c = &exp.loaded.config;
    let layout = &model.workload.layout;
    let gpu_types: Vec<&str> = exp.gpu_types.iter().map(|g| g.name.as_str()).collect();
    let mut settings: Vec<(&str, String)> = vec![
        ("cluster.gpus", c.cluster.gpus.to_string()),
        ("cluster.gpu", gpu_types.join("+")),
        ("cluster.topology", c.cluster.topology.name().to_string()),
        ("cluster.nic_gbps", c.cluster.nic_gbps.to_string()),
        ("parallel.tp", layout.tp.to_string()),
        ("parallel.cp", layout.cp.to_string()),
        ("parallel.pp", layout.pp.to_string()),
        ("parallel.dp", layout.dp.to_string()),
        ("parallel.ep", layout.ep.to_string()),
        ("parallel.vp", c.parallel.vp.to_string()),
        ("parallel.micro_batch", c.parallel.micro_batch.to_string()),
        (
            "training.precision",
            c.training.precision.name().to_string(),
        ),
        (
            "training.recompute",
            format!("{:?}", c.training.recompute).to_lowercase(),
        ),
        ("network.model", c.network.model.name().to_string()),
        (
            "network.intra_host",
            format!("{:?}", c.network.intra_host).to_lowercase(),
        ),
        ("engine.partition", c.engine.partition.name().to_string()),
        ("jobs", exp.jobs.len().to_string()),
        ("faults", c.faults.len().to_string()),
    ];
    if let Some(m) = &exp.model {
        settings.push(("model", m.name.clone()));
    }
    if let Some(b) = c.parallel.global_batch {
        settings.push(("parallel.global_batch", b.to_string()));
    }
    let mut settings: BTreeMap<String, String> = settings
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    for (i, fault) in c.faults.iter().enumerate() {
        settings.insert(format!("faults.{i}"), sim_models::fault::describe(fault));
    }
    for job in &exp.jobs {
        settings.insert(
            format!("jobs.{}.placement", job.name),
            job.placement.clone(),
        );
        settings.insert(
            format!("jobs.{}.gpus", job.name),
            job.gpus(c.cluster.gpus_per_host).len().to_string(),
        );
    }
    settings
}

/// The workers' events by kind, named, the kinds that ran only.
fn events_by_kind(workers: &[worker::WorkerStats]) -> BTreeMap<String, u64> {
    let mut sum = [0u64; sim_engine::Body::KINDS];
    for w in workers {
        for (total, n) in sum.iter_mut().zip(&w.events_by_kind) {
            *total += n;
        }
    }
    sim_engine::Body::KIND_NAMES
        .iter()
        .zip(sum)
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| (name.to_string(), n))
        .collect()
}

/// How the workers ran their partitions on their threads: one name when all agree (every
/// worker of a run decides alike), else each worker's, by worker id.
fn scheduling(workers: &[worker::WorkerStats]) -> String {
    let mut names: Vec<&str> = workers.iter().map(|w| w.scheduling.name()).collect();
    if names.windows(2).all(|pair| pair[0] == pair[1]) {
        names.truncate(1);
    }
    names.join("+")
}

/// What ended the run's windows: `promise` (the partitions' least promise, a
/// model-derived lookahead), `lookahead` (one lookahead after the start), `widening` (a lone
/// asynchronous worker's windows, sized by their events) or `uncut` (one partition).
fn window_end(s: &EngineStats) -> &'static str {
    if s.lookahead.is_none() {
        "uncut"
    } else if s.per_worker.iter().any(|w| w.promises) {
        "promise"
    } else if s.workers <= 1
        && s.per_worker
            .iter()
            .all(|w| w.scheduling == worker::Scheduling::Asynchronous)
    {
        "widening"
    } else {
        "lookahead"
    }
}

/// One worker's part of `engine.per_worker`.
fn per_worker(worker: usize, ws: &worker::WorkerStats) -> WorkerSummary {
    WorkerSummary {
        worker,
        partitions: ws.partitions,
        events: ws.events,
        cross_worker_events: ws.cross_worker_events,
        bytes_sent: ws.bytes_sent,
        busy_s: ws.busy_s,
        barrier_wait_s: (ws.wall_s - ws.busy_s).max(0.0),
        scheduling: ws.scheduling.name().to_string(),
        sub_windows: ws.sub_windows,
        thread_wait_s: ws.thread_wait_s,
        speedup_bound: speedup_bound(ws),
        peak_rss_bytes: (ws.peak_rss_bytes > 0).then_some(ws.peak_rss_bytes),
    }
}

/// The best speed-up over one thread that a worker's windows allowed on 2, 4, 8 and 16
/// threads, and with unlimited threads ([`worker::WindowParallelism`]): a window waits for
/// its busiest partition, and no placement beats an even share. None with asynchronous
/// scheduling, which has no barrier per window to bound it by.
fn speedup_bound(stats: &worker::WorkerStats) -> Option<BTreeMap<String, f64>> {
    if stats.scheduling == worker::Scheduling::Asynchronous {
        return None;
    }
    let (bounds, unlimited) = stats.parallelism.speedup_bounds(stats.events);
    let mut out: BTreeMap<String, f64> = worker::BOUND_THREADS
        .iter()
        .zip(bounds)
        .map(|(threads, bound)| (threads.to_string(), bound))
        .collect();
    out.insert("unlimited".into(), unlimited);
    Some(out)
}

/// Cross-partition events of all workers by how many lookaheads after their sending they
/// arrived ([`worker::CrossPartitionSlack`]): under "k" those that took at least k
/// lookaheads and less than the next key's.
fn cross_partition_slack(per_worker: &[worker::WorkerStats]) -> BTreeMap<String, u64> {
    let mut sum = worker::CrossPartitionSlack::default();
    for w in per_worker {
        sum.add(&w.cross_partition_slack);
    }
    worker::SLACK_MULTIPLES
        .iter()
        .zip(sum.events)
        .map(|(multiple, events)| (multiple.to_string(), events))
        .collect()
}

/// Per rank: time split, the simulated peak of live HBM bytes (resident state, activations in
/// flight and NCCL buffers, replayed over the iteration) and the GPU's capacity.
/// ranks.csv; with `[[jobs]]` a last column names each rank's job (`idle_s` still counts to
/// the run's end, the last job's).
pub fn ranks_csv(
    exp: &Experiment,
    model: &SimModel,
    results: &RunResults,
    iteration_ps: SimTime,
) -> String {
    let jobs = model.workload.jobs.as_deref();
    let mut header = vec![
        "rank",
        "gpu",
        "stage",
        "finish_s",
        "compute_s",
        "exposed_comm_s",
        "bubble_s",
        "idle_s",
        "peak_memory_bytes",
        "hbm_bytes",
    ];
    if jobs.is_some() {
        header.push("job");
    }
    let mut table = CsvTable::new(header);
    for g in results.gpus() {
        let finish = g.finish_ps.unwrap_or(iteration_ps);
        let gpu = exp.gpu_of_rank(g.rank);
        let seconds = |t: SimTime| format!("{:.9}", t.as_secs_f64());
        let mut row = vec![
            g.rank.to_string(),
            gpu.name.clone(),
            g.stage.to_string(),
            seconds(finish),
            seconds(g.compute_ps),
            seconds(g.exposed_comm_ps),
            seconds(g.bubble_ps),
            seconds(iteration_ps - finish),
            g.peak_memory_bytes.to_string(),
            format!("{:.0}", gpu.hbm_bytes()),
        ];
        if let Some(set) = jobs {
            let job = set.job_of(g.rank).map_or("", |j| exp.jobs[j].name.as_str());
            row.push(job.to_string());
        }
        table.row(row);
    }
    table.finish()
}

/// collectives.csv: one row per group kind, operation, size and group size (with
/// `[[jobs]]`, jobs whose groups differ in size keep their own rows).
/// Collectives by group, op and size; with symmetry ([`sim_engine::symmetry`]) the counts
/// include the mirrored replicas' calls (`replicas` per simulated one).
pub fn collectives_csv(results: &RunResults, replicas: u64) -> String {
    let mut merged = std::collections::BTreeMap::new();
    for (_, r) in &results.reports {
        for (k, v) in &r.collectives {
            merged
                .entry((*k, v.group_size))
                .or_insert_with(sim_engine::results::CollectiveStats::default)
                .merge(v);
        }
    }
    let mut table = CsvTable::new([
        "group",
        "op",
        "bytes",
        "group_size",
        "algorithm",
        "count",
        "mean_s",
        "min_s",
        "max_s",
        "algbw_gb_s",
        "busbw_gb_s",
    ]);
    for (((g, op, bytes), _), s) in merged {
        let mean = SimTime::ps_f64_as_secs(s.total_ps.as_ps() as f64 / s.count.max(1) as f64);
        let algbw = if mean > 0.0 {
            bytes as f64 / mean / 1e9
        } else {
            0.0
        };
        let cop = collective(op);
        table.row([
            group_name(g).to_string(),
            cop.name().to_string(),
            bytes.to_string(),
            s.group_size.to_string(),
            if s.plan.is_empty() { "-" } else { &s.plan }.to_string(),
            (s.count * replicas).to_string(),
            format!("{mean:.9}"),
            format!("{:.9}", s.min_ps.as_secs_f64()),
            format!("{:.9}", s.max_ps.as_secs_f64()),
            format!("{algbw:.3}"),
            format!("{:.3}", algbw * busbw_factor(cop, s.group_size)),
        ]);
    }
    table.finish()
}

/// Busiest links listed individually after the per-class rows.
const TOP_LINKS: usize = 20;

pub fn links_csv(model: &SimModel, results: &RunResults, iteration_ps: SimTime) -> String {
    let topo = &model.topology;
    let t = iteration_ps.as_secs_f64().max(f64::MIN_POSITIVE);
    let mut table = CsvTable::new([
        "scope",
        "class",
        "link",
        "src",
        "dst",
        "links",
        "bytes",
        "analytical_bytes",
        "utilisation",
        "max_queue_bytes",
        "pauses",
        "ecn_marks",
    ]);
    let mut per_class = [(0u64, SimTime::ZERO, 0u64, 0u64, 0u64); 4];
    let mut analytical = [0u64; 4];
    let mut analytical_link_bytes = [0u64; 4];
    let mut ports = Vec::new();
    // With symmetry each GPU that ran counted its mirrors' traffic too.
    for (_, r) in &results.reports {
        for (c, b) in r.analytical_bytes.iter().enumerate() {
            analytical[c] += b;
            analytical_link_bytes[c] += r.analytical_link_bytes[c];
        }
        for p in &r.ports {
            let c = class_index(topo.link(p.link).class);
            let e = &mut per_class[c];
            e.0 += p.bytes;
            e.1 += p.busy_ps;
            e.2 = e.2.max(p.max_queue_bytes);
            e.3 += p.pauses;
            e.4 += p.ecn_marks;
            ports.push(p);
        }
    }
    let counts = topo.links_by_class();
    for (c, class) in CLASSES.iter().enumerate() {
        let (n, bytes_per_s) = counts.get(class).copied().unwrap_or((0, 0.0));
        if n == 0 {
            continue;
        }
        let (bytes, busy, maxq, pauses, marks) = per_class[c];
        // Busy time of packet-level ports, plus closed-form bytes at the class's mean link
        // rate: the share of the class's link-time spent sending.
        let analytical_busy_s = if bytes_per_s > 0.0 {
            analytical_link_bytes[c] as f64 / bytes_per_s
        } else {
            0.0
        };
        table.row([
            "class".to_string(),
            class.name().to_string(),
            String::new(),
            String::new(),
            String::new(),
            n.to_string(),
            bytes.to_string(),
            analytical[c].to_string(),
            format!(
                "{:.6}",
                busy.as_secs_f64() / t / f64::from(n) + analytical_busy_s / t
            ),
            maxq.to_string(),
            pauses.to_string(),
            marks.to_string(),
        ]);
    }
    ports.sort_by(|a, b| b.busy_ps.cmp(&a.busy_ps).then(a.link.cmp(&b.link)));
    for p in ports.into_iter().take(TOP_LINKS) {
        let l = topo.link(p.link);
        table.row([
            "link".to_string(),
            l.class.name().to_string(),
            p.link.to_string(),
            topo.node_name(l.src),
            topo.node_name(l.dst),
            "1".to_string(),
            p.bytes.to_string(),
            "0".to_string(),
            format!("{:.6}", p.busy_ps.as_secs_f64() / t),
            p.max_queue_bytes.to_string(),
            p.pauses.to_string(),
            p.ecn_marks.to_string(),
        ]);
    }
    table.finish()
}

/// Writes trace.json (Chrome / Perfetto trace event format: one process per GPU with a thread
/// per stream, and one process for the links with a thread per busy link; times in
/// microseconds) one event at a time, so that a
/// run's trace costs a buffer, not a JSON tree of every span (quickstart: 2.2 GB and 12 s
/// before). Each event's keys are written sorted, as the tree wrote them.
pub fn write_trace(
    out: impl std::io::Write,
    model: &SimModel,
    results: &RunResults,
) -> std::io::Result<()> {
    let mut out = TraceWriter::new(out)?;
    let us = |ps: u64| ps as f64 * 1e-6;
    let links_pid = u64::from(model.workload.rank_bound()) + 1;
    out.event(&Metadata {
        args: NameArg { name: "links" },
        name: "process_name",
        ph: "M",
        pid: links_pid,
        tid: None,
    })?;
    for (_, r) in &results.reports {
        if let Some(g) = &r.gpu {
            let pid = u64::from(g.rank);
            out.event(&Metadata {
                args: NameArg {
                    name: &format!("rank {}", g.rank),
                },
                name: "process_name",
                ph: "M",
                pid,
                tid: None,
            })?;
            let program = model.workload.program_of_rank(g.rank);
            for (s, spans) in &r.op_spans {
                let stream = Stream::ALL[usize::from(*s)];
                let tid = u64::from(*s);
                out.event(&Metadata {
                    args: NameArg {
                        name: stream.name(),
                    },
                    name: "thread_name",
                    ph: "M",
                    pid,
                    tid: Some(tid),
                })?;
                for sp in spans {
                    let op = &program.ops[sp.name as usize];
                    let name = match op.kind {
                        OpKind::Compute { kernel } => {
                            let k = &program.kernels[kernel as usize];
                            format!("{} {}", k.name.name(), k.pass.name())
                        }
                        OpKind::Collective { op, group, bytes } => {
                            format!("{} {} {bytes}B", op.name(), group.name())
                        }
                        OpKind::Send { bytes, .. } => format!("send {bytes}B"),
                        OpKind::Recv { bytes, .. } => format!("recv {bytes}B"),
                        OpKind::MemoryRead { bytes } => format!("cxl {bytes}B"),
                    };
                    out.event(&OpEvent {
                        args: OpArgs {
                            micro_batch: op.label.micro_batch,
                            op: sp.name,
                        },
                        cat: op.label.phase.name(),
                        dur: us((sp.end - sp.start).as_ps()),
                        name: &name,
                        ph: "X",
                        pid,
                        tid,
                        ts: us(sp.start.as_ps()),
                    })?;
                }
            }
        }
        for (link, spans) in &r.link_spans {
            let l = model.topology.link(*link);
            let tid = u64::from(*link);
            out.event(&Metadata {
                args: NameArg {
                    name: &format!("{} {}→{}", l.class.name(), l.src, l.dst),
                },
                name: "thread_name",
                ph: "M",
                pid: links_pid,
                tid: Some(tid),
            })?;
            for sp in spans {
                out.event(&LinkEvent {
                    dur: us((sp.end - sp.start).as_ps()),
                    name: "busy",
                    ph: "X",
                    pid: links_pid,
                    tid,
                    ts: us(sp.start.as_ps()),
                })?;
            }
        }
    }
    out.finish()
}

/// `{"displayTimeUnit":"ns","traceEvents":[` ... `]}`, one event at a time.
struct TraceWriter<W: std::io::Write> {
    out: std::io::BufWriter<W>,
    first: bool,
}

impl<W: std::io::Write> TraceWriter<W> {
    fn new(out: W) -> std::io::Result<Self> {
        use std::io::Write as _;
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        out.write_all(br#"{"displayTimeUnit":"ns","traceEvents":["#)?;
        Ok(Self { out, first: true })
    }

    fn event(&mut self, event: &impl Serialize) -> std::io::Result<()> {
        use std::io::Write as _;
        if !self.first {
            self.out.write_all(b",")?;
        }
        self.first = false;
        serde_json::to_writer(&mut self.out, event).map_err(std::io::Error::other)
    }

    fn finish(mut self) -> std::io::Result<()> {
        use std::io::Write as _;
        self.out.write_all(b"]}")?;
        self.out.flush()
    }
}

// Fields in alphabetical order: the key order of the trace as it was first written.

#[derive(Serialize)]
struct NameArg<'a> {
    name: &'a str,
}

/// A process or thread name.
#[derive(Serialize)]
struct Metadata<'a> {
    args: NameArg<'a>,
    name: &'static str,
    ph: &'static str,
    pid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u64>,
}

#[derive(Serialize)]
struct OpArgs {
    micro_batch: u32,
    op: u32,
}

/// One op on one stream of a rank.
#[derive(Serialize)]
struct OpEvent<'a> {
    args: OpArgs,
    cat: &'static str,
    dur: f64,
    name: &'a str,
    ph: &'static str,
    pid: u64,
    tid: u64,
    ts: f64,
}

/// A link busy.
#[derive(Serialize)]
struct LinkEvent {
    dur: f64,
    name: &'static str,
    ph: &'static str,
    pid: u64,
    tid: u64,
    ts: f64,
}

/// `metrics.json`: the engine's final metrics, as the Prometheus endpoint last showed them.
#[derive(Debug, serde::Serialize)]
struct MetricsJson<'a> {
    simulated_s: f64,
    engine: &'a crate::output::summary::EngineSummary,
}

/// Writes the output directory.
pub fn write_outputs(dir: &Path, exp: &Experiment, output: &RunOutput) -> std::io::Result<()> {
    let (model, results, summary) = (&output.model, &output.results, &output.summary);
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("summary.json"), summary.to_json_text() + "\n")?;
    // The engine's final metrics, as the Prometheus endpoint last showed them.
    let metrics = MetricsJson {
        simulated_s: summary.iteration_time_s,
        engine: &summary.engine,
    };
    let pretty = serde_json::to_string_pretty(&metrics).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("metrics.json"), pretty + "\n")?;
    std::fs::write(
        dir.join("ranks.csv"),
        ranks_csv(exp, model, results, output.iteration_ps),
    )?;
    std::fs::write(
        dir.join("collectives.csv"),
        collectives_csv(results, u64::from(model.symmetry.replicas())),
    )?;
    std::fs::write(
        dir.join("links.csv"),
        links_csv(model, results, output.iteration_ps),
    )?;
    std::fs::write(
        dir.join("tiers.csv"),
        super::records::tiers_csv(model, results, output.iteration_ps),
    )?;
    std::fs::write(
        dir.join("timeline.csv"),
        super::records::timeline_csv(
            model,
            &exp.jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
            results,
            output.iteration_ps,
        ),
    )?;
    if model.trace {
        write_trace(
            std::fs::File::create(dir.join("trace.json"))?,
            model,
            results,
        )?;
    }
    Ok(())
}
