//! What every export target implements ([`Target`]) and what it renders
//! from ([`Exported`]: the config's shape, the notes, both simulations),
//! with the comment and quoting helpers the config writers share. Units:
//! samples, ms, tokens/s, GiB.

use crate::plan::pipeline::Pipeline;
use crate::plan::Plan;
use crate::report::Report;
use crate::strategy::{Accumulation, Sharding, Strategy};
use serde::Serialize;

/// A framework a plan can be exported to.
pub trait Target: Sync {
    /// Its name on the command line (`torchtitan`).
    fn name(&self) -> &'static str;
    /// The file it writes, in words (`job-config TOML`).
    fn file_kind(&self) -> &'static str;
    /// How it accumulates gradients over micro-batches, in the simulator's
    /// terms, for a plan under `sharding`.
    fn accumulation(&self, sharding: Sharding) -> Accumulation;
    /// The strategy it runs for `s` (what it cannot express replaced by its
    /// nearest), with a note per replacement.
    fn strategy(&self, s: &Strategy) -> (Strategy, Vec<String>);
    /// Whether it can run pipeline plans (from its config or its API).
    fn pipelines(&self) -> bool;
    /// The pipeline it runs for `p` (its schedules only), with a note per
    /// change.
    fn pipeline(&self, _p: &mut Pipeline) -> Vec<String> {
        Vec::new()
    }
    /// How it builds the experts of `m` (model `model`) over `ep`
    /// expert-parallel ranks: the start of a note that [`super::export`]
    /// ends with what the simulation assumed (capacity, expert
    /// parallelism).
    fn experts(&self, m: &crate::experts::Moe, model: &str, ep: u32) -> String;
    /// The config text of `e.shape`, with `e`'s notes and figures as
    /// comments (or, for JSON, a `_cephalo` object).
    fn render(&self, e: &Exported) -> String;
}

/// The degrees and batch sizes a framework config carries (of the plan the
/// framework runs, [`Exported::approximation`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shape {
    /// GPUs (ranks).
    pub world: u32,
    /// Nodes.
    pub nodes: u32,
    /// Data-parallel replicas (1 under full sharding).
    pub dp_replicate: u32,
    /// Data-parallel shard degree (1 without sharding).
    pub dp_shard: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline stages.
    pub pp: u32,
    /// Micro-batch size per data-parallel rank, samples.
    pub micro_batch: u32,
    /// Gradient-accumulation steps (pipelines: micro-batches per iteration).
    pub accumulation_steps: u32,
    /// Global batch the config states, samples: a multiple of
    /// `micro_batch x accumulation_steps x dp` (the plan's own when it is
    /// one; see [`Shape::global_batch_exact`]).
    pub global_batch: u32,
    /// Whether `global_batch` is the workload's global batch.
    pub global_batch_exact: bool,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Expert-parallel degree (1: none).
    pub ep: u32,
    /// GPUs each expert is split over (expert-TP: the TP degree or 1).
    pub etp: u32,
}

impl Shape {
    /// Data-parallel degree: replicas x shards.
    pub fn dp(&self) -> u32 {
        self.dp_replicate * self.dp_shard
    }
}

/// A simulated plan's headline figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Iteration time, ms.
    pub iteration_ms: f64,
    /// Tokens per second, all GPUs.
    pub tokens_per_s: f64,
    /// Samples per second, all GPUs.
    pub samples_per_s: f64,
    /// Model FLOPs utilisation (0..1).
    pub mfu: f64,
    /// Largest peak memory of any GPU, GiB.
    pub max_peak_mem_gib: f64,
    /// Whether some GPU runs out of memory.
    pub oom: bool,
    /// The GPUs out of memory, one line each (rank, type, peak and usable GiB).
    pub oom_gpus: Vec<String>,
}

impl Figures {
    /// The figures of a report.
    pub fn of(r: &Report) -> Figures {
        Figures {
            iteration_ms: r.iteration_ms,
            tokens_per_s: r.tokens_per_s,
            samples_per_s: r.samples_per_s,
            mfu: r.mfu,
            max_peak_mem_gib: r.gpus.iter().map(|g| g.peak_mem_gib).fold(0.0, f64::max),
            oom: r.oom,
            oom_gpus: r
                .oom_gpus
                .iter()
                .map(|o| {
                    format!(
                        "rank {} ({}): peak {:.2} GiB > usable {:.2} GiB",
                        o.rank, o.gpu, o.peak_mem_gib, o.usable_gib
                    )
                })
                .collect(),
        }
    }

    /// One line: `1234.5 ms, 5678 tokens/s` or the out-of-memory verdict.
    pub fn line(&self) -> String {
        if self.oom {
            format!(
                "runs out of memory ({})",
                self.oom_gpus.first().map_or("", String::as_str)
            )
        } else {
            format!(
                "{:.1} ms per iteration, {:.0} tokens/s, MFU {:.1}%, peak {:.2} GiB",
                self.iteration_ms,
                self.tokens_per_s,
                self.mfu * 100.0,
                self.max_peak_mem_gib
            )
        }
    }
}

/// A plan exported to a framework: the config, what is lost, and both
/// simulations side by side.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    /// The framework's name.
    pub framework: &'static str,
    /// The planner of the exported plan.
    pub planner: String,
    /// The workload's model (catalog name).
    pub model: String,
    /// Its shapes (what a config that states the network reads).
    #[serde(skip)]
    pub model_spec: crate::model::ModelSpec,
    /// The training dtype of the workload (`bf16`, `fp16`, `fp32`).
    pub dtype: String,
    /// The degrees and batch sizes the config states.
    pub shape: Shape,
    /// The strategy the framework runs.
    pub strategy: Strategy,
    /// The plan's own strategy.
    pub planned_strategy: Strategy,
    /// The plan the framework would run (same world, even batches and
    /// shards, its accumulation style).
    pub approximation: Plan,
    /// What of the plan the framework cannot express, and what the
    /// approximation loses, one sentence each.
    pub notes: Vec<String>,
    /// The plan's simulated figures.
    pub planned: Figures,
    /// The approximation's simulated figures (`None`: it could not be
    /// simulated, a note says why).
    pub approximated: Option<Figures>,
    /// The approximation's iteration time over the plan's (above 1: the
    /// framework is slower; `None` when either runs out of memory).
    pub slowdown: Option<f64>,
    /// The config file's text.
    pub config: String,
}

impl Exported {
    /// Whether the model has experts in every block (the config states
    /// their parallelism).
    pub fn has_experts(&self) -> bool {
        self.model_spec.uniform_moe().is_some()
    }

    /// The side-by-side lines every config carries and the CLI prints.
    pub fn comparison_lines(&self) -> Vec<String> {
        let mut v = vec![
            format!(
                "the plan ({}, simulated): {}",
                self.planner,
                self.planned.line()
            ),
            match &self.approximated {
                Some(f) => format!("as {} runs it (simulated): {}", self.framework, f.line()),
                None => format!(
                    "as {} runs it: not simulated (see the notes)",
                    self.framework
                ),
            },
        ];
        if let Some(s) = self.slowdown {
            if (s - 1.0).abs() < 0.005 {
                v.push(format!(
                    "{} runs the exported config as fast as the plan (within 0.5%)",
                    self.framework
                ));
                return v;
            }
            v.push(format!(
                "{} runs the exported config {:.2}x {} than the plan",
                self.framework,
                if s >= 1.0 { s } else { 1.0 / s },
                if s >= 1.0 { "slower" } else { "faster" }
            ));
        }
        v
    }
}

/// A string as a TOML basic string, YAML double-quoted scalar or JSON
/// string (JSON's escapes are valid in all three).
pub fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// `lines` as `#` comment lines (for TOML and YAML), each line of a
/// multi-line entry commented.
pub fn comment_block(lines: &[String]) -> String {
    let mut s = String::new();
    for l in lines {
        for part in l.lines() {
            s.push_str("# ");
            s.push_str(part);
            s.push('\n');
        }
    }
    s
}

/// The header lines every config starts with: what it is, the
/// side-by-side figures and the notes.
pub fn header_lines(e: &Exported, kind: &str) -> Vec<String> {
    let mut v = vec![
        format!(
            "{} {kind} written by `cephalo plan --export {}` for {} on {} GPUs ({} node{}).",
            e.framework,
            e.framework,
            e.model,
            e.shape.world,
            e.shape.nodes,
            if e.shape.nodes == 1 { "" } else { "s" }
        ),
        format!(
            "It states the plan {} can run (the approximation of the {} plan), simulated beside the plan:",
            e.framework, e.planner
        ),
    ];
    v.extend(e.comparison_lines());
    if !e.notes.is_empty() {
        v.push("What the export cannot express or changes:".into());
        v.extend(e.notes.iter().map(|n| format!("  - {n}")));
    }
    v
}

/// `p` with its experts dispatched by all-to-all, for a framework (`who`)
/// that has no other dispatcher, and the note saying so (none when it
/// already was).
pub fn all_to_all_only(p: &mut Pipeline, who: &str) -> Vec<String> {
    use crate::experts::Dispatcher;
    if p.moe_dispatcher == Dispatcher::AllToAll {
        return Vec::new();
    }
    let was = p.moe_dispatcher.name();
    p.moe_dispatcher = Dispatcher::AllToAll;
    vec![format!(
        "{who} dispatches tokens to experts by all-to-all: the plan's {was} dispatcher is exported and simulated as all-to-all"
    )]
}
