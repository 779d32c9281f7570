//! `fleetsim slurm`: one distributed run as the tasks of a Slurm job step (`srun`). Task 0
//! (`SLURM_PROCID`) is the coordinator, every other task a worker.
//!
//! Rendezvous:
//! - the coordinator runs on the first host of `SLURM_JOB_NODELIST` (expanded by
//!   `sim::hostlist`, at most [`MAX_NODELIST_HOSTS`] names) at a port derived from the job id,
//!   unless `--port` is given;
//! - it also writes its real address to `.fleetsim-<job>.addr` in `SLURM_SUBMIT_DIR`. That
//!   file is the fallback when the port was taken and it bound another.
//! - Without `--token-file`, task 0 makes a token and writes it to `.fleetsim-<job>.token`
//!   beside the address file (mode 0600), where the workers read it.
//!
//! Threads per task come from `SLURM_CPUS_PER_TASK`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What stops a Slurm task from taking its place in the run.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(
        "{variable} is not set: run `fleetsim slurm` as the tasks of `srun` (see docs/distributed.md)"
    )]
    Unset { variable: &'static str },
    #[error("{variable} is not a number")]
    NotANumber { variable: &'static str },
    #[error("{variable}: {error}")]
    Nodelist {
        variable: &'static str,
        error: sim::hostlist::HostListError,
    },
    #[error("SLURM_JOB_NODELIST `{nodelist}` names no host")]
    NoHost { nodelist: String },
    #[error(
        "the job step has {tasks} task(s); `fleetsim slurm` needs a coordinator and at least one worker: srun -n 2 or more"
    )]
    TooFewTasks { tasks: u32 },
    /// Not a `#[source]`: the message holds the cause, and the binary's one-line chain would
    /// repeat it.
    #[error("cannot write {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "{} did not appear within {} s: did task 0 (the coordinator) start, and do all tasks share the submit directory?",
        path.display(),
        patience.as_secs()
    )]
    NotThere { path: PathBuf, patience: Duration },
}

/// The most hosts a Slurm nodelist may name: 65,536, four times the 16,384 hosts of a
/// 131,072-GPU cluster of 8-GPU hosts. fleetsim runs one task per worker and needs only the
/// first host (the coordinator's); the bound keeps the expansion of a damaged or hostile
/// nodelist (`n[0-4000000000]`) to at most 65,536 names of at most 255 characters.
pub const MAX_NODELIST_HOSTS: u64 = 1 << 16;

/// The CPUs Slurm gave each task (`SLURM_CPUS_PER_TASK`), if it says.
pub fn cpus_per_task(env: impl Fn(&str) -> Option<String>) -> Option<usize> {
    env("SLURM_CPUS_PER_TASK").and_then(|c| c.trim().parse().ok())
}

/// What a task learns from the Slurm environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmTask {
    pub procid: u32,
    pub ntasks: u32,
    pub job_id: String,
    /// Hosts of the job, expanded, in order.
    pub hosts: Vec<String>,
    pub submit_dir: PathBuf,
    pub cpus_per_task: Option<usize>,
}

impl SlurmTask {
    /// Reads the task's place from `env` (the process environment in practice).
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<SlurmTask, SlurmError> {
        let need = |variable: &'static str| env(variable).ok_or(SlurmError::Unset { variable });
        let number = |variable: &'static str| -> Result<u32, SlurmError> {
            need(variable)?
                .trim()
                .parse()
                .map_err(|_| SlurmError::NotANumber { variable })
        };
        let procid = number("SLURM_PROCID")?;
        let ntasks = number("SLURM_NTASKS")?;
        let (variable, nodelist) = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
            .into_iter()
            .find_map(|v| env(v).map(|list| (v, list)))
            .ok_or(SlurmError::Unset {
                variable: "SLURM_JOB_NODELIST",
            })?;
        let hosts = sim::hostlist::expand(
            nodelist.trim(),
            MAX_NODELIST_HOSTS,
            &format!("the {MAX_NODELIST_HOSTS} a Slurm nodelist may name here"),
        )
        .map_err(|error| SlurmError::Nodelist { variable, error })?;
        if hosts.is_empty() {
            return Err(SlurmError::NoHost { nodelist });
        }
        if ntasks < 2 {
            return Err(SlurmError::TooFewTasks { tasks: ntasks });
        }
        let cpus_per_task = cpus_per_task(&env);
        Ok(SlurmTask {
            procid,
            ntasks,
            job_id: need("SLURM_JOB_ID")?,
            hosts,
            submit_dir: env("SLURM_SUBMIT_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(".")),
            cpus_per_task,
        })
    }

    pub fn is_coordinator(&self) -> bool {
        self.procid == 0
    }

    /// The port the coordinator tries first: `--port`, else one derived from the job id, so
    /// jobs sharing a host rarely collide.
    pub fn port(&self, requested: Option<u16>) -> u16 {
        requested.unwrap_or_else(|| {
            let job: u64 = self.job_id.parse().unwrap_or(0);
            20_000 + (job % 20_000) as u16
        })
    }

    /// The rendezvous file for `what` ("addr" or "token") in the submit directory.
    pub fn file(&self, what: &str) -> PathBuf {
        self.submit_dir
            .join(format!(".fleetsim-{}.{what}", self.job_id))
    }
}

/// Writes `text` to `path` atomically (write beside it, sync, rename), readable by the owner
/// only.
pub fn write_private(path: &Path, text: &str) -> Result<(), SlurmError> {
    use std::io::Write as _;
    worker::file::replace_file(path, 0o600, |out| out.write_all(text.as_bytes())).map_err(|error| {
        SlurmError::Write {
            path: path.to_path_buf(),
            error,
        }
    })
}

/// Waits up to `patience` for `path` to exist; its first line.
pub fn wait_for_file(path: &Path, patience: Duration) -> Result<String, SlurmError> {
    let until = Instant::now() + patience;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Some(line) = text.lines().next().filter(|l| !l.trim().is_empty())
        {
            return Ok(line.trim().to_string());
        }
        if Instant::now() >= until {
            return Err(SlurmError::NotThere {
                path: path.to_path_buf(),
                patience,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// The token file: replaced whole, never half written, and readable by its owner only.
    #[test]
    fn a_private_file_is_replaced_whole_and_owner_only() {
        let dir = std::env::temp_dir().join(format!("fleetsim-private-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("token");
        write_private(&path, "first\n").expect("write");
        write_private(&path, "second\n").expect("replace");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "second\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // No temporary is left beside it.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .filter_map(Result::ok)
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("token")]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn reads_the_task_and_expands_the_nodelist() {
        let t = SlurmTask::from_env(env(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "5"),
            ("SLURM_JOB_ID", "12345"),
            ("SLURM_JOB_NODELIST", "gpu[01-03,07],login"),
            ("SLURM_SUBMIT_DIR", "/scratch/u"),
            ("SLURM_CPUS_PER_TASK", "16"),
        ]))
        .expect("a task");
        assert_eq!(t.hosts, ["gpu01", "gpu02", "gpu03", "gpu07", "login"]);
        assert!(!t.is_coordinator());
        assert_eq!(t.cpus_per_task, Some(16));
        assert_eq!(t.port(None), 20_000 + 12_345);
        assert_eq!(t.port(Some(7000)), 7000);
        assert_eq!(t.file("addr"), Path::new("/scratch/u/.fleetsim-12345.addr"));
    }

    #[test]
    fn outside_srun_or_with_one_task_is_one_clear_error() {
        let e = SlurmTask::from_env(env(&[])).expect_err("no Slurm");
        assert!(
            matches!(
                e,
                SlurmError::Unset {
                    variable: "SLURM_PROCID"
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("SLURM_PROCID is not set"), "{e}");
        let e = SlurmTask::from_env(env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_JOB_ID", "1"),
            ("SLURM_JOB_NODELIST", "n1"),
        ]))
        .expect_err("one task");
        assert!(matches!(e, SlurmError::TooFewTasks { tasks: 1 }), "{e}");
        assert!(e.to_string().contains("srun -n 2"), "{e}");
    }

    /// A nodelist is counted before it is expanded: a huge range or a reversed one is one
    /// clear error, not gigabytes of names or a silent reordering.
    #[test]
    fn a_huge_or_reversed_nodelist_is_refused_unexpanded() {
        let task = |nodelist: &str| {
            SlurmTask::from_env(env(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_ID", "1"),
                ("SLURM_NODELIST", nodelist),
            ]))
        };
        let e = task("gpu[0-4000000000]").expect_err("huge");
        assert_eq!(
            e.to_string(),
            "SLURM_NODELIST: `gpu[0-4000000000]` names 4000000001 hosts, more than the 65536 a Slurm nodelist may name here"
        );
        let e = task("gpu[0-255][0-255],login").expect_err("over the limit");
        assert!(e.to_string().contains("names 65537 hosts"), "{e}");
        let e = task("gpu[7-3]").expect_err("reversed");
        assert!(
            e.to_string().contains("the range `7-3` runs backwards"),
            "{e}"
        );
        assert_eq!(
            task("gpu[0-65535]").expect("at the limit").hosts.len(),
            65_536
        );
    }
}
