//! `[network]` validated into the numbers the network model runs on.

use super::results::class_index;
use crate::config::{ConfigError, CongestionControl, NetworkModel, Routing};
use crate::experiment::Experiment;
use crate::segments::Segmenting;
use crate::time::SimTime;
use crate::topology::{LinkClass, Topology};

/// Largest segment: a segment's size travels as `u32`.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 30;
/// Smallest segment: one 4 KiB MTU packet.
pub const MIN_SEGMENT_BYTES: u64 = 4096;
/// InfiniBand's smallest MTU (IBTA vol. 1, 256 to 4096 bytes).
pub const MIN_MTU_BYTES: u64 = 256;
/// Above a 9,000-byte jumbo frame, with room.
pub const MAX_MTU_BYTES: u64 = 65536;

/// DCQCN in simulation units (bytes/s, picoseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct DcqcnParams {
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub pmax: f64,
    pub g: f64,
    pub timer: SimTime,
    pub byte_counter: u64,
    pub fast_recovery_steps: u32,
    pub rate_ai: f64,
    pub rate_hai: f64,
    pub min_rate: f64,
    pub cnp_interval: SimTime,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NetworkParams {
    /// `network.model = "packet"`: flows over queued links are cut into segments.
    pub packet: bool,
    /// `network.model = "flow"`: flows over shared links are fluid, max-min fair.
    pub flow: bool,
    /// Per [`LinkClass`] (in declaration order): queued ports, or analytical.
    queued: [bool; 4],
    /// Per [`LinkClass`]: links whose flows share them max-min fairly (flow mode).
    shared: [bool; 4],
    pub segment_bytes: u64,
    /// Packet size the switches forward by: a segment's head leads its tail by one MTU per
    /// hop (cut-through at segment level, [`super::net::cut_through`]).
    pub mtu_bytes: u64,
    /// `None`: each flow's bandwidth-delay product.
    pub window_bytes: Option<u64>,
    pub buffer_bytes: u64,
    pub xoff_bytes: u64,
    pub xon_bytes: u64,
    pub dcqcn: Option<DcqcnParams>,
    /// `network.routing = "adaptive"` at packet level: a switch sends each segment out of
    /// the emptiest of its equal-cost ports ([`super::net::Ports::forward`]).
    pub adaptive_routing: bool,
}

impl NetworkParams {
    /// Bytes of a segment of `segment_bytes` that lead it across a link: its first MTU
    /// packet, or all of it when it is smaller ([`super::net::cut_through`]).
    pub fn head_bytes(&self, segment_bytes: u64) -> u64 {
        segment_bytes.min(self.mtu_bytes)
    }

    /// Whether links of `class` have queued output ports (segment level); never with
    /// `network.model = "analytical"`.
    pub fn is_queued(&self, class: LinkClass) -> bool {
        self.queued[class_index(class)]
    }

    /// What the partitioner reads of these: queued classes and the largest segment.
    pub fn segmenting(&self) -> Segmenting {
        Segmenting {
            queued: self.queued,
            segment_bytes: self.segment_bytes,
        }
    }

    /// Whether flows over links of `class` share them max-min fairly
    /// (`network.model = "flow"`).
    pub fn is_shared(&self, class: LinkClass) -> bool {
        self.shared[class_index(class)]
    }

    pub fn from_experiment(exp: &Experiment, topology: &Topology) -> Result<Self, ConfigError> {
        let loaded = &exp.loaded;
        let n = &loaded.config.network;
        let err = |key: &str, msg: String| loaded.error(key, msg);
        if n.segment_bytes > MAX_SEGMENT_BYTES {
            return Err(err(
                "network.segment_bytes",
                format!(
                    "{} is larger than the limit of {MAX_SEGMENT_BYTES} bytes (1 GiB); use 4096 for packet-level detail or 1048576 for large clusters",
                    n.segment_bytes
                ),
            ));
        }
        if n.segment_bytes < MIN_SEGMENT_BYTES {
            return Err(err(
                "network.segment_bytes",
                format!(
                    "{} is smaller than {MIN_SEGMENT_BYTES} bytes, one MTU packet: finer segments resolve nothing more and multiply the events (1 byte would take a million times the default's); use 4096 for packet-level detail or 1048576 for large clusters",
                    n.segment_bytes
                ),
            ));
        }
        let packet = n.model == NetworkModel::Packet;
        let flow = n.model == NetworkModel::Flow;
        match (n.model, n.intra_host) {
            (NetworkModel::Packet, NetworkModel::Flow)
            | (NetworkModel::Flow, NetworkModel::Packet) => {
                return Err(err(
                    "network.intra_host",
                    format!(
                        "\"{}\" cannot run inside hosts while network.model = \"{}\"; use \"analytical\" or \"{}\"",
                        n.intra_host.name(),
                        n.model.name(),
                        n.model.name()
                    ),
                ));
            }
            _ => {}
        }
        let intra = packet && n.intra_host == NetworkModel::Packet;
        let queued = [intra, intra, packet, intra];
        let intra_shared = flow && n.intra_host == NetworkModel::Flow;
        let shared = [intra_shared, intra_shared, flow, intra_shared];
        // The flow LP's answers travel at least one shared link's latency: that is the
        // lookahead it gives, which must be positive.
        if let Some(zero) = topology
            .links()
            .find(|l| shared[class_index(l.class)] && l.latency == SimTime::ZERO)
        {
            let class = zero.class.name();
            return Err(err(
                &format!("cluster.latency_ns.{class}"),
                "must be above 0 with network.model = \"flow\": the flow LP's events need a link latency to travel ahead (leave it out for the default)".into(),
            ));
        }
        if let Some(w) = n.window_bytes
            && w == 0
        {
            return Err(err(
                "network.window_bytes",
                "must be greater than 0 (leave it out for the bandwidth-delay product)".into(),
            ));
        }
        if !(MIN_MTU_BYTES..=MAX_MTU_BYTES).contains(&n.mtu_bytes) {
            return Err(err(
                "network.mtu_bytes",
                format!(
                    "{} is outside {MIN_MTU_BYTES}..={MAX_MTU_BYTES} bytes, InfiniBand's smallest MTU to a jumbo frame's ceiling (4096, InfiniBand's and RoCE's usual MTU, is the default)",
                    n.mtu_bytes
                ),
            ));
        }
        let segment = n.segment_bytes;
        let xoff = n.pfc_xoff_bytes.unwrap_or((256 * 1024).max(2 * segment));
        let xon = n.pfc_xon_bytes.unwrap_or(xoff / 2);
        if xoff == 0 {
            return Err(err(
                "network.pfc_xoff_bytes",
                "must be greater than 0".into(),
            ));
        }
        if xon >= xoff {
            return Err(err(
                "network.pfc_xon_bytes",
                format!(
                    "{xon} must be below network.pfc_xoff_bytes ({xoff}) so paused ports resume"
                ),
            ));
        }
        // PFC headroom (IEEE 802.1Qbb; the DCQCN paper, §2): after XOFF is crossed, the pause
        // frame needs one link latency to arrive, the upstream finishes the segment it is
        // sending, and what is on the wire lands: 2·latency·bandwidth + 2 segments.
        let headroom = topology
            .links()
            .filter(|l| queued[class_index(l.class)])
            .map(|l| (2.0 * l.latency.as_secs_f64() * l.bytes_per_s).ceil() as u64)
            .max()
            .unwrap_or(0)
            + 2 * segment;
        let needed = xoff + headroom;
        let buffer = n.buffer_bytes.unwrap_or(needed);
        if buffer < needed {
            return Err(err(
                "network.buffer_bytes",
                format!(
                    "{buffer} bytes cannot hold XOFF ({xoff}) plus the PFC headroom of the fastest queued link ({headroom}); PFC would drop segments. Use at least {needed}, or lower network.pfc_xoff_bytes or network.segment_bytes"
                ),
            ));
        }
        // Validated even when off, so a typo does not wait for the day it is switched on.
        let dcqcn = dcqcn_params(exp)?;
        let dcqcn = (n.congestion_control == CongestionControl::Dcqcn).then_some(dcqcn);
        Ok(NetworkParams {
            packet,
            flow,
            queued,
            shared,
            segment_bytes: segment,
            mtu_bytes: n.mtu_bytes,
            window_bytes: n.window_bytes,
            buffer_bytes: buffer,
            xoff_bytes: xoff,
            xon_bytes: xon,
            dcqcn,
            adaptive_routing: packet && n.routing == Routing::Adaptive,
        })
    }
}

fn dcqcn_params(exp: &Experiment) -> Result<DcqcnParams, ConfigError> {
    let loaded = &exp.loaded;
    let d = &loaded.config.network.dcqcn;
    let err = |key: &str, msg: String| loaded.error(key, msg);
    if d.kmin_bytes >= d.kmax_bytes {
        return Err(err(
            "network.dcqcn.kmin_bytes",
            format!(
                "{} must be below network.dcqcn.kmax_bytes ({})",
                d.kmin_bytes, d.kmax_bytes
            ),
        ));
    }
    for (key, v, lo, hi) in [
        ("network.dcqcn.pmax", d.pmax, 0.0, 1.0),
        ("network.dcqcn.g", d.g, 0.0, 1.0),
    ] {
        if !v.is_finite() || v <= lo || v > hi {
            return Err(err(key, format!("{v} must be in ({lo}, {hi}]")));
        }
    }
    for (key, v) in [
        ("network.dcqcn.timer_us", d.timer_us),
        ("network.dcqcn.rate_ai_gbps", d.rate_ai_gbps),
        ("network.dcqcn.rate_hai_gbps", d.rate_hai_gbps),
        ("network.dcqcn.min_rate_gbps", d.min_rate_gbps),
        ("network.dcqcn.cnp_interval_us", d.cnp_interval_us),
    ] {
        if !v.is_finite() || v <= 0.0 {
            return Err(err(key, format!("{v} must be a positive number")));
        }
    }
    if d.byte_counter_bytes == 0 {
        return Err(err(
            "network.dcqcn.byte_counter_bytes",
            "must be greater than 0".into(),
        ));
    }
    let gbps = |g: f64| g * 1e9 / 8.0;
    Ok(DcqcnParams {
        kmin_bytes: d.kmin_bytes,
        kmax_bytes: d.kmax_bytes,
        pmax: d.pmax,
        g: d.g,
        timer: SimTime::from_micros_f64(d.timer_us),
        byte_counter: d.byte_counter_bytes,
        fast_recovery_steps: d.fast_recovery_steps,
        rate_ai: gbps(d.rate_ai_gbps),
        rate_hai: gbps(d.rate_hai_gbps),
        min_rate: gbps(d.min_rate_gbps),
        cnp_interval: SimTime::from_micros_f64(d.cnp_interval_us),
    })
}
