//! `fleetsim partition`: every strategy (or one) on an experiment's topology and workload
//! without simulating, with the static quality metrics side by side; `partition-report.csv`
//! and an SVG plot of cut traffic against imbalance.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use coordinator::output::plot::{LineChart, PlotError, Series, line_chart_svg};
use coordinator::output::table::CsvTable;
use coordinator::run::RunError;
use partitioner::{Load, Quality};
use sim::experiment::Experiment;
use sim_config::Overrides;

/// `fleetsim partition`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML).
    pub experiment: PathBuf,
    /// Partitions to cut into (0: each strategy's natural count).
    #[arg(long)]
    pub parts: u32,
    /// A strategy, a comma-separated list, or `all`.
    #[arg(long, default_value = "all")]
    pub strategy: String,
    /// Where the report and plot go. Default: runs/<experiment name>-partition.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the CSV instead of the table.
    #[arg(long)]
    pub csv: bool,
    /// Override a key of the experiment file, e.g. --set cluster.gpus=4096.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let exp = Experiment::load(&self.experiment, &Overrides::from_sets(&self.sets)?)?;
        let strategies: Vec<String> = self
            .strategy
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        let comparison = compare(&exp, self.parts, &strategies)?;
        let dir = self
            .out
            .unwrap_or_else(|| PathBuf::from("runs").join(format!("{}-partition", exp.name())));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let csv_text = to_csv(&comparison);
        let csv_path = dir.join("partition-report.csv");
        std::fs::write(&csv_path, &csv_text)
            .with_context(|| format!("writing {}", csv_path.display()))?;
        let svg =
            plot_svg(&comparison).map_err(|e| anyhow::anyhow!("plotting the comparison: {e}"))?;
        let svg_path = dir.join("partition-report.svg");
        std::fs::write(&svg_path, svg)
            .with_context(|| format!("writing {}", svg_path.display()))?;
        if self.csv {
            out!("{csv_text}");
        } else {
            out!("{}", to_text(&comparison));
            outln!("report in {}", dir.display());
        }
        Ok(())
    }
}

/// One strategy's outcome.
#[derive(Debug, Clone)]
pub struct StrategyRow {
    pub strategy: String,
    /// The assignment's quality, or why the strategy does not apply here.
    pub quality: Result<Quality, String>,
    /// Time to partition, seconds.
    pub seconds: f64,
}

/// What `fleetsim partition` found.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub experiment: String,
    pub gpus: u32,
    pub atoms: u32,
    pub parts: u32,
    /// Time to build the topology and workload and to estimate the load, seconds.
    pub setup_s: f64,
    pub rows: Vec<StrategyRow>,
}

/// Partitions `exp` into `parts` with each of `strategies` (every one for `["all"]`).
pub fn compare(
    exp: &Experiment,
    parts: u32,
    strategies: &[String],
) -> Result<Comparison, RunError> {
    let started = Instant::now();
    let topology = exp.build_topology()?;
    let workload = sim::load::load_or_compile(exp, None)?;
    let net = sim_engine::NetworkParams::from_experiment(exp, &topology)?;
    let load = Load::estimate(&topology, &workload, &net.segmenting());
    let atoms = partitioner::Atoms::new(&topology).count;
    let setup_s = started.elapsed().as_secs_f64();
    let names: Vec<String> = if strategies.iter().any(|s| s == "all") {
        partitioner::names().iter().map(|s| s.to_string()).collect()
    } else {
        strategies.to_vec()
    };
    let seed = exp.loaded.config.engine.seed;
    let mut rows = Vec::new();
    for name in names {
        let t = Instant::now();
        let assignment = partitioner::partition(&topology, &name, parts, &load, seed);
        let seconds = t.elapsed().as_secs_f64();
        let quality = match assignment {
            Ok(a) => Ok(Quality::measure(&topology, &a, &load)),
            Err(e) if partitioner::names().contains(&name.as_str()) || name == "by-rack" => {
                Err(e.to_string())
            }
            Err(e) => {
                return Err(RunError::Partition(
                    exp.loaded.error("engine.partition", e.to_string()),
                ));
            }
        };
        rows.push(StrategyRow {
            strategy: name,
            quality,
            seconds,
        });
    }
    Ok(Comparison {
        experiment: exp.name().to_string(),
        gpus: topology.gpu_count(),
        atoms,
        parts,
        setup_s,
        rows,
    })
}

fn lookahead_ns(q: &Quality) -> String {
    q.lookahead
        .map_or_else(|| "-".into(), |l| format!("{:.0}", l.as_ps() as f64 / 1e3))
}

fn cut(q: &Quality) -> String {
    let parts: Vec<String> = q
        .cut_links
        .iter()
        .map(|(class, n)| format!("{class}:{n}"))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

/// The comparison as a table.
pub fn to_text(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} GPUs, {} atoms (hosts and switches), {} parts asked{}; setup {:.2} s",
        c.experiment,
        c.gpus,
        c.atoms,
        c.parts,
        if c.parts == 0 {
            " (natural counts)"
        } else {
            ""
        },
        c.setup_s
    );
    let _ = writeln!(
        out,
        "{:<14} {:>6} {:>8} {:>9} {:>8} {:>9} {:>10} {:>8} {:>8}  cut links",
        "strategy",
        "parts",
        "LPs min",
        "LPs mean",
        "LPs max",
        "imbalance",
        "lookahead",
        "cut traf",
        "time"
    );
    let _ = writeln!(
        out,
        "{:<14} {:>6} {:>8} {:>9} {:>8} {:>9} {:>10} {:>8} {:>8}",
        "", "", "", "", "", "(max/mean)", "(ns)", "(%)", "(s)"
    );
    for r in &c.rows {
        match &r.quality {
            Ok(q) => {
                let _ = writeln!(
                    out,
                    "{:<14} {:>6} {:>8} {:>9.1} {:>8} {:>9.3} {:>10} {:>8.3} {:>8.3}  {}",
                    r.strategy,
                    q.partitions,
                    q.lps_min,
                    q.lps_mean,
                    q.lps_max,
                    q.imbalance,
                    lookahead_ns(q),
                    q.cut_traffic_share * 100.0,
                    r.seconds,
                    cut(q)
                );
            }
            Err(e) => {
                let _ = writeln!(out, "{:<14} does not apply: {e}", r.strategy);
            }
        }
    }
    out.push('\n');
    for r in &c.rows {
        if let Some(what) = partitioner::describe(&r.strategy) {
            let _ = writeln!(out, "{:<14} {what}", r.strategy);
        }
    }
    out
}

/// `partition-report.csv`: one row per strategy.
pub fn to_csv(c: &Comparison) -> String {
    let mut table = CsvTable::new([
        "strategy",
        "parts",
        "lps_min",
        "lps_mean",
        "lps_max",
        "imbalance",
        "lookahead_ns",
        "cut_bytes",
        "cut_traffic_share",
        "latency_weighted_cut",
        "cut_links_network",
        "cut_links_nvlink",
        "cut_links_pcie",
        "cut_links_cxl",
        "seconds",
        "error",
    ]);
    for r in &c.rows {
        let seconds = format!("{:.4}", r.seconds);
        match &r.quality {
            Ok(q) => {
                let class = |k: &str| q.cut_links.get(k).copied().unwrap_or(0).to_string();
                table.row([
                    r.strategy.clone(),
                    q.partitions.to_string(),
                    q.lps_min.to_string(),
                    format!("{:.3}", q.lps_mean),
                    q.lps_max.to_string(),
                    format!("{:.4}", q.imbalance),
                    q.lookahead
                        .map_or_else(String::new, |l| format!("{:.1}", l.as_ps() as f64 / 1e3)),
                    format!("{:.0}", q.cut_bytes),
                    format!("{:.6}", q.cut_traffic_share),
                    format!("{:.3}", q.latency_weighted_cut),
                    class("network"),
                    class("nvlink"),
                    class("pcie"),
                    class("cxl"),
                    seconds,
                    String::new(),
                ]);
            }
            Err(e) => {
                let mut fields = vec![r.strategy.clone()];
                fields.resize(14, String::new());
                fields.extend([seconds, e.clone()]);
                table.row(fields);
            }
        }
    }
    table.finish()
}

/// Every strategy as a point: imbalance across, cut traffic share up. Lower left is better.
pub fn plot_svg(c: &Comparison) -> Result<String, PlotError> {
    let series: Vec<Series> = c
        .rows
        .iter()
        .filter_map(|r| {
            r.quality.as_ref().ok().map(|q| Series {
                name: r.strategy.clone(),
                points: vec![(q.imbalance, q.cut_traffic_share * 100.0)],
            })
        })
        .collect();
    let title = format!(
        "{}: {} partitions asked, expected traffic cut against load imbalance",
        c.experiment, c.parts
    );
    line_chart_svg(&LineChart {
        title: &title,
        x_label: "imbalance (busiest partition's expected events / mean)",
        y_label: "expected traffic on cut links (%)",
        log_x: false,
        x_ticks: |x| format!("{x:.2}"),
        series: &series,
    })
}
