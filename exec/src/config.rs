//! Job description of a real run: model shape ([`BlockConfig`]), per-rank
//! plan entries ([`RankPlan`]), optimizer ([`AdamConfig`]), device and dtype.
//!
//! Units: batches and micro-batch sizes in samples, sequence length in
//! tokens, fractions dimensionless (sum to 1). Everything here is plain data
//! (serde), available without the `torch`/`mpi` features, so a launcher can
//! validate a job before any rank starts.

use serde::{Deserialize, Serialize};
use sim::plan::pipeline::Pipeline;
use sim::strategy::{Attention, Checkpointing, Sharding, Strategy};

use crate::error::ExecError;
use sim::precision::NumFormat;

/// The kind of block the trainer builds for a catalog model family
/// ([`sim::model::Family`]): the trainer has two block implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockKind {
    /// GPT-style: post-LN blocks (`x = LN(x + attn(x)); x = LN(x + mlp(x))`),
    /// GELU MLP of width `ffn`, biases everywhere, learned positions, eager
    /// causal attention. Also used for BERT/ViT-like shapes.
    Gpt,
    /// LLaMA-style: pre-RMSNorm blocks, SwiGLU MLP of width `ffn`, no biases,
    /// grouped-query attention (`kv_heads`), rotary position embedding
    /// (rotate-half form, base 10000) on queries and keys, no learned
    /// positions. Also used for Mistral-like shapes.
    Llama,
}

impl BlockKind {
    /// The block the trainer builds for a model of `family`.
    pub fn of(family: sim::model::Family) -> BlockKind {
        if family.is_llama_like() {
            BlockKind::Llama
        } else {
            BlockKind::Gpt
        }
    }
}

/// Shape of the model to build (same field names as `sim::model::ModelSpec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockConfig {
    /// The kind of block (field `family` in files).
    pub family: BlockKind,
    /// Number of transformer blocks.
    pub layers: usize,
    /// Hidden size (model width).
    pub hidden: usize,
    /// Attention (query) heads; divides `hidden`.
    pub heads: usize,
    /// Key/value heads; divides `heads` (= `heads` for GPT).
    pub kv_heads: usize,
    /// MLP inner width.
    pub ffn: usize,
    /// Vocabulary size (tokens).
    pub vocab: usize,
    /// Sequence length (tokens per sample).
    pub seq_len: usize,
}

impl BlockConfig {
    /// A tiny GPT (2 blocks, hidden 32) that trains in milliseconds on CPU.
    pub fn tiny_gpt() -> BlockConfig {
        BlockConfig {
            family: BlockKind::Gpt,
            layers: 2,
            hidden: 32,
            heads: 4,
            kv_heads: 4,
            ffn: 128,
            vocab: 64,
            seq_len: 16,
        }
    }

    /// A tiny LLaMA (2 blocks, hidden 32, 2 KV heads) for CPU tests.
    pub fn tiny_llama() -> BlockConfig {
        BlockConfig {
            family: BlockKind::Llama,
            layers: 2,
            hidden: 32,
            heads: 4,
            kv_heads: 2,
            ffn: 96,
            vocab: 64,
            seq_len: 16,
        }
    }

    /// Head dimension (`hidden / heads`).
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads.max(1)
    }

    /// Checks that the shape can be built.
    pub fn validate(&self) -> Result<(), ExecError> {
        let bad = |field: &str, expected: &str, value: usize| {
            Err(ExecError::InvalidJob {
                field: format!("model.{field}"),
                message: format!("expected {expected}, got {value}"),
            })
        };
        for (field, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("ffn", self.ffn),
            ("vocab", self.vocab),
            ("seq_len", self.seq_len),
        ] {
            if v == 0 {
                return bad(field, "a positive integer", v);
            }
        }
        if !self.hidden.is_multiple_of(self.heads) {
            return bad("heads", "a divisor of hidden", self.heads);
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return bad("kv_heads", "a divisor of heads", self.kv_heads);
        }
        if self.family == BlockKind::Gpt && self.kv_heads != self.heads {
            return bad(
                "kv_heads",
                "equal to heads for the gpt family",
                self.kv_heads,
            );
        }
        if self.family == BlockKind::Llama && !self.head_dim().is_multiple_of(2) {
            return bad(
                "heads",
                "an even head dimension (rotary embedding) for the llama family",
                self.heads,
            );
        }
        Ok(())
    }
}

/// Plan entry of one rank (one device).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankPlan {
    /// Local batch b_i (samples per iteration), at least 1.
    pub batch: usize,
    /// Micro-batch count n_i, 1..=b_i. The micro-batch sizes are
    /// `b_i / n_i` or one more (see [`crate::shard::micro_batch_sizes`]).
    pub micro_batches: usize,
    /// State fraction r_i of every unit's flattened parameters (and their
    /// gradients and Adam moments) held by this rank; in [0, 1], sum 1.
    pub state_fraction: f64,
}

/// Adam hyper-parameters (standard Adam with bias correction, no weight
/// decay).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator epsilon.
    pub eps: f64,
}

impl Default for AdamConfig {
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

/// Device kind a rank computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The CPU (libtorch intra-op threads, see [`Job::threads`]).
    Cpu,
    /// A CUDA device: rank r uses `cuda:(local_rank % device_count)`.
    Cuda,
}

/// Fault injection for tests: `rank` fails during `iteration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// Rank that fails.
    pub rank: usize,
    /// Iteration (0-based, warm-up included) in which it fails, after the
    /// forward pass of the first unit (mid-iteration).
    pub iteration: usize,
    /// How it fails.
    pub kind: FaultKind,
}

/// How an injected fault kills a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A Rust panic (the rank's panic hook calls `MPI_Abort`).
    Panic,
    /// `std::process::exit(3)` without `MPI_Finalize`.
    Exit,
    /// `std::process::abort()`: death by a signal (SIGABRT), as after a
    /// crash in native code.
    Abort,
    /// Sleeps forever (a hung rank; the launcher's time limit ends the job).
    Hang,
}

/// Everything a rank needs to train (sent to the ranks as JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Model shape.
    pub model: BlockConfig,
    /// One entry per rank (its length is the rank count).
    pub plan: Vec<RankPlan>,
    /// How the iteration runs: the simulator's own [`Strategy`] (sharding,
    /// accumulation, checkpointing, offload, dtypes), what the trainer
    /// executes ([`Job::validate`] says which it cannot).
    pub strategy: Strategy,
    /// Measured iterations (after the warm-up).
    pub iterations: usize,
    /// Warm-up iterations (trained, not recorded).
    #[serde(default)]
    pub warmup_iterations: usize,
    /// Optimizer.
    #[serde(default)]
    pub adam: AdamConfig,
    /// Device kind of every rank.
    pub device: DeviceKind,
    /// Compute dtype.
    pub dtype: NumFormat,
    /// Seed of the parameter initialisation and of the token data.
    #[serde(default)]
    pub seed: u64,
    /// libtorch intra-op threads per rank (`None`: libtorch's default).
    #[serde(default)]
    pub threads: Option<usize>,
    /// Whether every collective is preceded by a barrier whose duration is
    /// recorded as wait time (separating stall from transfer time).
    #[serde(default = "yes")]
    pub measure_wait: bool,
    /// Whether the report carries the final full parameters of every unit
    /// (for correctness tests; large for real models).
    #[serde(default)]
    pub return_params: bool,
    /// Whether the report carries the full gradient of every unit in the
    /// first iteration (reduce-scattered, then gathered; for correctness
    /// tests).
    #[serde(default)]
    pub return_grads: bool,
    /// Test-only fault injection.
    #[serde(default)]
    pub fault: Option<Fault>,
    /// The pipeline (stages, TP groups, data-parallel replicas, schedule)
    /// when the plan is pipelined or tensor-parallel; the plan entries are
    /// then its [`Pipeline::rank_plans`]. `None`: data-parallel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Pipeline>,
    /// A compute profile every rank takes between its recorded iterations
    /// (the report's `compute_profile`); `None`: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_profile: Option<InRunProfile>,
}

/// What a trainer's ranks measure of compute between their recorded
/// iterations: [`crate::profile_compute`]'s measurements (block 0, the
/// embedding and the head at these sizes, two passes, and the Adam step)
/// on the job's model, device, dtype and threads, a share of them before
/// each recorded iteration, the ranks side by side. The profile then sees
/// the host, the allocator and the other ranks as the iterations do, in
/// the same minutes: on a host whose speed drifts by a fifth from minute
/// to minute, a profile taken before the run predicts the host of another
/// time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InRunProfile {
    /// Micro-batch sizes to time (samples).
    pub micro_batch_sizes: Vec<usize>,
    /// Untimed runs before each point.
    pub warmup: usize,
    /// Timed runs per point (the median is kept).
    pub repetitions: usize,
    /// Bytes of scratch memory rewritten before every timed pass (see
    /// [`ProfileConfig::flush_bytes`]).
    #[serde(default)]
    pub flush_bytes: usize,
}

impl Job {
    /// The profiler's settings for [`Job::compute_profile`], if any.
    pub fn profile_config(&self) -> Option<ProfileConfig> {
        self.compute_profile.as_ref().map(|p| ProfileConfig {
            model: self.model.clone(),
            device: self.device,
            dtype: self.dtype,
            micro_batch_sizes: p.micro_batch_sizes.clone(),
            warmup: p.warmup,
            repetitions: p.repetitions,
            threads: self.threads,
            flush_bytes: p.flush_bytes,
            optimizer_samples: Some(self.global_batch()),
        })
    }
}

fn yes() -> bool {
    true
}

impl Job {
    /// Ranks per shard group (all ranks unless hybrid).
    pub fn shard_group(&self) -> usize {
        match self.strategy.sharding {
            Sharding::Hybrid => self.strategy.shard_group as usize,
            _ => self.plan.len(),
        }
    }

    /// Checks that the trainer can run the strategy on this plan: a shard
    /// group that divides the ranks, fractions summing to 1 in every group
    /// (under hybrid sharding the same fraction at each position of every
    /// group, whose shards the replicas all-reduce), and no axis the
    /// trainer does not implement (each refusal says why).
    fn validate_strategy(&self) -> Result<(), ExecError> {
        let bad = |field: &str, message: String| {
            Err(ExecError::InvalidJob {
                field: field.into(),
                message,
            })
        };
        let s = &self.strategy;
        let ranks = self.plan.len();
        let g = s.shard_group as usize;
        if g == 0 || !ranks.is_multiple_of(g) {
            return bad(
                "strategy.shard_group",
                format!("expected a group size that divides the {ranks} ranks, got {g}"),
            );
        }
        if s.sharding != Sharding::Hybrid && g != ranks {
            return bad(
                "strategy.shard_group",
                format!(
                    "sharding `{}` uses one group of all {ranks} ranks, got {g}",
                    s.sharding.name()
                ),
            );
        }
        let g = self.shard_group();
        for k in 0..ranks / g {
            let sum: f64 = self.plan[k * g..(k + 1) * g]
                .iter()
                .map(|p| p.state_fraction)
                .sum();
            if (sum - 1.0).abs() > 1e-6 {
                let what = if g == ranks {
                    format!("expected fractions summing to 1, got {sum}")
                } else {
                    format!(
                        "expected the fractions of shard group {k} (ranks {}..{}) to sum to 1, got {sum}",
                        k * g,
                        (k + 1) * g
                    )
                };
                return bad("plan[*].state_fraction", what);
            }
        }
        if s.sharding == Sharding::Hybrid {
            for r in g..ranks {
                let (a, b) = (self.plan[r].state_fraction, self.plan[r % g].state_fraction);
                if (a - b).abs() > 1e-12 {
                    return bad(
                        &format!("plan[{r}].state_fraction"),
                        format!(
                            "hybrid sharding all-reduces the shard at position {} of every group, so it needs the same fraction in every group: {a} here, {b} at rank {}",
                            r % g,
                            r % g
                        ),
                    );
                }
            }
        }
        if matches!(
            s.checkpointing,
            Checkpointing::Selective | Checkpointing::SelectiveAttention
        ) {
            return bad(
                "strategy.checkpointing",
                "selective recompute (op-level or core attention) keeps chosen tensors of a block through saved-tensor hooks (PyTorch's checkpoint policy), which tch 0.24 does not expose; the trainer runs none, full and every:K".into(),
            );
        }
        if s.attention == Attention::Flash {
            return bad(
                "strategy.attention",
                "the trainer's blocks use eager attention (the kernel its compute profiles measure); flash attention is simulated only".into(),
            );
        }
        if s.reduce_dtype != sim::precision::NumFormat::Fp32 {
            return bad(
                "strategy.reduce_dtype",
                format!(
                    "MPI has no 16-bit floating-point sum (NCCL does), so the trainer reduces gradients in fp32, got {}",
                    s.reduce_dtype
                ),
            );
        }
        Ok(())
    }

    /// Global batch B (samples): the sum of the local batches, or for a
    /// pipeline what its first stage's replicas compute.
    pub fn global_batch(&self) -> usize {
        match &self.pipeline {
            None => self.plan.iter().map(|p| p.batch).sum(),
            Some(pipe) => {
                let st = &pipe.stages[0];
                let t = st.tp.max(1) as usize;
                st.gpus
                    .iter()
                    .step_by(t)
                    .filter_map(|&r| self.plan.get(r as usize))
                    .map(|p| p.batch)
                    .sum()
            }
        }
    }

    /// [`Job::validate`] of a pipeline: the simulator's own check of the
    /// pipeline against the model, batch and strategy, then what the
    /// trainer cannot run, each with why.
    fn validate_pipeline(&self, pipe: &Pipeline) -> Result<(), ExecError> {
        let bad = |field: &str, message: String| {
            Err(ExecError::InvalidJob {
                field: field.into(),
                message,
            })
        };
        let ranks = self.plan.len();
        pipe.validate(
            ranks,
            Some(self.model.layers as u32),
            self.global_batch() as u32,
            &self.strategy,
            "job",
        )
        .map_err(|e| match e {
            sim::error::PlanError::Invalid { field, message, .. } => {
                ExecError::InvalidJob { field, message }
            }
            other => ExecError::InvalidJob {
                field: "pipeline".into(),
                message: other.to_string(),
            },
        })?;
        let placed: usize = pipe.stages.iter().map(|s| s.gpus.len()).sum();
        if placed != ranks {
            return bad(
                "pipeline.stages[].gpus",
                format!("the trainer runs every rank in a stage: {placed} of the {ranks} ranks are placed"),
            );
        }
        if pipe.schedule.splits_backward() {
            return bad(
                "pipeline.schedule",
                format!("{} splits each backward into its input-gradient and weight-gradient halves and runs them apart; tch's autograd computes both in one call, so the trainer runs gpipe, 1f1b and interleaved", pipe.schedule),
            );
        }
        if self.strategy.sharding == Sharding::Hybrid {
            return bad(
                "strategy.sharding",
                "the trainer runs none (DDP), grad-op (ZeRO-1) and full (FSDP) inside a pipeline's stages, not hybrid".into(),
            );
        }
        if pipe.reshards_after_forward(&self.strategy) {
            return bad(
                "strategy.sharding",
                "at one stage FSDP reshards each unit after its forward and gathers it again for its backward (torchtitan without a pipeline, as the simulator lowers it); the stage trainer gathers a stage's parameters once per step, so it runs full inside the stages of a pipeline of two or more stages (a one-stage plan without TP runs as a data-parallel job)".into(),
            );
        }
        let s = &self.strategy;
        if s.accumulation != sim::strategy::Accumulation::NoSync
            || s.offload != sim::strategy::Offload::None
        {
            return bad(
                "strategy.accumulation",
                format!(
                    "the stage trainer accumulates without sync and offloads nothing, got {} and offload {} (a one-stage plan without TP runs as a data-parallel job)",
                    s.accumulation.name(),
                    s.offload.name()
                ),
            );
        }
        let sp = pipe.sequence_parallel;
        let t0 = pipe.stages[0].tp;
        for (s, st) in pipe.stages.iter().enumerate() {
            if let Err(why) = check_degree(&self.model, st.tp as usize, sp) {
                return bad(&format!("pipeline.stages[{s}].tp"), why);
            }
            if sp && st.tp != t0 {
                return bad(
                    &format!("pipeline.stages[{s}].tp"),
                    format!("with sequence parallelism the trainer hands each rank's sequence shard to the same rank of the next stage, so every stage needs the same TP degree ({t0} in stage 0, {} here)", st.tp),
                );
            }
        }
        Ok(())
    }

    /// Checks the job for `ranks` ranks (`None`: any count). Rejects a plan
    /// whose length differs from the rank count, fractions outside [0, 1]
    /// or not summing to 1 (within 1e-6), empty batches, micro-batch counts
    /// outside 1..=b_i, `global_batch` (when given) not equal to the sum of
    /// the local batches, and half dtypes on the CPU.
    pub fn validate(
        &self,
        ranks: Option<usize>,
        global_batch: Option<usize>,
    ) -> Result<(), ExecError> {
        let bad = |field: String, message: String| Err(ExecError::InvalidJob { field, message });
        self.model.validate()?;
        if self.plan.is_empty() {
            return bad(
                "plan".into(),
                "expected at least one rank entry, got none".into(),
            );
        }
        if let Some(r) = ranks {
            if self.plan.len() != r {
                return bad(
                    "plan".into(),
                    format!(
                        "expected {r} entries (one per rank), got {}",
                        self.plan.len()
                    ),
                );
            }
        }
        for (i, p) in self.plan.iter().enumerate() {
            if p.batch == 0 {
                return bad(
                    format!("plan[{i}].batch"),
                    "expected at least 1 sample, got 0".into(),
                );
            }
            if p.micro_batches == 0 || p.micro_batches > p.batch {
                return bad(
                    format!("plan[{i}].micro_batches"),
                    format!(
                        "expected 1..={} (the local batch), got {}",
                        p.batch, p.micro_batches
                    ),
                );
            }
            if !(0.0..=1.0).contains(&p.state_fraction) || !p.state_fraction.is_finite() {
                return bad(
                    format!("plan[{i}].state_fraction"),
                    format!("expected a fraction in [0, 1], got {}", p.state_fraction),
                );
            }
        }
        match &self.pipeline {
            Some(pipe) => self.validate_pipeline(pipe)?,
            None => self.validate_strategy()?,
        }
        if let Some(b) = global_batch {
            if self.global_batch() != b {
                return bad(
                    "plan[*].batch".into(),
                    format!(
                        "expected local batches summing to the global batch {b}, got {}",
                        self.global_batch()
                    ),
                );
            }
        }
        if self.device == DeviceKind::Cpu && self.dtype != NumFormat::Fp32 {
            return bad("dtype".into(), "expected fp32 on the cpu device".into());
        }
        if let Some(f) = &self.fault {
            if f.rank >= self.plan.len() {
                return bad(
                    "fault.rank".into(),
                    format!("expected a rank < {}, got {}", self.plan.len(), f.rank),
                );
            }
        }
        Ok(())
    }
}

/// Checks a TP degree `t` against a model before any rank starts: it
/// divides the query heads, the KV heads, the MLP width and the
/// vocabulary (the trainer does not pad it, as Megatron does), and under
/// sequence parallelism (`sp`) the sequence. `Err` says why not.
pub fn check_degree(model: &BlockConfig, t: usize, sp: bool) -> Result<(), String> {
    if t == 0 {
        return Err("expected a TP degree of at least 1, got 0".into());
    }
    if t == 1 {
        return Ok(());
    }
    for (what, n) in [
        ("attention heads", model.heads),
        ("key/value heads", model.kv_heads),
        ("MLP width", model.ffn),
        ("vocabulary", model.vocab),
    ] {
        if !n.is_multiple_of(t) {
            return Err(format!(
                "TP degree {t} does not divide the model's {what} ({n}): every rank of a TP group takes an equal share"
            ));
        }
    }
    if sp && !model.seq_len.is_multiple_of(t) {
        return Err(format!(
            "sequence parallelism splits a sample's {} tokens over the {t} ranks of a TP group: {t} must divide them",
            model.seq_len
        ));
    }
    Ok(())
}

/// What [`crate::profile_compute`] measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileConfig {
    /// Model (its block 0, embedding and head are timed).
    pub model: BlockConfig,
    /// Device kind (device 0 / local rank 0 for CUDA).
    pub device: DeviceKind,
    /// Compute dtype.
    pub dtype: NumFormat,
    /// Micro-batch sizes to time (samples).
    pub micro_batch_sizes: Vec<usize>,
    /// Untimed runs before each point.
    pub warmup: usize,
    /// Timed runs per point (the median is reported).
    pub repetitions: usize,
    /// libtorch intra-op threads (`None`: libtorch's default).
    pub threads: Option<usize>,
    /// Bytes of scratch memory rewritten before every timed pass (the CPU's
    /// last-level cache; 0: none), so a unit's weights, inputs and
    /// gradient buffer come from memory, as in training.
    #[serde(default)]
    pub flush_bytes: usize,
    /// Samples of the training step whose tokens the embedding's gradient
    /// holds when the Adam step is timed: rows of the token embedding that
    /// no token of samples `0..n` touches get exact-zero gradients, as in
    /// training (where the batch's gradient is reduced over every rank,
    /// the global batch). On a CPU, Adam over exact-zero gradients ran 2x
    /// as long as over dense ones (this project's probe, libtorch 2.11,
    /// one thread), and a small run's embedding gradient is mostly zeros.
    /// `None`: dense gradients.
    #[serde(default)]
    pub optimizer_samples: Option<usize>,
}
