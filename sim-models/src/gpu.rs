//! The GPU database: one TOML file per GPU under `configs/gpus/`, embedded at build time.
//!
//! Every number in a file carries its source in the `source` key of its section. A user can
//! describe a GPU that does not exist yet by pointing `cluster.gpu` at a file of the same format.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::config::{ConfigError, Precision, parse_typed};

use crate::embedded;

/// One GPU model, as described in `configs/gpus/NAME.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Canonical name, used in experiment files (`cluster.gpu`).
    pub name: String,
    /// Other names users write for the same part.
    #[serde(default)]
    pub aliases: Vec<String>,
    pub vendor: Vendor,
    /// Architecture family (`volta`, `ampere`, `hopper`, `blackwell`, `cdna3`): measured kernel
    /// tables are scaled only within a family.
    pub architecture: String,
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD).
    pub sms: u32,
    pub dense_tflops: DenseTflops,
    pub hbm: Hbm,
    pub nvlink: NvLink,
    pub pcie: Pcie,
    /// SM clocks and power limit. Without it the GPU holds the fraction of its datasheet
    /// clock that its architecture family's fitted GPU holds (`configs/compute/*.toml`,
    /// `[clock]`).
    #[serde(default)]
    pub clocks: Option<Clocks>,
    /// The CPU that issues this GPU's work (`configs/hosts.toml`): `x86` (an HGX/DGX host,
    /// the default) or `grace` (a Grace Hopper or Grace Blackwell superchip's own CPU).
    #[serde(default)]
    pub host_cpu: HostCpu,
}

/// A host CPU family with its own dispatch costs ([`crate::compute::host`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostCpu {
    #[default]
    X86,
    Grace,
}

impl HostCpu {
    pub const ALL: [HostCpu; 2] = [HostCpu::X86, HostCpu::Grace];

    pub fn name(self) -> &'static str {
        match self {
            HostCpu::X86 => "x86",
            HostCpu::Grace => "grace",
        }
    }
}

/// The SM clock a GPU runs its tensor work at, MHz, and the power limit that sets it. A
/// compute-bound kernel's speed follows the clock; a memory-bound one's does not (an H100
/// copying 512 MiB holds its 1,980 MHz maximum: `sim/tests/calibration/h100-measured/`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clocks {
    /// The clock `dense_tflops` are quoted at (SMs × tensor FLOPs per clock × this).
    pub spec_mhz: f64,
    /// The highest boost clock.
    pub max_mhz: f64,
    /// The clock of a compute-bound kernel timed alone after an idle GPU, as published kernel
    /// benchmarks and `tools/profile_kernels.py --clock burst` time it.
    pub burst_mhz: f64,
    /// The clock held under sustained compute-bound load at the power limit, as in training.
    pub sustained_mhz: f64,
    /// The same under sustained FP8 tensor work, which draws more power per clock (an H100
    /// holds 1,275 MHz under FP8 GEMMs, 1,380 under BF16); default `sustained_mhz`. MXFP8 and
    /// NVFP4 GEMMs run at it too: they use the same tensor-core datapath, and no clock under
    /// them is published.
    #[serde(default)]
    pub sustained_fp8_mhz: Option<f64>,
    pub power_limit_w: f64,
    /// Relative standard deviation of the sustained clock from chip to chip of this part
    /// (manufacturing variation under the same power limit); default: the family's `[clock]
    /// spread`.
    #[serde(default)]
    pub spread: Option<f64>,
    pub source: String,
}

impl Clocks {
    pub fn sustained_fp8(&self) -> f64 {
        self.sustained_fp8_mhz.unwrap_or(self.sustained_mhz)
    }
}

/// Which clock a kernel is timed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockState {
    /// Sustained load at the power limit: every simulation.
    Sustained,
    /// One kernel after an idle GPU: what published kernel benchmarks measure.
    Burst,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
}

/// Dense (no structured sparsity) tensor peak per data type, TFLOP/s. Zero means the part has no
/// hardware support for that type.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseTflops {
    pub fp32: f64,
    pub tf32: f64,
    pub bf16: f64,
    pub fp16: f64,
    pub fp8: f64,
    /// MXFP8 GEMMs (32-element blocks, E8M0 scales); 0 (the default) without hardware
    /// block scaling, as before Blackwell.
    #[serde(default)]
    pub mxfp8: f64,
    /// NVFP4 GEMMs (16-element blocks, E4M3 scales); 0 (the default) without FP4 tensor cores.
    #[serde(default)]
    pub nvfp4: f64,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hbm {
    /// Capacity in GB (10^9 bytes), as vendors state it.
    pub capacity_gb: f64,
    /// Peak bandwidth in TB/s (10^12 bytes/s).
    pub bandwidth_tb_s: f64,
    pub source: String,
}

/// The scale-up fabric port of the GPU: NVLink on NVIDIA parts, Infinity Fabric (xGMI) on AMD.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvLink {
    /// Bandwidth per direction over all ports together, GB/s. Zero when the part has none.
    pub bandwidth_gb_s: f64,
    pub ports: u32,
    /// NVLink generation (or Infinity Fabric generation on AMD).
    pub generation: u32,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pcie {
    pub generation: u32,
    pub lanes: u32,
    pub source: String,
}

impl Pcie {
    /// Usable bandwidth per direction in bytes/s: the raw rate after line encoding
    /// (8b/10b for gen 1-2, 128b/130b for gen 3-5, FLIT for gen 6), per PCI-SIG's specifications.
    pub fn bytes_per_s(&self) -> f64 {
        let per_lane_gbit = match self.generation {
            1 => 2.5 * 0.8,
            2 => 5.0 * 0.8,
            3 => 8.0 * 128.0 / 130.0,
            4 => 16.0 * 128.0 / 130.0,
            5 => 32.0 * 128.0 / 130.0,
            _ => 64.0 * 242.0 / 256.0,
        };
        per_lane_gbit * 1e9 / 8.0 * f64::from(self.lanes)
    }
}

impl GpuSpec {
    /// Dense peak in FLOP/s for a precision (0 when unsupported).
    pub fn peak_flops(&self, precision: Precision) -> f64 {
        let t = &self.dense_tflops;
        let tflops = match precision {
            Precision::Fp32 => t.fp32,
            Precision::Tf32 => t.tf32,
            Precision::Bf16 => t.bf16,
            Precision::Fp16 => t.fp16,
            Precision::Fp8 => t.fp8,
            Precision::Mxfp8 => t.mxfp8,
            Precision::Nvfp4 => t.nvfp4,
        };
        tflops * 1e12
    }

    pub fn hbm_bytes(&self) -> f64 {
        self.hbm.capacity_gb * 1e9
    }

    pub fn nvlink_bytes_per_s(&self) -> f64 {
        self.nvlink.bandwidth_gb_s * 1e9
    }

    /// The clock of `dtype` tensor work in `state` as a fraction of the datasheet clock, when
    /// the file gives clocks.
    pub fn clock_fraction(&self, state: ClockState, dtype: Precision) -> Option<f64> {
        self.clocks.as_ref().map(|c| {
            let mhz = match state {
                ClockState::Sustained if dtype.uses_fp8_clock() => c.sustained_fp8(),
                ClockState::Sustained => c.sustained_mhz,
                ClockState::Burst => c.burst_mhz,
            };
            mhz / c.spec_mhz
        })
    }

    fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let t = &self.dense_tflops;
        let checks: [(&str, f64, bool); 11] = [
            ("dense_tflops.fp32", t.fp32, false),
            ("dense_tflops.tf32", t.tf32, true),
            ("dense_tflops.bf16", t.bf16, true),
            ("dense_tflops.fp16", t.fp16, false),
            ("dense_tflops.fp8", t.fp8, true),
            ("dense_tflops.mxfp8", t.mxfp8, true),
            ("dense_tflops.nvfp4", t.nvfp4, true),
            ("hbm.capacity_gb", self.hbm.capacity_gb, false),
            ("hbm.bandwidth_tb_s", self.hbm.bandwidth_tb_s, false),
            ("nvlink.bandwidth_gb_s", self.nvlink.bandwidth_gb_s, true),
            ("sms", f64::from(self.sms), false),
        ];
        for (key, value, zero_ok) in checks {
            let bad = !value.is_finite() || value < 0.0 || (!zero_ok && value == 0.0);
            if bad {
                return Err(ConfigError::plain(
                    file,
                    key,
                    format!(
                        "must be a finite number {} 0, got {value}",
                        if zero_ok { ">=" } else { ">" }
                    ),
                ));
            }
        }
        if let Some(c) = &self.clocks {
            let positive = [
                ("clocks.spec_mhz", c.spec_mhz),
                ("clocks.max_mhz", c.max_mhz),
                ("clocks.burst_mhz", c.burst_mhz),
                ("clocks.sustained_mhz", c.sustained_mhz),
                ("clocks.power_limit_w", c.power_limit_w),
                ("clocks.sustained_fp8_mhz", c.sustained_fp8()),
            ];
            if let Some(spread) = c.spread
                && (!spread.is_finite() || !(0.0..0.2).contains(&spread))
            {
                return Err(ConfigError::plain(
                    file,
                    "clocks.spread",
                    format!("must be a fraction in [0, 0.2), got {spread}"),
                ));
            }
            for (key, value) in positive {
                if !value.is_finite() || value <= 0.0 {
                    return Err(ConfigError::plain(
                        file,
                        key,
                        format!("must be a finite number > 0, got {value}"),
                    ));
                }
            }
            if c.sustained_mhz.max(c.sustained_fp8()) > c.burst_mhz || c.burst_mhz > c.max_mhz {
                return Err(ConfigError::plain(
                    file,
                    "clocks",
                    format!(
                        "needs sustained_mhz <= burst_mhz <= max_mhz, got {} <= {} <= {}: a power limit can only lower the clock",
                        c.sustained_mhz, c.burst_mhz, c.max_mhz
                    ),
                ));
            }
        }
        if !(1..=7).contains(&self.pcie.generation) || self.pcie.lanes == 0 {
            return Err(ConfigError::plain(
                file,
                "pcie",
                format!(
                    "generation must be 1-7 and lanes > 0, got gen {} x{}",
                    self.pcie.generation, self.pcie.lanes
                ),
            ));
        }
        Ok(())
    }
}

/// All GPUs known to this build, keyed by canonical name.
#[derive(Debug, Clone)]
pub struct GpuDatabase {
    gpus: BTreeMap<String, GpuSpec>,
}

impl GpuDatabase {
    /// The GPUs embedded from `configs/gpus/`.
    pub fn embedded() -> Result<Self, ConfigError> {
        let mut gpus = BTreeMap::new();
        for (stem, text) in embedded::GPUS {
            let file = format!("configs/gpus/{stem}.toml");
            let spec: GpuSpec = parse_typed(&file, text)?;
            spec.validate(&file)?;
            gpus.insert(spec.name.clone(), spec);
        }
        Ok(Self { gpus })
    }

    /// Names users may write, canonical names first.
    pub fn names(&self) -> Vec<&str> {
        self.gpus.keys().map(String::as_str).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &GpuSpec> {
        self.gpus.values()
    }

    /// Looks a GPU up by canonical name or alias, ignoring ASCII case.
    /// The GPU a name or alias stands for, ignoring case and the separators people write
    /// between a model and its form factor (`H100 SXM`, `h100_sxm` and `H100-SXM` alike).
    pub fn get(&self, name: &str) -> Option<&GpuSpec> {
        let wanted = gpu_name_key(name);
        self.gpus.values().find(|g| {
            gpu_name_key(&g.name) == wanted || g.aliases.iter().any(|a| gpu_name_key(a) == wanted)
        })
    }

    /// Reads a user's GPU file (same format as `configs/gpus/*.toml`).
    pub fn load_file(path: &Path) -> Result<GpuSpec, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::plain(&file, "cluster.gpu", format!("cannot read GPU file: {e}"))
        })?;
        let spec: GpuSpec = parse_typed(&file, &text)?;
        spec.validate(&file)?;
        Ok(spec)
    }
}

/// A GPU name as compared: its letters (upper-cased) and digits alone.
pub fn gpu_name_key(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU is found by name or alias whatever the case and separators, and a name that is
    /// no GPU's is not.
    #[test]
    fn gpu_names_match_whatever_the_case_and_separators() {
        let db = GpuDatabase::embedded().unwrap();
        let name = |n: &str| db.get(n).map(|g| g.name.as_str());
        for (written, gpu) in [
            ("H100 SXM", "H100-SXM"),
            ("h100_sxm5", "H100-SXM"),
            ("H100-SXM-80GB", "H100-SXM"),
            ("DGX-H100", "H100-SXM"),
            ("a100-sxm4-80gb", "A100-SXM-80GB"),
            ("B200-SXM-180GB", "B200"),
            ("DGX B200", "B200"),
            ("GB200 NVL72", "GB200"),
        ] {
            assert_eq!(name(written), Some(gpu), "{written}");
        }
        for unknown in ["H1000", "B300", "", "SXM"] {
            assert_eq!(name(unknown), None, "{unknown}");
        }
    }

    #[test]
    fn every_embedded_gpu_parses_and_required_parts_exist() {
        let db = GpuDatabase::embedded().unwrap();
        for name in [
            "V100",
            "A100-SXM-40GB",
            "A100-SXM-80GB",
            "A800",
            "H100-SXM",
            "H100-PCIe",
            "H800",
            "H20",
            "H200-SXM",
            "B200",
            "GB200",
            "MI300X",
        ] {
            assert!(db.get(name).is_some(), "{name} missing from configs/gpus");
        }
    }

    #[test]
    fn pcie_gen5_x16_is_about_63_gbytes_per_s() {
        let p = Pcie {
            generation: 5,
            lanes: 16,
            source: String::new(),
        };
        assert!((p.bytes_per_s() / 1e9 - 63.0).abs() < 0.1);
    }
}
