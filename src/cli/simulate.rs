//! `cephalo simulate`: simulate one training iteration of a plan on a cluster
//! and print the per-GPU breakdown and summary (table, JSON or CSV), and
//! optionally a Chrome/Perfetto trace.
//!
//! Exit codes: 0 with a report (an out-of-memory plan is a report too), 2 for
//! bad input (the error names the file or flag and the field).

use crate::cli::workload::{ShapeArgs, StrategyArgs, WorkloadArgs};
use crate::error::UserError;
use crate::load;
use anyhow::Result;
use clap::Args as ClapArgs;
use sim::cost::CostModel;
use sim::iteration::SimOptions;
use sim::plan::Plan;
use sim::session::{user_plan, PlanInput};
use sim::simulate::simulate;
use std::path::PathBuf;
use std::process::ExitCode;

pub use crate::cli::format::Format;

/// Flags of `cephalo simulate`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub strategy: StrategyArgs,
    /// Plan file (`cephalo plan --out` JSON, or the reference optimizer's
    /// output); strategy flags must agree with the strategy it records.
    #[arg(long, conflicts_with_all = ["batch", "microbatches", "state_fractions"])]
    pub plan: Option<PathBuf>,
    /// Local batch per rank, comma-separated (e.g. `13,12,34,5`); must sum to --global-batch.
    #[arg(long, allow_hyphen_values = true)]
    pub batch: Option<String>,
    /// Micro-batch COUNT per rank, comma-separated (default 1 for every rank with samples).
    #[arg(long, requires = "batch", allow_hyphen_values = true)]
    pub microbatches: Option<String>,
    /// Fraction of the sharded training state per rank, comma-separated (default even).
    #[arg(long, requires = "batch", allow_hyphen_values = true)]
    pub state_fractions: Option<String>,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Report format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the per-GPU rows as CSV to this file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Also write a Chrome/Perfetto trace (JSON) to this file.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Do not prefetch the next unit's all-gather (what-if).
    #[arg(long)]
    pub no_prefetch: bool,
    /// List every warning of the loaded profiles, not only those about entries used here.
    #[arg(long, short)]
    pub verbose: bool,
}

/// Resolves the plan from `--plan` or the `--batch` lists with its
/// strategy (the file's, checked against the flags, or the flags') and
/// checks it against the workload, naming the file or flag on error.
fn resolve_plan(args: &Args, costs: &CostModel) -> Result<Plan> {
    let spec = args.strategy.spec()?;
    let workload = sim::plan::file::PlanWorkload::of(costs);
    let ctx = sim::session::strategy_context(costs);
    let others = [
        ("--plan", args.plan.is_some()),
        ("--batch", args.batch.is_some()),
    ];
    if let Some(shape) = args.shape.shape(&others)? {
        let layers = costs.workload.model.layers;
        return Ok(user_plan(
            PlanInput::Shape {
                shape: &shape,
                layers,
            },
            &spec,
            &ctx,
            &workload,
        )?);
    }
    let plan = match (&args.plan, &args.batch) {
        (Some(path), _) => {
            let origin = path.display().to_string();
            let text = load::read_text(path)?;
            user_plan(PlanInput::File { text: &text, origin: &origin }, &spec, &ctx, &workload)?
        }
        (None, Some(batch)) => {
            let (batch, micro, fractions) = crate::cli::workload::plan_lists(
                batch,
                args.microbatches.as_deref(),
                args.state_fractions.as_deref(),
            )?;
            let input = PlanInput::Lists {
                batch: &batch,
                microbatches: &micro,
                state_fractions: fractions.as_deref(),
                origin: "--batch",
            };
            user_plan(input, &spec, &ctx, &workload)?
        }
        (None, None) => {
            return Err(UserError("give a plan with --plan FILE, --batch LIST [--microbatches LIST] [--state-fractions LIST], or a 3D shape (--tp N, --pp N, --microbatch-size B, ...)".into()).into())
        }
    };
    Ok(plan)
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    for (p, what) in [
        (&args.csv, "the CSV (--csv)"),
        (&args.trace, "the trace (--trace)"),
    ] {
        if let Some(p) = p {
            crate::out::check_writable(p, what)?;
        }
    }
    let resolved = args.workload.resolve()?;
    let costs = &resolved.costs;
    let plan = resolve_plan(&args, costs)?;
    let opts = SimOptions {
        trace: args.trace.is_some(),
        prefetch: !args.no_prefetch,
        ..SimOptions::default()
    };
    let report = simulate(costs, &plan, &opts)?;
    // Warnings about the entries this workload uses come from the cost
    // model; the loader also flags every other entry of the files read.
    crate::cli::notes::eprint("warning", &costs.warnings);
    crate::cli::notes::eprint_report_warnings(&report, &costs.warnings);
    let others = resolved.warnings.len().saturating_sub(costs.warnings.len());
    if args.verbose {
        for w in resolved
            .warnings
            .iter()
            .filter(|w| !costs.warnings.contains(w))
        {
            eprintln!("warning: {w}");
        }
    } else if others > 0 {
        eprintln!("note: {others} warnings about other entries of the loaded profiles (not used here); --verbose lists them");
    }
    if let (Some(path), Some(trace)) = (&args.trace, &report.trace) {
        crate::out::write_text(path, &trace.to_json(), "the trace (--trace)")?;
    }
    if let Some(path) = &args.csv {
        crate::out::write_text(path, &report.to_csv(), "the CSV (--csv)")?;
    }
    match args.format {
        Format::Json => out!("{}", report.to_json()),
        Format::Table => out!("{}", report.to_table()),
        Format::Csv => out!("{}", report.to_csv()),
    }
    Ok(ExitCode::SUCCESS)
}
