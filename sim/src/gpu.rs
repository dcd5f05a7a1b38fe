//! GPU catalog: per GPU type, memory capacity (GiB), dense peak throughput per
//! dtype (TFLOPS, 10^12 FLOP/s), memory bandwidth (GB/s, 10^9 B/s), host link
//! (PCIe generation x lanes) and peer link (NVLink, GB/s per direction).
//!
//! The built-in catalog is `profiles/gpus.toml`, compiled in with
//! `include_str!`; every figure there cites its datasheet. Users may load
//! their own file with [`GpuCatalog::from_toml`].
//!
//! Invariants (checked by [`GpuCatalog::from_toml`]): every number is finite
//! and positive; names and aliases are unique, both exactly (ignoring case)
//! and after normalisation (see [`normalize_gpu_name`]), so a lookup never
//! silently picks one of two GPUs.

mod arch;

pub use arch::Arch;

use crate::error::SpecError;
use crate::precision::NumFormat;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The shipped catalog text (`profiles/gpus.toml`).
pub const BUILTIN_GPUS_TOML: &str = include_str!("../../profiles/gpus.toml");

/// One GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Canonical name (what reports print), e.g. `a100-40gb`.
    pub name: String,
    /// Other accepted names (the reference data's names among them).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Architecture ([`Arch`]; `cpu` for a host CPU rank of real
    /// execution), checked when the entry is read.
    pub arch: Arch,
    /// Whether fp16 matmuls run on tensor cores (false on Pascal).
    #[serde(default)]
    pub tensor_cores: bool,
    /// Memory capacity, GiB (datasheet "GB" read as GiB).
    pub mem_gib: f64,
    /// The reference optimizer's memory figure for this GPU, GiB, if it has one.
    #[serde(default)]
    pub reference_mem_gib: Option<f64>,
    /// Dense FP32 peak on CUDA cores (TF32 off), TFLOPS.
    pub fp32_tflops: f64,
    /// Dense TF32 tensor-core peak, TFLOPS; `None` before Ampere.
    #[serde(default)]
    pub tf32_tflops: Option<f64>,
    /// Dense peak of fp16-input / fp32-accumulate GEMMs (what autocast runs),
    /// TFLOPS: tensor-core rate where present, the fp32 rate on Pascal.
    pub fp16_tflops: f64,
    /// Dense BF16 tensor-core peak, TFLOPS; `None` = bf16 unsupported.
    #[serde(default)]
    pub bf16_tflops: Option<f64>,
    /// Memory bandwidth, GB/s.
    pub mem_bw_gbps: f64,
    /// PCIe link to the host.
    pub host_link: HostLink,
    /// GPU-to-GPU link (NVLink or none).
    #[serde(default)]
    pub peer_link: PeerLink,
    /// Approximate public on-demand price per GPU-hour, USD.
    #[serde(default)]
    pub price_per_hour_usd: Option<f64>,
    /// Maximum board power, W (datasheet TDP / power limit). With
    /// `boost_clock_mhz` it lets the performance model clock a card down
    /// under dense GEMMs; `None` = never power-bound.
    #[serde(default)]
    pub board_power_w: Option<f64>,
    /// Boost clock, MHz: the clock the datasheet peaks assume
    /// (`peak = FLOP per cycle x boost clock`).
    #[serde(default)]
    pub boost_clock_mhz: Option<f64>,
    /// Streaming multiprocessors (what GEMM tiles fill); `None` = estimated
    /// ([`GpuSpec::sms`]).
    #[serde(default)]
    pub sm_count: Option<u32>,
}

/// PCIe connection between a GPU and its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLink {
    /// PCIe generation (1..=6).
    pub pcie_gen: u32,
    /// Lane count (1, 2, 4, 8 or 16).
    pub lanes: u32,
}

/// Fraction of the raw PCIe per-direction rate that large DMA copies reach.
///
/// Transaction-layer headers, flow control and DMA engine overheads leave
/// about 80% of the encoded line rate for `cudaMemcpy` of pinned buffers:
/// gen3 x16 gives ~12.6 GB/s (measured: 12-13), gen4 x16 ~25 GB/s
/// (measured: 24-26), gen5 x16 ~50 GB/s.
pub const PCIE_EFFICIENCY: f64 = 0.8;

impl HostLink {
    /// Raw per-lane, per-direction rate after line encoding, GB/s
    /// (gen1/2: 8b/10b; gen3-5: 128b/130b; gen6: PAM4 with FLIT mode).
    pub fn lane_raw_gbps(gen: u32) -> Option<f64> {
        match gen {
            1 => Some(0.25),
            2 => Some(0.5),
            3 => Some(8.0 * 128.0 / 130.0 / 8.0),
            4 => Some(16.0 * 128.0 / 130.0 / 8.0),
            5 => Some(32.0 * 128.0 / 130.0 / 8.0),
            6 => Some(64.0 * 242.0 / 256.0 / 8.0),
            _ => None,
        }
    }

    /// Usable one-direction bandwidth, GB/s: lanes x raw lane rate x
    /// [`PCIE_EFFICIENCY`] (gen3 x16 ~12.6, gen4 x16 ~25.2, gen5 x16 ~50.4).
    /// An unknown generation counts as gen3.
    pub fn bw_gbps(&self) -> f64 {
        let lane = HostLink::lane_raw_gbps(self.pcie_gen).unwrap_or(8.0 * 128.0 / 130.0 / 8.0);
        self.lanes as f64 * lane * PCIE_EFFICIENCY
    }
}

/// Direct GPU-to-GPU link.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum PeerLink {
    /// No peer link: GPU-to-GPU traffic goes over PCIe.
    #[default]
    None,
    /// NVLink: switched (SXM parts, any pair through NVSwitch) or a bridge
    /// (PCIe cards, joins pairs only).
    Nvlink {
        /// Aggregate bandwidth per GPU per direction, GB/s.
        bw_gbps: f64,
        /// True for bridge-only cards (`peer_link.bridge`, default false).
        #[serde(default)]
        bridge: bool,
        /// Bridge cards: the NVLink bridges joining the pair, as the
        /// card's documentation gives them ([`Bridges`]; with
        /// `links_per_bridge` and `link_gbps`, all three or none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bridges: Option<u32>,
        /// NVLink links each bridge carries.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        links_per_bridge: Option<u32>,
        /// One NVLink link's rate per direction, GB/s.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        link_gbps: Option<f64>,
    },
}

impl PeerLink {
    /// A bridge card's bridges (`None`: no NVLink, switched NVLink, or
    /// bridges the catalog does not detail; see
    /// `GpuSpec::check_bridges` for the partial forms it refuses).
    pub fn bridges(&self) -> Option<Bridges> {
        match *self {
            PeerLink::Nvlink {
                bridges: Some(count),
                links_per_bridge: Some(links_per_bridge),
                link_gbps: Some(link_gbps),
                ..
            } => Some(Bridges {
                count,
                links_per_bridge,
                link_gbps,
            }),
            _ => None,
        }
    }
}

/// The NVLink bridges joining a pair of PCIe cards: `count` bridges of
/// `links_per_bridge` links at `link_gbps` each, so `count x
/// links_per_bridge x link_gbps` is the pair's rate per direction
/// (`peer_link.bw_gbps`, checked equal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bridges {
    /// Bridges joining the pair (`peer_link.bridges`).
    pub count: u32,
    /// NVLink links each bridge carries.
    pub links_per_bridge: u32,
    /// One link's rate per direction, GB/s.
    pub link_gbps: f64,
}

impl Bridges {
    /// NVLink links joining the pair.
    pub fn links(&self) -> u32 {
        self.count * self.links_per_bridge
    }

    /// The pair's rate per direction, GB/s: links x rate per link.
    pub fn per_direction_gbps(&self) -> f64 {
        self.links() as f64 * self.link_gbps
    }
}

impl GpuSpec {
    /// Streaming multiprocessors (AMD: compute units): the catalog's
    /// `sm_count`, else an estimate from the FP32 peak and the boost clock
    /// (1.5 GHz when the catalog has none) at the architecture's FP32 lanes
    /// per SM (64 on Volta, Turing and GA100; 128 on Pascal GP102, GA10x,
    /// Ada, Hopper and Blackwell: the architecture whitepapers; 128 FP32
    /// FMA per clock per CDNA 3 / CDNA 4 compute unit: MI300X 163.4 TFLOPS
    /// = 304 CUs x 2.1 GHz x 256 FLOP, MI355X 157.3 = 256 x 2.4 GHz x 256,
    /// AMD's datasheets; the CPU device has none, 128 as before).
    pub fn sms(&self) -> f64 {
        if let Some(n) = self.sm_count {
            return n as f64;
        }
        let ga100 = self.fp32_tflops / self.fp16_tflops.max(1e-9) <= 0.15;
        let lanes = match self.arch {
            Arch::Volta | Arch::Turing => 64.0,
            Arch::Ampere if ga100 => 64.0,
            Arch::Pascal | Arch::Ampere | Arch::Ada | Arch::Hopper | Arch::Blackwell => 128.0,
            Arch::Cdna3 | Arch::Cdna4 | Arch::Cpu => 128.0,
        };
        let clock_hz = self.boost_clock_mhz.unwrap_or(1500.0) * 1e6;
        (self.fp32_tflops * 1e12 / (2.0 * clock_hz * lanes)).max(1.0)
    }

    /// Dense peak TFLOPS for a training dtype: fp16 -> `fp16_tflops`,
    /// bf16 -> `bf16_tflops` (`None` if unsupported), fp32 -> `fp32_tflops`
    /// (TF32 off, as in the reference profiles).
    pub fn peak_tflops(&self, dtype: NumFormat) -> Option<f64> {
        match dtype {
            NumFormat::Fp16 => Some(self.fp16_tflops),
            NumFormat::Bf16 => self.bf16_tflops,
            NumFormat::Fp32 => Some(self.fp32_tflops),
        }
    }

    /// Whether this GPU can train in `dtype`.
    pub fn supports(&self, dtype: NumFormat) -> bool {
        self.peak_tflops(dtype).is_some()
    }

    /// The dtypes this GPU can train in, as printed (`fp16, fp32`).
    pub fn supported_dtypes(&self) -> String {
        NumFormat::ALL
            .iter()
            .filter(|d| self.supports(**d))
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The one check where a dtype meets this GPU (a workload's `--dtype`,
    /// a profile entry, `predict`): an error naming `origin` and `field`
    /// when the GPU has no units for it (bf16 on Pascal, Volta and Turing:
    /// no `bf16_tflops` in the catalog).
    pub fn check_dtype(
        &self,
        dtype: NumFormat,
        origin: &str,
        field: &str,
    ) -> Result<(), SpecError> {
        if self.supports(dtype) {
            return Ok(());
        }
        Err(SpecError::invalid(
            origin,
            field,
            format!(
                "{} cannot train in {dtype}: the catalog gives it no {dtype} peak (it supports {})",
                self.name,
                self.supported_dtypes()
            ),
        ))
    }

    /// Memory capacity, GiB (= `mem_gib`).
    pub fn capacity_gib(&self) -> f64 {
        self.mem_gib
    }

    /// Memory the reference optimizer assumes for this GPU, GiB:
    /// `reference_mem_gib` when the reference table has one, else `mem_gib`.
    pub fn reference_capacity_gib(&self) -> f64 {
        self.reference_mem_gib.unwrap_or(self.mem_gib)
    }

    /// Peer link bandwidth per direction, GB/s, if the GPU has NVLink.
    pub fn nvlink_gbps(&self) -> Option<f64> {
        match self.peer_link {
            PeerLink::None => None,
            PeerLink::Nvlink { bw_gbps, .. } => Some(bw_gbps),
        }
    }

    /// A bridged card's bridges: on bridge cards only, counts of at least
    /// one, a link rate in (0, 1e4] GB/s, and their product the card's
    /// `bw_gbps`. Errors name `origin` and `field.peer_link.*`.
    fn check_bridges(&self, origin: &str, field: &str) -> Result<(), SpecError> {
        let PeerLink::Nvlink {
            bw_gbps,
            bridge,
            bridges,
            links_per_bridge,
            link_gbps,
        } = self.peer_link
        else {
            return Ok(());
        };
        let bad = |name: &str, message: String| {
            Err(SpecError::invalid(
                origin,
                format!("{field}.peer_link.{name}"),
                format!("{}: {message}", self.name),
            ))
        };
        let given = [
            ("bridges", bridges.is_some()),
            ("links_per_bridge", links_per_bridge.is_some()),
            ("link_gbps", link_gbps.is_some()),
        ];
        if given.iter().all(|g| !g.1) {
            return Ok(());
        }
        if let Some((missing, _)) = given.iter().find(|g| !g.1) {
            return bad(
                missing,
                "expected bridges, links_per_bridge and link_gbps together (or none)".into(),
            );
        }
        let Some(b) = self.peer_link.bridges() else {
            return Ok(());
        };
        if !bridge {
            return bad(
                "bridges",
                "bridges are for bridge-only cards (`bridge = true`); switched NVLink has none"
                    .into(),
            );
        }
        if b.count == 0 || b.links_per_bridge == 0 {
            return bad(
                "bridges",
                format!(
                    "expected at least one bridge of at least one link, got {} x {}",
                    b.count, b.links_per_bridge
                ),
            );
        }
        if !(b.link_gbps.is_finite() && b.link_gbps > 0.0 && b.link_gbps <= 1e4) {
            return bad(
                "link_gbps",
                format!(
                    "expected a positive rate per link up to 1e4 GB/s, got {}",
                    b.link_gbps
                ),
            );
        }
        let sum = b.per_direction_gbps();
        if (sum - bw_gbps).abs() > 1e-9 * bw_gbps {
            return bad(
                "bw_gbps",
                format!(
                    "expected the bridges' {} x {} links x {} GB/s = {sum} GB/s per direction, got {bw_gbps}",
                    b.count, b.links_per_bridge, b.link_gbps
                ),
            );
        }
        Ok(())
    }

    fn validate(&self, origin: &str, field: &str) -> Result<(), SpecError> {
        let who = if self.name.is_empty() {
            "?"
        } else {
            &self.name
        };
        if self.name.trim().is_empty() {
            return Err(SpecError::invalid(
                origin,
                format!("{field}.name"),
                "expected a non-empty name",
            ));
        }
        for (i, a) in self.aliases.iter().enumerate() {
            if a.trim().is_empty() {
                return Err(SpecError::invalid(
                    origin,
                    format!("{field}.aliases[{i}]"),
                    format!("{who}: expected a non-empty alias"),
                ));
            }
        }
        // Upper bounds well past any GPU (B200: 192 GB, 2,250 dense fp16
        // TFLOPS, 8 TB/s HBM, 900 GB/s NVLink per direction) catch unit
        // mix-ups (MB for GB, FLOPS for TFLOPS).
        let positive = |name: &str, v: f64, unit: &str| -> Result<(), SpecError> {
            let hi = match unit {
                "GiB" => crate::physical::MEM_GIB.hi,
                "TFLOPS" => 1e5,
                "GB/s" => 1e5,
                _ => f64::MAX,
            };
            if v.is_finite() && v > 0.0 && v <= hi {
                Ok(())
            } else {
                Err(SpecError::invalid(
                    origin,
                    format!("{field}.{name}"),
                    format!("{who}: expected a positive number of {unit} up to {hi}, got {v}"),
                ))
            }
        };
        positive("mem_gib", self.mem_gib, "GiB")?;
        if let Some(v) = self.reference_mem_gib {
            positive("reference_mem_gib", v, "GiB")?;
        }
        positive("fp32_tflops", self.fp32_tflops, "TFLOPS")?;
        if let Some(v) = self.tf32_tflops {
            positive("tf32_tflops", v, "TFLOPS")?;
        }
        positive("fp16_tflops", self.fp16_tflops, "TFLOPS")?;
        if let Some(v) = self.bf16_tflops {
            positive("bf16_tflops", v, "TFLOPS")?;
        }
        positive("mem_bw_gbps", self.mem_bw_gbps, "GB/s")?;
        if let PeerLink::Nvlink { bw_gbps, .. } = self.peer_link {
            positive("peer_link.bw_gbps", bw_gbps, "GB/s")?;
        }
        self.check_bridges(origin, field)?;
        if let Some(v) = self.price_per_hour_usd {
            positive("price_per_hour_usd", v, "USD per GPU-hour")?;
        }
        if let Some(v) = self.board_power_w {
            positive("board_power_w", v, "W")?;
        }
        if let Some(v) = self.boost_clock_mhz {
            positive("boost_clock_mhz", v, "MHz")?;
        }
        if let Some(v) = self.sm_count {
            if !(1..=10_000).contains(&v) {
                return Err(SpecError::invalid(
                    origin,
                    format!("{field}.sm_count"),
                    format!("{who}: expected 1..=10000 streaming multiprocessors, got {v}"),
                ));
            }
        }
        if HostLink::lane_raw_gbps(self.host_link.pcie_gen).is_none() {
            return Err(SpecError::invalid(
                origin,
                format!("{field}.host_link.pcie_gen"),
                format!(
                    "{who}: expected a PCIe generation 1..=6, got {}",
                    self.host_link.pcie_gen
                ),
            ));
        }
        if ![1, 2, 4, 8, 16].contains(&self.host_link.lanes) {
            return Err(SpecError::invalid(
                origin,
                format!("{field}.host_link.lanes"),
                format!(
                    "{who}: expected 1, 2, 4, 8 or 16 lanes, got {}",
                    self.host_link.lanes
                ),
            ));
        }
        Ok(())
    }
}

/// Normalises a GPU name for lookup: lower case; the words `nvidia`,
/// `tesla`, `geforce` dropped; separators (anything not a letter, digit or
/// `.`) removed; `gb` after a digit removed; an `x` between two digits or
/// after `pcie` removed. So `RTX-3090`, `rtx_3090`, `NVIDIA GeForce RTX 3090`
/// give `rtx3090`; `a100x40` and `A100-40GB` give `a10040`; `v100-pciex16`
/// and `Tesla V100-PCIE-16GB` give `v100pcie16`.
pub fn normalize_gpu_name(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .filter(|w| !w.is_empty() && !matches!(*w, "nvidia" | "tesla" | "geforce"))
        .collect();
    let joined: Vec<char> = words.concat().chars().collect();
    let mut out = String::with_capacity(joined.len());
    let mut i = 0;
    while i < joined.len() {
        let c = joined[i];
        let prev_digit = i > 0 && joined[i - 1].is_ascii_digit();
        let next_digit = joined.get(i + 1).is_some_and(|n| n.is_ascii_digit());
        if c == 'g' && prev_digit && joined.get(i + 1) == Some(&'b') {
            i += 2;
            continue;
        }
        if c == 'x' && next_digit && (prev_digit || out.ends_with("pcie")) {
            i += 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// `user`'s entries, then those of `builtin` that share no key with any of
/// them (`keys`: an entry's normalised name and aliases), and the `name`
/// of each `builtin` entry left out. Shared by the GPU and model catalogs'
/// `with_user`.
pub(crate) fn user_first<T: Clone>(
    user: &[T],
    builtin: &[T],
    name: impl Fn(&T) -> String,
    keys: impl Fn(&T) -> Vec<String>,
) -> (Vec<T>, Vec<String>) {
    let taken: std::collections::BTreeSet<String> = user.iter().flat_map(&keys).collect();
    let mut out: Vec<T> = user.to_vec();
    let mut replaced = Vec::new();
    for e in builtin {
        if keys(e).iter().any(|x| taken.contains(x)) {
            replaced.push(name(e));
        } else {
            out.push(e.clone());
        }
    }
    (out, replaced)
}

/// Name lookup shared by the GPU and model catalogs.
///
/// Three tiers, tried in order: the exact name or alias ignoring case; the
/// normalised canonical name; the normalised alias. Two different entries
/// may not share a key within one tier (checked when built), so a lookup is
/// never ambiguous; across tiers the earlier tier wins (the model catalog
/// needs this: `gpt_2.7b` is an alias of the legacy HuggingFace model while
/// `gpt-2.7b` is the canonical DeepSpeed one).
#[derive(Debug, Clone, Default)]
pub(crate) struct NameIndex {
    exact: BTreeMap<String, usize>,
    canonical: BTreeMap<String, usize>,
    alias: BTreeMap<String, usize>,
}

impl NameIndex {
    /// Builds the index. `entries[i] = (field path, canonical name, aliases)`;
    /// `kind` is `GPU` or `model` (for messages).
    pub(crate) fn build(
        entries: &[(String, &str, &[String])],
        normalize: fn(&str) -> String,
        origin: &str,
        kind: &str,
    ) -> Result<NameIndex, SpecError> {
        let mut idx = NameIndex::default();
        let mut names: Vec<&str> = Vec::new();
        for (i, (field, name, aliases)) in entries.iter().enumerate() {
            names.push(name);
            let keys = std::iter::once((format!("{field}.name"), *name, true)).chain(
                aliases
                    .iter()
                    .enumerate()
                    .map(|(j, a)| (format!("{field}.aliases[{j}]"), a.as_str(), false)),
            );
            for (f, key, is_name) in keys {
                let clash = |map: &mut BTreeMap<String, usize>,
                             k: String,
                             how: &str|
                 -> Result<(), SpecError> {
                    match map.get(&k) {
                        Some(&other) if other != i => Err(SpecError::invalid(
                            origin,
                            f.clone(),
                            format!(
                                "{kind} name `{key}` clashes with {kind} `{}` ({how}); names and aliases must be unique",
                                names[other]
                            ),
                        )),
                        _ => {
                            map.insert(k, i);
                            Ok(())
                        }
                    }
                };
                clash(
                    &mut idx.exact,
                    key.trim().to_ascii_lowercase(),
                    "same name ignoring case",
                )?;
                let norm = normalize(key);
                if norm.is_empty() {
                    return Err(SpecError::invalid(
                        origin,
                        f.clone(),
                        format!("`{key}` is not a usable name"),
                    ));
                }
                if is_name {
                    clash(&mut idx.canonical, norm, "same name after normalisation")?;
                } else {
                    clash(&mut idx.alias, norm, "same alias after normalisation")?;
                }
            }
        }
        Ok(idx)
    }

    /// Index of the entry `name` refers to, if any.
    pub(crate) fn find(&self, name: &str, normalize: fn(&str) -> String) -> Option<usize> {
        if let Some(&i) = self.exact.get(&name.trim().to_ascii_lowercase()) {
            return Some(i);
        }
        let norm = normalize(name);
        self.canonical
            .get(&norm)
            .or_else(|| self.alias.get(&norm))
            .copied()
    }
}

/// On-disk form of the catalog: `[[gpu]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuFile {
    #[serde(default)]
    gpu: Vec<GpuSpec>,
}

/// A validated set of GPU types with name lookup.
#[derive(Debug, Clone)]
pub struct GpuCatalog {
    gpus: Vec<GpuSpec>,
    index: NameIndex,
}

impl GpuCatalog {
    /// The built-in catalog (`profiles/gpus.toml`), parsed once.
    ///
    /// Panics only if the shipped file is broken, which a unit test guards.
    pub fn builtin() -> &'static GpuCatalog {
        static CATALOG: OnceLock<GpuCatalog> = OnceLock::new();
        CATALOG.get_or_init(|| {
            GpuCatalog::from_toml(BUILTIN_GPUS_TOML, "profiles/gpus.toml (built in)")
                .unwrap_or_else(|e| panic!("built-in GPU catalog is broken: {e}"))
        })
    }

    /// Parses and validates catalog text (`[[gpu]]` tables, format of
    /// `profiles/gpus.toml`). `origin` names the file for errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<GpuCatalog, SpecError> {
        let file: GpuFile = toml::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
        GpuCatalog::from_specs(file.gpu, origin)
    }

    /// Validates a list of specs into a catalog (order is kept).
    pub fn from_specs(gpus: Vec<GpuSpec>, origin: &str) -> Result<GpuCatalog, SpecError> {
        if gpus.is_empty() {
            return Err(SpecError::invalid(
                origin,
                "gpu",
                "expected at least one [[gpu]] table",
            ));
        }
        for (i, g) in gpus.iter().enumerate() {
            g.validate(origin, &format!("gpu[{i}]"))?;
        }
        let entries: Vec<(String, &str, &[String])> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| (format!("gpu[{i}]"), g.name.as_str(), g.aliases.as_slice()))
            .collect();
        let index = NameIndex::build(&entries, normalize_gpu_name, origin, "GPU")?;
        Ok(GpuCatalog { gpus, index })
    }

    /// The GPU `name` refers to: canonical name or alias, case-insensitive,
    /// separators normalised (see [`normalize_gpu_name`]).
    pub fn get(&self, name: &str) -> Option<&GpuSpec> {
        self.index
            .find(name, normalize_gpu_name)
            .map(|i| &self.gpus[i])
    }

    /// Like [`GpuCatalog::get`], but an unknown name is a
    /// [`SpecError::UnknownGpu`] listing the canonical names.
    pub fn lookup(&self, name: &str, origin: &str) -> Result<&GpuSpec, SpecError> {
        self.get(name).ok_or_else(|| SpecError::UnknownGpu {
            origin: origin.to_string(),
            name: name.to_string(),
            known: self.names(),
        })
    }

    /// This catalog with `user`'s GPU types in front: a user type replaces
    /// every entry here that shares one of its names or aliases (after
    /// normalisation), so `--gpu-catalog` can redefine a built-in type.
    /// Returns the catalog and the canonical names of the replaced entries.
    pub fn with_user(
        &self,
        user: &GpuCatalog,
        origin: &str,
    ) -> Result<(GpuCatalog, Vec<String>), SpecError> {
        let name = |g: &GpuSpec| g.name.clone();
        let (gpus, replaced) = user_first(&user.gpus, &self.gpus, name, |g: &GpuSpec| {
            std::iter::once(&g.name)
                .chain(&g.aliases)
                .map(|k| normalize_gpu_name(k))
                .collect()
        });
        Ok((GpuCatalog::from_specs(gpus, origin)?, replaced))
    }

    /// All GPU types, in catalog order.
    pub fn all(&self) -> &[GpuSpec] {
        &self.gpus
    }

    /// Comma-separated canonical names, in catalog order.
    pub fn names(&self) -> String {
        self.gpus
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU names used by the reference data (README memory table and
    /// `model_latencies.json`), with the canonical spec each must resolve to.
    const REFERENCE_NAMES: [(&str, &str); 17] = [
        ("a6000", "rtx-a6000"),
        ("l4", "l4"),
        ("p40", "p40"),
        ("t4", "t4"),
        ("v100", "v100-16gb"),
        ("a10g", "a10g"),
        ("rtx_3090", "rtx-3090"),
        ("rtx3090", "rtx-3090"),
        ("p100", "p100-16gb"),
        ("v100x16", "v100-16gb"),
        ("v100-pciex16", "v100-pcie-16gb"),
        ("v100x32", "v100-32gb"),
        ("a100x40", "a100-40gb"),
        ("a100x80", "a100-80gb"),
        ("h100-nvl", "h100-nvl"),
        ("l40s", "l40s"),
        ("RTX-3090", "rtx-3090"),
    ];

    #[test]
    fn builtin_parses_and_covers_the_required_types() {
        let c = GpuCatalog::builtin();
        for want in [
            "p40",
            "p100-16gb",
            "v100-16gb",
            "v100-32gb",
            "v100-pcie-16gb",
            "v100-pcie-32gb",
            "t4",
            "a10g",
            "l4",
            "l40s",
            "rtx-a6000",
            "rtx-3090",
            "a100-40gb",
            "a100-80gb",
            "h100-sxm",
            "h100-pcie",
            "h100-nvl",
            "h200",
        ] {
            assert!(c.all().iter().any(|g| g.name == want), "missing {want}");
        }
        // 18 GPUs plus the `cpu` device of real execution.
        assert_eq!(c.all().len(), 19);
    }

    #[test]
    fn reference_names_resolve() {
        let c = GpuCatalog::builtin();
        for (name, canon) in REFERENCE_NAMES {
            assert_eq!(c.get(name).map(|g| g.name.as_str()), Some(canon), "{name}");
        }
        for (name, canon) in [
            ("rtx-a6000", "rtx-a6000"),
            ("NVIDIA RTX A6000", "rtx-a6000"),
            ("Tesla V100-SXM2-16GB", "v100-16gb"),
            ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
            ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
            ("NVIDIA GeForce RTX 3090", "rtx-3090"),
            ("NVIDIA H100 80GB HBM3", "h100-sxm"),
            ("h100_sxm", "h100-sxm"),
            ("V100-32GB", "v100-32gb"),
            ("Tesla T4", "t4"),
            ("H200", "h200"),
        ] {
            assert_eq!(c.get(name).map(|g| g.name.as_str()), Some(canon), "{name}");
        }
    }

    #[test]
    fn reference_memory_table() {
        let c = GpuCatalog::builtin();
        for (name, gib) in [
            ("a6000", 47.99),
            ("l4", 22.50),
            ("p40", 22.50),
            ("t4", 15.0),
            ("v100", 16.0),
            ("a10g", 22.49),
            ("rtx_3090", 24.0),
            ("p100", 12.0),
            ("v100x16", 16.0),
            ("v100-pciex16", 16.0),
            ("v100x32", 32.0),
            ("a100x40", 40.0),
            ("a100x80", 80.0),
            ("h100-nvl", 94.0),
        ] {
            assert_eq!(c.get(name).unwrap().reference_mem_gib, Some(gib), "{name}");
        }
        let l40s = c.get("l40s").unwrap();
        assert_eq!(l40s.reference_mem_gib, None);
        assert_eq!(l40s.reference_capacity_gib(), 48.0);
    }

    #[test]
    fn gpus_in_reference_latencies_resolve() {
        let Some(text) = crate::model::testdata::reference("model_latencies.json") else {
            return;
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let c = GpuCatalog::builtin();
        let mut n = 0;
        for by_gpu in v.as_object().unwrap().values() {
            for gpu in by_gpu.as_object().unwrap().keys() {
                assert!(
                    c.get(gpu).is_some(),
                    "reference GPU `{gpu}` does not resolve"
                );
                n += 1;
            }
        }
        assert!(n > 50);
    }

    #[test]
    fn peaks_and_dtypes() {
        let c = GpuCatalog::builtin();
        let p40 = c.get("p40").unwrap();
        assert!(!p40.tensor_cores);
        assert!(!p40.supports(NumFormat::Bf16));
        assert!(p40.peak_tflops(NumFormat::Fp16).unwrap() <= p40.fp32_tflops);
        let t4 = c.get("t4").unwrap();
        assert_eq!(t4.peak_tflops(NumFormat::Bf16), None);
        assert_eq!(t4.peak_tflops(NumFormat::Fp16), Some(65.0));
        let a100 = c.get("a100x40").unwrap();
        assert_eq!(a100.peak_tflops(NumFormat::Bf16), Some(312.0));
        assert_eq!(a100.peak_tflops(NumFormat::Fp32), Some(19.5));
        assert_eq!(a100.capacity_gib(), 40.0);
        assert_eq!(a100.nvlink_gbps(), Some(300.0));
        for g in c.all() {
            assert!(
                g.supports(NumFormat::Fp16) && g.supports(NumFormat::Fp32),
                "{}",
                g.name
            );
            assert_eq!(
                g.supports(NumFormat::Bf16),
                matches!(g.arch, Arch::Ampere | Arch::Ada | Arch::Hopper)
            );
            assert_eq!(
                g.tf32_tflops.is_some(),
                g.supports(NumFormat::Bf16),
                "{}",
                g.name
            );
            assert!(g.fp16_tflops >= g.fp32_tflops, "{}", g.name);
            assert_eq!(
                g.tensor_cores,
                !matches!(g.arch, Arch::Pascal | Arch::Cpu),
                "{}",
                g.name
            );
        }
    }

    #[test]
    fn host_link_bandwidth() {
        let bw = |g, l| {
            HostLink {
                pcie_gen: g,
                lanes: l,
            }
            .bw_gbps()
        };
        assert!((bw(3, 16) - 12.6).abs() < 0.1);
        assert!((bw(4, 16) - 25.2).abs() < 0.1);
        assert!((bw(5, 16) - 50.4).abs() < 0.1);
        assert!((bw(4, 8) - bw(3, 16)).abs() < 1e-9);
        let c = GpuCatalog::builtin();
        assert!((c.get("h100").unwrap().host_link.bw_gbps() - 50.4).abs() < 0.1);
    }

    #[test]
    fn normalisation() {
        assert_eq!(normalize_gpu_name("RTX_3090"), "rtx3090");
        assert_eq!(normalize_gpu_name("a100x40"), "a10040");
        assert_eq!(normalize_gpu_name("A100-40GB"), "a10040");
        assert_eq!(normalize_gpu_name("v100-pciex16"), "v100pcie16");
        assert_eq!(normalize_gpu_name("Tesla V100-PCIE-16GB"), "v100pcie16");
        assert_eq!(normalize_gpu_name("rtx-a6000"), "rtxa6000");
        assert_eq!(normalize_gpu_name("h100 nvl"), "h100nvl");
    }

    #[test]
    fn unknown_gpu_is_an_error_listing_known_names() {
        let c = GpuCatalog::builtin();
        assert!(c.get("b200").is_none());
        match c.lookup("b200", "--gpus") {
            Err(SpecError::UnknownGpu {
                origin,
                name,
                known,
            }) => {
                assert_eq!(origin, "--gpus");
                assert_eq!(name, "b200");
                assert!(known.contains("a100-40gb") && known.contains("p40"));
            }
            other => panic!("expected UnknownGpu, got {other:?}"),
        }
    }

    const ONE: &str = r#"
[[gpu]]
name = "x1"
aliases = ["xone"]
arch = "ampere"
mem_gib = MEM
fp32_tflops = 10.0
fp16_tflops = 20.0
mem_bw_gbps = 500.0
host_link = { pcie_gen = 4, lanes = 16 }
"#;

    #[test]
    fn from_toml_rejects_negative_memory_naming_the_field() {
        let err = GpuCatalog::from_toml(&ONE.replace("MEM", "-4.0"), "my.toml").unwrap_err();
        match &err {
            SpecError::Invalid {
                origin,
                field,
                message,
            } => {
                assert_eq!(origin, "my.toml");
                assert_eq!(field, "gpu[0].mem_gib");
                assert!(message.contains("positive"), "{message}");
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
        let ok = GpuCatalog::from_toml(&ONE.replace("MEM", "8.0"), "my.toml").unwrap();
        assert_eq!(ok.get("XONE").unwrap().peer_link, PeerLink::None);
    }

    #[test]
    fn from_toml_rejects_bad_input() {
        let two = format!(
            "{}{}",
            ONE.replace("MEM", "8.0"),
            ONE.replace("MEM", "8.0").replace("\"x1\"", "\"x2\"")
        );
        let err = GpuCatalog::from_toml(&two, "t.toml").unwrap_err();
        assert!(
            matches!(&err, SpecError::Invalid { field, .. } if field == "gpu[1].aliases[0]"),
            "{err}"
        );
        let err = GpuCatalog::from_toml("[[gpu]]\nname = ", "t.toml").unwrap_err();
        assert!(matches!(err, SpecError::Parse { .. }));
        let typo = ONE.replace("MEM", "8.0").replace("mem_bw_gbps", "mem_bw");
        assert!(matches!(
            GpuCatalog::from_toml(&typo, "t.toml"),
            Err(SpecError::Parse { .. })
        ));
        let arch = ONE.replace("MEM", "8.0").replace("ampere", "blackwel");
        match GpuCatalog::from_toml(&arch, "t.toml") {
            Err(e @ SpecError::Parse { .. }) => {
                let m = e.to_string();
                assert!(m.starts_with("t.toml"), "{m}");
                assert!(m.contains("`arch`") && m.contains("`blackwel`"), "{m}");
                assert!(m.contains(&Arch::names()), "{m}");
            }
            other => panic!("expected a parse error naming `arch`, got {other:?}"),
        }
        let next = ONE.replace("MEM", "8.0").replace("ampere", "cdna3");
        let c = GpuCatalog::from_toml(&next, "t.toml").unwrap();
        assert_eq!(c.get("x1").unwrap().arch, Arch::Cdna3);
        let nv = ONE.replace("MEM", "8.0") + "peer_link = { kind = \"nvlink\", bw_gbps = -1.0 }\n";
        assert!(
            matches!(GpuCatalog::from_toml(&nv, "t.toml"), Err(SpecError::Invalid { field, .. }) if field == "gpu[0].peer_link.bw_gbps")
        );
        assert!(matches!(
            GpuCatalog::from_toml("", "t.toml"),
            Err(SpecError::Invalid { .. })
        ));
    }

    #[test]
    fn bridges_must_make_the_cards_nvlink_rate() {
        let with = |link: &str| {
            let t = ONE.replace("MEM", "8.0")
                + &format!("peer_link = {{ kind = \"nvlink\", {link} }}\n");
            GpuCatalog::from_toml(&t, "t.toml")
        };
        let field_of = |r: Result<GpuCatalog, SpecError>| match r {
            Err(SpecError::Invalid { field, .. }) => field,
            other => panic!("expected Invalid, got {other:?}"),
        };
        let ok = with(
            "bw_gbps = 300.0, bridge = true, bridges = 3, links_per_bridge = 4, link_gbps = 25.0",
        )
        .unwrap();
        let b = ok.get("x1").unwrap().peer_link.bridges().unwrap();
        assert_eq!((b.links(), b.per_direction_gbps()), (12, 300.0));
        for (link, field) in [
            // 3 x 4 x 25 = 300, not 600 (a bidirectional figure).
            ("bw_gbps = 600.0, bridge = true, bridges = 3, links_per_bridge = 4, link_gbps = 25.0", "bw_gbps"),
            ("bw_gbps = 300.0, bridge = true, bridges = 3, link_gbps = 25.0", "links_per_bridge"),
            ("bw_gbps = 300.0, bridges = 3, links_per_bridge = 4, link_gbps = 25.0", "bridges"),
            ("bw_gbps = 300.0, bridge = true, bridges = 0, links_per_bridge = 4, link_gbps = 25.0", "bridges"),
            ("bw_gbps = 300.0, bridge = true, bridges = 3, links_per_bridge = 4, link_gbps = -25.0", "link_gbps"),
        ] {
            assert_eq!(field_of(with(link)), format!("gpu[0].peer_link.{field}"), "{link}");
        }
        // Without the detail a bridge card is as before.
        let plain = with("bw_gbps = 56.25, bridge = true").unwrap();
        assert_eq!(plain.get("x1").unwrap().peer_link.bridges(), None);
    }
}
