//! Kernel durations. For now the roofline (Williams, Waterman, Patterson, "Roofline", CACM
//! 2009): a kernel takes the longer of its executed FLOPs at the dense peak and its HBM bytes
//! at peak bandwidth. Calibrated efficiency curves replace the peaks in the compute-model work
//! (issue 4); imported SimAI kernels keep their measured times.

use crate::gpu::GpuSpec;
use crate::workload::{Kernel, Pass, Shape};

/// FLOPs the GPU really executes for `kernel`. Kernel FLOPs follow Megatron-LM's accounting;
/// causal flash attention skips the masked half of the score matrix, and its backward
/// recomputes the scores (FlashAttention-2, Dao 2023, §3: 5 matmuls in backward vs 2 forward,
/// i.e. 2.5× instead of the 2× counted).
pub fn executed_flops(kernel: &Kernel) -> f64 {
    let flops = kernel.flops as f64;
    match kernel.shape {
        Shape::Attention { causal, flash, .. } => {
            let masked = if causal { 0.5 } else { 1.0 };
            let recompute = if flash && kernel.pass != Pass::Forward {
                1.25
            } else {
                1.0
            };
            flops * masked * recompute
        }
        _ => flops,
    }
}

/// Roofline duration of `kernel` on `gpu`, in picoseconds.
pub fn roofline_ps(kernel: &Kernel, gpu: &GpuSpec) -> u64 {
    if let Shape::Fixed { ns } = kernel.shape {
        return ns.saturating_mul(1000);
    }
    let peak = gpu.peak_flops(kernel.dtype);
    let compute_s = if peak > 0.0 {
        executed_flops(kernel) / peak
    } else {
        0.0
    };
    let memory_s = kernel.bytes as f64 / (gpu.hbm.bandwidth_tb_s * 1e12);
    (compute_s.max(memory_s) * 1e12).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Precision;
    use crate::gpu::GpuDatabase;
    use crate::workload::KernelName;

    #[test]
    fn big_gemm_is_compute_bound_and_norm_is_memory_bound() {
        let db = GpuDatabase::embedded().unwrap();
        let h100 = db.get("H100-SXM").unwrap();
        let (m, n, k) = (8192u64, 8192u64, 8192u64);
        let gemm = Kernel {
            name: KernelName::MlpUp,
            pass: Pass::Forward,
            shape: Shape::Gemm { m, n, k, batch: 1 },
            flops: 2 * m * n * k,
            bytes: 3 * m * n * 2,
            dtype: Precision::Bf16,
        };
        let t = roofline_ps(&gemm, h100) as f64 * 1e-12;
        let want = 2.0 * (m * n * k) as f64 / h100.peak_flops(Precision::Bf16);
        assert!((t - want).abs() / want < 1e-9);
        let norm = Kernel {
            name: KernelName::InputNorm,
            pass: Pass::Forward,
            shape: Shape::Elementwise { elements: m * n },
            flops: 4 * m * n,
            bytes: 4 * m * n,
            dtype: Precision::Bf16,
        };
        let t = roofline_ps(&norm, h100) as f64 * 1e-12;
        let want = (4 * m * n) as f64 / (h100.hbm.bandwidth_tb_s * 1e12);
        assert!((t - want).abs() / want < 1e-6);
    }
}
