//! Predictions against the public measurements of `../shared/calibration/` (copied, with
//! sources, to `sim/tests/calibration/`): the compute-model tests and the fitting example
//! both go through here, so what is fitted is what is tested. Behind the `calibration`
//! feature: it uses the model, and nothing in the simulation uses it.

use serde::Deserialize;

use crate::config::Precision;
use crate::gpu::{GpuDatabase, GpuSpec};
use crate::time::SimTime;
use crate::workload::{Kernel, KernelName, Pass, Shape};

/// One measured case and the model's prediction of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// GPU column of the measurement (e.g. `h100_fp8`).
    pub column: String,
    /// The case, e.g. `4096x4096x4096` or `hd128 causal seq 2k`.
    pub case: String,
    pub measured: f64,
    pub predicted: f64,
    /// The measured duration, where the case is one kernel's time (else 0).
    pub measured_seconds: f64,
}

impl Comparison {
    /// Signed relative error of the prediction.
    pub fn error(&self) -> f64 {
        (self.predicted - self.measured) / self.measured
    }
}

/// Why a calibration table cannot be compared with the model.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error(transparent)]
    Csv(#[from] csv::Error),
    #[error("empty {0} table")]
    Empty(&'static str),
    #[error("`{0}` is not a number")]
    NotANumber(String),
    #[error("unknown GEMM column `{0}`")]
    UnknownGemmColumn(String),
    #[error("unknown GPU `{0}`")]
    UnknownGpu(String),
    #[error("GPU {0} missing")]
    MissingGpu(String),
    #[error("bad seq")]
    BadSequenceLength,
    #[error("no column {0}")]
    NoColumn(String),
    #[error("the workload has no transformer layer")]
    NoTransformerLayer,
    #[error(transparent)]
    Deadlock(#[from] crate::workload::evaluate::Deadlock),
}

/// A reader of a calibration table: a header, `#` comment lines, spaces around fields.
fn reader(csv: &str) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(csv.as_bytes())
}

/// The header of `rows`; `what` names the table when it has none.
fn header_of(
    rows: &mut csv::Reader<&[u8]>,
    what: &'static str,
) -> Result<csv::StringRecord, CalibrationError> {
    let header = rows.headers()?.clone();
    if header.is_empty() {
        return Err(CalibrationError::Empty(what));
    }
    Ok(header)
}

/// The fixed columns of `gemm_tflops.csv`; one TFLOP/s column per GPU follows.
#[derive(Debug, Deserialize)]
struct GemmShape {
    m: u64,
    n: u64,
    k: u64,
}

/// The fixed columns of `flash_attention_tflops.csv`; one TFLOP/s column per sequence
/// length follows.
#[derive(Debug, Deserialize)]
struct AttentionCase {
    gpu: String,
    head_dim: u64,
    causal: bool,
}

fn number(field: &str) -> Result<f64, CalibrationError> {
    field
        .parse()
        .map_err(|_| CalibrationError::NotANumber(field.into()))
}

/// A GPU column of `gemm_tflops.csv`: the GPU and data type it measured.
fn gemm_column(name: &str) -> Result<(&'static str, Precision), CalibrationError> {
    Ok(match name {
        "a100_fp16_tflops" => ("A100-SXM-80GB", Precision::Fp16),
        "h100_fp8_tflops" => ("H100-SXM", Precision::Fp8),
        "h200_fp8_tflops" => ("H200-SXM", Precision::Fp8),
        other => return Err(CalibrationError::UnknownGemmColumn(other.into())),
    })
}

fn gpu<'a>(db: &'a GpuDatabase, name: &str) -> Result<&'a GpuSpec, CalibrationError> {
    db.get(name)
        .ok_or_else(|| CalibrationError::MissingGpu(name.into()))
}

/// A standalone GEMM kernel as a benchmark runs it, with the IR's operand and output sizes.
pub fn gemm_kernel(m: u64, n: u64, k: u64, dtype: Precision) -> Kernel {
    let e = dtype.gemm_operand_bytes();
    Kernel {
        name: KernelName::MlpUp,
        pass: Pass::Forward,
        shape: Shape::Gemm {
            m,
            n,
            k,
            batch: 1,
            comm_sms: 0,
            scale_swizzles: 0,
        },
        flops: 2 * m * n * k,
        bytes: (m * k + k * n) * e + m * n * dtype.activation_bytes(),
        dtype,
    }
}

/// `gemm_tflops.csv`: achieved TFLOP/s per shape and GPU column.
pub fn compare_gemm(
    csv: &str,
    db: &GpuDatabase,
    seconds: &dyn Fn(&Kernel, &GpuSpec) -> f64,
) -> Result<Vec<Comparison>, CalibrationError> {
    let mut rows = reader(csv);
    let header = header_of(&mut rows, "GEMM")?;
    let mut out = Vec::new();
    for record in rows.records() {
        let record = record?;
        let GemmShape { m, n, k } = record.deserialize(Some(&header))?;
        for (col, value) in header.iter().zip(&record).skip(3) {
            if value.is_empty() {
                continue;
            }
            let (name, dtype) = gemm_column(col)?;
            let g = gpu(db, name)?;
            let kernel = gemm_kernel(m, n, k, dtype);
            out.push(Comparison {
                column: col.trim_end_matches("_tflops").to_string(),
                case: format!("{m}x{n}x{k}"),
                measured: number(value)?,
                predicted: kernel.flops as f64 / seconds(&kernel, g) / 1e12,
                measured_seconds: 0.0,
            });
        }
    }
    Ok(out)
}

/// The forward and backward kernels of FlashAttention-2's benchmark: hidden 2048, batch
/// `16k / seq`, BF16 (`benchmarks/benchmark_flash_attention.py`).
pub fn flash_benchmark_kernels(seq: u64, head_dim: u64, causal: bool) -> [Kernel; 2] {
    let heads = 2048 / head_dim;
    let batch = 16384 / seq;
    let fwd_flops = 4 * batch * seq * seq * heads * head_dim;
    let io = batch * seq * 4 * heads * head_dim * 2;
    let shape = Shape::Attention {
        batch,
        heads,
        kv_heads: heads,
        seq_q: seq,
        seq_kv: seq,
        head_dim,
        causal,
        flash: true,
        dropout: false,
    };
    let kernel = |pass, flops, bytes| Kernel {
        name: KernelName::CoreAttention,
        pass,
        shape,
        flops,
        bytes,
        dtype: Precision::Bf16,
    };
    [
        kernel(Pass::Forward, fwd_flops, io),
        kernel(Pass::Backward, 2 * fwd_flops, 2 * io),
    ]
}

/// `flash_attention_tflops.csv`: forward+backward TFLOP/s as the benchmark counts them
/// (causal halves the work, backward is 2.5× forward): exactly [`super::executed_flops`].
pub fn compare_flash_attention(
    csv: &str,
    db: &GpuDatabase,
    seconds: &dyn Fn(&Kernel, &GpuSpec) -> f64,
) -> Result<Vec<Comparison>, CalibrationError> {
    let mut rows = reader(csv);
    let header = header_of(&mut rows, "attention")?;
    let mut out = Vec::new();
    for record in rows.records() {
        let record = record?;
        let AttentionCase {
            gpu: gpu_column,
            head_dim,
            causal,
        } = record.deserialize(Some(&header))?;
        let name = match gpu_column.as_str() {
            "A100" => "A100-SXM-80GB",
            "H100" => "H100-SXM",
            other => return Err(CalibrationError::UnknownGpu(other.into())),
        };
        let g = gpu(db, name)?;
        for (col, value) in header.iter().zip(&record).skip(3) {
            if value.is_empty() {
                continue;
            }
            let label = col.trim_start_matches("seq_");
            let seq = match label.strip_suffix('k') {
                Some(kilo) => kilo.parse::<u64>().ok().map(|k| k * 1024),
                None => label.parse::<u64>().ok(),
            }
            .ok_or(CalibrationError::BadSequenceLength)?;
            let kernels = flash_benchmark_kernels(seq, head_dim, causal);
            let flops: f64 = kernels.iter().map(super::executed_flops).sum();
            let time: f64 = kernels.iter().map(|k| seconds(k, g)).sum();
            out.push(Comparison {
                column: gpu_column.clone(),
                case: format!(
                    "hd{head_dim} {} seq {label}",
                    if causal { "causal" } else { "full" }
                ),
                measured: number(value)?,
                predicted: flops / time / 1e12,
                measured_seconds: 0.0,
            });
        }
    }
    Ok(out)
}

/// `gpu` as `tools/profile_kernels.py --clock steady` measured it: after BF16 GEMM heaters,
/// so every kernel, FP8 ones too, ran at the 16-bit sustained clock.
pub fn heated(gpu: &GpuSpec) -> GpuSpec {
    let mut g = gpu.clone();
    if let Some(c) = &mut g.clocks {
        c.sustained_fp8_mhz = Some(c.sustained_mhz);
    }
    g
}

/// A measured kernel table (`sim/tests/calibration/h100-measured/*.csv`) against the model:
/// per row, achieved speed measured and predicted, FLOP/s of executed work for GEMMs and
/// attention, bytes/s for the rest (so a positive error means the model is too fast). The
/// column names the kind and data type, e.g. `gemm fp8`, `attention bf16 bwd`.
pub fn compare_table(
    tables: &super::KernelTables,
    seconds: &dyn Fn(&Kernel, &GpuSpec) -> f64,
) -> Vec<Comparison> {
    tables
        .measured()
        .map(|(gpu, kernel, measured_s)| {
            let (kind, work) = match kernel.shape {
                Shape::Gemm { .. } => ("gemm", super::executed_flops(&kernel)),
                Shape::Attention { .. } => ("attention", super::executed_flops(&kernel)),
                _ => ("memory", kernel.bytes as f64),
            };
            let pass = if kind == "attention" {
                format!(" {}", kernel.pass.name())
            } else {
                String::new()
            };
            Comparison {
                column: format!("{kind} {}{pass}", kernel.dtype.name()),
                case: format!(
                    "{} {} {} {}",
                    gpu.name,
                    kernel.name.name(),
                    kernel.pass.name(),
                    super::table::shape_key(&kernel.shape)
                ),
                measured: work / measured_s,
                predicted: work / seconds(&kernel, gpu),
                measured_seconds: measured_s,
            }
        })
        .collect()
}

/// Bus bandwidth (bytes/s) of a one-node all-reduce of `bytes`, interpolated log-log in
/// `nccl_allreduce_1node.csv`'s column `column`.
pub fn nccl_busbw(csv: &str, column: &str, bytes: f64) -> Result<f64, CalibrationError> {
    let mut rows = reader(csv);
    let header = header_of(&mut rows, "NCCL")?;
    let c = header
        .iter()
        .position(|h| h == column)
        .ok_or_else(|| CalibrationError::NoColumn(column.into()))?;
    let points: Vec<(f64, f64)> = rows
        .records()
        .map(|record| {
            let record = record?;
            Ok((number(&record[0])?, number(&record[c])? * 1e9))
        })
        .collect::<Result<_, CalibrationError>>()?;
    let (first, last) = (points[0], points[points.len() - 1]);
    if bytes <= first.0 {
        return Ok(first.1);
    }
    if bytes >= last.0 {
        return Ok(last.1);
    }
    let i = points.iter().position(|p| p.0 >= bytes).unwrap_or(1).max(1);
    let (a, b) = (points[i - 1], points[i]);
    let t = (bytes.ln() - a.0.ln()) / (b.0.ln() - a.0.ln());
    Ok((a.1.ln() + t * (b.1.ln() - a.1.ln())).exp())
}

/// Forward and backward time (s) of one transformer layer of `workload`'s first stage
/// (its second layer, micro-batch 0), as the evaluator's critical path over that layer's ops
/// alone: compute kernels from `kernel_seconds`, collectives from `collective_seconds`, and
/// compute–communication `interference` where they overlap.
pub fn layer_seconds(
    workload: &crate::workload::Workload,
    kernel_seconds: &dyn Fn(&Kernel) -> f64,
    collective_seconds: &dyn Fn(crate::workload::CollectiveOp, u64) -> f64,
    interference: &super::Interference,
) -> Result<(f64, f64), CalibrationError> {
    use crate::workload::{OpKind, Phase, evaluate::evaluate_with_interference};
    let program = workload.program(0, 0);
    let layer = program
        .ops
        .iter()
        .map(|o| o.label.layer)
        .filter(|&l| l != crate::workload::NO_LAYER)
        .min()
        .ok_or(CalibrationError::NoTransformerLayer)?
        + 1;
    let time = |phases: &[Phase]| -> Result<f64, CalibrationError> {
        let cost = |p: &crate::workload::Program, o: &crate::workload::Op| -> SimTime {
            if o.label.layer != layer
                || o.label.micro_batch != 0
                || !phases.contains(&o.label.phase)
            {
                return SimTime::ZERO;
            }
            let s = match o.kind {
                OpKind::Compute { kernel } => kernel_seconds(&p.kernels[kernel as usize]),
                OpKind::Collective { op, bytes, .. } => collective_seconds(op, bytes),
                _ => 0.0,
            };
            SimTime::from_secs_f64(s)
        };
        let timing = evaluate_with_interference(workload, 0, &cost, interference)?;
        Ok(timing.iteration.as_secs_f64())
    };
    Ok((
        time(&[Phase::Forward])?,
        time(&[Phase::Backward, Phase::Recompute])?,
    ))
}
