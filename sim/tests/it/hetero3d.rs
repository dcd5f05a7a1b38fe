//! The heterogeneous 3D planner (`hetero-3d`): its layouts, its plans in
//! the simulator against `pipeline-hetero`'s, and its infeasibility.

use crate::common::calibrated_bf16;
use sim::cost::CostModel;
use sim::iteration::SimOptions;
use sim::planner::hetero3d::{layouts, Hetero3d};
use sim::planner::pipeline_hetero::HeteroPipeline;
use sim::planner::{Planner, PlannerOptions, Problem, SimJudge};
use sim::profile::ProfileSet;
use sim::simulate::simulate;
use sim::strategy::StrategySpec;

/// A mixed cluster of `spec` (GPU type, intra-node link, nodes of 8),
/// 100 Gbit/s between nodes, running `model` at `seq` tokens.
fn mixed(spec: &[(&str, &str, usize)], model: &str, seq: u32, batch: u32) -> CostModel {
    let mut toml = String::from("name = \"mixed\"\n[network]\nbw_gbit_s = 100\n");
    for &(gpu, link, nodes) in spec {
        for _ in 0..nodes {
            toml.push_str(&format!(
                "[[nodes]]\nintra_link = \"{link}\"\ngpus = [ {{ type = \"{gpu}\", count = 8 }} ]\n"
            ));
        }
    }
    calibrated_bf16(&toml, model, seq, batch)
}

const THREE_TYPES: [(&str, &str, usize); 3] = [
    ("h100-sxm", "nvswitch", 2),
    ("a100-40gb", "nvswitch", 2),
    ("l4", "pcie4", 2),
];

/// Every layout puts each GPU in at most one stage, every TP group inside
/// one node (one GPU type) with a degree the model allows, at most one
/// stage per block; a stage mixes types only in the layouts split by
/// speed (each stage a cross-section of the types, one TP degree); and
/// the search holds layouts whose stages differ in TP degree (per-type
/// TP) and layouts of mixed stages.
#[test]
fn layouts_are_same_type_stages_or_cross_sections_with_tp_inside_nodes() {
    let c = mixed(&THREE_TYPES, "llama2-13b", 2048, 96);
    let allowed = sim::tensor::degrees(&c.workload.model);
    let all = layouts(&c);
    assert!(all.len() > 10, "{} layouts", all.len());
    let node = |r: usize| c.workload.cluster.gpus[r].node;
    let (mut mixed_tp, mut cross) = (false, false);
    for l in &all {
        assert!(l.groups.len() <= c.workload.model.layers as usize);
        let mut seen = std::collections::HashSet::new();
        for (g, &t) in l.groups.iter().zip(&l.tps) {
            assert!(allowed.contains(&t), "TP {t}");
            assert!(g.len().is_multiple_of(t as usize));
            let ty = &c.gpu(g[0]).name;
            for grp in g.chunks(t as usize) {
                assert!(grp.iter().all(|&r| node(r) == node(grp[0])), "{grp:?}");
                assert!(grp.iter().all(|&r| c.gpu(r).name == c.gpu(grp[0]).name));
            }
            for &r in g {
                if !l.by_speed {
                    assert_eq!(&c.gpu(r).name, ty, "stage of mixed types: {g:?}");
                }
                assert!(seen.insert(r), "rank {r} twice");
            }
        }
        if l.by_speed {
            // Every stage holds a near-equal part of each type kept.
            assert!(l.tps.iter().all(|&t| t == l.tps[0]));
            let count =
                |g: &Vec<usize>, ty: &str| g.iter().filter(|&&r| c.gpu(r).name == ty).count();
            for ty in ["h100-sxm", "a100-40gb", "l4"] {
                let n: Vec<usize> = l.groups.iter().map(|g| count(g, ty)).collect();
                let (lo, hi) = (n.iter().min().unwrap(), n.iter().max().unwrap());
                assert!(hi - lo <= l.tps[0] as usize, "{ty}: {n:?}");
            }
            cross = true;
        }
        mixed_tp |= l.tps.iter().any(|&t| t != l.tps[0]);
    }
    assert!(mixed_tp, "no layout gives types different TP degrees");
    assert!(cross, "no layout of mixed stages");
}

/// `hetero-3d`'s plan validates, fits in the simulator, is deterministic,
/// and is no slower than `pipeline-hetero`'s (whose groupings it
/// searches too) on a mixed cluster.
#[test]
fn hetero3d_fits_and_is_no_slower_than_pipeline_hetero() {
    for (spec, model, seq, batch) in [
        (&THREE_TYPES[..], "llama2-13b", 2048u32, 96u32),
        (&THREE_TYPES[1..], "gpt-2.7b", 1024, 64),
    ] {
        let c = mixed(spec, model, seq, batch);
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
        let a = Hetero3d.plan(&problem).unwrap();
        a.plan
            .validate(c.ranks(), c.workload.global_batch, "hetero-3d")
            .unwrap();
        assert_eq!(a.plan, Hetero3d.plan(&problem).unwrap().plan);
        let o = SimOptions::default();
        let ra = simulate(&c, &a.plan, &o).unwrap();
        assert!(!ra.oom, "{model}: hetero-3d's plan runs out of memory");
        let b = HeteroPipeline.plan(&problem).unwrap();
        let rb = simulate(&c, &b.plan, &o).unwrap();
        assert!(
            ra.iteration_ms <= rb.iteration_ms * 1.001,
            "{model}: hetero-3d {:.1} ms, pipeline-hetero {:.1} ms",
            ra.iteration_ms,
            rb.iteration_ms
        );
        assert!(a.notes.iter().any(|n| n.starts_with("hetero-3d: ")));
    }
}

/// A model no layout can hold is infeasible, naming a stage, its GPUs
/// and the shortfall.
#[test]
fn hetero3d_says_when_nothing_fits() {
    let c = mixed(
        &[("l4", "pcie4", 1), ("a10g", "pcie4", 1)],
        "llama2-70b",
        4096,
        16,
    );
    let empty = ProfileSet::new();
    let options = PlannerOptions::default();
    let problem = Problem {
        costs: &c,
        profiles: &empty,
        options: &options,
        strategy: &StrategySpec::NONE,
        judge: None,
    };
    match Hetero3d.plan(&problem).unwrap_err() {
        sim::error::PlanError::Infeasible {
            message,
            shortfall_gib,
            rank,
        } => {
            assert!(
                message.contains("no 3D layout fits")
                    && message.contains("stage")
                    && shortfall_gib > 0.0
                    && rank.is_some(),
                "{message}"
            );
        }
        e => panic!("{e}"),
    }
}

/// Two stages, each a cross-section of 4 nodes of A100-80GB and 4 of L4
/// (TP 2 inside each node), GPT 2.7B at 1,024 tokens, 8 micro-batches of
/// 32 samples: each stage's 16 replicas take equal slices (`shares`
/// empty) or slices by speed (`shares` given).
fn cross_section_plan(split: bool) -> (CostModel, sim::plan::Plan) {
    use sim::plan::pipeline::{PipeSchedule, Pipeline, Stage};
    use sim::tensor::TensorParallel;
    let c = mixed(
        &[("a100-80gb", "nvswitch", 4), ("l4", "pcie4", 4)],
        "gpt-2.7b",
        1024,
        256,
    );
    let tp = TensorParallel {
        degree: 2,
        sequence_parallel: true,
        comm_overlap: false,
        experts: 1,
        expert_tensor: 2,
        dispatcher: Default::default(),
    };
    let strategy = crate::pipeline::pipe_strategy(
        c.ranks(),
        sim::strategy::Sharding::NoShard,
        sim::strategy::Checkpointing::None,
    );
    let mut strategy = strategy;
    strategy.attention = sim::strategy::Attention::Flash;
    strategy.param_dtype = sim::precision::NumFormat::Bf16;
    // Samples per ms of each type's block forward and backward at the
    // even slice (2 samples), by type: A100 ranks 0-31, L4 ranks 32-63.
    let mut rows = sim::pipeline::costs::Rows::new(&c, &strategy);
    let mut speed = |r: usize| -> f64 {
        let g = sim::pipeline::estimate::group_cost(&c, &strategy, &mut rows, &[r, r + 1], 2, &tp);
        2.0 / g.unwrap().block_ms
    };
    let (fast, slow) = (speed(0), speed(32));
    assert!(
        fast > 1.5 * slow,
        "A100 {fast:.3} vs L4 {slow:.3} samples/ms"
    );
    // 32 samples over 8 A100 and 8 L4 replicas in proportion to speed.
    let a = ((32.0 * fast / (fast + slow)) / 8.0).round() as u32;
    let shares: Vec<u32> = (0..16).map(|j| if j < 8 { a } else { 4 - a }).collect();
    assert!(a > 2 && a < 4, "{a}");
    let stage = |s: u32| Stage {
        blocks: c.workload.model.layers / 2,
        gpus: (0..16)
            .map(|i| s * 16 + i)
            .chain((0..16).map(|i| 32 + s * 16 + i))
            .collect(),
        tp: 2,
        shares: if split { shares.clone() } else { Vec::new() },
        chunks: Vec::new(),
    };
    let mut pipe = Pipeline::new(PipeSchedule::OneFOneB, 8, vec![stage(0), stage(1)]);
    pipe.sequence_parallel = true;
    let plan = sim::plan::Plan::pipelined("manual", strategy, pipe, c.ranks(), 256);
    (c, plan)
}

/// Replicas of a stage that mixes GPU types, with micro-batches split by
/// speed: each GPU's batch follows its share, the plan file carries the
/// shares, the simulated iteration beats the even split's by more than
/// 15%, the closed form follows the simulation, and merging identical
/// nodes changes nothing in the report.
#[test]
fn replicas_split_by_speed_beat_an_even_split() {
    let (c, even) = cross_section_plan(false);
    let (_, split) = cross_section_plan(true);
    split.validate(c.ranks(), 256, "test").unwrap();
    let pipe = split.pipeline.as_ref().unwrap();
    let shares = &pipe.stages[0].shares;
    // Each GPU: its replica's share of each of the 8 micro-batches.
    assert_eq!(split.gpus[0].batch, 8 * shares[0]);
    assert_eq!(split.gpus[32].batch, 8 * shares[8]);
    assert!(split.gpus[0].batch > split.gpus[32].batch);
    let json = serde_json::to_string(&split).unwrap();
    assert!(json.contains("\"shares\""));
    assert_eq!(
        serde_json::from_str::<sim::plan::Plan>(&json).unwrap(),
        split
    );
    let o = SimOptions::default();
    let re = simulate(&c, &even, &o).unwrap();
    let rs = simulate(&c, &split, &o).unwrap();
    let whole = SimOptions {
        merge_identical_nodes: false,
        ..o
    };
    crate::simulate::assert_same_report(&rs, &simulate(&c, &split, &whole).unwrap());
    assert!(!re.oom && !rs.oom);
    assert!(
        rs.iteration_ms < 0.85 * re.iteration_ms,
        "split {:.1} ms vs even {:.1} ms",
        rs.iteration_ms,
        re.iteration_ms
    );
    assert!(rs.simulated_gpus < c.ranks(), "identical nodes merged");
    for (plan, r) in [(&even, &re), (&split, &rs)] {
        let e =
            sim::pipeline::estimate::estimate(&c, plan, plan.pipeline.as_ref().unwrap()).unwrap();
        let ratio = e.iteration_ms / r.iteration_ms;
        assert!(
            (0.9..=1.15).contains(&ratio),
            "estimate {:.1} ms vs simulated {:.1} ms",
            e.iteration_ms,
            r.iteration_ms
        );
    }
}
