//! `fleetsim workload`: the compiled workload per stage, as text for people and JSON for
//! scripts.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use serde::Serialize;
use sim::experiment::Experiment;
use sim::workload::evaluate::{PipelineTiming, evaluate};
use sim::workload::schedule::bubble_fraction;
use sim::workload::summary::{StageSummary, summarize, total_hardware_flops, total_model_flops};
use sim::workload::{OpKind, Workload};
use sim_config::Overrides;
use sim_ir::time::SimTime;
use sim_models::compute::ComputeModel;
use sim_models::compute::host::{HostCosts, issue_costs};

use crate::cli::kernel_report;
use crate::cli::stdout::print_report;

/// `fleetsim workload`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    pub experiment: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Export format (simai: SimAI's workload text file; chakra: Chakra execution traces,
    /// `--out PREFIX` writes PREFIX.<rank>.et for every rank and comm_groups.json beside
    /// them; kernels: the measured-kernel table template, every distinct kernel with the
    /// model's time).
    #[arg(long, value_enum, requires = "output")]
    pub export: Option<ExportFormat>,
    /// File the export is written to (`--output` also works).
    #[arg(
        long = "out",
        alias = "output",
        value_name = "FILE",
        requires = "export"
    )]
    pub output: Option<PathBuf>,
    /// Run a SimAI workload file or Chakra traces instead of compiling the model (like
    /// `workload_file`).
    #[arg(long, value_name = "FILE")]
    pub workload_file: Option<PathBuf>,
    /// Override a key of the experiment file, e.g. --set parallel.tp=4.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// With [[jobs]]: the job to report or export (default: report every job).
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ExportFormat {
    Simai,
    Chakra,
    Kernels,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let exp = Experiment::load(&self.experiment, &Overrides::from_sets(&self.sets)?)?;
        let started = Instant::now();
        let workload = sim::load::load_or_compile(&exp, self.workload_file.as_deref())?;
        let compile_s = started.elapsed().as_secs_f64();
        if exp.jobs.is_empty() {
            if let Some(name) = &self.job {
                anyhow::bail!(
                    "--job {name}: {} has no [[jobs]]; leave --job out",
                    self.experiment.display()
                );
            }
            return self.report(&exp, workload, compile_s);
        }
        let names: Vec<&str> = exp.jobs.iter().map(|j| j.name.as_str()).collect();
        let chosen: Vec<usize> = match &self.job {
            Some(name) => vec![names.iter().position(|n| n == name).ok_or_else(|| {
                anyhow::anyhow!(
                    "--job {name}: no such job in {}; its jobs are {}",
                    self.experiment.display(),
                    names.join(", ")
                )
            })?],
            None if self.export.is_some() => anyhow::bail!(
                "{} runs several jobs; export one at a time with --job NAME ({})",
                self.experiment.display(),
                names.join(", ")
            ),
            None => (0..names.len()).collect(),
        };
        if let [j] = chosen[..] {
            return self.report(&exp.jobs[j].exp, workload.job_workload(j), compile_s);
        }
        let reports = chosen
            .iter()
            .map(|&j| {
                let job = &exp.jobs[j].exp;
                WorkloadReport::new(
                    job,
                    workload.job_workload(j),
                    &job.compute_model()?,
                    compile_s,
                )
            })
            .collect::<Result<Vec<_>, sim_config::ConfigError>>()?;
        print_report(
            self.json,
            || {
                Ok(JobsJson {
                    jobs: reports.iter().map(WorkloadReport::to_json).collect(),
                })
            },
            || {
                reports
                    .iter()
                    .map(WorkloadReport::to_text)
                    .collect::<Vec<_>>()
                    .join("\n")
            },
        )
    }

    /// Reports or exports one job's workload.
    fn report(self, exp: &Experiment, workload: Workload, compile_s: f64) -> anyhow::Result<()> {
        let model = exp.compute_model()?;
        let stage_gpus = exp.stage_gpus();
        if let (Some(format), Some(path)) = (self.export, self.output) {
            let (text, what) = match format {
                ExportFormat::Chakra => {
                    check_chakra_prefix(&path)?;
                    let files = sim::interop::chakra_convert::export(&workload, exp, &model, &path)
                        .with_context(|| {
                            format!("writing the Chakra traces {}.<rank>.et", path.display())
                        })?;
                    eprintln!(
                        "wrote {} Chakra traces {}.<rank>.et and {}",
                        files.len() - 1,
                        path.display(),
                        files
                            .last()
                            .map_or(String::new(), |f| f.display().to_string())
                    );
                    return Ok(());
                }
                ExportFormat::Simai => (
                    sim::interop::simai_convert::export(&workload, exp, &model),
                    "the SimAI workload",
                ),
                ExportFormat::Kernels => {
                    let stages = kernel_report::stage_kernels(&workload, &model, &stage_gpus);
                    (kernel_report::kernel_table(&stages), "the kernel table")
                }
            };
            std::fs::write(&path, text)
                .with_context(|| format!("writing {what} to {}", path.display()))?;
            eprintln!("wrote {}", path.display());
            return Ok(());
        }
        let report = WorkloadReport::new(exp, workload, &model, compile_s)?;
        print_report(self.json, || Ok(report.to_json()), || report.to_text())
    }
}

/// Everything `fleetsim workload` reports.
#[derive(Debug)]
pub struct WorkloadReport {
    pub name: String,
    pub workload: Workload,
    pub stages: Vec<StageSummary>,
    /// The schedule timed with the compute model's kernels and free communication (class 0).
    pub timing: Result<PipelineTiming, String>,
    /// Per stage of class 0: what its host takes to issue the iteration's ops, beside its
    /// kernels' time.
    pub host: Vec<HostLoad>,
    pub compile_s: f64,
}

/// One stage's host issue time beside its GPU time: above 1, the host sets the pace.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HostLoad {
    /// The CPU that issues the stage's ops.
    pub cpu: &'static str,
    /// Sum of every op's issue cost per iteration (`configs/hosts.toml`), seconds.
    pub issue_s: f64,
    /// Sum of the stage's kernel times per iteration (the compute model), seconds.
    pub kernels_s: f64,
}

impl WorkloadReport {
    /// Summarises `exp`'s compiled `workload`, its kernels timed by `model` (`exp`'s).
    pub fn new(
        exp: &Experiment,
        workload: Workload,
        model: &ComputeModel,
        compile_s: f64,
    ) -> Result<Self, sim_config::ConfigError> {
        let stage_gpus = exp.stage_gpus();
        let stages = summarize(&workload);
        // Kernel times per program of class 0, looked up by interned kernel index.
        let times: Vec<Vec<SimTime>> = (0..workload.layout.pp)
            .map(|s| model.program_times(workload.program(0, s), stage_gpus[s as usize]))
            .collect();
        let timing = evaluate(&workload, 0, &|p, op| match op.kind {
            OpKind::Compute { kernel } => times[p.stage as usize][kernel as usize],
            _ => SimTime::ZERO,
        })
        .map_err(|e| e.to_string());
        let graphs = exp.loaded.config.training.cuda_graphs;
        let host = (0..workload.layout.pp)
            .map(|s| {
                let program = workload.program(0, s);
                let cpu = stage_gpus[s as usize].host_cpu;
                let costs = HostCosts::of(cpu)?;
                let issue = issue_costs(program, &costs, graphs)
                    .into_iter()
                    .fold(SimTime::ZERO, |sum, t| sum + t);
                let kernels = program
                    .ops
                    .iter()
                    .filter_map(|op| match op.kind {
                        OpKind::Compute { kernel } => Some(times[s as usize][kernel as usize]),
                        _ => None,
                    })
                    .fold(SimTime::ZERO, |sum, t| sum + t);
                Ok(HostLoad {
                    cpu: cpu.name(),
                    issue_s: issue.as_secs_f64(),
                    kernels_s: kernels.as_secs_f64(),
                })
            })
            .collect::<Result<Vec<_>, sim_config::ConfigError>>()?;
        Ok(WorkloadReport {
            name: exp.name().to_string(),
            workload,
            stages,
            timing,
            host,
            compile_s,
        })
    }

    fn analytical_bubble(&self) -> f64 {
        let l = &self.workload.layout;
        let m = self.workload.program(0, 0).micro_batches;
        bubble_fraction(l.pp, l.vp, m)
    }

    pub fn to_json(&self) -> WorkloadJson<'_> {
        let w = &self.workload;
        let stages = self
            .stages
            .iter()
            .map(|s| StageJson {
                stage: s.stage,
                class: s.class,
                ranks: s.ranks,
                micro_batches: s.micro_batches,
                layers: w.stage_layers.get(s.stage as usize).copied(),
                ops: OpsJson {
                    total: s.ops,
                    compute: s.compute_ops,
                    collective: s.collective_ops,
                    p2p: s.p2p_ops,
                    distinct_kernels: s.distinct_kernels,
                },
                flops_per_rank: FlopsJson {
                    model: s.model_flops,
                    recompute: s.recompute_flops,
                    other: s.other_flops,
                },
                collectives: s
                    .collectives
                    .iter()
                    .map(|((op, group), t)| CollectiveJson {
                        op: op.name(),
                        group: group.name(),
                        count: t.count,
                        bytes: t.bytes,
                        wire_bytes: t.wire_bytes,
                    })
                    .collect(),
                send_bytes: s.send_bytes,
                recv_bytes: s.recv_bytes,
                cxl_bytes: s.memory_bytes,
                host: self
                    .host
                    .get(s.stage as usize)
                    .copied()
                    .filter(|_| s.class == 0),
            })
            .collect();
        let evaluated = match &self.timing {
            Ok(t) => EvaluatedJson::Timed {
                bubble_fraction: t.bubble_fraction(),
                iteration_s: t.iteration.as_secs_f64(),
            },
            Err(e) => EvaluatedJson::Failed { error: e },
        };
        WorkloadJson {
            name: &self.name,
            source: &w.source,
            parallel: ParallelJson {
                tp: w.layout.tp,
                cp: w.layout.cp,
                ep: w.layout.ep,
                dp: w.layout.dp,
                pp: w.layout.pp,
                vp: w.layout.vp,
            },
            programs: w.programs.len(),
            program_bytes: w.heap_bytes(),
            compile_s: self.compile_s,
            tokens_per_iteration: w.tokens,
            model_flops_per_iteration: total_model_flops(&self.stages),
            hardware_flops_per_iteration: total_hardware_flops(&self.stages),
            bubble_fraction: BubbleJson {
                analytical: self.analytical_bubble(),
                roofline_no_communication: evaluated,
            },
            stages,
        }
    }

    pub fn to_text(&self) -> String {
        let w = &self.workload;
        let l = &w.layout;
        let mut s = String::new();
        let schedule = if l.vp > 1 {
            format!("interleaved 1F1B, {} chunks per stage", l.vp)
        } else {
            "1F1B".to_string()
        };
        let _ = writeln!(s, "workload    {} ({})", self.name, w.source);
        let _ = writeln!(s, "parallel    {l}, {schedule}");
        let _ = writeln!(
            s,
            "programs    {} ({} replica class(es) x {} stages), {:.2} MB, compiled in {:.3} s",
            w.programs.len(),
            w.classes(),
            l.pp,
            w.heap_bytes() as f64 / 1e6,
            self.compile_s
        );
        let _ = writeln!(
            s,
            "iteration   {} tokens; model {:.4e} FLOP (Megatron-LM accounting), hardware {:.4e} FLOP",
            w.tokens,
            total_model_flops(&self.stages),
            total_hardware_flops(&self.stages)
        );
        let evaluated = match &self.timing {
            Ok(t) => format!(
                "{:.4} (roofline kernels, free communication: {:.3} s per iteration)",
                t.bubble_fraction(),
                t.iteration.as_secs_f64()
            ),
            Err(e) => format!("not evaluated: {e}"),
        };
        let _ = writeln!(
            s,
            "bubble      (p-1)/(m*v) = {:.4}; schedule {evaluated}",
            self.analytical_bubble()
        );
        for st in &self.stages {
            let _ = writeln!(
                s,
                "\nstage {} (class {}, {} ranks, {} micro-batches, {} layers)",
                st.stage,
                st.class,
                st.ranks,
                st.micro_batches,
                w.stage_layers.get(st.stage as usize).copied().unwrap_or(0)
            );
            let _ = writeln!(
                s,
                "  ops       {} = {} compute + {} collective + {} send/recv; {} distinct kernels",
                st.ops, st.compute_ops, st.collective_ops, st.p2p_ops, st.distinct_kernels
            );
            let _ = writeln!(
                s,
                "  FLOP/rank model {:.4e}, recompute {:.4e}, memory-bound {:.4e}",
                st.model_flops, st.recompute_flops, st.other_flops
            );
            if let Some(h) = self.host.get(st.stage as usize).filter(|_| st.class == 0) {
                let _ = writeln!(
                    s,
                    "  host      {:.3} s to issue on {} beside {:.3} s of kernels per iteration ({:.2}x{})",
                    h.issue_s,
                    h.cpu,
                    h.kernels_s,
                    h.issue_s / h.kernels_s.max(f64::MIN_POSITIVE),
                    if h.issue_s > h.kernels_s {
                        ": host-bound"
                    } else {
                        ""
                    }
                );
            }
            let _ = writeln!(
                s,
                "  {:<15} {:<10} {:>7} {:>14} {:>14}",
                "collective", "group", "count", "bytes", "wire bytes"
            );
            for ((op, group), t) in &st.collectives {
                let _ = writeln!(
                    s,
                    "  {:<15} {:<10} {:>7} {:>14} {:>14.0}",
                    op.name(),
                    group.name(),
                    t.count,
                    t.bytes,
                    t.wire_bytes
                );
            }
            let _ = writeln!(
                s,
                "  {:<15} {:<10} {:>7} {:>14} {:>14}",
                "send", "pp/cp", "", st.send_bytes, st.send_bytes
            );
        }
        s
    }
}

/// `--out` for a Chakra export names a prefix: `PREFIX.<rank>.et` and `comm_groups.json`
/// are written beside it. A folder (`DIR/`) would give hidden files named `.0.et` with
/// comm_groups.json above them, and an existing file (`/dev/full`) files beside it.
fn check_chakra_prefix(prefix: &std::path::Path) -> anyhow::Result<()> {
    let text = prefix.to_string_lossy();
    let name = prefix.file_name().map(|n| n.to_string_lossy().into_owned());
    let bad = if text.ends_with('/') || prefix.is_dir() {
        Some("is a folder")
    } else if prefix.exists() {
        Some("is an existing file")
    } else if name.is_none_or(|n| n.is_empty() || n == "." || n == "..") {
        Some("names no file")
    } else {
        None
    };
    match bad {
        Some(why) => anyhow::bail!(
            "--out {text} {why}: a Chakra export writes PREFIX.<rank>.et for every rank and comm_groups.json beside them; give a prefix such as {}/trace",
            prefix.display().to_string().trim_end_matches('/')
        ),
        None => Ok(()),
    }
}

/// `fleetsim workload --json`: one workload (or one job's).
#[derive(Debug, Serialize)]
pub struct WorkloadJson<'a> {
    name: &'a str,
    source: &'a str,
    parallel: ParallelJson,
    programs: usize,
    program_bytes: usize,
    compile_s: f64,
    tokens_per_iteration: u64,
    model_flops_per_iteration: f64,
    hardware_flops_per_iteration: f64,
    bubble_fraction: BubbleJson<'a>,
    stages: Vec<StageJson>,
}

/// The jobs of a `[[jobs]]` experiment.
#[derive(Debug, Serialize)]
pub struct JobsJson<'a> {
    jobs: Vec<WorkloadJson<'a>>,
}

#[derive(Debug, Serialize)]
struct ParallelJson {
    tp: u32,
    cp: u32,
    ep: u32,
    dp: u32,
    pp: u32,
    vp: u32,
}

#[derive(Debug, Serialize)]
struct BubbleJson<'a> {
    /// `(pp - 1) / (vp * m)`.
    analytical: f64,
    /// The compiled schedule's, with kernels at the roofline and no communication.
    roofline_no_communication: EvaluatedJson<'a>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum EvaluatedJson<'a> {
    Timed {
        bubble_fraction: f64,
        iteration_s: f64,
    },
    Failed {
        error: &'a str,
    },
}

#[derive(Debug, Serialize)]
struct StageJson {
    stage: u32,
    class: usize,
    ranks: u64,
    micro_batches: u32,
    layers: Option<u64>,
    ops: OpsJson,
    flops_per_rank: FlopsJson,
    collectives: Vec<CollectiveJson>,
    send_bytes: u64,
    recv_bytes: u64,
    cxl_bytes: u64,
    /// Class 0's stages only.
    host: Option<HostLoad>,
}

#[derive(Debug, Serialize)]
struct OpsJson {
    total: u64,
    compute: u64,
    collective: u64,
    p2p: u64,
    distinct_kernels: u64,
}

#[derive(Debug, Serialize)]
struct FlopsJson {
    model: f64,
    recompute: f64,
    other: f64,
}

#[derive(Debug, Serialize)]
struct CollectiveJson {
    op: &'static str,
    group: &'static str,
    count: u64,
    bytes: u64,
    wire_bytes: f64,
}
