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
use serde::Serialize;
use sim::error::SpecError;
use sim::perfmodel::{BlockImpl, Predictor};
use sim::precision::NumFormat;
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

/// A pass's time by part, ms (the model's).
#[derive(Debug, Clone, Copy)]
pub struct Parts {
    /// The linear layers' GEMMs.
    pub gemm_ms: f64,
    /// The attention core.
    pub attention_ms: f64,
    /// Element-wise ops.
    pub elementwise_ms: f64,
    /// Per-parameter passes.
    pub weight_ms: f64,
    /// Kernel launch floors.
    pub fixed_ms: f64,
}

impl From<sim::perfmodel::PassTime> for Parts {
    fn from(p: sim::perfmodel::PassTime) -> Parts {
        Parts {
            gemm_ms: round4(p.gemm_ms),
            attention_ms: round4(p.attention_ms),
            elementwise_ms: round4(p.elementwise_ms),
            weight_ms: round4(p.weight_ms),
            fixed_ms: round4(p.fixed_ms),
        }
    }
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
    /// The model's forward by part.
    #[serde(skip)]
    pub fwd_parts: Parts,
    /// The model's backward by part.
    #[serde(skip)]
    pub bwd_parts: Parts,
    /// The model's forward GEMMs, ms.
    pub fwd_gemm_ms: f64,
    /// The model's forward attention core, ms.
    pub fwd_attention_ms: f64,
    /// The model's forward element-wise ops, ms.
    pub fwd_elementwise_ms: f64,
    /// The model's forward per-parameter passes, ms.
    pub fwd_weight_ms: f64,
    /// The model's forward launch floors, ms.
    pub fwd_fixed_ms: f64,
    /// The model's backward GEMMs, ms.
    pub bwd_gemm_ms: f64,
    /// The model's backward attention core, ms.
    pub bwd_attention_ms: f64,
    /// The model's backward element-wise ops, ms.
    pub bwd_elementwise_ms: f64,
    /// The model's backward per-parameter passes, ms.
    pub bwd_weight_ms: f64,
    /// The model's backward launch floors, ms.
    pub bwd_fixed_ms: f64,
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
    let ctx = Ctx {
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
        .map(|&m| row(m, &ctx, block, memory))
        .collect::<Result<Vec<Row>>>()?;
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
                what(imp, &tp)
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
                print_breakdown(&rows)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What every row of a `predict` run shares.
struct Ctx<'a> {
    predictor: &'a dyn Predictor,
    gpu: &'a sim::gpu::GpuSpec,
    model: &'a sim::model::ModelSpec,
    seq: u32,
    dtype: NumFormat,
    imp: BlockImpl,
    tp: sim::tensor::TensorParallel,
}

impl Ctx<'_> {
    /// The model's prediction at micro-batch `m` for `imp` on `tp`.
    fn predict(
        &self,
        m: u32,
        imp: BlockImpl,
        tp: &sim::tensor::TensorParallel,
    ) -> Result<sim::perfmodel::BlockPrediction> {
        Ok(self
            .predictor
            .block_prediction_tp(self.gpu, self.model, self.seq, self.dtype, m, imp, tp)
            .map_err(|why| SpecError::invalid("--dtype", "dtype", why))?)
    }
}

/// The row of micro-batch `m`: the profile `block` where one exists
/// (scaled by the model's ratio to another implementation or a TP rank),
/// else the model; memory from the profile `memory` or the model.
fn row(
    m: u32,
    ctx: &Ctx<'_>,
    block: Option<&sim::profile::BlockProfile>,
    memory: Option<&sim::profile::MemoryProfile>,
) -> Result<Row> {
    let (imp, tp) = (ctx.imp, &ctx.tp);
    let analytic = format!("analytic ({})", ctx.predictor.name());
    let p = ctx.predict(m, imp, tp)?;
    let (fwd, bwd, ts) = match block {
        Some(b) => {
            let measured = BlockImpl::pytorch(b.attention);
            let (fwd, bwd) = (b.curve.fwd_ms(m), b.curve.bwd_ms(m));
            if measured == imp && !tp.is_on() {
                (fwd, bwd, b.curve.source.to_string())
            } else {
                let base = ctx.predict(m, measured, &sim::tensor::TensorParallel::NONE)?;
                (
                    fwd * p.fwd_ms / base.fwd_ms,
                    bwd * p.bwd_ms / base.bwd_ms,
                    format!(
                        "{}, scaled to {} by the model's ratio",
                        b.curve.source,
                        what(imp, tp)
                    ),
                )
            }
        }
        None => (p.fwd_ms, p.bwd_ms, analytic.clone()),
    };
    let (mem, ms) = match memory {
        Some(p) => (p.act_gib(m), p.source.to_string()),
        None => (
            ctx.predictor.act_mem_gib(ctx.model, ctx.seq, ctx.dtype, m),
            analytic,
        ),
    };
    let (f, b): (Parts, Parts) = (p.fwd_parts.into(), p.bwd_parts.into());
    Ok(Row {
        batch: m,
        fwd_ms: round4(fwd),
        bwd_ms: round4(bwd),
        act_mem_gib: round4(mem),
        time_source: ts,
        mem_source: ms,
        fwd_parts: f,
        bwd_parts: b,
        fwd_gemm_ms: f.gemm_ms,
        fwd_attention_ms: f.attention_ms,
        fwd_elementwise_ms: f.elementwise_ms,
        fwd_weight_ms: f.weight_ms,
        fwd_fixed_ms: f.fixed_ms,
        bwd_gemm_ms: b.gemm_ms,
        bwd_attention_ms: b.attention_ms,
        bwd_elementwise_ms: b.elementwise_ms,
        bwd_weight_ms: b.weight_ms,
        bwd_fixed_ms: b.fixed_ms,
    })
}

/// The model's parts of every row, forward then backward.
fn print_breakdown(rows: &[Row]) -> Result<()> {
    outln!("\nthe model's passes by part, ms (GEMMs, attention core, element-wise, per-parameter, launch floors):");
    outln!(
        "{:>6} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "batch",
        "pass",
        "gemm",
        "attention",
        "elemwise",
        "weights",
        "launches"
    );
    for r in rows {
        for (pass, p) in [("fwd", &r.fwd_parts), ("bwd", &r.bwd_parts)] {
            outln!(
                "{:>6} {:>4} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
                r.batch,
                pass,
                p.gemm_ms,
                p.attention_ms,
                p.elementwise_ms,
                p.weight_ms,
                p.fixed_ms
            );
        }
    }
    Ok(())
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

/// `megatron flash, TP 8 with SP (one rank)`.
fn what(imp: BlockImpl, tp: &sim::tensor::TensorParallel) -> String {
    if tp.is_on() {
        format!(
            "{}, TP {}{} (one rank)",
            imp.label(),
            tp.degree,
            if tp.sequence_parallel { " with SP" } else { "" }
        )
    } else {
        imp.label()
    }
}
