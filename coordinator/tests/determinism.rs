//! The result digest does not depend on how the simulation is split (issue 4, "Determinism"):
//! random small clusters, workloads and seeds, run on 1, 2, 3 and 8 in-process workers with 1
//! or 2 threads each, under every partition strategy and random LP→partition maps, with a
//! barrier per window and with asynchronous scheduling.

mod support;

use coordinator::embedded;
use proptest::prelude::*;
use sim_ir::hash::splitmix64;
use sim_ir::time::SimTime;
use support::*;

#[derive(Debug, Clone)]
struct Case {
    topology: &'static str,
    gpus: u32,
    gpus_per_host: u32,
    tp: u32,
    pp: u32,
    network: &'static str,
    intra_host: &'static str,
    segment_bytes: u64,
    cc: &'static str,
    /// Leaf uplinks this many times thinner than their downlinks: deep queues at the
    /// leaves, where segments wait behind others (a port's queue is state its events
    /// do not promise).
    oversubscription: u32,
    seed: u64,
}

impl Case {
    fn toml(&self) -> String {
        let dp = self.gpus / (self.tp * self.pp);
        format!(
            r#"
name = "determinism"
[cluster]
gpus = {gpus}
gpus_per_host = {gph}
gpu = "H100-SXM"
topology = "{topology}"
nics_per_host = {gph}
nic_gbps = 400
hosts_per_rack = 2
hosts_per_segment = 2
oversubscription = {oversub}
[model]
layers = 4
hidden = 256
ffn_hidden = 1024
heads = 4
kv_heads = 4
seq_len = 256
vocab = 2048
[parallel]
tp = {tp}
pp = {pp}
micro_batch = 1
global_batch = {gbs}
[network]
model = "{network}"
intra_host = "{intra}"
segment_bytes = {seg}
congestion_control = "{cc}"
[engine]
seed = {seed}
"#,
            gpus = self.gpus,
            gph = self.gpus_per_host,
            topology = self.topology,
            tp = self.tp,
            pp = self.pp,
            gbs = dp * 2 * self.pp,
            network = self.network,
            intra = self.intra_host,
            seg = self.segment_bytes,
            cc = self.cc,
            oversub = self.oversubscription,
            seed = self.seed,
        )
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec!["rail-optimized", "spine-leaf", "fat-tree"]),
        prop::sample::select(vec![(16u32, 4u32), (16, 8), (32, 8)]),
        prop::sample::select(vec![(1u32, 1u32), (2, 1), (2, 2), (4, 2), (1, 4)]),
        prop::sample::select(vec![
            ("packet", "analytical"),
            ("packet", "packet"),
            ("analytical", "analytical"),
            ("flow", "analytical"),
            ("flow", "flow"),
        ]),
        prop::sample::select(vec![65536u64, 262144]),
        prop::sample::select(vec!["none", "dcqcn"]),
        prop::sample::select(vec![1u32, 1, 4]),
        0u64..1000,
    )
        .prop_map(
            |(
                topology,
                (gpus, gpus_per_host),
                (tp, pp),
                (network, intra_host),
                seg,
                cc,
                oversubscription,
                seed,
            )| {
                Case {
                    topology,
                    gpus,
                    gpus_per_host,
                    tp,
                    pp,
                    network,
                    intra_host,
                    segment_bytes: seg,
                    cc,
                    oversubscription,
                    seed,
                }
            },
        )
}

/// A random LP→partition map over `k` partitions.
fn random_map(nodes: usize, k: u32, seed: u64) -> Vec<u32> {
    (0..nodes as u64)
        .map(|i| (splitmix64(seed ^ splitmix64(i)) % u64::from(k)) as u32)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn the_digest_is_the_same_however_the_run_is_split(case in case(), map_seed in 0u64..1000) {
        same_digest_however_split(&case, map_seed)?;
    }
}

/// Cases the random search has failed on, kept so that they run every time.
#[test]
fn the_digest_is_the_same_for_cases_that_once_failed() {
    let cases = [(
        Case {
            topology: "rail-optimized",
            gpus: 16,
            gpus_per_host: 8,
            tp: 1,
            pp: 4,
            network: "packet",
            intra_host: "packet",
            segment_bytes: 65536,
            cc: "none",
            oversubscription: 1,
            seed: 106,
        },
        38,
    )];
    for (case, map_seed) in cases {
        if let Err(e) = same_digest_however_split(&case, map_seed) {
            panic!("{case:?}, map_seed {map_seed}: {e}");
        }
    }
}

/// The layer shape of the small MoE cases: four heads of 64, a 512-wide FFN, 256 tokens.
const SMALL_TRANSFORMER: &str = "hidden = 256
ffn_hidden = 512
heads = 4
kv_heads = 4
seq_len = 256
vocab = 2048
";

/// MoE parallel folding with expert TP below TP (its own expert-TP groups), a multi-token
/// prediction module and a pipeline layout, at the packet and flow models: the group kinds
/// and layers of issue 16 split like the others.
#[test]
fn folded_experts_and_mtp_give_one_digest_however_split() {
    same_digest_at_packet_and_flow(
        "determinism-moe",
        &format!(
            r#"
[model]
layers = 4
{SMALL_TRANSFORMER}experts = 8
top_k = 2
mtp_layers = 1
[parallel]
tp = 4
pp = 2
ep = 2
etp = 2
sequence_parallel = true
micro_batch = 1
global_batch = 8
pipeline_layout = "Et|t*3mL"
"#
        ),
        7,
        11,
    );
}

/// DeepEP's dispatch and combine with group-limited routing, EP 8 over the four hosts:
/// sends of two sizes, to the host's members and to one rail peer per other host, split
/// every way at the packet and flow models.
#[test]
fn deepep_dispatch_gives_one_digest_however_split() {
    same_digest_at_packet_and_flow(
        "determinism-deepep",
        &format!(
            r#"
[model]
layers = 2
{SMALL_TRANSFORMER}experts = 16
top_k = 4
moe_router_num_groups = 4
moe_router_group_topk = 2
[parallel]
tp = 2
pp = 1
ep = 8
micro_batch = 1
global_batch = 8
sequence_parallel = true
[training]
moe_token_dispatcher = "deepep"
"#
        ),
        3,
        17,
    );
}

/// The expert-parallel all-to-all overlap (combined 1F1B): a forward's and another
/// micro-batch's backward all-to-alls in flight together on one communicator, beside the
/// other's kernels, interleaved over two pipeline stages of two virtual stages, with delayed
/// weight gradients. Packet and flow, split every way.
#[test]
fn combined_1f1b_all_to_all_overlap_gives_one_digest_however_split() {
    same_digest_at_packet_and_flow(
        "determinism-ep-overlap",
        &format!(
            r#"
[model]
layers = 4
{SMALL_TRANSFORMER}experts = 8
top_k = 2
[parallel]
tp = 1
pp = 2
vp = 2
ep = 8
micro_batch = 1
global_batch = 32
[training]
overlap_moe_expert_parallel_comm = true
delay_wgrad_compute = true
"#
        ),
        5,
        23,
    );
}

/// FP8 delayed scaling's amax all-reduces run on their own communicator beside the DP
/// group's gradient buckets: two collectives of one group at once, with different channel
/// counts (a 1-channel LL all-reduce beside an 8-channel bucket). Their lane rings and trees
/// are kept per lane count; when one cache served both, the bucket's ring lost its lanes
/// and every rank deadlocked at the packet model. Packet and flow, split every way.
#[test]
fn fp8_amaxes_beside_gradient_buckets_give_one_digest_however_split() {
    same_digest_at_packet_and_flow(
        "determinism-amax",
        r#"
[model]
layers = 4
hidden = 512
ffn_hidden = 2048
heads = 8
kv_heads = 8
seq_len = 512
vocab = 4096
[parallel]
tp = 2
pp = 2
vp = 2
sequence_parallel = true
micro_batch = 1
global_batch = 16
[training]
precision = "fp8"
overlap_grad_reduce = true
overlap_param_gather = true
"#,
        5,
        13,
    );
}

/// An experiment `name` of `body` (its model, parallel and training tables) on 16 H100s in
/// four hosts of a rail-optimized fabric, at the packet and the flow models: one digest
/// whole and split every way.
fn same_digest_at_packet_and_flow(name: &str, body: &str, seed: u64, map_seed: u64) {
    for network in ["packet", "flow"] {
        let toml = format!(
            r#"
name = "{name}"
[cluster]
gpus = 16
gpus_per_host = 4
gpu = "H100-SXM"
topology = "rail-optimized"
nics_per_host = 4
nic_gbps = 400
hosts_per_segment = 2
{body}
[network]
model = "{network}"
segment_bytes = 65536
[engine]
seed = {seed}
"#
        );
        if let Err(e) = same_digest_for(&toml, seed, map_seed, network) {
            panic!("{network}: {e}");
        }
    }
}

fn same_digest_however_split(case: &Case, map_seed: u64) -> Result<(), TestCaseError> {
    same_digest_for(&case.toml(), case.seed, map_seed, &format!("{case:?}"))
}

/// Runs the experiment `toml` whole, then split every way, and checks one digest;
/// `what` names the case in failures.
fn same_digest_for(toml: &str, seed: u64, map_seed: u64, what: &str) -> Result<(), TestCaseError> {
    let case = what;
    {
        let exp = experiment(toml);
        let m = model(&exp);
        let topo = &m.topology;
        let nodes = topo.nodes().len();
        let by_host = partitioner::by_host(topo).partition_of;
        let (_, base) = run_with(model(&exp), by_host.clone(), 1, 1);
        let digest = base.digest();
        let iteration = base.iteration_ps().expect("the baseline finishes");
        prop_assert!(iteration > SimTime::ZERO);

        let mut splits: Vec<(String, Vec<u32>, u32, usize)> = Vec::new();
        for (workers, threads) in [(1, 2), (2, 1), (3, 2), (8, 1), (8, 2)] {
            splits.push((
                format!("by-host {workers}x{threads}"),
                by_host.clone(),
                workers,
                threads,
            ));
        }
        let load = partitioner::Load::estimate(topo, &m.workload, &m.net.segmenting());
        for strategy in partitioner::names() {
            for parts in [0, 3] {
                match partitioner::partition(topo, strategy, parts, &load, seed) {
                    Ok(a) => splits.push((format!("{strategy} k={parts}"), a.partition_of, 2, 2)),
                    // by-rail on a fabric without rails says so.
                    Err(e) => prop_assert!(strategy == "by-rail", "{}: {}", strategy, e),
                }
            }
        }
        for (k, workers) in [(3u32, 3u32), (17, 8), (nodes as u32, 2)] {
            splits.push((
                format!("random k={k}"),
                random_map(nodes, k, map_seed + u64::from(k)),
                workers,
                2,
            ));
        }
        for (name, map, workers, threads) in splits {
            let (_, r) = run_with(model(&exp), map, workers, threads);
            prop_assert_eq!(r.digest(), digest.clone(), "{} differs for {}", name, case);
            prop_assert_eq!(r.iteration_ps(), Ok(iteration));
        }
        // Asynchronous scheduling: windows wider than the lookahead on one worker (threads
        // kept in step by promises), a window per lookahead on several.
        for (name, map, workers, threads) in [
            ("by-host", by_host.clone(), 1, 1),
            ("by-host", by_host.clone(), 1, 2),
            ("by-host", by_host.clone(), 1, 3),
            ("by-host", by_host.clone(), 3, 2),
            ("random k=17", random_map(nodes, 17, map_seed), 1, 2),
            ("random k=17", random_map(nodes, 17, map_seed), 2, 3),
            // A thread with no partition of its own.
            ("random k=2", random_map(nodes, 2, map_seed), 1, 3),
        ] {
            let split = embedded::Split {
                scheduling: worker::Scheduling::Asynchronous,
                ..embedded::Split::new(workers, threads)
            };
            let (_, r) = run_scheduled(model(&exp), map, split);
            prop_assert_eq!(
                r.digest(),
                digest.clone(),
                "asynchronous {} {}x{} differs for {}",
                name,
                workers,
                threads,
                case
            );
            prop_assert_eq!(r.iteration_ps(), Ok(iteration));
        }
    }
    Ok(())
}
