//! `fleetsim run`: build the experiment, partition it, simulate it embedded, summarise.

use std::sync::Arc;

use sim::experiment::Experiment;
use sim_config::Overrides;
use sim_engine::{RunResults, SimModel};
use sim_ir::time::SimTime;

use crate::checkpoint::{self, CheckpointOptions, Mark};
use crate::embedded::{self, ProgressHook};
pub use crate::outcome::{EngineInfo, RunError, RunOutput, peak_rss_bytes};
use crate::output::report::summarize_run;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// In-process workers; `None`: `engine.workers`.
    pub workers: Option<u32>,
    /// Threads per worker; `None`: `engine.threads` (0 = the cores other processes leave
    /// idle, shared among the in-process workers).
    pub threads: Option<usize>,
    pub trace: bool,
    /// Checkpoints to take, or to resume from; `None`: neither.
    pub checkpoints: Option<CheckpointOptions>,
}

impl RunOptions {
    /// In-process workers for `exp`: the option, else `engine.workers`; at least 1.
    pub fn workers(&self, exp: &Experiment) -> u32 {
        self.workers
            .unwrap_or(exp.loaded.config.engine.workers)
            .max(1)
    }

    /// Threads per in-process worker: the option, else `engine.threads`; 0 takes the cores
    /// other processes leave idle, shared among the workers, or one where that pays
    /// ([`one_thread_group`]). At least 1.
    pub fn threads(&self, exp: &Experiment) -> usize {
        match self.threads_asked(exp) {
            0 if one_thread_group(exp).is_some() => 1,
            0 => self.idle_threads(exp),
            n => n,
        }
    }

    /// The option, else `engine.threads`: 0 where the run chooses.
    fn threads_asked(&self, exp: &Experiment) -> usize {
        self.threads
            .unwrap_or(exp.loaded.config.engine.threads as usize)
    }

    /// Each in-process worker's share of the idle cores, at least 1. In-process workers
    /// share the machine: each taking every core would put several threads on each core, and
    /// each window would wait for a time slice (quickstart, two workers on two cores: 1.9-41 s
    /// with two threads each, 1.3 s with one).
    fn idle_threads(&self, exp: &Experiment) -> usize {
        (idle_cores() / self.workers(exp) as usize).max(1)
    }

    /// Why the run takes one thread where it could take more, when [`one_thread_group`]
    /// decided it: a line for the user.
    pub fn one_thread_note(&self, exp: &Experiment) -> Option<String> {
        if self.threads_asked(exp) != 0 || self.idle_threads(exp) < 2 {
            return None;
        }
        let kind = one_thread_group(exp)?;
        Some(format!(
            "one thread per worker: the {} groups span hosts, so partitions of hosts meet every layer and more threads only wait for each other on the analytical network (--threads N to override)",
            kind.name()
        ))
    }

    /// What a user should hear before a run whose placement will be slow for no gain: more
    /// workers than GPUs, or more threads in all than the machine has cores (each window's
    /// barrier then waits for the scheduler: quickstart on 2 cores takes 1.1 s on one
    /// worker and 108 s on 300).
    pub fn placement_warnings(&self, exp: &Experiment) -> Vec<String> {
        let (workers, threads) = (self.workers(exp), self.threads(exp));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let gpus = exp.loaded.config.cluster.gpus;
        let mut warnings = Vec::new();
        if workers > gpus {
            warnings.push(format!(
                "{workers} workers for {gpus} GPUs: the extra workers have nothing to simulate"
            ));
        }
        if embedded::oversubscribed(workers, threads) {
            warnings.push(format!(
                "{workers} worker(s) x {threads} thread(s) on {cores} core(s): every window waits for the scheduler and the run is slower, not faster; keep workers x threads within {cores} (--workers, --threads)"
            ));
        }
        warnings
    }

    /// How the run's workers place partitions on threads and how many threads each has.
    pub fn placement(&self, exp: &Experiment) -> Placement {
        let workers = self.workers(exp);
        let threads = self.threads(exp);
        let closed_form = closed_form_network(exp);
        Placement {
            workers,
            threads,
            scheduling: worker::Scheduling::for_run(
                exp.loaded.config.engine.scheduling,
                worker::RunShape {
                    workers,
                    threads,
                    oversubscribed: embedded::oversubscribed(workers, threads),
                    closed_form,
                },
            ),
            closed_form,
        }
    }
}

/// Workers, threads per worker and their scheduling, settled once for a run: the partition
/// count follows from them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    pub workers: u32,
    /// Threads per worker; 0 where each worker decides (a distributed run).
    pub threads: usize,
    pub scheduling: worker::Scheduling,
    /// `network.model = "analytical"`: every collective completes in closed form.
    pub closed_form: bool,
}

/// The group kind for which one thread runs `exp` faster than several, whatever the cores:
/// on the analytical network, a kind whose collectives run inside every layer and cross
/// hosts (an expert-parallel all-to-all over several hosts, a tensor- or context-parallel
/// group wider than a host). Partitions are made of whole hosts or blocks of them, so they
/// meet every layer or every pipeline send, and two threads mostly spend more on meeting
/// than they gain (docs/engine.md, "One thread where layers cross hosts": DeepSeek-V3 on
/// 1,024 H100 10.3 s on one thread, 11.7 s on two in blocks; Llama 3.1 405B with CP 2 on
/// 128 GB200 0.64 s and 0.87 s; only a 4-stage DeepSeek-V3 on 512 GB200 ran faster on two,
/// 3.2 s against 4.7 s). Packet and flow runs keep their threads: their fabric LPs are work
/// to share.
pub fn one_thread_group(exp: &Experiment) -> Option<sim_ir::layout::GroupKind> {
    if !closed_form_network(exp) || !exp.jobs.is_empty() {
        return None;
    }
    exp.layer_group_across_hosts()
}

/// Whether every collective of `exp` completes in closed form (`network.model =
/// "analytical"`), so that the model's promises reach far past a lookahead.
pub fn closed_form_network(exp: &Experiment) -> bool {
    exp.loaded.config.network.model == sim_config::NetworkModel::Analytical
}

impl Placement {
    /// A lone worker whose threads run barrier windows over a closed-form network: its
    /// windows end at the model's promises, hundreds of lookaheads apart.
    pub fn lone_promise_windows(&self) -> bool {
        self.closed_form
            && self.workers <= 1
            && self.threads > 1
            && self.scheduling == worker::Scheduling::LoadAdaptive
    }

    /// Workers on other machines, each choosing its threads: scheduling as a lone worker
    /// chooses it, on cores of its own.
    pub fn remote(exp: &Experiment, workers: u32) -> Placement {
        let closed_form = closed_form_network(exp);
        Placement {
            workers,
            threads: 0,
            scheduling: worker::Scheduling::for_run(
                exp.loaded.config.engine.scheduling,
                worker::RunShape {
                    workers,
                    threads: 0,
                    oversubscribed: false,
                    closed_form,
                },
            ),
            closed_form,
        }
    }

    /// The most partitions the strategy's natural count is cut down to: one per thread
    /// where more buy no balance (see [`MAX_PARTITIONS_PER_WORKER`]).
    fn partitions_cap(&self) -> u32 {
        let lone_asynchronous =
            self.scheduling == worker::Scheduling::Asynchronous && self.workers <= 1;
        if self.lone_promise_windows() {
            PARTITIONS_PER_THREAD_FROM_PROMISES * self.threads as u32
        } else if self.threads == 1 || (lone_asynchronous && self.threads > 0) {
            self.threads as u32 * self.workers.max(1)
        } else {
            MAX_PARTITIONS_PER_WORKER * self.workers.max(1)
        }
    }
}

impl RunOutput {
    /// A finished run, embedded or distributed: its iteration time and summary, computed once.
    pub fn new(
        exp: &Experiment,
        model: SimModel,
        results: RunResults,
        engine: &EngineInfo,
    ) -> Result<RunOutput, RunError> {
        let iteration_ps = results.iteration_ps()?;
        model.faults.check_run(iteration_ps)?;
        let summary = summarize_run(exp, &model, &results, engine, iteration_ps);
        Ok(RunOutput {
            model,
            results,
            iteration_ps,
            summary,
        })
    }
}

/// Loads an experiment and builds its topology once, so that a batch of runs (a sweep, a
/// validation table) stops at a bad one before the first starts.
pub fn load_checked(path: &std::path::Path, overrides: &Overrides) -> Result<Experiment, RunError> {
    let exp = Experiment::load(path, overrides)?;
    exp.build_topology()?;
    Ok(exp)
}

/// Simulates one iteration of `exp` embedded. `progress` sees (simulated ps, events) after
/// every window.
pub fn run_embedded(
    exp: &Experiment,
    options: &RunOptions,
    progress: Option<ProgressHook>,
) -> Result<RunOutput, RunError> {
    let started = std::time::Instant::now();
    let model = SimModel::from_experiment(exp, options.trace)?;
    tracing::info!(
        experiment = exp.name(),
        gpus = exp.loaded.config.cluster.gpus,
        nodes = model.topology.nodes().len(),
        links = model.topology.link_count(),
        network = exp.loaded.config.network.model.name(),
        seconds = started.elapsed().as_secs_f64(),
        "model built"
    );
    let placement = options.placement(exp);
    let started = std::time::Instant::now();
    let partition = partition(exp, &model, placement)?;
    tracing::info!(
        strategy = %partition.strategy,
        partitions = partition.weights.len(),
        workers = placement.workers,
        threads = placement.threads,
        scheduling = placement.scheduling.name(),
        lookahead_ps = partition.lookahead.map(SimTime::as_ps),
        seconds = started.elapsed().as_secs_f64(),
        "partitioned"
    );
    let (model, results, engine) = simulate(exp, model, &partition, options, progress)?;
    let output = RunOutput::new(exp, model, results, &engine)?;
    let summary = &output.summary;
    tracing::info!(
        events = summary.engine.events,
        windows = summary.engine.windows,
        wall_s = summary.engine.wall_s,
        iteration_s = summary.iteration_time_s,
        digest = %summary.result_digest,
        "simulated"
    );
    Ok(output)
}

/// With `[[jobs]]`: runs each job alone on its hosts (the cluster otherwise idle, embedded,
/// with `options`' workers and threads) and writes its alone iteration and slowdown into
/// `output`'s summary. Nothing to do for one job.
pub fn run_jobs_alone(
    exp: &Experiment,
    options: &RunOptions,
    output: &mut RunOutput,
) -> Result<(), RunError> {
    let Some(jobs) = output.summary.jobs.as_mut() else {
        return Ok(());
    };
    let alone_options = RunOptions {
        trace: false,
        checkpoints: None,
        ..options.clone()
    };
    for (j, job) in jobs.iter_mut().enumerate() {
        let alone = run_embedded(&exp.only_job(j), &alone_options, None)?;
        // The job's own iteration, from its start (`start_s`), not the run's end.
        let alone_s = alone
            .summary
            .jobs
            .as_ref()
            .and_then(|jobs| jobs.first())
            .map_or(alone.summary.iteration_time_s, |only| only.iteration_time_s);
        tracing::info!(job = %job.name, shared_s = job.iteration_time_s, alone_s, "job alone");
        job.alone_iteration_time_s = Some(alone_s);
        job.slowdown = (alone_s > 0.0).then(|| job.iteration_time_s / alone_s);
    }
    Ok(())
}

/// How a model's LPs are split: the experiment's `[engine]` partition strategy and the
/// lookahead it allows. Depends on the topology only.
#[derive(Debug, Clone)]
pub struct Partition {
    /// The strategy that cut it: `engine.partition`, with `auto` taken as `round-robin` for a
    /// lone worker's windows from promises ([`PARTITIONS_PER_THREAD_FROM_PROMISES`]).
    pub strategy: sim_config::PartitionStrategy,
    /// The workers, threads and scheduling it was cut for.
    pub placement: Placement,
    pub partition_of: Vec<u32>,
    pub lookahead: Option<SimTime>,
    /// Expected events of each partition (from the workload), to balance workers by.
    pub weights: Vec<f64>,
    /// What the run should say about its placement (workers capped at the partitions).
    pub warnings: Vec<String>,
}

/// Most partitions per worker when `engine.partitions = 0` leaves the count to the strategy,
/// for window-by-window scheduling (load-adaptive, static): its threads balance partitions
/// between windows, but a window visits every partition that has events, so past a few
/// hundred per worker the per-partition cost of a window outweighs the balance they buy: on
/// llama3-405b-h100-131072 one thread simulated 1.5x more per second with 256 partitions than
/// with by-host's natural 25,600 (and 1,024 was already 1.3x slower than 256).
/// Asynchronous scheduling gives each thread its partitions for good, and a worker on one
/// thread runs its partitions one after another, so there more partitions than threads buy
/// no balance, only cost: the count is one per thread. (gpt3-175b-h100-1024 with global
/// batch 128 on four one-thread workers: 30.1 s with metis's 48 partitions, 22.3 s with 4,
/// and 45 M events across partitions instead of 0.36 M.)
pub const MAX_PARTITIONS_PER_WORKER: u32 = 256;

/// Partitions per thread of a lone worker running windows from promises
/// ([`Placement::lone_promise_windows`]), dealt host by host in turn (`round-robin`) where
/// `engine.partition = "auto"`: every partition then holds a like share of every stage and
/// replica, so each window's events split evenly, and a thread can take another partition
/// when one runs long. Two threads, analytical, wall time by partitions (4 / 8 / 16 / 32):
/// Llama 3 405B at 8,192 GPUs 6.08 / 5.29-5.57 / 4.69-5.33 / 5.13 s; gpt3-175b-h100-1024
/// 3.16-3.20 s at 8, 3.07-3.08 at 16 and 11.13 at 32 (745,452 windows: four hosts a
/// partition cut its pipelines); at 131,072 GPUs 2 min 44 s at 8 and 2 min 27 s at 16, run
/// back to back. The load-adaptive default before (METIS at 256 partitions) took 14-15 s at
/// 8,192 GPUs, and 8 METIS partitions at 131,072 GPUs ran 10 of 13 simulated seconds in 6.5
/// minutes (docs/engine.md, "Windows from promises on one worker").
pub const PARTITIONS_PER_THREAD_FROM_PROMISES: u32 = 8;

/// Partitions `model`'s topology as the experiment's `[engine]` says, for `placement`'s
/// workers and threads.
pub fn partition(
    exp: &Experiment,
    model: &SimModel,
    placement: Placement,
) -> Result<Partition, RunError> {
    let engine_cfg = &exp.loaded.config.engine;
    let load =
        partitioner::Load::estimate(&model.topology, &model.workload, &model.net.segmenting());
    // Windows from promises deal hosts in turn, in blocks that keep the collectives inside
    // every layer within a partition where those groups span hosts.
    let (strategy, hosts_per_block) = match engine_cfg.partition {
        sim_config::PartitionStrategy::Auto if placement.lone_promise_windows() => (
            sim_config::PartitionStrategy::RoundRobin,
            exp.layer_block_hosts().unwrap_or(1),
        ),
        s => (s, 1),
    };
    let split = |parts| {
        partitioner::partition_in_blocks(
            &model.topology,
            strategy.name(),
            parts,
            &load,
            engine_cfg.seed,
            hosts_per_block,
        )
        .map_err(|e| RunError::Partition(exp.loaded.error("engine.partition", e.to_string())))
    };
    let mut assignment = split(engine_cfg.partitions)?;
    let cap = placement.partitions_cap();
    if engine_cfg.partitions == 0 && assignment.partitions > cap {
        assignment = split(cap)?;
    }
    // More workers than the strategy's natural count: cut finer if it can. Those it
    // cannot give one partition each are refused before anything is set up per worker
    // (ten thousand workers for a model of a few partitions took 4.9 GB doing nothing).
    if engine_cfg.partitions == 0 && placement.workers > assignment.partitions {
        assignment = split(placement.workers)?;
    }
    let mut placement = placement;
    let mut warnings = Vec::new();
    if placement.workers > assignment.partitions {
        // Remote workers are processes already started: refused. In-process workers are
        // capped, by the model alone, never the machine's load.
        if placement.threads == 0 {
            return Err(RunError::TooManyWorkers {
                workers: placement.workers,
                partitions: assignment.partitions,
                strategy,
            });
        }
        warnings.push(format!(
            "{} workers asked for, but engine.partition = \"{}\" cuts this experiment into {} partition(s) (hosts are never cut): it ran on {} worker(s)",
            placement.workers, engine_cfg.partition, assignment.partitions, assignment.partitions
        ));
        placement.workers = assignment.partitions;
    }
    let weights = load.events_by(&assignment.partition_of, assignment.partitions);
    let lookahead = model.lookahead(partitioner::lookahead(&model.topology, &assignment));
    if lookahead == Some(SimTime::ZERO) {
        // A zero lookahead leaves conservative synchronisation no safe window at all.
        let cut = model
            .topology
            .links()
            .find(|l| {
                l.latency == SimTime::ZERO
                    && assignment.partition_of[l.src as usize]
                        != assignment.partition_of[l.dst as usize]
            })
            .map_or("network", |l| l.class.name());
        return Err(RunError::Partition(exp.loaded.error(
            &format!("cluster.latency_ns.{cut}"),
            format!(
                "a {cut} link between two partitions has zero latency, so no event across it can wait for the next window; give {cut} links a latency of at least 0.001 ns (1 ps)"
            ),
        )));
    }
    Ok(Partition {
        strategy,
        placement,
        lookahead,
        partition_of: assignment.partition_of,
        weights,
        warnings,
    })
}

/// Runs `model` embedded on `partition` (from [`partition`] on the same topology).
pub fn simulate(
    exp: &Experiment,
    model: SimModel,
    partition: &Partition,
    options: &RunOptions,
    progress: Option<ProgressHook>,
) -> Result<(SimModel, RunResults, EngineInfo), RunError> {
    let Placement {
        workers,
        threads,
        scheduling,
        ..
    } = partition.placement;
    let checkpoints = match &options.checkpoints {
        Some(c) => Some(checkpoint::prepare(exp, &model, c, workers)?),
        None => None,
    };
    let dir = checkpoints.as_ref().map(|c| c.dir.display().to_string());
    let model = Arc::new(model);
    let (results, stats) = embedded::run(
        Arc::clone(&model),
        partition.partition_of.clone(),
        partition.lookahead,
        embedded::Split {
            workers,
            threads,
            scheduling,
            partition_weights: partition.weights.clone(),
            promises: exp.loaded.config.engine.promises,
        },
        progress,
        checkpoints,
    )
    .map_err(|e| match e {
        worker::EngineError::Stopped { window, time } => RunError::Stopped {
            mark: Mark {
                window,
                time,
                events: 0,
                width: SimTime::ZERO,
            },
            dir: dir.clone().unwrap_or_default(),
        },
        other => RunError::Engine(other),
    })?;
    let model = Arc::try_unwrap(model).map_err(|_| RunError::ModelStillShared)?;
    let engine = EngineInfo {
        mode: "embedded",
        warnings: partition.warnings.clone(),
        strategy: partition.strategy,
        stats,
        peak_rss_bytes: peak_rss_bytes(),
    };
    Ok((model, results, engine))
}

/// Cores not busy with other work right now: the machine's cores less the runnable threads
/// of other processes (Linux `procs_running` in `/proc/stat` less this process's own
/// runnable threads, such as a thread pool still spinning), at least 1.
/// The window barrier needs every thread on a core at once; on a shared machine one
/// thread too many makes each window wait for a scheduler time slice (quickstart beside two
/// busy processes: 37 s on 2 threads, 1.1 s on 1).
/// The count is the least of ten samples 1 ms apart, so that short-lived processes (the
/// shell's pipeline starting beside us) do not count.
pub fn idle_cores() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let running = || {
        std::fs::read_to_string("/proc/stat").ok().and_then(|stat| {
            stat.lines()
                .find_map(|l| l.strip_prefix("procs_running "))
                .and_then(|n| n.trim().parse::<usize>().ok())
        })
    };
    let own = || {
        std::fs::read_dir("/proc/self/task").map_or(1, |tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| {
                        // The state follows the command name, which is in parentheses.
                        stat.rsplit_once(") ")
                            .is_some_and(|(_, rest)| rest.starts_with('R'))
                    })
                })
                .count()
                .max(1)
        })
    };
    let mut others = usize::MAX;
    for _ in 0..10 {
        match running() {
            Some(n) => others = others.min(n.saturating_sub(own())),
            None => return cores,
        }
        if others == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    cores.saturating_sub(others).max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn idle_cores_is_between_one_and_the_machines_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let idle = super::idle_cores();
        assert!((1..=cores).contains(&idle), "{idle} of {cores}");
    }
}
