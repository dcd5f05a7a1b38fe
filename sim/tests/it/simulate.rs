//! Simulator tests under Cephalo's strategy: engine invariants on real
//! iteration graphs, exact single-GPU sums, symmetry, bandwidth
//! monotonicity, determinism, OOM reporting, and the paper's 4-GPU plan
//! against its own profile (needs `../shared/reference-profiles`). The
//! invariant checker [`check`] is shared with the strategy tests.

use crate::common::{
    build, cluster_toml, costs, gpu_list, plan, reference_profiles, shared_dir, under, workload,
};
use proptest::prelude::*;
use sim::cluster::Cluster;
use sim::comm::CollectiveKind;
use sim::cost::CostModel;
use sim::engine::{Graph, OpId, Recorder, Stream};
use sim::error::PlanError;
use sim::iteration::SimOptions;
use sim::lower::Lowered;
use sim::memory::MemoryTracker;
use sim::plan::rank::RankPlan;
use sim::plan::Plan;
use sim::precision::NumFormat;
use sim::profile::ProfileSet;
use sim::report::Report;
use sim::simulate::{build_graph, simulate, simulate_observed};
use sim::strategy::Sharding;
use sim::units::SimTime;
use std::collections::BTreeMap;

/// An op's run on one stream: (op, start, end).
type Interval = (OpId, SimTime, SimTime);

/// What one rank did, as comparable records: (stream, unit, micro, name, start, end).
type Timeline = Vec<(Stream, u32, u32, String, SimTime, SimTime)>;

/// Runs a plan with a recorder and a memory tracker and checks every
/// invariant of the raw timeline of every GPU (identical nodes not
/// merged), and that merging them gives the same report; returns the report.
pub(crate) fn check(costs: &CostModel, plan: &Plan, opts: &SimOptions) -> Report {
    let merged = simulate(costs, plan, opts).unwrap();
    let opts = &SimOptions {
        merge_identical_nodes: false,
        ..*opts
    };
    let low: Lowered = build_graph(costs, plan, opts).unwrap();
    let g: &Graph = &low.graph;
    let mut rec = Recorder::default();
    let report = simulate_observed(costs, plan, opts, &mut rec).unwrap();
    assert_same_report(&merged, &report);

    // Every op ran; per-op (start, end) and per-stream sequences.
    let mut start = vec![None; g.len()];
    let mut end = vec![SimTime::ZERO; g.len()];
    let mut slots: BTreeMap<(u32, Stream), Vec<Interval>> = BTreeMap::new();
    let mut parts = vec![0u32; g.len()];
    for &(op, rank, stream, s, e) in &rec.ops {
        let i = op.0 as usize;
        if let Some(prev) = start[i] {
            assert_eq!(prev, s, "a collective starts at one instant on all ranks");
        }
        start[i] = Some(s);
        end[i] = e;
        parts[i] += 1;
        slots.entry((rank, stream)).or_default().push((op, s, e));
    }
    assert!(start.iter().all(Option::is_some), "every op ran");

    // No two ops overlap on one stream.
    let mut prev_on_slot: BTreeMap<OpId, Vec<SimTime>> = BTreeMap::new();
    for ((rank, stream), ops) in &slots {
        for w in ops.windows(2) {
            assert!(
                w[1].1 >= w[0].2,
                "overlap on rank {rank} {stream:?}: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
        if matches!(stream, Stream::Comm | Stream::Reduce) {
            for (k, &(op, _, _)) in ops.iter().enumerate() {
                let ready = if k == 0 { SimTime::ZERO } else { ops[k - 1].2 };
                prev_on_slot.entry(op).or_default().push(ready);
            }
        }
    }

    // No collective starts before every participant joined: it starts
    // exactly when the last participant's stream is free and its last
    // dependency (each rank's program reaching the join) is done. Each
    // collective covers its whole group.
    let group = plan.strategy.groups(costs.ranks()).group_size as u32;
    for c in &low.collectives {
        let i = c.op.0 as usize;
        let replicas = costs.ranks() as u32 / group;
        let want = match plan.strategy.sharding {
            // DDP's all-reduce runs over every GPU.
            Sharding::NoShard => costs.ranks() as u32,
            // HSDP's all-reduce across the shard groups.
            _ if c.kind == CollectiveKind::AllReduce => replicas,
            _ => group,
        };
        assert_eq!(c.group_size, want, "collective {i} records its group");
        assert_eq!(parts[i], want, "collective {i} runs on its whole group");
        let s = start[i].unwrap();
        let mut joined = SimTime::ZERO;
        for &t in &prev_on_slot[&c.op] {
            joined = joined.max(t);
        }
        for d in g.op_deps(c.op) {
            joined = joined.max(end[d.0 as usize]);
        }
        assert_eq!(s, joined, "collective {i} starts when the last rank joined");
    }
    for i in 0..g.len() {
        if g.op_label(OpId(i as u32)).category.is_collective() {
            assert!(low.collectives.iter().any(|c| c.op.0 as usize == i));
        }
    }

    // Memory: never below the base, everything freed at the end.
    let mut bases = low.base_device_bytes.clone();
    bases.extend(&low.base_host_bytes);
    let mut mem = MemoryTracker::new(bases);
    for &(pool, time, delta, kind, op) in &rec.mems {
        sim::engine::Observer::on_mem(&mut mem, pool, time, delta, kind, op);
    }
    for p in 0..mem.ranks() {
        assert!(
            mem.min_dynamic_bytes(p) >= 0,
            "pool {p} memory below its base"
        );
        assert_eq!(
            mem.current_bytes(p),
            mem.base_bytes(p),
            "pool {p} leaks memory"
        );
    }
    // Each kind of memory is freed by the end too (every allocation and its
    // free carry the same kind), and the report's breakdown sums to its peak.
    let mut by_kind = std::collections::BTreeMap::new();
    for &(pool, _, delta, kind, _) in &rec.mems {
        *by_kind.entry((pool, kind.index())).or_insert(0i64) += delta;
    }
    assert!(
        by_kind.values().all(|&v| v == 0),
        "a kind of memory is not freed by the end: {by_kind:?}"
    );
    for r in 0..costs.ranks() {
        let peak = mem.peak_bytes(r) as f64 / sim::units::GIB;
        assert!((peak - report.gpus[r].peak_mem_gib).abs() < 1e-12);
        let m = &report.gpus[r].memory;
        let sum = m.state_gib
            + m.overhead_gib
            + m.unsharded_params_gib
            + m.gradients_gib
            + m.activations_gib;
        assert!(
            (sum - m.peak_gib).abs() < 1e-9 && m.peak_gib == report.gpus[r].peak_mem_gib,
            "rank {r}: parts {sum} vs peak {}",
            m.peak_gib
        );
        assert!(
            [
                m.state_gib,
                m.overhead_gib,
                m.unsharded_params_gib,
                m.gradients_gib,
                m.activations_gib
            ]
            .iter()
            .all(|&v| v >= 0.0),
            "rank {r}: a negative part {m:?}"
        );
    }
    for h in &report.hosts {
        let peak = mem.peak_bytes(costs.ranks() + h.node) as f64 / sim::units::GIB;
        assert!((peak - h.peak_gib).abs() < 1e-12);
    }

    // Breakdown sums to the iteration on every GPU.
    for gr in &report.gpus {
        let sum = gr.compute_ms + gr.exposed_comm_ms + gr.copy_ms + gr.host_ms + gr.idle_ms;
        assert!(
            (sum - report.iteration_ms).abs() < 1e-6,
            "rank {}: {sum} vs {}",
            gr.rank,
            report.iteration_ms
        );
        let parts = gr.forward_ms + gr.recompute_ms + gr.backward_ms + gr.optimizer_ms;
        assert!((parts - gr.compute_ms).abs() < 1e-6);
        assert!(gr.finish_ms <= report.iteration_ms + 1e-9);
    }
    assert_eq!(report.ops as usize, g.len());

    // The fast model sees the same iteration (times alone: no link
    // sharing, no interference), and contention only slows it.
    let fast = sim::fast::evaluate(costs, plan, opts).unwrap();
    let alone = SimOptions {
        contention: false,
        ..*opts
    };
    let nominal = simulate_observed(costs, plan, &alone, &mut sim::engine::NullObserver).unwrap();
    assert_eq!(
        SimTime::from_ms(fast.iteration_ms),
        SimTime::from_ms(nominal.iteration_ms),
        "fast model vs simulator"
    );
    if !opts.contention {
        assert_eq!(nominal.iteration_ms, report.iteration_ms);
    }
    for r in 0..costs.ranks() {
        let (f, s) = (fast.peak_gib[r], nominal.gpus[r].peak_mem_gib);
        assert!(
            f >= s - 1e-12 && f <= s * 1.03 + 1e-9,
            "rank {r}: fast {f} vs sim {s} GiB"
        );
    }
    report
}

/// `merged` (identical nodes simulated once) says what `full` says, to the
/// byte, but for the size of the simulated graph.
pub(crate) fn assert_same_report(merged: &Report, full: &Report) {
    assert_eq!(full.simulated_gpus, full.gpus.len());
    assert!(merged.simulated_gpus <= full.simulated_gpus);
    let mut m = merged.clone();
    m.ops = full.ops;
    m.events = full.events;
    m.simulated_gpus = full.simulated_gpus;
    assert_eq!(m.to_json(), full.to_json(), "merged vs full simulation");
}

#[test]
fn invariants_hold_on_varied_plans() {
    let het = costs("l4,l4,a6000,p40", "gpt-1.3b", NumFormat::Fp16, 64);
    let on = SimOptions::default();
    let off = SimOptions {
        prefetch: false,
        ..on
    };
    for (p, o) in [
        (plan(&[13, 12, 34, 5], &[1, 2, 1, 1], None), on),
        (plan(&[13, 12, 34, 5], &[1, 2, 1, 1], None), off),
        // Uneven micro-batches (5 = 3 + 2), several per rank, uneven shards.
        (
            plan(&[5, 20, 30, 9], &[2, 4, 3, 3], Some(&[0.1, 0.2, 0.5, 0.2])),
            on,
        ),
        // A state-only GPU (batch 0) still joins every collective.
        (
            plan(&[16, 16, 32, 0], &[2, 1, 2, 0], Some(&[0.2, 0.2, 0.2, 0.4])),
            on,
        ),
        (
            plan(&[16, 16, 32, 0], &[2, 1, 2, 0], Some(&[0.3, 0.3, 0.4, 0.0])),
            off,
        ),
    ] {
        let r = check(&het, &p, &o);
        assert!(!r.oom, "{}", r.to_table());
    }
    // Two nodes joined by a slow network.
    let c = cluster_toml(
        r#"
name = "two"
[network]
bw_gbit_s = 10.0
[[nodes]]
gpus = [ { type = "a10g", count = 2 } ]
[[nodes]]
gpus = [ { type = "v100x16" }, { type = "t4" } ]
"#,
    );
    let two = build(
        workload(c, "llama-tiny", NumFormat::Fp16, 24),
        &ProfileSet::new(),
        None,
    );
    check(&two, &plan(&[8, 8, 6, 2], &[2, 2, 3, 1], None), &on);
    check(&two, &plan(&[8, 8, 6, 2], &[2, 2, 3, 1], None), &off);
}

#[test]
fn state_only_gpu_does_only_its_optimizer_step() {
    let c = costs("a6000,a6000,t4", "gpt-1.3b", NumFormat::Fp16, 16);
    let p = plan(&[8, 8, 0], &[1, 1, 0], Some(&[0.4, 0.4, 0.2]));
    let r = check(&c, &p, &SimOptions::default());
    let g = &r.gpus[2];
    assert_eq!(g.forward_ms + g.backward_ms + g.recompute_ms, 0.0);
    assert!(g.optimizer_ms > 0.0);
    assert!(g.comm_busy_ms > 0.0);
    assert!((g.comm_busy_ms - r.gpus[0].comm_busy_ms).abs() < 1e-9);
}

/// With one GPU there is no communication (1-rank collectives cost 0) and
/// with one micro-batch no copy: the iteration is exactly the sum of
/// `embed_fwd + L x block_fwd + head_fwd + head_bwd + L x (block_fwd +
/// block_bwd) + embed_bwd + optimizer(all params)`, each rounded to ns.
fn single_gpu_sum(c: &CostModel, m: u32) -> SimTime {
    use sim::tensor::TensorParallel as Tp;
    const NONE: Tp = Tp::NONE;
    let imp = c.gpu_type(0).measured_impl();
    let l = c.workload.model.layers as u64;
    let ns = |ms: f64| SimTime::from_ms(ms).0;
    let total: f64 = c.unit_params().iter().map(|&p| p as f64).sum();
    SimTime(
        ns(c.embed_fwd_ms(0, m, imp, &NONE))
            + l * ns(c.block_fwd_ms(0, m))
            + ns(c.head_fwd_ms(0, m, imp, &NONE))
            + ns(c.head_bwd_ms(0, m, imp, &NONE))
            + l * (ns(c.block_fwd_ms(0, m)) + ns(c.block_bwd_ms(0, m)))
            + ns(c.embed_bwd_ms(0, m, imp, &NONE))
            + ns(c.optimizer_ms(0, total)),
    )
}

#[test]
fn single_gpu_is_the_sum_of_its_terms() {
    for (gpu, model, dtype, b) in [
        ("a6000", "gpt-1.3b", NumFormat::Fp16, 8),
        ("v100x32", "llama-tiny", NumFormat::Fp32, 3),
        ("h100-sxm", "bert-large", NumFormat::Bf16, 16),
    ] {
        let c = costs(gpu, model, dtype, b);
        let r = check(&c, &plan(&[b], &[1], None), &SimOptions::default());
        let want = single_gpu_sum(&c, b);
        assert_eq!(SimTime::from_ms(r.iteration_ms), want, "{gpu} {model}");
        assert_eq!(
            r.gpus[0].exposed_comm_ms + r.gpus[0].copy_ms + r.gpus[0].idle_ms,
            0.0
        );
        // Gradient accumulation adds host copies that may only lengthen it.
        let r2 = check(&c, &plan(&[b], &[2], None), &SimOptions::default());
        assert!(r2.iteration_ms > 0.0);
    }
}

/// Reads a block time straight from the reference file with the reference
/// optimizer's rule (raw value when present, else the linear fit).
fn reference_block_ms(
    d: &std::path::Path,
    model: &str,
    gpu: &str,
    seq: &str,
    dtype: &str,
    m: u32,
) -> (f64, f64) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("model_latencies.json")).unwrap())
            .unwrap();
    let e = &v[model][gpu][seq][dtype];
    let fit = |i: usize| e[i][0].as_f64().unwrap() * m as f64 + e[i][1].as_f64().unwrap();
    let raw = |i: usize| {
        e.get(i)
            .and_then(|l| l.get(m as usize - 1))
            .and_then(|x| x.as_f64())
    };
    (raw(2).unwrap_or(fit(0)), raw(3).unwrap_or(fit(1)))
}

#[test]
fn single_gpu_with_reference_profile_is_the_sum_of_its_entries() {
    let Some(p) = reference_profiles() else {
        return;
    };
    let d = shared_dir().unwrap();
    let c = gpu_list("a6000");
    let c = build(
        workload(c, "deepspeedgpt_2.7b", NumFormat::Fp16, 4),
        p,
        Some("paper"),
    );
    let r = check(&c, &plan(&[4], &[1], None), &SimOptions::default());
    let (f, b) = reference_block_ms(&d, "deepspeedgpt_2.7b", "a6000", "512", "float16", 4);
    assert!((c.block_fwd_ms(0, 4) - f).abs() < 1e-9 && (c.block_bwd_ms(0, 4) - b).abs() < 1e-9);
    assert_eq!(SimTime::from_ms(r.iteration_ms), single_gpu_sum(&c, 4));
    let blocks = 32.0 * (2.0 * f + b);
    let extra = r.iteration_ms - blocks;
    eprintln!(
        "a6000 alone, gpt-2.7b fp16 b=4: {:.3} ms = 32 x (2 x {f:.3} + {b:.3}) = {blocks:.3} + embedding/head/optimizer {extra:.3}",
        r.iteration_ms
    );
    // The optimizer step over all 2.8 B parameters dominates the extra.
    assert!(extra > 0.0 && extra < 0.15 * blocks);
}

#[test]
fn identical_gpus_with_an_even_plan_have_identical_timelines() {
    let c = cluster_toml(
        r#"
name = "sym"
[[nodes]]
gpus = [ { type = "a10g", count = 2 } ]
[[nodes]]
gpus = [ { type = "a10g", count = 2 } ]
"#,
    );
    let c = build(
        workload(c, "gpt-1.3b", NumFormat::Fp16, 32),
        &ProfileSet::new(),
        None,
    );
    let p = plan(&[8, 8, 8, 8], &[2, 2, 2, 2], None);
    // Without link sharing: a ring's hops are not symmetric (which GPU
    // sends to the NIC), so shared links may tell identical GPUs apart.
    let opts = SimOptions {
        contention: false,
        merge_identical_nodes: false,
        ..SimOptions::default()
    };
    let low = build_graph(&c, &p, &opts).unwrap();
    let mut rec = Recorder::default();
    let r = simulate_observed(&c, &p, &opts, &mut rec).unwrap();
    let mut per_rank: Vec<Timeline> = vec![vec![]; 4];
    for &(op, rank, stream, s, e) in &rec.ops {
        let l = low.graph.op_label(op);
        let name = low.graph.name(l.name).to_string();
        per_rank[rank as usize].push((stream, l.unit, l.micro, name, s, e));
    }
    assert!(per_rank[0].len() > 100);
    for v in &mut per_rank {
        // Records of one instant may arrive in any rank order; compare sets.
        v.sort_by_key(|a| (a.4, a.0, a.1, a.2));
    }
    for k in 1..4 {
        if let Some(i) = (0..per_rank[0].len()).find(|&i| per_rank[0].get(i) != per_rank[k].get(i))
        {
            panic!(
                "rank {k} differs from rank 0 at {i}: {:?} vs {:?}",
                per_rank[0][i],
                per_rank[k].get(i)
            );
        }
        assert_eq!(per_rank[0].len(), per_rank[k].len());
        let (a, b) = (&r.gpus[0], &r.gpus[k]);
        assert_eq!(
            (
                a.compute_ms,
                a.exposed_comm_ms,
                a.copy_ms,
                a.idle_ms,
                a.peak_mem_gib
            ),
            (
                b.compute_ms,
                b.exposed_comm_ms,
                b.copy_ms,
                b.idle_ms,
                b.peak_mem_gib
            )
        );
    }
}

#[test]
fn output_is_byte_identical_across_runs() {
    let c = costs("l4,l4,a6000,p40", "gpt-1.3b", NumFormat::Fp16, 64);
    let p = plan(&[13, 12, 34, 5], &[1, 2, 1, 1], None);
    let opts = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let a = simulate(&c, &p, &opts).unwrap();
    let b = simulate(
        &costs("l4,l4,a6000,p40", "gpt-1.3b", NumFormat::Fp16, 64),
        &p,
        &opts,
    )
    .unwrap();
    assert_eq!(a.to_json(), b.to_json());
    assert_eq!(a.to_csv(), b.to_csv());
    assert_eq!(a.to_table(), b.to_table());
    let (ta, tb) = (a.trace.unwrap().to_json(), b.trace.unwrap().to_json());
    assert_eq!(ta, tb);
    // The trace is Chrome JSON with one named track per GPU stream.
    let v: serde_json::Value = serde_json::from_str(&ta).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let threads: Vec<(u64, u64)> = evs
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
        .collect();
    assert_eq!(threads.len(), 20);
    let procs: Vec<&str> = evs
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        procs,
        [
            "rank 0: l4 (node0)",
            "rank 1: l4 (node0)",
            "rank 2: rtx-a6000 (node0)",
            "rank 3: p40 (node0)",
            "host: node0"
        ]
    );
    // Rank 1 accumulates 2 micro-batches: its copy track is used.
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "X" && e["pid"] == 1 && e["tid"] == 3));
    // The host of the node has a memory counter too.
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "C" && e["pid"] == 4 && e["name"] == "memory"));
    assert!(evs.iter().any(|e| e["ph"] == "C" && e["name"] == "memory"));
}

/// A trace reads iteration > phase > micro-batch > op on each compute
/// thread (slices on one thread nest or are disjoint), ops name their
/// layer, collectives carry bytes and bandwidth and are chained across
/// their ranks by flow arrows, under layered and micro-batch-major
/// accumulation.
#[test]
fn traces_nest_and_link_collectives() {
    use sim::strategy::{Accumulation, Attention, Strategy};
    let c = costs("l4,l4,a6000,p40", "gpt-1.3b", NumFormat::Fp16, 16);
    for acc in [Accumulation::Layered, Accumulation::NoSync] {
        let strategy = Strategy {
            accumulation: acc,
            ..Strategy::cephalo(4, Attention::Eager)
        };
        let p = plan(&[4, 4, 6, 2], &[2, 2, 2, 1], None).with_strategy(strategy);
        let opts = SimOptions {
            trace: true,
            ..SimOptions::default()
        };
        let text = simulate(&c, &p, &opts).unwrap().trace.unwrap().to_json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let evs = v["traceEvents"].as_array().unwrap();
        let xs: Vec<&serde_json::Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
        let us = |e: &serde_json::Value, k: &str| (e[k].as_f64().unwrap() * 1000.0).round() as i64;
        // Nesting: on every (pid, tid), two slices are disjoint or one holds the other.
        let mut by_thread: std::collections::BTreeMap<(u64, u64), Vec<(i64, i64)>> =
            Default::default();
        for e in &xs {
            let t = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            let a = us(e, "ts");
            by_thread.entry(t).or_default().push((a, a + us(e, "dur")));
        }
        for (t, v) in &by_thread {
            for (i, a) in v.iter().enumerate() {
                for b in &v[i + 1..] {
                    let disjoint = a.1 <= b.0 || b.1 <= a.0;
                    let nested = (a.0 <= b.0 && b.1 <= a.1) || (b.0 <= a.0 && a.1 <= b.1);
                    assert!(
                        disjoint || nested,
                        "{acc:?} thread {t:?}: {a:?} and {b:?} overlap"
                    );
                }
            }
        }
        let nest: Vec<&str> = xs
            .iter()
            .filter(|e| e["cat"] == "nest" && e["pid"] == 0)
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(nest[0], "iteration");
        match acc {
            Accumulation::Layered => {
                assert!(
                    nest.contains(&"forward block 3") && nest.contains(&"micro-batch 1"),
                    "{nest:?}"
                )
            }
            _ => assert!(
                nest.contains(&"backward micro-batch 1") && nest.contains(&"block 3"),
                "{nest:?}"
            ),
        }
        assert!(xs.iter().any(|e| e["name"] == "fwd block 3"));
        assert!(xs.iter().any(|e| e["name"] == "all_gather embedding"));
        // Collectives: bytes and bandwidth; one flow chain per collective over its 4 ranks.
        let coll: Vec<_> = xs
            .iter()
            .filter(|e| e["args"]["ranks"].as_u64() == Some(4))
            .collect();
        assert!(!coll.is_empty());
        for e in &coll {
            assert!(e["args"]["bytes"].as_f64().unwrap() > 0.0, "{e}");
            assert!(e["args"]["algbw_gbps"].as_f64().unwrap() > 0.0, "{e}");
        }
        let mut chains: std::collections::BTreeMap<u64, Vec<(String, u64)>> = Default::default();
        for e in evs
            .iter()
            .filter(|e| matches!(e["ph"].as_str(), Some("s" | "t" | "f")))
        {
            chains.entry(e["id"].as_u64().unwrap()).or_default().push((
                e["ph"].as_str().unwrap().to_string(),
                e["pid"].as_u64().unwrap(),
            ));
        }
        assert_eq!(chains.len() * 4, coll.len(), "one chain per collective");
        for chain in chains.values() {
            let phases: Vec<&str> = chain.iter().map(|(p, _)| p.as_str()).collect();
            assert_eq!(phases, ["s", "t", "t", "f"]);
            let ranks: Vec<u64> = chain.iter().map(|x| x.1).collect();
            assert_eq!(ranks, [0, 1, 2, 3]);
        }
    }
}

/// See: issue 2 ("an even plan that cannot fit ... reported as out of memory").
#[test]
fn r2_llama7b_fp32_on_four_t4_is_out_of_memory() {
    let c = costs("t4,t4,t4,t4", "deepspeedllama_7b", NumFormat::Fp32, 32);
    let r = simulate(
        &c,
        &plan(&[8, 8, 8, 8], &[1, 1, 1, 1], None),
        &SimOptions::default(),
    )
    .unwrap();
    assert!(r.oom);
    assert_eq!(r.oom_gpus.len(), 4);
    for o in &r.oom_gpus {
        assert_eq!(o.gpu, "t4");
        assert!(o.peak_mem_gib > o.usable_gib);
        assert!((o.usable_gib - c.usable_gib(0)).abs() < 1e-9);
        assert!(o.usable_gib < o.capacity_gib && o.usable_gib > 0.9 * o.capacity_gib);
    }
    assert_eq!(r.time_ms(), None);
    let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert!(j["iteration_ms"].is_null() && j["mfu"].is_null());
    assert_eq!(j["oom"], true);
    assert!(j["timing_if_it_fit"]["iteration_ms"].as_f64().unwrap() > 0.0);
    let t = r.to_table();
    assert!(
        t.contains("OUT OF MEMORY") && t.contains("rank 0 (t4): peak"),
        "{t}"
    );
    assert!(!t.contains("samples/s"), "{t}");
}

#[test]
fn a_straggler_stalls_the_fast_gpu() {
    // Same batch on a fast and a slow GPU, compute-bound (8 micro-batches
    // per all-gather): the fast one waits for the slow one at every
    // collective (idle), the slow one is never stalled.
    let c = costs("a6000,t4", "gpt-1.3b", NumFormat::Fp16, 64);
    let r = check(
        &c,
        &plan(&[32, 32], &[8, 8], Some(&[0.8, 0.2])),
        &SimOptions::default(),
    );
    assert!(!r.oom, "{}", r.to_table());
    let (fast, slow) = (&r.gpus[0], &r.gpus[1]);
    assert!(fast.idle_ms > 0.3 * r.iteration_ms, "{}", r.to_table());
    assert!(slow.idle_ms < 0.01 * r.iteration_ms, "{}", r.to_table());
}

#[test]
fn plan_errors_name_the_field() {
    let c = costs("a6000,a6000", "gpt-1.3b", NumFormat::Fp16, 16);
    let e = simulate(&c, &plan(&[8, 7], &[1, 1], None), &SimOptions::default()).unwrap_err();
    assert!(
        matches!(&e, PlanError::Invalid { origin, field, .. } if origin == "plan" && field == "batch"),
        "{e}"
    );
    let e = simulate(&c, &plan(&[16], &[1], None), &SimOptions::default()).unwrap_err();
    assert!(
        matches!(&e, PlanError::Invalid { field, .. } if field == "gpus"),
        "{e}"
    );
    let mut p = plan(&[8, 8], &[1, 1], None);
    p.gpus[1] = RankPlan {
        microbatch_size: 3,
        ..p.gpus[1].clone()
    };
    assert!(simulate(&c, &p, &SimOptions::default()).is_err());
}

/// The paper's 4-GPU plan (the reference optimizer's real output, GPT-2.7B
/// fp16, global batch 64 on L4, L4, A6000, P40).
#[test]
fn paper_plan_is_bounded_by_its_slowest_gpu_and_explained() {
    let Some(prof) = reference_profiles() else {
        return;
    };
    let d = shared_dir().unwrap();
    let cl = gpu_list("l4,l4,a6000,p40");
    let c = build(
        workload(cl, "deepspeedgpt_2.7b", NumFormat::Fp16, 64),
        prof,
        Some("paper"),
    );
    let p = plan(&[13, 12, 34, 5], &[1, 2, 1, 1], None);
    let r = check(&c, &p, &SimOptions::default());
    assert!(!r.oom, "{}", r.to_table());

    // Per-block compute of each GPU from the file: n x (2 f(m) + b(m)).
    let keys = ["l4", "l4", "a6000", "p40"];
    let mut per_block = Vec::new();
    for (k, g) in keys.iter().zip(&p.gpus) {
        let (f, b) = reference_block_ms(
            &d,
            "deepspeedgpt_2.7b",
            k,
            "512",
            "float16",
            g.microbatch_size,
        );
        per_block.push(g.microbatches as f64 * (2.0 * f + b));
    }
    let (slow, &slow_ms) = per_block
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap();
    let lower = 32.0 * slow_ms;
    assert!(r.iteration_ms >= lower, "{} < {lower}", r.iteration_ms);

    // The margin, on the slowest GPU: its non-block compute (embedding,
    // head, optimizer: estimates), the pipeline fill (first two
    // all-gathers) and drain (last two reduce-scatters) that nothing
    // overlaps, and straggler stalls.
    let g = &r.gpus[slow];
    let m = p.gpus[slow].microbatch_size;
    let total: f64 = c.unit_params().iter().map(|&x| x as f64).sum();
    let imp = sim::perfmodel::BlockImpl::of(&p.strategy);
    let none = sim::tensor::TensorParallel::NONE;
    let non_block = c.embed_fwd_ms(slow, m, imp, &none)
        + c.embed_bwd_ms(slow, m, imp, &none)
        + c.head_fwd_ms(slow, m, imp, &none)
        + c.head_bwd_ms(slow, m, imp, &none)
        + c.optimizer_ms(slow, 0.25 * total);
    assert!(
        (g.compute_ms - g.interference_ms - lower - non_block).abs() < 1e-3,
        "compute = blocks + non-block (+ what collectives beside it cost)"
    );
    let one = |kind: &str, unit: u32| {
        let c = r
            .collectives
            .iter()
            .find(|c| c.kind == kind && c.unit == unit)
            .unwrap();
        c.time_ms / c.count as f64
    };
    let fill_drain = one("all_gather", 0)
        + one("all_gather", 1)
        + one("reduce_scatter", 1)
        + one("reduce_scatter", 0);
    assert!(
        g.exposed_comm_ms <= fill_drain + 1e-6,
        "{} > {fill_drain}",
        g.exposed_comm_ms
    );
    eprintln!(
        "paper plan: iteration {:.1} ms >= 32 x {slow_ms:.2} = {lower:.1} ms (rank {slow}, {}); margin {:.1} ms = \
         non-block compute {non_block:.1} (embedding+head+optimizer) + exposed comm {:.1} (fill/drain bound {fill_drain:.1}) \
         + copy {:.1} + idle {:.1}",
        r.iteration_ms,
        g.gpu,
        r.iteration_ms - lower,
        g.exposed_comm_ms,
        g.copy_ms,
        g.idle_ms
    );
    assert!(g.idle_ms < 0.01 * r.iteration_ms);
    // The head's loss moves its fp32 logits through the L4's 300 GB/s.
    assert!(r.iteration_ms < 1.06 * lower);
    for x in &r.gpus {
        eprintln!(
            "  rank {} {:<9} compute {:8.1} (fwd {:7.1} recompute {:7.1} bwd {:7.1} opt {:5.1}) exposed comm {:6.1} copy {:5.1} idle {:6.1} peak {:5.2}/{:5.2} GiB",
            x.rank, x.gpu, x.compute_ms, x.forward_ms, x.recompute_ms, x.backward_ms, x.optimizer_ms,
            x.exposed_comm_ms, x.copy_ms, x.idle_ms, x.peak_mem_gib, x.usable_gib
        );
    }
    // Memory: the reference check is state + overhead + act_mem(m), the
    // configuration the memory was measured in (one micro-batch, inputs on
    // the GPU): those GPUs reproduce it to within the in-flight buffers
    // timing adds; the accumulating GPU offloads its block inputs and
    // needs less.
    for (i, x) in r.gpus.iter().enumerate() {
        let check = c.state_gib(0.25) + c.overhead_gib() + c.act_mem_gib(p.gpus[i].microbatch_size);
        if p.gpus[i].microbatches == 1 {
            assert!(
                x.peak_mem_gib >= check - 1e-6,
                "rank {i}: {} < {check}",
                x.peak_mem_gib
            );
        }
        assert!(
            x.peak_mem_gib <= check + 0.35,
            "rank {i}: {} vs {check}",
            x.peak_mem_gib
        );
    }
}

fn arb_case() -> impl Strategy<Value = (String, Vec<u32>, Vec<u32>, Vec<f64>, f64)> {
    let gpus = ["a10g", "t4", "v100x16", "l4", "a100-40gb", "p40"];
    (
        prop::collection::vec((0usize..gpus.len(), 1u32..3), 2..5), // (type, count) per node
        prop::collection::vec((0u32..6, 1u32..4, 1u32..5), 8), // (batch, micro, weight) per rank
        0.5f64..100.0,                                         // Gbit/s
    )
        .prop_map(move |(nodes, ranks, bw)| {
            let mut toml = format!("name = \"p\"\n[network]\nbw_gbit_s = {bw}\n");
            let mut n = 0usize;
            for (t, count) in &nodes {
                toml.push_str(&format!(
                    "[[nodes]]\ngpus = [ {{ type = \"{}\", count = {count} }} ]\n",
                    gpus[*t]
                ));
                n += *count as usize;
            }
            let batch: Vec<u32> = ranks
                .iter()
                .take(n)
                .map(|r| r.0)
                .chain(std::iter::repeat(1))
                .take(n)
                .collect();
            let batch: Vec<u32> = if batch.iter().all(|&b| b == 0) {
                vec![1; n]
            } else {
                batch
            };
            let micro: Vec<u32> = batch
                .iter()
                .zip(ranks.iter().map(|r| r.1).chain(std::iter::repeat(1)))
                .map(|(&b, m)| if b == 0 { 0 } else { m.min(b) })
                .collect();
            let w: Vec<f64> = ranks
                .iter()
                .map(|r| r.2 as f64)
                .chain(std::iter::repeat(1.0))
                .take(n)
                .collect();
            let s: f64 = w.iter().sum();
            let mut fr: Vec<f64> = w.iter().map(|x| x / s).collect();
            let rest = 1.0 - fr[..n - 1].iter().sum::<f64>();
            fr[n - 1] = rest;
            (toml, batch, micro, fr, bw)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Doubling the inter-node bandwidth never slows an iteration (the
    /// schedule is a max-plus system of durations, each collective's time is
    /// non-increasing in bandwidth).
    #[test]
    fn doubling_inter_node_bandwidth_never_slows(case in arb_case(), prefetch in any::<bool>()) {
        let (toml, batch, micro, fr, _) = case;
        let cluster = cluster_toml(&toml);
        let gb: u32 = batch.iter().sum();
        let p = Plan::from_lists(&batch, &micro, Some(&fr), "prop").unwrap();
        let opts = SimOptions { prefetch, ..SimOptions::default() };
        let slow = build(workload(cluster.clone(), "llama-tiny", NumFormat::Fp16, gb), &ProfileSet::new(), None);
        let fast = build(workload(cluster.with_inter_bw_scaled(2.0), "llama-tiny", NumFormat::Fp16, gb), &ProfileSet::new(), None);
        let a = check(&slow, &p, &opts);
        let b = check(&fast, &p, &opts);
        prop_assert!(b.iteration_ms <= a.iteration_ms, "{} > {}", b.iteration_ms, a.iteration_ms);
        for (x, y) in a.gpus.iter().zip(&b.gpus) {
            prop_assert!(y.finish_ms <= x.finish_ms + 1e-9);
        }
    }
}

#[test]
fn a_network_table_means_what_it_meant() {
    // `[network] bw_gbit_s` is what a node achieves: a ring with one GPU
    // per node runs at it exactly, as before NICs could be written.
    let c = cluster_toml(
        "[network]\nbw_gbit_s = 25\nlatency_us = 30\n[[nodes]]\ngpus = [{ type = \"t4\" }]\n[[nodes]]\ngpus = [{ type = \"t4\" }]\n[[nodes]]\ngpus = [{ type = \"l4\" }]\n[[nodes]]\ngpus = [{ type = \"l4\" }]\n",
    );
    let costs = build(
        workload(c, "gpt-1.3b", NumFormat::Fp16, 16),
        &ProfileSet::new(),
        None,
    );
    let kind = sim::comm::CollectiveKind::AllGather;
    let t = costs.group_collective_ms(kind, &[0, 1, 2, 3], &[1e8; 4]);
    // (plus NCCL's Simple-protocol base latency, 8.4 µs)
    let before = 8.4e-3 + 3.0 * (30e-3 + 1e8 / 3.125e9 * 1e3);
    assert!((t - before).abs() < 1e-9, "{t} vs {before}");
    // The shipped examples keep their per-node network.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments/clusters");
    for f in ["mixed-3node-25gbe.toml", "aws-8v100-8a10g.toml"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        let c = cluster_toml(&text);
        for n in &c.nodes {
            assert_eq!((n.nics, n.net_gbps()), (1, 3.125), "{f}");
            assert_eq!(n.net_latency_us, 30.0, "{f}");
        }
    }
}

/// Which link a what-if doubles.
fn with_link_doubled(c: &Cluster, which: usize) -> Cluster {
    let mut c = c.clone();
    for n in &mut c.nodes {
        match which {
            0 => n.nic_gbps *= 2.0,
            1 => n.pcie_gbps *= 2.0,
            2 => n.nvlink_gbps = n.nvlink_gbps.map(|b| b * 2.0),
            _ => n.host_mem_bw_gbps *= 2.0,
        }
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Doubling any one link class (NICs, PCIe, NVLink, host memory) never
    /// slows an iteration, with links shared and interference on.
    #[test]
    fn doubling_any_link_never_slows(
        which in 0usize..4,
        batch in prop::collection::vec(1u32..5, 4),
        sharding in 0usize..3,
        offload in 0usize..2,
    ) {
        let cluster = cluster_toml(
            "[network]\nnic_gbit_s = 25\n[[nodes]]\nintra_link = \"nvlink-bridge\"\ngpus = [{ type = \"rtx-a6000\", count = 2 }]\n[[nodes]]\ngpus = [{ type = \"l4\", count = 2 }]\n",
        );
        let gb: u32 = batch.iter().sum();
        let sharding = [sim::strategy::Sharding::Full, sim::strategy::Sharding::Hybrid, sim::strategy::Sharding::NoShard][sharding];
        let g = if sharding == sim::strategy::Sharding::Hybrid { 2 } else { 4 };
        let strategy = sim::strategy::Strategy {
            sharding,
            shard_group: g,
            offload: [sim::strategy::Offload::Activations, sim::strategy::Offload::Optimizer][offload],
            ..sim::strategy::Strategy::cephalo(4, sim::strategy::Attention::Eager)
        };
        let p = under(&plan(&batch, &[1, 1, 1, 1], None), strategy);
        let base = build(workload(cluster.clone(), "llama-tiny", NumFormat::Fp16, gb), &ProfileSet::new(), None);
        let fast = build(workload(with_link_doubled(&cluster, which), "llama-tiny", NumFormat::Fp16, gb), &ProfileSet::new(), None);
        let (a, b) = (simulate(&base, &p, &SimOptions::default()), simulate(&fast, &p, &SimOptions::default()));
        prop_assume!(a.is_ok(), "{:?}", a.as_ref().err());
        let (a, b) = (a.unwrap(), b.unwrap());
        prop_assert!(b.iteration_ms <= a.iteration_ms * (1.0 + 1e-9), "{} > {}", b.iteration_ms, a.iteration_ms);
    }
}

/// Node templates of the merging property: (TOML of one node, GPUs on it).
const NODE_TEMPLATES: [&str; 3] = [
    "[[nodes]]\nintra_link = \"nvlink-bridge\"\ngpus = [{ type = \"rtx-a6000\", count = 2 }]\n",
    "[[nodes]]\nnics = 2\nnic_gbit_s = 100\ngpus = [{ type = \"l4\", count = 2 }]\n",
    "[[nodes]]\nintra_link = \"nvswitch\"\nnics = 2\nnic_gbit_s = 200\ngpudirect_rdma = true\ngpus = [{ type = \"a100-80gb\", count = 2 }]\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Simulating one node per class of identical nodes gives, to the byte,
    /// the report of simulating every node: any mix of repeated node types,
    /// plans that give some twins different work, every sharding (hybrid
    /// groups inside a node and across two), accumulation and offload,
    /// links shared and interference on or off.
    #[test]
    fn merging_identical_nodes_changes_nothing(
        nodes in prop::collection::vec(0usize..3, 2..7),
        batch_of_type in prop::collection::vec(1u32..6, 3),
        odd in prop::option::of((0usize..6, 1u32..4)),
        micro in 1u32..3,
        sharding in 0usize..4,
        accumulation in 0usize..2,
        offload in 0usize..3,
        contention in any::<bool>(),
    ) {
        use sim::strategy::{Accumulation, Offload, Sharding, Strategy, Attention};
        let mut nodes = nodes;
        if sharding == 3 && nodes.len() % 2 == 1 {
            nodes.pop();
        }
        let toml: String = std::iter::once("[network]\nbw_gbit_s = 50\n")
            .chain(nodes.iter().map(|&t| NODE_TEMPLATES[t]))
            .collect();
        let cluster = cluster_toml(&toml);
        let ranks = cluster.len();
        let mut batch: Vec<u32> = cluster.gpus.iter().map(|g| batch_of_type[nodes[g.node]]).collect();
        if let Some((n, b)) = odd {
            // One node's first GPU gets other work: its node is its own class.
            if let Some(g) = cluster.gpus.iter().find(|g| g.node == n % nodes.len()) {
                batch[g.rank] += b;
            }
        }
        let (sharding, group) = match sharding {
            0 => (Sharding::Full, ranks),
            1 => (Sharding::NoShard, ranks),
            2 => (Sharding::Hybrid, 2),
            _ => (Sharding::Hybrid, 4),
        };
        let strategy = Strategy {
            sharding,
            shard_group: group as u32,
            accumulation: [Accumulation::Layered, Accumulation::NoSync][accumulation],
            offload: [Offload::None, Offload::Activations, Offload::Optimizer][offload],
            ..Strategy::cephalo(ranks as u32, Attention::Eager)
        };
        let micros: Vec<u32> = batch.iter().map(|&b| micro.min(b)).collect();
        let p = under(&plan(&batch, &micros, None), strategy);
        let gb: u32 = batch.iter().sum();
        let costs = build(workload(cluster, "llama-tiny", NumFormat::Fp16, gb), &ProfileSet::new(), None);
        let opts = SimOptions { contention, ..SimOptions::default() };
        prop_assume!(simulate(&costs, &p, &opts).is_ok());
        let r = check(&costs, &p, &opts);
        let classes = sim::iteration::node_classes(&costs, &p, &opts);
        let distinct: std::collections::BTreeSet<usize> = classes.rep_node.iter().copied().collect();
        prop_assert!(distinct.len() <= costs.workload.cluster.nodes.len());
        prop_assert_eq!(simulate(&costs, &p, &opts).unwrap().simulated_gpus, classes.simulated_ranks());
        prop_assert!(r.iteration_ms > 0.0);
        // The fast model merges the same nodes and changes no number either.
        let whole = SimOptions { merge_identical_nodes: false, ..opts };
        let (a, b) = (
            sim::fast::evaluate(&costs, &p, &opts).unwrap(),
            sim::fast::evaluate(&costs, &p, &whole).unwrap(),
        );
        prop_assert_eq!(a, b);
    }
}

#[test]
fn identical_nodes_are_simulated_once() {
    // 6 nodes of two kinds, even work: two nodes simulated; the odd node's
    // class has one member.
    let mut toml = String::from("[network]\nbw_gbit_s = 100\n");
    for t in [0, 1, 0, 1, 0, 1] {
        toml.push_str(NODE_TEMPLATES[t]);
    }
    let cluster = cluster_toml(&toml);
    let costs = build(
        workload(cluster, "llama-tiny", NumFormat::Fp16, 48),
        &ProfileSet::new(),
        None,
    );
    let p = plan(&[4; 12], &[2; 12], None);
    let opts = SimOptions::default();
    let classes = sim::iteration::node_classes(&costs, &p, &opts);
    assert_eq!(classes.rep_node, vec![0, 1, 0, 1, 0, 1]);
    assert_eq!(classes.simulated_ranks(), 4);
    let r = check(&costs, &p, &opts);
    assert_eq!(simulate(&costs, &p, &opts).unwrap().simulated_gpus, 4);
    assert_eq!(r.gpus.len(), 12);
    let mut odd = p.clone();
    let f = odd.gpus[8].state_fraction;
    odd.gpus[9] = sim::plan::rank::RankPlan::new(5, 2, f);
    odd.gpus[8] = sim::plan::rank::RankPlan::new(3, 2, f);
    let classes = sim::iteration::node_classes(&costs, &odd, &opts);
    assert_eq!(classes.rep_node, vec![0, 1, 0, 1, 4, 1]);
    check(&costs, &odd, &opts);
    // A trace shows every GPU.
    let traced = SimOptions {
        trace: true,
        ..opts
    };
    assert!(sim::iteration::node_classes(&costs, &p, &traced).is_identity());
}

#[test]
fn large_reports_print_identical_ranks_once() {
    // 20 nodes x 2 GPUs of two kinds, even work: 40 GPUs, one row per run
    // of identical ranks; 4 GPUs: one row per rank, as always.
    let mut toml = String::from("[network]\nbw_gbit_s = 100\n");
    for n in 0..20 {
        toml.push_str(NODE_TEMPLATES[usize::from(n >= 10)]);
    }
    let cluster = cluster_toml(&toml);
    let costs = build(
        workload(cluster, "llama-tiny", NumFormat::Fp16, 80),
        &ProfileSet::new(),
        None,
    );
    let r = simulate(
        &costs,
        &plan(&[2; 40], &[1; 40], None),
        &SimOptions::default(),
    )
    .unwrap();
    let table = r.to_table();
    let rows: Vec<&str> = table
        .lines()
        .take_while(|l| !l.starts_with("sources:"))
        .filter(|l| l.contains("analytic"))
        .collect();
    assert!(rows.len() < 10, "{table}");
    assert!(rows[0].trim_start().starts_with("0-"), "{table}");
    let small = costs_of_two_nodes();
    let r = simulate(
        &small,
        &plan(&[2; 4], &[1; 4], None),
        &SimOptions::default(),
    )
    .unwrap();
    let rows = r
        .to_table()
        .lines()
        .take_while(|l| !l.starts_with("sources:"))
        .filter(|l| l.contains("analytic"))
        .count();
    assert_eq!(rows, 4);
}

fn costs_of_two_nodes() -> CostModel {
    let toml = format!(
        "[network]\nbw_gbit_s = 100\n{}{}",
        NODE_TEMPLATES[0], NODE_TEMPLATES[0]
    );
    build(
        workload(cluster_toml(&toml), "llama-tiny", NumFormat::Fp16, 8),
        &ProfileSet::new(),
        None,
    )
}

/// Every reference block entry passes the physical checks the cost model
/// applies to the profiles it uses (times in range, no fall beyond noise,
/// fits positive where they serve, never faster than the GPU's peak), so
/// the checks catch corrupted input, not real measurements.
#[test]
fn every_reference_entry_is_physical() {
    let Some(p) = crate::common::reference_profiles() else {
        return;
    };
    let (g, m) = (
        sim::gpu::GpuCatalog::builtin(),
        sim::model::ModelCatalog::builtin(),
    );
    let mut checked = 0;
    let mut bad = Vec::new();
    for b in &p.blocks {
        let gpu = g.get(&b.gpu).unwrap();
        let model = m.get(&b.model).unwrap();
        let peak = gpu.peak_tflops(b.dtype).unwrap_or(0.0);
        if let Some(why) = b
            .curve
            .physical_problem(model.block_flops_fwd(b.seq_len), peak)
        {
            bad.push(format!("{}: {why}", b.curve.source));
        }
        checked += 1;
    }
    assert!(checked > 50, "only {checked} reference entries");
    assert!(
        bad.is_empty(),
        "{} of {checked}:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn an_all_to_all_runs_in_the_engine_and_shares_its_links() {
    use sim::comm::CollectiveKind;
    use sim::engine::{run, Category, NullObserver};
    // Two nodes of 8 H100 with a 400 Gbit/s NIC per GPU: a 256 MiB
    // all-to-all over all 16, priced by the cost model, lowered as one
    // collective op with its link shares.
    let node =
        "[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [{ type = \"h100-sxm\", count = 8 }]\n";
    let toml = format!("name = \"a2a\"\n[network]\nnics = 8\nnic_gbit_s = 400\n{node}{node}");
    let c = build(
        workload(cluster_toml(&toml), "gpt-1.3b", NumFormat::Bf16, 16),
        &ProfileSet::new(),
        None,
    );
    let a2a = CollectiveKind::AllToAll;
    let ranks: Vec<usize> = (0..16).collect();
    let pieces = vec![256.0 * 1024.0 * 1024.0; 16];
    let t = c.group_collective_ms(a2a, &ranks, &pieces);
    // Half of each buffer leaves the node through a ~46 GB/s NIC.
    let nic_bound = 0.5 * pieces[0] / 50e9 * 1e3;
    assert!(t > nic_bound && t < 1.3 * nic_bound, "{t} vs {nic_bound}");
    let shares = c.group_collective_shares(a2a, &ranks, &pieces, t);
    assert!(!shares.is_empty() && shares.iter().all(|&(_, s)| s > 0.0 && s <= 1.0));
    let ranks32: Vec<u32> = (0..16).collect();
    let graph = |copies: usize| {
        let mut g = Graph::new();
        let l = g.label(Category::AllToAll, "all_to_all");
        for stream in [Stream::Comm, Stream::Reduce].into_iter().take(copies) {
            let op = g.add_collective(&ranks32, stream, SimTime::from_ms(t), &[], l, &[]);
            g.add_shares(op, &shares);
        }
        g
    };
    let alone = run(&graph(1), &mut NullObserver).unwrap().makespan;
    assert_eq!(alone, SimTime::from_ms(t));
    // A second all-to-all on another communicator at the same time shares
    // every NIC: both take about twice as long.
    let mut rec = Recorder::default();
    let both = run(&graph(2), &mut rec).unwrap().makespan;
    assert!(
        both.as_ms() > 1.8 * t && both.as_ms() <= 2.0 * t + 1e-6,
        "{both:?} vs {t}"
    );
    assert_eq!(rec.ops.len(), 2 * 16);
}

/// One GPU with the optimizer offloaded: nothing to reduce, so its
/// gradient copies to the host wait for the backward that produces them,
/// and the host step for the last copy (they had no dependency and the
/// host step ran under the backward). The iteration is at least the
/// compute, then the last copy, the host step and the copy back; and the
/// closed form, which charges the same, follows it within 5%.
#[test]
fn one_gpu_offloaded_optimizer_waits_for_its_gradients() {
    use sim::strategy::{Offload, Sharding};
    let c = costs("a6000", "gpt-1.3b", NumFormat::Fp16, 4);
    for sharding in [Sharding::NoShard, Sharding::Full] {
        let s = sim::strategy::Strategy {
            sharding,
            offload: Offload::Optimizer,
            checkpointing: sim::strategy::Checkpointing::None,
            ..sim::strategy::Strategy::cephalo(1, sim::strategy::Attention::Eager)
        };
        let p = under(&plan(&[4], &[1], None), s);
        let r = check(&c, &p, &SimOptions::default());
        let routine = sim::data_parallel::Routine::new(&c, s);
        let total = c.workload.model.total_params() as f64;
        let g = &r.gpus[0];
        let compute = g.forward_ms + g.backward_ms + g.recompute_ms;
        let last_copy = c.host_copy_ms(0, c.unit_params()[0] as f64 * 4.0);
        let host = routine.optimizer_ms(0, total) + routine.params_up_ms(0, total);
        assert!(
            r.iteration_ms >= compute + last_copy + host - 1e-6,
            "{sharding:?}: iteration {:.1} ms, compute {compute:.1}, last gradient copy {last_copy:.1}, host step and copy back {host:.1}",
            r.iteration_ms
        );
        let cf = sim::planner::closed_form::ClosedForm::new(&c, s, 1).unwrap();
        let closed = cf.evaluate(&[(4, 1)]).unwrap().iteration_ms;
        assert!(
            (closed / r.iteration_ms - 1.0).abs() <= 0.05,
            "{sharding:?}: closed form {closed:.1} ms, simulated {:.1}",
            r.iteration_ms
        );
    }
}
