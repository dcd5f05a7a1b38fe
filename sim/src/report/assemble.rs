//! Assembly of a [`Report`] from a finished run: the engine's stats, the
//! breakdown and memory observers, the plan and the cost model.

use super::breakdown::Breakdown;
use super::intervals::{Intervals, Share};
use super::memory::{Limits, MemoryBreakdown};
use super::schema::{
    CollectiveStat, CommSourceStat, GpuReport, HostReport, KindSummary, OomGpu, PipelineReport,
    Report, StageReport,
};
use crate::comm::GroupSource;
use crate::cost::CostModel;
use crate::engine::RunStats;
use crate::lower::CollectiveRecord;
use crate::memory::MemoryTracker;
use crate::trace::Trace;
use crate::units::GIB;

/// Everything `assemble` needs besides the run's observers.
#[derive(Debug)]
pub struct Assembly<'a> {
    /// The cost model of the workload.
    pub costs: &'a crate::cost::CostModel,
    /// The plan simulated.
    pub plan: &'a crate::plan::Plan,
    /// Constant GPU memory per rank (bytes) and host memory per node.
    pub base_device_bytes: &'a [i64],
    /// Constant host memory per node, bytes.
    pub base_host_bytes: &'a [i64],
    /// The collectives of the iteration.
    pub collectives: &'a [CollectiveRecord],
    /// Executed FLOPs of the iteration beyond the model's (recompute).
    pub recompute_flops: f64,
    /// Which ranks were simulated and whose timeline the others have.
    pub classes: &'a crate::symmetry::NodeClasses,
    /// How a folded run stands for the whole iteration (`None`: every pass
    /// simulated).
    pub folding: Option<&'a Folding>,
}

/// How a reduced run of folded passes ([`crate::fold`]) stands for the
/// whole iteration, as the report needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Folding {
    /// Per op of the reduced graph: how many ops of the iteration it
    /// stands for.
    pub op_weight: Vec<u64>,
    /// Per memory pool: how much later the whole iteration first reaches
    /// the peak than the reduced run, ns.
    pub peak_shift_ns: Vec<u64>,
    /// Per simulated rank: when its last op ends in the whole iteration, ns.
    pub finish_ns: Vec<u64>,
    /// When the whole iteration ends, ns.
    pub makespan_ns: u64,
    /// Passes not simulated event by event.
    pub folded_passes: u32,
}

/// Throughput figures of an iteration of `iteration_ms` on `costs`'
/// workload.
struct Rates {
    samples_per_s: f64,
    tokens_per_s: f64,
    tflops: f64,
    mfu: f64,
    hfu: f64,
    peak_tflops: f64,
    model_tflop: f64,
    hardware_tflop: f64,
}

impl Rates {
    fn of(costs: &CostModel, iteration_ms: f64, recompute_flops: f64) -> Rates {
        let w = &costs.workload;
        let secs = iteration_ms / 1e3;
        let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        let samples_per_s = per_s(w.global_batch as f64);
        let model_flops = costs.iteration_model_flops();
        let peak_tflops: f64 = (0..costs.ranks())
            .map(|r| {
                let g = costs.gpu(r);
                g.peak_tflops(w.dtype).unwrap_or(g.fp32_tflops)
            })
            .sum();
        let util = |flops: f64| {
            if peak_tflops > 0.0 {
                per_s(flops) / 1e12 / peak_tflops
            } else {
                0.0
            }
        };
        let hw_flops = model_flops + recompute_flops + padding_flops(w);
        Rates {
            samples_per_s,
            tokens_per_s: samples_per_s * w.model.tokens_per_sample(w.seq_len) as f64,
            tflops: per_s(model_flops) / 1e12,
            mfu: util(model_flops),
            hfu: util(hw_flops),
            peak_tflops,
            model_tflop: model_flops / 1e12,
            hardware_tflop: hw_flops / 1e12,
        }
    }
}

impl PipelineReport {
    /// The stages of `pipe` from the per-GPU reports of its run.
    fn of(
        pipe: &crate::plan::pipeline::Pipeline,
        strategy: &crate::strategy::Strategy,
        gpus: &[GpuReport],
        iteration_ms: f64,
        (tp_comm_ms, ep_comm_ms): (&[f64], &[f64]),
    ) -> PipelineReport {
        use crate::pipeline::buckets::{grad_sync, GradSync};
        let grad_sync = match grad_sync(strategy.sharding, pipe.dp_overlap()) {
            // (Lowered as the data-parallel plan of its entries.)
            _ if pipe.runs_data_parallel(gpus.len(), strategy) => "data-parallel schedule",
            GradSync::AfterBackward => "after backward",
            GradSync::Buckets => "buckets",
            GradSync::PerUnit => "per unit",
        };
        let mut stages = Vec::with_capacity(pipe.depth());
        let (mut idle, mut held) = (0.0, 0usize);
        for (s, st) in pipe.stages.iter().enumerate() {
            let g: Vec<&GpuReport> = st.gpus.iter().map(|&r| &gpus[r as usize]).collect();
            let max = |f: fn(&GpuReport) -> f64| g.iter().map(|x| f(x)).fold(0.0, f64::max);
            idle += g.iter().map(|x| x.idle_ms).sum::<f64>();
            held += g.len();
            let names: Vec<String> = g.iter().map(|x| x.gpu.clone()).collect();
            // Its chunks: virtual stages s, s + p, s + 2p, ...
            let p = pipe.depth();
            let chunks: Vec<[u32; 2]> = (s..pipe.virtual_depth())
                .step_by(p)
                .map(|x| {
                    let first = pipe.virtual_first_block(x);
                    [first, first + pipe.virtual_blocks(x) - 1]
                })
                .collect();
            let (first, last) = match (chunks.first(), chunks.last()) {
                (Some(a), Some(b)) => (a[0], b[1]),
                _ => (pipe.first_block(s), pipe.first_block(s) + st.blocks - 1),
            };
            stages.push(StageReport {
                stage: s,
                first_block: first,
                last_block: last,
                blocks: st.blocks,
                chunks: if chunks.len() > 1 { chunks } else { Vec::new() },
                ranks: st.gpus.iter().map(|&r| r as usize).collect(),
                tp: st.tp,
                tp_comm_ms: (st.tp > 1).then(|| {
                    st.gpus
                        .iter()
                        .map(|&r| tp_comm_ms.get(r as usize).copied().unwrap_or(0.0))
                        .fold(0.0, f64::max)
                }),
                ep_comm_ms: (pipe.expert_parallel > 1).then(|| {
                    st.gpus
                        .iter()
                        .map(|&r| ep_comm_ms.get(r as usize).copied().unwrap_or(0.0))
                        .fold(0.0, f64::max)
                }),
                gpus: crate::lists::name_runs(&names),
                compute_ms: max(|x| x.compute_ms),
                exposed_comm_ms: max(|x| x.exposed_comm_ms),
                idle_ms: max(|x| x.idle_ms),
                peak_mem_gib: max(|x| x.peak_mem_gib),
                usable_gib: g.iter().map(|x| x.usable_gib).fold(f64::INFINITY, f64::min),
                shares: if st.uneven() {
                    st.shares.clone()
                } else {
                    Vec::new()
                },
            });
        }
        // The global batch: what the first stage's replicas take.
        let first = &pipe.stages[0];
        let batch: u32 = (0..first.dp())
            .map(|j| gpus[first.group(j)[0] as usize].batch)
            .sum();
        PipelineReport {
            schedule: pipe.schedule.name().to_string(),
            microbatches: pipe.microbatches,
            microbatch_size: batch.div_ceil(pipe.microbatches.max(1)),
            bubble_pct: if held > 0 && iteration_ms > 0.0 {
                100.0 * idle / (held as f64 * iteration_ms)
            } else {
                0.0
            },
            sequence_parallel: pipe.sequence_parallel,
            tp_comm_overlap: pipe.tp_comm_overlap && pipe.has_tp(),
            overlap_grad_reduce: pipe.overlap_grad_reduce,
            overlap_param_gather: pipe.overlap_param_gather,
            grad_sync: grad_sync.to_string(),
            rank_order: crate::plan::shape::RankOrder::of(pipe)
                .filter(|&o| o != crate::plan::shape::RankOrder::default())
                .map(|o| o.name().to_string()),
            expert_parallel: pipe.expert_parallel.max(1),
            expert_tensor_parallel: pipe
                .expert_tensor_parallel
                .filter(|&te| pipe.stages.iter().any(|st| st.tp != te)),
            moe_dispatcher: None,
            routing: None,
            stages,
        }
    }
}

/// What an expert-parallel plan assumed of the routing, with the busiest
/// rank's load at the first stage's micro-batch slice (the largest
/// replica's); none without EP.
fn routing(
    pipe: &crate::plan::pipeline::Pipeline,
    w: &crate::cost::workload::Workload,
) -> Option<String> {
    let moe = w.model.uniform_moe().filter(|_| pipe.expert_parallel > 1)?;
    let first = pipe.stages.first()?;
    let tp = pipe.tensor(0);
    let micro = pipe
        .micro_sizes(w.global_batch)
        .into_iter()
        .max()
        .unwrap_or(1);
    let samples = first
        .slices(micro)
        .iter()
        .map(|&(lo, hi)| hi - lo)
        .max()
        .unwrap_or(1);
    let tokens = samples as f64 * w.model.tokens_per_sample(w.seq_len) as f64;
    Some(format!(
        "{}; at {:.0} tokens per replica and micro-batch the busiest EP rank computes {:.3} x the mean of the routed copies",
        moe.routing_assumption(),
        tokens,
        tp.expert_load(&w.model, tokens)
    ))
}

/// Milliseconds of `ns` nanoseconds.
fn ns_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The report's intervals ([`Intervals`]): each GPU's compute at its GPU
/// type's error, its exposed communication at the comm model's.
fn intervals_of(
    costs: &CostModel,
    gpus: &[GpuReport],
    iteration_ms: f64,
    rate: &Rates,
) -> Intervals {
    let comm = costs.comm.error_pct();
    let shares: Vec<Share> = gpus
        .iter()
        .map(|g| Share {
            compute_ms: g.compute_ms,
            compute_err_pct: costs.gpu_type(g.rank).time_error_pct,
            comm_ms: g.exposed_comm_ms,
            comm_err_pct: comm,
        })
        .collect();
    let mut basis: Vec<String> = Vec::new();
    for t in &costs.types {
        let (m, p) = t.time_error_pct;
        let how = if t.block.source.rank() == 2 {
            "cross-validated"
        } else {
            "run-to-run"
        };
        let s = format!("{} compute {m:.0}%/{p:.0}% ({how})", t.gpu.name);
        if !basis.contains(&s) {
            basis.push(s);
        }
    }
    basis.push(format!(
        "communication {:.0}%/{:.0}% (estimate)",
        comm.0, comm.1
    ));
    Intervals::of(
        iteration_ms,
        rate.samples_per_s,
        rate.tokens_per_s,
        &shares,
        format!("median/p90 errors: {}", basis.join(", ")),
    )
}

/// Builds the report of a finished run: `stats` from the engine, the
/// breakdown and memory observers, the trace if recorded.
pub(crate) fn assemble(
    a: &Assembly<'_>,
    stats: &RunStats,
    breakdown: &Breakdown<'_>,
    memory: &MemoryTracker,
    trace: Option<Trace>,
) -> Report {
    let costs = a.costs;
    let plan = a.plan;
    let w = &costs.workload;
    let iteration_ms = ns_ms(stats.makespan.0);
    let rate = Rates::of(costs, iteration_ms, a.recompute_flops);
    let memory_source = costs.act.source().to_string();
    let gpus: Vec<GpuReport> = (0..costs.ranks())
        .map(|r| gpu_report(a, breakdown, memory, &memory_source, r))
        .collect();
    let oom_gpus: Vec<OomGpu> = gpus.iter().filter(|g| g.oom).map(oom_gpu).collect();
    let hosts = host_reports(a, memory);
    let oom_hosts: Vec<HostReport> = hosts.iter().filter(|h| h.oom).cloned().collect();
    let collectives = collective_stats(a, breakdown);
    let collective_summary = kind_summaries(&collectives);
    let pipeline = plan.pipeline.as_ref().map(|p| {
        let ms = |f: fn(&super::breakdown::RankTimes) -> u64| -> Vec<f64> {
            breakdown.ranks.iter().map(|r| f(r) as f64 / 1e6).collect()
        };
        let (tp, ep) = (ms(|r| r.tp_comm), ms(|r| r.ep_comm));
        let mut report = PipelineReport::of(p, &plan.strategy, &gpus, iteration_ms, (&tp, &ep));
        report.routing = routing(p, w);
        report.moe_dispatcher =
            (!p.moe_dispatcher.is_default()).then(|| p.moe_dispatcher.name().to_string());
        report
    });
    let intervals = intervals_of(costs, &gpus, iteration_ms, &rate);
    let comm_sources = comm_sources(a.collectives);
    let mut warnings = costs.warnings.clone();
    warnings.extend(unmatched_measurements(costs, &comm_sources));
    Report {
        planner: plan.planner.clone(),
        model: w.model.name.clone(),
        cluster: w.cluster.name.clone(),
        dtype: w.dtype.to_string(),
        seq_len: w.seq_len,
        global_batch: w.global_batch,
        strategy: plan.strategy,
        oom: !oom_gpus.is_empty() || !oom_hosts.is_empty(),
        iteration_ms,
        samples_per_s: rate.samples_per_s,
        tokens_per_s: rate.tokens_per_s,
        tflops: rate.tflops,
        mfu: rate.mfu,
        hfu: rate.hfu,
        peak_tflops: rate.peak_tflops,
        price_per_hour_usd: w.cluster.gpus.iter().map(|g| g.price_per_hour_usd).sum(),
        model_tflop: rate.model_tflop,
        hardware_tflop: rate.hardware_tflop,
        mem_policy: costs.options.mem_policy,
        overhead_gib: costs.overhead_gib(),
        buffers_ref_gib: costs.activations.buffers_ref_bytes / GIB,
        act_fixed_gib: costs.activations.fixed_bytes / GIB,
        oom_gpus,
        oom_hosts,
        hosts,
        collective_summary,
        collectives,
        comm_model: costs.comm.describe(),
        comm_sources,
        gpus,
        intervals,
        warnings,
        ops: stats.ops,
        events: stats.events,
        simulated_gpus: a.classes.simulated_ranks(),
        folded_passes: a.folding.map_or(0, |f| f.folded_passes),
        pipeline,
        trace,
    }
}

/// The collectives per (kind, group shape, source), counted (empty with
/// the analytic model: nothing to say).
fn comm_sources(records: &[CollectiveRecord]) -> Vec<CommSourceStat> {
    let mut by: std::collections::BTreeMap<(&'static str, GroupSource), u64> =
        std::collections::BTreeMap::new();
    for c in records {
        if let Some(src) = c.source {
            *by.entry((c.kind.name(), src)).or_default() += u64::from(c.count);
        }
    }
    by.into_iter()
        .map(|((kind, g), n)| CommSourceStat {
            kind: kind.to_string(),
            group_ranks: g.ranks,
            group_nodes: g.nodes,
            source: g.source,
            collectives: n,
        })
        .collect()
}

/// A warning when measured collectives were given and none served this
/// plan (every collective of it timed by the analytic model): which groups
/// were measured and which the plan has.
fn unmatched_measurements(costs: &CostModel, sources: &[CommSourceStat]) -> Option<String> {
    use crate::comm::CommSource;
    if !costs.comm.is_measured() || sources.iter().any(|s| s.source != CommSource::Analytic) {
        return None;
    }
    let plan: Vec<String> = sources
        .iter()
        .map(|s| {
            format!(
                "{} over {} ranks on {} node(s)",
                s.kind, s.group_ranks, s.group_nodes
            )
        })
        .collect();
    Some(format!(
        "the measured collectives given ({}) serve no collective of this plan ({}): the analytic model timed every one; measure the plan's groups (nccl-tests with -g / -N for its ranks and nodes)",
        costs.comm.measured_groups().join(", "),
        if plan.is_empty() { "none".to_string() } else { plan.join(", ") }
    ))
}

/// Rank `r`'s row: its plan entry, its time breakdown and memory (a rank
/// not simulated has the timeline of its simulated twin) and where its
/// numbers came from (`memory_source`: the workload's non-state memory).
fn gpu_report(
    a: &Assembly<'_>,
    breakdown: &Breakdown<'_>,
    memory: &MemoryTracker,
    memory_source: &str,
    r: usize,
) -> GpuReport {
    let costs = a.costs;
    let q = a.classes.rep_rank[r];
    let t = &breakdown.ranks[q];
    let rp = &a.plan.gpus[r];
    let ty = costs.gpu_type(r);
    let peak_gib = memory.peak_bytes(q) as f64 / GIB;
    let capacity_gib = costs.capacity_gib(r);
    let usable_gib = costs.usable_gib(r);
    let memory_parts = MemoryBreakdown::new(
        memory.peak_bytes(q),
        a.base_device_bytes[r],
        (costs.overhead_gib() * GIB + costs.activations.fixed_bytes).round() as i64,
        memory.peak_by_kind(q),
        Limits {
            usable_gib,
            capacity_gib,
            outside_gib: costs.overhead_gib(),
            policy: costs.options.mem_policy,
        },
    );
    GpuReport {
        rank: r,
        gpu: ty.gpu.name.clone(),
        node: costs.workload.cluster.gpus[r].node,
        batch: rp.batch,
        microbatches: rp.microbatches,
        microbatch_size: rp.microbatch_size,
        state_fraction: rp.state_fraction,
        compute_ms: ns_ms(t.compute),
        exposed_comm_ms: ns_ms(t.exposed_comm),
        copy_ms: ns_ms(t.copy),
        host_ms: ns_ms(t.host),
        idle_ms: ns_ms(t.idle),
        forward_ms: ns_ms(t.by_kind[0]),
        recompute_ms: ns_ms(t.by_kind[1]),
        backward_ms: ns_ms(t.by_kind[2]),
        optimizer_ms: ns_ms(t.by_kind[3]),
        comm_busy_ms: ns_ms(t.comm_busy),
        copy_busy_ms: ns_ms(t.copy_busy),
        host_busy_ms: ns_ms(t.host_busy),
        interference_ms: ns_ms(t.interference),
        contention_ms: ns_ms(t.contention),
        finish_ms: ns_ms(t.finish),
        peak_mem_gib: peak_gib,
        peak_at_ms: ns_ms(
            memory
                .peak_time(q)
                .0
                .saturating_add(a.folding.map_or(0, |f| f.peak_shift_ns[q])),
        ),
        base_mem_gib: a.base_device_bytes[r] as f64 / GIB,
        capacity_gib,
        usable_gib,
        mem_pct: if capacity_gib > 0.0 {
            100.0 * peak_gib / capacity_gib
        } else {
            0.0
        },
        usable_pct: if usable_gib > 0.0 {
            100.0 * peak_gib / usable_gib
        } else {
            0.0
        },
        oom: peak_gib > usable_gib,
        memory: memory_parts,
        activation_scale: costs.activations.scale_at(rp.microbatch_size),
        compute_source: ty.curve_source(crate::perfmodel::BlockImpl::of(&a.plan.strategy)),
        memory_source: memory_source.to_string(),
        unit_source: unit_source(ty),
    }
}

/// Where a GPU type's embedding, head and optimizer times came from: its
/// measured units, else the predictor's (the head's GEMM at its shape, the
/// loss's traffic) and the optimizer's roofline.
fn unit_source(ty: &crate::cost::GpuTypeCost) -> String {
    use crate::cost::{OPTIMIZER_BYTES_PER_PARAM, UNIT_BANDWIDTH_EFFICIENCY};
    match &ty.units {
        Some(u) => u.source.to_string(),
        None => format!(
            "embedding/head: {} (output GEMM at its shape, loss traffic per logit); optimizer {} B/param at {:.0}% of HBM bandwidth",
            ty.unit_curves
                .iter()
                .flatten()
                .next()
                .map_or("not predicted".to_string(), |c| c.head.source.to_string()),
            OPTIMIZER_BYTES_PER_PARAM,
            UNIT_BANDWIDTH_EFFICIENCY * 100.0
        ),
    }
}

/// The out-of-memory entry of a GPU whose row says `oom`.
fn oom_gpu(g: &GpuReport) -> OomGpu {
    OomGpu {
        rank: g.rank,
        gpu: g.gpu.clone(),
        peak_mem_gib: g.peak_mem_gib,
        usable_gib: g.usable_gib,
        capacity_gib: g.capacity_gib,
    }
}

/// Host memory per node: the peak of its pool (a node not simulated has
/// its twin's), its constant part and the capacity of the cluster spec.
fn host_reports(a: &Assembly<'_>, memory: &MemoryTracker) -> Vec<HostReport> {
    let ranks = a.costs.ranks();
    let mut hosts = Vec::new();
    for (n, node) in a.costs.workload.cluster.nodes.iter().enumerate() {
        let pool = ranks + a.classes.rep_node[n];
        let peak_gib = if pool < memory.ranks() {
            memory.peak_bytes(pool) as f64 / GIB
        } else {
            0.0
        };
        hosts.push(HostReport {
            node: n,
            name: node.name.clone(),
            peak_gib,
            base_gib: a.base_host_bytes.get(n).copied().unwrap_or(0) as f64 / GIB,
            capacity_gib: node.host_mem_gib,
            oom: peak_gib > node.host_mem_gib,
        });
    }
    hosts
}

/// The collectives rank 0 joins, per (kind, unit) in that order, with the
/// durations as run (a folded run's ops weighted by what they stand for).
fn collective_stats(a: &Assembly<'_>, breakdown: &Breakdown<'_>) -> Vec<CollectiveStat> {
    // (count, buffer bytes, time in ns: integer, so that a folded run's
    // weighted sums are the whole iteration's to the ns).
    let mut stats_by: std::collections::BTreeMap<(String, u32), (u64, f64, u64)> =
        std::collections::BTreeMap::new();
    for c in a.collectives.iter().filter(|c| c.joins_rank0) {
        let w = a.folding.map_or(1, |f| f.op_weight[c.op.0 as usize]);
        let e = stats_by
            .entry((c.kind.name().to_string(), c.unit))
            .or_insert((0, 0.0, 0));
        e.0 = e.0.saturating_add(u64::from(c.count).saturating_mul(w));
        e.1 += c.buffer_bytes * w as f64;
        let actual = breakdown.collective_ns.get(&c.op.0).copied();
        e.2 =
            e.2.saturating_add(actual.unwrap_or(c.dur.0).saturating_mul(w));
    }
    stats_by
        .iter()
        .map(|((kind, unit), &(count, bytes, ns))| CollectiveStat {
            kind: kind.clone(),
            unit: *unit,
            count: u32::try_from(count).unwrap_or(u32::MAX),
            buffer_bytes: bytes,
            time_ms: ns_ms(ns),
        })
        .collect()
}

/// The per-unit collectives summed per kind (`all_gather`,
/// `reduce_scatter`, `all_reduce`, `all_to_all`; kinds absent are left out).
fn kind_summaries(collectives: &[CollectiveStat]) -> Vec<KindSummary> {
    let mut summary: Vec<KindSummary> = Vec::new();
    for k in crate::comm::CollectiveKind::ALL.map(|k| k.name()) {
        let v: Vec<&CollectiveStat> = collectives.iter().filter(|c| c.kind == k).collect();
        if !v.is_empty() {
            summary.push(KindSummary {
                kind: k.to_string(),
                count: v.iter().map(|c| c.count).sum(),
                buffer_gib: v.iter().map(|c| c.buffer_bytes).sum::<f64>() / GIB,
                time_ms: v.iter().map(|c| c.time_ms).sum(),
            });
        }
    }
    summary
}

/// FLOPs per iteration the experts spend on capacity padding (rows beyond
/// the routed copies, forward and backward: `(CF - 1)` times the routed
/// experts' `6 k P_expert` per token and block); zero when dropless.
fn padding_flops(w: &crate::cost::Workload) -> f64 {
    let m = &w.model;
    m.uniform_moe().map_or(0.0, |moe| {
        let tokens = w.global_batch as f64 * m.tokens_per_sample(w.seq_len) as f64;
        let routed = 6.0 * moe.top_k as f64 * moe.expert_params(m.hidden) as f64;
        (moe.padding() - 1.0) * routed * m.layers as f64 * tokens
    })
}
