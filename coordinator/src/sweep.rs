//! `fleetsim sweep`: the cross product of `--vary KEY=V1,V2,...` settings, each run embedded,
//! in one table (`sweep.csv`) and one plot (`sweep.svg`).

use std::fmt::Write as _;
use std::path::Path;
use std::str::FromStr;

use crate::plot::{LineChart, PlotError, Series, line_chart_svg};
use crate::run::{RunError, RunOptions, load_checked, run_embedded};

/// One `--vary KEY=V1,V2,...`. Keys joined by `+` vary together, their values joined the
/// same way: `--vary 'cluster.gpus+cluster.cxl.hosts_per_switch=64+8,128+16'`.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    pub summary: serde_json::Value,
}

/// Runs every combination of `varies` on top of `sets`; `on_row` sees each row as it is done.
/// Every combination is loaded and checked before the first runs, so a bad value stops the
/// sweep at once rather than hours in.
pub fn run_sweep(
    path: &Path,
    sets: &[String],
    varies: &[Vary],
    mut on_row: impl FnMut(&SweepRow),
) -> Result<Vec<SweepRow>, RunError> {
    let experiments = combinations(varies)
        .into_iter()
        .map(|combo| {
            let mut all = sets.to_vec();
            all.extend(combo.iter().flat_map(|(k, v)| overrides(k, v)));
            Ok((combo, load_checked(path, &all)?))
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let mut rows = Vec::new();
    for (combo, exp) in experiments {
        let output = run_embedded(&exp, &RunOptions::default(), None)?;
        let row = SweepRow {
            settings: combo,
            summary: output.summary.json,
        };
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// The measured columns: (header, JSON pointer into summary.json).
const COLUMNS: [(&str, &str); 20] = [
    ("iteration_time_s", "/iteration_time_s"),
    ("batches_per_s", "/batches_per_s"),
    ("samples_per_s", "/samples_per_s"),
    ("mfu", "/mfu"),
    ("result_digest", "/result_digest"),
    ("tflops_per_gpu", "/tflops_per_gpu"),
    ("compute_s", "/breakdown_s/compute"),
    ("exposed_comm_s", "/breakdown_s/exposed_comm"),
    ("bubble_s", "/breakdown_s/bubble"),
    ("wall_s", "/engine/wall_s"),
    ("events", "/engine/events"),
    ("windows", "/engine/windows"),
    ("events_per_window", "/engine/events_per_window"),
    ("cross_partition_events", "/engine/cross_partition_events"),
    ("sync_fraction", "/engine/sync_fraction"),
    ("scheduling", "/engine/scheduling"),
    ("thread_wait_s", "/engine/thread_wait_s"),
    ("partitions", "/engine/partitions"),
    ("lookahead_s", "/engine/lookahead_s"),
    ("peak_rss_bytes", "/engine/peak_rss_bytes"),
];

fn cell(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Null) | None => String::new(),
        Some(serde_json::Value::Number(n)) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.6}"),
            _ => n.to_string(),
        },
        Some(other) => other.to_string(),
    }
}

/// `sweep.csv`: the varied keys, then the measured columns.
pub fn to_csv(varies: &[Vary], rows: &[SweepRow]) -> String {
    let mut out = String::new();
    let headers: Vec<&str> = varies
        .iter()
        .map(|v| v.key.as_str())
        .chain(COLUMNS.iter().map(|(h, _)| *h))
        .collect();
    let _ = writeln!(out, "{}", headers.join(","));
    for r in rows {
        let cells: Vec<String> = r
            .settings
            .iter()
            .map(|(_, v)| v.clone())
            .chain(COLUMNS.iter().map(|(_, p)| cell(r.summary.pointer(p))))
            .collect();
        let _ = writeln!(out, "{}", cells.join(","));
    }
    out
}

/// One line per row as a run finishes, for the terminal.
pub fn row_line(r: &SweepRow) -> String {
    let settings: Vec<String> = r.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let get = |p: &str| {
        r.summary
            .pointer(p)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    };
    format!(
        "{}: iteration {:.6} s, wall {:.2} s, sync {:.3}, {:.0} cross-partition events, {} windows, digest {}",
        settings.join(" "),
        get("/iteration_time_s"),
        get("/engine/wall_s"),
        get("/engine/sync_fraction"),
        get("/engine/cross_partition_events"),
        get("/engine/windows"),
        cell(r.summary.pointer("/result_digest"))
    )
}

/// A measured column by name: (header, JSON pointer into summary.json).
pub fn column(name: &str) -> Option<(&'static str, &'static str)> {
    COLUMNS.iter().copied().find(|(n, _)| *n == name)
}

pub fn column_names() -> Vec<&'static str> {
    COLUMNS.iter().map(|(n, _)| *n).collect()
}

/// The plot: the last varied key across (its values when they are numbers, else their
/// positions), one line per combination of the others. Up: `y` when given, else wall time
/// when only `engine.*` keys vary (the simulated result cannot change then), else the
/// iteration time.
pub fn plot_svg(
    varies: &[Vary],
    rows: &[SweepRow],
    y: Option<(&str, &str)>,
) -> Result<String, PlotError> {
    let Some(last) = varies.last() else {
        return Err(PlotError::new("nothing was varied"));
    };
    // Keys that vary together are plotted against the first.
    let first = |v: &str| v.split('+').next().unwrap_or(v).trim().to_string();
    let numeric = last.values.iter().all(|v| first(v).parse::<f64>().is_ok());
    let engine_only = varies.iter().all(|v| v.key.starts_with("engine."));
    let (y_pointer, y_label) = match y {
        Some((name, pointer)) => (pointer, name),
        None if engine_only => ("/engine/wall_s", "wall time (s)"),
        None => ("/iteration_time_s", "iteration time (s)"),
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
        let y = r
            .summary
            .pointer(y_pointer)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
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
    let x_label = if numeric {
        first(&last.key)
    } else {
        format!("{} ({})", last.key, last.values.join(", "))
    };
    line_chart_svg(&LineChart {
        title: "fleetsim sweep",
        x_label: &x_label,
        y_label,
        log_x: false,
        x_ticks: |x| format!("{x}"),
        series: &series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
