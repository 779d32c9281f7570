//! How good an assignment is, before anything runs: the literature's static metrics (UNISON,
//! Bai et al., EuroSys'24 §6; SST and ns-3's MPI partitioning studies).

use std::collections::BTreeMap;

use serde::Serialize;
use sim_ir::time::SimTime;
use sim_models::topology::{LinkClass, Topology};

use crate::{Assignment, Load, lookahead};

/// Static quality of one assignment.
#[derive(Debug, Clone, Serialize)]
pub struct Quality {
    pub partitions: u32,
    /// LPs per partition.
    pub lps_min: u32,
    pub lps_mean: f64,
    pub lps_max: u32,
    /// Expected events of the busiest partition over the mean: 1 is perfect balance.
    pub imbalance: f64,
    /// Cut links (one per direction) by class name.
    pub cut_links: BTreeMap<&'static str, u32>,
    pub lookahead: Option<SimTime>,
    /// Expected bytes on cut links, and their share of the bytes on all links.
    pub cut_bytes: f64,
    pub cut_traffic_share: f64,
    /// Cut links weighted by how short they are: Σ 1 µs / latency. Each cut link below 1 µs
    /// counts more than one, as it shortens the windows.
    pub latency_weighted_cut: f64,
}

impl Quality {
    pub fn measure(topology: &Topology, assignment: &Assignment, load: &Load) -> Quality {
        let k = assignment.partitions.max(1) as usize;
        let mut lps = vec![0u32; k];
        for &p in &assignment.partition_of {
            lps[p as usize] += 1;
        }
        let events = load.events_by(&assignment.partition_of, k as u32);
        let mut cut_links: BTreeMap<&'static str, u32> = BTreeMap::new();
        let (mut cut_bytes, mut all_bytes, mut latency_weighted_cut) = (0.0, 0.0, 0.0);
        for (id, l) in topology.links().enumerate() {
            let bytes = load.link_bytes[id];
            all_bytes += bytes;
            if assignment.partition_of[l.src as usize] != assignment.partition_of[l.dst as usize] {
                *cut_links.entry(class_name(l.class)).or_default() += 1;
                cut_bytes += bytes;
                latency_weighted_cut += 1e6 / (l.latency.as_ps().max(1) as f64);
            }
        }
        let mean_events = events.iter().sum::<f64>() / k as f64;
        Quality {
            partitions: assignment.partitions,
            lps_min: lps.iter().copied().min().unwrap_or(0),
            lps_mean: assignment.partition_of.len() as f64 / k as f64,
            lps_max: lps.iter().copied().max().unwrap_or(0),
            imbalance: if mean_events > 0.0 {
                events.iter().copied().fold(0.0, f64::max) / mean_events
            } else {
                1.0
            },
            cut_links,
            lookahead: lookahead(topology, assignment),
            cut_bytes,
            cut_traffic_share: if all_bytes > 0.0 {
                cut_bytes / all_bytes
            } else {
                0.0
            },
            latency_weighted_cut,
        }
    }
}

fn class_name(c: LinkClass) -> &'static str {
    c.name()
}
