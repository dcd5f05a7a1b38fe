//! Jobs that must be rejected before any rank starts, and the stub API.

use exec::{AdamConfig, BlockConfig, DeviceKind, Dtype, ExecError, Job, LaunchOptions, RankPlan};

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
        dtype: Dtype::Fp32,
        seed: 42,
        threads: Some(1),
        measure_wait: true,
        return_params: false,
        return_grads: false,
        fault: None,
        pipeline: None,
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
    half.dtype = Dtype::Bf16;
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
        dtype: Dtype::Fp32,
        micro_batch_sizes: vec![1],
        warmup: 0,
        repetitions: 1,
        threads: Some(1),
    });
    if cfg!(feature = "torch") {
        assert!(r.is_ok(), "{r:?}");
    } else {
        eprintln!("skipping real execution: cephalo-exec built without `--features torch`");
        assert!(matches!(r, Err(ExecError::NotCompiled)));
    }
}
