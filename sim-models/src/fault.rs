//! `[[faults]]`: what breaks in a run, resolved against the cluster and checked key by key.
//!
//! Faults act where a real cluster feels them:
//!
//! - **Links and NICs** (`link-down`, `link-degraded`, `nic-down` from the start) change the
//!   topology itself ([`apply_to_topology`]): a degraded cable runs at `factor` of its rate in
//!   both directions; a cable that is down carries nothing, and routing takes the equal-cost
//!   hops that still reach the destination, as a fabric's ECMP groups shrink when a link
//!   fails. Where no path is left the job stops at its first transfer that needs one, with
//!   the fault named, as an NCCL job stops on a transport error (`NET/IB: Got completion
//!   from peer ... with error 12`, then the watchdog).
//! - **Hosts and NICs going down later** (`at_s > 0`) stop the job when it was still running
//!   at that time ([`Faults::check_run`]): NCCL has no failover between NICs or hosts, so the
//!   collective that needs them hangs until the watchdog aborts every rank.
//! - **Slow GPUs** (`gpu-slow`, a thermal or power straggler) run their kernels at `factor`
//!   of their speed: by default only those bound by the SM clock, which a power or thermal
//!   cap lowers (HBM keeps its clock), or every kernel with `scope = "all"`.
//! - **Kernel jitter** (`kernel-jitter`) multiplies every kernel's time by a log-normal draw
//!   of mean 1 (`exp(σ·z − σ²/2)`, `z` a standard normal clamped to ±4) from the seed, the
//!   rank and the op alone, so every worker and thread draws the same: a rank's kernels
//!   keep their mean, and what a step loses is the wait for its slowest member.

use std::fmt;

use crate::config::{ConfigError, FaultConfig, FaultKind, LoadedConfig, NetworkModel, SlowScope};
use crate::hash::{splitmix64, standard_normal};
use crate::time::SimTime;
use crate::topology::{LinkClass, LinkId, NodeId, NodeKind, Topology};

/// The faults of an experiment that act on GPUs and on the whole job; link faults live in
/// the topology ([`apply_to_topology`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// Slow GPUs, by rank, ascending (one `[[faults]]` entry per rank).
    slow: Vec<SlowGpu>,
    jitter: Option<Jitter>,
    /// Hosts and NICs that go down while the job may still run.
    stops: Vec<Stop>,
    /// Link faults from a time after the start, by cable (then time), ascending.
    timed_links: Vec<TimedLink>,
}

/// A cable that goes down or slows at `from` (after the start of the iteration).
#[derive(Debug, Clone, PartialEq)]
pub struct TimedLink {
    cable: u32,
    from: SimTime,
    effect: LinkEffect,
    /// The cable in words and the entry that named it, for the job's error.
    what: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum LinkEffect {
    Down,
    Degraded(f64),
}

/// A GPU that runs its kernels slower.
#[derive(Debug, Clone, PartialEq)]
struct SlowGpu {
    rank: u32,
    /// The entry that slowed it (`faults[i]`) and its factor, for errors.
    entry: String,
    factor: f64,
    /// Time multiple of clock-bound kernels (1 / factor).
    clocked: f64,
    /// Time multiple of every kernel.
    all: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Jitter {
    sigma: f64,
    seed: u64,
}

/// A part that goes down at `at`.
#[derive(Debug, Clone, PartialEq)]
struct Stop {
    at: SimTime,
    /// What failed, in words (`host 3 (GPUs 24-31)`), and the entry that said so.
    what: String,
    entry: String,
}

impl Faults {
    /// Reads and checks every `[[faults]]` entry that acts on GPUs or the job; the link
    /// entries are checked against the topology by [`apply_to_topology`].
    pub fn from_config(loaded: &LoadedConfig) -> Result<Faults, ConfigError> {
        let cfg = &loaded.config;
        let gpus = cfg.cluster.gpus;
        let per_host = cfg.cluster.gpus_per_host.max(1);
        let hosts = gpus / per_host;
        let mut faults = Faults::default();
        for (i, f) in cfg.faults.iter().enumerate() {
            let entry = Entry::new(loaded, i, f);
            entry.only(match f.kind {
                FaultKind::LinkDown => &["link", "between"],
                FaultKind::LinkDegraded => &["link", "between", "factor"],
                FaultKind::NicDown => &["nic"],
                FaultKind::HostDown => &["host"],
                FaultKind::GpuSlow => &["gpu", "factor", "scope"],
                FaultKind::KernelJitter => &["sigma", "seed"],
            })?;
            let at = entry.at()?;
            match f.kind {
                FaultKind::LinkDown | FaultKind::LinkDegraded => {}
                FaultKind::NicDown => {
                    let nic = entry.required("nic", f.nic)?;
                    if at > SimTime::ZERO {
                        faults.stops.push(Stop {
                            at,
                            what: format!("NIC {nic} (nic{nic} in links.csv)"),
                            entry: entry.key.clone(),
                        });
                    }
                }
                FaultKind::HostDown => {
                    let host = entry.required("host", f.host)?;
                    if host >= hosts {
                        return Err(entry.error(
                            "host",
                            format!(
                                "host {host} does not exist: the cluster has {hosts} hosts (0-{})",
                                hosts.saturating_sub(1)
                            ),
                        ));
                    }
                    let (first, last) = (host * per_host, host * per_host + per_host - 1);
                    if at == SimTime::ZERO {
                        return Err(entry.error(
                            "host",
                            format!(
                                "host {host} is down from the start and holds ranks {first}-{last}: \
                                 the job cannot start (NCCL's initialisation would never complete); \
                                 give at_s > 0 for a host that fails during the iteration, or leave \
                                 the host out of the cluster"
                            ),
                        ));
                    }
                    faults.stops.push(Stop {
                        at,
                        what: format!("host {host} (ranks {first}-{last})"),
                        entry: entry.key.clone(),
                    });
                }
                FaultKind::GpuSlow => {
                    let rank = entry.required("gpu", f.gpu)?;
                    if rank >= gpus {
                        return Err(entry.error(
                            "gpu",
                            format!("GPU {rank} does not exist: the cluster has {gpus} GPUs (ranks 0-{})", gpus.saturating_sub(1)),
                        ));
                    }
                    if at > SimTime::ZERO {
                        return Err(entry.error(
                            "at_s",
                            "a slow GPU is slow for the whole iteration; remove at_s",
                        ));
                    }
                    let factor = entry.fraction("factor", f.factor)?;
                    let i = match faults.slow.binary_search_by_key(&rank, |s| s.rank) {
                        Ok(i) => {
                            return Err(entry.error(
                                "gpu",
                                format!(
                                    "GPU {rank} is already slowed by `{}`; give one gpu-slow entry per GPU, with the factor and scope you want",
                                    faults.slow[i].entry
                                ),
                            ));
                        }
                        Err(i) => i,
                    };
                    let (clocked, all) = match f.scope {
                        SlowScope::Clock => (1.0 / factor, 1.0),
                        SlowScope::All => (1.0, 1.0 / factor),
                    };
                    faults.slow.insert(
                        i,
                        SlowGpu {
                            rank,
                            entry: entry.key.clone(),
                            factor,
                            clocked,
                            all,
                        },
                    );
                }
                FaultKind::KernelJitter => {
                    if faults.jitter.is_some() {
                        return Err(entry.error(
                            "kind",
                            "a second kernel-jitter entry; give one, with the sigma you want",
                        ));
                    }
                    if at > SimTime::ZERO {
                        return Err(entry.error(
                            "at_s",
                            "kernel jitter applies to the whole iteration; remove at_s",
                        ));
                    }
                    let sigma = entry.required("sigma", f.sigma)?;
                    if !(sigma.is_finite() && (0.0..=1.0).contains(&sigma)) {
                        return Err(entry.error(
                            "sigma",
                            format!("sigma = {sigma} must be between 0 and 1 (the spread of the log of a kernel's time; 0.05 is a 5% jitter)"),
                        ));
                    }
                    faults.jitter = Some(Jitter {
                        sigma,
                        seed: f.seed.unwrap_or(cfg.engine.seed),
                    });
                }
            }
        }
        faults
            .stops
            .sort_by(|a, b| a.at.cmp(&b.at).then(a.what.cmp(&b.what)));
        Ok(faults)
    }

    /// These faults with the link faults that start after time zero, which
    /// [`apply_to_topology`] returned.
    pub fn with_timed_links(mut self, mut timed: Vec<TimedLink>) -> Faults {
        timed.sort_by_key(|t| (t.cable, t.from));
        self.timed_links = timed;
        self
    }

    /// Whether a link fault starts after time zero: only then do the ports and routing ask
    /// [`Faults::link_down_at`] and [`Faults::link_rate_at`].
    pub fn has_timed_links(&self) -> bool {
        !self.timed_links.is_empty()
    }

    fn timed(&self, link: LinkId) -> &[TimedLink] {
        let cable = link / 2;
        let start = self.timed_links.partition_point(|t| t.cable < cable);
        let end = self.timed_links.partition_point(|t| t.cable <= cable);
        &self.timed_links[start..end]
    }

    /// The link-down faults that have started by `now`.
    fn downs_by(&self, now: SimTime) -> impl Iterator<Item = &TimedLink> {
        self.timed_links
            .iter()
            .filter(move |t| t.effect == LinkEffect::Down && t.from <= now)
    }

    /// Whether some link fault has taken a cable down by `now`: from then on segments route
    /// hop by hop around what is down instead of along the route their sender planned.
    pub fn links_down_by(&self, now: SimTime) -> bool {
        self.downs_by(now).next().is_some()
    }

    /// How many link-down faults have started by `now`: a flow that sees the count change
    /// may have been rerouted part way.
    pub fn cables_down_by(&self, now: SimTime) -> u32 {
        self.downs_by(now).count() as u32
    }

    /// The cables down by `now`, in words, for the error of a segment left without a path.
    pub fn describe_down_by(&self, now: SimTime) -> String {
        let down: Vec<String> = self
            .downs_by(now)
            .map(|t| format!("{} down at {:.6} s", t.what, t.from.as_secs_f64()))
            .collect();
        down.join(", ")
    }

    /// If link `link` is down at `now`: the cable and entry in words, and since when.
    pub fn link_down_at(&self, link: LinkId, now: SimTime) -> Option<(&str, SimTime)> {
        self.timed(link)
            .iter()
            .find(|t| t.effect == LinkEffect::Down && t.from <= now)
            .map(|t| (t.what.as_str(), t.from))
    }

    /// The share of its rate link `link` runs at, at `now` (1 unless degraded by then).
    pub fn link_rate_at(&self, link: LinkId, now: SimTime) -> f64 {
        self.timed(link)
            .iter()
            .filter(|t| t.from <= now)
            .map(|t| match t.effect {
                LinkEffect::Degraded(f) => f,
                LinkEffect::Down => 1.0,
            })
            .product()
    }

    /// Whether any fault changes kernel times.
    pub fn slows_kernels(&self) -> bool {
        !self.slow.is_empty() || self.jitter.is_some()
    }

    /// Time multiple of rank `rank`'s clock-bound kernels.
    pub fn clock_slowdown(&self, rank: u32) -> f64 {
        self.slow_gpu(rank).map_or(1.0, |s| s.clocked)
    }

    /// Time multiple of kernel `op` of rank `rank` beyond its clock: a slow GPU's
    /// `scope = "all"` and the jitter.
    pub fn kernel_stretch(&self, rank: u32, op: u32) -> f64 {
        let all = self.slow_gpu(rank).map_or(1.0, |s| s.all);
        match self.jitter {
            Some(j) => all * jitter_multiple(j.seed, j.sigma, rank, op),
            None => all,
        }
    }

    /// Refuses a slow GPU whose kernels alone would run past [`SimTime::LIMIT`]: its
    /// run could only end in an overflow. `kernel_s(rank)` gives the rank's kernel time
    /// unslowed, in seconds: (clock-bound kernels, the others).
    pub fn check_time_limit(
        &self,
        loaded: &LoadedConfig,
        kernel_s: impl Fn(u32) -> (f64, f64),
    ) -> Result<(), ConfigError> {
        let limit_s = SimTime::LIMIT.as_secs_f64();
        for s in &self.slow {
            let (clocked, other) = kernel_s(s.rank);
            let slowed = (clocked * s.clocked + other) * s.all;
            if slowed > limit_s {
                return Err(loaded.error(
                    &format!("{}.factor", s.entry),
                    format!(
                        "gpu-slow factor {} makes GPU {}'s kernels alone take {slowed:.3e} s, more than the {:.0} days ({limit_s:.3e} s) fleetsim's picosecond clock holds; give a factor of at least {:.1e}",
                        s.factor,
                        s.rank,
                        limit_s / 86_400.0,
                        s.factor * slowed / limit_s,
                    ),
                ));
            }
        }
        Ok(())
    }

    fn slow_gpu(&self, rank: u32) -> Option<&SlowGpu> {
        self.slow
            .binary_search_by_key(&rank, |s| s.rank)
            .ok()
            .map(|i| &self.slow[i])
    }

    /// Whether a job whose last rank finished at `end` ran into a host or NIC that went
    /// down: the first that did stops it, with what failed and when.
    pub fn check_run(&self, end: SimTime) -> Result<(), JobStopped> {
        match self.stops.iter().find(|s| s.at < end) {
            Some(s) => Err(JobStopped {
                what: s.what.clone(),
                entry: s.entry.clone(),
                at: s.at,
                end,
            }),
            None => Ok(()),
        }
    }
}

/// A job stopped by a part that went down while it ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct JobStopped {
    what: String,
    entry: String,
    at: SimTime,
    end: SimTime,
}

impl fmt::Display for JobStopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the job stopped: {} went down at {:.6} s ({}), before the iteration would have ended at {:.6} s; \
             NCCL has no failover between hosts or NICs, so the collectives that need it hang until the \
             watchdog aborts every rank (move at_s past the end to see the iteration whole)",
            self.what,
            self.at.as_secs_f64(),
            self.entry,
            self.end.as_secs_f64(),
        )
    }
}

/// One `[[faults]]` entry in words, as `fleetsim check` lists it (`link-down between leaf0
/// and spine1 from 0.010000 s`).
pub fn describe(f: &FaultConfig) -> String {
    let target = match (f.link, &f.between, f.nic, f.host, f.gpu) {
        (Some(l), ..) => format!(" link {l}"),
        (_, Some(ends), ..) => format!(" between {}", ends.join(" and ")),
        (_, _, Some(n), ..) => format!(" NIC {n}"),
        (_, _, _, Some(h), _) => format!(" host {h}"),
        (_, _, _, _, Some(g)) => format!(" GPU {g}"),
        _ => String::new(),
    };
    let how = match f.kind {
        FaultKind::LinkDegraded => format!(" to {} of its rate", f.factor.unwrap_or(1.0)),
        FaultKind::GpuSlow => format!(
            " to {} of its speed ({} kernels)",
            f.factor.unwrap_or(1.0),
            match f.scope {
                SlowScope::Clock => "clock-bound",
                SlowScope::All => "all",
            }
        ),
        FaultKind::KernelJitter => format!(
            " sigma {} seed {}",
            f.sigma.unwrap_or(0.0),
            f.seed.map_or("engine.seed".to_string(), |s| s.to_string())
        ),
        _ => String::new(),
    };
    let when = if f.at_s > 0.0 {
        format!(" from {:.6} s", f.at_s)
    } else {
        " from the start".to_string()
    };
    format!("{}{target}{how}{when}", kind_name(f.kind))
}

/// The kind as the experiment file spells it.
fn kind_name(kind: FaultKind) -> &'static str {
    match kind {
        FaultKind::LinkDown => "link-down",
        FaultKind::LinkDegraded => "link-degraded",
        FaultKind::NicDown => "nic-down",
        FaultKind::HostDown => "host-down",
        FaultKind::GpuSlow => "gpu-slow",
        FaultKind::KernelJitter => "kernel-jitter",
    }
}

/// The log-normal time multiple of mean 1 that kernel `op` of `rank` draws.
fn jitter_multiple(seed: u64, sigma: f64, rank: u32, op: u32) -> f64 {
    if sigma <= 0.0 {
        return 1.0;
    }
    let a = splitmix64(seed ^ splitmix64((u64::from(rank) << 32) | u64::from(op)));
    (sigma * standard_normal(a) - sigma * sigma / 2.0).exp()
}

/// Applies the link and NIC entries of `[[faults]]` to `topology`: degraded cables get their
/// new rate, cables that are down leave routing. `graph_names` are the node names of a graph
/// file (by node id), which `between` may use besides `links.csv`'s `leaf0`-style names.
pub fn apply_to_topology(
    loaded: &LoadedConfig,
    topology: &mut Topology,
    graph_names: Option<&[String]>,
) -> Result<Vec<TimedLink>, ConfigError> {
    let mut timed = Vec::new();
    for (i, f) in loaded.config.faults.iter().enumerate() {
        let entry = Entry::new(loaded, i, f);
        match f.kind {
            FaultKind::LinkDown | FaultKind::LinkDegraded => {
                let cables = entry.cables(topology, graph_names)?;
                let effect = match f.kind {
                    FaultKind::LinkDown => LinkEffect::Down,
                    _ => LinkEffect::Degraded(entry.fraction("factor", f.factor)?),
                };
                let from = entry.at()?;
                for c in cables {
                    match effect {
                        _ if from > SimTime::ZERO => {
                            entry.check_queued(topology, c)?;
                            let l = topology.link(2 * c);
                            timed.push(TimedLink {
                                cable: c,
                                from,
                                effect,
                                what: format!(
                                    "the cable {} - {} ({})",
                                    topology.node_name(l.src),
                                    topology.node_name(l.dst),
                                    entry.key
                                ),
                            });
                        }
                        LinkEffect::Down => topology.set_cable_down(c),
                        LinkEffect::Degraded(factor) => topology.degrade_cable(c, factor),
                    }
                }
            }
            FaultKind::NicDown => {
                let nic = entry.required("nic", f.nic)?;
                let node = find_node(topology, NodeKind::Nic, nic).ok_or_else(|| {
                    let nics = topology
                        .count_by_kind()
                        .get(&NodeKind::Nic)
                        .copied()
                        .unwrap_or(0);
                    entry.error(
                        "nic",
                        format!(
                            "NIC {nic} does not exist: the cluster has {nics} NICs (nic0-nic{})",
                            nics.saturating_sub(1)
                        ),
                    )
                })?;
                if entry.at()? == SimTime::ZERO {
                    let links: Vec<LinkId> = topology
                        .out_links(node)
                        .iter()
                        .copied()
                        .filter(|&l| topology.link(l).class == LinkClass::Network)
                        .collect();
                    for l in links {
                        topology.set_cable_down(l / 2);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(timed)
}

/// The node of `kind` with index `index`.
fn find_node(topology: &Topology, kind: NodeKind, index: u32) -> Option<NodeId> {
    topology
        .nodes()
        .iter()
        .position(|n| n.kind == kind && n.index == index)
        .map(|i| i as NodeId)
}

/// One `[[faults]]` entry being checked, with the key its errors name.
struct Entry<'a> {
    loaded: &'a LoadedConfig,
    key: String,
    fault: &'a FaultConfig,
}

impl<'a> Entry<'a> {
    fn new(loaded: &'a LoadedConfig, i: usize, fault: &'a FaultConfig) -> Self {
        Entry {
            loaded,
            key: format!("faults[{i}]"),
            fault,
        }
    }

    /// An error about `field` of the entry, located where it (or else the entry) was written.
    fn error(&self, field: &str, message: impl Into<String>) -> ConfigError {
        self.loaded.error(&format!("{}.{field}", self.key), message)
    }

    fn kind_name(&self) -> &'static str {
        kind_name(self.fault.kind)
    }

    /// Refuses keys the entry's kind does not read (a `gpu` on a link fault is a mistake).
    fn only(&self, allowed: &[&str]) -> Result<(), ConfigError> {
        let f = self.fault;
        let given = [
            ("link", f.link.is_some()),
            ("between", f.between.is_some()),
            ("nic", f.nic.is_some()),
            ("host", f.host.is_some()),
            ("gpu", f.gpu.is_some()),
            ("factor", f.factor.is_some()),
            ("scope", f.scope != SlowScope::default()),
            ("sigma", f.sigma.is_some()),
            ("seed", f.seed.is_some()),
        ];
        match given.iter().find(|(k, set)| *set && !allowed.contains(k)) {
            Some((k, _)) => Err(self.error(
                k,
                format!(
                    "is not read by a {} fault, which takes {} (and at_s)",
                    self.kind_name(),
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    fn required<T>(&self, field: &str, value: Option<T>) -> Result<T, ConfigError> {
        value.ok_or_else(|| {
            self.error(
                field,
                format!("missing: a {} fault needs {field} = ...", self.kind_name()),
            )
        })
    }

    /// `field`, a fraction in (0, 1].
    fn fraction(&self, field: &str, value: Option<f64>) -> Result<f64, ConfigError> {
        let v = self.required(field, value)?;
        if v.is_finite() && v > 0.0 && v <= 1.0 {
            Ok(v)
        } else {
            Err(self.error(
                field,
                format!("{field} = {v} must be in (0, 1]: the share of bandwidth or speed left (use link-down for a dead link)"),
            ))
        }
    }

    /// A link fault that starts mid-iteration acts on the ports of the packet-level engine:
    /// the cable must be one it queues.
    fn check_queued(&self, topology: &Topology, cable: u32) -> Result<(), ConfigError> {
        let n = &self.loaded.config.network;
        let class = topology.link(2 * cable).class;
        let queued = n.model == NetworkModel::Packet
            && (class == LinkClass::Network || n.intra_host == NetworkModel::Packet);
        if queued {
            Ok(())
        } else {
            Err(self.error(
                "at_s",
                format!(
                    "a {} link that fails mid-iteration needs the packet-level engine on it: \
                     network.model = \"packet\"{}; or at_s = 0 (from the start) for any model",
                    class.name(),
                    if class == LinkClass::Network {
                        ""
                    } else {
                        " and network.intra_host = \"packet\""
                    }
                ),
            ))
        }
    }

    fn at(&self) -> Result<SimTime, ConfigError> {
        let at = self.fault.at_s;
        // An hour of simulated time is beyond any iteration.
        if at.is_finite() && (0.0..=3600.0).contains(&at) {
            Ok(SimTime::from_secs_f64(at))
        } else {
            Err(self.error(
                "at_s",
                format!(
                    "at_s = {at} must be between 0 and 3600 seconds from the start of the iteration"
                ),
            ))
        }
    }

    /// The cables a link entry names: `link = ID` or `between = [A, B]` (every cable between
    /// the two).
    fn cables(
        &self,
        topology: &Topology,
        graph_names: Option<&[String]>,
    ) -> Result<Vec<u32>, ConfigError> {
        match (self.fault.link, &self.fault.between) {
            (Some(link), None) => {
                if (link as usize) < topology.link_count() {
                    Ok(vec![link / 2])
                } else {
                    Err(self.error(
                        "link",
                        format!("link {link} does not exist: the cluster has links 0-{} (links.csv's link column)", topology.link_count().saturating_sub(1)),
                    ))
                }
            }
            (None, Some(ends)) => {
                let [a, b] = ends.as_slice() else {
                    return Err(self.error(
                        "between",
                        format!("names {} node(s); give the cable's two ends, e.g. between = [\"leaf0\", \"spine1\"]", ends.len()),
                    ));
                };
                let (a, b) = (self.node(topology, graph_names, a)?, self.node(topology, graph_names, b)?);
                let cables: Vec<u32> = topology
                    .out_links(a)
                    .iter()
                    .filter(|&&l| topology.link_dst(l) == b)
                    .map(|&l| l / 2)
                    .collect();
                if cables.is_empty() {
                    return Err(self.error(
                        "between",
                        format!("no cable joins {} and {}", ends[0], ends[1]),
                    ));
                }
                Ok(cables)
            }
            _ => Err(self.error(
                "link",
                "give exactly one of link = ID (links.csv's link column) or between = [\"leaf0\", \"spine1\"]",
            )),
        }
    }

    /// A node by its graph-file name or its `links.csv` name (`leaf0`, `nic12`, `gpu3`).
    fn node(
        &self,
        topology: &Topology,
        graph_names: Option<&[String]>,
        name: &str,
    ) -> Result<NodeId, ConfigError> {
        if let Some(i) = graph_names.and_then(|names| names.iter().position(|n| n == name)) {
            return Ok(i as NodeId);
        }
        let digits = name.trim_end_matches(|c: char| c.is_ascii_digit());
        let found = NodeKind::ALL
            .iter()
            .find(|k| k.name() == digits)
            .zip(name[digits.len()..].parse::<u32>().ok())
            .and_then(|(&kind, index)| find_node(topology, kind, index));
        found.ok_or_else(|| {
            self.error(
                "between",
                format!("no node is called `{name}`; name nodes as links.csv does (a kind and its index: gpu3, nic12, leaf0, spine1, core2){}",
                    if graph_names.is_some() { " or by their names in the graph file" } else { "" }),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_keeps_a_kernels_mean_and_spreads_by_sigma() {
        let n = 200_000u32;
        let draws: Vec<f64> = (0..n).map(|op| jitter_multiple(7, 0.1, 3, op)).collect();
        let mean = draws.iter().sum::<f64>() / f64::from(n);
        let logs: Vec<f64> = draws.iter().map(|d| d.ln()).collect();
        let log_mean = logs.iter().sum::<f64>() / f64::from(n);
        let sd = (logs.iter().map(|l| (l - log_mean).powi(2)).sum::<f64>() / f64::from(n)).sqrt();
        assert!((mean - 1.0).abs() < 0.002, "mean {mean}");
        assert!((sd - 0.1).abs() < 0.002, "sd {sd}");
        // The same seed, rank and op draw the same; another seed draws otherwise.
        assert_eq!(jitter_multiple(7, 0.1, 3, 5), jitter_multiple(7, 0.1, 3, 5));
        assert_ne!(jitter_multiple(7, 0.1, 3, 5), jitter_multiple(8, 0.1, 3, 5));
        assert_eq!(jitter_multiple(7, 0.0, 3, 5), 1.0);
    }
}
