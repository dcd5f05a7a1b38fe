//! The rows a study writes: one per workload and planner (`results.csv`),
//! one per GPU of each run (`gpus.csv`), one per span of a recorded
//! timeline (`timeline.csv`). Plain data; the CSV columns are the fields.

use serde::{Deserialize, Serialize};

/// One row of results: a workload under one planner (the CSV columns).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    /// Workload index.
    pub case: usize,
    /// Planner index in the sweep.
    pub planner_index: usize,
    /// Cluster label.
    pub cluster: String,
    /// GPUs in the cluster.
    pub gpus: usize,
    /// GPU types, as runs (`2x l4, rtx-a6000, p40`).
    pub gpu_types: String,
    /// Model (canonical name).
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Compute format.
    pub dtype: String,
    /// Global batch, samples.
    pub global_batch: u32,
    /// Network bandwidth override, Gbit/s (empty: the cluster's).
    pub network_gbit_s: Option<f64>,
    /// Added GPU type (empty: none).
    pub add_gpu: String,
    /// Planner.
    pub planner: String,
    /// The plan (strategy, and a pipeline's shape).
    pub strategy: String,
    /// Whether the plan runs out of memory.
    pub oom: bool,
    /// Why there is no plan.
    pub error: String,
    /// Iteration, ms (empty without a plan).
    pub iteration_ms: Option<f64>,
    /// Samples/s (empty when out of memory or without a plan).
    pub samples_per_s: Option<f64>,
    /// Tokens/s.
    pub tokens_per_s: Option<f64>,
    /// Model FLOPS utilisation, fraction.
    pub mfu: Option<f64>,
    /// Largest peak memory, % of usable.
    pub peak_usable_pct: Option<f64>,
    /// Cluster price, USD per hour (when every GPU is priced).
    pub price_per_hour_usd: Option<f64>,
    /// USD per million tokens.
    pub usd_per_million_tokens: Option<f64>,
    /// samples/s over even FSDP's on the same workload.
    pub speedup_vs_fsdp: Option<f64>,
    /// samples/s per USD/h of the cluster.
    pub samples_per_s_per_usd_hour: Option<f64>,
    /// The planner's search: candidate plans it priced in closed form
    /// (deterministic, unlike its wall time).
    pub search_candidates: Option<u64>,
    /// The planner's search: plans it simulated or fast-evaluated.
    pub search_simulations: Option<u64>,
    /// Where the numbers came from: the compute per GPU type, then the
    /// memory (`memory: ...`), `;`-joined.
    pub sources: String,
    /// How sure the iteration time is: the relative half-width of its
    /// interval at the sources' median errors (fraction; empty when out
    /// of memory or without a plan). Figures draw it as bands / error bars.
    #[serde(default)]
    pub interval_rel: Option<f64>,
    /// The strategy pins of the case (`axis=value` pairs; empty: the
    /// planner chose every axis).
    #[serde(default)]
    pub pins: String,
    /// The memory policy: `physical` or the fraction of each GPU's memory.
    #[serde(default)]
    pub mem_policy: String,
    /// The 3D shape pins of the case (`name=value` pairs; empty: the
    /// planner chose the shape).
    #[serde(default)]
    pub shape: String,
    /// The collective algorithm (`auto`, `ring`, ...).
    #[serde(default)]
    pub comm_algo: String,
    /// The measured collective tables, as the sweep's `comm_profiles`
    /// entry names them (empty: the analytic model).
    #[serde(default)]
    pub comm_profile: String,
}

/// One GPU of one run (the per-GPU CSV).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuRow {
    /// Workload index.
    pub case: usize,
    /// Planner index.
    pub planner_index: usize,
    /// Planner.
    pub planner: String,
    /// Rank.
    pub rank: usize,
    /// GPU type.
    pub gpu: String,
    /// Forward and backward compute, ms.
    pub compute_ms: f64,
    /// Of which recompute, ms.
    pub recompute_ms: f64,
    /// Waiting for communication, ms.
    pub exposed_comm_ms: f64,
    /// Waiting for host copies, ms.
    pub copy_ms: f64,
    /// Host work waited for, ms.
    pub host_ms: f64,
    /// Idle, ms.
    pub idle_ms: f64,
    /// At the peak: the training-state shard, GiB.
    pub state_gib: f64,
    /// At the peak: framework overhead and fixed workspaces, GiB.
    pub overhead_gib: f64,
    /// At the peak: all-gathered parameters, GiB.
    pub unsharded_params_gib: f64,
    /// At the peak: unsharded gradient buffers, GiB.
    pub gradients_gib: f64,
    /// At the peak: activations and workspaces, GiB.
    pub activations_gib: f64,
    /// Peak memory (the sum of the five parts), GiB.
    pub peak_mem_gib: f64,
    /// Usable memory, GiB.
    pub usable_gib: f64,
}

/// One span of a recorded timeline (the timeline CSV).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpanRow {
    /// Workload index.
    pub case: usize,
    /// Planner index.
    pub planner_index: usize,
    /// Planner.
    pub planner: String,
    /// Rank.
    pub rank: u32,
    /// Lane label (`rank 0: l4 (node0)`).
    pub process: String,
    /// Stream (`compute`, `comm`, ...).
    pub stream: String,
    /// Activity (`forward`, `all_gather`, ...).
    pub category: String,
    /// Start, ms.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
}
