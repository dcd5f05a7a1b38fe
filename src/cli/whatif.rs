//! `cephalo whatif`: questions asked before renting a cluster, in their own
//! words, each a thin layer over the library the studies use
//! ([`sim::whatif`], the planners, the simulator), each with table, JSON
//! (`cephalo-whatif/1`) and CSV output:
//!
//! * `train-cost --tokens N`: days, GPU-hours and USD to train on N tokens
//!   with the best plan (or `--planner`'s) on the cluster;
//! * `min-gpus`: the smallest count of one GPU type (`--gpu`, in nodes of
//!   `--gpus-per-node`, at most `--nodes` of them) on which Cephalo's
//!   planner finds a plan that fits and trains;
//! * `fit`: what must change for the workload to fit ([`sim::whatif::fit`]:
//!   each strategy knob pinned otherwise, any planner, the physical memory
//!   limit, more GPUs), each planned and simulated, the cheapest named;
//! * `memory`: one GPU's memory at its peak for a model and strategy on
//!   `--world-size` data-parallel GPUs, per micro-batch size, and which
//!   catalog GPUs hold it ([`sim::whatif::memory`]);
//! * `cheapest --pool POOL.toml --target-tokens-per-s T`: which servers to
//!   rent from a pool of offers (counts and prices) to reach T tokens/s at
//!   the least cost per hour ([`sim::whatif::cheapest`], [`sim::pool`]).
//!
//! Exit codes: 0 with an answer (also "none fits" for `min-gpus`), 2 for
//! bad input (a GPU without a price for `train-cost`, named).

use crate::cli::format::Format;
use crate::cli::plan::{log_search, PlannerFlags, BEST};
use crate::cli::workload::{StrategyArgs, WorkloadArgs};
use crate::error::UserError;
use anyhow::Result;
use clap::{Args as ClapArgs, Subcommand};
use sim::planner;
use sim::whatif_answer::{
    CheapestAnswer, FitAnswer, MemoryAnswers, MinGpusAnswer, OfferMinsAnswer, TrainCostAnswer,
    FORMAT,
};
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
    /// What must change for the workload to fit: each change planned and
    /// simulated, the cheapest named.
    Fit(FitArgs),
    /// Per-GPU memory of a model and strategy, and which GPUs hold it (no
    /// cluster needed).
    Memory(MemoryArgs),
    /// The cheapest servers to rent from a pool (TOML: offers with counts
    /// and prices) that reach a throughput.
    Cheapest(CheapestArgs),
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
/// largest cluster to try (N nodes); or `--pool` asks it of every offer.
#[derive(Debug, Clone, ClapArgs)]
pub struct MinGpusArgs {
    #[command(flatten)]
    pub query: Query,
    /// Ask of every offer of a rental pool (TOML, as `whatif cheapest`):
    /// the fewest of its servers, alone, that fit and train.
    #[arg(long)]
    pub pool: Option<std::path::PathBuf>,
}

/// Flags of `whatif fit`.
#[derive(Debug, Clone, ClapArgs)]
pub struct FitArgs {
    #[command(flatten)]
    pub query: Query,
    /// Planner (default `best`: the fastest plan of every family).
    #[arg(long, default_value = BEST)]
    pub planner: String,
    /// The largest cluster "more GPUs" may grow to, GPUs.
    #[arg(long, default_value_t = 1024)]
    pub max_gpus: u32,
}

/// Runs the command.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.question {
        Question::TrainCost(a) => train_cost(a),
        Question::MinGpus(a) => min_gpus(a),
        Question::Fit(a) => fit(a),
        Question::Memory(a) => memory(a),
        Question::Cheapest(a) => cheapest(a),
    }
}

fn train_cost(t: TrainCostArgs) -> Result<ExitCode> {
    let a = &t.query;
    let opts = a.flags.options(&a.workload.model)?;
    let spec = a.strategy.spec()?;
    let (workload, mem_default) = a.workload.for_planner(&t.planner);
    let res = workload.resolve()?;
    crate::cli::notes::eprint("warning", &res.costs.warnings);
    if let Some(d) = &mem_default {
        let note = d.note(&res.costs.options, res.costs.ranks());
        crate::cli::notes::eprint("note", &[note]);
    }
    let (run, ran) = sim::session::plan_named(
        &res.costs,
        &res.profiles,
        &t.planner,
        "--planner",
        &opts,
        &spec,
    )?;
    if !t.planner.eq_ignore_ascii_case(BEST) {
        log_search(ran, &run.planned.stats, run.elapsed_s);
    }
    let cluster = &res.costs.workload.cluster;
    let cost = sim::whatif::train_cost(&run.report, cluster, t.tokens)
        .map_err(|e| UserError(e.to_string()))?;
    let out = TrainCostAnswer {
        format: FORMAT,
        question: "train-cost",
        model: res.costs.workload.model.name.clone(),
        gpus: sim::lists::name_runs(&cluster.gpu_names()),
        planner: ran.to_string(),
        strategy: run.planned.plan.label(),
        cost,
    };
    match a.format {
        Format::Json => out!("{}", serde_json::to_string_pretty(&out)? + "\n"),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&[&out.cost])?),
        Format::Table => out!("{}", out.table()),
    }
    Ok(ExitCode::SUCCESS)
}

fn min_gpus(m: MinGpusArgs) -> Result<ExitCode> {
    if let Some(pool) = &m.pool {
        return min_gpus_pool(&m.query, pool);
    }
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
    let max = nodes.saturating_mul(per);
    let mut best_tps = std::collections::BTreeMap::new();
    let bar = crate::cli::progress::spinner("searching GPU counts");
    let (found, tried) = sim::whatif::min_gpus(per, max, |n| -> Result<bool> {
        let mut w = a.workload.clone();
        w.cluster.nodes = Some(n.div_ceil(per).max(1));
        w.cluster.gpus_per_node = Some(n.min(per));
        let (workload, profiles, predictor) = w.parts()?;
        let planning = sim::whatif::Planning {
            profiles: &profiles,
            predictor: &predictor,
            planner: planner::registry::native_name(),
            options: &opts,
            pins: &spec,
        };
        let tps = sim::whatif::trains(&workload, &planning)?;
        if let Some(t) = tps {
            best_tps.insert(n, t);
        }
        Ok(tps.is_some())
    })?;
    bar.finish_and_clear();
    let out = MinGpusAnswer {
        format: FORMAT,
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
        Format::Table => out!("{}", out.table()),
    }
    Ok(ExitCode::SUCCESS)
}

fn fit(f: FitArgs) -> Result<ExitCode> {
    let a = &f.query;
    let opts = a.flags.options(&a.workload.model)?;
    let pins = a.strategy.spec()?;
    // The cluster file is read once: fit grows it, the workload runs on it.
    let (file, origin) = a.workload.cluster.file()?;
    let cluster = sim::cluster::Cluster::from_file(&file, &origin, crate::load::gpus())?;
    let (args, mem_default) = a.workload.for_planner(&f.planner);
    let (workload, profiles, predictor) = args.parts_on(cluster)?;
    crate::cli::notes::eprint("warning", &profiles.warnings);
    if let Some(d) = &mem_default {
        let note = d.note(&workload.options, workload.cluster.len());
        crate::cli::notes::eprint("note", &[note]);
    }
    if f.max_gpus == 0 || f.max_gpus as usize > sim::limits::MAX_GPUS {
        return Err(UserError(format!(
            "--max-gpus: expected 1..={}, got {}",
            sim::limits::MAX_GPUS,
            f.max_gpus
        ))
        .into());
    }
    let bar = crate::cli::progress::spinner("planning each change");
    let fit = sim::whatif::fit(&sim::whatif::FitQuery {
        workload: &workload,
        cluster_file: &file,
        cluster_origin: &origin,
        catalog: crate::load::gpus(),
        planning: sim::whatif::Planning {
            profiles: &profiles,
            predictor: &predictor,
            planner: &f.planner,
            options: &opts,
            pins: &pins,
        },
        max_gpus: f.max_gpus,
        planner_mem_default: mem_default.is_some(),
    })?;
    bar.finish_and_clear();
    let mut fit = fit;
    // Clusters given as identical nodes grow by --nodes.
    if let Some(n) = a.workload.cluster.nodes {
        for r in fit.rows.iter_mut().filter(|r| r.added_nodes > 0) {
            r.flags = format!("--nodes {}", n + r.added_nodes);
        }
    }
    let out = FitAnswer {
        format: FORMAT,
        question: "fit",
        model: workload.model.name.clone(),
        gpus: sim::lists::name_runs(&workload.cluster.gpu_names()),
        planner: f.planner.clone(),
        fits_as_asked: fit.fits_as_asked(),
        fit,
    };
    match a.format {
        Format::Json => out!("{}", serde_json::to_string_pretty(&out)? + "\n"),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&out.fit.rows)?),
        Format::Table => out!("{}", out.table()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Flags of `whatif memory`: the model and strategy, no cluster.
#[derive(Debug, Clone, ClapArgs)]
pub struct MemoryArgs {
    /// Model name or alias (e.g. `llama2-7b`).
    #[arg(long)]
    pub model: String,
    /// Tokens per sample (default: the model's).
    #[arg(long)]
    pub seq_len: Option<u32>,
    /// Precision: fp16 | bf16 | fp32 (fp16/bf16 = mixed precision).
    #[arg(long, default_value = "fp16")]
    pub dtype: String,
    #[command(flatten)]
    pub strategy: StrategyArgs,
    /// GPUs the state is sharded over (the data-parallel group).
    #[arg(long, default_value_t = 8)]
    pub world_size: u32,
    /// Samples per micro-batch; a list gives one row per size.
    #[arg(long, default_value = "1")]
    pub microbatch_size: String,
    /// Micro-batches per iteration on every GPU (gradient accumulation;
    /// synchronous unless `--accumulation` says otherwise).
    #[arg(long, default_value_t = 1)]
    pub microbatches: u32,
    /// GPU type whose kernels are assumed (flash attention, compute); the
    /// fit is judged on every catalog GPU.
    #[arg(long, default_value = "h100-sxm")]
    pub gpu: String,
    /// Let a plan use only this fraction of each GPU's memory (default:
    /// the physical limit, as `plan`).
    #[arg(long)]
    pub mem_fraction: Option<f64>,
    /// Memory outside the allocator per GPU, GiB (default as `plan`).
    #[arg(long)]
    pub overhead_gib: Option<f64>,
    /// Calibration file instead of the shipped one.
    #[arg(long)]
    pub calibration: Option<std::path::PathBuf>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

fn memory(m: MemoryArgs) -> Result<ExitCode> {
    let sizes = sim::lists::items(&m.microbatch_size, "--microbatch-size")?
        .iter()
        .map(|x| {
            x.parse::<u32>().ok().filter(|&v| v >= 1).ok_or_else(|| {
                UserError(format!(
                    "--microbatch-size: expected sample counts >= 1, got `{x}`"
                ))
            })
        })
        .collect::<Result<Vec<u32>, UserError>>()?;
    let n = m.world_size;
    let mut pins = m.strategy.spec()?;
    // What frameworks run when nothing is pinned: synchronous accumulation
    // (PyTorch FSDP / DeepSpeed), not Cephalo's layered one.
    pins.accumulation
        .get_or_insert(sim::strategy::Accumulation::Sync);
    if n == 0 || n as usize > sim::limits::MAX_GPUS || m.microbatches == 0 {
        return Err(UserError(format!(
            "--world-size / --microbatches: expected 1..={} GPUs and at least 1 micro-batch, got {n} and {}",
            sim::limits::MAX_GPUS,
            m.microbatches
        ))
        .into());
    }
    let globals = sizes
        .iter()
        .map(|&size| {
            let global = (n as u64) * (size as u64) * (m.microbatches as u64);
            u32::try_from(global).map_err(|_| {
                UserError(format!(
                    "--world-size x --microbatch-size x --microbatches: {global} samples per iteration is more than a u32 holds"
                ))
            })
        })
        .collect::<Result<Vec<u32>, UserError>>()?;
    // Catalogs, calibration and the cluster are read once; each size only
    // changes the global batch.
    let (workload, profiles, predictor) = memory_workload(&m, n, globals[0]).parts()?;
    let seq = workload.seq_len.unwrap_or(workload.model.seq_len);
    let bar = crate::cli::progress::spinner("simulating each micro-batch size");
    let mut rows = Vec::new();
    for (&size, &global) in sizes.iter().zip(&globals) {
        let workload = sim::session::WorkloadSpec {
            global_batch: global,
            ..workload.clone()
        };
        rows.push(sim::whatif::memory(
            &sim::whatif::MemoryQuery {
                workload: &workload,
                profiles: &profiles,
                predictor: &predictor,
                pins: &pins,
                micro_batch_size: size,
                microbatches: m.microbatches,
            },
            crate::load::gpus(),
        )?);
    }
    bar.finish_and_clear();
    let out = MemoryAnswers {
        format: FORMAT,
        question: "memory",
        model: m.model.clone(),
        seq_len: seq,
        dtype: m.dtype.clone(),
        rows,
    };
    match m.format {
        Format::Json => out!("{}", serde_json::to_string_pretty(&out)? + "\n"),
        Format::Csv => out!("{}", memory_csv(&out)?),
        Format::Table => out!("{}", out.table()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Flags of `whatif cheapest`: the workload without a cluster (the pool
/// gives it), the pool and the throughput to reach.
#[derive(Debug, Clone, ClapArgs)]
pub struct CheapestArgs {
    #[command(flatten)]
    pub query: Query,
    /// The rental pool (TOML: `[[offer]]` gpu, gpus_per_node, max_nodes,
    /// price_per_hour_usd; `[network]`); see `sim::pool`.
    #[arg(long)]
    pub pool: std::path::PathBuf,
    /// Tokens/s the rental must reach.
    #[arg(long)]
    pub target_tokens_per_s: f64,
    /// Planner (default `best`: the fastest plan of every family).
    #[arg(long, default_value = BEST)]
    pub planner: String,
}

/// A rental pool read and checked, `--network-gbit-s` applied; the
/// cluster flags refused (the pool gives the GPUs). Returns it and its path.
fn load_pool(
    path: &std::path::Path,
    cl: &crate::cli::workload::ClusterArgs,
) -> Result<(sim::pool::Pool, String)> {
    if cl.gpus.is_some() || cl.cluster.is_some() || cl.nodes.is_some() || !cl.add_gpu.is_empty() {
        return Err(UserError(
            "--pool: the pool gives the GPUs; --gpus, --cluster, --nodes and --add-gpu do not apply"
                .into(),
        )
        .into());
    }
    let origin = path.display().to_string();
    let catalog = crate::load::gpus();
    let mut pool = sim::pool::Pool::parse(&crate::load::read_text(path)?, &origin, catalog)?;
    if let Some(bw) = cl.network_gbit_s {
        let mut f = sim::cluster::ClusterFile {
            name: None,
            network: pool.network.take(),
            nodes: Vec::new(),
        };
        f.set_network_gbit_s(bw);
        pool.network = f.network;
    }
    Ok((pool, origin))
}

/// The workload of a pool question (on the pool's first server, replaced
/// per selection), its profiles and predictor.
fn pool_parts(
    pool: &sim::pool::Pool,
    origin: &str,
    a: &Query,
) -> Result<(
    sim::session::WorkloadSpec,
    sim::profile::ProfileSet,
    sim::perfmodel::Calibrated,
)> {
    let catalog = crate::load::gpus();
    let one: Vec<u32> = (0..pool.offer.len()).map(|i| u32::from(i == 0)).collect();
    let first = pool
        .cluster(&one, catalog)
        .ok_or_else(|| UserError(format!("{origin}: expected at least one [[offer]]")))?;
    let parts = a
        .workload
        .parts_on(sim::cluster::Cluster::from_file(&first, origin, catalog)?)?;
    crate::cli::notes::eprint("warning", &parts.1.warnings);
    Ok(parts)
}

/// `whatif min-gpus --pool`: every offer's fewest servers that fit and train.
fn min_gpus_pool(a: &Query, path: &std::path::Path) -> Result<ExitCode> {
    let (pool, origin) = load_pool(path, &a.workload.cluster)?;
    let (workload, profiles, predictor) = pool_parts(&pool, &origin, a)?;
    let opts = a.flags.options(&a.workload.model)?;
    let pins = a.strategy.spec()?;
    let bar = crate::cli::progress::spinner("searching each offer's server count");
    let offers = sim::whatif::min_per_offer(&sim::whatif::RentQuery {
        pool: &pool,
        catalog: crate::load::gpus(),
        workload: &workload,
        planning: sim::whatif::Planning {
            profiles: &profiles,
            predictor: &predictor,
            planner: planner::registry::native_name(),
            options: &opts,
            pins: &pins,
        },
        target_tokens_per_s: f64::MIN_POSITIVE,
    })?;
    bar.finish_and_clear();
    let out = OfferMinsAnswer {
        format: FORMAT,
        question: "min-gpus",
        model: workload.model.name.clone(),
        pool: pool.name.clone().unwrap_or(origin),
        offers,
    };
    match a.format {
        Format::Json => out!("{}", serde_json::to_string_pretty(&out)? + "\n"),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&out.offers)?),
        Format::Table => out!("{}", out.table()),
    }
    Ok(ExitCode::SUCCESS)
}

fn cheapest(c: CheapestArgs) -> Result<ExitCode> {
    let a = &c.query;
    let cl = &a.workload.cluster;
    let (pool, origin) = load_pool(&c.pool, cl)?;
    let catalog = crate::load::gpus();
    let (workload, profiles, predictor) = pool_parts(&pool, &origin, a)?;
    let opts = a.flags.options(&a.workload.model)?;
    let pins = a.strategy.spec()?;
    let bar = crate::cli::progress::spinner("planning selections of the pool");
    let rental = sim::whatif::cheapest(&sim::whatif::RentQuery {
        pool: &pool,
        catalog,
        workload: &workload,
        planning: sim::whatif::Planning {
            profiles: &profiles,
            predictor: &predictor,
            planner: &c.planner,
            options: &opts,
            pins: &pins,
        },
        target_tokens_per_s: c.target_tokens_per_s,
    })?;
    bar.finish_and_clear();
    let out = CheapestAnswer {
        format: FORMAT,
        question: "cheapest",
        model: workload.model.name.clone(),
        pool: pool.name.clone().unwrap_or(origin),
        planner: c.planner.clone(),
        rental,
    };
    match a.format {
        Format::Json => out!("{}", serde_json::to_string_pretty(&out)? + "\n"),
        Format::Csv => out!("{}", crate::cli::format::csv_of(&out.rental.tried)?),
        Format::Table => out!("{}", out.table()),
    }
    Ok(ExitCode::SUCCESS)
}

/// The workload `whatif memory` simulates: the model on `n` GPUs of the
/// host type (nodes of at most 8), `global` samples per iteration.
fn memory_workload(m: &MemoryArgs, n: u32, global: u32) -> crate::cli::workload::WorkloadArgs {
    use crate::cli::workload::{ClusterArgs, CommArgs};
    let per = n.min(8);
    crate::cli::workload::WorkloadArgs {
        cluster: ClusterArgs {
            nodes: Some(n.div_ceil(per)),
            gpus_per_node: Some(per),
            gpu: Some(m.gpu.clone()),
            ..Default::default()
        },
        model: m.model.clone(),
        global_batch: global,
        seq_len: m.seq_len,
        dtype: m.dtype.clone(),
        profiles: Vec::new(),
        calibration: m.calibration.clone(),
        memory_cluster: None,
        mem_fraction: m.mem_fraction,
        overhead_gib: m.overhead_gib,
        moe_imbalance: None,
        comm: CommArgs {
            comm_algo: "auto".into(),
            ..Default::default()
        },
    }
}

/// `whatif memory`'s CSV: one row per micro-batch size and GPU type.
fn memory_csv(out: &MemoryAnswers) -> Result<String> {
    crate::cli::format::csv_of(&sim::whatif::memory_csv_rows(&out.rows))
}
