//! What-if questions answered from a simulated plan: how long and how much
//! a token budget costs ([`train_cost`]), the smallest GPU count that
//! fits and trains ([`min_gpus`], a search over counts with the caller's
//! judgement of each), and what must change for a workload to fit
//! ([`fit`]: each change a user can make, planned and simulated, the
//! cheapest named). Thin layers over the planners and the simulator the
//! `cephalo whatif` subcommands and the studies share.
//!
//! Units: tokens, seconds, days, GPU-hours, USD.

use crate::cluster::{Cluster, ClusterFile};
use crate::cost::{CostModel, MemPolicy};
use crate::error::{PlanError, SpecError};
use crate::gpu::GpuCatalog;
use crate::perfmodel::Predictor;
use crate::planner::PlannerOptions;
use crate::pool::Pool;
use crate::profile::ProfileSet;
use crate::report::Report;
use crate::session::{build_workload, plan_named, WorkloadSpec, BEST};
use crate::strategy::{Attention, Checkpointing, Offload, Sharding, Strategy, StrategySpec};
use serde::Serialize;

/// Time and money to train on a token budget at a plan's throughput.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainCost {
    /// Tokens to train on.
    pub tokens: f64,
    /// The plan's simulated throughput, tokens/s.
    pub tokens_per_s: f64,
    /// Wall-clock days (tokens / throughput; no restarts or evaluation).
    pub days: f64,
    /// GPU-hours (days x 24 x GPUs).
    pub gpu_hours: f64,
    /// The whole cluster's price per hour, USD.
    pub price_per_hour_usd: f64,
    /// Cost of the run, USD.
    pub usd: f64,
}

/// [`TrainCost`] of `tokens` on the plan `report` simulated on `cluster`.
/// Fails naming the GPUs without a price (the cost needs every one; a
/// cluster file's `price_per_hour_usd` gives it), for a plan that runs
/// out of memory or trains nothing, and for a token count that is not a
/// positive number.
pub fn train_cost(report: &Report, cluster: &Cluster, tokens: f64) -> Result<TrainCost, SpecError> {
    if !(tokens.is_finite() && tokens > 0.0) {
        return Err(SpecError::invalid(
            "--tokens",
            "tokens",
            format!("expected a positive token count, got {tokens}"),
        ));
    }
    if report.oom || report.tokens_per_s.is_nan() || report.tokens_per_s <= 0.0 {
        return Err(SpecError::invalid(
            "the plan",
            "oom",
            "the plan runs out of memory or trains nothing: no time or cost to give",
        ));
    }
    let unpriced: Vec<String> = cluster
        .gpus
        .iter()
        .filter(|g| g.price_per_hour_usd.is_none())
        .map(|g| g.spec.name.clone())
        .collect();
    if !unpriced.is_empty() {
        return Err(SpecError::invalid(
            "the cluster",
            "price_per_hour_usd",
            format!(
                "the cost needs a price for every GPU; {} {} none (no public list price in the catalog): give price_per_hour_usd in a cluster file's GPU group",
                crate::lists::name_runs(&unpriced),
                if unpriced.len() == 1 { "has" } else { "have" }
            ),
        ));
    }
    let price: f64 = cluster
        .gpus
        .iter()
        .filter_map(|g| g.price_per_hour_usd)
        .sum();
    let seconds = tokens / report.tokens_per_s;
    let hours = seconds / 3600.0;
    Ok(TrainCost {
        tokens,
        tokens_per_s: report.tokens_per_s,
        days: hours / 24.0,
        gpu_hours: hours * cluster.len() as f64,
        price_per_hour_usd: price,
        usd: hours * price,
    })
}

/// One GPU count tried by [`min_gpus`] and whether it fits and trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tried {
    /// GPUs.
    pub gpus: u32,
    /// Whether a plan fits and trains on them.
    pub fits: bool,
}

/// The counts [`min_gpus`] may try: `1, 2, 4, ...` up to one node of
/// `per_node`, then whole nodes (what clouds rent) up to `max`.
pub fn candidate_counts(per_node: u32, max: u32) -> Vec<u32> {
    let mut v = Vec::new();
    let mut n = 1;
    while n < per_node && n <= max {
        v.push(n);
        n *= 2;
    }
    let per = per_node.max(1);
    v.extend((1..=max / per).map(|k| k * per));
    v.dedup();
    v
}

/// The smallest of [`candidate_counts`] for which `fits` says a plan fits
/// and trains, and every count it tried: doubling from one GPU until a
/// count fits, then bisection below it. More GPUs give every rank a
/// smaller share of the state, so fitting is taken as monotone in the
/// count (a global batch smaller than the count is the caller's `false`).
/// `None` when not even `max` fits. `fits` errors stop the search.
pub fn min_gpus<E>(
    per_node: u32,
    max: u32,
    mut fits: impl FnMut(u32) -> Result<bool, E>,
) -> Result<(Option<u32>, Vec<Tried>), E> {
    let counts = candidate_counts(per_node, max);
    let mut tried = Vec::new();
    let mut check = |i: usize, tried: &mut Vec<Tried>| -> Result<bool, E> {
        let ok = fits(counts[i])?;
        tried.push(Tried {
            gpus: counts[i],
            fits: ok,
        });
        Ok(ok)
    };
    // Doubling over the candidate indices.
    let (mut lo, mut hi) = (None::<usize>, None::<usize>);
    let mut i = 0;
    while i < counts.len() {
        if check(i, &mut tried)? {
            hi = Some(i);
            break;
        }
        lo = Some(i);
        i = if i == 0 {
            1
        } else {
            (2 * i + 1).min(counts.len() - 1).max(i + 1)
        };
    }
    let Some(mut hi) = hi else {
        return Ok((None, tried));
    };
    // Bisection between the last count that did not fit and the first that did.
    let mut lo = lo.map_or(0, |l| l + 1);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if check(mid, &mut tried)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok((Some(counts[hi]), tried))
}

/// How every what-if plans one workload: the profiles and predictor its
/// costs come from, the planner (`best`: every family's), its options and
/// the user's strategy pins.
#[derive(Debug, Clone, Copy)]
pub struct Planning<'a> {
    /// Profiles the costs come from.
    pub profiles: &'a ProfileSet,
    /// The predictor for GPUs and models without a profile.
    pub predictor: &'a dyn Predictor,
    /// Planner name (`best`: every family's planners).
    pub planner: &'a str,
    /// Planner options.
    pub options: &'a PlannerOptions,
    /// The user's strategy pins.
    pub pins: &'a StrategySpec,
}

/// What [`fit`] plans and simulates: the workload as asked, how to grow
/// its cluster, and how to plan.
#[derive(Debug)]
pub struct FitQuery<'a> {
    /// The workload as asked.
    pub workload: &'a WorkloadSpec,
    /// The cluster file it was built from (grown by whole nodes for
    /// "more GPUs").
    pub cluster_file: &'a ClusterFile,
    /// Where the cluster came from (for errors about the grown one).
    pub cluster_origin: &'a str,
    /// The GPU catalog the cluster resolves against.
    pub catalog: &'a GpuCatalog,
    /// How to plan.
    pub planning: Planning<'a>,
    /// The largest cluster "more GPUs" may grow to, GPUs.
    pub max_gpus: u32,
    /// Whether the workload's memory rule is the planner's own default
    /// ([`crate::session::planner_mem_default`]: `cephalo-compat`'s), not
    /// the user's: then "any planner" is judged under the workload's
    /// default rule, as `--planner best` would be, and no row drops a
    /// `--mem-fraction` the user did not give.
    pub planner_mem_default: bool,
}

/// One change [`fit`] tried, planned and simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FitRow {
    /// What changed, in words (`as asked` for the workload itself).
    pub change: String,
    /// The command-line flags that make the change (empty: none).
    pub flags: String,
    /// GPUs of the cluster.
    pub gpus: u32,
    /// Nodes added to the cluster (0 but for "more GPUs").
    pub added_nodes: u32,
    /// Whether a plan fits in memory and trains.
    pub fits: bool,
    /// The planner whose plan it is (when one planned).
    pub planner: Option<String>,
    /// The plan's strategy (when one planned).
    pub strategy: Option<String>,
    /// Simulated iteration time, ms.
    pub iteration_ms: Option<f64>,
    /// Simulated throughput, tokens/s.
    pub tokens_per_s: Option<f64>,
    /// Throughput per GPU, tokens/s.
    pub tokens_per_s_per_gpu: Option<f64>,
    /// Model FLOPs utilisation of the plan (0-1).
    pub mfu: Option<f64>,
    /// Highest peak memory over usable memory of any GPU, % (over 100: out of memory).
    pub peak_usable_pct: Option<f64>,
    /// The cluster's price per hour, USD (when every GPU has one).
    pub usd_per_hour: Option<f64>,
    /// USD per million tokens trained (when priced and it trains).
    pub usd_per_mtokens: Option<f64>,
    /// Why it does not fit (the planner's answer, first line).
    pub why: Option<String>,
}

/// [`fit`]'s answer: every change tried and the cheapest that fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fit {
    /// `as asked` first, then each change.
    pub rows: Vec<FitRow>,
    /// Index in `rows` of the cheapest row that fits (0: as asked is
    /// already the cheapest): the least USD per token where every fitting
    /// row is priced, else the most tokens/s per GPU; ties to fewer GPUs,
    /// then the earlier row (fewer changes).
    pub cheapest: Option<usize>,
    /// How "cheapest" was judged: `usd_per_mtokens` or `tokens_per_s_per_gpu`.
    pub judged_by: &'static str,
}

impl Fit {
    /// Whether the workload fits as asked.
    pub fn fits_as_asked(&self) -> bool {
        self.rows.first().is_some_and(|r| r.fits)
    }
}

/// A strategy pin [`fit`] tries: the flag, the change in words, and how
/// it sets the pins. Tried when the user pinned that axis otherwise (an
/// axis left free the planner already chooses; attention, which planners
/// take from the profile when free, by what it resolves to).
struct Knob {
    flag: &'static str,
    what: &'static str,
    set: fn(&mut StrategySpec),
    is_set: fn(&StrategySpec, Option<&Strategy>) -> bool,
}

/// The knobs of one GPU's memory, cheapest first as frameworks document
/// them: a fused attention kernel costs nothing, checkpointing a
/// recompute, offload host traffic, sharding more collectives.
const KNOBS: [Knob; 4] = [
    Knob {
        flag: "--attention flash",
        what: "flash attention",
        set: |s| s.attention = Some(Attention::Flash),
        is_set: |s, resolved| match (s.attention, resolved) {
            (Some(a), _) => a == Attention::Flash,
            (None, Some(r)) => r.attention == Attention::Flash,
            (None, None) => false,
        },
    },
    Knob {
        flag: "--checkpointing full",
        what: "full checkpointing",
        set: |s| s.checkpointing = Some(Checkpointing::Full),
        is_set: |s, _| s.checkpointing.is_none_or(|c| c == Checkpointing::Full),
    },
    Knob {
        flag: "--offload optimizer",
        what: "optimizer offload",
        set: |s| s.offload = Some(Offload::Optimizer),
        is_set: |s, _| s.offload == Some(Offload::Optimizer),
    },
    Knob {
        flag: "--sharding full",
        what: "full sharding",
        set: |s| {
            s.sharding = Some(Sharding::Full);
            s.shard_group = None;
        },
        is_set: |s, _| s.sharding.is_none_or(|x| x == Sharding::Full),
    },
];

/// Whether a simulated plan fits and trains: not out of memory, a
/// positive throughput. The judgement of every what-if search ([`trains`]
/// for `min-gpus` on one GPU type and per offer of a pool, [`fit`],
/// [`cheapest`]).
pub fn fits_and_trains(report: &Report) -> bool {
    !report.oom && report.tokens_per_s.is_finite() && report.tokens_per_s > 0.0
}

/// Whether `pins` admit `gpus` GPUs at all: a pinned shard group must
/// divide them. A count it does not divide does not train (a search over
/// counts goes on past it rather than stopping at the strategy's error).
pub fn pins_admit(pins: &StrategySpec, gpus: u32) -> bool {
    pins.shard_group
        .is_none_or(|g| g > 0 && gpus.is_multiple_of(g))
}

/// `min-gpus`'s judgement of one cluster, the same for one GPU type and
/// for each offer of a pool: the planning's planner plans `workload`
/// with its pins and the plan is simulated; the throughput (tokens/s)
/// when it [`fits_and_trains`], `None` when it does not, the pins do not
/// admit the count ([`pins_admit`]) or the planner finds no plan. A bad
/// workload is an error.
pub fn trains(workload: &WorkloadSpec, planning: &Planning) -> Result<Option<f64>, PlanError> {
    let row = try_row(planning, "", "", workload, planning.pins, planning.planner)?;
    Ok(row.tokens_per_s.filter(|_| row.fits))
}

/// Plans and simulates `workload` with the query's planner and `pins`
/// into a row named `change` (a planner's infeasible answer is a row that
/// does not fit, with why; a bad workload is an error).
fn try_row(
    q: &Planning,
    change: &str,
    flags: &str,
    workload: &WorkloadSpec,
    pins: &StrategySpec,
    planner: &str,
) -> Result<FitRow, PlanError> {
    let costs = build_workload(workload, q.profiles, q.predictor)?;
    row_on(q, change, flags, &costs, pins, planner)
}

/// [`try_row`] on a cost model already built (the rows of one workload
/// share it).
fn row_on(
    q: &Planning,
    change: &str,
    flags: &str,
    costs: &CostModel,
    pins: &StrategySpec,
    planner: &str,
) -> Result<FitRow, PlanError> {
    let cluster = &costs.workload.cluster;
    let gpus = cluster.len() as u32;
    let usd_per_hour = cluster
        .gpus
        .iter()
        .map(|g| g.price_per_hour_usd)
        .sum::<Option<f64>>();
    let mut row = FitRow {
        change: change.to_string(),
        flags: flags.to_string(),
        gpus,
        added_nodes: 0,
        fits: false,
        planner: None,
        strategy: None,
        iteration_ms: None,
        tokens_per_s: None,
        tokens_per_s_per_gpu: None,
        mfu: None,
        peak_usable_pct: None,
        usd_per_hour,
        usd_per_mtokens: None,
        why: None,
    };
    if !pins_admit(pins, gpus) {
        row.why = Some(format!(
            "the pinned shard group does not divide the {gpus} GPUs"
        ));
        return Ok(row);
    }
    match plan_named(costs, q.profiles, planner, "--planner", q.options, pins) {
        Ok((run, name)) => {
            let r = &run.report;
            let trains = fits_and_trains(r);
            row.fits = trains;
            row.planner = Some(name.to_string());
            row.strategy = Some(run.planned.plan.label());
            row.iteration_ms = Some(r.iteration_ms);
            row.tokens_per_s = Some(r.tokens_per_s);
            row.tokens_per_s_per_gpu = Some(r.tokens_per_s / gpus.max(1) as f64);
            row.mfu = Some(r.mfu);
            row.peak_usable_pct = r.gpus.iter().map(|g| g.usable_pct).reduce(f64::max);
            if trains {
                row.usd_per_mtokens = r.usd_per_million_tokens();
            } else {
                let worst = r
                    .gpus
                    .iter()
                    .max_by(|a, b| a.usable_pct.total_cmp(&b.usable_pct));
                row.why = Some(worst.map_or("the plan trains nothing".into(), |g| {
                    format!(
                        "out of memory: GPU {} ({}) peaks at {:.2} GiB of {:.2} GiB usable",
                        g.rank, g.gpu, g.peak_mem_gib, g.usable_gib
                    )
                }));
            }
        }
        Err(PlanError::Spec(e)) => return Err(PlanError::Spec(e)),
        Err(e) => {
            let text = e.to_string();
            row.why = Some(text.lines().next().unwrap_or("no plan").to_string());
        }
    }
    Ok(row)
}

/// The node block whose GPUs have the most memory (the first of equals)
/// and that GPU type as the file spells it: what "more GPUs" rents.
fn roomiest(q: &FitQuery) -> Option<(usize, String)> {
    let mut best: Option<(usize, String, f64)> = None;
    for (i, n) in q.cluster_file.nodes.iter().enumerate() {
        for g in &n.gpus {
            let Ok(spec) = q.catalog.lookup(&g.gpu_type, q.cluster_origin) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| spec.mem_gib > b.2) {
                best = Some((i, g.gpu_type.clone(), spec.mem_gib));
            }
        }
    }
    best.map(|(i, g, _)| (i, g))
}

/// The row of the smallest number of nodes like the roomiest one that,
/// added to the cluster, lets the workload fit as pinned (`None`: no
/// node to copy; a row that does not fit: not even at `max_gpus`).
fn more_gpus(q: &FitQuery) -> Result<Option<FitRow>, PlanError> {
    let Some((block, gpu)) = roomiest(q) else {
        return Ok(None);
    };
    let per_node = q.cluster_file.clone().add_copies(block, &gpu, 0).max(1);
    let node = q.cluster_file.nodes[block]
        .name
        .clone()
        .unwrap_or_else(|| format!("node{block}"));
    let now = q.workload.cluster.len() as u32;
    let max_nodes = q.max_gpus.saturating_sub(now) / per_node;
    if max_nodes == 0 {
        return Ok(None);
    }
    let grown = |k: u32| -> Result<WorkloadSpec, PlanError> {
        let mut f = q.cluster_file.clone();
        f.add_copies(block, &gpu, k);
        let cluster = Cluster::from_file(&f, q.cluster_origin, q.catalog)?;
        Ok(WorkloadSpec {
            cluster,
            ..q.workload.clone()
        })
    };
    let mut rows = std::collections::BTreeMap::new();
    let (found, _) = min_gpus(1, max_nodes, |k| -> Result<bool, PlanError> {
        let what = format!("{} more {gpu} ({k} node(s) like `{node}`)", k * per_node);
        let flags = format!("+{k} node(s)");
        let mut row = try_row(
            &q.planning,
            &what,
            &flags,
            &grown(k)?,
            q.planning.pins,
            q.planning.planner,
        )?;
        row.added_nodes = k;
        let fits = row.fits;
        rows.insert(k, row);
        Ok(fits)
    })?;
    let k = found.unwrap_or(max_nodes);
    Ok(rows.remove(&k).or_else(|| rows.into_values().last()))
}

/// What must change for the query's workload to fit and train: the
/// workload as asked, then each strategy knob the user pinned otherwise
/// (and all of them together), any planner instead of the one named, the
/// physical memory limit instead of a `--mem-fraction`, and the fewest
/// more GPUs (whole nodes like the cluster's roomiest), each planned and
/// simulated; the cheapest that fits named. When the workload fits as
/// asked only the other changes that also fit are worth reading (they
/// may be faster).
pub fn fit(q: &FitQuery) -> Result<Fit, PlanError> {
    // One cost model for every row of the workload as asked (the
    // strategy knobs and the planner change the plan, not the costs).
    let base = build_workload(q.workload, q.planning.profiles, q.planning.predictor)?;
    let mut rows = vec![row_on(
        &q.planning,
        "as asked",
        "",
        &base,
        q.planning.pins,
        q.planning.planner,
    )?];
    let resolved = q.planning.pins.resolve(&base.strategy_context()).ok();
    let knobs: Vec<&Knob> = KNOBS
        .iter()
        .filter(|k| !(k.is_set)(q.planning.pins, resolved.as_ref()))
        .collect();
    // Every combination of the knobs, singles first: the cheapest may
    // need two (flash attention and checkpointing) but not a third.
    for size in 1..=knobs.len() {
        for set in combinations(knobs.len(), size) {
            let mut pins = *q.planning.pins;
            set.iter().for_each(|&i| (knobs[i].set)(&mut pins));
            let what: Vec<&str> = set.iter().map(|&i| knobs[i].what).collect();
            let flags: Vec<&str> = set.iter().map(|&i| knobs[i].flag).collect();
            rows.push(row_on(
                &q.planning,
                &what.join(" + "),
                &flags.join(" "),
                &base,
                &pins,
                q.planning.planner,
            )?);
        }
    }
    if !q.planning.planner.eq_ignore_ascii_case(BEST) {
        let any = "any planner (data-parallel, pipeline, 3D)";
        rows.push(if q.planner_mem_default {
            let mut w = q.workload.clone();
            w.options.mem_policy = MemPolicy::default();
            try_row(
                &q.planning,
                any,
                "--planner best",
                &w,
                q.planning.pins,
                BEST,
            )?
        } else {
            row_on(
                &q.planning,
                any,
                "--planner best",
                &base,
                q.planning.pins,
                BEST,
            )?
        });
    }
    let fraction = q.workload.options.mem_policy.fraction();
    if let Some(f) = fraction.filter(|_| !q.planner_mem_default) {
        let mut w = q.workload.clone();
        w.options.mem_policy = MemPolicy::Physical;
        rows.push(try_row(
            &q.planning,
            &format!("the physical memory limit instead of {f} of each GPU"),
            "(drop --mem-fraction)",
            &w,
            q.planning.pins,
            q.planning.planner,
        )?);
    }
    if !rows[0].fits {
        rows.extend(more_gpus(q)?);
    }
    let (cheapest, judged_by) = cheapest_row(&rows);
    Ok(Fit {
        rows,
        cheapest,
        judged_by,
    })
}

/// Every `size`-element subset of `0..n` as sorted indices, in
/// lexicographic order.
fn combinations(n: usize, size: usize) -> Vec<Vec<usize>> {
    if size == 0 {
        return vec![Vec::new()];
    }
    (0..n)
        .flat_map(|first| {
            combinations(n, size - 1)
                .into_iter()
                .filter(move |rest| rest.first().is_none_or(|&r| r > first))
                .map(move |rest| {
                    let mut v = vec![first];
                    v.extend(rest);
                    v
                })
        })
        .collect()
}

/// The cheapest fitting row (see [`Fit::cheapest`]) and the measure it
/// was judged by.
fn cheapest_row(rows: &[FitRow]) -> (Option<usize>, &'static str) {
    let fitting: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].fits).collect();
    let priced = !fitting.is_empty() && fitting.iter().all(|&i| rows[i].usd_per_mtokens.is_some());
    // Lower is better on both measures' keys.
    let key = |i: usize| -> f64 {
        if priced {
            rows[i].usd_per_mtokens.unwrap_or(f64::INFINITY)
        } else {
            -rows[i].tokens_per_s_per_gpu.unwrap_or(0.0)
        }
    };
    let best = fitting.into_iter().min_by(|&a, &b| {
        key(a)
            .total_cmp(&key(b))
            .then(rows[a].gpus.cmp(&rows[b].gpus))
            .then(a.cmp(&b))
    });
    (
        best,
        if priced {
            "usd_per_mtokens"
        } else {
            "tokens_per_s_per_gpu"
        },
    )
}

/// What [`memory`] answers for: a model on `N` GPUs of one (host) type
/// under a strategy, one micro-batch size.
#[derive(Debug)]
pub struct MemoryQuery<'a> {
    /// The workload: the model, sequence length and precision on a
    /// cluster of the data-parallel group's GPUs (their type sets only
    /// the kernels assumed; the fit is judged on every catalog GPU).
    pub workload: &'a WorkloadSpec,
    /// Profiles the costs come from.
    pub profiles: &'a ProfileSet,
    /// The predictor for GPUs and models without a profile.
    pub predictor: &'a dyn Predictor,
    /// The user's strategy pins.
    pub pins: &'a StrategySpec,
    /// Samples per micro-batch.
    pub micro_batch_size: u32,
    /// Micro-batches per iteration on every GPU.
    pub microbatches: u32,
}

/// Whether one catalog GPU type holds the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuFit {
    /// Catalog name.
    pub gpu: String,
    /// Memory capacity, GiB.
    pub capacity_gib: f64,
    /// What the memory policy lets a plan use, GiB.
    pub usable_gib: f64,
    /// Whether the peak fits under the policy limit (false also when
    /// the GPU does not run the precision).
    pub fits: bool,
    /// `usable_gib - peak` (negative: short by that much).
    pub headroom_gib: f64,
    /// Why it cannot run at all (a precision it lacks).
    pub note: Option<String>,
}

/// [`memory`]'s answer: one GPU's memory at its peak and which GPUs hold it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryAnswer {
    /// GPUs in the data-parallel group.
    pub gpus: u32,
    /// Samples per micro-batch.
    pub micro_batch_size: u32,
    /// Micro-batches per iteration.
    pub microbatches: u32,
    /// The strategy the pins resolve to.
    pub strategy: String,
    /// Model parameters.
    pub params: u64,
    /// Training state per parameter under the strategy, bytes
    /// (parameters, gradients and optimizer moments kept on the GPU).
    pub state_bytes_per_param: f64,
    /// The whole training state, GiB (before sharding).
    pub state_total_gib: f64,
    /// What GPU 0's peak holds, GiB (the simulated iteration's peak).
    pub per_gpu: crate::report::MemoryBreakdown,
    /// Every catalog GPU type and whether it holds the peak.
    pub fits: Vec<GpuFit>,
}

/// One CSV row of `whatif memory`: a micro-batch size's answer on one GPU
/// type (GiB).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryCsvRow<'a> {
    /// Samples per micro-batch.
    pub micro_batch_size: u32,
    /// The strategy's label.
    pub strategy: &'a str,
    /// One GPU's simulated peak, GiB.
    pub peak_gib: f64,
    /// Of which parameters, gradients and optimizer state, GiB.
    pub state_gib: f64,
    /// Of which activations, GiB.
    pub activations_gib: f64,
    /// The GPU type.
    pub gpu: &'a str,
    /// Its usable memory, GiB.
    pub usable_gib: f64,
    /// Whether the peak fits in it.
    pub fits: bool,
}

/// `answers` as CSV rows: one per micro-batch size and GPU type.
pub fn memory_csv_rows(answers: &[MemoryAnswer]) -> Vec<MemoryCsvRow<'_>> {
    answers
        .iter()
        .flat_map(|r| {
            r.fits.iter().map(move |f| MemoryCsvRow {
                micro_batch_size: r.micro_batch_size,
                strategy: &r.strategy,
                peak_gib: r.per_gpu.peak_gib,
                state_gib: r.per_gpu.state_gib,
                activations_gib: r.per_gpu.activations_gib,
                gpu: &f.gpu,
                usable_gib: f.usable_gib,
                fits: f.fits,
            })
        })
        .collect()
}

/// The per-GPU memory of the query's model and strategy: an even
/// data-parallel plan (every GPU `microbatches` micro-batches of
/// `micro_batch_size`, state split evenly as the strategy shards it)
/// simulated on the query's GPUs, GPU 0's peak broken down, and every
/// GPU type of `catalog` judged against it under the workload's memory
/// policy (the framework overhead is the same on every type). What
/// `accelerate estimate-memory` answers, with activations, buffers and
/// the allocator counted.
pub fn memory(q: &MemoryQuery, catalog: &GpuCatalog) -> Result<MemoryAnswer, PlanError> {
    let costs = build_workload(q.workload, q.profiles, q.predictor)?;
    let n = costs.ranks();
    let strategy = q.pins.resolve(&costs.strategy_context())?;
    let m = q.micro_batch_size.max(1);
    let k = q.microbatches.max(1);
    let batch = vec![m * k; n];
    let micro = vec![k; n];
    let plan = crate::session::user_plan(
        crate::session::PlanInput::Lists {
            batch: &batch,
            microbatches: &micro,
            state_fractions: None,
            origin: "whatif memory",
        },
        q.pins,
        &costs.strategy_context(),
        &crate::plan::file::PlanWorkload::of(&costs),
    )?;
    let report = crate::simulate::simulate(&costs, &plan, &Default::default())?;
    let per_gpu = report.gpus[0].memory.clone();
    let overhead = costs.overhead_gib();
    let policy = costs.options.mem_policy;
    let dtype = costs.workload.dtype;
    let fits = catalog
        .all()
        .iter()
        .filter(|g| g.name != "cpu")
        .map(|g| {
            let usable = policy.usable_gib(g.mem_gib, overhead);
            let headroom = usable - per_gpu.peak_gib;
            let note =
                (!g.supports(dtype)).then(|| format!("no {dtype} ({})", g.supported_dtypes()));
            GpuFit {
                gpu: g.name.clone(),
                capacity_gib: g.mem_gib,
                usable_gib: usable,
                fits: headroom >= 0.0 && note.is_none(),
                headroom_gib: headroom,
                note,
            }
        })
        .collect();
    let params = costs.workload.model.total_params();
    let per_param = strategy
        .precision(dtype)
        .gpu_state_bytes_per_param(strategy.offloads_optimizer());
    Ok(MemoryAnswer {
        gpus: n as u32,
        micro_batch_size: m,
        microbatches: k,
        strategy: strategy.label(),
        params,
        state_bytes_per_param: per_param,
        state_total_gib: per_param * params as f64 / crate::units::GIB,
        per_gpu,
        fits,
    })
}

/// What [`cheapest`] searches: a rental pool, the workload to train on
/// what is rented (its cluster is replaced), how to plan, and the
/// throughput to reach.
#[derive(Debug, Clone, Copy)]
pub struct RentQuery<'a> {
    /// The servers for rent.
    pub pool: &'a Pool,
    /// The GPU catalog the pool's types resolve against.
    pub catalog: &'a GpuCatalog,
    /// The workload (model, global batch, sequence, precision, memory options).
    pub workload: &'a WorkloadSpec,
    /// How to plan.
    pub planning: Planning<'a>,
    /// Tokens/s the rental must reach.
    pub target_tokens_per_s: f64,
}

/// One selection of servers [`cheapest`] planned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RentRow {
    /// Servers of each offer, in the pool's order.
    pub nodes: Vec<u32>,
    /// `4x8 h100-sxm + 2x8 a100-80gb`.
    pub cluster: String,
    /// GPUs.
    pub gpus: u32,
    /// Price of the selection, USD per hour.
    pub usd_per_hour: f64,
    /// Simulated throughput of the best plan, tokens/s (`None`: no plan fits).
    pub tokens_per_s: Option<f64>,
    /// Whether it fits and reaches the target.
    pub reaches: bool,
    /// USD per million tokens (when a plan fits).
    pub usd_per_mtokens: Option<f64>,
    /// The planner whose plan it is.
    pub planner: Option<String>,
    /// The plan's strategy.
    pub strategy: Option<String>,
    /// Why no plan fits.
    pub why: Option<String>,
}

/// [`cheapest`]'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rental {
    /// The throughput asked for, tokens/s.
    pub target_tokens_per_s: f64,
    /// Every selection planned, in the order tried.
    pub tried: Vec<RentRow>,
    /// Index in `tried` of the cheapest per hour that reaches the target
    /// (ties: the faster).
    pub cheapest: Option<usize>,
}

/// The selections [`cheapest`] planned, each once.
struct Tries<'q, 'a> {
    q: &'q RentQuery<'a>,
    rows: Vec<RentRow>,
}

impl Tries<'_, '_> {
    /// Plans `nodes` (once; again gives the row it had).
    fn row(&mut self, nodes: &[u32]) -> Result<RentRow, PlanError> {
        if let Some(r) = self.rows.iter().find(|r| r.nodes == nodes) {
            return Ok(r.clone());
        }
        let q = self.q;
        let Some(file) = q.pool.cluster(nodes, q.catalog) else {
            return Err(PlanError::invalid(
                "the pool",
                "offer",
                "an empty selection",
            ));
        };
        let name = q.pool.describe(nodes);
        let cluster = Cluster::from_file(&file, &name, q.catalog)?;
        let w = WorkloadSpec {
            cluster,
            ..q.workload.clone()
        };
        let f = try_row(
            &q.planning,
            &name,
            "",
            &w,
            q.planning.pins,
            q.planning.planner,
        )?;
        let usd = q.pool.usd_per_hour(nodes);
        // The judgement of `trains`.
        let tps = f.tokens_per_s.filter(|_| f.fits);
        let row = RentRow {
            nodes: nodes.to_vec(),
            cluster: name,
            gpus: f.gpus,
            usd_per_hour: usd,
            tokens_per_s: tps,
            reaches: tps.is_some_and(|t| t >= q.target_tokens_per_s),
            usd_per_mtokens: f.usd_per_mtokens,
            planner: f.planner,
            strategy: f.strategy,
            why: f.why,
        };
        self.rows.push(row.clone());
        Ok(row)
    }

    /// The fewest servers of offer `i` that, next to `base`, reach the
    /// target (doubling then bisection; throughput taken as growing with
    /// servers), `None` when not even all of them do.
    fn fewest(&mut self, base: &[u32], i: usize) -> Result<Option<u32>, PlanError> {
        let max = self.q.pool.offer[i].max_nodes;
        let (found, _) = min_gpus(1, max, |k| -> Result<bool, PlanError> {
            let mut nodes = base.to_vec();
            nodes[i] = k;
            Ok(self.row(&nodes)?.reaches)
        })?;
        Ok(found)
    }
}

/// The cheapest servers to rent from a pool that train the workload at
/// the target throughput or more (Sailor's question), by search over
/// what is planned and simulated:
///
/// 1. each offer alone: its fewest servers that reach the target;
/// 2. offers ranked by the USD per token of their best row so far;
/// 3. greedy fill in that order: every server of the better offers, then
///    the fewest of the next that reach the target (what a user limited by
///    availability does);
/// 4. the two best offers mixed: the best at a half, a quarter, ... of
///    what it needs alone, the fewest of the second next to it.
///
/// Throughput is taken as growing with servers (it does until the global
/// batch leaves a GPU too few samples; the rows say what was tried).
pub fn cheapest(q: &RentQuery) -> Result<Rental, PlanError> {
    let target = q.target_tokens_per_s;
    if !(target.is_finite() && target > 0.0) {
        return Err(PlanError::invalid(
            "--target-tokens-per-s",
            "target",
            format!("expected a positive throughput in tokens/s, got {target}"),
        ));
    }
    let n = q.pool.offer.len();
    let mut t = Tries {
        q,
        rows: Vec::new(),
    };
    let zero = vec![0u32; n];
    let mut alone = vec![None; n];
    for (i, a) in alone.iter_mut().enumerate() {
        *a = t.fewest(&zero, i)?;
    }
    // Offers ranked by their best USD per token among rows of them alone.
    let best_usd = |rows: &[RentRow], i: usize| -> f64 {
        rows.iter()
            .filter(|r| {
                r.nodes
                    .iter()
                    .enumerate()
                    .all(|(j, &k)| (j == i) == (k > 0))
            })
            .filter_map(|r| r.usd_per_mtokens)
            .fold(f64::INFINITY, f64::min)
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        best_usd(&t.rows, a)
            .total_cmp(&best_usd(&t.rows, b))
            .then(a.cmp(&b))
    });
    // Greedy fill.
    let mut base = zero.clone();
    for &i in &order {
        match t.fewest(&base, i)? {
            Some(k) => {
                base[i] = k;
                break;
            }
            None => base[i] = q.pool.offer[i].max_nodes,
        }
    }
    // The two best offers mixed.
    if let [a, b, ..] = order[..] {
        let need = alone[a].unwrap_or(q.pool.offer[a].max_nodes + 1);
        let mut k = need / 2;
        while k >= 1 {
            let mut nodes = zero.clone();
            nodes[a] = k.min(q.pool.offer[a].max_nodes);
            t.fewest(&nodes, b)?;
            k /= 2;
        }
    }
    let rows = t.rows;
    let cheapest = (0..rows.len())
        .filter(|&i| rows[i].reaches)
        .min_by(|&x, &y| {
            rows[x].usd_per_hour.total_cmp(&rows[y].usd_per_hour).then(
                rows[y]
                    .tokens_per_s
                    .unwrap_or(0.0)
                    .total_cmp(&rows[x].tokens_per_s.unwrap_or(0.0)),
            )
        });
    Ok(Rental {
        target_tokens_per_s: target,
        tried: rows,
        cheapest,
    })
}

/// One offer of a pool and its fewest servers that fit and train.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OfferMin {
    /// GPU type.
    pub gpu: String,
    /// GPUs per server.
    pub gpus_per_node: u32,
    /// Servers available.
    pub max_nodes: u32,
    /// The fewest servers of it alone that fit and train (`None`: not even all).
    pub min_nodes: Option<u32>,
    /// Their GPUs.
    pub min_gpus: Option<u32>,
    /// Simulated throughput of the best plan on them, tokens/s.
    pub tokens_per_s: Option<f64>,
    /// Their price, USD per hour.
    pub usd_per_hour: Option<f64>,
}

/// `min-gpus` for every offer of a pool: each offer alone, the fewest of
/// its servers on which the query's planner finds a plan that fits and
/// trains (the query's target is ignored: any throughput counts).
pub fn min_per_offer(q: &RentQuery) -> Result<Vec<OfferMin>, PlanError> {
    let any = RentQuery {
        target_tokens_per_s: f64::MIN_POSITIVE,
        ..*q
    };
    let n = q.pool.offer.len();
    let mut t = Tries {
        q: &any,
        rows: Vec::new(),
    };
    let zero = vec![0u32; n];
    let mut out = Vec::with_capacity(n);
    for (i, o) in q.pool.offer.iter().enumerate() {
        let found = t.fewest(&zero, i)?;
        let row = match found {
            Some(k) => {
                let mut v = zero.clone();
                v[i] = k;
                Some(t.row(&v)?)
            }
            None => None,
        };
        out.push(OfferMin {
            gpu: o.gpu.clone(),
            gpus_per_node: o.gpus_per_node,
            max_nodes: o.max_nodes,
            min_nodes: found,
            min_gpus: found.map(|k| k * o.gpus_per_node),
            tokens_per_s: row.as_ref().and_then(|r| r.tokens_per_s),
            usd_per_hour: row.as_ref().map(|r| r.usd_per_hour),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combinations_are_every_subset_once() {
        assert_eq!(combinations(3, 1), [[0], [1], [2]]);
        assert_eq!(combinations(3, 2), [[0, 1], [0, 2], [1, 2]]);
        assert_eq!(combinations(4, 4), [[0, 1, 2, 3]]);
        assert_eq!((1..=4).map(|k| combinations(4, k).len()).sum::<usize>(), 15);
    }

    fn row(fits: bool, gpus: u32, tps_per_gpu: f64, usd: Option<f64>) -> FitRow {
        FitRow {
            change: String::new(),
            flags: String::new(),
            gpus,
            added_nodes: 0,
            fits,
            planner: None,
            strategy: None,
            iteration_ms: None,
            tokens_per_s: Some(tps_per_gpu * gpus as f64),
            tokens_per_s_per_gpu: Some(tps_per_gpu),
            mfu: None,
            peak_usable_pct: None,
            usd_per_hour: None,
            usd_per_mtokens: usd,
            why: None,
        }
    }

    /// Cheapest by price where every fitting row has one, else by
    /// throughput per GPU; rows that do not fit never win.
    #[test]
    fn cheapest_judges_by_price_then_throughput_per_gpu() {
        let rows = [
            row(false, 2, 900.0, Some(0.1)),
            row(true, 2, 100.0, Some(2.0)),
            row(true, 8, 90.0, Some(1.5)),
        ];
        assert_eq!(cheapest_row(&rows), (Some(2), "usd_per_mtokens"));
        let rows = [
            row(false, 2, 900.0, None),
            row(true, 2, 100.0, Some(2.0)),
            row(true, 8, 90.0, None),
        ];
        assert_eq!(cheapest_row(&rows), (Some(1), "tokens_per_s_per_gpu"));
        let rows = [row(true, 4, 50.0, None), row(true, 2, 50.0, None)];
        assert_eq!(cheapest_row(&rows).0, Some(1));
        assert_eq!(cheapest_row(&[row(false, 1, 1.0, None)]).0, None);
    }

    #[test]
    fn counts_are_powers_of_two_then_whole_nodes() {
        assert_eq!(candidate_counts(8, 40), [1, 2, 4, 8, 16, 24, 32, 40]);
        assert_eq!(candidate_counts(1, 3), [1, 2, 3]);
        assert_eq!(candidate_counts(8, 5), [1, 2, 4]);
    }

    /// The search finds the smallest fitting count for every threshold,
    /// trying far fewer counts than there are.
    #[test]
    fn min_gpus_finds_the_threshold() {
        let counts = candidate_counts(8, 1024);
        for need in [1u32, 3, 8, 9, 17, 200, 1000, 1024] {
            let (found, tried) = min_gpus::<()>(8, 1024, |n| Ok(n >= need)).unwrap();
            let want = counts.iter().copied().find(|&c| c >= need);
            assert_eq!(found, want, "need {need}");
            assert!(
                tried.len() <= 2 * 8 + 4,
                "need {need}: {} tries",
                tried.len()
            );
            for t in &tried {
                assert_eq!(t.fits, t.gpus >= need);
            }
        }
        let (none, _) = min_gpus::<()>(8, 64, |n| Ok(n > 64)).unwrap();
        assert_eq!(none, None);
        let err = min_gpus(8, 64, |n| if n > 2 { Err("boom") } else { Ok(false) });
        assert_eq!(err.unwrap_err(), "boom");
    }
}
