//! Step 7 of the native planner: the candidates the fast model ranks best
//! run through the simulator ([`crate::planner::Judge`], in parallel), then
//! the best of every strategy that could still win, and the fastest plan
//! that fits wins.

use super::candidates::{Run, Timing};
use crate::planner::Judge;
use rayon::prelude::*;

impl Run<'_> {
    /// Confirms the ranked candidates with the problem's judge and picks
    /// the winner (without a judge: the fast model's best, with a note).
    pub(super) fn confirm(&mut self) {
        self.chosen = self.order[0];
        self.verdicts = vec![None; self.cands.len()];
        let Some(judge) = self.problem.judge else {
            self.notes.push(
                "not confirmed with the simulator (no judge given): the fast model's best".into(),
            );
            return;
        };
        let confirm: Vec<usize> = self.order.iter().copied().take(self.per_strategy).collect();
        let v = self.judge_all(judge, &confirm);
        let mut best = f64::INFINITY;
        self.take(v, &mut best);
        // The fast model and the closed form time ops alone; the
        // simulator shares links and slows compute beside collectives,
        // so a strategy whose best fast (or closed-form) time is below
        // the best simulated one could still win: confirm its best
        // candidate too, until none is left.
        loop {
            let more = self.could_win(best);
            if more.is_empty() {
                break;
            }
            let v = self.judge_all(judge, &more);
            let before = self.verdicts.iter().filter(|x| x.is_some()).count();
            self.take(v, &mut best);
            if self.verdicts.iter().filter(|x| x.is_some()).count() == before {
                break;
            }
        }
        self.stats.simulated = self.verdicts.iter().filter(|x| x.is_some()).count() as u64;
        if !best.is_finite() {
            self.notes.push("the simulator reports every confirmed candidate out of memory; returning the fast model's best".into());
            self.chosen = self.order[0];
        } else if self.cands[self.chosen].label != self.cands[self.order[0]].label {
            self.notes.push(format!(
                "the simulator rated {} best ({best:.1} ms)",
                self.cands[self.chosen].label
            ));
        }
    }

    /// Simulates the candidates `idx` (in parallel).
    fn judge_all(&self, judge: &dyn Judge, idx: &[usize]) -> Vec<(usize, Timing)> {
        idx.par_iter()
            .map(|&i| {
                (
                    i,
                    judge
                        .judge(&self.cands[i].plan)
                        .ok()
                        .map(|v| (v.iteration_ms, v.oom)),
                )
            })
            .collect()
    }

    /// Records the simulator's timings `v`; the fastest that fits (the
    /// earliest on a tie) becomes the chosen one when it beats `best`.
    fn take(&mut self, v: Vec<(usize, Timing)>, best: &mut f64) {
        for (i, x) in v {
            self.verdicts[i] = x;
            if let Some((ms, false)) = x {
                if ms < *best || (ms == *best && i < self.chosen) {
                    *best = ms;
                    self.chosen = i;
                }
            }
        }
    }

    /// The best-ranked unconfirmed candidate of every strategy whose fast
    /// (or closed-form) time is below `best`, the best simulated time.
    fn could_win(&self, best: f64) -> Vec<usize> {
        let mut seen = vec![false; self.space.len()];
        self.order
            .iter()
            .copied()
            .filter(|&i| {
                let first = !std::mem::replace(&mut seen[self.cands[i].strategy], true);
                let could_win = match self.fast[i] {
                    Some((ms, oom)) => !oom && ms < best,
                    None => self.cands[i].closed_ms < best,
                };
                first && self.verdicts[i].is_none() && could_win
            })
            .collect()
    }
}
