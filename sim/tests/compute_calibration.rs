//! The compute model against public measurements (`sim/tests/calibration/`, copied from
//! `../shared/calibration/` with sources, and the H100 tables of `h100-measured/`). The
//! thresholds are issues 3's and 10's acceptance criteria;
//! `cargo run --release -p sim --example fit_compute` prints every residual.

mod support;

use std::path::PathBuf;

use sim::compute::calibration::{
    Comparison, compare_flash_attention, compare_gemm, compare_table, heated, layer_seconds,
    nccl_busbw,
};
use sim::compute::{
    ComputeModel, EfficiencyTable, Interference, KernelTables, model_time, model_time_at,
};
use sim::config::{AttentionBackend, Origin, Precision};
use sim::experiment::Experiment;
use sim::gpu::GpuDatabase;
use sim::gpu::{ClockState, GpuSpec};
use sim::workload::{CollectiveOp, compile};
use sim::workload::{Kernel, Shape};

fn calibration(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/calibration")
        .join(file);
    std::fs::read_to_string(&path).expect("calibration file")
}

fn model() -> ComputeModel {
    ComputeModel::embedded().expect("embedded compute model")
}

fn table(cases: &[Comparison]) -> String {
    cases
        .iter()
        .map(|c| {
            format!(
                "{:10} {:24} measured {:8.1} predicted {:8.1} error {:+6.1}%\n",
                c.column,
                c.case,
                c.measured,
                c.predicted,
                100.0 * c.error()
            )
        })
        .collect()
}

#[test]
fn a100_gemm_throughput_within_10_percent_for_80_percent_of_shapes() {
    let m = model();
    let db = GpuDatabase::embedded().expect("GPU database");
    let cases: Vec<Comparison> = compare_gemm(&calibration("gemm_tflops.csv"), &db, &|k, g| {
        m.kernel_time(k, g).seconds()
    })
    .expect("GEMM table")
    .into_iter()
    .filter(|c| c.column == "a100_fp16")
    .collect();
    assert_eq!(cases.len(), 8);
    let good = cases.iter().filter(|c| c.error().abs() <= 0.10).count();
    assert!(good * 10 >= cases.len() * 8, "{}", table(&cases));
}

#[test]
fn a100_and_h100_flash_attention_2_within_10_percent_from_1k_tokens() {
    let db = GpuDatabase::embedded().expect("GPU database");
    // A100 runs FlashAttention-2 by default (Transformer Engine prefers it on sm80), at the
    // sustained clock; H100's FlashAttention-2 fit is its `attention_flash2`, at the burst
    // clock of the benchmark's short loops.
    let families = EfficiencyTable::embedded()
        .expect("families")
        .with_attention(AttentionBackend::Flash2, &["hopper"])
        .expect("hopper has a FlashAttention-2 fit");
    let seconds = |k: &Kernel, g: &GpuSpec| {
        let (e, fitted) = families.for_architecture(&g.architecture);
        let state = if g.architecture == "hopper" {
            ClockState::Burst
        } else {
            ClockState::Sustained
        };
        model_time_at(k, g, e, fitted, state).seconds()
    };
    let cases = compare_flash_attention(&calibration("flash_attention_tflops.csv"), &db, &seconds)
        .expect("attention table");
    assert_eq!(cases.len(), 47);
    let long: Vec<&Comparison> = cases
        .iter()
        .filter(|c| !c.case.ends_with("seq 512"))
        .collect();
    assert_eq!(long.len(), 40);
    for c in long {
        assert!(c.error().abs() <= 0.10, "{c:?}\n{}", table(&cases));
    }
}

/// The H100 tables a file of `h100-measured/` holds, every row, as comparisons with the
/// model at the clocks the steady measurement ran at (after BF16 heaters).
fn steady(file: &str) -> Vec<Comparison> {
    measured_steady("h100-measured", file)
}

/// A steady table of `tests/calibration/<dir>/` against the model at the heated clocks.
fn measured_steady(dir: &str, file: &str) -> Vec<Comparison> {
    let t = measured_tables(dir, &[file]);
    let m = model();
    compare_table(&t, &|k, g| {
        let g = heated(g);
        let (e, fitted) = m.efficiency_of(&g);
        model_time(k, &g, e, fitted).seconds()
    })
}

/// The measured kernel tables `files` of `tests/calibration/<dir>/`, as one.
fn measured_tables(dir: &str, files: &[&str]) -> KernelTables {
    let db = GpuDatabase::embedded().expect("GPU database");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/calibration")
        .join(dir);
    let paths: Vec<_> = files
        .iter()
        .map(|f| (dir.join(f), Origin::Derived("compute_calibration".into())))
        .collect();
    KernelTables::load(&paths, &|n| db.get(n).cloned()).expect("measured table")
}

/// The median of `v` (the upper one of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn within(cases: &[Comparison], column: &str, tolerance: f64) -> (usize, usize) {
    let of: Vec<&Comparison> = cases.iter().filter(|c| c.column == column).collect();
    let good = of.iter().filter(|c| c.error().abs() <= tolerance).count();
    (good, of.len())
}

/// The GEMM model against cuBLAS GEMMs measured at the IR's shapes on an H100 in steady
/// state: BF16 (`kernels-steady.csv`) and FP8 (`gemm-fp8-steady.csv`, `torch._scaled_mm`).
#[test]
fn h100_steady_gemms_within_10_percent_for_90_percent_of_ir_shapes() {
    let mut cases = steady("kernels-steady.csv");
    cases.extend(steady("gemm-fp8-steady.csv"));
    for column in ["gemm bf16", "gemm fp8"] {
        let (good, n) = within(&cases, column, 0.10);
        assert!(n >= 180, "{column}: {n} rows");
        assert!(good * 10 >= n * 9, "{column}: {good} of {n} within 10%");
    }
}

/// Attention as Megatron-Core runs it on Hopper: cuDNN fused attention, measured through
/// PyTorch SDPA's cuDNN backend at the IR's shapes and FlashAttention-2's grid.
#[test]
fn h100_cudnn_attention_within_10_percent_for_80_percent_and_20_percent_for_all() {
    let cases = steady("attention-cudnn-steady.csv");
    // 80% of each pass's 35 within 10%.
    let all = attention_within_10_and_20_percent(&cases, 28);
    assert_eq!(all, 70, "{}", table(&cases));
}

/// Asserts that each attention pass has its 35 rows, `at_least` of them within 10%; returns
/// how many of both passes are within 20%.
fn attention_within_10_and_20_percent(cases: &[Comparison], at_least: usize) -> usize {
    let mut within_20 = 0;
    for column in ["attention bf16 fwd", "attention bf16 bwd"] {
        let (good, n) = within(cases, column, 0.10);
        assert_eq!(n, 35, "{column}");
        assert!(good >= at_least, "{column}: {good} of {n} within 10%");
        within_20 += within(cases, column, 0.20).0;
    }
    within_20
}

/// Sustained clocks: compute-bound kernels run at the power-capped clock, memory-bound ones
/// do not. The model's burst-to-sustained time ratio of the IR's BF16 GEMMs is within 3% of
/// the median measured on an H100 (207 GEMMs of `kernels-{burst,steady}.csv`: 1.134);
/// elementwise kernels stay within 3% of their measured 0.985.
#[test]
fn steady_over_burst_time_follows_the_clock_for_gemms_and_not_for_memory_bound_kernels() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let h100 = db.get("H100-SXM").expect("H100");
    let m = model();
    let (e, fitted) = m.efficiency_of(h100);
    let read = |f: &str| measured_tables("h100-measured", &[f]);
    let (burst, steady) = (read("kernels-burst.csv"), read("kernels-steady.csv"));
    let measured: std::collections::BTreeMap<String, f64> = burst
        .measured()
        .map(|(_, k, s)| (format!("{k:?}"), s))
        .collect();
    let mut ratios = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (_, k, steady_s) in steady.measured() {
        let burst_s = measured[&format!("{k:?}")];
        let model = |state| model_time_at(&k, h100, e, fitted, state).seconds();
        let modelled = model(ClockState::Sustained) / model(ClockState::Burst);
        match k.shape {
            Shape::Gemm { .. } => {
                ratios.0.push(steady_s / burst_s);
                ratios.1.push(modelled);
            }
            Shape::Elementwise { .. } => {
                ratios.2.push(steady_s / burst_s);
                ratios.3.push(modelled);
            }
            _ => {}
        }
    }
    let (gemm_measured, gemm_model) = (median(ratios.0), median(ratios.1));
    assert!((gemm_measured - 1.134).abs() < 0.002, "{gemm_measured}");
    assert!(
        (gemm_model / gemm_measured - 1.0).abs() < 0.03,
        "model {gemm_model} against measured {gemm_measured}"
    );
    let (memory_measured, memory_model) = (median(ratios.2), median(ratios.3));
    assert!((memory_model / memory_measured - 1.0).abs() < 0.03);
    assert!((memory_model - 1.0).abs() < 0.01, "{memory_model}");
}

/// FP8 GEMMs hold a lower clock than BF16 under sustained load: back to back for 8 s an
/// 8192³ FP8 GEMM ran at 1,222-1,231 TFLOP/s on the H100 (`sustained-clocks.txt`), against
/// 1,337 when each call followed BF16 heaters (`gemm-fp8-steady.csv`): 8.9% slower, as the
/// clock probe's 1,275 MHz under FP8 against 1,380 under BF16 says (8.2%). The model's ratio
/// is within 3% of the measured one, and its sustained FP8 and BF16 8192³ within 8%.
#[test]
fn sustained_fp8_gemms_run_at_the_fp8_clock() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let h100 = db.get("H100-SXM").expect("H100");
    let m = model();
    let k = sim::compute::calibration::gemm_kernel(8192, 8192, 8192, Precision::Fp8);
    // As torch._scaled_mm ran them (cuBLAS's default accumulation): the table time, before
    // the fast accumulation Transformer Engine's forward GEMMs get.
    let sustained = k.flops as f64 / m.table_time(&k, h100).seconds() / 1e12;
    let after_heater = k.flops as f64 / m.table_time(&k, &heated(h100)).seconds() / 1e12;
    let measured = (1228.0, 1336.9);
    let ratio = (after_heater / sustained) / (measured.1 / measured.0);
    assert!((ratio - 1.0).abs() < 0.03, "{ratio}");
    assert!((sustained / measured.0 - 1.0).abs() < 0.08, "{sustained}");
    let bf16 = sim::compute::calibration::gemm_kernel(8192, 8192, 8192, Precision::Bf16);
    let tflops = bf16.flops as f64 / m.kernel_time(&bf16, h100).seconds() / 1e12;
    // 675-682 TFLOP/s back to back for 12 s (sustained-clocks.txt).
    assert!((tflops / 680.0 - 1.0).abs() < 0.08, "{tflops}");
}

/// Blackwell's sustained clocks from the power cap. Under a power limit a GPU's tensor power
/// grows as SMs × energy per SM-clock × clock³ (P = C·V²·f, V rising with f), so:
/// - B200's FP8 clock is the one at which its 8192³ FP8 GEMM gives the 2,377 TFLOP/s
///   Transformer Engine measured over 200 back-to-back calls on HGX B200
///   (NVIDIA/TransformerEngine#1747);
/// - its BF16 clock keeps the FP8-to-BF16 ratio measured on the H100 (1,275 / 1,380 MHz:
///   both generations run FP8 at twice the BF16 rate on one datapath, so FP8 costs the same
///   extra energy per clock);
/// - GB200 holds (1,200 W / 1,000 W × 148 / 152 SMs)^(1/3) of B200's clocks.
///
/// A published BF16 sweep on a B200 (vllm-project/vllm#19566, cuBLAS through torch,
/// triton's 100 ms `do_bench`) lies between the modelled sustained and burst rates at
/// 16384×6144×4096 (1,513 TFLOP/s); the clock fleetsim had before (1,415 MHz, stas00's best
/// shape of a sweep scaled by the H100's sustained-to-burst ratio) put sustained above it.
#[test]
fn blackwell_sustained_clocks_follow_the_power_cap_from_measured_fp8() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let clocks = |name: &str| {
        let gpu = db.get(name).expect(name);
        (gpu.clocks.clone().expect("clocks"), gpu.sms, gpu)
    };
    let (h100, _, _) = clocks("H100-SXM");
    let (b200, b200_sms, b200_gpu) = clocks("B200");
    let (gb200, gb200_sms, _) = clocks("GB200");
    let m = model();
    let tflops = |gpu: &GpuSpec, k: &Kernel, state| {
        let (e, fitted) = m.efficiency_of(gpu);
        k.flops as f64 / model_time_at(k, gpu, e, fitted, state).seconds() / 1e12
    };
    let fp8 = sim::compute::calibration::gemm_kernel(8192, 8192, 8192, Precision::Fp8);
    let sustained_fp8 = tflops(b200_gpu, &fp8, ClockState::Sustained);
    assert!(
        (sustained_fp8 / 2377.0 - 1.0).abs() < 0.02,
        "B200 FP8 8192³ sustained {sustained_fp8:.0} TFLOP/s"
    );
    let hopper_ratio = h100.sustained_mhz / h100.sustained_fp8();
    let b200_ratio = b200.sustained_mhz / b200.sustained_fp8();
    assert!(
        (b200_ratio / hopper_ratio - 1.0).abs() < 0.005,
        "B200 BF16/FP8 {b200_ratio:.4}, H100 {hopper_ratio:.4}"
    );
    // GB200 holds the fraction of its burst clock B200 holds: its higher power limit is not
    // credited, as the cube law would (1.053x), since Megatron-Bridge measured the two at
    // 0.93-1.045x per GPU on identical recipes (configs/validation/bridge_summary.csv).
    let burst_ratio = gb200.burst_mhz / b200.burst_mhz;
    let cube = (gb200.power_limit_w / b200.power_limit_w * f64::from(b200_sms)
        / f64::from(gb200_sms))
    .cbrt();
    for (gb, b) in [
        (gb200.sustained_mhz, b200.sustained_mhz),
        (gb200.sustained_fp8(), b200.sustained_fp8()),
    ] {
        assert!(
            (gb / b / burst_ratio - 1.0).abs() < 0.005,
            "GB200 {gb} MHz, B200 {b}"
        );
        let per_gpu = gb / b * f64::from(gb200_sms) / f64::from(b200_sms);
        assert!(
            per_gpu < 1.045 && gb / b < cube,
            "GB200 throughput per GPU {per_gpu:.3}x B200's, above what was measured"
        );
    }
    let bf16 = sim::compute::calibration::gemm_kernel(16384, 6144, 4096, Precision::Bf16);
    let sustained = tflops(b200_gpu, &bf16, ClockState::Sustained);
    let burst = tflops(b200_gpu, &bf16, ClockState::Burst);
    assert!(
        sustained < 1513.0 && 1513.0 < burst,
        "B200 BF16 16384×6144×4096: sustained {sustained:.0}, measured 1,513, burst {burst:.0}"
    );
}

/// A row of `layer_times_22b.csv`: one variant's measured layer times.
#[derive(Debug, serde::Deserialize)]
struct LayerTimes {
    variant: String,
    forward_ms: f64,
    backward_ms: f64,
    total_ms: f64,
}

/// Korthikanti et al. 2022 Table 4: one layer of the 22B GPT, TP 8 on A100, per variant.
#[test]
fn layer_of_22b_gpt_within_10_percent_for_every_variant() {
    let m = model();
    let nccl = calibration("nccl_allreduce_1node.csv");
    let experiment =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/calibration/korthikanti-22b.toml");
    let measured = calibration("layer_times_22b.csv");
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    let mut rows = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(measured.as_bytes());
    for row in rows.deserialize() {
        let row: LayerTimes = row.expect("a row of layer_times_22b.csv");
        let (recompute, sp) = match row.variant.as_str() {
            "no_recompute" => ("none", false),
            "sequence_parallel" => ("none", true),
            "full_recompute" => ("full", false),
            "selective_recompute" => ("selective", false),
            "selective_recompute+sequence_parallel" => ("selective", true),
            other => panic!("unknown variant {other}"),
        };
        let sets = [
            format!("training.recompute=\"{recompute}\""),
            format!("parallel.sequence_parallel={sp}"),
        ];
        let exp = Experiment::load(
            &experiment,
            &sim::config::Overrides::from_sets(&sets).expect("sets"),
        )
        .expect("22B experiment");
        let gpu = exp.stage_gpus()[0].clone();
        let workload = compile(&exp).expect("compiles");
        let tp = 8.0;
        // TP communication from nccl-tests on the same 8-GPU A100 node: all-reduce moves
        // 2(n-1)/n of the buffer, all-gather and reduce-scatter (n-1)/n, at the bus bandwidth
        // nccl-tests measured for that buffer size.
        let collective = |op: CollectiveOp, bytes: u64| {
            let b = bytes as f64;
            let factor = match op {
                CollectiveOp::AllReduce => 2.0 * (tp - 1.0) / tp,
                _ => (tp - 1.0) / tp,
            };
            b * factor / nccl_busbw(&nccl, "a100_8gpu_busbw_gbs", b).expect("busbw")
        };
        let interference = Interference::from_config(&exp.loaded.config.compute);
        let (fwd, bwd) = layer_seconds(
            &workload,
            &|k| m.kernel_time(k, &gpu).seconds(),
            &collective,
            &interference,
        )
        .expect("layer times");
        let want = [row.forward_ms, row.backward_ms, row.total_ms].map(|ms| ms * 1e-3);
        let got = [fwd, bwd, fwd + bwd];
        for ((name, g), w) in ["forward", "backward", "total"].iter().zip(got).zip(&want) {
            let e = (g - w) / w;
            report.push_str(&format!(
                "{:40} {name:8} measured {:6.2} ms predicted {:6.2} ms error {:+5.1}%\n",
                row.variant,
                w * 1e3,
                g * 1e3,
                100.0 * e
            ));
            worst = worst.max(e.abs());
        }
    }
    println!("{report}");
    assert!(
        worst <= 0.10,
        "a 22B layer time is off by more than 10%:\n{report}"
    );
}

/// A whole-model measurement of `model_step.py`: (micro-batch, GEMM class, attention class)
/// in ms, for `case` of `file` under the calibration folder.
fn measured_micro_batch(file: &str, case: &str) -> [f64; 3] {
    let text = calibration(file);
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with(&format!("case {case}:")));
    let head = lines.next().unwrap_or_else(|| panic!("{case} in {file}"));
    let number_before = |line: &str, marker: &str| -> f64 {
        let before = line.split(marker).next().expect("marker");
        before
            .split_whitespace()
            .last()
            .and_then(|x| x.parse().ok())
            .unwrap_or_else(|| panic!("a number before `{marker}` in {line}"))
    };
    let class = |name: &str| -> f64 {
        let line = lines
            .clone()
            .take_while(|l| !l.starts_with("case "))
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} of {case}"));
        number_before(line, " ms ")
    };
    [
        number_before(head, " ms per micro-batch"),
        class("gemm"),
        class("attention"),
    ]
}

/// (layers, hidden, heads, TP) of the per-GPU shard of `model_step.py`'s README `case`.
fn readme_shard(case: &str) -> (u32, u32, u32, u32) {
    match case {
        "readme-row10-tp1" => (24, 2048, 16, 1),
        "readme-row11-tp2" => (30, 4096, 32, 2),
        "readme-row13-tp8" => (48, 7168, 56, 8),
        other => panic!("no README shard for {other}"),
    }
}

/// `[model]` and `[parallel]` of a Megatron-LM README GPT's per-GPU shard, as `model_step.py`
/// runs it (4 micro-batches of 1 per data-parallel rank).
fn readme_gpt(layers: u32, hidden: u32, heads: u32, tp: u32, attention_dropout: f64) -> String {
    format!(
        "[model]\nlayers = {layers}\nhidden = {hidden}\nffn_hidden = {}\nheads = {heads}\n\
         seq_len = 4096\nvocab = 131072\nactivation = \"gelu\"\nnorm = \"layernorm\"\n\
         bias = true\ntied_embeddings = false\nposition = \"learned\"\n\
         attention_dropout = {attention_dropout}\n\
         [parallel]\ntp = {tp}\nsequence_parallel = {}\nzero = 1\nmicro_batch = 1\n\
         global_batch = {}\n",
        4 * hidden,
        tp > 1,
        4 * 8 / tp
    )
}

/// fleetsim's (micro-batch, GEMM class, attention class) in ms for the forward and backward
/// kernels of one micro-batch of `body` (`[model]` and `[parallel]`) on `gpu`, BF16. `name`
/// names the experiment file: tests running at once need names of their own.
fn predicted_micro_batch(m: &ComputeModel, gpu: &str, name: &str, body: &str) -> [f64; 3] {
    use sim::workload::{OpKind, Phase};
    let text = format!(
        "{}[cluster]\ngpus = 8\ngpu = \"{gpu}\"\n{body}\
         [training]\nprecision = \"bf16\"\nrecompute = \"none\"\nmemory_check = \"off\"\n\
         tp_comm_overlap = false\n",
        support::rail_h100_include()
    );
    let exp = support::experiment("whole-model", name, &text);
    let gpu = exp.stage_gpus()[0].clone();
    let workload = compile(&exp).expect("compiles");
    let program = workload.program(0, 0);
    let mut predicted = [0.0f64; 3];
    for o in &program.ops {
        let OpKind::Compute { kernel } = o.kind else {
            continue;
        };
        if !matches!(o.label.phase, Phase::Forward | Phase::Backward) {
            continue;
        }
        let k = &program.kernels[kernel as usize];
        let t = m.kernel_time(k, &gpu).seconds();
        predicted[0] += t;
        match k.shape {
            Shape::Gemm { .. } => predicted[1] += t,
            Shape::Attention { .. } => predicted[2] += t,
            _ => {}
        }
    }
    predicted.map(|t| t * 1e3 / f64::from(program.micro_batches))
}

/// Whole-model micro-batches measured on an H100 (`h100-measured/model-step*.txt`): the
/// per-GPU shard of the GPTs of `e2e_iterations.csv` rows 10, 11 and 13 and of Llama2-7B at
/// 16K tokens (`e2e_more.csv` row 10, in BF16), forward and backward, eager PyTorch in steady
/// state, with torch.profiler's GPU time per kernel class. At TP 1 (where the measurement has no
/// stand-ins for sequence parallelism's gathers and scatters) fleetsim's whole micro-batch must
/// be within 8%. Its GEMM and attention time must each be within 30%: during these runs the
/// SM clock sat at 1,450-1,860 MHz (`model-step*-smi.csv`), above the 1,380 MHz a GEMM heater
/// holds and fleetsim uses, so fleetsim's GEMMs are 4-19% slower than measured on the main
/// loop alone, and 7-27% with the fp32 main-gradient accumulation both sides carry (fleetsim
/// charges it since issue 17; the bar was 20% before), while eager PyTorch's unfused
/// elementwise kernels are slower than the fused ones fleetsim models.
#[test]
fn h100_and_h200_whole_model_micro_batches_within_8_percent_and_kernel_classes_within_30() {
    let m = model();
    let llama = "[model]\nlayers = 32\nhidden = 4096\nffn_hidden = 11008\nheads = 32\n\
                 seq_len = 16384\nvocab = 32000\nactivation = \"swiglu\"\nnorm = \"rmsnorm\"\n\
                 bias = false\ntied_embeddings = false\nposition = \"rope\"\n\
                 [parallel]\ntp = 2\nsequence_parallel = true\nzero = 1\nmicro_batch = 1\n\
                 global_batch = 4\n"
        .to_string();
    let (h100, h200) = ("H100-SXM", "H200-SXM");
    // (file, GPU, case, attention dropout): Megatron-LM's default 0.1 in the dropout file.
    let readme_cases = [
        (
            "h100-measured/model-step.txt",
            h100,
            "readme-row10-tp1",
            0.0,
        ),
        (
            "h100-measured/model-step-2.txt",
            h100,
            "readme-row10-tp1",
            0.0,
        ),
        (
            "h100-measured/model-step.txt",
            h100,
            "readme-row11-tp2",
            0.0,
        ),
        (
            "h100-measured/model-step.txt",
            h100,
            "readme-row13-tp8",
            0.0,
        ),
        (
            "h200-measured/model-step.txt",
            h200,
            "readme-row10-tp1",
            0.0,
        ),
        (
            "h200-measured/model-step.txt",
            h200,
            "readme-row13-tp8",
            0.0,
        ),
        (
            "h200-measured/model-step-no-dropout.txt",
            h200,
            "readme-row10-tp1",
            0.0,
        ),
        (
            "h200-measured/model-step-dropout.txt",
            h200,
            "readme-row10-tp1",
            0.1,
        ),
        (
            "h200-measured/model-step-dropout.txt",
            h200,
            "readme-row11-tp2",
            0.1,
        ),
        (
            "h200-measured/model-step-dropout.txt",
            h200,
            "readme-row13-tp8",
            0.1,
        ),
    ];
    let mut cases: Vec<(&str, &str, &str, u32, String)> = readme_cases
        .iter()
        .map(|&(file, gpu, case, dropout)| {
            let (layers, hidden, heads, tp) = readme_shard(case);
            let body = readme_gpt(layers, hidden, heads, tp, dropout);
            (file, gpu, case, tp, body)
        })
        .collect();
    cases.push((
        "h100-measured/model-step-2.txt",
        h100,
        "llama2-7b-16k-tp2-bf16",
        2,
        llama,
    ));
    let mut report = String::new();
    let (mut worst_total, mut worst_class) = (0.0f64, 0.0f64);
    for (file, gpu, case, tp, body) in cases {
        let predicted = predicted_micro_batch(&m, gpu, case, &body);
        let want = measured_micro_batch(file, case);
        for (i, what) in ["micro-batch", "GEMMs", "attention"].iter().enumerate() {
            let got = predicted[i];
            let e = got / want[i] - 1.0;
            report.push_str(&format!(
                "{file:40} {case:24} {what:12} measured {:7.2} ms predicted {got:7.2} ms error {:+5.1}%{}\n",
                want[i],
                100.0 * e,
                if i > 0 || tp == 1 { "" } else { " (includes stand-ins)" }
            ));
            if i == 0 && tp == 1 {
                worst_total = worst_total.max(e.abs());
            } else if i > 0 {
                worst_class = worst_class.max(e.abs());
            }
        }
    }
    println!("{report}");
    assert!(
        worst_total <= 0.08 && worst_class <= 0.30,
        "whole-model kernel time is off by more than 8% (TP 1 micro-batch) or 30% (GEMMs, attention):\n{report}"
    );
}

/// Attention dropout (Megatron-LM's default 0.1) costs what it cost cuDNN's fused attention in
/// whole-model micro-batches on an H200 (`h200-measured/model-step-dropout.txt` against
/// `model-step-no-dropout.txt` for row 10 and `model-step.txt` for row 13): the attention
/// class took 1.47x as long at TP 1 and at TP 8. fleetsim's ratio must be within 3%.
#[test]
fn attention_dropout_slows_cudnn_attention_as_measured() {
    let m = model();
    for (case, without_file) in [
        (
            "readme-row10-tp1",
            "h200-measured/model-step-no-dropout.txt",
        ),
        ("readme-row13-tp8", "h200-measured/model-step.txt"),
    ] {
        let (layers, hidden, heads, tp) = readme_shard(case);
        let attention = |file: &str| measured_micro_batch(file, case)[2];
        let measured = attention("h200-measured/model-step-dropout.txt") / attention(without_file);
        let predicted = |p| {
            let body = readme_gpt(layers, hidden, heads, tp, p);
            predicted_micro_batch(&m, "H200-SXM", &format!("{case}-dropout-{p}"), &body)[2]
        };
        let ratio = predicted(0.1) / predicted(0.0);
        assert!(
            (ratio / measured - 1.0).abs() <= 0.03,
            "{case}: attention with dropout / without: measured {measured:.3}, fleetsim {ratio:.3}"
        );
    }
}

/// The H200 GPU file (H100 compute, HBM3e at 4.8 TB/s, the H100's clocks) against the same
/// kernels measured on an H200 in steady state (`h200-measured/`, 2026-11-28): it meets the
/// H100 tests' thresholds (GEMMs within 10% for 90%, cuDNN attention within 10% for 75% and
/// 20% for all but one), and memory-bound kernels are within 3% at the median.
#[test]
fn h200_steady_kernels_meet_the_h100_thresholds() {
    let h200 = |f| measured_steady("h200-measured", f);
    let mut cases = h200("kernels-bf16-steady.csv");
    cases.extend(h200("gemm-fp8-steady.csv"));
    assert!(cases.iter().all(|c| c.case.starts_with("H200-SXM ")));
    for column in ["gemm bf16", "gemm fp8"] {
        let (good, n) = within(&cases, column, 0.10);
        assert!(n >= 180, "{column}: {n} rows");
        assert!(good * 10 >= n * 9, "{column}: {good} of {n} within 10%");
    }
    let memory: Vec<f64> = cases
        .iter()
        .filter(|c| c.column == "memory bf16")
        .map(Comparison::error)
        .collect();
    assert_eq!(memory.len(), 76);
    let middle = median(memory.clone());
    assert!(middle.abs() < 0.03, "{middle} of {memory:?}");
    let attention = h200("attention-cudnn-steady.csv");
    // 75% of each pass's 35 within 10%.
    let within_20 = attention_within_10_and_20_percent(&attention, 27);
    assert!(within_20 >= 69, "{}", table(&attention));
}

/// What the H200 changes, measured on both chips at the same shapes: the same GEMMs take the
/// same time (the same die at the same 700 W cap), and large memory-bound kernels take the
/// H100's time scaled by the ratio of HBM bandwidths (3.35 / 4.8 TB/s), as the GPU files say.
#[test]
fn h200_runs_gemms_at_h100_speed_and_large_memory_bound_kernels_at_its_hbm_bandwidth() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let (h100, h200) = (
        db.get("H100-SXM").expect("H100"),
        db.get("H200-SXM").expect("H200"),
    );
    let times = |dir: &str, files: &[&str]| -> std::collections::BTreeMap<String, (Kernel, f64)> {
        measured_tables(dir, files)
            .measured()
            .map(|(_, k, s)| {
                (
                    format!("{:?}", (&k.dtype, &k.name, &k.pass, &k.shape)),
                    (k, s),
                )
            })
            .collect()
    };
    let old = times(
        "h100-measured",
        &["kernels-steady.csv", "gemm-fp8-steady.csv"],
    );
    let new = times(
        "h200-measured",
        &["kernels-bf16-steady.csv", "gemm-fp8-steady.csv"],
    );
    let (mut gemms, mut large_memory) = (Vec::new(), Vec::new());
    for (key, (kernel, h200_s)) in &new {
        let Some((_, h100_s)) = old.get(key) else {
            continue;
        };
        match kernel.shape {
            Shape::Gemm { .. } => gemms.push(h200_s / h100_s),
            // 64 MB and more: far beyond what the L2 holds, bandwidth-bound on both.
            Shape::Elementwise { .. } if kernel.bytes >= 64_000_000 => {
                large_memory.push(h200_s / h100_s)
            }
            _ => {}
        }
    }
    assert!(gemms.len() >= 390 && large_memory.len() >= 30);
    let gemm = median(gemms);
    assert!((gemm - 1.0).abs() < 0.03, "H200/H100 GEMM time {gemm}");
    let memory = median(large_memory);
    let bandwidth = h100.hbm.bandwidth_tb_s / h200.hbm.bandwidth_tb_s;
    assert!(
        (memory / bandwidth - 1.0).abs() < 0.03,
        "H200/H100 memory time {memory}, HBM {bandwidth}"
    );
}

/// A BF16 core attention of `shape` (a `Shape::Attention`) in `pass`, as fleetsim times a
/// kernel: its executed work comes from the shape.
fn attention_kernel(pass: sim::workload::Pass, shape: Shape) -> Kernel {
    Kernel {
        name: sim::workload::KernelName::CoreAttention,
        pass,
        shape,
        flops: 0,
        bytes: 0,
        dtype: Precision::Bf16,
    }
}

/// The SDPA benchmark's causal attention (batch 1, 128 query and 8 KV heads, head 128, BF16)
/// over `seq` tokens.
fn sdpa_kernel(pass: sim::workload::Pass, seq: u64) -> Kernel {
    attention_kernel(
        pass,
        Shape::Attention {
            batch: 1,
            heads: 128,
            kv_heads: 8,
            seq_q: seq,
            seq_kv: seq,
            head_dim: 128,
            causal: true,
            flash: true,
            dropout: false,
        },
    )
}

/// [`sdpa_kernel`]'s milliseconds on `gpu` at the burst clock, as a benchmark loop runs it.
fn sdpa_ms(
    gpu: &GpuSpec,
    eff: &sim::compute::efficiency::ArchEfficiency,
    fitted: bool,
    pass: sim::workload::Pass,
    seq: u64,
) -> f64 {
    model_time_at(&sdpa_kernel(pass, seq), gpu, eff, fitted, ClockState::Burst).seconds() * 1e3
}

/// Rows `seq, forward_ms, backward_ms` of an SDPA benchmark file.
fn sdpa_rows(file: &str, expected: usize) -> Vec<Vec<f64>> {
    let rows: Vec<Vec<f64>> = calibration(file)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("seq"))
        .map(|l| l.split(',').map(|v| v.parse().expect("number")).collect())
        .collect();
    assert_eq!(rows.len(), expected, "{file}");
    rows
}

/// Checks a benchmark's rows from 4,096 tokens against `modelled` (ms per call for a pass
/// and a sequence) plus the smallest fixed cost per call that fits (each measured time is
/// the benchmark's PyTorch path plus the kernel): within 8% of every row. `also` checks each
/// of those rows besides.
fn sdpa_rows_follow(
    rows: &[Vec<f64>],
    fixed_range: std::ops::Range<f64>,
    modelled: impl Fn(sim::workload::Pass, u64) -> f64,
    also: impl Fn(sim::workload::Pass, u64),
) {
    for (pass, column) in [
        (sim::workload::Pass::Forward, 1),
        (sim::workload::Pass::Dgrad, 2),
    ] {
        let long: Vec<&Vec<f64>> = rows.iter().filter(|r| r[0] >= 4096.0).collect();
        // The fixed cost: the least-squares constant of measured minus modelled, relative.
        let weights: Vec<f64> = long.iter().map(|r| 1.0 / (r[column] * r[column])).collect();
        let fixed = long
            .iter()
            .zip(&weights)
            .map(|(r, w)| w * (r[column] - modelled(pass, r[0] as u64)))
            .sum::<f64>()
            / weights.iter().sum::<f64>();
        assert!(
            fixed_range.contains(&fixed),
            "{pass:?}: fixed cost {fixed} ms"
        );
        for r in &long {
            let predicted = fixed + modelled(pass, r[0] as u64);
            let error = predicted / r[column] - 1.0;
            assert!(
                error.abs() <= 0.08,
                "{pass:?} at {} tokens: measured {} ms, predicted {predicted:.3} ms",
                r[0],
                r[column]
            );
            also(pass, r[0] as u64);
        }
    }
}

/// Blackwell's fused attention against cuDNN 9.13's own B200 benchmark
/// (`b200-cudnn/sdpa-bf16-cudnn913.csv`): each measured time is a fixed cost per call of the
/// benchmark's PyTorch path plus the kernel. Fitted as such, the kernel's rate at long
/// sequences is what `configs/compute/blackwell.toml` holds; here the model (burst clock, as
/// a benchmark loop runs) plus the smallest fixed cost that fits must come within 8% of every
/// row from 4,096 tokens, and the model alone must be slower than Hopper's per-clock
/// attention would make a B200 (the exponential units and shared memory did not double).
#[test]
fn b200_cudnn_attention_follows_cudnn_913_from_4k_tokens() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let b200 = db.get("B200").expect("B200");
    let families = EfficiencyTable::embedded().expect("families");
    let (blackwell, fitted) = families.for_architecture("blackwell");
    let (hopper, _) = families.for_architecture("hopper");
    let ms = |eff, pass, seq| sdpa_ms(b200, eff, fitted, pass, seq);
    sdpa_rows_follow(
        &sdpa_rows("b200-cudnn/sdpa-bf16-cudnn913.csv", 8),
        0.0..1.0,
        |pass, seq| ms(blackwell, pass, seq),
        |pass, seq| assert!(ms(hopper, pass, seq) < ms(blackwell, pass, seq)),
    );
}

/// Blackwell's FlashAttention-2 against PyTorch SDPA's flash backend on a GB200
/// (`gb200-sdpa/sdpa-bf16-flash2.csv`, NVIDIA/cudnn-frontend's GB200 artifact): the
/// `[attention_flash2]` fit at the burst clock, plus the smallest fixed cost per call that
/// fits, within 8% of every row from 4,096 tokens; and 2.5-4.5x the time of the cuDNN fit
/// (cuDNN 9.13 on a B200), where the benchmark's newer cuDNN on the same GB200 ran
/// 3.1-3.8x faster than FlashAttention-2.
#[test]
fn gb200_flash_attention_2_follows_sdpa_flash_backend_from_4k_tokens() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let gb200 = db.get("GB200").expect("GB200");
    let families = EfficiencyTable::embedded().expect("families");
    let cudnn = families.for_architecture("blackwell").0.clone();
    let flash2 = families
        .clone()
        .with_attention(AttentionBackend::Flash2, &["blackwell"])
        .expect("a Blackwell FlashAttention-2 fit");
    let (flash2, fitted) = flash2.for_architecture("blackwell");
    assert_eq!(flash2.attention.backend, AttentionBackend::Flash2);
    let ms = |eff, pass, seq| sdpa_ms(gb200, eff, fitted, pass, seq);
    sdpa_rows_follow(
        &sdpa_rows("gb200-sdpa/sdpa-bf16-flash2.csv", 9),
        -0.1..1.0,
        |pass, seq| ms(flash2, pass, seq),
        |pass, seq| {
            let slower = ms(flash2, pass, seq) / ms(&cudnn, pass, seq);
            assert!(
                (2.5..4.5).contains(&slower),
                "{pass:?} at {seq} tokens: FlashAttention-2 {slower:.2}x cuDNN's time"
            );
        },
    );
}

/// The rows of an issue-17 table of `h200-measured/` (quoted CSV), header dropped.
fn h200_rows(file: &str) -> Vec<Vec<String>> {
    let text = calibration(&format!("h200-measured/{file}"));
    csv::Reader::from_reader(text.as_bytes())
        .records()
        .map(|r| r.expect(file).iter().map(str::to_string).collect())
        .collect()
}

/// The H200 at the clock the issue-17 measurements ran at (after warm-up, under load).
fn heated_h200() -> GpuSpec {
    let db = GpuDatabase::embedded().expect("GPU database");
    heated(db.get("H200-SXM").expect("H200"))
}

/// A BF16 GEMM of the experts' kind on an H200, as the IR emits one.
fn expert_gemm(pass: sim::workload::Pass, m: u64, n: u64, k: u64, batch: u64) -> Kernel {
    Kernel {
        name: sim::workload::KernelName::ExpertUp,
        pass,
        shape: Shape::Gemm {
            m,
            n,
            k,
            batch,
            comm_sms: 0,
            scale_swizzles: 0,
        },
        flops: 2 * m * n * k * batch,
        bytes: 2 * (m * k + k * n + m * n) * batch,
        dtype: Precision::Bf16,
    }
}

/// The grouped-GEMM model against grouped expert GEMMs (`torch._grouped_mm`, CUTLASS) measured
/// forward on an H200 (`h200-measured/grouped-gemm.csv`, issue 17), every balanced case of 4-32
/// experts and 64-8,192 tokens each: within 20%, within 15% from 512 tokens per expert, and
/// the median within 6%. Before `[gemm.grouped]` (the weights streamed at 0.69 of the
/// datasheet bandwidth, 1.1 us per expert) the cases below 512 tokens were 18-53% too fast.
#[test]
fn grouped_expert_gemms_forward_within_20_percent_at_every_token_count() {
    let gpu = heated_h200();
    let m = model();
    let (eff, fitted) = m.efficiency_of(&gpu);
    let mut errors = Vec::new();
    for r in h200_rows("grouped-gemm.csv") {
        if r[6] != "grouped" || r[0].contains("skew") {
            continue;
        }
        let n: Vec<u64> = r[1..5].iter().map(|v| v.parse().expect("number")).collect();
        let (experts, k, out, tokens) = (n[0], n[1], n[2], n[3]);
        let per_expert = tokens / experts;
        let kernel = expert_gemm(sim::workload::Pass::Forward, per_expert, out, k, experts);
        let predicted = model_time(&kernel, &gpu, eff, fitted).seconds() * 1e6;
        let measured: f64 = r[7].parse().expect("fwd_us");
        errors.push((
            predicted / measured - 1.0,
            per_expert,
            format!("{} {per_expert}", r[0]),
        ));
    }
    assert_eq!(errors.len(), 40, "balanced cases");
    for (e, per_expert, case) in &errors {
        let bound = if *per_expert >= 512 { 0.15 } else { 0.20 };
        assert!(e.abs() <= bound, "{case}: {:+.1}%", 100.0 * e);
    }
    let median_abs = median(errors.iter().map(|(e, _, _)| e.abs()).collect());
    assert!(median_abs <= 0.06, "median |error| {median_abs}");
}

/// Megatron's fused wgrad accumulation against cuBLAS wgrads into an fp32 main_grad measured
/// on an H200 (`h200-measured/wgrad-accumulate.csv`): the time it adds over the same GEMM
/// writing BF16. fleetsim charges the 6 bytes per weight element the fused epilogue adds at the
/// streaming rate, a lower bound here: PyTorch's standalone kernels paid 1.6-3.3x that (see
/// `main_grad_accumulation_seconds`).
#[test]
fn fused_wgrad_accumulation_costs_at_least_what_its_fp32_traffic_takes_and_at_most_what_an_h200_measured()
 {
    let gpu = heated_h200();
    let m = model();
    let (eff, _) = m.efficiency_of(&gpu);
    let rows = h200_rows("wgrad-accumulate.csv");
    let bf16 = |key: &[String]| -> f64 {
        rows.iter()
            .find(|r| r[..5] == *key && r[5] == "wgrad bf16 out (bmm)")
            .expect("the BF16 wgrad of the same shape")[6]
            .parse()
            .expect("us")
    };
    let mut ratios = Vec::new();
    for r in rows.iter().filter(|r| r[5].contains("main_grad")) {
        let n: Vec<u64> = r[1..5].iter().map(|v| v.parse().expect("number")).collect();
        let (experts, tokens, k, out) = (n[0], n[1], n[2], n[3]);
        let kernel = expert_gemm(sim::workload::Pass::Wgrad, k, out, tokens, experts);
        let predicted = sim::compute::main_grad_accumulation_seconds(&kernel, &gpu, eff) * 1e6;
        let measured = r[6].parse::<f64>().expect("us") - bf16(&r[..5]);
        ratios.push((predicted / measured, format!("{} {tokens} {}", r[0], r[5])));
    }
    assert_eq!(ratios.len(), 15);
    for (ratio, case) in &ratios {
        assert!(
            (0.3..=0.75).contains(ratio),
            "{case}: predicted/measured {ratio:.2}"
        );
    }
}

/// The x86 host's costs in `configs/hosts.toml` (derived from published figures) against the
/// H200 machine's own Xeon (`h200-measured/launch.csv`, `host-dispatch.csv`): a C++ kernel
/// launch and a PyTorch op recorded by autograd, each within 25%. A second machine of the
/// same kind read the ops 1.8x slower (README.md there): host costs vary between hosts far more
/// than this bar, which only says the file's numbers are those of a real x86 host.
#[test]
fn x86_host_costs_within_25_percent_of_a_measured_xeon() {
    use sim::compute::host::HostCosts;
    let x86 = HostCosts::of(sim::gpu::HostCpu::X86).expect("x86 host");
    let value = |file: &str, column: usize, what: &str| -> f64 {
        h200_rows(file)
            .into_iter()
            .find(|r| r[0].starts_with(what))
            .unwrap_or_else(|| panic!("{file}: {what}"))[column]
            .parse()
            .expect("number")
    };
    let launch = value("launch.csv", 1, "cudaLaunchKernel host time per launch");
    let op = value("host-dispatch.csv", 1, "ag + b, autograd recording");
    for (name, stated, measured) in [
        ("launch_us", x86.launch.as_secs_f64() * 1e6, launch),
        ("op_us", x86.op.as_secs_f64() * 1e6, op),
    ] {
        assert!(
            (stated / measured - 1.0).abs() <= 0.25,
            "{name}: hosts.toml {stated} us, measured {measured} us"
        );
    }
}

/// The same accumulation against cuBLASLt called as Transformer Engine calls it
/// (`h200-measured/wgrad-cublaslt.csv`: TN, 32 MiB workspace, first heuristic; BF16 and FP8
/// inputs, beta 1 into fp32 against BF16 out), pass 1. The FP8 kernels add what the 6 extra
/// bytes per weight element take at the streaming rate (0.90-1.07 on the dense shapes: this
/// holds them within 12%); the BF16 kernels hide part of it at some shapes and pay twice at
/// others (0.6-3.5), so each shape is held within 0.5-4 and the median of all within 0.8-1.25.
#[test]
fn fused_wgrad_accumulation_is_what_cublaslt_adds_under_fp8_and_at_the_median() {
    let gpu = heated_h200();
    let m = model();
    let (eff, _) = m.efficiency_of(&gpu);
    let rows: Vec<Vec<String>> = h200_rows("wgrad-cublaslt.csv")
        .into_iter()
        .filter(|r| r[0] == "1")
        .collect();
    let us = |shape: &str, inputs: &str, output: &str| -> f64 {
        rows.iter()
            .find(|r| r[1] == shape && r[5] == inputs && r[6] == output)
            .unwrap_or_else(|| panic!("{shape} {inputs} {output}"))[7]
            .parse()
            .expect("us")
    };
    let mut ratios = Vec::new();
    for r in rows.iter().filter(|r| r[6] == "fp32 accumulate (beta 1)") {
        let n: Vec<u64> = r[2..5].iter().map(|v| v.parse().expect("number")).collect();
        let kernel = expert_gemm(sim::workload::Pass::Wgrad, n[0], n[1], n[2], 1);
        let predicted = sim::compute::main_grad_accumulation_seconds(&kernel, &gpu, eff) * 1e6;
        let measured = us(&r[1], &r[5], &r[6]) - us(&r[1], &r[5], "bf16 (beta 0)");
        let ratio = predicted / measured;
        let dense_fp8 = r[5] == "fp8e4m3" && !r[1].starts_with("dsv3-expert");
        let bounds = if dense_fp8 { 0.88..=1.12 } else { 0.5..=4.0 };
        assert!(bounds.contains(&ratio), "{} {}: {ratio:.2}", r[1], r[5]);
        ratios.push(ratio);
    }
    assert_eq!(ratios.len(), 14);
    let mid = median(ratios);
    assert!(
        (0.8..=1.25).contains(&mid),
        "median predicted/measured {mid:.2}"
    );
}

/// A B200's memory-bound kernels run at what one measured, not at Hopper's fraction of the
/// datasheet: NVIDIA's CuTe DSL RMSNorm example (NVIDIA/cutlass#2917) normalises a BF16
/// 32,768 x 16,384 tensor on a B200 in 329.54 us (6,516.67 GB/s). fleetsim times the same
/// traffic within 1%, against B200's 7.7 TB/s datasheet bandwidth; at an H100 copy kernel's
/// fraction of its datasheet (0.9225) it would take 8% less.
#[test]
fn b200_memory_bound_kernels_run_at_the_rate_cutlass_rmsnorm_measured() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let b200 = db.get("B200").expect("B200");
    assert_eq!(b200.hbm.bandwidth_tb_s, 7.7, "NVIDIA's Blackwell datasheet");
    let (rows, hidden) = (32_768_u64, 16_384_u64);
    let norm = Kernel {
        name: sim::workload::KernelName::InputNorm,
        pass: sim::workload::Pass::Forward,
        shape: Shape::Elementwise {
            elements: rows * hidden,
            kernels: 1,
        },
        flops: 4 * rows * hidden,
        // x read and y written in BF16, and the weight once.
        bytes: 2 * rows * hidden * 2 + hidden * 2,
        dtype: Precision::Bf16,
    };
    let model = model();
    let predicted_us = model.kernel_time(&norm, b200).seconds() * 1e6;
    assert!(
        (predicted_us / 329.54 - 1.0).abs() < 0.01,
        "B200 RMSNorm: {predicted_us:.1} us predicted, 329.54 us measured"
    );
    let hopper_rate_us = norm.bytes as f64 / (b200.hbm.bandwidth_tb_s * 1e12 * 0.9225) * 1e6 + 4.0;
    assert!(
        hopper_rate_us < 0.93 * predicted_us,
        "{hopper_rate_us:.1} us"
    );
}

/// A sliding-window layer's fused attention as the IR emits it (`layer.rs`
/// `attention_kernel`: the band of `window + 1` keys, no causal half) against cuDNN's own
/// GB200 benchmark of GPT-OSS's 128-token window (`gb200-cudnn922/sdpa-swa128-bf16.csv`,
/// cuDNN 9.22): the backward within 10% of every row from 2,048 to 16,384 tokens, and linear
/// in the sequence as the measured times are (16K over 2K within 5% of theirs), where a
/// kernel over the whole causal triangle would grow 64-fold. Not pinned: the forward, which
/// the model puts at a quarter of the measured time (the band leaves each query tile two key
/// tiles, too few to hide its prologue and epilogue; the fit's sequence term is Hopper's), and
/// the 32K row, whose forward grows 3.2x from 16K on the same GPU.
#[test]
fn sliding_window_backward_follows_cudnn_on_gb200_and_stays_linear_in_sequence() {
    let db = GpuDatabase::embedded().expect("GPU database");
    let gb200 = db.get("GB200").expect("GB200");
    let families = EfficiencyTable::embedded().expect("families");
    let (eff, fitted) = families.for_architecture("blackwell");
    let window = 128;
    let backward_ms = |seq: u64| {
        let band = Shape::Attention {
            batch: 2,
            heads: 128,
            kv_heads: 128,
            seq_q: seq,
            seq_kv: window + 1,
            head_dim: 64,
            causal: false,
            flash: true,
            dropout: false,
        };
        let kernel = attention_kernel(sim::workload::Pass::Backward, band);
        model_time_at(&kernel, gb200, eff, fitted, ClockState::Burst).seconds() * 1e3
    };
    let rows: Vec<Vec<f64>> = sdpa_rows("gb200-cudnn922/sdpa-swa128-bf16.csv", 5)
        .into_iter()
        .filter(|r| r[0] <= 16384.0)
        .collect();
    for r in &rows {
        let predicted = backward_ms(r[0] as u64);
        let error = predicted / r[2] - 1.0;
        assert!(
            error.abs() <= 0.10,
            "backward at {} tokens: measured {} ms, predicted {predicted:.3} ms",
            r[0],
            r[2]
        );
    }
    let (first, last) = (&rows[0], &rows[rows.len() - 1]);
    let measured_growth = last[2] / first[2];
    let predicted_growth = backward_ms(last[0] as u64) / backward_ms(first[0] as u64);
    assert!(
        (predicted_growth / measured_growth - 1.0).abs() <= 0.05,
        "2K to 16K: measured {measured_growth:.2}x, predicted {predicted_growth:.2}x"
    );
}
