//! The cost table of a pipeline iteration, built once from the
//! [`CostModel`] before the lowering ([`super::lower`]) walks, as the
//! data-parallel lowering reads [`crate::schedule::costs`]:
//!
//! * [`Rows`]: per (GPU type, slice size) one [`Micro`] row (compute
//!   durations and anchored activation bytes of one GPU's slice of a
//!   micro-batch). The planners' closed form ([`super::estimate`]) prices
//!   its stage groups from the same rows.
//! * [`PipeCosts`]: the rows of every slice a plan's GPUs compute, per
//!   rank its optimizer step, and the bytes of a block output for every
//!   sample count a point-to-point transfer moves.
//!
//! Transfers and collectives are priced where they are emitted (they
//! depend on the pair or group of GPUs, through the communication model).
//! Units: durations [`SimTime`], bytes.

use crate::cost::CostModel;
use crate::error::PlanError;
use crate::plan::pipeline::Pipeline;
use crate::plan::Plan;
use crate::schedule::{dur, micro_costs, Micro};
use crate::strategy::{Attention, Sharding};
use crate::units::SimTime;
use std::collections::HashMap;

/// Cost-table rows: one [`Micro`] per (GPU type, slice size), each built
/// once by `micro_costs` (a row depends on the GPU's type only, so GPUs
/// of one type share it).
#[derive(Debug, Clone)]
pub struct Rows<'a> {
    costs: &'a CostModel,
    attention: Attention,
    core: bool,
    index: HashMap<(usize, u32), usize>,
    rows: Vec<Micro>,
}

impl<'a> Rows<'a> {
    /// An empty table for slices computed with the `attention` kernel and
    /// selective policy of `strategy`.
    pub fn new(costs: &'a CostModel, strategy: &crate::strategy::Strategy) -> Rows<'a> {
        Rows {
            costs,
            attention: strategy.attention,
            core: strategy.checkpointing.attention_core(),
            index: HashMap::new(),
            rows: Vec::new(),
        }
    }

    /// The attention kernel the rows are priced with.
    pub fn attention(&self) -> Attention {
        self.attention
    }

    /// The row of a slice of `n` samples on `rank`'s GPU type, built from
    /// the cost model the first time it is asked for (`Err` when the GPU
    /// has no block times for the attention kernel).
    pub fn add(&mut self, rank: usize, n: u32) -> Result<Micro, PlanError> {
        let key = (self.costs.rank_type[rank], n);
        if let Some(&i) = self.index.get(&key) {
            return Ok(self.rows[i]);
        }
        let row = micro_costs(self.costs, rank, n, self.attention, self.core)?;
        self.index.insert(key, self.rows.len());
        self.rows.push(row);
        Ok(row)
    }

    /// How many rows the table holds (one per GPU type and slice size
    /// asked for).
    pub fn built(&self) -> usize {
        self.rows.len()
    }

    /// The row of a slice of `n` samples on `rank`'s GPU type, which
    /// [`Rows::add`] built before.
    pub fn get(&self, rank: usize, n: u32) -> &Micro {
        let i = self.index[&(self.costs.rank_type[rank], n)];
        &self.rows[i]
    }
}

/// What one iteration of a pipeline plan costs, tabulated before its
/// ops are lowered.
#[derive(Debug, Clone)]
pub struct PipeCosts<'a> {
    /// The rows of every slice a GPU of the pipeline computes.
    pub rows: Rows<'a>,
    /// Per rank: its optimizer step over the parameters it updates (its
    /// stage's, or its shard of them under `grad-op`); zero for a rank in
    /// no stage.
    pub optimizer: Vec<SimTime>,
    /// Bytes of a block output per sample count a transfer moves.
    out_bytes: HashMap<u32, f64>,
}

impl<'a> PipeCosts<'a> {
    /// The table of `plan`'s iteration, whose pipeline is `pipe`. Rows are
    /// built in the order the lowering first meets them (so a GPU type
    /// without block times for the plan's attention fails as it would).
    pub fn new(
        costs: &'a CostModel,
        plan: &Plan,
        pipe: &Pipeline,
    ) -> Result<PipeCosts<'a>, PlanError> {
        let mut rows = Rows::new(costs, &plan.strategy);
        let mut out_bytes = HashMap::new();
        let p = pipe.depth();
        let mut sizes: Vec<u32> = Vec::new();
        for x in pipe.micro_sizes(costs.workload.global_batch) {
            if !sizes.contains(&x) {
                sizes.push(x);
            }
        }
        // Every slice, and what it sends the next stage (the gradients
        // coming back cover the same pairs and sample counts).
        for &size in &sizes {
            for (s, st) in pipe.stages.iter().enumerate() {
                let d = st.gpus.len();
                for (j, &rank) in st.gpus.iter().enumerate() {
                    let (lo, hi) = Pipeline::slice(size, d, j);
                    rows.add(rank as usize, hi - lo)?;
                    if s + 1 == p {
                        continue;
                    }
                    for (_, to, ov, recv_n) in pipe.overlaps(s + 1, size, lo, hi) {
                        rows.add(to as usize, recv_n)?;
                        out_bytes
                            .entry(ov)
                            .or_insert_with(|| costs.block_output_bytes(ov));
                    }
                }
            }
        }
        let mut optimizer = vec![SimTime::ZERO; costs.ranks()];
        for (s, st) in pipe.stages.iter().enumerate() {
            let params = pipe.stage_params(s, &costs.workload.model) as f64;
            let local = match plan.strategy.sharding {
                Sharding::NoShard => params,
                _ => params / st.gpus.len() as f64,
            };
            for &r in &st.gpus {
                optimizer[r as usize] = dur(costs.optimizer_ms(r as usize, local));
            }
        }
        Ok(PipeCosts {
            rows,
            optimizer,
            out_bytes,
        })
    }

    /// The row of `rank`'s slice of `n` samples.
    pub fn row(&self, rank: usize, n: u32) -> &Micro {
        self.rows.get(rank, n)
    }

    /// Bytes of a block output of `n` samples (a transfer of `n` samples
    /// of the pipeline).
    pub fn block_output_bytes(&self, n: u32) -> f64 {
        self.out_bytes[&n]
    }
}
