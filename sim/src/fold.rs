//! Folding identical micro-batch passes: an iteration of thousands of
//! micro-batch passes simulated on a few dozen of them, exactly.
//!
//! A micro-batch-major iteration (FSDP / DDP gradient accumulation) of a
//! large global batch is a long sequence of passes, most of them identical:
//! every GPU runs a micro-batch of the same size as in the pass before, so
//! the pass lowers to the same ops with the same durations, memory changes
//! and dependencies ([`crate::data_parallel::Description::pass_runs`]). The
//! engine is deterministic and time-invariant: what a pass does depends
//! only on the ops before it, through when they end. So once a run of
//! identical passes has settled into a periodic pattern (every op of pass
//! `j` starts and ends exactly `delta` ns after the same op of pass
//! `j - p`), each further period of the run repeats that pattern `delta`
//! later, and everything after the run is the same, shifted.
//!
//! The fold uses that: it simulates a reduced iteration ([`Layout`]) that
//! keeps the first [`Level::head`] + `3 x period` + [`TAIL`] passes of each
//! long run (plus up to a few so that the passes left out are a multiple
//! of every period tried), checks on the simulated times that the run's
//! last periods before its tail are *exactly* periodic (to the nanosecond,
//! every op, with the memory of a period summing to zero on every pool;
//! [`Layout::detect`]), and then stands the block of one period for all
//! the periods left out: its ops count `1 + copies` times in every sum
//! (compute, communication, stall times, collective counts and bytes), and
//! everything after it ends `copies x delta` later. Peaks of memory are
//! those of the reduced run (a repeated period reaches the same levels).
//! A run that never becomes periodic within the passes kept is not folded
//! on trust: the caller retries with a longer head ([`LEVELS`]) and in the
//! end simulates every pass. The tests hold folded and full simulations
//! equal on varied plans (`sim/tests/it/fold.rs`).
//!
//! Units: times in ns ([`crate::units::SimTime`] values), passes counted.

use crate::engine::{OpLabel, NO_INDEX};
use crate::units::SimTime;

/// Passes kept after the checked periods of a run, so that the next run
/// (or the iteration's end) does not reach back into them.
pub const TAIL: u32 = 2;

/// How much of each run a reduced iteration keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    /// Passes a run may take to settle before its periods are checked.
    pub head: u32,
    /// Longest period (in passes) looked for.
    pub max_period: u32,
}

/// The levels tried in turn: a short head and periods of one or two passes
/// (what the tested plans settle into), then longer ones; past the last,
/// the caller simulates every pass.
pub const LEVELS: [Level; 3] = [
    Level {
        head: 4,
        max_period: 2,
    },
    Level {
        head: 12,
        max_period: 4,
    },
    Level {
        head: 48,
        max_period: 4,
    },
];

/// One run of identical passes in a reduced iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    /// Reduced index of its first kept pass.
    start: u32,
    /// Passes kept.
    kept: u32,
    /// Passes in the whole iteration.
    full: u32,
}

/// Which passes a reduced iteration keeps, and the runs they stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Original index of every kept pass, ascending (what
    /// [`crate::data_parallel::Description::with_passes`] takes).
    pub kept: Vec<u32>,
    /// Passes of the whole iteration.
    pub passes: u32,
    runs: Vec<Run>,
    max_period: u32,
}

/// The least common multiple of `1..=n`.
fn lcm_upto(n: u32) -> u32 {
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    (1..=n.max(1)).fold(1, |l, k| l / gcd(l, k) * k)
}

impl Layout {
    /// The reduced iteration of the runs `runs` (`(first pass, length)` in
    /// order, covering every pass) at `level`, or `None` when no run is
    /// long enough to fold.
    pub fn new(runs: &[(u32, u32)], level: Level) -> Option<Layout> {
        let m = lcm_upto(level.max_period);
        let min_keep = level.head + 3 * level.max_period + TAIL;
        let mut kept = Vec::new();
        let mut out = Vec::with_capacity(runs.len());
        let mut passes = 0u32;
        for &(first, len) in runs {
            let keep = if len >= min_keep + m {
                min_keep + (len - min_keep) % m
            } else {
                len
            };
            out.push(Run {
                start: kept.len() as u32,
                kept: keep,
                full: len,
            });
            kept.extend(first..first + keep);
            passes = passes.max(first + len);
        }
        if out.iter().all(|r| r.kept == r.full) {
            return None;
        }
        Some(Layout {
            kept,
            passes,
            runs: out,
            max_period: level.max_period,
        })
    }

    /// Checks the reduced run's times `ops` (indexed by op, in the order
    /// the lowering emitted them) for the periods the fold needs, and says
    /// how the whole iteration unfolds from it; `None` when some folded run
    /// is not exactly periodic. `net_zero(block)` says whether the memory
    /// changes of the ops `block` sum to zero on every pool.
    pub fn detect(&self, ops: &[OpTime], net_zero: &dyn Fn(&[u32]) -> bool) -> Option<Unfold> {
        let np = self.kept.len();
        let mut by_pass: Vec<Vec<u32>> = vec![Vec::new(); np];
        for (i, o) in ops.iter().enumerate() {
            if let Some(v) = by_pass.get_mut(o.pass as usize) {
                v.push(i as u32);
            }
        }
        // Pass `j` repeats pass `i` `delta` ns later, op by op.
        let repeats = |j: u32, i: u32, delta: u64| {
            let (a, b) = (&by_pass[j as usize], &by_pass[i as usize]);
            !a.is_empty()
                && a.len() == b.len()
                && a.iter().zip(b).all(|(&x, &y)| {
                    let (x, y) = (&ops[x as usize], &ops[y as usize]);
                    x.key == y.key
                        && x.start.checked_sub(y.start) == Some(delta)
                        && x.end.checked_sub(y.end) == Some(delta)
                })
        };
        let mut folds = Vec::new();
        for run in self.runs.iter().filter(|r| r.kept < r.full) {
            let e = run.start + run.kept - TAIL;
            let found = (1..=self.max_period).find_map(|p| {
                if (run.full - run.kept) % p != 0 || e < run.start + 3 * p {
                    return None;
                }
                let first = |j: u32| by_pass[j as usize].first().map(|&o| ops[o as usize].start);
                let delta = first(e - 1)?.checked_sub(first(e - 1 - p)?)?;
                (delta > 0 && (e - 2 * p..e).all(|j| repeats(j, j - p, delta)))
                    .then_some((p, delta))
            });
            let (p, delta) = found?;
            let block: Vec<u32> = (e - p..e)
                .flat_map(|j| by_pass[j as usize].iter().copied())
                .collect();
            if !net_zero(&block) {
                return None;
            }
            folds.push(Fold {
                lo: e - p,
                hi: e,
                period: p,
                copies: u64::from((run.full - run.kept) / p),
                delta_ns: delta,
            });
        }
        Some(Unfold {
            folds,
            passes: self.passes,
        })
    }
}

/// Whether memory changes `(pool, signed bytes)` sum to zero on every
/// pool (what [`Layout::detect`] asks of a period's ops).
pub fn sums_to_zero(changes: impl IntoIterator<Item = (u32, i64)>) -> bool {
    let mut v: Vec<(u32, i64)> = changes.into_iter().collect();
    v.sort_unstable_by_key(|x| x.0);
    v.chunk_by(|a, b| a.0 == b.0)
        .all(|c| c.iter().fold(0i64, |s, x| s.saturating_add(x.1)) == 0)
}

/// One op of a reduced run, as [`Layout::detect`] reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpTime {
    /// Reduced pass of the op ([`NO_INDEX`]: after every pass, e.g. the
    /// optimizer step).
    pub pass: u32,
    /// Start, ns.
    pub start: u64,
    /// End, ns.
    pub end: u64,
    /// What the op is (duration and kind folded into one number): two ops
    /// a period apart must agree.
    pub key: u64,
}

impl OpTime {
    /// The op labelled `label` (its pass is [`OpLabel::micro`]) lasting
    /// `duration` alone, run from `start` to `end` (ns).
    pub fn new(label: OpLabel, duration: SimTime, start: u64, end: u64) -> OpTime {
        OpTime {
            pass: label.micro,
            start,
            end,
            key: duration.0 ^ ((label.category as u64) << 56),
        }
    }
}

/// One folded run: the block of passes `lo..hi` (one period) stands for
/// itself and `copies` more periods, each `delta_ns` later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fold {
    lo: u32,
    hi: u32,
    period: u32,
    copies: u64,
    delta_ns: u64,
}

/// One folded block as the report's breakdown sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Its reduced passes, `lo..hi` (one period).
    pub passes: std::ops::Range<u32>,
    /// The period, ns: the whole iteration runs the block `copies` more
    /// times, each this much later.
    pub delta_ns: u64,
    /// Extra copies.
    pub copies: u64,
}

/// How the whole iteration unfolds from a reduced run ([`Layout::detect`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfold {
    folds: Vec<Fold>,
    passes: u32,
}

impl Unfold {
    /// How many ops of the whole iteration an op of reduced pass `pass`
    /// stands for (1, or `1 + copies` inside a folded block).
    pub fn weight(&self, pass: u32) -> u64 {
        self.folds
            .iter()
            .find(|f| (f.lo..f.hi).contains(&pass))
            .map_or(1, |f| 1 + f.copies)
    }

    /// How much later than in the reduced run the last op an op of
    /// reduced pass `pass` stands for ends, ns (its last copy inside a
    /// folded block; [`NO_INDEX`], after every pass, moves by
    /// [`Self::total_shift_ns`]).
    pub fn shift_last_ns(&self, pass: u32) -> u64 {
        self.inserted_ns(|f| pass >= f.lo)
    }

    /// How much later than in the reduced run the first op an op of
    /// reduced pass `pass` stands for happens, ns.
    pub fn shift_first_ns(&self, pass: u32) -> u64 {
        self.inserted_ns(|f| pass >= f.hi)
    }

    /// The time the copies of the folds `which` insert, ns.
    fn inserted_ns(&self, which: impl Fn(&Fold) -> bool) -> u64 {
        self.folds.iter().filter(|f| which(f)).fold(0u64, |s, f| {
            s.saturating_add(f.copies.saturating_mul(f.delta_ns))
        })
    }

    /// How much later the iteration ends than the reduced run, ns.
    pub fn total_shift_ns(&self) -> u64 {
        self.shift_last_ns(NO_INDEX)
    }

    /// Passes of the whole iteration not simulated event by event (each a
    /// copy of a simulated period).
    pub fn folded_passes(&self) -> u32 {
        self.folds
            .iter()
            .map(|f| (f.copies as u32).saturating_mul(f.period))
            .sum()
    }

    /// The folded blocks, in pass order. A rank that computes nothing in
    /// a block waits through it and its copies: a wait of its timeline
    /// from a compute op before the block to one after lasts `copies x
    /// delta_ns` longer, holding that many more copies of what the rank's
    /// other streams do in one period.
    pub fn blocks(&self) -> impl Iterator<Item = Block> + '_ {
        self.folds.iter().map(|f| Block {
            passes: f.lo..f.hi,
            delta_ns: f.delta_ns,
            copies: f.copies,
        })
    }

    /// Passes of the whole iteration.
    pub fn passes(&self) -> u32 {
        self.passes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L1: Level = Level {
        head: 4,
        max_period: 2,
    };

    #[test]
    fn layout_keeps_short_runs_and_folds_long_ones() {
        // Runs of 1, 100 and 12 passes: the long one keeps 4 + 6 + 2 = 12
        // passes, plus (100 - 12) mod 2 = 0.
        let l = Layout::new(&[(0, 1), (1, 100), (101, 12)], L1).unwrap();
        assert_eq!(l.passes, 113);
        assert_eq!(l.kept.len(), 1 + 12 + 12);
        assert_eq!(&l.kept[..3], &[0, 1, 2]);
        assert_eq!(l.kept[13], 101);
        // Left out: a multiple of every period tried.
        let r = l.runs[1];
        assert_eq!((r.full - r.kept) % lcm_upto(2), 0);
        assert!(Layout::new(&[(0, 5), (5, 13)], L1).is_none());
        assert_eq!(lcm_upto(4), 12);
    }

    /// Times of a reduced run whose passes each hold `per` ops, pass `j`
    /// starting at `t(j)`.
    fn times(passes: u32, per: u32, t: impl Fn(u32) -> u64) -> Vec<OpTime> {
        let mut v = Vec::new();
        for j in 0..passes {
            for i in 0..per {
                let s = t(j) + 10 * u64::from(i);
                v.push(OpTime {
                    pass: j,
                    start: s,
                    end: s + 7,
                    key: u64::from(i),
                });
            }
        }
        v.push(OpTime {
            pass: NO_INDEX,
            start: t(passes),
            end: t(passes) + 5,
            key: 99,
        });
        v
    }

    #[test]
    fn a_periodic_run_unfolds_and_a_drifting_one_does_not() {
        let l = Layout::new(&[(0, 40)], L1).unwrap();
        let n = l.kept.len() as u32;
        assert_eq!(n, 12);
        let ok = |_: &[u32]| true;
        // Steady from pass 2: every pass 100 ns.
        let steady = times(n, 3, |j| {
            if j < 2 {
                37 * u64::from(j)
            } else {
                100 * u64::from(j)
            }
        });
        let u = l.detect(&steady, &ok).expect("periodic");
        assert_eq!(u.folded_passes(), 40 - 12);
        assert_eq!(u.total_shift_ns(), 28 * 100);
        // The block is the pass before the tail (period 1).
        assert_eq!(u.weight(9), 29);
        assert_eq!(u.weight(8), 1);
        assert_eq!(u.shift_first_ns(9), 0);
        assert_eq!(u.shift_last_ns(9), 2800);
        assert_eq!(u.shift_first_ns(10), 2800);
        // Period 2 (alternating 100 and 60 ns).
        let alt = |j: u32| u64::from(j / 2) * 160 + if j % 2 == 1 { 100 } else { 0 };
        let u = l.detect(&times(n, 3, alt), &ok).expect("period 2");
        assert_eq!(u.folded_passes(), 28);
        assert_eq!(u.total_shift_ns(), 14 * 160);
        // Drifting by one ns a pass: never folded.
        let drift = times(n, 3, |j| 100 * u64::from(j) + u64::from(j * j));
        assert!(l.detect(&drift, &ok).is_none());
        // Periodic times but memory that grows every pass: not folded.
        assert!(l.detect(&steady, &|_: &[u32]| false).is_none());
    }

    #[test]
    fn memory_sums_per_pool() {
        assert!(sums_to_zero([(0, 5), (1, 3), (0, -5), (1, -3)]));
        assert!(!sums_to_zero([(0, 5), (1, -5)]));
        assert!(sums_to_zero([]));
    }
}
