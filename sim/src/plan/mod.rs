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
//! File form (`plan.json`, what `cephalo plan --out` writes):
//!
//! ```json
//! { "format": "cephalo-plan/1", "planner": "cephalo",
//!   "workload": { "model": "gpt-2.7b", "seq_len": 512, "dtype": "fp16",
//!                 "global_batch": 64, "gpus": ["l4", "l4", "rtx-a6000", "p40"] },
//!   "strategy": { "sharding": "full", "shard_group": 4, "accumulation": "layered",
//!                 "checkpointing": "full", "offload": "activations",
//!                 "param_dtype": "fp32", "reduce_dtype": "fp32", "attention": "eager" },
//!   "gpus": [ { "batch": 13, "microbatches": 1, "microbatch_size": 13, "state_fraction": 0.2253 }, ... ] }
//! ```
//!
//! A file's `workload` must match the run it is used for
//! ([`PlanFile::check_workload`]: the error names the field); older files
//! without `format` / `workload` still load. A file without `strategy`
//! (older files, the reference optimizer's output
//! `uneven_batch_sizes` / `uneven_microbatches` / `split_uneven_partitions`)
//! gets the strategy of the command's flags ([`PlanFile::into_plan`]).
//!
//! Validity per strategy: state fractions sum to 1 inside every shard group,
//! and under hybrid sharding position `j` holds the same fraction in every
//! group (its shard is all-reduced with the others'). Micro-batch-major
//! accumulation runs as many passes as the largest micro-batch count; a
//! GPU with fewer micro-batches joins the remaining passes' collectives
//! without computing (an empty micro-batch).

pub mod pipeline;

use crate::error::PlanError;
use crate::strategy::{Attention, Sharding, Strategy};
use pipeline::Pipeline;
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

/// Format tag of the plan files `cephalo plan --out` writes.
pub const PLAN_FORMAT: &str = "cephalo-plan/1";

/// The workload a plan was made for, recorded in its file: a plan made for
/// another model, sequence length, dtype, global batch or cluster is
/// refused instead of simulated as if it fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanWorkload {
    /// Model (canonical catalog name).
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Training precision.
    pub dtype: String,
    /// Global batch (samples).
    pub global_batch: u32,
    /// GPU types in rank order.
    pub gpus: Vec<String>,
}

impl PlanWorkload {
    /// The workload of a cost model.
    pub fn of(costs: &crate::cost::CostModel) -> PlanWorkload {
        let w = &costs.workload;
        PlanWorkload {
            model: w.model.name.clone(),
            seq_len: w.seq_len,
            dtype: w.dtype.to_string(),
            global_batch: w.global_batch,
            gpus: w.cluster.gpus.iter().map(|g| g.spec.name.clone()).collect(),
        }
    }
}

/// What a plan file holds: a plan whose strategy may be missing (older
/// files, the reference optimizer's output), and (files of this project)
/// its format tag and the workload it was made for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    /// Format tag ([`PLAN_FORMAT`]); absent in older files.
    #[serde(default)]
    pub format: Option<String>,
    /// Planner name.
    pub planner: String,
    /// The workload the plan was made for; absent in older files.
    #[serde(default)]
    pub workload: Option<PlanWorkload>,
    /// The recorded strategy, if any.
    #[serde(default)]
    pub strategy: Option<Strategy>,
    /// Per-rank entries.
    pub gpus: Vec<RankPlan>,
    /// The pipeline of a pipeline-parallel plan.
    #[serde(default)]
    pub pipeline: Option<Pipeline>,
    /// What a reference-optimizer plan says of its workload (its own field
    /// names), checked like [`PlanFile::workload`].
    #[serde(skip)]
    pub reference: Option<ReferenceWorkload>,
}

/// The workload fields of a plan in the reference optimizer's format
/// (`model_name`, `seq_length`, `autocast_dtype`, the batch list), each
/// absent when the file leaves it out.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct ReferenceWorkload {
    /// Model key (`deepspeedgpt_2.7b`): a catalog name or alias.
    #[serde(default)]
    pub model_name: Option<String>,
    /// Sequence length key (the reference's; ViT keys run the image's tokens).
    #[serde(default)]
    pub seq_length: Option<u32>,
    /// Autocast dtype (`float16`, `torch.bfloat16`, ...).
    #[serde(default)]
    pub autocast_dtype: Option<String>,
    /// Per-rank batches.
    pub uneven_batch_sizes: Vec<u32>,
}

impl ReferenceWorkload {
    /// Checks the file's workload against `now`; the error names the
    /// reference field that differs. A model is resolved through the
    /// built-in catalog (the reference keys are its aliases), and a ViT's
    /// sequence key through its image's token count.
    fn check(&self, now: &PlanWorkload, origin: &str) -> Result<(), PlanError> {
        let differ = |field: &str, file: String, here: String| {
            PlanError::invalid(
                origin,
                field,
                format!("the plan was made for {file}, this run is {here}"),
            )
        };
        let model = self
            .model_name
            .as_deref()
            .map(|m| (m, crate::model::ModelCatalog::builtin().get(m)));
        if let Some((name, spec)) = model {
            let same = crate::model::normalize_model_name(name)
                == crate::model::normalize_model_name(&now.model)
                || spec.is_some_and(|s| s.name == now.model);
            if !same {
                return Err(differ("model_name", name.to_string(), now.model.clone()));
            }
        }
        if let Some(seq) = self.seq_length {
            let tokens = match model.and_then(|m| m.1) {
                Some(spec) => spec.tokens_per_sample(seq),
                None => seq,
            };
            if tokens != now.seq_len {
                return Err(differ(
                    "seq_length",
                    format!("{seq} ({tokens} tokens per sample)"),
                    format!("{} tokens per sample", now.seq_len),
                ));
            }
        }
        if let Some(d) = &self.autocast_dtype {
            let key = d.trim().trim_start_matches("torch.");
            match crate::dtype::Dtype::parse(key) {
                Some(dt) if dt.to_string() == now.dtype => {}
                Some(dt) => {
                    return Err(differ("autocast_dtype", dt.to_string(), now.dtype.clone()))
                }
                None => {
                    return Err(PlanError::invalid(
                        origin,
                        "autocast_dtype",
                        format!("expected float16, bfloat16 or float32, got `{d}`"),
                    ))
                }
            }
        }
        if self.uneven_batch_sizes.len() != now.gpus.len() {
            return Err(differ(
                "uneven_batch_sizes",
                format!("{} GPUs", self.uneven_batch_sizes.len()),
                format!("{} GPUs", now.gpus.len()),
            ));
        }
        let sum: u64 = self.uneven_batch_sizes.iter().map(|&b| b as u64).sum();
        if sum != now.global_batch as u64 {
            return Err(differ(
                "uneven_batch_sizes",
                format!("a global batch of {sum}"),
                format!("{}", now.global_batch),
            ));
        }
        Ok(())
    }
}

impl PlanFile {
    /// Parses a plan file (this project's form or the reference optimizer's).
    pub fn from_json(text: &str, origin: &str) -> Result<PlanFile, PlanError> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| PlanError::invalid(origin, "<root>", format!("cannot parse JSON: {e}")))?;
        if v.get("uneven_batch_sizes").is_some() {
            let r: ReferencePlanFile = serde_json::from_value(v)
                .map_err(|e| PlanError::invalid(origin, "<root>", e.to_string()))?;
            let p = Plan::from_lists(
                &r.workload.uneven_batch_sizes,
                &r.uneven_microbatches,
                r.split_uneven_partitions.as_deref(),
                origin,
            )?;
            return Ok(PlanFile {
                format: None,
                planner: "reference".into(),
                workload: None,
                strategy: None,
                gpus: p.gpus,
                pipeline: None,
                reference: Some(r.workload),
            });
        }
        let file: PlanFile = serde_json::from_value(v).map_err(|e| {
            PlanError::invalid(
                origin,
                "<root>",
                format!("expected {{\"planner\": .., \"strategy\": {{..}}, \"gpus\": [{{\"batch\", \"microbatches\", \"microbatch_size\", \"state_fraction\"}}]}}: {e}"),
            )
        })?;
        if let Some(f) = file.format.as_deref().filter(|f| *f != PLAN_FORMAT) {
            return Err(PlanError::invalid(
                origin,
                "format",
                format!("expected {PLAN_FORMAT}, got {f}"),
            ));
        }
        Ok(file)
    }

    /// Checks the recorded workload (if any) against the one the plan is
    /// about to run on; the error names the first field that differs.
    pub fn check_workload(&self, now: &PlanWorkload, origin: &str) -> Result<(), PlanError> {
        if let Some(r) = &self.reference {
            r.check(now, origin)?;
        }
        let Some(w) = &self.workload else {
            return Ok(());
        };
        let differ = |field: &str, file: String, here: String| -> Result<(), PlanError> {
            if file == here {
                Ok(())
            } else {
                Err(PlanError::invalid(
                    origin,
                    format!("workload.{field}"),
                    format!("the plan was made for {file}, this run is {here}"),
                ))
            }
        };
        differ("model", w.model.clone(), now.model.clone())?;
        differ("seq_len", w.seq_len.to_string(), now.seq_len.to_string())?;
        differ("dtype", w.dtype.clone(), now.dtype.clone())?;
        differ(
            "global_batch",
            w.global_batch.to_string(),
            now.global_batch.to_string(),
        )?;
        differ("gpus", w.gpus.join(","), now.gpus.join(","))
    }

    /// The strategy this file runs under the flags `spec`: the recorded one
    /// (checked against the flags and the cluster), else the flags'
    /// resolved in `ctx`.
    pub fn strategy_under(
        &self,
        spec: &crate::strategy::StrategySpec,
        ctx: &crate::strategy::StrategyContext<'_>,
        origin: &str,
    ) -> Result<Strategy, PlanError> {
        match self.strategy {
            Some(s) => {
                spec.check_agrees(&s, origin)?;
                crate::strategy::validate(&s, ctx.cluster)?;
                Ok(s)
            }
            None => Ok(spec.resolve(ctx)?),
        }
    }

    /// The plan with the recorded strategy, or `fallback` when none was recorded.
    pub fn into_plan(self, fallback: Strategy) -> Plan {
        Plan {
            planner: self.planner,
            strategy: self.strategy.unwrap_or(fallback),
            gpus: self.gpus,
            pipeline: self.pipeline,
        }
    }
}

#[derive(Deserialize)]
struct ReferencePlanFile {
    /// The workload fields, the batch list among them.
    #[serde(flatten)]
    workload: ReferenceWorkload,
    uneven_microbatches: Vec<u32>,
    #[serde(default)]
    split_uneven_partitions: Option<Vec<f64>>,
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
            gpus: pipe.rank_plans(ranks, batch, strategy.sharding),
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
                crate::limits::check_microbatches(
                    origin,
                    &f("microbatches"),
                    g.microbatches as u64,
                )?;
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
    /// strategy, one group of all GPUs, and per-GPU entries equal to the
    /// ones the pipeline implies.
    fn validate_pipeline(
        &self,
        pipe: &Pipeline,
        ranks: usize,
        global_batch: u32,
        origin: &str,
    ) -> Result<(), PlanError> {
        let st = &self.strategy;
        pipe.validate(ranks, None, global_batch, st, origin)?;
        if st.shard_group as usize != ranks {
            return Err(PlanError::invalid(
                origin,
                "strategy.shard_group",
                format!(
                    "a pipeline plan's strategy spans all {ranks} GPUs, got a group of {}",
                    st.shard_group
                ),
            ));
        }
        let want = pipe.rank_plans(ranks, global_batch, st.sharding);
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

    /// The plan file `cephalo plan --out` writes: [`PLAN_FORMAT`], the
    /// planner, the workload it was made for, the strategy and the gpus.
    pub fn to_file_json(&self, workload: &PlanWorkload) -> String {
        #[derive(Serialize)]
        struct File<'a> {
            format: &'static str,
            planner: &'a str,
            workload: &'a PlanWorkload,
            strategy: &'a Strategy,
            gpus: &'a [RankPlan],
            #[serde(skip_serializing_if = "Option::is_none")]
            pipeline: Option<&'a Pipeline>,
        }
        let f = File {
            format: PLAN_FORMAT,
            planner: &self.planner,
            workload,
            strategy: &self.strategy,
            gpus: &self.gpus,
            pipeline: self.pipeline.as_ref(),
        };
        let mut s = serde_json::to_string_pretty(&f).expect("plan serialises");
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
        let f = PlanFile::from_json(t, "f").unwrap();
        assert_eq!(f.strategy, None);
        let p = f.into_plan(Strategy::cephalo(4, Attention::Flash));
        assert_eq!(p.gpus[1].microbatches, 2);
        assert_eq!(p.strategy.attention, Attention::Flash);
        let back = PlanFile::from_json(&p.to_json(), "g").unwrap();
        assert_eq!(back.strategy, Some(p.strategy));
        assert_eq!(back.into_plan(Strategy::cephalo(4, Attention::Eager)), p);
        let unknown = r#"{"planner":"x","gpus":[],"extra":1}"#;
        let e = PlanFile::from_json(unknown, "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.json") && e.contains("extra"), "{e}");
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

    #[test]
    fn plan_files_record_their_workload_and_format() {
        let p = Plan::from_lists(&[3, 5], &[1, 1], None, "t").unwrap();
        let w = PlanWorkload {
            model: "gpt-1.3b".into(),
            seq_len: 512,
            dtype: "fp16".into(),
            global_batch: 8,
            gpus: vec!["l4".into(), "l4".into()],
        };
        let text = p.to_file_json(&w);
        let f = PlanFile::from_json(&text, "p.json").unwrap();
        assert_eq!(f.format.as_deref(), Some(PLAN_FORMAT));
        f.check_workload(&w, "p.json").unwrap();
        for (field, other) in [
            (
                "model",
                PlanWorkload {
                    model: "gpt-2.7b".into(),
                    ..w.clone()
                },
            ),
            (
                "seq_len",
                PlanWorkload {
                    seq_len: 1024,
                    ..w.clone()
                },
            ),
            (
                "dtype",
                PlanWorkload {
                    dtype: "bf16".into(),
                    ..w.clone()
                },
            ),
            (
                "global_batch",
                PlanWorkload {
                    global_batch: 16,
                    ..w.clone()
                },
            ),
            (
                "gpus",
                PlanWorkload {
                    gpus: vec!["t4".into(), "l4".into()],
                    ..w.clone()
                },
            ),
        ] {
            let e = f.check_workload(&other, "p.json").unwrap_err().to_string();
            assert!(e.contains(&format!("workload.{field}")), "{e}");
        }
        let e = PlanFile::from_json(&text.replace(PLAN_FORMAT, "cephalo-plan/9"), "p.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("format") && e.contains("cephalo-plan/9"), "{e}");
        // Older files (no format, no workload) still load and are not checked.
        let old = PlanFile::from_json(&p.to_json(), "old.json").unwrap();
        old.check_workload(&w, "old.json").unwrap();
    }

    #[test]
    fn reference_plans_are_checked_against_the_workload() {
        let t = r#"{"model_name": "deepspeedgpt_2.7b", "uneven_batch_sizes": [13, 12, 34, 5],
            "uneven_microbatches": [1, 2, 1, 1], "seq_length": 512, "autocast_dtype": "float16",
            "split_uneven": true, "ga": true}"#;
        let f = PlanFile::from_json(t, "ref.json").unwrap();
        let w = PlanWorkload {
            model: "gpt-2.7b".into(),
            seq_len: 512,
            dtype: "fp16".into(),
            global_batch: 64,
            gpus: vec!["l4".into(), "l4".into(), "a6000".into(), "p40".into()],
        };
        f.check_workload(&w, "ref.json").unwrap();
        for (field, other) in [
            (
                "model_name",
                PlanWorkload {
                    model: "gpt-1.3b".into(),
                    ..w.clone()
                },
            ),
            (
                "seq_length",
                PlanWorkload {
                    seq_len: 1024,
                    ..w.clone()
                },
            ),
            (
                "autocast_dtype",
                PlanWorkload {
                    dtype: "fp32".into(),
                    ..w.clone()
                },
            ),
            (
                "uneven_batch_sizes",
                PlanWorkload {
                    global_batch: 65,
                    ..w.clone()
                },
            ),
            (
                "uneven_batch_sizes",
                PlanWorkload {
                    gpus: vec!["l4".into(); 5],
                    ..w.clone()
                },
            ),
        ] {
            let e = f
                .check_workload(&other, "ref.json")
                .unwrap_err()
                .to_string();
            assert!(e.contains("ref.json") && e.contains(field), "{field}: {e}");
        }
    }
}
