//! What one GPU's memory holds at its peak, with the headroom to the
//! policy limit and to the capacity.

use crate::units::GIB;
use serde::Serialize;

/// What a GPU's peak is held against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The policy limit on the peak, GiB.
    pub usable_gib: f64,
    /// Physical capacity, GiB.
    pub capacity_gib: f64,
    /// Memory outside the allocator (CUDA context, NCCL), GiB.
    pub outside_gib: f64,
    /// The memory policy.
    pub policy: crate::cost::MemPolicy,
}

/// One GPU's memory at its peak instant, by component (GiB): the five
/// parts sum to the peak.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    /// Training state this GPU keeps all iteration: its shard of the
    /// parameters, gradients and optimizer moments (a whole replica and
    /// DDP's gradient buffer without sharding; nothing offloaded).
    pub state_gib: f64,
    /// Framework memory: the fixed `--overhead-gib` (CUDA context,
    /// allocator) plus the measured constant workspaces, GiB.
    pub overhead_gib: f64,
    /// All-gathered (unsharded) parameters alive at the peak.
    pub unsharded_params_gib: f64,
    /// Unsharded gradient buffers alive at the peak (before their reduction).
    pub gradients_gib: f64,
    /// Saved activations and compute workspaces alive at the peak.
    pub activations_gib: f64,
    /// The peak (the sum of the five parts).
    pub peak_gib: f64,
    /// The allocator's part of the peak (`max_memory_allocated`): the peak
    /// less the memory outside the allocator (CUDA context, NCCL buffers).
    pub allocated_gib: f64,
    /// What the caching allocator reserves at that peak
    /// (`max_memory_reserved`, torchtitan's logged `memory`): allocated plus
    /// fragmentation, in 2 MiB segments ([`crate::cost::MemPolicy::reserved_gib`]).
    pub reserved_gib: f64,
    /// The policy limit on the peak ([`crate::cost::MemPolicy::usable_gib`]).
    pub policy_limit_gib: f64,
    /// `policy_limit_gib - peak_gib` (negative: over the limit).
    pub headroom_policy_gib: f64,
    /// Physical capacity.
    pub capacity_gib: f64,
    /// `capacity_gib - peak_gib` (negative: does not fit at all).
    pub headroom_capacity_gib: f64,
    /// `fits`, `over-policy` (over the limit, within the capacity: it may
    /// run, without the margin the policy asks for) or `over-capacity`.
    pub status: &'static str,
}

impl MemoryBreakdown {
    /// The breakdown of a peak of `peak_bytes` with a constant `base_bytes`
    /// of which `overhead_bytes` is framework memory (`outside_gib` of it
    /// outside the allocator), and a dynamic part split by
    /// [`crate::engine::MemKind`] index, under `policy`.
    pub fn new(
        peak_bytes: i64,
        base_bytes: i64,
        overhead_bytes: i64,
        dynamic: [i64; crate::engine::MemKind::COUNT],
        limits: Limits,
    ) -> MemoryBreakdown {
        let Limits {
            usable_gib,
            capacity_gib,
            outside_gib,
            policy,
        } = limits;
        use crate::engine::MemKind;
        let gib = |b: i64| b as f64 / GIB;
        let overhead = overhead_bytes.clamp(0, base_bytes.max(0));
        let peak_gib = gib(peak_bytes);
        MemoryBreakdown {
            state_gib: gib(base_bytes - overhead),
            overhead_gib: gib(overhead),
            unsharded_params_gib: gib(dynamic[MemKind::Params.index()]),
            gradients_gib: gib(dynamic[MemKind::Grads.index()]),
            activations_gib: gib(dynamic[MemKind::Activations.index()]),
            peak_gib,
            allocated_gib: (peak_gib - outside_gib).max(0.0),
            reserved_gib: policy.reserved_gib((peak_gib - outside_gib).max(0.0)),
            policy_limit_gib: usable_gib,
            headroom_policy_gib: usable_gib - peak_gib,
            capacity_gib,
            headroom_capacity_gib: capacity_gib - peak_gib,
            status: if peak_gib <= usable_gib {
                "fits"
            } else if peak_gib <= capacity_gib {
                "over-policy"
            } else {
                "over-capacity"
            },
        }
    }
}
