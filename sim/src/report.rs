//! The result of simulating one iteration: timing, throughput, per-GPU time
//! breakdown and memory, and how each is written (JSON, table, CSV).
//!
//! Units: times in ms (`_ms`), memory in GiB (`_gib`, 2^30 bytes),
//! throughput in samples/s and tokens/s, model TFLOPS (10^12 FLOP/s), MFU
//! and HFU as fractions in [0, 1], memory use as a percentage of capacity
//! (`mem_pct`) and of the usable memory (`usable_pct`, above 100 exactly
//! when the GPU is out of memory).
//!
//! `assemble` turns a run of a lowered iteration (the engine's stats and
//! the observers below) into a [`Report`]; it knows nothing of schedules.
//!
//! # Per-GPU time breakdown
//!
//! For every GPU, `compute_ms + exposed_comm_ms + copy_ms + host_ms +
//! idle_ms = iteration_ms` exactly (the parts are accumulated in integer
//! ns). `compute_ms` is the busy time of the compute stream. Every gap on
//! the compute stream is charged to what the next compute op waited for:
//! its dependency that finished last. If that is a collective, the part of
//! the gap during which this GPU's communication streams (data-parallel and
//! replica) were busy is `exposed_comm_ms` and the rest (the collective had
//! not started because some other rank had not joined it yet: a straggler
//! stall) is `idle_ms`; if it is a host copy, the part during which the
//! copy stream was busy is `copy_ms` and the rest `idle_ms`; anything else
//! is `idle_ms`. After the GPU's last compute op, until its own last op
//! ends (an offloaded optimizer: gradient copies, the host step, the
//! parameter copy back), time is charged to the host stream when busy
//! (`host_ms`), else the copy stream, else the communication streams, else
//! idle; the wait from there to the end of the iteration (the barrier) is
//! `idle_ms`.
//!
//! # Out of memory
//!
//! A GPU is out of memory when its simulated peak exceeds its usable memory
//! (capacity x the allowed fraction); a node's host is out of memory when
//! its peak exceeds the host memory of the cluster spec. An out-of-memory
//! plan is a valid answer, not an error: [`Report::oom`] is true,
//! [`Report::oom_gpus`] / [`Report::oom_hosts`] list the offenders with
//! peak and capacity, and the JSON and table do not present the iteration
//! time as a result (see [`Report::to_json`]).

use crate::cost::CostModel;
use crate::engine::{Category, Graph, Observer, OpRecord, RunStats, Stream};
use crate::memory::MemoryTracker;
use crate::schedule::lower::{CollectiveRecord, Group};
use crate::strategy::Strategy;
use crate::trace::Trace;
use crate::units::GIB;
use serde::Serialize;
use std::collections::VecDeque;
use std::fmt::Write as _;

/// Identifier of the JSON schema written by [`Report::to_json`].
pub const REPORT_FORMAT: &str = "cephalo-report/2";

/// What one GPU did during the iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuReport {
    /// Rank.
    pub rank: usize,
    /// Canonical GPU name.
    pub gpu: String,
    /// Node index in the cluster.
    pub node: usize,
    /// Local batch (samples).
    pub batch: u32,
    /// Micro-batch count.
    pub microbatches: u32,
    /// Largest micro-batch size (samples).
    pub microbatch_size: u32,
    /// Fraction of the sharded training state held.
    pub state_fraction: f64,
    /// Busy time of the compute stream, ms.
    pub compute_ms: f64,
    /// Compute-stream wait while this GPU's communication stream was busy, ms.
    pub exposed_comm_ms: f64,
    /// Compute-stream wait while this GPU's host-copy stream was busy, ms.
    pub copy_ms: f64,
    /// Wait after the last compute op while the host works for this GPU
    /// (an offloaded optimizer step), ms.
    pub host_ms: f64,
    /// Remaining wait: straggler stalls and the end-of-iteration barrier, ms.
    pub idle_ms: f64,
    /// Part of `compute_ms` spent in forward passes (embedding, blocks, head), ms.
    pub forward_ms: f64,
    /// Part of `compute_ms` spent recomputing block forwards in the backward, ms.
    pub recompute_ms: f64,
    /// Part of `compute_ms` spent in backward passes, ms.
    pub backward_ms: f64,
    /// Part of `compute_ms` spent in the optimizer step, ms.
    pub optimizer_ms: f64,
    /// Total busy time of the communication streams (overlapped or not), ms.
    pub comm_busy_ms: f64,
    /// Total busy time of the host-copy stream (overlapped or not), ms.
    pub copy_busy_ms: f64,
    /// Total busy time of the host (CPU) stream, ms.
    pub host_busy_ms: f64,
    /// Part of `compute_ms` the GPU's compute lost to collectives running
    /// beside it (compute-communication interference), ms.
    pub interference_ms: f64,
    /// Time this GPU's transfers (collectives, host copies) took beyond
    /// their duration alone because they shared links, ms (summed over
    /// transfers; they may overlap compute).
    pub contention_ms: f64,
    /// When this GPU's last op ended, ms.
    pub finish_ms: f64,
    /// Peak simulated memory, GiB.
    pub peak_mem_gib: f64,
    /// When the peak was first reached, ms.
    pub peak_at_ms: f64,
    /// Constant part of the memory: sharded state + framework overhead, GiB.
    pub base_mem_gib: f64,
    /// Memory capacity, GiB.
    pub capacity_gib: f64,
    /// Memory a plan may use (capacity x allowed fraction), GiB.
    pub usable_gib: f64,
    /// Peak as a percentage of capacity.
    pub mem_pct: f64,
    /// Peak as a percentage of the usable memory (above 100 exactly when
    /// `oom`): the headroom a plan really has.
    pub usable_pct: f64,
    /// Peak exceeds the usable memory.
    pub oom: bool,
    /// What the peak holds, and the headroom to the policy limit and to
    /// the physical capacity.
    pub memory: MemoryBreakdown,
    /// The factor on the analytic activation sizes at this GPU's
    /// micro-batch size, from anchoring them to the measured non-state
    /// memory (`crate::cost::ActivationModel`).
    pub activation_scale: f64,
    /// Where the block times came from (`imported (...)`, `analytic (...)`).
    pub compute_source: String,
    /// Where the non-state memory curve came from.
    pub memory_source: String,
    /// Where the embedding / head / optimizer times came from.
    pub unit_source: String,
}

/// One GPU's memory at its peak instant, by component (GiB): the five
/// parts sum to the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    /// Training state this GPU keeps all iteration: its shard of the
    /// parameters, gradients and optimizer moments (a whole replica and
    /// DDP's gradient buffer without sharding; nothing offloaded).
    pub state_gib: f64,
    /// Framework memory: the fixed `--overhead-gib` (CUDA context,
    /// allocator) plus the measured constant workspaces, GiB.
    pub overhead_gib: f64,
    /// All-gathered (unsharded) parameters alive at the peak.
    pub unsharded_params_gib: f64,
    /// Unsharded gradient buffers alive at the peak (before their reduction).
    pub gradients_gib: f64,
    /// Saved activations and compute workspaces alive at the peak.
    pub activations_gib: f64,
    /// The peak (the sum of the five parts).
    pub peak_gib: f64,
    /// The policy limit: capacity x `--mem-fraction`.
    pub policy_limit_gib: f64,
    /// `policy_limit_gib - peak_gib` (negative: over the limit).
    pub headroom_policy_gib: f64,
    /// Physical capacity.
    pub capacity_gib: f64,
    /// `capacity_gib - peak_gib` (negative: does not fit at all).
    pub headroom_capacity_gib: f64,
    /// `fits`, `over-policy` (over the limit, within the capacity: it may
    /// run, without the margin the policy asks for) or `over-capacity`.
    pub status: &'static str,
}

impl MemoryBreakdown {
    /// The breakdown of a peak of `peak_bytes` with a constant `base_bytes`
    /// of which `overhead_bytes` is framework memory, and a dynamic part
    /// split by [`crate::engine::MemKind`] index.
    pub fn new(
        peak_bytes: i64,
        base_bytes: i64,
        overhead_bytes: i64,
        dynamic: [i64; crate::engine::MemKind::COUNT],
        usable_gib: f64,
        capacity_gib: f64,
    ) -> MemoryBreakdown {
        use crate::engine::MemKind;
        let gib = |b: i64| b as f64 / GIB;
        let overhead = overhead_bytes.clamp(0, base_bytes.max(0));
        let peak_gib = gib(peak_bytes);
        MemoryBreakdown {
            state_gib: gib(base_bytes - overhead),
            overhead_gib: gib(overhead),
            unsharded_params_gib: gib(dynamic[MemKind::Params.index()]),
            gradients_gib: gib(dynamic[MemKind::Grads.index()]),
            activations_gib: gib(dynamic[MemKind::Activations.index()]),
            peak_gib,
            policy_limit_gib: usable_gib,
            headroom_policy_gib: usable_gib - peak_gib,
            capacity_gib,
            headroom_capacity_gib: capacity_gib - peak_gib,
            status: if peak_gib <= usable_gib {
                "fits"
            } else if peak_gib <= capacity_gib {
                "over-policy"
            } else {
                "over-capacity"
            },
        }
    }
}

/// The per-GPU memory at the peak by component, with the headroom to the
/// policy limit and to the capacity: one row per rank (`(gpu, memory)` in
/// rank order), identical ranks grouped on large clusters as in the main
/// table.
pub fn memory_table<'a>(gpu_rows: impl Iterator<Item = (&'a str, &'a MemoryBreakdown)>) -> String {
    let mut s = String::from("memory at each GPU's peak, GiB (limit = capacity x mem fraction):\n");
    let header = [
        "rank",
        "gpu",
        "state",
        "overhead",
        "params",
        "grads",
        "activ.",
        "peak",
        "limit",
        "headroom",
        "capacity",
        "to capacity",
        "",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for (r, (g, m)) in gpu_rows.enumerate() {
        rows.push(vec![
            r.to_string(),
            g.to_string(),
            format!("{:.2}", m.state_gib),
            format!("{:.2}", m.overhead_gib),
            format!("{:.2}", m.unsharded_params_gib),
            format!("{:.2}", m.gradients_gib),
            format!("{:.2}", m.activations_gib),
            format!("{:.2}", m.peak_gib),
            format!("{:.2}", m.policy_limit_gib),
            format!("{:+.2}", m.headroom_policy_gib),
            format!("{:.2}", m.capacity_gib),
            format!("{:+.2}", m.headroom_capacity_gib),
            match m.status {
                "fits" => String::new(),
                "over-policy" => "OVER THE LIMIT, within capacity".into(),
                _ => "OVER CAPACITY".into(),
            },
        ]);
    }
    // `rows` holds the header too.
    if rows.len() - 1 > GROUP_ROWS_ABOVE {
        rows = group_rows(rows);
    }
    write_aligned(&mut s, &rows, |c| c == 1 || c == 12);
    s.push('\n');
    s
}

/// A GPU whose peak memory exceeds its usable memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomGpu {
    /// Rank.
    pub rank: usize,
    /// Canonical GPU name.
    pub gpu: String,
    /// Simulated peak, GiB.
    pub peak_mem_gib: f64,
    /// Usable memory (capacity x allowed fraction), GiB.
    pub usable_gib: f64,
    /// Capacity, GiB.
    pub capacity_gib: f64,
}

/// A node's host memory over the iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostReport {
    /// Node index.
    pub node: usize,
    /// Node name.
    pub name: String,
    /// Peak host memory used by offload (pinned), GiB.
    pub peak_gib: f64,
    /// Constant part (an offloaded optimizer's state), GiB.
    pub base_gib: f64,
    /// Host memory the cluster spec gives the node, GiB.
    pub capacity_gib: f64,
    /// Peak exceeds capacity.
    pub oom: bool,
}

/// Collectives of one kind that one GPU joins in an iteration (rank 0's
/// view: every GPU joins the same number).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindSummary {
    /// `all_gather`, `reduce_scatter` or `all_reduce`.
    pub kind: String,
    /// Collectives per iteration.
    pub count: u32,
    /// Sum of their buffers (NCCL's `nBytes`), GiB.
    pub buffer_gib: f64,
    /// Sum of their durations, ms.
    pub time_ms: f64,
}

/// Collectives of one kind on one unit that one GPU joins in an iteration
/// (rank 0's view).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveStat {
    /// `all_gather`, `reduce_scatter` or `all_reduce`.
    pub kind: String,
    /// Unit (0 embedding, 1..=L blocks, L+1 head).
    pub unit: u32,
    /// Collectives per iteration (DDP buckets count one each).
    pub count: u32,
    /// Sum of their buffers, bytes.
    pub buffer_bytes: f64,
    /// Sum of their durations, ms.
    pub time_ms: f64,
}

/// Iteration timing and throughput (what [`Report`] reports at top level).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    /// Simulated iteration time (makespan over all GPUs), ms.
    pub iteration_ms: f64,
    /// Global batch / iteration time, samples/s.
    pub samples_per_s: f64,
    /// `samples_per_s` x tokens per sample.
    pub tokens_per_s: f64,
    /// Model FLOPs of the iteration (no recompute) / iteration time, TFLOPS (whole cluster).
    pub tflops: f64,
    /// `tflops` / sum of the GPUs' dense peak at the dtype.
    pub mfu: f64,
    /// Executed FLOPs (model plus recompute) / time / peak.
    pub hfu: f64,
}

/// The simulated iteration.
///
/// In Rust the timing fields always hold the simulated numbers; check
/// [`Report::oom`] (or use [`Report::time_ms`]) before treating them as a
/// result. In JSON they are `null` when the plan is out of memory.
///
/// # JSON schema (`cephalo-report/2`, written by [`Report::to_json`])
///
/// ```text
/// {
///   "format": "cephalo-report/2",
///   "planner": str, "model": str, "cluster": str, "dtype": "fp16"|"bf16"|"fp32",
///   "seq_len": int (tokens per sample), "global_batch": int,
///   "strategy": {sharding, shard_group, accumulation, checkpointing, offload,
///                param_dtype, reduce_dtype, attention},
///   "oom": bool,
///   "iteration_ms": num|null, "samples_per_s": num|null, "tokens_per_s": num|null,
///   "tflops": num|null, "mfu": num|null, "hfu": num|null,   -- null exactly when oom
///   "timing_if_it_fit": {iteration_ms, samples_per_s, tokens_per_s, tflops, mfu, hfu}
///                                                   -- present only when oom: what the
///                                                      iteration would take with unlimited memory
///   "oom_gpus": [{rank, gpu, peak_mem_gib, usable_gib, capacity_gib}],
///   "oom_hosts": [{node, name, peak_gib, base_gib, capacity_gib, oom}],
///   "hosts": [{node, name, peak_gib, base_gib, capacity_gib, oom}],
///   "peak_tflops": num (sum of dense peaks at the dtype),
///   "price_per_hour_usd": num|null (whole cluster; null unless every GPU is priced),
///   "usd_per_million_tokens": num|null (null when unpriced or oom),
///   "model_tflop": num (per iteration), "hardware_tflop": num (with recompute),
///   "mem_fraction": num, "overhead_gib": num, "buffers_ref_gib": num, "act_fixed_gib": num,
///   "collective_summary": [{kind, count, buffer_gib, time_ms}],     -- per GPU and iteration
///   "collectives": [{kind, unit, count, buffer_bytes, time_ms}],    -- per unit, likewise
///   "comm_model": str,
///   "gpus": [{rank, gpu, node, batch, microbatches, microbatch_size, state_fraction,
///             compute_ms, exposed_comm_ms, copy_ms, host_ms, idle_ms,   -- sum = iteration time
///             forward_ms, recompute_ms, backward_ms, optimizer_ms,       -- sum = compute_ms
///             comm_busy_ms, copy_busy_ms, host_busy_ms, interference_ms (part of compute_ms),
///             contention_ms (transfers' stretch from shared links), finish_ms,
///             peak_mem_gib, peak_at_ms, base_mem_gib, capacity_gib, usable_gib, mem_pct,
///             usable_pct, oom,
///             memory: {state_gib, overhead_gib, unsharded_params_gib, gradients_gib,
///                      activations_gib (the five sum to peak_gib), peak_gib,
///                      policy_limit_gib, headroom_policy_gib, capacity_gib,
///                      headroom_capacity_gib, status: "fits"|"over-policy"|"over-capacity"},
///             activation_scale, compute_source, memory_source, unit_source}],
///   "warnings": [str],
///   "ops": int, "events": int,                      -- size of the simulated task graph
///   "simulated_gpus": int                           -- GPUs simulated event by event (the
///                                                      others have an identical node's timeline)
///   "folded_passes": int                            -- micro-batch passes not simulated event by
///                                                      event (repeats of a periodic pattern)
/// }
/// ```
///
/// Per-GPU times are kept when `oom` is true (they describe the iteration as
/// if memory were unlimited). Field order is fixed; same inputs give the
/// same bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Planner that produced the plan (`manual` for a user-given plan).
    pub planner: String,
    /// Canonical model name.
    pub model: String,
    /// Cluster name.
    pub cluster: String,
    /// Precision (`fp16`, `bf16`, `fp32`).
    pub dtype: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Samples per iteration.
    pub global_batch: u32,
    /// The training strategy simulated.
    pub strategy: Strategy,
    /// Some GPU or host is out of memory.
    pub oom: bool,
    /// Simulated iteration time, ms (meaningful only when `!oom`).
    pub iteration_ms: f64,
    /// Samples/s (meaningful only when `!oom`).
    pub samples_per_s: f64,
    /// Tokens/s (meaningful only when `!oom`).
    pub tokens_per_s: f64,
    /// Model TFLOPS of the whole cluster (meaningful only when `!oom`).
    pub tflops: f64,
    /// Model FLOPS utilisation, fraction (meaningful only when `!oom`).
    pub mfu: f64,
    /// Hardware FLOPS utilisation (recompute counted), fraction.
    pub hfu: f64,
    /// Sum of the GPUs' dense peak TFLOPS at the dtype.
    pub peak_tflops: f64,
    /// Price of the whole cluster per hour (USD), when every GPU has a price
    /// (cluster file or catalog).
    pub price_per_hour_usd: Option<f64>,
    /// Model TFLOP of one iteration (10^12 FLOP, no recompute).
    pub model_tflop: f64,
    /// Executed TFLOP of one iteration (model plus recompute).
    pub hardware_tflop: f64,
    /// Allowed fraction of each GPU's memory.
    pub mem_fraction: f64,
    /// Framework overhead per GPU, GiB.
    pub overhead_gib: f64,
    /// Unit buffers assumed inside the measured non-state memory (`B_ref`,
    /// [`crate::cost::reference_buffers_bytes`]), GiB.
    pub buffers_ref_gib: f64,
    /// Fixed workspace of the measured non-state memory, GiB (part of every
    /// GPU's base).
    pub act_fixed_gib: f64,
    /// GPUs out of memory.
    pub oom_gpus: Vec<OomGpu>,
    /// Hosts out of memory.
    pub oom_hosts: Vec<HostReport>,
    /// Host memory per node.
    pub hosts: Vec<HostReport>,
    /// Collectives per kind one GPU joins.
    pub collective_summary: Vec<KindSummary>,
    /// Collectives per (kind, unit) one GPU joins.
    pub collectives: Vec<CollectiveStat>,
    /// Communication model description.
    pub comm_model: String,
    /// Per-GPU details in rank order.
    pub gpus: Vec<GpuReport>,
    /// Warnings from the cost model (flagged profiles, fallbacks).
    pub warnings: Vec<String>,
    /// Ops in the simulated task graph.
    pub ops: u64,
    /// Engine events processed (a start and an end per op).
    pub events: u64,
    /// GPUs simulated event by event; each other GPU has the timeline of
    /// its twin on an identical node ([`crate::symmetry`]).
    pub simulated_gpus: usize,
    /// Micro-batch passes not simulated event by event: each repeats an
    /// exactly periodic pattern of the simulated passes ([`crate::fold`]).
    pub folded_passes: u32,
    /// The stages as simulated (pipeline plans only).
    pub pipeline: Option<PipelineReport>,
    /// The trace, when requested.
    pub trace: Option<Trace>,
}

/// A pipeline plan's stages as simulated (see [`crate::pipeline`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelineReport {
    /// Schedule (`gpipe`, `1f1b`).
    pub schedule: String,
    /// Micro-batches per iteration.
    pub microbatches: u32,
    /// Largest micro-batch, samples.
    pub microbatch_size: u32,
    /// Idle share of the iteration over the GPUs that hold a stage, % (the
    /// bubble, plus waits for slower stages).
    pub bubble_pct: f64,
    /// Per stage, in order.
    pub stages: Vec<StageReport>,
}

/// One pipeline stage in a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageReport {
    /// Stage index.
    pub stage: usize,
    /// First and last block (1-based); the first stage also runs the
    /// embedding, the last the head.
    pub first_block: u32,
    /// Last block (1-based).
    pub last_block: u32,
    /// Ranks of its data-parallel group.
    pub ranks: Vec<usize>,
    /// Its GPUs, grouped (`2x l4`).
    pub gpus: String,
    /// Largest compute time of its GPUs, ms.
    pub compute_ms: f64,
    /// Largest wait for transfers and collectives, ms.
    pub exposed_comm_ms: f64,
    /// Largest idle time, ms.
    pub idle_ms: f64,
    /// Largest peak memory, GiB.
    pub peak_mem_gib: f64,
    /// Smallest usable memory of its GPUs, GiB.
    pub usable_gib: f64,
}

impl PipelineReport {
    /// The stages of `pipe` from the per-GPU reports of its run.
    fn of(
        pipe: &crate::plan::pipeline::Pipeline,
        gpus: &[GpuReport],
        iteration_ms: f64,
    ) -> PipelineReport {
        let mut stages = Vec::with_capacity(pipe.depth());
        let (mut idle, mut held) = (0.0, 0usize);
        for (s, st) in pipe.stages.iter().enumerate() {
            let g: Vec<&GpuReport> = st.gpus.iter().map(|&r| &gpus[r as usize]).collect();
            let max = |f: fn(&GpuReport) -> f64| g.iter().map(|x| f(x)).fold(0.0, f64::max);
            idle += g.iter().map(|x| x.idle_ms).sum::<f64>();
            held += g.len();
            let names: Vec<String> = g.iter().map(|x| x.gpu.clone()).collect();
            let first = pipe.first_block(s);
            stages.push(StageReport {
                stage: s,
                first_block: first,
                last_block: first + st.blocks - 1,
                ranks: st.gpus.iter().map(|&r| r as usize).collect(),
                gpus: crate::lists::name_runs(&names),
                compute_ms: max(|x| x.compute_ms),
                exposed_comm_ms: max(|x| x.exposed_comm_ms),
                idle_ms: max(|x| x.idle_ms),
                peak_mem_gib: max(|x| x.peak_mem_gib),
                usable_gib: g.iter().map(|x| x.usable_gib).fold(f64::INFINITY, f64::min),
            });
        }
        PipelineReport {
            schedule: pipe.schedule.name().to_string(),
            microbatches: pipe.microbatches,
            microbatch_size: gpus
                .iter()
                .filter(|g| g.batch > 0)
                .map(|g| g.microbatch_size)
                .max()
                .unwrap_or(0),
            bubble_pct: if held > 0 && iteration_ms > 0.0 {
                100.0 * idle / (held as f64 * iteration_ms)
            } else {
                0.0
            },
            stages,
        }
    }

    /// Appends the stage lines of a report table to `s`.
    pub fn write_table(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "pipeline: {} stages, {}, {} micro-batches (largest {} samples, split inside each stage), idle {:.1}% of the GPUs' time",
            self.stages.len(),
            self.schedule,
            self.microbatches,
            self.microbatch_size,
            self.bubble_pct
        );
        let header = [
            "stage",
            "blocks",
            "gpus",
            "ranks",
            "compute ms",
            "exp.comm ms",
            "idle ms",
            "peak GiB",
            "usable GiB",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for st in &self.stages {
            let mut blocks = if st.first_block == st.last_block {
                st.first_block.to_string()
            } else {
                format!("{}-{}", st.first_block, st.last_block)
            };
            if st.stage == 0 {
                blocks = format!("emb+{blocks}");
            }
            if st.stage + 1 == self.stages.len() {
                blocks.push_str("+head");
            }
            let ranks: Vec<String> = st.ranks.iter().map(|r| r.to_string()).collect();
            let ranks = if ranks.len() > 8 {
                format!("{}..{} ({})", ranks[0], ranks[ranks.len() - 1], ranks.len())
            } else {
                ranks.join(",")
            };
            rows.push(vec![
                st.stage.to_string(),
                blocks,
                st.gpus.clone(),
                ranks,
                format!("{:.1}", st.compute_ms),
                format!("{:.1}", st.exposed_comm_ms),
                format!("{:.1}", st.idle_ms),
                format!("{:.2}", st.peak_mem_gib),
                format!("{:.2}", st.usable_gib),
            ]);
        }
        write_aligned(s, &rows, |c| (1..=3).contains(&c));
    }
}

/// Appends `rows` (the header first) as columns two spaces apart: the
/// columns `text` names left-aligned, the others (numbers) right-aligned.
fn write_aligned(s: &mut String, rows: &[Vec<String>], text: impl Fn(usize) -> bool) {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let w = widths[c];
            if text(c) {
                let _ = write!(line, "{cell:<w$}  ");
            } else {
                let _ = write!(line, "{cell:>w$}  ");
            }
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

#[derive(Serialize)]
struct ReportJson<'a> {
    format: &'static str,
    planner: &'a str,
    model: &'a str,
    cluster: &'a str,
    dtype: &'a str,
    seq_len: u32,
    global_batch: u32,
    strategy: &'a Strategy,
    oom: bool,
    iteration_ms: Option<f64>,
    samples_per_s: Option<f64>,
    tokens_per_s: Option<f64>,
    tflops: Option<f64>,
    mfu: Option<f64>,
    hfu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timing_if_it_fit: Option<Timing>,
    oom_gpus: &'a [OomGpu],
    oom_hosts: &'a [HostReport],
    hosts: &'a [HostReport],
    peak_tflops: f64,
    price_per_hour_usd: Option<f64>,
    usd_per_million_tokens: Option<f64>,
    model_tflop: f64,
    hardware_tflop: f64,
    mem_fraction: f64,
    overhead_gib: f64,
    buffers_ref_gib: f64,
    act_fixed_gib: f64,
    collective_summary: &'a [KindSummary],
    collectives: &'a [CollectiveStat],
    comm_model: &'a str,
    gpus: &'a [GpuReport],
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline: Option<&'a PipelineReport>,
    warnings: &'a [String],
    ops: u64,
    events: u64,
    simulated_gpus: usize,
    folded_passes: u32,
}

impl Report {
    /// The timing block.
    pub fn timing(&self) -> Timing {
        Timing {
            iteration_ms: self.iteration_ms,
            samples_per_s: self.samples_per_s,
            tokens_per_s: self.tokens_per_s,
            tflops: self.tflops,
            mfu: self.mfu,
            hfu: self.hfu,
        }
    }

    /// The iteration time, or `None` when the plan is out of memory.
    pub fn time_ms(&self) -> Option<f64> {
        (!self.oom).then_some(self.iteration_ms)
    }

    /// Cluster cost of training on one million tokens (USD), when the
    /// cluster is priced and the plan fits.
    pub fn usd_per_million_tokens(&self) -> Option<f64> {
        match self.price_per_hour_usd {
            Some(p) if !self.oom && self.tokens_per_s > 0.0 => {
                Some(p / 3600.0 / self.tokens_per_s * 1e6)
            }
            _ => None,
        }
    }

    /// The report as pretty JSON (schema on [`Report`]), newline-terminated.
    pub fn to_json(&self) -> String {
        let ok = |v: f64| (!self.oom).then_some(v);
        let j = ReportJson {
            format: REPORT_FORMAT,
            planner: &self.planner,
            model: &self.model,
            cluster: &self.cluster,
            dtype: &self.dtype,
            seq_len: self.seq_len,
            global_batch: self.global_batch,
            strategy: &self.strategy,
            oom: self.oom,
            iteration_ms: ok(self.iteration_ms),
            samples_per_s: ok(self.samples_per_s),
            tokens_per_s: ok(self.tokens_per_s),
            tflops: ok(self.tflops),
            mfu: ok(self.mfu),
            hfu: ok(self.hfu),
            timing_if_it_fit: self.oom.then(|| self.timing()),
            oom_gpus: &self.oom_gpus,
            oom_hosts: &self.oom_hosts,
            hosts: &self.hosts,
            peak_tflops: self.peak_tflops,
            price_per_hour_usd: self.price_per_hour_usd,
            usd_per_million_tokens: self.usd_per_million_tokens(),
            model_tflop: self.model_tflop,
            hardware_tflop: self.hardware_tflop,
            mem_fraction: self.mem_fraction,
            overhead_gib: self.overhead_gib,
            buffers_ref_gib: self.buffers_ref_gib,
            act_fixed_gib: self.act_fixed_gib,
            collective_summary: &self.collective_summary,
            collectives: &self.collectives,
            comm_model: &self.comm_model,
            gpus: &self.gpus,
            pipeline: self.pipeline.as_ref(),
            warnings: &self.warnings,
            ops: self.ops,
            events: self.events,
            simulated_gpus: self.simulated_gpus,
            folded_passes: self.folded_passes,
        };
        let mut s =
            serde_json::to_string_pretty(&j).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
        s.push('\n');
        s
    }

    /// Per-GPU rows as CSV (header + one row per GPU, `,`-separated, text
    /// fields quoted): `rank,gpu,node,batch,microbatches,microbatch_size,
    /// state_fraction,compute_ms,exposed_comm_ms,copy_ms,host_ms,idle_ms,
    /// forward_ms,recompute_ms,backward_ms,optimizer_ms,interference_ms,
    /// contention_ms,finish_ms,peak_mem_gib,capacity_gib,usable_gib,mem_pct,
    /// usable_pct,oom,compute_source,memory_source`.
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "rank,gpu,node,batch,microbatches,microbatch_size,state_fraction,compute_ms,exposed_comm_ms,copy_ms,host_ms,idle_ms,forward_ms,recompute_ms,backward_ms,optimizer_ms,interference_ms,contention_ms,finish_ms,peak_mem_gib,capacity_gib,usable_gib,mem_pct,usable_pct,oom,compute_source,memory_source,state_gib,overhead_gib,unsharded_params_gib,gradients_gib,activations_gib,headroom_policy_gib,headroom_capacity_gib,mem_status\n",
        );
        let q = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
        for g in &self.gpus {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.3},{:.3},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{}",
                g.rank,
                q(&g.gpu),
                g.node,
                g.batch,
                g.microbatches,
                g.microbatch_size,
                g.state_fraction,
                g.compute_ms,
                g.exposed_comm_ms,
                g.copy_ms,
                g.host_ms,
                g.idle_ms,
                g.forward_ms,
                g.recompute_ms,
                g.backward_ms,
                g.optimizer_ms,
                g.interference_ms,
                g.contention_ms,
                g.finish_ms,
                g.peak_mem_gib,
                g.capacity_gib,
                g.usable_gib,
                g.mem_pct,
                g.usable_pct,
                g.oom,
                q(&g.compute_source),
                q(&g.memory_source),
                g.memory.state_gib,
                g.memory.overhead_gib,
                g.memory.unsharded_params_gib,
                g.memory.gradients_gib,
                g.memory.activations_gib,
                g.memory.headroom_policy_gib,
                g.memory.headroom_capacity_gib,
                g.memory.status
            );
        }
        s
    }

    /// A human-readable table: one row per GPU, then the summary (or an
    /// OUT OF MEMORY block naming each GPU with its peak and capacity).
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} ({}, seq {}), global batch {}, planner {}, cluster {}",
            self.model, self.dtype, self.seq_len, self.global_batch, self.planner, self.cluster
        );
        let _ = writeln!(s, "strategy: {}", self.strategy.label());
        if let Some(p) = &self.pipeline {
            p.write_table(&mut s);
        }
        let header = [
            "rank",
            "gpu",
            "batch",
            "n",
            "m",
            "state",
            "compute ms",
            "exp.comm ms",
            "copy ms",
            "host ms",
            "idle ms",
            "peak GiB",
            "% usable",
            "OOM",
            "source",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for g in &self.gpus {
            let t = |v: f64| {
                if self.oom {
                    "-".to_string()
                } else {
                    format!("{v:.1}")
                }
            };
            rows.push(vec![
                g.rank.to_string(),
                g.gpu.clone(),
                g.batch.to_string(),
                g.microbatches.to_string(),
                g.microbatch_size.to_string(),
                format!("{:.4}", g.state_fraction),
                t(g.compute_ms),
                t(g.exposed_comm_ms),
                t(g.copy_ms),
                t(g.host_ms),
                t(g.idle_ms),
                format!("{:.2}", g.peak_mem_gib),
                format!("{:.1}", g.usable_pct),
                if g.oom { "OOM".into() } else { "ok".into() },
                g.compute_source.split(' ').next().unwrap_or("").to_string(),
            ]);
        }
        if self.gpus.len() > GROUP_ROWS_ABOVE {
            rows = group_rows(rows);
        }
        // Text columns left-aligned, numbers right-aligned.
        write_aligned(&mut s, &rows, |c| c == 1 || c == 13 || c == 14);
        s.push('\n');
        s += &memory_table(self.gpus.iter().map(|g| (g.gpu.as_str(), &g.memory)));
        if self.hosts.iter().any(|h| h.peak_gib > 0.0) {
            let line = |h: &HostReport| {
                format!(
                    "peak {:.2} GiB of {:.2} GiB{}",
                    h.peak_gib,
                    h.capacity_gib,
                    if h.oom { "  OUT OF MEMORY" } else { "" }
                )
            };
            let mut i = 0;
            while i < self.hosts.len() {
                let h = &self.hosts[i];
                let mut j = i + 1;
                // Large clusters: consecutive hosts that read the same share a line.
                if self.hosts.len() > GROUP_ROWS_ABOVE {
                    while j < self.hosts.len() && line(&self.hosts[j]) == line(h) {
                        j += 1;
                    }
                }
                if j - i == 1 {
                    let _ = writeln!(s, "host {} ({}): {}", h.node, h.name, line(h));
                } else {
                    let last = &self.hosts[j - 1];
                    let _ = writeln!(
                        s,
                        "hosts {}-{} ({} .. {}, {} hosts): {}",
                        h.node,
                        last.node,
                        h.name,
                        last.name,
                        j - i,
                        line(h)
                    );
                }
                i = j;
            }
        }
        let coll: Vec<String> = self
            .collective_summary
            .iter()
            .map(|k| {
                format!(
                    "{} x {} ({:.2} GiB, {:.1} ms)",
                    k.count, k.kind, k.buffer_gib, k.time_ms
                )
            })
            .collect();
        if !coll.is_empty() {
            let _ = writeln!(s, "collectives per GPU: {}", coll.join(", "));
        }
        let worst = |f: fn(&GpuReport) -> f64| {
            self.gpus
                .iter()
                .map(|g| (f(g), g.rank))
                .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a })
        };
        let (inter, ir) = worst(|g| g.interference_ms);
        let (cont, cr) = worst(|g| g.contention_ms);
        if inter > 0.0 || cont > 0.0 {
            let _ = writeln!(
                s,
                "contention: compute slowed by collectives up to {inter:.1} ms (rank {ir}); transfers stretched by shared links up to {cont:.1} ms (rank {cr})"
            );
        }
        if self.oom {
            let _ = writeln!(
                s,
                "OUT OF MEMORY: this plan does not fit; no iteration time is reported."
            );
            for o in &self.oom_gpus {
                let _ = writeln!(
                    s,
                    "  rank {} ({}): peak {:.2} GiB > usable {:.2} GiB (capacity {:.2} GiB x {})",
                    o.rank, o.gpu, o.peak_mem_gib, o.usable_gib, o.capacity_gib, self.mem_fraction
                );
            }
            for h in &self.oom_hosts {
                let _ = writeln!(
                    s,
                    "  host of node {} ({}): peak {:.2} GiB > {:.2} GiB of host memory",
                    h.node, h.name, h.peak_gib, h.capacity_gib
                );
            }
        } else {
            let _ = writeln!(
                s,
                "iteration {:.1} ms | {} samples/s | {:.0} tokens/s | {:.2} TFLOPS | MFU {:.1}% | HFU {:.1}%",
                self.iteration_ms,
                // Three significant digits below 1 (a long run's 0.0034
                // samples/s is not 0.00), two decimals above.
                if self.samples_per_s > 0.0 && self.samples_per_s < 1.0 {
                    format!("{:.*}", (2 - self.samples_per_s.log10().floor() as i32).max(2) as usize, self.samples_per_s)
                } else {
                    format!("{:.2}", self.samples_per_s)
                },
                self.tokens_per_s,
                self.tflops,
                self.mfu * 100.0,
                self.hfu * 100.0
            );
            if let (Some(p), Some(c)) = (self.price_per_hour_usd, self.usd_per_million_tokens()) {
                let _ = writeln!(
                    s,
                    "cost ${p:.2}/h for the cluster | ${c:.3} per million tokens"
                );
            }
        }
        s.push_str(&sources_text(&self.sources()));
        s
    }
}

/// Where one GPU type's numbers came from (see [`Report::sources`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceLine {
    /// GPU type.
    pub gpu: String,
    /// GPUs of that type.
    pub count: usize,
    /// Block compute times: measured / imported (file and entry) or
    /// analytic (model, with its cross-validated error band).
    pub compute: String,
    /// Non-state memory.
    pub memory: String,
    /// Embedding, head and optimizer costs.
    pub units: String,
}

impl Report {
    /// Where the numbers of each GPU type came from, in rank order of
    /// first appearance.
    pub fn sources(&self) -> Vec<SourceLine> {
        let mut out: Vec<SourceLine> = Vec::new();
        for g in &self.gpus {
            match out.iter_mut().find(|x| x.gpu == g.gpu) {
                Some(x) => x.count += 1,
                None => out.push(SourceLine {
                    gpu: g.gpu.clone(),
                    count: 1,
                    compute: g.compute_source.clone(),
                    memory: g.memory_source.clone(),
                    units: g.unit_source.clone(),
                }),
            }
        }
        out
    }
}

/// Source lines as the tables print them: `sources:`, the compute of each
/// GPU type, then the memory once (non-state memory is one model per
/// workload, [`crate::cost::CostModel::act`]). Empty without lines.
pub fn sources_text(src: &[SourceLine]) -> String {
    let Some(first) = src.first() else {
        return String::new();
    };
    let mut s = String::from("sources:\n");
    for x in src {
        let _ = writeln!(s, "  {}x {}: compute {}", x.count, x.gpu, x.compute);
    }
    let _ = writeln!(s, "  memory: {}", first.memory);
    s
}

/// GPU (and host) count above which the table prints consecutive identical
/// rows once (`ranks 8-15`), so a 1,024-GPU report stays readable.
pub const GROUP_ROWS_ABOVE: usize = 32;

/// Merges consecutive table rows equal in every cell but the first (the
/// rank), whose cell becomes the range `a-b`; the header row stays.
pub fn group_rows(rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::with_capacity(rows.len());
    let mut first_rank = String::new();
    let mut last_rank = String::new();
    for (i, r) in rows.into_iter().enumerate() {
        let same = i > 1 && out.last().is_some_and(|p: &Vec<String>| p[1..] == r[1..]);
        if same {
            last_rank = r[0].clone();
            let cell = format!("{first_rank}-{last_rank}");
            if let Some(p) = out.last_mut() {
                p[0] = cell;
            }
        } else {
            first_rank = r[0].clone();
            last_rank.clone_from(&first_rank);
            out.push(r);
        }
    }
    out
}

/// Per-rank accumulators of the time breakdown, in ns.
#[derive(Debug, Clone, Default)]
pub(crate) struct RankTimes {
    pub(crate) compute: u64,
    pub(crate) exposed_comm: u64,
    pub(crate) copy: u64,
    pub(crate) host: u64,
    pub(crate) idle: u64,
    /// forward, recompute, backward, optimizer.
    pub(crate) by_kind: [u64; 4],
    pub(crate) comm_busy: u64,
    pub(crate) copy_busy: u64,
    pub(crate) host_busy: u64,
    pub(crate) interference: u64,
    pub(crate) contention: u64,
    pub(crate) finish: u64,
    prev_compute_end: u64,
    /// Pass of the previous compute op (`None`: none yet), and of the
    /// rank's latest-ending op.
    prev_compute_pass: Option<u32>,
    last_pass: Option<u32>,
    comm_iv: VecDeque<(u64, u64)>,
    copy_iv: VecDeque<(u64, u64)>,
    host_iv: VecDeque<(u64, u64)>,
}

/// Busy time of `iv` inside `[a, b)`.
fn overlap(iv: &VecDeque<(u64, u64)>, a: u64, b: u64) -> u64 {
    iv.iter()
        .map(|&(s, e)| e.min(b).saturating_sub(s.max(a)))
        .sum()
}

/// Whether `t` lies inside one of `iv`'s intervals.
fn covered(iv: &VecDeque<(u64, u64)>, t: u64) -> bool {
    iv.iter().any(|&(s, e)| s <= t && t < e)
}

/// Observer computing the per-GPU time breakdown (see the module docs).
#[derive(Debug)]
pub(crate) struct Breakdown<'g> {
    graph: &'g Graph,
    start_ns: Vec<u64>,
    end_ns: Vec<u64>,
    pub(crate) ranks: Vec<RankTimes>,
    /// Actual duration of every collective op (ns), by op.
    pub(crate) collective_ns: std::collections::HashMap<u32, u64>,
    /// The folded blocks of a reduced run ([`crate::fold::Unfold::blocks`])
    /// and, per block and rank, when the rank's first op of the block
    /// starts (ns; `None`: the rank has none): the window `[start, start +
    /// delta)` holds one period of its timeline.
    pub(crate) blocks: Vec<(crate::fold::Block, Vec<Option<u64>>)>,
}

impl<'g> Breakdown<'g> {
    pub(crate) fn new(graph: &'g Graph, ranks: usize) -> Breakdown<'g> {
        Breakdown {
            graph,
            start_ns: vec![0; graph.len()],
            end_ns: vec![0; graph.len()],
            ranks: vec![RankTimes::default(); ranks],
            collective_ns: std::collections::HashMap::new(),
            blocks: Vec::new(),
        }
    }

    /// Closes every rank's timeline at the iteration end (`makespan_ns`):
    /// the tail after its last compute op, by priority host, copy,
    /// communication, idle; then the barrier.
    pub(crate) fn finish(&mut self, makespan_ns: u64) {
        for (r_index, r) in self.ranks.iter_mut().enumerate() {
            let (a, f) = (r.prev_compute_end, r.finish.max(r.prev_compute_end));
            if f > a {
                let mut t = tail(r, a, f);
                let rank = r_index;
                for (b, starts) in &self.blocks {
                    if spans(b, r.prev_compute_pass, r.last_pass) {
                        let x = starts[rank].map_or([0, 0, 0, b.delta_ns], |w0| {
                            tail(r, w0, w0.saturating_add(b.delta_ns))
                        });
                        for (t, x) in t.iter_mut().zip(x) {
                            *t = t.saturating_add(x.saturating_mul(b.copies));
                        }
                    }
                }
                r.host += t[0];
                r.copy += t[1];
                r.exposed_comm += t[2];
                r.idle += t[3];
            }
            r.idle += makespan_ns.saturating_sub(f);
            r.prev_compute_end = makespan_ns;
        }
    }
}

/// Whether a rank's wait from an op of pass `from` to one of pass `to`
/// (`None`: the iteration's start) spans the folded block `b`.
fn spans(b: &crate::fold::Block, from: Option<u32>, to: Option<u32>) -> bool {
    from.is_none_or(|p| p < b.passes.start) && to.is_some_and(|p| p >= b.passes.end)
}

/// The span `[a, f)` of a rank's timeline after its last compute op, ns:
/// `[host, copy, communication, idle]` by that priority.
fn tail(r: &RankTimes, a: u64, f: u64) -> [u64; 4] {
    let mut out = [0u64; 4];
    // Sweep the breakpoints of the tail's intervals.
    let mut points: Vec<u64> = vec![a, f];
    for iv in [&r.host_iv, &r.copy_iv, &r.comm_iv] {
        for &(s, e) in iv {
            points.extend([s.clamp(a, f), e.clamp(a, f)]);
        }
    }
    points.sort_unstable();
    points.dedup();
    for w in points.windows(2) {
        let (x, y) = (w[0], w[1]);
        let d = y - x;
        let k = if covered(&r.host_iv, x) {
            0
        } else if covered(&r.copy_iv, x) {
            1
        } else if covered(&r.comm_iv, x) {
            2
        } else {
            3
        };
        out[k] += d;
    }
    out
}

impl Observer for Breakdown<'_> {
    fn on_op(&mut self, rec: &OpRecord<'_>) {
        self.on_op_weighted(rec, 1);
    }
}

impl Breakdown<'_> {
    /// Adds `rec` as `weight` executions of the op (a folded period's op
    /// stands for its copies, [`crate::fold`]): every time it adds counts
    /// `weight` times; its timeline (stall attribution, the rank's finish)
    /// is the reduced run's.
    pub(crate) fn on_op_weighted(&mut self, rec: &OpRecord<'_>, weight: u64) {
        let w = weight;
        let (s, e) = (rec.start.0, rec.end.0);
        self.end_ns[rec.op.0 as usize] = e;
        self.start_ns[rec.op.0 as usize] = s;
        if rec.label.category.is_collective() {
            self.collective_ns.entry(rec.op.0).or_insert(e - s);
        }
        let Some(r) = self.ranks.get_mut(rec.rank as usize) else {
            return;
        };
        if e >= r.finish {
            r.finish = e;
            r.last_pass = Some(rec.label.micro);
        }
        let stretch = (e - s).saturating_sub(rec.nominal.0);
        if rec.stream == Stream::Compute {
            r.interference += stretch.saturating_mul(w);
        } else {
            r.contention += stretch.saturating_mul(w);
        }
        match rec.stream {
            Stream::Comm | Stream::Reduce => {
                r.comm_busy += (e - s).saturating_mul(w);
                if e > s {
                    r.comm_iv.push_back((s, e));
                }
            }
            Stream::Copy => {
                r.copy_busy += (e - s).saturating_mul(w);
                if e > s {
                    r.copy_iv.push_back((s, e));
                }
            }
            Stream::Host => {
                r.host_busy += (e - s).saturating_mul(w);
                if e > s {
                    r.host_iv.push_back((s, e));
                }
            }
            Stream::Compute => {
                let a = r.prev_compute_end;
                if s > a {
                    let gap = s - a;
                    // The dependency that finished last decides what the gap was.
                    let mut last: Option<(u64, Category, usize)> = None;
                    for d in self.graph.op_deps(rec.op) {
                        let de = self.end_ns[d.0 as usize];
                        if last.is_none_or(|(t, _, _)| de > t) {
                            last = Some((de, self.graph.op_label(d).category, d.0 as usize));
                        }
                    }
                    let kind = last.map(|x| (x.1, x.2));
                    // Busy time of what the gap waited for inside [x, y).
                    let busy_in = |x: u64, y: u64| match kind {
                        Some((c, _)) if c.is_collective() => (overlap(&r.comm_iv, x, y), true),
                        // A pipeline transfer from another GPU: waiting while
                        // it runs is exposed communication, before it idle.
                        Some((Category::P2p, d)) => {
                            let (ds, de) = (self.start_ns[d].max(x), self.end_ns[d].min(y));
                            (de.saturating_sub(ds), true)
                        }
                        Some((Category::CopyD2H | Category::CopyH2D, _)) => {
                            (overlap(&r.copy_iv, x, y), false)
                        }
                        _ => (0, false),
                    };
                    let (busy, is_comm) = busy_in(a, s);
                    let mut busy = busy.min(gap);
                    let mut gap = gap;
                    // A wait through a folded block waits through its
                    // copies too.
                    for (b, starts) in &self.blocks {
                        if spans(b, r.prev_compute_pass, Some(rec.label.micro)) {
                            let len = b.delta_ns;
                            let x = starts[rec.rank as usize]
                                .map_or(0, |w0| busy_in(w0, w0.saturating_add(len)).0.min(len));
                            busy = busy.saturating_add(x.saturating_mul(b.copies));
                            gap = gap.saturating_add(len.saturating_mul(b.copies));
                        }
                    }
                    if is_comm {
                        r.exposed_comm += busy.saturating_mul(w);
                    } else {
                        r.copy += busy.saturating_mul(w);
                    }
                    r.idle += (gap - busy).saturating_mul(w);
                }
                let d = e - s;
                r.compute += d.saturating_mul(w);
                let k = match rec.label.category {
                    Category::Forward => 0,
                    Category::Recompute => 1,
                    Category::Backward => 2,
                    _ => 3,
                };
                r.by_kind[k] += d.saturating_mul(w);
                r.prev_compute_end = e;
                r.prev_compute_pass = Some(rec.label.micro);
                // Intervals ending before this op starts cannot overlap later gaps.
                for iv in [&mut r.comm_iv, &mut r.copy_iv, &mut r.host_iv] {
                    while iv.front().is_some_and(|&(_, x)| x <= s) {
                        iv.pop_front();
                    }
                }
            }
        }
    }
}

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
        let hw_flops = model_flops + recompute_flops;
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

/// Builds the report of a finished run: `stats` from the engine, the
/// breakdown and memory observers, the trace if recorded.
pub(crate) fn assemble(
    a: &Assembly<'_>,
    stats: &RunStats,
    breakdown: &Breakdown<'_>,
    memory: &MemoryTracker,
    trace: Option<Trace>,
) -> Report {
    use crate::cost::{
        OPTIMIZER_BYTES_PER_PARAM, UNIT_BANDWIDTH_EFFICIENCY, UNIT_COMPUTE_EFFICIENCY,
    };
    let costs = a.costs;
    let plan = a.plan;
    let ranks = costs.ranks();
    let w = &costs.workload;
    let dtype = w.dtype;
    let makespan = stats.makespan.0;
    let iteration_ms = makespan as f64 / 1e6;
    let rate = Rates::of(costs, iteration_ms, a.recompute_flops);
    let ns_ms = |ns: u64| ns as f64 / 1e6;
    let memory_source = costs.act.source().to_string();
    let strategy = plan.strategy;
    let mut gpus = Vec::with_capacity(ranks);
    let mut oom_gpus = Vec::new();
    for r in 0..ranks {
        // A rank not simulated has the timeline of its simulated twin.
        let q = a.classes.rep_rank[r];
        let t = &breakdown.ranks[q];
        let rp = &plan.gpus[r];
        let ty = costs.gpu_type(r);
        let peak_gib = memory.peak_bytes(q) as f64 / GIB;
        let capacity_gib = costs.capacity_gib(r);
        let usable_gib = costs.usable_gib(r);
        let oom = peak_gib > usable_gib;
        let memory_parts = MemoryBreakdown::new(
            memory.peak_bytes(q),
            a.base_device_bytes[r],
            (costs.options.overhead_gib * GIB + costs.activations.fixed_bytes).round() as i64,
            memory.peak_by_kind(q),
            usable_gib,
            capacity_gib,
        );
        if oom {
            oom_gpus.push(OomGpu {
                rank: r,
                gpu: ty.gpu.name.clone(),
                peak_mem_gib: peak_gib,
                usable_gib,
                capacity_gib,
            });
        }
        gpus.push(GpuReport {
            rank: r,
            gpu: ty.gpu.name.clone(),
            node: w.cluster.gpus[r].node,
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
            mem_pct: if capacity_gib > 0.0 { 100.0 * peak_gib / capacity_gib } else { 0.0 },
            usable_pct: if usable_gib > 0.0 { 100.0 * peak_gib / usable_gib } else { 0.0 },
            oom,
            memory: memory_parts,
            activation_scale: costs.activations.scale_at(rp.microbatch_size),
            compute_source: ty.curve_source(strategy.attention),
            memory_source: memory_source.clone(),
            unit_source: match &ty.units {
                Some(u) => u.source.to_string(),
                None => format!(
                    "estimated (roofline: embedding/head at {:.0}% of peak FLOPS, optimizer {} B/param at {:.0}% of HBM bandwidth)",
                    UNIT_COMPUTE_EFFICIENCY * 100.0,
                    OPTIMIZER_BYTES_PER_PARAM,
                    UNIT_BANDWIDTH_EFFICIENCY * 100.0
                ),
            },
        });
    }
    let mut hosts = Vec::new();
    for (n, node) in w.cluster.nodes.iter().enumerate() {
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
    let oom_hosts: Vec<HostReport> = hosts.iter().filter(|h| h.oom).cloned().collect();
    // Collectives as rank 0 sees them.
    let groups = strategy.groups(ranks);
    let in_view = |g: Group| match g {
        Group::Shard(k) => k == groups.group_of(0),
        Group::Replica(j) => j == groups.position(0),
    };
    // (count, buffer bytes, time in ns: integer, so that a folded run's
    // weighted sums are the whole iteration's to the ns).
    let mut stats_by: std::collections::BTreeMap<(String, u32), (u64, f64, u64)> =
        std::collections::BTreeMap::new();
    for c in a.collectives.iter().filter(|c| in_view(c.group)) {
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
    let collectives: Vec<CollectiveStat> = stats_by
        .iter()
        .map(|((kind, unit), &(count, bytes, ns))| CollectiveStat {
            kind: kind.clone(),
            unit: *unit,
            count: u32::try_from(count).unwrap_or(u32::MAX),
            buffer_bytes: bytes,
            time_ms: ns_ms(ns),
        })
        .collect();
    let mut collective_summary: Vec<KindSummary> = Vec::new();
    for k in ["all_gather", "reduce_scatter", "all_reduce"] {
        let v: Vec<&CollectiveStat> = collectives.iter().filter(|c| c.kind == k).collect();
        if !v.is_empty() {
            collective_summary.push(KindSummary {
                kind: k.to_string(),
                count: v.iter().map(|c| c.count).sum(),
                buffer_gib: v.iter().map(|c| c.buffer_bytes).sum::<f64>() / GIB,
                time_ms: v.iter().map(|c| c.time_ms).sum(),
            });
        }
    }
    let pipeline = plan
        .pipeline
        .as_ref()
        .map(|p| PipelineReport::of(p, &gpus, iteration_ms));
    Report {
        planner: plan.planner.clone(),
        model: w.model.name.clone(),
        cluster: w.cluster.name.clone(),
        dtype: dtype.to_string(),
        seq_len: w.seq_len,
        global_batch: w.global_batch,
        strategy,
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
        mem_fraction: costs.options.mem_fraction,
        overhead_gib: costs.options.overhead_gib,
        buffers_ref_gib: costs.activations.buffers_ref_bytes / GIB,
        act_fixed_gib: costs.activations.fixed_bytes / GIB,
        oom_gpus,
        oom_hosts,
        hosts,
        collective_summary,
        collectives,
        comm_model: costs.comm.describe(),
        gpus,
        warnings: costs.warnings.clone(),
        ops: stats.ops,
        events: stats.events,
        simulated_gpus: a.classes.simulated_ranks(),
        folded_passes: a.folding.map_or(0, |f| f.folded_passes),
        pipeline,
        trace,
    }
}
