//! Training precision.
//!
//! `Fp16` / `Bf16` mean mixed precision (autocast half-precision compute with
//! fp32 master weights, 16 bytes of training state per parameter), `Fp32`
//! means pure fp32 compute (TF32 off, as in the reference profiles).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Compute precision of a training run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// fp16 autocast, fp32 master weights.
    Fp16,
    /// bf16 autocast, fp32 master weights.
    Bf16,
    /// pure fp32.
    Fp32,
}

impl Dtype {
    /// Parses `fp16|float16|half`, `bf16|bfloat16`, `fp32|float32|float`.
    pub fn parse(s: &str) -> Option<Dtype> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp16" | "float16" | "half" | "f16" => Some(Dtype::Fp16),
            "bf16" | "bfloat16" => Some(Dtype::Bf16),
            "fp32" | "float32" | "float" | "f32" => Some(Dtype::Fp32),
            _ => None,
        }
    }

    /// The key the reference profiles use (`float16`, `float32`); bf16 has none.
    pub fn reference_key(self) -> &'static str {
        match self {
            Dtype::Fp16 => "float16",
            Dtype::Bf16 => "bfloat16",
            Dtype::Fp32 => "float32",
        }
    }

    /// Bytes of one element of the compute (and communicated parameter) dtype.
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Fp16 | Dtype::Bf16 => 2.0,
            Dtype::Fp32 => 4.0,
        }
    }

    /// All dtypes.
    pub const ALL: [Dtype; 3] = [Dtype::Fp16, Dtype::Bf16, Dtype::Fp32];
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dtype::Fp16 => "fp16",
            Dtype::Bf16 => "bf16",
            Dtype::Fp32 => "fp32",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names() {
        assert_eq!(Dtype::parse("float16"), Some(Dtype::Fp16));
        assert_eq!(Dtype::parse("BF16"), Some(Dtype::Bf16));
        assert_eq!(Dtype::parse("fp32"), Some(Dtype::Fp32));
        assert_eq!(Dtype::parse("int8"), None);
    }
}
