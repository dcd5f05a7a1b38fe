//! Reading input files: every path the CLI touches goes through here, so every
//! error names its file.

use crate::error::UserError;
use anyhow::Result;
use sim::gpu::GpuCatalog;
use sim::model::ModelCatalog;
use sim::perfmodel::Calibrated;
use sim::profile::{native, reference, ProfileSet};
use std::path::Path;
use std::sync::OnceLock;

/// The catalogs this run looks names up in when `--gpu-catalog` /
/// `--model-catalog` extend the built-in ones (set once, before the command
/// runs; unset, lookups use the built-in catalogs directly).
static USER_GPUS: OnceLock<GpuCatalog> = OnceLock::new();
static USER_MODELS: OnceLock<ModelCatalog> = OnceLock::new();

/// Reads `--gpu-catalog` and `--model-catalog` (same formats as
/// `profiles/gpus.toml` and `profiles/models.toml`) and makes their entries
/// visible to every lookup of this run; an entry sharing a name or alias
/// with a built-in one replaces it. Returns notes naming what was replaced.
pub fn install_catalogs(gpu: Option<&Path>, model: Option<&Path>) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if let Some(p) = gpu {
        let origin = p.display().to_string();
        let user = GpuCatalog::from_toml(&read_text(p)?, &origin)?;
        let (cat, replaced) = GpuCatalog::builtin().with_user(&user, &origin)?;
        for r in replaced {
            notes.push(format!("{origin}: replaces the built-in GPU type `{r}`"));
        }
        let _ = USER_GPUS.set(cat);
    }
    if let Some(p) = model {
        let origin = p.display().to_string();
        let user = ModelCatalog::from_toml(&read_text(p)?, &origin)?;
        let (cat, replaced) = ModelCatalog::builtin().with_user(&user, &origin)?;
        for r in replaced {
            notes.push(format!("{origin}: replaces the built-in model `{r}`"));
        }
        let _ = USER_MODELS.set(cat);
    }
    Ok(notes)
}

/// The GPU catalog of this run (built in, plus `--gpu-catalog`).
pub fn gpus() -> &'static GpuCatalog {
    USER_GPUS.get().unwrap_or_else(|| GpuCatalog::builtin())
}

/// The model catalog of this run (built in, plus `--model-catalog`).
pub fn models() -> &'static ModelCatalog {
    USER_MODELS.get().unwrap_or_else(|| ModelCatalog::builtin())
}

/// The model a `--model` value names: a catalog name or alias, or the path
/// of a Hugging Face `config.json` (any existing file, or a `.json` path),
/// named after its directory (`Llama-2-7b-hf/config.json` ->
/// `Llama-2-7b-hf`) or, for another file name, its stem.
pub fn model(arg: &str, flag: &str) -> Result<sim::model::ModelSpec> {
    let path = Path::new(arg);
    if path.is_file() || arg.ends_with(".json") {
        let origin = path.display().to_string();
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or(arg);
        let name = if stem == "config" {
            path.canonicalize()
                .ok()
                .and_then(|p| p.parent()?.file_name()?.to_str().map(str::to_string))
                .unwrap_or_else(|| stem.to_string())
        } else {
            stem.to_string()
        };
        return Ok(sim::hf_config::from_hf_config(
            &read_text(path)?,
            &origin,
            &name,
        )?);
    }
    Ok(models().lookup(arg, flag)?.clone())
}

/// Reads a whole text file; a missing or unreadable file is a user error.
pub fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| UserError(format!("{}: cannot read: {e}", path.display())).into())
}

/// A training log's text (`validate --from-log`): bytes that are not
/// UTF-8 (binary junk, a torn write) become U+FFFD, so the parsers name the
/// line they fail on instead of the read failing as a whole.
pub fn read_log(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path)
        .map_err(|e| UserError(format!("{}: cannot read: {e}", path.display())))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The calibrated performance model: from `path` (`cephalo calibrate --out`)
/// when given, else the shipped `profiles/calibration.json`.
pub fn calibration(path: Option<&Path>) -> Result<Calibrated> {
    Ok(match path {
        Some(p) => Calibrated::from_json(&read_text(p)?, &p.display().to_string())?,
        None => Calibrated::builtin(),
    })
}

/// What kind of profile file a JSON text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProfileKind {
    Native,
    ReferenceLatencies,
    ReferenceMemory,
}

fn sniff(text: &str, path: &Path) -> Result<ProfileKind> {
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| sim::error::SpecError::parse(path.display().to_string(), e))?;
    let Some(obj) = v.as_object() else {
        return Err(UserError(format!(
            "{}: expected a JSON object (a cephalo-profile/1 file, model_latencies.json or model_memory.json)",
            path.display()
        ))
        .into());
    };
    if obj.contains_key("format") {
        return Ok(ProfileKind::Native);
    }
    let is_memory = obj
        .values()
        .filter_map(|c| c.as_object())
        .flat_map(|c| c.values())
        .any(|m| m.get("profiled_compute_memory").is_some());
    Ok(if is_memory {
        ProfileKind::ReferenceMemory
    } else {
        ProfileKind::ReferenceLatencies
    })
}

/// Loads one profile file of any supported format.
pub fn load_profile_file(path: &Path) -> Result<ProfileSet> {
    let text = read_text(path)?;
    let origin = path.display().to_string();
    let (g, m) = (gpus(), models());
    let set = match sniff(&text, path)? {
        ProfileKind::Native => native::import(&text, &origin, g, m)?,
        ProfileKind::ReferenceLatencies => reference::import_latencies(&text, &origin, g, m)?,
        ProfileKind::ReferenceMemory => reference::import_memory(&text, &origin, m)?,
    };
    Ok(set)
}

/// Loads a `--comm-profile` argument: `[KIND=]PATH`, an nccl-tests log
/// (KIND `all-gather`, `reduce-scatter`, `all-reduce` or `all-to-all`
/// when the log does not say) or a cephalo-profile/1 JSON, of which only the measured
/// collectives are kept.
pub fn load_comm_profile(spec: &str) -> Result<ProfileSet> {
    load_comm_profile_in(Path::new(""), spec)
}

/// [`load_comm_profile`] with a relative path taken from `base` (a
/// study's directory).
pub fn load_comm_profile_in(base: &Path, spec: &str) -> Result<ProfileSet> {
    let (kind, path) = match spec.split_once('=') {
        Some((k, p)) => {
            let kind = sim::comm::CollectiveKind::parse(&k.replace('-', "_")).ok_or_else(|| {
                UserError(format!(
                    "--comm-profile {spec}: expected one of {} before the path (with `=`), got `{k}=`",
                    sim::comm::CollectiveKind::names(true)
                ))
            })?;
            (Some(kind), base.join(p))
        }
        None => (None, base.join(spec)),
    };
    let path = path.as_path();
    let text = read_text(path)?;
    let origin = path.display().to_string();
    let mut set = ProfileSet::new();
    if text.trim_start().starts_with('{') {
        if kind.is_some() {
            return Err(UserError(format!(
                "--comm-profile {spec}: a JSON profile names its collectives; drop the `KIND=` prefix"
            ))
            .into());
        }
        let all = load_profile_file(path)?;
        if all.collectives.is_empty() {
            return Err(UserError(format!(
                "{origin}: no measured collectives in this profile (--comm-profile)"
            ))
            .into());
        }
        set.collectives = all.collectives;
    } else {
        set.collectives = sim::profile::nccl::parse(&text, &origin, kind)?;
    }
    Ok(set)
}

/// Loads a profile file, or every `*.json` of a directory (sorted by name so
/// the result does not depend on directory order).
pub fn load_profiles(path: &Path) -> Result<ProfileSet> {
    if !path.exists() {
        return Err(UserError(format!(
            "{}: no such file or directory (--profiles)",
            path.display()
        ))
        .into());
    }
    if path.is_file() {
        return load_profile_file(path);
    }
    let mut files: Vec<_> = std::fs::read_dir(path)
        .map_err(|e| UserError(format!("{}: cannot list: {e}", path.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    files.sort();
    // Files of the reference directory that are not profiles.
    files.retain(|f| {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        !(name == "model_stats.json"
            || name == "reference_plans.json"
            || name.starts_with("example_plan"))
    });
    if files.is_empty() {
        return Err(UserError(format!(
            "{}: no profile in this directory (--profiles): expected *.json files in the reference format \
             (model_latencies.json, model_memory.json) or cephalo-profile/1",
            path.display()
        ))
        .into());
    }
    let mut set = ProfileSet::new();
    for f in files {
        set.merge(load_profile_file(&f)?);
    }
    Ok(set)
}
