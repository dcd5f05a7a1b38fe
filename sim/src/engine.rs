//! Deterministic discrete-event engine over a task graph of GPU stream ops.
//!
//! Units: time is [`SimTime`](crate::units::SimTime) (integer nanoseconds from the start of the
//! run); memory changes are signed byte counts (`i64`).
//!
//! # Model
//!
//! Every rank (GPU) has five in-order streams ([`Stream`]): compute,
//! communication (the data-parallel communicator), reduce (a second
//! communicator, for the replica all-reduce of hybrid sharding), host copy
//! and host (work the CPU does for this rank, e.g. an offloaded optimizer
//! step). A [`Graph`] holds ops; each op has a duration, dependencies (other
//! ops whose *completion* it waits for), a label for observers, and the
//! memory changes it causes, given together with the op ([`MemChange`]:
//! a signed byte count on one memory *pool*, at the op's start or end; the
//! caller decides what pools mean, e.g. one per GPU and one per host). An op
//! is *issued* on one or more `(rank, stream)` queues:
//!
//! * a **local op** ([`Graph::add_op`]) is issued on one stream;
//! * a **collective** ([`Graph::add_collective`], or [`Graph::new_collective`]
//!   plus one [`Graph::join`] per rank) is one op issued on several ranks'
//!   streams. It starts only when every participant has issued it (it is at
//!   the head of each participant's queue and that stream is free) and all its
//!   dependencies are done; it then occupies all those streams for its
//!   duration and ends on all of them at the same time. This is where a slow
//!   rank stalls every other rank of the group.
//!
//! A stream runs its ops in issue order (the order of `add_op` / `join`
//! calls naming it), one at a time. An op starts at the earliest instant at
//! which it heads every queue it was issued on, those streams are free and
//! its dependencies are complete; there is no other delay.
//!
//! # Shared links and interference
//!
//! An op's duration is what it takes alone. Two effects stretch it while it
//! runs, so its end is decided as the run unfolds, not when the graph is
//! built:
//!
//! * **Link sharing.** An op may name the links (resources) it keeps busy
//!   and the fraction of its duration each is busy ([`Graph::add_shares`]).
//!   While ops overlap on a link whose busy fractions sum to `L > 1`, each
//!   of them progresses at `1 / L` of its own pace on that link (capacity
//!   shared in proportion to demand); an op progresses at the pace of its
//!   most oversubscribed link. Two transfers that each saturate a link take
//!   twice as long together; a link with spare capacity slows nobody; a
//!   latency-bound collective (small busy fraction) barely loads a link.
//! * **Compute-communication interference** ([`Graph::set_interference`]):
//!   while a rank has an op running on its communication or reduce stream,
//!   its compute op runs `1 + f` times slower (NCCL kernels take SMs and
//!   memory bandwidth).
//!
//! Progress is tracked in nanoseconds of the op's own work; whenever the
//! set of ops on a link (or a rank's collectives) changes, the affected ops'
//! remaining work is brought up to date and their ends are rescheduled.
//! Ops that are never slowed end exactly `duration` after they start.
//!
//! # Determinism
//!
//! Pending completions sit in a binary heap keyed by `(time, seq)`, where
//! `seq` counts op starts, so completions at equal times are processed in
//! the order the ops started (FIFO). Ops made ready by one completion start
//! in a fixed order: dependents in the order their edges were added, then the
//! next op of each stream the finished op occupied, in issue order. Same
//! graph, same event order, same observer calls.
//!
//! # Cost
//!
//! `run` is `O(E log S)` for `E` = ops + dependency edges + issues and `S` =
//! ops running at once (at most the stream count): it builds successor and
//! stream queues with counting sorts and touches each edge once. Ops that can
//! never run (a dependency cycle, collectives issued in different orders on
//! different ranks, an op issued nowhere) are reported as
//! [`SimError::Deadlock`] when the event queue drains; the engine never hangs.

mod graph;
mod observe;
mod ops;
mod pace;
mod queue;
mod run;

pub use graph::Graph;
pub use observe::{NullObserver, Observer, OpRecord, Recorder, RunStats};
pub use ops::{Category, MemAt, MemChange, MemKind, NameId, OpId, OpLabel, Stream, NO_INDEX};
pub use run::run;

/// Errors of the engine (defined in [`crate::error`], re-exported here).
pub use crate::error::SimError;

#[cfg(test)]
mod tests;
