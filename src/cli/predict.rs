//! `cephalo predict`: per-block forward/backward ms and non-state memory of
//! one (GPU, model, seq len, dtype) at several micro-batch sizes.
//!
//! `--source analytic` answers from the calibrated performance model alone,
//! never from a measured or imported profile. `--source best` (default) uses
//! the most trusted source available: a measured or imported profile from
//! `--profiles` when one exists for the exact key, else the model; every row
//! says which.
//!
//! `--stack`, `--compile`, `--attention`, `--tp` and `--sequence-parallel`
//! price one TP rank's share of the block as that training stack runs it
//! (a profile, measured on the PyTorch stack with its own attention kernel
//! and no TP, is scaled by the model's ratio of the two implementations, as
//! the simulator scales it). Every row also carries the model's forward and
//! backward by part (GEMMs, attention core, element-wise ops,
//! per-parameter passes, launch floors), which `--breakdown` prints.
//!
//! JSON output (`--format json`): an array, one object per batch size:
//! `{"batch", "fwd_ms", "bwd_ms", "act_mem_gib", "time_source", "mem_source",
//! "fwd_gemm_ms", "fwd_attention_ms", "fwd_elementwise_ms", "fwd_weight_ms",
//! "fwd_fixed_ms", "bwd_..."}` (ms of ONE transformer block on one rank;
//! GiB of non-state memory of one step; the parts are the model's); CSV
//! the same columns.

use crate::load;
use anyhow::Result;
use clap::{Args as ClapArgs, ValueEnum};
use sim::error::SpecError;
use sim::perfmodel::BlockImpl;
use sim::precision::NumFormat;
use sim::prediction::{breakdown_text, label, BlockQuery, Row};
use sim::profile::ProfileSet;
use sim::strategy::{Attention, Stack};
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
    /// Training stack: pytorch (op by op, as the reference profiles) |
    /// megatron (Megatron-Core + Transformer Engine: fused kernels).
    #[arg(long, default_value = "pytorch")]
    pub stack: String,
    /// `torch.compile` on the block (PyTorch stack).
    #[arg(long)]
    pub compile: bool,
    /// Attention kernel: eager | flash.
    #[arg(long, default_value = "eager")]
    pub attention: String,
    /// Tensor-parallel degree: price one rank's share of the block.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// Sequence parallelism inside the TP group.
    #[arg(long)]
    pub sequence_parallel: bool,
    /// Print the model's forward and backward by part.
    #[arg(long)]
    pub breakdown: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Parses `1,2,4` into batch sizes (each >= 1).
pub fn parse_batches(s: &str) -> Result<Vec<u32>, SpecError> {
    sim::lists::counts(s, "--batch-sizes", 1)
}

/// Runs `cephalo predict`.
pub fn run(a: Args) -> Result<ExitCode> {
    let gpu = crate::load::gpus().lookup(&a.gpu, "--gpu")?;
    let model = &crate::load::model(&a.model, "--model")?;
    let dtype = NumFormat::parse(&a.dtype).ok_or_else(|| {
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
    let imp = block_impl(&a)?;
    sim::tensor::TensorParallel::check(a.tp, model, "--tp", "tp")?;
    let tp = sim::tensor::TensorParallel::new(a.tp, a.sequence_parallel);
    let predictor = load::calibration(a.calibration.as_deref())?;
    let mut profiles = ProfileSet::new();
    if a.source == SourceChoice::Best {
        for p in &a.profiles {
            profiles.merge(load::load_profiles(p)?);
        }
    }
    let block = profiles.block(&gpu.name, &model.name, seq, dtype);
    let memory = profiles.memory(None, &model.name, dtype);
    let query = BlockQuery {
        predictor: &predictor,
        gpu,
        model,
        seq,
        dtype,
        imp,
        tp,
    };
    let rows = batches
        .iter()
        .map(|&m| query.row(m, block, memory))
        .collect::<Result<Vec<Row>, _>>()?;
    match a.format {
        Format::Json => out!(
            "{}",
            crate::cli::format::json_rows("cephalo-predict/1", &rows)?
        ),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&rows)?),
        Format::Table => {
            outln!(
                "{} on {}, {} tokens/sample, {}, {}: one block per micro-batch size (times in ms, activation memory in GiB)",
                model.name,
                gpu.name,
                seq,
                dtype,
                label(imp, &tp)
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
            if a.breakdown {
                out!("{}", breakdown_text(&rows));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The implementation the flags name.
fn block_impl(a: &Args) -> Result<BlockImpl, SpecError> {
    let stack = Stack::parse(&a.stack).ok_or_else(|| {
        SpecError::invalid(
            "--stack",
            "stack",
            format!(
                "expected {}, got `{}`",
                sim::choice::expected(Stack::CHOICES),
                a.stack
            ),
        )
    })?;
    let attention = Attention::parse(&a.attention).ok_or_else(|| {
        SpecError::invalid(
            "--attention",
            "attention",
            format!(
                "expected {}, got `{}`",
                sim::choice::expected(Attention::CHOICES),
                a.attention
            ),
        )
    })?;
    if a.compile && !stack.compiles() {
        return Err(SpecError::invalid(
            "--compile",
            "compile",
            format!(
                "the {} stack does not run torch.compile on its blocks (its memory-bound kernels are fused already)",
                stack.name()
            ),
        ));
    }
    Ok(BlockImpl {
        stack,
        compile: a.compile,
        attention,
    })
}
