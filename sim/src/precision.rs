//! Training precision: the element formats one training run uses.
//!
//! A [`NumFormat`] is one scalar element format (fp32, bf16, fp16; fp8
//! formats are further values). A [`Precision`] names the format of each
//! kind of tensor a run touches: what the GEMMs compute in, the working
//! copy of the parameters the forward reads, the gradients as they are
//! reduced, the optimizer state and what the parameter all-gathers carry.
//! The workload names the compute format (`--dtype`), the strategy the
//! parameter and reduction formats (`--param-dtype`, `--reduce-dtype`);
//! `Strategy::precision` derives the whole [`Precision`] from the two.
//!
//! `fp16` / `bf16` compute means mixed precision (autocast half-precision
//! compute with fp32 master weights, 16 bytes of training state per
//! parameter), `fp32` pure fp32 compute (TF32 off, as in the reference
//! profiles).

use serde::{Deserialize, Serialize};
use std::fmt;

/// One scalar element format (PyTorch's `torch.dtype` for floating point
/// tensors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NumFormat {
    /// IEEE half precision (`torch.float16`): fp16 autocast, fp32 master
    /// weights.
    Fp16,
    /// bfloat16 (`torch.bfloat16`): bf16 autocast, fp32 master weights.
    Bf16,
    /// IEEE single precision (`torch.float32`): pure fp32.
    Fp32,
}

impl NumFormat {
    /// Parses `fp16|float16|half|f16`, `bf16|bfloat16`,
    /// `fp32|float32|float|f32` (any case).
    pub fn parse(s: &str) -> Option<NumFormat> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp16" | "float16" | "half" | "f16" => Some(NumFormat::Fp16),
            "bf16" | "bfloat16" => Some(NumFormat::Bf16),
            "fp32" | "float32" | "float" | "f32" => Some(NumFormat::Fp32),
            _ => None,
        }
    }

    /// The name in flags, files and reports (`fp16`, `bf16`, `fp32`).
    pub fn name(self) -> &'static str {
        match self {
            NumFormat::Fp16 => "fp16",
            NumFormat::Bf16 => "bf16",
            NumFormat::Fp32 => "fp32",
        }
    }

    /// The key the reference profiles use (`float16`, `float32`; their
    /// files have no `bfloat16` entries).
    pub fn reference_key(self) -> &'static str {
        match self {
            NumFormat::Fp16 => "float16",
            NumFormat::Bf16 => "bfloat16",
            NumFormat::Fp32 => "float32",
        }
    }

    /// Bytes of one element (IEEE 754-2008 binary16 / binary32; bfloat16
    /// is 16 bits).
    pub const fn bytes(self) -> f64 {
        match self {
            NumFormat::Fp16 | NumFormat::Bf16 => 2.0,
            NumFormat::Fp32 => 4.0,
        }
    }

    /// Every format, in declaration order.
    pub const ALL: [NumFormat; 3] = [NumFormat::Fp16, NumFormat::Bf16, NumFormat::Fp32];
}

impl std::str::FromStr for NumFormat {
    type Err = String;

    /// [`NumFormat::parse`], with what was expected on failure.
    fn from_str(s: &str) -> Result<NumFormat, String> {
        NumFormat::parse(s).ok_or_else(|| format!("expected fp16, bf16 or fp32, got `{s}`"))
    }
}

impl fmt::Display for NumFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The element formats of one training run, and the bytes they imply.
///
/// Built in one place, `Strategy::precision`, from the workload's compute
/// format and the strategy's parameter and reduction formats; the cost,
/// memory and communication byte counts read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Precision {
    /// What the GEMMs and the autocast region compute in: `torch.autocast`'s
    /// dtype, Megatron's `--fp16` / `--bf16` (fp32 without either). It sets
    /// the activations' bytes and which peak the kernels reach.
    pub compute: NumFormat,
    /// The working copy of the parameters the forward and backward read:
    /// FSDP `MixedPrecision(param_dtype=...)`, the dtype of unsharded
    /// (gathered) parameters; Megatron's half-precision model copy.
    pub params: NumFormat,
    /// The format gradients are reduced in (reduce-scatter, all-reduce) and
    /// unsharded gradient buffers accumulate in: FSDP
    /// `MixedPrecision(reduce_dtype=...)`; Megatron's
    /// `--accumulate-allreduce-grads-in-fp32` (fp32) or the model's dtype.
    pub grads: NumFormat,
    /// Master weights, the sharded gradient the step reads and both Adam
    /// moments: fp32 in every mixed-precision recipe (FSDP keeps the
    /// sharded parameters fp32; Megatron's fp32 main params and
    /// `DistributedOptimizer` state).
    pub optimizer: NumFormat,
    /// What the parameter all-gathers carry: FSDP all-gathers in
    /// `param_dtype`, so today the same as [`Precision::params`] (FP8
    /// recipes all-gather in fp8, torchao's `enable_fsdp_float8_all_gather`).
    pub comm: NumFormat,
}

impl Precision {
    /// The optimizer-state format of every recipe (Micikevicius et al.,
    /// "Mixed Precision Training", ICLR 2018: an fp32 master copy; Adam's
    /// moments fp32 in PyTorch's and Megatron's optimizers).
    pub const OPTIMIZER: NumFormat = NumFormat::Fp32;

    /// Tensors of sharded training state per parameter: the master weight,
    /// its gradient and Adam's two moments (Rajbhandari et al., "ZeRO",
    /// SC 2020, section 3.1).
    pub const STATE_TENSORS: f64 = 4.0;

    /// Bytes per parameter of the sharded training state, all in the
    /// optimizer format: master (4), gradient (4) and two moments (8) =
    /// 16 B for fp32 state.
    pub fn state_bytes_per_param(&self) -> f64 {
        Precision::STATE_TENSORS * self.optimizer.bytes()
    }

    /// Bytes per parameter of the sharded state on the GPU: the whole
    /// state ([`Precision::state_bytes_per_param`]), or with the optimizer
    /// offloaded (ZeRO-Offload) the parameter shard in the parameter
    /// format plus its reduced gradient in the gradient format.
    pub fn gpu_state_bytes_per_param(&self, optimizer_offloaded: bool) -> f64 {
        if optimizer_offloaded {
            self.params.bytes() + self.grads.bytes()
        } else {
            self.state_bytes_per_param()
        }
    }

    /// Bytes per local parameter of host memory for the optimizer: the
    /// state plus a pinned staging copy of the updated parameters in the
    /// parameter format with the optimizer offloaded, 0 otherwise.
    pub fn host_state_bytes_per_param(&self, optimizer_offloaded: bool) -> f64 {
        if optimizer_offloaded {
            self.state_bytes_per_param() + self.params.bytes()
        } else {
            0.0
        }
    }

    /// Whether the backward casts gradients from the parameter format to
    /// the reduction format before reducing them (FSDP's cast when
    /// `param_dtype` differs from `reduce_dtype`).
    pub fn casts_grads(&self) -> bool {
        self.params != self.grads
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        assert_eq!(NumFormat::parse("float16"), Some(NumFormat::Fp16));
        assert_eq!(NumFormat::parse(" half "), Some(NumFormat::Fp16));
        assert_eq!(NumFormat::parse("BF16"), Some(NumFormat::Bf16));
        assert_eq!(NumFormat::parse("fp32"), Some(NumFormat::Fp32));
        assert_eq!(NumFormat::parse("float"), Some(NumFormat::Fp32));
        assert_eq!(NumFormat::parse("int8"), None);
        assert_eq!(NumFormat::parse("fp-16"), None);
        assert_eq!("bfloat16".parse::<NumFormat>(), Ok(NumFormat::Bf16));
        assert!("int8".parse::<NumFormat>().unwrap_err().contains("`int8`"));
    }

    #[test]
    fn names_round_trip_through_parse_and_serde() {
        for f in NumFormat::ALL {
            assert_eq!(NumFormat::parse(f.name()), Some(f));
            assert_eq!(f.to_string(), f.name());
            let j = serde_json::to_string(&f).unwrap();
            assert_eq!(j, format!("\"{}\"", f.name()));
            assert_eq!(serde_json::from_str::<NumFormat>(&j).unwrap(), f);
        }
        assert!(serde_json::from_str::<NumFormat>("\"FP16\"").is_err());
        assert_eq!(NumFormat::Fp16.reference_key(), "float16");
        assert_eq!(NumFormat::Fp32.reference_key(), "float32");
    }

    #[test]
    fn bytes_per_element() {
        assert_eq!(NumFormat::Fp16.bytes(), 2.0);
        assert_eq!(NumFormat::Bf16.bytes(), 2.0);
        assert_eq!(NumFormat::Fp32.bytes(), 4.0);
    }

    fn mixed(params: NumFormat, grads: NumFormat) -> Precision {
        Precision {
            compute: NumFormat::Bf16,
            params,
            grads,
            optimizer: Precision::OPTIMIZER,
            comm: params,
        }
    }

    #[test]
    fn training_state_bytes() {
        let p = mixed(NumFormat::Bf16, NumFormat::Fp32);
        // fp32 master + gradient + two moments.
        assert_eq!(p.state_bytes_per_param(), 16.0);
        assert_eq!(p.gpu_state_bytes_per_param(false), 16.0);
        assert_eq!(p.host_state_bytes_per_param(false), 0.0);
        // Offloaded: a bf16 parameter shard and an fp32 gradient on the
        // GPU; the state and a bf16 staging copy on the host.
        assert_eq!(p.gpu_state_bytes_per_param(true), 6.0);
        assert_eq!(p.host_state_bytes_per_param(true), 18.0);
        assert!(p.casts_grads());
        assert!(!mixed(NumFormat::Fp32, NumFormat::Fp32).casts_grads());
    }
}
