//! Symmetry: when every data-parallel replica runs the same program on the same kind of GPU
//! over links that behave alike, simulating one replica says what all of them do. The ranks
//! of replica 0 (`dp = 0`) run; the others are mirrors. A collective whose group reaches
//! into the mirrors (data-parallel gradients, the distributed optimizer's gathers, expert
//! all-to-alls) completes in closed form on the one member that runs, as it would for the
//! group's last member in the full run (`collective/closed.rs`). SimAI's analytical mode
//! simulates one rank per class the same way (Wang et al., NSDI'25, §4).
//!
//! Exact up to link latencies: the full run releases a closed-form collective's members one
//! path latency apart, the mirror takes the latest of them, so the iteration and its split
//! agree to microseconds per collective (`coordinator/tests/symmetry.rs` holds 1K and 8K runs
//! to 0.1%). Anything that makes one replica differ from another runs every rank instead,
//! and says why ([`Symmetry::Full`]).

use crate::NetworkParams;
use crate::config::SymmetryChoice;
use crate::experiment::Experiment;
use crate::layout::GroupKind;
use crate::topology::{NodeKind, Topology};
use crate::workload::Workload;

/// Which ranks a run simulates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Symmetry {
    /// Every rank; why the replicas cannot be mirrored.
    Full { why: String },
    /// Replica 0's ranks; the other `replicas − 1` replicas mirror it.
    OneReplica { replicas: u32 },
}

impl Symmetry {
    /// One replica when `exp`'s replicas are all alike on `topology` under `net`, else every
    /// rank with the first reason found. `clock_spread` is each GPU type's chip-to-chip
    /// spread, which gives every GPU its own clock.
    pub fn decide(
        exp: &Experiment,
        workload: &Workload,
        topology: &Topology,
        net: &NetworkParams,
        clock_spread: &[f64],
    ) -> Symmetry {
        match why_not(exp, workload, topology, net, clock_spread) {
            Some(why) => Symmetry::Full { why },
            None => Symmetry::OneReplica {
                replicas: workload.layout.dp,
            },
        }
    }

    /// How many replicas each simulated one stands for: traffic and collective counts are
    /// scaled by it.
    pub fn replicas(&self) -> u32 {
        match self {
            Symmetry::Full { .. } => 1,
            Symmetry::OneReplica { replicas } => *replicas,
        }
    }

    /// What a run says about it.
    pub fn describe(&self) -> String {
        match self {
            Symmetry::OneReplica { replicas } => format!(
                "one data-parallel replica simulated, the other {} mirror it (engine.symmetry = \"off\" simulates every rank)",
                replicas - 1
            ),
            Symmetry::Full { why } => format!("every rank simulated: {why}"),
        }
    }
}

/// The first thing that makes the replicas differ, or `None` when one stands for all.
fn why_not(
    exp: &Experiment,
    workload: &Workload,
    topology: &Topology,
    net: &NetworkParams,
    clock_spread: &[f64],
) -> Option<String> {
    let config = &exp.loaded.config;
    if config.engine.symmetry == SymmetryChoice::Off {
        return Some("engine.symmetry = \"off\"".into());
    }
    if workload.layout.dp <= 1 {
        return Some("one data-parallel replica".into());
    }
    if let Some(l) = topology
        .links()
        .find(|l| net.is_queued(l.class) || net.is_shared(l.class))
    {
        return Some(format!(
            "{} links are simulated {} and replicas contend on them; network.model = \"analytical\" mirrors replicas",
            l.class.name(),
            if net.is_shared(l.class) {
                "as shared flows"
            } else {
                "packet by packet"
            }
        ));
    }
    if workload.jobs.is_some() || !exp.jobs.is_empty() {
        return Some("[[jobs]] share the cluster".into());
    }
    if !config.faults.is_empty() {
        return Some("[[faults]] strike some ranks and not others".into());
    }
    if exp.gpu_types.len() > 1 || workload.replica_class.iter().any(|&c| c != 0) {
        return Some("the replicas differ (GPU types or replica classes)".into());
    }
    if let Some(spread) = clock_spread.iter().copied().find(|&s| s > 0.0) {
        return Some(format!(
            "each GPU draws its own sustained clock (chip-to-chip spread {:.1}%); set compute.clock_spread = 0 to simulate one replica",
            100.0 * spread
        ));
    }
    if topology
        .nodes()
        .iter()
        .any(|n| matches!(n.kind, NodeKind::CxlSwitch | NodeKind::MemoryNode))
    {
        return Some("CXL memory is shared by the replicas' hosts".into());
    }
    groups_mirror(workload, topology).err()
}

/// Every group of a replica-0 rank lies in replica 0 and looks the same from every replica
/// (which ring neighbours share an NVLink domain), or holds only that rank of replica 0 with
/// its mirrors (the same tensor, context and pipeline coordinates) in the others, each of
/// whose ring hops the rank that runs can stand for ([`mirror_hops`]).
fn groups_mirror(workload: &Workload, topology: &Topology) -> Result<(), String> {
    let layout = &workload.layout;
    let node = |r: u32| topology.nccl_node(r);
    let kinds = GroupKind::ALL.into_iter().chain([GroupKind::Embedding]);
    for kind in kinds {
        for rank in (0..layout.world()).filter(|&r| layout.coords(r).dp == 0) {
            let members = workload.group(kind, rank);
            if members.iter().all(|&m| layout.coords(m).dp == 0) {
                // Each group once, from its first member.
                if members[0] != rank {
                    continue;
                }
                let (members, n) = (&members, members.len());
                let shared = |d: u32| {
                    (0..n).map(move |i| {
                        let (a, b) = (members[i], members[(i + 1) % n]);
                        node(layout.in_replica(a, d)) == node(layout.in_replica(b, d))
                    })
                };
                if (1..layout.dp).any(|d| !shared(0).eq(shared(d))) {
                    return Err(format!(
                        "{} groups share NVLink domains in some replicas and not in others",
                        kind.name()
                    ));
                }
                // Sends between pipeline (or context-parallel) neighbours take their own
                // path's bandwidth: it must be the same in every replica.
                if matches!(kind, GroupKind::Pp | GroupKind::Cp) {
                    let mut scratch = (Vec::new(), Vec::new());
                    for i in 0..n {
                        let (a, b) = (members[i], members[(i + 1) % n]);
                        let own = path_shape(topology, (a, b), &mut scratch)?;
                        for d in 1..layout.dp {
                            let (ad, bd) = (layout.in_replica(a, d), layout.in_replica(b, d));
                            if path_shape(topology, (ad, bd), &mut scratch)? != own {
                                return Err(format!(
                                    "ranks {a} and {b} and their mirrors {ad} and {bd} are joined by links of different speeds or kinds"
                                ));
                            }
                        }
                    }
                }
                continue;
            }
            let me = layout.coords(rank);
            let mirrors = members.iter().all(|&m| {
                let c = layout.coords(m);
                (c.tp, c.cp, c.pp) == (me.tp, me.cp, me.pp)
            });
            if !mirrors {
                return Err(format!(
                    "a {} group spans replicas with several ranks of one (e.g. context or expert parallelism across data-parallel ranks)",
                    kind.name()
                ));
            }
            if mirror_hops(&members, rank, node).is_none() {
                return Err(format!(
                    "some {} ring hops stay in an NVLink domain and rank {rank} has no member there to stand for them",
                    kind.name()
                ));
            }
        }
    }
    Ok(())
}

/// For a group whose other members mirror `rank`: a member `rank` can send to over the same
/// kind of first link as each kind of ring hop in the group (within an NVLink domain, across
/// the network), with how many hops are of that kind. `None` when `rank` has no such member
/// for a kind some hop uses. `node(r)` is rank `r`'s NCCL node.
pub fn mirror_hops(
    members: &[u32],
    rank: u32,
    node: impl Fn(u32) -> u32,
) -> Option<Vec<(u32, u32)>> {
    let n = members.len();
    let inside = (0..n)
        .filter(|&i| node(members[i]) == node(members[(i + 1) % n]))
        .count() as u32;
    let mut hops = Vec::with_capacity(2);
    for (count, same_node) in [(inside, true), (n as u32 - inside, false)] {
        if count == 0 {
            continue;
        }
        let to = members
            .iter()
            .copied()
            .find(|&m| m != rank && (node(m) == node(rank)) == same_node)?;
        hops.push((to, count));
    }
    Some(hops)
}

/// What a path from rank `a` to rank `b` offers an analytical send besides its latency: its
/// bottleneck bandwidth and how many links of each class it crosses.
fn path_shape(
    topology: &Topology,
    (a, b): (u32, u32),
    (path, hops): &mut (Vec<crate::topology::LinkId>, Vec<crate::topology::LinkId>),
) -> Result<(u64, [u32; 4]), String> {
    topology
        .path_into(topology.gpu(a), topology.gpu(b), 0, path, hops)
        .map_err(|e| e.to_string())?;
    let mut classes = [0u32; 4];
    let mut slowest = f64::INFINITY;
    for &l in path.iter() {
        let link = topology.link(l);
        slowest = slowest.min(link.bytes_per_s);
        classes[crate::segments::class_index(link.class)] += 1;
    }
    Ok((slowest.to_bits(), classes))
}
