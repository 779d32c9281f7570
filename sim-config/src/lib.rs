//! The experiment file (SPEC.md, "Experiment file"): typed sections, loading and validation.
//!
//! Loading goes file → located tree (every value knows its file and line) → includes merged →
//! overrides applied (`--set`, `--vary`, a plan candidate, ...) → presets expanded → typed
//! structs. Every error names where the bad value was
//! written.

pub mod embedded;
pub mod model;
mod overrides;
mod source;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use overrides::Overrides;
pub use sim_ir::precision::Precision;
pub use source::{
    Located, MAX_EXPERIMENT_BYTES, Origin, PathSegment, Value, parse_path, parse_text, parse_typed,
    set_value,
};

/// One clear error about the configuration: where, which key, what is wrong and how to fix it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ConfigError {
    pub origin: Origin,
    /// Dotted key, empty when the whole file is at fault.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.origin, self.message)
        } else {
            write!(f, "{}: `{}`: {}", self.origin, self.key, self.message)
        }
    }
}

impl ConfigError {
    pub fn new(origin: Origin, key: &str, message: impl Into<String>) -> Self {
        ConfigError {
            origin,
            key: key.to_string(),
            message: message.into(),
        }
    }

    /// An error about a whole file.
    pub fn at_file(file: &str, message: impl Into<String>) -> Self {
        Self::new(
            Origin::WholeFile(file.to_string()),
            "",
            format!("file {}", message.into()),
        )
    }

    /// An error about a key of a file whose lines are not tracked.
    pub fn plain(file: &str, key: &str, message: impl Into<String>) -> Self {
        Self::new(Origin::WholeFile(file.to_string()), key, message)
    }
}

/// A whole experiment, as written in SPEC.md.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentConfig {
    pub name: String,
    pub cluster: ClusterConfig,
    /// The model to compile. Required unless `workload_file` names an imported workload,
    /// which brings its own compute and communication (`sim::experiment::Experiment`
    /// refuses an experiment with neither).
    pub model: Option<model::ModelConfig>,
    /// A SimAI workload file to run instead of compiling `model` (`fleetsim workload` imports
    /// it; relative to the experiment file).
    pub workload_file: Option<String>,
    #[serde(default)]
    pub parallel: ParallelConfig,
    #[serde(default)]
    pub training: TrainingConfig,
    #[serde(default)]
    pub network: NetworkConfig,
    #[serde(default)]
    pub collectives: CollectivesConfig,
    #[serde(default)]
    pub engine: EngineConfig,
    #[serde(default)]
    pub compute: ComputeConfig,
    /// `[[faults]]`: links and NICs down or degraded, hosts down, slow GPUs, kernel jitter.
    #[serde(default)]
    pub faults: Vec<FaultConfig>,
    /// `[[jobs]]`: several training jobs sharing the cluster (docs/jobs.md). Empty: one job,
    /// described by the top-level `[model]`, `[parallel]` and `[training]`.
    #[serde(default)]
    pub jobs: Vec<JobConfig>,
}

/// One `[[jobs]]` entry. Its `model`, `parallel` and `training` tables replace the top-level
/// ones for this job (a table it leaves out is the top-level one); they are read with the
/// rest of the job's experiment by `sim::jobs`, so here they are only kept as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    pub name: String,
    /// GPUs, whole hosts; placed by `placement`. Alternative to `hosts`.
    pub gpus: Option<u32>,
    /// The hosts, by index (`[0, 1, 4]`) or as a Slurm host list (`"host[0-15,32-47]"`).
    pub hosts: Option<JobHosts>,
    /// How `gpus` are placed on the hosts no earlier job took. Default: packed.
    pub placement: Option<Placement>,
    /// Seed of `placement = "random"`.
    pub seed: Option<u64>,
    /// Simulated seconds after the run's start that the job starts its iteration (jobs out
    /// of phase). Default 0.
    pub start_s: Option<f64>,
    pub model: Option<serde::de::IgnoredAny>,
    pub parallel: Option<serde::de::IgnoredAny>,
    pub training: Option<serde::de::IgnoredAny>,
}

/// The hosts a job names.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum JobHosts {
    Indices(Vec<u32>),
    List(String),
}

/// A placement policy for a job's hosts (Slurm's `--distribution` and topology plugin, in
/// effect): whole hosts, as Slurm's exclusive allocations give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The lowest-numbered free hosts, one block: the job stays under as few leaves as it can.
    Packed,
    /// Free hosts evenly spaced over the cluster: two spread jobs interleave host by host.
    Spread,
    /// Free hosts drawn at random with `seed` (a fragmented cluster).
    Random,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Packed => "packed",
            Placement::Spread => "spread",
            Placement::Random => "random",
        }
    }
}

/// What a `[[faults]]` entry breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// A cable stops carrying traffic; routing avoids it where the fabric has another path.
    LinkDown,
    /// A cable runs at `factor` of its rate (a flapping optic, lanes lost).
    LinkDegraded,
    /// Every network port of a NIC goes down.
    NicDown,
    /// A host goes down with its GPUs.
    HostDown,
    /// One GPU runs its kernels at `factor` of its speed (a thermal or power straggler).
    GpuSlow,
    /// Every kernel takes a random multiple of its time, drawn from `seed`.
    KernelJitter,
}

/// Which kernels a slow GPU slows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlowScope {
    /// Kernels bound by the SM clock: a thermal or power cap lowers the clock, not HBM.
    #[default]
    Clock,
    /// Every kernel.
    All,
}

/// One `[[faults]]` entry; which keys apply depends on `kind` (checked by `sim::fault`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    pub kind: FaultKind,
    /// A link id as `links.csv` lists it (either direction names the cable).
    pub link: Option<u32>,
    /// A cable by its two ends, named as `links.csv` names nodes (`leaf0`, `spine3`, `nic12`).
    pub between: Option<Vec<String>>,
    /// A NIC's global number (`nic12` in `links.csv`).
    pub nic: Option<u32>,
    pub host: Option<u32>,
    /// A GPU's global rank.
    pub gpu: Option<u32>,
    /// Bandwidth (link-degraded) or speed (gpu-slow) left, in (0, 1].
    pub factor: Option<f64>,
    /// Simulated time the fault starts, seconds from the start of the iteration.
    #[serde(default)]
    pub at_s: f64,
    #[serde(default)]
    pub scope: SlowScope,
    /// kernel-jitter: the spread of the log of a kernel's time multiple.
    pub sigma: Option<f64>,
    pub seed: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// Multi-rail fabric: NIC *i* of every host of a segment on leaf *i* (Alibaba HPN, NVIDIA
    /// SuperPOD).
    RailOptimized,
    /// Classic 3-tier k-ary fat-tree (Al-Fares et al., SIGCOMM'08).
    FatTree,
    /// 2-tier leaf-spine: every host's NICs on its rack's leaf, every leaf on every spine.
    SpineLeaf,
    /// An explicit graph file (`cluster.graph_file`).
    Graph,
}

impl TopologyKind {
    /// The name the experiment file uses.
    pub fn name(self) -> &'static str {
        match self {
            TopologyKind::RailOptimized => "rail-optimized",
            TopologyKind::FatTree => "fat-tree",
            TopologyKind::SpineLeaf => "spine-leaf",
            TopologyKind::Graph => "graph",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleUp {
    /// NVSwitch for NVIDIA parts with NVLink, a full mesh for AMD, none without a fabric.
    Auto,
    /// One NVSwitch domain of `nvlink_domain` GPUs (the switch chips modelled as one node).
    Nvswitch,
    /// Point-to-point links between every pair of GPUs of a host (AMD Infinity Fabric).
    Mesh,
    /// GPUs talk through PCIe only.
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub gpus: u32,
    #[serde(default = "defaults::gpus_per_host")]
    pub gpus_per_host: u32,
    /// A name from `configs/gpus/`, or a path to a GPU file (`*.toml`, relative to the file
    /// that names it). Absent when `gpu_mix` places several types.
    pub gpu: Option<String>,
    #[serde(default)]
    pub gpu_mix: Vec<GpuMixEntry>,
    #[serde(default = "defaults::topology")]
    pub topology: TopologyKind,
    /// Default: one NIC per GPU.
    pub nics_per_host: Option<u32>,
    /// Line rate of one NIC (all its ports together), Gb/s.
    #[serde(default = "defaults::nic_gbps")]
    pub nic_gbps: f64,
    /// Ports per NIC (2 for dual-ToR or dual-plane); each port runs at nic_gbps / nic_ports.
    #[serde(default = "defaults::one")]
    pub nic_ports: u32,
    /// Dual-plane (Alibaba HPN): port *p* of every NIC joins plane *p*, planes share no switch.
    #[serde(default)]
    pub dual_plane: bool,
    #[serde(default = "defaults::scale_up")]
    pub scale_up: ScaleUp,
    /// GPUs in one NVLink domain (8 in a DGX, 72 in a GB200 NVL72). Default: gpus_per_host.
    /// A job of fewer GPUs has one domain of its own ([`ClusterConfig::nvlink_domain_gpus`]).
    pub nvlink_domain: Option<u32>,
    /// PCIe switches per host between GPUs and NICs. Default: one per two GPUs (DGX H100).
    pub pcie_switches_per_host: Option<u32>,
    /// Rail-optimised: hosts under one set of rail leaves (a SuperPOD scalable unit).
    #[serde(default = "defaults::hosts_per_segment")]
    pub hosts_per_segment: u32,
    /// Spine-leaf and fat-tree: hosts under one leaf; also the unit of `gpu_mix.racks`.
    pub hosts_per_rack: Option<u32>,
    /// Rail-optimised: segments under one set of spines; more segments add a core tier.
    #[serde(default = "defaults::segments_per_pod")]
    pub segments_per_pod: u32,
    /// Spines per pod and plane. Default: enough port-speed links for the leaf uplinks.
    pub spines_per_pod: Option<u32>,
    /// Fat-tree switch radix k. Default: the smallest even k that holds every NIC port.
    pub fat_tree_k: Option<u32>,
    /// Leaf downlink to uplink capacity ratio (1 = non-blocking).
    #[serde(default = "defaults::one_f")]
    pub oversubscription: f64,
    /// Spine downlink to core uplink capacity ratio.
    #[serde(default = "defaults::one_f")]
    pub core_oversubscription: f64,
    /// Switch-to-switch link speed, Gb/s. Default: the NIC port speed.
    pub fabric_link_gbps: Option<f64>,
    /// Explicit topology (`topology = "graph"`), relative to the file that names it.
    pub graph_file: Option<String>,
    #[serde(default)]
    pub latency_ns: LatencyConfig,
    pub cxl: Option<CxlConfig>,
}

impl ClusterConfig {
    /// GPUs in each NVLink domain of this cluster: `nvlink_domain` (default `gpus_per_host`),
    /// or all of `gpus` when the job is smaller than one domain (a job on 8 GPUs of a GB200
    /// NVL72 rack has the NVLink domain of its own 8).
    pub fn nvlink_domain_gpus(&self) -> u32 {
        let size = self.nvlink_domain.unwrap_or(self.gpus_per_host);
        if self.gpus < size && self.gpus.is_multiple_of(self.gpus_per_host) {
            self.gpus
        } else {
            size
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuMixEntry {
    pub gpu: String,
    pub hosts: Option<u32>,
    pub racks: Option<u32>,
}

/// One-way latency per link hop, by link class, nanoseconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyConfig {
    #[serde(default = "defaults::nvlink_ns")]
    pub nvlink: f64,
    #[serde(default = "defaults::pcie_ns")]
    pub pcie: f64,
    #[serde(default = "defaults::network_ns")]
    pub network: f64,
    #[serde(default = "defaults::cxl_ns")]
    pub cxl: f64,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            nvlink: defaults::nvlink_ns(),
            pcie: defaults::pcie_ns(),
            network: defaults::network_ns(),
            cxl: defaults::cxl_ns(),
        }
    }
}

/// A cache-coherent CXL tier (HCSim): a CXL switch per group of hosts, linking their GPUs and
/// memory nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CxlConfig {
    #[serde(default = "defaults::one")]
    pub hosts_per_switch: u32,
    #[serde(default = "defaults::one")]
    pub memory_nodes_per_switch: u32,
    /// Capacity of one memory node, GB.
    pub memory_node_gb: f64,
    /// Bandwidth of a memory node's link to its switch, GB/s per direction.
    #[serde(default = "defaults::cxl_memory_gb_s")]
    pub memory_node_gb_s: f64,
    /// Bandwidth of a GPU's CXL link, GB/s per direction (CXL 2.0/3.0 on a PCIe 5 x16 port: 64).
    #[serde(default = "defaults::cxl_link_gb_s")]
    pub link_gb_s: f64,
    /// Cache-coherent memory (HCSim's "consistency"): kernels read CXL-resident operands
    /// while they run. `false`: operands are copied into HBM first, then computed on.
    #[serde(default = "defaults::yes")]
    pub coherent: bool,
    /// Tensor classes kept in CXL memory instead of HBM.
    #[serde(default)]
    pub tensors: Vec<TensorClass>,
    /// Move tensor classes that do not fit HBM into CXL memory (optimizer state first, then
    /// activations, gradients, weights) instead of failing the memory check.
    #[serde(default = "defaults::yes")]
    pub spill: bool,
}

/// What a GPU keeps in memory for training, by class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TensorClass {
    Weights,
    Gradients,
    Optimizer,
    Activations,
}

impl TensorClass {
    /// The order spilling moves classes out of HBM: the least often touched first.
    pub const SPILL_ORDER: [TensorClass; 4] = [
        TensorClass::Optimizer,
        TensorClass::Activations,
        TensorClass::Gradients,
        TensorClass::Weights,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TensorClass::Weights => "weights",
            TensorClass::Gradients => "gradients",
            TensorClass::Optimizer => "optimizer",
            TensorClass::Activations => "activations",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelConfig {
    #[serde(default = "defaults::one")]
    pub tp: u32,
    #[serde(default = "defaults::one")]
    pub pp: u32,
    /// Derived from cluster.gpus when absent.
    pub dp: Option<u32>,
    #[serde(default = "defaults::one")]
    pub cp: u32,
    #[serde(default = "defaults::one")]
    pub ep: u32,
    /// Expert tensor parallel: how many GPUs split each expert's weights (Megatron-Core
    /// `--expert-tensor-parallel-size`; `arguments.py` sets it to TP when absent). With EP,
    /// drawn from the attention's TP × CP × DP ranks (MoE parallel folding).
    pub etp: Option<u32>,
    #[serde(default = "defaults::one")]
    pub vp: u32,
    #[serde(default)]
    pub sequence_parallel: bool,
    #[serde(default = "defaults::zero_stage")]
    pub zero: u32,
    #[serde(default = "defaults::one")]
    pub micro_batch: u32,
    /// Default: micro_batch × DP (one micro-batch per replica).
    pub global_batch: Option<u32>,
    /// Layers on the first / last pipeline stage when they differ from the others
    /// (Megatron-LM `--decoder-first-pipeline-num-layers`, `--decoder-last-pipeline-num-layers`;
    /// Llama 3 405B drops one layer from each, Llama 3 paper §3.3.2).
    pub first_stage_layers: Option<u32>,
    pub last_stage_layers: Option<u32>,
    /// Layers on every pipeline stage, listed (overrides the even split and the first/last
    /// overrides): the heterogeneity-aware planner gives fast stages more layers.
    pub stage_layers: Option<Vec<u32>>,
    /// Every virtual pipeline stage's layers in Megatron-Core's layout language
    /// (`--pipeline-model-parallel-layout`, e.g. `Et*4|(t*4|)*14tmL`); sets VP.
    pub pipeline_layout: Option<String>,
    /// Count the embedding as a layer when splitting layers over pipeline stages and virtual
    /// stages (Megatron-Core `account_for_embedding_in_pipeline_split`): the first virtual stage
    /// gets one layer fewer.
    #[serde(default)]
    pub account_for_embedding_in_pipeline_split: bool,
    /// Count the loss as a layer (Megatron-Core `account_for_loss_in_pipeline_split`): the last
    /// virtual stage gets one layer fewer.
    #[serde(default)]
    pub account_for_loss_in_pipeline_split: bool,
    /// Micro-batches of every data-parallel replica, listed (default: the same for all,
    /// global_batch / (micro_batch × DP)). The planner gives fast replicas more; each
    /// replica's loss is scaled by its share of the global batch, so the summed gradient is
    /// exactly the global-batch mean.
    pub replica_micro_batches: Option<Vec<u32>>,
    /// Rank order, fastest-varying first (Megatron-LM `--order`, default tp-cp-ep-dp-pp).
    #[serde(default = "defaults::order")]
    pub order: String,
    /// How context-parallel attention exchanges keys and values: `p2p` (ring attention,
    /// Transformer Engine's default `cp_comm_type`) or `all-gather`.
    #[serde(default)]
    pub cp_comm: CpComm,
}

/// Megatron-Core's MoE token dispatcher (`--moe-token-dispatcher-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoeTokenDispatcher {
    /// `alltoall` (`token_dispatcher.py`, `MoEAlltoAllTokenDispatcher`): one NCCL all-to-all
    /// of every (token, expert) copy, so a token routed to two experts of one rank, or to
    /// several ranks of one node, crosses the network once per expert.
    #[default]
    Alltoall,
    /// `flex` with `--moe-enable-deepep` (`MoEFlexTokenDispatcher` over DeepEP's normal
    /// kernels, deepseek-ai/DeepEP): a token crosses the network once per node it goes to,
    /// to the GPU on its own rail there, which forwards it over NVLink once per rank.
    Deepep,
    /// `flex` with `--moe-flex-dispatcher-backend hybridep` (NVIDIA's HybridEP): the same
    /// routes as DeepEP, at the link shares HybridEP's kernels reach.
    Hybridep,
}

impl MoeTokenDispatcher {
    pub fn name(self) -> &'static str {
        match self {
            MoeTokenDispatcher::Alltoall => "alltoall",
            MoeTokenDispatcher::Deepep => "deepep",
            MoeTokenDispatcher::Hybridep => "hybridep",
        }
    }
}

/// Transformer Engine's `cp_comm_type` (`transformer_engine/pytorch/attention.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CpComm {
    /// Ring attention: KV blocks travel around the CP ring, overlapping the block attention.
    #[default]
    P2p,
    /// All-gather KV before attention, reduce-scatter dKV after.
    AllGather,
}

impl Default for ParallelConfig {
    fn default() -> Self {
        ParallelConfig {
            tp: 1,
            pp: 1,
            dp: None,
            cp: 1,
            ep: 1,
            etp: None,
            vp: 1,
            sequence_parallel: false,
            zero: defaults::zero_stage(),
            micro_batch: 1,
            global_batch: None,
            first_stage_layers: None,
            last_stage_layers: None,
            stage_layers: None,
            pipeline_layout: None,
            account_for_embedding_in_pipeline_split: false,
            account_for_loss_in_pipeline_split: false,
            replica_micro_batches: None,
            order: defaults::order(),
            cp_comm: CpComm::P2p,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    None,
    Selective,
    Full,
}

/// A submodule that selective recompute checkpoints (Megatron-Core's `--recompute-modules`,
/// `TransformerConfig.recompute_modules`): its output is dropped after the forward pass and
/// its forward runs again in the backward pass, right before the backward that needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecomputeModule {
    /// Core attention (`attention.py`, `_checkpointed_attention_forward`): Megatron's default.
    CoreAttn,
    /// MLA's q and kv up-projections and RoPE (`multi_latent_attention.py`,
    /// `qkv_up_checkpoint`, `CheckpointWithoutOutput`), recomputed when core attention's
    /// backward starts.
    MlaUpProj,
    /// The experts' activation function (`moe/experts.py`, `activation_checkpoint`), recomputed
    /// before fc2's backward.
    MoeAct,
    /// The input and pre-MLP norms where they are modules of their own
    /// (`transformer_layer.py`, `input_layernorm_checkpoint`, `pre_mlp_norm_checkpoint`).
    Layernorm,
    /// The dense MLP of non-MoE layers, whole (`transformer_layer.py`, `recompute_mlp`).
    Mlp,
    /// The MoE layer, whole: router, dispatch, experts, combine (`moe/moe_layer.py`,
    /// `moe_layer_recompute`).
    Moe,
    /// The shared experts of MoE layers (`moe/moe_layer.py`, `shared_experts_recompute`).
    SharedExperts,
}

impl RecomputeModule {
    pub const ALL: [RecomputeModule; 7] = [
        RecomputeModule::CoreAttn,
        RecomputeModule::MlaUpProj,
        RecomputeModule::MoeAct,
        RecomputeModule::Layernorm,
        RecomputeModule::Mlp,
        RecomputeModule::Moe,
        RecomputeModule::SharedExperts,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RecomputeModule::CoreAttn => "core_attn",
            RecomputeModule::MlaUpProj => "mla_up_proj",
            RecomputeModule::MoeAct => "moe_act",
            RecomputeModule::Layernorm => "layernorm",
            RecomputeModule::Mlp => "mlp",
            RecomputeModule::Moe => "moe",
            RecomputeModule::SharedExperts => "shared_experts",
        }
    }

    /// Every valid name, for error messages.
    pub fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }
}

/// The set of modules selective recompute re-runs (empty outside `recompute = "selective"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RecomputeModules(u8);

impl RecomputeModules {
    pub const NONE: RecomputeModules = RecomputeModules(0);

    pub fn of(modules: &[RecomputeModule]) -> Self {
        RecomputeModules(modules.iter().fold(0, |bits, &m| bits | 1 << m as u8))
    }

    pub fn has(self, module: RecomputeModule) -> bool {
        self.0 & (1 << module as u8) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The modules, in `RecomputeModule::ALL`'s order.
    pub fn iter(self) -> impl Iterator<Item = RecomputeModule> {
        RecomputeModule::ALL
            .into_iter()
            .filter(move |&m| self.has(m))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryCheck {
    /// An experiment that does not fit in HBM is an error.
    Error,
    Warn,
    Off,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingConfig {
    #[serde(default = "defaults::precision")]
    pub precision: Precision,
    #[serde(default = "defaults::recompute")]
    pub recompute: Recompute,
    /// What `recompute = "selective"` re-runs (Megatron-Core's `--recompute-modules`; default
    /// `["core_attn"]`). Like Megatron, ignored under `none` and `full` (with a warning).
    #[serde(default)]
    pub recompute_modules: Option<Vec<RecomputeModule>>,
    #[serde(default = "defaults::one")]
    pub iterations: u32,
    #[serde(default = "defaults::memory_check")]
    pub memory_check: MemoryCheck,
    /// Flash-style fused attention (keeps no s×s softmax); Megatron-Core with Transformer
    /// Engine uses it by default.
    #[serde(default = "defaults::yes")]
    pub flash_attention: bool,
    /// Overlap TP all-gather / reduce-scatter with the neighbouring GEMMs (Transformer Engine
    /// userbuffers, Megatron-LM `--tp-comm-overlap`). Off: TP communication is on the critical
    /// path.
    #[serde(default)]
    pub tp_comm_overlap: bool,
    /// Run the shared experts of a MoE layer's forward beside its token all-to-alls, fc1
    /// during the dispatch and fc2 during the combine (Megatron-Core
    /// `--moe-shared-expert-overlap`, off by default; NeMo's DeepSeek configs turn it on).
    /// Needs shared experts.
    #[serde(default)]
    pub moe_shared_expert_overlap: bool,
    /// Overlap the expert-parallel all-to-alls of one micro-batch with the computation of
    /// another (Megatron-Core `--overlap-moe-expert-parallel-comm`, off by default;
    /// Megatron-Bridge's MoE performance recipes turn it on): each steady-state forward runs
    /// merged with a backward, layer by layer (`combined_1f1b.py`), after one more warm-up
    /// forward. Needs EP > 1, virtual stages when PP > 1, no full recompute, no `moe` recompute
    /// module and no shared-expert overlap.
    #[serde(default)]
    pub overlap_moe_expert_parallel_comm: bool,
    /// With the all-to-all overlap, run the experts' weight gradients after their backward
    /// all-to-all is issued, so it starts after the data gradients (Megatron-Core
    /// `--delay-wgrad-compute`).
    #[serde(default)]
    pub delay_wgrad_compute: bool,
    /// Fuse the MoE router's scores-to-routing-map ops and its aux-loss scores into one
    /// kernel each (Megatron-Core `--moe-router-fusion` from 0.14, Transformer Engine PR
    /// #1883; off by default).
    #[serde(default)]
    pub moe_router_fusion: bool,
    /// Fuse the MoE token permutations (Megatron-Core `--moe-permute-fusion`, Transformer
    /// Engine's `moe_permute` / `moe_unpermute`; off by default, NeMo's DeepSeek-V3 recipe
    /// turns it on).
    #[serde(default)]
    pub moe_permute_fusion: bool,
    /// Pad each expert's routed tokens to the quantized GEMM's alignment in the router's
    /// routing map (Megatron-Core `--moe-router-padding-for-quantization`, before 0.16
    /// `--moe-router-padding-for-fp8`; off by default). Off, FP8 expert GEMMs copy their input
    /// into a padded buffer and their output back out, forward and backward (`TEGroupedMLP`'s
    /// `Fp8Padding` / `Fp8Unpadding`).
    #[serde(default)]
    pub moe_router_padding_for_quantization: bool,
    /// How the language-model loss's vocab-parallel cross entropy runs
    /// (Megatron-Core `--cross-entropy-loss-fusion`, `--cross-entropy-fusion-impl`): `none`,
    /// Megatron-Core's default, is the unfused fp32 PyTorch ops.
    #[serde(default)]
    pub cross_entropy_fusion: CrossEntropyFusion,
    /// How MoE layers move tokens to their experts and back over expert parallelism.
    #[serde(default)]
    pub moe_token_dispatcher: MoeTokenDispatcher,
    /// Launch each gradient bucket's reduction as soon as its gradients are complete in the
    /// last micro-batch's backward (Megatron-LM `--overlap-grad-reduce`).
    #[serde(default = "defaults::yes")]
    pub overlap_grad_reduce: bool,
    /// With the distributed optimizer, gather updated parameters bucket by bucket during the
    /// next forward instead of after the optimizer step (Megatron-LM `--overlap-param-gather`).
    #[serde(default = "defaults::yes")]
    pub overlap_param_gather: bool,
    /// Parameters per gradient bucket; default max(40M, 1M x DP) as Megatron-LM's
    /// `training.py` sets `bucket_size`.
    pub bucket_params: Option<u64>,
    /// Interleaved 1F1B posts its pipeline receives ahead and does not wait for its sends
    /// (Megatron-Core `overlap_p2p_comm`, on by default). Off: every transfer blocks the next
    /// kernel, as in 1F1B and in Megatron-LM before Megatron-Core (2022).
    #[serde(default = "defaults::yes")]
    pub overlap_p2p_comm: bool,
    /// Without sequence parallelism, each TP rank sends 1/TP of a stage-boundary tensor and
    /// the receiver all-gathers it over TP (Megatron-LM before Megatron-Core,
    /// `--scatter-gather-tensors-in-pipeline`, on by default there; Megatron-Core ignores it).
    #[serde(default)]
    pub p2p_scatter_gather: bool,
    /// FP8 dot-product attention (Transformer Engine's `fp8_dpa`, Megatron-Core's
    /// `fp8_dot_product_attention`; off by default in both): without it FP8 training runs core
    /// attention in BF16.
    #[serde(default)]
    pub fp8_attention: bool,
    /// How Transformer Engine scales FP8 tensors, by Megatron-Core's `--fp8-recipe` names:
    /// `delayed` (the default), `current` or `tensorwise`, `blockwise`, `mxfp8` (the same as
    /// `precision = "mxfp8"`). Only with `precision = "fp8"` or `"mxfp8"`; read it through
    /// [`TrainingConfig::fp8_recipe`].
    #[serde(default)]
    pub fp8_recipe: Option<Fp8Recipe>,
    /// Weights live in FP8 and the distributed optimizer gathers them in FP8 (Megatron-Core
    /// `--fp8-param-gather`, NeMo's `fp8_params`): 1 byte per weight, no per-step weight cast.
    #[serde(default)]
    pub fp8_param_gather: bool,
    /// Gradients accumulate and reduce in BF16 (Megatron-Core `--grad-reduce-in-bf16`, NeMo's
    /// `grad_sync_dtype = bf16`) instead of FP32.
    #[serde(default)]
    pub grad_reduce_in_bf16: bool,
    /// The fused-attention kernels (with `flash_attention`): `auto` (what Megatron-Core with
    /// Transformer Engine picks for the GPU), `cudnn` or `flash2`.
    #[serde(default)]
    pub attention_backend: AttentionBackend,
    /// The Transformer Engine release the run uses, as a quoted `"MAJOR.MINOR"` (`"2.4"`):
    /// which attention kernels it can train a head size with depends on it
    /// (`sim::compute::attention_backend`). Unset: today's releases.
    #[serde(default)]
    pub transformer_engine: Option<TeRelease>,
    /// SMs each userbuffers overlap holds back from its GEMM (Transformer Engine's `ub_cfgs`:
    /// `num_sm` with `set_sm_margin`), e.g. `{ proj_fprop = 24, fc2_fprop = 20 }`; keys left
    /// out take TE's default for the release.
    #[serde(default)]
    pub tp_comm_overlap_sms: TpOverlapSms,
    /// What CUDA graphs capture (Megatron-Core `--cuda-graph-impl` / `--cuda-graph-scope`):
    /// `none` (eager, Megatron's default), `attn`, `layers` or `full-iteration`. Ops inside
    /// a graph cost the host nothing to issue; the others cost the host CPU's dispatch time
    /// (`sim::compute::host`).
    #[serde(default)]
    pub cuda_graphs: CudaGraphs,
}

/// The cross entropy of the language-model loss (`training.cross_entropy_fusion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrossEntropyFusion {
    /// Megatron-Core's `vocab_parallel_cross_entropy` as PyTorch ops in fp32 (the default,
    /// `--cross-entropy-loss-fusion` off).
    #[default]
    None,
    /// Megatron-Core's `fused_vocab_parallel_cross_entropy` (`--cross-entropy-fusion-impl
    /// native`): the same fp32 passes fused by `jit_fuser`.
    Native,
    /// Transformer Engine's Triton `parallel_cross_entropy` (`--cross-entropy-fusion-impl
    /// te`): an online softmax that writes the logits' gradient in place in the forward.
    Te,
}

impl CrossEntropyFusion {
    pub fn name(self) -> &'static str {
        match self {
            CrossEntropyFusion::None => "none",
            CrossEntropyFusion::Native => "native",
            CrossEntropyFusion::Te => "te",
        }
    }
}

/// CUDA graph capture scope (`training.cuda_graphs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CudaGraphs {
    /// Eager: every kernel and communication call is issued by Python (Megatron-Core's
    /// default, `--cuda-graph-impl none`).
    #[default]
    None,
    /// The attention part of each transformer layer (`--cuda-graph-scope attn`, what
    /// Megatron-Core captures in MoE models, whose dropless token dispatch needs the host).
    Attn,
    /// Whole transformer layers, forward and backward (Transformer Engine's
    /// `make_graphed_callables` per layer, `--enable-cuda-graph`); a dropless MoE layer's
    /// expert part stays eager.
    Layers,
    /// The whole forward-backward step (`--cuda-graph-impl full_iteration`, MLPerf's
    /// `FULL_CUDA_GRAPH`).
    #[serde(alias = "full_iteration")]
    FullIteration,
}

impl CudaGraphs {
    pub fn name(self) -> &'static str {
        match self {
            CudaGraphs::None => "none",
            CudaGraphs::Attn => "attn",
            CudaGraphs::Layers => "layers",
            CudaGraphs::FullIteration => "full-iteration",
        }
    }
}

/// Which fused-attention kernels run (`training.attention_backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttentionBackend {
    /// What Megatron-Core with Transformer Engine picks for the GPU: cuDNN fused attention on
    /// Hopper and newer, FlashAttention-2 on Ampere (TE `get_attention_backend`).
    #[default]
    Auto,
    /// Transformer Engine's FusedAttention (cuDNN).
    Cudnn,
    /// FlashAttention-2 (Dao 2023).
    Flash2,
}

impl AttentionBackend {
    pub fn name(self) -> &'static str {
        match self {
            AttentionBackend::Auto => "auto",
            AttentionBackend::Cudnn => "cudnn",
            AttentionBackend::Flash2 => "flash2",
        }
    }
}

/// A Transformer Engine release, `MAJOR.MINOR` (`training.transformer_engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TeRelease {
    pub major: u32,
    pub minor: u32,
}

impl TeRelease {
    /// The release whose rules apply when `training.transformer_engine` is unset.
    pub const NEWEST: TeRelease = TeRelease::new(2, 18);

    pub const fn new(major: u32, minor: u32) -> Self {
        TeRelease { major, minor }
    }
}

/// `training.tp_comm_overlap_sms`: for each GEMM Transformer Engine's userbuffers overlaps
/// with tensor-parallel communication, the SMs its communication kernel holds back from it
/// (`num_sm` where the overlap sets `set_sm_margin`, else 0), by TE's `ub_cfgs` names. A key
/// left out takes TE's default for `training.transformer_engine`
/// (`sim::workload::userbuffers`). Read only with `tp_comm_overlap` and sequence
/// parallelism.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpOverlapSms {
    pub qkv_fprop: Option<u32>,
    pub qkv_dgrad: Option<u32>,
    pub qkv_wgrad: Option<u32>,
    pub proj_fprop: Option<u32>,
    pub proj_dgrad: Option<u32>,
    pub fc1_fprop: Option<u32>,
    pub fc1_dgrad: Option<u32>,
    pub fc1_wgrad: Option<u32>,
    pub fc2_fprop: Option<u32>,
    pub fc2_dgrad: Option<u32>,
}

impl TpOverlapSms {
    /// Every key with its value, in TE's order.
    pub fn entries(&self) -> [(&'static str, Option<u32>); 10] {
        [
            ("qkv_fprop", self.qkv_fprop),
            ("qkv_dgrad", self.qkv_dgrad),
            ("qkv_wgrad", self.qkv_wgrad),
            ("proj_fprop", self.proj_fprop),
            ("proj_dgrad", self.proj_dgrad),
            ("fc1_fprop", self.fc1_fprop),
            ("fc1_dgrad", self.fc1_dgrad),
            ("fc1_wgrad", self.fc1_wgrad),
            ("fc2_fprop", self.fc2_fprop),
            ("fc2_dgrad", self.fc2_dgrad),
        ]
    }
}

impl std::fmt::Display for TeRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for TeRelease {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("`{s}` is not a Transformer Engine release; write MAJOR.MINOR, e.g. \"2.4\"")
        };
        let mut parts = s.trim().trim_start_matches('v').split('.');
        let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let minor = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        // A patch level (`2.2.1`) changes no kernel selection rule.
        if parts.next().is_some_and(|p| p.parse::<u32>().is_err()) || parts.next().is_some() {
            return Err(bad());
        }
        Ok(TeRelease { major, minor })
    }
}

impl<'de> Deserialize<'de> for TeRelease {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = TeRelease;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a quoted Transformer Engine release such as \"2.4\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TeRelease, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<TeRelease, E> {
                Err(E::custom(format!(
                    "write the release as a quoted string, e.g. \"{v}\" (as a number, 2.10 would read as 2.1)"
                )))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<TeRelease, E> {
                Err(E::custom(format!(
                    "write the release as a quoted MAJOR.MINOR string, e.g. \"{v}.0\""
                )))
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Transformer Engine's FP8 scaling recipe (`transformer_engine/common/recipe`), by
/// Megatron-Core's names (`megatron/core/enums.py` `Fp8Recipe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp8Recipe {
    /// `DelayedScaling`: a per-tensor scale from the amax history, one amax all-reduce per
    /// model chunk's forward and backward.
    #[default]
    Delayed,
    /// `Float8CurrentScaling` (Megatron-Core's `tensorwise`, NeMo's `fp8-cs`): an amax pass over
    /// every tensor before its cast.
    #[serde(alias = "tensorwise")]
    Current,
    /// `Float8BlockScaling` (`blockwise`): an FP32 scale per 1x128 block of activations and
    /// gradients and per 128x128 block of weights (Hopper and newer).
    Blockwise,
    /// `MXFP8BlockScaling`: the `mxfp8` precision.
    Mxfp8,
}

impl Fp8Recipe {
    pub fn name(self) -> &'static str {
        match self {
            Fp8Recipe::Delayed => "delayed",
            Fp8Recipe::Current => "current",
            Fp8Recipe::Blockwise => "blockwise",
            Fp8Recipe::Mxfp8 => "mxfp8",
        }
    }
}

impl TrainingConfig {
    /// The FP8 recipe in effect: MXFP8 block scaling under `precision = "mxfp8"`, else
    /// `fp8_recipe` (default `delayed`; it matters only under `fp8`).
    pub fn fp8_recipe(&self) -> Fp8Recipe {
        match self.precision {
            Precision::Mxfp8 => Fp8Recipe::Mxfp8,
            _ => self.fp8_recipe.unwrap_or_default(),
        }
    }

    /// The modules selective recompute re-runs: `recompute_modules` (default `core_attn`)
    /// under `selective`, none otherwise (Megatron-Core reads `recompute_modules` only with
    /// `recompute_granularity = "selective"`).
    pub fn recomputed_modules(&self) -> RecomputeModules {
        match self.recompute {
            Recompute::Selective => match &self.recompute_modules {
                Some(modules) => RecomputeModules::of(modules),
                None => RecomputeModules::of(&[RecomputeModule::CoreAttn]),
            },
            Recompute::None | Recompute::Full => RecomputeModules::NONE,
        }
    }
}

impl Default for TrainingConfig {
    fn default() -> Self {
        TrainingConfig {
            precision: defaults::precision(),
            recompute: defaults::recompute(),
            recompute_modules: None,
            iterations: 1,
            memory_check: defaults::memory_check(),
            flash_attention: true,
            tp_comm_overlap: false,
            moe_shared_expert_overlap: false,
            overlap_moe_expert_parallel_comm: false,
            delay_wgrad_compute: false,
            moe_router_fusion: false,
            moe_permute_fusion: false,
            moe_router_padding_for_quantization: false,
            cross_entropy_fusion: CrossEntropyFusion::None,
            moe_token_dispatcher: MoeTokenDispatcher::default(),
            overlap_grad_reduce: true,
            overlap_param_gather: true,
            bucket_params: None,
            overlap_p2p_comm: true,
            p2p_scatter_gather: false,
            fp8_attention: false,
            fp8_recipe: None,
            fp8_param_gather: false,
            grad_reduce_in_bf16: false,
            attention_backend: AttentionBackend::Auto,
            transformer_engine: None,
            tp_comm_overlap_sms: TpOverlapSms::default(),
            cuda_graphs: CudaGraphs::None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkModel {
    Packet,
    /// Fluid flows with max-min fair rates over the links they share (`engine::flow`).
    Flow,
    Analytical,
}

impl NetworkModel {
    pub fn name(self) -> &'static str {
        match self {
            NetworkModel::Packet => "packet",
            NetworkModel::Flow => "flow",
            NetworkModel::Analytical => "analytical",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    #[serde(default = "defaults::network_model")]
    pub model: NetworkModel,
    #[serde(default = "defaults::segment_bytes")]
    pub segment_bytes: u64,
    /// Largest packet on the wire: a segment stands for its MTU packets, and a switch
    /// forwards each once it has it, so a segment's head leads its tail by one MTU per hop.
    #[serde(default = "defaults::mtu_bytes")]
    pub mtu_bytes: u64,
    #[serde(default = "defaults::intra_host")]
    pub intra_host: NetworkModel,
    /// Bytes a flow may have unacknowledged (RDMA-like window). Default: the flow path's
    /// bandwidth-delay product, at least two segments.
    pub window_bytes: Option<u64>,
    /// Ingress buffer per switch port. Default: XOFF plus the PFC headroom the port needs.
    pub buffer_bytes: Option<u64>,
    /// PFC: pause the upstream port when its ingress bytes queued here reach XOFF, resume
    /// at XON. Defaults: max(256 KiB, 2 segments) and half of XOFF.
    pub pfc_xoff_bytes: Option<u64>,
    pub pfc_xon_bytes: Option<u64>,
    #[serde(default = "defaults::congestion_control")]
    pub congestion_control: CongestionControl,
    #[serde(default)]
    pub dcqcn: DcqcnConfig,
    /// How a switch picks among equal-cost next hops at packet level: by the flow's hash
    /// (`ecmp`, the default) or per segment towards the emptiest port (`adaptive`).
    #[serde(default)]
    pub routing: Routing,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            model: defaults::network_model(),
            segment_bytes: defaults::segment_bytes(),
            mtu_bytes: defaults::mtu_bytes(),
            intra_host: defaults::intra_host(),
            window_bytes: None,
            buffer_bytes: None,
            pfc_xoff_bytes: None,
            pfc_xon_bytes: None,
            congestion_control: defaults::congestion_control(),
            dcqcn: DcqcnConfig::default(),
            routing: Routing::default(),
        }
    }
}

/// `network.routing`: how a switch chooses among equal-cost next hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Routing {
    /// Static ECMP: every packet of a queue pair hashes to one path (RoCE fabrics, and
    /// InfiniBand with adaptive routing off), so rings' flows can collide on an uplink.
    #[default]
    Ecmp,
    /// InfiniBand adaptive routing: a switch sends each packet out of the least loaded of
    /// its equal-cost ports, and the receiving HCA places packets that arrive out of order
    /// (NCCL turns it on by default on InfiniBand, `NCCL_IB_ADAPTIVE_ROUTING`; the fabric's
    /// subnet manager enables it on the switches).
    Adaptive,
}

impl Routing {
    pub fn name(self) -> &'static str {
        match self {
            Routing::Ecmp => "ecmp",
            Routing::Adaptive => "adaptive",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CongestionControl {
    None,
    Dcqcn,
}

/// DCQCN parameters (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
/// SIGCOMM 2015, §3 and Table 1; rate floor as ns-3's `RdmaHw` `MinRate`, which SimAI uses).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcqcnConfig {
    /// RED/ECN marking: none below `kmin_bytes` of egress queue, probability rising linearly
    /// to `pmax` at `kmax_bytes`, every segment above.
    #[serde(default = "defaults::dcqcn_kmin")]
    pub kmin_bytes: u64,
    #[serde(default = "defaults::dcqcn_kmax")]
    pub kmax_bytes: u64,
    #[serde(default = "defaults::dcqcn_pmax")]
    pub pmax: f64,
    /// EWMA gain of alpha.
    #[serde(default = "defaults::dcqcn_g")]
    pub g: f64,
    /// Alpha-decay and rate-increase timer, microseconds.
    #[serde(default = "defaults::dcqcn_timer_us")]
    pub timer_us: f64,
    /// Byte counter of the rate-increase state machine.
    #[serde(default = "defaults::dcqcn_byte_counter")]
    pub byte_counter_bytes: u64,
    /// Fast-recovery stages before additive increase.
    #[serde(default = "defaults::dcqcn_fast_recovery")]
    pub fast_recovery_steps: u32,
    #[serde(default = "defaults::dcqcn_rate_ai")]
    pub rate_ai_gbps: f64,
    #[serde(default = "defaults::dcqcn_rate_hai")]
    pub rate_hai_gbps: f64,
    #[serde(default = "defaults::dcqcn_min_rate")]
    pub min_rate_gbps: f64,
    /// At most one rate cut per flow per this interval (the NP's CNP interval), microseconds.
    #[serde(default = "defaults::dcqcn_cnp_interval_us")]
    pub cnp_interval_us: f64,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            kmin_bytes: defaults::dcqcn_kmin(),
            kmax_bytes: defaults::dcqcn_kmax(),
            pmax: defaults::dcqcn_pmax(),
            g: defaults::dcqcn_g(),
            timer_us: defaults::dcqcn_timer_us(),
            byte_counter_bytes: defaults::dcqcn_byte_counter(),
            fast_recovery_steps: defaults::dcqcn_fast_recovery(),
            rate_ai_gbps: defaults::dcqcn_rate_ai(),
            rate_hai_gbps: defaults::dcqcn_rate_hai(),
            min_rate_gbps: defaults::dcqcn_min_rate(),
            cnp_interval_us: defaults::dcqcn_cnp_interval_us(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CollectiveAlgorithm {
    Auto,
    Ring,
    Tree,
    Nvls,
    #[serde(alias = "nvls-tree")]
    NvlsTree,
    Pat,
    Direct,
    /// HCSim's coherent ring all-reduce on CXL fabrics (not an NCCL algorithm).
    #[serde(alias = "coherent-ring")]
    CoherentRing,
}

/// Like NCCL_PROTO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CollectiveProtocol {
    Auto,
    Ll,
    Ll128,
    Simple,
}

/// `[collectives]`: each key mirrors the NCCL environment variable in its comment.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectivesConfig {
    /// NCCL_ALGO.
    #[serde(default = "defaults::algorithm")]
    pub algorithm: CollectiveAlgorithm,
    /// NCCL_PROTO.
    #[serde(default = "defaults::protocol")]
    pub protocol: CollectiveProtocol,
    /// NCCL_MIN_NCHANNELS.
    #[serde(default)]
    pub min_channels: Option<u32>,
    /// NCCL_MAX_NCHANNELS.
    #[serde(default)]
    pub max_channels: Option<u32>,
    /// NCCL_NVLS_ENABLE.
    #[serde(default = "defaults::yes")]
    pub nvls_enable: bool,
    /// NCCL_PXN_DISABLE.
    #[serde(default)]
    pub pxn_disable: bool,
    /// NCCL_BUFFSIZE: bytes of a connection's Simple-protocol FIFO (NCCL's default 4 MiB).
    #[serde(default = "defaults::buffsize")]
    pub buffsize: u64,
    /// NCCL_P2P_NET_CHUNKSIZE: bytes per network step of a send/receive (default 128 KiB).
    #[serde(default = "defaults::p2p_net_chunksize")]
    pub p2p_net_chunksize: u64,
    /// NCCL_CROSS_NIC: 0 keeps a ring on one rail, 1 lets it cross rails between nodes, 2
    /// (NCCL's default) keeps it on one rail where it can.
    #[serde(default = "defaults::cross_nic")]
    pub cross_nic: u8,
    /// NCCL_IB_QPS_PER_CONNECTION: queue pairs per network connection (default 1); each
    /// has its own ECMP hash.
    #[serde(default = "defaults::one")]
    pub ib_qps_per_connection: u32,
    /// NCCL_IB_SPLIT_DATA_ON_QPS: 0 (default) sends successive messages on successive QPs,
    /// 1 splits every message over all of them.
    #[serde(default)]
    pub ib_split_data_on_qps: u8,
    /// HCSim's coherent ring all-reduce where a group's hosts share a CXL switch: chosen
    /// when it is fastest, unless turned off (no NCCL equivalent).
    #[serde(default = "defaults::yes")]
    pub coherent_ring: bool,
}

impl Default for CollectivesConfig {
    fn default() -> Self {
        CollectivesConfig {
            algorithm: defaults::algorithm(),
            protocol: defaults::protocol(),
            min_channels: None,
            max_channels: None,
            nvls_enable: true,
            pxn_disable: false,
            buffsize: defaults::buffsize(),
            p2p_net_chunksize: defaults::p2p_net_chunksize(),
            cross_nic: defaults::cross_nic(),
            ib_qps_per_connection: 1,
            ib_split_data_on_qps: 0,
            coherent_ring: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// How the topology is cut into logical processes (the `partitioner` crate).
    #[serde(default)]
    pub partition: PartitionStrategy,
    #[serde(default = "defaults::seed")]
    pub seed: u64,
    /// In-process workers of an embedded run.
    #[serde(default = "defaults::one")]
    pub workers: u32,
    /// Threads per worker; 0 = the cores other processes leave idle (Linux `/proc/stat`),
    /// shared among an embedded run's in-process workers.
    #[serde(default)]
    pub threads: u32,
    /// Partitions to cut the topology into; 0 = the strategy's natural count (see
    /// `partitioner`), at most 256 per worker: over-decomposition for threads to balance.
    #[serde(default)]
    pub partitions: u32,
    /// How a worker runs its partitions on its threads: `asynchronous` (each thread owns
    /// partitions and waits only for the other threads' promises, no barrier inside a
    /// window), `load-adaptive` (every window longest first by last window's events, with
    /// stealing, then a barrier), `static`, or `auto` (asynchronous on one worker,
    /// load-adaptive on several, and on one worker of several threads over the analytical
    /// network, whose windows the model's promises make wide).
    #[serde(default)]
    pub scheduling: SchedulingChoice,
    /// Windows between barriers end at the least promise of any partition: from each pending
    /// event's distance to the cut and each GPU's program (a model-derived lookahead).
    /// `false`: one lookahead (the cut's smallest link latency) after a window's start.
    /// Results are the same either way.
    #[serde(default = "defaults::yes")]
    pub promises: bool,
    /// How work is placed on a heterogeneous cluster: `naive` (as configured) or `hetero`
    /// (`fleetsim plan`'s search, then the best plan is simulated).
    #[serde(default)]
    pub planner: Planner,
    /// Whether a run whose data-parallel replicas are all alike simulates one replica and
    /// mirrors the rest (`sim_engine::symmetry`): `auto` (when it is exact) or `off`.
    #[serde(default)]
    pub symmetry: SymmetryChoice,
    /// A GPU handles a kernel chain's end as the chain starts, with no event, where nothing
    /// can change what that end does (`sim_engine` `GpuLp::chain_end_is_foregone`).
    /// `false`: an event for every chain end. Results are the same either way.
    #[serde(default = "defaults::yes")]
    pub chain_ends_ahead: bool,
}

/// `engine.symmetry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SymmetryChoice {
    /// One replica when every replica is the same (`sim_engine::symmetry`), else all.
    #[default]
    Auto,
    /// Every rank, always.
    Off,
}

/// `engine.partition`: the partitioner's strategies (`partitioner::implementation` gives each
/// its code), in the order reports list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PartitionStrategy {
    ByHost,
    RoundRobin,
    Linear,
    Random,
    /// Also written `by-rack`.
    BySegment,
    ByPod,
    ByRail,
    LatencyAware,
    Metis,
    #[default]
    Auto,
}

impl PartitionStrategy {
    pub const ALL: [PartitionStrategy; 10] = [
        PartitionStrategy::ByHost,
        PartitionStrategy::RoundRobin,
        PartitionStrategy::Linear,
        PartitionStrategy::Random,
        PartitionStrategy::BySegment,
        PartitionStrategy::ByPod,
        PartitionStrategy::ByRail,
        PartitionStrategy::LatencyAware,
        PartitionStrategy::Metis,
        PartitionStrategy::Auto,
    ];

    /// The name `engine.partition`, `--partition` and `--strategy` take.
    pub fn name(self) -> &'static str {
        match self {
            PartitionStrategy::ByHost => "by-host",
            PartitionStrategy::RoundRobin => "round-robin",
            PartitionStrategy::Linear => "linear",
            PartitionStrategy::Random => "random",
            PartitionStrategy::BySegment => "by-segment",
            PartitionStrategy::ByPod => "by-pod",
            PartitionStrategy::ByRail => "by-rail",
            PartitionStrategy::LatencyAware => "latency-aware",
            PartitionStrategy::Metis => "metis",
            PartitionStrategy::Auto => "auto",
        }
    }
}

impl std::fmt::Display for PartitionStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PartitionStrategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "by-rack" {
            return Ok(PartitionStrategy::BySegment);
        }
        PartitionStrategy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = PartitionStrategy::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown strategy `{s}`; valid: {} (by-rack is by-segment)",
                    valid.join(", ")
                )
            })
    }
}

impl<'de> Deserialize<'de> for PartitionStrategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// `engine.scheduling`: how a worker runs its partitions on its threads (the worker resolves
/// `auto` for the run, `worker::Scheduling::for_run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SchedulingChoice {
    /// Asynchronous on one worker, load-adaptive on several.
    #[default]
    Auto,
    /// Each thread runs its own partitions, no barrier inside a window.
    Asynchronous,
    /// UNISON's: longest partition first, work stealing, a barrier every window.
    LoadAdaptive,
    /// Each partition on one thread, no stealing, a barrier every window.
    Static,
}

impl SchedulingChoice {
    pub const ALL: [SchedulingChoice; 4] = [
        SchedulingChoice::Auto,
        SchedulingChoice::Asynchronous,
        SchedulingChoice::LoadAdaptive,
        SchedulingChoice::Static,
    ];

    /// The name the experiment file writes.
    pub fn name(self) -> &'static str {
        match self {
            SchedulingChoice::Auto => "auto",
            SchedulingChoice::Asynchronous => "asynchronous",
            SchedulingChoice::LoadAdaptive => "load-adaptive",
            SchedulingChoice::Static => "static",
        }
    }
}

impl std::str::FromStr for SchedulingChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SchedulingChoice::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown scheduling `{s}`; use auto (the default: asynchronous on one worker, load-adaptive on several), asynchronous (each thread runs its own partitions, no barrier inside a window), load-adaptive (UNISON's: longest partition first, work stealing) or static (each partition on one thread, no stealing)"
                )
            })
    }
}

impl<'de> Deserialize<'de> for SchedulingChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// `engine.planner`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Planner {
    /// The experiment's own layout: rank order, even layers, equal micro-batches.
    #[default]
    Naive,
    /// The heterogeneity-aware planner (`sim::planner`).
    Hetero,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            partition: PartitionStrategy::Auto,
            seed: defaults::seed(),
            workers: 1,
            threads: 0,
            partitions: 0,
            scheduling: SchedulingChoice::Auto,
            promises: true,
            planner: Planner::Naive,
            symmetry: SymmetryChoice::Auto,
            chain_ends_ahead: true,
        }
    }
}

/// `[compute]`: measured kernel tables and compute–communication interference.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeConfig {
    /// Measured kernel tables (CSV, `tools/profile_kernels.py`'s format), relative to the
    /// experiment file. Their rows override the calibrated model.
    #[serde(default)]
    pub kernel_tables: Vec<String>,
    /// SM-sharing factor: the fraction of compute throughput a running NCCL kernel takes.
    /// Default 0.159: compute slows by 1/(1 − 0.159) = 18.9%, the mean slowdown measured
    /// by Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated
    /// Distributed Deep Learning" (arXiv 2507.03114, 2025) on A100, H100, MI250, MI210.
    #[serde(default = "defaults::comm_sm_share")]
    pub comm_sm_share: f64,
    /// How much longer a collective takes while compute kernels run beside it (HBM
    /// contention: NCCL moves 2–3× its link rate through memory, NVIDIA/nccl#1428).
    /// Default 0.17: ncclAllReduce 4.7 ms alone vs 5.5 ms beside a GEMM (NVIDIA/nccl#205).
    #[serde(default = "defaults::comm_slowdown")]
    pub comm_slowdown: f64,
    /// Chip-to-chip spread of the sustained clock (relative standard deviation) for every
    /// GPU of the experiment; default: each GPU file's `[clocks] spread`, else its family's
    /// (1%, Sinha et al. SC'22). 0 gives every chip the nominal clock.
    #[serde(default)]
    pub clock_spread: Option<f64>,
}

impl Default for ComputeConfig {
    fn default() -> Self {
        ComputeConfig {
            kernel_tables: Vec::new(),
            comm_sm_share: defaults::comm_sm_share(),
            comm_slowdown: defaults::comm_slowdown(),
            clock_spread: None,
        }
    }
}

/// Defaults of the experiment file's keys (serde `default = ...`).
pub mod defaults {
    use super::*;
    pub fn comm_sm_share() -> f64 {
        0.159
    }
    pub fn comm_slowdown() -> f64 {
        0.17
    }
    pub fn one() -> u32 {
        1
    }
    pub fn yes() -> bool {
        true
    }
    pub fn one_f() -> f64 {
        1.0
    }
    pub fn gpus_per_host() -> u32 {
        8
    }
    pub fn topology() -> TopologyKind {
        TopologyKind::RailOptimized
    }
    pub fn nic_gbps() -> f64 {
        400.0
    }
    pub fn scale_up() -> ScaleUp {
        ScaleUp::Auto
    }
    /// A SuperPOD scalable unit is 32 DGX hosts (NVIDIA DGX SuperPOD reference architecture).
    pub fn hosts_per_segment() -> u32 {
        32
    }
    pub fn segments_per_pod() -> u32 {
        16
    }
    /// DESIGN.md: NVLink and PCIe hops ~100 ns, network links ~1 µs.
    pub fn nvlink_ns() -> f64 {
        100.0
    }
    pub fn pcie_ns() -> f64 {
        100.0
    }
    pub fn network_ns() -> f64 {
        1000.0
    }
    /// CXL switch hop; HCSim and CXL 2.0 switch measurements put one hop at 100-250 ns.
    pub fn cxl_ns() -> f64 {
        200.0
    }
    pub fn cxl_memory_gb_s() -> f64 {
        64.0
    }
    pub fn cxl_link_gb_s() -> f64 {
        64.0
    }
    pub fn zero_stage() -> u32 {
        1
    }
    pub fn order() -> String {
        "tp-cp-ep-dp-pp".into()
    }
    pub fn precision() -> Precision {
        Precision::Bf16
    }
    pub fn recompute() -> Recompute {
        Recompute::None
    }
    pub fn memory_check() -> MemoryCheck {
        MemoryCheck::Error
    }
    pub fn network_model() -> NetworkModel {
        NetworkModel::Packet
    }
    pub fn segment_bytes() -> u64 {
        1 << 20
    }
    /// InfiniBand's and RoCE's usual 4 KiB MTU (NCCL_IB uses the port's active MTU).
    pub fn mtu_bytes() -> u64 {
        4096
    }
    pub fn intra_host() -> NetworkModel {
        NetworkModel::Analytical
    }
    pub fn congestion_control() -> CongestionControl {
        CongestionControl::None
    }
    pub fn dcqcn_kmin() -> u64 {
        5 * 1024
    }
    pub fn dcqcn_kmax() -> u64 {
        200 * 1024
    }
    pub fn dcqcn_pmax() -> f64 {
        0.01
    }
    pub fn dcqcn_g() -> f64 {
        1.0 / 256.0
    }
    pub fn dcqcn_timer_us() -> f64 {
        55.0
    }
    pub fn dcqcn_byte_counter() -> u64 {
        10 * 1024 * 1024
    }
    pub fn dcqcn_fast_recovery() -> u32 {
        5
    }
    pub fn dcqcn_rate_ai() -> f64 {
        0.04
    }
    pub fn dcqcn_rate_hai() -> f64 {
        0.4
    }
    pub fn dcqcn_min_rate() -> f64 {
        0.1
    }
    pub fn dcqcn_cnp_interval_us() -> f64 {
        50.0
    }
    pub fn algorithm() -> CollectiveAlgorithm {
        CollectiveAlgorithm::Auto
    }
    pub fn protocol() -> CollectiveProtocol {
        CollectiveProtocol::Auto
    }
    pub fn buffsize() -> u64 {
        4 << 20
    }
    pub fn p2p_net_chunksize() -> u64 {
        128 << 10
    }
    pub fn cross_nic() -> u8 {
        2
    }
    pub fn seed() -> u64 {
        1
    }
}

/// An experiment as read from disk: the typed config plus where each value came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: ExperimentConfig,
    pub tree: Located,
    pub path: PathBuf,
}

impl LoadedConfig {
    /// Where `dotted.key` was written (the deepest part that exists).
    pub fn origin(&self, key: &str) -> Origin {
        self.tree.origin_of(&parse_path(key))
    }

    /// An error about `key`, located where the key was written.
    pub fn error(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(self.origin(key), key, message)
    }

    /// Resolves a path written in the config relative to the file that wrote it.
    pub fn resolve_path(&self, key: &str, written: &str) -> PathBuf {
        let p = Path::new(written);
        if p.is_absolute() {
            return p.to_path_buf();
        }
        match self.origin(key) {
            Origin::File { file, .. } | Origin::WholeFile(file) => {
                Path::new(&file).parent().unwrap_or(Path::new(".")).join(p)
            }
            _ => p.to_path_buf(),
        }
    }
}

/// Reads an experiment file with its includes, its overrides (`--set`, `--vary`, a plan
/// candidate's, ...) and its model preset: the one way an experiment is read.
pub fn load(path: &Path, overrides: &Overrides) -> Result<LoadedConfig, ConfigError> {
    from_tree(load_tree(path, overrides)?, path)
}

/// The located tree of an experiment file with its includes and overrides, before presets are
/// expanded: for callers that adjust it (`fleetsim collective`).
pub fn load_tree(path: &Path, overrides: &Overrides) -> Result<Located, ConfigError> {
    let mut tree = source::load_with_includes(path, &mut Vec::new())?;
    overrides.apply(&mut tree)?;
    Ok(tree)
}

/// [`load`] for the text of an experiment file already in memory: errors name `path`, and its
/// `include`s are read relative to `path`'s folder.
pub fn load_text(
    path: &Path,
    text: &str,
    overrides: &Overrides,
) -> Result<LoadedConfig, ConfigError> {
    let mut tree = source::load_text_with_includes(path, text, &mut Vec::new())?;
    overrides.apply(&mut tree)?;
    from_tree(tree, path)
}

/// Expands presets and reads the typed config out of a located tree.
pub fn from_tree(mut tree: Located, path: &Path) -> Result<LoadedConfig, ConfigError> {
    model::expand_model_sources(&mut tree)?;
    let config: ExperimentConfig = source::deserialize(&tree)?;
    Ok(LoadedConfig {
        config,
        tree,
        path: path.to_path_buf(),
    })
}

/// The `[cluster]` keys of a shipped cluster fragment (`configs/clusters/NAME.toml`, embedded),
/// each value as TOML text, so that another description of the same machine (`fleetsim
/// validate`'s default clusters) is this one and not a copy. `None` for an unknown name.
pub fn shipped_cluster(name: &str) -> Option<Vec<(String, String)>> {
    let (_, text) = crate::embedded::CLUSTERS
        .iter()
        .find(|(stem, _)| *stem == name)?;
    let table: toml::Table = text.parse().ok()?;
    let cluster = table.get("cluster")?.as_table()?;
    Some(
        cluster
            .iter()
            .map(|(key, value)| (key.clone(), value.to_string()))
            .collect(),
    )
}
