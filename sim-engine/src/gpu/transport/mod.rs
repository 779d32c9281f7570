//! How a GPU's transfers cross the fabric. [`GpuLp::transmit`] routes a transfer
//! ([`PathCache`]) and hands it to the [`Transport`] its route's links call for, each in its
//! own file: `analytical.rs` (a FIFO share of the first link, no event on the way),
//! `packet.rs` (segments through the ports, windowed and paced by DCQCN or NCCL's FIFO) and
//! `fluid.rs` (the whole transfer to the flow LP, `network.model = "flow"`). Packet and fluid
//! transfers are [`Flow`]s, kept in a slab until acknowledged. `serial.rs` holds the
//! connections whose chunks go in order (NCCL's FIFO).

mod analytical;
mod fluid;
mod packet;
mod serial;

pub use crate::segments::segment_size;
pub(super) use serial::SerialConnection;

use super::GpuLp;
use super::Running;
use crate::collective;
use crate::dcqcn::Dcqcn;
use crate::hash::{mix, splitmix64};
use crate::net::Route;
use crate::results::class_index;
use crate::topology::{LinkClass, NodeId, RoutingError};
use crate::{Ctx, INJECTED, NO_NODE, SimModel, Tag};

/// How a transfer crosses the fabric, by its route's links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// Every link is analytical ([`GpuLp::transmit_analytical`]).
    Analytical,
    /// Some link is queued and none shared: segment by segment ([`GpuLp::pump_flow`]).
    Packet,
    /// Some link shares its bandwidth among flows: the flow LP carries it whole
    /// ([`GpuLp::start_fluid`]).
    Fluid,
}

impl Transport {
    fn of(path: &PathInfo) -> Self {
        if path.shared {
            Transport::Fluid
        } else if path.queued {
            Transport::Packet
        } else {
            Transport::Analytical
        }
    }
}

/// How [`GpuLp::transmit`] sent a transfer.
pub(super) enum Sent {
    /// As a segment-level flow, in slot `id`.
    Flow(u32),
    /// Over analytical links; its last byte leaves the GPU at `leaves_ps`.
    Analytical { leaves_ps: u64 },
    /// Not at all: no route (recorded).
    Failed,
}

/// A transfer [`GpuLp::transmit`] was asked for, routed.
#[derive(Debug, Clone, Copy)]
struct Transfer {
    dst: NodeId,
    /// The GPU whose NIC carries it first (PXN), or [`NO_NODE`].
    via: NodeId,
    bytes: u64,
    tag: Tag,
    /// ECMP hash of its queue pair ([`GpuLp::flow_hash`]).
    hash: u64,
    path: PathInfo,
    /// The stream whose op hears when it completes.
    notify: Option<u8>,
    /// The [`SerialConnection`] whose slot it holds, or `u32::MAX`.
    serial: u32,
    /// What NCCL's FIFO sustains across the network for the op, bytes/s.
    fifo_rate: f64,
}

/// A flow being sent segment by segment.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Flow {
    pub(super) dst: NodeId,
    /// PXN relay, or [`NO_NODE`].
    pub(super) via: NodeId,
    total: u64,
    /// Bytes per segment ([`segment_size`]).
    segment: u64,
    /// Queue pairs its segments are split over (NCCL_IB_SPLIT_DATA_ON_QPS), else 1.
    parts: u8,
    sent: u64,
    sent_any: bool,
    acked: u64,
    in_flight: u64,
    window: u64,
    hash: u64,
    pub(super) tag: Tag,
    path_ps: u64,
    notify: Option<u8>,
    line_rate: f64,
    /// What NCCL's FIFO sustains when less than the line rate ([`f64::INFINITY`] if not):
    /// the flow is paced to it.
    fifo_rate: f64,
    dcqcn: Option<Dcqcn>,
    next_tx_ps: u64,
    pace_scheduled: bool,
    /// The [`SerialConnection`] whose slot this flow holds until acknowledged, or `u32::MAX`.
    serial: u32,
    /// Its segments' route, planned with the first one (one queue pair only: split over
    /// several, each hop routes the segment).
    route: Option<Route>,
    /// Cables a link fault had taken down when its first segment left
    /// ([`crate::fault::Faults::cables_down_by`]).
    cables_down_at_start: u32,
}

/// Flow slots a GPU keeps once its last flow is done; a larger table is freed.
const FLOW_SLOTS_KEPT: usize = 16;

/// The ECMP hash of a flow: fixed by the experiment seed, the endpoints and the message, so
/// one flow keeps one path and reruns take the same paths.
pub fn flow_hash(seed: u64, src: NodeId, dst: NodeId, tag: Tag) -> u64 {
    let a = (u64::from(src) << 32) | u64::from(dst);
    let b = (u64::from(tag.stream) << 56)
        | (u64::from(tag.group) << 48)
        | (u64::from(tag.step) << 32)
        | u64::from(tag.seq);
    splitmix64(seed ^ splitmix64(a) ^ splitmix64(b).rotate_left(17))
}

/// The tag of injected flow `index`.
pub fn injected_tag(index: u32) -> Tag {
    Tag {
        stream: 0,
        group: INJECTED,
        seq: index,
        step: 0,
    }
}

/// [`PathInfo::first_port`] of a path with no first link.
pub(super) const NO_PORT: u32 = u32::MAX;

/// A path's one-way latency, bottleneck bandwidth, first link and whether any link is queued.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(super) struct PathInfo {
    pub(super) latency_ps: u64,
    pub(super) bytes_per_s: f64,
    /// The first link's index among the source's out links ([`NO_PORT`] for an empty path):
    /// what the analytical transport's per-link state is indexed by, found once per route
    /// rather than searched for per message.
    pub(super) first_port: u32,
    pub(super) hops: u32,
    pub(super) queued: bool,
    /// Crosses a link whose flows share it max-min fairly (flow mode).
    pub(super) shared: bool,
    /// Links of each class the path crosses, to account analytical traffic.
    pub(super) class_hops: [u8; 4],
}

impl PathInfo {
    /// Whether the path crosses a link of `class`.
    pub(super) fn crosses(&self, class: LinkClass) -> bool {
        self.class_hops[class_index(class)] > 0
    }
}

/// A GPU has no route to another node, in words that name both as `links.csv` does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no route from {src} to {dst}: {why}")]
pub(super) struct NoRoute {
    src: String,
    dst: String,
    why: String,
}

/// Routes from one GPU: paths with a single choice at every hop (the same for every flow
/// hash, such as NVLink inside a host) are computed once per destination.
#[derive(Debug, Default)]
pub(super) struct PathCache {
    /// (source, destination) pairs with a single route, and their paths: keys apart, so a
    /// lookup at 131K GPUs reads a line or two of a cold cache rather than every path.
    fixed_pairs: Vec<(NodeId, NodeId)>,
    fixed_paths: Vec<PathInfo>,
    path: Vec<u32>,
    hops: Vec<u32>,
}

impl PathCache {
    /// The path to `dst`, through GPU `via` first when it is not [`NO_NODE`] (PXN).
    pub(super) fn get_via(
        &mut self,
        model: &SimModel,
        src: NodeId,
        (dst, via): (NodeId, NodeId),
        hash: u64,
    ) -> Result<PathInfo, NoRoute> {
        if via == NO_NODE {
            return self.get(model, src, dst, hash);
        }
        let a = self.get(model, src, via, hash)?;
        let b = self.get(model, via, dst, hash)?;
        let mut class_hops = a.class_hops;
        for (c, hops) in b.class_hops.iter().enumerate() {
            class_hops[c] = class_hops[c].saturating_add(*hops);
        }
        Ok(PathInfo {
            latency_ps: a.latency_ps + b.latency_ps,
            bytes_per_s: a.bytes_per_s.min(b.bytes_per_s),
            first_port: a.first_port,
            hops: a.hops + b.hops,
            queued: a.queued || b.queued,
            shared: a.shared || b.shared,
            class_hops,
        })
    }

    /// The path from `src` to `dst` for ECMP hash `hash`.
    pub(super) fn get(
        &mut self,
        model: &SimModel,
        src: NodeId,
        dst: NodeId,
        hash: u64,
    ) -> Result<PathInfo, NoRoute> {
        if let Some(i) = self.fixed_pairs.iter().position(|&k| k == (src, dst)) {
            return Ok(self.fixed_paths[i]);
        }
        let (info, single_choice) = self.route(model, src, dst, hash)?;
        if single_choice {
            self.fixed_pairs.push((src, dst));
            self.fixed_paths.push(info);
        }
        Ok(info)
    }

    /// The path from `src` to `dst` for ECMP hash 0, kept out of the cache: for a pair this
    /// rank asks about once (a mirrored group's members, [`crate::symmetry`]).
    pub(super) fn once(
        &mut self,
        model: &SimModel,
        src: NodeId,
        dst: NodeId,
    ) -> Result<PathInfo, NoRoute> {
        self.route(model, src, dst, 0).map(|(info, _)| info)
    }

    /// Routes `src` to `dst` for ECMP hash `hash`: the path, and whether it is the only one.
    fn route(
        &mut self,
        model: &SimModel,
        src: NodeId,
        dst: NodeId,
        hash: u64,
    ) -> Result<(PathInfo, bool), NoRoute> {
        let single_choice = model
            .topology
            .path_into(src, dst, hash, &mut self.path, &mut self.hops)
            .map_err(|e| NoRoute {
                src: model.topology.node_name(src),
                dst: model.topology.node_name(dst),
                why: match e {
                    // Names the nodes by id: the names above say it better.
                    RoutingError::Unreachable { reason, .. } => reason.to_string(),
                    _ => e.to_string(),
                },
            })?;
        let mut info = PathInfo {
            latency_ps: 0,
            bytes_per_s: f64::INFINITY,
            first_port: self.path.first().map_or(NO_PORT, |first| {
                let out = model.topology.out_links(src);
                out.binary_search(first).map_or(NO_PORT, |i| i as u32)
            }),
            hops: self.path.len() as u32,
            queued: false,
            shared: false,
            class_hops: [0; 4],
        };
        for &l in &self.path {
            let lk = model.topology.link(l);
            info.latency_ps += lk.latency.as_ps();
            info.bytes_per_s = info.bytes_per_s.min(lk.bytes_per_s);
            info.queued |= model.net.is_queued(lk.class);
            info.shared |= model.net.is_shared(lk.class);
            let hops = &mut info.class_hops[class_index(lk.class)];
            *hops = hops.saturating_add(1);
        }
        Ok((info, single_choice))
    }
}

impl GpuLp {
    /// Sends `bytes` to GPU `dst` (through the NIC of GPU `via`, PXN, unless [`NO_NODE`]) for
    /// the op on stream `s`; the receiver sees it on stream `to_stream` at `step`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send(
        &mut self,
        model: &SimModel,
        s: usize,
        (dst, via): (NodeId, NodeId),
        bytes: u64,
        to_stream: usize,
        step: u16,
        ctx: &mut Ctx,
    ) {
        let Running::Comm(run) = &self.running[s] else {
            return;
        };
        let tag = Tag {
            stream: to_stream as u8,
            group: run.group,
            seq: run.seq,
            step,
        };
        self.transmit(
            model,
            (dst, via),
            bytes,
            tag,
            (Some(s as u8), u32::MAX),
            ctx,
        );
    }

    /// Starts a flow of `bytes` to GPU `dst` (through the NIC of GPU `via` first, PXN, unless
    /// [`NO_NODE`]), delivered as `tag`; when it completes, the op on stream `notify` hears of
    /// it, and [`SerialConnection`] `serial` (`u32::MAX`: none) gets its slot back. The
    /// route's links pick the [`Transport`].
    pub(super) fn transmit(
        &mut self,
        model: &SimModel,
        (dst, via): (NodeId, NodeId),
        bytes: u64,
        tag: Tag,
        (notify, serial): (Option<u8>, u32),
        ctx: &mut Ctx,
    ) -> Sent {
        let hash = self.flow_hash(model, dst, tag);
        let path = match self.paths.get_via(model, self.node, (dst, via), hash) {
            Ok(p) => p,
            Err(e) => {
                self.fail(e);
                return Sent::Failed;
            }
        };
        let net_window = match notify.map(|s| &self.running[usize::from(s)]) {
            Some(Running::Comm(run)) if path.crosses(LinkClass::Network) => run.net_window,
            _ => u64::MAX,
        };
        let transfer = Transfer {
            dst,
            via,
            bytes,
            tag,
            hash,
            path,
            notify,
            serial,
            fifo_rate: collective::window_rate(net_window),
        };
        match Transport::of(&path) {
            Transport::Analytical => self.transmit_analytical(model, &transfer, ctx),
            Transport::Packet => {
                let id = self.open_flow(model, &transfer, Transport::Packet, ctx.now.as_ps());
                self.pump_flow(model, id, ctx);
                Sent::Flow(id)
            }
            Transport::Fluid => {
                let id = self.open_flow(model, &transfer, Transport::Fluid, ctx.now.as_ps());
                self.start_fluid(model, id, ctx);
                Sent::Flow(id)
            }
        }
    }

    /// Opens a flow slot for `t`, which `transport` carries segment by segment or whole; the
    /// op that sent it counts it open until acknowledged.
    fn open_flow(&mut self, model: &SimModel, t: &Transfer, transport: Transport, now: u64) -> u32 {
        if let Some(s) = t.notify
            && let Running::Comm(run) = &mut self.running[usize::from(s)]
        {
            run.sends_open += 1;
        }
        let (bytes, path) = (t.bytes, &t.path);
        let seg = model.net.segment_bytes;
        let segment = segment_size(bytes, seg);
        let settings = &model.collectives.settings;
        let across = path.crosses(LinkClass::Network);
        let parts = if settings.split_data_on_qps && across && t.tag.group != INJECTED {
            let segments = (bytes / segment).max(1);
            u64::from(settings.qps_per_connection).min(segments) as u8
        } else {
            1
        };
        let window = model.net.window_bytes.unwrap_or_else(|| {
            // Bytes/s × ps × 1e-12, in this order (converting the latency to seconds first
            // rounds differently, and the window is a ceiling).
            let bdp = (path.bytes_per_s * 2.0 * path.latency_ps as f64 * 1e-12).ceil() as u64;
            (bdp + u64::from(path.hops + 1) * seg).max(2 * seg)
        });
        let flow = Flow {
            dst: t.dst,
            via: t.via,
            total: bytes,
            segment,
            parts,
            sent: 0,
            sent_any: false,
            acked: 0,
            in_flight: 0,
            window,
            hash: t.hash,
            tag: t.tag,
            path_ps: path.latency_ps,
            notify: t.notify,
            line_rate: path.bytes_per_s,
            fifo_rate: if t.fifo_rate < path.bytes_per_s {
                t.fifo_rate
            } else {
                f64::INFINITY
            },
            // Congestion control is the packet transport's: the flow LP shares its links
            // max-min instead.
            dcqcn: model
                .net
                .dcqcn
                .as_ref()
                .filter(|_| transport == Transport::Packet)
                .map(|_| Dcqcn::new(path.bytes_per_s, now)),
            next_tx_ps: now,
            pace_scheduled: false,
            serial: t.serial,
            route: None,
            cables_down_at_start: 0,
        };
        crate::slab::insert(&mut self.flows, &mut self.free_flows, Box::new(flow))
    }

    /// `bytes` of flow `id` were acknowledged (`ecn`: marked on the way); once all are, the
    /// flow is done and its slot free.
    pub(super) fn acked(
        &mut self,
        model: &SimModel,
        id: u32,
        bytes: u64,
        ecn: bool,
        ctx: &mut Ctx,
    ) {
        let Some(Some(f)) = self.flows.get_mut(id as usize) else {
            return;
        };
        f.in_flight -= bytes;
        f.acked += bytes;
        if ecn && let (Some(dc), Some(p)) = (f.dcqcn.as_mut(), model.net.dcqcn.as_ref()) {
            dc.on_congestion(ctx.now.as_ps(), p);
        }
        if f.sent >= f.total && f.in_flight == 0 {
            let (notify, serial) = (f.notify, f.serial);
            self.digest = mix(self.digest, u64::from(id) | (1 << 40), ctx.now.as_ps());
            self.flows[id as usize] = None;
            self.free_flows.push(id);
            if self.free_flows.len() == self.flows.len() && self.flows.len() > FLOW_SLOTS_KEPT {
                // No flow left: release the table (12 bytes a slot with its free list, so
                // 0.2 GB at 131,072 GPUs were every busiest moment kept). Ids start again
                // from 0: an event that names an old id finds no slot, or a reused one, as
                // after any slot's reuse.
                self.flows = Vec::new();
                self.free_flows = Vec::new();
            }
            if serial != u32::MAX {
                // A slot of the connection is free for its next chunk.
                self.connection_free(model, serial, ctx);
            }
            if let Some(stream) = notify {
                self.flow_done(model, usize::from(stream), ctx);
            }
        } else {
            self.pump_flow(model, id, ctx);
        }
    }

    /// The ECMP hash of a transfer: that of the queue pair carrying it. A connection's
    /// messages take turns on its NCCL_IB_QPS_PER_CONNECTION queue pairs (or, split over
    /// all of them, start from the first), so with one QP a connection keeps one path
    /// (`src/transport/net_ib.cc`). Injected flows each have their own.
    pub(super) fn flow_hash(&self, model: &SimModel, dst: NodeId, tag: Tag) -> u64 {
        if tag.group == INJECTED {
            return flow_hash(model.seed, self.node, dst, tag);
        }
        let settings = &model.collectives.settings;
        let qp = if settings.split_data_on_qps {
            0
        } else {
            u32::from(tag.step) % settings.qps_per_connection
        };
        let connection = Tag {
            seq: 0,
            step: qp as u16,
            ..tag
        };
        flow_hash(model.seed, self.node, dst, connection)
    }
}
