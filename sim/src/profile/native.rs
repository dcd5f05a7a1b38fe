//! The project's own profile format, `cephalo-profile/1` (JSON).
//!
//! Written by `cephalo profile`, read by `cephalo simulate|plan --profiles`.
//!
//! ```json
//! {
//!   "format": "cephalo-profile/1",
//!   "device": "NVIDIA H200 (cuda:0), libtorch 2.11.0",
//!   "blocks": [
//!     { "gpu": "h200", "model": "gpt-2.7b", "seq_len": 512, "dtype": "bf16",
//!       "batch_sizes": [1, 2, 4], "fwd_ms": [..], "bwd_ms": [..],
//!       "act_mem_gib": [..], "attention": "eager" }
//!   ],
//!   "units": [
//!     { "gpu": "h200", "model": "gpt-2.7b", "seq_len": 512, "dtype": "bf16",
//!       "batch_sizes": [1, 2, 4], "embed_fwd_ms": [..], "embed_bwd_ms": [..],
//!       "head_fwd_ms": [..], "head_bwd_ms": [..], "optimizer_ms_per_mparam": 0.05 }
//!   ],
//!   "collectives": [
//!     { "kind": "all_gather", "ranks": 2, "bytes": 1048576, "imbalance": 1.0, "time_ms": 0.4 }
//!   ]
//! }
//! ```
//!
//! Units: `*_ms` milliseconds of ONE block (blocks) or of the unit (units) at
//! each micro-batch size; `act_mem_gib` GiB of non-state memory of one
//! training step at that micro-batch size (optional); `bytes` total buffer
//! bytes of the collective; `optimizer_ms_per_mparam` ms per million local
//! parameters. `gpu` and `model` accept catalog names and aliases; `dtype`
//! accepts `fp16|bf16|fp32` (and `float16|float32`). Blocks become
//! `Source::Measured`.

use super::{
    BlockProfile, CollectiveSample, ComputeCurve, MemoryProfile, ProfileSet, Source, UnitProfile,
};
use crate::error::SpecError;
use crate::gpu::GpuCatalog;
use crate::model::{ModelCatalog, ModelSpec};
use crate::precision::NumFormat;
use crate::strategy::Attention;
use serde::{Deserialize, Serialize};

/// The format tag this module reads and writes.
pub const FORMAT: &str = "cephalo-profile/1";

/// File form of a native profile.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NativeProfile {
    /// Must be [`FORMAT`].
    pub format: String,
    /// Free text describing the device and software that measured it.
    #[serde(default)]
    pub device: Option<String>,
    /// Per-block timing (and optional memory) entries.
    #[serde(default)]
    pub blocks: Vec<NativeBlock>,
    /// Embedding / head / optimizer entries.
    #[serde(default)]
    pub units: Vec<NativeUnits>,
    /// Measured collectives.
    #[serde(default)]
    pub collectives: Vec<CollectiveSample>,
}

/// One block entry of the native format.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NativeBlock {
    /// GPU name or alias.
    pub gpu: String,
    /// Model name or alias.
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// `fp16`, `bf16` or `fp32`.
    pub dtype: String,
    /// Micro-batch sizes measured, strictly increasing, >= 1.
    pub batch_sizes: Vec<u32>,
    /// Forward ms of one block per size.
    pub fwd_ms: Vec<f64>,
    /// Backward ms of one block per size.
    pub bwd_ms: Vec<f64>,
    /// Non-state GiB of one training step per size (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub act_mem_gib: Option<Vec<f64>>,
    /// Attention kernel the blocks ran (`eager` or `flash`; default eager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<Attention>,
}

/// One unit-cost entry of the native format.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NativeUnits {
    /// GPU name or alias.
    pub gpu: String,
    /// Model name or alias.
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// `fp16`, `bf16` or `fp32`.
    pub dtype: String,
    /// Micro-batch sizes measured.
    pub batch_sizes: Vec<u32>,
    /// Embedding forward ms per size.
    pub embed_fwd_ms: Vec<f64>,
    /// Embedding backward ms per size.
    pub embed_bwd_ms: Vec<f64>,
    /// Head forward ms per size.
    pub head_fwd_ms: Vec<f64>,
    /// Head backward ms per size.
    pub head_bwd_ms: Vec<f64>,
    /// Optimizer step ms per million local parameters.
    pub optimizer_ms_per_mparam: f64,
}

/// Checks one measured time series: one value per size, each inside
/// [`crate::physical::OP_MS`]. (Whether a block's times fall with the
/// micro-batch beyond noise is checked on forward + backward together
/// where the run uses them, [`crate::profile::ComputeCurve::physical_problem`]:
/// each alone is noisier.)
fn check_series(origin: &str, field: &str, sizes: &[u32], vals: &[f64]) -> Result<(), SpecError> {
    check_series_in(origin, field, sizes, vals, &crate::physical::OP_MS)
}

/// Checks a measured series: one value per size, each inside `range`.
fn check_series_in(
    origin: &str,
    field: &str,
    sizes: &[u32],
    vals: &[f64],
    range: &crate::physical::Range,
) -> Result<(), SpecError> {
    if vals.len() != sizes.len() {
        return Err(SpecError::invalid(
            origin,
            field,
            format!(
                "expected {} values (one per batch size), got {}",
                sizes.len(),
                vals.len()
            ),
        ));
    }
    match crate::physical::outside(sizes, vals, range) {
        Some(why) => Err(SpecError::invalid(origin, field, why)),
        None => Ok(()),
    }
}

fn check_sizes(origin: &str, field: &str, sizes: &[u32]) -> Result<(), SpecError> {
    if sizes.is_empty() || sizes[0] == 0 || sizes.windows(2).any(|w| w[1] <= w[0]) {
        return Err(SpecError::invalid(
            origin,
            field,
            "expected a non-empty, strictly increasing list of batch sizes >= 1",
        ));
    }
    Ok(())
}

fn dtype(origin: &str, field: &str, s: &str) -> Result<NumFormat, SpecError> {
    NumFormat::parse(s).ok_or_else(|| {
        SpecError::invalid(
            origin,
            field,
            format!("expected fp16, bf16 or fp32, got `{s}`"),
        )
    })
}

/// Reads a native profile's text into a [`ProfileSet`].
pub fn import(
    text: &str,
    origin: &str,
    gpus: &GpuCatalog,
    models: &ModelCatalog,
) -> Result<ProfileSet, SpecError> {
    let file: NativeProfile =
        serde_json::from_str(text).map_err(|e| SpecError::parse(origin, e))?;
    if file.format != FORMAT {
        return Err(SpecError::invalid(
            origin,
            "format",
            format!("expected `{FORMAT}`, got `{}`", file.format),
        ));
    }
    let mut set = ProfileSet::new();
    let reader = Reader {
        origin,
        gpus,
        models,
        source: Source::Measured {
            origin: origin.to_string(),
        },
    };
    for (i, b) in file.blocks.iter().enumerate() {
        let (block, memory) = reader.block(i, b)?;
        set.blocks.push(block);
        set.memory.extend(memory);
    }
    for (i, u) in file.units.iter().enumerate() {
        set.units.push(reader.units(i, u)?);
    }
    for (i, c) in file.collectives.iter().enumerate() {
        reader.check_collective(i, c)?;
        set.collectives.push(c.clone());
    }
    if set.blocks.is_empty() && set.units.is_empty() && set.collectives.is_empty() {
        return Err(SpecError::invalid(
            origin,
            "<root>",
            "the profile holds no blocks, units or collectives",
        ));
    }
    Ok(set)
}

/// What reading a native profile's entries needs: the file (for errors and
/// as the entries' source) and the catalogs their names resolve in.
struct Reader<'a> {
    origin: &'a str,
    gpus: &'a GpuCatalog,
    models: &'a ModelCatalog,
    /// `Source::Measured` from this file.
    source: Source,
}

impl Reader<'_> {
    /// Block entry `i`: its compute curve and, when it gives `act_mem_gib`
    /// from batch size 1 on, its memory profile.
    fn block(
        &self,
        i: usize,
        b: &NativeBlock,
    ) -> Result<(BlockProfile, Option<MemoryProfile>), SpecError> {
        let origin = self.origin;
        let f = format!("blocks[{i}]");
        let gpu = self.gpus.lookup(&b.gpu, &format!("{origin}: {f}.gpu"))?;
        let model = self
            .models
            .lookup(&b.model, &format!("{origin}: {f}.model"))?;
        let dt = dtype(origin, &format!("{f}.dtype"), &b.dtype)?;
        gpu.check_dtype(dt, origin, &format!("{f}.dtype"))?;
        if b.seq_len == 0 {
            return Err(SpecError::invalid(
                origin,
                format!("{f}.seq_len"),
                "expected a sequence length >= 1",
            ));
        }
        check_sizes(origin, &format!("{f}.batch_sizes"), &b.batch_sizes)?;
        check_series(origin, &format!("{f}.fwd_ms"), &b.batch_sizes, &b.fwd_ms)?;
        check_series(origin, &format!("{f}.bwd_ms"), &b.batch_sizes, &b.bwd_ms)?;
        let block = BlockProfile {
            gpu: gpu.name.clone(),
            model: model.name.clone(),
            model_key: b.model.clone(),
            seq_len: b.seq_len,
            dtype: dt,
            curve: ComputeCurve::from_points(
                b.batch_sizes.clone(),
                b.fwd_ms.clone(),
                b.bwd_ms.clone(),
                self.source.clone(),
            ),
            attention: b.attention.unwrap_or(Attention::Eager),
            flags: vec![],
        };
        let memory = match &b.act_mem_gib {
            Some(mem) => self.block_memory(&f, b, model, dt, mem)?,
            None => None,
        };
        Ok((block, memory))
    }

    /// The memory profile of block entry `f` (`b`, of `model` in `dt`) from
    /// its `act_mem_gib` series `mem`: checked, its dense prefix from batch
    /// size 1 (`None` when the sizes do not start at 1).
    fn block_memory(
        &self,
        f: &str,
        b: &NativeBlock,
        model: &ModelSpec,
        dt: NumFormat,
        mem: &[f64],
    ) -> Result<Option<MemoryProfile>, SpecError> {
        let origin = self.origin;
        let field = format!("{f}.act_mem_gib");
        check_series_in(
            origin,
            &field,
            &b.batch_sizes,
            mem,
            &crate::physical::ACT_GIB,
        )?;
        if let Some(why) = crate::physical::memory_series_problem(&b.batch_sizes, mem) {
            return Err(SpecError::invalid(origin, field, why));
        }
        // Memory profiles are indexed by batch size 1..n: keep the dense prefix.
        let dense: Vec<f64> = b
            .batch_sizes
            .iter()
            .zip(mem)
            .enumerate()
            .take_while(|(k, (s, _))| **s as usize == k + 1)
            .map(|(_, (_, m))| *m)
            .collect();
        if dense.is_empty() {
            return Ok(None);
        }
        Ok(Some(MemoryProfile {
            cluster: "measured".into(),
            model: model.name.clone(),
            model_key: b.model.clone(),
            dtype: dt,
            parameters: model.total_params(),
            seq_len: Some(b.seq_len),
            act_gib: dense,
            source: self.source.clone(),
        }))
    }

    /// Unit entry `i`: embedding, head and optimizer costs.
    fn units(&self, i: usize, u: &NativeUnits) -> Result<UnitProfile, SpecError> {
        let origin = self.origin;
        let f = format!("units[{i}]");
        let gpu = self.gpus.lookup(&u.gpu, &format!("{origin}: {f}.gpu"))?;
        let model = self
            .models
            .lookup(&u.model, &format!("{origin}: {f}.model"))?;
        let dt = dtype(origin, &format!("{f}.dtype"), &u.dtype)?;
        gpu.check_dtype(dt, origin, &format!("{f}.dtype"))?;
        check_sizes(origin, &format!("{f}.batch_sizes"), &u.batch_sizes)?;
        for (name, vals) in [
            ("embed_fwd_ms", &u.embed_fwd_ms),
            ("embed_bwd_ms", &u.embed_bwd_ms),
            ("head_fwd_ms", &u.head_fwd_ms),
            ("head_bwd_ms", &u.head_bwd_ms),
        ] {
            check_series(origin, &format!("{f}.{name}"), &u.batch_sizes, vals)?;
        }
        crate::physical::check(
            origin,
            &format!("{f}.optimizer_ms_per_mparam"),
            u.optimizer_ms_per_mparam,
            &crate::physical::OP_MS,
        )?;
        Ok(UnitProfile {
            gpu: gpu.name.clone(),
            model: model.name.clone(),
            seq_len: u.seq_len,
            dtype: dt,
            batch_sizes: u.batch_sizes.clone(),
            embed_fwd_ms: u.embed_fwd_ms.clone(),
            embed_bwd_ms: u.embed_bwd_ms.clone(),
            head_fwd_ms: u.head_fwd_ms.clone(),
            head_bwd_ms: u.head_bwd_ms.clone(),
            optimizer_ms_per_mparam: u.optimizer_ms_per_mparam,
            source: self.source.clone(),
        })
    }

    /// Checks collective entry `i`: a known kind, sane numbers, a physical
    /// bandwidth.
    fn check_collective(&self, i: usize, c: &CollectiveSample) -> Result<(), SpecError> {
        let origin = self.origin;
        let f = format!("collectives[{i}]");
        if crate::comm::CollectiveKind::parse(&c.kind).is_none() {
            return Err(SpecError::invalid(
                origin,
                format!("{f}.kind"),
                format!("expected {}", crate::comm::CollectiveKind::names(false)),
            ));
        }
        let ok = |x: f64, lo: f64| x.is_finite() && x >= lo;
        if c.ranks < 1 || !ok(c.bytes, 0.0) || !ok(c.time_ms, 0.0) || !ok(c.imbalance, 1.0) {
            return Err(SpecError::invalid(
                origin,
                f,
                "expected ranks >= 1, bytes >= 0, time_ms >= 0, imbalance >= 1",
            ));
        }
        if let Some(why) = crate::physical::collective_problem(c.bytes, c.time_ms) {
            return Err(SpecError::invalid(origin, f, why));
        }
        Ok(())
    }
}

/// Serialises a native profile as pretty JSON (stable field order).
pub fn to_json(profile: &NativeProfile) -> String {
    let mut s = serde_json::to_string_pretty(profile).expect("native profile serialises");
    s.push('\n');
    s
}
