//! Heterogeneous clusters (issue 9): the planner's splits, its plans running exactly alike on
//! any partition, and the live-memory replay against the static estimate.

mod support;

use sim::planner::{self, Placement};
use support::*;

/// A cluster of `fast` hosts of H100 followed by `slow` hosts of `slow_gpu`, Llama 2 7B.
fn mixed(fast: u32, slow: u32, slow_gpu: &str, parallel: &str) -> String {
    format!(
        r#"
name = "hetero-test"
[cluster]
gpus = {gpus}
gpus_per_host = 8
topology = "rail-optimized"
nics_per_host = 8
nic_gbps = 400
[[cluster.gpu_mix]]
gpu = "H100-SXM"
hosts = {fast}
[[cluster.gpu_mix]]
gpu = "{slow_gpu}"
hosts = {slow}
[model]
preset = "llama2-7b"
[parallel]
{parallel}
[network]
model = "analytical"
"#,
        gpus = 8 * (fast + slow)
    )
}

fn stage_gpu_names(exp: &sim::experiment::Experiment) -> Vec<String> {
    exp.stage_gpus().iter().map(|g| g.name.clone()).collect()
}

#[test]
fn fast_stages_get_more_layers_and_the_split_adds_up() {
    let exp = experiment(&mixed(
        2,
        2,
        "A100-SXM-80GB",
        "tp = 8\npp = 4\nglobal_batch = 16",
    ));
    assert_eq!(
        stage_gpu_names(&exp),
        ["H100-SXM", "H100-SXM", "A100-SXM-80GB", "A100-SXM-80GB"]
    );
    let compute = exp.compute_model().expect("compute");
    let layers = planner::balance_layers(&exp, &compute).expect("a split fits");
    assert_eq!(layers.iter().sum::<u32>(), 32);
    // H100 runs these kernels about 2-3x faster than A100: its stages carry more layers.
    assert!(layers[1] > layers[2], "{layers:?}");
    assert!(layers[1] >= 2 * layers[3], "{layers:?}");
}

#[test]
fn a_stage_with_little_memory_gets_no_more_layers_than_fit() {
    // V100 (32 GB) stages in fp16: without the memory cap the time balance alone would put
    // more layers there than its HBM holds at TP 1.
    let exp = experiment(
        &(mixed(
            1,
            1,
            "V100",
            "tp = 1\npp = 16\nglobal_batch = 64\nmicro_batch = 4",
        ) + "[training]\nprecision = \"fp16\"\nmemory_check = \"off\"\n"),
    );
    let compute = exp.compute_model().expect("compute");
    // Early stages hold up to 16 micro-batches of activations: memory, not speed, decides.
    let layers = planner::balance_layers(&exp, &compute).expect("a split within HBM");
    assert_eq!(layers.iter().sum::<u32>(), 32);
    let inputs = exp.memory_inputs();
    for (s, &n) in layers.iter().enumerate() {
        let model = exp.model.as_ref().expect("a model");
        let chunks = sim_models::memory::split_chunks(exp.layout.vp, &[u64::from(n); 16], 0);
        let m = sim_models::memory::stage_memory(model, &exp.layout, &chunks, &inputs, s as u32);
        assert!(
            m.total() <= exp.stage_hbm[s],
            "stage {s}: {n} layers need {:.1} GB of {:.1} GB ({layers:?})",
            m.total() / 1e9,
            exp.stage_hbm[s] / 1e9
        );
    }
}

#[test]
fn fast_replicas_get_more_micro_batches_and_the_batch_is_kept() {
    let exp = experiment(&mixed(
        2,
        2,
        "A100-SXM-80GB",
        "tp = 8\npp = 1\nglobal_batch = 64\norder = \"tp-cp-ep-pp-dp\"",
    ));
    let compute = exp.compute_model().expect("compute");
    let m = planner::balance_micro_batches(&exp, &compute).expect("split");
    assert_eq!(m.len(), 4);
    assert_eq!(m.iter().sum::<u32>(), 64, "{m:?}");
    assert!(m[0] > m[3] && m[0] == m[1] && m[2] == m[3], "{m:?}");
}

#[test]
fn tensor_parallel_groups_spanning_device_types_are_detected() {
    let exp = experiment(
        &(mixed(1, 1, "A100-SXM-80GB", "tp = 16\npp = 1") + "[cluster.latency_ns]\nnvlink = 200\n")
            .replace("nic_gbps = 400", "nic_gbps = 400\nnvlink_domain = 16"),
    );
    assert!(planner::tp_spans_types(&exp));
    let exp = experiment(&mixed(1, 1, "A100-SXM-80GB", "tp = 8\npp = 1"));
    assert!(!planner::tp_spans_types(&exp));
}

#[test]
fn a_planned_workload_gives_the_same_digest_on_any_partition() {
    let toml = mixed(
        1,
        1,
        "A100-SXM-80GB",
        "tp = 4\npp = 2\nmicro_batch = 1\nglobal_batch = 8\nstage_layers = [20, 12]\nreplica_micro_batches = [3, 5]",
    )
    .replace("model = \"analytical\"", "model = \"packet\"");
    let exp = experiment(&toml);
    let (_, one) = run(model(&exp));
    let digest = one.digest();
    for (strategy, workers, threads) in [("random", 2, 1), ("metis", 3, 2), ("by-rail", 2, 2)] {
        let m = model(&exp);
        let load = partitioner::Load::estimate(&m.topology, &m.workload, &m.net.segmenting());
        let parts = partitioner::partition(&m.topology, strategy, 5, &load, 7)
            .expect("partition")
            .partition_of;
        let (_, r) = run_with(m, parts, workers, threads);
        assert_eq!(
            r.digest(),
            digest,
            "{strategy}: {workers} workers x {threads} threads"
        );
    }
}

#[test]
fn the_replayed_peak_matches_the_static_estimate_plus_nccl_buffers() {
    let exp = experiment(&mixed(
        1,
        1,
        "A100-SXM-80GB",
        "tp = 2\npp = 4\nglobal_batch = 16\nsequence_parallel = true",
    ));
    let (model, results) = run(model(&exp));
    assert_eq!(results.gpus().count(), 16);
    for g in results.gpus() {
        let program = model.workload.program_of_rank(g.rank);
        let estimate = exp.memory[g.stage as usize];
        let state = estimate.weights + estimate.gradients + estimate.optimizer;
        let buffers = program.resident_bytes as f64 - state;
        assert!(buffers > 0.0, "NCCL buffers are resident");
        let replayed_activations = g.peak_memory_bytes as f64 - program.resident_bytes as f64;
        let error = (replayed_activations - estimate.activations).abs() / estimate.activations;
        assert!(
            error < 0.02,
            "rank {} stage {}: replayed activations {:.3} GB vs estimate {:.3} GB",
            g.rank,
            g.stage,
            replayed_activations / 1e9,
            estimate.activations / 1e9
        );
    }
}

#[test]
fn the_search_keeps_the_naive_plan_and_finds_a_faster_hetero_one() {
    let exp = experiment(&mixed(
        1,
        1,
        "A100-SXM-80GB",
        "tp = 8\npp = 2\nglobal_batch = 32",
    ));
    let compute = exp.compute_model().expect("compute");
    let toml = mixed(1, 1, "A100-SXM-80GB", "tp = 8\npp = 2\nglobal_batch = 32");
    let dir = std::env::temp_dir().join(format!("fleetsim-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("exp.toml");
    std::fs::write(&path, toml).expect("write");
    let load = |o: &sim_config::Overrides| sim::experiment::Experiment::load(&path, o);
    let found = planner::search(&exp, &compute, &load).expect("search");
    let naive = found.iter().find(|e| e.as_written).expect("naive kept");
    let best = &found[0];
    assert!(best.estimate_s < naive.estimate_s);
    assert_ne!(best.candidate.placement, Placement::Naive, "{best:?}");
    for e in &found {
        assert!(!planner::tp_spans_types(&e.experiment));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One host of 8 H100 with a CXL switch and one memory node per GPU, Llama 2 7B data parallel
/// with its weights in CXL memory (`tensors`), coherent or not.
fn cxl_experiment(tensors: &str, coherent: bool) -> sim::experiment::Experiment {
    experiment(&format!(
        r#"
name = "cxl-test"
[cluster]
gpus = 8
gpus_per_host = 8
gpu = "H100-SXM"
topology = "rail-optimized"
[cluster.cxl]
hosts_per_switch = 1
memory_nodes_per_switch = 8
memory_node_gb = 64
memory_node_gb_s = 64
link_gb_s = 64
coherent = {coherent}
spill = false
tensors = [{tensors}]
[model]
preset = "llama2-7b"
[parallel]
tp = 1
pp = 1
zero = 1
global_batch = 8
[training]
overlap_grad_reduce = false
overlap_param_gather = false
memory_check = "off"
[compute]
# Every chip at the nominal clock: the expected times below are the kernel table's.
clock_spread = 0.0
[network]
model = "analytical"
"#
    ))
}

#[test]
fn a_coherent_remote_read_layer_takes_the_max_and_a_non_coherent_one_the_sum() {
    use sim::workload::{NO_LAYER, OpKind, Phase};
    let time = |exp: &sim::experiment::Experiment| {
        let (model, results) = run(model(exp));
        (model, results.iteration_ps().expect("finishes").as_ps())
    };
    let (_, baseline) = time(&cxl_experiment("", true));
    let (coherent_model, coherent) = time(&cxl_experiment("\"weights\"", true));
    let (_, copied) = time(&cxl_experiment("\"weights\"", false));

    // Per layer pass: its compute (kernel times) and its transfer (serialisation at 64 GB/s
    // plus the request and the reply over GPU - CXL switch - memory node, 200 ns a hop).
    let m = &coherent_model;
    let program = m.workload.program(0, 0);
    let kernel_ps = &m.kernel_times[0];
    let mut transfers = 0usize;
    let (mut max_extra, mut sum_extra) = (0u64, 0u64);
    for (i, op) in program.ops.iter().enumerate() {
        let OpKind::MemoryRead { bytes } = op.kind else {
            continue;
        };
        transfers += 1;
        let l = op.label;
        let kernels = program.ops[i + 1..].iter().filter_map(|o| match o.kind {
            OpKind::Compute { kernel } => Some((o.label, kernel_ps[kernel as usize].as_ps())),
            _ => None,
        });
        let compute: u64 = if l.phase == Phase::Optimizer {
            // The optimizer step writes the updated weights back: its one kernel.
            kernels.take(1).map(|(_, t)| t).sum()
        } else {
            assert_ne!(l.layer, NO_LAYER);
            kernels
                .filter(|(o, _)| {
                    o.layer == l.layer && o.micro_batch == l.micro_batch && o.phase == l.phase
                })
                .map(|(_, t)| t)
                .sum()
        };
        assert!(compute > 0);
        let transfer = sim_ir::time::round_ps(bytes as f64 * (1e12 / 64e9)) + 4 * 200_000;
        max_extra += transfer.max(compute) - compute;
        sum_extra += transfer;
    }
    assert_eq!(
        transfers,
        2 * 32 + 1,
        "one transfer per layer forward and backward, one for the optimizer step"
    );
    // Transfers outlast some layer passes' compute, not all: both regimes are exercised.
    assert!(
        max_extra > 0 && max_extra < sum_extra,
        "{max_extra} vs {sum_extra}"
    );
    let near = |got: u64, want: u64| (got as f64 - want as f64).abs() <= 1e-4 * want as f64;
    assert!(
        near(coherent - baseline, max_extra),
        "coherent: +{} ps, expected max(compute, transfer) per layer: +{max_extra} ps",
        coherent - baseline
    );
    assert!(
        near(copied - baseline, sum_extra),
        "non-coherent: +{} ps, expected compute + transfer per layer: +{sum_extra} ps",
        copied - baseline
    );
    assert!(copied > coherent);
}

#[test]
fn cxl_transfers_give_the_same_digest_on_any_partition() {
    for coherent in [true, false] {
        let exp = cxl_experiment("\"weights\", \"gradients\"", coherent);
        let (_, one) = run(model(&exp));
        let digest = one.digest();
        for (strategy, workers, threads) in [("random", 2, 2), ("round-robin", 3, 1)] {
            let m = model(&exp);
            let load = partitioner::Load::estimate(&m.topology, &m.workload, &m.net.segmenting());
            let parts = partitioner::partition(&m.topology, strategy, 4, &load, 3)
                .expect("partition")
                .partition_of;
            let (_, r) = run_with(m, parts, workers, threads);
            assert_eq!(r.digest(), digest, "coherent {coherent}, {strategy}");
        }
    }
}
