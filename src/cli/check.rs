//! `fleetsim check`: what an experiment derives, as text for people and JSON for scripts.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use sim::experiment::Experiment;
use sim::workload::summary::StageSummary;
use sim_config::Overrides;
use sim_config::{Precision, Recompute, RecomputeModule, TrainingConfig};
use sim_engine::host_memory::{self, HostMemory};
use sim_ir::layout::GroupKind;
use sim_ir::time::SimTime;
use sim_models::compute::attention_backend::{self, AttentionKernels, HeadSizes};
use sim_models::topology::Topology;

use crate::cli::kernel_report;
use crate::cli::stdout::print_report;

/// `fleetsim check`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    pub experiment: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also list per stage the kernels taking the most time: bound, efficiency, source.
    #[arg(long)]
    pub kernels: bool,
    /// How many kernels per stage `--kernels` lists.
    #[arg(long, default_value_t = 10, requires = "kernels")]
    pub top: usize,
    /// Override a key of the experiment file, e.g. --set parallel.tp=4.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let Args {
            experiment,
            json,
            kernels,
            top,
            sets,
        } = self;
        let exp = Experiment::load(&experiment, &Overrides::from_sets(&sets)?)?;
        let started = Instant::now();
        let topology = exp.build_topology()?;
        let build_s = started.elapsed().as_secs_f64();
        tracing::info!(
            experiment = exp.name(),
            nodes = topology.nodes().len(),
            links = topology.link_count(),
            seconds = build_s,
            "topology built"
        );
        // Validates `[network]` against the links it will run on.
        let net = sim_engine::NetworkParams::from_experiment(&exp, &topology)?;
        let collectives = sim_engine::CollectiveModel::from_experiment(&exp, &topology)?;
        let started = Instant::now();
        let workload = sim::load::load_or_compile(&exp, None)?;
        tracing::info!(
            programs = workload.programs.len(),
            seconds = started.elapsed().as_secs_f64(),
            "workload compiled"
        );
        // Validates `[compute]` and any measured kernel tables even without --kernels.
        let model = exp.compute_model()?;
        sim_engine::check_slow_gpus(&exp, &workload, |rank| {
            let program = &workload.programs[workload.program_index(rank)];
            let gpu = &exp.gpu_types[usize::from(topology.gpu_type(rank))];
            model.program_times_and_clocked(program, gpu)
        })?;
        // With [[jobs]], each job's own workload (its programs copied once, for both the
        // summaries and --kernels).
        let job_workloads: Vec<_> = (0..exp.jobs.len())
            .map(|j| workload.job_workload(j))
            .collect();
        let summaries = match workload.jobs {
            None => sim::workload::summary::summarize(&workload),
            Some(_) => Vec::new(),
        };
        let job_summaries: Vec<_> = job_workloads
            .iter()
            .map(sim::workload::summary::summarize)
            .collect();
        // What the model holds is this process's resident set now (topology and programs
        // built); the run's state is estimated from the model's size.
        let host_memory = sim_engine::host_memory::estimate(
            coordinator::run::peak_rss_bytes(),
            &topology,
            &net,
            &collectives,
        );
        let report = CheckReport {
            experiment: &exp,
            topology: &topology,
            build_s,
            host_memory,
            workload: &summaries,
            jobs: &job_summaries,
        };
        if !kernels {
            return print_report(json, || Ok(report.to_json()), || report.to_text());
        }
        if workload.jobs.is_none() {
            let stages = kernel_report::stage_kernels(&workload, &model, &exp.stage_gpus());
            return print_report(
                json,
                || {
                    let mut v = report.to_json();
                    if let JobsJson::One(job) = &mut v.jobs {
                        job.kernels = Some(kernel_report::to_json(&stages, top));
                    }
                    Ok(v)
                },
                || report.to_text() + &kernel_report::to_text(&stages, top),
            );
        }
        // Several jobs: each job's kernels, on its own stages.
        let per_job = exp
            .jobs
            .iter()
            .zip(&job_workloads)
            .map(|(job, job_workload)| {
                let stages = kernel_report::stage_kernels(
                    job_workload,
                    &job.exp.compute_model()?,
                    &job.exp.stage_gpus(),
                );
                Ok((job.name.as_str(), stages))
            })
            .collect::<Result<Vec<_>, sim_config::ConfigError>>()?;
        print_report(
            json,
            || {
                let mut v = report.to_json();
                if let JobsJson::Several { jobs } = &mut v.jobs {
                    for (job, (_, stages)) in jobs.iter_mut().zip(&per_job) {
                        job.job.kernels = Some(kernel_report::to_json(stages, top));
                    }
                }
                Ok(v)
            },
            || {
                let mut text = report.to_text();
                for (name, stages) in &per_job {
                    text += &format!("job {name}:\n");
                    text += &kernel_report::to_text(stages, top);
                }
                text
            },
        )
    }
}

/// Everything `fleetsim check` reports.
#[derive(Debug)]
pub struct CheckReport<'a> {
    pub experiment: &'a Experiment,
    pub topology: &'a Topology,
    /// Seconds spent building the topology and its routing.
    pub build_s: f64,
    /// What `fleetsim run` on one worker will hold in host memory.
    pub host_memory: HostMemory,
    /// The compiled workload's summary per program (op counts per rank of each stage).
    pub workload: &'a [StageSummary],
    /// With `[[jobs]]`: each job's summary per program (and `workload` is empty).
    pub jobs: &'a [Vec<StageSummary>],
}

/// Each GPU type of the cluster with the number of hosts that carry it.
fn hosts_per_gpu_type(exp: &Experiment) -> impl Iterator<Item = (&str, usize)> {
    exp.gpu_types.iter().enumerate().map(|(i, g)| {
        let hosts = exp
            .host_gpu_type
            .iter()
            .filter(|&&t| usize::from(t) == i)
            .count();
        (g.name.as_str(), hosts)
    })
}

fn gb(bytes: f64) -> f64 {
    (bytes / 1e9 * 100.0).round() / 100.0
}

/// What `check --json` says about one job: model, layout, batch, ops and memory.
/// `hosts`: a job's hosts in rank order (its rank r runs on `hosts[r / gpus_per_host]`);
/// `None` for one job on hosts 0, 1, …
fn job_json<'a>(
    exp: &'a Experiment,
    summaries: &'a [StageSummary],
    hosts: Option<&[u32]>,
) -> JobJson<'a> {
    let c = &exp.loaded.config.cluster;
    let groups = GroupKind::ALL
        .iter()
        .map(|&k| GroupJson {
            kind: k.name(),
            size: exp.layout.group_size(k),
            count: exp.layout.group_count(k),
            first: exp.layout.nth_group(k, 0),
            max_hosts_spanned: exp.group_host_span(k),
        })
        .collect();
    let placement = (0..exp.layout.world().min(16))
        .map(|r| {
            let co = exp.layout.coords(r);
            RankJson {
                rank: r,
                host: hosts.map_or(r / c.gpus_per_host, |h| h[(r / c.gpus_per_host) as usize]),
                local_gpu: r % c.gpus_per_host,
                tp: co.tp,
                cp: co.cp,
                dp: co.dp,
                pp: co.pp,
                ep: co.ep,
                expert_tp: co.expert_tp,
                expert_dp: co.expert_dp,
            }
        })
        .collect();
    let memory = exp
        .memory
        .iter()
        .zip(&exp.stage_hbm)
        .map(|(m, hbm)| MemoryJson {
            stage: m.stage,
            params_per_gpu: m.params,
            weights_gb: gb(m.weights),
            gradients_gb: gb(m.gradients),
            optimizer_gb: gb(m.optimizer),
            activations_gb: gb(m.activations),
            total_gb: gb(m.total()),
            in_hbm_gb: gb(m.in_hbm(&exp.cxl_tensors)),
            hbm_gb: gb(*hbm),
            fits: m.in_hbm(&exp.cxl_tensors) <= *hbm,
        })
        .collect();
    let l = &exp.layout;
    let t = &exp.loaded.config.training;
    JobJson {
        model: exp.model.as_ref().map(|m| ModelJson {
            name: &m.name,
            params: m.total_params(),
            active_params: m.active_params(),
            layers: m.layers,
            hidden: m.hidden,
            seq_len: m.seq_len,
        }),
        parallel: ParallelJson {
            tp: l.tp,
            cp: l.cp,
            ep: l.ep,
            etp: l.etp,
            expert_dp: l.expert_dp(),
            dp: l.dp,
            pp: l.pp,
            vp: l.vp,
            chunk_layers: &exp.chunk_layers,
            order: &exp.loaded.config.parallel.order,
            groups,
            placement,
        },
        batch: BatchJson {
            global_batch: exp.global_batch,
            micro_batch: exp.micro_batch,
            micro_batches_per_replica: exp.micro_batches,
            tokens_per_iteration: exp.model.as_ref().map(|m| exp.global_batch * m.seq_len),
        },
        training: TrainingJson {
            precision: t.precision.name(),
            fp8_recipe: fp8_recipe(t),
            recompute: recompute_text(t),
            recompute_modules: t
                .recomputed_modules()
                .iter()
                .map(RecomputeModule::name)
                .collect(),
            host_cpus: host_cpus(exp),
            cuda_graphs: t.cuda_graphs.name(),
            attention: attention_kernels(exp).map(|(_, per_type)| {
                per_type
                    .into_iter()
                    .map(|(gpu, kernels)| AttentionJson {
                        gpu,
                        kernels: kernels.name(),
                    })
                    .collect()
            }),
        },
        ops_per_rank: summaries
            .iter()
            .map(|w| OpsJson {
                stage: w.stage,
                class: w.class,
                total: w.ops,
                compute: w.compute_ops,
                collective: w.collective_ops,
                p2p: w.p2p_ops,
            })
            .collect(),
        // null without a [model]: an imported workload_file brings its own kernels.
        memory: exp.model.as_ref().map(|_| memory),
        kernels: None,
    }
}

/// `check --json`.
#[derive(Debug, Serialize)]
pub struct CheckJson<'a> {
    name: &'a str,
    file: String,
    cluster: ClusterJson,
    lookahead_s: Option<f64>,
    faults: Vec<String>,
    host_memory: HostMemoryJson,
    warnings: &'a [String],
    /// One job's keys at the top, or `jobs`.
    #[serde(flatten)]
    pub jobs: JobsJson<'a>,
}

/// The experiment's one job, or its `[[jobs]]`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum JobsJson<'a> {
    One(Box<JobJson<'a>>),
    Several { jobs: Vec<NamedJobJson<'a>> },
}

#[derive(Debug, Serialize)]
struct ClusterJson {
    gpus: u32,
    hosts: u32,
    gpus_per_host: u32,
    topology: &'static str,
    /// Hosts of each GPU type.
    gpu_types: BTreeMap<String, usize>,
    nodes: BTreeMap<String, u32>,
    links: BTreeMap<String, LinksJson>,
    build_s: f64,
}

#[derive(Debug, Serialize)]
struct LinksJson {
    links: u32,
    total_gbytes_per_s: f64,
}

#[derive(Debug, Serialize)]
struct HostMemoryJson {
    run_estimate_bytes: u64,
    model_bytes: u64,
    state_bytes: u64,
    in_flight_bytes: u64,
    margin: f64,
}

/// A job of `[[jobs]]`: where it runs, then what [`JobJson`] says.
#[derive(Debug, Serialize)]
pub struct NamedJobJson<'a> {
    name: &'a str,
    gpus: u32,
    hosts: &'a [u32],
    placement: &'a str,
    warnings: &'a [String],
    #[serde(flatten)]
    pub job: JobJson<'a>,
}

/// One job: model, layout, batch, training, ops and memory (and kernels with `--kernels`).
#[derive(Debug, Serialize)]
pub struct JobJson<'a> {
    model: Option<ModelJson<'a>>,
    parallel: ParallelJson<'a>,
    batch: BatchJson,
    training: TrainingJson<'a>,
    ops_per_rank: Vec<OpsJson>,
    memory: Option<Vec<MemoryJson>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels: Option<Vec<kernel_report::StageJson<'a>>>,
}

#[derive(Debug, Serialize)]
struct ModelJson<'a> {
    name: &'a str,
    params: u64,
    active_params: u64,
    layers: u64,
    hidden: u64,
    seq_len: u64,
}

#[derive(Debug, Serialize)]
struct ParallelJson<'a> {
    tp: u32,
    cp: u32,
    ep: u32,
    etp: u32,
    expert_dp: u32,
    dp: u32,
    pp: u32,
    vp: u32,
    chunk_layers: &'a sim_models::memory::ChunkLayers,
    order: &'a str,
    groups: Vec<GroupJson>,
    /// The first 16 ranks.
    placement: Vec<RankJson>,
}

#[derive(Debug, Serialize)]
struct GroupJson {
    kind: &'static str,
    size: u32,
    count: u32,
    first: Vec<u32>,
    max_hosts_spanned: u32,
}

#[derive(Debug, Serialize)]
struct RankJson {
    rank: u32,
    host: u32,
    local_gpu: u32,
    tp: u32,
    cp: u32,
    dp: u32,
    pp: u32,
    ep: u32,
    expert_tp: u32,
    expert_dp: u32,
}

#[derive(Debug, Serialize)]
struct BatchJson {
    global_batch: u64,
    micro_batch: u64,
    micro_batches_per_replica: u64,
    tokens_per_iteration: Option<u64>,
}

#[derive(Debug, Serialize)]
struct TrainingJson<'a> {
    precision: &'static str,
    fp8_recipe: Option<&'static str>,
    recompute: String,
    recompute_modules: Vec<&'static str>,
    host_cpus: Vec<&'static str>,
    cuda_graphs: &'static str,
    attention: Option<Vec<AttentionJson<'a>>>,
}

#[derive(Debug, Serialize)]
struct AttentionJson<'a> {
    gpu: &'a str,
    kernels: &'static str,
}

#[derive(Debug, Serialize)]
struct OpsJson {
    stage: u32,
    class: usize,
    total: u64,
    compute: u64,
    collective: u64,
    p2p: u64,
}

#[derive(Debug, Serialize)]
struct MemoryJson {
    stage: u32,
    params_per_gpu: f64,
    weights_gb: f64,
    gradients_gb: f64,
    optimizer_gb: f64,
    activations_gb: f64,
    total_gb: f64,
    in_hbm_gb: f64,
    hbm_gb: f64,
    fits: bool,
}

/// Layers of every model chunk, stage by stage (`3 | 4 | ... | 2+1m`; chunks of a stage
/// joined by `,`), runs of equal stages folded as `4 x14`.
fn stage_chunks_text(model: &sim_models::model::ModelSpec, chunks: &[Vec<Vec<u64>>]) -> String {
    let stage_text = |stage: &Vec<Vec<u64>>| {
        stage
            .iter()
            .map(|ids| {
                let mtp = ids.iter().filter(|&&l| model.is_mtp_layer(l)).count();
                match mtp {
                    0 => ids.len().to_string(),
                    m => format!("{}+{m}m", ids.len() - m),
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut runs: Vec<(String, usize)> = Vec::new();
    for stage in chunks {
        let text = stage_text(stage);
        match runs.last_mut() {
            Some((last, n)) if *last == text => *n += 1,
            _ => runs.push((text, 1)),
        }
    }
    let runs: Vec<String> = runs
        .into_iter()
        .map(|(t, n)| if n > 1 { format!("{t} x{n}") } else { t })
        .collect();
    let note = if model.mtp_layers > 0 {
        " (m: multi-token prediction)"
    } else {
        ""
    };
    format!("per stage{note} {}", runs.join(" | "))
}

/// The recompute setting as `check` shows it: `selective (core_attn, moe_act)`.
fn recompute_text(t: &TrainingConfig) -> String {
    match t.recompute {
        Recompute::None => "none".into(),
        Recompute::Full => "full".into(),
        Recompute::Selective => {
            let modules: Vec<&str> = t
                .recomputed_modules()
                .iter()
                .map(RecomputeModule::name)
                .collect();
            format!("selective ({})", modules.join(", "))
        }
    }
}

/// The FP8 recipe in effect, under FP8 and MXFP8.
fn fp8_recipe(t: &TrainingConfig) -> Option<&'static str> {
    matches!(t.precision, Precision::Fp8 | Precision::Mxfp8).then(|| t.fp8_recipe().name())
}

/// `check`'s training line: GEMM precision (and FP8 recipe) and what is recomputed.
fn training_text(exp: &Experiment) -> String {
    let t = &exp.loaded.config.training;
    let recipe = match t.precision {
        Precision::Fp8 => format!(" ({} scaling)", t.fp8_recipe().name()),
        _ => String::new(),
    };
    format!(
        "precision {}{recipe}, recompute {}; issued by {} host(s), CUDA graphs {}{}",
        t.precision.name(),
        recompute_text(t),
        host_cpus(exp).join(" and "),
        t.cuda_graphs.name(),
        attention_text(exp)
    )
}

/// The attention kernels Transformer Engine trains the model's heads with, per GPU type
/// (`sim_models::compute::attention_backend`); none without a model, without flash attention or on
/// families its rules do not cover.
fn attention_kernels(exp: &Experiment) -> Option<(HeadSizes, Vec<(&str, AttentionKernels)>)> {
    let t = &exp.loaded.config.training;
    let model = exp.model.as_ref().filter(|_| t.flash_attention)?;
    let per_type: Vec<(&str, AttentionKernels)> =
        attention_backend::per_gpu_type(t, Some(model), &exp.gpu_types)
            .into_iter()
            .filter_map(|(g, kernels)| Some((g.name.as_str(), kernels?)))
            .collect();
    (!per_type.is_empty()).then_some((HeadSizes::of(model), per_type))
}

/// `check`'s words for [`attention_kernels`].
fn attention_text(exp: &Experiment) -> String {
    let Some((heads, per_type)) = attention_kernels(exp) else {
        return String::new();
    };
    let te = exp
        .loaded
        .config
        .training
        .transformer_engine
        .map(|r| format!(", Transformer Engine {r}"))
        .unwrap_or_default();
    let per_type: Vec<String> = per_type
        .iter()
        .map(|(gpu, kernels)| {
            let name = match kernels {
                AttentionKernels::Cudnn => "cuDNN fused",
                AttentionKernels::Flash2 => "FlashAttention-2",
                AttentionKernels::Unfused => "unfused (no fused kernel trains these heads)",
            };
            format!("{name} on {gpu}")
        })
        .collect();
    format!(
        "; attention (heads {}/{}{te}) {}",
        heads.qk,
        heads.v,
        per_type.join(", ")
    )
}

/// The CPUs that issue the experiment's GPUs' work (`configs/hosts.toml`), once each.
fn host_cpus(exp: &Experiment) -> Vec<&'static str> {
    let mut cpus: Vec<&'static str> = exp.gpu_types.iter().map(|g| g.host_cpu.name()).collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// `check`'s lines on a job's model, layout, groups, batch and ops.
fn job_text_head(s: &mut String, exp: &Experiment, summaries: &[StageSummary]) {
    let workload = summaries;
    match &exp.model {
        Some(m) => {
            let _ = writeln!(
                s,
                "model       {}: {:.2} B parameters ({:.2} B active), {} layers{}, hidden {}, seq {}",
                m.name,
                m.total_params() as f64 / 1e9,
                m.active_params() as f64 / 1e9,
                m.layers,
                if m.mtp_layers > 0 {
                    format!(" + {} multi-token prediction", m.mtp_layers)
                } else {
                    String::new()
                },
                m.hidden,
                m.seq_len
            );
            if let Some(moe) = &m.moe {
                let shared = match moe.shared_experts {
                    0 => String::new(),
                    n if exp.loaded.config.training.moe_shared_expert_overlap => {
                        format!(", {n} shared beside the all-to-alls")
                    }
                    n => format!(", {n} shared"),
                };
                let groups = match moe.router_groups {
                    g if g.groups > 1 => {
                        format!(" from {} of {} groups", g.group_topk, g.groups)
                    }
                    _ => String::new(),
                };
                let moe_layers = (0..m.layers).filter(|&l| m.is_moe_layer(l)).count();
                let _ = writeln!(
                    s,
                    "  moe       {moe_layers} of {} layers, {} experts, top {}{groups}{shared}, {} dispatcher, {}",
                    m.layers,
                    moe.experts,
                    moe.top_k,
                    exp.loaded.config.training.moe_token_dispatcher.name(),
                    match moe.capacity {
                        None => "dropless".to_string(),
                        Some(c) => format!(
                            "token drop at capacity factor {}{}",
                            c.factor,
                            if c.pad { ", padded to capacity" } else { "" }
                        ),
                    }
                );
            }
            if let Some(w) = m.window {
                let windowed = (0..m.layers)
                    .filter(|&l| m.attention_window(l).is_some())
                    .count();
                let _ = writeln!(
                    s,
                    "  window    {windowed} of {} layers attend over a sliding window of {} tokens, the others over the whole sequence",
                    m.layers, w.left
                );
            }
            if m.qk_layernorm {
                let what = if m.mla.is_some() {
                    "the query and key-value latents"
                } else {
                    "each head's query and key"
                };
                let _ = writeln!(s, "  qk norm   {what} pass a norm before attention");
            }
        }
        None => {
            let _ = writeln!(
                s,
                "model       n/a: no [model]; the imported workload_file brings its own kernels"
            );
        }
    }
    let _ = writeln!(
        s,
        "parallel    {}, order {}",
        exp.layout, exp.loaded.config.parallel.order
    );
    if let Some(m) = &exp.model {
        let _ = writeln!(s, "  layers    {}", stage_chunks_text(m, &exp.chunk_layers));
    }
    for kind in GroupKind::ALL {
        let size = exp.layout.group_size(kind);
        if size == 1 {
            continue;
        }
        let first = exp.layout.nth_group(kind, 0);
        let shown: Vec<String> = first.iter().take(8).map(u32::to_string).collect();
        let more = if first.len() > 8 { ", ..." } else { "" };
        let _ = writeln!(
            s,
            "  {:<9} {} groups of {}, first [{}{}], spans up to {} host(s)",
            kind.name(),
            exp.layout.group_count(kind),
            size,
            shown.join(", "),
            more,
            exp.group_host_span(kind)
        );
    }
    let _ = writeln!(
        s,
        "batch       global {} = micro-batch {} x DP {} x {} micro-batches per replica",
        exp.global_batch, exp.micro_batch, exp.layout.dp, exp.micro_batches
    );
    let _ = writeln!(s, "training    {}", training_text(exp));
    let ops: Vec<String> = workload.iter().map(|w| format!("{}", w.ops)).collect();
    if !ops.is_empty() {
        let _ = writeln!(
            s,
            "ops/rank    {} per stage (compute, collectives, send/recv; `fleetsim workload` details them)",
            ops.join(", ")
        );
    }
}

/// `check`'s lines on the cut's lookahead and the faults.
fn look_faults(topo: &Topology, exp: &Experiment) -> String {
    let mut s = String::new();
    match topo.host_preserving_lookahead() {
        Some(lookahead) => {
            let _ = writeln!(
                s,
                "lookahead   {:.3} us (host-preserving partition)",
                lookahead.as_ps() as f64 / 1e6
            );
        }
        None => {
            let _ = writeln!(s, "lookahead   none: one host, nothing to cut");
        }
    }
    for (i, f) in exp.loaded.config.faults.iter().enumerate() {
        let _ = writeln!(s, "faults[{i}]   {}", sim_models::fault::describe(f));
    }
    s
}

/// `check`'s lines on a job's memory per GPU and CXL tier.
fn job_text_memory(s: &mut String, exp: &Experiment) {
    if exp.model.is_none() {
        let _ = writeln!(s, "memory/GPU  n/a: no [model] to estimate it from");
    } else {
        let _ = writeln!(
            s,
            "memory/GPU  stage  weights  grads  optim  activ  total GB  of HBM"
        );
    }
    for (mem, hbm) in exp.memory.iter().zip(&exp.stage_hbm) {
        let _ = writeln!(
            s,
            "            {:>5}  {:>7.2}  {:>5.2}  {:>5.2}  {:>5.2}  {:>8.2}  {:.0}{}",
            mem.stage,
            mem.weights / 1e9,
            mem.gradients / 1e9,
            mem.optimizer / 1e9,
            mem.activations / 1e9,
            mem.total() / 1e9,
            hbm / 1e9,
            if mem.in_hbm(&exp.cxl_tensors) <= *hbm {
                ""
            } else {
                "  DOES NOT FIT"
            }
        );
    }
    if !exp.cxl_tensors.is_empty() {
        let names: Vec<&str> = exp.cxl_tensors.iter().map(|c| c.name()).collect();
        let in_hbm = exp
            .memory
            .iter()
            .map(|m| m.in_hbm(&exp.cxl_tensors))
            .fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "in CXL      {} ({}); at most {:.2} GB per GPU stays in HBM",
            names.join(", "),
            if exp.cxl_coherent() == Some(true) {
                "coherent: read while kernels run"
            } else {
                "not coherent: copied into HBM before use"
            },
            in_hbm / 1e9
        );
    }
}

impl CheckReport<'_> {
    pub fn to_json(&self) -> CheckJson<'_> {
        let exp = self.experiment;
        let topo = self.topology;
        let c = &exp.loaded.config.cluster;
        let gpu_types = hosts_per_gpu_type(exp)
            .map(|(name, hosts)| (name.to_string(), hosts))
            .collect();
        let nodes = topo
            .count_by_kind()
            .into_iter()
            .map(|(k, n)| (format!("{k:?}").to_lowercase(), n))
            .collect();
        let links = topo
            .links_by_class()
            .into_iter()
            .map(|(k, (n, bw))| {
                (
                    format!("{k:?}").to_lowercase(),
                    LinksJson {
                        links: n,
                        total_gbytes_per_s: bw / 1e9,
                    },
                )
            })
            .collect();
        let jobs = if exp.jobs.is_empty() {
            JobsJson::One(Box::new(job_json(exp, self.workload, None)))
        } else {
            JobsJson::Several {
                jobs: exp
                    .jobs
                    .iter()
                    .zip(self.jobs)
                    .map(|(job, summaries)| NamedJobJson {
                        name: &job.name,
                        gpus: job.exp.loaded.config.cluster.gpus,
                        hosts: &job.hosts,
                        placement: &job.placement,
                        warnings: &job.exp.warnings,
                        job: job_json(&job.exp, summaries, Some(&job.hosts)),
                    })
                    .collect(),
            }
        };
        CheckJson {
            name: exp.name(),
            file: exp.loaded.path.display().to_string(),
            cluster: ClusterJson {
                gpus: topo.gpu_count(),
                hosts: topo.host_count(),
                gpus_per_host: c.gpus_per_host,
                topology: c.topology.name(),
                gpu_types,
                nodes,
                links,
                build_s: self.build_s,
            },
            lookahead_s: topo.host_preserving_lookahead().map(SimTime::as_secs_f64),
            faults: exp
                .loaded
                .config
                .faults
                .iter()
                .map(sim_models::fault::describe)
                .collect(),
            host_memory: HostMemoryJson {
                run_estimate_bytes: self.host_memory.total_bytes(),
                model_bytes: self.host_memory.model_bytes,
                state_bytes: self.host_memory.state_bytes,
                in_flight_bytes: self.host_memory.in_flight_bytes,
                margin: host_memory::MARGIN,
            },
            warnings: &exp.warnings,
            jobs,
        }
    }

    pub fn to_text(&self) -> String {
        let exp = self.experiment;
        let topo = self.topology;
        let c = &exp.loaded.config.cluster;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "experiment  {}  ({})",
            exp.name(),
            exp.loaded.path.display()
        );
        let types: Vec<String> = hosts_per_gpu_type(exp)
            .map(|(name, hosts)| format!("{name} x {hosts} hosts"))
            .collect();
        let _ = writeln!(
            s,
            "cluster     {} GPUs in {} hosts of {} ({}), {} fabric",
            topo.gpu_count(),
            topo.host_count(),
            c.gpus_per_host,
            types.join(", "),
            c.topology.name()
        );
        let nodes: Vec<String> = topo
            .count_by_kind()
            .into_iter()
            .map(|(k, n)| format!("{k:?} {n}"))
            .collect();
        let _ = writeln!(s, "  nodes     {}", nodes.join(", "));
        let links: Vec<String> = topo
            .links_by_class()
            .into_iter()
            .map(|(k, (n, bw))| format!("{k:?} {n} ({:.1} TB/s)", bw / 1e12))
            .collect();
        let _ = writeln!(s, "  links     {} (directed)", links.join(", "));
        let _ = writeln!(s, "  built in  {:.3} s", self.build_s);
        match exp.jobs.is_empty() {
            true => {
                job_text_head(&mut s, exp, self.workload);
                s += &look_faults(topo, exp);
                job_text_memory(&mut s, exp);
            }
            false => {
                for (job, summaries) in exp.jobs.iter().zip(self.jobs) {
                    let _ = writeln!(
                        s,
                        "job         {}: {} GPUs on {} host(s) {} ({}); ranks below are the job's own",
                        job.name,
                        job.exp.loaded.config.cluster.gpus,
                        job.hosts.len(),
                        sim::jobs::host_list(&job.hosts),
                        job.placement
                    );
                    job_text_head(&mut s, &job.exp, summaries);
                    job_text_memory(&mut s, &job.exp);
                    for w in &job.exp.warnings {
                        let _ = writeln!(s, "warning     job `{}`: {w}", job.name);
                    }
                }
                s += &look_faults(topo, exp);
            }
        }
        s += &host_memory_text(&self.host_memory);
        for w in &exp.warnings {
            let _ = writeln!(s, "warning     {w}");
        }
        s
    }
}

/// `check`'s line on what `fleetsim run` will hold in host memory.
fn host_memory_text(m: &HostMemory) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let mut s = format!(
        "host memory {:.0} MB for `fleetsim run` on one worker (model {:.0} MB, LPs and runtime {:.0} MB",
        mb(m.total_bytes()),
        mb(m.model_bytes),
        mb(m.state_bytes)
    );
    if m.in_flight_bytes > 0 {
        s += &format!(", segments in flight {:.1} MB", mb(m.in_flight_bytes));
    }
    s += &format!(
        "); a run's peak stays within {}x of it\n",
        host_memory::MARGIN
    );
    s
}
