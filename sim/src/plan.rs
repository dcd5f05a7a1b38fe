//! The plan: what every GPU does in one iteration.
//!
//! Per rank i: local batch `b_i` (samples), micro-batch count `n_i`,
//! micro-batch size `m_i` and state fraction `r_i` (share of the sharded
//! training state it holds). `b_i` is split into `n_i` micro-batches whose
//! sizes differ by at most one (`m_i` is the largest); planners emit exact
//! splits `b_i = n_i * m_i`. A rank with `b_i = 0` computes nothing but still
//! holds its state shard and joins every collective.
//!
//! File form (`plan.json`, what `cephalo plan --out` writes):
//!
//! ```json
//! { "planner": "cephalo",
//!   "gpus": [ { "batch": 13, "microbatches": 1, "microbatch_size": 13, "state_fraction": 0.2253 }, ... ] }
//! ```
//!
//! The reference optimizer's output (`uneven_batch_sizes`,
//! `uneven_microbatches`, `split_uneven_partitions`) is accepted too.

use crate::error::PlanError;
use serde::{Deserialize, Serialize};

/// Tolerance on the sum of state fractions.
pub const FRACTION_SUM_TOL: f64 = 1e-6;

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

/// A plan for every rank of a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Name of the planner that produced it (`manual` for user-given plans).
    pub planner: String,
    /// One entry per rank, in rank order.
    pub gpus: Vec<RankPlan>,
}

#[derive(Deserialize)]
struct ReferencePlanFile {
    uneven_batch_sizes: Vec<u32>,
    uneven_microbatches: Vec<u32>,
    #[serde(default)]
    split_uneven_partitions: Option<Vec<f64>>,
}

impl Plan {
    /// Builds a plan from per-rank lists (`--batch`, `--microbatches`,
    /// `--state-fractions`); missing fractions mean an even split.
    pub fn from_lists(
        batch: &[u32],
        microbatches: &[u32],
        fractions: Option<&[f64]>,
        origin: &str,
    ) -> Result<Plan, PlanError> {
        if batch.len() != microbatches.len() {
            return Err(PlanError::invalid(
                origin,
                "microbatches",
                format!(
                    "expected one micro-batch count per rank ({} batch entries), got {}",
                    batch.len(),
                    microbatches.len()
                ),
            ));
        }
        let g = batch.len();
        let even = vec![1.0 / g.max(1) as f64; g];
        let fr = fractions.unwrap_or(&even);
        if fr.len() != g {
            return Err(PlanError::invalid(
                origin,
                "state_fractions",
                format!("expected {g} fractions (one per rank), got {}", fr.len()),
            ));
        }
        let gpus = batch
            .iter()
            .zip(microbatches)
            .zip(fr)
            .enumerate()
            .map(|(i, ((&b, &n), &r))| {
                if b > 0 && n == 0 {
                    return Err(PlanError::invalid(
                        origin,
                        format!("microbatches[{i}]"),
                        "expected a micro-batch count >= 1 for a rank with samples",
                    ));
                }
                if n > b {
                    return Err(PlanError::invalid(
                        origin,
                        format!("microbatches[{i}]"),
                        format!("{n} micro-batches for a local batch of {b}: expected at most {b}"),
                    ));
                }
                Ok(RankPlan::new(b, n, r))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Plan {
            planner: "manual".into(),
            gpus,
        })
    }

    /// Parses a plan file (this project's form or the reference optimizer's).
    pub fn from_json(text: &str, origin: &str) -> Result<Plan, PlanError> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| PlanError::invalid(origin, "<root>", format!("cannot parse JSON: {e}")))?;
        if v.get("uneven_batch_sizes").is_some() {
            let r: ReferencePlanFile = serde_json::from_value(v)
                .map_err(|e| PlanError::invalid(origin, "<root>", e.to_string()))?;
            let mut p = Plan::from_lists(
                &r.uneven_batch_sizes,
                &r.uneven_microbatches,
                r.split_uneven_partitions.as_deref(),
                origin,
            )?;
            p.planner = "reference".into();
            return Ok(p);
        }
        let p: Plan = serde_json::from_value(v).map_err(|e| {
            PlanError::invalid(
                origin,
                "<root>",
                format!("expected {{\"planner\": .., \"gpus\": [{{\"batch\", \"microbatches\", \"microbatch_size\", \"state_fraction\"}}]}}: {e}"),
            )
        })?;
        Ok(p)
    }

    /// The global batch (sum of local batches).
    pub fn global_batch(&self) -> u32 {
        self.gpus.iter().map(|g| g.batch).sum()
    }

    /// State fractions in rank order.
    pub fn state_fractions(&self) -> Vec<f64> {
        self.gpus.iter().map(|g| g.state_fraction).collect()
    }

    /// Checks the plan against a workload of `ranks` GPUs and `global_batch`
    /// samples: counts, sums, micro-batch consistency, fractions in [0, 1]
    /// summing to 1.
    pub fn validate(&self, ranks: usize, global_batch: u32, origin: &str) -> Result<(), PlanError> {
        if self.gpus.len() != ranks {
            return Err(PlanError::invalid(
                origin,
                "gpus",
                format!(
                    "the plan has {} entries but the cluster has {ranks} GPUs",
                    self.gpus.len()
                ),
            ));
        }
        if self.global_batch() != global_batch {
            return Err(PlanError::invalid(
                origin,
                "batch",
                format!(
                    "local batches sum to {} but the global batch is {global_batch}",
                    self.global_batch()
                ),
            ));
        }
        for (i, g) in self.gpus.iter().enumerate() {
            let f = |x: &str| format!("gpus[{i}].{x}");
            if g.batch == 0 {
                if g.microbatches != 0 || g.microbatch_size != 0 {
                    return Err(PlanError::invalid(
                        origin,
                        f("microbatches"),
                        "a rank with batch 0 must have 0 micro-batches of size 0",
                    ));
                }
            } else {
                if g.microbatches == 0 || g.microbatches > g.batch {
                    return Err(PlanError::invalid(
                        origin,
                        f("microbatches"),
                        format!(
                            "expected 1..={} micro-batches, got {}",
                            g.batch, g.microbatches
                        ),
                    ));
                }
                if g.microbatch_size != g.batch.div_ceil(g.microbatches) {
                    return Err(PlanError::invalid(
                        origin,
                        f("microbatch_size"),
                        format!(
                            "batch {} in {} micro-batches means size {}, got {}",
                            g.batch,
                            g.microbatches,
                            g.batch.div_ceil(g.microbatches),
                            g.microbatch_size
                        ),
                    ));
                }
            }
            if !(g.state_fraction.is_finite() && (0.0..=1.0).contains(&g.state_fraction)) {
                return Err(PlanError::invalid(
                    origin,
                    f("state_fraction"),
                    format!("expected a fraction in [0, 1], got {}", g.state_fraction),
                ));
            }
        }
        let sum: f64 = self.gpus.iter().map(|g| g.state_fraction).sum();
        if (sum - 1.0).abs() > FRACTION_SUM_TOL {
            return Err(PlanError::invalid(
                origin,
                "state_fractions",
                format!("state fractions sum to {sum:.9}, expected 1"),
            ));
        }
        Ok(())
    }

    /// Serialises the plan as pretty JSON (the `--out plan.json` form).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("plan serialises");
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_build_consistent_plan() {
        let p = Plan::from_lists(&[13, 12, 34, 5], &[1, 2, 1, 1], None, "--batch").unwrap();
        assert_eq!(p.gpus[1].microbatch_size, 6);
        assert_eq!(p.global_batch(), 64);
        p.validate(4, 64, "t").unwrap();
        assert_eq!(p.gpus[1].microbatch_sizes(), vec![6, 6]);
        let q = Plan::from_lists(&[5], &[2], None, "x").unwrap();
        assert_eq!(q.gpus[0].microbatch_sizes(), vec![3, 2]);
    }

    #[test]
    fn rejects_bad_sums_and_counts() {
        let p = Plan::from_lists(&[13, 12, 34, 5], &[1, 2, 1, 1], None, "--batch").unwrap();
        assert!(
            matches!(p.validate(4, 65, "t"), Err(PlanError::Invalid { ref field, .. }) if field == "batch")
        );
        assert!(p.validate(3, 64, "t").is_err());
        assert!(Plan::from_lists(&[1, 2], &[1], None, "x").is_err());
        assert!(Plan::from_lists(&[2], &[3], None, "x").is_err());
        let bad = Plan::from_lists(&[2, 2], &[1, 1], Some(&[0.7, 0.7]), "x").unwrap();
        assert!(bad.validate(2, 4, "x").is_err());
    }

    #[test]
    fn reads_reference_plan() {
        let t = r#"{"uneven_batch_sizes":[13,12,34,5],"uneven_microbatches":[1,2,1,1],"split_uneven_partitions":[0.25,0.25,0.25,0.25]}"#;
        let p = Plan::from_json(t, "f").unwrap();
        assert_eq!(p.gpus[1].microbatches, 2);
        let back = Plan::from_json(&p.to_json(), "g").unwrap();
        assert_eq!(back, p);
    }
}
