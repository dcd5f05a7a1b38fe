//! Model catalog: transformer shapes (layers, width, heads, MLP width,
//! vocabulary) and what follows from them per block and per sample:
//! parameter counts, FLOPs (floating-point operations, one multiply-add = 2),
//! bytes moved to/from GPU memory, and activation bytes saved for backward.
//!
//! The built-in catalog is `profiles/models.toml`, compiled in with
//! `include_str!`; its header explains how every reference model's shape was
//! reconstructed from `../shared/reference-profiles`. Users may load their
//! own file with [`ModelCatalog::from_toml`].
//!
//! Conventions: "per sample" means one sequence of `tokens_per_sample(seq_len)`
//! tokens (for ViT that is `(image/patch)^2 + 1` whatever `seq_len` says);
//! "block" is one transformer layer. FLOPs count matmuls only (elementwise ops
//! are memory-bound and show up in the byte counts instead), with attention
//! computed eagerly over the full `s x s` score matrix, as in the reference
//! measurements (no flash attention, no causal skipping).
//!
//! Invariants (checked by [`ModelCatalog::from_toml`]): all sizes positive;
//! `hidden` a multiple of `heads`, `heads` a multiple of `kv_heads`; ViT
//! models have an image size that is a multiple of the patch size; names and
//! aliases unique (see `NameIndex` in [`crate::gpu`]).

use crate::error::SpecError;
use crate::experts::{LayerSet, Moe};
use crate::gpu::NameIndex;
use crate::mla::Mla;
use crate::precision::NumFormat;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// The shipped catalog text (`profiles/models.toml`).
pub const BUILTIN_MODELS_TOML: &str = include_str!("../../profiles/models.toml");

/// Image channels of ViT inputs (RGB).
pub const VIT_CHANNELS: u64 = 3;

/// Model family: decides the block structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// GPT decoder: LayerNorm, biased attention, GELU MLP, dropout, learned positions.
    Gpt,
    /// LLaMA decoder: RMSNorm, no biases, rotary positions, SwiGLU MLP.
    Llama,
    /// BERT encoder: like GPT plus token types and an MLM head.
    Bert,
    /// Vision transformer: patch embedding, class token, classifier head, no dropout.
    Vit,
    /// Mistral decoder: LLaMA blocks with grouped-query attention.
    Mistral,
}

impl Family {
    /// Lower-case name (`gpt`, `llama`, `bert`, `vit`, `mistral`).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Gpt => "gpt",
            Family::Llama => "llama",
            Family::Bert => "bert",
            Family::Vit => "vit",
            Family::Mistral => "mistral",
        }
    }

    /// LLaMA-style block (RMSNorm, SwiGLU MLP, no biases).
    pub fn is_llama_like(self) -> bool {
        matches!(self, Family::Llama | Family::Mistral)
    }

    /// Whether training runs dropout (masks saved for backward). The GPT and
    /// BERT builds use dropout 0.1; ViT (0.0) and LLaMA/Mistral have none.
    pub fn has_dropout(self) -> bool {
        matches!(self, Family::Gpt | Family::Bert)
    }

    /// Whether attention is causal (decoders: GPT, LLaMA, Mistral): a fused
    /// kernel skips the masked half of the score FLOPs. BERT and ViT
    /// attend both ways.
    pub fn is_causal(self) -> bool {
        !matches!(self, Family::Bert | Family::Vit)
    }

    /// Whether the model has a learned position embedding of `max_positions` rows.
    pub fn learned_positions(self) -> bool {
        matches!(self, Family::Gpt | Family::Bert)
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One model's shape. Build it from TOML through [`ModelCatalog::from_toml`]
/// (which fills defaults and validates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Canonical name (what reports print), e.g. `gpt-2.7b`.
    pub name: String,
    /// Other accepted names (the reference data's keys among them).
    pub aliases: Vec<String>,
    /// Family (block structure).
    pub family: Family,
    /// Transformer blocks.
    pub layers: u32,
    /// Model width h.
    pub hidden: u32,
    /// Attention heads a.
    pub heads: u32,
    /// Key/value heads (= `heads` without grouped-query attention).
    pub kv_heads: u32,
    /// MLP inner width.
    pub ffn: u32,
    /// Output vocabulary of the LM head / MLM decoder (tokens); for ViT the
    /// number of classes of the classifier head.
    pub vocab: u32,
    /// Default tokens per sample (ignored by ViT, see [`ModelSpec::tokens_per_sample`]).
    pub seq_len: u32,
    /// ViT input image side, pixels.
    pub image_size: Option<u32>,
    /// ViT patch side, pixels.
    pub patch_size: Option<u32>,
    /// LM head / MLM decoder weight shared with the word embedding.
    pub tied_embeddings: bool,
    /// Rows of the learned position embedding (GPT, BERT; for ViT the token
    /// count); 0 for rotary families.
    pub max_positions: u32,
    /// The blocks priced are this project's trainer's (what `cephalo
    /// profile` measured), not the reference build the name may denote:
    /// the reference builds' fitted factors do not apply
    /// ([`ModelSpec::as_own_build`]). Never read from or written to a file.
    #[serde(skip)]
    pub own_build: bool,
    /// Per-head width `d` where the model sets it apart from `hidden /
    /// heads` (Qwen3, GPT-OSS, Llama 4); `None`: `hidden / heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_head_dim: Option<u32>,
    /// Multi-head latent attention (DeepSeek-V2/V3) in place of the
    /// q, k, v, o projections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<Mla>,
    /// The mixture-of-experts MLP of the blocks it names; the other
    /// blocks run the dense MLP of width `ffn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<Moe>,
    /// Sliding-window attention: keys per query at most this many tokens
    /// (Mistral-7B-v0.1 every block; GPT-OSS every other block, see
    /// `sliding_layers`); `None`: full attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u32>,
    /// The blocks that attend within `sliding_window`.
    #[serde(default = "all_layers", skip_serializing_if = "is_all_layers")]
    pub sliding_layers: LayerSet,
    /// Multi-token-prediction depths (DeepSeek-V3: 1): each one more block,
    /// an `2h -> h` projection and norms, sharing the embedding and head.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mtp_layers: u32,
}

fn all_layers() -> LayerSet {
    LayerSet::All
}

fn is_all_layers(s: &LayerSet) -> bool {
    *s == LayerSet::All
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// On-disk form of one model (`[[model]]` table), before defaults; also
/// what [`crate::hf_config`] fills from a Hugging Face `config.json`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawModel {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) aliases: Vec<String>,
    pub(crate) family: Family,
    pub(crate) layers: u32,
    pub(crate) hidden: u32,
    pub(crate) heads: u32,
    pub(crate) kv_heads: Option<u32>,
    pub(crate) ffn: Option<u32>,
    #[serde(alias = "classes")]
    pub(crate) vocab: u32,
    pub(crate) seq_len: u32,
    pub(crate) image_size: Option<u32>,
    pub(crate) patch_size: Option<u32>,
    #[serde(default)]
    pub(crate) tied_embeddings: bool,
    pub(crate) max_positions: Option<u32>,
    /// Per-head width where it is not `hidden / heads`.
    #[serde(default)]
    pub(crate) head_dim: Option<u32>,
    /// `mla` for multi-head latent attention (with the five widths
    /// below); absent or `standard` otherwise.
    #[serde(default)]
    pub(crate) attention: Option<String>,
    #[serde(default)]
    pub(crate) q_lora_rank: Option<u32>,
    #[serde(default)]
    pub(crate) kv_lora_rank: Option<u32>,
    #[serde(default)]
    pub(crate) qk_head_dim: Option<u32>,
    #[serde(default)]
    pub(crate) qk_rope_head_dim: Option<u32>,
    #[serde(default)]
    pub(crate) v_head_dim: Option<u32>,
    /// Routed experts (absent: a dense model).
    #[serde(default)]
    pub(crate) experts: Option<u32>,
    #[serde(default)]
    pub(crate) top_k: Option<u32>,
    #[serde(default)]
    pub(crate) expert_ffn: Option<u32>,
    #[serde(default)]
    pub(crate) shared_experts: Option<u32>,
    #[serde(default)]
    pub(crate) shared_expert_ffn: Option<u32>,
    #[serde(default)]
    pub(crate) moe_layers: Option<String>,
    #[serde(default)]
    pub(crate) capacity_factor: Option<f64>,
    #[serde(default)]
    pub(crate) routing_imbalance: Option<f64>,
    #[serde(default)]
    pub(crate) sliding_window: Option<u32>,
    #[serde(default)]
    pub(crate) sliding_layers: Option<String>,
    #[serde(default)]
    pub(crate) mtp_layers: Option<u32>,
}

/// Forward FLOPs of one token through a model, by part, summed over its
/// blocks (FLOPs; backward is twice each).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenFlops {
    /// q, k, v and output projections (or the latent ones).
    pub attention_proj: f64,
    /// Scores and weighted values.
    pub attention_core: f64,
    /// Dense MLPs (of the blocks without experts).
    pub dense_mlp: f64,
    /// Routers' logits.
    pub router: f64,
    /// The `k` routed experts a token visits.
    pub routed_experts: f64,
    /// Shared experts.
    pub shared_experts: f64,
    /// LM head (or the model's head).
    pub head: f64,
}

impl TokenFlops {
    /// Every part summed.
    pub fn total(&self) -> f64 {
        self.attention_proj
            + self.attention_core
            + self.dense_mlp
            + self.router
            + self.routed_experts
            + self.shared_experts
            + self.head
    }
}

/// The fields of a model beyond the dense block, resolved.
struct Extensions {
    head_dim: Option<u32>,
    mla: Option<Mla>,
    moe: Option<Moe>,
    sliding_window: Option<u32>,
    sliding_layers: LayerSet,
    mtp_layers: u32,
}

/// On-disk form of the catalog: `[[model]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    #[serde(default)]
    model: Vec<RawModel>,
}

impl RawModel {
    /// A model of `family` named `name` with every field unset (zero
    /// sizes, which [`RawModel::into_spec`] refuses until they are set).
    pub(crate) fn blank(name: &str, family: Family) -> RawModel {
        RawModel {
            name: name.to_string(),
            aliases: Vec::new(),
            family,
            layers: 0,
            hidden: 0,
            heads: 0,
            kv_heads: None,
            ffn: None,
            vocab: 0,
            seq_len: 0,
            image_size: None,
            patch_size: None,
            tied_embeddings: false,
            max_positions: None,
            head_dim: None,
            attention: None,
            q_lora_rank: None,
            kv_lora_rank: None,
            qk_head_dim: None,
            qk_rope_head_dim: None,
            v_head_dim: None,
            experts: None,
            top_k: None,
            expert_ffn: None,
            shared_experts: None,
            shared_expert_ffn: None,
            moe_layers: None,
            capacity_factor: None,
            routing_imbalance: None,
            sliding_window: None,
            sliding_layers: None,
            mtp_layers: None,
        }
    }

    /// Validates the fields and fills the defaults. Errors name
    /// `origin: field.<name>`.
    pub(crate) fn into_spec(self, origin: &str, field: &str) -> Result<ModelSpec, SpecError> {
        let who = if self.name.trim().is_empty() {
            "?".to_string()
        } else {
            self.name.clone()
        };
        let bad = |f: &str, msg: String| {
            SpecError::invalid(origin, format!("{field}.{f}"), format!("{who}: {msg}"))
        };
        if self.name.trim().is_empty() {
            return Err(SpecError::invalid(
                origin,
                format!("{field}.name"),
                "expected a non-empty name",
            ));
        }
        let kv_heads = self.check_shape(&bad)?;
        let ext = self.resolve_extensions(&bad)?;
        let ffn = match (&ext.moe, self.ffn) {
            // An MoE model without dense blocks needs no dense width.
            (Some(m), None) if m.layers == LayerSet::All => m.expert_ffn,
            (Some(m), Some(f)) if m.layers == LayerSet::All => {
                return Err(bad(
                    "ffn",
                    format!(
                        "{f} is the width of dense blocks, and every block has experts (moe_layers = all, expert_ffn {}); omit it",
                        m.expert_ffn
                    ),
                ))
            }
            _ => self.resolve_ffn(&bad)?,
        };
        let (image_size, patch_size) = self.resolve_image(&bad)?;
        if self.family == Family::Vit && self.tied_embeddings {
            return Err(bad(
                "tied_embeddings",
                "a vit has no word embedding to tie".into(),
            ));
        }
        let max_positions = self.resolve_max_positions(image_size, patch_size, &bad)?;
        for (i, a) in self.aliases.iter().enumerate() {
            if a.trim().is_empty() {
                return Err(SpecError::invalid(
                    origin,
                    format!("{field}.aliases[{i}]"),
                    format!("{who}: expected a non-empty alias"),
                ));
            }
        }
        Ok(ModelSpec {
            name: self.name,
            aliases: self.aliases,
            family: self.family,
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads,
            ffn,
            vocab: self.vocab,
            seq_len: self.seq_len,
            image_size,
            patch_size,
            tied_embeddings: self.tied_embeddings,
            max_positions,
            own_build: false,
            set_head_dim: ext.head_dim,
            mla: ext.mla,
            moe: ext.moe,
            sliding_window: ext.sliding_window,
            sliding_layers: ext.sliding_layers,
            mtp_layers: ext.mtp_layers,
        })
    }

    /// The fields beyond the dense block (head width, latent attention,
    /// experts, sliding window, multi-token prediction), checked: each
    /// applies to the rotary SwiGLU families only, and a field of a part
    /// the entry does not declare is refused rather than ignored.
    fn resolve_extensions(
        &self,
        bad: &impl Fn(&str, String) -> SpecError,
    ) -> Result<Extensions, SpecError> {
        let given = [
            ("head_dim", self.head_dim.is_some()),
            ("attention", self.attention.is_some()),
            ("experts", self.experts.is_some()),
            ("sliding_window", self.sliding_window.is_some()),
            ("mtp_layers", self.mtp_layers.is_some_and(|n| n > 0)),
        ];
        if !self.family.is_llama_like() {
            if let Some((f, _)) = given.iter().find(|x| x.1) {
                return Err(bad(
                    f,
                    format!(
                        "applies to the rotary SwiGLU families (llama, mistral), not `{}`",
                        self.family
                    ),
                ));
            }
        }
        if self.head_dim == Some(0) {
            return Err(bad("head_dim", "expected a positive integer, got 0".into()));
        }
        let mla = self.resolve_mla(bad)?;
        let moe = self.resolve_moe(bad)?;
        let sliding_layers = match &self.sliding_layers {
            None => LayerSet::All,
            Some(_) if self.sliding_window.is_none() => {
                return Err(bad(
                    "sliding_layers",
                    "names the blocks of a sliding_window, which is not given".into(),
                ))
            }
            Some(t) => LayerSet::parse(t).map_err(|e| bad("sliding_layers", e))?,
        };
        match self.sliding_window {
            Some(0) => return Err(bad("sliding_window", "expected a positive window".into())),
            Some(_) if sliding_layers.count(self.layers) == 0 => {
                return Err(bad(
                    "sliding_layers",
                    format!("selects none of the {} blocks", self.layers),
                ))
            }
            _ => {}
        }
        let mtp_layers = self.mtp_layers.unwrap_or(0);
        if mtp_layers > self.layers {
            return Err(bad(
                "mtp_layers",
                format!(
                    "expected at most the model's {} blocks of prediction depths, got {mtp_layers}",
                    self.layers
                ),
            ));
        }
        Ok(Extensions {
            head_dim: self.head_dim,
            mla,
            moe,
            sliding_window: self.sliding_window,
            sliding_layers,
            mtp_layers,
        })
    }

    /// Multi-head latent attention when `attention = "mla"` (its widths
    /// required), none when absent or `standard` (its widths refused).
    fn resolve_mla(
        &self,
        bad: &impl Fn(&str, String) -> SpecError,
    ) -> Result<Option<Mla>, SpecError> {
        let widths = [
            ("q_lora_rank", self.q_lora_rank),
            ("kv_lora_rank", self.kv_lora_rank),
            ("qk_head_dim", self.qk_head_dim),
            ("qk_rope_head_dim", self.qk_rope_head_dim),
            ("v_head_dim", self.v_head_dim),
        ];
        match self.attention.as_deref() {
            None | Some("standard") => {
                if let Some((f, _)) = widths.iter().find(|x| x.1.is_some()) {
                    return Err(bad(f, "applies to attention = \"mla\" only".into()));
                }
                Ok(None)
            }
            Some("mla") => {
                if self.head_dim.is_some() {
                    return Err(bad(
                        "head_dim",
                        "latent attention sets its widths with qk_head_dim, qk_rope_head_dim and v_head_dim".into(),
                    ));
                }
                let need = |f: &str, v: Option<u32>| {
                    v.ok_or_else(|| bad(f, "required with attention = \"mla\"".into()))
                };
                let m = Mla {
                    q_lora_rank: self.q_lora_rank,
                    kv_lora_rank: need("kv_lora_rank", self.kv_lora_rank)?,
                    qk_head_dim: need("qk_head_dim", self.qk_head_dim)?,
                    qk_rope_head_dim: need("qk_rope_head_dim", self.qk_rope_head_dim)?,
                    v_head_dim: need("v_head_dim", self.v_head_dim)?,
                };
                m.check(bad)?;
                Ok(Some(m))
            }
            Some(other) => Err(bad(
                "attention",
                format!("expected `standard` or `mla`, got `{other}`"),
            )),
        }
    }

    /// The mixture-of-experts MLP when `experts` is given (`top_k` and
    /// `expert_ffn` required), none otherwise (its other fields refused).
    fn resolve_moe(
        &self,
        bad: &impl Fn(&str, String) -> SpecError,
    ) -> Result<Option<Moe>, SpecError> {
        let Some(experts) = self.experts else {
            let rest = [
                ("top_k", self.top_k.is_some()),
                ("expert_ffn", self.expert_ffn.is_some()),
                ("shared_experts", self.shared_experts.is_some()),
                ("shared_expert_ffn", self.shared_expert_ffn.is_some()),
                ("moe_layers", self.moe_layers.is_some()),
                ("capacity_factor", self.capacity_factor.is_some()),
                ("routing_imbalance", self.routing_imbalance.is_some()),
            ];
            if let Some((f, _)) = rest.iter().find(|x| x.1) {
                return Err(bad(
                    f,
                    "applies to a model with experts (give `experts`)".into(),
                ));
            }
            return Ok(None);
        };
        let need = |f: &str, v: Option<u32>| {
            v.ok_or_else(|| bad(f, "required for a model with experts".into()))
        };
        let expert_ffn = need("expert_ffn", self.expert_ffn)?;
        let shared_experts = self.shared_experts.unwrap_or(0);
        let layers = match &self.moe_layers {
            None => LayerSet::All,
            Some(t) => LayerSet::parse(t).map_err(|e| bad("moe_layers", e))?,
        };
        let m = Moe {
            experts,
            top_k: need("top_k", self.top_k)?,
            expert_ffn,
            shared_experts,
            shared_expert_ffn: match self.shared_expert_ffn {
                Some(f) if shared_experts == 0 => {
                    return Err(bad(
                        "shared_expert_ffn",
                        format!("the width {f} of shared experts, but shared_experts is 0"),
                    ))
                }
                Some(f) => f,
                None if shared_experts > 0 => expert_ffn,
                None => 0,
            },
            layers,
            capacity_factor: self.capacity_factor,
            routing_imbalance: self.routing_imbalance,
        };
        m.check(self.layers, bad)?;
        Ok(Some(m))
    }

    /// Checks the sizes (positive, width a multiple of the heads) and
    /// returns the key/value heads (default: the heads), a divisor of the
    /// heads; `bad(field, message)` makes the error.
    fn check_shape(&self, bad: &impl Fn(&str, String) -> SpecError) -> Result<u32, SpecError> {
        for (f, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("vocab", self.vocab),
            ("seq_len", self.seq_len),
        ] {
            if v == 0 {
                return Err(bad(f, "expected a positive integer, got 0".into()));
            }
        }
        let own_width = self.head_dim.is_some() || self.attention.as_deref() == Some("mla");
        if !own_width && !self.hidden.is_multiple_of(self.heads) {
            return Err(bad(
                "heads",
                format!(
                    "hidden {} is not a multiple of heads {}",
                    self.hidden, self.heads
                ),
            ));
        }
        let kv_heads = self.kv_heads.unwrap_or(self.heads);
        if kv_heads == 0 || !self.heads.is_multiple_of(kv_heads) {
            return Err(bad(
                "kv_heads",
                format!(
                    "expected a positive divisor of heads {}, got {kv_heads}",
                    self.heads
                ),
            ));
        }
        Ok(kv_heads)
    }

    /// The MLP width: as given, else 4 x the width (required for the
    /// SwiGLU families).
    fn resolve_ffn(&self, bad: &impl Fn(&str, String) -> SpecError) -> Result<u32, SpecError> {
        Ok(match (self.ffn, self.family.is_llama_like()) {
            (Some(0), _) => return Err(bad("ffn", "expected a positive integer, got 0".into())),
            (Some(f), _) => f,
            (None, false) => self
                .hidden
                .checked_mul(4)
                .ok_or_else(|| bad("hidden", "too large".into()))?,
            (None, true) => {
                return Err(bad(
                    "ffn",
                    format!("required for family `{}` (SwiGLU width)", self.family),
                ))
            }
        })
    }

    /// Image and patch sides: both for a ViT (image a multiple of patch),
    /// neither for the other families.
    fn resolve_image(
        &self,
        bad: &impl Fn(&str, String) -> SpecError,
    ) -> Result<(Option<u32>, Option<u32>), SpecError> {
        Ok(match (self.family, self.image_size, self.patch_size) {
            (Family::Vit, Some(i), Some(p)) => {
                if p == 0 || i == 0 || !i.is_multiple_of(p) {
                    return Err(bad(
                        "image_size",
                        format!("expected positive image and patch sizes with image a multiple of patch, got {i} / {p}"),
                    ));
                }
                (Some(i), Some(p))
            }
            (Family::Vit, _, _) => {
                return Err(bad(
                    "image_size",
                    "family `vit` needs image_size and patch_size".into(),
                ));
            }
            (_, None, None) => (None, None),
            (f, _, _) => {
                return Err(bad(
                    "image_size",
                    format!("image_size / patch_size apply to vit only, not `{f}`"),
                ));
            }
        })
    }

    /// Rows of the learned position embedding: as given or the sequence
    /// length (GPT, BERT), one per token (ViT, from `image_size` /
    /// `patch_size`), 0 for rotary families.
    fn resolve_max_positions(
        &self,
        image_size: Option<u32>,
        patch_size: Option<u32>,
        bad: &impl Fn(&str, String) -> SpecError,
    ) -> Result<u32, SpecError> {
        Ok(match self.family {
            Family::Gpt | Family::Bert => match self.max_positions {
                Some(0) => {
                    return Err(bad(
                        "max_positions",
                        "expected a positive integer, got 0".into(),
                    ))
                }
                Some(p) => p,
                None => self.seq_len,
            },
            Family::Vit => {
                if self.max_positions.is_some() {
                    return Err(bad(
                        "max_positions",
                        "a vit has one position per token; omit it".into(),
                    ));
                }
                let side = image_size.unwrap_or(1) / patch_size.unwrap_or(1);
                side * side + 1
            }
            Family::Llama | Family::Mistral => match self.max_positions {
                None | Some(0) => 0,
                Some(_) => {
                    return Err(bad(
                        "max_positions",
                        format!("family `{}` uses rotary positions; omit it", self.family),
                    ))
                }
            },
        })
    }
}

impl ModelSpec {
    /// Whether this is one of the reference profiles' own builds (the
    /// Cephalo authors' DeepSpeed blocks: a name or alias starting with
    /// `deepspeed`, the keys of `../shared/reference-profiles`), whose
    /// measured implementation costs the calibration describes
    /// (`crate::perfmodel::coeffs`: the score-chain and per-token factors
    /// of their family); every other model runs its stack's per-op counts.
    pub fn is_reference_build(&self) -> bool {
        !self.own_build
            && std::iter::once(&self.name)
                .chain(&self.aliases)
                .any(|n| n.to_ascii_lowercase().starts_with("deepspeed"))
    }

    /// This model's shape as this project's trainer builds it (`exec`'s
    /// blocks, which `cephalo profile` measures): never a reference build,
    /// whatever its name.
    pub fn as_own_build(&self) -> ModelSpec {
        ModelSpec {
            own_build: true,
            ..self.clone()
        }
    }

    /// Width of one attention head's queries and keys: as the model sets
    /// it (under latent attention `d_nope + d_rope`), else `hidden / heads`.
    pub fn head_dim(&self) -> u32 {
        match &self.mla {
            Some(m) => m.qk_dim(),
            None => self.set_head_dim.unwrap_or(self.hidden / self.heads),
        }
    }

    /// Width of the query projection and of the attention output:
    /// `heads * head_dim` (= `hidden` unless the model sets its head width).
    pub fn q_dim(&self) -> u32 {
        self.heads * self.head_dim()
    }

    /// Width of the key (and of the value) projection: `kv_heads * head_dim`.
    pub fn kv_dim(&self) -> u32 {
        self.kv_heads * self.head_dim()
    }

    /// Weights of one block's attention that sit in matmuls: q and o
    /// `h * q_dim` each, k and v `h * kv_dim` each; the latent projections
    /// under multi-head latent attention ([`Mla::matmul_params`]).
    pub fn attention_matmul_params(&self) -> u64 {
        if let Some(m) = &self.mla {
            return m.matmul_params(self.hidden, self.heads);
        }
        let (h, q, kv) = (
            self.hidden as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
        );
        2 * h * q + 2 * h * kv
    }

    /// Weights of the dense MLP: `2*h*ffn` (GELU) or `3*h*ffn` (SwiGLU).
    pub fn dense_mlp_params(&self) -> u64 {
        let (h, f) = (self.hidden as u64, self.ffn as u64);
        if self.family.is_llama_like() {
            3 * h * f
        } else {
            2 * h * f
        }
    }

    /// The experts of the block the simulator prices: `Some` when every
    /// block has experts (the blocks are then all alike), `None` for a
    /// dense model, for one whose routing is the identity
    /// ([`Moe::is_identity`]: priced as its dense twin with `ffn` the
    /// expert width), or one that mixes dense and expert blocks (which
    /// [`ModelSpec::check_simulated`] refuses).
    pub fn uniform_moe(&self) -> Option<&Moe> {
        self.moe
            .as_ref()
            .filter(|m| m.layers == LayerSet::All && !m.is_identity())
    }

    /// Weights of one block's routed experts, when every block has experts
    /// ([`ModelSpec::uniform_moe`]): `E 3 h f_e` (0 otherwise). What expert
    /// parallelism splits.
    pub fn routed_expert_params(&self) -> u64 {
        self.uniform_moe()
            .map_or(0, |m| m.experts as u64 * m.expert_params(self.hidden))
    }

    /// Weights of one block that sit in the split matmuls (no biases, no
    /// norms, no router): [`ModelSpec::attention_matmul_params`] plus the
    /// dense MLP, or every routed and shared expert when every block has
    /// experts ([`ModelSpec::uniform_moe`]). Tensor parallelism splits
    /// these; the rest of the block is replicated.
    pub fn block_matmul_params(&self) -> u64 {
        let mlp = match self.uniform_moe() {
            Some(m) => m.mlp_params(self.hidden) - m.router_params(self.hidden),
            None => self.dense_mlp_params(),
        };
        self.attention_matmul_params() + mlp
    }

    /// The matmul weights one token meets in one block: attention, and the
    /// dense MLP or (every block with experts) the router, `k` routed and
    /// the shared experts. FLOPs per token are twice this (plus the
    /// attention core).
    pub fn block_active_matmul_params(&self) -> u64 {
        let mlp = match self.uniform_moe() {
            Some(m) => m.active_mlp_params(self.hidden),
            None => self.dense_mlp_params(),
        };
        self.attention_matmul_params() + mlp
    }

    /// The MLP width one token runs through in one block (the SwiGLU /
    /// GELU element-wise ops' width per token): `ffn`, or `k f_e + E_s f_s`
    /// when every block has experts (the routed part times the capacity
    /// padding, [`Moe::padding`]).
    pub fn mlp_width_per_token(&self) -> f64 {
        self.mlp_width_at_load(self.uniform_moe().map_or(1.0, |m| m.padding()))
    }

    /// [`ModelSpec::mlp_width_per_token`] on a rank whose experts compute
    /// `load` token copies per routed copy of the mean (the busiest rank of
    /// an expert-parallel group, [`crate::experts::Moe::busiest_rank_load`]);
    /// the dense width for a dense model.
    pub fn mlp_width_at_load(&self, load: f64) -> f64 {
        match self.uniform_moe() {
            Some(m) => {
                (m.top_k * m.expert_ffn) as f64 * load
                    + (m.shared_experts * m.shared_expert_ffn) as f64
            }
            None => self.ffn as f64,
        }
    }

    /// Parameters of one block as the simulator prices it: the expert
    /// block when every block has experts, the dense block otherwise
    /// ([`ModelSpec::dense_block_params`]).
    pub fn params_per_block(&self) -> u64 {
        match self.uniform_moe() {
            Some(_) => self.moe_block_params(),
            None => self.dense_block_params(),
        }
    }

    /// Parameters of one dense block. GPT/BERT/ViT: attention with biases
    /// (`4h^2 + 4h` when kv_heads = heads), MLP `2*h*ffn + ffn + h`, two
    /// LayerNorms `4h`. LLaMA/Mistral: q,o `h*q_dim`, k,v `h*kv_dim`, SwiGLU
    /// `3*h*ffn`, two RMSNorms `2h` (and the latent RMSNorms of multi-head
    /// latent attention).
    pub fn dense_block_params(&self) -> u64 {
        let (h, kv, f) = (self.hidden as u64, self.kv_dim() as u64, self.ffn as u64);
        let matmul = self.attention_matmul_params() + self.dense_mlp_params();
        if self.family.is_llama_like() {
            matmul + 2 * h + self.attention_norm_params()
        } else {
            let biases = (h + 2 * kv) + h + f + h;
            matmul + biases + 4 * h
        }
    }

    /// Norm weights inside the attention (the latent RMSNorms of
    /// multi-head latent attention; zero otherwise).
    fn attention_norm_params(&self) -> u64 {
        self.mla.as_ref().map_or(0, |m| {
            m.params(self.hidden, self.heads) - m.matmul_params(self.hidden, self.heads)
        })
    }

    /// Parameters of one mixture-of-experts block: attention, norms, and
    /// the MoE MLP in place of the dense one; a dense model's block
    /// otherwise.
    pub fn moe_block_params(&self) -> u64 {
        match &self.moe {
            Some(m) => {
                self.dense_block_params() - self.dense_mlp_params() + m.mlp_params(self.hidden)
            }
            None => self.dense_block_params(),
        }
    }

    /// This model with a measured routing imbalance
    /// ([`crate::experts::Moe::routing_imbalance`]); `Err` says why not: a
    /// dense model, or what [`crate::experts::Moe::check`] refuses (a value
    /// out of [`crate::physical::ROUTING_IMBALANCE`], or beside a capacity
    /// factor, which pads every expert whatever the routing).
    pub fn with_routing_imbalance(mut self, x: f64) -> Result<ModelSpec, String> {
        let (name, layers) = (self.name.clone(), self.layers);
        let Some(m) = self.moe.as_mut() else {
            return Err(format!(
                "{name} is a dense model: it routes no tokens to experts"
            ));
        };
        m.routing_imbalance = Some(x);
        m.check(layers, &|_, msg: String| format!("{name}: {msg}"))?;
        Ok(self)
    }

    /// Blocks with experts (0 for a dense model).
    pub fn moe_blocks(&self) -> u32 {
        self.moe.as_ref().map_or(0, |m| m.layers.count(self.layers))
    }

    /// Parameters of every block: dense blocks at
    /// [`ModelSpec::dense_block_params`], expert blocks at
    /// [`ModelSpec::moe_block_params`].
    pub fn blocks_params(&self) -> u64 {
        let moe = self.moe_blocks() as u64;
        (self.layers as u64 - moe) * self.dense_block_params() + moe * self.moe_block_params()
    }

    /// The parameters one token meets: every block's attention and norms,
    /// the dense MLPs, and in expert blocks `k` routed experts, the shared
    /// ones and the router; plus the embedding and head. Equal to
    /// [`ModelSpec::total_params`] for a dense model.
    pub fn active_params(&self) -> u64 {
        let idle = self.moe.as_ref().map_or(0, |m| {
            (m.experts - m.top_k) as u64 * m.expert_params(self.hidden)
        });
        self.total_params() - self.moe_blocks() as u64 * idle
    }

    /// Parameters of the multi-token-prediction depths, beyond
    /// [`ModelSpec::total_params`]: per depth one block (an expert block
    /// when the model's last block has experts), the `2h -> h` projection
    /// and three RMSNorms (DeepSeek-V3's `enorm`, `hnorm` and the shared
    /// head's norm); embedding and head are shared.
    pub fn mtp_params(&self) -> u64 {
        let h = self.hidden as u64;
        let last_has_experts = self
            .moe
            .as_ref()
            .is_some_and(|m| m.layers.contains(self.layers - 1));
        let block = if last_has_experts {
            self.moe_block_params()
        } else {
            self.dense_block_params()
        };
        self.mtp_layers as u64 * (block + 2 * h * h + 3 * h)
    }

    /// Whether the block model prices this model as it is: alike blocks
    /// (all dense, or all with experts, computed without expert
    /// parallelism), standard attention (of any head width), no sliding
    /// window shorter than `seq_len`, no prediction depths. `Err` names
    /// what it does not price yet.
    pub fn check_simulated(&self, seq_len: u32) -> Result<(), String> {
        let mut gaps = Vec::new();
        if let Some(m) = self.moe.as_ref().filter(|m| m.layers != LayerSet::All) {
            gaps.push(format!(
                "dense and mixture-of-experts blocks mixed ({} experts, top-{}, in {} of {} blocks)",
                m.experts,
                m.top_k,
                self.moe_blocks(),
                self.layers
            ));
        }
        if self.mla.is_some() {
            gaps.push("multi-head latent attention".to_string());
        }
        if let Some(w) = self.sliding_window.filter(|&w| w < seq_len) {
            gaps.push(format!(
                "a {w}-token sliding window shorter than the {seq_len}-token sequence"
            ));
        }
        if self.mtp_layers > 0 {
            gaps.push(format!(
                "multi-token prediction ({} depth{})",
                self.mtp_layers,
                if self.mtp_layers == 1 { "" } else { "s" }
            ));
        }
        if gaps.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{}: the simulator does not price {} yet; `cephalo list models` reports its total and active parameters and FLOPs per token",
                self.name,
                gaps.join(", ")
            ))
        }
    }

    /// Forward FLOPs per token at `seq_len` tokens per sample, summed over
    /// the blocks, part by part ([`TokenFlops`]). The attention core counts
    /// every key a query may see, without the causal mask (the convention
    /// of `6N + 12 L h s`, PaLM appendix B), capped by a sliding window.
    pub fn flops_per_token_fwd(&self, seq_len: u32) -> TokenFlops {
        let s = self.tokens_per_sample(seq_len) as f64;
        let layers = self.layers as f64;
        let moe = self.moe_blocks() as f64;
        // Keys per query summed over the blocks: the windowed blocks see
        // at most the window, the others the whole sample.
        let keys = match self.sliding_window {
            Some(w) => {
                let windowed = self.sliding_layers.count(self.layers);
                windowed as f64 * (w as f64).min(s) + (self.layers - windowed) as f64 * s
            }
            None => layers * s,
        };
        let per_pair = match &self.mla {
            Some(m) => m.core_flops_per_pair(self.heads),
            None => 4.0 * self.q_dim() as f64,
        };
        let (router, routed, shared) = match &self.moe {
            Some(m) => (
                2.0 * moe * m.router_params(self.hidden) as f64,
                2.0 * moe * (m.top_k as u64 * m.expert_params(self.hidden)) as f64,
                2.0 * moe * m.shared_params(self.hidden) as f64,
            ),
            None => (0.0, 0.0, 0.0),
        };
        let head = self.head_flops_fwd(seq_len) / s.max(1.0);
        TokenFlops {
            attention_proj: 2.0 * layers * self.attention_matmul_params() as f64,
            attention_core: per_pair * keys,
            dense_mlp: 2.0 * (layers - moe) * self.dense_mlp_params() as f64,
            router,
            routed_experts: routed,
            shared_experts: shared,
            head,
        }
    }

    /// Parameters of the embedding unit: word embedding (`vocab*h`), learned
    /// positions (`max_positions*h`, GPT/BERT), BERT token types (`2h`) and
    /// embedding LayerNorm (`2h`); ViT: the patch convolution
    /// (`3*p^2*h + h`), the class token (`h`) and one position per token.
    pub fn embedding_params(&self) -> u64 {
        let (h, v, p) = (
            self.hidden as u64,
            self.vocab as u64,
            self.max_positions as u64,
        );
        match self.family {
            Family::Gpt => v * h + p * h,
            Family::Llama | Family::Mistral => v * h,
            Family::Bert => v * h + p * h + 2 * h + 2 * h,
            Family::Vit => {
                let patch = self.patch_size.unwrap_or(16) as u64;
                VIT_CHANNELS * patch * patch * h + h + h + p * h
            }
        }
    }

    /// Parameters of the head unit: final norm plus LM head (`vocab*h`, zero
    /// when tied) for GPT/LLaMA/Mistral; the MLM head for BERT (dense `h*h+h`,
    /// LayerNorm `2h`, decoder `vocab*h` unless tied, decoder bias `vocab`);
    /// for ViT the final LayerNorm and the classifier (`h*classes + classes`).
    pub fn head_params(&self) -> u64 {
        let (h, v) = (self.hidden as u64, self.vocab as u64);
        let lm = if self.tied_embeddings { 0 } else { v * h };
        match self.family {
            Family::Gpt => 2 * h + lm,
            Family::Llama | Family::Mistral => h + lm,
            Family::Bert => h * h + h + 2 * h + lm + v,
            Family::Vit => 2 * h + h * v + v,
        }
    }

    /// All trainable parameters: embedding + `layers` blocks (every expert
    /// counted) + head; the multi-token-prediction depths are
    /// [`ModelSpec::mtp_params`].
    pub fn total_params(&self) -> u64 {
        self.embedding_params() + self.blocks_params() + self.head_params()
    }

    /// Tokens one sample carries: ViT `(image/patch)^2 + 1` (class token)
    /// regardless of `seq_len`; every other family `seq_len`.
    pub fn tokens_per_sample(&self, seq_len: u32) -> u32 {
        match (self.family, self.image_size, self.patch_size) {
            (Family::Vit, Some(i), Some(p)) if p > 0 => (i / p) * (i / p) + 1,
            _ => seq_len,
        }
    }

    /// FLOPs of one block forward for ONE sample of `seq_len` tokens:
    /// `2 * block_active_matmul_params * s` (projections and MLP, with the
    /// k,v projections at their grouped-query width; with experts the
    /// router, `k` routed and the shared experts) plus `4 * s^2 * q_dim` for the
    /// attention scores `QK^T` and the weighted values `AV` over all heads
    /// (grouped-query attention shares K/V but not these FLOPs).
    pub fn block_flops_fwd(&self, seq_len: u32) -> f64 {
        let s = self.tokens_per_sample(seq_len) as f64;
        2.0 * self.block_active_matmul_params() as f64 * s + self.score_flops_fwd(seq_len)
    }

    /// FLOPs of one block's attention scores `QK^T` and weighted values
    /// `AV` for ONE sample of `seq_len` tokens, over all heads, without
    /// the causal mask: `4 * s^2 * q_dim` (a causal kernel skips half).
    pub fn score_flops_fwd(&self, seq_len: u32) -> f64 {
        let s = self.tokens_per_sample(seq_len) as f64;
        4.0 * s * s * self.q_dim() as f64
    }

    /// Bytes per token one block keeps for its backward beyond a dense MLP
    /// of the width a token runs through: the routing of experts in every
    /// block ([`Moe::routing_bytes_per_token`], `e` bytes per element);
    /// zero otherwise.
    pub fn routing_bytes_per_token(&self, e: f64) -> f64 {
        self.uniform_moe()
            .map_or(0.0, |m| m.routing_bytes_per_token(self.hidden, e))
    }

    /// FLOPs of one block backward for one sample: 2x forward (gradients
    /// with respect to inputs and to weights).
    pub fn block_flops_bwd(&self, seq_len: u32) -> f64 {
        2.0 * self.block_flops_fwd(seq_len)
    }

    /// Bytes of one sample's logits in fp32 (`s * vocab * 4 B`), which the
    /// head and its loss hold whatever the training dtype.
    pub fn fp32_logits_bytes(&self, seq_len: u32) -> f64 {
        self.tokens_per_sample(seq_len) as f64 * self.vocab as f64 * 4.0
    }

    /// FLOPs of the head forward for one sample: LM head `2*s*h*vocab`;
    /// BERT MLM head `2*s*h^2 + 2*s*h*vocab`; ViT classifier on the class
    /// token only, `2*h*classes`. (Norms and the loss are not counted.)
    pub fn head_flops_fwd(&self, seq_len: u32) -> f64 {
        let s = self.tokens_per_sample(seq_len) as f64;
        let (h, v) = (self.hidden as f64, self.vocab as f64);
        match self.family {
            Family::Gpt | Family::Llama | Family::Mistral => 2.0 * s * h * v,
            Family::Bert => 2.0 * s * h * h + 2.0 * s * h * v,
            Family::Vit => 2.0 * h * v,
        }
    }

    /// FLOPs of the embedding forward for one sample: ViT's patch
    /// convolution is a matmul, `2 * patches * (3*p^2) * h`; a token
    /// embedding is a gather (0 FLOPs).
    pub fn embedding_flops_fwd(&self, seq_len: u32) -> f64 {
        match self.family {
            Family::Vit => {
                let patches = (self.tokens_per_sample(seq_len) - 1) as f64;
                let p = self.patch_size.unwrap_or(16) as f64;
                2.0 * patches * VIT_CHANNELS as f64 * p * p * self.hidden as f64
            }
            _ => 0.0,
        }
    }

    /// Useful FLOPs of one training sample, the MFU numerator: forward and
    /// backward (3x forward) of all blocks and the head, plus the ViT patch
    /// embedding's forward and weight gradient (2x forward; the image needs no
    /// gradient). Recomputation is NOT counted.
    pub fn model_flops_per_sample(&self, seq_len: u32) -> f64 {
        3.0 * (self.layers as f64 * self.block_flops_fwd(seq_len) + self.head_flops_fwd(seq_len))
            + 2.0 * self.embedding_flops_fwd(seq_len)
    }

    /// Bytes of weight traffic of one block forward (once per micro-batch,
    /// independent of its size): fp32 reads every parameter once (4 B);
    /// fp16/bf16 autocast reads the fp32 master (4 B), writes the half copy
    /// (2 B) and reads it in the matmul (2 B): 8 B per parameter.
    pub fn block_weight_bytes(&self, dtype: NumFormat) -> f64 {
        let per_param = match dtype {
            NumFormat::Fp32 => 4.0,
            NumFormat::Fp16 | NumFormat::Bf16 => 8.0,
        };
        self.params_per_block() as f64 * per_param
    }

    /// Bytes of activation traffic to/from GPU memory of one block forward for
    /// ONE sample (scales with the micro-batch size), with eager (unfused)
    /// kernels as in the reference measurements: every op reads its inputs
    /// and writes its output once in the compute dtype (matmuls, norms,
    /// activation functions, residual adds, dropout with a 1-byte mask), and
    /// the `heads x s x s` score matrix is written by `QK^T`, read and written
    /// by scale+mask, by softmax and (GPT/BERT) by dropout, and read by `AV`.
    /// LLaMA/Mistral: rotary on q,k; K/V expanded to all heads (`repeat_kv`)
    /// when grouped; softmax written in fp32 and cast back (HF eager).
    pub fn block_activation_io_bytes_fwd(&self, seq_len: u32, dtype: NumFormat) -> f64 {
        let e = dtype.bytes();
        let t = self.tokens_per_sample(seq_len) as f64;
        let (h, kv, f, a) = (
            self.hidden as f64,
            self.kv_dim() as f64,
            self.mlp_width_per_token(),
            self.heads as f64,
        );
        let scores = a * t * t;
        if self.family.is_llama_like() {
            let q = self.q_dim() as f64;
            let mut elems = 0.0;
            elems += 2.0 * t * h; // RMSNorm 1
            elems += t * h + t * (q + 2.0 * kv); // qkv projections
            elems += 2.0 * t * (q + kv); // rotary on q, k
            let k_width = if self.kv_heads < self.heads {
                elems += 2.0 * t * kv + 2.0 * t * q; // repeat_kv of k and v
                q
            } else {
                kv
            };
            elems += t * q + t * k_width; // QK^T reads
            elems += t * k_width + t * q; // AV reads v, writes context
            elems += t * q + t * h; // o projection
            elems += 3.0 * t * h; // residual add
            elems += 2.0 * t * h; // RMSNorm 2
            elems += 2.0 * t * h + 2.0 * t * f; // gate and up projections
            elems += 2.0 * t * f + 3.0 * t * f; // SiLU, gating multiply
            elems += t * f + t * h; // down projection
            elems += 3.0 * t * h; // residual add
                                  // scores: QK^T write, scale+mask r/w, AV read in the compute dtype;
                                  // softmax reads e and writes fp32, the cast back reads 4 writes e.
            let mut score_bytes = scores * e * 4.0 + scores * (e + 4.0);
            if e < 4.0 {
                score_bytes += scores * (4.0 + e);
            }
            elems * e + score_bytes
        } else {
            let drop = self.family.has_dropout();
            let mut elems = 0.0;
            let mut mask_bytes = 0.0;
            elems += 2.0 * t * h; // LayerNorm 1
            elems += t * h + t * (h + 2.0 * kv); // qkv projections
            elems += t * h + t * kv; // QK^T reads q, k
            elems += t * kv + t * h; // AV reads v, writes context
            elems += 2.0 * t * h; // o projection
            elems += 3.0 * t * h; // residual add
            elems += 2.0 * t * h; // LayerNorm 2
            elems += t * h + t * f; // fc1
            elems += 2.0 * t * f; // GELU
            elems += t * f + t * h; // fc2
            elems += 3.0 * t * h; // residual add
            let mut score_passes = 1.0 + 2.0 + 2.0 + 1.0; // QK^T w, scale+mask, softmax, AV r
            if drop {
                elems += 2.0 * 2.0 * t * h; // two hidden dropouts
                mask_bytes += 2.0 * t * h;
                score_passes += 2.0; // attention dropout
                mask_bytes += scores;
            }
            (elems + score_passes * scores) * e + mask_bytes
        }
    }

    /// The element-wise part of [`ModelSpec::block_activation_io_bytes_fwd`]
    /// for ONE sample: the traffic of the cheap ops a selective recompute
    /// reruns (norms, residual adds, activation functions, dropout with its
    /// 1-byte masks, rotary, the GQA `repeat_kv` copies), without the
    /// matmuls' reads and writes and without the score chain.
    pub fn block_pointwise_io_bytes_fwd(&self, seq_len: u32, dtype: NumFormat) -> f64 {
        let e = dtype.bytes();
        let t = self.tokens_per_sample(seq_len) as f64;
        let (h, kv, f) = (
            self.hidden as f64,
            self.kv_dim() as f64,
            self.mlp_width_per_token(),
        );
        if self.family.is_llama_like() {
            let q = self.q_dim() as f64;
            let mut elems = 2.0 * t * h; // RMSNorm 1
            elems += 2.0 * t * (q + kv); // rotary on q, k
            if self.kv_heads < self.heads {
                elems += 2.0 * t * kv + 2.0 * t * q; // repeat_kv of k and v
            }
            elems += 3.0 * t * h; // residual add
            elems += 2.0 * t * h; // RMSNorm 2
            elems += 2.0 * t * f + 3.0 * t * f; // SiLU, gating multiply
            elems += 3.0 * t * h; // residual add
            elems * e
        } else {
            let mut elems = 2.0 * t * h + 3.0 * t * h + 2.0 * t * h + 2.0 * t * f + 3.0 * t * h;
            let mut mask_bytes = 0.0;
            if self.family.has_dropout() {
                elems += 2.0 * 2.0 * t * h;
                mask_bytes += 2.0 * t * h;
            }
            elems * e + mask_bytes
        }
    }

    /// Bytes moved to/from GPU memory by one block forward for ONE sample:
    /// [`ModelSpec::block_weight_bytes`] (the weights once) plus
    /// [`ModelSpec::block_activation_io_bytes_fwd`]. For a micro-batch of `m`
    /// samples use `weight + m * activation`, not `m *` this.
    pub fn block_bytes_fwd(&self, seq_len: u32, dtype: NumFormat) -> f64 {
        self.block_weight_bytes(dtype) + self.block_activation_io_bytes_fwd(seq_len, dtype)
    }

    /// Bytes one block saves for its backward, for ONE sample (Korthikanti
    /// et al. 2022, "Reducing Activation Recomputation in Large Transformer
    /// Models", section 4.1, generalised to any ffn / kv width).
    ///
    /// GPT/BERT (dropout): `e*(s*(6h + 2kv + 2ffn) + 2*a*s^2) + (2*s*h + a*s^2)`,
    /// where `e` is the dtype's bytes and the last term the 1-byte dropout
    /// masks; with kv = h, ffn = 4h and e = 2 this is Korthikanti's
    /// `s*h*(34 + 5*a*s/h)`. fp32 doubles the values but not the masks:
    /// `s*h*(66 + 9*a*s/h)`. ViT (no dropout): no masks and one `a*s^2`
    /// matrix. LLaMA/Mistral (eager HF): `e*s*(8h + 4ffn)` (norm inputs, q,
    /// k and v expanded to all heads, SwiGLU's gate, up, SiLU and product)
    /// plus the softmax output in fp32 (`4*a*s^2`) and, below fp32, its
    /// cast copy (`e*a*s^2`).
    pub fn activation_bytes_per_sample(&self, seq_len: u32, dtype: NumFormat) -> f64 {
        let e = dtype.bytes();
        let s = self.tokens_per_sample(seq_len) as f64;
        let (h, kv, f, a) = (
            self.hidden as f64,
            self.kv_dim() as f64,
            self.mlp_width_per_token(),
            self.heads as f64,
        );
        let scores = a * s * s;
        if self.family.is_llama_like() {
            let cast = if e < 4.0 { e } else { 0.0 };
            let q = self.q_dim() as f64;
            e * s * (4.0 * h + 4.0 * q + 4.0 * f)
                + scores * (4.0 + cast)
                + self.routing_bytes_per_token(e) * s
        } else if self.family.has_dropout() {
            e * (s * (6.0 * h + 2.0 * kv + 2.0 * f) + 2.0 * scores) + (2.0 * s * h + scores)
        } else {
            e * (s * (6.0 * h + 2.0 * kv + 2.0 * f) + scores)
        }
    }
}

/// Normalises a model name for lookup: lower case, `-`, `_` and spaces
/// removed (`.` kept: `gpt-1.3b` -> `gpt1.3b`).
pub fn normalize_model_name(name: &str) -> String {
    name.trim()
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .collect()
}

/// A validated set of models with name lookup.
#[derive(Debug, Clone)]
pub struct ModelCatalog {
    models: Vec<ModelSpec>,
    index: NameIndex,
}

impl ModelCatalog {
    /// The built-in catalog (`profiles/models.toml`), parsed once.
    ///
    /// Panics only if the shipped file is broken, which a unit test guards.
    pub fn builtin() -> &'static ModelCatalog {
        static CATALOG: OnceLock<ModelCatalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            ModelCatalog::from_toml(BUILTIN_MODELS_TOML, "profiles/models.toml (built in)")
                .unwrap_or_else(|e| panic!("built-in model catalog is broken: {e}"))
        })
    }

    /// Parses and validates catalog text (`[[model]]` tables, format of
    /// `profiles/models.toml`). `origin` names the file for errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<ModelCatalog, SpecError> {
        let file: ModelFile = toml::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
        if file.model.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "model",
                "expected at least one [[model]] table",
            ));
        }
        let models = file
            .model
            .into_iter()
            .enumerate()
            .map(|(i, m)| m.into_spec(origin, &format!("model[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        ModelCatalog::from_specs(models, origin)
    }

    /// Indexes validated specs into a catalog (order is kept; names and
    /// aliases must be unique, as in [`ModelCatalog::from_toml`]).
    pub fn from_specs(models: Vec<ModelSpec>, origin: &str) -> Result<ModelCatalog, SpecError> {
        let entries: Vec<(String, &str, &[String])> = models
            .iter()
            .enumerate()
            .map(|(i, m)| (format!("model[{i}]"), m.name.as_str(), m.aliases.as_slice()))
            .collect();
        let index = NameIndex::build(&entries, normalize_model_name, origin, "model")?;
        Ok(ModelCatalog { models, index })
    }

    /// The model `name` refers to: exact name or alias ignoring case first,
    /// then the canonical names, then the aliases, with `-`, `_` and spaces
    /// ignored. (`gpt_2.7b` is the legacy HuggingFace model's alias;
    /// `gpt-2.7b` and `GPT 2.7B` are the DeepSpeed model.)
    pub fn get(&self, name: &str) -> Option<&ModelSpec> {
        self.index
            .find(name, normalize_model_name)
            .map(|i| &self.models[i])
    }

    /// Like [`ModelCatalog::get`], but an unknown name is a
    /// [`SpecError::UnknownModel`] listing the canonical names.
    pub fn lookup(&self, name: &str, origin: &str) -> Result<&ModelSpec, SpecError> {
        self.get(name).ok_or_else(|| SpecError::UnknownModel {
            origin: origin.to_string(),
            name: name.to_string(),
            known: self.names(),
        })
    }

    /// This catalog with `user`'s models in front: a user model replaces
    /// every entry here that shares one of its names or aliases (after
    /// normalisation), so `--model-catalog` can redefine a built-in model.
    /// Returns the catalog and the canonical names of the replaced entries.
    pub fn with_user(
        &self,
        user: &ModelCatalog,
        origin: &str,
    ) -> Result<(ModelCatalog, Vec<String>), SpecError> {
        let name = |m: &ModelSpec| m.name.clone();
        let (models, replaced) =
            crate::gpu::user_first(&user.models, &self.models, name, |m: &ModelSpec| {
                std::iter::once(&m.name)
                    .chain(&m.aliases)
                    .map(|k| normalize_model_name(k))
                    .collect()
            });
        Ok((ModelCatalog::from_specs(models, origin)?, replaced))
    }

    /// All models, in catalog order.
    pub fn all(&self) -> &[ModelSpec] {
        &self.models
    }

    /// Comma-separated canonical names, in catalog order.
    pub fn names(&self) -> String {
        self.models
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Test-only access to `../shared/reference-profiles` (the only file access
/// in this crate, compiled for tests alone).
#[cfg(test)]
pub(crate) mod testdata {
    /// Text of a reference file. `None` when the directory is absent: a
    /// note is printed and the calling test returns early, except under
    /// `CI=true`, where a missing reference directory fails the test.
    pub(crate) fn reference(file: &str) -> Option<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/reference-profiles");
        let path = dir.join(file);
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) => {
                let why = format!("cannot read {}: {e}", path.display());
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("{why} (CI=true: the reference profiles must be present)");
                }
                eprintln!("skipping: {why}");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn model(name: &str) -> &'static ModelSpec {
        ModelCatalog::builtin()
            .get(name)
            .unwrap_or_else(|| panic!("no model {name}"))
    }

    /// Every model key the reference README and files name.
    const REFERENCE_KEYS: [&str; 33] = [
        "deepspeedgpt_test",
        "deepspeedgpt_1.3b",
        "deepspeedgpt_2.7b",
        "deepspeedgpt_6.7b",
        "deepspeedgpt_175b",
        "deepspeedllama_tiny",
        "deepspeedllama_3b",
        "deepspeedllama_7b",
        "deepspeedllama_13b",
        "deepspeedllama_33b",
        "deepspeedllama_65b",
        "deepspeedllamav2_tiny",
        "deepspeedllamav2_3b",
        "deepspeedllamav2_7b",
        "deepspeedllamav2_13b",
        "deepspeedbert_base",
        "deepspeedbert_large",
        "deepspeedbert_xlarge",
        "deepspeedbert_1b",
        "deepspeedvit_default",
        "deepspeedvit_g_small",
        "deepspeedvit_g",
        "deepspeedvit_h",
        "deepspeedvit_e",
        "deepspeedvit_e_toy",
        "deepspeedvit_1b",
        "deepspeedmistral_7b",
        "gpt_1b",
        "gpt_1.3b",
        "gpt_2.7b",
        "bert_large",
        "bert_xlarge",
        "vit_e",
    ];

    #[test]
    fn builtin_parses_and_has_required_models() {
        let c = ModelCatalog::builtin();
        for key in REFERENCE_KEYS.iter().chain(&["vit_g", "mistral_7b"]) {
            assert!(c.get(key).is_some(), "reference key {key} does not resolve");
        }
        for name in [
            "gpt-2.7b",
            "llama-7b",
            "llama2-7b",
            "llama2-13b",
            "llama2-70b",
            "llama3-8b",
            "llama3-70b",
            "bert-xlarge",
            "vit-e",
            "mistral-7b",
        ] {
            assert_eq!(model(name).name, name);
        }
        // every reference key names a different model
        let mut seen = std::collections::BTreeSet::new();
        for key in REFERENCE_KEYS.iter().chain(&["vit_g", "mistral_7b"]) {
            assert!(
                seen.insert(&c.get(key).unwrap().name),
                "{key} shares a model"
            );
        }
    }

    /// Public names mean the released shapes; the paper authors' builds of
    /// the same sizes keep their reference keys (49,152 vocabulary, 512 tokens).
    #[test]
    fn public_names_mean_public_shapes() {
        for (public, vocab, seq, params, build) in [
            (
                "Llama-2-7B",
                32000,
                4096,
                6_738_415_616,
                "deepspeedllamav2_7b",
            ),
            ("llama-7b", 32000, 2048, 6_738_415_616, "deepspeedllama_7b"),
            (
                "mistral-7b",
                32000,
                8192,
                7_241_732_096,
                "deepspeedmistral_7b",
            ),
            ("bert-large", 30522, 512, 335_174_458, "deepspeedbert_large"),
        ] {
            let m = model(public);
            assert_eq!(
                (m.vocab, m.seq_len, m.total_params()),
                (vocab, seq, params),
                "{public}"
            );
            let b = model(build);
            assert_eq!((b.vocab, b.seq_len, b.name.as_str()), (49152, 512, build));
        }
    }

    #[test]
    fn lookup_tiers() {
        assert_eq!(model("deepspeedgpt_2.7b").name, "gpt-2.7b");
        assert_eq!(model("gpt-2.7b").name, "gpt-2.7b");
        assert_eq!(model("GPT 2.7B").name, "gpt-2.7b");
        assert_eq!(model("gpt_2.7b").name, "gpt-2.7b-hf");
        assert_eq!(model("GPT_2.7B").name, "gpt-2.7b-hf");
        assert_eq!(model("DeepSpeedLlama-7B").name, "deepspeedllama_7b");
        assert_eq!(model("llama-2-13b").name, "llama2-13b");
        assert_eq!(model("meta-llama/Llama-2-7b-hf").name, "llama2-7b");
        assert_eq!(model("Llama_3_8B").name, "llama3-8b");
        assert_eq!(model("vit_e").name, "vit-e-hf");
        assert_eq!(model("vit e").name, "vit-e");
    }

    #[test]
    fn all_reference_file_keys_resolve() {
        let c = ModelCatalog::builtin();
        for file in ["model_latencies.json", "model_stats.json"] {
            let Some(text) = testdata::reference(file) else {
                return;
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            for key in v.as_object().unwrap().keys() {
                assert!(
                    c.get(key).is_some(),
                    "{file}: model `{key}` does not resolve"
                );
            }
        }
        let Some(text) = testdata::reference("model_memory.json") else {
            return;
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        for by_model in v.as_object().unwrap().values() {
            for key in by_model.as_object().unwrap().keys() {
                assert!(
                    c.get(key).is_some(),
                    "model_memory.json: model `{key}` does not resolve"
                );
            }
        }
    }

    #[test]
    fn params_match_model_stats() {
        let Some(text) = testdata::reference("model_stats.json") else {
            return;
        };
        let stats: Value = serde_json::from_str(&text).unwrap();
        let stats = stats.as_object().unwrap();
        assert!(stats.len() >= 20);
        for (key, s) in stats {
            let m = model(key);
            let num = |f: &str| s[f].as_u64().unwrap_or_else(|| panic!("{key}.{f}"));
            assert_eq!(m.hidden as u64, num("hidden_size"), "{key} hidden");
            assert_eq!(m.layers as u64, num("num_layers"), "{key} layers");
            assert_eq!(
                m.params_per_block(),
                num("parameters_per_layer"),
                "{key} params per block"
            );
            let total = num("total_parameters") as f64;
            let rel = (m.total_params() as f64 - total).abs() / total;
            assert!(
                rel < 0.02,
                "{key}: total {} vs {total} ({:.3}%)",
                m.total_params(),
                rel * 100.0
            );
            if m.family != Family::Vit {
                // non-ViT shapes are reconstructed exactly
                assert_eq!(m.total_params(), total as u64, "{key} total");
            }
        }
    }

    #[test]
    fn params_match_model_memory_where_the_build_is_known() {
        // mistral's only parameter count is in model_memory; it is exact.
        let Some(text) = testdata::reference("model_memory.json") else {
            return;
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        let p = v["aws-16gpu"]["deepspeedmistral_7b"]["parameters"]
            .as_u64()
            .unwrap();
        assert_eq!(model("deepspeedmistral_7b").total_params(), p);
        // the 1824-wide models are within 2% (different position / class counts)
        for (cluster, key) in [
            ("trpro", "deepspeedbert_1b"),
            ("trpro", "deepspeedvit_1b"),
            ("paper", "gpt_1b"),
        ] {
            let p = v[cluster][key]["parameters"].as_f64().unwrap();
            let rel = (model(key).total_params() as f64 - p).abs() / p;
            assert!(rel < 0.02, "{key}: {} vs {p}", model(key).total_params());
        }
    }

    #[test]
    fn public_model_sizes() {
        let b = |name: &str| model(name).total_params() as f64 / 1e9;
        assert!(
            (b("llama2-70b") - 68.98).abs() < 0.05,
            "{}",
            b("llama2-70b")
        );
        assert!((b("llama3-8b") - 8.03).abs() < 0.01, "{}", b("llama3-8b"));
        assert!(
            (b("llama3-70b") - 70.55).abs() < 0.05,
            "{}",
            b("llama3-70b")
        );
        assert!(b("gpt-test") < 0.1);
    }

    #[test]
    fn flops_sanity() {
        let m = model("gpt-2.7b");
        let s = 512.0;
        let expect = 2.0 * 78_643_200.0 * s + 4.0 * s * s * 2560.0;
        assert_eq!(m.block_flops_fwd(512), expect);
        assert!((m.block_flops_fwd(512) / (2.0 * 78.7e6 * s) - 1.0).abs() < 0.04);
        assert_eq!(m.block_flops_bwd(512), 2.0 * expect);
        assert_eq!(m.head_flops_fwd(512), 2.0 * s * 2560.0 * 49152.0);
        assert_eq!(m.embedding_flops_fwd(512), 0.0);
        // MFU numerator ~ 6 * (matmul params incl. LM head) * tokens + attention
        let matmul = 32.0 * 78_643_200.0 + 49152.0 * 2560.0;
        let approx = 6.0 * matmul * s + 3.0 * 32.0 * 4.0 * s * s * 2560.0;
        let got = m.model_flops_per_sample(512);
        assert!((got / approx - 1.0).abs() < 0.02, "{got} vs {approx}");
        // FLOPs grow with sequence length and with model size
        assert!(m.block_flops_fwd(1024) > 2.0 * m.block_flops_fwd(512));
        assert!(model("gpt-6.7b").block_flops_fwd(512) > m.block_flops_fwd(512));
    }

    #[test]
    fn grouped_query_attention_shapes() {
        let m = model("mistral-7b");
        assert_eq!(m.kv_dim(), 1024);
        let h = 4096.0;
        let s = 512.0;
        let matmul = 2.0 * h * h + 2.0 * h * 1024.0 + 3.0 * h * 14336.0;
        assert_eq!(m.block_matmul_params() as f64, matmul);
        assert_eq!(m.block_flops_fwd(512), 2.0 * matmul * s + 4.0 * s * s * h);
        assert!(m.params_per_block() < model("llama3-8b").params_per_block() + 1);
    }

    #[test]
    fn vit_tokens() {
        let m = model("vit-e");
        assert_eq!(m.tokens_per_sample(512), 577);
        assert_eq!(m.tokens_per_sample(4096), 577);
        assert_eq!(m.max_positions, 577);
        assert_eq!(m.block_flops_fwd(512), m.block_flops_fwd(577));
        let patch = 2.0 * 576.0 * 768.0 * 1792.0;
        assert_eq!(m.embedding_flops_fwd(512), patch);
        assert_eq!(m.head_flops_fwd(512), 2.0 * 1792.0 * 10.0);
        assert_eq!(model("bert-large").tokens_per_sample(128), 128);
    }

    #[test]
    fn activation_bytes_follow_korthikanti() {
        let m = model("gpt-2.7b");
        let (s, h, a) = (512.0, 2560.0, 32.0);
        let k16 = s * h * (34.0 + 5.0 * a * s / h);
        assert_eq!(m.activation_bytes_per_sample(512, NumFormat::Fp16), k16);
        assert_eq!(m.activation_bytes_per_sample(512, NumFormat::Bf16), k16);
        let k32 = s * h * (66.0 + 9.0 * a * s / h);
        assert_eq!(m.activation_bytes_per_sample(512, NumFormat::Fp32), k32);
        // llama: 2*s*(8h + 4f) + 6*a*s^2 in fp16
        let l = model("llama-7b");
        let (h, f) = (4096.0, 11008.0);
        assert_eq!(
            l.activation_bytes_per_sample(512, NumFormat::Fp16),
            2.0 * s * (8.0 * h + 4.0 * f) + 6.0 * a * s * s
        );
        for m in ModelCatalog::builtin().all() {
            let b16 = m.activation_bytes_per_sample(512, NumFormat::Fp16);
            let b32 = m.activation_bytes_per_sample(512, NumFormat::Fp32);
            assert!(b16 > 0.0 && b32 > b16 && b32 <= 2.0 * b16, "{}", m.name);
            assert!(
                m.activation_bytes_per_sample(1024, NumFormat::Fp16) > 2.0 * b16
                    || m.family == Family::Vit,
                "{}",
                m.name
            );
        }
    }

    #[test]
    fn bytes_moved() {
        let m = model("gpt-2.7b");
        let w16 = m.block_weight_bytes(NumFormat::Fp16);
        assert_eq!(w16, 8.0 * 78_676_480.0);
        assert_eq!(m.block_weight_bytes(NumFormat::Fp32), 4.0 * 78_676_480.0);
        let act = m.block_activation_io_bytes_fwd(512, NumFormat::Fp16);
        assert_eq!(m.block_bytes_fwd(512, NumFormat::Fp16), w16 + act);
        // activations: at least the score matrix written and read, at most a few
        // dozen passes over the hidden state
        let (s, h, a) = (512.0, 2560.0, 32.0);
        assert!(act > 2.0 * 2.0 * a * s * s);
        assert!(act < 2.0 * (60.0 * s * h + 10.0 * a * s * s));
        assert!(m.block_activation_io_bytes_fwd(512, NumFormat::Fp32) > act);
        for m in ModelCatalog::builtin().all() {
            for d in NumFormat::ALL {
                let b = m.block_activation_io_bytes_fwd(m.seq_len, d);
                assert!(b.is_finite() && b > 0.0, "{} {d}", m.name);
                // arithmetic intensity of a block is between 1 and 10^4 FLOP/byte
                let ai = m.block_flops_fwd(m.seq_len) / m.block_bytes_fwd(m.seq_len, d);
                assert!((1.0..1e4).contains(&ai), "{} {d}: {ai}", m.name);
            }
        }
    }

    #[test]
    fn gpt_test_is_small_enough_for_cpu() {
        let m = model("deepspeedgpt_test");
        assert_eq!((m.hidden, m.layers), (512, 12));
        assert_eq!(m.params_per_block(), 3_152_384);
        assert!(m.model_flops_per_sample(128) < 1e11);
    }

    #[test]
    fn unknown_model_is_an_error_listing_known_names() {
        let c = ModelCatalog::builtin();
        assert!(c.get("gpt-9000b").is_none());
        match c.lookup("gpt-9000b", "--model") {
            Err(SpecError::UnknownModel {
                origin,
                name,
                known,
            }) => {
                assert_eq!((origin.as_str(), name.as_str()), ("--model", "gpt-9000b"));
                assert!(known.contains("gpt-2.7b") && known.contains("llama3-70b"));
            }
            other => panic!("expected UnknownModel, got {other:?}"),
        }
    }

    const ONE: &str = r#"
[[model]]
name = "m"
family = "FAMILY"
layers = 2
hidden = HIDDEN
heads = 4
vocab = 100
seq_len = 16
"#;

    fn one(family: &str, hidden: &str, extra: &str) -> Result<ModelCatalog, SpecError> {
        ModelCatalog::from_toml(
            &(ONE.replace("FAMILY", family).replace("HIDDEN", hidden) + extra),
            "m.toml",
        )
    }

    fn field_of(r: Result<ModelCatalog, SpecError>) -> String {
        match r {
            Err(SpecError::Invalid { field, .. }) => field,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn from_toml_defaults_and_validation() {
        let c = one("gpt", "64", "").unwrap();
        let m = c.get("M").unwrap();
        assert_eq!((m.ffn, m.kv_heads, m.max_positions), (256, 4, 16));
        assert_eq!(m.params_per_block(), 12 * 64 * 64 + 13 * 64);
        assert_eq!(field_of(one("gpt", "0", "")), "model[0].hidden");
        assert_eq!(field_of(one("gpt", "66", "")), "model[0].heads");
        assert_eq!(field_of(one("llama", "64", "")), "model[0].ffn");
        assert!(one("llama", "64", "ffn = 172\nkv_heads = 2\n").is_ok());
        assert_eq!(
            field_of(one("llama", "64", "ffn = 172\nkv_heads = 3\n")),
            "model[0].kv_heads"
        );
        assert_eq!(field_of(one("vit", "64", "")), "model[0].image_size");
        assert_eq!(
            field_of(one("vit", "64", "image_size = 30\npatch_size = 16\n")),
            "model[0].image_size"
        );
        assert!(one("vit", "64", "image_size = 32\npatch_size = 16\n").is_ok());
        assert_eq!(
            field_of(one("gpt", "64", "image_size = 32\npatch_size = 16\n")),
            "model[0].image_size"
        );
        assert!(matches!(
            one("gpt", "-64", ""),
            Err(SpecError::Parse { .. })
        ));
        assert!(matches!(
            one("gpt", "64", "hiden = 3\n"),
            Err(SpecError::Parse { .. })
        ));
        assert!(matches!(
            one("gpt2", "64", ""),
            Err(SpecError::Parse { .. })
        ));
        let dup = ONE
            .replace("FAMILY", "gpt")
            .replace("HIDDEN", "64")
            .repeat(2);
        assert_eq!(
            field_of(ModelCatalog::from_toml(&dup, "m.toml")),
            "model[1].name"
        );
    }
}
