//! The 3D planner (`megatron`) against the simulator and hand-picked
//! shapes, on a homogeneous HGX-like cluster.

use crate::common::calibrated_bf16;
use sim::cost::CostModel;
use sim::iteration::SimOptions;
use sim::plan::shape::Shape3d;
use sim::plan::Plan;
use sim::planner::{self, Planner, PlannerOptions, Problem, SimJudge};
use sim::profile::ProfileSet;
use sim::simulate::simulate;
use sim::strategy::{Checkpointing, Sharding, StrategySpec};

/// `nodes` HGX nodes of 8 A100-80GB on NVSwitch, 8 NICs of 200 Gbit/s.
fn hgx(nodes: usize, model: &str, seq: u32, batch: u32) -> CostModel {
    let mut toml = String::from("name = \"hgx\"\n[network]\nnics = 8\nnic_gbit_s = 200\n");
    for _ in 0..nodes {
        toml.push_str("[[nodes]]\nintra_link = \"nvswitch\"\ngpus = [ { type = \"a100-80gb\", count = 8 } ]\n");
    }
    calibrated_bf16(&toml, model, seq, batch)
}

/// The plan of a hand-picked shape under the megatron planner's strategy
/// conventions (distributed optimizer, `ckpt` recompute).
fn manual(c: &CostModel, shape: Shape3d, ckpt: Checkpointing) -> Plan {
    let spec = StrategySpec {
        sharding: Some(Sharding::GradOp),
        checkpointing: Some(ckpt),
        accumulation: Some(sim::strategy::Accumulation::NoSync),
        offload: Some(sim::strategy::Offload::None),
        ..StrategySpec::NONE
    };
    let strategy = spec.resolve(&c.strategy_context()).unwrap();
    let pipe = shape
        .pipeline(c.ranks(), c.workload.model.layers, c.workload.global_batch)
        .unwrap();
    Plan::pipelined("manual", strategy, pipe, c.ranks(), c.workload.global_batch)
}

/// `megatron` returns a shape that fits in the simulator, keeps every TP
/// group in a node, is estimated within 15% of its simulation, and is no
/// slower than the shapes a user would pick by hand (Narayanan et al.'s
/// takeaways: TP up to the node, PP to fit, the rest DP).
#[test]
fn megatron_beats_hand_picked_shapes_and_its_estimate_holds() {
    let c = hgx(4, "llama2-13b", 4096, 128);
    let empty = ProfileSet::new();
    let options = PlannerOptions::default();
    let judge = SimJudge::new(&c);
    let problem = Problem {
        costs: &c,
        profiles: &empty,
        options: &options,
        strategy: &StrategySpec::NONE,
        judge: Some(&judge),
    };
    let (cands, stats, _) = planner::megatron::search(&problem).unwrap();
    assert!(stats.candidates > 100 && !cands.is_empty(), "{stats:?}");
    let planned = planner::megatron::Megatron.plan(&problem).unwrap();
    let pipe = planned.plan.pipeline.clone().unwrap();
    for st in &pipe.stages {
        for j in 0..st.dp() {
            let g = st.group(j);
            let node = |r: u32| c.workload.cluster.gpus[r as usize].node;
            assert!(
                g.iter().all(|&r| node(r) == node(g[0])),
                "TP group {g:?} spans nodes"
            );
        }
    }
    let best = simulate(&c, &planned.plan, &SimOptions::default()).unwrap();
    assert!(best.oom_gpus.is_empty(), "the plan runs out of memory");
    let est = cands
        .iter()
        .find(|x| x.plan == planned.plan)
        .expect("the plan is a candidate")
        .estimate_ms;
    let ratio = est / best.iteration_ms;
    assert!(
        (0.85..=1.15).contains(&ratio),
        "estimate {est:.1} ms vs simulated {:.1} ms",
        best.iteration_ms
    );
    let mut fit = 0;
    for (shape, ck) in [
        (
            Shape3d {
                tp: 8,
                pp: 1,
                ..Shape3d::default()
            },
            Checkpointing::Full,
        ),
        (
            Shape3d {
                tp: 8,
                pp: 2,
                ..Shape3d::default()
            },
            Checkpointing::Full,
        ),
        (
            Shape3d {
                tp: 4,
                pp: 2,
                sequence_parallel: true,
                ..Shape3d::default()
            },
            Checkpointing::SelectiveAttention,
        ),
        (
            Shape3d {
                tp: 2,
                pp: 4,
                ..Shape3d::default()
            },
            Checkpointing::Full,
        ),
    ] {
        let r = simulate(&c, &manual(&c, shape, ck), &SimOptions::default()).unwrap();
        if r.oom_gpus.is_empty() {
            fit += 1;
            assert!(
                best.iteration_ms <= r.iteration_ms * 1.001,
                "megatron {:.1} ms slower than TP {} PP {} ({}) at {:.1} ms",
                best.iteration_ms,
                shape.tp,
                shape.pp,
                ck.name(),
                r.iteration_ms
            );
        }
    }
    assert!(
        fit >= 2,
        "only {fit} hand-picked shapes fit: the comparison says little"
    );
}

/// A model no shape fits is infeasible, with the closest shortfall.
#[test]
fn megatron_says_when_nothing_fits() {
    let c = hgx(1, "llama2-70b", 4096, 8);
    let empty = ProfileSet::new();
    let options = PlannerOptions::default();
    let problem = Problem {
        costs: &c,
        profiles: &empty,
        options: &options,
        strategy: &StrategySpec::NONE,
        judge: None,
    };
    match planner::megatron::Megatron.plan(&problem).unwrap_err() {
        sim::error::PlanError::Infeasible {
            message,
            shortfall_gib,
            ..
        } => {
            assert!(
                message.contains("no Megatron shape") && shortfall_gib > 0.0,
                "{message}"
            );
        }
        e => panic!("{e}"),
    }
}

/// Identical replicas of a 3D plan are simulated once per node class and
/// the merged report equals the full simulation (every schedule, TP with
/// and without SP, replicas or the distributed optimizer).
#[test]
fn merging_identical_replicas_changes_nothing_in_3d() {
    let c = hgx(4, "llama2-7b", 2048, 64);
    let mut hybrid = 0;
    for (shape, ck) in [
        (
            Shape3d {
                tp: 2,
                pp: 2,
                ..Shape3d::default()
            },
            Checkpointing::Full,
        ),
        (
            Shape3d {
                tp: 4,
                pp: 2,
                sequence_parallel: true,
                schedule: sim::plan::pipeline::PipeSchedule::Interleaved,
                virtual_stages: 2,
                ..Shape3d::default()
            },
            Checkpointing::None,
        ),
        (
            Shape3d {
                tp: 8,
                pp: 2,
                schedule: sim::plan::pipeline::PipeSchedule::ZbH1,
                ..Shape3d::default()
            },
            Checkpointing::SelectiveAttention,
        ),
    ] {
        // ZeRO-1, FSDP and HSDP (shard groups of one node) inside the stages.
        for sharding in [Sharding::GradOp, Sharding::Full, Sharding::Hybrid] {
            let mut plan = manual(&c, shape, ck);
            plan.strategy.sharding = sharding;
            plan.strategy.shard_group = if sharding == Sharding::Hybrid {
                8
            } else {
                c.ranks() as u32
            };
            let pipe = plan.pipeline.clone().unwrap();
            let plan = Plan::pipelined("test", plan.strategy, pipe, c.ranks(), 64);
            if let Err(e) = plan.validate(c.ranks(), 64, "test") {
                // (no shard group of whole TP groups dividing the replicas)
                assert_eq!(sharding, Sharding::Hybrid, "{e}");
                continue;
            }
            hybrid += usize::from(sharding == Sharding::Hybrid);
            let merged = simulate(&c, &plan, &SimOptions::default()).unwrap();
            let whole = SimOptions {
                merge_identical_nodes: false,
                ..SimOptions::default()
            };
            let full = simulate(&c, &plan, &whole).unwrap();
            assert!(
                merged.simulated_gpus < full.simulated_gpus,
                "{shape:?}: nothing merged"
            );
            assert_eq!(merged.iteration_ms, full.iteration_ms, "{shape:?}");
            assert_eq!(merged.gpus, full.gpus, "{shape:?}");
            assert_eq!(merged.pipeline, full.pipeline, "{shape:?}");
        }
    }
    assert!(hybrid > 0, "no HSDP case ran");
}
