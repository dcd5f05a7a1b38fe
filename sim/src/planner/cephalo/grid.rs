//! The batch grid of the exact search: global batches up to
//! [`EXACT_BATCH`] samples (or 16 per GPU) are searched sample by sample,
//! larger ones in units of [`batch_unit`] samples, each sub-problem within
//! [`SEARCH_CELLS`] knapsack cells.

/// Global batches up to this many samples (or 16 per GPU, when more) are
/// searched sample by sample; larger ones on a grid of `ceil(B / that)`
/// samples, then refined to the sample (`refine`). The exact search's
/// option tables and knapsacks grow with the square of the batch it
/// counts in, so the grid keeps planning time and memory flat in the
/// global batch (benchmark `planner_native_batch`). 256: the whole exact
/// planner took 0.19 s at 256 samples and 1.86 s at 1,024 on the paper
/// cluster (gpt-2.7b, this project's 2-core machine).
pub const EXACT_BATCH: u32 = 256;

/// Most knapsack cells (GPUs x batch units) one sub-problem of the search
/// counts before its grid gets coarser than 16 units per GPU: 2^22, i.e.
/// 512 GPUs at 16 units each. A sub-problem's dynamic programme walks every
/// GPU over every unit, and a search solves hundreds of them, so time grows
/// with GPUs x units; this keeps it near what 512 GPUs at 16 samples each
/// take (5.4 s measured on this project's 2-core machine, LLaMA-2-7B), and from
/// 513 GPUs on the grid shrinks towards [`MIN_UNITS_PER_GPU`].
pub const SEARCH_CELLS: usize = 1 << 22;

/// The coarsest grid the search runs on: 4 batch units per GPU on average
/// (the plan is then completed and refined to the sample by `refine`).
pub const MIN_UNITS_PER_GPU: usize = 4;

/// Samples per batch unit of the search for a global batch of `big_b`
/// samples on `gpus` GPUs (1: exact): the batch counts in at most
/// max(256, 16 per GPU) units, and at most [`SEARCH_CELLS`] / GPUs (but no
/// fewer than [`MIN_UNITS_PER_GPU`] per GPU).
pub fn batch_unit(big_b: u32, gpus: usize) -> u32 {
    let g = gpus.max(1);
    let per_budget = (SEARCH_CELLS / g).max(MIN_UNITS_PER_GPU * g);
    let units = (EXACT_BATCH as usize)
        .max((16 * g).min(per_budget))
        .min(u32::MAX as usize) as u32;
    if big_b <= units {
        1
    } else {
        big_b.div_ceil(units)
    }
}
