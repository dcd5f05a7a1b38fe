//! What the model needs to know about the network: the ranks of a
//! collective, every node's links, the algorithm choice.

use super::protocol::NcclGen;
use crate::error::SpecError;
use serde::{Deserialize, Serialize};

/// One participant of a collective: its node, its position on the node and
/// its piece size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollectiveRank {
    /// Index of the node (into [`CommTopology::nodes`]).
    pub node: usize,
    /// Position among the node's GPUs (bridge pairs, NIC rails).
    pub local: usize,
    /// Bytes this rank contributes (all-gather) or receives (reduce-scatter);
    /// for an all-reduce, the whole buffer (the same on every rank); for an
    /// all-to-all, its send buffer (`1 / p` of it to each rank).
    pub piece_bytes: f64,
}

/// The links of one node the model needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeLinks {
    /// Achievable NVLink bandwidth between linked GPUs, GB/s; `None` without NVLink.
    pub nvlink_gbps: Option<f64>,
    /// True when NVLink joins pairs only (bridges: local GPUs `2k`, `2k + 1`).
    pub bridged: bool,
    /// Achievable GPU-to-GPU bandwidth over PCIe, GB/s.
    pub pcie_gbps: f64,
    /// Ring-step latency over NVLink, µs.
    pub nvlink_latency_us: f64,
    /// Ring-step latency over PCIe, µs.
    pub pcie_latency_us: f64,
    /// GPUs on the node (for NIC rails).
    pub gpus: usize,
    /// NICs of the node (at least 1).
    pub nics: usize,
    /// Achievable bandwidth of each NIC, GB/s.
    pub nic_gbps: f64,
    /// Ring-step latency over the network, µs.
    pub net_latency_us: f64,
    /// The oldest GPU generation on the node, as NCCL's tables index it.
    pub gen: NcclGen,
    /// NVLink through an NVSwitch (every pair linked; NVLS where the
    /// generation has it).
    pub nvswitch: bool,
}

impl NodeLinks {
    /// A node whose GPUs talk over PCIe at `pcie_gbps` and whose network
    /// is one NIC of `nic_gbps` (tests, simple what-ifs).
    pub fn simple(gpus: usize, pcie_gbps: f64, nic_gbps: f64) -> NodeLinks {
        NodeLinks {
            nvlink_gbps: None,
            bridged: false,
            pcie_gbps,
            nvlink_latency_us: 5.0,
            pcie_latency_us: 5.0,
            gpus,
            nics: 1,
            nic_gbps,
            net_latency_us: 20.0,
            gen: NcclGen::Volta,
            nvswitch: false,
        }
    }

    fn on_nvlink(&self, a: usize, b: usize) -> bool {
        self.nvlink_gbps.is_some() && (!self.bridged || a / 2 == b / 2)
    }

    /// Bandwidth and latency of the hop between local GPUs `a` and `b`.
    pub(super) fn pair(&self, a: usize, b: usize) -> (f64, f64, bool) {
        match self.nvlink_gbps {
            Some(bw) if self.on_nvlink(a, b) => (bw, self.nvlink_latency_us, true),
            _ => (self.pcie_gbps, self.pcie_latency_us, false),
        }
    }

    /// The NIC (rail) of local GPU `local`.
    pub(super) fn rail(&self, local: usize) -> usize {
        let g = self.gpus.max(1);
        (local.min(g - 1) * self.nics.max(1)) / g
    }
}

/// Which algorithm a collective uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommAlgo {
    /// As NCCL picks: ring for all-gather / reduce-scatter, the faster of
    /// ring and tree for all-reduce.
    #[default]
    Auto,
    /// Ring for everything.
    Ring,
    /// Tree for all-reduce across nodes (ring otherwise).
    Tree,
    /// Three-phase hierarchical schedule for groups spanning nodes.
    Hierarchical,
}

impl CommAlgo {
    /// Parses `auto`, `ring`, `tree` or `hierarchical`.
    pub fn parse(s: &str) -> Option<CommAlgo> {
        match s {
            "auto" => Some(CommAlgo::Auto),
            "ring" => Some(CommAlgo::Ring),
            "tree" => Some(CommAlgo::Tree),
            "hierarchical" => Some(CommAlgo::Hierarchical),
            _ => None,
        }
    }

    /// [`CommAlgo::parse`], or an error naming `origin` and `field` with
    /// the names it takes (`--comm-algo`, a study's `comm_algos`).
    pub fn parse_field(s: &str, origin: &str, field: &str) -> Result<CommAlgo, SpecError> {
        CommAlgo::parse(s).ok_or_else(|| {
            SpecError::invalid(
                origin,
                field,
                format!("expected auto, ring, tree or hierarchical, got `{s}`"),
            )
        })
    }

    /// The name [`CommAlgo::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            CommAlgo::Auto => "auto",
            CommAlgo::Ring => "ring",
            CommAlgo::Tree => "tree",
            CommAlgo::Hierarchical => "hierarchical",
        }
    }
}

/// The network the communication model needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CommTopology {
    /// Per node: its links.
    pub nodes: Vec<NodeLinks>,
    /// Algorithm choice.
    pub algo: CommAlgo,
}

impl CommTopology {
    /// Checks that every bandwidth is finite and positive, every latency
    /// finite and non-negative and every node has a GPU and a NIC; `origin`
    /// names the file or flag for the error.
    pub fn validate(&self, origin: &str) -> Result<(), SpecError> {
        if self.nodes.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "nodes",
                "expected at least one node, got none",
            ));
        }
        let bw_ok = |v: f64| v.is_finite() && v > 0.0;
        let lat_ok = |v: f64| v.is_finite() && v >= 0.0;
        for (i, n) in self.nodes.iter().enumerate() {
            let bws = [
                ("pcie_gbps", n.pcie_gbps),
                ("nic_gbps", n.nic_gbps),
                ("nvlink_gbps", n.nvlink_gbps.unwrap_or(1.0)),
            ];
            for (f, v) in bws {
                if !bw_ok(v) {
                    return Err(SpecError::invalid(
                        origin,
                        format!("nodes[{i}].{f}"),
                        format!("expected a positive bandwidth in GB/s, got {v}"),
                    ));
                }
            }
            let lats = [
                ("nvlink_latency_us", n.nvlink_latency_us),
                ("pcie_latency_us", n.pcie_latency_us),
                ("net_latency_us", n.net_latency_us),
            ];
            for (f, v) in lats {
                if !lat_ok(v) {
                    return Err(SpecError::invalid(
                        origin,
                        format!("nodes[{i}].{f}"),
                        format!("expected a non-negative latency in µs, got {v}"),
                    ));
                }
            }
            if n.gpus == 0 || n.nics == 0 {
                return Err(SpecError::invalid(
                    origin,
                    format!("nodes[{i}]"),
                    "expected at least one GPU and one NIC",
                ));
            }
        }
        Ok(())
    }

    /// Checks that every rank names a GPU of this topology and has a
    /// finite, non-negative piece.
    pub fn validate_ranks(&self, origin: &str, ranks: &[CollectiveRank]) -> Result<(), SpecError> {
        for (i, r) in ranks.iter().enumerate() {
            let Some(node) = self.nodes.get(r.node) else {
                return Err(SpecError::invalid(
                    origin,
                    format!("ranks[{i}].node"),
                    format!(
                        "expected a node index below {}, got {}",
                        self.nodes.len(),
                        r.node
                    ),
                ));
            };
            if r.local >= node.gpus {
                return Err(SpecError::invalid(
                    origin,
                    format!("ranks[{i}].local"),
                    format!(
                        "expected a GPU index below {} on node {}, got {}",
                        node.gpus, r.node, r.local
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

    /// The links of `node`; an index outside the list (which
    /// [`CommTopology::validate_ranks`] rejects) gets the slowest node's
    /// figures, so the model never panics.
    pub(super) fn node(&self, node: usize) -> NodeLinks {
        match self.nodes.get(node) {
            Some(n) => *n,
            None => {
                let mut slow = NodeLinks::simple(1, f64::INFINITY, f64::INFINITY);
                for n in &self.nodes {
                    slow.pcie_gbps = slow.pcie_gbps.min(n.pcie_gbps);
                    slow.nic_gbps = slow.nic_gbps.min(n.nic_gbps);
                }
                if !slow.pcie_gbps.is_finite() {
                    slow.pcie_gbps = 1.0;
                    slow.nic_gbps = 1.0;
                }
                slow
            }
        }
    }
}
