//! `cephalo experiment list | run NAME | run --all | merge NAME`: studies
//! one command away. Specs are `experiments/*.toml`
//! ([`sim::experiment::ExperimentSpec`]); `run` validates every spec it
//! runs (and reads every cluster file) before any work, runs the sweep on
//! the library in parallel with a progress bar on stderr, and writes
//! `results/NAME/` (`results.csv`, `gpus.csv`, `timeline.csv`, the figures
//! as PNG and SVG, the exact `spec.toml` and `version.txt`) and
//! `results/REPORT.md` over every experiment with results. `--shard K/N`
//! runs one part into `results/NAME/shard-K-of-N/`; `merge NAME` joins the
//! parts into what one run writes.

use crate::error::UserError;
use crate::load;
use crate::out;
use anyhow::Result;
use sim::experiment::{
    ClusterText, ExperimentSpec, GpuRow, Inputs, ProfilesUse, ResultRow, Results, SpanRow, Study,
    ValidationPoint,
};
use sim::profile::ProfileSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `cephalo experiment ...`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

/// What to do.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// List the experiments (name, workloads x planners, title).
    List(Dirs),
    /// Run one experiment (or every one with --all).
    Run(RunArgs),
    /// Join the shards of an experiment into its results, figures and report.
    Merge(MergeArgs),
}

/// Where specs and results live.
#[derive(Debug, clap::Args)]
pub struct Dirs {
    /// Directory of experiment specs (`*.toml`; cluster files relative to it).
    #[arg(long, default_value = "experiments")]
    pub dir: PathBuf,
    /// Directory of results.
    #[arg(long, default_value = "results")]
    pub results: PathBuf,
}

/// `experiment run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Experiment name (a spec `experiments/NAME.toml`).
    pub name: Option<String>,
    /// Run every experiment.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub dirs: Dirs,
    /// Reference profiles directory (default: `../shared/reference-profiles`
    /// when present; without them reference experiments run on the
    /// calibrated model, and the report says so).
    #[arg(long)]
    pub profiles: Option<PathBuf>,
    /// Run part K of N (`2/4`): workloads whose index is K-1 modulo N;
    /// `auto` takes K and N from a Slurm job array or a Kubernetes
    /// Indexed Job (README: "Sweeps beyond one machine").
    #[arg(long)]
    pub shard: Option<String>,
}

/// `experiment merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Experiment name.
    pub name: String,
    #[command(flatten)]
    pub dirs: Dirs,
    /// Profiles used by the shards (for the report's provenance line).
    #[arg(long)]
    pub profiles: Option<PathBuf>,
}

/// Runs the subcommand.
pub fn run(a: Args) -> Result<ExitCode> {
    match a.action {
        Action::List(d) => list(&d),
        Action::Run(r) => run_experiments(&r),
        Action::Merge(m) => merge(&m),
    }
}

/// A spec with its file text, its clusters' texts and its measurements.
struct Loaded {
    spec: ExperimentSpec,
    text: String,
    clusters: Vec<ClusterText>,
    validation: Vec<ValidationPoint>,
}

fn spec_names(dir: &Path) -> Result<Vec<String>> {
    let mut v = Vec::new();
    let rd = std::fs::read_dir(dir)
        .map_err(|e| UserError(format!("{}: cannot list experiments: {e}", dir.display())))?;
    for e in rd {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "toml") {
            if let Some(s) = p.file_stem().and_then(|s| s.to_str()) {
                v.push(s.to_string());
            }
        }
    }
    v.sort();
    Ok(v)
}

/// A study given by name (in `dir`) or as the path of its spec
/// (`my/study.toml`): the directory its relative paths start from and its
/// name.
fn spec_location(dir: &Path, name: &str) -> (PathBuf, String) {
    let p = Path::new(name);
    if p.extension().is_some_and(|e| e == "toml") {
        let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
        let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned());
        if let Some(stem) = stem {
            return (
                parent.map_or_else(|| PathBuf::from("."), Path::to_path_buf),
                stem,
            );
        }
    }
    (dir.to_path_buf(), name.to_string())
}

fn load_spec(dir: &Path, name: &str) -> Result<Loaded> {
    let (dir, name) = spec_location(dir, name);
    let (dir, name) = (dir.as_path(), name.as_str());
    let path = dir.join(format!("{name}.toml"));
    if !path.is_file() {
        let known = spec_names(dir).unwrap_or_default();
        return Err(UserError(format!(
            "experiment `{name}`: no spec {} (known: {})",
            path.display(),
            known.join(", ")
        ))
        .into());
    }
    let text = load::read_text(&path)?;
    let origin = path.display().to_string();
    let mut spec = ExperimentSpec::from_toml(&text, &origin)?;
    if spec.name != name {
        return Err(UserError(format!(
            "{origin}: field `name`: expected `{name}` (the file's name), got `{}`",
            spec.name
        ))
        .into());
    }
    let mut clusters = Vec::new();
    for (i, c) in spec.sweep.clusters.iter().enumerate() {
        let p = dir.join(c);
        let t = std::fs::read_to_string(&p).map_err(|e| {
            UserError(format!(
                "{origin}: field `sweep.clusters[{i}]`: cannot read {}: {e}",
                p.display()
            ))
        })?;
        // The cluster must parse (unknown GPUs, bad links) before any work.
        sim::cluster::Cluster::from_toml(
            &t,
            &p.display().to_string(),
            sim::gpu::GpuCatalog::builtin(),
        )?;
        clusters.push(ClusterText {
            name: c.clone(),
            text: t,
        });
    }
    if let Some(c) = &spec.sweep.cases {
        let p = dir.join(c);
        let t = std::fs::read_to_string(&p).map_err(|e| {
            UserError(format!(
                "{origin}: field `sweep.cases`: cannot read {}: {e}",
                p.display()
            ))
        })?;
        // Every case is checked here, before any work (file and line named).
        sim::experiment::parse_cases(&t, &p.display().to_string())?;
        spec.sweep.cases_text = Some(t);
    }
    for (i, entry) in spec.sweep.comm_profiles.iter().enumerate() {
        spec.sweep.comm_sets.push(
            read_comm_entry(dir, entry).map_err(|e| {
                UserError(format!("{origin}: field `sweep.comm_profiles[{i}]`: {e}"))
            })?,
        );
    }
    // Every workload's variant must build too (a replicated or edited cluster).
    for w in spec.workloads(&clusters)? {
        sim::experiment::cluster_of(&w)?;
    }
    let mut validation = Vec::new();
    for (i, v) in spec.validations.iter().enumerate() {
        let p = dir.join(v);
        let t = std::fs::read_to_string(&p).map_err(|e| {
            UserError(format!(
                "{origin}: field `validations[{i}]`: cannot read {}: {e}",
                p.display()
            ))
        })?;
        let run = p
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(v)
            .to_string();
        validation.extend(ValidationPoint::from_json(&t, &run)?);
    }
    Ok(Loaded {
        spec,
        text,
        clusters,
        validation,
    })
}

/// The measured collectives of one `comm_profiles` entry: its
/// `--comm-profile` values (`[KIND=]PATH`, separated by spaces), paths
/// relative to the experiments directory `dir`.
fn read_comm_entry(dir: &Path, entry: &str) -> Result<ProfileSet> {
    let mut set = ProfileSet::new();
    for spec in entry.split_whitespace() {
        set.merge(load::load_comm_profile_in(dir, spec)?);
    }
    Ok(set)
}

fn list(d: &Dirs) -> Result<ExitCode> {
    let mut s = String::new();
    for n in spec_names(&d.dir)? {
        let l = load_spec(&d.dir, &n)?;
        let w = l.spec.workloads(&l.clusters)?.len();
        // A study of measurements simulates nothing: it lists its runs.
        let size = if w == 0 && !l.validation.is_empty() {
            format!("{:>5} measured runs{:10}", l.validation.len(), "")
        } else {
            format!(
                "{w:>5} workloads x {:>2} planners",
                l.spec.planner_names().len()
            )
        };
        s.push_str(&format!("{n:<24} {size}  {}\n", l.spec.title));
    }
    out::emit(&s)?;
    Ok(ExitCode::SUCCESS)
}

/// The reference profiles, if any: `--profiles`, else `../shared/reference-profiles`.
fn reference(profiles: Option<&Path>) -> Result<Option<(ProfileSet, String)>> {
    let dir = match profiles {
        Some(p) => p.to_path_buf(),
        None => {
            let d = PathBuf::from("../shared/reference-profiles");
            if !d.join("model_latencies.json").is_file() {
                return Ok(None);
            }
            d
        }
    };
    Ok(Some((
        load::load_profiles(&dir)?,
        dir.display().to_string(),
    )))
}

/// `--shard auto`: K/N of this task of a Slurm job array
/// (`SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_COUNT`, with the array's
/// `SLURM_ARRAY_TASK_MIN` and `SLURM_ARRAY_TASK_STEP` when set: `--array
/// 1-8` and `--array 0-14:2` both number their tasks 1..=8) or of a
/// Kubernetes Indexed Job (`JOB_COMPLETION_INDEX`, 0-based, and
/// `JOB_COMPLETIONS`, which the manifest sets to the Job's `completions`:
/// Kubernetes itself passes only the index). `var` reads a variable.
fn shard_from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<(usize, usize)> {
    let num = |name: &str| -> Result<Option<i64>> {
        match var(name) {
            None => Ok(None),
            Some(v) => v.trim().parse::<i64>().map(Some).map_err(|_| {
                UserError(format!(
                    "--shard auto: {name} is `{v}`, expected a whole number"
                ))
                .into()
            }),
        }
    };
    let (k0, n, from) = if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
        let n = num("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
            UserError(
                "--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not".into(),
            )
        })?;
        let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let step = num("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
        if (id - min) % step != 0 {
            return Err(UserError(format!(
                "--shard auto: SLURM_ARRAY_TASK_ID {id} is not on the array's steps ({min} + k x {step})"
            ))
            .into());
        }
        (
            (id - min) / step,
            n,
            "SLURM_ARRAY_TASK_ID / SLURM_ARRAY_TASK_COUNT",
        )
    } else if let Some(idx) = num("JOB_COMPLETION_INDEX")? {
        let n = num("JOB_COMPLETIONS")?.ok_or_else(|| {
            UserError("--shard auto: JOB_COMPLETION_INDEX is set but JOB_COMPLETIONS is not (set it to the Job's completions in the manifest)".into())
        })?;
        (idx, n, "JOB_COMPLETION_INDEX / JOB_COMPLETIONS")
    } else {
        return Err(UserError(
            "--shard auto: expected a Slurm job array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX, JOB_COMPLETIONS); neither is set".into(),
        )
        .into());
    };
    if n < 1 || k0 < 0 || k0 >= n {
        return Err(UserError(format!(
            "--shard auto: {from} give task {} of {n}, expected 1 <= task <= count",
            k0 + 1
        ))
        .into());
    }
    Ok((k0 as usize + 1, n as usize))
}

fn parse_shard(s: &str) -> Result<(usize, usize)> {
    if s.trim() == "auto" {
        return shard_from_env(&|name| std::env::var(name).ok());
    }
    let bad = || {
        UserError(format!(
            "--shard: expected K/N with 1 <= K <= N, or auto, got `{s}`"
        ))
    };
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (
        k.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || k == 0 || k > n {
        return Err(bad().into());
    }
    Ok((k, n))
}

fn run_experiments(a: &RunArgs) -> Result<ExitCode> {
    let names = match (&a.name, a.all) {
        (Some(n), false) => vec![n.clone()],
        (None, true) => spec_names(&a.dirs.dir)?,
        _ => {
            return Err(UserError("experiment run: give a NAME or --all (not both)".into()).into())
        }
    };
    let shard = a.shard.as_deref().map(parse_shard).transpose()?;
    // Validate everything before any work.
    let loaded: Vec<Loaded> = names
        .iter()
        .map(|n| load_spec(&a.dirs.dir, n))
        .collect::<Result<_>>()?;
    let reference = reference(a.profiles.as_deref())?;
    let predictor = load::calibration(None)?;
    out::prepare_dir(&a.dirs.results, "the results (--results)")?;
    out::check_writable(&a.dirs.results.join("REPORT.md"), "the report")?;
    for l in &loaded {
        let (profiles, used, spec) = inputs_for(&l.spec, reference.as_ref());
        let workloads = spec.workloads(&l.clusters)?;
        let dir = match shard {
            Some((k, n)) => a
                .dirs
                .results
                .join(&spec.name)
                .join(format!("shard-{k}-of-{n}")),
            None => a.dirs.results.join(&spec.name),
        };
        out::prepare_dir(&dir, "the results (--results)")?;
        let todo = workloads
            .iter()
            .filter(|w| shard.is_none_or(|(k, n)| w.index % n == k - 1))
            .count();
        let bar = crate::cli::progress::bar(todo as u64, &spec.name, "workloads");
        let tick = || bar.inc(1);
        let empty = ProfileSet::new();
        let inputs = Inputs {
            profiles: profiles.unwrap_or(&empty),
            predictor: &predictor,
        };
        let mut res = sim::experiment::run(&spec, &workloads, inputs, shard, &tick)?;
        if shard.is_none_or(|(k, _)| k == 1) {
            res.validation = l.validation.clone();
        }
        bar.finish_and_clear();
        write_results(&dir, &res)?;
        if shard.is_none() {
            finish(&a.dirs, l, &spec, &res, &used)?;
        } else {
            out::write_text(
                &dir.join("profiles.txt"),
                &format!("{used}\n"),
                "provenance",
            )?;
        }
        eprintln!(
            "experiment {}: {} workloads -> {}",
            spec.name,
            todo,
            dir.display()
        );
    }
    if shard.is_none() {
        write_report(&a.dirs)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The profiles an experiment runs on, the provenance line, and the spec
/// as run (a reference experiment without reference profiles runs on the
/// calibrated model, without its memory cluster).
fn inputs_for<'a>(
    spec: &ExperimentSpec,
    reference: Option<&'a (ProfileSet, String)>,
) -> (Option<&'a ProfileSet>, String, ExperimentSpec) {
    let calibrated = "the calibrated analytic model (profiles/calibration.json)".to_string();
    match (spec.profiles, reference) {
        (ProfilesUse::Reference, Some((p, dir))) => (
            Some(p),
            format!(
                "reference measurements ({dir}{}), the calibrated model for what they lack",
                spec.memory_cluster
                    .as_ref()
                    .map_or(String::new(), |m| format!(", memory cluster `{m}`"))
            ),
            spec.clone(),
        ),
        (ProfilesUse::Reference, None) => {
            let mut s = spec.clone();
            s.memory_cluster = None;
            (
                None,
                format!("{calibrated}: reference profiles not found (pass --profiles)"),
                s,
            )
        }
        (ProfilesUse::Calibrated, _) => (None, calibrated, spec.clone()),
    }
}

fn read_csv<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let mut r = csv::Reader::from_path(path)
        .map_err(|e| UserError(format!("{}: cannot read: {e}", path.display())))?;
    let mut v = Vec::new();
    for (i, row) in r.deserialize().enumerate() {
        v.push(row.map_err(|e| UserError(format!("{}: row {}: {e}", path.display(), i + 1)))?);
    }
    Ok(v)
}

fn write_results(dir: &Path, r: &Results) -> Result<()> {
    out::write_text(
        &dir.join("results.csv"),
        &crate::cli::format::csv_of(&r.rows)?,
        "results",
    )?;
    out::write_text(
        &dir.join("gpus.csv"),
        &crate::cli::format::csv_of(&r.gpus)?,
        "per-GPU results",
    )?;
    if !r.spans.is_empty() {
        out::write_text(
            &dir.join("timeline.csv"),
            &crate::cli::format::csv_of(&r.spans)?,
            "timelines",
        )?;
    }
    if !r.validation.is_empty() {
        out::write_text(
            &dir.join("validation.csv"),
            &crate::cli::format::csv_of(&r.validation)?,
            "measurements",
        )?;
    }
    Ok(())
}

fn read_results(dir: &Path) -> Result<Results> {
    Ok(Results {
        rows: read_csv::<ResultRow>(&dir.join("results.csv"))?,
        gpus: read_csv::<GpuRow>(&dir.join("gpus.csv"))?,
        spans: read_csv::<SpanRow>(&dir.join("timeline.csv"))?,
        validation: read_csv::<ValidationPoint>(&dir.join("validation.csv"))?,
    })
}

/// Figures, the exact spec, the version and the provenance of a finished run.
fn finish(d: &Dirs, l: &Loaded, spec: &ExperimentSpec, res: &Results, used: &str) -> Result<()> {
    let dir = d.results.join(&spec.name);
    let drawn = plots::experiment::draw_all(spec, res, &dir)
        .map_err(|e| anyhow::anyhow!("{}: drawing the figures: {e}", dir.display()))?;
    for file in drawn.iter().flat_map(|d| &d.files) {
        out::write_file(&file.path, &file.bytes, "a figure")?;
    }
    out::write_text(&dir.join("spec.toml"), &l.text, "the spec")?;
    out::write_text(
        &dir.join("version.txt"),
        &format!("cephalo {}\n", env!("CARGO_PKG_VERSION")),
        "the version",
    )?;
    out::write_text(
        &dir.join("profiles.txt"),
        &format!("{used}\n"),
        "provenance",
    )?;
    Ok(())
}

/// The `(K, N)` of a `shard-K-of-N` directory name.
fn shard_of(name: &str) -> Option<(usize, usize)> {
    let rest = name.strip_prefix("shard-")?;
    let (k, n) = rest.split_once("-of-")?;
    Some((k.parse().ok()?, n.parse().ok()?))
}

/// Refuses shards of different splits, and names every missing shard with
/// the command that makes it.
fn check_shards(dir: &Path, name: &str, shards: &[PathBuf]) -> Result<()> {
    let parsed: Vec<(usize, usize)> = shards
        .iter()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).and_then(shard_of))
        .collect();
    let mut splits: Vec<usize> = parsed.iter().map(|&(_, n)| n).collect();
    splits.sort_unstable();
    splits.dedup();
    if splits.len() != 1 {
        return Err(UserError(format!(
            "{}: shards of different splits ({}): remove the stale ones",
            dir.display(),
            splits
                .iter()
                .map(|n| format!("of {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into());
    }
    let n = splits[0];
    let missing: Vec<usize> = (1..=n).filter(|k| !parsed.contains(&(*k, n))).collect();
    if !missing.is_empty() {
        return Err(UserError(format!(
            "{}: missing {}: run {}",
            dir.display(),
            missing
                .iter()
                .map(|k| format!("shard-{k}-of-{n}"))
                .collect::<Vec<_>>()
                .join(", "),
            missing
                .iter()
                .map(|k| format!("`cephalo experiment run {name} --shard {k}/{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .into());
    }
    Ok(())
}

fn merge(m: &MergeArgs) -> Result<ExitCode> {
    let l = load_spec(&m.dirs.dir, &m.name)?;
    let dir = m.dirs.results.join(&l.spec.name);
    let mut parts = Vec::new();
    let mut used = String::new();
    let mut shards: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| UserError(format!("{}: no shards to merge: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("shard-"))
        })
        .collect();
    shards.sort();
    if shards.is_empty() {
        return Err(UserError(format!(
            "{}: no shard-K-of-N directories to merge",
            dir.display()
        ))
        .into());
    }
    check_shards(&dir, &l.spec.name, &shards)?;
    for s in &shards {
        parts.push(read_results(s)?);
        if used.is_empty() {
            used = std::fs::read_to_string(s.join("profiles.txt"))
                .unwrap_or_default()
                .trim()
                .to_string();
        }
    }
    let res = Results::merge(parts);
    let want = l.spec.workloads(&l.clusters)?.len() * l.spec.planner_names().len();
    if res.rows.len() != want {
        return Err(UserError(format!(
            "{}: the shards hold {} of the {want} rows (a shard is missing)",
            dir.display(),
            res.rows.len()
        ))
        .into());
    }
    let reference = reference(m.profiles.as_deref()).ok().flatten();
    let (_, fallback_used, spec) = inputs_for(&l.spec, reference.as_ref());
    if used.is_empty() {
        used = fallback_used;
    }
    write_results(&dir, &res)?;
    finish(&m.dirs, &l, &spec, &res, &used)?;
    write_report(&m.dirs)?;
    eprintln!(
        "experiment {}: merged {} shards -> {}",
        m.name,
        shards.len(),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `results/REPORT.md` over every experiment with results (the text is
/// `sim::experiment::full_report`'s).
fn write_report(d: &Dirs) -> Result<()> {
    // Each spec read once, studies in report order.
    let mut specs: Vec<(u32, String, Loaded)> = Vec::new();
    for n in spec_names(&d.dir)? {
        if d.results.join(&n).join("results.csv").is_file() {
            let l = load_spec(&d.dir, &n)?;
            specs.push((l.spec.order, n, l));
        }
    }
    specs.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let mut read = Vec::new();
    for (_, n, l) in specs {
        let dir = d.results.join(&n);
        let res = read_results(&dir)?;
        let used = std::fs::read_to_string(dir.join("profiles.txt")).unwrap_or_default();
        read.push((n, l.spec, res, used));
    }
    let studies: Vec<Study> = read
        .iter()
        .map(|(name, spec, results, used)| Study {
            name,
            spec,
            results,
            profiles_used: used.trim(),
        })
        .collect();
    let s = sim::experiment::full_report(&studies);
    out::write_text(&d.results.join("REPORT.md"), &s, "the report")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    /// `--shard auto` under a Slurm array (0-based, 1-based and stepped)
    /// and a Kubernetes Indexed Job, and the errors when neither is set or
    /// a value is out of range.
    #[test]
    fn shard_auto_reads_slurm_and_kubernetes() {
        let ok = |vars: &[(&str, &str)]| shard_from_env(&env(vars)).unwrap();
        let slurm0 = [
            ("SLURM_ARRAY_TASK_ID", "0"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
        ];
        assert_eq!(ok(&slurm0), (1, 4));
        let slurm1 = [
            ("SLURM_ARRAY_TASK_ID", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ];
        assert_eq!(ok(&slurm1), (4, 4));
        let stepped = [
            ("SLURM_ARRAY_TASK_ID", "6"),
            ("SLURM_ARRAY_TASK_COUNT", "8"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ];
        assert_eq!(ok(&stepped), (4, 8));
        let k8s = [("JOB_COMPLETION_INDEX", "2"), ("JOB_COMPLETIONS", "3")];
        assert_eq!(ok(&k8s), (3, 3));
        let err = |vars: &[(&str, &str)]| shard_from_env(&env(vars)).unwrap_err().to_string();
        assert!(err(&[]).contains("neither is set"));
        assert!(
            err(&[("JOB_COMPLETION_INDEX", "3"), ("JOB_COMPLETIONS", "3")]).contains("task 4 of 3")
        );
        assert!(err(&[("JOB_COMPLETION_INDEX", "1")]).contains("JOB_COMPLETIONS is not"));
        assert!(err(&[
            ("SLURM_ARRAY_TASK_ID", "x"),
            ("SLURM_ARRAY_TASK_COUNT", "2")
        ])
        .contains("SLURM_ARRAY_TASK_ID is `x`"));
        assert!(err(&[
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_STEP", "2")
        ])
        .contains("steps"));
        assert_eq!(parse_shard("2/5").unwrap(), (2, 5));
        assert!(parse_shard("0/5").is_err());
    }
}
