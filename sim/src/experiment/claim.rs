//! The paper's claims a study reproduces (`claim = "..."` in a spec), each
//! stated as DESIGN.md §1 states the Cephalo paper's idea, and its verdict
//! derived from the study's results, never written by hand: whether the
//! claim holds here, in how many workloads, by how much.

use super::figure::waiting_share;
use super::results::Results;
use super::rows::{GpuRow, ResultRow};
use super::spelled::spelled;
use crate::planner::registry::{self, Family};

spelled! {
    /// A claim of the Cephalo paper a study tests.
    pub enum Claim {
        /// Per-GPU batches sized by speed remove plain FSDP's wait for the
        /// slowest GPU.
        ComputeBalancing = "compute-balancing",
        /// Per-GPU state shards sized by free memory lift the cap the
        /// smallest GPU puts on plain FSDP's batch and model.
        MemoryBalancing = "memory-balancing",
        /// Both parts together beat either alone.
        Ablation = "ablation",
    }
}

impl Claim {
    /// The claim in words, as DESIGN.md §1 states the paper's idea.
    pub fn text(self) -> &'static str {
        match self {
            Claim::ComputeBalancing => "plain FSDP gives every GPU the same batch, so the fastest GPU waits for the slowest; Cephalo's per-GPU batches, sized so all GPUs finish each layer together, remove that wait (compute balancing, DESIGN.md §1)",
            Claim::MemoryBalancing => "the smallest GPU's memory caps plain FSDP's batch and model; Cephalo's per-GPU state shards, sized to each GPU's free memory, lift the cap (memory balancing, DESIGN.md §1)",
            Claim::Ablation => "compute balancing and memory balancing each help, and together beat either alone (the paper's ablation; DESIGN.md §1)",
        }
    }

    /// What the study's results say about the claim: whether it holds, in
    /// how many workloads, with the numbers.
    pub fn verdict(self, results: &Results) -> String {
        match self {
            Claim::ComputeBalancing => compute_balancing(results),
            Claim::MemoryBalancing => memory_balancing(results),
            Claim::Ablation => ablation(results),
        }
    }
}

/// The row of `planner` on workload `case`.
fn row<'r>(results: &'r Results, case: usize, planner: &str) -> Option<&'r ResultRow> {
    results
        .rows
        .iter()
        .find(|r| r.case == case && r.planner == planner)
}

/// The workloads of the study, in order.
fn cases(results: &Results) -> Vec<usize> {
    let mut c: Vec<usize> = results.rows.iter().map(|r| r.case).collect();
    c.dedup();
    c
}

/// `lo-hi` of `v` with `digits` decimals, or the one value.
fn span(v: &[f64], digits: usize, unit: &str) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if (hi - lo).abs() < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{lo:.digits$}{unit}")
    } else {
        format!("{lo:.digits$}-{hi:.digits$}{unit}")
    }
}

/// The names of plain FSDP (the data-parallel standard) and Cephalo's
/// native planner, as result rows record them.
fn names() -> (&'static str, &'static str) {
    (
        registry::standard(Family::DataParallel).name(),
        registry::native_name(),
    )
}

/// Cephalo against plain FSDP where both fit: waiting shares and speed-up.
fn compute_balancing(results: &Results) -> String {
    let (mut held, mut n) = (0, 0);
    let (mut wf, mut wc, mut x) = (Vec::new(), Vec::new(), Vec::new());
    let (fsdp, ours) = names();
    for c in cases(results) {
        let (Some(f), Some(k)) = (row(results, c, fsdp), row(results, c, ours)) else {
            continue;
        };
        let (Some(sf), Some(sk)) = (f.samples_per_s, k.samples_per_s) else {
            continue;
        };
        let gpus = |p: &str| -> Vec<&GpuRow> {
            results
                .gpus
                .iter()
                .filter(|g| g.case == c && g.planner == p)
                .collect()
        };
        let (a, b) = (waiting_share(&gpus(fsdp)), waiting_share(&gpus(ours)));
        n += 1;
        held += usize::from(b < a && sk > sf);
        wf.push(100.0 * a);
        wc.push(100.0 * b);
        x.push(sk / sf);
    }
    if n == 0 {
        return "not tested here: no workload where both plain FSDP and Cephalo fit.".into();
    }
    format!(
        "{} in {held} of {n} workloads where both fit: the GPUs wait {} of their time under FSDP and {} under Cephalo, whose throughput is {} FSDP's.",
        if held == n {
            "holds"
        } else if held == 0 {
            "does not hold"
        } else {
            "holds in part"
        },
        span(&wf, 0, "%"),
        span(&wc, 0, "%"),
        span(&x, 2, "x"),
    )
}

/// Where Cephalo fits and plain FSDP does not.
fn memory_balancing(results: &Results) -> String {
    let fits = |r: Option<&ResultRow>| r.is_some_and(|r| r.samples_per_s.is_some());
    let (mut n, mut f, mut k) = (0, 0, 0);
    let mut lifted = Vec::new();
    let mut lost = Vec::new();
    let (fsdp, ours) = names();
    for c in cases(results) {
        let (rf, rk) = (row(results, c, fsdp), row(results, c, ours));
        if rf.is_none() || rk.is_none() {
            continue;
        }
        n += 1;
        f += usize::from(fits(rf));
        k += usize::from(fits(rk));
        let what = rk.map_or(String::new(), |r| {
            format!("{} at batch {}", r.model, r.global_batch)
        });
        match (fits(rf), fits(rk)) {
            (false, true) => lifted.push(what),
            (true, false) => lost.push(what),
            _ => {}
        }
    }
    if n == 0 {
        return "not tested here: the study runs neither plain FSDP nor Cephalo.".into();
    }
    let list = |v: &[String]| v.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
    let head = if !lifted.is_empty() && lost.is_empty() {
        format!(
            "holds: Cephalo trains {} workload(s) plain FSDP cannot ({})",
            lifted.len(),
            list(&lifted)
        )
    } else if lifted.is_empty() && lost.is_empty() {
        "not reached by this sweep: plain FSDP and Cephalo fit the same workloads".to_string()
    } else if lifted.is_empty() {
        format!(
            "does not hold here: plain FSDP fits {} workload(s) Cephalo does not ({})",
            lost.len(),
            list(&lost)
        )
    } else {
        format!(
            "holds in part: Cephalo lifts the cap for {} ({}) and loses {} ({})",
            lifted.len(),
            list(&lifted),
            lost.len(),
            list(&lost)
        )
    };
    format!("{head}; of {n} workloads FSDP fits {f}, Cephalo {k}.")
}

/// Cephalo against each half of it alone (and FSDP with layered
/// accumulation, neither half).
fn ablation(results: &Results) -> String {
    let mut parts = Vec::new();
    let mut all = true;
    let ours = registry::native_name();
    for other in registry::ablation() {
        let mut x = Vec::new();
        for c in cases(results) {
            let (Some(a), Some(b)) = (row(results, c, ours), row(results, c, other)) else {
                continue;
            };
            if let (Some(sa), Some(sb)) = (a.samples_per_s, b.samples_per_s.filter(|&v| v > 0.0)) {
                x.push(sa / sb);
            }
        }
        if !x.is_empty() {
            let wins = x.iter().filter(|&&v| v >= 1.0 - 1e-9).count();
            all &= wins == x.len();
            parts.push(format!(
                "Cephalo is {} {other}'s throughput (at least equal in {wins} of {})",
                span(&x, 2, "x"),
                x.len()
            ));
        }
    }
    if parts.is_empty() {
        return "not tested here: no workload where Cephalo and a part of it both fit.".into();
    }
    format!(
        "{}: {}.",
        if all { "holds" } else { "holds in part" },
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(case: usize, planner: &str, sps: Option<f64>) -> ResultRow {
        ResultRow {
            case,
            planner: planner.into(),
            model: "m".into(),
            global_batch: 8,
            samples_per_s: sps,
            ..ResultRow::default()
        }
    }

    #[test]
    fn memory_balancing_counts_what_each_fits() {
        let res = Results {
            rows: vec![
                r(0, "fsdp", Some(1.0)),
                r(0, "cephalo", Some(2.0)),
                r(1, "fsdp", None),
                r(1, "cephalo", Some(2.0)),
            ],
            ..Results::default()
        };
        let v = Claim::MemoryBalancing.verdict(&res);
        assert!(v.starts_with("holds: Cephalo trains 1 workload(s)"), "{v}");
        assert!(v.contains("FSDP fits 1, Cephalo 2"), "{v}");
        let none = Results {
            rows: vec![r(0, "fsdp", Some(1.0)), r(0, "cephalo", Some(2.0))],
            ..Results::default()
        };
        assert!(Claim::MemoryBalancing
            .verdict(&none)
            .starts_with("not reached"));
    }

    #[test]
    fn ablation_says_in_part_when_a_half_wins_somewhere() {
        let res = Results {
            rows: vec![
                r(0, "cephalo", Some(2.0)),
                r(0, "balance-compute", Some(1.0)),
                r(1, "cephalo", Some(2.0)),
                r(1, "balance-compute", Some(3.0)),
            ],
            ..Results::default()
        };
        let v = Claim::Ablation.verdict(&res);
        assert!(v.starts_with("holds in part"), "{v}");
        assert!(v.contains("0.67-2.00x balance-compute's"), "{v}");
    }
}
