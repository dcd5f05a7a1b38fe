//! Measured tables: collective times interpolated between measured points,
//! rescaled across group sizes, the analytic model outside them.

use super::analytic::RingModel;
use super::collective::{CollectiveKind, CommModel, CommSource, LinkRef};
use super::topology::CollectiveRank;
use crate::error::SpecError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One measured collective time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPoint {
    /// Which collective.
    pub kind: CollectiveKind,
    /// Number of ranks in the group.
    pub group_size: usize,
    /// Nodes the measured group spanned, when known (nccl-tests logs name
    /// each rank's host); `None` serves groups on any number of nodes.
    #[serde(default)]
    pub nodes: Option<usize>,
    /// Buffer in bytes ([`CollectiveKind::buffer_bytes`]: the sum of the
    /// even pieces for all-gather / reduce-scatter, the buffer for all-reduce).
    pub total_bytes: f64,
    /// Measured time, ms.
    pub time_ms: f64,
    /// Whether groups of another size on the same nodes may use this curve
    /// rescaled to equal bus bandwidth (imported nccl-tests logs).
    #[serde(default)]
    pub rescalable: bool,
}

/// A measured curve: points sorted by bytes, times non-decreasing.
#[derive(Debug, Clone)]
struct Curve {
    points: Vec<(f64, f64)>,
    rescalable: bool,
}

/// Measured-table mode: `(kind, group size, nodes, total bytes) -> ms` points.
///
/// Lookup for a group of `p` ranks on `k` nodes uses
/// [`CollectiveKind::buffer_bytes`]: the even-equivalent buffer
/// `p * max_piece` for all-gather and reduce-scatter (a ring is paced by its
/// largest piece, so uneven pieces cost what even pieces of that size
/// cost), the buffer for all-reduce. A curve of the same kind and size
/// measured on `k` nodes is preferred, then one whose node count is not
/// known. Inside the measured byte range the time is interpolated linearly
/// in bytes between the neighbouring points; outside it the analytic
/// fallback answers, scaled by `measured / analytic` at the nearest
/// measured point so the curve stays continuous. A group size nobody
/// measured uses a rescalable curve of the same kind on the same nodes (the
/// nearest size), at equal bus bandwidth: `t_p = t_q x f(p) / f(q)` with
/// `f` [`CollectiveKind::busbw_factor`]; else the analytic model. Measured
/// times are made non-decreasing in bytes at construction (running
/// maximum), so measurement noise cannot make a larger buffer cheaper.
#[derive(Debug, Clone)]
pub struct MeasuredTable {
    fallback: RingModel,
    curves: BTreeMap<(CollectiveKind, usize, Option<usize>), Curve>,
}

impl MeasuredTable {
    /// Builds a table from `points`; `origin` names their file for errors.
    /// Rejects non-finite or negative values and group sizes below 2; for
    /// duplicate byte sizes the first point listed is kept.
    pub fn new(
        origin: &str,
        fallback: RingModel,
        points: &[MeasuredPoint],
    ) -> Result<MeasuredTable, SpecError> {
        let mut curves: BTreeMap<(CollectiveKind, usize, Option<usize>), Curve> = BTreeMap::new();
        for (i, pt) in points.iter().enumerate() {
            if pt.group_size < 2 {
                return Err(SpecError::invalid(
                    origin,
                    format!("points[{i}].group_size"),
                    format!("expected at least 2 ranks, got {}", pt.group_size),
                ));
            }
            if !(pt.total_bytes.is_finite() && pt.total_bytes > 0.0) {
                return Err(SpecError::invalid(
                    origin,
                    format!("points[{i}].total_bytes"),
                    format!("expected a positive byte count, got {}", pt.total_bytes),
                ));
            }
            if !(pt.time_ms.is_finite() && pt.time_ms >= 0.0) {
                return Err(SpecError::invalid(
                    origin,
                    format!("points[{i}].time_ms"),
                    format!("expected a non-negative time in ms, got {}", pt.time_ms),
                ));
            }
            let c = curves
                .entry((pt.kind, pt.group_size, pt.nodes))
                .or_insert(Curve {
                    points: Vec::new(),
                    rescalable: pt.rescalable,
                });
            c.rescalable &= pt.rescalable;
            c.points.push((pt.total_bytes, pt.time_ms));
        }
        for curve in curves.values_mut() {
            let curve = &mut curve.points;
            // Stable sort keeps the first of equal byte sizes first.
            curve.sort_by(|a, b| a.0.total_cmp(&b.0));
            curve.dedup_by(|later, earlier| later.0 == earlier.0);
            let mut running = 0.0f64;
            for pt in curve.iter_mut() {
                running = running.max(pt.1);
                pt.1 = running;
            }
        }
        Ok(MeasuredTable { fallback, curves })
    }

    /// Number of measured curves (kind, group size, nodes).
    pub fn curves(&self) -> usize {
        self.curves.len()
    }

    /// The curve serving `kind` over `p` ranks on `nodes` nodes, and the
    /// rank count it was measured on.
    fn curve_for(&self, kind: CollectiveKind, p: usize, nodes: usize) -> Option<(&Curve, usize)> {
        let exact = self
            .curves
            .get(&(kind, p, Some(nodes)))
            .or_else(|| self.curves.get(&(kind, p, None)));
        if let Some(c) = exact.filter(|c| !c.points.is_empty()) {
            return Some((c, p));
        }
        self.curves
            .iter()
            .filter(|((k, q, n), c)| {
                *k == kind
                    && *q != p
                    && c.rescalable
                    && !c.points.is_empty()
                    && n.is_none_or(|n| n == nodes)
            })
            .min_by_key(|((_, q, _), _)| q.abs_diff(p))
            .map(|((_, q, _), c)| (c, *q))
    }

    /// Time in ms and its source for `kind` over `ranks`.
    pub fn time_with_source(
        &self,
        kind: CollectiveKind,
        ranks: &[CollectiveRank],
    ) -> (f64, CommSource) {
        let p = ranks.len();
        if p < 2 {
            return (0.0, CommSource::Measured);
        }
        let mut nodes: Vec<usize> = ranks.iter().map(|r| r.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let Some((curve, q)) = self.curve_for(kind, p, nodes.len()) else {
            return (self.fallback.time_ms(kind, ranks), CommSource::Analytic);
        };
        let rescale = kind.busbw_factor(p) / kind.busbw_factor(q);
        let curve = &curve.points;
        let bytes = kind.buffer_bytes(ranks);
        let first = curve[0];
        let last = curve[curve.len() - 1];
        let (t, source) = if bytes < first.0 || bytes > last.0 {
            let anchor = if bytes < first.0 { first } else { last };
            let analytic = self.fallback.time_ms(kind, ranks);
            let anchor_piece = kind.piece_bytes(anchor.0, p);
            let anchor_ranks: Vec<CollectiveRank> = ranks
                .iter()
                .map(|r| CollectiveRank {
                    piece_bytes: anchor_piece,
                    ..*r
                })
                .collect();
            let analytic_anchor = self.fallback.time_ms(kind, &anchor_ranks);
            let t = if analytic_anchor > 0.0 {
                anchor.1 * rescale * analytic / analytic_anchor
            } else {
                (anchor.1 * rescale).max(analytic)
            };
            (t, CommSource::Extrapolated)
        } else {
            // First point with bytes >= query (exists because bytes <= last.0).
            let hi = curve.partition_point(|pt| pt.0 < bytes);
            let (b1, t1) = curve[hi];
            if hi == 0 || b1 == bytes {
                (t1 * rescale, CommSource::Measured)
            } else {
                let (b0, t0) = curve[hi - 1];
                let w = (bytes - b0) / (b1 - b0);
                ((t0 + w * (t1 - t0)) * rescale, CommSource::Measured)
            }
        };
        if q != p && source == CommSource::Measured {
            return (t, CommSource::Rescaled);
        }
        (t, source)
    }
}

impl CommModel for MeasuredTable {
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        self.time_with_source(kind, ranks).0
    }

    fn loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)> {
        // The analytic schedule's links, busy for the measured time's share.
        let t = self.time_ms(kind, ranks);
        let analytic = self.fallback.time_ms(kind, ranks);
        let scale = if analytic > 0.0 { t / analytic } else { 0.0 };
        self.fallback
            .loads(kind, ranks)
            .into_iter()
            .map(|(l, b)| (l, (b * scale).min(t)))
            .collect()
    }

    fn p2p(
        &self,
        from: &CollectiveRank,
        to: &CollectiveRank,
        bytes: f64,
    ) -> (f64, Vec<(LinkRef, f64)>) {
        // Tables hold collectives; a send/recv is costed analytically.
        self.fallback.p2p(from, to, bytes)
    }

    fn error_pct(&self) -> (f64, f64) {
        super::collective::MEASURED_COMM_ERROR_PCT
    }

    fn algorithm(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> String {
        if self.time_ms(kind, ranks) == self.fallback.time_ms(kind, ranks) {
            self.fallback.algorithm(kind, ranks)
        } else {
            "measured".into()
        }
    }

    fn is_measured(&self) -> bool {
        true
    }

    fn source(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Option<CommSource> {
        Some(self.time_with_source(kind, ranks).1)
    }

    fn measured_groups(&self) -> Vec<String> {
        self.curves
            .keys()
            .map(|(kind, p, nodes)| match nodes {
                Some(n) => format!("{} over {p} ranks on {n} node(s)", kind.name()),
                None => format!("{} over {p} ranks", kind.name()),
            })
            .collect()
    }

    fn describe(&self) -> String {
        let points: usize = self.curves.values().map(|c| c.points.len()).sum();
        format!(
            "measured table ({} curves, {} points), fallback: {}",
            self.curves.len(),
            points,
            self.fallback.describe()
        )
    }
}
