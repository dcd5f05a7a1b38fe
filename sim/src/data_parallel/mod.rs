//! What one training iteration does, as one description both the event
//! simulation ([`crate::lower::data_parallel`]) and the fast model (`crate::fast`) read.
//!
//! # Phases
//!
//! FSDP units `u`: 0 = embedding, 1..=L = transformer blocks, L+1 = head.
//! An iteration is a sequence of [`Phase`]s; each uses one unit on every
//! GPU: `Forward(u)`, `Head` (forward and backward of the head together),
//! `Backward(u)`. The accumulation style decides the order and how
//! micro-batches map onto phases (one module each):
//!
//! * [`layered`]: `Forward(0..=L), Head, Backward(L..=0)` once; every phase
//!   runs all of a rank's micro-batches (Cephalo);
//! * [`microbatch`]: that sequence once per micro-batch pass (`no-sync`,
//!   `sync`), each phase running one micro-batch of every rank.
//!
//! The sharding decides, per phase, whether the unit is all-gathered before
//! its compute (`gather`), freed after it (`reshard`), and what reduces its
//! gradients after the phase (`reduce`):
//!
//! | sharding | gather | reshard | gradient reduction |
//! |---|---|---|---|
//! | full, hybrid | every phase | every phase | reduce-scatter in the shard group (hybrid: then an all-reduce of the shard across replica groups, on its own stream) |
//! | grad-op | forward and head phases (no-sync: first pass only) | backward and head phases (no-sync: last pass only) | reduce-scatter |
//! | none | never (full replicas) | never | all-reduce in DDP buckets of 25 MiB (the first 1 MiB), launched in gradient-ready order; buckets ready together run back to back as one op |
//!
//! Gradients are reduced after every `Head` / `Backward` phase under
//! layered and sync accumulation, after the last pass's only under no-sync.
//!
//! # Steps and memory
//!
//! Within a phase each rank runs one [`Step`] per micro-batch it computes:
//! an optional host-to-device copy, one or two compute ops, an optional
//! device-to-host copy, each with its memory changes ([`Mem`]; device and
//! host pools). Activation sizes are [`crate::cost::ActivationModel::micro`]
//! (bytes, anchored). Per micro-batch of rank i:
//!
//! * `Forward(u)`: keeps its output `C` (the next unit's input) and, for a
//!   block, what its recompute policy keeps beyond its input (`none`: all
//!   saved tensors, `selective`: the kept ones, `full`: nothing); a
//!   checkpointed block's forward also holds its no-grad working set while
//!   it runs. Offloading ranks copy those kept bytes to the host after the
//!   op ([`Rules::offload_head_input`] decides for the last block's output).
//! * `Head`: forward then backward of the head, holding the logits' working
//!   set; the backward hands `C` of output gradient to the last block and
//!   frees its input.
//! * `Backward(u)`, block: an offloading rank first copies back what the
//!   block kept (its input and internal tensors, and under
//!   [`Rules::offload_gradients`] its output gradient); a checkpointed block
//!   recomputes (`Recompute`: regenerates what it did not keep), then the
//!   backward holds its intermediate gradients and produces `C` of input
//!   gradient; at its end everything of the block is freed.
//! * `Backward(0)`, embedding: its backward frees the output gradient.
//! * When the gathered parameters are not in `reduce_dtype`, each backward
//!   holds the parameter-dtype gradient autograd produces before FSDP casts
//!   it into the gradient buffer.
//!
//! Unit buffers are phase-level (the lowering attaches them, and the fast
//! model's per-GPU bound treats them per phase): gathered parameters
//! (`param_dtype`) are allocated when their all-gather starts and freed
//! when the last compute op of the resharding phase ends (on a GPU with no
//! samples, when the all-gather ends); the first backward op of a unit in
//! an iteration (under `sync`, in every pass) allocates the unit's
//! unsharded gradient buffer (`reduce_dtype`), freed when its
//! reduce-scatter ends. DDP keeps its gradients and buckets for the whole
//! iteration (in the base).
//!
//! Units: durations [`SimTime`] (ns, rounded from the cost model's ms),
//! memory bytes.

pub mod costs;
pub mod layered;
pub mod microbatch;
pub mod phase;

pub use costs::{dur, Micro, RankCosts};
pub(crate) use costs::{micro_costs, micro_costs_tp, round};
pub use phase::{Phase, PhaseKind, Rules};

use crate::comm::CollectiveKind;
use crate::cost::CostModel;
use crate::engine::{MemAt, MemKind};
use crate::error::PlanError;
use crate::plan::Plan;
use crate::precision::Precision;
use crate::strategy::{Accumulation, Groups, Offload, Recompute, Sharding, Strategy};
use crate::units::{SimTime, GIB};

/// DDP's default gradient bucket cap (`bucket_cap_mb = 25`, MiB).
pub const DDP_BUCKET_BYTES: f64 = 25.0 * 1024.0 * 1024.0;
/// DDP's first (small) bucket after the rebuild, bytes (1 MiB,
/// `_DEFAULT_FIRST_BUCKET_BYTES`).
pub const DDP_FIRST_BUCKET_BYTES: f64 = 1024.0 * 1024.0;

/// The phases of one iteration of `strategy` over a model of `layers`
/// blocks in `passes` micro-batch passes (layered orders have one pass
/// whatever the count): the order, and per phase whether it gathers,
/// reshards, reduces and allocates gradients. The simulator and the real
/// trainer (`exec`) both run this list.
pub fn phases(strategy: &Strategy, layers: u32, passes: u32) -> Vec<Phase> {
    let slots = match strategy.accumulation {
        Accumulation::Layered => layered::phases(layers),
        Accumulation::NoSync | Accumulation::Sync => {
            microbatch::phases(layers, passes, strategy.accumulation)
        }
    };
    place_sharding(strategy, slots, passes)
}

/// Where the sharding places an accumulation style's phase slots: the
/// gather / reshard flags of the module table.
fn place_sharding(s: &Strategy, slots: Vec<Phase>, passes: u32) -> Vec<Phase> {
    let last = passes.saturating_sub(1);
    slots
        .into_iter()
        .map(|mut p| {
            let pass = p.pass.unwrap_or(0);
            let fwd_like = matches!(p.kind, PhaseKind::Forward | PhaseKind::Head);
            let bwd_like = matches!(p.kind, PhaseKind::Backward | PhaseKind::Head);
            let (gather, reshard) = match s.sharding {
                Sharding::Full | Sharding::Hybrid => (true, true),
                Sharding::NoShard => (false, false),
                Sharding::GradOp => match s.accumulation {
                    Accumulation::NoSync => (fwd_like && pass == 0, bwd_like && pass == last),
                    _ => (fwd_like, bwd_like),
                },
            };
            p.gather = gather;
            p.reshard = reshard;
            p
        })
        .collect()
}

/// A memory change of a step's op: device or host pool, at start or end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mem {
    /// Start or end of the op.
    pub at: MemAt,
    /// Host pool of the rank's node (else the rank's GPU).
    pub host: bool,
    /// Signed bytes.
    pub bytes: i64,
    /// What the bytes hold.
    pub kind: MemKind,
}

impl Mem {
    /// Activations / working memory on the rank's GPU.
    pub(crate) fn dev(at: MemAt, bytes: i64) -> Mem {
        Mem {
            at,
            host: false,
            bytes,
            kind: MemKind::Activations,
        }
    }
    /// Activations on the rank's node's host (offloaded).
    pub(crate) fn host(at: MemAt, bytes: i64) -> Mem {
        Mem {
            at,
            host: true,
            bytes,
            kind: MemKind::Activations,
        }
    }
    /// The same change, holding `kind`.
    pub(crate) fn of(self, kind: MemKind) -> Mem {
        Mem { kind, ..self }
    }
}

/// Most memory changes one op of a step carries (room for the lowering's
/// parameter free).
pub const MAX_MEMS: usize = 10;

/// A fixed-capacity list of memory changes (no allocation per op).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mems {
    items: [Mem; MAX_MEMS],
    len: u8,
}

impl Default for Mems {
    fn default() -> Self {
        Mems {
            items: [Mem::dev(MemAt::Start, 0); MAX_MEMS],
            len: 0,
        }
    }
}

impl Mems {
    /// Adds a change (zero changes are dropped).
    pub fn push(&mut self, m: Mem) {
        if m.bytes != 0 {
            assert!(
                (self.len as usize) < MAX_MEMS,
                "too many memory changes on one op"
            );
            self.items[self.len as usize] = m;
            self.len += 1;
        }
    }

    /// The changes.
    pub fn as_slice(&self) -> &[Mem] {
        &self.items[..self.len as usize]
    }
}

/// What a compute op of a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Embedding forward.
    EmbedFwd,
    /// Block forward.
    Fwd,
    /// Head forward.
    HeadFwd,
    /// Head backward.
    HeadBwd,
    /// Recomputed block forward (full or selective) before its backward.
    Recompute,
    /// Block backward.
    Bwd,
    /// Embedding backward.
    EmbedBwd,
}

/// A compute op of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// What it is.
    pub kind: OpKind,
    /// Duration.
    pub dur: SimTime,
    /// Memory changes.
    pub mem: Mems,
}

/// A host copy of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyWork {
    /// Duration (PCIe of the rank's GPU).
    pub dur: SimTime,
    /// Memory changes.
    pub mem: Mems,
}

/// One micro-batch of one rank in one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Micro-batch index (0-based, of this rank).
    pub micro: u32,
    /// Host-to-device copy before the compute.
    pub h2d: Option<CopyWork>,
    /// Compute ops in order (one or two).
    pub ops: [Option<Work>; 2],
    /// Device-to-host copy after the compute.
    pub d2h: Option<CopyWork>,
}

impl Step {
    /// The compute ops.
    pub fn works(&self) -> impl Iterator<Item = &Work> {
        self.ops.iter().flatten()
    }

    /// Mutable access to the step's backward op (head, block or embedding
    /// backward), if it has one.
    pub fn backward_work_mut(&mut self) -> Option<&mut Work> {
        self.ops
            .iter_mut()
            .flatten()
            .find(|w| matches!(w.kind, OpKind::HeadBwd | OpKind::Bwd | OpKind::EmbedBwd))
    }

    /// Mutable access to the last compute op.
    pub fn last_work_mut(&mut self) -> &mut Work {
        if self.ops[1].is_some() {
            self.ops[1].as_mut().expect("checked")
        } else {
            self.ops[0].as_mut().expect("every step has an op")
        }
    }
}

/// Per rank: its micro-batches and what it offloads.
#[derive(Debug, Clone)]
struct RankInfo {
    /// Index into `Description::micro` per micro-batch.
    micro: Vec<u32>,
    offloads: bool,
    batch: u32,
}

/// Collective buffers of one unit.
#[derive(Debug, Clone, Copy)]
pub struct UnitInfo {
    /// Parameters.
    pub params: u64,
    /// Recompute policy (embedding and head: none).
    pub recompute: Recompute,
    /// Gathered parameter bytes (`param_dtype`).
    pub param_bytes: i64,
    /// Unsharded gradient bytes (`reduce_dtype`).
    pub grad_bytes: i64,
}

/// What a strategy does on a workload, independent of any plan: its
/// phase order, copy rules, per-unit facts and the steps of one
/// micro-batch. Planners ask it about hypothetical micro-batches; a
/// [`Description`] adds a plan.
#[derive(Debug, Clone)]
pub struct Routine<'a> {
    /// The cost model.
    pub costs: &'a CostModel,
    /// The strategy.
    pub strategy: Strategy,
    /// The element formats of the strategy on the workload
    /// ([`Strategy::precision`]).
    pub precision: Precision,
    /// The style's copy rules.
    pub rules: Rules,
    /// Per unit.
    pub units: Vec<UnitInfo>,
}

impl<'a> Routine<'a> {
    /// The routine of `strategy` on the workload of `costs`.
    pub fn new(costs: &'a CostModel, strategy: Strategy) -> Routine<'a> {
        let s = strategy;
        let layers = costs.workload.model.layers;
        let rules = match s.accumulation {
            Accumulation::Layered => layered::RULES,
            _ => microbatch::RULES,
        };
        let precision = s.precision(costs.workload.dtype);
        let pb = precision.params.bytes();
        let gb = precision.grads.bytes();
        let units = costs
            .unit_params()
            .iter()
            .enumerate()
            .map(|(u, &p)| UnitInfo {
                params: p,
                recompute: if u == 0 || u as u32 == layers + 1 {
                    Recompute::None
                } else {
                    s.checkpointing.block(u as u32)
                },
                param_bytes: round(p as f64 * pb),
                grad_bytes: round(p as f64 * gb),
            })
            .collect();
        Routine {
            costs,
            strategy,
            precision,
            rules,
            units,
        }
    }

    /// Blocks of the model.
    pub fn layers(&self) -> u32 {
        self.costs.workload.model.layers
    }

    /// The phases of an iteration of `passes` micro-batch passes (layered
    /// routines have one pass whatever the count).
    pub fn phases(&self, passes: u32) -> Vec<Phase> {
        phases(&self.strategy, self.layers(), passes)
    }

    /// The cost-table row of a micro-batch of `m` samples on `rank`'s GPU
    /// type ([`costs::Micro`]: durations, activation bytes, and the host
    /// copies when the strategy offloads activations).
    pub fn micro(&self, rank: usize, m: u32) -> Result<Micro, PlanError> {
        let imp = crate::perfmodel::BlockImpl::of(&self.strategy);
        let core = self.strategy.checkpointing.attention_core();
        // Only a routine that offloads activations issues host copies.
        if self.strategy.offload == Offload::Activations {
            costs::step_costs(self.costs, rank, m, imp, core, self.rules)
        } else {
            micro_costs(self.costs, rank, m, imp, core)
        }
    }

    /// The step of micro-batch `micro` in phase `ph` on a GPU whose row of
    /// the cost table is `mc` ([`Routine::micro`]), `offloads` when the
    /// rank sends activations to the host. Reads only the row: the cost
    /// model is not consulted while steps are described.
    pub fn step(&self, mc: &Micro, ph: &Phase, micro: u32, offloads: bool) -> Step {
        let a = &mc.act;
        let c = round(a.checkpoint);
        let u = ph.unit as usize;
        let unit = self.units[u];
        let layers = self.layers() as usize;
        let block = (1..=layers).contains(&u);
        let copies = &mc.copies;
        // What a block keeps beyond its input (the embedding and the head
        // keep nothing of their own).
        let internal = if block {
            mc.internal(unit.recompute)
        } else {
            0
        };
        let mut grad_mems = Mems::default();
        if self.strategy.sharding.shards_params() && self.precision.casts_grads() {
            let cast = round(unit.params as f64 * self.precision.params.bytes());
            grad_mems.push(Mem::dev(MemAt::Start, cast).of(MemKind::Grads));
            grad_mems.push(Mem::dev(MemAt::End, -cast).of(MemKind::Grads));
        }
        let offload = offloads;
        let mut step = Step {
            micro,
            h2d: None,
            ops: [None, None],
            d2h: None,
        };
        match ph.kind {
            PhaseKind::Forward => self.forward(mc, u, internal, offload, &mut step),
            PhaseKind::Head => {
                if offload && self.rules.offload_head_input {
                    step.h2d = Some(h2d(c, copies.out));
                }
                let w = round(a.head_work);
                let mut fm = Mems::default();
                fm.push(Mem::dev(MemAt::Start, w));
                let mut bm = grad_mems;
                bm.push(Mem::dev(MemAt::Start, c));
                bm.push(Mem::dev(MemAt::End, -w));
                bm.push(Mem::dev(MemAt::End, -c));
                step.ops[0] = Some(Work {
                    kind: OpKind::HeadFwd,
                    dur: mc.f_head,
                    mem: fm,
                });
                step.ops[1] = Some(Work {
                    kind: OpKind::HeadBwd,
                    dur: mc.b_head,
                    mem: bm,
                });
                if offload && self.rules.offload_gradients {
                    step.d2h = Some(d2h(c, copies.out));
                }
            }
            PhaseKind::Backward if u == 0 => {
                if offload && self.rules.offload_gradients {
                    step.h2d = Some(h2d(c, copies.out));
                }
                let mut m = grad_mems;
                m.push(Mem::dev(MemAt::End, -c));
                step.ops[0] = Some(Work {
                    kind: OpKind::EmbedBwd,
                    dur: mc.b_emb,
                    mem: m,
                });
            }
            PhaseKind::Backward => {
                let grads = (mc, grad_mems);
                self.block_backward(grads, u, internal, offload, &mut step)
            }
        }
        step
    }

    /// The forward of unit `u` (the embedding or a block keeping
    /// `internal` bytes beyond its input) into `step`, with its copy of
    /// what it keeps to the host when the rank `offload`s.
    fn forward(&self, mc: &Micro, u: usize, internal: i64, offload: bool, step: &mut Step) {
        let (a, copies) = (&mc.act, &mc.copies);
        let c = round(a.checkpoint);
        let unit = self.units[u];
        let layers = self.layers() as usize;
        let mut mem = Mems::default();
        mem.push(Mem::dev(MemAt::Start, c + internal));
        let (kind, d) = if u == 0 {
            (OpKind::EmbedFwd, mc.f_emb)
        } else {
            if unit.recompute == Recompute::Full {
                let w = round(a.nograd_work);
                mem.push(Mem::dev(MemAt::Start, w));
                mem.push(Mem::dev(MemAt::End, -w));
            }
            (OpKind::Fwd, mc.f_blk)
        };
        step.ops[0] = Some(Work { kind, dur: d, mem });
        if !offload {
            return;
        }
        let out = if u < layers || self.rules.offload_head_input {
            c
        } else {
            0
        };
        let bytes = out + internal;
        if bytes > 0 {
            let pol = costs::policy_index(unit.recompute);
            let phys = if !(1..=layers).contains(&u) {
                copies.out
            } else if out == c {
                copies.fwd[pol]
            } else {
                copies.fwd_last[pol]
            };
            step.d2h = Some(d2h(bytes, phys));
        }
    }

    /// The backward of block `u` (its recompute first, if any) into
    /// `step`, with the gradient cast buffers `grad_mems`, and the host
    /// copies of an offloading rank.
    fn block_backward(
        &self,
        (mc, grad_mems): (&Micro, Mems),
        u: usize,
        internal: i64,
        offload: bool,
        step: &mut Step,
    ) {
        let (a, copies) = (&mc.act, &mc.copies);
        let c = round(a.checkpoint);
        let unit = self.units[u];
        if offload {
            let grads = if self.rules.offload_gradients { c } else { 0 };
            let bytes = c + internal + grads;
            step.h2d = Some(h2d(bytes, copies.bwd[costs::policy_index(unit.recompute)]));
        }
        let regen = round(a.regenerated(unit.recompute));
        let mut slot = 0;
        if unit.recompute != Recompute::None {
            let mut m = Mems::default();
            m.push(Mem::dev(MemAt::Start, regen));
            let d = match unit.recompute {
                Recompute::Full => mc.re_full,
                _ => mc.re_sel,
            };
            step.ops[0] = Some(Work {
                kind: OpKind::Recompute,
                dur: d,
                mem: m,
            });
            slot = 1;
        }
        let gw = round(a.grad_work);
        let mut m = grad_mems;
        m.push(Mem::dev(MemAt::Start, gw + c));
        m.push(Mem::dev(MemAt::End, -(gw + regen + internal + c + c)));
        step.ops[slot] = Some(Work {
            kind: OpKind::Bwd,
            dur: mc.b_blk,
            mem: m,
        });
        if offload && self.rules.offload_gradients {
            step.d2h = Some(d2h(c, copies.out));
        }
    }

    /// Bytes per parameter of the sharded training state on the GPU
    /// ([`Precision::gpu_state_bytes_per_param`] as the strategy offloads).
    pub fn gpu_state_bytes_per_param(&self) -> f64 {
        self.precision
            .gpu_state_bytes_per_param(self.strategy.offloads_optimizer())
    }

    /// Bytes per local parameter of host memory for the optimizer
    /// ([`Precision::host_state_bytes_per_param`] as the strategy offloads).
    pub fn host_state_bytes_per_param(&self) -> f64 {
        self.precision
            .host_state_bytes_per_param(self.strategy.offloads_optimizer())
    }

    /// Memory that never changes during the iteration on a GPU holding
    /// `local_params` parameters of state, bytes: framework overhead, the
    /// fixed workspace of the memory model, the training state (DDP: the
    /// whole state plus its gradient buckets).
    pub fn base_device_bytes(&self, local_params: f64) -> i64 {
        let s = &self.strategy;
        let total = self.costs.workload.model.total_params() as f64;
        let mut b = self.costs.overhead_gib() * GIB + self.costs.activations.fixed_bytes;
        b += self.gpu_state_bytes_per_param() * local_params;
        if s.sharding.keeps_full_grads() {
            b += self.precision.grads.bytes() * total;
        }
        round(b)
    }

    /// The optimizer step of `rank` holding the state of `local_params`
    /// parameters, ms: on its GPU, or (offloaded) on the host, the node's
    /// ranks sharing its memory bandwidth.
    pub fn optimizer_ms(&self, rank: usize, local_params: f64) -> f64 {
        match self.strategy.offload {
            Offload::Optimizer => {
                let c = &self.costs.workload.cluster;
                let sharing = c.node_ranks(c.gpus[rank].node).len();
                self.costs.host_optimizer_ms(
                    rank,
                    local_params,
                    self.precision.params.bytes(),
                    sharing,
                )
            }
            _ => self.costs.optimizer_ms(rank, local_params),
        }
    }

    /// An offloaded optimizer's copy of `local_params` updated parameters
    /// (in `param_dtype`) back to `rank`'s GPU, ms.
    pub fn params_up_ms(&self, rank: usize, local_params: f64) -> f64 {
        self.costs
            .host_copy_ms(rank, local_params * self.precision.params.bytes())
    }

    /// Collective kind that reduces gradients inside the shard group.
    pub fn reduce_kind(&self) -> CollectiveKind {
        self.strategy.sharding.reduce_kind()
    }

    /// Sizes (bytes) of the DDP buckets that become ready with unit `u`'s
    /// backward: buckets of [`DDP_BUCKET_BYTES`] (the first
    /// [`DDP_FIRST_BUCKET_BYTES`]) laid over the gradients in ready order
    /// (head, blocks L..1, embedding); a bucket is ready when the unit
    /// holding its last byte is done. (DDP fills buckets with whole
    /// parameter tensors; byte granularity is this model's approximation.)
    pub fn ddp_buckets(&self, u: usize) -> Vec<f64> {
        let l = self.layers() as usize;
        let gb = self.precision.grads.bytes();
        let order = std::iter::once(l + 1)
            .chain((1..=l).rev())
            .chain(std::iter::once(0));
        let (mut start, mut end, mut total) = (0.0, 0.0, 0.0);
        for x in order {
            let b = self.units[x].params as f64 * gb;
            if x == u {
                start = total;
                end = total + b;
            }
            total += b;
        }
        if end <= start {
            return vec![];
        }
        let upper =
            |i: u64| -> f64 { (DDP_FIRST_BUCKET_BYTES + i as f64 * DDP_BUCKET_BYTES).min(total) };
        let lower = |i: u64| -> f64 {
            if i == 0 {
                0.0
            } else {
                upper(i - 1)
            }
        };
        // First bucket whose upper boundary lies above `start`.
        let mut i = if start < DDP_FIRST_BUCKET_BYTES {
            0
        } else {
            ((start - DDP_FIRST_BUCKET_BYTES) / DDP_BUCKET_BYTES).floor() as u64 + 1
        };
        while i > 0 && upper(i - 1) > start {
            i -= 1;
        }
        let mut v = Vec::new();
        loop {
            let (lo, hi) = (lower(i), upper(i));
            if lo >= total || hi > end {
                break;
            }
            if hi > start {
                v.push(hi - lo);
            }
            if hi >= total {
                break;
            }
            i += 1;
        }
        v
    }
}

/// The iteration of one plan: a [`Routine`] plus the plan's ranks,
/// groups and phases.
#[derive(Debug, Clone)]
pub struct Description<'a> {
    /// The strategy's routine on the workload.
    pub routine: Routine<'a>,
    /// The cost model.
    pub costs: &'a CostModel,
    /// The plan.
    pub plan: &'a Plan,
    /// The plan's strategy.
    pub strategy: Strategy,
    /// Shard and replica groups.
    pub groups: Groups,
    /// Phases in order.
    pub phases: Vec<Phase>,
    /// Per unit (as [`Routine::units`]).
    pub units: Vec<UnitInfo>,
    ranks: Vec<RankInfo>,
    micro: Vec<Micro>,
    /// Per rank: what its iteration costs beyond its steps.
    pub rank_costs: Vec<RankCosts>,
}

impl<'a> Description<'a> {
    /// Describes one iteration of `plan` (validated first, origin `plan`).
    pub fn new(costs: &'a CostModel, plan: &'a Plan) -> Result<Description<'a>, PlanError> {
        let ranks = costs.ranks();
        plan.validate(ranks, costs.workload.global_batch, "plan")?;
        crate::strategy::validate(&plan.strategy, &costs.workload.cluster)?;
        let s = plan.strategy;
        let routine = Routine::new(costs, s);
        let phases = routine.phases(plan.passes());
        // Per (type, m) micro-batch costs, computed once.
        let mut micro: Vec<Micro> = Vec::new();
        let mut keys: Vec<(usize, u32)> = Vec::new();
        let mut infos = Vec::with_capacity(ranks);
        for (r, rp) in plan.gpus.iter().enumerate() {
            let t = costs.rank_type[r];
            let mut idx = Vec::with_capacity(rp.microbatches as usize);
            for m in rp.microbatch_sizes() {
                let i = match keys.iter().position(|&k| k == (t, m)) {
                    Some(i) => i,
                    None => {
                        micro.push(routine.micro(r, m)?);
                        keys.push((t, m));
                        keys.len() - 1
                    }
                };
                idx.push(i as u32);
            }
            infos.push(RankInfo {
                micro: idx,
                offloads: s.offloads_activations(rp.microbatches),
                batch: rp.batch,
            });
        }
        let mut d = Description {
            units: routine.units.clone(),
            routine,
            costs,
            plan,
            strategy: s,
            groups: s.groups(ranks),
            phases,
            ranks: infos,
            micro,
            rank_costs: Vec::new(),
        };
        d.rank_costs = (0..ranks).map(|r| d.rank_costs(r)).collect();
        Ok(d)
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Blocks of the model.
    pub fn layers(&self) -> u32 {
        self.routine.layers()
    }

    /// Whether `rank` computes anything (batch > 0).
    pub fn computes(&self, rank: usize) -> bool {
        self.ranks[rank].batch > 0
    }

    /// Micro-batch passes of a micro-batch-major iteration (`None`:
    /// layered, one pass over every micro-batch).
    pub fn passes(&self) -> Option<u32> {
        self.phases.last().and_then(|p| p.pass).map(|k| k + 1)
    }

    /// The phases of micro-batch pass `k` (micro-batch-major only; they
    /// are contiguous, in pass order).
    fn pass_phases(&self, k: u32) -> &[Phase] {
        let per = self.phases.len() / self.passes().unwrap_or(1).max(1) as usize;
        &self.phases[k as usize * per..(k as usize + 1) * per]
    }

    /// Maximal runs of identical passes, `(first pass, length)` in order,
    /// covering every pass: passes whose phases have the same units and
    /// flags and in which every rank runs a micro-batch of the same size
    /// (or none), so their lowered ops are the same. Empty for a layered
    /// iteration.
    pub fn pass_runs(&self) -> Vec<(u32, u32)> {
        let Some(n) = self.passes() else {
            return vec![];
        };
        let same = |a: u32, b: u32| {
            let (pa, pb) = (self.pass_phases(a), self.pass_phases(b));
            pa.iter()
                .zip(pb)
                .all(|(x, y)| Phase { pass: y.pass, ..*x } == *y)
                && self
                    .ranks
                    .iter()
                    .all(|r| r.micro.get(a as usize) == r.micro.get(b as usize))
        };
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for k in 0..n {
            match runs.last_mut() {
                Some((first, len)) if same(*first, k) => *len += 1,
                _ => runs.push((k, 1)),
            }
        }
        runs
    }

    /// The same iteration running only the passes `kept` (ascending
    /// original indices of a micro-batch-major iteration), renumbered
    /// from 0: each keeps its phases' flags and every rank's micro-batch
    /// of that pass, so a kept pass lowers to the ops it has in the whole
    /// iteration ([`crate::fold`] simulates such a reduced iteration).
    pub fn with_passes(&self, kept: &[u32]) -> Description<'a> {
        let mut phases = Vec::with_capacity(kept.len() * self.pass_phases(0).len());
        for (i, &k) in kept.iter().enumerate() {
            phases.extend(self.pass_phases(k).iter().map(|p| Phase {
                pass: Some(i as u32),
                ..*p
            }));
        }
        let ranks = self
            .ranks
            .iter()
            .map(|r| RankInfo {
                micro: kept
                    .iter()
                    .filter_map(|&k| r.micro.get(k as usize).copied())
                    .collect(),
                offloads: r.offloads,
                batch: r.batch,
            })
            .collect();
        Description {
            routine: self.routine.clone(),
            costs: self.costs,
            plan: self.plan,
            strategy: self.strategy,
            groups: self.groups,
            phases,
            units: self.units.clone(),
            ranks,
            micro: self.micro.clone(),
            rank_costs: self.rank_costs.clone(),
        }
    }

    /// Steps of one iteration over all ranks (what the lowered graph's op
    /// count grows with; ranks are grouped by micro-batch count).
    pub fn total_steps(&self) -> u64 {
        let mut by_n: Vec<(usize, u64)> = Vec::new();
        for r in &self.ranks {
            match by_n.iter_mut().find(|x| x.0 == r.micro.len()) {
                Some(x) => x.1 += 1,
                None => by_n.push((r.micro.len(), 1)),
            }
        }
        by_n.iter()
            .map(|&(n, count)| {
                let per: u64 = self
                    .phases
                    .iter()
                    .map(|ph| match ph.pass {
                        None => n as u64,
                        Some(k) => u64::from((k as usize) < n),
                    })
                    .sum();
                per.saturating_mul(count)
            })
            .fold(0u64, u64::saturating_add)
    }

    /// Number of steps `rank` runs in phase `p`.
    pub fn step_count(&self, rank: usize, p: usize) -> usize {
        let n = self.ranks[rank].micro.len();
        match self.phases[p].pass {
            None => n,
            Some(k) => usize::from((k as usize) < n),
        }
    }

    /// The `j`-th step of `rank` in phase `p` (`j < step_count`).
    pub fn step(&self, rank: usize, p: usize, j: usize) -> Step {
        let ph = &self.phases[p];
        let info = &self.ranks[rank];
        let k = match ph.pass {
            None => j,
            Some(k) => k as usize,
        };
        let mc = &self.micro[info.micro[k] as usize];
        self.routine.step(mc, ph, k as u32, info.offloads)
    }

    /// The step `rank` runs after step `j` of phase `p` (the next one in
    /// this phase, else the first of phase `p + 1`) with its unit, if the
    /// rank has one there: what the backward prefetches the copy of.
    pub fn next_step(&self, rank: usize, p: usize, j: usize) -> Option<(u32, Step)> {
        if j + 1 < self.step_count(rank, p) {
            return Some((self.phases[p].unit, self.step(rank, p, j + 1)));
        }
        if p + 1 < self.phases.len() && self.step_count(rank, p + 1) > 0 {
            return Some((self.phases[p + 1].unit, self.step(rank, p + 1, 0)));
        }
        None
    }

    /// Pieces (bytes) of the all-gather of unit `u` in shard group `k`, in
    /// group order.
    pub fn gather_pieces(&self, u: usize, k: usize) -> Vec<f64> {
        let bytes = self.units[u].params as f64 * self.routine.precision.comm.bytes();
        self.groups
            .shard_group(k)
            .map(|r| self.plan.gpus[r].state_fraction * bytes)
            .collect()
    }

    /// Pieces of the reduce-scatter of unit `u` in shard group `k`.
    pub fn reduce_pieces(&self, u: usize, k: usize) -> Vec<f64> {
        let bytes = self.units[u].params as f64 * self.routine.precision.grads.bytes();
        self.groups
            .shard_group(k)
            .map(|r| self.plan.gpus[r].state_fraction * bytes)
            .collect()
    }

    /// Buffer (bytes) of the hybrid all-reduce of unit `u` at position `j`:
    /// the shard every group holds there.
    pub fn replica_buffer(&self, u: usize, j: usize) -> f64 {
        self.units[u].params as f64
            * self.routine.precision.grads.bytes()
            * self.plan.gpus[j].state_fraction
    }

    /// See [`Routine::ddp_buckets`].
    pub fn ddp_buckets(&self, u: usize) -> Vec<f64> {
        self.routine.ddp_buckets(u)
    }

    /// Constant GPU memory of `rank`, bytes ([`Routine::base_device_bytes`]).
    pub fn base_device_bytes(&self, rank: usize) -> i64 {
        self.routine.base_device_bytes(self.local_params(rank))
    }

    /// Host memory that never changes on node `n` (an offloaded optimizer's
    /// state of the node's ranks), bytes.
    pub fn base_host_bytes(&self, n: usize) -> i64 {
        let per_param = self.routine.host_state_bytes_per_param();
        let c = &self.costs.workload.cluster;
        round(
            c.node_ranks(n)
                .iter()
                .map(|&r| per_param * self.local_params(r))
                .sum(),
        )
    }

    /// Parameters whose optimizer state `rank` holds and steps.
    pub fn local_params(&self, rank: usize) -> f64 {
        let total = self.costs.workload.model.total_params() as f64;
        match self.strategy.sharding {
            Sharding::NoShard => total,
            _ => self.plan.gpus[rank].state_fraction * total,
        }
    }

    /// What `rank`'s iteration costs beyond its steps: its optimizer step
    /// and an offloaded optimizer's copies, read from the cost model once.
    fn rank_costs(&self, rank: usize) -> RankCosts {
        let local = self.local_params(rank);
        let routine = &self.routine;
        let mut rc = RankCosts {
            optimizer: dur(routine.optimizer_ms(rank, local)),
            ..RankCosts::default()
        };
        if self.strategy.offload == Offload::Optimizer {
            rc.params_up = dur(routine.params_up_ms(rank, local));
            rc.grads_down = (0..self.units.len())
                .map(|u| {
                    dur(self
                        .costs
                        .host_copy_ms(rank, self.offload_grad_bytes(rank, u)))
                })
                .collect();
        }
        rc
    }

    /// Bytes of `rank`'s reduced gradient shard of unit `u` that an
    /// offloaded optimizer copies to the host (fp32, as DeepSpeed casts it
    /// on the GPU first).
    pub fn offload_grad_bytes(&self, rank: usize, u: usize) -> f64 {
        let share = match self.strategy.sharding {
            Sharding::NoShard => 1.0,
            _ => self.plan.gpus[rank].state_fraction,
        };
        self.units[u].params as f64 * 4.0 * share
    }
}

/// A copy of `bytes` from the device to the host taking `phys`.
fn d2h(bytes: i64, phys: SimTime) -> CopyWork {
    let mut m = Mems::default();
    m.push(Mem::host(MemAt::Start, bytes));
    m.push(Mem::dev(MemAt::End, -bytes));
    CopyWork { dur: phys, mem: m }
}

/// A copy of `bytes` from the host to the device taking `phys`.
fn h2d(bytes: i64, phys: SimTime) -> CopyWork {
    let mut m = Mems::default();
    m.push(Mem::dev(MemAt::Start, bytes));
    m.push(Mem::host(MemAt::End, -bytes));
    CopyWork { dur: phys, mem: m }
}
