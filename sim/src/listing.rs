//! The catalogs, the planner registry and the strategy choices as rows
//! (`cephalo list gpus|models|planners|strategies`): each row's fields are
//! its JSON and CSV schema, each table function its text.

use crate::choice::Choice;
use crate::strategy::{Accumulation, Attention, Checkpointing, Offload, Sharding, Stack};
use serde::Serialize;

/// One GPU type of the catalog, as `cephalo list gpus` prints it (units
/// in the names: GiB, dense TFLOPS, GB/s, USD per hour).
#[derive(Debug, Clone, Serialize)]
pub struct GpuRow {
    /// Canonical name.
    pub name: String,
    /// Other accepted names, space-separated.
    pub aliases: String,
    /// Architecture.
    pub arch: String,
    /// Memory, GiB.
    pub mem_gib: f64,
    /// Dense FP32 peak, TFLOPS.
    pub fp32_tflops: f64,
    /// Dense FP16 tensor peak, TFLOPS.
    pub fp16_tflops: f64,
    /// Dense BF16 tensor peak, TFLOPS (none: no BF16).
    pub bf16_tflops: Option<f64>,
    /// Memory bandwidth, GB/s.
    pub mem_bw_gbps: f64,
    /// Host link (PCIe), GB/s.
    pub host_link_gbps: f64,
    /// NVLink per GPU, GB/s (none: no NVLink).
    pub nvlink_gbps: Option<f64>,
    /// Price, USD per GPU-hour (none: unpriced).
    pub price_per_hour_usd: Option<f64>,
}

/// One model of the catalog, as `cephalo list models` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct ModelRow {
    /// Canonical name.
    pub name: String,
    /// Other accepted names, space-separated.
    pub aliases: String,
    /// Family (or the planner's family).
    pub family: String,
    /// Transformer blocks.
    pub layers: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Attention heads.
    pub heads: u32,
    /// Key-value heads.
    pub kv_heads: u32,
    /// Feed-forward size.
    pub ffn: u32,
    /// Vocabulary size.
    pub vocab: u32,
    /// Default tokens per sample (ViT: the image's patches + 1).
    pub seq_len: u32,
    /// Parameters.
    pub params: u64,
    /// Parameters, billions (3 decimals).
    pub params_billions: f64,
    /// Parameters one token meets (all of them for a dense model).
    pub active_params: u64,
    /// Active parameters, billions (3 decimals).
    pub active_params_billions: f64,
    /// Per-head width.
    pub head_dim: u32,
    /// `standard` or `mla` (multi-head latent attention).
    pub attention: String,
    /// Routed experts (0: a dense model).
    pub experts: u32,
    /// Experts each token visits (0: a dense model).
    pub top_k: u32,
    /// Shared experts.
    pub shared_experts: u32,
    /// One routed expert's SwiGLU width (0: a dense model).
    pub expert_ffn: u32,
    /// Which blocks have experts (`all`, `every:K`, `after:K`, ...; empty
    /// for a dense model).
    pub moe_layers: String,
    /// Blocks with experts.
    pub moe_blocks: u32,
    /// Expert capacity factor (empty: dropless).
    pub capacity_factor: Option<f64>,
    /// Keys per query in the windowed blocks (empty: full attention).
    pub sliding_window: Option<u32>,
    /// Parameters of the multi-token-prediction depths (beyond `params`).
    pub mtp_params: u64,
    /// Forward GFLOP per token at `seq_len`: q, k, v and output projections.
    pub fwd_gflop_attention_proj: f64,
    /// Forward GFLOP per token: attention scores and weighted values.
    pub fwd_gflop_attention_core: f64,
    /// Forward GFLOP per token: dense MLPs.
    pub fwd_gflop_dense_mlp: f64,
    /// Forward GFLOP per token: routers.
    pub fwd_gflop_router: f64,
    /// Forward GFLOP per token: the `k` routed experts.
    pub fwd_gflop_routed_experts: f64,
    /// Forward GFLOP per token: shared experts.
    pub fwd_gflop_shared_experts: f64,
    /// Forward GFLOP per token: the head.
    pub fwd_gflop_head: f64,
    /// Training GFLOP per token at `seq_len` (forward and backward, 3x the
    /// forward; no recomputation).
    pub train_gflop_per_token: f64,
    /// Why the simulator does not price this model yet, if it does not.
    pub not_simulated: Option<String>,
}

/// One planner of the registry, as `cephalo list planners` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct PlannerRow {
    /// Canonical name.
    pub name: &'static str,
    /// Family (or the planner's family).
    pub family: &'static str,
    /// What it does.
    pub summary: &'static str,
}

/// One strategy flag's value, as `cephalo list strategies` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyRow {
    /// The flag.
    pub flag: &'static str,
    /// A value (or the values).
    pub value: String,
    /// What it means.
    pub meaning: String,
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x}"))
}

/// The rows of `catalog`.
pub fn gpu_rows(catalog: &crate::gpu::GpuCatalog) -> Vec<GpuRow> {
    catalog
        .all()
        .iter()
        .map(|g| GpuRow {
            name: g.name.clone(),
            aliases: g.aliases.join(" "),
            arch: g.arch.name().to_string(),
            mem_gib: g.mem_gib,
            fp32_tflops: g.fp32_tflops,
            fp16_tflops: g.fp16_tflops,
            bf16_tflops: g.bf16_tflops,
            mem_bw_gbps: g.mem_bw_gbps,
            host_link_gbps: g.host_link.bw_gbps(),
            nvlink_gbps: g.nvlink_gbps(),
            price_per_hour_usd: g.price_per_hour_usd,
        })
        .collect()
}

/// The text table of GPU rows.
pub fn gpu_table(rows: &[GpuRow]) -> String {
    let mut s = format!(
        "{:<16} {:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>7}\n",
        "gpu",
        "arch",
        "mem GiB",
        "fp32 TF",
        "fp16 TF",
        "bf16 TF",
        "mem GB/s",
        "PCIe GB/s",
        "NVLink GB/s",
        "$/h"
    );
    for r in rows {
        s += &format!(
            "{:<16} {:<8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8.1} {:>9} {:>7}\n",
            r.name,
            r.arch,
            r.mem_gib,
            r.fp32_tflops,
            r.fp16_tflops,
            opt(r.bf16_tflops),
            r.mem_bw_gbps,
            r.host_link_gbps,
            opt(r.nvlink_gbps),
            opt(r.price_per_hour_usd),
        );
    }
    s + "(TF = dense TFLOPS at the datasheet boost clock; fp16 = fp16-input GEMMs with fp32 accumulation)\n"
}

/// The rows of `catalog`.
pub fn model_rows(catalog: &crate::model::ModelCatalog) -> Vec<ModelRow> {
    catalog
        .all()
        .iter()
        .map(|m| (m, m.flops_per_token_fwd(m.seq_len)))
        .map(|(m, f)| ModelRow {
            name: m.name.clone(),
            aliases: m.aliases.join(" "),
            family: m.family.as_str().to_string(),
            layers: m.layers,
            hidden: m.hidden,
            heads: m.heads,
            kv_heads: m.kv_heads,
            ffn: m.ffn,
            vocab: m.vocab,
            seq_len: m.tokens_per_sample(m.seq_len),
            params: m.total_params(),
            params_billions: billions(m.total_params()),
            active_params: m.active_params(),
            active_params_billions: billions(m.active_params()),
            head_dim: m.head_dim(),
            attention: if m.mla.is_some() { "mla" } else { "standard" }.to_string(),
            experts: m.moe.as_ref().map_or(0, |x| x.experts),
            top_k: m.moe.as_ref().map_or(0, |x| x.top_k),
            shared_experts: m.moe.as_ref().map_or(0, |x| x.shared_experts),
            expert_ffn: m.moe.as_ref().map_or(0, |x| x.expert_ffn),
            moe_layers: m.moe.as_ref().map_or(String::new(), |x| x.layers.name()),
            moe_blocks: m.moe_blocks(),
            capacity_factor: m.moe.as_ref().and_then(|x| x.capacity_factor),
            sliding_window: m.sliding_window,
            mtp_params: m.mtp_params(),
            fwd_gflop_attention_proj: gflop(f.attention_proj),
            fwd_gflop_attention_core: gflop(f.attention_core),
            fwd_gflop_dense_mlp: gflop(f.dense_mlp),
            fwd_gflop_router: gflop(f.router),
            fwd_gflop_routed_experts: gflop(f.routed_experts),
            fwd_gflop_shared_experts: gflop(f.shared_experts),
            fwd_gflop_head: gflop(f.head),
            train_gflop_per_token: gflop(3.0 * f.total()),
            not_simulated: m.check_simulated(m.seq_len).err(),
        })
        .collect()
}

/// FLOPs in GFLOP, 3 decimals.
fn gflop(flops: f64) -> f64 {
    (flops / 1e6).round() / 1e3
}

/// `n` in billions, 3 decimals.
fn billions(n: u64) -> f64 {
    (n as f64 / 1e9 * 1000.0).round() / 1000.0
}

/// The experts column: `8 top-2`, `256+1 top-8` (routed + shared), `-`.
fn experts_cell(r: &ModelRow) -> String {
    match (r.experts, r.shared_experts) {
        (0, _) => "-".into(),
        (e, 0) => format!("{e} top-{}", r.top_k),
        (e, s) => format!("{e}+{s} top-{}", r.top_k),
    }
}

/// The text table of model rows.
pub fn model_table(rows: &[ModelRow]) -> String {
    let mut s = format!(
        "{:<22} {:<8} {:>6} {:>6} {:>5} {:>4} {:>6} {:>7} {:>6} {:>15} {:>15} {:>12}  {}\n",
        "model",
        "family",
        "layers",
        "hidden",
        "heads",
        "kv",
        "ffn",
        "vocab",
        "seq",
        "parameters",
        "active",
        "experts",
        "aliases"
    );
    for r in rows {
        s += &format!(
            "{:<22} {:<8} {:>6} {:>6} {:>5} {:>4} {:>6} {:>7} {:>6} {:>15} {:>15} {:>12}  {}\n",
            r.name,
            r.family,
            r.layers,
            r.hidden,
            r.heads,
            r.kv_heads,
            r.ffn,
            r.vocab,
            r.seq_len,
            thousands(r.params),
            thousands(r.active_params),
            experts_cell(r),
            r.aliases
        );
    }
    s
}

/// `6738415616` -> `6,738,415,616`.
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Every planner of the registry.
pub fn planner_rows() -> Vec<PlannerRow> {
    crate::planner::registry::ENTRIES
        .iter()
        .map(|e| {
            let p = (e.make)();
            PlannerRow {
                name: p.name(),
                family: e.family.name(),
                summary: p.summary(),
            }
        })
        .collect()
}

/// The text table of planner rows.
pub fn planner_table(rows: &[PlannerRow]) -> String {
    let mut s = format!("{:<24} {:<14} {}\n", "planner", "family", "what it does");
    for r in rows {
        s += &format!("{:<24} {:<14} {}\n", r.name, r.family, r.summary);
    }
    s
}

/// Every strategy flag's values, from the choices tables.
pub fn strategy_rows() -> Vec<StrategyRow> {
    fn rows<T>(flag: &'static str, table: &'static [Choice<T>]) -> Vec<StrategyRow> {
        table
            .iter()
            .map(|c| StrategyRow {
                flag,
                value: c.name.into(),
                meaning: c.meaning.into(),
            })
            .collect()
    }
    // Attention is one row: its values and their meanings joined.
    let join = |part: fn(&Choice<Attention>) -> &'static str, sep: &str| -> String {
        Attention::CHOICES
            .iter()
            .map(part)
            .collect::<Vec<_>>()
            .join(sep)
    };

    let mut v = rows("--sharding", Sharding::CHOICES);
    v.extend(rows("--accumulation", Accumulation::CHOICES));
    v.extend(rows("--checkpointing", Checkpointing::CHOICES));
    v.extend(rows("--offload", Offload::CHOICES));
    v.extend(rows("--stack", Stack::CHOICES));
    for (flag, value, meaning) in [
        (
            "--param-dtype",
            "fp16 | bf16 | fp32".to_string(),
            "dtype of the all-gathered parameters (mixed precision)".to_string(),
        ),
        (
            "--reduce-dtype",
            "fp16 | bf16 | fp32".to_string(),
            "dtype of the gradient reductions".to_string(),
        ),
        (
            "--attention",
            join(|c| c.name, " | "),
            join(|c| c.meaning, ", or "),
        ),
    ] {
        v.push(StrategyRow {
            flag,
            value,
            meaning,
        });
    }
    v
}

/// The text table of strategy rows.
pub fn strategy_table(rows: &[StrategyRow]) -> String {
    let mut s = format!("{:<17} {:<20} {}\n", "flag", "value", "meaning");
    for r in rows {
        s += &format!("{:<17} {:<20} {}\n", r.flag, r.value, r.meaning);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(6_738_415_616), "6,738,415,616");
    }
}
