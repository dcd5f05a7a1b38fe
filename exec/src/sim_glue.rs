//! Glue between real execution and the simulator (`sim`): the catalog's
//! model shape as a [`BlockConfig`], a simulator [`Plan`] as a [`Job`], a
//! profiler run ([`ComputeProfile`] + [`CollectiveTiming`]s) as a
//! `cephalo-profile/1` file ([`NativeProfile`]), and a [`TrainReport`] as a
//! [`MeasuredReport`] that compares field by field with the simulator's
//! [`Report`] ([`compare`] → [`Comparison`]).
//!
//! Units: times in ms (`_ms`), memory in GiB (`_gib`, 2^30 bytes) on the
//! simulator side and bytes (`_bytes`) on the exec side, batches in samples,
//! relative errors as fractions (`(predicted - measured) / measured`).
//!
//! # How profiler timings map onto the simulator's cost terms
//!
//! The simulator charges, per micro-batch: `fwd` in the forward pass;
//! `fwd + bwd` (recompute, then backward) per block and `head_fwd +
//! head_bwd` for the head in the backward pass; `embed_bwd` alone for the
//! embedding (see `sim::schedule`, Cephalo's strategy). The trainer does
//! exactly the profiled operations, so the profile stores
//!
//! * block `fwd_ms` = the no-autograd forward, `bwd_ms` = (forward with
//!   autograd + backward) - `fwd_ms`, so `fwd + bwd` is exactly the
//!   trainer's recompute-and-backward step (autograd's graph building
//!   included);
//! * `head_fwd_ms` = the no-autograd head forward with the loss,
//!   `head_bwd_ms` = (forward with autograd + backward) - `head_fwd_ms`;
//! * `embed_fwd_ms` = the lookup, `embed_bwd_ms` = lookup with autograd +
//!   backward (the trainer re-runs the lookup before its backward);
//! * `optimizer_ms_per_mparam` = the Adam step over one block's parameters
//!   per million parameters;
//! * collectives: one sample per (operation, size, split) with `bytes` the
//!   full f32 buffer and `imbalance` = largest piece / mean piece.

use serde::Serialize;

use sim::model::ModelSpec;
use sim::plan::Plan;
use sim::profile::native::{NativeBlock, NativeProfile, NativeUnits, FORMAT};
use sim::profile::CollectiveSample;
use sim::report::Report;

use crate::config::{AdamConfig, BlockConfig, BlockKind, DeviceKind, Job, RankPlan};
use crate::error::ExecError;
use crate::layout::unit_layouts;
use crate::report::{median, CollectiveOp, CollectiveTiming, ComputeProfile, TrainReport};
use sim::precision::NumFormat;

const GIB: f64 = (1u64 << 30) as f64;

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ExecError {
    ExecError::InvalidJob {
        field: field.into(),
        message: message.into(),
    }
}

/// The shape the trainer builds for catalog model `spec` at `seq_len`
/// tokens per sample (ViT: the model's own token count). GPT, BERT and ViT
/// shapes become GPT-style blocks, LLaMA and Mistral LLaMA-style ones (see
/// [`BlockKind::of`]); [`model_for_trainer`] gives the catalog entry
/// with the parameter counts of what is built.
pub fn block_config(spec: &ModelSpec, seq_len: u32) -> Result<BlockConfig, ExecError> {
    // The trainer builds dense blocks with standard attention only.
    let unbuilt = [
        (spec.moe.is_some(), "experts (mixture-of-experts blocks)"),
        (spec.mla.is_some(), "multi-head latent attention"),
        (
            spec.q_dim() != spec.hidden,
            "a head width apart from hidden / heads",
        ),
        (spec.sliding_window.is_some(), "sliding-window attention"),
        (spec.mtp_layers > 0, "multi-token prediction"),
    ];
    if let Some((_, what)) = unbuilt.iter().find(|x| x.0) {
        return Err(ExecError::InvalidJob {
            field: "model".into(),
            message: format!(
                "{}: the trainer does not build {what}; simulate it instead",
                spec.name
            ),
        });
    }
    let cfg = BlockConfig {
        family: BlockKind::of(spec.family),
        layers: spec.layers as usize,
        hidden: spec.hidden as usize,
        heads: spec.heads as usize,
        kv_heads: spec.kv_heads as usize,
        ffn: spec.ffn as usize,
        vocab: spec.vocab as usize,
        seq_len: spec.tokens_per_sample(seq_len) as usize,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// Parameters per unit of the model the trainer builds (embedding, blocks,
/// head).
pub fn trainer_unit_params(cfg: &BlockConfig) -> Vec<u64> {
    unit_layouts(cfg).iter().map(|u| u.numel() as u64).collect()
}

/// `spec` adjusted to what the trainer builds for it, so the simulator's
/// unit sizes (all-gather / reduce-scatter bytes, optimizer work, state
/// memory) are the trainer's: GPT-style learned positions have `seq_len`
/// rows (the catalog counts `max_positions`), and the head is untied.
/// Returns the adjusted spec and one note per difference from the catalog
/// entry (empty when the catalog already describes the built model).
pub fn model_for_trainer(spec: &ModelSpec, seq_len: u32) -> (ModelSpec, Vec<String>) {
    let mut m = spec.clone();
    let mut notes = Vec::new();
    let tokens = spec.tokens_per_sample(seq_len);
    if spec.family.learned_positions() && spec.max_positions != tokens {
        notes.push(format!(
            "the trainer's position embedding has {tokens} rows (seq len), the catalog's {}: simulated with {tokens}",
            spec.max_positions
        ));
        m.max_positions = tokens;
    }
    if spec.tied_embeddings {
        notes.push("the trainer's LM head is untied from the embedding: simulated untied".into());
        m.tied_embeddings = false;
    }
    if let Ok(cfg) = block_config(&m, seq_len) {
        let built = trainer_unit_params(&cfg);
        let sim = {
            let mut v = vec![m.embedding_params()];
            v.extend(std::iter::repeat_n(m.params_per_block(), m.layers as usize));
            v.push(m.head_params());
            v
        };
        if built != sim {
            notes.push(format!(
                "the trainer builds {} parameters per block / {} embedding / {} head; the catalog's {} family has {} / {} / {}",
                built.get(1).copied().unwrap_or(0),
                built[0],
                built[built.len() - 1],
                m.family,
                m.params_per_block(),
                m.embedding_params(),
                m.head_params()
            ));
        }
    }
    (m, notes)
}

/// How a simulator plan is run for real (everything a [`Job`] needs besides
/// the model and the plan).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// Device of every rank.
    pub device: DeviceKind,
    /// Compute dtype.
    pub dtype: NumFormat,
    /// Recorded iterations.
    pub iterations: usize,
    /// Warm-up iterations (trained, not recorded).
    pub warmup_iterations: usize,
    /// Seed of parameters and data.
    pub seed: u64,
    /// libtorch intra-op threads per rank (`None`: libtorch's default).
    pub threads: Option<usize>,
    /// Optimizer.
    pub adam: AdamConfig,
}

/// The training job for `plan` (one rank per plan entry, the plan's
/// strategy). Fails with the field named when a rank has no samples (the
/// trainer needs b_i >= 1) or the plan's micro-batch size is not the
/// trainer's split of its batch; [`Job::validate`] checks the rest,
/// including what of the strategy the trainer cannot run, and why.
pub fn job_from_plan(plan: &Plan, model: &BlockConfig, s: &RunSettings) -> Result<Job, ExecError> {
    // A one-stage plan over every GPU without TP, micro-batch by
    // micro-batch, is the data-parallel plan (the simulator lowers it so,
    // `Pipeline::runs_data_parallel`): the data-parallel trainer runs it,
    // each shard group's state split evenly.
    let n = plan.gpus.len();
    let data_parallel = plan
        .pipeline
        .as_ref()
        .is_some_and(|p| p.runs_data_parallel(n, &plan.strategy));
    let pipeline = plan.pipeline.clone().filter(|_| !data_parallel);
    let even = sim::planner::standard::even_fractions(&plan.strategy, n);
    let mut ranks = Vec::with_capacity(n);
    for (i, g) in plan.gpus.iter().enumerate() {
        if g.batch == 0 {
            return Err(invalid(
                format!("plan[{i}].batch"),
                "expected at least 1 sample per rank (the trainer cannot run state-only ranks), got 0",
            ));
        }
        // A pipeline's entries are its replicas' slices, whose micro-batch
        // sizes need not be one split of the batch.
        if pipeline.is_none()
            && (g.microbatches == 0 || g.microbatch_size != g.batch.div_ceil(g.microbatches))
        {
            return Err(invalid(
                format!("plan[{i}].microbatch_size"),
                format!(
                    "expected {} (batch {} in {} micro-batches), got {}",
                    g.batch.div_ceil(g.microbatches.max(1)),
                    g.batch,
                    g.microbatches,
                    g.microbatch_size
                ),
            ));
        }
        ranks.push(RankPlan {
            batch: g.batch as usize,
            micro_batches: g.microbatches as usize,
            state_fraction: if data_parallel {
                even[i]
            } else {
                g.state_fraction
            },
        });
    }
    let job = Job {
        model: model.clone(),
        plan: ranks,
        strategy: plan.strategy,
        iterations: s.iterations,
        warmup_iterations: s.warmup_iterations,
        adam: s.adam,
        device: s.device,
        dtype: s.dtype,
        seed: s.seed,
        threads: s.threads,
        measure_wait: true,
        return_params: false,
        return_grads: false,
        fault: None,
        pipeline,
        compute_profile: None,
    };
    job.validate(Some(plan.gpus.len()), None)?;
    Ok(job)
}

/// The simulator plan a job runs (planner `manual`, the job's strategy).
pub fn plan_of_job(job: &Job) -> Plan {
    Plan {
        planner: "manual".into(),
        pipeline: job.pipeline.clone(),
        strategy: job.strategy,
        gpus: job
            .plan
            .iter()
            .map(|p| {
                sim::plan::rank::RankPlan::new(
                    p.batch as u32,
                    p.micro_batches as u32,
                    p.state_fraction,
                )
            })
            .collect(),
    }
}

/// Names written into a native profile.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileLabels {
    /// Catalog name of the device (`cpu`, `h200`, ...).
    pub gpu: String,
    /// Catalog name of the model.
    pub model: String,
    /// Tokens per sample the blocks were timed at.
    pub seq_len: u32,
    /// Free text: device, threads, software.
    pub device: String,
}

/// Non-state memory of one training step at micro-batch size `m` (bytes)
/// from a CUDA profile: the largest unit's peak above the memory in use
/// before the profile (its parameters, gradient buffer and activations),
/// plus the block outputs a step without gradient accumulation keeps on the
/// device (`layers + 1` outputs of `m x seq x hidden` elements).
fn act_mem_bytes(c: &ComputeProfile, k: usize) -> Option<f64> {
    let base = c.baseline_mem_bytes? as f64;
    let peak = [&c.block, &c.embedding, &c.head]
        .iter()
        .map(|t| t.get(k).and_then(|p| p.peak_mem_bytes))
        .collect::<Option<Vec<u64>>>()?
        .into_iter()
        .max()? as f64;
    let m = c.block.get(k)?.micro_batch_size as f64;
    let elem = match c.dtype {
        NumFormat::Fp32 => 4.0,
        NumFormat::Fp16 | NumFormat::Bf16 => 2.0,
    };
    let kept =
        (c.model.layers + 1) as f64 * m * c.model.seq_len as f64 * c.model.hidden as f64 * elem;
    Some((peak - base).max(0.0) + kept)
}

/// A `cephalo-profile/1` file of one compute profile and the collective
/// timings (may be empty). See the module docs for what each number is.
/// Fails when the profile has no points or its sizes are not strictly
/// increasing.
pub fn native_profile(
    c: &ComputeProfile,
    collectives: &[CollectiveTiming],
    l: &ProfileLabels,
) -> Result<NativeProfile, ExecError> {
    let sizes: Vec<u32> = c.block.iter().map(|p| p.micro_batch_size as u32).collect();
    if sizes.is_empty() || sizes[0] == 0 || sizes.windows(2).any(|w| w[1] <= w[0]) {
        return Err(invalid(
            "batch_sizes",
            format!("expected strictly increasing micro-batch sizes >= 1, got {sizes:?}"),
        ));
    }
    if c.embedding.len() != sizes.len() || c.head.len() != sizes.len() {
        return Err(invalid(
            "profile",
            "expected one embedding and head timing per block size",
        ));
    }
    // The simulator's backward is the trainer's forward-with-graph plus
    // backward less the plain forward. It does about twice the forward's
    // FLOPs, so a difference below the forward is a burst of other load
    // during one of the two timings (seen on a loaded CI host giving 0,
    // which the profile check rightly refuses): the forward bounds it from
    // below, as the profiler bounds its own backward.
    let diff = |fb: f64, f: f64| (fb - f).max(f);
    let dtype = c.dtype.to_string();
    let act: Option<Vec<f64>> = (0..sizes.len())
        .map(|k| act_mem_bytes(c, k).map(|b| b / GIB))
        .collect();
    let block = NativeBlock {
        gpu: l.gpu.clone(),
        model: l.model.clone(),
        seq_len: l.seq_len,
        dtype: dtype.clone(),
        batch_sizes: sizes.clone(),
        fwd_ms: c.block.iter().map(|p| p.forward_ms).collect(),
        bwd_ms: c
            .block
            .iter()
            .map(|p| diff(p.recompute_backward_ms, p.forward_ms))
            .collect(),
        act_mem_gib: act,
        attention: Some(sim::strategy::Attention::Eager),
    };
    let units = NativeUnits {
        gpu: l.gpu.clone(),
        model: l.model.clone(),
        seq_len: l.seq_len,
        dtype,
        batch_sizes: sizes,
        embed_fwd_ms: c.embedding.iter().map(|p| p.forward_ms).collect(),
        embed_bwd_ms: c
            .embedding
            .iter()
            .map(|p| p.recompute_backward_ms)
            .collect(),
        head_fwd_ms: c.head.iter().map(|p| p.forward_ms).collect(),
        head_bwd_ms: c
            .head
            .iter()
            .map(|p| diff(p.recompute_backward_ms, p.forward_ms))
            .collect(),
        optimizer_ms_per_mparam: c.optimizer_ms_per_block
            / (c.params_per_block.max(1) as f64 / 1e6),
    };
    Ok(NativeProfile {
        format: FORMAT.to_string(),
        device: Some(l.device.clone()),
        blocks: vec![block],
        units: vec![units],
        collectives: collectives.iter().map(collective_sample).collect(),
    })
}

/// One measured collective as a profile sample: `bytes` = full buffer,
/// `imbalance` = largest piece / mean piece (1 = even).
pub fn collective_sample(t: &CollectiveTiming) -> CollectiveSample {
    let mean = t.bytes as f64 / t.ranks.max(1) as f64;
    let imbalance = if mean > 0.0 {
        (t.max_piece_bytes as f64 / mean).max(1.0)
    } else {
        1.0
    };
    CollectiveSample {
        kind: match t.op {
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
            CollectiveOp::AllReduce => "all_reduce",
        }
        .into(),
        ranks: t.ranks as u32,
        bytes: t.bytes as f64,
        imbalance,
        time_ms: t.time_ms,
        // The profiler's ranks share one host.
        nodes: Some(1),
        rescalable: false,
    }
}

/// One rank of a measured run: medians over the recorded iterations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredRank {
    /// Rank.
    pub rank: usize,
    /// Local batch (samples).
    pub batch: usize,
    /// Micro-batch count.
    pub microbatches: usize,
    /// Compute time (forward, head, recompute + backward, optimizer), ms.
    pub compute_ms: f64,
    /// Part of it: the forward, head, recompute and backward passes, ms
    /// (the share of the iteration whose compute is closest to the median,
    /// of the median).
    pub passes_ms: f64,
    /// Part of it: the optimizer step, ms (likewise).
    pub optimizer_ms: f64,
    /// Time inside all-gathers and reduce-scatters, ms (the trainer issues
    /// them synchronously: all of it is exposed).
    pub comm_ms: f64,
    /// Barrier time before collectives (waiting for other ranks), ms.
    pub wait_ms: f64,
    /// Activation offload / reload copies, ms (0 on the CPU).
    pub copy_ms: f64,
    /// Iteration time minus compute, communication and copies, ms: waits
    /// for other ranks plus the trainer's untimed work (data, buffers).
    pub idle_ms: f64,
    /// Peak device memory, GiB (CUDA only).
    pub peak_mem_gib: Option<f64>,
}

/// What a real run measured, in the simulator report's terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredReport {
    /// Recorded iterations.
    pub iterations: usize,
    /// Median iteration time (barrier to barrier on rank 0), ms.
    pub iteration_ms: f64,
    /// Every recorded iteration's time, ms.
    pub iteration_ms_each: Vec<f64>,
    /// Global batch / median iteration time, samples/s.
    pub samples_per_s: f64,
    /// Per rank, in rank order.
    pub gpus: Vec<MeasuredRank>,
}

/// Summarises a training report (medians over its recorded iterations).
pub fn measured_report(t: &TrainReport) -> MeasuredReport {
    let each: Vec<f64> = t.iterations.iter().map(|i| i.iteration_ms).collect();
    let iteration_ms = median(&each);
    let mut gpus = Vec::with_capacity(t.ranks);
    for r in 0..t.ranks {
        let col = |f: &dyn Fn(&crate::report::RankIteration) -> f64| -> f64 {
            let xs: Vec<f64> = t
                .iterations
                .iter()
                .filter_map(|i| i.ranks.get(r).map(f))
                .collect();
            median(&xs)
        };
        let idle: Vec<f64> = t
            .iterations
            .iter()
            .filter_map(|i| {
                i.ranks
                    .get(r)
                    .map(|x| (i.iteration_ms - x.compute_ms - x.comm_ms - x.copy_ms).max(0.0))
            })
            .collect();
        let peaks: Vec<f64> = t
            .iterations
            .iter()
            .filter_map(|i| i.ranks.get(r).and_then(|x| x.peak_mem_bytes))
            .map(|b| b as f64 / GIB)
            .collect();
        let first = t.iterations.first().and_then(|i| i.ranks.get(r));
        // The parts of compute from the iteration whose compute is closest
        // to the median, scaled to the median (so that they add up to it;
        // medians of the parts would not).
        let mid = col(&|x| x.compute_ms);
        let scale = |x: &crate::report::RankIteration| {
            if x.compute_ms > 0.0 {
                mid / x.compute_ms
            } else {
                0.0
            }
        };
        let typical = t
            .iterations
            .iter()
            .filter_map(|i| i.ranks.get(r))
            .min_by(|a, b| {
                (a.compute_ms - mid)
                    .abs()
                    .total_cmp(&(b.compute_ms - mid).abs())
            });
        gpus.push(MeasuredRank {
            rank: r,
            batch: first.map_or(0, |x| x.batch),
            microbatches: first.map_or(0, |x| x.micro_batches),
            compute_ms: col(&|x| x.compute_ms),
            passes_ms: typical.map_or(0.0, |x| x.passes_ms * scale(x)),
            optimizer_ms: typical.map_or(0.0, |x| x.optimizer_ms * scale(x)),
            comm_ms: col(&|x| x.comm_ms),
            wait_ms: col(&|x| x.wait_ms),
            copy_ms: col(&|x| x.copy_ms),
            idle_ms: median(&idle),
            peak_mem_gib: peaks.iter().copied().reduce(f64::max),
        });
    }
    MeasuredReport {
        iterations: each.len(),
        iteration_ms,
        iteration_ms_each: each,
        samples_per_s: if iteration_ms > 0.0 {
            t.global_batch as f64 / (iteration_ms / 1e3)
        } else {
            0.0
        },
        gpus,
    }
}

/// A predicted and a measured value with the relative error.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pair {
    /// Simulator's value.
    pub predicted: Option<f64>,
    /// Measured value.
    pub measured: Option<f64>,
    /// `(predicted - measured) / measured`; `None` when either is missing
    /// or the measurement is below 1e-9.
    pub error_rel: Option<f64>,
}

impl Pair {
    /// Pairs two values.
    pub fn new(predicted: Option<f64>, measured: Option<f64>) -> Pair {
        let error_rel = match (predicted, measured) {
            (Some(p), Some(m)) if m.abs() > 1e-9 => Some((p - m) / m),
            _ => None,
        };
        Pair {
            predicted,
            measured,
            error_rel,
        }
    }
}

/// Predicted vs measured for one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankComparison {
    /// Rank.
    pub rank: usize,
    /// Local batch (samples).
    pub batch: u32,
    /// Micro-batch count.
    pub microbatches: u32,
    /// State fraction.
    pub state_fraction: f64,
    /// Compute stream busy time (simulated `compute_ms`) vs the trainer's
    /// compute time, ms.
    pub compute_ms: Pair,
    /// Its passes (simulated forward + recompute + backward) vs the
    /// trainer's forward, head, recompute and backward phases, ms.
    pub passes_ms: Pair,
    /// Its optimizer step (simulated vs measured), ms.
    pub optimizer_ms: Pair,
    /// Exposed communication (simulated `exposed_comm_ms`) vs time inside
    /// collectives, ms.
    pub comm_ms: Pair,
    /// Host copies (simulated `copy_ms`) vs offload / reload time, ms.
    pub copy_ms: Pair,
    /// Waiting (simulated `idle_ms`: straggler stalls and the final
    /// barrier) vs iteration - compute - communication - copies, ms.
    pub idle_ms: Pair,
    /// Simulated peak memory vs the measured device peak (CUDA only), GiB.
    pub peak_mem_gib: Pair,
}

/// Predicted vs measured for one group of a pipelined / tensor-parallel
/// run: one TP group (a data-parallel replica) of one stage, its ranks'
/// means.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupComparison {
    /// Stage.
    pub stage: usize,
    /// Replica (TP group) inside the stage, in the stage's order.
    pub replica: usize,
    /// Its ranks (TP order).
    pub ranks: Vec<usize>,
    /// Mean compute, ms.
    pub compute_ms: Pair,
    /// Mean communication (TP collectives, the stage's gradient
    /// reduction, sends), ms.
    pub comm_ms: Pair,
    /// Mean bubble: the iteration less compute, communication and copies
    /// (waiting for neighbouring stages and for the slowest rank), ms.
    pub bubble_ms: Pair,
}

/// Predicted vs measured for a whole run.
///
/// JSON (what `cephalo validate --format json` prints inside its output):
/// `predicted_iteration_ms`, `measured_iteration_ms`, `iteration_error_rel`
/// and `ranks: [{rank, batch, microbatches, state_fraction, compute_ms,
/// passes_ms, optimizer_ms, comm_ms, copy_ms, idle_ms, peak_mem_gib}]`,
/// each per-rank field a
/// `{predicted, measured, error_rel}` pair ([`Pair`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Simulated iteration time, ms.
    pub predicted_iteration_ms: f64,
    /// Median measured iteration time, ms.
    pub measured_iteration_ms: f64,
    /// `(predicted - measured) / measured`.
    pub iteration_error_rel: f64,
    /// Per rank, in rank order.
    pub ranks: Vec<RankComparison>,
    /// Per stage and TP group of a pipelined or tensor-parallel plan
    /// (empty for data-parallel ones).
    pub groups: Vec<GroupComparison>,
}

/// One predicted-vs-measured pair of the comparison as CSV (`cephalo
/// validate --format csv`): `rank,group,metric,predicted,measured,error_rel`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComparisonRow {
    /// The rank of a per-rank row.
    pub rank: Option<usize>,
    /// The stage and TP group of a pipelined / 3D plan's group rows
    /// (`stage S replica R`).
    pub group: Option<String>,
    /// The figure (`iteration_ms`, `compute_ms`, `peak_mem_gib`, ...).
    pub metric: &'static str,
    /// Simulated value (ms or GiB).
    pub predicted: Option<f64>,
    /// Measured value (ms or GiB).
    pub measured: Option<f64>,
    /// `(predicted - measured) / measured`.
    pub error_rel: Option<f64>,
}

impl Comparison {
    /// The comparison as CSV rows: the iteration, then every rank's
    /// figures, then every stage and TP group's.
    pub fn csv_rows(&self) -> Vec<ComparisonRow> {
        let row = |rank, group, metric, p: &Pair| ComparisonRow {
            rank,
            group,
            metric,
            predicted: p.predicted,
            measured: p.measured,
            error_rel: p.error_rel,
        };
        let mut rows = vec![ComparisonRow {
            rank: None,
            group: None,
            metric: "iteration_ms",
            predicted: Some(self.predicted_iteration_ms),
            measured: Some(self.measured_iteration_ms),
            error_rel: Some(self.iteration_error_rel),
        }];
        for r in &self.ranks {
            for (metric, p) in [
                ("compute_ms", &r.compute_ms),
                ("passes_ms", &r.passes_ms),
                ("optimizer_ms", &r.optimizer_ms),
                ("comm_ms", &r.comm_ms),
                ("idle_ms", &r.idle_ms),
                ("copy_ms", &r.copy_ms),
                ("peak_mem_gib", &r.peak_mem_gib),
            ] {
                rows.push(row(Some(r.rank), None, metric, p));
            }
        }
        for g in &self.groups {
            for (metric, p) in [
                ("compute_ms", &g.compute_ms),
                ("comm_ms", &g.comm_ms),
                ("bubble_ms", &g.bubble_ms),
            ] {
                let group = format!("stage {} replica {}", g.stage, g.replica);
                rows.push(row(None, Some(group), metric, p));
            }
        }
        rows
    }
}

/// Per stage and replica, the means of `ranks`' compute, communication
/// and bubble (the report's stages say which ranks form which group).
fn group_comparisons(
    pipe: &sim::report::PipelineReport,
    ranks: &[RankComparison],
) -> Vec<GroupComparison> {
    let mut out = Vec::new();
    for st in &pipe.stages {
        let t = st.tp.max(1) as usize;
        for (j, group) in st.ranks.chunks(t).enumerate() {
            let rows: Vec<&RankComparison> = group.iter().filter_map(|&r| ranks.get(r)).collect();
            let mean = |f: &dyn Fn(&RankComparison) -> Pair| -> Pair {
                let n = rows.len().max(1) as f64;
                let sum = |g: &dyn Fn(Pair) -> Option<f64>| -> Option<f64> {
                    rows.iter()
                        .map(|r| g(f(r)))
                        .sum::<Option<f64>>()
                        .map(|x| x / n)
                };
                Pair::new(sum(&|p| p.predicted), sum(&|p| p.measured))
            };
            out.push(GroupComparison {
                stage: st.stage,
                replica: j,
                ranks: group.to_vec(),
                compute_ms: mean(&|r| r.compute_ms),
                comm_ms: mean(&|r| r.comm_ms),
                bubble_ms: mean(&|r| r.idle_ms),
            });
        }
    }
    out
}

/// Compares a simulated report with a measured run of the same plan.
pub fn compare(predicted: &Report, measured: &MeasuredReport) -> Comparison {
    let it = Pair::new(Some(predicted.iteration_ms), Some(measured.iteration_ms));
    let ranks: Vec<RankComparison> = predicted
        .gpus
        .iter()
        .zip(&measured.gpus)
        .map(|(p, m)| RankComparison {
            rank: p.rank,
            batch: p.batch,
            microbatches: p.microbatches,
            state_fraction: p.state_fraction,
            compute_ms: Pair::new(Some(p.compute_ms), Some(m.compute_ms)),
            passes_ms: Pair::new(
                Some(p.forward_ms + p.recompute_ms + p.backward_ms),
                Some(m.passes_ms),
            ),
            optimizer_ms: Pair::new(Some(p.optimizer_ms), Some(m.optimizer_ms)),
            comm_ms: Pair::new(Some(p.exposed_comm_ms), Some(m.comm_ms)),
            copy_ms: Pair::new(Some(p.copy_ms), Some(m.copy_ms)),
            idle_ms: Pair::new(Some(p.idle_ms), Some(m.idle_ms)),
            peak_mem_gib: Pair::new(Some(p.peak_mem_gib), m.peak_mem_gib),
        })
        .collect();
    let groups = match &predicted.pipeline {
        Some(pipe) => group_comparisons(pipe, &ranks),
        None => Vec::new(),
    };
    Comparison {
        predicted_iteration_ms: predicted.iteration_ms,
        measured_iteration_ms: measured.iteration_ms,
        iteration_error_rel: it.error_rel.unwrap_or(f64::NAN),
        ranks,
        groups,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PassTiming;
    use sim::model::ModelCatalog;

    fn spec(name: &str) -> ModelSpec {
        ModelCatalog::builtin().get(name).unwrap().clone()
    }

    #[test]
    fn catalog_gpt_and_llama_build_with_the_simulators_unit_sizes() {
        for name in ["deepspeedgpt_test", "gpt-1.3b", "llama-3b", "mistral-7b"] {
            let s = spec(name);
            let (m, _notes) = model_for_trainer(&s, 64);
            let cfg = block_config(&m, 64).unwrap();
            let mut want = vec![m.embedding_params()];
            want.extend(std::iter::repeat_n(m.params_per_block(), m.layers as usize));
            want.push(m.head_params());
            assert_eq!(trainer_unit_params(&cfg), want, "{name}");
        }
        let (_, notes) = model_for_trainer(&spec("deepspeedgpt_test"), 64);
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    #[test]
    fn plan_becomes_job_and_back() {
        let plan = Plan {
            planner: "x".into(),
            pipeline: None,
            strategy: sim::strategy::Strategy::cephalo(2, sim::strategy::Attention::Eager),
            gpus: vec![
                sim::plan::rank::RankPlan::new(3, 1, 0.4),
                sim::plan::rank::RankPlan::new(5, 2, 0.6),
            ],
        };
        let s = RunSettings {
            device: DeviceKind::Cpu,
            dtype: NumFormat::Fp32,
            iterations: 2,
            warmup_iterations: 1,
            seed: 1,
            threads: Some(1),
            adam: AdamConfig::default(),
        };
        let job = job_from_plan(&plan, &BlockConfig::tiny_gpt(), &s).unwrap();
        assert_eq!(job.global_batch(), 8);
        assert_eq!(job.plan[1].micro_batches, 2);
        let back = plan_of_job(&job);
        assert_eq!(back.gpus, plan.gpus);
        let mut zero = plan.clone();
        zero.gpus[0] = sim::plan::rank::RankPlan::new(0, 0, 0.4);
        match job_from_plan(&zero, &BlockConfig::tiny_gpt(), &s) {
            Err(ExecError::InvalidJob { field, .. }) => assert_eq!(field, "plan[0].batch"),
            other => panic!("{other:?}"),
        }
    }

    fn pass(m: usize, f: f64, fb: f64) -> PassTiming {
        PassTiming {
            micro_batch_size: m,
            forward_ms: f,
            backward_ms: fb - f,
            recompute_backward_ms: fb,
            peak_mem_bytes: None,
        }
    }

    #[test]
    fn profile_maps_trainer_steps_onto_simulator_terms() {
        let c = ComputeProfile {
            model: BlockConfig::tiny_gpt(),
            device: DeviceKind::Cpu,
            dtype: NumFormat::Fp32,
            threads: 1,
            params_per_block: 2_000_000,
            params_embedding: 10,
            params_head: 10,
            block: vec![pass(1, 1.0, 3.5), pass(2, 2.0, 7.0)],
            embedding: vec![pass(1, 0.1, 0.5), pass(2, 0.2, 0.9)],
            head: vec![pass(1, 0.3, 1.0), pass(2, 0.6, 2.0)],
            optimizer_ms_per_block: 4.0,
            optimizer_ns_per_param: 2.0,
            warmup: 1,
            repetitions: 3,
            baseline_mem_bytes: None,
            concurrent_ranks: 1,
        };
        let t = CollectiveTiming {
            op: CollectiveOp::AllGather,
            ranks: 2,
            elems: 100,
            bytes: 400,
            fractions: vec![0.4, 0.6],
            max_piece_bytes: 240,
            time_ms: 0.5,
        };
        let l = ProfileLabels {
            gpu: "cpu".into(),
            model: "gpt-test".into(),
            seq_len: 16,
            device: "test".into(),
        };
        let p = native_profile(&c, &[t], &l).unwrap();
        let b = &p.blocks[0];
        assert_eq!(b.fwd_ms, vec![1.0, 2.0]);
        assert_eq!(b.bwd_ms, vec![2.5, 5.0]);
        assert!(b.act_mem_gib.is_none());
        let u = &p.units[0];
        assert_eq!(u.embed_bwd_ms, vec![0.5, 0.9]);
        assert_eq!(u.head_fwd_ms, vec![0.3, 0.6]);
        assert!((u.head_bwd_ms[0] - 0.7).abs() < 1e-12);
        assert!((u.optimizer_ms_per_mparam - 2.0).abs() < 1e-12);
        let s = &p.collectives[0];
        assert_eq!(s.kind, "all_gather");
        assert!((s.imbalance - 1.2).abs() < 1e-12);
        let mut bad = c.clone();
        bad.block.swap(0, 1);
        assert!(native_profile(&bad, &[], &l).is_err());
        // A forward-with-backward timed below twice the forward (a burst of
        // load during the forward) gives a backward no shorter than the
        // forward, never zero (which the profile check refuses).
        let mut noisy = c.clone();
        noisy.block[1] = pass(2, 2.0, 1.5);
        noisy.head[0] = pass(1, 0.3, 0.3);
        let p = native_profile(&noisy, &[], &l).unwrap();
        assert_eq!(p.blocks[0].bwd_ms, vec![2.5, 2.0]);
        assert!((p.units[0].head_bwd_ms[0] - 0.3).abs() < 1e-12);
    }

    #[test]
    fn pairs_and_measured_medians() {
        use crate::report::{IterationRecord, RankIteration};
        let rank = |r: usize, c: f64| RankIteration {
            rank: r,
            batch: 3,
            micro_batches: 1,
            compute_ms: c,
            comm_ms: 1.0,
            wait_ms: 0.5,
            copy_ms: 0.0,
            peak_mem_bytes: None,
            loss_sum: 0.0,
            own_iteration_ms: 10.0,
            passes_ms: c - 1.0,
            optimizer_ms: 1.0,
        };
        let t = TrainReport {
            ranks: 2,
            global_batch: 6,
            unit_params: vec![],
            iterations: [10.0, 12.0, 11.0]
                .iter()
                .enumerate()
                .map(|(i, &ms)| IterationRecord {
                    iteration: i,
                    iteration_ms: ms,
                    ranks: vec![rank(0, ms - 2.0), rank(1, ms - 4.0)],
                })
                .collect(),
            loss_sums: vec![],
            final_params: None,
            first_grads: None,
            compute_profile: None,
        };
        let m = measured_report(&t);
        assert_eq!(m.iteration_ms, 11.0);
        assert_eq!(m.gpus[0].compute_ms, 9.0);
        // The parts of the median iteration (compute 9: passes 8, optimizer 1).
        assert_eq!((m.gpus[0].passes_ms, m.gpus[0].optimizer_ms), (8.0, 1.0));
        assert!((m.gpus[1].idle_ms - 3.0).abs() < 1e-12);
        assert!((m.samples_per_s - 6.0 / 0.011).abs() < 1e-9);
        let p = Pair::new(Some(11.0), Some(10.0));
        assert!((p.error_rel.unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(Pair::new(Some(1.0), None).error_rel, None);
    }
}
