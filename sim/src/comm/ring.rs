//! The ring NCCL lays over a group: per-node summaries (ranks, pieces,
//! NIC rails) and the hops in the order given, with their classes, the
//! bottleneck bandwidth and the slowest step latency.

use super::topology::{CollectiveRank, CommTopology};
use std::collections::BTreeMap;

/// One hop of a ring.
#[derive(Debug, Clone, Copy)]
pub(super) enum Hop {
    /// Inside `node` from local GPU `a` to `b`.
    Intra {
        node: usize,
        a: usize,
        b: usize,
        nvlink: bool,
        bw: f64,
    },
    /// From node `from` to node `to`.
    Inter { from: usize, to: usize },
}

/// A ring's hops with its bottleneck bandwidth and slowest step latency.
#[derive(Debug, Clone)]
pub(super) struct Ring {
    /// The hops, from each rank to the next (the last back to the first).
    pub(super) hops: Vec<Hop>,
    /// Bandwidth of the slowest hop, GB/s.
    pub(super) bw_gbps: f64,
    /// Latency of the slowest step, µs.
    pub(super) latency_us: f64,
    /// Latency of the slowest hop inside a node, µs (0 without one).
    pub(super) intra_latency_us: f64,
    /// Latency of the slowest hop between nodes, µs (0 without one).
    pub(super) inter_latency_us: f64,
    /// Some hop inside a node crosses PCIe (no LL128; PCIe hop latencies).
    pub(super) pcie_hop: bool,
}

/// Per node of a group: ranks, NIC rails used (and the first rank on each).
#[derive(Debug, Clone, Default)]
pub(super) struct NodeGroup {
    /// Ranks of the group on the node.
    pub(super) ranks: usize,
    /// Largest piece of those ranks, bytes.
    pub(super) max_piece_bytes: f64,
    /// Sum of their pieces, bytes.
    pub(super) sum_bytes: f64,
    /// (rail, local GPU owning it in the group), sorted by rail.
    pub(super) rails: Vec<(usize, usize)>,
}

impl CommTopology {
    /// Per-node summary of the group, in node order (deterministic).
    pub(super) fn groups(&self, ranks: &[CollectiveRank]) -> BTreeMap<usize, NodeGroup> {
        let mut groups: BTreeMap<usize, NodeGroup> = BTreeMap::new();
        for r in ranks {
            let g = groups.entry(r.node).or_default();
            let piece = r.piece_bytes.max(0.0);
            g.ranks += 1;
            g.max_piece_bytes = g.max_piece_bytes.max(piece);
            g.sum_bytes += piece;
            let rail = self.node(r.node).rail(r.local);
            if let Err(at) = g.rails.binary_search_by_key(&rail, |x| x.0) {
                g.rails.insert(at, (rail, r.local));
            }
        }
        groups
    }

    /// Bandwidth a ring reaches through the NICs of `node` (one per rail).
    fn net_gbps(&self, node: usize, groups: &BTreeMap<usize, NodeGroup>) -> f64 {
        let n = self.node(node);
        let rails = groups.get(&node).map_or(1, |g| g.rails.len().max(1));
        rails as f64 * n.nic_gbps
    }

    /// The ring over `ranks` in the order given.
    pub(super) fn ring(
        &self,
        ranks: &[CollectiveRank],
        groups: &BTreeMap<usize, NodeGroup>,
    ) -> Ring {
        let p = ranks.len();
        let mut hops = Vec::with_capacity(p);
        let mut bw = f64::INFINITY;
        let mut latency_us = 0.0f64;
        let (mut intra_latency_us, mut inter_latency_us) = (0.0f64, 0.0f64);
        let mut pcie_hop = false;
        for i in 0..p {
            let (x, y) = (ranks[i], ranks[(i + 1) % p]);
            if x.node == y.node {
                let n = self.node(x.node);
                let (b, lat, nvlink) = n.pair(x.local, y.local);
                bw = bw.min(b);
                latency_us = latency_us.max(lat);
                intra_latency_us = intra_latency_us.max(lat);
                pcie_hop |= !nvlink;
                hops.push(Hop::Intra {
                    node: x.node,
                    a: x.local,
                    b: y.local,
                    nvlink,
                    bw: b,
                });
            } else {
                let b = self
                    .net_gbps(x.node, groups)
                    .min(self.net_gbps(y.node, groups));
                bw = bw.min(b);
                let lat = self
                    .node(x.node)
                    .net_latency_us
                    .max(self.node(y.node).net_latency_us);
                latency_us = latency_us.max(lat);
                inter_latency_us = inter_latency_us.max(lat);
                hops.push(Hop::Inter {
                    from: x.node,
                    to: y.node,
                });
            }
        }
        Ring {
            hops,
            bw_gbps: bw,
            latency_us,
            intra_latency_us,
            inter_latency_us,
            pcie_hop,
        }
    }
}
