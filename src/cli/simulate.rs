//! `cephalo simulate`: simulate one training iteration of a plan on a cluster
//! and print the per-GPU breakdown and summary (table, JSON or CSV), and
//! optionally a Chrome/Perfetto trace.
//!
//! Exit codes: 0 with a report (an out-of-memory plan is a report too), 2 for
//! bad input (the error names the file or flag and the field).

use crate::cli::workload::{StrategyArgs, WorkloadArgs};
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

/// The homogeneous 3D shape flags of `simulate` (Megatron's and
/// torchtitan's knobs): any of them makes the plan a 3D (or pipeline) plan.
#[derive(Debug, Clone, ClapArgs)]
pub struct ShapeArgs {
    /// Tensor-parallel degree: GPUs per TP group (Megatron's
    /// `--tensor-model-parallel-size`); DP = GPUs / (TP x PP).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub tp: Option<u32>,
    /// Sequence parallelism inside every TP group (Korthikanti et al.).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub sequence_parallel: bool,
    /// Pipeline stages (Megatron's `--pipeline-model-parallel-size`).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub pp: Option<u32>,
    /// Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1.
    #[arg(long, conflicts_with_all = ["plan", "batch"], value_parser = parse_schedule)]
    pub pp_schedule: Option<sim::plan::pipeline::PipeSchedule>,
    /// Model chunks per GPU of the interleaved schedule (default 2 with
    /// `--pp-schedule interleaved`).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub virtual_stages: Option<u32>,
    /// Samples per micro-batch of one data-parallel replica; micro-batches
    /// = global batch / (DP x this).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub microbatch_size: Option<u32>,
    /// Overlap TP communication with the GEMMs of both passes as
    /// Transformer Engine's userbuffers do (Megatron's `--tp-comm-overlap`;
    /// needs --sequence-parallel; off: its default path).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub tp_comm_overlap: bool,
    /// Let TP groups span nodes (priced over the network).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub tp_across_nodes: bool,
    /// Reduce each stage's gradients bucket by bucket during the last
    /// micro-batch's backward (Megatron's `--overlap-grad-reduce`, off by
    /// default; replicas and the distributed optimizer, `--sharding none`
    /// or `grad-op`).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub overlap_grad_reduce: bool,
    /// Defer the distributed optimizer's parameter all-gathers to the next
    /// step's forward, bucket by bucket (Megatron's
    /// `--overlap-param-gather`, off by default; needs
    /// --overlap-grad-reduce and `--sharding grad-op`).
    #[arg(long, conflicts_with_all = ["plan", "batch"])]
    pub overlap_param_gather: bool,
    /// Rank order: `tp-cp-ep-dp-pp` (Megatron's default: TP, then DP,
    /// then PP outermost) or `tp-pp-dp` (Megatron's
    /// `--use-tp-pp-dp-mapping`: a replica's stages on consecutive ranks).
    #[arg(long, conflicts_with_all = ["plan", "batch"], value_parser = parse_rank_order)]
    pub rank_order: Option<sim::plan::shape::RankOrder>,
}

fn parse_rank_order(s: &str) -> std::result::Result<sim::plan::shape::RankOrder, String> {
    sim::plan::shape::RankOrder::parse(s).ok_or_else(|| {
        format!(
            "expected one of {}, got `{s}`",
            sim::plan::shape::RankOrder::ALL
                .map(|x| x.name())
                .join(", ")
        )
    })
}

fn parse_schedule(s: &str) -> std::result::Result<sim::plan::pipeline::PipeSchedule, String> {
    sim::plan::pipeline::PipeSchedule::parse(s).ok_or_else(|| {
        format!(
            "expected one of {}, got `{s}`",
            sim::plan::pipeline::PipeSchedule::ALL
                .iter()
                .map(|x| x.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

impl ShapeArgs {
    /// The shape, when any of its flags is given.
    pub fn shape(&self) -> Option<sim::plan::shape::Shape3d> {
        let any = self.tp.is_some()
            || self.pp.is_some()
            || self.sequence_parallel
            || self.pp_schedule.is_some()
            || self.virtual_stages.is_some()
            || self.microbatch_size.is_some()
            || self.tp_comm_overlap
            || self.tp_across_nodes
            || self.overlap_grad_reduce
            || self.overlap_param_gather
            || self.rank_order.is_some();
        let d = sim::plan::shape::Shape3d::default();
        any.then(|| sim::plan::shape::Shape3d {
            tp: self.tp.unwrap_or(d.tp),
            pp: self.pp.unwrap_or(d.pp),
            sequence_parallel: self.sequence_parallel,
            schedule: self.pp_schedule.unwrap_or(d.schedule),
            // The interleaved schedule's default: two chunks per GPU (torch's
            // looped schedules' default; Megatron needs at least two).
            virtual_stages: self.virtual_stages.unwrap_or(
                if self.pp_schedule == Some(sim::plan::pipeline::PipeSchedule::Interleaved) {
                    2
                } else {
                    d.virtual_stages
                },
            ),
            microbatch_size: self.microbatch_size.unwrap_or(d.microbatch_size),
            tp_comm_overlap: self.tp_comm_overlap,
            tp_across_nodes: self.tp_across_nodes,
            overlap_grad_reduce: self.overlap_grad_reduce,
            overlap_param_gather: self.overlap_param_gather,
            rank_order: self.rank_order.unwrap_or_default(),
        })
    }
}

/// Resolves the plan from `--plan` or the `--batch` lists with its
/// strategy (the file's, checked against the flags, or the flags') and
/// checks it against the workload, naming the file or flag on error.
fn resolve_plan(args: &Args, costs: &CostModel) -> Result<Plan> {
    let spec = args.strategy.spec()?;
    let workload = sim::plan::file::PlanWorkload::of(costs);
    let ctx = sim::session::strategy_context(costs);
    if let Some(shape) = args.shape.shape() {
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
