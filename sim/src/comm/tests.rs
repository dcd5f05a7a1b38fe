//! Tests of the communication model: closed forms, rings, trees, link loads, validation, measured tables.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// `nodes` nodes of `gpus` GPUs on PCIe at `intra` GB/s, one NIC of `inter`.
fn topo(nodes: usize, intra: f64, inter: f64) -> CommTopology {
    CommTopology {
        nodes: vec![NodeLinks::simple(16, intra, inter); nodes],
        algo: CommAlgo::Auto,
    }
}

/// Even pieces of `total` over ranks on `nodes` (local positions in order).
fn even(nodes: &[usize], total: f64) -> Vec<CollectiveRank> {
    let p = nodes.len() as f64;
    let mut seen = BTreeMap::new();
    nodes
        .iter()
        .map(|&node| {
            let local = seen.entry(node).or_insert(0usize);
            *local += 1;
            CollectiveRank {
                node,
                local: *local - 1,
                piece_bytes: total / p,
            }
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn busbw(kind: CollectiveKind, p: usize, bytes: f64, ms: f64) -> f64 {
    bytes / (ms * 1e-3) / 1e9 * kind.busbw_factor(p)
}

#[test]
fn single_rank_is_free() {
    let m = RingModel::new(topo(1, 10.0, 10.0));
    let r = even(&[0], 1e9);
    assert_eq!(m.time_ms(CollectiveKind::AllGather, &r), 0.0);
    assert_eq!(m.time_ms(CollectiveKind::ReduceScatter, &[]), 0.0);
    assert!(m.loads(CollectiveKind::AllGather, &r).is_empty());
}

#[test]
fn even_pieces_match_closed_form() {
    // 4 ranks on one PCIe node, 1 GB total at 10 GB/s, 5 µs steps:
    // NCCL's Simple base 8.4 µs + 3 * 5 µs + 3/4 * 100 ms = 75.0234 ms.
    let m = RingModel::new(topo(1, 10.0, 1.0));
    let t = m.time_ms(CollectiveKind::AllGather, &even(&[0, 0, 0, 0], 1e9));
    assert!(close(t, 75.0234), "{t}");
    // A small buffer runs LL: 6.6 µs + 3 steps at 1/5.7 of the hop, half
    // the bandwidth (LL128 needs NVLink).
    let small = even(&[0, 0, 0, 0], 4e3);
    let (t, proto) = m.ring_choice(CollectiveKind::AllGather, &small);
    assert_eq!(proto, Protocol::Ll);
    assert!(
        close(t, (6.6 + 3.0 * 5.0 / 5.7) * 1e-3 + 3e3 / 5e9 * 1e3),
        "{t}"
    );
}

#[test]
fn uneven_pieces_pace_at_the_largest() {
    let m = RingModel::new(topo(1, 10.0, 1.0));
    let mut r = even(&[0, 0, 0, 0], 0.0);
    for (x, b) in r.iter_mut().zip([1e8, 2e8, 5e8, 2e8]) {
        x.piece_bytes = b;
    }
    // 8.4 µs + 3 * (5 µs + 50 ms)
    assert!(close(m.time_ms(CollectiveKind::AllGather, &r), 150.0234));
}

#[test]
fn two_nodes_behind_one_nic_run_a_flat_ring() {
    // 2 nodes x 8 ranks, NVSwitch 234 GB/s, one NIC of 23 GB/s: NCCL's
    // ring crosses the NIC every step, busbw = the NIC's bandwidth.
    let mut t = topo(2, 22.0, 23.0);
    for n in &mut t.nodes {
        n.nvlink_gbps = Some(234.0);
        n.gpus = 8;
    }
    let m = RingModel::new(t.clone());
    let nodes: Vec<usize> = (0..16).map(|i| i / 8).collect();
    let r = even(&nodes, 8e9);
    let ag = m.time_ms(CollectiveKind::AllGather, &r);
    // NCCL's latency: 8.4 µs + 14 NVLink steps (5 µs) + 1 network step (20 µs).
    assert!(
        close(
            ag,
            (8.4 + 14.0 * 5.0 + 20.0) * 1e-3 + 15.0 * 0.5e9 / 23e9 * 1e3
        ),
        "{ag}"
    );
    let bus = busbw(CollectiveKind::AllGather, 16, 8e9, ag);
    assert!((bus - 23.0).abs() < 0.1, "{bus}");
    // The hierarchical schedule only when asked, and then faster here.
    t.algo = CommAlgo::Hierarchical;
    let hier = RingModel::new(t.clone()).time_ms(CollectiveKind::AllGather, &r);
    assert!(hier < 0.7 * ag, "hier {hier} ring {ag}");
    // Four NICs per node: a ring with 8 GPUs per node reaches all four.
    t.algo = CommAlgo::Auto;
    for n in &mut t.nodes {
        n.nics = 4;
    }
    let four = RingModel::new(t.clone()).time_ms(CollectiveKind::AllGather, &r);
    let bus4 = busbw(CollectiveKind::AllGather, 16, 8e9, four);
    assert!((bus4 - 92.0).abs() < 0.5, "{bus4}");
    // One GPU per node reaches one NIC.
    let one = even(&[0, 1], 8e9);
    let t1 = RingModel::new(t).time_ms(CollectiveKind::AllGather, &one);
    assert!((busbw(CollectiveKind::AllGather, 2, 8e9, t1) - 23.0).abs() < 0.1);
}

#[test]
fn bridged_pairs_pace_larger_rings_at_pcie() {
    let mut t = topo(1, 20.0, 10.0);
    t.nodes[0].nvlink_gbps = Some(45.0);
    t.nodes[0].bridged = true;
    t.nodes[0].gpus = 4;
    let m = RingModel::new(t);
    let ag = CollectiveKind::AllGather;
    let two = m.time_ms(ag, &even(&[0, 0], 1e9));
    assert!((busbw(ag, 2, 1e9, two) - 45.0).abs() < 0.1, "{two}");
    let four = m.time_ms(ag, &even(&[0, 0, 0, 0], 1e9));
    assert!((busbw(ag, 4, 1e9, four) - 20.0).abs() < 0.1, "{four}");
    // Loads: the NVLink hops on NVLink ports, the crossing ones on PCIe.
    let loads = m.loads(ag, &even(&[0, 0, 0, 0], 1e9));
    assert!(loads.iter().any(|(l, _)| l.kind == LinkKind::Nvlink));
    assert!(loads.iter().any(|(l, _)| l.kind == LinkKind::Pcie));
    assert!(loads.iter().all(|&(_, b)| b <= four * (1.0 + 1e-12)));
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
fn all_reduce_ring_and_tree() {
    // 4 ranks, 1 GB buffer, 10 GB/s, 5 µs: 8.4 µs + 2 x 3 x (5 µs + 250 MB / 10 GB/s).
    let m = RingModel::new(topo(1, 10.0, 1.0));
    let r: Vec<_> = even(&[0, 0, 0, 0], 4e9);
    let t = m.time_ms(CollectiveKind::AllReduce, &r);
    assert!(close(t, 0.0084 + 2.0 * 3.0 * (0.005 + 25.0)), "{t}");
    assert_eq!(CollectiveKind::AllReduce.buffer_bytes(&r), 1e9);
    assert_eq!(CollectiveKind::AllGather.buffer_bytes(&r), 4e9);
    for k in CollectiveKind::ALL {
        assert_eq!(CollectiveKind::parse(k.name()), Some(k));
    }
    // 64 nodes of one GPU: tree for a small bucket (latency), ring for
    // a large buffer (bandwidth), as NCCL's tuner picks.
    let m = RingModel::new(topo(64, 20.0, 12.0));
    let nodes: Vec<usize> = (0..64).collect();
    let small: Vec<_> = even(&nodes, 64.0 * 1e6);
    let large: Vec<_> = even(&nodes, 64.0 * 4e9);
    let ar = CollectiveKind::AllReduce;
    assert!(m.tree_time_ms(&small) < m.ring_time_ms(ar, &small));
    assert!(close(m.time_ms(ar, &small), m.tree_time_ms(&small)));
    assert!(m.tree_time_ms(&large) > m.ring_time_ms(ar, &large));
    assert!(close(m.time_ms(ar, &large), m.ring_time_ms(ar, &large)));
    // Ring only when asked.
    let mut t = topo(64, 20.0, 12.0);
    t.algo = CommAlgo::Ring;
    assert!(close(
        RingModel::new(t).time_ms(ar, &small),
        m.ring_time_ms(ar, &small)
    ));
}

#[test]
fn loads_follow_the_ring() {
    // 2 nodes x 2 GPUs on PCIe, one NIC each.
    let m = RingModel::new(topo(2, 10.0, 5.0));
    let r = even(&[0, 0, 1, 1], 4e9);
    let t = m.time_ms(CollectiveKind::AllGather, &r);
    let loads = m.loads(CollectiveKind::AllGather, &r);
    // Every hop carries 3 pieces of 1 GB: the NIC hops at 5 GB/s are
    // the bottleneck, busy 600 ms of t.
    let nic: Vec<_> = loads
        .iter()
        .filter(|(l, _)| l.kind == LinkKind::Nic)
        .collect();
    assert_eq!(nic.len(), 4, "{loads:?}");
    for (_, b) in nic {
        assert!(close(*b, 600.0), "{b}");
    }
    assert!(t >= 600.0);
    assert!(loads.iter().all(|&(_, b)| b > 0.0 && b <= t));
}

#[test]
fn validate_names_the_field() {
    let mut t = topo(2, 10.0, 10.0);
    t.nodes[1].pcie_gbps = -1.0;
    let e = t.validate("cluster.toml").unwrap_err().to_string();
    assert!(e.contains("nodes[1].pcie_gbps"), "{e}");
    let t = topo(2, 10.0, 10.0);
    let bad = [CollectiveRank {
        node: 5,
        local: 0,
        piece_bytes: 1.0,
    }];
    assert!(t.validate_ranks("x", &bad).is_err());
    // Out-of-range nodes never panic.
    let m = RingModel::new(t);
    let r = [bad[0], even(&[0], 1.0)[0]];
    assert!(m.time_ms(CollectiveKind::AllGather, &r).is_finite());
}

fn point(group_size: usize, total_bytes: f64, time_ms: f64) -> MeasuredPoint {
    MeasuredPoint {
        kind: CollectiveKind::AllGather,
        group_size,
        nodes: None,
        total_bytes,
        time_ms,
        rescalable: false,
    }
}

#[test]
fn measured_table_interpolates_and_falls_back() {
    let fallback = RingModel::new(topo(1, 10.0, 10.0));
    // Noise: smaller time for bigger buffer gets lifted to 11.
    let pts = [point(4, 1e6, 1.0), point(4, 1e8, 11.0), point(4, 2e8, 9.0)];
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
    // Unmeasured group size (not rescalable) or kind: analytic.
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
    // Measured loads scale with the measured time, never above it.
    let (v, _) = t.time_with_source(ag, &r4);
    assert!(t.loads(ag, &r4).iter().all(|&(_, b)| b <= v));
    let bad = [MeasuredPoint {
        time_ms: f64::NAN,
        ..pts[0]
    }];
    assert!(MeasuredTable::new("t.json", fallback, &bad).is_err());
}

#[test]
fn rescalable_curves_keep_bus_bandwidth() {
    let fallback = RingModel::new(topo(1, 10.0, 10.0));
    let mut pts = [point(8, 1e8, 10.0), point(8, 1e9, 100.0)];
    for p in &mut pts {
        p.rescalable = true;
        p.nodes = Some(1);
    }
    let t = MeasuredTable::new("nccl.log", fallback, &pts).unwrap();
    let ag = CollectiveKind::AllGather;
    let (v, s) = t.time_with_source(ag, &even(&[0, 0, 0, 0], 1e9));
    assert_eq!(s, CommSource::Rescaled);
    // busbw(8 ranks) = 1 GB / 100 ms x 7/8; same busbw on 4 ranks.
    assert!(close(busbw(ag, 4, 1e9, v), busbw(ag, 8, 1e9, 100.0)), "{v}");
    // A group on two nodes does not use a one-node curve.
    let (_, s) = t.time_with_source(ag, &even(&[0, 0, 1, 1], 1e9));
    assert_eq!(s, CommSource::Analytic);
}

fn arb_ranks() -> impl Strategy<Value = (usize, Vec<CollectiveRank>)> {
    (1usize..5).prop_flat_map(|nodes| {
        let rank = (0..nodes, 0usize..16, 0.0f64..1e9).prop_map(|(node, local, piece_bytes)| {
            CollectiveRank {
                node,
                local,
                piece_bytes,
            }
        });
        (Just(nodes), prop::collection::vec(rank, 1..12))
    })
}

fn arb_node() -> impl Strategy<Value = NodeLinks> {
    (
        (
            1.0f64..60.0,
            prop::option::of(20.0f64..300.0),
            any::<bool>(),
        ),
        (0.0f64..20.0, 0.0f64..20.0, 0.0f64..100.0),
        (1usize..9, 0.5f64..50.0),
    )
        .prop_map(
            |((pcie, nvlink, bridged), (nvl, pcl, netl), (nics, nic))| NodeLinks {
                nvlink_gbps: nvlink,
                bridged,
                pcie_gbps: pcie,
                nvlink_latency_us: nvl,
                pcie_latency_us: pcl,
                gpus: 16,
                nics,
                nic_gbps: nic,
                net_latency_us: netl,
                gen: if bridged {
                    NcclGen::Ampere
                } else {
                    NcclGen::Hopper
                },
                nvswitch: nvlink.is_some() && !bridged,
            },
        )
}

fn arb_topo(nodes: usize) -> impl Strategy<Value = CommTopology> {
    (
        prop::collection::vec(arb_node(), nodes),
        prop::sample::select(vec![
            CommAlgo::Auto,
            CommAlgo::Ring,
            CommAlgo::Tree,
            CommAlgo::Hierarchical,
        ]),
    )
        .prop_map(|(nodes, algo)| CommTopology { nodes, algo })
}

fn arb_case() -> impl Strategy<Value = (CommTopology, Vec<CollectiveRank>)> {
    arb_ranks().prop_flat_map(|(nodes, ranks)| (arb_topo(nodes), Just(ranks)))
}

fn kinds() -> impl Strategy<Value = CollectiveKind> {
    prop::sample::select(CollectiveKind::ALL.to_vec())
}

proptest! {
    #[test]
    fn non_increasing_in_bandwidth((t, r) in arb_case(), kind in kinds(), node in 0usize..5, f in 1.0f64..4.0, which in 0usize..3) {
        let base = RingModel::new(t.clone()).time_ms(kind, &r);
        let mut faster = t;
        let n = node % faster.nodes.len();
        let x = &mut faster.nodes[n];
        match which {
            0 => x.pcie_gbps *= f,
            1 => x.nvlink_gbps = x.nvlink_gbps.map(|b| b * f),
            _ => x.nic_gbps *= f,
        }
        prop_assert!(RingModel::new(faster).time_ms(kind, &r) <= base * (1.0 + 1e-12));
    }

    #[test]
    fn non_decreasing_in_bytes((t, r) in arb_case(), kind in kinds(), i in 0usize..12, extra in 0.0f64..1e9) {
        let m = RingModel::new(t);
        let base = m.time_ms(kind, &r);
        let mut bigger = r.clone();
        let i = i % bigger.len();
        bigger[i].piece_bytes += extra;
        prop_assert!(m.time_ms(kind, &bigger) >= base * (1.0 - 1e-12));
    }

    #[test]
    fn loads_never_exceed_the_collective((t, r) in arb_case(), kind in kinds()) {
        let m = RingModel::new(t);
        let time = m.time_ms(kind, &r);
        for (_, b) in m.loads(kind, &r) {
            prop_assert!(b >= 0.0 && b <= time * (1.0 + 1e-12));
        }
    }

    #[test]
    fn even_pieces_closed_form(n in arb_node(), p in 1usize..16, total in 0.0f64..1e10) {
        let mut n = n;
        n.nvlink_gbps = None;
        let m = RingModel::new(CommTopology { nodes: vec![n], algo: CommAlgo::Auto });
        let r = even(&vec![0; p], total);
        let pf = p as f64;
        // The faster of Simple and LL (PCIe: no LL128), NCCL's latencies.
        let expect = if p < 2 {
            0.0
        } else {
            let simple = (8.4 + (pf - 1.0) * n.pcie_latency_us) * 1e-3
                + (pf - 1.0) / pf * total / (n.pcie_gbps * 1e9) * 1e3;
            let ll_bw = (0.5 * n.pcie_gbps).min(n.gen.ll_max_gbps(1));
            let ll = (6.6 + (pf - 1.0) * n.pcie_latency_us / 5.7) * 1e-3
                + (pf - 1.0) / pf * total / (ll_bw * 1e9) * 1e3;
            simple.min(ll)
        };
        prop_assert!(close(m.time_ms(CollectiveKind::AllGather, &r), expect));
    }
}

/// `nodes` HGX-style nodes of 8 GPUs of generation `gen` on an NVSwitch
/// (351 GB/s achievable NVLink, 4 µs hops) with 8 NICs of 46 GB/s.
fn hgx(nodes: usize, gen: NcclGen) -> CommTopology {
    let mut n = NodeLinks::simple(8, 40.0, 46.0);
    n.nvlink_gbps = Some(351.0);
    n.nvlink_latency_us = 4.0;
    n.nics = 8;
    n.net_latency_us = 8.0;
    n.gen = gen;
    n.nvswitch = true;
    CommTopology {
        nodes: vec![n; nodes],
        algo: CommAlgo::Auto,
    }
}

#[test]
fn nvls_where_nccl_runs_it() {
    let ar = CollectiveKind::AllReduce;
    let ranks =
        |nodes: usize, total: f64| even(&(0..8 * nodes).map(|i| i / 8).collect::<Vec<_>>(), total);
    // One H100 node: NVLS for a large all-reduce, ~1.4x the ring's bus
    // bandwidth (each GPU moves S instead of 2 (p - 1) / p S); never for
    // all-gather.
    let h = RingModel::new(hgx(1, NcclGen::Hopper));
    let big = ranks(1, 8.0 * 1e9);
    let (t, algo) = h.choose(ar, &big);
    assert_eq!(algo, "nvls");
    let ring = h.ring_time_ms(ar, &big);
    assert!(ring / t > 1.3 && ring / t < 1.5, "{}", ring / t);
    assert_eq!(h.choose(CollectiveKind::AllGather, &big).1, "ring");
    // A100 (no NVLS) and bridged H100 pairs (no NVSwitch): the ring.
    let a = RingModel::new(hgx(1, NcclGen::Ampere));
    assert_eq!(a.choose(ar, &big).1, "ring");
    let mut bridged = hgx(1, NcclGen::Hopper);
    bridged.nodes[0].nvswitch = false;
    bridged.nodes[0].bridged = true;
    assert_eq!(RingModel::new(bridged).choose(ar, &big).1, "ring");
    // Across nodes NVLS_TREE, whose bus bandwidth falls from two nodes to
    // four (the tree between nodes is no longer doubled).
    let bus = |nodes: usize| {
        let r = ranks(nodes, 8.0 * nodes as f64 * 1e9);
        let m = RingModel::new(hgx(nodes, NcclGen::Hopper));
        let (t, algo) = m.choose(ar, &r);
        assert_eq!(algo, "nvls_tree");
        busbw(
            ar,
            8 * nodes,
            8.0 * nodes as f64 * 1e9 / (8 * nodes) as f64,
            t,
        )
    };
    assert!(bus(2) > 1.2 * bus(4), "{} {}", bus(2), bus(4));
}

#[test]
fn protocols_by_size_and_tree_by_node_count() {
    let ag = CollectiveKind::AllGather;
    let m = RingModel::new(hgx(1, NcclGen::Ampere));
    let r = |total: f64| even(&[0; 8], total);
    // LL for kilobytes, LL128 in the megabytes (NVLink, one generation),
    // Simple for large buffers.
    assert_eq!(m.ring_choice(ag, &r(8e3)).1, Protocol::Ll);
    assert_eq!(m.ring_choice(ag, &r(16e6)).1, Protocol::Ll128);
    assert_eq!(m.ring_choice(ag, &r(8e9)).1, Protocol::Simple);
    // PCIe nodes never run LL128.
    let p = RingModel::new(topo(1, 20.0, 10.0));
    for total in [8e3, 16e6, 8e9] {
        assert_ne!(p.ring_choice(ag, &r(total)).1, Protocol::Ll128);
    }
    // Across A100 nodes: the tree for small and medium all-reduces (its
    // latency grows with log2 of the nodes, the ring's with the ranks),
    // the ring for large ones.
    let ar = CollectiveKind::AllReduce;
    let nodes: Vec<usize> = (0..32).map(|i| i / 8).collect();
    let four = RingModel::new(hgx(4, NcclGen::Ampere));
    assert_eq!(four.choose(ar, &even(&nodes, 32.0 * 1e6)).1, "tree");
    assert_eq!(four.choose(ar, &even(&nodes, 32.0 * 8e9)).1, "ring");
}

/// `p` ranks on `nodes` nodes (in node order, `p / nodes` each) with a send
/// buffer of `buffer` bytes each.
fn a2a_ranks(nodes: usize, per_node: usize, buffer: f64) -> Vec<CollectiveRank> {
    (0..nodes * per_node)
        .map(|i| CollectiveRank {
            node: i / per_node,
            local: i % per_node,
            piece_bytes: buffer,
        })
        .collect()
}

#[test]
fn all_to_all_on_one_nvswitch_node_runs_at_nvlink_bus_bandwidth() {
    // 8x H100 on an NVSwitch (351 GB/s achievable NVLink per GPU, 4 µs):
    // each GPU sends 7/8 of its 8 GB buffer, 1 GB to each of 7 peers, at
    // once over its NVLink, plus 7 per-peer latencies.
    let a2a = CollectiveKind::AllToAll;
    let m = RingModel::new(hgx(1, NcclGen::Hopper));
    let s = 8e9;
    let r = a2a_ranks(1, 8, s);
    assert_eq!(a2a.buffer_bytes(&r), s);
    let sent = 7.0 / 8.0 * s;
    let want = sent / 351e9 * 1e3 + 7.0 * 4.0e-3;
    let (t, algo) = m.choose(a2a, &r);
    assert!(close(t, want), "{t} vs {want}");
    assert_eq!(algo, "p2p");
    assert_eq!(m.algorithm(a2a, &r), "p2p");
    // nccl-tests' convention: busbw = algbw (n - 1) / n, the NVLink rate.
    let bus = busbw(a2a, 8, s, t);
    assert!((bus - 351.0).abs() < 0.5, "{bus}");
    // No algorithm setting turns it into a ring.
    for algo in [CommAlgo::Ring, CommAlgo::Tree, CommAlgo::Hierarchical] {
        let mut topo = hgx(1, NcclGen::Hopper);
        topo.algo = algo;
        assert!(close(RingModel::new(topo).time_ms(a2a, &r), want));
    }
    // Uneven buffers are paced by the largest.
    let mut uneven = r.clone();
    uneven[3].piece_bytes = 2.0 * s;
    assert!(close(
        m.time_ms(a2a, &uneven),
        m.time_ms(a2a, &a2a_ranks(1, 8, 2.0 * s))
    ));
}

#[test]
fn all_to_all_across_nodes_is_paced_by_the_rail_nics() {
    // Nodes of 8 H100 with a 46 GB/s NIC per GPU (8 µs): of each GPU's
    // buffer S, (p - 8) / p leaves the node through its own rail NIC while
    // 7 / p goes over NVLink at the same time; the NIC is the bottleneck.
    let a2a = CollectiveKind::AllToAll;
    let s = 4e9;
    for nodes in [2usize, 4] {
        let p = 8 * nodes;
        let pf = p as f64;
        let m = RingModel::new(hgx(nodes, NcclGen::Hopper));
        let r = a2a_ranks(nodes, 8, s);
        let nic_ms = (pf - 8.0) / pf * s / 46e9 * 1e3;
        let nvlink_ms = 7.0 / pf * s / 351e9 * 1e3;
        assert!(nic_ms > nvlink_ms);
        let want = nic_ms + (7.0 * 4.0 + (pf - 8.0) * 8.0) * 1e-3;
        let t = m.time_ms(a2a, &r);
        assert!(close(t, want), "{nodes} nodes: {t} vs {want}");
        // busbw = NIC x N / (N - 1) x (p - 1) / p at large buffers
        // (`NVIDIA/nccl-tests` #130: 2x the NIC on two nodes, towards 1x).
        let n = nodes as f64;
        let bus = busbw(a2a, p, s, t);
        let nic_bus = 46.0 * n / (n - 1.0) * (pf - 1.0) / pf;
        assert!(
            (bus / nic_bus - 1.0).abs() < 0.01,
            "{nodes}: {bus} vs {nic_bus}"
        );
        // The links it keeps busy: every GPU's NVLink and PCIe, every NIC,
        // both ways, never longer than the collective.
        let loads = m.loads(a2a, &r);
        assert_eq!(loads.len(), 2 * (2 * p + 8 * nodes));
        for (l, b) in &loads {
            assert!(*b > 0.0 && *b <= t, "{l:?} {b}");
            let expect = match l.kind {
                LinkKind::Nic => nic_ms,
                LinkKind::Nvlink => nvlink_ms,
                // The GPU's PCIe link to its NIC (40 GB/s), capped.
                LinkKind::Pcie => ((pf - 8.0) / pf * s / 40e9 * 1e3).min(t),
            };
            assert!(close(*b, expect), "{l:?}: {b} vs {expect}");
        }
    }
    // One NIC per node carries all eight GPUs' remote pieces.
    let mut one = hgx(2, NcclGen::Hopper);
    for n in &mut one.nodes {
        n.nics = 1;
    }
    let t = RingModel::new(one).time_ms(a2a, &a2a_ranks(2, 8, s));
    let want = 8.0 * 0.5 * s / 46e9 * 1e3 + (7.0 * 4.0 + 8.0 * 8.0) * 1e-3;
    assert!(close(t, want), "{t} vs {want}");
}

#[test]
fn all_to_all_on_bridged_and_pcie_nodes_uses_each_pairs_link() {
    let a2a = CollectiveKind::AllToAll;
    let s = 4e9;
    // Four bridged cards: the partner over the bridge (351), the two others
    // over PCIe (40 GB/s, 5 µs), concurrently: PCIe paces it.
    let mut bridged = hgx(1, NcclGen::Ampere);
    bridged.nodes[0].nvswitch = false;
    bridged.nodes[0].bridged = true;
    bridged.nodes[0].pcie_latency_us = 5.0;
    let m = RingModel::new(bridged);
    let r = a2a_ranks(1, 4, s);
    let want = 2.0 * s / 4.0 / 40e9 * 1e3 + (4.0 + 2.0 * 5.0) * 1e-3;
    assert!(close(m.time_ms(a2a, &r), want));
    let loads = m.loads(a2a, &r);
    let nvlink: Vec<f64> = loads
        .iter()
        .filter(|(l, _)| l.kind == LinkKind::Nvlink)
        .map(|x| x.1)
        .collect();
    assert_eq!(nvlink.len(), 8);
    assert!(nvlink.iter().all(|&b| close(b, s / 4.0 / 351e9 * 1e3)));
    // A PCIe node: every peer over PCIe.
    let p = RingModel::new(topo(1, 20.0, 10.0));
    let want = 3.0 * s / 4.0 / 20e9 * 1e3 + 3.0 * 5.0e-3;
    assert!(close(p.time_ms(a2a, &a2a_ranks(1, 4, s)), want));
}

#[test]
fn an_all_to_all_table_round_trips_and_rescales_at_equal_bus_bandwidth() {
    // A table measured 10% slower than the model on 2 x 8 ranks answers its
    // own points, interpolates between them, rescales to 2 x 4 ranks at
    // equal bus bandwidth and extrapolates beyond its sizes.
    let a2a = CollectiveKind::AllToAll;
    let model = RingModel::new(hgx(2, NcclGen::Hopper));
    let sizes = [1e6, 1e7, 1e8, 1e9];
    let points: Vec<MeasuredPoint> = sizes
        .iter()
        .map(|&s| MeasuredPoint {
            kind: a2a,
            group_size: 16,
            nodes: Some(2),
            total_bytes: s,
            time_ms: 1.1 * model.time_ms(a2a, &a2a_ranks(2, 8, s)),
            rescalable: true,
        })
        .collect();
    let table = MeasuredTable::new("a2a.log", model.clone(), &points).unwrap();
    for pt in &points {
        let (t, src) = table.time_with_source(a2a, &a2a_ranks(2, 8, pt.total_bytes));
        assert_eq!(src, CommSource::Measured);
        assert!(close(t, pt.time_ms));
    }
    let (mid, _) = table.time_with_source(a2a, &a2a_ranks(2, 8, 5.5e8));
    assert!(close(mid, 0.5 * (points[2].time_ms + points[3].time_ms)));
    let (t8, src) = table.time_with_source(a2a, &a2a_ranks(2, 4, 1e9));
    assert_eq!(src, CommSource::Rescaled);
    let bus16 = busbw(a2a, 16, 1e9, points[3].time_ms);
    assert!(close(busbw(a2a, 8, 1e9, t8), bus16));
    let (big, src) = table.time_with_source(a2a, &a2a_ranks(2, 8, 4e9));
    assert_eq!(src, CommSource::Extrapolated);
    let analytic = model.time_ms(a2a, &a2a_ranks(2, 8, 4e9));
    assert!(close(
        big,
        analytic * points[3].time_ms / model.time_ms(a2a, &a2a_ranks(2, 8, 1e9))
    ));
    // Its loads are the model's links, stretched to the measured time.
    let r = a2a_ranks(2, 8, 1e9);
    let (m_loads, a_loads) = (table.loads(a2a, &r), model.loads(a2a, &r));
    assert_eq!(m_loads.len(), a_loads.len());
    for ((l, b), (l2, b2)) in m_loads.iter().zip(&a_loads) {
        assert_eq!(l, l2);
        assert!(close(*b, (b2 * 1.1).min(points[3].time_ms)));
    }
}
