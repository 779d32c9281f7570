//! `fleetsim partition`: every strategy (or one) on an experiment's topology and workload
//! without simulating, with the static quality metrics side by side; `partition-report.csv`
//! and an SVG plot of cut traffic against imbalance.

use std::fmt::Write as _;
use std::time::Instant;

use partitioner::{Load, Quality};
use sim::experiment::Experiment;

use crate::plot::{LineChart, PlotError, Series, line_chart_svg};
use crate::run::RunError;

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
    let workload = sim::workload::load_or_compile(exp, None)?;
    let net = sim::engine::NetworkParams::from_experiment(exp, &topology)?;
    let load = Load::estimate(&topology, &workload, &net);
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
    q.lookahead_ps
        .map_or_else(|| "-".into(), |l| format!("{:.0}", l as f64 / 1e3))
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
    let mut out = String::from(
        "strategy,parts,lps_min,lps_mean,lps_max,imbalance,lookahead_ns,cut_bytes,cut_traffic_share,latency_weighted_cut,cut_links_network,cut_links_nvlink,cut_links_pcie,cut_links_cxl,seconds,error\n",
    );
    for r in &c.rows {
        match &r.quality {
            Ok(q) => {
                let class = |k: &str| q.cut_links.get(k).copied().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "{},{},{},{:.3},{},{:.4},{},{:.0},{:.6},{:.3},{},{},{},{},{:.4},",
                    r.strategy,
                    q.partitions,
                    q.lps_min,
                    q.lps_mean,
                    q.lps_max,
                    q.imbalance,
                    q.lookahead_ps
                        .map_or_else(String::new, |l| format!("{:.1}", l as f64 / 1e3)),
                    q.cut_bytes,
                    q.cut_traffic_share,
                    q.latency_weighted_cut,
                    class("network"),
                    class("nvlink"),
                    class("pcie"),
                    class("cxl"),
                    r.seconds
                );
            }
            Err(e) => {
                let _ = writeln!(
                    out,
                    "{},,,,,,,,,,,,,,{:.4},\"{}\"",
                    r.strategy,
                    r.seconds,
                    e.replace('"', "'")
                );
            }
        }
    }
    out
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
