//! `cephalo predict`: per-block forward/backward ms and non-state memory of
//! one (GPU, model, seq len, dtype) at several micro-batch sizes.
//!
//! `--source analytic` answers from the calibrated performance model alone,
//! never from a measured or imported profile. `--source best` (default) uses
//! the most trusted source available: a measured or imported profile from
//! `--profiles` when one exists for the exact key, else the model; every row
//! says which.
//!
//! JSON output (`--format json`): an array, one object per batch size:
//! `{"batch", "fwd_ms", "bwd_ms", "act_mem_gib", "time_source", "mem_source"}`
//! (ms of ONE transformer block; GiB of non-state memory of one step).

use crate::load;
use anyhow::Result;
use clap::{Args as ClapArgs, ValueEnum};
use serde::Serialize;
use sim::dtype::Dtype;
use sim::error::SpecError;
use sim::perfmodel::Predictor;
use sim::profile::ProfileSet;
use std::path::PathBuf;
use std::process::ExitCode;

/// Where predictions may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceChoice {
    /// The calibrated performance model only.
    Analytic,
    /// A measured/imported profile when one exists, else the model.
    Best,
}

pub use crate::cli::format::Format;

/// Flags of `cephalo predict`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// GPU type (catalog name or alias, e.g. `h100-sxm`, `v100x16`).
    #[arg(long)]
    pub gpu: String,
    /// Model (catalog name or alias, e.g. `llama2-13b`).
    #[arg(long)]
    pub model: String,
    /// Tokens per sample (default: the model's; ViT uses its image's tokens).
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Precision: fp16 | bf16 | fp32.
    #[arg(long, default_value = "fp16")]
    pub dtype: String,
    /// Micro-batch sizes, comma-separated.
    #[arg(long, default_value = "1,2,4,8,16")]
    pub batch_sizes: String,
    /// Source of the numbers.
    #[arg(long, value_enum, default_value_t = SourceChoice::Best)]
    pub source: SourceChoice,
    /// Profile files or directories (reference JSON or cephalo-profile/1); repeatable.
    #[arg(long)]
    pub profiles: Vec<PathBuf>,
    /// Calibration file to use instead of the shipped one.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// One output row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Micro-batch size.
    pub batch: u32,
    /// Forward ms of one block.
    pub fwd_ms: f64,
    /// Backward ms of one block.
    pub bwd_ms: f64,
    /// Non-state memory of one step, GiB.
    pub act_mem_gib: f64,
    /// Where the times came from.
    pub time_source: String,
    /// Where the memory came from.
    pub mem_source: String,
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Parses `1,2,4` into batch sizes (each >= 1).
pub fn parse_batches(s: &str) -> Result<Vec<u32>, SpecError> {
    sim::lists::counts(s, "--batch-sizes", 1)
}

/// Runs `cephalo predict`.
pub fn run(a: Args) -> Result<ExitCode> {
    let gpu = crate::load::gpus().lookup(&a.gpu, "--gpu")?;
    let model = &crate::load::model(&a.model, "--model")?;
    let dtype = Dtype::parse(&a.dtype).ok_or_else(|| {
        SpecError::invalid(
            "--dtype",
            "dtype",
            format!("expected fp16, bf16 or fp32, got `{}`", a.dtype),
        )
    })?;
    gpu.check_dtype(dtype, "--dtype", "dtype")?;
    let seq = match a.seq_len {
        Some(0) => {
            return Err(SpecError::invalid(
                "--seq-len",
                "seq_len",
                "expected a sequence length >= 1, got 0",
            )
            .into())
        }
        Some(s) => model.tokens_per_sample(s),
        None => model.tokens_per_sample(model.seq_len),
    };
    let batches = parse_batches(&a.batch_sizes)?;
    let predictor = load::calibration(a.calibration.as_deref())?;
    let mut profiles = ProfileSet::new();
    if a.source == SourceChoice::Best {
        for p in &a.profiles {
            profiles.merge(load::load_profiles(p)?);
        }
    }
    let block = profiles.block(&gpu.name, &model.name, seq, dtype);
    let memory = profiles.memory(None, &model.name, dtype);
    let analytic = format!("analytic ({})", predictor.name());
    let mut rows = Vec::new();
    for &m in &batches {
        let (fwd, bwd, ts) = match block {
            Some(b) => (
                b.curve.fwd_ms(m),
                b.curve.bwd_ms(m),
                b.curve.source.to_string(),
            ),
            None => {
                let (f, b) = predictor
                    .block_ms(gpu, model, seq, dtype, m)
                    .map_err(|why| SpecError::invalid("--dtype", "dtype", why))?;
                (f, b, analytic.clone())
            }
        };
        let (mem, ms) = match memory {
            Some(p) => (p.act_gib(m), p.source.to_string()),
            None => (
                predictor.act_mem_gib(model, seq, dtype, m),
                analytic.clone(),
            ),
        };
        rows.push(Row {
            batch: m,
            fwd_ms: round4(fwd),
            bwd_ms: round4(bwd),
            act_mem_gib: round4(mem),
            time_source: ts,
            mem_source: ms,
        });
    }
    match a.format {
        Format::Json => out!(
            "{}",
            crate::cli::format::json_rows("cephalo-predict/1", &rows)?
        ),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&rows)?),
        Format::Table => {
            outln!(
                "{} on {}, {} tokens/sample, {}: one block per micro-batch size (times in ms, activation memory in GiB)",
                model.name,
                gpu.name,
                seq,
                dtype
            );
            outln!("time source: {}", rows[0].time_source);
            outln!("memory source: {}", rows[0].mem_source);
            outln!(
                "{:>6} {:>12} {:>12} {:>16}",
                "batch",
                "forward ms",
                "backward ms",
                "activations GiB"
            );
            for r in &rows {
                outln!(
                    "{:>6} {:>12.3} {:>12.3} {:>16.3}",
                    r.batch,
                    r.fwd_ms,
                    r.bwd_ms,
                    r.act_mem_gib
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
