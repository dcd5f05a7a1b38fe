//! The analytic NCCL-style model: ring, tree and hierarchical times of a
//! collective, point-to-point transfers.

use super::collective::{CollectiveKind, CommModel, LinkRef};
use super::loads::merge_loads;
use super::topology::{CollectiveRank, CommAlgo, CommTopology};

/// NCCL's bandwidth derating of the tree algorithm against the ring
/// (`src/graph/tuning.cc`: tree bus bandwidth = 0.92 x the ring's when the
/// tree is not limited per channel).
pub const TREE_BW_FACTOR: f64 = 0.92;

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

/// The analytic NCCL-style model described in the module docs.
#[derive(Debug, Clone, PartialEq)]
pub struct RingModel {
    /// The network.
    pub topo: CommTopology,
}

impl RingModel {
    /// A model over `topo` (call [`CommTopology::validate`] first on user input).
    pub fn new(topo: CommTopology) -> RingModel {
        RingModel { topo }
    }

    /// Ring time of `kind` in ms (all-reduce: reduce-scatter + all-gather
    /// of `S / p` pieces).
    pub fn ring_time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        let p = ranks.len();
        if p < 2 {
            return 0.0;
        }
        let groups = self.topo.groups(ranks);
        let ring = self.topo.ring(ranks, &groups);
        let buffer = kind.buffer_bytes(ranks);
        match kind {
            CollectiveKind::AllReduce => {
                2.0 * ring_ms(p, buffer / p as f64, ring.bw_gbps, ring.latency_us)
            }
            _ => ring_ms(p, buffer / p as f64, ring.bw_gbps, ring.latency_us),
        }
    }

    /// Tree all-reduce time in ms (groups spanning nodes; the ring's time
    /// on one node).
    pub fn tree_time_ms(&self, ranks: &[CollectiveRank]) -> f64 {
        let p = ranks.len();
        let groups = self.topo.groups(ranks);
        if groups.len() < 2 {
            return self.ring_time_ms(CollectiveKind::AllReduce, ranks);
        }
        let ring = self.topo.ring(ranks, &groups);
        let buffer = CollectiveKind::AllReduce.buffer_bytes(ranks);
        let bw_ms = CollectiveKind::AllReduce.busbw_factor(p) * buffer
            / (TREE_BW_FACTOR * ring.bw_gbps * 1e9)
            * 1e3;
        let depth = (groups.len() as f64).log2().ceil();
        let net_lat = groups
            .keys()
            .map(|&n| self.topo.node(n).net_latency_us)
            .fold(0.0, f64::max);
        let mut chain_us = 0.0f64;
        for (&n, g) in &groups {
            let node = self.topo.node(n);
            let lat = if node.nvlink_gbps.is_some() && !node.bridged {
                node.nvlink_latency_us
            } else {
                node.pcie_latency_us
            };
            chain_us = chain_us.max((g.ranks as f64 - 1.0) * lat);
        }
        bw_ms + 2.0 * (depth * net_lat + chain_us) * 1e-3
    }

    /// Hierarchical schedule in ms: intra phase + inter-node ring + intra
    /// phase (see module docs). Equals the ring for a single node.
    pub fn hierarchical_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        let (t, _) = self.hierarchical(kind, ranks, false);
        t
    }

    /// Hierarchical time and (when `with_loads`) link busy times.
    fn hierarchical(
        &self,
        kind: CollectiveKind,
        ranks: &[CollectiveRank],
        with_loads: bool,
    ) -> (f64, Vec<(LinkRef, f64)>) {
        let groups = self.topo.groups(ranks);
        if groups.len() < 2 {
            let t = self.ring_time_ms(kind, ranks);
            let loads = if with_loads {
                self.topo.ring_loads(kind, ranks)
            } else {
                Vec::new()
            };
            return (t, loads);
        }
        let even: Vec<CollectiveRank>;
        let (ranks, factor) = match kind {
            CollectiveKind::AllReduce => {
                let p = ranks.len() as f64;
                let buffer = kind.buffer_bytes(ranks);
                even = ranks
                    .iter()
                    .map(|r| CollectiveRank {
                        piece_bytes: buffer / p,
                        ..*r
                    })
                    .collect();
                (&even[..], 2.0)
            }
            _ => (ranks, 1.0),
        };
        let groups = self.topo.groups(ranks);
        let total: f64 = groups.values().map(|g| g.sum_bytes).sum();
        let mut phase1 = 0.0f64;
        let mut phase3 = 0.0f64;
        let mut max_node_bytes = 0.0f64;
        let mut loads = Vec::new();
        for (&node, g) in &groups {
            let members: Vec<CollectiveRank> =
                ranks.iter().copied().filter(|r| r.node == node).collect();
            let sub = self.topo.groups(&members);
            let ring = self.topo.ring(&members, &sub);
            let remote = (total - g.sum_bytes).max(0.0);
            let t1 = ring_ms(g.ranks, g.max_piece_bytes, ring.bw_gbps, ring.latency_us);
            let t3 = ring_ms(
                g.ranks,
                remote / g.ranks as f64,
                ring.bw_gbps,
                ring.latency_us,
            );
            phase1 = phase1.max(t1);
            phase3 = phase3.max(t3);
            max_node_bytes = max_node_bytes.max(g.sum_bytes);
            if with_loads && g.ranks >= 2 {
                let hop_bytes =
                    (g.ranks - 1) as f64 * (g.max_piece_bytes + remote / g.ranks as f64) * factor;
                self.topo.hop_loads(&ring.hops, hop_bytes, &sub, &mut loads);
            }
        }
        let node_ring: Vec<CollectiveRank> = groups
            .iter()
            .map(|(&node, g)| CollectiveRank {
                node,
                local: g.rails.first().map_or(0, |r| r.1),
                piece_bytes: g.sum_bytes,
            })
            .collect();
        let ring = self.topo.ring(&node_ring, &groups);
        let phase2 = ring_ms(groups.len(), max_node_bytes, ring.bw_gbps, ring.latency_us);
        if with_loads {
            let hop_bytes = (groups.len() - 1) as f64 * max_node_bytes * factor;
            self.topo
                .hop_loads(&ring.hops, hop_bytes, &groups, &mut loads);
        }
        (factor * (phase1 + phase2 + phase3), merge_loads(loads))
    }

    /// Whether `kind` over `ranks` runs as a tree under this model's algorithm.
    fn uses_tree(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> bool {
        if kind != CollectiveKind::AllReduce {
            return false;
        }
        match self.topo.algo {
            CommAlgo::Tree => true,
            CommAlgo::Auto => {
                let first = ranks.first().map(|r| r.node);
                ranks.iter().any(|r| Some(r.node) != first)
                    && self.tree_time_ms(ranks) < self.ring_time_ms(kind, ranks)
            }
            _ => false,
        }
    }
}

impl CommModel for RingModel {
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64 {
        if ranks.len() < 2 {
            return 0.0;
        }
        match self.topo.algo {
            CommAlgo::Hierarchical => self.hierarchical_ms(kind, ranks),
            _ if self.uses_tree(kind, ranks) => self.tree_time_ms(ranks),
            _ => self.ring_time_ms(kind, ranks),
        }
    }

    fn loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)> {
        if ranks.len() < 2 {
            return Vec::new();
        }
        let (t, loads) = match self.topo.algo {
            CommAlgo::Hierarchical => self.hierarchical(kind, ranks, true),
            _ => (self.time_ms(kind, ranks), self.topo.ring_loads(kind, ranks)),
        };
        // The tree moves the ring's volume at a derated pace: same links,
        // busy at most the whole collective.
        loads.into_iter().map(|(l, b)| (l, b.min(t))).collect()
    }

    fn p2p(
        &self,
        from: &CollectiveRank,
        to: &CollectiveRank,
        bytes: f64,
    ) -> (f64, Vec<(LinkRef, f64)>) {
        if from.node == to.node && from.local == to.local {
            return (0.0, Vec::new());
        }
        let pair = [*from, *to];
        let groups = self.topo.groups(&pair);
        let ring = self.topo.ring(&pair, &groups);
        // The first hop is from -> to; its bandwidth is the pair's link
        // (the ring's bottleneck over both directions, symmetric links).
        let hop = &ring.hops[..1];
        let t = ring_ms(2, bytes, ring.bw_gbps, ring.latency_us);
        let mut loads = Vec::with_capacity(4);
        self.topo
            .hop_loads(hop, bytes.max(0.0), &groups, &mut loads);
        (t, merge_loads(loads))
    }

    fn describe(&self) -> String {
        let t = &self.topo;
        let mut nodes: Vec<String> = Vec::new();
        for n in &t.nodes {
            let intra = match n.nvlink_gbps {
                Some(b) if n.bridged => format!("bridge {b:.1}/pcie {:.1}", n.pcie_gbps),
                Some(b) => format!("nvlink {b:.1}"),
                None => format!("pcie {:.1}", n.pcie_gbps),
            };
            let s = format!("{intra}, {}x{:.2} net", n.nics, n.nic_gbps);
            if nodes.last() != Some(&s) {
                nodes.push(s);
            }
        }
        format!(
            "analytic NCCL model (algorithm {}): GB/s per node [{}]",
            t.algo.name(),
            nodes.join("; ")
        )
    }
}
