//! The report text of a study: its section of `results/REPORT.md` (what
//! it asks, which profiles it ran on, every figure with its key numbers,
//! Cephalo's speed-ups, prices, the cheapest cluster reaching a target,
//! the workloads without a plan) and the speed-up ranges over studies.

use super::figure::FigureSpec;
use super::results::Results;
use super::rows::ResultRow;
use super::spec::ExperimentSpec;
use crate::planner::registry::{self, Family};
use std::fmt::Write as _;

/// A figure as the report embeds it.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureRef {
    /// Path relative to the report (`NAME/fig1.png`).
    pub path: String,
    /// Caption.
    pub caption: String,
    /// Its spec.
    pub spec: FigureSpec,
}

/// Whether `planner` is a data-parallel baseline (the paper's comparison
/// family: [`registry::data_parallel_baselines`]).
pub fn is_data_parallel_baseline(planner: &str) -> bool {
    registry::data_parallel_baselines().contains(&planner)
}

/// Whether `planner` makes pipeline plans ([`Family::Pipeline`]).
pub fn is_pipeline(planner: &str) -> bool {
    registry::entry(planner).is_some_and(|e| e.family == Family::Pipeline)
}

/// Cephalo's speed-up over every planner `against` accepts that fits, over
/// the rows of `results`: (smallest, largest, the pair behind each as text).
pub fn speedup_range(
    results: &[&Results],
    against: &dyn Fn(&str) -> bool,
) -> Option<(f64, f64, String, String)> {
    let mut best: Option<(f64, f64, String, String)> = None;
    let native = registry::native_name();
    for res in results {
        for ours in res.rows.iter().filter(|r| r.planner == native) {
            let Some(a) = ours.samples_per_s else {
                continue;
            };
            for other in res
                .rows
                .iter()
                .filter(|r| r.case == ours.case && against(&r.planner))
            {
                let Some(b) = other.samples_per_s.filter(|&b| b > 0.0) else {
                    continue;
                };
                let x = a / b;
                let what = format!(
                    "{} on {} (batch {}) against {}",
                    ours.model, ours.cluster, ours.global_batch, other.planner
                );
                best = Some(match best {
                    None => (x, x, what.clone(), what),
                    Some((lo, hi, wl, wh)) => {
                        let (lo, wl) = if x < lo { (x, what.clone()) } else { (lo, wl) };
                        let (hi, wh) = if x > hi { (x, what) } else { (hi, wh) };
                        (lo, hi, wl, wh)
                    }
                });
            }
        }
    }
    best
}

/// One study with results, as the full report reads it.
#[derive(Debug, Clone, Copy)]
pub struct Study<'a> {
    /// Its name (the spec file's and the results directory's).
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a ExperimentSpec,
    /// Its results.
    pub results: &'a Results,
    /// Which profiles it ran on (its `profiles.txt`).
    pub profiles_used: &'a str,
}

/// The figures of the study `name` as the report embeds them:
/// `NAME/FILE.png` (`figK` where the spec names no file), captioned by
/// the figure's title or else the study's.
pub fn figure_refs(spec: &ExperimentSpec, name: &str) -> Vec<FigureRef> {
    spec.figures
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let file = if f.file.is_empty() {
                format!("fig{}", i + 1)
            } else {
                f.file.clone()
            };
            FigureRef {
                path: format!("{name}/{file}.png"),
                caption: if f.title.is_empty() {
                    spec.title.clone()
                } else {
                    f.title.clone()
                },
                spec: f.clone(),
            }
        })
        .collect()
}

/// `results/REPORT.md` over `studies` (in report order): the header, the
/// map of what each study reproduces (the paper's claim and the verdict
/// its results give), every study's section ([`report_section`]) and the
/// speed-up range reproduced over the paper-reproduction studies
/// (`paper-*`, `aws-*`).
pub fn full_report(studies: &[Study]) -> String {
    let mut s = String::from(
        "# Results\n\nWritten by `cephalo experiment run --all` (every number below is simulated by this tool; `validate` holds the simulator against real runs). Each section says which profiles it ran on.\n\n",
    );
    let header_len = s.len();
    let mut map = String::from(
        "## What each study reproduces\n\nEach paper-reproduction study tests one claim of the Cephalo paper (as DESIGN.md §1 states its idea); the verdict is computed from the study's results. The other studies are what-ifs beyond the paper.\n\n| study | the paper's claim | here |\n|---|---|---|\n",
    );
    for st in studies {
        let figs = figure_refs(st.spec, st.name);
        s.push_str(&report_section(
            st.spec,
            st.results,
            &figs,
            st.profiles_used,
        ));
        let (claim, here) = match st.spec.claim {
            Some(c) => (c.name().to_string(), c.verdict(st.results)),
            None => ("(what-if beyond the paper)".to_string(), "-".to_string()),
        };
        let _ = writeln!(
            map,
            "| `{}` | {claim} | {} |",
            st.name,
            here.replace('|', "/")
        );
    }
    let refs: Vec<&Results> = studies
        .iter()
        .filter(|st| st.spec.name.starts_with("paper-") || st.spec.name.starts_with("aws-"))
        .map(|st| st.results)
        .collect();
    s.push_str(&reproduced_range(&refs));
    map.push('\n');
    s.insert_str(header_len, &map);
    s
}

/// The section on the speed-up range over the paper-reproduction studies
/// `refs` (empty when Cephalo beats no data-parallel baseline there).
fn reproduced_range(refs: &[&Results]) -> String {
    let ranges = (
        speedup_range(refs, &is_data_parallel_baseline),
        speedup_range(refs, &is_pipeline),
    );
    let (Some((lo, hi, wl, wh)), pipes) = ranges else {
        return String::new();
    };
    let pipes = pipes.map_or(String::new(), |(a, b, wa, wb)| {
        format!(" Against the pipeline planners (the authors' code compares with DeepSpeed's pipeline and a balanced partition, our `pipeline`; `pipeline-hetero` goes beyond the paper) it is {a:.2}x ({wa}) to {b:.2}x ({wb}): a heterogeneous pipeline wins wherever a slow network separates the GPUs.")
    });
    format!(
        "## Reproduced speed-up range\n\nOver the paper-reproduction experiments (`paper-*`, `aws-*`), Cephalo's simulated throughput is {lo:.2}x ({wl}) to {hi:.2}x ({wh}) that of the data-parallel baselines that fit (PyTorch FSDP, FSDP with layered accumulation, ZeRO-2, DDP, HSDP, speed-proportional with and without memory-aware micro-batches).{pipes} The paper reports 1.2x-10.8x over its baselines. What differs: these are simulations on the authors' per-block measurements (embedding, head, optimizer and communication are this project's models, not measurements); our baselines are planned as their frameworks would plan them here (FSDP choosing its own accumulation and least recompute that fits, so it rarely runs out of memory), not the configurations the paper ran; plans that run out of memory count as no throughput rather than as the paper's largest speed-ups; and this tool's communication model (NCCL rings and trees at nccl-tests bus bandwidths, link sharing, 10% compute slow-down while collectives run) sets how much sharded data parallelism pays for crossing a slow network.\n\n"
    )
}

/// The report section of one experiment: title, what it asks, which
/// profiles it ran on, every figure with a paragraph of its key numbers.
pub fn report_section(
    spec: &ExperimentSpec,
    results: &Results,
    figures: &[FigureRef],
    profiles_used: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## {}\n", spec.title);
    if !spec.description.is_empty() {
        let _ = writeln!(s, "{}\n", spec.description.trim());
    }
    s.push_str(&what_ran(spec, results, profiles_used));
    s.push_str(&provenance(results));
    if let Some(c) = spec.claim {
        let _ = writeln!(
            s,
            "**The paper's claim:** {}. **Here:** {}\n",
            c.text(),
            c.verdict(results)
        );
    }
    for f in figures {
        let _ = writeln!(s, "![{}]({})\n", f.caption, f.path);
        let _ = writeln!(s, "*{}.* {}\n", f.caption, f.spec.key_numbers(results));
    }
    s.push_str(&speedups(results));
    if results.rows.iter().any(|r| r.price_per_hour_usd.is_some()) {
        let _ = writeln!(
            s,
            "Prices: USD per GPU-hour from the cluster spec (`price_per_hour_usd` per GPU entry) where it gives one, else the GPU catalog's approximate public on-demand price (2024 list prices, us-east, instance price / GPUs per instance; `profiles/gpus.toml`).\n"
        );
    }
    if let Some(target) = spec.target_tokens_per_s {
        s.push_str(&cheapest_reaching(results, target));
    }
    s.push_str(&without_plan(results));
    s
}

/// What ran: workloads x planners and the profiles (or the measured runs
/// of a study of measurements only), and where the data is.
fn what_ran(spec: &ExperimentSpec, results: &Results, profiles_used: &str) -> String {
    let workloads = results
        .rows
        .iter()
        .map(|r| r.case)
        .max()
        .map_or(0, |c| c + 1);
    if workloads == 0 {
        let runs: std::collections::BTreeSet<&str> =
            results.validation.iter().map(|p| p.run.as_str()).collect();
        format!(
            "Experiment `{}`: {} measured runs (`validations`); each prediction uses the profile its `validate` run measured on the spot. Data: `{}/validation.csv`.\n\n",
            spec.name,
            runs.len(),
            spec.name
        )
    } else {
        format!(
            "Experiment `{}`: {} workloads x {} planners, profiles: {profiles_used}. Data: `{}/results.csv` (per GPU: `gpus.csv`).\n\n",
            spec.name,
            workloads,
            spec.planner_names().len(),
            spec.name
        )
    }
}

/// Where this study's numbers came from, counted from its rows' sources
/// (so a description cannot claim more measurement than there was): the
/// (model, GPU type) pairs whose compute the reference measurements gave,
/// the pairs the calibrated model predicted, and the memory's source.
fn provenance(results: &Results) -> String {
    use std::collections::BTreeSet;
    let (mut measured, mut modelled) = (BTreeSet::new(), BTreeSet::new());
    let mut memory = BTreeSet::new();
    for r in &results.rows {
        for part in r.sources.split("; ") {
            if let Some(m) = part.strip_prefix("memory: ") {
                let kind = if m.starts_with("analytic") || m.contains("calibrated") {
                    "modelled (the calibrated activation model)"
                } else {
                    "measured (the reference memory profile)"
                };
                memory.insert(kind);
                continue;
            }
            // `COUNTx GPU: how`; a `;` inside a source's own text starts
            // no new GPU.
            let Some((head, how)) = part.split_once(": ") else {
                continue;
            };
            let Some((count, gpu)) = head.split_once("x ") else {
                continue;
            };
            if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let pair = format!("{} on {gpu}", r.model);
            if how.starts_with("imported") || how.starts_with("measured") {
                measured.insert(pair);
            } else {
                modelled.insert(pair);
            }
        }
    }
    let total = measured.len() + modelled.len();
    if total == 0 {
        return String::new();
    }
    let list = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join(", ");
    let mut out = format!(
        "Where the numbers come from: compute measured for {} of {total} (model, GPU) pairs{}",
        measured.len(),
        if measured.is_empty() {
            String::new()
        } else {
            format!(" ({})", list(&measured))
        }
    );
    if !modelled.is_empty() {
        let _ = write!(
            out,
            ", predicted by the calibrated model for {}",
            modelled.len()
        );
        if modelled.len() <= 8 {
            let _ = write!(out, " ({})", list(&modelled));
        }
    }
    if !memory.is_empty() {
        let _ = write!(
            out,
            "; memory {}",
            memory.into_iter().collect::<Vec<_>>().join(" and ")
        );
    }
    out.push_str(".\n\n");
    out
}

/// Cephalo's speed-up ranges over the data-parallel baselines and the
/// pipelines here.
fn speedups(results: &Results) -> String {
    let mut s = String::new();
    for (what, f) in [
        (
            "data-parallel baselines",
            &is_data_parallel_baseline as &dyn Fn(&str) -> bool,
        ),
        ("pipelines", &is_pipeline),
    ] {
        if let Some((lo, hi, wl, wh)) = speedup_range(&[results], f) {
            let _ = writeln!(
                s,
                "Cephalo's speed-up over the {what} that fit here: {lo:.2}x ({wl}) to {hi:.2}x ({wh}).\n"
            );
        }
    }
    s
}

/// The cheapest cluster of the sweep reaching `target` tokens/s, and its
/// planner.
fn cheapest_reaching(results: &Results, target: f64) -> String {
    let best = results
        .rows
        .iter()
        .filter(|r| r.tokens_per_s.is_some_and(|t| t >= target))
        .filter_map(|r| Some((r.price_per_hour_usd?, r)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((p, r)) => format!(
            "Cheapest cluster of this sweep reaching {target:.0} tokens/s: {} ({} GPUs) at ${p:.2}/h under {}, {:.0} tokens/s, ${:.3} per million tokens.\n\n",
            r.cluster,
            r.gpus,
            r.planner,
            r.tokens_per_s.unwrap_or(0.0),
            r.usd_per_million_tokens.unwrap_or(0.0)
        ),
        None => format!("No cluster of this sweep reaches {target:.0} tokens/s.\n\n"),
    }
}

/// The runs without a plan (the first 8) and why.
fn without_plan(results: &Results) -> String {
    let mut s = String::new();
    let errors: Vec<&ResultRow> = results
        .rows
        .iter()
        .filter(|r| !r.error.is_empty())
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(s, "No plan ({}):\n", errors.len());
        for r in errors.iter().take(8) {
            let _ = writeln!(
                s,
                "- {} / {} / batch {} / {}: {}",
                r.cluster, r.model, r.global_batch, r.planner, r.error
            );
        }
        if errors.len() > 8 {
            let _ = writeln!(s, "- ... and {} more (see results.csv)", errors.len() - 8);
        }
        s.push('\n');
    }
    s
}
