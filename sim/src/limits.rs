//! Stated limits of the simulator and planners, checked where the input
//! enters and before anything is allocated for it, so an absurd size is an
//! error naming the limit (exit 2), never an allocation abort, a wrapped
//! number or an hour of work.
//!
//! Each limit sits well above any real training setup (the source of the
//! number is given with it) and below what this machine class can hold:
//! the simulator keeps per-GPU and per-op state, so GPUs and simulated ops
//! bound its memory. Planners state tighter limits of their own (the
//! native planner's GPU count, [`crate::planner::cephalo::MAX_GPUS`]; the
//! compat planner's global batch, [`crate::planner::compat::MAX_GLOBAL_BATCH`]).

use crate::error::SpecError;

/// Most GPUs in one cluster: 131,072 (2^17). The largest training clusters
/// reported (xAI Colossus, Meta's 2 x 24K-GPU and 100K+ GPU builds, 2024-25)
/// hold about 100,000-200,000 GPUs.
pub const MAX_GPUS: usize = 1 << 17;

/// Most GPUs in one node (one intra-node fabric): 576, NVIDIA's largest
/// announced NVLink domain (Rubin Ultra NVL576); DGX/HGX nodes hold 8.
pub const MAX_GPUS_PER_NODE: usize = 576;

/// Most routed experts a model may declare: 1,536, 4x the largest released
/// model's count (Kimi K2: 384), so a typo is refused, not priced.
pub const MAX_EXPERTS: u32 = 1536;

/// Largest global batch, samples per iteration: 2^24 (16.8M). With 4,096
/// tokens per sample that is 69 billion tokens per step, 20x the largest
/// published LLM batches (Llama 3 405B: 16M tokens, DeepSeek-V3: 15,360
/// samples x 4K).
pub const MAX_GLOBAL_BATCH: u32 = 1 << 24;

/// Longest sequence, tokens per sample: 2^21 (2M), beyond the longest
/// context trained in production (1M-token Gemini / Llama 4 long-context
/// stages).
pub const MAX_SEQ_LEN: u32 = 1 << 21;

/// Largest micro-batch size the planners' closed form tabulates (and a
/// profile's fit must serve): GPU efficiency saturates long before, and the
/// search cost grows with it.
pub const MAX_MICROBATCH: u32 = 256;

/// Most micro-batches one GPU runs per iteration: 8,192. Gradient
/// accumulation in practice runs tens to hundreds of micro-batches per
/// step; 8,192 is far past that and keeps the planners' memory walk of
/// one GPU's iteration (micro-batches x phases steps) near 150 MB.
pub const MAX_MICROBATCHES: u32 = 1 << 13;

/// Most ops one simulated iteration may hold: 2^25 (33.5M, a few GiB of
/// graph); a plan that would need more is refused before the graph is
/// built. It counts the ops built: identical nodes are simulated once
/// (the distinct ranks' ops, [`crate::symmetry`]; a pipeline's merged
/// replicas emit nothing) and folded runs of passes keep a few passes
/// ([`crate::fold`]), so a 3,072-GPU TP 8 x PP 64 x DP 6 run builds one
/// replica per stage ([`crate::iteration`]).
pub const MAX_SIM_OPS: u64 = 1 << 25;

/// Checks one GPU's micro-batch count against [`MAX_MICROBATCHES`]
/// (`origin` / `field` name the plan entry).
pub fn check_microbatches(
    origin: &str,
    field: &str,
    n: u64,
) -> Result<(), crate::error::PlanError> {
    if n > MAX_MICROBATCHES as u64 {
        return Err(crate::error::PlanError::invalid(
            origin,
            field,
            format!("{n} micro-batches per iteration is above the limit of {MAX_MICROBATCHES}"),
        ));
    }
    Ok(())
}

/// Checks the sizes of a workload against the limits above (`origin`
/// names the flag or file each came from).
pub fn check_workload(gpus: usize, global_batch: u32, seq_len: u32) -> Result<(), SpecError> {
    if gpus > MAX_GPUS {
        return Err(SpecError::invalid(
            crate::error::WORKLOAD,
            "nodes",
            format!("{gpus} GPUs is above the limit of {MAX_GPUS} GPUs per cluster"),
        ));
    }
    if global_batch > MAX_GLOBAL_BATCH {
        return Err(SpecError::invalid(
            crate::error::WORKLOAD,
            "global_batch",
            format!(
                "{global_batch} samples is above the limit of {MAX_GLOBAL_BATCH} samples per iteration"
            ),
        ));
    }
    if seq_len > MAX_SEQ_LEN {
        return Err(SpecError::invalid(
            crate::error::WORKLOAD,
            "seq_len",
            format!("{seq_len} tokens is above the limit of {MAX_SEQ_LEN} tokens per sample"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_names_its_field_and_number() {
        assert!(check_workload(MAX_GPUS, MAX_GLOBAL_BATCH, MAX_SEQ_LEN).is_ok());
        let e = check_workload(MAX_GPUS + 1, 8, 512)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nodes") && e.contains("131072"), "{e}");
        let e = check_workload(8, MAX_GLOBAL_BATCH + 1, 512)
            .unwrap_err()
            .to_string();
        assert!(e.contains("global_batch") && e.contains("16777216"), "{e}");
        let e = check_workload(8, 8, MAX_SEQ_LEN + 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("seq_len") && e.contains("2097152"), "{e}");
    }
}
