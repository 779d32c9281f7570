//! The `[model]` table as written, with what fills it in before it is checked: a preset of
//! `configs/models/` and a Hugging Face `config.json` ([`expand_model_sources`]).
//! `sim::model::ModelSpec::resolve` checks it.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::{ConfigError, Located, Origin, Value, parse_typed};
use crate::embedded;

/// Other names for presets (Llama 3 405B was released as Llama 3.1).
const PRESET_ALIASES: &[(&str, &str)] = &[("llama3-405b", "llama3.1-405b")];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    Gelu,
    Swiglu,
    /// Squared ReLU, `relu(x)^2` (Megatron-Core's `squared_relu`; Nemotron-4, arXiv
    /// 2402.16819 §2): a 2-matrix MLP like GELU's.
    Relu2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Norm {
    Layernorm,
    Rmsnorm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    /// Learned absolute position embeddings (GPT-2/3): `seq_len × hidden` parameters.
    Learned,
    /// Rotary embeddings: no parameters.
    Rope,
}

/// How a MoE layer's tokens fall on its experts (`model.routing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Routing {
    /// Megatron-Core's forced balance (`moe_router_force_load_balancing`, as NVIDIA's
    /// benchmark recipes run dropless MoE): routing on random logits, so every expert is
    /// equally likely and only a micro-batch's sampling spread is left.
    Balanced,
    /// As a trained router sends tokens: its experts unequally popular on top of the
    /// sampling spread (`sim::model::Moe::learned_load_spread`).
    #[default]
    Skewed,
}

/// Multi-head latent attention (DeepSeek-V2/V3, arXiv 2412.19437 §2.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mla {
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

/// The `[model]` table as written; `sim::model::ModelSpec::resolve` checks it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// A file stem of `configs/models/` whose `[model]` table underlies this one.
    pub preset: Option<String>,
    /// A Hugging Face `config.json`, relative to the file that names it.
    pub hf_config: Option<String>,
    pub name: Option<String>,
    pub layers: Option<u64>,
    pub hidden: Option<u64>,
    pub ffn_hidden: Option<u64>,
    pub heads: Option<u64>,
    pub kv_heads: Option<u64>,
    pub head_dim: Option<u64>,
    pub seq_len: Option<u64>,
    pub vocab: Option<u64>,
    pub activation: Option<Activation>,
    pub norm: Option<Norm>,
    pub position: Option<Position>,
    pub bias: Option<bool>,
    pub tied_embeddings: Option<bool>,
    /// Dropout probability on the attention scores (Megatron-Core's `attention_dropout`).
    pub attention_dropout: Option<f64>,
    /// Each head's query and key pass a norm of the model's kind before attention
    /// (Megatron-Core `--qk-layernorm`; Qwen3, OLMo 2). Default off.
    pub qk_layernorm: Option<bool>,
    pub experts: Option<u64>,
    pub top_k: Option<u64>,
    pub moe_ffn_hidden: Option<u64>,
    pub shared_experts: Option<u64>,
    pub dense_layers: Option<u64>,
    /// Token drop: each expert takes at most `factor` × its balanced share of a rank's routed
    /// tokens (Megatron-Core `--moe-expert-capacity-factor`); unset, MoE layers are dropless.
    pub moe_capacity_factor: Option<f64>,
    /// Pad every expert's input to its capacity (`--moe-pad-expert-input-to-capacity`).
    pub moe_pad_to_capacity: Option<bool>,
    /// How tokens fall on experts: `"skewed"` (default) or `"balanced"`.
    pub routing: Option<Routing>,
    /// The router balances its experts with a per-expert bias instead of an auxiliary loss
    /// (Megatron-Core `--moe-router-enable-expert-bias`; DeepSeek-V3's `topk_method =
    /// "noaux_tc"`).
    pub moe_router_expert_bias: Option<bool>,
    /// Group-limited routing: experts fall into this many equal groups
    /// (Megatron-Core `--moe-router-num-groups`; DeepSeek-V3 `n_group` = 8).
    pub moe_router_num_groups: Option<u64>,
    /// A token's experts come from this many of the groups (`--moe-router-group-topk`;
    /// DeepSeek-V3 `topk_group` = 4).
    pub moe_router_group_topk: Option<u64>,
    pub mla: Option<Mla>,
    /// Multi-token prediction depth (DeepSeek-V3 §2.2; Megatron-Core `--mtp-num-layers`).
    pub mtp_layers: Option<u64>,
    /// Which layers after `dense_layers` are MoE layers (Megatron-Core `--moe-layer-freq`):
    /// an integer N makes layers 0, N, 2N, ... MoE layers and the others dense; a list of 0
    /// and 1, one per layer, names them (Llama 4 Maverick alternates `[0, 1, 0, 1, ...]`).
    pub moe_layer_freq: Option<MoeLayerFreq>,
    /// Sliding-window attention: a query attends to itself and at most this many tokens
    /// before it (Megatron-Core `window_size = (left, 0)`, Transformer Engine's
    /// `window_size`; GPT-OSS: 128). Unset, every layer attends over the whole sequence.
    pub window_size: Option<u64>,
    /// With `window_size`: every N-th layer, counting from 1, attends over the whole
    /// sequence and the others over the window (Megatron-Core `window_attn_skip_freq`;
    /// GPT-OSS alternates, 2). Unset, every layer uses the window.
    pub window_attn_skip_freq: Option<u64>,
}

/// `model.moe_layer_freq` as written: every N-th layer, or a 0/1 pattern per layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoeLayerFreq {
    Every(u64),
    Pattern(Vec<u8>),
}

impl<'de> Deserialize<'de> for MoeLayerFreq {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Freq;
        impl<'de> serde::de::Visitor<'de> for Freq {
            type Value = MoeLayerFreq;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer N (layers 0, N, 2N, ... are MoE layers) or a list of 0 (dense) and 1 (MoE) per layer")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(MoeLayerFreq::Every)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(MoeLayerFreq::Every(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut flags = Vec::new();
                while let Some(f) = seq.next_element::<u8>()? {
                    flags.push(f);
                }
                Ok(MoeLayerFreq::Pattern(flags))
            }
        }
        d.deserialize_any(Freq)
    }
}

/// Names of the embedded presets.
pub fn preset_names() -> Vec<&'static str> {
    embedded::MODELS.iter().map(|(stem, _)| *stem).collect()
}

fn preset_text(name: &str) -> Option<&'static str> {
    let name = PRESET_ALIASES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(name))
        .map_or(name, |(_, real)| real);
    embedded::MODELS
        .iter()
        .find(|(stem, _)| stem.eq_ignore_ascii_case(name))
        .map(|(_, t)| *t)
}

/// Puts the preset's and the Hugging Face config's values under the experiment's own `[model]`
/// keys (own keys win over `hf_config`, which wins over `preset`).
pub fn expand_model_sources(root: &mut Located) -> Result<(), ConfigError> {
    let Some(Value::Table(tables)) = Some(&mut root.value) else {
        return Ok(());
    };
    let Some(model) = tables.get_mut("model") else {
        return Ok(());
    };
    let Some(table) = model.as_table() else {
        return Ok(());
    };
    let preset = table.get("preset").cloned();
    let hf = table.get("hf_config").cloned();
    if preset.is_none() && hf.is_none() {
        return Ok(());
    }
    let mut base = Located::table(model.origin.clone());
    if let Some(p) = preset {
        let Some(name) = p.as_str() else {
            return Err(ConfigError::new(
                p.origin,
                "model.preset",
                "expected a preset name string",
            ));
        };
        let Some(text) = preset_text(name) else {
            return Err(ConfigError::new(
                p.origin.clone(),
                "model.preset",
                format!(
                    "unknown preset `{name}`; valid presets: {}",
                    preset_names().join(", ")
                ),
            ));
        };
        let file = format!("configs/models/{name}.toml");
        let mut fragment = super::parse_text(&file, text)?;
        if let Some(m) = fragment.remove("model") {
            base.merge(m);
        }
    }
    if let Some(h) = hf {
        let Some(written) = h.as_str() else {
            return Err(ConfigError::new(
                h.origin,
                "model.hf_config",
                "expected a file path string",
            ));
        };
        let path = match &h.origin {
            Origin::File { file, .. } | Origin::WholeFile(file) => Path::new(file)
                .parent()
                .unwrap_or(Path::new("."))
                .join(written),
            _ => Path::new(written).to_path_buf(),
        };
        base.merge(read_hf_config(&path, &h.origin)?);
    }
    let own = std::mem::replace(model, base);
    model.merge(own);
    Ok(())
}

/// Maps a Hugging Face `config.json` onto `[model]` keys.
fn read_hf_config(path: &Path, named_at: &Origin) -> Result<Located, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::new(
            named_at.clone(),
            "model.hf_config",
            format!("cannot read {shown}: {e} (paths are relative to the file that names them)"),
        )
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        ConfigError::new(
            Origin::File {
                file: shown.clone(),
                line: u32::try_from(e.line()).unwrap_or(0),
            },
            "",
            format!("invalid JSON in Hugging Face config: {e}"),
        )
    })?;
    let Some(obj) = json.as_object() else {
        return Err(ConfigError::at_file(&shown, "is not a JSON object"));
    };
    let origin = Origin::WholeFile(shown.clone());
    let mut out: BTreeMap<String, Located> = BTreeMap::new();
    let int = |key: &str| -> Result<Option<i64>, ConfigError> {
        match obj.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or_else(|| {
                ConfigError::plain(&shown, key, format!("expected an integer, got {v}"))
            }),
        }
    };
    let put_int = |ours: &str, theirs: &[&str], out: &mut BTreeMap<String, Located>| {
        for key in theirs {
            if let Some(v) = int(key)? {
                out.insert(
                    ours.into(),
                    Located {
                        value: Value::Integer(v),
                        origin: origin.clone(),
                    },
                );
                break;
            }
        }
        Ok::<(), ConfigError>(())
    };
    put_int("hidden", &["hidden_size", "n_embd", "d_model"], &mut out)?;
    put_int(
        "layers",
        &["num_hidden_layers", "n_layer", "num_layers"],
        &mut out,
    )?;
    put_int(
        "ffn_hidden",
        &["intermediate_size", "n_inner", "ffn_dim"],
        &mut out,
    )?;
    put_int("heads", &["num_attention_heads", "n_head"], &mut out)?;
    put_int("kv_heads", &["num_key_value_heads"], &mut out)?;
    put_int("vocab", &["vocab_size"], &mut out)?;
    put_int(
        "experts",
        &["num_local_experts", "n_routed_experts", "num_experts"],
        &mut out,
    )?;
    put_int("top_k", &["num_experts_per_tok"], &mut out)?;
    put_int("moe_ffn_hidden", &["moe_intermediate_size"], &mut out)?;
    put_int("shared_experts", &["n_shared_experts"], &mut out)?;
    put_int("dense_layers", &["first_k_dense_replace"], &mut out)?;
    put_int("moe_router_num_groups", &["n_group"], &mut out)?;
    put_int("moe_router_group_topk", &["topk_group"], &mut out)?;
    put_int("mtp_layers", &["num_nextn_predict_layers"], &mut out)?;
    put_int("head_dim", &["head_dim"], &mut out)?;
    put_int(
        "seq_len",
        &["max_position_embeddings", "n_positions"],
        &mut out,
    )?;
    if !out.contains_key("kv_heads")
        && let Some(h) = out.get("heads").cloned()
    {
        out.insert("kv_heads".into(), h);
    }
    let text_value = |s: &str| Located {
        value: Value::String(s.into()),
        origin: origin.clone(),
    };
    let bool_value = |b: bool| Located {
        value: Value::Boolean(b),
        origin: origin.clone(),
    };
    if let Some(act) = obj
        .get("hidden_act")
        .or_else(|| obj.get("activation_function"))
    {
        let act = act.as_str().unwrap_or_default();
        let ours = if act == "silu" || act == "swiglu" {
            "swiglu"
        } else if act.starts_with("gelu") {
            "gelu"
        } else if act == "relu2" {
            "relu2"
        } else {
            return Err(ConfigError::plain(
                &shown,
                "hidden_act",
                format!("activation `{act}` is not modelled; expected silu, gelu* or relu2"),
            ));
        };
        out.insert("activation".into(), text_value(ours));
    }
    if obj.get("topk_method").and_then(serde_json::Value::as_str) == Some("noaux_tc") {
        out.insert("moe_router_expert_bias".into(), bool_value(true));
    }
    // Sliding windows: Mistral's `sliding_window` covers every layer, GPT-OSS's the layers its
    // `layer_types` mark "sliding_attention"; Qwen2/3 write one but switch it off
    // (`use_sliding_window: false`).
    let window_on = obj
        .get("use_sliding_window")
        .and_then(serde_json::Value::as_bool)
        != Some(false);
    if window_on && let Some(window) = int("sliding_window")? {
        let full: Vec<bool> = obj
            .get("layer_types")
            .and_then(serde_json::Value::as_array)
            .map(|types| {
                types
                    .iter()
                    .map(|t| t.as_str() == Some("full_attention"))
                    .collect()
            })
            .unwrap_or_default();
        let int_value = |v: i64| Located {
            value: Value::Integer(v),
            origin: origin.clone(),
        };
        if full.is_empty() || full.contains(&false) {
            out.insert("window_size".into(), int_value(window));
        }
        if full.contains(&true) && full.contains(&false) {
            // Megatron-Core's `window_attn_skip_freq` N: layer numbers (from 1) divisible by N
            // attend fully.
            let every = (2..=full.len()).find(|&n| {
                full.iter()
                    .enumerate()
                    .all(|(i, &f)| f == (i + 1).is_multiple_of(n))
            });
            let Some(every) = every else {
                return Err(ConfigError::plain(
                    &shown,
                    "layer_types",
                    "full and sliding-window layers do not alternate as every N-th layer full; write model.window_size and model.window_attn_skip_freq in the experiment instead of reading them",
                ));
            };
            out.insert(
                "window_attn_skip_freq".into(),
                int_value(i64::try_from(every).unwrap_or(i64::MAX)),
            );
        }
    }
    // Qwen3's attention normalises each head's query and key (transformers'
    // `modeling_qwen3.py`, `Qwen3Attention.q_norm` and `k_norm`); its config.json has no flag
    // for it, only the model type.
    if matches!(
        obj.get("model_type").and_then(serde_json::Value::as_str),
        Some("qwen3" | "qwen3_moe")
    ) {
        out.insert("qk_layernorm".into(), bool_value(true));
    }
    let is_llama_like = obj.contains_key("rms_norm_eps");
    out.insert(
        "norm".into(),
        text_value(if is_llama_like {
            "rmsnorm"
        } else {
            "layernorm"
        }),
    );
    out.insert(
        "position".into(),
        text_value(if obj.contains_key("rope_theta") || is_llama_like {
            "rope"
        } else {
            "learned"
        }),
    );
    let bias = obj
        .get("attention_bias")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(!is_llama_like);
    out.insert("bias".into(), bool_value(bias));
    let tied = obj
        .get("tie_word_embeddings")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    out.insert("tied_embeddings".into(), bool_value(tied));
    if let Some(q) = int("kv_lora_rank")? {
        let mut mla = BTreeMap::new();
        mla.insert(
            "kv_lora_rank".into(),
            Located {
                value: Value::Integer(q),
                origin: origin.clone(),
            },
        );
        for key in [
            "q_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "v_head_dim",
        ] {
            let v = int(key)?.unwrap_or(0);
            mla.insert(
                key.into(),
                Located {
                    value: Value::Integer(v),
                    origin: origin.clone(),
                },
            );
        }
        out.insert(
            "mla".into(),
            Located {
                value: Value::Table(mla),
                origin: origin.clone(),
            },
        );
    }
    let name = path
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "hf-model".into());
    out.insert("name".into(), text_value(&name));
    Ok(Located {
        value: Value::Table(out),
        origin,
    })
}

/// Parses a preset text (used by tests and `fleetsim check`).
pub fn preset(name: &str) -> Result<ModelConfig, ConfigError> {
    let text = preset_text(name).ok_or_else(|| {
        ConfigError::plain(
            "configs/models",
            "model.preset",
            format!("unknown preset `{name}`"),
        )
    })?;
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Fragment {
        model: ModelConfig,
    }
    let f: Fragment = parse_typed(&format!("configs/models/{name}.toml"), text)?;
    Ok(f.model)
}
