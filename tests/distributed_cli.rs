//! `fleetsim coordinator` and `fleetsim worker`: a run over real gRPC on loopback sockets
//! (3 workers) gives the embedded run's digest, garbage on the coordinator's port does not
//! hurt it, a worker without the run's token or its TLS is refused, a dead worker stops the
//! run within 10 s and its last checkpoint resumes on fewer workers (one slow to hand in its
//! results is not dead), and SIGTERM to any
//! process stops the run at a checkpoint, workers started seconds apart still run, and a
//! worker runs without transparent huge pages unless told otherwise.
#![cfg(feature = "server")]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    QUICKSTART, SMALL, assert_success, fleetsim, scratch, slack_counted, small_embedded_digest,
    stdout_ok, summary,
};

fn binary() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("fleetsim"))
}

/// Starts a coordinator on a free loopback port; returns it and the address it printed.
fn start_coordinator(out: &Path, token: &Path, workers: u32) -> (Child, String) {
    start_coordinator_with(out, token, workers, &SMALL)
}

fn start_coordinator_with(
    out: &Path,
    token: &Path,
    workers: u32,
    sets: &[&str],
) -> (Child, String) {
    start_coordinator_on(Path::new(QUICKSTART), out, token, workers, sets)
}

fn start_coordinator_on(
    experiment: &Path,
    out: &Path,
    token: &Path,
    workers: u32,
    sets: &[&str],
) -> (Child, String) {
    start_coordinator_env(experiment, out, token, workers, sets, &[])
}

/// [`start_coordinator_on`] with `env` set in the coordinator's environment.
fn start_coordinator_env(
    experiment: &Path,
    out: &Path,
    token: &Path,
    workers: u32,
    sets: &[&str],
    env: &[(&str, &str)],
) -> (Child, String) {
    let mut child = binary()
        .envs(env.iter().copied())
        .arg("coordinator")
        .arg(experiment)
        .args(["--quiet", "--listen", "127.0.0.1:0"])
        .args(["--workers", &workers.to_string(), "--token-file"])
        .arg(token)
        .arg("--out")
        .arg(out)
        .args(sets)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the coordinator");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let address = loop {
        let line = lines
            .next()
            .expect("the coordinator says where it listens")
            .expect("a line");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split(',').next().expect("an address").to_string();
        }
    };
    // Keep draining stderr so the coordinator never blocks on a full pipe; hand the rest
    // back through a file the test can read.
    let rest = out.with_extension("stderr");
    std::thread::spawn(move || {
        let text: Vec<String> = lines.map_while(Result::ok).collect();
        let _ = std::fs::write(rest, text.join("\n"));
    });
    (child, address)
}

/// A worker with one thread; `stdout` is discarded, `stderr` piped.
fn worker_command(address: &str, token: &Path) -> Command {
    let mut cmd = binary();
    cmd.args([
        "worker",
        "--coordinator",
        address,
        "--threads",
        "1",
        "--token-file",
    ])
    .arg(token)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    cmd
}

fn start_worker(address: &str, token: &Path) -> Child {
    worker_command(address, token)
        .spawn()
        .expect("start a worker")
}

fn worker(address: &str, token: &Path) -> std::process::Output {
    worker_command(address, token)
        .output()
        .expect("run a worker")
}

/// Runs `n` workers against the coordinator at `address` to their end, each on a thread:
/// every one of them must succeed.
fn run_workers(address: &str, token: &Path, n: u32) {
    let handles: Vec<_> = (0..n).map(|_| worker_thread(address, token, &[])).collect();
    for w in handles {
        assert_success(&w.join().expect("worker thread"));
    }
}

/// Runs `n` workers (see [`run_workers`]) and waits for the coordinator to succeed.
fn run_workers_and_coordinator(coordinator: Child, address: &str, token: &Path, n: u32) {
    run_workers(address, token, n);
    let finished = coordinator.wait_with_output().expect("coordinator");
    assert!(finished.status.success(), "coordinator failed");
}

/// Waits for `coordinator` to succeed and checks that the run it wrote to `out` has the
/// digest of the same small run embedded (run under `dir`).
fn assert_embedded_digest(coordinator: Child, out: &Path, dir: &Path) {
    let finished = coordinator.wait_with_output().expect("coordinator");
    assert!(finished.status.success(), "coordinator failed");
    assert_eq!(digest(out).0, small_embedded_digest(&dir.join("embedded")));
}

/// A scratch directory `name` for a run over gRPC: it, the shared secret's file in it, and
/// the run's output directory.
fn secret_run(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch(name);
    let token = token_file(&dir.join("token"), "a-shared-secret\n");
    let out = dir.join("out");
    (dir, token, out)
}

/// A worker run to its end on a thread of its own, `env` set in its environment.
fn worker_thread(
    address: &str,
    token: &Path,
    env: &[(&str, &str)],
) -> std::thread::JoinHandle<std::process::Output> {
    let mut cmd = worker_command(address, token);
    cmd.envs(env.iter().copied());
    std::thread::spawn(move || cmd.output().expect("run a worker"))
}

/// Writes the run's shared secret to `path` and returns the path, for `--token-file`.
fn token_file(path: &Path, secret: impl AsRef<[u8]>) -> PathBuf {
    std::fs::write(path, secret).expect("token file");
    path.to_path_buf()
}

fn digest(dir: &Path) -> (String, serde_json::Value) {
    let json = summary(dir);
    (
        json["result_digest"].as_str().expect("digest").to_string(),
        json,
    )
}

#[test]
fn a_run_over_grpc_gives_the_embedded_digest() {
    let (dir, token, out) = secret_run("distributed");
    let (coordinator, address) = start_coordinator(&out, &token, 3);
    // Garbage on the coordinator's port first: it must shrug it off.
    {
        use std::io::Write as _;
        let mut junk = std::net::TcpStream::connect(&address).expect("connect");
        let _ = junk.write_all(b"GET / HTTP/1.1\r\n\r\n\x00\xff\xfe garbage \x16\x03\x01");
    }
    run_workers_and_coordinator(coordinator, &address, &token, 3);
    let (distributed, summary) = digest(&out);
    assert_eq!(summary["engine"]["mode"], "distributed");
    assert_eq!(summary["engine"]["workers"], 3);
    // The coordinator sees fixed-size reports and grants, never events: a few dozen bytes
    // per worker and window however many events cross (67 since times travel as
    // `Picoseconds` messages, two bytes of framing each).
    let per_window = summary["engine"]["coordinator_bytes_per_window"]
        .as_f64()
        .expect("coordinator bytes");
    assert!(per_window > 0.0 && per_window < 3.0 * 80.0, "{per_window}");
    // The workers' statistics travel with their results: every cross-partition event is
    // counted by its delay.
    let crossed = summary["engine"]["cross_partition_events"].as_u64();
    assert!(
        crossed > Some(0) && Some(slack_counted(&summary)) == crossed,
        "{}",
        summary["engine"]
    );
    assert_eq!(distributed, small_embedded_digest(&dir.join("embedded")));
    for file in ["ranks.csv", "collectives.csv", "links.csv"] {
        assert!(out.join(file).exists(), "{file}");
    }
}

/// A worker that takes longer than the coordinator's 5 s silence limit to hand in its
/// results (as each of four workers of the million-GPU run did, on two cores) is still
/// alive: it beats until its results are in, and the run completes with the embedded digest.
#[test]
fn a_worker_slow_to_submit_its_results_is_not_taken_for_dead() {
    let (dir, token, out) = secret_run("distributed-slow-results");
    let (coordinator, address) = start_coordinator(&out, &token, 2);
    let slow = worker_thread(
        &address,
        &token,
        &[("FLEETSIM_TEST_HOLD_RESULTS_MS", "7000")],
    );
    assert_success(&worker(&address, &token));
    assert_success(&slow.join().expect("slow worker"));
    assert_embedded_digest(coordinator, &out, &dir);
}

/// The coordinator listens before it builds its model, so workers started beside it connect
/// at once and wait in their registration however long the build takes (a minute at
/// 1,048,576 GPUs, where workers used to give up after 30 s of refused connections): here
/// the build is held 3 s and the workers give up on a refusing coordinator after 1 s.
#[test]
fn workers_wait_for_a_coordinator_still_building_its_model() {
    small_run_with_hooks(
        "distributed-slow-build",
        &[("FLEETSIM_TEST_HOLD_BUILD_MS", "3000")],
        &[("FLEETSIM_TEST_CONNECT_PATIENCE_MS", "1000")],
    );
}

/// The workers exit once their results are in, while a huge run's coordinator still writes
/// its output for longer than the 5 s silence limit: that is no worker going silent, so no
/// error is logged and the run succeeds with the embedded digest.
#[test]
fn workers_that_exited_after_their_results_are_not_silent() {
    let out = small_run_with_hooks(
        "distributed-slow-output",
        &[("FLEETSIM_TEST_HOLD_OUTPUT_MS", "7000")],
        &[],
    );
    let stderr = coordinator_stderr(&out);
    assert!(!stderr.contains("went silent"), "{stderr}");
}

/// The small quickstart over gRPC with two workers, test hooks set in the coordinator's
/// environment and in the workers': it succeeds with the embedded digest. Its output
/// directory.
fn small_run_with_hooks(
    name: &str,
    coordinator_env: &[(&str, &str)],
    worker_env: &[(&str, &str)],
) -> PathBuf {
    let (dir, token, out) = secret_run(name);
    let (coordinator, address) = start_coordinator_env(
        Path::new(QUICKSTART),
        &out,
        &token,
        2,
        &SMALL,
        coordinator_env,
    );
    let workers = [0, 1].map(|_| worker_thread(&address, &token, worker_env));
    for w in workers {
        assert_success(&w.join().expect("worker thread"));
    }
    assert_embedded_digest(coordinator, &out, &dir);
    out
}

/// `engine.planner = "hetero"` plans a gRPC run as it plans `run`: the coordinator searches,
/// and its workers load the file with the plan's layout, so the digest is the embedded one.
#[test]
fn the_heterogeneity_planner_plans_a_run_over_grpc_as_run_does() {
    const HETERO: &str = "configs/experiments/hetero-a100-h100-128.toml";
    let sets = [
        "--set",
        "network.model=analytical",
        "--set",
        "parallel.global_batch=16",
        "--set",
        "engine.planner=\"hetero\"",
    ];
    let (dir, token, out) = secret_run("distributed-planned");
    let (coordinator, address) = start_coordinator_on(Path::new(HETERO), &out, &token, 2, &sets);
    run_workers_and_coordinator(coordinator, &address, &token, 2);
    let embedded = embedded_summary(&dir.join("embedded"), HETERO, &sets);
    let planned = summary(&out);
    assert_eq!(planned["result_digest"], embedded["result_digest"]);
    // The plan moved work by device speed: not the layout as written.
    let as_written = embedded_summary(&dir.join("as-written"), HETERO, &sets[..4]);
    assert_ne!(planned["result_digest"], as_written["result_digest"]);
}

/// `fleetsim run` of `experiment` with `sets`, in one process: its summary.json.
fn embedded_summary(out: &Path, experiment: &str, sets: &[&str]) -> serde_json::Value {
    stdout_ok(
        fleetsim()
            .args(["run", experiment, "--quiet", "--out"])
            .arg(out)
            .args(sets),
    );
    summary(out)
}

/// Workers need not start together: the first waits in its registration while the second
/// starts longer than the coordinator's 5 s silence limit later (as srun's tasks or hand-started
/// workers may), and the run still gives the embedded digest.
#[test]
fn a_worker_registered_early_waits_for_a_late_one() {
    let (dir, token, out) = secret_run("distributed-late");
    let (coordinator, address) = start_coordinator(&out, &token, 2);
    let early = worker_thread(&address, &token, &[]);
    std::thread::sleep(Duration::from_secs(7));
    assert_success(&worker(&address, &token));
    assert_success(&early.join().expect("worker thread"));
    assert_embedded_digest(coordinator, &out, &dir);
}

/// The value of `_RJEM_MALLOC_CONF` in process `pid`'s environment once it holds one (within
/// `limit`), else `None`.
#[cfg(feature = "jemalloc")]
fn malloc_conf_of(pid: u32, limit: Duration) -> Option<String> {
    let started = Instant::now();
    while started.elapsed() < limit {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let found = environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(b"_RJEM_MALLOC_CONF=".as_slice()));
        if let Some(value) = found {
            return Some(String::from_utf8_lossy(value).into_owned());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// A worker process starts itself again without transparent huge pages (jemalloc's options),
/// unless the variable is set already, and runs as before.
#[cfg(feature = "jemalloc")]
#[test]
fn a_worker_runs_without_huge_pages_unless_told_otherwise() {
    let dir = scratch("distributed-huge-pages");
    let token = token_file(&dir.join("token"), "pages\n");
    let out = dir.join("out");
    let (coordinator, address) = start_coordinator(&out, &token, 2);
    let mut workers = Vec::new();
    for (given, want) in [
        (None, "thp:never,metadata_thp:disabled"),
        (Some("thp:always"), "thp:always"),
    ] {
        let mut command = worker_command(&address, &token);
        command.env_remove("_RJEM_MALLOC_CONF");
        if let Some(value) = given {
            command.env("_RJEM_MALLOC_CONF", value);
        }
        let worker = command.spawn().expect("start a worker");
        let seen = malloc_conf_of(worker.id(), Duration::from_secs(10));
        assert_eq!(seen.as_deref(), Some(want), "given {given:?}");
        workers.push(worker);
    }
    for worker in workers {
        assert_success(&worker.wait_with_output().expect("worker"));
    }
    assert_embedded_digest(coordinator, &out, &dir);
}

#[test]
fn a_worker_without_the_run_token_is_refused() {
    let dir = scratch("distributed-token");
    let token = token_file(&dir.join("token"), "right\n");
    let wrong = token_file(&dir.join("wrong"), "wrong\n");
    let (mut coordinator, address) = start_coordinator(&dir.join("out"), &token, 1);
    let refused = worker(&address, &wrong);
    let _ = coordinator.kill();
    let _ = coordinator.wait();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("wrong fleetsim token"), "{stderr}");
}

/// Waits for `child` at most `limit`; its exit status, or `None` if it is still running.
fn wait_at_most(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// SIGTERM to a worker still waiting for its coordinator ends it at once, not after the
/// 30 s it would keep trying to connect.
#[test]
fn sigterm_to_a_worker_still_connecting_ends_it_at_once() {
    let dir = scratch("distributed-term-connecting");
    let token = token_file(&dir.join("token"), "a-shared-secret\n");
    // A port nothing listens on.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = free.local_addr().expect("address").to_string();
    drop(free);
    let mut worker = start_worker(&address, &token);
    std::thread::sleep(Duration::from_millis(1500));
    common::send_sigterm(&worker);
    let status = wait_at_most(&mut worker, Duration::from_secs(5));
    let _ = worker.kill();
    let output = worker.wait_with_output().expect("worker output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        status.is_some(),
        "still running 5 s after SIGTERM: {stderr}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{stderr}");
    assert!(
        stderr.contains("asked to stop while waiting for the coordinator"),
        "{stderr}"
    );
}

/// Waits until the coordinator writing to `out` completed a checkpoint.
fn wait_for_checkpoint(out: &Path) {
    let manifest = out.join("checkpoint").join("checkpoint.json");
    let until = Instant::now() + Duration::from_secs(60);
    while !manifest.exists() {
        assert!(Instant::now() < until, "no checkpoint within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The coordinator's stderr after it exited (the drain thread writes it once the pipe closes).
fn coordinator_stderr(out: &Path) -> String {
    let path = out.with_extension("stderr");
    let until = Instant::now() + Duration::from_secs(5);
    while !path.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(&path).unwrap_or_default()
}

/// Resumes the checkpoint of the run written to `out` with a coordinator and `workers`
/// workers; the resumed run's output directory.
fn resume_over_grpc(dir: &Path, out: &Path, token: &Path, workers: u32) -> std::path::PathBuf {
    let resumed = dir.join("resumed");
    let checkpoint = out.join("checkpoint");
    let mut sets: Vec<&str> = SMALL.to_vec();
    sets.extend(["--resume", checkpoint.to_str().expect("utf-8 path")]);
    let (coordinator, address) = start_coordinator_with(&resumed, token, workers, &sets);
    run_workers(&address, token, workers);
    let finished = coordinator.wait_with_output().expect("coordinator");
    assert!(
        finished.status.success(),
        "resumed coordinator failed: {}",
        coordinator_stderr(&resumed)
    );
    resumed
}

/// A run of the small quickstart over gRPC with a checkpoint every 5 ms of simulated time,
/// started and past its first checkpoint.
struct CheckpointingRun {
    dir: std::path::PathBuf,
    token: std::path::PathBuf,
    out: std::path::PathBuf,
    coordinator: Child,
    workers: Vec<Child>,
}

impl CheckpointingRun {
    fn start(name: &str, workers: u32) -> Self {
        let dir = scratch(name);
        let token = token_file(&dir.join("token"), format!("{name}\n"));
        let out = dir.join("out");
        let mut sets: Vec<&str> = SMALL.to_vec();
        sets.extend(["--checkpoint-every", "5ms"]);
        let (coordinator, address) = start_coordinator_with(&out, &token, workers, &sets);
        let workers = (0..workers)
            .map(|_| start_worker(&address, &token))
            .collect();
        wait_for_checkpoint(&out);
        CheckpointingRun {
            dir,
            token,
            out,
            coordinator,
            workers,
        }
    }

    /// Waits for the coordinator (at most `limit`), then 10 s more for every worker; kills
    /// what is left. The exit statuses (`None`: still running) and the coordinator's stderr.
    fn finish(
        &mut self,
        limit: Duration,
    ) -> (
        Option<std::process::ExitStatus>,
        Vec<Option<std::process::ExitStatus>>,
        String,
    ) {
        let status = wait_at_most(&mut self.coordinator, limit);
        let workers = self
            .workers
            .iter_mut()
            .map(|w| wait_at_most(w, Duration::from_secs(10)))
            .collect();
        for c in std::iter::once(&mut self.coordinator).chain(self.workers.iter_mut()) {
            let _ = c.kill();
            let _ = c.wait();
        }
        (status, workers, coordinator_stderr(&self.out))
    }
}

#[test]
fn a_dead_worker_stops_the_run_within_ten_seconds_and_the_run_resumes_on_two() {
    let mut run = CheckpointingRun::start("distributed-crash", 3);
    run.workers[2].kill().expect("kill a worker");
    let (status, workers, stderr) = run.finish(Duration::from_secs(10));
    let status = status.expect("the coordinator stops within 10 s of a worker's death");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("stopped answering"), "{stderr}");
    assert!(stderr.contains("worker "), "{stderr}");
    assert!(stderr.contains("The last checkpoint is in"), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    for s in &workers[..2] {
        assert_eq!(
            s.expect("the other workers exit by themselves").code(),
            Some(1)
        );
    }
    let resumed = resume_over_grpc(&run.dir, &run.out, &run.token, 2);
    let (digest, summary) = digest(&resumed);
    assert_eq!(summary["engine"]["workers"], 2);
    assert_eq!(digest, small_embedded_digest(&run.dir.join("embedded")));
}

#[test]
fn sigterm_to_a_worker_checkpoints_and_stops_the_whole_run() {
    let mut run = CheckpointingRun::start("distributed-sigterm", 2);
    common::send_sigterm(&run.workers[1]);
    let (status, workers, stderr) = run.finish(Duration::from_secs(30));
    assert_eq!(
        status.expect("the coordinator stops").code(),
        Some(75),
        "{stderr}"
    );
    assert!(stderr.contains("stopped on request"), "{stderr}");
    assert!(!run.out.join("summary.json").exists());
    for s in workers {
        assert_eq!(s.expect("every worker stops").code(), Some(0));
    }
    let (dir, out) = (&run.dir, &run.out);
    // The stop checkpoint resumes embedded too.
    let resumed = dir.join("resumed");
    common::stdout_ok(
        common::fleetsim()
            .args(["run", QUICKSTART, "--quiet", "--resume"])
            .arg(out.join("checkpoint"))
            .arg("--out")
            .arg(&resumed)
            .args(SMALL),
    );
    assert_eq!(
        digest(&resumed).0,
        small_embedded_digest(&dir.join("embedded"))
    );
}

#[test]
fn a_worker_whose_experiment_differs_from_the_coordinators_refuses_to_run() {
    let dir = scratch("distributed-mismatch");
    let token = token_file(&dir.join("token"), "mismatch\n");
    let cluster = std::env::current_dir()
        .expect("cwd")
        .join("configs/clusters/rail-h100.toml");
    let experiment = dir.join("experiment.toml");
    let text = |seed: u32| {
        format!(
            "name = \"mismatch\"\ninclude = [{:?}]\n[cluster]\ngpus = 32\n[model]\npreset = \"gpt3-13b\"\nlayers = 4\n[parallel]\ntp = 4\npp = 2\nglobal_batch = 16\n[engine]\nseed = {seed}\n",
            cluster.display().to_string()
        )
    };
    std::fs::write(&experiment, text(1)).expect("experiment");
    let out = dir.join("out");
    let (mut coordinator, address) = start_coordinator_on(&experiment, &out, &token, 1, &[]);
    // The file changes under the worker: it builds another model than the coordinator.
    std::fs::write(&experiment, text(2)).expect("experiment");
    let refused = worker(&address, &token);
    let _ = coordinator.kill();
    let _ = coordinator.wait();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("builds another model"), "{stderr}");
}

const TLS: &str = "tests/fixtures/tls";

#[test]
fn mutual_tls_runs_alike_and_refuses_a_plain_worker() {
    let dir = scratch("distributed-tls");
    let token = token_file(&dir.join("token"), "tls\n");
    let out = dir.join("out");
    let tls = ["--tls-dir", TLS];
    let mut sets: Vec<&str> = SMALL.to_vec();
    sets.extend(tls);
    let (coordinator, address) = start_coordinator_with(&out, &token, 1, &sets);
    // A worker without TLS cannot even register; the one with it runs the whole job.
    let plain = binary()
        .args(["worker", "--coordinator", &address, "--token-file"])
        .arg(&token)
        .output()
        .expect("a plain worker");
    assert_eq!(plain.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let secure = binary()
        .args([
            "worker",
            "--coordinator",
            &address,
            "--threads",
            "1",
            "--token-file",
        ])
        .arg(&token)
        .args(tls)
        .output()
        .expect("a TLS worker");
    assert_success(&secure);
    assert_embedded_digest(coordinator, &out, &dir);
}

/// `GET /metrics` on `address`, the whole HTTP response.
fn scrape(address: &str) -> String {
    use std::io::{Read as _, Write as _};
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(address) {
            let request =
                format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
            if s.write_all(request.as_bytes()).is_ok() {
                let mut response = String::new();
                let _ = s.read_to_string(&mut response);
                return response;
            }
        }
        assert!(
            Instant::now() < until,
            "nothing serves metrics at {address}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_are_served_live_and_written_at_the_end_and_logs_are_json() {
    let dir = scratch("distributed-metrics");
    let token = token_file(&dir.join("token"), "metrics\n");
    let out = dir.join("out");
    let metrics = "127.0.0.1:47561";
    let mut sets: Vec<&str> = SMALL.to_vec();
    sets.extend(["--metrics-listen", metrics]);
    sets.extend(["--log-format", "json", "--log-level", "info"]);
    let (coordinator, address) = start_coordinator_with(&out, &token, 1, &sets);
    // The endpoint answers while the coordinator waits for its worker.
    assert!(
        scrape(metrics).starts_with("HTTP/1.1 200"),
        "no metrics page"
    );
    assert_success(&worker(&address, &token));
    assert!(
        coordinator
            .wait_with_output()
            .expect("coordinator")
            .status
            .success()
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("metrics.json")).expect("metrics.json"),
    )
    .expect("JSON");
    let engine = &json["engine"];
    assert!(engine["windows"].as_u64().is_some_and(|w| w > 0), "{json}");
    assert_eq!(
        engine["per_worker"].as_array().map(Vec::len),
        Some(1),
        "{json}"
    );
    assert!(
        engine["per_worker"][0]["barrier_wait_s"].is_number(),
        "{json}"
    );
    // A worker process measures its own memory and sends it with its results.
    assert!(
        engine["per_worker"][0]["peak_rss_bytes"]
            .as_u64()
            .is_some_and(|b| b > 1_000_000),
        "{json}"
    );
}

#[test]
fn a_coordinator_whose_workers_never_come_gives_up() {
    let dir = scratch("distributed-alone");
    let token = token_file(&dir.join("token"), "alone\n");
    let mut sets: Vec<&str> = SMALL.to_vec();
    sets.extend(["--register-timeout", "2"]);
    let (mut coordinator, _) = start_coordinator_with(&dir.join("out"), &token, 2, &sets);
    let status = wait_at_most(&mut coordinator, Duration::from_secs(10));
    let _ = coordinator.kill();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "no hang");
}

/// `[[jobs]]` over gRPC: the workers build the same jobs on the same hosts and the run gives
/// the embedded digest; the summary lists the jobs (without alone runs: those are embedded).
#[test]
fn several_jobs_over_grpc_give_the_embedded_digest() {
    const JOBS: &str = "tests/fixtures/jobs/interleaved.toml";
    let dir = scratch("distributed-jobs");
    let token = token_file(&dir.join("token"), "jobs-secret\n");
    let out = dir.join("out");
    let (coordinator, address) = start_coordinator_on(Path::new(JOBS), &out, &token, 2, &[]);
    run_workers_and_coordinator(coordinator, &address, &token, 2);
    let (distributed, summary) = digest(&out);
    let embedded = dir.join("embedded");
    let run = binary()
        .args(["run", JOBS, "--quiet", "--no-alone", "--out"])
        .arg(&embedded)
        .output()
        .expect("embedded run");
    assert_success(&run);
    assert_eq!(distributed, digest(&embedded).0);
    let names: Vec<&str> = summary["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(summary["jobs"][0]["slowdown"].is_null());
}
