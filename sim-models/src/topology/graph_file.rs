//! Explicit topologies (`cluster.topology = "graph"`): a TOML file of nodes and cables.
//!
//! ```toml
//! [[nodes]]
//! name = "gpu0"
//! kind = "gpu"          # gpu | nvswitch | pcie-switch | cpu | nic | leaf | spine | core | cxl-switch | memory-node
//! host = 0              # optional
//! [[links]]
//! a = "gpu0"
//! b = "sw0"
//! class = "nvlink"      # nvlink | pcie | network | cxl
//! gb_s = 450.0          # per direction, GB/s (or gbps = … in Gb/s; exactly one of the two)
//! latency_ns = 100.0    # optional: cluster.latency_ns of the class
//! ```
//!
//! Node ids follow file order; GPU ranks are the GPU nodes in file order; cable `i` is links
//! `2i` (a→b) and `2i+1` (b→a). Routing is by shortest paths in which GPUs and memory nodes
//! never forward (see `routing.rs`).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::{ClusterConfig, ConfigError, parse_typed};
use crate::gpu::GpuSpec;
use crate::time::SimTime;

use super::routing::{GraphRoutes, Routing};
use super::{
    Builder, HOST_NONE, Latencies, LinkClass, NodeId, NodeKind, Topology, TopologyError, ns_to_ps,
};

/// A parsed and checked graph file.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphFile {
    /// The file name errors are reported against.
    pub file: String,
    pub nodes: Vec<GraphNode>,
    pub links: Vec<GraphLink>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GraphNode {
    pub name: String,
    pub kind: NodeKind,
    pub host: Option<u32>,
}

/// One cable of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphLink {
    /// Index into [`GraphFile::nodes`].
    pub a: NodeId,
    pub b: NodeId,
    pub class: LinkClass,
    /// Per direction.
    pub bytes_per_s: f64,
    /// `None`: `cluster.latency_ns` of the class.
    pub latency_ns: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    nodes: Vec<NodeToml>,
    #[serde(default)]
    links: Vec<LinkToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeToml {
    name: String,
    kind: NodeKind,
    host: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkToml {
    a: String,
    b: String,
    class: LinkClass,
    gb_s: Option<f64>,
    gbps: Option<f64>,
    latency_ns: Option<f64>,
}

impl GraphFile {
    /// Parses and checks a graph file: unique names, links between known nodes and not to
    /// themselves, exactly one positive bandwidth per link, latencies ≥ 0.
    pub fn parse(file_name: &str, text: &str) -> Result<GraphFile, ConfigError> {
        let raw: FileToml = parse_typed(file_name, text)?;
        let err = |key: String, message: String| ConfigError::plain(file_name, &key, message);
        // Ids must stay below u32::MAX, and links come in pairs.
        if raw.nodes.len() >= u32::MAX as usize || raw.links.len() >= (u32::MAX / 2) as usize {
            return Err(ConfigError::at_file(
                file_name,
                "has more nodes or links than 32-bit ids address",
            ));
        }
        let mut by_name: BTreeMap<&str, u32> = BTreeMap::new();
        let mut nodes = Vec::with_capacity(raw.nodes.len());
        for (i, n) in raw.nodes.iter().enumerate() {
            if n.name.is_empty() {
                return Err(err(
                    format!("nodes[{i}].name"),
                    "node name must not be empty".into(),
                ));
            }
            if let Some(first) = by_name.insert(&n.name, i as u32) {
                return Err(err(
                    format!("nodes[{i}].name"),
                    format!(
                        "duplicate node name `{}` (first defined at nodes[{first}])",
                        n.name
                    ),
                ));
            }
            if n.host == Some(HOST_NONE) {
                return Err(err(
                    format!("nodes[{i}].host"),
                    format!("host must be below {HOST_NONE}"),
                ));
            }
        }
        let mut links = Vec::with_capacity(raw.links.len());
        for (i, l) in raw.links.into_iter().enumerate() {
            let find = |side: &str, name: &str| {
                by_name.get(name).copied().ok_or_else(|| {
                    err(
                        format!("links[{i}].{side}"),
                        format!("link {i} names unknown node `{name}`"),
                    )
                })
            };
            let a = find("a", &l.a)?;
            let b = find("b", &l.b)?;
            if a == b {
                return Err(err(
                    format!("links[{i}]"),
                    format!("link {i} joins node `{}` to itself", l.a),
                ));
            }
            let (key, bytes_per_s) = match (l.gb_s, l.gbps) {
                (Some(g), None) => ("gb_s", g * 1e9),
                (None, Some(g)) => ("gbps", super::gbps_to_bytes(g)),
                _ => {
                    return Err(err(
                        format!("links[{i}]"),
                        format!("link {i} needs exactly one of gb_s (GB/s) or gbps (Gb/s)"),
                    ));
                }
            };
            if !(bytes_per_s.is_finite() && bytes_per_s > 0.0) {
                return Err(err(
                    format!("links[{i}].{key}"),
                    format!("link {i} bandwidth must be a finite number > 0"),
                ));
            }
            if let Some(ns) = l.latency_ns {
                ns_to_ps(ns, "latency_ns")
                    .map_err(|e| err(format!("links[{i}].latency_ns"), e.to_string()))?;
            }
            let class = l.class;
            links.push(GraphLink {
                a,
                b,
                class,
                bytes_per_s,
                latency_ns: l.latency_ns,
            });
        }
        drop(by_name);
        for n in raw.nodes {
            nodes.push(GraphNode {
                name: n.name,
                kind: n.kind,
                host: n.host,
            });
        }
        Ok(GraphFile {
            file: file_name.to_string(),
            nodes,
            links,
        })
    }

    pub fn gpu_count(&self) -> u32 {
        // `parse` bounds the node count by u32.
        self.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Gpu)
            .count() as u32
    }
}

/// Builds the topology of a graph file and checks it against the cluster: as many GPUs as
/// `cluster.gpus`, every GPU reachable from every other.
pub(crate) fn build(
    cluster: &ClusterConfig,
    _gpu_types: &[GpuSpec],
    host_gpu_type: &[u16],
    graph: &GraphFile,
    latency: Latencies,
) -> Result<Topology, TopologyError> {
    let gpus = graph.gpu_count();
    if gpus != cluster.gpus {
        return Err(TopologyError::config(
            "cluster.gpus",
            format!(
                "cluster.gpus ({}) must equal the number of gpu nodes in {} ({gpus})",
                cluster.gpus, graph.file
            ),
        ));
    }
    let mut b = Builder::new(latency, graph.nodes.len(), graph.links.len());
    let mut per_kind: BTreeMap<NodeKind, u32> = BTreeMap::new();
    let mut gpu_of_rank = Vec::with_capacity(gpus as usize);
    let mut host_count = 0u32;
    for n in &graph.nodes {
        let index = per_kind.entry(n.kind).or_insert(0);
        let id = b.add_node(n.kind, n.host.unwrap_or(HOST_NONE), *index)?;
        *index += 1;
        if n.kind == NodeKind::Gpu {
            gpu_of_rank.push(id);
        }
        if let Some(h) = n.host {
            host_count = host_count.max(h + 1);
        }
    }
    for l in &graph.links {
        let latency = SimTime::from_ps(match l.latency_ns {
            Some(ns) => ns_to_ps(ns, "latency_ns")?,
            None => latency.of(l.class),
        });
        b.cable_with_latency(l.a, l.b, l.class, l.bytes_per_s, latency)?;
    }
    let endpoints = GraphRoutes::new(graph.nodes.iter().map(|n| n.kind));
    let t = b.finish(
        gpu_of_rank,
        host_count,
        host_gpu_type.to_vec(),
        Routing::Graph(endpoints),
    );
    check_connected(&t, graph)?;
    Ok(t)
}

/// Every GPU must reach GPU 0 without passing through another endpoint, and every memory node
/// must have a link: routing has no other way around.
fn check_connected(t: &Topology, graph: &GraphFile) -> Result<(), TopologyError> {
    for (i, n) in graph.nodes.iter().enumerate() {
        if n.kind == NodeKind::MemoryNode && t.out_links(i as NodeId).is_empty() {
            return Err(ConfigError::plain(
                &graph.file,
                &format!("nodes[{i}]"),
                format!("memory node `{}` has no link", n.name),
            )
            .into());
        }
    }
    let Routing::Graph(routes) = &t.routing else {
        return Ok(());
    };
    if t.gpu_count() == 0 {
        return Ok(());
    }
    let first = t.gpu(0);
    let dist = routes.distances(t, first);
    for rank in 1..t.gpu_count() {
        let g = t.gpu(rank);
        if dist[g as usize] == u32::MAX {
            return Err(ConfigError::plain(
                &graph.file,
                &format!("nodes[{g}]"),
                format!(
                    "gpu `{}` cannot reach gpu `{}` (routes may not pass through GPUs or memory \
                     nodes); add links",
                    graph.nodes[g as usize].name, graph.nodes[first as usize].name
                ),
            )
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;

    /// A ring of four switches with a GPU each, a two-level tree (two leaves of two GPUs under
    /// a spine) hung off the ring, and a memory node on a CXL switch shared by gpu0 and gpu1.
    const RING_AND_TREE: &str = r#"
nodes = [
  { name = "gpu0", kind = "gpu", host = 0 },
  { name = "gpu1", kind = "gpu", host = 0 },
  { name = "gpu2", kind = "gpu", host = 1 },
  { name = "gpu3", kind = "gpu", host = 1 },
  { name = "gpu4", kind = "gpu" },
  { name = "gpu5", kind = "gpu" },
  { name = "gpu6", kind = "gpu" },
  { name = "gpu7", kind = "gpu" },
  { name = "r0", kind = "nvswitch" },
  { name = "r1", kind = "nvswitch" },
  { name = "r2", kind = "nvswitch" },
  { name = "r3", kind = "nvswitch" },
  { name = "leaf0", kind = "leaf" },
  { name = "leaf1", kind = "leaf" },
  { name = "spine", kind = "spine" },
  { name = "cxl", kind = "cxl-switch" },
  { name = "mem", kind = "memory-node" },
]
links = [
  { a = "r0", b = "r1", class = "nvlink", gb_s = 450, latency_ns = 150 },
  { a = "r1", b = "r2", class = "nvlink", gb_s = 450 },
  { a = "r2", b = "r3", class = "nvlink", gb_s = 450 },
  { a = "r3", b = "r0", class = "nvlink", gb_s = 450 },
  { a = "gpu0", b = "r0", class = "nvlink", gb_s = 450 },
  { a = "gpu1", b = "r1", class = "nvlink", gb_s = 450 },
  { a = "gpu2", b = "r2", class = "nvlink", gb_s = 450 },
  { a = "gpu3", b = "r3", class = "nvlink", gb_s = 450 },
  { a = "gpu4", b = "leaf0", class = "network", gbps = 400 },
  { a = "gpu5", b = "leaf0", class = "network", gbps = 400 },
  { a = "gpu6", b = "leaf1", class = "network", gbps = 400 },
  { a = "gpu7", b = "leaf1", class = "network", gbps = 400 },
  { a = "leaf0", b = "spine", class = "network", gbps = 800 },
  { a = "leaf1", b = "spine", class = "network", gbps = 800 },
  { a = "spine", b = "r0", class = "network", gbps = 800 },
  { a = "gpu0", b = "cxl", class = "cxl", gb_s = 64 },
  { a = "gpu1", b = "cxl", class = "cxl", gb_s = 64 },
  { a = "mem", b = "cxl", class = "cxl", gb_s = 64 },
]
"#;

    fn graph_topology(text: &str, gpus: u32) -> Result<Topology, TopologyError> {
        let g = GraphFile::parse("ring.toml", text)?;
        try_build_toml(
            &format!("gpus = {gpus}\ngpus_per_host = 2\ntopology = \"graph\"\n"),
            &[h100()],
            Some(g),
        )
    }

    #[test]
    fn ring_and_tree_graph_routes_by_shortest_paths() {
        let t = graph_topology(RING_AND_TREE, 8).unwrap();
        assert_eq!(t.gpu_count(), 8);
        assert_eq!(t.host_count(), 2);
        assert_eq!(t.links().len(), 36);
        assert_eq!(t.link(0).latency.as_ps(), 150_000);
        // Unspecified latency: the class default (cluster.latency_ns.network = 1000).
        assert_eq!(t.link(16).latency.as_ps(), 1_000_000);
        assert!((t.link(16).bytes_per_s - 50e9).abs() < 1.0);
        let mem = 16;
        assert_eq!(t.nodes()[mem as usize].kind, NodeKind::MemoryNode);
        check_all_pairs(&t, &[0, 1, 2, 3]);
        // Opposite ring corners: two equal ways round the ring, both taken over many hashes.
        let firsts: BTreeSet<LinkId> = (0..64)
            .map(|h| {
                let p = t.path(t.gpu(0), t.gpu(2), h).unwrap();
                assert_eq!(p.len(), 4);
                p[1]
            })
            .collect();
        assert_eq!(firsts.len(), 2);
        // Tree to ring: gpu4 → leaf0 → spine → r0 → r1 → gpu1.
        assert_eq!(t.path(t.gpu(4), t.gpu(1), 0).unwrap().len(), 5);
        // The memory node is reached through the CXL switch, and only from gpu0 and gpu1: no
        // route passes through a GPU.
        assert_eq!(t.path(t.gpu(0), mem, 0).unwrap().len(), 2);
        assert!(matches!(
            t.path(mem, t.gpu(3), 0),
            Err(RoutingError::Unreachable { .. })
        ));
        // A GPU never forwards.
        let mut hops = Vec::new();
        assert!(matches!(
            t.next_hops(t.gpu(1), t.gpu(0), t.gpu(2), &mut hops),
            Err(RoutingError::NotOnPath { .. })
        ));
        check_determinism_graph(RING_AND_TREE);
    }

    fn check_determinism_graph(text: &str) {
        let a = graph_topology(text, 8).unwrap();
        let b = graph_topology(text, 8).unwrap();
        for s in 0..8 {
            for d in 0..8 {
                for h in 0..8 {
                    assert_eq!(a.path(a.gpu(s), a.gpu(d), h), b.path(b.gpu(s), b.gpu(d), h));
                }
            }
        }
    }

    #[test]
    fn graph_file_errors_name_the_place() {
        let node =
            |name: &str, kind: &str| format!("[[nodes]]\nname = \"{name}\"\nkind = \"{kind}\"\n");
        let link = |a: &str, b: &str, extra: &str| {
            format!("[[links]]\na = \"{a}\"\nb = \"{b}\"\nclass = \"pcie\"\n{extra}")
        };
        let two = format!("{}{}", node("g0", "gpu"), node("g1", "gpu"));
        let cases = [
            (
                format!("{two}{}", node("g0", "cpu")),
                "nodes[2].name",
                "duplicate",
            ),
            (
                format!("{two}{}", link("g0", "x", "gb_s = 1\n")),
                "links[0].b",
                "unknown node `x`",
            ),
            (
                format!("{two}{}", link("g0", "g0", "gb_s = 1\n")),
                "links[0]",
                "itself",
            ),
            (
                format!("{two}{}", link("g0", "g1", "gb_s = 0\n")),
                "links[0].gb_s",
                "> 0",
            ),
            (
                format!("{two}{}", link("g0", "g1", "gb_s = 1\ngbps = 8\n")),
                "links[0]",
                "exactly one",
            ),
            (
                format!("{two}{}", link("g0", "g1", "")),
                "links[0]",
                "exactly one",
            ),
            (
                format!("{two}{}", link("g0", "g1", "gb_s = 1\nlatency_ns = -3\n")),
                "links[0].latency_ns",
                "latency",
            ),
            (node("g0", "gpx"), "nodes[0].kind", "unknown value"),
            (
                format!("{two}{}", link("g0", "g1", "gb_s = 1\ncolor = 2\n")),
                "links[0].color",
                "unknown key",
            ),
        ];
        for (text, key, msg) in cases {
            let err = GraphFile::parse("g.toml", &text).unwrap_err();
            assert_eq!(err.key, key, "{text}: {err}");
            assert!(err.to_string().contains(msg), "{text}: {err}");
            assert!(err.to_string().contains("g.toml"), "{err}");
        }
        // Against the cluster: GPU count and connectivity.
        let text = format!("{two}{}", link("g0", "g1", "gb_s = 1\n"));
        let err = graph_topology(&text, 3).unwrap_err();
        assert_eq!(err.key(), "cluster.gpus");
        assert!(err.to_string().contains("(2)"), "{err}");
        let text = format!(
            "{two}{}{}{}",
            node("g2", "gpu"),
            node("s", "pcie-switch"),
            link("g0", "s", "gb_s = 1\n")
        );
        let text = format!("{text}{}", link("g1", "s", "gb_s = 1\n"));
        let err = graph_topology(&text, 3).unwrap_err();
        assert_eq!(err.key(), "cluster.graph_file");
        assert!(
            err.to_string().contains("gpu `g2` cannot reach gpu `g0`"),
            "{err}"
        );
        // A GPU joined to the others only through another GPU is disconnected too.
        let text = format!(
            "{two}{}{}",
            node("g2", "gpu"),
            link("g0", "g1", "gb_s = 1\n")
        );
        let text = format!("{text}{}", link("g1", "g2", "gb_s = 1\n"));
        assert!(
            graph_topology(&text, 3)
                .unwrap_err()
                .to_string()
                .contains("gpu `g2` cannot reach")
        );
        // topology = "graph" without a file, and a file for another topology.
        let err = try_build_toml(
            "gpus = 2\ngpus_per_host = 2\ntopology = \"graph\"\n",
            &[h100()],
            None,
        )
        .unwrap_err();
        assert_eq!(err.key(), "cluster.graph_file");
        let g = GraphFile::parse(
            "g.toml",
            &format!("{two}{}", link("g0", "g1", "gb_s = 1\n")),
        )
        .unwrap();
        let err = try_build_toml("gpus = 2\ngpus_per_host = 2\n", &[h100()], Some(g)).unwrap_err();
        assert_eq!(err.key(), "cluster.graph_file");
    }
}
