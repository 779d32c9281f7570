//! Inside a host: GPUs, PCIe switches, the CPU root complex, NICs; the scale-up fabric (NVSwitch
//! domains or an Infinity Fabric mesh); the CXL tier: their layouts and node ids, which `structured.rs` assembles into a
//! topology with the scale-out fabric.
//!
//! The host model follows the DGX H100 block diagram (NVIDIA DGX H100 User Guide, "Hardware
//! overview"): two GPUs and their NICs behind each PCIe switch, the switches under the CPU, and
//! all GPUs on the NVSwitch tray. Multi-host NVLink domains model GB200 NVL72 (NVIDIA GB200 NVL72
//! reference, 72 GPUs on one NVLink switch system). The CXL tier follows HCSim: a CXL switch per
//! group of hosts joining their GPUs and memory nodes.
//!
//! Node ids are arithmetic so that routing needs no tables: host `h` owns the block
//! `[h·stride, (h+1)·stride)` = GPUs, PCIe switches, CPU, NICs; NVSwitches, CXL switches, memory
//! nodes and the scale-out fabric follow all host blocks.

use crate::config::{ClusterConfig, ScaleUp};
use crate::gpu::{GpuSpec, Vendor};

use super::{NodeId, TopologyError, line_rate_gbps, positive};

/// The most GPUs, PCIe switches or NICs one host may have (`cluster.*_per_host`).
pub const MAX_PER_HOST: u32 = 1024;
/// The most ports one NIC may have (`cluster.nic_ports`).
pub const MAX_NIC_PORTS: u32 = 16;

/// `NodeId` slot meaning "no such node".
pub(crate) const NODE_NONE: NodeId = u32::MAX;

/// Arithmetic layout of the per-host blocks.
#[derive(Debug, Clone)]
pub(crate) struct HostLayout {
    pub gpus_per_host: u32,
    pub pcie_per_host: u32,
    pub nics_per_host: u32,
    pub hosts: u32,
    /// Nodes per host block.
    pub stride: u32,
}

/// `a · b / c` without intermediate overflow (`c > 0`, result ≤ `a` when `b ≤ c`).
fn scale(a: u32, b: u32, c: u32) -> u32 {
    (u64::from(a) * u64::from(b) / u64::from(c)) as u32
}

impl HostLayout {
    pub fn gpu(&self, h: u32, g: u32) -> NodeId {
        h * self.stride + g
    }

    pub fn pcie(&self, h: u32, s: u32) -> NodeId {
        h * self.stride + self.gpus_per_host + s
    }

    pub fn cpu(&self, h: u32) -> NodeId {
        h * self.stride + self.gpus_per_host + self.pcie_per_host
    }

    pub fn nic(&self, h: u32, n: u32) -> NodeId {
        h * self.stride + self.gpus_per_host + self.pcie_per_host + 1 + n
    }

    /// PCIe switch (local index) of GPU `g`: GPUs are spread evenly, in order.
    pub fn gpu_switch(&self, g: u32) -> u32 {
        scale(g, self.pcie_per_host, self.gpus_per_host)
    }

    pub fn nic_switch(&self, n: u32) -> u32 {
        scale(n, self.pcie_per_host, self.nics_per_host)
    }

    /// The NIC GPU `g` sends through: its nearest one, as NCCL binds each GPU to the NIC with
    /// the best path from it (NCCL `src/graph/paths.cc`, `ncclTopoGetLocalNet`); with fewer
    /// NICs than GPUs, neighbouring GPUs share one.
    pub fn nic_of_gpu(&self, g: u32) -> u32 {
        scale(g, self.nics_per_host, self.gpus_per_host)
    }

    /// Host-block node → (host, local index in the block).
    pub fn split(&self, n: NodeId) -> (u32, u32) {
        (n / self.stride, n % self.stride)
    }

    /// The PCIe switch node above a GPU or NIC node of a host block.
    pub fn switch_above(&self, n: NodeId) -> NodeId {
        let (h, local) = self.split(n);
        if local < self.gpus_per_host {
            self.pcie(h, self.gpu_switch(local))
        } else {
            let nic = local - self.gpus_per_host - self.pcie_per_host - 1;
            self.pcie(h, self.nic_switch(nic))
        }
    }
}

/// The scale-up fabric of one NVLink domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DomainFabric {
    None,
    NvSwitch,
    Mesh,
}

#[derive(Debug, Clone)]
pub(crate) struct ScaleUpLayout {
    /// GPUs per domain (a multiple of `gpus_per_host`); domain of rank `r` = `r / domain_size`.
    pub domain_size: u32,
    pub fabric: Vec<DomainFabric>,
    /// The NVSwitch node of each domain, [`NODE_NONE`] where the domain has none.
    pub nvswitch: Vec<NodeId>,
}

#[derive(Debug, Clone)]
pub(crate) struct CxlLayout {
    pub hosts_per_switch: u32,
    pub memory_per_switch: u32,
    pub switches: u32,
    pub switch_base: NodeId,
    pub memory_base: NodeId,
    pub gpu_bytes_per_s: f64,
    pub memory_bytes_per_s: f64,
}

impl CxlLayout {
    pub fn switch_of_host(&self, h: u32) -> NodeId {
        self.switch_base + h / self.hosts_per_switch
    }

    pub fn switch_of_memory(&self, memory_index: u32) -> NodeId {
        self.switch_base + memory_index / self.memory_per_switch
    }
}

pub(super) fn host_layout(cluster: &ClusterConfig) -> Result<HostLayout, TopologyError> {
    let gph = cluster.gpus_per_host;
    if cluster.gpus == 0 {
        return Err(TopologyError::config(
            "cluster.gpus",
            "cluster.gpus must be at least 1",
        ));
    }
    if gph == 0 {
        return Err(TopologyError::config(
            "cluster.gpus_per_host",
            "cluster.gpus_per_host must be at least 1",
        ));
    }
    if !cluster.gpus.is_multiple_of(gph) {
        return Err(TopologyError::config(
            "cluster.gpus",
            format!(
                "cluster.gpus ({}) must be a multiple of cluster.gpus_per_host ({gph})",
                cluster.gpus
            ),
        ));
    }
    let nics = cluster.nics_per_host.unwrap_or(gph);
    if nics == 0 || (!gph.is_multiple_of(nics) && !nics.is_multiple_of(gph)) {
        return Err(TopologyError::config(
            "cluster.nics_per_host",
            format!(
                "cluster.nics_per_host ({nics}) must divide cluster.gpus_per_host ({gph}) (GPUs \
                 sharing a NIC) or be a multiple of it"
            ),
        ));
    }
    let pcie = cluster
        .pcie_switches_per_host
        .unwrap_or(if gph >= 2 { gph / 2 } else { 1 });
    if pcie == 0 {
        return Err(TopologyError::config(
            "cluster.pcie_switches_per_host",
            "cluster.pcie_switches_per_host must be at least 1",
        ));
    }
    if cluster.nic_ports == 0 {
        return Err(TopologyError::config(
            "cluster.nic_ports",
            "cluster.nic_ports must be at least 1",
        ));
    }
    if cluster.dual_plane && cluster.nic_ports != 2 {
        return Err(TopologyError::config(
            "cluster.nic_ports",
            format!(
                "cluster.dual_plane needs cluster.nic_ports = 2 (one port per plane), got {}",
                cluster.nic_ports
            ),
        ));
    }
    // Each count per host sizes tables before the fabric's own checks run: bounded here by
    // what a host holds (a DGX has 8 GPUs, 4 PCIe switches, 8-10 NICs of 1-2 ports), with
    // room for hosts that do not exist yet.
    for (key, value, limit) in [
        ("cluster.gpus_per_host", gph, MAX_PER_HOST),
        ("cluster.pcie_switches_per_host", pcie, MAX_PER_HOST),
        ("cluster.nics_per_host", nics, MAX_PER_HOST),
        ("cluster.nic_ports", cluster.nic_ports, MAX_NIC_PORTS),
    ] {
        if value > limit {
            return Err(TopologyError::config(
                key,
                format!("{key} = {value} is more than a host holds; give at most {limit}"),
            ));
        }
    }
    line_rate_gbps(cluster.nic_gbps, "cluster.nic_gbps")?;
    let stride = u64::from(gph) + u64::from(pcie) + 1 + u64::from(nics);
    let hosts = cluster.gpus / gph;
    // Host blocks must leave room in 32-bit ids for the switches after them.
    if stride * u64::from(hosts) >= u64::from(u32::MAX / 2) {
        return Err(TopologyError::config(
            "cluster.gpus",
            format!(
                "cluster.gpus ({}) with {stride} nodes per host needs more node ids than 32 bits \
                 hold",
                cluster.gpus
            ),
        ));
    }
    Ok(HostLayout {
        gpus_per_host: gph,
        pcie_per_host: pcie,
        nics_per_host: nics,
        hosts,
        stride: stride as u32,
    })
}

/// The largest NVLink domain below `size` made of whole hosts of `gph` GPUs that divides
/// `gpus` (what a job spread evenly over domains of up to `size` GPUs fills), if any.
fn largest_domain_dividing(gpus: u32, gph: u32, size: u32) -> Option<u32> {
    (1..=size / gph)
        .rev()
        .map(|hosts| hosts * gph)
        .find(|&d| gpus.is_multiple_of(d))
}

/// Decides each NVLink domain's fabric. `Auto`: NVSwitch for NVIDIA parts with NVLink, a mesh
/// for AMD parts with Infinity Fabric (MI300X platforms wire the 8 OAMs point to point: AMD
/// CDNA 3 whitepaper), nothing otherwise. Domains are decided one by one so a heterogeneous
/// cluster mixes NVLink and PCIe-only hosts.
pub(super) fn scale_up_layout(
    cluster: &ClusterConfig,
    layout: &HostLayout,
    gpu_types: &[GpuSpec],
    host_gpu_type: &[u16],
) -> Result<ScaleUpLayout, TopologyError> {
    let gph = layout.gpus_per_host;
    if cluster.scale_up == ScaleUp::None {
        return Ok(ScaleUpLayout {
            domain_size: gph,
            fabric: vec![DomainFabric::None; layout.hosts as usize],
            nvswitch: vec![NODE_NONE; layout.hosts as usize],
        });
    }
    let size = cluster.nvlink_domain_gpus();
    if size == 0 || !size.is_multiple_of(gph) {
        return Err(TopologyError::config(
            "cluster.nvlink_domain",
            format!(
                "cluster.nvlink_domain ({size}) must be a multiple of cluster.gpus_per_host ({gph})"
            ),
        ));
    }
    if !cluster.gpus.is_multiple_of(size) {
        return Err(TopologyError::config(
            "cluster.nvlink_domain",
            format!(
                "cluster.nvlink_domain ({size}) must divide cluster.gpus ({}): set it to the GPUs \
                 of each NVLink domain this job fills{}",
                cluster.gpus,
                largest_domain_dividing(cluster.gpus, gph, size)
                    .map(|d| format!(", e.g. {d} (whole hosts of {gph})"))
                    .unwrap_or_default()
            ),
        ));
    }
    let hosts_per_domain = size / gph;
    let domains = cluster.gpus / size;
    let mut fabric = Vec::with_capacity(domains as usize);
    for d in 0..domains {
        let first = d * hosts_per_domain;
        let spec = &gpu_types[usize::from(host_gpu_type[first as usize])];
        for h in first + 1..first + hosts_per_domain {
            let other = &gpu_types[usize::from(host_gpu_type[h as usize])];
            if other.name != spec.name {
                return Err(TopologyError::config(
                    "cluster.nvlink_domain",
                    format!(
                        "NVLink domain {d} (hosts {first}..{}) mixes GPU types {} and {}; an \
                         NVLink domain holds one GPU type: make cluster.nvlink_domain ({size}) \
                         divide the GPUs of each cluster.gpu_mix entry",
                        first + hosts_per_domain - 1,
                        spec.name,
                        other.name
                    ),
                ));
            }
        }
        let has_link = spec.nvlink_bytes_per_s() > 0.0;
        let f = match cluster.scale_up {
            ScaleUp::Auto if !has_link || size == 1 => DomainFabric::None,
            ScaleUp::Auto => match spec.vendor {
                Vendor::Nvidia => DomainFabric::NvSwitch,
                Vendor::Amd => DomainFabric::Mesh,
            },
            ScaleUp::Nvswitch | ScaleUp::Mesh if !has_link => {
                return Err(TopologyError::config(
                    "cluster.scale_up",
                    format!(
                        "cluster.scale_up needs an NVLink/Infinity Fabric port but GPU {} has \
                         none (nvlink.bandwidth_gb_s = 0); use scale_up = \"none\" or \"auto\"",
                        spec.name
                    ),
                ));
            }
            ScaleUp::Nvswitch => DomainFabric::NvSwitch,
            ScaleUp::Mesh => DomainFabric::Mesh,
            ScaleUp::None => DomainFabric::None,
        };
        if f == DomainFabric::Mesh && size != gph {
            return Err(TopologyError::config(
                "cluster.nvlink_domain",
                format!(
                    "a mesh scale-up fabric (GPU {}) links the GPUs of one host; \
                     cluster.nvlink_domain ({size}) must equal cluster.gpus_per_host ({gph})",
                    spec.name
                ),
            ));
        }
        fabric.push(f);
    }
    Ok(ScaleUpLayout {
        domain_size: size,
        nvswitch: vec![NODE_NONE; fabric.len()],
        fabric,
    })
}

pub(super) fn check_gpu_types(
    layout: &HostLayout,
    gpu_types: &[GpuSpec],
    host_gpu_type: &[u16],
) -> Result<(), TopologyError> {
    if host_gpu_type.len() != layout.hosts as usize {
        return Err(TopologyError::config(
            "cluster.gpu_mix",
            format!(
                "{} hosts were given a GPU type but the cluster has {} (cluster.gpus / \
                 cluster.gpus_per_host); the cluster.gpu_mix entries must cover every host",
                host_gpu_type.len(),
                layout.hosts
            ),
        ));
    }
    if let Some(bad) = host_gpu_type
        .iter()
        .find(|&&t| usize::from(t) >= gpu_types.len())
    {
        return Err(TopologyError::config(
            "cluster.gpu_mix",
            format!(
                "GPU type index {bad} is out of range ({} GPU types given)",
                gpu_types.len()
            ),
        ));
    }
    Ok(())
}

pub(super) fn cxl_layout(
    cluster: &ClusterConfig,
    layout: &HostLayout,
) -> Result<Option<(u32, u32, f64, f64)>, TopologyError> {
    let Some(cxl) = &cluster.cxl else {
        return Ok(None);
    };
    let hps = cxl.hosts_per_switch;
    if hps == 0 || !layout.hosts.is_multiple_of(hps) {
        return Err(TopologyError::config(
            "cluster.cxl.hosts_per_switch",
            format!(
                "cluster.cxl.hosts_per_switch ({hps}) must divide the number of hosts ({})",
                layout.hosts
            ),
        ));
    }
    let gpu = positive(cxl.link_gb_s, "cluster.cxl.link_gb_s")? * 1e9;
    let memory = positive(cxl.memory_node_gb_s, "cluster.cxl.memory_node_gb_s")? * 1e9;
    let memory_nodes = u64::from(layout.hosts / hps) * u64::from(cxl.memory_nodes_per_switch);
    if memory_nodes > u64::from(u32::MAX / 4) {
        return Err(TopologyError::config(
            "cluster.cxl.memory_nodes_per_switch",
            format!("{memory_nodes} memory nodes are more than node ids hold"),
        ));
    }
    Ok(Some((hps, cxl.memory_nodes_per_switch, gpu, memory)))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;

    #[test]
    fn dgx_h100_host_has_expected_parts() {
        let t = build_toml("gpus = 16\nnics_per_host = 8\n", &[h100()], None);
        let c = t.count_by_kind();
        assert_eq!(c[&NodeKind::Gpu], 16);
        assert_eq!(c[&NodeKind::PcieSwitch], 8);
        assert_eq!(c[&NodeKind::Cpu], 2);
        assert_eq!(c[&NodeKind::Nic], 16);
        assert_eq!(c[&NodeKind::NvSwitch], 2);
        let by = t.links_by_class();
        // 8 GPU–NVSwitch cables per host, both directions, 450 GB/s each.
        assert_eq!(by[&LinkClass::NvLink].0, 32);
        assert!((by[&LinkClass::NvLink].1 - 32.0 * 450e9).abs() < 1.0);
        // PCIe: 4 CPU + 8 GPU + 8 NIC cables per host.
        assert_eq!(by[&LinkClass::Pcie].0, 2 * 2 * 20);
        assert_eq!(t.host_count(), 2);
        // NvSwitches of one-host domains stay in their host; fabric links are the lookahead.
        assert_eq!(t.host_preserving_lookahead(), Some(SimTime::from_us(1)));
        for n in t.nodes() {
            if n.kind == NodeKind::NvSwitch {
                assert_ne!({ n.host }, HOST_NONE);
            }
        }
    }

    #[test]
    fn every_path_is_shortest_on_all_intra_host_variants() {
        // NICs shared by 2 GPUs (same PCIe switch) and by 4 (through the CPU), no NVLink.
        for (extra, gpus) in [
            ("nics_per_host = 4\n", 32),
            ("nics_per_host = 2\nscale_up = \"none\"\n", 32),
            ("nics_per_host = 16\n", 16),
            ("gpus_per_host = 1\nnics_per_host = 1\n", 5),
        ] {
            let t = build_toml(
                &format!("gpus = {gpus}\nhosts_per_segment = 2\n{extra}"),
                &[h100()],
                None,
            );
            check_all_pairs(&t, &[0, 7, 99]);
        }
    }

    #[test]
    fn pcie_only_hosts_route_through_the_cpu_between_switches() {
        let t = build_toml("gpus = 8\nscale_up = \"none\"\n", &[h100()], None);
        // GPU 0 (switch 0) → GPU 7 (switch 3): GPU→sw→CPU→sw→GPU.
        let p = t.path(t.gpu(0), t.gpu(7), 1).unwrap();
        let kinds: Vec<_> = p
            .iter()
            .map(|&l| t.nodes()[t.link(l).dst as usize].kind)
            .collect();
        assert_eq!(
            kinds,
            [
                NodeKind::PcieSwitch,
                NodeKind::Cpu,
                NodeKind::PcieSwitch,
                NodeKind::Gpu
            ]
        );
        // GPUs 0 and 1 share a switch.
        assert_eq!(t.path(t.gpu(0), t.gpu(1), 1).unwrap().len(), 2);
        check_all_pairs(&t, &[1, 2]);
    }

    #[test]
    fn amd_mesh_links_every_pair_of_a_host() {
        let t = build_toml("gpus = 16\nhosts_per_segment = 2\n", &[mi300x()], None);
        assert_eq!(t.count_by_kind().get(&NodeKind::NvSwitch), None);
        let (n, bw) = t.links_by_class()[&LinkClass::NvLink];
        assert_eq!(n, 2 * 2 * 28);
        assert!((bw / f64::from(n) - 64e9).abs() < 1.0);
        for a in 0..8 {
            for b in 0..8 {
                if a != b {
                    let p = t.path(t.gpu(a), t.gpu(b), 3).unwrap();
                    assert_eq!(p.len(), 1);
                    assert_eq!(t.link(p[0]).class, LinkClass::NvLink);
                }
            }
        }
        check_all_pairs(&t, &[0, 1]);
    }

    /// A job smaller than one NVLink domain has a domain of its own GPUs; one that does not
    /// fill its domains evenly is refused with a size that would.
    #[test]
    fn a_job_smaller_than_its_nvlink_domain_fills_a_domain_of_its_own() {
        let rack =
            "gpus_per_host = 4\nnics_per_host = 4\nnvlink_domain = 72\nhosts_per_segment = 18\n";
        let t = build_toml(&format!("gpus = 8\n{rack}"), &[h100()], None);
        assert_eq!(t.count_by_kind()[&NodeKind::NvSwitch], 1);
        let p = t.path(t.gpu(0), t.gpu(7), 3).unwrap();
        assert!(p.iter().all(|&l| t.link(l).class == LinkClass::NvLink));
        let err = try_build_toml(&format!("gpus = 128\n{rack}"), &[h100()], None).unwrap_err();
        assert_eq!(err.key(), "cluster.nvlink_domain");
        assert!(err.to_string().contains("e.g. 64"), "{err}");
    }

    #[test]
    fn nvl72_style_domain_spans_hosts() {
        let t = build_toml(
            "gpus = 32\ngpus_per_host = 4\nnics_per_host = 4\nnvlink_domain = 8\nhosts_per_segment = 4\n",
            &[h100()],
            None,
        );
        assert_eq!(t.count_by_kind()[&NodeKind::NvSwitch], 4);
        for n in t.nodes().iter().filter(|n| n.kind == NodeKind::NvSwitch) {
            assert_eq!({ n.host }, HOST_NONE);
        }
        // GPU 0 (host 0) → GPU 7 (host 1): one NVSwitch hop.
        let p = t.path(t.gpu(0), t.gpu(7), 5).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|&l| t.link(l).class == LinkClass::NvLink));
        // The shared NVSwitch cuts hosts apart: its NVLink latency becomes the lookahead.
        assert_eq!(t.host_preserving_lookahead(), Some(SimTime::from_ns(100)));
        check_all_pairs(&t, &[0, 1, 2]);
        // NCCL (Multi-Node NVLink) sees the domain of two hosts as one node.
        assert_eq!(t.hosts_per_nccl_node(), 2);
        assert_eq!(t.nccl_node(0), t.nccl_node(7));
        assert_ne!(t.nccl_node(7), t.nccl_node(8));
    }

    #[test]
    fn nccl_nodes_are_hosts_when_a_domain_is_one_host() {
        let t = build_toml(
            "gpus = 16
nics_per_host = 8
",
            &[h100()],
            None,
        );
        assert_eq!(t.hosts_per_nccl_node(), 1);
        assert_eq!(t.nccl_node(7), 0);
        assert_eq!(t.nccl_node(8), 1);
    }

    #[test]
    fn a_send_to_another_rail_is_relayed_by_the_gpu_on_the_peers_rail() {
        let t = build_toml("gpus = 16\nnics_per_host = 8\n", &[h100()], None);
        // Rank 1 (host 0, NIC 1) to rank 8 (host 1, NIC 0): through rank 0, on NIC 0.
        assert_eq!(t.p2p_relay(1, 8), Some(0));
        assert_eq!(t.p2p_relay(12, 3), Some(11));
        // Same rail, same host: its own NIC, or NVLink.
        assert_eq!(t.p2p_relay(0, 8), None);
        assert_eq!(t.p2p_relay(1, 2), None);
        // Two GPUs per NIC: ranks 0 and 1 share NIC 0, so rank 1 sends to rank 8 itself.
        let shared = build_toml("gpus = 16\nnics_per_host = 4\n", &[h100()], None);
        assert_eq!(shared.p2p_relay(1, 8), None);
        assert_eq!(shared.p2p_relay(1, 10), Some(2));
    }

    #[test]
    fn heterogeneous_hosts_use_their_own_gpu_numbers() {
        let types = [h100(), a100()];
        // Hosts alternate H100, A100.
        let t = build_toml_types(
            "gpus = 32\nhosts_per_segment = 2\n",
            &types,
            &[0, 1, 0, 1],
            None,
        );
        for l in t.links() {
            if l.class == LinkClass::NvLink {
                let host = t.nodes()[l.src as usize].host;
                let want = if host.is_multiple_of(2) { 450e9 } else { 300e9 };
                assert!((l.bytes_per_s - want).abs() < 1.0);
            }
            if l.class == LinkClass::Pcie {
                let host = t.nodes()[l.src as usize].host;
                let want = types[host as usize % 2].pcie.bytes_per_s();
                assert!((l.bytes_per_s - want).abs() < 1.0);
            }
        }
        assert_eq!(t.gpu_type(8), 1);
        check_all_pairs(&t, &[0, 4]);
        // A two-host NVLink domain may not mix them.
        let err = try_build_toml_types(
            "gpus = 32\nnvlink_domain = 16\n",
            &types,
            &[0, 1, 0, 1],
            None,
        )
        .unwrap_err();
        assert_eq!(err.key(), "cluster.nvlink_domain");
        assert!(err.to_string().contains("mixes GPU types"), "{err}");
        // A PCIe-only part beside an NVLink part under auto: its host gets no NVSwitch.
        let t = build_toml_types("gpus = 16\n", &[h100(), pcie_only()], &[0, 1], None);
        assert_eq!(t.count_by_kind()[&NodeKind::NvSwitch], 1);
        check_all_pairs(&t, &[0]);
    }

    #[test]
    fn cxl_memory_nodes_are_reachable_inside_their_switch_only() {
        let t = build_toml(
            "gpus = 16\ngpus_per_host = 2\nnics_per_host = 2\nhosts_per_segment = 2\n\
             [cxl]\nhosts_per_switch = 2\nmemory_nodes_per_switch = 2\nmemory_node_gb = 512\n",
            &[h100()],
            None,
        );
        let c = t.count_by_kind();
        assert_eq!(c[&NodeKind::CxlSwitch], 4);
        assert_eq!(c[&NodeKind::MemoryNode], 8);
        check_all_pairs(&t, &[0, 3]);
        let memory: Vec<NodeId> = (0..t.nodes().len() as u32)
            .filter(|&n| t.nodes()[n as usize].kind == NodeKind::MemoryNode)
            .collect();
        // GPU 0 (host 0, switch 0) ↔ memory node 0 over CXL in two hops; memory node 2 is on
        // switch 1.
        let p = t.path(t.gpu(0), memory[0], 0).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|&l| t.link(l).class == LinkClass::Cxl));
        assert!(matches!(
            t.path(t.gpu(0), memory[2], 0),
            Err(RoutingError::Unreachable { .. })
        ));
        assert!(matches!(
            t.path(memory[2], t.gpu(0), 0),
            Err(RoutingError::Unreachable { .. })
        ));
        // GPUs of different hosts on one CXL switch talk over it, not the network.
        let p = t.path(t.gpu(0), t.gpu(2), 0).unwrap();
        assert_eq!(p.len(), 2);
        assert!(p.iter().all(|&l| t.link(l).class == LinkClass::Cxl));
    }

    #[test]
    fn host_config_errors_name_the_key() {
        let cases = [
            (
                "gpus = 16\nnics_per_host = 3\n",
                "cluster.nics_per_host",
                "must divide cluster.gpus_per_host (8)",
            ),
            (
                "gpus = 12\n",
                "cluster.gpus",
                "multiple of cluster.gpus_per_host",
            ),
            (
                "gpus = 16\nnvlink_domain = 12\n",
                "cluster.nvlink_domain",
                "multiple of",
            ),
            (
                "gpus = 24\nnvlink_domain = 16\n",
                "cluster.nvlink_domain",
                "must divide cluster.gpus",
            ),
            (
                "gpus = 16\ndual_plane = true\n",
                "cluster.nic_ports",
                "nic_ports = 2",
            ),
            (
                "gpus = 16\nnic_gbps = 0\n",
                "cluster.nic_gbps",
                "from 1 to 1000000 Gb/s",
            ),
            (
                "gpus = 16\nnic_gbps = 1e-9\n",
                "cluster.nic_gbps",
                "from 1 to 1000000 Gb/s",
            ),
            (
                "gpus = 16\npcie_switches_per_host = 0\n",
                "cluster.pcie_switches_per_host",
                "at least 1",
            ),
            (
                "gpus = 16\n[latency_ns]\nnetwork = -1\n",
                "cluster.latency_ns.network",
                "latency",
            ),
            (
                "gpus = 24\n[cxl]\nhosts_per_switch = 2\nmemory_node_gb = 1\n",
                "cluster.cxl.hosts_per_switch",
                "must divide",
            ),
        ];
        for (toml, key, text) in cases {
            let err = try_build_toml(toml, &[h100()], None).unwrap_err();
            assert_eq!(err.key(), key, "{toml}: {err}");
            assert!(err.to_string().contains(text), "{toml}: {err}");
        }
        let err = try_build_toml("gpus = 16\nscale_up = \"nvswitch\"\n", &[pcie_only()], None)
            .unwrap_err();
        assert_eq!(err.key(), "cluster.scale_up");
        let err = try_build_toml("gpus = 16\nnvlink_domain = 16\n", &[mi300x()], None).unwrap_err();
        assert_eq!(err.key(), "cluster.nvlink_domain");
    }
}
