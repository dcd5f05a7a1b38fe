//! The training strategy of a plan: how the state is sharded, how gradients
//! are accumulated over micro-batches, what is recomputed, what lives on the
//! host, which dtypes the collectives carry and which attention kernel runs.
//!
//! Names follow PyTorch FSDP and DeepSpeed, which users know
//! (PyTorch's FSDP and DDP documentation and DeepSpeed's ZeRO papers, Rajbhandari
//! et al. SC 2020 and Ren et al. USENIX ATC 2021, describe what each does):
//!
//! | axis | values |
//! |---|---|
//! | [`Sharding`] | `full` (FULL_SHARD / ZeRO-3; uneven state fractions allowed), `grad-op` (SHARD_GRAD_OP / ZeRO-2: parameters stay gathered from a unit's forward to its backward), `none` (NO_SHARD / DDP: full replicas, bucketed all-reduce), `hybrid` (HYBRID_SHARD: full shard inside a shard group, replicas across groups) |
//! | [`Accumulation`] | `layered` (Cephalo: layer-major, one all-gather per unit per pass), `no-sync` (PyTorch micro-batch-major under `no_sync()`: unsharded gradients kept until the last micro-batch), `sync` (micro-batch-major, a reduce-scatter after every micro-batch) |
//! | [`Checkpointing`] | `none`, `full`, `selective`, `every:K` |
//! | [`Offload`] | `none`, `activations` (saved block tensors to pinned host memory), `optimizer` (ZeRO-Offload: state and step on the host) |
//! | param / reduce dtype | what all-gathers carry and unsharded parameters occupy / what gradient reductions carry (FSDP `MixedPrecision`) |
//! | [`Attention`] | `eager` (explicit `s x s` scores) or `flash` (fused causal kernel) |
//!
//! A [`StrategySpec`] is what the user pinned (flags, every axis optional);
//! [`StrategySpec::resolve`] fills the rest with the documented defaults and
//! checks the result against the cluster, giving a [`Strategy`].
//!
//! # Defaults
//!
//! * Sharding `full`, accumulation `layered`.
//! * With `layered` accumulation (Cephalo's trainer): checkpointing `full`,
//!   offload `activations`, gathers and reductions in fp32 (the trainer
//!   all-gathers its fp32 flat parameters and autocasts per op).
//! * With `no-sync` / `sync` (PyTorch FSDP as people run it): checkpointing
//!   `none` (activation checkpointing is opt-in), offload `none`, gathers in
//!   the training dtype (`MixedPrecision(param_dtype=bf16)` for `--dtype
//!   bf16`), reductions in fp32 (FSDP2 since torch 2.15 reduces in the
//!   gradient's dtype, fp32 for fp32 master parameters; torchtitan's default).
//! * Attention: what the block profile in use was measured with (the
//!   reference profiles and `cephalo profile` measure eager attention).
//! * Hybrid shard group: the GPUs of one node (every node must then hold the
//!   same number of GPUs).

use crate::choice::{self, Choice};
use crate::cluster::Cluster;
use crate::error::SpecError;
use crate::precision::{NumFormat, Precision};
pub use crate::stack::Stack;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How the training state is split over GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Sharding {
    /// FULL_SHARD / ZeRO-3: parameters, gradients and optimizer state
    /// sharded; every unit is all-gathered before its forward and again
    /// before its backward.
    Full,
    /// SHARD_GRAD_OP / ZeRO-2: gradients and optimizer state sharded; a
    /// unit's parameters stay gathered from its forward to its backward.
    GradOp,
    /// NO_SHARD / DDP: every GPU holds the whole state; gradients are
    /// all-reduced in buckets that overlap the backward.
    NoShard,
    /// HYBRID_SHARD: full sharding inside each shard group, replicas across
    /// groups; gradients reduce-scattered in the group, then all-reduced
    /// across groups.
    Hybrid,
}

impl Sharding {
    /// Every value, in the order users see them listed, with its names and
    /// meaning (PyTorch and DeepSpeed names accepted too).
    pub const CHOICES: &'static [Choice<Sharding>] = &[
        Choice {
            value: Sharding::Full,
            name: "full",
            aliases: &["full-shard", "zero3"],
            known_as: "FULL_SHARD / ZeRO-3",
            meaning: "FULL_SHARD / ZeRO-3: parameters, gradients, optimizer state sharded",
        },
        Choice {
            value: Sharding::GradOp,
            name: "grad-op",
            aliases: &["shard-grad-op", "zero2"],
            known_as: "SHARD_GRAD_OP / ZeRO-2",
            meaning: "SHARD_GRAD_OP / ZeRO-2: parameters gathered from forward to backward",
        },
        Choice {
            value: Sharding::NoShard,
            name: "none",
            aliases: &["no-shard", "ddp"],
            known_as: "NO_SHARD / DDP",
            meaning: "NO_SHARD / DDP: replicas, bucketed gradient all-reduce",
        },
        Choice {
            value: Sharding::Hybrid,
            name: "hybrid",
            aliases: &["hybrid-shard", "hsdp"],
            known_as: "HYBRID_SHARD",
            meaning: "HYBRID_SHARD (with --shard-group N): sharded in groups, replicated across",
        },
    ];

    /// All values, in the order users see them listed.
    pub const ALL: [Sharding; 4] = [
        Sharding::Full,
        Sharding::GradOp,
        Sharding::NoShard,
        Sharding::Hybrid,
    ];

    /// The name (`full`, `grad-op`, `none`, `hybrid`).
    pub fn name(self) -> &'static str {
        choice::name(Self::CHOICES, self)
    }

    /// Parses a name or alias ([`Sharding::CHOICES`]).
    pub fn parse(s: &str) -> Option<Sharding> {
        choice::parse(Self::CHOICES, s)
    }

    /// Whether parameters are sharded (and so all-gathered).
    pub fn shards_params(self) -> bool {
        !matches!(self, Sharding::NoShard)
    }

    /// Whether every GPU keeps whole, replicated gradients that it
    /// all-reduces in buckets (DDP), rather than reducing each unit's
    /// gradient into its shard and freeing it.
    pub fn keeps_full_grads(self) -> bool {
        match self {
            Sharding::NoShard => true,
            Sharding::Full | Sharding::GradOp | Sharding::Hybrid => false,
        }
    }

    /// The collective that reduces gradients inside a shard group: an
    /// all-reduce of replicated gradients, a reduce-scatter into shards.
    pub fn reduce_kind(self) -> crate::comm::CollectiveKind {
        if self.keeps_full_grads() {
            crate::comm::CollectiveKind::AllReduce
        } else {
            crate::comm::CollectiveKind::ReduceScatter
        }
    }

    /// Whether the shard groups are replicas of each other, each shard
    /// all-reduced across them after its reduce-scatter (HSDP).
    pub fn reduces_across_groups(self) -> bool {
        match self {
            Sharding::Hybrid => true,
            Sharding::Full | Sharding::GradOp | Sharding::NoShard => false,
        }
    }

    /// Whether a unit's parameters are gathered for its use and freed
    /// after it (FSDP's reshard; per use at one stage, once per step inside
    /// pipeline stages).
    pub fn reshards_per_unit(self) -> bool {
        match self {
            Sharding::Full | Sharding::Hybrid => true,
            Sharding::GradOp | Sharding::NoShard => false,
        }
    }

    /// Inside pipeline and TP stages: whether the optimizer updates a shard
    /// that is then all-gathered into the whole parameters after the step
    /// (Megatron's distributed optimizer, `grad-op`).
    pub fn gathers_after_step(self) -> bool {
        match self {
            Sharding::GradOp => true,
            Sharding::Full | Sharding::Hybrid | Sharding::NoShard => false,
        }
    }

    /// How it splits the training state over the GPUs (what planners may
    /// choose for each GPU's state fraction).
    pub fn state_split(self) -> StateSplit {
        match self {
            Sharding::Full | Sharding::GradOp => StateSplit::Uneven,
            Sharding::Hybrid => StateSplit::EvenPerGroup,
            Sharding::NoShard => StateSplit::Replicated,
        }
    }
}

/// How a sharding splits the training state over the GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateSplit {
    /// Any fractions summing to 1 over the GPUs (Cephalo's uneven shards;
    /// planners water-fill the state into the memory each GPU has free).
    Uneven,
    /// Even inside each shard group, the same in every group (each group
    /// holds a replica of the sharded state).
    EvenPerGroup,
    /// Every GPU holds all of it.
    Replicated,
}

/// How gradients are accumulated over a rank's micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Accumulation {
    /// Cephalo's layer-major schedule: every unit runs all of a rank's
    /// micro-batches before the next unit, so each unit is all-gathered once
    /// per pass and reduced once per iteration, whatever the micro-batch count.
    Layered,
    /// PyTorch's micro-batch-major accumulation under `no_sync()`: each
    /// micro-batch runs a whole forward and backward, re-gathering the
    /// parameters; unsharded gradients are kept until the last micro-batch,
    /// which reduces them once.
    NoSync,
    /// Micro-batch-major with a gradient reduction after every micro-batch
    /// (sharded gradients accumulate; communication every micro-batch).
    Sync,
}

impl Accumulation {
    /// Every value with its names and meaning.
    pub const CHOICES: &'static [Choice<Accumulation>] = &[
        Choice {
            value: Accumulation::Layered,
            name: "layered",
            aliases: &["layer-major", "cephalo"],
            known_as: "Cephalo",
            meaning: "Cephalo's layer-major accumulation: one gather and one reduce per unit",
        },
        Choice {
            value: Accumulation::NoSync,
            name: "no-sync",
            aliases: &[],
            known_as: "PyTorch no_sync()",
            meaning: "micro-batch-major under no_sync(): one reduction at the last micro-batch",
        },
        Choice {
            value: Accumulation::Sync,
            name: "sync",
            aliases: &[],
            known_as: "reduce after every micro-batch",
            meaning: "micro-batch-major, gradients reduced after every micro-batch",
        },
    ];

    /// All values.
    pub const ALL: [Accumulation; 3] = [
        Accumulation::Layered,
        Accumulation::NoSync,
        Accumulation::Sync,
    ];

    /// The name.
    pub fn name(self) -> &'static str {
        choice::name(Self::CHOICES, self)
    }

    /// Parses a name or alias ([`Accumulation::CHOICES`]).
    pub fn parse(s: &str) -> Option<Accumulation> {
        choice::parse(Self::CHOICES, s)
    }

    /// Micro-batch-major (every micro-batch a whole forward and backward):
    /// all ranks then run the same number of micro-batches.
    pub fn is_microbatch_major(self) -> bool {
        !matches!(self, Accumulation::Layered)
    }
}

/// What the backward recomputes instead of keeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Checkpointing {
    /// No recompute: every block keeps all the tensors its backward needs
    /// on the GPU from its forward to its backward.
    None,
    /// Full recompute of every block: only block inputs are kept; the
    /// backward reruns the block's forward first.
    Full,
    /// torchtitan's op-level selective checkpointing (`selective`, option
    /// `op`): every block keeps its input, every second matmul output and
    /// the attention kernel's output, and recomputes the other matmuls and
    /// the cheap ops (norms, activation functions, dropout, residual adds,
    /// rotary) and, with eager attention, the score chain. See
    /// [`crate::activation`] for the exact tensor lists.
    Selective,
    /// Megatron-LM's selective recompute (`--recompute-granularity
    /// selective`, core attention): only `QK^T`, softmax, dropout and `AV`
    /// are recomputed; everything else is kept.
    SelectiveAttention,
    /// Full recompute of every K-th block (blocks K, 2K, ... counting from
    /// 1, as torchtitan's `ac_freq`); the others keep everything.
    Every(u32),
}

impl Checkpointing {
    /// Every value with its names and meaning; `every:K` stands for every
    /// `Every(K)` (its value here, `Every(0)`, is never a real one).
    pub const CHOICES: &'static [Choice<Checkpointing>] = &[
        Choice {
            value: Checkpointing::None,
            name: "none",
            aliases: &["off", "no"],
            known_as: "",
            meaning: "keep every activation for the backward",
        },
        Choice {
            value: Checkpointing::Full,
            name: "full",
            aliases: &["on"],
            known_as: "",
            meaning: "keep block inputs, recompute each block before its backward",
        },
        Choice {
            value: Checkpointing::Selective,
            name: "selective",
            aliases: &["op", "sac", "selective:op"],
            known_as: "torchtitan selective (op)",
            meaning: "keep every second matmul output and the attention output, recompute the rest (torchtitan's op-level policy)",
        },
        Choice {
            value: Checkpointing::SelectiveAttention,
            name: "selective:attention",
            aliases: &["core-attn", "selective:core-attn"],
            known_as: "Megatron-LM --recompute-granularity selective",
            meaning: "recompute only the core attention (scores, softmax, dropout, weighted values)",
        },
        Choice {
            value: Checkpointing::Every(0),
            name: "every:K",
            aliases: &[],
            known_as: "",
            meaning: "full recompute of every K-th block, keep the others",
        },
    ];

    /// The name (`none`, `full`, `selective`, `every:K`).
    pub fn name(self) -> String {
        match self {
            Checkpointing::Every(k) => format!("every:{k}"),
            c => choice::name(Self::CHOICES, c).into(),
        }
    }

    /// Parses a name; `every:0` and malformed `every:` values are an
    /// error naming what was expected.
    pub fn parse(s: &str) -> Result<Checkpointing, String> {
        let t = s.trim().to_ascii_lowercase();
        if let Some(k) = t.strip_prefix("every:") {
            return match k.trim().parse::<u32>() {
                Ok(0) => Err("every:K needs K >= 1 (every:1 is full)".into()),
                Ok(k) => Ok(Checkpointing::Every(k)),
                Err(_) => Err(format!("every:K needs a whole number K >= 1, got `{k}`")),
            };
        }
        match Self::CHOICES
            .iter()
            .find(|c| c.name == t || c.aliases.contains(&t.as_str()))
        {
            Some(c) if c.value != Checkpointing::Every(0) => Ok(c.value),
            _ => Err(format!(
                "expected {}, got `{s}`",
                choice::expected(Self::CHOICES)
            )),
        }
    }

    /// Whether the selective policy is core-attention recompute
    /// (Megatron's) rather than op-level (torchtitan's).
    pub fn attention_core(self) -> bool {
        self == Checkpointing::SelectiveAttention
    }

    /// The recompute policy of block `b` (1-based block number).
    pub fn block(self, b: u32) -> Recompute {
        match self {
            Checkpointing::None => Recompute::None,
            Checkpointing::Full => Recompute::Full,
            Checkpointing::Selective | Checkpointing::SelectiveAttention => Recompute::Selective,
            Checkpointing::Every(k) => {
                if k > 0 && b.is_multiple_of(k) {
                    Recompute::Full
                } else {
                    Recompute::None
                }
            }
        }
    }
}

impl Serialize for Checkpointing {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Checkpointing {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Checkpointing::parse(&s).map_err(serde::de::Error::custom)
    }
}

crate::serde_by_name!(Sharding);
crate::serde_by_name!(Accumulation);
crate::serde_by_name!(Offload);
crate::serde_by_name!(Attention);

/// The recompute policy of one block (what [`Checkpointing`] means for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recompute {
    /// Keep everything, recompute nothing.
    None,
    /// Keep the block input, recompute the whole forward.
    Full,
    /// The strategy's selective policy (op-level or core attention,
    /// [`Checkpointing::attention_core`]): keep part, recompute the rest.
    Selective,
}

/// What lives in host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Offload {
    /// Nothing.
    None,
    /// The tensors blocks keep for their backward go to pinned host memory
    /// after the forward and come back before the backward (Cephalo's
    /// trainer when it accumulates, or `torch.autograd.graph.save_on_cpu`).
    Activations,
    /// ZeRO-Offload: fp32 master parameters, gradients and Adam moments on
    /// the host; reduced gradients go down, the step runs on the CPU, updated
    /// parameters come back up.
    Optimizer,
}

impl Offload {
    /// Every value with its names and meaning.
    pub const CHOICES: &'static [Choice<Offload>] = &[
        Choice {
            value: Offload::None,
            name: "none",
            aliases: &["no", "off"],
            known_as: "",
            meaning: "everything stays on the GPU",
        },
        Choice {
            value: Offload::Activations,
            name: "activations",
            aliases: &["activation", "acts"],
            known_as: "",
            meaning: "saved activations go to host memory and come back for the backward",
        },
        Choice {
            value: Offload::Optimizer,
            name: "optimizer",
            aliases: &["optim", "zero-offload"],
            known_as: "ZeRO-Offload",
            meaning: "ZeRO-Offload: master weights and Adam moments on the host, step on the CPU",
        },
    ];

    /// All values.
    pub const ALL: [Offload; 3] = [Offload::None, Offload::Activations, Offload::Optimizer];

    /// The name.
    pub fn name(self) -> &'static str {
        choice::name(Self::CHOICES, self)
    }

    /// Parses a name or alias ([`Offload::CHOICES`]).
    pub fn parse(s: &str) -> Option<Offload> {
        choice::parse(Self::CHOICES, s)
    }
}

/// The attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attention {
    /// Explicit `heads x s x s` scores, softmax and (GPT/BERT) dropout, as
    /// the reference profiles measured.
    Eager,
    /// A fused kernel (FlashAttention / SDPA flash): no `s x s` tensor in
    /// memory, causal models skip the masked half of the score FLOPs.
    Flash,
}

impl Attention {
    /// Every value with its names and meaning (`sdpa` means flash).
    pub const CHOICES: &'static [Choice<Attention>] = &[
        Choice {
            value: Attention::Eager,
            name: "eager",
            aliases: &["math"],
            known_as: "",
            meaning: "explicit attention scores",
        },
        Choice {
            value: Attention::Flash,
            name: "flash",
            aliases: &["sdpa", "fused", "flash-attention"],
            known_as: "",
            meaning: "a fused kernel (FlashAttention)",
        },
    ];

    /// The name.
    pub fn name(self) -> &'static str {
        choice::name(Self::CHOICES, self)
    }

    /// Parses a name or alias ([`Attention::CHOICES`]).
    pub fn parse(s: &str) -> Option<Attention> {
        choice::parse(Self::CHOICES, s)
    }

    /// Index (0 eager, 1 flash) for per-kernel tables.
    pub fn index(self) -> usize {
        match self {
            Attention::Eager => 0,
            Attention::Flash => 1,
        }
    }
}

/// A complete training strategy (every axis decided). Part of every plan,
/// plan file and report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Strategy {
    /// How the state is sharded.
    pub sharding: Sharding,
    /// GPUs per shard group: the cluster's GPU count unless `hybrid`.
    /// Groups are consecutive ranks: group k = ranks `k*g .. (k+1)*g`.
    pub shard_group: u32,
    /// Gradient accumulation style.
    pub accumulation: Accumulation,
    /// Activation checkpointing.
    pub checkpointing: Checkpointing,
    /// What lives on the host.
    pub offload: Offload,
    /// Element type of gathered (unsharded) parameters: what all-gathers
    /// carry and gathered units occupy.
    pub param_dtype: NumFormat,
    /// Element type of gradient reductions (reduce-scatter, all-reduce) and
    /// of unsharded gradient buffers.
    pub reduce_dtype: NumFormat,
    /// Attention kernel.
    pub attention: Attention,
    /// The training stack that runs the blocks ([`Stack`]; files written
    /// before it existed read as `pytorch`).
    #[serde(default)]
    pub stack: Stack,
    /// `torch.compile` on the blocks (PyTorch stacks only).
    #[serde(default)]
    pub compile: bool,
}

impl Strategy {
    /// Moves the strategy to the `pytorch` stack for `target`, a framework
    /// that runs PyTorch modules: a plan made for Megatron-Core's fused
    /// kernels is exported and simulated on it. The note saying so, if the
    /// stack changed.
    pub fn run_on_pytorch(&mut self, target: &str) -> Option<String> {
        if self.stack == Stack::PyTorch {
            return None;
        }
        let note = format!(
            "the plan runs on the {} stack (fused kernels); {target} runs PyTorch modules: exported and simulated on the pytorch stack",
            self.stack.name()
        );
        self.stack = Stack::PyTorch;
        Some(note)
    }

    /// Runs the blocks eager for `target`, a framework whose config cannot
    /// say `torch.compile` (the training script compiles the model). The
    /// note saying so, if the plan compiled.
    pub fn run_eager(&mut self, target: &str) -> Option<String> {
        if !self.compile {
            return None;
        }
        self.compile = false;
        Some(format!(
            "the plan compiles its blocks with torch.compile: the {target} config does not (compile the model in the training script), exported and simulated eager"
        ))
    }

    /// Cephalo's trainer on `ranks` GPUs: full shard, layered accumulation,
    /// full recompute, activations offloaded, fp32 gathers and reductions,
    /// attention `attention`.
    pub fn cephalo(ranks: u32, attention: Attention) -> Strategy {
        Strategy {
            sharding: Sharding::Full,
            shard_group: ranks.max(1),
            accumulation: Accumulation::Layered,
            checkpointing: Checkpointing::Full,
            offload: Offload::Activations,
            param_dtype: NumFormat::Fp32,
            reduce_dtype: NumFormat::Fp32,
            attention,
            stack: Stack::PyTorch,
            compile: false,
        }
    }

    /// One line for tables: `full layered ckpt=full offload=activations
    /// p=fp32 r=fp32 eager pytorch` (hybrid shows its group: `hybrid:8`;
    /// a compiled PyTorch stack `pytorch+compile`).
    pub fn label(&self) -> String {
        let sharding = match self.sharding {
            Sharding::Hybrid => format!("hybrid:{}", self.shard_group),
            s => s.name().to_string(),
        };
        format!(
            "{sharding} {} ckpt={} offload={} p={} r={} {} {}{}",
            self.accumulation.name(),
            self.checkpointing.name(),
            self.offload.name(),
            self.param_dtype,
            self.reduce_dtype,
            self.attention.name(),
            self.stack.name(),
            if self.compile { "+compile" } else { "" }
        )
    }

    /// The shard and replica groups of a cluster of `ranks` GPUs.
    pub fn groups(&self, ranks: usize) -> Groups {
        let g = (self.shard_group as usize).clamp(1, ranks.max(1));
        Groups {
            ranks,
            group_size: g,
        }
    }

    /// The element formats of training with this strategy on a workload
    /// computing in `compute` (`--dtype`): the one place a [`Precision`]
    /// is built. Parameters gathered and all-gathered in `param_dtype`,
    /// gradients reduced in `reduce_dtype`, the optimizer state in
    /// [`Precision::OPTIMIZER`] (fp32).
    pub fn precision(&self, compute: NumFormat) -> Precision {
        Precision {
            compute,
            params: self.param_dtype,
            grads: self.reduce_dtype,
            optimizer: Precision::OPTIMIZER,
            comm: self.param_dtype,
        }
    }

    /// Whether the optimizer (its state and step) lives on the host
    /// (ZeRO-Offload).
    pub fn offloads_optimizer(&self) -> bool {
        self.offload == Offload::Optimizer
    }

    /// Whether micro-batch `k` of a rank keeps its activations on the GPU
    /// (false: they go to the host). Layered accumulation offloads only when
    /// a rank runs more than one micro-batch (Cephalo's trainer keeps a
    /// single micro-batch's inputs on the GPU); micro-batch-major schedules
    /// offload whenever asked.
    pub fn offloads_activations(&self, microbatches: u32) -> bool {
        self.offload == Offload::Activations
            && (self.accumulation.is_microbatch_major() || microbatches > 1)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The stack a TP / PP plan runs unless the user names one: Megatron-Core
/// when its stages keep replicated or ZeRO-1 state (how Megatron-LM and
/// NeMo run TP x PP x DP), PyTorch when they shard with FSDP (torchtitan's
/// FSDP2 x TP x PP).
pub fn default_3d_stack(sharding: Sharding) -> Stack {
    match sharding {
        Sharding::Full | Sharding::Hybrid => Stack::PyTorch,
        Sharding::GradOp | Sharding::NoShard => Stack::Megatron,
    }
}

/// Bytes per parameter of mixed-precision (and fp32) Adam training state:
/// fp32 parameters (4), fp32 gradients (4) and two fp32 moments (8): the
/// state of [`Precision::OPTIMIZER`] ([`Precision::state_bytes_per_param`]).
pub const STATE_BYTES_PER_PARAM: f64 = Precision::STATE_TENSORS * Precision::OPTIMIZER.bytes();

/// Shard and replica groups of a cluster: shard group `k` holds ranks
/// `k*group_size .. (k+1)*group_size`; replica group `j` holds the ranks at
/// position `j` of every shard group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Groups {
    /// GPUs in the cluster.
    pub ranks: usize,
    /// GPUs per shard group.
    pub group_size: usize,
}

impl Groups {
    /// Number of shard groups (= the replica group size).
    pub fn count(&self) -> usize {
        self.ranks / self.group_size.max(1)
    }

    /// Shard group of `rank`.
    pub fn group_of(&self, rank: usize) -> usize {
        rank / self.group_size
    }

    /// Position of `rank` inside its shard group (= its replica group).
    pub fn position(&self, rank: usize) -> usize {
        rank % self.group_size
    }

    /// Ranks of shard group `k`.
    pub fn shard_group(&self, k: usize) -> std::ops::Range<usize> {
        k * self.group_size..(k + 1) * self.group_size
    }

    /// Ranks of replica group `j` (position `j` of every shard group).
    pub fn replica_group(&self, j: usize) -> Vec<usize> {
        (0..self.count()).map(|k| k * self.group_size + j).collect()
    }
}

/// The axes a user pinned (flags or a plan file); `None` = choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StrategySpec {
    /// `--sharding`.
    pub sharding: Option<Sharding>,
    /// `--shard-group` (hybrid only).
    pub shard_group: Option<u32>,
    /// `--accumulation`.
    pub accumulation: Option<Accumulation>,
    /// `--checkpointing`.
    pub checkpointing: Option<Checkpointing>,
    /// `--offload`.
    pub offload: Option<Offload>,
    /// `--param-dtype`.
    pub param_dtype: Option<NumFormat>,
    /// `--reduce-dtype`.
    pub reduce_dtype: Option<NumFormat>,
    /// `--attention`.
    pub attention: Option<Attention>,
    /// `--stack`.
    #[serde(default)]
    pub stack: Option<Stack>,
    /// `--compile`.
    #[serde(default)]
    pub compile: Option<bool>,
}

/// What [`StrategySpec::resolve`] needs to know about the workload.
#[derive(Debug, Clone, Copy)]
pub struct StrategyContext<'a> {
    /// The cluster (GPU count, node sizes, host memory).
    pub cluster: &'a Cluster,
    /// The training dtype (`--dtype`).
    pub dtype: NumFormat,
    /// The attention the block profiles in use were measured with.
    pub profile_attention: Attention,
}

impl StrategySpec {
    /// No axis pinned (a `'static` value for problems built in code).
    pub const NONE: StrategySpec = StrategySpec {
        sharding: None,
        shard_group: None,
        accumulation: None,
        checkpointing: None,
        offload: None,
        param_dtype: None,
        reduce_dtype: None,
        attention: None,
        stack: None,
        compile: None,
    };

    /// A spec pinning every axis of `s`.
    pub fn pinned(s: &Strategy) -> StrategySpec {
        StrategySpec {
            sharding: Some(s.sharding),
            shard_group: (s.sharding == Sharding::Hybrid).then_some(s.shard_group),
            accumulation: Some(s.accumulation),
            checkpointing: Some(s.checkpointing),
            offload: Some(s.offload),
            param_dtype: Some(s.param_dtype),
            reduce_dtype: Some(s.reduce_dtype),
            attention: Some(s.attention),
            stack: Some(s.stack),
            compile: Some(s.compile),
        }
    }

    /// The axis names [`StrategySpec::set`] takes (the flags without
    /// their dashes).
    pub const AXES: [&'static str; 10] = [
        "sharding",
        "shard_group",
        "accumulation",
        "checkpointing",
        "offload",
        "param_dtype",
        "reduce_dtype",
        "attention",
        "stack",
        "compile",
    ];

    /// Pins `axis` (a name of [`StrategySpec::AXES`], `-` or `_`) to the
    /// value `value` spells; an unknown axis or value is an error naming
    /// `origin` and `field` with what was expected.
    pub fn set(
        &mut self,
        axis: &str,
        value: &str,
        origin: &str,
        field: &str,
    ) -> Result<(), SpecError> {
        let bad = |msg: String| SpecError::invalid(origin, field, msg);
        let expected = |choices: &str| bad(format!("expected {choices}, got `{value}`"));
        let dtype = || NumFormat::parse(value).ok_or_else(|| expected("fp32, bf16 or fp16"));
        match axis.replace('-', "_").as_str() {
            "sharding" => {
                self.sharding = Some(
                    Sharding::parse(value)
                        .ok_or_else(|| expected(&crate::choice::expected(Sharding::CHOICES)))?,
                )
            }
            "shard_group" => {
                self.shard_group = Some(
                    value
                        .parse::<u32>()
                        .ok()
                        .filter(|&g| g >= 1)
                        .ok_or_else(|| expected("a group size >= 1"))?,
                )
            }
            "accumulation" => {
                self.accumulation = Some(
                    Accumulation::parse(value)
                        .ok_or_else(|| expected(&crate::choice::expected(Accumulation::CHOICES)))?,
                )
            }
            "checkpointing" => self.checkpointing = Some(Checkpointing::parse(value).map_err(bad)?),
            "offload" => {
                self.offload = Some(
                    Offload::parse(value)
                        .ok_or_else(|| expected(&crate::choice::expected(Offload::CHOICES)))?,
                )
            }
            "param_dtype" => self.param_dtype = Some(dtype()?),
            "reduce_dtype" => self.reduce_dtype = Some(dtype()?),
            "attention" => {
                self.attention = Some(
                    Attention::parse(value)
                        .ok_or_else(|| expected(&crate::choice::expected(Attention::CHOICES)))?,
                )
            }
            "stack" => {
                self.stack = Some(
                    Stack::parse(value)
                        .ok_or_else(|| expected(&crate::choice::expected(Stack::CHOICES)))?,
                )
            }
            "compile" => {
                self.compile = Some(match value.trim().to_ascii_lowercase().as_str() {
                    "on" | "true" | "yes" | "1" => true,
                    "off" | "false" | "no" | "0" => false,
                    _ => return Err(expected("on or off")),
                })
            }
            _ => {
                return Err(bad(format!(
                    "unknown strategy axis `{axis}` (known: {})",
                    StrategySpec::AXES.join(", ")
                )))
            }
        }
        Ok(())
    }

    /// Pins written as `axis=value` pairs separated by spaces or commas
    /// (`"sharding=full checkpointing=selective"`; empty: nothing
    /// pinned), as a study's `strategies` list spells them.
    pub fn parse_pins(text: &str, origin: &str, field: &str) -> Result<StrategySpec, SpecError> {
        let mut spec = StrategySpec::NONE;
        let example = "sharding=full checkpointing=selective";
        for (axis, value) in crate::lists::pairs(text, origin, field, example)? {
            spec.set(axis, value, origin, field)?;
        }
        Ok(spec)
    }

    /// The pins as [`StrategySpec::parse_pins`] reads them back (`""`
    /// when nothing is pinned), axes in [`StrategySpec::AXES`] order.
    pub fn pins_text(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push(format!("{k}={v}"));
            }
        };
        put("sharding", self.sharding.map(|x| x.name().to_string()));
        put("shard_group", self.shard_group.map(|x| x.to_string()));
        put(
            "accumulation",
            self.accumulation.map(|x| x.name().to_string()),
        );
        put("checkpointing", self.checkpointing.map(|x| x.name()));
        put("offload", self.offload.map(|x| x.name().to_string()));
        put("param_dtype", self.param_dtype.map(|x| x.to_string()));
        put("reduce_dtype", self.reduce_dtype.map(|x| x.to_string()));
        put("attention", self.attention.map(|x| x.name().to_string()));
        put("stack", self.stack.map(|x| x.name().to_string()));
        put(
            "compile",
            self.compile
                .map(|x| if x { "on" } else { "off" }.to_string()),
        );
        out.join(" ")
    }

    /// True when no axis is pinned.
    pub fn is_empty(&self) -> bool {
        *self == StrategySpec::default()
    }

    /// `self` with every axis `other` pins overriding it.
    pub fn with(&self, other: &StrategySpec) -> StrategySpec {
        StrategySpec {
            sharding: other.sharding.or(self.sharding),
            shard_group: other.shard_group.or(self.shard_group),
            accumulation: other.accumulation.or(self.accumulation),
            checkpointing: other.checkpointing.or(self.checkpointing),
            offload: other.offload.or(self.offload),
            param_dtype: other.param_dtype.or(self.param_dtype),
            reduce_dtype: other.reduce_dtype.or(self.reduce_dtype),
            attention: other.attention.or(self.attention),
            stack: other.stack.or(self.stack),
            compile: other.compile.or(self.compile),
        }
    }

    /// Fills every axis left open with the defaults of the module docs and
    /// validates the result against the cluster. Errors name the flag.
    pub fn resolve(&self, ctx: &StrategyContext<'_>) -> Result<Strategy, SpecError> {
        let cluster = ctx.cluster;
        let ranks = cluster.len() as u32;
        let accumulation = self.accumulation.unwrap_or(Accumulation::Layered);
        let sharding = self.sharding.unwrap_or(Sharding::Full);
        let layered = accumulation == Accumulation::Layered;
        let shard_group = match (sharding, self.shard_group) {
            (Sharding::Hybrid, Some(g)) => g,
            (Sharding::Hybrid, None) => {
                let sizes: Vec<usize> = (0..cluster.nodes.len())
                    .map(|n| cluster.gpus.iter().filter(|g| g.node == n).count())
                    .collect();
                if sizes.windows(2).any(|w| w[0] != w[1]) {
                    let list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
                    return Err(SpecError::invalid(
                        crate::error::STRATEGY,
                        "shard_group",
                        format!(
                            "hybrid sharding groups the GPUs of one node by default, but the nodes hold {} GPUs; give the group size",
                            list.join(", ")
                        ),
                    ));
                }
                sizes.first().copied().unwrap_or(1) as u32
            }
            (_, Some(g)) if g != ranks => {
                return Err(SpecError::invalid(
                    crate::error::STRATEGY,
                    "shard_group",
                    format!(
                        "a shard group applies to hybrid sharding only (sharding is `{}`)",
                        sharding.name()
                    ),
                ))
            }
            _ => ranks,
        };
        if shard_group == 0 || !ranks.is_multiple_of(shard_group) {
            return Err(SpecError::invalid(
                crate::error::STRATEGY,
                "shard_group",
                format!(
                    "expected a group size that divides the {ranks} GPUs of the cluster, got {shard_group}"
                ),
            ));
        }
        let s = Strategy {
            sharding,
            shard_group,
            accumulation,
            checkpointing: self.checkpointing.unwrap_or(if layered {
                Checkpointing::Full
            } else {
                Checkpointing::None
            }),
            offload: self.offload.unwrap_or(if layered {
                Offload::Activations
            } else {
                Offload::None
            }),
            param_dtype: self.param_dtype.unwrap_or(if layered {
                NumFormat::Fp32
            } else {
                ctx.dtype
            }),
            reduce_dtype: self.reduce_dtype.unwrap_or(NumFormat::Fp32),
            attention: self.attention.unwrap_or(ctx.profile_attention),
            stack: self.stack.unwrap_or(Stack::PyTorch),
            compile: self.compile.unwrap_or(false),
        };
        validate(&s, cluster)?;
        Ok(s)
    }

    /// Checks that every axis this spec pins agrees with `s` (a strategy read
    /// from `origin`, e.g. a plan file); the error names the flag and both values.
    pub fn check_agrees(&self, s: &Strategy, origin: &str) -> Result<(), SpecError> {
        let differ = |field: &str, want: String, have: String| -> Result<(), SpecError> {
            if want == have {
                Ok(())
            } else {
                Err(SpecError::invalid(
                    crate::error::STRATEGY,
                    field,
                    format!("{want} disagrees with {origin}, whose strategy has {field} {have}"),
                ))
            }
        };
        if let Some(v) = self.sharding {
            differ("sharding", v.name().into(), s.sharding.name().into())?;
        }
        if let Some(v) = self.shard_group {
            differ("shard_group", v.to_string(), s.shard_group.to_string())?;
        }
        if let Some(v) = self.accumulation {
            differ(
                "accumulation",
                v.name().into(),
                s.accumulation.name().into(),
            )?;
        }
        if let Some(v) = self.checkpointing {
            differ("checkpointing", v.name(), s.checkpointing.name())?;
        }
        if let Some(v) = self.offload {
            differ("offload", v.name().into(), s.offload.name().into())?;
        }
        if let Some(v) = self.param_dtype {
            differ("param_dtype", v.to_string(), s.param_dtype.to_string())?;
        }
        if let Some(v) = self.reduce_dtype {
            differ("reduce_dtype", v.to_string(), s.reduce_dtype.to_string())?;
        }
        if let Some(v) = self.attention {
            differ("attention", v.name().into(), s.attention.name().into())?;
        }
        if let Some(v) = self.stack {
            differ("stack", v.name().into(), s.stack.name().into())?;
        }
        if let Some(v) = self.compile {
            differ("compile", v.to_string(), s.compile.to_string())?;
        }
        Ok(())
    }
}

/// Checks a complete strategy against a cluster: the shard group divides
/// the GPUs, and an offloaded optimizer has host memory on every node.
pub fn validate(s: &Strategy, cluster: &Cluster) -> Result<(), SpecError> {
    let ranks = cluster.len() as u32;
    if s.compile && !s.stack.compiles() {
        return Err(SpecError::invalid(
            crate::error::STRATEGY,
            "compile",
            format!(
                "the {} stack does not run torch.compile on its blocks (its memory-bound kernels are fused already); drop --compile or use --stack pytorch",
                s.stack.name()
            ),
        ));
    }
    if s.shard_group == 0 || !ranks.is_multiple_of(s.shard_group) {
        return Err(SpecError::invalid(
            crate::error::STRATEGY,
            "shard_group",
            format!(
                "expected a group size that divides the {ranks} GPUs of the cluster, got {}",
                s.shard_group
            ),
        ));
    }
    if s.sharding != Sharding::Hybrid && s.shard_group != ranks {
        return Err(SpecError::invalid(
            crate::error::STRATEGY,
            "shard_group",
            format!(
                "sharding `{}` uses one group of all {ranks} GPUs, got a shard group of {}",
                s.sharding.name(),
                s.shard_group
            ),
        ));
    }
    if s.offload != Offload::None {
        if let Some(n) = cluster.nodes.iter().find(|n| n.host_mem_gib <= 0.0) {
            return Err(SpecError::invalid(
                crate::error::STRATEGY,
                "offload",
                format!(
                    "offload {} needs host memory, but node `{}` has host_mem_gib = 0",
                    s.offload.name(),
                    n.name
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuCatalog;

    fn cluster(text: &str) -> Cluster {
        Cluster::from_toml(text, "t.toml", GpuCatalog::builtin()).unwrap()
    }

    fn two_nodes() -> Cluster {
        cluster(
            "[[nodes]]\ngpus = [ { type = \"a100-80gb\", count = 4 } ]\n[[nodes]]\ngpus = [ { type = \"l4\", count = 4 } ]\n",
        )
    }

    fn ctx(c: &Cluster) -> StrategyContext<'_> {
        StrategyContext {
            cluster: c,
            dtype: NumFormat::Bf16,
            profile_attention: Attention::Eager,
        }
    }

    #[test]
    fn pins_read_back_what_they_print() {
        let s = StrategySpec::parse_pins(
            "sharding=full, checkpointing=every:2 attention=flash",
            "t",
            "f",
        )
        .unwrap();
        assert_eq!(s.sharding, Some(Sharding::Full));
        assert_eq!(s.checkpointing, Some(Checkpointing::Every(2)));
        assert_eq!(
            StrategySpec::parse_pins(&s.pins_text(), "t", "f").unwrap(),
            s
        );
        assert_eq!(
            StrategySpec::parse_pins("", "t", "f").unwrap(),
            StrategySpec::NONE
        );
        for bad in [
            "sharding",
            "colour=red",
            "sharding=diagonal",
            "shard_group=0",
        ] {
            let e = StrategySpec::parse_pins(bad, "t", "f")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("`f`") || e.contains("f:") || e.contains(" f"),
                "{bad}: {e}"
            );
        }
    }

    /// What each sharding does to the collectives holds together, so a
    /// new value cannot say two contradicting things: replicated gradients
    /// are all-reduced, sharded ones reduce-scattered; FSDP's per-unit
    /// reshard needs sharded parameters and excludes the distributed
    /// optimizer's after-step gather; only a resharding sharding is
    /// replicated across groups.
    #[test]
    fn sharding_behaviours_agree() {
        use crate::comm::CollectiveKind;
        for s in Sharding::ALL {
            let n = s.name();
            assert_eq!(
                s.keeps_full_grads(),
                s.reduce_kind() == CollectiveKind::AllReduce,
                "{n}"
            );
            assert!(!s.reshards_per_unit() || s.shards_params(), "{n}");
            assert!(!(s.reshards_per_unit() && s.gathers_after_step()), "{n}");
            assert!(!s.reduces_across_groups() || s.reshards_per_unit(), "{n}");
            assert_eq!(
                s.keeps_full_grads(),
                s.state_split() == StateSplit::Replicated,
                "{n}"
            );
        }
        assert!(Sharding::GradOp.gathers_after_step() && Sharding::Hybrid.reduces_across_groups());
    }

    #[test]
    fn parse_names_and_aliases() {
        assert_eq!(Sharding::parse("ZeRO2"), Some(Sharding::GradOp));
        assert_eq!(Sharding::parse("hybrid_shard"), Some(Sharding::Hybrid));
        assert_eq!(Sharding::parse("ddp"), Some(Sharding::NoShard));
        assert_eq!(Accumulation::parse("no_sync"), Some(Accumulation::NoSync));
        assert_eq!(Checkpointing::parse("every:3"), Ok(Checkpointing::Every(3)));
        assert!(Checkpointing::parse("every:0")
            .unwrap_err()
            .contains("K >= 1"));
        assert!(Checkpointing::parse("every:x").is_err());
        assert!(Checkpointing::parse("sometimes").is_err());
        assert_eq!(Offload::parse("optimizer"), Some(Offload::Optimizer));
        assert_eq!(Attention::parse("SDPA"), Some(Attention::Flash));
        for s in Sharding::ALL {
            assert_eq!(Sharding::parse(s.name()), Some(s));
        }
    }

    #[test]
    fn every_k_checkpoints_blocks_k_2k() {
        let c = Checkpointing::Every(2);
        let v: Vec<Recompute> = (1..=4).map(|b| c.block(b)).collect();
        assert_eq!(
            v,
            [
                Recompute::None,
                Recompute::Full,
                Recompute::None,
                Recompute::Full
            ]
        );
        assert_eq!(Checkpointing::Every(1).block(3), Recompute::Full);
    }

    #[test]
    fn precision_follows_the_workload_and_the_strategy() {
        let c = two_nodes();
        let fsdp = StrategySpec {
            accumulation: Some(Accumulation::NoSync),
            offload: Some(Offload::Optimizer),
            ..StrategySpec::default()
        }
        .resolve(&ctx(&c))
        .unwrap();
        let p = fsdp.precision(NumFormat::Bf16);
        assert_eq!(
            (p.compute, p.params, p.grads, p.optimizer, p.comm),
            (
                NumFormat::Bf16,
                NumFormat::Bf16,
                NumFormat::Fp32,
                NumFormat::Fp32,
                NumFormat::Bf16
            )
        );
        // Offloaded: a bf16 shard and an fp32 gradient stay on the GPU.
        assert!(fsdp.offloads_optimizer());
        assert_eq!(p.gpu_state_bytes_per_param(fsdp.offloads_optimizer()), 6.0);
        let ceph = Strategy::cephalo(8, Attention::Eager).precision(NumFormat::Fp16);
        assert_eq!(
            (ceph.compute, ceph.comm),
            (NumFormat::Fp16, NumFormat::Fp32)
        );
        assert_eq!(ceph.gpu_state_bytes_per_param(false), STATE_BYTES_PER_PARAM);
        assert!(!ceph.casts_grads());
    }

    #[test]
    fn defaults_follow_the_accumulation_style() {
        let c = two_nodes();
        let layered = StrategySpec::default().resolve(&ctx(&c)).unwrap();
        assert_eq!(layered, Strategy::cephalo(8, Attention::Eager));
        let fsdp = StrategySpec {
            accumulation: Some(Accumulation::NoSync),
            ..StrategySpec::default()
        }
        .resolve(&ctx(&c))
        .unwrap();
        assert_eq!(fsdp.checkpointing, Checkpointing::None);
        assert_eq!(fsdp.offload, Offload::None);
        assert_eq!(
            (fsdp.param_dtype, fsdp.reduce_dtype),
            (NumFormat::Bf16, NumFormat::Fp32)
        );
        let hsdp = StrategySpec {
            sharding: Some(Sharding::Hybrid),
            ..StrategySpec::default()
        }
        .resolve(&ctx(&c))
        .unwrap();
        assert_eq!(hsdp.shard_group, 4);
        let g = hsdp.groups(8);
        assert_eq!((g.count(), g.position(5), g.group_of(5)), (2, 1, 1));
        assert_eq!(g.replica_group(1), vec![1, 5]);
        // The label round-trips through JSON.
        let j = serde_json::to_string(&hsdp).unwrap();
        assert!(j.contains("\"hybrid\"") && j.contains("\"layered\""), "{j}");
        assert_eq!(serde_json::from_str::<Strategy>(&j).unwrap(), hsdp);
    }

    #[test]
    fn bad_groups_and_offload_name_the_field() {
        let c = two_nodes();
        let e = StrategySpec {
            sharding: Some(Sharding::Hybrid),
            shard_group: Some(3),
            ..StrategySpec::default()
        }
        .resolve(&ctx(&c))
        .unwrap_err()
        .to_string();
        assert!(e.contains("shard_group") && e.contains("divides"), "{e}");
        let e = StrategySpec {
            shard_group: Some(4),
            ..StrategySpec::default()
        }
        .resolve(&ctx(&c))
        .unwrap_err()
        .to_string();
        assert!(e.contains("hybrid sharding only"), "{e}");
        let uneven = cluster(
            "[[nodes]]\ngpus = [ { type = \"t4\", count = 3 } ]\n[[nodes]]\ngpus = [ { type = \"l4\", count = 1 } ]\n",
        );
        let e = StrategySpec {
            sharding: Some(Sharding::Hybrid),
            ..StrategySpec::default()
        }
        .resolve(&ctx(&uneven))
        .unwrap_err()
        .to_string();
        assert!(e.contains("3, 1"), "{e}");
        let no_host =
            cluster("[[nodes]]\nhost_mem_gib = 0\ngpus = [ { type = \"t4\", count = 2 } ]\n");
        let e = StrategySpec {
            offload: Some(Offload::Optimizer),
            ..StrategySpec::default()
        }
        .resolve(&ctx(&no_host))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("offload") && e.contains("host_mem_gib = 0"),
            "{e}"
        );
    }

    #[test]
    fn disagreement_names_the_flag() {
        let s = Strategy::cephalo(4, Attention::Eager);
        let spec = StrategySpec {
            checkpointing: Some(Checkpointing::None),
            ..StrategySpec::default()
        };
        let e = spec.check_agrees(&s, "plan.json").unwrap_err().to_string();
        assert!(
            e.contains("checkpointing") && e.contains("none disagrees") && e.contains("plan.json"),
            "{e}"
        );
        StrategySpec::pinned(&s).check_agrees(&s, "x").unwrap();
    }
}
