//! A choice by classes of identical ranks (type, batch, micro-batches),
//! priced once per class ([`Classes`]), and the score the refinement
//! compares plans by ([`better`]).

use super::tables::{Choice, Search, OPT_TOL};
use crate::planner::closed_form::{ClosedForm, RankCost};

/// Identical ranks of a choice: (type, batch, count).
pub(super) type ClassKey = (usize, u32, u32);

/// A plan's score for [`better`]: iteration time, GPUs at it, total rank time.
pub(super) type Score = (f64, usize, f64);

/// A choice kept with its classes of identical ranks, so that the
/// refinement ([`super::refine::refine`]) prices a candidate (the choice
/// with one or two ranks changed) in the number of classes, not of GPUs: a
/// 4,096-GPU plan has a few dozen.
#[derive(Debug, Clone)]
pub(super) struct Classes {
    /// Per rank `(b, n)`.
    pub(super) choice: Choice,
    /// Rank types.
    rank_type: Vec<usize>,
    /// Per class: its ranks.
    members: std::collections::BTreeMap<ClassKey, std::collections::BTreeSet<usize>>,
}

/// A choice's closed-form times by class ([`Classes::times_with`]).
pub(super) struct ClassScore {
    /// The water level of the state (its largest fraction).
    pub(super) level: f64,
    /// Per class (in key order): key, ranks in it, rank time (ms).
    ms: Vec<(ClassKey, usize, f64)>,
}

impl Classes {
    /// The classes of `choice`, a choice of the search `s`.
    pub(super) fn of(s: &Search<'_, '_>, choice: &Choice) -> Classes {
        let mut members: std::collections::BTreeMap<ClassKey, std::collections::BTreeSet<usize>> =
            Default::default();
        for (r, &(b, n)) in choice.iter().enumerate() {
            members.entry((s.rank_type[r], b, n)).or_default().insert(r);
        }
        Classes {
            choice: choice.clone(),
            rank_type: s.rank_type.clone(),
            members,
        }
    }

    /// The class of rank `r`.
    fn key(&self, r: usize) -> ClassKey {
        let (b, n) = self.choice[r];
        (self.rank_type[r], b, n)
    }

    /// Rank `r` moves to class `key`.
    pub(super) fn set(&mut self, r: usize, key: ClassKey) {
        let old = self.key(r);
        if let Some(m) = self.members.get_mut(&old) {
            m.remove(&r);
            if m.is_empty() {
                self.members.remove(&old);
            }
        }
        self.members.entry(key).or_default().insert(r);
        self.choice[r] = (key.1, key.2);
    }

    /// The first rank of every class, in rank order, of this choice with
    /// `change` (a rank and its new class) applied.
    pub(super) fn representatives(&self, change: Option<(usize, ClassKey)>) -> Vec<usize> {
        let mut v: Vec<usize> = Vec::with_capacity(self.members.len() + 1);
        let moved = change.map(|(r, _)| (r, self.key(r)));
        for (key, m) in &self.members {
            let first = match moved {
                Some((r, old)) if old == *key => m.iter().copied().find(|&x| x != r),
                _ => m.first().copied(),
            };
            let first = match change {
                Some((r, new)) if new == *key => Some(first.map_or(r, |f| f.min(r))),
                _ => first,
            };
            v.extend(first);
        }
        if let Some((r, new)) = change {
            if !self.members.contains_key(&new) {
                v.push(r);
            }
        }
        v.sort_unstable();
        v
    }

    /// The closed-form times of this choice with `changes` applied, by class
    /// (`None` when an option or the state does not fit), priced by
    /// [`ClosedForm::price_classes`]; options are priced once per class over
    /// the whole refinement (`cache`).
    pub(super) fn times_with(
        &self,
        changes: &[(usize, ClassKey)],
        cf: &ClosedForm<'_>,
        cache: &std::cell::RefCell<rustc_hash::FxHashMap<ClassKey, Option<RankCost>>>,
    ) -> Option<ClassScore> {
        let mut counts: std::collections::BTreeMap<ClassKey, usize> =
            self.members.iter().map(|(k, m)| (*k, m.len())).collect();
        for &(r, new) in changes {
            let old = self.key(r);
            if let Some(c) = counts.get_mut(&old) {
                *c -= 1;
            }
            *counts.entry(new).or_insert(0) += 1;
        }
        counts.retain(|_, c| *c > 0);
        let mut keys = Vec::with_capacity(counts.len());
        let mut priced = Vec::with_capacity(counts.len());
        for (&key, &n) in &counts {
            let o = *cache
                .borrow_mut()
                .entry(key)
                .or_insert_with(|| cf.option(key.0, key.1, key.2));
            keys.push((key, n));
            priced.push((key.0, o?, n));
        }
        let (level, times) = cf.price_classes(&priced)?;
        let ms = keys
            .into_iter()
            .zip(times)
            .map(|((k, n), t)| (k, n, t))
            .collect();
        Some(ClassScore { level, ms })
    }
}

impl ClassScore {
    /// The score [`better`] compares: the iteration time, the GPUs at it
    /// and the total rank time.
    pub(super) fn score(&self) -> (f64, usize, f64) {
        let top = self.ms.iter().map(|m| m.2).fold(0.0, f64::max);
        let at_top = self
            .ms
            .iter()
            .filter(|m| m.2 >= top * (1.0 - OPT_TOL))
            .map(|m| m.1)
            .sum();
        (top, at_top, self.ms.iter().map(|m| m.2 * m.1 as f64).sum())
    }

    /// The rank with samples whose time is the largest (the lowest such
    /// rank on a tie).
    pub(super) fn bottleneck_rank(&self, c: &Classes) -> Option<usize> {
        let busy = self.ms.iter().filter(|m| m.0 .1 > 0);
        let top = busy.clone().map(|m| m.2).max_by(f64::total_cmp)?;
        busy.filter(|m| m.2.total_cmp(&top).is_eq())
            .filter_map(|m| c.members.get(&m.0)?.first().copied())
            .min()
    }
}

/// Whether score `a` is better than `b`: a score orders plans by least
/// iteration time, then fewest GPUs at it, then least total rank time
/// ([`ClassScore::score`]), each compared within [`OPT_TOL`].
pub(super) fn better(a: &(f64, usize, f64), b: &(f64, usize, f64)) -> bool {
    a.0 < b.0 * (1.0 - OPT_TOL)
        || (a.0 <= b.0 * (1.0 + OPT_TOL)
            && (a.1 < b.1 || (a.1 == b.1 && a.2 < b.2 * (1.0 - OPT_TOL))))
}
