//! Trains a small GPT on 2 CPU ranks with unequal batches, micro-batch
//! counts and shards, and prints the per-iteration breakdown next to the
//! profiled block times. Run after `. scripts/exec-env.sh`:
//!
//! ```text
//! cargo run --release -p cephalo-exec --features torch,mpi --example cpu_run
//! ```
//!
//! Cluster sketch: one host, 2 cores, one rank per core
//! ```text
//!   [rank 0: b=3, n=1, r=0.4]  <-- MPI (shared memory) -->  [rank 1: b=5, n=2, r=0.6]
//! ```

use std::time::Duration;

use exec::{
    AdamConfig, BlockConfig, BlockKind, DeviceKind, Job, LaunchOptions, NumFormat, ProfileConfig,
    RankPlan,
};

fn main() {
    let model = BlockConfig {
        family: BlockKind::Gpt,
        layers: 4,
        hidden: 256,
        heads: 8,
        kv_heads: 8,
        ffn: 1024,
        vocab: 1024,
        seq_len: 64,
    };
    let prof = exec::profile_compute(&ProfileConfig {
        model: model.clone(),
        device: DeviceKind::Cpu,
        dtype: NumFormat::Fp32,
        micro_batch_sizes: vec![1, 2, 3],
        warmup: 2,
        repetitions: 7,
        threads: Some(1),
        flush_bytes: 0,
        optimizer_samples: None,
    })
    .expect("profile");
    for t in &prof.block {
        println!(
            "block m={}: fwd {:.2} ms, bwd {:.2} ms, recompute+bwd {:.2} ms",
            t.micro_batch_size, t.forward_ms, t.backward_ms, t.recompute_backward_ms
        );
    }
    println!(
        "adam per block: {:.3} ms ({:.2} ns/param)",
        prof.optimizer_ms_per_block, prof.optimizer_ns_per_param
    );
    let plan = [(3, 1, 0.4), (5, 2, 0.6)];
    let job = Job {
        model,
        plan: plan
            .iter()
            .map(|&(batch, micro_batches, state_fraction)| RankPlan {
                batch,
                micro_batches,
                state_fraction,
            })
            .collect(),
        strategy: sim::strategy::Strategy::cephalo(
            plan.len() as u32,
            sim::strategy::Attention::Eager,
        ),
        iterations: 5,
        warmup_iterations: 1,
        adam: AdamConfig::default(),
        device: DeviceKind::Cpu,
        dtype: NumFormat::Fp32,
        seed: 1,
        threads: Some(1),
        measure_wait: true,
        return_params: false,
        return_grads: false,
        fault: None,
        pipeline: None,
        compute_profile: None,
    };
    let mut opts = LaunchOptions::new(
        std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("cephalo-exec-rank"),
    );
    opts.timeout = Duration::from_secs(300);
    let rep = exec::launch(&job, &opts).expect("train");
    for it in &rep.iterations {
        let ranks: Vec<String> = it
            .ranks
            .iter()
            .map(|r| {
                format!(
                    "r{} compute {:.1} comm {:.1} wait {:.1}",
                    r.rank, r.compute_ms, r.comm_ms, r.wait_ms
                )
            })
            .collect();
        println!(
            "iter {}: {:.1} ms | {}",
            it.iteration,
            it.iteration_ms,
            ranks.join(" | ")
        );
    }
    println!(
        "median iteration: {:.1} ms; loss sums {:?}",
        rep.median_iteration_ms(),
        rep.loss_sums
    );
}
