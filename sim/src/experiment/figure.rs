//! A figure of a study: its kind (declared once here: spelling, what the
//! spec must provide for it, and the key numbers the report gives under
//! it) and its `[[figure]]` table. Drawing it is `plots::experiment`'s.

use super::axis::Axis;
use super::metric::Metric;
use super::results::Results;
use super::rows::{GpuRow, ResultRow};
use super::spelled::spelled;
use super::validation::ValidationPoint;
use serde::{Deserialize, Serialize};

spelled! {
    /// What a figure draws.
    pub enum FigureKind {
        /// Grouped bars: x categories, a bar per series.
        Bars = "bars",
        /// Lines over a numeric x.
        Lines = "lines",
        /// Per-GPU time stacked by activity.
        Time = "time",
        /// Per-GPU memory by component.
        Memory = "memory",
        /// One iteration's timeline.
        Gantt = "gantt",
        /// Predicted against measured (`validations`).
        Validation = "validation",
    }
}

impl FigureKind {
    /// What a spec lacks for a figure of this kind, as the error message
    /// (none: it has what the kind needs).
    pub fn lacks(self, has_validations: bool, records_timeline: bool) -> Option<&'static str> {
        match self {
            FigureKind::Validation if !has_validations => Some(
                "a validation figure needs `validations` (files of `cephalo validate --format json`)",
            ),
            FigureKind::Gantt if !records_timeline => Some(
                "a Gantt figure needs the sweep to record timelines (sweep.timeline = true)",
            ),
            FigureKind::Bars
            | FigureKind::Lines
            | FigureKind::Time
            | FigureKind::Memory
            | FigureKind::Validation
            | FigureKind::Gantt => None,
        }
    }
}

/// A figure of an experiment: a `[[figure]]` table. `K`, `A`, `M` are the
/// kind, axis and metric: [`FigureKind`], [`Axis`], [`Metric`] once
/// checked; their spellings as written before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    bound(
        deserialize = "K: Deserialize<'de>, A: Deserialize<'de> + From<Axis>, M: Deserialize<'de> + From<Metric>"
    )
)]
pub struct FigureSpec<K = FigureKind, A = Axis, M = Metric> {
    /// What it draws ([`FigureKind`]).
    pub kind: K,
    /// The x axis: a sweep axis ([`Axis`]).
    #[serde(default = "default_x")]
    pub x: A,
    /// What one series is: a sweep axis (default `planner`).
    #[serde(default = "default_series")]
    pub series: A,
    /// The metric ([`Metric`]).
    #[serde(default = "default_metric")]
    pub y: M,
    /// Log x / y axes (lines).
    #[serde(default)]
    pub log_x: bool,
    /// Log y axis (lines).
    #[serde(default)]
    pub log_y: bool,
    /// Only these planners (per-GPU and Gantt figures; default: all).
    #[serde(default)]
    pub planners: Vec<String>,
    /// Which workload (case index among the sweep's workloads) per-GPU and
    /// Gantt figures show (default 0).
    #[serde(default)]
    pub workload: usize,
    /// Caption (default: derived).
    #[serde(default)]
    pub title: String,
    /// File name without extension (default: `figN`).
    #[serde(default)]
    pub file: String,
}

/// A figure as written: its names not yet checked (the spec's checks
/// name the field and list what is accepted).
pub(super) type WrittenFigure = FigureSpec<String, String, String>;

fn default_x<A: From<Axis>>() -> A {
    Axis::Model.into()
}
fn default_series<A: From<Axis>>() -> A {
    Axis::Planner.into()
}
fn default_metric<M: From<Metric>>() -> M {
    Metric::SamplesPerS.into()
}

impl<K, A, M> FigureSpec<K, A, M> {
    /// This figure with its kind, axes and metric replaced.
    pub(super) fn with_names<K2, A2, M2>(
        self,
        kind: K2,
        x: A2,
        series: A2,
        y: M2,
    ) -> FigureSpec<K2, A2, M2> {
        FigureSpec {
            kind,
            x,
            series,
            y,
            log_x: self.log_x,
            log_y: self.log_y,
            planners: self.planners,
            workload: self.workload,
            title: self.title,
            file: self.file,
        }
    }

    /// Whether the figure shows `planner` (all when it names none).
    pub fn shows(&self, planner: &str) -> bool {
        self.planners.is_empty() || self.planners.iter().any(|x| x == planner)
    }
}

impl FigureSpec {
    /// The key numbers of this figure in `results`, in words (the report's
    /// paragraph under it).
    pub fn key_numbers(&self, results: &Results) -> String {
        match self.kind {
            FigureKind::Bars | FigureKind::Lines => best_per_x(self, results),
            FigureKind::Time => per_gpu(self, results, time_shares),
            FigureKind::Memory => per_gpu(self, results, fullest_gpu),
            FigureKind::Validation => prediction_errors(&results.validation),
            FigureKind::Gantt => waiting_in_timeline(self, results),
        }
    }
}

/// Bars and lines: the best series at every x, and the runner-up.
fn best_per_x(f: &FigureSpec, results: &Results) -> String {
    let lower_is_better = f.y.lower_is_better();
    let parts: Vec<String> = results
        .axis_values(f.x, &f.planners)
        .iter()
        .map(|x| {
            let mut cands: Vec<(&ResultRow, f64)> = results
                .rows
                .iter()
                .filter(|r| f.shows(&r.planner) && &f.x.of(r) == x)
                .filter_map(|r| Some((r, f.y.of(r)?)))
                .collect();
            cands.sort_by(|a, b| {
                if lower_is_better {
                    a.1.total_cmp(&b.1)
                } else {
                    b.1.total_cmp(&a.1)
                }
            });
            match cands.first() {
                Some((r, v)) => {
                    let second = cands.get(1).map_or(String::new(), |(r2, v2)| {
                        format!(", then {} {}", f.series.of(r2), fmt_num(*v2))
                    });
                    format!(
                        "{} {}: {} {}{second}",
                        f.x.words(),
                        x,
                        f.series.of(r),
                        fmt_num(*v)
                    )
                }
                None => format!("{} {}: nothing fits", f.x.words(), x),
            }
        })
        .collect();
    format!(
        "Best {} ({}) per {}: {}.",
        f.y.words(),
        if lower_is_better { "lowest" } else { "highest" },
        f.x.words(),
        parts.join("; ")
    )
}

/// Per-GPU figures: `part` of every planner shown on the figure's
/// workload, over that planner's GPUs.
fn per_gpu(
    f: &FigureSpec,
    results: &Results,
    part: fn(&str, &[&GpuRow]) -> Option<String>,
) -> String {
    let mut planners: Vec<&str> = Vec::new();
    for g in results
        .gpus
        .iter()
        .filter(|g| g.case == f.workload && f.shows(&g.planner))
    {
        if !planners.contains(&g.planner.as_str()) {
            planners.push(&g.planner);
        }
    }
    let parts: Vec<String> = planners
        .into_iter()
        .filter_map(|p| {
            let gs: Vec<&GpuRow> = results
                .gpus
                .iter()
                .filter(|g| g.case == f.workload && g.planner == p)
                .collect();
            part(p, &gs)
        })
        .collect();
    format!("{}.", parts.join("; "))
}

/// The one definition of waiting every caption uses: the share of the
/// GPUs' time (their iteration, summed over GPUs) in which a GPU does no
/// work of its own: exposed communication (point-to-point transfers
/// included), exposed host copies and idle. `gpus.csv` holds the parts
/// (`exposed_comm_ms + copy_ms + idle_ms` over the row's total).
pub(super) fn waiting_share(gs: &[&GpuRow]) -> f64 {
    let total: f64 = gs
        .iter()
        .map(|g| g.compute_ms + g.exposed_comm_ms + g.copy_ms + g.host_ms + g.idle_ms)
        .sum();
    let wait: f64 = gs
        .iter()
        .map(|g| g.exposed_comm_ms + g.idle_ms + g.copy_ms)
        .sum();
    wait / total.max(1e-9)
}

/// A time figure's part: how much of the GPUs' time went to waiting and
/// to recompute.
fn time_shares(p: &str, gs: &[&GpuRow]) -> Option<String> {
    let total: f64 = gs
        .iter()
        .map(|g| g.compute_ms + g.exposed_comm_ms + g.copy_ms + g.host_ms + g.idle_ms)
        .sum();
    let rec: f64 = gs.iter().map(|g| g.recompute_ms).sum();
    Some(format!(
        "{p}: {:.0}% of the GPUs' time waiting, {:.0}% recomputing",
        100.0 * waiting_share(gs),
        100.0 * rec / total.max(1e-9)
    ))
}

/// A memory figure's part: the fullest GPU and what fills it.
fn fullest_gpu(p: &str, gs: &[&GpuRow]) -> Option<String> {
    let (u, g) = gs
        .iter()
        .map(|g| (g.peak_mem_gib / g.usable_gib.max(1e-9), *g))
        .fold(None::<(f64, &GpuRow)>, |a, b| match a {
            Some(x) if x.0 >= b.0 => Some(x),
            _ => Some((b.0, b.1)),
        })?;
    Some(format!(
        "{p}: fullest GPU rank {} ({}) at {:.0}% of usable: {:.1} GiB state shard, {:.1} overhead, {:.1} gathered parameters, {:.1} gradient buffers, {:.1} activations",
        g.rank,
        g.gpu,
        100.0 * u,
        g.state_gib,
        g.overhead_gib,
        g.unsharded_params_gib,
        g.gradients_gib,
        g.activations_gib
    ))
}

/// A validation figure: the median iteration error and the worst point.
fn prediction_errors(points: &[ValidationPoint]) -> String {
    let errs: Vec<(f64, &ValidationPoint)> = points
        .iter()
        .filter(|p| p.measured_ms > 0.0)
        .map(|p| ((p.predicted_ms - p.measured_ms) / p.measured_ms, p))
        .collect();
    // A run that flagged its own measurement as disturbed is the host's
    // noise, not the model's error: listed, never in the median.
    let its: Vec<f64> = errs
        .iter()
        .filter(|e| e.1.quantity == "iteration" && !e.1.disturbed)
        .map(|e| e.0)
        .collect();
    let disturbed: Vec<String> = errs
        .iter()
        .filter(|e| e.1.quantity == "iteration" && e.1.disturbed)
        .map(|e| format!("{} {:+.1}%", e.1.run, 100.0 * e.0))
        .collect();
    let worst = errs.iter().max_by(|a, b| a.0.abs().total_cmp(&b.0.abs()));
    let med = crate::stats::median(its.iter().map(|e| e.abs()));
    let (Some(med), Some((w, p))) = (med, worst) else {
        return String::new();
    };
    let aside = if disturbed.is_empty() {
        String::new()
    } else {
        format!(
            " Disturbed runs, not in the median: {}.",
            disturbed.join(", ")
        )
    };
    format!(
        "{} undisturbed runs: iteration predicted within {:.1}% median ({}); the largest error of any point is {:+.1}% ({} of {}, {}).{aside}",
        its.len(),
        100.0 * med,
        its.iter().map(|e| format!("{:+.1}%", 100.0 * e)).collect::<Vec<_>>().join(", "),
        100.0 * w,
        p.quantity,
        p.run,
        if p.disturbed { "a run that flagged its own measurement as disturbed" } else { "an undisturbed run" }
    )
}

/// A Gantt figure: every planner's iteration and how long its GPUs wait
/// ([`waiting_share`], the definition every caption uses).
fn waiting_in_timeline(f: &FigureSpec, results: &Results) -> String {
    let mut planners: Vec<&str> = Vec::new();
    for sp in results
        .spans
        .iter()
        .filter(|x| x.case == f.workload && f.shows(&x.planner))
    {
        if !planners.contains(&sp.planner.as_str()) {
            planners.push(&sp.planner);
        }
    }
    let mut parts = Vec::new();
    for p in planners {
        let end = results
            .rows
            .iter()
            .find(|r| r.case == f.workload && r.planner == p)
            .and_then(|r| r.iteration_ms)
            .unwrap_or(0.0);
        let gs: Vec<&GpuRow> = results
            .gpus
            .iter()
            .filter(|g| g.case == f.workload && g.planner == p)
            .collect();
        parts.push(format!(
            "{p}: iteration {end:.0} ms, GPUs waiting {:.0}% of it (exposed communication and copies, idle)",
            100.0 * waiting_share(&gs)
        ));
    }
    format!("{}.", parts.join("; "))
}

/// A number with 3 significant digits.
fn fmt_num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_figure_takes_the_default_axes_and_metric() {
        let w: WrittenFigure = toml::from_str("kind = \"bars\"").unwrap();
        assert_eq!((w.x.as_str(), w.series.as_str()), ("model", "planner"));
        assert_eq!(w.y, "samples_per_s");
        let t: FigureSpec = toml::from_str("kind = \"gantt\"").unwrap();
        assert_eq!(
            (t.kind, t.x, t.series, t.y),
            (
                FigureKind::Gantt,
                Axis::Model,
                Axis::Planner,
                Metric::SamplesPerS
            )
        );
    }

    #[test]
    fn only_validation_and_gantt_figures_need_more_input() {
        for &k in FigureKind::ALL {
            let needs = k.lacks(false, false).is_some();
            assert_eq!(
                needs,
                matches!(k, FigureKind::Validation | FigureKind::Gantt),
                "{k}"
            );
            assert_eq!(k.lacks(true, true), None, "{k}");
        }
    }

    #[test]
    fn bars_name_the_best_series_at_each_x_and_the_runner_up() {
        let row = |planner: &str, global_batch, samples_per_s| ResultRow {
            planner: planner.into(),
            global_batch,
            samples_per_s,
            ..ResultRow::default()
        };
        let results = Results {
            rows: vec![
                row("fsdp", 8, Some(10.0)),
                row("cephalo", 8, Some(12.5)),
                row("fsdp", 16, None),
            ],
            ..Results::default()
        };
        let f: FigureSpec = toml::from_str("kind = \"bars\"\nx = \"global_batch\"").unwrap();
        assert_eq!(
            f.key_numbers(&results),
            "Best samples per s (highest) per global batch: global batch 8: cephalo 12.5, then fsdp 10.0; global batch 16: nothing fits."
        );
    }
}
