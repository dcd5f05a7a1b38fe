//! Link loads: the directed links a ring schedule keeps busy and for how
//! long (bytes over the link / the link's bandwidth), summed per link.

use super::collective::{CollectiveKind, LinkKind, LinkRef};
use super::ring::{Hop, NodeGroup};
use super::topology::{CollectiveRank, CommTopology};
use std::collections::BTreeMap;

impl CommTopology {
    /// Busy time (ms) of every link a ring's hops use, `hop_bytes` over each hop.
    pub(super) fn hop_loads(
        &self,
        hops: &[Hop],
        hop_bytes: f64,
        groups: &BTreeMap<usize, NodeGroup>,
        out: &mut Vec<(LinkRef, f64)>,
    ) {
        let ms = |bytes: f64, bw: f64| bytes / (bw * 1e9) * 1e3;
        for hop in hops {
            match *hop {
                Hop::Intra {
                    node,
                    a,
                    b,
                    nvlink,
                    bw,
                } => {
                    let kind = if nvlink {
                        LinkKind::Nvlink
                    } else {
                        LinkKind::Pcie
                    };
                    let t = ms(hop_bytes, bw);
                    for (index, tx) in [(a, true), (b, false)] {
                        out.push((
                            LinkRef {
                                node,
                                index,
                                kind,
                                tx,
                            },
                            t,
                        ));
                    }
                }
                Hop::Inter { from, to } => {
                    for (node, tx) in [(from, true), (to, false)] {
                        let n = self.node(node);
                        let rails: &[(usize, usize)] =
                            groups.get(&node).map_or(&[], |g| &g.rails[..]);
                        let share = hop_bytes / rails.len().max(1) as f64;
                        for &(rail, owner) in rails {
                            out.push((
                                LinkRef {
                                    node,
                                    index: rail,
                                    kind: LinkKind::Nic,
                                    tx,
                                },
                                ms(share, n.nic_gbps),
                            ));
                            out.push((
                                LinkRef {
                                    node,
                                    index: owner,
                                    kind: LinkKind::Pcie,
                                    tx,
                                },
                                ms(share, n.pcie_gbps),
                            ));
                        }
                    }
                }
            }
        }
    }

    /// Link busy times of the ring schedule.
    pub(super) fn ring_loads(
        &self,
        kind: CollectiveKind,
        ranks: &[CollectiveRank],
    ) -> Vec<(LinkRef, f64)> {
        let p = ranks.len();
        if p < 2 {
            return Vec::new();
        }
        let groups = self.groups(ranks);
        let ring = self.ring(ranks, &groups);
        let piece = kind.buffer_bytes(ranks) / p as f64;
        let steps = match kind {
            CollectiveKind::AllReduce => 2 * (p - 1),
            CollectiveKind::AllGather | CollectiveKind::ReduceScatter => p - 1,
            // No ring: its send / receive pairs' links.
            CollectiveKind::AllToAll => return self.all_to_all(ranks).loads,
        };
        let mut out = Vec::with_capacity(2 * p);
        self.hop_loads(&ring.hops, steps as f64 * piece, &groups, &mut out);
        merge_loads(out)
    }
}

/// Sums busy times per link (sorted, deterministic).
pub(super) fn merge_loads(mut loads: Vec<(LinkRef, f64)>) -> Vec<(LinkRef, f64)> {
    loads.sort_by_key(|a| a.0);
    let mut out: Vec<(LinkRef, f64)> = Vec::with_capacity(loads.len());
    for (l, t) in loads {
        match out.last_mut() {
            Some(last) if last.0 == l => last.1 += t,
            _ => out.push((l, t)),
        }
    }
    out
}
