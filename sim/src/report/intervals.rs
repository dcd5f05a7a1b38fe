//! How sure a prediction is: intervals around the iteration time and the
//! throughput from the expected errors of the numbers they came from.
//!
//! Each GPU's own time splits into compute (its GPU type's block times:
//! cross-validated errors for an analytic curve, run-to-run spread for a
//! measured one, [`crate::cost::GpuTypeCost::time_error_pct`]) and exposed
//! communication (the comm model's band, [`crate::comm::CommModel::error_pct`]).
//! Errors of one source move together (a model that is 10% slow on a GPU
//! is slow on every block), so a GPU's relative error is the time-weighted
//! sum of its parts, `(compute x e_compute + exposed comm x e_comm) /
//! iteration`, and the iteration's is the largest over GPUs: the interval
//! `t x (1 -+ e)` at the median and at the 90th percentile of the sources'
//! errors. Throughput is `work / t`, so its interval is `x / (1 +- e)`.

use serde::Serialize;

/// One interval level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// Relative error of the iteration time at this level (fraction).
    pub rel: f64,
    /// Iteration time, ms: [low, high].
    pub iteration_ms: [f64; 2],
    /// Samples/s: [low, high].
    pub samples_per_s: [f64; 2],
    /// Tokens/s: [low, high].
    pub tokens_per_s: [f64; 2],
}

/// The intervals of a report at the sources' median and 90th-percentile
/// errors, with what they rest on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Intervals {
    /// At the sources' median absolute errors.
    pub median: Interval,
    /// At their 90th-percentile absolute errors.
    pub p90: Interval,
    /// The error of each source, for the reader (`a100-80gb compute
    /// 10%/34% (cross-validated), comm 8%/20%`).
    pub basis: String,
}

/// One GPU's share of an iteration: compute and exposed communication ms,
/// and the (median, p90) % errors of each.
#[derive(Debug, Clone, Copy)]
pub struct Share {
    /// Compute ms.
    pub compute_ms: f64,
    /// Its (median, p90) absolute error, %.
    pub compute_err_pct: (f64, f64),
    /// Exposed communication ms.
    pub comm_ms: f64,
    /// Its (median, p90) absolute error, %.
    pub comm_err_pct: (f64, f64),
}

/// Largest relative error below which an interval stays positive.
const MAX_REL: f64 = 0.95;

impl Intervals {
    /// The intervals of an iteration of `iteration_ms` at `samples_per_s`
    /// and `tokens_per_s`, from each GPU's [`Share`].
    pub fn of(
        iteration_ms: f64,
        samples_per_s: f64,
        tokens_per_s: f64,
        shares: &[Share],
        basis: String,
    ) -> Intervals {
        let rel = |pick: fn((f64, f64)) -> f64| {
            shares
                .iter()
                .map(|s| {
                    (s.compute_ms * pick(s.compute_err_pct) + s.comm_ms * pick(s.comm_err_pct))
                        / 100.0
                        / iteration_ms.max(f64::MIN_POSITIVE)
                })
                .fold(0.0, f64::max)
                .min(MAX_REL)
        };
        let level = |e: f64| Interval {
            rel: e,
            iteration_ms: [iteration_ms * (1.0 - e), iteration_ms * (1.0 + e)],
            samples_per_s: [samples_per_s / (1.0 + e), samples_per_s / (1.0 - e)],
            tokens_per_s: [tokens_per_s / (1.0 + e), tokens_per_s / (1.0 - e)],
        };
        Intervals {
            median: level(rel(|x| x.0)),
            p90: level(rel(|x| x.1)),
            basis,
        }
    }

    /// One line for tables: the iteration-time and tokens/s ranges at the
    /// median errors, the iteration-time range at the p90.
    pub fn summary(&self) -> String {
        let (m, p) = (&self.median, &self.p90);
        format!(
            "likely range: iteration {:.1}-{:.1} ms, {:.0}-{:.0} tokens/s at the sources' median errors ({:.1}%); {:.1}-{:.1} ms at their p90 ({:.1}%)",
            m.iteration_ms[0],
            m.iteration_ms[1],
            m.tokens_per_s[0],
            m.tokens_per_s[1],
            m.rel * 100.0,
            p.iteration_ms[0],
            p.iteration_ms[1],
            p.rel * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_grow_with_the_errors_and_hold_the_prediction() {
        let share = |c: f64, e: f64| Share {
            compute_ms: c,
            compute_err_pct: (e, 3.0 * e),
            comm_ms: 100.0 - c,
            comm_err_pct: (8.0, 20.0),
        };
        let a = Intervals::of(100.0, 10.0, 1e4, &[share(90.0, 5.0)], String::new());
        // 0.9 x 5% + 0.1 x 8% at the median.
        assert!((a.median.rel - 0.053).abs() < 1e-12);
        assert!(a.p90.rel > a.median.rel);
        for i in [a.median, a.p90] {
            assert!(i.iteration_ms[0] < 100.0 && 100.0 < i.iteration_ms[1]);
            assert!(i.tokens_per_s[0] < 1e4 && 1e4 < i.tokens_per_s[1]);
        }
        // The least sure GPU sets the interval.
        let b = Intervals::of(
            100.0,
            10.0,
            1e4,
            &[share(90.0, 5.0), share(50.0, 30.0)],
            String::new(),
        );
        assert!(b.median.rel > a.median.rel);
        // Never a negative time.
        let c = Intervals::of(100.0, 10.0, 1e4, &[share(100.0, 500.0)], String::new());
        assert!(c.p90.iteration_ms[0] > 0.0);
    }
}
