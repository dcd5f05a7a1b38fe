//! `cephalo whatif`: questions asked before renting a cluster, in their own
//! words, each a thin layer over the library the studies use
//! ([`sim::whatif`], the planners, the simulator), each with table, JSON
//! (`cephalo-whatif/1`) and CSV output:
//!
//! * `train-cost --tokens N`: days, GPU-hours and USD to train on N tokens
//!   with the best plan (or `--planner`'s) on the cluster;
//! * `min-gpus`: the smallest count of one GPU type (`--gpu`, in nodes of
//!   `--gpus-per-node`, at most `--nodes` of them) on which Cephalo's
//!   planner finds a plan that fits and trains.
//!
//! Exit codes: 0 with an answer (also "none fits" for `min-gpus`), 2 for
//! bad input (a GPU without a price for `train-cost`, named).

use crate::cli::format::Format;
use crate::cli::plan::{log_search, PlannerFlags, BEST};
use crate::cli::workload::{StrategyArgs, WorkloadArgs};
use crate::error::UserError;
use anyhow::Result;
use clap::{Args as ClapArgs, Subcommand};
use serde::Serialize;
use sim::planner;
use std::process::ExitCode;

/// Flags of `cephalo whatif`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// The question.
    #[command(subcommand)]
    pub question: Question,
}

/// The questions.
#[derive(Debug, Clone, Subcommand)]
pub enum Question {
    /// Days, GPU-hours and USD to train on a token budget.
    TrainCost(TrainCostArgs),
    /// The smallest number of GPUs of one type that fits and trains the model.
    MinGpus(MinGpusArgs),
}

/// The workload, strategy and planner flags every question takes, and
/// its output format.
#[derive(Debug, Clone, ClapArgs)]
pub struct Query {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub strategy: StrategyArgs,
    #[command(flatten)]
    pub flags: PlannerFlags,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// Flags of `whatif train-cost`.
#[derive(Debug, Clone, ClapArgs)]
pub struct TrainCostArgs {
    #[command(flatten)]
    pub query: Query,
    /// Tokens to train on (`3e11` = 300 billion).
    #[arg(long)]
    pub tokens: f64,
    /// Planner (default `best`: the fastest plan of every family).
    #[arg(long, default_value = BEST)]
    pub planner: String,
}

/// Flags of `whatif min-gpus`: the cluster flags `--nodes N
/// --gpus-per-node G --gpu TYPE` give the GPU type, the node size and the
/// largest cluster to try (N nodes).
#[derive(Debug, Clone, ClapArgs)]
pub struct MinGpusArgs {
    #[command(flatten)]
    pub query: Query,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.question {
        Question::TrainCost(a) => train_cost(a),
        Question::MinGpus(a) => min_gpus(a),
    }
}

/// `whatif train-cost`'s answer.
#[derive(Debug, Serialize)]
struct TrainCostOut {
    format: &'static str,
    question: &'static str,
    model: String,
    gpus: String,
    planner: String,
    strategy: String,
    #[serde(flatten)]
    cost: sim::whatif::TrainCost,
}

fn train_cost(t: TrainCostArgs) -> Result<ExitCode> {
    let a = &t.query;
    let opts = a.flags.options(&a.workload.model)?;
    let spec = a.strategy.spec()?;
    let res = a.workload.resolve()?;
    crate::cli::notes::eprint("warning", &res.costs.warnings);
    let (run, ran) = if t.planner.eq_ignore_ascii_case(BEST) {
        let all = sim::session::plan_best(&res.costs, &res.profiles, &opts, &spec);
        let ran = all
            .winner()
            .map_or("cephalo", |w| all.contenders[w].planner);
        (all.into_winner()?, ran.to_string())
    } else {
        let pl = planner::registry::by_name(&t.planner, "--planner")?;
        let run =
            sim::session::plan_and_simulate(&res.costs, &res.profiles, pl.as_ref(), &opts, &spec)?;
        log_search(pl.name(), &run.planned.stats, run.elapsed_s);
        (run, pl.name().to_string())
    };
    let cluster = &res.costs.workload.cluster;
    let cost = sim::whatif::train_cost(&run.report, cluster, t.tokens)
        .map_err(|e| UserError(e.to_string()))?;
    let out = TrainCostOut {
        format: "cephalo-whatif/1",
        question: "train-cost",
        model: res.costs.workload.model.name.clone(),
        gpus: sim::lists::name_runs(&cluster.gpu_names()),
        planner: ran,
        strategy: run.planned.plan.label(),
        cost,
    };
    match a.format {
        Format::Json => out!("{}", serde_json::to_string_pretty(&out)? + "\n"),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&[&out.cost])?),
        Format::Table => {
            let c = &out.cost;
            outln!(
                "{} on [{}] with {} ({})",
                out.model,
                out.gpus,
                out.planner,
                out.strategy
            );
            outln!("{:<22} {:>16.4e}", "tokens", c.tokens);
            outln!("{:<22} {:>16.0}", "tokens/s", c.tokens_per_s);
            outln!("{:<22} {:>16.2}", "days", c.days);
            outln!("{:<22} {:>16.0}", "GPU-hours", c.gpu_hours);
            outln!("{:<22} {:>16.2}", "cluster USD/hour", c.price_per_hour_usd);
            outln!("{:<22} {:>16.0}", "USD", c.usd);
            outln!("(simulated throughput, no restarts, evaluation or data loading)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `whatif min-gpus`'s answer.
#[derive(Debug, Serialize)]
struct MinGpusOut {
    format: &'static str,
    question: &'static str,
    model: String,
    gpu: String,
    gpus_per_node: u32,
    max_gpus: u32,
    /// The smallest count that fits and trains (null: none up to the max).
    min_gpus: Option<u32>,
    /// Simulated tokens/s of Cephalo's plan on that count.
    tokens_per_s: Option<f64>,
    /// Every count tried, in order.
    tried: Vec<sim::whatif::Tried>,
}

fn min_gpus(m: MinGpusArgs) -> Result<ExitCode> {
    let a = &m.query;
    let c = &a.workload.cluster;
    let (Some(nodes), Some(per), Some(gpu)) = (c.nodes, c.gpus_per_node, c.gpu.clone()) else {
        return Err(UserError(
            "whatif min-gpus: give the GPU type and the largest cluster to try as --nodes N --gpus-per-node G --gpu TYPE".into(),
        )
        .into());
    };
    if c.gpus.is_some() || c.cluster.is_some() || !c.add_gpu.is_empty() {
        return Err(UserError(
            "whatif min-gpus: --gpus, --cluster and --add-gpu do not apply (the cluster is N nodes of one GPU type)".into(),
        )
        .into());
    }
    let opts = a.flags.options(&a.workload.model)?;
    let spec = a.strategy.spec()?;
    let native = planner::registry::by_name("cephalo", "--planner")?;
    let max = nodes.saturating_mul(per);
    let mut best_tps = std::collections::BTreeMap::new();
    let bar = crate::cli::progress::spinner("searching GPU counts");
    let (found, tried) = sim::whatif::min_gpus(per, max, |n| -> Result<bool> {
        let mut w = a.workload.clone();
        w.cluster.nodes = Some(n.div_ceil(per).max(1));
        w.cluster.gpus_per_node = Some(n.min(per));
        let res = w.resolve()?;
        Ok(
            match sim::session::plan_and_simulate(
                &res.costs,
                &res.profiles,
                native.as_ref(),
                &opts,
                &spec,
            ) {
                Ok(run) if !run.report.oom => {
                    best_tps.insert(n, run.report.tokens_per_s);
                    true
                }
                _ => false,
            },
        )
    })?;
    bar.finish_and_clear();
    let out = MinGpusOut {
        format: "cephalo-whatif/1",
        question: "min-gpus",
        model: a.workload.model.clone(),
        gpu,
        gpus_per_node: per,
        max_gpus: max,
        min_gpus: found,
        tokens_per_s: found.and_then(|n| best_tps.get(&n).copied()),
        tried,
    };
    match a.format {
        Format::Json => out!("{}", serde_json::to_string_pretty(&out)? + "\n"),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&out.tried)?),
        Format::Table => {
            match (out.min_gpus, out.tokens_per_s) {
                (Some(n), tps) => outln!(
                    "{}: {n} x {} ({} per node) is the fewest that fits and trains (Cephalo's plan: {} tokens/s)",
                    out.model,
                    out.gpu,
                    out.gpus_per_node,
                    tps.map_or("-".into(), |t| format!("{t:.0}"))
                ),
                (None, _) => outln!(
                    "{}: no count of {} up to {} fits and trains",
                    out.model,
                    out.gpu,
                    out.max_gpus
                ),
            }
            let tried: Vec<String> = out
                .tried
                .iter()
                .map(|t| format!("{} {}", t.gpus, if t.fits { "fits" } else { "no" }))
                .collect();
            outln!("tried: {}", tried.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
