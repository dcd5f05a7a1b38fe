//! Folding identical micro-batch passes ([`sim::fold`]) changes nothing
//! but the size of the simulated graph: the simulator and the fast model
//! report, on varied plans of many passes, what simulating every pass
//! reports; folding happens where it should (and never under a trace).

use crate::common::{build, cluster_toml, costs, gpu_list, reference_profiles, under, workload};
use proptest::prelude::*;
use sim::cost::CostModel;
use sim::iteration::SimOptions;
use sim::plan::rank::RankPlan;
use sim::plan::Plan;
use sim::precision::NumFormat;
use sim::profile::ProfileSet;
use sim::report::Report;
use sim::session::resolve_strategy;
use sim::simulate::simulate;
use sim::strategy::{Accumulation, Checkpointing, Offload, Sharding, StrategySpec};

/// Two JSON values equal, numbers to 1e-12 relative (weighted sums of
/// floating-point bytes round differently from repeated additions).
fn same_json(a: &serde_json::Value, b: &serde_json::Value, path: &str) -> Result<(), String> {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            if x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()) {
                Ok(())
            } else {
                Err(format!("{path}: {x} vs {y}"))
            }
        }
        (V::Array(x), V::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .try_for_each(|(i, (x, y))| same_json(x, y, &format!("{path}[{i}]"))),
        (V::Object(x), V::Object(y)) if x.len() == y.len() => x.iter().try_for_each(|(k, v)| {
            let w = y.get(k).ok_or_else(|| format!("{path}.{k} missing"))?;
            same_json(v, w, &format!("{path}.{k}"))
        }),
        _ if a == b => Ok(()),
        _ => Err(format!("{path}: {a} vs {b}")),
    }
}

/// `folded` says what `full` (every pass simulated) says, but for the size
/// of the simulated graph.
fn assert_same_report(folded: &Report, full: &Report) {
    assert_eq!(full.folded_passes, 0);
    let mut f = folded.clone();
    f.ops = full.ops;
    f.events = full.events;
    f.folded_passes = 0;
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&f.to_json()).unwrap(),
        serde_json::from_str(&full.to_json()).unwrap(),
    );
    if let Err(e) = same_json(&a, &b, "report") {
        panic!("folded vs full simulation: {e}");
    }
    assert_eq!(folded.iteration_ms, full.iteration_ms, "to the ns");
}

/// Simulates `plan` folded and in full, holds them (and the fast model's
/// two evaluations) equal, and returns the folded and the full report.
fn check_fold(c: &CostModel, plan: &Plan, opts: &SimOptions) -> (Report, Report) {
    let folded = simulate(c, plan, opts).unwrap();
    let unfolded = SimOptions {
        fold_passes: false,
        ..*opts
    };
    let full = simulate(c, plan, &unfolded).unwrap();
    assert_same_report(&folded, &full);
    let (ff, fu) = (
        sim::fast::evaluate(c, plan, opts).unwrap(),
        sim::fast::evaluate(c, plan, &unfolded).unwrap(),
    );
    assert_eq!(ff, fu, "fast model folded vs full");
    (folded, full)
}

/// A plan of `batch` samples per rank in `micro` micro-batches each under
/// `spec`, with state in even shards.
fn plan_under(c: &CostModel, spec: &StrategySpec, batch: &[u32], micro: &[u32]) -> Option<Plan> {
    let s = resolve_strategy(c, spec).ok()?;
    Some(under(
        &Plan::from_lists(batch, micro, None, "test").ok()?,
        s,
    ))
}

const NODES: [&str; 3] = [
    "[[nodes]]\ngpus = [{ type = \"l4\", count = 1 }, { type = \"t4\", count = 1 }]\n",
    "[[nodes]]\nnics = 1\nnic_gbit_s = 25\ngpus = [{ type = \"a10g\", count = 2 }]\n",
    "[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [{ type = \"a100-80gb\", count = 2 }]\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Any sharding, micro-batch-major accumulation, recompute and offload;
    /// passes of two sizes per GPU, a GPU that runs out of micro-batches
    /// early or has none; links shared or not, prefetch and blocking
    /// collectives on or off: the folded simulation is the full one.
    #[test]
    fn folding_passes_changes_nothing(
        nodes in prop::collection::vec(0usize..3, 1..4),
        passes in 14u32..70,
        per in prop::collection::vec((1u32..4, 0u32..70), 6),
        short in prop::option::of(0usize..6),
        sharding in 0usize..4,
        sync in any::<bool>(),
        ckpt in 0usize..3,
        offload in 0usize..3,
        contention in any::<bool>(),
        prefetch in any::<bool>(),
        blocking in any::<bool>(),
    ) {
        let toml: String = std::iter::once("[network]\nbw_gbit_s = 10\n")
            .chain(nodes.iter().map(|&t| NODES[t]))
            .collect();
        let cluster = cluster_toml(&toml);
        let ranks = cluster.len();
        let mut batch: Vec<u32> = (0..ranks).map(|r| per[r].0 * passes + per[r].1 % passes).collect();
        let mut micro = vec![passes; ranks];
        if let Some(s) = short.filter(|&s| s < ranks) {
            // Fewer micro-batches (or no samples) on one GPU.
            micro[s] = passes / 3;
            batch[s] = if micro[s] == 0 { 0 } else { batch[s].min(2 * micro[s]).max(micro[s]) };
        }
        let gb = batch.iter().sum();
        let c = build(workload(cluster, "llama-tiny", NumFormat::Fp16, gb), &ProfileSet::new(), None);
        let spec = StrategySpec {
            sharding: Some([Sharding::Full, Sharding::GradOp, Sharding::NoShard, Sharding::Hybrid][sharding]),
            shard_group: (sharding == 3).then_some(2),
            accumulation: Some(if sync { Accumulation::Sync } else { Accumulation::NoSync }),
            checkpointing: Some([Checkpointing::Full, Checkpointing::Selective, Checkpointing::None][ckpt]),
            offload: Some([Offload::None, Offload::Activations, Offload::Optimizer][offload]),
            ..StrategySpec::default()
        };
        let Some(p) = plan_under(&c, &spec, &batch, &micro) else {
            return Err(TestCaseError::reject("strategy does not resolve here"));
        };
        let opts = SimOptions { contention, prefetch, blocking_collectives: blocking, ..SimOptions::default() };
        prop_assume!(simulate(&c, &p, &opts).is_ok());
        let (r, full) = check_fold(&c, &p, &opts);
        prop_assert!(r.folded_passes < passes);
        prop_assert!(r.ops <= full.ops);
    }
}

#[test]
fn long_runs_fold_and_traces_do_not() {
    let c = costs("l4,l4,a10g,t4", "llama-tiny", NumFormat::Fp16, 4 * 300);
    // 100 passes of 3 samples everywhere: one run (but for the first and
    // last passes under no-sync); then sizes that change on every GPU.
    for sync in [false, true] {
        let batch = [300u32; 4];
        let spec = StrategySpec {
            sharding: Some(Sharding::Full),
            accumulation: Some(if sync {
                Accumulation::Sync
            } else {
                Accumulation::NoSync
            }),
            ..StrategySpec::default()
        };
        let p = plan_under(&c, &spec, &batch, &[100; 4]).unwrap();
        let (r, full) = check_fold(&c, &p, &SimOptions::default());
        assert!(r.folded_passes >= 60, "{} passes folded", r.folded_passes);
        assert!(
            3 * r.ops < full.ops,
            "{} of {} ops simulated",
            r.ops,
            full.ops
        );
    }
    let spec = StrategySpec {
        sharding: Some(Sharding::Full),
        accumulation: Some(Accumulation::Sync),
        ..StrategySpec::default()
    };
    let mixed = plan_under(&c, &spec, &[260, 333, 300, 307], &[100; 4]).unwrap();
    let (r, _) = check_fold(&c, &mixed, &SimOptions::default());
    assert!(r.folded_passes > 0);
    let traced = SimOptions {
        trace: true,
        ..SimOptions::default()
    };
    let t = simulate(&c, &mixed, &traced).unwrap();
    assert_eq!(t.folded_passes, 0, "a trace shows every pass");
    assert_eq!(t.iteration_ms, r.iteration_ms);
}

/// The paper cluster's plan for 65,536 samples (GPT-2.7B, its profiles:
/// 3,072 passes, two micro-batch sizes per GPU) simulates folded as it
/// does pass by pass.
#[test]
fn the_paper_clusters_largest_batch_folds_exactly() {
    let Some(profiles) = reference_profiles() else {
        return;
    };
    let w = workload(
        gpu_list("l4,l4,a6000,p40"),
        "gpt-2.7b",
        NumFormat::Fp16,
        65536,
    );
    let c = build(w, profiles, Some("paper"));
    let spec = StrategySpec {
        sharding: Some(Sharding::Full),
        accumulation: Some(Accumulation::Sync),
        checkpointing: Some(Checkpointing::Selective),
        ..StrategySpec::default()
    };
    let s = resolve_strategy(&c, &spec).unwrap();
    let mut p = Plan::from_lists(&[12613, 12613, 34322, 5988], &[3072; 4], None, "test")
        .unwrap()
        .with_strategy(s);
    let fr = [0.2388, 0.2388, 0.2612, 0.2612];
    for (gp, f) in p.gpus.iter_mut().zip(fr) {
        *gp = RankPlan::new(gp.batch, gp.microbatches, f);
    }
    let (r, _) = check_fold(&c, &p, &SimOptions::default());
    assert!(r.folded_passes > 2900, "{}", r.folded_passes);
}
