//! The plan: the training strategy and what every GPU does in one iteration.
//!
//! Per rank i: local batch `b_i` (samples), micro-batch count `n_i`,
//! micro-batch size `m_i` and state fraction `r_i` (share of the sharded
//! training state it holds, within its shard group). `b_i` is split into
//! `n_i` micro-batches whose sizes differ by at most one (`m_i` is the
//! largest); planners emit exact splits `b_i = n_i * m_i`. A rank with
//! `b_i = 0` computes nothing but still holds its state shard and joins
//! every collective. The [`Strategy`] says how the iteration runs; its shard
//! group size makes the shard groups (consecutive ranks) part of the plan.
//!
//! Its file form (what `cephalo plan --out` writes, and the reference
//! optimizer's output) is [`mod@file`].
//!
//! Validity per strategy: state fractions sum to 1 inside every shard group,
//! and under hybrid sharding position `j` holds the same fraction in every
//! group (its shard is all-reduced with the others'). Micro-batch-major
//! accumulation runs as many passes as the largest micro-batch count; a
//! GPU with fewer micro-batches joins the remaining passes' collectives
//! without computing (an empty micro-batch).

pub mod file;
pub mod pipeline;
pub mod pipeline_layout;
pub mod rank;
pub mod shape;

use crate::error::PlanError;
use crate::strategy::{Attention, Sharding, Strategy};
use pipeline::Pipeline;
use rank::RankPlan;
use serde::{Deserialize, Serialize};

/// Tolerance on the sum of state fractions.
pub const FRACTION_SUM_TOL: f64 = 1e-6;

/// A plan for every rank of a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Name of the planner that produced it (`manual` for user-given plans).
    pub planner: String,
    /// How the iteration runs.
    pub strategy: Strategy,
    /// One entry per rank, in rank order (for a pipeline, derived from it:
    /// [`Pipeline::rank_plans`]).
    pub gpus: Vec<RankPlan>,
    /// The pipeline, for a pipeline-parallel plan (`None`: data-parallel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Pipeline>,
}

impl Plan {
    /// Builds a plan from per-rank lists (`--batch`, `--microbatches`,
    /// `--state-fractions`); missing fractions mean an even split. The
    /// strategy is Cephalo's ([`Strategy::cephalo`], eager attention); set
    /// another with [`Plan::with_strategy`].
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
            strategy: Strategy::cephalo(g as u32, Attention::Eager),
            gpus,
            pipeline: None,
        })
    }

    /// The same plan under `strategy`.
    pub fn with_strategy(mut self, strategy: Strategy) -> Plan {
        self.strategy = strategy;
        self
    }

    /// The global batch: the sum of local batches (of a pipeline, the
    /// first stage's).
    pub fn global_batch(&self) -> u32 {
        match &self.pipeline {
            Some(p) => p.stages.first().map_or(0, |s| {
                s.gpus
                    .iter()
                    .map(|&r| self.gpus.get(r as usize).map_or(0, |g| g.batch))
                    .sum()
            }),
            None => self.gpus.iter().map(|g| g.batch).sum(),
        }
    }

    /// One line for tables: the strategy's label, and a pipeline's shape
    /// before it.
    pub fn label(&self) -> String {
        match &self.pipeline {
            Some(p) => format!("{} + {}", p.label(), self.strategy.label()),
            None => self.strategy.label(),
        }
    }

    /// A pipeline plan: `pipe` with the per-GPU entries it implies for a
    /// cluster of `ranks` GPUs and a global batch of `batch` samples.
    pub fn pipelined(
        planner: &str,
        strategy: Strategy,
        pipe: Pipeline,
        ranks: usize,
        batch: u32,
    ) -> Plan {
        Plan {
            planner: planner.to_string(),
            gpus: pipe.rank_plans(ranks, batch, &strategy),
            strategy,
            pipeline: Some(pipe),
        }
    }

    /// State fractions in rank order.
    pub fn state_fractions(&self) -> Vec<f64> {
        self.gpus.iter().map(|g| g.state_fraction).collect()
    }

    /// Checks the plan against a workload of `ranks` GPUs and `global_batch`
    /// samples: counts, sums, micro-batch consistency, fractions in [0, 1]
    /// summing to 1 in every shard group, and what the strategy requires
    /// (see the module docs).
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
        if let Some(pipe) = &self.pipeline {
            return self.validate_pipeline(pipe, ranks, global_batch, origin);
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
            validate_entry(i, g, origin)?;
        }
        self.validate_shard_groups(ranks, origin)
    }

    /// [`Plan::validate`]'s strategy part: a shard group size that divides
    /// the GPUs (all of them unless hybrid), state fractions summing to 1 in
    /// every group, and under hybrid sharding the same fraction at each
    /// position of every group.
    fn validate_shard_groups(&self, ranks: usize, origin: &str) -> Result<(), PlanError> {
        let st = &self.strategy;
        let g = st.shard_group as usize;
        if g == 0 || !ranks.is_multiple_of(g) {
            return Err(PlanError::invalid(
                origin,
                "strategy.shard_group",
                format!("a shard group of {g} GPUs does not divide the {ranks} GPUs"),
            ));
        }
        if st.sharding != Sharding::Hybrid && g != ranks {
            return Err(PlanError::invalid(
                origin,
                "strategy.shard_group",
                format!(
                    "sharding `{}` uses one group of all {ranks} GPUs, got {g}",
                    st.sharding.name()
                ),
            ));
        }
        let groups = st.groups(ranks);
        for k in 0..groups.count() {
            let sum: f64 = self.gpus[groups.shard_group(k)]
                .iter()
                .map(|g| g.state_fraction)
                .sum();
            if (sum - 1.0).abs() > FRACTION_SUM_TOL {
                let what = if groups.count() > 1 {
                    format!("state fractions of shard group {k} (ranks {:?}) sum to {sum:.9}, expected 1", groups.shard_group(k))
                } else {
                    format!("state fractions sum to {sum:.9}, expected 1")
                };
                return Err(PlanError::invalid(origin, "state_fractions", what));
            }
        }
        for r in g..ranks {
            let (a, b) = (self.gpus[r].state_fraction, self.gpus[r % g].state_fraction);
            if (a - b).abs() > FRACTION_SUM_TOL {
                return Err(PlanError::invalid(
                    origin,
                    format!("gpus[{r}].state_fraction"),
                    format!(
                        "hybrid sharding all-reduces the shard at position {} of every group, so it needs the same fraction in every group: {a} here, {b} at rank {}",
                        r % g,
                        r % g
                    ),
                ));
            }
        }
        Ok(())
    }

    /// [`Plan::validate`] of a pipeline plan: the pipeline's structure and
    /// strategy, one group of all GPUs (HSDP: its shard group, checked per
    /// stage by the pipeline), and per-GPU entries equal to the ones the
    /// pipeline implies.
    fn validate_pipeline(
        &self,
        pipe: &Pipeline,
        ranks: usize,
        global_batch: u32,
        origin: &str,
    ) -> Result<(), PlanError> {
        let st = &self.strategy;
        pipe.validate(ranks, None, global_batch, st, origin)?;
        if st.sharding != crate::strategy::Sharding::Hybrid && st.shard_group as usize != ranks {
            return Err(PlanError::invalid(
                origin,
                "strategy.shard_group",
                format!(
                    "a pipeline plan's strategy spans all {ranks} GPUs, got a group of {}",
                    st.shard_group
                ),
            ));
        }
        let want = pipe.rank_plans(ranks, global_batch, st);
        for (i, (g, w)) in self.gpus.iter().zip(&want).enumerate() {
            let f = |x: &str| format!("gpus[{i}].{x}");
            let pairs = [
                ("batch", g.batch, w.batch),
                ("microbatches", g.microbatches, w.microbatches),
                ("microbatch_size", g.microbatch_size, w.microbatch_size),
            ];
            for (name, got, expected) in pairs {
                if got != expected {
                    return Err(PlanError::invalid(
                        origin,
                        f(name),
                        format!(
                            "the pipeline gives this GPU {name} {expected}, the entry says {got}"
                        ),
                    ));
                }
            }
            if (g.state_fraction - w.state_fraction).abs() > FRACTION_SUM_TOL {
                return Err(PlanError::invalid(
                    origin,
                    f("state_fraction"),
                    format!(
                        "the pipeline gives this GPU {} of its stage's state, the entry says {}",
                        w.state_fraction, g.state_fraction
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The micro-batch passes of a micro-batch-major schedule (the common
    /// count), or of a layered one the largest count.
    pub fn passes(&self) -> u32 {
        self.gpus.iter().map(|g| g.microbatches).max().unwrap_or(0)
    }

    /// Serialises the plan as pretty JSON (planner, strategy, gpus).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("plan serialises");
        s.push('\n');
        s
    }
}

/// [`Plan::validate`]'s check of entry `i`: a rank without samples has no
/// micro-batches, one with samples 1..=batch micro-batches of the size the
/// split implies; the state fraction is in [0, 1].
fn validate_entry(i: usize, g: &RankPlan, origin: &str) -> Result<(), PlanError> {
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
        crate::limits::check_microbatches(origin, &f("microbatches"), g.microbatches as u64)?;
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
    Ok(())
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
    fn strategy_rules() {
        use crate::strategy::{Accumulation, Sharding};
        let base = Plan::from_lists(&[4, 4, 4, 4], &[2, 2, 1, 2], None, "t").unwrap();
        let mut s = base.strategy;
        s.accumulation = Accumulation::NoSync;
        let p = base.clone().with_strategy(s);
        p.validate(4, 16, "t").unwrap();
        assert_eq!(p.passes(), 2);
        let mut h = base.strategy;
        h.sharding = Sharding::Hybrid;
        h.shard_group = 2;
        let p = Plan::from_lists(&[4, 4, 4, 4], &[1; 4], Some(&[0.5, 0.5, 0.5, 0.5]), "t")
            .unwrap()
            .with_strategy(h);
        p.validate(4, 16, "t").unwrap();
        let q = Plan::from_lists(&[4, 4, 4, 4], &[1; 4], Some(&[0.4, 0.6, 0.6, 0.4]), "t")
            .unwrap()
            .with_strategy(h);
        let e = q.validate(4, 16, "t").unwrap_err().to_string();
        assert!(
            e.contains("gpus[2].state_fraction") && e.contains("same fraction"),
            "{e}"
        );
        h.shard_group = 3;
        assert!(p.with_strategy(h).validate(4, 16, "t").is_err());
    }
}
