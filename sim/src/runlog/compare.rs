//! A log's measured figures beside the simulator's prediction of the same
//! workload: which predicted figure each log's figure is compared with
//! (torchtitan logs the allocator's reserved peak, the others the
//! allocated one), one [`Row`] per figure, the relative error in %.
//! Units: ms, tokens/s, GiB, MFU as a fraction, errors in %.

use super::{LogFormat, Measured};
use serde::Serialize;

/// The simulator's figures a log is compared with (plain numbers, so this
/// module needs no report type).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predicted {
    /// Whether the plan runs out of memory (its time figures are then
    /// not compared).
    pub oom: bool,
    /// Iteration time, ms.
    pub iteration_ms: f64,
    /// Throughput of all GPUs, tokens/s.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation, fraction.
    pub mfu: f64,
    /// GPUs of the run.
    pub gpus: u32,
    /// Rank 0's reserved peak (the allocator's segments), GiB.
    pub reserved_gib: Option<f64>,
    /// Rank 0's allocated peak, GiB.
    pub allocated_gib: Option<f64>,
}

/// Which peak memory a log prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggedMemory {
    /// The allocator's reserved peak (torchtitan).
    Reserved,
    /// The allocated peak (the others).
    Allocated,
}

impl LogFormat {
    /// The peak memory this format's log prints.
    pub fn logged_memory(self) -> LoggedMemory {
        match self {
            LogFormat::Torchtitan => LoggedMemory::Reserved,
            LogFormat::Composer | LogFormat::Deepspeed | LogFormat::Megatron => {
                LoggedMemory::Allocated
            }
        }
    }

    /// Whether this framework's runs are 3D (tensor, pipeline and data
    /// parallelism: Megatron-LM) rather than data-parallel (FSDP / ZeRO:
    /// torchtitan's default, llm-foundry, DeepSpeed).
    pub fn runs_3d(self) -> bool {
        match self {
            LogFormat::Megatron => true,
            LogFormat::Torchtitan | LogFormat::Composer | LogFormat::Deepspeed => false,
        }
    }
}

/// One compared figure of `validate --from-log` (a row of its JSON and
/// CSV).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The figure (`iteration_ms`, `tokens_per_s`, `tokens_per_s_per_gpu`,
    /// `peak_mem_gib`, `mfu`).
    pub metric: &'static str,
    /// The simulator's prediction (`null`: out of memory).
    pub predicted: Option<f64>,
    /// The log's median (`null`: the log has nothing it follows from).
    pub measured: Option<f64>,
    /// (predicted - measured) / measured, %.
    pub error_pct: Option<f64>,
}

/// (predicted - measured) / measured in %, where both are known and the
/// measured is not zero.
fn error_pct(p: Option<f64>, m: Option<f64>) -> Option<f64> {
    match (p, m) {
        (Some(p), Some(m)) if m != 0.0 => Some((p - m) / m * 100.0),
        _ => None,
    }
}

/// Every figure of `m` beside its prediction `p`, and the provenance: the
/// log's, then which predicted memory was compared.
pub fn compare(m: &Measured, p: &Predicted) -> (Vec<Row>, Vec<String>) {
    let ok = |v: f64| (!p.oom).then_some(v);
    let (mem, which) = match m.format.logged_memory() {
        LoggedMemory::Reserved => (
            p.reserved_gib,
            "rank 0's reserved peak (the allocator's segments: what torchtitan logs)",
        ),
        LoggedMemory::Allocated => (
            p.allocated_gib,
            "rank 0's allocated peak (what the log prints)",
        ),
    };
    let gpus = p.gpus.max(1) as f64;
    let rows = vec![
        ("iteration_ms", ok(p.iteration_ms), m.iteration_ms),
        ("tokens_per_s", ok(p.tokens_per_s), m.tokens_per_s),
        (
            "tokens_per_s_per_gpu",
            ok(p.tokens_per_s / gpus),
            m.tokens_per_s_per_gpu,
        ),
        ("peak_mem_gib", mem, m.peak_mem_gib),
        ("mfu", ok(p.mfu), m.mfu),
    ]
    .into_iter()
    .map(|(metric, predicted, measured)| Row {
        metric,
        predicted,
        measured,
        error_pct: error_pct(predicted, measured),
    })
    .collect();
    let mut provenance = m.provenance.clone();
    provenance.push(format!("predicted memory: {which}"));
    (rows, provenance)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(format: LogFormat) -> Measured {
        Measured {
            format,
            steps_logged: 5,
            warmup_skipped: 2,
            steps_used: 3,
            iteration_ms: Some(100.0),
            tokens_per_s: Some(4000.0),
            tokens_per_s_per_gpu: None,
            peak_mem_gib: Some(10.0),
            mfu: Some(0.4),
            provenance: vec!["logged".into()],
        }
    }

    fn predicted(oom: bool) -> Predicted {
        Predicted {
            oom,
            iteration_ms: 110.0,
            tokens_per_s: 3600.0,
            mfu: 0.36,
            gpus: 4,
            reserved_gib: Some(12.0),
            allocated_gib: Some(9.0),
        }
    }

    #[test]
    fn each_format_is_compared_with_the_memory_it_logs() {
        let peak = |f: LogFormat| {
            let (rows, prov) = compare(&measured(f), &predicted(false));
            let r = rows.iter().find(|r| r.metric == "peak_mem_gib").unwrap();
            (r.predicted, prov.last().unwrap().clone())
        };
        let (tt, why) = peak(LogFormat::Torchtitan);
        assert_eq!(tt, Some(12.0));
        assert!(why.contains("reserved"), "{why}");
        for f in [
            LogFormat::Composer,
            LogFormat::Deepspeed,
            LogFormat::Megatron,
        ] {
            assert_eq!(peak(f).0, Some(9.0), "{}", f.name());
        }
        assert!(LogFormat::Megatron.runs_3d() && !LogFormat::Deepspeed.runs_3d());
    }

    #[test]
    fn errors_are_relative_and_oom_predicts_no_time() {
        let (rows, prov) = compare(&measured(LogFormat::Composer), &predicted(false));
        let it = &rows[0];
        assert!((it.error_pct.unwrap() - 10.0).abs() < 1e-9);
        let per_gpu = &rows[2];
        assert_eq!((per_gpu.predicted, per_gpu.error_pct), (Some(900.0), None));
        assert_eq!(prov[0], "logged");
        let (oom, _) = compare(&measured(LogFormat::Composer), &predicted(true));
        assert!(oom
            .iter()
            .all(|r| r.metric == "peak_mem_gib" || r.predicted.is_none()));
    }
}
