//! Tests of the engine: ordering, collectives, deadlocks, memory events, shared links, interference.

use super::*;
use crate::units::SimTime;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn ms(v: f64) -> SimTime {
    SimTime::from_ms(v)
}

#[test]
fn empty_graph() {
    let g = Graph::new();
    let s = run(&g, &mut NullObserver).unwrap();
    assert_eq!(
        s,
        RunStats {
            makespan: SimTime::ZERO,
            ops: 0,
            events: 0
        }
    );
}

#[test]
fn a_time_past_the_clock_is_an_error_not_a_wrap() {
    let mut g = Graph::new();
    let l = g.label(Category::Forward, "huge");
    let a = g.add_op(0, Stream::Compute, SimTime(u64::MAX / 2 + 1), &[], l, &[]);
    g.add_op(0, Stream::Compute, SimTime(u64::MAX / 2 + 1), &[a], l, &[]);
    match run(&g, &mut NullObserver) {
        Err(SimError::TimeOverflow { op, name }) => {
            assert_eq!((op, name.as_str()), (1, "huge"))
        }
        other => panic!("expected an overflow error, got {other:?}"),
    }
    let mut g = Graph::new();
    g.add_op(0, Stream::Compute, SimTime::MAX, &[], l, &[]);
    assert!(matches!(
        run(&g, &mut NullObserver),
        Err(SimError::TimeOverflow { .. })
    ));
}

#[test]
fn chain_makespan_is_sum() {
    let mut g = Graph::new();
    let l = g.label(Category::Forward, "f");
    let mut prev: Vec<OpId> = vec![];
    let mut total = 0u64;
    for i in 0..50u64 {
        let stream = Stream::ALL[(i % 5) as usize];
        let d = SimTime(1000 + 37 * i);
        total += d.0;
        prev = vec![g.add_op((i % 4) as u32, stream, d, &prev, l, &[])];
    }
    assert_eq!(run(&g, &mut NullObserver).unwrap().makespan, SimTime(total));
}

#[test]
fn stream_serialises_and_streams_overlap() {
    let mut g = Graph::new();
    let l = g.label(Category::Forward, "f");
    g.add_op(0, Stream::Compute, ms(2.0), &[], l, &[]);
    g.add_op(0, Stream::Compute, ms(3.0), &[], l, &[]);
    g.add_op(0, Stream::Copy, ms(4.0), &[], l, &[]);
    let mut r = Recorder::default();
    let s = run(&g, &mut r).unwrap();
    assert_eq!(s.makespan, ms(5.0));
    assert_eq!(r.ops[2].3, ms(2.0));
}

#[test]
fn collective_waits_for_slowest_rank() {
    let mut g = Graph::new();
    let f = g.label(Category::Forward, "f");
    let ag = g.label(Category::AllGather, "ag");
    let a = g.add_op(0, Stream::Compute, ms(1.0), &[], f, &[]);
    let b = g.add_op(1, Stream::Compute, ms(7.0), &[], f, &[]);
    // Rank 1's comm stream is busy until 9 ms.
    g.add_op(2, Stream::Comm, ms(9.0), &[], ag, &[]);
    let c = g.add_collective(&[0, 1, 2], Stream::Comm, ms(2.0), &[a, b], ag, &[]);
    let mut r = Recorder::default();
    run(&g, &mut r).unwrap();
    let recs: Vec<_> = r.ops.iter().filter(|x| x.0 == c).collect();
    assert_eq!(recs.len(), 3);
    for x in recs {
        assert_eq!((x.3, x.4), (ms(9.0), ms(11.0)));
        assert_eq!(x.2, Stream::Comm);
    }
}

#[test]
fn join_builds_rank_by_rank() {
    let mut g = Graph::new();
    let ag = g.label(Category::AllGather, "ag");
    let f = g.label(Category::Forward, "f");
    let c0 = g.new_collective(ms(1.0), &[], ag, &[]);
    let c1 = g.new_collective(ms(1.0), &[], ag, &[]);
    for r in 0..2 {
        g.join(c0, r, Stream::Comm);
        g.add_op(r, Stream::Compute, ms(5.0), &[c0], f, &[]);
        g.join(c1, r, Stream::Comm);
    }
    let s = run(&g, &mut NullObserver).unwrap();
    assert_eq!(s.makespan, ms(6.0));
}

#[test]
fn mismatched_collective_order_deadlocks() {
    let mut g = Graph::new();
    let ag = g.label(Category::AllGather, "ag");
    let x = g.new_collective(ms(1.0), &[], ag, &[]);
    let y = g.new_collective(ms(1.0), &[], ag, &[]);
    g.join(x, 0, Stream::Comm);
    g.join(y, 0, Stream::Comm);
    g.join(y, 1, Stream::Comm);
    g.join(x, 1, Stream::Comm);
    match run(&g, &mut NullObserver) {
        Err(SimError::Deadlock {
            stuck: 2,
            total: 2,
            first,
        }) => {
            assert!(first.contains("busy"), "{first}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cycle_and_bad_graphs_are_errors() {
    let mut g = Graph::new();
    let l = g.label(Category::Other, "x");
    let a = g.add_op(0, Stream::Compute, ms(1.0), &[], l, &[]);
    let b = g.add_op(1, Stream::Compute, ms(1.0), &[a], l, &[]);
    g.add_dep(a, b);
    assert!(matches!(
        run(&g, &mut NullObserver),
        Err(SimError::Deadlock { stuck: 2, .. })
    ));

    let mut g = Graph::new();
    g.new_collective(ms(1.0), &[], l, &[]);
    let e = run(&g, &mut NullObserver).unwrap_err();
    assert!(e.to_string().contains("issued on no stream"), "{e}");

    let mut g = Graph::new();
    g.add_op(0, Stream::Compute, ms(1.0), &[OpId(7)], l, &[]);
    assert_eq!(
        run(&g, &mut NullObserver),
        Err(SimError::UnknownOp { op: 0, dep: 7 })
    );

    let mut g = Graph::new();
    g.add_collective(&[0, 0], Stream::Comm, ms(1.0), &[], l, &[]);
    assert!(matches!(
        run(&g, &mut NullObserver),
        Err(SimError::DoubleIssue { .. })
    ));
}

#[test]
fn ties_are_fifo() {
    // Three independent equal ops on different ranks start together and
    // end together; dependents start in the order their parents started.
    let mut g = Graph::new();
    let l = g.label(Category::Forward, "f");
    let parents: Vec<OpId> = (0..3)
        .map(|r| g.add_op(r, Stream::Compute, ms(1.0), &[], l, &[]))
        .collect();
    for (i, &p) in parents.iter().enumerate().rev() {
        g.add_op(10 + i as u32, Stream::Compute, SimTime::ZERO, &[p], l, &[]);
    }
    let mut r = Recorder::default();
    run(&g, &mut r).unwrap();
    let order: Vec<u32> = r.ops.iter().map(|x| x.1).collect();
    assert_eq!(order, vec![0, 1, 2, 10, 11, 12]);
}

#[test]
fn memory_events_in_time_order() {
    let mut g = Graph::new();
    let l = g.label(Category::AllGather, "ag");
    g.add_collective(
        &[0, 1],
        Stream::Comm,
        ms(2.0),
        &[],
        l,
        &[MemChange::start(0, 100), MemChange::start(1, 100)],
    );
    let c = g.label(Category::Forward, "f");
    g.add_op(0, Stream::Comm, ms(1.0), &[], c, &[MemChange::end(0, -100)]);
    let mut r = Recorder::default();
    run(&g, &mut r).unwrap();
    assert_eq!(
        r.mems,
        vec![
            (0, ms(0.0), 100, MemKind::Activations, OpId(0)),
            (1, ms(0.0), 100, MemKind::Activations, OpId(0)),
            (0, ms(3.0), -100, MemKind::Activations, OpId(1))
        ]
    );
}

/// (op, start, end) on one stream.
type Interval = (u32, SimTime, SimTime);

/// A random graph whose stream order and deps follow op ids (never deadlocks).
fn arb_graph() -> impl Strategy<Value = Graph> {
    let op = (
        0u32..4,                              // rank
        0usize..5,                            // stream
        prop::collection::vec(0u32..4, 0..4), // extra collective ranks
        0u64..5,                              // duration (coarse: many ties)
        prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    );
    prop::collection::vec(op, 1..60).prop_map(|ops| {
        let mut g = Graph::new();
        let l = g.label(Category::Other, "x");
        for (i, (rank, stream, coll, d, deps)) in ops.into_iter().enumerate() {
            let deps: Vec<OpId> = if i == 0 {
                vec![]
            } else {
                deps.iter().map(|x| OpId(x.index(i) as u32)).collect()
            };
            if coll.is_empty() {
                g.add_op(rank, Stream::ALL[stream], SimTime(d), &deps, l, &[]);
            } else {
                let mut ranks = coll;
                ranks.push(rank);
                ranks.sort_unstable();
                ranks.dedup();
                g.add_collective(&ranks, Stream::Comm, SimTime(d), &deps, l, &[]);
            }
        }
        g
    })
}

#[test]
fn transfers_on_one_link_share_it() {
    let run_ends = |g: &Graph| {
        let mut r = Recorder::default();
        run(g, &mut r).unwrap();
        let mut end = vec![SimTime::ZERO; g.len()];
        for &(op, _, _, _, e) in &r.ops {
            end[op.0 as usize] = e;
        }
        end
    };
    // Two copies on two ranks saturating one link: each takes twice as
    // long together; a third transfer on another link is unaffected.
    let mut g = Graph::new();
    let l = g.label(Category::CopyD2H, "copy");
    let a = g.add_op(0, Stream::Copy, ms(10.0), &[], l, &[]);
    let b = g.add_op(1, Stream::Copy, ms(10.0), &[], l, &[]);
    let c = g.add_op(2, Stream::Copy, ms(10.0), &[], l, &[]);
    g.add_shares(a, &[(7, 1.0)]);
    g.add_shares(b, &[(7, 1.0)]);
    g.add_shares(c, &[(8, 1.0)]);
    let end = run_ends(&g);
    assert_eq!(end[a.0 as usize], ms(20.0));
    assert_eq!(end[b.0 as usize], ms(20.0));
    assert_eq!(end[c.0 as usize], ms(10.0));
    // Overlapping half the time: the first is slowed only while both run.
    let mut g = Graph::new();
    let l = g.label(Category::CopyD2H, "copy");
    let x = g.add_op(0, Stream::Copy, ms(10.0), &[], l, &[]);
    let w = g.add_op(1, Stream::Compute, ms(5.0), &[], l, &[]);
    let y = g.add_op(1, Stream::Copy, ms(10.0), &[w], l, &[]);
    g.add_shares(x, &[(0, 1.0)]);
    g.add_shares(y, &[(0, 1.0)]);
    let end = run_ends(&g);
    // x: 5 ms alone, then half pace: its last 5 ms of work take 10.
    assert_eq!(end[x.0 as usize], ms(15.0));
    // y: 10 ms at half pace (5 ms of work), then 5 ms alone.
    assert_eq!(end[y.0 as usize], ms(20.0));
    // Spare capacity slows nobody: two transfers at 40% of the link.
    let mut g = Graph::new();
    let l = g.label(Category::CopyD2H, "copy");
    let p = g.add_op(0, Stream::Copy, ms(10.0), &[], l, &[]);
    let q = g.add_op(1, Stream::Copy, ms(10.0), &[], l, &[]);
    g.add_shares(p, &[(0, 0.4)]);
    g.add_shares(q, &[(0, 0.4)]);
    assert_eq!(run_ends(&g)[q.0 as usize], ms(10.0));
}

#[test]
fn compute_slows_while_a_collective_runs() {
    let mut g = Graph::new();
    let f = g.label(Category::Forward, "fwd");
    let ag = g.label(Category::AllGather, "ag");
    let k = g.add_op(0, Stream::Compute, ms(10.0), &[], f, &[]);
    let c = g.add_collective(&[0, 1], Stream::Comm, ms(5.0), &[], ag, &[]);
    let other = g.add_op(2, Stream::Compute, ms(10.0), &[], f, &[]);
    g.set_interference(0.25);
    let mut r = Recorder::default();
    run(&g, &mut r).unwrap();
    let end = |op: OpId| r.ops.iter().find(|x| x.0 == op).unwrap().4;
    // 5 ms at 1/1.25 pace (4 ms of work), then 6 ms alone.
    assert_eq!(end(k), ms(11.0));
    assert_eq!(end(c), ms(5.0));
    // A rank without a collective is not slowed.
    assert_eq!(end(other), ms(10.0));
    // Off: nominal.
    g.set_interference(0.0);
    let mut r = Recorder::default();
    run(&g, &mut r).unwrap();
    assert_eq!(r.ops.iter().find(|x| x.0 == k).unwrap().4, ms(10.0));
}

proptest! {
    #[test]
    fn invariants(g in arb_graph()) {
        let mut r = Recorder::default();
        let stats = run(&g, &mut r).unwrap();
        prop_assert_eq!(stats.ops as usize, g.len());
        // Per-op (start, end) and per-stream intervals in issue order.
        let mut start = vec![None; g.len()];
        let mut end = vec![SimTime::ZERO; g.len()];
        let mut by_stream: BTreeMap<(u32, Stream), Vec<Interval>> = BTreeMap::new();
        let mut last_time = SimTime::ZERO;
        for &(op, rank, stream, s, e) in &r.ops {
            prop_assert!(e >= last_time, "records out of end-time order");
            last_time = e;
            prop_assert_eq!(e, s + g.op_duration(op));
            if let Some(prev) = start[op.0 as usize] { prop_assert_eq!(prev, s); }
            start[op.0 as usize] = Some(s);
            end[op.0 as usize] = e;
            by_stream.entry((rank, stream)).or_default().push((op.0, s, e));
        }
        // Readiness of each op: deps done and every participant's previous op done.
        let mut ready = vec![SimTime::ZERO; g.len()];
        for (i, r) in ready.iter_mut().enumerate() {
            for d in g.op_deps(OpId(i as u32)) {
                *r = (*r).max(end[d.0 as usize]);
            }
        }
        for ops in by_stream.values() {
            for w in ops.windows(2) {
                prop_assert!(w[0].0 < w[1].0, "stream runs in issue order");
                prop_assert!(w[1].1 >= w[0].2, "overlap on a stream");
                ready[w[1].0 as usize] = ready[w[1].0 as usize].max(w[0].2);
            }
        }
        for i in 0..g.len() {
            // Starts exactly when the last participant and dependency is ready.
            prop_assert_eq!(start[i], Some(ready[i]));
        }
        // Determinism.
        let mut r2 = Recorder::default();
        run(&g, &mut r2).unwrap();
        prop_assert_eq!(&r.ops, &r2.ops);
    }
}

/// Synthetic FSDP-shaped graph: `ranks` x `units` x `micro`.
pub(crate) fn fsdp_like(ranks: u32, units: u32, micro: u32) -> Graph {
    let mut g = Graph::with_capacity((ranks * units * micro * 6) as usize, 0);
    let fwd = g.label(Category::Forward, "fwd");
    let bwd = g.label(Category::Backward, "bwd");
    let d2h = g.label(Category::CopyD2H, "d2h");
    let ag = g.label(Category::AllGather, "ag");
    let rs = g.label(Category::ReduceScatter, "rs");
    let all: Vec<u32> = (0..ranks).collect();
    let mut last: Vec<Option<OpId>> = vec![None; ranks as usize];
    let mut deps = Vec::new();
    for pass in 0..2 {
        for u in 0..units {
            let gather = g.add_collective(&all, Stream::Comm, SimTime(50_000), &[], ag, &[]);
            for r in 0..ranks {
                let d = SimTime(100_000 + 1_000 * (r as u64 % 7));
                for m in 0..micro {
                    deps.clear();
                    deps.push(gather);
                    deps.extend(last[r as usize]);
                    let mut l = if pass == 0 { fwd } else { bwd };
                    l.unit = u;
                    l.micro = m;
                    let c = g.add_op(r, Stream::Compute, d, &deps, l, &[]);
                    g.add_op(r, Stream::Copy, SimTime(20_000), &[c], d2h, &[]);
                    last[r as usize] = Some(c);
                }
            }
            if pass == 1 {
                let deps: Vec<OpId> = last.iter().flatten().copied().collect();
                g.add_collective(&all, Stream::Comm, SimTime(50_000), &deps, rs, &[]);
            }
        }
    }
    g
}

#[test]
fn fsdp_like_runs() {
    let g = fsdp_like(8, 4, 2);
    let s = run(&g, &mut NullObserver).unwrap();
    assert_eq!(s.ops as usize, g.len());
    assert!(s.makespan > SimTime::ZERO);
}
