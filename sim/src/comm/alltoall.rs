//! The all-to-all as NCCL runs it: `ncclAlltoAll` (and PyTorch's
//! `all_to_all_single`) is one send and one receive per peer, grouped
//! (`src/enqueue.cc`, `p2pTaskAppend`; REAL-SYSTEMS-3 §1.7): no ring, no
//! reduction, every byte crosses the direct path once.
//!
//! Each of the `p` ranks sends `S / p` of its buffer `S` to every peer
//! (keeping its own chunk), so `(p - 1) / p S` leaves each GPU: nccl-tests'
//! `alltoall_perf` reports `algbw = S / t` and `busbw = algbw (p - 1) / p`
//! (`doc/PERFORMANCE.md`). With uneven buffers every peer waits for the
//! largest, so the exchange is paced by it (`CollectiveKind::buffer_bytes`).
//!
//! * **Inside a node** the chunks to the `g - 1` peers on the same node go
//!   at once over each pair's link: over an NVSwitch every pair is on
//!   NVLink, the GPU's NVLink bandwidth shared by its concurrent peers
//!   (`(g - 1) S / p` over `nvlink_gbps`); on bridged cards the partner over
//!   the bridge and the rest over PCIe, concurrently; without NVLink over
//!   each GPU's PCIe link.
//! * **Across nodes** the `(p - g) / p S` for remote peers leaves through
//!   the GPU's rail NIC (NIC `local x nics / gpus`): a NIC carries what all
//!   its rail's GPUs send, and one GPU reaches one NIC ("Alltoall cannot
//!   aggregate the bandwidth of multiple NICs", `NVIDIA/nccl-tests` #267).
//!   The bytes also cross the GPU's PCIe link to the NIC, a load for link
//!   sharing; GPUDirect reads run at the NIC's rate, as in the ring's model.
//!
//! The intra-node and inter-node pieces move concurrently, so the exchange
//! takes the slowest link's busy time (the max over NVLink, PCIe peer links
//! and NICs), plus a latency per peer: each send / receive pair pays its
//! link class's per-message latency (`nvlink_latency_us`,
//! `pcie_latency_us`, the slower end's `net_latency_us`: the link catalog,
//! `profiles/links.toml`), summed over the peers, the slowest rank's sum.
//! The sum is an upper bound for small messages: NCCL spreads the peers
//! over its p2p channels, several in flight at once.

use super::collective::{CollectiveKind, LinkKind, LinkRef};
use super::loads::merge_loads;
use super::topology::{CollectiveRank, CommTopology};
use std::collections::BTreeMap;

/// An all-to-all's time alone and the directed links it keeps busy.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct AllToAll {
    /// Time, ms.
    pub(super) time_ms: f64,
    /// Busy time of every directed link it uses, ms (each at most `time_ms`).
    pub(super) loads: Vec<(LinkRef, f64)>,
}

/// ms to move `bytes` at `gbps`.
fn ms(bytes: f64, gbps: f64) -> f64 {
    bytes / (gbps * 1e9) * 1e3
}

/// Both directions of link `kind` at `index` on `node`, busy `t` ms (none
/// when idle): an all-to-all receives what it sends, peer for peer.
fn both_ways(out: &mut Vec<(LinkRef, f64)>, node: usize, index: usize, kind: LinkKind, t: f64) {
    if t > 0.0 {
        for tx in [true, false] {
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
}

impl CommTopology {
    /// The all-to-all over `ranks` (see the module docs): its time and
    /// link loads; nothing for fewer than two ranks.
    pub(super) fn all_to_all(&self, ranks: &[CollectiveRank]) -> AllToAll {
        let p = ranks.len();
        if p < 2 {
            return AllToAll::default();
        }
        let chunk = CollectiveKind::AllToAll.buffer_bytes(ranks) / p as f64;
        let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for r in ranks {
            members.entry(r.node).or_default().push(r.local);
        }
        let mut loads = Vec::with_capacity(4 * p);
        let mut nic_bytes: BTreeMap<(usize, usize), f64> = BTreeMap::new();
        // The slowest link's busy time, ms, and the slowest rank's
        // latencies, µs.
        let (mut bound_ms, mut latency_us) = (0.0f64, 0.0f64);
        for (&node, locals) in &members {
            let n = self.node(node);
            let remote = (p - locals.len()) as f64 * chunk;
            let net_us: f64 = members
                .iter()
                .filter(|(&k, _)| k != node)
                .map(|(&k, m)| m.len() as f64 * n.net_latency_us.max(self.node(k).net_latency_us))
                .sum();
            for &a in locals {
                let (mut nvlink, mut pcie, mut intra_us) = (0.0f64, 0.0f64, 0.0f64);
                for &b in locals.iter().filter(|&&b| b != a) {
                    let (_, lat, on_nvlink) = n.pair(a, b);
                    if on_nvlink {
                        nvlink += chunk;
                    } else {
                        pcie += chunk;
                    }
                    intra_us += lat;
                }
                latency_us = latency_us.max(intra_us + net_us);
                *nic_bytes.entry((node, n.rail(a))).or_default() += remote;
                let nvlink_ms = n.nvlink_gbps.map_or(0.0, |bw| ms(nvlink, bw));
                let pcie_ms = ms(pcie, n.pcie_gbps);
                bound_ms = bound_ms.max(nvlink_ms).max(pcie_ms);
                both_ways(&mut loads, node, a, LinkKind::Nvlink, nvlink_ms);
                let pcie_all = ms(pcie + remote, n.pcie_gbps);
                both_ways(&mut loads, node, a, LinkKind::Pcie, pcie_all);
            }
        }
        for (&(node, rail), &bytes) in &nic_bytes {
            let t = ms(bytes, self.node(node).nic_gbps);
            bound_ms = bound_ms.max(t);
            both_ways(&mut loads, node, rail, LinkKind::Nic, t);
        }
        let time_ms = bound_ms + latency_us * 1e-3;
        let loads = merge_loads(loads)
            .into_iter()
            .map(|(l, b)| (l, b.min(time_ms)))
            .collect();
        AllToAll { time_ms, loads }
    }
}
