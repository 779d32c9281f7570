//! `[[jobs]]` through the binary: several jobs share the fabric and slow each other where
//! their traffic meets, the summary reports each job against itself alone, and one job
//! covering the cluster is the one-job experiment, digest for digest.

mod common;

use std::path::Path;

use common::{csv_table, fleetsim, json_ok, one_clear_error, scratch, stdout_ok, summary};

const INTERLEAVED: &str = "tests/fixtures/jobs/interleaved.toml";
const PACKED: &str = "tests/fixtures/jobs/packed.toml";
const MIXED: &str = "tests/fixtures/jobs/mixed.toml";

/// `fleetsim run` of `experiment` with `args`; its summary.json.
fn run(name: &str, experiment: &str, args: &[&str]) -> (serde_json::Value, std::path::PathBuf) {
    let out = scratch(name);
    let mut cmd = fleetsim();
    cmd.args(["run", experiment, "--quiet", "--out"])
        .arg(&out)
        .args(args);
    stdout_ok(&mut cmd);
    (summary(&out), out)
}

/// Per job: (name, iteration, alone iteration, slowdown).
fn jobs(summary: &serde_json::Value) -> Vec<(String, f64, f64, f64)> {
    summary["jobs"]
        .as_array()
        .expect("summary.json lists the jobs")
        .iter()
        .map(|j| {
            (
                j["name"].as_str().expect("name").to_string(),
                j["iteration_time_s"].as_f64().expect("iteration"),
                j["alone_iteration_time_s"].as_f64().expect("alone"),
                j["slowdown"].as_f64().expect("slowdown"),
            )
        })
        .collect()
}

/// Two identical jobs (GPT-3 6.7B shape, 2 layers, TP 8 × DP 2 on two DGX H100 hosts each) on
/// a rail-optimised fabric of two segments of two hosts whose leaves are 2:1 oversubscribed
/// (one uplink per rail leaf). Interleaved (a on hosts 0 and 2, b on 1 and 3), every
/// gradient reduce-scatter and all-gather crosses the spines: alone a job has one host per
/// leaf and its one flow per rail fits the uplink, together the two jobs' flows share it.
/// Measured (packet model): 17.48 and 17.56 ms against 12.82 and 12.84 ms alone, 1.363x and
/// 1.368x. Packed (a on segment 0, b on segment 1), their traffic stays under their own rail
/// leaves: 1.000x, to the picosecond. (Non-blocking, with two uplinks per leaf, ECMP puts
/// both jobs' flows on one uplink on about half the rails, and each ring step waits for its
/// slowest rail: 1.363x as well; `two_jobs_collide_on_ecmp_paths_even_without_oversubscription`.)
#[test]
fn two_jobs_interleaved_slow_each_other_and_packed_on_separate_segments_do_not() {
    let (interleaved, _) = run("jobs-interleaved", INTERLEAVED, &[]);
    let (packed, _) = run("jobs-packed", PACKED, &[]);
    let shared = jobs(&interleaved);
    assert_eq!(shared.len(), 2);
    for (name, t, alone, slowdown) in &shared {
        assert!(
            (1.30..1.45).contains(slowdown),
            "interleaved job {name}: {t} s shared, {alone} s alone, slowdown {slowdown}"
        );
        assert!((slowdown - t / alone).abs() < 1e-9);
    }
    let apart = jobs(&packed);
    for (name, t, alone, slowdown) in &apart {
        assert_eq!(t, alone, "packed job {name} is not slowed: {slowdown}");
    }
    // Alone, the placement costs nothing: one host per leaf fits the oversubscribed uplinks.
    for ((name, _, a, _), (_, _, b, _)) in shared.iter().zip(&apart) {
        assert!(
            (a / b - 1.0).abs() < 0.005,
            "job {name} alone: {a} s interleaved, {b} s packed"
        );
    }
    // The run's iteration is the last job's end; its rates add the jobs'.
    let last = shared.iter().map(|j| j.1).fold(0.0, f64::max);
    assert_eq!(interleaved["iteration_time_s"].as_f64(), Some(last));
    let tokens: f64 = interleaved["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["tokens_per_s"].as_f64().unwrap())
        .sum();
    let total = interleaved["tokens_per_s"].as_f64().unwrap();
    assert!((total / tokens - 1.0).abs() < 1e-12, "{total} vs {tokens}");
}

/// The jobs' run gives one digest on any number of workers, at packet and at flow level
/// (where the jobs contend too: 1.375x in the flow model).
#[test]
fn several_jobs_give_one_digest_on_any_split() {
    for model in ["packet", "flow"] {
        let set = format!("network.model={model}");
        let digests: Vec<String> = ["1", "2", "3"]
            .iter()
            .map(|w| {
                let (s, _) = run(
                    &format!("jobs-split-{model}-{w}"),
                    INTERLEAVED,
                    &[
                        "--workers",
                        w,
                        "--threads",
                        "1",
                        "--no-alone",
                        "--set",
                        &set,
                    ],
                );
                assert!(s["jobs"][0]["slowdown"].is_null(), "--no-alone runs none");
                s["result_digest"].as_str().unwrap().to_string()
            })
            .collect();
        assert!(
            digests.windows(2).all(|d| d[0] == d[1]),
            "{model}: {digests:?}"
        );
    }
}

/// Jobs of different layouts on named hosts, two hosts idle: ranks.csv has the jobs' GPUs
/// only, each with its job, and `check` lists where each job runs.
#[test]
fn jobs_run_on_the_hosts_they_name_with_their_own_layouts() {
    let (s, out) = run("jobs-mixed", MIXED, &[]);
    let text = std::fs::read_to_string(out.join("ranks.csv")).expect("ranks.csv");
    let (header, rows) = csv_table(&text);
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    let (rank, stage, job) = (col("rank"), col("stage"), col("job"));
    let gpus = |j: &str| -> Vec<u32> {
        rows.iter()
            .filter(|r| r[job] == j)
            .map(|r| r[rank].parse().unwrap())
            .collect()
    };
    assert_eq!(gpus("dense"), (8..16).collect::<Vec<_>>());
    assert_eq!(gpus("pipe"), (24..32).collect::<Vec<_>>());
    assert_eq!(rows.len(), 16, "idle hosts run no rank");
    let pipe_stages: Vec<&str> = rows
        .iter()
        .filter(|r| r[job] == "pipe")
        .map(|r| r[stage].as_str())
        .collect();
    assert_eq!(pipe_stages, ["0", "0", "0", "0", "1", "1", "1", "1"]);
    // One host each, nothing shared but the idle fabric.
    for (name, t, alone, _) in jobs(&s) {
        assert_eq!(t, alone, "job {name}");
    }
    // Partitioned by METIS over the jobs' expected load (stages of both pipelines).
    let (split, _) = run(
        "jobs-mixed-metis",
        MIXED,
        &[
            "--workers",
            "2",
            "--threads",
            "1",
            "--partition",
            "metis",
            "--no-alone",
        ],
    );
    assert_eq!(split["result_digest"], s["result_digest"]);
    let check = json_ok(fleetsim().args(["check", MIXED, "--json"]));
    let listed: Vec<(String, serde_json::Value, u64)> = check["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["name"].as_str().unwrap().to_string(),
                j["hosts"].clone(),
                j["parallel"]["pp"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            ("dense".to_string(), serde_json::json!([1]), 1),
            ("pipe".to_string(), serde_json::json!([3]), 2)
        ]
    );
}

/// `[[jobs]]` with one job on every host is the experiment without it: same digest.
#[test]
fn one_job_covering_the_cluster_is_the_one_job_experiment() {
    let dir = scratch("jobs-one");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(PACKED).expect("fixture");
    let plain = text[..text.find("[[jobs]]").expect("jobs")]
        .replace("../../../configs/", &format!("{}/configs/", root.display()));
    let one_job = format!("{plain}\n[[jobs]]\nname = \"all\"\ngpus = 32\n");
    let (plain_path, job_path) = (dir.join("plain.toml"), dir.join("one-job.toml"));
    std::fs::write(&plain_path, plain).unwrap();
    std::fs::write(&job_path, one_job).unwrap();
    // Also with a training setting the compute model reads (each job's kernels are timed
    // by its own experiment's compute model).
    for sets in [&[][..], &["--set", "training.attention_backend=flash2"][..]] {
        let digest = |path: &Path, name: &str| {
            let mut args = vec!["--no-alone"];
            args.extend_from_slice(sets);
            let (s, _) = run(name, path.to_str().unwrap(), &args);
            s["result_digest"].as_str().unwrap().to_string()
        };
        assert_eq!(
            digest(&plain_path, "jobs-one-plain"),
            digest(&job_path, "jobs-one-job"),
            "{sets:?}"
        );
    }
}

/// `workload` reports each job, exports one named job, and says which to name otherwise.
#[test]
fn workload_reports_each_job_and_exports_one() {
    let report = json_ok(fleetsim().args(["workload", MIXED, "--json"]));
    let pp: Vec<u64> = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["parallel"]["pp"].as_u64().unwrap())
        .collect();
    assert_eq!(pp, [1, 2]);
    let out = scratch("jobs-export").join("pipe.txt");
    let mut cmd = fleetsim();
    cmd.args([
        "workload", MIXED, "--job", "pipe", "--export", "simai", "--out",
    ])
    .arg(&out);
    let result = cmd.output().unwrap();
    assert!(result.status.success(), "{result:?}");
    let header = std::fs::read_to_string(&out).unwrap();
    assert!(
        header.contains(" pp: 2 "),
        "the pipe job's export: {header:.200}"
    );
    let err = common::one_clear_error(
        fleetsim().args(["workload", MIXED, "--export", "simai", "--out", "/dev/null"]),
        "export without --job",
    );
    assert!(err.contains("--job NAME (dense, pipe)"), "{err}");
}

/// A sweep over the leaves' oversubscription gives each job's slowdown as columns. Without
/// oversubscription (two spines, two uplinks per rail leaf) the interleaved jobs still slow
/// each other: per-flow ECMP (one queue pair per connection, NCCL's default) hashes both
/// jobs' flows onto the same uplink on 7 of the 16 rail leaves each way, and a ring step is
/// as slow as its slowest rail (Gangidi et al., "RDMA over Ethernet for Distributed AI
/// Training at Meta Scale", SIGCOMM'24, §5.1: ECMP's low entropy for training traffic).
#[test]
fn two_jobs_collide_on_ecmp_paths_even_without_oversubscription() {
    let out = scratch("jobs-sweep");
    stdout_ok(
        fleetsim()
            .args([
                "sweep",
                INTERLEAVED,
                "--vary",
                "cluster.oversubscription=1,2",
            ])
            .arg("--out")
            .arg(&out),
    );
    let text = std::fs::read_to_string(out.join("sweep.csv")).expect("sweep.csv");
    let (header, rows) = csv_table(&text);
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    for row in &rows {
        for job in ["a", "b"] {
            let slowdown: f64 = row[col(&format!("job.{job}.slowdown"))].parse().unwrap();
            assert!(
                (1.30..1.45).contains(&slowdown),
                "oversubscription {}: job {job} slowdown {slowdown}",
                row[0]
            );
        }
    }
}

/// `sweep --no-alone` skips the jobs' alone runs (their columns stay empty), and a job's
/// column can be plotted; a job the experiment does not have is named before anything runs.
#[test]
fn a_sweep_plots_a_jobs_column_and_may_skip_the_alone_runs() {
    let out = scratch("jobs-sweep-no-alone");
    let stdout = stdout_ok(
        fleetsim()
            .args(["sweep", PACKED, "--vary", "network.model=analytical"])
            .args([
                "--no-alone",
                "--plot-column",
                "job.b.iteration_time_s",
                "--out",
            ])
            .arg(&out),
    );
    assert!(!stdout.contains("x alone"), "{stdout}");
    let text = std::fs::read_to_string(out.join("sweep.csv")).expect("sweep.csv");
    let (header, rows) = csv_table(&text);
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    assert!(
        rows[0][col("job.b.iteration_time_s")]
            .parse::<f64>()
            .is_ok()
    );
    assert_eq!(rows[0][col("job.b.slowdown")], "");
    assert!(out.join("sweep.svg").exists());
    let err = one_clear_error(
        fleetsim()
            .args(["sweep", PACKED, "--vary", "network.model=analytical"])
            .args(["--plot-column", "job.c.slowdown", "--out"])
            .arg(scratch("jobs-sweep-no-job")),
        "job c",
    );
    assert!(
        err.contains("names job `c`, which is not one of the experiment's jobs (a, b)"),
        "{err}"
    );
}

/// A key varied twice would run the later values under the earlier's labels: refused.
#[test]
fn a_key_varied_twice_is_one_clear_error() {
    let err = one_clear_error(
        fleetsim()
            .args(["sweep", PACKED, "--vary", "network.model=packet,flow"])
            .args(["--vary", "network.model=analytical", "--out"])
            .arg(scratch("jobs-sweep-twice")),
        "twice",
    );
    assert!(err.contains("`network.model` is varied twice"), "{err}");
}

/// On a mixed cluster each job runs on its hosts' GPU type: the job on the H100 hosts
/// computes faster than the same job on the A100 hosts (measured: 6.20 against 13.39 ms of
/// compute per rank, the same 2 layers of GPT-3 6.7B at TP 8).
#[test]
fn jobs_on_a_mixed_cluster_run_on_their_hosts_gpu_types() {
    const HETERO: &str = "tests/fixtures/jobs/hetero.toml";
    let (s, out) = run("jobs-hetero", HETERO, &["--no-alone"]);
    let text = std::fs::read_to_string(out.join("ranks.csv")).expect("ranks.csv");
    let (header, rows) = csv_table(&text);
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    for row in &rows {
        let want = if row[col("job")] == "on-a100" {
            "A100-SXM-80GB"
        } else {
            "H100-SXM"
        };
        assert_eq!(row[col("gpu")], want, "rank {}", row[col("rank")]);
    }
    let compute = |j: usize| s["jobs"][j]["breakdown_s"]["compute"].as_f64().unwrap();
    assert!(
        compute(1) < 0.6 * compute(0),
        "H100 {} s, A100 {} s",
        compute(1),
        compute(0)
    );
}

/// Jobs out of phase (`start_s`): the interleaved jobs each compute 6.2 ms, then reduce
/// their gradients for 6.6 ms. Job b starting 6 ms after a computes while a reduces and
/// reduces after a finished: neither is slowed (1.000x). Starting 9 ms after, b's reduction
/// overlaps the last 3.6 ms of a's: measured 1.126x and 1.130x, between in phase (1.36x) and
/// apart. A job's time alone does not depend on when it starts.
#[test]
fn jobs_out_of_phase_meet_only_where_their_communication_overlaps() {
    let slowdowns = |start: &str| -> Vec<(f64, f64)> {
        let set = format!("jobs[1].start_s={start}");
        let (s, _) = run(
            &format!("jobs-start-{start}"),
            INTERLEAVED,
            &["--set", &set],
        );
        assert_eq!(
            s["jobs"][1]["start_s"].as_f64(),
            Some(start.parse().unwrap())
        );
        jobs(&s).into_iter().map(|j| (j.3, j.2)).collect()
    };
    let apart = slowdowns("0.006");
    let partly = slowdowns("0.009");
    for ((a, alone_a), (p, alone_p)) in apart.iter().zip(&partly) {
        assert_eq!(*a, 1.0, "6 ms apart: {apart:?}");
        assert!((1.05..1.3).contains(p), "9 ms apart: {partly:?}");
        assert_eq!(alone_a, alone_p, "alone, the start does not matter");
    }
}
