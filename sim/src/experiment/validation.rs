//! Measurements a study holds the simulator against: the points of
//! `cephalo validate --format json` outputs (`validation.csv`).

use crate::error::SpecError;
use serde::{Deserialize, Serialize};

/// One predicted-against-measured pair of a `validate` run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationPoint {
    /// The run (its file).
    pub run: String,
    /// The strategy it ran.
    pub strategy: String,
    /// What is compared: `iteration`, or `compute rank N`.
    pub quantity: String,
    /// The simulator's value, ms.
    pub predicted_ms: f64,
    /// The measured value, ms.
    pub measured_ms: f64,
    /// Whether the run flagged its own measurement as disturbed (other
    /// load, a wide spread of iteration times).
    pub disturbed: bool,
}

impl ValidationPoint {
    /// The points of one `cephalo validate --format json` output (`run`
    /// names it): the iteration and every rank's compute time.
    pub fn from_json(text: &str, run: &str) -> Result<Vec<ValidationPoint>, SpecError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| SpecError::parse(run.to_string(), e))?;
        let num = |x: &serde_json::Value, f: &str| -> Result<f64, SpecError> {
            x.get(f).and_then(|y| y.as_f64()).ok_or_else(|| {
                SpecError::invalid(
                    run,
                    f,
                    "expected a number (a `cephalo validate --format json` output)",
                )
            })
        };
        let strategy = v
            .pointer("/plan/strategy")
            .map(|s| {
                serde_json::from_value::<crate::strategy::Strategy>(s.clone())
                    .map(|s| s.label())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        let disturbed = v
            .get("measurement_disturbed")
            .and_then(|d| d.as_bool())
            .unwrap_or(false);
        let mut out = vec![ValidationPoint {
            run: run.to_string(),
            strategy: strategy.clone(),
            quantity: "iteration".into(),
            predicted_ms: num(&v, "predicted_iteration_ms")?,
            measured_ms: num(&v, "measured_iteration_ms")?,
            disturbed,
        }];
        let ranks = v
            .get("ranks")
            .and_then(|r| r.as_array())
            .ok_or_else(|| SpecError::invalid(run, "ranks", "expected the per-rank comparison"))?;
        for (i, r) in ranks.iter().enumerate() {
            let c = r.get("compute_ms").ok_or_else(|| {
                SpecError::invalid(run, format!("ranks[{i}].compute_ms"), "missing")
            })?;
            if let (Some(p), Some(m)) = (
                c.get("predicted").and_then(|x| x.as_f64()),
                c.get("measured").and_then(|x| x.as_f64()),
            ) {
                out.push(ValidationPoint {
                    run: run.to_string(),
                    strategy: strategy.clone(),
                    quantity: format!("compute rank {i}"),
                    predicted_ms: p,
                    measured_ms: m,
                    disturbed,
                });
            }
        }
        Ok(out)
    }
}
