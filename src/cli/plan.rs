//! `cephalo plan`: choose a plan for a workload with one planner, simulate
//! it, and print both (table or JSON); `--out plan.json` writes the plan in
//! the form `cephalo simulate --plan` reads.
//!
//! Exit codes: 0 with a plan (a baseline's out-of-memory plan is a plan
//! too), 2 for bad input or an infeasible workload (the message gives the
//! smallest memory shortfall and the GPU).

use crate::cli::workload::{Resolved, StrategyArgs, WorkloadArgs};
use crate::error::UserError;
use anyhow::Result;
use clap::Args as ClapArgs;
use serde::Serialize;
use sim::planner::{self, Planned, PlannerOptions, SearchStats, SearchSummary};
use sim::report::{Report, SimulatedSummary};
use sim::session::plan_and_simulate;
use sim::strategy::Strategy;
use std::path::PathBuf;
use std::process::ExitCode;

pub use crate::cli::format::Format;

/// Planner flags shared by `plan` and `compare`.
#[derive(Debug, Clone, ClapArgs)]
pub struct PlannerFlags {
    /// Compat mode: per-block all-gather time given to the reference
    /// optimizer, ms (its `--ag_time`).
    #[arg(long, default_value_t = 0.0)]
    pub ag_ms: f64,
    /// Compat mode: per-block reduce-scatter time, ms (its `--rs_time`).
    #[arg(long, default_value_t = 0.0)]
    pub rs_ms: f64,
    /// Native planner: closed-form candidates confirmed with the simulator.
    #[arg(long, default_value_t = 8)]
    pub candidates: usize,
    /// Native planner: do not also confirm the baselines' and compat plans
    /// as seeds (by default the native plan is never worse than them).
    #[arg(long)]
    pub no_seeds: bool,
    #[command(flatten)]
    pub shape: crate::cli::workload::ShapeArgs,
}

impl PlannerFlags {
    /// Validates the flags into planner options.
    pub fn options(&self, model_key: &str) -> Result<PlannerOptions> {
        for (name, v) in [("--ag-ms", self.ag_ms), ("--rs-ms", self.rs_ms)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(
                    UserError(format!("{name}: expected a time in ms >= 0, got {v}")).into(),
                );
            }
        }
        Ok(PlannerOptions {
            model_key: Some(model_key.to_string()),
            compat_ag_ms: self.ag_ms,
            compat_rs_ms: self.rs_ms,
            confirm_candidates: self.candidates.max(1),
            seed_with_baselines: !self.no_seeds,
            shape: self.shape.pins()?,
        })
    }
}

/// Flags of `cephalo plan`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub strategy: StrategyArgs,
    // The planner (its help lists the registry's names).
    #[arg(long, default_value = BEST, help = planner_help())]
    pub planner: String,
    /// Use the reference optimizer's rules (same as `--planner
    /// cephalo-compat`), its memory rule included: 0.75 of each GPU's
    /// memory with 2 GiB outside it, unless `--mem-fraction` /
    /// `--overhead-gib` say otherwise (the notes say which were defaults).
    #[arg(long)]
    pub compat: bool,
    #[command(flatten)]
    pub flags: PlannerFlags,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the plan (the form `cephalo simulate --plan` reads) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    // The framework to export to (its help lists the export registry).
    #[arg(long, value_name = "FRAMEWORK", requires = "export_out", help = export_help())]
    pub export: Option<String>,
    /// Where `--export` writes the framework's config (`-`: stdout, in place
    /// of the plan's table / JSON / CSV). The side-by-side figures of the
    /// plan and of the framework's approximation go to stderr, and into
    /// `--format json` as `export`.
    #[arg(long, value_name = "FILE", requires = "export")]
    pub export_out: Option<PathBuf>,
}

/// `--export`'s help: every framework of the registry.
fn export_help() -> String {
    format!(
        "Write the chosen plan as a real framework runs it: {} (needs --export-out). The config states what the framework can run (even batches and shards, its own accumulation); its comments (deepspeed: a `_cephalo` object) say what of the plan it cannot express, and the framework's approximation is simulated beside the plan",
        sim::export::names().join(" | ")
    )
}

/// `plan --format json`'s `export` field: the exported framework's figures
/// beside the plan's (see [`sim::export::Exported`]).
#[derive(Debug, Clone, Serialize)]
pub struct ExportOut {
    /// The framework.
    pub framework: &'static str,
    /// The file written.
    pub path: String,
    /// The degrees and batch sizes the config states.
    pub shape: sim::export::Shape,
    /// The strategy the framework runs.
    pub strategy: Strategy,
    /// What the framework cannot express or changes.
    pub notes: Vec<String>,
    /// The plan's simulated figures.
    pub planned: sim::export::Figures,
    /// The approximation's simulated figures (`null`: not simulated).
    pub approximated: Option<sim::export::Figures>,
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
    pub sources: Vec<sim::report::SourceLine>,
    /// With measured collectives: which of the plan's collectives were
    /// timed from them (per kind and group shape).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub comm_sources: Vec<sim::report::CommSourceStat>,
    /// Remarks (state-only GPUs, fallbacks).
    pub notes: Vec<String>,
    /// The plan in file form.
    pub plan: sim::plan::Plan,
    /// A pipeline plan's stages as simulated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<sim::report::PipelineReport>,
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

/// `--planner`'s default: the best plan of every family (the library's name).
pub use sim::session::BEST;

/// A named objective value.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectiveOut {
    /// Objective name.
    pub name: String,
    /// Value, ms.
    pub value_ms: f64,
}

/// Builds the output of a planned + simulated workload.
pub fn output(res: &Resolved, planned: &Planned, report: &Report) -> PlanOutput {
    let w = &res.costs.workload;
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

/// Prints the search counts and speed on stderr (timing never reaches stdout).
pub fn log_search(name: &str, s: &SearchStats, elapsed_s: f64) {
    eprintln!("{}", search_line(name, s, elapsed_s));
}

/// One line of search statistics that cannot contradict itself: a planner
/// that follows a rule says so; a search gives only the counts it kept
/// (strategies, candidate evaluations, plans checked against memory and
/// how many fit, sub-problems, plans evaluated fast and simulated).
pub fn search_line(name: &str, s: &SearchStats, elapsed_s: f64) -> String {
    let ms = elapsed_s * 1e3;
    if s.candidates == 0 && s.simulated == 0 && s.fast_evaluated == 0 {
        return format!("planner {name}: follows its framework's rule (no search), {ms:.3} ms");
    }
    let mut parts = Vec::new();
    if s.strategies > 0 {
        parts.push(format!("{} strategies", s.strategies));
    }
    let rate = if elapsed_s > 0.0 {
        format!(" ({:.3e}/s)", s.candidates as f64 / elapsed_s)
    } else {
        String::new()
    };
    parts.push(format!("{} candidate evaluations{rate}", s.candidates));
    let checked = s.feasible + s.infeasible;
    if checked > 0 {
        parts.push(format!(
            "{} of {checked} plans checked against memory fit",
            s.feasible
        ));
    }
    for (n, what) in [
        (s.subproblems, "sub-problems"),
        (s.fast_evaluated, "fast-evaluated"),
        (s.simulated, "simulated"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    format!(
        "planner {name}: {}, {ms:.3} ms{}",
        parts.join(", "),
        if s.proven_optimal {
            ", proven optimal"
        } else {
            ""
        }
    )
}

fn table(o: &PlanOutput, summary: &str) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "planner: {}  ({summary})", o.planner);
    let _ = writeln!(
        s,
        "workload: {} x {} on [{}], global batch {}, {}, seq {}",
        o.model,
        o.gpus.len(),
        sim::lists::name_runs(&o.gpus),
        o.global_batch,
        o.dtype,
        o.seq_len
    );
    let _ = writeln!(s, "strategy: {}", o.plan.label());
    let rule = sim::cost::MemPolicy::from_fraction(o.mem_fraction);
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
    if o.gpus.len() > sim::report::GROUP_ROWS_ABOVE {
        rows = sim::report::group_rows(rows);
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
    s += &sim::report::memory_table(o.gpus.iter().map(String::as_str).zip(&o.simulated.memory));
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
    if !o.considered.is_empty() {
        let _ = writeln!(s, "best plan per strategy considered (fastest first):");
        for c in &o.considered {
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
                    sim::lists::runs(&c.batch_sizes),
                    sim::lists::runs(&c.microbatches)
                )
            };
            let _ = writeln!(s, "  {t}  {:<60} {plan}", c.label);
        }
    }
    s.push_str(&sim::report::sources_text(&o.sources));
    s.push_str(&sim::report::comm_sources_text(&o.comm_sources));
    s
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(p) = &args.out {
        crate::out::check_writable(p, "the plan (--out)")?;
    }
    let target = match &args.export {
        Some(f) => Some(sim::export::by_name(f).ok_or_else(|| {
            UserError(format!(
                "--export: expected one of {}, got `{f}`",
                sim::export::names().join(", ")
            ))
        })?),
        None => None,
    };
    if let Some(p) = &args.export_out {
        crate::out::check_writable(p, "the exported config (--export-out)")?;
    }
    let name = planner_name(&args)?;
    let best = name.eq_ignore_ascii_case(BEST);
    let native = planner::registry::native_name();
    let pl = planner::registry::by_name(if best { native } else { name }, "--planner")?;
    let opts = args.flags.options(&args.workload.model)?;
    let spec = args.strategy.spec()?;
    // A planner's own memory rule when the user sets none (compat: the
    // reference optimizer's), said in the notes.
    let (workload, mem_default) = args.workload.for_planner(name);
    let res = workload.resolve()?;
    let mem_note = mem_default.map(|d| d.note(&res.costs.options, res.costs.ranks()));
    crate::cli::notes::eprint("warning", &res.costs.warnings);
    let (mut run, ran, families) = if best {
        plan_families(&res, &opts, &spec)?
    } else {
        let spin = crate::cli::progress::spinner(&format!("planning with {}", pl.name()));
        let run = plan_and_simulate(&res.costs, &res.profiles, pl.as_ref(), &opts, &spec);
        spin.finish_and_clear();
        let run = run?;
        log_search(pl.name(), &run.planned.stats, run.elapsed_s);
        (run, pl.name(), Vec::new())
    };
    run.planned.notes.splice(0..0, mem_note);
    crate::cli::notes::eprint("note", &run.planned.notes);
    crate::cli::notes::eprint_report_warnings(&run.report, &res.costs.warnings);
    let (planned, report) = (run.planned, run.report);
    let mut out = output(&res, &planned, &report);
    out.families = families;
    let pl = planner::registry::by_name(ran, "--planner")?;
    if let Some(path) = &args.out {
        let w = sim::plan::file::PlanWorkload::of(&res.costs);
        crate::out::write_text(path, &planned.plan.to_file_json(&w), "the plan (--out)")?;
    }
    if let (Some(t), Some(path)) = (target, &args.export_out) {
        out.export = Some(export(&res, &planned, &report, t, path)?);
        if path.as_os_str() == "-" {
            return Ok(ExitCode::SUCCESS);
        }
    }
    match args.format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&out)?;
            s.push('\n');
            out!("{s}");
        }
        Format::Table => out!("{}", sim::text::wrap(&table(&out, pl.summary()))),
        // The plan per GPU with its simulated breakdown.
        Format::Csv => out!("{}", report.to_csv()),
    }
    Ok(ExitCode::SUCCESS)
}

/// The planner `plan` runs: `cephalo-compat` with `--compat` (which
/// conflicts with any other `--planner` but the defaults), else `--planner`.
fn planner_name(args: &Args) -> Result<&str> {
    if !args.compat {
        return Ok(args.planner.as_str());
    }
    if args.planner != BEST
        && args.planner != planner::registry::native_name()
        && planner::registry::by_name(&args.planner, "--planner")?.name()
            != planner::registry::reference().name()
    {
        return Err(UserError(format!(
            "--compat conflicts with --planner {}",
            args.planner
        ))
        .into());
    }
    Ok(planner::registry::reference().name())
}

/// `--planner best`: every family's planners, each plan simulated; the
/// winner's run, its planner and each family's best.
fn plan_families(
    res: &Resolved,
    opts: &PlannerOptions,
    spec: &sim::strategy::StrategySpec,
) -> Result<(sim::session::PlannedRun, &'static str, Vec<FamilyOut>)> {
    let spin = crate::cli::progress::spinner("planning with every family's planners");
    let all = sim::session::plan_best(&res.costs, &res.profiles, opts, spec);
    spin.finish_and_clear();
    for c in &all.contenders {
        if let Ok(r) = &c.run {
            log_search(c.planner, &r.planned.stats, r.elapsed_s);
        }
    }
    let winner = all.winner();
    let families = all
        .family_best()
        .into_iter()
        .map(|(f, i)| FamilyOut {
            family: f.name(),
            planner: i.map(|i| all.contenders[i].planner),
            iteration_ms: i.and_then(|i| all.contenders[i].fitting_ms()),
            won: i.is_some() && i == winner,
        })
        .collect();
    let ran = winner.map_or_else(planner::registry::native_name, |w| {
        all.contenders[w].planner
    });
    Ok((all.into_winner()?, ran, families))
}

/// Exports the plan to `target`, writes its config to `path` and prints
/// the side-by-side figures and notes on stderr.
fn export(
    res: &Resolved,
    planned: &Planned,
    report: &Report,
    target: &dyn sim::export::Target,
    path: &std::path::Path,
) -> Result<ExportOut> {
    let e = sim::export::export(&res.costs, &planned.plan, report, target)?;
    crate::out::write_text(path, &e.config, "the exported config (--export-out)")?;
    eprintln!(
        "export: {} {} written to {}",
        e.framework,
        target.file_kind(),
        path.display()
    );
    for l in e.comparison_lines() {
        eprintln!("export: {l}");
    }
    crate::cli::notes::eprint("export note", &e.notes);
    Ok(ExportOut {
        framework: e.framework,
        path: path.display().to_string(),
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
    })
}

/// `--planner`'s help: every planner of the registry.
fn planner_help() -> String {
    format!(
        "Planner: `best` (the default: the fastest plan of every family's planners, `cephalo` for data-parallel plans and every pipeline and 3D planner, each confirmed by the simulator; says which family won and by how much) | {} (`cephalo list planners` says what each does)",
        sim::planner::registry::names(|_| true).join(" | ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_lines_do_not_contradict_themselves() {
        let rule = SearchStats::default();
        assert_eq!(
            search_line("fsdp", &rule, 0.0001),
            "planner fsdp: follows its framework's rule (no search), 0.100 ms"
        );
        let s = SearchStats {
            candidates: 312_240,
            feasible: 61,
            infeasible: 0,
            simulated: 9,
            ..SearchStats::default()
        };
        let l = search_line("cephalo", &s, 1.0);
        assert!(
            !l.contains("0 strategies") && !l.contains("0 do not"),
            "{l}"
        );
        assert!(
            l.contains("312240 candidate evaluations")
                && l.contains("61 of 61 plans checked against memory fit")
                && l.contains("9 simulated"),
            "{l}"
        );
    }
}
