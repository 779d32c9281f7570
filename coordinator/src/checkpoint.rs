//! Checkpoints of a run, the coordinator's side: when to take one, the manifest that makes
//! one complete, and reading it back to resume (DESIGN.md, "Windows and mailboxes").
//!
//! A checkpoint directory holds `checkpoint.json` (the [`Manifest`]) and one
//! `window-NNNNNNNNNNNN/` directory of part files, one per worker
//! ([`worker::checkpoint`]). Workers write their parts at the barrier before a window; when
//! every worker has reported its part written, the coordinator writes the manifest (atomically)
//! and removes older window directories. A crash at any moment leaves the last complete
//! checkpoint intact.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sim::experiment::Experiment;
use sim_engine::SimModel;
use sim_ir::time::{SimTime, round_ps};
use worker::checkpoint::{part_file_name, window_dir, write_atomically};

/// The manifest's file name inside a checkpoint directory.
pub const MANIFEST: &str = "checkpoint.json";
/// Bumped whenever an LP's checkpointed state changes shape: 2 since GPUs count analytical
/// bytes per link crossed (`GpuLp::analytical_link_bytes`); 3 since a GPU's tables by group
/// kind hold the expert-TP kind (`GroupKind::COUNT`); 4 since a GPU tracks its host's issue
/// (`GpuLp::host_anchor_ps` and the rest); 6 since one GPU per stage keeps its timeline
/// (`GpuLp::timeline`); 7 since a segment carries its completion count and one byte of
/// marks, and a GPU counts the segments of adaptively routed flows; 8 since it counts both
/// kinds of pieces in one table (`GpuLp::pieces_seen`); 9 since a GPU times its running
/// kernel pro rata (`GpuLp::kernel_since_ps`, `kernel_left_ps`, `kernel_slowed`); 10 since
/// a NIC's port serves its queue pairs in turn (`net::Port` rounds, `Waiting::round`); 11
/// since it counts its turns in bytes (`Port::wire_start`, `Waiting::start`).
const FORMAT: u32 = 11;

/// How often checkpoints are taken: `--checkpoint-every 2ms` (simulated time, units ps, ns,
/// us, ms, s) or `--checkpoint-every wall:15m` (wall-clock time, as `humantime` reads it:
/// `30s`, `15m`, `1h 30m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointEvery {
    Simulated(SimTime),
    Wall(Duration),
}

/// A `--checkpoint-every` that is not an interval.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` {why}; use simulated time such as `500us` or `2ms` (units ps, ns, us, ms, s), or wall-clock time such as `wall:30s`, `wall:15m` or `wall:1h 30m`"
)]
pub struct IntervalError {
    text: String,
    why: String,
}

impl FromStr for CheckpointEvery {
    type Err = IntervalError;

    fn from_str(s: &str) -> Result<Self, IntervalError> {
        let error = |why: &str| IntervalError {
            text: s.to_string(),
            why: why.to_string(),
        };
        if let Some(wall) = s.trim().strip_prefix("wall:") {
            // Simulated time has units humantime lacks (ps); wall-clock time is its domain.
            let every = humantime::parse_duration(wall.trim())
                .map_err(|e| error(&format!("is not a wall-clock duration ({e})")))?;
            if every.is_zero() {
                return Err(error("must be a positive duration"));
            }
            return Ok(CheckpointEvery::Wall(every));
        }
        let value = s.trim();
        let split = value
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(value.len());
        let (number, unit) = value.split_at(split);
        let number: f64 = number.parse().map_err(|_| error("is not a duration"))?;
        let unit = match unit {
            "ps" => SimTime::from_ps(1),
            "ns" => SimTime::from_ns(1),
            "us" => SimTime::from_us(1),
            "ms" => SimTime::from_us(1_000),
            "s" => SimTime::from_ps(SimTime::PS_PER_SECOND),
            _ => return Err(error("has no unit this option knows")),
        };
        let scale = unit.as_ps() as f64;
        let amount = number * scale;
        if !(amount.is_finite() && amount > 0.0) {
            return Err(error("must be a positive duration"));
        }
        Ok(CheckpointEvery::Simulated(SimTime::from_ps(
            round_ps(amount).max(1),
        )))
    }
}

/// What went wrong taking, completing or resuming from a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot create the checkpoint directory {dir}: {error}")]
    CreateDir { dir: String, error: std::io::Error },
    #[error(
        "worker {worker} reported its checkpoint part written, but {part} cannot be read: {error}; the workers must share the checkpoint directory's file system"
    )]
    PartNotShared {
        worker: u32,
        part: String,
        error: std::io::Error,
    },
    #[error("cannot encode the checkpoint manifest: {0}")]
    Encode(serde_json::Error),
    #[error(transparent)]
    Write(worker::checkpoint::CheckpointError),
    #[error(
        "--resume {dir}: cannot read {manifest} ({error}); point --resume at a directory a run wrote checkpoints to (its --checkpoint-dir, by default OUT/checkpoint) after at least one checkpoint completed"
    )]
    NoManifest {
        dir: String,
        manifest: String,
        error: std::io::Error,
    },
    #[error("{manifest}: not a fleetsim checkpoint manifest: {error}")]
    NotAManifest {
        manifest: String,
        error: serde_json::Error,
    },
    #[error(
        "{manifest}: checkpoint format {format} is not the format {FORMAT} this fleetsim reads"
    )]
    Format { manifest: String, format: u32 },
    #[error(
        "{manifest}: the checkpoint was written for experiment `{experiment}` with other settings (fingerprint {theirs}, this run's is {ours}); resume with the same experiment file and --set options (partitioning, workers and threads may differ)"
    )]
    OtherModel {
        manifest: String,
        experiment: String,
        theirs: String,
        ours: String,
    },
    #[error("{manifest}: part {part} is missing: {error}")]
    PartMissing {
        manifest: String,
        part: String,
        error: std::io::Error,
    },
    #[error(
        "{manifest}: part {part} has {size} bytes, the manifest says {expected}; the checkpoint is damaged"
    )]
    PartDamaged {
        manifest: String,
        part: String,
        size: u64,
        expected: u64,
    },
    #[error(
        "{manifest}: part `{part}` is not a file inside the checkpoint directory; a manifest names its parts relative to it (window-N/worker-W.lps)"
    )]
    PartOutside { manifest: String, part: String },
    #[error("{manifest}: part `{part}` is named twice; the checkpoint is damaged")]
    PartTwice { manifest: String, part: String },
    #[error("a worker reported its last checkpoint part before window {reported}, not {expected}")]
    OutOfStep { reported: u64, expected: u64 },
    #[error("cannot watch for SIGTERM and SIGUSR1: {0}")]
    Signals(std::io::Error),
    #[error("cannot start the signal watcher: {0}")]
    SignalThread(std::io::Error),
}

/// What a run does about checkpoints.
#[derive(Debug, Clone)]
pub struct CheckpointOptions {
    /// Where checkpoints are written (`--checkpoint-dir`, else `OUT/checkpoint`).
    pub dir: PathBuf,
    pub every: Option<CheckpointEvery>,
    /// Continue from the checkpoint in this directory.
    pub resume: Option<PathBuf>,
    /// Set by SIGTERM or SIGUSR1: take a checkpoint at the next barrier and stop.
    pub stop: Arc<AtomicBool>,
}

impl CheckpointOptions {
    /// No periodic checkpoints; a stop request still writes one to `dir`.
    pub fn on_request(dir: PathBuf) -> Self {
        CheckpointOptions {
            dir,
            every: None,
            resume: None,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// A flag that SIGTERM or SIGUSR1 sets, as Slurm sends before a job's time limit
/// (`--signal`) or on preemption: the run then checkpoints at the next barrier and stops. A
/// second signal ends the process at once.
pub fn stop_on_signals() -> Result<Arc<AtomicBool>, CheckpointError> {
    use signal_hook::consts::{SIGTERM, SIGUSR1};
    let flag = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGUSR1])
        .map_err(CheckpointError::Signals)?;
    let set = Arc::clone(&flag);
    std::thread::Builder::new()
        .name("fleetsim-signals".into())
        .spawn(move || {
            for (received, signal) in signals.forever().enumerate() {
                let name = if signal == SIGTERM { "SIGTERM" } else { "SIGUSR1" };
                if received > 0 {
                    eprintln!("fleetsim: {name} again; exiting without a checkpoint");
                    std::process::exit(143);
                }
                tracing::info!(signal = name, "checkpointing at the next window barrier, then stopping");
                eprintln!(
                    "fleetsim: {name}: checkpointing at the next window barrier, then stopping (send it again to exit at once)"
                );
                set.store(true, Ordering::Relaxed);
            }
        })
        .map_err(CheckpointError::SignalThread)?;
    Ok(flag)
}

/// The state a checkpoint holds: everything before window `window`, which starts at `time`.
/// The manifest keeps the picosecond keys `time_ps` and `width_ps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub window: u64,
    #[serde(rename = "time_ps")]
    pub time: SimTime,
    /// Events processed before it.
    pub events: u64,
    /// How wide the coordinator granted window `window`, so that a resumed run goes on
    /// with the same windows; zero (checkpoints written before it was kept) means a
    /// lookahead.
    #[serde(default, rename = "width_ps")]
    pub width: SimTime,
}

/// `checkpoint.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub experiment: String,
    /// [`fingerprint`] of the model the checkpoint belongs to.
    pub fingerprint: String,
    #[serde(flatten)]
    pub mark: Mark,
    pub workers: u32,
    /// Part files, relative to the checkpoint directory, and their sizes.
    pub parts: Vec<(String, u64)>,
}

/// A hash of everything the LPs' behaviour depends on: the experiment's settings (except how
/// the run is executed: partitioning, workers, threads) and the model built from them
/// (topology, programs, kernel times). A checkpoint resumes only into the same fingerprint.
pub fn fingerprint(exp: &Experiment, model: &SimModel) -> String {
    let mut config = exp.loaded.config.clone();
    config.engine.partition = sim_config::PartitionStrategy::Auto;
    config.engine.workers = 0;
    config.engine.threads = 0;
    let mut h = sim_ir::hash::Fnv64::default();
    h.write(format!("{config:?}").as_bytes());
    h.write(&(model.topology.nodes().len() as u64).to_le_bytes());
    h.write(&(model.topology.links().len() as u64).to_le_bytes());
    for p in &model.workload.programs {
        h.write(&(p.ops.len() as u64).to_le_bytes());
    }
    for table in &model.kernel_times {
        for t in table {
            h.write(&t.as_ps().to_le_bytes());
        }
    }
    format!("{:016x}", h.finish())
}

/// Makes the checkpoint `mark` complete once every worker wrote its part: writes the
/// manifest, then removes older window directories.
pub fn complete(
    dir: &Path,
    mark: Mark,
    workers: u32,
    experiment: &str,
    fingerprint: &str,
) -> Result<(), CheckpointError> {
    let window = window_dir(dir, mark.window);
    let name = window
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = Vec::new();
    for w in 0..workers {
        let file = part_file_name(w);
        let bytes = std::fs::metadata(window.join(&file))
            .map_err(|error| CheckpointError::PartNotShared {
                worker: w,
                part: window.join(&file).display().to_string(),
                error,
            })?
            .len();
        parts.push((format!("{name}/{file}"), bytes));
    }
    let manifest = Manifest {
        format: FORMAT,
        experiment: experiment.to_string(),
        fingerprint: fingerprint.to_string(),
        mark,
        workers,
        parts,
    };
    let text = serde_json::to_string_pretty(&manifest).map_err(CheckpointError::Encode)?;
    write_atomically(&dir.join(MANIFEST), |out| {
        std::io::Write::write_all(out, text.as_bytes())
    })
    .map_err(CheckpointError::Write)?;
    // Older checkpoints, and parts of workers a resumed run no longer has.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("window-") && n != name {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    for w in workers.. {
        let stale = window.join(part_file_name(w));
        if std::fs::remove_file(&stale).is_err() {
            break;
        }
    }
    Ok(())
}

/// A manifest's text (`manifest` names it in errors): JSON of this [`FORMAT`], whose parts
/// are files inside the checkpoint directory (relative paths without `..`), each named once.
/// serde_json builds nothing larger than the text it reads.
pub fn parse_manifest(text: &str, manifest: &str) -> Result<Manifest, CheckpointError> {
    let parsed: Manifest =
        serde_json::from_str(text).map_err(|error| CheckpointError::NotAManifest {
            manifest: manifest.to_string(),
            error,
        })?;
    if parsed.format != FORMAT {
        return Err(CheckpointError::Format {
            manifest: manifest.to_string(),
            format: parsed.format,
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for (part, _) in &parsed.parts {
        let inside = !part.is_empty()
            && Path::new(part)
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
            return Err(CheckpointError::PartOutside {
                manifest: manifest.to_string(),
                part: part.clone(),
            });
        }
        if !seen.insert(part.as_str()) {
            return Err(CheckpointError::PartTwice {
                manifest: manifest.to_string(),
                part: part.clone(),
            });
        }
    }
    Ok(parsed)
}

/// The complete checkpoint in `dir`, checked against the model it must resume, and the paths
/// of its parts.
pub fn load(dir: &Path, fingerprint: &str) -> Result<(Manifest, Vec<PathBuf>), CheckpointError> {
    let path = dir.join(MANIFEST);
    let manifest_name = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|error| CheckpointError::NoManifest {
        dir: dir.display().to_string(),
        manifest: manifest_name.clone(),
        error,
    })?;
    let manifest = parse_manifest(&text, &manifest_name)?;
    if manifest.fingerprint != fingerprint {
        return Err(CheckpointError::OtherModel {
            manifest: manifest_name,
            experiment: manifest.experiment,
            theirs: manifest.fingerprint,
            ours: fingerprint.to_string(),
        });
    }
    let mut files = Vec::new();
    for (part, bytes) in &manifest.parts {
        let file = dir.join(part);
        let size = std::fs::metadata(&file)
            .map_err(|error| CheckpointError::PartMissing {
                manifest: manifest_name.clone(),
                part: file.display().to_string(),
                error,
            })?
            .len();
        if size != *bytes {
            return Err(CheckpointError::PartDamaged {
                manifest: manifest_name,
                part: file.display().to_string(),
                size,
                expected: *bytes,
            });
        }
        files.push(file);
    }
    Ok((manifest, files))
}

/// A run's checkpointing, ready to start: the schedule for the window driver (which holds
/// the checkpoint resumed from), where workers write their parts, the parts to resume from,
/// and the model's [`fingerprint`].
#[derive(Debug)]
pub struct Prepared {
    pub schedule: Schedule,
    pub dir: PathBuf,
    pub resume_parts: Option<Vec<PathBuf>>,
    pub fingerprint: String,
}

/// Sets up checkpointing for a run of `model` on `workers` workers: creates the checkpoint
/// directory when checkpoints are scheduled and, when resuming, checks the checkpoint belongs to this model.
pub fn prepare(
    exp: &Experiment,
    model: &SimModel,
    options: &CheckpointOptions,
    workers: u32,
) -> Result<Prepared, CheckpointError> {
    let fingerprint = fingerprint(exp, model);
    let (resumed, resume_parts) = match &options.resume {
        Some(dir) => {
            let (manifest, files) = load(dir, &fingerprint)?;
            (Some(manifest.mark), Some(files))
        }
        None => (None, None),
    };
    // Only when checkpoints are scheduled: a run that may only be stopped by a signal makes
    // it when it writes one (each worker creates its window's folder).
    if options.every.is_some() {
        std::fs::create_dir_all(&options.dir).map_err(|error| CheckpointError::CreateDir {
            dir: options.dir.display().to_string(),
            error,
        })?;
    }
    let dir = std::path::absolute(&options.dir).unwrap_or_else(|_| options.dir.clone());
    let (at, name, print) = (
        dir.clone(),
        exp.loaded.config.name.clone(),
        fingerprint.clone(),
    );
    let schedule = Schedule::new(
        options.every,
        Arc::clone(&options.stop),
        resumed,
        Box::new(move |mark| complete(&at, mark, workers, &name, &print)),
    );
    Ok(Prepared {
        schedule,
        dir,
        resume_parts,
        fingerprint,
    })
}

/// When the next checkpoint is due, and the one being written.
pub struct Schedule {
    every: Option<CheckpointEvery>,
    stop: Arc<AtomicBool>,
    last_time: SimTime,
    last_wall: Instant,
    /// Asked for in the last grant: complete once every worker reports its part.
    pending: Option<(Mark, bool)>,
    /// Writes the manifest of a checkpoint every worker has written its part of.
    on_complete: Box<dyn FnMut(Mark) -> Result<(), CheckpointError> + Send>,
    /// The last complete checkpoint (resumed from, or written).
    pub last: Option<Mark>,
}

/// What a round of reports means for checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Go on; `checkpoint`: ask for one before the next window, and stop after it if `stop`.
    Go { checkpoint: bool, stop: bool },
    /// A stop checkpoint is complete: the run ends here.
    Stopped(Mark),
}

impl Schedule {
    pub fn new(
        every: Option<CheckpointEvery>,
        stop: Arc<AtomicBool>,
        resumed: Option<Mark>,
        on_complete: Box<dyn FnMut(Mark) -> Result<(), CheckpointError> + Send>,
    ) -> Self {
        Schedule {
            every,
            stop,
            last_time: resumed.map_or(SimTime::ZERO, |m| m.time),
            last_wall: Instant::now(),
            pending: None,
            on_complete,
            last: resumed,
        }
    }

    /// When the next checkpoint is due in simulated time, if they are taken that way.
    pub fn next_due(&self) -> Option<SimTime> {
        match self.every {
            Some(CheckpointEvery::Simulated(every)) => Some(self.last_time.saturating_add(every)),
            _ => None,
        }
    }

    /// Every worker reported (`written`: the window each last wrote a part before; `asked`:
    /// whether any worker's process was asked to stop). `next` is the window about to be
    /// granted, if the run goes on.
    pub fn step(
        &mut self,
        written: impl Iterator<Item = u64>,
        asked: bool,
        next: Option<Mark>,
    ) -> Result<Step, CheckpointError> {
        if let Some((mark, stop)) = self.pending.take() {
            if let Some(w) = written.into_iter().find(|&w| w != mark.window) {
                return Err(CheckpointError::OutOfStep {
                    reported: w,
                    expected: mark.window,
                });
            }
            (self.on_complete)(mark)?;
            self.last = Some(mark);
            if stop {
                return Ok(Step::Stopped(mark));
            }
        }
        let Some(next) = next else {
            return Ok(Step::Go {
                checkpoint: false,
                stop: false,
            });
        };
        let stop = asked || self.stop.load(Ordering::Relaxed);
        let due = match self.every {
            Some(CheckpointEvery::Simulated(every)) => {
                next.time >= self.last_time.saturating_add(every)
            }
            Some(CheckpointEvery::Wall(every)) => self.last_wall.elapsed() >= every,
            None => false,
        };
        if stop || due {
            self.pending = Some((next, stop));
            self.last_time = next.time;
            self.last_wall = Instant::now();
        }
        Ok(Step::Go {
            checkpoint: stop || due,
            stop,
        })
    }
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("every", &self.every)
            .field("pending", &self.pending)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_units() {
        assert_eq!(
            "2ms".parse::<CheckpointEvery>(),
            Ok(CheckpointEvery::Simulated(SimTime::from_ps(2_000_000_000)))
        );
        assert_eq!(
            "500us".parse::<CheckpointEvery>(),
            Ok(CheckpointEvery::Simulated(SimTime::from_ps(500_000_000)))
        );
        assert_eq!(
            "wall:15m".parse::<CheckpointEvery>(),
            Ok(CheckpointEvery::Wall(Duration::from_secs(900)))
        );
        assert_eq!(
            "wall:1h 30m".parse::<CheckpointEvery>(),
            Ok(CheckpointEvery::Wall(Duration::from_secs(5400)))
        );
        for bad in [
            "",
            "5",
            "ms",
            "-1ms",
            "0s",
            "wall:0s",
            "wall:5 parsecs",
            "5 parsecs",
        ] {
            let e = bad.parse::<CheckpointEvery>().expect_err(bad).to_string();
            assert!(e.contains("wall:"), "{bad}: {e}");
        }
    }

    fn mark(window: u64, time_ps: u64) -> Mark {
        Mark {
            window,
            time: SimTime::from_ps(time_ps),
            events: 0,
            width: SimTime::ZERO,
        }
    }

    #[test]
    fn a_checkpoint_completes_only_when_every_worker_wrote_its_part() {
        let completed = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&completed);
        let mut s = Schedule::new(
            Some(CheckpointEvery::Simulated(SimTime::from_ps(1000))),
            Arc::new(AtomicBool::new(false)),
            None,
            Box::new(move |m| {
                seen.lock().expect("lock").push(m.window);
                Ok(())
            }),
        );
        let go = |checkpoint| Step::Go {
            checkpoint,
            stop: false,
        };
        assert_eq!(
            s.step([0, 0].into_iter(), false, Some(mark(1, 500))).ok(),
            Some(go(false))
        );
        assert_eq!(
            s.step([0, 0].into_iter(), false, Some(mark(2, 1000))).ok(),
            Some(go(true))
        );
        assert_eq!(
            s.step([2, 2].into_iter(), false, Some(mark(3, 1100))).ok(),
            Some(go(false))
        );
        assert_eq!(*completed.lock().expect("lock"), vec![2]);
        assert_eq!(s.last, Some(mark(2, 1000)));
        assert_eq!(
            s.step([2, 2].into_iter(), false, Some(mark(4, 2100))).ok(),
            Some(go(true))
        );
        let late = s.step([4, 2].into_iter(), false, Some(mark(5, 2200)));
        assert!(late.is_err(), "{late:?}");
        assert_eq!(*completed.lock().expect("lock"), vec![2]);
    }

    #[test]
    fn a_stop_request_checkpoints_then_stops() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = Schedule::new(None, Arc::clone(&stop), None, Box::new(|_| Ok(())));
        let go = Step::Go {
            checkpoint: false,
            stop: false,
        };
        assert_eq!(
            s.step([0].into_iter(), false, Some(mark(1, 5))).ok(),
            Some(go)
        );
        stop.store(true, Ordering::Relaxed);
        assert_eq!(
            s.step([0].into_iter(), false, Some(mark(2, 9))).ok(),
            Some(Step::Go {
                checkpoint: true,
                stop: true
            })
        );
        assert_eq!(
            s.step([2].into_iter(), false, Some(mark(3, 9))).ok(),
            Some(Step::Stopped(mark(2, 9)))
        );
    }

    fn manifest_text(parts: &str) -> String {
        format!(
            r#"{{"format": {FORMAT}, "experiment": "x", "fingerprint": "0", "window": 1, "time_ps": 1, "events": 1, "workers": 1, "parts": {parts}}}"#
        )
    }

    #[test]
    fn a_manifest_names_parts_inside_its_directory_once() {
        let ok = parse_manifest(
            &manifest_text(r#"[["window-000000000001/worker-0.lps", 8]]"#),
            "m",
        )
        .expect("a manifest");
        assert_eq!(ok.parts.len(), 1);
        for part in ["../../etc/passwd", "/etc/passwd", "", "window-1/../x"] {
            let text = manifest_text(&format!(r#"[["{part}", 8]]"#));
            let e = parse_manifest(&text, "m").expect_err(part);
            assert!(
                matches!(e, CheckpointError::PartOutside { .. }),
                "{part}: {e}"
            );
            assert!(
                e.to_string()
                    .contains("is not a file inside the checkpoint directory")
            );
        }
        let e = parse_manifest(&manifest_text(r#"[["a.lps", 8], ["a.lps", 8]]"#), "m")
            .expect_err("twice");
        assert_eq!(
            e.to_string(),
            "m: part `a.lps` is named twice; the checkpoint is damaged"
        );
        assert!(matches!(
            parse_manifest("{", "m"),
            Err(CheckpointError::NotAManifest { .. })
        ));
    }

    /// The manifests among the fuzz target `checkpoint`'s regression inputs
    /// (tests/fixtures/fuzz-regressions/checkpoint/) read as an error or a manifest, without a
    /// panic; at least one of them is one.
    #[test]
    fn fuzz_regressions_read_without_a_panic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/fuzz-regressions/checkpoint");
        let mut texts = 0;
        for entry in std::fs::read_dir(&dir).expect("the regressions folder") {
            let bytes = std::fs::read(entry.expect("an entry").path()).expect("an input");
            if let Ok(text) = std::str::from_utf8(&bytes) {
                let _ = parse_manifest(text, "checkpoint.json");
                texts += 1;
            }
        }
        assert!(texts > 0, "no manifest among {}", dir.display());
    }
}
