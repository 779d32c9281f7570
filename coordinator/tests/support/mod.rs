//! Shared helpers of the engine tests: experiments from TOML text, flow-only models, runs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use coordinator::embedded;
use sim::experiment::Experiment;
use sim_engine::gpu::{flow_hash, injected_tag};
use sim_engine::{FlowSpec, RunResults, SimModel};
use sim_models::topology::Link;

/// Loads an experiment written as TOML text (through a real file, as users do).
pub fn experiment(toml: &str) -> Experiment {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "fleetsim-engine-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("exp.toml");
    std::fs::write(&path, toml).expect("write experiment");
    let exp = Experiment::load(&path, &sim_config::Overrides::none())
        .unwrap_or_else(|e| panic!("{e}\n{toml}"));
    let _ = std::fs::remove_dir_all(&dir);
    exp
}

/// The experiment's model with its workload compiled and timed.
pub fn model(exp: &Experiment) -> SimModel {
    SimModel::from_experiment(exp, false).expect("model")
}

/// A model whose GPUs run nothing but `flows`.
pub fn flow_model(exp: &Experiment, flows: Vec<FlowSpec>) -> SimModel {
    model(exp).only_flows(flows)
}

/// Runs `model` with `partition_of` on `workers` × `threads`.
pub fn run_with(
    model: SimModel,
    partition_of: Vec<u32>,
    workers: u32,
    threads: usize,
) -> (Arc<SimModel>, RunResults) {
    run_scheduled(model, partition_of, embedded::Split::new(workers, threads))
}

/// Runs `model` partitioned by `partition_of`, split and scheduled as `split` says.
pub fn run_scheduled(
    model: SimModel,
    partition_of: Vec<u32>,
    split: embedded::Split,
) -> (Arc<SimModel>, RunResults) {
    let (model, results, _) = run_measured(model, partition_of, split);
    (model, results)
}

/// [`run_scheduled`], with the engine's statistics (windows, events).
pub fn run_measured(
    model: SimModel,
    partition_of: Vec<u32>,
    split: embedded::Split,
) -> (Arc<SimModel>, RunResults, embedded::EngineStats) {
    let model = Arc::new(model);
    let assignment = partitioner::Assignment {
        partitions: partition_of.iter().copied().max().unwrap_or(0) + 1,
        partition_of,
    };
    let lookahead = model.lookahead(partitioner::lookahead(&model.topology, &assignment));
    let (results, stats) = embedded::run(
        Arc::clone(&model),
        assignment.partition_of,
        lookahead,
        split,
        None,
        None,
    )
    .expect("run");
    (model, results, stats)
}

/// Runs `model` partitioned by host on one worker and thread.
pub fn run(model: SimModel) -> (Arc<SimModel>, RunResults) {
    let partition_of = partitioner::by_host(&model.topology).partition_of;
    run_with(model, partition_of, 1, 1)
}

/// Arrival time of every injected flow in ps, by index.
pub fn arrivals(results: &RunResults) -> BTreeMap<u32, u64> {
    results
        .reports
        .iter()
        .flat_map(|(_, r)| r.flow_arrivals.iter().map(|&(i, t)| (i, t.as_ps())))
        .collect()
}

/// The links injected flow `index` from GPU `src` to GPU `dst` takes: the path of its ECMP
/// hash, as the engine routes it.
pub fn flow_links(model: &SimModel, src: u32, dst: u32, index: u32) -> Vec<Link> {
    let topo = &model.topology;
    let (s, d) = (topo.gpu(src), topo.gpu(dst));
    let hash = flow_hash(model.seed, s, d, injected_tag(index));
    let path = topo.path(s, d, hash).expect("a route");
    path.iter().map(|&l| topo.link(l)).collect()
}

/// The lowest bandwidth of `links`, bytes per second.
pub fn slowest_bytes_per_s<'a>(links: impl IntoIterator<Item = &'a Link>) -> f64 {
    links
        .into_iter()
        .map(|l| l.bytes_per_s)
        .fold(f64::INFINITY, f64::min)
}

/// Hosts with one H100 and one 400 Gb/s NIC each, `hosts_per_rack` per leaf, two spines,
/// a two-layer model; `network` is the `[network]` table's body.
pub fn one_gpu_hosts(name: &str, gpus: u32, hosts_per_rack: u32, network: &str) -> String {
    format!(
        r#"
name = "{name}"
[cluster]
gpus = {gpus}
gpus_per_host = 1
gpu = "H100-SXM"
topology = "spine-leaf"
nics_per_host = 1
nic_gbps = 400
hosts_per_rack = {hosts_per_rack}
[model]
layers = 2
hidden = 256
ffn_hidden = 1024
heads = 4
kv_heads = 4
seq_len = 128
vocab = 1024
[parallel]
tp = 1
pp = 1
micro_batch = 1
global_batch = {gpus}
[network]
{network}
"#
    )
}

/// An injected flow of `bytes` from GPU `src` to GPU `dst`, starting at `start_ps`.
pub fn flow(src: u32, dst: u32, bytes: u64, start_ps: u64) -> FlowSpec {
    FlowSpec {
        src,
        dst,
        bytes,
        start: sim_ir::time::SimTime::from_ps(start_ps),
    }
}

/// 16 hosts of 8 GPUs: TP 8 inside a host, PP 4 × DP 4 across hosts, so host `h` holds
/// stage `h / 4` of data-parallel replica `h % 4` (order tp-cp-ep-dp-pp).
pub fn pipelines(network: &str, global_batch: u32) -> String {
    format!(
        r#"
name = "pipelines"
[cluster]
gpus = 128
gpu = "H100-SXM"
topology = "rail-optimized"
hosts_per_segment = 4
[model]
layers = 8
hidden = 1024
ffn_hidden = 4096
heads = 8
seq_len = 1024
vocab = 4096
[parallel]
tp = 8
pp = 4
micro_batch = 1
global_batch = {global_batch}
[network]
model = "{network}"
"#
    )
}
