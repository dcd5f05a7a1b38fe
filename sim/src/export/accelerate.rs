//! Hugging Face Accelerate's `accelerate launch --config_file` YAML (the
//! file `accelerate config` writes), FSDP (v1 keys) or plain DDP
//! (`MULTI_GPU`).
//!
//! Accelerate's config carries the sharding, mixed precision, wrapping,
//! checkpointing and offload; the per-device batch and the accumulation
//! steps are the training script's (`DataLoader(batch_size=...)`,
//! `Accelerator(gradient_accumulation_steps=...)`), so they are comments.
//! `accelerator.accumulate()` skips the gradient sync of every micro-batch
//! but the last (`no_sync`), the simulator's `no-sync`. No pipelines.
//! Units: samples.

use super::target::{comment_block, header_lines, Exported, Target};
use crate::precision::NumFormat;
use crate::strategy::{Accumulation, Checkpointing, Offload, Sharding, Strategy};
use std::fmt::Write;

/// Hugging Face Accelerate (FSDP or DDP).
#[derive(Debug, Clone, Copy)]
pub struct Accelerate;

/// FSDP's `ShardingStrategy` name of a sharding (`None`: DDP).
pub fn sharding_strategy(s: Sharding) -> Option<&'static str> {
    match s {
        Sharding::Full => Some("FULL_SHARD"),
        Sharding::GradOp => Some("SHARD_GRAD_OP"),
        Sharding::Hybrid => Some("HYBRID_SHARD"),
        Sharding::NoShard => None,
    }
}

impl Target for Accelerate {
    fn experts(&self, m: &crate::experts::Moe, model: &str, _ep: u32) -> String {
        format!(
            "{model}'s {} experts (top-{}) run as its Hugging Face model class builds them (a loop over the experts in each block)",
            m.experts, m.top_k
        )
    }

    fn name(&self) -> &'static str {
        "accelerate"
    }

    fn file_kind(&self) -> &'static str {
        "launch config YAML"
    }

    fn accumulation(&self, _sharding: Sharding) -> Accumulation {
        Accumulation::NoSync
    }

    fn pipelines(&self) -> bool {
        false
    }

    fn strategy(&self, s: &Strategy) -> (Strategy, Vec<String>) {
        let mut t = *s;
        let mut notes = Vec::new();
        notes.extend(t.run_on_pytorch(self.name()));
        notes.extend(t.run_eager(self.name()));
        match s.checkpointing {
            Checkpointing::None | Checkpointing::Full | Checkpointing::Every(1) => {}
            c => {
                t.checkpointing = Checkpointing::Full;
                notes.push(format!(
                    "fsdp_activation_checkpointing recomputes every block: the plan's {} is exported and simulated as full recompute",
                    c.name()
                ));
            }
        }
        match s.offload {
            Offload::None => {}
            Offload::Activations => {
                t.offload = Offload::None;
                notes.push("activation offload has no Accelerate option: exported without offload".into());
            }
            Offload::Optimizer => notes.push("fsdp_offload_params offloads parameters and gradients too, and steps the optimizer on the CPU (the simulation offloads the optimizer only)".into()),
        }
        if s.sharding == Sharding::Hybrid {
            notes.push(format!(
                "HYBRID_SHARD shards within a node and replicates across nodes: the plan's shard groups of {} hold only where that is the GPUs per node",
                s.shard_group
            ));
        }
        if s.reduce_dtype != s.param_dtype {
            notes.push(format!(
                "Accelerate's mixed_precision sets one dtype for parameters and reductions: the plan reduces in {}",
                s.reduce_dtype
            ));
        }
        (t, notes)
    }

    fn render(&self, e: &Exported) -> String {
        let sh = &e.shape;
        let s = &e.strategy;
        let mut o = comment_block(&header_lines(e, self.file_kind()));
        let _ = writeln!(
            o,
            "# In the training script: DataLoader(batch_size={}) per process, Accelerator(gradient_accumulation_steps={}) (global batch {} = {} x {} x {})",
            sh.micro_batch, sh.accumulation_steps, sh.global_batch, sh.micro_batch, sh.accumulation_steps, sh.world
        );
        let _ = writeln!(o, "# Run: accelerate launch --config_file <this file> --machine_rank <node index> train.py");
        let _ = writeln!(o, "compute_environment: LOCAL_MACHINE");
        let _ = writeln!(o, "debug: false");
        let mp = match s.param_dtype {
            NumFormat::Bf16 => "bf16",
            NumFormat::Fp16 => "fp16",
            NumFormat::Fp32 => "'no'",
        };
        match sharding_strategy(s.sharding) {
            None => {
                let _ = writeln!(o, "distributed_type: MULTI_GPU");
            }
            Some(strategy) => {
                let _ = writeln!(o, "distributed_type: FSDP");
                let _ = writeln!(o, "fsdp_config:");
                let _ = writeln!(
                    o,
                    "  fsdp_activation_checkpointing: {}",
                    s.checkpointing != Checkpointing::None
                );
                let _ = writeln!(o, "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP");
                let _ = writeln!(o, "  fsdp_backward_prefetch: BACKWARD_PRE");
                let _ = writeln!(o, "  fsdp_cpu_ram_efficient_loading: true");
                let _ = writeln!(o, "  fsdp_forward_prefetch: false");
                let _ = writeln!(
                    o,
                    "  fsdp_offload_params: {}",
                    s.offload == Offload::Optimizer
                );
                let _ = writeln!(o, "  fsdp_sharding_strategy: {strategy}");
                let _ = writeln!(o, "  fsdp_state_dict_type: SHARDED_STATE_DICT");
                let _ = writeln!(o, "  fsdp_sync_module_states: true");
                let _ = writeln!(o, "  fsdp_use_orig_params: true");
                let _ = writeln!(o, "  fsdp_version: 1");
            }
        }
        let _ = writeln!(o, "machine_rank: 0");
        let _ = writeln!(o, "main_training_function: main");
        let _ = writeln!(o, "mixed_precision: {mp}");
        let _ = writeln!(o, "num_machines: {}", sh.nodes);
        let _ = writeln!(o, "num_processes: {}", sh.world);
        let _ = writeln!(o, "rdzv_backend: static");
        let _ = writeln!(o, "same_network: true");
        let _ = writeln!(o, "use_cpu: false");
        o
    }
}
