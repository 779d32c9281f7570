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
    /// By [`GEMMS`]' order.
    held: [u32; GEMMS.len()],
}

/// Every GEMM TE's userbuffers overlap: its `ub_cfgs` name, the kernel and pass fleetsim
/// compiles it as, and TE's default method for it (`initialize_ub`'s `methods`).
const GEMMS: [(&str, KernelName, Pass, Method); 10] = [
    (
        "qkv_fprop",
        KernelName::QkvProj,
        Pass::Forward,
        Method::RingExchange,
    ),
    ("qkv_dgrad", KernelName::QkvProj, Pass::Dgrad, Method::Bulk),
    ("qkv_wgrad", KernelName::QkvProj, Pass::Wgrad, Method::Bulk),
    (
        "proj_fprop",
        KernelName::OutProj,
        Pass::Forward,
        Method::Pipeline,
    ),
    (
        "proj_dgrad",
        KernelName::OutProj,
        Pass::Dgrad,
        Method::RingExchange,
    ),
    (
        "fc1_fprop",
        KernelName::MlpUp,
        Pass::Forward,
        Method::RingExchange,
    ),
    ("fc1_dgrad", KernelName::MlpUp, Pass::Dgrad, Method::Bulk),
    ("fc1_wgrad", KernelName::MlpUp, Pass::Wgrad, Method::Bulk),
    (
        "fc2_fprop",
        KernelName::MlpDown,
        Pass::Forward,
        Method::Pipeline,
    ),
    (
        "fc2_dgrad",
        KernelName::MlpDown,
        Pass::Dgrad,
        Method::RingExchange,
    ),
];

/// TE's default `num_sm` for `pipeline` and `bulk` overlaps.
const DEFAULT_COMM_SMS: u32 = 16;

/// The first release whose defaults set `set_sm_margin` for `pipeline` and `bulk`.
const MARGIN_BY_DEFAULT_FROM: TeRelease = TeRelease::new(2, 0);

impl UserbufferSms {
    /// What a run of TE `release` with the recipe's `overrides` holds back.
    pub fn resolve(overrides: &TpOverlapSms, release: TeRelease) -> Self {
        let margin_by_default = release >= MARGIN_BY_DEFAULT_FROM;
        let stated = overrides.entries();
        let held = GEMMS.map(|(name, _, _, method)| {
            let value = stated
                .iter()
                .find(|(key, _)| *key == name)
                .and_then(|e| e.1);
            value.unwrap_or(match method {
                Method::Pipeline | Method::Bulk if margin_by_default => DEFAULT_COMM_SMS,
                _ => 0,
            })
        });
        UserbufferSms { held }
    }

    /// SMs held back from the GEMM `name` runs in `pass`, when TE overlaps it (0 otherwise).
    pub fn of(&self, name: KernelName, pass: Pass) -> u32 {
        GEMMS
            .iter()
            .position(|&(_, n, p, _)| n == name && p == pass)
            .map_or(0, |i| self.held[i])
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
        // Every key of the experiment file names one of TE's overlapped GEMMs.
        let names: Vec<&str> = none.entries().iter().map(|e| e.0).collect();
        assert_eq!(names, GEMMS.map(|g| g.0));
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
