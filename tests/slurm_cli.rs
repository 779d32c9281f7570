//! `fleetsim slurm` under a real Slurm (one node: `tools/slurm-local.sh`, which `.ci/run`
//! starts): `srun -n 4` gives the embedded run's digest, and the shipped sbatch script
//! completes, also when SIGUSR1 before the time limit stops it at a checkpoint and the
//! requeued job resumes; a `--slurm` sweep runs as an array job and collects the table a
//! local sweep writes. Without a running Slurm each such test says so and passes, unless
//! `FLEETSIM_REQUIRE_SLURM=1` (set by `.ci/run`).
#![cfg(feature = "server")]

mod common;

use std::process::Command;

use common::{
    QUICKSTART, SMALL, assert_success, csv_table, fleetsim, one_clear_error, scratch,
    small_embedded_digest, stdout_ok, summary,
};

/// Whether a Slurm answers `sinfo` with a usable node. Without one a test says it skipped,
/// unless `FLEETSIM_REQUIRE_SLURM` is set, which fails it.
fn slurm_is_up() -> bool {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .is_ok_and(|o| {
            o.status.success() && {
                let s = String::from_utf8_lossy(&o.stdout);
                s.contains("idle") || s.contains("mix") || s.contains("alloc")
            }
        });
    if !up {
        assert!(
            std::env::var("FLEETSIM_REQUIRE_SLURM").is_err(),
            "FLEETSIM_REQUIRE_SLURM is set but no Slurm answers sinfo: run tools/slurm-local.sh"
        );
        eprintln!("no running Slurm (tools/slurm-local.sh starts one): skipped");
    }
    up
}

#[test]
fn srun_tasks_meet_and_give_the_embedded_digest() {
    if !slurm_is_up() {
        return;
    }
    let dir = scratch("slurm");
    let out = dir.join("out");
    let root = std::env::current_dir().expect("cwd");
    let status = Command::new("srun")
        .args(["-n", "4", "--cpus-per-task=1", "--time=5"])
        .arg(assert_cmd::cargo::cargo_bin("fleetsim"))
        .args(["slurm", QUICKSTART, "--quiet", "--out"])
        .arg(&out)
        .args(SMALL)
        .current_dir(&root)
        .output()
        .expect("srun");
    assert_success(&status);
    let distributed = summary(&out);
    assert_eq!(distributed["engine"]["mode"], "distributed");
    assert_eq!(distributed["engine"]["workers"], 3);
    assert_eq!(
        distributed["result_digest"],
        small_embedded_digest(&dir.join("embedded")).as_str()
    );
}

#[test]
fn outside_srun_is_one_clear_error() {
    let mut cmd = fleetsim();
    for key in [
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ] {
        cmd.env_remove(key);
    }
    let stderr = one_clear_error(cmd.args(["slurm", QUICKSTART]), "slurm outside srun");
    assert!(stderr.contains("SLURM_PROCID is not set"), "{stderr}");
}

/// A nodelist is counted before it is expanded: a huge range is one clear error, at once.
#[test]
fn a_huge_nodelist_is_one_clear_error() {
    let stderr = one_clear_error(
        fleetsim()
            .args(["slurm", QUICKSTART])
            .env("SLURM_PROCID", "1")
            .env("SLURM_NTASKS", "2")
            .env("SLURM_JOB_ID", "1")
            .env("SLURM_JOB_NODELIST", "gpu[0-4000000000]")
            .env_remove("SLURM_NODELIST"),
        "huge nodelist",
    );
    assert!(
        stderr.contains(
            "SLURM_JOB_NODELIST: `gpu[0-4000000000]` names 4000000001 hosts, more than the 65536 a Slurm nodelist may name here"
        ),
        "{stderr}"
    );
}

/// `sbatch` of the shipped script on one node with two tasks, running this build's `fleetsim`
/// (the script takes it from PATH) on the small quickstart plus `script_args`.
fn sbatch(options: &[&str], name: &str, log: &std::path::Path, script_args: &[&str]) -> Command {
    let bin = assert_cmd::cargo::cargo_bin("fleetsim");
    let path = format!(
        "{}:{}",
        bin.parent().expect("target dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sbatch");
    cmd.args(options)
        .args(["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1"])
        .arg(format!("--job-name={name}"))
        .arg("--output")
        .arg(log)
        .arg(format!("--export=ALL,PATH={path}"))
        .arg("configs/slurm/fleetsim.sbatch")
        .args([QUICKSTART, "--quiet"])
        .args(SMALL)
        .args(script_args)
        .current_dir(std::env::current_dir().expect("cwd"));
    cmd
}

/// The digest a job's log reports.
fn digest_in(job_log: &str) -> &str {
    job_log
        .split("digest ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no digest in the job's log:\n{job_log}"))
}

#[test]
fn the_shipped_sbatch_script_completes() {
    if !slurm_is_up() {
        return;
    }
    let dir = scratch("sbatch");
    let log = dir.join("job.out");
    // Over 5 minutes: the script asks for SIGUSR1 5 minutes before the limit.
    let out = sbatch(&["--wait", "--time=15"], "fleetsim-test", &log, &[])
        .output()
        .expect("sbatch");
    let job_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success(),
        "{}\n{job_log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        digest_in(&job_log),
        small_embedded_digest(&dir.join("embedded"))
    );
}

/// `squeue`'s state and reason for job `id`, empty once it left the queue.
fn job_state(id: &str) -> String {
    Command::new("squeue")
        .args(["-h", "-o", "%T %r", "-j", id])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[test]
fn sigusr1_before_the_time_limit_checkpoints_and_the_requeued_job_resumes() {
    if !slurm_is_up() {
        return;
    }
    let dir = scratch("sbatch-requeue");
    let root = std::env::current_dir().expect("cwd");
    let log = dir.join("job.out");
    let submitted = sbatch(
        &["--parsable", "--time=15"],
        "fleetsim-requeue",
        &log,
        &["--checkpoint-every", "5ms"],
    )
    .output()
    .expect("sbatch");
    assert_success(&submitted);
    let id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .split(';')
        .next()
        .expect("a job id")
        .to_string();
    let out = root.join("runs").join(format!("fleetsim-requeue-{id}"));
    let wait = |what: &str, limit: u64, mut done: Box<dyn FnMut() -> bool + '_>| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(limit);
        while !done() {
            if std::time::Instant::now() > until {
                let _ = Command::new("scancel").arg(&id).status();
                panic!(
                    "{what} within {limit} s; job log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let manifest = out.join("checkpoint").join("checkpoint.json");
    wait("no checkpoint", 120, Box::new(|| manifest.exists()));
    // What `#SBATCH --signal=USR1@300` sends to the job's tasks before its time limit.
    assert_success(
        &Command::new("scancel")
            .args(["--signal=USR1", &id])
            .output()
            .expect("scancel"),
    );
    // Done once the resumed run printed its result and the job left the queue. (Between
    // the requeue and the restart the job is briefly in neither the queue nor the log's
    // end, so the log decides.)
    // Slurm holds a requeued job back for its credential's lifetime (`cred_expire`, 120 s by
    // default); forcing an earlier start gets it killed as "Job credential revoked".
    wait(
        "the job did not requeue and finish",
        420,
        Box::new(|| {
            let state = job_state(&id);
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            log.contains("resuming from") && log.contains("engine: ") && state.is_empty()
        }),
    );
    let job_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        job_log.contains("stopped at a checkpoint; requeueing"),
        "{job_log}"
    );
    assert!(job_log.contains("resuming from"), "{job_log}");
    assert_eq!(
        digest_in(&job_log),
        small_embedded_digest(&dir.join("embedded"))
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// The columns of `sweep.csv` that say what the simulation answered, which must not depend
/// on where or how it ran (unlike wall time, windows or threads).
fn answers(csv: &str) -> Vec<Vec<String>> {
    let (header, rows) = csv_table(csv);
    let last = header
        .iter()
        .position(|h| h == "bubble_s")
        .expect("a bubble_s column");
    rows.into_iter()
        .map(|mut r| {
            r.truncate(last + 1);
            r
        })
        .collect()
}

#[test]
fn a_sweep_as_a_slurm_array_collects_the_local_sweeps_table() {
    if !slurm_is_up() {
        return;
    }
    let dir = scratch("slurm-sweep");
    let sweep = |out: &std::path::Path, extra: &[&str]| {
        stdout_ok(
            fleetsim()
                .args(["sweep", QUICKSTART])
                .args(["--vary", "parallel.tp=2,4"])
                .args(["--vary", "engine.partition=by-host,metis", "--out"])
                .arg(out)
                .args(SMALL)
                .args(extra),
        )
    };
    let local = dir.join("local");
    sweep(&local, &[]);
    let farm = dir.join("farm");
    // --wait: sbatch returns once every task of the array is done.
    let submitted = sweep(
        &farm,
        &[
            "--slurm",
            "--sbatch-arg=--wait",
            "--sbatch-arg=--time=10",
            "--sbatch-arg=--cpus-per-task=1",
        ],
    );
    assert!(
        submitted.contains("4 point(s) submitted as Slurm array job"),
        "{submitted}"
    );
    let script = std::fs::read_to_string(farm.join("sweep.sbatch")).expect("sweep.sbatch");
    assert!(script.contains("#SBATCH --array=0-3"), "{script}");
    stdout_ok(fleetsim().args(["sweep", "--collect"]).arg(&farm));
    let read =
        |d: &std::path::Path| std::fs::read_to_string(d.join("sweep.csv")).expect("sweep.csv");
    let (local_csv, farm_csv) = (read(&local), read(&farm));
    assert_eq!(answers(&farm_csv).len(), 4, "{farm_csv}");
    assert_eq!(
        answers(&farm_csv),
        answers(&local_csv),
        "{farm_csv}\n{local_csv}"
    );
    assert!(farm.join("sweep.svg").exists());
    for i in 0..4 {
        let log = farm.join("logs").join(format!("{i:04}.out"));
        let text = std::fs::read_to_string(&log).expect("a task's log");
        assert!(text.contains(&format!("point {i}: ")), "{text}");
    }
}
