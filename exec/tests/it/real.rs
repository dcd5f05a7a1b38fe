//! Real execution over MPI (features `torch` + `mpi`): the uneven-FSDP
//! proof, faults, and the profilers.

use std::path::Path;
use std::time::{Duration, Instant};

use exec::{BlockConfig, CollectiveConfig, ExecError, Fault, FaultKind, LaunchOptions, SelfComm};

use crate::validation::job;

/// Whether `mpirun` works; under CI=true a missing one fails the test.
pub(crate) fn mpi_ready() -> bool {
    if exec::launch::mpirun_available(Path::new("mpirun")) {
        return true;
    }
    let msg = "mpirun not found or not working: run `. scripts/exec-env.sh` first";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}");
    }
    eprintln!("skipping: {msg}");
    false
}

pub(crate) fn opts() -> LaunchOptions {
    let mut o = LaunchOptions::new(env!("CARGO_BIN_EXE_cephalo-exec-rank"));
    o.oversubscribe = true;
    o.timeout = Duration::from_secs(180);
    o
}

/// Largest |a - b| over all units, and the largest |b|.
pub(crate) fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> (f32, f32) {
    assert_eq!(a.len(), b.len());
    let mut d = 0f32;
    let mut m = 0f32;
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(y) {
            d = d.max((p - q).abs());
            m = m.max(q.abs());
        }
    }
    (d, m)
}

const STEPS: usize = 3;

/// Adam epsilon of the comparison runs (both sides use the same Adam).
///
/// Components whose true gradient is exactly zero (GPT's key biases: softmax
/// is invariant to them) come out of any f32 implementation as rounding
/// noise (~1e-11), and with eps = 1e-8 Adam turns that noise into steps of
/// about +-lr whose sign depends on summation order, so no two summation
/// orders agree there. eps = 1e-4, still far below the typical |g| of a
/// summed loss (1e-3..10), keeps that noise below 1e-7 lr.
const EPS: f64 = 1e-4;

/// Gradient tolerance, relative to the unit's largest |g|.
///
/// The distributed run and the reference sum the same terms in different
/// orders (micro-batch accumulation, per-rank partial sums inside the
/// reduce-scatter, batched vs split matmuls). Each gradient entry sums 256
/// token terms (16 samples x 16 tokens), each from reductions over <= 128
/// elements; with f32 unit roundoff 6e-8 the random-walk error is about
/// sqrt(384) * 6e-8 = 1.2e-6 of the terms' scale (measured: <= 7e-7 over 16
/// seeds). 1e-5 leaves ~10x margin, while any real mistake (a sample lost or
/// counted twice, a micro-batch or shard misplaced) moves the gradient by
/// ~1/16 of its size, 6000x the tolerance.
const GRAD_TOL_REL: f32 = 1e-5;

/// Parameter tolerance after STEPS Adam steps (absolute).
///
/// Adam's update lr * m_hat / (sqrt(v_hat) + eps) moves by at most about
/// lr * |dg| / eps for a gradient change dg (steepest near g = 0) and much
/// less where |g| >> eps. With the gradient differences above this stayed
/// <= 6.4e-7 over 16 seeded runs of both families. 1e-5 is 15x that and
/// 1/300 of the distance the parameters move (STEPS * lr = 3e-3). Adam is
/// nearly scale-invariant, so the gradient check above is what catches a
/// wrongly weighted gradient; this check catches wrong shards, moments or
/// bias correction on the local shard.
const PARAM_TOL: f32 = 1e-5;

pub(crate) fn sci(xs: &[f32]) -> String {
    xs.iter()
        .map(|x| format!("{x:.1e}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Per unit: max |a - b| / max |b|.
pub(crate) fn rel_diff_per_unit(a: &[Vec<f32>], b: &[Vec<f32>]) -> Vec<f32> {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let (d, m) = max_diff(std::slice::from_ref(x), std::slice::from_ref(y));
            d / m.max(f32::MIN_POSITIVE)
        })
        .collect()
}

/// The uneven 3-rank plan of the proofs: batches 3 / 5 / 8, micro-batch
/// counts 1 / 2 / 3, state fractions .5 / .2 / .3 (16 samples).
const UNEVEN: [(usize, usize, f64); 3] = [(3, 1, 0.5), (5, 2, 0.2), (8, 3, 0.3)];

/// The 4-rank hybrid plan: two shard groups of two, fractions .3 / .7 in
/// each (hybrid needs the same fraction at each position), batches 3 / 5 /
/// 4 / 4 in 1 / 2 / 3 / 2 micro-batches.
const HYBRID: [(usize, usize, f64); 4] = [(3, 1, 0.3), (5, 2, 0.7), (4, 3, 0.3), (4, 2, 0.7)];

fn check_against_reference(model: BlockConfig) {
    let j = job(&UNEVEN, model.clone());
    let s = j.strategy;
    check_strategy(model, &UNEVEN, s);
}

/// Worst differences of one strategy's run against the reference:
/// (largest per-unit relative gradient difference, largest |dparam|).
fn check_strategy(
    model: BlockConfig,
    plan: &[(usize, usize, f64)],
    strategy: sim::strategy::Strategy,
) -> (f32, f32) {
    check_strategy_on(model, plan, strategy, &opts())
}

/// [`check_strategy`] with the ranks started as `opts` says.
fn check_strategy_on(
    model: BlockConfig,
    plan: &[(usize, usize, f64)],
    strategy: sim::strategy::Strategy,
    opts: &LaunchOptions,
) -> (f32, f32) {
    let mut j = job(plan, model.clone());
    j.strategy = strategy;
    check_job(j, &format!("{plan:?}"), opts)
}

/// Trains `j` (its model, strategy, plan or pipeline; [`STEPS`] steps,
/// Adam's eps [`EPS`]) on its ranks as `opts` says and holds its first
/// gradients, final parameters, losses and timings against the
/// single-process reference on the same global batch; `what` names the
/// plan in the log. Returns (largest per-unit relative gradient
/// difference, largest |dparam|).
pub(crate) fn check_job(j: exec::Job, what: &str, opts: &LaunchOptions) -> (f32, f32) {
    let (g, d, _) = check_job_report(j, what, opts);
    (g, d)
}

/// [`check_job`], also returning the run's report.
pub(crate) fn check_job_report(
    mut j: exec::Job,
    what: &str,
    opts: &LaunchOptions,
) -> (f32, f32, exec::TrainReport) {
    let model = j.model.clone();
    let strategy = j.strategy;
    let ranks = j.plan.len();
    let batch = j.global_batch();
    j.iterations = STEPS;
    j.adam.eps = EPS;
    j.return_params = true;
    j.return_grads = true;
    let t = Instant::now();
    let rep = exec::launch(&j, opts).unwrap_or_else(|e| panic!("{e}"));
    let launch_s = t.elapsed().as_secs_f64();
    let refr = exec::reference_train(&model, batch, STEPS, &j.adam, j.seed).unwrap();
    let grads = rel_diff_per_unit(
        rep.first_grads.as_ref().expect("grads returned"),
        &refr.first_grads,
    );
    let (d, m) = max_diff(
        rep.final_params.as_ref().expect("params returned"),
        &refr.params,
    );
    let init = exec::reference_train(&model, batch, 0, &j.adam, j.seed).unwrap();
    let (moved, _) = max_diff(&init.params, &refr.params);
    eprintln!(
        "{:?} [{}]: {ranks} ranks {what} vs 1 process (b {batch}): first-step gradient \
         max rel diff per unit {}; after {STEPS} Adam steps max |dparam| = {d:.3e} \
         (max |param| {m:.3}, moved by up to {moved:.3e}); loss sums {:?} vs {:?}; launch {launch_s:.1} s",
        model.family,
        strategy.label(),
        sci(&grads),
        rep.loss_sums,
        refr.loss_sums
    );
    for (u, g) in grads.iter().enumerate() {
        assert!(
            *g <= GRAD_TOL_REL,
            "[{}] unit {u}: gradient differs by {g} (relative) > {GRAD_TOL_REL}",
            strategy.label()
        );
    }
    assert!(
        moved > 100.0 * PARAM_TOL,
        "training did not move the parameters ({moved})"
    );
    assert!(
        d <= PARAM_TOL,
        "[{}] parameters differ by {d} > {PARAM_TOL}",
        strategy.label()
    );
    for (a, b) in rep.loss_sums.iter().zip(&refr.loss_sums) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs(),
            "loss sums differ: {a} vs {b}"
        );
    }
    assert_eq!(rep.iterations.len(), STEPS);
    for it in &rep.iterations {
        assert_eq!(it.ranks.len(), ranks);
        assert!(it.iteration_ms > 0.0);
        for r in &it.ranks {
            assert!(r.compute_ms > 0.0 && r.comm_ms >= 0.0 && r.wait_ms >= 0.0);
            assert!(
                r.compute_ms + r.comm_ms + r.wait_ms <= r.own_iteration_ms * 1.01 + 0.5,
                "[{}] rank {}: compute {} + comm {} + wait {} > its iteration {}",
                strategy.label(),
                r.rank,
                r.compute_ms,
                r.comm_ms,
                r.wait_ms,
                r.own_iteration_ms
            );
            // Ranks leave the opening barrier up to a few scheduler quanta
            // apart (3 ranks on 2 cores, iterations of ~15 ms).
            let skew = (r.own_iteration_ms - it.iteration_ms).abs();
            assert!(
                skew < 0.5 * it.iteration_ms + 20.0,
                "rank {}: own iteration {} ms vs rank 0's {} ms",
                r.rank,
                r.own_iteration_ms,
                it.iteration_ms
            );
        }
    }
    (grads.iter().copied().fold(0.0, f32::max), d, rep)
}

/// The compute profile a job asks its ranks to take between the recorded
/// iterations comes back (every size, the mean of all ranks, positive
/// times), and leaves training as it is: the data-parallel and the stage
/// trainer still match one process.
#[test]
fn in_run_compute_profile_comes_back_and_leaves_training_alone() {
    if !mpi_ready() {
        return;
    }
    let in_run = exec::InRunProfile {
        micro_batch_sizes: vec![1, 3],
        warmup: 0,
        repetitions: 1,
        flush_bytes: 1 << 20,
    };
    let model = BlockConfig::tiny_gpt();
    let mut dp = job(&UNEVEN, model.clone());
    dp.compute_profile = Some(in_run.clone());
    let pipe = sim::plan::pipeline::Pipeline::new(
        sim::plan::pipeline::PipeSchedule::OneFOneB,
        2,
        vec![
            sim::plan::pipeline::Stage::new(1, vec![0]),
            sim::plan::pipeline::Stage::new(1, vec![1]),
        ],
    );
    let two = BlockConfig {
        layers: 2,
        ..model.clone()
    };
    let mut pp = crate::validation::pipe_job(two, pipe, 4);
    pp.compute_profile = Some(in_run);
    for (what, j) in [("dp, in-run profile", dp), ("pp2, in-run profile", pp)] {
        let ranks = j.plan.len();
        let (_, _, rep) = check_job_report(j, what, &opts());
        let p = rep
            .compute_profile
            .unwrap_or_else(|| panic!("{what}: no compute profile came back"));
        assert_eq!(p.concurrent_ranks, ranks, "{what}");
        for list in [&p.block, &p.embedding, &p.head] {
            let sizes: Vec<usize> = list.iter().map(|t| t.micro_batch_size).collect();
            assert_eq!(sizes, [1, 3], "{what}");
            for t in list {
                assert!(
                    t.forward_ms > 0.0 && t.recompute_backward_ms > t.forward_ms * 0.5,
                    "{what}: {t:?}"
                );
            }
        }
        assert!(p.optimizer_ms_per_block > 0.0, "{what}: {p:?}");
        assert_eq!(p.params_per_block, rep.unit_params[1], "{what}");
    }
}

/// Every strategy combination the trainer runs, on the uneven 3-rank plan
/// (hybrid: the 4-rank plan as 2 groups of 2), against one process on the
/// whole batch; prints the worst differences per strategy.
fn check_every_strategy(model: BlockConfig) {
    use sim::strategy::{Accumulation as A, Checkpointing as K, Offload as O, Sharding as S};
    let base = job(&UNEVEN, model.clone()).strategy;
    let with = |sh: S, acc: A, ck: K, off: O| sim::strategy::Strategy {
        sharding: sh,
        accumulation: acc,
        checkpointing: ck,
        offload: off,
        ..base
    };
    let mut cases = vec![];
    for (sh, acc, ck, off) in [
        (S::Full, A::Layered, K::None, O::Activations),
        (S::Full, A::Layered, K::Every(2), O::None),
        (S::Full, A::NoSync, K::None, O::None),
        (S::Full, A::NoSync, K::Full, O::Activations),
        (S::Full, A::Sync, K::Full, O::None),
        (S::Full, A::Sync, K::None, O::Optimizer),
        (S::GradOp, A::Layered, K::Full, O::None),
        (S::GradOp, A::NoSync, K::None, O::None),
        (S::GradOp, A::Sync, K::Every(2), O::None),
        (S::NoShard, A::Layered, K::Full, O::None),
        (S::NoShard, A::NoSync, K::None, O::None),
        (S::NoShard, A::Sync, K::Full, O::Optimizer),
    ] {
        cases.push((UNEVEN.to_vec(), with(sh, acc, ck, off)));
    }
    for (acc, ck) in [
        (A::Layered, K::Full),
        (A::NoSync, K::None),
        (A::Sync, K::Every(2)),
    ] {
        let s = sim::strategy::Strategy {
            shard_group: 2,
            ..with(S::Hybrid, acc, ck, O::None)
        };
        cases.push((HYBRID.to_vec(), s));
    }
    let mut worst = Vec::new();
    for (plan, s) in cases {
        let (g, d) = check_strategy(model.clone(), &plan, s);
        worst.push(format!("{}: grad {g:.1e} param {d:.1e}", s.label()));
    }
    eprintln!(
        "{:?} worst differences:\n  {}",
        model.family,
        worst.join("\n  ")
    );
}

#[test]
fn every_strategy_gpt_matches_single_process() {
    if mpi_ready() {
        check_every_strategy(BlockConfig::tiny_gpt());
    }
}

#[test]
fn every_strategy_llama_matches_single_process() {
    if mpi_ready() {
        check_every_strategy(BlockConfig::tiny_llama());
    }
}

#[test]
fn uneven_fsdp_gpt_matches_single_process() {
    if mpi_ready() {
        check_against_reference(BlockConfig::tiny_gpt());
    }
}

#[test]
fn uneven_fsdp_llama_matches_single_process() {
    if mpi_ready() {
        check_against_reference(BlockConfig::tiny_llama());
    }
}

#[test]
fn one_rank_layered_accumulation_matches_reference() {
    // In process, no MPI: b = 16 in 5 uneven micro-batches (4,3,3,3,3).
    let model = BlockConfig::tiny_llama();
    let mut j = job(&[(16, 5, 1.0)], model.clone());
    j.adam.eps = EPS;
    j.return_params = true;
    j.return_grads = true;
    let rep = exec::train(&j, &SelfComm).unwrap().unwrap();
    let refr = exec::reference_train(&model, 16, j.iterations, &j.adam, j.seed).unwrap();
    let grads = rel_diff_per_unit(rep.first_grads.as_ref().unwrap(), &refr.first_grads);
    let (d, _) = max_diff(rep.final_params.as_ref().unwrap(), &refr.params);
    eprintln!(
        "1 rank, 5 micro-batches vs full batch: gradient rel diff {}, max |dparam| = {d:.3e}",
        sci(&grads)
    );
    assert!(grads.iter().all(|g| *g <= GRAD_TOL_REL), "{grads:?}");
    assert!(d <= PARAM_TOL, "{d}");
}

fn check_fault(kind: FaultKind) {
    let j = job(&UNEVEN, BlockConfig::tiny_gpt());
    check_fault_in(kind, &UNEVEN, j.strategy);
}

/// A rank failing with `kind` in iteration 2 of `plan` under `strategy`
/// ends the whole job within seconds, with the failing rank named.
fn check_fault_in(
    kind: FaultKind,
    plan: &[(usize, usize, f64)],
    strategy: sim::strategy::Strategy,
) {
    let mut j = job(plan, BlockConfig::tiny_gpt());
    j.strategy = strategy;
    check_fault_job(j, kind, 1, &strategy.label());
}

/// Rank `rank` of `j` failing with `kind` in iteration 2 ends the whole
/// job within 30 s with that rank named, and leaves no rank running
/// (`name` marks this job's processes).
pub(crate) fn check_fault_job(mut j: exec::Job, kind: FaultKind, rank: usize, name: &str) {
    j.iterations = 4;
    j.fault = Some(Fault {
        rank,
        iteration: 2,
        kind,
    });
    let mut o = opts();
    let tag = format!(
        "fault-test-{}-{}",
        name.replace(' ', "_"),
        std::process::id()
    );
    o.rank_args = vec!["--tag".into(), tag.clone()];
    let t = Instant::now();
    let err = exec::launch(&j, &o).unwrap_err();
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "[{name}] {kind:?} on rank {rank} in iteration 2: job ended after {secs:.1} s with: {err}"
    );
    match &err {
        ExecError::RankFailed { status, .. } => assert_ne!(*status, 0),
        other => panic!("expected RankFailed, got {other}"),
    }
    assert!(
        err.to_string().contains(&format!("rank {rank}")),
        "the failing rank is not named: {err}"
    );
    // Well below the 180 s launch limit: the others did not hang.
    assert!(secs < 30.0, "took {secs} s");
    std::thread::sleep(Duration::from_millis(500));
    let left = processes_with(&tag);
    assert!(left.is_empty(), "ranks left running: {left:?}");
}

#[test]
fn faults_end_the_job_under_every_sharding() {
    use sim::strategy::{Accumulation, Sharding, Strategy};
    if !mpi_ready() {
        return;
    }
    let base = job(&UNEVEN, BlockConfig::tiny_gpt()).strategy;
    let hybrid = Strategy {
        sharding: Sharding::Hybrid,
        shard_group: 2,
        ..base
    };
    check_fault_in(FaultKind::Exit, &HYBRID, hybrid);
    let ddp = Strategy {
        sharding: Sharding::NoShard,
        ..base
    };
    check_fault_in(FaultKind::Panic, &UNEVEN, ddp);
    let zero2 = Strategy {
        sharding: Sharding::GradOp,
        accumulation: Accumulation::NoSync,
        ..base
    };
    check_fault_in(FaultKind::Abort, &UNEVEN, zero2);
}

#[test]
fn panicking_rank_ends_the_job() {
    if mpi_ready() {
        check_fault(FaultKind::Panic);
    }
}

#[test]
fn exiting_rank_ends_the_job() {
    if mpi_ready() {
        check_fault(FaultKind::Exit);
    }
}

#[test]
fn aborting_rank_ends_the_job() {
    if mpi_ready() {
        check_fault(FaultKind::Abort);
    }
}

/// Processes whose command line contains `tag`.
pub(crate) fn processes_with(tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(tag) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[test]
fn hung_rank_is_stopped_by_the_time_limit() {
    if mpi_ready() {
        check_hang(
            job(&[(3, 1, 0.5), (5, 2, 0.5)], BlockConfig::tiny_gpt()),
            "full",
        );
    }
}

#[test]
fn hung_rank_in_a_hybrid_job_is_stopped_by_the_time_limit() {
    if mpi_ready() {
        let mut j = job(&HYBRID, BlockConfig::tiny_gpt());
        j.strategy = sim::strategy::Strategy {
            sharding: sim::strategy::Sharding::Hybrid,
            shard_group: 2,
            ..j.strategy
        };
        check_hang(j, "hybrid");
    }
}

/// Rank 0 of `j` hangs in iteration 1: the launcher's limit (5 s) ends
/// the job and leaves no rank running (`name` tells concurrent tests'
/// processes apart).
fn check_hang(mut j: exec::Job, name: &str) {
    j.fault = Some(Fault {
        rank: 0,
        iteration: 1,
        kind: FaultKind::Hang,
    });
    let mut o = opts();
    o.timeout = Duration::from_secs(5);
    // Marks this job's processes (the rank program ignores unknown args).
    let tag = format!("hung-rank-test-{name}-{}", std::process::id());
    o.rank_args = vec!["--tag".into(), tag.clone()];
    let t = Instant::now();
    let err = exec::launch(&j, &o).unwrap_err();
    let secs = t.elapsed().as_secs_f64();
    eprintln!("hung rank: launch returned after {secs:.1} s with: {err}");
    assert!(matches!(err, ExecError::Timeout { .. }), "{err}");
    assert!(secs < 15.0, "{secs}");
    std::thread::sleep(Duration::from_millis(500));
    let alive = processes_with(&tag);
    assert!(alive.is_empty(), "ranks left running: {alive:?}");
}

#[test]
fn cuda_job_without_a_gpu_fails_cleanly() {
    if !mpi_ready() || exec::cuda_available() {
        return;
    }
    let mut j = job(&[(2, 1, 0.5), (2, 1, 0.5)], BlockConfig::tiny_gpt());
    j.device = exec::DeviceKind::Cuda;
    let t = Instant::now();
    let err = exec::launch(&j, &opts()).unwrap_err();
    eprintln!(
        "cuda job on a cpu-only machine: {:.1} s: {err}",
        t.elapsed().as_secs_f64()
    );
    match err {
        ExecError::RankFailed { detail, .. } => {
            assert!(detail.contains("no CUDA device"), "{detail}")
        }
        other => panic!("expected RankFailed, got {other}"),
    }
}

#[test]
fn collectives_are_profiled_over_mpi() {
    if !mpi_ready() {
        return;
    }
    let cfg = CollectiveConfig {
        sizes_elems: vec![1 << 10, 1 << 16],
        splits: vec![vec![1.0 / 3.0; 3], vec![0.5, 0.2, 0.3]],
        warmup: 1,
        repetitions: 3,
        flush_bytes: 1 << 20,
    };
    let rows = exec::launch_collectives(3, &cfg, &opts()).unwrap_or_else(|e| panic!("{e}"));
    // Per size: all-gather and reduce-scatter per split, one all-reduce.
    assert_eq!(rows.len(), 2 * (2 * 2 + 1));
    for r in &rows {
        eprintln!(
            "{:?} {} B split {:?}: {:.3} ms",
            r.op, r.bytes, r.fractions, r.time_ms
        );
        assert!(r.time_ms > 0.0 && r.ranks == 3);
    }
}

#[test]
fn compute_profile_is_sane() {
    let p = exec::profile_compute(&exec::ProfileConfig {
        model: BlockConfig::tiny_gpt(),
        device: exec::DeviceKind::Cpu,
        dtype: exec::NumFormat::Fp32,
        micro_batch_sizes: vec![1, 4],
        warmup: 1,
        repetitions: 3,
        threads: Some(1),
        flush_bytes: 0,
        optimizer_samples: None,
    })
    .unwrap();
    assert_eq!(p.block.len(), 2);
    for t in p.block.iter().chain(&p.embedding).chain(&p.head) {
        assert!(t.forward_ms > 0.0 && t.recompute_backward_ms > 0.0, "{t:?}");
    }
    assert!(p.optimizer_ms_per_block > 0.0);
    assert!(p.params_per_block > 0);
}

#[test]
fn compute_is_profiled_on_concurrent_ranks() {
    if !mpi_ready() {
        return;
    }
    let cfg = exec::ProfileConfig {
        model: BlockConfig::tiny_gpt(),
        device: exec::DeviceKind::Cpu,
        dtype: exec::NumFormat::Fp32,
        micro_batch_sizes: vec![1, 2],
        warmup: 1,
        repetitions: 3,
        threads: Some(1),
        flush_bytes: 0,
        optimizer_samples: None,
    };
    let p = exec::launch_compute(2, &cfg, &opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.concurrent_ranks, 2);
    assert_eq!(p.block.len(), 2);
    assert!(p.timings().iter().all(|t| *t > 0.0), "{:?}", p.timings());
    // The mean of identical lists is the list.
    let mut q = p.clone();
    let t = q.timings();
    q.set_mean_timings(&[t.clone(), t.clone()].concat(), 2);
    assert_eq!(q.timings(), t);
}

#[test]
fn a_simulator_plan_trains_and_compares() {
    use exec::sim_glue::{self, RunSettings};
    if !mpi_ready() {
        return;
    }
    // gpt-tiny from the catalog, the plan in the simulator's form.
    let spec = sim::model::ModelCatalog::builtin().get("gpt-tiny").unwrap();
    let (spec, _) = sim_glue::model_for_trainer(spec, 16);
    let cfg = sim_glue::block_config(&spec, 16).unwrap();
    let plan = sim::plan::Plan {
        planner: "test".into(),
        pipeline: None,
        strategy: sim::strategy::Strategy::cephalo(2, sim::strategy::Attention::Eager),
        gpus: vec![
            sim::plan::rank::RankPlan::new(1, 1, 0.3),
            sim::plan::rank::RankPlan::new(3, 2, 0.7),
        ],
    };
    let s = RunSettings {
        device: exec::DeviceKind::Cpu,
        dtype: exec::NumFormat::Fp32,
        iterations: 2,
        warmup_iterations: 0,
        seed: 3,
        threads: Some(1),
        adam: exec::AdamConfig::default(),
    };
    let job = sim_glue::job_from_plan(&plan, &cfg, &s).unwrap();
    let rep = exec::launch(&job, &opts()).unwrap_or_else(|e| panic!("{e}"));
    let built: Vec<u64> = rep.unit_params.iter().map(|&p| p as u64).collect();
    assert_eq!(built, sim_glue::trainer_unit_params(&cfg));
    let m = sim_glue::measured_report(&rep);
    assert_eq!(m.iterations, 2);
    assert_eq!(m.gpus.len(), 2);
    assert_eq!((m.gpus[1].batch, m.gpus[1].microbatches), (3, 2));
    assert!(m.iteration_ms > 0.0 && m.gpus.iter().all(|g| g.compute_ms > 0.0));
}

#[test]
fn half_precision_gathers_carry_rounded_parameters() {
    // All-gathers in bf16 / fp16 (the f32 master pieces cast, 16-bit words
    // on the wire, compute in fp32): the gradient moves by the rounding of
    // the parameters (bf16 keeps 8 significant bits: ~2e-3 relative; fp16
    // 11: ~3e-4), no more, and not at all in fp32.
    if !mpi_ready() {
        return;
    }
    let model = BlockConfig::tiny_gpt();
    let refr = exec::reference_train(&model, 16, 1, &exec::AdamConfig::default(), 42).unwrap();
    for (dtype, lo, hi) in [
        (sim::precision::NumFormat::Bf16, 5e-4, 1e-2),
        (sim::precision::NumFormat::Fp16, 5e-5, 2e-3),
    ] {
        let mut j = job(&UNEVEN, model.clone());
        j.strategy.param_dtype = dtype;
        j.iterations = 1;
        j.return_grads = true;
        let rep = exec::launch(&j, &opts()).unwrap_or_else(|e| panic!("{e}"));
        let g = rel_diff_per_unit(rep.first_grads.as_ref().unwrap(), &refr.first_grads);
        let worst = g.iter().copied().fold(0.0, f32::max);
        eprintln!(
            "{dtype} gathers: first-step gradient rel diff per unit {}",
            sci(&g)
        );
        assert!(
            worst > lo && worst < hi,
            "{dtype}: gradient differs by {worst}, expected ({lo}, {hi})"
        );
        let (a, b) = (rep.loss_sums[0], refr.loss_sums[0]);
        assert!((a - b).abs() < 1e-2 * b.abs(), "{dtype}: loss {a} vs {b}");
    }
}

/// Two hosts that are both this machine. mpirun reads a hostfile of two
/// made-up host names and starts a daemon on each through an rsh agent
/// that runs the command here, in an empty directory
/// (`scripts/local-rsh-agent`, a stand-in for ssh, which would run it on
/// the other machine); the 3 ranks of the uneven
/// plan spread over the two "hosts" (2 + 1), which Open MPI then treats as
/// separate nodes (TCP between them, no shared-memory transport). The job
/// reaches rank 0 on its standard input and the report comes back on its
/// standard output, so nothing needs a shared file system. The gradients
/// and parameters match one process on the whole batch, and the agent was
/// asked for both hosts.
#[test]
fn ranks_on_two_hosts_of_a_hostfile_match_the_reference() {
    if !mpi_ready() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("cephalo-hostfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("agent");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/local-rsh-agent");
    std::fs::copy(script, &agent).unwrap();
    let log = dir.join("agent.log");
    let hostfile = dir.join("hosts");
    std::fs::write(
        &hostfile,
        "cephalo-host-a slots=2\ncephalo-host-b slots=2\n",
    )
    .unwrap();
    let mut o = opts();
    o.oversubscribe = false;
    o.hostfile = Some(hostfile);
    o.launcher_args = vec![
        "--mca".into(),
        "plm_rsh_agent".into(),
        agent.display().to_string(),
    ];
    let model = BlockConfig::tiny_gpt();
    let strategy = job(&UNEVEN, model.clone()).strategy;
    check_strategy_on(model, &UNEVEN, strategy, &o);
    let hosts = std::fs::read_to_string(&log).unwrap_or_default();
    let mut hosts: Vec<&str> = hosts.lines().collect();
    hosts.sort_unstable();
    assert_eq!(
        hosts,
        ["cephalo-host-a", "cephalo-host-b"],
        "the agent's calls"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bad launch settings fail before any rank starts: a hostfile that does
/// not exist or names no host, or given to srun.
#[test]
fn bad_hostfiles_fail_before_launch() {
    let dir = std::env::temp_dir().join(format!("cephalo-badhosts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let blank = dir.join("blank");
    std::fs::write(&blank, "# no hosts\n\n").unwrap();
    let j = job(&UNEVEN, BlockConfig::tiny_gpt());
    for (hostfile, launcher, want) in [
        (dir.join("missing"), exec::Launcher::Mpirun, "cannot read"),
        (blank.clone(), exec::Launcher::Mpirun, "names no host"),
        (blank, exec::Launcher::Srun, "under srun"),
    ] {
        // A launcher that does not exist: reaching it would fail otherwise.
        let mut o = LaunchOptions::new("/nonexistent/rank").with_launcher(launcher);
        o.launcher_program = "/nonexistent/launcher".into();
        o.hostfile = Some(hostfile);
        match exec::launch(&j, &o) {
            Err(ExecError::InvalidJob { field, message }) => {
                assert_eq!(field, "hostfile");
                assert!(message.contains(want), "{message}");
            }
            other => panic!("want a hostfile error, got {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
