//! The collectives, the links they keep busy, and the trait every
//! communication cost model implements.

use super::topology::CollectiveRank;
use serde::{Deserialize, Serialize};

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
    /// Every rank sends the `q`-th of `p` equal chunks of its buffer to
    /// rank `q` (NCCL's `ncclAlltoAll`, PyTorch's `all_to_all_single`):
    /// grouped send / receive pairs to every peer, no ring (expert and
    /// context parallelism).
    AllToAll,
}

impl CollectiveKind {
    /// Every kind.
    pub const ALL: [CollectiveKind; 4] = [
        CollectiveKind::AllGather,
        CollectiveKind::ReduceScatter,
        CollectiveKind::AllReduce,
        CollectiveKind::AllToAll,
    ];

    /// The name profiles and reports use (`all_gather`, `reduce_scatter`,
    /// `all_reduce`, `all_to_all`).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::ReduceScatter => "reduce_scatter",
            CollectiveKind::AllReduce => "all_reduce",
            CollectiveKind::AllToAll => "all_to_all",
        }
    }

    /// Parses a profile's kind name ([`CollectiveKind::name`]).
    pub fn parse(s: &str) -> Option<CollectiveKind> {
        CollectiveKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The names [`CollectiveKind::parse`] reads, for errors
    /// (`all_gather, reduce_scatter, all_reduce or all_to_all`), with `-`
    /// for `_` where `dashed` (flags: `all-gather`).
    pub fn names(dashed: bool) -> String {
        let names: Vec<String> = CollectiveKind::ALL
            .iter()
            .map(|k| {
                let n = k.name();
                if dashed {
                    n.replace('_', "-")
                } else {
                    n.to_string()
                }
            })
            .collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.concat(),
        }
    }

    /// nccl-tests' bus-bandwidth factor for `p` ranks
    /// (`doc/PERFORMANCE.md`; `busbw = algbw x factor`): `(p - 1) / p`
    /// for all-gather, reduce-scatter and all-to-all (each rank keeps
    /// `1 / p` of its buffer), `2 (p - 1) / p` for all-reduce.
    pub fn busbw_factor(self, p: usize) -> f64 {
        if p == 0 {
            return 0.0;
        }
        let f = (p as f64 - 1.0) / p as f64;
        match self {
            CollectiveKind::AllReduce => 2.0 * f,
            CollectiveKind::AllGather
            | CollectiveKind::ReduceScatter
            | CollectiveKind::AllToAll => f,
        }
    }

    /// Whether a rank's piece is the whole buffer nccl-tests names (an
    /// all-reduce's buffer, an all-to-all's send buffer) rather than its
    /// `1 / p` share (all-gather, reduce-scatter).
    fn piece_is_buffer(self) -> bool {
        match self {
            CollectiveKind::AllReduce | CollectiveKind::AllToAll => true,
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter => false,
        }
    }

    /// The buffer a collective over `ranks` moves, the size nccl-tests and
    /// NCCL call `nBytes`: the gathered size (sum of pieces at the pace of
    /// the largest, `p x max piece`) for all-gather and reduce-scatter, the
    /// buffer for an all-reduce, each rank's send buffer for an all-to-all
    /// (the largest: every peer waits for its chunk).
    pub fn buffer_bytes(self, ranks: &[CollectiveRank]) -> f64 {
        let max_piece = ranks
            .iter()
            .map(|r| r.piece_bytes.max(0.0))
            .fold(0.0, f64::max);
        if self.piece_is_buffer() {
            max_piece
        } else {
            max_piece * ranks.len() as f64
        }
    }

    /// Each rank's piece (bytes, [`CollectiveRank::piece_bytes`]) of an even
    /// collective over `p` ranks whose buffer is `buffer_bytes` (the
    /// inverse of [`CollectiveKind::buffer_bytes`]).
    pub fn piece_bytes(self, buffer_bytes: f64, p: usize) -> f64 {
        if self.piece_is_buffer() {
            buffer_bytes
        } else {
            buffer_bytes / p.max(1) as f64
        }
    }
}

/// A directed link a collective or a copy keeps busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkRef {
    /// Node of the link.
    pub node: usize,
    /// GPU position on the node (NVLink, PCIe) or NIC index (network).
    pub index: usize,
    /// Which link.
    pub kind: LinkKind,
    /// Sending (true) or receiving direction.
    pub tx: bool,
}

/// Kind of a [`LinkRef`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkKind {
    /// A GPU's NVLink ports.
    Nvlink,
    /// A GPU's PCIe link (peer traffic, host copies, its rail's NIC traffic).
    Pcie,
    /// A NIC.
    Nic,
}

/// Where a collective time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommSource {
    /// Interpolated between measured points.
    Measured,
    /// Outside the measured byte range: analytic model scaled to the nearest point.
    Extrapolated,
    /// A curve measured on another number of ranks, rescaled to equal bus bandwidth.
    Rescaled,
    /// No measurement for this kind and group size: analytic model.
    Analytic,
}

impl CommSource {
    /// How reports name it.
    pub fn name(self) -> &'static str {
        match self {
            CommSource::Measured => "measured",
            CommSource::Extrapolated => "extrapolated from measurements",
            CommSource::Rescaled => "rescaled from another group size",
            CommSource::Analytic => "analytic (no measurement for this group)",
        }
    }
}

/// Where one collective's time came from, and its group's shape (what a
/// report's `sources:` names per group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct GroupSource {
    /// Measured, extrapolated, rescaled or analytic.
    pub source: CommSource,
    /// Ranks in the group.
    pub ranks: u32,
    /// Nodes the group spans.
    pub nodes: u32,
}

/// A communication cost model: time of one collective over given ranks.
pub trait CommModel: Send + Sync + std::fmt::Debug {
    /// Time in ms of collective `kind` over `ranks` (one entry per rank, in
    /// ring order). Zero for fewer than two ranks.
    fn time_ms(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> f64;
    /// The links the collective keeps busy and for how long each (ms) when
    /// it runs alone; every busy time is at most [`CommModel::time_ms`].
    fn loads(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> Vec<(LinkRef, f64)>;
    /// A point-to-point transfer of `bytes` from `from` to `to` (a pipeline
    /// stage handing activations or gradients to its neighbour, NCCL
    /// send/recv): its time in ms (one hop's latency plus the bytes over
    /// the hop's bandwidth, as one step of a ring between the two) and the
    /// directed links it keeps busy (sender's out, receiver's in, no
    /// reverse traffic). Zero on the same GPU.
    fn p2p(
        &self,
        from: &CollectiveRank,
        to: &CollectiveRank,
        bytes: f64,
    ) -> (f64, Vec<(LinkRef, f64)>);
    /// One line naming the model and its parameters (for report provenance).
    fn describe(&self) -> String;
    /// The algorithm and protocol the model runs `kind` over `ranks` with
    /// (`ring/LL128`, `nvls/Simple`, `measured`), for tables.
    fn algorithm(&self, kind: CollectiveKind, ranks: &[CollectiveRank]) -> String;
    /// How far its times are expected to be off: (median, 90th
    /// percentile) absolute error, % (0 for a model that states none).
    fn error_pct(&self) -> (f64, f64) {
        (0.0, 0.0)
    }
    /// Whether the model answers from measurements (a measured table):
    /// only then do [`CommModel::source`] and [`CommModel::measured_groups`] say anything.
    fn is_measured(&self) -> bool {
        false
    }
    /// Where the time of `kind` over `ranks` comes from, for a model with
    /// measurements (`None`: purely analytic).
    fn source(&self, _kind: CollectiveKind, _ranks: &[CollectiveRank]) -> Option<CommSource> {
        None
    }
    /// The groups it holds measurements for (`all_gather over 8 ranks on
    /// 1 node`), for a warning when none serves a plan.
    fn measured_groups(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The analytic NCCL model's expected error against nccl-tests, (median,
/// p90) %: one-node rings land within ~6% of published nccl-tests
/// figures, multi-node groups and small messages (channel counts and
/// protocol crossovers the model does not search) spread wider (an
/// estimate, not cross-validated: no nccl-tests data ships with the tool).
pub const ANALYTIC_COMM_ERROR_PCT: (f64, f64) = (8.0, 20.0);

/// A measured collective table's expected error, (median, p90) %:
/// nccl-tests repeat within a few percent; sizes between measured points
/// are interpolated (an estimate).
pub const MEASURED_COMM_ERROR_PCT: (f64, f64) = (3.0, 8.0);
