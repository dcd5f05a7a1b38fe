//! The spec of a study (one TOML file under `experiments/`) and its
//! checks: everything that does not need other files is checked before
//! any work, each error naming the field and what it accepts.

use super::axis::Axis;
use super::cluster_source::ClusterText;
use super::figure::{FigureKind, FigureSpec, WrittenFigure};
use super::metric::Metric;
use super::sweep::{Sweep, Workload};
use crate::error::SpecError;
use crate::planner;
use serde::{Deserialize, Serialize};

/// Which profiles an experiment runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfilesUse {
    /// The paper authors' measurements (`../shared/reference-profiles` or
    /// `--profiles`), the calibrated model for what they lack.
    Reference,
    /// The calibrated performance model only.
    Calibrated,
}

/// An experiment spec (module docs). `F` is its figures' type:
/// [`FigureSpec`] once checked ([`ExperimentSpec::from_toml`]), their
/// tables as written before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "F: Deserialize<'de>"))]
pub struct ExperimentSpec<F = FigureSpec> {
    /// Name (results go to `results/NAME/`).
    pub name: String,
    /// One-line title.
    pub title: String,
    /// What the study asks, for the report.
    #[serde(default)]
    pub description: String,
    /// Which profiles it runs on.
    pub profiles: ProfilesUse,
    /// The reference memory profile's cluster (`paper`, `aws-16gpu`), with
    /// reference profiles only.
    #[serde(default)]
    pub memory_cluster: Option<String>,
    /// The Cephalo paper's memory rule: plans may use this fraction of each
    /// GPU's memory (the paper reproductions set its 0.75); absent: the
    /// physical limit ([`crate::cost::MemPolicy`]).
    #[serde(default)]
    pub mem_fraction: Option<f64>,
    /// The sweep (empty for a study of measurements only).
    #[serde(default)]
    pub sweep: Sweep,
    /// Outputs of `cephalo validate --format json` (files relative to the
    /// experiments directory): predicted against measured, for
    /// `validation` figures.
    #[serde(default)]
    pub validations: Vec<String>,
    /// A throughput target (tokens/s): the report names the cheapest
    /// cluster of the sweep that reaches it, and its planner.
    #[serde(default)]
    pub target_tokens_per_s: Option<f64>,
    /// Where the study sits in the report (smaller first; ties by name).
    #[serde(default = "default_order")]
    pub order: u32,
    /// The paper's claim the study tests (`compute-balancing`,
    /// `memory-balancing`, `ablation`); none for a what-if beyond the paper.
    #[serde(default)]
    pub claim: Option<super::claim::Claim>,
    /// Figures to draw.
    #[serde(default, rename = "figure")]
    pub figures: Vec<F>,
}

fn default_order() -> u32 {
    100
}

impl ExperimentSpec {
    /// Parses a spec (`origin` names the file for errors) and checks
    /// everything that does not need other files: planners, metrics,
    /// axes, figure kinds, models, GPU types, non-empty sweeps.
    pub fn from_toml(text: &str, origin: &str) -> Result<ExperimentSpec, SpecError> {
        let s: ExperimentSpec<WrittenFigure> =
            toml::from_str(text).map_err(|e| SpecError::parse(origin.to_string(), e))?;
        s.check(origin)
    }
}

impl ExperimentSpec<WrittenFigure> {
    /// The spec checked, its figures' names read (the first error found,
    /// in the order of the fields).
    fn check(self, origin: &str) -> Result<ExperimentSpec, SpecError> {
        self.check_name(origin)?;
        let measured_only = !self.validations.is_empty() && self.sweep == Sweep::default();
        if !measured_only {
            self.sweep.check(origin)?;
            self.check_memory_cluster(origin)?;
            crate::cost::MemPolicy::from_fraction(self.mem_fraction)
                .check(origin, "mem_fraction")?;
        }
        let (has_validations, timeline) = (!self.validations.is_empty(), self.sweep.timeline);
        let mut figures = Vec::with_capacity(self.figures.len());
        for (i, f) in self.figures.iter().enumerate() {
            figures.push(check_figure(
                origin,
                i,
                f.clone(),
                has_validations,
                timeline,
            )?);
        }
        Ok(self.with_figures(figures))
    }
}

/// A written figure checked: its kind, axes and metric read, what its
/// kind needs present, its planners known.
fn check_figure(
    origin: &str,
    i: usize,
    f: WrittenFigure,
    has_validations: bool,
    timeline: bool,
) -> Result<FigureSpec, SpecError> {
    let at = |x: &str| format!("figure[{i}].{x}");
    let bad = |x: &str, msg: String| SpecError::invalid(origin, at(x), msg);
    let kind = FigureKind::from_name(&f.kind).ok_or_else(|| {
        bad(
            "kind",
            format!("expected one of {}, got `{}`", FigureKind::names(), f.kind),
        )
    })?;
    let axis = |field: &str, v: &str| {
        Axis::from_name(v).ok_or_else(|| {
            bad(
                field,
                format!("expected a sweep axis ({}), got `{v}`", Axis::names()),
            )
        })
    };
    let (x, series) = (axis("x", &f.x)?, axis("series", &f.series)?);
    let y = Metric::from_name(&f.y).ok_or_else(|| {
        bad(
            "y",
            format!("expected a metric ({}), got `{}`", Metric::names(), f.y),
        )
    })?;
    if let Some(msg) = kind.lacks(has_validations, timeline) {
        return Err(bad("kind", msg.into()));
    }
    for (j, p) in f.planners.iter().enumerate() {
        planner::registry::by_name(p, "figure").map_err(|e| {
            SpecError::invalid(origin, at(&format!("planners[{j}]")), e.to_string())
        })?;
    }
    Ok(f.with_names(kind, x, series, y))
}

impl<F> ExperimentSpec<F> {
    /// This spec with other figures.
    fn with_figures<G>(self, figures: Vec<G>) -> ExperimentSpec<G> {
        ExperimentSpec {
            name: self.name,
            title: self.title,
            description: self.description,
            profiles: self.profiles,
            memory_cluster: self.memory_cluster,
            mem_fraction: self.mem_fraction,
            sweep: self.sweep,
            validations: self.validations,
            target_tokens_per_s: self.target_tokens_per_s,
            order: self.order,
            claim: self.claim,
            figures,
        }
    }

    /// The name makes a directory name.
    fn check_name(&self, origin: &str) -> Result<(), SpecError> {
        if self.name.trim().is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(SpecError::invalid(
                origin,
                "name",
                format!(
                    "expected letters, digits, '-' or '_' (a directory name), got `{}`",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// A memory cluster only with reference profiles.
    fn check_memory_cluster(&self, origin: &str) -> Result<(), SpecError> {
        if self.memory_cluster.is_some() && self.profiles != ProfilesUse::Reference {
            return Err(SpecError::invalid(
                origin,
                "memory_cluster",
                "a memory cluster names a reference memory profile: set profiles = \"reference\"",
            ));
        }
        Ok(())
    }

    /// The sweep's workloads in order ([`Sweep::workloads`]).
    pub fn workloads(&self, clusters: &[ClusterText]) -> Result<Vec<Workload>, SpecError> {
        self.sweep.workloads(clusters)
    }

    /// The planners of the sweep (canonical names), in order.
    pub fn planner_names(&self) -> Vec<String> {
        if self.sweep.planners.is_empty() {
            planner::registry::all()
                .iter()
                .map(|p| p.name().to_string())
                .collect()
        } else {
            self.sweep
                .planners
                .iter()
                .map(|p| {
                    planner::registry::by_name(p, "sweep")
                        .map(|x| x.name().to_string())
                        .unwrap_or_default()
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = r#"
name = "t"
title = "t"
profiles = "calibrated"
[sweep]
gpus = ["a100-80gb,l4"]
models = ["gpt-1.3b"]
global_batches = [8]
[[figure]]
kind = "bars"
x = "global_batch"
y = "samples_per_s"
"#;

    fn error(from: &str, to: &str) -> String {
        assert!(SPEC.contains(from), "{from}");
        ExperimentSpec::from_toml(&SPEC.replace(from, to), "t.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_spec_reads_its_figures_names() {
        let s = ExperimentSpec::from_toml(SPEC, "t.toml").unwrap();
        let f = &s.figures[0];
        assert_eq!(
            (f.kind, f.x, f.series, f.y),
            (
                FigureKind::Bars,
                Axis::GlobalBatch,
                Axis::Planner,
                Metric::SamplesPerS
            )
        );
    }

    #[test]
    fn unknown_names_are_refused_listing_what_is_accepted() {
        // The lists in the messages are the enums' `names()`, which keep
        // the order specs have always been told (new names go last).
        assert!(FigureKind::names().starts_with("bars, lines, time, memory, gantt, validation"));
        assert!(Axis::names().starts_with(
            "cluster, model, global_batch, seq_len, dtype, network_gbit_s, gpus, add_gpu, planner"
        ));
        assert!(Metric::names().starts_with("samples_per_s, tokens_per_s, iteration_ms, mfu, peak_usable_pct, usd_per_million_tokens, speedup_vs_fsdp, samples_per_s_per_usd_hour, search_candidates, search_simulations"));
        assert_eq!(
            error("kind = \"bars\"", "kind = \"pie\""),
            format!(
                "t.toml: field `figure[0].kind`: expected one of {}, got `pie`",
                FigureKind::names()
            )
        );
        let axis = format!("expected a sweep axis ({}), got `colour`", Axis::names());
        assert_eq!(
            error("x = \"global_batch\"", "x = \"colour\""),
            format!("t.toml: field `figure[0].x`: {axis}")
        );
        assert_eq!(
            error("x = \"global_batch\"", "series = \"colour\""),
            format!("t.toml: field `figure[0].series`: {axis}")
        );
        assert_eq!(
            error("y = \"samples_per_s\"", "y = \"happiness\""),
            format!(
                "t.toml: field `figure[0].y`: expected a metric ({}), got `happiness`",
                Metric::names()
            )
        );
        assert_eq!(
            error("kind = \"bars\"", "kind = \"gantt\""),
            "t.toml: field `figure[0].kind`: a Gantt figure needs the sweep to record timelines (sweep.timeline = true)"
        );
    }

    #[test]
    fn the_sweep_is_checked_before_the_figures_and_types_before_both() {
        let both = SPEC
            .replace("kind = \"bars\"", "kind = \"pie\"")
            .replace("models = [\"gpt-1.3b\"]", "models = [\"nope\"]");
        let e = ExperimentSpec::from_toml(&both, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown model `nope`"), "{e}");
        let e = error("kind = \"bars\"", "kind = 3");
        assert!(
            e.contains("cannot parse") && e.contains("expected a string"),
            "{e}"
        );
    }
}
