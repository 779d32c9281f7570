//! DeepEP's normal (high-throughput) dispatch and combine (deepseek-ai/DeepEP; DeepSeek-V3
//! technical report, arXiv 2412.19437 §3.2.2), as Megatron-Core's `flex` token dispatcher runs
//! them (`--moe-enable-deepep`).
//!
//! An NCCL all-to-all sends every (token, expert) copy to the expert's rank: a token with
//! eight experts on three remote nodes crosses the network eight times. DeepEP sends a token
//! once to each node it goes to, over RDMA to the GPU on its own rail there, which forwards it
//! over NVLink once to each rank holding its experts; the combine returns the same way,
//! reducing on the way. With group-limited routing ([`RouterGroups`]) a token reaches at most
//! `group_topk` groups, so with a group per node at most that many nodes: DeepSeek-V3's 8
//! experts reach at most 4 nodes, about 3.6 on average, instead of 8 copies.
//!
//! The volumes follow from the routing alone under balanced routing (every expert equally
//! likely, as `moe_router_force_load_balancing` benchmarks run): the probability that a token
//! goes to a given rank or node ([`MoeRouting::hit_probability`]). The rates are the shares of
//! the links DeepEP's kernels reach on their 20-24 SMs, from its published benchmark
//! (`docs/legacy.md`, normal kernels on H800 with CX7 400 Gb/s InfiniBand, DeepSeek-V3's
//! routing): [`DEEPEP_NVLINK_SHARE`] from the intranode EP 8 row, [`DEEPEP_RDMA_SHARE`] from the
//! internode EP 64 row; the EP 16 and EP 32 rows check them
//! (`deepep_plans_reach_the_bandwidths_deepep_published`).

use super::{CommShape, Plan, Protocol};
use crate::model::RouterGroups;

/// The library that runs Megatron-Core's `flex` dispatcher (`--moe-flex-dispatcher-backend`).
/// Both send a token once per NVLink domain its experts are in, over RDMA to the GPU on its
/// own rail there, which forwards it over NVLink once per rank; they differ in the link
/// shares their kernels reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlexBackend {
    /// deepseek-ai/DeepEP's normal kernels.
    DeepEp,
    /// NVIDIA's HybridEP (TMA copies within the NVLink domain, IBGDA across it).
    HybridEp,
}

/// A flex dispatcher's routing and backend: what the expert-parallel all-to-alls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlexDispatch {
    pub routing: MoeRouting,
    pub backend: FlexBackend,
}

/// What the dispatcher knows about routing: experts, experts per token and their groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeRouting {
    pub experts: u64,
    pub top_k: u64,
    pub groups: RouterGroups,
}

/// Share of a GPU's NVLink line rate DeepEP's normal kernels move: EP 8 on H800 (200 GB/s per
/// direction) dispatches at 153 and combines at 158 GB/s by DeepEP's measure, which counts
/// the rank's own tokens too; the NVLink carries 7 of 8 of them: 155.5 × 7/8 / 200.
pub const DEEPEP_NVLINK_SHARE: f64 = 155.5 * 7.0 / 8.0 / 200.0;

/// Share of a NIC's line rate DeepEP's RDMA reaches: EP 64 (8 nodes) at 51 and 50 GB/s by
/// DeepEP's measure, which counts tokens for the own node as RDMA tokens too (7 of 8 cross
/// the network), over CX7's 50 GB/s: 50.5 × 7/8 / 50.
pub const DEEPEP_RDMA_SHARE: f64 = 50.5 * 7.0 / 8.0 / 50.0;

/// NVLink peers DeepEP's intranode kernels reach (`NUM_MAX_NVL_PEERS`, deepseek-ai/DeepEP
/// `deep_ep/buffer.py`): one HGX board. A group over more ranks of one NVLink domain (GB200
/// NVL72) runs the multi-node NVLink extension, [`DEEPEP_MNNVL_SHARE`].
pub const DEEPEP_MAX_NVL_PEERS: u32 = 8;

/// DeepEP's algorithm bandwidth (a rank's received tokens, its own included, per second) over
/// GB200 NVL72's NVLink at EP 32 with 24 SMs, through the community extension Megatron-Core
/// ran (deepseek-ai/DeepEP PR #218): dispatch about 400 GB/s, combine about 190 (Megatron-LM
/// `docs/discussions/deepseek-v3-gb200-optimization`, §2.2.1, "not well-optimized").
const DEEPEP_MNNVL_DISPATCH_GBS: f64 = 400.0;
const DEEPEP_MNNVL_COMBINE_GBS: f64 = 190.0;
/// The group and the per-direction NVLink line rate that measurement ran on.
const DEEPEP_MNNVL_MEASURED_EP: f64 = 32.0;
const DEEPEP_MNNVL_LINE_GBS: f64 = 900.0;

/// Share of the NVLink line rate DeepEP moves on a multi-node NVLink domain. A layer runs
/// each kernel twice per iteration (the forward dispatch and the combine's backward; the
/// forward combine and the dispatch's backward, Megatron-Core `fused_a2a.py`), so every call
/// is charged the mean of the two times: the harmonic mean of the two rates, of which the
/// NVLink carries 31 of 32 ranks' tokens.
pub const DEEPEP_MNNVL_SHARE: f64 = 2.0
    / (1.0 / DEEPEP_MNNVL_DISPATCH_GBS + 1.0 / DEEPEP_MNNVL_COMBINE_GBS)
    * (DEEPEP_MNNVL_MEASURED_EP - 1.0)
    / DEEPEP_MNNVL_MEASURED_EP
    / DEEPEP_MNNVL_LINE_GBS;

/// Share of the NVLink line rate HybridEP moves: at the 32 SMs Megatron-LM's GB200 recipe
/// gives it (`--moe-hybridep-num-sms 32`), EP 36 on GB200 NVL36 dispatches at 714.66 and
/// combines at 657.72 GB/s of algorithm bandwidth (Megatron-LM
/// `docs/discussions/deepseek-v3-gb200-optimization` §2.5, its HybridEP figure; a rank's
/// own tokens are 1 of 36 there); mean time of the two, as for [`DEEPEP_MNNVL_SHARE`]. The
/// same figure's DGX H100 (EP 8, 16 blocks, 368.9 and 368.87 GB/s over 450) checks it.
pub const HYBRIDEP_NVLINK_SHARE: f64 =
    2.0 / (1.0 / 714.66 + 1.0 / 657.72) * 35.0 / 36.0 / DEEPEP_MNNVL_LINE_GBS;

/// Share of a NIC's line rate HybridEP's RDMA reaches: 4 DGX H100 (EP 32, CX7 400 Gb/s),
/// 8 blocks, dispatch 44.2 and combine 45 GB/s of NIC bus bandwidth (the same figure).
pub const HYBRIDEP_RDMA_SHARE: f64 = (44.2 + 45.0) / 2.0 / 50.0;

/// Streaming multiprocessors DeepEP's kernels take (Megatron-Core `moe_deepep_num_sms`,
/// default 20): shown as the plan's channels.
const DEEPEP_SMS: u32 = 20;

/// Per-rank bytes of one DeepEP dispatch or combine on a group of `nodes` × `ranks_per_node`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeepEpVolumes {
    /// To the GPU on this rank's rail in each other node, over RDMA.
    pub per_remote_node: f64,
    /// To each other rank of this node over NVLink: this rank's own tokens for it and those
    /// that arrived over RDMA for it.
    pub per_local_peer: f64,
}

impl MoeRouting {
    /// Probability that one token's experts include at least one of a unit (a rank or a
    /// node) of `unit_experts` consecutive experts, under balanced group-limited routing: the
    /// token picks `group_topk` of the groups uniformly, then `top_k` experts uniformly among
    /// theirs. Exact where units and groups nest (a unit inside one group, or a unit of whole
    /// groups, as expert parallelism lays them out); otherwise the unit's expected share of
    /// the chosen groups stands in for its actual overlap.
    pub fn hit_probability(&self, unit_experts: u64) -> f64 {
        let (e, k) = (self.experts, self.top_k);
        let (g_all, g_pick) = (self.groups.groups, self.groups.group_topk);
        let group = e / g_all;
        let pool = g_pick * group;
        let unit = unit_experts.min(e);
        let miss = if unit <= group && group.is_multiple_of(unit.max(1)) {
            // The unit lies in one group, chosen with probability g_pick / g_all.
            let chosen = g_pick as f64 / g_all as f64;
            (1.0 - chosen) + chosen * none_drawn(pool, unit, k)
        } else if unit > group && unit.is_multiple_of(group) {
            // The unit holds `c` whole groups; `j` of them are chosen (hypergeometric).
            let c = unit / group;
            (0..=c.min(g_pick))
                .map(|j| hypergeometric(g_all, c, g_pick, j) * none_drawn(pool, j * group, k))
                .sum()
        } else {
            let expected = (unit as f64 * g_pick as f64 / g_all as f64).round() as u64;
            none_drawn(pool, expected, k)
        };
        (1.0 - miss).clamp(0.0, 1.0)
    }

    /// DeepEP's per-rank volumes for a buffer of `routed_bytes` (every (token, expert) copy,
    /// as the alltoall dispatcher sends them) on a group of `shape.ranks` ranks,
    /// `shape.ranks_per_node` per node, experts spread evenly in rank order.
    pub fn volumes(&self, routed_bytes: f64, shape: &CommShape) -> DeepEpVolumes {
        let ranks = u64::from(shape.ranks.max(1));
        let per_node = u64::from(shape.ranks_per_node.clamp(1, shape.ranks.max(1)));
        let nodes = ranks.div_ceil(per_node);
        let token_bytes = routed_bytes / self.top_k.max(1) as f64;
        let rank_experts = (self.experts / ranks).max(1);
        let p_rank = self.hit_probability(rank_experts);
        let p_node = self.hit_probability(rank_experts * per_node);
        DeepEpVolumes {
            per_remote_node: token_bytes * p_node,
            per_local_peer: nodes as f64 * token_bytes * p_rank,
        }
    }
}

/// Probability that `k` draws without replacement from `pool` miss `marked` of them.
fn none_drawn(pool: u64, marked: u64, k: u64) -> f64 {
    if marked == 0 {
        return 1.0;
    }
    if pool < marked + k {
        return 0.0;
    }
    (0..k)
        .map(|i| (pool - marked - i) as f64 / (pool - i) as f64)
        .product()
}

/// P(j of the `marked` among `population` are in a uniform draw of `draws`).
fn hypergeometric(population: u64, marked: u64, draws: u64, j: u64) -> f64 {
    if j > marked || j > draws || draws - j > population - marked {
        return 0.0;
    }
    choose(marked, j) * choose(population - marked, draws - j) / choose(population, draws)
}

fn choose(n: u64, k: u64) -> f64 {
    if k > n {
        return 0.0;
    }
    (0..k.min(n - k)).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

impl CommShape {
    /// A flex dispatcher's dispatch or combine of `bytes` routed copies: RDMA to each other
    /// node's rail GPU through this node's NICs, one per GPU of the group, beside the NVLink
    /// forwarding, in one pipelined kernel; the slower of the two sets the time.
    pub fn flex_plan(&self, bytes: u64, flex: &FlexDispatch) -> Plan {
        let p = self.arch.params();
        let v = flex.routing.volumes(bytes as f64, self);
        let (nvlink_share, rdma_share, algorithm) = match flex.backend {
            FlexBackend::DeepEp if self.ranks_per_node > DEEPEP_MAX_NVL_PEERS => (
                DEEPEP_MNNVL_SHARE,
                DEEPEP_RDMA_SHARE,
                super::Algorithm::DeepEp,
            ),
            FlexBackend::DeepEp => (
                DEEPEP_NVLINK_SHARE,
                DEEPEP_RDMA_SHARE,
                super::Algorithm::DeepEp,
            ),
            FlexBackend::HybridEp => (
                HYBRIDEP_NVLINK_SHARE,
                HYBRIDEP_RDMA_SHARE,
                super::Algorithm::HybridEp,
            ),
        };
        let per_node = f64::from(self.ranks_per_node.max(1));
        let remote_nodes = f64::from(self.nodes.saturating_sub(1));
        let intra = if per_node > 1.0 {
            let gbs = self.intra_bytes_per_s * 1e-9 * nvlink_share;
            (per_node - 1.0) * v.per_local_peer / (gbs * 1e3)
        } else {
            0.0
        };
        let inter = if self.nodes > 1 {
            // Every GPU of the group sends through the NIC on its own rail.
            let nics = f64::from(self.nics_per_node.min(self.ranks_per_node).max(1));
            let gbs = nics * self.nic_bytes_per_s * 1e-9 * rdma_share;
            per_node * remote_nodes * v.per_remote_node / (gbs * 1e3)
        } else {
            0.0
        };
        let hw = if self.nodes > 1 {
            super::HW_LAT_NET[1][Protocol::Simple.index()]
        } else {
            super::HW_LAT_NVLINK[1][Protocol::Simple.index()] * p.step_scale
        };
        Plan {
            algorithm,
            protocol: Protocol::Simple,
            channels: DEEPEP_SMS,
            latency_us: p.call_us + hw,
            transfer_us: intra.max(inter),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deepep(routing: MoeRouting) -> FlexDispatch {
        FlexDispatch {
            routing,
            backend: FlexBackend::DeepEp,
        }
    }

    const DEEPSEEK_V3: MoeRouting = MoeRouting {
        experts: 256,
        top_k: 8,
        groups: RouterGroups {
            groups: 8,
            group_topk: 4,
        },
    };

    #[test]
    fn without_groups_a_unit_is_missed_by_all_k_draws() {
        let r = MoeRouting {
            experts: 8,
            top_k: 2,
            groups: RouterGroups::UNLIMITED,
        };
        // Mixtral on EP 8: a rank holds one of 8 experts; 2 of 8 drawn → 1 − 7/8 · 6/7.
        assert!((r.hit_probability(1) - 0.25).abs() < 1e-12);
        // Experts per token add up over the ranks: Σ P(hit) = expected distinct ranks ≤ k.
        assert!((8.0 * r.hit_probability(1) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn deepseek_v3_reaches_about_three_and_a_half_of_eight_nodes() {
        // EP 64 over 8 nodes of 8 GPUs: a node holds 32 experts, one routing group.
        let nodes = 8.0 * DEEPSEEK_V3.hit_probability(32);
        // 4 groups chosen, each then missed by 8 draws from 128 experts with prob C(96,8)/C(128,8).
        let miss: f64 = (0..8).map(|i| (96 - i) as f64 / (128 - i) as f64).product();
        assert!((nodes - 4.0 * (1.0 - miss)).abs() < 1e-9, "{nodes}");
        assert!(nodes > 3.5 && nodes < 3.7, "{nodes}");
        // Never more than group_topk nodes, never more than the k copies the alltoall sends.
        assert!(nodes <= 4.0);
    }

    /// Routes `tokens` tokens as `moe_utils.group_limited_topk` does under random scores
    /// and returns the share that reaches unit 0 (experts `0..unit`).
    fn sampled_hit(r: &MoeRouting, unit: u64, tokens: u64) -> f64 {
        let mut state = 0x5eed_u64;
        let mut next = |n: u64| {
            state = crate::hash::splitmix64(state);
            state % n
        };
        let group = r.experts / r.groups.groups;
        let mut hits = 0;
        for _ in 0..tokens {
            let mut groups: Vec<u64> = (0..r.groups.groups).collect();
            for i in 0..r.groups.group_topk as usize {
                let j = i + next(groups.len() as u64 - i as u64) as usize;
                groups.swap(i, j);
            }
            let mut pool: Vec<u64> = groups[..r.groups.group_topk as usize]
                .iter()
                .flat_map(|g| g * group..(g + 1) * group)
                .collect();
            for i in 0..r.top_k as usize {
                let j = i + next(pool.len() as u64 - i as u64) as usize;
                pool.swap(i, j);
            }
            if pool[..r.top_k as usize].iter().any(|&e| e < unit) {
                hits += 1;
            }
        }
        hits as f64 / tokens as f64
    }

    #[test]
    fn hit_probabilities_match_routing_sampled_token_by_token() {
        // A rank inside a group (EP 64: 4 experts), a node of one group (32), a node of two
        // groups (64), and without groups (Mixtral-like).
        let mixtral = MoeRouting {
            experts: 8,
            top_k: 2,
            groups: RouterGroups::UNLIMITED,
        };
        for (r, unit) in [
            (DEEPSEEK_V3, 4),
            (DEEPSEEK_V3, 32),
            (DEEPSEEK_V3, 64),
            (mixtral, 2),
        ] {
            let exact = r.hit_probability(unit);
            let sampled = sampled_hit(&r, unit, 200_000);
            assert!(
                (exact - sampled).abs() < 0.005,
                "{unit}: {exact} vs {sampled}"
            );
        }
    }

    #[test]
    fn deepep_sends_fewer_bytes_across_nodes_than_the_alltoall() {
        // DeepSeek-V3 on EP 64 over 8 H100 nodes: the alltoall sends 7/8 of 8 copies off
        // node; DeepEP about 3.2 (3.6 nodes less the token's own).
        let shape = group(8, 8, 450.0);
        let routed = 8.0 * 4096.0 * 7168.0 * 2.0;
        let v = DEEPSEEK_V3.volumes(routed, &shape);
        let token_copies_off_node = 7.0 * v.per_remote_node / (routed / 8.0);
        assert!(
            token_copies_off_node > 3.0 && token_copies_off_node < 3.3,
            "{token_copies_off_node}"
        );
    }

    /// `nodes` NVLink domains of `per_node` GPUs, NVLink at `nvlink_gbs` GB/s per direction,
    /// one CX7 400 Gb/s NIC per GPU.
    fn group(nodes: u32, per_node: u32, nvlink_gbs: f64) -> CommShape {
        CommShape {
            ranks: per_node * nodes,
            nodes,
            ranks_per_node: per_node,
            arch: super::super::Arch::Hopper,
            nvlink: true,
            nvswitch: true,
            intra_bytes_per_s: nvlink_gbs * 1e9,
            nic_bytes_per_s: 50e9,
            nics_per_node: per_node,
            coherent: false,
            coherent_hop_us: 0.0,
        }
    }

    /// An H800 group as DeepEP's README measured it: `nodes` nodes of 8 GPUs (NVLink 200 GB/s
    /// per direction, `configs/gpus/h800.toml`).
    fn h800(nodes: u32) -> CommShape {
        group(nodes, 8, 200.0)
    }

    #[test]
    fn deepep_over_a_gb200_nvlink_domain_moves_what_megatron_measured() {
        // Megatron-LM docs/discussions/deepseek-v3-gb200-optimization §2.2.1: DeepSeek-V3's
        // routing on EP 32 within a GB200 NVL72 (900 GB/s per direction), BF16 tokens,
        // dispatch about 400 GB/s and combine about 190 GB/s of DeepEP's measure (a rank's
        // received tokens, its own included). One dispatch and one combine take as long as
        // the two at those rates.
        let shape = group(1, 32, 900.0);
        let tokens = 4096.0;
        let token_bytes = 2.0 * 7168.0;
        let routed = tokens * 8.0 * token_bytes;
        let plan = shape.flex_plan(routed as u64, &deepep(DEEPSEEK_V3));
        let received = 32.0 * tokens * token_bytes * DEEPSEEK_V3.hit_probability(256 / 32);
        let published_us = received / 400e3 + received / 190e3;
        let simulated_us = 2.0 * plan.time_us();
        let error = simulated_us / published_us - 1.0;
        assert!(
            error.abs() < 0.05,
            "{simulated_us:.0} us against {published_us:.0} us ({:+.1}%)",
            100.0 * error
        );
        // On one HGX board (8 peers) the intranode kernels keep their H800 share.
        let board = group(1, 8, 900.0);
        let per_byte = |s: &CommShape| {
            s.flex_plan(routed as u64, &deepep(DEEPSEEK_V3)).transfer_us
                / ((s.ranks_per_node - 1) as f64 * DEEPSEEK_V3.volumes(routed, s).per_local_peer)
        };
        assert!(
            (per_byte(&board) / per_byte(&shape) - DEEPEP_MNNVL_SHARE / DEEPEP_NVLINK_SHARE).abs()
                < 1e-9
        );
    }

    #[test]
    fn hybridep_s_gb200_share_gives_what_it_measured_on_a_dgx_h100() {
        // Megatron-LM docs/discussions/deepseek-v3-gb200-optimization §2.5, HybridEP's
        // figure: the NVLink share comes from GB200 NVL36 (EP 36, 32 SMs); on one DGX H100
        // (EP 8, 450 GB/s per direction, 16 blocks) it measured 368.9 GB/s dispatch and
        // 368.87 combine, a rank's own tokens included.
        let board = group(1, 8, 450.0);
        let hybridep = FlexDispatch {
            routing: DEEPSEEK_V3,
            backend: FlexBackend::HybridEp,
        };
        let tokens = 4096.0;
        let token_bytes = 2.0 * 7168.0;
        let plan = board.flex_plan((tokens * 8.0 * token_bytes) as u64, &hybridep);
        assert_eq!(plan.algorithm, super::super::Algorithm::HybridEp);
        let received = 8.0 * tokens * token_bytes * DEEPSEEK_V3.hit_probability(256 / 8);
        let gbs = received / (plan.time_us() * 1e3);
        assert!(
            (gbs / 368.9 - 1.0).abs() < 0.06,
            "{gbs:.1} GB/s against 368.9"
        );
    }

    #[test]
    fn deepep_plans_reach_the_bandwidths_deepep_published() {
        // deepseek-ai/DeepEP docs/legacy.md, "Normal kernels with NVLink and RDMA forwarding":
        // H800, CX7 400 Gb/s, 4,096 tokens, hidden 7,168, top-8 of 256 experts, FP8 dispatch
        // (7,168 bytes and a 4-byte scale per 128), BF16 combine. Its tests/test_internode.py
        // routes over one group per node, a token's experts from min(4, nodes) of them, and
        // measures the tokens per distinct node (the own node included) over RDMA, and
        // tests/test_intranode.py the tokens each rank receives (its own included) over
        // NVLink. EP 8 and EP 64 set the two link shares; EP 16 and 32 are checks.
        let tokens = 4096.0;
        for (ep, dispatch_gbs, combine_gbs) in [
            (8, 153.0, 158.0),
            (16, 43.0, 43.0),
            (32, 58.0, 57.0),
            (64, 51.0, 50.0),
        ] {
            let shape = h800(ep / 8);
            let nodes = u64::from(shape.nodes);
            let routing = MoeRouting {
                experts: 256,
                top_k: 8,
                groups: RouterGroups {
                    groups: nodes,
                    group_topk: nodes.min(4),
                },
            };
            for (token_bytes, published) in [
                (7168.0 + 7168.0 / 128.0 * 4.0, dispatch_gbs),
                (2.0 * 7168.0, combine_gbs),
            ] {
                let routed = tokens * 8.0 * token_bytes;
                let plan = shape.flex_plan(routed as u64, &deepep(routing));
                let measured_bytes = if ep == 8 {
                    8.0 * tokens * token_bytes * routing.hit_probability(256 / 8)
                } else {
                    nodes as f64 * tokens * token_bytes * routing.hit_probability(256 / nodes)
                };
                let gbs = measured_bytes / (plan.time_us() * 1e3);
                let error = gbs / published - 1.0;
                assert!(
                    error.abs() < 0.12,
                    "EP {ep}: {gbs:.1} GB/s against DeepEP's {published} ({:+.0}%)",
                    100.0 * error
                );
            }
        }
    }
}
