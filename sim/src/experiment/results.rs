//! What a run produced: its rows, per-GPU rows, timelines and
//! measurements, and the merge of shards' results into the order of one
//! unsharded run.

use super::axis::Axis;
use super::rows::{GpuRow, ResultRow, SpanRow};
use super::validation::ValidationPoint;

/// What a run produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Results {
    /// One row per workload and planner, in (case, planner) order.
    pub rows: Vec<ResultRow>,
    /// One row per GPU of each run.
    pub gpus: Vec<GpuRow>,
    /// Timelines (when the sweep records them).
    pub spans: Vec<SpanRow>,
    /// Predicted against measured (studies with `validations`).
    pub validation: Vec<ValidationPoint>,
}

impl Results {
    /// The values of sweep axis `axis` over the rows of `planners` (all
    /// when empty), in first-seen order.
    pub fn axis_values(&self, axis: Axis, planners: &[String]) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in self
            .rows
            .iter()
            .filter(|r| planners.is_empty() || planners.iter().any(|p| p == &r.planner))
        {
            let x = axis.of(r);
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v
    }

    /// Joins shards' results into the order of one unsharded run.
    pub fn merge(parts: Vec<Results>) -> Results {
        let mut r = Results::default();
        for p in parts {
            r.rows.extend(p.rows);
            r.gpus.extend(p.gpus);
            r.spans.extend(p.spans);
            r.validation.extend(p.validation);
        }
        r.rows.sort_by_key(|x| (x.case, x.planner_index));
        r.gpus.sort_by_key(|x| (x.case, x.planner_index, x.rank));
        // Spans keep their order inside a run (stable sort).
        r.spans.sort_by_key(|x| (x.case, x.planner_index));
        r.rows.dedup_by_key(|x| (x.case, x.planner_index));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_orders_rows_as_one_run() {
        let row = |case, planner_index| ResultRow {
            case,
            planner_index,
            ..ResultRow::default()
        };
        let a = Results {
            rows: vec![row(1, 0), row(1, 1), row(3, 0)],
            ..Results::default()
        };
        let b = Results {
            rows: vec![row(0, 1), row(0, 0), row(2, 0)],
            ..Results::default()
        };
        let m = Results::merge(vec![a, b]);
        let keys: Vec<(usize, usize)> = m.rows.iter().map(|r| (r.case, r.planner_index)).collect();
        assert_eq!(keys, vec![(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (3, 0)]);
    }

    #[test]
    fn axis_values_come_in_first_seen_order_over_the_planners_asked() {
        let row = |planner: &str, global_batch| ResultRow {
            planner: planner.into(),
            global_batch,
            ..ResultRow::default()
        };
        let r = Results {
            rows: vec![row("fsdp", 16), row("cephalo", 8), row("fsdp", 8)],
            ..Results::default()
        };
        assert_eq!(r.axis_values(Axis::GlobalBatch, &[]), ["16", "8"]);
        assert_eq!(
            r.axis_values(Axis::GlobalBatch, &["cephalo".to_string()]),
            ["8"]
        );
        assert_eq!(r.axis_values(Axis::Planner, &[]), ["fsdp", "cephalo"]);
    }
}
