//! `fleetsim collective`: nccl-tests' performance table for one operation over N GPUs of a
//! cluster. Each message size is its own one-operation workload, run by the same engine as
//! `fleetsim run`, so the collective crosses the real topology with the NCCL model's plan.
//!
//! `algbw` and `busbw` follow nccl-tests' `doc/PERFORMANCE.md`: algbw = size / time, busbw =
//! algbw × the operation's factor (2(n−1)/n for all-reduce, (n−1)/n for all-gather,
//! reduce-scatter and all-to-all, 1 for broadcast and send/recv).

use std::path::PathBuf;

use anyhow::Context as _;
use sim::experiment::Experiment;
use sim::workload::bench::{self, BenchOp};
use sim_config::Overrides;
use sim_engine::results::class_index;
use sim_engine::{RunResults, SimModel};
use sim_models::topology::{LinkClass, NodeKind};

use coordinator::output::plot::{LineChart, Series, line_chart_svg};
use coordinator::output::table::CsvTable;
use coordinator::run::{RunError, RunOptions, partition, simulate};

/// `fleetsim collective`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A cluster file (configs/clusters/) or an experiment file; only its cluster,
    /// network, collectives and engine settings are used.
    pub cluster_or_experiment: PathBuf,
    /// all-reduce, all-gather, reduce-scatter, all-to-all, broadcast or send-recv
    /// (nccl-tests' names such as all_reduce also work).
    #[arg(long)]
    pub op: String,
    /// GPUs taking part: ranks 0..N, on whole hosts of the cluster.
    #[arg(long)]
    pub gpus: u32,
    /// MIN:MAX (doubling), MIN:MAX:FACTOR, or a list such as 1M,64M,1G.
    #[arg(long, default_value = "1M:8G")]
    pub sizes: String,
    /// Element type (nccl-tests -d): only the count column depends on it.
    #[arg(long, default_value = "float")]
    pub dtype: String,
    /// Print CSV instead of the table.
    #[arg(long)]
    pub csv: bool,
    /// Also write busbw against size as an SVG plot to this file.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Threads per size's run (default: engine.threads, 0 = the idle cores, shared among
    /// engine.workers).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Override a key of the file, e.g. --set collectives.algorithm=ring.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let op = BenchOp::parse(&self.op).with_context(|| {
            format!(
                "--op: unknown operation `{}`; use one of {}",
                self.op,
                BenchOp::NAMES.join(", ")
            )
        })?;
        let gpus = self.gpus;
        if gpus < 2 {
            anyhow::bail!("--gpus: {gpus} GPUs have nothing to communicate; give 2 or more");
        }
        let sizes = parse_sizes(&self.sizes).map_err(|e| anyhow::anyhow!("--sizes: {e}"))?;
        let (dtype, word) = DTYPES
            .iter()
            .copied()
            .find(|(name, _)| *name == self.dtype)
            .with_context(|| {
                let names: Vec<&str> = DTYPES.iter().map(|(n, _)| *n).collect();
                format!(
                    "--dtype: unknown type `{}`; use one of {}",
                    self.dtype,
                    names.join(", ")
                )
            })?;
        let exp = Experiment::load_cluster(
            &self.cluster_or_experiment,
            &Overrides::from_sets(&self.sets)?,
            gpus,
        )?;
        let spec = BenchSpec {
            op,
            gpus,
            sizes,
            dtype,
            word,
        };
        let options = RunOptions {
            threads: self.threads,
            ..RunOptions::default()
        };
        // Printed once every size ran: an error part-way leaves no partial table on stdout.
        let rows = run_bench(&exp, &spec, &options)?;
        if self.csv {
            out!("{}", to_csv(&rows, dtype));
        } else {
            out!("{}", to_text(&exp, &spec, &rows));
        }
        if let Some(path) = self.plot {
            let svg = to_svg(&exp, &spec, &rows).map_err(anyhow::Error::msg)?;
            std::fs::write(&path, svg)
                .with_context(|| format!("writing the plot to {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        Ok(())
    }
}

/// nccl-tests' data types (`-d`) and their sizes.
pub const DTYPES: [(&str, u64); 8] = [
    ("int8", 1),
    ("uint8", 1),
    ("half", 2),
    ("bfloat16", 2),
    ("float", 4),
    ("int32", 4),
    ("double", 8),
    ("int64", 8),
];

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchSpec {
    pub op: BenchOp,
    pub gpus: u32,
    /// Requested sizes in bytes; each is rounded as nccl-tests rounds it.
    pub sizes: Vec<u64>,
    pub dtype: &'static str,
    pub word: u64,
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    pub size: u64,
    pub count: u64,
    pub time_us: f64,
    /// GB/s (10⁹ bytes per second), as nccl-tests prints them.
    pub algbw: f64,
    pub busbw: f64,
    pub algorithm: String,
    pub protocol: String,
    pub channels: String,
    pub events: u64,
    pub digest: String,
    /// Bytes put on network links (counted once, where they leave a NIC, or once per
    /// analytical transfer crossing the network), protocol and link overheads included.
    pub network_bytes: u64,
}

/// Parses `--sizes`: `MIN:MAX` (doubling, like nccl-tests `-b MIN -e MAX -f 2`),
/// `MIN:MAX:FACTOR`, or a comma-separated list; sizes take K, M, G, T suffixes (powers of
/// 1024, as nccl-tests reads them).
pub fn parse_sizes(spec: &str) -> Result<Vec<u64>, String> {
    let spec = spec.trim();
    let parts: Vec<&str> = spec.split(':').collect();
    let sizes = match parts.as_slice() {
        [list] => list
            .split(',')
            .map(parse_size)
            .collect::<Result<Vec<_>, _>>()?,
        [min, max] | [min, max, _] => {
            let (min, max) = (parse_size(min)?, parse_size(max)?);
            let factor = match parts.get(2) {
                Some(f) => f
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|&f| f >= 2)
                    .ok_or_else(|| format!("factor `{f}` must be a whole number of 2 or more"))?,
                None => 2,
            };
            if min > max {
                return Err(format!(
                    "the first size ({min} B) is above the last ({max} B)"
                ));
            }
            let mut sizes = Vec::new();
            let mut s = min;
            while s <= max {
                sizes.push(s);
                s = match s.checked_mul(factor) {
                    Some(next) => next,
                    None => break,
                };
            }
            sizes
        }
        _ => return Err("expected MIN:MAX, MIN:MAX:FACTOR or a list such as 1M,64M,1G".into()),
    };
    if sizes.len() > 64 {
        return Err(format!(
            "{} sizes; at most 64 are run at once (raise the factor)",
            sizes.len()
        ));
    }
    Ok(sizes)
}

fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let digits = upper.trim_end_matches("IB").trim_end_matches('B');
    let (number, shift) = match digits.chars().last() {
        Some('K') => (&digits[..digits.len() - 1], 10),
        Some('M') => (&digits[..digits.len() - 1], 20),
        Some('G') => (&digits[..digits.len() - 1], 30),
        Some('T') => (&digits[..digits.len() - 1], 40),
        _ => (digits, 0),
    };
    number
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{t}` is not a size; write e.g. 8, 32K, 1M or 8G"))
}

/// Simulates every size of `spec` on `exp`'s cluster.
pub fn run_bench(
    exp: &Experiment,
    spec: &BenchSpec,
    options: &RunOptions,
) -> Result<Vec<BenchRow>, RunError> {
    let compute = exp.compute_model()?;
    let sizes: Vec<u64> = spec
        .sizes
        .iter()
        .map(|&s| spec.op.round_size(s, spec.gpus, spec.word))
        .collect();
    let Some(&first) = sizes.first() else {
        return Ok(Vec::new());
    };
    // The cluster is built and partitioned once; each size only swaps the workload.
    let workload = |size| bench::workload(spec.op, spec.gpus, size);
    let mut model = SimModel::build(exp, workload(first), &compute, false)?;
    let partition = partition(exp, &model, options.placement(exp))?;
    let mut rows = Vec::with_capacity(sizes.len());
    for &size in &sizes {
        model = model.with_workload(exp, workload(size), &compute);
        let (returned, results, engine) = simulate(exp, model, &partition, options, None)?;
        model = returned;
        let time_s = results
            .iteration_ps()
            .map_err(RunError::Unfinished)?
            .as_secs_f64();
        let algbw = if time_s > 0.0 {
            size as f64 / time_s / 1e9
        } else {
            0.0
        };
        let plan = results
            .reports
            .iter()
            .find_map(|(_, r)| r.collectives.first().map(|(_, st)| st.plan.clone()))
            .unwrap_or_default();
        let mut parts = plan.split('/').map(str::to_string);
        let (algorithm, protocol, channels) = match spec.op {
            BenchOp::SendRecv => ("p2p".into(), "-".into(), "-".into()),
            BenchOp::Collective(_) => (
                parts.next().unwrap_or_else(|| "-".into()),
                parts.next().unwrap_or_else(|| "-".into()),
                parts.next().unwrap_or_else(|| "-".into()),
            ),
        };
        let row = BenchRow {
            size,
            count: size / spec.word,
            time_us: time_s * 1e6,
            algbw,
            busbw: algbw * spec.op.bus_factor(spec.gpus),
            algorithm,
            protocol,
            channels,
            events: engine.stats.events,
            digest: results.digest(),
            network_bytes: network_bytes(&model, &results),
        };
        rows.push(row);
    }
    Ok(rows)
}

/// Bytes a run put on the network: what left every NIC on a network link, plus what GPUs
/// sent analytically across it.
fn network_bytes(model: &SimModel, results: &RunResults) -> u64 {
    let network = class_index(LinkClass::Network);
    results
        .reports
        .iter()
        .map(|(id, r)| {
            let from_nic = if model.topology.nodes()[*id as usize].kind == NodeKind::Nic {
                r.ports
                    .iter()
                    .filter(|p| model.topology.link(p.link).class == LinkClass::Network)
                    .map(|p| p.bytes)
                    .sum()
            } else {
                0
            };
            from_nic + r.analytical_bytes[network]
        })
        .sum()
}

/// The whole table: header, one line per size, nccl-tests' average bus bandwidth.
pub fn to_text(exp: &Experiment, spec: &BenchSpec, rows: &[BenchRow]) -> String {
    let mut out = header(exp, spec);
    for row in rows {
        out += &row_text(row, spec.dtype);
    }
    out + &footer(rows)
}

/// The header nccl-tests prints above its table, with what fleetsim ran on.
fn header(exp: &Experiment, spec: &BenchSpec) -> String {
    let c = &exp.loaded.config.cluster;
    let gpus_per_host = c.gpus_per_host.min(spec.gpus);
    let hosts = spec.gpus.div_ceil(c.gpus_per_host);
    let gpu = exp.gpu_types.first().map_or("?", |g| g.name.as_str());
    let network = &exp.loaded.config.network;
    format!(
        "# fleetsim collective: {op} on {n} GPUs ({hosts} host(s) x {gpus_per_host}) of {gpu}, {topology}, {nics} x {nic} Gb/s NICs per host, network model {model}\n#\n#{:>11} {:>13} {:>9} {:>10} {:>12} {:>12}  {:<13} {:<8} {:>8}\n#{:>11} {:>13} {:>9} {:>10} {:>12} {:>12}\n",
        "size",
        "count",
        "type",
        "time",
        "algbw",
        "busbw",
        "algorithm",
        "protocol",
        "channels",
        "(B)",
        "(elements)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        op = spec.op.name(),
        n = spec.gpus,
        topology = c.topology.name(),
        nics = c.nics_per_host.unwrap_or(c.gpus_per_host),
        nic = c.nic_gbps,
        model = network.model.name(),
    )
}

/// One table line, in nccl-tests' column layout.
fn row_text(row: &BenchRow, dtype: &str) -> String {
    format!(
        " {:>11} {:>13} {:>9} {:>10.2} {:>12.2} {:>12.2}  {:<13} {:<8} {:>8}\n",
        row.size,
        row.count,
        dtype,
        row.time_us,
        row.algbw,
        row.busbw,
        row.algorithm,
        row.protocol,
        row.channels
    )
}

/// nccl-tests' closing line: the mean bus bandwidth over the sizes.
fn footer(rows: &[BenchRow]) -> String {
    let mean = rows.iter().map(|r| r.busbw).sum::<f64>() / rows.len().max(1) as f64;
    let events: u64 = rows.iter().map(|r| r.events).sum();
    format!("# Avg bus bandwidth    : {mean:.3}\n# simulated {events} events\n")
}

pub fn to_csv(rows: &[BenchRow], dtype: &str) -> String {
    let mut table = CsvTable::new([
        "size_bytes",
        "count",
        "type",
        "time_us",
        "algbw_gb_s",
        "busbw_gb_s",
        "algorithm",
        "protocol",
        "channels",
        "events",
        "digest",
    ]);
    for r in rows {
        table.row([
            r.size.to_string(),
            r.count.to_string(),
            dtype.to_string(),
            format!("{:.3}", r.time_us),
            format!("{:.3}", r.algbw),
            format!("{:.3}", r.busbw),
            r.algorithm.to_string(),
            r.protocol.to_string(),
            r.channels.to_string(),
            r.events.to_string(),
            r.digest.to_string(),
        ]);
    }
    table.finish()
}

/// busbw against size (log₂ axis), as an SVG document.
pub fn to_svg(exp: &Experiment, spec: &BenchSpec, rows: &[BenchRow]) -> Result<String, String> {
    let gpu = exp.gpu_types.first().map_or("?", |g| g.name.as_str());
    let title = format!("{} busbw, {} x {gpu}", spec.op.name(), spec.gpus);
    let series = [Series {
        name: format!("{} (simulated)", exp.name()),
        points: rows.iter().map(|r| (r.size as f64, r.busbw)).collect(),
    }];
    line_chart_svg(&LineChart {
        title: &title,
        x_label: "message size",
        y_label: "busbw (GB/s)",
        log_x: true,
        x_ticks: human_size,
        series: &series,
    })
    .map_err(|e| e.to_string())
}

/// 1048576 → "1M".
pub fn human_size(bytes: f64) -> String {
    let b = bytes.round() as u64;
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    if b >= 1 << 10 {
        return format!("{:.1}K", bytes / 1024.0);
    }
    format!("{b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_double_from_min_to_max() {
        assert_eq!(
            parse_sizes("1M:8M").expect("parses"),
            vec![1 << 20, 2 << 20, 4 << 20, 8 << 20]
        );
        assert_eq!(
            parse_sizes("1K:64K:4").expect("parses"),
            vec![1 << 10, 4 << 10, 16 << 10, 64 << 10]
        );
        assert_eq!(
            parse_sizes("8,1MiB,2GB").expect("parses"),
            vec![8, 1 << 20, 2 << 30]
        );
    }

    #[test]
    fn bad_sizes_say_what_to_write() {
        for (bad, says) in [
            ("1X", "not a size"),
            ("8M:1M", "above the last"),
            ("1M:8M:1", "factor"),
            ("1:2:3:4", "expected MIN:MAX"),
            ("0", "not a size"),
        ] {
            let e = parse_sizes(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        let many: Vec<String> = (1..=65).map(|i| i.to_string()).collect();
        let e = parse_sizes(&many.join(",")).expect_err("65 sizes");
        assert!(e.contains("at most 64"), "{e}");
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human_size(1048576.0), "1M");
        assert_eq!(human_size(8.0 * 1073741824.0), "8G");
        assert_eq!(human_size(512.0), "512");
    }
}
