//! NCCL's multi-node rings, one per lane of channels.
//!
//! NCCL builds one ring per channel. On a node with a NIC per GPU, channel `c`'s ring enters
//! the node at the GPU on rail `c`, visits the node's other GPUs over NVLink, and leaves from
//! the GPU before it. That GPU hands the data over NVLink to the rail-`c` GPU, which sends it
//! through its own NIC to the rail-`c` GPU of the next node: PXN (NCCL 2.12+, `NCCL_PXN_DISABLE`
//! default 0; `src/graph/paths.cc`), seen in NCCL's logs as `via NET/IB/c(r)`. Rings therefore
//! stay on their rail across nodes, and every NIC carries a share of the traffic.
//!
//! Channels whose rings take the same route are one *lane* here: there are as many lanes as
//! members per node (at most the channel count), each carrying its channels' bytes.

/// A rank's neighbours in one lane's ring, as member ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneLink {
    pub next: u32,
    pub prev: u32,
    /// The member whose NIC carries the hop to `next` (PXN), when that is not this rank.
    pub via: Option<u32>,
}

/// Members grouped by host, in order of first appearance.
fn blocks(members: &[u32], host_of: &impl Fn(u32) -> u32) -> Vec<Vec<u32>> {
    let mut out: Vec<(u32, Vec<u32>)> = Vec::new();
    for &m in members {
        let h = host_of(m);
        match out.iter_mut().find(|(host, _)| *host == h) {
            Some((_, b)) => b.push(m),
            None => out.push((h, vec![m])),
        }
    }
    out.into_iter().map(|(_, b)| b).collect()
}

/// Lanes of a ring over `members` with `channels` channels: one per member on the fullest
/// node when the ring spans nodes, else one.
pub fn lane_count(members: &[u32], host_of: impl Fn(u32) -> u32, channels: u32) -> u32 {
    let b = blocks(members, &host_of);
    if b.len() <= 1 {
        return 1;
    }
    let ppn = b.iter().map(Vec::len).max().unwrap_or(1) as u32;
    ppn.min(channels.max(1))
}

/// The ring of lane `lane`: each node's members rotated to start at position `lane`.
pub fn lane_order(members: &[u32], host_of: impl Fn(u32) -> u32, lane: u32) -> Vec<u32> {
    blocks(members, &host_of)
        .into_iter()
        .flat_map(|mut b| {
            let r = lane as usize % b.len();
            b.rotate_left(r);
            b
        })
        .collect()
}

/// `me`'s neighbours in every lane; `pxn` routes a node's exit hop through its lane's entry
/// member.
pub fn lane_links(
    members: &[u32],
    host_of: impl Fn(u32) -> u32,
    lanes: u32,
    pxn: bool,
    me: u32,
) -> Vec<LaneLink> {
    (0..lanes)
        .map(|lane| {
            let order = lane_order(members, &host_of, lane);
            let n = order.len();
            let i = order.iter().position(|&m| m == me).unwrap_or(0);
            let next = order[(i + 1) % n];
            let prev = order[(i + n - 1) % n];
            let via = (pxn && n > 1 && host_of(next) != host_of(me))
                .then(|| {
                    // The lane's entry member of this node: the first of its run in `order`.
                    let mut j = i;
                    while host_of(order[(j + n - 1) % n]) == host_of(me) && (j + n - 1) % n != i {
                        j = (j + n - 1) % n;
                    }
                    order[j]
                })
                .filter(|&entry| entry != me);
            LaneLink { next, prev, via }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host8(m: u32) -> u32 {
        m / 8
    }

    #[test]
    fn every_lane_is_one_ring_through_every_member() {
        let members: Vec<u32> = (0..32).collect();
        let lanes = lane_count(&members, host8, 24);
        assert_eq!(lanes, 8);
        for lane in 0..lanes {
            let mut seen = [false; 32];
            let mut at = 0;
            for _ in 0..32 {
                assert!(!seen[at as usize], "lane {lane} revisits {at}");
                seen[at as usize] = true;
                let l = lane_links(&members, host8, lanes, true, at)[lane as usize];
                let back = lane_links(&members, host8, lanes, true, l.next)[lane as usize];
                assert_eq!(back.prev, at);
                at = l.next;
            }
            assert_eq!(at, 0, "lane {lane} closes the ring");
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn ring_allreduce_moves_the_textbook_volume() {
        // A rank sends 2(n−1) steps of size/(n·lanes) on each lane: 2(n−1)/n of the buffer,
        // nccl-tests' bus bandwidth factor.
        let (n, size) = (32u64, 1u64 << 30);
        let lanes = 8;
        let sent = lanes * 2 * (n - 1) * (size / (n * lanes));
        assert_eq!(sent as f64, 2.0 * (n - 1) as f64 / n as f64 * size as f64);
    }

    #[test]
    fn pxn_leaves_each_node_on_the_lane_rail() {
        let members: Vec<u32> = (0..16).collect();
        for lane in 0..8 {
            let order = lane_order(&members, host8, lane);
            // Lane `lane` enters each node at local GPU `lane`.
            assert_eq!(order[0] % 8, lane);
            assert_eq!(order[8] % 8, lane);
            let exit = order[7];
            let l = lane_links(&members, host8, 8, true, exit)[lane as usize];
            assert_eq!(l.next, 8 + lane);
            if lane == (exit % 8) {
                assert_eq!(l.via, None);
            } else {
                // Relayed by the node's rail-`lane` GPU: same rail as the next node's entry.
                assert_eq!(l.via, Some(lane));
            }
            let no_pxn = lane_links(&members, host8, 8, false, exit)[lane as usize];
            assert_eq!(no_pxn.via, None);
        }
    }

    #[test]
    fn single_node_and_one_per_node_rings_have_one_lane() {
        let members: Vec<u32> = (0..8).collect();
        assert_eq!(lane_count(&members, host8, 24), 1);
        let spread: Vec<u32> = (0..8).map(|i| i * 8).collect();
        assert_eq!(lane_count(&spread, host8, 24), 1);
        let l = lane_links(&spread, host8, 1, true, 0)[0];
        assert_eq!((l.next, l.prev, l.via), (8, 56, None));
    }
}
