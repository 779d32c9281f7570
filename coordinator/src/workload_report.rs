//! `fleetsim workload`: the compiled workload per stage, as text for people and JSON for
//! scripts.

use std::fmt::Write as _;

use serde_json::{Value, json};
use sim::compute::ComputeModel;
use sim::gpu::GpuSpec;
use sim::workload::evaluate::{PipelineTiming, evaluate};
use sim::workload::schedule::bubble_fraction;
use sim::workload::summary::{StageSummary, summarize, total_hardware_flops, total_model_flops};
use sim::workload::{OpKind, Workload};

/// Everything `fleetsim workload` reports.
#[derive(Debug)]
pub struct WorkloadReport {
    pub name: String,
    pub workload: Workload,
    pub stages: Vec<StageSummary>,
    /// The schedule timed with the compute model's kernels and free communication (class 0).
    pub timing: Result<PipelineTiming, String>,
    pub compile_s: f64,
}

impl WorkloadReport {
    /// Summarises `workload`; `stage_gpus` holds the GPU that times each stage's kernels.
    pub fn new(
        name: &str,
        workload: Workload,
        stage_gpus: &[&GpuSpec],
        model: &ComputeModel,
        compile_s: f64,
    ) -> Self {
        let stages = summarize(&workload);
        // Kernel times per program of class 0, looked up by interned kernel index.
        let times: Vec<Vec<u64>> = (0..workload.layout.pp)
            .map(|s| model.program_times(workload.program(0, s), stage_gpus[s as usize]))
            .collect();
        let timing = evaluate(&workload, 0, &|p, op| match op.kind {
            OpKind::Compute { kernel } => times[p.stage as usize][kernel as usize],
            _ => 0,
        })
        .map_err(|e| e.to_string());
        WorkloadReport {
            name: name.to_string(),
            workload,
            stages,
            timing,
            compile_s,
        }
    }

    fn analytical_bubble(&self) -> f64 {
        let l = &self.workload.layout;
        let m = self.workload.program(0, 0).micro_batches;
        bubble_fraction(l.pp, l.vp, m)
    }

    pub fn to_json(&self) -> Value {
        let w = &self.workload;
        let stages: Vec<Value> = self
            .stages
            .iter()
            .map(|s| {
                let collectives: Vec<Value> = s
                    .collectives
                    .iter()
                    .map(|((op, group), t)| {
                        json!({
                            "op": op.name(),
                            "group": group.name(),
                            "count": t.count,
                            "bytes": t.bytes,
                            "wire_bytes": t.wire_bytes,
                        })
                    })
                    .collect();
                json!({
                    "stage": s.stage,
                    "class": s.class,
                    "ranks": s.ranks,
                    "micro_batches": s.micro_batches,
                    "layers": w.stage_layers.get(s.stage as usize),
                    "ops": {
                        "total": s.ops,
                        "compute": s.compute_ops,
                        "collective": s.collective_ops,
                        "p2p": s.p2p_ops,
                        "distinct_kernels": s.distinct_kernels,
                    },
                    "flops_per_rank": {
                        "model": s.model_flops,
                        "recompute": s.recompute_flops,
                        "other": s.other_flops,
                    },
                    "collectives": collectives,
                    "send_bytes": s.send_bytes,
                    "recv_bytes": s.recv_bytes,
                    "cxl_bytes": s.memory_bytes,
                })
            })
            .collect();
        let evaluated = match &self.timing {
            Ok(t) => json!({
                "bubble_fraction": t.bubble_fraction(),
                "iteration_s": t.iteration_ps as f64 * 1e-12,
            }),
            Err(e) => json!({ "error": e }),
        };
        json!({
            "name": self.name,
            "source": w.source,
            "parallel": {
                "tp": w.layout.tp, "cp": w.layout.cp, "ep": w.layout.ep,
                "dp": w.layout.dp, "pp": w.layout.pp, "vp": w.layout.vp,
            },
            "programs": w.programs.len(),
            "program_bytes": w.heap_bytes(),
            "compile_s": self.compile_s,
            "tokens_per_iteration": w.tokens,
            "model_flops_per_iteration": total_model_flops(&self.stages),
            "hardware_flops_per_iteration": total_hardware_flops(&self.stages),
            "bubble_fraction": {
                "analytical": self.analytical_bubble(),
                "roofline_no_communication": evaluated,
            },
            "stages": stages,
        })
    }

    pub fn to_text(&self) -> String {
        let w = &self.workload;
        let l = &w.layout;
        let mut s = String::new();
        let schedule = if l.vp > 1 {
            format!("interleaved 1F1B, {} chunks per stage", l.vp)
        } else {
            "1F1B".to_string()
        };
        let _ = writeln!(s, "workload    {} ({})", self.name, w.source);
        let _ = writeln!(s, "parallel    {l}, {schedule}");
        let _ = writeln!(
            s,
            "programs    {} ({} replica class(es) x {} stages), {:.2} MB, compiled in {:.3} s",
            w.programs.len(),
            w.classes(),
            l.pp,
            w.heap_bytes() as f64 / 1e6,
            self.compile_s
        );
        let _ = writeln!(
            s,
            "iteration   {} tokens; model {:.4e} FLOP (Megatron-LM accounting), hardware {:.4e} FLOP",
            w.tokens,
            total_model_flops(&self.stages),
            total_hardware_flops(&self.stages)
        );
        let evaluated = match &self.timing {
            Ok(t) => format!(
                "{:.4} (roofline kernels, free communication: {:.3} s per iteration)",
                t.bubble_fraction(),
                t.iteration_ps as f64 * 1e-12
            ),
            Err(e) => format!("not evaluated: {e}"),
        };
        let _ = writeln!(
            s,
            "bubble      (p-1)/(m*v) = {:.4}; schedule {evaluated}",
            self.analytical_bubble()
        );
        for st in &self.stages {
            let _ = writeln!(
                s,
                "\nstage {} (class {}, {} ranks, {} micro-batches, {} layers)",
                st.stage,
                st.class,
                st.ranks,
                st.micro_batches,
                w.stage_layers.get(st.stage as usize).copied().unwrap_or(0)
            );
            let _ = writeln!(
                s,
                "  ops       {} = {} compute + {} collective + {} send/recv; {} distinct kernels",
                st.ops, st.compute_ops, st.collective_ops, st.p2p_ops, st.distinct_kernels
            );
            let _ = writeln!(
                s,
                "  FLOP/rank model {:.4e}, recompute {:.4e}, memory-bound {:.4e}",
                st.model_flops, st.recompute_flops, st.other_flops
            );
            let _ = writeln!(
                s,
                "  {:<15} {:<10} {:>7} {:>14} {:>14}",
                "collective", "group", "count", "bytes", "wire bytes"
            );
            for ((op, group), t) in &st.collectives {
                let _ = writeln!(
                    s,
                    "  {:<15} {:<10} {:>7} {:>14} {:>14.0}",
                    op.name(),
                    group.name(),
                    t.count,
                    t.bytes,
                    t.wire_bytes
                );
            }
            let _ = writeln!(
                s,
                "  {:<15} {:<10} {:>7} {:>14} {:>14}",
                "send", "pp/cp", "", st.send_bytes, st.send_bytes
            );
        }
        s
    }
}
