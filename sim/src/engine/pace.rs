//! Shared links and compute-communication interference: the ops whose pace
//! may change while they run, the load of every link, the collectives
//! running on every rank, and the rescheduling of ends when a pace changes.

use super::graph::{slot_rank, ShareIndex, NONE};
use super::queue::EventQueue;

/// A running op whose pace may change (it has link shares, or it is a
/// compute op under interference).
#[derive(Debug, Clone, Copy)]
struct Running {
    op: u32,
    /// Seq of its scheduled end (older heap entries are stale).
    seq: u32,
    /// Whether an end has been scheduled.
    scheduled: bool,
    /// Own work left at `last`, ns.
    remaining_ns: f64,
    /// Current slowdown (>= 1).
    slowdown: f64,
    last: u64,
    /// Largest load over its links, and how many of its links carry it.
    link_max: f64,
    at_max: u32,
    /// The link maximum must be recomputed (no link carries it any more).
    stale_max: bool,
}

/// State of link sharing and interference.
pub(super) struct Dynamic {
    /// Compute slowdown fraction while a collective runs on the rank.
    pub(super) interference: f64,
    /// Per slot (the op's first participant): the running dynamic op.
    running: Vec<Option<Running>>,
    /// Per resource: sum of busy fractions of the ops on it.
    load: Vec<f64>,
    /// Per resource: slots of the running ops on it.
    on_link: Vec<Vec<u32>>,
    /// Per rank: ops running on its comm and reduce streams.
    comm_active: Vec<u32>,
    /// Per rank: slot of its running dynamic compute op, or `NONE`.
    compute_slot: Vec<u32>,
    /// Slots whose pace must be recomputed (deduplicated by `mark`).
    touched: Vec<u32>,
    mark: Vec<bool>,
    /// Ends rescheduled because an op's pace changed (events beyond one
    /// start and one end per op).
    pub(super) rescheduled: u64,
}

impl Dynamic {
    /// Nothing running yet on `slots` stream slots, `resources` links and
    /// `ranks` ranks, with compute slowdown `interference`.
    pub(super) fn new(interference: f64, slots: usize, resources: usize, ranks: usize) -> Dynamic {
        Dynamic {
            interference,
            running: vec![None; slots],
            load: vec![0.0; resources],
            on_link: vec![Vec::new(); resources],
            comm_active: vec![0; ranks],
            compute_slot: vec![NONE; ranks],
            touched: Vec::new(),
            mark: vec![false; slots],
            rescheduled: 0,
        }
    }

    /// Registers `op` (first participant slot `first`, `duration_ns` of
    /// its own work) starting at `now`: puts it on its links (`shares`)
    /// and, when it `interferes`, as its rank's compute op; touches it and
    /// the neighbours whose pace may change.
    pub(super) fn begin(
        &mut self,
        op: u32,
        first: u32,
        duration_ns: u64,
        shares: &[(u32, f32)],
        interferes: bool,
        now: u64,
    ) {
        self.running[first as usize] = Some(Running {
            op,
            seq: 0,
            scheduled: false,
            remaining_ns: duration_ns as f64,
            slowdown: 1.0,
            last: now,
            link_max: 0.0,
            at_max: 0,
            stale_max: true,
        });
        if interferes {
            self.compute_slot[slot_rank(first) as usize] = first;
        }
        for &(r, f) in shares {
            let old = self.load[r as usize];
            self.load[r as usize] = old + f as f64;
            self.link_changed(r, old);
            self.on_link[r as usize].push(first);
        }
        self.touch(first);
    }

    /// Handles a popped end of dynamic `op` (key seq `seq`, first slot
    /// `first`, links `shares`): false for a stale entry (the op was
    /// rescheduled); else takes it off its links and its rank and touches
    /// the neighbours whose pace may change.
    pub(super) fn end(&mut self, op: u32, seq: u32, first: u32, shares: &[(u32, f32)]) -> bool {
        match self.running[first as usize] {
            Some(run) if run.op == op && run.seq == seq => {}
            _ => return false,
        }
        self.running[first as usize] = None;
        for &(r, f) in shares {
            let old = self.load[r as usize];
            self.load[r as usize] = if old - (f as f64) < 1e-9 {
                0.0
            } else {
                old - f as f64
            };
            let list = &mut self.on_link[r as usize];
            if let Some(i) = list.iter().position(|&x| x == first) {
                list.swap_remove(i);
            }
            self.link_changed(r, old);
        }
        let rank = slot_rank(first) as usize;
        if self.compute_slot[rank] == first {
            self.compute_slot[rank] = NONE;
        }
        true
    }

    /// A communication op started on `slots`: each rank that had none
    /// running touches its compute op (now slowed).
    pub(super) fn comm_started(&mut self, slots: &[u32]) {
        for &s in slots {
            let r = slot_rank(s) as usize;
            self.comm_active[r] += 1;
            if self.comm_active[r] == 1 {
                let c = self.compute_slot[r];
                if c != NONE {
                    self.touch(c);
                }
            }
        }
    }

    /// A communication op ended on `slots`: each rank left with none
    /// running touches its compute op (no longer slowed).
    pub(super) fn comm_ended(&mut self, slots: &[u32]) {
        for &s in slots {
            let r = slot_rank(s) as usize;
            self.comm_active[r] -= 1;
            if self.comm_active[r] == 0 {
                let c = self.compute_slot[r];
                if c != NONE {
                    self.touch(c);
                }
            }
        }
    }

    fn touch(&mut self, slot: u32) {
        if !self.mark[slot as usize] {
            self.mark[slot as usize] = true;
            self.touched.push(slot);
        }
    }

    /// The load of link `r` changed from `old` (to `load[r]`): updates the
    /// link maximum of the ops on it and touches those whose pace may change.
    fn link_changed(&mut self, r: u32, old: f64) {
        let new = self.load[r as usize];
        for i in 0..self.on_link[r as usize].len() {
            let s = self.on_link[r as usize][i];
            let Some(run) = self.running[s as usize].as_mut() else {
                continue;
            };
            if run.stale_max {
                continue;
            }
            let was_max = old == run.link_max;
            let changed = if new > run.link_max {
                run.link_max = new;
                run.at_max = 1;
                true
            } else if new == run.link_max {
                if !was_max {
                    run.at_max += 1;
                }
                false
            } else if was_max {
                run.at_max -= 1;
                if run.at_max == 0 {
                    run.stale_max = true;
                    true
                } else {
                    false
                }
            } else {
                false
            };
            if changed {
                self.touch(s);
            }
        }
    }

    /// Brings every touched op's progress up to `now`, recomputes its
    /// slowdown and reschedules its end in `queue` when it changed (the
    /// links of an op are its `shares`).
    pub(super) fn repace(&mut self, now: u64, shares: &ShareIndex<'_>, queue: &mut EventQueue) {
        let touched = std::mem::take(&mut self.touched);
        for &slot in &touched {
            self.mark[slot as usize] = false;
            let Some(mut run) = self.running[slot as usize] else {
                continue;
            };
            if run.stale_max {
                run.link_max = 0.0;
                run.at_max = 0;
                for &(r, _) in shares.of(run.op) {
                    let l = self.load[r as usize];
                    if l > run.link_max {
                        run.link_max = l;
                        run.at_max = 1;
                    } else if l == run.link_max {
                        run.at_max += 1;
                    }
                }
                run.stale_max = false;
            }
            let mut slowdown = run.link_max.max(1.0);
            let rank = slot_rank(slot) as usize;
            if self.compute_slot[rank] == slot && self.comm_active[rank] > 0 {
                slowdown *= 1.0 + self.interference;
            }
            let fresh = !run.scheduled;
            if !fresh && slowdown == run.slowdown {
                self.running[slot as usize] = Some(run);
                continue;
            }
            let elapsed = (now - run.last) as f64;
            run.remaining_ns = (run.remaining_ns - elapsed / run.slowdown).max(0.0);
            run.last = now;
            run.slowdown = slowdown;
            let end = queue.end_at(run.op, now, (run.remaining_ns * slowdown).ceil() as u64);
            if !fresh {
                self.rescheduled += 1;
            }
            run.seq = queue.push(run.op, end);
            run.scheduled = true;
            self.running[slot as usize] = Some(run);
        }
        let mut touched = touched;
        touched.clear();
        self.touched = touched;
    }
}
