//! Communication model for data-parallel collectives (all-gather,
//! reduce-scatter, all-reduce).
//!
//! Units: piece and buffer sizes in bytes (`f64`), bandwidths in GB/s
//! (10^9 bytes per second, per direction), latencies in microseconds, and
//! every returned time in milliseconds.
//!
//! The inputs are plain numbers ([`CollectiveRank`], [`CommTopology`]) so the
//! model does not depend on the cluster or plan types; the caller maps a
//! cluster onto a [`CommTopology`] (converting the NIC's Gbit/s to GB/s) and a
//! plan's state fractions onto per-rank pieces.
//!
//! # Ring cost with uneven pieces
//!
//! A ring all-gather over `p` ranks runs `p - 1` steps; in every step each
//! rank forwards one piece to its neighbour, and a step ends when its slowest
//! transfer ends. With uneven pieces, over the `p - 1` steps every link
//! carries every piece but its receiver's own, and the steps are pipelined
//! piece by piece, so the ring is paced by its largest piece:
//!
//! ```text
//! t_ring = (p - 1) * (latency + max_piece / bw_bottleneck)
//! ```
//!
//! With even pieces (`max_piece = total / p`) this is the textbook
//! `(p - 1) * latency + (p - 1) / p * total / bw_bottleneck`. One rank: 0.
//!
//! # Groups spanning nodes
//!
//! * **Flat ring** over all ranks (ordered by node): every step crosses one
//!   NIC per node and the intra-node links of nodes holding two or more
//!   ranks, so the bottleneck is the slowest of those, and each step pays the
//!   inter-node latency.
//! * **Hierarchical**: (1) ring all-gather inside every node over its own
//!   link (nodes in parallel, the slowest node counts); (2) ring between the
//!   nodes over the NICs where each node's piece is the sum of its ranks'
//!   pieces; (3) ring all-gather inside every node of the bytes that came
//!   from the other nodes, spread evenly over the node's ranks (the NCCL-style
//!   split where local rank `j` of every node runs its own inter-node ring).
//!
//! The model returns the minimum of the two, as a collective library picks
//! the faster algorithm: the hierarchical schedule is therefore never slower
//! than the flat ring over the bottleneck link.
//!
//! # Reduce-scatter
//!
//! A ring reduce-scatter moves exactly the volume of the all-gather with the
//! same pieces (the same steps in reverse, and the hierarchical phases in
//! reverse order), so it costs the same here. The element-wise reduction
//! (one add per received element) runs at GPU memory bandwidth, two orders of
//! magnitude above the link bandwidth, and is ignored.
//!
//! # All-reduce
//!
//! Every rank holds the whole buffer `S` ([`CollectiveRank::piece_bytes`] is
//! `S` on every rank). A ring all-reduce is a reduce-scatter followed by an
//! all-gather of the same even pieces `S / p`, so it costs twice that
//! reduce-scatter: `2 (p - 1) (latency + S / p / bw)` on a flat ring, the
//! nccl-tests bus-bandwidth convention `busbw = algbw * 2 (p - 1) / p`.
//! DDP buckets and the replica all-reduce of hybrid sharding use it.
//!
//! # Measured tables
//!
//! [`MeasuredTable`] answers from measured `(kind, group size, total bytes)
//! -> ms` points instead, interpolating linearly in bytes between the two
//! neighbouring points (exact for the `latency + bytes / bw` law), and falls
//! back to the analytic model, anchored to the nearest measured point,
//! outside the measured range.
//!
//! Invariants (property-tested): time is non-increasing in every bandwidth,
//! non-decreasing in every piece size, and the even-piece case matches the
//! closed form.

use crate::error::SpecError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One participant of a collective: the node it lives on and its piece size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveRank {
    /// Index of the node (into [`CommTopology::intra_bw_gbps`]).
    pub node: usize,
    /// Bytes this rank contributes (all-gather) or receives (reduce-scatter);
    /// for an all-reduce, the whole buffer (the same on every rank).
    pub piece_bytes: f64,
}

/// The network the communication model needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CommTopology {
    /// Per node: GPU-to-GPU bandwidth inside the node, GB/s per direction
    /// (PCIe or NVLink).
    pub intra_bw_gbps: Vec<f64>,
    /// Latency of one intra-node ring step, microseconds.
    pub intra_latency_us: f64,
    /// Per node NIC bandwidth, GB/s per direction (convert Gbit/s / 8 at the caller).
    pub inter_bw_gbps: f64,
    /// Latency of one inter-node ring step, microseconds.
    pub inter_latency_us: f64,
}

impl CommTopology {
    /// Checks that every bandwidth is finite and positive and every latency
    /// finite and non-negative; `origin` names the file or flag for the error.
    pub fn validate(&self, origin: &str) -> Result<(), SpecError> {
        let bw_ok = |v: f64| v.is_finite() && v > 0.0;
        let lat_ok = |v: f64| v.is_finite() && v >= 0.0;
        if self.intra_bw_gbps.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "intra_bw_gbps",
                "expected one bandwidth per node, got none",
            ));
        }
        for (i, &bw) in self.intra_bw_gbps.iter().enumerate() {
            if !bw_ok(bw) {
                return Err(SpecError::invalid(
                    origin,
                    format!("intra_bw_gbps[{i}]"),
                    format!("expected a positive bandwidth in GB/s, got {bw}"),
                ));
            }
        }
        if !bw_ok(self.inter_bw_gbps) {
            return Err(SpecError::invalid(
                origin,
                "inter_bw_gbps",
                format!(
                    "expected a positive bandwidth in GB/s, got {}",
                    self.inter_bw_gbps
                ),
            ));
        }
        for (field, v) in [
            ("intra_latency_us", self.intra_latency_us),
            ("inter_latency_us", self.inter_latency_us),
        ] {
            if !lat_ok(v) {
                return Err(SpecError::invalid(
                    origin,
                    field,
                    format!("expected a non-negative latency in µs, got {v}"),
                ));
            }
        }
        Ok(())
    }

    /// Checks that every rank names a node of this topology and has a finite,
    /// non-negative piece.
    pub fn validate_ranks(&self, origin: &str, ranks: &[CollectiveRank]) -> Result<(), SpecError> {
        for (i, r) in ranks.iter().enumerate() {
            if r.node >= self.intra_bw_gbps.len() {
                return Err(SpecError::invalid(
                    origin,
                    format!("ranks[{i}].node"),
                    format!(
                        "expected a node index below {}, got {}",
                        self.intra_bw_gbps.len(),
                        r.node
                    ),
                ));
            }
            if !(r.piece_bytes.is_finite() && r.piece_bytes >= 0.0) {
                return Err(SpecError::invalid(
                    origin,
                    format!("ranks[{i}].piece_bytes"),
                    format!("expected a non-negative byte count, got {}", r.piece_bytes),
                ));
            }
        }
        Ok(())
    }

    /// Intra-node bandwidth of `node` in GB/s. A node index outside the list
    /// (which [`CommTopology::validate_ranks`] rejects) falls back to the
    /// slowest listed node, or to the NIC when the list is empty, so the
    /// model never panics.
    fn intra_bw(&self, node: usize) -> f64 {
        match self.intra_bw_gbps.get(node) {
            Some(&bw) => bw,
            None => self
                .intra_bw_gbps
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
                .min(self.inter_bw_gbps),
        }
    }
}

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    /// Every rank ends with the concatenation of all pieces.
    AllGather,
    /// Every rank ends with its piece of the element-wise sum.
    ReduceScatter,
    /// Every rank ends with the whole element-wise sum.
    AllReduce,
}

impl CollectiveKind {
    /// The name profiles and reports use (`all_gather`, `reduce_scatter`, `all_reduce`).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::ReduceScatter => "reduce_scatter",
            CollectiveKind::AllReduce => "all_reduce",
        }
    }

    /// Parses a profile's kind name.
    pub fn parse(s: &str) -> Option<CollectiveKind> {
        match s {
            "all_gather" => Some(CollectiveKind::AllGather),
            "reduce_scatter" => Some(CollectiveKind::ReduceScatter),
            "all_reduce" => Some(CollectiveKind::AllReduce),
            _ => None,
        }
    }

    /// The buffer a collective over `ranks` moves, the size nccl-tests and
    /// NCCL call `nBytes`: the gathered size (sum of pieces at the pace of
    /// the largest, `p x max piece`) for all-gather and reduce-scatter, the
    /// buffer for an all-reduce.
    pub fn buffer_bytes(self, ranks: &[CollectiveRank]) -> f64 {
        let max_piece = ranks
            .iter()
            .map(|r| r.piece_bytes.max(0.0))
            .fold(0.0, f64::max);
        match self {
            CollectiveKind::AllReduce => max_piece,
            _ => max_piece * ranks.len() as f64,
        }
    }
}

/// A communication cost model: time of one collective over given ranks.
pub trait CommModel: Send + Sync + std::fmt::Debug {
    /// Time in ms of collective `kind` over `ranks` (one entry per rank, in
    /// ring order). Zero for fewer than two ranks.
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64;
    /// One line naming the model and its parameters (for report provenance).
    fn describe(&self) -> String;
}

/// Time in ms of a ring over `p` ranks with largest piece `max_piece_bytes`,
/// per-step latency `latency_us` and bottleneck bandwidth `bw_gbps`:
/// `(p - 1) * (latency + max_piece / bw)`; zero when `p < 2`.
pub fn ring_ms(p: usize, max_piece_bytes: f64, bw_gbps: f64, latency_us: f64) -> f64 {
    if p < 2 {
        return 0.0;
    }
    let step_ms = latency_us * 1e-3 + max_piece_bytes.max(0.0) / (bw_gbps * 1e9) * 1e3;
    (p - 1) as f64 * step_ms
}

/// The analytic ring / hierarchical model described in the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct RingModel {
    /// The network.
    pub topo: CommTopology,
}

/// Ranks of one node inside a collective group.
#[derive(Debug, Clone, Copy, Default)]
struct NodeGroup {
    ranks: usize,
    max_piece_bytes: f64,
    sum_bytes: f64,
}

impl RingModel {
    /// A model over `topo` (call [`CommTopology::validate`] first on user input).
    pub fn new(topo: CommTopology) -> RingModel {
        RingModel { topo }
    }

    /// Per-node summary of the group, in node order (deterministic).
    fn groups(ranks: &[CollectiveRank]) -> BTreeMap<usize, NodeGroup> {
        let mut groups: BTreeMap<usize, NodeGroup> = BTreeMap::new();
        for r in ranks {
            let g = groups.entry(r.node).or_default();
            let piece = r.piece_bytes.max(0.0);
            g.ranks += 1;
            g.max_piece_bytes = g.max_piece_bytes.max(piece);
            g.sum_bytes += piece;
        }
        groups
    }

    /// Flat ring over all ranks, in ms (see module docs).
    pub fn flat_ms(&self, ranks: &[CollectiveRank]) -> f64 {
        let p = ranks.len();
        if p < 2 {
            return 0.0;
        }
        let groups = Self::groups(ranks);
        let max_piece = ranks
            .iter()
            .map(|r| r.piece_bytes.max(0.0))
            .fold(0.0, f64::max);
        let mut bw = f64::INFINITY;
        for (&node, g) in &groups {
            if g.ranks >= 2 {
                bw = bw.min(self.topo.intra_bw(node));
            }
        }
        let latency_us = if groups.len() > 1 {
            bw = bw.min(self.topo.inter_bw_gbps);
            self.topo.inter_latency_us.max(self.topo.intra_latency_us)
        } else {
            self.topo.intra_latency_us
        };
        ring_ms(p, max_piece, bw, latency_us)
    }

    /// Hierarchical schedule in ms: intra phase + inter-node ring + intra
    /// phase (see module docs). Equals the flat ring for a single node.
    pub fn hierarchical_ms(&self, ranks: &[CollectiveRank]) -> f64 {
        let groups = Self::groups(ranks);
        if groups.len() < 2 {
            return self.flat_ms(ranks);
        }
        let total: f64 = groups.values().map(|g| g.sum_bytes).sum();
        let lat = self.topo.intra_latency_us;
        let mut phase1 = 0.0f64;
        let mut phase3 = 0.0f64;
        let mut max_node_bytes = 0.0f64;
        for (&node, g) in &groups {
            let bw = self.topo.intra_bw(node);
            phase1 = phase1.max(ring_ms(g.ranks, g.max_piece_bytes, bw, lat));
            let remote = (total - g.sum_bytes).max(0.0);
            phase3 = phase3.max(ring_ms(g.ranks, remote / g.ranks as f64, bw, lat));
            max_node_bytes = max_node_bytes.max(g.sum_bytes);
        }
        let phase2 = ring_ms(
            groups.len(),
            max_node_bytes,
            self.topo.inter_bw_gbps,
            self.topo.inter_latency_us,
        );
        phase1 + phase2 + phase3
    }
}

impl CommModel for RingModel {
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        if ranks.len() < 2 {
            return 0.0;
        }
        match kind {
            CollectiveKind::AllReduce => {
                // Reduce-scatter + all-gather of even pieces S / p.
                let p = ranks.len() as f64;
                let buffer = CollectiveKind::AllReduce.buffer_bytes(ranks);
                let pieces: Vec<CollectiveRank> = ranks
                    .iter()
                    .map(|r| CollectiveRank {
                        node: r.node,
                        piece_bytes: buffer / p,
                    })
                    .collect();
                2.0 * self.flat_ms(&pieces).min(self.hierarchical_ms(&pieces))
            }
            _ => self.flat_ms(ranks).min(self.hierarchical_ms(ranks)),
        }
    }

    fn describe(&self) -> String {
        let t = &self.topo;
        let intra: Vec<String> = t.intra_bw_gbps.iter().map(|b| format!("{b}")).collect();
        format!(
            "analytic ring (min of flat and hierarchical): intra [{}] GB/s, {} µs; inter {} GB/s, {} µs",
            intra.join(", "),
            t.intra_latency_us,
            t.inter_bw_gbps,
            t.inter_latency_us
        )
    }
}

/// One measured collective time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPoint {
    /// Which collective.
    pub kind: CollectiveKind,
    /// Number of ranks in the group.
    pub group_size: usize,
    /// Buffer in bytes ([`CollectiveKind::buffer_bytes`]: the sum of the
    /// even pieces for all-gather / reduce-scatter, the buffer for all-reduce).
    pub total_bytes: f64,
    /// Measured time, ms.
    pub time_ms: f64,
}

/// Where a collective time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommSource {
    /// Interpolated between measured points.
    Measured,
    /// Outside the measured byte range: analytic model scaled to the nearest point.
    Extrapolated,
    /// No measurement for this kind and group size: analytic model.
    Analytic,
}

/// Measured-table mode: `(kind, group size, total bytes) -> ms` points.
///
/// Lookup for a group of `p` ranks uses [`CollectiveKind::buffer_bytes`]:
/// the even-equivalent buffer `p * max_piece` for all-gather and
/// reduce-scatter (a ring is paced by its largest piece, so uneven pieces
/// cost what even pieces of that size cost), the buffer for all-reduce. Inside the measured byte range
/// the time is interpolated linearly in bytes between the neighbouring points;
/// outside it, or for a group size that was not measured, the analytic
/// fallback answers, scaled by `measured / analytic` at the nearest measured
/// point so the curve stays continuous. Measured times are made
/// non-decreasing in bytes at construction (running maximum), so measurement
/// noise cannot make a larger buffer cheaper.
#[derive(Debug, Clone)]
pub struct MeasuredTable {
    fallback: RingModel,
    /// Per (kind, group size): points sorted by bytes, times non-decreasing.
    curves: BTreeMap<(CollectiveKind, usize), Vec<(f64, f64)>>,
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
        let mut curves: BTreeMap<(CollectiveKind, usize), Vec<(f64, f64)>> = BTreeMap::new();
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
            curves
                .entry((pt.kind, pt.group_size))
                .or_default()
                .push((pt.total_bytes, pt.time_ms));
        }
        for curve in curves.values_mut() {
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

    /// Number of measured curves (kind, group size).
    pub fn curves(&self) -> usize {
        self.curves.len()
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
        let curve = match self.curves.get(&(kind, p)) {
            Some(c) if !c.is_empty() => c,
            _ => return (self.fallback.time_ms(kind, ranks), CommSource::Analytic),
        };
        let bytes = kind.buffer_bytes(ranks);
        let first = curve[0];
        let last = curve[curve.len() - 1];
        if bytes < first.0 || bytes > last.0 {
            let anchor = if bytes < first.0 { first } else { last };
            let analytic = self.fallback.time_ms(kind, ranks);
            let anchor_piece = match kind {
                CollectiveKind::AllReduce => anchor.0,
                _ => anchor.0 / p as f64,
            };
            let anchor_ranks: Vec<CollectiveRank> = ranks
                .iter()
                .map(|r| CollectiveRank {
                    node: r.node,
                    piece_bytes: anchor_piece,
                })
                .collect();
            let analytic_anchor = self.fallback.time_ms(kind, &anchor_ranks);
            let t = if analytic_anchor > 0.0 {
                anchor.1 * analytic / analytic_anchor
            } else {
                anchor.1.max(analytic)
            };
            return (t, CommSource::Extrapolated);
        }
        // First point with bytes >= query (exists because bytes <= last.0).
        let hi = curve.partition_point(|pt| pt.0 < bytes);
        let (b1, t1) = curve[hi];
        if hi == 0 || b1 == bytes {
            return (t1, CommSource::Measured);
        }
        let (b0, t0) = curve[hi - 1];
        let w = (bytes - b0) / (b1 - b0);
        (t0 + w * (t1 - t0), CommSource::Measured)
    }
}

impl CommModel for MeasuredTable {
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        self.time_with_source(kind, ranks).0
    }

    fn describe(&self) -> String {
        let points: usize = self.curves.values().map(Vec::len).sum();
        format!(
            "measured table ({} curves, {} points), fallback: {}",
            self.curves.len(),
            points,
            self.fallback.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn topo(nodes: usize, intra: f64, inter: f64) -> CommTopology {
        CommTopology {
            intra_bw_gbps: vec![intra; nodes],
            intra_latency_us: 5.0,
            inter_bw_gbps: inter,
            inter_latency_us: 20.0,
        }
    }

    fn even(nodes: &[usize], total: f64) -> Vec<CollectiveRank> {
        let p = nodes.len() as f64;
        nodes
            .iter()
            .map(|&node| CollectiveRank {
                node,
                piece_bytes: total / p,
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn single_rank_is_free() {
        let m = RingModel::new(topo(1, 10.0, 10.0));
        let r = [CollectiveRank {
            node: 0,
            piece_bytes: 1e9,
        }];
        assert_eq!(m.time_ms(CollectiveKind::AllGather, &r), 0.0);
        assert_eq!(m.time_ms(CollectiveKind::ReduceScatter, &[]), 0.0);
    }

    #[test]
    fn even_pieces_match_closed_form() {
        // 4 ranks on one PCIe node, 1 GB total at 10 GB/s, 5 µs steps:
        // 3 * 5 µs + 3/4 * 100 ms = 75.015 ms.
        let m = RingModel::new(topo(1, 10.0, 1.0));
        let t = m.time_ms(CollectiveKind::AllGather, &even(&[0, 0, 0, 0], 1e9));
        assert!(close(t, 75.015), "{t}");
    }

    #[test]
    fn uneven_pieces_pace_at_the_largest() {
        let m = RingModel::new(topo(1, 10.0, 1.0));
        let r: Vec<_> = [1e8, 2e8, 5e8, 2e8]
            .iter()
            .map(|&b| CollectiveRank {
                node: 0,
                piece_bytes: b,
            })
            .collect();
        // 3 * (5 µs + 50 ms)
        assert!(close(m.time_ms(CollectiveKind::AllGather, &r), 150.015));
    }

    #[test]
    fn hierarchical_beats_flat_over_slow_nic() {
        // 2 nodes x 8 ranks, NVLink 150 GB/s, NIC 12.5 GB/s (100 Gbit/s).
        let m = RingModel::new(topo(2, 150.0, 12.5));
        let nodes: Vec<usize> = (0..16).map(|i| i / 8).collect();
        let r = even(&nodes, 8e9);
        let flat = m.flat_ms(&r);
        let hier = m.hierarchical_ms(&r);
        assert!(hier < flat, "hier {hier} flat {flat}");
        assert!(close(m.time_ms(CollectiveKind::AllGather, &r), hier));
        // Inter phase alone: 1 step of 4 GB at 12.5 GB/s = 320 ms + 20 µs.
        assert!(hier > 320.0);
    }

    #[test]
    fn one_rank_per_node_uses_the_nic() {
        let m = RingModel::new(topo(4, 100.0, 5.0));
        let r = even(&[0, 1, 2, 3], 4e9);
        // 3 * (20 µs + 1 GB / 5 GB/s) = 600.06 ms
        assert!(close(m.time_ms(CollectiveKind::AllGather, &r), 600.06));
    }

    #[test]
    fn reduce_scatter_costs_as_all_gather() {
        let m = RingModel::new(topo(2, 50.0, 10.0));
        let r = even(&[0, 0, 1, 1, 1], 3e9);
        assert_eq!(
            m.time_ms(CollectiveKind::AllGather, &r),
            m.time_ms(CollectiveKind::ReduceScatter, &r)
        );
    }

    #[test]
    fn all_reduce_is_reduce_scatter_plus_all_gather() {
        // 4 ranks, 1 GB buffer, 10 GB/s, 5 µs: 2 x 3 x (5 µs + 250 MB / 10 GB/s).
        let m = RingModel::new(topo(1, 10.0, 1.0));
        let r: Vec<_> = (0..4)
            .map(|_| CollectiveRank {
                node: 0,
                piece_bytes: 1e9,
            })
            .collect();
        let t = m.time_ms(CollectiveKind::AllReduce, &r);
        assert!(close(t, 2.0 * 3.0 * (0.005 + 25.0)), "{t}");
        assert_eq!(CollectiveKind::AllReduce.buffer_bytes(&r), 1e9);
        assert_eq!(CollectiveKind::AllGather.buffer_bytes(&r), 4e9);
        for k in [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
        ] {
            assert_eq!(CollectiveKind::parse(k.name()), Some(k));
        }
    }

    #[test]
    fn validate_names_the_field() {
        let mut t = topo(2, 10.0, 10.0);
        t.intra_bw_gbps[1] = -1.0;
        let e = t.validate("cluster.toml").unwrap_err().to_string();
        assert!(e.contains("intra_bw_gbps[1]"), "{e}");
        let t = topo(2, 10.0, 10.0);
        let bad = [CollectiveRank {
            node: 5,
            piece_bytes: 1.0,
        }];
        assert!(t.validate_ranks("x", &bad).is_err());
        // Out-of-range nodes never panic.
        let m = RingModel::new(t);
        let r = [
            bad[0],
            CollectiveRank {
                node: 0,
                piece_bytes: 1.0,
            },
        ];
        assert!(m.time_ms(CollectiveKind::AllGather, &r).is_finite());
    }

    #[test]
    fn measured_table_interpolates_and_falls_back() {
        let fallback = RingModel::new(topo(1, 10.0, 10.0));
        let pts = [
            MeasuredPoint {
                kind: CollectiveKind::AllGather,
                group_size: 4,
                total_bytes: 1e6,
                time_ms: 1.0,
            },
            MeasuredPoint {
                kind: CollectiveKind::AllGather,
                group_size: 4,
                total_bytes: 1e8,
                time_ms: 11.0,
            },
            // Noise: smaller time for bigger buffer gets lifted to 11.
            MeasuredPoint {
                kind: CollectiveKind::AllGather,
                group_size: 4,
                total_bytes: 2e8,
                time_ms: 9.0,
            },
        ];
        let t = MeasuredTable::new("t.json", fallback.clone(), &pts).unwrap();
        let ag = CollectiveKind::AllGather;
        let (v, s) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 1e6));
        assert_eq!((v, s), (1.0, CommSource::Measured));
        let (v, _) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 50.5e6));
        assert!(close(v, 6.0), "{v}");
        let (v, _) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 1.5e8));
        assert!(close(v, 11.0), "{v}");
        // Beyond the table: anchored analytic, continuous and growing.
        let (v, s) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 4e8));
        assert_eq!(s, CommSource::Extrapolated);
        assert!(v > 11.0);
        // Unmeasured group size or kind: analytic.
        let r3 = even(&[0, 0, 0], 1e8);
        assert_eq!(
            t.time_with_source(ag, &r3),
            (fallback.time_ms(ag, &r3), CommSource::Analytic)
        );
        let r4 = even(&[0, 0, 0, 0], 1e8);
        assert_eq!(
            t.time_with_source(CollectiveKind::ReduceScatter, &r4).1,
            CommSource::Analytic
        );
        assert!(t.describe().contains("3 points"));
        let bad = [MeasuredPoint {
            time_ms: f64::NAN,
            ..pts[0]
        }];
        assert!(MeasuredTable::new("t.json", fallback, &bad).is_err());
    }

    fn arb_ranks() -> impl Strategy<Value = (usize, Vec<CollectiveRank>)> {
        (1usize..5).prop_flat_map(|nodes| {
            let rank = (0..nodes, 0.0f64..1e9)
                .prop_map(|(node, piece_bytes)| CollectiveRank { node, piece_bytes });
            (Just(nodes), prop::collection::vec(rank, 1..12))
        })
    }

    fn arb_topo(nodes: usize) -> impl Strategy<Value = CommTopology> {
        (
            prop::collection::vec(1.0f64..300.0, nodes),
            0.0f64..50.0,
            0.5f64..50.0,
            0.0f64..100.0,
        )
            .prop_map(
                |(intra_bw_gbps, intra_latency_us, inter_bw_gbps, inter_latency_us)| CommTopology {
                    intra_bw_gbps,
                    intra_latency_us,
                    inter_bw_gbps,
                    inter_latency_us,
                },
            )
    }

    fn arb_case() -> impl Strategy<Value = (CommTopology, Vec<CollectiveRank>)> {
        arb_ranks().prop_flat_map(|(nodes, ranks)| (arb_topo(nodes), Just(ranks)))
    }

    proptest! {
        #[test]
        fn non_increasing_in_bandwidth((t, r) in arb_case(), node in 0usize..5, f in 1.0f64..4.0) {
            let kind = CollectiveKind::AllGather;
            let base = RingModel::new(t.clone()).time_ms(kind, &r);
            let mut faster = t.clone();
            let n = node % faster.intra_bw_gbps.len();
            faster.intra_bw_gbps[n] *= f;
            prop_assert!(RingModel::new(faster).time_ms(kind, &r) <= base * (1.0 + 1e-12));
            let mut faster = t;
            faster.inter_bw_gbps *= f;
            prop_assert!(RingModel::new(faster).time_ms(kind, &r) <= base * (1.0 + 1e-12));
        }

        #[test]
        fn doubling_inter_bw_never_slows((t, r) in arb_case()) {
            let kind = CollectiveKind::ReduceScatter;
            let base = RingModel::new(t.clone()).time_ms(kind, &r);
            let mut fast = t;
            fast.inter_bw_gbps *= 2.0;
            prop_assert!(RingModel::new(fast).time_ms(kind, &r) <= base * (1.0 + 1e-12));
        }

        #[test]
        fn non_decreasing_in_bytes((t, r) in arb_case(), i in 0usize..12, extra in 0.0f64..1e9) {
            let m = RingModel::new(t);
            let base = m.time_ms(CollectiveKind::AllGather, &r);
            let mut bigger = r.clone();
            let i = i % bigger.len();
            bigger[i].piece_bytes += extra;
            prop_assert!(m.time_ms(CollectiveKind::AllGather, &bigger) >= base * (1.0 - 1e-12));
        }

        #[test]
        fn even_pieces_closed_form(t in arb_topo(1), p in 1usize..64, total in 0.0f64..1e10) {
            let m = RingModel::new(t.clone());
            let r = even(&vec![0; p], total);
            let pf = p as f64;
            let expect = if p < 2 {
                0.0
            } else {
                (pf - 1.0) * t.intra_latency_us * 1e-3
                    + (pf - 1.0) / pf * total / (t.intra_bw_gbps[0] * 1e9) * 1e3
            };
            prop_assert!(close(m.time_ms(CollectiveKind::AllGather, &r), expect));
        }

        #[test]
        fn never_slower_than_flat((t, r) in arb_case()) {
            let m = RingModel::new(t);
            prop_assert!(m.time_ms(CollectiveKind::AllGather, &r) <= m.flat_ms(&r));
        }
    }
}
