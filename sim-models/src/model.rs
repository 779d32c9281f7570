//! Transformer model shapes: the checked model ([`ModelSpec`]) and its parameter counts. The
//! `[model]` table as written, presets and Hugging Face files are [`crate::config::model`]'s.

use crate::config::ConfigError;
pub use crate::config::model::{
    Activation, Mla, ModelConfig, MoeLayerFreq, Norm, Position, Routing, expand_model_sources,
    preset, preset_names,
};

/// The most transformer layers a model may have: tables per layer are sized from it.
pub const MAX_LAYERS: u64 = 1 << 14;
/// The most experts per MoE layer.
pub const MAX_EXPERTS: u64 = 1 << 16;

/// Mixture-of-experts layers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moe {
    pub experts: u64,
    pub top_k: u64,
    pub ffn_hidden: u64,
    pub shared_experts: u64,
    /// The first `dense_layers` layers have a dense MLP instead.
    pub dense_layers: u64,
    /// Of the others, layers 0, N, 2N, ... with N = `every` are MoE layers (Megatron-Core's
    /// integer `--moe-layer-freq`); 1 makes them all MoE layers.
    pub every: u64,
    /// Token drop; `None` is dropless.
    pub capacity: Option<ExpertCapacity>,
    /// Group-limited routing (one group of every expert when not limited).
    pub router_groups: RouterGroups,
    pub routing: Routing,
    /// Balanced by a per-expert bias (auxiliary-loss-free) rather than an auxiliary loss.
    pub expert_bias: bool,
}

/// The spread of a trained router's expert loads: MaxVio_global (the most loaded expert's
/// excess over the mean, over 71 M validation tokens, averaged over layers) of the 3B
/// DeepSeekMoE model with an auxiliary loss (Wang et al., "Auxiliary-Loss-Free Load Balancing
/// Strategy for Mixture-of-Experts", arXiv 2408.15664, Table 2: 0.52; 0.72 at 1B).
pub const AUX_LOSS_MAX_VIOLATION: f64 = 0.52;
/// The same with their per-expert bias instead (Table 2: 0.04 at 1B and 3B).
pub const EXPERT_BIAS_MAX_VIOLATION: f64 = 0.04;
/// The routed experts of the models those figures were measured on (Table 5: 64, top 6).
pub const MAX_VIOLATION_EXPERTS: u64 = 64;

impl Moe {
    /// The coefficient of variation of a trained router's expert loads under skewed routing:
    /// the measured excess of the most loaded of [`MAX_VIOLATION_EXPERTS`] experts over the
    /// mean, in deviations of normally spread loads (0 when balanced).
    pub fn learned_load_spread(&self) -> f64 {
        if self.routing == Routing::Balanced {
            return 0.0;
        }
        let violation = if self.expert_bias {
            EXPERT_BIAS_MAX_VIOLATION
        } else {
            AUX_LOSS_MAX_VIOLATION
        };
        violation / expected_max_of_normals(MAX_VIOLATION_EXPERTS)
    }

    /// The load of the most loaded of `ep` expert-parallel ranks over the mean, when each of
    /// them routes `tokens` tokens per micro-batch (all of which reach the experts). The
    /// all-to-all that returns the experts' outputs waits for every rank of the group, so that
    /// rank sets the layer's pace.
    ///
    /// Every token's `top_k` experts are a draw: balanced routing is Megatron-Core's forced
    /// balance, which routes on random logits (`moe_router_force_load_balancing`,
    /// `moe_utils.apply_random_logits`, Megatron-Core 0.13), so every expert is equally
    /// likely but a micro-batch's counts still vary. A rank holding `experts / ep` experts
    /// receives a sum over the group's `ep × tokens` tokens of hypergeometric counts, mean
    /// `tokens × top_k`, variance `tokens × top_k × (1 − 1/ep) × (experts − top_k) /
    /// (experts − 1)`. Skewed routing adds the trained router's unequal expert popularity,
    /// [`Moe::learned_load_spread`]` / sqrt(experts / ep)` per rank for independently popular
    /// experts. The largest of `ep` ranks lies [`expected_max_of_normals`]`(ep)` standard
    /// deviations above the mean (normal approximation). Token drop caps a rank at `factor` × its share (each sender
    /// keeps at most its capacity per expert); padded to capacity every rank receives
    /// exactly its share.
    pub fn hottest_rank_share(&self, ep: u64, tokens: u64) -> f64 {
        if ep <= 1 || tokens == 0 || self.top_k == 0 {
            return 1.0;
        }
        let (e, k) = (self.experts as f64, self.top_k as f64);
        let copies = tokens as f64 * k;
        let variance = copies * (1.0 - 1.0 / ep as f64) * (e - k) / (e - 1.0).max(1.0);
        let sampled = variance.max(0.0).sqrt() / copies;
        let local_experts = (self.experts / ep).max(1) as f64;
        let learned = self.learned_load_spread() / local_experts.sqrt();
        let share = 1.0 + expected_max_of_normals(ep) * sampled.hypot(learned);
        match self.capacity {
            None => share,
            Some(c) if c.pad => 1.0,
            Some(c) => share.min(c.factor.max(1.0)),
        }
    }
}

/// The expected largest of `n` independent standard normal draws:
/// `∫ x n φ(x) Φ(x)^(n−1) dx`, by Simpson's rule over [−8, 9] (0 for `n` ≤ 1). Each `n`'s
/// value is computed once per thread: the memory estimate asks per layer.
pub fn expected_max_of_normals(n: u64) -> f64 {
    thread_local! {
        static KNOWN: std::cell::RefCell<std::collections::BTreeMap<u64, f64>> =
            const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
    }
    if let Some(v) = KNOWN.with(|k| k.borrow().get(&n).copied()) {
        return v;
    }
    let v = integrate_expected_max_of_normals(n);
    KNOWN.with(|k| k.borrow_mut().insert(n, v));
    v
}

fn integrate_expected_max_of_normals(n: u64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    const STEPS: usize = 3400;
    let (lo, hi) = (-8.0f64, 9.0f64);
    let h = (hi - lo) / STEPS as f64;
    let n_f = n as f64;
    let integrand = |x: f64| {
        let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let below = 0.5 * erfc(-x / std::f64::consts::SQRT_2);
        x * n_f * density * below.powf(n_f - 1.0)
    };
    let inner: f64 = (1..STEPS)
        .map(|i| {
            let weight = if i % 2 == 1 { 4.0 } else { 2.0 };
            weight * integrand(lo + i as f64 * h)
        })
        .sum();
    (integrand(lo) + inner + integrand(hi)) * h / 3.0
}

/// The complementary error function, to a relative error below 1.2e-7 (Chebyshev fit,
/// Press et al., Numerical Recipes, 2nd ed., §6.2 `erfcc`).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// Group-limited routing (DeepSeek-V3, arXiv 2412.19437 §2.1.2, "node-limited routing";
/// Megatron-Core `moe_utils.group_limited_topk`): the experts are split into `groups` equal
/// groups of consecutive experts, a token picks `group_topk` of them and its `top_k`
/// experts among theirs. Laid over expert parallelism, a group is a node's experts, which
/// bounds the nodes a token travels to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterGroups {
    pub groups: u64,
    pub group_topk: u64,
}

impl RouterGroups {
    pub const UNLIMITED: RouterGroups = RouterGroups {
        groups: 1,
        group_topk: 1,
    };
}

/// Megatron-Core's token drop (`token_dispatcher.py`, `MoEAlltoAllTokenDispatcher.preprocess`):
/// an expert takes at most `capacity = ceil(tokens × top_k / experts × factor)` of a rank's
/// routed tokens (`moe_utils.get_capacity`). Padded (`pad`), every expert takes exactly that
/// many, so the dispatcher knows every size without asking the GPU (`cuda_sync_point =
/// "no_sync"`); unpadded, the host reads the kept count before the first permutation
/// (`"before_permutation_1"`). NeMo's `MegatronTokenDropCallback` sets a factor of 1.0, padded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertCapacity {
    pub factor: f64,
    pub pad: bool,
}

/// A validated model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub name: String,
    pub layers: u64,
    pub hidden: u64,
    pub ffn_hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub seq_len: u64,
    pub vocab: u64,
    pub activation: Activation,
    pub norm: Norm,
    pub position: Position,
    pub bias: bool,
    pub tied_embeddings: bool,
    /// Dropout probability on the attention scores, in `[0, 1)`. 0 unless set: Megatron-LM's
    /// `pretrain_gpt.py` defaults to 0.1 (`--attention-dropout`, `arguments.py`), while
    /// NeMo's and Megatron-Bridge's Llama and GPT-3 175B recipes set 0.
    pub attention_dropout: f64,
    /// Each head's query and key normalised before attention (Megatron-Core `qk_layernorm`:
    /// `SelfAttention` applies `q_layernorm` and `k_layernorm`, two norm modules of the
    /// model's kind over `head_dim`).
    pub qk_layernorm: bool,
    pub moe: Option<Moe>,
    pub mla: Option<Mla>,
    /// Multi-token prediction modules after the last layer (DeepSeek-V3 §2.2, depth D). Module
    /// `k` is built as layer `layers + k`: a transformer layer of the model's kind behind its
    /// own projection, sharing the embedding and output head ([`ModelSpec::is_mtp_layer`]).
    pub mtp_layers: u64,
    /// Which layers are MoE layers where `model.moe_layer_freq` lists them (one flag per
    /// layer); `None` follows [`Moe::dense_layers`] and [`Moe::every`].
    pub moe_pattern: Option<Vec<bool>>,
    /// Sliding-window attention (`model.window_size`), `None` where every layer attends over
    /// the whole sequence.
    pub window: Option<AttentionWindow>,
}

/// Sliding-window attention as Megatron-Core configures it (`window_size = (left, 0)`,
/// `window_attn_skip_freq`; `megatron/core/transformer/utils.py` `is_layer_window_attention`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionWindow {
    /// Tokens before a query it may attend to (the query attends to itself too).
    pub left: u64,
    /// Every this-many-th layer, counting from 1, attends over the whole sequence.
    pub full_every: Option<u64>,
}

/// The most multi-token prediction modules fleetsim builds (DeepSeek-V3 trains with 1).
pub const MAX_MTP_LAYERS: u64 = 16;

/// `model.moe_capacity_factor` and `model.moe_pad_to_capacity`, checked as Megatron-Core
/// checks them (`TransformerConfig.__post_init__`: padding needs a capacity factor).
fn expert_capacity(
    cfg: &ModelConfig,
    error: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Option<ExpertCapacity>, ConfigError> {
    let pad = cfg.moe_pad_to_capacity.unwrap_or(false);
    let Some(factor) = cfg.moe_capacity_factor else {
        if pad {
            return Err(error(
                "model.moe_pad_to_capacity",
                "pads each expert's input to its capacity, so it needs model.moe_capacity_factor (NeMo's token drop uses 1.0)".into(),
            ));
        }
        return Ok(None);
    };
    if !(factor.is_finite() && factor > 0.0 && factor <= MAX_CAPACITY_FACTOR) {
        return Err(error(
            "model.moe_capacity_factor",
            format!(
                "must be a factor in (0, {MAX_CAPACITY_FACTOR}] of an expert's balanced share (NeMo's token drop uses 1.0), got {factor}; remove it for dropless MoE"
            ),
        ));
    }
    Ok(Some(ExpertCapacity { factor, pad }))
}

/// `model.moe_router_num_groups` and `model.moe_router_group_topk`, checked as Megatron-Core
/// checks them (`moe_utils.group_limited_topk` reshapes the scores into equal groups and
/// takes `top_k` experts among `group_topk` groups' experts).
fn router_groups(
    cfg: &ModelConfig,
    experts: u64,
    top_k: u64,
    error: &dyn Fn(&str, String) -> ConfigError,
) -> Result<RouterGroups, ConfigError> {
    let (groups, group_topk) = match (cfg.moe_router_num_groups, cfg.moe_router_group_topk) {
        (None, None) => return Ok(RouterGroups::UNLIMITED),
        (Some(g), Some(t)) => (g, t),
        (Some(_), None) => {
            return Err(error(
                "model.moe_router_group_topk",
                "missing: group-limited routing needs both model.moe_router_num_groups and model.moe_router_group_topk (DeepSeek-V3: 8 and 4)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(error(
                "model.moe_router_num_groups",
                "missing: group-limited routing needs both model.moe_router_num_groups and model.moe_router_group_topk (DeepSeek-V3: 8 and 4)".into(),
            ));
        }
    };
    if groups == 0 || !experts.is_multiple_of(groups) {
        return Err(error(
            "model.moe_router_num_groups",
            format!("must divide model.experts ({experts}) into equal groups, got {groups}"),
        ));
    }
    if group_topk == 0 || group_topk > groups {
        return Err(error(
            "model.moe_router_group_topk",
            format!(
                "must be between 1 and model.moe_router_num_groups ({groups}), got {group_topk}"
            ),
        ));
    }
    let pool = group_topk * (experts / groups);
    if top_k > pool {
        return Err(error(
            "model.moe_router_group_topk",
            format!(
                "{group_topk} groups of {} experts hold {pool} experts, fewer than model.top_k ({top_k}); choose more groups per token",
                experts / groups
            ),
        ));
    }
    Ok(RouterGroups { groups, group_topk })
}

/// `model.moe_layer_freq` given as a list: one 0 or 1 per layer, at least one MoE layer, and
/// no `model.dense_layers` beside it (the list names the dense layers itself).
fn moe_layer_pattern(
    cfg: &ModelConfig,
    layers: u64,
    error: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Option<Vec<bool>>, ConfigError> {
    let Some(MoeLayerFreq::Pattern(flags)) = &cfg.moe_layer_freq else {
        return Ok(None);
    };
    let key = "model.moe_layer_freq";
    if flags.len() as u64 != layers {
        return Err(error(
            key,
            format!(
                "lists {} layers, but model.layers is {layers}; give one 0 (dense) or 1 (MoE) per layer",
                flags.len()
            ),
        ));
    }
    if let Some(i) = flags.iter().position(|&f| f > 1) {
        return Err(error(
            key,
            format!(
                "entry {i} is {}; each entry is 0 (a dense layer) or 1 (a MoE layer)",
                flags[i]
            ),
        ));
    }
    if !flags.contains(&1) {
        return Err(error(
            key,
            "names no MoE layer; mark at least one layer 1, or remove model.experts for a dense model".into(),
        ));
    }
    if cfg.dense_layers.is_some_and(|d| d > 0) {
        return Err(error(
            "model.dense_layers",
            "cannot be combined with a model.moe_layer_freq list, which names the dense layers itself; mark them 0 in the list".into(),
        ));
    }
    Ok(Some(flags.iter().map(|&f| f == 1).collect()))
}

/// `model.window_size` and `model.window_attn_skip_freq`, checked.
fn attention_window(
    cfg: &ModelConfig,
    seq_len: u64,
    error: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Option<AttentionWindow>, ConfigError> {
    let full_every = match cfg.window_attn_skip_freq {
        Some(0) => {
            return Err(error(
                "model.window_attn_skip_freq",
                "must be at least 1 (every N-th layer attends over the whole sequence)".into(),
            ));
        }
        f => f,
    };
    let Some(left) = cfg.window_size else {
        if full_every.is_some() {
            return Err(error(
                "model.window_attn_skip_freq",
                "applies to sliding-window attention; set model.window_size (GPT-OSS: 128), or remove it".into(),
            ));
        }
        return Ok(None);
    };
    if left == 0 {
        return Err(error(
            "model.window_size",
            "must be at least 1 token before each query (GPT-OSS: 128); remove it for attention over the whole sequence".into(),
        ));
    }
    // A window as long as the sequence attends to every earlier token: plain causal attention.
    if left + 1 >= seq_len {
        return Ok(None);
    }
    Ok(Some(AttentionWindow { left, full_every }))
}

/// A capacity factor above this keeps every token an expert could get from a rank; fleetsim
/// refuses more, which only pads.
const MAX_CAPACITY_FACTOR: f64 = 64.0;

impl ModelSpec {
    /// Checks the `[model]` table; `error` locates a key for messages.
    pub fn resolve(
        cfg: &ModelConfig,
        error: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<ModelSpec, ConfigError> {
        let need = |v: Option<u64>, key: &str| -> Result<u64, ConfigError> {
            match v {
                None => Err(error(
                    &format!("model.{key}"),
                    format!(
                        "missing; set model.{key}, or use model.preset (one of: {}) or model.hf_config",
                        preset_names().join(", ")
                    ),
                )),
                Some(0) => Err(error(
                    &format!("model.{key}"),
                    "must be greater than 0".into(),
                )),
                Some(x) => Ok(x),
            }
        };
        let layers = need(cfg.layers, "layers")?;
        if layers > MAX_LAYERS {
            return Err(error(
                "model.layers",
                format!(
                    "{layers} layers is more than fleetsim simulates; give at most {MAX_LAYERS} (the largest published models have about 200)"
                ),
            ));
        }
        let hidden = need(cfg.hidden, "hidden")?;
        let heads = need(cfg.heads, "heads")?;
        let kv_heads = cfg.kv_heads.unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(error(
                "model.kv_heads",
                format!("must divide model.heads ({heads}), got {kv_heads}"),
            ));
        }
        let head_dim = match cfg.head_dim {
            Some(0) => return Err(error("model.head_dim", "must be greater than 0".into())),
            Some(d) => d,
            None if hidden % heads == 0 => hidden / heads,
            None => {
                return Err(error(
                    "model.heads",
                    format!(
                        "model.hidden ({hidden}) is not divisible by heads ({heads}); set model.head_dim"
                    ),
                ));
            }
        };
        let ffn_hidden = need(cfg.ffn_hidden, "ffn_hidden")?;
        let seq_len = need(cfg.seq_len, "seq_len")?;
        let vocab = need(cfg.vocab, "vocab")?;
        let attention_dropout = cfg.attention_dropout.unwrap_or(0.0);
        if !(0.0..1.0).contains(&attention_dropout) {
            return Err(error(
                "model.attention_dropout",
                format!(
                    "must be a probability in [0, 1) (Megatron's default is 0.1), got {attention_dropout}"
                ),
            ));
        }
        let moe = match cfg.experts {
            None | Some(0) | Some(1) if cfg.top_k.is_none() => None,
            experts => {
                let experts = need(experts, "experts")?;
                if experts > MAX_EXPERTS {
                    return Err(error(
                        "model.experts",
                        format!(
                            "{experts} experts is more than fleetsim simulates; give at most {MAX_EXPERTS} (DeepSeek-V3 has 256)"
                        ),
                    ));
                }
                let top_k = need(cfg.top_k, "top_k")?;
                if top_k > experts {
                    return Err(error(
                        "model.top_k",
                        format!("must not exceed model.experts ({experts}), got {top_k}"),
                    ));
                }
                let dense_layers = cfg.dense_layers.unwrap_or(0);
                if dense_layers >= layers {
                    return Err(error(
                        "model.dense_layers",
                        format!("must be below model.layers ({layers}), got {dense_layers}"),
                    ));
                }
                let every = match cfg.moe_layer_freq {
                    Some(MoeLayerFreq::Every(0)) => {
                        return Err(error(
                            "model.moe_layer_freq",
                            "must be at least 1 (every layer a MoE layer), or a list of 0 and 1 per layer".into(),
                        ));
                    }
                    Some(MoeLayerFreq::Every(n)) => n,
                    _ => 1,
                };
                Some(Moe {
                    experts,
                    top_k,
                    ffn_hidden: cfg.moe_ffn_hidden.unwrap_or(ffn_hidden),
                    shared_experts: cfg.shared_experts.unwrap_or(0),
                    dense_layers,
                    every,
                    capacity: expert_capacity(cfg, error)?,
                    router_groups: router_groups(cfg, experts, top_k, error)?,
                    routing: cfg.routing.unwrap_or_default(),
                    expert_bias: cfg.moe_router_expert_bias.unwrap_or(false),
                })
            }
        };
        let moe_only = [
            (
                "model.moe_capacity_factor",
                cfg.moe_capacity_factor.is_some(),
            ),
            (
                "model.moe_pad_to_capacity",
                cfg.moe_pad_to_capacity.is_some(),
            ),
            (
                "model.moe_router_num_groups",
                cfg.moe_router_num_groups.is_some(),
            ),
            (
                "model.moe_router_group_topk",
                cfg.moe_router_group_topk.is_some(),
            ),
            ("model.routing", cfg.routing.is_some()),
            ("model.moe_layer_freq", cfg.moe_layer_freq.is_some()),
            (
                "model.moe_router_expert_bias",
                cfg.moe_router_expert_bias.is_some(),
            ),
        ];
        if let (None, Some((key, _))) = (moe, moe_only.iter().find(|(_, set)| *set)) {
            return Err(error(
                key,
                "applies to mixture-of-experts layers; set model.experts and model.top_k, or remove it".to_string(),
            ));
        }
        let moe_pattern = moe_layer_pattern(cfg, layers, error)?;
        let window = attention_window(cfg, seq_len, error)?;
        let mtp_layers = cfg.mtp_layers.unwrap_or(0);
        if mtp_layers > MAX_MTP_LAYERS {
            return Err(error(
                "model.mtp_layers",
                format!(
                    "{mtp_layers} multi-token prediction modules is more than fleetsim builds; give at most {MAX_MTP_LAYERS} (DeepSeek-V3 trains with 1)"
                ),
            ));
        }
        Ok(ModelSpec {
            name: cfg
                .name
                .clone()
                .or_else(|| cfg.preset.clone())
                .unwrap_or_else(|| "model".into()),
            layers,
            hidden,
            ffn_hidden,
            heads,
            kv_heads,
            head_dim,
            seq_len,
            vocab,
            activation: cfg.activation.unwrap_or(Activation::Swiglu),
            norm: cfg.norm.unwrap_or(Norm::Rmsnorm),
            position: cfg.position.unwrap_or(Position::Rope),
            bias: cfg.bias.unwrap_or(false),
            tied_embeddings: cfg.tied_embeddings.unwrap_or(false),
            attention_dropout,
            qk_layernorm: cfg.qk_layernorm.unwrap_or(false),
            moe,
            mla: cfg.mla,
            mtp_layers,
            moe_pattern,
            window,
        })
    }

    /// Parameters of one norm layer (LayerNorm has a bias, RMSNorm does not).
    pub fn norm_params(&self) -> u64 {
        match self.norm {
            Norm::Layernorm => 2 * self.hidden,
            Norm::Rmsnorm => self.hidden,
        }
    }

    /// Query width (heads × head dim) and key/value width (kv heads × head dim).
    pub fn qkv_widths(&self) -> (u64, u64) {
        (self.heads * self.head_dim, self.kv_heads * self.head_dim)
    }

    /// Width of one query/key head: under MLA its compressed part and its rotary part.
    pub fn qk_head_dim(&self) -> u64 {
        match &self.mla {
            Some(m) => m.qk_nope_head_dim + m.qk_rope_head_dim,
            None => self.head_dim,
        }
    }

    /// Width of one value head.
    pub fn v_head_dim(&self) -> u64 {
        self.mla.as_ref().map_or(self.head_dim, |m| m.v_head_dim)
    }

    /// Self-attention parameters of one layer: QKV and output projections (GQA-aware), or
    /// MLA's down- and up-projections with the decoupled RoPE key (arXiv 2412.19437 eq. 1-11).
    pub fn attention_params(&self) -> u64 {
        let h = self.hidden;
        if let Some(m) = &self.mla {
            let qk_head = self.qk_head_dim();
            let q = if m.q_lora_rank > 0 {
                h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * self.heads * qk_head
            } else {
                h * self.heads * qk_head
            };
            let kv = h * (m.kv_lora_rank + m.qk_rope_head_dim)
                + m.kv_lora_rank
                + m.kv_lora_rank * self.heads * (m.qk_nope_head_dim + m.v_head_dim);
            let o = self.heads * m.v_head_dim * h;
            return q + kv + o;
        }
        let (q, kv) = self.qkv_widths();
        let weights = h * (q + 2 * kv) + q * h;
        let biases = if self.bias { q + 2 * kv + h } else { 0 };
        weights + biases
    }

    /// Parameters of one MLP of intermediate size `ffn`.
    pub fn mlp_params(&self, ffn: u64) -> u64 {
        let h = self.hidden;
        match (self.activation, self.bias) {
            (Activation::Gelu | Activation::Relu2, false) => 2 * h * ffn,
            (Activation::Gelu | Activation::Relu2, true) => 2 * h * ffn + ffn + h,
            (Activation::Swiglu, false) => 3 * h * ffn,
            (Activation::Swiglu, true) => 3 * h * ffn + 2 * ffn + h,
        }
    }

    /// Whether layer `layer` (from 0; an MTP module's id is past the last layer and takes
    /// the routed experts, as DeepSeek-V3's does) has a MoE MLP.
    pub fn is_moe_layer(&self, layer: u64) -> bool {
        let Some(m) = self.moe else {
            return false;
        };
        if layer >= self.layers {
            return true;
        }
        match &self.moe_pattern {
            Some(pattern) => pattern[layer as usize],
            None => layer >= m.dense_layers && layer.is_multiple_of(m.every),
        }
    }

    /// The sliding window layer `layer` (from 0) attends over, `None` for the whole
    /// sequence: Megatron-Core's `is_layer_window_attention` with 1-based layer numbers.
    pub fn attention_window(&self, layer: u64) -> Option<u64> {
        let w = self.window?;
        match w.full_every {
            Some(n) if (layer + 1).is_multiple_of(n) => None,
            _ => Some(w.left),
        }
    }

    /// Whether layer id `layer` is a multi-token prediction module (ids `layers..layers + mtp`).
    pub fn is_mtp_layer(&self, layer: u64) -> bool {
        (self.layers..self.layers + self.mtp_layers).contains(&layer)
    }

    /// Parameters an MTP module adds to its transformer layer: the norms of the embedding and
    /// of the hidden state, the projection of their concatenation (2h → h) and its own final
    /// norm; the embedding and output head are the model's (Megatron-Core
    /// `MultiTokenPredictionLayer`: `enorm`, `hnorm`, `eh_proj`, `final_layernorm`).
    pub fn mtp_extra_params(&self) -> u64 {
        2 * self.hidden * self.hidden + 3 * self.norm_params()
    }

    /// Parameters of layer `layer` that are not expert weights (attention, norms, dense MLP or
    /// router and shared experts).
    pub fn layer_dense_params(&self, layer: u64) -> u64 {
        let mtp = if self.is_mtp_layer(layer) {
            self.mtp_extra_params()
        } else {
            0
        };
        let base = self.attention_params() + 2 * self.norm_params() + mtp;
        match self.moe {
            Some(m) if self.is_moe_layer(layer) => {
                base + self.hidden * m.experts + m.shared_experts * self.mlp_params(m.ffn_hidden)
            }
            _ => base + self.mlp_params(self.ffn_hidden),
        }
    }

    /// Routed-expert parameters of layer `layer` (all experts).
    pub fn layer_expert_params(&self, layer: u64) -> u64 {
        match self.moe {
            Some(m) if self.is_moe_layer(layer) => m.experts * self.mlp_params(m.ffn_hidden),
            _ => 0,
        }
    }

    /// Input embedding (with learned positions) parameters.
    pub fn embedding_params(&self) -> u64 {
        let pos = match self.position {
            Position::Learned => self.seq_len * self.hidden,
            Position::Rope => 0,
        };
        self.vocab * self.hidden + pos
    }

    /// Output layer parameters (zero when tied to the input embedding).
    pub fn output_params(&self) -> u64 {
        if self.tied_embeddings {
            0
        } else {
            self.vocab * self.hidden
        }
    }

    pub fn total_params(&self) -> u64 {
        (0..self.layers + self.mtp_layers)
            .map(|l| self.layer_dense_params(l) + self.layer_expert_params(l))
            .sum::<u64>()
            + self.embedding_params()
            + self.output_params()
            + self.norm_params()
    }

    /// Parameters a token passes through (MoE: top-k routed experts plus shared ones).
    pub fn active_params(&self) -> u64 {
        let routed_active: u64 = match self.moe {
            Some(m) => (0..self.layers + self.mtp_layers)
                .filter(|&l| self.is_moe_layer(l))
                .map(|_| m.top_k * self.mlp_params(m.ffn_hidden))
                .sum(),
            None => 0,
        };
        (0..self.layers + self.mtp_layers)
            .map(|l| self.layer_dense_params(l))
            .sum::<u64>()
            + routed_active
            + self.embedding_params()
            + self.output_params()
            + self.norm_params()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ModelSpec {
        let cfg = preset(name).unwrap();
        ModelSpec::resolve(&cfg, &|k, m| ConfigError::plain("test", k, m)).unwrap()
    }

    #[test]
    fn expected_maxima_of_normals_match_their_tables() {
        // E[max of 2] = 1/sqrt(pi); n = 10 and 100 from Harter's tables (Biometrika 48, 1961).
        for (n, exact) in [
            (1, 0.0),
            (2, 1.0 / std::f64::consts::PI.sqrt()),
            (10, 1.538_753),
            (100, 2.507_594),
        ] {
            let got = expected_max_of_normals(n);
            assert!((got - exact).abs() < 2e-5, "n = {n}: {got} against {exact}");
        }
    }

    fn moe(experts: u64, top_k: u64, capacity: Option<ExpertCapacity>, routing: Routing) -> Moe {
        Moe {
            experts,
            top_k,
            ffn_hidden: 1,
            shared_experts: 0,
            dense_layers: 0,
            every: 1,
            capacity,
            router_groups: RouterGroups::UNLIMITED,
            routing,
            expert_bias: false,
        }
    }

    /// Routes `tokens` tokens on each of `ep` ranks, each to `top_k` distinct experts drawn
    /// uniformly, and returns the mean over `trials` of the most loaded rank over the mean.
    fn sampled_hottest_share(experts: u64, top_k: u64, ep: u64, tokens: u64, trials: u64) -> f64 {
        let per_rank = experts / ep;
        let mut draw = 0u64;
        let mut total = 0.0;
        for _ in 0..trials {
            let mut load = vec![0u64; ep as usize];
            for _ in 0..ep * tokens {
                let mut chosen: Vec<u64> = Vec::with_capacity(top_k as usize);
                while (chosen.len() as u64) < top_k {
                    draw += 1;
                    let e = crate::hash::splitmix64(draw) % experts;
                    if !chosen.contains(&e) {
                        chosen.push(e);
                    }
                }
                for e in chosen {
                    load[(e / per_rank) as usize] += 1;
                }
            }
            let max = *load.iter().max().unwrap() as f64;
            total += max / (tokens * top_k) as f64;
        }
        total / trials as f64
    }

    #[test]
    fn forced_balance_matches_routing_sampled_token_by_token_on_random_logits() {
        for (experts, top_k, ep, tokens) in [(8, 2, 8, 256), (64, 6, 8, 128), (32, 4, 16, 64)] {
            let m = moe(experts, top_k, None, Routing::Balanced);
            assert_eq!(m.learned_load_spread(), 0.0);
            let predicted = m.hottest_rank_share(ep, tokens);
            let sampled = sampled_hottest_share(experts, top_k, ep, tokens, 400);
            assert!(
                (predicted - sampled).abs() < 0.01 * sampled,
                "{experts} experts, top-{top_k}, EP {ep}, {tokens} tokens: {predicted} against {sampled} sampled"
            );
            assert!(
                predicted > 1.02,
                "a micro-batch's counts vary at this size: {predicted}"
            );
        }
    }

    #[test]
    fn a_trained_routers_hottest_expert_carries_the_load_wang_et_al_measured() {
        // One expert per rank, so many tokens that sampling adds nothing: the most loaded of
        // 64 experts is 1 + MaxVio_global over the mean (arXiv 2408.15664 Table 2).
        for (expert_bias, measured) in [(false, 1.52), (true, 1.04)] {
            let m = Moe {
                expert_bias,
                ..moe(64, 6, None, Routing::Skewed)
            };
            let share = m.hottest_rank_share(64, 1 << 40);
            assert!(
                (share - measured).abs() < 1e-3,
                "expert bias {expert_bias}: {share}"
            );
        }
        // Four experts per rank average out: DeepSeek-V3's 256 experts over EP 64.
        let m = moe(256, 8, None, Routing::Skewed);
        let share = m.hottest_rank_share(64, 4096);
        assert!(share > 1.2 && share < 1.3, "{share}");
    }

    #[test]
    fn padded_capacity_leaves_every_rank_its_share() {
        let skewed = moe(8, 2, None, Routing::Skewed);
        assert!(skewed.hottest_rank_share(8, 256) > 1.3);
        let with_capacity = |factor: f64, pad: bool| {
            let capacity = Some(ExpertCapacity { factor, pad });
            moe(8, 2, capacity, Routing::Skewed).hottest_rank_share(8, 256)
        };
        assert_eq!(with_capacity(1.0, true), 1.0);
        // Unpadded token drop caps the hottest rank at its capacity.
        assert_eq!(with_capacity(1.01, false), 1.01);
        // Without expert parallelism one rank computes every token.
        assert_eq!(skewed.hottest_rank_share(1, 256), 1.0);
    }

    #[test]
    fn every_preset_resolves() {
        for name in preset_names() {
            spec(name);
        }
    }

    /// Megatron-LM's count for GPT models, 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h))
    /// (Narayanan et al., SC'21, §5.1), with tied embeddings.
    #[test]
    fn gpt3_175b_parameter_count_matches_megatron_formula() {
        let m = spec("gpt3-175b");
        let (l, h, v, s) = (96.0, 12288.0, 51200.0, 2048.0);
        let formula = 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (v + s) / (12.0 * l * h));
        let ours = m.total_params() as f64;
        assert!(
            (ours - formula).abs() / formula < 1e-3,
            "ours {ours} formula {formula}"
        );
    }

    #[test]
    fn published_sizes_are_reproduced() {
        // (preset, published total parameters in billions, tolerance)
        for (name, billions, tol) in [
            ("llama2-70b", 68.98, 0.01),
            ("llama3-8b", 8.03, 0.01),
            ("llama3.1-405b", 405.9, 0.01),
            ("mixtral-8x7b", 46.7, 0.01),
            ("deepseek-v3", 671.0, 0.02),
            // "340 billion parameters" (the model card of nvidia/Nemotron-4-340B-Base).
            ("nemotron4-340b", 340.0, 0.01),
            // Qwen3 technical report, Table 2 (30B and 235B total).
            ("qwen3-30b-a3b", 30.5, 0.01),
            ("qwen3-235b-a22b", 235.0, 0.01),
            // gpt-oss model card, Table 1: 116.83B total.
            ("gpt-oss-120b", 116.83, 0.01),
            // Llama 4 model card: 400B total.
            ("llama4-maverick", 400.0, 0.01),
        ] {
            let got = spec(name).total_params() as f64 / 1e9;
            assert!(
                (got - billions).abs() / billions < tol,
                "{name}: {got} B vs {billions} B"
            );
        }
        // (preset, published activated parameters in billions, tolerance)
        for (name, billions, tol) in [
            ("mixtral-8x7b", 12.9, 0.01),
            ("qwen3-30b-a3b", 3.3, 0.03),
            ("qwen3-235b-a22b", 22.0, 0.02),
            // gpt-oss model card, Table 1: 5.13B active per token, which counts the
            // unembedding but not the input embedding (201,088 x 2,880 = 0.579B) fleetsim adds.
            ("gpt-oss-120b", 5.13 + 0.579, 0.01),
            ("llama4-maverick", 17.0, 0.02),
        ] {
            let got = spec(name).active_params() as f64 / 1e9;
            assert!(
                (got - billions).abs() / billions < tol,
                "{name}: {got} B active vs {billions} B"
            );
        }
    }
}
