//! `fleetsim validate CASES.csv`: runs every row of a table of real training measurements and
//! sets prediction beside measurement (per-row error, MAPE, a parity plot).
//!
//! A row describes a Megatron-LM run the way papers and READMEs report it: GPU, model shape,
//! parallel split, batch, recompute, and the measured seconds per iteration or TFLOP/s per
//! GPU. What a source leaves out comes from two documented tables: what the framework release
//! in the row's `framework` column launched with (`configs/frameworks.toml`,
//! [`sim::framework`]) and the NVIDIA DGX SuperPOD the GPU was sold in ([`cluster_for`]). The
//! `source` column is a free label: nothing is read from its text. Each row becomes a real experiment file under `OUT/cases/`, so any row
//! can be rerun, inspected or changed with `fleetsim run`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use sim::experiment::Experiment;
use sim::framework::Frameworks;
use sim_config::{Fp8Recipe, Overrides};

use coordinator::output::plot::{ParityChart, PlotError, Series, parity_chart_svg};
use coordinator::output::summary::Summary;
use coordinator::output::table::CsvTable;
use coordinator::run::{RunError, RunOptions, load_checked, run_embedded};

use crate::cli::side_by_side;

/// `fleetsim validate`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The measurement table (CSV).
    pub cases: PathBuf,
    /// Where the results go. Default: runs/validate-<table name>.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only these rows (1-based, data rows only), e.g. --rows 1,2,10.
    #[arg(long, value_delimiter = ',')]
    pub rows: Option<Vec<usize>>,
    /// Override a key of every row's experiment, e.g. --set network.model=analytical.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Threads per run (0 = the cores other processes leave idle).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Rows simulated at once (rows are independent: each gives the same result whatever
    /// runs beside it). Default: as many as the machine has cores, at most one per row, each
    /// run then taking the cores left to it unless --threads says otherwise. Memory grows
    /// with it; --jobs 1 runs one row at a time.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Exit with status 1 when the MAPE (percent) is above this.
    #[arg(long, value_name = "PERCENT", value_parser = percent)]
    pub max_mape: Option<f64>,
    /// Exit with status 1 when any row's absolute error (percent) is above this.
    #[arg(long, value_name = "PERCENT", value_parser = percent)]
    pub max_error: Option<f64>,
    /// The table of framework releases the `framework` column names (TOML, as
    /// configs/frameworks.toml). Default: the one built in.
    #[arg(long, value_name = "FILE")]
    pub frameworks: Option<PathBuf>,
}

/// A limit in percent: a finite number, 0 or more (NaN would pass every run).
fn percent(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!(
            "`{text}` is not a percentage; give a number of 0 or more, e.g. 5 for 5%"
        )),
    }
}

impl Args {
    /// Every row simulated, the table printed as rows finish, then the files.
    pub fn execute(self) -> anyhow::Result<()> {
        let Args {
            cases,
            out,
            rows,
            sets,
            threads,
            jobs,
            max_mape,
            max_error,
            frameworks,
        } = self;
        let rows = rows.as_deref();
        let overrides = Overrides::from_sets(&sets)?;
        let cases = cases.as_path();
        let file = cases.display().to_string();
        let frameworks = match frameworks {
            Some(path) => Frameworks::read(&path)?,
            None => Frameworks::shipped()?,
        };
        let all = read_cases(cases, &frameworks)?;
        let selected = select(all, rows).map_err(anyhow::Error::msg)?;
        let out = out.unwrap_or_else(|| {
            let stem = cases
                .file_stem()
                .map_or_else(|| "cases".into(), |s| s.to_string_lossy().into_owned());
            PathBuf::from("runs").join(format!("validate-{stem}"))
        });
        let prepared = prepare(&out, &selected, &overrides, &file)?;
        // Rows beside each other share the cores; a run's threads beyond its share would
        // only wait on each other at every window.
        let (jobs, threads) = side_by_side::shares(prepared.len(), jobs, threads);
        let options = RunOptions {
            threads: Some(threads),
            ..Default::default()
        };
        // validation.csv holds every finished row before its line is printed, so a reader of
        // the pipe finds what it was told of.
        let csv = out.join("validation.csv");
        outln!("{}", table_header());
        let mut outcomes = Vec::new();
        let mut failures = Vec::new();
        // Boxed: a failure carries its whole case across the pool's channel.
        let run_row = |(case, exp): PreparedCase| {
            exp.and_then(|exp| run_case(case.clone(), &exp, &options, &file))
                .map_err(|error| Box::new(RowFailure::new(case, &error)))
        };
        side_by_side::in_order(prepared, jobs, run_row, |row| {
            let line = match row {
                Ok(outcome) => {
                    let line = table_line(&outcome);
                    outcomes.push(outcome);
                    line
                }
                Err(failure) => {
                    let line = failure_line(&failure);
                    failures.push(*failure);
                    line
                }
            };
            std::fs::write(&csv, to_csv(&outcomes, &failures))
                .with_context(|| format!("writing {}", csv.display()))?;
            outln!("{line}");
            Ok(())
        })?;
        for case in selected_stand_ins(&outcomes, &failures) {
            outln!(
                "row {} (line {}): {}",
                case.row,
                case.line,
                stand_in_note(&case.framework, &case.facts_from, frameworks.file())
            );
        }
        let verdict = verdict(&outcomes, &failures);
        let svg = out.join("parity.svg");
        std::fs::write(&svg, parity_svg(&outcomes)?)
            .with_context(|| format!("writing {}", svg.display()))?;
        outln!("{verdict}");
        outln!("results in {}", out.display());
        let mape = mape(&outcomes);
        if let Some(limit) = max_mape.filter(|&l| mape > l) {
            anyhow::bail!("MAPE {mape:.2}% is above --max-mape {limit}%");
        }
        if let (Some(limit), Some(w)) = (max_error, worst(&outcomes))
            && 100.0 * w.error.abs() > limit
        {
            anyhow::bail!(
                "line {} of {file} is off by {:+.1}%, above --max-error {limit}%",
                w.case.line,
                100.0 * w.error
            );
        }
        if let Some(first) = failures.first() {
            anyhow::bail!(
                "{} of {} row(s) could not be run (validation.csv names each); the first, line {} of {file}: {}",
                failures.len(),
                failures.len() + outcomes.len(),
                first.case.line,
                first.reason
            );
        }
        Ok(())
    }
}

/// Columns every table has (`../shared/calibration/e2e_iterations.csv`'s, and `framework`).
const REQUIRED: [&str; 23] = [
    "source",
    "gpu",
    "gpus",
    "layers",
    "hidden",
    "ffn_hidden",
    "heads",
    "seq_len",
    "vocab",
    "tp",
    "pp",
    "dp",
    "cp",
    "vp",
    "micro_batch",
    "global_batch",
    "recompute",
    "sequence_parallel",
    "precision",
    "measured",
    "unit",
    "notes",
    "framework",
];

/// Columns a table may add: `kv_heads` (grouped-query attention) and `settings` (`KEY=VALUE`
/// pairs separated by `;`, applied like `--set` after everything else).
const OPTIONAL: [&str; 2] = ["kv_heads", "settings"];

#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("{file}: {message}")]
    Table { file: String, message: String },
    #[error("{file}:{line}: {message}")]
    Row {
        file: String,
        line: usize,
        message: String,
    },
    /// Not a `#[source]`: the message holds the cause, and `{:#}` would repeat it.
    #[error("{file}:{line}: the experiment made from this row is invalid: {error}")]
    Case {
        file: String,
        line: usize,
        error: RunError,
    },
    #[error("writing {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error(transparent)]
    Plot(#[from] PlotError),
}

/// What the `measured` column counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    SecondsPerIteration,
    /// Megatron-LM's model TFLOP/s per GPU (`num_floating_point_operations` over time).
    TflopsPerGpu,
}

impl Unit {
    fn parse(s: &str) -> Option<Unit> {
        match s {
            "s_per_iter" => Some(Unit::SecondsPerIteration),
            "tflops_per_gpu" => Some(Unit::TflopsPerGpu),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Unit::SecondsPerIteration => "s_per_iter",
            Unit::TflopsPerGpu => "tflops_per_gpu",
        }
    }
}

/// The cluster a GPU's published runs used: the NVIDIA DGX SuperPOD of its generation, on a
/// rail-optimised fabric, one compute NIC per GPU (DGX SuperPOD reference architectures):
/// A100 with HDR 200 Gb/s in scalable units of 20 hosts (Selene); H100/H200 with NDR
/// 400 Gb/s in units of 32 hosts (EOS); DGX B200 with 8 ConnectX-7 400 Gb/s NICs, units of
/// 32 hosts; GB200 NVL72 with 4 GPUs and 4 ConnectX-7 400 Gb/s NICs per compute tray, 72
/// GPUs per NVLink domain, 18 trays per rack. `None` for a GPU without one: give the cluster
/// in the row's `settings`.
pub fn cluster_for(gpu: &str) -> Option<Vec<(String, String)>> {
    // As GPU names are compared (`H100 SXM`, `DGX-H100`), the system's name before the GPU's
    // dropped.
    let key = sim_models::gpu::gpu_name_key(gpu).to_ascii_lowercase();
    let lower = key
        .strip_prefix("dgx")
        .or_else(|| key.strip_prefix("hgx"))
        .unwrap_or(&key);
    let rail = |gpus_per_host: u32, nic_gbps: u32, hosts_per_segment: u32| {
        [
            ("gpus_per_host", gpus_per_host.to_string()),
            ("topology", "\"rail-optimized\"".into()),
            ("nics_per_host", gpus_per_host.to_string()),
            ("nic_gbps", nic_gbps.to_string()),
            ("hosts_per_segment", hosts_per_segment.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect::<Vec<_>>()
    };
    if lower.starts_with("a100") || lower.starts_with("a800") {
        Some(rail(8, 200, 20))
    } else if lower.starts_with("h100")
        || lower.starts_with("h200")
        || lower.starts_with("h800")
        || lower.starts_with("h20")
    {
        Some(rail(8, 400, 32))
    } else if lower.starts_with("gb200") {
        // One description of the rack: the shipped preset's; the row names the GPU.
        let mut c = sim_config::shipped_cluster("gb200-nvl72")?;
        c.retain(|(key, _)| key != "gpu");
        Some(c)
    } else if lower.starts_with("b200") {
        Some(rail(8, 400, 32))
    } else {
        None
    }
}

/// A TOML value from its text, read as `--set` reads it (`"gelu"`, `true`, `8`).
fn literal(text: &str) -> toml::Value {
    sim_config::set_value(text).to_toml()
}

/// One row of the table, resolved.
#[derive(Debug, Clone)]
pub struct Case {
    /// 1-based data row of the table (what `--rows` selects and the printed table numbers).
    pub row: usize,
    /// 1-based line of the CSV file, comments and header included.
    pub line: usize,
    pub source: String,
    pub gpu: String,
    pub gpus: u32,
    /// The `framework` column: a release of the framework table.
    pub framework: String,
    /// The release whose launch facts the row ran with: `framework` itself, or, where the
    /// table does not list it, its family's stand-in ([`Frameworks::stand_in`]).
    pub facts_from: String,
    pub measured: f64,
    pub unit: Unit,
    pub notes: String,
    /// Tokens per second per GPU when the notes give them (`26006 tok/s/GPU`): compared
    /// instead of TFLOP/s, which frameworks count differently (Megatron-Core halves causal
    /// attention from March 2025, `training.py` `num_floating_point_operations`).
    pub tokens_per_gpu_s: Option<f64>,
    /// The experiment file this row becomes, its `settings` included; or, when the row's
    /// framework is not in the table, why not (that row's failure; the others still run).
    pub experiment: Result<String, UnknownFramework>,
}

/// A row whose `framework` is not a release of the framework table.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "column `framework`: {}; the releases in {table} are {known}",
    describe(name)
)]
pub struct UnknownFramework {
    pub name: String,
    pub table: String,
    pub known: String,
}

/// What a row whose release the table does not list ran with, and how to say otherwise.
fn stand_in_note(named: &str, stand_in: &str, table: &str) -> String {
    format!(
        "framework `{named}` is not in {table}: the row ran with the launch facts of `{stand_in}`, \
         its family's nearest release there (the latest not newer, else the earliest; give a \
         table naming `{named}` with --frameworks to state its own)"
    )
}

fn describe(name: &str) -> String {
    if name.is_empty() {
        "empty; name the framework release the row's measurement ran".into()
    } else {
        format!("unknown `{name}`")
    }
}

/// The number before `tok/s/GPU` in a row's notes, if any.
fn tokens_in_notes(notes: &str) -> Option<f64> {
    let at = notes.find("tok/s/GPU")?;
    let before = notes[..at].trim_end();
    let start = before
        .rfind(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(0, |i| i + 1);
    before[start..].parse().ok().filter(|v: &f64| *v > 0.0)
}

/// A case and what the simulator said.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub case: Case,
    pub predicted: f64,
    /// Signed relative error, (predicted − measured) / measured.
    pub error: f64,
    /// Model TFLOP/s per GPU, predicted and measured (a time converts through the model's
    /// FLOPs), so every row fits one parity plot.
    pub predicted_tflops: f64,
    pub measured_tflops: f64,
    /// `tp/pp/dp/vp` of the experiment.
    pub layout: String,
    pub summary: Summary,
}

/// A row that could not be built into an experiment or run, and why.
#[derive(Debug, Clone)]
pub struct RowFailure {
    pub case: Case,
    pub reason: String,
}

impl RowFailure {
    fn new(case: Case, error: &ValidateError) -> Self {
        let reason = match error {
            // The row is named by the line already; keep the cause.
            ValidateError::Case { error, .. } => error.to_string(),
            ValidateError::Row { message, .. } => message.clone(),
            other => other.to_string(),
        };
        RowFailure { case, reason }
    }
}

/// Reads a measurement table; `#` lines are comments. Each row's `framework` is looked up in
/// `frameworks`.
pub fn read_cases(path: &Path, frameworks: &Frameworks) -> Result<Vec<Case>, ValidateError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ValidateError::Table {
        file: file.clone(),
        message: format!("cannot be read: {e}"),
    })?;
    parse_cases(&text, &file, frameworks)
}

/// Parses a measurement table (see [`read_cases`]); `file` names it in errors.
pub fn parse_cases(
    text: &str,
    file: &str,
    frameworks: &Frameworks,
) -> Result<Vec<Case>, ValidateError> {
    let table_err = |message: String| ValidateError::Table {
        file: file.to_string(),
        message,
    };
    // Standard CSV (quoted fields may hold commas), `#` lines are comments, blank lines skipped.
    let mut reader = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(text.as_bytes());
    let csv_error = |e: csv::Error| {
        let line = e
            .position()
            .map_or(0, |p| sim_models::csv_line::record_line(text, p) as usize);
        ValidateError::Row {
            file: file.to_string(),
            line,
            message: format!("is not valid CSV: {e}"),
        }
    };
    let header: Vec<String> = reader
        .headers()
        .map_err(csv_error)?
        .iter()
        .map(str::to_string)
        .collect();
    if header.is_empty() {
        return Err(table_err("has no header line".into()));
    }
    for h in &header {
        if !REQUIRED.contains(&h.as_str()) && !OPTIONAL.contains(&h.as_str()) {
            return Err(table_err(format!(
                "unknown column `{h}`; the columns are {} (optional: {})",
                REQUIRED.join(","),
                OPTIONAL.join(",")
            )));
        }
    }
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|r| !header.iter().any(|h| h == r))
        .collect();
    if !missing.is_empty() {
        return Err(table_err(format!(
            "the header lacks column(s) {}; see ../shared/calibration/e2e_iterations.csv",
            missing.join(", ")
        )));
    }
    let mut cases = Vec::new();
    for record in reader.records() {
        let record = record.map_err(csv_error)?;
        let line = record
            .position()
            .map_or(0, |p| sim_models::csv_line::record_line(text, p) as usize);
        let values: Vec<&str> = record.iter().collect();
        if values.len() != header.len() {
            return Err(ValidateError::Row {
                file: file.to_string(),
                line,
                message: format!(
                    "has {} fields but the header has {} columns",
                    values.len(),
                    header.len()
                ),
            });
        }
        let row: Vec<(&str, &str)> = header
            .iter()
            .map(String::as_str)
            .zip(values.iter().copied())
            .collect();
        let mut case = case_of_row(&row, file, line, frameworks)?;
        case.row = cases.len() + 1;
        cases.push(case);
    }
    if cases.is_empty() {
        return Err(table_err("has a header but no rows".into()));
    }
    Ok(cases)
}

fn case_of_row(
    row: &[(&str, &str)],
    file: &str,
    line: usize,
    frameworks: &Frameworks,
) -> Result<Case, ValidateError> {
    let err = |message: String| ValidateError::Row {
        file: file.to_string(),
        line,
        message,
    };
    let get = |column: &str| {
        row.iter()
            .find(|(h, _)| *h == column)
            .map_or("", |(_, v)| *v)
    };
    let positive = |column: &str| -> Result<u64, ValidateError> {
        let v = get(column);
        match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(err(format!(
                "column `{column}`: `{v}` is not a positive integer"
            ))),
        }
    };
    let optional_positive = |column: &str| -> Result<Option<u64>, ValidateError> {
        if get(column).is_empty() {
            Ok(None)
        } else {
            positive(column).map(Some)
        }
    };
    let source = get("source").to_string();
    if source.is_empty() {
        return Err(err(
            "column `source` is empty; name the paper or page the row is from".into(),
        ));
    }
    let framework_name = get("framework").to_string();
    let gpu = get("gpu").to_string();
    let settings: Vec<String> = get("settings")
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    for s in &settings {
        let Some((key, _)) = s.split_once('=') else {
            return Err(err(format!(
                "column `settings`: `{s}` is not KEY=VALUE (pairs are separated by `;`)"
            )));
        };
        if !key.contains('.') {
            return Err(err(format!(
                "column `settings`: `{s}` needs a dotted key such as cluster.nic_gbps=400"
            )));
        }
    }
    let cluster = cluster_for(&gpu);
    if cluster.is_none() && !settings.iter().any(|s| s.starts_with("cluster.")) {
        return Err(err(format!(
            "GPU `{gpu}` has no default cluster (A100, A800, H100, H200, H800, H20, B200 and GB200 do); describe it in the `settings` column, e.g. cluster.topology=fat-tree;cluster.nic_gbps=400"
        )));
    }
    // Words compared as tables write them: any case, surrounding blanks ignored.
    let word = |column: &str| get(column).trim().to_ascii_lowercase();
    let unit = Unit::parse(&word("unit")).ok_or_else(|| {
        err(format!(
            "column `unit`: `{}` is neither s_per_iter nor tflops_per_gpu",
            get("unit")
        ))
    })?;
    let measured = get("measured")
        .parse::<f64>()
        .ok()
        .filter(|m| m.is_finite() && *m > 0.0)
        .ok_or_else(|| {
            err(format!(
                "column `measured`: `{}` is not a positive number",
                get("measured")
            ))
        })?;
    let gpus =
        u32::try_from(positive("gpus")?).map_err(|_| err("column `gpus` is too large".into()))?;
    let tp = positive("tp")?;
    let sequence_parallel = match word("sequence_parallel").as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        "" => None,
        _ => {
            return Err(err(format!(
                "column `sequence_parallel`: `{}` is neither true nor false",
                get("sequence_parallel")
            )));
        }
    };
    let recompute = match word("recompute").as_str() {
        "" => "none",
        "none" => "none",
        "selective" => "selective",
        "full" => "full",
        _ => {
            return Err(err(format!(
                "column `recompute`: `{}` is not none, selective or full",
                get("recompute")
            )));
        }
    };
    // Checked where the experiment loads (`training.precision`): a precision this build does
    // not know fails its row alone, as other keys a row sets do.
    let precision = match word("precision") {
        p if p.is_empty() => "bf16".to_string(),
        p => p,
    };

    let notes = get("notes").to_string();
    let mut case = Case {
        row: 0,
        line,
        source: source.clone(),
        gpu: gpu.clone(),
        gpus,
        framework: framework_name.clone(),
        facts_from: String::new(),
        measured,
        unit,
        tokens_per_gpu_s: tokens_in_notes(&notes),
        notes,
        experiment: Ok(String::new()),
    };
    // A release the table does not list runs with its family's nearest earlier one, said in
    // the case file and the printed result; an unknown family fails this row alone, as a row
    // that cannot be built does.
    let framework = frameworks
        .get(&framework_name)
        .or_else(|| frameworks.stand_in(&framework_name));
    let Some(framework) = framework else {
        case.experiment = Err(UnknownFramework {
            name: framework_name,
            table: frameworks.file().to_string(),
            known: frameworks.names(),
        });
        return Ok(case);
    };
    case.facts_from = framework.name.clone();
    // Blank: the framework's (Megatron-LM turns sequence parallelism off at TP 1).
    let sequence_parallel =
        sequence_parallel.unwrap_or(framework.parallel.sequence_parallel.value && tp > 1);

    // The experiment as (section, key, value) in file order; the row's `settings` then replace
    // or extend it, so the case file is exactly what runs.
    let mut entries: Vec<(String, String, toml::Value)> = Vec::new();
    let mut put = |section: &str, key: &str, value: toml::Value| {
        entries.push((section.to_string(), key.to_string(), value));
    };
    put(
        "",
        "name",
        toml::Value::String(format!("{source}-line{line}")),
    );
    put("cluster", "gpus", literal(&gpus.to_string()));
    put("cluster", "gpu", toml::Value::String(gpu.clone()));
    for (k, v) in cluster.iter().flatten() {
        put("cluster", k, literal(v));
    }
    // The model columns, in the table's order.
    for column in &REQUIRED[3..9] {
        put("model", column, literal(&positive(column)?.to_string()));
    }
    let kv_heads = optional_positive("kv_heads")?.unwrap_or(positive("heads")?);
    put("model", "kv_heads", literal(&kv_heads.to_string()));
    // Megatron-LM's GPT model: GeLU MLP with biases, LayerNorm, learned absolute positions;
    // the framework's recipe sets dropout and tying, and the row's settings what differs.
    for (k, v) in [
        ("activation", "\"gelu\""),
        ("norm", "\"layernorm\""),
        ("bias", "true"),
        ("position", "\"learned\""),
    ] {
        put("model", k, literal(v));
    }
    let launch: Vec<_> = framework
        .launch_keys()
        .into_iter()
        .filter(|k| precision == "fp8" || !k.fp8_only())
        .collect();
    let put_launch = |put: &mut dyn FnMut(&str, &str, toml::Value), section: &str| {
        for k in launch.iter().filter(|k| k.section == section) {
            put(k.section, k.key, k.value.clone());
        }
    };
    put_launch(&mut put, "model");
    put("parallel", "tp", literal(&tp.to_string()));
    put("parallel", "pp", literal(&positive("pp")?.to_string()));
    if let Some(dp) = optional_positive("dp")? {
        put("parallel", "dp", literal(&dp.to_string()));
    }
    for (k, v) in [
        ("cp", optional_positive("cp")?.unwrap_or(1).to_string()),
        ("vp", optional_positive("vp")?.unwrap_or(1).to_string()),
        ("sequence_parallel", sequence_parallel.to_string()),
        (
            "micro_batch",
            optional_positive("micro_batch")?.unwrap_or(1).to_string(),
        ),
        ("global_batch", positive("global_batch")?.to_string()),
    ] {
        put("parallel", k, literal(&v));
    }
    put_launch(&mut put, "parallel");
    put(
        "training",
        "precision",
        toml::Value::String(precision.to_string()),
    );
    put(
        "training",
        "recompute",
        toml::Value::String(recompute.to_string()),
    );
    // The measurement says what fits; fleetsim's estimate need not agree.
    put(
        "training",
        "memory_check",
        toml::Value::String("off".into()),
    );
    let notes = get("notes").to_ascii_lowercase();
    for k in launch.iter().filter(|k| k.section == "training") {
        // A note naming an overlap off overrides the framework's (e.g. "no grad-reduce
        // overlap" on Korthikanti et al.'s 2,240-GPU run).
        let flag = k.key.replace('_', "-");
        let off = k.key == "overlap_grad_reduce" && notes.contains("no grad-reduce overlap")
            || notes.contains(&format!("no {flag}"));
        let value = if off && k.value.is_bool() {
            toml::Value::Boolean(false)
        } else {
            k.value.clone()
        };
        put("training", k.key, value);
    }
    put_launch(&mut put, "network");
    for setting in &settings {
        let (key, value) = setting.split_once('=').unwrap_or((setting, ""));
        let (section, key) = key.trim().split_once('.').ok_or_else(|| {
            err(format!(
                "column `settings`: `{setting}` needs a dotted key such as cluster.nic_gbps=400"
            ))
        })?;
        // Read as `--set` reads it.
        let value = literal(value);
        match entries
            .iter_mut()
            .find(|(s, k, _)| s == section && k == key)
        {
            Some(entry) => entry.2 = value,
            None => entries.push((section.to_string(), key.to_string(), value)),
        }
    }
    // Comments on one line each: a quoted CSV field may hold a line break.
    let one_line = |text: &str| text.replace(['\r', '\n'], " ");
    let mut toml = format!(
        "# {file}, line {line} ({source}; {}).\n# Measured: {measured} {}. {}\n# Framework {}: {}\n",
        framework.name,
        unit.name(),
        one_line(get("notes")),
        framework.name,
        one_line(&framework.what)
    );
    if framework.name != framework_name {
        toml += &format!(
            "# {}\n",
            stand_in_note(&framework_name, &framework.name, frameworks.file())
        );
    }
    for pending in framework.pending() {
        toml += &format!(
            "# Not applied (no experiment key yet): {} = {} ({})\n",
            pending.name,
            pending.value,
            one_line(pending.source)
        );
    }
    if !settings.is_empty() {
        toml += &format!(
            "# With the row's settings: {}\n",
            one_line(&settings.join("; "))
        );
    }
    // A key the case sets, as text (strings without their quotes).
    let setting = |section: &str, key: &str| {
        entries
            .iter()
            .find(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str().map_or_else(|| v.to_string(), str::to_string))
    };
    // What issue 17's host model does with the row, said where a reader of the case looks.
    let graphs = setting("training", "cuda_graphs")
        .unwrap_or_else(|| "none (fleetsim's default, Megatron-Core's)".to_string());
    toml += &format!(
        "# Host dispatch on: the GPU file's host CPU issues each op (configs/hosts.toml); CUDA graphs: {graphs}\n"
    );
    // Hopper's FP8 forward GEMMs run with fast accumulation, as Transformer Engine runs them.
    let recipe = match entries
        .iter()
        .find(|(s, k, _)| s == "training" && k == "fp8_recipe")
    {
        None => Some(Fp8Recipe::default()),
        // A recipe fleetsim does not know fails when the case loads, with its own error.
        Some((_, _, v)) => v.clone().try_into::<Fp8Recipe>().ok(),
    };
    if setting("training", "precision").is_some_and(|p| p == "fp8")
        && let (Some(recipe), Some(gpu)) = (recipe, setting("cluster", "gpu"))
        && fast_accumulation(&gpu, recipe)
    {
        toml += "# FP8 forward GEMMs with fast accumulation (Transformer Engine on Hopper; configs/compute/hopper.toml)\n";
    }
    // Issue 17's expert load, for MoE rows: which routing the row runs under.
    if setting("model", "experts").is_some() {
        let routing = setting("model", "routing").unwrap_or_else(|| {
            "skewed (fleetsim's default: a trained router's expert spread)".to_string()
        });
        let padded = setting("model", "moe_pad_to_capacity").is_some_and(|v| v == "true");
        let note = if padded {
            "; padded to capacity, so every rank takes its share"
        } else {
            ""
        };
        toml += &format!("# MoE expert load: routing {routing}{note}\n");
    }
    let mut document = toml::Table::new();
    for (section, key, value) in entries {
        let table = if section.is_empty() {
            &mut document
        } else {
            match document
                .entry(section)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            {
                toml::Value::Table(table) => table,
                _ => return Err(err(format!("`{key}` is both a key and a section"))),
            }
        };
        table.insert(key, value);
    }
    toml += "\n";
    toml += &toml::to_string(&document)
        .map_err(|e| err(format!("cannot be written as an experiment file: {e}")))?;
    case.experiment = Ok(toml);
    Ok(case)
}

/// Which rows to run: `None` all, else 1-based row numbers (not lines).
pub fn select(cases: Vec<Case>, rows: Option<&[usize]>) -> Result<Vec<Case>, String> {
    let Some(rows) = rows else {
        return Ok(cases);
    };
    let n = cases.len();
    if let Some(bad) = rows.iter().find(|&&r| r == 0 || r > n) {
        return Err(format!(
            "--rows: row {bad} does not exist; the table has rows 1 to {n}"
        ));
    }
    Ok(cases
        .into_iter()
        .filter(|c| rows.contains(&c.row))
        .collect())
}

/// Where a case's experiment file goes.
pub fn case_path(out: &Path, case: &Case) -> PathBuf {
    out.join("cases").join(case_file_name(case))
}

/// The name of a case's experiment file under `OUT/cases/`.
fn case_file_name(case: &Case) -> String {
    format!("{:02}-{}.toml", case.row, case.source)
}

/// A case and its experiment, or why the experiment made from it is invalid.
pub type PreparedCase = (Case, Result<Experiment, ValidateError>);

/// Writes every case's experiment file and loads it, before anything runs. A row whose
/// experiment is invalid keeps its error, to be reported as that row's failure; only a file
/// that cannot be written stops the validation.
pub fn prepare(
    out: &Path,
    cases: &[Case],
    overrides: &Overrides,
    file: &str,
) -> Result<Vec<PreparedCase>, ValidateError> {
    let dir = out.join("cases");
    std::fs::create_dir_all(&dir).map_err(|error| ValidateError::Io {
        path: dir.display().to_string(),
        error,
    })?;
    cases
        .iter()
        .map(|case| {
            let experiment = match &case.experiment {
                Ok(experiment) => experiment,
                Err(unknown) => {
                    let error = ValidateError::Row {
                        file: file.to_string(),
                        line: case.line,
                        message: unknown.to_string(),
                    };
                    return Ok((case.clone(), Err(error)));
                }
            };
            let path = case_path(out, case);
            std::fs::write(&path, experiment).map_err(|error| ValidateError::Io {
                path: path.display().to_string(),
                error,
            })?;
            let exp = load_checked(&path, overrides).map_err(|error| ValidateError::Case {
                file: file.to_string(),
                line: case.line,
                error,
            });
            Ok((case.clone(), exp))
        })
        .collect()
}

/// Simulates one prepared case.
pub fn run_case(
    case: Case,
    exp: &Experiment,
    options: &RunOptions,
    file: &str,
) -> Result<Outcome, ValidateError> {
    let output = run_embedded(exp, options, None).map_err(|error| ValidateError::Case {
        file: file.to_string(),
        line: case.line,
        error,
    })?;
    let summary = output.summary;
    let seconds = summary.iteration_time_s;
    // A row always becomes a model fleetsim compiles, so its FLOPs are known.
    let tflops = summary.tflops_per_gpu.unwrap_or_default();
    // Model TFLOP per GPU per iteration, to turn a measured time into TFLOP/s.
    let work = seconds * tflops;
    let tokens = summary.tokens_per_s.unwrap_or_default() / f64::from(case.gpus.max(1));
    let (predicted, measured_tflops) = match (case.unit, case.tokens_per_gpu_s) {
        (Unit::SecondsPerIteration, _) => (seconds, work / case.measured),
        // Tokens are counted alike everywhere: the prediction in the source's TFLOP/s is the
        // measured TFLOP/s times the ratio of tokens/s, and fleetsim's own count of the
        // measured run is its FLOPs per token times the measured tokens.
        (Unit::TflopsPerGpu, Some(measured_tokens)) if tokens > 0.0 => (
            case.measured * tokens / measured_tokens,
            tflops * measured_tokens / tokens,
        ),
        (Unit::TflopsPerGpu, _) => (tflops, case.measured),
    };
    let l = &exp.layout;
    Ok(Outcome {
        layout: format!("{}/{}/{}/{}", l.tp, l.pp, l.dp, l.vp),
        error: (predicted - case.measured) / case.measured,
        predicted,
        predicted_tflops: tflops,
        measured_tflops,
        case,
        summary,
    })
}

/// The rows, in table order, that ran with a stand-in release's launch facts.
fn selected_stand_ins<'a>(outcomes: &'a [Outcome], failures: &'a [RowFailure]) -> Vec<&'a Case> {
    let mut cases: Vec<&Case> = outcomes
        .iter()
        .map(|o| &o.case)
        .chain(failures.iter().map(|f| &f.case))
        .filter(|c| !c.facts_from.is_empty() && c.facts_from != c.framework)
        .collect();
    cases.sort_by_key(|c| c.row);
    cases
}

/// Mean absolute percentage error, in percent.
pub fn mape(outcomes: &[Outcome]) -> f64 {
    if outcomes.is_empty() {
        return 0.0;
    }
    100.0 * outcomes.iter().map(|o| o.error.abs()).sum::<f64>() / outcomes.len() as f64
}

/// The row with the largest absolute error.
pub fn worst(outcomes: &[Outcome]) -> Option<&Outcome> {
    outcomes
        .iter()
        .max_by(|a, b| a.error.abs().total_cmp(&b.error.abs()))
}

/// The printed table's header.
pub fn table_header() -> String {
    format!(
        "{:>3} {:<24} {:>5} {:<18} {:<14} {:>10} {:>10} {:<14} {:>7}",
        "row", "source", "gpus", "gpu", "tp/pp/dp/vp", "measured", "predicted", "unit", "error"
    )
}

/// One printed row.
pub fn table_line(o: &Outcome) -> String {
    format!(
        "{:>3} {:<24} {:>5} {:<18} {:<14} {:>10.2} {:>10.2} {:<14} {:>+6.1}%",
        o.case.row,
        o.case.source,
        o.case.gpus,
        o.case.gpu,
        o.layout,
        o.case.measured,
        o.predicted,
        o.case.unit.name(),
        100.0 * o.error
    )
}

/// A row that failed, in the table's place for it.
pub fn failure_line(f: &RowFailure) -> String {
    format!(
        "{:>3} {:<24} {:>5} {:<18} failed (line {}): {}",
        f.case.row, f.case.source, f.case.gpus, f.case.gpu, f.case.line, f.reason
    )
}

/// The closing lines: MAPE and the worst row, and the rows that failed.
pub fn verdict(outcomes: &[Outcome], failures: &[RowFailure]) -> String {
    let mut s = format!("MAPE {:.2}% over {} row(s)", mape(outcomes), outcomes.len());
    if !failures.is_empty() {
        let lines: Vec<String> = failures.iter().map(|f| f.case.line.to_string()).collect();
        let _ = write!(
            s,
            "; {} row(s) failed (lines {})",
            failures.len(),
            lines.join(", ")
        );
    }
    if let Some(w) = worst(outcomes) {
        let _ = write!(
            s,
            "; worst: row {} (line {} of the file; {}, {} GPUs) at {:+.1}%",
            w.case.row,
            w.case.line,
            w.case.source,
            w.case.gpus,
            100.0 * w.error
        );
    }
    s
}

/// `validation.csv`: each row's identity, measured, predicted, error, and where the
/// predicted time went; a row that failed has its identity and its `failure`.
pub fn to_csv(outcomes: &[Outcome], failures: &[RowFailure]) -> String {
    let mut table = CsvTable::new([
        "row",
        "line",
        "source",
        "framework",
        "gpu",
        "gpus",
        "unit",
        "measured",
        "predicted",
        "error_pct",
        "measured_tflops_per_gpu",
        "predicted_tflops_per_gpu",
        "iteration_time_s",
        "compute_s",
        "exposed_comm_s",
        "bubble_s",
        "mfu",
        "result_digest",
        "case",
        "failure",
        "framework_facts",
    ]);
    // The columns that name a row and what was measured, for rows that ran and failed alike.
    let identity = |c: &Case| {
        vec![
            c.row.to_string(),
            c.line.to_string(),
            c.source.clone(),
            c.framework.clone(),
            c.gpu.clone(),
            c.gpus.to_string(),
            c.unit.name().to_string(),
            c.measured.to_string(),
        ]
    };
    for o in outcomes {
        let (s, breakdown) = (&o.summary, &o.summary.breakdown_s);
        let mut row = identity(&o.case);
        row.extend([
            format!("{:.6}", o.predicted),
            format!("{:.3}", 100.0 * o.error),
            format!("{:.3}", o.measured_tflops),
            format!("{:.3}", o.predicted_tflops),
            format!("{:.6}", s.iteration_time_s),
            format!("{:.6}", breakdown.compute),
            format!("{:.6}", breakdown.exposed_comm),
            format!("{:.6}", breakdown.bubble),
            format!("{:.4}", s.mfu.unwrap_or_default()),
            s.result_digest.clone(),
            case_file_name(&o.case),
            String::new(),
            o.case.facts_from.clone(),
        ]);
        table.row(row);
    }
    for f in failures {
        let mut row = identity(&f.case);
        // Nothing predicted.
        row.extend(std::iter::repeat_n(String::new(), 10));
        // No case file when the row's framework is unknown.
        let case = if f.case.experiment.is_ok() {
            case_file_name(&f.case)
        } else {
            String::new()
        };
        row.extend([case, f.reason.clone(), f.case.facts_from.clone()]);
        table.row(row);
    }
    table.finish()
}

/// The parity plot: predicted against measured model TFLOP/s per GPU, one colour per source,
/// with the y = x line and ±5% / ±12% bands.
pub fn parity_svg(outcomes: &[Outcome]) -> Result<String, PlotError> {
    let mut series: Vec<Series> = Vec::new();
    for o in outcomes {
        let point = (o.measured_tflops, o.predicted_tflops);
        Series::add_point(&mut series, &o.case.source, point);
    }
    let title = format!("fleetsim validate: MAPE {:.1}%", mape(outcomes));
    parity_chart_svg(&ParityChart {
        title: &title,
        x_label: "measured model TFLOP/s per GPU",
        y_label: "predicted model TFLOP/s per GPU",
        bands: &[0.05, 0.12],
        series: &series,
    })
}

/// Whether the shipped GPU `name` runs FP8 forward GEMMs with fast accumulation under
/// `recipe`, as the compute model decides it. The shipped files are parsed once per process,
/// not once per row.
fn fast_accumulation(name: &str, recipe: Fp8Recipe) -> bool {
    use sim_models::compute::ComputeModel;
    use sim_models::gpu::GpuDatabase;
    static SHIPPED: std::sync::OnceLock<Option<(GpuDatabase, ComputeModel)>> =
        std::sync::OnceLock::new();
    let Some((gpus, model)) = SHIPPED.get_or_init(|| {
        Some((
            GpuDatabase::embedded().ok()?,
            ComputeModel::embedded().ok()?,
        ))
    }) else {
        return false;
    };
    let model = model.clone().with_fp8_recipe(recipe);
    gpus.get(name)
        .is_some_and(|gpu| model.fp8_fast_accumulation(gpu).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "source,gpu,gpus,layers,hidden,ffn_hidden,heads,seq_len,vocab,tp,pp,dp,cp,vp,micro_batch,global_batch,recompute,sequence_parallel,precision,measured,unit,notes,framework";

    fn frameworks() -> Frameworks {
        Frameworks::shipped().expect("the shipped framework table")
    }

    fn parse(text: &str) -> Result<Vec<Case>, ValidateError> {
        parse_cases(text, "t.csv", &frameworks())
    }

    fn one(row: &str) -> Result<Vec<Case>, ValidateError> {
        parse(&format!("{HEADER}\n{row}\n"))
    }

    fn experiment(case: &Case) -> &str {
        case.experiment.as_deref().expect("an experiment")
    }

    /// The enumerated columns read in any case (and `yes`/`no` for a flag): a table written
    /// `BF16`, `Selective`, `TRUE`, `S_PER_ITER` and `DGX-H100` is the same experiment as its
    /// lower-case twin.
    #[test]
    fn enumerated_columns_read_in_any_case() {
        let row = |gpu: &str, rest: &str| {
            one(&format!(
                "src,{gpu},64,32,4096,16384,32,2048,51200,8,1,8,1,1,1,64,{rest},megatron-core-0.8"
            ))
            .expect("parses")
            .remove(0)
        };
        let lower = row("H100-SXM", "selective,true,bf16,1.5,s_per_iter,");
        let upper = row("DGX-H100", "Selective,TRUE,BF16,1.5,S_PER_ITER,");
        let yes = row("h100 sxm", " SELECTIVE ,yes,Bf16,1.5,s_per_iter,");
        // The experiment differs only in the GPU's name as written.
        let body = |c: &Case| {
            experiment(c)
                .lines()
                .filter(|l| {
                    !l.starts_with('#') && !l.starts_with("gpu =") && !l.starts_with("name =")
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(body(&lower), body(&upper));
        assert_eq!(body(&lower), body(&yes));
        assert!(one("src,H100-SXM,64,32,4096,16384,32,2048,51200,8,1,8,1,1,1,64,partial,true,bf16,1.5,s_per_iter,,megatron-core-0.8").is_err());
    }

    #[test]
    fn a_row_becomes_an_experiment_with_its_framework_and_cluster() {
        let cases = one("korthikanti2022-text,A100-SXM-80GB,2240,105,20480,81920,128,2048,51200,8,35,8,1,3,1,2240,selective,true,bf16,39.15,s_per_iter,no grad-reduce overlap,megatron-lm-2022")
            .expect("parses");
        let c = &cases[0];
        assert_eq!(c.line, 2);
        assert_eq!(c.framework, "megatron-lm-2022");
        assert_eq!(c.unit, Unit::SecondsPerIteration);
        for want in [
            "nic_gbps = 200",
            "vp = 3",
            "zero = 0",
            "flash_attention = false",
            "overlap_grad_reduce = false",
            "recompute = \"selective\"",
            "sequence_parallel = true",
        ] {
            assert!(experiment(c).contains(want), "{want} in\n{}", experiment(c));
        }
    }

    #[test]
    fn blanks_take_the_framework_defaults() {
        let cases = one("megatron-readme-h100,H100-SXM,96,30,4096,16384,32,4096,131072,2,1,48,1,,,192,,,bf16,465.9,tflops_per_gpu,,megatron-core-0.8")
            .expect("parses");
        let e = experiment(&cases[0]);
        for want in [
            "nic_gbps = 400",
            "vp = 1",
            "micro_batch = 1",
            "zero = 1",
            "sequence_parallel = true",
            "recompute = \"none\"",
            "tp_comm_overlap = true",
            // Megatron-LM's `--attention-dropout` default.
            "attention_dropout = 0.1",
            // The README's runs untied the output layer.
            "tied_embeddings = false",
        ] {
            assert!(e.contains(want), "{want} in\n{e}");
        }
    }

    #[test]
    fn bad_rows_name_their_line_and_column() {
        let bad = [
            (
                "korthikanti2022,A100-SXM-80GB,eight,1,1,1,1,1,1,1,1,1,1,,,8,,,bf16,1,s_per_iter,,megatron-lm-2022",
                "`gpus`",
            ),
            (
                "korthikanti2022,A100-SXM-80GB,8,1,1,1,1,1,1,1,1,1,1,,,8,,,bf16,1,hours,,megatron-lm-2022",
                "`unit`",
            ),
            (
                "korthikanti2022,A100-SXM-80GB,8,1,1,1,1,1,1,1,1,1,1,,,8,,,bf16,-1,s_per_iter,,megatron-lm-2022",
                "`measured`",
            ),
            (
                "korthikanti2022,A100-SXM-80GB,8,1,1,1,1,1,1,1,1,1,1,,,8,some,,bf16,1,s_per_iter,,megatron-lm-2022",
                "`recompute`",
            ),
            (
                "korthikanti2022,TPU-v5,8,1,1,1,1,1,1,1,1,1,1,,,8,,,bf16,1,s_per_iter,,megatron-lm-2022",
                "default cluster",
            ),
            ("korthikanti2022,A100-SXM-80GB,8,1,1", "fields"),
        ];
        for (row, needle) in bad {
            let e = one(row).expect_err(row).to_string();
            assert!(e.starts_with("t.csv:2: "), "{e}");
            assert!(e.contains(needle), "{needle} in {e}");
        }
        let e = parse("source,gpu,speed\n").expect_err("bad header");
        assert!(e.to_string().contains("unknown column `speed`"), "{e}");
    }

    /// The `framework` column alone names the release; the `source` text is a free label.
    /// An unknown or empty release is that row's failure, listing the known ones.
    #[test]
    fn the_framework_column_alone_decides_and_an_unknown_one_fails_the_row() {
        let row = |source: &str, framework: &str| {
            format!(
                "{source},H100-SXM,8,2,256,1024,4,128,1000,1,1,8,1,1,1,8,none,,bf16,1,s_per_iter,,{framework}"
            )
        };
        // A source that looks like Megatron-LM's README, labelled NeMo 24.05: NeMo's facts.
        let cases = one(&row("megatron-readme-h100", "nemo-24.05")).expect("parses");
        let e = experiment(&cases[0]);
        assert!(e.contains("attention_backend = \"flash2\""), "{e}");
        assert!(e.contains("tied_embeddings = true"), "{e}");
        assert!(e.contains("# Framework nemo-24.05:"), "{e}");
        for (framework, want) in [("deepspeed", "unknown `deepspeed`"), ("", "empty; name")] {
            let cases = one(&row("x", framework)).expect("the table still reads");
            let why = cases[0]
                .experiment
                .as_ref()
                .expect_err(framework)
                .to_string();
            assert!(why.contains(want), "{why}");
            assert!(
                why.contains("configs/frameworks.toml")
                    && why.contains("megatron-lm-2022")
                    && why.contains("nemo-25.02"),
                "{why}"
            );
            let out =
                std::env::temp_dir().join(format!("fleetsim-unknown-fw-{}", std::process::id()));
            let prepared = prepare(&out, &cases, &Overrides::none(), "t.csv").expect("prepared");
            let failure = prepared[0].1.as_ref().expect_err("a row failure");
            assert!(
                RowFailure::new(cases[0].clone(), failure)
                    .reason
                    .starts_with("column `framework`")
            );
            let _ = std::fs::remove_dir_all(&out);
        }
    }

    /// A release's FP8 launch options reach its FP8 rows only: MLPerf v5.1's
    /// `FP8_PARAM_GATHER=True` says nothing about its NVFP4 runs (Megatron reads
    /// `--fp8-param-gather` only with `--fp8-format`).
    #[test]
    fn fp8_launch_options_apply_to_fp8_rows_only() {
        let row = |precision: &str| {
            format!(
                "mlperf,GB200,512,126,16384,53248,128,8192,32768,4,8,,2,8,1,256,none,true,{precision},3.0,s_per_iter,,mlperf-training-5.1-nvidia"
            )
        };
        let fp8 = one(&row("fp8")).expect("parses");
        assert!(experiment(&fp8[0]).contains("fp8_param_gather = true"));
        let nvfp4 = one(&row("nvfp4")).expect("parses");
        assert!(!experiment(&nvfp4[0]).contains("fp8_param_gather"));
    }

    #[test]
    fn settings_are_written_into_the_case_file() {
        let header = format!("{HEADER},kv_heads,settings");
        let row = "bridge-25.11-b200,B200,8,32,4096,14336,32,8192,128256,1,1,8,1,1,2,128,none,false,fp8,1576,tflops_per_gpu,Llama3-8B; 30624 tok/s/GPU,megatron-bridge-25.11,8,\"model.activation=swiglu;model.norm=rmsnorm;training.fp8_recipe=current;parallel.first_stage_layers=15\"";
        let cases = parse(&format!("{header}\n{row}\n")).expect("parses");
        let e = experiment(&cases[0]);
        // Replaced where the defaults had the key, added where they had not, bare words quoted.
        for want in [
            "activation = \"swiglu\"",
            "norm = \"rmsnorm\"",
            "fp8_recipe = \"current\"",
            "first_stage_layers = 15",
            "nic_gbps = 400",
            // Megatron-Bridge's recipes set no dropout.
            "attention_dropout = 0.0",
        ] {
            assert!(e.contains(want), "{want} in\n{e}");
        }
        assert!(!e.contains("\"gelu\""), "{e}");
        assert_eq!(e.matches("activation =").count(), 1, "{e}");
        let parsed: toml::Table = e.parse().expect("the case file is TOML");
        assert_eq!(parsed["cluster"]["gpus_per_host"].as_integer(), Some(8));
        assert_eq!(cases[0].tokens_per_gpu_s, Some(30624.0));
    }

    #[test]
    fn a_moe_rows_case_says_which_routing_it_runs() {
        let header = format!("{HEADER},kv_heads,settings");
        let row = |settings: &str| {
            format!(
                "grok,GB200,128,64,6144,32768,48,8192,131072,4,1,32,1,1,1,256,none,true,bf16,7.3,s_per_iter,,nemo-25.04,8,\"model.experts=8;model.top_k=2;parallel.ep=8{settings}\""
            )
        };
        for (settings, want) in [
            ("", "# MoE expert load: routing skewed (fleetsim's default"),
            (
                ";model.routing=balanced",
                "# MoE expert load: routing balanced\n",
            ),
            (
                ";model.moe_capacity_factor=1.0;model.moe_pad_to_capacity=true",
                "; padded to capacity, so every rank takes its share",
            ),
        ] {
            let cases = parse(&format!("{header}\n{}\n", row(settings))).expect("parses");
            let e = experiment(&cases[0]);
            assert!(e.contains(want), "{want} in\n{e}");
        }
        let dense = "llama,H100-SXM,8,32,4096,14336,32,8192,128256,1,1,8,1,1,1,128,none,false,bf16,1.0,s_per_iter,,nemo-25.04,8,";
        let cases = parse(&format!("{header}\n{dense}\n")).expect("parses");
        assert!(!experiment(&cases[0]).contains("MoE expert load"));
    }

    #[test]
    fn nemo_launcher_rows_of_2024_run_flash_attention_2() {
        let header = format!("{HEADER},kv_heads,settings");
        for (framework, want) in [
            ("nemo-24.03", true),
            ("nemo-24.05", true),
            ("nemo-24.07", true),
            ("nemo-25.02", false),
            ("megatron-bridge-25.11", false),
        ] {
            let row = format!(
                "x,H100-SXM,16,32,4096,11008,32,16384,32000,2,1,8,1,1,1,256,none,true,fp8,660,tflops_per_gpu,Llama2-7B,{framework},32,"
            );
            let cases = parse(&format!("{header}\n{row}\n")).expect("parses");
            let e = experiment(&cases[0]);
            assert_eq!(
                e.contains("attention_backend = \"flash2\""),
                want,
                "{framework}: {e}"
            );
        }
    }

    #[test]
    fn tokens_per_second_come_from_the_notes() {
        assert_eq!(tokens_in_notes("GPT3; 1600 tok/s/GPU"), Some(1600.0));
        assert_eq!(tokens_in_notes("x;26006 tok/s/GPU; y"), Some(26006.0));
        assert_eq!(tokens_in_notes("no count"), None);
        assert_eq!(tokens_in_notes("tok/s/GPU"), None);
    }

    #[test]
    fn b200_and_gb200_get_their_dgx_clusters() {
        let has = |c: &[(String, String)], key: &str, value: &str| {
            c.iter().any(|(k, v)| k == key && v == value)
        };
        let b200 = cluster_for("B200").expect("B200");
        assert!(has(&b200, "nic_gbps", "400"));
        assert!(has(&b200, "gpus_per_host", "8"));
        // GB200: configs/clusters/gb200-nvl72.toml itself, less its GPU.
        let gb200 = cluster_for("GB200").expect("GB200");
        assert!(has(&gb200, "nvlink_domain", "72"));
        assert!(has(&gb200, "gpus_per_host", "4"));
        assert!(has(&gb200, "nics_per_host", "4"));
        assert!(has(&gb200, "nic_gbps", "400"));
        assert!(gb200.iter().all(|(k, _)| k != "gpu"));
        // The cluster follows the GPU however the row writes its name.
        for (written, gpu) in [
            ("DGX-H100", "H100-SXM"),
            ("h100 sxm5", "H100-SXM"),
            ("GB200 NVL72", "GB200"),
            ("DGX B200", "B200"),
            ("HGX-A100", "A100-SXM-80GB"),
        ] {
            assert_eq!(cluster_for(written), cluster_for(gpu), "{written}");
        }
    }

    /// A case file says where FP8 forward GEMMs get fast accumulation: Hopper parts only, and
    /// not under the blockwise recipe.
    #[test]
    fn fast_accumulation_is_named_for_hopper_parts_only() {
        for (gpu, expected) in [
            ("H100-SXM", true),
            ("H200-SXM", true),
            ("GB200", false),
            ("B200", false),
            ("A100-SXM-80GB", false),
            ("no-such-gpu", false),
        ] {
            assert_eq!(
                fast_accumulation(gpu, Fp8Recipe::Delayed),
                expected,
                "{gpu}"
            );
        }
        assert!(fast_accumulation("H100-SXM", Fp8Recipe::Current));
        assert!(!fast_accumulation("H100-SXM", Fp8Recipe::Blockwise));
    }

    /// Every row of every shipped table becomes an experiment that loads (the 405B rows' 126
    /// layers on PP 8 × VP 8 included).
    #[test]
    fn every_row_of_the_shipped_tables_loads() {
        for (table, rows) in [
            ("e2e_iterations.csv", 18),
            ("e2e_more.csv", 13),
            ("megascale_a100.csv", 8),
            ("mcore_dsv3_gb200.csv", 6),
            ("nemo2407_h100.csv", 12),
            ("bridge_summary.csv", 17),
            ("bridge_2604.csv", 18),
            ("e2e_frontier.csv", 20),
            ("mlperf_gpt3.csv", 3),
            ("nemotron4_340b.csv", 10),
            ("grok1_314b.csv", 6),
            ("llama31_h100.csv", 14),
            ("deepseek_v3.csv", 1),
            ("bridge_qwen3.csv", 15),
            ("bridge_more.csv", 16),
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("configs/validation")
                .join(table);
            let cases = read_cases(&path, &frameworks()).expect(table);
            assert_eq!(cases.len(), rows, "{table}");
            let out = std::env::temp_dir().join(format!("fleetsim-{table}-{}", std::process::id()));
            let prepared = prepare(&out, &cases, &Overrides::none(), table).expect(table);
            assert_eq!(prepared.len(), rows, "{table}");
            for (case, exp) in &prepared {
                assert!(
                    exp.is_ok(),
                    "{table} line {}: {:?}",
                    case.line,
                    exp.as_ref().err()
                );
            }
            let _ = std::fs::remove_dir_all(&out);
        }
    }

    /// Lines as an editor numbers them, comments and blank lines included.
    #[test]
    fn a_row_is_named_by_its_line_in_the_file() {
        let row = "korthikanti2022-text,A100-SXM-80GB,2240,105,20480,81920,128,2048,51200,8,35,8,1,3,1,2240,selective,true,bf16,39.15,s_per_iter,,megatron-lm-2022";
        let text = format!("# a comment\n{HEADER}\n\n# another\n{row}\n");
        let cases = parse(&text).expect("parses");
        assert_eq!((cases[0].row, cases[0].line), (1, 5));
    }

    #[test]
    fn quoted_fields_keep_their_commas_quotes_and_line_breaks() {
        let cases = one("korthikanti2022-text,A100-SXM-80GB,2240,105,20480,81920,128,2048,51200,8,35,8,1,3,1,2240,selective,true,bf16,39.15,s_per_iter,\"say \"\"hi\"\", twice\nthen stop\",megatron-lm-2022")
            .expect("parses");
        assert_eq!(cases[0].notes, "say \"hi\", twice\nthen stop");
        // The notes become one comment line; the file is TOML an experiment loads.
        let experiment = experiment(&cases[0]);
        assert!(
            experiment.contains("# Measured: 39.15 s_per_iter. say \"hi\", twice then stop\n"),
            "{experiment}"
        );
        let parsed: toml::Table = experiment.parse().expect("the case file is TOML");
        assert_eq!(parsed["cluster"]["gpu"].as_str(), Some("A100-SXM-80GB"));
    }

    #[test]
    fn a_gpu_name_with_a_quote_stays_one_toml_string() {
        let cases = one("korthikanti2022-text,\"A100 \"\"odd\"\"\",8,2,256,1024,4,128,1000,1,1,8,1,1,1,8,none,false,bf16,1.0,s_per_iter,,megatron-lm-2022")
            .expect("parses");
        let parsed: toml::Table = experiment(&cases[0])
            .parse()
            .expect("the case file is TOML");
        assert_eq!(parsed["cluster"]["gpu"].as_str(), Some("A100 \"odd\""));
    }

    /// The tables the fuzz target `validate_csv` found a problem with, and the bad tables it
    /// was seeded with (tests/fixtures/fuzz-regressions/validate_csv/): each reads as cases or
    /// an error, never a panic.
    #[test]
    fn fuzz_regressions_read_without_a_panic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/fuzz-regressions/validate_csv");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("the regressions folder") {
            let path = entry.expect("an entry").path();
            let bytes = std::fs::read(&path).expect("an input");
            if let Ok(text) = std::str::from_utf8(&bytes) {
                let _ = parse_cases(text, &path.display().to_string(), &frameworks());
            }
            seen += 1;
        }
        assert!(seen > 0, "no inputs in {}", dir.display());
    }
}
