//! Test helpers: GPU specs, builders from TOML snippets, and the route checker every generator's
//! tests run (reachability, loop-freedom, contiguity, BFS-shortness, sorted ECMP sets).

use std::collections::{BTreeMap, VecDeque};

pub use std::collections::BTreeSet;

use crate::config::ClusterConfig;
use crate::gpu::{DenseTflops, GpuSpec, Hbm, NvLink, Pcie, Vendor};

use super::routing::Routing;
use super::*;
use crate::hash::splitmix64;

fn spec(name: &str, vendor: Vendor, nvlink_gb_s: f64, pcie_gen: u32) -> GpuSpec {
    GpuSpec {
        name: name.into(),
        aliases: vec![],
        vendor,
        architecture: "test".into(),
        sms: 100,
        dense_tflops: DenseTflops {
            fp32: 1.0,
            tf32: 1.0,
            bf16: 1.0,
            fp16: 1.0,
            fp8: 1.0,
            mxfp8: 0.0,
            nvfp4: 0.0,
            source: String::new(),
        },
        hbm: Hbm {
            capacity_gb: 80.0,
            bandwidth_tb_s: 3.0,
            source: String::new(),
        },
        nvlink: NvLink {
            bandwidth_gb_s: nvlink_gb_s,
            ports: 18,
            generation: 4,
            source: String::new(),
        },
        pcie: Pcie {
            generation: pcie_gen,
            lanes: 16,
            source: String::new(),
        },
        clocks: None,
        host_cpu: crate::gpu::HostCpu::X86,
    }
}

pub fn h100() -> GpuSpec {
    spec("H100-SXM", Vendor::Nvidia, 450.0, 5)
}

pub fn a100() -> GpuSpec {
    spec("A100-SXM-80GB", Vendor::Nvidia, 300.0, 4)
}

pub fn mi300x() -> GpuSpec {
    spec("MI300X", Vendor::Amd, 448.0, 5)
}

/// An NVIDIA part without NVLink.
pub fn pcie_only() -> GpuSpec {
    spec("L40S", Vendor::Nvidia, 0.0, 4)
}

fn cluster(toml_text: &str) -> ClusterConfig {
    toml::from_str(toml_text).expect("test cluster TOML parses")
}

pub fn try_build_toml_types(
    toml_text: &str,
    types: &[GpuSpec],
    host_types: &[u16],
    graph: Option<GraphFile>,
) -> Result<Topology, TopologyError> {
    Topology::build(&cluster(toml_text), types, host_types, graph)
}

pub fn try_build_toml(
    toml_text: &str,
    types: &[GpuSpec],
    graph: Option<GraphFile>,
) -> Result<Topology, TopologyError> {
    let c = cluster(toml_text);
    let hosts = c.gpus.checked_div(c.gpus_per_host).unwrap_or(0);
    Topology::build(&c, types, &vec![0; hosts as usize], graph)
}

pub fn build_toml(toml_text: &str, types: &[GpuSpec], graph: Option<GraphFile>) -> Topology {
    try_build_toml(toml_text, types, graph).unwrap_or_else(|e| panic!("{toml_text}: {e}"))
}

pub fn build_toml_types(
    toml_text: &str,
    types: &[GpuSpec],
    host_types: &[u16],
    graph: Option<GraphFile>,
) -> Topology {
    try_build_toml_types(toml_text, types, host_types, graph)
        .unwrap_or_else(|e| panic!("{toml_text}: {e}"))
}

/// Hops from `start` to every node over links `keep` accepts, passing only through nodes
/// `forwards` accepts.
pub fn bfs(
    t: &Topology,
    start: NodeId,
    keep: impl Fn(&Link) -> bool,
    forwards: impl Fn(NodeId) -> bool,
) -> Vec<u32> {
    let mut dist = vec![u32::MAX; t.nodes().len()];
    let mut queue = VecDeque::from([start]);
    dist[start as usize] = 0;
    while let Some(v) = queue.pop_front() {
        if v != start && !forwards(v) {
            continue;
        }
        for &l in t.out_links(v) {
            let link = &t.link(l);
            if keep(link) && dist[link.dst as usize] == u32::MAX {
                dist[link.dst as usize] = dist[v as usize] + 1;
                queue.push_back(link.dst);
            }
        }
    }
    dist
}

fn kind(t: &Topology, n: NodeId) -> NodeKind {
    t.nodes()[n as usize].kind
}

fn endpoints(t: &Topology) -> Vec<NodeId> {
    (0..t.nodes().len() as u32)
        .filter(|&n| kind(t, n).is_endpoint())
        .collect()
}

/// Checks the routes from each of `sources` (GPU ranks) to every endpoint.
pub fn check_pairs(t: &Topology, sources: &[u32], hashes: &[u64]) {
    let all = endpoints(t);
    for &s in sources {
        let src = t.gpu(s);
        for &dst in &all {
            for &h in hashes {
                check_flow(t, src, dst, h);
                check_flow(t, dst, src, h);
            }
        }
    }
}

/// Checks every ordered pair of endpoints (GPUs and memory nodes).
pub fn check_all_pairs(t: &Topology, hashes: &[u64]) {
    let all = endpoints(t);
    let mut cache = Cache::default();
    for &src in &all {
        for &dst in &all {
            for &h in hashes {
                check_flow_cached(t, src, dst, h, &mut cache);
            }
        }
    }
}

pub fn check_flow(t: &Topology, src: NodeId, dst: NodeId, hash: u64) {
    check_flow_cached(t, src, dst, hash, &mut Cache::default());
}

/// BFS results by start node, per kind of search.
#[derive(Default)]
struct Cache {
    all: BTreeMap<NodeId, Vec<u32>>,
    network: BTreeMap<NodeId, Vec<u32>>,
    host: BTreeMap<NodeId, Vec<u32>>,
}

fn check_flow_cached(t: &Topology, src: NodeId, dst: NodeId, hash: u64, cache: &mut Cache) {
    let is_graph = matches!(t.routing, Routing::Graph(_));
    let endpoint = |n: NodeId| kind(t, n).is_endpoint();
    let all = cache
        .all
        .entry(src)
        .or_insert_with(|| bfs(t, src, |_| true, |n| !endpoint(n)));
    let reach = all[dst as usize];
    let path = match t.path(src, dst, hash) {
        Ok(p) => p,
        Err(RoutingError::Unreachable { .. }) if reach == u32::MAX => return,
        Err(e) => panic!("{src}→{dst} (hash {hash}): {e}"),
    };
    assert_ne!(
        reach,
        u32::MAX,
        "{src}→{dst}: routed although BFS finds no way"
    );
    if src == dst {
        assert!(path.is_empty());
        return;
    }
    // Contiguous, ends at dst, loop-free; every hop is in a sorted ECMP set.
    let mut seen = BTreeSet::from([src]);
    let mut at = src;
    let mut hops = Vec::new();
    for &l in &path {
        let link = &t.link(l);
        assert_eq!(
            link.src, at,
            "{src}→{dst}: link {l} does not start where the path is"
        );
        t.next_hops(at, src, dst, &mut hops)
            .expect("a node on a routed path has next hops");
        assert!(
            hops.windows(2).all(|w| w[0] < w[1]),
            "next hops not ascending: {hops:?}"
        );
        assert!(hops.contains(&l));
        at = link.dst;
        assert!(seen.insert(at), "{src}→{dst}: node {at} visited twice");
    }
    assert_eq!(at, dst);
    let first_net = path
        .iter()
        .position(|&l| t.link(l).class == LinkClass::Network);
    if is_graph || first_net.is_none() {
        // Whole path as short as BFS where endpoints do not forward.
        assert_eq!(path.len() as u32, reach, "{src}→{dst}: not a shortest path");
        return;
    }
    let i0 = first_net.unwrap_or(0);
    let i1 = path
        .iter()
        .rposition(|&l| t.link(l).class == LinkClass::Network)
        .unwrap_or(0);
    let (nic_a, nic_b) = (t.link(path[i0]).src, t.link(path[i1]).dst);
    assert_eq!(kind(t, nic_a), NodeKind::Nic);
    assert_eq!(kind(t, nic_b), NodeKind::Nic);
    // NIC → NIC: BFS over network links where only switches forward.
    let is_switch = |n: NodeId| {
        matches!(
            kind(t, n),
            NodeKind::Leaf | NodeKind::Spine | NodeKind::Core
        )
    };
    let net = cache
        .network
        .entry(nic_a)
        .or_insert_with(|| bfs(t, nic_a, |l| l.class == LinkClass::Network, is_switch));
    assert_eq!(
        (i1 - i0 + 1) as u32,
        net[nic_b as usize],
        "{src}→{dst}: NIC→NIC part not shortest"
    );
    // Inside the hosts: BFS over that host's links; GPUs and NICs do not forward.
    let inside = |a: NodeId, b: NodeId, cache: &mut Cache| {
        let host = t.nodes()[a as usize].host;
        let d = cache.host.entry(a).or_insert_with(|| {
            bfs(
                t,
                a,
                |l| {
                    t.nodes()[l.src as usize].host == host && t.nodes()[l.dst as usize].host == host
                },
                |n| !matches!(kind(t, n), NodeKind::Gpu | NodeKind::Nic),
            )
        });
        d[b as usize]
    };
    assert_eq!(
        i0 as u32,
        inside(src, nic_a, cache),
        "{src}→{dst}: source host part not shortest"
    );
    assert_eq!(
        (path.len() - 1 - i1) as u32,
        inside(dst, nic_b, cache),
        "{src}→{dst}: destination host part not shortest"
    );
}

/// Same links and same paths from two independent builds.
pub fn check_determinism(toml_text: &str, types: &[GpuSpec]) {
    let a = build_toml(toml_text, types, None);
    let b = build_toml(toml_text, types, None);
    assert_eq!(a.links().collect::<Vec<_>>(), b.links().collect::<Vec<_>>());
    let n = a.gpu_count();
    for i in 0..200u64 {
        let s = (splitmix64(i) % u64::from(n)) as u32;
        let d = (splitmix64(i + 1000) % u64::from(n)) as u32;
        assert_eq!(a.path(a.gpu(s), a.gpu(d), i), b.path(b.gpu(s), b.gpu(d), i));
    }
}

pub fn count_class(t: &Topology, path: &[LinkId], class: LinkClass) -> usize {
    path.iter().filter(|&&l| t.link(l).class == class).count()
}

pub fn hop_targets(t: &Topology, hops: &[LinkId]) -> BTreeSet<NodeId> {
    hops.iter().map(|&l| t.link(l).dst).collect()
}

pub fn switch_neighbours(t: &Topology, n: NodeId, of: NodeKind) -> BTreeSet<NodeId> {
    t.out_links(n)
        .iter()
        .map(|&l| t.link(l).dst)
        .filter(|&m| kind(t, m) == of)
        .collect()
}

/// The nodes of kind `of` that paths of `src → dst` cross over the given hashes, ascending.
pub fn crossed_nodes(
    t: &Topology,
    src: NodeId,
    dst: NodeId,
    hashes: std::ops::Range<u64>,
    of: NodeKind,
) -> Vec<NodeId> {
    let mut crossed = BTreeSet::new();
    for h in hashes {
        for l in t.path(src, dst, h).expect("the pair is routed") {
            let n = t.link(l).dst;
            if kind(t, n) == of {
                crossed.insert(n);
            }
        }
    }
    crossed.into_iter().collect()
}
