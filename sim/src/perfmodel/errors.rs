//! How far predictions are off: error statistics over a set of points and
//! per group (a GPU type, a model), as cross-validation reports them and
//! calibration files keep them.

use serde::{Deserialize, Serialize};

/// Median and 90th percentile of absolute percentage errors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    /// Points.
    pub points: usize,
    /// Median absolute percentage error, %.
    pub median_ape_pct: f64,
    /// 90th-percentile absolute percentage error, %.
    pub p90_ape_pct: f64,
}

impl ErrorStats {
    /// Statistics of a list of absolute relative errors (fractions).
    pub fn of(errs: &[f64]) -> ErrorStats {
        let mut v = errs.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| -> f64 {
            if v.is_empty() {
                return f64::NAN;
            }
            // Nearest-rank percentile.
            let k = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
            v[k - 1] * 100.0
        };
        ErrorStats {
            points: v.len(),
            median_ape_pct: q(0.5),
            p90_ape_pct: q(0.9),
        }
    }
}

/// Errors of one group (one GPU or one model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupErrors {
    /// Group name.
    pub group: String,
    /// Its errors.
    pub stats: ErrorStats,
}
