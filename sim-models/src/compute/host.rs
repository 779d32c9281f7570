//! What the host costs to issue a rank's ops, and where it must wait for the GPU.
//!
//! A Megatron-Core step is a Python program: one host thread issues every kernel and
//! communication call in program order, ahead of the GPU. An op cannot start before the
//! host has issued it. With long kernels the host runs far ahead and costs nothing; with
//! short ones (micro-batch 1, a layer per virtual stage, small hidden sizes, a Grace host)
//! or after the host waited for the GPU (a dropless MoE layer reads its tokens per expert
//! on the host before its all-to-all: [`crate::workload::Program::host_syncs`]), the time
//! of a layer is what the GPU runs or what the host can issue, whichever is longer.
//!
//! The costs per CPU are in `configs/hosts.toml`, each with its source; ops inside a CUDA
//! graph (`training.cuda_graphs`) cost nothing to issue (a graph launch replays them from the
//! driver).

use std::sync::OnceLock;

use serde::Deserialize;

use crate::config::{ConfigError, CudaGraphs, parse_typed};
use crate::embedded;
use crate::gpu::HostCpu;
use crate::time::SimTime;
use crate::workload::{KernelName, Module, NO_LAYER, Op, OpKind, Program, Shape};

/// Where the table lives in the source tree (named in its errors).
pub const SHIPPED_FILE: &str = "configs/hosts.toml";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    host: Vec<HostEntry>,
}

/// One CPU's dispatch costs as `configs/hosts.toml` states them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostEntry {
    pub cpu: HostCpu,
    pub what: String,
    /// A Transformer Engine module call that launches a GEMM or fused attention, µs.
    pub module_us: f64,
    /// Any other op called from Python, µs.
    pub op_us: f64,
    /// Another kernel the same module launches from C++, µs.
    pub launch_us: f64,
    pub source: String,
}

/// One CPU's costs per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCosts {
    pub module: SimTime,
    pub op: SimTime,
    pub launch: SimTime,
}

impl HostCosts {
    /// The shipped costs of `cpu`.
    pub fn of(cpu: HostCpu) -> Result<HostCosts, ConfigError> {
        let entries = shipped()?;
        let e = entries.iter().find(|e| e.cpu == cpu).ok_or_else(|| {
            ConfigError::at_file(SHIPPED_FILE, format!("has no `{}` host", cpu.name()))
        })?;
        Ok(HostCosts {
            module: SimTime::from_micros_f64(e.module_us),
            op: SimTime::from_micros_f64(e.op_us),
            launch: SimTime::from_micros_f64(e.launch_us),
        })
    }
}

/// Every CPU of the shipped table, checked once.
pub fn shipped() -> Result<&'static [HostEntry], ConfigError> {
    static TABLE: OnceLock<Result<Vec<HostEntry>, ConfigError>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            let file: HostFile = parse_typed(SHIPPED_FILE, embedded::HOSTS)?;
            for e in &file.host {
                let costs = [e.module_us, e.op_us, e.launch_us];
                if costs.iter().any(|c| !c.is_finite() || *c < 0.0) {
                    return Err(ConfigError::at_file(
                        SHIPPED_FILE,
                        format!(
                            "host `{}`: costs must be finite and non-negative µs",
                            e.cpu.name()
                        ),
                    ));
                }
            }
            Ok(file.host)
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
}

/// Whether `op` runs inside a CUDA graph of scope `graphs`: then the host issues it for free.
fn in_graph(op: &Op, graphs: CudaGraphs) -> bool {
    let in_layer = op.label.layer != NO_LAYER;
    match graphs {
        CudaGraphs::None => false,
        CudaGraphs::Attn => in_layer && op.label.module == Module::Attention,
        // A dropless MoE layer's experts need the host (their sizes), so they stay eager.
        CudaGraphs::Layers => {
            in_layer && matches!(op.label.module, Module::Attention | Module::Mlp)
        }
        CudaGraphs::FullIteration => true,
    }
}

/// The host time to issue each op of `program`: a module call for a GEMM or fused
/// attention whose kernel name differs from the previous kernel's (and a launch per further
/// member of a batched GEMM), an op for any other
/// kernel (one per kernel of a chain of small ops) or communication call, a launch for a kernel repeating the previous one's name (the
/// next chunk of an overlapped GEMM, the wgrad after its dgrad); nothing for a CXL transfer
/// (the driver's copy engine), an op inside a CUDA graph or an imported trace's op.
pub fn issue_costs(program: &Program, costs: &HostCosts, graphs: CudaGraphs) -> Vec<SimTime> {
    let mut previous = None;
    program
        .ops
        .iter()
        .map(|op| {
            let cost = match op.kind {
                OpKind::Compute { kernel } => {
                    let k = &program.kernels[kernel as usize];
                    let key = (k.name, op.label.layer, op.label.micro_batch);
                    let repeat = previous == Some(key);
                    previous = Some(key);
                    // Swizzling a block-scaled GEMM's scales happens inside its C++ call
                    // (`swizzle_scaling_factors`): a launch per kernel.
                    let swizzles = match k.shape {
                        Shape::Gemm { scale_swizzles, .. } => {
                            costs.launch.as_ps() * u64::from(scale_swizzles)
                        }
                        _ => 0,
                    };
                    let issue = match k.shape {
                        _ if repeat => costs.launch,
                        // Transformer Engine's GroupedLinear runs a batched GEMM (the local
                        // experts) as one cuBLAS call per member over 4 streams
                        // (`nvte_multi_stream_cublas_gemm`): a launch for each after the first.
                        Shape::Gemm { batch, .. } => SimTime::from_ps(
                            costs.module.as_ps() + costs.launch.as_ps() * batch.saturating_sub(1),
                        ),
                        Shape::Attention { .. } => costs.module,
                        // A quantization is one call into Transformer Engine's C++, which
                        // launches its kernels (per tensor and per expert split) itself.
                        Shape::Elementwise { kernels, .. } if k.name == KernelName::Fp8Cast => {
                            SimTime::from_ps(
                                costs.op.as_ps()
                                    + costs.launch.as_ps() * u64::from(kernels.saturating_sub(1)),
                            )
                        }
                        // Each of a chain's small ops is its own call from Python.
                        Shape::Elementwise { kernels, .. } => {
                            SimTime::from_ps(costs.op.as_ps() * u64::from(kernels))
                        }
                        Shape::Fixed { .. } => costs.op,
                    };
                    SimTime::from_ps(issue.as_ps() + swizzles)
                }
                OpKind::MemoryRead { .. } => SimTime::ZERO,
                OpKind::Collective { .. } | OpKind::Send { .. } | OpKind::Recv { .. } => costs.op,
            };
            // An imported trace's ops carry the times it recorded; nothing issues them.
            if in_graph(op, graphs) || op.label.module == Module::Imported {
                SimTime::ZERO
            } else {
                cost
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_table_has_every_cpu_with_a_source() {
        let table = shipped().expect("configs/hosts.toml parses");
        for cpu in HostCpu::ALL {
            let e = table
                .iter()
                .find(|e| e.cpu == cpu)
                .unwrap_or_else(|| panic!("{}", cpu.name()));
            assert!(e.source.len() > 40, "{}", cpu.name());
        }
    }

    /// An op standing for a chain of small PyTorch ops (an unfused MoE router) is one call
    /// from Python per kernel of the chain; a fused kernel is one.
    #[test]
    fn a_chain_of_small_ops_costs_one_python_call_per_kernel() {
        use crate::config::Precision;
        use crate::workload::{Kernel, KernelName, Label, Pass, Stream};
        let costs = HostCosts::of(HostCpu::Grace).unwrap();
        let mut program = Program::new(0, 1);
        for (name, kernels) in [(KernelName::RouterTopk, 47), (KernelName::Permute, 1)] {
            let kernel = program.intern(Kernel {
                name,
                pass: Pass::Forward,
                shape: Shape::Elementwise {
                    elements: 1 << 20,
                    kernels,
                },
                flops: 1 << 20,
                bytes: 1 << 22,
                dtype: Precision::Bf16,
            });
            let mut label = Label::imported();
            label.layer = 0;
            label.module = Module::Moe;
            program.push(OpKind::Compute { kernel }, Stream::Compute, label, &[]);
        }
        let issued = issue_costs(&program, &costs, CudaGraphs::None);
        assert_eq!(
            issued,
            vec![SimTime::from_ps(47 * costs.op.as_ps()), costs.op]
        );
        assert_eq!(
            costs.op,
            SimTime::from_ps(19_200_000),
            "Grace's op as configs/hosts.toml states it"
        );
    }

    /// A grouped GEMM of 32 local experts costs the module call and 31 more cuBLAS launches:
    /// on an H200 a cuBLAS GEMM per expert over 4 streams was host-bound with 16-32 small
    /// experts (`sim/tests/calibration/h200-measured/grouped-backward.csv`).
    #[test]
    fn a_grouped_gemm_costs_a_launch_per_further_expert() {
        use crate::config::Precision;
        use crate::workload::{Kernel, KernelName, Label, Pass, Stream};
        let costs = HostCosts::of(HostCpu::X86).unwrap();
        let mut program = Program::new(0, 1);
        for (layer, batch) in [(0, 32), (1, 1)] {
            let kernel = program.intern(Kernel {
                name: KernelName::ExpertUp,
                pass: Pass::Forward,
                shape: Shape::Gemm {
                    m: 128,
                    n: 4096,
                    k: 7168,
                    batch,
                    comm_sms: 0,
                    scale_swizzles: 0,
                },
                flops: 2 * 128 * 4096 * 7168 * batch,
                bytes: 0,
                dtype: Precision::Bf16,
            });
            let mut label = Label::imported();
            label.layer = layer;
            label.module = Module::Moe;
            program.push(OpKind::Compute { kernel }, Stream::Compute, label, &[]);
        }
        let issued = issue_costs(&program, &costs, CudaGraphs::None);
        let launches = SimTime::from_ps(31 * costs.launch.as_ps());
        assert_eq!(issued, vec![costs.module + launches, costs.module]);
    }

    /// NVIDIA/TransformerEngine#2053: a TE Linear forward (BF16, hidden 2048, 8,192 tokens)
    /// took 99.7 µs of CPU on GB200 and as long on the GPU: host-bound. The same GEMM on an
    /// H100 under an x86 host is GPU-bound (torch Linear: 13.5 µs CPU, 100.1 µs GPU).
    #[test]
    fn a_te_linear_is_host_bound_on_grace_and_gpu_bound_on_x86() {
        use crate::compute::ComputeModel;
        use crate::config::Precision;
        use crate::gpu::GpuDatabase;
        use crate::workload::{Kernel, KernelName, Pass};
        let gpus = GpuDatabase::embedded().expect("gpus");
        let model = ComputeModel::embedded().expect("compute model");
        let gemm = |gpu: &str| {
            let kernel = Kernel {
                name: KernelName::QkvProj,
                pass: Pass::Forward,
                shape: Shape::Gemm {
                    m: 8192,
                    n: 2048,
                    k: 2048,
                    batch: 1,
                    comm_sms: 0,
                    scale_swizzles: 0,
                },
                flops: 2 * 8192 * 2048 * 2048,
                bytes: 2 * (8192 * 2048 * 2 + 2048 * 2048),
                dtype: Precision::Bf16,
            };
            let spec = gpus.get(gpu).expect(gpu);
            model.kernel_time(&kernel, spec).duration.as_ps()
        };
        let grace = HostCosts::of(HostCpu::Grace).unwrap();
        let x86 = HostCosts::of(HostCpu::X86).unwrap();
        let (gb200, h100) = (gemm("GB200"), gemm("H100-SXM"));
        assert!(
            grace.module.as_ps() > gb200,
            "GB200: host {}, GPU {gb200} ps",
            grace.module
        );
        assert!(
            x86.module.as_ps() < h100 / 2,
            "H100: host {}, GPU {h100} ps",
            x86.module
        );
        // The measured host costs themselves, as the file states them.
        assert_eq!(grace.module, SimTime::from_ps(99_700_000));
        assert!(
            (x86.module.as_ps() as f64 / grace.module.as_ps() as f64 - 13.5 / 37.1).abs() < 0.01
        );
    }
}
