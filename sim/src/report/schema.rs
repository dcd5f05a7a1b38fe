//! The report's types and their JSON and CSV forms (schema on [`Report`]).

use super::memory::MemoryBreakdown;
use crate::strategy::Strategy;
use crate::trace::Trace;
use serde::Serialize;
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
    /// `all_gather`, `reduce_scatter`, `all_reduce` or `all_to_all`.
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
    /// `all_gather`, `reduce_scatter`, `all_reduce` or `all_to_all`.
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

/// Collectives of one kind over groups of one shape whose times came from
/// one source (a measured table's provenance; reports have none with the
/// analytic model).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommSourceStat {
    /// `all_gather`, `reduce_scatter`, `all_reduce` or `all_to_all`.
    pub kind: String,
    /// Ranks in each group.
    pub group_ranks: u32,
    /// Nodes each group spans.
    pub group_nodes: u32,
    /// Where their times came from.
    pub source: crate::comm::CommSource,
    /// Collectives of the iteration (every group's).
    pub collectives: u64,
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
///   "mem_policy": "physical"|"fraction", "mem_fraction": num|null (the fraction
///   rule's), "overhead_gib": num (outside the allocator), "buffers_ref_gib": num, "act_fixed_gib": num,
///   "collective_summary": [{kind, count, buffer_gib, time_ms}],     -- per GPU and iteration
///   "collectives": [{kind, unit, count, buffer_bytes, time_ms}],    -- per unit, likewise
///   "comm_model": str,
///   "comm_sources": [{kind, group_ranks, group_nodes, source: "measured"|"extrapolated"|
///                     "rescaled"|"analytic", collectives}]
///                                                   -- present only with measured collectives
///   "gpus": [{rank, gpu, node, batch, microbatches, microbatch_size, state_fraction,
///             compute_ms, exposed_comm_ms, copy_ms, host_ms, idle_ms,   -- sum = iteration time
///             forward_ms, recompute_ms, backward_ms, optimizer_ms,       -- sum = compute_ms
///             comm_busy_ms, copy_busy_ms, host_busy_ms, interference_ms (part of compute_ms),
///             contention_ms (transfers' stretch from shared links), finish_ms,
///             peak_mem_gib, peak_at_ms, base_mem_gib, capacity_gib, usable_gib, mem_pct,
///             usable_pct, oom,
///             memory: {state_gib, overhead_gib, unsharded_params_gib, gradients_gib,
///                      activations_gib (the five sum to peak_gib), peak_gib,
///                      allocated_gib (peak less what lies outside the allocator),
///                      reserved_gib (allocator segments at that peak),
///                      policy_limit_gib, headroom_policy_gib, capacity_gib,
///                      headroom_capacity_gib, status: "fits"|"over-policy"|"over-capacity"},
///             activation_scale, compute_source, memory_source, unit_source}],
///   "pipeline": {schedule, microbatches, microbatch_size (the largest micro-batch,
///                before its split), bubble_pct, sequence_parallel, tp_comm_overlap,
///                overlap_grad_reduce, overlap_param_gather (each when on),
///                grad_sync ("after backward"|"buckets"|"per unit"|"data-parallel schedule"),
///                rank_order (when "tp-pp-dp"), expert_parallel (when > 1),
///                expert_tensor_parallel (when not the TP degree),
///                moe_dispatcher (when `allgather`),
///                routing (with EP: the routing assumed and the busiest rank's load),
///                stages: [{stage, first_block, last_block, blocks, chunks ([first,
///                          last] per model chunk, when more than one), ranks, tp (when > 1),
///                          tp_comm_ms (with TP), ep_comm_ms (with EP), gpus,
///                          compute_ms, exposed_comm_ms,
///                          idle_ms, peak_mem_gib, usable_gib,
///                          shares (per replica, when split unevenly)}]}
///                                                   -- pipeline and 3D plans only
///   "intervals": {median: {rel, iteration_ms: [lo, hi], samples_per_s: [lo, hi],
///                 tokens_per_s: [lo, hi]}, p90: {...}, basis: str}|null (null when oom;
///                 from the sources' expected errors, report::intervals),
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
    /// When a plan fits a GPU.
    pub mem_policy: crate::cost::MemPolicy,
    /// Memory outside the allocator per GPU (CUDA context, NCCL), GiB.
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
    /// With measured collectives: which of the plan's collectives (kind,
    /// group shape) were timed from measurements and which analytically.
    pub comm_sources: Vec<CommSourceStat>,
    /// Per-GPU details in rank order.
    pub gpus: Vec<GpuReport>,
    /// How sure the iteration time and throughput are: intervals from the
    /// expected errors of their sources.
    pub intervals: super::intervals::Intervals,
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
    /// Largest micro-batch, samples (before it is split over a stage's
    /// replicas).
    pub microbatch_size: u32,
    /// Idle share of the iteration over the GPUs that hold a stage, % (the
    /// bubble, plus waits for slower stages).
    pub bubble_pct: f64,
    /// Sequence parallelism in the TP groups.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sequence_parallel: bool,
    /// TP communication pipelined with the GEMMs (Megatron's
    /// `--tp-comm-overlap`, Transformer Engine's userbuffers).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tp_comm_overlap: bool,
    /// Gradients reduced bucket by bucket under the last backward
    /// (Megatron's `--overlap-grad-reduce`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub overlap_grad_reduce: bool,
    /// The distributed optimizer's all-gathers under the next forward
    /// (Megatron's `--overlap-param-gather`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub overlap_param_gather: bool,
    /// How each stage's data-parallel group reduces its gradients
    /// ([`crate::pipeline::buckets`]): `after backward`, `buckets`
    /// (Megatron's, under `--overlap-grad-reduce`) or `per unit` (FSDP2
    /// inside the stages), during the last micro-batch's backward for the
    /// last two; `data-parallel schedule` for a one-stage plan over every
    /// GPU without TP, lowered as the data-parallel plan it is.
    pub grad_sync: String,
    /// The rank order the stages follow when it is not Megatron's default
    /// (`tp-pp-dp`); absent for the default and for layouts of no order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_order: Option<String>,
    /// Expert parallelism (absent when 1): each MoE block's routed experts
    /// over this many replicas, tokens exchanged by all-to-all.
    #[serde(skip_serializing_if = "is_one")]
    pub expert_parallel: u32,
    /// GPUs each expert is split over when not the TP degree (1: whole
    /// experts); absent: expert-TP = TP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expert_tensor_parallel: Option<u32>,
    /// The token dispatcher when not all-to-all (`allgather`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe_dispatcher: Option<String>,
    /// With expert parallelism: the routing assumed (balanced top-k by
    /// default, a measured imbalance, or capacity padding) and the busiest
    /// EP rank's load it gives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<String>,
    /// Per stage, in order.
    pub stages: Vec<StageReport>,
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

/// One pipeline stage in a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageReport {
    /// Stage index.
    pub stage: usize,
    /// First block (1-based) it runs; the first stage also runs the
    /// embedding, the last the head.
    pub first_block: u32,
    /// Last block (1-based) it runs (with several model chunks, the blocks
    /// between belong to other stages' chunks too: see `chunks`).
    pub last_block: u32,
    /// Blocks it holds.
    pub blocks: u32,
    /// Its model chunks' first and last blocks, in order (absent for one
    /// chunk: the blocks `first_block` to `last_block`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<[u32; 2]>,
    /// Its ranks (TP groups of `tp` consecutive ones, then its
    /// data-parallel replicas).
    pub ranks: Vec<usize>,
    /// GPUs per TP group (absent when 1).
    #[serde(skip_serializing_if = "is_one")]
    pub tp: u32,
    /// Its TP groups' largest exposed TP communication (per-layer
    /// all-reduces, or with SP all-gathers and reduce-scatters), ms
    /// (absent without TP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tp_comm_ms: Option<f64>,
    /// Its replicas' largest expert-parallel exchanges on the critical
    /// path (dispatch and combine all-to-alls, expert-TP's gather and
    /// reduce-scatter, the wait for the EP group's slowest replica), ms
    /// (absent without expert parallelism).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ep_comm_ms: Option<f64>,
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
    /// Per replica, its samples of the largest micro-batch where the
    /// replicas split it unevenly (by speed); absent when even.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<u32>,
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
    mem_policy: &'static str,
    mem_fraction: Option<f64>,
    overhead_gib: f64,
    buffers_ref_gib: f64,
    act_fixed_gib: f64,
    collective_summary: &'a [KindSummary],
    collectives: &'a [CollectiveStat],
    comm_model: &'a str,
    #[serde(skip_serializing_if = "<[CommSourceStat]>::is_empty")]
    comm_sources: &'a [CommSourceStat],
    gpus: &'a [GpuReport],
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline: Option<&'a PipelineReport>,
    intervals: Option<&'a super::intervals::Intervals>,
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
            mem_policy: self.mem_policy.name(),
            mem_fraction: self.mem_policy.fraction(),
            overhead_gib: self.overhead_gib,
            buffers_ref_gib: self.buffers_ref_gib,
            act_fixed_gib: self.act_fixed_gib,
            collective_summary: &self.collective_summary,
            collectives: &self.collectives,
            comm_model: &self.comm_model,
            comm_sources: &self.comm_sources,
            gpus: &self.gpus,
            pipeline: self.pipeline.as_ref(),
            intervals: (!self.oom).then_some(&self.intervals),
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
            "rank,gpu,node,batch,microbatches,microbatch_size,state_fraction,compute_ms,exposed_comm_ms,copy_ms,host_ms,idle_ms,forward_ms,recompute_ms,backward_ms,optimizer_ms,interference_ms,contention_ms,finish_ms,peak_mem_gib,capacity_gib,usable_gib,mem_pct,usable_pct,oom,compute_source,memory_source,state_gib,overhead_gib,unsharded_params_gib,gradients_gib,activations_gib,allocated_gib,reserved_gib,headroom_policy_gib,headroom_capacity_gib,mem_status\n",
        );
        let q = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
        for g in &self.gpus {
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.3},{:.3},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{}",
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
                g.memory.allocated_gib,
                g.memory.reserved_gib,
                g.memory.headroom_policy_gib,
                g.memory.headroom_capacity_gib,
                g.memory.status
            );
        }
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
/// Summary of the simulated outcome of a plan (the `simulated` object of
/// `cephalo plan --format json`).
#[derive(Debug, Clone, Serialize)]
pub struct SimulatedSummary {
    /// Simulated iteration time, ms.
    pub iteration_ms: f64,
    /// Samples per second.
    pub samples_per_s: f64,
    /// Tokens per second.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation (0..1).
    pub mfu: f64,
    /// Whether some GPU runs out of memory.
    pub oom: bool,
    /// Peak memory per GPU, GiB.
    pub peak_mem_gib: Vec<f64>,
    /// Peak memory per GPU, % of capacity.
    pub peak_mem_pct: Vec<f64>,
    /// Peak memory per GPU, % of the usable memory (above 100 = OOM).
    pub peak_usable_pct: Vec<f64>,
    /// Usable memory per GPU (the memory policy's limit), GiB.
    pub usable_gib: Vec<f64>,
    /// Per GPU: what its peak holds, and its headroom to the policy limit
    /// and to the capacity.
    pub memory: Vec<MemoryBreakdown>,
    /// How sure the iteration time and throughput are (`null` when out of
    /// memory): intervals from the expected errors of their sources.
    pub intervals: Option<super::intervals::Intervals>,
}

impl SimulatedSummary {
    /// Extracts the summary of a report.
    pub fn of(r: &Report) -> SimulatedSummary {
        SimulatedSummary {
            iteration_ms: r.iteration_ms,
            samples_per_s: r.samples_per_s,
            tokens_per_s: r.tokens_per_s,
            mfu: r.mfu,
            oom: r.oom,
            peak_mem_gib: r.gpus.iter().map(|g| g.peak_mem_gib).collect(),
            memory: r.gpus.iter().map(|g| g.memory.clone()).collect(),
            peak_mem_pct: r.gpus.iter().map(|g| g.mem_pct).collect(),
            peak_usable_pct: r.gpus.iter().map(|g| g.usable_pct).collect(),
            usable_gib: r.gpus.iter().map(|g| g.usable_gib).collect(),
            intervals: (!r.oom).then(|| r.intervals.clone()),
        }
    }
}
