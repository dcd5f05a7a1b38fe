//! A model from a Hugging Face `config.json` (the file every `transformers`
//! checkpoint ships): its `model_type` picks the family, its width / depth /
//! heads / vocabulary fields the block shapes, checked like a catalog entry.
//!
//! Supported `model_type`s and the keys read (from `transformers`' config
//! classes):
//! * `llama`, `mistral`, `qwen2`, `qwen3` (dense): `hidden_size`,
//!   `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`
//!   (default: the heads), `head_dim` (where it differs from hidden /
//!   heads), `intermediate_size`, `vocab_size`, `max_position_embeddings`
//!   (the default sequence length), `tie_word_embeddings` (default false),
//!   `sliding_window` (Mistral every block; Qwen only under
//!   `use_sliding_window`, from block `max_window_layers` on);
//! * mixture-of-experts (the keys above, plus): `mixtral`
//!   (`num_local_experts`, `num_experts_per_tok`, experts `intermediate_size`
//!   wide); `qwen2_moe`, `qwen3_moe` (`num_experts`, `num_experts_per_tok`,
//!   `moe_intermediate_size`, `decoder_sparse_step`, Qwen2's one shared expert
//!   `shared_expert_intermediate_size`); `deepseek_v2`, `deepseek_v3`
//!   (`n_routed_experts`, `n_shared_experts`, `moe_intermediate_size`,
//!   `first_k_dense_replace`, dense blocks `intermediate_size` wide, latent
//!   attention `q_lora_rank` / `kv_lora_rank` / `qk_nope_head_dim` /
//!   `qk_rope_head_dim` / `v_head_dim`, `num_nextn_predict_layers`);
//!   `llama4` (its `text_config`; the vision encoder is not counted) and
//!   `llama4_text` (`num_local_experts`, one shared expert, both
//!   `intermediate_size` wide, dense blocks `intermediate_size_mlp`,
//!   `interleave_moe_layer_step`, chunked attention `attention_chunk_size`
//!   on all but every `no_rope_layer_interval`-th block as a window);
//!   `gpt_oss` (`num_local_experts`, `num_experts_per_tok`,
//!   `intermediate_size`, `sliding_window` on the `layer_types` that say
//!   so); `olmoe` (`num_experts`, `num_experts_per_tok`,
//!   `intermediate_size`);
//! * `gpt2`: `n_embd`, `n_layer`, `n_head`, `n_inner` (null: 4 x width),
//!   `vocab_size`, `n_positions` (learned positions and the default
//!   sequence length), `tie_word_embeddings` (default true);
//! * `bert`: the llama keys without KV heads, learned positions of
//!   `max_position_embeddings`, default sequence length min(512, that), the
//!   MLM decoder tied (default true);
//! * `vit`: `hidden_size`, `num_hidden_layers`, `num_attention_heads`,
//!   `intermediate_size`, `image_size`, `patch_size`, classes from
//!   `id2label` (else `num_labels`, else 1,000 for ImageNet-1k).
//!
//! Keys that change the computation in a way the model does not represent
//! are refused, not ignored: experts on a dense `model_type`, Qwen's
//! `mlp_only_layers`, DeepSeek's `moe_layer_freq` other than 1, a
//! `layer_types` pattern the block sets cannot name, and an
//! `intermediate_size` on a `gpt2` config. Other keys (rope scaling,
//! dropout, initialisation, routing scores and groups, small biases) do not
//! change the work per token beyond 0.1% and are not read.

use crate::error::SpecError;
use crate::experts::LayerSet;
use crate::model::{Family, ModelSpec, RawModel};
use serde_json::{Map, Value};

/// The `model_type`s this importer understands.
pub const SUPPORTED_MODEL_TYPES: &str = "llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, llama4, llama4_text, gpt_oss, olmoe, gpt2, bert, vit";

/// Reads a `config.json` text into a model named `name`. Errors name
/// `origin` and the JSON key.
pub fn from_hf_config(text: &str, origin: &str, name: &str) -> Result<ModelSpec, SpecError> {
    let v: Value = serde_json::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
    let Some(top) = v.as_object() else {
        return Err(SpecError::invalid(
            origin,
            "config",
            "expected a JSON object (a Hugging Face config.json)",
        ));
    };
    let model_type = top
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            SpecError::invalid(
                origin,
                "model_type",
                format!("expected a string, one of {SUPPORTED_MODEL_TYPES}"),
            )
        })?;
    // Llama 4 nests the language model's keys in `text_config`.
    let cfg = match model_type {
        "llama4" => top
            .get("text_config")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                SpecError::invalid(origin, "text_config", "expected the language model's keys")
            })?,
        _ => top,
    };
    let dense = matches!(
        model_type,
        "llama" | "mistral" | "qwen2" | "qwen3" | "gpt2" | "bert" | "vit"
    );
    for moe in ["num_local_experts", "num_experts", "n_routed_experts"] {
        if dense && cfg.get(moe).and_then(Value::as_u64).is_some_and(|n| n > 1) {
            return Err(SpecError::invalid(
                origin,
                moe,
                format!("experts on a dense `{model_type}` config; a mixture-of-experts model has its own model_type (mixtral, qwen3_moe, deepseek_v3, ...)"),
            ));
        }
    }
    let r = Reader { cfg, origin };
    let raw = match model_type {
        "llama" => r.llama_like(name, Family::Llama)?,
        "mistral" => r.mistral(name)?,
        "qwen2" | "qwen3" => r.qwen(name)?,
        "mixtral" => r.mixtral(name)?,
        "qwen2_moe" | "qwen3_moe" | "olmoe" => r.qwen_moe(name, model_type)?,
        "deepseek_v2" | "deepseek_v3" => r.deepseek(name)?,
        "llama4" | "llama4_text" => r.llama4(name)?,
        "gpt_oss" => r.gpt_oss(name)?,
        "gpt2" => r.gpt2(name)?,
        "bert" => r.bert(name)?,
        "vit" => r.vit(name)?,
        other => {
            return Err(SpecError::invalid(
                origin,
                "model_type",
                format!("`{other}` is not supported; expected one of {SUPPORTED_MODEL_TYPES}"),
            ))
        }
    };
    raw.into_spec(origin, "config")
}

/// Typed reads of a config's keys, each error naming the key.
struct Reader<'a> {
    cfg: &'a Map<String, Value>,
    origin: &'a str,
}

impl Reader<'_> {
    fn int(&self, key: &str) -> Result<u32, SpecError> {
        match self.cfg.get(key) {
            None => Err(SpecError::invalid(
                self.origin,
                key,
                "missing (expected a positive integer)",
            )),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    SpecError::invalid(
                        self.origin,
                        key,
                        format!("expected a positive integer below 2^32, got {v}"),
                    )
                }),
        }
    }

    fn int_or(&self, key: &str, default: u32) -> Result<u32, SpecError> {
        match self.cfg.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(_) => self.int(key),
        }
    }

    fn flag_or(&self, key: &str, default: bool) -> Result<bool, SpecError> {
        match self.cfg.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(SpecError::invalid(
                self.origin,
                key,
                format!("expected true or false, got {v}"),
            )),
        }
    }

    fn opt_int(&self, key: &str) -> Result<Option<u32>, SpecError> {
        match self.cfg.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.int(key).map(Some),
        }
    }

    /// A refusal naming `key`.
    fn refuse(&self, key: &str, msg: String) -> SpecError {
        SpecError::invalid(self.origin, key, msg)
    }

    /// The keys every rotary SwiGLU config shares, as model `name` of
    /// `family`: width, depth, heads, KV heads, the head width where it
    /// differs from width / heads, the MLP width, vocabulary, context and
    /// tying.
    fn llama_like(&self, name: &str, family: Family) -> Result<RawModel, SpecError> {
        let heads = self.int("num_attention_heads")?;
        let hidden = self.int("hidden_size")?;
        let head_dim = self
            .opt_int("head_dim")?
            .filter(|&d| d.checked_mul(heads) != Some(hidden));
        Ok(RawModel {
            layers: self.int("num_hidden_layers")?,
            hidden,
            heads,
            kv_heads: Some(self.int_or("num_key_value_heads", heads)?),
            ffn: Some(self.int("intermediate_size")?),
            vocab: self.int("vocab_size")?,
            seq_len: self.int("max_position_embeddings")?,
            tied_embeddings: self.flag_or("tie_word_embeddings", false)?,
            head_dim,
            ..RawModel::blank(name, family)
        })
    }

    /// A `mistral` config: sliding-window attention in every block.
    fn mistral(&self, name: &str) -> Result<RawModel, SpecError> {
        Ok(RawModel {
            sliding_window: self.opt_int("sliding_window")?,
            ..self.llama_like(name, Family::Mistral)?
        })
    }

    /// A dense `qwen2` / `qwen3` config: a window only under
    /// `use_sliding_window`, on the blocks from `max_window_layers` on.
    fn qwen(&self, name: &str) -> Result<RawModel, SpecError> {
        let m = self.llama_like(name, Family::Llama)?;
        self.qwen_window(m)
    }

    fn qwen_window(&self, m: RawModel) -> Result<RawModel, SpecError> {
        if !self.flag_or("use_sliding_window", false)? {
            return Ok(m);
        }
        let from = self.int_or("max_window_layers", 0)?;
        if from >= m.layers {
            return Ok(m);
        }
        Ok(RawModel {
            sliding_window: self.opt_int("sliding_window")?,
            sliding_layers: Some(LayerSet::After(from).name()),
            ..m
        })
    }

    /// A `mixtral` config: every block's MLP is `num_local_experts`
    /// experts of `intermediate_size`, `num_experts_per_tok` per token.
    fn mixtral(&self, name: &str) -> Result<RawModel, SpecError> {
        let m = self.mistral(name)?;
        Ok(RawModel {
            experts: Some(self.int("num_local_experts")?),
            top_k: Some(self.int("num_experts_per_tok")?),
            expert_ffn: m.ffn,
            ffn: None,
            ..m
        })
    }

    /// A `qwen2_moe`, `qwen3_moe` or `olmoe` config.
    fn qwen_moe(&self, name: &str, model_type: &str) -> Result<RawModel, SpecError> {
        if let Some(v) = self.cfg.get("mlp_only_layers") {
            if v.as_array().is_none_or(|a| !a.is_empty()) {
                return Err(self.refuse(
                    "mlp_only_layers",
                    format!("dense blocks at listed positions are not modelled (got {v}); give the model as a catalog entry with moe_layers"),
                ));
            }
        }
        let olmoe = model_type == "olmoe";
        let m = self.llama_like(name, Family::Llama)?;
        let m = if olmoe { m } else { self.qwen_window(m)? };
        let step = self.int_or("decoder_sparse_step", 1)?;
        let shared = match model_type {
            "qwen2_moe" => self.opt_int("shared_expert_intermediate_size")?,
            _ => None,
        };
        Ok(RawModel {
            experts: Some(self.int("num_experts")?),
            top_k: Some(self.int("num_experts_per_tok")?),
            expert_ffn: Some(if olmoe {
                self.int("intermediate_size")?
            } else {
                self.int("moe_intermediate_size")?
            }),
            shared_experts: shared.map(|_| 1),
            shared_expert_ffn: shared,
            moe_layers: Some(LayerSet::Every(step).name()).filter(|_| step > 1),
            ffn: if olmoe || step == 1 { None } else { m.ffn },
            ..m
        })
    }

    /// A `deepseek_v2` / `deepseek_v3` config: latent attention, dense
    /// blocks before `first_k_dense_replace`, routed and shared experts,
    /// prediction depths.
    fn deepseek(&self, name: &str) -> Result<RawModel, SpecError> {
        let freq = self.int_or("moe_layer_freq", 1)?;
        if freq != 1 {
            return Err(self.refuse(
                "moe_layer_freq",
                format!("experts on every {freq}-th block after the dense ones are not modelled (every released DeepSeek uses 1)"),
            ));
        }
        let dense_first = self.int_or("first_k_dense_replace", 0)?;
        let shared = self.int_or("n_shared_experts", 0)?;
        let m = self.llama_like(name, Family::Llama)?;
        Ok(RawModel {
            head_dim: None,
            attention: Some("mla".into()),
            q_lora_rank: self.opt_int("q_lora_rank")?,
            kv_lora_rank: Some(self.int("kv_lora_rank")?),
            qk_head_dim: Some(self.int("qk_nope_head_dim")?),
            qk_rope_head_dim: Some(self.int("qk_rope_head_dim")?),
            v_head_dim: Some(self.int("v_head_dim")?),
            experts: Some(self.int("n_routed_experts")?),
            top_k: Some(self.int("num_experts_per_tok")?),
            expert_ffn: Some(self.int("moe_intermediate_size")?),
            shared_experts: Some(shared).filter(|&n| n > 0),
            moe_layers: Some(LayerSet::After(dense_first).name()).filter(|_| dense_first > 0),
            ffn: if dense_first > 0 { m.ffn } else { None },
            mtp_layers: self.opt_int("num_nextn_predict_layers")?,
            ..m
        })
    }

    /// A `llama4` text config: experts with one shared expert on every
    /// `interleave_moe_layer_step`-th block, dense blocks of
    /// `intermediate_size_mlp`, chunked attention as a window on the blocks
    /// with rotary positions.
    fn llama4(&self, name: &str) -> Result<RawModel, SpecError> {
        let m = self.llama_like(name, Family::Llama)?;
        let step = self.int_or("interleave_moe_layer_step", 1)?;
        let nope_every = self.int_or("no_rope_layer_interval", 4)?;
        let chunk = self.opt_int("attention_chunk_size")?;
        let expert_ffn = m.ffn;
        Ok(RawModel {
            experts: Some(self.int("num_local_experts")?),
            top_k: Some(self.int("num_experts_per_tok")?),
            expert_ffn,
            shared_experts: Some(1),
            shared_expert_ffn: expert_ffn,
            moe_layers: Some(LayerSet::Every(step).name()).filter(|_| step > 1),
            ffn: if step > 1 {
                Some(self.int("intermediate_size_mlp")?)
            } else {
                None
            },
            sliding_window: chunk,
            sliding_layers: chunk
                .and(Some(LayerSet::AllButEvery(nope_every).name()))
                .filter(|_| nope_every > 1),
            ..m
        })
    }

    /// A `gpt_oss` config: experts in every block, a sliding window on
    /// the blocks `layer_types` marks `sliding_attention`.
    fn gpt_oss(&self, name: &str) -> Result<RawModel, SpecError> {
        let m = self.llama_like(name, Family::Llama)?;
        let sliding = match self.cfg.get("layer_types") {
            None | Some(Value::Null) => None,
            Some(v) => {
                let members: Option<Vec<bool>> = v.as_array().map(|a| {
                    a.iter()
                        .map(|t| t.as_str() == Some("sliding_attention"))
                        .collect()
                });
                match members {
                    Some(mm) if mm.len() == m.layers as usize && !mm.iter().any(|&x| x) => None,
                    Some(mm) if mm.len() == m.layers as usize => Some(
                        LayerSet::of_members(&mm)
                            .ok_or_else(|| {
                                self.refuse(
                                    "layer_types",
                                    "a sliding-window pattern that is not all, every:K, all-but-every:K or after:K".into(),
                                )
                            })?
                            .name(),
                    ),
                    _ => {
                        return Err(self.refuse(
                            "layer_types",
                            format!("expected one entry per block ({}), each `sliding_attention` or `full_attention`", m.layers),
                        ))
                    }
                }
            }
        };
        Ok(RawModel {
            experts: Some(self.int("num_local_experts")?),
            top_k: Some(self.int("num_experts_per_tok")?),
            expert_ffn: m.ffn,
            ffn: None,
            sliding_window: sliding.as_ref().and(self.opt_int("sliding_window")?),
            sliding_layers: sliding,
            ..m
        })
    }

    /// A `gpt2` config as model `name` (its MLP width is `n_inner`, never
    /// `intermediate_size`).
    fn gpt2(&self, name: &str) -> Result<RawModel, SpecError> {
        if self.cfg.contains_key("intermediate_size") {
            return Err(SpecError::invalid(
                self.origin,
                "intermediate_size",
                "a gpt2 config gives its MLP width as n_inner",
            ));
        }
        let hidden = self.int("n_embd")?;
        let positions = self.int("n_positions")?;
        Ok(RawModel {
            layers: self.int("n_layer")?,
            hidden,
            heads: self.int("n_head")?,
            kv_heads: None,
            ffn: match self.cfg.get("n_inner") {
                None | Some(Value::Null) => None,
                Some(_) => Some(self.int("n_inner")?),
            },
            vocab: self.int("vocab_size")?,
            seq_len: positions,
            image_size: None,
            patch_size: None,
            tied_embeddings: self.flag_or("tie_word_embeddings", true)?,
            max_positions: Some(positions),
            ..RawModel::blank(name, Family::Gpt)
        })
    }

    /// A `bert` config as model `name`.
    fn bert(&self, name: &str) -> Result<RawModel, SpecError> {
        let positions = self.int("max_position_embeddings")?;
        Ok(RawModel {
            layers: self.int("num_hidden_layers")?,
            hidden: self.int("hidden_size")?,
            heads: self.int("num_attention_heads")?,
            kv_heads: None,
            ffn: Some(self.int("intermediate_size")?),
            vocab: self.int("vocab_size")?,
            seq_len: positions.min(512),
            image_size: None,
            patch_size: None,
            tied_embeddings: self.flag_or("tie_word_embeddings", true)?,
            max_positions: Some(positions),
            ..RawModel::blank(name, Family::Bert)
        })
    }

    /// A `vit` config as model `name` (classes from `id2label`, else
    /// `num_labels`, else 1,000).
    fn vit(&self, name: &str) -> Result<RawModel, SpecError> {
        let classes = match self.cfg.get("id2label").and_then(Value::as_object) {
            Some(m) if !m.is_empty() => m.len() as u32,
            _ => self.int_or("num_labels", 1000)?,
        };
        Ok(RawModel {
            layers: self.int("num_hidden_layers")?,
            hidden: self.int("hidden_size")?,
            heads: self.int("num_attention_heads")?,
            kv_heads: None,
            ffn: Some(self.int("intermediate_size")?),
            vocab: classes,
            seq_len: 1,
            image_size: Some(self.int("image_size")?),
            patch_size: Some(self.int("patch_size")?),
            tied_embeddings: false,
            max_positions: None,
            ..RawModel::blank(name, Family::Vit)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// meta-llama/Llama-2-7b-hf's config.json (the shape keys).
    const LLAMA2_7B: &str = r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 32, "max_position_embeddings": 4096,
        "vocab_size": 32000, "tie_word_embeddings": false, "rope_theta": 10000.0}"#;

    #[test]
    fn llama2_7b_has_its_public_parameter_count() {
        let m = from_hf_config(LLAMA2_7B, "config.json", "Llama-2-7b-hf").unwrap();
        assert_eq!(m.family, Family::Llama);
        assert_eq!((m.vocab, m.seq_len, m.kv_heads), (32000, 4096, 32));
        // 6,738,415,616 parameters: the count transformers prints for Llama-2-7b.
        assert_eq!(m.total_params(), 6_738_415_616);
    }

    #[test]
    fn gpt2_defaults_follow_transformers() {
        let text = r#"{"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
            "n_inner": null, "n_positions": 1024, "vocab_size": 50257}"#;
        let m = from_hf_config(text, "c", "gpt2").unwrap();
        assert_eq!(
            (m.ffn, m.max_positions, m.tied_embeddings),
            (3072, 1024, true)
        );
        // GPT-2 small: 124,439,808 parameters with the tied head.
        assert_eq!(m.total_params(), 124_439_808);
    }

    #[test]
    fn bad_configs_name_the_key() {
        let cases = [
            (r#"[1]"#, "config"),
            (r#"{"model_type": "t5"}"#, "model_type"),
            (
                r#"{"model_type": "mistral", "num_local_experts": 8}"#,
                "num_local_experts",
            ),
            (
                r#"{"model_type": "llama", "hidden_size": 4096}"#,
                "num_attention_heads",
            ),
            (
                &LLAMA2_7B.replace("\"hidden_size\": 4096", "\"hidden_size\": -1"),
                "hidden_size",
            ),
            (
                &LLAMA2_7B.replace("\"num_key_value_heads\": 32", "\"num_key_value_heads\": 5"),
                "kv_heads",
            ),
            (
                &LLAMA2_7B.replace(
                    "\"tie_word_embeddings\": false",
                    "\"tie_word_embeddings\": 3",
                ),
                "tie_word_embeddings",
            ),
        ];
        for (text, key) in cases {
            let e = from_hf_config(text, "cfg.json", "m")
                .unwrap_err()
                .to_string();
            assert!(e.contains("cfg.json") && e.contains(key), "{text}: {e}");
        }
    }
}
