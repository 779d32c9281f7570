//! NCCL's double binary tree (NCCL 2.4+; `src/graph/trees.cc`, `src/graph/connect.cc`).
//!
//! Across nodes NCCL builds two complementary binary trees over the node indices
//! (`ncclGetDtree`): the first is `ncclGetBtree`'s in-order tree rooted at 0, the second its
//! mirror (`n − 1 − r`, even node counts) or its shift by one (odd). With an even count a node
//! is interior in at most one of them, so the pair loads every NIC evenly. Each channel runs
//! both trees (channel `c` and `c + nChannels`), each on half its data.
//!
//! Inside a node a channel's tree is a chain through the node's GPUs (`ncclTopoPreset`:
//! `tree.up = intra[i−1]`, `tree.down[0] = intra[i+1]`). On nodes with a NIC per GPU, the
//! search finds `NCCL_TOPO_PATTERN_TREE` (all network traffic at the chain's head,
//! `treeToParent = treeToChild0 = treeToChild1 = intra[0]`), as NCCL's logs show
//! (`Trees [0] 1/8/-1->0->-1`): the head takes the intra-node child and both remote children.
//! Channels whose chains start at the same GPU are one lane here, as for rings ([`super::ring`]):
//! lane `l` starts every node's chain at its `l`-th member, so inter-node hops stay on rail `l`.
//!
//! All-reduce runs up the tree (reduce) and down it (broadcast) at once, chunk by chunk
//! (`runTreeSplit`); [`chunk_bytes`] is NCCL's chunk size.

use super::ring::blocks;
use super::{NCCL_STEPS, Protocol};

/// A rank's neighbours in one binary tree over `0..n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BinaryNode {
    pub parent: Option<u32>,
    pub children: [Option<u32>; 2],
}

/// `ncclGetBtree`: the in-order binary tree rooted at 0 (0's only child is the largest power
/// of two below `n`; every other rank's parent flips its lowest set bit upwards).
pub fn btree(n: u32, r: u32) -> BinaryNode {
    let mut bit = 1u32;
    while bit < n && bit & r == 0 {
        bit <<= 1;
    }
    if r == 0 {
        let child = (n > 1).then_some(bit >> 1);
        return BinaryNode {
            parent: None,
            children: [child, None],
        };
    }
    let mut up = (r ^ bit) | (bit << 1);
    if up >= n {
        up = r ^ bit;
    }
    let mut lowbit = bit >> 1;
    let down0 = (lowbit != 0).then(|| r - lowbit);
    let mut down1 = (lowbit != 0).then(|| r + lowbit);
    while down1.is_some_and(|d| d >= n) {
        down1 = (lowbit != 0).then(|| r + lowbit);
        lowbit >>= 1;
    }
    BinaryNode {
        parent: Some(up),
        children: [down0, down1.filter(|&d| d < n)],
    }
}

/// `ncclGetDtree`: tree 0 is [`btree`]; tree 1 mirrors it when `n` is even and shifts it by
/// one when `n` is odd.
pub fn dtree(n: u32, r: u32, tree: u32) -> BinaryNode {
    if tree == 0 {
        return btree(n, r);
    }
    // Mirror (even n) or shift by one (odd n), and back.
    let odd = n % 2 == 1;
    let from = |r: u32| if odd { (r + n - 1) % n } else { n - 1 - r };
    let to = |r: u32| if odd { (r + 1) % n } else { n - 1 - r };
    let b = btree(n, from(r));
    BinaryNode {
        parent: b.parent.map(to),
        children: b.children.map(|c| c.map(to)),
    }
}

/// NCCL's tree depth estimate (`connectTrees`): the intra-node chain plus log2 of the nodes.
pub fn depth(ranks: u32, nodes: u32) -> u32 {
    let nodes = nodes.max(1);
    ranks / nodes - 1 + (31 - nodes.leading_zeros())
}

/// NCCL's chunk size for a tree all-reduce of `bytes` on `channels` channels (`enqueue.cc`,
/// `computeColl`/`getChunkSize`): one step of the protocol's buffer, halved for Simple while
/// each channel would get fewer than 8·depth (then 4·depth, then depth) chunks, so the
/// pipeline fills quickly; LL128 halves by its own step estimate.
pub fn chunk_bytes(
    protocol: Protocol,
    buffsize: u64,
    bytes: u64,
    channels: u32,
    ranks: u32,
    nodes: u32,
) -> u64 {
    let per_channel = bytes / u64::from(channels.max(1));
    let depth = u64::from(depth(ranks, nodes));
    match protocol {
        Protocol::Simple => {
            let mut chunk = buffsize / NCCL_STEPS;
            for (chunks, floor) in [(8, 128 << 10), (4, 64 << 10), (1, 32 << 10)] {
                while per_channel / chunk < chunks * depth && chunk > floor {
                    chunk /= 2;
                }
            }
            chunk
        }
        Protocol::Ll128 => {
            // DEFAULT_LL128_BUFFSIZE / NCCL_STEPS, 120 of every 128 bytes data.
            let mut chunk: u64 = 120 * 640 * 8 / 128 * 120;
            let ppn = f64::from(ranks) / f64::from(nodes.max(1));
            let steps = 1.0 + f64::from(31 - nodes.max(1).leading_zeros()) + 0.1 * ppn;
            for (factor, floor) in [(64.0, 128 << 10), (16.0, 32 << 10)] {
                while ((per_channel / chunk) as f64) < steps * factor / ppn && chunk > floor {
                    chunk /= 2;
                }
            }
            chunk
        }
        // DEFAULT_LL_BUFFSIZE / NCCL_STEPS = 64 KiB of lines, half of it flags.
        Protocol::Ll => 32 << 10,
    }
}

/// A member's neighbours in one tree of one lane, as member ranks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TreeLinks {
    pub parent: Option<u32>,
    pub children: Vec<u32>,
}

/// `me`'s neighbours in both trees of every lane of NCCL's tree over `members`: lane `l`
/// chains each host's members starting at its `l`-th; the chain heads form the double
/// binary tree across hosts.
pub fn tree_links(
    members: &[u32],
    host_of: impl Fn(u32) -> u32,
    lanes: u32,
    me: u32,
) -> Vec<[TreeLinks; 2]> {
    let blocks = blocks(members, &host_of);
    let nodes = blocks.len() as u32;
    let Some(node) = blocks.iter().position(|b| b.contains(&me)) else {
        return vec![Default::default(); lanes as usize];
    };
    let chain = |b: usize, lane: u32| -> Vec<u32> {
        let block = &blocks[b];
        let r = lane as usize % block.len();
        block[r..].iter().chain(&block[..r]).copied().collect()
    };
    (0..lanes)
        .map(|lane| {
            let mine = chain(node, lane);
            let i = mine.iter().position(|&m| m == me).unwrap_or(0);
            let head = |b: u32| chain(b as usize, lane)[0];
            [0, 1].map(|tree| {
                let intra_child = mine.get(i + 1).copied();
                if i > 0 {
                    return TreeLinks {
                        parent: Some(mine[i - 1]),
                        children: intra_child.into_iter().collect(),
                    };
                }
                let across = dtree(nodes, node as u32, tree);
                TreeLinks {
                    parent: across.parent.map(head),
                    children: intra_child
                        .into_iter()
                        .chain(across.children.iter().flatten().map(|&c| head(c)))
                        .collect(),
                }
            })
        })
        .collect()
}

/// `me`'s neighbours in NVLS-tree's two trees: every GPU heads its own slice of the buffer,
/// reduced and multicast inside its node by the NVSwitch, and exchanges it across nodes with
/// the GPUs at its own position on the other hosts (NCCL 2.18+, `connectNvls`/`nvlsTree`).
pub fn nvls_tree_links(members: &[u32], host_of: impl Fn(u32) -> u32, me: u32) -> [TreeLinks; 2] {
    let blocks = blocks(members, &host_of);
    let nodes = blocks.len() as u32;
    let Some(node) = blocks.iter().position(|b| b.contains(&me)) else {
        return Default::default();
    };
    let local = blocks[node].iter().position(|&m| m == me).unwrap_or(0);
    let at = |b: u32| {
        let block = &blocks[b as usize];
        block[local % block.len()]
    };
    [0, 1].map(|tree| {
        let across = dtree(nodes, node as u32, tree);
        TreeLinks {
            parent: across.parent.map(at),
            children: across.children.iter().flatten().map(|&c| at(c)).collect(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn btree_is_nccls_in_order_tree() {
        // The illustration in NCCL's trees.cc, 14 ranks.
        assert_eq!(btree(14, 0).children, [Some(8), None]);
        assert_eq!(btree(14, 8).parent, Some(0));
        assert_eq!(btree(14, 8).children, [Some(4), Some(12)]);
        assert_eq!(btree(14, 12).children, [Some(10), Some(13)]);
        assert_eq!(btree(14, 13).parent, Some(12));
        assert_eq!(btree(14, 6).children, [Some(5), Some(7)]);
        assert_eq!(btree(14, 1).children, [None, None]);
        assert_eq!(btree(1, 0).children, [None, None]);
    }

    #[test]
    fn dtree_mirrors_even_and_shifts_odd() {
        // Roots: 0 and n−1 (even n), 0 and 1 (odd n) (`ncclGetDtreeRoots`).
        assert_eq!(dtree(12, 11, 1).parent, None);
        assert_eq!(dtree(12, 11, 1).children, [Some(3), None]);
        assert_eq!(dtree(13, 1, 1).parent, None);
        for n in [2u32, 4, 6, 8, 12, 16] {
            for r in 0..n {
                let interior = |t| dtree(n, r, t).children.iter().flatten().count() > 0;
                assert!(
                    !(interior(0) && interior(1)),
                    "rank {r} of {n} interior in both trees"
                );
            }
        }
    }

    fn host8(m: u32) -> u32 {
        m / 8
    }

    /// Checks a lane's tree: links agree in both directions, every member reaches the root,
    /// the reduction at the root holds every member's contribution and the broadcast brings
    /// it to every member. Returns (transfers up, transfers down).
    fn check_tree(members: &[u32], links: &dyn Fn(u32) -> TreeLinks) -> (u64, u64) {
        let mut root = None;
        for &m in members {
            let l = links(m);
            match l.parent {
                Some(p) => assert!(links(p).children.contains(&m), "{p} does not list {m}"),
                None => {
                    assert!(root.is_none(), "two roots");
                    root = Some(m);
                }
            }
            for c in l.children {
                assert_eq!(links(c).parent, Some(m));
            }
        }
        fn reduce(m: u32, links: &dyn Fn(u32) -> TreeLinks, up: &mut u64) -> BTreeSet<u32> {
            let mut got = BTreeSet::from([m]);
            for c in links(m).children {
                *up += 1;
                got.extend(reduce(c, links, up));
            }
            got
        }
        fn broadcast(m: u32, links: &dyn Fn(u32) -> TreeLinks, reached: &mut Vec<u32>) {
            reached.push(m);
            for c in links(m).children {
                broadcast(c, links, reached);
            }
        }
        let root = root.expect("a root");
        let mut up = 0;
        let all: BTreeSet<u32> = members.iter().copied().collect();
        assert_eq!(reduce(root, links, &mut up), all, "reduction misses ranks");
        let mut reached = Vec::new();
        broadcast(root, links, &mut reached);
        assert_eq!(
            reached.len(),
            members.len(),
            "a rank is reached twice or never"
        );
        (up, reached.len() as u64 - 1)
    }

    #[test]
    fn every_lane_tree_reduces_and_broadcasts_to_every_member() {
        for hosts in [1u32, 2, 3, 4, 5, 16] {
            let members: Vec<u32> = (0..8 * hosts).collect();
            let n = members.len() as u64;
            let lanes = 8;
            let size = 1u64 << 30;
            let mut moved = 0;
            for lane in 0..lanes {
                for tree in 0..2 {
                    let links =
                        |m: u32| tree_links(&members, host8, lanes, m)[lane as usize][tree].clone();
                    let (up, down) = check_tree(&members, &links);
                    // Each lane-tree carries size/(2·lanes), up and down every edge.
                    moved += (up + down) * size / (2 * u64::from(lanes));
                }
            }
            // The textbook volume of a tree all-reduce: the buffer crosses each of the n−1
            // edges once up and once down, 2(n−1)·size in all, as a ring's 2(n−1)/n per rank.
            assert_eq!(moved, 2 * (n - 1) * size, "{hosts} hosts");
        }
    }

    #[test]
    fn inter_node_tree_hops_stay_on_the_lane_rail() {
        let members: Vec<u32> = (0..64).collect();
        for lane in 0..8u32 {
            for m in &members {
                for t in &tree_links(&members, host8, 8, *m)[lane as usize] {
                    for peer in t.parent.iter().chain(&t.children) {
                        if host8(*peer) != host8(*m) {
                            assert_eq!(peer % 8, lane);
                            assert_eq!(m % 8, lane);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn nvls_tree_links_each_slice_across_hosts() {
        let members: Vec<u32> = (0..32).collect();
        for local in 0..8u32 {
            let slice: Vec<u32> = members.iter().copied().filter(|m| m % 8 == local).collect();
            for tree in 0..2 {
                let links = |m: u32| nvls_tree_links(&members, host8, m)[tree].clone();
                let (up, down) = check_tree(&slice, &links);
                assert_eq!((up, down), (3, 3));
            }
        }
    }

    #[test]
    fn chunks_shrink_until_the_pipeline_is_deep_enough() {
        let big = chunk_bytes(Protocol::Simple, 4 << 20, 8 << 30, 16, 128, 16);
        assert_eq!(big, 512 << 10);
        // 16 MiB on 16 channels: 1 MiB per channel, depth 7 + 4 = 11.
        let small = chunk_bytes(Protocol::Simple, 4 << 20, 16 << 20, 16, 128, 16);
        assert_eq!(small, 64 << 10);
        let ll128 = chunk_bytes(Protocol::Ll128, 4 << 20, 1 << 20, 16, 128, 16);
        assert!((16 << 10..=32 << 10).contains(&ll128), "{ll128}");
    }
}
