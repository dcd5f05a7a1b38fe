//! FSDP / HSDP inside a one-stage plan, unit by unit: what each use of a
//! unit does with its parameters and gradients, as torchtitan runs FSDP2
//! without a pipeline (`reshard_after_forward = True`, REAL-SYSTEMS-2
//! section 2.1; REAL-SYSTEMS section 2.9 for the per-unit pattern) and the
//! data-parallel description runs `full` / `hybrid` sharding
//! ([`crate::data_parallel`]): each unit (embedding, every block, the head) is
//! all-gathered before its forward and freed after it, gathered again
//! before its backward and freed after it, its gradient reduce-scattered
//! once it is complete (after every micro-batch's backward under `sync`,
//! after the last under `no-sync`, the unsharded gradient held between).
//! The head (`[norm, output]`) is not resharded after its forward, so its
//! backward finds it gathered. The order of the uses is the stage's
//! schedule ([`super::schedule::actions`]); [`crate::lower::pipeline`] emits them,
//! each use on every replica before the next, with the gathers prefetched
//! two phases ahead ([`prefetch_after`]).
//!
//! Units: 0 the embedding, 1 to `L` the blocks, `L + 1` the head.

use super::schedule::Action;
use crate::plan::pipeline::Pipeline;

/// What one unit does in one use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UseKind {
    /// A forward.
    Forward,
    /// A backward (its input-gradient part when the schedule splits it).
    Backward,
    /// The weight-gradient part of a split backward.
    Weight,
}

/// One use of a unit by every replica of the stage, in the stage's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Use {
    /// The unit.
    pub unit: u32,
    /// The micro-batch.
    pub k: u32,
    /// Forward, backward or weight-gradient part.
    pub kind: UseKind,
    /// The unit is sharded before it: an all-gather brings it.
    pub gathers: bool,
    /// Its gathered parameters are freed when it ends.
    pub reshards: bool,
    /// It writes the unit's weight gradient.
    pub grads: bool,
    /// It allocates the unit's unsharded gradient buffer (the first
    /// gradient of the step, or every one under `sync`).
    pub grad_alloc: bool,
    /// The unit's gradient is complete after it: reduce-scattered (and
    /// under HSDP all-reduced across the shard groups), its buffer freed.
    pub reduces: bool,
}

/// The units virtual stage `x` of `pipe` runs in `action`, in order
/// (forward: embedding on the first, its blocks, head on the last;
/// backward the reverse; weight-gradient parts its blocks in reverse), for
/// a model of `layers` blocks.
pub fn units(pipe: &Pipeline, layers: u32, x: usize, action: Action) -> Vec<u32> {
    let first = pipe.virtual_first_block(x);
    let last = first + pipe.virtual_blocks(x) - 1;
    let (is_first, is_last) = (x == 0, x + 1 == pipe.virtual_depth());
    let mut v: Vec<u32> = Vec::with_capacity((last - first + 3) as usize);
    match action {
        Action::Fwd(_) => {
            v.extend(is_first.then_some(0));
            v.extend(first..=last);
            v.extend(is_last.then_some(layers + 1));
        }
        Action::Bwd(_) => {
            v.extend(is_last.then_some(layers + 1));
            v.extend((first..=last).rev());
            v.extend(is_first.then_some(0));
        }
        Action::Wgt(_) => v.extend((first..=last).rev()),
    }
    v
}

/// Every use of a one-stage `pipe` in the order `order` (its virtual
/// stages' actions, [`super::schedule::topological`]), for a model of
/// `layers` blocks; `sync` reduces every micro-batch's gradients.
pub fn uses(pipe: &Pipeline, layers: u32, order: &[(usize, Action)], sync: bool) -> Vec<Use> {
    let head = layers + 1;
    let split = pipe.schedule.splits_backward();
    // Which use writes a unit's weight gradient: the backward, or a
    // block's weight-gradient part when the schedule splits it.
    let writes = |u: u32, kind: UseKind| match kind {
        UseKind::Forward => false,
        UseKind::Backward => !(split && (1..=layers).contains(&u)),
        UseKind::Weight => true,
    };
    let mut out: Vec<Use> = Vec::new();
    let mut gathered = vec![false; head as usize + 1];
    for &(x, action) in order {
        let (k, kind) = match action {
            Action::Fwd(k) => (k, UseKind::Forward),
            Action::Bwd(k) => (k, UseKind::Backward),
            Action::Wgt(k) => (k, UseKind::Weight),
        };
        for u in units(pipe, layers, x, action) {
            let needs = kind != UseKind::Weight;
            let gathers = needs && !gathered[u as usize];
            // Every unit reshards after its backward, all but the head after
            // its forward too.
            let reshards = match kind {
                UseKind::Forward => u != head,
                UseKind::Backward => true,
                UseKind::Weight => false,
            };
            if needs {
                gathered[u as usize] = !reshards;
            }
            let grads = writes(u, kind);
            out.push(Use {
                unit: u,
                k,
                kind,
                gathers,
                reshards,
                grads,
                grad_alloc: false,
                reduces: false,
            });
        }
    }
    // The first and the last gradient use of each unit.
    let mut first: Vec<Option<usize>> = vec![None; head as usize + 1];
    let mut last: Vec<Option<usize>> = vec![None; head as usize + 1];
    for (i, u) in out.iter().enumerate().filter(|(_, u)| u.grads) {
        first[u.unit as usize].get_or_insert(i);
        last[u.unit as usize] = Some(i);
    }
    for (i, u) in out.iter_mut().enumerate().filter(|(_, u)| u.grads) {
        u.grad_alloc = sync || first[u.unit as usize] == Some(i);
        u.reduces = sync || last[u.unit as usize] == Some(i);
    }
    out
}

/// Per use of `uses`, the use whose all-gather is issued once it ends
/// (after its reductions), so at most two phases' parameters are gathered
/// at a time: a phase is a gathering use and the uses up to the next
/// gathering one, and phase `i + 2`'s gather follows phase `i`'s last use
/// (FSDP's rate limiter, the data-parallel description's prefetch). The
/// first two gathers are issued at the step's start: the second element.
pub fn prefetch_after(uses: &[Use]) -> (Vec<Option<usize>>, Vec<usize>) {
    let gathering: Vec<usize> = (0..uses.len()).filter(|&i| uses[i].gathers).collect();
    let mut after = vec![None; uses.len()];
    for i in 0..gathering.len().saturating_sub(2) {
        // Phase i ends where phase i + 1 begins.
        let end = gathering[i + 1] - 1;
        after[end] = Some(gathering[i + 2]);
    }
    (after, gathering.into_iter().take(2).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::schedule::topological;
    use crate::plan::pipeline::{PipeSchedule, Stage};

    fn one_stage(schedule: PipeSchedule, m: u32, blocks: u32) -> (Pipeline, Vec<(usize, Action)>) {
        let pipe = Pipeline::new(schedule, m, vec![Stage::new(blocks, vec![0, 1])]);
        let order = topological(schedule, 1, m, 1).unwrap();
        (pipe, order)
    }

    #[test]
    fn one_f_one_b_gathers_every_unit_twice_and_the_head_once() {
        let (pipe, order) = one_stage(PipeSchedule::OneFOneB, 2, 3);
        let u = uses(&pipe, 3, &order, true);
        // Per micro-batch: embedding, 3 blocks, head forward; head, 3
        // blocks, embedding backward.
        assert_eq!(u.len(), 2 * 10);
        let gathers = u.iter().filter(|x| x.gathers).count();
        assert_eq!(gathers, 2 * (4 + 1 + 4));
        // The head is gathered for its forward and kept for its backward.
        let h: Vec<&Use> = u.iter().filter(|x| x.unit == 4).collect();
        assert!(h[0].gathers && !h[0].reshards && !h[1].gathers && h[1].reshards);
        // sync: every backward allocates and reduces.
        assert!(u
            .iter()
            .filter(|x| x.kind == UseKind::Backward)
            .all(|x| x.grads && x.grad_alloc && x.reduces));
        // no-sync: the first backward allocates, the last reduces.
        let n = uses(&pipe, 3, &order, false);
        for unit in 0..=4 {
            let b: Vec<&Use> = n.iter().filter(|x| x.unit == unit && x.grads).collect();
            assert_eq!(b.len(), 2);
            assert!(b[0].grad_alloc && !b[0].reduces && !b[1].grad_alloc && b[1].reduces);
        }
    }

    #[test]
    fn gathers_are_prefetched_two_phases_ahead() {
        let (pipe, order) = one_stage(PipeSchedule::OneFOneB, 1, 2);
        let u = uses(&pipe, 2, &order, true);
        // emb, b1, b2, head-f, head-b, b2, b1, emb: 7 gathering uses.
        let (after, first) = prefetch_after(&u);
        assert_eq!(first, vec![0, 1]);
        assert_eq!(after[0], Some(2));
        assert_eq!(after[1], Some(3));
        // Block 2's backward gather follows its forward; block 1's the
        // head's phase (its forward and backward).
        assert_eq!(after[2], Some(5));
        assert_eq!(after[3], None);
        assert_eq!(after[4], Some(6));
        assert_eq!(after[5], Some(7));
        assert_eq!(after[6], None);
    }

    #[test]
    fn split_backwards_reduce_after_the_weight_parts() {
        let (pipe, order) = one_stage(PipeSchedule::ZbH1, 2, 2);
        let u = uses(&pipe, 2, &order, false);
        for x in &u {
            let block = (1..=2).contains(&x.unit);
            match x.kind {
                UseKind::Backward => assert_eq!(x.grads, !block),
                UseKind::Weight => assert!(x.grads && !x.gathers && !x.reshards),
                UseKind::Forward => assert!(!x.grads),
            }
        }
        // Each block's last weight-gradient part reduces.
        let last = u
            .iter()
            .rev()
            .find(|x| x.unit == 1 && x.kind == UseKind::Weight)
            .unwrap();
        assert!(last.reduces);
    }
}
