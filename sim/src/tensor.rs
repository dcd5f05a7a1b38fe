//! Tensor parallelism (TP) and sequence parallelism (SP) as Megatron-LM
//! runs them (Shoeybi et al. 2019, arXiv 1909.08053; Korthikanti et al.
//! 2022, arXiv 2205.05198; `megatron/core/tensor_parallel/{layers,
//! mappings,cross_entropy}.py`): what one TP rank of a group of `t` GPUs
//! holds, computes and communicates per transformer block.
//!
//! * **Split**: the attention's fused QKV and the MLP's first linear (with
//!   SwiGLU the gate and up projections) are column-parallel, the attention
//!   output projection and the MLP's last linear row-parallel; each rank
//!   holds `a/t` query heads and `n_kv/t` KV heads (Megatron asserts both
//!   divide; `ffn` must divide too). Norms, dropout and residual adds work
//!   on the full hidden dimension and are replicated on every rank, or run
//!   on a sequence shard `s/t` with SP. The word embedding is
//!   vocabulary-parallel and the output layer column-parallel over the
//!   vocabulary, with the vocab-parallel cross-entropy.
//! * **Collectives per block and micro-batch** ([`TensorParallel::block_collectives`]),
//!   each of the activation tensor `S = tokens x h` in the compute dtype:
//!   without SP 2 all-reduces in the forward (after the row-parallel
//!   layers) and 2 in the backward (the input gradients of the
//!   column-parallel ones); with SP 2 all-gathers + 2 reduce-scatters
//!   forward and 4 all-gathers (2 of them the re-gathers of the saved
//!   sequence shards for the weight gradients) + 2 reduce-scatters backward.
//! * **Overlap** ([`TensorParallel::exposed_ms`]): Megatron's default path
//!   runs the forward collectives on the critical path and launches the
//!   backward input-gradient all-reduce (or reduce-scatter) asynchronously
//!   under the weight-gradient GEMM, and the SP re-gathers under the
//!   input-gradient GEMM. `comm_overlap` (`--tp-comm-overlap`, off by
//!   default; it needs SP, which Megatron asserts) is Transformer Engine's
//!   userbuffers overlap (REAL-SYSTEMS-2 section 1.3): each block
//!   collective runs against the one GEMM TE pairs it with
//!   ([`UbOverlap`]): the forward all-gathers pipelined with the QKV and
//!   fc1 GEMMs that consume them, the forward reduce-scatters with the
//!   projection and fc2 GEMMs that produce them, the backward all-gathers
//!   of the output gradient with the projection's and fc2's input-gradient
//!   GEMMs, split into `t` chunks (the ring exchange: `c / t` stays
//!   exposed, and what the GEMM cannot cover, `(c - g)(t - 1) / t`); the
//!   SP re-gathers in bulk under the QKV and fc1 input-gradient GEMMs and
//!   the input-gradient reduce-scatters under their weight-gradient GEMMs
//!   (`tp_comm_bulk_wgrad` / `tp_comm_bulk_dgrad`: `max(0, c - g)`). Each
//!   GEMM's time is its FLOP share of the pass ([`gemm_shares`]). The
//!   embedding's and head's collectives stay exposed (the output layer and
//!   the embedding are not TE userbuffers layers).
//! * **Memory**: parameters per rank ([`TensorParallel::block_params`]) and
//!   activations per rank ([`TensorParallel::activations`]): Korthikanti's
//!   accounting, `sbh(10 + 24/t + 5as/(ht))` without SP and
//!   `(34sbh + 5as^2b)/t` with SP for a GPT block, generalised through
//!   [`crate::activation`]'s tensor lists.
//!
//! A TP group of mixed GPU types is allowed: every collective waits for
//! its slowest member, so the group runs at that member's pace (as a real
//! job would); planners build groups of one type.

use crate::activation::BlockActivations;
use crate::comm::CollectiveKind;
use crate::error::PlanError;
use crate::model::{Family, ModelSpec};
use crate::precision::NumFormat;

/// Largest TP degree the cost model prices (the predictor's per-degree
/// tables): 64. Megatron and torchtitan run TP inside one NVLink domain
/// (8 GPUs per HGX node, 72 per NVL72 rack); beyond 64 a rank's GEMMs are
/// too narrow to be worth it for any model in the catalog.
pub const MAX_TP: u32 = 64;

/// How one stage's GPUs split each block across a TP group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorParallel {
    /// GPUs per TP group `t` (1: no tensor parallelism).
    pub degree: u32,
    /// Sequence parallelism: norms, dropout and residuals on `s/t` tokens,
    /// all-gathers and reduce-scatters instead of all-reduces.
    pub sequence_parallel: bool,
    /// TP communication overlapped with the GEMMs of both passes
    /// (Megatron's `--tp-comm-overlap`, torchtitan's async TP).
    pub comm_overlap: bool,
    /// Expert parallelism `e` (1: none): each MoE block's routed experts
    /// split over `e` data-parallel replicas (Megatron-Core's
    /// `--expert-model-parallel-size`, torchtitan's
    /// `expert_parallel_degree`), tokens dispatched to them by all-to-all
    /// ([`crate::expert_parallel`]).
    pub experts: u32,
    /// GPUs each routed expert is split over (expert-tensor parallelism,
    /// Megatron-Core's `--expert-tensor-parallel-size`): the TP degree
    /// (Megatron's default) or 1 (whole experts, Megatron's advice for
    /// fine-grained experts: the EP group then runs over TP ranks too).
    pub expert_tensor: u32,
    /// How tokens reach the experts under EP.
    pub dispatcher: crate::experts::Dispatcher,
}

/// Which pass a TP collective belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The forward (and a recompute of it).
    Forward,
    /// The backward.
    Backward,
}

/// What a backward TP collective runs under on Megatron's default path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Under {
    /// Nothing: on the critical path.
    Nothing,
    /// The weight-gradient GEMM of its layer (input-gradient all-reduce /
    /// reduce-scatter, launched asynchronously).
    WeightGrad,
    /// The input-gradient GEMM of its layer (SP's re-gather of the input).
    InputGrad,
}

/// The linear layers of a block TP splits: the fused QKV and the MLP's
/// first linear (with SwiGLU the gate and up projections) column-parallel,
/// the attention projection and the MLP's last linear row-parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linear {
    /// Query, key and value projections.
    Qkv,
    /// Attention output projection.
    Proj,
    /// MLP input (gate and up with SwiGLU).
    Fc1,
    /// MLP output.
    Fc2,
}

impl Linear {
    /// Every layer, in [`GemmShares`] order.
    pub const ALL: [Linear; 4] = [Linear::Qkv, Linear::Proj, Linear::Fc1, Linear::Fc2];

    /// Parameters of the layer's weight in `model` (unsplit); with experts,
    /// the weights one token meets (`k` routed experts and the shared
    /// ones), which is what the layer's GEMM time scales with.
    pub fn params(self, model: &ModelSpec) -> f64 {
        let (h, q, kv) = (
            model.hidden as f64,
            model.q_dim() as f64,
            model.kv_dim() as f64,
        );
        let f = model.mlp_width_per_token();
        match self {
            Linear::Qkv => h * (q + 2.0 * kv),
            Linear::Proj => q * h,
            Linear::Fc1 if model.family.is_llama_like() => 2.0 * h * f,
            Linear::Fc1 => h * f,
            Linear::Fc2 => f * h,
        }
    }
}

/// How Transformer Engine's userbuffers overlap one block TP collective
/// (`--tp-comm-overlap`, REAL-SYSTEMS-2 section 1.3): the GEMM it runs
/// against, and whether that GEMM is split into `t` chunks pipelined with
/// the collective's chunks (the all-gathers and reduce-scatters of the
/// forward, the output-gradient all-gathers of the backward) or runs
/// whole beside it (the backward's bulk overlaps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UbOverlap {
    /// The layer whose GEMM of the collective's pass it runs against
    /// (forward: its output GEMM; backward: its input- or weight-gradient
    /// GEMM, which take the same time).
    pub layer: Linear,
    /// Pipelined in chunks (else in bulk).
    pub pipelined: bool,
}

/// The share of a block's pass compute in each linear layer's GEMM, in
/// [`Linear::ALL`] order, from FLOPs (as [`weight_grad_share`]): `fwd[l]`
/// its forward GEMM in the forward, `bwd[l]` each of its input- and
/// weight-gradient GEMMs in the backward.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmShares {
    /// Forward GEMM of each layer, share of the forward.
    pub fwd: [f64; 4],
    /// Input- (or weight-) gradient GEMM of each layer, share of the backward.
    pub bwd: [f64; 4],
}

impl GemmShares {
    /// The weight-gradient GEMMs' share of the backward (all layers).
    pub fn weight_grads(&self) -> f64 {
        self.bwd.iter().sum()
    }
}

/// The [`GemmShares`] of `model`'s block at `seq_len`: layer `l`'s GEMM
/// `2 P_l s` FLOPs per sample against the forward's `sum_l 2 P_l s +
/// score` and the backward's twice that (the attention core's score
/// FLOPs `4 s^2 h`, half under a causal mask).
pub fn gemm_shares(model: &ModelSpec, seq_len: u32) -> GemmShares {
    let s = model.tokens_per_sample(seq_len) as f64;
    let gemm = Linear::ALL.map(|l| 2.0 * l.params(model) * s);
    let linear: f64 = gemm.iter().sum();
    let score = model.score_flops_fwd(seq_len) * if model.family.is_causal() { 0.5 } else { 1.0 };
    GemmShares {
        fwd: gemm.map(|g| g / (linear + score)),
        bwd: gemm.map(|g| g / (2.0 * linear + 2.0 * score)),
    }
}

/// One TP collective of a block (or of the embedding or head) per micro-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TpCollective {
    /// Its pass.
    pub pass: Pass,
    /// Its kind.
    pub kind: CollectiveKind,
    /// Bytes of the full (gathered / reduced) tensor.
    pub bytes: f64,
    /// What it overlaps on the default path.
    pub under: Under,
    /// What it overlaps under `--tp-comm-overlap` (`None`: nothing, the
    /// embedding's and head's collectives).
    pub ub: Option<UbOverlap>,
}

impl TpCollective {
    /// A collective of `kind` in `pass` over a tensor of `bytes`, running
    /// `under` a GEMM on the default path, overlapped as `ub` says under
    /// `--tp-comm-overlap`.
    fn of(
        pass: Pass,
        kind: CollectiveKind,
        bytes: f64,
        under: Under,
        ub: Option<UbOverlap>,
    ) -> TpCollective {
        TpCollective {
            pass,
            kind,
            bytes,
            under,
            ub,
        }
    }

    /// Each rank's piece for the communication model: the whole tensor for
    /// an all-reduce, its `1/t` share for an all-gather or reduce-scatter.
    pub fn piece_bytes(&self, t: u32) -> f64 {
        self.kind.piece_bytes(self.bytes, t.max(1) as usize)
    }
}

impl TensorParallel {
    /// No tensor parallelism.
    pub const NONE: TensorParallel = TensorParallel {
        degree: 1,
        sequence_parallel: false,
        comm_overlap: false,
        experts: 1,
        expert_tensor: 1,
        dispatcher: crate::experts::Dispatcher::AllToAll,
    };

    /// `degree` ranks, with or without SP, Megatron's default overlap.
    pub fn new(degree: u32, sequence_parallel: bool) -> TensorParallel {
        TensorParallel {
            degree: degree.max(1),
            sequence_parallel: sequence_parallel && degree > 1,
            comm_overlap: false,
            experts: 1,
            expert_tensor: degree.max(1),
            dispatcher: crate::experts::Dispatcher::AllToAll,
        }
    }

    /// The same split with the routed experts over `e` replicas (expert
    /// parallelism).
    pub fn with_experts(self, e: u32) -> TensorParallel {
        TensorParallel {
            experts: e.max(1),
            ..self
        }
    }

    /// The same split with tokens dispatched by `d`.
    pub fn with_dispatcher(self, d: crate::experts::Dispatcher) -> TensorParallel {
        TensorParallel {
            dispatcher: d,
            ..self
        }
    }

    /// The same split with each routed expert over `te` GPUs (expert-TP:
    /// the TP degree or 1).
    pub fn with_expert_tensor(self, te: u32) -> TensorParallel {
        TensorParallel {
            expert_tensor: te.max(1),
            ..self
        }
    }

    /// How many GPUs of a TP group share one expert-TP group's tokens the
    /// other way: `t / t_e` (1 under expert-TP = TP; `t` with whole
    /// experts, each TP rank then dispatching its own sequence shard).
    pub fn expert_fold(&self) -> u32 {
        (self.degree.max(1) / self.expert_tensor.max(1)).max(1)
    }

    /// Routed copies per routed copy of the mean that one rank computes for
    /// a replica's micro-batch of `tokens` tokens: the busiest rank of its
    /// expert-parallel group ([`crate::experts::Moe::busiest_rank_load`] at
    /// the rank's mean share, `k T t_e / t` copies), which every rank of
    /// the group waits for; the capacity padding without EP; 1 for a dense
    /// model.
    pub fn expert_load(&self, model: &ModelSpec, tokens: f64) -> f64 {
        model.uniform_moe().map_or(1.0, |m| {
            let t = self.degree.max(1) as f64;
            let te = self.priced_expert_tensor() as f64;
            m.busiest_rank_load(self.experts.max(1), m.top_k as f64 * tokens * te / t)
        })
    }

    /// The expert-TP degree as it prices: `t_e` clamped to 1..=`t`, and
    /// `t` without expert parallelism (where it is moot).
    pub fn priced_expert_tensor(&self) -> u32 {
        if self.experts <= 1 {
            self.degree.max(1)
        } else {
            self.expert_tensor.clamp(1, self.degree.max(1))
        }
    }

    /// Whether blocks are split (`t > 1`).
    pub fn is_on(&self) -> bool {
        self.degree > 1
    }

    /// Whether a block is split over model-parallel GPUs: TP (`t > 1`) or
    /// expert parallelism (`e > 1`). Such a block communicates inside its
    /// groups, and a rank's share of it is priced by its own cost row.
    pub fn communicates(&self) -> bool {
        self.degree > 1 || self.experts > 1
    }

    /// Checks the degree against `model` (Megatron's asserts): 1..=[`MAX_TP`],
    /// dividing the query heads, the KV heads and the MLP width. `origin` /
    /// `field` name where the degree came from.
    pub fn check(
        degree: u32,
        model: &ModelSpec,
        origin: &str,
        field: &str,
    ) -> Result<(), PlanError> {
        let bad = |msg: String| Err(PlanError::invalid(origin, field, msg));
        if degree == 0 || degree > MAX_TP {
            return bad(format!(
                "expected a TP degree in 1..={MAX_TP}, got {degree}"
            ));
        }
        if degree == 1 {
            return Ok(());
        }
        if model.family == Family::Vit {
            return bad(format!(
                "{} is a ViT: tensor parallelism is modelled for language models (vocabulary-parallel embedding and loss), use --tp 1",
                model.name
            ));
        }
        for (what, n) in split_widths(model) {
            if n % degree != 0 {
                return bad(format!(
                    "TP degree {degree} does not divide the {what} of {} ({n}): every rank needs an equal share (Megatron asserts it); use one of {}",
                    model.name,
                    crate::lists::runs(&degrees(model))
                ));
            }
        }
        Ok(())
    }

    /// Parameters one rank holds of one block: the matmul weights over `t`
    /// (and the column-parallel biases), the norms and the row-parallel
    /// biases replicated.
    pub fn block_params(&self, model: &ModelSpec) -> f64 {
        let t = self.degree as f64;
        let (h, kv, f) = (model.hidden as f64, model.kv_dim() as f64, model.ffn as f64);
        let routed = model.routed_expert_params() as f64;
        let matmul = model.block_matmul_params() as f64 - routed;
        let rest = model.params_per_block() as f64 - matmul - routed;
        // GPT / BERT biases: QKV (h + 2kv) and fc1 (f) column-parallel,
        // out-projection and fc2 (h each) replicated, as are the norms.
        let column_biases = if model.family.is_llama_like() {
            0.0
        } else {
            h + 2.0 * kv + f
        };
        (matmul + column_biases) / t + (rest - column_biases) + self.expert_block_params(model)
    }

    /// Parameters one rank holds of one block's routed experts: `E / e`
    /// experts, each split over `t_e` (0 for a model without experts in
    /// every block). What the expert-data-parallel group reduces
    /// ([`crate::expert_parallel`]).
    pub fn expert_block_params(&self, model: &ModelSpec) -> f64 {
        model.routed_expert_params() as f64
            / (self.expert_tensor.max(1) * self.experts.max(1)) as f64
    }

    /// Parameters one rank holds of the embedding: the word table over `t`
    /// (vocabulary-parallel), learned positions and norms replicated.
    pub fn embedding_params(&self, model: &ModelSpec) -> f64 {
        let word = model.vocab as f64 * model.hidden as f64;
        let all = model.embedding_params() as f64;
        word / self.degree as f64 + (all - word)
    }

    /// Parameters one rank holds of the head: the output layer over `t`
    /// (column-parallel over the vocabulary), the final norm replicated.
    pub fn head_params(&self, model: &ModelSpec) -> f64 {
        let lm = if model.tied_embeddings {
            0.0
        } else {
            model.vocab as f64 * model.hidden as f64
        };
        let all = model.head_params() as f64;
        lm / self.degree as f64 + (all - lm)
    }

    /// The TP collectives of one block on a micro-batch of `tokens` tokens
    /// (`samples x tokens per sample`) in `dtype` (module docs); empty at `t = 1`.
    pub fn block_collectives(
        &self,
        model: &ModelSpec,
        tokens: f64,
        dtype: NumFormat,
    ) -> Vec<TpCollective> {
        if !self.is_on() {
            return Vec::new();
        }
        let s = activation_bytes(model, tokens, dtype);
        let c = |pass, kind, under, layer, pipelined| {
            let ub = Some(UbOverlap { layer, pipelined });
            TpCollective::of(pass, kind, s, under, ub)
        };
        use CollectiveKind::*;
        use Linear::*;
        use Pass::*;
        if self.sequence_parallel {
            vec![
                c(Forward, AllGather, Under::Nothing, Qkv, true),
                c(Forward, ReduceScatter, Under::Nothing, Proj, true),
                c(Forward, AllGather, Under::Nothing, Fc1, true),
                c(Forward, ReduceScatter, Under::Nothing, Fc2, true),
                // Backward per sub-block: the output gradient gathered (the
                // transpose of the forward's reduce-scatter), the input
                // re-gathered for the weight gradient under the
                // input-gradient GEMM, the input gradient reduce-scattered
                // under the weight-gradient GEMM.
                c(Backward, AllGather, Under::Nothing, Fc2, true),
                c(Backward, AllGather, Under::InputGrad, Fc1, false),
                c(Backward, ReduceScatter, Under::WeightGrad, Fc1, false),
                c(Backward, AllGather, Under::Nothing, Proj, true),
                c(Backward, AllGather, Under::InputGrad, Qkv, false),
                c(Backward, ReduceScatter, Under::WeightGrad, Qkv, false),
            ]
        } else {
            // (TE's userbuffers need SP; without it the all-reduces are
            // paired as the reduce-scatters would be.)
            vec![
                c(Forward, AllReduce, Under::Nothing, Proj, true),
                c(Forward, AllReduce, Under::Nothing, Fc2, true),
                c(Backward, AllReduce, Under::WeightGrad, Fc1, false),
                c(Backward, AllReduce, Under::WeightGrad, Qkv, false),
            ]
        }
    }

    /// The TP collectives of the embedding on `tokens` tokens: the
    /// vocabulary-parallel lookup's partial outputs all-reduced (or, with
    /// SP, reduce-scattered along the sequence) in the forward; with SP the
    /// output gradient all-gathered in the backward.
    pub fn embedding_collectives(
        &self,
        model: &ModelSpec,
        tokens: f64,
        dtype: NumFormat,
    ) -> Vec<TpCollective> {
        if !self.is_on() {
            return Vec::new();
        }
        let s = activation_bytes(model, tokens, dtype);
        let c = |pass, kind| TpCollective::of(pass, kind, s, Under::Nothing, None);
        if self.sequence_parallel {
            vec![
                c(Pass::Forward, CollectiveKind::ReduceScatter),
                c(Pass::Backward, CollectiveKind::AllGather),
            ]
        } else {
            vec![c(Pass::Forward, CollectiveKind::AllReduce)]
        }
    }

    /// The TP collectives of the head on `tokens` tokens: with SP its input
    /// all-gathered (forward) and its input gradient reduce-scattered
    /// (backward), without SP the input gradient all-reduced (the
    /// column-parallel output layer's `f`); the vocab-parallel
    /// cross-entropy's three fp32 all-reduces of one value per token
    /// (max, target logit, sum of exponentials) in the forward.
    pub fn head_collectives(
        &self,
        model: &ModelSpec,
        tokens: f64,
        dtype: NumFormat,
    ) -> Vec<TpCollective> {
        if !self.is_on() {
            return Vec::new();
        }
        let s = activation_bytes(model, tokens, dtype);
        let c = |pass, kind, bytes| TpCollective::of(pass, kind, bytes, Under::Nothing, None);
        let mut v = if self.sequence_parallel {
            vec![
                c(Pass::Forward, CollectiveKind::AllGather, s),
                c(Pass::Backward, CollectiveKind::ReduceScatter, s),
            ]
        } else {
            vec![c(Pass::Backward, CollectiveKind::AllReduce, s)]
        };
        v.extend((0..3).map(|_| c(Pass::Forward, CollectiveKind::AllReduce, 4.0 * tokens)));
        v
    }

    /// Exposed time of `collectives` in one pass, ms: each priced by
    /// `price` (kind, per-rank piece bytes) and hidden as the module docs
    /// say behind a pass whose compute takes `pass_ms`, its GEMMs the
    /// shares `gemms` of it: on the default path the backward's
    /// collectives under all the weight- or input-gradient GEMMs; with
    /// `comm_overlap` each under its own GEMM ([`UbOverlap`]), pipelined
    /// in `t` chunks or in bulk.
    pub fn exposed_ms(
        &self,
        collectives: &[TpCollective],
        pass: Pass,
        pass_ms: f64,
        gemms: &GemmShares,
        mut price: impl FnMut(CollectiveKind, f64) -> f64,
    ) -> f64 {
        let (mut exposed, mut under_w, mut under_i) = (0.0, 0.0, 0.0);
        let n = self.degree.max(1) as f64;
        for c in collectives.iter().filter(|c| c.pass == pass) {
            let ms = price(c.kind, c.piece_bytes(self.degree));
            match (self.comm_overlap, c.ub, c.under) {
                (true, Some(ub), _) => {
                    let i = Linear::ALL.iter().position(|&l| l == ub.layer).unwrap_or(0);
                    let share = match pass {
                        Pass::Forward => gemms.fwd[i],
                        Pass::Backward => gemms.bwd[i],
                    };
                    let gemm = pass_ms * share;
                    exposed += if ub.pipelined {
                        // Two-stage pipeline of t chunks: the first chunk's
                        // communication (or the last's) is not covered.
                        ms / n + (ms - gemm).max(0.0) * (n - 1.0) / n
                    } else {
                        (ms - gemm).max(0.0)
                    };
                }
                (true, None, _) | (false, _, Under::Nothing) => exposed += ms,
                (false, _, Under::WeightGrad) => under_w += ms,
                (false, _, Under::InputGrad) => under_i += ms,
            }
        }
        if self.comm_overlap {
            return exposed;
        }
        let gemm = pass_ms * gemms.weight_grads();
        exposed + (under_w - gemm).max(0.0) + (under_i - gemm).max(0.0)
    }

    /// A block's activation sizes on one rank (bytes, per sample or per
    /// micro-batch alike), from the unsplit sizes `full` and the part of
    /// them that stays replicated without SP, `replicated`
    /// ([`replicated_activations`]): `replicated x (1/t with SP, else 1) +
    /// (full - replicated) / t`. The head's logits are vocabulary-parallel
    /// (`1/t` always).
    pub fn activations(
        &self,
        full: &BlockActivations,
        replicated: &BlockActivations,
    ) -> BlockActivations {
        if !self.is_on() {
            return *full;
        }
        let t = self.degree as f64;
        let keep = if self.sequence_parallel { 1.0 / t } else { 1.0 };
        let f = |a: f64, r: f64| r.min(a) * keep + (a - r.min(a)) / t;
        BlockActivations {
            checkpoint: f(full.checkpoint, replicated.checkpoint),
            saved_none: f(full.saved_none, replicated.saved_none),
            saved_selective: f(full.saved_selective, replicated.saved_selective),
            saved_attention: f(full.saved_attention, replicated.saved_attention),
            grad_work: f(full.grad_work, replicated.grad_work),
            nograd_work: f(full.nograd_work, replicated.nograd_work),
            head_work: full.head_work / t,
        }
    }
}

/// Bytes of the activation tensor every TP collective of a block, the
/// embedding and the head moves: `tokens x h` in the compute dtype.
fn activation_bytes(model: &ModelSpec, tokens: f64, dtype: NumFormat) -> f64 {
    tokens * model.hidden as f64 * dtype.bytes()
}

/// The part of each of a block's activation sizes ([`BlockActivations::new`],
/// per sample) that is replicated on every TP rank without SP: the tensors
/// on the full hidden dimension outside the split layers. GPT/BERT: the two
/// LayerNorm inputs, the QKV and fc1 inputs (`e*s*4h`) and the two 1-byte
/// dropout masks after the row-parallel layers (`2*s*h`); LLaMA: per
/// RMSNorm its fp32 input copy, normalised copy and output (`8*s*h +
/// e*s*4h`; `fused`: its half input, `rstd` and output, `e*s*4h + 8*s`). Op-level selective keeps the block input and (LLaMA) the
/// row-parallel `down` output replicated; core-attention recompute keeps
/// what `none` keeps outside the scores. Full recompute keeps the block
/// input (replicated), a checkpointed forward holds the input, the
/// intermediate gradients are split.
pub fn replicated_activations(
    model: &ModelSpec,
    seq_len: u32,
    dtype: NumFormat,
    fused: bool,
) -> BlockActivations {
    let e = dtype.bytes();
    let s = model.tokens_per_sample(seq_len) as f64;
    let h = model.hidden as f64;
    let none = if model.family.is_llama_like() && fused {
        // Fused norms keep their half input and rstd.
        e * s * 4.0 * h + 8.0 * s
    } else if model.family.is_llama_like() {
        8.0 * s * h + e * s * 4.0 * h
    } else {
        e * s * 4.0 * h
            + if model.family.has_dropout() {
                2.0 * s * h
            } else {
                0.0
            }
    };
    let selective = if model.family.is_llama_like() {
        e * s * 2.0 * h
    } else {
        e * s * h
    };
    BlockActivations {
        checkpoint: e * s * h,
        saved_none: none,
        saved_selective: selective,
        saved_attention: none,
        grad_work: 0.0,
        nograd_work: e * s * h,
        head_work: 0.0,
    }
}

/// The TP degrees `model` can run: every `t` in 2..=[`MAX_TP`] dividing
/// its query heads, KV heads and MLP width, ascending (with 1 first); 1
/// alone for a ViT ([`TensorParallel::check`]).
pub fn degrees(model: &ModelSpec) -> Vec<u32> {
    if model.family == Family::Vit {
        // Tensor parallelism is modelled for language models only.
        return vec![1];
    }
    let widths = split_widths(model);
    (1..=MAX_TP)
        .filter(|&t| widths.iter().all(|(_, n)| n.is_multiple_of(t)))
        .collect()
}

/// The expert-parallel degrees `model` takes, ascending: every divisor of
/// its expert count with experts in every block, `[1]` otherwise (a dense
/// model, or dense and MoE blocks mixed, which EP does not price yet; as
/// [`degrees`] for TP). [`crate::expert_parallel::check_degree`] says why
/// a degree is not among them.
pub fn expert_degrees(model: &ModelSpec) -> Vec<u32> {
    match model.uniform_moe() {
        Some(m) => (1..=m.experts)
            .filter(|&e| m.experts.is_multiple_of(e))
            .collect(),
        None => vec![1],
    }
}

/// What tensor parallelism splits, each of which every TP degree must
/// divide: the query and key/value heads, and the MLP width, or with
/// experts in every block each expert's width and the shared experts'
/// (expert-tensor parallelism = TP splits each).
fn split_widths(model: &ModelSpec) -> Vec<(&'static str, u32)> {
    let mut v = vec![
        ("attention heads", model.heads),
        ("key/value heads", model.kv_heads),
    ];
    match model.uniform_moe() {
        Some(m) => {
            v.push(("expert width", m.expert_ffn));
            if m.shared_experts > 0 {
                v.push(("shared expert width", m.shared_expert_ffn));
            }
        }
        None => v.push(("MLP width", model.ffn)),
    }
    v
}

/// The share of a block's backward compute in each of its two GEMM
/// families (weight gradients, input gradients), from FLOPs: the linear
/// layers' `2 x matmul params x tokens` each, against the attention
/// core's backward (twice the forward's score FLOPs, half of them skipped
/// under a causal mask). What the default overlap hides behind, and the
/// weight-gradient part zero-bubble schedules split off.
pub fn weight_grad_share(model: &ModelSpec, seq_len: u32) -> f64 {
    let s = model.tokens_per_sample(seq_len) as f64;
    let linear = 2.0 * model.block_active_matmul_params() as f64 * s;
    let score = model.score_flops_fwd(seq_len) * if model.family.is_causal() { 0.5 } else { 1.0 };
    linear / (2.0 * linear + 2.0 * score)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelCatalog;
    use crate::strategy::Attention;

    fn model(name: &str) -> ModelSpec {
        ModelCatalog::builtin()
            .lookup(name, "test")
            .unwrap()
            .clone()
    }

    #[test]
    fn degrees_divide_heads_kv_heads_and_ffn() {
        let m = model("llama2-70b");
        assert_eq!(degrees(&m), vec![1, 2, 4, 8]);
        assert!(TensorParallel::check(8, &m, "x", "tp").is_ok());
        let e = TensorParallel::check(16, &m, "x", "tp")
            .unwrap_err()
            .to_string();
        assert!(e.contains("key/value heads"), "{e}");
    }

    /// Korthikanti et al. 2022, Table 2 / section 4: per-rank activation
    /// bytes per layer of a GPT block (16-bit, dropout, ffn = 4h, kv = h).
    #[test]
    fn per_rank_activations_are_korthikantis_formulas() {
        let m = model("gpt-2.7b");
        assert_eq!((m.ffn, m.kv_heads), (4 * m.hidden, m.heads));
        let seq = 2048;
        let (s, h, a) = (seq as f64, m.hidden as f64, m.heads as f64);
        let full = BlockActivations::new(&m, seq, NumFormat::Fp16, Attention::Eager, false);
        let rep = replicated_activations(&m, seq, NumFormat::Fp16, false);
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y;
        assert!(close(full.saved_none, s * h * (34.0 + 5.0 * a * s / h)));
        for t in [2u32, 4, 8] {
            let tf = t as f64;
            let plain = TensorParallel::new(t, false).activations(&full, &rep);
            let sp = TensorParallel::new(t, true).activations(&full, &rep);
            assert!(close(
                plain.saved_none,
                s * h * (10.0 + 24.0 / tf + 5.0 * a * s / (h * tf))
            ));
            assert!(close(
                sp.saved_none,
                s * h * (34.0 / tf + 5.0 * a * s / (h * tf))
            ));
            // Selective (core attention) recompute: the 5as^2 term goes.
            assert!(close(plain.saved_attention, s * h * (10.0 + 24.0 / tf)));
            assert!(close(sp.saved_attention, s * h * 34.0 / tf));
            // Full recompute keeps the 2sbh input, /t with SP.
            assert!(close(plain.checkpoint, 2.0 * s * h));
            assert!(close(sp.checkpoint, 2.0 * s * h / tf));
        }
    }

    /// Shoeybi et al. section 3 / Korthikanti section 4.2: per layer 4
    /// all-reduces of `sbh` without SP; with SP 4 all-gathers + 2
    /// reduce-scatters... of which 2 are re-gathers.
    #[test]
    fn block_collectives_are_megatrons() {
        let m = model("gpt-2.7b");
        let tokens = 4.0 * 2048.0;
        let bytes = tokens * m.hidden as f64 * 2.0;
        let count = |v: &[TpCollective], p: Pass, k: CollectiveKind| {
            v.iter().filter(|c| c.pass == p && c.kind == k).count()
        };
        let plain = TensorParallel::new(4, false).block_collectives(&m, tokens, NumFormat::Fp16);
        assert_eq!(plain.len(), 4);
        assert_eq!(count(&plain, Pass::Forward, CollectiveKind::AllReduce), 2);
        assert_eq!(count(&plain, Pass::Backward, CollectiveKind::AllReduce), 2);
        let sp = TensorParallel::new(4, true).block_collectives(&m, tokens, NumFormat::Fp16);
        assert_eq!(count(&sp, Pass::Forward, CollectiveKind::AllGather), 2);
        assert_eq!(count(&sp, Pass::Forward, CollectiveKind::ReduceScatter), 2);
        assert_eq!(count(&sp, Pass::Backward, CollectiveKind::AllGather), 4);
        assert_eq!(count(&sp, Pass::Backward, CollectiveKind::ReduceScatter), 2);
        assert!(plain.iter().chain(&sp).all(|c| c.bytes == bytes));
        // Ring bytes per rank: SP's forward equals the all-reduces'.
        let ring = |v: &[TpCollective], p: Pass| -> f64 {
            v.iter()
                .filter(|c| c.pass == p)
                .map(|c| match c.kind {
                    CollectiveKind::AllReduce => 2.0 * 3.0 / 4.0 * c.bytes,
                    _ => 3.0 / 4.0 * c.bytes,
                })
                .sum()
        };
        assert_eq!(ring(&plain, Pass::Forward), ring(&sp, Pass::Forward));
        assert_eq!(
            ring(&sp, Pass::Backward),
            1.5 * ring(&plain, Pass::Backward)
        );
        assert!(TensorParallel::NONE
            .block_collectives(&m, tokens, NumFormat::Fp16)
            .is_empty());
    }

    /// `--tp-comm-overlap` as Transformer Engine's userbuffers run it: a
    /// collective no longer than its GEMM leaves `1/t` of itself exposed
    /// when pipelined and nothing in bulk; a longer one what the GEMM does
    /// not cover; the embedding's and head's stay exposed. The default
    /// path exposes every forward collective.
    #[test]
    fn userbuffers_overlap_each_collective_with_its_gemm() {
        let m = model("gpt-2.7b");
        let shares = gemm_shares(&m, 2048);
        let total: f64 = shares.fwd.iter().sum();
        assert!((shares.weight_grads() - weight_grad_share(&m, 2048)).abs() < 1e-12);
        assert!((total - 2.0 * shares.weight_grads()).abs() < 1e-12);
        let params: f64 = Linear::ALL.iter().map(|l| l.params(&m)).sum();
        assert_eq!(params, m.block_matmul_params() as f64);
        let t = 4u32;
        let mut ub = TensorParallel::new(t, true);
        ub.comm_overlap = true;
        let plain = TensorParallel::new(t, true);
        let cs = ub.block_collectives(&m, 2048.0, NumFormat::Bf16);
        // Every collective 1 ms, the forward 100 ms: each GEMM covers it.
        let fwd = 100.0;
        let exposed = ub.exposed_ms(&cs, Pass::Forward, fwd, &shares, |_, _| 1.0);
        assert!((exposed - 4.0 / t as f64).abs() < 1e-9, "{exposed}");
        assert_eq!(
            plain.exposed_ms(&cs, Pass::Forward, fwd, &shares, |_, _| 1.0),
            4.0
        );
        // Backward: 2 pipelined all-gathers (1/t each), 4 bulk ones hidden.
        let bwd = ub.exposed_ms(&cs, Pass::Backward, 2.0 * fwd, &shares, |_, _| 1.0);
        assert!((bwd - 2.0 / t as f64).abs() < 1e-9, "{bwd}");
        // A collective far longer than its GEMM: what is not covered shows.
        let long = ub.exposed_ms(&cs, Pass::Forward, 0.0, &shares, |_, _| 1.0);
        assert!((long - 4.0).abs() < 1e-9, "{long}");
        let head = ub.head_collectives(&m, 2048.0, NumFormat::Bf16);
        assert_eq!(
            ub.exposed_ms(&head, Pass::Forward, fwd, &shares, |_, _| 1.0),
            4.0
        );
    }

    #[test]
    fn rank_parameters_add_up_to_the_block() {
        for name in ["gpt-2.7b", "llama2-70b"] {
            let m = model(name);
            for &t in &degrees(&m) {
                let tp = TensorParallel::new(t, false);
                let all = m.params_per_block() as f64;
                let per = tp.block_params(&m);
                assert!(per * t as f64 >= all - 1e-6 && per <= all, "{name} t={t}");
                // Replicated parts are small: under 1% of the block.
                assert!(per * t as f64 <= all * 1.01 * (t as f64).max(1.0));
            }
        }
    }
}
