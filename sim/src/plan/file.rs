//! The plan file (`cephalo plan --out`, [`PLAN_FORMAT`]) and the
//! reference optimizer's output: the workload a plan was made for, reading
//! a file back into a [`Plan`] and writing one.
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

use super::pipeline::Pipeline;
use super::rank::RankPlan;
use super::Plan;
use crate::error::PlanError;
use crate::strategy::Strategy;
use serde::{Deserialize, Serialize};

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
            match crate::precision::NumFormat::parse(key) {
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
    use crate::strategy::Attention;

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
