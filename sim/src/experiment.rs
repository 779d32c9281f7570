//! A validated experiment: the config resolved into GPU types, model, parallel layout, batch
//! schedule and memory estimate. Every check names the key to fix and where it was written.

use crate::config::{
    self, ConfigError, FaultKind, Fp8Recipe, LoadedConfig, MemoryCheck, MoeTokenDispatcher,
    NetworkModel, Precision, Recompute, RecomputeModule, Routing, TensorClass, TopologyKind,
};
use crate::gpu::{GpuDatabase, GpuSpec};
use crate::layout::{ParallelLayout, parse_order};
use crate::memory::{self, MemoryInputs, StageMemory};
use crate::model::ModelSpec;
use crate::pipeline_layout::PipelineLayout;
use crate::time::SimTime;
use crate::topology::{GraphFile, Topology};

/// The error of an experiment with neither `[model]` nor `workload_file`.
const MISSING_MODEL: &str = "missing required key `model`; add a [model] section (model.preset, model.hf_config or the model's keys), or name an imported workload with workload_file";

/// Largest cluster fleetsim accepts: GPU ids must fit comfortably in 32-bit node ids.
pub const MAX_GPUS: u32 = 1 << 24;
/// The most micro-batches per data-parallel replica (gradient accumulation steps).
pub const MAX_MICRO_BATCHES: u64 = 1 << 17;
/// The most layer passes (layers x micro-batches) one pipeline stage may run: its compiled
/// program holds some thirty ops per pass.
pub const MAX_LAYER_PASSES: u64 = 1 << 20;

#[derive(Debug, Clone)]
pub struct Experiment {
    pub loaded: LoadedConfig,
    /// Distinct GPU types of the cluster, in order of first appearance.
    pub gpu_types: Vec<GpuSpec>,
    /// Index into `gpu_types` for every host.
    pub host_gpu_type: Vec<u16>,
    /// The model, `None` when the experiment runs an imported `workload_file` without a
    /// `[model]` section; [`Experiment::model`] names what needs one.
    pub model: Option<ModelSpec>,
    pub layout: ParallelLayout,
    pub global_batch: u64,
    pub micro_batch: u64,
    /// Micro-batches per iteration of the busiest data-parallel replica (gradient
    /// accumulation); all replicas run this many unless `replica_micro_batches` differ.
    pub micro_batches: u64,
    /// Micro-batches of each data-parallel replica, by DP index.
    pub replica_micro_batches: Vec<u64>,
    /// Transformer layers (and MTP modules) on each pipeline stage.
    pub stage_layers: Vec<u64>,
    /// Layer ids of every model chunk of every stage, `[stage][chunk]`: MTP modules are ids
    /// `model.layers..`.
    pub chunk_layers: memory::ChunkLayers,
    pub memory: Vec<StageMemory>,
    /// Smallest HBM among the GPUs of each stage, bytes.
    pub stage_hbm: Vec<f64>,
    /// Tensor classes kept in CXL memory: configured, or spilled because HBM is too small.
    pub cxl_tensors: Vec<TensorClass>,
    /// Warnings that did not stop the experiment (e.g. memory with memory_check = "warn").
    pub warnings: Vec<String>,
    /// `[[faults]]` on GPUs and the job (link faults are in the topology it builds).
    pub faults: crate::fault::Faults,
    /// `[[jobs]]`: several jobs sharing the cluster, each with its own experiment. Empty for
    /// one job; with jobs, the fields above that describe a job (model, layout, batch,
    /// memory) are the cluster's defaults and mean nothing: read the jobs'.
    pub jobs: Vec<Job>,
}

/// One job of a `[[jobs]]` experiment: its own validated experiment and its hosts.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    /// The job's experiment: the cluster's sections with the job's model, layout and
    /// training, `cluster.gpus` set to the GPUs of its hosts.
    pub exp: Box<Experiment>,
    /// Host indices, ascending.
    pub hosts: Vec<u32>,
    /// How the hosts were chosen, for reports: `packed`, `spread`, `random`, `hosts`.
    pub placement: String,
    /// When the job starts its iteration (`start_s`).
    pub start: SimTime,
}

impl Job {
    /// The job's GPUs by global index, in its rank order: host by host, as Slurm's block
    /// distribution numbers the ranks of an exclusive allocation.
    pub fn gpus(&self, gpus_per_host: u32) -> Vec<u32> {
        self.hosts
            .iter()
            .flat_map(|&h| h * gpus_per_host..(h + 1) * gpus_per_host)
            .collect()
    }
}

impl Experiment {
    pub fn name(&self) -> &str {
        &self.loaded.config.name
    }

    /// How many hosts the widest group of `kind` spans. Groups are translates of one
    /// another under Megatron's layout; the first few suffice for the maximum, and checking
    /// every group would be O(GPUs · group size).
    pub fn group_host_span(&self, kind: crate::layout::GroupKind) -> u32 {
        let gph = self.loaded.config.cluster.gpus_per_host;
        (0..self.layout.group_count(kind).min(64))
            .map(|i| {
                let mut hosts: Vec<u32> = self
                    .layout
                    .nth_group(kind, i)
                    .iter()
                    .map(|r| r / gph)
                    .collect();
                hosts.sort_unstable();
                hosts.dedup();
                hosts.len() as u32
            })
            .max()
            .unwrap_or(0)
    }

    /// A group kind whose collectives run inside every layer (tensor, context, expert and
    /// expert-tensor parallel) and span more than one host, if any: then ranks on different
    /// hosts meet every layer, not only at pipeline sends and gradient reductions.
    pub fn layer_group_across_hosts(&self) -> Option<crate::layout::GroupKind> {
        self.layer_group_kinds()
            .find(|&kind| self.group_host_span(kind) > 1)
    }

    /// The fewest consecutive hosts, aligned from host 0, that hold every group of the kinds
    /// [`Self::layer_group_across_hosts`] looks at whole: dealt as one, such blocks keep the
    /// collectives inside every layer within a partition. `None` where no block of up to all
    /// the hosts does (a layout whose order puts data parallelism inside those groups).
    pub fn layer_block_hosts(&self) -> Option<u32> {
        // Groups are translates of one another (as `group_host_span` assumes): where none of
        // the first spans hosts, a host is the block, without listing every group.
        if self.layer_group_across_hosts().is_none() {
            return Some(1);
        }
        let gph = self.loaded.config.cluster.gpus_per_host.max(1);
        let hosts = self.layout.world().div_ceil(gph).max(1);
        let ranges: Vec<(u32, u32)> = self
            .layer_group_kinds()
            .flat_map(|kind| {
                (0..self.layout.group_count(kind)).map(move |i| {
                    let members = self.layout.nth_group(kind, i);
                    let lo = members.iter().min().map_or(0, |r| r / gph);
                    let hi = members.iter().max().map_or(0, |r| r / gph);
                    (lo, hi)
                })
            })
            .collect();
        let mut block = ranges
            .iter()
            .map(|&(lo, hi)| hi - lo + 1)
            .max()
            .unwrap_or(1);
        while block <= hosts {
            if ranges.iter().all(|&(lo, hi)| lo / block == hi / block) {
                return Some(block);
            }
            block *= 2;
        }
        None
    }

    fn layer_group_kinds(&self) -> impl Iterator<Item = crate::layout::GroupKind> + '_ {
        use crate::layout::GroupKind;
        [
            GroupKind::Tp,
            GroupKind::Cp,
            GroupKind::Ep,
            GroupKind::ExpertTp,
        ]
        .into_iter()
        .filter(|&kind| self.layout.group_size(kind) > 1)
    }

    /// The compute model this experiment asks for (its kernel tables, attention kernels and
    /// interference factors), over its own GPU types.
    pub fn compute_model(&self) -> Result<crate::compute::ComputeModel, ConfigError> {
        crate::compute::ComputeModel::from_config(
            &self.loaded,
            self.model.as_ref(),
            &self.gpu_types,
        )
    }

    /// This experiment with job `j` of its `[[jobs]]` alone on its hosts, the other jobs'
    /// hosts idle: what the job's slowdown compares against.
    pub fn only_job(&self, j: usize) -> Experiment {
        let mut alone = self.clone();
        alone.jobs = vec![self.jobs[j].clone()];
        alone
    }

    /// The model, or an error saying that `what` needs one: an experiment that runs an
    /// imported `workload_file` may leave `[model]` out, and then only what reads the
    /// imported workload works.
    pub fn model(&self, what: &str) -> Result<&ModelSpec, ConfigError> {
        self.model.as_ref().ok_or_else(|| {
            self.loaded.error(
                "workload_file",
                format!(
                    "{what} needs a model, and this experiment has no [model] section (it runs the imported workload_file); add [model] with model.preset, model.hf_config or the model's keys"
                ),
            )
        })
    }

    pub fn hosts(&self) -> u32 {
        self.host_gpu_type.len() as u32
    }

    /// GPU type of a rank under the default placement (rank r on GPU r).
    pub fn gpu_of_rank(&self, rank: u32) -> &GpuSpec {
        &self.gpu_types[usize::from(self.gpu_type_of_rank(rank))]
    }

    /// Index into `gpu_types` of a rank's GPU under the default placement.
    pub fn gpu_type_of_rank(&self, rank: u32) -> u16 {
        let gph = self.loaded.config.cluster.gpus_per_host;
        self.host_gpu_type[(rank / gph) as usize]
    }

    /// For every pipeline stage, the slowest GPU (lowest dense peak at the run's precision)
    /// among its ranks: the one that paces the stage. One pass over the ranks.
    pub fn stage_gpus(&self) -> Vec<&GpuSpec> {
        let precision = self.loaded.config.training.precision;
        let mut slowest: Vec<Option<&GpuSpec>> = vec![None; self.layout.pp as usize];
        for r in 0..self.layout.world() {
            let gpu = self.gpu_of_rank(r);
            let slot = &mut slowest[self.layout.coords(r).pp as usize];
            if slot.is_none_or(|s| gpu.peak_flops(precision) < s.peak_flops(precision)) {
                *slot = Some(gpu);
            }
        }
        slowest
            .into_iter()
            .map(|g| g.unwrap_or(&self.gpu_types[0]))
            .collect()
    }

    /// Validates a loaded experiment file into an experiment. `jobs_of` reads its
    /// `[[jobs]]` (each job an experiment of its own: [`crate::jobs::from_loaded`]), once the
    /// cluster's size and GPU types are known to be sound; the front door
    /// ([`crate::load`]) passes it, so this file need not know how jobs are placed.
    pub fn from_checked(
        mut loaded: LoadedConfig,
        jobs_of: &dyn Fn(&LoadedConfig) -> Result<Vec<Job>, ConfigError>,
    ) -> Result<Experiment, ConfigError> {
        if loaded.config.name.trim().is_empty() {
            return Err(loaded.error("name", "must not be empty"));
        }

        // --- cluster size and GPU types (before any job is placed on the hosts) ---
        let c = &loaded.config.cluster;
        positive(&loaded, "cluster.gpus", u64::from(c.gpus))?;
        positive(&loaded, "cluster.gpus_per_host", u64::from(c.gpus_per_host))?;
        if c.gpus > MAX_GPUS {
            return Err(loaded.error(
                "cluster.gpus",
                format!("{} exceeds the limit of {MAX_GPUS} GPUs", c.gpus),
            ));
        }
        if !c.gpus.is_multiple_of(c.gpus_per_host) {
            return Err(loaded.error(
                "cluster.gpus",
                format!(
                    "{} GPUs do not fill whole hosts of cluster.gpus_per_host = {}",
                    c.gpus, c.gpus_per_host
                ),
            ));
        }
        let hosts = c.gpus / c.gpus_per_host;
        let db = GpuDatabase::embedded()?;
        let (gpu_types, host_gpu_type) = resolve_gpus(&loaded, &db, hosts)?;

        let jobs = jobs_of(&loaded)?;
        if !jobs.is_empty() {
            // The top-level model, layout and training were the jobs' defaults; the cluster's
            // own checks must not judge them against the whole cluster.
            loaded.config.model = None;
            loaded.config.parallel = Default::default();
            loaded.config.training = Default::default();
        }
        // Megatron-Core's spelling of MXFP8 (`--fp8-format e4m3 --fp8-recipe mxfp8`) is the
        // `mxfp8` precision.
        let training = &mut loaded.config.training;
        if training.precision == Precision::Fp8 && training.fp8_recipe == Some(Fp8Recipe::Mxfp8) {
            training.precision = Precision::Mxfp8;
        }
        let cfg = &loaded.config;
        let c = &cfg.cluster;
        let err = |key: &str, msg: String| loaded.error(key, msg);

        // --- model ---
        let model = match (&cfg.model, &cfg.workload_file) {
            (Some(m), _) => Some(ModelSpec::resolve(m, &|k, m| loaded.error(k, m))?),
            // An imported workload brings its own kernels and collectives.
            (None, Some(_)) => None,
            (None, None) if jobs.is_empty() => return Err(err("", MISSING_MODEL.into())),
            (None, None) => None,
        };

        // --- parallelism ---
        let p = &cfg.parallel;
        for (key, v) in [
            ("parallel.tp", p.tp),
            ("parallel.pp", p.pp),
            ("parallel.cp", p.cp),
            ("parallel.ep", p.ep),
            ("parallel.vp", p.vp),
            ("parallel.micro_batch", p.micro_batch),
        ] {
            positive(&loaded, key, u64::from(v))?;
        }
        let order = parse_order(&p.order).map_err(|e| err("parallel.order", e.to_string()))?;
        let model_parallel = u64::from(p.tp) * u64::from(p.pp) * u64::from(p.cp);
        let dp = match p.dp {
            Some(0) => return Err(err("parallel.dp", "must be greater than 0".into())),
            Some(dp) => {
                if model_parallel * u64::from(dp) != u64::from(c.gpus) {
                    return Err(err(
                        "parallel.dp",
                        format!(
                            "TP {} x PP {} x CP {} x DP {dp} = {} but cluster.gpus = {}; omit parallel.dp to derive it",
                            p.tp,
                            p.pp,
                            p.cp,
                            model_parallel * u64::from(dp),
                            c.gpus
                        ),
                    ));
                }
                dp
            }
            None => {
                if u64::from(c.gpus) % model_parallel != 0 {
                    return Err(err(
                        "parallel.tp",
                        format!(
                            "cluster.gpus = {} is not divisible by TP {} x PP {} x CP {} = {model_parallel}",
                            c.gpus, p.tp, p.pp, p.cp
                        ),
                    ));
                }
                (u64::from(c.gpus) / model_parallel) as u32
            }
        };
        if let Some(model) = &model {
            if model.heads % u64::from(p.tp) != 0 {
                return Err(err(
                    "parallel.tp",
                    format!(
                        "TP {} must divide model.heads = {} (Megatron splits attention heads across TP)",
                        p.tp, model.heads
                    ),
                ));
            }
            // megatron/training/arguments.py: num_query_groups % tensor_model_parallel_size == 0.
            if model.kv_heads % u64::from(p.tp) != 0 {
                return Err(err(
                    "parallel.tp",
                    format!(
                        "TP {} must divide model.kv_heads = {} (Megatron splits query groups across TP)",
                        p.tp, model.kv_heads
                    ),
                ));
            }
            if model.ffn_hidden % u64::from(p.tp) != 0 {
                return Err(err(
                    "parallel.tp",
                    format!(
                        "TP {} must divide model.ffn_hidden = {}",
                        p.tp, model.ffn_hidden
                    ),
                ));
            }
        }
        let (vp, chunk_layers) = pipeline_split(&loaded, model.as_ref())?;
        let stage_layers: Vec<u64> = chunk_layers
            .iter()
            .map(|chunks| chunks.iter().map(|c| c.len() as u64).sum())
            .collect();
        if let Some(model) = &model
            && p.cp > 1
            && model.seq_len % (2 * u64::from(p.cp)) != 0
        {
            return Err(err(
                "parallel.cp",
                format!(
                    "model.seq_len = {} must be divisible by 2 x CP = {} (Megatron's load-balanced context split)",
                    model.seq_len,
                    2 * p.cp
                ),
            ));
        }
        if let Some(model) = &model
            && p.cp > 1
            && model.window.is_some()
        {
            return Err(err(
                "parallel.cp",
                format!(
                    "CP {} with sliding-window attention (model.window_size) is not modelled: ring attention over a window skips KV blocks fleetsim does not track; use parallel.cp = 1",
                    p.cp
                ),
            ));
        }
        if p.ep > 1
            && let Some(model) = &model
        {
            let Some(moe) = model.moe else {
                return Err(err(
                    "parallel.ep",
                    format!(
                        "ep = {} needs a mixture-of-experts model (model.experts)",
                        p.ep
                    ),
                ));
            };
            if moe.experts % u64::from(p.ep) != 0 {
                return Err(err(
                    "parallel.ep",
                    format!("EP {} must divide model.experts = {}", p.ep, moe.experts),
                ));
            }
        }
        let etp = expert_tensor_parallel(&loaded, dp, model.as_ref())?;
        if p.zero > 3 {
            return Err(err(
                "parallel.zero",
                format!("must be 0, 1, 2 or 3, got {}", p.zero),
            ));
        }
        let layout = ParallelLayout {
            tp: p.tp,
            cp: p.cp,
            ep: p.ep,
            etp,
            dp,
            pp: p.pp,
            vp,
            order,
        };
        check_expert_layout(&loaded, &layout)?;

        // --- batch ---
        let micro_batch = u64::from(p.micro_batch);
        let per_step = micro_batch * u64::from(dp);
        let global_batch = match p.global_batch {
            Some(0) => {
                return Err(err(
                    "parallel.global_batch",
                    "must be greater than 0".into(),
                ));
            }
            Some(g) => u64::from(g),
            None => p.replica_micro_batches.as_ref().map_or(per_step, |list| {
                list.iter().map(|&m| u64::from(m)).sum::<u64>() * micro_batch
            }),
        };
        if global_batch % per_step != 0 && p.replica_micro_batches.is_none() {
            return Err(err(
                "parallel.global_batch",
                format!(
                    "{global_batch} is not divisible by micro_batch {micro_batch} x DP {dp} = {per_step}"
                ),
            ));
        }
        if global_batch / per_step > MAX_MICRO_BATCHES {
            return Err(err(
                "parallel.global_batch",
                format!(
                    "{global_batch} makes {} micro-batches per replica (global_batch / (micro_batch {micro_batch} x DP {dp})), more than fleetsim simulates ({MAX_MICRO_BATCHES}); raise micro_batch or DP, or lower global_batch",
                    global_batch / per_step
                ),
            ));
        }
        let replica_micro_batches = replica_micro_batches(&loaded, dp, micro_batch, global_batch)?;
        let micro_batches = replica_micro_batches.iter().copied().max().unwrap_or(1);
        // A stage's program holds some thirty ops per layer and micro-batch: bounded before
        // it is compiled.
        if let Some(&layers) = stage_layers.iter().max()
            && layers.saturating_mul(micro_batches) > MAX_LAYER_PASSES
        {
            return Err(err(
                "parallel.global_batch",
                format!(
                    "a pipeline stage would run {layers} layers x {micro_batches} micro-batches = {} layer passes, more than fleetsim simulates per stage ({MAX_LAYER_PASSES}); lower global_batch or raise PP or DP",
                    layers * micro_batches
                ),
            ));
        }
        if vp > 1
            && let Some(m) = replica_micro_batches
                .iter()
                .find(|m| !m.is_multiple_of(u64::from(p.pp)))
        {
            let key = if p.replica_micro_batches.is_some() {
                "parallel.replica_micro_batches"
            } else {
                "parallel.global_batch"
            };
            return Err(err(
                key,
                format!(
                    "the interleaved schedule needs micro-batches per replica ({m}) divisible by PP {}",
                    p.pp
                ),
            ));
        }

        // --- training, network, engine ---
        let t = &cfg.training;
        if t.iterations != 1 {
            return Err(err(
                "training.iterations",
                format!(
                    "{} is not supported: fleetsim simulates one training iteration, and every iteration of a steady run is alike (multiply iteration_time_s); leave the key out or set 1",
                    t.iterations
                ),
            ));
        }
        check_quantization(t).map_err(|(key, m)| err(key, m))?;
        for g in &gpu_types {
            if g.peak_flops(t.precision) <= 0.0 {
                let supported: Vec<&str> = Precision::ALL
                    .into_iter()
                    .filter(|&p| g.peak_flops(p) > 0.0)
                    .map(Precision::name)
                    .collect();
                return Err(err(
                    "training.precision",
                    format!(
                        "{} has no {} tensor support; choose one of: {}",
                        g.name,
                        t.precision.name(),
                        supported.join(", ")
                    ),
                ));
            }
        }
        for (name, sms) in t.tp_comm_overlap_sms.entries() {
            let Some(sms) = sms else { continue };
            if let Some(g) = gpu_types.iter().find(|g| sms >= g.sms) {
                return Err(err(
                    &format!("training.tp_comm_overlap_sms.{name}"),
                    format!(
                        "{sms} SMs held back for communication leave the GEMM none of {}'s {}; Transformer Engine's recipes hold 1-32",
                        g.name, g.sms
                    ),
                ));
            }
        }
        let mut warnings = Vec::new();
        if let Some(modules) = &t.recompute_modules {
            if t.recompute != Recompute::Selective {
                // Megatron-Core reads `recompute_modules` only under selective granularity.
                warnings.push(format!(
                    "training.recompute_modules is ignored with recompute = \"{}\": Megatron-Core reads --recompute-modules only with --recompute-granularity selective",
                    if t.recompute == Recompute::Full { "full" } else { "none" }
                ));
            } else {
                check_recompute_modules(modules, model.as_ref(), t)
                    .map_err(|m| err("training.recompute_modules", m))?;
            }
        }
        if t.moe_shared_expert_overlap
            && model
                .as_ref()
                .and_then(|m| m.moe)
                .is_none_or(|m| m.shared_experts == 0)
        {
            return Err(err(
                "training.moe_shared_expert_overlap",
                "runs shared experts beside the MoE all-to-alls (Megatron-Core --moe-shared-expert-overlap), but the model has no shared experts; set model.shared_experts (with model.experts) or leave it out".into(),
            ));
        }
        if t.moe_token_dispatcher != MoeTokenDispatcher::Alltoall
            && model.as_ref().and_then(|m| m.moe).is_none()
        {
            return Err(err(
                "training.moe_token_dispatcher",
                format!(
                    "\"{}\" dispatches the tokens of mixture-of-experts layers, but the model has none; set model.experts and model.top_k, or use \"alltoall\"",
                    t.moe_token_dispatcher.name()
                ),
            ));
        }
        // NeMo scripts/performance/llm/pretrain_deepseek_v3.py (25.07): "not supported for
        // deepEP"; Megatron-Core of that time overlapped shared experts in its alltoall
        // dispatcher only. HybridEP came with a flex dispatcher that overlaps them.
        if t.moe_token_dispatcher == MoeTokenDispatcher::Deepep && t.moe_shared_expert_overlap {
            return Err(err(
                "training.moe_shared_expert_overlap",
                "runs shared experts beside the alltoall dispatcher's all-to-alls, which DeepEP does not have (Megatron-Core overlaps them in MoEAlltoAllTokenDispatcher only); set it to false or training.moe_token_dispatcher = \"alltoall\"".into(),
            ));
        }
        if t.overlap_moe_expert_parallel_comm {
            check_ep_overlap(t, &layout, p.zero)
                .map_err(|m| err("training.overlap_moe_expert_parallel_comm", m))?;
        }
        if t.delay_wgrad_compute && !t.overlap_moe_expert_parallel_comm {
            return Err(err(
                "training.delay_wgrad_compute",
                "delays the experts' weight gradients behind the all-to-all overlap, which is off; set training.overlap_moe_expert_parallel_comm = true or leave it out".into(),
            ));
        }
        positive(&loaded, "network.segment_bytes", cfg.network.segment_bytes)?;
        positive(&loaded, "engine.workers", u64::from(cfg.engine.workers))?;

        // --- memory ---
        let inputs = memory_inputs(cfg, micro_batches);
        // Without a model there is nothing to estimate: `fleetsim check` says n/a.
        let memory = match &model {
            Some(model) => memory::estimate(model, &layout, &chunk_layers, &inputs),
            None => Vec::new(),
        };
        let gph = c.gpus_per_host;
        let mut stage_hbm = vec![f64::INFINITY; p.pp as usize];
        for rank in 0..c.gpus {
            let stage = layout.coords(rank).pp as usize;
            let g = &gpu_types[usize::from(host_gpu_type[(rank / gph) as usize])];
            stage_hbm[stage] = stage_hbm[stage].min(g.hbm_bytes());
        }
        let cxl_tensors = place_tensors(&loaded, &memory, &stage_hbm)?;
        if let Some((m, hbm)) = memory
            .iter()
            .zip(&stage_hbm)
            .find(|(m, hbm)| m.in_hbm(&cxl_tensors) > **hbm)
        {
            let message = format!(
                "does not fit: stage {} needs {:.1} GB per GPU (weights {:.1}, gradients {:.1}, optimizer {:.1}, activations {:.1}) but HBM holds {:.1} GB; \
                 raise TP/PP, use ZeRO or recompute, or set training.memory_check = \"warn\"",
                m.stage,
                m.total() / 1e9,
                m.weights / 1e9,
                m.gradients / 1e9,
                m.optimizer / 1e9,
                m.activations / 1e9,
                hbm / 1e9
            );
            match t.memory_check {
                MemoryCheck::Error => return Err(err("training.memory_check", message)),
                MemoryCheck::Warn => warnings.push(format!("memory {message}")),
                MemoryCheck::Off => {}
            }
        }

        let faults = crate::fault::Faults::from_config(&loaded)?;
        if let Some(i) = cfg
            .faults
            .iter()
            .position(|f| f.kind == FaultKind::LinkDown)
            && cfg.network.model == NetworkModel::Analytical
        {
            warnings.push(format!(
                "faults[{i}]: with network.model = \"analytical\" a link that is down only moves routes onto the links left, and a transfer is timed by its own path alone (no contention), so the traffic they take over costs nothing; use network.model = \"packet\" or \"flow\" to see it"
            ));
        }
        if cfg.network.routing == Routing::Adaptive && cfg.network.model == NetworkModel::Flow {
            warnings.push(
                "network.routing = \"adaptive\" is modelled segment by segment (network.model = \"packet\"); the flow model routes each flow by its ECMP hash, so flows may share an uplink an adaptively routed fabric would spread them over".into(),
            );
        }
        Ok(Experiment {
            loaded,
            gpu_types,
            host_gpu_type,
            model,
            layout,
            global_batch,
            micro_batch,
            micro_batches,
            replica_micro_batches,
            stage_layers,
            chunk_layers,
            memory,
            stage_hbm,
            cxl_tensors,
            warnings,
            faults,
            jobs,
        })
    }

    /// Whether the cluster's CXL tier is cache-coherent; `None` without a CXL tier.
    pub fn cxl_coherent(&self) -> Option<bool> {
        self.loaded.config.cluster.cxl.as_ref().map(|c| c.coherent)
    }

    /// What the memory estimate reads besides model and layout.
    pub fn memory_inputs(&self) -> MemoryInputs {
        memory_inputs(&self.loaded.config, self.micro_batches)
    }

    /// Builds the cluster's topology with its routing structures, the link faults that
    /// act from the start applied.
    pub fn build_topology(&self) -> Result<Topology, ConfigError> {
        Ok(self.build_topology_and_timed_faults()?.0)
    }

    /// [`Experiment::build_topology`], and the link faults that start later, which the
    /// engine applies when their time comes.
    pub fn build_topology_and_timed_faults(
        &self,
    ) -> Result<(Topology, Vec<crate::fault::TimedLink>), ConfigError> {
        let c = &self.loaded.config.cluster;
        let graph = match (c.topology, &c.graph_file) {
            (TopologyKind::Graph, Some(file)) => {
                let path = self.loaded.resolve_path("cluster.graph_file", file);
                let shown = path.display().to_string();
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    self.loaded
                        .error("cluster.graph_file", format!("cannot read {shown}: {e}"))
                })?;
                Some(GraphFile::parse(&shown, &text)?)
            }
            (TopologyKind::Graph, None) => {
                return Err(self.loaded.error(
                    "cluster.topology",
                    "topology = \"graph\" needs cluster.graph_file = \"path/to/graph.toml\"",
                ));
            }
            (_, Some(_)) => {
                return Err(self.loaded.error(
                    "cluster.graph_file",
                    "is only read with cluster.topology = \"graph\"",
                ));
            }
            (_, None) => None,
        };
        let names: Option<Vec<String>> = graph
            .as_ref()
            .map(|g| g.nodes.iter().map(|n| n.name.clone()).collect());
        let mut topology = Topology::build(c, &self.gpu_types, &self.host_gpu_type, graph)
            .map_err(|e| self.loaded.error(e.key(), e.to_string()))?;
        let timed = crate::fault::apply_to_topology(&self.loaded, &mut topology, names.as_deref())?;
        Ok((topology, timed))
    }
}

/// VP and the layer ids of every model chunk of every stage: from `parallel.pipeline_layout`,
/// or from the layers per stage ([`split_layers`]) split into chunks with the MTP modules last.
fn pipeline_split(
    loaded: &LoadedConfig,
    model: Option<&ModelSpec>,
) -> Result<(u32, memory::ChunkLayers), ConfigError> {
    let p = &loaded.config.parallel;
    let interleaving_needs_stages = |key: &str, vp: u32| {
        loaded.error(
            key,
            format!("vp = {vp} needs pp >= 2 (interleaving splits pipeline stages)"),
        )
    };
    if p.vp > 1 && p.pp < 2 {
        return Err(interleaving_needs_stages("parallel.vp", p.vp));
    }
    let (vp, chunks) = match (model, &p.pipeline_layout) {
        (Some(model), Some(text)) => {
            let key = "parallel.pipeline_layout";
            let others = [
                ("parallel.stage_layers", p.stage_layers.is_some()),
                (
                    "parallel.first_stage_layers",
                    p.first_stage_layers.is_some(),
                ),
                ("parallel.last_stage_layers", p.last_stage_layers.is_some()),
                (
                    "parallel.account_for_embedding_in_pipeline_split",
                    p.account_for_embedding_in_pipeline_split,
                ),
                (
                    "parallel.account_for_loss_in_pipeline_split",
                    p.account_for_loss_in_pipeline_split,
                ),
            ];
            if let Some((other, _)) = others.iter().find(|(_, set)| *set) {
                return Err(loaded.error(
                    key,
                    format!("places every layer itself; remove {other} (Megatron-Core refuses both together)"),
                ));
            }
            let layout = PipelineLayout::parse(text, p.pp, p.vp, model.layers, model.mtp_layers)
                .map_err(|e| loaded.error(key, format!("`{text}`: {e}")))?;
            if layout.vp > 1 && p.pp < 2 {
                return Err(interleaving_needs_stages(key, layout.vp));
            }
            (layout.vp, layout.chunks)
        }
        (None, Some(_)) => {
            return Err(loaded.error(
                "parallel.pipeline_layout",
                "places a model's layers, and this experiment has no [model] (it runs the imported workload_file); remove the key",
            ));
        }
        (Some(model), None) => {
            let per_stage = split_layers(loaded, model.layers, p.pp, p.vp)?;
            (
                p.vp,
                memory::split_chunks(p.vp, &per_stage, model.mtp_layers),
            )
        }
        // An imported workload places its own layers.
        (None, None) => (
            p.vp,
            vec![vec![Vec::new(); p.vp.max(1) as usize]; p.pp as usize],
        ),
    };
    Ok((vp, chunks))
}

/// Layers per pipeline stage: even, with Megatron's first/last-stage overrides, or with the
/// embedding and loss counted as layers. A stage's chunks split its layers as
/// [`memory::chunk_counts`] says, so a stage needs at least one layer per chunk.
fn split_layers(
    loaded: &LoadedConfig,
    layers: u64,
    pp: u32,
    vp: u32,
) -> Result<Vec<u64>, ConfigError> {
    let p = &loaded.config.parallel;
    let counted = u64::from(p.account_for_embedding_in_pipeline_split)
        + u64::from(p.account_for_loss_in_pipeline_split);
    if counted > 0 {
        return split_counting_embedding_and_loss(loaded, layers, pp, vp);
    }
    if let Some(list) = &p.stage_layers {
        let key = "parallel.stage_layers";
        if p.first_stage_layers.is_some() || p.last_stage_layers.is_some() {
            return Err(loaded.error(
                key,
                "give either parallel.stage_layers or first/last_stage_layers, not both",
            ));
        }
        if list.len() != pp as usize {
            return Err(loaded.error(
                key,
                format!(
                    "lists {} stages but PP = {pp}; give one count per pipeline stage",
                    list.len()
                ),
            ));
        }
        let sum: u64 = list.iter().map(|&c| u64::from(c)).sum();
        if sum != layers {
            return Err(loaded.error(
                key,
                format!("adds up to {sum} layers but model.layers = {layers}"),
            ));
        }
        if let Some((s, &c)) = list.iter().enumerate().find(|(_, c)| **c < vp.max(1)) {
            return Err(loaded.error(
                key,
                format!("stage {s} has {c} layers; every stage needs at least one per model chunk (VP {vp})"),
            ));
        }
        return Ok(list.iter().map(|&c| u64::from(c)).collect());
    }
    let pp64 = u64::from(pp);
    let first = p.first_stage_layers.map(u64::from);
    let last = p.last_stage_layers.map(u64::from);
    if (first.is_some() || last.is_some()) && pp < 2 {
        return Err(loaded.error("parallel.first_stage_layers", "uneven stages need pp >= 2"));
    }
    let special = u64::from(first.is_some()) + u64::from(last.is_some());
    let fixed = first.unwrap_or(0) + last.unwrap_or(0);
    let rest_stages = pp64 - special;
    let even = if rest_stages == 0 {
        if fixed != layers {
            return Err(loaded.error(
                "parallel.first_stage_layers",
                format!("first + last stage layers = {fixed} but model.layers = {layers}"),
            ));
        }
        0
    } else {
        if fixed >= layers || !(layers - fixed).is_multiple_of(rest_stages) {
            let key = if special > 0 {
                "parallel.first_stage_layers"
            } else {
                "parallel.pp"
            };
            return Err(loaded.error(
                key,
                format!(
                    "model.layers = {layers} minus first/last-stage layers ({fixed}) does not split evenly over the other {rest_stages} stage(s) of PP {pp}"
                ),
            ));
        }
        (layers - fixed) / rest_stages
    };
    let mut counts = vec![even; pp as usize];
    if let Some(f) = first {
        counts[0] = f;
    }
    if let Some(l) = last {
        counts[pp as usize - 1] = l;
    }
    if let Some((s, &c)) = counts
        .iter()
        .enumerate()
        .find(|(_, c)| **c < u64::from(vp.max(1)))
    {
        return Err(loaded.error(
            "parallel.vp",
            format!(
                "stage {s} has {c} layers, fewer than its VP {vp} model chunks (each needs >= 1)"
            ),
        ));
    }
    Ok(counts)
}

/// Megatron-Core's split with `account_for_embedding_in_pipeline_split` and/or
/// `account_for_loss_in_pipeline_split` (`transformer_block.py`, `get_num_layers_to_build`;
/// checked in `transformer_config.py`): the embedding and the loss count as one layer each,
/// the total divides evenly over PP × VP virtual stages, and the first (last) virtual stage
/// builds one layer fewer. Llama 3.1 405B: 126 + 2 = 128 over PP 8 × VP 8, so 1 layer in
/// (stage 0, chunk 0) and (stage 7, chunk 7) and 2 everywhere else.
fn split_counting_embedding_and_loss(
    loaded: &LoadedConfig,
    layers: u64,
    pp: u32,
    vp: u32,
) -> Result<Vec<u64>, ConfigError> {
    let p = &loaded.config.parallel;
    let key = if p.account_for_embedding_in_pipeline_split {
        "parallel.account_for_embedding_in_pipeline_split"
    } else {
        "parallel.account_for_loss_in_pipeline_split"
    };
    if p.stage_layers.is_some() || p.first_stage_layers.is_some() || p.last_stage_layers.is_some() {
        return Err(loaded.error(
            key,
            "cannot be combined with parallel.stage_layers or first/last_stage_layers (Megatron-Core refuses the combination too)",
        ));
    }
    let embedding = u64::from(p.account_for_embedding_in_pipeline_split);
    let loss = u64::from(p.account_for_loss_in_pipeline_split);
    let total = layers + embedding + loss;
    let virtual_stages = u64::from(pp) * u64::from(vp.max(1));
    if !total.is_multiple_of(virtual_stages) || total / virtual_stages < 1 + embedding.max(loss) {
        return Err(loaded.error(
            key,
            format!(
                "model.layers = {layers} plus the embedding and loss counted as layers ({total}) must split evenly over PP {pp} × VP {vp} = {virtual_stages} virtual stages, with at least one layer left on the first and last"
            ),
        ));
    }
    let per_stage = total / u64::from(pp);
    let mut counts = vec![per_stage; pp as usize];
    counts[0] -= embedding;
    counts[pp as usize - 1] -= loss;
    Ok(counts)
}

/// The tensor classes that live in CXL memory: `cluster.cxl.tensors`, plus (with
/// `cluster.cxl.spill`) classes in [`TensorClass::SPILL_ORDER`] until every stage fits its HBM.
/// Checks that they fit the memory nodes.
fn place_tensors(
    loaded: &LoadedConfig,
    memory: &[StageMemory],
    stage_hbm: &[f64],
) -> Result<Vec<TensorClass>, ConfigError> {
    let Some(cxl) = &loaded.config.cluster.cxl else {
        return Ok(Vec::new());
    };
    let mut classes = cxl.tensors.clone();
    classes.sort();
    classes.dedup();
    let fits = |classes: &[TensorClass]| {
        memory
            .iter()
            .zip(stage_hbm)
            .all(|(m, hbm)| m.in_hbm(classes) <= *hbm)
    };
    if cxl.spill {
        for class in TensorClass::SPILL_ORDER {
            if fits(&classes) {
                break;
            }
            if !classes.contains(&class) {
                classes.push(class);
                classes.sort();
            }
        }
    }
    // Every GPU under a switch shares its memory nodes; the largest stage bounds each GPU.
    let c = &loaded.config.cluster;
    let per_gpu = memory
        .iter()
        .map(|m| classes.iter().map(|&k| m.of(k)).sum::<f64>())
        .fold(0.0, f64::max);
    let gpus = f64::from(cxl.hosts_per_switch * c.gpus_per_host);
    let capacity = cxl.memory_node_gb * 1e9 * f64::from(cxl.memory_nodes_per_switch);
    if per_gpu * gpus > capacity {
        let names: Vec<&str> = classes.iter().map(|k| k.name()).collect();
        return Err(loaded.error(
            "cluster.cxl.memory_node_gb",
            format!(
                "the {} GPUs under a CXL switch keep {:.1} GB of {} there, but its memory nodes hold {:.1} GB; add memory nodes or capacity",
                gpus,
                per_gpu * gpus / 1e9,
                names.join(", "),
                capacity / 1e9
            ),
        ));
    }
    Ok(classes)
}

/// The quantization keys against `training.precision`, as Megatron-Core and Transformer
/// Engine accept them: an FP8 recipe only with FP8 (`mxfp8` is both the precision and the
/// recipe; NVFP4 is Megatron's `--fp4-recipe`, which cannot be combined with `--fp8-format`),
/// no FP8 attention under NVFP4 (`NVFP4BlockScaling.fp8_dpa = False`), and FP8 parameters
/// only where fleetsim models them (FP8).
fn check_quantization(t: &config::TrainingConfig) -> Result<(), (&'static str, String)> {
    let precision = t.precision.name();
    if let Some(recipe) = t.fp8_recipe {
        let r = recipe.name();
        match t.precision {
            Precision::Fp8 => {}
            Precision::Mxfp8 if recipe == Fp8Recipe::Mxfp8 => {}
            Precision::Mxfp8 => {
                return Err((
                    "training.fp8_recipe",
                    format!(
                        "`{r}` contradicts training.precision = \"mxfp8\", which is MXFP8 block scaling; leave fp8_recipe out or set \"mxfp8\""
                    ),
                ));
            }
            Precision::Nvfp4 => {
                return Err((
                    "training.fp8_recipe",
                    format!(
                        "`{r}` is an FP8 recipe, but training.precision = \"nvfp4\" is NVFP4 block scaling (Megatron-Core: --fp4-format and --fp8-format cannot be used together); leave fp8_recipe out"
                    ),
                ));
            }
            _ => {
                return Err((
                    "training.fp8_recipe",
                    format!(
                        "`{r}` applies to FP8 training only, but training.precision = \"{precision}\"; set precision = \"fp8\" (recipes: delayed, current or tensorwise, blockwise, mxfp8) or \"mxfp8\", or leave fp8_recipe out"
                    ),
                ));
            }
        }
    }
    if t.fp8_attention && t.precision == Precision::Nvfp4 {
        return Err((
            "training.fp8_attention",
            "Transformer Engine's NVFP4 recipe does not quantize attention (NVFP4BlockScaling.fp8_dpa = False); leave it out".into(),
        ));
    }
    if t.fp8_param_gather && matches!(t.precision, Precision::Mxfp8 | Precision::Nvfp4) {
        return Err((
            "training.fp8_param_gather",
            format!(
                "FP8 weights gathered in FP8 are modelled with precision = \"fp8\" only, not \"{precision}\" (under mxfp8 and nvfp4 fleetsim keeps BF16 weights with cached quantized copies)"
            ),
        ));
    }
    Ok(())
}

/// `training.recompute_modules` under selective recompute: no module twice, and each one a
/// module the model has, as Megatron-Core's `TransformerConfig.__post_init__` checks them
/// (`mla_up_proj` only with multi-latent attention; `moe_act` and `layernorm` not under FP8
/// delayed scaling), plus what Megatron-Core accepts but leaves without effect (`layernorm`
/// where Transformer Engine fuses both norms into the next linear, `mlp` without dense layers,
/// the MoE modules on a dense model).
fn check_recompute_modules(
    modules: &[RecomputeModule],
    model: Option<&ModelSpec>,
    t: &config::TrainingConfig,
) -> Result<(), String> {
    let valid = RecomputeModule::names();
    for (i, m) in modules.iter().enumerate() {
        if modules[..i].contains(m) {
            return Err(format!(
                "`{}` is listed twice; give each module once, from: {valid}",
                m.name()
            ));
        }
    }
    if let Some(model) = model {
        let applies = |m: RecomputeModule| -> Result<(), &'static str> {
            let moe = model.moe.as_ref();
            let has_dense = (0..model.layers).any(|l| !model.is_moe_layer(l));
            match m {
                RecomputeModule::CoreAttn => Ok(()),
                RecomputeModule::MlaUpProj if model.mla.is_none() => {
                    Err("needs multi-latent attention ([model.mla])")
                }
                RecomputeModule::MoeAct | RecomputeModule::Moe if moe.is_none() => {
                    Err("needs a mixture-of-experts model ([model.moe])")
                }
                RecomputeModule::SharedExperts if moe.is_none_or(|m| m.shared_experts == 0) => Err(
                    "needs a mixture-of-experts model with shared experts (model.moe.shared_experts > 0)",
                ),
                RecomputeModule::Mlp if !has_dense => Err(
                    "needs dense MLP layers; every layer of this model is a MoE layer (use moe, moe_act or shared_experts)",
                ),
                RecomputeModule::Layernorm if model.mla.is_none() && moe.is_none() => Err(
                    "has nothing to recompute here: without MLA or MoE, Transformer Engine fuses both norms into the QKV and fc1 linears (Megatron-Core's layer spec makes them IdentityOp)",
                ),
                _ => Ok(()),
            }
        };
        for &m in modules {
            if let Err(why) = applies(m) {
                let fits: Vec<&str> = RecomputeModule::ALL
                    .into_iter()
                    .filter(|&m| applies(m).is_ok())
                    .map(RecomputeModule::name)
                    .collect();
                return Err(format!(
                    "`{}` {why}; valid for this model: {}",
                    m.name(),
                    fits.join(", ")
                ));
            }
        }
    }
    if t.precision == Precision::Fp8
        && t.fp8_recipe() == config::Fp8Recipe::Delayed
        && let Some(m) = modules
            .iter()
            .find(|m| matches!(m, RecomputeModule::MoeAct | RecomputeModule::Layernorm))
    {
        return Err(format!(
            "`{}` cannot be recomputed under FP8 delayed scaling (Megatron-Core: \"Delayed scaling does not support moe_act and layernorm recompute for fp8\"); set training.fp8_recipe = \"current\" or drop it",
            m.name()
        ));
    }
    Ok(())
}

fn memory_inputs(cfg: &config::ExperimentConfig, micro_batches: u64) -> MemoryInputs {
    MemoryInputs {
        precision: cfg.training.precision,
        zero: cfg.parallel.zero,
        recompute: cfg.training.recompute,
        recompute_modules: cfg.training.recomputed_modules(),
        sequence_parallel: cfg.parallel.sequence_parallel,
        flash_attention: cfg.training.flash_attention,
        micro_batch: u64::from(cfg.parallel.micro_batch),
        micro_batches,
        fp8_recipe: cfg.training.fp8_recipe(),
        fp8_param_gather: cfg.training.fp8_param_gather,
        grad_reduce_in_bf16: cfg.training.grad_reduce_in_bf16,
    }
}

/// Micro-batches of every data-parallel replica: `parallel.replica_micro_batches` when given
/// (its samples must add up to the global batch), else global_batch / (micro_batch × DP) each.
fn replica_micro_batches(
    loaded: &LoadedConfig,
    dp: u32,
    micro_batch: u64,
    global_batch: u64,
) -> Result<Vec<u64>, ConfigError> {
    let key = "parallel.replica_micro_batches";
    let Some(list) = &loaded.config.parallel.replica_micro_batches else {
        return Ok(vec![
            global_batch / (micro_batch * u64::from(dp));
            dp as usize
        ]);
    };
    if list.len() != dp as usize {
        return Err(loaded.error(
            key,
            format!(
                "lists {} replicas but DP = {dp}; give one count per data-parallel replica",
                list.len()
            ),
        ));
    }
    if list.contains(&0) {
        return Err(loaded.error(key, "every replica needs at least one micro-batch"));
    }
    let samples: u64 = list.iter().map(|&m| u64::from(m) * micro_batch).sum();
    if samples != global_batch {
        return Err(loaded.error(
            key,
            format!(
                "runs {samples} samples (sum x micro_batch {micro_batch}) but parallel.global_batch = {global_batch}; they must match"
            ),
        ));
    }
    Ok(list.iter().map(|&m| u64::from(m)).collect())
}

/// `parallel.etp`, checked as Megatron-Core's MoE parallel folding needs it: EP × ETP experts'
/// shards are drawn from the attention's TP × CP × DP ranks of a pipeline stage
/// (`initialize_model_parallel`: "decoder world_size is not divisible by
/// expert_tensor_model_pipeline_parallel size"), ETP splits each expert's FFN, and with EP and
/// TP the tokens must be sequence-split (`TransformerConfig.__post_init__`: "When using expert
/// parallelism and tensor parallelism, sequence parallelism must be used").
fn expert_tensor_parallel(
    loaded: &LoadedConfig,
    dp: u32,
    model: Option<&ModelSpec>,
) -> Result<u32, ConfigError> {
    let p = &loaded.config.parallel;
    let err = |msg: String| loaded.error("parallel.etp", msg);
    let etp = match p.etp {
        None => p.tp,
        Some(0) => return Err(err("must be greater than 0".into())),
        Some(etp) => etp,
    };
    let moe = model.and_then(|m| m.moe);
    if p.etp.is_some() && model.is_some() && moe.is_none() {
        return Err(err(format!(
            "etp = {etp} needs a mixture-of-experts model (model.experts); a dense model's MLP is split by parallel.tp"
        )));
    }
    let attention = u64::from(p.tp) * u64::from(p.cp) * u64::from(dp);
    let experts = u64::from(p.ep) * u64::from(etp);
    if attention % experts != 0 {
        let key = if p.etp.is_some() {
            "parallel.etp"
        } else {
            "parallel.ep"
        };
        return Err(loaded.error(
            key,
            format!(
                "EP {} x expert TP {etp} = {experts} must divide TP {} x CP {} x DP {dp} = {attention} (Megatron-Core's MoE parallel folding draws the experts' GPUs from the attention's TP x CP x DP GPUs of a pipeline stage){}",
                p.ep,
                p.tp,
                p.cp,
                if p.etp.is_none() {
                    "; expert TP defaults to TP: lower EP or set parallel.etp"
                } else {
                    "; lower EP or parallel.etp"
                }
            ),
        ));
    }
    if let Some(moe) = moe
        && moe.ffn_hidden % u64::from(etp) != 0
    {
        return Err(err(format!(
            "expert TP {etp} must divide the experts' FFN width model.moe_ffn_hidden = {}",
            moe.ffn_hidden
        )));
    }
    if moe.is_some() && p.tp > 1 && (p.ep > 1 || etp != p.tp) && !p.sequence_parallel {
        let key = if p.ep > 1 {
            "parallel.ep"
        } else {
            "parallel.etp"
        };
        return Err(loaded.error(
            key,
            format!(
                "experts split over EP {} x expert TP {etp} with TP {} need parallel.sequence_parallel = true (Megatron-Core: \"When using expert parallelism and tensor parallelism, sequence parallelism must be used\")",
                p.ep, p.tp
            ),
        ));
    }
    Ok(etp)
}

/// Megatron-Core's checks of the two rank generators: the attention's and the experts' layouts
/// must form the same pipeline groups, and without `pp` last in the order the two
/// data-parallel sizes must agree (`initialize_model_parallel`).
fn check_expert_layout(loaded: &LoadedConfig, layout: &ParallelLayout) -> Result<(), ConfigError> {
    let (dense, expert) = layout.pipeline_strides();
    if layout.pp > 1 && dense != expert {
        return Err(loaded.error(
            "parallel.order",
            format!(
                "with EP {} x expert TP {} the experts' ranks form other pipeline groups than the attention's (Megatron-Core: \"Pipeline parallel groups are expected to be the same for Non-Expert and Expert part\"); put pp last in the order",
                layout.ep, layout.etp
            ),
        ));
    }
    Ok(())
}

fn positive(loaded: &LoadedConfig, key: &str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        Err(loaded.error(key, "must be greater than 0"))
    } else {
        Ok(())
    }
}

/// The hosts a `[[cluster.gpu_mix]]` entry places (its `hosts`, or `racks` whole racks);
/// `None` unless it gives exactly one of them.
pub(crate) fn gpu_mix_entry_hosts(
    c: &crate::config::ClusterConfig,
    entry: &crate::config::GpuMixEntry,
) -> Option<u64> {
    let hosts_per_rack = c.hosts_per_rack.unwrap_or(c.hosts_per_segment);
    match (entry.hosts, entry.racks) {
        (Some(h), None) => Some(u64::from(h)),
        (None, Some(r)) => Some(u64::from(r) * u64::from(hosts_per_rack)),
        _ => None,
    }
}

/// Resolves `cluster.gpu` or `[[cluster.gpu_mix]]` into GPU types per host.
fn resolve_gpus(
    loaded: &LoadedConfig,
    db: &GpuDatabase,
    hosts: u32,
) -> Result<(Vec<GpuSpec>, Vec<u16>), ConfigError> {
    let c = &loaded.config.cluster;
    let lookup = |key: &str, name: &str| -> Result<GpuSpec, ConfigError> {
        if name.ends_with(".toml") {
            return GpuDatabase::load_file(&loaded.resolve_path(key, name));
        }
        db.get(name).cloned().ok_or_else(|| {
            loaded.error(
                key,
                format!(
                    "unknown GPU `{name}`; known: {} (or a path to a GPU file ending in .toml)",
                    db.names().join(", ")
                ),
            )
        })
    };
    match (&c.gpu, c.gpu_mix.is_empty()) {
        (Some(name), true) => Ok((vec![lookup("cluster.gpu", name)?], vec![0; hosts as usize])),
        (None, true) => Err(loaded.error(
            "cluster.gpu",
            "missing; name a GPU (e.g. gpu = \"H100-SXM\") or list [[cluster.gpu_mix]] entries",
        )),
        (Some(_), false) => Err(loaded.error(
            "cluster.gpu_mix",
            "give either cluster.gpu or [[cluster.gpu_mix]], not both",
        )),
        (None, false) => {
            let mut types: Vec<GpuSpec> = Vec::new();
            let mut per_host = Vec::with_capacity(hosts as usize);
            for (i, entry) in c.gpu_mix.iter().enumerate() {
                let key = format!("cluster.gpu_mix[{i}]");
                let spec = lookup(&format!("{key}.gpu"), &entry.gpu)?;
                let Some(count) = gpu_mix_entry_hosts(c, entry) else {
                    return Err(loaded.error(&key, "give exactly one of hosts = N or racks = N"));
                };
                if count == 0 {
                    return Err(loaded.error(&key, "places no host; hosts or racks must be > 0"));
                }
                let idx = match types.iter().position(|t| t.name == spec.name) {
                    Some(i) => i,
                    None => {
                        types.push(spec);
                        types.len() - 1
                    }
                };
                let idx =
                    u16::try_from(idx).map_err(|_| loaded.error(&key, "too many GPU types"))?;
                if per_host.len() as u64 + count > u64::from(hosts) {
                    return Err(loaded.error(
                        &key,
                        format!("gpu_mix places more hosts than the cluster has ({hosts} = cluster.gpus / gpus_per_host)"),
                    ));
                }
                per_host.extend(std::iter::repeat_n(idx, count as usize));
            }
            if per_host.len() as u64 != u64::from(hosts) {
                return Err(loaded.error(
                    "cluster.gpu_mix",
                    format!("places {} hosts but the cluster has {hosts} (cluster.gpus / gpus_per_host)", per_host.len()),
                ));
            }
            Ok((types, per_host))
        }
    }
}

/// What Megatron-Core requires of `--overlap-moe-expert-parallel-comm`
/// (`transformer_config.py`, `__post_init__`): expert parallelism, a virtual pipeline size
/// when pipelining (its interleaved schedule runs the combined steps; fleetsim's interleaved
/// schedule needs two or more virtual stages), the alltoall or flex dispatcher (every
/// fleetsim dispatcher is one), no full recompute and no `moe` recompute module, no
/// shared-expert overlap. fleetsim also refuses ZeRO-3, whose per-layer gathers it does not
/// place in the combined step.
fn check_ep_overlap(
    t: &crate::config::TrainingConfig,
    layout: &ParallelLayout,
    zero: u32,
) -> Result<(), String> {
    if layout.ep < 2 {
        return Err("overlaps the expert-parallel all-to-alls, but parallel.ep is 1; set parallel.ep above 1 (with model.experts) or leave it out".into());
    }
    if layout.pp > 1 && layout.vp < 2 {
        return Err(format!(
            "runs through Megatron-Core's interleaved schedule, which fleetsim models with virtual stages only (parallel.pp = {}, parallel.vp = 1); set parallel.vp to 2 or more",
            layout.pp
        ));
    }
    if t.recompute == Recompute::Full {
        return Err("cannot run with full recomputation (Megatron-Core asserts it); set training.recompute = \"selective\" or \"none\"".into());
    }
    if t.recomputed_modules()
        .has(crate::config::RecomputeModule::Moe)
    {
        return Err("cannot run with the moe recompute module (Megatron-Core asserts it); remove \"moe\" from training.recompute_modules".into());
    }
    if t.moe_shared_expert_overlap {
        return Err("cannot run beside training.moe_shared_expert_overlap (Megatron-Core asserts one or the other); set training.moe_shared_expert_overlap = false".into());
    }
    if zero >= 3 {
        return Err("cannot run with parallel.zero = 3 here: fleetsim does not place ZeRO-3's per-layer parameter gathers in the combined step; use parallel.zero = 1 or 2".into());
    }
    Ok(())
}
