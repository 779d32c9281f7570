//! The units partitions are made of, and their natural groupings.
//!
//! An atom is a host with everything inside it (GPUs, NVSwitches, PCIe switches, CPU root,
//! NICs), or one shared node (a leaf, spine or core switch, a CXL switch, a memory node).
//! Keeping hosts whole never cuts an NVLink or PCIe link (~100 ns), so the lookahead stays
//! a network link's latency (UNISON, Bai et al., EuroSys'24 §4.1: partitions must not cut
//! the lowest-latency links). Groupings (segments, pods, rails) are read from the graph's
//! wiring, so they also hold for topologies loaded from a graph file.

use sim_models::topology::{HOST_NONE, LinkId, NodeKind, Topology};

/// The atoms of a topology: atoms `0..hosts` are the hosts (atom = host id), the rest are
/// shared nodes in node id order.
#[derive(Debug, Clone)]
pub struct Atoms {
    /// Atom of every topology node.
    pub atom_of: Vec<u32>,
    pub count: u32,
    pub hosts: u32,
    /// The node of each shared atom (index `atom − hosts`).
    pub shared_nodes: Vec<u32>,
    /// Links between two atoms, each direction once per cable: `(atom a, atom b, link)`
    /// with `a < b`, in link order.
    pub edges: Vec<(u32, u32, LinkId)>,
}

impl Atoms {
    pub fn new(topology: &Topology) -> Self {
        let hosts = topology.host_count();
        let mut shared_nodes = Vec::new();
        let atom_of: Vec<u32> = topology
            .nodes()
            .iter()
            .enumerate()
            .map(|(id, n)| {
                if n.host == HOST_NONE {
                    shared_nodes.push(id as u32);
                    hosts + shared_nodes.len() as u32 - 1
                } else {
                    n.host
                }
            })
            .collect();
        let edges = topology
            .links()
            .enumerate()
            .filter_map(|(id, l)| {
                let (a, b) = (atom_of[l.src as usize], atom_of[l.dst as usize]);
                (a < b).then_some((a, b, id as LinkId))
            })
            .collect();
        Atoms {
            count: hosts + shared_nodes.len() as u32,
            atom_of,
            hosts,
            shared_nodes,
            edges,
        }
    }

    /// The kind of a shared atom's node; `None` for a host.
    pub fn shared_kind(&self, topology: &Topology, atom: u32) -> Option<NodeKind> {
        let i = atom.checked_sub(self.hosts)?;
        Some(topology.nodes()[self.shared_nodes[i as usize] as usize].kind)
    }

    /// Groups atoms by joining the two ends of every inter-atom link `join` accepts (given
    /// the kinds of both ends, `None` for a host); every atom not joined stays alone. Groups
    /// are numbered by their smallest atom, in order.
    pub fn join(
        &self,
        topology: &Topology,
        join: impl Fn(Option<NodeKind>, Option<NodeKind>, LinkId) -> bool,
    ) -> Vec<u32> {
        let mut sets = UnionFind::new(self.count as usize);
        for &(a, b, link) in &self.edges {
            if join(
                self.shared_kind(topology, a),
                self.shared_kind(topology, b),
                link,
            ) {
                sets.union(a as usize, b as usize);
            }
        }
        sets.numbered()
    }
}

/// Disjoint sets over `0..n` with path halving and union by size.
struct UnionFind {
    parent: Vec<u32>,
    size: Vec<u32>,
}

impl UnionFind {
    fn new(n: usize) -> Self {
        UnionFind {
            parent: (0..n as u32).collect(),
            size: vec![1; n],
        }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] as usize != x {
            let grand = self.parent[self.parent[x] as usize];
            self.parent[x] = grand;
            x = grand as usize;
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (mut a, mut b) = (self.find(a), self.find(b));
        if a == b {
            return;
        }
        if self.size[a] < self.size[b] {
            std::mem::swap(&mut a, &mut b);
        }
        self.parent[b] = a as u32;
        self.size[a] += self.size[b];
    }

    /// Set of every element, numbered 0.. in order of each set's first element.
    fn numbered(mut self) -> Vec<u32> {
        let n = self.parent.len();
        let mut number = vec![u32::MAX; n];
        let mut next = 0;
        (0..n)
            .map(|x| {
                let root = self.find(x);
                if number[root] == u32::MAX {
                    number[root] = next;
                    next += 1;
                }
                number[root]
            })
            .collect()
    }
}

/// Packs groups (numbered `0..`, in the order given) into at most `parts` partitions of
/// consecutive groups with about equal `weight` each. `parts == 0` or at least the number of
/// groups keeps every group.
pub fn pack(group_of: &[u32], weight: &[f64], parts: u32) -> Vec<u32> {
    let groups = group_of.iter().copied().max().map_or(0, |g| g + 1);
    if parts == 0 || parts >= groups {
        return group_of.to_vec();
    }
    let mut group_weight = vec![0.0; groups as usize];
    for (a, &g) in group_of.iter().enumerate() {
        group_weight[g as usize] += weight[a].max(0.0);
    }
    let total: f64 = group_weight.iter().sum();
    let mut part_of_group = vec![0u32; groups as usize];
    let (mut part, mut filled, mut in_part) = (0u32, 0.0, 0u32);
    for (g, &w) in group_weight.iter().enumerate() {
        // Move on once this part has its share of the weight so far, or when every part
        // left needs one of the groups left.
        let share = total * f64::from(part + 1) / f64::from(parts);
        let groups_left = groups - g as u32;
        let parts_after = parts - part - 1;
        if parts_after > 0 && in_part > 0 && (filled >= share || groups_left <= parts_after) {
            part += 1;
            in_part = 0;
        }
        part_of_group[g] = part;
        filled += w;
        in_part += 1;
    }
    group_of
        .iter()
        .map(|&g| part_of_group[g as usize])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_keeps_groups_whole_and_balances_weight() {
        let group_of = [0, 0, 1, 2, 2, 3, 4, 5];
        let weight = [1.0; 8];
        let parts = pack(&group_of, &weight, 3);
        assert_eq!(parts.iter().copied().max(), Some(2));
        for (a, b) in group_of.iter().zip(&parts).zip(group_of.iter().zip(&parts)) {
            if a.0 == b.0 {
                assert_eq!(a.1, b.1);
            }
        }
        assert_eq!(pack(&group_of, &weight, 0), group_of.to_vec());
        assert_eq!(pack(&group_of, &weight, 9), group_of.to_vec());
        // Every part gets a group even when the weight sits at the front.
        let heavy = [100.0, 100.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
        let parts = pack(&group_of, &heavy, 6);
        assert_eq!(parts.iter().copied().max(), Some(5));
    }
}
