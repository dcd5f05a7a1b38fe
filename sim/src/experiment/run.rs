//! Running a study: every planner on every workload (in parallel over
//! workloads with rayon, results in case order whatever the schedule), a
//! shard of the workloads at a time (`i mod N = K - 1`), each run turned
//! into its rows.

use super::results::Results;
use super::rows::{GpuRow, ResultRow, SpanRow};
use super::spec::ExperimentSpec;
use super::sweep::{cluster_of, Workload};
use crate::cost::CostModel;
use crate::error::SpecError;
use crate::iteration::SimOptions;
use crate::model::ModelCatalog;
use crate::perfmodel::Predictor;
use crate::plan::Plan;
use crate::planner::registry::{self, Family};
use crate::planner::{self, PlannerOptions};
use crate::profile::ProfileSet;
use crate::report::Report;
use crate::session::{build_workload, plan_and_simulate, PlannedRun, WorkloadSpec};
use crate::simulate::simulate;
use rayon::prelude::*;

/// Everything a run needs besides the spec.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The profiles (reference measurements or none).
    pub profiles: &'a ProfileSet,
    /// The calibrated model.
    pub predictor: &'a (dyn Predictor + Sync),
}

/// Runs the workloads `shard` selects (`(k, n)`: those with index `i mod
/// n = k - 1`; `None`: all) in parallel, calling `progress` after each
/// workload; results in (case, planner) order whatever the schedule. A
/// workload whose cost model cannot be built is an error naming it.
pub fn run(
    spec: &ExperimentSpec,
    workloads: &[Workload],
    inputs: Inputs<'_>,
    shard: Option<(usize, usize)>,
    progress: &(dyn Fn() + Sync),
) -> Result<Results, SpecError> {
    let planners = spec.planner_names();
    let picked: Vec<&Workload> = workloads
        .iter()
        .filter(|w| shard.is_none_or(|(k, n)| w.index % n == k - 1))
        .collect();
    // The study's profiles with each `comm_profiles` entry's tables, once
    // per entry (not per workload).
    let with_tables: Vec<ProfileSet> = spec
        .sweep
        .comm_sets
        .iter()
        .map(|tables| {
            let mut p = inputs.profiles.clone();
            p.merge(tables.clone());
            p
        })
        .collect();
    let parts: Vec<Result<Results, SpecError>> = picked
        .par_iter()
        .map(|w| {
            let profiles = w.comm_profile.map_or(inputs.profiles, |i| &with_tables[i]);
            let inputs = Inputs { profiles, ..inputs };
            let r = run_one(spec, w, &planners, inputs);
            progress();
            r
        })
        .collect();
    let mut ok = Vec::with_capacity(parts.len());
    for p in parts {
        ok.push(p?);
    }
    Ok(Results::merge(ok))
}

/// Every planner on one workload (`inputs`: with its measured tables).
fn run_one(
    spec: &ExperimentSpec,
    w: &Workload,
    planners: &[String],
    inputs: Inputs<'_>,
) -> Result<Results, SpecError> {
    let costs = costs_of(spec, w, inputs)?;
    check_prices(spec, w, &costs)?;
    let popts = PlannerOptions {
        model_key: Some(w.model.clone()),
        shape: w.shape.clone(),
        ..PlannerOptions::default()
    };
    let comm_profile = w
        .comm_profile
        .map_or(String::new(), |i| spec.sweep.comm_profiles[i].clone());
    let mut out = Results::default();
    for (pi, name) in planners.iter().enumerate() {
        let pl = planner::registry::by_name(name, "sweep.planners")
            .map_err(|e| SpecError::invalid("experiment", "sweep.planners", e.to_string()))?;
        let mut row = workload_row(w, &costs, pi, pl.name());
        row.comm_profile = comm_profile.clone();
        match plan_and_simulate(&costs, inputs.profiles, pl.as_ref(), &popts, &w.strategy) {
            Ok(r) => {
                fill_row(&mut row, &r);
                out.gpus.extend(gpu_rows(&row, &r.report));
                if spec.sweep.timeline {
                    out.spans
                        .extend(timeline_rows(&row, &costs, &r.planned.plan)?);
                }
            }
            Err(e) => row.error = e.to_string(),
        }
        out.rows.push(row);
    }
    set_speedups_vs_fsdp(&mut out.rows);
    Ok(out)
}

/// A figure of cost (USD per token, throughput per USD) needs a price for
/// every GPU of every cluster it draws: an error naming the figure, the
/// workload and the unpriced GPUs, instead of a figure silently empty.
fn check_prices(spec: &ExperimentSpec, w: &Workload, costs: &CostModel) -> Result<(), SpecError> {
    let Some((i, f)) = spec
        .figures
        .iter()
        .enumerate()
        .find(|(_, f)| f.y.needs_price())
    else {
        return Ok(());
    };
    let unpriced: Vec<String> = costs
        .workload
        .cluster
        .gpus
        .iter()
        .filter(|g| g.price_per_hour_usd.is_none())
        .map(|g| g.spec.name.clone())
        .collect();
    if unpriced.is_empty() {
        return Ok(());
    }
    Err(SpecError::invalid(
        "experiment",
        format!("figure[{i}].y"),
        format!(
            "`{}` needs a price for every GPU, and workload {} ({}) has {} without one (no public list price in the catalog): give price_per_hour_usd in the cluster file's GPU group",
            f.y.name(),
            w.index,
            w.cluster,
            crate::lists::name_runs(&unpriced)
        ),
    ))
}

/// The cost model of workload `w`; an error naming the workload when it
/// cannot be built.
fn costs_of(
    spec: &ExperimentSpec,
    w: &Workload,
    inputs: Inputs<'_>,
) -> Result<CostModel, SpecError> {
    let cluster = cluster_of(w)?;
    let options = crate::cost::CostOptions {
        memory_cluster: spec.memory_cluster.clone(),
        mem_policy: w
            .mem_policy
            .unwrap_or(crate::cost::MemPolicy::from_fraction(spec.mem_fraction)),
        comm_algo: w.comm_algo.unwrap_or_default(),
        ..crate::cost::CostOptions::default()
    };
    let ws = WorkloadSpec {
        cluster,
        model: ModelCatalog::builtin()
            .lookup(&w.model, "experiment: sweep.models")?
            .clone(),
        global_batch: w.global_batch,
        seq_len: w.seq_len,
        dtype: w.dtype,
        options,
    };
    build_workload(&ws, inputs.profiles, inputs.predictor).map_err(|e| {
        SpecError::invalid(
            "experiment",
            format!(
                "workload {} ({} / {} / batch {})",
                w.index, w.cluster, w.model, w.global_batch
            ),
            e.to_string(),
        )
    })
}

/// The row of workload `w` under planner `planner` (index `pi`), before
/// its plan: what was run.
fn workload_row(w: &Workload, costs: &CostModel, pi: usize, planner: &str) -> ResultRow {
    let names = costs.workload.cluster.gpu_names();
    ResultRow {
        case: w.index,
        planner_index: pi,
        cluster: w.cluster.clone(),
        gpus: names.len(),
        gpu_types: crate::lists::name_runs(&names),
        model: costs.workload.model.name.clone(),
        seq_len: costs.workload.seq_len,
        dtype: costs.workload.dtype.to_string(),
        global_batch: w.global_batch,
        network_gbit_s: w.network_gbit_s,
        add_gpu: w.add_gpu.clone(),
        planner: planner.to_string(),
        pins: w.strategy.pins_text(),
        shape: w.shape.text(),
        comm_algo: costs.options.comm_algo.name().to_string(),
        mem_policy: match costs.options.mem_policy.fraction() {
            Some(f) => f.to_string(),
            None => "physical".into(),
        },
        ..ResultRow::default()
    }
}

/// Fills `row` with the plan and the simulator's numbers (throughputs
/// only when it fits).
fn fill_row(row: &mut ResultRow, r: &PlannedRun) {
    let rep = &r.report;
    let fits = !rep.oom;
    row.strategy = r.planned.plan.label();
    row.oom = rep.oom;
    let st = &r.planned.stats;
    row.search_candidates = Some(st.candidates);
    row.search_simulations = Some(st.simulated + st.fast_evaluated);
    row.iteration_ms = Some(rep.iteration_ms);
    row.samples_per_s = fits.then_some(rep.samples_per_s);
    row.tokens_per_s = fits.then_some(rep.tokens_per_s);
    row.mfu = fits.then_some(rep.mfu);
    row.peak_usable_pct = rep.gpus.iter().map(|g| g.usable_pct).reduce(f64::max);
    row.price_per_hour_usd = rep.price_per_hour_usd;
    row.usd_per_million_tokens = rep.usd_per_million_tokens();
    row.interval_rel = fits.then_some(rep.intervals.median.rel);
    row.samples_per_s_per_usd_hour = match (fits, rep.price_per_hour_usd) {
        (true, Some(p)) if p > 0.0 => Some(rep.samples_per_s / p),
        _ => None,
    };
    let src = rep.sources();
    let mut parts: Vec<String> = src
        .iter()
        .map(|s| format!("{}x {}: {}", s.count, s.gpu, s.compute))
        .collect();
    if let Some(first) = src.first() {
        parts.push(format!("memory: {}", first.memory));
    }
    row.sources = parts.join("; ");
}

/// One row per GPU of the run behind `row`.
fn gpu_rows(row: &ResultRow, rep: &Report) -> Vec<GpuRow> {
    rep.gpus
        .iter()
        .map(|g| GpuRow {
            case: row.case,
            planner_index: row.planner_index,
            planner: row.planner.clone(),
            rank: g.rank,
            gpu: g.gpu.clone(),
            compute_ms: g.compute_ms,
            recompute_ms: g.recompute_ms,
            exposed_comm_ms: g.exposed_comm_ms,
            copy_ms: g.copy_ms,
            host_ms: g.host_ms,
            idle_ms: g.idle_ms,
            state_gib: g.memory.state_gib,
            overhead_gib: g.memory.overhead_gib,
            unsharded_params_gib: g.memory.unsharded_params_gib,
            gradients_gib: g.memory.gradients_gib,
            activations_gib: g.memory.activations_gib,
            peak_mem_gib: g.peak_mem_gib,
            usable_gib: g.usable_gib,
        })
        .collect()
}

/// The GPUs' spans of `plan` simulated again with its timeline recorded
/// (the run behind `row`).
fn timeline_rows(
    row: &ResultRow,
    costs: &CostModel,
    plan: &Plan,
) -> Result<Vec<SpanRow>, SpecError> {
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let traced = simulate(costs, plan, &opts)
        .map_err(|e| SpecError::invalid("experiment", "timeline", e.to_string()))?;
    let Some(t) = traced.trace else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in &t.events {
        if e.rank as usize >= t.gpu_processes || e.end_ns <= e.start_ns {
            continue;
        }
        let idle = e.name == u32::MAX;
        out.push(SpanRow {
            case: row.case,
            planner_index: row.planner_index,
            planner: row.planner.clone(),
            rank: e.rank,
            process: t.processes[e.rank as usize].clone(),
            stream: e.stream.name().to_string(),
            category: if idle {
                "idle".into()
            } else {
                e.category.name().to_string()
            },
            start_ms: e.start_ns as f64 / 1e6,
            end_ms: e.end_ns as f64 / 1e6,
        });
    }
    Ok(out)
}

/// Speed-ups against even FSDP on the same workload (`rows`: one
/// workload's).
fn set_speedups_vs_fsdp(rows: &mut [ResultRow]) {
    let fsdp = rows
        .iter()
        .find(|r| r.planner == registry::standard(Family::DataParallel).name())
        .and_then(|r| r.samples_per_s);
    for r in rows {
        r.speedup_vs_fsdp = match (r.samples_per_s, fsdp) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
    }
}
