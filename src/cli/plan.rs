//! `fleetsim plan`: the heterogeneity-aware planner's search ([`sim::planner`]) ranked by its
//! fast analytical estimate, the best candidates and the experiment as written confirmed with
//! the full engine, and the gain of the best over the naive placement.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Serialize;
use sim::experiment::Experiment;
use sim::planner::{self, Estimated, Placement};
use sim_config::{Origin, Overrides};

use coordinator::run::{RunOptions, load_checked, run_embedded};

use crate::cli::side_by_side;

/// `fleetsim plan`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    pub experiment: PathBuf,
    /// Where plan.json and plan.txt go (optional).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Threads per engine run (0 = the cores other processes leave idle).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Override a key of the experiment file.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let report = plan(
            &self.experiment,
            &Overrides::from_sets(&self.sets)?,
            self.threads,
        )?;
        let text = report.to_text();
        let value = report.to_json();
        if let Some(out) = self.out {
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            for (file, body) in [
                ("plan.txt", text.clone()),
                ("plan.json", serde_json::to_string_pretty(&value)? + "\n"),
            ] {
                let path = out.join(file);
                std::fs::write(&path, body)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        if self.json {
            outln!("{}", serde_json::to_string_pretty(&value)?);
        } else {
            out!("{text}");
        }
        Ok(())
    }
}

/// Candidates besides the experiment as written that the engine confirms.
pub const CONFIRMED: usize = 3;

/// A candidate the engine ran.
#[derive(Debug, Clone)]
pub struct Confirmed {
    /// Index into [`PlanReport::candidates`].
    pub candidate: usize,
    pub iteration_s: f64,
    pub result_digest: String,
}

#[derive(Debug)]
pub struct PlanReport {
    pub name: String,
    /// Every feasible candidate, fastest estimate first.
    pub candidates: Vec<Estimated>,
    /// Engine runs: the experiment as written first, then the best estimates.
    pub confirmed: Vec<Confirmed>,
    /// Index into `confirmed` of the fastest.
    pub best: usize,
    /// Index into `confirmed` of the fastest with the naive placement (uniform layers and
    /// micro-batches, any searched layout).
    pub best_uniform: usize,
    pub search_s: f64,
    pub confirm_s: f64,
}

impl PlanReport {
    /// The naive placement's engine time over the plan's, minus one.
    pub fn gain(&self) -> f64 {
        self.confirmed[0].iteration_s / self.confirmed[self.best].iteration_s - 1.0
    }

    /// The best uniform plan's engine time over the plan's, minus one: what placing work by
    /// device speed adds to the layout search.
    pub fn placement_gain(&self) -> f64 {
        self.confirmed[self.best_uniform].iteration_s / self.confirmed[self.best].iteration_s - 1.0
    }

    pub fn best_experiment(&self) -> &Experiment {
        &self.candidates[self.confirmed[self.best].candidate].experiment
    }

    /// The overrides that turn the file as written into the best plan.
    pub fn best_overrides(&self) -> Overrides {
        let c = &self.candidates[self.confirmed[self.best].candidate];
        let l = &c.experiment.layout;
        c.candidate.overrides(l.world(), l.cp)
    }

    fn best_sets(&self) -> Vec<String> {
        self.best_overrides().to_assignments()
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "plan {}: {} candidates estimated in {:.1} s, {} confirmed by the engine in {:.1} s",
            self.name,
            self.candidates.len(),
            self.search_s,
            self.confirmed.len(),
            self.confirm_s
        );
        let _ = writeln!(s, "\nbest estimates (fast analytical model):");
        for e in self.candidates.iter().take(8) {
            let _ = writeln!(s, "  {:>9.4} s  {}", e.estimate_s, e.candidate.describe());
        }
        let _ = writeln!(s, "\nconfirmed (full engine):");
        for (i, c) in self.confirmed.iter().enumerate() {
            let e = &self.candidates[c.candidate];
            let mark = if i == self.best { "*" } else { " " };
            let what = if i == 0 {
                "as written (naive)".to_string()
            } else {
                e.candidate.describe()
            };
            let _ = writeln!(
                s,
                "{mark} {:>9.4} s  (estimate {:.4} s)  {what}",
                c.iteration_s, e.estimate_s
            );
        }
        let best = &self.candidates[self.confirmed[self.best].candidate];
        let _ = writeln!(
            s,
            "\nplan: {}\npredicted gain over naive: {:+.1}% ({:.4} s -> {:.4} s per iteration)",
            best.candidate.describe(),
            self.gain() * 100.0,
            self.confirmed[0].iteration_s,
            self.confirmed[self.best].iteration_s
        );
        let _ = writeln!(
            s,
            "of which placement by device speed: {:+.1}% over the best uniform plan ({:.4} s)",
            self.placement_gain() * 100.0,
            self.confirmed[self.best_uniform].iteration_s
        );
        let sets = self.best_sets();
        if self.best != 0 {
            let _ = writeln!(s, "run it with:");
            for set in &sets {
                let _ = writeln!(s, "  --set '{set}'");
            }
        }
        s
    }

    pub fn to_json<'r>(&'r self) -> PlanJson<'r> {
        let candidate = |e: &'r Estimated| CandidateJson {
            placement: e.candidate.placement.name(),
            tp: e.candidate.tp,
            pp: e.candidate.pp,
            vp: e.candidate.vp,
            micro_batch: e.candidate.micro_batch,
            order: &e.candidate.order,
            dp: e.experiment.layout.dp,
            stage_layers: &e.experiment.stage_layers,
            replica_micro_batches: &e.experiment.replica_micro_batches,
            estimate_s: e.estimate_s,
        };
        PlanJson {
            name: &self.name,
            candidates: self.candidates.len(),
            search_s: self.search_s,
            confirm_s: self.confirm_s,
            confirmed: self
                .confirmed
                .iter()
                .map(|c| ConfirmedJson {
                    candidate: candidate(&self.candidates[c.candidate]),
                    iteration_time_s: c.iteration_s,
                    result_digest: &c.result_digest,
                })
                .collect(),
            naive_iteration_time_s: self.confirmed[0].iteration_s,
            plan_iteration_time_s: self.confirmed[self.best].iteration_s,
            gain: self.gain(),
            uniform_iteration_time_s: self.confirmed[self.best_uniform].iteration_s,
            placement_gain: self.placement_gain(),
            plan: candidate(&self.candidates[self.confirmed[self.best].candidate]),
            sets: self.best_sets(),
        }
    }
}

/// `plan.json` and `plan --json`.
#[derive(Debug, Serialize)]
pub struct PlanJson<'a> {
    name: &'a str,
    /// Candidates the search estimated.
    candidates: usize,
    search_s: f64,
    confirm_s: f64,
    /// The candidates the engine ran, the experiment as written first.
    confirmed: Vec<ConfirmedJson<'a>>,
    naive_iteration_time_s: f64,
    plan_iteration_time_s: f64,
    gain: f64,
    uniform_iteration_time_s: f64,
    placement_gain: f64,
    plan: CandidateJson<'a>,
    /// The `--set` overrides that run the plan.
    sets: Vec<String>,
}

/// One candidate layout and its estimate.
#[derive(Debug, Serialize)]
struct CandidateJson<'a> {
    placement: &'static str,
    tp: u32,
    pp: u32,
    vp: u32,
    micro_batch: u32,
    order: &'a str,
    dp: u32,
    stage_layers: &'a [u64],
    replica_micro_batches: &'a [u64],
    estimate_s: f64,
}

/// A candidate the engine ran.
#[derive(Debug, Serialize)]
struct ConfirmedJson<'a> {
    #[serde(flatten)]
    candidate: CandidateJson<'a>,
    iteration_time_s: f64,
    result_digest: &'a str,
}

/// What `engine.planner` asks of `exp`, loaded from `path` with the user's `overrides`:
/// under `"hetero"`, the plan's best experiment (its search printed unless `quiet`) and the
/// overrides that give it from the file (with the planner off, for processes that load the
/// file again, as gRPC workers do); otherwise `exp` unchanged and no override. `run`,
/// `coordinator` and `sweep` all come through here.
pub fn as_planned(
    path: &Path,
    overrides: &Overrides,
    exp: Experiment,
    threads: Option<usize>,
    quiet: bool,
) -> anyhow::Result<(Experiment, Overrides)> {
    if exp.loaded.config.engine.planner != sim_config::Planner::Hetero {
        return Ok((exp, Overrides::none()));
    }
    let report = plan(path, overrides, threads)?;
    if !quiet {
        eprint!("{}", report.to_text());
    }
    let planned = with_naive(&Overrides::none(), &report.best_overrides());
    Ok((report.best_experiment().clone(), planned))
}

/// Searches `path` (with the user's `overrides`) and confirms the best estimates with the
/// engine.
pub fn plan(
    path: &Path,
    overrides: &Overrides,
    threads: Option<usize>,
) -> anyhow::Result<PlanReport> {
    let base = load_checked(path, &with_naive(overrides, &Overrides::none()))?;
    if !base.jobs.is_empty() {
        return Err(base
            .loaded
            .error(
                "jobs",
                "the heterogeneity planner places one job; remove [[jobs]] or plan each job in an experiment of its own",
            )
            .into());
    }
    let compute = base.compute_model()?;
    let started = std::time::Instant::now();
    let load = |candidate: &Overrides| Experiment::load(path, &with_naive(overrides, candidate));
    let candidates = planner::search(&base, &compute, &load)?;
    let search_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    // The experiment as written is always confirmed: the plan can only beat it or be it.
    let as_written = candidates.iter().position(|e| e.as_written).unwrap_or(0);
    // The best uniform plan (naive placement, searched layout) tells how much of the gain is
    // the layout search alone and how much is heterogeneity-aware placement.
    let uniform = candidates
        .iter()
        .position(|e| !e.as_written && e.candidate.placement == Placement::Naive);
    let mut order = vec![as_written];
    order.extend(uniform);
    order.extend(
        (0..candidates.len())
            .filter(|&i| i != as_written && Some(i) != uniform)
            .take(CONFIRMED),
    );
    // The confirmations are independent runs: side by side, each on its share of the cores,
    // handed back in `order` (their digests do not depend on the threads).
    let (jobs, threads) = side_by_side::shares(order.len(), None, threads);
    let options = RunOptions {
        threads: Some(threads),
        ..RunOptions::default()
    };
    let confirm = |i: usize| {
        run_embedded(&candidates[i].experiment, &options, None).map(|out| Confirmed {
            candidate: i,
            iteration_s: out.summary.iteration_time_s,
            result_digest: out.summary.result_digest,
        })
    };
    let mut confirmed = Vec::with_capacity(order.len());
    side_by_side::in_order(order, jobs, confirm, |run| {
        confirmed.push(run?);
        Ok(())
    })?;
    let fastest = |keep: &dyn Fn(&Confirmed) -> bool| {
        (0..confirmed.len())
            .filter(|&i| keep(&confirmed[i]))
            .min_by(|&a, &b| {
                confirmed[a]
                    .iteration_s
                    .total_cmp(&confirmed[b].iteration_s)
            })
            .unwrap_or(0)
    };
    let best = fastest(&|_| true);
    let best_uniform =
        fastest(&|c| candidates[c.candidate].candidate.placement == Placement::Naive);
    Ok(PlanReport {
        name: base.name().to_string(),
        candidates,
        confirmed,
        best,
        best_uniform,
        search_s,
        confirm_s: started.elapsed().as_secs_f64(),
    })
}

/// The user's overrides, then the plan's, with the planner itself off for the runs.
/// The user's overrides, then a candidate's, each placed as written (the planner places
/// nothing twice).
fn with_naive(user: &Overrides, candidate: &Overrides) -> Overrides {
    let mut naive = Overrides::none();
    naive.set(
        "engine.planner",
        "naive",
        &Origin::Derived("the planner's candidates".into()),
    );
    user.clone().then(candidate).then(&naive)
}
