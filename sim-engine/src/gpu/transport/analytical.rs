//! The analytical transport, for routes with no queued or shared link: a transfer takes a
//! FIFO share of the GPU's first link and arrives as one message, with no event on the way.
//! Also what closed-form collectives need of the links: when one is free, and their traffic
//! counted per link class.

use super::{NO_PORT, PathInfo, Sent, Transfer};
use crate::gpu::Running;
use crate::gpu::{COMPUTE, GpuLp};
use crate::serialisation_ps;
use crate::time::{SimTime, ps_per_byte};
use crate::topology::NodeId;
use crate::{Body, Ctx, SimModel};

impl GpuLp {
    /// Sends `t` over analytical links: a FIFO share of the first link at the path's
    /// bottleneck bandwidth, or at what NCCL's FIFO sustains across the network when that is
    /// less; it arrives as one message.
    pub(super) fn transmit_analytical(
        &mut self,
        model: &SimModel,
        t: &Transfer,
        ctx: &mut Ctx,
    ) -> Sent {
        let path = &t.path;
        let computing = matches!(self.running[COMPUTE], Running::Compute { .. });
        let i = match path.first_port {
            NO_PORT => 0,
            port => port as usize,
        };
        let rate = path.bytes_per_s.min(t.fifo_rate);
        let mut ser = serialisation_ps(t.bytes, ps_per_byte(rate));
        if computing {
            ser = crate::time::round_ps(ser as f64 / model.interference.comm_rate);
        }
        let now = ctx.now.as_ps();
        let start = fair_start(now, self.link_free_ps[i], ser);
        self.link_free_ps[i] = now.max(self.link_free_ps[i]) + ser;
        let arrive = start + ser + path.latency_ps;
        self.account_path(model, path, t.bytes);
        ctx.emit(
            t.dst,
            SimTime::from_ps(arrive),
            Body::Message { tag: t.tag },
        );
        if let Some(s) = t.notify
            && let Running::Comm(run) = &mut self.running[usize::from(s)]
        {
            run.analytical_sends_until = run.analytical_sends_until.max(arrive);
        }
        Sent::Analytical {
            leaves_ps: start + ser,
        }
    }

    /// When `bytes` sent now towards `dst` start to move on this GPU's first link, sharing
    /// it with the analytical transfers already queued there ([`fair_start`]).
    pub(in crate::gpu) fn link_start_toward(
        &mut self,
        model: &SimModel,
        dst: NodeId,
        now: u64,
        bytes: u64,
    ) -> u64 {
        match self.paths.get(model, self.node, dst, 0) {
            Ok(p) => self.link_start_on(&p, now, bytes),
            Err(_) => now,
        }
    }

    /// [`Self::link_start_toward`] for a closed-form collective's `bytes`, which it also
    /// counts on the link classes towards `dst` ([`Self::account_path`]): one lookup of the
    /// path for both, since this runs once per member and collective.
    pub(in crate::gpu) fn start_and_account_toward(
        &mut self,
        model: &SimModel,
        dst: NodeId,
        now: u64,
        bytes: u64,
    ) -> u64 {
        let Ok(p) = self.paths.get(model, self.node, dst, 0) else {
            return now;
        };
        self.start_and_account_on(model, &p, now, bytes)
    }

    /// [`Self::start_and_account_toward`] along a path already at hand (a closed group's
    /// path to its ring neighbour, [`crate::gpu::collective`]'s `GroupInfo::next_path`).
    pub(in crate::gpu) fn start_and_account_on(
        &mut self,
        model: &SimModel,
        path: &PathInfo,
        now: u64,
        bytes: u64,
    ) -> u64 {
        self.account_path(model, path, bytes);
        self.link_start_on(path, now, bytes)
    }

    /// When `bytes` sent now along `path` start on its first link.
    fn link_start_on(&self, path: &PathInfo, now: u64, bytes: u64) -> u64 {
        if path.first_port == NO_PORT {
            return now;
        }
        let i = path.first_port as usize;
        let ser = serialisation_ps(bytes, ps_per_byte(path.bytes_per_s));
        fair_start(now, self.link_free_ps[i], ser)
    }

    /// Counts a mirrored group's closed-form traffic ([`crate::symmetry`]): each of
    /// its `members` moves `bytes` to its ring neighbour, `crosses[c]` of those paths cross
    /// link class `c` over `hops[c]` links in all; the replicas hold `replicas / members`
    /// such groups for this rank's place, and this rank counts them all.
    pub(in crate::gpu) fn account_mirrored(
        &mut self,
        model: &SimModel,
        bytes: u64,
        (crosses, hops): (&[u32; 4], &[u32; 4]),
        members: u32,
    ) {
        let groups = u64::from(model.symmetry.replicas() / members.max(1));
        for c in 0..4 {
            self.analytical_bytes[c] += bytes * u64::from(crosses[c]) * groups;
            self.analytical_link_bytes[c] += bytes * u64::from(hops[c]) * groups;
        }
    }

    /// Counts `bytes` sent analytically along `path`: once per link class it crosses, and
    /// once per link it crosses (what links.csv's utilisation needs).
    /// With symmetry this rank sends for its mirrors too ([`crate::symmetry`]).
    fn account_path(&mut self, model: &SimModel, path: &PathInfo, bytes: u64) {
        let bytes = bytes * u64::from(model.symmetry.replicas());
        for (c, hops) in path.class_hops.iter().enumerate() {
            if *hops > 0 {
                self.analytical_bytes[c] += bytes;
                self.analytical_link_bytes[c] += bytes * u64::from(*hops);
            }
        }
    }
}

/// When a transfer of serialisation time `ser_ps`, arriving at `now` at a link busy with
/// queued transfers until `free_ps`, effectively starts. The NIC serves its queue pairs in
/// turn (round robin), so a transfer shares the link with the backlog instead of waiting
/// behind all of it: with two flows sharing fairly it ends after 2 × its own time while the
/// backlog lasts, i.e. it is held back by the shorter of the backlog and its own time. A
/// transfer longer than the backlog ends where FIFO would end it; the link stays busy for
/// the sum of both either way.
pub(in crate::gpu) fn fair_start(now: u64, free_ps: u64, ser_ps: u64) -> u64 {
    now + free_ps.saturating_sub(now).min(ser_ps)
}

#[cfg(test)]
mod tests {
    use super::fair_start;
    use crate::serialisation_ps;
    use crate::time::ps_per_byte;

    /// A 400 Gb/s NIC (50 GB/s) busy with a pipeline send of 12.6 MB (MLPerf GPT-3's stage
    /// boundary at TP 4: 512 × 12,288 × 2 bytes, 252 µs on the wire). A 32-byte amax
    /// all-reduce arriving behind it shares the NIC with it and is held back by its own
    /// serialisation (two flows in turn), not by the send's 252 µs; a second 12.6 MB send
    /// waits out the first, as FIFO would have it.
    #[test]
    fn a_small_transfer_shares_the_link_and_a_large_one_waits() {
        let rate = ps_per_byte(50e9);
        let send = serialisation_ps(12_582_912, rate);
        assert!((send as f64 / 1e6 - 251.7).abs() < 0.5, "{send} ps");
        let now = 1_000_000;
        let free = now + send;
        let amax = serialisation_ps(32, rate);
        assert_eq!(fair_start(now, free, amax), now + amax);
        assert_eq!(fair_start(now, free, send), free);
        // An idle link starts anything at once.
        assert_eq!(fair_start(now, now - 5, send), now);
        assert_eq!(fair_start(now, 0, amax), now);
    }
}
