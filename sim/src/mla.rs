//! Multi-head latent attention (DeepSeek-V2/V3; REAL-SYSTEMS-3 §1.9): the
//! queries and the keys/values pass through low-rank latents, and training
//! expands the latent to per-head keys of width `d_nope + d_rope` and values
//! of width `d_v`.
//!
//! Projections (DeepSeek-V3 `inference/model.py`, Megatron
//! `multi_latent_attention.py`), `a` heads:
//!
//! | projection | shape |
//! |---|---|
//! | `wq_a` (+ RMSNorm) | `h -> r_q` (absent when `q_lora_rank` is null: `wq` is `h -> a (d_nope + d_rope)`) |
//! | `wq_b` | `r_q -> a (d_nope + d_rope)` |
//! | `wkv_a` (+ RMSNorm on `r_kv`) | `h -> r_kv + d_rope` |
//! | `wkv_b` | `r_kv -> a (d_nope + d_v)` |
//! | `wo` | `a d_v -> h` |
//!
//! The attention core then costs `2 a (d_qk + d_v)` FLOPs per (query, key)
//! pair, with `d_qk = d_nope + d_rope`.

use serde::{Deserialize, Serialize};

/// The shapes of multi-head latent attention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mla {
    /// Rank of the query latent `r_q` (`None`: queries projected directly,
    /// as DeepSeek-V2-Lite).
    pub q_lora_rank: Option<u32>,
    /// Rank of the key/value latent `r_kv`.
    pub kv_lora_rank: u32,
    /// Per-head query/key width without rotary positions, `d_nope`
    /// (Megatron's `qk_head_dim`; Hugging Face's `qk_nope_head_dim`).
    pub qk_head_dim: u32,
    /// Per-head rotary query/key width `d_rope` (Megatron's
    /// `qk_pos_emb_head_dim`; Hugging Face's `qk_rope_head_dim`).
    pub qk_rope_head_dim: u32,
    /// Per-head value width `d_v`.
    pub v_head_dim: u32,
}

impl Mla {
    /// Per-head query and key width `d_nope + d_rope`.
    pub fn qk_dim(&self) -> u32 {
        self.qk_head_dim + self.qk_rope_head_dim
    }

    /// Weights of the attention of one block with `heads` heads on width
    /// `hidden`: the projections of the table and the two latent RMSNorms.
    pub fn params(&self, hidden: u32, heads: u32) -> u64 {
        let (h, a) = (hidden as u64, heads as u64);
        let (qk, v) = (self.qk_dim() as u64, self.v_head_dim as u64);
        let (r_kv, rope) = (self.kv_lora_rank as u64, self.qk_rope_head_dim as u64);
        let q = match self.q_lora_rank {
            Some(r) => h * r as u64 + r as u64 + r as u64 * a * qk,
            None => h * a * qk,
        };
        let kv = h * (r_kv + rope) + r_kv + r_kv * a * (self.qk_head_dim as u64 + v);
        q + kv + a * v * h
    }

    /// Weights of [`Mla::params`] that sit in matmuls (the norms left out).
    pub fn matmul_params(&self, hidden: u32, heads: u32) -> u64 {
        let norms = self.q_lora_rank.unwrap_or(0) as u64 + self.kv_lora_rank as u64;
        self.params(hidden, heads) - norms
    }

    /// Attention-core FLOPs per (query, key) pair over all heads:
    /// `2 a (d_qk + d_v)` (scores and weighted values).
    pub fn core_flops_per_pair(&self, heads: u32) -> f64 {
        2.0 * heads as f64 * (self.qk_dim() + self.v_head_dim) as f64
    }

    /// Checks the widths; `bad(field, message)` makes the error.
    pub fn check<E>(&self, bad: &impl Fn(&str, String) -> E) -> Result<(), E> {
        for (f, v) in [
            ("kv_lora_rank", self.kv_lora_rank),
            ("qk_head_dim", self.qk_head_dim),
            ("v_head_dim", self.v_head_dim),
            ("q_lora_rank", self.q_lora_rank.unwrap_or(1)),
        ] {
            if v == 0 {
                return Err(bad(f, "expected a positive integer, got 0".into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DeepSeek-V3's attention: 187.1M weights per block (REAL-SYSTEMS-3
    /// §1.9), counted by hand here from its config.
    #[test]
    fn deepseek_v3_attention_has_its_weight_count() {
        let m = Mla {
            q_lora_rank: Some(1536),
            kv_lora_rank: 512,
            qk_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
        };
        let h = 7168u64;
        let by_hand = h * 1536 + 1536 + 1536 * 128 * 192 // queries
            + h * 576 + 512 + 512 * 128 * 256 // latent keys / values
            + 128 * 128 * h; // output
        assert_eq!(m.params(7168, 128), by_hand);
        assert!((m.params(7168, 128) as f64 / 1e6 - 187.1).abs() < 0.05);
        assert_eq!(m.core_flops_per_pair(128), 81_920.0);
    }
}
