//! The scale-out fabric: one folded-Clos builder for rail-optimised, fat-tree and spine-leaf
//! networks.
//!
//! All three are leaves (tier 1) under spines (tier 2, a full mesh between the leaves and spines
//! of one pod and plane) and, when there is more than one pod, cores (tier 3): core group `j` of
//! a plane serves spine `j` of every pod, which is the k-ary fat-tree wiring of Al-Fares, Loukissas
//! and Vahdat, "A Scalable, Commodity Data Center Network Architecture", SIGCOMM'08 (§2.2 the
//! k-ary fat-tree, §3 its wiring and routing).
//!
//! - Rail-optimised: NIC `i` (rail `i`) of every host of a segment sits on leaf `i` of that
//!   segment (NVIDIA DGX SuperPOD reference architecture: a 32-node scalable unit with one leaf
//!   per rail); dual-plane puts port `p` of every NIC into plane `p`, planes sharing no switch
//!   (Qian et al., "Alibaba HPN: A Data Center Network for Large Language Model Training",
//!   SIGCOMM'24); with two ports and one plane the ports go to two leaves of the same plane
//!   (HPN's dual-ToR).
//! - Fat-tree: the classic k-ary tree: k/2 hosts' worth of ports per edge leaf, pods of k/2
//!   leaves and k/2 aggregation switches, (k/2)² cores (Al-Fares et al. §2.2).
//! - Spine-leaf: racks of hosts under a leaf (or a leaf pair), every leaf on every spine.
//!
//! Ids are laid out so that routing is arithmetic: leaves, then spines `(plane, pod, j)`, then
//! cores `(plane, j, c)`; NIC–leaf cables come before leaf–spine cables, which come before
//! spine–core cables, so a switch's out-links are its down-links followed by its up-links, a
//! leaf's up-link to spine `j` is its `j`-th up-link and a core's out-link `p` goes to pod `p`.

use crate::config::{ClusterConfig, TopologyKind};

use super::host::HostLayout;
use super::{
    Builder, HOST_NONE, LinkClass, NodeId, NodeKind, TopologyError, gbps_to_bytes, line_rate_gbps,
    positive,
};

/// No pod: cores belong to every pod.
pub(crate) const POD_NONE: u32 = u32::MAX;

/// Largest tier a generator may produce; anything bigger is a typo in a ratio.
const MAX_SWITCHES_PER_GROUP: u64 = 1 << 16;

/// Where each NIC port lands.
#[derive(Debug, Clone, Copy)]
enum PortMap {
    /// Leaf `(segment, rail, port)` = `(segment · rails + rail) · ports + port`.
    Rail { hosts_per_segment: u32 },
    /// Fat-tree: every port of a host (in one plane) on the host's edge leaf.
    Rack {
        hosts_per_leaf: u32,
        leaves_per_plane: u32,
    },
    /// Spine-leaf: port `p` of a host on member `p` of its rack's leaf group.
    RackPorts { hosts_per_rack: u32 },
}

/// Sizes and speeds of a folded Clos, decided before anything is allocated.
#[derive(Debug, Clone)]
pub(crate) struct FabricPlan {
    planes: u32,
    pods: u32,
    /// `(plane, pod)` of each leaf.
    leaf_coords: Vec<(u32, u32)>,
    port_map: PortMap,
    hosts: u32,
    nics_per_host: u32,
    nic_ports: u32,
    nic_port_bytes_per_s: f64,
    spines_per_pod: u32,
    leaf_spine_bytes_per_s: f64,
    /// Cores per group (one group per spine index and plane); 0 without a core tier.
    core_group: u32,
    spine_core_bytes_per_s: f64,
}

impl FabricPlan {
    fn spines(&self) -> u64 {
        u64::from(self.planes) * u64::from(self.pods) * u64::from(self.spines_per_pod)
    }

    fn cores(&self) -> u64 {
        u64::from(self.planes) * u64::from(self.spines_per_pod) * u64::from(self.core_group)
    }

    pub fn node_count(&self) -> usize {
        self.leaf_coords.len() + (self.spines() + self.cores()) as usize
    }

    pub fn cable_count(&self) -> usize {
        (u64::from(self.hosts) * u64::from(self.nics_per_host) * u64::from(self.nic_ports)
            + self.leaf_coords.len() as u64 * u64::from(self.spines_per_pod)
            + self.spines() * u64::from(self.core_group)) as usize
    }

    fn plane_of_port(&self, port: u32) -> u32 {
        if self.planes > 1 { port } else { 0 }
    }

    fn leaf_of(&self, host: u32, nic: u32, port: u32) -> u32 {
        match self.port_map {
            PortMap::Rail { hosts_per_segment } => {
                ((host / hosts_per_segment) * self.nics_per_host + nic) * self.nic_ports + port
            }
            PortMap::Rack {
                hosts_per_leaf,
                leaves_per_plane,
            } => self.plane_of_port(port) * leaves_per_plane + host / hosts_per_leaf,
            PortMap::RackPorts { hosts_per_rack } => {
                (host / hosts_per_rack) * self.nic_ports + port
            }
        }
    }
}

/// Coordinates of a fabric switch; routing reads them instead of tables.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SwitchCoord {
    pub plane: u32,
    /// [`POD_NONE`] for cores.
    pub pod: u32,
    /// Spine: index within its pod and plane; core: its group (the spine index it serves).
    pub j: u32,
    /// How many of the switch's out-links (a prefix) go down.
    pub down: u32,
}

/// The built fabric: node id ranges and switch coordinates.
#[derive(Debug, Clone)]
pub(crate) struct FabricLayout {
    pub base: NodeId,
    pub coords: Vec<SwitchCoord>,
}

impl FabricLayout {
    pub fn coord(&self, n: NodeId) -> SwitchCoord {
        self.coords[(n - self.base) as usize]
    }
}

/// `count` switches of `switch_bytes_per_s` ports, enough for `capacity / ratio`.
fn tier_size(
    count: u32,
    capacity: f64,
    ratio: f64,
    switch_bytes_per_s: Option<f64>,
    key: &str,
) -> Result<u32, TopologyError> {
    // Without an explicit switch port speed: one port-speed link per downlink, over the ratio.
    let n = match switch_bytes_per_s {
        Some(speed) => (capacity / ratio / speed).ceil(),
        None => (f64::from(count) / ratio).ceil(),
    }
    .max(1.0);
    if n > MAX_SWITCHES_PER_GROUP as f64 {
        return Err(TopologyError::config(
            key,
            format!(
                "{key} ({ratio}) would need {n} switches per group; use a ratio ≥ 1 or set \
                 cluster.spines_per_pod / cluster.fabric_link_gbps"
            ),
        ));
    }
    Ok(n as u32)
}

fn at_least_one(value: u32, key: &str) -> Result<u32, TopologyError> {
    if value == 0 {
        Err(TopologyError::config(
            key,
            format!("{key} must be at least 1"),
        ))
    } else {
        Ok(value)
    }
}

/// Sizes the fabric of `cluster.topology`.
pub(crate) fn plan(
    cluster: &ClusterConfig,
    hosts: &HostLayout,
) -> Result<FabricPlan, TopologyError> {
    let ports = cluster.nic_ports;
    let planes = if cluster.dual_plane { ports } else { 1 };
    // Leaves a NIC spreads its ports over within one plane (2 = dual-ToR).
    let tors = ports / planes;
    let nics = hosts.nics_per_host;
    let port_bps =
        gbps_to_bytes(line_rate_gbps(cluster.nic_gbps, "cluster.nic_gbps")?) / f64::from(ports);
    let switch_bps = match cluster.fabric_link_gbps {
        Some(g) => Some(gbps_to_bytes(line_rate_gbps(
            g,
            "cluster.fabric_link_gbps",
        )?)),
        None => None,
    };
    let oversub = positive(cluster.oversubscription, "cluster.oversubscription")?;
    let core_oversub = positive(
        cluster.core_oversubscription,
        "cluster.core_oversubscription",
    )?;
    let spines_override = match cluster.spines_per_pod {
        Some(s) => Some(at_least_one(s, "cluster.spines_per_pod")?),
        None => None,
    };
    let n_hosts = hosts.hosts;
    let base = |pods, leaf_coords, port_map| FabricPlan {
        planes,
        pods,
        leaf_coords,
        port_map,
        hosts: n_hosts,
        nics_per_host: nics,
        nic_ports: ports,
        nic_port_bytes_per_s: port_bps,
        spines_per_pod: 0,
        leaf_spine_bytes_per_s: 0.0,
        core_group: 0,
        spine_core_bytes_per_s: 0.0,
    };
    let plan = match cluster.topology {
        TopologyKind::RailOptimized => {
            let hps = at_least_one(cluster.hosts_per_segment, "cluster.hosts_per_segment")?;
            let spp = at_least_one(cluster.segments_per_pod, "cluster.segments_per_pod")?;
            let segments = n_hosts.div_ceil(hps);
            let pods = segments.div_ceil(spp);
            let leaves = u64::from(segments) * u64::from(nics) * u64::from(ports);
            check_count(leaves, "leaves")?;
            let mut coords = Vec::with_capacity(leaves as usize);
            for seg in 0..segments {
                for _rail in 0..nics {
                    for p in 0..ports {
                        coords.push((if planes > 1 { p } else { 0 }, seg / spp));
                    }
                }
            }
            let mut plan = base(
                pods,
                coords,
                PortMap::Rail {
                    hosts_per_segment: hps,
                },
            );
            // A leaf takes one port from each host of its segment; sized for a full segment so
            // that every leaf is the same switch.
            let down = f64::from(hps) * port_bps;
            let spines = match spines_override {
                Some(s) => s,
                None => tier_size(hps, down, oversub, switch_bps, "cluster.oversubscription")?,
            };
            plan.spines_per_pod = spines;
            plan.leaf_spine_bytes_per_s = down / oversub / f64::from(spines);
            // Leaves of one pod and plane: the spine's downlinks.
            let spine_down = spp * nics * tors;
            add_cores(&mut plan, spine_down, core_oversub, switch_bps)?;
            plan
        }
        TopologyKind::FatTree => {
            let per_host = nics * ports / planes;
            let (k, hosts_per_leaf) = fat_tree_k(cluster, n_hosts, per_host)?;
            let half = k / 2;
            let leaves_per_plane = n_hosts.div_ceil(hosts_per_leaf);
            let pods = leaves_per_plane.div_ceil(half);
            let mut coords = Vec::with_capacity((leaves_per_plane * planes) as usize);
            for plane in 0..planes {
                for l in 0..leaves_per_plane {
                    coords.push((plane, l / half));
                }
            }
            let mut plan = base(
                pods,
                coords,
                PortMap::Rack {
                    hosts_per_leaf,
                    leaves_per_plane,
                },
            );
            // Every switch has k ports of one speed; oversubscription thins the uplinks.
            let speed = switch_bps.unwrap_or(port_bps);
            plan.spines_per_pod = half;
            plan.leaf_spine_bytes_per_s = speed / oversub;
            if pods > 1 {
                plan.core_group = half;
                plan.spine_core_bytes_per_s = speed / core_oversub;
            }
            plan
        }
        TopologyKind::SpineLeaf => {
            let hpr = match cluster.hosts_per_rack {
                Some(h) => at_least_one(h, "cluster.hosts_per_rack")?,
                None => (32 / (nics * ports)).max(1),
            };
            let racks = n_hosts.div_ceil(hpr);
            let leaves = u64::from(racks) * u64::from(ports);
            check_count(leaves, "leaves")?;
            let mut coords = Vec::with_capacity(leaves as usize);
            for _rack in 0..racks {
                for p in 0..ports {
                    coords.push((if planes > 1 { p } else { 0 }, 0));
                }
            }
            let mut plan = base(
                1,
                coords,
                PortMap::RackPorts {
                    hosts_per_rack: hpr,
                },
            );
            // A leaf takes one port of every NIC of its rack.
            let count = hpr * nics;
            let down = f64::from(count) * port_bps;
            let spines = match spines_override {
                Some(s) => s,
                None => tier_size(count, down, oversub, switch_bps, "cluster.oversubscription")?,
            };
            plan.spines_per_pod = spines;
            plan.leaf_spine_bytes_per_s = down / oversub / f64::from(spines);
            plan
        }
        TopologyKind::Graph => {
            return Err(TopologyError::config(
                "cluster.topology",
                "a graph topology has no generated fabric",
            ));
        }
    };
    check_count(plan.spines() + plan.cores(), "spines and cores")?;
    check_count(plan.cable_count() as u64 * 2, "links")?;
    Ok(plan)
}

/// A core tier when there is more than one pod: group `j` serves spine `j` of every pod.
fn add_cores(
    plan: &mut FabricPlan,
    spine_down: u32,
    core_oversub: f64,
    switch_bps: Option<f64>,
) -> Result<(), TopologyError> {
    if plan.pods <= 1 {
        return Ok(());
    }
    let capacity = f64::from(spine_down) * plan.leaf_spine_bytes_per_s;
    let group = tier_size(
        spine_down,
        capacity,
        core_oversub,
        switch_bps,
        "cluster.core_oversubscription",
    )?;
    plan.core_group = group;
    plan.spine_core_bytes_per_s = capacity / core_oversub / f64::from(group);
    Ok(())
}

fn check_count(n: u64, what: &str) -> Result<(), TopologyError> {
    if n >= u64::from(u32::MAX / 4) {
        Err(TopologyError::config(
            "cluster.gpus",
            format!("the fabric would need {n} {what}, more than 32-bit ids address"),
        ))
    } else {
        Ok(())
    }
}

/// The fat-tree radix and hosts per edge leaf. Without `cluster.fat_tree_k`: the smallest even
/// k ≥ 4 that holds every host — at least the smallest with k³/4 ≥ NIC ports (Al-Fares et al.
/// §2.2), larger when whole hosts do not fill a leaf's k/2 down ports.
fn fat_tree_k(
    cluster: &ClusterConfig,
    hosts: u32,
    per_host: u32,
) -> Result<(u32, u32), TopologyError> {
    let fit = |k: u32| -> Result<u32, TopologyError> {
        let half = k / 2;
        let hpl = match cluster.hosts_per_rack {
            Some(h) => h,
            None => half / per_host,
        };
        if hpl == 0 || u64::from(hpl) * u64::from(per_host) > u64::from(half) {
            return Err(TopologyError::config(
                "cluster.fat_tree_k",
                format!(
                    "an edge leaf of a {k}-ary fat-tree has k/2 = {half} down ports but {} host(s) \
                     need {} (cluster.nics_per_host × ports per plane = {per_host} each); raise \
                     cluster.fat_tree_k to at least {}",
                    hpl.max(1),
                    u64::from(hpl.max(1)) * u64::from(per_host),
                    2 * u64::from(hpl.max(1)) * u64::from(per_host)
                ),
            ));
        }
        let pods = hosts.div_ceil(hpl).div_ceil(half);
        if pods > k {
            return Err(TopologyError::config(
                "cluster.fat_tree_k",
                format!(
                    "{hosts} hosts need {pods} pods but a {k}-ary fat-tree has at most k = {k}; \
                     raise cluster.fat_tree_k"
                ),
            ));
        }
        Ok(hpl)
    };
    if let Some(0) = cluster.hosts_per_rack {
        return Err(TopologyError::config(
            "cluster.hosts_per_rack",
            "cluster.hosts_per_rack must be at least 1",
        ));
    }
    match cluster.fat_tree_k {
        Some(k) => {
            if k < 4 || !k.is_multiple_of(2) {
                return Err(TopologyError::config(
                    "cluster.fat_tree_k",
                    format!("cluster.fat_tree_k ({k}) must be even and at least 4"),
                ));
            }
            fit(k).map(|hpl| (k, hpl))
        }
        None => {
            let mut k = 4u32;
            loop {
                if let Ok(hpl) = fit(k) {
                    return Ok((k, hpl));
                }
                if u64::from(k) >= MAX_SWITCHES_PER_GROUP {
                    return Err(TopologyError::config(
                        "cluster.fat_tree_k",
                        format!(
                            "no fat-tree radix up to {k} holds {hosts} hosts; set cluster.fat_tree_k"
                        ),
                    ));
                }
                k += 2;
            }
        }
    }
}

/// Adds the fabric's switches and cables (NIC ports, leaf–spine, spine–core).
pub(crate) fn build(
    plan: &FabricPlan,
    hosts: &HostLayout,
    b: &mut Builder,
) -> Result<FabricLayout, TopologyError> {
    let base = b.node_count();
    let leaves = plan.leaf_coords.len() as u32;
    let s = plan.spines_per_pod;
    let c = plan.core_group;
    let mut coords = Vec::with_capacity(plan.node_count());
    for (i, &(plane, pod)) in plan.leaf_coords.iter().enumerate() {
        b.add_node(NodeKind::Leaf, HOST_NONE, i as u32)?;
        coords.push(SwitchCoord {
            plane,
            pod,
            j: i as u32,
            down: 0,
        });
    }
    let spine_base = base + leaves;
    let spine = |plane: u32, pod: u32, j: u32| spine_base + (plane * plan.pods + pod) * s + j;
    for plane in 0..plan.planes {
        for pod in 0..plan.pods {
            for j in 0..s {
                let id = b.add_node(
                    NodeKind::Spine,
                    HOST_NONE,
                    spine(plane, pod, j) - spine_base,
                )?;
                debug_assert_eq!(id, spine(plane, pod, j));
                coords.push(SwitchCoord {
                    plane,
                    pod,
                    j,
                    down: 0,
                });
            }
        }
    }
    let core_base = spine_base + plan.planes * plan.pods * s;
    let core = |plane: u32, j: u32, k: u32| core_base + (plane * s + j) * c + k;
    for plane in 0..plan.planes {
        for j in 0..s {
            for k in 0..c {
                b.add_node(NodeKind::Core, HOST_NONE, core(plane, j, k) - core_base)?;
                // Every core has one down-link per pod.
                coords.push(SwitchCoord {
                    plane,
                    pod: POD_NONE,
                    j,
                    down: plan.pods,
                });
            }
        }
    }

    for h in 0..hosts.hosts {
        for n in 0..hosts.nics_per_host {
            for p in 0..plan.nic_ports {
                let leaf = plan.leaf_of(h, n, p);
                b.cable(
                    hosts.nic(h, n),
                    base + leaf,
                    LinkClass::Network,
                    plan.nic_port_bytes_per_s,
                )?;
                coords[leaf as usize].down += 1;
            }
        }
    }
    for (i, &(plane, pod)) in plan.leaf_coords.iter().enumerate() {
        for j in 0..s {
            let sp = spine(plane, pod, j);
            b.cable(
                base + i as u32,
                sp,
                LinkClass::Network,
                plan.leaf_spine_bytes_per_s,
            )?;
            coords[(sp - base) as usize].down += 1;
        }
    }
    for plane in 0..plan.planes {
        for pod in 0..plan.pods {
            for j in 0..s {
                for k in 0..c {
                    b.cable(
                        spine(plane, pod, j),
                        core(plane, j, k),
                        LinkClass::Network,
                        plan.spine_core_bytes_per_s,
                    )?;
                }
            }
        }
    }
    Ok(FabricLayout { base, coords })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;

    fn switches(t: &Topology, kind: NodeKind) -> Vec<NodeId> {
        (0..t.nodes().len() as u32)
            .filter(|&n| t.nodes()[n as usize].kind == kind)
            .collect()
    }

    /// Leaf of NIC port 0 of the NIC GPU `rank` uses.
    fn first_leaf(t: &Topology, rank: u32) -> NodeId {
        let p = t
            .path(
                t.gpu(rank),
                t.gpu((rank + t.gpu_count() / 2) % t.gpu_count()),
                0,
            )
            .unwrap();
        let l = p
            .iter()
            .find(|&&l| t.link(l).class == LinkClass::Network)
            .unwrap();
        t.link(*l).dst
    }

    #[test]
    fn rail_optimized_single_pod() {
        // 8 hosts, 4 per segment, 2 segments in one pod: no cores.
        let t = build_toml(
            "gpus = 64\nhosts_per_segment = 4\nsegments_per_pod = 2\n",
            &[h100()],
            None,
        );
        let c = t.count_by_kind();
        assert_eq!(c[&NodeKind::Leaf], 16);
        assert_eq!(c[&NodeKind::Spine], 4);
        assert_eq!(c.get(&NodeKind::Core), None);
        check_all_pairs(&t, &[0, 1, 2]);
        // Same rail, same segment: NIC → leaf → NIC; GPU 0 and GPU 8 are rail 0 of hosts 0, 1.
        let p = t.path(t.gpu(0), t.gpu(8), 0).unwrap();
        assert_eq!(count_class(&t, &p, LinkClass::Network), 2);
        // Cross segment: ECMP over all 4 spines at the leaf.
        let src = t.gpu(0);
        let dst = t.gpu(32);
        let leaf = first_leaf(&t, 0);
        let mut hops = Vec::new();
        t.next_hops(leaf, src, dst, &mut hops).unwrap();
        assert_eq!(
            hop_targets(&t, &hops),
            switch_neighbours(&t, leaf, NodeKind::Spine)
        );
        assert_eq!(hops.len(), 4);
        // 4 downlinks of 50 GB/s (4 hosts per segment) over 4 spines: one port-speed link each.
        assert!((t.link(hops[0]).bytes_per_s - 50e9).abs() < 1.0);
    }

    #[test]
    fn rail_optimized_multi_pod_with_cores_and_partial_segment() {
        // 7 hosts of 4 GPUs, 2 per segment (last one half full), 2 segments per pod: 2 pods.
        let toml = "gpus = 28\ngpus_per_host = 4\nhosts_per_segment = 2\nsegments_per_pod = 2\n";
        let t = build_toml(toml, &[h100()], None);
        let c = t.count_by_kind();
        assert_eq!(c[&NodeKind::Leaf], 16);
        // 2 spines per pod (2 downlinks per leaf); spine has 2·4 leaf downlinks → groups of 8.
        assert_eq!(c[&NodeKind::Spine], 4);
        assert_eq!(c[&NodeKind::Core], 16);
        check_all_pairs(&t, &[0, 1, 2, 3]);
        check_determinism(toml, &[h100()]);
        // Across pods: paths over many hashes cross every core.
        let cores = switches(&t, NodeKind::Core);
        let crossed = crossed_nodes(&t, t.gpu(0), t.gpu(27), 0..256, NodeKind::Core);
        assert_eq!(crossed, cores);
        // At a spine, an other-pod flow goes up to all cores of its group.
        let spine = switches(&t, NodeKind::Spine)[0];
        let mut hops = Vec::new();
        t.next_hops(spine, t.gpu(0), t.gpu(27), &mut hops).unwrap();
        assert_eq!(hops.len(), 8);
        assert_eq!(
            hop_targets(&t, &hops),
            switch_neighbours(&t, spine, NodeKind::Core)
        );
    }

    #[test]
    fn rail_optimized_dual_plane() {
        let toml = "gpus = 32\ngpus_per_host = 2\nnics_per_host = 2\nnic_ports = 2\ndual_plane = true\n\
                    hosts_per_segment = 2\nsegments_per_pod = 2\n";
        let t = build_toml(toml, &[h100()], None);
        let c = t.count_by_kind();
        // 8 segments × 2 rails × 2 ports; 4 pods; 2 spines per pod and plane.
        assert_eq!(c[&NodeKind::Leaf], 32);
        assert_eq!(c[&NodeKind::Spine], 16);
        check_all_pairs(&t, &[0, 1, 2, 5]);
        // Planes share no switch: every switch–switch link stays within one plane.
        let plane_of = |t: &Topology, path: &[LinkId]| {
            let leaf = path
                .iter()
                .map(|&l| t.link(l).dst)
                .find(|&n| t.nodes()[n as usize].kind == NodeKind::Leaf)
                .unwrap();
            t.nodes()[leaf as usize].index % 2
        };
        let planes: BTreeSet<u32> = (0..64)
            .map(|h| plane_of(&t, &t.path(t.gpu(0), t.gpu(31), h).unwrap()))
            .collect();
        assert_eq!(planes.len(), 2, "ECMP at the NIC uses both planes");
        for h in 0..64 {
            let p = t.path(t.gpu(0), t.gpu(31), h).unwrap();
            let plane = plane_of(&t, &p);
            for &l in &p {
                let n = t.link(l).dst;
                if t.nodes()[n as usize].kind == NodeKind::Leaf {
                    assert_eq!(t.nodes()[n as usize].index % 2, plane);
                }
            }
        }
        check_determinism(toml, &[h100()]);
    }

    #[test]
    fn dual_tor_rail_and_spine_leaf() {
        let toml = "gpus = 32\ngpus_per_host = 4\nnics_per_host = 4\nnic_ports = 2\nhosts_per_segment = 2\n\
                    segments_per_pod = 2\n";
        let t = build_toml(toml, &[h100()], None);
        assert_eq!(t.count_by_kind()[&NodeKind::Leaf], 32);
        check_all_pairs(&t, &[0, 1, 2]);
        // Both ports of the source NIC are equal-cost first hops.
        let nic_hops = |t: &Topology, src: u32, dst: u32| {
            let p = t.path(t.gpu(src), t.gpu(dst), 0).unwrap();
            let l = p
                .iter()
                .find(|&&l| t.link(l).class == LinkClass::Network)
                .unwrap();
            let nic = t.link(*l).src;
            let mut hops = Vec::new();
            t.next_hops(nic, t.gpu(src), t.gpu(dst), &mut hops).unwrap();
            hops.len()
        };
        assert_eq!(nic_hops(&t, 0, 31), 2);
        let t = build_toml(
            "gpus = 40\ngpus_per_host = 4\nnics_per_host = 2\nnic_ports = 2\ntopology = \"spine-leaf\"\nhosts_per_rack = 2\n",
            &[h100()],
            None,
        );
        // 5 racks × 2 leaves; a leaf has 2 hosts × 2 NIC ports down → 4 spines.
        assert_eq!(t.count_by_kind()[&NodeKind::Leaf], 10);
        assert_eq!(t.count_by_kind()[&NodeKind::Spine], 4);
        check_all_pairs(&t, &[0, 1, 2]);
        assert_eq!(nic_hops(&t, 0, 39), 2);
    }

    #[test]
    fn spine_leaf() {
        let toml = "gpus = 80\ntopology = \"spine-leaf\"\n";
        let t = build_toml(toml, &[h100()], None);
        let c = t.count_by_kind();
        // 10 hosts, 4 per rack (32 ports / 8 NICs): 3 leaves, 32 spines.
        assert_eq!(c[&NodeKind::Leaf], 3);
        assert_eq!(c[&NodeKind::Spine], 32);
        assert_eq!(c.get(&NodeKind::Core), None);
        check_all_pairs(&t, &[0, 1]);
        let leaf = first_leaf(&t, 0);
        let mut hops = Vec::new();
        // GPU 0 (rack 0) → GPU 79 (rack 2): up to every spine.
        t.next_hops(leaf, t.gpu(0), t.gpu(79), &mut hops).unwrap();
        assert_eq!(hops.len(), 32);
        // Inside the rack: straight down.
        t.next_hops(leaf, t.gpu(0), t.gpu(9), &mut hops).unwrap();
        assert_eq!(hops.len(), 1);
        check_determinism(toml, &[h100()]);
        // Oversubscription 2:1 halves the spines.
        let t = build_toml(
            "gpus = 80\ntopology = \"spine-leaf\"\noversubscription = 2.0\n",
            &[h100()],
            None,
        );
        assert_eq!(t.count_by_kind()[&NodeKind::Spine], 16);
    }

    #[test]
    fn fat_tree_k4() {
        // 12 hosts, one 1-port NIC each: 2 hosts per edge leaf, 6 leaves, 3 pods of 2 leaves.
        let toml = "gpus = 24\ngpus_per_host = 2\nnics_per_host = 1\ntopology = \"fat-tree\"\nfat_tree_k = 4\n";
        let t = build_toml(toml, &[h100()], None);
        let c = t.count_by_kind();
        assert_eq!(c[&NodeKind::Leaf], 6);
        assert_eq!(c[&NodeKind::Spine], 6);
        assert_eq!(c[&NodeKind::Core], 4);
        check_all_pairs(&t, &[0, 1, 2, 3]);
        let crossed = crossed_nodes(&t, t.gpu(0), t.gpu(23), 0..256, NodeKind::Core);
        assert_eq!(crossed, switches(&t, NodeKind::Core));
        check_determinism(toml, &[h100()]);
        // Default k for the same cluster is 4 as well.
        let t2 = build_toml(
            "gpus = 24\ngpus_per_host = 2\nnics_per_host = 1\ntopology = \"fat-tree\"\n",
            &[h100()],
            None,
        );
        assert_eq!(t2.count_by_kind(), c);
    }

    #[test]
    fn fat_tree_k8() {
        // 20 hosts of 2 NICs: 2 hosts per leaf (4 down ports), 10 leaves, 3 pods of ≤ 4 leaves.
        let toml = "gpus = 80\ngpus_per_host = 4\nnics_per_host = 2\ntopology = \"fat-tree\"\nfat_tree_k = 8\n";
        let t = build_toml(toml, &[h100()], None);
        let c = t.count_by_kind();
        assert_eq!(c[&NodeKind::Leaf], 10);
        assert_eq!(c[&NodeKind::Spine], 12);
        assert_eq!(c[&NodeKind::Core], 16);
        check_all_pairs(&t, &[0, 1, 2]);
        // A cross-pod flow at its edge leaf: every aggregation switch of the pod.
        let leaf = first_leaf(&t, 0);
        let mut hops = Vec::new();
        t.next_hops(leaf, t.gpu(0), t.gpu(79), &mut hops).unwrap();
        assert_eq!(
            hop_targets(&t, &hops),
            switch_neighbours(&t, leaf, NodeKind::Spine)
        );
        assert_eq!(hops.len(), 4);
        let crossed = crossed_nodes(&t, t.gpu(0), t.gpu(79), 0..512, NodeKind::Core);
        assert_eq!(crossed, switches(&t, NodeKind::Core));
    }

    #[test]
    fn fabric_config_errors_name_the_key() {
        let cases = [
            (
                "gpus = 64\ntopology = \"fat-tree\"\nfat_tree_k = 5\n",
                "cluster.fat_tree_k",
                "even",
            ),
            (
                "gpus = 64\ntopology = \"fat-tree\"\nfat_tree_k = 4\n",
                "cluster.fat_tree_k",
                "at least 16",
            ),
            (
                "gpus = 160\ngpus_per_host = 2\nnics_per_host = 1\ntopology = \"fat-tree\"\nfat_tree_k = 4\n",
                "cluster.fat_tree_k",
                "pods",
            ),
            (
                "gpus = 64\noversubscription = 0\n",
                "cluster.oversubscription",
                "> 0",
            ),
            (
                "gpus = 64\nhosts_per_segment = 0\n",
                "cluster.hosts_per_segment",
                "at least 1",
            ),
            (
                "gpus = 64\nspines_per_pod = 0\n",
                "cluster.spines_per_pod",
                "at least 1",
            ),
            (
                "gpus = 64\nfabric_link_gbps = -4\n",
                "cluster.fabric_link_gbps",
                "from 1 to 1000000 Gb/s",
            ),
        ];
        for (toml, key, text) in cases {
            let err = try_build_toml(toml, &[h100()], None).unwrap_err();
            assert_eq!(err.key(), key, "{toml}: {err}");
            assert!(err.to_string().contains(text), "{toml}: {err}");
        }
    }

    #[test]
    fn fabric_link_speed_and_explicit_spines_bundle_links() {
        // 32 × 50 GB/s leaf downlinks over 800 Gb/s fabric ports: 16 spines.
        let t = build_toml("gpus = 64\nfabric_link_gbps = 800\n", &[h100()], None);
        assert_eq!(t.count_by_kind()[&NodeKind::Spine], 16);
        let t = build_toml("gpus = 64\nspines_per_pod = 4\n", &[h100()], None);
        let leaf_spine = t
            .links()
            .find(|l| {
                t.nodes()[l.src as usize].kind == NodeKind::Leaf
                    && t.nodes()[l.dst as usize].kind == NodeKind::Spine
            })
            .unwrap();
        // 8 hosts in one 32-host segment: leaves are sized for the full segment, 32 × 50 GB/s.
        assert!((leaf_spine.bytes_per_s - 32.0 * 50e9 / 4.0).abs() < 1.0);
    }
}
