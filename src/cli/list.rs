//! `cephalo list gpus|models|planners|strategies`: what names this build
//! (plus `--gpu-catalog` / `--model-catalog`) understands, with the numbers
//! a user checks before trusting a plan (memory, peaks, parameter counts).

use crate::cli::format::{csv_of, Format};
use anyhow::Result;
use clap::{Args as ClapArgs, ValueEnum};
use serde::Serialize;
use sim::choice::Choice;
use sim::strategy::{Accumulation, Attention, Checkpointing, Offload, Sharding};
use std::process::ExitCode;

/// What to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// GPU types: memory, peak TFLOPS, links, price.
    Gpus,
    /// Models: shapes and parameter counts.
    Models,
    /// Planners (`--planner`, `compare` rows).
    Planners,
    /// Strategy axes and their values (`--sharding`, `--accumulation`, ...).
    Strategies,
}

/// Arguments of `cephalo list`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// What to list.
    #[arg(value_enum)]
    pub what: What,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Serialize)]
struct GpuRow {
    name: String,
    aliases: String,
    arch: String,
    mem_gib: f64,
    fp32_tflops: f64,
    fp16_tflops: f64,
    bf16_tflops: Option<f64>,
    mem_bw_gbps: f64,
    host_link_gbps: f64,
    nvlink_gbps: Option<f64>,
    price_per_hour_usd: Option<f64>,
}

#[derive(Serialize)]
struct ModelRow {
    name: String,
    aliases: String,
    family: String,
    layers: u32,
    hidden: u32,
    heads: u32,
    kv_heads: u32,
    ffn: u32,
    vocab: u32,
    /// Default tokens per sample (ViT: the image's patches + 1).
    seq_len: u32,
    params: u64,
    params_billions: f64,
}

#[derive(Serialize)]
struct PlannerRow {
    name: &'static str,
    family: &'static str,
    summary: &'static str,
}

#[derive(Serialize)]
struct StrategyRow {
    flag: &'static str,
    value: String,
    meaning: String,
}

/// Runs `cephalo list`.
pub fn run(a: Args) -> Result<ExitCode> {
    match a.what {
        What::Gpus => emit(a.format, &gpu_rows(), gpu_table),
        What::Models => emit(a.format, &model_rows(), model_table),
        What::Planners => emit(a.format, &planner_rows(), planner_table),
        What::Strategies => emit(a.format, &strategy_rows(), strategy_table),
    }
}

fn emit<T: Serialize>(format: Format, rows: &[T], table: fn(&[T]) -> String) -> Result<ExitCode> {
    match format {
        Format::Table => out!("{}", table(rows)),
        Format::Json => out!("{}", crate::cli::format::json_rows("cephalo-list/1", rows)?),
        Format::Csv => out!("{}", csv_of(rows)?),
    }
    Ok(ExitCode::SUCCESS)
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x}"))
}

fn gpu_rows() -> Vec<GpuRow> {
    crate::load::gpus()
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

fn gpu_table(rows: &[GpuRow]) -> String {
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

fn model_rows() -> Vec<ModelRow> {
    crate::load::models()
        .all()
        .iter()
        .map(|m| ModelRow {
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
            params_billions: (m.total_params() as f64 / 1e9 * 1000.0).round() / 1000.0,
        })
        .collect()
}

fn model_table(rows: &[ModelRow]) -> String {
    let mut s = format!(
        "{:<22} {:<8} {:>6} {:>6} {:>5} {:>4} {:>6} {:>7} {:>6} {:>15}  {}\n",
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
        "aliases"
    );
    for r in rows {
        s += &format!(
            "{:<22} {:<8} {:>6} {:>6} {:>5} {:>4} {:>6} {:>7} {:>6} {:>15}  {}\n",
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

fn planner_rows() -> Vec<PlannerRow> {
    sim::planner::registry::ENTRIES
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

fn planner_table(rows: &[PlannerRow]) -> String {
    let mut s = format!("{:<24} {:<14} {}\n", "planner", "family", "what it does");
    for r in rows {
        s += &format!("{:<24} {:<14} {}\n", r.name, r.family, r.summary);
    }
    s
}

fn strategy_rows() -> Vec<StrategyRow> {
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

fn strategy_table(rows: &[StrategyRow]) -> String {
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
