//! Segment-level network elements: output-queued ports with serialisation and propagation
//! delay, ECMP, PFC pause/resume on finite ingress buffers, ECN marking for DCQCN.
//!
//! The port model follows ns-3's `QbbNetDevice` and `SwitchMmu` as used by HPCC and SimAI
//! (`src/point-to-point/model/qbb-net-device.cc`, `switch-mmu.cc`): a segment is charged to
//! its ingress port's buffer when it is queued at an egress port and released when that port
//! starts transmitting it; crossing XOFF pauses the upstream port, falling to XON resumes it.
//! Marking is RED on the egress queue (DCQCN paper, §3: `kmin`, `kmax`, `pmax`).
//! A NIC's own port serves the queue pairs queued at it in turn, byte for byte (start-time
//! fair queuing with tags in bytes, Goyal, Vin and Cheng, SIGCOMM'96), as its transmit
//! scheduler interleaves them packet by packet: a message
//! posted on one queue pair behind another's backlog shares the wire with it instead of
//! waiting out all of it. A queue pair's own messages go in order (RC semantics, InfiniBand
//! Architecture Specification vol. 1, §9.5; the flow model's `QueuePair`). A switch port keeps
//! one FIFO (per priority) across every flow.
//!
//! Links of classes that run analytically (`network.intra_host = "analytical"` for NVLink,
//! PCIe and CXL) have no queue: a segment crosses them in latency + serialisation and the next
//! queued node (or the destination) receives it directly.

use std::collections::VecDeque;

use super::flow::QueuePair;
use super::memory_node::MemoryServer;
use super::results::{LpReport, PortReport, Span};
use super::{Body, Ctx, HotSpans, NO_LINK, NO_NODE, NO_SPAN, Segment, SimModel};
use crate::hash::splitmix64;
use crate::serialisation_ps;
use crate::time::{SimTime, ps_per_byte};
use crate::topology::{LinkId, NodeId, NodeKind, Topology, ecmp_pick};

/// One output port: the sending end of a queued link.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Port {
    pub link: LinkId,
    dst: NodeId,
    /// The reverse link's index among `dst`'s out links ([`NO_PORT`] when it does not fit
    /// a `u8`): where `dst` charges what this port sends it, given to it in the segment.
    reverse_port: u8,
    latency_ps: u64,
    ps_per_byte: f64,
    queue: VecDeque<Waiting>,
    queued_bytes: u64,
    /// Whether the port serves its queue pairs in turn ([`Port::fair_start`]): a NIC's.
    fair: bool,
    /// Fair ports' virtual time, in bytes: the start tag of the segment last put on the
    /// wire (while it is on the wire), and the largest finish tag served (the virtual time
    /// while nothing is); 0 elsewhere.
    wire_start: u64,
    wire_finish: u64,
    /// The queue pairs a fair port has a finish tag for beyond its virtual time: those
    /// with segments queued, and those whose last went on the wire recently enough.
    flows: Vec<QueuedFlow>,
    busy_until: u64,
    /// Whether a `TxDone` is planned at `busy_until`. Any other `TxDone` still pending is
    /// stale: an event at its picosecond (an arrival, a PFC resume) was handled first,
    /// found the port free and sent the head segment.
    tx_scheduled: bool,
    paused: bool,
    stats: PortReport,
    /// Busy periods, merged when back to back (trace only).
    spans: Vec<Span>,
    /// The last walk across analytical links after this port.
    #[serde(skip)]
    run: RunMemo,
}

/// A segment queued at a port, with the time its tail is (or will be) here and, at a fair
/// port, its start tag (the queue is in start-tag order).
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Waiting {
    seg: Segment,
    tail_ps: u64,
    start: u64,
}

/// A queue pair at a fair port: (sender, receiver, PXN relay, ECMP hash) as the flow model
/// keys one, the finish tag of its last segment there, and how many it has queued.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct QueuedFlow {
    queue_pair: QueuePair,
    last_finish: u64,
    queued: u32,
}

/// The queue pair `seg` travels on.
fn queue_pair(seg: &Segment) -> QueuePair {
    (seg.src, seg.dst, seg.via, seg.hash)
}

/// Segments a port queue always keeps room for. Beyond it, a queue's buffer halves when less
/// than a quarter of it is used, and is freed when the queue drains: a buffer stays within
/// four times what it holds. Keeping only the first allocation (4) made gpt3-175b-h100-1024
/// 2-10% slower (a reallocation every deep busy period) and saved no more at 131,072 GPUs.
const QUEUE_CAPACITY_KEPT: usize = 16;

impl Port {
    fn new(model: &SimModel, link: LinkId) -> Self {
        let l = model.topology.link(link);
        let sender = model.topology.nodes()[l.src as usize].kind;
        Port {
            link,
            dst: l.dst,
            reverse_port: port_index(&model.topology, l.dst, link ^ 1),
            latency_ps: l.latency.as_ps(),
            ps_per_byte: ps_per_byte(l.bytes_per_s),
            queue: VecDeque::new(),
            queued_bytes: 0,
            fair: matches!(sender, NodeKind::Nic | NodeKind::Gpu),
            wire_start: 0,
            wire_finish: 0,
            flows: Vec::new(),
            busy_until: 0,
            tx_scheduled: false,
            paused: false,
            stats: PortReport {
                link,
                ..PortReport::default()
            },
            spans: Vec::new(),
            run: RunMemo::default(),
        }
    }

    /// The start tag of `seg` queued at a fair port at `now` (start-time fair queuing, Goyal,
    /// Vin and Cheng, SIGCOMM'96, §2, tags in bytes as a NIC's scheduler counts them): the
    /// virtual time or its queue pair's last finish tag, whichever is later. The virtual time
    /// is the start tag of the segment in service: the one on the wire, or the head about to
    /// go on it this picosecond; with neither (a paused port), the largest finish tag
    /// served. A queue pair idle long enough for the virtual time to pass its last finish
    /// therefore goes ahead of every segment queued for a later virtual time, waiting at most
    /// for the one on the wire and those that started with it; a busy one sends as many
    /// bytes as each other in turn. Counts the segment as queued.
    fn fair_start(&mut self, seg: &Segment, now: u64) -> u64 {
        let (qp, bytes) = (queue_pair(seg), u64::from(seg.bytes));
        let virtual_time = match self.queue.front() {
            _ if now < self.busy_until => self.wire_start,
            Some(head) if !self.paused => head.start,
            _ => self.wire_finish,
        };
        let f = self.fair_flow(qp);
        let start = f.last_finish.max(virtual_time);
        f.last_finish = start + bytes;
        f.queued += 1;
        start
    }

    /// Queue pair `qp`'s entry at a fair port, made with no finish tag and nothing queued
    /// if it has none.
    fn fair_flow(&mut self, qp: QueuePair) -> &mut QueuedFlow {
        let i = match self.flows.iter().position(|f| f.queue_pair == qp) {
            Some(i) => i,
            None => {
                self.flows.push(QueuedFlow {
                    queue_pair: qp,
                    last_finish: 0,
                    queued: 0,
                });
                self.flows.len() - 1
            }
        };
        &mut self.flows[i]
    }

    /// A segment with start tag `start` goes on a fair port's wire: the virtual time moves
    /// to it, its queue pair keeps its finish tag, and a queue pair with nothing queued is
    /// forgotten once the virtual time has reached its finish tag (its next would start at
    /// the virtual time anyway), so the list holds the busy ones and the just-served.
    fn onto_fair_wire(&mut self, seg: &Segment, start: u64) {
        let (qp, finish) = (queue_pair(seg), start + u64::from(seg.bytes));
        self.wire_start = start;
        self.wire_finish = self.wire_finish.max(finish);
        let f = self.fair_flow(qp);
        f.last_finish = f.last_finish.max(finish);
        self.flows.retain(|f| f.queued > 0 || f.last_finish > start);
    }

    /// A segment leaves a fair port's queue for the wire: its queue pair has one fewer there.
    fn leave_fair_queue(&mut self, seg: &Segment) {
        let qp = queue_pair(seg);
        if let Some(f) = self.flows.iter_mut().find(|f| f.queue_pair == qp) {
            f.queued -= 1;
        }
    }
}

/// A segment crossing one link, as [`cut_through`] times it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Crossing {
    /// When the link has sent the segment's last byte.
    pub end_ps: u64,
    /// When the segment's head reaches the far end.
    pub head_ps: u64,
    /// How long after its head its tail reaches the far end.
    pub lag_ps: u32,
}

/// A segment whose tail is at this end of a link at `tail_ps` starts onto it at
/// `start_ps`, `ser_ps` being its serialisation there and `unit_ps` that of its first MTU
/// packet. A segment stands for its MTU packets, and a switch forwards each packet once it
/// has it (ns-3's `QbbNetDevice` stores and forwards packets; InfiniBand and Spectrum
/// switches cut through): the head reaches the far end one packet and the latency after
/// the start, and the link sends the last byte no sooner than its whole serialisation and
/// no sooner than one packet after the tail came in. Storing and forwarding whole segments
/// instead cost a multi-node ring step (hops − 1)/8 of its serialisation again: 28-30 GB/s
/// of bus bandwidth where NCCL reaches 40 (docs/engine.md). A lag beyond `u32` picoseconds
/// (4.3 ms: a megabyte on a 2 Gb/s link) is not carried: that segment lands whole.
pub(crate) fn cut_through(
    start_ps: u64,
    tail_ps: u64,
    ser_ps: u64,
    unit_ps: u64,
    latency_ps: u64,
) -> Crossing {
    let end_ps = (start_ps + ser_ps).max(tail_ps + unit_ps);
    let head_ps = start_ps + unit_ps + latency_ps;
    match u32::try_from(end_ps + latency_ps - head_ps) {
        Ok(lag_ps) => Crossing {
            end_ps,
            head_ps,
            lag_ps,
        },
        Err(_) => Crossing {
            end_ps,
            head_ps: end_ps + latency_ps,
            lag_ps: 0,
        },
    }
}

/// Bytes queued at a node that arrived on one link, and whether the node has paused the
/// link's sending port for them. One struct: both are read together on every segment.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
struct Ingress {
    bytes: u64,
    upstream_paused: bool,
}

/// The queued output ports of one node, and the PFC state of its ingress side.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Ports {
    node: NodeId,
    /// Parallel to `topology.out_links(node)`: the port, or `None` for analytical links;
    /// empty where no link is queued.
    ports: Vec<Option<Port>>,
    /// Parallel to the out links: the PFC state of the reverse link's ingress side.
    ingress: Vec<Ingress>,
    /// Per-LP random stream for ECN marking, seeded by (experiment seed, LP id).
    rng: u64,
    /// The deepest any ingress buffer got: PFC is lossless while it stays within the buffer.
    max_ingress_bytes: u64,
    /// The last walk across analytical links from this node itself (a GPU to its NIC).
    #[serde(skip)]
    run: RunMemo,
    /// When and why a segment found no path left here (`[[faults]]`): the run fails.
    failure: Option<Box<(SimTime, String)>>,
}

impl Ports {
    pub fn new(model: &SimModel, node: NodeId) -> Self {
        let out = model.topology.out_links(node);
        let queued = |l: LinkId| model.net.is_queued(model.topology.link(l).class);
        // A node without a queued port (every node of the analytical network) keeps no port
        // table: 64 empty slots of a fabric switch held 100 MB of one worker's 580 MB peak
        // at 131,072 GPUs. Segments only queue where a slot is `Some`, and PFC pauses only
        // queued links, so no event indexes an empty table.
        let ports: Vec<Option<Port>> = if out.iter().any(|&l| queued(l)) {
            out.iter()
                .map(|&l| queued(l).then(|| Port::new(model, l)))
                .collect()
        } else {
            Vec::new()
        };
        Ports {
            node,
            ingress: vec![Ingress::default(); ports.len()],
            ports,
            rng: splitmix64(model.seed ^ splitmix64(u64::from(node) + 1)),
            max_ingress_bytes: 0,
            run: RunMemo::default(),
            failure: None,
        }
    }

    /// Sends `seg` on from this node: into a queued port, or across analytical links to the
    /// next node that queues it (or to its destination).
    pub fn forward(&mut self, model: &SimModel, mut seg: Segment, ctx: &mut Ctx) {
        let planned = if model.faults.has_timed_links() && model.faults.links_down_by(ctx.now) {
            match self.reroute(model, &mut seg, ctx) {
                Some(port) => port,
                None => return,
            }
        } else {
            seg.route.port(seg.hop)
        };
        let i = match planned {
            Some(i) => i,
            None => {
                let Some(i) = route_at(model, self.node, &mut seg, ctx.hops, ctx.now)
                    .and_then(|link| out_index(&model.topology, self.node, link))
                else {
                    self.fail_no_path(model, &seg, ctx.now);
                    return;
                };
                i
            }
        };
        let i = if model.net.adaptive_routing && self.ports.len() > 1 {
            self.adaptive_port(model, &mut seg, i, ctx)
        } else {
            i
        };
        // This node's own port table says whether the link queues: no look-up in the
        // topology's link array, which misses the cache at scale.
        if matches!(self.ports.get(i), Some(Some(_))) {
            self.enqueue(model, i, seg, ctx);
            return;
        }
        // The walk from here takes port `i` first, as choosing it did (without a carried
        // route the walk routes this hop again, to the same link).
        deliver(model, self.node, ctx.now.as_ps(), seg, ctx, &mut self.run);
    }

    /// Adaptive routing (`network.routing = "adaptive"`): at a fabric switch, the equal-cost
    /// out port that can start sending `seg` soonest (its serialisation under way, then its
    /// queue; a paused port only after a buffer's worth), as an InfiniBand switch picks by
    /// its ports' queue occupancy; the planned port `planned` on a tie. Off the planned
    /// port, the segment's carried route no longer holds: each later hop routes itself.
    fn adaptive_port(
        &self,
        model: &SimModel,
        seg: &mut Segment,
        planned: usize,
        ctx: &mut Ctx,
    ) -> usize {
        let kind = model.topology.nodes()[self.node as usize].kind;
        if !matches!(kind, NodeKind::Leaf | NodeKind::Spine | NodeKind::Core) {
            return planned;
        }
        // The equal-cost hops, as ECMP would route it from here (around cables down by now);
        // a PXN relay is a GPU, so a segment at a switch has passed it.
        let mut probe = *seg;
        if probe.via != NO_NODE {
            probe.set_relayed();
        }
        if route_at(model, self.node, &mut probe, ctx.hops, ctx.now).is_none() || ctx.hops.len() < 2
        {
            return planned;
        }
        let now_ps = ctx.now.as_ps();
        let start_ps = |i: usize| -> u64 {
            match self.ports.get(i) {
                Some(Some(p)) => {
                    let queued = serialisation_ps(p.queued_bytes, p.ps_per_byte);
                    let paused = if p.paused {
                        serialisation_ps(model.net.buffer_bytes, p.ps_per_byte)
                    } else {
                        0
                    };
                    p.busy_until.saturating_sub(now_ps) + queued + paused
                }
                _ => u64::MAX,
            }
        };
        let mut best = (start_ps(planned), planned);
        for &link in ctx.hops.iter() {
            let Some(i) = out_index(&model.topology, self.node, link) else {
                continue;
            };
            let start = start_ps(i);
            if start < best.0 {
                best = (start, i);
            }
        }
        if best.1 != planned {
            *seg = Segment {
                route: Route::default(),
                ..probe
            };
        }
        best.1
    }

    /// A cable went down since the sender planned `seg`'s route: the fabric's ECMP groups
    /// now hold only the hops that still reach each destination, and the segment routes
    /// itself hop by hop (to the hops its sender planned wherever nothing is down: the same
    /// hash and hop index choose). With no hop left it was past its last choice when the
    /// cable failed and drains along its route (a real NIC resends such a packet about a
    /// round trip later, after the receiver's NAK). Returns the port to take (`Some(None)`:
    /// route it here), or `None` when it has no path at all (the run fails).
    #[cold]
    fn reroute(
        &mut self,
        model: &SimModel,
        seg: &mut Segment,
        ctx: &mut Ctx,
    ) -> Option<Option<usize>> {
        let mut rerouted = *seg;
        rerouted.route = Route::default();
        // A carried route crosses its PXN relay without marking it: past the relay already
        // unless this node is on the way to it.
        if rerouted.via != NO_NODE
            && !rerouted.relayed()
            && model
                .topology
                .next_hops(self.node, rerouted.src, rerouted.via, ctx.hops)
                .is_err()
        {
            rerouted.set_relayed();
        }
        match route_at(model, self.node, &mut rerouted, ctx.hops, ctx.now)
            .and_then(|link| out_index(&model.topology, self.node, link))
        {
            Some(j) => {
                *seg = rerouted;
                Some(Some(j))
            }
            None if seg.route.port(seg.hop).is_none() => {
                self.fail_no_path(model, seg, ctx.now);
                None
            }
            None => Some(seg.route.port(seg.hop)),
        }
    }

    /// `seg` has no path left from this node at `now`: the job stops (the first such
    /// failure of the node is reported).
    fn fail_no_path(&mut self, model: &SimModel, seg: &Segment, now: SimTime) {
        if self.failure.is_some() {
            return;
        }
        let name = |n: NodeId| model.topology.node_name(n);
        self.failure = Some(Box::new((
            now,
            format!(
                "a segment from {} to {} at {} at {:.6} s has no path left ({}); the job \
                 stops, as NCCL's does on a transport error",
                name(seg.src),
                name(seg.dst),
                name(self.node),
                now.as_secs_f64(),
                model.faults.describe_down_by(now),
            ),
        )));
    }

    /// The index of the port that `seg`, queued here, arrived through (the reverse of its
    /// ingress link), if it arrived over a queued link.
    fn ingress_index(model: &SimModel, node: NodeId, seg: &Segment) -> Option<usize> {
        if seg.ingress == NO_LINK {
            return None;
        }
        if seg.ingress_port != NO_PORT {
            return Some(usize::from(seg.ingress_port));
        }
        out_index(&model.topology, node, seg.ingress ^ 1)
    }

    fn enqueue(&mut self, model: &SimModel, i: usize, mut seg: Segment, ctx: &mut Ctx) {
        if let Some(j) = Self::ingress_index(model, self.node, &seg) {
            let ingress = &mut self.ingress[j];
            ingress.bytes += u64::from(seg.bytes);
            self.max_ingress_bytes = self.max_ingress_bytes.max(ingress.bytes);
            if ingress.bytes >= model.net.xoff_bytes && !ingress.upstream_paused {
                ingress.upstream_paused = true;
                let up = model.topology.link(seg.ingress);
                ctx.emit(
                    up.src,
                    ctx.now + up.latency,
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
                    seg.set_ecn();
                    port.stats.ecn_marks += 1;
                }
            }
        }
        port.queued_bytes += u64::from(seg.bytes);
        port.stats.max_queue_bytes = port.stats.max_queue_bytes.max(port.queued_bytes);
        let tail_ps = ctx.now.as_ps() + u64::from(seg.lag_ps);
        if port.queue.is_empty() && !port.paused && ctx.now.as_ps() >= port.busy_until {
            // An idle port sends at once: the segment never touches the queue's buffer. Its
            // start tag is where the last busy period's virtual time ended.
            let start = port.wire_finish;
            self.transmit(
                model,
                i,
                Waiting {
                    seg,
                    tail_ps,
                    start,
                },
                ctx,
            );
        } else if port.fair {
            let start = port.fair_start(&seg, ctx.now.as_ps());
            let at = port.queue.partition_point(|w| w.start <= start);
            port.queue.insert(
                at,
                Waiting {
                    seg,
                    tail_ps,
                    start,
                },
            );
            self.try_transmit(model, i, ctx);
        } else {
            port.queue.push_back(Waiting {
                seg,
                tail_ps,
                start: 0,
            });
            self.try_transmit(model, i, ctx);
        }
    }

    /// Starts sending the head segment of port `i` if the port is free and not paused.
    fn try_transmit(&mut self, model: &SimModel, i: usize, ctx: &mut Ctx) {
        let Some(Some(port)) = self.ports.get_mut(i) else {
            return;
        };
        if port.paused || port.queue.is_empty() {
            return;
        }
        if ctx.now.as_ps() < port.busy_until {
            if !port.tx_scheduled {
                port.tx_scheduled = true;
                ctx.emit(
                    self.node,
                    SimTime::from_ps(port.busy_until),
                    Body::TxDone { port: i as u32 },
                );
            }
            return;
        }
        if let Some(waiting) = port.queue.pop_front() {
            if port.fair {
                port.leave_fair_queue(&waiting.seg);
            }
            self.transmit(model, i, waiting, ctx);
        }
    }

    /// Puts the head of port `i`'s queue on the wire now.
    fn transmit(&mut self, model: &SimModel, i: usize, waiting: Waiting, ctx: &mut Ctx) {
        let Some(Some(port)) = self.ports.get_mut(i) else {
            return;
        };
        let Waiting {
            mut seg,
            tail_ps,
            start,
        } = waiting;
        if port.fair {
            port.onto_fair_wire(&seg, start);
        }
        let bytes = u64::from(seg.bytes);
        port.queued_bytes -= bytes;
        let ps_per_byte = if model.faults.has_timed_links() {
            port.ps_per_byte / model.faults.link_rate_at(port.link, ctx.now)
        } else {
            port.ps_per_byte
        };
        let ser = serialisation_ps(bytes, ps_per_byte);
        let unit = serialisation_ps(model.net.head_bytes(bytes), ps_per_byte);
        let crossing = cut_through(ctx.now.as_ps(), tail_ps, ser, unit, port.latency_ps);
        port.busy_until = crossing.end_ps;
        port.stats.bytes += bytes;
        port.stats.segments += 1;
        port.stats.busy_ps += SimTime::from_ps(ser);
        if model.trace {
            match port.spans.last_mut() {
                Some(s) if s.end == ctx.now => s.end = SimTime::from_ps(port.busy_until),
                _ => port.spans.push(Span {
                    start: ctx.now,
                    end: SimTime::from_ps(port.busy_until),
                    name: 0,
                }),
            }
        }
        let ingress = seg.ingress;
        let ingress_index = Self::ingress_index(model, self.node, &seg);
        seg.ingress = port.link;
        seg.ingress_port = port.reverse_port;
        seg.hop += 1;
        seg.lag_ps = crossing.lag_ps;
        deliver(model, port.dst, crossing.head_ps, seg, ctx, &mut port.run);
        // Whatever `TxDone` was planned is at or before now, so stale from here on.
        port.tx_scheduled = !port.queue.is_empty();
        let capacity = port.queue.capacity();
        if capacity > QUEUE_CAPACITY_KEPT && port.queue.len() * 4 < capacity {
            // Give back what a burst grew: kept, the deepest queue each of the fabric's ports
            // ever had stayed resident (llama3-405b-h100-131072: 1.2 GB in 3 minutes of
            // its gradient reduce-scatter, against 0.2 GB queued at most). Halving, not
            // fitting, leaves room to grow again without a reallocation at every segment.
            if port.tx_scheduled {
                port.queue.shrink_to(capacity / 2);
            } else {
                port.queue = VecDeque::new();
            }
        }
        if port.tx_scheduled {
            ctx.emit(
                self.node,
                SimTime::from_ps(port.busy_until),
                Body::TxDone { port: i as u32 },
            );
        }
        // The segment leaves this node's buffer: release its ingress charge.
        if let Some(j) = ingress_index {
            let charged = &mut self.ingress[j];
            charged.bytes -= bytes;
            if charged.upstream_paused && charged.bytes <= model.net.xon_bytes {
                charged.upstream_paused = false;
                let up = model.topology.link(ingress);
                ctx.emit(up.src, ctx.now + up.latency, Body::Resume { link: ingress });
            }
        }
    }

    /// The bytes charged to the ingress `seg` arrives through at this node, and whether its
    /// upstream port is paused; `None` when it arrived over no queued link.
    pub fn ingress_state(&self, model: &SimModel, seg: &Segment) -> Option<(u64, bool)> {
        let i = Self::ingress_index(model, self.node, seg)?;
        let ingress = self.ingress.get(i)?;
        Some((ingress.bytes, ingress.upstream_paused))
    }

    /// The least latency of a link into this node whose sending port it holds paused and
    /// whose sender `is_foreign` says yes to: a resume will go back over it.
    pub fn paused_upstream_latency(
        &self,
        model: &SimModel,
        is_foreign: impl Fn(NodeId) -> bool,
    ) -> Option<u64> {
        let out = model.topology.out_links(self.node);
        self.ingress
            .iter()
            .zip(out)
            .filter(|(ingress, _)| ingress.upstream_paused)
            .map(|(_, &l)| model.topology.link(l))
            .filter(|l| is_foreign(l.dst))
            .map(|l| l.latency.as_ps())
            .min()
    }

    /// Every port with queued segments: when it can next send (`busy_until`; a paused port
    /// only later, on the resume), and its segments in the order it will send them, each
    /// with the least time it waits from then behind those ahead of it (their
    /// serialisation at the port's full rate). What a cut's state bound reads
    /// ([`super::cut::Cut::state_bounds`]): a queued segment leaves on a `TxDone` or a resume
    /// handled later, which carries no promise of its own for it.
    pub fn queued(
        &self,
    ) -> impl Iterator<Item = (u64, impl Iterator<Item = (u64, &Segment)> + '_)> + '_ {
        self.ports
            .iter()
            .flatten()
            .filter(|p| !p.queue.is_empty())
            .map(|p| {
                let waits = p.queue.iter().scan(0u64, move |ahead, w| {
                    let wait = *ahead;
                    *ahead = ahead
                        .saturating_add(serialisation_ps(u64::from(w.seg.bytes), p.ps_per_byte));
                    Some((wait, &w.seg))
                });
                (p.busy_until, waits)
            })
    }

    /// The segment port `i` sends next, if its queue holds one.
    pub fn queue_head(&self, i: usize) -> Option<&Segment> {
        self.ports.get(i)?.as_ref()?.queue.front().map(|w| &w.seg)
    }

    /// Handles the port events (`TxDone`, `Pause`, `Resume`); other bodies are not for ports.
    pub fn handle(&mut self, model: &SimModel, body: &Body, ctx: &mut Ctx) {
        let (i, pause) = match *body {
            Body::TxDone { port } => (Some(port as usize), None),
            Body::Pause { link } => (out_index(&model.topology, self.node, link), Some(true)),
            Body::Resume { link } => (out_index(&model.topology, self.node, link), Some(false)),
            _ => return,
        };
        let Some(i) = i else {
            return;
        };
        if let Some(Some(port)) = self.ports.get_mut(i) {
            match pause {
                // Stale: the port sent again at this `TxDone`'s picosecond, before it, and
                // planned the next one itself. Handling it would plan a duplicate, and
                // each duplicate another at every later `TxDone` of the backlog.
                None if ctx.now.as_ps() < port.busy_until => return,
                None => port.tx_scheduled = false,
                Some(p) => {
                    port.paused = p;
                    port.stats.pauses += u64::from(p);
                }
            }
        }
        self.try_transmit(model, i, ctx);
    }

    /// Where handling `body` here will read first, as spans for a cache hint ([`NO_SPAN`]
    /// where nothing is known); nothing is read through them. Shallow: the port (all of
    /// it: a transmit reads its queue, clock, counters and link) and the ingress counter the
    /// event names. Deep: the port's queue slot the handler will write or read, found
    /// through the port, so ask for it once the shallow lines are loaded.
    pub fn hot_state(&self, body: &Body, deep: bool) -> HotSpans {
        let (port, enqueue) = match body {
            Body::Segment(seg) => match seg.route.port(seg.hop) {
                Some(i) => (i, true),
                None => return [NO_SPAN; 4],
            },
            Body::TxDone { port } => (*port as usize, false),
            _ => return [NO_SPAN; 4],
        };
        if deep {
            let Some(Some(p)) = self.ports.get(port) else {
                return [NO_SPAN; 4];
            };
            let (front, back) = p.queue.as_slices();
            let slot = match (enqueue, back.is_empty()) {
                (false, _) => front.as_ptr(),
                (true, true) => front.as_ptr().wrapping_add(front.len()),
                (true, false) => back.as_ptr().wrapping_add(back.len()),
            };
            return [
                (slot.cast(), size_of::<Waiting>()),
                NO_SPAN,
                NO_SPAN,
                NO_SPAN,
            ];
        }
        let ingress = match body {
            Body::Segment(seg) if seg.ingress_port != NO_PORT => (
                self.ingress
                    .as_ptr()
                    .wrapping_add(usize::from(seg.ingress_port))
                    .cast(),
                size_of::<Ingress>(),
            ),
            _ => NO_SPAN,
        };
        [
            (
                self.ports.as_ptr().wrapping_add(port).cast(),
                size_of::<Option<Port>>(),
            ),
            ingress,
            NO_SPAN,
            NO_SPAN,
        ]
    }

    pub fn report_into(&self, report: &mut LpReport) {
        report.max_ingress_bytes = self.max_ingress_bytes;
        report.fabric_failure = self.failure.as_deref().cloned();
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
fn route(
    topology: &Topology,
    at: NodeId,
    seg: &mut Segment,
    hops: &mut Vec<LinkId>,
) -> Option<LinkId> {
    route_avoiding(topology, at, seg, hops, None)
}

/// [`route`] at time `now`: also around the links a fault took down by then.
fn route_at(
    model: &SimModel,
    at: NodeId,
    seg: &mut Segment,
    hops: &mut Vec<LinkId>,
    now: SimTime,
) -> Option<LinkId> {
    if !model.faults.has_timed_links() {
        return route(&model.topology, at, seg, hops);
    }
    let down = |l: LinkId| model.faults.link_down_at(l, now).is_some();
    route_avoiding(&model.topology, at, seg, hops, Some(&down))
}

fn route_avoiding(
    topology: &Topology,
    at: NodeId,
    seg: &mut Segment,
    hops: &mut Vec<LinkId>,
    also_down: Option<&dyn Fn(LinkId) -> bool>,
) -> Option<LinkId> {
    if seg.via == at {
        seg.set_relayed();
    }
    let (src, dst) = seg.leg();
    topology
        .next_hops_avoiding(at, src, dst, hops, also_down)
        .ok()?;
    ecmp_pick(seg.hash, u32::from(seg.hop), hops)
}

/// Hands `seg`, its head reaching node `at` at time `t`, to the node that acts on it: `at`
/// itself when it is the destination (at the segment's tail: the whole segment is in) or
/// queues the segment (at its head: a switch forwards packets as they come), else whichever
/// node does after the analytical links that follow. A node that would only pass the
/// segment on across analytical links (a NIC towards its GPU) gets no event: its time is
/// the same without one. `memo` remembers the last walk across analytical links: with a
/// carried route the walk depends only on where it starts, the destination, the size, the
/// lag and the rest of the route, and the next segment from the same port usually repeats
/// it, so it skips the topology's tables (misses in the cache at scale).
fn deliver(
    model: &SimModel,
    at: NodeId,
    t: u64,
    mut seg: Segment,
    ctx: &mut Ctx,
    memo: &mut RunMemo,
) {
    if at == seg.dst || seg.route.queued(seg.hop) {
        emit_segment(at, t, seg, ctx);
        return;
    }
    let key = (seg.route.port(seg.hop).is_some()).then(|| RunKey {
        from: at,
        dst: seg.dst,
        bytes: seg.bytes,
        lag_ps: seg.lag_ps,
        rest: seg.route.rest(seg.hop),
    });
    if let Some(k) = key
        && memo.key == Some(k)
    {
        seg.hop += memo.crossed;
        seg.ingress = NO_LINK;
        seg.ingress_port = NO_PORT;
        seg.lag_ps = memo.lag_ps;
        emit_segment(memo.to, t + memo.took_ps, seg, ctx);
        return;
    }
    let (mut node, mut reached, first_hop) = (at, t, seg.hop);
    while node != seg.dst {
        // The carried route knows which hops queue: deciding that reads no topology table.
        let next = if let Some(i) = seg.route.port(seg.hop) {
            if seg.route.queued(seg.hop) {
                break;
            }
            model.topology.out_links(node).get(i).copied()
        } else {
            let next = route_at(model, node, &mut seg, ctx.hops, SimTime::from_ps(reached));
            if next.is_some_and(|l| model.net.is_queued(model.topology.link(l).class)) {
                break;
            }
            next
        };
        let Some(next) = next else {
            return;
        };
        reached = cross_analytical(model, next, reached, &mut seg);
        node = model.topology.link(next).dst;
    }
    if key.is_some() {
        *memo = RunMemo {
            key,
            took_ps: reached - t,
            lag_ps: seg.lag_ps,
            to: node,
            crossed: seg.hop - first_hop,
        };
    }
    emit_segment(node, reached, seg, ctx);
}

/// The event for `seg`, its head at `node` at `head_ps`: at its destination once its tail
/// is in, anywhere else at once.
fn emit_segment(node: NodeId, head_ps: u64, seg: Segment, ctx: &mut Ctx) {
    let at = if node == seg.dst {
        head_ps + u64::from(seg.lag_ps)
    } else {
        head_ps
    };
    ctx.emit(node, SimTime::from_ps(at), Body::Segment(seg));
}

/// What decides a walk across analytical links with a carried route. A carried route runs to
/// the destination, so such a walk never falls back to routing hop by hop (`seg.hash`,
/// `seg.via`), and where it stops depends on these alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunKey {
    from: NodeId,
    dst: NodeId,
    bytes: u32,
    lag_ps: u32,
    /// The route from the walk's first hop on.
    rest: Route,
}

/// A walk `deliver` made: from `key.from` to node `to`, its head taking `took_ps` and its
/// tail left `lag_ps` behind, across `crossed`
/// links. Relative to the hop it started at: segments from near and far senders share the
/// walk after a leaf but reach it at different hops.
#[derive(Debug, Clone, Copy, Default)]
struct RunMemo {
    key: Option<RunKey>,
    took_ps: u64,
    lag_ps: u32,
    to: NodeId,
    crossed: u8,
}

/// Moves `seg`, its head here at `t`, across analytical link `link` with no queue: cut
/// through as a port would ([`cut_through`]). Returns when its head reaches the far end.
fn cross_analytical(model: &SimModel, link: LinkId, t: u64, seg: &mut Segment) -> u64 {
    let lk = model.topology.link(link);
    let (bytes, ps_per_byte) = (u64::from(seg.bytes), ps_per_byte(lk.bytes_per_s));
    let crossing = cut_through(
        t,
        t + u64::from(seg.lag_ps),
        serialisation_ps(bytes, ps_per_byte),
        serialisation_ps(model.net.head_bytes(bytes), ps_per_byte),
        lk.latency.as_ps(),
    );
    seg.hop += 1;
    seg.ingress = NO_LINK;
    seg.ingress_port = NO_PORT;
    seg.lag_ps = crossing.lag_ps;
    crossing.head_ps
}

/// The index of `link` among `node`'s out links (where `Ports` keeps its port), if it is one.
fn out_index(topology: &Topology, node: NodeId, link: LinkId) -> Option<usize> {
    topology.out_links(node).binary_search(&link).ok()
}

/// [`out_index`] as a `u8`, or [`NO_PORT`] when it is not one or does not fit.
fn port_index(topology: &Topology, node: NodeId, link: LinkId) -> u8 {
    out_index(topology, node, link)
        .and_then(|i| u8::try_from(i).ok())
        .filter(|&i| i != NO_PORT)
        .unwrap_or(NO_PORT)
}

/// Hops a [`Route`] holds: GPU, PCIe switch, NIC, leaf, spine, core, spine, leaf, NIC, PCIe
/// switch, GPU is ten links; two spare for a CPU crossing or a PXN relay.
pub const ROUTE_HOPS: usize = 12;

/// "No port" in a [`Route`] or [`Segment::ingress_port`].
pub const NO_PORT: u8 = u8::MAX;

/// A segment's whole route as the out-port index taken at each hop, planned once per flow by
/// the sender with the same routing and ECMP choices that forwarding each hop would make.
/// Forwarding by it reads no topology tables: at 131,072 GPUs those miss the cache on almost
/// every hop. Empty (`len == 0`) when the route is longer than [`ROUTE_HOPS`] or passes a
/// node with more out links than a `u8` counts; each hop then routes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Route {
    ports: [u8; ROUTE_HOPS],
    /// Bit `h` below [`ROUTE_HOPS`]: the link of hop `h` has a queued port; the bits above:
    /// the route's length. One word, so that a segment (and an event) keeps its size with
    /// the cut-through lag it carries.
    queued_and_len: u16,
}

const LEN_SHIFT: u32 = ROUTE_HOPS as u32;
const QUEUED_MASK: u16 = (1 << LEN_SHIFT) - 1;

impl Route {
    fn new(ports: [u8; ROUTE_HOPS], len: u8, queued: u16) -> Route {
        Route {
            ports,
            queued_and_len: (u16::from(len) << LEN_SHIFT) | (queued & QUEUED_MASK),
        }
    }

    /// Hops the route carries.
    pub fn len(&self) -> u8 {
        (self.queued_and_len >> LEN_SHIFT) as u8
    }

    fn queued_bits(&self) -> u16 {
        self.queued_and_len & QUEUED_MASK
    }

    /// The out-port index at hop `hop`, if the route is carried.
    pub fn port(&self, hop: u8) -> Option<usize> {
        (hop < self.len()).then(|| usize::from(self.ports[usize::from(hop)]))
    }

    /// The route from hop `hop` on, as a route of its own (its hop 0 is `hop`).
    fn rest(&self, hop: u8) -> Route {
        let len = usize::from(self.len());
        let from = usize::from(hop).min(len);
        let mut ports = [0; ROUTE_HOPS];
        ports[..len - from].copy_from_slice(&self.ports[from..len]);
        Route::new(ports, (len - from) as u8, self.queued_bits() >> from)
    }

    /// Whether no route is carried: each hop routes itself.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the link of hop `hop` has a queued port (false past the carried route).
    fn queued(&self, hop: u8) -> bool {
        hop < self.len() && self.queued_bits() & (1 << hop) != 0
    }

    /// The route `seg`, sent from `from`, will take: [`route`] at every node until its
    /// destination, crossing links as forwarding does; `is_queued` says which links have
    /// queued ports.
    pub fn plan(
        topology: &Topology,
        is_queued: impl Fn(LinkId) -> bool,
        from: NodeId,
        seg: Segment,
        hops: &mut Vec<LinkId>,
    ) -> Route {
        Self::plan_avoiding(topology, is_queued, from, seg, hops, None)
    }

    /// [`Route::plan`] around the links `also_down` says are down (link faults by now).
    pub fn plan_avoiding(
        topology: &Topology,
        is_queued: impl Fn(LinkId) -> bool,
        from: NodeId,
        mut seg: Segment,
        hops: &mut Vec<LinkId>,
        also_down: Option<&dyn Fn(LinkId) -> bool>,
    ) -> Route {
        let (mut ports, mut queued) = ([0; ROUTE_HOPS], 0u16);
        let mut at = from;
        while at != seg.dst {
            let hop = usize::from(seg.hop);
            if hop >= ROUTE_HOPS {
                return Route::default();
            }
            let Some(link) = route_avoiding(topology, at, &mut seg, hops, also_down) else {
                return Route::default();
            };
            let index = port_index(topology, at, link);
            if index == NO_PORT {
                return Route::default();
            }
            ports[hop] = index;
            if is_queued(link) {
                queued |= 1 << hop;
            }
            seg.hop += 1;
            at = topology.link(link).dst;
        }
        Route::new(ports, seg.hop, queued)
    }
}

/// A node that only forwards: NIC, switch, NVSwitch, PCIe switch, CPU root, memory node.
/// Every one forwards segments through its ports (`Ports`, this file); what else it does is
/// its [`FabricRole`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct FabricLp {
    pub ports: Ports,
    role: FabricRole,
}

/// What a fabric node does besides forwarding.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum FabricRole {
    /// A switch, NIC or root complex: its ports are all of it.
    Switch,
    /// A CXL memory node: serves the reads GPUs send it ([`MemoryServer`],
    /// `memory_node.rs`).
    Memory(MemoryServer),
    /// The node [`SimModel::flow_home`] names: it solves every flow's rate
    /// ([`super::flow::FlowHome`]).
    FlowHome(Box<super::flow::FlowHome>),
}

impl FabricLp {
    pub fn new(model: &SimModel, node: NodeId) -> Self {
        let role = if model.flow_home == Some(node) {
            FabricRole::FlowHome(Box::new(super::flow::FlowHome::new(model)))
        } else if model.topology.nodes()[node as usize].kind == NodeKind::MemoryNode {
            FabricRole::Memory(MemoryServer::default())
        } else {
            FabricRole::Switch
        };
        FabricLp {
            ports: Ports::new(model, node),
            role,
        }
    }

    pub fn handle(&mut self, model: &SimModel, body: Body, ctx: &mut Ctx) {
        // Segments first: forwarding is the hot path, and every role forwards.
        match body {
            Body::Segment(seg) if seg.dst != ctx.lp => self.ports.forward(model, seg, ctx),
            read @ Body::MemoryRead { .. } => self.memory(ctx).read(model, read, ctx),
            Body::MemoryTick => self.memory(ctx).serve_chunk(model, ctx),
            Body::FlowStart(req) => self.flow_home(ctx).start(model, req, ctx),
            Body::RingJoin(join) => self.flow_home(ctx).join(model, *join, ctx),
            Body::FlowTick => {
                if let FabricRole::FlowHome(home) = &mut self.role {
                    home.tick(model, ctx);
                }
            }
            other => self.ports.handle(model, &other, ctx),
        }
    }

    /// The memory node's server; a read sent anywhere else is a bug.
    fn memory(&mut self, ctx: &Ctx) -> &mut MemoryServer {
        match &mut self.role {
            FabricRole::Memory(server) => server,
            other => unreachable!("a memory read reached node {} ({})", ctx.lp, other.name()),
        }
    }

    /// The flow home's solver; a flow request sent anywhere else is a bug.
    fn flow_home(&mut self, ctx: &Ctx) -> &mut super::flow::FlowHome {
        match &mut self.role {
            FabricRole::FlowHome(home) => home,
            other => unreachable!(
                "a flow request reached node {} ({}), not the flow LP",
                ctx.lp,
                other.name()
            ),
        }
    }

    pub fn report(&self, model: &SimModel) -> LpReport {
        let mut r = LpReport::default();
        self.ports.report_into(&mut r);
        if let FabricRole::FlowHome(home) = &self.role {
            r.flow = Some(home.stats());
            r.ports.extend(home.link_reports(model));
        }
        r
    }
}

impl FabricRole {
    fn name(&self) -> &'static str {
        match self {
            FabricRole::Switch => "switch",
            FabricRole::Memory(_) => "memory node",
            FabricRole::FlowHome(_) => "flow home",
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::Tag;
    use crate::topology::LinkClass;
    use crate::topology::testutil::{build_toml, h100};

    pub(crate) fn segment(src: NodeId, dst: NodeId, hash: u64) -> Segment {
        Segment {
            src,
            dst,
            flow: 0,
            bytes: 4096,
            hash,
            tag: Tag {
                stream: 0,
                group: 0,
                seq: 0,
                step: 0,
            },
            path_ps: 0,
            ingress: NO_LINK,
            ingress_port: NO_PORT,
            route: Route::default(),
            hop: 0,
            last: true,
            completion: 1,
            marks: 0,
            via: super::super::NO_NODE,
            lag_ps: 0,
        }
    }

    /// Which links queue with `intra_host = "analytical"`: the network's only.
    pub(crate) fn network_queues(t: &Topology) -> impl Fn(LinkId) -> bool + Copy + '_ {
        |l| t.link(l).class == LinkClass::Network
    }

    /// The links a carried route takes from `from`.
    pub(crate) fn walk(t: &Topology, from: NodeId, route: &Route) -> Vec<LinkId> {
        let mut at = from;
        (0..route.len())
            .map(|hop| {
                let link = t.out_links(at)[route.port(hop).expect("carried")];
                at = t.link(link).dst;
                link
            })
            .collect()
    }

    #[test]
    fn a_planned_route_is_the_path_that_routing_each_hop_takes() {
        // 256 GPUs in 4 pods on two planes: PCIe, leaf, spine and core hops, ECMP at each tier.
        let t = build_toml(
            "gpus = 256\nnic_ports = 2\ndual_plane = true\nhosts_per_segment = 4\nsegments_per_pod = 2\n",
            &[h100()],
            None,
        );
        let network = network_queues(&t);
        let mut hops = Vec::new();
        for src in (0..256).step_by(7) {
            for dst in (0..256).step_by(5) {
                let (s, d) = (t.gpu(src), t.gpu(dst));
                if s == d {
                    continue;
                }
                for hash in [0, 1, 0x9e37_79b9_7f4a_7c15, u64::MAX] {
                    let route = Route::plan(&t, network, s, segment(s, d, hash), &mut hops);
                    let path = t.path(s, d, hash).expect("route");
                    assert_eq!(usize::from(route.len()), path.len(), "{s} -> {d}");
                    assert_eq!(walk(&t, s, &route), path, "{s} -> {d}, hash {hash}");
                    for (hop, &link) in path.iter().enumerate() {
                        assert_eq!(route.queued(hop as u8), network(link), "hop {hop}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_rest_of_a_route_is_the_route_from_that_hop() {
        let t = build_toml("gpus = 64\nsegments_per_pod = 2\n", &[h100()], None);
        let (s, d) = (t.gpu(1), t.gpu(62));
        let route = Route::plan(&t, network_queues(&t), s, segment(s, d, 7), &mut Vec::new());
        assert!(route.len() > 4, "a route across the fabric: {route:?}");
        for from in 0..=route.len() {
            let rest = route.rest(from);
            assert_eq!(rest.len(), route.len() - from);
            for hop in 0..rest.len() {
                assert_eq!(rest.port(hop), route.port(from + hop), "{from} + {hop}");
                assert_eq!(rest.queued(hop), route.queued(from + hop), "{from} + {hop}");
            }
            assert_eq!(rest.port(rest.len()), None);
        }
    }

    /// What `deliver` emits for `seg` reaching `at` at time 5, with the walk memo `memo`.
    fn delivered(
        model: &SimModel,
        at: NodeId,
        seg: Segment,
        memo: &mut RunMemo,
    ) -> Vec<(crate::event::EventKey, super::super::Event)> {
        let (mut seq, mut out, mut hops) = (0, Vec::new(), Vec::new());
        let mut ctx = Ctx::new(SimTime::from_ps(5), at, &mut seq, &mut out, &mut hops);
        deliver(model, at, 5, seg, &mut ctx, memo);
        out
    }

    #[test]
    fn a_remembered_walk_is_the_walk() {
        // Two hosts per leaf: GPU 8 is one leaf away from GPU 0, GPU 32 a spine away, and
        // both reach GPU 0's NIC, then cross PCIe to it, at different hops.
        let model = two_hosts_per_leaf();
        let t = &model.topology;
        let dst = t.gpu(0);
        let mut arrivals = Vec::new();
        for src in [t.gpu(8), t.gpu(32)] {
            let mut seg = segment(src, dst, 3);
            seg.route = Route::plan(t, network_queues(t), src, seg, &mut Vec::new());
            // The hop after the last queued link, and the node it reaches.
            let links = walk(t, src, &seg.route);
            let after = (0..seg.route.len()).rev().find(|&h| seg.route.queued(h));
            let after = usize::from(after.expect("a queued hop")) + 1;
            seg.hop = after as u8;
            arrivals.push((t.link(links[after - 1]).dst, seg));
        }
        assert_ne!(arrivals[0].1.hop, arrivals[1].1.hop, "{arrivals:?}");
        assert_eq!(arrivals[0].0, arrivals[1].0, "both reach GPU 0's NIC");
        let mut shared = RunMemo::default();
        for &(at, seg) in &arrivals {
            let remembered = delivered(&model, at, seg, &mut shared);
            let walked = delivered(&model, at, seg, &mut RunMemo::default());
            assert_eq!(remembered, walked);
            assert_eq!(walked.len(), 1);
        }
        assert!(shared.key.is_some(), "the walk was remembered");
    }

    /// The quickstart with two hosts per leaf and only the network queued: GPUs 0 and 8
    /// share a leaf.
    pub(crate) fn two_hosts_per_leaf() -> SimModel {
        quickstart_with(&[
            "cluster.hosts_per_segment=2",
            "network.intra_host=\"analytical\"",
        ])
    }

    /// The quickstart's model with `sets` applied, as `--set` does.
    pub(crate) fn quickstart_with(sets: &[&str]) -> SimModel {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/experiments/quickstart.toml"
        );
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let exp = crate::experiment::Experiment::load(
            std::path::Path::new(path),
            &crate::config::Overrides::from_sets(&sets).expect("sets"),
        )
        .expect("quickstart loads");
        SimModel::from_experiment(&exp, false).expect("model")
    }

    /// Port tables only where a link queues: none at all on the analytical network, every
    /// network port at packet level with the intra-host links analytical.
    #[test]
    fn a_node_keeps_a_port_table_only_where_a_link_queues() {
        let tables = |model: &SimModel| -> Vec<usize> {
            let t = &model.topology;
            (0..t.nodes().len() as NodeId)
                .map(|n| Ports::new(model, n).ports.len())
                .collect()
        };
        let analytical = quickstart_with(&["network.model=\"analytical\""]);
        assert!(tables(&analytical).iter().all(|&n| n == 0));
        let packet = two_hosts_per_leaf();
        let (_, leaf) = segment_at_the_leaf(&packet);
        let t = &packet.topology;
        let sizes = tables(&packet);
        assert_eq!(sizes[leaf as usize], t.out_links(leaf).len());
        assert_eq!(
            sizes[t.gpu(0) as usize],
            0,
            "a GPU's links are intra-host, analytical"
        );
    }

    /// A segment from GPU 8 to GPU 0 as it reaches their leaf, and the leaf: the near end of
    /// the route's second queued link (the first is the NIC's).
    fn segment_at_the_leaf(model: &SimModel) -> (Segment, NodeId) {
        let t = &model.topology;
        let (src, dst) = (t.gpu(8), t.gpu(0));
        let mut seg = segment(src, dst, 3);
        seg.route = Route::plan(t, network_queues(t), src, seg, &mut Vec::new());
        let links = walk(t, src, &seg.route);
        let hop = (0..seg.route.len())
            .filter(|&h| seg.route.queued(h))
            .nth(1)
            .expect("a queued hop at the leaf");
        seg.hop = hop;
        (seg, t.link(links[usize::from(hop)]).src)
    }

    /// The TxDones (time, event) that `lp` at `node` plans handling `body` at `now`.
    fn tx_dones(
        model: &SimModel,
        lp: &mut FabricLp,
        node: NodeId,
        now: u64,
        body: Body,
    ) -> Vec<(u64, Body)> {
        let (mut seq, mut out, mut hops) = (0, Vec::new(), Vec::new());
        let mut ctx = Ctx::new(SimTime::from_ps(now), node, &mut seq, &mut out, &mut hops);
        lp.handle(model, body, &mut ctx);
        out.into_iter()
            .filter(|(_, e)| matches!(e.body, Body::TxDone { .. }))
            .map(|(k, e)| (k.time.as_ps(), e.body))
            .collect()
    }

    #[test]
    fn a_stale_tx_done_plans_nothing() {
        let model = two_hosts_per_leaf();
        let (seg, leaf) = segment_at_the_leaf(&model);
        let mut lp = FabricLp::new(&model, leaf);
        let mut handle = |now: u64, body: Body| tx_dones(&model, &mut lp, leaf, now, body);
        // Two segments at once: the first goes, the second waits for the first's TxDone.
        assert!(handle(0, Body::Segment(seg)).is_empty());
        let planned = handle(0, Body::Segment(seg));
        let [(t1, ref tx_done)] = planned[..] else {
            panic!("one TxDone for the backlog: {planned:?}");
        };
        // A third arrives at that TxDone's picosecond and is handled first: it finds the
        // port free and sends the second, planning the next TxDone itself.
        let planned = handle(t1, Body::Segment(seg));
        let [(t2, _)] = planned[..] else {
            panic!("one TxDone for the third: {planned:?}");
        };
        assert!(t2 > t1);
        // The first TxDone is stale now, and plans no second TxDone at t2.
        assert_eq!(handle(t1, tx_done.clone()), vec![]);
        assert_eq!(
            handle(t2, tx_done.clone()),
            vec![],
            "the third goes; nothing waits"
        );
    }

    #[test]
    fn a_queue_buffer_stays_within_four_times_what_it_holds() {
        let model = two_hosts_per_leaf();
        let (seg, leaf) = segment_at_the_leaf(&model);
        let port = seg.route.port(seg.hop).expect("carried");
        let mut lp = FabricLp::new(&model, leaf);
        // Handles `body` at `now`; the next TxDone it plans, if any.
        let handle = |lp: &mut FabricLp, now: u64, body: Body| {
            tx_dones(&model, lp, leaf, now, body).into_iter().next()
        };
        let queue = |lp: &FabricLp| {
            let q = &lp.ports.ports[port].as_ref().expect("the port").queue;
            (q.len(), q.capacity())
        };
        // A burst of 200 segments at once, then the port drains it one TxDone at a time.
        let mut next = None;
        for _ in 0..200 {
            next = handle(&mut lp, 0, Body::Segment(seg)).or(next);
        }
        let (len, grown) = queue(&lp);
        assert_eq!(len, 199, "one is on the wire");
        assert!(grown >= 199);
        let mut shrank = false;
        while let Some((at, tx_done)) = next.take() {
            next = handle(&mut lp, at, tx_done);
            let (len, capacity) = queue(&lp);
            assert!(
                capacity <= QUEUE_CAPACITY_KEPT.max(4 * (len + 1)),
                "{capacity} slots for {len} segments"
            );
            shrank |= capacity < grown;
        }
        assert!(shrank);
        assert_eq!(queue(&lp).0, 0, "drained");
        assert!(queue(&lp).1 <= QUEUE_CAPACITY_KEPT);
    }

    /// The flows in the order `node`'s fabric LP puts `arrivals` (all at time 0, in this
    /// order) on the wire, its TxDones handled as they come.
    fn sent_flows(model: &SimModel, node: NodeId, arrivals: &[Segment]) -> Vec<u32> {
        let timed: Vec<(u64, Segment)> = arrivals.iter().map(|s| (0, *s)).collect();
        sent_flows_at(model, node, &timed)
    }

    /// [`sent_flows`] with each segment arriving at its own time (ps).
    fn sent_flows_at(model: &SimModel, node: NodeId, arrivals: &[(u64, Segment)]) -> Vec<u32> {
        let mut lp = FabricLp::new(model, node);
        let (mut seq, mut hops) = (0, Vec::new());
        let mut pending: Vec<(u64, Body)> = arrivals
            .iter()
            .map(|&(at, s)| (at, Body::Segment(s)))
            .collect();
        let mut sent = Vec::new();
        while let Some(i) = (0..pending.len()).min_by_key(|&i| pending[i].0) {
            let (now, body) = pending.remove(i);
            let mut out = Vec::new();
            let mut ctx = Ctx::new(SimTime::from_ps(now), node, &mut seq, &mut out, &mut hops);
            lp.handle(model, body, &mut ctx);
            for (k, e) in out {
                match e.body {
                    Body::TxDone { .. } => pending.push((k.time.as_ps(), e.body)),
                    Body::Segment(s) if e.target != node => sent.push(s.flow),
                    _ => {}
                }
            }
        }
        sent
    }

    /// A 1 MiB segment from GPU 8 to GPU 0 of [`two_hosts_per_leaf`], routed, with its first
    /// queued hop (its NIC's port) and that hop's link.
    fn bulk_at_its_nic(model: &SimModel) -> (Segment, u8, LinkId) {
        let t = &model.topology;
        let (src, dst) = (t.gpu(8), t.gpu(0));
        let mut bulk = segment(src, dst, 3);
        bulk.route = Route::plan(t, network_queues(t), src, bulk, &mut Vec::new());
        bulk.bytes = 1 << 20;
        let links = walk(t, src, &bulk.route);
        let first = (0..bulk.route.len())
            .find(|&h| bulk.route.queued(h))
            .expect("a queued hop");
        let link = links[usize::from(first)];
        assert_eq!(t.nodes()[t.link(link).src as usize].kind, NodeKind::Nic);
        (bulk, first, link)
    }

    /// A NIC's transmit scheduler serves its queue pairs in turn, byte for byte: an 8-byte
    /// amax all-reduce posted on its own queue pair behind four queued 1 MiB segments of a
    /// gradient reduce-scatter goes right after the one on the wire (start-time fair
    /// queuing: its start tag is the virtual time, theirs are 1-4 MiB later), not after
    /// all four, 84 us at 400 Gb/s; posted on the reduce-scatter's queue pair it goes after
    /// them (RC order). A switch port keeps one FIFO: there it waits them out.
    #[test]
    fn a_nic_serves_its_flows_in_turn_and_a_switch_port_in_order() {
        let model = two_hosts_per_leaf();
        let (bulk, first, link) = bulk_at_its_nic(&model);
        let nic = model.topology.link(link).src;
        let arrivals = |hop: u8| {
            let mut bulk = bulk;
            bulk.hop = hop;
            let mut amax = bulk;
            amax.flow = 1;
            amax.bytes = 8;
            let mut own_qp = amax;
            own_qp.hash = 4;
            [
                [bulk, bulk, bulk, bulk, bulk, own_qp],
                [bulk, bulk, bulk, bulk, bulk, amax],
            ]
        };
        // The first bulk segment goes at once; the amax on its own queue pair next, on the
        // bulk's after all of them.
        let [own, shared] = arrivals(first);
        assert_eq!(sent_flows(&model, nic, &own), [0, 1, 0, 0, 0, 0]);
        assert_eq!(sent_flows(&model, nic, &shared), [0, 0, 0, 0, 0, 1]);
        let (at_leaf, leaf) = segment_at_the_leaf(&model);
        assert_eq!(at_leaf.route, bulk.route);
        assert_eq!(
            sent_flows(&model, leaf, &arrivals(at_leaf.hop)[0]),
            [0, 0, 0, 0, 0, 1]
        );
    }

    /// Start-time fair queuing keeps a queue pair's finish tag while the virtual time has
    /// not reached it: a queue pair whose 1 MiB segment has just left the wire and which
    /// posts another goes after the segment another queue pair queued behind it, as a
    /// round robin would serve them; one that posts after a longer pause would not.
    #[test]
    fn a_queue_pair_back_at_once_keeps_its_place_in_the_turns() {
        let model = two_hosts_per_leaf();
        let (mut a, first, link) = bulk_at_its_nic(&model);
        a.hop = first;
        let link = model.topology.link(link);
        let nic = link.src;
        let segment_ps = (f64::from(a.bytes) / link.bytes_per_s * 1e12) as u64;
        let mut b = a;
        b.flow = 1;
        b.hash = 4;
        // A's first goes at once, B's two queue behind it; A's second comes while B's first
        // is on the wire (A's finish tag, 1 MiB, is B's second's start: it goes after it).
        let arrivals = [(0, a), (0, b), (0, b), (segment_ps + segment_ps / 2, a)];
        assert_eq!(sent_flows_at(&model, nic, &arrivals), [0, 1, 1, 0]);
    }

    #[test]
    fn a_segment_cuts_through_a_link_one_packet_behind_its_head() {
        // Its tail already in: the link sends it whole, and its head is one packet ahead.
        let c = cut_through(1_000, 1_000, 20_000, 80, 500);
        assert_eq!(c.end_ps, 21_000);
        assert_eq!(c.head_ps, 1_000 + 80 + 500);
        assert_eq!(c.head_ps + u64::from(c.lag_ps), 21_000 + 500);
        // Still coming in over a slower link: the last packet leaves one packet after the
        // tail is in, however fast this link is.
        let c = cut_through(1_000, 60_000, 20_000, 80, 500);
        assert_eq!(c.end_ps, 60_080);
        assert_eq!(c.head_ps + u64::from(c.lag_ps), 60_080 + 500);
        // A lag beyond u32 lands whole, at its tail's time.
        let c = cut_through(0, 0, 5_000_000_000, 80, 500);
        assert_eq!((c.head_ps, c.lag_ps), (5_000_000_500, 0));
    }

    #[test]
    fn an_event_stays_within_80_bytes() {
        // The queues move events by value; the carried route made a segment 16 bytes larger,
        // and the cut-through lag fits only because the route packs its length and queued
        // bits into one word and `hop` is a byte; the completion count of adaptive routing
        // only because the ECN and relay marks share a byte.
        assert!(std::mem::size_of::<super::super::Event>() <= 80);
    }

    #[test]
    fn no_route_is_carried_from_a_node_off_the_path() {
        let t = build_toml("gpus = 16\n", &[h100()], None);
        let (s, d) = (t.gpu(0), t.gpu(9));
        // GPU 3 is on no route from GPU 0 to GPU 9 (another host): nothing to plan.
        let route = Route::plan(&t, |_| true, t.gpu(3), segment(s, d, 0), &mut Vec::new());
        assert_eq!(route, Route::default());
        assert_eq!(route.port(0), None);
    }
}
