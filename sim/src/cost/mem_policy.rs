//! When a plan fits a GPU: the memory policy.
//!
//! The default, [`MemPolicy::Physical`], asks what PyTorch would ask of the
//! device (REAL-SYSTEMS-2 §6.5). The simulator's peak of a GPU is what the
//! caching allocator hands to tensors (`max_memory_allocated`: state, unit
//! buffers, activations, workspaces) plus the memory outside the allocator
//! (`overhead_gib`: the CUDA context and NCCL's buffers). The allocator
//! reserves more than it hands out: segments rounded to 2 MiB / 20 MiB and
//! blocks that cannot be split or merged leave `reserved - allocated`
//! stranded. So a plan fits when
//!
//! ```text
//! allocated * (1 + fragmentation) + outside  <=  capacity * (1 - margin)
//! ```
//!
//! and the limit the report prints for the simulated peak (`allocated +
//! outside`) is `(capacity * (1 - margin) - outside) / (1 + fragmentation) +
//! outside`. The constants are estimates from the sources REAL-SYSTEMS-2 §6
//! collects; each says where it comes from.
//!
//! [`MemPolicy::Fraction`] is the Cephalo paper's rule (a plan may use a
//! fraction of capacity, 0.75 in its experiments) with a flat allowance
//! for the framework; `--mem-fraction` selects it for users who want that
//! headroom, and the paper reproductions use it. [`MemPolicy::REFERENCE`]
//! is the reference optimizer's own setting of it, the default of the
//! planner that follows that optimizer (`cephalo-compat`,
//! [`crate::planner::Planner::default_mem_policy`]).

use crate::error::SpecError;
use crate::units::GIB;

/// CUDA context and libraries per process, GiB: 0.5-1 GiB on H100 with
/// lazy module loading (`CUDA_MODULE_LOADING=LAZY`, the default since CUDA
/// 11.7), cuBLAS workspaces included (REAL-SYSTEMS-2 §6.3; estimate,
/// the middle of the range).
pub const CUDA_CONTEXT_GIB: f64 = 0.75;

/// NCCL buffers per communicator, GiB: per channel and connection a 4 MiB
/// Simple, a 4.69 MiB LL128 and a 512 KiB LL buffer (`src/init.cc`
/// `DEFAULT_*_BUFFSIZE`), two ring connections per channel, 16-32
/// channels: 0.3-0.6 GiB; users report 0.5-0.7 GiB per group on A100
/// (`NVIDIA/nccl` #964). The middle of §6.3's 0.2-0.7 GiB range.
pub const NCCL_GIB_PER_COMMUNICATOR: f64 = 0.45;

/// Communicators a data-parallel rank holds: the FSDP / DDP group and the
/// default process group every `init_process_group` creates (HSDP's shard
/// and replicate groups, or a pipeline's stage group, take the same count
/// in place of the default group's, which NCCL initialises lazily).
pub const COMMUNICATORS_PER_RANK: f64 = 2.0;

/// Allocator fragmentation, `reserved / allocated - 1`: 3-10% at steady
/// state without expandable segments (REAL-SYSTEMS-2 §6.1, estimate). A
/// transformer's activations come in a few sizes repeated per layer, which
/// the caching allocator reuses block for block: the low end.
pub const FRAGMENTATION: f64 = 0.03;

/// Capacity kept free as a margin (1-2% of capacity, §6.5): allocator
/// retries near the edge synchronise the device; the lower end.
pub const MARGIN_FRACTION: f64 = 0.01;

/// The paper's flat framework allowance per GPU under [`MemPolicy::Fraction`], GiB.
pub const FRACTION_OVERHEAD_GIB: f64 = 2.0;

/// The fraction of each GPU's memory the reference optimizer lets a plan
/// use (its `max_alloc_frac` default, 0.75; `reference_plans.json` was
/// made with it, with the flat [`FRACTION_OVERHEAD_GIB`]: the reference
/// profiles' README, DESIGN.md section 5).
pub const REFERENCE_FRACTION: f64 = 0.75;

/// When a plan's peak fits a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum MemPolicy {
    /// What the device holds as PyTorch uses it (module docs): the default.
    #[default]
    Physical,
    /// A fraction of capacity in (0, 1] (`--mem-fraction`; the paper's 0.75).
    Fraction(f64),
}

impl MemPolicy {
    /// The reference optimizer's rule: [`REFERENCE_FRACTION`] of each
    /// GPU's memory, with its flat [`FRACTION_OVERHEAD_GIB`] allowance
    /// (the fraction rule's default overhead).
    pub const REFERENCE: MemPolicy = MemPolicy::Fraction(REFERENCE_FRACTION);

    /// The policy a `--mem-fraction` (or a study's `mem_fraction`) asks
    /// for: the paper's rule with that fraction, physical without one.
    pub fn from_fraction(fraction: Option<f64>) -> MemPolicy {
        fraction.map_or(MemPolicy::Physical, MemPolicy::Fraction)
    }

    /// A fraction rule needs a fraction in (0, 1]; the error names
    /// `origin` and `field`.
    pub fn check(self, origin: &str, field: &str) -> Result<(), SpecError> {
        match self.fraction() {
            Some(f) if !(f > 0.0 && f <= 1.0) => Err(SpecError::invalid(
                origin,
                field,
                format!("expected a fraction in (0, 1], got {f}"),
            )),
            _ => Ok(()),
        }
    }

    /// Memory outside the allocator per GPU (GiB) when the user gives none:
    /// physical, the CUDA context plus NCCL's buffers (none on a GPU that
    /// talks to nobody); the paper's rule, its flat allowance.
    pub fn default_overhead_gib(self, gpus: usize) -> f64 {
        match self {
            MemPolicy::Physical => {
                let comms = if gpus > 1 {
                    COMMUNICATORS_PER_RANK
                } else {
                    0.0
                };
                CUDA_CONTEXT_GIB + comms * NCCL_GIB_PER_COMMUNICATOR
            }
            MemPolicy::Fraction(_) => FRACTION_OVERHEAD_GIB,
        }
    }

    /// The limit on the simulated peak (allocated + `overhead_gib` outside
    /// the allocator) of a GPU of `capacity_gib`, GiB.
    pub fn usable_gib(self, capacity_gib: f64, overhead_gib: f64) -> f64 {
        match self {
            MemPolicy::Physical => {
                let room = capacity_gib * (1.0 - MARGIN_FRACTION) - overhead_gib;
                room / (1.0 + FRAGMENTATION) + overhead_gib
            }
            MemPolicy::Fraction(f) => capacity_gib * f,
        }
    }

    /// The allocator's reserved bytes at a peak of `allocated_gib`
    /// (`max_memory_reserved`, what torchtitan logs), GiB: fragmentation
    /// added, rounded up to the 2 MiB segment granule. The paper's rule
    /// models no allocator: reserved = allocated.
    pub fn reserved_gib(self, allocated_gib: f64) -> f64 {
        match self {
            MemPolicy::Physical => {
                let granule = 2.0 * 1024.0 * 1024.0 / GIB;
                (allocated_gib.max(0.0) * (1.0 + FRAGMENTATION) / granule).ceil() * granule
            }
            MemPolicy::Fraction(_) => allocated_gib,
        }
    }

    /// The policy's name in reports: `physical` or `fraction`.
    pub fn name(self) -> &'static str {
        match self {
            MemPolicy::Physical => "physical",
            MemPolicy::Fraction(_) => "fraction",
        }
    }

    /// The fraction of capacity under the paper's rule (`None`: physical).
    pub fn fraction(self) -> Option<f64> {
        match self {
            MemPolicy::Physical => None,
            MemPolicy::Fraction(f) => Some(f),
        }
    }

    /// How the limit of a GPU of `capacity_gib` is made, for messages.
    pub fn describe(self, capacity_gib: f64, overhead_gib: f64) -> String {
        match self {
            MemPolicy::Physical => format!(
                "physical: {capacity_gib:.2} GiB capacity less a {:.0}% margin, {overhead_gib:.2} GiB outside the allocator (CUDA context, NCCL), {:.0}% allocator fragmentation",
                MARGIN_FRACTION * 100.0,
                FRAGMENTATION * 100.0
            ),
            MemPolicy::Fraction(f) => {
                format!("capacity {capacity_gib:.2} GiB x --mem-fraction {f}")
            }
        }
    }

    /// The rule in one line for reports, with the memory outside the
    /// allocator per GPU (`overhead_gib`, GiB).
    pub fn summary(self, overhead_gib: f64) -> String {
        match self {
            MemPolicy::Physical => format!(
                "physical: capacity less a {:.0}% margin and {:.0}% allocator fragmentation, {overhead_gib:.2} GiB per GPU outside the allocator",
                MARGIN_FRACTION * 100.0,
                FRAGMENTATION * 100.0
            ),
            MemPolicy::Fraction(f) => format!(
                "fraction: {f} of each GPU's capacity, {overhead_gib:.2} GiB per GPU outside the allocator"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn physical_limit_adds_up() {
        // The parts of the physical test sum to the capacity at the limit.
        let p = MemPolicy::Physical;
        for cap in [16.0, 24.0, 40.0, 80.0, 141.0] {
            let outside = p.default_overhead_gib(8);
            let limit = p.usable_gib(cap, outside);
            let allocated = limit - outside;
            let total = allocated * (1.0 + FRAGMENTATION) + outside + cap * MARGIN_FRACTION;
            assert!((total - cap).abs() < 1e-9, "{cap}: {total}");
            assert!(limit < cap && limit > 0.85 * cap);
            assert!(p.reserved_gib(allocated) >= allocated * (1.0 + FRAGMENTATION) - 1e-12);
        }
        assert_eq!(
            p.default_overhead_gib(8),
            CUDA_CONTEXT_GIB + 2.0 * NCCL_GIB_PER_COMMUNICATOR
        );
        assert_eq!(p.default_overhead_gib(1), CUDA_CONTEXT_GIB);
        let f = MemPolicy::Fraction(0.75);
        assert_eq!(f.usable_gib(80.0, 2.0), 60.0);
        assert_eq!(f.reserved_gib(10.0), 10.0);
    }
}
