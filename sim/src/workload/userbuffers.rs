//! The SMs Transformer Engine's userbuffers overlap takes from the GEMMs it overlaps.
//!
//! With `--tp-comm-overlap`, TE runs each tensor-parallel all-gather or reduce-scatter beside
//! a GEMM in one of three ways (`transformer_engine/pytorch/module/base.py`,
//! `initialize_ub`): `ring_exchange` (copy engines; QKV and fc1 forward, the output
//! projection's and fc2's dgrad), `pipeline` (a communication kernel on `num_sm` SMs; the
//! output projection's and fc2's forward) and `bulk` (a communication kernel on `num_sm` SMs;
//! QKV's and fc1's dgrad and wgrad). Where an overlap sets `set_sm_margin`, the GEMM is
//! launched on the GPU's SMs less `num_sm` for its whole run
//! (`transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp`:
//! `_math_sms = set_sm_margin ? sm_count - num_comm_sm : sm_count`, passed to cuBLASLt as
//! the SM count target). Without a margin the communication kernel shares the SMs while it
//! runs, which [`crate::compute::Interference`] charges.
//!
//! TE's defaults (`get_default_config`): 16 SMs for `pipeline` and `bulk`, 1 for
//! `ring_exchange`; `set_sm_margin` off everywhere up to TE 1.13, on for `pipeline` and
//! `bulk` from TE 2.0 (tag v2.0, 2025-02-12). Recipes override them per GEMM (NeMo's
//! `tp_overlap_configs/userbuffers.py`), which `training.tp_comm_overlap_sms` states.

use crate::config::{TeRelease, TpOverlapSms};
use crate::workload::{KernelName, Pass};

/// How TE overlaps one GEMM's communication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    RingExchange,
    Pipeline,
    Bulk,
}

/// The SMs TE's userbuffers hold back from each overlapped GEMM, resolved for one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UserbufferSms {
    /// By TE's `ub_cfgs` order (see [`TpOverlapSms::entries`]).
    held: [u32; 10],
}

/// TE's layer names in [`TpOverlapSms::entries`]'s order, with their default method.
const METHODS: [Method; 10] = [
    Method::RingExchange, // qkv_fprop
    Method::Bulk,         // qkv_dgrad
    Method::Bulk,         // qkv_wgrad
    Method::Pipeline,     // proj_fprop
    Method::RingExchange, // proj_dgrad
    Method::RingExchange, // fc1_fprop
    Method::Bulk,         // fc1_dgrad
    Method::Bulk,         // fc1_wgrad
    Method::Pipeline,     // fc2_fprop
    Method::RingExchange, // fc2_dgrad
];

/// TE's default `num_sm` for `pipeline` and `bulk` overlaps.
const DEFAULT_COMM_SMS: u32 = 16;

/// The first release whose defaults set `set_sm_margin` for `pipeline` and `bulk`.
const MARGIN_BY_DEFAULT_FROM: TeRelease = TeRelease::new(2, 0);

impl UserbufferSms {
    /// What a run of TE `release` with the recipe's `overrides` holds back.
    pub fn resolve(overrides: &TpOverlapSms, release: TeRelease) -> Self {
        let margin_by_default = release >= MARGIN_BY_DEFAULT_FROM;
        let mut held = [0; 10];
        for (i, (_, value)) in overrides.entries().into_iter().enumerate() {
            held[i] = value.unwrap_or(match METHODS[i] {
                Method::Pipeline | Method::Bulk if margin_by_default => DEFAULT_COMM_SMS,
                _ => 0,
            });
        }
        UserbufferSms { held }
    }

    /// SMs held back from the GEMM `name` runs in `pass`, when TE overlaps it (0 otherwise).
    pub fn of(&self, name: KernelName, pass: Pass) -> u32 {
        let index = match (name, pass) {
            (KernelName::QkvProj, Pass::Forward) => 0,
            (KernelName::QkvProj, Pass::Dgrad) => 1,
            (KernelName::QkvProj, Pass::Wgrad) => 2,
            (KernelName::OutProj, Pass::Forward) => 3,
            (KernelName::OutProj, Pass::Dgrad) => 4,
            (KernelName::MlpUp, Pass::Forward) => 5,
            (KernelName::MlpUp, Pass::Dgrad) => 6,
            (KernelName::MlpUp, Pass::Wgrad) => 7,
            (KernelName::MlpDown, Pass::Forward) => 8,
            (KernelName::MlpDown, Pass::Dgrad) => 9,
            _ => return 0,
        };
        self.held[index]
    }

    /// The largest value, for checking it against a GPU's SMs.
    pub fn most(&self) -> u32 {
        self.held.iter().copied().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn te_2_holds_16_sms_from_pipeline_and_bulk_gemms_te_1_none_and_recipes_override() {
        let none = TpOverlapSms::default();
        let te2 = UserbufferSms::resolve(&none, TeRelease::new(2, 0));
        assert_eq!(te2.of(KernelName::OutProj, Pass::Forward), 16);
        assert_eq!(te2.of(KernelName::MlpDown, Pass::Forward), 16);
        assert_eq!(te2.of(KernelName::QkvProj, Pass::Wgrad), 16);
        assert_eq!(te2.of(KernelName::MlpUp, Pass::Dgrad), 16);
        assert_eq!(te2.of(KernelName::QkvProj, Pass::Forward), 0);
        assert_eq!(te2.of(KernelName::MlpDown, Pass::Dgrad), 0);
        // Not overlapped by userbuffers at all.
        assert_eq!(te2.of(KernelName::OutProj, Pass::Wgrad), 0);
        assert_eq!(te2.of(KernelName::ExpertUp, Pass::Forward), 0);
        let te1 = UserbufferSms::resolve(&none, TeRelease::new(1, 13));
        assert_eq!(te1.most(), 0);
        // NeMo's GPT-3 175B H100 BF16 recipe (tp_overlap_configs/userbuffers.py).
        let gpt3 = TpOverlapSms {
            proj_fprop: Some(24),
            qkv_dgrad: Some(0),
            ..TpOverlapSms::default()
        };
        let r = UserbufferSms::resolve(&gpt3, TeRelease::new(2, 2));
        assert_eq!(r.of(KernelName::OutProj, Pass::Forward), 24);
        assert_eq!(r.of(KernelName::QkvProj, Pass::Dgrad), 0);
        assert_eq!(r.of(KernelName::QkvProj, Pass::Wgrad), 16);
        assert_eq!(r.most(), 24);
    }
}
