//! Which kernels run a layer's core attention in training, as Transformer Engine chooses them
//! (`transformer_engine/pytorch/attention/dot_product_attention/utils.py`
//! `get_attention_backend`, and `nvte_get_fused_attn_backend` in
//! `transformer_engine/common/fused_attn/fused_attn.cpp`).
//!
//! The head sizes decide it. cuDNN's fused attention trains any head size up to 128 on
//! Ampere and newer, and up to 256 on Hopper. On Blackwell larger heads came one shape at a
//! time: DeepSeek's MLA (query and key 192, value 128) from TE 2.5 with cuDNN 9.11 (TE PR
//! #1797, "head_dim_qk = 192, head_dim_v = 128, bprop, sm100 from cuDNN 9.11"; tag v2.5,
//! 2025-06-29), 256 from TE 2.18 with cuDNN 9.23. FlashAttention-2 needs equal query and value
//! head sizes up to 256 ("Disabling FlashAttention as it does not support MLA", TE up to
//! 2.16); from TE 2.17 it pads the value heads to the query's (`fa2_padded_head_dim`).
//! Where neither can train the shape, TE falls back to `UnfusedDotProductAttention`: batched
//! GEMMs and a softmax over the whole score matrix through HBM. So DeepSeek-V3 on GB200 with
//! TE before 2.5, or a 192-wide head (Nemotron-4 340B) on Blackwell with any TE, does not run
//! cuDNN's kernels.
//!
//! Only NVIDIA's Ampere, Hopper and Blackwell families follow these rules; others keep their
//! family's default kernels.

use crate::config::{AttentionBackend, TeRelease, TrainingConfig};
use crate::gpu::GpuSpec;
use crate::model::ModelSpec;

/// The release whose rules apply when `training.transformer_engine` is unset.
pub const NEWEST_RULES: TeRelease = TeRelease::NEWEST;

/// What runs the core attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionKernels {
    /// cuDNN's fused attention (TE `FusedAttention`).
    Cudnn,
    /// FlashAttention-2.
    Flash2,
    /// TE `UnfusedDotProductAttention`: scores and softmax through HBM.
    Unfused,
}

impl AttentionKernels {
    /// `training.attention_backend`'s names, and `unfused`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionKernels::Cudnn => "cudnn",
            AttentionKernels::Flash2 => "flash2",
            AttentionKernels::Unfused => "unfused",
        }
    }
}

/// The attention head sizes of a model: query/key and value (different under MLA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadSizes {
    pub qk: u64,
    pub v: u64,
}

impl HeadSizes {
    pub fn of(model: &ModelSpec) -> Self {
        HeadSizes {
            qk: model.qk_head_dim(),
            v: model.v_head_dim(),
        }
    }
}

/// The kernels each GPU type of a run trains its heads with, by [`select`] with the run's
/// `training.attention_backend` and `training.transformer_engine`; `None` for a family TE's
/// rules do not cover, or for every type without a model (an imported trace has no heads).
pub fn per_gpu_type<'a>(
    training: &TrainingConfig,
    model: Option<&ModelSpec>,
    gpu_types: &'a [GpuSpec],
) -> Vec<(&'a GpuSpec, Option<AttentionKernels>)> {
    let heads = model.map(HeadSizes::of);
    gpu_types
        .iter()
        .map(|g| {
            let kernels = heads.and_then(|h| {
                select(
                    training.attention_backend,
                    &g.architecture,
                    h,
                    training.transformer_engine,
                )
            });
            (g, kernels)
        })
        .collect()
}

/// The kernels TE trains `heads` with on a GPU of `architecture` when the run asks for
/// `requested`: with `cudnn` or `flash2` only that one (the other disabled, as
/// `NVTE_FLASH_ATTN=0` / `NVTE_FUSED_ATTN=0` do) or the unfused path. `None`: the family
/// is not one TE's rules cover, so its own default stands.
pub fn select(
    requested: AttentionBackend,
    architecture: &str,
    heads: HeadSizes,
    te: Option<TeRelease>,
) -> Option<AttentionKernels> {
    let family = Family::of(architecture)?;
    let te = te.unwrap_or(NEWEST_RULES);
    let cudnn = cudnn_trains(family, heads, te).then_some(AttentionKernels::Cudnn);
    let flash2 = flash2_trains(heads, te).then_some(AttentionKernels::Flash2);
    let chosen = match requested {
        // TE prefers cuDNN over FlashAttention on Hopper and newer, FlashAttention on Ampere
        // ("Disabling FlashAttention to give FusedAttention preference on Hopper+").
        AttentionBackend::Auto => match family {
            Family::Ampere => flash2.or(cudnn),
            Family::Hopper | Family::Blackwell => cudnn.or(flash2),
        },
        AttentionBackend::Cudnn => cudnn,
        AttentionBackend::Flash2 => flash2,
    };
    Some(chosen.unwrap_or(AttentionKernels::Unfused))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Ampere,
    Hopper,
    Blackwell,
}

impl Family {
    fn of(architecture: &str) -> Option<Self> {
        match architecture {
            "ampere" => Some(Family::Ampere),
            "hopper" => Some(Family::Hopper),
            "blackwell" => Some(Family::Blackwell),
            _ => None,
        }
    }
}

/// cuDNN fused attention, forward and backward (`fused_attn.cpp`, "head dimension").
fn cudnn_trains(family: Family, h: HeadSizes, te: TeRelease) -> bool {
    if !h.qk.is_multiple_of(8) || !h.v.is_multiple_of(8) {
        return false;
    }
    if h.qk <= 128 && h.v <= 128 {
        return true;
    }
    match family {
        Family::Ampere => false,
        // "9.5: <= 256 + Hopper + bprop".
        Family::Hopper => h.qk <= 256 && h.v <= 256,
        Family::Blackwell => {
            (h.qk == 192 && h.v == 128 && te >= TeRelease::new(2, 5))
                || (h.qk == 256 && h.v == 256 && te >= TeRelease::new(2, 18))
        }
    }
}

/// FlashAttention-2 (`utils.py`, "Filter: Head dimension").
fn flash2_trains(h: HeadSizes, te: TeRelease) -> bool {
    let head = if h.qk == h.v {
        h.qk
    } else if te >= TeRelease::new(2, 17) {
        h.qk.max(h.v)
    } else {
        return false;
    };
    head <= 256 && head.is_multiple_of(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MLA: HeadSizes = HeadSizes { qk: 192, v: 128 };
    const LLAMA: HeadSizes = HeadSizes { qk: 128, v: 128 };
    const NEMOTRON4: HeadSizes = HeadSizes { qk: 192, v: 192 };

    fn auto(arch: &str, h: HeadSizes, te: (u32, u32)) -> Option<AttentionKernels> {
        select(
            AttentionBackend::Auto,
            arch,
            h,
            Some(TeRelease::new(te.0, te.1)),
        )
    }

    #[test]
    fn transformer_engine_picks_cudnn_on_hopper_and_blackwell_and_flash_on_ampere() {
        use AttentionKernels::*;
        assert_eq!(auto("hopper", LLAMA, (2, 4)), Some(Cudnn));
        assert_eq!(auto("blackwell", LLAMA, (2, 4)), Some(Cudnn));
        assert_eq!(auto("ampere", LLAMA, (2, 4)), Some(Flash2));
        assert_eq!(auto("cdna3", LLAMA, (2, 4)), None);
    }

    #[test]
    fn mla_on_blackwell_trains_fused_only_from_te_2_5() {
        use AttentionKernels::*;
        // TE PR #1797 (v2.5): Blackwell backward for d_qk 192, d_v 128.
        assert_eq!(auto("blackwell", MLA, (2, 4)), Some(Unfused));
        assert_eq!(auto("blackwell", MLA, (2, 5)), Some(Cudnn));
        // Hopper ran it fused all along; Ampere's cuDNN stops at 128 and FA2 refuses MLA
        // until it pads the value heads (TE 2.17).
        assert_eq!(auto("hopper", MLA, (2, 3)), Some(Cudnn));
        assert_eq!(auto("ampere", MLA, (2, 16)), Some(Unfused));
        assert_eq!(auto("ampere", MLA, (2, 17)), Some(Flash2));
    }

    #[test]
    fn equal_heads_over_128_train_with_flash_attention_on_blackwell() {
        use AttentionKernels::*;
        assert_eq!(auto("blackwell", NEMOTRON4, (2, 18)), Some(Flash2));
        assert_eq!(auto("hopper", NEMOTRON4, (2, 18)), Some(Cudnn));
        assert_eq!(
            auto("blackwell", HeadSizes { qk: 256, v: 256 }, (2, 18)),
            Some(Cudnn)
        );
        assert_eq!(
            auto("blackwell", HeadSizes { qk: 256, v: 256 }, (2, 17)),
            Some(Flash2)
        );
    }

    #[test]
    fn a_forced_backend_that_cannot_train_the_shape_falls_back_to_unfused() {
        use AttentionKernels::*;
        let te = Some(TeRelease::new(2, 4));
        assert_eq!(
            select(AttentionBackend::Flash2, "hopper", MLA, te),
            Some(Unfused)
        );
        assert_eq!(
            select(AttentionBackend::Cudnn, "blackwell", NEMOTRON4, te),
            Some(Unfused)
        );
        assert_eq!(
            select(AttentionBackend::Flash2, "hopper", LLAMA, te),
            Some(Flash2)
        );
    }

    #[test]
    fn releases_parse_and_order() {
        assert_eq!("2.10".parse::<TeRelease>(), Ok(TeRelease::new(2, 10)));
        assert_eq!("v2.2.1".parse::<TeRelease>(), Ok(TeRelease::new(2, 2)));
        assert!(TeRelease::new(2, 10) > TeRelease::new(2, 9));
        assert!("2".parse::<TeRelease>().is_err());
        assert!("two.four".parse::<TeRelease>().is_err());
        assert!("2.4.x".parse::<TeRelease>().is_err());
    }
}
