//! Transformer model shapes: the checked model ([`ModelSpec`]) and its parameter counts. The
//! `[model]` table as written, presets and Hugging Face files are [`crate::config::model`]'s.

use crate::config::ConfigError;
pub use crate::config::model::{
    Activation, Mla, ModelConfig, Norm, Position, expand_model_sources, preset, preset_names,
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
    /// Token drop; `None` is dropless.
    pub capacity: Option<ExpertCapacity>,
    /// Group-limited routing (one group of every expert when not limited).
    pub router_groups: RouterGroups,
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
    pub moe: Option<Moe>,
    pub mla: Option<Mla>,
    /// Multi-token prediction modules after the last layer (DeepSeek-V3 §2.2, depth D). Module
    /// `k` is built as layer `layers + k`: a transformer layer of the model's kind behind its
    /// own projection, sharing the embedding and output head ([`ModelSpec::is_mtp_layer`]).
    pub mtp_layers: u64,
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
                Some(Moe {
                    experts,
                    top_k,
                    ffn_hidden: cfg.moe_ffn_hidden.unwrap_or(ffn_hidden),
                    shared_experts: cfg.shared_experts.unwrap_or(0),
                    dense_layers,
                    capacity: expert_capacity(cfg, error)?,
                    router_groups: router_groups(cfg, experts, top_k, error)?,
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
        ];
        if let (None, Some((key, _))) = (moe, moe_only.iter().find(|(_, set)| *set)) {
            return Err(error(
                key,
                "applies to mixture-of-experts layers; set model.experts and model.top_k, or remove it".to_string(),
            ));
        }
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
            moe,
            mla: cfg.mla,
            mtp_layers,
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

    pub fn is_moe_layer(&self, layer: u64) -> bool {
        self.moe.is_some_and(|m| layer >= m.dense_layers)
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
        ] {
            let got = spec(name).total_params() as f64 / 1e9;
            assert!(
                (got - billions).abs() / billions < tol,
                "{name}: {got} B vs {billions} B"
            );
        }
        let active = spec("mixtral-8x7b").active_params() as f64 / 1e9;
        assert!(
            (active - 12.9).abs() / 12.9 < 0.01,
            "mixtral active {active}"
        );
    }
}
