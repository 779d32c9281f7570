//! Rank placement and parallel groups, as Megatron-LM computes them.
//!
//! Megatron-Core's `RankGenerator` (megatron/core/parallel_state.py) lays ranks out along an
//! order string, fastest-varying dimension first (default `tp-cp-ep-dp-pp`). Dense layers use
//! the generator with `ep = 1`; expert layers use a second one (`initialize_model_parallel`,
//! "Build expert rank generator": MoE parallel folding) with tensor size the expert-TP size
//! `etp`, `cp = 1`, and the data-parallel size replaced by the expert-data-parallel size
//! `tp·cp·dp / (etp·ep)`: the experts are drawn from the attention's TP × CP × DP ranks. A
//! group of kind X holds the ranks that differ only in coordinate X. Nothing here stores per-rank tables: coordinates and groups are
//! computed on demand, so 131,072 ranks cost nothing.

use std::fmt;

/// One parallel dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dim {
    Tp,
    Cp,
    Ep,
    Dp,
    Pp,
}

impl Dim {
    pub fn name(self) -> &'static str {
        match self {
            Dim::Tp => "tp",
            Dim::Cp => "cp",
            Dim::Ep => "ep",
            Dim::Dp => "dp",
            Dim::Pp => "pp",
        }
    }

    const ALL: [Dim; 5] = [Dim::Tp, Dim::Cp, Dim::Ep, Dim::Dp, Dim::Pp];
}

/// What is wrong with `parallel.order`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("unknown dimension `{0}`; use each of tp, cp, ep, dp, pp once")]
    UnknownDimension(String),
    #[error("dimension `{0}` appears twice; use each of tp, cp, ep, dp, pp once")]
    Repeated(String),
    #[error("must name all five dimensions tp, cp, ep, dp, pp once, e.g. tp-cp-ep-dp-pp")]
    Incomplete,
}

/// Parses an order string such as `tp-cp-ep-dp-pp`.
pub fn parse_order(order: &str) -> Result<[Dim; 5], OrderError> {
    let parts: Vec<&str> = order.split('-').map(str::trim).collect();
    let mut dims = Vec::with_capacity(5);
    for p in &parts {
        let d = Dim::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(p))
            .ok_or_else(|| OrderError::UnknownDimension(p.to_string()))?;
        if dims.contains(&d) {
            return Err(OrderError::Repeated(p.to_string()));
        }
        dims.push(d);
    }
    dims.try_into().map_err(|_| OrderError::Incomplete)
}

/// The kinds of communicator groups Megatron-LM creates.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum GroupKind {
    /// Tensor parallel.
    Tp,
    /// Context parallel.
    Cp,
    /// Data parallel of dense parameters (gradients are reduced over dp, per cp rank).
    Dp,
    /// Data parallel with context parallel: the group the distributed optimizer shards over.
    DpCp,
    /// Pipeline parallel: one rank per stage.
    Pp,
    /// Expert parallel (all-to-all of MoE layers).
    Ep,
    /// Expert data parallel: reduces expert gradients.
    ExpertDp,
    /// Tensor × pipeline parallel: the model-parallel group the gradient norm is reduced over
    /// (Megatron-LM `parallel_state.get_model_parallel_group`).
    ModelParallel,
    /// First and last pipeline stage of a pipeline group: all-reduces the gradients of tied
    /// word embeddings (Megatron-LM `_allreduce_word_embedding_grads`). Middle stages belong to
    /// none, so this kind is not in [`GroupKind::ALL`].
    Embedding,
    /// Expert tensor parallel (Megatron-Core `_EXPERT_TENSOR_PARALLEL_GROUP`): shards each
    /// expert's weights; the MoE token dispatcher gathers tokens over it. Declared last so the
    /// kinds before it keep their discriminants.
    ExpertTp,
}

impl GroupKind {
    /// Kinds that partition the ranks (every rank in exactly one group of each).
    pub const ALL: [GroupKind; 9] = [
        GroupKind::Tp,
        GroupKind::Cp,
        GroupKind::Dp,
        GroupKind::DpCp,
        GroupKind::Pp,
        GroupKind::Ep,
        GroupKind::ExpertDp,
        GroupKind::ModelParallel,
        GroupKind::ExpertTp,
    ];

    /// How many kinds there are, [`GroupKind::Embedding`] included: the length of a table
    /// indexed by `kind as usize`.
    pub const COUNT: usize = Self::ALL.len() + 1;

    /// The kind whose discriminant is `index` (as `kind as u8` wrote it), including
    /// [`GroupKind::Embedding`], which [`GroupKind::ALL`] leaves out.
    pub fn from_index(index: u8) -> Option<GroupKind> {
        Self::ALL
            .into_iter()
            .chain([GroupKind::Embedding])
            .find(|k| *k as u8 == index)
    }

    pub fn name(self) -> &'static str {
        match self {
            GroupKind::Tp => "tp",
            GroupKind::Cp => "cp",
            GroupKind::Dp => "dp",
            GroupKind::DpCp => "dp-cp",
            GroupKind::Pp => "pp",
            GroupKind::Ep => "ep",
            GroupKind::ExpertDp => "expert-dp",
            GroupKind::ModelParallel => "tp-pp",
            GroupKind::Embedding => "embedding",
            GroupKind::ExpertTp => "expert-tp",
        }
    }
}

/// Sizes and order of the parallel dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParallelLayout {
    pub tp: u32,
    pub cp: u32,
    pub ep: u32,
    /// Expert tensor parallel (Megatron-Core `--expert-tensor-parallel-size`, default TP).
    pub etp: u32,
    pub dp: u32,
    pub pp: u32,
    pub vp: u32,
    pub order: [Dim; 5],
}

/// A rank's coordinates in the dense and expert layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coords {
    pub tp: u32,
    pub cp: u32,
    pub dp: u32,
    pub pp: u32,
    pub ep: u32,
    pub expert_tp: u32,
    pub expert_dp: u32,
}

impl ParallelLayout {
    pub fn world(&self) -> u32 {
        self.tp * self.cp * self.dp * self.pp
    }

    /// Expert-data-parallel size, `tp·cp·dp / (etp·ep)` (Megatron-Core's
    /// `expert_data_parallel_size = decoder_world_size // (etp·ep·pp)`).
    pub fn expert_dp(&self) -> u32 {
        self.tp * self.cp * self.dp / (self.etp * self.ep)
    }

    /// Whether expert-TP groups are the TP groups (ETP = TP and the same rank strides): the
    /// workload then keeps one communicator for both, as when TP was the only tensor split.
    pub fn expert_tp_is_tp(&self) -> bool {
        self.etp == self.tp && self.stride(Dim::Tp, false) == self.stride(Dim::Tp, true)
    }

    /// Stride of `Dim::Pp` in the dense and expert layouts: equal strides give equal pipeline
    /// groups, which Megatron-Core asserts ("Pipeline parallel groups are expected to be the
    /// same for Non-Expert and Expert part").
    pub fn pipeline_strides(&self) -> (u32, u32) {
        (self.stride(Dim::Pp, false), self.stride(Dim::Pp, true))
    }

    /// The rank of data-parallel replica `replica` at `rank`'s tensor, context and pipeline
    /// coordinates (the same rank with its `dp` coordinate replaced).
    pub fn in_replica(&self, rank: u32, replica: u32) -> u32 {
        let stride = self.stride(Dim::Dp, false);
        rank - self.coord(rank, Dim::Dp, false) * stride + replica * stride
    }

    fn size(&self, d: Dim, expert: bool) -> u32 {
        match (d, expert) {
            (Dim::Tp, false) => self.tp,
            (Dim::Tp, true) => self.etp,
            (Dim::Cp, false) => self.cp,
            (Dim::Cp, true) => 1,
            (Dim::Ep, false) => 1,
            (Dim::Ep, true) => self.ep,
            (Dim::Dp, false) => self.dp,
            (Dim::Dp, true) => self.expert_dp(),
            (Dim::Pp, _) => self.pp,
        }
    }

    fn stride(&self, d: Dim, expert: bool) -> u32 {
        let mut stride = 1;
        for o in self.order {
            if o == d {
                return stride;
            }
            stride *= self.size(o, expert);
        }
        stride
    }

    fn coord(&self, rank: u32, d: Dim, expert: bool) -> u32 {
        (rank / self.stride(d, expert)) % self.size(d, expert)
    }

    pub fn coords(&self, rank: u32) -> Coords {
        Coords {
            tp: self.coord(rank, Dim::Tp, false),
            cp: self.coord(rank, Dim::Cp, false),
            dp: self.coord(rank, Dim::Dp, false),
            pp: self.coord(rank, Dim::Pp, false),
            ep: self.coord(rank, Dim::Ep, true),
            expert_tp: self.coord(rank, Dim::Tp, true),
            expert_dp: self.coord(rank, Dim::Dp, true),
        }
    }

    /// The dimensions a group kind varies, and in which layout.
    fn group_dims(kind: GroupKind) -> (&'static [Dim], bool) {
        match kind {
            GroupKind::Tp => (&[Dim::Tp], false),
            GroupKind::Cp => (&[Dim::Cp], false),
            GroupKind::Dp => (&[Dim::Dp], false),
            GroupKind::DpCp => (&[Dim::Dp, Dim::Cp], false),
            GroupKind::Pp => (&[Dim::Pp], false),
            GroupKind::Ep => (&[Dim::Ep], true),
            GroupKind::ExpertDp => (&[Dim::Dp], true),
            GroupKind::ModelParallel => (&[Dim::Tp, Dim::Pp], false),
            GroupKind::Embedding => (&[Dim::Pp], false),
            GroupKind::ExpertTp => (&[Dim::Tp], true),
        }
    }

    pub fn group_size(&self, kind: GroupKind) -> u32 {
        if kind == GroupKind::Embedding {
            return self.pp.min(2);
        }
        let (dims, expert) = Self::group_dims(kind);
        dims.iter().map(|&d| self.size(d, expert)).product()
    }

    pub fn group_count(&self, kind: GroupKind) -> u32 {
        if kind == GroupKind::Embedding {
            return self.group_count(GroupKind::Pp);
        }
        self.world() / self.group_size(kind)
    }

    /// Members of `rank`'s group of `kind`, in ascending group-local order (the varying
    /// coordinates in layout order, as Megatron enumerates them).
    pub fn group(&self, kind: GroupKind, rank: u32) -> Vec<u32> {
        let (dims, expert) = Self::group_dims(kind);
        let mut base = rank;
        for &d in dims {
            base -= self.coord(rank, d, expert) * self.stride(d, expert);
        }
        let mut members = vec![base];
        for &d in dims {
            let (size, stride) = (self.size(d, expert), self.stride(d, expert));
            members = (0..size)
                .flat_map(|i| members.iter().map(move |&m| m + i * stride))
                .collect();
        }
        members.sort_unstable();
        if kind == GroupKind::Embedding {
            let last = *members.last().unwrap_or(&base);
            members = if last == base {
                vec![base]
            } else {
                vec![base, last]
            };
        }
        members
    }

    /// The `index`-th group of `kind`, groups numbered by their smallest member. That member
    /// has zero in the varying coordinates; counting the others in mixed radix, fastest
    /// dimension least significant, enumerates the smallest members in ascending order.
    pub fn nth_group(&self, kind: GroupKind, index: u32) -> Vec<u32> {
        let (dims, expert) = Self::group_dims(kind);
        let mut rest = index;
        let mut base = 0;
        for d in self.order {
            if dims.contains(&d) {
                continue;
            }
            let size = self.size(d, expert);
            base += (rest % size) * self.stride(d, expert);
            rest /= size;
        }
        self.group(kind, base)
    }
}

/// How many expert-TP ranks' tokens one rank's experts compute: ETP when the tokens of the
/// expert-TP group differ (sequence-parallel TP ranks, or ranks of different data-parallel
/// replicas when TP = 1), else 1 (without sequence parallel the TP ranks hold the same tokens).
/// Megatron-Core's `MoEAlltoAllTokenDispatcher` gathers them over the expert-TP group after the
/// all-to-all (`gather_from_sequence_parallel_region`).
pub fn expert_tp_gather(tp: u32, etp: u32, sequence_parallel: bool) -> u32 {
    if (sequence_parallel && tp > 1) || tp == 1 {
        etp
    } else {
        1
    }
}

impl fmt::Display for ParallelLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TP {} x CP {} x DP {} x PP {} = {} (EP {}, expert-TP {}, expert-DP {}, VP {})",
            self.tp,
            self.cp,
            self.dp,
            self.pp,
            self.world(),
            self.ep,
            self.etp,
            self.expert_dp(),
            self.vp
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(tp: u32, cp: u32, ep: u32, dp: u32, pp: u32) -> ParallelLayout {
        ParallelLayout {
            tp,
            cp,
            ep,
            etp: tp,
            dp,
            pp,
            vp: 1,
            order: parse_order("tp-cp-ep-dp-pp").unwrap(),
        }
    }

    /// Megatron-LM's docstring example (parallel_state.initialize_model_parallel): 16 GPUs,
    /// TP 2, PP 4, DP 2 gives TP groups [g0,g1],[g2,g3]…, DP groups [g0,g2],[g1,g3]…, PP groups
    /// [g0,g4,g8,g12],[g1,g5,g9,g13]….
    #[test]
    fn megatron_docstring_example() {
        let l = layout(2, 1, 1, 2, 4);
        assert_eq!(l.group(GroupKind::Tp, 3), vec![2, 3]);
        assert_eq!(l.group(GroupKind::Dp, 1), vec![1, 3]);
        assert_eq!(l.group(GroupKind::Dp, 4), vec![4, 6]);
        assert_eq!(l.group(GroupKind::Pp, 5), vec![1, 5, 9, 13]);
        assert_eq!(l.group_count(GroupKind::Pp), 4);
    }

    #[test]
    fn expert_groups_fold_into_data_parallel() {
        // TP 2, DP 4, EP 2: expert groups are consecutive DP ranks.
        let l = layout(2, 1, 2, 4, 1);
        assert_eq!(l.group(GroupKind::Ep, 0), vec![0, 2]);
        assert_eq!(l.group(GroupKind::ExpertDp, 0), vec![0, 4]);
        assert_eq!(l.group_size(GroupKind::ExpertDp), 2);
    }

    /// MoE parallel folding, worked by hand from Megatron-Core's `initialize_model_parallel`
    /// (megatron/core/parallel_state.py): the expert `RankGenerator(tp=etp, ep=ep,
    /// dp=world // (etp*ep*pp), pp=pp, cp=1, order)` and `generate_masked_orthogonal_rank_groups`,
    /// which makes a group of the ranks that differ only in the masked dimensions, the first
    /// dimension of the order varying fastest.
    #[test]
    fn moe_parallel_folding_matches_megatron_core() {
        // DeepSeek-V3's H100 recipe in small: TP 2, DP 4, PP 2, EP 8, ETP 1 on 16 GPUs. The
        // expert generator is tp 1, ep 8, dp 16 // (1*8*2) = 1, pp 2: EP groups are ranks
        // 0-7 and 8-15, spanning the attention's TP 2 x DP 4; expert TP and expert DP groups
        // are single ranks.
        let folded = ParallelLayout {
            etp: 1,
            ..layout(2, 1, 8, 4, 2)
        };
        assert_eq!(folded.expert_dp(), 1);
        assert_eq!(folded.group(GroupKind::Ep, 5), (0..8).collect::<Vec<_>>());
        assert_eq!(folded.group(GroupKind::Ep, 9), (8..16).collect::<Vec<_>>());
        assert_eq!(folded.group(GroupKind::ExpertTp, 3), vec![3]);
        assert_eq!(folded.group(GroupKind::ExpertDp, 3), vec![3]);
        // The attention keeps its own groups: TP [2,3], DP [1,3,5,7], PP [3,11].
        assert_eq!(folded.group(GroupKind::Tp, 3), vec![2, 3]);
        assert_eq!(folded.group(GroupKind::Dp, 3), vec![1, 3, 5, 7]);
        assert_eq!(folded.group(GroupKind::Pp, 3), vec![3, 11]);
        let (dense, expert) = folded.pipeline_strides();
        assert_eq!(dense, expert);
        assert!(!folded.expert_tp_is_tp());
        let c = folded.coords(13);
        assert_eq!(
            (c.tp, c.dp, c.pp, c.ep, c.expert_tp, c.expert_dp),
            (1, 2, 1, 5, 0, 0)
        );

        // Context parallelism folds into EP too: TP 1, CP 2, DP 2, EP 4, ETP 1 on 4 GPUs. The
        // expert generator (cp = 1) gives one EP group of all four ranks; CP groups [0,1],
        // [2,3] and DP groups [0,2], [1,3] stay the attention's.
        let cp_folded = ParallelLayout {
            etp: 1,
            ..layout(1, 2, 4, 2, 1)
        };
        assert_eq!(cp_folded.group(GroupKind::Ep, 2), vec![0, 1, 2, 3]);
        assert_eq!(cp_folded.group(GroupKind::Cp, 2), vec![2, 3]);
        assert_eq!(cp_folded.group(GroupKind::Dp, 2), vec![0, 2]);

        // ETP 2, EP 2 on TP 4 x DP 2 (8 GPUs): expert generator tp 2, ep 2, dp 2. Expert TP
        // [0,1], EP [0,2] (stride 2), expert DP [0,4] (stride 4): experts split half of an
        // attention TP group.
        let half = ParallelLayout {
            etp: 2,
            ..layout(4, 1, 2, 2, 1)
        };
        assert_eq!(half.group(GroupKind::ExpertTp, 1), vec![0, 1]);
        assert_eq!(half.group(GroupKind::Ep, 1), vec![1, 3]);
        assert_eq!(half.group(GroupKind::ExpertDp, 1), vec![1, 5]);
        assert_eq!(half.group(GroupKind::Tp, 1), vec![0, 1, 2, 3]);
    }

    #[test]
    fn every_rank_is_in_exactly_one_group_of_each_kind() {
        let l = layout(2, 2, 2, 2, 2);
        for kind in GroupKind::ALL {
            let mut seen = vec![0u32; l.world() as usize];
            for g in 0..l.group_count(kind) {
                for r in l.nth_group(kind, g) {
                    seen[r as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{kind:?}");
        }
    }

    #[test]
    fn bad_orders_are_rejected() {
        assert_eq!(parse_order("tp-dp-pp"), Err(OrderError::Incomplete));
        assert_eq!(
            parse_order("tp-tp-cp-dp-pp"),
            Err(OrderError::Repeated("tp".into()))
        );
        assert_eq!(
            parse_order("tp-cp-xx-dp-pp").unwrap_err().to_string(),
            "unknown dimension `xx`; use each of tp, cp, ep, dp, pp once"
        );
        assert!(parse_order("pp-dp-ep-cp-tp").is_ok());
    }

    #[test]
    fn nth_group_enumerates_groups_by_smallest_member() {
        for order in ["tp-cp-ep-dp-pp", "tp-pp-dp-cp-ep"] {
            let l = ParallelLayout {
                order: parse_order(order).unwrap(),
                ..layout(2, 2, 2, 2, 3)
            };
            for kind in GroupKind::ALL {
                let mut firsts: Vec<u32> = (0..l.world())
                    .filter(|&r| l.group(kind, r)[0] == r)
                    .collect();
                firsts.sort_unstable();
                let got: Vec<u32> = (0..l.group_count(kind))
                    .map(|i| l.nth_group(kind, i)[0])
                    .collect();
                assert_eq!(got, firsts, "{order} {kind:?}");
            }
        }
    }
}
