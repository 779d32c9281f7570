//! The cluster topology: nodes (GPUs, switches, NICs, memory nodes) and directed links, built
//! from the `[cluster]` table, and routing over them.
//!
//! Generators:
//! - inside a host (`host.rs`): GPUs, PCIe switches, the CPU root complex, NICs, the scale-up
//!   fabric (one NVSwitch node per NVLink domain, or a point-to-point mesh for AMD Infinity
//!   Fabric), and an optional CXL tier with memory nodes (HCSim);
//! - the scale-out fabric (`clos.rs`): one folded-Clos builder for rail-optimised, fat-tree and
//!   spine-leaf networks;
//! - an explicit graph file (`graph_file.rs`).
//!
//! Routing (`routing.rs`) is computed from structure (up/down through the Clos, arithmetic on
//! node coordinates); only explicit graphs fall back to shortest paths, cached per destination.
//! Nothing here is O(GPUs²): a 131,072-GPU rail-optimised cluster builds in well under a second.
//!
//! Conventions: every physical cable is two directed links with ids `2i` (a→b) and `2i+1`
//! (b→a), so the reverse of link `l` is `l ^ 1`; bandwidth is bytes/s per direction; latency is
//! integer picoseconds (DESIGN.md: no floating point in time arithmetic).

use crate::time::SimTime;
use std::collections::BTreeMap;
use std::fmt;

use crate::config::{ClusterConfig, ConfigError, LatencyConfig, LoadedConfig, TopologyKind};
use crate::gpu::GpuSpec;

mod clos;
mod graph_file;
mod host;
mod routing;
mod structured;
#[cfg(any(test, feature = "testutil"))]
pub mod testutil;

pub use graph_file::{GraphFile, GraphLink, GraphNode};
pub use routing::{RoutingError, ecmp_pick};

/// Index of a node in [`Topology::nodes`].
pub type NodeId = u32;
/// Index of a directed link ([`Topology::link`]).
pub type LinkId = u32;

/// [`Node::host`] of nodes shared by several hosts (fabric switches, multi-host NVSwitch and
/// CXL domains) or, in graph files, not placed in a host.
pub const HOST_NONE: u32 = u32::MAX;

/// What a node is. The order is the order of [`Topology::count_by_kind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeKind {
    Gpu,
    #[serde(rename = "nvswitch")]
    NvSwitch,
    PcieSwitch,
    /// The CPU's PCIe root complex: joins the PCIe switches of a host.
    Cpu,
    Nic,
    Leaf,
    /// A tier-2 switch (a spine, or a fat-tree aggregation switch).
    Spine,
    Core,
    CxlSwitch,
    MemoryNode,
}

impl NodeKind {
    pub const ALL: [NodeKind; 10] = [
        NodeKind::Gpu,
        NodeKind::NvSwitch,
        NodeKind::PcieSwitch,
        NodeKind::Cpu,
        NodeKind::Nic,
        NodeKind::Leaf,
        NodeKind::Spine,
        NodeKind::Core,
        NodeKind::CxlSwitch,
        NodeKind::MemoryNode,
    ];

    /// The name used in graph files and reports.
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Gpu => "gpu",
            NodeKind::NvSwitch => "nvswitch",
            NodeKind::PcieSwitch => "pcie-switch",
            NodeKind::Cpu => "cpu",
            NodeKind::Nic => "nic",
            NodeKind::Leaf => "leaf",
            NodeKind::Spine => "spine",
            NodeKind::Core => "core",
            NodeKind::CxlSwitch => "cxl-switch",
            NodeKind::MemoryNode => "memory-node",
        }
    }

    /// Flows start and end at GPUs and memory nodes; nothing else is an endpoint.
    pub fn is_endpoint(self) -> bool {
        matches!(self, NodeKind::Gpu | NodeKind::MemoryNode)
    }
}

/// The technology of a link; it selects the latency of `cluster.latency_ns` and the network
/// model of the link (`network.intra_host` applies to NVLink and PCIe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkClass {
    NvLink,
    Pcie,
    Network,
    Cxl,
}

impl LinkClass {
    pub fn name(self) -> &'static str {
        match self {
            LinkClass::NvLink => "nvlink",
            LinkClass::Pcie => "pcie",
            LinkClass::Network => "network",
            LinkClass::Cxl => "cxl",
        }
    }
}

/// Packed: 9 bytes where alignment made it 12, 8.8 MB less at 1,048,576 GPUs in every
/// process's copy (fields are read by value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed)]
pub struct Node {
    pub kind: NodeKind,
    /// The host the node sits in, or [`HOST_NONE`] for shared switches.
    pub host: u32,
    /// Index within its kind: GPU rank, global NIC number, leaf number, NVLink domain of an
    /// NVSwitch, …
    pub index: u32,
}

/// One direction of a cable.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub src: NodeId,
    pub dst: NodeId,
    pub class: LinkClass,
    /// Per direction.
    pub bytes_per_s: f64,
    pub latency: SimTime,
}

/// What the links of one kind share. A cluster has a handful of kinds (a graph file at most
/// one per cable), so a link stores an index into them.
#[derive(Clone, Copy, Debug, PartialEq)]
struct LinkKind {
    class: LinkClass,
    bytes_per_s: f64,
    latency_ps: u64,
}

/// A cable as the topology keeps it: its two links, `2i` (a→b) and `2i + 1` (b→a), share
/// its kind. 6 bytes a link where a [`Link`] takes 32: at 131,072 GPUs (1.7 M links, a copy
/// in every worker) that saves 44 MB per process.
#[derive(Clone, Copy, Debug)]
struct CableRecord {
    a: NodeId,
    b: NodeId,
    kind: u32,
}

/// Interns link kinds in order of first use (deterministic: no hashing).
#[derive(Debug, Default)]
struct LinkKinds {
    kinds: Vec<LinkKind>,
    index: BTreeMap<(LinkClass, u64, u64), u32>,
}

impl LinkKinds {
    fn intern(&mut self, kind: LinkKind) -> u32 {
        let key = (kind.class, kind.bytes_per_s.to_bits(), kind.latency_ps);
        let next = self.kinds.len() as u32;
        *self.index.entry(key).or_insert_with(|| {
            self.kinds.push(kind);
            next
        })
    }
}

/// A configuration the topology cannot be built from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// A value of `[cluster]` is out of range or inconsistent with another; `key` is the dotted
    /// key to fix (e.g. `cluster.nics_per_host`).
    #[error("{message}")]
    Config { key: String, message: String },
    /// The explicit graph file (`cluster.graph_file`) is malformed; the error names its file.
    #[error(transparent)]
    GraphFile(#[from] ConfigError),
}

impl TopologyError {
    pub(crate) fn config(key: &str, message: impl Into<String>) -> Self {
        TopologyError::Config {
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// The experiment key to fix.
    pub fn key(&self) -> &str {
        match self {
            TopologyError::Config { key, .. } => key,
            TopologyError::GraphFile(_) => "cluster.graph_file",
        }
    }

    /// The error located where the offending key was written (graph file errors already name
    /// their file).
    pub fn located(self, config: &LoadedConfig) -> ConfigError {
        match self {
            TopologyError::Config { key, message } => config.error(&key, message),
            TopologyError::GraphFile(e) => e,
        }
    }
}

/// Nodes, links, out-adjacency (CSR) and the routing structure of a cluster.
pub struct Topology {
    nodes: Vec<Node>,
    cables: Vec<CableRecord>,
    link_kinds: Vec<LinkKind>,
    /// `out_ids[out_start[n]..out_start[n + 1]]` are the links leaving `n`, ascending.
    out_start: Vec<u32>,
    /// A link's far end and class are read from its cable: arrays of them beside `out_ids`
    /// took 5 bytes a link, 69 MB at 1,048,576 GPUs in every worker's copy.
    out_ids: Vec<LinkId>,
    gpu_of_rank: Vec<NodeId>,
    host_count: u32,
    /// Per host, an index into the `gpu_types` the topology was built with.
    host_gpu_type: Vec<u16>,
    lookahead: Option<SimTime>,
    routing: routing::Routing,
    /// Cables that are down (`[[faults]]`), ascending; routing never takes their links.
    down_cables: Vec<u32>,
}

/// A summary: the full `{:?}` of a 131,072-GPU cluster would be hundreds of megabytes.
impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topology")
            .field("nodes", &self.nodes.len())
            .field("links", &self.link_count())
            .field("gpus", &self.gpu_of_rank.len())
            .field("hosts", &self.host_count)
            .field("lookahead", &self.lookahead)
            .finish_non_exhaustive()
    }
}

impl Topology {
    /// Builds the topology of `cluster`. `gpu_types[host_gpu_type[h]]` is the GPU of host `h`
    /// (one entry per host, `cluster.gpus / cluster.gpus_per_host` of them); `graph` is the
    /// parsed `cluster.graph_file` when `cluster.topology = "graph"`.
    pub fn build(
        cluster: &ClusterConfig,
        gpu_types: &[GpuSpec],
        host_gpu_type: &[u16],
        graph: Option<GraphFile>,
    ) -> Result<Topology, TopologyError> {
        let latency = Latencies::from_config(&cluster.latency_ns)?;
        match (cluster.topology, graph) {
            (TopologyKind::Graph, Some(graph)) => {
                graph_file::build(cluster, gpu_types, host_gpu_type, &graph, latency)
            }
            (TopologyKind::Graph, None) => Err(TopologyError::config(
                "cluster.graph_file",
                "cluster.topology = \"graph\" needs cluster.graph_file (a TOML file of [[nodes]] \
                 and [[links]])",
            )),
            (_, Some(_)) => Err(TopologyError::config(
                "cluster.graph_file",
                "cluster.graph_file is given but cluster.topology is not \"graph\"; set \
                 cluster.topology = \"graph\" or remove cluster.graph_file",
            )),
            (_, None) => structured::build_structured(cluster, gpu_types, host_gpu_type, latency),
        }
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Link `id`. Panics if `id` is not a link of this topology.
    pub fn link(&self, id: LinkId) -> Link {
        let c = self.cables[id as usize / 2];
        let k = self.link_kinds[c.kind as usize];
        let (src, dst) = if id.is_multiple_of(2) {
            (c.a, c.b)
        } else {
            (c.b, c.a)
        };
        Link {
            src,
            dst,
            class: k.class,
            bytes_per_s: k.bytes_per_s,
            latency: SimTime::from_ps(k.latency_ps),
        }
    }

    /// Node `n` as reports and `[[faults]]` name it: its kind and index (`gpu3`, `leaf0`).
    pub fn node_name(&self, n: NodeId) -> String {
        let node = self.nodes[n as usize];
        format!("{}{}", node.kind.name(), { node.index })
    }

    /// Takes cable `cable` (links `2·cable` and `2·cable + 1`) out of routing: a link fault.
    pub fn set_cable_down(&mut self, cable: u32) {
        if let Err(i) = self.down_cables.binary_search(&cable) {
            self.down_cables.insert(i, cable);
        }
        if let routing::Routing::Graph(g) = &mut self.routing {
            g.forget_distances();
        }
    }

    /// Whether link `id`'s cable is down.
    pub fn is_down(&self, id: LinkId) -> bool {
        !self.down_cables.is_empty() && self.down_cables.binary_search(&(id / 2)).is_ok()
    }

    /// Whether any cable is down.
    pub fn has_down_cables(&self) -> bool {
        !self.down_cables.is_empty()
    }

    /// Cable `cable` runs at `factor` of its rate in both directions: a link fault.
    pub fn degrade_cable(&mut self, cable: u32, factor: f64) {
        let c = &mut self.cables[cable as usize];
        let mut kind = self.link_kinds[c.kind as usize];
        kind.bytes_per_s *= factor;
        c.kind = match self.link_kinds.iter().position(|k| *k == kind) {
            Some(i) => i as u32,
            None => {
                self.link_kinds.push(kind);
                (self.link_kinds.len() - 1) as u32
            }
        };
    }

    /// Link `id`'s far end: what routing walks, without the rest of [`Topology::link`].
    pub(crate) fn link_dst(&self, id: LinkId) -> NodeId {
        let c = self.cables[id as usize / 2];
        if id.is_multiple_of(2) { c.b } else { c.a }
    }

    /// Link `id`'s class, without the rest of [`Topology::link`].
    pub(crate) fn link_class(&self, id: LinkId) -> LinkClass {
        self.link_kinds[self.cables[id as usize / 2].kind as usize].class
    }

    /// Link `id`, or `None` past the last link.
    pub fn get_link(&self, id: LinkId) -> Option<Link> {
        ((id as usize) < self.link_count()).then(|| self.link(id))
    }

    pub fn link_count(&self) -> usize {
        self.cables.len() * 2
    }

    /// Every link, in id order.
    pub fn links(&self) -> impl ExactSizeIterator<Item = Link> + '_ {
        (0..self.link_count() as LinkId).map(|id| self.link(id))
    }

    /// Links leaving `n`, in ascending id order. Panics if `n` is not a node of this topology.
    pub fn out_links(&self, n: NodeId) -> &[LinkId] {
        let i = n as usize;
        &self.out_ids[self.out_start[i] as usize..self.out_start[i + 1] as usize]
    }

    /// The node of GPU `rank`. Panics if `rank >= gpu_count()`.
    pub fn gpu(&self, rank: u32) -> NodeId {
        self.gpu_of_rank[rank as usize]
    }

    pub fn gpu_count(&self) -> u32 {
        // Fits: ranks come from `cluster.gpus: u32`.
        self.gpu_of_rank.len() as u32
    }

    pub fn host_count(&self) -> u32 {
        self.host_count
    }

    /// The node NCCL sees GPU `rank` in: its NVLink domain when one spans several hosts
    /// (NCCL 2.20+ Multi-Node NVLink treats a domain, a "clique", as one node), otherwise
    /// its host. Graph topologies use the host.
    pub fn nccl_node(&self, rank: u32) -> u32 {
        match &self.routing {
            routing::Routing::Structured(s) if s.scale_up.domain_size > s.hosts.gpus_per_host => {
                rank / s.scale_up.domain_size
            }
            _ => self.nodes[self.gpu(rank) as usize].host,
        }
    }

    /// The rank whose NIC carries a point-to-point send from rank `src` to rank `dst`: NCCL
    /// sends it through the local NIC bound to the peer's device index, relayed over NVLink
    /// by the local GPU there (PXN; `NCCL_P2P_PXN_LEVEL` = 2 by default, `src/graph/search.cc`,
    /// `ncclTopoGetNetDev`), so that it stays on the peer's rail. `None` where the send leaves
    /// from `src`'s own NIC: inside one NCCL node, when both are bound to the same NIC, in a
    /// host without NVLink, and in graph topologies.
    pub fn p2p_relay(&self, src: u32, dst: u32) -> Option<u32> {
        let routing::Routing::Structured(s) = &self.routing else {
            return None;
        };
        if self.nccl_node(src) == self.nccl_node(dst) {
            return None;
        }
        let hosts = &s.hosts;
        let (host, local) = hosts.split(self.gpu(src));
        let (_, peer_local) = hosts.split(self.gpu(dst));
        if peer_local >= hosts.gpus_per_host
            || hosts.nic_of_gpu(local) == hosts.nic_of_gpu(peer_local)
        {
            return None;
        }
        let domain = (src / s.scale_up.domain_size.max(1)) as usize;
        if matches!(
            s.scale_up.fabric.get(domain),
            None | Some(host::DomainFabric::None)
        ) {
            return None;
        }
        let relay = self.nodes.get(hosts.gpu(host, peer_local) as usize)?;
        (relay.kind == NodeKind::Gpu).then_some(relay.index)
    }

    /// Whether every equal-cost choice at a fabric switch (leaf, spine, core) leads on to
    /// the destination over routes of the same latency: true for generated topologies,
    /// whose links of one class share one latency (`Builder::cable`) and whose up/down
    /// choices at a switch all go to the same tier of one pod and plane (`routing.rs`),
    /// false for graph files, whose links each have their own latency.
    pub fn fabric_choices_are_alike(&self) -> bool {
        matches!(self.routing, routing::Routing::Structured(_))
    }

    /// Hosts in one [`Topology::nccl_node`]: more than one in a multi-host NVLink domain.
    pub fn hosts_per_nccl_node(&self) -> u32 {
        match &self.routing {
            routing::Routing::Structured(s) if s.hosts.gpus_per_host > 0 => {
                (s.scale_up.domain_size / s.hosts.gpus_per_host).max(1)
            }
            _ => 1,
        }
    }

    /// The CXL memory node GPU `rank` keeps its CXL-resident tensors on: the GPUs under a CXL
    /// switch are spread over its memory nodes in turn. `None` without a CXL tier.
    pub fn cxl_memory_of(&self, rank: u32) -> Option<NodeId> {
        let routing::Routing::Structured(s) = &self.routing else {
            return None;
        };
        let cxl = s.cxl.as_ref()?;
        let gph = s.hosts.gpus_per_host;
        let under_switch = cxl.hosts_per_switch * gph;
        let switch = rank / under_switch;
        let memory = cxl.memory_per_switch.max(1);
        (cxl.memory_per_switch > 0)
            .then(|| cxl.memory_base + switch * memory + (rank % under_switch) % memory)
    }

    /// Per host, the index into the `gpu_types` passed to [`Topology::build`].
    pub fn host_gpu_types(&self) -> &[u16] {
        &self.host_gpu_type
    }

    /// Index into the build's `gpu_types` of GPU `rank` (0 for graph GPUs outside any host).
    pub fn gpu_type(&self, rank: u32) -> u16 {
        let host = self.nodes[self.gpu(rank) as usize].host;
        self.host_gpu_type.get(host as usize).copied().unwrap_or(0)
    }

    pub fn count_by_kind(&self) -> BTreeMap<NodeKind, u32> {
        let mut counts = BTreeMap::new();
        for n in &self.nodes {
            *counts.entry(n.kind).or_insert(0) += 1;
        }
        counts
    }

    /// Per class: the number of directed links and the sum of their bandwidths (bytes/s).
    pub fn links_by_class(&self) -> BTreeMap<LinkClass, (u32, f64)> {
        let mut by = BTreeMap::new();
        for l in self.links() {
            let e = by.entry(l.class).or_insert((0u32, 0.0f64));
            e.0 += 1;
            e.1 += l.bytes_per_s;
        }
        by
    }

    /// Min latency over links whose endpoints are not inside one host (either endpoint
    /// [`HOST_NONE`], or hosts differ): the lookahead a host-preserving partition gets
    /// (DESIGN.md, "Windows and mailboxes"). `None` when every link is inside a host.
    pub fn host_preserving_lookahead(&self) -> Option<SimTime> {
        self.lookahead
    }
}

/// Per-class link latency in picoseconds, from `cluster.latency_ns`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latencies {
    pub nvlink: u64,
    pub pcie: u64,
    pub network: u64,
    pub cxl: u64,
}

impl Latencies {
    fn from_config(l: &LatencyConfig) -> Result<Self, TopologyError> {
        Ok(Latencies {
            nvlink: ns_to_ps(l.nvlink, "cluster.latency_ns.nvlink")?,
            pcie: ns_to_ps(l.pcie, "cluster.latency_ns.pcie")?,
            network: ns_to_ps(l.network, "cluster.latency_ns.network")?,
            cxl: ns_to_ps(l.cxl, "cluster.latency_ns.cxl")?,
        })
    }

    pub fn of(&self, class: LinkClass) -> u64 {
        match class {
            LinkClass::NvLink => self.nvlink,
            LinkClass::Pcie => self.pcie,
            LinkClass::Network => self.network,
            LinkClass::Cxl => self.cxl,
        }
    }
}

/// Nanoseconds (as users write them) to integer picoseconds, rounded to nearest.
pub(crate) fn ns_to_ps(ns: f64, key: &str) -> Result<u64, TopologyError> {
    // 1e12 ns (~17 minutes) is far beyond any link and keeps the product exact enough.
    if !ns.is_finite() || !(0.0..=1e12).contains(&ns) {
        return Err(TopologyError::config(
            key,
            format!("{key} ({ns}) must be a latency between 0 and 1e12 ns"),
        ));
    }
    // In range by the check above, so the cast does not saturate.
    Ok((ns * 1000.0).round() as u64)
}

/// A positive, finite quantity (bandwidth, ratio).
pub(crate) fn positive(value: f64, key: &str) -> Result<f64, TopologyError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(TopologyError::config(
            key,
            format!("{key} ({value}) must be a finite number > 0"),
        ))
    }
}

/// A network line rate in Gb/s: from 1 Gb/s (below, one segment's serialisation outgrows
/// the picosecond clock's range as rates approach zero) to 1 Pb/s (above, a 4 KiB packet
/// serialises in under a picosecond).
pub(crate) fn line_rate_gbps(value: f64, key: &str) -> Result<f64, TopologyError> {
    const RANGE: std::ops::RangeInclusive<f64> = 1.0..=1e6;
    if RANGE.contains(&value) {
        Ok(value)
    } else {
        Err(TopologyError::config(
            key,
            format!(
                "{key} ({value}) must be a line rate from 1 to 1000000 Gb/s (e.g. 400 for an NDR or 400GbE NIC)"
            ),
        ))
    }
}

/// Gb/s (network line rates) to bytes/s.
pub(crate) fn gbps_to_bytes(gbps: f64) -> f64 {
    gbps * 1e9 / 8.0
}

/// For tests (here and in the crates above): a reproducible stream of draws below a bound,
/// from [`crate::hash::splitmix64`].
#[cfg(any(test, feature = "testutil"))]
pub fn draws_from(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut state = seed;
    move |below| {
        state = crate::hash::splitmix64(state);
        state % below
    }
}

/// Accumulates nodes and cables; [`Builder::finish`] lays out the CSR adjacency.
#[derive(Debug)]
pub(crate) struct Builder {
    nodes: Vec<Node>,
    cables: Vec<CableRecord>,
    kinds: LinkKinds,
    latency: Latencies,
}

/// The largest number of links a topology may hold (ids are `u32`, and `u32::MAX` stays free).
const MAX_LINKS: u64 = u32::MAX as u64 - 1;

impl Builder {
    pub fn new(latency: Latencies, nodes: usize, cables: usize) -> Self {
        Builder {
            nodes: Vec::with_capacity(nodes),
            cables: Vec::with_capacity(cables),
            kinds: LinkKinds::default(),
            latency,
        }
    }

    pub fn node_count(&self) -> u32 {
        // `node` keeps the count below u32::MAX.
        self.nodes.len() as u32
    }

    pub fn add_node(
        &mut self,
        kind: NodeKind,
        host: u32,
        index: u32,
    ) -> Result<NodeId, TopologyError> {
        let id = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&id| id < u32::MAX)
            .ok_or_else(|| too_large("nodes"))?;
        self.nodes.push(Node { kind, host, index });
        Ok(id)
    }

    /// A cable between `a` and `b` with the latency of its class: links `2i` (a→b) and `2i+1`.
    pub fn cable(
        &mut self,
        a: NodeId,
        b: NodeId,
        class: LinkClass,
        bytes_per_s: f64,
    ) -> Result<LinkId, TopologyError> {
        let latency = SimTime::from_ps(self.latency.of(class));
        self.cable_with_latency(a, b, class, bytes_per_s, latency)
    }

    pub fn cable_with_latency(
        &mut self,
        a: NodeId,
        b: NodeId,
        class: LinkClass,
        bytes_per_s: f64,
        latency: SimTime,
    ) -> Result<LinkId, TopologyError> {
        if self.cables.len() as u64 * 2 + 2 > MAX_LINKS {
            return Err(too_large("links"));
        }
        let id = (self.cables.len() * 2) as LinkId;
        let kind = self.kinds.intern(LinkKind {
            class,
            bytes_per_s,
            latency_ps: latency.as_ps(),
        });
        self.cables.push(CableRecord { a, b, kind });
        Ok(id)
    }

    /// Lays out the out-adjacency; links were added in id order, so every list is ascending.
    pub fn finish(
        self,
        gpu_of_rank: Vec<NodeId>,
        host_count: u32,
        host_gpu_type: Vec<u16>,
        routing: routing::Routing,
    ) -> Topology {
        let Builder {
            nodes,
            cables,
            kinds,
            ..
        } = self;
        let link_kinds = kinds.kinds;
        // Link `id` in id order, as (source, destination, kind).
        let links = || {
            cables
                .iter()
                .flat_map(|c| [(c.a, c.b, c.kind), (c.b, c.a, c.kind)])
        };
        let mut out_start = vec![0u32; nodes.len() + 1];
        for (src, _, _) in links() {
            out_start[src as usize + 1] += 1;
        }
        for i in 0..nodes.len() {
            out_start[i + 1] += out_start[i];
        }
        let mut fill = out_start.clone();
        let link_count = cables.len() * 2;
        let mut out_ids = vec![0 as LinkId; link_count];
        for (id, (src, _, _)) in links().enumerate() {
            let slot = &mut fill[src as usize];
            out_ids[*slot as usize] = id as LinkId;
            *slot += 1;
        }
        // Both links of a cable join the same hosts and share a latency: one per cable.
        let lookahead = cables
            .iter()
            .filter(|c| {
                let (a, b) = (nodes[c.a as usize].host, nodes[c.b as usize].host);
                a == HOST_NONE || b == HOST_NONE || a != b
            })
            .map(|c| SimTime::from_ps(link_kinds[c.kind as usize].latency_ps))
            .min();
        Topology {
            nodes,
            cables,
            link_kinds,
            out_start,
            out_ids,
            gpu_of_rank,
            host_count,
            host_gpu_type,
            lookahead,
            routing,
            down_cables: Vec::new(),
        }
    }
}

fn too_large(what: &str) -> TopologyError {
    TopologyError::config(
        "cluster.gpus",
        format!(
            "the topology needs more than {MAX_LINKS} {what}, more than 32-bit ids address; \
             lower cluster.gpus or raise cluster.oversubscription"
        ),
    )
}
