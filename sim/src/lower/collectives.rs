//! One place where a lowering's collectives are priced, declare the links
//! they keep busy, and are recorded for the report: the data-parallel
//! walk and the pipeline walk emit every collective through it, so a
//! collective kind, a group shape or a pricing rule is written once.
//!
//! A collective is priced once per (kind, ranks, bytes) on its whole group
//! (the communication model, [`CostModel::group_collective_ms`]), and
//! emitted over the group's simulated members only (identical nodes
//! simulated once, [`crate::symmetry`]): its duration and link loads stay
//! the whole group's, its loads are declared on simulated nodes' links
//! only (no op of another node shares them).

use super::sink::{CollectiveRecord, Sink};
use crate::comm::{CollectiveKind, GroupSource};
use crate::cost::CostModel;
use crate::engine::{MemChange, OpId, OpLabel, Stream};
use crate::units::SimTime;
use std::rc::Rc;

/// A priced collective: duration (ms), link busy times (resource, ms) and
/// where its time came from.
type Priced = (f64, Rc<[(u32, f64)]>, Option<GroupSource>);

/// What a collective op's record says besides its op, duration and source.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recorded {
    /// Which collective.
    pub kind: CollectiveKind,
    /// Unit whose parameters or gradients it moves (a pipeline stage's
    /// whole-stage reduction: the stage).
    pub unit: u32,
    /// Collectives it stands for (DDP buckets ready together run as one).
    pub count: u32,
    /// Buffer bytes of all of them together ([`CollectiveKind::buffer_bytes`]).
    pub buffer_bytes: f64,
}

/// The collectives of one lowering in progress.
#[derive(Debug)]
pub struct Collectives<'c> {
    costs: &'c CostModel,
    /// Per rank: emitted (simulated event by event).
    simulated: Vec<bool>,
    /// Declare link loads (the engine shares links between overlapping
    /// transfers).
    contention: bool,
    priced: rustc_hash::FxHashMap<(CollectiveKind, Vec<usize>, u64), Priced>,
    /// Link busy times of the collectives priced since the last op emitted.
    pending: Vec<(u32, f64)>,
    pending_source: Option<GroupSource>,
    /// Every collective emitted, in order.
    pub records: Vec<CollectiveRecord>,
}

impl<'c> Collectives<'c> {
    /// The collectives of a lowering of `costs` that emits the ranks
    /// `simulated` marks (`None`: every rank), with link loads declared
    /// when `contention`.
    pub fn new(costs: &'c CostModel, simulated: Option<&[bool]>, contention: bool) -> Self {
        Collectives {
            costs,
            simulated: simulated.map_or_else(|| vec![true; costs.ranks()], <[bool]>::to_vec),
            contention,
            priced: rustc_hash::FxHashMap::default(),
            pending: Vec::new(),
            pending_source: None,
            records: Vec::new(),
        }
    }

    /// Whether rank `r` is emitted.
    pub fn on(&self, r: usize) -> bool {
        self.simulated[r]
    }

    /// The emitted ranks of `ranks`.
    pub fn emitted(&self, ranks: &[usize]) -> Vec<usize> {
        ranks.iter().copied().filter(|&r| self.on(r)).collect()
    }

    /// Duration (ms) of a `kind` collective over `ranks` (the whole group)
    /// whose pieces (bytes per rank, in rank order) `pieces` gives, `bytes`
    /// being what fixes them on these ranks; its link busy times go to the
    /// next op emitted. A group of one GPU, or nothing to move, takes no
    /// time and keeps no link busy.
    pub fn price(
        &mut self,
        kind: CollectiveKind,
        ranks: &[usize],
        bytes: f64,
        pieces: impl FnOnce() -> Vec<f64>,
    ) -> f64 {
        let (costs, simulated, contention) = (self.costs, &self.simulated, self.contention);
        let (ms, busy, source) = self
            .priced
            .entry((kind, ranks.to_vec(), bytes.to_bits()))
            .or_insert_with(|| price(costs, simulated, contention, (kind, ranks, bytes), pieces));
        self.pending.extend(busy.iter().copied());
        // The next collective op recorded is this one's.
        self.pending_source = *source;
        *ms
    }

    /// The pending link busy times as shares of an op lasting `dur`.
    fn take_shares(&mut self, dur: SimTime) -> Vec<(u32, f32)> {
        let mut busy = std::mem::take(&mut self.pending);
        let total = dur.as_ms();
        if total <= 0.0 || busy.is_empty() {
            return Vec::new();
        }
        busy.sort_by_key(|x| x.0);
        let mut out: Vec<(u32, f32)> = Vec::with_capacity(busy.len());
        let mut i = 0;
        while i < busy.len() {
            let r = busy[i].0;
            let mut t = 0.0;
            while i < busy.len() && busy[i].0 == r {
                t += busy[i].1;
                i += 1;
            }
            out.push((r, (t / total).min(1.0) as f32));
        }
        out
    }

    /// One collective op over the emitted members of `ranks` (the whole
    /// group) on `stream`, lasting `dur`, after `deps`, with `mems`; it
    /// keeps busy the links of the collectives priced since the last op
    /// ([`Self::price`]) and is recorded as `rec` says.
    #[allow(clippy::too_many_arguments)]
    pub fn emit<S: Sink>(
        &mut self,
        g: &mut S,
        ranks: &[usize],
        stream: Stream,
        dur: SimTime,
        deps: &[OpId],
        label: OpLabel,
        mems: &[MemChange],
        rec: Recorded,
    ) -> OpId {
        let members: Vec<u32> = ranks
            .iter()
            .filter(|&&r| self.on(r))
            .map(|&r| r as u32)
            .collect();
        let op = g.collective(&members, stream, dur, deps, label, mems);
        let shares = self.take_shares(dur);
        if !shares.is_empty() {
            g.shares(op, &shares);
        }
        self.records.push(CollectiveRecord {
            op,
            kind: rec.kind,
            unit: rec.unit,
            group_size: ranks.len() as u32,
            joins_rank0: ranks.contains(&0),
            count: rec.count,
            buffer_bytes: rec.buffer_bytes,
            dur,
            source: self.pending_source.take(),
        });
        op
    }
}

/// Buffer bytes of a `kind` collective whose ranks' pieces are `pieces`
/// ([`CollectiveKind::buffer_bytes`]).
pub fn buffer_bytes(kind: CollectiveKind, pieces: &[f64]) -> f64 {
    let ranks: Vec<crate::comm::CollectiveRank> = pieces
        .iter()
        .map(|&p| crate::comm::CollectiveRank {
            node: 0,
            local: 0,
            piece_bytes: p,
        })
        .collect();
    kind.buffer_bytes(&ranks)
}

/// A `kind` collective over `ranks` (the whole group) of `bytes` split in
/// `pieces`, priced on `costs`: its duration (ms), the links it keeps busy
/// (those of `simulated` nodes, when `contention`) and its time's source.
/// A group of one GPU, or nothing to move, takes no time.
fn price(
    costs: &CostModel,
    simulated: &[bool],
    contention: bool,
    (kind, ranks, bytes): (CollectiveKind, &[usize], f64),
    pieces: impl FnOnce() -> Vec<f64>,
) -> Priced {
    if ranks.len() < 2 || bytes <= 0.0 {
        return (0.0, Rc::from(Vec::new()), None);
    }
    let pieces = pieces();
    let ms = costs.group_collective_ms(kind, ranks, &pieces);
    let source = costs.comm_source(kind, ranks, &pieces);
    let busy: Rc<[(u32, f64)]> = if contention && ms > 0.0 {
        costs
            .group_collective_shares(kind, ranks, &pieces, ms)
            .into_iter()
            // Only links of emitted ranks' nodes can be shared.
            .filter(|&(r, _)| simulated[costs.links.owner_rank(r)])
            .map(|(r, f)| (r, f as f64 * ms))
            .collect()
    } else {
        Rc::from(Vec::new())
    };
    (ms, busy, source)
}
