//! Segment-level network elements: output-queued ports with serialisation and propagation
//! delay, ECMP, PFC pause/resume on finite ingress buffers, ECN marking for DCQCN.
//!
//! The port model follows ns-3's `QbbNetDevice` and `SwitchMmu` as used by HPCC and SimAI
//! (`src/point-to-point/model/qbb-net-device.cc`, `switch-mmu.cc`): a segment is charged to
//! its ingress port's buffer when it is queued at an egress port and released when that port
//! starts transmitting it; crossing XOFF pauses the upstream port, falling to XON resumes it.
//! Marking is RED on the egress queue (DCQCN paper, §3: `kmin`, `kmax`, `pmax`).
//!
//! Links of classes that run analytically (`network.intra_host = "analytical"` for NVLink,
//! PCIe and CXL) have no queue: a segment crosses them in latency + serialisation and the next
//! queued node (or the destination) receives it directly.

use std::collections::VecDeque;

use super::results::{LpReport, PortReport, Span};
use super::{Body, Ctx, NO_LINK, Segment, SimModel, Tag};
use crate::topology::{LinkId, NodeId, ecmp_pick, splitmix64};

/// One output port: the sending end of a queued link.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Port {
    pub link: LinkId,
    dst: NodeId,
    latency_ps: u64,
    ps_per_byte: f64,
    queue: VecDeque<Segment>,
    queued_bytes: u64,
    busy_until: u64,
    tx_scheduled: bool,
    paused: bool,
    stats: PortReport,
    /// Busy periods, merged when back to back (trace only).
    spans: Vec<Span>,
}

impl Port {
    fn new(model: &SimModel, link: LinkId) -> Self {
        let l = model.topology.links()[link as usize];
        Port {
            link,
            dst: l.dst,
            latency_ps: l.latency_ps,
            ps_per_byte: 1e12 / l.bytes_per_s,
            queue: VecDeque::new(),
            queued_bytes: 0,
            busy_until: 0,
            tx_scheduled: false,
            paused: false,
            stats: PortReport {
                link,
                ..PortReport::default()
            },
            spans: Vec::new(),
        }
    }
}

/// Serialisation time of `bytes` at `ps_per_byte`, integer picoseconds.
pub fn serialisation_ps(bytes: u64, ps_per_byte: f64) -> u64 {
    (bytes as f64 * ps_per_byte).round() as u64
}

/// The queued output ports of one node, and the PFC state of its ingress side.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Ports {
    node: NodeId,
    /// Parallel to `topology.out_links(node)`: the port, or `None` for analytical links.
    ports: Vec<Option<Port>>,
    /// Parallel to the out links: bytes queued here that arrived on the reverse link.
    ingress_bytes: Vec<u64>,
    upstream_paused: Vec<bool>,
    /// Per-LP random stream for ECN marking, seeded by (experiment seed, LP id).
    rng: u64,
    /// The deepest any ingress buffer got: PFC is lossless while it stays within the buffer.
    max_ingress_bytes: u64,
}

impl Ports {
    pub fn new(model: &SimModel, node: NodeId) -> Self {
        let out = model.topology.out_links(node);
        let ports: Vec<Option<Port>> = out
            .iter()
            .map(|&l| {
                let class = model.topology.links()[l as usize].class;
                model.net.is_queued(class).then(|| Port::new(model, l))
            })
            .collect();
        Ports {
            node,
            ingress_bytes: vec![0; ports.len()],
            upstream_paused: vec![false; ports.len()],
            ports,
            rng: splitmix64(model.seed ^ splitmix64(u64::from(node) + 1)),
            max_ingress_bytes: 0,
        }
    }

    fn index_of(&self, model: &SimModel, link: LinkId) -> Option<usize> {
        model
            .topology
            .out_links(self.node)
            .binary_search(&link)
            .ok()
    }

    /// Sends `seg` on from this node: into a queued port, or across analytical links to the
    /// next node that queues it (or to its destination).
    pub fn forward(&mut self, model: &SimModel, mut seg: Segment, ctx: &mut Ctx) {
        let Some(link) = route(model, self.node, &mut seg, ctx) else {
            return;
        };
        let links = model.topology.links();
        if model.net.is_queued(links[link as usize].class) {
            if let Some(i) = self.index_of(model, link) {
                self.enqueue(model, i, seg, ctx);
            }
            return;
        }
        let mut t = ctx.now;
        let mut l = link;
        loop {
            let lk = links[l as usize];
            t += lk.latency_ps + serialisation_ps(u64::from(seg.bytes), 1e12 / lk.bytes_per_s);
            seg.hop += 1;
            seg.ingress = NO_LINK;
            if lk.dst == seg.dst {
                ctx.emit(lk.dst, t, Body::Segment(seg));
                return;
            }
            let Some(next) = route(model, lk.dst, &mut seg, ctx) else {
                return;
            };
            if model.net.is_queued(links[next as usize].class) {
                ctx.emit(lk.dst, t, Body::Segment(seg));
                return;
            }
            l = next;
        }
    }

    fn enqueue(&mut self, model: &SimModel, i: usize, mut seg: Segment, ctx: &mut Ctx) {
        if seg.ingress != NO_LINK
            && let Some(j) = self.index_of(model, seg.ingress ^ 1)
        {
            self.ingress_bytes[j] += u64::from(seg.bytes);
            self.max_ingress_bytes = self.max_ingress_bytes.max(self.ingress_bytes[j]);
            if self.ingress_bytes[j] >= model.net.xoff_bytes && !self.upstream_paused[j] {
                self.upstream_paused[j] = true;
                let up = model.topology.links()[seg.ingress as usize];
                ctx.emit(
                    up.src,
                    ctx.now + up.latency_ps,
                    Body::Pause { link: seg.ingress },
                );
            }
        }
        let Some(port) = self.ports[i].as_mut() else {
            return;
        };
        if let Some(d) = &model.net.dcqcn {
            let q = port.queued_bytes;
            let p = if q <= d.kmin_bytes {
                0.0
            } else if q >= d.kmax_bytes {
                1.0
            } else {
                d.pmax * (q - d.kmin_bytes) as f64 / (d.kmax_bytes - d.kmin_bytes) as f64
            };
            if p > 0.0 {
                self.rng = splitmix64(self.rng);
                if (self.rng >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < p {
                    seg.ecn = true;
                    port.stats.ecn_marks += 1;
                }
            }
        }
        port.queued_bytes += u64::from(seg.bytes);
        port.stats.max_queue_bytes = port.stats.max_queue_bytes.max(port.queued_bytes);
        port.queue.push_back(seg);
        self.try_transmit(model, i, ctx);
    }

    /// Starts sending the head segment of port `i` if the port is free and not paused.
    fn try_transmit(&mut self, model: &SimModel, i: usize, ctx: &mut Ctx) {
        let Some(port) = self.ports[i].as_mut() else {
            return;
        };
        if port.paused || port.queue.is_empty() {
            return;
        }
        if ctx.now < port.busy_until {
            if !port.tx_scheduled {
                port.tx_scheduled = true;
                ctx.emit(self.node, port.busy_until, Body::TxDone { link: port.link });
            }
            return;
        }
        let Some(mut seg) = port.queue.pop_front() else {
            return;
        };
        let bytes = u64::from(seg.bytes);
        port.queued_bytes -= bytes;
        let ser = serialisation_ps(bytes, port.ps_per_byte);
        port.busy_until = ctx.now + ser;
        port.stats.bytes += bytes;
        port.stats.segments += 1;
        port.stats.busy_ps += ser;
        if model.trace {
            match port.spans.last_mut() {
                Some(s) if s.end_ps == ctx.now => s.end_ps = port.busy_until,
                _ => port.spans.push(Span {
                    start_ps: ctx.now,
                    end_ps: port.busy_until,
                    name: 0,
                }),
            }
        }
        let ingress = seg.ingress;
        seg.ingress = port.link;
        seg.hop += 1;
        ctx.emit(
            port.dst,
            port.busy_until + port.latency_ps,
            Body::Segment(seg),
        );
        if !port.queue.is_empty() {
            port.tx_scheduled = true;
            ctx.emit(self.node, port.busy_until, Body::TxDone { link: port.link });
        }
        // The segment leaves this node's buffer: release its ingress charge.
        if ingress != NO_LINK
            && let Some(j) = self.index_of(model, ingress ^ 1)
        {
            self.ingress_bytes[j] -= bytes;
            if self.upstream_paused[j] && self.ingress_bytes[j] <= model.net.xon_bytes {
                self.upstream_paused[j] = false;
                let up = model.topology.links()[ingress as usize];
                ctx.emit(
                    up.src,
                    ctx.now + up.latency_ps,
                    Body::Resume { link: ingress },
                );
            }
        }
    }

    /// Handles the port events (`TxDone`, `Pause`, `Resume`); other bodies are not for ports.
    pub fn handle(&mut self, model: &SimModel, body: &Body, ctx: &mut Ctx) {
        let (link, pause) = match *body {
            Body::TxDone { link } => (link, None),
            Body::Pause { link } => (link, Some(true)),
            Body::Resume { link } => (link, Some(false)),
            _ => return,
        };
        let Some(i) = self.index_of(model, link) else {
            return;
        };
        if let Some(port) = self.ports[i].as_mut() {
            match pause {
                None => port.tx_scheduled = false,
                Some(p) => {
                    port.paused = p;
                    port.stats.pauses += u64::from(p);
                }
            }
        }
        self.try_transmit(model, i, ctx);
    }

    pub fn report_into(&self, report: &mut LpReport) {
        report.max_ingress_bytes = self.max_ingress_bytes;
        for p in self.ports.iter().flatten() {
            if p.stats.segments > 0 || p.stats.pauses > 0 {
                report.ports.push(p.stats.clone());
            }
            if !p.spans.is_empty() {
                report.link_spans.push((p.link, p.spans.clone()));
            }
        }
    }
}

/// The link `seg` takes out of `at`: up/down routing, ECMP by the flow hash.
fn route(model: &SimModel, at: NodeId, seg: &mut Segment, ctx: &mut Ctx) -> Option<LinkId> {
    if seg.via == at {
        seg.relayed = true;
    }
    let (src, dst) = seg.leg();
    model.topology.next_hops(at, src, dst, ctx.hops).ok()?;
    ecmp_pick(seg.hash, u32::from(seg.hop), ctx.hops)
}

/// A node that only forwards: NIC, switch, NVSwitch, PCIe switch, CPU root, memory node.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct FabricLp {
    pub ports: Ports,
    /// A CXL memory node's transfers in progress, served in turn.
    memory: MemoryServer,
}

/// A CXL memory node serves its transfers round-robin, one chunk at a time over its link, the
/// way a memory controller interleaves requests: concurrent transfers share the node's
/// bandwidth fairly (processor sharing at chunk granularity), and none goes faster than the
/// bottleneck of its own path to the GPU. A chunk is `network.segment_bytes`, or 1/64 of the
/// transfer when that is larger: fair to within 1/64 of a transfer, and at most 64 turns
/// (events) per transfer, however large.
/// Most turns a CXL transfer takes at its memory node.
const MEMORY_TURNS: u64 = 64;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct MemoryServer {
    active: VecDeque<Transfer>,
    /// A chunk is on the link until this time (a tick is scheduled for it).
    busy_until: u64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Transfer {
    left: u64,
    gpu: NodeId,
    tag: Tag,
    /// The path's bottleneck and one-way latency to the GPU.
    ps_per_byte: f64,
    latency_ps: u64,
    /// Earliest start of its next chunk (its own path's pace).
    next_ps: u64,
    /// Bytes per turn.
    chunk: u64,
}

impl FabricLp {
    pub fn new(model: &SimModel, node: NodeId) -> Self {
        FabricLp {
            ports: Ports::new(model, node),
            memory: MemoryServer::default(),
        }
    }

    pub fn handle(&mut self, model: &SimModel, body: Body, ctx: &mut Ctx) {
        match body {
            Body::Segment(seg) if seg.dst != ctx.lp => self.ports.forward(model, seg, ctx),
            Body::MemoryRead {
                bytes,
                reply_to,
                tag,
                latency_ps,
                bytes_per_s,
            } => {
                self.memory.active.push_back(Transfer {
                    left: bytes,
                    gpu: reply_to,
                    tag,
                    ps_per_byte: 1e12 / bytes_per_s,
                    latency_ps,
                    next_ps: ctx.now,
                    chunk: bytes
                        .div_ceil(MEMORY_TURNS)
                        .max(model.net.segment_bytes)
                        .max(1),
                });
                if ctx.now >= self.memory.busy_until {
                    self.serve_chunk(model, ctx);
                }
            }
            Body::MemoryTick => self.serve_chunk(model, ctx),
            other => self.ports.handle(model, &other, ctx),
        }
    }

    /// Puts the next chunk on the memory node's link: the first transfer in turn whose own
    /// path is ready, else waits for the earliest one.
    fn serve_chunk(&mut self, model: &SimModel, ctx: &mut Ctx) {
        let m = &mut self.memory;
        if m.active.is_empty() || ctx.now < m.busy_until {
            return;
        }
        let Some(i) = m.active.iter().position(|t| t.next_ps <= ctx.now) else {
            let at = m.active.iter().map(|t| t.next_ps).min().unwrap_or(ctx.now);
            m.busy_until = at;
            ctx.emit(ctx.lp, at, Body::MemoryTick);
            return;
        };
        let Some(mut t) = m.active.remove(i) else {
            return;
        };
        let link = model.topology.out_links(ctx.lp)[0];
        let own = 1e12 / model.topology.links()[link as usize].bytes_per_s;
        let chunk = t.left.min(t.chunk);
        let done = ctx.now + serialisation_ps(chunk, own);
        t.left -= chunk;
        t.next_ps = ctx.now + serialisation_ps(chunk, t.ps_per_byte);
        if t.left == 0 {
            let arrive = t.next_ps.max(done) + t.latency_ps.max(1);
            ctx.emit(t.gpu, arrive, Body::Message { tag: t.tag });
        } else {
            m.active.push_back(t);
        }
        m.busy_until = done;
        ctx.emit(ctx.lp, done, Body::MemoryTick);
    }

    pub fn report(&self, _model: &SimModel) -> LpReport {
        let mut r = LpReport::default();
        self.ports.report_into(&mut r);
        r
    }
}
