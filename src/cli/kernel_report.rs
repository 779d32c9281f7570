//! `fleetsim check --kernels`: per pipeline stage, the kernels that take the most time, what
//! bounds them, how efficiently they run and where their duration came from.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use sim::workload::{Kernel, OpKind, Workload};
use sim_ir::time::SimTime;
use sim_models::compute::{ClockSummary, ComputeModel, KernelTime, table::shape_key};
use sim_models::gpu::GpuSpec;

/// One kernel of a stage: how often it runs per iteration and its duration.
#[derive(Debug, Clone)]
pub struct KernelRow {
    pub kernel: Kernel,
    pub count: u64,
    pub time: KernelTime,
    /// What a measured table row holds for it: the kernel as `torch.mm` runs it, without
    /// the fp32 main-gradient accumulation a wgrad adds (`ComputeModel::table_time`).
    pub table_time: SimTime,
}

impl KernelRow {
    /// Its time over the iteration: every run of it.
    pub fn total(&self) -> SimTime {
        SimTime::from_ps(self.count * self.time.duration.as_ps())
    }
}

#[derive(Debug, Clone)]
pub struct StageKernels {
    pub stage: u32,
    pub class: usize,
    pub gpu: String,
    /// Every distinct kernel, longest total time first.
    pub rows: Vec<KernelRow>,
    /// Sum over all compute ops of the stage.
    pub compute: SimTime,
    /// The clocks its kernels run at.
    pub clock: ClockSummary,
}

impl StageKernels {
    /// How many distinct kernels took each path (model, measured, scaled, imported).
    pub fn sources(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for r in &self.rows {
            *by.entry(r.time.source.to_string()).or_insert(0) += 1;
        }
        by
    }
}

/// The kernels of every program of a workload, timed by `model` on each stage's GPU.
pub fn stage_kernels(
    workload: &Workload,
    model: &ComputeModel,
    stage_gpus: &[&GpuSpec],
) -> Vec<StageKernels> {
    let pp = workload.layout.pp as usize;
    workload
        .programs
        .iter()
        .enumerate()
        .map(|(i, program)| {
            let gpu = stage_gpus[program.stage as usize];
            let mut counts = vec![0u64; program.kernels.len()];
            for op in &program.ops {
                if let OpKind::Compute { kernel } = op.kind {
                    counts[kernel as usize] += 1;
                }
            }
            let mut rows: Vec<KernelRow> = program
                .kernels
                .iter()
                .zip(counts)
                .filter(|(_, c)| *c > 0)
                .map(|(k, count)| {
                    let table = model.table_time(k, gpu);
                    KernelRow {
                        kernel: *k,
                        count,
                        table_time: table.duration,
                        time: model.as_engine_runs(k, gpu, table),
                    }
                })
                .collect();
            rows.sort_by(|a, b| {
                b.total()
                    .cmp(&a.total())
                    .then_with(|| a.kernel.name.cmp(&b.kernel.name))
                    .then_with(|| a.kernel.pass.cmp(&b.kernel.pass))
            });
            let compute = SimTime::from_ps(rows.iter().map(|r| r.total().as_ps()).sum());
            StageKernels {
                stage: program.stage,
                class: i / pp,
                gpu: gpu.name.clone(),
                rows,
                compute,
                clock: model.clocks_of(gpu),
            }
        })
        .collect()
}

/// The top-`top` kernels of each stage as a table.
pub fn to_text(stages: &[StageKernels], top: usize) -> String {
    let mut s = String::new();
    for st in stages {
        let sources: Vec<String> = st
            .sources()
            .into_iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let _ = writeln!(
            s,
            "\nkernels of stage {} (class {}, {}): {:.3} ms of compute per iteration; kernel times: {}",
            st.stage,
            st.class,
            st.gpu,
            st.compute.as_ps() as f64 * 1e-9,
            sources.join(", ")
        );
        let _ = writeln!(s, "  clock: {}", st.clock.describe());
        let _ = writeln!(
            s,
            "  {:<24} {:<5} {:<5} {:>6} {:>10} {:>10} {:>6}  {:<8} {:>6}  {:<20} shape",
            "kernel",
            "pass",
            "dtype",
            "count",
            "each_us",
            "total_ms",
            "share",
            "bound",
            "eff",
            "source"
        );
        for r in st.rows.iter().take(top) {
            let share = if st.compute > SimTime::ZERO {
                100.0 * r.total().as_ps() as f64 / st.compute.as_ps() as f64
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                "  {:<24} {:<5} {:<5} {:>6} {:>10.2} {:>10.3} {:>5.1}%  {:<8} {:>5.1}%  {:<20} {}",
                r.kernel.name.name(),
                r.kernel.pass.name(),
                r.kernel.dtype.name(),
                r.count,
                r.time.duration.as_ps() as f64 * 1e-6,
                r.total().as_ps() as f64 * 1e-9,
                share,
                r.time.bound.name(),
                100.0 * r.time.efficiency,
                r.time.source.to_string(),
                shape_key(&r.kernel.shape)
            );
        }
    }
    s
}

/// `check --kernels N --json`: each stage's clocks and its `top` kernels by total time.
pub fn to_json(stages: &[StageKernels], top: usize) -> Vec<StageJson<'_>> {
    stages
        .iter()
        .map(|st| StageJson {
            stage: st.stage,
            class: st.class,
            gpu: &st.gpu,
            compute_s: st.compute.as_secs_f64(),
            clock: ClockJson {
                sustained_fraction: st.clock.sustained,
                sustained_fp8_fraction: st.clock.sustained_fp8,
                burst_fraction: st.clock.burst,
                sustained_mhz: st.clock.mhz(st.clock.sustained),
                sustained_fp8_mhz: st.clock.mhz(st.clock.sustained_fp8),
                burst_mhz: st.clock.mhz(st.clock.burst),
                power_limit_w: st.clock.power_limit_w,
                spread: st.clock.spread,
            },
            sources: st.sources(),
            top: st
                .rows
                .iter()
                .take(top)
                .map(|r| KernelJson {
                    kernel: r.kernel.name.name(),
                    pass: r.kernel.pass.name(),
                    dtype: r.kernel.dtype.name(),
                    shape: shape_key(&r.kernel.shape),
                    count: r.count,
                    time_s: r.time.seconds(),
                    total_s: r.total().as_secs_f64(),
                    bound: r.time.bound.name(),
                    efficiency: r.time.efficiency,
                    source: r.time.source.to_string(),
                })
                .collect(),
        })
        .collect()
}

/// One stage of [`to_json`].
#[derive(Debug, Serialize)]
pub struct StageJson<'a> {
    stage: u32,
    class: usize,
    gpu: &'a str,
    compute_s: f64,
    clock: ClockJson,
    /// Kernels per source of their time (model, measured, imported).
    sources: BTreeMap<String, usize>,
    top: Vec<KernelJson>,
}

/// The clocks a stage's kernels run at, as fractions of the spec clock and in MHz.
#[derive(Debug, Serialize)]
struct ClockJson {
    sustained_fraction: f64,
    sustained_fp8_fraction: f64,
    burst_fraction: f64,
    sustained_mhz: Option<f64>,
    sustained_fp8_mhz: Option<f64>,
    burst_mhz: Option<f64>,
    power_limit_w: Option<f64>,
    spread: f64,
}

/// One kernel of a stage's top list.
#[derive(Debug, Serialize)]
struct KernelJson {
    kernel: &'static str,
    pass: &'static str,
    dtype: &'static str,
    shape: String,
    count: u64,
    time_s: f64,
    total_s: f64,
    bound: &'static str,
    efficiency: f64,
    source: String,
}

/// `fleetsim workload --export kernels`: every distinct kernel of every stage, on the stage's
/// GPU, in the measured-table format with the model's times as such a table holds them (a
/// wgrad without its fp32 accumulation, which `kernel_time` adds to table rows too): the
/// template `tools/profile_kernels.py` measures, and read back unchanged it gives the same
/// times.
pub fn kernel_table(stages: &[StageKernels]) -> String {
    sim_models::compute::table::write_table(stages.iter().flat_map(|st| {
        st.rows.iter().map(move |r| {
            (
                st.gpu.as_str(),
                &r.kernel,
                r.table_time.as_ps() as f64 * 1e-6,
                r.time.source.to_string(),
            )
        })
    }))
}
