//! GPU generations as the performance model groups them, the math path a
//! dtype takes on a GPU, and board power (W) per catalog GPU.
//!
//! Efficiency coefficients are shared by every GPU of an [`ArchClass`], so a
//! GPU nobody measured is predicted from its class (or, when its class has no
//! data at all, from the nearest class along [`ArchClass::fallback`]). The
//! catalog's `ampere` is split in two: the data-center GA100 (A100) and the
//! GA10x cards (A10G, RTX A6000, RTX 3090), whose datasheet FP32 rate counts
//! dual-issue FP32 lanes that SGEMM cannot keep busy. The split is read off
//! the specs: GA10x has `fp32_tflops / fp16_tflops > 0.15`, GA100 0.0625.
//!
//! Board power bounds sustained throughput: small cards (T4 70 W, L4 72 W)
//! clock down under dense GEMMs long before their datasheet peak. Board power
//! and boost clock are catalog fields (`profiles/gpus.toml`, with sources).

use crate::gpu::{Arch, GpuSpec};
use crate::precision::NumFormat;
use serde::{Deserialize, Serialize};

/// A GPU generation with its own efficiency coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArchClass {
    /// Pascal (P40, P100): no tensor cores.
    Pascal,
    /// Volta (V100).
    Volta,
    /// Turing (T4).
    Turing,
    /// Ampere data-center GA100 (A100).
    AmpereDc,
    /// Ampere GA10x (A10G, RTX A6000, RTX 3090).
    Ampere,
    /// Ada Lovelace (L4, L40S).
    Ada,
    /// Hopper (H100, H200).
    Hopper,
}

impl ArchClass {
    /// All classes in index order.
    pub const ALL: [ArchClass; 7] = [
        ArchClass::Pascal,
        ArchClass::Volta,
        ArchClass::Turing,
        ArchClass::AmpereDc,
        ArchClass::Ampere,
        ArchClass::Ada,
        ArchClass::Hopper,
    ];

    /// Index into per-class tables (0..7).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Class of a catalog GPU. The architectures without a class of their
    /// own are mapped explicitly:
    ///
    /// * `blackwell` (no catalog GPU yet): Hopper, its predecessor of the
    ///   same data-center design (TSMC 4NP against Hopper's 4N), until a
    ///   Blackwell GPU brings its own anchors (REAL-SYSTEMS-3 §4.2);
    /// * `cdna3`, `cdna4` (AMD, no catalog GPU yet): Hopper, the class of
    ///   the same market generation and a 5 / 3 nm-class process; an
    ///   optimistic stand-in for GEMMs (MAMF 51-68% of peak on MI300X-
    ///   MI355X against 73-84% on NVIDIA parts, REAL-SYSTEMS-3 §4.4) until
    ///   an AMD GPU enters the catalog with its own class;
    /// * `cpu` (real execution's host rank): the A100 class, as before the
    ///   enum: the predictor has no CPU model, and on a CPU rank only its
    ///   ratios (TP shares, implementations) are read against measurements.
    pub fn of(gpu: &GpuSpec) -> ArchClass {
        match gpu.arch {
            Arch::Pascal => ArchClass::Pascal,
            Arch::Volta => ArchClass::Volta,
            Arch::Turing => ArchClass::Turing,
            Arch::Ampere => {
                if gpu.fp32_tflops / gpu.fp16_tflops.max(1e-9) > 0.15 {
                    ArchClass::Ampere
                } else {
                    ArchClass::AmpereDc
                }
            }
            Arch::Ada => ArchClass::Ada,
            Arch::Hopper | Arch::Blackwell | Arch::Cdna3 | Arch::Cdna4 => ArchClass::Hopper,
            Arch::Cpu => ArchClass::AmpereDc,
        }
    }

    /// The class whose coefficients stand in when this one has none: the
    /// nearest generation with the same kind of design (Turing and Pascal
    /// from Volta, Hopper from GA100, GA10x and Ada from each other).
    pub fn fallback(self) -> ArchClass {
        match self {
            ArchClass::Pascal => ArchClass::Volta,
            ArchClass::Volta => ArchClass::AmpereDc,
            ArchClass::Turing => ArchClass::Volta,
            ArchClass::AmpereDc => ArchClass::Volta,
            ArchClass::Ampere => ArchClass::Ada,
            ArchClass::Ada => ArchClass::Ampere,
            ArchClass::Hopper => ArchClass::AmpereDc,
        }
    }

    /// Whether the datasheet FP32 rate counts dual-issue lanes that share
    /// their issue slot with integer work (GA10x, Ada): SGEMM reaches a
    /// smaller fraction of it.
    pub fn dual_issue_fp32(self) -> bool {
        matches!(self, ArchClass::Ampere | ArchClass::Ada)
    }

    /// Process node of the class's chips (nm, the foundry's marketing name):
    /// dynamic energy per FLOP falls with it, so at the same board power a
    /// newer node sustains more FLOP/s. Sources: NVIDIA architecture
    /// whitepapers. Pascal GP100/GP102 TSMC 16 nm FinFET; Volta GV100 TSMC
    /// 12 nm FFN; Turing TU104 TSMC 12 nm; GA100 TSMC 7 nm; GA10x Samsung
    /// 8 nm; Ada AD10x and Hopper GH100 TSMC 4N.
    pub fn process_nm(self) -> f64 {
        match self {
            ArchClass::Pascal => 16.0,
            ArchClass::Volta | ArchClass::Turing => 12.0,
            ArchClass::AmpereDc => 7.0,
            ArchClass::Ampere => 8.0,
            ArchClass::Ada | ArchClass::Hopper => 4.0,
        }
    }

    /// Lower-case name used in the calibration file.
    pub fn as_str(self) -> &'static str {
        match self {
            ArchClass::Pascal => "pascal",
            ArchClass::Volta => "volta",
            ArchClass::Turing => "turing",
            ArchClass::AmpereDc => "ampere-dc",
            ArchClass::Ampere => "ampere",
            ArchClass::Ada => "ada",
            ArchClass::Hopper => "hopper",
        }
    }
}

/// Which units run the block matmuls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MathPath {
    /// fp16/bf16 on tensor cores.
    Tensor,
    /// fp32 CUDA cores (fp32, and fp16 on GPUs without tensor cores).
    Simt,
}

impl MathPath {
    /// Index into per-path tables (0, 1).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The path `dtype` takes on `gpu`.
    pub fn of(gpu: &GpuSpec, dtype: NumFormat) -> MathPath {
        match dtype {
            NumFormat::Fp32 => MathPath::Simt,
            NumFormat::Fp16 | NumFormat::Bf16 if gpu.tensor_cores => MathPath::Tensor,
            NumFormat::Fp16 | NumFormat::Bf16 => MathPath::Simt,
        }
    }
}

/// Board power of a GPU (W) and its FLOP per clock cycle on the `dtype`'s
/// math path (`peak / boost clock`), when the catalog gives both
/// `board_power_w` and `boost_clock_mhz`; `None` = the power cap never binds.
pub fn power_and_cycle_flops(gpu: &GpuSpec, dtype: NumFormat) -> Option<(f64, f64)> {
    let w = gpu.board_power_w?;
    let mhz = gpu.boost_clock_mhz?;
    let peak_flops = gpu.peak_tflops(dtype)? * 1e12;
    Some((w, peak_flops / (mhz * 1e6)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuCatalog;

    #[test]
    fn every_catalog_gpu_has_power_and_a_class() {
        // The `cpu` device of real execution is not a GPU (no board power).
        for g in GpuCatalog::builtin()
            .all()
            .iter()
            .filter(|g| !g.arch.is_cpu())
        {
            assert!(
                power_and_cycle_flops(g, NumFormat::Fp32).is_some(),
                "no board power or boost clock for {}",
                g.name
            );

            let _ = ArchClass::of(g);
        }
    }

    #[test]
    fn architectures_without_a_class_map_as_documented() {
        let mut g = GpuCatalog::builtin().get("h100-sxm").unwrap().clone();
        for (arch, class) in [
            (Arch::Blackwell, ArchClass::Hopper),
            (Arch::Cdna3, ArchClass::Hopper),
            (Arch::Cdna4, ArchClass::Hopper),
            (Arch::Cpu, ArchClass::AmpereDc),
        ] {
            g.arch = arch;
            assert_eq!(ArchClass::of(&g), class, "{arch}");
        }
    }

    #[test]
    fn ampere_split() {
        let c = GpuCatalog::builtin();
        assert_eq!(
            ArchClass::of(c.get("a100x40").unwrap()),
            ArchClass::AmpereDc
        );
        assert_eq!(ArchClass::of(c.get("a10g").unwrap()), ArchClass::Ampere);
        assert_eq!(ArchClass::of(c.get("a6000").unwrap()), ArchClass::Ampere);
        assert_eq!(
            MathPath::of(c.get("p40").unwrap(), NumFormat::Fp16),
            MathPath::Simt
        );
        assert_eq!(
            MathPath::of(c.get("t4").unwrap(), NumFormat::Fp16),
            MathPath::Tensor
        );
    }
}
