//! `cephalo validate --from-log FILE`: a run made with torchtitan,
//! llm-foundry (Composer), DeepSpeed or Megatron-LM, its log read by
//! `sim::runlog`, compared with the simulator's prediction for the same
//! workload (`simulate` / `plan`'s workload, cluster and strategy flags,
//! and `--plan FILE` or `--planner NAME`). Needs no torch: it works in
//! builds with and without the `exec` feature.
//!
//! `validate` parses its arguments here first (`ValidateArgs`, anything): with
//! `--from-log` they are this command's; otherwise they are the real-
//! execution `validate`'s (exec builds) or the build hint (others).
//!
//! Exit codes: 0 with a comparison, 2 for bad input (an empty or
//! unrecognisable log, a number that is not one: the file and line named).

use crate::cli::format::{csv_of, Format};
use crate::cli::workload::{StrategyArgs, WorkloadArgs};
use crate::error::UserError;
use anyhow::Result;
use clap::Parser;
use serde::Serialize;
use sim::runlog::compare::{Predicted, Row};
use sim::runlog::{self, LogFormat, RunShape};
use std::path::PathBuf;
use std::process::ExitCode;

/// `validate`'s arguments as the subcommand receives them (parsed in
/// [`dispatch`]).
#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Everything after `validate`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub rest: Vec<String>,
}

/// Flags of `cephalo validate --from-log`.
#[derive(Debug, Parser)]
#[command(
    name = "cephalo validate --from-log",
    about = "Compare a real run's log (torchtitan, llm-foundry / Composer, DeepSpeed, Megatron-LM) with the simulator's prediction for its workload"
)]
pub struct Args {
    /// The training log (stdout / stderr of the run; ANSI colours and
    /// prefixes such as `[rank0]:` are fine).
    #[arg(long, value_name = "FILE")]
    pub from_log: PathBuf,
    /// The log's format: torchtitan | composer (llm-foundry) | deepspeed |
    /// megatron (default: detected, the format with the most step lines).
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
    /// Logged steps skipped as warm-up before the medians (compilation,
    /// allocator growth, the first collectives' setup).
    #[arg(long, default_value_t = 2)]
    pub warmup_steps: usize,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub strategy: StrategyArgs,
    /// The plan the run used (`cephalo plan --out`).
    #[arg(long, conflicts_with = "planner")]
    pub plan: Option<PathBuf>,
    /// The run's parallel shape (TP, PP, EP, micro-batch size, ...): pins
    /// the planner searches within, as `plan`'s (e.g. a Megatron MoE run's
    /// `--tp 1 --pp 4 --ep 8 --microbatch-size 1`).
    #[command(flatten)]
    pub shape: crate::cli::workload::ShapeArgs,
    /// The planner whose plan the run used (default: the log's framework's
    /// rule: `megatron` for Megatron-LM logs, `fsdp` for the others).
    #[arg(long)]
    pub planner: Option<String>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `validate --from-log --format json` (`cephalo-fromlog/1`).
#[derive(Debug, Clone, Serialize)]
pub struct Output {
    /// Schema tag.
    pub format: &'static str,
    /// The log's path.
    pub log: String,
    /// Its format.
    pub log_format: LogFormat,
    /// Steps found, skipped as warm-up, and used.
    pub steps_logged: usize,
    /// Steps skipped as warm-up.
    pub warmup_skipped: usize,
    /// Steps the medians are over.
    pub steps_used: usize,
    /// The plan's planner (or `manual` for a plan file).
    pub planner: String,
    /// The plan's label.
    pub plan: String,
    /// Model.
    pub model: String,
    /// GPUs.
    pub gpus: Vec<String>,
    /// Global batch, samples.
    pub global_batch: u32,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Whether the prediction runs out of memory.
    pub predicted_oom: bool,
    /// What the log prints and what was derived, and which memory is
    /// compared.
    pub provenance: Vec<String>,
    /// The compared figures.
    pub rows: Vec<Row>,
}

/// Runs `validate` with `a.rest`: `--from-log` here, anything else in the
/// real-execution command (or the build hint).
pub fn dispatch(a: ValidateArgs) -> Result<ExitCode> {
    let from_log = a
        .rest
        .iter()
        .any(|s| s == "--from-log" || s.starts_with("--from-log="));
    if from_log {
        let args = Args::try_parse_from(
            std::iter::once("cephalo validate".to_string()).chain(a.rest.iter().cloned()),
        )
        .unwrap_or_else(|e| e.exit());
        return run(args);
    }
    real(a.rest)
}

/// `validate` as shell completions should see it: every flag of
/// `--from-log` and, in exec builds, of the real run (the subcommand
/// itself takes them as one pass-through list, parsed in [`dispatch`]).
pub fn completion_command() -> clap::Command {
    use clap::CommandFactory;
    #[allow(unused_mut)]
    let mut cmd = Args::command()
        .name("validate")
        .about("Compare predicted vs measured: train for real (exec builds), or read a training log (--from-log FILE)");
    #[cfg(feature = "exec")]
    {
        #[derive(Debug, Parser)]
        struct Real {
            #[command(flatten)]
            args: crate::cli::validate::Args,
        }
        let known: Vec<(String, Option<String>)> = cmd
            .get_arguments()
            .map(|a| (a.get_id().to_string(), a.get_long().map(String::from)))
            .collect();
        let extra: Vec<clap::Arg> = Real::command()
            .get_arguments()
            .filter(|a| {
                !known.iter().any(|(id, long)| {
                    id == a.get_id().as_str() || (long.is_some() && long.as_deref() == a.get_long())
                })
            })
            .cloned()
            .collect();
        cmd = cmd.args(extra);
    }
    cmd
}

#[cfg(feature = "exec")]
fn real(rest: Vec<String>) -> Result<ExitCode> {
    /// `cephalo validate` (real execution).
    #[derive(Debug, Parser)]
    #[command(
        name = "cephalo validate",
        about = "Profile, plan, simulate, train for real and compare predicted vs measured (`--from-log FILE` compares a log of torchtitan, llm-foundry, DeepSpeed or Megatron-LM instead: `cephalo validate --from-log x --help`)"
    )]
    struct Real {
        #[command(flatten)]
        args: crate::cli::validate::Args,
    }
    let r = Real::try_parse_from(std::iter::once("cephalo validate".to_string()).chain(rest))
        .unwrap_or_else(|e| e.exit());
    crate::cli::validate::run(r.args)
}

#[cfg(not(feature = "exec"))]
fn real(rest: Vec<String>) -> Result<ExitCode> {
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        // The part of `validate` this build has.
        eprintln!("note: this build has `validate --from-log` only (real execution needs --features exec)");
        Args::try_parse_from(["cephalo validate", "--help"]).unwrap_or_else(|e| e.exit());
    }
    Err(UserError(
        "`cephalo validate` runs training for real (libtorch + MPI) and this binary was built without it. \
         Build it with: `. scripts/exec-env.sh && cargo build --release --features exec` \
         (add `cuda` for GPUs: --features cuda); exec/README.md says more. \
         `cephalo validate --from-log FILE` (a torchtitan, llm-foundry, DeepSpeed or Megatron-LM log against the prediction) works in this build"
            .into(),
    )
    .into())
}

/// Runs `validate --from-log`.
pub fn run(args: Args) -> Result<ExitCode> {
    let format = match &args.log_format {
        Some(f) => Some(LogFormat::parse(f).ok_or_else(|| {
            UserError(format!(
                "--log-format: expected one of {}, got `{f}`",
                LogFormat::ALL.map(|f| f.name()).join(", ")
            ))
        })?),
        None => None,
    };
    let origin = args.from_log.display().to_string();
    let text = crate::load::read_log(&args.from_log)?;
    let (format, records) = runlog::parse(&text, format, &origin)?;
    let res = args.workload.resolve()?;
    crate::cli::notes::eprint("warning", &res.costs.warnings);
    let costs = &res.costs;
    let w = &costs.workload;
    let shape = RunShape {
        gpus: w.cluster.len() as u32,
        global_batch: w.global_batch,
        seq_len: w.seq_len,
    };
    let m = runlog::summarize(format, &records, args.warmup_steps, shape, &origin)?;
    let spec = args.strategy.spec()?;
    let report = match &args.plan {
        Some(path) => {
            let text = crate::load::read_text(path)?;
            let o = path.display().to_string();
            let plan = sim::session::user_plan(
                sim::session::PlanInput::File {
                    text: &text,
                    origin: &o,
                },
                &spec,
                &sim::session::strategy_context(costs),
                &sim::plan::file::PlanWorkload::of(costs),
            )?;
            sim::simulate::simulate(costs, &plan, &sim::iteration::SimOptions::default())?
        }
        None => {
            let name = args
                .planner
                .clone()
                .unwrap_or_else(|| sim::session::planner_for_log(format).to_string());
            let pl = sim::planner::registry::by_name(&name, "--planner")?;
            let opts = sim::planner::PlannerOptions {
                model_key: Some(args.workload.model.clone()),
                shape: args.shape.pins()?,
                ..sim::planner::PlannerOptions::default()
            };
            sim::session::plan_and_simulate(costs, &res.profiles, pl.as_ref(), &opts, &spec)?.report
        }
    };
    let out = output(&args, &m, &report, w);
    match args.format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&out)?;
            s.push('\n');
            out!("{s}");
        }
        Format::Csv => out!("{}", csv_of(&out.rows)?),
        Format::Table => out!("{}", table(&out)),
    }
    Ok(ExitCode::SUCCESS)
}

/// The command's output: the comparison is `sim::runlog::compare`'s.
fn output(
    args: &Args,
    m: &runlog::Measured,
    report: &sim::report::Report,
    w: &sim::cost::Workload,
) -> Output {
    let rank0 = report.gpus.first();
    let predicted = Predicted {
        oom: report.oom,
        iteration_ms: report.iteration_ms,
        tokens_per_s: report.tokens_per_s,
        mfu: report.mfu,
        gpus: w.cluster.len() as u32,
        reserved_gib: rank0.map(|g| g.memory.reserved_gib),
        allocated_gib: rank0.map(|g| g.memory.allocated_gib),
    };
    let (rows, provenance) = runlog::compare::compare(m, &predicted);
    Output {
        format: "cephalo-fromlog/1",
        log: args.from_log.display().to_string(),
        log_format: m.format,
        steps_logged: m.steps_logged,
        warmup_skipped: m.warmup_skipped,
        steps_used: m.steps_used,
        planner: report.planner.clone(),
        plan: match &report.pipeline {
            // The parallel shape first: what a user matches against the run.
            Some(p) => format!("{}; {}", p.shape_label(), report.strategy.label()),
            None => report.strategy.label(),
        },
        model: w.model.name.clone(),
        gpus: w.cluster.gpu_names(),
        global_batch: w.global_batch,
        seq_len: w.seq_len,
        predicted_oom: report.oom,
        provenance,
        rows,
    }
}

fn table(o: &Output) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "log: {} ({} format): {} steps logged, {} skipped as warm-up, medians over {}",
        o.log,
        o.log_format_name(),
        o.steps_logged,
        o.warmup_skipped,
        o.steps_used
    );
    let _ = writeln!(
        s,
        "prediction: {} x {} on [{}], global batch {}, seq {}, planner {} ({}){}",
        o.model,
        o.gpus.len(),
        sim::lists::name_runs(&o.gpus),
        o.global_batch,
        o.seq_len,
        o.planner,
        o.plan,
        if o.predicted_oom {
            ": runs out of memory"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "{:<22} {:>14} {:>14} {:>9}",
        "metric", "predicted", "measured", "error"
    );
    let f = |v: Option<f64>, metric: &str| match v {
        None => "-".to_string(),
        Some(v) if metric == "mfu" => format!("{:.1}%", v * 100.0),
        Some(v) if metric.starts_with("tokens") => format!("{v:.0}"),
        Some(v) => format!("{v:.2}"),
    };
    for r in &o.rows {
        let _ = writeln!(
            s,
            "{:<22} {:>14} {:>14} {:>9}",
            r.metric,
            f(r.predicted, r.metric),
            f(r.measured, r.metric),
            r.error_pct.map_or("-".into(), |e| format!("{e:+.1}%"))
        );
    }
    for p in &o.provenance {
        let _ = writeln!(s, "  {p}");
    }
    s
}

impl Output {
    fn log_format_name(&self) -> &'static str {
        self.log_format.name()
    }
}
