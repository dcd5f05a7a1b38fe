//! The order of forwards and backwards each stage runs, as the pipeline
//! engines below order them.
//!
//! * GPipe (PyTorch `ScheduleGPipe`): `F0 .. F(m-1)`, then `B0 .. B(m-1)`.
//! * 1F1B (Megatron `get_pp_rank_microbatches`, DeepSpeed `TrainSchedule`):
//!   `w = min(p - s - 1, m)` warm-up forwards, then `m - w` pairs of one
//!   forward and one backward, then `w` cool-down backwards; at most
//!   `min(p - s, m)` micro-batches in flight on stage `s`.
//! * Interleaved 1F1B (Megatron `forward_backward_pipelining_with_
//!   interleaving`, `get_model_chunk_id`): each GPU holds `v` chunks; its
//!   `m v` chunk-forwards run micro-batches in groups of `p` through chunk
//!   0, then the same group through chunk 1, ...; the backwards walk the
//!   chunks in reverse. Warm-up `2 (p - s - 1) + (v - 1) p` chunk-forwards
//!   (all of them when `m = p`), then one forward and one backward
//!   alternately, then the cool-down backwards.
//! * ZB-H1 (Qi et al. 2024): 1F1B's order with each backward split into
//!   `B` (input gradient, sent on at once) and `W` (weight gradient); stage
//!   `s` keeps up to `s` `W`s pending, running the oldest after each
//!   backward once more are pending, and the rest after its last backward.
//!   On identical stages this leaves the paper's bubble `(p - 1) (T_F +
//!   T_B - T_W)` (while `T_W <= T_F`), a third of 1F1B's when the three are
//!   equal.
//!
//! A forward of micro-batch `k` on virtual stage `x > 0` needs virtual
//! stage `x - 1`'s forward of `k`; a backward (`B`) of `k` on `x < pv - 1`
//! needs `x + 1`'s backward of `k`; a `W` needs its own stage's `B`.
//! Virtual stage `x` is chunk `x / p` of physical stage `x mod p` (`v = 1`:
//! the stages themselves). Every schedule is deadlock-free under these
//! dependencies ([`topological`] proves it for a given `p`, `m`, `v`).

use crate::plan::pipeline::PipeSchedule;
use std::collections::VecDeque;

/// One step of a stage on one of its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Forward of micro-batch `k`.
    Fwd(u32),
    /// Backward of micro-batch `k` (its input-gradient part alone when the
    /// schedule splits the backward).
    Bwd(u32),
    /// Weight-gradient part of micro-batch `k`'s backward (zero-bubble
    /// schedules).
    Wgt(u32),
}

/// The steps of physical stage `s` of `p` over `m` micro-batches with `v`
/// chunks per GPU under `schedule`: (chunk, action) pairs in order.
pub fn actions(schedule: PipeSchedule, p: usize, s: usize, m: u32, v: u32) -> Vec<(u32, Action)> {
    let mut out = Vec::with_capacity(3 * (m * v.max(1)) as usize);
    match schedule {
        PipeSchedule::Gpipe => {
            out.extend((0..m).map(|k| (0, Action::Fwd(k))));
            out.extend((0..m).map(|k| (0, Action::Bwd(k))));
        }
        PipeSchedule::OneFOneB => {
            let w = (p.saturating_sub(s + 1) as u32).min(m);
            out.extend((0..w).map(|k| (0, Action::Fwd(k))));
            for i in 0..m - w {
                out.push((0, Action::Fwd(w + i)));
                out.push((0, Action::Bwd(i)));
            }
            out.extend((m - w..m).map(|k| (0, Action::Bwd(k))));
        }
        PipeSchedule::ZbH1 => {
            let w = (p.saturating_sub(s + 1) as u32).min(m);
            let budget = s;
            let mut pending: VecDeque<u32> = VecDeque::new();
            out.extend((0..w).map(|k| (0, Action::Fwd(k))));
            for i in 0..m - w {
                out.push((0, Action::Fwd(w + i)));
                out.push((0, Action::Bwd(i)));
                pending.push_back(i);
                while pending.len() > budget {
                    let k = pending.pop_front().expect("pending is not empty");
                    out.push((0, Action::Wgt(k)));
                }
            }
            for k in m - w..m {
                out.push((0, Action::Bwd(k)));
                pending.push_back(k);
                let k = pending.pop_front().expect("just pushed");
                out.push((0, Action::Wgt(k)));
            }
            out.extend(pending.into_iter().map(|k| (0, Action::Wgt(k))));
        }
        PipeSchedule::Interleaved => {
            let v = v.max(1);
            let (pu, total) = (p as u32, m * v);
            let chunk = |i: u32, forward: bool| {
                let c = (i % (pu * v)) / pu;
                if forward {
                    c
                } else {
                    v - 1 - c
                }
            };
            let micro = |i: u32| (i / (pu * v)) * pu + i % pu;
            let warmup = if m == pu {
                total
            } else {
                (2 * p.saturating_sub(s + 1) as u32 + (v - 1) * pu).min(total)
            };
            out.extend((0..warmup).map(|i| (chunk(i, true), Action::Fwd(micro(i)))));
            for i in 0..total - warmup {
                let f = warmup + i;
                out.push((chunk(f, true), Action::Fwd(micro(f))));
                out.push((chunk(i, false), Action::Bwd(micro(i))));
            }
            out.extend((total - warmup..total).map(|i| (chunk(i, false), Action::Bwd(micro(i)))));
        }
    }
    out
}

/// Every stage's steps in one order that respects each stage's own order
/// and the dependencies between virtual stages (module docs): (virtual
/// stage, action) pairs, physical stages swept in order, each advancing as
/// far as its inputs allow. `None` when the stages' orders deadlock (never
/// for the schedules here).
pub fn topological(
    schedule: PipeSchedule,
    p: usize,
    m: u32,
    v: u32,
) -> Option<Vec<(usize, Action)>> {
    let v = v.max(1) as usize;
    let lists: Vec<Vec<(u32, Action)>> = (0..p)
        .map(|s| actions(schedule, p, s, m, v as u32))
        .collect();
    let vp = p * v;
    let mut next = vec![0usize; p];
    // Per virtual stage and micro-batch: forward / backward done.
    let mut fwd_done = vec![false; vp * m as usize];
    let mut bwd_done = vec![false; vp * m as usize];
    let at = |x: usize, k: u32| x * m as usize + k as usize;
    let total: usize = lists.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        let mut progress = false;
        for s in 0..p {
            while let Some(&(c, a)) = lists[s].get(next[s]) {
                let x = c as usize * p + s;
                let ready = match a {
                    Action::Fwd(k) => x == 0 || fwd_done[at(x - 1, k)],
                    Action::Bwd(k) => {
                        if x + 1 == vp {
                            fwd_done[at(x, k)]
                        } else {
                            bwd_done[at(x + 1, k)]
                        }
                    }
                    Action::Wgt(k) => bwd_done[at(x, k)],
                };
                if !ready {
                    break;
                }
                match a {
                    Action::Fwd(k) => fwd_done[at(x, k)] = true,
                    Action::Bwd(k) => bwd_done[at(x, k)] = true,
                    Action::Wgt(_) => {}
                }
                out.push((x, a));
                next[s] += 1;
                progress = true;
            }
        }
        if !progress {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunk-micro-batches whose forward ran and whose backward did not,
    /// at most, in units of a whole stage (`1/v` per chunk).
    fn max_in_flight(v: &[(u32, Action)], chunks: u32) -> f64 {
        let (mut live, mut peak) = (0i64, 0i64);
        for (_, a) in v {
            match a {
                Action::Fwd(_) => live += 1,
                Action::Bwd(_) => live -= 1,
                Action::Wgt(_) => {}
            }
            peak = peak.max(live);
        }
        peak as f64 / chunks as f64
    }

    /// The makespan of `schedule`'s orders on `p` identical stages whose
    /// forward, backward (input-gradient part when split) and
    /// weight-gradient part of one micro-batch take `f`, `b`, `w` (the
    /// unsplit backward `b + w`), communication free: each step starts
    /// when its stage is free and its input is done.
    fn makespan(
        schedule: PipeSchedule,
        p: usize,
        m: u32,
        v: u32,
        (f, b, w): (f64, f64, f64),
    ) -> f64 {
        let order = topological(schedule, p, m, v).unwrap();
        let vp = p * v as usize;
        let at = |x: usize, k: u32| x * m as usize + k as usize;
        let (mut fe, mut be) = (vec![0.0; vp * m as usize], vec![0.0; vp * m as usize]);
        let mut free = vec![0.0f64; p];
        let vf = v as f64;
        let split = schedule.splits_backward();
        for (x, a) in order {
            let s = x % p;
            let (dep, d) = match a {
                Action::Fwd(k) => (if x == 0 { 0.0 } else { fe[at(x - 1, k)] }, f / vf),
                Action::Bwd(k) => {
                    let dep = if x + 1 == vp {
                        fe[at(x, k)]
                    } else {
                        be[at(x + 1, k)]
                    };
                    (dep, if split { b / vf } else { (b + w) / vf })
                }
                Action::Wgt(k) => (be[at(x, k)], w / vf),
            };
            let end = free[s].max(dep) + d;
            free[s] = end;
            match a {
                Action::Fwd(k) => fe[at(x, k)] = end,
                Action::Bwd(k) => be[at(x, k)] = end,
                Action::Wgt(_) => {}
            }
        }
        free.iter().copied().fold(0.0, f64::max)
    }

    /// The bubbles of REAL-SYSTEMS-2 section 3.1: GPipe and 1F1B `(p - 1)
    /// (T_F + T_B + T_W)`, interleaved `(p - 1)/(v m)` of the ideal time
    /// (Narayanan et al. 2021), ZB-H1 `(p - 1)(T_F + T_B - T_W)` (Qi et
    /// al. 2024, for `T_W <= T_F`).
    #[test]
    fn bubbles_are_the_papers() {
        for (p, m) in [(2usize, 8u32), (4, 8), (4, 16), (8, 32), (6, 24)] {
            for fbw in [
                (1.0, 1.0, 1.0),
                (1.0, 1.2, 0.8),
                (2.0, 1.0, 1.0),
                (1.0, 1.0, 0.5),
            ] {
                let (f, b, w) = fbw;
                let ideal = m as f64 * (f + b + w);
                let pm = (p - 1) as f64;
                for sch in [PipeSchedule::Gpipe, PipeSchedule::OneFOneB] {
                    let t = makespan(sch, p, m, 1, fbw);
                    assert!(
                        (t - ideal - pm * (f + b + w)).abs() < 1e-9,
                        "{sch} p={p} m={m}"
                    );
                }
                let t = makespan(PipeSchedule::ZbH1, p, m, 1, fbw);
                assert!(
                    (t - ideal - pm * (f + b - w)).abs() < 1e-9,
                    "zb-h1 p={p} m={m} {fbw:?}: {t}"
                );
                for v in [2u32, 4] {
                    let t = makespan(PipeSchedule::Interleaved, p, m, v, fbw);
                    let want = pm / (v as f64 * m as f64);
                    assert!(
                        ((t - ideal) / ideal - want).abs() < 1e-9,
                        "interleaved p={p} m={m} v={v}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_micro_batch_once_forward_before_backward() {
        for sch in PipeSchedule::ALL {
            for p in 1..7 {
                for m in 1..13u32 {
                    let vs: &[u32] = if sch == PipeSchedule::Interleaved {
                        &[1, 2, 3]
                    } else {
                        &[1]
                    };
                    for &v in vs {
                        if sch == PipeSchedule::Interleaved && m % p as u32 != 0 {
                            continue;
                        }
                        for s in 0..p {
                            let a = actions(sch, p, s, m, v);
                            let per = if sch.splits_backward() { 3 } else { 2 };
                            assert_eq!(a.len(), per * (m * v) as usize);
                            for c in 0..v {
                                for k in 0..m {
                                    let f =
                                        a.iter().position(|&x| x == (c, Action::Fwd(k))).unwrap();
                                    let b =
                                        a.iter().position(|&x| x == (c, Action::Bwd(k))).unwrap();
                                    assert!(f < b);
                                    if sch.splits_backward() {
                                        let w = a
                                            .iter()
                                            .position(|&x| x == (c, Action::Wgt(k)))
                                            .unwrap();
                                        assert!(b < w);
                                    }
                                }
                            }
                            let want = sch.in_flight(p, s, m, v);
                            assert_eq!(max_in_flight(&a, v), want, "{sch} p={p} s={s} m={m} v={v}");
                        }
                        assert!(
                            topological(sch, p, m, v).is_some(),
                            "{sch} p={p} m={m} v={v}"
                        );
                    }
                }
            }
        }
    }
}
