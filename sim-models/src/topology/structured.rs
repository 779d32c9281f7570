//! A structured (generated) cluster assembled: the hosts of `host.rs` (GPUs, PCIe, CPU,
//! NICs, scale-up domains, the CXL tier) joined by the scale-out fabric `clos.rs` plans, with
//! the arithmetic routing that needs no tables.

use crate::config::ClusterConfig;
use crate::gpu::GpuSpec;

use super::clos;
use super::host::{
    CxlLayout, DomainFabric, check_gpu_types, cxl_layout, host_layout, scale_up_layout,
};
use super::routing::{Routing, Structured};
use super::{Builder, HOST_NONE, Latencies, LinkClass, NodeKind, Topology, TopologyError};

/// Builds a rail-optimised, fat-tree or spine-leaf cluster.
pub(crate) fn build_structured(
    cluster: &ClusterConfig,
    gpu_types: &[GpuSpec],
    host_gpu_type: &[u16],
    latency: Latencies,
) -> Result<Topology, TopologyError> {
    let layout = host_layout(cluster)?;
    check_gpu_types(&layout, gpu_types, host_gpu_type)?;
    let mut scale_up = scale_up_layout(cluster, &layout, gpu_types, host_gpu_type)?;
    let cxl_params = cxl_layout(cluster, &layout)?;
    let plan = clos::plan(cluster, &layout)?;

    let gph = layout.gpus_per_host;
    let hosts = layout.hosts;
    let nvswitches = scale_up
        .fabric
        .iter()
        .filter(|&&f| f == DomainFabric::NvSwitch)
        .count();
    let mesh_cables: usize = scale_up
        .fabric
        .iter()
        .filter(|&&f| f == DomainFabric::Mesh)
        .count()
        * (gph as usize * (gph as usize).saturating_sub(1) / 2);
    let (cxl_switches, cxl_memory) = cxl_params
        .map(|(hps, m, ..)| ((hosts / hps) as usize, (hosts / hps) as usize * m as usize))
        .unwrap_or((0, 0));
    let host_nodes = (layout.stride as usize) * hosts as usize;
    let node_estimate = host_nodes + nvswitches + cxl_switches + cxl_memory + plan.node_count();
    let cable_estimate = hosts as usize
        * (layout.pcie_per_host + gph + layout.nics_per_host) as usize
        + nvswitches * scale_up.domain_size as usize
        + mesh_cables
        + if cxl_params.is_some() {
            cluster.gpus as usize + cxl_memory
        } else {
            0
        }
        + plan.cable_count();
    let mut b = Builder::new(latency, node_estimate, cable_estimate);

    // Host blocks, in the arithmetic layout of `HostLayout`.
    for h in 0..hosts {
        for g in 0..gph {
            b.add_node(NodeKind::Gpu, h, h * gph + g)?;
        }
        for s in 0..layout.pcie_per_host {
            b.add_node(NodeKind::PcieSwitch, h, h * layout.pcie_per_host + s)?;
        }
        b.add_node(NodeKind::Cpu, h, h)?;
        for n in 0..layout.nics_per_host {
            b.add_node(NodeKind::Nic, h, h * layout.nics_per_host + n)?;
        }
    }
    let hosts_per_domain = scale_up.domain_size / gph;
    for (d, f) in scale_up.fabric.iter().enumerate() {
        if *f == DomainFabric::NvSwitch {
            // A one-host NVSwitch belongs to its host; an NVL72-style one is shared.
            let host = if hosts_per_domain == 1 {
                d as u32
            } else {
                HOST_NONE
            };
            scale_up.nvswitch[d] = b.add_node(NodeKind::NvSwitch, host, d as u32)?;
        }
    }
    let cxl = match cxl_params {
        None => None,
        Some((hps, memory_per_switch, gpu_bytes_per_s, memory_bytes_per_s)) => {
            let switches = hosts / hps;
            // A CXL tier private to one host stays in that host (a host-preserving partition
            // keeps it together); a shared one is nobody's.
            let owner = |s: u32| if hps == 1 { s } else { HOST_NONE };
            let switch_base = b.node_count();
            for s in 0..switches {
                b.add_node(NodeKind::CxlSwitch, owner(s), s)?;
            }
            let memory_base = b.node_count();
            for s in 0..switches {
                for m in 0..memory_per_switch {
                    b.add_node(NodeKind::MemoryNode, owner(s), s * memory_per_switch + m)?;
                }
            }
            Some(CxlLayout {
                hosts_per_switch: hps,
                memory_per_switch,
                switches,
                switch_base,
                memory_base,
                gpu_bytes_per_s,
                memory_bytes_per_s,
            })
        }
    };

    // Cables inside hosts. Every PCIe link runs at the host GPU's PCIe rate: the GPU's x16 port
    // is the narrowest part of a GPU–switch–NIC path in DGX-class hosts.
    for h in 0..hosts {
        let spec = &gpu_types[usize::from(host_gpu_type[h as usize])];
        let pcie = spec.pcie.bytes_per_s();
        for s in 0..layout.pcie_per_host {
            b.cable(layout.pcie(h, s), layout.cpu(h), LinkClass::Pcie, pcie)?;
        }
        for g in 0..gph {
            b.cable(
                layout.gpu(h, g),
                layout.pcie(h, layout.gpu_switch(g)),
                LinkClass::Pcie,
                pcie,
            )?;
        }
        for n in 0..layout.nics_per_host {
            b.cable(
                layout.nic(h, n),
                layout.pcie(h, layout.nic_switch(n)),
                LinkClass::Pcie,
                pcie,
            )?;
        }
    }
    for (d, f) in scale_up.fabric.iter().enumerate() {
        let first_host = d as u32 * hosts_per_domain;
        let spec = &gpu_types[usize::from(host_gpu_type[first_host as usize])];
        let nvlink = spec.nvlink_bytes_per_s();
        match f {
            DomainFabric::None => {}
            DomainFabric::NvSwitch => {
                for h in first_host..first_host + hosts_per_domain {
                    for g in 0..gph {
                        b.cable(
                            layout.gpu(h, g),
                            scale_up.nvswitch[d],
                            LinkClass::NvLink,
                            nvlink,
                        )?;
                    }
                }
            }
            DomainFabric::Mesh => {
                // The GPU's Infinity Fabric bandwidth is split evenly over its peers (MI300X:
                // 7 links of 64 GB/s per direction).
                let per_peer = nvlink / f64::from(gph.saturating_sub(1).max(1));
                let h = first_host;
                for a in 0..gph {
                    for c in a + 1..gph {
                        b.cable(
                            layout.gpu(h, a),
                            layout.gpu(h, c),
                            LinkClass::NvLink,
                            per_peer,
                        )?;
                    }
                }
            }
        }
    }
    if let Some(cxl) = &cxl {
        for h in 0..hosts {
            for g in 0..gph {
                b.cable(
                    layout.gpu(h, g),
                    cxl.switch_of_host(h),
                    LinkClass::Cxl,
                    cxl.gpu_bytes_per_s,
                )?;
            }
        }
        for m in 0..cxl.switches * cxl.memory_per_switch {
            b.cable(
                cxl.memory_base + m,
                cxl.switch_of_memory(m),
                LinkClass::Cxl,
                cxl.memory_bytes_per_s,
            )?;
        }
    }

    let fabric = clos::build(&plan, &layout, &mut b)?;

    let gpu_of_rank = (0..cluster.gpus)
        .map(|r| layout.gpu(r / gph, r % gph))
        .collect();
    let routing = Routing::Structured(Box::new(Structured {
        hosts: layout,
        scale_up,
        cxl,
        fabric,
    }));
    Ok(b.finish(gpu_of_rank, hosts, host_gpu_type.to_vec(), routing))
}
