//! PAT, "parallel aggregated trees" (NCCL 2.23+, `src/device/prims_simple.h`, `patAlgorithm`
//! in `src/include/collectives.h`): all-gather and reduce-scatter for one GPU per node in
//! log2(n) steps. It is a Bruck-style exchange: in step `k` every rank sends to the rank `2^k`
//! positions away the blocks it has gathered so far, so the step count grows with log2(n)
//! while every rank still moves (n−1)/n of the buffer, the ring's volume. NCCL orders the
//! steps to bound the staging buffer; the peers, step count and volume are the same.

/// Steps of PAT on `n` ranks: ⌈log2 n⌉.
pub fn steps(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// All-gather's step `k` on `n` ranks: (distance, blocks). A rank sends `blocks` blocks of
/// `size/n` to the rank `distance` positions before it, and receives as many from the rank
/// `distance` after it.
pub fn all_gather_step(n: u32, k: u32) -> (u32, u32) {
    let d = 1u32 << k;
    (d, d.min(n - d))
}

/// Reduce-scatter's step `k`: all-gather's schedule run backwards (its step `steps − 1 − k`,
/// data flowing the other way). A rank sends partial sums of `blocks` blocks to the rank
/// `distance` positions after it.
pub fn reduce_scatter_step(n: u32, k: u32) -> (u32, u32) {
    all_gather_step(n, steps(n) - 1 - k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn all_gather_brings_every_block_to_every_rank() {
        for n in [2u32, 3, 5, 8, 13, 16, 100] {
            // have[p]: blocks rank p holds, in the order it gathered them (p, p+1, …).
            let mut have: Vec<Vec<u32>> = (0..n).map(|p| vec![p]).collect();
            let mut sent = 0u64;
            for k in 0..steps(n) {
                let (d, blocks) = all_gather_step(n, k);
                let before = have.clone();
                for p in 0..n {
                    let to = ((p + n - d) % n) as usize;
                    let data = &before[p as usize][..blocks as usize];
                    sent += u64::from(blocks);
                    have[to].extend_from_slice(data);
                }
            }
            for (p, h) in have.iter().enumerate() {
                let set: BTreeSet<u32> = h.iter().copied().collect();
                assert_eq!(set.len(), n as usize, "rank {p} of {n} misses blocks");
                assert_eq!(h.len(), n as usize, "rank {p} of {n} got a block twice");
            }
            // (n−1)/n of the buffer per rank: the textbook all-gather volume.
            assert_eq!(sent, u64::from(n) * u64::from(n - 1));
        }
    }

    #[test]
    fn reduce_scatter_leaves_each_rank_its_block_reduced_over_all() {
        for n in [2u32, 3, 5, 8, 13, 16, 100] {
            // part[p][b]: contributors summed into rank p's copy of block b.
            let mut part: Vec<Vec<BTreeSet<u32>>> = (0..n)
                .map(|p| (0..n).map(|_| BTreeSet::from([p])).collect())
                .collect();
            let mut sent = 0u64;
            for k in 0..steps(n) {
                let (d, blocks) = reduce_scatter_step(n, k);
                let before = part.clone();
                for p in 0..n {
                    // p hands the blocks it no longer keeps, [p+d, p+d+blocks), to p+d.
                    let to = ((p + d) % n) as usize;
                    for i in 0..blocks {
                        let b = ((p + d + i) % n) as usize;
                        let add = before[p as usize][b].clone();
                        part[to][b].extend(add);
                    }
                    sent += u64::from(blocks);
                }
            }
            let all: BTreeSet<u32> = (0..n).collect();
            for (p, blocks) in part.iter().enumerate() {
                assert_eq!(blocks[p], all, "rank {p} of {n}");
            }
            assert_eq!(sent, u64::from(n) * u64::from(n - 1));
        }
    }

    #[test]
    fn steps_grow_with_log2() {
        assert_eq!(
            [1, 2, 3, 4, 5, 8, 9, 1024].map(steps),
            [0, 1, 2, 2, 3, 3, 4, 10]
        );
    }
}
