//! `cephalo plan`'s output (`cephalo-plan-output/2`): the plan a planner
//! chose, its simulator summary, the native planner's best plan per
//! strategy considered, each family's best under `plan`'s default search
//! and an export's figures beside the plan; its JSON schema is the types
//! below, its text the table [`PlanOutput::table`] writes.

use crate::cost::CostModel;
use crate::planner::{Planned, SearchSummary};
use crate::report::{Report, SimulatedSummary};
use crate::session::BestOfFamilies;
use crate::strategy::Strategy;
use serde::Serialize;

/// `plan --format json`'s `export` field: the exported framework's figures
/// beside the plan's (see [`crate::export::Exported`]).
#[derive(Debug, Clone, Serialize)]
pub struct ExportOut {
    /// The framework.
    pub framework: &'static str,
    /// The file written.
    pub path: String,
    /// The degrees and batch sizes the config states.
    pub shape: crate::export::Shape,
    /// The strategy the framework runs.
    pub strategy: Strategy,
    /// What the framework cannot express or changes.
    pub notes: Vec<String>,
    /// The plan's simulated figures.
    pub planned: crate::export::Figures,
    /// The approximation's simulated figures (`null`: not simulated).
    pub approximated: Option<crate::export::Figures>,
    /// Approximation's iteration time over the plan's.
    pub slowdown: Option<f64>,
    /// The approximation's local batch per rank.
    pub approximation_batch_sizes: Vec<u32>,
    /// The approximation's micro-batch count per rank.
    pub approximation_microbatches: Vec<u32>,
}

/// The best plan under one strategy the native planner considered.
#[derive(Debug, Clone, Serialize)]
pub struct ConsideredOut {
    /// The strategy.
    pub strategy: Strategy,
    /// One-line label.
    pub label: String,
    /// Simulated (or fast-model) iteration time of its best plan, ms
    /// (`None` with a closed-form time: too slow in the closed form to be
    /// worth evaluating).
    pub iteration_ms: Option<f64>,
    /// Whether that time comes from the simulator.
    pub simulated: bool,
    /// Closed-form time of that plan, ms.
    pub closed_form_ms: Option<f64>,
    /// Whether that plan runs out of memory.
    pub oom: bool,
    /// Local batch per rank.
    pub batch_sizes: Vec<u32>,
    /// Micro-batch count per rank.
    pub microbatches: Vec<u32>,
    /// Why there is no plan.
    pub note: Option<String>,
}

/// `cephalo plan --format json` output (`cephalo-plan-output/2`).
///
/// * `strategy`: the plan's training strategy;
/// * `considered`: native planner only, the best plan under every strategy
///   it searched (fastest first);
/// * `batch_sizes`, `microbatches` (counts), `microbatch_sizes` (largest
///   micro-batch), `state_fractions`: per rank, in rank order;
/// * `makespan_ms_per_block`, `max_bs_even_shard`, `max_bs`: the reference
///   optimizer's figures (compat planner only, else absent);
/// * `objective`: the planner's own objective (name and ms), if it has one;
/// * `mem_policy`, `mem_fraction`, `overhead_gib`: the memory rule the plan
///   was made and judged under, as the simulator's report states it (the
///   notes say when it was the planner's default);
/// * `simulated`: the simulator's verdict on the plan;
/// * `plan`: the plan file form (`--out`).
#[derive(Debug, Clone, Serialize)]
pub struct PlanOutput {
    /// Schema tag.
    pub format: &'static str,
    /// Planner name.
    pub planner: String,
    /// Model (canonical name).
    pub model: String,
    /// GPUs in rank order.
    pub gpus: Vec<String>,
    /// Global batch.
    pub global_batch: u32,
    /// Precision.
    pub dtype: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// The plan's strategy.
    pub strategy: Strategy,
    /// Local batch per rank.
    pub batch_sizes: Vec<u32>,
    /// Micro-batch count per rank.
    pub microbatches: Vec<u32>,
    /// Largest micro-batch size per rank.
    pub microbatch_sizes: Vec<u32>,
    /// State fraction per rank.
    pub state_fractions: Vec<f64>,
    /// Compat: the reference objective (slowest rank's per-block ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub makespan_ms_per_block: Option<f64>,
    /// Compat: per-rank micro-batch bound with an even shard.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bs_even_shard: Option<Vec<u32>>,
    /// Compat: per-rank micro-batch bound with no state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bs: Option<Vec<u32>>,
    /// Compat: the reference code's own (even) state fractions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_state_fractions: Option<Vec<f64>>,
    /// The planner's objective, if any.
    pub objective: Option<ObjectiveOut>,
    /// The memory rule: `physical` or `fraction`.
    pub mem_policy: &'static str,
    /// The fraction rule's fraction of capacity (`null`: physical).
    pub mem_fraction: Option<f64>,
    /// Memory outside the allocator per GPU, GiB.
    pub overhead_gib: f64,
    /// Simulated outcome.
    pub simulated: SimulatedSummary,
    /// Search counts.
    pub search: SearchSummary,
    /// Native planner: the best plan per strategy considered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub considered: Vec<ConsideredOut>,
    /// Where each GPU type's numbers came from.
    pub sources: Vec<crate::report::SourceLine>,
    /// With measured collectives: which of the plan's collectives were
    /// timed from them (per kind and group shape).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub comm_sources: Vec<crate::report::CommSourceStat>,
    /// Remarks (state-only GPUs, fallbacks).
    pub notes: Vec<String>,
    /// The plan in file form.
    pub plan: crate::plan::Plan,
    /// A pipeline plan's stages as simulated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<crate::report::PipelineReport>,
    /// `--planner best`: each family's best plan (absent with one planner).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub families: Vec<FamilyOut>,
    /// `--export`: the framework's approximation beside the plan.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export: Option<ExportOut>,
}

/// One family's best plan in `plan`'s default search.
#[derive(Debug, Clone, Serialize)]
pub struct FamilyOut {
    /// The family (`data-parallel`, `pipeline`, `3d`).
    pub family: &'static str,
    /// Its fastest planner whose plan fits (absent: none fits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planner: Option<&'static str>,
    /// That plan's simulated iteration, ms (absent: none fits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iteration_ms: Option<f64>,
    /// Whether it is the plan `plan` returned.
    pub won: bool,
}

/// A named objective value.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectiveOut {
    /// Objective name.
    pub name: String,
    /// Value, ms.
    pub value_ms: f64,
}

impl PlanOutput {
    /// The output of `planned`, made for the workload of `costs` and
    /// simulated as `report` says (no families, no export: the caller adds
    /// them when it ran them).
    pub fn of(costs: &CostModel, planned: &Planned, report: &Report) -> PlanOutput {
        let w = &costs.workload;
        let p = &planned.plan;
        let compat = planned.compat.as_ref();
        let mut considered: Vec<ConsideredOut> = planned
            .considered
            .iter()
            .map(|c| ConsideredOut {
                strategy: c.strategy,
                label: c.strategy.label(),
                iteration_ms: c.iteration_ms,
                simulated: c.simulated,
                closed_form_ms: c.closed_form_ms,
                oom: c.oom,
                batch_sizes: c
                    .plan
                    .as_ref()
                    .map_or(vec![], |p| p.gpus.iter().map(|g| g.batch).collect()),
                microbatches: c
                    .plan
                    .as_ref()
                    .map_or(vec![], |p| p.gpus.iter().map(|g| g.microbatches).collect()),
                note: c.note.clone(),
            })
            .collect();
        considered.sort_by(|a, b| {
            let k = |c: &ConsideredOut| {
                let ms = c.iteration_ms.or(c.closed_form_ms);
                (c.oom || ms.is_none(), ms.unwrap_or(f64::INFINITY))
            };
            let (x, y) = (k(a), k(b));
            x.0.cmp(&y.0).then(x.1.total_cmp(&y.1))
        });
        PlanOutput {
            format: "cephalo-plan-output/2",
            planner: p.planner.clone(),
            model: w.model.name.clone(),
            gpus: w.cluster.gpu_names(),
            global_batch: w.global_batch,
            dtype: w.dtype.to_string(),
            seq_len: w.seq_len,
            strategy: p.strategy,
            batch_sizes: p.gpus.iter().map(|g| g.batch).collect(),
            microbatches: p.gpus.iter().map(|g| g.microbatches).collect(),
            microbatch_sizes: p.gpus.iter().map(|g| g.microbatch_size).collect(),
            state_fractions: p.state_fractions(),
            makespan_ms_per_block: compat.map(|c| c.makespan_ms_per_block),
            max_bs_even_shard: compat.map(|c| c.max_bs_even_shard.clone()),
            max_bs: compat.map(|c| c.max_bs.clone()),
            reference_state_fractions: compat.map(|c| c.reference_state_fractions.clone()),
            objective: planned.objective.as_ref().map(|o| ObjectiveOut {
                name: o.name.to_string(),
                value_ms: o.value_ms,
            }),
            mem_policy: report.mem_policy.name(),
            mem_fraction: report.mem_policy.fraction(),
            overhead_gib: report.overhead_gib,
            simulated: SimulatedSummary::of(report),
            search: SearchSummary::from(&planned.stats),
            considered,
            sources: report.sources(),
            comm_sources: report.comm_sources.clone(),
            notes: planned.notes.clone(),
            pipeline: report.pipeline.clone(),
            plan: p.clone(),
            families: Vec::new(),
            export: None,
        }
    }
}

impl PlanOutput {
    /// The text table `cephalo plan` prints, under the planner's one-line
    /// `summary`.
    pub fn table(&self, summary: &str) -> String {
        let o = self;
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "planner: {}  ({summary})", o.planner);
        let _ = writeln!(
            s,
            "workload: {} x {} on [{}], global batch {}, {}, seq {}",
            o.model,
            o.gpus.len(),
            crate::lists::name_runs(&o.gpus),
            o.global_batch,
            o.dtype,
            o.seq_len
        );
        let _ = writeln!(s, "strategy: {}", o.plan.label());
        let rule = crate::cost::MemPolicy::from_fraction(o.mem_fraction);
        let _ = writeln!(s, "memory rule: {}", rule.summary(o.overhead_gib));
        if let Some(p) = &o.pipeline {
            p.write_table(&mut s);
        }
        let mut rows: Vec<Vec<String>> = vec![[
            "rank", "gpu", "batch", "micro", "size", "state%", "peak GiB", "usable", "%usable", "",
        ]
        .iter()
        .map(|h| h.to_string())
        .collect()];
        for i in 0..o.gpus.len() {
            rows.push(vec![
                i.to_string(),
                o.gpus[i].clone(),
                o.batch_sizes[i].to_string(),
                o.microbatches[i].to_string(),
                o.microbatch_sizes[i].to_string(),
                format!("{:.2}", o.state_fractions[i] * 100.0),
                format!("{:.2}", o.simulated.peak_mem_gib[i]),
                format!("{:.2}", o.simulated.usable_gib[i]),
                format!("{:.1}", o.simulated.peak_usable_pct[i]),
                if o.simulated.peak_mem_gib[i] > o.simulated.usable_gib[i] {
                    "OOM".into()
                } else {
                    String::new()
                },
            ]);
        }
        if o.gpus.len() > crate::report::GROUP_ROWS_ABOVE {
            rows = crate::report::group_rows(rows);
        }
        let rank_w = rows.iter().map(|r| r[0].len()).max().unwrap_or(4).max(4);
        for r in &rows {
            let _ = writeln!(
                s,
                "{:>rank_w$}  {:<14} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9} {:>8}  {}",
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]
            );
        }
        s.push('\n');
        s += &crate::report::memory_table(
            o.gpus.iter().map(String::as_str).zip(&o.simulated.memory),
        );
        if let Some(m) = o.makespan_ms_per_block {
            let _ = writeln!(s, "makespan_ms_per_block (reference objective): {m:.6}");
            if let (Some(e), Some(h)) = (&o.max_bs_even_shard, &o.max_bs) {
                let _ = writeln!(s, "max_bs_even_shard: {e:?}   max_bs: {h:?}");
            }
        }
        if let Some(obj) = &o.objective {
            if o.makespan_ms_per_block.is_none() {
                let _ = writeln!(s, "{}: {:.3}", obj.name, obj.value_ms);
            }
        }
        let _ = writeln!(
            s,
            "simulated: iteration {:.1} ms, {:.2} samples/s, {:.0} tokens/s, MFU {:.1}%, OOM: {}",
            o.simulated.iteration_ms,
            o.simulated.samples_per_s,
            o.simulated.tokens_per_s,
            o.simulated.mfu * 100.0,
            if o.simulated.oom { "yes" } else { "no" }
        );
        if let Some(iv) = &o.simulated.intervals {
            let _ = writeln!(s, "{}", iv.summary());
        }
        s.push_str(&considered_text(&o.considered));
        s.push_str(&crate::report::sources_text(&o.sources));
        s.push_str(&crate::report::comm_sources_text(&o.comm_sources));
        s
    }
}

impl ExportOut {
    /// The output of an export `e` written to `path`.
    pub fn of(e: &crate::export::Exported, path: String) -> ExportOut {
        ExportOut {
            framework: e.framework,
            path,
            shape: e.shape.clone(),
            strategy: e.strategy,
            notes: e.notes.clone(),
            planned: e.planned.clone(),
            approximated: e.approximated.clone(),
            slowdown: e.slowdown,
            approximation_batch_sizes: e.approximation.gpus.iter().map(|g| g.batch).collect(),
            approximation_microbatches: e
                .approximation
                .gpus
                .iter()
                .map(|g| g.microbatches)
                .collect(),
        }
    }
}

impl FamilyOut {
    /// Each family's best plan in `all`, and whether it won.
    pub fn of_all(all: &BestOfFamilies) -> Vec<FamilyOut> {
        let winner = all.winner();
        all.family_best()
            .into_iter()
            .map(|(f, i)| FamilyOut {
                family: f.name(),
                planner: i.map(|i| all.contenders[i].planner),
                iteration_ms: i.and_then(|i| all.contenders[i].fitting_ms()),
                won: i.is_some() && i == winner,
            })
            .collect()
    }
}

/// The native planner's best plan per strategy, one line each (nothing
/// when it considered none).
fn considered_text(considered: &[ConsideredOut]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if considered.is_empty() {
        return s;
    }
    let _ = writeln!(s, "best plan per strategy considered (fastest first):");
    for c in considered {
        let t = match (c.iteration_ms, c.oom) {
            (Some(ms), false) => format!(
                "{ms:>10.1} ms{}",
                if c.simulated { "" } else { " (fast model)" }
            ),
            (Some(_), true) => format!("{:>13}", "OOM"),
            (None, _) => match c.closed_form_ms {
                Some(ms) => format!("{ms:>10.1} ms (closed form)"),
                None => format!("{:>13}", "no plan"),
            },
        };
        let plan = if c.batch_sizes.is_empty() {
            c.note.clone().unwrap_or_default()
        } else if c.batch_sizes.len() <= 8 {
            format!("{:?} / {:?}", c.batch_sizes, c.microbatches)
        } else {
            format!(
                "{} / {}",
                crate::lists::runs(&c.batch_sizes),
                crate::lists::runs(&c.microbatches)
            )
        };
        let _ = writeln!(s, "  {t}  {:<60} {plan}", c.label);
    }
    s
}
