//! One block's predicted time and memory per micro-batch size (what
//! `cephalo predict` answers): a measured or imported profile where one
//! exists for the exact key, scaled by the model's ratio to another
//! implementation or to a TP rank as the simulator scales it, else the
//! calibrated model; every row says which, and carries the model's pass
//! by part. The rows' fields are the JSON / CSV schema.

use crate::error::SpecError;
use crate::perfmodel::{BlockImpl, Predictor};
use crate::precision::NumFormat;
use serde::Serialize;

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

impl From<crate::perfmodel::PassTime> for Parts {
    fn from(p: crate::perfmodel::PassTime) -> Parts {
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

/// `x` rounded to 4 decimals (the rows' precision).
fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// What every row of a `predict` run shares.
pub struct BlockQuery<'a> {
    /// The performance model.
    pub predictor: &'a dyn Predictor,
    /// The GPU.
    pub gpu: &'a crate::gpu::GpuSpec,
    /// The model.
    pub model: &'a crate::model::ModelSpec,
    /// Tokens per sample.
    pub seq: u32,
    /// The compute format.
    pub dtype: NumFormat,
    /// The block's implementation (stack, compile, attention).
    pub imp: BlockImpl,
    /// The TP rank it prices.
    pub tp: crate::tensor::TensorParallel,
}

impl BlockQuery<'_> {
    /// The model's prediction at micro-batch `m` for `imp` on `tp`.
    fn predict(
        &self,
        m: u32,
        imp: BlockImpl,
        tp: &crate::tensor::TensorParallel,
    ) -> Result<crate::perfmodel::BlockPrediction, SpecError> {
        self.predictor
            .block_prediction_tp(self.gpu, self.model, self.seq, self.dtype, m, imp, tp)
            .map_err(|why| SpecError::invalid("--dtype", "dtype", why))
    }

    /// The row of micro-batch `m`: the profile `block` where one exists
    /// (scaled by the model's ratio to another implementation or a TP rank,
    /// as the simulator scales it), else the model; memory from the profile
    /// `memory` or the model.
    pub fn row(
        &self,
        m: u32,
        block: Option<&crate::profile::BlockProfile>,
        memory: Option<&crate::profile::MemoryProfile>,
    ) -> Result<Row, SpecError> {
        self.model
            .check_simulated(self.seq)
            .map_err(|why| SpecError::invalid("--model", "model", why))?;
        let (imp, tp) = (self.imp, &self.tp);
        let analytic = format!("analytic ({})", self.predictor.name());
        let p = self.predict(m, imp, tp)?;
        let (fwd, bwd, ts) = match block {
            Some(b) => {
                let measured = BlockImpl::pytorch(b.attention);
                let (fwd, bwd) = (b.curve.fwd_ms(m), b.curve.bwd_ms(m));
                if measured == imp && !tp.is_on() {
                    (fwd, bwd, b.curve.source.to_string())
                } else {
                    let base = self.predict(m, measured, &crate::tensor::TensorParallel::NONE)?;
                    (
                        fwd * p.fwd_ms / base.fwd_ms,
                        bwd * p.bwd_ms / base.bwd_ms,
                        format!(
                            "{}, scaled to {} by the model's ratio",
                            b.curve.source,
                            label(imp, tp)
                        ),
                    )
                }
            }
            None => (p.fwd_ms, p.bwd_ms, analytic.clone()),
        };
        let (mem, ms) = match memory {
            Some(p) => (p.act_gib(m), p.source.to_string()),
            None => (
                self.predictor
                    .act_mem_gib(self.model, self.seq, self.dtype, m),
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
}

/// The model's parts of every row, forward then backward: the text
/// `cephalo predict --breakdown` prints after the table.
pub fn breakdown_text(rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "\nthe model's passes by part, ms (GEMMs, attention core, element-wise, per-parameter, launch floors):");
    let _ = writeln!(
        s,
        "{:>6} {:>4} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "batch", "pass", "gemm", "attention", "elemwise", "weights", "launches"
    );
    for r in rows {
        for (pass, p) in [("fwd", &r.fwd_parts), ("bwd", &r.bwd_parts)] {
            let _ = writeln!(
                s,
                "{:>6} {:>4} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
                r.batch, pass, p.gemm_ms, p.attention_ms, p.elementwise_ms, p.weight_ms, p.fixed_ms
            );
        }
    }
    s
}

/// What a row prices: `megatron flash, TP 8 with SP (one rank)`.
pub fn label(imp: BlockImpl, tp: &crate::tensor::TensorParallel) -> String {
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

impl std::fmt::Debug for BlockQuery<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockQuery")
            .field("predictor", &self.predictor.name())
            .field("gpu", &self.gpu.name)
            .field("model", &self.model.name)
            .field("seq", &self.seq)
            .field("dtype", &self.dtype)
            .field("imp", &self.imp)
            .field("tp", &self.tp)
            .finish()
    }
}
