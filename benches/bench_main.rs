//! Criterion benchmarks: `engine_*` groups (the discrete-event FSDP
//! simulator) and `planner_*` groups (planners). Throughput is reported in
//! simulated engine events per second (one start + one end per op).
//!
//! Run with `cargo bench --bench bench_main [-- GROUP]`.

use criterion::{criterion_group, criterion_main};

// ---- engine_* ---------------------------------------------------------------

mod engine {
    use criterion::{Criterion, Throughput};
    use sim::cluster::Cluster;
    use sim::cost::{CostModel, CostOptions, Workload};
    use sim::dtype::Dtype;
    use sim::engine::{run, NullObserver};
    use sim::fsdp::{build_graph, simulate, SimOptions};
    use sim::gpu::GpuCatalog;
    use sim::model::ModelCatalog;
    use sim::perfmodel::Roofline;
    use sim::plan::Plan;
    use sim::profile::ProfileSet;
    use std::hint::black_box;

    /// 1,024 GPUs of 4 types: 128 nodes x 8 (32 nodes of each type),
    /// NVLink or PCIe inside a node, 200 Gbit/s between nodes.
    fn cluster() -> Cluster {
        let types = [
            ("a100-80gb", "nvlink"),
            ("h100-sxm", "nvlink"),
            ("l40s", "pcie4"),
            ("a10g", "pcie4"),
        ];
        let mut toml = String::from(
            "name = \"bench-1024\"\n[network]\nbw_gbit_s = 200.0\nlatency_us = 10.0\n",
        );
        for n in 0..128 {
            let (gpu, link) = types[n / 32];
            toml.push_str(&format!(
                "[[nodes]]\nname = \"n{n}\"\nintra_link = \"{link}\"\ngpus = [ {{ type = \"{gpu}\", count = 8 }} ]\n"
            ));
        }
        Cluster::from_toml(&toml, "bench", GpuCatalog::builtin()).expect("bench cluster")
    }

    /// LLaMA-65B (80 blocks), 4 micro-batches of 1 sample on every GPU,
    /// even state shards (analytic costs; the memory verdict is irrelevant).
    fn case() -> (CostModel, Plan) {
        let cluster = cluster();
        let model = ModelCatalog::builtin()
            .lookup("llama-65b", "bench")
            .unwrap()
            .clone();
        assert_eq!(model.layers, 80);
        let ranks = cluster.len();
        let w = Workload {
            cluster,
            seq_len: model.seq_len,
            model,
            dtype: Dtype::Bf16,
            global_batch: 4 * ranks as u32,
        };
        let costs = CostModel::build(
            w,
            &ProfileSet::new(),
            &Roofline::default(),
            CostOptions::default(),
        )
        .expect("bench costs");
        let plan = Plan::from_lists(&vec![4; ranks], &vec![4; ranks], None, "bench").unwrap();
        (costs, plan)
    }

    /// `engine_1024_gpus`: `simulate` = build the task graph + run + report;
    /// `run` = the engine alone on a prebuilt graph.
    pub fn engine_1024_gpus(c: &mut Criterion) {
        let (costs, plan) = case();
        let opts = SimOptions::default();
        let ig = build_graph(&costs, &plan, &opts).unwrap();
        let stats = run(&ig.graph, &mut NullObserver).unwrap();
        let mut g = c.benchmark_group("engine_1024_gpus");
        g.sample_size(10);
        g.throughput(Throughput::Elements(stats.events));
        g.bench_function("simulate", |b| {
            b.iter(|| black_box(simulate(&costs, &plan, &opts).unwrap().iteration_ms))
        });
        g.bench_function("run", |b| {
            b.iter(|| black_box(run(&ig.graph, &mut NullObserver).unwrap().makespan))
        });
        g.bench_function("build_graph", |b| {
            b.iter(|| black_box(build_graph(&costs, &plan, &opts).unwrap().graph.len()))
        });
        g.finish();
    }
}

criterion_group!(engine_benches, engine::engine_1024_gpus);

// ---- planner_* (append planner groups below and to criterion_main!) ---------

criterion_main!(engine_benches);
