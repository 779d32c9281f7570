//! Maps logical processes (one per topology node) to partitions, and measures the result.
//!
//! Invariant: knows the topology, never the engine. A partition assignment is a plain vector
//! `partition_of[node]`; whatever runs the partitions reads nothing else from here.

use sim::topology::{HOST_NONE, Topology, splitmix64};

/// Strategies that exist today, by the name `engine.partition` and `--partition` take.
pub const AVAILABLE: [&str; 5] = ["auto", "by-host", "round-robin", "linear", "random"];

/// Maps every LP to a partition with the named strategy. The assignment never changes the
/// simulated results, only how fast they come.
/// - `auto`, `by-host`: [`by_host`];
/// - `round-robin`: LP `i` to partition `i mod K`;
/// - `linear`: contiguous blocks of LP ids;
/// - `random`: each LP to a partition drawn from `(seed, LP id)`.
///
/// `K` is the number of partitions `by-host` makes, so every strategy has the same degree of
/// over-decomposition.
pub fn partition(topology: &Topology, strategy: &str, seed: u64) -> Result<Assignment, String> {
    let hosts = by_host(topology);
    let k = hosts.partitions.max(1);
    let n = topology.nodes().len() as u32;
    let partition_of: Vec<u32> = match strategy {
        "auto" | "by-host" => return Ok(hosts),
        "round-robin" => (0..n).map(|i| i % k).collect(),
        "linear" => {
            let block = n.div_ceil(k).max(1);
            (0..n).map(|i| i / block).collect()
        }
        "random" => (0..n)
            .map(|i| (splitmix64(seed ^ splitmix64(u64::from(i))) % u64::from(k)) as u32)
            .collect(),
        other => {
            return Err(format!(
                "partition strategy `{other}` is not available yet (it arrives with the partitioner work); available: {}",
                AVAILABLE.join(", ")
            ));
        }
    };
    Ok(compact(partition_of))
}

/// Renumbers partitions densely (0..K in order of first appearance), dropping empty ones.
fn compact(partition_of: Vec<u32>) -> Assignment {
    let mut rename = std::collections::BTreeMap::new();
    let partition_of: Vec<u32> = partition_of
        .into_iter()
        .map(|p| {
            let next = rename.len() as u32;
            *rename.entry(p).or_insert(next)
        })
        .collect();
    Assignment {
        partitions: rename.len() as u32,
        partition_of,
    }
}

/// `partition_of[node]` for every topology node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub partition_of: Vec<u32>,
    pub partitions: u32,
}

/// One partition per host (all of a host's GPUs, NICs and PCIe switches together) plus one per
/// shared switch or memory node. The finest partitioning that never cuts inside a host.
pub fn by_host(topology: &Topology) -> Assignment {
    let hosts = topology.host_count();
    let mut next = hosts;
    let partition_of = topology
        .nodes()
        .iter()
        .map(|n| {
            if n.host == HOST_NONE {
                next += 1;
                next - 1
            } else {
                n.host
            }
        })
        .collect();
    Assignment {
        partition_of,
        partitions: next,
    }
}

/// Lookahead of an assignment: the smallest latency of any link between two partitions, in
/// picoseconds (DESIGN.md, "Windows and mailboxes"). `None` when no link is cut.
pub fn lookahead_ps(topology: &Topology, assignment: &Assignment) -> Option<u64> {
    topology
        .links()
        .iter()
        .filter(|l| {
            assignment.partition_of[l.src as usize] != assignment.partition_of[l.dst as usize]
        })
        .map(|l| l.latency_ps)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_host_lookahead_matches_the_topology_host_preserving_lookahead() {
        let cluster: sim::config::ClusterConfig = toml::from_str(
            "gpus = 64\ngpu = \"H100-SXM\"\nhosts_per_segment = 4\nsegments_per_pod = 1",
        )
        .unwrap();
        let db = sim::gpu::GpuDatabase::embedded().unwrap();
        let h100 = db.get("H100-SXM").unwrap().clone();
        let topo = Topology::build(&cluster, &[h100], &[0; 8], None).unwrap();
        let a = by_host(&topo);
        assert_eq!(lookahead_ps(&topo, &a), topo.host_preserving_lookahead_ps());
        assert!(a.partitions > topo.host_count());
    }
}
