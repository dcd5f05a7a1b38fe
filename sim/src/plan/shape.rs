//! A homogeneous 3D shape as Megatron-LM and torchtitan users write it
//! (`--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
//! `--micro-batch-size`, `--sequence-parallel`, the schedule and its
//! virtual stages) and the pipeline it implies on a cluster: `DP = GPUs /
//! (TP x PP)`, `micro-batches = global batch / (DP x micro-batch size)`,
//! ranks in Megatron's order (`initialize_model_parallel`'s
//! `tp-cp-ep-dp-pp`: TP fastest, then DP, then PP), so with `TP <=` GPUs
//! per node every TP group is one node's GPUs.

use super::pipeline::{PipeSchedule, Pipeline, Stage};
use crate::error::PlanError;

/// Where shape errors point: the flags of `simulate`.
pub const ORIGIN: &str = "the 3D shape";

/// A homogeneous 3D shape (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        }
    }
}

impl Shape3d {
    /// Data-parallel replicas on `ranks` GPUs.
    pub fn dp(&self, ranks: usize) -> usize {
        ranks / (self.tp.max(1) as usize * self.pp.max(1) as usize).max(1)
    }

    /// The pipeline of this shape on `ranks` GPUs for a model of `layers`
    /// blocks and a global batch of `global_batch` samples: stage `s` holds
    /// ranks `s*t*d .. (s+1)*t*d`, blocks split near-equally (the first
    /// stages one more when `PP` does not divide them). Errors name the flag.
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
        let (q, r) = (layers / p as u32, layers % p as u32);
        let stages: Vec<Stage> = (0..p)
            .map(|s| {
                let blocks = q + u32::from((s as u32) < r);
                let lo = (s * t * d) as u32;
                let mut st = Stage::new(blocks, (lo..lo + (t * d) as u32).collect());
                st.tp = t as u32;
                st
            })
            .collect();
        if v > 1 && self.schedule != PipeSchedule::Interleaved {
            return bad(
                "--virtual-stages",
                format!(
                    "{v} model chunks per GPU need --pp-schedule interleaved, not {}",
                    self.schedule
                ),
            );
        }
        if let Some(st) = stages.iter().find(|st| st.blocks % v != 0) {
            return bad(
                "--virtual-stages",
                format!(
                    "a stage of {} blocks does not split into {v} equal model chunks: the blocks per stage ({layers} / {p}) must be a multiple of the virtual stages",
                    st.blocks
                ),
            );
        }
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
        Ok(pipe)
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
}
