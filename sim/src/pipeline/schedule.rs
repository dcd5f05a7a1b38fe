//! The order of forwards and backwards each stage runs, as the pipeline
//! engines below order them.
//!
//! * GPipe (PyTorch `ScheduleGPipe`): `F0 .. F(m-1)`, then `B0 .. B(m-1)`.
//! * 1F1B (Megatron `get_pp_rank_microbatches`, DeepSpeed `TrainSchedule`):
//!   `w = min(p - s - 1, m)` warm-up forwards, then `m - w` pairs of one
//!   forward and one backward, then `w` cool-down backwards; at most
//!   `min(p - s, m)` micro-batches in flight on stage `s`.
//!
//! A forward of micro-batch `k` on stage `s > 0` needs stage `s - 1`'s
//! forward of `k`; a backward of `k` on stage `s < p - 1` needs stage
//! `s + 1`'s backward of `k`. Both schedules are deadlock-free under
//! these dependencies ([`topological`] proves it for a given `p`, `m`).

use crate::plan::pipeline::PipeSchedule;

/// One step of a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Forward of micro-batch `k`.
    Fwd(u32),
    /// Backward of micro-batch `k`.
    Bwd(u32),
}

/// The steps of stage `s` of `p` over `m` micro-batches under `schedule`.
pub fn actions(schedule: PipeSchedule, p: usize, s: usize, m: u32) -> Vec<Action> {
    let mut v = Vec::with_capacity(2 * m as usize);
    match schedule {
        PipeSchedule::Gpipe => {
            v.extend((0..m).map(Action::Fwd));
            v.extend((0..m).map(Action::Bwd));
        }
        PipeSchedule::OneFOneB => {
            let w = (p.saturating_sub(s + 1) as u32).min(m);
            v.extend((0..w).map(Action::Fwd));
            for i in 0..m - w {
                v.push(Action::Fwd(w + i));
                v.push(Action::Bwd(i));
            }
            v.extend((m - w..m).map(Action::Bwd));
        }
    }
    v
}

/// Every stage's steps in one order that respects each stage's own order
/// and the dependencies between stages (module docs): `(stage, action)`
/// pairs, stages swept in order, each advancing as far as its inputs
/// allow. `None` when the stages' orders deadlock (never for the two
/// schedules here).
pub fn topological(schedule: PipeSchedule, p: usize, m: u32) -> Option<Vec<(usize, Action)>> {
    let lists: Vec<Vec<Action>> = (0..p).map(|s| actions(schedule, p, s, m)).collect();
    let mut next = vec![0usize; p];
    // Per stage: forwards / backwards done so far (both run in micro-batch order).
    let mut fwd_done = vec![0u32; p];
    let mut bwd_done = vec![0u32; p];
    let total: usize = lists.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        let mut progress = false;
        for s in 0..p {
            while let Some(&a) = lists[s].get(next[s]) {
                let ready = match a {
                    Action::Fwd(k) => s == 0 || fwd_done[s - 1] > k,
                    Action::Bwd(k) => {
                        if s + 1 == p {
                            fwd_done[s] > k
                        } else {
                            bwd_done[s + 1] > k
                        }
                    }
                };
                if !ready {
                    break;
                }
                match a {
                    Action::Fwd(_) => fwd_done[s] += 1,
                    Action::Bwd(_) => bwd_done[s] += 1,
                }
                out.push((s, a));
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

    /// Micro-batches whose forward ran and whose backward did not, at most.
    fn max_in_flight(v: &[Action]) -> u32 {
        let (mut live, mut peak) = (0i64, 0i64);
        for a in v {
            match a {
                Action::Fwd(_) => live += 1,
                Action::Bwd(_) => live -= 1,
            }
            peak = peak.max(live);
        }
        peak as u32
    }

    #[test]
    fn every_micro_batch_once_forward_before_backward() {
        for sch in PipeSchedule::ALL {
            for p in 1..7 {
                for m in 1..12 {
                    for s in 0..p {
                        let v = actions(sch, p, s, m);
                        assert_eq!(v.len(), 2 * m as usize);
                        for k in 0..m {
                            let f = v.iter().position(|&a| a == Action::Fwd(k)).unwrap();
                            let b = v.iter().position(|&a| a == Action::Bwd(k)).unwrap();
                            assert!(f < b);
                        }
                        let want = sch.in_flight(p, s, m);
                        assert_eq!(max_in_flight(&v), want, "{sch} p={p} s={s} m={m}");
                    }
                    assert!(topological(sch, p, m).is_some(), "{sch} p={p} m={m}");
                }
            }
        }
    }
}
