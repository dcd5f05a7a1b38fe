//! The training stack a plan runs on: which implementation of every kernel
//! of a transformer block runs, which decides the memory-bound work around
//! the GEMMs, the attention kernel a fused-attention plan gets on Hopper,
//! and the per-parameter passes of the backward.
//!
//! | stack | what runs | element-wise ops | per-parameter passes |
//! |---|---|---|---|
//! | `pytorch` | PyTorch modules op by op (Hugging Face / the reference trainer's blocks) under FSDP, DDP, DeepSpeed ZeRO or torchtitan | one kernel per op, an HBM round trip per intermediate (fused by `torch.compile`) | the casts and copies of the data-parallel wrapper, measured on the reference profiles |
//! | `megatron` | Megatron-Core with Transformer Engine (also NeMo) | fused: LayerNorm / RMSNorm, bias-GeLU / SwiGLU, bias-dropout-add, RoPE, scale-mask-softmax (`--*-fusion` flags, on by default in `megatron/training/arguments.py`) | none: `gradient_accumulation_fusion` (on when APEX / TE kernels exist, the training script's default) makes the weight-gradient GEMM accumulate straight into the fp32 `main_grad` buffer |
//!
//! Sources: `../shared/REAL-SYSTEMS-2.md` §1.3 and §5.3-5.4 and
//! `REAL-SYSTEMS-3.md` §5 (Megatron's fusion flags and defaults, what
//! `torch.compile` fuses in a block, PyTorch eager's kernel per op).
//!
//! Which stack a plan runs is part of its [`crate::strategy::Strategy`]:
//! data-parallel plans default to `pytorch` (the stack of the reference
//! profiles and of every FSDP / ZeRO / DDP trainer), 3D plans whose stages
//! keep replicated or ZeRO-1 state default to `megatron` (how Megatron-LM
//! and NeMo run TP x PP x DP), 3D plans with FSDP inside their stages to
//! `pytorch` (torchtitan's FSDP2 x TP x PP).

use crate::choice::{self, Choice};

/// A training stack (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Stack {
    /// PyTorch modules run op by op under a data-parallel wrapper (FSDP,
    /// DDP, DeepSpeed ZeRO, torchtitan), as the reference profiles were
    /// measured; `torch.compile` fuses the memory-bound ops.
    #[default]
    PyTorch,
    /// Megatron-Core with Transformer Engine: fused memory-bound kernels,
    /// weight-gradient accumulation fused into the GEMM, cuDNN fused
    /// attention on Hopper.
    Megatron,
}

impl Stack {
    /// Every value with its names and meaning.
    pub const CHOICES: &'static [Choice<Stack>] = &[
        Choice {
            value: Stack::PyTorch,
            name: "pytorch",
            aliases: &[
                "torch",
                "fsdp",
                "torchtitan",
                "deepspeed",
                "huggingface",
                "hf",
            ],
            known_as: "FSDP / DDP / ZeRO / torchtitan",
            meaning: "PyTorch modules op by op (torch.compile fuses them with --compile)",
        },
        Choice {
            value: Stack::Megatron,
            name: "megatron",
            aliases: &[
                "megatron-core",
                "megatron-lm",
                "mcore",
                "nemo",
                "transformer-engine",
                "te",
            ],
            known_as: "Megatron-Core + Transformer Engine, NeMo",
            meaning: "fused kernels, gradient-accumulation fusion, cuDNN attention on Hopper",
        },
    ];

    /// All values.
    pub const ALL: [Stack; 2] = [Stack::PyTorch, Stack::Megatron];

    /// The name.
    pub fn name(self) -> &'static str {
        choice::name(Self::CHOICES, self)
    }

    /// Parses a name or alias ([`Stack::CHOICES`]).
    pub fn parse(s: &str) -> Option<Stack> {
        choice::parse(Self::CHOICES, s)
    }

    /// Index (0 pytorch, 1 megatron) for per-stack tables.
    pub fn index(self) -> usize {
        match self {
            Stack::PyTorch => 0,
            Stack::Megatron => 1,
        }
    }

    /// Whether the memory-bound ops around the GEMMs run as fused kernels
    /// (one read of each input, one write of each output): always on
    /// Megatron, on PyTorch with `torch.compile` (`compile`).
    pub fn fused(self, compile: bool) -> bool {
        match self {
            Stack::Megatron => true,
            Stack::PyTorch => compile,
        }
    }

    /// Whether the weight-gradient GEMM accumulates into the fp32 gradient
    /// buffer itself (Megatron's `gradient_accumulation_fusion`), so the
    /// backward has no separate per-parameter pass.
    pub fn fuses_weight_grad_accumulation(self) -> bool {
        matches!(self, Stack::Megatron)
    }

    /// Whether the stack can compile its blocks with `torch.compile`
    /// (Megatron-Core fuses with its own kernels and does not).
    pub fn compiles(self) -> bool {
        matches!(self, Stack::PyTorch)
    }
}

crate::serde_by_name!(Stack);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for s in Stack::ALL {
            assert_eq!(Stack::parse(s.name()), Some(s));
            assert_eq!(Stack::ALL[s.index()], s);
        }
        assert_eq!(Stack::parse("Megatron-LM"), Some(Stack::Megatron));
        assert_eq!(Stack::parse("torchtitan"), Some(Stack::PyTorch));
        assert!(Stack::parse("jax").is_none());
        assert!(Stack::Megatron.fused(false) && !Stack::PyTorch.fused(false));
        assert!(Stack::PyTorch.fused(true));
    }
}
