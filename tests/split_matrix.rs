//! The split matrix (issue 15): one digest per experiment however the run is split.
//!
//! Each experiment runs once on one worker and one thread (its baseline, at its own network
//! model), then on workers {1..5} x every partition strategy at that model, then on a
//! seeded random sample of the other combinations (threads 1 or 2, another network model,
//! in process or over gRPC, whose baseline is taken the same way). Every run must give its
//! model's baseline digest and iteration time, or a refusal the docs promise
//! ([`PROMISED_REFUSALS`]); anything else is a failure that names the case. All cases run
//! before the test fails, so one report lists every failure.
//!
//! - **Reduced** (the default, in `cargo test` and `.ci/run`): two jobs interleaved on one
//!   fabric, a spine-leaf fabric (routed by ECMP, then adaptively) and the quickstart cut to
//!   32 GPUs, once as it is and once analytical without clock spread (one replica simulated); every strategy once,
//!   dealt over the three experiments and over 2 and 3 workers, and one sampled case each
//!   (workers x threads at most 3; over gRPC, `auto` on the analytical network). About 35 s
//!   in a debug build on 2 cores.
//! - **Full** (`tools/split-matrix.sh`, or `FLEETSIM_SPLIT_MATRIX=full cargo test --release
//!   --test split_matrix -- --nocapture`): every experiment under `configs/experiments/`
//!   and `tests/fixtures/jobs|faults/` whose baseline ends within a minute (the others are
//!   listed as skipped), workers 2-5 x every strategy (one worker of one thread holds one
//!   partition whatever the strategy: the baseline is that run), six sampled cases each.
//!   Its budget: about 6 hours on this 2-core machine (docs/engine.md, "The split matrix").
//!   `FLEETSIM_SPLIT_MATRIX_SEED` draws another sample; `FLEETSIM_SPLIT_MATRIX_ONLY`
//!   keeps the experiments whose path contains it.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::scratch;
use sim_ir::hash::splitmix64;

/// Refusals the docs promise, by what the error says (and where the docs say it).
const PROMISED_REFUSALS: [(&str, &str); 3] = [
    // docs/faults.md: a link fault from a time after the start needs the packet model.
    (
        "needs the packet-level engine on it",
        "docs/faults.md: mid-iteration link faults are packet-level",
    ),
    // docs/partitioning.md: by-rail needs a rail-optimised fabric.
    ("by-rail", "docs/partitioning.md: by-rail needs rails"),
    // docs/distributed.md: remote workers beyond the partitions are refused.
    (
        "a worker needs at least one",
        "docs/distributed.md: remote workers beyond the partitions",
    ),
];

/// One way to run an experiment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Split {
    workers: u32,
    threads: u32,
    strategy: &'static str,
    /// `None`: the experiment's own network model.
    network: Option<&'static str>,
    grpc: bool,
}

impl Split {
    fn name(&self) -> String {
        format!(
            "{} worker(s) x {} thread(s), {}, {}{}",
            self.workers,
            self.threads,
            self.strategy,
            self.network.unwrap_or("its network model"),
            if self.grpc { ", over gRPC" } else { "" }
        )
    }
}

/// What a run gave.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// Digest and iteration time.
    Ran(String, String),
    /// A refusal the docs promise, with the doc that promises it.
    Refused(&'static str),
    /// Anything else: the error, or what it printed.
    Failed(String),
}

fn binary() -> PathBuf {
    assert_cmd::cargo::cargo_bin("fleetsim")
}

/// Reads summary.json's digest and iteration time.
fn result_in(out: &Path) -> Result<(String, String), String> {
    let text = std::fs::read_to_string(out.join("summary.json"))
        .map_err(|e| format!("no summary.json: {e}"))?;
    let s: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok((
        s["result_digest"].as_str().unwrap_or_default().to_string(),
        s["iteration_time_s"].to_string(),
    ))
}

/// The outcome of a finished command: its result, a promised refusal, or a failure.
fn outcome(status_ok: bool, stderr: &str, out: &Path) -> Outcome {
    if status_ok {
        return match result_in(out) {
            Ok((digest, iteration)) => Outcome::Ran(digest, iteration),
            Err(e) => Outcome::Failed(e),
        };
    }
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or(stderr)
        .to_string();
    match PROMISED_REFUSALS
        .iter()
        .find(|(says, _)| error.contains(says))
    {
        Some((_, doc)) => Outcome::Refused(doc),
        None => Outcome::Failed(error),
    }
}

fn network_sets(split: &Split) -> Vec<String> {
    let mut sets = vec![
        "--set".to_string(),
        format!("engine.partition=\"{}\"", split.strategy),
    ];
    if let Some(n) = split.network {
        sets.extend(["--set".to_string(), format!("network.model=\"{n}\"")]);
    }
    sets
}

fn run_embedded(experiment: &Path, sets: &[String], split: &Split, out: &Path) -> Outcome {
    let run = Command::new(binary())
        .arg("run")
        .arg(experiment)
        .args(["--quiet", "--no-alone", "--workers"])
        .arg(split.workers.to_string())
        .arg("--threads")
        .arg(split.threads.to_string())
        .args(sets)
        .args(network_sets(split))
        .arg("--out")
        .arg(out)
        .output()
        .expect("run fleetsim");
    outcome(
        run.status.success(),
        &String::from_utf8_lossy(&run.stderr),
        out,
    )
}

fn run_grpc(experiment: &Path, sets: &[String], split: &Split, out: &Path) -> Outcome {
    let token = out.with_extension("token");
    std::fs::write(&token, "split-matrix").expect("token file");
    let mut coordinator = Command::new(binary())
        .arg("coordinator")
        .arg(experiment)
        .args(["--quiet", "--listen", "127.0.0.1:0", "--workers"])
        .arg(split.workers.to_string())
        .arg("--token-file")
        .arg(&token)
        .args(sets)
        .args(network_sets(split))
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the coordinator");
    let mut lines = BufReader::new(coordinator.stderr.take().expect("stderr")).lines();
    let mut said = String::new();
    let address = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    break Some(rest.split(',').next().unwrap_or(rest).to_string());
                }
                said.push_str(&line);
                said.push('\n');
            }
            _ => break None,
        }
    };
    let Some(address) = address else {
        let ok = coordinator.wait().is_ok_and(|s| s.success());
        return outcome(ok, &said, out);
    };
    let rest =
        std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    let workers: Vec<_> = (0..split.workers)
        .map(|_| {
            Command::new(binary())
                .args(["worker", "--coordinator", &address, "--threads"])
                .arg(split.threads.to_string())
                .arg("--token-file")
                .arg(&token)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start a worker")
        })
        .collect();
    let status = coordinator.wait().expect("coordinator");
    for mut w in workers {
        let _ = w.wait();
    }
    said.push_str(&rest.join().unwrap_or_default());
    outcome(status.success(), &said, out)
}

fn run_split(experiment: &Path, sets: &[String], split: &Split, out: &Path) -> Outcome {
    let _ = std::fs::remove_dir_all(out);
    if split.grpc {
        run_grpc(experiment, sets, split, out)
    } else {
        run_embedded(experiment, sets, split, out)
    }
}

/// The baseline of one network model: one worker, one thread, the default strategy.
fn baseline(
    experiment: &Path,
    sets: &[String],
    network: Option<&'static str>,
    out: &Path,
    limit: Option<Duration>,
) -> (Outcome, Duration) {
    let split = Split {
        workers: 1,
        threads: 1,
        strategy: "auto",
        network,
        grpc: false,
    };
    let started = Instant::now();
    let outcome = match limit {
        None => run_split(experiment, sets, &split, out),
        Some(limit) => {
            // Stopped at the limit: too slow for the matrix.
            let mut child = Command::new(binary())
                .arg("run")
                .arg(experiment)
                .args(["--quiet", "--no-alone", "--workers", "1", "--threads", "1"])
                .args(sets)
                .args(network_sets(&split))
                .arg("--out")
                .arg(out)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run fleetsim");
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    let done = child.wait_with_output().expect("output");
                    break outcome(
                        done.status.success(),
                        &String::from_utf8_lossy(&done.stderr),
                        out,
                    );
                }
                if started.elapsed() > limit {
                    let _ = child.kill();
                    let _ = child.wait();
                    break Outcome::Failed(format!("over {} s on one worker", limit.as_secs()));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    (outcome, started.elapsed())
}

/// How much of the matrix runs.
struct Form {
    full: bool,
    /// Every strategy on each of these worker counts; reduced, the strategies are dealt
    /// out over them instead.
    workers: Vec<u32>,
    sampled: usize,
    seed: u64,
}

/// Experiment files that are not experiments: a cluster for `fleetsim collective`.
const NOT_EXPERIMENTS: [&str; 1] = ["tests/fixtures/faults/two-paths.toml"];

/// The reduced form's experiments.
const REDUCED: [&str; 2] = [
    "tests/fixtures/jobs/interleaved.toml",
    "tests/fixtures/faults/spine-leaf.toml",
];

impl Form {
    fn from_env() -> Self {
        let full = std::env::var("FLEETSIM_SPLIT_MATRIX").is_ok_and(|v| v == "full");
        let seed = std::env::var("FLEETSIM_SPLIT_MATRIX_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(15);
        if full {
            Form {
                full,
                workers: vec![1, 2, 3, 4, 5],
                sampled: 6,
                seed,
            }
        } else {
            Form {
                full,
                workers: vec![2, 3],
                sampled: 1,
                seed,
            }
        }
    }
}

/// The experiments of the form, each with the `--set`s it runs with.
fn experiments(form: &Form) -> Vec<(PathBuf, Vec<String>)> {
    let mut found = Vec::new();
    if !form.full {
        found.extend(REDUCED.iter().map(|f| (PathBuf::from(f), Vec::new())));
        // Adaptive routing: each switch picks a port by its queues, segments overtake.
        found.push((
            PathBuf::from("tests/fixtures/faults/spine-leaf.toml"),
            vec!["--set".to_string(), "network.routing=adaptive".to_string()],
        ));
        let small: Vec<String> = common::SMALL.iter().map(|s| s.to_string()).collect();
        found.push((PathBuf::from(common::QUICKSTART), small.clone()));
        // One replica standing for the others (sim_engine::symmetry).
        let symmetric = ["network.model=analytical", "compute.clock_spread=0"];
        let sets = symmetric
            .iter()
            .flat_map(|s| ["--set".to_string(), s.to_string()]);
        found.push((
            PathBuf::from(common::QUICKSTART),
            small.into_iter().chain(sets).collect(),
        ));
    }
    let dirs = match form.full {
        true => &[
            "configs/experiments",
            "tests/fixtures/jobs",
            "tests/fixtures/faults",
        ][..],
        false => &[],
    };
    for dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("experiments folder")
            .filter_map(Result::ok)
            .map(|e| e.path())
            // A graph file is a topology, not an experiment.
            .filter(|p| {
                p.extension().is_some_and(|e| e == "toml")
                    && !p.to_string_lossy().ends_with(".graph.toml")
            })
            .collect();
        files.sort();
        files.retain(|f| !NOT_EXPERIMENTS.iter().any(|n| Path::new(n) == f));
        found.extend(files.into_iter().map(|f| (f, Vec::new())));
    }
    if let Ok(only) = std::env::var("FLEETSIM_SPLIT_MATRIX_ONLY") {
        found.retain(|(p, _)| p.to_string_lossy().contains(&only));
    }
    found
}

/// The seeded sample: other threads, network models and transports.
fn sampled(form: &Form, experiment: &Path, strategies: &[&'static str]) -> Vec<Split> {
    let name_hash = experiment
        .to_string_lossy()
        .bytes()
        .fold(form.seed, |h, b| splitmix64(h ^ u64::from(b)));
    let mut state = name_hash;
    let mut draw = |n: usize| {
        state = splitmix64(state);
        (state % n as u64) as usize
    };
    const NETWORKS: [Option<&str>; 3] = [Some("packet"), Some("flow"), Some("analytical")];
    (0..form.sampled)
        .map(|_| {
            let mut split = Split {
                workers: [1u32, 2, 3, 4, 5][draw(5)],
                threads: [1u32, 2][draw(2)],
                strategy: strategies[draw(strategies.len())],
                network: NETWORKS[draw(3)],
                grpc: draw(2) == 1,
            };
            // Reduced, on CI's two cores: more threads than cores make every window wait
            // for a time slice (a 3 x 2 gRPC run of the spine-leaf fabric took 93 s).
            if !form.full && split.workers * split.threads > 3 {
                split.threads = 1;
            }
            // Reduced: over gRPC each window is a round trip (about 4 ms in a debug build on
            // two busy cores), and the spine-leaf fabric at packet level has 36,000 of them
            // on 3 workers (165 s). The strategies and models are covered in process; gRPC
            // runs `auto` on the analytical network, which has the fewest windows.
            if !form.full && split.grpc {
                split.strategy = "auto";
                split.network = Some("analytical");
            }
            split
        })
        .collect()
}

#[test]
fn every_split_gives_the_one_worker_digest() {
    let form = Form::from_env();
    let strategies = partitioner::names();
    let root = scratch("split-matrix");
    let mut failures = Vec::new();
    let mut report = String::new();
    let started = Instant::now();
    let experiments = experiments(&form);
    for (index, (experiment, sets)) in experiments.iter().enumerate() {
        let dir = root.join(index.to_string());
        std::fs::create_dir_all(&dir).expect("scratch");
        let limit = form.full.then_some(Duration::from_secs(60));
        let (own, took) = baseline(experiment, sets, None, &dir.join("base"), limit);
        let label = experiment.display();
        let Outcome::Ran(digest, iteration) = own else {
            let why = format!("{label}: baseline: {own:?}");
            if form.full && matches!(&own, Outcome::Failed(w) if w.starts_with("over ")) {
                report.push_str(&format!("skipped {why}\n"));
            } else {
                failures.push(why);
            }
            continue;
        };
        report.push_str(&format!(
            "{label}: digest {digest}, iteration {iteration} s, baseline {:.1} s\n",
            took.as_secs_f64()
        ));
        let mut baselines: BTreeMap<Option<&'static str>, Outcome> = BTreeMap::new();
        baselines.insert(None, Outcome::Ran(digest, iteration));
        let mut splits: Vec<Split> = form
            .workers
            .iter()
            .flat_map(|&workers| {
                strategies.iter().map(move |&strategy| Split {
                    workers,
                    threads: 1,
                    strategy,
                    network: None,
                    grpc: false,
                })
            })
            .enumerate()
            // Reduced: strategy i on one experiment (i mod experiments) and one worker
            // count (i mod counts) only: every strategy once in all.
            .filter(|(i, s)| {
                let strategy = i % strategies.len();
                form.full
                    || (strategy % experiments.len() == index
                        && form.workers[strategy % form.workers.len()] == s.workers)
            })
            // One worker of one thread holds one partition whatever the strategy: the
            // baseline is that run.
            .filter(|(_, s)| s.workers > 1)
            .map(|(_, s)| s)
            .collect();
        splits.extend(sampled(&form, experiment, &strategies));
        let (mut ran, mut refused) = (0, 0);
        for (i, split) in splits.iter().enumerate() {
            let want = baselines
                .entry(split.network)
                .or_insert_with(|| {
                    baseline(
                        experiment,
                        sets,
                        split.network,
                        &dir.join("base-other"),
                        None,
                    )
                    .0
                })
                .clone();
            let started = Instant::now();
            let got = run_split(experiment, sets, split, &dir.join(i.to_string()));
            report.push_str(&format!(
                "    {}: {:.1} s\n",
                split.name(),
                started.elapsed().as_secs_f64()
            ));
            match (&got, &want) {
                (Outcome::Refused(_), _) => refused += 1,
                (got, want) if got == want => ran += 1,
                // A model the experiment refuses refuses on every split alike.
                (Outcome::Failed(g), Outcome::Failed(w)) if g == w => refused += 1,
                _ => failures.push(format!(
                    "{label}, {}: {got:?}, but one worker gave {want:?}",
                    split.name()
                )),
            }
        }
        report.push_str(&format!(
            "  {} split(s): {ran} same digest, {refused} promised refusal(s)\n",
            splits.len()
        ));
    }
    println!(
        "split matrix ({}, seed {}), {:.0} s:\n{report}",
        if form.full { "full" } else { "reduced" },
        form.seed,
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
