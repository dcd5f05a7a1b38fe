//! Link classes of the communication model: the achievable fraction of
//! each class's line rate and its per-hop latency, from the catalog
//! `profiles/links.toml` (compiled in; every figure there cites its
//! measurement).
//!
//! Units: efficiencies are fractions of the per-direction line rate,
//! latencies microseconds per ring step.

use serde::Deserialize;
use std::sync::OnceLock;

/// The shipped link catalog (TOML).
pub const BUILTIN_LINKS_TOML: &str = include_str!("../../profiles/links.toml");

/// A class of link a collective's hop crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkClass {
    /// NVLink through NVSwitch (SXM parts): any GPU pair at full NVLink rate.
    Nvswitch,
    /// NVLink bridge between two PCIe cards (joins pairs only).
    NvlinkBridge,
    /// GPU peer-to-peer over PCIe (any generation).
    Pcie,
    /// A NIC with GPUDirect RDMA.
    NicRdma,
    /// A NIC without GPUDirect RDMA (staged through host memory).
    NicHost,
}

impl LinkClass {
    /// The catalog's name of the class.
    pub fn name(self) -> &'static str {
        match self {
            LinkClass::Nvswitch => "nvswitch",
            LinkClass::NvlinkBridge => "nvlink-bridge",
            LinkClass::Pcie => "pcie",
            LinkClass::NicRdma => "nic-rdma",
            LinkClass::NicHost => "nic-host",
        }
    }

    const ALL: [LinkClass; 5] = [
        LinkClass::Nvswitch,
        LinkClass::NvlinkBridge,
        LinkClass::Pcie,
        LinkClass::NicRdma,
        LinkClass::NicHost,
    ];

    /// Achievable fraction of the line rate (nccl-tests busbw / line rate).
    pub fn efficiency(self) -> f64 {
        catalog()[self as usize].efficiency
    }

    /// Latency of one ring step over a hop of this class, µs.
    pub fn latency_us(self) -> f64 {
        catalog()[self as usize].latency_us
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkEntry {
    class: String,
    efficiency: f64,
    latency_us: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    link: Vec<LinkEntry>,
}

#[derive(Debug, Clone, Copy)]
struct ClassFigures {
    efficiency: f64,
    latency_us: f64,
}

/// The compiled-in catalog, one entry per [`LinkClass`] in its order.
/// The shipped file is checked by the tests; a class it misses gets
/// efficiency 1 and no latency (never reached for the shipped file).
fn catalog() -> &'static [ClassFigures; 5] {
    static CAT: OnceLock<[ClassFigures; 5]> = OnceLock::new();
    CAT.get_or_init(|| {
        let mut out = [ClassFigures {
            efficiency: 1.0,
            latency_us: 0.0,
        }; 5];
        if let Ok(file) = toml::from_str::<LinkFile>(BUILTIN_LINKS_TOML) {
            for e in file.link {
                if let Some(c) = LinkClass::ALL.iter().find(|c| c.name() == e.class) {
                    out[*c as usize] = ClassFigures {
                        efficiency: e.efficiency,
                        latency_us: e.latency_us,
                    };
                }
            }
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_catalog_covers_every_class_with_physical_figures() {
        let file: LinkFile = toml::from_str(BUILTIN_LINKS_TOML).unwrap();
        for c in LinkClass::ALL {
            let e = file
                .link
                .iter()
                .find(|e| e.class == c.name())
                .unwrap_or_else(|| panic!("links.toml lacks {}", c.name()));
            assert!(e.efficiency > 0.3 && e.efficiency <= 1.0, "{e:?}");
            assert!(e.latency_us > 0.0 && e.latency_us < 100.0, "{e:?}");
            assert_eq!(c.efficiency(), e.efficiency);
        }
        assert_eq!(file.link.len(), LinkClass::ALL.len());
        // GPUDirect RDMA is never worse than staging through the host.
        assert!(LinkClass::NicRdma.efficiency() > LinkClass::NicHost.efficiency());
    }
}
