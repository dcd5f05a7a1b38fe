//! Jobs that must be rejected before any rank starts, and the stub API.

use exec::{
    AdamConfig, BlockConfig, DeviceKind, ExecError, Job, LaunchOptions, NumFormat, RankPlan,
};

pub(crate) fn job(plan: &[(usize, usize, f64)], model: BlockConfig) -> Job {
    Job {
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
        iterations: 3,
        warmup_iterations: 0,
        adam: AdamConfig::default(),
        device: DeviceKind::Cpu,
        dtype: NumFormat::Fp32,
        seed: 42,
        threads: Some(1),
        measure_wait: true,
        return_params: false,
        return_grads: false,
        fault: None,
        pipeline: None,
        compute_profile: None,
    }
}

fn field_of(e: ExecError) -> String {
    match e {
        ExecError::InvalidJob { field, .. } => field,
        other => panic!("expected InvalidJob, got {other}"),
    }
}

#[test]
fn bad_jobs_are_rejected_with_the_field() {
    let tiny = BlockConfig::tiny_gpt();
    let ok = job(&[(3, 1, 0.5), (5, 2, 0.2), (8, 3, 0.3)], tiny.clone());
    ok.validate(Some(3), Some(16)).unwrap();
    assert_eq!(field_of(ok.validate(Some(2), None).unwrap_err()), "plan");
    assert_eq!(
        field_of(ok.validate(None, Some(15)).unwrap_err()),
        "plan[*].batch"
    );
    let fr = job(&[(3, 1, 0.5), (5, 2, 0.2), (8, 3, 0.2)], tiny.clone());
    assert_eq!(
        field_of(fr.validate(None, None).unwrap_err()),
        "plan[*].state_fraction"
    );
    let mb = job(&[(3, 4, 1.0)], tiny.clone());
    assert_eq!(
        field_of(mb.validate(None, None).unwrap_err()),
        "plan[0].micro_batches"
    );
    let mut half = job(&[(3, 1, 1.0)], tiny.clone());
    half.dtype = NumFormat::Bf16;
    assert_eq!(field_of(half.validate(None, None).unwrap_err()), "dtype");
    let mut model = tiny;
    model.heads = 5;
    assert_eq!(
        field_of(job(&[(3, 1, 1.0)], model).validate(None, None).unwrap_err()),
        "model.heads"
    );
}

#[test]
fn launch_rejects_before_starting_any_rank() {
    // A rank program that does not exist proves no process was started:
    // the error is the validation, not a launch failure.
    let bad = job(&[(3, 1, 0.6), (5, 2, 0.6)], BlockConfig::tiny_gpt());
    let opts = LaunchOptions::new("/nonexistent/cephalo-exec-rank");
    match exec::launch(&bad, &opts) {
        Err(ExecError::InvalidJob { field, .. }) => assert_eq!(field, "plan[*].state_fraction"),
        other => panic!("expected InvalidJob, got {other:?}"),
    }
}

#[test]
fn stub_or_real_api_is_consistent() {
    let r = exec::profile_compute(&exec::ProfileConfig {
        model: BlockConfig::tiny_gpt(),
        device: DeviceKind::Cpu,
        dtype: NumFormat::Fp32,
        micro_batch_sizes: vec![1],
        warmup: 0,
        repetitions: 1,
        threads: Some(1),
        flush_bytes: 0,
        optimizer_samples: None,
    });
    if cfg!(feature = "torch") {
        assert!(r.is_ok(), "{r:?}");
    } else {
        eprintln!("skipping real execution: cephalo-exec built without `--features torch`");
        assert!(matches!(r, Err(ExecError::NotCompiled)));
    }
}

/// The job of `pipe` on `model` over `batch` samples (its per-rank
/// entries the pipeline's own), gradients accumulated without sync and
/// nothing offloaded as pipelines do, DDP inside the stages.
pub(crate) fn pipe_job(model: BlockConfig, pipe: sim::plan::pipeline::Pipeline, batch: u32) -> Job {
    let ranks: usize = pipe.stages.iter().map(|s| s.gpus.len()).sum();
    let mut j = job(&vec![(1, 1, 0.0); ranks], model);
    j.strategy.accumulation = sim::strategy::Accumulation::NoSync;
    j.strategy.offload = sim::strategy::Offload::None;
    j.strategy.sharding = sim::strategy::Sharding::NoShard;
    j.strategy.shard_group = ranks as u32;
    j.plan = pipe
        .rank_plans(ranks, batch, &j.strategy)
        .iter()
        .map(|p| RankPlan {
            batch: p.batch as usize,
            micro_batches: p.microbatches as usize,
            state_fraction: p.state_fraction,
        })
        .collect();
    j.pipeline = Some(pipe);
    j
}

#[test]
fn pipelines_the_trainer_cannot_run_are_rejected_with_why() {
    use sim::plan::pipeline::{PipeSchedule, Pipeline, Stage};
    let two = |tp: u32| {
        Pipeline::new(
            PipeSchedule::OneFOneB,
            4,
            vec![
                Stage {
                    tp,
                    ..Stage::new(1, vec![0, 1])
                },
                Stage {
                    tp,
                    ..Stage::new(1, vec![2, 3])
                },
            ],
        )
    };
    let ok = pipe_job(BlockConfig::tiny_gpt(), two(2), 8);
    ok.validate(Some(4), Some(8)).unwrap();
    assert_eq!(ok.global_batch(), 8);
    let reason = |j: &Job| match j.validate(Some(4), None).unwrap_err() {
        ExecError::InvalidJob { field, message } => format!("{field}: {message}"),
        other => panic!("expected InvalidJob, got {other}"),
    };
    // TP not dividing the heads (tiny GPT: 4 heads).
    let mut heads = BlockConfig::tiny_gpt();
    heads.heads = 2;
    heads.kv_heads = 2;
    heads.hidden = 32;
    let mut p = two(4);
    p.stages = vec![Stage {
        tp: 4,
        ..Stage::new(2, vec![0, 1, 2, 3])
    }];
    let r = reason(&pipe_job(heads, p, 8));
    assert!(
        r.starts_with("pipeline.stages[0].tp") && r.contains("attention heads"),
        "{r}"
    );
    // Stages that do not cover the model (2 blocks in 1 + 2).
    let mut cover = two(1);
    cover.stages[1].blocks = 2;
    let mut j = pipe_job(BlockConfig::tiny_gpt(), two(1), 8);
    j.pipeline = Some(cover);
    let r = reason(&j);
    assert!(
        r.starts_with("pipeline.stages[].blocks") && r.contains("3 blocks"),
        "{r}"
    );
    // A schedule the trainer cannot run, with why.
    let mut zb = two(1);
    zb.schedule = PipeSchedule::ZbH1;
    let r = reason(&pipe_job(BlockConfig::tiny_gpt(), zb, 8));
    assert!(
        r.starts_with("pipeline.schedule") && r.contains("weight-gradient"),
        "{r}"
    );
    // Hybrid sharding inside stages.
    let mut hy = pipe_job(BlockConfig::tiny_gpt(), two(1), 8);
    hy.strategy.sharding = sim::strategy::Sharding::Hybrid;
    hy.strategy.shard_group = 1;
    let r = reason(&hy);
    assert!(r.contains("hybrid"), "{r}");
    // Sequence parallelism with TP degrees that differ between stages.
    let mut sp = two(2);
    sp.sequence_parallel = true;
    sp.stages[1].tp = 1;
    let r = reason(&pipe_job(BlockConfig::tiny_gpt(), sp, 8));
    assert!(
        r.starts_with("pipeline.stages[1].tp") && r.contains("same TP degree"),
        "{r}"
    );
    // A rank left out of every stage.
    let mut out = pipe_job(BlockConfig::tiny_gpt(), two(1), 8);
    out.plan.push(out.plan[0].clone());
    let r = match out.validate(Some(5), None).unwrap_err() {
        ExecError::InvalidJob { field, message } => format!("{field}: {message}"),
        other => panic!("{other}"),
    };
    assert!(r.contains("placed"), "{r}");
}
