//! One spec of pins, one plan: a data-parallel plan spelled by the 3D shape
//! flags (`--tp 1 --pp 1 --microbatch-size b`) and by the per-GPU lists
//! (`--batch`, `--microbatches`) is the same plan, with the same strategy
//! resolved from the same pins, and gives a byte-identical report.

use crate::common;
use proptest::prelude::*;
use sim::iteration::SimOptions;
use sim::plan::file::PlanWorkload;
use sim::plan::shape::Shape3d;
use sim::precision::NumFormat;
use sim::session::{strategy_context, user_plan, PlanInput};
use sim::simulate::simulate;
use sim::strategy::{Accumulation, Checkpointing, Offload, Sharding, StrategySpec};

/// GPU types of the random clusters.
const GPUS: [&str; 5] = ["t4", "a10g", "v100-32gb", "a100-80gb", "h100-sxm"];

/// Small models, so every case simulates in milliseconds.
const MODELS: [&str; 3] = ["llama-tiny", "bert-large", "gpt-1.3b"];

/// Networks between nodes.
const NETS: [&str; 3] = [
    "bw_gbit_s = 25\n",
    "nics = 1\nnic_gbit_s = 100\ngpudirect_rdma = false\n",
    "nics = 8\nnic_gbit_s = 400\n",
];

#[derive(Debug, Clone)]
struct Case {
    /// GPU type per node.
    nodes: Vec<usize>,
    node_gpus: u32,
    net: usize,
    model: usize,
    sharding: Option<Sharding>,
    accumulation: Option<Accumulation>,
    checkpointing: Option<Checkpointing>,
    offload: Option<Offload>,
    /// Samples per micro-batch and micro-batches per GPU.
    micro_size: u32,
    micro_count: u32,
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(0..GPUS.len(), 1..=3),
        prop::sample::select(&[1u32, 2, 4, 8][..]),
        0..NETS.len(),
        0..MODELS.len(),
        prop::option::of(prop::sample::select(&Sharding::ALL[..])),
        prop::option::of(prop::sample::select(&Accumulation::ALL[..])),
        prop::option::of(prop_oneof![
            Just(Checkpointing::None),
            Just(Checkpointing::Full),
            Just(Checkpointing::Selective),
        ]),
        prop::option::of(prop::sample::select(&Offload::ALL[..])),
        1u32..=2,
        1u32..=3,
    )
        .prop_map(
            |(nodes, node_gpus, net, model, sh, acc, ck, off, micro_size, micro_count)| Case {
                nodes,
                node_gpus,
                net,
                model,
                sharding: sh,
                accumulation: acc,
                checkpointing: ck,
                offload: off,
                micro_size,
                micro_count,
            },
        )
}

impl Case {
    fn toml(&self) -> String {
        let mut t = format!("[network]\n{}", NETS[self.net]);
        for &g in &self.nodes {
            t.push_str(&format!(
                "[[nodes]]\nintra_link = \"pcie4\"\ngpus = [{{ type = \"{}\", count = {} }}]\n",
                GPUS[g], self.node_gpus
            ));
        }
        t
    }

    fn ranks(&self) -> u32 {
        self.nodes.len() as u32 * self.node_gpus
    }

    fn spec(&self) -> StrategySpec {
        // Hybrid shards within a node (two shard groups or more).
        let hybrid = self.sharding == Some(Sharding::Hybrid);
        StrategySpec {
            sharding: if hybrid && self.nodes.len() < 2 {
                Some(Sharding::Full)
            } else {
                self.sharding
            },
            shard_group: (hybrid && self.nodes.len() >= 2).then_some(self.node_gpus),
            accumulation: self.accumulation,
            checkpointing: self.checkpointing,
            offload: self.offload,
            ..StrategySpec::default()
        }
    }
}

/// The report of `input` (JSON and table), or the error's text: both
/// spellings must agree on either.
fn outcome(
    costs: &sim::cost::CostModel,
    input: PlanInput<'_>,
    spec: &StrategySpec,
) -> Result<(String, String, String), String> {
    let workload = PlanWorkload::of(costs);
    let ctx = strategy_context(costs);
    let plan = user_plan(input, spec, &ctx, &workload).map_err(|e| e.to_string())?;
    let report = simulate(costs, &plan, &SimOptions::default()).map_err(|e| e.to_string())?;
    Ok((
        serde_json::to_string(&plan.strategy).unwrap(),
        report.to_json(),
        report.to_table(),
    ))
}

/// For every data-parallel strategy (each axis pinned or left to the
/// defaults) on random clusters, the one-stage layout of the shape flags
/// and the per-GPU lists give the same strategy and byte-identical reports
/// (or the same error); most cases must give a report.
#[test]
fn one_stage_layout_is_the_data_parallel_plan() {
    use proptest::test_runner::{Config, RngSeed, TestRunner};
    let config = Config {
        cases: 48,
        rng_seed: RngSeed::Fixed(0x1a70),
        ..Config::default()
    };
    let reports = std::cell::Cell::new(0u32);
    TestRunner::new(config)
        .run(&arb_case(), |case| {
            let cluster = common::cluster_toml(&case.toml());
            let n = case.ranks();
            let batch = n * case.micro_size * case.micro_count;
            let w = common::workload(cluster, MODELS[case.model], NumFormat::Fp16, batch);
            let costs = common::build(w, &sim::profile::ProfileSet::new(), None);
            let spec = case.spec();
            let shape = Shape3d {
                microbatch_size: case.micro_size,
                ..Shape3d::default()
            };
            let layers = costs.workload.model.layers;
            let by_shape = outcome(
                &costs,
                PlanInput::Shape {
                    shape: &shape,
                    layers,
                },
                &spec,
            );
            let local = vec![case.micro_size * case.micro_count; n as usize];
            let micro = vec![case.micro_count; n as usize];
            let by_lists = outcome(
                &costs,
                PlanInput::Lists {
                    batch: &local,
                    microbatches: &micro,
                    state_fractions: None,
                    origin: sim::plan::shape::ORIGIN,
                },
                &spec,
            );
            if by_shape.is_ok() {
                reports.set(reports.get() + 1);
            }
            prop_assert_eq!(by_shape, by_lists);
            Ok(())
        })
        .unwrap();
    assert!(
        reports.get() >= 24,
        "only {} of 48 cases gave a report",
        reports.get()
    );
}
