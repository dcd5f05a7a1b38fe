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
use sim::plan_output::{ExportOut, FamilyOut, PlanOutput};
use sim::planner::{self, Planned, PlannerOptions, SearchStats};
use sim::report::Report;
use sim::session::plan_and_simulate;
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

/// `--planner`'s default: the best plan of every family (the library's name).
pub use sim::session::BEST;

/// Prints the search counts and speed on stderr (timing never reaches stdout).
pub fn log_search(name: &str, s: &SearchStats, elapsed_s: f64) {
    eprintln!("{}", s.line(name, elapsed_s));
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
    let mut out = PlanOutput::of(&res.costs, &planned, &report);
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
        Format::Table => out!("{}", sim::text::wrap(&out.table(pl.summary()))),
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
    let families = FamilyOut::of_all(&all);
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
    Ok(ExportOut::of(&e, path.display().to_string()))
}

/// `--planner`'s help: every planner of the registry.
fn planner_help() -> String {
    format!(
        "Planner: `best` (the default: the fastest plan of every family's planners, `cephalo` for data-parallel plans and every pipeline and 3D planner, each confirmed by the simulator; says which family won and by how much) | {} (`cephalo list planners` says what each does)",
        sim::planner::registry::names(|_| true).join(" | ")
    )
}
