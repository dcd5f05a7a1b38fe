//! A model from a Hugging Face `config.json` (the file every `transformers`
//! checkpoint ships): its `model_type` picks the family, its width / depth /
//! heads / vocabulary fields the block shapes, checked like a catalog entry.
//!
//! Supported `model_type`s and the keys read (from `transformers`' config
//! classes: `LlamaConfig`, `MistralConfig`, `GPT2Config`, `BertConfig`,
//! `ViTConfig`):
//! * `llama`, `mistral`: `hidden_size`, `num_hidden_layers`,
//!   `num_attention_heads`, `num_key_value_heads` (default: the heads),
//!   `intermediate_size`, `vocab_size`, `max_position_embeddings` (the
//!   default sequence length), `tie_word_embeddings` (default false);
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
//! Keys that change the computation in a way the block model does not
//! represent are refused, not ignored: mixture-of-experts (`num_local_experts`,
//! `num_experts`), and an `intermediate_size` on a `gpt2` config. Other keys
//! (rope scaling, dropout, initialisation) do not change the work per token
//! and are not read.

use crate::error::SpecError;
use crate::model::{Family, ModelSpec, RawModel};
use serde_json::{Map, Value};

/// The `model_type`s this importer understands.
pub const SUPPORTED_MODEL_TYPES: &str = "llama, mistral, gpt2, bert, vit";

/// Reads a `config.json` text into a model named `name`. Errors name
/// `origin` and the JSON key.
pub fn from_hf_config(text: &str, origin: &str, name: &str) -> Result<ModelSpec, SpecError> {
    let v: Value = serde_json::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
    let Some(cfg) = v.as_object() else {
        return Err(SpecError::invalid(
            origin,
            "config",
            "expected a JSON object (a Hugging Face config.json)",
        ));
    };
    for moe in ["num_local_experts", "num_experts"] {
        if cfg.get(moe).and_then(Value::as_u64).is_some_and(|n| n > 1) {
            return Err(SpecError::invalid(
                origin,
                moe,
                "mixture-of-experts models are not modelled (every block is one dense MLP)",
            ));
        }
    }
    let model_type = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            SpecError::invalid(
                origin,
                "model_type",
                format!("expected a string, one of {SUPPORTED_MODEL_TYPES}"),
            )
        })?;
    let r = Reader { cfg, origin };
    let raw = match model_type {
        "llama" | "mistral" => r.llama(name, model_type == "mistral")?,
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

    /// A `llama` (or, when `mistral`, a `mistral`) config as model `name`.
    fn llama(&self, name: &str, mistral: bool) -> Result<RawModel, SpecError> {
        let heads = self.int("num_attention_heads")?;
        Ok(RawModel {
            name: name.to_string(),
            aliases: Vec::new(),
            family: if mistral {
                Family::Mistral
            } else {
                Family::Llama
            },
            layers: self.int("num_hidden_layers")?,
            hidden: self.int("hidden_size")?,
            heads,
            kv_heads: Some(self.int_or("num_key_value_heads", heads)?),
            ffn: Some(self.int("intermediate_size")?),
            vocab: self.int("vocab_size")?,
            seq_len: self.int("max_position_embeddings")?,
            image_size: None,
            patch_size: None,
            tied_embeddings: self.flag_or("tie_word_embeddings", false)?,
            max_positions: None,
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
            name: name.to_string(),
            aliases: Vec::new(),
            family: Family::Gpt,
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
        })
    }

    /// A `bert` config as model `name`.
    fn bert(&self, name: &str) -> Result<RawModel, SpecError> {
        let positions = self.int("max_position_embeddings")?;
        Ok(RawModel {
            name: name.to_string(),
            aliases: Vec::new(),
            family: Family::Bert,
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
            name: name.to_string(),
            aliases: Vec::new(),
            family: Family::Vit,
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
