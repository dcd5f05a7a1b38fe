//! A homogeneous 3D shape as Megatron-LM and torchtitan users write it
//! (`--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
//! `--micro-batch-size`, `--sequence-parallel`, the schedule and its
//! virtual stages) and the pipeline it implies on a cluster: `DP = GPUs /
//! (TP x PP)`, `micro-batches = global batch / (DP x micro-batch size)`,
//! ranks in Megatron's order (`initialize_model_parallel`'s
//! `tp-cp-ep-dp-pp`: TP fastest, then DP, then PP), so with `TP <=` GPUs
//! per node every TP group is one node's GPUs, or with PP inside DP
//! (`tp-pp-dp`, Megatron's `--use-tp-pp-dp-mapping`): a replica's stages
//! on consecutive ranks, so neighbouring stages share a node's NVLink and
//! the data-parallel groups cross the nodes instead ([`RankOrder`]).

use super::pipeline::{DpOverlap, PipeSchedule, Pipeline, Stage};
use super::pipeline_layout::PipelineLayout;
use crate::error::PlanError;
use crate::strategy::Sharding;

/// How a 3D shape's ranks are numbered (REAL-SYSTEMS-2 sections 1.6 and
/// 2.3): which of the data-parallel and pipeline dimensions varies faster
/// after TP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum RankOrder {
    /// Megatron's default `tp-cp-ep-dp-pp` (also DeepSpeed's
    /// `PipeModelDataParallelTopology` and torchtitan's `[pp, dp, tp]`
    /// mesh): TP fastest, then DP, PP outermost; replica `j` of stage `s`
    /// is TP group `s d + j`. Data-parallel groups stay close, pipeline
    /// neighbours are `t d` ranks apart.
    #[default]
    TpDpPp,
    /// `tp-pp-dp` (Megatron's `--use-tp-pp-dp-mapping`): TP fastest, then
    /// PP, DP outermost; replica `j` of stage `s` is TP group `j p + s`.
    /// A replica's pipeline sits on consecutive ranks (one node when `t p`
    /// fits), its data-parallel groups are `t p` ranks apart.
    TpPpDp,
}

impl RankOrder {
    /// Both orders, Megatron's default first.
    pub const ALL: [RankOrder; 2] = [RankOrder::TpDpPp, RankOrder::TpPpDp];

    /// Its name on the command line and in files (Megatron's `order`
    /// string).
    pub fn name(self) -> &'static str {
        match self {
            RankOrder::TpDpPp => "tp-cp-ep-dp-pp",
            RankOrder::TpPpDp => "tp-pp-dp",
        }
    }

    /// Parses a name: `tp-cp-ep-dp-pp` (or `tp-dp-pp`, `megatron`) and
    /// `tp-pp-dp`.
    pub fn parse(s: &str) -> Option<RankOrder> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "tp-cp-ep-dp-pp" | "tp-dp-pp" | "megatron" => Some(RankOrder::TpDpPp),
            "tp-pp-dp" | "tp-cp-ep-pp-dp" => Some(RankOrder::TpPpDp),
            _ => None,
        }
    }

    /// The first rank of replica `j`'s TP group of stage `s` in a shape of
    /// TP `t`, `p` stages and `d` replicas.
    pub fn group_start(self, s: usize, j: usize, (t, p, d): (usize, usize, usize)) -> usize {
        match self {
            RankOrder::TpDpPp => (s * d + j) * t,
            RankOrder::TpPpDp => (j * p + s) * t,
        }
    }

    /// The order `pipe`'s stages follow: every stage of one TP degree and
    /// replica count, its GPUs the ranks of that order (TpDpPp first when
    /// both fit, as with one stage or one replica); `None` for other
    /// layouts (the heterogeneous planners').
    pub fn of(pipe: &Pipeline) -> Option<RankOrder> {
        let st0 = pipe.stages.first()?;
        let (t, d, p) = (st0.tp.max(1) as usize, st0.dp(), pipe.depth());
        if pipe
            .stages
            .iter()
            .any(|st| st.tp.max(1) as usize != t || st.gpus.len() != t * d)
        {
            return None;
        }
        RankOrder::ALL.into_iter().find(|o| {
            pipe.stages.iter().enumerate().all(|(s, st)| {
                st.gpus
                    .iter()
                    .enumerate()
                    .all(|(i, &r)| r as usize == o.group_start(s, i / t, (t, p, d)) + i % t)
            })
        })
    }
}

impl std::fmt::Display for RankOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where shape errors point: the flags of `simulate`.
pub const ORIGIN: &str = "the 3D shape";

/// A homogeneous 3D shape (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape3d {
    /// GPUs per TP group (`--tp`).
    pub tp: u32,
    /// Pipeline stages (`--pp`).
    pub pp: u32,
    /// Sequence parallelism (`--sequence-parallel`).
    pub sequence_parallel: bool,
    /// The pipeline schedule (`--pp-schedule`).
    pub schedule: PipeSchedule,
    /// Model chunks per GPU (`--virtual-stages`; interleaved only).
    pub virtual_stages: u32,
    /// Samples per micro-batch of one replica (`--microbatch-size`).
    pub microbatch_size: u32,
    /// TP communication overlapped with compute (`--tp-comm-overlap`).
    pub tp_comm_overlap: bool,
    /// TP groups may span nodes (`--tp-across-nodes`).
    pub tp_across_nodes: bool,
    /// Gradient reduction per bucket under the last backward
    /// (`--overlap-grad-reduce`, [`Pipeline::overlap_grad_reduce`]).
    pub overlap_grad_reduce: bool,
    /// Parameter all-gather per bucket under the next forward
    /// (`--overlap-param-gather`, [`Pipeline::overlap_param_gather`]).
    pub overlap_param_gather: bool,
    /// How the ranks are numbered (`--rank-order`).
    pub rank_order: RankOrder,
    /// Transformer blocks of the first stage, the rest split evenly over
    /// the middle stages (Megatron's `--decoder-first-pipeline-num-layers`);
    /// `None`: an even split.
    pub first_stage_layers: Option<u32>,
    /// Transformer blocks of the last stage (Megatron's
    /// `--decoder-last-pipeline-num-layers`); `None`: an even split.
    pub last_stage_layers: Option<u32>,
    /// The embedding and the loss each counted as one layer of the split
    /// (Megatron's `--account-for-embedding-in-pipeline-split` and
    /// `--account-for-loss-in-pipeline-split`): `L + 2` layers split evenly
    /// over the `PP x VP` model chunks, the first chunk building one block
    /// fewer beside the embedding, the last one fewer beside the head.
    pub embedding_loss_in_split: bool,
    /// Blocks of every model chunk as Megatron's
    /// `--pipeline-model-parallel-layout` places them
    /// ([`PipelineLayout`]); `None`: the split the other fields make.
    pub pipeline_layout: Option<PipelineLayout>,
    /// Expert parallelism (`--ep`, [`Pipeline::expert_parallel`]): the
    /// routed experts over this many replicas of every stage.
    pub expert_parallel: u32,
    /// GPUs each expert is split over (`--etp`,
    /// [`Pipeline::expert_tensor_parallel`]): `None` = the TP degree.
    pub expert_tensor_parallel: Option<u32>,
    /// How tokens reach their experts (`--moe-dispatcher`,
    /// [`Pipeline::moe_dispatcher`]).
    pub moe_dispatcher: crate::experts::Dispatcher,
}

impl Default for Shape3d {
    fn default() -> Self {
        Shape3d {
            tp: 1,
            pp: 1,
            sequence_parallel: false,
            schedule: PipeSchedule::OneFOneB,
            virtual_stages: 1,
            microbatch_size: 1,
            tp_comm_overlap: false,
            tp_across_nodes: false,
            overlap_grad_reduce: false,
            overlap_param_gather: false,
            rank_order: RankOrder::TpDpPp,
            first_stage_layers: None,
            last_stage_layers: None,
            embedding_loss_in_split: false,
            pipeline_layout: None,
            expert_parallel: 1,
            expert_tensor_parallel: None,
            moe_dispatcher: crate::experts::Dispatcher::AllToAll,
        }
    }
}

impl Shape3d {
    /// Data-parallel replicas on `ranks` GPUs.
    pub fn dp(&self, ranks: usize) -> usize {
        ranks / (self.tp.max(1) as usize * self.pp.max(1) as usize).max(1)
    }

    /// The data-parallel overlap knobs.
    pub fn dp_overlap(&self) -> DpOverlap {
        DpOverlap {
            grad_reduce: self.overlap_grad_reduce,
            param_gather: self.overlap_param_gather,
        }
    }

    /// Checks the overlap knobs against the plan's `sharding`
    /// ([`super::pipeline::overlap_conflict`]); errors name the flags.
    pub fn check_sharding(&self, sharding: Sharding) -> Result<(), PlanError> {
        let names = [
            "--tp-comm-overlap",
            "--sequence-parallel",
            "--overlap-grad-reduce",
            "--overlap-param-gather",
            "--sharding",
        ];
        // (`--tp-comm-overlap` without SP is refused by `pipeline`.)
        let knobs = (false, self.dp_overlap());
        match super::pipeline::overlap_conflict(
            knobs,
            self.tp,
            self.sequence_parallel,
            sharding,
            names,
        ) {
            Some((i, msg)) => Err(PlanError::invalid(ORIGIN, names[i], msg)),
            None => Ok(()),
        }
    }

    /// The overlap knobs against the shape's other flags, as Megatron
    /// asserts them: `--tp-comm-overlap` needs `--sequence-parallel`,
    /// `--overlap-param-gather` needs `--overlap-grad-reduce` (the
    /// sharding's part is [`Shape3d::check_sharding`]).
    fn check_overlap(&self) -> Result<(), PlanError> {
        let bad = |field: &str, msg: &str| Err(PlanError::invalid(ORIGIN, field, msg));
        if self.tp_comm_overlap && !self.sequence_parallel {
            return bad(
                "--tp-comm-overlap",
                "needs --sequence-parallel: Megatron asserts sequence parallelism with it (Transformer Engine's userbuffers pipeline SP's all-gathers and reduce-scatters with the GEMMs)",
            );
        }
        if self.overlap_param_gather && !self.overlap_grad_reduce {
            return bad(
                "--overlap-param-gather",
                "needs --overlap-grad-reduce (Megatron asserts it: the parameter all-gathers follow the gradient buckets)",
            );
        }
        Ok(())
    }

    /// Whether Megatron-Core builds this shape's blocks on a model of
    /// `layers` blocks: without a first / last stage size or the embedding
    /// and the loss in the split, an even split over the stages and each
    /// stage's chunks (Megatron asserts it; the split a shape's plan makes also takes
    /// the near-equal splits a user asks `simulate` for); with them, the
    /// split they make. The one decision the `megatron` planner's
    /// candidates and a shape's own check share.
    pub fn megatron_splits(&self, layers: u32) -> bool {
        let (p, v) = (self.pp.max(1), self.virtual_stages.max(1));
        let pinned = self.first_stage_layers.is_some()
            || self.last_stage_layers.is_some()
            || self.embedding_loss_in_split
            || self.pipeline_layout.is_some();
        let even = layers.is_multiple_of(p) && (layers / p).is_multiple_of(v);
        (pinned || even) && self.split(layers, p, v).is_ok()
    }

    /// The blocks of each model chunk of each of the `p` stages (`v` chunks
    /// per stage) of a model of `layers` blocks, as Megatron-Core's
    /// `get_num_layers_to_build` splits them: with a first / last stage
    /// size, the rest evenly over the middle stages; with the embedding and
    /// the loss counted as layers, `layers + 2` evenly over the `p v`
    /// chunks, the first and the last chunk one block short; otherwise
    /// near-equally (the first `layers % p` stages one more, where Megatron
    /// asserts an even split). Each stage's blocks split evenly over its
    /// chunks (Megatron asserts it), every chunk at least one block. Errors
    /// name the flag.
    fn split(&self, layers: u32, p: u32, v: u32) -> Result<Vec<Vec<u32>>, PlanError> {
        let bad = |field: &str, msg: String| Err(PlanError::invalid(ORIGIN, field, msg));
        let uneven = self.first_stage_layers.is_some() || self.last_stage_layers.is_some();
        if let Some(layout) = &self.pipeline_layout {
            if uneven || self.embedding_loss_in_split {
                return bad(
                    "--pipeline-layout",
                    "cannot be combined with --first-stage-layers, --last-stage-layers or --embedding-loss-in-split: the layout places every layer (Megatron asserts it)".into(),
                );
            }
            return layout
                .split(layers, p, v)
                .or_else(|msg| bad("--pipeline-layout", msg));
        }
        let per_stage: Vec<u32> = if uneven {
            self.end_stage_sizes(layers, p)?
        } else if self.embedding_loss_in_split {
            let total = layers + 2;
            if !total.is_multiple_of(p * v) {
                return bad(
                    "--embedding-loss-in-split",
                    format!("{layers} blocks + the embedding + the loss = {total} layers do not split evenly over PP {p} x VP {v} = {} model chunks (Megatron asserts it)", p * v),
                );
            }
            vec![total / p; p as usize]
        } else {
            let (q, r) = (layers / p, layers % p);
            (0..p).map(|s| q + u32::from(s < r)).collect()
        };
        let mut out = Vec::with_capacity(p as usize);
        for (s, &n) in per_stage.iter().enumerate() {
            if n % v != 0 {
                let how = if uneven || self.embedding_loss_in_split {
                    format!("stage {s}'s {n} layers")
                } else {
                    format!("the blocks per stage ({layers} / {p}): stage {s} has {n}")
                };
                return bad(
                    "--virtual-stages",
                    format!("{how} do not split into {v} equal model chunks (Megatron asserts it); --first-stage-layers / --last-stage-layers or --embedding-loss-in-split make other splits"),
                );
            }
            out.push(vec![n / v; v as usize]);
        }
        if self.embedding_loss_in_split {
            out[0][0] -= 1;
            out[p as usize - 1][v as usize - 1] -= 1;
        }
        if let Some(s) = out.iter().position(|c| c.contains(&0)) {
            return bad(
                "--pp",
                format!("stage {s} would hold a model chunk without a transformer block: every chunk needs at least one (model chunks {:?})", out[s]),
            );
        }
        Ok(out)
    }

    /// Blocks per stage under a first / last stage size (Megatron's
    /// `--decoder-first/last-pipeline-num-layers`): the given ends, the
    /// rest split evenly over the middle stages; errors name the flag.
    fn end_stage_sizes(&self, layers: u32, p: u32) -> Result<Vec<u32>, PlanError> {
        let bad = |field: &str, msg: String| Err(PlanError::invalid(ORIGIN, field, msg));
        if self.embedding_loss_in_split {
            return bad(
                "--embedding-loss-in-split",
                "cannot be combined with --first-stage-layers / --last-stage-layers (Megatron asserts it)".into(),
            );
        }
        let ends = [self.first_stage_layers, self.last_stage_layers];
        let given: u32 = ends.iter().flatten().sum();
        let named = ends.iter().flatten().count() as u32;
        if p == 1 && named == 2 {
            return bad(
                "--last-stage-layers",
                format!("{p} stage(s) cannot have both a first and a last stage size"),
            );
        }
        let (rest, left) = (layers as i64 - given as i64, p - named);
        let middle = match (rest, left) {
            (r, _) if r < 0 => {
                return bad(
                    "--first-stage-layers",
                    format!("the first and last stages take {given} blocks but the model has {layers}"),
                )
            }
            (0, 0) => 0,
            (r, 0) => {
                return bad(
                    "--first-stage-layers",
                    format!("the first and last stages take {given} of the model's {layers} blocks and no stage is left for the other {r}"),
                )
            }
            (r, l) if r % l as i64 != 0 => {
                return bad(
                    "--first-stage-layers",
                    format!("the {r} blocks left after the first and last stages do not split evenly over the {l} middle stages (Megatron asserts it)"),
                )
            }
            (r, l) => (r / l as i64) as u32,
        };
        Ok((0..p)
            .map(
                |s| match (s, self.first_stage_layers, self.last_stage_layers) {
                    (0, Some(first), _) => first,
                    (s, _, Some(last)) if s + 1 == p => last,
                    _ => middle,
                },
            )
            .collect())
    }

    /// The `p` stages of `chunks` (blocks per model chunk, per stage), each
    /// with its `d` TP groups of `t` ranks as the rank order numbers them.
    fn stages(&self, chunks: &[Vec<u32>], (t, p, d): (usize, usize, usize)) -> Vec<Stage> {
        (0..p)
            .map(|s| {
                let gpus = (0..d)
                    .flat_map(|j| {
                        let lo = self.rank_order.group_start(s, j, (t, p, d)) as u32;
                        lo..lo + t as u32
                    })
                    .collect();
                let mut st = Stage::new(chunks[s].iter().sum(), gpus);
                st.tp = t as u32;
                if chunks[s].iter().any(|&c| c != chunks[s][0]) {
                    st.chunks = chunks[s].clone();
                }
                st
            })
            .collect()
    }

    /// The pipeline of this shape on `ranks` GPUs for a model of `layers`
    /// blocks and a global batch of `global_batch` samples: replica `j` of
    /// stage `s` the TP group its [`RankOrder`] numbers (Megatron's default:
    /// stage `s` holds ranks `s*t*d .. (s+1)*t*d`), blocks split
    /// near-equally (the first stages one more when `PP` does not divide
    /// them). Errors name the flag.
    pub fn pipeline(
        &self,
        ranks: usize,
        layers: u32,
        global_batch: u32,
    ) -> Result<Pipeline, PlanError> {
        let bad = |field: &str, msg: String| Err(PlanError::invalid(ORIGIN, field, msg));
        let (t, p) = (self.tp as usize, self.pp as usize);
        if t == 0 || !ranks.is_multiple_of(t) {
            return bad(
                "--tp",
                format!("expected a TP degree dividing the {ranks} GPUs, got {t}"),
            );
        }
        if p == 0 || !(ranks / t).is_multiple_of(p) {
            return bad(
                "--pp",
                format!(
                    "expected a pipeline depth dividing the {} TP groups ({ranks} GPUs / TP {t}), got {p}",
                    ranks / t
                ),
            );
        }
        if p as u64 > layers as u64 {
            return bad(
                "--pp",
                format!("{p} stages but the model has {layers} blocks: every stage needs at least one block"),
            );
        }
        self.check_overlap()?;
        let d = ranks / (t * p);
        let b = self.microbatch_size;
        if b == 0 {
            return bad(
                "--microbatch-size",
                "expected at least 1 sample per micro-batch, got 0".into(),
            );
        }
        let per_step = d as u64 * b as u64;
        if !(global_batch as u64).is_multiple_of(per_step) {
            return bad(
                "--microbatch-size",
                format!(
                    "the global batch {global_batch} is not a multiple of DP {d} x micro-batch size {b} = {per_step}: every replica runs whole micro-batches (Megatron asserts it)"
                ),
            );
        }
        let m = (global_batch as u64 / per_step) as u32;
        let v = self.virtual_stages;
        if v == 0 {
            return bad(
                "--virtual-stages",
                "expected at least 1 model chunk per GPU, got 0".into(),
            );
        }
        if v > 1 && self.schedule != PipeSchedule::Interleaved {
            return bad(
                "--virtual-stages",
                format!(
                    "{v} model chunks per GPU need --pp-schedule interleaved, not {}",
                    self.schedule
                ),
            );
        }
        let chunks = self.split(layers, p as u32, v)?;
        let stages = self.stages(&chunks, (t, p, d));
        if self.schedule == PipeSchedule::Interleaved && p > 1 && !m.is_multiple_of(p as u32) {
            return bad(
                "--microbatch-size",
                format!(
                    "the interleaved schedule runs micro-batches in groups of the {p} stages: {m} micro-batches (global batch {global_batch} / (DP {d} x {b})) is not a multiple of {p}"
                ),
            );
        }
        let mut pipe = Pipeline::new(self.schedule, m, stages);
        pipe.virtual_stages = v;
        pipe.sequence_parallel = self.sequence_parallel && t > 1;
        pipe.tp_comm_overlap = self.tp_comm_overlap;
        pipe.tp_across_nodes = self.tp_across_nodes;
        pipe.overlap_grad_reduce = self.overlap_grad_reduce;
        pipe.overlap_param_gather = self.overlap_param_gather;
        let e = self.expert_parallel;
        let te = self.expert_tensor_parallel.unwrap_or(t as u32);
        if te != 1 && te != t as u32 {
            return bad(
                "--etp",
                format!("expected expert-TP 1 (whole experts) or the TP degree {t}, got {te}"),
            );
        }
        if e == 0 || !(d * t).is_multiple_of((e * te) as usize) {
            return bad(
                "--ep",
                format!("expected an expert-parallel degree whose product with expert-TP {te} divides the {} GPUs of a stage (DP {d} x TP {t}; EP groups are runs of expert-TP groups), got {e}", d * t),
            );
        }
        pipe.expert_parallel = e;
        pipe.expert_tensor_parallel = self.expert_tensor_parallel.filter(|&x| x != t as u32);
        pipe.moe_dispatcher = self.moe_dispatcher;
        Ok(pipe)
    }
}

/// The parts of a 3D shape a user pinned (`plan --tp 2 --pp 4`, a study's
/// `shapes` list); `None` = the planner chooses (the overlap knobs:
/// Megatron's defaults, off). The 3D planners search only the shapes that
/// match the parts they take ([`crate::planner::Planner::shape_pins`]); a
/// data-parallel planner takes only the trivial pins (`tp=1`, `pp=1`) its
/// plans already have.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShapePins {
    /// GPUs per TP group.
    pub tp: Option<u32>,
    /// Pipeline stages.
    pub pp: Option<u32>,
    /// The pipeline schedule.
    pub schedule: Option<PipeSchedule>,
    /// Model chunks per GPU (interleaved).
    pub virtual_stages: Option<u32>,
    /// Samples per micro-batch of one replica.
    pub microbatch_size: Option<u32>,
    /// Sequence parallelism inside the TP groups.
    pub sequence_parallel: Option<bool>,
    /// Gradient reduction per bucket under the last backward.
    pub overlap_grad_reduce: Option<bool>,
    /// Parameter all-gather per bucket under the next forward.
    pub overlap_param_gather: Option<bool>,
    /// How the ranks are numbered.
    pub rank_order: Option<RankOrder>,
    /// TP communication overlapped with the GEMMs.
    pub tp_comm_overlap: Option<bool>,
    /// TP groups may span nodes.
    pub tp_across_nodes: Option<bool>,
    /// Blocks of the first stage ([`Shape3d::first_stage_layers`]).
    pub first_stage_layers: Option<u32>,
    /// Blocks of the last stage ([`Shape3d::last_stage_layers`]).
    pub last_stage_layers: Option<u32>,
    /// The embedding and the loss counted as layers of the split
    /// ([`Shape3d::embedding_loss_in_split`]).
    pub embedding_loss_in_split: Option<bool>,
    /// Blocks of every model chunk ([`Shape3d::pipeline_layout`]).
    pub pipeline_layout: Option<PipelineLayout>,
    /// Expert parallelism ([`Shape3d::expert_parallel`]).
    pub ep: Option<u32>,
    /// Expert-TP ([`Shape3d::expert_tensor_parallel`]).
    pub etp: Option<u32>,
    /// The token dispatcher ([`Shape3d::moe_dispatcher`]).
    pub moe_dispatcher: Option<crate::experts::Dispatcher>,
}

/// A pin's on / off value (`true`, `on`, `yes`; `false`, `off`, `no`).
fn on_off(value: &str) -> Option<bool> {
    match value {
        "true" | "on" | "yes" => Some(true),
        "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

impl ShapePins {
    /// The pin names [`ShapePins::parse`] takes (the flags without their
    /// dashes; `schedule` is `--pp-schedule`).
    pub const AXES: [&'static str; 18] = [
        "tp",
        "pp",
        "schedule",
        "virtual_stages",
        "microbatch_size",
        "sequence_parallel",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "rank_order",
        "tp_comm_overlap",
        "tp_across_nodes",
        "first_stage_layers",
        "last_stage_layers",
        "embedding_loss_in_split",
        "pipeline_layout",
        "ep",
        "etp",
        "moe_dispatcher",
    ];

    /// The shape these pins ask for, every part not pinned at its default
    /// ([`Shape3d::default`]; the interleaved schedule's two chunks per GPU,
    /// torch's looped schedules' default and Megatron's least): the one
    /// resolution of the shape flags (`simulate`, `validate`).
    pub fn shape(&self) -> Shape3d {
        let d = Shape3d::default();
        // A layout of PP x VP chunks sets VP, and VP > 1 the interleaved
        // schedule (as Megatron derives them from the layout).
        let pp = self.pp.unwrap_or(d.pp);
        let laid = self
            .pipeline_layout
            .as_ref()
            .and_then(|l| l.virtual_stages(pp));
        let schedule = self.schedule.unwrap_or(match laid {
            Some(v) if v > 1 => PipeSchedule::Interleaved,
            _ => d.schedule,
        });
        let chunks = match laid {
            Some(v) => v,
            None if schedule == PipeSchedule::Interleaved => 2,
            None => d.virtual_stages,
        };
        Shape3d {
            tp: self.tp.unwrap_or(d.tp),
            pp: self.pp.unwrap_or(d.pp),
            sequence_parallel: self.sequence_parallel.unwrap_or(d.sequence_parallel),
            schedule,
            virtual_stages: self.virtual_stages.unwrap_or(chunks),
            microbatch_size: self.microbatch_size.unwrap_or(d.microbatch_size),
            tp_comm_overlap: self.tp_comm_overlap.unwrap_or(d.tp_comm_overlap),
            tp_across_nodes: self.tp_across_nodes.unwrap_or(d.tp_across_nodes),
            overlap_grad_reduce: self.overlap_grad_reduce.unwrap_or(d.overlap_grad_reduce),
            overlap_param_gather: self.overlap_param_gather.unwrap_or(d.overlap_param_gather),
            rank_order: self.rank_order.unwrap_or(d.rank_order),
            first_stage_layers: self.first_stage_layers,
            last_stage_layers: self.last_stage_layers,
            embedding_loss_in_split: self
                .embedding_loss_in_split
                .unwrap_or(d.embedding_loss_in_split),
            pipeline_layout: self.pipeline_layout.clone(),
            expert_parallel: self.ep.unwrap_or(d.expert_parallel),
            expert_tensor_parallel: self.etp,
            moe_dispatcher: self.moe_dispatcher.unwrap_or(d.moe_dispatcher),
        }
    }

    /// True when nothing is pinned.
    pub fn is_empty(&self) -> bool {
        *self == ShapePins::default()
    }

    /// True when the pins ask for more than one GPU per model copy or
    /// anything only a pipeline or TP plan has: what a data-parallel plan
    /// cannot be.
    pub fn needs_model_parallel(&self) -> bool {
        self.tp.is_some_and(|t| t > 1)
            || self.pp.is_some_and(|p| p > 1)
            || self.schedule.is_some()
            || self.virtual_stages.is_some_and(|v| v > 1)
            || self.microbatch_size.is_some()
            || self.sequence_parallel == Some(true)
            || self.overlap_grad_reduce == Some(true)
            || self.overlap_param_gather == Some(true)
            || self.rank_order.is_some_and(|o| o != RankOrder::TpDpPp)
            || self.tp_comm_overlap == Some(true)
            || self.tp_across_nodes == Some(true)
            || self.first_stage_layers.is_some()
            || self.last_stage_layers.is_some()
            || self.embedding_loss_in_split == Some(true)
            || self.pipeline_layout.is_some()
            || self.ep.is_some_and(|e| e > 1)
            || self.etp.is_some()
            || self.moe_dispatcher.is_some()
    }

    /// The names ([`ShapePins::AXES`]) of the parts pinned, in order.
    pub fn pinned(&self) -> Vec<&'static str> {
        let set = [
            self.tp.is_some(),
            self.pp.is_some(),
            self.schedule.is_some(),
            self.virtual_stages.is_some(),
            self.microbatch_size.is_some(),
            self.sequence_parallel.is_some(),
            self.overlap_grad_reduce.is_some(),
            self.overlap_param_gather.is_some(),
            self.rank_order.is_some(),
            self.tp_comm_overlap.is_some(),
            self.tp_across_nodes.is_some(),
            self.first_stage_layers.is_some(),
            self.last_stage_layers.is_some(),
            self.embedding_loss_in_split.is_some(),
            self.pipeline_layout.is_some(),
            self.ep.is_some(),
            self.etp.is_some(),
            self.moe_dispatcher.is_some(),
        ];
        ShapePins::AXES
            .iter()
            .zip(set)
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect()
    }

    /// `self` with every pin `other` sets overriding it.
    pub fn with(&self, other: &ShapePins) -> ShapePins {
        ShapePins {
            tp: other.tp.or(self.tp),
            pp: other.pp.or(self.pp),
            schedule: other.schedule.or(self.schedule),
            virtual_stages: other.virtual_stages.or(self.virtual_stages),
            microbatch_size: other.microbatch_size.or(self.microbatch_size),
            sequence_parallel: other.sequence_parallel.or(self.sequence_parallel),
            overlap_grad_reduce: other.overlap_grad_reduce.or(self.overlap_grad_reduce),
            overlap_param_gather: other.overlap_param_gather.or(self.overlap_param_gather),
            rank_order: other.rank_order.or(self.rank_order),
            tp_comm_overlap: other.tp_comm_overlap.or(self.tp_comm_overlap),
            tp_across_nodes: other.tp_across_nodes.or(self.tp_across_nodes),
            first_stage_layers: other.first_stage_layers.or(self.first_stage_layers),
            last_stage_layers: other.last_stage_layers.or(self.last_stage_layers),
            embedding_loss_in_split: other
                .embedding_loss_in_split
                .or(self.embedding_loss_in_split),
            pipeline_layout: other
                .pipeline_layout
                .clone()
                .or_else(|| self.pipeline_layout.clone()),
            ep: other.ep.or(self.ep),
            etp: other.etp.or(self.etp),
            moe_dispatcher: other.moe_dispatcher.or(self.moe_dispatcher),
        }
    }

    /// The data-parallel overlap the pins ask for (unpinned: off, as
    /// Megatron-LM defaults).
    pub fn dp_overlap(&self) -> DpOverlap {
        DpOverlap {
            grad_reduce: self.overlap_grad_reduce.unwrap_or(false),
            param_gather: self.overlap_param_gather.unwrap_or(false),
        }
    }

    /// Whether `s` has every pinned value.
    pub fn matches(&self, s: &Shape3d) -> bool {
        self.tp.is_none_or(|x| x == s.tp)
            && self.pp.is_none_or(|x| x == s.pp)
            && self.schedule.is_none_or(|x| x == s.schedule)
            && self.virtual_stages.is_none_or(|x| x == s.virtual_stages)
            && self.microbatch_size.is_none_or(|x| x == s.microbatch_size)
            && self
                .sequence_parallel
                .is_none_or(|x| x == s.sequence_parallel)
            && self
                .overlap_grad_reduce
                .is_none_or(|x| x == s.overlap_grad_reduce)
            && self
                .overlap_param_gather
                .is_none_or(|x| x == s.overlap_param_gather)
            && self.rank_order.is_none_or(|x| x == s.rank_order)
            && self.tp_comm_overlap.is_none_or(|x| x == s.tp_comm_overlap)
            && self.tp_across_nodes.is_none_or(|x| x == s.tp_across_nodes)
            && self.first_stage_layers == s.first_stage_layers
            && self.last_stage_layers == s.last_stage_layers
            && self
                .embedding_loss_in_split
                .is_none_or(|x| x == s.embedding_loss_in_split)
            && self.pipeline_layout == s.pipeline_layout
            && self.ep.is_none_or(|x| x == s.expert_parallel)
            && self
                .etp
                .is_none_or(|x| x == s.expert_tensor_parallel.unwrap_or(s.tp))
            && self.moe_dispatcher.is_none_or(|x| x == s.moe_dispatcher)
    }

    /// Pins written as `name=value` pairs separated by spaces or commas
    /// (`"tp=2 pp=4 schedule=interleaved overlap_grad_reduce=on
    /// rank_order=tp-pp-dp"`; empty: nothing pinned), as a study's `shapes`
    /// list spells them; errors name `origin` and `field` with what was
    /// expected.
    pub fn parse(
        text: &str,
        origin: &str,
        field: &str,
    ) -> Result<ShapePins, crate::error::SpecError> {
        let bad = |msg: String| crate::error::SpecError::invalid(origin, field, msg);
        let mut pins = ShapePins::default();
        for (name, value) in crate::lists::pairs(text, origin, field, "tp=2 pp=4 schedule=1f1b")? {
            let count = |what: &str| -> Result<u32, crate::error::SpecError> {
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|&x| (1..=crate::limits::MAX_GPUS as u32).contains(&x))
                    .ok_or_else(|| {
                        bad(format!(
                            "{name}: expected {what} from 1 to {}, got `{value}`",
                            crate::limits::MAX_GPUS
                        ))
                    })
            };
            let flag = |n: &str| {
                on_off(value).ok_or_else(|| {
                    bad(format!(
                        "{n}: expected true or false (on, off), got `{value}`"
                    ))
                })
            };
            match name.replace('-', "_").as_str() {
                "tp" => pins.tp = Some(count("a TP degree")?),
                "pp" => pins.pp = Some(count("a pipeline depth")?),
                "schedule" | "pp_schedule" => {
                    pins.schedule = Some(PipeSchedule::parse(value).ok_or_else(|| {
                        bad(format!(
                            "schedule: expected one of {}, got `{value}`",
                            PipeSchedule::ALL.map(|x| x.name()).join(", ")
                        ))
                    })?)
                }
                "virtual_stages" => pins.virtual_stages = Some(count("model chunks per GPU")?),
                "microbatch_size" => pins.microbatch_size = Some(count("samples per micro-batch")?),
                "sequence_parallel" => pins.sequence_parallel = Some(flag("sequence_parallel")?),
                "overlap_grad_reduce" => {
                    pins.overlap_grad_reduce = Some(flag("overlap_grad_reduce")?)
                }
                "overlap_param_gather" => {
                    pins.overlap_param_gather = Some(flag("overlap_param_gather")?)
                }
                "tp_comm_overlap" => pins.tp_comm_overlap = Some(flag("tp_comm_overlap")?),
                "tp_across_nodes" => pins.tp_across_nodes = Some(flag("tp_across_nodes")?),
                "first_stage_layers" => {
                    pins.first_stage_layers = Some(count("blocks of the first stage")?)
                }
                "last_stage_layers" => {
                    pins.last_stage_layers = Some(count("blocks of the last stage")?)
                }
                "embedding_loss_in_split" => {
                    pins.embedding_loss_in_split = Some(flag("embedding_loss_in_split")?)
                }
                "ep" | "expert_parallel" => pins.ep = Some(count("an expert-parallel degree")?),
                "etp" | "expert_tensor_parallel" => {
                    pins.etp = Some(count("an expert-tensor-parallel degree")?)
                }
                "moe_dispatcher" => {
                    pins.moe_dispatcher =
                        Some(crate::experts::Dispatcher::parse(value).ok_or_else(|| {
                            bad(format!(
                                "moe_dispatcher: expected alltoall or allgather, got `{value}`"
                            ))
                        })?)
                }
                "pipeline_layout" => {
                    let layout = PipelineLayout::parse(value)
                        .map_err(|e| bad(format!("pipeline_layout: {e} (in `{value}`)")))?;
                    pins.pipeline_layout = Some(layout)
                }
                "rank_order" => {
                    pins.rank_order = Some(RankOrder::parse(value).ok_or_else(|| {
                        bad(format!(
                            "rank_order: expected one of {}, got `{value}`",
                            RankOrder::ALL.map(|x| x.name()).join(", ")
                        ))
                    })?)
                }
                other => {
                    return Err(bad(format!(
                        "unknown shape pin `{other}` (known: {})",
                        ShapePins::AXES.join(", ")
                    )))
                }
            }
        }
        Ok(pins)
    }

    /// The pins as [`ShapePins::parse`] reads them back (`""` when nothing
    /// is pinned), in [`ShapePins::AXES`] order.
    pub fn text(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push(format!("{k}={v}"));
            }
        };
        put("tp", self.tp.map(|x| x.to_string()));
        put("pp", self.pp.map(|x| x.to_string()));
        put("schedule", self.schedule.map(|x| x.name().to_string()));
        put("virtual_stages", self.virtual_stages.map(|x| x.to_string()));
        put(
            "microbatch_size",
            self.microbatch_size.map(|x| x.to_string()),
        );
        put(
            "sequence_parallel",
            self.sequence_parallel.map(|x| x.to_string()),
        );
        put(
            "overlap_grad_reduce",
            self.overlap_grad_reduce.map(|x| x.to_string()),
        );
        put(
            "overlap_param_gather",
            self.overlap_param_gather.map(|x| x.to_string()),
        );
        put("rank_order", self.rank_order.map(|x| x.name().to_string()));
        put(
            "tp_comm_overlap",
            self.tp_comm_overlap.map(|x| x.to_string()),
        );
        put(
            "tp_across_nodes",
            self.tp_across_nodes.map(|x| x.to_string()),
        );
        put(
            "first_stage_layers",
            self.first_stage_layers.map(|x| x.to_string()),
        );
        put(
            "last_stage_layers",
            self.last_stage_layers.map(|x| x.to_string()),
        );
        put(
            "embedding_loss_in_split",
            self.embedding_loss_in_split.map(|x| x.to_string()),
        );
        put(
            "pipeline_layout",
            self.pipeline_layout.as_ref().map(PipelineLayout::text),
        );
        put("ep", self.ep.map(|x| x.to_string()));
        put("etp", self.etp.map(|x| x.to_string()));
        put(
            "moe_dispatcher",
            self.moe_dispatcher.map(|x| x.name().to_string()),
        );
        out.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_follow_megatrons_order() {
        let s = Shape3d {
            tp: 2,
            pp: 4,
            ..Shape3d::default()
        };
        let pipe = s.pipeline(1024, 80, 1024).unwrap();
        assert_eq!(pipe.depth(), 4);
        assert_eq!(pipe.microbatches, 8);
        let st = &pipe.stages[1];
        assert_eq!((st.blocks, st.tp, st.dp()), (20, 2, 128));
        // TP fastest: replica 3 of stage 1 is ranks 256 + 6, 7.
        assert_eq!(st.group(3), &[262, 263]);
    }

    /// `tp-pp-dp` puts a replica's stages on consecutive ranks: with TP 2 x
    /// PP 4 x DP 2 on 16 GPUs, replica 1 of stage 1 is ranks 10, 11 (TP
    /// group 1 x 4 + 1), where Megatron's order has ranks 6, 7 (group 1 x 2
    /// + 1); each layout is recognised as its order.
    #[test]
    fn rank_orders_place_replicas_and_stages() {
        let base = Shape3d {
            tp: 2,
            pp: 4,
            ..Shape3d::default()
        };
        let mega = base.pipeline(16, 8, 16).unwrap();
        let alt = Shape3d {
            rank_order: RankOrder::TpPpDp,
            ..base.clone()
        }
        .pipeline(16, 8, 16)
        .unwrap();
        assert_eq!(mega.stages[1].group(1), &[6, 7]);
        assert_eq!(alt.stages[1].group(1), &[10, 11]);
        assert_eq!(alt.stages[0].gpus, vec![0, 1, 8, 9]);
        assert_eq!(RankOrder::of(&mega), Some(RankOrder::TpDpPp));
        assert_eq!(RankOrder::of(&alt), Some(RankOrder::TpPpDp));
        for o in RankOrder::ALL {
            assert_eq!(RankOrder::parse(o.name()), Some(o));
        }
        // One replica: both orders are the same layout (Megatron's named).
        let one = Shape3d {
            rank_order: RankOrder::TpPpDp,
            ..base.clone()
        }
        .pipeline(8, 8, 16)
        .unwrap();
        assert_eq!(RankOrder::of(&one), Some(RankOrder::TpDpPp));
    }

    #[test]
    fn overlap_knobs_need_what_megatron_asserts() {
        let e = |s: Shape3d| s.pipeline(16, 8, 16).unwrap_err().to_string();
        let tco = Shape3d {
            tp: 2,
            tp_comm_overlap: true,
            ..Shape3d::default()
        };
        let m = e(tco);
        assert!(
            m.contains("--tp-comm-overlap") && m.contains("--sequence-parallel"),
            "{m}"
        );
        let opg = Shape3d {
            overlap_param_gather: true,
            ..Shape3d::default()
        };
        assert!(e(opg).contains("needs --overlap-grad-reduce"));
        let both = Shape3d {
            pp: 2,
            overlap_grad_reduce: true,
            overlap_param_gather: true,
            ..Shape3d::default()
        };
        assert!(both.check_sharding(Sharding::GradOp).is_ok());
        let m = both
            .check_sharding(Sharding::NoShard)
            .unwrap_err()
            .to_string();
        assert!(
            m.contains("--overlap-param-gather") && m.contains("grad-op"),
            "{m}"
        );
        let ogr = Shape3d {
            overlap_param_gather: false,
            ..both
        };
        assert!(ogr.check_sharding(Sharding::NoShard).is_ok());
        let m = ogr.check_sharding(Sharding::Full).unwrap_err().to_string();
        assert!(
            m.contains("--overlap-grad-reduce") && m.contains("FSDP"),
            "{m}"
        );
    }

    #[test]
    fn bad_shapes_name_the_flag() {
        let bad = |s: Shape3d, ranks, layers, batch| {
            s.pipeline(ranks, layers, batch).unwrap_err().to_string()
        };
        let tp3 = Shape3d {
            tp: 3,
            ..Shape3d::default()
        };
        assert!(bad(tp3, 16, 32, 64).contains("--tp"));
        let pp5 = Shape3d {
            pp: 5,
            ..Shape3d::default()
        };
        assert!(bad(pp5, 16, 32, 64).contains("--pp"));
        let deep = Shape3d {
            pp: 16,
            ..Shape3d::default()
        };
        assert!(bad(deep, 16, 8, 64).contains("at least one block"));
        let mb = Shape3d {
            microbatch_size: 3,
            ..Shape3d::default()
        };
        assert!(bad(mb, 16, 32, 64).contains("--microbatch-size"));
    }

    #[test]
    fn shape_pins_read_back_what_they_write_and_match_their_shapes() {
        let p = ShapePins::parse(
            "tp=2, pp=4 schedule=interleaved virtual-stages=2 microbatch_size=1 sequence_parallel=true overlap-grad-reduce=on overlap_param_gather=off rank_order=tp-pp-dp",
            "t",
            "f",
        )
        .unwrap();
        assert_eq!(ShapePins::parse(&p.text(), "t", "f").unwrap(), p);
        let s = Shape3d {
            tp: 2,
            pp: 4,
            schedule: PipeSchedule::Interleaved,
            virtual_stages: 2,
            sequence_parallel: true,
            overlap_grad_reduce: true,
            rank_order: RankOrder::TpPpDp,
            ..Shape3d::default()
        };
        assert!(p.matches(&s));
        assert!(!p.matches(&Shape3d {
            rank_order: RankOrder::TpDpPp,
            ..s.clone()
        }));
        assert!(!p.matches(&Shape3d { tp: 4, ..s.clone() }));
        assert!(ShapePins::default().matches(&s) && ShapePins::default().text().is_empty());
        assert!(p.needs_model_parallel());
        assert_eq!(p.pinned(), ShapePins::AXES[..9]);
        assert_eq!(
            ShapePins::parse("pp=2 tp=4", "t", "f").unwrap().pinned(),
            ["tp", "pp"]
        );
        let trivial = ShapePins::parse("tp=1 pp=1", "t", "f").unwrap();
        assert!(!trivial.needs_model_parallel() && !trivial.is_empty());
        for (bad, want) in [
            ("tp=0", "tp: expected a TP degree"),
            ("pp=x", "pp: expected a pipeline depth"),
            ("schedule=zigzag", "schedule: expected one of"),
            ("sequence_parallel=maybe", "expected true or false"),
            (
                "overlap_grad_reduce=2",
                "overlap_grad_reduce: expected true or false",
            ),
            (
                "rank_order=pp-tp-dp",
                "rank_order: expected one of tp-cp-ep-dp-pp, tp-pp-dp",
            ),
            ("dp=2", "unknown shape pin `dp`"),
            ("tp", "expected name=value"),
        ] {
            let e = ShapePins::parse(bad, "t.toml", "shapes[0]")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("shapes[0]"), "{bad}: {e}");
        }
    }

    /// Megatron's `--pipeline-model-parallel-layout`: DeepSeek-V3's 61
    /// blocks on PP 4 x VP 4 (no even split exists), the layout's chunk
    /// count setting VP and the interleaved schedule; a layout that does
    /// not place every block on PP x VP chunks is refused naming the flag.
    #[test]
    fn a_pipeline_layout_places_every_chunk() {
        let pins = ShapePins::parse(
            "tp=1 pp=4 pipeline_layout=Et*3|(t*4|)*14t*2L",
            "t.toml",
            "shapes[0]",
        )
        .unwrap();
        let shape = pins.shape();
        assert_eq!(shape.virtual_stages, 4);
        assert_eq!(shape.schedule, PipeSchedule::Interleaved);
        assert!(shape.megatron_splits(61));
        let pipe = shape.pipeline(8, 61, 64).unwrap();
        assert_eq!(pipe.stages[0].chunks, [3, 4, 4, 4]);
        assert_eq!(pipe.stages[3].chunks, [4, 4, 4, 2]);
        let blocks: Vec<u32> = pipe.stages.iter().map(|s| s.blocks).collect();
        assert_eq!(blocks, [15, 16, 16, 14]);
        // Chunk x on stage x % 4: chunk 15 (the last) ends at block 61.
        assert_eq!(pipe.virtual_first_block(15), 60);
        // The pins read back as written (commas and groups normalised).
        assert_eq!(ShapePins::parse(&pins.text(), "t", "f").unwrap(), pins);
        // On PP 2 the 16 chunks are VP 8; a model of another size, or a
        // layout beside a stage size, is refused naming the flag.
        let two = ShapePins {
            pp: Some(2),
            ..pins.clone()
        }
        .shape();
        assert_eq!(two.virtual_stages, 8);
        for (shape, layers, want) in [
            (shape.clone(), 60, "the model has 60"),
            (
                Shape3d {
                    first_stage_layers: Some(3),
                    ..shape.clone()
                },
                61,
                "cannot be combined",
            ),
            (
                Shape3d {
                    pp: 8,
                    ..shape.clone()
                },
                61,
                "PP 8 x VP 4 makes 32",
            ),
        ] {
            let err = shape.pipeline(8, layers, 64).unwrap_err().to_string();
            assert!(
                err.contains("--pipeline-layout") && err.contains(want),
                "{err}"
            );
            assert!(!shape.megatron_splits(layers));
        }
        let err = ShapePins::parse("pipeline_layout=Et|tX", "t.toml", "shapes[0]")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("shapes[0]") && err.contains("`X` at character 5"),
            "{err}"
        );
    }

    /// Megatron-Core's uneven splits (`get_num_layers_to_build`): Llama 3.1
    /// 405B's 126 blocks on PP 8 x VP 8 with the embedding and the loss
    /// counted as layers are two blocks per chunk, one in the first and the
    /// last; first / last stage sizes split the rest evenly; what Megatron
    /// asserts is refused naming the flag.
    #[test]
    fn uneven_splits_follow_megatron() {
        let base = Shape3d {
            tp: 1,
            pp: 8,
            schedule: PipeSchedule::Interleaved,
            virtual_stages: 8,
            ..Shape3d::default()
        };
        let err = base.pipeline(8, 126, 64).unwrap_err().to_string();
        assert!(err.contains("--virtual-stages"), "{err}");
        let pipe = Shape3d {
            embedding_loss_in_split: true,
            ..base.clone()
        }
        .pipeline(8, 126, 64)
        .unwrap();
        let chunks: Vec<u32> = (0..64).map(|k| pipe.virtual_blocks(k)).collect();
        assert_eq!(chunks[0], 1);
        assert_eq!(chunks[63], 1);
        assert!(chunks[1..63].iter().all(|&c| c == 2));
        assert_eq!(pipe.stages[0].blocks, 15);
        assert_eq!(pipe.stages[0].chunks[..2], [1, 2]);
        assert!(pipe.stages[3].chunks.is_empty());
        assert_eq!(pipe.virtual_first_block(63), 126);
        // First and last stage sizes (no interleaving): 7 + 3 x 6 + 7 on PP 5.
        let ends = Shape3d {
            pp: 5,
            first_stage_layers: Some(7),
            last_stage_layers: Some(7),
            ..Shape3d::default()
        };
        let pipe = ends.pipeline(5, 32, 10).unwrap();
        let blocks: Vec<u32> = pipe.stages.iter().map(|s| s.blocks).collect();
        assert_eq!(blocks, [7, 6, 6, 6, 7]);
        let odd = Shape3d {
            first_stage_layers: Some(8),
            ..ends.clone()
        };
        let err = odd.pipeline(5, 32, 10).unwrap_err().to_string();
        assert!(
            err.contains("--first-stage-layers") && err.contains("do not split evenly"),
            "{err}"
        );
        let both = Shape3d {
            embedding_loss_in_split: true,
            ..ends.clone()
        };
        assert!(both.pipeline(5, 32, 10).is_err());
        // A pipeline file with per-chunk counts is checked.
        let mut bad = Shape3d {
            embedding_loss_in_split: true,
            ..base.clone()
        }
        .pipeline(8, 126, 64)
        .unwrap();
        bad.stages[0].chunks[0] = 0;
        bad.stages[0].chunks[1] = 3;
        let strategy = crate::strategy::Strategy::cephalo(8, crate::strategy::Attention::Eager);
        let err = bad.validate(8, Some(126), 64, &strategy, "p").unwrap_err();
        assert!(err.to_string().contains("chunks"), "{err}");
    }
}
