//! `fleetsim sweep`: the cross product of `--vary KEY=V1,V2,...` settings, each run embedded,
//! in one table (`sweep.csv`) and one plot (`sweep.svg`).
//!
//! Across a farm (`--slurm`) the sweep becomes one Slurm array job: the sweep's folder gets
//! a manifest (`sweep.json`: the experiment, its settings, every point) and an sbatch
//! script whose task `i` runs point `i` (`fleetsim sweep --point DIR`) into `points/NNNN/`;
//! `fleetsim sweep --collect DIR` then reads every point's `summary.json` into the same
//! table and plot a local sweep writes.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context as _;

use serde::{Deserialize, Serialize};
use sim::experiment::Experiment;

use coordinator::output::plot::{LineChart, PlotError, Series, line_chart_svg};
use coordinator::output::report::write_outputs;
use coordinator::output::summary::Summary;
use coordinator::output::table::CsvTable;
use coordinator::run::{RunError, RunOptions, RunOutput, load_checked, run_embedded};
use sim_config::{ConfigError, Origin, Overrides};

use crate::cli::side_by_side;

/// `fleetsim sweep`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    #[arg(required_unless_present_any = ["collect", "point"])]
    pub experiment: Option<PathBuf>,
    /// KEY=V1,V2,...: a dotted key of the experiment file and the values it takes, e.g.
    /// --vary engine.partition=by-host,metis --vary engine.workers=1,2,4.
    #[arg(long, value_parser = parse_vary, required_unless_present_any = ["collect", "point"])]
    pub vary: Vec<Vary>,
    /// Where sweep.csv and sweep.svg go (with --slurm: the sweep's folder, which every
    /// node must see). Default: runs/<experiment name>-sweep.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The column of sweep.csv the plot shows (default: iteration_time_s, or wall_s when
    /// only engine.* keys vary), e.g. batches_per_s. (`--plot` also works.)
    #[arg(long = "plot-column", alias = "plot", value_name = "COLUMN")]
    pub plot: Option<String>,
    /// Override a key of the experiment file for every run.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Submit the sweep as one Slurm array job (one task per point, results in
    /// OUT/points/NNNN) instead of running it here.
    #[arg(long)]
    pub slurm: bool,
    /// An option for sbatch when submitting with --slurm, e.g. --sbatch-arg=--time=60
    /// --sbatch-arg=--partition=gpu (overrides the script's own #SBATCH lines).
    #[arg(
        long = "sbatch-arg",
        value_name = "OPTION",
        allow_hyphen_values = true,
        requires = "slurm"
    )]
    pub sbatch_args: Vec<String>,
    /// Write sweep.csv and sweep.svg in DIR from the points a --slurm sweep ran there.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["experiment", "vary", "out", "sets", "slurm", "point"])]
    pub collect: Option<PathBuf>,
    /// Run one point of the --slurm sweep in DIR (what each array task runs): the one
    /// --index names, else SLURM_ARRAY_TASK_ID's.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["experiment", "vary", "out", "sets", "slurm", "plot"])]
    pub point: Option<PathBuf>,
    /// With --point: which point (0-based).
    #[arg(long, requires = "point")]
    pub index: Option<usize>,
    /// With [[jobs]]: skip running each job alone on its hosts, which gives its slowdown
    /// (the job.NAME.alone_iteration_time_s and slowdown columns stay empty).
    #[arg(long, conflicts_with_all = ["collect", "point"])]
    pub no_alone: bool,
    /// Points simulated at once, each on its share of the cores (points are independent:
    /// each gives the same result whatever runs beside it, but not the same wall time).
    /// Default: the machine's cores, at most one per point; one at a time when an engine.*
    /// key varies, whose points are compared by wall time and run with their own threads.
    #[arg(long, conflicts_with_all = ["collect", "point", "slurm"])]
    pub jobs: Option<usize>,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let y = self
            .plot
            .as_deref()
            .map(|c| plot_column(c).map_err(anyhow::Error::msg))
            .transpose()?;
        let alone = !self.no_alone;
        if let Some(dir) = self.point {
            return sweep_point(&dir, self.index);
        }
        if let Some(dir) = self.collect {
            let manifest = SweepManifest::read(&dir)?;
            let rows = manifest.collect(&dir)?;
            if let Some(y) = &y {
                y.check_jobs(&manifest.job_names()?)
                    .map_err(anyhow::Error::msg)?;
            }
            return write_sweep(&dir, &manifest.varies, &rows, y.as_ref());
        }
        let Some(experiment) = self.experiment else {
            anyhow::bail!("sweep needs an experiment file");
        };
        let (sets, vary) = (self.sets, self.vary);
        check_distinct_keys(&vary).map_err(anyhow::Error::msg)?;
        let out = match self.out {
            Some(out) => out,
            None => {
                let name = Experiment::load(&experiment, &Overrides::from_sets(&sets)?)?
                    .name()
                    .to_string();
                PathBuf::from("runs").join(format!("{name}-sweep"))
            }
        };
        if self.slurm {
            let manifest = SweepManifest::new(&experiment, &sets, &vary, alone)?;
            if let Some(y) = &y {
                y.check_jobs(&manifest.job_names()?)
                    .map_err(anyhow::Error::msg)?;
            }
            let fleetsim = std::env::current_exe().context("locating this fleetsim binary")?;
            let workdir = std::env::current_dir().context("reading the working directory")?;
            let script = manifest.write_array_job(&out, &fleetsim, &workdir)?;
            let job = submit(&script, &self.sbatch_args)?;
            outln!(
                "sweep: {} point(s) submitted as Slurm array job {job} ({}); when it is done: fleetsim sweep --collect {}",
                manifest.points.len(),
                script.display(),
                out.display()
            );
            return Ok(());
        }
        // Proven writable before the first point runs, not after the last.
        let out = crate::cli::run::writable_dir(out)?;
        let points = load_points(&experiment, &sets, &vary)?
            .into_iter()
            .map(|(settings, exp)| {
                let exp = planned_point(&experiment, &sets, &settings, exp)?;
                Ok((settings, exp))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        if let Some(y) = &y {
            y.check_jobs(&job_names(&points))
                .map_err(anyhow::Error::msg)?;
        }
        // sweep.csv holds every finished row before its line is printed: a reader of the
        // pipe finds what it was told of, and one that has gone stops nothing.
        let csv = out.join("sweep.csv");
        let engine_varies = vary
            .iter()
            .any(|v| v.key.split('+').any(|k| k.trim().starts_with("engine.")));
        let jobs = match (self.jobs, engine_varies) {
            (Some(j), true) if j > 1 => anyhow::bail!(
                "--jobs {j}: an engine.* key varies, and its points are compared by wall time and threads, which points run side by side would change; leave --jobs out (one point at a time) or vary no engine.* key"
            ),
            (_, true) => Some(1),
            (jobs, false) => jobs,
        };
        let rows = run_sweep(points, alone, jobs, |rows| {
            std::fs::write(&csv, to_csv(&vary, rows))
                .with_context(|| format!("writing {}", csv.display()))?;
            if let Some(r) = rows.last() {
                outln!("{}", row_line(r));
            }
            Ok(())
        })?;
        write_sweep(&out, &vary, &rows, y.as_ref())
    }
}

fn parse_vary(s: &str) -> Result<Vary, String> {
    s.parse()
}

/// One point of a `--slurm` sweep: `index`, else the array task's.
fn sweep_point(dir: &Path, index: Option<usize>) -> anyhow::Result<()> {
    use SweepManifest;
    let index = match index {
        Some(i) => i,
        None => {
            let id = std::env::var("SLURM_ARRAY_TASK_ID").map_err(|_| {
                anyhow::anyhow!(
                    "--point: SLURM_ARRAY_TASK_ID is not set; run it as a task of the sweep's array job, or name the point with --index N"
                )
            })?;
            id.trim().parse().map_err(|_| {
                anyhow::anyhow!("--point: SLURM_ARRAY_TASK_ID `{id}` is not a point number")
            })?
        }
    };
    let manifest = SweepManifest::read(dir)?;
    // A task takes the CPUs Slurm gave it; other tasks of the array may share the node.
    let threads = coordinator::slurm::cpus_per_task(|k| std::env::var(k).ok());
    let options = RunOptions {
        threads,
        ..Default::default()
    };
    let row = manifest.run_point(dir, index, &options)?;
    outln!("point {index}: {}", row_line(&row));
    Ok(())
}

/// `sweep.csv` and `sweep.svg` in `out`.
fn write_sweep(
    out: &Path,
    varies: &[Vary],
    rows: &[SweepRow],
    y: Option<&PlotColumn>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let csv = out.join("sweep.csv");
    std::fs::write(&csv, to_csv(varies, rows))
        .with_context(|| format!("writing {}", csv.display()))?;
    let svg = plot_svg(varies, rows, y).map_err(|e| anyhow::anyhow!("plotting the sweep: {e}"))?;
    let plot = out.join("sweep.svg");
    std::fs::write(&plot, svg).with_context(|| format!("writing {}", plot.display()))?;
    outln!("sweep: {} run(s) in {}", rows.len(), out.display());
    Ok(())
}

/// One `--vary KEY=V1,V2,...`. Keys joined by `+` vary together, their values joined the
/// same way: `--vary 'cluster.gpus+cluster.cxl.hosts_per_switch=64+8,128+16'`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vary {
    pub key: String,
    pub values: Vec<String>,
}

impl FromStr for Vary {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (key, values) = s.split_once('=').ok_or_else(|| {
            format!("`{s}` is not KEY=V1,V2,...; e.g. --vary engine.workers=1,2,4")
        })?;
        let key = key.trim();
        let values: Vec<String> = values
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if key.is_empty() || values.is_empty() {
            return Err(format!(
                "`{s}` needs a key and at least one value; e.g. --vary engine.partition=by-host,metis"
            ));
        }
        let keys = key.split('+').count();
        if let Some(v) = values.iter().find(|v| v.split('+').count() != keys) {
            return Err(format!(
                "`{v}` has {} part(s) but `{key}` names {keys} keys; join one value per key with +",
                v.split('+').count()
            ));
        }
        Ok(Vary {
            key: key.to_string(),
            values,
        })
    }
}

/// Refuses a key that two `--vary`s name: the later would silently win over the
/// earlier at every point, whose rows would then be labelled with values never run.
pub fn check_distinct_keys(varies: &[Vary]) -> Result<(), String> {
    let mut seen: Vec<&str> = Vec::new();
    for v in varies {
        for key in v.key.split('+').map(str::trim) {
            if seen.contains(&key) {
                return Err(format!(
                    "--vary: `{key}` is varied twice; give all its values in one --vary {key}=V1,V2,..."
                ));
            }
            seen.push(key);
        }
    }
    Ok(())
}

/// The `KEY=VALUE` overrides of one setting (several when keys vary together).
pub fn overrides(key: &str, value: &str) -> Vec<String> {
    key.split('+')
        .zip(value.split('+'))
        .map(|(k, v)| format!("{}={}", k.trim(), v.trim()))
        .collect()
}

/// Every combination of the varied values, the first `--vary` changing slowest.
pub fn combinations(varies: &[Vary]) -> Vec<Vec<(String, String)>> {
    let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for v in varies {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                v.values.iter().map(move |value| {
                    let mut next = c.clone();
                    next.push((v.key.clone(), value.clone()));
                    next
                })
            })
            .collect();
    }
    combos
}

/// One run of the sweep: its settings and what it measured.
#[derive(Debug, Clone)]
pub struct SweepRow {
    pub settings: Vec<(String, String)>,
    pub summary: Summary,
}

/// One point's `(key, value)` for each `--vary`.
pub type Settings = Vec<(String, String)>;

/// A point's experiment: the sweep's `--set`s, then the point's `--vary` values; an error
/// names the point's combination and the flag that gave the value.
fn load_point_experiment(
    path: &Path,
    sets: &[String],
    settings: &[(String, String)],
) -> Result<Experiment, RunError> {
    let point = |error: RunError| RunError::Point {
        point: point_name(settings),
        error: Box::new(error),
    };
    let overrides = point_overrides(sets, settings).map_err(|e| point(e.into()))?;
    load_checked(path, &overrides).map_err(point)
}

/// A point's `--vary` values as `KEY=VALUE` texts, as one would type them.
fn point_varies(settings: &[(String, String)]) -> Vec<String> {
    settings.iter().flat_map(|(k, v)| overrides(k, v)).collect()
}

/// A point's `--vary` values on one line, for messages.
fn point_name(settings: &[(String, String)]) -> String {
    point_varies(settings).join(" ")
}

/// The sweep's `--set`s, then the point's `--vary` values.
fn point_overrides(
    sets: &[String],
    settings: &[(String, String)],
) -> Result<Overrides, ConfigError> {
    let varies = Overrides::from_assignments(&point_varies(settings), &Origin::Vary)?;
    Ok(Overrides::from_sets(sets)?.then(&varies))
}

/// A loaded point as `engine.planner` asks (`fleetsim plan`'s best layout under `"hetero"`,
/// searched quietly), as `run` would run it.
fn planned_point(
    path: &Path,
    sets: &[String],
    settings: &[(String, String)],
    exp: Experiment,
) -> anyhow::Result<Experiment> {
    let overrides = point_overrides(sets, settings)?;
    let (exp, _) = crate::cli::plan::as_planned(path, &overrides, exp, None, true)
        .with_context(|| format!("sweep point {}", point_name(settings)))?;
    Ok(exp)
}

/// Every combination of `varies` on top of `sets`, loaded and checked, so that a bad value
/// stops the sweep at once rather than hours in.
pub fn load_points(
    path: &Path,
    sets: &[String],
    varies: &[Vary],
) -> Result<Vec<(Settings, Experiment)>, RunError> {
    combinations(varies)
        .into_iter()
        .map(|combo| {
            let exp = load_point_experiment(path, sets, &combo)?;
            Ok((combo, exp))
        })
        .collect()
}

/// One point of a sweep, embedded; with `[[jobs]]` and `alone`, each job alone too, for
/// its slowdown.
fn run_point_embedded(
    exp: &Experiment,
    options: &RunOptions,
    alone: bool,
) -> Result<RunOutput, RunError> {
    let mut output = run_embedded(exp, options, None)?;
    if alone {
        coordinator::run::run_jobs_alone(exp, options, &mut output)?;
    }
    Ok(output)
}

/// Runs every point ([`load_points`]), `jobs` at once ([`side_by_side`]); `on_rows` sees
/// the rows done so far, in the points' order, each time one is added.
pub fn run_sweep(
    points: Vec<(Settings, Experiment)>,
    alone: bool,
    jobs: Option<usize>,
    mut on_rows: impl FnMut(&[SweepRow]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<SweepRow>> {
    let (jobs, threads) = side_by_side::shares(points.len(), jobs, None);
    let options = RunOptions {
        // One point at a time keeps each point's own engine.threads.
        threads: (jobs > 1).then_some(threads),
        ..Default::default()
    };
    let run_point = |(settings, exp): (Settings, Experiment)| {
        run_point_embedded(&exp, &options, alone).map(|output| SweepRow {
            settings,
            summary: output.summary,
        })
    };
    let mut rows = Vec::new();
    side_by_side::in_order(points, jobs, run_point, |row| {
        rows.push(row?);
        on_rows(&rows)
    })?;
    Ok(rows)
}

/// The job names of the first point's `[[jobs]]` (empty without jobs).
fn job_names(points: &[(Settings, Experiment)]) -> Vec<String> {
    points.first().map_or_else(Vec::new, |(_, exp)| {
        exp.jobs.iter().map(|j| j.name.clone()).collect()
    })
}

/// The manifest a sweep across a farm leaves in its folder, for its tasks and `--collect`.
pub const MANIFEST: &str = "sweep.json";
/// The sbatch script `--slurm` writes and submits.
pub const SBATCH_SCRIPT: &str = "sweep.sbatch";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepManifest {
    /// The experiment file, absolute: the tasks may start elsewhere.
    pub experiment: PathBuf,
    /// `--set`s every point runs with.
    pub sets: Vec<String>,
    pub varies: Vec<Vary>,
    /// Each point's settings, in task order.
    pub points: Vec<Settings>,
    /// With [[jobs]]: each point runs each job alone too (not `--no-alone`).
    #[serde(default = "run_alone")]
    pub alone: bool,
}

fn run_alone() -> bool {
    true
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// `error` is not a `source`: the message holds it, and `{:#}` would repeat it.
    #[error("{what} {}: {error}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {why}", path.display())]
    Manifest { path: PathBuf, why: String },
    #[error(
        "{} of {total} point(s) in {} have no readable summary.json: {}; wait for the array job (squeue), or rerun a failed point with `fleetsim sweep --point {} --index N`",
        missing.len(),
        dir.display(),
        missing.iter().take(8).map(|(i, why)| format!("point {i} ({why})")).collect::<Vec<_>>().join(", ")
            + if missing.len() > 8 { ", ..." } else { "" },
        dir.display()
    )]
    Incomplete {
        dir: PathBuf,
        total: usize,
        missing: Vec<(usize, String)>,
    },
    #[error("the sweep has {points} point(s), 0 to {}; there is no point {index}", points.saturating_sub(1))]
    NoSuchPoint { index: usize, points: usize },
    #[error("sbatch failed: {0}")]
    Submit(String),
    #[error(transparent)]
    Run(#[from] RunError),
    /// `engine.planner = "hetero"` could not plan a point (the planner's own error, whole).
    #[error("{0}")]
    Plan(String),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SweepError + 'a {
    move |error| SweepError::Io {
        what,
        path: path.to_path_buf(),
        error,
    }
}

/// Where point `index` of the sweep in `dir` writes its results.
pub fn point_dir(dir: &Path, index: usize) -> PathBuf {
    dir.join("points").join(format!("{index:04}"))
}

impl SweepManifest {
    /// Checks every point (see [`load_points`]) and records them.
    pub fn new(
        experiment: &Path,
        sets: &[String],
        varies: &[Vary],
        alone: bool,
    ) -> Result<Self, SweepError> {
        let points = load_points(experiment, sets, varies)?
            .into_iter()
            .map(|(combo, _)| combo)
            .collect();
        let experiment = std::path::absolute(experiment).map_err(io("locating", experiment))?;
        Ok(SweepManifest {
            experiment,
            sets: sets.to_vec(),
            varies: varies.to_vec(),
            points,
            alone,
        })
    }

    /// The job names of the first point's `[[jobs]]` (empty without jobs).
    pub fn job_names(&self) -> Result<Vec<String>, SweepError> {
        if self.points.is_empty() {
            return Ok(Vec::new());
        }
        let exp = self.load_point(0)?;
        Ok(exp.jobs.iter().map(|j| j.name.clone()).collect())
    }

    pub fn read(dir: &Path) -> Result<Self, SweepError> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| SweepError::Manifest {
            path: path.clone(),
            why: format!(
                "{e}; is {} a sweep folder written by `fleetsim sweep ... --slurm`?",
                dir.display()
            ),
        })?;
        serde_json::from_str(&text).map_err(|e| SweepError::Manifest {
            path,
            why: format!(
                "not a sweep manifest ({e}); write it again with `fleetsim sweep ... --slurm`"
            ),
        })
    }

    /// Point `index` loaded and checked.
    pub fn load_point(&self, index: usize) -> Result<Experiment, SweepError> {
        let settings = self.points.get(index).ok_or(SweepError::NoSuchPoint {
            index,
            points: self.points.len(),
        })?;
        Ok(load_point_experiment(
            &self.experiment,
            &self.sets,
            settings,
        )?)
    }

    /// Runs point `index` with `options` and writes its results into [`point_dir`].
    pub fn run_point(
        &self,
        dir: &Path,
        index: usize,
        options: &RunOptions,
    ) -> Result<SweepRow, SweepError> {
        // Loaded first: it names a point that is not there.
        let loaded = self.load_point(index)?;
        let exp = planned_point(&self.experiment, &self.sets, &self.points[index], loaded)
            .map_err(|e| SweepError::Plan(format!("{e:#}")))?;
        let output = run_point_embedded(&exp, options, self.alone)?;
        let out = point_dir(dir, index);
        write_outputs(&out, &exp, &output).map_err(io("writing the results to", &out))?;
        Ok(SweepRow {
            settings: self.points[index].clone(),
            summary: output.summary,
        })
    }

    /// Every point's row from its `summary.json`; names every point that has none.
    pub fn collect(&self, dir: &Path) -> Result<Vec<SweepRow>, SweepError> {
        let mut rows = Vec::new();
        let mut missing = Vec::new();
        for (i, settings) in self.points.iter().enumerate() {
            let path = point_dir(dir, i).join("summary.json");
            let summary = std::fs::read_to_string(&path)
                .map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        format!("not run yet, or failed: logs/{i:04}.out")
                    }
                    _ => e.to_string(),
                })
                .and_then(|t| {
                    Summary::from_json_text(&t).map_err(|e| format!("summary.json unreadable: {e}"))
                });
            match summary {
                Ok(summary) => rows.push(SweepRow {
                    settings: settings.clone(),
                    summary,
                }),
                Err(why) => missing.push((i, why)),
            }
        }
        if missing.is_empty() {
            Ok(rows)
        } else {
            Err(SweepError::Incomplete {
                dir: dir.to_path_buf(),
                total: self.points.len(),
                missing,
            })
        }
    }

    /// Writes the manifest and the array job's script into `dir`; returns the script.
    /// `fleetsim`: the binary every task runs; `workdir`: where tasks start (relative paths
    /// in the experiment's settings are relative to it).
    pub fn write_array_job(
        &self,
        dir: &Path,
        fleetsim: &Path,
        workdir: &Path,
    ) -> Result<PathBuf, SweepError> {
        let dir = std::path::absolute(dir).map_err(io("locating", dir))?;
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(io("creating", &logs))?;
        let manifest = dir.join(MANIFEST);
        let text = serde_json::to_string_pretty(self).unwrap_or_default() + "\n";
        std::fs::write(&manifest, text).map_err(io("writing", &manifest))?;
        let script = dir.join(SBATCH_SCRIPT);
        std::fs::write(&script, self.sbatch_script(&dir, fleetsim, workdir))
            .map_err(io("writing", &script))?;
        Ok(script)
    }

    /// One array task per point; each writes `points/NNNN/` and logs to `logs/NNNN.out`.
    /// Options given to `sbatch` itself (`--sbatch-arg`) override these lines.
    fn sbatch_script(&self, dir: &Path, fleetsim: &Path, workdir: &Path) -> String {
        let name = self
            .experiment
            .file_stem()
            .map_or("sweep".into(), |s| s.to_string_lossy());
        format!(
            "#!/bin/bash
# Written by `fleetsim sweep ... --slurm`: task i runs point i of {manifest}.
# Collect the results with: {fleetsim} sweep --collect {dir}
#SBATCH --job-name=fleetsim-sweep-{name}
#SBATCH --array=0-{last}
#SBATCH --ntasks=1
#SBATCH --output={dir}/logs/%4a.out
#SBATCH --chdir={workdir}
set -euo pipefail
exec {fleetsim} sweep --point {dir}
",
            manifest = dir.join(MANIFEST).display(),
            last = self.points.len().saturating_sub(1),
            dir = dir.display(),
            fleetsim = fleetsim.display(),
            workdir = workdir.display(),
        )
    }
}

/// Submits `script` with `sbatch --parsable` and the caller's own `sbatch` options; returns
/// the job id.
pub fn submit(script: &Path, sbatch_args: &[String]) -> Result<String, SweepError> {
    let out = std::process::Command::new("sbatch")
        .arg("--parsable")
        .args(sbatch_args)
        .arg(script)
        .output()
        .map_err(|e| {
            SweepError::Submit(format!(
                "{e}; is Slurm installed here? The job's script is {}; submit it by hand with sbatch",
                script.display()
            ))
        })?;
    if !out.status.success() {
        return Err(SweepError::Submit(format!(
            "{} (script {})",
            String::from_utf8_lossy(&out.stderr).trim(),
            script.display()
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() {
        return Err(SweepError::Submit(format!(
            "it printed no job id (script {})",
            script.display()
        )));
    }
    Ok(id)
}

/// One measured value of a sweep point, as `sweep.csv` writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Number(f64),
    Count(u64),
    Text(String),
    /// Not measured in this run (a lookahead with one partition).
    Absent,
}

impl Cell {
    fn csv(&self) -> String {
        match self {
            Cell::Number(f) => format!("{f:.6}"),
            Cell::Count(n) => n.to_string(),
            Cell::Text(t) => t.clone(),
            Cell::Absent => String::new(),
        }
    }

    /// The value on a plot's axis; None for text.
    pub fn number(&self) -> Option<f64> {
        match self {
            Cell::Number(f) => Some(*f),
            Cell::Count(n) => Some(*n as f64),
            Cell::Text(_) | Cell::Absent => None,
        }
    }
}

/// A measured column of `sweep.csv`: its header, where summary.json holds it, and whether
/// it holds numbers (which a plot can show) or text.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub numeric: bool,
    pub value: fn(&Summary) -> Cell,
}

macro_rules! columns {
    ($($name:literal => $kind:ident |$s:ident| $value:expr),* $(,)?) => {
        [$(Column {
            name: $name,
            numeric: columns!(@numeric $kind),
            value: |$s: &Summary| $value,
        }),*]
    };
    (@numeric number) => { true };
    (@numeric text) => { false };
}

/// The measured columns, in `sweep.csv`'s order.
const COLUMNS: [Column; 20] = columns![
    "iteration_time_s" => number |s| Cell::Number(s.iteration_time_s),
    "batches_per_s" => number |s| Cell::Number(s.batches_per_s),
    "samples_per_s" => number |s| s.samples_per_s.map_or(Cell::Absent, Cell::Number),
    "mfu" => number |s| s.mfu.map_or(Cell::Absent, Cell::Number),
    "result_digest" => text |s| Cell::Text(s.result_digest.clone()),
    "tflops_per_gpu" => number |s| s.tflops_per_gpu.map_or(Cell::Absent, Cell::Number),
    "compute_s" => number |s| Cell::Number(s.breakdown_s.compute),
    "exposed_comm_s" => number |s| Cell::Number(s.breakdown_s.exposed_comm),
    "bubble_s" => number |s| Cell::Number(s.breakdown_s.bubble),
    "wall_s" => number |s| Cell::Number(s.engine.wall_s),
    "events" => number |s| Cell::Count(s.engine.events),
    "windows" => number |s| Cell::Count(s.engine.windows),
    "events_per_window" => number |s| Cell::Number(s.engine.events_per_window),
    "cross_partition_events" => number |s| Cell::Count(s.engine.cross_partition_events),
    "sync_fraction" => number |s| Cell::Number(s.engine.sync_fraction),
    "scheduling" => text |s| Cell::Text(s.engine.scheduling.clone()),
    "thread_wait_s" => number |s| Cell::Number(s.engine.thread_wait_s),
    "partitions" => number |s| Cell::Count(u64::from(s.engine.partitions)),
    "lookahead_s" => number |s| s.engine.lookahead_s.map_or(Cell::Absent, Cell::Number),
    "peak_rss_bytes" => number |s| Cell::Count(s.engine.peak_rss_bytes),
];

/// `sweep.csv`: the varied keys, then the measured columns.
pub fn to_csv(varies: &[Vary], rows: &[SweepRow]) -> String {
    // With [[jobs]]: each job's iteration, alone and slowdown, by the first row's job names.
    let jobs: Vec<String> = rows
        .first()
        .and_then(|r| r.summary.jobs.as_ref())
        .map_or_else(Vec::new, |jobs| {
            jobs.iter().map(|j| j.name.clone()).collect()
        });
    let job_columns: Vec<String> = jobs
        .iter()
        .flat_map(|name| {
            ["iteration_time_s", "alone_iteration_time_s", "slowdown"]
                .map(|what| format!("job.{name}.{what}"))
        })
        .collect();
    let mut table = CsvTable::new(
        varies
            .iter()
            .map(|v| v.key.as_str())
            .chain(COLUMNS.iter().map(|c| c.name))
            .chain(job_columns.iter().map(String::as_str)),
    );
    let number = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for r in rows {
        let job_values = jobs.iter().flat_map(|name| {
            let job = r.summary.jobs.iter().flatten().find(|j| &j.name == name);
            [
                number(job.map(|j| j.iteration_time_s)),
                number(job.and_then(|j| j.alone_iteration_time_s)),
                number(job.and_then(|j| j.slowdown)),
            ]
        });
        table.row(
            r.settings
                .iter()
                .map(|(_, v)| v.clone())
                .chain(COLUMNS.iter().map(|c| (c.value)(&r.summary).csv()))
                .chain(job_values),
        );
    }
    table.finish()
}

/// One line per row as a run finishes, for the terminal.
pub fn row_line(r: &SweepRow) -> String {
    let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let (s, e) = (&r.summary, &r.summary.engine);
    let jobs: String = s
        .jobs
        .iter()
        .flatten()
        .map(|j| match j.slowdown {
            Some(x) => format!(
                ", job {} {:.6} s ({x:.3}x alone)",
                j.name, j.iteration_time_s
            ),
            None => format!(", job {} {:.6} s", j.name, j.iteration_time_s),
        })
        .collect();
    format!(
        "{}: iteration {:.6} s{jobs}, wall {:.2} s, sync {:.3}, {} cross-partition events, {} windows, digest {}",
        settings.join(" "),
        s.iteration_time_s,
        e.wall_s,
        e.sync_fraction,
        e.cross_partition_events,
        e.windows,
        s.result_digest
    )
}

/// A measured column by name.
pub fn column(name: &str) -> Option<Column> {
    COLUMNS.iter().copied().find(|c| c.name == name)
}

/// What a job's columns of `sweep.csv` hold (`job.NAME.WHAT`).
const JOB_COLUMNS: [&str; 3] = ["iteration_time_s", "alone_iteration_time_s", "slowdown"];

/// A column of numbers `--plot-column` may name: one of [`COLUMNS`], or a job's.
#[derive(Debug, Clone)]
pub enum PlotColumn {
    Measured(Column),
    /// `job.NAME.WHAT`, WHAT one of [`JOB_COLUMNS`].
    Job {
        name: String,
        what: &'static str,
    },
}

impl PlotColumn {
    fn label(&self) -> String {
        match self {
            PlotColumn::Measured(c) => c.name.to_string(),
            PlotColumn::Job { name, what } => format!("job.{name}.{what}"),
        }
    }

    /// Its value in a row; `None` where the row has none (a job's slowdown without its
    /// alone run).
    fn value(&self, summary: &Summary) -> Option<f64> {
        match self {
            PlotColumn::Measured(c) => (c.value)(summary).number(),
            PlotColumn::Job { name, what } => {
                let job = summary.jobs.iter().flatten().find(|j| &j.name == name)?;
                match *what {
                    "iteration_time_s" => Some(job.iteration_time_s),
                    "alone_iteration_time_s" => job.alone_iteration_time_s,
                    _ => job.slowdown,
                }
            }
        }
    }

    /// A job's column must name one of the sweep's jobs.
    pub fn check_jobs(&self, jobs: &[String]) -> Result<(), String> {
        match self {
            PlotColumn::Job { name, .. } if !jobs.contains(name) => Err(if jobs.is_empty() {
                format!(
                    "--plot-column: `{}` names job `{name}`, but the experiment has no [[jobs]]",
                    self.label()
                )
            } else {
                format!(
                    "--plot-column: `{}` names job `{name}`, which is not one of the experiment's jobs ({})",
                    self.label(),
                    jobs.join(", ")
                )
            }),
            _ => Ok(()),
        }
    }
}

/// The column `--plot-column` names: one of numbers, else what the user may name instead.
pub fn plot_column(name: &str) -> Result<PlotColumn, String> {
    if let Some(rest) = name.strip_prefix("job.") {
        if let Some((job, what)) = rest.rsplit_once('.')
            && let Some(what) = JOB_COLUMNS.iter().find(|w| **w == what)
            && !job.is_empty()
        {
            return Ok(PlotColumn::Job {
                name: job.to_string(),
                what,
            });
        }
        return Err(format!(
            "--plot-column: `{name}` is not a job's column; write job.NAME.{}",
            JOB_COLUMNS.join(" or job.NAME.")
        ));
    }
    match column(name) {
        Some(column) if column.numeric => Ok(PlotColumn::Measured(column)),
        known => {
            let numeric: Vec<&str> = COLUMNS
                .iter()
                .filter(|c| c.numeric)
                .map(|c| c.name)
                .collect();
            let what = if known.is_some() {
                "holds text, not numbers"
            } else {
                "is not a column"
            };
            Err(format!(
                "--plot-column: `{name}` {what}; use one of {}, or a job's job.NAME.{}",
                numeric.join(", "),
                JOB_COLUMNS.join(" / ")
            ))
        }
    }
}

/// The plot: the last varied key across (its values when they are numbers, else their
/// positions), one line per combination of the others. Up: `y` when given, else wall time
/// when only `engine.*` keys vary (the simulated result cannot change then), else the
/// iteration time.
pub fn plot_svg(
    varies: &[Vary],
    rows: &[SweepRow],
    y: Option<&PlotColumn>,
) -> Result<String, PlotError> {
    let Some(last) = varies.last() else {
        return Err(PlotError::new("nothing was varied"));
    };
    // Keys that vary together are plotted against the first.
    let first = |v: &str| v.split('+').next().unwrap_or(v).trim().to_string();
    let numeric = last.values.iter().all(|v| first(v).parse::<f64>().is_ok());
    let engine_only = varies.iter().all(|v| v.key.starts_with("engine."));
    let measured = |name| PlotColumn::Measured(column(name).expect("a column"));
    let (y, y_label) = match y {
        Some(column) => (column.clone(), column.label()),
        None if engine_only => (measured("wall_s"), "wall time (s)".to_string()),
        None => (
            measured("iteration_time_s"),
            "iteration time (s)".to_string(),
        ),
    };
    let mut series: Vec<Series> = Vec::new();
    for r in rows {
        let (others, x) = r.settings.split_at(r.settings.len() - 1);
        let value = &x[0].1;
        let x = if numeric {
            first(value).parse::<f64>().unwrap_or(0.0)
        } else {
            last.values.iter().position(|v| v == value).unwrap_or(0) as f64 + 1.0
        };
        // Text columns are refused before the sweep runs; a row without the value (an
        // absent lookahead, a job's slowdown with --no-alone) has no point.
        let Some(y) = y.value(&r.summary) else {
            continue;
        };
        let name = if others.is_empty() {
            last.key.clone()
        } else {
            others
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        Series::add_point(&mut series, &name, (x, y));
    }
    // Positions of non-numeric values are whole numbers too.
    let integer_x = !numeric
        || last
            .values
            .iter()
            .all(|v| first(v).parse::<f64>().is_ok_and(|x| x.fract() == 0.0));
    let x_label = if numeric {
        first(&last.key)
    } else {
        format!("{} ({})", last.key, last.values.join(", "))
    };
    line_chart_svg(&LineChart {
        title: "fleetsim sweep",
        x_label: &x_label,
        y_label: &y_label,
        log_x: false,
        x_ticks: if integer_x {
            integer_tick
        } else {
            decimal_tick
        },
        series: &series,
    })
}

/// A tick of an axis of whole numbers (workers, GPUs, TP): fractional ticks stay unlabelled.
fn integer_tick(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        String::new()
    }
}

/// A tick at up to six decimals without float noise: 1.8, not 1.7999999999999998.
fn decimal_tick(x: f64) -> String {
    let text = format!("{x:.6}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_columns_of_numbers_can_be_plotted() {
        assert_eq!(
            plot_column("wall_s").map(|c| c.label()),
            Ok("wall_s".to_string())
        );
        assert_eq!(
            plot_column("job.a.b.slowdown").map(|c| c.label()),
            Ok("job.a.b.slowdown".to_string())
        );
        for bad in ["job.a.wall_s", "job..slowdown", "job.slowdown"] {
            let e = plot_column(bad).expect_err(bad);
            assert!(e.contains("job.NAME.slowdown"), "{e}");
        }
        let job = plot_column("job.b.slowdown").expect("a job's column");
        assert_eq!(job.check_jobs(&["a".into(), "b".into()]), Ok(()));
        let e = job.check_jobs(&["a".into()]).expect_err("no job b");
        assert!(e.contains("not one of the experiment's jobs (a)"), "{e}");
        let e = job.check_jobs(&[]).expect_err("no jobs");
        assert!(e.contains("has no [[jobs]]"), "{e}");
        for (name, why) in [
            ("scheduling", "holds text, not numbers"),
            ("result_digest", "holds text, not numbers"),
            ("nope", "is not a column"),
        ] {
            let e = plot_column(name).expect_err(name);
            assert!(
                e.contains(why) && e.contains("use one of iteration_time_s"),
                "{e}"
            );
            assert!(
                !e.contains(
                    "use one of iteration_time_s, batches_per_s, samples_per_s, mfu, result_digest"
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn ticks_read_as_a_person_writes_them() {
        assert_eq!(decimal_tick(1.7999999999999998), "1.8");
        assert_eq!(decimal_tick(0.25), "0.25");
        assert_eq!(decimal_tick(3.0), "3");
        assert_eq!(decimal_tick(-0.0000001), "0");
        assert_eq!(integer_tick(4.0), "4");
        assert_eq!(integer_tick(4.5), "");
    }

    #[test]
    fn the_cross_product_varies_the_first_key_slowest() {
        let v: Vec<Vary> = ["a=1,2", "b=x,y,z"]
            .iter()
            .map(|s| s.parse().expect("vary"))
            .collect();
        let c = combinations(&v);
        assert_eq!(c.len(), 6);
        assert_eq!(
            c[0],
            vec![("a".into(), "1".into()), ("b".into(), "x".into())]
        );
        assert_eq!(
            c[5],
            vec![("a".into(), "2".into()), ("b".into(), "z".into())]
        );
        let together: Vary = "a+b=1+2,3+4".parse().expect("vary together");
        assert_eq!(
            overrides(&together.key, &together.values[1]),
            ["a=3", "b=4"]
        );
        for bad in ["a", "=1,2", "a=", "a=,", "a+b=1,2+3"] {
            assert!(bad.parse::<Vary>().is_err(), "{bad}");
        }
    }
}
