//! `cephalo validate`'s output (`cephalo-validate/1`): the run, the
//! plan, the prediction against the measurement and whether the machine
//! disturbed it; its JSON schema is [`ValidateOutput`], its text
//! [`ValidateOutput::table`].

use crate::sim_glue::{Comparison, MeasuredReport};
use crate::validation::{Attempt, BackgroundLoad};
use serde::Serialize;
use sim::plan::Plan;

/// `cephalo validate --format json` (`cephalo-validate/1`): the workload,
/// the plan, where the profile came from, and the comparison flattened in
/// (`predicted_iteration_ms`, `measured_iteration_ms`,
/// `iteration_error_rel`, `ranks[]` of `{predicted, measured, error_rel}`
/// pairs: see `exec::sim_glue::Comparison`), plus every measured
/// iteration, the simulator's communication model and notes.
#[derive(Debug, Serialize)]
pub struct ValidateOutput {
    /// Schema tag.
    pub format: &'static str,
    /// Model (canonical name).
    pub model: String,
    /// Device kind (`cpu` or `cuda`).
    pub device: String,
    /// Catalog name of the device.
    pub gpu: String,
    /// Precision.
    pub dtype: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// Global batch.
    pub global_batch: u32,
    /// Recorded iterations.
    pub iterations: usize,
    /// Warm-up iterations.
    pub warmup_iterations: usize,
    /// libtorch threads per rank (null: libtorch's default).
    pub threads: Option<usize>,
    /// How the plan was chosen.
    pub plan_source: String,
    /// The plan run.
    pub plan: Plan,
    /// Where the profile came from (`measured now` or the file).
    pub profile_source: String,
    /// Source of the block times the prediction used.
    pub compute_source: String,
    /// The simulator's communication model.
    pub comm_model: String,
    /// The comparison.
    #[serde(flatten)]
    pub comparison: Comparison,
    /// Measured iteration times, ms.
    pub measured_iteration_ms_each: Vec<f64>,
    /// Measured per-rank details (medians).
    pub measured: MeasuredReport,
    /// CPU use of other processes on the host while profiling and while
    /// training, % of all cores (`null` where unknown or not profiled).
    pub background_cpu_pct: BackgroundLoad,
    /// Other processes used more than [`crate::validation::BUSY_PCT`] of the host while this
    /// measured, or the measured iterations spread by more than
    /// [`crate::validation::SPREAD_LIMIT`]: the comparison says more about the
    /// machine than about the model.
    pub measurement_disturbed: bool,
    /// (max - min) / median of the measured iterations.
    pub iteration_spread: f64,
    /// Every run, in order: a disturbed run is run again (`--attempts`);
    /// the comparison is the last one's.
    pub attempts: Vec<Attempt>,
    /// Remarks (model adjustments, warnings).
    pub notes: Vec<String>,
}

fn pct(x: Option<f64>) -> String {
    match x {
        Some(e) if e.is_finite() => format!("{:+.1}%", e * 100.0),
        _ => "-".into(),
    }
}

fn num(x: Option<f64>, prec: usize) -> String {
    match x {
        Some(v) => format!("{v:.prec$}"),
        None => "n/a".into(),
    }
}

impl ValidateOutput {
    /// The text table `cephalo validate` prints: the run, the plan, the
    /// sources, predicted against measured per rank (and per stage and TP
    /// group), every measured iteration and run, the background load.
    pub fn table(&self) -> String {
        let o = self;
        use std::fmt::Write;
        let mut s = String::new();
        let c = &o.comparison;
        if o.measurement_disturbed {
            let _ = writeln!(
            s,
            "WARNING: the machine was busy or changed speed while this measured (see the notes): do not trust this comparison; rerun on a quiet machine"
        );
        }
        let _ = writeln!(
        s,
        "validate: {} on {} x {} ({}, seq {}, global batch {}), {} iterations after {} warm-up, {} thread(s) per rank",
        o.model,
        o.plan.gpus.len(),
        o.gpu,
        o.dtype,
        o.seq_len,
        o.global_batch,
        o.iterations,
        o.warmup_iterations,
        o.threads.map_or("default".into(), |t| t.to_string())
    );
        let _ = writeln!(s, "plan: {}", o.plan_source);
        if let Some(pipe) = &o.plan.pipeline {
            let _ = writeln!(s, "  {}", pipe.label());
        }
        for g in &o.plan.gpus {
            let _ = writeln!(
                s,
                "  batch {:>3} = {} micro-batch(es) of <= {}, state {:.1}%",
                g.batch,
                g.microbatches,
                g.microbatch_size,
                g.state_fraction * 100.0
            );
        }
        let _ = writeln!(s, "profile: {}", o.profile_source);
        let _ = writeln!(s, "compute: {}", o.compute_source);
        let _ = writeln!(s, "communication: {}", o.comm_model);
        let _ = writeln!(
            s,
            "{:<26} {:>12} {:>12} {:>8}",
            "", "predicted", "measured", "error"
        );
        let _ = writeln!(
            s,
            "{:<26} {:>12.1} {:>12.1} {:>8}",
            "iteration ms",
            c.predicted_iteration_ms,
            c.measured_iteration_ms,
            pct(Some(c.iteration_error_rel))
        );
        s.push_str(&rank_table(&c.ranks));
        s.push_str(&group_table(&c.groups));
        let each: Vec<String> = o
            .measured_iteration_ms_each
            .iter()
            .map(|x| format!("{x:.1}"))
            .collect();
        let _ = writeln!(s, "measured iterations ms: {}", each.join(", "));
        if o.attempts.len() > 1 {
            let runs: Vec<String> = o
                .attempts
                .iter()
                .map(|a| {
                    format!(
                        "{:.1} / {:.1} ms ({:+.1}%{})",
                        a.predicted_iteration_ms,
                        a.measured_iteration_ms,
                        a.iteration_error_rel * 100.0,
                        if a.disturbed_because.is_empty() {
                            ""
                        } else {
                            ", disturbed"
                        }
                    )
                })
                .collect();
            let _ = writeln!(s, "runs (predicted / measured): {}", runs.join("; "));
        }
        let bg = |x: Option<f64>| x.map_or("-".to_string(), |p| format!("{p:.1}%"));

        let _ = writeln!(
            s,
            "other processes' CPU use: {} while profiling, {} while training",
            bg(o.background_cpu_pct.profile),
            bg(o.background_cpu_pct.run)
        );
        s
    }
}

/// The per stage and TP group rows of the table (none for data-parallel
/// plans).
fn group_table(groups: &[crate::sim_glue::GroupComparison]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if groups.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "per stage and TP group (means of its ranks; bubble = iteration - compute - communication):"
    );
    for g in groups {
        for (name, p) in [
            ("compute ms", &g.compute_ms),
            ("communication ms", &g.comm_ms),
            ("bubble ms", &g.bubble_ms),
        ] {
            let _ = writeln!(
                s,
                "{:<26} {:>12} {:>12} {:>8}",
                format!("s{} r{} {name}", g.stage, g.replica),
                num(p.predicted, 1),
                num(p.measured, 1),
                pct(p.error_rel)
            );
        }
    }
    s
}

/// Predicted against measured, rank by rank.
fn rank_table(ranks: &[crate::sim_glue::RankComparison]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for r in ranks {
        for (name, p, prec) in [
            ("compute ms", &r.compute_ms, 1),
            ("  passes ms", &r.passes_ms, 1),
            ("  optimizer ms", &r.optimizer_ms, 1),
            ("communication ms", &r.comm_ms, 1),
            ("idle / wait ms", &r.idle_ms, 1),
            ("copy ms", &r.copy_ms, 1),
            ("peak memory GiB", &r.peak_mem_gib, 2),
        ] {
            let _ = writeln!(
                s,
                "{:<26} {:>12} {:>12} {:>8}",
                format!("rank {} {name}", r.rank),
                num(p.predicted, prec),
                num(p.measured, prec),
                pct(p.error_rel)
            );
        }
    }
    s
}
