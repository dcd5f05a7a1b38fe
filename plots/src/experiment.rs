//! The figures of an experiment ([`sim::experiment`]): its results mapped
//! to grouped bars, lines, stacked per-GPU bars and Gantt timelines, as
//! its spec's `[[figure]]` tables say.

use crate::bars::{Bar, GroupedBars};
use crate::gantt::{Gantt, Span};
use crate::lines::{Lines, Point, Series};
use crate::render::{render, DynErr, Rendered};
use crate::stacked::StackedBars;
use sim::experiment::{Axis, ExperimentSpec, FigureKind, FigureSpec, Results};
use std::path::Path;

/// One drawn figure: its files and its caption.
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    /// The PNG and the SVG, rendered (the caller writes them).
    pub files: Vec<Rendered>,
    /// Caption (for the report).
    pub caption: String,
    /// The figure spec it came from.
    pub spec: FigureSpec,
}

/// Short names for axis labels (the reference data's `deepspeed` prefix dropped).
pub fn short(s: &str) -> String {
    s.strip_prefix("deepspeed").unwrap_or(s).to_string()
}

/// Draws every figure of `spec` from `results`, as files meant for `dir`
/// (rendered in memory; the caller writes them).
pub fn draw_all(
    spec: &ExperimentSpec,
    results: &Results,
    dir: &Path,
) -> Result<Vec<Drawn>, DynErr> {
    let mut out = Vec::new();
    for (i, f) in spec.figures.iter().enumerate() {
        let file = if f.file.is_empty() {
            format!("fig{}", i + 1)
        } else {
            f.file.clone()
        };
        let base = dir.join(&file);
        let (files, caption) = match f.kind {
            FigureKind::Bars => bars(spec, f, results, &base)?,
            FigureKind::Lines => lines(spec, f, results, &base)?,
            FigureKind::Time | FigureKind::Memory => stacked(spec, f, results, &base)?,
            FigureKind::Gantt => gantt(spec, f, results, &base)?,
            FigureKind::Validation => validation(spec, f, results, &base)?,
        };
        out.push(Drawn {
            files,
            caption,
            spec: f.clone(),
        });
    }
    Ok(out)
}

fn title(spec: &ExperimentSpec, f: &FigureSpec, default: String) -> String {
    if f.title.is_empty() {
        if default.is_empty() {
            spec.title.clone()
        } else {
            default
        }
    } else {
        f.title.clone()
    }
}

fn bars(
    spec: &ExperimentSpec,
    f: &FigureSpec,
    results: &Results,
    base: &Path,
) -> Result<(Vec<Rendered>, String), DynErr> {
    let xs = results.axis_values(f.x, &f.planners);
    let ss = results.axis_values(f.series, &f.planners);
    let series: Vec<(String, Vec<Bar>)> = ss
        .iter()
        .map(|s| {
            let vals = xs
                .iter()
                .map(|x| {
                    match results
                        .rows
                        .iter()
                        .find(|r| &f.x.of(r) == x && &f.series.of(r) == s)
                    {
                        None => Bar::Absent,
                        Some(r) => match f.y.of(r) {
                            Some(v) => Bar::Value {
                                v,
                                band: f.y.band(r),
                            },
                            None => Bar::Failed,
                        },
                    }
                })
                .collect();
            (short(s), vals)
        })
        .collect();
    let t = title(spec, f, String::new());
    let fig = GroupedBars {
        title: t.clone(),
        x_label: f.x.label().to_string(),
        y_label: f.y.label(),
        categories: xs.iter().map(|x| short(x)).collect(),
        series,
    };
    Ok((
        render(&fig, base)?,
        format!("{t} (x: out of memory or infeasible; error bars: the prediction's interval at its sources' median errors)"),
    ))
}

fn lines(
    spec: &ExperimentSpec,
    f: &FigureSpec,
    results: &Results,
    base: &Path,
) -> Result<(Vec<Rendered>, String), DynErr> {
    let ss = results.axis_values(f.series, &f.planners);
    let series: Vec<Series> = ss
        .iter()
        .map(|s| {
            let points = results
                .rows
                .iter()
                .filter(|r| &f.series.of(r) == s)
                .filter_map(|r| {
                    let x: f64 = f.x.of(r).parse().ok()?;
                    Some(Point {
                        x,
                        y: f.y.of(r),
                        band: f.y.band(r),
                    })
                })
                .collect();
            Series {
                name: short(s),
                points,
            }
        })
        .collect();
    let t = title(spec, f, String::new());
    let fig = Lines {
        title: t.clone(),
        x_label: f.x.label().to_string(),
        y_label: f.y.label(),
        series,
        log_x: f.log_x,
        log_y: f.log_y,
    };
    Ok((
        render(&fig, base)?,
        format!("{t} (x on the axis: out of memory or infeasible; bands: the prediction's interval at its sources' median errors)"),
    ))
}

fn stacked(
    spec: &ExperimentSpec,
    f: &FigureSpec,
    results: &Results,
    base: &Path,
) -> Result<(Vec<Rendered>, String), DynErr> {
    let case = f.workload;
    let planners: Vec<String> = results.axis_values(Axis::Planner, &f.planners);
    let mut groups = Vec::new();
    let memory = f.kind == FigureKind::Memory;
    let names: Vec<String> = if memory {
        vec![
            "training-state shard".into(),
            "framework overhead".into(),
            "gathered parameters".into(),
            "gradient buffers".into(),
            "activations".into(),
            "free (of usable)".into(),
        ]
    } else {
        vec![
            "compute (forward, backward)".into(),
            "recompute".into(),
            "exposed communication".into(),
            "host copies".into(),
            "host work".into(),
            "idle".into(),
        ]
    };
    let mut parts: Vec<(String, Vec<f64>)> = names.into_iter().map(|n| (n, Vec::new())).collect();
    for p in &planners {
        let gs: Vec<_> = results
            .gpus
            .iter()
            .filter(|g| g.case == case && &g.planner == p)
            .collect();
        if gs.is_empty() {
            continue;
        }
        groups.push((
            short(p),
            gs.iter().map(|g| format!("{}:{}", g.rank, g.gpu)).collect(),
        ));
        for g in gs {
            let vals = if memory {
                vec![
                    g.state_gib,
                    g.overhead_gib,
                    g.unsharded_params_gib,
                    g.gradients_gib,
                    g.activations_gib,
                    (g.usable_gib - g.peak_mem_gib).max(0.0),
                ]
            } else {
                vec![
                    (g.compute_ms - g.recompute_ms).max(0.0),
                    g.recompute_ms,
                    g.exposed_comm_ms,
                    g.copy_ms,
                    g.host_ms,
                    g.idle_ms,
                ]
            };
            for (k, v) in vals.into_iter().enumerate() {
                parts[k].1.push(v);
            }
        }
    }
    let w = results.rows.iter().find(|r| r.case == case);
    let what = w.map_or(String::new(), |r| {
        format!(
            "{} on {}, batch {}",
            short(&r.model),
            r.cluster,
            r.global_batch
        )
    });
    let t = title(
        spec,
        f,
        if memory {
            format!("Per-GPU memory by component: {what}")
        } else {
            format!("Per-GPU time in one iteration: {what}")
        },
    );
    let fig = StackedBars {
        title: t.clone(),
        y_label: if memory { "GiB".into() } else { "ms".into() },
        groups,
        parts,
    };
    Ok((render(&fig, base)?, t))
}

fn gantt(
    spec: &ExperimentSpec,
    f: &FigureSpec,
    results: &Results,
    base: &Path,
) -> Result<(Vec<Rendered>, String), DynErr> {
    let case = f.workload;
    let planners: Vec<String> = results.axis_values(Axis::Planner, &f.planners);
    let mut lanes: Vec<String> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    let mut spans = Vec::new();
    for p in &planners {
        let mut lane_of: Vec<(String, usize)> = Vec::new();
        for s in results
            .spans
            .iter()
            .filter(|s| s.case == case && &s.planner == p && s.category != "idle")
        {
            // `rank 0: l4 (node0) stage 1: blocks 18-24` -> `rank 0: l4 stage 1`.
            let proc_label = match (s.process.find(" ("), s.process.find(')')) {
                (Some(a), Some(b)) if b > a => {
                    let rest = s.process[b + 1..].split(':').next().unwrap_or("");
                    format!("{}{}", &s.process[..a], rest)
                }
                _ => s.process.clone(),
            };
            let key = format!("{} {} {}", short(p), proc_label, s.stream);
            let lane = match lane_of.iter().find(|l| l.0 == key) {
                Some(l) => l.1,
                None => {
                    lanes.push(key.clone());
                    lane_of.push((key, lanes.len() - 1));
                    lanes.len() - 1
                }
            };
            let kind = match kinds.iter().position(|k| k == &s.category) {
                Some(k) => k,
                None => {
                    kinds.push(s.category.clone());
                    kinds.len() - 1
                }
            };
            spans.push(Span {
                lane,
                start_ms: s.start_ms,
                end_ms: s.end_ms,
                kind,
            });
        }
    }
    // Lanes grouped by planner then rank then stream (stable, readable).
    let mut order: Vec<usize> = (0..lanes.len()).collect();
    order.sort_by(|&a, &b| lane_key(&lanes[a]).cmp(&lane_key(&lanes[b])));
    let mut pos = vec![0; lanes.len()];
    for (i, &l) in order.iter().enumerate() {
        pos[l] = i;
    }
    let lanes: Vec<String> = order.iter().map(|&l| lanes[l].clone()).collect();
    for s in &mut spans {
        s.lane = pos[s.lane];
    }
    let w = results.rows.iter().find(|r| r.case == case);
    let what = w.map_or(String::new(), |r| {
        format!(
            "{} on {}, batch {}",
            short(&r.model),
            r.cluster,
            r.global_batch
        )
    });
    let t = title(spec, f, format!("One iteration: {what}"));
    let fig = Gantt {
        title: t.clone(),
        lanes,
        kinds,
        spans,
    };
    Ok((
        render(&fig, base)?,
        format!("{t} (an empty compute lane is idle; waiting in the note counts exposed communication, transfers and copies too)"),
    ))
}

fn validation(
    spec: &ExperimentSpec,
    f: &FigureSpec,
    results: &Results,
    base: &Path,
) -> Result<(Vec<Rendered>, String), DynErr> {
    let points: Vec<crate::scatter::ScatterPoint> = results
        .validation
        .iter()
        .map(|p| crate::scatter::ScatterPoint {
            measured: p.measured_ms,
            predicted: p.predicted_ms,
            group: if p.quantity == "iteration" {
                "iteration".into()
            } else {
                "compute per rank".into()
            },
        })
        .collect();
    let t = title(spec, f, "Predicted against measured (validate runs)".into());
    let sc = crate::scatter::ScatterSpec {
        title: t.clone(),
        x_label: "measured ms".into(),
        y_label: "predicted ms".into(),
        band: 0.1,
    };
    Ok((
        crate::scatter::render(&points, &sc, base)?,
        format!("{t} (band: +-10%)"),
    ))
}

/// Sort key of a Gantt lane `planner rank N: gpu stream`.
fn lane_key(l: &str) -> (String, u32, String) {
    let mut it = l.split_whitespace();
    let p = it.next().unwrap_or("").to_string();
    let _ = it.next();
    let r = it
        .next()
        .and_then(|x| x.trim_end_matches(':').parse().ok())
        .unwrap_or(0);
    let stream = l.rsplit(' ').next().unwrap_or("").to_string();
    let rank_stream = match stream.as_str() {
        "compute" => "0",
        "comm" => "1",
        "reduce" => "2",
        "copy" => "3",
        _ => "4",
    };
    (p, r, rank_stream.to_string())
}
