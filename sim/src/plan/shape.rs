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

/// The parts of a 3D shape a user pinned (`plan --tp 2 --pp 4`, a study's
/// `shapes` list); `None` = the planner chooses. The 3D planners search
/// only the shapes that match the parts they take
/// ([`crate::planner::Planner::shape_pins`]); a data-parallel planner
/// takes only the trivial pins (`tp=1`, `pp=1`) its plans already have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShapePins {
    /// GPUs per TP group.
    pub tp: Option<u32>,
    /// Pipeline stages.
    pub pp: Option<u32>,
    /// The pipeline schedule.
    pub schedule: Option<PipeSchedule>,
    /// Model chunks per GPU (interleaved).
    pub virtual_stages: Option<u32>,
    /// Samples per micro-batch of one replica.
    pub microbatch_size: Option<u32>,
    /// Sequence parallelism inside the TP groups.
    pub sequence_parallel: Option<bool>,
}

impl ShapePins {
    /// The pin names [`ShapePins::parse`] takes (the flags without their
    /// dashes; `schedule` is `--pp-schedule`).
    pub const AXES: [&'static str; 6] = [
        "tp",
        "pp",
        "schedule",
        "virtual_stages",
        "microbatch_size",
        "sequence_parallel",
    ];

    /// True when nothing is pinned.
    pub fn is_empty(&self) -> bool {
        *self == ShapePins::default()
    }

    /// True when the pins ask for more than one GPU per model copy or
    /// anything only a pipeline has: what a data-parallel plan cannot be.
    pub fn needs_model_parallel(&self) -> bool {
        self.tp.is_some_and(|t| t > 1)
            || self.pp.is_some_and(|p| p > 1)
            || self.schedule.is_some()
            || self.virtual_stages.is_some_and(|v| v > 1)
            || self.microbatch_size.is_some()
            || self.sequence_parallel == Some(true)
    }

    /// The names ([`ShapePins::AXES`]) of the parts pinned, in order.
    pub fn pinned(&self) -> Vec<&'static str> {
        let set = [
            self.tp.is_some(),
            self.pp.is_some(),
            self.schedule.is_some(),
            self.virtual_stages.is_some(),
            self.microbatch_size.is_some(),
            self.sequence_parallel.is_some(),
        ];
        ShapePins::AXES
            .iter()
            .zip(set)
            .filter(|(_, on)| *on)
            .map(|(n, _)| *n)
            .collect()
    }

    /// `self` with every pin `other` sets overriding it.
    pub fn with(&self, other: &ShapePins) -> ShapePins {
        ShapePins {
            tp: other.tp.or(self.tp),
            pp: other.pp.or(self.pp),
            schedule: other.schedule.or(self.schedule),
            virtual_stages: other.virtual_stages.or(self.virtual_stages),
            microbatch_size: other.microbatch_size.or(self.microbatch_size),
            sequence_parallel: other.sequence_parallel.or(self.sequence_parallel),
        }
    }

    /// Whether `s` has every pinned value.
    pub fn matches(&self, s: &Shape3d) -> bool {
        self.tp.is_none_or(|x| x == s.tp)
            && self.pp.is_none_or(|x| x == s.pp)
            && self.schedule.is_none_or(|x| x == s.schedule)
            && self.virtual_stages.is_none_or(|x| x == s.virtual_stages)
            && self.microbatch_size.is_none_or(|x| x == s.microbatch_size)
            && self
                .sequence_parallel
                .is_none_or(|x| x == s.sequence_parallel)
    }

    /// Pins written as `name=value` pairs separated by spaces or commas
    /// (`"tp=2 pp=4 schedule=interleaved"`; empty: nothing pinned), as a
    /// study's `shapes` list spells them; errors name `origin` and `field`
    /// with what was expected.
    pub fn parse(
        text: &str,
        origin: &str,
        field: &str,
    ) -> Result<ShapePins, crate::error::SpecError> {
        let bad = |msg: String| crate::error::SpecError::invalid(origin, field, msg);
        let mut pins = ShapePins::default();
        for (name, value) in crate::lists::pairs(text, origin, field, "tp=2 pp=4 schedule=1f1b")? {
            let count = |what: &str| -> Result<u32, crate::error::SpecError> {
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|&x| (1..=crate::limits::MAX_GPUS as u32).contains(&x))
                    .ok_or_else(|| {
                        bad(format!(
                            "{name}: expected {what} from 1 to {}, got `{value}`",
                            crate::limits::MAX_GPUS
                        ))
                    })
            };
            match name.replace('-', "_").as_str() {
                "tp" => pins.tp = Some(count("a TP degree")?),
                "pp" => pins.pp = Some(count("a pipeline depth")?),
                "schedule" | "pp_schedule" => {
                    pins.schedule = Some(PipeSchedule::parse(value).ok_or_else(|| {
                        bad(format!(
                            "schedule: expected one of {}, got `{value}`",
                            PipeSchedule::ALL.map(|x| x.name()).join(", ")
                        ))
                    })?)
                }
                "virtual_stages" => pins.virtual_stages = Some(count("model chunks per GPU")?),
                "microbatch_size" => pins.microbatch_size = Some(count("samples per micro-batch")?),
                "sequence_parallel" => {
                    pins.sequence_parallel = Some(match value {
                        "true" | "on" | "yes" => true,
                        "false" | "off" | "no" => false,
                        _ => {
                            return Err(bad(format!(
                                "sequence_parallel: expected true or false, got `{value}`"
                            )))
                        }
                    })
                }
                other => {
                    return Err(bad(format!(
                        "unknown shape pin `{other}` (known: {})",
                        ShapePins::AXES.join(", ")
                    )))
                }
            }
        }
        Ok(pins)
    }

    /// The pins as [`ShapePins::parse`] reads them back (`""` when nothing
    /// is pinned), in [`ShapePins::AXES`] order.
    pub fn text(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.push(format!("{k}={v}"));
            }
        };
        put("tp", self.tp.map(|x| x.to_string()));
        put("pp", self.pp.map(|x| x.to_string()));
        put("schedule", self.schedule.map(|x| x.name().to_string()));
        put("virtual_stages", self.virtual_stages.map(|x| x.to_string()));
        put(
            "microbatch_size",
            self.microbatch_size.map(|x| x.to_string()),
        );
        put(
            "sequence_parallel",
            self.sequence_parallel.map(|x| x.to_string()),
        );
        out.join(" ")
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

    #[test]
    fn shape_pins_read_back_what_they_write_and_match_their_shapes() {
        let p = ShapePins::parse(
            "tp=2, pp=4 schedule=interleaved virtual-stages=2 microbatch_size=1 sequence_parallel=true",
            "t",
            "f",
        )
        .unwrap();
        assert_eq!(ShapePins::parse(&p.text(), "t", "f").unwrap(), p);
        let s = Shape3d {
            tp: 2,
            pp: 4,
            schedule: PipeSchedule::Interleaved,
            virtual_stages: 2,
            sequence_parallel: true,
            ..Shape3d::default()
        };
        assert!(p.matches(&s));
        assert!(!p.matches(&Shape3d { tp: 4, ..s }));
        assert!(ShapePins::default().matches(&s) && ShapePins::default().text().is_empty());
        assert!(p.needs_model_parallel());
        assert_eq!(p.pinned(), ShapePins::AXES);
        assert_eq!(
            ShapePins::parse("pp=2 tp=4", "t", "f").unwrap().pinned(),
            ["tp", "pp"]
        );
        let trivial = ShapePins::parse("tp=1 pp=1", "t", "f").unwrap();
        assert!(!trivial.needs_model_parallel() && !trivial.is_empty());
        for (bad, want) in [
            ("tp=0", "tp: expected a TP degree"),
            ("pp=x", "pp: expected a pipeline depth"),
            ("schedule=zigzag", "schedule: expected one of"),
            ("sequence_parallel=maybe", "expected true or false"),
            ("dp=2", "unknown shape pin `dp`"),
            ("tp", "expected name=value"),
        ] {
            let e = ShapePins::parse(bad, "t.toml", "shapes[0]")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want) && e.contains("shapes[0]"), "{bad}: {e}");
        }
    }
}
