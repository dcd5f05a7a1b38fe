//! DeepSpeed's JSON config (the `config=` of `deepspeed.initialize`), keys
//! as DeepSpeed 0.19.8's `deepspeed/runtime/config.py` reads them.
//!
//! ZeRO stage from the sharding (none 0, grad-op 2, full 3; hybrid is
//! ZeRO-3 with ZeRO++'s `zero_hpz_partition_size`, MiCS having been removed
//! in 0.19), `offload_optimizer` for optimizer offload, `bf16` / `fp16`,
//! `train_batch_size = train_micro_batch_size_per_gpu x
//! gradient_accumulation_steps x data-parallel degree`. JSON has no
//! comments: the notes and predictions sit in a top-level `_cephalo`
//! object, which DeepSpeed ignores (0.19.8 reads its top-level keys one by
//! one with `get_scalar_param` and checks no unknown ones; only the
//! sections it parses with pydantic forbid extra keys). Activation
//! checkpointing and the pipeline degree are set in the model's code, not
//! here. Units: samples.

use super::target::{header_lines, Exported, Target};
use crate::plan::pipeline::{PipeSchedule, Pipeline};
use crate::precision::NumFormat;
use crate::strategy::{Accumulation, Checkpointing, Offload, Sharding, Strategy};
use serde_json::json;

/// DeepSpeed (ZeRO, ZeRO-Offload, PipelineModule).
#[derive(Debug, Clone, Copy)]
pub struct DeepSpeed;

/// The ZeRO stage of a sharding.
pub fn zero_stage(s: Sharding) -> u32 {
    match s {
        Sharding::NoShard => 0,
        Sharding::GradOp => 2,
        Sharding::Full | Sharding::Hybrid => 3,
    }
}

fn dtype_key(d: NumFormat) -> &'static str {
    match d {
        NumFormat::Fp16 => "fp16",
        NumFormat::Bf16 => "bf16",
        NumFormat::Fp32 => "fp32",
    }
}

impl Target for DeepSpeed {
    fn experts(&self, m: &crate::experts::Moe, model: &str, ep: u32) -> String {
        format!(
            "{model}'s experts are built in code, not in the JSON: `deepspeed.moe.layer.MoE(hidden_size, expert=<SwiGLU of width {}>, num_experts={}, ep_size={ep}, k={}, {})`{}",
            m.expert_ffn,
            m.experts,
            m.top_k,
            match m.capacity_factor {
                Some(cf) => format!("capacity_factor={cf}, drop_tokens=True"),
                None => "drop_tokens=False".to_string(),
            },
            if m.shared_experts > 0 {
                format!(" plus {} shared expert(s) as a dense MLP beside it", m.shared_experts)
            } else {
                String::new()
            }
        )
    }

    fn name(&self) -> &'static str {
        "deepspeed"
    }

    fn file_kind(&self) -> &'static str {
        "JSON config"
    }

    fn accumulation(&self, sharding: Sharding) -> Accumulation {
        match sharding {
            // The engine all-reduces at the accumulation boundary only.
            Sharding::NoShard => Accumulation::NoSync,
            // ZeRO-2/3 reduce (-scatter) every micro-batch's gradients.
            _ => Accumulation::Sync,
        }
    }

    fn pipelines(&self) -> bool {
        true
    }

    fn pipeline(&self, p: &mut Pipeline) -> Vec<String> {
        let mut v = vec!["the pipeline degree is set in code, not in the JSON: `PipelineModule(layers=..., num_stages=N, partition_method=\"uniform\")`; DeepSpeed's pipeline engine takes ZeRO stage 0 or 1".into()];
        v.extend(super::target::all_to_all_only(p, "DeepSpeed-MoE"));
        if p.schedule != PipeSchedule::OneFOneB || p.virtual_stages != 1 {
            v.push(format!(
                "DeepSpeed's pipeline engine runs 1F1B only (TrainSchedule): the plan's {} schedule is exported and simulated as 1F1B",
                p.schedule
            ));
            p.schedule = PipeSchedule::OneFOneB;
            p.virtual_stages = 1;
        }
        v
    }

    fn strategy(&self, s: &Strategy) -> (Strategy, Vec<String>) {
        let mut t = *s;
        let mut notes = Vec::new();
        notes.extend(t.run_on_pytorch(self.name()));
        notes.extend(t.run_eager(self.name()));
        if s.sharding == Sharding::Hybrid {
            t.sharding = Sharding::Full;
            notes.push(format!(
                "hybrid sharding (groups of {}) has no exact DeepSpeed form (MiCS was removed in 0.19): exported as ZeRO-3 with ZeRO++ hpZ (`zero_hpz_partition_size`, a secondary parameter copy per group; gradients and optimizer state sharded over every GPU) and simulated as full sharding",
                s.shard_group
            ));
        }
        if s.offload == Offload::Optimizer && s.sharding == Sharding::NoShard {
            notes.push(
                "`offload_optimizer` needs ZeRO stage 1 or more; with stage 0 DeepSpeed refuses it"
                    .into(),
            );
        }
        if matches!(
            s.checkpointing,
            Checkpointing::Selective | Checkpointing::SelectiveAttention
        ) {
            notes.push(format!(
                "selective recompute ({}) is the model's code in DeepSpeed: it has no op-level policy of its own",
                s.checkpointing.name()
            ));
        }
        (t, notes)
    }

    fn render(&self, e: &Exported) -> String {
        let sh = &e.shape;
        let s = &e.strategy;
        let pipelined = e.approximation.pipeline.is_some();
        let stage = if pipelined {
            zero_stage(s.sharding).min(1)
        } else {
            zero_stage(s.sharding)
        };
        let mut zero = json!({ "stage": stage });
        if stage >= 2 {
            zero["overlap_comm"] = json!(true);
            zero["contiguous_gradients"] = json!(true);
        }
        if s.offload == Offload::Optimizer {
            zero["offload_optimizer"] = json!({ "device": "cpu", "pin_memory": true });
        }
        if e.planned_strategy.sharding == Sharding::Hybrid {
            zero["zero_hpz_partition_size"] = json!(e.planned_strategy.shard_group);
        }
        let every = match s.checkpointing {
            Checkpointing::None => None,
            Checkpointing::Full => Some(1),
            Checkpointing::Every(k) => Some(k),
            Checkpointing::Selective | Checkpointing::SelectiveAttention => None,
        };
        let mut cfg = json!({
            "train_batch_size": sh.global_batch,
            "train_micro_batch_size_per_gpu": sh.micro_batch,
            "gradient_accumulation_steps": sh.accumulation_steps,
            "gradient_clipping": 1.0,
            "steps_per_print": 1,
            "wall_clock_breakdown": false,
            "zero_optimization": zero,
            "communication_data_type": dtype_key(s.reduce_dtype),
            "activation_checkpointing": {
                "partition_activations": false,
                "cpu_checkpointing": s.offload == Offload::Activations,
                "contiguous_memory_optimization": false,
                "synchronize_checkpoint_boundary": false,
                "profile": false
            },
        });
        match s.param_dtype {
            NumFormat::Bf16 => cfg["bf16"] = json!({ "enabled": true }),
            NumFormat::Fp16 => cfg["fp16"] = json!({ "enabled": true }),
            NumFormat::Fp32 => {}
        }
        if sh.tp > 1 {
            cfg["tensor_parallel"] = json!({ "autotp_size": sh.tp });
        }
        let mut code = vec![match every {
            None if s.checkpointing == Checkpointing::None => {
                "no activation checkpointing".to_string()
            }
            None => format!(
                "activation checkpointing ({}): wrap the recomputed ops yourself",
                s.checkpointing.name()
            ),
            Some(1) => "activation checkpointing: call deepspeed.checkpointing.checkpoint(block, x) on every transformer block (the JSON section only configures partitioning and CPU copies)".to_string(),
            Some(k) => format!("activation checkpointing: call deepspeed.checkpointing.checkpoint(block, x) on every {k}-th transformer block (the JSON section only configures partitioning and CPU copies)"),
        }];
        if pipelined {
            code.push(format!(
                "PipelineModule(layers=..., num_stages={}, partition_method=\"uniform\"); engine.train_batch() runs gradient_accumulation_steps micro-batches through the pipeline",
                sh.pp
            ));
        }
        cfg["_cephalo"] = json!({
            "format": "cephalo-export/1",
            "about": header_lines(e, self.file_kind()),
            "ignored_by_deepspeed": "DeepSpeed 0.19.8 reads its top-level keys one by one (runtime/config.py) and ignores this one",
            "set_in_code": code,
            "notes": e.notes,
            "planned": e.planned,
            "approximated": e.approximated,
            "slowdown": e.slowdown,
            "pipeline_parallel_degree": sh.pp,
            "data_parallel_degree": sh.dp(),
        });
        let mut out = serde_json::to_string_pretty(&cfg).unwrap_or_default();
        out.push('\n');
        out
    }
}
