//! `cephalo compare`: run every planner on one workload, simulate each plan,
//! and print one row per planner (table, JSON or CSV): samples/s, tokens/s,
//! MFU, iteration time, speed-up over the best baseline that fits (named)
//! and over plain FSDP, Cephalo's speed-up over the row, peak memory % per
//! GPU, OOM and by how much; the table ends with Cephalo's speed-ups in
//! words (`Comparison::headline`).
//!
//! Exit codes: 0 with the table (a baseline that runs out of memory or has
//! no plan is a row); 2 for bad input, or when the native `cephalo` planner
//! finds the workload infeasible (the table is still printed first).

use crate::cli::plan::{log_search, PlannerFlags};
use crate::cli::workload::{StrategyArgs, WorkloadArgs};
use anyhow::Result;
use clap::Args as ClapArgs;
use sim::planner::{self, Planner};
use sim::session::compare;
use std::process::ExitCode;

pub use crate::cli::format::Format;

/// Flags of `cephalo compare`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub strategy: StrategyArgs,
    #[command(flatten)]
    pub flags: PlannerFlags,
    /// Planners to run, comma-separated (default: all).
    #[arg(long)]
    pub planners: Option<String>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    let list: Vec<Box<dyn Planner>> = match &args.planners {
        Some(names) => {
            let mut v: Vec<Box<dyn Planner>> = sim::lists::items(names, "--planners")?
                .into_iter()
                .map(|n| planner::registry::by_name(n, "--planners"))
                .collect::<Result<_, _>>()?;
            // Speed-ups need both references.
            let standard = planner::registry::standard(planner::registry::Family::DataParallel);
            for must in [planner::registry::native_name(), standard.name()] {
                if !v.iter().any(|p| p.name() == must) {
                    v.push(planner::registry::by_name(must, "--planners")?);
                }
            }
            v
        }
        None => planner::registry::all(),
    };
    let opts = args.flags.options(&args.workload.model)?;
    let spec = args.strategy.spec()?;
    let res = args.workload.resolve()?;
    crate::cli::notes::eprint("warning", &res.costs.warnings);
    let spin = crate::cli::progress::spinner(&format!("running {} planners", list.len()));
    let cmp = compare(&res.costs, &res.profiles, &list, &opts, &spec);
    spin.finish_and_clear();
    for r in &cmp.rows {
        match (&r.run, &r.error) {
            // Baselines follow a rule and search nothing: only searches are logged.
            (Some((stats, elapsed)), _) if stats.candidates > 0 => {
                log_search(&r.planner, stats, *elapsed)
            }
            (_, Some(e)) => eprintln!("planner {}: {e}", r.planner),
            _ => {}
        }
    }
    match args.format {
        Format::Json => out!("{}", cmp.to_json()),
        Format::Csv => out!("{}", cmp.to_csv()),
        Format::Table => out!("{}", cmp.to_table()),
    }
    match cmp.native_error {
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}
