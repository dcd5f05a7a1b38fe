//! Importer for the reference (Cephalo authors') profile JSON.
//!
//! `model_latencies.json`: `model -> gpu -> str(seq_len) -> dtype -> leaf`,
//! milliseconds for ONE block at micro-batch size `bs`. Leaf forms:
//!
//! | form | meaning |
//! |---|---|
//! | `[[fs, fi], [bs_, bi], [f1..fn], [b1..bn]]` | fits + raw fwd/bwd for bs = 1..n |
//! | `[[fs, fi], [bs_, bi]]` | fits only |
//! | `[a, b]` | legacy: fwd+bwd combined slope / intercept |
//! | `x` | legacy: combined per-sample slope, intercept 0 |
//!
//! Legacy combined entries are split 1:2 between forward and backward (the
//! backward of a dense block costs about twice its forward) and flagged.
//!
//! `model_memory.json`: `cluster -> model -> {parameters,
//! profiled_compute_memory: {dtype: [GiB at bs=1..]}}`.
//!
//! ViT entries are keyed `"512"` but ran 577 tokens (384 px, patch 16): they
//! are stored with the model's real token count.
//!
//! Known-bad data is flagged, not rejected: fits that disagree with their raw
//! lists, non-monotonic raw lists, and superlinear growth (thermal throttling).

use super::{
    first_drop, superlinear_growth, BlockProfile, ComputeCurve, LinearFit, MemoryProfile,
    ProfileSet, Source,
};
use crate::error::SpecError;
use crate::gpu::{GpuCatalog, GpuSpec};
use crate::model::{Family, ModelCatalog, ModelSpec};
use crate::precision::NumFormat;
use serde_json::Value;

/// Relative disagreement between a given fit and the least-squares line of
/// its raw list above which the entry is flagged (the raw values are used
/// where present either way). The shipped fits match their lists to 1e-13
/// except the hand-edited seq-4096 entries, which are 4-8% off.
pub const FIT_MISMATCH_REL: f64 = 0.01;
/// A raw value more than this fraction below its predecessor is non-monotonic.
pub const NON_MONOTONIC_REL: f64 = 0.02;
/// Per-sample time at the largest batch this much above the per-sample time at
/// half of it flags superlinear growth (throttling).
pub const SUPERLINEAR_REL: f64 = 0.20;

fn as_f64(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn as_pair(v: &Value) -> Option<(f64, f64)> {
    let a = v.as_array()?;
    if a.len() != 2 {
        return None;
    }
    Some((as_f64(&a[0])?, as_f64(&a[1])?))
}

fn as_list(v: &Value) -> Option<Vec<f64>> {
    v.as_array()?.iter().map(as_f64).collect()
}

/// A parsed leaf: raw forward list, raw backward list, forward fit, backward fit, flags.
type Leaf = (Vec<f64>, Vec<f64>, LinearFit, LinearFit, Vec<String>);

/// What a leaf must be, for the error of a malformed one.
const LEAF_FORMS: &str = "expected a per-sample number, a [slope, intercept] pair, \
     or [forward fit, backward fit, forward list, backward list]";

/// Parses one leaf; `Err` says why it is malformed or not physical.
fn parse_leaf(v: &Value) -> Result<Leaf, String> {
    let malformed = || format!("malformed entry: {LEAF_FORMS}");
    // A fit serves every size it is asked for: a block's time grows with
    // its samples and is positive at one sample.
    let serving = |name: &str, l: &LinearFit| -> Result<(), String> {
        if l.slope.is_finite() && l.slope > 0.0 && l.intercept.is_finite() && l.at(1.0) > 0.0 {
            Ok(())
        } else {
            Err(format!(
                "the {name} fit ({} ms per sample + {} ms) is not a time that grows from a positive value at one sample",
                l.slope, l.intercept
            ))
        }
    };
    let mut flags = Vec::new();
    if let Some(x) = as_f64(v) {
        flags.push("legacy combined per-sample slope; split 1:2 into forward/backward".to_string());
        let f = LinearFit {
            slope: x / 3.0,
            intercept: 0.0,
        };
        let b = LinearFit {
            slope: 2.0 * x / 3.0,
            intercept: 0.0,
        };
        serving(
            "combined",
            &LinearFit {
                slope: x,
                intercept: 0.0,
            },
        )?;
        return Ok((vec![], vec![], f, b, flags));
    }
    let a = v.as_array().ok_or_else(malformed)?;
    if a.len() == 2 && as_f64(&a[0]).is_some() {
        let (s, i) = as_pair(v).ok_or_else(malformed)?;
        serving(
            "combined",
            &LinearFit {
                slope: s,
                intercept: i,
            },
        )?;
        flags.push("legacy combined fwd+bwd fit; split 1:2 into forward/backward".to_string());
        let f = LinearFit {
            slope: s / 3.0,
            intercept: i / 3.0,
        };
        let b = LinearFit {
            slope: 2.0 * s / 3.0,
            intercept: 2.0 * i / 3.0,
        };
        return Ok((vec![], vec![], f, b, flags));
    }
    if a.len() != 2 && a.len() != 4 {
        return Err(malformed());
    }
    let (fs, fi) = as_pair(&a[0]).ok_or_else(malformed)?;
    let (bs, bi) = as_pair(&a[1]).ok_or_else(malformed)?;
    let f = LinearFit {
        slope: fs,
        intercept: fi,
    };
    let b = LinearFit {
        slope: bs,
        intercept: bi,
    };
    if a.len() == 2 {
        serving("forward", &f)?;
        serving("backward", &b)?;
        return Ok((vec![], vec![], f, b, flags));
    }
    let fr = as_list(&a[2]).ok_or_else(malformed)?;
    let br = as_list(&a[3]).ok_or_else(malformed)?;
    if fr.is_empty() || fr.len() != br.len() {
        return Err(format!(
            "malformed entry: the forward and backward lists must hold one time per batch size 1..n each (got {} and {})",
            fr.len(),
            br.len()
        ));
    }
    // Measured times: a kernel takes more than zero time; zeros are a
    // placeholder, not a measurement.
    let sizes: Vec<u32> = (1..=fr.len() as u32).collect();
    for (name, raw) in [("forward", &fr), ("backward", &br)] {
        if let Some(e) = crate::physical::outside(&sizes, raw, &crate::physical::OP_MS) {
            return Err(format!("{name} list: {e}"));
        }
    }
    for (name, raw, fit) in [("forward", &fr, &f), ("backward", &br, &b)] {
        flags.extend(quality_flags(name, raw, fit));
    }
    Ok((fr, br, f, b, flags))
}

/// Data-quality checks of one raw list against its fit.
///
/// The fit was made by least squares on x = 1..n of the raw list, so a given
/// fit that differs from the least-squares line of the list as it stands
/// means the list (or the fit) was edited afterwards.
pub fn quality_flags(name: &str, raw: &[f64], fit: &LinearFit) -> Vec<String> {
    let mut flags = Vec::new();
    let xs: Vec<f64> = (1..=raw.len()).map(|i| i as f64).collect();
    if let Some(ls) = LinearFit::least_squares(&xs, raw) {
        let worst = xs
            .iter()
            .map(|&x| ((fit.at(x) - ls.at(x)) / ls.at(x).abs().max(1e-9)).abs())
            .fold(0.0, f64::max);
        if worst > FIT_MISMATCH_REL {
            flags.push(format!(
                "{name} fit disagrees with the least-squares line of its raw list by up to {:.0}% (hand-edited values?)",
                worst * 100.0
            ));
        }
    }
    if let Some(i) = first_drop(raw, NON_MONOTONIC_REL) {
        flags.push(format!(
            "{name} raw list is non-monotonic at batch {} ({:.2} ms -> {:.2} ms)",
            i + 2,
            raw[i],
            raw[i + 1]
        ));
    }
    if let Some((half, per_half, per_last)) = superlinear_growth(raw, SUPERLINEAR_REL) {
        flags.push(format!(
            "{name} grows superlinearly ({per_half:.2} ms/sample at batch {half}, {per_last:.2} at {}; thermal throttling?)",
            raw.len()
        ));
    }
    flags
}

/// Parses `text` as JSON whose root must be an object shaped like `shape`.
fn root_object(
    text: &str,
    origin: &str,
    shape: &str,
) -> Result<serde_json::Map<String, Value>, SpecError> {
    match serde_json::from_str(text).map_err(|e| SpecError::parse(origin, e))? {
        Value::Object(m) => Ok(m),
        _ => Err(SpecError::invalid(
            origin,
            "<root>",
            format!("expected an object `{shape}`"),
        )),
    }
}

/// Imports `model_latencies.json` text. Unknown GPU or model names and
/// malformed leaves become warnings (the file holds entries no catalog has);
/// a file that is not a JSON object of objects is an error.
pub fn import_latencies(
    text: &str,
    origin: &str,
    gpus: &GpuCatalog,
    models: &ModelCatalog,
) -> Result<ProfileSet, SpecError> {
    let root = root_object(text, origin, "model -> gpu -> seq -> dtype -> entry")?;
    let mut set = ProfileSet::new();
    for (model_key, by_gpu) in &root {
        let Some(model) = models.get(model_key) else {
            set.warnings.push(format!(
                "{origin}: model `{model_key}` is not in the model catalog; skipped"
            ));
            continue;
        };
        let by_gpu = by_gpu.as_object().ok_or_else(|| {
            SpecError::invalid(origin, model_key.clone(), "expected an object keyed by GPU")
        })?;
        for (gpu_key, by_seq) in by_gpu {
            let Some(gpu) = gpus.get(gpu_key) else {
                set.warnings.push(format!(
                    "{origin}: {model_key}/{gpu_key}: GPU `{gpu_key}` is not in the GPU catalog; skipped"
                ));
                continue;
            };
            let table = LatencyTable {
                origin,
                model_key,
                model,
                gpu_key,
                gpu,
            };
            table.read(by_seq, &mut set)?;
        }
    }
    if set.blocks.is_empty() {
        return Err(nothing_usable(origin, &set));
    }
    Ok(set)
}

/// The latencies of one model on one GPU in `model_latencies.json` (a
/// `seq -> dtype -> entry` object), both names resolved in the catalogs.
struct LatencyTable<'a> {
    origin: &'a str,
    model_key: &'a String,
    model: &'a ModelSpec,
    gpu_key: &'a String,
    gpu: &'a GpuSpec,
}

impl LatencyTable<'_> {
    /// Reads the table `by_seq` into `set`: a block per usable entry,
    /// warnings and rejections for the others.
    fn read(&self, by_seq: &Value, set: &mut ProfileSet) -> Result<(), SpecError> {
        let (origin, model_key, gpu_key, model) =
            (self.origin, self.model_key, self.gpu_key, self.model);
        let by_seq = by_seq.as_object().ok_or_else(|| {
            SpecError::invalid(
                origin,
                format!("{model_key}.{gpu_key}"),
                "expected an object keyed by sequence length",
            )
        })?;
        for (seq_key, by_dtype) in by_seq {
            let field = format!("{model_key}.{gpu_key}.{seq_key}");
            let seq: u32 = seq_key.parse().map_err(|_| {
                SpecError::invalid(
                    origin,
                    field.clone(),
                    "expected a sequence length key like \"512\"",
                )
            })?;
            let seq_len = if model.family == Family::Vit {
                model.tokens_per_sample(seq)
            } else {
                seq
            };
            let by_dtype = by_dtype.as_object().ok_or_else(|| {
                SpecError::invalid(origin, field.clone(), "expected an object keyed by dtype")
            })?;
            for (dtype_key, leaf) in by_dtype {
                self.leaf(seq_key, seq_len, dtype_key, leaf, set)?;
            }
        }
        Ok(())
    }

    /// Reads entry `seq_key / dtype_key` (`leaf`, `seq_len` tokens per
    /// sample) into `set`: a block, or a warning (and a rejection) when it
    /// cannot be used.
    fn leaf(
        &self,
        seq_key: &str,
        seq_len: u32,
        dtype_key: &str,
        leaf: &Value,
        set: &mut ProfileSet,
    ) -> Result<(), SpecError> {
        let (origin, model_key, gpu_key, model, gpu) = (
            self.origin,
            self.model_key,
            self.gpu_key,
            self.model,
            self.gpu,
        );
        let entry = format!("{model_key}/{gpu_key}/{seq_key}/{dtype_key}");
        let Some(dtype) = NumFormat::parse(dtype_key) else {
            set.warnings
                .push(format!("{origin}: {entry}: unknown dtype; skipped"));
            return Ok(());
        };
        gpu.check_dtype(dtype, origin, &entry)?;
        let (fr, br, f, b, flags) = match parse_leaf(leaf) {
            Ok(l) => l,
            Err(why) => {
                set.warnings
                    .push(format!("{origin}: {entry}: {why}; skipped"));
                set.rejected.push(crate::profile::Rejected {
                    gpu: gpu.name.clone(),
                    model: model.name.clone(),
                    seq_len,
                    dtype,
                    origin: origin.to_string(),
                    entry: entry.clone(),
                    why,
                });
                return Ok(());
            }
        };
        for fl in &flags {
            if !fl.starts_with("legacy") {
                set.warnings.push(format!("{origin}: {entry}: {fl}"));
            }
        }
        let batch_sizes = (1..=fr.len() as u32).collect();
        set.blocks.push(BlockProfile {
            gpu: gpu.name.clone(),
            model: model.name.clone(),
            model_key: model_key.clone(),
            seq_len,
            dtype,
            curve: ComputeCurve {
                batch_sizes,
                fwd_ms: fr,
                bwd_ms: br,
                fwd_fit: f,
                bwd_fit: b,
                source: Source::Imported {
                    origin: origin.to_string(),
                    entry,
                },
            },
            attention: crate::strategy::Attention::Eager,
            flags,
        });
        Ok(())
    }
}

/// The error of a profile file none of whose entries can be used: how many
/// were skipped or refused, and the first reason.
fn nothing_usable(origin: &str, set: &ProfileSet) -> SpecError {
    let prefix = format!("{origin}: ");
    let reasons: Vec<String> = set
        .rejected
        .iter()
        .map(|r| format!("{}: {}", r.entry, r.why))
        .chain(
            set.warnings
                .iter()
                .map(|w| w.strip_prefix(&prefix).unwrap_or(w).to_string()),
        )
        .collect();
    SpecError::invalid(
        origin,
        "<root>",
        match reasons.first() {
            None => "the file holds no profile entries".to_string(),
            Some(first) => format!(
                "none of its entries can be used ({} skipped or refused); the first: {first}",
                reasons.len()
            ),
        },
    )
}

/// Imports `model_memory.json` text.
pub fn import_memory(
    text: &str,
    origin: &str,
    models: &ModelCatalog,
) -> Result<ProfileSet, SpecError> {
    let root = root_object(text, origin, "cluster -> model -> {...}")?;
    let mut set = ProfileSet::new();
    for (cluster, by_model) in &root {
        let by_model = by_model.as_object().ok_or_else(|| {
            SpecError::invalid(origin, cluster.clone(), "expected an object keyed by model")
        })?;
        for (model_key, entry) in by_model {
            let field = format!("{cluster}.{model_key}");
            let Some(model) = models.get(model_key) else {
                set.warnings.push(format!(
                    "{origin}: {field}: model `{model_key}` is not in the model catalog; skipped"
                ));
                continue;
            };
            let parameters = entry
                .get("parameters")
                .and_then(Value::as_f64)
                .filter(|p| *p > 0.0)
                .ok_or_else(|| {
                    SpecError::invalid(
                        origin,
                        format!("{field}.parameters"),
                        "expected a positive number",
                    )
                })?;
            let Some(pcm) = entry
                .get("profiled_compute_memory")
                .and_then(Value::as_object)
            else {
                set.warnings.push(format!(
                    "{origin}: {field}: no profiled_compute_memory; skipped"
                ));
                continue;
            };
            for (dtype_key, list) in pcm {
                let f = format!("{field}.profiled_compute_memory.{dtype_key}");
                let Some(dtype) = NumFormat::parse(dtype_key) else {
                    set.warnings
                        .push(format!("{origin}: {f}: unknown dtype; skipped"));
                    continue;
                };
                let act = as_list(list)
                    .filter(|l| !l.is_empty() && l.iter().all(|x| x.is_finite()))
                    .ok_or_else(|| {
                        SpecError::invalid(
                            origin,
                            f.clone(),
                            "expected a non-empty list of GiB values",
                        )
                    })?;
                let sizes: Vec<u32> = (1..=act.len() as u32).collect();
                if let Some(why) = crate::physical::memory_series_problem(&sizes, &act) {
                    return Err(SpecError::invalid(origin, f.clone(), why));
                }
                set.memory.push(MemoryProfile {
                    cluster: cluster.clone(),
                    model: model.name.clone(),
                    model_key: model_key.clone(),
                    dtype,
                    parameters: parameters as u64,
                    seq_len: None,
                    act_gib: act,
                    source: Source::Imported {
                        origin: origin.to_string(),
                        entry: format!("{cluster}/{model_key}/{dtype_key}"),
                    },
                });
            }
        }
    }
    if set.memory.is_empty() {
        return Err(nothing_usable(origin, &set));
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn four_leaf_forms() {
        let full = json!([[2.0, 1.0], [4.0, 2.0], [3.0, 5.0], [6.0, 10.0]]);
        let (fr, br, f, b, flags) = parse_leaf(&full).unwrap();
        assert_eq!(fr, vec![3.0, 5.0]);
        assert_eq!(br, vec![6.0, 10.0]);
        assert_eq!(f.slope, 2.0);
        assert_eq!(b.intercept, 2.0);
        assert!(flags.is_empty(), "{flags:?}");

        let fits = json!([[2.0, 1.0], [4.0, 2.0]]);
        let (fr, _, f, _, _) = parse_leaf(&fits).unwrap();
        assert!(fr.is_empty());
        assert_eq!(f.at(3.0), 7.0);

        let legacy2 = json!([9.0, 3.0]);
        let (_, _, f, b, flags) = parse_leaf(&legacy2).unwrap();
        assert!((f.at(1.0) + b.at(1.0) - 12.0).abs() < 1e-12);
        assert!(flags[0].starts_with("legacy"));

        let legacy1 = json!(6.0);
        let (_, _, f, b, _) = parse_leaf(&legacy1).unwrap();
        assert!((f.at(2.0) - 4.0).abs() < 1e-12);
        assert!((b.at(2.0) - 8.0).abs() < 1e-12);

        assert!(parse_leaf(&json!([1, 2, 3])).is_err());
        assert!(parse_leaf(&json!("x")).is_err());
        // Zeros are placeholders, not measurements; fits must serve.
        let e = parse_leaf(&json!([[2.0, 1.0], [4.0, 2.0], [0.0, 5.0], [6.0, 10.0]])).unwrap_err();
        assert!(e.contains("forward list") && e.contains("size 1"), "{e}");
        assert!(parse_leaf(&json!([[0.0, 0.0], [0.0, 0.0]])).is_err());
        assert!(parse_leaf(&json!(0.0)).is_err());
        assert!(parse_leaf(&json!([-1.0, 3.0])).is_err());
    }

    #[test]
    fn flags_bad_data() {
        let fit = LinearFit {
            slope: 1.0,
            intercept: 0.0,
        };
        assert!(quality_flags("forward", &[1.0, 2.0, 3.0], &fit).is_empty());
        let f = quality_flags("forward", &[1.0, 5.0, 3.0], &fit);
        assert!(f.iter().any(|s| s.contains("disagrees")), "{f:?}");
        assert!(f.iter().any(|s| s.contains("non-monotonic")), "{f:?}");
        let hot: Vec<f64> = (1..=8).map(|i| (i * i) as f64).collect();
        let f = quality_flags(
            "forward",
            &hot,
            &LinearFit::least_squares(&[1., 2., 3., 4., 5., 6., 7., 8.], &hot).unwrap(),
        );
        assert!(f.iter().any(|s| s.contains("superlinear")), "{f:?}");
    }
}

#[cfg(test)]
mod shared_tests {
    use super::*;
    use crate::model::testdata;

    #[test]
    fn imports_the_reference_files() {
        let Some(lat) = testdata::reference("model_latencies.json") else {
            return;
        };
        let Some(mem) = testdata::reference("model_memory.json") else {
            return;
        };
        let (g, m) = (GpuCatalog::builtin(), ModelCatalog::builtin());
        let set = import_latencies(&lat, "model_latencies.json", g, m).unwrap();
        // 243 leaves in the file (153 full, 57 fits-only, 25 + 8 legacy).
        assert_eq!(set.blocks.len(), 243, "warnings: {:?}", set.warnings);
        let p = set
            .block_by_key("l4", "deepspeedgpt_2.7b", 512, NumFormat::Fp16)
            .unwrap();
        assert!(p.curve.batch_sizes.is_empty());
        assert!((p.curve.fwd_ms(13) - (7.415036 * 13.0 + 1.181504)).abs() < 1e-4);
        let p = set
            .block_by_key("l4", "deepspeedgpt_2.7b", 512, NumFormat::Fp32)
            .unwrap();
        assert_eq!(p.curve.fwd_ms(2), p.curve.fwd_ms[1]);
        // ViT "512" is stored with its real 577 tokens.
        assert!(set
            .blocks
            .iter()
            .any(|b| b.model_key == "deepspeedvit_e" && b.seq_len == 577));
        // The README's known problems are flagged.
        let llama33_p40 = set
            .blocks
            .iter()
            .find(|b| {
                b.model_key == "deepspeedllama_33b"
                    && b.gpu == "p40"
                    && b.dtype == NumFormat::Fp16
                    && b.seq_len == 512
            })
            .unwrap();
        assert!(
            llama33_p40
                .flags
                .iter()
                .any(|f| f.contains("non-monotonic")),
            "{:?}",
            llama33_p40.flags
        );
        assert!(
            set.warnings
                .iter()
                .any(|w| w.contains("/4096/") && w.contains("disagrees")),
            "{:#?}",
            set.warnings
        );
        assert!(set.warnings.iter().any(|w| w.contains("superlinear")));

        let mset = import_memory(&mem, "model_memory.json", m).unwrap();
        let gpt = mset
            .memory(Some("paper"), "gpt-2.7b", NumFormat::Fp16)
            .unwrap();
        assert_eq!(gpt.model_key, "deepspeedgpt_2.7b");
        assert_eq!(gpt.parameters, 2770621440);
        assert!(mset
            .memory(Some("nope"), "gpt-2.7b", NumFormat::Fp16)
            .is_none());
    }

    #[test]
    fn malformed_files_are_errors_with_origin() {
        let (g, m) = (GpuCatalog::builtin(), ModelCatalog::builtin());
        let e = import_latencies("{", "lat.json", g, m)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("lat.json"), "{e}");
        let e = import_latencies("[1]", "lat.json", g, m)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected an object"), "{e}");
        let e = import_memory(
            r#"{"paper": {"deepspeedgpt_2.7b": {"parameters": -1}}}"#,
            "mem.json",
            m,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("paper.deepspeedgpt_2.7b.parameters"), "{e}");
        // Unknown names and malformed leaves are warnings (and a malformed
        // leaf is refused where a run needs it), not failures...
        let s = import_latencies(
            r#"{"nomodel": {}, "deepspeedgpt_2.7b": {"k80": {}, "l4": {"512": {"float16": "x", "float32": [3.0, 1.0]}}}}"#,
            "lat.json",
            g,
            m,
        )
        .unwrap();
        assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
        assert_eq!(s.rejected.len(), 1);
        // ...unless no entry of the file can be used: then the file is an
        // error that says how many and the first reason.
        let e = import_latencies(
            r#"{"nomodel": {}, "deepspeedgpt_2.7b": {"l4": {"512": {"float16": [[0, 0], [0, 0], [0, 0], [0, 0]]}}}}"#,
            "lat.json",
            g,
            m,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("lat.json")
                && e.contains("none of its entries")
                && e.contains("deepspeedgpt_2.7b/l4/512/float16"),
            "{e}"
        );
        assert!(import_latencies("{}", "lat.json", g, m).is_err());
        // bf16 measured on a GPU without bf16 units is refused, naming the entry.
        let e = import_latencies(
            r#"{"deepspeedgpt_2.7b": {"t4": {"512": {"bfloat16": [3.0, 1.0]}}}}"#,
            "lat.json",
            g,
            m,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("deepspeedgpt_2.7b/t4/512/bfloat16") && e.contains("bf16"),
            "{e}"
        );
    }
}
