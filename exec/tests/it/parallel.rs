//! Tensor, pipeline and data parallelism composed (features `torch` +
//! `mpi`): every composition trained on MPI ranks and held against one
//! process on the whole batch, with the tolerances of the data-parallel
//! proofs ([`crate::real::check_job`]).

use exec::{BlockConfig, Job};
use sim::plan::pipeline::{PipeSchedule, Pipeline, Stage};
use sim::strategy::{Checkpointing, Sharding, Strategy};

use crate::real::{check_fault_job, check_job, mpi_ready, opts};
use crate::validation;

/// Samples per iteration of every composition.
const BATCH: u32 = 16;

/// A stage of `blocks` blocks on `gpus` in TP groups of `tp`, replicas
/// weighted `shares` (empty: even).
fn stage(blocks: u32, gpus: &[u32], tp: u32, shares: &[u32]) -> Stage {
    Stage {
        tp,
        shares: shares.to_vec(),
        ..Stage::new(blocks, gpus.to_vec())
    }
}

/// The job of `pipe` on `model` (its per-rank entries the pipeline's own),
/// gradients accumulated without sync as pipelines do.
fn pipe_job(model: &BlockConfig, pipe: Pipeline, sharding: Sharding, ck: Checkpointing) -> Job {
    let mut j = validation::pipe_job(model.clone(), pipe, BATCH);
    j.strategy = Strategy {
        sharding,
        checkpointing: ck,
        ..j.strategy
    };
    j
}

/// A tiny model of `family` with `layers` blocks.
fn tiny(llama: bool, layers: usize) -> BlockConfig {
    let mut m = if llama {
        BlockConfig::tiny_llama()
    } else {
        BlockConfig::tiny_gpt()
    };
    m.layers = layers;
    m
}

/// Every composition on one family: (what, job).
fn compositions(llama: bool) -> Vec<(String, Job)> {
    use Checkpointing as K;
    use PipeSchedule as P;
    use Sharding as S;
    let m2 = tiny(llama, 2);
    let m4 = tiny(llama, 4);
    let mut v = Vec::new();
    let mut add = |what: &str, model: &BlockConfig, pipe: Pipeline, sh: S, ck: K| {
        v.push((what.to_string(), pipe_job(model, pipe, sh, ck)));
    };
    // TP x DP: one stage, two TP groups of 2 (ranks listed out of order).
    add(
        "tp2 x dp2",
        &m2,
        Pipeline::new(P::OneFOneB, 2, vec![stage(2, &[1, 0, 2, 3], 2, &[])]),
        S::NoShard,
        K::None,
    );
    // The same with sequence parallelism, ZeRO-1 and recompute.
    let mut sp = Pipeline::new(P::OneFOneB, 2, vec![stage(2, &[0, 1, 2, 3], 2, &[])]);
    sp.sequence_parallel = true;
    add("tp2 sp x dp2 zero-1", &m2, sp, S::GradOp, K::Full);
    // PP x DP: two stages of two replicas, the second split 3:1.
    add(
        "pp2 x dp2 1f1b uneven",
        &m2,
        Pipeline::new(
            P::OneFOneB,
            4,
            vec![stage(1, &[0, 1], 1, &[]), stage(1, &[2, 3], 1, &[3, 1])],
        ),
        S::NoShard,
        K::None,
    );
    // PP x DP with a stage of one GPU feeding two replicas, FSDP inside.
    add(
        "pp2 (1 + 2 gpus) gpipe fsdp",
        &m2,
        Pipeline::new(
            P::Gpipe,
            4,
            vec![stage(1, &[0], 1, &[]), stage(1, &[1, 2], 1, &[])],
        ),
        S::Full,
        K::Full,
    );
    // TP x PP.
    add(
        "tp2 x pp2 1f1b",
        &m2,
        Pipeline::new(
            P::OneFOneB,
            4,
            vec![stage(1, &[0, 1], 2, &[]), stage(1, &[2, 3], 2, &[])],
        ),
        S::NoShard,
        K::None,
    );
    // TP x PP x DP on 8 ranks, interleaved (2 chunks of 1 block per GPU),
    // the second stage's replicas split 5:3.
    let mut il = Pipeline::new(
        P::Interleaved,
        4,
        vec![
            stage(2, &[0, 1, 2, 3], 2, &[]),
            stage(2, &[4, 5, 6, 7], 2, &[5, 3]),
        ],
    );
    il.virtual_stages = 2;
    add(
        "tp2 x pp2 x dp2 interleaved v2",
        &m4,
        il,
        S::GradOp,
        K::Every(2),
    );
    // TP x PP x DP with SP and 1F1B, TP degrees differing per stage is
    // refused under SP, so both 2.
    let mut sp3 = Pipeline::new(
        P::OneFOneB,
        4,
        vec![
            stage(1, &[0, 1, 2, 3], 2, &[]),
            stage(1, &[4, 5, 6, 7], 2, &[]),
        ],
    );
    sp3.sequence_parallel = true;
    add("tp2 sp x pp2 x dp2 1f1b", &m2, sp3, S::NoShard, K::None);
    // TP degrees differing between stages (no SP): 2 then 1 x 2 replicas.
    add(
        "tp2 -> tp1 x dp2 gpipe",
        &m2,
        Pipeline::new(
            P::Gpipe,
            2,
            vec![stage(1, &[0, 1], 2, &[]), stage(1, &[2, 3], 1, &[])],
        ),
        S::NoShard,
        K::None,
    );
    v
}

fn check_family(llama: bool) {
    if !mpi_ready() {
        return;
    }
    let mut worst = Vec::new();
    for (what, j) in compositions(llama) {
        let (g, d) = check_job(j, &what, &opts());
        worst.push(format!("{what}: grad {g:.1e} param {d:.1e}"));
    }
    eprintln!(
        "{} worst differences:\n  {}",
        if llama { "llama" } else { "gpt" },
        worst.join("\n  ")
    );
}

#[test]
fn every_composition_gpt_matches_single_process() {
    check_family(false);
}

#[test]
fn every_composition_llama_matches_single_process() {
    check_family(true);
}

/// A rank dying mid-pipeline (stage 1 of a 2-stage 1F1B pipeline, while
/// its neighbours wait for its activations or gradients) ends the job
/// with the rank named within 30 s and leaves no rank behind.
#[test]
fn a_rank_dying_mid_pipeline_ends_the_job() {
    if !mpi_ready() {
        return;
    }
    let pipe = Pipeline::new(
        PipeSchedule::OneFOneB,
        4,
        vec![stage(1, &[0, 1], 2, &[]), stage(1, &[2, 3], 2, &[])],
    );
    for (kind, rank) in [(exec::FaultKind::Exit, 2), (exec::FaultKind::Panic, 1)] {
        let j = pipe_job(
            &tiny(false, 2),
            pipe.clone(),
            Sharding::NoShard,
            Checkpointing::None,
        );
        check_fault_job(j, kind, rank, &format!("pipeline-{kind:?}"));
    }
}
