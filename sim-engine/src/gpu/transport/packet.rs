//! The packet transport, for routes with a queued link: a flow goes segment by segment
//! through the ports, within its window, paced by DCQCN's rate (congestion notified by ECN
//! marks on the acknowledgements) or by NCCL's FIFO where that is the tighter bound; split
//! over queue pairs, each with its own path. Also the receiving end: acknowledgements, and
//! split flows that end when every queue pair's last segment is in.

use crate::gpu::GpuLp;
use crate::hash::splitmix64;
use crate::net::{NO_PORT, Route};
use crate::serialisation_ps;
use crate::time::{SimTime, ps_per_byte};
use crate::{Body, Ctx, INJECTED, NO_LINK, Segment, SimModel};

impl GpuLp {
    /// Emits the flow's next segments while its window (and DCQCN rate) allows.
    pub(super) fn pump_flow(&mut self, model: &SimModel, id: u32, ctx: &mut Ctx) {
        let node = self.node;
        loop {
            let Some(Some(f)) = self.flows.get_mut(id as usize) else {
                return;
            };
            if f.sent_any && f.sent >= f.total {
                return;
            }
            let bytes = next_segment(f.total - f.sent, f.segment);
            if f.in_flight > 0 && f.in_flight + bytes > f.window {
                return;
            }
            if model.faults.has_timed_links() {
                let downs = model.faults.cables_down_by(ctx.now);
                if !f.sent_any {
                    f.cables_down_at_start = downs;
                } else if f.sent + bytes >= f.total
                    && f.in_flight > 0
                    && downs != f.cables_down_at_start
                {
                    // A cable went down while the flow was under way: rerouted segments may
                    // overtake those draining on the old path, and the last one ends the
                    // message. Like a receiver's sequence check, the last waits until every
                    // earlier one is acknowledged.
                    return;
                }
            }
            // Paced by DCQCN's rate, or by NCCL's FIFO when that is the tighter bound.
            let dcqcn_rate = match (f.dcqcn.as_mut(), model.net.dcqcn.as_ref()) {
                (Some(dc), Some(p)) => {
                    dc.advance(ctx.now.as_ps(), p);
                    dc.rate.min(f.line_rate)
                }
                _ => f64::INFINITY,
            };
            let rate = dcqcn_rate.min(f.fifo_rate);
            if rate.is_finite() {
                // A FIFO belongs to the connection, not to one transfer: flows to the same
                // GPU (a ring's overlapping steps) share its pace.
                let connection = f.fifo_rate.is_finite().then(|| {
                    let dst = f.dst;
                    match self.fifo_clock.iter().position(|(d, _)| *d == dst) {
                        Some(i) => i,
                        None => {
                            self.fifo_clock.push((dst, 0));
                            self.fifo_clock.len() - 1
                        }
                    }
                });
                let next_tx =
                    connection.map_or(f.next_tx_ps, |i| f.next_tx_ps.max(self.fifo_clock[i].1));
                if ctx.now.as_ps() < next_tx {
                    if !f.pace_scheduled {
                        f.pace_scheduled = true;
                        ctx.emit(
                            self.node,
                            SimTime::from_ps(next_tx),
                            Body::Pace { flow: id },
                        );
                    }
                    return;
                }
                f.next_tx_ps = ctx.now.as_ps() + serialisation_ps(bytes.max(1), ps_per_byte(rate));
                if let Some(i) = connection {
                    self.fifo_clock[i].1 = f.next_tx_ps;
                }
                if let (Some(dc), Some(p)) = (f.dcqcn.as_mut(), model.net.dcqcn.as_ref()) {
                    dc.on_sent(ctx.now.as_ps(), bytes, p);
                }
            }
            // Split over queue pairs, segment i goes on QP i mod parts, each with its path.
            let index = f.sent / f.segment;
            let (hash, last) = if f.parts > 1 {
                let segments = (f.total / f.segment).max(1);
                let qp = index % u64::from(f.parts);
                (
                    splitmix64(f.hash ^ qp),
                    index + u64::from(f.parts) >= segments,
                )
            } else {
                (f.hash, f.sent + bytes >= f.total)
            };
            f.sent += bytes;
            f.sent_any = true;
            f.in_flight += bytes;
            let mut seg = Segment {
                src: node,
                dst: f.dst,
                flow: id,
                bytes: bytes as u32,
                hash,
                tag: f.tag,
                path_ps: f.path_ps,
                ingress: NO_LINK,
                ingress_port: NO_PORT,
                route: Route::default(),
                hop: 0,
                last,
                // Truncated on purpose: the receiver counts modulo 2^16 (`completes`).
                completion: if model.net.adaptive_routing {
                    segment_count(f.total, f.segment) as u16
                } else {
                    u16::from(f.parts)
                },
                marks: 0,
                via: f.via,
                lag_ps: 0,
            };
            let topology = &model.topology;
            let is_queued = |l: u32| model.net.is_queued(topology.link(l).class);
            if model.faults.has_timed_links() && model.faults.links_down_by(ctx.now) {
                // A cable is down: every segment is routed around what is down as it leaves
                // (without a path, it fails at this GPU, naming the faults).
                let now = ctx.now;
                let down = |l: u32| model.faults.link_down_at(l, now).is_some();
                seg.route =
                    Route::plan_avoiding(topology, is_queued, node, seg, ctx.hops, Some(&down));
            } else if f.parts == 1 {
                seg.route = *f
                    .route
                    .get_or_insert_with(|| Route::plan(topology, is_queued, node, seg, ctx.hops));
            }
            self.ports.forward(model, seg, ctx);
        }
    }

    /// Flow `id`'s pace allows its next segment now.
    pub(in crate::gpu) fn paced(&mut self, model: &SimModel, id: u32, ctx: &mut Ctx) {
        if let Some(Some(f)) = self.flows.get_mut(id as usize) {
            f.pace_scheduled = false;
        }
        self.pump_flow(model, id, ctx);
    }

    /// Segment `seg` of a flow reached this GPU, its destination: acknowledged, and when it
    /// ends the flow (on every queue pair), the message has arrived.
    pub(in crate::gpu) fn receive_segment(
        &mut self,
        model: &SimModel,
        seg: &Segment,
        ctx: &mut Ctx,
    ) {
        ctx.emit(
            seg.src,
            ctx.now + SimTime::from_ps(seg.path_ps),
            Body::Ack {
                flow: seg.flow,
                bytes: seg.bytes,
                ecn: seg.ecn(),
            },
        );
        let complete = self.completes(seg, model.net.adaptive_routing);
        if complete && seg.tag.group == INJECTED {
            self.injected_arrived(seg.tag.seq, ctx.now.as_ps());
        } else if complete {
            self.arrived(model, seg.tag, (0, 0), ctx);
        }
    }

    /// Counts a segment toward its message; true when it completes it. Routed by ECMP, a
    /// message's segments arrive in order on each of its queue pairs, so the pieces counted
    /// are the queue pairs' final segments and `completion` is their number. Routed
    /// adaptively, its segments may arrive in any order, so every segment is a piece and
    /// `completion` is their count modulo 2^16, which is exact here: once a `last` segment
    /// (sent after every other but the other queue pairs' last ones) is in, fewer segments
    /// than the window holds are still on their way.
    fn completes(&mut self, seg: &Segment, adaptive: bool) -> bool {
        if !adaptive {
            if !seg.last {
                return false;
            }
            if seg.completion <= 1 {
                return true;
            }
        }
        let key = (seg.src, seg.flow);
        let i = match self.pieces_seen.iter().position(|(k, _, _)| *k == key) {
            Some(i) => i,
            None => {
                self.pieces_seen.push((key, 0, false));
                self.pieces_seen.len() - 1
            }
        };
        let entry = &mut self.pieces_seen[i];
        entry.1 += 1;
        entry.2 |= seg.last;
        let done = entry.2 && entry.1 as u16 == seg.completion;
        if done {
            self.pieces_seen.swap_remove(i);
        }
        done
    }
}

/// Segments a flow of `total` bytes is cut into by [`next_segment`]: whole segments until
/// less than two are left, then the rest as one.
fn segment_count(total: u64, segment: u64) -> u64 {
    (total / segment).max(1)
}

/// Bytes of a flow's next segment with `rest` bytes left to send: the last takes all
/// that is left ([`crate::segments::segment_size`]).
fn next_segment(rest: u64, segment: u64) -> u64 {
    if rest >= 2 * segment { segment } else { rest }
}
