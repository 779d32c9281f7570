//! Blackwell's block-scaled precisions (issue 16, item 2): `training.precision = "mxfp8"`
//! (Transformer Engine `MXFP8BlockScaling`, Megatron-Core `--fp8-recipe mxfp8`) and `"nvfp4"`
//! (`NVFP4BlockScaling`, `--fp4-recipe nvfp4`), and the FP8 recipes by Megatron-Core's names
//! (`tensorwise`, `blockwise`).

mod support;

use support::{kernels, kernels_named};

use sim::compute::ComputeModel;
use sim::config::Precision;
use sim::experiment::Experiment;
use sim::layout::GroupKind;
use sim::workload::{
    CollectiveOp, Kernel, KernelName, OpKind, Pass, Program, Shape, Workload, compile,
};

/// Llama2-7B at TP 2 with SP on 8 B200s (or another GPU).
fn llama(gpu: &str, name: &str, training: &str) -> Experiment {
    support::experiment(
        "block-scaling",
        name,
        &format!(
            r#"
[cluster]
gpus = 8
gpu = "{gpu}"
gpus_per_host = 8
[model]
preset = "llama2-7b"
[parallel]
tp = 2
sequence_parallel = true
global_batch = 8
[training]
{training}
"#
        ),
    )
}

fn b200(name: &str, precision: &str) -> Experiment {
    llama("B200", name, &format!("precision = \"{precision}\""))
}

fn elements(k: &Kernel) -> u64 {
    match k.shape {
        Shape::Elementwise { elements, .. } => elements,
        _ => panic!("a cast is elementwise"),
    }
}

/// The TE GEMMs run in the block-scaled type in forward, dgrad and wgrad; Megatron's output
/// layer and router, and core attention, stay BF16.
#[test]
fn te_gemms_run_block_scaled_and_the_rest_stays_bf16() {
    for (name, precision) in [("mxfp8", Precision::Mxfp8), ("nvfp4", Precision::Nvfp4)] {
        let w = compile(&b200(name, name)).expect("compile");
        let p = w.program(0, 0);
        for gemm in [
            KernelName::QkvProj,
            KernelName::OutProj,
            KernelName::MlpUp,
            KernelName::MlpDown,
        ] {
            let ks = kernels_named(p, gemm);
            assert_eq!(ks.len(), 3, "{name} {gemm:?}: forward, dgrad, wgrad");
            assert!(ks.iter().all(|(k, _)| k.dtype == precision), "{name}");
        }
        for high in [KernelName::Logits, KernelName::CoreAttention] {
            assert!(
                kernels_named(p, high)
                    .iter()
                    .all(|(k, _)| k.dtype == Precision::Bf16),
                "{name} {high:?}"
            );
        }
    }
}

/// Every quantized GEMM operand is cast from BF16 once per use, four inputs forward and four
/// output gradients backward per layer and micro-batch, writing a rowwise and a columnwise copy
/// with their scales: MXFP8 read 2 + 2 × (1 + 1/32) bytes per element; NVFP4 an amax read 2,
/// read 2, 2 × (1/2 + 1/16), with the Hadamard transform's FLOPs. FP8 `blockwise` writes FP32
/// scales per 128 (the same bytes as MXFP8) and needs no amax reduction.
#[test]
fn casts_write_both_copies_with_their_scales() {
    for (gpu, name, training, bytes_of) in [
        (
            "B200",
            "cast-mxfp8",
            "precision = \"mxfp8\"",
            (|e| 4 * e + 2 * (e / 32)) as fn(u64) -> u64,
        ),
        ("B200", "cast-nvfp4", "precision = \"nvfp4\"", |e| {
            2 * e + 2 * e + 2 * (e / 2 + e / 16)
        }),
        (
            "H100-SXM",
            "cast-blockwise",
            "precision = \"fp8\"\nfp8_recipe = \"blockwise\"",
            |e| 4 * e + 2 * (e / 32),
        ),
    ] {
        let exp = llama(gpu, name, training);
        let micro_batches = exp.micro_batches;
        let w = compile(&exp).expect("compile");
        let p = w.program(0, 0);
        let (mut fwd, mut bwd) = (0, 0);
        for (k, n) in kernels_named(p, KernelName::Fp8Cast) {
            let e = elements(&k);
            assert_eq!(k.bytes, bytes_of(e), "{name}: {k:?}");
            let rht = if name == "cast-nvfp4" { 32 * e } else { 0 };
            assert_eq!(k.flops, 4 * e + rht, "{name}");
            match k.pass {
                Pass::Forward => fwd += n,
                _ => bwd += n,
            }
        }
        assert_eq!(fwd, 4 * 32 * micro_batches, "{name}");
        assert_eq!(bwd, 4 * 32 * micro_batches, "{name}");
        // Per-tensor amaxes: NVFP4's global scale is all-reduced over TP before each SP-gathered
        // cast, as current scaling's; block scales need none.
        let scalar_tp_reductions = |p: &Program| {
            p.ops
                .iter()
                .filter(|op| {
                    matches!(
                        op.kind,
                        OpKind::Collective {
                            op: CollectiveOp::AllReduce,
                            group: GroupKind::Tp,
                            bytes: 4,
                        }
                    )
                })
                .count()
        };
        let bf16 = compile(&llama(gpu, &format!("{name}-bf16"), "")).expect("bf16");
        let extra = scalar_tp_reductions(p) - scalar_tp_reductions(bf16.program(0, 0));
        // Before the QKV and fc1 inputs forward and the output projection's and fc2's output
        // gradients backward: four per layer and micro-batch.
        let want = if name == "cast-nvfp4" {
            4 * 32 * micro_batches
        } else {
            0
        };
        assert_eq!(extra as u64, want, "{name}");
    }
}

/// Megatron-Core's spellings are the same programs: `fp8` with `fp8_recipe = "mxfp8"` is
/// `mxfp8`, `tensorwise` is `current`.
#[test]
fn megatron_recipe_names_are_the_same_programs() {
    let shape = |w: &Workload| {
        let p = w.program(0, 0);
        (p.ops.len(), kernels(p))
    };
    let a = compile(&b200("mx-a", "mxfp8")).expect("a");
    let b = compile(&llama(
        "B200",
        "mx-b",
        "precision = \"fp8\"\nfp8_recipe = \"mxfp8\"",
    ))
    .expect("b");
    assert_eq!(shape(&a), shape(&b));
    let c = compile(&llama(
        "H100-SXM",
        "cs-a",
        "precision = \"fp8\"\nfp8_recipe = \"current\"",
    ))
    .expect("c");
    let d = compile(&llama(
        "H100-SXM",
        "cs-b",
        "precision = \"fp8\"\nfp8_recipe = \"tensorwise\"",
    ))
    .expect("d");
    assert_eq!(shape(&c), shape(&d));
}

/// A compute-bound GEMM's time follows the GPU file's rate for its type through the same
/// per-clock efficiency: MXFP8 as FP8 less what its block scales cost (the compute family's
/// `gemm.peak_fraction.mxfp8`), NVFP4 at twice FP8's rate, BF16 at half.
#[test]
fn gemm_rates_come_from_the_gpu_file() {
    let model = ComputeModel::embedded().expect("model");
    let db = sim::gpu::GpuDatabase::embedded().expect("gpus");
    let b200 = db.get("B200").expect("B200");
    let time = |dtype| {
        let k = sim::compute::calibration::gemm_kernel(8192, 8192, 8192, dtype);
        model.kernel_time(&k, b200).duration.as_secs_f64()
    };
    let (bf16, fp8, mx, nv) = (
        time(Precision::Bf16),
        time(Precision::Fp8),
        time(Precision::Mxfp8),
        time(Precision::Nvfp4),
    );
    assert!(
        (mx / fp8 - 0.87 / 0.8276).abs() < 0.005,
        "MXFP8 {mx}, FP8 {fp8}"
    );
    assert!(nv < fp8 && mx < bf16, "{nv} {fp8} {mx} {bf16}");
    // Launch cost and the per-tile overhead keep the ratio just under the peaks' 2x.
    assert!((1.6..=2.0).contains(&(fp8 / nv)), "{}", fp8 / nv);
}

/// Memory per parameter: BF16 weights with TE's cached quantized copies (rowwise and
/// columnwise with scales), and activations whose quantized GEMM inputs shrink with the format.
#[test]
fn memory_counts_quantized_copies_and_scales() {
    let bf16 = b200("mem-bf16", "bf16");
    let mx = b200("mem-mxfp8", "mxfp8");
    let nv = b200("mem-nvfp4", "nvfp4");
    assert_eq!(
        mx.memory_inputs().param_bytes().weights,
        2.0 + 2.0 * 33.0 / 32.0
    );
    assert_eq!(
        nv.memory_inputs().param_bytes().weights,
        2.0 + 2.0 * 9.0 / 16.0
    );
    let act = |e: &Experiment| e.memory[0].activations;
    assert!(act(&nv) < act(&mx) && act(&mx) < act(&bf16));
}

/// DeepSeek-V3 cut to 4 layers and 32 experts, EP 8 (4 local experts), TP 2 with SP, on 16
/// B200s in `precision`, as Transformer Engine `te` runs it, with more `[training]` keys.
fn moe_block_scaled(precision: &str, te: &str, training: &str) -> Experiment {
    let tag: String = training
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    support::experiment(
        "block-scaling",
        &format!("moe-{precision}-te{te}-{tag}"),
        &format!(
            r#"
[cluster]
gpus = 16
gpu = "B200"
gpus_per_host = 8
[model]
preset = "deepseek-v3"
layers = 4
experts = 32
[parallel]
tp = 2
ep = 8
sequence_parallel = true
global_batch = 16
[training]
memory_check = "off"
precision = "{precision}"
transformer_engine = "{te}"
{training}
"#
        ),
    )
}

/// Every GEMM of the first stage's program: (kernel, pass, members, swizzle kernels, type).
fn gemm_swizzles(precision: &str, te: &str) -> Vec<(KernelName, Pass, u64, u32, Precision)> {
    let w = compile(&moe_block_scaled(precision, te, "")).expect("compile");
    let p = w.program(0, 0);
    kernels(p)
        .iter()
        .filter_map(|(k, _)| match k.shape {
            Shape::Gemm {
                batch,
                scale_swizzles,
                ..
            } => Some((k.name, k.pass, batch, scale_swizzles, k.dtype)),
            _ => None,
        })
        .collect()
}

/// The swizzle kernels TE runs before a GEMM, as its release handles block scales (the rules
/// of the test below, written out independently of the model's code).
fn expected_swizzles(
    precision: Precision,
    te: (u32, u32),
    name: KernelName,
    pass: Pass,
    batch: u64,
) -> u32 {
    let per_operand = if te < (2, 7) { batch } else { 1 };
    let grouped = matches!(name, KernelName::ExpertUp | KernelName::ExpertDown);
    // Megatron's row-parallel linears (their output gradient gathered under SP); the others
    // here are column-parallel (their input gathered).
    let row = matches!(
        name,
        KernelName::OutProj | KernelName::MlpDown | KernelName::SharedDown
    );
    let column = !grouped && !row;
    let nvfp4_unready = precision == Precision::Nvfp4 && te < (2, 17);
    let operands = if te < (2, 12) || nvfp4_unready {
        2
    } else {
        let weight = pass != Pass::Wgrad && te < (2, 18);
        let input = column && pass != Pass::Dgrad;
        let grad = row && pass != Pass::Forward;
        u32::from(weight) + u32::from(input) + u32::from(grad)
    };
    operands * u32::try_from(per_operand).unwrap()
}

/// Block scales as each Transformer Engine release prepares them (`transformer_engine/pytorch/
/// csrc`). Before every block-scaled GEMM, each operand whose scales are not in cuBLAS's
/// layout is swizzled (`extensions/gemm.cpp` `swizzle_scaling_factors`): up to 2.11 every
/// operand, expert by expert in a grouped GEMM up to 2.6 and in one multi-tensor kernel per
/// operand from 2.7 (PR #2019); from 2.12 activations and gradients come GEMM-ready
/// (`optimize_for_gemm`) except a column-parallel input and a row-parallel output gradient
/// under SP, and from 2.18 weights too. NVFP4 swizzles every operand up to 2.16 and follows
/// the same rules after. Up to 2.6 each MXFP8 quantization zeroes its scales
/// (`quantizer.cpp` `at::zeros`), per expert split until 2.6 zeroes one bulk buffer per usage,
/// data and scales (`bulk_allocate_mxfp8_tensors`, PR #1934). Megatron's own GEMMs (output
/// layer, router) stay BF16 and swizzle nothing.
#[test]
fn block_scales_are_zeroed_and_swizzled_as_each_transformer_engine_release_does() {
    let local_experts = 4u64;
    for (precision, name) in [(Precision::Mxfp8, "mxfp8"), (Precision::Nvfp4, "nvfp4")] {
        for te in [
            (2, 5),
            (2, 6),
            (2, 7),
            (2, 11),
            (2, 12),
            (2, 14),
            (2, 17),
            (2, 18),
        ] {
            let release = format!("{}.{}", te.0, te.1);
            let gemms = gemm_swizzles(name, &release);
            assert!(
                gemms.iter().any(|g| g.2 == local_experts) && gemms.iter().any(|g| g.2 == 1),
                "{name} {release}: grouped and dense GEMMs"
            );
            for (kernel, pass, batch, swizzles, dtype) in gemms {
                let want = if dtype == precision {
                    expected_swizzles(precision, te, kernel, pass, batch)
                } else {
                    assert!(
                        matches!(kernel, KernelName::Logits | KernelName::Router),
                        "{kernel:?} runs in {dtype:?}"
                    );
                    0
                };
                assert_eq!(
                    swizzles, want,
                    "{name} TE {release} {kernel:?} {pass:?} x{batch}"
                );
            }
        }
    }

    // The chunks of a userbuffers-overlapped GEMM are one `gemm` call: the first carries its
    // swizzles, the others none.
    let w = compile(&moe_block_scaled("mxfp8", "2.9", "tp_comm_overlap = true")).expect("compile");
    let p = w.program(0, 0);
    let ops: Vec<Kernel> = support::compute_ops(p).map(|(_, k)| *k).collect();
    let mut chunked_calls = 0;
    for run in ops.chunk_by(|a, b| a.name == b.name && a.pass == b.pass) {
        let swizzles: Vec<u32> = run
            .iter()
            .filter_map(|k| match k.shape {
                Shape::Gemm { scale_swizzles, .. } => Some(scale_swizzles),
                _ => None,
            })
            .collect();
        if swizzles.len() > 1 && run[0].dtype == Precision::Mxfp8 {
            chunked_calls += 1;
            assert_eq!(swizzles[0], 2, "{:?} {:?}", run[0].name, run[0].pass);
            assert!(swizzles[1..].iter().all(|s| *s == 0), "{swizzles:?}");
        }
    }
    assert!(chunked_calls > 0, "TP overlap chunks some GEMMs");

    // The grouped fc1 input's quantization: one MXFP8 cast per expert split, and the fills
    // of its scales: (launches, elements, bytes) of the cast right before the experts' fc1.
    let fc1_cast = |te: &str| {
        let w = compile(&moe_block_scaled("mxfp8", te, "")).expect("compile");
        let ops: Vec<Kernel> = support::compute_ops(w.program(0, 0))
            .map(|(_, k)| *k)
            .collect();
        ops.windows(2)
            .find_map(|pair| {
                let [cast, fc1] = pair else { return None };
                let is_fc1 = fc1.name == KernelName::ExpertUp && fc1.pass == Pass::Forward;
                match cast.shape {
                    Shape::Elementwise { kernels, elements }
                        if cast.name == KernelName::Fp8Cast && is_fc1 =>
                    {
                        Some((kernels, elements, cast.bytes))
                    }
                    _ => None,
                }
            })
            .expect("a cast before the experts' fc1")
    };
    let [te25, te26, te27] = ["2.5", "2.6", "2.7"].map(fc1_cast);
    let splits = u32::try_from(local_experts).unwrap();
    assert_eq!(te25.0, splits + 2 * splits, "zeros per split before 2.6");
    assert_eq!(te26.0, splits + 2, "one zeroed buffer per usage in 2.6");
    assert_eq!(te27.0, splits, "no zeros from 2.7");
    // 2.6 zeroes its bulk buffers whole (data and scales, both usages); 2.5 each split's
    // scales only.
    let elements = te27.1;
    assert_eq!(te26.2 - te27.2, 2 * (elements + elements / 32));
    assert_eq!(te25.2 - te27.2, 2 * (elements / 32));
}

/// What the swizzles cost: a launch each on the GPU beside their share of the scales'
/// bytes; the GEMM itself is unchanged.
#[test]
fn a_swizzled_gemm_takes_its_swizzle_launches_longer() {
    let model = ComputeModel::embedded().expect("compute model");
    let db = sim::gpu::GpuDatabase::embedded().expect("GPU database");
    let b200 = db.get("B200").expect("B200");
    let (eff, _) = model.efficiency_of(b200);
    let gemm = |scale_swizzles| Kernel {
        name: KernelName::ExpertUp,
        pass: Pass::Forward,
        shape: Shape::Gemm {
            m: 4096,
            n: 4096,
            k: 7168,
            batch: 8,
            comm_sms: 0,
            scale_swizzles,
        },
        flops: 2 * 4096 * 4096 * 7168 * 8,
        bytes: 8 * (4096 * 7168 + 7168 * 4096 + 4096 * 4096 * 2),
        dtype: Precision::Mxfp8,
    };
    let plain = model.kernel_time(&gemm(0), b200).seconds();
    let swizzled = model.kernel_time(&gemm(16), b200).seconds();
    let launches = 16.0 * eff.launch_us * 1e-6;
    assert!(swizzled - plain >= launches, "{plain} {swizzled}");
    assert!(swizzled - plain < launches * 1.5, "{plain} {swizzled}");
}
