//! `cephalo compare`: run every planner on one workload, simulate each plan,
//! and print one row per planner (table, JSON or CSV): throughput, speed-up
//! over even FSDP, Cephalo's speed-up over it, iteration time, peak memory %
//! per GPU, OOM.
//!
//! Exit codes: 0 with the table (a baseline that runs out of memory or has
//! no plan is a row); 2 for bad input, or when the native `cephalo` planner
//! finds the workload infeasible (the table is still printed first).

use crate::cli::plan::{log_search, plan_and_simulate, PlannerFlags};
use crate::cli::workload::WorkloadArgs;
use anyhow::Result;
use clap::{Args as ClapArgs, ValueEnum};
use serde::Serialize;
use sim::planner::{self, Planner};
use std::process::ExitCode;

/// Output format on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable table.
    Table,
    /// JSON array of [`Row`].
    Json,
    /// CSV, one [`Row`] per line (lists joined with `;`).
    Csv,
}

/// Flags of `cephalo compare`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub flags: PlannerFlags,
    /// Planners to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub planners: Option<Vec<String>>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// One row of `cephalo compare` (the JSON output is an array of these).
///
/// Throughput fields are `null` when the planner found no plan (`error`
/// says why); an out-of-memory plan keeps its simulated numbers but has
/// `oom: true` and no speed-ups.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Planner name (`cephalo` is ours).
    pub planner: String,
    /// Simulated samples per second.
    pub samples_per_s: Option<f64>,
    /// Simulated iteration time, ms.
    pub iteration_ms: Option<f64>,
    /// samples_per_s / that of `fsdp` (null when either OOMs or is missing).
    pub speedup_vs_even_fsdp: Option<f64>,
    /// `cephalo`'s samples_per_s / this row's (null when either OOMs).
    pub cephalo_speedup: Option<f64>,
    /// Whether some GPU runs out of memory.
    pub oom: bool,
    /// Peak memory per GPU, % of capacity.
    pub peak_mem_pct: Vec<f64>,
    /// Peak memory per GPU, % of the usable memory (above 100 = OOM).
    pub peak_usable_pct: Vec<f64>,
    /// Local batch per rank.
    pub batch_sizes: Vec<u32>,
    /// Micro-batch count per rank.
    pub microbatches: Vec<u32>,
    /// State fraction per rank.
    pub state_fractions: Vec<f64>,
    /// Why there is no plan (infeasible, missing profiles).
    pub error: Option<String>,
}

fn ok(r: &Row) -> Option<f64> {
    if r.oom {
        None
    } else {
        r.samples_per_s
    }
}

fn csv(rows: &[Row]) -> String {
    let join = |v: Vec<String>| v.join(";");
    let opt = |x: Option<f64>| x.map(|v| format!("{v}")).unwrap_or_default();
    let mut s = String::from(
        "planner,samples_per_s,iteration_ms,speedup_vs_even_fsdp,cephalo_speedup,oom,peak_mem_pct,peak_usable_pct,batch_sizes,microbatches,state_fractions,error\n",
    );
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},\"{}\"\n",
            r.planner,
            opt(r.samples_per_s),
            opt(r.iteration_ms),
            opt(r.speedup_vs_even_fsdp),
            opt(r.cephalo_speedup),
            r.oom,
            join(r.peak_mem_pct.iter().map(|x| format!("{x:.2}")).collect()),
            join(
                r.peak_usable_pct
                    .iter()
                    .map(|x| format!("{x:.2}"))
                    .collect()
            ),
            join(r.batch_sizes.iter().map(|x| x.to_string()).collect()),
            join(r.microbatches.iter().map(|x| x.to_string()).collect()),
            join(r.state_fractions.iter().map(|x| format!("{x}")).collect()),
            r.error.clone().unwrap_or_default().replace('"', "'")
        ));
    }
    s
}

fn table(rows: &[Row], title: &str) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "{title}");
    let _ = writeln!(
        s,
        "{:<24} {:>10} {:>10} {:>10} {:>12}  {:<28} {:<4}  batches / micro-batches",
        "planner",
        "samples/s",
        "vs fsdp",
        "cephalo x",
        "iter ms",
        "peak % of usable per GPU",
        "OOM"
    );
    let f = |x: Option<f64>, p: usize| x.map(|v| format!("{v:.p$}")).unwrap_or_else(|| "-".into());
    for r in rows {
        let mem: Vec<String> = r
            .peak_usable_pct
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect();
        let plan = if r.batch_sizes.is_empty() {
            r.error.clone().unwrap_or_default()
        } else {
            format!("{:?} / {:?}", r.batch_sizes, r.microbatches)
        };
        let _ = writeln!(
            s,
            "{:<24} {:>10} {:>10} {:>10} {:>12}  {:<28} {:<4}  {}",
            r.planner,
            f(r.samples_per_s, 2),
            f(r.speedup_vs_even_fsdp, 2).to_string()
                + if r.speedup_vs_even_fsdp.is_some() {
                    "x"
                } else {
                    ""
                },
            f(r.cephalo_speedup, 2).to_string()
                + if r.cephalo_speedup.is_some() { "x" } else { "" },
            f(r.iteration_ms, 1),
            mem.join(" "),
            if r.error.is_some() {
                "n/a"
            } else if r.oom {
                "yes"
            } else {
                "no"
            },
            plan
        );
    }
    s
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    let list: Vec<Box<dyn Planner>> = match &args.planners {
        Some(names) => {
            let mut v: Vec<Box<dyn Planner>> = names
                .iter()
                .map(|n| planner::by_name(n, "--planners"))
                .collect::<Result<_, _>>()?;
            // Speed-ups need both references.
            for must in ["cephalo", "fsdp"] {
                if !v.iter().any(|p| p.name() == must) {
                    v.push(planner::by_name(must, "--planners")?);
                }
            }
            v
        }
        None => planner::all(),
    };
    let opts = args.flags.options(&args.workload.model)?;
    let res = args.workload.resolve()?;
    for w in &res.costs.warnings {
        eprintln!("warning: {w}");
    }
    let mut rows = Vec::with_capacity(list.len());
    let mut native_err = None;
    for pl in &list {
        match plan_and_simulate(&res, pl.as_ref(), &opts) {
            Ok((planned, report, elapsed)) => {
                // Baselines follow a rule and search nothing: only searches are logged.
                if planned.stats.candidates > 0 {
                    log_search(pl.name(), &planned.stats, elapsed);
                }
                let p = &planned.plan;
                rows.push(Row {
                    planner: pl.name().to_string(),
                    samples_per_s: Some(report.samples_per_s),
                    iteration_ms: Some(report.iteration_ms),
                    speedup_vs_even_fsdp: None,
                    cephalo_speedup: None,
                    oom: report.oom,
                    peak_mem_pct: report.gpus.iter().map(|g| g.mem_pct).collect(),
                    peak_usable_pct: report.gpus.iter().map(|g| g.usable_pct).collect(),
                    batch_sizes: p.gpus.iter().map(|g| g.batch).collect(),
                    microbatches: p.gpus.iter().map(|g| g.microbatches).collect(),
                    state_fractions: p.state_fractions(),
                    error: None,
                });
            }
            Err(e) => {
                let msg = format!("{e:#}");
                eprintln!("planner {}: {msg}", pl.name());
                if pl.name() == "cephalo" {
                    native_err = Some(e);
                }
                rows.push(Row {
                    planner: pl.name().to_string(),
                    samples_per_s: None,
                    iteration_ms: None,
                    speedup_vs_even_fsdp: None,
                    cephalo_speedup: None,
                    oom: false,
                    peak_mem_pct: vec![],
                    peak_usable_pct: vec![],
                    batch_sizes: vec![],
                    microbatches: vec![],
                    state_fractions: vec![],
                    error: Some(msg),
                });
            }
        }
    }
    let fsdp = rows.iter().find(|r| r.planner == "fsdp").and_then(ok);
    let ours = rows.iter().find(|r| r.planner == "cephalo").and_then(ok);
    for r in &mut rows {
        if let Some(x) = ok(r) {
            r.speedup_vs_even_fsdp = fsdp.map(|f| x / f);
            r.cephalo_speedup = ours.map(|o| o / x);
        }
    }
    let w = &res.costs.workload;
    let title = format!(
        "{} on [{}], global batch {}, {}, seq {}",
        w.model.name,
        w.cluster.gpu_names().join(", "),
        w.global_batch,
        w.dtype,
        w.seq_len
    );
    match args.format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&rows)?;
            s.push('\n');
            print!("{s}");
        }
        Format::Csv => print!("{}", csv(&rows)),
        Format::Table => print!("{}", table(&rows, &title)),
    }
    match native_err {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}
