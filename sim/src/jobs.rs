//! Several training jobs on one cluster (`[[jobs]]`, docs/jobs.md).
//!
//! Each job gets whole hosts, as Slurm's exclusive allocations give them: a list of host
//! indices, a Slurm host list (`host[0-15]`), or a placement policy over the hosts no
//! earlier job took (packed, spread, random with a seed). A job is an experiment of its
//! own (its `[model]`, `[parallel]` and `[training]`, the cluster's other sections) on as
//! many GPUs as its hosts hold, validated and compiled like a one-job experiment.
//!
//! In the simulation a rank is a GPU's global index, whichever job runs it: [`JobSet`]
//! (beside the workload it describes, in [`crate::workload`]) maps
//! a GPU to its job and its rank within the job, so that groups, programs and the reports
//! read through it and the topology needs no renumbering. GPUs no job holds stay idle (no
//! GPU LP), as GPUs beyond a one-job experiment's world do.

use std::collections::BTreeSet;

use crate::config::Origin;
use crate::config::{self, ConfigError, JobHosts, LoadedConfig, Placement};
use crate::config::{Located, Value};
use crate::experiment::{Experiment, Job};
use crate::hash::splitmix64;
use crate::hostlist::{self, HostListError};
use crate::time::SimTime;
use crate::workload::{JobSet, NO_JOB, PlacedJob, Program, Workload};

/// Reads `[[jobs]]`: places every job's hosts and validates its experiment. Empty when the
/// experiment has no `[[jobs]]`.
pub fn from_loaded(loaded: &LoadedConfig) -> Result<Vec<Job>, ConfigError> {
    let cfg = &loaded.config;
    if cfg.jobs.is_empty() {
        return Ok(Vec::new());
    }
    let err = |key: &str, msg: String| loaded.error(key, msg);
    if cfg.workload_file.is_some() {
        return Err(err(
            "workload_file",
            "cannot be used with [[jobs]]: each job compiles its own model; remove workload_file or the [[jobs]] entries".into(),
        ));
    }
    if cfg.cluster.topology == config::TopologyKind::Graph {
        return Err(err(
            "cluster.topology",
            "[[jobs]] places jobs on the hosts of a generated topology; a graph file's hosts are not numbered for placement (use rail-optimized, fat-tree or spine-leaf)".into(),
        ));
    }
    let gph = cfg.cluster.gpus_per_host.max(1);
    let host_count = cfg.cluster.gpus / gph;
    let placed = place(loaded, host_count, gph)?;
    cfg.jobs
        .iter()
        .zip(placed)
        .enumerate()
        .map(|(i, (job, (hosts, placement)))| {
            let start_s = job.start_s.unwrap_or(0.0);
            if !start_s.is_finite() || !(0.0..=3600.0).contains(&start_s) {
                return Err(loaded.error(
                    &format!("jobs[{i}].start_s"),
                    format!(
                        "{start_s} is not a start time; give simulated seconds from 0 (the run's start) to 3600"
                    ),
                ));
            }
            let exp = job_experiment(loaded, i, &hosts, gph)?;
            Ok(Job {
                name: job.name.clone(),
                exp: Box::new(exp),
                hosts,
                placement,
                start: SimTime::from_secs_f64(start_s),
            })
        })
        .collect()
}

/// The hosts of every job, in `[[jobs]]` order, with how they were chosen. Jobs that name
/// their hosts are placed first; the policies then share out what is left, job by job.
fn place(
    loaded: &LoadedConfig,
    host_count: u32,
    gph: u32,
) -> Result<Vec<(Vec<u32>, String)>, ConfigError> {
    let jobs = &loaded.config.jobs;
    let key = |i: usize, k: &str| format!("jobs[{i}].{k}");
    let mut names = BTreeSet::new();
    let mut taken: Vec<Option<usize>> = vec![None; host_count as usize];
    let mut placed: Vec<Option<(Vec<u32>, String)>> = vec![None; jobs.len()];
    for (i, job) in jobs.iter().enumerate() {
        if job.name.trim().is_empty() {
            return Err(loaded.error(&key(i, "name"), "must not be empty"));
        }
        if !names.insert(job.name.as_str()) {
            return Err(loaded.error(
                &key(i, "name"),
                format!("`{}` names two jobs; give every job its own name", job.name),
            ));
        }
        if job.seed.is_some() && job.placement != Some(Placement::Random) {
            let fix = if job.hosts.is_some() {
                "remove seed: the job names its hosts"
            } else {
                "remove seed or set placement = \"random\""
            };
            return Err(loaded.error(
                &key(i, "seed"),
                format!("only placement = \"random\" draws hosts from a seed; {fix}"),
            ));
        }
        let Some(written) = &job.hosts else {
            continue;
        };
        if job.gpus.is_some() || job.placement.is_some() {
            let which = if job.gpus.is_some() {
                "gpus"
            } else {
                "placement"
            };
            return Err(loaded.error(
                &key(i, which),
                "a job gives either hosts (the hosts it runs on) or gpus with a placement policy, not both; remove one",
            ));
        }
        let hosts = named_hosts(loaded, &key(i, "hosts"), written, host_count)?;
        for &h in &hosts {
            if let Some(other) = taken[h as usize] {
                return Err(loaded.error(
                    &key(i, "hosts"),
                    format!(
                        "host{h} is already job `{}`'s; a host runs one job (exclusive allocation)",
                        jobs[other].name
                    ),
                ));
            }
            taken[h as usize] = Some(i);
        }
        placed[i] = Some((hosts, "hosts".into()));
    }
    for (i, job) in jobs.iter().enumerate() {
        if placed[i].is_some() {
            continue;
        }
        let Some(gpus) = job.gpus else {
            return Err(loaded.error(
                &key(i, "gpus"),
                "missing: give the job's size (gpus = N, whole hosts) or its hosts (hosts = [0, 1] or hosts = \"host[0-1]\")",
            ));
        };
        if gpus == 0 || !gpus.is_multiple_of(gph) {
            return Err(loaded.error(
                &key(i, "gpus"),
                format!(
                    "{gpus} GPUs are not a positive number of whole hosts of cluster.gpus_per_host = {gph}; jobs get whole hosts"
                ),
            ));
        }
        let want = (gpus / gph) as usize;
        let free: Vec<u32> = (0..host_count)
            .filter(|&h| taken[h as usize].is_none())
            .collect();
        if want > free.len() {
            return Err(loaded.error(
                &key(i, "gpus"),
                format!(
                    "job `{}` needs {want} hosts but {} of the cluster's {host_count} are left after the jobs that name their hosts and the jobs before it; shrink the job or grow cluster.gpus",
                    job.name,
                    free.len()
                ),
            ));
        }
        let policy = job.placement.unwrap_or(Placement::Packed);
        let seed = job.seed.unwrap_or(loaded.config.engine.seed);
        let hosts = choose(policy, &free, want, seed);
        for &h in &hosts {
            taken[h as usize] = Some(i);
        }
        placed[i] = Some((hosts, policy.name().into()));
    }
    Ok(placed.into_iter().flatten().collect())
}

/// `want` of the `free` hosts (ascending) under `policy`, ascending.
pub fn choose(policy: Placement, free: &[u32], want: usize, seed: u64) -> Vec<u32> {
    let mut hosts: Vec<u32> = match policy {
        Placement::Packed => free[..want].to_vec(),
        // Evenly spaced: the i-th of `want` at floor(i · free / want).
        Placement::Spread => (0..want).map(|i| free[i * free.len() / want]).collect(),
        // A Fisher-Yates shuffle driven by SplitMix64, so every machine draws the same.
        Placement::Random => {
            let mut pool = free.to_vec();
            let mut state = seed;
            for i in 0..want {
                state = splitmix64(state);
                let j = i + (state % (pool.len() - i) as u64) as usize;
                pool.swap(i, j);
            }
            pool.truncate(want);
            pool
        }
    };
    hosts.sort_unstable();
    hosts
}

/// The hosts `hosts = [...]` or `hosts = "host[0-3]"` names, ascending, each once.
fn named_hosts(
    loaded: &LoadedConfig,
    key: &str,
    written: &JobHosts,
    host_count: u32,
) -> Result<Vec<u32>, ConfigError> {
    let indices: Vec<u32> = match written {
        JobHosts::Indices(list) => list.clone(),
        JobHosts::List(list) => {
            let last = host_count.saturating_sub(1);
            let names = hostlist::expand(
                list,
                u64::from(host_count),
                &format!("the cluster's {host_count} (host0 to host{last})"),
            )
            .map_err(|e| {
                let hint = match e {
                    HostListError::Syntax { .. } => {
                        "; write e.g. \"host[0-15,32-47]\" or a list of host indices".to_string()
                    }
                    HostListError::NameTooLong { .. } | HostListError::TooManyGroups { .. } => {
                        format!("; hosts are named host0 to host{last}")
                    }
                    HostListError::Reversed { .. } | HostListError::TooMany { .. } => String::new(),
                };
                loaded.error(key, format!("{e}{hint}"))
            })?;
            names
                .iter()
                .map(|name| {
                    name.strip_prefix("host")
                        .and_then(|n| n.parse::<u32>().ok())
                        .ok_or_else(|| {
                            loaded.error(
                                key,
                                format!(
                                    "`{name}` is not a host of the cluster; hosts are named host0 to host{}",
                                    host_count.saturating_sub(1)
                                ),
                            )
                        })
                })
                .collect::<Result<_, _>>()?
        }
    };
    if indices.is_empty() {
        return Err(loaded.error(key, "names no host; give at least one"));
    }
    let mut seen = BTreeSet::new();
    for &h in &indices {
        if h >= host_count {
            return Err(loaded.error(
                key,
                format!(
                    "host{h} does not exist: the cluster has hosts 0 to {} (cluster.gpus / cluster.gpus_per_host)",
                    host_count.saturating_sub(1)
                ),
            ));
        }
        if !seen.insert(h) {
            return Err(loaded.error(key, format!("host{h} is named twice")));
        }
    }
    Ok(seen.into_iter().collect())
}

/// Job `i`'s experiment: the cluster's tree without `[[jobs]]` and `[[faults]]` (faults
/// belong to the cluster), the job's `model`, `parallel` and `training` tables in place of
/// the top-level ones, `name` the job's and `cluster.gpus` its hosts' GPUs. Its errors say
/// which job they are about.
fn job_experiment(
    loaded: &LoadedConfig,
    i: usize,
    hosts: &[u32],
    gph: u32,
) -> Result<Experiment, ConfigError> {
    let job_name = &loaded.config.jobs[i].name;
    let gpus = hosts.len() as u32 * gph;
    let mut tree = loaded.tree.clone();
    let entry = tree
        .remove("jobs")
        .and_then(|jobs| match jobs.value {
            Value::Array(mut a) if i < a.len() => Some(a.swap_remove(i)),
            _ => None,
        })
        .expect("[[jobs]] was read from this tree");
    tree.remove("faults");
    let Value::Table(mut entry_table) = entry.value else {
        unreachable!("a [[jobs]] entry deserialized as a table");
    };
    let Value::Table(root) = &mut tree.value else {
        unreachable!("an experiment is a table");
    };
    let mut own_sections = Vec::new();
    for section in ["model", "parallel", "training"] {
        if let Some(table) = entry_table.remove(section) {
            root.insert(section.into(), table);
            own_sections.push(section);
        }
    }
    let size_origin = entry_table
        .get("gpus")
        .or_else(|| entry_table.get("hosts"))
        .map_or_else(|| entry.origin.clone(), |v| v.origin.clone());
    root.insert(
        "name".into(),
        Located {
            value: Value::String(job_name.clone()),
            origin: entry.origin.clone(),
        },
    );
    if let Some(Value::Table(cluster)) = root.get_mut("cluster").map(|c| &mut c.value) {
        cluster.insert(
            "gpus".into(),
            Located {
                value: Value::Integer(i64::from(gpus)),
                origin: size_origin.clone(),
            },
        );
        if let Some(mix) = cluster.remove("gpu_mix") {
            cluster.insert(
                "gpu_mix".into(),
                job_gpu_mix(loaded, mix, hosts, &size_origin),
            );
        }
    }
    let in_job = |e: ConfigError| {
        let key = match e.key.as_str() {
            "cluster.gpus" => format!("jobs[{i}].gpus"),
            // Keys of a table the job wrote; an inherited top-level table keeps its key.
            k if own_sections
                .iter()
                .any(|s| k == *s || k.starts_with(&format!("{s}."))) =>
            {
                format!("jobs[{i}].{k}")
            }
            k => k.to_string(),
        };
        ConfigError {
            key,
            message: format!(
                "job `{job_name}`: {}",
                e.message.replace("cluster.gpus", "the job's gpus")
            ),
            origin: e.origin,
        }
    };
    let job_loaded = config::from_tree(tree, &loaded.path).map_err(in_job)?;
    Experiment::from_checked(job_loaded, &|_| Ok(Vec::new())).map_err(in_job)
}

/// Hosts as a Slurm host list: `host[0-3,8]`.
pub fn host_list(hosts: &[u32]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut i = 0;
    while i < hosts.len() {
        let mut j = i;
        while j + 1 < hosts.len() && hosts[j + 1] == hosts[j] + 1 {
            j += 1;
        }
        runs.push(if i == j {
            hosts[i].to_string()
        } else {
            format!("{}-{}", hosts[i], hosts[j])
        });
        i = j + 1;
    }
    format!("host[{}]", runs.join(","))
}

/// A job's own `[[cluster.gpu_mix]]` on a mixed cluster: its hosts in order, one entry per
/// run of hosts that one entry of the cluster's `mix` placed, naming that entry's GPU as
/// written (so a GPU file's path resolves where it was written).
fn job_gpu_mix(loaded: &LoadedConfig, mix: Located, hosts: &[u32], origin: &Origin) -> Located {
    let c = &loaded.config.cluster;
    let Value::Array(entries) = mix.value else {
        return mix;
    };
    if c.gpu_mix.is_empty() {
        return Located {
            value: Value::Array(entries),
            origin: mix.origin,
        };
    }
    // The first host of each cluster entry, in order (`resolve_gpus` places them so).
    let mut first_host = Vec::with_capacity(c.gpu_mix.len());
    let mut next = 0u64;
    for entry in &c.gpu_mix {
        first_host.push(next);
        next += crate::experiment::gpu_mix_entry_hosts(c, entry).unwrap_or(0);
    }
    let entry_of = |h: u32| first_host.partition_point(|&f| f <= u64::from(h)) - 1;
    let mut runs: Vec<(usize, i64)> = Vec::new();
    for &h in hosts {
        match runs.last_mut() {
            Some((e, n)) if *e == entry_of(h) => *n += 1,
            _ => runs.push((entry_of(h), 1)),
        }
    }
    let located = |value| Located {
        value,
        origin: origin.clone(),
    };
    let tables = runs
        .into_iter()
        .filter_map(|(e, n)| {
            let gpu = entries.get(e)?.as_table()?.get("gpu")?.clone();
            let table = [
                ("gpu".to_string(), gpu),
                ("hosts".into(), located(Value::Integer(n))),
            ];
            Some(located(Value::Table(table.into_iter().collect())))
        })
        .collect();
    Located {
        value: Value::Array(tables),
        origin: mix.origin,
    }
}

/// One workload running every job on its GPUs: the jobs' programs one after another, the
/// top-level layout and batch fields those of the first job (reports read the jobs').
pub fn combine(jobs: &[Job], workloads: Vec<Workload>, gpu_count: u32) -> Workload {
    let mut programs: Vec<Program> = Vec::new();
    let mut placed = Vec::with_capacity(jobs.len());
    let mut job_of_gpu = vec![NO_JOB; gpu_count as usize];
    let mut local_of_gpu = vec![0; gpu_count as usize];
    for (j, (job, mut workload)) in jobs.iter().zip(workloads).enumerate() {
        let gpus = job.gpus(job.exp.loaded.config.cluster.gpus_per_host);
        for (local, &g) in gpus.iter().enumerate() {
            job_of_gpu[g as usize] = j as u32;
            local_of_gpu[g as usize] = local as u32;
        }
        let program_offset = programs.len() as u32;
        programs.append(&mut workload.programs);
        placed.push(PlacedJob {
            workload,
            program_offset,
            gpus,
            start: job.start,
        });
    }
    // Trailing idle GPUs hold no rank.
    let bound = job_of_gpu
        .iter()
        .rposition(|&j| j != NO_JOB)
        .map_or(0, |g| g + 1);
    job_of_gpu.truncate(bound);
    local_of_gpu.truncate(bound);
    let first = &placed[0].workload;
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    Workload {
        layout: first.layout,
        micro_batch: first.micro_batch,
        stage_layers: first.stage_layers.clone(),
        replica_class: first.replica_class.clone(),
        programs,
        tokens: placed.iter().map(|p| p.workload.tokens).sum(),
        source: format!("{} jobs: {}", placed.len(), names.join(", ")),
        line_names: Vec::new(),
        jobs: Some(Box::new(JobSet::new(placed, job_of_gpu, local_of_gpu))),
        one_replica: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every policy takes `want` distinct free hosts, ascending, whatever is free.
        #[test]
        fn every_policy_takes_what_it_asks_for_from_the_free_hosts(
            free in proptest::collection::btree_set(0u32..512, 1..200),
            share in 0.0f64..1.0,
            seed in any::<u64>(),
        ) {
            let free: Vec<u32> = free.into_iter().collect();
            let want = ((free.len() as f64 * share) as usize).max(1);
            for policy in [Placement::Packed, Placement::Spread, Placement::Random] {
                let hosts = choose(policy, &free, want, seed);
                prop_assert_eq!(hosts.len(), want);
                prop_assert!(hosts.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(hosts.iter().all(|h| free.binary_search(h).is_ok()));
            }
        }
    }

    #[test]
    fn packed_takes_one_block_and_spread_interleaves() {
        let free: Vec<u32> = (0..8).collect();
        assert_eq!(choose(Placement::Packed, &free, 4, 0), vec![0, 1, 2, 3]);
        assert_eq!(choose(Placement::Spread, &free, 4, 0), vec![0, 2, 4, 6]);
        let rest: Vec<u32> = vec![1, 3, 5, 7];
        assert_eq!(choose(Placement::Spread, &rest, 4, 0), rest);
        assert_eq!(choose(Placement::Spread, &free, 3, 0), vec![0, 2, 5]);
    }

    #[test]
    fn host_lists_fold_runs() {
        assert_eq!(host_list(&[0, 1, 2, 3, 8]), "host[0-3,8]");
        assert_eq!(host_list(&[1, 3]), "host[1,3]");
    }

    #[test]
    fn random_placement_is_a_seeded_subset() {
        let free: Vec<u32> = (0..64).collect();
        let a = choose(Placement::Random, &free, 16, 7);
        assert_eq!(a, choose(Placement::Random, &free, 16, 7));
        assert_ne!(a, choose(Placement::Random, &free, 16, 8));
        assert_eq!(a.len(), 16);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_ne!(
            a,
            (0..16).collect::<Vec<_>>(),
            "a draw, not the first hosts"
        );
    }
}
