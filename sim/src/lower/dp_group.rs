//! One emitter of a data-parallel group's collectives, for every layout:
//! the gradient reduction (DDP's all-reduce; ZeRO-1/2 and FSDP's
//! reduce-scatter in each shard group; HSDP's reduce-scatter, then the
//! all-reduce of each shard across the shard groups) and the parameter
//! all-gathers (FSDP's per unit, the distributed optimizer's after its
//! step), over the GPUs that hold the same part of the model: every GPU of
//! a one-stage layout without TP, or one TP rank's replicas of a stage.
//!
//! The walks decide when (per unit and pass, per bucket, once per step),
//! what each reduction waits for and which buffers it frees; the group
//! decides which collectives run over which GPUs, how large, on which
//! stream, and what each GPU's optimizer step then waits for.

use super::collectives::{buffer_bytes, Collectives, Recorded};
use super::sink::Sink;
use crate::comm::CollectiveKind;
use crate::engine::{MemChange, OpId, OpLabel, Stream};
use crate::strategy::Sharding;
use crate::units::SimTime;

/// A data-parallel group: its GPUs (rank order of the replicas), cut into
/// shard groups of `shard_width` consecutive members; the members at the
/// same position of every shard group form that position's replica group
/// (HSDP's `dp_replicate` dimension).
#[derive(Debug, Clone, Copy)]
pub struct DpGroup<'r> {
    /// The GPUs, in replica order.
    pub ranks: &'r [usize],
    /// Members per shard group (all of them under ZeRO / FSDP, the
    /// `dp_shard` size under HSDP; unused without sharding).
    pub shard_width: usize,
    /// How the training state is split over the group.
    pub sharding: Sharding,
}

/// How one gradient reduction of a group is emitted.
pub struct Reduction<'f> {
    /// Unit its records carry ([`Recorded::unit`]).
    pub unit: u32,
    /// Without sharding: the gradient buckets reduced together (bytes
    /// each), all-reduced over the whole group as one op (DDP's buckets
    /// ready at once).
    pub buckets: &'f [f64],
    /// With sharding: what fixes shard group `k`'s reduce-scatter pieces
    /// (its gradient bytes), and the pieces (bytes per member).
    pub pieces: &'f dyn Fn(usize) -> (f64, Vec<f64>),
    /// Under HSDP: the all-reduced shard's bytes at position `q`.
    pub replica_bytes: &'f dyn Fn(usize) -> f64,
    /// What a reduction over these GPUs waits for (their gradients).
    pub deps: &'f dyn Fn(&[usize]) -> Vec<OpId>,
    /// Memory changes of a reduction over these GPUs (their emitted
    /// members; the gradient buffers it frees).
    pub mems: &'f mut dyn FnMut(&[usize]) -> Vec<MemChange>,
    /// Stream of the all-reduce or the reduce-scatters (FSDP's reduce-
    /// scatters share the all-gathers' queue, a stage's whole reduction
    /// runs on the reduce stream); HSDP's all-reduce always runs on the
    /// reduce stream.
    pub stream: Stream,
    /// Labels: the group's all-reduce or reduce-scatter, HSDP's all-reduce.
    pub labels: (OpLabel, OpLabel),
}

impl std::fmt::Debug for Reduction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reduction")
            .field("unit", &self.unit)
            .field("buckets", &self.buckets)
            .field("stream", &self.stream)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// What a reduction emitted, by position in the group.
#[derive(Debug, Clone, Default)]
pub struct Reduced {
    /// The all-reduce or reduce-scatter each GPU joined.
    pub shard: Vec<Option<OpId>>,
    /// HSDP's all-reduce each GPU joined.
    pub replica: Vec<Option<OpId>>,
}

impl Reduced {
    /// The last reduction GPU at `pos` joined (HSDP's all-reduce after its
    /// reduce-scatter), if any.
    pub fn last(&self, pos: usize) -> Option<OpId> {
        self.replica[pos].or(self.shard[pos])
    }

    /// What GPU at `pos` has its reduced gradient after: its last
    /// reduction, else (nothing to reduce) `otherwise`.
    pub fn done(&self, pos: usize, otherwise: &[OpId]) -> Vec<OpId> {
        match self.last(pos) {
            Some(op) => vec![op],
            None => otherwise.to_vec(),
        }
    }
}

/// How one all-gather of the group's parameters is emitted.
pub struct Gathering<'f> {
    /// Unit its records carry.
    pub unit: u32,
    /// What fixes shard group `k`'s pieces (its parameter bytes), and the
    /// pieces (bytes per member).
    pub pieces: &'f dyn Fn(usize) -> (f64, Vec<f64>),
    /// What a shard group's all-gather waits for.
    pub deps: &'f dyn Fn(&[usize]) -> Vec<OpId>,
    /// Its memory changes (the gathered parameters), per shard group's
    /// emitted members.
    pub mems: &'f dyn Fn(&[usize]) -> Vec<MemChange>,
    /// Its stream.
    pub stream: Stream,
    /// Its label.
    pub label: OpLabel,
}

impl std::fmt::Debug for Gathering<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gathering")
            .field("unit", &self.unit)
            .field("stream", &self.stream)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl DpGroup<'_> {
    /// Shard groups (consecutive members).
    pub fn shard_groups(&self) -> std::slice::Chunks<'_, usize> {
        self.ranks.chunks(self.shard_width.max(1))
    }

    /// The replica group at position `q` of every shard group.
    pub fn replica_group(&self, q: usize) -> Vec<usize> {
        let h = self.shard_width.max(1);
        self.ranks.iter().skip(q).step_by(h).copied().collect()
    }

    /// One gradient reduction as `r` says (see the module doc). A group of
    /// one GPU reduces nothing: without sharding nothing is emitted; with
    /// sharding a zero-time op frees its buffers when `r.mems` has any.
    pub fn reduce<S: Sink>(&self, c: &mut Collectives<'_>, g: &mut S, r: Reduction<'_>) -> Reduced {
        let n = self.ranks.len();
        let mut out = Reduced {
            shard: vec![None; n],
            replica: vec![None; n],
        };
        if self.sharding.keeps_full_grads() {
            let part = c.emitted(self.ranks);
            if n < 2 || part.is_empty() || r.buckets.is_empty() {
                return out;
            }
            let kind = CollectiveKind::AllReduce;
            let ms: f64 = r
                .buckets
                .iter()
                .map(|&b| c.price(kind, self.ranks, b, || vec![b; n]))
                .sum();
            let deps = (r.deps)(self.ranks);
            let mems = (r.mems)(&part);
            let rec = Recorded {
                kind,
                unit: r.unit,
                count: r.buckets.len() as u32,
                buffer_bytes: r.buckets.iter().sum(),
            };
            let op = c.emit(
                g,
                self.ranks,
                r.stream,
                dur(ms),
                &deps,
                r.labels.0,
                &mems,
                rec,
            );
            out.shard = vec![Some(op); n];
            return out;
        }
        let h = self.shard_width.max(1);
        // Per shard group, what its shards are complete after.
        let mut scattered: Vec<OpId> = Vec::new();
        for (k, sub) in self.shard_groups().enumerate() {
            let part = c.emitted(sub);
            if part.is_empty() {
                continue;
            }
            let deps = (r.deps)(sub);
            let mems = (r.mems)(&part);
            if sub.len() < 2 && mems.is_empty() {
                scattered.extend(deps);
                continue;
            }
            let kind = CollectiveKind::ReduceScatter;
            let (bytes, pieces) = (r.pieces)(k);
            let ms = c.price(kind, sub, bytes, || pieces.clone());
            let rec = Recorded {
                kind,
                unit: r.unit,
                count: 1,
                buffer_bytes: buffer_bytes(kind, &pieces),
            };
            let op = c.emit(g, sub, r.stream, dur(ms), &deps, r.labels.0, &mems, rec);
            out.shard[k * h..k * h + sub.len()].fill(Some(op));
            scattered.push(op);
        }
        if !self.sharding.reduces_across_groups() || n <= h {
            return out;
        }
        for q in 0..h {
            let reps = self.replica_group(q);
            if c.emitted(&reps).is_empty() {
                continue;
            }
            let kind = CollectiveKind::AllReduce;
            let bytes = (r.replica_bytes)(q);
            let ms = c.price(kind, &reps, bytes, || vec![bytes; reps.len()]);
            let rec = Recorded {
                kind,
                unit: r.unit,
                count: 1,
                buffer_bytes: bytes,
            };
            let op = c.emit(
                g,
                &reps,
                Stream::Reduce,
                dur(ms),
                &scattered,
                r.labels.1,
                &[],
                rec,
            );
            for pos in (q..n).step_by(h) {
                out.replica[pos] = Some(op);
            }
        }
        out
    }

    /// One all-gather of the group's parameters in each shard group (all
    /// the group without sharding) as `a` says; per shard group its op
    /// (`None`: no emitted member). A shard group of one GPU gathers
    /// nothing but still emits a zero-time op carrying its buffers.
    pub fn gather<S: Sink>(
        &self,
        c: &mut Collectives<'_>,
        g: &mut S,
        a: &Gathering<'_>,
    ) -> Vec<Option<OpId>> {
        let kind = CollectiveKind::AllGather;
        self.shard_groups()
            .enumerate()
            .map(|(k, sub)| {
                let part = c.emitted(sub);
                if part.is_empty() {
                    return None;
                }
                let (bytes, pieces) = (a.pieces)(k);
                let ms = c.price(kind, sub, bytes, || pieces.clone());
                let deps = (a.deps)(sub);
                let mems = (a.mems)(&part);
                let rec = Recorded {
                    kind,
                    unit: a.unit,
                    count: 1,
                    buffer_bytes: buffer_bytes(kind, &pieces),
                };
                Some(c.emit(g, sub, a.stream, dur(ms), &deps, a.label, &mems, rec))
            })
            .collect()
    }
}

/// An op's duration of `ms` milliseconds.
fn dur(ms: f64) -> SimTime {
    crate::data_parallel::dur(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Category, Graph, MemKind};

    /// An engine graph that remembers each op's stream.
    struct Rec {
        g: Graph,
        streams: Vec<Stream>,
    }

    impl Sink for Rec {
        fn label(&mut self, category: Category, name: &str) -> OpLabel {
            self.g.label(category, name)
        }
        fn op(
            &mut self,
            rank: u32,
            stream: Stream,
            dur: SimTime,
            deps: &[OpId],
            label: OpLabel,
            mems: &[MemChange],
        ) -> OpId {
            self.streams.push(stream);
            self.g.add_op(rank, stream, dur, deps, label, mems)
        }
        fn collective(
            &mut self,
            ranks: &[u32],
            stream: Stream,
            dur: SimTime,
            deps: &[OpId],
            label: OpLabel,
            mems: &[MemChange],
        ) -> OpId {
            self.streams.push(stream);
            self.g.add_collective(ranks, stream, dur, deps, label, mems)
        }
    }

    /// The collectives one reduction of 8 MB per GPU emits over the group
    /// `ranks` (shard width `h`) under `sharding`: (kind, group size,
    /// stream, dependencies) per op, and what each position then waits on.
    fn reduce(
        sharding: Sharding,
        ranks: &[usize],
        h: usize,
        with_mems: bool,
    ) -> (Vec<(CollectiveKind, u32, Stream, usize)>, Reduced) {
        let c8 = crate::cost::tiny_costs(
            "a100-80gb,a100-80gb,a100-80gb,a100-80gb",
            crate::precision::NumFormat::Bf16,
            8,
        );
        let mut c = Collectives::new(&c8, None, true);
        let mut g = Rec {
            g: Graph::with_capacity(16, 16),
            streams: Vec::new(),
        };
        let before: Vec<OpId> = ranks
            .iter()
            .map(|&r| {
                let l = g.label(Category::Backward, "bwd");
                g.op(r as u32, Stream::Compute, dur(1.0), &[], l, &[])
            })
            .collect();
        let (rs, ar) = (
            g.label(Category::ReduceScatter, "rs"),
            g.label(Category::AllReduce, "ar"),
        );
        let bytes = 8e6;
        let grp = DpGroup {
            ranks,
            shard_width: h,
            sharding,
        };
        let pieces = |_k: usize| (bytes, vec![bytes / h as f64; h]);
        let replica = |_q: usize| bytes / h as f64;
        let deps = |rs: &[usize]| {
            rs.iter()
                .map(|r| before[ranks.iter().position(|x| x == r).unwrap()])
                .collect()
        };
        let mut mems = |part: &[usize]| {
            part.iter()
                .filter(|_| with_mems)
                .map(|&r| MemChange::end(r as u32, -1).of(MemKind::Grads))
                .collect()
        };
        let done = grp.reduce(
            &mut c,
            &mut g,
            Reduction {
                unit: 1,
                buckets: &[bytes],
                pieces: &pieces,
                replica_bytes: &replica,
                deps: &deps,
                mems: &mut mems,
                stream: Stream::Comm,
                labels: (rs, ar),
            },
        );
        let ops = c
            .records
            .iter()
            .map(|r| {
                let stream = g.streams[r.op.0 as usize];
                (r.kind, r.group_size, stream, g.g.op_deps(r.op).count())
            })
            .collect();
        (ops, done)
    }

    #[test]
    fn each_sharding_emits_its_collectives_over_its_groups() {
        let all = [0, 1, 2, 3];
        // DDP: one all-reduce over every GPU, after each one's gradient.
        let (ops, done) = reduce(Sharding::NoShard, &all, 1, false);
        assert_eq!(ops, vec![(CollectiveKind::AllReduce, 4, Stream::Comm, 4)]);
        assert!(done.shard.iter().all(Option::is_some));
        // FSDP: one reduce-scatter over the whole group.
        let (ops, _) = reduce(Sharding::Full, &all, 4, true);
        assert_eq!(
            ops,
            vec![(CollectiveKind::ReduceScatter, 4, Stream::Comm, 4)]
        );
        // HSDP 2 x 2: a reduce-scatter per shard group, then an all-reduce
        // per position across the groups after both reduce-scatters.
        let (ops, done) = reduce(Sharding::Hybrid, &all, 2, true);
        assert_eq!(
            ops,
            vec![
                (CollectiveKind::ReduceScatter, 2, Stream::Comm, 2),
                (CollectiveKind::ReduceScatter, 2, Stream::Comm, 2),
                (CollectiveKind::AllReduce, 2, Stream::Reduce, 2),
                (CollectiveKind::AllReduce, 2, Stream::Reduce, 2),
            ]
        );
        // Positions 0 and 2 (the same shard) share their all-reduce.
        assert_eq!(done.replica[0], done.replica[2]);
        assert_ne!(done.replica[0], done.replica[1]);
        assert_eq!(done.done(1, &[]), vec![done.replica[1].unwrap()]);
    }

    #[test]
    fn a_group_of_one_gpu_reduces_nothing() {
        // Without buffers to free, nothing is emitted and the gradient is
        // ready after its own backward.
        let (ops, done) = reduce(Sharding::Full, &[2], 1, false);
        assert!(ops.is_empty());
        assert_eq!(done.done(0, &[OpId(7)]), vec![OpId(7)]);
        let (ops, _) = reduce(Sharding::NoShard, &[2], 1, false);
        assert!(ops.is_empty());
        // With buffers to free, a zero-time op carries them.
        let (ops, done) = reduce(Sharding::Full, &[2], 1, true);
        assert_eq!(
            ops,
            vec![(CollectiveKind::ReduceScatter, 1, Stream::Comm, 1)]
        );
        assert!(done.shard[0].is_some());
        // HSDP with shard groups of one GPU: the all-reduce across them
        // waits on the backwards themselves.
        let (ops, _) = reduce(Sharding::Hybrid, &[0, 1, 2, 3], 1, false);
        assert_eq!(ops, vec![(CollectiveKind::AllReduce, 4, Stream::Reduce, 4)]);
    }

    #[test]
    fn replica_groups_take_one_position_of_every_shard_group() {
        let ranks = [4, 5, 6, 7, 8, 9];
        let grp = DpGroup {
            ranks: &ranks,
            shard_width: 3,
            sharding: Sharding::Hybrid,
        };
        let shards: Vec<&[usize]> = grp.shard_groups().collect();
        assert_eq!(shards, vec![&[4, 5, 6][..], &[7, 8, 9][..]]);
        assert_eq!(grp.replica_group(1), vec![5, 8]);
    }
}
