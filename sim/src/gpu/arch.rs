//! The device architectures a GPU catalog entry names in `arch`, parsed
//! once when the entry is read: an unknown name is an error naming the
//! field and the known names, so no model downstream sees a string or
//! falls back silently. The models map from this enum with exhaustive
//! matches (`perfmodel::arch::ArchClass::of`, `comm::NcclGen::of`,
//! [`crate::gpu::GpuSpec::sms`]), so a new value does not compile until
//! each of them says what it means for it.
//!
//! `blackwell`, `cdna3` and `cdna4` have no catalog GPU yet; the models'
//! mappings for them are stated where they are made, with their sources.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A device architecture (the catalog's `arch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    /// NVIDIA Pascal, sm60 / sm61 (P100, P40): no tensor cores.
    Pascal,
    /// NVIDIA Volta, sm70 (V100).
    Volta,
    /// NVIDIA Turing, sm75 (T4).
    Turing,
    /// NVIDIA Ampere, sm80 / sm86 (A100, A10G, RTX A6000, RTX 3090).
    Ampere,
    /// NVIDIA Ada Lovelace, sm89 (L4, L40S).
    Ada,
    /// NVIDIA Hopper, sm90 (H100, H200).
    Hopper,
    /// NVIDIA Blackwell, sm100 (B200, GB200); no catalog GPU yet.
    Blackwell,
    /// AMD CDNA 3, gfx942 (MI300X, MI325X); no catalog GPU yet.
    Cdna3,
    /// AMD CDNA 4, gfx950 (MI355X); no catalog GPU yet.
    Cdna4,
    /// A host CPU rank of real execution (the catalog's `cpu` device).
    Cpu,
}

impl Arch {
    /// Every architecture, in declaration order (oldest NVIDIA first, then
    /// AMD, the CPU last; a test holds it complete).
    pub const ALL: [Arch; 10] = [
        Arch::Pascal,
        Arch::Volta,
        Arch::Turing,
        Arch::Ampere,
        Arch::Ada,
        Arch::Hopper,
        Arch::Blackwell,
        Arch::Cdna3,
        Arch::Cdna4,
        Arch::Cpu,
    ];

    /// The catalog's name (`hopper`, `cdna3`, `cpu`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Pascal => "pascal",
            Arch::Volta => "volta",
            Arch::Turing => "turing",
            Arch::Ampere => "ampere",
            Arch::Ada => "ada",
            Arch::Hopper => "hopper",
            Arch::Blackwell => "blackwell",
            Arch::Cdna3 => "cdna3",
            Arch::Cdna4 => "cdna4",
            Arch::Cpu => "cpu",
        }
    }

    /// The architecture named `s` (exactly as [`Arch::name`] spells it).
    pub fn parse(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }

    /// The known names, comma-separated, for errors and docs.
    pub fn names() -> String {
        Arch::ALL.map(Arch::name).join(", ")
    }

    /// Whether this is the CPU device of real execution.
    pub fn is_cpu(self) -> bool {
        self == Arch::Cpu
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Arch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Arch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Arch, D::Error> {
        let s = String::deserialize(d)?;
        Arch::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`arch`: expected one of {}, got `{s}`",
                Arch::names()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for a in Arch::ALL {
            assert_eq!(Arch::parse(a.name()), Some(a));
            assert_eq!(a.to_string(), a.name());
        }
        assert_eq!(Arch::parse("Hopper"), None);
        assert_eq!(Arch::parse("blackwel"), None);
        assert!(Arch::names().starts_with("pascal, volta"));
        assert!(Arch::names().ends_with("cdna4, cpu"));
        // Complete and in order: every variant at its index, the CPU last.
        assert_eq!(Arch::ALL.len(), Arch::Cpu as usize + 1);
        for (i, a) in Arch::ALL.into_iter().enumerate() {
            assert_eq!(a as usize, i, "{a}");
        }
    }
}
