//! What every trainer records per rank and iteration ([`Clock`],
//! [`record_fields`]), the loop over the job's iterations with the
//! compute profile between them ([`run_iterations`]), the report rank 0 assembles from every rank's
//! records ([`assemble`]), and the test-only fault injection
//! ([`maybe_fail`]).
//!
//! Units: ms, bytes.

use std::time::Instant;

use crate::comm::Collectives;
use crate::config::{DeviceKind, FaultKind, Job};
use crate::model::TResult;
use crate::profiler::ProfileRun;
use crate::report::{ComputeProfile, IterationRecord, RankIteration, TrainReport};

/// Per-rank accumulators of one iteration.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Clock {
    pub compute_ms: f64,
    /// Part of `compute_ms`: the units' forward, head and backward passes
    /// (with recompute).
    pub passes_ms: f64,
    /// Part of `compute_ms`: the optimizer step.
    pub optimizer_ms: f64,
    pub comm_ms: f64,
    pub wait_ms: f64,
    pub copy_ms: f64,
    pub peak: u64,
}

pub(crate) fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Values per rank and iteration in [`record_fields`].
pub(crate) const FIELDS: usize = 9;

/// What [`run_iterations`] recorded on one rank.
pub(crate) struct Recorded {
    /// Every iteration's time (warm-up included), ms.
    pub iter_ms: Vec<f64>,
    /// This rank's [`record_fields`] per iteration.
    pub local: Vec<f64>,
    /// The job's in-run compute profile: the mean over the ranks on rank
    /// 0, `None` elsewhere or when the job asks for none.
    pub profile: Option<ComputeProfile>,
}

/// Runs the job's warm-up and recorded iterations through `iteration`
/// (iteration index -> its ms, this rank's loss and its [`Clock`]), and,
/// when the job asks for it ([`Job::compute_profile`]), an equal share of
/// the compute profile's measurements before each recorded iteration
/// (every rank at once, a barrier after each share so the iteration
/// starts together): what [`assemble`] takes.
pub(crate) fn run_iterations<C: Collectives>(
    job: &Job,
    comm: &C,
    mut iteration: impl FnMut(usize) -> TResult<(f64, f64, Clock)>,
) -> TResult<Recorded> {
    let rank = comm.rank();
    let mut profile = match job.profile_config() {
        Some(cfg) => Some(ProfileRun::new(&cfg, rank)?),
        None => None,
    };
    let total = job.warmup_iterations + job.iterations;
    let mut iter_ms = Vec::with_capacity(total);
    let mut local = Vec::with_capacity(total * FIELDS);
    for it in 0..total {
        if let Some(p) = profile.as_mut().filter(|_| it >= job.warmup_iterations) {
            let left = total - it;
            for _ in 0..p.steps_left().div_ceil(left) {
                p.step(&|| comm.barrier())?;
            }
            comm.barrier();
        }
        let (ms, loss, clock) = iteration(it)?;
        iter_ms.push(ms);
        local.extend_from_slice(&record_fields(job, &clock, loss, ms));
    }
    let profile = match profile {
        Some(p) => {
            let mut c = p.finish()?;
            comm.gather_f64(&c.timings()).map(|all| {
                c.set_mean_timings(&all, comm.size());
                c
            })
        }
        None => None,
    };
    Ok(Recorded {
        iter_ms,
        local,
        profile,
    })
}

/// One iteration's per-rank record: the [`Clock`]'s fields, the peak
/// memory (`-1` off CUDA), this rank's loss and iteration time, in the
/// order [`assemble`] reads them ([`FIELDS`] values).
pub(crate) fn record_fields(job: &Job, c: &Clock, loss: f64, ms: f64) -> [f64; FIELDS] {
    let peak = if job.device == DeviceKind::Cuda {
        c.peak as f64
    } else {
        -1.0
    };
    [
        c.compute_ms,
        c.comm_ms,
        c.wait_ms,
        c.copy_ms,
        peak,
        loss,
        ms,
        c.passes_ms,
        c.optimizer_ms,
    ]
}

/// The report on rank 0 from every rank's [`record_fields`] per iteration
/// (`local`, gathered here), rank 0's iteration times and what rank 0
/// collected of parameters and gradients; `None` on the other ranks.
pub(crate) fn assemble<C: Collectives>(
    job: &Job,
    comm: &C,
    rec: Recorded,
    unit_params: Vec<usize>,
    final_params: Option<Vec<Vec<f32>>>,
    first_grads: Option<Vec<Vec<f32>>>,
) -> Option<TrainReport> {
    let Recorded {
        iter_ms,
        local,
        profile,
    } = rec;
    let total = iter_ms.len();
    let all = comm.gather_f64(&local)?;
    let size = comm.size();
    let mut iterations = Vec::new();
    let mut loss_sums = Vec::with_capacity(total);
    for (it, &ms) in iter_ms.iter().enumerate() {
        let mut ranks = Vec::with_capacity(size);
        let mut loss = 0.0;
        for r in 0..size {
            let v = &all[r * total * FIELDS + it * FIELDS..][..FIELDS];
            loss += v[5];
            ranks.push(RankIteration {
                rank: r,
                batch: job.plan[r].batch,
                micro_batches: job.plan[r].micro_batches,
                compute_ms: v[0],
                comm_ms: v[1],
                wait_ms: v[2],
                copy_ms: v[3],
                peak_mem_bytes: (v[4] >= 0.0).then_some(v[4] as u64),
                loss_sum: v[5],
                own_iteration_ms: v[6],
                passes_ms: v[7],
                optimizer_ms: v[8],
            });
        }
        loss_sums.push(loss);
        if it >= job.warmup_iterations {
            iterations.push(IterationRecord {
                iteration: it,
                iteration_ms: ms,
                ranks,
            });
        }
    }
    Some(TrainReport {
        ranks: size,
        global_batch: job.global_batch(),
        unit_params,
        iterations,
        loss_sums,
        final_params,
        first_grads,
        compute_profile: profile,
    })
}

/// Runs the job's injected fault when it is this `rank`'s in `iteration`.
pub(crate) fn maybe_fail(job: &Job, rank: usize, iteration: usize) {
    if let Some(f) = job.fault {
        if f.rank == rank && f.iteration == iteration {
            match f.kind {
                FaultKind::Panic => {
                    panic!("injected fault on rank {} in iteration {iteration}", f.rank)
                }
                FaultKind::Exit => {
                    eprintln!(
                        "cephalo-exec: injected exit on rank {} in iteration {iteration}",
                        f.rank
                    );
                    std::process::exit(3)
                }
                FaultKind::Hang => loop {
                    std::thread::sleep(std::time::Duration::from_secs(3600));
                },
                FaultKind::Abort => {
                    eprintln!(
                        "cephalo-exec: injected abort on rank {} in iteration {iteration}",
                        f.rank
                    );
                    std::process::abort()
                }
            }
        }
    }
}
