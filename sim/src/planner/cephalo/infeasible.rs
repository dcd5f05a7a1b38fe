//! Why no plan exists: the reasons that need no search
//! ([`infeasible_at_once`]) and those a search shows ([`infeasible`]), each
//! with its shortfall and, where one GPU is to blame, its rank.

use super::tables::Search;
use crate::error::PlanError;
use crate::planner::closed_form::ClosedForm;
use crate::planner::water::FILL_TOL;
use crate::strategy::Sharding;

/// Non-state GiB of one single-sample micro-batch on `rank` (for the
/// infeasibility message when the closed form tabulated nothing).
fn one_sample_gib(cf: &ClosedForm<'_>, rank: usize) -> f64 {
    let sch = crate::data_parallel::Routine::new(cf.costs(), cf.strategy());
    crate::bounds::rank_peak(&sch, rank, &[1], 1, 0.0)
        .map(|p| p.device_bytes as f64 / crate::units::GIB)
        .unwrap_or(f64::INFINITY)
}

/// More samples than the GPUs can take at their largest micro-batch in the
/// strategy's passes (micro-batch-major) or in
/// [`crate::limits::MAX_MICROBATCHES`] micro-batches (layered).
fn too_many_samples(cf: &ClosedForm<'_>) -> Option<PlanError> {
    let costs = cf.costs();
    let per = cf.passes().unwrap_or(crate::limits::MAX_MICROBATCHES);
    let most: u64 = costs
        .rank_type
        .iter()
        .map(|&t| cf.max_microbatch(t) as u64 * per as u64)
        .sum();
    if most >= costs.workload.global_batch as u64 {
        return None;
    }
    let per = match cf.passes() {
        Some(p) => format!("{p} micro-batch passes"),
        None => format!(
            "the limit of {} micro-batches per GPU",
            crate::limits::MAX_MICROBATCHES
        ),
    };
    Some(PlanError::Infeasible {
        message: format!(
            "the GPUs take at most {most} of the {} samples (each GPU's largest micro-batch x {per})",
            costs.workload.global_batch
        ),
        shortfall_gib: 0.0,
        rank: None,
    })
}

/// The reasons no plan exists that need no search: a GPU that cannot hold
/// the share of the state its sharding fixes; for water-filled state, a
/// state larger than all free memory, or no GPU holding one sample; more
/// samples than the micro-batches can take ([`too_many_samples`], so a
/// micro-batch-major pass count that is too small costs no search).
pub(super) fn infeasible_at_once(cf: &ClosedForm<'_>) -> Option<PlanError> {
    let costs = cf.costs();
    let g = costs.ranks();
    let s = cf.state_gib();
    if let Some(share) = cf.required_share() {
        return share_unholdable(cf, share).or_else(|| too_many_samples(cf));
    }
    // 1. The state alone is larger than all free memory.
    let free: f64 = (0..g)
        .map(|r| costs.usable_gib(r) - cf.empty_nonstate_gib(costs.rank_type[r]))
        .map(|x| x.max(0.0))
        .sum();
    if s > free {
        let short = s - free;
        let (r, most) = (0..g)
            .map(|r| (r, costs.usable_gib(r)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .unwrap_or((0, 0.0));
        let fixed = cf.empty_nonstate_gib(costs.rank_type[r]);
        let message = if free <= 0.0 {
            format!(
                "no GPU has memory left for the training state: the fixed overhead and buffers alone \
                 ({} on the largest GPU, rank {r} {}, with --overhead-gib {}) fill its usable {}",
                size_gib(fixed),
                costs.gpu(r).name,
                costs.overhead_gib(),
                size_gib(most)
            )
        } else {
            format!(
                "the training state ({} at {} B/param) is larger than the free memory of all GPUs combined \
                 ({} after overhead): short by {} even with zero samples anywhere \
                 (the largest GPU, {r} {}, has {} usable)",
                size_gib(s),
                cf.strategy()
                    .precision(costs.workload.dtype)
                    .gpu_state_bytes_per_param(cf.strategy().offloads_optimizer()),
                size_gib(free),
                size_gib(short),
                costs.gpu(r).name,
                size_gib(most)
            )
        };
        return Some(PlanError::Infeasible {
            message,
            shortfall_gib: short,
            rank: None,
        });
    }
    // 2. No GPU can hold one sample even with no state.
    if (0..cf.type_count()).all(|t| cf.max_microbatch(t) == 0) {
        let need = |r: usize| {
            cf.nonstate_gib(costs.rank_type[r], 1, 1)
                .unwrap_or_else(|| one_sample_gib(cf, r))
        };
        let (r, short) = (0..g)
            .map(|r| (r, need(r) - costs.usable_gib(r)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((0, 0.0));
        return Some(PlanError::Infeasible {
            message: format!(
                "no GPU can hold a micro-batch of one sample even with no training state ({}): \
                 the closest, GPU {r} ({}), needs {:.2} GiB of {:.2} GiB usable (short by {short:.2} GiB)",
                cf.strategy().label(),
                costs.gpu(r).name,
                need(r),
                costs.usable_gib(r)
            ),
            shortfall_gib: short,
            rank: Some(r),
        });
    }
    too_many_samples(cf)
}

/// What the sharding of `cf` keeps on every GPU, for messages.
fn share_rule(cf: &ClosedForm<'_>) -> String {
    let g = cf.strategy().shard_group;
    match cf.strategy().sharding {
        Sharding::NoShard => "no sharding keeps the whole state".to_string(),
        _ => format!("hybrid sharding in groups of {g} keeps 1/{g} of the state"),
    }
}

/// The GPU with least room for state, when it cannot hold `share` of it
/// even with no samples.
fn share_unholdable(cf: &ClosedForm<'_>, share: f64) -> Option<PlanError> {
    let costs = cf.costs();
    let s = cf.state_gib();
    let need = share * s;
    let what = share_rule(cf);
    // Room for state of a GPU of type t with no samples.
    let empty = |t: usize| cf.option(t, 0, 0).map_or(0.0, |o| o.cap);
    let worst = (0..costs.ranks())
        .map(|r| (r, empty(costs.rank_type[r])))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    if let Some((r, cap)) = worst.filter(|w| w.1 < share - FILL_TOL) {
        let t = costs.rank_type[r];
        let room = cap * s;
        return Some(PlanError::Infeasible {
            message: format!(
                "{what} ({need:.2} GiB) on every GPU: GPU {r} ({}) has room for {room:.2} GiB of state \
                 even with no samples ({:.2} GiB usable, {:.2} GiB for buffers and overhead): short by {:.2} GiB",
                costs.gpu(r).name,
                cf.usable_gib(t),
                cf.empty_nonstate_gib(t),
                need - room
            ),
            shortfall_gib: need - room,
            rank: Some(r),
        });
    }
    None
}

/// [`infeasible`] for shardings that fix every GPU's share `share` of the
/// state: a GPU that cannot hold it even with no samples, or the most
/// samples the GPUs can take next to it.
fn infeasible_share(search: &Search<'_, '_>, share: f64) -> PlanError {
    let cf = search.cf;
    let costs = cf.costs();
    let need = share * cf.state_gib();
    let what = share_rule(cf);
    // Largest batch each type takes with the share beside it.
    let most = |t: usize| -> u32 {
        search.types[t]
            .by_b
            .iter()
            .enumerate()
            .filter(|(_, v)| v.iter().any(|o| o.cap >= share - FILL_TOL))
            .map(|(u, _)| u as u32 * search.unit)
            .max()
            .unwrap_or(0)
    };
    let total: u64 = costs.rank_type.iter().map(|&t| most(t) as u64).sum();
    let mut per_type: Vec<String> = Vec::new();
    for t in 0..cf.type_count() {
        let r = costs.rank_type.iter().position(|&x| x == t).unwrap_or(0);
        per_type.push(format!("{} up to {}", costs.gpu(r).name, most(t)));
    }
    let mut passes = String::new();
    if let Some(p) = cf.passes() {
        passes = format!(" in {p} micro-batch passes");
    }
    PlanError::Infeasible {
        message: format!(
            "{what} ({need:.2} GiB) on every GPU: beside it the GPUs hold at most {total} of the {} samples{passes} \
             ({})",
            costs.workload.global_batch,
            per_type.join(", ")
        ),
        shortfall_gib: 0.0,
        rank: None,
    }
}

/// Explains why no plan exists (called when the search finds none).
pub(super) fn infeasible(search: &mut Search<'_, '_>) -> PlanError {
    if let Some(e) = infeasible_at_once(search.cf) {
        return e;
    }
    let cf = search.cf;
    let costs = cf.costs();
    let s = cf.state_gib();
    if let Some(share) = cf.required_share() {
        return infeasible_share(search, share);
    }
    // 3. Activations of the batch plus the state do not fit together.
    let room = search.max_state_room().max(0.0);
    let short = (1.0 - room) * s;
    PlanError::Infeasible {
        message: format!(
            "placing all {} samples leaves room for at most {:.1}% of the {s:.2} GiB training state: \
             short by {short:.2} GiB across the cluster",
            costs.workload.global_batch,
            room * 100.0
        ),
        shortfall_gib: short,
        rank: None,
    }
}

/// A memory size for a message: GiB with two decimals, MiB below 0.1 GiB
/// (a tiny model's state is not "0.00 GiB").
fn size_gib(gib: f64) -> String {
    if gib.abs() >= 0.1 || gib == 0.0 {
        format!("{gib:.2} GiB")
    } else {
        format!("{:.2} MiB", gib * 1024.0)
    }
}
