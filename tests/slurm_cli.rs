//! `fleetsim slurm` under a real Slurm (one node: `tools/slurm-local.sh`, which `.ci/run`
//! starts): `srun -n 4` gives the embedded run's digest, and the shipped sbatch script
//! completes. Without a running Slurm the run
//! test says so and passes, unless `FLEETSIM_REQUIRE_SLURM=1` (set by `.ci/run`).

mod common;

use std::process::Command;

use common::{
    QUICKSTART, SMALL, assert_success, fleetsim, one_clear_error, scratch, small_embedded_digest,
    summary,
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

#[test]
fn the_shipped_sbatch_script_completes() {
    if !slurm_is_up() {
        return;
    }
    let dir = scratch("sbatch");
    let root = std::env::current_dir().expect("cwd");
    let bin = assert_cmd::cargo::cargo_bin("fleetsim");
    // The script runs `fleetsim` from PATH; one node here, so override its node count.
    let path = format!(
        "{}:{}",
        bin.parent().expect("target dir").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = dir.join("job.out");
    let out = Command::new("sbatch")
        .args([
            "--wait",
            "--nodes=1",
            "--ntasks-per-node=2",
            "--cpus-per-task=1",
        ])
        .args(["--time=5", "--job-name=fleetsim-test", "--output"])
        .arg(&log)
        .arg(format!("--export=ALL,PATH={path}"))
        .arg("configs/slurm/fleetsim.sbatch")
        .arg(QUICKSTART)
        .arg("--quiet")
        .args(SMALL)
        .current_dir(&root)
        .output()
        .expect("sbatch");
    let job_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success(),
        "{}\n{job_log}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(job_log.contains("digest"), "{job_log}");
    let digest = job_log
        .split("digest ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("a digest in the job's log");
    assert_eq!(digest, small_embedded_digest(&dir.join("embedded")));
}
