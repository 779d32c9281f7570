//! `fleetsim check --kernels`, `fleetsim workload --export kernels`, measured kernel tables
//! overriding the model, and `tools/profile_kernels.py`'s CPU-side tests on what fleetsim
//! writes.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command as Process;

use common::{QUICKSTART, csv_table, fleetsim, json_ok, scratch, stdout_ok};
use serde_json::Value;

/// `fleetsim workload EXPERIMENT --export kernels --output TABLE`.
fn export_kernels(experiment: &str, table: &Path) {
    stdout_ok(
        fleetsim()
            .args(["workload", experiment, "--export", "kernels", "--output"])
            .arg(table),
    );
}

fn check_json(experiment: &Path) -> Value {
    json_ok(
        fleetsim()
            .args(["check", "--kernels", "--top", "3", "--json"])
            .arg(experiment),
    )
}

#[test]
fn check_kernels_lists_top_kernels_with_bound_efficiency_and_source() {
    let text = stdout_ok(fleetsim().args(["check", QUICKSTART, "--kernels", "--top", "4"]));
    for want in [
        "kernels of stage 0",
        "kernels of stage 1",
        "bound",
        "compute",
        "model",
        "gemm:m=",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    let v = check_json(Path::new(QUICKSTART));
    let stages = v["kernels"].as_array().expect("kernels");
    assert_eq!(stages.len(), 2);
    for st in stages {
        let top = st["top"].as_array().expect("top");
        assert_eq!(top.len(), 3);
        let totals: Vec<f64> = top
            .iter()
            .map(|k| k["total_s"].as_f64().expect("total"))
            .collect();
        assert!(
            totals.windows(2).all(|w| w[0] >= w[1]),
            "not sorted: {totals:?}"
        );
        for k in top {
            let eff = k["efficiency"].as_f64().expect("efficiency");
            assert!(eff > 0.0 && eff <= 1.0, "{k}");
            assert_eq!(k["source"], "model");
            assert!(["compute", "memory", "launch"].contains(&k["bound"].as_str().expect("bound")));
        }
    }
}

#[test]
fn exported_kernel_table_overrides_the_model_when_measured() {
    let dir = scratch("kernel-table");
    let table = dir.join("h100.csv");
    export_kernels(QUICKSTART, &table);
    let text = fs::read_to_string(&table).expect("table");
    let (header, mut rows) = csv_table(&text);
    assert_eq!(
        header.join(","),
        "gpu,dtype,kernel,pass,shape,flops,bytes,time_us,source"
    );
    assert!(rows.len() > 20, "{text}");
    // Pretend the top kernel that is not a weight gradient measured twice the model's time
    // (a wgrad's table row leaves out the fp32 accumulation the engine adds to it).
    let before = check_json(Path::new(QUICKSTART));
    let before_top = before["kernels"][0]["top"].as_array().expect("top");
    let same = |a: &Value, b: &Value| ["kernel", "pass", "shape"].iter().all(|f| a[f] == b[f]);
    let top = before_top
        .iter()
        .find(|k| k["pass"] != "wgrad")
        .expect("a kernel that is not a wgrad");
    let key = ["dtype", "kernel", "pass", "shape"].map(|k| top[k].as_str().expect(k));
    let row = rows
        .iter_mut()
        .find(|r| r[1..5] == key)
        .expect("top kernel exported");
    let model_us: f64 = row[7].parse().expect("time");
    row[7] = format!("{:.3}", 2.0 * model_us);
    row[8] = "test measurement".into();
    let mut out = csv::Writer::from_path(&table).expect("write table");
    out.write_record(&header).expect("header");
    for r in &rows {
        out.write_record(r).expect("row");
    }
    out.flush().expect("write table");
    let quickstart = fs::canonicalize(QUICKSTART).expect("quickstart");
    let experiment = dir.join("measured.toml");
    fs::write(
        &experiment,
        format!(
            "name = \"measured\"\ninclude = [{:?}]\n\n[compute]\nkernel_tables = [\"h100.csv\"]\n",
            quickstart.display().to_string()
        ),
    )
    .expect("write experiment");
    let after = check_json(&experiment);
    let stage0 = &after["kernels"][0];
    assert!(stage0["sources"]["measured"].as_u64().expect("measured") > 20);
    let doubled = stage0["top"]
        .as_array()
        .expect("top")
        .iter()
        .find(|k| same(k, top))
        .expect("still listed");
    assert_eq!(doubled["source"], "measured");
    let ratio = doubled["time_s"].as_f64().expect("t") / top["time_s"].as_f64().expect("t");
    assert!((ratio - 2.0).abs() < 1e-3, "{ratio}");
    // Every other kernel, wgrads too, read back from the table takes what the model gave it.
    for k in stage0["top"].as_array().expect("top") {
        if same(k, top) {
            continue;
        }
        if let Some(model) = before_top.iter().find(|b| same(b, k)) {
            let (t, m) = (
                k["time_s"].as_f64().expect("t"),
                model["time_s"].as_f64().expect("t"),
            );
            assert!((t / m - 1.0).abs() < 1e-5, "{k} against {model}");
        }
    }
    assert!(
        stage0["sources"].get("model").is_none(),
        "{}",
        stage0["sources"]
    );
}

fn python() -> Option<&'static str> {
    Process::new("python3")
        .arg("--version")
        .output()
        .ok()
        .map(|_| "python3")
}

#[test]
fn profile_kernels_tool_plans_every_kernel_fleetsim_exports() {
    let python =
        python().expect("python3 is needed for tools/profile_kernels.py (.ci/run installs it)");
    let dir = scratch("profile-plan");
    for experiment in [
        "quickstart.toml",
        "mixtral-8x7b-h100-256.toml",
        "cxl-llama2-70b-h100-64.toml",
    ] {
        let table = dir.join(experiment.replace(".toml", ".csv"));
        export_kernels(&format!("configs/experiments/{experiment}"), &table);
        let rows = fs::read_to_string(&table).expect("table").lines().count() - 1;
        let plan = Process::new(python)
            .args(["tools/profile_kernels.py", "--plan", "--template"])
            .arg(&table)
            .arg("--out")
            .arg(dir.join("unused.csv"))
            .output()
            .expect("run python");
        let stderr = String::from_utf8_lossy(&plan.stderr);
        assert!(plan.status.success(), "{experiment}: {stderr}");
        let planned = String::from_utf8_lossy(&plan.stdout).lines().count();
        assert_eq!(planned, rows, "{experiment}: {stderr}");
    }
}

#[test]
fn profile_kernels_tool_cpu_tests_pass() {
    let python =
        python().expect("python3 is needed for tools/profile_kernels.py (.ci/run installs it)");
    let out = Process::new(python)
        .args(["-m", "unittest", "discover", "-s", "tools/tests"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
