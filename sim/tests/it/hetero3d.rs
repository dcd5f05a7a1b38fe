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

/// Every layout puts each GPU in at most one stage, one GPU type per
/// stage, every TP group inside one node with a degree the model allows,
/// at most one stage per block; and the search holds layouts whose stages
/// differ in TP degree (per-type TP).
#[test]
fn layouts_are_same_type_stages_with_tp_inside_nodes() {
    let c = mixed(&THREE_TYPES, "llama2-13b", 2048, 96);
    let allowed = sim::tensor::degrees(&c.workload.model);
    let all = layouts(&c);
    assert!(all.len() > 10, "{} layouts", all.len());
    let node = |r: usize| c.workload.cluster.gpus[r].node;
    let mut mixed_tp = false;
    for l in &all {
        assert!(l.groups.len() <= c.workload.model.layers as usize);
        let mut seen = std::collections::HashSet::new();
        for (g, &t) in l.groups.iter().zip(&l.tps) {
            assert!(allowed.contains(&t), "TP {t}");
            assert!(g.len().is_multiple_of(t as usize));
            let ty = &c.gpu(g[0]).name;
            for grp in g.chunks(t as usize) {
                assert!(grp.iter().all(|&r| node(r) == node(grp[0])), "{grp:?}");
            }
            for &r in g {
                assert_eq!(&c.gpu(r).name, ty, "stage of mixed types: {g:?}");
                assert!(seen.insert(r), "rank {r} twice");
            }
        }
        mixed_tp |= l.tps.iter().any(|&t| t != l.tps[0]);
    }
    assert!(mixed_tp, "no layout gives types different TP degrees");
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
