//! `cephalo calibrate`: fits the performance model's coefficients to measured
//! profiles, writes them (`profiles/calibration.json` by default) and a
//! cross-validation report (JSON with every point, Markdown tables, and
//! predicted-vs-measured scatter figures in PNG and SVG).

use crate::error::UserError;
use crate::load;
use anyhow::Result;
use clap::Args as ClapArgs;
use sim::perfmodel::calibrate::{
    dataset, CvMode, CvReport, ErrorStats, GroupErrors, HOLDOUT_BATCHES,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Flags of `cephalo calibrate`.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Directory (or file) of measured profiles: the reference JSON
    /// (`model_latencies.json`, `model_memory.json`) or cephalo-profile/1 files.
    #[arg(long, default_value = "../shared/reference-profiles")]
    pub reference: PathBuf,
    /// Where to write the fitted coefficients (to replace the shipped
    /// `profiles/calibration.json`, name it and add `--force`).
    #[arg(long, default_value = "target/calibration.json")]
    pub out: PathBuf,
    /// Replace an existing `--out` file.
    #[arg(long)]
    pub force: bool,
    /// Directory for the cross-validation report and figures
    /// (cv_report.json, cv_report.md, cv_*.png/svg).
    #[arg(long, default_value = "target/calibration-report")]
    pub report_dir: PathBuf,
    /// Skip the figures (report tables and JSON only).
    #[arg(long)]
    pub no_figures: bool,
}

fn stats_cells(s: &ErrorStats) -> String {
    format!(
        "{:.1} | {:.1} | {}",
        s.median_ape_pct, s.p90_ape_pct, s.points
    )
}

fn group_table(
    out: &mut String,
    title: &str,
    a: &[GroupErrors],
    b: &[GroupErrors],
    la: &str,
    lb: &str,
) {
    let _ = writeln!(out, "\n### {title}\n");
    let _ = writeln!(
        out,
        "| {title} | {la} median % | {la} p90 % | points | {lb} median % | {lb} p90 % | points |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    let mut names: Vec<&str> = a.iter().chain(b).map(|g| g.group.as_str()).collect();
    names.sort();
    names.dedup();
    for n in names {
        let cell = |v: &[GroupErrors]| {
            v.iter()
                .find(|g| g.group == n)
                .map(|g| stats_cells(&g.stats))
                .unwrap_or_else(|| "- | - | 0".into())
        };
        let _ = writeln!(out, "| {n} | {} | {} |", cell(a), cell(b));
    }
}

/// The report as Markdown tables (no measured values, only error statistics).
pub fn markdown(report: &CvReport, reference: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Calibration cross-validation\n");
    let _ = writeln!(
        s,
        "Data: `{reference}`. Error = |predicted / measured - 1| of forward+backward ms of one block, per (gpu, model, seq, dtype, micro-batch) point; nearest-rank percentiles.\n"
    );
    let _ = writeln!(s, "| mode | median % | p90 % | points |");
    let _ = writeln!(s, "|---|---:|---:|---:|");
    for m in [
        &report.time_in_sample,
        &report.time_leave_one_gpu_out,
        &report.time_leave_one_model_out,
    ] {
        let _ = writeln!(s, "| time, {} | {} |", m.mode, stats_cells(&m.overall));
    }
    for m in [&report.memory_in_sample, &report.memory_leave_one_model_out] {
        let _ = writeln!(
            s,
            "| activation memory, {} | {} |",
            m.mode,
            stats_cells(&m.overall)
        );
    }
    let (g, m): (&CvMode, &CvMode) = (
        &report.time_leave_one_gpu_out,
        &report.time_leave_one_model_out,
    );
    group_table(&mut s, "GPU", &g.per_gpu, &m.per_gpu, "LOGO", "LOMO");
    group_table(&mut s, "model", &g.per_model, &m.per_model, "LOGO", "LOMO");
    group_table(
        &mut s,
        "memory model",
        &report.memory_in_sample.per_model,
        &report.memory_leave_one_model_out.per_model,
        "in-sample",
        "LOMO",
    );
    let h = &report.time_fit_only_holdout;
    let _ = writeln!(s, "\n### Hold-out: fit-only entries\n");
    let _ = writeln!(
        s,
        "Entries with linear fits but no measured points are never fitted. Here the in-sample calibration predicts them at micro-batch {} and is compared with their own fit lines (fwd+bwd). Among them are GPU types with no measured points at all (e.g. the RTX 3090).\n",
        HOLDOUT_BATCHES.map(|b| b.to_string()).join(", ")
    );
    let _ = writeln!(s, "| GPU | median % | p90 % | points |");
    let _ = writeln!(s, "|---|---:|---:|---:|");
    for g in &h.per_gpu {
        let _ = writeln!(s, "| {} | {} |", g.group, stats_cells(&g.stats));
    }
    let _ = writeln!(s, "| all | {} |", stats_cells(&h.overall));
    let _ = writeln!(
        s,
        "\n### Coefficients not fitted ({})\n",
        report.pinned.len()
    );
    let _ = writeln!(
        s,
        "Fixed by a published measurement or pinned to the physical per-op count where the data cannot identify them (the fit refuses them):\n"
    );
    for p in &report.pinned {
        let _ = writeln!(s, "- `{}` = {}: {}", p.coefficient, p.value, p.why);
    }
    let _ = writeln!(s, "\n### Excluded entries ({})\n", report.excluded.len());
    for e in &report.excluded {
        let _ = writeln!(s, "- `{}`: {}", e.entry, e.reason);
    }
    s
}

/// The cross-validation figures, rendered (meant for `dir`).
fn figures(report: &CvReport, dir: &Path) -> Result<Vec<plots::render::Rendered>> {
    let mut written = Vec::new();
    for (mode, name, title) in [
        (
            &report.time_leave_one_gpu_out,
            "cv_leave_one_gpu_out",
            "Leave-one-GPU-out: fwd+bwd ms per block",
        ),
        (
            &report.time_leave_one_model_out,
            "cv_leave_one_model_out",
            "Leave-one-model-out: fwd+bwd ms per block",
        ),
    ] {
        let pts: Vec<plots::scatter::ScatterPoint> = mode
            .points
            .iter()
            .map(|p| plots::scatter::ScatterPoint {
                measured: p.measured_ms,
                predicted: p.predicted_ms,
                group: p.gpu.clone(),
            })
            .collect();
        let spec = plots::scatter::ScatterSpec {
            title: title.to_string(),
            x_label: "measured ms".into(),
            y_label: "predicted ms".into(),
            band: 0.25,
        };
        let base = dir.join(name);
        written.extend(
            plots::scatter::render(&pts, &spec, &base)
                .map_err(|e| anyhow::anyhow!("{}: {e}", base.display()))?,
        );
    }
    let pts: Vec<plots::scatter::ScatterPoint> = report
        .memory_leave_one_model_out
        .points
        .iter()
        .map(|p| plots::scatter::ScatterPoint {
            measured: p.measured_gib,
            predicted: p.predicted_gib,
            group: p.model.clone(),
        })
        .collect();
    let spec = plots::scatter::ScatterSpec {
        title: "Leave-one-model-out: non-state memory".into(),
        x_label: "measured GiB".into(),
        y_label: "predicted GiB".into(),
        band: 0.15,
    };
    let base = dir.join("cv_memory_leave_one_model_out");
    written.extend(
        plots::scatter::render(&pts, &spec, &base)
            .map_err(|e| anyhow::anyhow!("{}: {e}", base.display()))?,
    );
    Ok(written)
}

/// Runs `cephalo calibrate`.
pub fn run(a: Args) -> Result<ExitCode> {
    // Every output is checked before the fit: a path that cannot be
    // written is exit 2 at once, not after the work.
    const OUT: &str = "the calibration (--out)";
    const REPORT: &str = "the cross-validation report (--report-dir)";
    if crate::out::replaces_existing_file(&a.out, OUT)? && !a.force {
        return Err(UserError(format!(
            "--out: {} exists; add --force to replace it (the shipped calibration is profiles/calibration.json)",
            a.out.display()
        ))
        .into());
    }
    // The default `target/calibration.json` may be run before any build.
    if let Some(dir) = a
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        crate::out::prepare_dir(dir, OUT)?;
    }
    crate::out::check_writable(&a.out, OUT)?;
    crate::out::prepare_dir(&a.report_dir, REPORT)?;
    let (md_path, json_path) = (
        a.report_dir.join("cv_report.md"),
        a.report_dir.join("cv_report.json"),
    );
    crate::out::check_writable(&md_path, REPORT)?;
    crate::out::check_writable(&json_path, REPORT)?;
    if !a.reference.exists() {
        return Err(UserError(format!(
            "--reference: {}: no such file or directory",
            a.reference.display()
        ))
        .into());
    }
    let set = load::load_profiles(&a.reference)?;
    if let Some(r) = set.rejected.first() {
        return Err(UserError(format!(
            "--reference: {}: entry {}: {} (a calibration is fitted to every entry: fix or remove it)",
            r.origin, r.entry, r.why
        ))
        .into());
    }
    let ds = dataset(&set, crate::load::gpus(), crate::load::models());
    if ds.time.is_empty() {
        return Err(UserError(format!(
            "--reference: {}: no usable timing entries (need raw per-batch lists)",
            a.reference.display()
        ))
        .into());
    }
    if ds.memory.is_empty() {
        return Err(UserError(format!(
            "--reference: {}: no memory profiles (model_memory.json)",
            a.reference.display()
        ))
        .into());
    }
    let label = a.reference.display().to_string();
    let bar = crate::cli::progress::bar(
        sim::perfmodel::calibrate::fits_needed(&ds) as u64,
        "calibrate",
        "fits",
    );
    let run = sim::perfmodel::calibrate::calibrate_observed(&ds, &label, &|| bar.inc(1));
    bar.finish_and_clear();
    crate::out::write_text(
        &a.out,
        &(serde_json::to_string_pretty(&run.calibration)? + "\n"),
        OUT,
    )?;
    let md = markdown(&run.report, &label);
    crate::out::write_text(&md_path, &md, REPORT)?;
    crate::out::write_text(
        &json_path,
        &(serde_json::to_string_pretty(&run.report)? + "\n"),
        REPORT,
    )?;
    out!("{md}");
    outln!("\nwrote {}", a.out.display());
    outln!(
        "wrote {}/cv_report.md, cv_report.json",
        a.report_dir.display()
    );
    if !a.no_figures {
        for f in figures(&run.report, &a.report_dir)? {
            crate::out::write_file(&f.path, &f.bytes, REPORT)?;
            outln!("wrote {}", f.path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
