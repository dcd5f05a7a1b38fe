//! One rank's part of a [`super::Plan`]: its local batch, micro-batch
//! count and size, and state fraction.

use serde::{Deserialize, Serialize};

/// One rank's part of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankPlan {
    /// Local batch b_i (samples per iteration).
    pub batch: u32,
    /// Micro-batch count n_i.
    pub microbatches: u32,
    /// Largest micro-batch size m_i (samples).
    pub microbatch_size: u32,
    /// Fraction r_i of the sharded training state held by this rank.
    pub state_fraction: f64,
    /// Why the planner chose something unusual (e.g. a state-only GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl RankPlan {
    /// A rank plan with `batch` split into `microbatches` near-equal parts.
    pub fn new(batch: u32, microbatches: u32, state_fraction: f64) -> RankPlan {
        let n = if batch == 0 { 0 } else { microbatches.max(1) };
        RankPlan {
            batch,
            microbatches: n,
            microbatch_size: if n == 0 { 0 } else { batch.div_ceil(n) },
            state_fraction,
            note: None,
        }
    }

    /// Sizes of the micro-batches in execution order (largest first).
    pub fn microbatch_sizes(&self) -> Vec<u32> {
        if self.microbatches == 0 {
            return vec![];
        }
        let n = self.microbatches;
        let (q, r) = (self.batch / n, self.batch % n);
        (0..n).map(|k| q + u32::from(k < r)).collect()
    }
}
