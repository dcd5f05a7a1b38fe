//! The work of one transformer block pass on one tensor-parallel rank,
//! kernel by kernel, from the model's shapes and the training stack that
//! runs it: the GEMMs at their `(M, N, K)` shapes, the attention core
//! (the eager score chain's batched GEMMs and element-wise passes over
//! `heads/t x s x s` scores, or the fused kernel's FLOPs), the element-wise
//! ops around them, the per-parameter passes and the kernel launches.
//! Nothing here is fitted: every count follows what the stack's code does
//! (sources inline); [`super::coeffs`] prices the counts.
//!
//! Symbols (per rank): `T = m x s` tokens of the micro-batch, `h` width,
//! `kv` key/value width, `f` MLP width, `a` heads, `d = h / a` head
//! dimension, `q = a x d` query width (`h` unless the model sets `d`),
//! `t` TP degree, `e` bytes of the compute dtype; with experts in every
//! block `f` is the width a token runs through, `k f_e + E_s f_s`. Megatron's
//! split ([`crate::tensor`]): QKV and fc1 column-parallel (`N / t`), the
//! out-projection and fc2 row-parallel (`K / t`), heads `a / t`; norms,
//! residual adds and the hidden dropouts replicated on every rank, or run
//! on `T / t` tokens with sequence parallelism. Every rank computes the
//! whole micro-batch.
//!
//! # GEMMs
//!
//! Forward, `M = T`: GPT/BERT/ViT fused QKV `(h + 2kv)/t x h`, out
//! `h x h/t`, fc1 `f/t x h`, fc2 `h x f/t`; LLaMA/Mistral the same with
//! SwiGLU's gate and up (`2f/t`; Hugging Face runs q, k, v and gate, up as
//! separate GEMMs, Megatron fuses them). Backward, per forward GEMM
//! `(M, N, K)`: the input gradient `(M, K, N)` and the weight gradient
//! `(K, N, M)`. Megatron's weight-gradient GEMM accumulates into the fp32
//! `main_grad` (`gradient_accumulation_fusion`): its output costs a read
//! and a write of 4 bytes instead of a write of `e`.
//!
//! # Attention core
//!
//! * **Eager**: per query head (`m x a/t` of them) `QK^T` `(s, s, d)` and
//!   `AV` `(s, d, s)` forward, `dQ`, `dK` `(s, d, s)`, `dP` `(s, s, d)` and
//!   `dV` `(s, d, s)` backward (GQA's K/V are expanded to every head), and
//!   the score chain's element-wise passes over the `s x s` scores between
//!   them ([`ChainPasses`]): PyTorch eager runs scale, mask, softmax and
//!   dropout as separate kernels (Hugging Face GPT-2 / BERT / LLaMA
//!   attention; LLaMA softmaxes in fp32 and casts back); Megatron fuses
//!   scale, mask and softmax (`FusedScaleMaskSoftmax`), dropout stays its
//!   own kernel; `torch.compile` fuses the chain into one kernel. The
//!   `QK^T` output write and the `AV` read are the GEMMs' own traffic.
//! * **Fused** (FlashAttention / cuDNN): `4 s^2 d` FLOPs per head forward,
//!   half of them under a causal mask, 2.5x that backward, no score
//!   tensor in memory; priced at the kernel's published rate
//!   ([`super::kernels`]).
//!
//! # Element-wise ops (bytes per token, forward / backward)
//!
//! | op | PyTorch eager | fused (Megatron, `torch.compile`) |
//! |---|---|---|
//! | LayerNorm (x2) | `2he + 8` / `3he + 8` | same, one kernel |
//! | RMSNorm (x2) | fp32 upcast, `pow`, `mean`, `rsqrt`-multiply, cast back, weight multiply: `h(4e + 28)` / twice that (fp32: `28h` / `56h`) | `2he + 4` / `3he + 4` |
//! | hidden dropout (x2, GPT/BERT) | `2he + h` / `2he + h` (1-byte mask) | folded into bias-dropout-add (`+h` mask) |
//! | residual add (x2) | `3he` / `3he` (the backward sums the two gradients) | `3he` / `3he` |
//! | GeLU | `2fe` / `3fe` | `2fe` / `3fe` (bias-GeLU) |
//! | SwiGLU `silu(g) * u` | `5fe` / `8fe` | `3fe` / `5fe` |
//! | RoPE on q, k | `10e(q + kv)` / `8e(q + kv)` (`q*cos + rotate_half(q)*sin`) | `2e(q + kv)` / `2e(q + kv)` |
//! | GQA `repeat_kv` (eager, and PyTorch SDPA) | `2e(q + kv)` / `2e(q + kv)` | TE attends grouped heads directly |
//!
//! Column-split ops (GeLU, SwiGLU, RoPE, `repeat_kv`) run on `1/t` of
//! their width; the others are replicated (or `1/t` of the tokens with
//! SP). The PyTorch counts are per op in the compute dtype; what autocast
//! adds (norms and softmax in fp32) is in the stack's fitted element-wise
//! factor ([`super::coeffs`]).

use super::kernels::FusedKernel;
use crate::model::{Family, ModelSpec};
use crate::precision::NumFormat;
use crate::stack::Stack;
use crate::strategy::Attention;
use crate::tensor::TensorParallel;

/// Block families with their own coefficients (Mistral shares LLaMA's
/// block).
pub const FAMILIES: [&str; 4] = ["gpt", "bert", "vit", "llama"];

/// Index of a model family into [`FAMILIES`].
pub fn family_index(f: Family) -> usize {
    match f {
        Family::Gpt => 0,
        Family::Bert => 1,
        Family::Vit => 2,
        Family::Llama | Family::Mistral => 3,
    }
}

/// How one block is implemented: the training stack, whether
/// `torch.compile` fuses it, and the attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockImpl {
    /// The training stack.
    pub stack: Stack,
    /// `torch.compile` on the blocks (PyTorch only).
    pub compile: bool,
    /// The attention kernel.
    pub attention: Attention,
}

impl BlockImpl {
    /// What the reference profiles measured: PyTorch eager, no compile,
    /// eager attention.
    pub const REFERENCE: BlockImpl = BlockImpl {
        stack: Stack::PyTorch,
        compile: false,
        attention: Attention::Eager,
    };

    /// How `strategy`'s blocks are implemented: its stack, compile and
    /// attention kernel (what the cost model prices a block with).
    pub fn of(strategy: &crate::strategy::Strategy) -> BlockImpl {
        BlockImpl {
            stack: strategy.stack,
            compile: strategy.compile,
            attention: strategy.attention,
        }
    }

    /// PyTorch eager with attention `attention`.
    pub fn pytorch(attention: Attention) -> BlockImpl {
        BlockImpl {
            attention,
            ..BlockImpl::REFERENCE
        }
    }

    /// Every implementation a cost model prices: both attention kernels on
    /// PyTorch eager, PyTorch compiled and Megatron.
    pub const ALL: [BlockImpl; 6] = [
        BlockImpl::REFERENCE,
        BlockImpl {
            stack: Stack::PyTorch,
            compile: false,
            attention: Attention::Flash,
        },
        BlockImpl {
            stack: Stack::PyTorch,
            compile: true,
            attention: Attention::Eager,
        },
        BlockImpl {
            stack: Stack::PyTorch,
            compile: true,
            attention: Attention::Flash,
        },
        BlockImpl {
            stack: Stack::Megatron,
            compile: false,
            attention: Attention::Eager,
        },
        BlockImpl {
            stack: Stack::Megatron,
            compile: false,
            attention: Attention::Flash,
        },
    ];

    /// Index into [`BlockImpl::ALL`] (Megatron ignores `compile`).
    pub fn index(self) -> usize {
        let a = self.attention.index();
        match self.stack {
            Stack::PyTorch => usize::from(self.compile) * 2 + a,
            Stack::Megatron => 4 + a,
        }
    }

    /// Whether the memory-bound ops run fused.
    pub fn fused(self) -> bool {
        self.stack.fused(self.compile)
    }

    /// The fused attention kernel this stack runs on `class`.
    pub fn fused_kernel(self, class: super::arch::ArchClass) -> FusedKernel {
        FusedKernel::of(self.stack, class)
    }

    /// `eager` / `flash`, with the stack and `+compile` where not PyTorch
    /// eager: `megatron flash`, `pytorch+compile eager`.
    pub fn label(self) -> String {
        let compile = if self.compile { "+compile" } else { "" };
        format!("{}{compile} {}", self.stack.name(), self.attention.name())
    }
}

/// One GEMM shape run `count` times: `C[M x N] = A[M x K] B[K x N]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    /// Rows of the output (tokens, for the block's linear layers).
    pub m: f64,
    /// Columns of the output.
    pub n: f64,
    /// Reduction length.
    pub k: f64,
    /// How many independent copies run (batched GEMMs: heads x samples).
    pub count: f64,
    /// Bytes per output element moved by the epilogue (a write of the
    /// compute dtype; 8 for an fp32 accumulate-in-place: read and write).
    pub out_bytes: f64,
}

impl Gemm {
    /// FLOPs of all copies.
    pub fn flops(&self) -> f64 {
        2.0 * self.m * self.n * self.k * self.count
    }

    /// Bytes of all copies if each operand is read once and the output
    /// written once (`e` bytes per input element).
    pub fn bytes(&self, e: f64) -> f64 {
        self.count * ((self.m * self.k + self.k * self.n) * e + self.m * self.n * self.out_bytes)
    }
}

/// The work of one block pass (or of a part of it) on one rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PassWork {
    /// The linear layers' GEMMs.
    pub gemms: Vec<Gemm>,
    /// Eager attention's batched `QK^T` / `AV` GEMMs (and their gradients).
    pub attn_gemms: Vec<Gemm>,
    /// FLOPs of the fused attention kernel (causal masking applied).
    pub fused_attn_flops: f64,
    /// Bytes of the eager score chain's element-wise passes, as the
    /// stack's implementation runs them.
    pub chain_bytes: f64,
    /// Bytes of the element-wise ops around the GEMMs.
    pub elem_bytes: f64,
    /// Bytes the same element-wise ops move fused (each chain one kernel:
    /// its inputs read and its outputs written once), the least any
    /// implementation of them moves; equal to `elem_bytes` on fused stacks.
    pub elem_floor_bytes: f64,
    /// Bytes of per-parameter passes outside the GEMMs whose count is
    /// known from the stack's code (PyTorch's are fitted instead, see
    /// [`BlockWork::params`]).
    pub weight_bytes: f64,
    /// Kernel launches of the pass.
    pub kernels: f64,
    /// Tokens the replicated (full-width) ops of the pass run on: the
    /// micro-batch's, or `1/t` of them with sequence parallelism (0 for a
    /// part of a pass that runs none).
    pub replicated_tokens: f64,
}

impl PassWork {
    /// Every FLOP of the pass (GEMMs and attention).
    pub fn flops(&self) -> f64 {
        self.gemms.iter().map(Gemm::flops).sum::<f64>()
            + self.attn_gemms.iter().map(Gemm::flops).sum::<f64>()
            + self.fused_attn_flops
    }

    /// Every byte the pass moves at least once (GEMM operands, chain,
    /// element-wise and per-parameter traffic), `e` bytes per element.
    pub fn bytes(&self, e: f64) -> f64 {
        self.gemms.iter().map(|g| g.bytes(e)).sum::<f64>()
            + self.attn_gemms.iter().map(|g| g.bytes(e)).sum::<f64>()
            + self.chain_bytes
            + self.elem_bytes
            + self.weight_bytes
    }

    /// `self` with every GEMM's count scaled by `x` (a share of the pass).
    fn gemms_scaled(&self, x: f64) -> Vec<Gemm> {
        self.gemms
            .iter()
            .map(|g| Gemm {
                count: g.count * x,
                ..*g
            })
            .collect()
    }
}

/// The work of one block on one rank: forward, backward, what each
/// selective recompute reruns, and the facts the pricing needs.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockWork {
    /// The forward.
    pub fwd: PassWork,
    /// The backward (input and weight gradients).
    pub bwd: PassWork,
    /// What op-level selective recompute (torchtitan's `selective`) reruns
    /// of the forward: the element-wise ops, the matmuls it does not keep
    /// and, with eager attention, the score chain.
    pub selective: PassWork,
    /// What core-attention recompute (Megatron's selective) reruns: the
    /// eager score chain with its batched GEMMs, or the fused kernel.
    pub attention: PassWork,
    /// Parameters of the block this rank holds.
    pub params: f64,
    /// How the block is implemented.
    pub imp: BlockImpl,
    /// Family index into [`FAMILIES`].
    pub family: usize,
    /// Whether the model is a reference build ([`ModelSpec::is_reference_build`]):
    /// the calibrated implementation factors of its family apply.
    pub reference_build: bool,
    /// Bytes of one activation element.
    pub e: f64,
    /// Whether the compute dtype is 16-bit.
    pub half: bool,
    /// Attention head dimension.
    pub head_dim: f64,
    /// Tokens per sample (the attention kernels' sequence length).
    pub seq: f64,
    /// Causal attention.
    pub causal: bool,
}

/// Which group of ranks an element-wise op's work is divided over.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Split {
    /// On the full hidden width of every token: replicated on every TP
    /// rank, `1/t` of the tokens with sequence parallelism.
    Replicated,
    /// On a column-split width (heads, MLP columns): `1/t` always.
    Columns,
    /// On every token of the micro-batch at full width on every TP rank
    /// (the expert dispatch, after the tokens are gathered over TP).
    AllTokens,
}

/// One element-wise op of a block: bytes per token each pass, where its
/// work lives, and its kernel launches each pass.
#[derive(Debug, Clone, Copy)]
struct ElemOp {
    fwd: f64,
    bwd: f64,
    split: Split,
    kernels_fwd: f64,
    kernels_bwd: f64,
}

const fn op(fwd: f64, bwd: f64, split: Split, kf: f64, kb: f64) -> ElemOp {
    ElemOp {
        fwd,
        bwd,
        split,
        kernels_fwd: kf,
        kernels_bwd: kb,
    }
}

/// The element-wise ops of one block (module docs' table) for `model`,
/// fused or not, with `e` bytes per element; `eager_attention` adds GQA's
/// `repeat_kv` where the implementation materialises it.
fn elementwise_ops(
    model: &ModelSpec,
    fused: bool,
    e: f64,
    (eager_attention, whole_experts): (bool, bool),
    load: f64,
) -> Vec<ElemOp> {
    use Split::*;
    let (h, q, kv) = (
        model.hidden as f64,
        model.q_dim() as f64,
        model.kv_dim() as f64,
    );
    let f = model.mlp_width_at_load(load);
    let mut v = Vec::new();
    if let Some(m) = model.uniform_moe() {
        v.extend(dispatch_ops(m, h, fused, e, whole_experts));
    }
    if model.family.is_llama_like() {
        if fused {
            v.extend([op(2.0 * h * e + 4.0, 3.0 * h * e + 4.0, Replicated, 1.0, 2.0); 2]);
            v.push(op(
                2.0 * e * (q + kv),
                2.0 * e * (q + kv),
                Columns,
                2.0,
                2.0,
            ));
            v.push(op(3.0 * f * e, 5.0 * f * e, Columns, 1.0, 1.0));
        } else {
            // Hugging Face LlamaRMSNorm: to(fp32), pow, mean, rsqrt-mul,
            // to(dtype), weight-mul; fp32 training skips the casts.
            let norm = if e < 4.0 {
                h * (4.0 * e + 28.0)
            } else {
                28.0 * h
            };
            v.extend([op(norm, 2.0 * norm, Replicated, 6.0, 8.0); 2]);
            v.push(op(
                10.0 * e * (q + kv),
                8.0 * e * (q + kv),
                Columns,
                10.0,
                8.0,
            ));
            v.push(op(5.0 * f * e, 8.0 * f * e, Columns, 2.0, 3.0));
        }
        let repeat = model.kv_heads < model.heads && (eager_attention || !fused);
        if repeat {
            v.push(op(
                2.0 * e * (q + kv),
                2.0 * e * (q + kv),
                Columns,
                2.0,
                2.0,
            ));
        }
        v.extend([op(3.0 * h * e, 3.0 * h * e, Replicated, 1.0, 1.0); 2]);
    } else {
        let drop = model.family.has_dropout();
        let mask = if drop { h } else { 0.0 };
        v.extend([op(2.0 * h * e + 8.0, 3.0 * h * e + 8.0, Replicated, 1.0, 2.0); 2]);
        v.push(op(2.0 * f * e, 3.0 * f * e, Columns, 1.0, 1.0));
        if fused {
            // bias-dropout-add: the branch, the residual and the mask; its
            // backward drops out the gradient and the residual split sums.
            let bwd = 3.0 * h * e + if drop { 2.0 * h * e + h } else { 0.0 };
            v.extend(
                [op(
                    3.0 * h * e + mask,
                    bwd,
                    Replicated,
                    1.0,
                    1.0 + f64::from(drop),
                ); 2],
            );
        } else {
            if drop {
                v.extend([op(2.0 * h * e + h, 2.0 * h * e + h, Replicated, 1.0, 1.0); 2]);
            }
            v.extend([op(3.0 * h * e, 3.0 * h * e, Replicated, 1.0, 1.0); 2]);
        }
    }
    v
}

/// The element-wise work of routing with experts in every block, per
/// token (counted from the code paths, REAL-SYSTEMS-3 §1.4-1.5): the
/// router's softmax and top-k over `E` scores in fp32 (read the logits,
/// write and re-read the fp32 probabilities; the backward the same); the
/// permutation of the `k` copies of each token to its experts and the
/// unpermutation back (read `h`, write `k h`; read `k h`, write `h`), and,
/// unfused, the probability weighting of the `k` outputs as its own pass
/// (read and write `k h`) and Hugging Face's per-expert gather, scale and
/// scatter kernels (4 per expert each pass); fused (Megatron's permute
/// fusion, torchtitan's combine) two kernels. Every TP rank permutes the
/// whole micro-batch (the dispatcher gathers it over TP).
fn dispatch_ops(
    m: &crate::experts::Moe,
    h: f64,
    fused: bool,
    e: f64,
    whole_experts: bool,
) -> [ElemOp; 2] {
    let (experts, k) = (m.experts as f64, m.top_k as f64 * m.padding());
    let router = experts * (e + 8.0);
    let mut permute = 2.0 * (1.0 + k) * h * e;
    let mut kernels = 2.0;
    if !fused {
        permute += 2.0 * k * h * e;
        kernels = 4.0 * experts;
    }
    [
        op(router, router, Split::Replicated, 3.0, 3.0),
        // (Whole experts, expert-TP 1: each TP rank permutes its own
        // sequence shard.)
        op(
            permute,
            permute,
            if whole_experts {
                Split::Replicated
            } else {
                Split::AllTokens
            },
            kernels,
            kernels,
        ),
    ]
}

/// Bytes per score element of the eager score chain's element-wise
/// passes (forward, backward) and their kernels (forward, backward), as
/// the implementation runs them (module docs); the `QK^T` write and the
/// `AV` read are the GEMMs'.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainPasses {
    /// Forward bytes per score element.
    pub fwd: f64,
    /// Backward bytes per score element.
    pub bwd: f64,
    /// Forward kernels.
    pub kernels_fwd: f64,
    /// Backward kernels.
    pub kernels_bwd: f64,
}

impl ChainPasses {
    /// The chain of `family` with `e`-byte scores, fused (Megatron's
    /// `FusedScaleMaskSoftmax`, `torch.compile`) or PyTorch eager.
    pub fn of(family: Family, fused: bool, e: f64) -> ChainPasses {
        let drop = family.has_dropout();
        // Dropout: read, write, 1-byte mask; its backward the same.
        let (dropout, dk) = if drop {
            (2.0 * e + 1.0, 1.0)
        } else {
            (0.0, 0.0)
        };
        if fused {
            return ChainPasses {
                fwd: 2.0 * e + dropout,
                bwd: 3.0 * e + dropout,
                kernels_fwd: 1.0 + dk,
                kernels_bwd: 1.0 + dk,
            };
        }
        match family {
            // scale, mask add, softmax to fp32, cast back (HF LLaMA);
            // backward: cast, fp32 softmax backward writing the half
            // gradient, scale. fp32 training has no casts.
            Family::Llama | Family::Mistral if e < 4.0 => ChainPasses {
                fwd: 6.0 * e + 8.0,
                bwd: 4.0 * e + 12.0,
                kernels_fwd: 4.0,
                kernels_bwd: 3.0,
            },
            Family::Llama | Family::Mistral => ChainPasses {
                fwd: 6.0 * e,
                bwd: 5.0 * e,
                kernels_fwd: 3.0,
                kernels_bwd: 2.0,
            },
            // ViT: scale and softmax, no mask, no dropout.
            Family::Vit => ChainPasses {
                fwd: 4.0 * e,
                bwd: 5.0 * e,
                kernels_fwd: 2.0,
                kernels_bwd: 2.0,
            },
            // GPT-2 / BERT: scale, mask, softmax, dropout.
            Family::Gpt | Family::Bert => ChainPasses {
                fwd: 6.0 * e + dropout,
                bwd: 7.0 * e + dropout,
                kernels_fwd: 3.0 + dk,
                kernels_bwd: 3.0 + dk,
            },
        }
    }
}

/// One linear layer's forward GEMM on one rank: `count` copies of
/// `(rows x tokens, n, k)`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LinearGemm {
    /// Rows per copy, as a share of the micro-batch's tokens (1 for a
    /// dense layer, `k / E` for each of `E` experts).
    rows: f64,
    n: f64,
    k: f64,
    count: f64,
}

const fn dense(n: f64, k: f64) -> LinearGemm {
    LinearGemm {
        rows: 1.0,
        n,
        k,
        count: 1.0,
    }
}

/// The forward GEMMs of a block's linear layers on one rank (`M =
/// tokens`, fused as the stack runs them). With experts in every block
/// (expert-tensor parallelism = TP): the router
/// `(E, h)` on every token the rank holds (`1/t` of them with sequence
/// parallelism, Megatron's router runs before the dispatcher gathers),
/// then each of the `E` experts' SwiGLU on `k T / E` tokens (uniform
/// routing: the grouped GEMM of Megatron's `--moe-grouped-gemm` and
/// torchtitan's `_grouped_mm`, or Hugging Face's loop over experts: the
/// same shapes; padded to capacity when the model sets a capacity
/// factor, [`crate::experts::Moe::padding`]), columns split over `t`;
/// shared experts as one dense SwiGLU of width `E_s f_s`. With expert
/// parallelism `e` ([`crate::expert_parallel`]) a rank runs `E / e`
/// experts on `k T e / E` tokens each: the copies its EP group sends them.
fn linear_layers(
    model: &ModelSpec,
    tp: &TensorParallel,
    fused_qkv: bool,
    load: f64,
) -> Vec<LinearGemm> {
    let t = tp.degree.max(1) as f64;
    let sp = tp.sequence_parallel && tp.degree > 1;
    // Expert parallelism: `E / e` local experts, each on the copies of its
    // EP group's `e` ranks; split over `t_e` GPUs (expert-TP): each expert
    // GPU sees `t_e / t` of a replica's tokens per EP rank.
    let ep = tp.experts.max(1) as f64;
    let te = tp.expert_tensor.clamp(1, tp.degree.max(1)) as f64;
    let (h, q, kv, f) = (
        model.hidden as f64,
        model.q_dim() as f64,
        model.kv_dim() as f64,
        model.ffn as f64,
    );
    let mut v = Vec::new();
    if model.family.is_llama_like() {
        // In the order the pricing sums them (the calibration's): the
        // input projections (attention, then the MLPs'), then the output
        // projections (attention, then the MLPs').
        if fused_qkv {
            v.push(dense((q + 2.0 * kv) / t, h));
        } else {
            v.extend([dense(q / t, h), dense(kv / t, h), dense(kv / t, h)]);
        }
        let mut outs = vec![dense(h, q / t)];
        match model.uniform_moe() {
            None => mlp(&mut v, &mut outs, h, f, t, fused_qkv, (1.0, 1.0)),
            Some(m) => {
                let rows = if sp { 1.0 / t } else { 1.0 };
                v.push(LinearGemm {
                    rows,
                    ..dense(m.experts as f64, h)
                });
                let (e, k) = (m.experts as f64, m.top_k as f64 * load);
                mlp(
                    &mut v,
                    &mut outs,
                    h,
                    m.expert_ffn as f64,
                    te,
                    fused_qkv,
                    (k * ep / e * (te / t), e / ep),
                );
                if m.shared_experts > 0 {
                    let fs = (m.shared_experts * m.shared_expert_ffn) as f64;
                    mlp(&mut v, &mut outs, h, fs, t, fused_qkv, (1.0, 1.0));
                }
            }
        }
        v.extend(outs);
    } else {
        v.push(dense((h + 2.0 * kv) / t, h));
        v.push(dense(h, h / t));
        v.push(dense(f / t, h));
        v.push(dense(h, f / t));
    }
    v
}

/// A SwiGLU MLP of width `f` run as `count` copies on `rows` of the
/// tokens (`copies = (rows, count)`): gate and up (fused into one GEMM, or
/// two) into `ins`, down into `outs`.
fn mlp(
    ins: &mut Vec<LinearGemm>,
    outs: &mut Vec<LinearGemm>,
    h: f64,
    f: f64,
    t: f64,
    fused: bool,
    copies: (f64, f64),
) {
    let (rows, count) = copies;
    let at = |n: f64, k: f64| LinearGemm { rows, n, k, count };
    if fused {
        ins.push(at(2.0 * f / t, h));
    } else {
        ins.extend([at(f / t, h), at(f / t, h)]);
    }
    outs.push(at(h, f / t));
}

impl BlockWork {
    /// The work of one rank of `tp` running one block of `model` on a
    /// micro-batch of `m` samples of `tokens_per_sample` tokens in `dtype`,
    /// implemented as `imp`.
    pub fn new(
        model: &ModelSpec,
        tokens_per_sample: u32,
        dtype: NumFormat,
        m: u32,
        tp: &TensorParallel,
        imp: BlockImpl,
    ) -> BlockWork {
        let e = dtype.bytes();
        let s = model.tokens_per_sample(tokens_per_sample) as f64;
        let mf = m.max(1) as f64;
        let tokens = mf * s;
        let t = tp.degree.max(1) as f64;
        let sp = tp.sequence_parallel && tp.degree > 1;
        let fused = imp.fused();
        let megatron = imp.stack == Stack::Megatron;
        let eager = imp.attention == Attention::Eager;
        // (Megatron fuses QKV and gate/up into one GEMM each.)
        // Forward and backward linear GEMMs.
        let wgrad_out = if imp.stack.fuses_weight_grad_accumulation() {
            8.0
        } else {
            e
        };
        let mut fwd = PassWork::default();
        let mut bwd = PassWork::default();
        let load = tp.expert_load(model, tokens);
        for l in linear_layers(model, tp, megatron, load) {
            let rows = tokens * l.rows;
            fwd.gemms.push(gemm(rows, l.n, l.k, l.count, e));
            bwd.gemms.push(gemm(rows, l.k, l.n, l.count, e));
            bwd.gemms.push(gemm(l.k, l.n, rows, l.count, wgrad_out));
        }
        // Attention core.
        let d = model.head_dim() as f64;
        let causal = model.family.is_causal();
        let attention = attention_core(model, s, mf * model.heads as f64 / t, e, imp, &mut bwd);
        // Element-wise ops.
        let mut elem = PassWork::default();
        let share = |o: &ElemOp| match o.split {
            Split::Columns => 1.0 / t,
            Split::Replicated if sp => 1.0 / t,
            Split::Replicated | Split::AllTokens => 1.0,
        };
        let whole = tp.expert_tensor < tp.degree;
        for o in elementwise_ops(model, fused, e, (eager, whole), load) {
            elem.elem_bytes += o.fwd * tokens * share(&o);
            bwd.elem_bytes += o.bwd * tokens * share(&o);
            elem.kernels += o.kernels_fwd;
            bwd.kernels += o.kernels_bwd;
        }
        if fused {
            (elem.elem_floor_bytes, bwd.elem_floor_bytes) = (elem.elem_bytes, bwd.elem_bytes);
        } else {
            for o in elementwise_ops(model, true, e, (eager, whole), load) {
                elem.elem_floor_bytes += o.fwd * tokens * share(&o);
                bwd.elem_floor_bytes += o.bwd * tokens * share(&o);
            }
        }
        let replicated_tokens = if sp { tokens / t } else { tokens };
        fwd.replicated_tokens = replicated_tokens;
        bwd.replicated_tokens = replicated_tokens;
        fwd.kernels += fwd.gemms.len() as f64 + attention.kernels + elem.kernels;
        fwd.attn_gemms = attention.attn_gemms.clone();
        fwd.fused_attn_flops = attention.fused_attn_flops;
        fwd.chain_bytes = attention.chain_bytes;
        fwd.elem_bytes = elem.elem_bytes;
        fwd.elem_floor_bytes = elem.elem_floor_bytes;
        bwd.kernels += bwd.gemms.len() as f64;
        let rerun = crate::activation::recomputed_matmul_fraction(model);
        let selective = PassWork {
            gemms: fwd.gemms_scaled(rerun),
            attn_gemms: if eager {
                attention.attn_gemms.clone()
            } else {
                Vec::new()
            },
            fused_attn_flops: 0.0,
            chain_bytes: attention.chain_bytes,
            elem_bytes: elem.elem_bytes,
            elem_floor_bytes: elem.elem_floor_bytes,
            weight_bytes: 0.0,
            kernels: elem.kernels
                + if eager { attention.kernels } else { 0.0 }
                + rerun * fwd.gemms.len() as f64,
            replicated_tokens,
        };
        BlockWork {
            fwd,
            bwd,
            selective,
            attention,
            params: tp.block_params(model),
            imp,
            family: family_index(model.family),
            reference_build: model.is_reference_build(),
            e,
            half: dtype != NumFormat::Fp32,
            head_dim: d,
            seq: s,
            causal,
        }
    }
}

/// The attention core's forward work for `heads` query heads of `s`
/// tokens (the micro-batch's samples times the rank's heads), and its
/// backward added to `bwd`: eager's batched GEMMs and score chain, or the
/// fused kernel's FLOPs (module docs).
fn attention_core(
    model: &ModelSpec,
    s: f64,
    heads: f64,
    e: f64,
    imp: BlockImpl,
    bwd: &mut PassWork,
) -> PassWork {
    let d = model.head_dim() as f64;
    let mut attention = PassWork::default();
    match imp.attention {
        Attention::Eager => {
            let chain = ChainPasses::of(model.family, imp.fused(), e);
            let scores = heads * s * s;
            attention.attn_gemms = vec![gemm(s, s, d, heads, e), gemm(s, d, s, heads, e)];
            attention.chain_bytes = chain.fwd * scores;
            attention.kernels = 2.0 + chain.kernels_fwd;
            bwd.attn_gemms = vec![
                gemm(s, d, s, 2.0 * heads, e),
                gemm(s, s, d, heads, e),
                gemm(s, d, s, heads, e),
            ];
            bwd.chain_bytes = chain.bwd * scores;
            bwd.kernels += 4.0 + chain.kernels_bwd;
        }
        Attention::Flash => {
            let causal = if model.family.is_causal() { 0.5 } else { 1.0 };
            let flops = 4.0 * s * s * d * heads * causal;
            attention.fused_attn_flops = flops;
            attention.kernels = 1.0;
            bwd.fused_attn_flops = 2.5 * flops;
            bwd.kernels += 3.0;
        }
    }
    attention
}

fn gemm(m: f64, n: f64, k: f64, count: f64, out_bytes: f64) -> Gemm {
    Gemm {
        m,
        n,
        k,
        count,
        out_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelCatalog;

    fn model(n: &str) -> ModelSpec {
        ModelCatalog::builtin().get(n).unwrap().clone()
    }

    #[test]
    fn gemm_flops_are_the_models() {
        for name in ["gpt-2.7b", "llama2-70b", "bert-large"] {
            let m = model(name);
            for imp in BlockImpl::ALL {
                let w = BlockWork::new(&m, 2048, NumFormat::Bf16, 2, &TensorParallel::NONE, imp);
                let s = m.tokens_per_sample(2048) as f64;
                let linear = 2.0 * 2.0 * m.block_matmul_params() as f64 * s;
                let got: f64 = w.fwd.gemms.iter().map(Gemm::flops).sum();
                assert!((got / linear - 1.0).abs() < 1e-12, "{name} {imp:?}");
                let bwd: f64 = w.bwd.gemms.iter().map(Gemm::flops).sum();
                assert!((bwd / (2.0 * linear) - 1.0).abs() < 1e-12);
                // Eager scores: the full square, 4 s^2 h per sample.
                let score = 2.0 * 4.0 * s * s * m.hidden as f64;
                let a: f64 = w.fwd.attn_gemms.iter().map(Gemm::flops).sum();
                match imp.attention {
                    Attention::Eager => assert!((a / score - 1.0).abs() < 1e-12),
                    Attention::Flash => assert_eq!(a, 0.0),
                }
            }
        }
    }

    /// With experts in every block (and heads wider than the model, as
    /// Qwen3's), the linear GEMMs' FLOPs are twice the weights a token
    /// meets per token, split over TP with SP (the router runs on the
    /// rank's `1/t` of the tokens); each expert's GEMM sees `k T / E` rows.
    #[test]
    fn expert_gemms_are_the_active_weights() {
        for name in ["mixtral-8x7b", "qwen3-30b-a3b", "olmoe-1b-7b"] {
            let m = model(name);
            let moe = m.uniform_moe().unwrap().clone();
            for imp in BlockImpl::ALL {
                for t in [1u32, 2] {
                    let tp = TensorParallel::new(t, true);
                    let w = BlockWork::new(&m, 4096, NumFormat::Bf16, 2, &tp, imp);
                    let linear = 2.0 * 2.0 * m.block_active_matmul_params() as f64 * 4096.0;
                    let got: f64 = w.fwd.gemms.iter().map(Gemm::flops).sum();
                    assert!(
                        (got * t as f64 / linear - 1.0).abs() < 1e-12,
                        "{name} {imp:?} t={t}"
                    );
                    let rows = 2.0 * 4096.0 * moe.top_k as f64 / moe.experts as f64;
                    let experts: Vec<&Gemm> = w
                        .fwd
                        .gemms
                        .iter()
                        .filter(|g| g.count == moe.experts as f64)
                        .collect();
                    assert!(!experts.is_empty() && experts.iter().all(|g| g.m == rows));
                }
            }
        }
    }

    /// Expert parallelism keeps every rank's expert FLOPs and changes the
    /// GEMMs' shapes only: `E / e` experts of `k T e t_e / (E t)` rows and
    /// `f_e / t_e` columns (expert-TP = TP, or whole experts).
    #[test]
    fn expert_parallel_gemms_are_fewer_and_taller() {
        // Balanced to the copy: the rows are the mean's.
        let m = model("qwen3-30b-a3b").with_routing_imbalance(1.0).unwrap();
        let moe = m.uniform_moe().unwrap().clone();
        let imp = BlockImpl::ALL[0];
        let tokens = 2.0 * 4096.0;
        for t in [1u32, 2] {
            let base = TensorParallel::new(t, true);
            let flops = |tp: &TensorParallel| {
                let w = BlockWork::new(&m, 4096, NumFormat::Bf16, 2, tp, imp);
                let f: f64 = w.fwd.gemms.iter().map(Gemm::flops).sum();
                (w, f)
            };
            let (_, f1) = flops(&base);
            for e in [2u32, 8] {
                for te in [t, 1] {
                    let tp = base.with_experts(e).with_expert_tensor(te);
                    let (w, f) = flops(&tp);
                    assert!((f / f1 - 1.0).abs() < 1e-12, "t={t} e={e} te={te}");
                    let local = (moe.experts / e) as f64;
                    let g: Vec<&Gemm> = w.fwd.gemms.iter().filter(|g| g.count == local).collect();
                    let rows = moe.top_k as f64 * tokens * e as f64 * te as f64
                        / (moe.experts as f64 * t as f64);
                    assert!(!g.is_empty(), "t={t} e={e} te={te}");
                    assert!(g.iter().all(|g| g.m == rows), "t={t} e={e} te={te}");
                    let width = moe.expert_ffn as f64 / te as f64;
                    assert!(g.iter().any(|g| g.n == width || g.n == 2.0 * width));
                    // Under a measured imbalance the busiest rank's rows.
                    let skewed = m.clone().with_routing_imbalance(1.25).unwrap();
                    let w = BlockWork::new(&skewed, 4096, NumFormat::Bf16, 2, &tp, imp);
                    let g: Vec<&Gemm> = w.fwd.gemms.iter().filter(|g| g.count == local).collect();
                    assert!(g.iter().all(|g| (g.m - 1.25 * rows).abs() < 1e-6 * rows));
                }
            }
        }
    }

    #[test]
    fn tensor_parallel_splits_the_work() {
        let m = model("gpt-2.7b");
        for imp in BlockImpl::ALL {
            let one = BlockWork::new(&m, 2048, NumFormat::Bf16, 1, &TensorParallel::NONE, imp);
            for t in [2u32, 4, 8] {
                for sp in [false, true] {
                    let w = BlockWork::new(
                        &m,
                        2048,
                        NumFormat::Bf16,
                        1,
                        &TensorParallel::new(t, sp),
                        imp,
                    );
                    let r = w.fwd.flops() / one.fwd.flops();
                    assert!((r * t as f64 - 1.0).abs() < 1e-9, "{imp:?} t={t}");
                    assert!((w.fwd.chain_bytes * t as f64 - one.fwd.chain_bytes).abs() < 1e-3);
                    // Element-wise: all of it split with SP, the replicated
                    // part kept without.
                    let er = w.fwd.elem_bytes * t as f64 / one.fwd.elem_bytes;
                    if sp {
                        assert!((er - 1.0).abs() < 1e-9);
                    } else {
                        assert!(er > 1.5);
                    }
                }
            }
        }
    }

    #[test]
    fn fused_stacks_move_fewer_bytes() {
        for name in ["gpt-2.7b", "llama3-8b"] {
            let m = model(name);
            for a in [Attention::Eager, Attention::Flash] {
                let tp = TensorParallel::NONE;
                let eager =
                    BlockWork::new(&m, 4096, NumFormat::Bf16, 1, &tp, BlockImpl::pytorch(a));
                let meg = BlockImpl {
                    stack: Stack::Megatron,
                    compile: false,
                    attention: a,
                };
                let fused = BlockWork::new(&m, 4096, NumFormat::Bf16, 1, &tp, meg);
                assert!(fused.fwd.elem_bytes < eager.fwd.elem_bytes);
                assert!(fused.fwd.chain_bytes <= eager.fwd.chain_bytes);
                assert!(fused.fwd.kernels < eager.fwd.kernels);
            }
        }
    }
}
