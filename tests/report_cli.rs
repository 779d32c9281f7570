//! `fleetsim report` (issue 20): one self-contained page per run or comparison, loaded in a
//! real browser. Headless Chromium (Debian's `chromium`, installed by `.ci/run`) renders the
//! quickstart's report and a two-run comparison: no console message, the headline figures
//! equal summary.json's, every section present, a screenshot drawn. Without Chromium the
//! browser test says it skipped, unless `FLEETSIM_REQUIRE_CHROMIUM=1` (set by `.ci/run`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{QUICKSTART, SMALL, fleetsim, one_clear_error, scratch, stdout_ok, summary};

/// Runs the small quickstart with `sets` and `--report` into `dir`.
fn run_with_report(dir: &Path, sets: &[&str]) {
    let mut cmd = fleetsim();
    cmd.args(["run", QUICKSTART, "--quiet", "--report", "--out"])
        .arg(dir)
        .args(SMALL);
    for set in sets {
        cmd.args(["--set", set]);
    }
    stdout_ok(&mut cmd);
}

/// The Chromium binary, when there is one.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(PathBuf::from);
    if found.is_none() {
        assert!(
            std::env::var("FLEETSIM_REQUIRE_CHROMIUM").is_err(),
            "FLEETSIM_REQUIRE_CHROMIUM is set but no chromium runs: apt-get install chromium"
        );
        eprintln!("no chromium (apt-get install chromium): the browser checks skipped");
    }
    found
}

/// Chromium's rendered DOM of `page` and what it logged, headless.
fn render(browser: &Path, page: &Path, screenshot: &Path) -> (String, String) {
    let url = format!("file://{}", page.canonicalize().expect("page").display());
    let headless = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ];
    let profile = scratch(&format!(
        "chromium-profile-{}",
        page.file_stem().unwrap_or_default().to_string_lossy()
    ));
    // Chromium headless on the page with `what` asked of it; fails the test unless it ran.
    let chromium = |what: &[String]| {
        let out = Command::new(browser)
            .args(headless)
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(what)
            .arg(&url)
            .output()
            .expect("run chromium");
        assert!(out.status.success(), "chromium {what:?} failed: {out:?}");
        out
    };
    let dump = chromium(&["--dump-dom".to_string()]);
    let shot = chromium(&[
        "--window-size=1200,2400".to_string(),
        format!("--screenshot={}", screenshot.display()),
    ]);
    let png = std::fs::read(screenshot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a blank screenshot"
    );
    (
        String::from_utf8_lossy(&dump.stdout).into_owned(),
        String::from_utf8_lossy(&dump.stderr).into_owned() + &String::from_utf8_lossy(&shot.stderr),
    )
}

/// Every `data-value` of a `data-key` in `dom`.
fn headline_values(dom: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = dom;
    while let Some(i) = rest.find("data-key=\"") {
        rest = &rest[i + 10..];
        let key = &rest[..rest.find('"').expect("closed key")];
        let at = rest.find("data-value=\"").expect("a value beside the key") + 12;
        let value = &rest[at..at + rest[at..].find('"').expect("closed value")];
        found.push((key.to_string(), value.to_string()));
    }
    found
}

/// summary.json's number at a dotted `key`.
fn summary_value(summary: &serde_json::Value, key: &str) -> serde_json::Value {
    key.split('.').fold(summary.clone(), |v, k| v[k].clone())
}

/// The page's headline figures are summary.json's, to the last digit, and each section is
/// there.
fn check_page(dom: &str, runs: &[&Path], sections: &[&str]) {
    let values = headline_values(dom);
    assert_eq!(values.len(), 8 * runs.len(), "headline figures: {values:?}");
    for (run, figures) in runs.iter().zip(values.chunks(8)) {
        let s = summary(run);
        for (key, shown) in figures {
            let want = summary_value(&s, key);
            match want.as_f64() {
                Some(x) => assert_eq!(
                    shown.parse::<f64>().ok(),
                    Some(x),
                    "{key}: page {shown}, summary.json {x}"
                ),
                None => assert_eq!(shown, "null", "{key}: {want}"),
            }
        }
        let name = s["name"].as_str().expect("name");
        assert!(dom.contains(name), "the run's name {name} is on the page");
    }
    for section in sections {
        assert!(
            dom.contains(&format!("class=\"{section}\"")),
            "section {section} missing"
        );
    }
}

#[test]
fn a_report_of_one_run_and_of_two_renders_in_a_browser() {
    let root = scratch("report-cli");
    let (one, two) = (root.join("tp4"), root.join("tp2"));
    run_with_report(&one, &[]);
    run_with_report(&two, &["parallel.tp=2", "network.model=flow"]);
    for dir in [&one, &two] {
        for file in ["report.html", "tiers.csv", "timeline.csv"] {
            assert!(dir.join(file).is_file(), "{file} in {}", dir.display());
        }
    }
    let compared = root.join("compared.html");
    let out = stdout_ok(
        fleetsim()
            .arg("report")
            .arg(&one)
            .arg(&two)
            .arg("--out")
            .arg(&compared),
    );
    assert!(out.contains("compared.html"), "{out}");
    let html = std::fs::read_to_string(&compared).expect("page");
    // Self-contained: no script, nothing fetched.
    for outside in ["<script", "http://", "https://", "src=\""] {
        assert!(!html.contains(outside), "the page holds {outside}");
    }
    assert!(html.len() < 5_000_000, "{} bytes", html.len());
    // The comparison names what differs.
    assert!(html.contains("parallel.tp") && html.contains("network.model"));
    let Some(browser) = chromium() else {
        return;
    };
    let sections = [
        "headline",
        "settings",
        "stages",
        "timeline",
        "links",
        "collectives",
    ];
    let (dom, log) = render(&browser, &one.join("report.html"), &root.join("one.png"));
    check_page(&dom, &[&one], &sections);
    let (dom2, log2) = render(&browser, &compared, &root.join("compared.png"));
    check_page(
        &dom2,
        &[&one, &two],
        &[&sections[..], &["comparison"]].concat(),
    );
    for log in [log, log2] {
        assert!(
            !log.contains("CONSOLE") && !log.contains("Uncaught"),
            "the browser logged from the page:\n{log}"
        );
    }
}

#[test]
fn a_sweep_folder_reports_its_table_and_plot() {
    let dir = scratch("report-sweep");
    stdout_ok(
        fleetsim()
            .args(["sweep", QUICKSTART, "--vary", "parallel.tp=2,4", "--out"])
            .arg(&dir)
            .args(SMALL),
    );
    let page = dir.join("page.html");
    stdout_ok(fleetsim().arg("report").arg(&dir).arg("--out").arg(&page));
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(html.contains("class=\"sweep\""), "a sweep section");
    assert!(html.contains("<svg"), "the sweep's plot inline");
    let table = std::fs::read_to_string(dir.join("sweep.csv")).expect("sweep.csv");
    let rows = table.lines().count() - 1;
    assert_eq!(rows, 2);
    // Each point's iteration from the table is on the page.
    let header: Vec<&str> = table.lines().next().expect("header").split(',').collect();
    let column = header
        .iter()
        .position(|h| *h == "iteration_time_s")
        .expect("an iteration column");
    for line in table.lines().skip(1) {
        let value = line.split(',').nth(column).expect("a value");
        assert!(html.contains(value), "{value} on the page");
    }
}

#[test]
fn a_run_with_faults_has_a_faults_section_saying_what_failed() {
    let dir = scratch("report-faults");
    let slow = r#"faults=[{kind="gpu-slow",gpu=3,factor=0.8,scope="all"}]"#;
    stdout_ok(
        fleetsim()
            .args([
                "run",
                "tests/fixtures/faults/straggler.toml",
                "--quiet",
                "--report",
            ])
            .args(["--set", slow, "--out"])
            .arg(&dir),
    );
    let html = std::fs::read_to_string(dir.join("report.html")).expect("page");
    assert!(html.contains("class=\"faults\""), "a faults section");
    assert!(html.contains("GPU 3 to 0.8"), "names the slow GPU");
}

#[test]
fn jobs_have_their_own_bars_and_timelines() {
    let dir = scratch("report-jobs");
    stdout_ok(
        fleetsim()
            .args([
                "run",
                "tests/fixtures/jobs/interleaved.toml",
                "--quiet",
                "--report",
            ])
            .args(["--no-alone", "--out"])
            .arg(&dir),
    );
    let html = std::fs::read_to_string(dir.join("report.html")).expect("page");
    for job in ["a", "b"] {
        assert!(
            html.contains(&format!(">{job}: stage 0<")),
            "job {job}'s timeline"
        );
    }
    assert!(html.contains("<h3>Jobs</h3>"), "the jobs table");
}

#[test]
fn a_folder_that_is_no_output_is_one_clear_error() {
    let fixtures = Path::new("tests/fixtures/report");
    let line = one_clear_error(
        fleetsim().arg("report").arg(fixtures.join("not-an-output")),
        "a folder without outputs",
    );
    assert!(line.contains("is not a fleetsim output folder"), "{line}");
    let line = one_clear_error(
        fleetsim().arg("report").arg(fixtures.join("bad-summary")),
        "a summary.json of another shape",
    );
    assert!(line.contains("is not a summary.json"), "{line}");
}
