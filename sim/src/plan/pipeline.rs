//! The pipeline of a pipeline-parallel [`crate::plan::Plan`]: its stages
//! (contiguous blocks, each held by one GPU or a data-parallel group),
//! micro-batches and schedule, the per-GPU entries it implies and its
//! validation. How such a plan runs (its ops, its estimate, the partition
//! the planners search) is [`crate::pipeline`].

use super::rank::RankPlan;
use crate::error::PlanError;
use crate::strategy::{Accumulation, Offload, Sharding, Strategy};
use crate::tensor::TensorParallel;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The order in which each stage runs its micro-batches' forwards and
/// backwards ([`crate::pipeline::schedule::actions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PipeSchedule {
    /// GPipe (PyTorch `ScheduleGPipe`): every forward, then every backward;
    /// each stage keeps all `m` micro-batches' activations.
    #[serde(rename = "gpipe")]
    Gpipe,
    /// 1F1B (PipeDream-Flush; DeepSpeed `TrainSchedule`, Megatron, PyTorch
    /// `Schedule1F1B`): `p - s - 1` warm-up forwards on stage `s`, then one
    /// forward and one backward alternately; at most `min(p - s, m)`
    /// micro-batches in flight. Same bubble as GPipe.
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Interleaved 1F1B (Narayanan et al. 2021; Megatron's
    /// `forward_backward_pipelining_with_interleaving`): each GPU holds
    /// `v` model chunks ([`Pipeline::virtual_stages`]), micro-batches
    /// run in groups of `p` through the chunks; the bubble shrinks to
    /// `(p - 1) / (v m)` of the ideal time, point-to-point traffic grows
    /// `v`-fold. Needs `m` a multiple of `p`.
    #[serde(rename = "interleaved")]
    Interleaved,
    /// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024):
    /// 1F1B with each backward split into its input-gradient part `B`
    /// (sent on at once) and its weight-gradient part `W`, stage `s`
    /// deferring up to `s` of its `W`s into the bubbles; bubble `(p - 1)
    /// (T_F + T_B - T_W)`, peak memory no above 1F1B's.
    #[serde(rename = "zb-h1")]
    ZbH1,
}

impl PipeSchedule {
    /// Every schedule, in the order planners try them.
    pub const ALL: [PipeSchedule; 4] = [
        PipeSchedule::OneFOneB,
        PipeSchedule::Gpipe,
        PipeSchedule::Interleaved,
        PipeSchedule::ZbH1,
    ];

    /// Name in files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PipeSchedule::Gpipe => "gpipe",
            PipeSchedule::OneFOneB => "1f1b",
            PipeSchedule::Interleaved => "interleaved",
            PipeSchedule::ZbH1 => "zb-h1",
        }
    }

    /// Parses a name (`gpipe`, `1f1b`, `interleaved`, `zb-h1` and their
    /// other spellings).
    pub fn parse(s: &str) -> Option<PipeSchedule> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "gpipe" => Some(PipeSchedule::Gpipe),
            "1f1b" | "one-f-one-b" | "pipedream-flush" => Some(PipeSchedule::OneFOneB),
            "interleaved" | "interleaved-1f1b" | "interleaved1f1b" | "vpp" => {
                Some(PipeSchedule::Interleaved)
            }
            "zb-h1" | "zbh1" | "zb1p" | "zero-bubble" => Some(PipeSchedule::ZbH1),
            _ => None,
        }
    }

    /// Whether the backward is split into input- and weight-gradient parts.
    pub fn splits_backward(self) -> bool {
        match self {
            PipeSchedule::ZbH1 => true,
            PipeSchedule::Gpipe | PipeSchedule::OneFOneB | PipeSchedule::Interleaved => false,
        }
    }

    /// Activations stage `s` of `p` holds at most, of `m` micro-batches,
    /// in units of one micro-batch through the whole stage (`v` chunks
    /// per GPU; a chunk in flight counts `1/v`).
    pub fn in_flight(self, p: usize, s: usize, m: u32, v: u32) -> f64 {
        let m = m.max(1);
        match self {
            PipeSchedule::Gpipe => m as f64,
            PipeSchedule::OneFOneB | PipeSchedule::ZbH1 => {
                (p.saturating_sub(s) as u32).clamp(1, m) as f64
            }
            PipeSchedule::Interleaved => {
                let v = v.max(1);
                let total = m * v;
                let warmup = if m as usize == p {
                    total
                } else {
                    (2 * p.saturating_sub(s + 1) as u32 + (v - 1) * p as u32).min(total)
                };
                (warmup + 1).min(total) as f64 / v as f64
            }
        }
    }
}

impl fmt::Display for PipeSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One stage: a contiguous range of blocks and the GPUs that hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    /// Transformer blocks of the stage (at least one); stages take
    /// consecutive blocks in order, the first also the embedding, the
    /// last also the head.
    pub blocks: u32,
    /// Ranks of the stage, in Megatron's order: consecutive runs of `tp`
    /// form a TP group (TP fastest), the groups are the stage's
    /// data-parallel replicas (each micro-batch split across them in this
    /// order).
    pub gpus: Vec<u32>,
    /// GPUs per TP group of this stage (1: no tensor parallelism).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub tp: u32,
    /// Per replica (TP group, in order), its share of every micro-batch,
    /// samples: the split by speed of a stage whose replicas differ (Metis'
    /// uneven data-parallel split, FlashFlex's per-replica batches). A
    /// micro-batch of another size splits in the same proportions
    /// ([`apportion`]). Empty: equal shares.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<u32>,
    /// Blocks of each of the stage's model chunks (interleaved schedule), in
    /// chunk order, when they differ: Megatron's uneven splits (the first
    /// chunk one block short beside the embedding, the last beside the loss,
    /// `--account-for-embedding-in-pipeline-split`; a chunk count not
    /// dividing the stage's blocks). Empty: `blocks / v` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<u32>,
}

/// The slices `[lo, hi)` of a micro-batch of `size` samples over replicas
/// weighted `shares` (`d` equal shares when empty; none when `d` is 0): each replica its
/// proportional part rounded down, the samples left over one each to the
/// largest remainders (ties to the earlier replica), in replica order.
/// Equal shares give the first `size mod d` replicas one sample more.
pub fn apportion(size: u32, d: usize, shares: &[u32]) -> Vec<(u32, u32)> {
    if d == 0 {
        return Vec::new();
    }
    let weight = |j: usize| shares.get(j).map_or(1, |&w| w as u64);
    let total: u64 = (0..d).map(weight).sum::<u64>().max(1);
    let mut parts: Vec<u64> = (0..d).map(|j| size as u64 * weight(j) / total).collect();
    let left = size as u64 - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..d).collect();
    // Largest remainder first: `size w_j mod total`, earlier replica on ties.
    order.sort_by_key(|&j| (std::cmp::Reverse(size as u64 * weight(j) % total), j));
    for &j in order.iter().take(left as usize) {
        parts[j] += 1;
    }
    let mut at = 0u32;
    parts
        .into_iter()
        .map(|n| {
            let lo = at;
            at += n as u32;
            (lo, at)
        })
        .collect()
}

fn one() -> u32 {
    1
}

/// The replicas whose slices (`slices`, contiguous in replica order, as
/// [`apportion`] gives) hold part of the samples `[lo, hi)`: (replica,
/// samples in common, the size of its slice), in replica order. What a
/// replica sends its neighbouring stage (activations forward, input
/// gradients back).
pub fn overlaps(slices: &[(u32, u32)], lo: u32, hi: u32) -> Vec<(usize, u32, u32)> {
    let first = slices.partition_point(|&(_, h)| h <= lo);
    slices[first..]
        .iter()
        .enumerate()
        .take_while(|(_, &(l, _))| l < hi)
        .filter_map(|(i, &(l, h))| {
            let ov = hi.min(h).saturating_sub(lo.max(l));
            (ov > 0).then_some((first + i, ov, h - l))
        })
        .collect()
}

/// Data-parallel ranks a stage of `d` replicas of TP degree `t` splits its
/// training state over under `strategy`: 1 for replicas (`none`), all `d`
/// for ZeRO-1 (`grad-op`) and FSDP (`full`), and for HSDP (`hybrid`) the
/// replicas of one shard group (`shard_group` GPUs, TP included, as
/// torchtitan's `dp_shard x tp` block of ranks), at most `d`.
pub fn shard_width(strategy: &Strategy, d: usize, t: u32) -> usize {
    match strategy.sharding {
        Sharding::NoShard => 1,
        Sharding::GradOp | Sharding::Full => d.max(1),
        Sharding::Hybrid => (strategy.shard_group as usize / t.max(1) as usize).clamp(1, d.max(1)),
    }
}

/// The parameters one GPU of a stage holds and how its training state is
/// split: the dense part over the stage's shard width, the routed experts
/// (expert parallelism) over the expert-data-parallel group's
/// ([`crate::expert_parallel`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankParams {
    /// Parameters the GPU holds (its TP and EP share), dense and experts.
    pub params: f64,
    /// Data-parallel ranks the dense state is split over.
    pub width: usize,
    /// The part of `params` that is routed experts (0 without experts).
    pub experts: f64,
    /// Ranks the experts' state is split over (the expert-data-parallel
    /// group's share of the sharding, at least 1).
    pub expert_width: usize,
}

impl RankParams {
    /// `params` dense parameters whose state is split over `width` ranks.
    pub fn dense(params: f64, width: usize) -> RankParams {
        RankParams {
            params,
            width,
            experts: 0.0,
            expert_width: 1,
        }
    }

    /// What a GPU of `blocks` blocks under `tp` holds: `params` parameters
    /// (its TP and EP share), the dense state split over `width` ranks
    /// under `sharding`, and with expert parallelism its routed experts'
    /// over the expert-data-parallel group ([`expert_width`]).
    pub fn of(
        params: f64,
        (sharding, width): (Sharding, usize),
        blocks: u32,
        tp: &crate::tensor::TensorParallel,
        model: &crate::model::ModelSpec,
    ) -> RankParams {
        let mut held = RankParams::dense(params, width);
        if tp.experts > 1 {
            held.experts = blocks as f64 * tp.expert_block_params(model);
            held.expert_width = expert_width(sharding, width, tp.experts, tp.expert_fold());
        }
        held
    }

    /// Parameters whose optimizer state the GPU keeps: the dense part over
    /// its width, the experts over theirs.
    pub fn state_params(&self) -> f64 {
        (self.params - self.experts) / self.width.max(1) as f64
            + self.experts / self.expert_width.max(1) as f64
    }
}

/// Ranks the routed experts' training state is split over under
/// `sharding`, for a dense shard width `width` (replicas of a stage),
/// expert parallelism `e` and `fold = t / t_e` GPUs of a TP group per
/// expert-TP group: the expert-data-parallel group, `width fold / e` (1
/// for replicas, `none`, which keep it whole; [`crate::expert_parallel`]).
pub fn expert_width(sharding: Sharding, width: usize, e: u32, fold: u32) -> usize {
    if sharding == Sharding::NoShard {
        return 1;
    }
    (width * fold.max(1) as usize / e.max(1) as usize).max(1)
}

/// Whether a stage's data-parallel group on `stack` under `sharding`
/// reduces through Megatron-Core's DDP: the `megatron` stack with replicas
/// or the distributed optimizer (any sharding that does not reshard per
/// unit: `none`, `grad-op`), whose gradient reduction runs after the
/// backward unless `--overlap-grad-reduce` (default off,
/// `distributed_data_parallel_config.py`; REAL-SYSTEMS-2 section 2.2).
/// PyTorch's DDP and FSDP (the `pytorch` stack, and FSDP / HSDP on any
/// stack) overlap it with the backward.
pub fn megatron_ddp(stack: crate::stack::Stack, sharding: Sharding) -> bool {
    stack == crate::stack::Stack::Megatron && !sharding.reshards_per_unit()
}

/// Whether `sharding` inside the stages of a `depth`-stage pipeline
/// reshards each unit after its forward
/// ([`Pipeline::reshards_after_forward`]): FSDP / HSDP (`full`, `hybrid`)
/// at one stage only.
pub fn reshards_after_forward(sharding: Sharding, depth: usize) -> bool {
    depth == 1 && sharding.reshards_per_unit()
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

fn is_false(x: &bool) -> bool {
    !*x
}

impl Stage {
    /// A stage of `blocks` blocks on `gpus` without tensor parallelism.
    pub fn new(blocks: u32, gpus: Vec<u32>) -> Stage {
        Stage {
            blocks,
            gpus,
            tp: 1,
            shares: Vec::new(),
            chunks: Vec::new(),
        }
    }

    /// Blocks of the stage's model chunk `c` of `v`.
    pub fn chunk_blocks(&self, c: usize, v: u32) -> u32 {
        match self.chunks.get(c) {
            Some(&b) => b,
            None => self.blocks / v.max(1),
        }
    }

    /// The slices `[lo, hi)` of a micro-batch of `size` samples over the
    /// stage's replicas, in replica order ([`apportion`] by its shares).
    pub fn slices(&self, size: u32) -> Vec<(u32, u32)> {
        apportion(size, self.dp(), &self.shares)
    }

    /// Whether the replicas split micro-batches unevenly (shares given
    /// and not all equal).
    pub fn uneven(&self) -> bool {
        self.shares.iter().any(|&w| w != self.shares[0])
    }

    /// Data-parallel replicas of the stage (`gpus / tp`).
    pub fn dp(&self) -> usize {
        self.gpus.len() / self.tp.max(1) as usize
    }

    /// Data-parallel ranks the stage's training state is split over
    /// under `strategy` ([`shard_width`]).
    pub fn shard_width(&self, strategy: &Strategy) -> usize {
        shard_width(strategy, self.dp(), self.tp)
    }

    /// The data-parallel group of TP rank `i`: the `i`-th GPU of every
    /// replica, in replica order (what reduces its gradient shard).
    pub fn dp_group(&self, i: usize) -> Vec<usize> {
        (0..self.dp()).map(|j| self.group(j)[i] as usize).collect()
    }

    /// The TP group of replica `j`.
    pub fn group(&self, j: usize) -> &[u32] {
        let t = self.tp.max(1) as usize;
        &self.gpus[j * t..(j + 1) * t]
    }
}

/// A pipeline: its schedule, micro-batch count and stages (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    /// Schedule of every stage.
    pub schedule: PipeSchedule,
    /// Micro-batches per iteration `m` (each passes every stage).
    pub microbatches: u32,
    /// Stages in order.
    pub stages: Vec<Stage>,
    /// Sequence parallelism in every TP group (Korthikanti et al.).
    #[serde(default, skip_serializing_if = "is_false")]
    pub sequence_parallel: bool,
    /// TP communication overlapped with the GEMMs of both passes
    /// (Megatron's `--tp-comm-overlap`); off: Megatron's default path.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tp_comm_overlap: bool,
    /// TP groups may span nodes (priced over the network); off: every TP
    /// group sits inside one node.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tp_across_nodes: bool,
    /// Model chunks per GPU `v` (interleaved schedule): stage `s`'s blocks
    /// split into `v` equal chunks, chunk `c` the model's virtual stage
    /// `c p + s`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub virtual_stages: u32,
    /// Each stage's data-parallel gradient reduction (replicas'
    /// all-reduce, the distributed optimizer's reduce-scatter) launched
    /// bucket by bucket during the last micro-batch's backward as each
    /// bucket's gradients are complete (Megatron's
    /// `--overlap-grad-reduce`, [`crate::pipeline::buckets`]); off
    /// (Megatron's default): one reduction after the last backward.
    #[serde(default, skip_serializing_if = "is_false")]
    pub overlap_grad_reduce: bool,
    /// The distributed optimizer's parameter all-gather deferred to the
    /// next iteration's forward, bucket by bucket (Megatron's
    /// `--overlap-param-gather`; needs `grad-op` and
    /// [`Pipeline::overlap_grad_reduce`]); off: after the optimizer step.
    #[serde(default, skip_serializing_if = "is_false")]
    pub overlap_param_gather: bool,
    /// Expert parallelism `e` (1: none): every stage's routed experts split
    /// over `e` consecutive replicas, tokens dispatched by all-to-all, the
    /// expert gradients reduced over the `d / e` replicas holding the same
    /// experts ([`crate::expert_parallel`]).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub expert_parallel: u32,
    /// GPUs each routed expert is split over (expert-TP, Megatron-Core's
    /// `--expert-tensor-parallel-size`): 1 (whole experts; the EP groups
    /// then run over TP ranks too) or, absent, each stage's TP degree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_tensor_parallel: Option<u32>,
    /// How tokens reach their experts under EP (Megatron-Core's
    /// `--moe-token-dispatcher-type`); absent: all-to-all.
    #[serde(
        default,
        skip_serializing_if = "crate::experts::Dispatcher::is_default"
    )]
    pub moe_dispatcher: crate::experts::Dispatcher,
}

/// How a pipeline's data-parallel groups overlap their communication with
/// compute (Megatron's DDP knobs, [`Pipeline::overlap_grad_reduce`] and
/// [`Pipeline::overlap_param_gather`]); both off by default, as in
/// Megatron-LM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DpOverlap {
    /// Gradient reduction per bucket during the last backward.
    pub grad_reduce: bool,
    /// Parameter all-gather per bucket under the next forward.
    pub param_gather: bool,
}

impl Pipeline {
    /// A pipeline of `stages` under `schedule` with `microbatches`
    /// micro-batches, no sequence parallelism, TP groups inside nodes,
    /// no data-parallel overlap.
    pub fn new(schedule: PipeSchedule, microbatches: u32, stages: Vec<Stage>) -> Pipeline {
        Pipeline {
            schedule,
            microbatches,
            stages,
            sequence_parallel: false,
            tp_comm_overlap: false,
            tp_across_nodes: false,
            virtual_stages: 1,
            overlap_grad_reduce: false,
            overlap_param_gather: false,
            expert_parallel: 1,
            expert_tensor_parallel: None,
            moe_dispatcher: crate::experts::Dispatcher::AllToAll,
        }
    }

    /// The data-parallel overlap knobs.
    pub fn dp_overlap(&self) -> DpOverlap {
        DpOverlap {
            grad_reduce: self.overlap_grad_reduce,
            param_gather: self.overlap_param_gather,
        }
    }

    /// The tensor parallelism of stage `s`.
    pub fn tensor(&self, s: usize) -> TensorParallel {
        TensorParallel {
            degree: self.stages[s].tp.max(1),
            sequence_parallel: self.sequence_parallel && self.stages[s].tp > 1,
            comm_overlap: self.tp_comm_overlap,
            experts: self.expert_parallel.max(1),
            expert_tensor: self
                .expert_tensor_parallel
                .unwrap_or(self.stages[s].tp)
                .max(1),
            dispatcher: self.moe_dispatcher,
        }
    }

    /// Whether this pipeline on a cluster of `ranks` GPUs is a
    /// data-parallel iteration: one stage of every GPU in rank order, one
    /// model chunk, no TP, replicas splitting every micro-batch evenly,
    /// each micro-batch's forward then its backward (1F1B or ZB-H1 at one
    /// stage, any schedule with one micro-batch). Such a plan lowers as
    /// the data-parallel plan of its per-GPU entries
    /// ([`crate::iteration::Iteration`]): one description of the iteration,
    /// whatever flags built it. Not under Megatron-Core's DDP
    /// ([`megatron_ddp`]): its gradient reduction follows
    /// [`Pipeline::overlap_grad_reduce`] (off by default: one reduction
    /// after the backward), which the pipeline lowering models, where the
    /// data-parallel one overlaps PyTorch DDP's buckets with the backward.
    pub fn runs_data_parallel(&self, ranks: usize, strategy: &Strategy) -> bool {
        self.data_parallel_shape(ranks) && !megatron_ddp(strategy.stack, strategy.sharding)
    }

    /// The shape part of [`Pipeline::runs_data_parallel`]: one stage of
    /// every GPU in rank order, one model chunk, no TP, even replicas,
    /// each micro-batch's forward then its backward.
    pub fn data_parallel_shape(&self, ranks: usize) -> bool {
        let one_by_one = self.microbatches <= 1
            || matches!(self.schedule, PipeSchedule::OneFOneB | PipeSchedule::ZbH1);
        self.depth() == 1
            && self.chunks() == 1
            && self.expert_parallel <= 1
            && self.stages[0].tp <= 1
            && !self.stages[0].uneven()
            && self.stages[0].gpus.len() == ranks
            && self.stages[0]
                .gpus
                .iter()
                .enumerate()
                .all(|(i, &r)| r as usize == i)
            && one_by_one
    }

    /// Whether FSDP / HSDP inside the stages reshards each unit after its
    /// forward: at one stage, as torchtitan runs it without a pipeline
    /// (`reshard_after_forward = not pp_enabled`, REAL-SYSTEMS-2 section
    /// 2.1): each unit gathered before its forward and again before its
    /// backward, its gradient reduce-scattered after its backward, the
    /// rank holding its shard plus the units in flight. With several
    /// stages the parameters are gathered once per step and held.
    pub fn reshards_after_forward(&self, strategy: &Strategy) -> bool {
        reshards_after_forward(strategy.sharding, self.depth())
    }

    /// Whether any stage splits its blocks over a TP group.
    pub fn has_tp(&self) -> bool {
        self.stages.iter().any(|s| s.tp > 1)
    }

    /// Number of stages `p`.
    pub fn depth(&self) -> usize {
        self.stages.len()
    }

    /// Model chunks per GPU `v` (1 unless interleaved).
    pub fn chunks(&self) -> u32 {
        self.virtual_stages.max(1)
    }

    /// Virtual stages `p v`: the model's stages in block order, virtual
    /// stage `k` on physical stage `k mod p` (Megatron's interleaving).
    pub fn virtual_depth(&self) -> usize {
        self.depth() * self.chunks() as usize
    }

    /// Blocks of virtual stage `k`.
    pub fn virtual_blocks(&self, k: usize) -> u32 {
        let p = self.depth();
        self.stages[k % p].chunk_blocks(k / p, self.chunks())
    }

    /// First block (1-based) of virtual stage `k`.
    pub fn virtual_first_block(&self, k: usize) -> u32 {
        (0..k).map(|x| self.virtual_blocks(x)).sum::<u32>() + 1
    }

    /// First block (1-based) of stage `s`.
    pub fn first_block(&self, s: usize) -> u32 {
        self.stages[..s].iter().map(|x| x.blocks).sum::<u32>() + 1
    }

    /// Sizes of the `m` micro-batches of a global batch of `batch` samples
    /// (near-equal, largest first).
    pub fn micro_sizes(&self, batch: u32) -> Vec<u32> {
        RankPlan::new(batch, self.microbatches, 0.0).microbatch_sizes()
    }

    /// Stage and replica of every rank (`None`: in no stage).
    pub fn positions(&self, ranks: usize) -> Vec<Option<(usize, usize)>> {
        let mut v = vec![None; ranks];
        for (s, st) in self.stages.iter().enumerate() {
            let t = st.tp.max(1) as usize;
            for (i, &r) in st.gpus.iter().enumerate() {
                if let Some(x) = v.get_mut(r as usize) {
                    *x = Some((s, i / t));
                }
            }
        }
        v
    }

    /// Parameters of stage `s`: its blocks, plus the embedding on the
    /// first and the head on the last.
    pub fn stage_params(&self, s: usize, model: &crate::model::ModelSpec) -> u64 {
        let mut p = self.stages[s].blocks as u64 * model.params_per_block();
        if s == 0 {
            p += model.embedding_params();
        }
        if s + 1 == self.depth() {
            p += model.head_params();
        }
        p
    }

    /// Parameters one GPU of stage `s` holds: [`Pipeline::stage_params`]
    /// split over its TP group ([`TensorParallel::block_params`] and the
    /// vocabulary-parallel embedding and head).
    pub fn rank_params(&self, s: usize, model: &crate::model::ModelSpec) -> f64 {
        let tp = self.tensor(s);
        if !tp.is_on() && tp.experts <= 1 {
            return self.stage_params(s, model) as f64;
        }
        let mut p = self.stages[s].blocks as f64 * tp.block_params(model);
        if s == 0 {
            p += tp.embedding_params(model);
        }
        if s + 1 == self.depth() {
            p += tp.head_params(model);
        }
        p
    }

    /// What one GPU of stage `s` holds under `strategy` and how its state
    /// is split ([`RankParams`]): [`Pipeline::rank_params`]
    /// over the stage's shard width, and with expert parallelism its
    /// routed experts over the expert-data-parallel group's width
    /// ([`expert_width`]).
    pub fn rank_held(
        &self,
        s: usize,
        model: &crate::model::ModelSpec,
        strategy: &Strategy,
    ) -> RankParams {
        let st = &self.stages[s];
        let width = (strategy.sharding, st.shard_width(strategy));
        RankParams::of(
            self.rank_params(s, model),
            width,
            st.blocks,
            &self.tensor(s),
            model,
        )
    }

    /// The per-GPU plan entries this pipeline implies for a cluster of
    /// `ranks` GPUs and a global batch of `batch` samples under `sharding`
    /// (see the module docs).
    pub fn rank_plans(&self, ranks: usize, batch: u32, strategy: &Strategy) -> Vec<RankPlan> {
        let sizes = self.micro_sizes(batch);
        let mut out = vec![RankPlan::new(0, 0, 0.0); ranks];
        for st in &self.stages {
            let (d, t) = (st.dp(), st.tp.max(1) as usize);
            // Per replica, its slice of each micro-batch (sizes take at
            // most two values: each split once).
            let mut by_size: Vec<(u32, Vec<(u32, u32)>)> = Vec::new();
            let mut slices = vec![Vec::with_capacity(sizes.len()); d];
            for &m in &sizes {
                if !by_size.iter().any(|x| x.0 == m) {
                    by_size.push((m, st.slices(m)));
                }
                let split = &by_size.iter().find(|x| x.0 == m).expect("just split").1;
                for (j, &(lo, hi)) in split.iter().enumerate() {
                    slices[j].push(hi - lo);
                }
            }
            let fraction = 1.0 / shard_width(strategy, d, st.tp) as f64 / t as f64;
            for (i, &r) in st.gpus.iter().enumerate() {
                let Some(x) = out.get_mut(r as usize) else {
                    continue;
                };
                let Some(mine) = slices.get(i / t) else {
                    continue;
                };
                *x = RankPlan {
                    batch: mine.iter().sum(),
                    microbatches: mine.iter().filter(|&&n| n > 0).count() as u32,
                    microbatch_size: mine.iter().copied().max().unwrap_or(0),
                    state_fraction: fraction,
                    note: None,
                };
            }
        }
        out
    }

    /// One line for tables: `pipeline 1f1b 4 stages [8,8,8,8 blocks] x
    /// [1,1,1,1 GPUs] m=16`; with TP `3d tp2 sp 1f1b 4 stages [4x 20]
    /// blocks x [4x 256] GPUs m=8` (lists as runs, so 1,024 GPUs read);
    /// ` uneven dp` at the end when replicas split by shares.
    pub fn label(&self) -> String {
        let blocks: Vec<u32> = self.stages.iter().map(|s| s.blocks).collect();
        let gpus: Vec<u32> = self.stages.iter().map(|s| s.gpus.len() as u32).collect();
        // Replicas splitting micro-batches by their shares.
        let uneven = if self.stages.iter().any(Stage::uneven) {
            " uneven dp"
        } else {
            ""
        };
        let uneven = match (self.expert_parallel, self.expert_tensor_parallel) {
            (0 | 1, _) => uneven.to_string(),
            (e, Some(te)) => format!(" ep{e} etp{te}{uneven}"),
            (e, None) => format!(" ep{e}{uneven}"),
        };
        if !self.has_tp() {
            let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            return format!(
                "pipeline {} {} stages [{} blocks] x [{} GPUs] m={}{uneven}",
                self.schedule,
                self.depth(),
                list(&blocks),
                list(&gpus),
                self.microbatches
            );
        }
        let kind = {
            let tps: Vec<u32> = self.stages.iter().map(|s| s.tp).collect();
            let tp = if tps.iter().all(|&t| t == tps[0]) {
                format!("tp{}", tps[0])
            } else {
                format!("tp{}", crate::lists::runs(&tps))
            };
            let sp = if self.sequence_parallel { " sp" } else { "" };
            format!("3d {tp}{sp}")
        };
        format!(
            "{kind} {} {} stages {} blocks x {} GPUs m={}{uneven}",
            self.schedule,
            self.depth(),
            crate::lists::runs(&blocks),
            crate::lists::runs(&gpus),
            self.microbatches
        )
    }

    /// Checks the pipeline against a workload: `ranks` GPUs, the model's
    /// `layers` blocks (when known), `global_batch` samples, and the plan's
    /// `strategy` (the error names the field, under `pipeline.`).
    pub fn validate(
        &self,
        ranks: usize,
        layers: Option<u32>,
        global_batch: u32,
        strategy: &Strategy,
        origin: &str,
    ) -> Result<(), PlanError> {
        self.validate_stages(ranks, layers, origin)?;
        self.validate_microbatches(global_batch, origin)?;
        self.validate_schedule(origin)?;
        self.validate_strategy(ranks, strategy, origin)?;
        self.validate_overlap(strategy, origin)?;
        self.validate_shard_groups(strategy, origin)
    }

    /// [`Pipeline::validate`]'s stages: at least one, each with at least
    /// one block and one GPU, every GPU an existing rank in one stage only,
    /// and (when `layers` is known) as many blocks as the model.
    fn validate_stages(
        &self,
        ranks: usize,
        layers: Option<u32>,
        origin: &str,
    ) -> Result<(), PlanError> {
        let bad = |field: String, msg: String| Err(PlanError::invalid(origin, field, msg));
        let p = self.depth();
        if p == 0 {
            return bad(
                "pipeline.stages".into(),
                "a pipeline needs at least one stage".into(),
            );
        }
        if let Some(layers) = layers.filter(|&l| p as u64 > l as u64) {
            return bad(
                "pipeline.stages".into(),
                format!(
                    "{p} stages but the model has {layers} blocks: every stage needs at least one block"
                ),
            );
        }
        let mut seen = vec![None; ranks];
        for (s, st) in self.stages.iter().enumerate() {
            if st.blocks == 0 {
                return bad(
                    format!("pipeline.stages[{s}].blocks"),
                    "every stage needs at least one block, got 0".into(),
                );
            }
            if st.gpus.is_empty() {
                return bad(
                    format!("pipeline.stages[{s}].gpus"),
                    "a stage needs at least one GPU, got none".into(),
                );
            }
            if st.tp == 0 || st.gpus.len() % st.tp as usize != 0 {
                return bad(
                    format!("pipeline.stages[{s}].tp"),
                    format!(
                        "expected a TP degree dividing the stage's {} GPUs (each TP group a run of `tp` of them), got {}",
                        st.gpus.len(),
                        st.tp
                    ),
                );
            }
            if !st.shares.is_empty() && st.shares.len() != st.dp() {
                return bad(
                    format!("pipeline.stages[{s}].shares"),
                    format!(
                        "expected one share per replica ({} TP groups of {}), got {}",
                        st.dp(),
                        st.tp,
                        st.shares.len()
                    ),
                );
            }
            if let Some(j) = st.shares.iter().position(|&w| w == 0) {
                return bad(
                    format!("pipeline.stages[{s}].shares[{j}]"),
                    "every replica needs a share of at least 1 sample, got 0 (leave the GPUs out of the stage instead)".into(),
                );
            }
            for (j, &r) in st.gpus.iter().enumerate() {
                let f = format!("pipeline.stages[{s}].gpus[{j}]");
                let Some(slot) = seen.get_mut(r as usize) else {
                    return bad(
                        f,
                        format!("rank {r} does not exist: the cluster has ranks 0..{ranks}"),
                    );
                };
                if let Some(other) = *slot {
                    return bad(
                        f,
                        format!("rank {r} is already in stage {other}: a GPU holds one stage"),
                    );
                }
                *slot = Some(s);
            }
        }
        let total: u64 = self.stages.iter().map(|s| s.blocks as u64).sum();
        if let Some(layers) = layers.filter(|&l| total != l as u64) {
            return bad(
                "pipeline.stages[].blocks".into(),
                format!("the stages hold {total} blocks but the model has {layers}"),
            );
        }
        Ok(())
    }

    /// [`Pipeline::validate`]'s micro-batches: within the limit, 1..=the
    /// global batch, and large enough that every GPU of a stage gets a
    /// sample of each.
    fn validate_microbatches(&self, global_batch: u32, origin: &str) -> Result<(), PlanError> {
        let bad = |field: String, msg: String| Err(PlanError::invalid(origin, field, msg));
        crate::limits::check_microbatches(
            origin,
            "pipeline.microbatches",
            self.microbatches as u64,
        )?;
        if self.microbatches == 0 || self.microbatches > global_batch {
            return bad(
                "pipeline.microbatches".into(),
                format!(
                    "expected 1..={global_batch} micro-batches (the global batch), got {}",
                    self.microbatches
                ),
            );
        }
        let smallest = global_batch / self.microbatches;
        for (s, st) in self.stages.iter().enumerate() {
            let Some(j) = st.slices(smallest).iter().position(|&(lo, hi)| hi == lo) else {
                continue;
            };
            let field = if st.uneven() {
                format!("pipeline.stages[{s}].shares")
            } else {
                format!("pipeline.stages[{s}].gpus")
            };
            return bad(
                field,
                format!(
                    "{} replicas share micro-batches of {smallest} samples and replica {j} gets none: every replica of a stage needs at least one sample of each (use fewer micro-batches, fewer GPUs in the stage{})",
                    st.dp(),
                    if st.uneven() { " or more even shares" } else { "" }
                ),
            );
        }
        Ok(())
    }
}

impl Pipeline {
    /// [`Pipeline::validate`]'s schedule: virtual stages only with the
    /// interleaved schedule, dividing every stage's blocks, and the
    /// interleaved schedule's micro-batch count a multiple of the depth
    /// (Megatron's rule with its default group size).
    fn validate_schedule(&self, origin: &str) -> Result<(), PlanError> {
        let bad = |field: String, msg: String| Err(PlanError::invalid(origin, field, msg));
        let (v, p, m) = (self.virtual_stages, self.depth() as u32, self.microbatches);
        if v == 0 {
            return bad(
                "pipeline.virtual_stages".into(),
                "expected at least 1 model chunk per GPU, got 0".into(),
            );
        }
        if v > 1 && self.schedule != PipeSchedule::Interleaved {
            return bad(
                "pipeline.virtual_stages".into(),
                format!(
                    "{v} model chunks per GPU need the interleaved schedule, not `{}`",
                    self.schedule
                ),
            );
        }
        for (s, st) in self.stages.iter().enumerate() {
            if !st.chunks.is_empty() {
                let sum: u64 = st.chunks.iter().map(|&b| b as u64).sum();
                if st.chunks.len() != v as usize
                    || sum != st.blocks as u64
                    || st.chunks.contains(&0)
                {
                    return bad(
                        format!("pipeline.stages[{s}].chunks"),
                        format!(
                            "expected the blocks of each of the {v} model chunks, at least 1 each, summing to the stage's {} blocks; got {:?}",
                            st.blocks, st.chunks
                        ),
                    );
                }
                continue;
            }
            if st.blocks % v != 0 {
                return bad(
                    format!("pipeline.stages[{s}].blocks"),
                    format!(
                        "{} blocks do not split into {v} equal model chunks (virtual stages): Megatron needs the layers per stage divisible by the chunks",
                        st.blocks
                    ),
                );
            }
        }
        if self.schedule == PipeSchedule::Interleaved && p > 1 && m % p != 0 {
            return bad(
                "pipeline.microbatches".into(),
                format!(
                    "the interleaved schedule runs micro-batches in groups of the {p} stages: {m} micro-batches is not a multiple of {p} (Megatron refuses it)"
                ),
            );
        }
        Ok(())
    }
}

/// Why the overlap knobs of a pipeline cannot run under `sharding`, as
/// Megatron-LM's argument checks say (`None`: they can), naming the knobs
/// by `names` (`[tp_comm_overlap, sequence_parallel, overlap_grad_reduce,
/// overlap_param_gather, sharding]`: plan-file fields or flags):
/// `tp_comm_overlap` needs sequence parallelism with TP (Transformer
/// Engine's userbuffers overlap SP's all-gathers and reduce-scatters);
/// `overlap_param_gather` needs `overlap_grad_reduce` and the distributed
/// optimizer (`grad-op`); `overlap_grad_reduce` is Megatron's DDP /
/// distributed-optimizer knob (`none`, `grad-op`): FSDP / HSDP inside the
/// stages reduce-scatter each unit during the last backward anyway.
/// `tp` and `sp` are the TP degree and sequence parallelism asked for.
pub fn overlap_conflict(
    knobs: (bool, DpOverlap),
    tp: u32,
    sp: bool,
    sharding: Sharding,
    names: [&str; 5],
) -> Option<(usize, String)> {
    let (tp_comm, dp) = knobs;
    let [_, spn, ogr, _, shn] = names;
    if tp_comm && tp > 1 && !sp {
        return Some((
            0,
            format!("needs {spn} (with TP {tp}): Megatron asserts sequence parallelism with TP communication overlap (Transformer Engine's userbuffers pipeline SP's all-gathers and reduce-scatters with the GEMMs)"),
        ));
    }
    if dp.param_gather && !dp.grad_reduce {
        return Some((
            3,
            format!("needs {ogr} (Megatron asserts it: the parameter all-gathers follow the gradient buckets)"),
        ));
    }
    if dp.param_gather && !sharding.gathers_after_step() {
        return Some((
            3,
            format!(
                "needs the distributed optimizer ({shn} grad-op; Megatron asserts it), not `{}`: only ZeRO-1 all-gathers updated parameters",
                sharding.name()
            ),
        ));
    }
    if dp.grad_reduce && sharding.reshards_per_unit() {
        return Some((
            2,
            format!(
                "Megatron's knob for replicas and the distributed optimizer ({shn} none or grad-op), not `{}`: FSDP / HSDP inside the stages reduce-scatter each unit during the last backward already (torchtitan)",
                sharding.name()
            ),
        ));
    }
    None
}

impl Pipeline {
    /// [`Pipeline::validate`]'s overlap knobs ([`overlap_conflict`]).
    fn validate_overlap(&self, strategy: &Strategy, origin: &str) -> Result<(), PlanError> {
        let names = [
            "pipeline.tp_comm_overlap",
            "pipeline.sequence_parallel",
            "pipeline.overlap_grad_reduce",
            "pipeline.overlap_param_gather",
            "strategy.sharding",
        ];
        let tp = self.stages.iter().map(|s| s.tp).max().unwrap_or(1);
        match overlap_conflict(
            (self.tp_comm_overlap, self.dp_overlap()),
            tp,
            self.sequence_parallel,
            strategy.sharding,
            names,
        ) {
            Some((i, msg)) => Err(PlanError::invalid(origin, names[i], msg)),
            None => Ok(()),
        }
    }
}

impl Pipeline {
    /// [`Pipeline::validate`]'s HSDP groups: under `hybrid` the shard
    /// group (GPUs, TP included) is whole TP groups and its replicas
    /// divide every stage's.
    fn validate_shard_groups(&self, strategy: &Strategy, origin: &str) -> Result<(), PlanError> {
        if strategy.sharding != Sharding::Hybrid {
            return Ok(());
        }
        let g = strategy.shard_group;
        for (s, st) in self.stages.iter().enumerate() {
            let (t, d) = (st.tp.max(1), st.dp());
            let h = shard_width(strategy, d, st.tp);
            if !g.is_multiple_of(t) || !d.is_multiple_of(h) {
                return Err(PlanError::invalid(
                    origin,
                    "strategy.shard_group",
                    format!(
                        "hybrid sharding inside stage {s} ({d} replicas of TP {t}) needs a shard group of whole TP groups whose replica count divides the stage's; got {g} GPUs ({} replicas)",
                        g / t
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Pipeline {
    /// [`Pipeline::validate`]'s strategy. A data-parallel iteration
    /// ([`Pipeline::runs_data_parallel`]) takes whatever a data-parallel
    /// plan takes. Otherwise gradients accumulate without sync (`no-sync`:
    /// reduced once, after the last micro-batch) or, where FSDP / HSDP
    /// reshards per unit at one stage, with a reduce-scatter after every
    /// micro-batch's backward (`sync`, as torchtitan accumulates without a
    /// pipeline); nothing is offloaded.
    fn validate_strategy(
        &self,
        ranks: usize,
        strategy: &Strategy,
        origin: &str,
    ) -> Result<(), PlanError> {
        if self.runs_data_parallel(ranks, strategy) {
            return Ok(());
        }
        let bad = |field: String, msg: String| Err(PlanError::invalid(origin, field, msg));
        let per_unit = self.reshards_after_forward(strategy);
        match strategy.accumulation {
            Accumulation::NoSync => {}
            Accumulation::Sync if per_unit => {}
            Accumulation::Sync if self.depth() == 1 => {
                return bad(
                    "strategy.accumulation".into(),
                    format!(
                        "`sync` inside a one-stage plan with TP needs FSDP or HSDP (`full`, `hybrid`: a reduce-scatter after each unit's backward); `{}` reduces once after the last micro-batch (`no-sync`)",
                        strategy.sharding.name()
                    ),
                );
            }
            other => {
                return bad(
                    "strategy.accumulation".into(),
                    format!(
                        "a pipeline accumulates gradients over its micro-batches and reduces them once (`no-sync`), not `{}`{}",
                        other.name(),
                        if self.depth() == 1 {
                            " (a one-stage plan takes `sync` under FSDP / HSDP, and any accumulation over every GPU without TP)"
                        } else {
                            ""
                        }
                    ),
                );
            }
        }
        if strategy.offload != Offload::None {
            return bad(
                "strategy.offload".into(),
                format!(
                    "pipeline and TP plans offload nothing, got `{}` (a one-stage plan over every GPU without TP is a data-parallel plan and may)",
                    strategy.offload.name()
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_cover_the_micro_batch_in_order() {
        for size in 1..40u32 {
            for d in 1..=size.min(9) as usize {
                let even = apportion(size, d, &[]);
                let (q, r) = (size / d as u32, size as usize % d);
                let mut at = 0;
                for (j, &(lo, hi)) in even.iter().enumerate() {
                    assert_eq!(lo, at);
                    // Near-equal, the first `size mod d` one larger.
                    assert_eq!(hi - lo, q + u32::from(j < r));
                    at = hi;
                }
                assert_eq!(at, size);
            }
        }
    }

    #[test]
    fn shares_split_in_proportion_and_cover_the_micro_batch() {
        // Exact when the size is the shares' sum.
        let s = apportion(12, 3, &[6, 4, 2]);
        assert_eq!(s, vec![(0, 6), (6, 10), (10, 12)]);
        // Halved: 3, 2, 1.
        assert_eq!(apportion(6, 3, &[6, 4, 2]), vec![(0, 3), (3, 5), (5, 6)]);
        // 7 of 3:1 -> 5.25, 1.75: the larger remainder (1.75) takes the sample.
        assert_eq!(apportion(7, 2, &[3, 1]), vec![(0, 5), (5, 7)]);
        for size in 1..60u32 {
            for w in [[1u32, 1, 1], [5, 3, 1], [1, 9, 2], [7, 7, 1]] {
                let sl = apportion(size, 3, &w);
                assert_eq!(sl[0].0, 0);
                assert_eq!(sl[2].1, size);
                let total: u32 = w.iter().sum();
                for (j, &(lo, hi)) in sl.iter().enumerate() {
                    if j > 0 {
                        assert_eq!(lo, sl[j - 1].1);
                    }
                    // Within one sample of the exact proportion.
                    let exact = size as f64 * w[j] as f64 / total as f64;
                    assert!(
                        ((hi - lo) as f64 - exact).abs() < 1.0,
                        "{size} {w:?} {sl:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn overlaps_find_the_replicas_a_slice_meets() {
        let next = apportion(12, 3, &[6, 4, 2]); // [0,6) [6,10) [10,12)
        assert_eq!(overlaps(&next, 0, 6), vec![(0, 6, 6)]);
        assert_eq!(
            overlaps(&next, 4, 11),
            vec![(0, 2, 6), (1, 4, 4), (2, 1, 2)]
        );
        assert_eq!(overlaps(&next, 10, 12), vec![(2, 2, 2)]);
        // Brute force on even and uneven splits.
        for w in [vec![], vec![3, 1, 2, 5]] {
            let sl = apportion(23, 4, &w);
            for lo in 0..23 {
                for hi in lo + 1..=23 {
                    let brute: Vec<(usize, u32, u32)> = sl
                        .iter()
                        .enumerate()
                        .filter_map(|(h, &(a, b))| {
                            let ov = hi.min(b).saturating_sub(lo.max(a));
                            (ov > 0).then_some((h, ov, b - a))
                        })
                        .collect();
                    assert_eq!(overlaps(&sl, lo, hi), brute);
                }
            }
        }
    }

    #[test]
    fn one_f_one_b_in_flight_is_p_minus_s() {
        assert_eq!(PipeSchedule::OneFOneB.in_flight(4, 0, 16, 1), 4.0);
        assert_eq!(PipeSchedule::OneFOneB.in_flight(4, 3, 16, 1), 1.0);
        assert_eq!(PipeSchedule::OneFOneB.in_flight(4, 0, 2, 1), 2.0);
        assert_eq!(PipeSchedule::Gpipe.in_flight(4, 0, 16, 1), 16.0);
        // Interleaved stage 0: p + (p - 1) / v (Korthikanti 4.3).
        assert_eq!(
            PipeSchedule::Interleaved.in_flight(4, 0, 16, 2),
            4.0 + 3.0 / 2.0
        );
    }
}
