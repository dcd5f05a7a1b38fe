//! torchtitan's job-config TOML (the `--job.config_file` of `torchrun ...
//! -m torchtitan.train`), keys as torchtitan 0.2.2's
//! `torchtitan/config/job_config.py` declares them (0.3.0 replaced the TOML
//! files with Python configs; the keys kept their names).
//!
//! torchtitan runs FSDP2 (`fully_shard`) over `data_parallel_shard_degree`
//! ranks, replicas over `data_parallel_replicate_degree` (HSDP when both
//! are above 1), TP and PP by degree. Its training loop runs
//! `global_batch_size / (local_batch_size x dp)` micro-batches and lets
//! FSDP2 reduce-scatter after each one (no `no_sync`): the simulator's
//! `sync` accumulation. Units: samples, tokens.

use super::target::{comment_block, header_lines, quoted, Exported, Target};
use crate::plan::pipeline::PipeSchedule;
use crate::precision::NumFormat;
use crate::strategy::{Accumulation, Checkpointing, Offload, Sharding, Strategy};
use std::fmt::Write;

/// torchtitan (PyTorch-native: FSDP2, TP, PP).
#[derive(Debug, Clone, Copy)]
pub struct Torchtitan;

/// The `[model]` name and flavor torchtitan registers for a catalog model
/// (`None`: torchtitan has no flavor of it).
pub fn model_flavor(model: &str) -> Option<(&'static str, String)> {
    let m = model.to_ascii_lowercase();
    let (name, rest) = if let Some(r) = m.strip_prefix("llama3-") {
        ("llama3", r)
    } else if let Some(r) = m.strip_prefix("llama2-") {
        ("llama2", r)
    } else {
        return None;
    };
    let size = rest.strip_suffix('b')?;
    size.parse::<f64>().ok()?;
    Some((name, format!("{}B", size)))
}

/// `, 2 shared` when the model has shared experts.
fn shared_words(m: &crate::experts::Moe) -> String {
    if m.shared_experts > 0 {
        format!(", {} shared", m.shared_experts)
    } else {
        String::new()
    }
}

/// torchtitan's name for a pipeline schedule (PyTorch's
/// `torch.distributed.pipelining` schedule classes without `Schedule`).
pub fn schedule_name(s: PipeSchedule) -> &'static str {
    match s {
        PipeSchedule::Gpipe => "GPipe",
        PipeSchedule::OneFOneB => "1F1B",
        PipeSchedule::Interleaved => "Interleaved1F1B",
        PipeSchedule::ZbH1 => "InterleavedZeroBubble",
    }
}

fn dtype_name(d: NumFormat) -> &'static str {
    match d {
        NumFormat::Fp32 => "float32",
        NumFormat::Bf16 | NumFormat::Fp16 => "bfloat16",
    }
}

impl Target for Torchtitan {
    fn experts(&self, m: &crate::experts::Moe, model: &str, ep: u32) -> String {
        format!(
            "{model}'s {} experts (top-{}{}) run as torchtitan's MoE (`GroupedExperts` with `TokenChoiceTopKRouter`, the deepseek_v3 / qwen3 / llama4 model families): register its args with num_experts = {}, top_k = {}, the expert width {}; expert_parallel_degree = {ep} is written",
            m.experts,
            m.top_k,
            shared_words(m),
            m.experts,
            m.top_k,
            m.expert_ffn
        )
    }

    fn name(&self) -> &'static str {
        "torchtitan"
    }

    fn file_kind(&self) -> &'static str {
        "job-config TOML"
    }

    fn accumulation(&self, _sharding: Sharding) -> Accumulation {
        Accumulation::Sync
    }

    fn pipelines(&self) -> bool {
        true
    }

    fn pipeline(&self, p: &mut crate::plan::pipeline::Pipeline) -> Vec<String> {
        super::target::all_to_all_only(p, "torchtitan")
    }

    fn strategy(&self, s: &Strategy) -> (Strategy, Vec<String>) {
        let mut t = *s;
        let mut notes = Vec::new();
        notes.extend(t.run_on_pytorch(self.name()));
        if s.checkpointing == Checkpointing::SelectiveAttention {
            t.checkpointing = Checkpointing::Selective;
            notes.push("Megatron's core-attention recompute has no torchtitan mode: exported as selective op-level AC (`selective_ac_option = \"op\"`)".into());
        }
        if s.offload == Offload::Activations {
            t.offload = Offload::None;
            notes.push(
                "activation offload has no torchtitan option: exported without offload".into(),
            );
        }
        if s.offload == Offload::Optimizer {
            notes.push("`enable_cpu_offload` is FSDP2's CPUOffloadPolicy: parameters and gradients live on the CPU too, not just the optimizer state (the simulation offloads the optimizer only)".into());
        }
        if s.param_dtype == NumFormat::Fp16 {
            t.param_dtype = NumFormat::Bf16;
            notes.push("torchtitan's mixed_precision_param takes bfloat16 or float32: fp16 exported as bfloat16".into());
        }
        if s.reduce_dtype != NumFormat::Fp32 {
            t.reduce_dtype = NumFormat::Fp32;
            notes.push(format!(
                "torchtitan 0.2.2's mixed_precision_reduce takes only float32: the plan's {} reductions exported as float32",
                s.reduce_dtype
            ));
        }
        (t, notes)
    }

    fn render(&self, e: &Exported) -> String {
        let sh = &e.shape;
        let mut o = comment_block(&header_lines(e, self.file_kind()));
        let _ = writeln!(o, "# Run: torchrun --nproc_per_node=<GPUs per node> --nnodes={} -m torchtitan.train --job.config_file <this file>", sh.nodes);
        o.push('\n');
        job_and_model(&mut o, e);
        training(&mut o, e);
        let overlap = parallelism(&mut o, e);
        activation_checkpoint(&mut o, e, overlap);
        o
    }
}

/// The `[job]`, `[metrics]` and `[model]` tables.
fn job_and_model(o: &mut String, e: &Exported) {
    let _ = writeln!(o, "[job]");
    let _ = writeln!(o, "dump_folder = \"./outputs\"");
    let _ = writeln!(
        o,
        "description = {}",
        quoted(&format!("cephalo export: {}", e.model))
    );
    o.push('\n');
    let _ = writeln!(o, "[metrics]");
    let _ = writeln!(
        o,
        "log_freq = 1  # one line per step: what `cephalo validate --from-log` reads"
    );
    o.push('\n');
    let _ = writeln!(o, "[model]");
    match model_flavor(&e.model) {
        Some((name, flavor)) => {
            if name == "llama2" {
                let _ = writeln!(o, "# torchtitan 0.2.2 registers llama3 (8B, 70B, 405B) but no llama2; register this flavor with llama2's shapes or use an older torchtitan");
            }
            let _ = writeln!(o, "name = {}", quoted(name));
            let _ = writeln!(o, "flavor = {}", quoted(&flavor));
        }
        None => {
            let _ = writeln!(
                o,
                "# torchtitan has no flavor of {}: register its model args, then set the flavor",
                e.model
            );
            let _ = writeln!(o, "name = {}", quoted(&e.model));
        }
    }
    o.push('\n');
}

/// The `[training]` table.
fn training(o: &mut String, e: &Exported) {
    let (sh, s) = (&e.shape, &e.strategy);
    let _ = writeln!(o, "[training]");
    let _ = writeln!(o, "# local_batch_size is the micro-batch per data-parallel rank (torchtitan before 0.2 called it batch_size); accumulation steps = global_batch_size / (local_batch_size x {})", sh.dp());
    let local = if sh.pp > 1 {
        sh.micro_batch * sh.accumulation_steps
    } else {
        sh.micro_batch
    };
    let _ = writeln!(o, "local_batch_size = {local}");
    let _ = writeln!(o, "global_batch_size = {}", sh.global_batch);
    let _ = writeln!(o, "seq_len = {}", sh.seq_len);
    let _ = writeln!(o, "steps = 100");
    let _ = writeln!(o, "max_norm = 1.0");
    let _ = writeln!(
        o,
        "mixed_precision_param = {}",
        quoted(dtype_name(s.param_dtype))
    );
    let _ = writeln!(
        o,
        "mixed_precision_reduce = {}",
        quoted(dtype_name(s.reduce_dtype))
    );
    let _ = writeln!(
        o,
        "enable_cpu_offload = {}",
        s.offload == Offload::Optimizer
    );
    o.push('\n');
}

/// The `[parallelism]` table; whether async TP is on.
fn parallelism(o: &mut String, e: &Exported) -> bool {
    let (sh, s) = (&e.shape, &e.strategy);
    let _ = writeln!(o, "[parallelism]");
    let _ = writeln!(o, "data_parallel_replicate_degree = {}", sh.dp_replicate);
    let _ = writeln!(o, "data_parallel_shard_degree = {}", sh.dp_shard);
    let _ = writeln!(
        o,
        "fsdp_reshard_after_forward = {}",
        quoted(match s.sharding {
            Sharding::GradOp => "never",
            _ => "default",
        })
    );
    let _ = writeln!(o, "tensor_parallel_degree = {}", sh.tp);
    if e.has_experts() {
        let _ = writeln!(o, "expert_parallel_degree = {}", sh.ep);
        if sh.ep > 1 {
            let _ = writeln!(o, "expert_tensor_parallel_degree = {}", sh.etp);
        }
    }
    let overlap = e
        .approximation
        .pipeline
        .as_ref()
        .is_some_and(|p| p.tp_comm_overlap && sh.tp > 1);
    let _ = writeln!(o, "enable_async_tensor_parallel = {overlap}");
    let _ = writeln!(o, "pipeline_parallel_degree = {}", sh.pp);
    if let Some(p) = &e.approximation.pipeline {
        if p.schedule.splits_backward() {
            let _ = writeln!(o, "# ZB-H1 runs in PyTorch as InterleavedZeroBubble, a looped schedule: give every rank two or more stages (pipeline_parallel_layers_per_stage)");
        }
        let _ = writeln!(
            o,
            "pipeline_parallel_schedule = {}",
            quoted(schedule_name(p.schedule))
        );
        let _ = writeln!(o, "pipeline_parallel_microbatch_size = {}", sh.micro_batch);
        let v = p.virtual_stages.max(1);
        if v > 1 {
            let per_stage = p.stages.first().map_or(1, |s| s.blocks / v).max(1);
            let _ = writeln!(
                o,
                "pipeline_parallel_layers_per_stage = {per_stage}  # {v} stages per rank (looped schedule)"
            );
        }
    }
    o.push('\n');
    overlap
}

/// The `[activation_checkpoint]` table, and `[compile]` for a compiled
/// plan or async TP.
fn activation_checkpoint(o: &mut String, e: &Exported, overlap: bool) {
    let s = &e.strategy;
    let _ = writeln!(o, "[activation_checkpoint]");
    let (mode, option) = match s.checkpointing {
        Checkpointing::None => ("none", None),
        Checkpointing::Full | Checkpointing::Every(1) => ("full", None),
        Checkpointing::Selective | Checkpointing::SelectiveAttention => {
            ("selective", Some("op".to_string()))
        }
        Checkpointing::Every(k) => ("selective", Some(k.to_string())),
    };
    let _ = writeln!(o, "mode = {}", quoted(mode));
    if let Some(opt) = option {
        let _ = writeln!(o, "selective_ac_option = {}", quoted(&opt));
    }
    if overlap || s.compile {
        o.push('\n');
        let why = if s.compile {
            "the plan compiles its blocks"
        } else {
            "async TP needs torch.compile"
        };
        let _ = writeln!(o, "[compile]  # {why}");
        let _ = writeln!(o, "enable = true");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavors() {
        assert_eq!(
            model_flavor("llama2-7b"),
            Some(("llama2", "7B".to_string()))
        );
        assert_eq!(
            model_flavor("llama3-70b"),
            Some(("llama3", "70B".to_string()))
        );
        assert_eq!(model_flavor("gpt-1.3b"), None);
        assert_eq!(model_flavor("llama2-tiny"), None);
    }
}
