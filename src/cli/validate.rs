//! `cephalo validate` (built with `--features exec`): profile a device (or
//! load a profile), plan, simulate the plan, train it for real over MPI, and
//! print predicted vs measured side by side with relative errors.
//!
//! Steps, in order (nothing starts a rank before the plan is checked):
//! 1. the plan: `--batch` / `--microbatches` / `--state-fractions` lists,
//!    or by default an uneven demonstration plan
//!    ([`exec::validation::demo_plan`]: batches
//!    proportional to 3, 5, 7, ..., micro-batch counts 1, 2, 3, ..., state
//!    fractions proportional to 2, 3, 4, ...; for 2 ranks and a global batch
//!    of 8: batches 3 + 5, micro-batches 1 and 2, fractions 0.4 / 0.6; one
//!    rank: 2 micro-batches), so
//!    unequal batches, gradient accumulation and uneven shards are all
//!    exercised even on identical devices where a planner would split
//!    evenly; or `--planner NAME` (after profiling). A plan that does not
//!    match `--ranks`, fractions that do not sum to 1, or batches that do not
//!    sum to `--global-batch` exit 2 here;
//! 2. the profile: `--profile FILE` (any format `simulate` reads), else
//!    measured now: the collectives over `--ranks` ranks at the model's
//!    unit sizes with the plan's split and an even one, before the run;
//!    compute (`cephalo profile`'s measurements of micro-batch sizes
//!    1..=the plan's largest) by default **in the run**
//!    (`--compute-profile in-run`): the training ranks take a share of the
//!    measurements before each recorded iteration, side by side, so the
//!    profile sees the processes, threads, allocator and minutes the
//!    iterations see (on a host whose speed drifts by a fifth from minute
//!    to minute, a profile taken a minute before predicts another host);
//!    `--compute-profile before` profiles it before the run in processes
//!    of its own, as `--planner` needs to plan;
//! 3. the run: `--warmup` + `--iterations` iterations over `mpirun -n
//!    ranks`, this binary's hidden `exec-rank` subcommand as the rank
//!    program; medians over the recorded iterations;
//! 4. the prediction: `sim::simulate::simulate` of the plan's strategy
//!    (the strategy flags, or the one a `--plan` file records; the trainer
//!    runs the same `Strategy`) with the trainer's model sizes
//!    (`exec::sim_glue::model_for_trainer`) on that run's profile,
//!    **without prefetch and with blocking collectives**: the trainer
//!    issues every collective synchronously (a barrier, then the
//!    collective, then compute), on every device;
//! 5. the comparison (`exec::sim_glue::compare`). A run whose measurement
//!    was disturbed (other processes' load above
//!    [`validation::BUSY_PCT`], iterations spread by more than
//!    [`validation::SPREAD_LIMIT`]) is run again, up to
//!    `--attempts` runs; every run is listed (`attempts`), the last one
//!    compared, and one still disturbed is reported as such.
//!
//! Units: ms, GiB, relative errors as fractions. Exit codes: 0 with a
//! comparison (whatever the error), 2 for bad input, 1 when a run fails.

use crate::cli::profile::{self, Device};
use crate::cli::workload::StrategyArgs;
use crate::error::UserError;
use crate::load;
use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use exec::sim_glue::{self, Comparison, MeasuredReport, RunSettings};
use exec::validate_output::ValidateOutput;
use exec::validation::{self, Attempt, BackgroundLoad, BUSY_PCT};
use exec::AdamConfig;
use sim::cluster::Cluster;
use sim::cost::{CostModel, CostOptions, Workload};
use sim::plan::Plan;
use sim::planner::{self, PlannerOptions, Problem, SimJudge};
use sim::profile::ProfileSet;
use sim::session::{self, PlanInput};
use sim::simulate::simulate;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub use crate::cli::format::Format;

/// Flags of `cephalo validate`.
#[derive(Debug, Clone, ClapArgs)]
pub struct Args {
    /// Model name or alias (e.g. `deepspeedgpt_test`).
    #[arg(long)]
    pub model: String,
    /// Tokens per sample (default: the model's).
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Global batch (samples per iteration).
    #[arg(long)]
    pub global_batch: u32,
    /// MPI ranks (one device each).
    #[arg(long, default_value_t = 2)]
    pub ranks: usize,
    /// Recorded iterations.
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Warm-up iterations before them (trained, not recorded).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Device of every rank.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
    /// Catalog name of the device (default: `cpu`, or the CUDA device's name).
    #[arg(long)]
    pub gpu: Option<String>,
    /// Precision (default fp32 on the CPU, bf16 on CUDA).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Profile file or directory to use instead of measuring one.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Also write the profile measured here to this file.
    #[arg(long, conflicts_with = "profile")]
    pub save_profile: Option<PathBuf>,
    #[command(flatten)]
    pub strategy: StrategyArgs,
    /// Plan file (`cephalo plan --out` JSON) of any family (data-parallel,
    /// pipeline, 3D); strategy flags must agree with the strategy it
    /// records.
    #[arg(long, conflicts_with_all = ["batch", "planner"])]
    pub plan: Option<PathBuf>,
    /// A homogeneous 3D shape instead (as `simulate` takes it: `--tp`,
    /// `--pp`, `--pp-schedule`, `--sequence-parallel`, ...): Megatron's
    /// layout of the ranks, run by the trainer's tensor-parallel and
    /// pipeline stages.
    #[command(flatten)]
    pub shape: crate::cli::workload::ShapeArgs,
    /// Local batch per rank, comma-separated (default: the demo plan).
    #[arg(long, conflicts_with = "planner", allow_hyphen_values = true)]
    pub batch: Option<String>,
    /// Micro-batch COUNT per rank, comma-separated (default 1 each with --batch).
    #[arg(long, requires = "batch", allow_hyphen_values = true)]
    pub microbatches: Option<String>,
    /// State fraction per rank, comma-separated (default even with --batch).
    #[arg(long, requires = "batch", allow_hyphen_values = true)]
    pub state_fractions: Option<String>,
    /// Plan with this planner instead (cephalo, fsdp, fsdp-ga, ...).
    #[arg(long)]
    pub planner: Option<String>,
    /// libtorch threads per rank (default 1 on the CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seed of parameters and data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// When the compute the prediction uses is profiled: `in-run` by the
    /// training ranks, a share of the measurements before each recorded
    /// iteration (the same processes, threads, allocator and minutes as
    /// the iterations it predicts), or `before` the run in processes of
    /// its own (`cephalo profile`). A planner (`--planner`) plans on a
    /// profile taken before; `--profile` uses the file's.
    #[arg(long, value_enum, default_value_t = ComputeProfileWhen::InRun)]
    pub compute_profile: ComputeProfileWhen,
    /// Runs at most: a run whose measurement was disturbed (other
    /// processes' load, iterations spread by more than 15%) is run again,
    /// its error listed under `attempts` and not counted.
    #[arg(long, default_value_t = 2)]
    pub attempts: usize,
    /// Profiler: untimed runs before each point.
    #[arg(long, default_value_t = 2)]
    pub profile_warmup: usize,
    /// Profiler: timed runs per point.
    #[arg(long, default_value_t = 5)]
    pub profile_repetitions: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Kill a profiling or training job after this many seconds.
    #[arg(long, default_value_t = 1800)]
    pub timeout_s: u64,
    #[command(flatten)]
    pub launch: profile::LaunchArgs,
}

/// When `validate` profiles the compute it predicts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ComputeProfileWhen {
    /// By the training ranks between their recorded iterations.
    InRun,
    /// Before the run, in processes of its own.
    Before,
}

/// The strategy flags as the trainer runs them: its tch blocks are the
/// PyTorch stack op by op, so `--stack megatron` and `--compile` are
/// refused (exit 2) and every plan is predicted on the `pytorch` stack.
fn trainer_spec(args: &Args) -> Result<sim::strategy::StrategySpec> {
    validation::on_trainer_stack(args.strategy.spec()?)
        .ok_or_else(|| UserError(validation::TRAINER_STACK_ONLY.into()).into())
}

/// The plan the user gave (`--plan`, a 3D shape over the model's `layers`
/// blocks, or `--batch`), or the default uneven demo plan when none is
/// given; `None` when `--planner` plans it.
fn user_plan(
    args: &Args,
    layers: u32,
    ctx: &sim::strategy::StrategyContext<'_>,
    workload: &sim::plan::file::PlanWorkload,
) -> Result<Option<(Plan, String)>> {
    if args.planner.is_some() {
        return Ok(None);
    }
    let spec = trainer_spec(args)?;
    let others = [
        ("--plan", args.plan.is_some()),
        ("--batch", args.batch.is_some()),
    ];
    if let Some(shape) = args.shape.shape(&others)? {
        let input = PlanInput::Shape {
            shape: &shape,
            layers,
        };
        let origin = format!(
            "3D shape: tp {} x pp {} ({}{}), micro-batches of {} per replica",
            shape.tp,
            shape.pp,
            shape.schedule,
            if shape.sequence_parallel { ", sp" } else { "" },
            shape.microbatch_size
        );
        return Ok(Some((
            session::user_plan(input, &spec, ctx, workload)?,
            origin,
        )));
    }
    if let Some(path) = &args.plan {
        let origin = path.display().to_string();
        let text = load::read_text(path)?;
        let input = PlanInput::File {
            text: &text,
            origin: &origin,
        };
        return Ok(Some((
            session::user_plan(input, &spec, ctx, workload)?,
            origin,
        )));
    }
    let ranks = args.ranks;
    match &args.batch {
        Some(batch) => {
            let (batch, micro, fractions) = crate::cli::workload::plan_lists(
                batch,
                args.microbatches.as_deref(),
                args.state_fractions.as_deref(),
            )?;
            let origin = "--batch / --microbatches / --state-fractions";
            let input = PlanInput::Lists {
                batch: &batch,
                microbatches: &micro,
                state_fractions: fractions.as_deref(),
                origin,
            };
            Ok(Some((
                session::user_plan(input, &spec, ctx, workload)?,
                origin.into(),
            )))
        }
        None => match validation::demo_plan(ranks, args.global_batch, spec.resolve(ctx)?) {
            Some(p) => Ok(Some((p, validation::DEMO_PLAN_ORIGIN.into()))),
            None => Err(UserError(format!(
                "--global-batch: expected at least one sample per rank ({ranks} ranks), got {}",
                args.global_batch
            ))
            .into()),
        },
    }
}

/// What `validate` checks before it runs anything (step 1).
struct Setup {
    /// The catalog model, with the parameter counts of what the trainer
    /// builds.
    spec: sim::model::ModelSpec,
    seq_len: u32,
    /// The trainer's shape of it.
    cfg: exec::BlockConfig,
    dtype: sim::precision::NumFormat,
    /// Catalog name of the device.
    gpu: String,
    threads: Option<usize>,
    settings: RunSettings,
    planner: Option<Box<dyn sim::planner::Planner>>,
    /// `ranks` GPUs of the device's type.
    cluster: Cluster,
    /// The plan the user gave (and its source), unless a planner plans it.
    fixed: Option<(Plan, String)>,
    /// The strategy the trainer runs.
    strategy: sim::strategy::Strategy,
    timeout: Duration,
    notes: Vec<String>,
}

/// Step 1: every input that can be checked without running anything.
fn setup(args: &Args) -> Result<Setup> {
    if let Some(p) = &args.save_profile {
        crate::out::check_writable(p, "the profile (--save-profile)")?;
    }
    let spec = profile::model(&args.model, "--model")?;
    let seq_len = match args.seq_len {
        Some(0) => {
            return Err(UserError("--seq-len: expected a sequence length >= 1".into()).into())
        }
        Some(s) => s,
        None => spec.seq_len,
    };
    let (spec, notes) = sim_glue::model_for_trainer(&spec, seq_len);
    let cfg = sim_glue::block_config(&spec, seq_len).map_err(profile::exec_err)?;
    let dtype = profile::dtype(args.dtype.as_deref(), args.device)?;
    let gpu = profile::device_name(args.gpu.as_deref(), args.device)?;
    for (bad, msg) in [
        (args.ranks == 0, "--ranks: expected at least 1"),
        (
            args.global_batch == 0,
            "--global-batch: expected a global batch >= 1",
        ),
        (args.iterations == 0, "--iterations: expected at least 1"),
        (args.attempts == 0, "--attempts: expected at least 1 run"),
    ] {
        if bad {
            return Err(UserError(msg.into()).into());
        }
    }
    let threads = match (args.threads, args.device) {
        (Some(0), _) => return Err(UserError("--threads: expected at least 1".into()).into()),
        (Some(t), _) => Some(t),
        (None, Device::Cpu) => Some(1),
        (None, Device::Cuda) => None,
    };
    let settings = RunSettings {
        device: args.device.kind(),
        dtype,
        iterations: args.iterations,
        warmup_iterations: args.warmup,
        seed: args.seed,
        threads,
        adam: AdamConfig::default(),
    };
    let planner = match &args.planner {
        Some(name) => Some(planner::registry::by_name(name, "--planner")?),
        None => None,
    };
    let list = vec![gpu.as_str(); args.ranks].join(",");
    let cluster = Cluster::from_gpu_list(&list, "--device", crate::load::gpus())?;
    let planned_for = sim::plan::file::PlanWorkload {
        model: spec.name.clone(),
        seq_len: spec.tokens_per_sample(seq_len),
        dtype: dtype.to_string(),
        global_batch: args.global_batch,
        gpus: cluster.gpus.iter().map(|g| g.spec.name.clone()).collect(),
    };
    let ctx = validation::trainer_context(&cluster, dtype);
    let fixed = user_plan(args, spec.layers, &ctx, &planned_for)?;
    let strategy = match &fixed {
        Some((plan, _)) => plan.strategy,
        None => trainer_spec(args)?.resolve(&ctx)?,
    };
    if let Some((plan, _)) = &fixed {
        let job = sim_glue::job_from_plan(plan, &cfg, &settings).map_err(profile::exec_err)?;
        job.validate(Some(args.ranks), Some(args.global_batch as usize))
            .map_err(profile::exec_err)?;
    }
    Ok(Setup {
        spec,
        seq_len,
        cfg,
        dtype,
        gpu,
        threads,
        settings,
        planner,
        cluster,
        fixed,
        strategy,
        timeout: Duration::from_secs(args.timeout_s.max(1)),
        notes,
    })
}

/// What `validate` measured (or read) before the run.
struct Before {
    /// What it measured (`None` with `--profile`).
    req: Option<profile::Request>,
    /// Compute measured before the run (with `--compute-profile before`,
    /// or for `--planner` to plan with).
    compute: Option<exec::ComputeProfile>,
    /// Collectives measured before the run.
    collectives: Vec<exec::CollectiveTiming>,
    /// The profile read from `--profile`.
    file: Option<ProfileSet>,
    /// Other processes' CPU use while measuring, %.
    busy: Option<f64>,
}

impl Before {
    /// The profile set of these measurements, with `in_run` compute (the
    /// run's own) in place of any measured before; `None` when no compute
    /// was measured yet.
    fn set(&self, in_run: Option<&exec::ComputeProfile>) -> Result<Option<(ProfileSet, String)>> {
        if let Some(set) = &self.file {
            return Ok(Some((set.clone(), String::new())));
        }
        let (Some(req), Some(compute)) = (&self.req, in_run.or(self.compute.as_ref())) else {
            return Ok(None);
        };
        let text =
            sim::profile::native::to_json(&profile::native(req, compute, &self.collectives)?);
        let set = sim::profile::native::import(
            &text,
            "measured now",
            crate::load::gpus(),
            crate::load::models(),
        )?;
        Ok(Some((set, text)))
    }
}

/// Whether the compute profile is taken in the run (with `--profile`
/// the file's is used).
fn in_run(args: &Args) -> bool {
    args.profile.is_none() && args.compute_profile == ComputeProfileWhen::InRun
}

/// Step 2: the profile read from `--profile`, or what is measured before
/// the run: the collectives, and compute unless the run profiles it
/// itself (`--compute-profile in-run` once the plan is known). `plan`:
/// the plan when known (its micro-batch sizes and state split set the
/// sizes measured; `None` before a planner plans).
fn measure_before(args: &Args, s: &Setup, plan: Option<&Plan>) -> Result<Before> {
    if let Some(path) = &args.profile {
        return Ok(Before {
            req: None,
            compute: None,
            collectives: vec![],
            file: Some(load::load_profiles(path)?),
            busy: None,
        });
    }
    let max_m = match plan {
        Some(p) => validation::max_microbatch(p),
        None => args.global_batch.min(8),
    };
    let mut splits = profile::default_splits(args.ranks);
    if let Some(p) = plan {
        let fr = p.state_fractions();
        if !splits.contains(&fr) && args.ranks >= 2 {
            splits.insert(0, fr);
        }
    }
    let cfg_elems = validation::collective_sizes(&s.cfg, plan, max_m);
    let req = profile::Request {
        model: s.spec.clone(),
        seq_len: s.seq_len,
        dtype: s.dtype,
        device: args.device,
        gpu: s.gpu.clone(),
        batch_sizes: (1..=max_m).collect(),
        ranks: args.ranks,
        collective_elems: cfg_elems,
        splits,
        threads: s.threads,
        warmup: args.profile_warmup,
        repetitions: args.profile_repetitions.max(1),
        timeout: s.timeout,
        flush_bytes: profile::flush_bytes(args.device),
        optimizer_samples: Some(args.global_batch as usize),
        launch: args.launch.clone(),
    };
    let compute_now = !in_run(args) || plan.is_none();
    eprintln!(
        "validate: profiling {} on {} ({}{})",
        s.spec.name,
        s.gpu,
        if compute_now {
            format!("micro-batch sizes 1..={max_m}")
        } else {
            "compute in the run".into()
        },
        if args.ranks >= 2 {
            format!(", collectives over {} ranks", args.ranks)
        } else {
            String::new()
        }
    );
    let probe = profile::LoadProbe::start(args.launch.launcher);
    let compute = if compute_now {
        Some(profile::measure_compute(&req)?)
    } else {
        None
    };
    let collectives = profile::measure_collectives(&req)?;
    Ok(Before {
        req: Some(req),
        compute,
        collectives,
        file: None,
        busy: probe.and_then(|p| p.others_pct()),
    })
}

/// Step 3: the cost model of the run's workload on `profiles`, and its
/// remarks (analytic block times, estimated units, the cost model's
/// warnings).
fn cost_model(args: &Args, s: &Setup, profiles: &ProfileSet) -> Result<(CostModel, Vec<String>)> {
    let workload = Workload {
        cluster: s.cluster.clone(),
        model: s.spec.clone(),
        seq_len: s.spec.tokens_per_sample(s.seq_len),
        dtype: s.dtype,
        global_batch: args.global_batch,
    };
    let predictor = sim::perfmodel::builtin();
    let costs = CostModel::build(
        workload,
        profiles,
        predictor.as_ref(),
        CostOptions::default(),
    )?;
    let notes = validation::cost_notes(&costs, &s.gpu, &s.spec.name, s.seq_len, s.dtype);
    Ok((costs, notes))
}

/// The plan that runs and its source: the user's, or planned on the
/// profile measured before the run for the strategy the trainer runs.
fn choose_plan(args: &Args, s: &mut Setup, before: &Before) -> Result<(Plan, String)> {
    if let Some(fixed) = s.fixed.take() {
        return Ok(fixed);
    }
    let Some(pl) = &s.planner else {
        unreachable!("user_plan returns a plan unless --planner is given")
    };
    let (profiles, _) = before
        .set(None)?
        .expect("compute is profiled before the run when a planner plans");
    let (costs, _) = cost_model(args, s, &profiles)?;
    let sim_opts = validation::sim_options();
    let judge = SimJudge::with_options(&costs, sim_opts);
    let popts = PlannerOptions::default();
    // The planner plans for the strategy the trainer runs.
    let pins = sim::strategy::StrategySpec::pinned(&s.strategy);
    let problem = Problem {
        costs: &costs,
        profiles: &profiles,
        options: &popts,
        strategy: &pins,
        judge: Some(&judge),
    };
    let planned = pl.plan(&problem)?;
    s.notes.extend(planned.notes.iter().cloned());
    let job =
        sim_glue::job_from_plan(&planned.plan, &s.cfg, &s.settings).map_err(profile::exec_err)?;
    job.validate(Some(args.ranks), Some(args.global_batch as usize))
        .map_err(profile::exec_err)?;
    Ok((planned.plan, format!("planner {}", pl.name())))
}

/// Step 4: trains `plan` for real (profiling compute between its
/// iterations with `in_run`): the report, other processes' CPU use while
/// it trained, and why the measurement was disturbed (other processes'
/// load while it, or the profile before it, `bg_profile`, measured; each
/// reason warned about).
fn train(
    args: &Args,
    s: &Setup,
    plan: &Plan,
    in_run: Option<exec::InRunProfile>,
    bg_profile: Option<f64>,
) -> Result<(exec::TrainReport, Option<f64>, Vec<String>)> {
    let mut job = sim_glue::job_from_plan(plan, &s.cfg, &s.settings).map_err(profile::exec_err)?;
    job.compute_profile = in_run;
    job.validate(Some(args.ranks), Some(args.global_batch as usize))
        .map_err(profile::exec_err)?;
    eprintln!(
        "validate: training {} + {} iterations on {} ranks{}",
        args.warmup,
        args.iterations,
        args.ranks,
        if job.compute_profile.is_some() {
            ", profiling compute between them"
        } else {
            ""
        }
    );
    let probe = profile::LoadProbe::start(args.launch.launcher);
    let report = exec::launch(
        &job,
        &profile::launch_options(args.ranks, s.timeout, &args.launch)?,
    )
    .map_err(profile::exec_err)
    .context("training the plan")?;
    let bg_run = probe.and_then(|p| p.others_pct());
    let mut why = Vec::new();
    for (what, pct) in [("profiling", bg_profile), ("training", bg_run)] {
        if let Some(msg) = validation::busy(what, pct) {
            eprintln!("WARNING: {msg}");
            why.push(msg);
        }
    }
    Ok((report, bg_run, why))
}

/// One run of the plan, its prediction and the comparison (step 5).
struct Run {
    measured: MeasuredReport,
    spread: f64,
    bg_run: Option<f64>,
    /// Why the measurement was disturbed (empty: it was not).
    why: Vec<String>,
    costs: CostModel,
    predicted: sim::report::Report,
    comparison: Comparison,
    /// The profile file's text it predicted with (measured now).
    profile_text: String,
    notes: Vec<String>,
}

/// Trains the plan once and predicts it on the profile of this run (its
/// own compute with `--compute-profile in-run`).
fn run_once(args: &Args, s: &Setup, plan: &Plan, before: &Before) -> Result<Run> {
    let in_run_cfg = in_run(args).then(|| exec::InRunProfile {
        micro_batch_sizes: (1..=validation::max_microbatch(plan) as usize).collect(),
        warmup: args.profile_warmup,
        repetitions: args.profile_repetitions.max(1),
        flush_bytes: profile::flush_bytes(args.device),
    });
    let (report, bg_run, mut why) = train(args, s, plan, in_run_cfg, before.busy)?;
    let Some((profiles, profile_text)) = before.set(report.compute_profile.as_ref())? else {
        return Err(anyhow::anyhow!(
            "the ranks returned no compute profile to predict the run with"
        ));
    };
    let (costs, mut notes) = cost_model(args, s, &profiles)?;
    let predicted = simulate(&costs, plan, &validation::sim_options())?;
    let built: Vec<u64> = report.unit_params.iter().map(|&p| p as u64).collect();
    if built != costs.unit_params() {
        notes.push(format!(
            "the trainer's unit sizes {:?} differ from the simulated {:?}",
            built,
            costs.unit_params()
        ));
    }
    let measured = sim_glue::measured_report(&report);
    let spread = validation::iteration_spread(&measured.iteration_ms_each);
    if let Some(msg) = validation::uneven(spread, measured.iteration_ms_each.len()) {
        eprintln!("WARNING: {msg}");
        why.push(msg);
    }
    let comparison = sim_glue::compare(&predicted, &measured);
    Ok(Run {
        measured,
        spread,
        bg_run,
        why,
        costs,
        predicted,
        comparison,
        profile_text,
        notes,
    })
}

/// Runs the command: checks, profile, plan, then up to `--attempts` runs
/// (each predicted on its own profile) until one is not disturbed; the
/// comparison of the last.
pub fn run(args: Args) -> Result<ExitCode> {
    let mut s = setup(&args)?;
    let mut before = measure_before(&args, &s, s.fixed.as_ref().map(|f| &f.0))?;
    let (plan, plan_source) = choose_plan(&args, &mut s, &before)?;
    let max_runs = args.attempts;
    let mut attempts = Vec::new();
    let mut r = run_once(&args, &s, &plan, &before)?;
    loop {
        attempts.push(Attempt::of(&r.comparison, &r.why));
        if r.why.is_empty() || attempts.len() >= max_runs {
            break;
        }
        eprintln!(
            "validate: run {} of at most {max_runs} was disturbed (error {:+.1}%, not the model's): running again",
            attempts.len(),
            r.comparison.iteration_error_rel * 100.0
        );
        // What was measured before the run under other processes' load
        // (collectives on shared cores above all) is measured again.
        if before.busy.is_some_and(|p| p > BUSY_PCT) {
            before = measure_before(&args, &s, Some(&plan))?;
        }
        r = run_once(&args, &s, &plan, &before)?;
    }
    if let Some(path) = &args.save_profile {
        crate::out::write_text(path, &r.profile_text, "the profile (--save-profile)")?;
    }
    for (k, a) in attempts.iter().enumerate().take(attempts.len() - 1) {
        s.notes.push(a.not_counted(k + 1, attempts.len()));
    }
    s.notes.extend(r.notes);
    s.notes.extend(r.why.iter().cloned());
    let out = ValidateOutput {
        format: "cephalo-validate/1",
        model: s.spec.name.clone(),
        device: match args.device {
            Device::Cpu => "cpu".into(),
            Device::Cuda => "cuda".into(),
        },
        gpu: s.gpu,
        dtype: s.dtype.to_string(),
        seq_len: s.seq_len,
        global_batch: args.global_batch,
        iterations: args.iterations,
        warmup_iterations: args.warmup,
        threads: s.threads,
        plan_source,
        plan,
        profile_source: profile_source(&args),
        compute_source: r.costs.gpu_type(0).block.source.to_string(),
        comm_model: r.predicted.comm_model.clone(),
        measured_iteration_ms_each: r.measured.iteration_ms_each.clone(),
        measured: r.measured,
        comparison: r.comparison,
        background_cpu_pct: BackgroundLoad {
            profile: before.busy,
            run: r.bg_run,
        },
        measurement_disturbed: !r.why.is_empty(),
        iteration_spread: r.spread,
        attempts,
        notes: {
            let mut n = s.notes;
            if args.launch.launcher == exec::Launcher::Srun {
                n.push("other processes' CPU use is not measured under srun: the ranks are slurmstepd's children, not this process's, so their CPU time cannot be told from others'".into());
            }
            n
        },
    };
    print(&out, args.format)
}

/// Where the prediction's profile came from, in words.
fn profile_source(args: &Args) -> String {
    match (&args.profile, args.compute_profile) {
        (Some(path), _) => path.display().to_string(),
        (None, ComputeProfileWhen::InRun) => "measured now: compute by the training ranks between their recorded iterations, collectives before the run".into(),
        (None, ComputeProfileWhen::Before) => "measured now, before the run (cephalo profile)".into(),
    }
}

/// Prints the output in `format`, then the notes that were not warned
/// about as they arose.
fn print(out: &ValidateOutput, format: Format) -> Result<ExitCode> {
    match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(out).context("serialising the output")?;
            s.push('\n');
            out!("{s}");
        }
        Format::Table => out!("{}", out.table()),
        Format::Csv => out!(
            "{}",
            crate::cli::format::csv_of(&out.comparison.csv_rows())?
        ),
    }
    let rest: Vec<String> = out
        .notes
        .iter()
        .filter(|n| !validation::is_disturbance(n))
        .cloned()
        .collect();
    crate::cli::notes::eprint("note", &rest);
    Ok(ExitCode::SUCCESS)
}

/// Flags of the hidden `exec-rank` subcommand (one MPI rank of a job that
/// `validate` or `profile` launched; rank 0 reads the job on its standard
/// input and writes its output on its standard output).
#[derive(Debug, Clone, ClapArgs)]
pub struct RankArgs {
    /// Ignored (a caller may tag its processes with them).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub ignored: Vec<String>,
}

/// Runs one rank.
pub fn run_rank(_args: RankArgs) -> Result<ExitCode> {
    exec::rank_main()?;
    Ok(ExitCode::SUCCESS)
}
