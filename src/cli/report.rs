//! `fleetsim report DIR [DIR...]`: one self-contained HTML page (no script, no network;
//! charts are inline SVG) of where a run's time went, or of several runs side by side, or of
//! a sweep's or validation's folder (issue 20). It reads what `run`, `sweep` and `validate`
//! wrote: `summary.json`, `ranks.csv`, `collectives.csv`, `links.csv`, `tiers.csv`,
//! `timeline.csv`; `sweep.csv` and `sweep.svg`; `validation.csv` and `parity.svg`. Every
//! record it draws is aggregate, so the page of a 131,072-GPU run is as small as another's.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use coordinator::output::summary::Summary;

/// `fleetsim report`'s arguments.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run folders (`fleetsim run`'s output), sweep folders or validation folders.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The HTML file. Default: report.html in the (first) folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl Args {
    pub fn execute(self) -> anyhow::Result<()> {
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| self.dirs[0].join("report.html"));
        let html = render(&self.dirs)?;
        std::fs::write(&out, &html).with_context(|| format!("writing {}", out.display()))?;
        println!(
            "report: {} ({} kB)",
            out.display(),
            html.len().div_ceil(1000)
        );
        Ok(())
    }
}

/// The page for `dirs`.
pub fn render(dirs: &[PathBuf]) -> anyhow::Result<String> {
    let folders = dirs
        .iter()
        .map(|d| Folder::read(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let title = match folders.as_slice() {
        [one] => one.name(),
        many => format!("{} runs compared", many.len()),
    };
    let mut page = Page::new(&title);
    let runs: Vec<&Run> = folders
        .iter()
        .filter_map(|f| match f {
            Folder::Run(r) => Some(r.as_ref()),
            _ => None,
        })
        .collect();
    if runs.len() > 1 {
        comparison(&mut page, &runs);
    }
    for folder in &folders {
        match folder {
            Folder::Run(run) => run_sections(&mut page, run, runs.len() > 1),
            Folder::Table(t) => table_section(&mut page, t),
        }
    }
    Ok(page.finish())
}

/// What one folder holds.
enum Folder {
    Run(Box<Run>),
    Table(TableFolder),
}

impl Folder {
    fn read(dir: &Path) -> anyhow::Result<Folder> {
        if dir.join("summary.json").is_file() {
            return Ok(Folder::Run(Box::new(Run::read(dir)?)));
        }
        for (csv, svg, kind) in [
            ("validation.csv", "parity.svg", "validation"),
            ("sweep.csv", "sweep.svg", "sweep"),
        ] {
            if dir.join(csv).is_file() {
                return Ok(Folder::Table(TableFolder {
                    dir: dir.to_path_buf(),
                    kind,
                    table: Csv::read(&dir.join(csv))?,
                    plot: std::fs::read_to_string(dir.join(svg)).ok(),
                }));
            }
        }
        bail!(
            "{} is not a fleetsim output folder: it has no summary.json (fleetsim run), sweep.csv (fleetsim sweep) or validation.csv (fleetsim validate); pass the folder a command wrote",
            dir.display()
        )
    }

    fn name(&self) -> String {
        match self {
            Folder::Run(r) => r.summary.name.clone(),
            Folder::Table(t) => format!("{} {}", t.kind, t.dir.display()),
        }
    }
}

/// A run folder's records.
struct Run {
    dir: PathBuf,
    summary: Summary,
    ranks: Option<Csv>,
    collectives: Option<Csv>,
    links: Option<Csv>,
    tiers: Option<Csv>,
    timeline: Option<Csv>,
}

impl Run {
    fn read(dir: &Path) -> anyhow::Result<Run> {
        let path = dir.join("summary.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let summary: Summary = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not a summary.json this fleetsim reads; run the experiment again",
                path.display()
            )
        })?;
        let optional = |name: &str| -> anyhow::Result<Option<Csv>> {
            let p = dir.join(name);
            p.is_file().then(|| Csv::read(&p)).transpose()
        };
        Ok(Run {
            dir: dir.to_path_buf(),
            summary,
            ranks: optional("ranks.csv")?,
            collectives: optional("collectives.csv")?,
            links: optional("links.csv")?,
            tiers: optional("tiers.csv")?,
            timeline: optional("timeline.csv")?,
        })
    }
}

/// A sweep's or validation's folder: its table and plot.
struct TableFolder {
    dir: PathBuf,
    kind: &'static str,
    table: Csv,
    plot: Option<String>,
}

/// A CSV file: its header and rows.
struct Csv {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Csv {
    fn read(path: &Path) -> anyhow::Result<Csv> {
        let mut reader = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .from_path(path)
            .with_context(|| format!("reading {}", path.display()))?;
        let header = reader
            .headers()
            .with_context(|| format!("{}: no header line", path.display()))?
            .iter()
            .map(str::to_string)
            .collect();
        let rows = reader
            .records()
            .map(|r| r.map(|r| r.iter().map(str::to_string).collect()))
            .collect::<Result<Vec<Vec<String>>, _>>()
            .with_context(|| format!("{}: a row is not CSV", path.display()))?;
        Ok(Csv { header, rows })
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// Column `name` of `row` as a number (0 when absent or empty).
    fn num(&self, row: &[String], name: &str) -> f64 {
        self.column(name)
            .and_then(|c| row.get(c))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    fn text<'a>(&self, row: &'a [String], name: &str) -> &'a str {
        self.column(name)
            .and_then(|c| row.get(c))
            .map_or("", String::as_str)
    }
}

/// The page being written.
struct Page {
    html: String,
}

/// Colours of the split, in its order: compute, exposed communication, bubble, idle.
const SPLIT: [(&str, &str); 4] = [
    ("compute", "#4e79a7"),
    ("exposed communication", "#e15759"),
    ("bubble", "#f28e2b"),
    ("idle", "#bab0ac"),
];

/// Colours of the timeline's shares: compute, exposed collectives, pipeline, idle.
const TIMELINE: [(&str, &str); 4] = [
    ("compute", "#4e79a7"),
    ("exposed collectives", "#e15759"),
    ("pipeline send/receive", "#f28e2b"),
    ("idle", "#eeeeee"),
];

impl Page {
    fn new(title: &str) -> Page {
        let mut html = String::with_capacity(1 << 16);
        let _ = write!(
            html,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>fleetsim report: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>fleetsim report: {}</h1>\n",
            esc(title),
            esc(title)
        );
        Page { html }
    }

    fn push(&mut self, s: &str) {
        self.html.push_str(s);
    }

    fn finish(mut self) -> String {
        self.html.push_str(
            "<footer>Written by <code>fleetsim report</code> from the run's own records (summary.json and the CSV files beside it).</footer>\n</body>\n</html>\n",
        );
        self.html
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}h3{font-size:1.05em}table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}.figures{display:flex;flex-wrap:wrap;gap:.8em}.figure{border:1px solid #ddd;border-radius:6px;padding:.5em .8em;min-width:9em}.figure .label{font-size:.8em;color:#666}.figure .value{font-size:1.4em;font-weight:600}.legend span{display:inline-block;margin-right:1em;font-size:.85em}.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:middle}.note{color:#666;font-size:.85em}svg{max-width:100%;height:auto}footer{margin-top:3em;color:#888;font-size:.8em}.scroll{overflow-x:auto}";

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An HTML id from a run's folder and a section.
fn id_of(run: &Run, section: &str) -> String {
    let base: String = run
        .dir
        .display()
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{section}-{}", base.trim_matches('-'))
}

fn legend(page: &mut Page, entries: &[(&str, &str)]) {
    page.push("<p class=\"legend\">");
    for (name, colour) in entries {
        let _ = write!(
            page.html,
            "<span><i style=\"background:{colour}\"></i>{name}</span>"
        );
    }
    page.push("</p>\n");
}

/// A number as people read it: `digits` significant decimals past the point.
fn fmt(x: f64, digits: usize) -> String {
    format!("{x:.digits$}")
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "n/a".to_string(), |v| fmt(v, digits))
}

/// The headline of one run: iteration, throughput, MFU and the split, each figure in an
/// element whose `data-value` is summary.json's number.
fn headline(page: &mut Page, run: &Run) {
    let s = &run.summary;
    let b = &s.breakdown_s;
    let _ = write!(
        page.html,
        "<section class=\"headline\" id=\"{}\">\n<h2>Headline: {}</h2>\n<p class=\"note\">{} GPUs; results in <code>{}</code>; digest <code>{}</code></p>\n<div class=\"figures\">\n",
        id_of(run, "headline"),
        esc(&s.name),
        s.gpus,
        esc(&run.dir.display().to_string()),
        esc(&s.result_digest)
    );
    let figures: [(&str, &str, Option<f64>, usize, &str); 8] = [
        (
            "iteration_time_s",
            "iteration",
            Some(s.iteration_time_s),
            6,
            " s",
        ),
        ("tokens_per_s", "tokens/s", s.tokens_per_s, 0, ""),
        ("tflops_per_gpu", "TFLOP/s per GPU", s.tflops_per_gpu, 1, ""),
        ("mfu", "MFU", s.mfu, 3, ""),
        ("breakdown_s.compute", "compute", Some(b.compute), 6, " s"),
        (
            "breakdown_s.exposed_comm",
            "exposed communication",
            Some(b.exposed_comm),
            6,
            " s",
        ),
        ("breakdown_s.bubble", "bubble", Some(b.bubble), 6, " s"),
        ("breakdown_s.idle", "idle", Some(b.idle), 6, " s"),
    ];
    for (key, label, value, digits, unit) in figures {
        let data = value.map_or_else(|| "null".to_string(), |v| format!("{v:?}"));
        let _ = writeln!(
            page.html,
            "<div class=\"figure\"><div class=\"label\">{label}</div><div class=\"value\" data-key=\"{key}\" data-value=\"{data}\">{}{}</div></div>",
            opt(value, digits),
            if value.is_some() { unit } else { "" }
        );
    }
    page.push("</div>\n");
    split_bar(
        page,
        &[(
            s.name.clone(),
            [b.compute, b.exposed_comm, b.bubble, b.idle],
        )],
    );
    if !s.warnings.is_empty() {
        page.push("<ul class=\"note\">");
        for w in &s.warnings {
            let _ = write!(page.html, "<li>{}</li>", esc(w));
        }
        page.push("</ul>\n");
    }
    page.push("</section>\n");
}

/// An SVG chart of labelled rows: a column of labels `label_w` wide, then the plot, `width`
/// wide, and an axis under it from `0` to its largest value. Every chart of the page is one.
struct Chart {
    label_w: f64,
    width: f64,
    height: f64,
}

impl Chart {
    /// Opens the SVG: the label column, the plot and `margin` to its right, `height` high,
    /// with the extra attributes `attrs`.
    fn open(
        page: &mut Page,
        (label_w, width, margin): (f64, f64, f64),
        height: f64,
        attrs: &str,
    ) -> Chart {
        let total = label_w + width + margin;
        let _ = writeln!(
            page.html,
            "<svg viewBox=\"0 0 {total} {height}\" width=\"{total}\" role=\"img\"{attrs}>"
        );
        Chart {
            label_w,
            width,
            height,
        }
    }

    /// A row's label, right-aligned against the plot, its baseline at `y`.
    fn row_label(&self, page: &mut Page, y: f64, text: &str) {
        let _ = write!(
            page.html,
            "<text x=\"{}\" y=\"{y}\" font-size=\"12\" text-anchor=\"end\">{}</text>",
            self.label_w - 6.0,
            esc(text)
        );
    }

    /// The axis under the plot, `left` at its start and `right` at its end, and the SVG's end.
    fn close(self, page: &mut Page, left: &str, right: &str) {
        let (x, y) = (self.label_w, self.height - 4.0);
        let _ = writeln!(
            page.html,
            "<text x=\"{x}\" y=\"{y}\" font-size=\"11\" fill=\"#666\">{left}</text><text x=\"{}\" y=\"{y}\" font-size=\"11\" fill=\"#666\" text-anchor=\"end\">{right}</text></svg>",
            x + self.width
        );
    }
}

/// Horizontal stacked bars of the split, one per `(label, [compute, exposed, bubble, idle])`.
fn split_bar(page: &mut Page, bars: &[(String, [f64; 4])]) {
    let most = bars
        .iter()
        .map(|(_, p)| p.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let (label_w, width, row) = (200.0, 860.0, 22.0);
    let height = row * bars.len() as f64 + 24.0;
    let chart = Chart::open(page, (label_w, width, 10.0), height, "");
    for (i, (label, parts)) in bars.iter().enumerate() {
        let y = i as f64 * row + 4.0;
        chart.row_label(page, y + 13.0, label);
        let mut x = label_w;
        for (part, (name, colour)) in parts.iter().zip(SPLIT) {
            let w = part / most * width;
            if w > 0.0 {
                let _ = write!(
                    page.html,
                    "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{colour}\"><title>{name}: {part:.6} s</title></rect>",
                    row - 4.0
                );
            }
            x += w;
        }
    }
    chart.close(page, "0", &format!("{most:.4} s"));
    legend(page, &SPLIT);
}

/// The experiment's key settings.
fn settings(page: &mut Page, run: &Run) {
    let s = &run.summary;
    let _ = write!(
        page.html,
        "<section class=\"settings\" id=\"{}\">\n<h2>Settings</h2>\n<table>",
        id_of(run, "settings")
    );
    for (k, v) in &s.settings {
        let _ = write!(
            page.html,
            "<tr><th class=\"l\">{}</th><td class=\"l\">{}</td></tr>",
            esc(k),
            esc(v)
        );
    }
    let _ = write!(
        page.html,
        "<tr><th class=\"l\">engine</th><td class=\"l\">{} events, {} windows, {} worker(s), {:.2} s wall; {}</td></tr></table>\n</section>\n",
        s.engine.events,
        s.engine.windows,
        s.engine.workers,
        s.engine.wall_s,
        esc(&s.engine.symmetry)
    );
}

/// Per pipeline stage: the ranks' mean split (ranks.csv); per job with `[[jobs]]`.
fn stages(page: &mut Page, run: &Run) {
    let _ = write!(
        page.html,
        "<section class=\"stages\" id=\"{}\">\n<h2>Per pipeline stage</h2>\n",
        id_of(run, "stages")
    );
    match &run.ranks {
        Some(ranks) => {
            let mut by_stage: BTreeMap<u64, ([f64; 4], u32)> = BTreeMap::new();
            for row in &ranks.rows {
                let stage = ranks.num(row, "stage") as u64;
                let e = by_stage.entry(stage).or_default();
                for (i, col) in ["compute_s", "exposed_comm_s", "bubble_s", "idle_s"]
                    .iter()
                    .enumerate()
                {
                    e.0[i] += ranks.num(row, col);
                }
                e.1 += 1;
            }
            let bars: Vec<(String, [f64; 4])> = by_stage
                .iter()
                .map(|(stage, (sum, n))| {
                    (
                        format!("stage {stage} ({n} ranks)"),
                        sum.map(|x| x / f64::from(*n)),
                    )
                })
                .collect();
            split_bar(page, &bars);
        }
        None => page.push("<p class=\"note\">No ranks.csv in this folder.</p>\n"),
    }
    if let Some(jobs) = &run.summary.jobs {
        page.push("<h3>Jobs</h3>\n<table><tr><th class=\"l\">job</th><th>GPUs</th><th class=\"l\">placement</th><th>iteration s</th><th>alone s</th><th>slowdown</th><th>tokens/s</th></tr>");
        for j in jobs {
            let _ = write!(
                page.html,
                "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td>{:.6}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&j.name),
                j.gpus,
                esc(&j.placement),
                j.iteration_time_s,
                opt(j.alone_iteration_time_s, 6),
                opt(j.slowdown, 3),
                opt(j.tokens_per_s, 0)
            );
        }
        page.push("</table>\n");
        let bars: Vec<(String, [f64; 4])> = jobs
            .iter()
            .map(|j| {
                let b = &j.breakdown_s;
                (
                    j.name.clone(),
                    [b.compute, b.exposed_comm, b.bubble, b.idle],
                )
            })
            .collect();
        split_bar(page, &bars);
    }
    page.push("</section>\n");
}

/// A bin of a stage's timeline: start and end (s), and the shares of compute, exposed
/// collectives, pipeline and idle.
type TimelineBin = (f64, f64, [f64; 4]);

/// One replica's stages over the iteration (timeline.csv): a row per stage, a column per
/// bin, stacked by share.
fn timeline(page: &mut Page, run: &Run) {
    let _ = write!(
        page.html,
        "<section class=\"timeline\" id=\"{}\">\n<h2>Timeline of one data-parallel replica</h2>\n",
        id_of(run, "timeline")
    );
    let Some(t) = &run.timeline else {
        page.push("<p class=\"note\">No timeline.csv in this folder (a run before fleetsim report).</p>\n</section>\n");
        return;
    };
    // By job (empty for one job), then stage.
    let mut stages: BTreeMap<(String, u64), Vec<TimelineBin>> = BTreeMap::new();
    for row in &t.rows {
        let key = (t.text(row, "job").to_string(), t.num(row, "stage") as u64);
        stages.entry(key).or_default().push((
            t.num(row, "start_s"),
            t.num(row, "end_s"),
            [
                t.num(row, "compute"),
                t.num(row, "exposed_comm"),
                t.num(row, "pipeline"),
                t.num(row, "idle"),
            ],
        ));
    }
    let end = stages
        .values()
        .flat_map(|bins| bins.iter().map(|b| b.1))
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let (label_w, width, row) = (110.0, 950.0, 26.0);
    let height = row * stages.len() as f64 + 24.0;
    let crisp = " shape-rendering=\"crispEdges\"";
    let chart = Chart::open(page, (label_w, width, 10.0), height, crisp);
    for (i, ((job, stage), bins)) in stages.iter().enumerate() {
        let y0 = i as f64 * row + 2.0;
        let label = match job.as_str() {
            "" => format!("stage {stage}"),
            job => format!("{job}: stage {stage}"),
        };
        chart.row_label(page, y0 + 15.0, &label);
        let h = row - 4.0;
        for &(start, stop, shares) in bins {
            let x = label_w + start / end * width;
            let w = ((stop - start) / end * width).max(0.1);
            let mut y = y0;
            for (share, (_, colour)) in shares.iter().zip(TIMELINE).take(3) {
                if *share >= 0.005 {
                    let _ = write!(
                        page.html,
                        "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{w:.2}\" height=\"{:.2}\" fill=\"{colour}\"/>",
                        share * h
                    );
                    y += share * h;
                }
            }
        }
    }
    chart.close(page, "0 s", &format!("{end:.4} s"));
    legend(page, &TIMELINE);
    page.push("<p class=\"note\">Each stage's tensor- and context-parallel rank 0 of replica 0 (of each job with [[jobs]]); a column is a 400th of the iteration, filled by the share of it each activity took (blank: idle).</p>\n</section>\n");
}

/// Links by tier (tiers.csv) and the busiest links (links.csv).
fn links(page: &mut Page, run: &Run) {
    let _ = write!(
        page.html,
        "<section class=\"links\" id=\"{}\">\n<h2>Links by tier</h2>\n",
        id_of(run, "links")
    );
    if let Some(t) = &run.tiers {
        page.push("<table><tr><th class=\"l\">tier</th><th>links</th><th>bytes</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>max</th><th class=\"l\">busiest link</th></tr>");
        let mut bars = Vec::new();
        for row in &t.rows {
            let per_link = t.text(row, "per_link") == "true";
            let cell = |name: &str| {
                if per_link || name == "utilisation_mean" {
                    format!("{:.1}%", 100.0 * t.num(row, name))
                } else {
                    "-".to_string()
                }
            };
            let _ = write!(
                page.html,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{:.3e}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                esc(t.text(row, "tier")),
                t.text(row, "links"),
                t.num(row, "bytes"),
                cell("utilisation_mean"),
                cell("utilisation_p50"),
                cell("utilisation_p90"),
                cell("utilisation_p99"),
                cell("utilisation_max"),
                esc(if per_link {
                    t.text(row, "busiest_link")
                } else {
                    "closed form: per link with network.model = flow or packet"
                })
            );
            bars.push((
                t.text(row, "tier").to_string(),
                per_link,
                [
                    "utilisation_mean",
                    "utilisation_p50",
                    "utilisation_p90",
                    "utilisation_p99",
                    "utilisation_max",
                ]
                .map(|c| t.num(row, c)),
            ));
        }
        page.push("</table>\n");
        utilisation_chart(page, &bars);
    } else {
        page.push("<p class=\"note\">No tiers.csv in this folder.</p>\n");
    }
    if let Some(l) = &run.links {
        let top: Vec<&Vec<String>> = l
            .rows
            .iter()
            .filter(|r| l.text(r, "scope") == "link")
            .take(10)
            .collect();
        if !top.is_empty() {
            page.push("<h3>Busiest links</h3>\n<table><tr><th class=\"l\">link</th><th class=\"l\">class</th><th>bytes</th><th>utilisation</th><th>max queue bytes</th><th>PFC pauses</th><th>ECN marks</th></tr>");
            for r in top {
                let _ = write!(
                    page.html,
                    "<tr><td class=\"l\">{} → {}</td><td class=\"l\">{}</td><td>{:.3e}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(l.text(r, "src")),
                    esc(l.text(r, "dst")),
                    esc(l.text(r, "class")),
                    l.num(r, "bytes"),
                    100.0 * l.num(r, "utilisation"),
                    l.text(r, "max_queue_bytes"),
                    l.text(r, "pauses"),
                    l.text(r, "ecn_marks")
                );
            }
            page.push("</table>\n");
        }
    }
    page.push("</section>\n");
}

/// Per tier: a bar to the mean and marks at p50, p90, p99 and max.
fn utilisation_chart(page: &mut Page, tiers: &[(String, bool, [f64; 5])]) {
    let (label_w, width, row) = (110.0, 600.0, 22.0);
    let height = row * tiers.len() as f64 + 22.0;
    let most = tiers
        .iter()
        .map(|t| t.2[4].max(t.2[0]))
        .fold(0.0, f64::max)
        .max(0.01);
    let chart = Chart::open(page, (label_w, width, 60.0), height, "");
    for (i, (tier, per_link, q)) in tiers.iter().enumerate() {
        let y = i as f64 * row + 3.0;
        chart.row_label(page, y + 13.0, tier);
        let _ = write!(
            page.html,
            "<rect x=\"{label_w}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" fill=\"#4e79a7\"><title>mean {:.2}%</title></rect>",
            q[0] / most * width,
            row - 6.0,
            100.0 * q[0]
        );
        if *per_link {
            for (v, name) in q.iter().skip(1).zip(["p50", "p90", "p99", "max"]) {
                let x = label_w + v / most * width;
                let _ = write!(
                    page.html,
                    "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y}\" y2=\"{}\" stroke=\"#e15759\" stroke-width=\"2\"><title>{name} {:.2}%</title></line>",
                    y + row - 6.0,
                    100.0 * v
                );
            }
        }
    }
    chart.close(page, "0%", &format!("{:.1}%", 100.0 * most));
    page.push("<p class=\"note\">Bar: mean utilisation of the tier's links over the iteration; red marks: p50, p90, p99 and the busiest link (a spread between them is ECMP imbalance or a hot spot).</p>\n");
}

/// One group, operation and group size summed over message sizes: calls, bytes, time, and
/// bus bandwidth times time.
type CollectiveTotals = (f64, f64, f64, f64);

/// Collectives by group and operation (collectives.csv, summed over sizes).
fn collectives(page: &mut Page, run: &Run) {
    let _ = write!(
        page.html,
        "<section class=\"collectives\" id=\"{}\">\n<h2>Collectives</h2>\n",
        id_of(run, "collectives")
    );
    let Some(c) = &run.collectives else {
        page.push("<p class=\"note\">No collectives.csv in this folder.</p>\n</section>\n");
        return;
    };
    let mut by: BTreeMap<(String, String, u64), CollectiveTotals> = BTreeMap::new();
    for r in &c.rows {
        let count = c.num(r, "count");
        let time = count * c.num(r, "mean_s");
        let e = by
            .entry((
                c.text(r, "group").to_string(),
                c.text(r, "op").to_string(),
                c.num(r, "group_size") as u64,
            ))
            .or_default();
        e.0 += count;
        e.1 += count * c.num(r, "bytes");
        e.2 += time;
        e.3 += c.num(r, "busbw_gb_s") * time;
    }
    page.push("<table><tr><th class=\"l\">group</th><th class=\"l\">operation</th><th>group size</th><th>count</th><th>bytes</th><th>time (all calls) s</th><th>bus bandwidth GB/s</th></tr>");
    for ((group, op, size), (count, bytes, time, bw)) in &by {
        let _ = write!(
            page.html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{size}</td><td>{count:.0}</td><td>{bytes:.3e}</td><td>{time:.4}</td><td>{:.1}</td></tr>",
            esc(group),
            esc(op),
            if *time > 0.0 { bw / time } else { 0.0 }
        );
    }
    page.push("</table>\n<p class=\"note\">Counts are per rank call summed over ranks; bus bandwidth is the time-weighted mean of NCCL's busbw.</p>\n</section>\n");
}

/// Faults, when the run has them: what failed, as `check` describes each.
fn faults(page: &mut Page, run: &Run) {
    let s = &run.summary;
    let faults: Vec<(&String, &String)> = s
        .settings
        .iter()
        .filter(|(k, _)| k.starts_with("faults."))
        .collect();
    if faults.is_empty() {
        return;
    }
    let _ = write!(
        page.html,
        "<section class=\"faults\" id=\"{}\">\n<h2>Faults</h2>\n<table><tr><th class=\"l\">entry</th><th class=\"l\">what fails</th></tr>",
        id_of(run, "faults")
    );
    for (key, what) in faults {
        let _ = write!(
            page.html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            esc(key),
            esc(what)
        );
    }
    page.push("</table>\n<p class=\"note\">What they cost shows in the split, the stages and the links above; a job that stopped names the fault in its error instead of a report.</p>\n</section>\n");
}

/// Every section of one run; under a heading of its own when several runs share the page.
fn run_sections(page: &mut Page, run: &Run, several: bool) {
    if several {
        let _ = writeln!(
            page.html,
            "<h2 class=\"run\">Run {} (<code>{}</code>)</h2>",
            esc(&run.summary.name),
            esc(&run.dir.display().to_string())
        );
    }
    headline(page, run);
    settings(page, run);
    stages(page, run);
    timeline(page, run);
    links(page, run);
    collectives(page, run);
    faults(page, run);
}

/// Several runs: what differs between them and what it changed.
fn comparison(page: &mut Page, runs: &[&Run]) {
    page.push("<section class=\"comparison\" id=\"comparison\">\n<h2>Comparison</h2>\n");
    let keys: std::collections::BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.summary.settings.keys())
        .collect();
    let differ: Vec<&String> = keys
        .into_iter()
        .filter(|k| {
            let first = runs[0].summary.settings.get(*k);
            runs.iter().any(|r| r.summary.settings.get(*k) != first)
        })
        .collect();
    page.push("<table><tr><th class=\"l\">run</th>");
    for k in &differ {
        let _ = write!(page.html, "<th class=\"l\">{}</th>", esc(k));
    }
    page.push("<th>iteration s</th><th>vs first</th><th>tokens/s</th><th>MFU</th><th>compute s</th><th>exposed comm s</th><th>bubble s</th><th class=\"l\">hottest tier (max link)</th></tr>");
    let first = runs[0].summary.iteration_time_s;
    for r in runs {
        let s = &r.summary;
        let _ = write!(page.html, "<tr><td class=\"l\">{}</td>", esc(&label(r)));
        for k in &differ {
            let _ = write!(
                page.html,
                "<td class=\"l\">{}</td>",
                esc(s.settings.get(*k).map_or("", String::as_str))
            );
        }
        let _ = write!(
            page.html,
            "<td>{:.6}</td><td>{:+.2}%</td><td>{}</td><td>{}</td><td>{:.6}</td><td>{:.6}</td><td>{:.6}</td><td class=\"l\">{}</td></tr>",
            s.iteration_time_s,
            100.0 * (s.iteration_time_s / first - 1.0),
            opt(s.tokens_per_s, 0),
            opt(s.mfu, 3),
            s.breakdown_s.compute,
            s.breakdown_s.exposed_comm,
            s.breakdown_s.bubble,
            esc(&hottest_tier(r))
        );
    }
    page.push("</table>\n");
    if differ.is_empty() {
        page.push("<p class=\"note\">The runs' key settings are the same.</p>\n");
    }
    let bars: Vec<(String, [f64; 4])> = runs
        .iter()
        .map(|r| {
            let b = &r.summary.breakdown_s;
            (label(r), [b.compute, b.exposed_comm, b.bubble, b.idle])
        })
        .collect();
    split_bar(page, &bars);
    page.push("</section>\n");
}

/// A run's short name on the page: its folder's last part.
fn label(run: &Run) -> String {
    run.dir.file_name().map_or_else(
        || run.summary.name.clone(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The tier whose busiest link was busiest, with it.
fn hottest_tier(run: &Run) -> String {
    let Some(t) = &run.tiers else {
        return "-".into();
    };
    t.rows
        .iter()
        .filter(|r| t.text(r, "per_link") == "true")
        .max_by(|a, b| {
            t.num(a, "utilisation_max")
                .total_cmp(&t.num(b, "utilisation_max"))
        })
        .map_or_else(
            || "closed form".to_string(),
            |r| {
                format!(
                    "{} ({:.1}%, {})",
                    t.text(r, "tier"),
                    100.0 * t.num(r, "utilisation_max"),
                    t.text(r, "busiest_link")
                )
            },
        )
}

/// A sweep's or validation's folder: its table and its plot.
fn table_section(page: &mut Page, folder: &TableFolder) {
    let _ = write!(
        page.html,
        "<section class=\"{}\" id=\"{}\">\n<h2>{} table: <code>{}</code></h2>\n",
        folder.kind,
        folder.kind,
        if folder.kind == "sweep" {
            "Sweep"
        } else {
            "Validation"
        },
        esc(&folder.dir.display().to_string())
    );
    if let Some(svg) = &folder.plot {
        // The plot as the command drew it, without its XML declaration.
        let body = svg.find("<svg").map_or(svg.as_str(), |i| &svg[i..]);
        page.push(body);
        page.push("\n");
    }
    let t = &folder.table;
    let wanted: Vec<usize> = (0..t.header.len())
        .filter(|&i| !matches!(t.header[i].as_str(), "result_digest" | "case" | "line"))
        .collect();
    page.push("<div class=\"scroll\"><table><tr>");
    for &i in &wanted {
        let _ = write!(page.html, "<th class=\"l\">{}</th>", esc(&t.header[i]));
    }
    page.push("</tr>");
    for row in &t.rows {
        page.push("<tr>");
        for &i in &wanted {
            let _ = write!(
                page.html,
                "<td class=\"l\">{}</td>",
                esc(row.get(i).map_or("", String::as_str))
            );
        }
        page.push("</tr>");
    }
    page.push("</table></div>\n</section>\n");
}
