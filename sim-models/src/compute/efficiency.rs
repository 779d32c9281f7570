//! Calibrated kernel efficiency per GPU architecture family: how far below the roofline real
//! kernels run, and why.
//!
//! One TOML file per family under `configs/compute/` (embedded at build time). The parameters
//! are fitted to public measurements by `cargo run --release -p sim --example fit_compute`
//! (see `docs/compute-model.md`); families without a fit use `default.toml`.
//!
//! - **GEMM** (cuBLASLt-like): the output is cut into `tm × tn` tiles, one per SM at a time,
//!   so a GEMM takes `waves = ⌈tiles / SMs⌉` rounds of one tile's time. A tile streams its
//!   `k` reduction through shared memory; fixed per-tile work (prologue, epilogue, pipeline
//!   fill) costs the equivalent of `k_overhead` more steps. Small tiles reuse less data per
//!   load, so their throughput scales with the tile's arithmetic intensity
//!   `tm·tn/(tm+tn)`. The library picks the fastest tile for the shape, as cuBLAS's
//!   heuristics do. This gives tile quantisation, wave quantisation (NVIDIA, "Matrix
//!   Multiplication Background User's Guide", §"Dimension Quantization Effects") and the
//!   small-dimension penalties in one formula.
//! - **Fused attention** (FlashAttention-2, Dao 2023): each thread block owns 128 query rows
//!   and loops over the keys, so a fixed per-block cost gives efficiency
//!   `seq_kv/(seq_kv + seq_half)`; with a causal mask the diagonal blocks are partly wasted,
//!   `causal_peak · nb/(nb + causal_blocks)` with `nb = seq_q/128`. A grid of few thread blocks
//!   per SM hides less latency: `x/(x + blocks_per_sm_half)` with `x` blocks per SM. Backward
//!   runs at `backward_relative` of the forward efficiency (FA2 paper §4.1: up to 73% of peak
//!   forward, 63% backward on A100). Dropout on the attention probabilities multiplies the
//!   forward's time by `dropout_forward` and the backward's by `dropout_backward` (measured).
//! - **Memory-bound kernels** reach `memory_efficiency` of the datasheet HBM bandwidth (the
//!   measured STREAM-like bandwidth in `../shared/calibration/gpus.csv`).
//! - Every kernel pays `launch_us` (launch plus the gap between back-to-back kernels).
//! - **Clocks.** Every efficiency of GEMMs and attention is a fraction of the tensor peak *at
//!   the clock the kernel runs at*: `dense_tflops × clock / spec clock` (the GPU file's
//!   `[clocks]`). Training runs at the sustained, power-capped clock; the `[clock]` fractions
//!   here stand in for a GPU file without clocks.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::{AttentionBackend, ConfigError, Precision, parse_typed};
use crate::embedded;

/// The efficiency parameters of one architecture family.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchEfficiency {
    pub architecture: String,
    /// Fixed cost of every kernel, microseconds.
    pub launch_us: f64,
    /// Achievable fraction of the datasheet HBM bandwidth.
    pub memory_efficiency: f64,
    pub source: String,
    pub gemm: GemmEfficiency,
    /// The fused attention Megatron-Core with Transformer Engine runs on this family by
    /// default (its `backend` names which).
    pub attention: AttentionEfficiency,
    /// FlashAttention-2, where it is not the default (Hopper: TE before mid 2024, or
    /// `NVTE_FUSED_ATTN=0`); `training.attention_backend = "flash2"` selects it.
    #[serde(default)]
    pub attention_flash2: Option<AttentionEfficiency>,
    pub clock: ClockFractions,
}

/// The clocks, as fractions of the datasheet clock, of a GPU of this family whose file has no
/// `[clocks]`: those of the GPU the family was fitted on.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockFractions {
    pub sustained: f64,
    /// Under sustained FP8 tensor work.
    pub sustained_fp8: f64,
    pub burst: f64,
    /// Relative standard deviation of the sustained clock from chip to chip.
    pub spread: f64,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmEfficiency {
    /// Output tiles (rows × columns) the library may choose from.
    pub tiles: Vec<[u64; 2]>,
    /// Fixed per-tile work, in 16-bit reduction steps (elements of `k`); scaled by the
    /// dtype's peak over the 16-bit peak, since it is a fixed time.
    pub k_overhead: f64,
    /// Tile intensity `tm·tn/(tm+tn)` at which data reuse halves a tile's throughput.
    pub tile_intensity_half: f64,
    /// Fraction of the dense peak the family's best tile reaches, per data type.
    pub peak_fraction: PeakFraction,
    /// What a grouped GEMM (several independent problems in one kernel: a rank's local
    /// experts) pays beyond the roofline; absent, it is costed as a plain batched GEMM.
    #[serde(default)]
    pub grouped: Option<GroupedGemmEfficiency>,
    /// What FP8 forward GEMMs gain where Transformer Engine runs them with fast accumulation
    /// and the fit's kernels ran without it; absent, nothing.
    #[serde(default)]
    pub fp8_fast_accumulation: Option<FastAccumulation>,
    pub source: String,
}

/// Hopper's FP8 tensor cores accumulate in reduced precision; cuBLAS's default (and
/// `torch._scaled_mm`'s) promotes partial sums to FP32 every few k-steps, fast accumulation
/// does not. Transformer Engine turns it on for the forward GEMM only (`_2X_ACC_FPROP = False`,
/// `_2X_ACC_DGRAD = _2X_ACC_WGRAD = True`, `pytorch/module/base.py`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastAccumulation {
    /// How many times faster a compute-bound forward GEMM runs with it.
    pub speedup: f64,
    pub source: String,
}

/// A grouped GEMM at few tokens per problem reads each problem's weights about once, one
/// column panel per thread block, and reaches less of the HBM bandwidth than a copy kernel;
/// each problem also costs its tiles' pipeline fill once.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupedGemmEfficiency {
    /// Fraction of the datasheet HBM bandwidth its memory-bound side streams at.
    pub stream_fraction: f64,
    /// Fixed time per problem (per local expert), microseconds.
    pub per_problem_us: f64,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakFraction {
    pub fp32: f64,
    pub tf32: f64,
    pub bf16: f64,
    pub fp16: f64,
    pub fp8: f64,
    /// MXFP8 GEMMs, where measured against per-tensor FP8 at the same shapes: the block
    /// scales cost the kernel time. Default: the FP8 fraction.
    #[serde(default)]
    pub mxfp8: Option<f64>,
}

impl PeakFraction {
    pub fn get(&self, dtype: Precision) -> f64 {
        match dtype {
            Precision::Fp32 => self.fp32,
            Precision::Tf32 => self.tf32,
            Precision::Bf16 => self.bf16,
            Precision::Fp16 => self.fp16,
            Precision::Fp8 => self.fp8,
            Precision::Mxfp8 => self.mxfp8.unwrap_or(self.fp8),
            // NVFP4 runs on the FP8 tiles' per-clock efficiency (no NVFP4 GEMM is measured
            // against a per-tensor baseline); its own peak sets the rate.
            Precision::Nvfp4 => self.fp8,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionEfficiency {
    /// The kernels fitted: `cudnn` (Transformer Engine's FusedAttention) or `flash2`
    /// (FlashAttention-2).
    pub backend: AttentionBackend,
    /// Forward efficiency at long sequences, head dimension 64.
    pub peak_fraction_hd64: f64,
    /// Forward efficiency at long sequences, head dimension 128.
    pub peak_fraction_hd128: f64,
    /// Keys at which the per-block fixed cost halves the efficiency.
    pub seq_half: f64,
    /// The same for the backward pass, whose per-block fixed cost differs (dQ, dK, dV
    /// accumulators); default `seq_half`.
    #[serde(default)]
    pub seq_half_backward: Option<f64>,
    /// Extra 128-row blocks' worth of waste from a causal mask.
    pub causal_blocks: f64,
    /// The efficiency of a causal kernel at long sequences relative to a full one (masked
    /// diagonal blocks and the uneven work of query blocks); 1 where the fit needs none.
    pub causal_peak: f64,
    /// Thread blocks per SM at which latency hiding halves the efficiency: a grid of `x`
    /// blocks per SM runs at `x / (x + blocks_per_sm_half)` (0: no such loss).
    pub blocks_per_sm_half: f64,
    /// Backward efficiency relative to forward.
    pub backward_relative: f64,
    /// How many times longer the forward and the backward kernel take with dropout on the
    /// attention probabilities: the kernel draws a Philox random number per score in the
    /// forward and draws it again in the backward. 1 where not measured.
    #[serde(default = "no_slowdown")]
    pub dropout_forward: f64,
    #[serde(default = "no_slowdown")]
    pub dropout_backward: f64,
    pub source: String,
}

fn no_slowdown() -> f64 {
    1.0
}

impl AttentionEfficiency {
    /// Long-sequence forward efficiency at head dimension `hd`: linear in log2(hd) between the
    /// two fitted points, held constant outside them.
    pub fn peak_fraction(&self, hd: u64) -> f64 {
        let x = ((hd.max(1) as f64).log2() - 6.0).clamp(0.0, 1.0);
        self.peak_fraction_hd64 + x * (self.peak_fraction_hd128 - self.peak_fraction_hd64)
    }
}

/// The architecture used when a GPU's family has no file of its own.
pub const DEFAULT_ARCHITECTURE: &str = "default";

/// All efficiency files of this build, keyed by architecture.
#[derive(Debug, Clone)]
pub struct EfficiencyTable {
    by_architecture: BTreeMap<String, ArchEfficiency>,
}

/// `training.attention_backend` names a backend that a family in use has no fit for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {family} family has no {} attention fit (its default is {}); use auto",
    .requested.name(),
    .default.name()
)]
pub struct NoAttentionFit {
    pub family: String,
    pub requested: AttentionBackend,
    pub default: AttentionBackend,
}

impl EfficiencyTable {
    pub fn embedded() -> Result<Self, ConfigError> {
        let mut by_architecture = BTreeMap::new();
        for (stem, text) in embedded::COMPUTE {
            let file = format!("configs/compute/{stem}.toml");
            let arch: ArchEfficiency = parse_typed(&file, text)?;
            validate(&arch, &file)?;
            by_architecture.insert(arch.architecture.clone(), arch);
        }
        if !by_architecture.contains_key(DEFAULT_ARCHITECTURE) {
            return Err(ConfigError::at_file(
                "configs/compute/default.toml",
                "is missing: the compute model needs a default architecture",
            ));
        }
        Ok(Self { by_architecture })
    }

    /// The same families with `backend`'s attention: `auto` keeps each family's default;
    /// `flash2` or `cudnn` on a family `in_use` (the GPUs' architectures) without that fit is
    /// an error naming the family.
    pub fn with_attention(
        mut self,
        backend: AttentionBackend,
        in_use: &[&str],
    ) -> Result<Self, NoAttentionFit> {
        if backend == AttentionBackend::Auto {
            return Ok(self);
        }
        let used: Vec<String> = in_use
            .iter()
            .map(|arch| self.for_architecture(arch).0.architecture.clone())
            .collect();
        for (arch, a) in &mut self.by_architecture {
            if a.attention.backend == backend || !used.contains(arch) {
                continue;
            }
            match (&a.attention_flash2, backend) {
                (Some(f), AttentionBackend::Flash2) => a.attention = f.clone(),
                _ => {
                    return Err(NoAttentionFit {
                        family: arch.clone(),
                        requested: backend,
                        default: a.attention.backend,
                    });
                }
            }
        }
        Ok(self)
    }

    /// The parameters for `architecture` and whether they were fitted for it (false: the
    /// default family's).
    pub fn for_architecture(&self, architecture: &str) -> (&ArchEfficiency, bool) {
        match self.by_architecture.get(architecture) {
            Some(a) => (a, true),
            None => (&self.by_architecture[DEFAULT_ARCHITECTURE], false),
        }
    }
}

fn validate(a: &ArchEfficiency, file: &str) -> Result<(), ConfigError> {
    let fraction = |key: &str, v: f64| {
        if v.is_finite() && (0.0..=1.0).contains(&v) {
            Ok(())
        } else {
            Err(ConfigError::plain(
                file,
                key,
                format!("must be a fraction in [0, 1], got {v}"),
            ))
        }
    };
    let non_negative = |key: &str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(ConfigError::plain(
                file,
                key,
                format!("must be a finite number >= 0, got {v}"),
            ))
        }
    };
    non_negative("launch_us", a.launch_us)?;
    for (key, v) in [
        ("clock.sustained", a.clock.sustained),
        ("clock.sustained_fp8", a.clock.sustained_fp8),
        ("clock.burst", a.clock.burst),
    ] {
        if !v.is_finite() || v <= 0.0 || v > 1.5 {
            return Err(ConfigError::plain(
                file,
                key,
                format!("must be a fraction of the datasheet clock in (0, 1.5], got {v}"),
            ));
        }
    }
    fraction("memory_efficiency", a.memory_efficiency)?;
    let p = &a.gemm.peak_fraction;
    for (key, v) in [
        ("gemm.peak_fraction.fp32", p.fp32),
        ("gemm.peak_fraction.tf32", p.tf32),
        ("gemm.peak_fraction.bf16", p.bf16),
        ("gemm.peak_fraction.fp16", p.fp16),
        ("gemm.peak_fraction.fp8", p.fp8),
        (
            "attention.peak_fraction_hd64",
            a.attention.peak_fraction_hd64,
        ),
        (
            "attention.peak_fraction_hd128",
            a.attention.peak_fraction_hd128,
        ),
        ("attention.backward_relative", a.attention.backward_relative),
        ("attention.causal_peak", a.attention.causal_peak),
    ] {
        fraction(key, v)?;
    }
    if let Some(v) = p.mxfp8 {
        fraction("gemm.peak_fraction.mxfp8", v)?;
    }
    non_negative("gemm.k_overhead", a.gemm.k_overhead)?;
    if let Some(g) = &a.gemm.grouped {
        let v = g.stream_fraction;
        if !(v > 0.0 && v <= 1.0) {
            return Err(ConfigError::plain(
                file,
                "gemm.grouped.stream_fraction",
                format!("must be a fraction in (0, 1], got {v}"),
            ));
        }
        non_negative("gemm.grouped.per_problem_us", g.per_problem_us)?;
    }
    if let Some(f) = &a.gemm.fp8_fast_accumulation
        && !(f.speedup.is_finite() && (1.0..=2.0).contains(&f.speedup))
    {
        return Err(ConfigError::plain(
            file,
            "gemm.fp8_fast_accumulation.speedup",
            format!("must be a speed-up in [1, 2], got {}", f.speedup),
        ));
    }
    non_negative("gemm.tile_intensity_half", a.gemm.tile_intensity_half)?;
    non_negative("attention.seq_half", a.attention.seq_half)?;
    non_negative(
        "attention.seq_half_backward",
        a.attention.seq_half_backward.unwrap_or(0.0),
    )?;
    non_negative("attention.causal_blocks", a.attention.causal_blocks)?;
    non_negative(
        "attention.blocks_per_sm_half",
        a.attention.blocks_per_sm_half,
    )?;
    for attention in std::iter::once(&a.attention).chain(&a.attention_flash2) {
        for (key, v) in [
            ("attention.dropout_forward", attention.dropout_forward),
            ("attention.dropout_backward", attention.dropout_backward),
        ] {
            if !(1.0..=10.0).contains(&v) {
                return Err(ConfigError::plain(
                    file,
                    key,
                    format!("is a slowdown factor, between 1 and 10; got {v}"),
                ));
            }
        }
    }
    if a.memory_efficiency == 0.0 || a.attention.backward_relative == 0.0 {
        return Err(ConfigError::plain(
            file,
            "memory_efficiency",
            "memory_efficiency and attention.backward_relative must be > 0",
        ));
    }
    if a.gemm.tiles.is_empty() || a.gemm.tiles.iter().any(|t| t[0] == 0 || t[1] == 0) {
        return Err(ConfigError::plain(
            file,
            "gemm.tiles",
            "must list at least one [rows, columns] tile, both > 0",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fast-accumulation speed-up outside [1, 2] is refused, naming the key and the file.
    #[test]
    fn a_fast_accumulation_speedup_below_one_is_refused() {
        let file = "configs/compute/hopper.toml";
        let text = embedded::COMPUTE
            .iter()
            .find(|(stem, _)| *stem == "hopper")
            .expect("hopper")
            .1;
        let good: ArchEfficiency = parse_typed(file, text).expect("hopper parses");
        validate(&good, file).expect("shipped hopper is valid");
        let mut bad = good;
        bad.gemm
            .fp8_fast_accumulation
            .as_mut()
            .expect("hopper has fast accumulation")
            .speedup = 0.9;
        let err = validate(&bad, file).expect_err("0.9 refused").to_string();
        assert!(
            err.contains("gemm.fp8_fast_accumulation.speedup") && err.contains("[1, 2]"),
            "{err}"
        );
    }
}
