//! Collective profiler: all-gather and reduce-scatter times vs message size
//! and piece split, and all-reduce times vs message size, over a
//! [`Collectives`] group (MPI or the one-rank group).
//!
//! Units: ms (median over repetitions of the slowest rank), bytes, f32
//! elements. Needs no libtorch.

use std::time::Instant;

use crate::comm::Collectives;
use crate::error::ExecError;
use crate::report::{median, CollectiveOp, CollectiveTiming};
use crate::shard::piece_sizes;

/// What [`profile_collectives`] measures.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CollectiveConfig {
    /// Full buffer lengths to time (f32 elements).
    pub sizes_elems: Vec<usize>,
    /// Piece splits to time (one fraction per rank each; empty: even only).
    pub splits: Vec<Vec<f64>>,
    /// Untimed runs per point.
    pub warmup: usize,
    /// Timed runs per point (median of the slowest rank's times).
    pub repetitions: usize,
    /// Bytes of scratch memory every rank rewrites before each run, so the
    /// buffers come from memory rather than from the caches a tight loop
    /// leaves them in (0: none). In training, compute evicts them between
    /// collectives; on a host with a large last-level cache this matters.
    #[serde(default)]
    pub flush_bytes: usize,
}

/// Times all-gather and reduce-scatter on host f32 buffers for every size
/// and split; every rank of `comm` must call it with the same config.
/// Returns the table on rank 0 and `None` elsewhere.
pub fn profile_collectives<C: Collectives>(
    comm: &C,
    cfg: &CollectiveConfig,
) -> Result<Option<Vec<CollectiveTiming>>, ExecError> {
    let size = comm.size();
    let rank = comm.rank();
    let mut splits = cfg.splits.clone();
    if splits.is_empty() {
        splits.push(vec![1.0 / size as f64; size]);
    }
    for (i, s) in splits.iter().enumerate() {
        if s.len() != size {
            return Err(ExecError::InvalidJob {
                field: format!("splits[{i}]"),
                message: format!("expected {size} fractions (one per rank), got {}", s.len()),
            });
        }
    }
    for split in &splits {
        verify(comm, 1001, split)?;
    }
    let mut scratch = vec![0u8; cfg.flush_bytes];
    let mut out = Vec::new();
    for &n in &cfg.sizes_elems {
        for (si, split) in splits.iter().enumerate() {
            let counts = piece_sizes(n, split);
            // Inputs are warm (the trainer's shard and freshly accumulated
            // gradient); outputs are allocated per call and timed with
            // their first-touch page faults, as the trainer allocates them.
            let full_buf: Vec<f32> = (0..n).map(|i| (i % 17) as f32).collect();
            let local = vec![1f32; counts[rank]];
            // All-reduce moves the whole buffer whatever the split: once.
            let ops: &[CollectiveOp] = if si == 0 {
                &[
                    CollectiveOp::AllGather,
                    CollectiveOp::ReduceScatter,
                    CollectiveOp::AllReduce,
                ]
            } else {
                &[CollectiveOp::AllGather, CollectiveOp::ReduceScatter]
            };
            for &op in ops {
                let mut times = Vec::with_capacity(cfg.repetitions);
                for rep in 0..cfg.warmup + cfg.repetitions.max(1) {
                    // Untouched (lazily zeroed) memory, freed after timing.
                    let mut out = match op {
                        CollectiveOp::AllGather => vec![0f32; n],
                        CollectiveOp::ReduceScatter => vec![0f32; counts[rank]],
                        // The trainer reduces its gradient buffer in place.
                        CollectiveOp::AllReduce => full_buf.clone(),
                    };
                    if !scratch.is_empty() {
                        let v = scratch[rep % scratch.len()].wrapping_add(1);
                        scratch.fill(v);
                        std::hint::black_box(&scratch);
                    }
                    comm.barrier();
                    let t = Instant::now();
                    match op {
                        CollectiveOp::AllGather => comm.all_gather_v(&local, &counts, &mut out)?,
                        CollectiveOp::ReduceScatter => {
                            comm.reduce_scatter_v(&full_buf, &counts, &mut out)?
                        }
                        CollectiveOp::AllReduce => comm.all_reduce_sum(&mut out)?,
                    }
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    drop(out);
                    if rep >= cfg.warmup {
                        times.push(ms);
                    }
                }
                if let Some(all) = comm.gather_f64(&times) {
                    let reps = times.len();
                    let slowest: Vec<f64> = (0..reps)
                        .map(|k| (0..size).map(|r| all[r * reps + k]).fold(0.0, f64::max))
                        .collect();
                    let even = op == CollectiveOp::AllReduce;
                    out.push(CollectiveTiming {
                        op,
                        ranks: size,
                        elems: n,
                        bytes: 4 * n,
                        fractions: if even {
                            vec![1.0 / size as f64; size]
                        } else {
                            split.clone()
                        },
                        max_piece_bytes: if even {
                            4 * n.div_ceil(size.max(1))
                        } else {
                            4 * counts.iter().copied().max().unwrap_or(0)
                        },
                        time_ms: median(&slowest),
                    });
                }
            }
        }
    }
    Ok((rank == 0).then_some(out))
}

/// Checks the collectives' results on `n` elements split by `fractions`:
/// all-gather of rank-tagged pieces, reduce-scatter and all-reduce of
/// rank-valued buffers (sum = size (size + 1) / 2 everywhere).
pub fn verify<C: Collectives>(comm: &C, n: usize, fractions: &[f64]) -> Result<(), ExecError> {
    let (size, rank) = (comm.size(), comm.rank());
    let counts = piece_sizes(n, fractions);
    let offs = crate::shard::offsets(&counts);
    let local: Vec<f32> = (0..counts[rank]).map(|i| (offs[rank] + i) as f32).collect();
    let mut full = vec![-1f32; n];
    comm.all_gather_v(&local, &counts, &mut full)?;
    if let Some(i) = full.iter().enumerate().position(|(i, &x)| x != i as f32) {
        return Err(ExecError::Comm(format!(
            "all-gather check failed at element {i} on rank {rank} (pieces {counts:?})"
        )));
    }
    let mine = vec![(rank + 1) as f32; n];
    let mut out = vec![0f32; counts[rank]];
    comm.reduce_scatter_v(&mine, &counts, &mut out)?;
    let want = (size * (size + 1) / 2) as f32;
    if out.iter().any(|&x| x != want) {
        return Err(ExecError::Comm(format!(
            "reduce-scatter check failed on rank {rank} (pieces {counts:?})"
        )));
    }
    let mut all = mine;
    comm.all_reduce_sum(&mut all)?;
    if all.iter().any(|&x| x != want) {
        return Err(ExecError::Comm(format!(
            "all-reduce check failed on rank {rank} ({n} elements)"
        )));
    }
    Ok(())
}
