//! Closed-form checks of the compiled workload: FLOPs against Megatron-LM's and Narayanan et
//! al.'s formulas, bytes per collective against textbook volumes, and the schedules' bubble.

mod support;

use sim::experiment::Experiment;
use sim::layout::GroupKind;
use sim::time::SimTime;
use sim::workload::evaluate::evaluate;
use sim::workload::summary::{summarize, total_hardware_flops, total_model_flops};
use sim::workload::{
    CollectiveOp, KernelName, Module, OpKind, Pass, Phase, Program, Shape, Stream, Workload,
    compile,
};

/// Loads `body` as an experiment on the shipped rail-optimised H100 cluster.
fn experiment(name: &str, body: &str) -> Experiment {
    support::experiment(
        "workload-tests",
        name,
        &format!("{}{body}", support::rail_h100_include()),
    )
}

/// The most loaded EP rank's tokens over the mean ([`sim::model::Moe::hottest_rank_share`]),
/// which every rank of the group computes: `routed` tokens per rank, TP ranks' tokens gathered
/// when expert TP equals TP under SP.
fn expert_share(exp: &Experiment, routed_tokens: u64) -> f64 {
    let moe = exp.model.as_ref().and_then(|m| m.moe).expect("a MoE model");
    let ep = u64::from(exp.layout.ep);
    moe.hottest_rank_share(ep, routed_tokens)
}

/// Megatron-LM `training.py` `num_floating_point_operations` (3 × 2 × 2 expansion), with the
/// routed experts' term at the most loaded EP rank's tokens (`expert_share`, 1 when dense).
fn megatron_flops(exp: &Experiment, expert_share: f64) -> f64 {
    let m = exp.model.as_ref().expect("a model");
    let b = exp.global_batch as f64;
    let s = m.seq_len as f64;
    let l = m.layers as f64;
    let h = m.hidden as f64;
    let q = (m.heads * m.head_dim) as f64;
    let (routed, ffn, shared) = match m.moe {
        Some(moe) => (
            moe.top_k as f64,
            moe.ffn_hidden as f64,
            (moe.shared_experts * moe.ffn_hidden) as f64,
        ),
        None => (1.0, m.ffn_hidden as f64, 0.0),
    };
    let gated = match m.activation {
        sim::model::Activation::Swiglu => 1.5,
        sim::model::Activation::Gelu | sim::model::Activation::Relu2 => 1.0,
    };
    12.0 * b
        * s
        * l
        * h
        * h
        * ((1.0 + m.kv_heads as f64 / m.heads as f64 + s / h) * q / h
            + ffn / h * routed * gated * expert_share
            + shared / h * gated
            + m.vocab as f64 / (2.0 * l * h))
}

fn assert_close(got: f64, want: f64, tol: f64, what: &str) {
    let err = (got - want).abs() / want;
    assert!(
        err < tol,
        "{what}: got {got:.6e}, want {want:.6e} ({:.3}%)",
        err * 100.0
    );
}

const GPT3_175B: &str = r#"
[cluster]
gpus = 1024
[model]
preset = "gpt3-175b"
[parallel]
tp = 8
pp = 8
sequence_parallel = true
micro_batch = 1
global_batch = 1536
[training]
memory_check = "off"
"#;

#[test]
fn gpt3_175b_flops_match_megatron_and_narayanan() {
    let exp = experiment("gpt3-175b", GPT3_175B);
    let w = compile(&exp).expect("compile");
    let sums = summarize(&w);
    assert_close(
        total_model_flops(&sums),
        megatron_flops(&exp, 1.0),
        0.005,
        "model FLOPs",
    );
    // No recompute: hardware FLOPs = model FLOPs.
    assert_eq!(total_hardware_flops(&sums), total_model_flops(&sums));

    // Full recompute: Narayanan et al. SC'21 eq. (3), 96·B·s·l·h²(1 + s/6h + V/16lh).
    let exp = experiment(
        "gpt3-175b-recompute",
        &format!("{GPT3_175B}recompute = \"full\"\n"),
    );
    let w = compile(&exp).expect("compile");
    let sums = summarize(&w);
    let (b, s, l, h, v) = (1536.0, 2048.0, 96.0, 12288.0, 51200.0);
    let paper = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
    assert_close(total_hardware_flops(&sums), paper, 0.005, "hardware FLOPs");
    assert_close(
        total_model_flops(&sums),
        megatron_flops(&exp, 1.0),
        0.005,
        "model FLOPs",
    );
}

#[test]
fn llama3_70b_flops_match_megatron() {
    let exp = experiment(
        "llama3-70b",
        r#"
[cluster]
gpus = 512
[model]
preset = "llama3-70b"
[parallel]
tp = 8
pp = 4
cp = 2
sequence_parallel = true
micro_batch = 1
global_batch = 64
[training]
memory_check = "off"
"#,
    );
    let w = compile(&exp).expect("compile");
    assert_close(
        total_model_flops(&summarize(&w)),
        megatron_flops(&exp, 1.0),
        0.005,
        "Llama 3 70B",
    );
}

#[test]
fn mixtral_8x7b_flops_match_megatron() {
    let exp = experiment(
        "mixtral",
        r#"
[cluster]
gpus = 256
[model]
preset = "mixtral-8x7b"
[parallel]
tp = 2
pp = 4
ep = 8
sequence_parallel = true
micro_batch = 1
global_batch = 512
[training]
recompute = "selective"
memory_check = "off"
"#,
    );
    let w = compile(&exp).expect("compile");
    let sums = summarize(&w);
    assert_close(
        total_model_flops(&sums),
        megatron_flops(&exp, expert_share(&exp, 4096)),
        0.005,
        "Mixtral",
    );
    // Selective recompute re-runs core attention: 4·b·s²·q per layer forward.
    let m = exp.model.as_ref().expect("a model");
    let attn = 4.0
        * exp.global_batch as f64
        * (m.seq_len * m.seq_len * m.heads * m.head_dim) as f64
        * m.layers as f64;
    assert_close(
        total_hardware_flops(&sums) - total_model_flops(&sums),
        attn,
        1e-9,
        "recomputed attention",
    );
}

fn collective(w: &Workload, stage: u32, op: CollectiveOp, group: GroupKind) -> (u64, u64, f64) {
    let s = &summarize(w)[stage as usize];
    s.collectives
        .get(&(op, group))
        .map_or((0, 0, 0.0), |t| (t.count, t.bytes, t.wire_bytes))
}

/// Forward and backward TP all-reduces per layer without sequence parallelism: two each, of
/// b·s·h activations (Narayanan et al. SC'21 §3.3, Korthikanti et al. §3).
#[test]
fn tp_all_reduce_bytes_match_textbook() {
    let exp = experiment(
        "tp-bytes",
        r#"
[cluster]
gpus = 16
[model]
preset = "gpt3-6.7b"
[parallel]
tp = 8
pp = 1
micro_batch = 2
global_batch = 8
[training]
memory_check = "off"
"#,
    );
    let w = compile(&exp).expect("compile");
    let m = exp.model.as_ref().expect("a model");
    let (b, s, h) = (2, m.seq_len, m.hidden);
    let msg = b * s * h * 2; // bf16
    let micro_batches = 2; // 8 / (micro_batch 2 × DP 2)
    let p = w.program(0, 0);
    let per_layer_dir = |phase: Phase| {
        p.ops
            .iter()
            .filter(|o| {
                o.label.phase == phase
                    && o.label.layer == 0
                    && o.label.micro_batch == 0
                    && matches!(
                        o.kind,
                        OpKind::Collective { op: CollectiveOp::AllReduce, group: GroupKind::Tp, bytes } if bytes == msg
                    )
            })
            .count()
    };
    assert_eq!(per_layer_dir(Phase::Forward), 2);
    assert_eq!(per_layer_dir(Phase::Backward), 2);
    // All TP all-reduces of the iteration: 4 per layer per micro-batch, plus embedding and
    // logits (1 each of b·s·h) and cross entropy's three fp32 b·s reductions.
    let (count, bytes, _) = collective(&w, 0, CollectiveOp::AllReduce, GroupKind::Tp);
    let layers = m.layers;
    assert_eq!(count, micro_batches * (4 * layers + 2 + 3));
    assert_eq!(
        bytes,
        micro_batches * ((4 * layers + 2) * msg + 3 * b * s * 4)
    );
}

/// Without ZeRO, DP sends 2(n−1)/n × the fp32 gradient bytes per rank (ring all-reduce).
#[test]
fn dp_all_reduce_bytes_match_ring_volume() {
    let exp = experiment(
        "dp-bytes",
        r#"
[cluster]
gpus = 64
[model]
preset = "gpt3-6.7b"
[parallel]
tp = 4
pp = 2
zero = 0
micro_batch = 1
global_batch = 32
[training]
memory_check = "off"
"#,
    );
    let w = compile(&exp).expect("compile");
    let dp = exp.layout.dp;
    assert_eq!(dp, 8);
    for stage in 0..2 {
        let (_, bytes, wire) = collective(&w, stage, CollectiveOp::AllReduce, GroupKind::DpCp);
        let grads = exp.memory[stage as usize].params * 4.0;
        assert_close(bytes as f64, grads, 1e-6, "gradient bytes");
        let n = f64::from(dp);
        assert_close(wire, 2.0 * (n - 1.0) / n * grads, 1e-6, "ring volume");
    }
    // The distributed optimizer reduce-scatters the same bytes and gathers bf16 parameters.
    let exp = experiment(
        "dp-bytes-zero1",
        r#"
[cluster]
gpus = 64
[model]
preset = "gpt3-6.7b"
[parallel]
tp = 4
pp = 2
zero = 1
micro_batch = 1
global_batch = 32
[training]
memory_check = "off"
"#,
    );
    let w = compile(&exp).expect("compile");
    let grads = exp.memory[1].params * 4.0;
    let (_, rs, _) = collective(&w, 1, CollectiveOp::ReduceScatter, GroupKind::DpCp);
    let (_, ag, _) = collective(&w, 1, CollectiveOp::AllGather, GroupKind::DpCp);
    assert_close(rs as f64, grads, 1e-6, "reduce-scatter bytes");
    assert_close(ag as f64, grads / 2.0, 1e-6, "all-gather bytes");
}

/// GPT-3 6.7B on 64 GPUs: TP 4 × PP 4 × DP 4, micro-batch 2, 4 micro-batches per replica,
/// with extra `[training]` keys.
fn tp4_pp4_on_64(vp: u64, sp: bool, training: &str) -> String {
    format!(
        r#"
[cluster]
gpus = 64
[model]
preset = "gpt3-6.7b"
[parallel]
tp = 4
pp = 4
vp = {vp}
sequence_parallel = {sp}
micro_batch = 2
global_batch = 32
[training]
memory_check = "off"
{training}
"#
    )
}

/// Each micro-batch crosses each pipeline boundary once forward (activations) and once
/// backward (gradients): b·s·h elements, split over TP under sequence parallelism.
#[test]
fn pp_send_recv_bytes_match_textbook() {
    for (sp, vp) in [(false, 1u64), (true, 1), (true, 2)] {
        let exp = experiment(&format!("pp-bytes-{sp}-{vp}"), &tp4_pp4_on_64(vp, sp, ""));
        let w = compile(&exp).expect("compile");
        let m = exp.model.as_ref().expect("a model");
        let per_rank = 2 * m.seq_len * m.hidden * 2 / if sp { 4 } else { 1 };
        let mb = 4; // 32 / (micro_batch 2 × DP 4)
        let sums = summarize(&w);
        for s in &sums {
            let v = vp;
            // Boundaries a stage's chunks send across: all virtual stages but the last.
            let sends_fwd = if s.stage == 3 { v - 1 } else { v };
            let sends_bwd = if s.stage == 0 { v - 1 } else { v };
            assert_eq!(
                s.send_bytes,
                mb * (sends_fwd + sends_bwd) * per_rank,
                "sp {sp} vp {vp} stage {}",
                s.stage
            );
            assert_eq!(s.recv_bytes, s.send_bytes);
        }
    }
}

/// Megatron-LM 2022's scatter-gather (`--scatter-gather-tensors-in-pipeline`): without SP each
/// TP rank sends 1/TP of the boundary tensor, and every receive is followed by a TP all-gather
/// of the whole tensor. Under SP the tensor is already split and nothing changes.
#[test]
fn scatter_gather_sends_a_tp_share_and_gathers_it() {
    for sp in [false, true] {
        let body = |sg: bool| tp4_pp4_on_64(1, sp, &format!("p2p_scatter_gather = {sg}"));
        let plain = compile(&experiment(&format!("sg-off-{sp}"), &body(false))).expect("compile");
        let split = compile(&experiment(&format!("sg-on-{sp}"), &body(true))).expect("compile");
        let (a, b) = (summarize(&plain), summarize(&split));
        for (p, q) in a.iter().zip(&b) {
            let shrink = if sp { 1 } else { 4 };
            assert_eq!(
                q.send_bytes * shrink,
                p.send_bytes,
                "sp {sp} stage {}",
                p.stage
            );
        }
        let gathers = |w: &Workload| {
            w.programs[1]
                .ops
                .iter()
                .filter(|o| o.label.module == Module::Pipeline)
                .filter(|o| {
                    matches!(
                        o.kind,
                        OpKind::Collective {
                            op: CollectiveOp::AllGather,
                            ..
                        }
                    )
                })
                .count()
        };
        // Stage 1 receives once per micro-batch forward and once backward: 2 × 4.
        assert_eq!(gathers(&split), if sp { 0 } else { 8 }, "sp {sp}");
        assert_eq!(gathers(&plain), 0);
    }
}

/// Without `overlap_p2p_comm` the interleaved schedule waits for its sends before the next
/// kernel (Megatron-LM 2022): it can only be slower, and it still runs to completion.
#[test]
fn blocking_interleaved_transfers_cost_time() {
    let body = |overlap: bool| four_stage_pipeline(2, 8, &format!("overlap_p2p_comm = {overlap}"));
    // Transfers cost a fixed time here, so waiting for them shows.
    let cost = |p: &Program, op: &sim::workload::Op| match op.kind {
        OpKind::Send { .. } | OpKind::Recv { .. } => SimTime::from_us(1),
        _ => layer_flops_cost(p, op),
    };
    let time = |overlap: bool| {
        let w = compile(&experiment(
            &format!("p2p-overlap-{overlap}"),
            &body(overlap),
        ))
        .expect("compile");
        evaluate(&w, 0, &cost)
            .expect("no deadlock")
            .iteration
            .as_ps()
    };
    assert!(
        time(false) > time(true),
        "{} vs {}",
        time(false),
        time(true)
    );
}

/// PyTorch starts a point-to-point op only after the compute issued before it
/// (`ProcessGroupNCCL::pointToPoint`'s `syncStreams`), and Megatron's interleaved schedule
/// issues each receive right after the kernels of the last step of the same direction
/// (`send_forward_recv_forward`, `send_backward_recv_backward`; the first backward's after
/// the last warm-up forward). So every receive after a stage's first waits for the last
/// kernel of such a step, and never for a kernel of its own step.
#[test]
fn interleaved_receives_wait_for_the_step_megatron_posts_them_after() {
    let w = compile(&experiment("p2p-posting", &four_stage_pipeline(2, 8, ""))).expect("compile");
    let p = &w.programs[1];
    let step = |op: &sim::workload::Op| (op.label.phase, op.label.micro_batch, op.label.chunk);
    let is_compute = |op: &sim::workload::Op| matches!(op.kind, OpKind::Compute { .. });
    let (mut checked, mut seen_backward_receive) = (0, false);
    for (i, op) in p.ops.iter().enumerate() {
        if !matches!(op.stream, Stream::RecvPrev | Stream::RecvNext) {
            continue;
        }
        let deps = p.deps(i);
        if i == p
            .ops
            .iter()
            .position(|o| matches!(o.stream, Stream::RecvPrev))
            .unwrap()
        {
            assert!(
                deps.is_empty(),
                "the first receive waits for nothing: {deps:?}"
            );
            continue;
        }
        assert_eq!(deps.len(), 1, "op {i}: {deps:?}");
        let after = &p.ops[deps[0] as usize];
        assert!(is_compute(after), "op {i} waits for {:?}", after.kind);
        let want = if op.label.phase == Phase::Backward && !seen_backward_receive {
            Phase::Forward
        } else {
            op.label.phase
        };
        seen_backward_receive |= op.label.phase == Phase::Backward;
        assert_eq!(after.label.phase, want, "op {i}");
        assert_ne!(step(after), step(op), "op {i} waits for its own step");
        let later_of_that_step = p.ops[deps[0] as usize + 1..]
            .iter()
            .any(|o| is_compute(o) && step(o) == step(after));
        assert!(
            !later_of_that_step,
            "op {i} waits for a kernel before its step's last"
        );
        checked += 1;
    }
    assert!(checked > 8, "{checked} receives checked");
}

/// Megatron-Core's 1F1B batches each step's transfers and then calls
/// `torch.cuda.synchronize()` (`p2p_communication.py` `_communicate`: `batch_p2p_comm` and
/// `batch_p2p_sync` are on whenever `overlap_p2p_comm` is off, which Megatron-LM forces for a
/// non-interleaved schedule), so the host issues nothing of the next step before they are
/// done: every step after a transfer starts with a host sync that waits for it. The
/// interleaved schedule with `overlap_p2p_comm` never synchronises.
#[test]
fn pipeline_transfers_end_in_a_device_synchronize() {
    let w = compile(&experiment("p2p-sync-1f1b", &tp4_pp4_on_64(1, true, ""))).expect("compile");
    for p in &w.programs {
        let transfers = p
            .ops
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Send { .. } | OpKind::Recv { .. }))
            .count();
        assert!(transfers > 0);
        // One sync per step after a transfer: every step but the first stage's first; on
        // the last stage, which sends nothing forward, only the forwards (their receives).
        let steps = 2 * p.micro_batches as usize;
        let want = match p.stage {
            0 => steps - 1,
            3 => steps / 2,
            _ => steps,
        };
        assert_eq!(
            p.host_syncs.len(),
            want,
            "stage {}: {:?}",
            p.stage,
            p.host_syncs
                .iter()
                .map(|&s| (
                    s,
                    p.ops[s as usize].label.phase,
                    p.ops[s as usize].label.micro_batch
                ))
                .collect::<Vec<_>>()
        );
        for &s in &p.host_syncs {
            let deps = p.deps(s as usize);
            assert!(
                deps.iter().any(|&d| matches!(
                    p.ops[d as usize].kind,
                    OpKind::Send { .. } | OpKind::Recv { .. }
                )),
                "stage {}: sync at op {s} waits for no transfer: {deps:?}",
                p.stage
            );
        }
    }
    let interleaved =
        compile(&experiment("p2p-sync-vp2", &tp4_pp4_on_64(2, true, ""))).expect("compile");
    assert!(interleaved.programs.iter().all(|p| p.host_syncs.is_empty()));
}

/// MoE all-to-all: each of dispatch and combine sends every routed token copy's hidden state
/// once, forward and backward.
#[test]
fn ep_all_to_all_bytes_match_routed_tokens() {
    let exp = experiment(
        "ep-bytes",
        r#"
[cluster]
gpus = 64
[model]
preset = "mixtral-8x7b"
[parallel]
tp = 2
pp = 1
ep = 8
sequence_parallel = true
micro_batch = 1
global_batch = 32
[training]
memory_check = "off"
"#,
    );
    let w = compile(&exp).expect("compile");
    let m = exp.model.as_ref().expect("a model");
    let moe = m.moe.expect("moe");
    let tokens_per_rank = m.seq_len / 2; // sequence-parallel share
    // The most loaded rank's copies, which every rank of the group moves; TP 2 = expert TP
    // gathers the TP peer's tokens, so its count sums twice the tokens.
    let share = expert_share(&exp, 2 * tokens_per_rank);
    assert!(share > 1.2, "a trained router's skew: {share}");
    let moved = ((tokens_per_rank * moe.top_k) as f64 * share).round() as u64;
    let per_a2a = moved * m.hidden * 2;
    let (count, bytes, wire) = collective(&w, 0, CollectiveOp::AllToAll, GroupKind::Ep);
    let micro_batches = 1;
    assert_eq!(count, micro_batches * m.layers * 4);
    assert_eq!(bytes, count * per_a2a);
    assert_close(wire, bytes as f64 * 7.0 / 8.0, 1e-9, "a2a wire bytes");
}

/// Expert tensor parallel below TP (Megatron-Core MoE parallel folding): with TP 4 and expert
/// TP 2 the dispatcher gathers routed tokens over the expert-TP group (2 ranks, not the 4 of
/// TP) after the all-to-all and reduce-scatters them before the way back
/// (`MoEAlltoAllTokenDispatcher`), and a rank's expert FLOPs stay those of its routed tokens
/// however EP x ETP splits the experts. Padded to capacity 1.0, every expert takes exactly
/// its share, so routing skew does not enter.
#[test]
fn expert_tp_gathers_over_its_own_group() {
    let body = |ep: u32, etp: u32| {
        format!(
            r#"
[cluster]
gpus = 64
[model]
preset = "mixtral-8x7b"
moe_capacity_factor = 1.0
moe_pad_to_capacity = true
[parallel]
tp = 4
pp = 1
ep = {ep}
etp = {etp}
sequence_parallel = true
micro_batch = 1
global_batch = 16
[training]
memory_check = "off"
"#
        )
    };
    let folded = experiment("etp-2", &body(8, 2));
    let w = compile(&folded).expect("compile");
    let m = folded.model.as_ref().expect("a model");
    let moe = m.moe.expect("moe");
    let routed = m.seq_len / 4 * moe.top_k; // sequence-parallel share, top-k copies
    let (count, bytes, _) = collective(&w, 0, CollectiveOp::AllGather, GroupKind::ExpertTp);
    assert_eq!(
        count,
        m.layers * 2,
        "one gather forward, one backward per MoE layer"
    );
    assert_eq!(bytes, count * 2 * routed * m.hidden * 2);
    let (count, _, _) = collective(&w, 0, CollectiveOp::ReduceScatter, GroupKind::ExpertTp);
    assert_eq!(count, m.layers * 2);
    assert_eq!(folded.layout.group(GroupKind::ExpertTp, 5), vec![4, 5]);

    // Expert TP = TP (the default) keeps the TP communicator and moves as many FLOPs.
    let default = experiment("etp-4", &body(4, 4));
    let d = compile(&default).expect("compile");
    assert_eq!(
        collective(&d, 0, CollectiveOp::AllGather, GroupKind::ExpertTp).0,
        0
    );
    let flops = |w: &Workload| summarize(w)[0].model_flops;
    assert_close(flops(&w), flops(&d), 1e-12, "model FLOPs per rank");
}

/// Megatron-Core's pipeline layout places layers per virtual stage, and a multi-token
/// prediction module (DeepSeek-V3 §2.2) runs where its `m` stands: its norms and projection,
/// a transformer layer of the model's kind, and a second output head and loss.
#[test]
fn pipeline_layout_places_layers_and_the_mtp_module() {
    let body = |mtp: u32, layout: &str| {
        format!(
            r#"
[cluster]
gpus = 16
[model]
preset = "llama2-7b"
mtp_layers = {mtp}
[parallel]
tp = 2
pp = 2
sequence_parallel = true
micro_batch = 1
global_batch = 16
pipeline_layout = "{layout}"
[training]
memory_check = "off"
"#
        )
    };
    // Interleaved: 4 virtual stages on PP 2, so VP 2; uneven chunks as written.
    let exp = experiment("layout", &body(0, "Et*5|t*11|t*8|t*8L"));
    assert_eq!(exp.layout.vp, 2);
    assert_eq!(exp.chunk_layers[0][0], (0..5).collect::<Vec<u64>>());
    assert_eq!(exp.chunk_layers[1][0], (5..16).collect::<Vec<u64>>());
    assert_eq!(exp.chunk_layers[0][1], (16..24).collect::<Vec<u64>>());
    assert_eq!(exp.stage_layers, [13, 19]);
    let plain = compile(&exp).expect("compile");

    let with_mtp = experiment("layout-mtp", &body(1, "Et*5|t*11|t*8|t*8mL"));
    assert_eq!(with_mtp.chunk_layers[1][1], (24..33).collect::<Vec<u64>>());
    let w = compile(&with_mtp).expect("compile");
    let kernels = |w: &Workload, stage: u32, name: KernelName| {
        support::kernels_named(&w.programs[stage as usize], name)
            .iter()
            .map(|&(_, runs)| runs)
            .sum::<u64>()
    };
    let micro_batches = 16 / 4; // global batch over DP 4
    assert_eq!(
        kernels(&w, 1, KernelName::MtpProj),
        micro_batches * 3,
        "forward, dgrad, wgrad"
    );
    assert_eq!(kernels(&w, 0, KernelName::MtpProj), 0);
    assert_eq!(
        kernels(&w, 1, KernelName::Logits),
        2 * kernels(&plain, 1, KernelName::Logits),
        "a second output head"
    );
    let params = |e: &Experiment| e.memory[1].params;
    let m = with_mtp.model.as_ref().expect("a model");
    let added = (m.layer_dense_params(32) as f64 - m.norm_params() as f64 * 2.0) / 2.0;
    assert!(params(&with_mtp) - params(&exp) > 0.9 * added);
}

/// A cost that makes every chunk forward take F and backward 2F: GEMM and attention FLOPs of
/// the layers only; everything else is free.
fn layer_flops_cost(p: &Program, op: &sim::workload::Op) -> SimTime {
    SimTime::from_ps(match op.kind {
        OpKind::Compute { kernel } => {
            let k = &p.kernels[kernel as usize];
            let layer = matches!(op.label.module, Module::Attention | Module::Mlp);
            if layer && matches!(k.shape, Shape::Gemm { .. } | Shape::Attention { .. }) {
                k.flops / 1_000_000
            } else {
                0
            }
        }
        _ => 0,
    })
}

/// In the no-communication limit the bubble over ideal time is (p − 1)/(m·v).
/// GPT-3 6.7B (32 layers) on one host of 4 GPUs in 4 pipeline stages, micro-batch 1, with
/// extra `[training]` keys.
fn four_stage_pipeline(vp: u32, global_batch: u32, training: &str) -> String {
    format!(
        r#"
[cluster]
gpus = 4
gpus_per_host = 4
[model]
preset = "gpt3-6.7b"
layers = 32
[parallel]
pp = 4
vp = {vp}
micro_batch = 1
global_batch = {global_batch}
[training]
memory_check = "off"
{training}
"#
    )
}

#[test]
fn bubble_fraction_matches_schedule_theory() {
    for (vp, m) in [(1, 8), (2, 8), (1, 16), (4, 8)] {
        let exp = experiment(&format!("bubble-{vp}-{m}"), &four_stage_pipeline(vp, m, ""));
        let w = compile(&exp).expect("compile");
        let timing = evaluate(&w, 0, &layer_flops_cost).expect("no deadlock");
        let want = 3.0 / f64::from(m * vp);
        assert_close(
            timing.bubble_fraction(),
            want,
            1e-3,
            &format!("vp {vp} m {m}"),
        );
    }
}

/// Every shipped experiment compiles to programs that run to completion.
#[test]
fn shipped_experiments_compile_without_deadlock() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/experiments");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("experiments")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| !p.to_string_lossy().contains("131072"))
        .collect();
    paths.sort();
    for path in paths {
        let exp = Experiment::load(&path, &sim::config::Overrides::none()).expect("load");
        let w = compile(&exp).expect("compile");
        let cost = |p: &Program, op: &sim::workload::Op| {
            SimTime::from_ps(match op.kind {
                OpKind::Compute { kernel } => 1 + p.kernels[kernel as usize].flops / 1_000_000_000,
                _ => 10,
            })
        };
        evaluate(&w, 0, &cost).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Streams hold what they should.
        for p in &w.programs {
            for op in &p.ops {
                match op.kind {
                    OpKind::Compute { .. } => assert_eq!(op.stream, Stream::Compute),
                    OpKind::Send { .. } | OpKind::Recv { .. } => {
                        assert!(op.stream > Stream::Pp && op.stream != Stream::Memory)
                    }
                    OpKind::Collective { .. } => {
                        assert!(op.stream != Stream::Compute && op.stream < Stream::SendNext)
                    }
                    OpKind::MemoryRead { .. } => assert_eq!(op.stream, Stream::Memory),
                }
            }
        }
    }
}

/// Llama 3 405B on 131,072 GPUs compiles to a few small programs.
#[test]
fn llama3_405b_131072_is_compact() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/experiments/llama3-405b-h100-131072.toml"
    );
    let exp = Experiment::load(std::path::Path::new(path), &sim::config::Overrides::none())
        .expect("load");
    let w = compile(&exp).expect("compile");
    assert_eq!(w.programs.len(), 16);
    assert!(w.heap_bytes() < 1 << 30, "{} bytes", w.heap_bytes());
    assert_eq!(w.program_of_rank(131_071).stage, 15);
}

/// Replicas may run different micro-batch counts (the heterogeneity-aware planner's lever):
/// each distinct count gets its own programs, and ranks find theirs by DP coordinate.
#[test]
fn replicas_with_different_micro_batch_counts_get_their_own_programs() {
    use sim::workload::compile::{CompileOptions, compile_with};
    let exp = experiment(
        "classes",
        r#"
[cluster]
gpus = 32
[model]
preset = "gpt3-6.7b"
[parallel]
tp = 4
pp = 2
micro_batch = 1
global_batch = 32
[training]
memory_check = "off"
"#,
    );
    let mut options = CompileOptions::from_experiment(&exp).expect("a model");
    assert_eq!(options.replica_micro_batches, vec![8; 4]);
    options.replica_micro_batches = vec![10, 6, 10, 6];
    let w = compile_with(
        exp.model.as_ref().expect("a model"),
        &exp.layout,
        &options,
        "planned",
    );
    assert_eq!(w.classes(), 2);
    assert_eq!(w.programs.len(), 4);
    assert_eq!(w.tokens, 32 * exp.model.as_ref().expect("a model").seq_len);
    for rank in 0..32 {
        let c = exp.layout.coords(rank);
        let want = if c.dp.is_multiple_of(2) { 10 } else { 6 };
        assert_eq!(w.program_of_rank(rank).micro_batches, want);
        assert_eq!(w.program_of_rank(rank).stage, c.pp);
    }
    // Fewer micro-batches, fewer forward passes; the same gradient buckets.
    let sums = summarize(&w);
    let fwd = |class: usize| {
        w.program(class, 0)
            .ops
            .iter()
            .filter(|o| o.label.phase == Phase::Forward && o.stream == Stream::Compute)
            .count()
    };
    assert_eq!(fwd(0) * 6, fwd(1) * 10);
    assert_eq!(
        sums[0]
            .collectives
            .get(&(CollectiveOp::ReduceScatter, GroupKind::DpCp)),
        sums[2]
            .collectives
            .get(&(CollectiveOp::ReduceScatter, GroupKind::DpCp))
    );
    for class in 0..2 {
        evaluate(&w, class, &layer_flops_cost).expect("no deadlock");
    }
}

/// Megatron's distributed optimizer under `overlap_param_gather`: the forward pre-hook waits
/// for a bucket's parameter all-gather before the first module that uses it
/// (`distrib_optimizer.py` `_make_forward_pre_hook`, `_finish_param_sync_helper`), so the
/// first forward waits for each gather in turn, not for all of them before its first kernel.
#[test]
fn first_forward_waits_for_each_param_gather_at_its_bucket() {
    let exp = experiment(
        "param-gather",
        r#"
[cluster]
gpus = 16
[model]
preset = "gpt3-6.7b"
[parallel]
tp = 2
zero = 1
micro_batch = 1
global_batch = 16
[training]
memory_check = "off"
overlap_grad_reduce = true
overlap_param_gather = true
"#,
    );
    let w = compile(&exp).expect("compiles");
    let p = w.program(0, 0);
    let is_gather = |i: usize| {
        matches!(
            p.ops[i].kind,
            OpKind::Collective {
                op: CollectiveOp::AllGather,
                group: GroupKind::DpCp,
                ..
            }
        )
    };
    let gathers: Vec<u32> = (0..p.ops.len())
        .filter(|&i| is_gather(i))
        .map(|i| i as u32)
        .collect();
    // 32 layers of ~100 M parameters per TP rank, each over the 40 M bucket size, plus the
    // embedding's and the output layer's buckets.
    assert!(gathers.len() >= 32, "{} gathers", gathers.len());
    // Compute ops waiting for a gather, in program order, with the gathers they wait for.
    let waiting: Vec<(usize, Vec<u32>)> = (0..p.ops.len())
        .filter(|&i| p.ops[i].stream == Stream::Compute)
        .map(|i| {
            let g: Vec<u32> = p
                .deps(i)
                .iter()
                .copied()
                .filter(|&d| is_gather(d as usize))
                .collect();
            (i, g)
        })
        .filter(|(_, g)| !g.is_empty())
        .collect();
    let first_compute = (0..p.ops.len())
        .find(|&i| p.ops[i].stream == Stream::Compute)
        .expect("a kernel");
    assert_eq!(waiting[0], (first_compute, vec![gathers[0]]));
    // Each gather is waited for once, in the order it was issued, by a forward kernel of the
    // first micro-batch.
    let waited: Vec<u32> = waiting.iter().flat_map(|(_, g)| g.clone()).collect();
    assert_eq!(waited, gathers);
    for (i, _) in &waiting {
        assert_eq!(p.ops[*i].label.phase, Phase::Forward);
        assert_eq!(p.ops[*i].label.micro_batch, 0);
    }
    assert_eq!(
        waiting.len(),
        gathers.len(),
        "one bucket per forward unit here"
    );
}

/// `preset` on 64 GPUs with 8 of its layers, TP 2 and PP 2 with SP, EP `ep`, 32 sequences a
/// step, and `model` added to its `[model]` table.
fn moe_workload(name: &str, preset: &str, ep: u32, model: &str, training: &str) -> Workload {
    compile(&moe_experiment(name, preset, ep, model, training)).expect("compile")
}

fn moe_experiment(name: &str, preset: &str, ep: u32, model: &str, training: &str) -> Experiment {
    experiment(
        name,
        &format!(
            r#"
[cluster]
gpus = 64
[model]
preset = "{preset}"
layers = 8
{model}
[parallel]
tp = 2
pp = 2
ep = {ep}
sequence_parallel = true
micro_batch = 1
global_batch = 32
[training]
memory_check = "off"
{training}
"#
        ),
    )
}

/// What each host sync of `p` other than 1F1B's waits before: the op's collective or kernel
/// name.
fn moe_host_syncs(p: &Program) -> Vec<String> {
    p.host_syncs
        .iter()
        .filter(|&&s| !waits_for_a_transfer(p, s))
        .map(|&s| match p.ops[s as usize].kind {
            OpKind::Collective { op, .. } => op.name().to_string(),
            OpKind::Compute { kernel } => p.kernels[kernel as usize].name.name().to_string(),
            ref other => format!("{other:?}"),
        })
        .collect()
}

/// Whether op `s` waits for a pipeline transfer (1F1B's synchronise after its transfers).
fn waits_for_a_transfer(p: &Program, s: u32) -> bool {
    p.deps(s as usize).iter().any(|&d| {
        matches!(
            p.ops[d as usize].kind,
            OpKind::Send { .. } | OpKind::Recv { .. }
        )
    })
}

/// A dropless MoE layer's forward reads its tokens per expert on the host before the EP
/// all-to-all (Megatron-Core `token_dispatcher.py`: `cuda_sync_point = "before_ep_alltoall"`):
/// one host sync per MoE layer and micro-batch forward, each on that all-to-all; the backward
/// reuses the sizes, and a dense model has none.
#[test]
fn every_moe_forward_dispatch_is_a_host_sync_and_nothing_else_is() {
    let w = moe_workload("host-sync-moe", "mixtral-8x7b", 8, "", "");
    for p in &w.programs {
        assert!(p.host_syncs.windows(2).all(|w| w[0] < w[1]));
        // 1F1B's pipeline transfers are syncs of their own (`pipeline_transfers_end_in_a_
        // device_synchronize`); the rest are the dispatches.
        let moe: Vec<u32> = p
            .host_syncs
            .iter()
            .copied()
            .filter(|&s| !waits_for_a_transfer(p, s))
            .collect();
        // 4 layers per stage, 32 / DP 16 = 2 micro-batches each.
        assert_eq!(moe.len(), 4 * p.micro_batches as usize);
        for &s in &moe {
            let op = &p.ops[s as usize];
            assert!(
                matches!(
                    op.kind,
                    OpKind::Collective {
                        op: CollectiveOp::AllToAll,
                        group: GroupKind::Ep,
                        ..
                    }
                ) && op.label.phase == Phase::Forward
                    && op.label.module == Module::Moe,
                "{op:?}"
            );
        }
    }
    let dense = moe_workload("host-sync-dense", "llama3-8b", 1, "", "");
    assert!(
        dense
            .programs
            .iter()
            .all(|p| { p.host_syncs.iter().all(|&s| waits_for_a_transfer(p, s)) })
    );
}

/// The kernels of `name`'s forward and backward in stage 0's program.
fn chain_kernels(w: &Workload, name: KernelName) -> (u32, u32) {
    let p = w.program(0, 0);
    let of = |pass: Pass| {
        p.kernels
            .iter()
            .find(|k| k.name == name && (k.pass == Pass::Forward) == (pass == Pass::Forward))
            .map(|k| match k.shape {
                Shape::Elementwise { kernels, .. } => kernels,
                _ => panic!("{name:?} is a chain of small ops"),
            })
            .unwrap_or_else(|| panic!("no {name:?} {pass:?}"))
    };
    (of(Pass::Forward), of(Pass::Backward))
}

/// Each launch of a kernel named `name` in `p`, with the op that launches it.
fn launches(
    p: &Program,
    name: KernelName,
) -> impl Iterator<Item = (&sim::workload::Op, &sim::workload::Kernel)> {
    support::compute_ops(p).filter(move |(_, k)| k.name == name)
}

/// Megatron-Core 0.12's router as DeepSeek-V3 configures it (sigmoid scores with an expert
/// bias, group-limited top-k, token drop padded to capacity, sequence aux loss) issues 48 ops
/// per forward, its gating GEMM one of them (`router.py`, `moe_utils.py`, counted line by
/// line; docs/model.md). Without groups or capacity the chain is shorter; the fused router
/// (`moe_router_fusion`, TE PR #1883) folds scores to routing map and the aux-loss scores into
/// one kernel each. Unfused permutation: 5 kernels and the regroup of several local experts;
/// unpermutation 9 and the regroup; fused 3 and 1.
#[test]
fn moe_router_and_permutations_issue_megatron_cores_ops() {
    let dsv3 = |name: &str, training: &str| {
        let model = "moe_router_num_groups = 8\nmoe_router_group_topk = 4\n\
                     moe_capacity_factor = 1.0\nmoe_pad_to_capacity = true";
        moe_workload(name, "deepseek-v3", 8, model, training)
    };
    let w = dsv3("router-dsv3", "");
    let (forward, backward) = chain_kernels(&w, KernelName::RouterTopk);
    assert_eq!(1 + forward, 48, "the gating GEMM and its chain");
    assert_eq!(backward, 22);
    let fused = dsv3("router-dsv3-fused", "moe_router_fusion = true");
    assert_eq!(chain_kernels(&fused, KernelName::RouterTopk), (21, 12));
    let dropless = moe_workload("router-mixtral", "mixtral-8x7b", 8, "", "");
    assert_eq!(chain_kernels(&dropless, KernelName::RouterTopk), (33, 21));
    // DeepSeek-V3's 256 experts over EP 8: 32 local experts, a regroup each way.
    assert_eq!(chain_kernels(&w, KernelName::Permute), (6, 3));
    assert_eq!(chain_kernels(&w, KernelName::Unpermute), (10, 6));
    let permute_fused = dsv3("permute-fused", "moe_permute_fusion = true");
    assert_eq!(chain_kernels(&permute_fused, KernelName::Permute), (4, 2));
    assert_eq!(chain_kernels(&permute_fused, KernelName::Unpermute), (2, 2));
    // Mixtral's 8 experts over EP 8: one local expert, nothing to regroup.
    assert_eq!(chain_kernels(&dropless, KernelName::Permute), (5, 2));
}

/// Token drop as NeMo's `MegatronTokenDropCallback` sets it (capacity factor 1.0, padded) and
/// Megatron-Core runs it (`moe_utils.get_capacity`: ceil(tokens × top_k / experts × factor),
/// at least 4; `MoEAlltoAllTokenDispatcher.preprocess`). Mixtral's 8 experts, top 2, at TP 2
/// with SP: 2,048 of a micro-batch's 4,096 tokens per rank, 512 copies per expert. Each of
/// the 8 EP ranks' one local expert takes capacity tokens from each of the 8, and at expert
/// TP 2 (the TP size) gathers its TP peer's too: 16 × capacity, 8,192 at factor 1.0, 10,240
/// padded at 1.25. Dropless, the most loaded rank's experts take more (`expert_share`, the
/// skewed default); unpadded token drop caps that at the capacity factor. Padded, the
/// dispatcher knows every size and the host never waits; unpadded it reads the kept count
/// before the first permutation; dropless, before the all-to-all.
#[test]
fn token_drop_pads_experts_to_capacity_and_moves_the_host_sync() {
    let moe = |name: &str, capacity: &str| moe_workload(name, "mixtral-8x7b", 8, capacity, "");
    // Tokens of the first expert GEMM's forward, and what each host sync waits before.
    let look = |w: &Workload| {
        let p = w.program(0, 0);
        let tokens = p
            .ops
            .iter()
            .find_map(|o| match o.kind {
                OpKind::Compute { kernel } => {
                    let k = &p.kernels[kernel as usize];
                    (k.name == KernelName::ExpertUp && k.pass == Pass::Forward).then(|| {
                        match k.shape {
                            Shape::Gemm { m, .. } => m,
                            _ => panic!("a GEMM"),
                        }
                    })
                }
                _ => None,
            })
            .expect("an expert GEMM");
        (tokens, moe_host_syncs(p))
    };
    let (dropless, syncs) = look(&moe("drop-none", ""));
    let share = expert_share(
        &moe_experiment("drop-none", "mixtral-8x7b", 8, "", ""),
        4096,
    );
    assert!(share > 1.25, "{share}");
    assert_eq!(dropless, 2 * (4096.0 * share).round() as u64);
    assert!(
        !syncs.is_empty() && syncs.iter().all(|s| s == "all-to-all"),
        "{syncs:?}"
    );
    let padded = "moe_capacity_factor = 1.0\nmoe_pad_to_capacity = true";
    let (tokens, syncs) = look(&moe("drop-pad-1", padded));
    assert_eq!(tokens, 8192);
    assert!(syncs.is_empty(), "{syncs:?}");
    let (tokens, _) = look(&moe("drop-pad-125", &padded.replace("1.0", "1.25")));
    assert_eq!(tokens, 10240);
    let (tokens, syncs) = look(&moe("drop-125", "moe_capacity_factor = 1.25"));
    assert_eq!(tokens, 10240);
    assert!(
        !syncs.is_empty() && syncs.iter().all(|s| s == "moe_permute"),
        "{syncs:?}"
    );
    let (tokens, _) = look(&moe("drop-half", "moe_capacity_factor = 0.5"));
    assert_eq!(tokens, 4096);
}

/// Megatron-Core's `--moe-shared-expert-overlap` (`moe_layer.py`, `shared_experts.py`): the
/// shared experts' fc1 and activation run while the dispatch all-to-all is in flight and fc2
/// while the combine's is, not after the routed experts. In the program the shared fc1 is
/// issued after the dispatch without waiting for it, the routed experts wait for it; timed
/// with all-to-alls of a fixed 1 ms, the iteration is shorter, by at most what the shared
/// experts' forwards cost on the pipeline's stages together (its critical path crosses each op
/// once).
#[test]
fn shared_experts_run_beside_the_moe_all_to_alls_when_overlapped() {
    let workload = |overlap: bool| {
        moe_workload(
            &format!("shared-overlap-{overlap}"),
            "mixtral-8x7b",
            8,
            "shared_experts = 1",
            &format!("moe_shared_expert_overlap = {overlap}"),
        )
    };
    let first = |p: &Program, name: KernelName| {
        (0..p.ops.len())
            .find(|&i| match p.ops[i].kind {
                OpKind::Compute { kernel } => {
                    let k = &p.kernels[kernel as usize];
                    k.name == name && k.pass == Pass::Forward
                }
                _ => false,
            })
            .unwrap_or_else(|| panic!("a forward {name:?}"))
    };
    let dispatch = |p: &Program| {
        (0..p.ops.len())
            .find(|&i| {
                matches!(
                    p.ops[i].kind,
                    OpKind::Collective {
                        op: CollectiveOp::AllToAll,
                        ..
                    }
                )
            })
            .expect("an all-to-all")
    };
    let (overlapped, plain) = (workload(true), workload(false));
    let p = overlapped.program(0, 0);
    let (a2a, shared, expert) = (
        dispatch(p),
        first(p, KernelName::SharedUp),
        first(p, KernelName::ExpertUp),
    );
    assert!(a2a < shared && shared < expert, "{a2a} {shared} {expert}");
    assert!(!p.deps(shared).contains(&(a2a as u32)));
    assert!(p.deps(expert).contains(&(a2a as u32)));
    let q = plain.program(0, 0);
    assert!(first(q, KernelName::SharedUp) > first(q, KernelName::Unpermute));

    let cost = |p: &Program, op: &sim::workload::Op| {
        SimTime::from_ps(match op.kind {
            OpKind::Collective {
                op: CollectiveOp::AllToAll,
                ..
            } => 1_000_000_000,
            // Every GEMM at its FLOPs (`layer_flops_cost` leaves the MoE module out).
            OpKind::Compute { kernel } => match p.kernels[kernel as usize] {
                ref k if matches!(k.shape, Shape::Gemm { .. }) => k.flops / 1_000_000,
                _ => 0,
            },
            _ => 0,
        })
    };
    let time = |w: &Workload| {
        evaluate(w, 0, &cost)
            .expect("no deadlock")
            .iteration
            .as_ps()
    };
    let shared_forward: u64 = plain
        .programs
        .iter()
        .map(|p| {
            p.ops
                .iter()
                .filter(|op| match op.kind {
                    OpKind::Compute { kernel } => {
                        let k = &p.kernels[kernel as usize];
                        k.pass == Pass::Forward
                            && matches!(
                                k.name,
                                KernelName::SharedUp
                                    | KernelName::SharedActivation
                                    | KernelName::SharedDown
                            )
                    }
                    _ => false,
                })
                .map(|op| cost(p, op).as_ps())
                .sum::<u64>()
        })
        .sum();
    let (with, without) = (time(&overlapped), time(&plain));
    assert!(with < without, "{with} vs {without}");
    assert!(
        without - with <= shared_forward,
        "{without} - {with} > {shared_forward}"
    );
}

/// Megatron-Core's all-to-all dispatcher (`token_dispatcher.py`) gathers over expert TP what
/// the EP all-to-all delivered, and the combine's all-to-all sends what the expert-TP
/// reduce-scatter produced: each waits for the other, not only for the last kernel. Mixtral
/// at TP 2 with SP gathers its TP peer's tokens (expert TP = TP).
#[test]
fn expert_tp_collectives_follow_the_all_to_alls_that_feed_them() {
    let w = moe_workload("etp-order", "mixtral-8x7b", 8, "", "");
    let p = w.program(0, 0);
    let collective = |i: usize| match p.ops[i].kind {
        OpKind::Collective { op, group, .. } => Some((op, group)),
        _ => None,
    };
    let a2a = (0..p.ops.len())
        .find(|&i| collective(i) == Some((CollectiveOp::AllToAll, GroupKind::Ep)))
        .expect("a dispatch all-to-all");
    let gather = (a2a..p.ops.len())
        .find(|&i| matches!(collective(i), Some((CollectiveOp::AllGather, _))))
        .expect("an expert-TP all-gather");
    assert_eq!(p.deps(gather), &[a2a as u32]);
    let scatter = (gather..p.ops.len())
        .find(|&i| matches!(collective(i), Some((CollectiveOp::ReduceScatter, _))))
        .expect("an expert-TP reduce-scatter");
    let combine = (scatter..p.ops.len())
        .find(|&i| collective(i) == Some((CollectiveOp::AllToAll, GroupKind::Ep)))
        .expect("a combine all-to-all");
    assert_eq!(p.deps(combine), &[scatter as u32]);
}

/// Transformer Engine's userbuffers hold SMs back from the GEMMs they overlap: the counts of
/// a recipe (NeMo's GPT-3 175B H100 configuration, as dgxc-benchmarking v24.11.1's
/// `gpt3_175b_hydra.yaml` sets it: output projection and fc2 forward 24 and 20, bulk 0), TE
/// 2.x's defaults where a recipe states none (16 for the pipeline and bulk overlaps), TE 1.x's
/// (none), and nothing without TP communication overlap or sequence parallelism.
#[test]
fn userbuffer_overlaps_hold_sms_back_from_their_gemms_as_the_recipe_and_te_release_say() {
    let held = |training: &str, sp: bool| {
        let exp = experiment(
            &format!("ub-sms-{}", training.len()),
            &tp4_pp4_on_64(1, sp, training),
        );
        let w = compile(&exp).expect("compile");
        let mut by_gemm = std::collections::BTreeMap::new();
        for k in &w.program(0, 0).kernels {
            if let Shape::Gemm { comm_sms, .. } = k.shape {
                let seen = by_gemm.entry((k.name, k.pass)).or_insert(comm_sms);
                assert_eq!(
                    *seen, comm_sms,
                    "{:?} {:?} differs between layers",
                    k.name, k.pass
                );
            }
        }
        by_gemm
    };
    let recipe = held(
        "tp_comm_overlap = true\ntransformer_engine = \"1.7\"\n\
         tp_comm_overlap_sms = { qkv_dgrad = 0, qkv_wgrad = 0, fc1_dgrad = 0, fc1_wgrad = 0, proj_fprop = 24, fc2_fprop = 20 }",
        true,
    );
    assert_eq!(recipe[&(KernelName::OutProj, Pass::Forward)], 24);
    assert_eq!(recipe[&(KernelName::MlpDown, Pass::Forward)], 20);
    for gemm in [
        (KernelName::QkvProj, Pass::Forward),
        (KernelName::QkvProj, Pass::Dgrad),
        (KernelName::QkvProj, Pass::Wgrad),
        (KernelName::MlpUp, Pass::Wgrad),
        (KernelName::OutProj, Pass::Wgrad),
        (KernelName::MlpDown, Pass::Dgrad),
    ] {
        assert_eq!(recipe[&gemm], 0, "{gemm:?}");
    }
    let te2 = held("tp_comm_overlap = true\ntransformer_engine = \"2.0\"", true);
    assert_eq!(te2[&(KernelName::QkvProj, Pass::Wgrad)], 16);
    assert_eq!(te2[&(KernelName::MlpUp, Pass::Dgrad)], 16);
    assert_eq!(te2[&(KernelName::OutProj, Pass::Forward)], 16);
    assert_eq!(te2[&(KernelName::MlpUp, Pass::Forward)], 0);
    let te1 = held(
        "tp_comm_overlap = true\ntransformer_engine = \"1.13\"",
        true,
    );
    assert!(te1.values().all(|&s| s == 0), "{te1:?}");
    let no_overlap = held("transformer_engine = \"2.0\"", true);
    assert!(no_overlap.values().all(|&s| s == 0), "{no_overlap:?}");
    let no_sp = held(
        "tp_comm_overlap = true\ntransformer_engine = \"2.0\"",
        false,
    );
    assert!(no_sp.values().all(|&s| s == 0), "{no_sp:?}");
}

/// `model.qk_layernorm` adds Megatron-Core's `q_layernorm` and `k_layernorm` to every layer:
/// a norm over this TP rank's query heads and one over its key heads after the QKV
/// projection, of the model's norm kind, forward and backward; without it there are none.
#[test]
fn qk_layernorm_norms_each_layers_queries_and_keys() {
    let count = |model: &str| {
        let w = moe_workload("qk", "qwen3-30b-a3b", 8, model, "");
        let mut by_pass = std::collections::BTreeMap::new();
        // The first stage's program.
        for p in &w.programs[..1] {
            for (_, k) in launches(p, KernelName::QkNorm) {
                let Shape::Elementwise { elements, .. } = k.shape else {
                    panic!("a norm is elementwise");
                };
                by_pass
                    .entry((k.pass, elements))
                    .and_modify(|n| *n += 1)
                    .or_insert(1u32);
            }
        }
        (w.programs[0].micro_batches, by_pass)
    };
    let (micro_batches, normed) = count("qk_layernorm = true");
    // Qwen3-30B-A3B: 32 query and 4 key heads of 128 over TP 2, the sequence's 4,096 tokens,
    // RMSNorm's one pass; 8 layers over PP 2 put 4 on each stage.
    let tokens = 4096;
    let q = tokens * 32 * 128 / 2;
    let k = tokens * 4 * 128 / 2;
    let per_pass = 4 * micro_batches;
    for pass in [Pass::Forward, Pass::Backward] {
        for elements in [q, k] {
            assert_eq!(
                normed.get(&(pass, elements)),
                Some(&per_pass),
                "{pass:?} {elements}: {normed:?}"
            );
        }
    }
    assert_eq!(normed.len(), 4, "{normed:?}");
    let (_, plain) = count("qk_layernorm = false");
    assert!(plain.is_empty(), "{plain:?}");
}

/// Sliding-window attention as Megatron-Core places it (`window_size = (128, 0)`,
/// `window_attn_skip_freq = 2`: layers 1, 3, ... counted from 1 use the window): a windowed
/// layer's fused attention covers each query and the 128 tokens before it, a full layer the
/// causal sequence, and Megatron-LM's FLOP accounting counts both alike.
#[test]
fn sliding_window_layers_attend_over_their_band_only() {
    let w = moe_workload("window", "gpt-oss-120b", 8, "", "");
    let exp = moe_experiment("window", "gpt-oss-120b", 8, "", "");
    let model = exp.model.as_ref().expect("a model");
    let seq = model.seq_len;
    let mut seen = [0u32; 2];
    for p in &w.programs {
        for (op, k) in launches(p, KernelName::CoreAttention) {
            if k.pass != Pass::Forward {
                continue;
            }
            let Shape::Attention { seq_kv, causal, .. } = k.shape else {
                panic!("core attention has an attention shape");
            };
            let layer = u64::from(op.label.layer);
            let windowed = (layer + 1) % 2 != 0;
            assert_eq!(
                model.attention_window(layer).is_some(),
                windowed,
                "layer {}",
                op.label.layer
            );
            if windowed {
                assert_eq!((seq_kv, causal), (129, false), "layer {}", op.label.layer);
            } else {
                assert_eq!((seq_kv, causal), (seq, true), "layer {}", op.label.layer);
            }
            seen[usize::from(windowed)] += 1;
            // Megatron-LM's accounting: the whole s × s matrix whatever the window.
            let heads = model.heads / 2;
            let per_rank_tokens = seq;
            assert_eq!(
                k.flops,
                4 * per_rank_tokens * seq * heads * model.head_dim,
                "layer {}",
                op.label.layer
            );
        }
    }
    assert!(seen[0] > 0 && seen[1] > 0, "both kinds of layer: {seen:?}");
    // The band's executed work is (window + 1) / (seq / 2) of the causal layer's.
    let band = Shape::Attention {
        batch: 1,
        heads: 32,
        kv_heads: 4,
        seq_q: seq,
        seq_kv: 129,
        head_dim: 64,
        causal: false,
        flash: true,
        dropout: false,
    };
    let kernel = |shape| sim::workload::Kernel {
        name: KernelName::CoreAttention,
        pass: Pass::Forward,
        shape,
        flops: 0,
        bytes: 0,
        dtype: sim::config::Precision::Bf16,
    };
    let full = Shape::Attention {
        batch: 1,
        heads: 32,
        kv_heads: 4,
        seq_q: seq,
        seq_kv: seq,
        head_dim: 64,
        causal: true,
        flash: true,
        dropout: false,
    };
    let ratio =
        sim::compute::executed_flops(&kernel(band)) / sim::compute::executed_flops(&kernel(full));
    assert_close(
        ratio,
        129.0 / (seq as f64 / 2.0),
        1e-12,
        "band over causal work",
    );
}

/// `model.moe_layer_freq` as Megatron-Core reads it: an integer N makes layers 0, N, 2N, ...
/// MoE layers; a list names them. Only those layers route tokens.
#[test]
fn moe_layer_freq_makes_only_the_named_layers_moe() {
    for (freq, moe_layers) in [
        ("2", vec![0u64, 2, 4, 6]),
        ("[0, 1, 0, 1, 0, 1, 0, 1]", vec![1, 3, 5, 7]),
        ("3", vec![0, 3, 6]),
    ] {
        let model = format!("moe_layer_freq = {freq}");
        let exp = moe_experiment("moe-freq", "mixtral-8x7b", 8, &model, "");
        let spec = exp.model.as_ref().expect("a model");
        let named: Vec<u64> = (0..8).filter(|&l| spec.is_moe_layer(l)).collect();
        assert_eq!(named, moe_layers, "moe_layer_freq = {freq}");
        let w = compile(&exp).expect("compile");
        let mut routed: Vec<u64> = w
            .programs
            .iter()
            .flat_map(|p| p.ops.iter())
            .filter(|op| op.label.module == Module::Moe)
            .map(|op| u64::from(op.label.layer))
            .collect();
        routed.sort_unstable();
        routed.dedup();
        assert_eq!(
            routed, moe_layers,
            "layers with MoE ops, moe_layer_freq = {freq}"
        );
    }
}

/// Transformer Engine quantizes a grouped GEMM's input one expert's split at a time except
/// under delayed scaling (`split_quantize`: `multi_tensor_quantize_impl` fuses only delayed
/// scaling), and current scaling launches three kernels a tensor (amax, scale, cast). Mixtral
/// with EP 2 has 4 local experts: every expert cast is 12 launches under current scaling and
/// one under delayed scaling, the bytes alike; a dense GEMM's cast is 3 and 1.
#[test]
fn grouped_gemm_inputs_are_quantized_expert_by_expert_in_current_scaling() {
    let casts = |recipe: &str| -> Vec<(bool, u32, u64)> {
        let w = moe_workload(
            &format!("split-quantize-{recipe}"),
            "mixtral-8x7b",
            2,
            "",
            &format!("precision = \"fp8\"\nfp8_recipe = \"{recipe}\""),
        );
        let p = &w.programs[0];
        let mut out: Vec<(bool, u32, u64)> = p
            .ops
            .iter()
            .filter_map(|op| match op.kind {
                OpKind::Compute { kernel } => {
                    let k = &p.kernels[kernel as usize];
                    match (k.name, k.shape) {
                        (KernelName::Fp8Cast, Shape::Elementwise { kernels, .. }) => {
                            Some((op.label.module == Module::Moe, kernels, k.bytes))
                        }
                        _ => None,
                    }
                }
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    };
    let current = casts("current");
    let delayed = casts("delayed");
    assert!(current.iter().any(|c| c.0) && current.iter().any(|c| !c.0));
    for (expert, kernels, _) in &current {
        assert_eq!(*kernels, if *expert { 12 } else { 3 }, "current scaling");
    }
    for (_, kernels, _) in &delayed {
        assert_eq!(*kernels, 1, "delayed scaling");
    }
}

/// Megatron-Core's `TEGroupedMLP` pads each expert's tokens to the FP8 GEMM's alignment with
/// Transformer Engine's `Fp8Padding` and copies the output back with `Fp8Unpadding`
/// (`moe/experts.py`, `module/fp8_padding.py`): per MoE layer, a copy of the experts' input
/// and one of the router's probabilities before fc1, one of the output after fc2, and autograd's
/// three in the backward, each value read and written once. BF16 runs them not, nor does a
/// router that pads its routing map (`--moe-router-padding-for-quantization`).
#[test]
fn fp8_expert_tokens_are_padded_and_unpadded_unless_the_router_pads_them() {
    let paddings = |name: &str, training: &str| -> Vec<(Pass, u64, u64)> {
        let w = moe_workload(name, "mixtral-8x7b", 2, "", training);
        let p = &w.programs[0];
        p.ops
            .iter()
            .filter_map(|op| match op.kind {
                OpKind::Compute { kernel } => {
                    let k = &p.kernels[kernel as usize];
                    let Shape::Elementwise { elements, .. } = k.shape else {
                        return None;
                    };
                    (k.name == KernelName::ExpertPadding).then_some((k.pass, elements, k.bytes))
                }
                _ => None,
            })
            .collect()
    };
    let fp8 = paddings("pad-fp8", "precision = \"fp8\"");
    // Mixtral: 8 experts, top 2; TP 2 with SP and EP 2 (4 local experts): a micro-batch's
    // 4,096 tokens, 2,048 per TP rank, 4,096 routed copies per rank, every copy of hidden 4,096
    // copied once each way in BF16 (2 bytes read, 2 written).
    let hidden = 4096;
    let layers_per_stage = 4;
    let micro_batches = 32 / 16;
    let per_layer = |pass: Pass| fp8.iter().filter(|k| k.0 == pass).count();
    assert_eq!(
        per_layer(Pass::Forward),
        3 * layers_per_stage * micro_batches
    );
    assert_eq!(
        per_layer(Pass::Backward),
        3 * layers_per_stage * micro_batches
    );
    let tokens = fp8.iter().map(|k| k.1).min().unwrap();
    let copies: Vec<_> = fp8.iter().filter(|k| k.1 > tokens).collect();
    assert!(!copies.is_empty());
    for (_, elements, bytes) in copies {
        assert_eq!(*elements, tokens * hidden);
        assert_eq!(*bytes, 4 * tokens * hidden);
    }
    assert!(tokens >= 4096, "{tokens} routed copies");
    assert!(paddings("pad-bf16", "precision = \"bf16\"").is_empty());
    assert!(
        paddings(
            "pad-router",
            "precision = \"fp8\"\nmoe_router_padding_for_quantization = true"
        )
        .is_empty()
    );
}

/// The all-to-all dispatcher sizes its all-to-alls from every EP rank's tokens per expert,
/// all-gathered before the permutation (`MoEAlltoAllTokenDispatcher.preprocess`:
/// `gather_from_sequence_parallel_region(num_local_tokens_per_expert, group=tp_ep_group)`):
/// an int64 per expert and rank in every forward of a dropless MoE layer, none when padded to
/// capacity (every size known) or when DeepEP exchanges the counts in its own kernels. With
/// the router padding the routing map for FP8 the host reads the padded count before the
/// permutation instead of before the all-to-all (`"before_permutation_1"`).
#[test]
fn the_alltoall_dispatcher_gathers_token_counts_and_router_padding_syncs_before_permuting() {
    let look = |name: &str, model: &str, training: &str| -> (Vec<u64>, Vec<String>) {
        let w = moe_workload(name, "mixtral-8x7b", 8, model, training);
        let p = w.program(0, 0);
        let gathers = p
            .ops
            .iter()
            .filter_map(|o| match o.kind {
                OpKind::Collective {
                    op: CollectiveOp::AllGather,
                    group: GroupKind::Ep,
                    bytes,
                } if o.label.module == Module::Moe => Some(bytes),
                _ => None,
            })
            .collect();
        (gathers, moe_host_syncs(p))
    };
    // Mixtral: 8 experts, EP 8; 4 MoE layers per stage, 2 micro-batches.
    let (gathers, syncs) = look("counts-alltoall", "", "");
    assert_eq!(gathers, vec![8 * 8 * 8; 4 * 2]);
    assert!(syncs.iter().all(|s| s == "all-to-all") && syncs.len() == 8);
    let (gathers, _) = look("counts-deepep", "", "moe_token_dispatcher = \"deepep\"");
    assert!(gathers.is_empty());
    let padded = "moe_capacity_factor = 1.0\nmoe_pad_to_capacity = true";
    let (gathers, _) = look("counts-padded", padded, "");
    assert!(gathers.is_empty());
    let router_pads = "precision = \"fp8\"\nmoe_router_padding_for_quantization = true";
    let (gathers, syncs) = look("counts-router-pads", "", router_pads);
    assert_eq!(gathers.len(), 8);
    assert!(
        syncs.iter().all(|s| s == "moe_permute") && syncs.len() == 8,
        "{syncs:?}"
    );
    // In BF16 the router pads nothing.
    let (_, syncs) = look(
        "counts-router-pads-bf16",
        "",
        "moe_router_padding_for_quantization = true",
    );
    assert!(syncs.iter().all(|s| s == "all-to-all"), "{syncs:?}");
}

/// `training.cross_entropy_fusion`: the loss's cross entropy reads and writes each logit as
/// Megatron-Core's PyTorch ops (38 bytes forward in three passes, 14 backward), its
/// `jit_fuser` functions (22 and 6) or Transformer Engine's Triton kernels (6 in two passes,
/// 4 backward) do; only the last stage runs it.
#[test]
fn cross_entropy_reads_and_writes_each_logit_as_its_implementation_does() {
    let traffic = |fusion: &str| {
        let w = moe_workload(
            "ce",
            "qwen3-30b-a3b",
            8,
            "",
            &format!("cross_entropy_fusion = \"{fusion}\""),
        );
        let mut by_pass = std::collections::BTreeMap::new();
        for (stage, p) in w.programs.iter().enumerate() {
            for (_, k) in launches(p, KernelName::CrossEntropy) {
                assert_eq!(
                    stage,
                    w.programs.len() - 1,
                    "only the last stage has the loss"
                );
                let entry = by_pass.entry(k.pass).or_insert((0u64, 0u32));
                entry.0 += k.bytes;
                entry.1 += 1;
            }
        }
        let micro_batches = w.programs.last().expect("a stage").micro_batches;
        // Qwen3-30B-A3B's 151,936-word vocabulary over TP 2, 4,096 tokens per micro-batch.
        let logits = 4096 * 151_936 / 2;
        by_pass
            .into_iter()
            .map(|(pass, (bytes, kernels))| {
                (
                    pass,
                    bytes / (logits * u64::from(micro_batches)),
                    kernels / micro_batches,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        traffic("none"),
        [(Pass::Forward, 38, 3), (Pass::Backward, 14, 1)]
    );
    assert_eq!(
        traffic("native"),
        [(Pass::Forward, 22, 3), (Pass::Backward, 6, 1)]
    );
    assert_eq!(
        traffic("te"),
        [(Pass::Forward, 6, 2), (Pass::Backward, 4, 1)]
    );
}
