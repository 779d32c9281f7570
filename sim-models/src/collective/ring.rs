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

/// Members grouped by host, hosts in order of first appearance.
pub(crate) fn blocks(members: &[u32], host_of: &impl Fn(u32) -> u32) -> Vec<Vec<u32>> {
    if let Some(runs) = runs(members, host_of) {
        return runs.into_iter().map(|r| members[r].to_vec()).collect();
    }
    let mut index = std::collections::BTreeMap::new();
    let mut out: Vec<Vec<u32>> = Vec::new();
    for &m in members {
        let i = *index.entry(host_of(m)).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[i].push(m);
    }
    out
}

/// The members' hosts as index ranges, when each host's members are contiguous and hosts
/// only increase (ranks fill hosts in order, the usual layout); `None` otherwise.
fn runs(members: &[u32], host_of: &impl Fn(u32) -> u32) -> Option<Vec<std::ops::Range<usize>>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut last = None;
    for (i, &m) in members.iter().enumerate() {
        let h = host_of(m);
        match last {
            Some(l) if h == l => continue,
            Some(l) if h < l => return None,
            Some(_) => out.push(start..i),
            None => {}
        }
        start = i;
        last = Some(h);
    }
    if !members.is_empty() {
        out.push(start..members.len());
    }
    Some(out)
}

/// How `members` spread over hosts: (hosts, most members on one host).
pub fn spread(members: &[u32], host_of: impl Fn(u32) -> u32) -> (u32, u32) {
    let (mut hosts, mut most, mut run) = (0u32, 0u32, 0u32);
    let mut last = None;
    for &m in members {
        let h = host_of(m);
        match last {
            Some(l) if h == l => run += 1,
            Some(l) if h < l => {
                let b = blocks(members, &host_of);
                let ppn = b.iter().map(Vec::len).max().unwrap_or(0);
                return (b.len() as u32, ppn as u32);
            }
            _ => {
                hosts += 1;
                run = 1;
            }
        }
        most = most.max(run);
        last = Some(h);
    }
    (hosts, most)
}

/// Lanes of a ring with `channels` channels over `nodes` hosts holding at most
/// `ranks_per_node` members each: one per member on the fullest host when the ring spans
/// hosts, else one.
pub fn lane_count(nodes: u32, ranks_per_node: u32, channels: u32) -> u32 {
    if nodes <= 1 {
        1
    } else {
        ranks_per_node.min(channels).max(1)
    }
}

/// The ring of lane `lane` over host blocks: each host's members rotated to start at
/// position `lane`.
fn order(blocks: &[Vec<u32>], lane: u32) -> Vec<u32> {
    blocks
        .iter()
        .flat_map(|b| {
            let r = lane as usize % b.len();
            b[r..].iter().chain(&b[..r]).copied()
        })
        .collect()
}

/// The ring of lane `lane` over `members`.
pub fn lane_order(members: &[u32], host_of: impl Fn(u32) -> u32, lane: u32) -> Vec<u32> {
    order(&blocks(members, &host_of), lane)
}

/// `me`'s neighbours in every lane; `pxn` routes a host's exit hop through the lane's entry
/// member on that host (the member on the next host's entry rail).
pub fn lane_links(
    members: &[u32],
    host_of: impl Fn(u32) -> u32,
    lanes: u32,
    pxn: bool,
    me: u32,
) -> Vec<LaneLink> {
    // One host block after another, each rotated to start at the lane's position: only
    // this rank's block and its two neighbours matter, so nothing of size n is built per
    // lane (a 1,024-member ring on 131,072 ranks made 10^8 allocations).
    let owned;
    let blocks: Vec<&[u32]> = match runs(members, &host_of) {
        Some(runs) => runs.into_iter().map(|r| &members[r]).collect(),
        None => {
            owned = blocks(members, &host_of);
            owned.iter().map(Vec::as_slice).collect()
        }
    };
    let Some((bi, p)) = blocks
        .iter()
        .enumerate()
        .find_map(|(i, b)| b.iter().position(|&m| m == me).map(|p| (i, p)))
    else {
        let first = members.first().copied().unwrap_or(me);
        return vec![
            LaneLink {
                next: first,
                prev: first,
                via: None
            };
            lanes as usize
        ];
    };
    let nb = blocks.len();
    let mine = blocks[bi];
    let rotated = |b: &[u32], lane: u32, k: usize| b[(lane as usize % b.len() + k) % b.len()];
    (0..lanes)
        .map(|lane| {
            let len = mine.len();
            let q = (p + len - lane as usize % len) % len;
            let next = if q + 1 < len {
                rotated(mine, lane, q + 1)
            } else {
                rotated(blocks[(bi + 1) % nb], lane, 0)
            };
            let prev = if q > 0 {
                rotated(mine, lane, q - 1)
            } else {
                let b = blocks[(bi + nb - 1) % nb];
                rotated(b, lane, b.len() - 1)
            };
            let via = Some(mine[lane as usize % len])
                .filter(|_| pxn && host_of(next) != host_of(me))
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
        let (nodes, ppn) = spread(&members, host8);
        assert_eq!((nodes, ppn), (4, 8));
        let lanes = lane_count(nodes, ppn, 24);
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
    fn ring_allreduce_over_lane_links_reduces_every_block_on_every_rank() {
        use std::collections::BTreeSet;
        let members: Vec<u32> = (0..24).collect();
        let n = members.len();
        let lanes = 8;
        let size = (24 * 8) << 20;
        let mut moved = 0u64;
        for lane in 0..lanes {
            let next = |m: u32| lane_links(&members, host8, lanes, true, m)[lane as usize].next;
            // Ring positions as the lane's next pointers order them.
            let mut order = vec![0u32];
            while order.len() < n {
                order.push(next(*order.last().expect("a rank")));
            }
            // held[i][b]: contributors summed into position i's copy of block b.
            let mut held: Vec<Vec<BTreeSet<usize>>> = (0..n)
                .map(|i| (0..n).map(|_| BTreeSet::from([i])).collect())
                .collect();
            // Reduce-scatter, then all-gather: in step k position i sends block i−k.
            for k in 0..2 * (n - 1) {
                let before = held.clone();
                for i in 0..n {
                    let to = (i + 1) % n;
                    assert_eq!(next(order[i]), order[to]);
                    let b = (i + n - k % n) % n;
                    let data = before[i][b].clone();
                    if k < n - 1 {
                        held[to][b].extend(data);
                    } else {
                        held[to][b] = data;
                    }
                    moved += size / (n as u64 * u64::from(lanes));
                }
            }
            let all: BTreeSet<usize> = (0..n).collect();
            assert!(held.iter().all(|h| h.iter().all(|b| *b == all)));
        }
        // Every rank sends 2(n−1)/n of the buffer: nccl-tests' all-reduce bus bandwidth factor.
        assert_eq!(moved, 2 * (n as u64 - 1) * size);
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
    fn spread_and_blocks_agree_for_ordered_and_scattered_members() {
        let ordered: Vec<u32> = (0..20).collect();
        assert_eq!(spread(&ordered, host8), (3, 8));
        let scattered = [9u32, 1, 17, 2, 10, 3];
        assert_eq!(spread(&scattered, host8), (3, 3));
        assert_eq!(
            blocks(&scattered, &host8),
            vec![vec![9, 10], vec![1, 2, 3], vec![17]]
        );
        assert_eq!(blocks(&ordered, &host8)[2], (16..20).collect::<Vec<u32>>());
    }

    #[test]
    fn single_node_and_one_per_node_rings_have_one_lane() {
        let members: Vec<u32> = (0..8).collect();
        let (nodes, ppn) = spread(&members, host8);
        assert_eq!(lane_count(nodes, ppn, 24), 1);
        let one_per_host: Vec<u32> = (0..8).map(|i| i * 8).collect();
        let (nodes, ppn) = spread(&one_per_host, host8);
        assert_eq!(lane_count(nodes, ppn, 24), 1);
        let l = lane_links(&one_per_host, host8, 1, true, 0)[0];
        assert_eq!((l.next, l.prev, l.via), (8, 56, None));
    }
}
