//! Megatron-LM's command-line arguments (`pretrain_gpt.py`), as a bash
//! array to splice into a launch script. Each argument names a field of
//! Megatron-Core 0.16's configs (`TransformerConfig`, `ModelParallelConfig`,
//! `DistributedDataParallelConfig`, `OptimizerConfig`), which Megatron-LM's
//! `arguments.py` fills from them (dashes to underscores; `--num-experts`
//! to `num_moe_experts`, `--swiglu` to `gated_linear_unit`,
//! `--disable-bias-linear` to `add_bias_linear`), or one of the training
//! loop's own (`--micro-batch-size`, `--global-batch-size`,
//! `--seq-length`, ...).
//!
//! Megatron runs TP, PP (1F1B, interleaved with virtual stages), DP as
//! replicas (DDP) or with the distributed optimizer (ZeRO-1), sequence
//! parallelism, expert parallelism (`--expert-model-parallel-size`,
//! `--expert-tensor-parallel-size`, the all-to-all or all-gather token
//! dispatcher), its
//! fused kernels (Transformer Engine) and one reduction per iteration
//! after the last micro-batch. Units: samples, tokens.

use super::target::{comment_block, header_lines, Exported, Target};
use crate::model::ModelSpec;
use crate::plan::pipeline::{PipeSchedule, Pipeline};
use crate::precision::NumFormat;
use crate::strategy::{Accumulation, Attention, Checkpointing, Offload, Sharding, Stack, Strategy};
use std::fmt::Write;

/// Megatron-LM (Megatron-Core inside).
#[derive(Debug, Clone, Copy)]
pub struct Megatron;

impl Target for Megatron {
    fn experts(&self, m: &crate::experts::Moe, model: &str, ep: u32) -> String {
        format!(
            "{model}'s experts are Megatron-Core's MoE layer (`--num-experts {}`, `--moe-router-topk {}`, `--moe-ffn-hidden-size {}`{}, grouped GEMM, the plan's token dispatcher), `--expert-model-parallel-size {ep}` written",
            m.experts,
            m.top_k,
            m.expert_ffn,
            if m.shared_experts > 0 {
                format!(
                    ", `--moe-shared-expert-intermediate-size {}`",
                    m.shared_experts * m.shared_expert_ffn
                )
            } else {
                String::new()
            }
        )
    }

    fn name(&self) -> &'static str {
        "megatron"
    }

    fn file_kind(&self) -> &'static str {
        "argument list (bash)"
    }

    fn accumulation(&self, _sharding: Sharding) -> Accumulation {
        Accumulation::NoSync
    }

    fn pipelines(&self) -> bool {
        true
    }

    fn pipeline(&self, p: &mut Pipeline) -> Vec<String> {
        let mut v = Vec::new();
        match p.schedule {
            PipeSchedule::OneFOneB | PipeSchedule::Interleaved => {}
            s => {
                v.push(format!(
                    "Megatron-LM runs 1F1B (interleaved with virtual stages) only: the plan's {s} schedule is exported and simulated as 1F1B"
                ));
                p.schedule = PipeSchedule::OneFOneB;
                p.virtual_stages = 1;
            }
        }
        v
    }

    fn strategy(&self, s: &Strategy) -> (Strategy, Vec<String>) {
        let mut t = *s;
        let mut notes = Vec::new();
        if t.stack != Stack::Megatron {
            t.stack = Stack::Megatron;
            notes.push(format!(
                "the plan runs on the {} stack; Megatron-LM runs its own fused kernels (Transformer Engine): exported and simulated on the megatron stack",
                s.stack.name()
            ));
        }
        if t.compile {
            t.compile = false;
            notes.push("Megatron-LM does not torch.compile its blocks: exported and simulated without compile".into());
        }
        if matches!(s.sharding, Sharding::Full | Sharding::Hybrid) {
            t.sharding = Sharding::GradOp;
            notes.push(format!(
                "{} sharding of parameters is not Megatron-LM's default data parallelism: exported as the distributed optimizer (`--use-distributed-optimizer`, ZeRO-1: gradients and optimizer state sharded, parameters whole) and simulated so",
                crate::choice::name(Sharding::CHOICES, s.sharding)
            ));
        }
        if s.checkpointing == Checkpointing::Selective {
            t.checkpointing = Checkpointing::SelectiveAttention;
            notes.push("op-level selective recompute has no Megatron-LM mode: exported as `--recompute-granularity selective` (core attention) and simulated so".into());
        }
        if s.offload != Offload::None {
            t.offload = Offload::None;
            notes.push(format!(
                "{} offload is not exported (Megatron-LM's CPU offloading has its own constraints): exported and simulated without offload",
                crate::choice::name(Offload::CHOICES, s.offload)
            ));
        }
        if s.reduce_dtype != NumFormat::Fp32 {
            t.reduce_dtype = NumFormat::Fp32;
            notes.push(format!(
                "gradients are exported to reduce in fp32 (`--accumulate-allreduce-grads-in-fp32`, which Megatron-LM forces under --bf16); the plan's {} reductions simulated as fp32",
                s.reduce_dtype
            ));
        }
        (t, notes)
    }

    fn render(&self, e: &Exported) -> String {
        let mut o = String::from("#!/usr/bin/env bash\n");
        o.push_str(&comment_block(&header_lines(e, self.file_kind())));
        let _ = writeln!(o, "# Run: torchrun --nproc_per_node=<GPUs per node> --nnodes={} pretrain_gpt.py \"${{MEGATRON_ARGS[@]}}\" <data and tokenizer arguments>", e.shape.nodes);
        let _ = writeln!(
            o,
            "# (--tokenizer-type NullTokenizer with --vocab-size runs on mock data: --mock-data)"
        );
        o.push_str("MEGATRON_ARGS=(\n");
        for (flag, value) in arguments(e) {
            let _ = match value {
                Some(v) => writeln!(o, "    {flag} {v}"),
                None => writeln!(o, "    {flag}"),
            };
        }
        o.push_str(")\n");
        o
    }
}

/// The arguments of `e`, in the order Megatron-LM's `arguments.py` groups
/// them: network size, MoE, parallelism, batch, precision, recompute.
pub fn arguments(e: &Exported) -> Vec<(&'static str, Option<String>)> {
    let mut a = Vec::new();
    let model = &e.model_spec;
    network(&mut a, model, e.shape.seq_len);
    if let Some(m) = model.uniform_moe() {
        a.push(("--num-experts", Some(m.experts.to_string())));
        a.push(("--moe-router-topk", Some(m.top_k.to_string())));
        a.push(("--moe-ffn-hidden-size", Some(m.expert_ffn.to_string())));
        if m.shared_experts > 0 {
            a.push((
                "--moe-shared-expert-intermediate-size",
                Some((m.shared_experts * m.shared_expert_ffn).to_string()),
            ));
        }
        a.push(("--moe-grouped-gemm", None));
        let dispatcher = e
            .approximation
            .pipeline
            .as_ref()
            .map_or(crate::experts::Dispatcher::AllToAll, |p| p.moe_dispatcher);
        a.push((
            "--moe-token-dispatcher-type",
            Some(dispatcher.name().into()),
        ));
        a.push(("--moe-router-load-balancing-type", Some("aux_loss".into())));
        if let Some(cf) = m.capacity_factor {
            a.push(("--moe-expert-capacity-factor", Some(cf.to_string())));
            a.push(("--moe-pad-expert-input-to-capacity", None));
        }
    }
    parallelism(&mut a, e);
    a.push(("--micro-batch-size", Some(e.shape.micro_batch.to_string())));
    a.push((
        "--global-batch-size",
        Some(e.shape.global_batch.to_string()),
    ));
    let s = &e.strategy;
    match s.param_dtype {
        NumFormat::Bf16 => a.push(("--bf16", None)),
        NumFormat::Fp16 => a.push(("--fp16", None)),
        NumFormat::Fp32 => {}
    }
    a.push(("--accumulate-allreduce-grads-in-fp32", None));
    a.push((
        "--attention-backend",
        Some(
            match s.attention {
                Attention::Flash => "flash",
                Attention::Eager => "unfused",
            }
            .into(),
        ),
    ));
    recompute(&mut a, e);
    a
}

/// Network size: layers, widths, heads, positions, vocabulary, and the
/// LLaMA-style choices (SwiGLU, RMSNorm, RoPE, no biases, untied head).
fn network(a: &mut Vec<(&'static str, Option<String>)>, m: &ModelSpec, seq: u32) {
    a.push(("--num-layers", Some(m.layers.to_string())));
    a.push(("--hidden-size", Some(m.hidden.to_string())));
    a.push(("--ffn-hidden-size", Some(m.ffn.to_string())));
    a.push(("--num-attention-heads", Some(m.heads.to_string())));
    if m.head_dim() * m.heads != m.hidden {
        a.push(("--kv-channels", Some(m.head_dim().to_string())));
    }
    if m.kv_heads != m.heads {
        a.push(("--group-query-attention", None));
        a.push(("--num-query-groups", Some(m.kv_heads.to_string())));
    }
    a.push(("--seq-length", Some(seq.to_string())));
    a.push(("--max-position-embeddings", Some(seq.to_string())));
    a.push(("--tokenizer-type", Some("NullTokenizer".into())));
    a.push(("--vocab-size", Some(m.vocab.to_string())));
    if m.family.is_llama_like() {
        a.push(("--swiglu", None));
        a.push(("--normalization", Some("RMSNorm".into())));
        a.push(("--position-embedding-type", Some("rope".into())));
        a.push(("--disable-bias-linear", None));
        a.push(("--untie-embeddings-and-output-weights", None));
    }
}

/// TP, SP, PP (virtual stages), EP, the distributed optimizer and the
/// overlap knobs.
fn parallelism(a: &mut Vec<(&'static str, Option<String>)>, e: &Exported) {
    let sh = &e.shape;
    a.push(("--tensor-model-parallel-size", Some(sh.tp.to_string())));
    a.push(("--pipeline-model-parallel-size", Some(sh.pp.to_string())));
    let pipe = e.approximation.pipeline.as_ref();
    if pipe.is_some_and(|p| p.sequence_parallel && sh.tp > 1) {
        a.push(("--sequence-parallel", None));
    }
    if let Some(p) = pipe.filter(|p| p.virtual_stages > 1) {
        let per = p
            .stages
            .first()
            .map_or(1, |s| s.blocks / p.virtual_stages.max(1));
        a.push((
            "--num-layers-per-virtual-pipeline-stage",
            Some(per.max(1).to_string()),
        ));
    }
    if e.has_experts() {
        a.push(("--expert-model-parallel-size", Some(sh.ep.to_string())));
        if sh.ep > 1 {
            a.push(("--expert-tensor-parallel-size", Some(sh.etp.to_string())));
        }
    }
    if e.strategy.sharding == Sharding::GradOp {
        a.push(("--use-distributed-optimizer", None));
    }
    if let Some(p) = pipe {
        if p.overlap_grad_reduce {
            a.push(("--overlap-grad-reduce", None));
        }
        if p.overlap_param_gather {
            a.push(("--overlap-param-gather", None));
        }
        if p.tp_comm_overlap && sh.tp > 1 {
            a.push(("--tp-comm-overlap", None));
        }
    }
}

/// The recompute arguments of the strategy: full (uniform, one layer per
/// unit), every K-th block (`block`: that many layers per stage), or
/// Megatron's selective (core attention).
fn recompute(a: &mut Vec<(&'static str, Option<String>)>, e: &Exported) {
    let blocks = e
        .approximation
        .pipeline
        .as_ref()
        .and_then(|p| p.stages.first().map(|s| s.blocks))
        .unwrap_or(e.model_spec.layers);
    match e.strategy.checkpointing {
        Checkpointing::None => {}
        Checkpointing::Full | Checkpointing::Every(1) => {
            a.push(("--recompute-granularity", Some("full".into())));
            a.push(("--recompute-method", Some("uniform".into())));
            a.push(("--recompute-num-layers", Some("1".into())));
        }
        Checkpointing::Every(k) => {
            a.push(("--recompute-granularity", Some("full".into())));
            a.push(("--recompute-method", Some("block".into())));
            a.push((
                "--recompute-num-layers",
                Some((blocks / k).max(1).to_string()),
            ));
        }
        Checkpointing::Selective | Checkpointing::SelectiveAttention => {
            a.push(("--recompute-granularity", Some("selective".into())));
        }
    }
}
