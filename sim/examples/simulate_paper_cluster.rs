//! Simulate one FSDP iteration of the Cephalo paper's plan on its 4-GPU
//! cluster, from the built-in catalogs and the analytic predictor alone (no
//! profile files), and check what the report promises.
//!
//! ```text
//!   node0 (PCIe 4.0 host, GPUs talk over PCIe)
//!   +-----------+-----------+---------------+-----------+
//!   | rank 0 L4 | rank 1 L4 | rank 2 A6000  | rank 3 P40|
//!   | b=13 n=1  | b=12 n=2  | b=34 n=1      | b=5  n=1  |
//!   +-----------+-----------+---------------+-----------+
//!        all-gather / reduce-scatter rings over all four
//! ```
//!
//! Run: `cargo run -p cephalo-sim --example simulate_paper_cluster`.

use sim::cluster::Cluster;
use sim::cost::{CostModel, CostOptions, Workload};
use sim::gpu::GpuCatalog;
use sim::iteration::SimOptions;
use sim::model::ModelCatalog;
use sim::perfmodel::Roofline;
use sim::plan::Plan;
use sim::precision::NumFormat;
use sim::profile::ProfileSet;
use sim::simulate::simulate;

fn main() {
    let cluster =
        Cluster::from_gpu_list("l4,l4,a6000,p40", "example", GpuCatalog::builtin()).unwrap();
    let model = ModelCatalog::builtin()
        .lookup("deepspeedgpt_2.7b", "example")
        .unwrap()
        .clone();
    let workload = Workload {
        cluster,
        seq_len: model.seq_len,
        model,
        dtype: NumFormat::Fp16,
        global_batch: 64,
    };
    let costs = CostModel::build(
        workload,
        &ProfileSet::new(),
        &Roofline::default(),
        CostOptions::default(),
    )
    .unwrap();
    let plan = Plan::from_lists(&[13, 12, 34, 5], &[1, 2, 1, 1], None, "example").unwrap();
    let report = simulate(
        &costs,
        &plan,
        &SimOptions {
            trace: true,
            ..SimOptions::default()
        },
    )
    .unwrap();
    print!("{}", report.to_table());

    // Every GPU's breakdown adds up to the iteration.
    for g in &report.gpus {
        let sum = g.compute_ms + g.exposed_comm_ms + g.copy_ms + g.host_ms + g.idle_ms;
        assert!((sum - report.iteration_ms).abs() < 1e-6);
    }
    // No GPU computes less than its own blocks: 32 x n x (2 f(m) + b(m)).
    for (r, p) in plan.gpus.iter().enumerate() {
        let m = p.microbatch_size;
        let blocks = 32.0
            * p.microbatches as f64
            * (2.0 * costs.block_fwd_ms(r, m) + costs.block_bwd_ms(r, m));
        assert!(report.iteration_ms >= blocks);
    }
    // The trace has a track per GPU stream; the JSON says null only on OOM.
    let trace = report.trace.as_ref().unwrap();
    assert_eq!(trace.processes.len(), 5); // 4 GPUs and the host
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["iteration_ms"].is_null(), report.oom);
}
