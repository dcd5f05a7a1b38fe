//! Experiments: a study one TOML file long (under `experiments/`), a sweep
//! over clusters x models x global batches x sequence lengths x dtypes x
//! network bandwidths x cluster sizes x added GPUs, every workload planned
//! and simulated by every planner named, the metric to report and the
//! figures to draw. This module holds the spec, its validation (before any
//! work), the sweep's expansion into cases, the run (in parallel over
//! workloads with rayon, results in case order, so every run gives the
//! same rows), the split into shards (`--shard K/N`: workloads `i` with
//! `i mod N = K - 1`) and their merge, and the report text. Reading files
//! and drawing figures are the caller's (`sim` does no I/O).
//!
//! ```toml
//! name = "paper-4gpu"
//! title = "Throughput on the paper's 4-GPU cluster"
//! description = "..."
//! profiles = "reference"          # reference measurements, or "calibrated"
//! memory_cluster = "paper"        # the reference memory profile's cluster
//! [sweep]
//! clusters = ["clusters/paper-4gpu.toml"]   # or gpus = ["l4,l4,a6000,p40"]
//! models = ["deepspeedgpt_2.7b"]
//! global_batches = [64]
//! planners = ["cephalo", "fsdp"]            # default: every planner
//! [[figure]]
//! kind = "bars"                   # bars | lines | time | memory | gantt
//! x = "model"
//! y = "samples_per_s"
//! ```
//!
//! Units: ms, samples/s, GiB, Gbit/s, USD.

use crate::cluster::Cluster;
use crate::dtype::Dtype;
use crate::error::SpecError;
use crate::gpu::GpuCatalog;
use crate::iteration::SimOptions;
use crate::model::ModelCatalog;
use crate::perfmodel::Predictor;
use crate::planner::{self, PlannerOptions};
use crate::profile::ProfileSet;
use crate::session::{build_workload, plan_and_simulate, WorkloadSpec};
use crate::simulate::simulate;
use crate::strategy::StrategySpec;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Which profiles an experiment runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfilesUse {
    /// The paper authors' measurements (`../shared/reference-profiles` or
    /// `--profiles`), the calibrated model for what they lack.
    Reference,
    /// The calibrated performance model only.
    Calibrated,
}

/// An experiment spec (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Name (results go to `results/NAME/`).
    pub name: String,
    /// One-line title.
    pub title: String,
    /// What the study asks, for the report.
    #[serde(default)]
    pub description: String,
    /// Which profiles it runs on.
    pub profiles: ProfilesUse,
    /// The reference memory profile's cluster (`paper`, `aws-16gpu`), with
    /// reference profiles only.
    #[serde(default)]
    pub memory_cluster: Option<String>,
    /// The sweep (empty for a study of measurements only).
    #[serde(default)]
    pub sweep: Sweep,
    /// Outputs of `cephalo validate --format json` (files relative to the
    /// experiments directory): predicted against measured, for
    /// `validation` figures.
    #[serde(default)]
    pub validations: Vec<String>,
    /// A throughput target (tokens/s): the report names the cheapest
    /// cluster of the sweep that reaches it, and its planner.
    #[serde(default)]
    pub target_tokens_per_s: Option<f64>,
    /// Where the study sits in the report (smaller first; ties by name).
    #[serde(default = "default_order")]
    pub order: u32,
    /// Figures to draw.
    #[serde(default, rename = "figure")]
    pub figures: Vec<FigureSpec>,
}

fn default_order() -> u32 {
    100
}

/// The axes of a sweep; every combination is one workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// Cluster files (relative to the experiments directory).
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Clusters as `--gpus` lists.
    #[serde(default)]
    pub gpus: Vec<String>,
    /// Models (catalog names or aliases).
    pub models: Vec<String>,
    /// Global batches, samples.
    #[serde(default)]
    pub global_batches: Vec<u32>,
    /// Samples per GPU instead (the global batch grows with the cluster).
    #[serde(default)]
    pub batch_per_gpu: Vec<u32>,
    /// Planners (default: every planner).
    #[serde(default)]
    pub planners: Vec<String>,
    /// Sequence lengths (default: each model's).
    #[serde(default)]
    pub seq_lens: Vec<u32>,
    /// Dtypes (default: fp16).
    #[serde(default)]
    pub dtypes: Vec<String>,
    /// Network bandwidths replacing the cluster's, Gbit/s (default: the cluster's).
    #[serde(default)]
    pub network_gbit_s: Vec<f64>,
    /// Copies of the cluster's nodes (default: 1).
    #[serde(default)]
    pub replicate: Vec<u32>,
    /// GPU types added as a one-GPU node each (`""`: none), for
    /// "which GPU should I add next?".
    #[serde(default)]
    pub add_gpu: Vec<String>,
    /// Record every run's timeline (for Gantt figures; slower).
    #[serde(default)]
    pub timeline: bool,
}

/// A figure of an experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FigureSpec {
    /// `bars` (grouped: x categories, a bar per series), `lines` (numeric
    /// x), `time` (per-GPU time stacked by activity), `memory` (per-GPU
    /// memory by component), `gantt` (one iteration's timeline).
    pub kind: String,
    /// The x axis: a sweep axis ([`AXES`]).
    #[serde(default = "default_x")]
    pub x: String,
    /// What one series is: a sweep axis (default `planner`).
    #[serde(default = "default_series")]
    pub series: String,
    /// The metric ([`METRICS`]).
    #[serde(default = "default_metric")]
    pub y: String,
    /// Log x / y axes (lines).
    #[serde(default)]
    pub log_x: bool,
    /// Log y axis (lines).
    #[serde(default)]
    pub log_y: bool,
    /// Only these planners (per-GPU and Gantt figures; default: all).
    #[serde(default)]
    pub planners: Vec<String>,
    /// Which workload (case index among the sweep's workloads) per-GPU and
    /// Gantt figures show (default 0).
    #[serde(default)]
    pub workload: usize,
    /// Caption (default: derived).
    #[serde(default)]
    pub title: String,
    /// File name without extension (default: `figN`).
    #[serde(default)]
    pub file: String,
}

fn default_x() -> String {
    "model".into()
}
fn default_series() -> String {
    "planner".into()
}
fn default_metric() -> String {
    "samples_per_s".into()
}

/// Sweep axes a figure may use.
pub const AXES: [&str; 9] = [
    "cluster",
    "model",
    "global_batch",
    "seq_len",
    "dtype",
    "network_gbit_s",
    "gpus",
    "add_gpu",
    "planner",
];

/// Metrics a figure may show, with their units.
pub const METRICS: [(&str, &str); 10] = [
    ("samples_per_s", "samples/s"),
    ("tokens_per_s", "tokens/s"),
    ("iteration_ms", "ms"),
    ("mfu", "fraction"),
    ("peak_usable_pct", "% of usable memory"),
    ("usd_per_million_tokens", "USD per million tokens"),
    ("speedup_vs_fsdp", "x over even FSDP"),
    ("samples_per_s_per_usd_hour", "samples/s per USD/h"),
    ("search_candidates", "candidate plans priced"),
    ("search_simulations", "plans simulated or fast-evaluated"),
];

/// Figure kinds.
pub const FIGURE_KINDS: [&str; 6] = ["bars", "lines", "time", "memory", "gantt", "validation"];

/// One predicted-against-measured pair of a `validate` run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationPoint {
    /// The run (its file).
    pub run: String,
    /// The strategy it ran.
    pub strategy: String,
    /// What is compared: `iteration`, or `compute rank N`.
    pub quantity: String,
    /// The simulator's value, ms.
    pub predicted_ms: f64,
    /// The measured value, ms.
    pub measured_ms: f64,
    /// Whether the run flagged its own measurement as disturbed (other
    /// load, a wide spread of iteration times).
    pub disturbed: bool,
}

impl ValidationPoint {
    /// The points of one `cephalo validate --format json` output (`run`
    /// names it): the iteration and every rank's compute time.
    pub fn from_json(text: &str, run: &str) -> Result<Vec<ValidationPoint>, SpecError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| SpecError::parse(run.to_string(), e))?;
        let num = |x: &serde_json::Value, f: &str| -> Result<f64, SpecError> {
            x.get(f).and_then(|y| y.as_f64()).ok_or_else(|| {
                SpecError::invalid(
                    run,
                    f,
                    "expected a number (a `cephalo validate --format json` output)",
                )
            })
        };
        let strategy = v
            .pointer("/plan/strategy")
            .map(|s| {
                serde_json::from_value::<crate::strategy::Strategy>(s.clone())
                    .map(|s| s.label())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let disturbed = v
            .get("measurement_disturbed")
            .and_then(|d| d.as_bool())
            .unwrap_or(false);
        let mut out = vec![ValidationPoint {
            run: run.to_string(),
            strategy: strategy.clone(),
            quantity: "iteration".into(),
            predicted_ms: num(&v, "predicted_iteration_ms")?,
            measured_ms: num(&v, "measured_iteration_ms")?,
            disturbed,
        }];
        let ranks = v
            .get("ranks")
            .and_then(|r| r.as_array())
            .ok_or_else(|| SpecError::invalid(run, "ranks", "expected the per-rank comparison"))?;
        for (i, r) in ranks.iter().enumerate() {
            let c = r.get("compute_ms").ok_or_else(|| {
                SpecError::invalid(run, format!("ranks[{i}].compute_ms"), "missing")
            })?;
            if let (Some(p), Some(m)) = (
                c.get("predicted").and_then(|x| x.as_f64()),
                c.get("measured").and_then(|x| x.as_f64()),
            ) {
                out.push(ValidationPoint {
                    run: run.to_string(),
                    strategy: strategy.clone(),
                    quantity: format!("compute rank {i}"),
                    predicted_ms: p,
                    measured_ms: m,
                    disturbed,
                });
            }
        }
        Ok(out)
    }
}

/// One workload of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Index among the sweep's workloads.
    pub index: usize,
    /// The cluster's label (file stem or `--gpus` list) and variant.
    pub cluster: String,
    /// Cluster text (TOML) or `--gpus` list, after the variant's edits.
    pub cluster_source: ClusterSource,
    /// Model as named in the spec.
    pub model: String,
    /// Global batch.
    pub global_batch: u32,
    /// Sequence length (`None`: the model's).
    pub seq_len: Option<u32>,
    /// Dtype.
    pub dtype: Dtype,
    /// Network bandwidth override, Gbit/s.
    pub network_gbit_s: Option<f64>,
    /// Copies of the cluster's nodes.
    pub replicate: u32,
    /// Added GPU type (`""`: none).
    pub add_gpu: String,
}

/// Where a workload's cluster comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterSource {
    /// A cluster TOML text (its origin for errors).
    Toml {
        /// File it came from.
        origin: String,
        /// The text, variant applied.
        text: String,
    },
    /// A `--gpus` list.
    Gpus(String),
}

/// A cluster file's text as the experiment's caller read it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterText {
    /// The name in the spec (`clusters/paper-4gpu.toml`).
    pub name: String,
    /// The file's text.
    pub text: String,
}

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
    /// Dtype.
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
    /// Where the compute numbers came from (per GPU type, `;`-joined).
    pub sources: String,
}

impl ResultRow {
    /// The value of metric `m` ([`METRICS`]).
    pub fn metric(&self, m: &str) -> Option<f64> {
        match m {
            "samples_per_s" => self.samples_per_s,
            "tokens_per_s" => self.tokens_per_s,
            "iteration_ms" => self.iteration_ms.filter(|_| !self.oom),
            "mfu" => self.mfu,
            "peak_usable_pct" => self.peak_usable_pct,
            "usd_per_million_tokens" => self.usd_per_million_tokens,
            "speedup_vs_fsdp" => self.speedup_vs_fsdp,
            "samples_per_s_per_usd_hour" => self.samples_per_s_per_usd_hour,
            "search_candidates" => self.search_candidates.map(|v| v as f64),
            "search_simulations" => self.search_simulations.map(|v| v as f64),
            _ => None,
        }
    }

    /// The value of sweep axis `a` ([`AXES`]) as text.
    pub fn axis(&self, a: &str) -> String {
        match a {
            "cluster" => self.cluster.clone(),
            "model" => self.model.clone(),
            "global_batch" => self.global_batch.to_string(),
            "seq_len" => self.seq_len.to_string(),
            "dtype" => self.dtype.clone(),
            "network_gbit_s" => self.network_gbit_s.map_or(String::new(), |x| x.to_string()),
            "gpus" => self.gpus.to_string(),
            "add_gpu" => {
                if self.add_gpu.is_empty() {
                    "(none)".into()
                } else {
                    self.add_gpu.clone()
                }
            }
            "planner" => self.planner.clone(),
            _ => String::new(),
        }
    }
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

/// What a run produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Results {
    /// One row per workload and planner, in (case, planner) order.
    pub rows: Vec<ResultRow>,
    /// One row per GPU of each run.
    pub gpus: Vec<GpuRow>,
    /// Timelines (when the sweep records them).
    pub spans: Vec<SpanRow>,
    /// Predicted against measured (studies with `validations`).
    pub validation: Vec<ValidationPoint>,
}

impl Results {
    /// The values of sweep axis `axis` over the rows of `planners` (all
    /// when empty), in first-seen order.
    pub fn axis_values(&self, axis: &str, planners: &[String]) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in self
            .rows
            .iter()
            .filter(|r| planners.is_empty() || planners.iter().any(|p| p == &r.planner))
        {
            let x = r.axis(axis);
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v
    }

    /// Joins shards' results into the order of one unsharded run.
    pub fn merge(parts: Vec<Results>) -> Results {
        let mut r = Results::default();
        for p in parts {
            r.rows.extend(p.rows);
            r.gpus.extend(p.gpus);
            r.spans.extend(p.spans);
            r.validation.extend(p.validation);
        }
        r.rows.sort_by_key(|x| (x.case, x.planner_index));
        r.gpus.sort_by_key(|x| (x.case, x.planner_index, x.rank));
        // Spans keep their order inside a run (stable sort).
        r.spans.sort_by_key(|x| (x.case, x.planner_index));
        r.rows.dedup_by_key(|x| (x.case, x.planner_index));
        r
    }
}

impl ExperimentSpec {
    /// Parses a spec (`origin` names the file for errors) and checks
    /// everything that does not need other files: planners, metrics,
    /// axes, figure kinds, models, GPU types, non-empty sweeps.
    pub fn from_toml(text: &str, origin: &str) -> Result<ExperimentSpec, SpecError> {
        let s: ExperimentSpec =
            toml::from_str(text).map_err(|e| SpecError::parse(origin.to_string(), e))?;
        s.check(origin)?;
        Ok(s)
    }

    fn check(&self, origin: &str) -> Result<(), SpecError> {
        let bad = |field: &str, msg: String| Err(SpecError::invalid(origin, field, msg));
        if self.name.trim().is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return bad(
                "name",
                format!(
                    "expected letters, digits, '-' or '_' (a directory name), got `{}`",
                    self.name
                ),
            );
        }
        let w = &self.sweep;
        let measured_only = !self.validations.is_empty() && *w == Sweep::default();
        if measured_only {
            return self.check_figures(origin);
        }
        if w.clusters.is_empty() && w.gpus.is_empty() {
            return bad(
                "sweep.clusters",
                "the sweep names no cluster (clusters or gpus)".into(),
            );
        }
        if w.models.is_empty() {
            return bad("sweep.models", "the sweep names no model".into());
        }
        if w.global_batches.is_empty() == w.batch_per_gpu.is_empty() {
            return bad(
                "sweep.global_batches",
                "the sweep needs global batches or batch_per_gpu (one of the two)".into(),
            );
        }
        for (i, &b) in w.batch_per_gpu.iter().enumerate() {
            if b == 0 || b > 1 << 16 {
                return bad(
                    &format!("sweep.batch_per_gpu[{i}]"),
                    format!("expected 1..=65536 samples per GPU, got {b}"),
                );
            }
        }
        for (i, m) in w.models.iter().enumerate() {
            ModelCatalog::builtin().lookup(m, &format!("{origin}: sweep.models[{i}]"))?;
        }
        for (i, &b) in w.global_batches.iter().enumerate() {
            if b == 0 || b > crate::limits::MAX_GLOBAL_BATCH {
                return bad(
                    &format!("sweep.global_batches[{i}]"),
                    format!(
                        "expected 1..={} samples, got {b}",
                        crate::limits::MAX_GLOBAL_BATCH
                    ),
                );
            }
        }
        for (i, p) in w.planners.iter().enumerate() {
            planner::registry::by_name(p, &format!("{origin}: sweep.planners[{i}]")).map_err(
                |e| SpecError::invalid(origin, format!("sweep.planners[{i}]"), e.to_string()),
            )?;
        }
        for (i, d) in w.dtypes.iter().enumerate() {
            if Dtype::parse(d).is_none() {
                return bad(
                    &format!("sweep.dtypes[{i}]"),
                    format!("expected fp16, bf16 or fp32, got `{d}`"),
                );
            }
        }
        for (i, &x) in w.network_gbit_s.iter().enumerate() {
            crate::physical::check(
                origin,
                &format!("sweep.network_gbit_s[{i}]"),
                x,
                &crate::physical::NET_GBIT_S,
            )?;
        }
        for (i, &k) in w.replicate.iter().enumerate() {
            if k == 0 || k > 4096 {
                return bad(
                    &format!("sweep.replicate[{i}]"),
                    format!("expected 1..=4096 copies, got {k}"),
                );
            }
        }
        for (i, g) in w.add_gpu.iter().enumerate() {
            if !g.is_empty() {
                GpuCatalog::builtin().lookup(g, &format!("{origin}: sweep.add_gpu[{i}]"))?;
            }
        }
        for (i, l) in w.gpus.iter().enumerate() {
            Cluster::from_gpu_list(
                l,
                &format!("{origin}: sweep.gpus[{i}]"),
                GpuCatalog::builtin(),
            )?;
        }
        if self.memory_cluster.is_some() && self.profiles != ProfilesUse::Reference {
            return bad(
                "memory_cluster",
                "a memory cluster names a reference memory profile: set profiles = \"reference\""
                    .into(),
            );
        }
        self.check_figures(origin)
    }

    fn check_figures(&self, origin: &str) -> Result<(), SpecError> {
        let bad = |field: &str, msg: String| Err(SpecError::invalid(origin, field, msg));
        let w = &self.sweep;
        for (i, f) in self.figures.iter().enumerate() {
            let at = |x: &str| format!("figure[{i}].{x}");
            if !FIGURE_KINDS.contains(&f.kind.as_str()) {
                return bad(
                    &at("kind"),
                    format!(
                        "expected one of {}, got `{}`",
                        FIGURE_KINDS.join(", "),
                        f.kind
                    ),
                );
            }
            if !AXES.contains(&f.x.as_str()) {
                return bad(
                    &at("x"),
                    format!("expected a sweep axis ({}), got `{}`", AXES.join(", "), f.x),
                );
            }
            if !AXES.contains(&f.series.as_str()) {
                return bad(
                    &at("series"),
                    format!(
                        "expected a sweep axis ({}), got `{}`",
                        AXES.join(", "),
                        f.series
                    ),
                );
            }
            if !METRICS.iter().any(|m| m.0 == f.y) {
                let names: Vec<&str> = METRICS.iter().map(|m| m.0).collect();
                return bad(
                    &at("y"),
                    format!("expected a metric ({}), got `{}`", names.join(", "), f.y),
                );
            }
            if f.kind == "validation" && self.validations.is_empty() {
                return bad(&at("kind"), "a validation figure needs `validations` (files of `cephalo validate --format json`)".into());
            }
            if f.kind == "gantt" && !w.timeline {
                return bad(
                    &at("kind"),
                    "a Gantt figure needs the sweep to record timelines (sweep.timeline = true)"
                        .into(),
                );
            }
            for (j, p) in f.planners.iter().enumerate() {
                planner::registry::by_name(p, "figure").map_err(|e| {
                    SpecError::invalid(origin, at(&format!("planners[{j}]")), e.to_string())
                })?;
            }
        }
        Ok(())
    }

    /// The planners of the sweep (canonical names), in order.
    pub fn planner_names(&self) -> Vec<String> {
        if self.sweep.planners.is_empty() {
            planner::registry::all()
                .iter()
                .map(|p| p.name().to_string())
                .collect()
        } else {
            self.sweep
                .planners
                .iter()
                .map(|p| {
                    planner::registry::by_name(p, "sweep")
                        .map(|x| x.name().to_string())
                        .unwrap_or_default()
                })
                .collect()
        }
    }

    /// The sweep's workloads in order: clusters (files, then lists) x
    /// replicate x added GPU x network x model x sequence length x dtype x
    /// global batch. `clusters` holds the text of every file the spec names.
    pub fn workloads(&self, clusters: &[ClusterText]) -> Result<Vec<Workload>, SpecError> {
        let w = &self.sweep;
        let one = |v: &[u32], d: u32| if v.is_empty() { vec![d] } else { v.to_vec() };
        let mut bases: Vec<(String, ClusterSource)> = Vec::new();
        for name in &w.clusters {
            let c = clusters.iter().find(|c| &c.name == name).ok_or_else(|| {
                SpecError::invalid(
                    "experiment",
                    "sweep.clusters",
                    format!("cluster file `{name}` was not read"),
                )
            })?;
            let stem = name
                .rsplit('/')
                .next()
                .unwrap_or(name)
                .trim_end_matches(".toml");
            bases.push((
                stem.to_string(),
                ClusterSource::Toml {
                    origin: name.clone(),
                    text: c.text.clone(),
                },
            ));
        }
        for l in &w.gpus {
            bases.push((l.clone(), ClusterSource::Gpus(l.clone())));
        }
        let nets: Vec<Option<f64>> = if w.network_gbit_s.is_empty() {
            vec![None]
        } else {
            w.network_gbit_s.iter().map(|&x| Some(x)).collect()
        };
        let adds: Vec<String> = if w.add_gpu.is_empty() {
            vec![String::new()]
        } else {
            w.add_gpu.clone()
        };
        let seqs: Vec<Option<u32>> = if w.seq_lens.is_empty() {
            vec![None]
        } else {
            w.seq_lens.iter().map(|&s| Some(s)).collect()
        };
        let dtypes: Vec<Dtype> = if w.dtypes.is_empty() {
            vec![Dtype::Fp16]
        } else {
            w.dtypes.iter().filter_map(|d| Dtype::parse(d)).collect()
        };
        let mut out = Vec::new();
        for (label, src) in &bases {
            for k in one(&w.replicate, 1) {
                for add in &adds {
                    for net in &nets {
                        let edited = variant(src, k, add, *net)?;
                        let gpus = match &edited {
                            ClusterSource::Toml { origin, text } => {
                                Cluster::from_toml(text, origin, GpuCatalog::builtin())?.len()
                            }
                            ClusterSource::Gpus(l) => {
                                Cluster::from_gpu_list(l, "--gpus", GpuCatalog::builtin())?.len()
                            }
                        };
                        let batches: Vec<u32> = if w.batch_per_gpu.is_empty() {
                            w.global_batches.clone()
                        } else {
                            w.batch_per_gpu
                                .iter()
                                .map(|&b| {
                                    (b as u64 * gpus as u64)
                                        .min(crate::limits::MAX_GLOBAL_BATCH as u64)
                                        as u32
                                })
                                .collect()
                        };
                        let mut name = label.clone();
                        if k > 1 {
                            name.push_str(&format!(" x{k}"));
                        }
                        if !add.is_empty() {
                            name.push_str(&format!(" +{add}"));
                        }
                        for m in &w.models {
                            for &seq in &seqs {
                                for &dtype in &dtypes {
                                    for &b in &batches {
                                        out.push(Workload {
                                            index: out.len(),
                                            cluster: name.clone(),
                                            cluster_source: edited.clone(),
                                            model: m.clone(),
                                            global_batch: b,
                                            seq_len: seq,
                                            dtype,
                                            network_gbit_s: *net,
                                            replicate: k,
                                            add_gpu: add.clone(),
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// A cluster with its nodes repeated `k` times, a one-GPU node of `add`
/// appended (unless empty) and the network set to `net` Gbit/s. A `--gpus`
/// list becomes the equivalent TOML first when it needs editing.
fn variant(
    src: &ClusterSource,
    k: u32,
    add: &str,
    net: Option<f64>,
) -> Result<ClusterSource, SpecError> {
    if k == 1 && add.is_empty() && net.is_none() {
        return Ok(src.clone());
    }
    let (origin, mut doc): (String, toml::Table) = match src {
        ClusterSource::Toml { origin, text } => (
            origin.clone(),
            toml::from_str(text).map_err(|e| SpecError::parse(origin.clone(), e))?,
        ),
        ClusterSource::Gpus(list) => {
            let mut t = toml::Table::new();
            let gpus: Vec<toml::Value> = crate::lists::items(list, "sweep.clusters")?
                .into_iter()
                .map(|g| {
                    let mut e = toml::Table::new();
                    e.insert("type".into(), toml::Value::String(g.trim().to_string()));
                    toml::Value::Table(e)
                })
                .collect();
            let mut node = toml::Table::new();
            node.insert("name".into(), toml::Value::String("node0".into()));
            node.insert("gpus".into(), toml::Value::Array(gpus));
            t.insert(
                "nodes".into(),
                toml::Value::Array(vec![toml::Value::Table(node)]),
            );
            (format!("--gpus {list}"), t)
        }
    };
    let nodes = doc
        .get("nodes")
        .and_then(|n| n.as_array())
        .cloned()
        .ok_or_else(|| SpecError::invalid(origin.clone(), "nodes", "expected [[nodes]] tables"))?;
    let mut all = Vec::with_capacity(nodes.len() * k as usize + 1);
    for copy in 0..k {
        for (i, n) in nodes.iter().enumerate() {
            let mut n = n.clone();
            if let Some(t) = n.as_table_mut() {
                let name = t
                    .get("name")
                    .and_then(|v| v.as_str())
                    .map_or(format!("node{i}"), str::to_string);
                let name = if k > 1 {
                    format!("{name}-{copy}")
                } else {
                    name
                };
                t.insert("name".into(), toml::Value::String(name));
            }
            all.push(n);
        }
    }
    if !add.is_empty() {
        let mut e = toml::Table::new();
        e.insert("type".into(), toml::Value::String(add.to_string()));
        let mut node = toml::Table::new();
        node.insert("name".into(), toml::Value::String(format!("added-{add}")));
        node.insert(
            "gpus".into(),
            toml::Value::Array(vec![toml::Value::Table(e)]),
        );
        all.push(toml::Value::Table(node));
    }
    doc.insert("nodes".into(), toml::Value::Array(all));
    if let Some(bw) = net {
        let net = doc
            .entry("network")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let Some(t) = net.as_table_mut() {
            t.insert("bw_gbit_s".into(), toml::Value::Float(bw));
        }
    }
    let text = toml::to_string(&doc)
        .map_err(|e| SpecError::invalid(origin.clone(), "<root>", e.to_string()))?;
    Ok(ClusterSource::Toml { origin, text })
}

/// Everything a run needs besides the spec.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The profiles (reference measurements or none).
    pub profiles: &'a ProfileSet,
    /// The calibrated model.
    pub predictor: &'a (dyn Predictor + Sync),
}

/// Builds a workload's cluster.
pub fn cluster_of(w: &Workload) -> Result<Cluster, SpecError> {
    match &w.cluster_source {
        ClusterSource::Toml { origin, text } => {
            Cluster::from_toml(text, origin, GpuCatalog::builtin())
        }
        ClusterSource::Gpus(l) => Cluster::from_gpu_list(l, "--gpus", GpuCatalog::builtin()),
    }
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
    let parts: Vec<Result<Results, SpecError>> = picked
        .par_iter()
        .map(|w| {
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

/// Every planner on one workload.
fn run_one(
    spec: &ExperimentSpec,
    w: &Workload,
    planners: &[String],
    inputs: Inputs<'_>,
) -> Result<Results, SpecError> {
    let cluster = cluster_of(w)?;
    let options = crate::cost::CostOptions {
        memory_cluster: spec.memory_cluster.clone(),
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
    let costs = build_workload(&ws, inputs.profiles, inputs.predictor).map_err(|e| {
        SpecError::invalid(
            "experiment",
            format!(
                "workload {} ({} / {} / batch {})",
                w.index, w.cluster, w.model, w.global_batch
            ),
            e.to_string(),
        )
    })?;
    let popts = PlannerOptions {
        model_key: Some(w.model.clone()),
        ..PlannerOptions::default()
    };
    let mut out = Results::default();
    let names = costs.workload.cluster.gpu_names();
    for (pi, name) in planners.iter().enumerate() {
        let pl = planner::registry::by_name(name, "sweep.planners")
            .map_err(|e| SpecError::invalid("experiment", "sweep.planners", e.to_string()))?;
        let mut row = ResultRow {
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
            planner: pl.name().to_string(),
            ..ResultRow::default()
        };
        match plan_and_simulate(
            &costs,
            inputs.profiles,
            pl.as_ref(),
            &popts,
            &StrategySpec::NONE,
        ) {
            Ok(r) => {
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
                row.samples_per_s_per_usd_hour = match (fits, rep.price_per_hour_usd) {
                    (true, Some(p)) if p > 0.0 => Some(rep.samples_per_s / p),
                    _ => None,
                };
                row.sources = rep
                    .sources()
                    .iter()
                    .map(|s| format!("{}x {}: {}", s.count, s.gpu, s.compute))
                    .collect::<Vec<_>>()
                    .join("; ");
                for g in &rep.gpus {
                    out.gpus.push(GpuRow {
                        case: w.index,
                        planner_index: pi,
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
                    });
                }
                if spec.sweep.timeline {
                    let opts = SimOptions {
                        trace: true,
                        ..SimOptions::default()
                    };
                    let traced = simulate(&costs, &r.planned.plan, &opts)
                        .map_err(|e| SpecError::invalid("experiment", "timeline", e.to_string()))?;
                    if let Some(t) = traced.trace {
                        for e in &t.events {
                            if e.rank as usize >= t.gpu_processes || e.end_ns <= e.start_ns {
                                continue;
                            }
                            let idle = e.name == u32::MAX;
                            out.spans.push(SpanRow {
                                case: w.index,
                                planner_index: pi,
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
                    }
                }
            }
            Err(e) => row.error = e.to_string(),
        }
        out.rows.push(row);
    }
    // Speed-ups against even FSDP on the same workload.
    let fsdp = out
        .rows
        .iter()
        .find(|r| r.planner == "fsdp")
        .and_then(|r| r.samples_per_s);
    for r in &mut out.rows {
        r.speedup_vs_fsdp = match (r.samples_per_s, fsdp) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
    }
    Ok(out)
}

/// A figure as the report embeds it.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureRef {
    /// Path relative to the report (`NAME/fig1.png`).
    pub path: String,
    /// Caption.
    pub caption: String,
    /// Its spec.
    pub spec: FigureSpec,
}

/// The data-parallel baselines (the paper's comparison family).
pub const DATA_PARALLEL_BASELINES: [&str; 7] = [
    "fsdp",
    "fsdp-ga",
    "zero2",
    "ddp",
    "hsdp",
    "speed-proportional",
    "speed-proportional-mem",
];

/// Cephalo's speed-up over every planner `against` accepts that fits, over
/// the rows of `results`: (smallest, largest, the pair behind each as text).
pub fn speedup_range(
    results: &[&Results],
    against: &dyn Fn(&str) -> bool,
) -> Option<(f64, f64, String, String)> {
    let mut best: Option<(f64, f64, String, String)> = None;
    for res in results {
        for ours in res.rows.iter().filter(|r| r.planner == "cephalo") {
            let Some(a) = ours.samples_per_s else {
                continue;
            };
            for other in res
                .rows
                .iter()
                .filter(|r| r.case == ours.case && against(&r.planner))
            {
                let Some(b) = other.samples_per_s.filter(|&b| b > 0.0) else {
                    continue;
                };
                let x = a / b;
                let what = format!(
                    "{} on {} (batch {}) against {}",
                    ours.model, ours.cluster, ours.global_batch, other.planner
                );
                best = Some(match best {
                    None => (x, x, what.clone(), what),
                    Some((lo, hi, wl, wh)) => {
                        let (lo, wl) = if x < lo { (x, what.clone()) } else { (lo, wl) };
                        let (hi, wh) = if x > hi { (x, what) } else { (hi, wh) };
                        (lo, hi, wl, wh)
                    }
                });
            }
        }
    }
    best
}

/// The report section of one experiment: title, what it asks, which
/// profiles it ran on, every figure with a paragraph of its key numbers.
pub fn report_section(
    spec: &ExperimentSpec,
    results: &Results,
    figures: &[FigureRef],
    profiles_used: &str,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "## {}\n", spec.title);
    if !spec.description.is_empty() {
        let _ = writeln!(s, "{}\n", spec.description.trim());
    }
    let workloads = results
        .rows
        .iter()
        .map(|r| r.case)
        .max()
        .map_or(0, |c| c + 1);
    if workloads == 0 {
        let runs: std::collections::BTreeSet<&str> =
            results.validation.iter().map(|p| p.run.as_str()).collect();
        let _ = writeln!(
            s,
            "Experiment `{}`: {} measured runs (`validations`); each prediction uses the profile its `validate` run measured on the spot. Data: `{}/validation.csv`.\n",
            spec.name,
            runs.len(),
            spec.name
        );
    } else {
        let _ = writeln!(
            s,
            "Experiment `{}`: {} workloads x {} planners, profiles: {profiles_used}. Data: `{}/results.csv` (per GPU: `gpus.csv`).\n",
            spec.name,
            workloads,
            spec.planner_names().len(),
            spec.name
        );
    }
    for f in figures {
        let _ = writeln!(s, "![{}]({})\n", f.caption, f.path);
        let _ = writeln!(s, "*{}.* {}\n", f.caption, paragraph(&f.spec, results));
    }
    let dp = |p: &str| DATA_PARALLEL_BASELINES.contains(&p);
    let pp = |p: &str| p.starts_with("pipeline");
    for (what, f) in [
        ("data-parallel baselines", &dp as &dyn Fn(&str) -> bool),
        ("pipelines", &pp),
    ] {
        if let Some((lo, hi, wl, wh)) = speedup_range(&[results], f) {
            let _ = writeln!(
                s,
                "Cephalo's speed-up over the {what} that fit here: {lo:.2}x ({wl}) to {hi:.2}x ({wh}).\n"
            );
        }
    }
    if results.rows.iter().any(|r| r.price_per_hour_usd.is_some()) {
        let _ = writeln!(
            s,
            "Prices: USD per GPU-hour from the cluster spec (`price_per_hour_usd` per GPU entry) where it gives one, else the GPU catalog's approximate public on-demand price (2024 list prices, us-east, instance price / GPUs per instance; `profiles/gpus.toml`).\n"
        );
    }
    if let Some(target) = spec.target_tokens_per_s {
        let best = results
            .rows
            .iter()
            .filter(|r| r.tokens_per_s.is_some_and(|t| t >= target))
            .filter_map(|r| Some((r.price_per_hour_usd?, r)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let _ = match best {
            Some((p, r)) => writeln!(
                s,
                "Cheapest cluster of this sweep reaching {target:.0} tokens/s: {} ({} GPUs) at ${p:.2}/h under {}, {:.0} tokens/s, ${:.3} per million tokens.\n",
                r.cluster,
                r.gpus,
                r.planner,
                r.tokens_per_s.unwrap_or(0.0),
                r.usd_per_million_tokens.unwrap_or(0.0)
            ),
            None => writeln!(s, "No cluster of this sweep reaches {target:.0} tokens/s.\n"),
        };
    }
    let errors: Vec<&ResultRow> = results
        .rows
        .iter()
        .filter(|r| !r.error.is_empty())
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(s, "No plan ({}):\n", errors.len());
        for r in errors.iter().take(8) {
            let _ = writeln!(
                s,
                "- {} / {} / batch {} / {}: {}",
                r.cluster, r.model, r.global_batch, r.planner, r.error
            );
        }
        if errors.len() > 8 {
            let _ = writeln!(s, "- ... and {} more (see results.csv)", errors.len() - 8);
        }
        s.push('\n');
    }
    s
}

/// The key numbers of one figure, in words.
fn paragraph(f: &FigureSpec, results: &Results) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let keep = |p: &str| f.planners.is_empty() || f.planners.iter().any(|x| x == p);
    match f.kind.as_str() {
        "bars" | "lines" => {
            let xs = results.axis_values(&f.x, &f.planners);
            let lower_is_better = matches!(
                f.y.as_str(),
                "iteration_ms" | "usd_per_million_tokens" | "peak_usable_pct"
            );
            let mut parts = Vec::new();
            for x in &xs {
                let mut cands: Vec<(&ResultRow, f64)> = results
                    .rows
                    .iter()
                    .filter(|r| keep(&r.planner) && &r.axis(&f.x) == x)
                    .filter_map(|r| Some((r, r.metric(&f.y)?)))
                    .collect();
                cands.sort_by(|a, b| {
                    if lower_is_better {
                        a.1.total_cmp(&b.1)
                    } else {
                        b.1.total_cmp(&a.1)
                    }
                });
                match cands.first() {
                    Some((r, v)) => {
                        let second = cands.get(1).map_or(String::new(), |(r2, v2)| {
                            format!(", then {} {}", r2.axis(&f.series), fmt_num(*v2))
                        });
                        parts.push(format!(
                            "{} {}: {} {}{second}",
                            f.x.replace('_', " "),
                            x,
                            r.axis(&f.series),
                            fmt_num(*v)
                        ));
                    }
                    None => parts.push(format!("{} {}: nothing fits", f.x.replace('_', " "), x)),
                }
            }
            let _ = write!(
                s,
                "Best {} ({}) per {}: {}.",
                f.y.replace('_', " "),
                if lower_is_better { "lowest" } else { "highest" },
                f.x.replace('_', " "),
                parts.join("; ")
            );
        }
        "time" | "memory" => {
            let mut parts = Vec::new();
            let mut planners: Vec<&str> = Vec::new();
            for g in results
                .gpus
                .iter()
                .filter(|g| g.case == f.workload && keep(&g.planner))
            {
                if !planners.contains(&g.planner.as_str()) {
                    planners.push(&g.planner);
                }
            }
            for p in planners {
                let gs: Vec<&GpuRow> = results
                    .gpus
                    .iter()
                    .filter(|g| g.case == f.workload && g.planner == p)
                    .collect();
                if f.kind == "time" {
                    let total: f64 = gs
                        .iter()
                        .map(|g| {
                            g.compute_ms + g.exposed_comm_ms + g.copy_ms + g.host_ms + g.idle_ms
                        })
                        .sum();
                    let wait: f64 = gs
                        .iter()
                        .map(|g| g.exposed_comm_ms + g.idle_ms + g.copy_ms)
                        .sum();
                    let rec: f64 = gs.iter().map(|g| g.recompute_ms).sum();
                    parts.push(format!(
                        "{p}: {:.0}% of the GPUs' time waiting, {:.0}% recomputing",
                        100.0 * wait / total.max(1e-9),
                        100.0 * rec / total.max(1e-9)
                    ));
                } else {
                    let worst = gs
                        .iter()
                        .map(|g| (g.peak_mem_gib / g.usable_gib.max(1e-9), g))
                        .fold(None::<(f64, &GpuRow)>, |a, b| match a {
                            Some(x) if x.0 >= b.0 => Some(x),
                            _ => Some((b.0, b.1)),
                        });
                    if let Some((u, g)) = worst {
                        parts.push(format!(
                            "{p}: fullest GPU rank {} ({}) at {:.0}% of usable: {:.1} GiB state shard, {:.1} overhead, {:.1} gathered parameters, {:.1} gradient buffers, {:.1} activations",
                            g.rank,
                            g.gpu,
                            100.0 * u,
                            g.state_gib,
                            g.overhead_gib,
                            g.unsharded_params_gib,
                            g.gradients_gib,
                            g.activations_gib
                        ));
                    }
                }
            }
            let _ = write!(s, "{}.", parts.join("; "));
        }
        "validation" => {
            let errs: Vec<(f64, &ValidationPoint)> = results
                .validation
                .iter()
                .filter(|p| p.measured_ms > 0.0)
                .map(|p| ((p.predicted_ms - p.measured_ms) / p.measured_ms, p))
                .collect();
            let its: Vec<f64> = errs
                .iter()
                .filter(|e| e.1.quantity == "iteration")
                .map(|e| e.0)
                .collect();
            let worst = errs.iter().max_by(|a, b| a.0.abs().total_cmp(&b.0.abs()));
            let mut abs: Vec<f64> = its.iter().map(|e| e.abs()).collect();
            abs.sort_by(f64::total_cmp);
            let med = match abs.len() {
                0 => None,
                n if n % 2 == 1 => Some(abs[n / 2]),
                n => Some((abs[n / 2 - 1] + abs[n / 2]) / 2.0),
            };
            if let (Some(med), Some((w, p))) = (med, worst) {
                let _ = write!(
                    s,
                    "{} runs: iteration predicted within {:.1}% median ({}); the largest error of any point is {:+.1}% ({} of {}, {}).",
                    its.len(),
                    100.0 * med,
                    its.iter().map(|e| format!("{:+.1}%", 100.0 * e)).collect::<Vec<_>>().join(", "),
                    100.0 * w,
                    p.quantity,
                    p.run,
                    if p.disturbed { "a run that flagged its own measurement as disturbed" } else { "an undisturbed run" }
                );
            }
        }
        "gantt" => {
            let mut parts = Vec::new();
            let mut planners: Vec<&str> = Vec::new();
            for sp in results
                .spans
                .iter()
                .filter(|x| x.case == f.workload && keep(&x.planner))
            {
                if !planners.contains(&sp.planner.as_str()) {
                    planners.push(&sp.planner);
                }
            }
            for p in planners {
                let end = results
                    .rows
                    .iter()
                    .find(|r| r.case == f.workload && r.planner == p)
                    .and_then(|r| r.iteration_ms)
                    .unwrap_or(0.0);
                let idle: f64 = results
                    .spans
                    .iter()
                    .filter(|x| x.case == f.workload && x.planner == p && x.category == "idle")
                    .map(|x| x.end_ms - x.start_ms)
                    .sum();
                let gpus = results
                    .gpus
                    .iter()
                    .filter(|g| g.case == f.workload && g.planner == p)
                    .count()
                    .max(1);
                parts.push(format!(
                    "{p}: iteration {end:.0} ms, compute streams waiting {:.0}% of it",
                    100.0 * idle / (end * gpus as f64).max(1e-9)
                ));
            }
            let _ = write!(s, "{}.", parts.join("; "));
        }
        _ => {}
    }
    s
}

/// A number with 3 significant digits.
fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
name = "t"
title = "t"
profiles = "calibrated"
[sweep]
gpus = ["a100-80gb,l4"]
models = ["gpt-1.3b", "llama2-7b"]
global_batches = [8, 16]
replicate = [1, 3]
add_gpu = ["", "t4"]
network_gbit_s = [10, 100]
"#;

    #[test]
    fn the_sweep_expands_in_order_with_its_variants() {
        let s = ExperimentSpec::from_toml(SPEC, "t.toml").unwrap();
        let w = s.workloads(&[]).unwrap();
        assert_eq!(w.len(), 2 * 2 * 2 * 2 * 2);
        assert!(w.iter().enumerate().all(|(i, x)| x.index == i));
        // Batches vary fastest, then models; the cluster variant slowest.
        assert_eq!((w[0].global_batch, w[1].global_batch), (8, 16));
        assert_eq!(w[2].model, "llama2-7b");
        let sizes: Vec<usize> = w.iter().map(|x| cluster_of(x).unwrap().len()).collect();
        assert_eq!(sizes[0], 2);
        let plus_t4 = w.iter().position(|x| x.add_gpu == "t4").unwrap();
        assert_eq!(sizes[plus_t4], 3);
        let tripled = w
            .iter()
            .position(|x| x.replicate == 3 && x.add_gpu.is_empty())
            .unwrap();
        assert_eq!(sizes[tripled], 6);
        let c = cluster_of(&w[tripled]).unwrap();
        assert_eq!(c.nodes.len(), 3, "each copy of the node is a node");
    }

    #[test]
    fn batch_per_gpu_grows_with_the_cluster() {
        let text = SPEC.replace("global_batches = [8, 16]", "batch_per_gpu = [4]");
        let s = ExperimentSpec::from_toml(&text, "t.toml").unwrap();
        for w in s.workloads(&[]).unwrap() {
            assert_eq!(w.global_batch as usize, 4 * cluster_of(&w).unwrap().len());
        }
        let both = SPEC.replace(
            "global_batches = [8, 16]",
            "global_batches = [8]\nbatch_per_gpu = [4]",
        );
        assert!(ExperimentSpec::from_toml(&both, "t.toml").is_err());
    }

    #[test]
    fn merge_orders_rows_as_one_run() {
        let row = |case, planner_index| ResultRow {
            case,
            planner_index,
            ..ResultRow::default()
        };
        let a = Results {
            rows: vec![row(1, 0), row(1, 1), row(3, 0)],
            ..Results::default()
        };
        let b = Results {
            rows: vec![row(0, 1), row(0, 0), row(2, 0)],
            ..Results::default()
        };
        let m = Results::merge(vec![a, b]);
        let keys: Vec<(usize, usize)> = m.rows.iter().map(|r| (r.case, r.planner_index)).collect();
        assert_eq!(keys, vec![(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (3, 0)]);
    }
}
