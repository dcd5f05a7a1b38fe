//! The human-readable tables: the report's, the memory and source lines,
//! and the row grouping and alignment the plan tables share.

use super::memory::MemoryBreakdown;
use super::schema::{CommSourceStat, GpuReport, HostReport, PipelineReport, Report, SourceLine};
use std::fmt::Write as _;

/// GPU (and host) count above which the table prints consecutive identical
/// rows once (`ranks 8-15`), so a 1,024-GPU report stays readable.
pub const GROUP_ROWS_ABOVE: usize = 32;

/// Merges consecutive table rows equal in every cell but the first (the
/// rank), whose cell becomes the range `a-b`; the header row stays.
pub fn group_rows(rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::with_capacity(rows.len());
    let mut first_rank = String::new();
    let mut last_rank = String::new();
    for (i, r) in rows.into_iter().enumerate() {
        let same = i > 1 && out.last().is_some_and(|p: &Vec<String>| p[1..] == r[1..]);
        if same {
            last_rank = r[0].clone();
            let cell = format!("{first_rank}-{last_rank}");
            if let Some(p) = out.last_mut() {
                p[0] = cell;
            }
        } else {
            first_rank = r[0].clone();
            last_rank.clone_from(&first_rank);
            out.push(r);
        }
    }
    out
}

/// Appends `rows` (the header first) as columns two spaces apart: the
/// columns `text` names left-aligned, the others (numbers) right-aligned.
fn write_aligned(s: &mut String, rows: &[Vec<String>], text: impl Fn(usize) -> bool) {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let w = widths[c];
            if text(c) {
                let _ = write!(line, "{cell:<w$}  ");
            } else {
                let _ = write!(line, "{cell:>w$}  ");
            }
        }
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// The per-GPU memory at the peak by component, with the headroom to the
/// policy limit and to the capacity: one row per rank (`(gpu, memory)` in
/// rank order), identical ranks grouped on large clusters as in the main
/// table.
pub fn memory_table<'a>(gpu_rows: impl Iterator<Item = (&'a str, &'a MemoryBreakdown)>) -> String {
    let mut s = String::from(
        "memory at each GPU's peak, GiB (overhead: outside the allocator and fixed workspaces; alloc./reserved: the caching allocator's peaks; limit: the memory policy's):\n",
    );
    let header = [
        "rank",
        "gpu",
        "state",
        "overhead",
        "params",
        "grads",
        "activ.",
        "peak",
        "alloc.",
        "reserved",
        "limit",
        "headroom",
        "capacity",
        "to capacity",
        "",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for (r, (g, m)) in gpu_rows.enumerate() {
        rows.push(vec![
            r.to_string(),
            g.to_string(),
            format!("{:.2}", m.state_gib),
            format!("{:.2}", m.overhead_gib),
            format!("{:.2}", m.unsharded_params_gib),
            format!("{:.2}", m.gradients_gib),
            format!("{:.2}", m.activations_gib),
            format!("{:.2}", m.peak_gib),
            format!("{:.2}", m.allocated_gib),
            format!("{:.2}", m.reserved_gib),
            format!("{:.2}", m.policy_limit_gib),
            format!("{:+.2}", m.headroom_policy_gib),
            format!("{:.2}", m.capacity_gib),
            format!("{:+.2}", m.headroom_capacity_gib),
            match m.status {
                "fits" => String::new(),
                "over-policy" => "OVER THE LIMIT, within capacity".into(),
                _ => "OVER CAPACITY".into(),
            },
        ]);
    }
    // `rows` holds the header too.
    if rows.len() - 1 > GROUP_ROWS_ABOVE {
        rows = group_rows(rows);
    }
    write_aligned(&mut s, &rows, |c| c == 1 || c == 14);
    s.push('\n');
    s
}

/// Source lines as the tables print them: `sources:`, the compute of each
/// GPU type, then the memory once (non-state memory is one model per
/// workload, [`crate::cost::CostModel::act`]). Empty without lines.
pub fn sources_text(src: &[SourceLine]) -> String {
    let Some(first) = src.first() else {
        return String::new();
    };
    let mut s = String::from("sources:\n");
    for x in src {
        let _ = writeln!(s, "  {}x {}: compute {}", x.count, x.gpu, x.compute);
    }
    let _ = writeln!(s, "  memory: {}", first.memory);
    s
}

/// Where the collectives' times came from, one line per group shape
/// (`  collectives over 8 ranks on 1 node(s): all_gather measured x24,
/// ...`), to follow [`sources_text`]; empty with the analytic model.
pub fn comm_sources_text(stats: &[CommSourceStat]) -> String {
    let mut shapes: Vec<(u32, u32)> = stats
        .iter()
        .map(|c| (c.group_ranks, c.group_nodes))
        .collect();
    shapes.sort_unstable();
    shapes.dedup();
    let mut s = String::new();
    for (ranks, nodes) in shapes {
        let parts: Vec<String> = stats
            .iter()
            .filter(|c| (c.group_ranks, c.group_nodes) == (ranks, nodes))
            .map(|c| format!("{} {} x{}", c.kind, c.source.name(), c.collectives))
            .collect();
        let _ = writeln!(
            s,
            "  collectives over {ranks} ranks on {nodes} node(s): {}",
            parts.join(", ")
        );
    }
    s
}

impl Report {
    /// A human-readable table: one row per GPU, then the summary (or an
    /// OUT OF MEMORY block naming each GPU with its peak and capacity).
    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} ({}, seq {}), global batch {}, planner {}, cluster {}",
            self.model, self.dtype, self.seq_len, self.global_batch, self.planner, self.cluster
        );
        let _ = writeln!(s, "strategy: {}", self.strategy.label());
        if let Some(p) = &self.pipeline {
            p.write_table(&mut s);
        }
        self.write_gpu_rows(&mut s);
        s += &memory_table(self.gpus.iter().map(|g| (g.gpu.as_str(), &g.memory)));
        if self.hosts.iter().any(|h| h.peak_gib > 0.0) {
            self.write_hosts(&mut s);
        }
        self.write_collectives(&mut s);
        self.write_contention(&mut s);
        if self.oom {
            self.write_out_of_memory(&mut s);
        } else {
            self.write_throughput(&mut s);
        }
        s.push_str(&sources_text(&self.sources()));
        s.push_str(&comm_sources_text(&self.comm_sources));
        s
    }

    /// Appends the per-GPU table (times `-` when out of memory) and a blank
    /// line.
    fn write_gpu_rows(&self, s: &mut String) {
        let header = [
            "rank",
            "gpu",
            "batch",
            "n",
            "m",
            "state",
            "compute ms",
            "exp.comm ms",
            "copy ms",
            "host ms",
            "idle ms",
            "peak GiB",
            "% usable",
            "OOM",
            "source",
        ];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for g in &self.gpus {
            let t = |v: f64| {
                if self.oom {
                    "-".to_string()
                } else {
                    format!("{v:.1}")
                }
            };
            rows.push(vec![
                g.rank.to_string(),
                g.gpu.clone(),
                g.batch.to_string(),
                g.microbatches.to_string(),
                g.microbatch_size.to_string(),
                format!("{:.4}", g.state_fraction),
                t(g.compute_ms),
                t(g.exposed_comm_ms),
                t(g.copy_ms),
                t(g.host_ms),
                t(g.idle_ms),
                format!("{:.2}", g.peak_mem_gib),
                format!("{:.1}", g.usable_pct),
                if g.oom { "OOM".into() } else { "ok".into() },
                g.compute_source.split(' ').next().unwrap_or("").to_string(),
            ]);
        }
        if self.gpus.len() > GROUP_ROWS_ABOVE {
            rows = group_rows(rows);
        }
        // Text columns left-aligned, numbers right-aligned.
        write_aligned(s, &rows, |c| c == 1 || c == 13 || c == 14);
        s.push('\n');
    }

    /// Appends one line per host with its peak memory (on large clusters,
    /// one per run of consecutive hosts that read the same).
    fn write_hosts(&self, s: &mut String) {
        let line = |h: &HostReport| {
            format!(
                "peak {:.2} GiB of {:.2} GiB{}",
                h.peak_gib,
                h.capacity_gib,
                if h.oom { "  OUT OF MEMORY" } else { "" }
            )
        };
        let mut i = 0;
        while i < self.hosts.len() {
            let h = &self.hosts[i];
            let mut j = i + 1;
            // Large clusters: consecutive hosts that read the same share a line.
            if self.hosts.len() > GROUP_ROWS_ABOVE {
                while j < self.hosts.len() && line(&self.hosts[j]) == line(h) {
                    j += 1;
                }
            }
            if j - i == 1 {
                let _ = writeln!(s, "host {} ({}): {}", h.node, h.name, line(h));
            } else {
                let last = &self.hosts[j - 1];
                let _ = writeln!(
                    s,
                    "hosts {}-{} ({} .. {}, {} hosts): {}",
                    h.node,
                    last.node,
                    h.name,
                    last.name,
                    j - i,
                    line(h)
                );
            }
            i = j;
        }
    }

    /// Appends the collectives one GPU joins per kind, when there are any.
    fn write_collectives(&self, s: &mut String) {
        let coll: Vec<String> = self
            .collective_summary
            .iter()
            .map(|k| {
                format!(
                    "{} x {} ({:.2} GiB, {:.1} ms)",
                    k.count, k.kind, k.buffer_gib, k.time_ms
                )
            })
            .collect();
        if !coll.is_empty() {
            let _ = writeln!(s, "collectives per GPU: {}", coll.join(", "));
        }
    }

    /// Appends the worst interference and link contention with their
    /// ranks, when either is not zero.
    fn write_contention(&self, s: &mut String) {
        let worst = |f: fn(&GpuReport) -> f64| {
            self.gpus
                .iter()
                .map(|g| (f(g), g.rank))
                .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a })
        };
        let (inter, ir) = worst(|g| g.interference_ms);
        let (cont, cr) = worst(|g| g.contention_ms);
        if inter > 0.0 || cont > 0.0 {
            let _ = writeln!(
                s,
                "contention: compute slowed by collectives up to {inter:.1} ms (rank {ir}); transfers stretched by shared links up to {cont:.1} ms (rank {cr})"
            );
        }
    }

    /// Appends the OUT OF MEMORY block: each GPU and host over its memory,
    /// with peak and capacity.
    fn write_out_of_memory(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "OUT OF MEMORY: this plan does not fit; no iteration time is reported."
        );
        for o in &self.oom_gpus {
            let _ = writeln!(
                s,
                "  rank {} ({}): peak {:.2} GiB > usable {:.2} GiB ({})",
                o.rank,
                o.gpu,
                o.peak_mem_gib,
                o.usable_gib,
                self.mem_policy.describe(o.capacity_gib, self.overhead_gib)
            );
        }
        // Say when the fraction rule, not the device, decided it.
        if let Some(f) = self.mem_policy.fraction() {
            let physical = crate::cost::MemPolicy::Physical;
            let fits_physically = self.oom_hosts.is_empty()
                && self.oom_gpus.iter().all(|o| {
                    let outside = self.overhead_gib;
                    o.peak_mem_gib <= physical.usable_gib(o.capacity_gib, outside)
                });
            if fits_physically && !self.oom_gpus.is_empty() {
                let _ = writeln!(
                    s,
                    "  --mem-fraction {f} decided this: every peak fits the device itself (the default, physical limit); drop the flag to see the time"
                );
            }
        }
        for h in &self.oom_hosts {
            let _ = writeln!(
                s,
                "  host of node {} ({}): peak {:.2} GiB > {:.2} GiB of host memory",
                h.node, h.name, h.peak_gib, h.capacity_gib
            );
        }
    }

    /// Appends the iteration time and throughput, and the cost when the
    /// cluster is priced.
    fn write_throughput(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "iteration {:.1} ms | {} samples/s | {:.0} tokens/s | {:.2} TFLOPS | MFU {:.1}% | HFU {:.1}%",
            self.iteration_ms,
            // Three significant digits below 1 (a long run's 0.0034
            // samples/s is not 0.00), two decimals above.
            if self.samples_per_s > 0.0 && self.samples_per_s < 1.0 {
                format!("{:.*}", (2 - self.samples_per_s.log10().floor() as i32).max(2) as usize, self.samples_per_s)
            } else {
                format!("{:.2}", self.samples_per_s)
            },
            self.tokens_per_s,
            self.tflops,
            self.mfu * 100.0,
            self.hfu * 100.0
        );
        let _ = writeln!(s, "{}", self.intervals.summary());
        if let (Some(p), Some(c)) = (self.price_per_hour_usd, self.usd_per_million_tokens()) {
            let _ = writeln!(
                s,
                "cost ${p:.2}/h for the cluster | ${c:.3} per million tokens"
            );
        }
    }
}

impl PipelineReport {
    /// One row of the stage table (`tp`, `ep`: whether it has those
    /// columns).
    fn stage_row(&self, st: &super::schema::StageReport, tp: bool, ep: bool) -> Vec<String> {
        let range = |a: u32, b: u32| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        };
        let mut blocks = if st.chunks.is_empty() {
            range(st.first_block, st.last_block)
        } else {
            let all: Vec<String> = st.chunks.iter().map(|c| range(c[0], c[1])).collect();
            all.join(",")
        };
        if st.stage == 0 {
            blocks = format!("emb+{blocks}");
        }
        if st.stage + 1 == self.stages.len() {
            blocks.push_str("+head");
        }
        let ranks = crate::lists::rank_ranges(&st.ranks, 4);
        let mut row = vec![st.stage.to_string(), blocks, st.gpus.clone(), ranks];
        if tp {
            row.push(st.tp.to_string());
            row.push((st.ranks.len() / st.tp.max(1) as usize).to_string());
        }
        row.push(format!("{:.1}", st.compute_ms));
        row.push(format!("{:.1}", st.exposed_comm_ms));
        if tp {
            row.push(format!("{:.1}", st.tp_comm_ms.unwrap_or(0.0)));
        }
        if ep {
            row.push(format!("{:.1}", st.ep_comm_ms.unwrap_or(0.0)));
        }
        row.extend([
            format!("{:.1}", st.idle_ms),
            format!("{:.2}", st.peak_mem_gib),
            format!("{:.2}", st.usable_gib),
        ]);
        row
    }

    /// The expert-parallel line of the stage table (`None` without EP).
    /// The parallel shape in one line, as a run's flags state it: `PP 4 x
    /// TP 1 x EP 8, 32 micro-batches, 1 samples per replica each` (the
    /// first stage's TP and replicas).
    pub fn shape_label(&self) -> String {
        let first = self.stages.first();
        let dp = first.map_or(1, |s| (s.ranks.len() as u32 / s.tp.max(1)).max(1));
        format!(
            "PP {} x TP {}{}, {} micro-batches, {} samples per replica each",
            self.stages.len(),
            first.map_or(1, |s| s.tp),
            if self.expert_parallel > 1 {
                format!(" x EP {}", self.expert_parallel)
            } else {
                String::new()
            },
            self.microbatches,
            self.microbatch_size.div_ceil(dp)
        )
    }

    fn expert_line(&self) -> Option<String> {
        (self.expert_parallel > 1).then(|| {
            format!(
                "expert parallelism: EP {}: each MoE block's routed experts over {}, tokens {} on the critical path, expert gradients reduced over the GPUs holding the same experts; ep comm: those exchanges (part of exp.comm)",
                self.expert_parallel,
                match self.expert_tensor_parallel {
                    Some(1) => format!(
                        "runs of {} GPUs, each holding whole experts (expert-TP 1)",
                        self.expert_parallel
                    ),
                    Some(te) => format!(
                        "runs of {} expert-TP groups of {te}",
                        self.expert_parallel
                    ),
                    None => format!(
                        "runs of {} replicas, each expert split over its TP group (expert-TP = TP)",
                        self.expert_parallel
                    ),
                },
                match self.moe_dispatcher.as_deref() {
                    Some(d) => format!("gathered over expert-TP x EP and the outputs reduce-scattered back ({d} dispatcher)"),
                    None => "dispatched and combined by all-to-all".to_string(),
                }
            ) + &self
                .routing
                .as_ref()
                .map(|r| format!("\nrouting: {r}"))
                .unwrap_or_default()
        })
    }

    /// Appends the stage lines of a report table to `s`.
    pub fn write_table(&self, s: &mut String) {
        let tp = self.stages.iter().any(|st| st.tp > 1);
        let _ = writeln!(
            s,
            "{}: {} stages, {}, {} micro-batches (largest {} samples, split {} inside each stage), idle {:.1}% of the GPUs' time",
            if tp { "3d" } else { "pipeline" },
            self.stages.len(),
            self.schedule,
            self.microbatches,
            self.microbatch_size,
            if self.stages.iter().any(|s| !s.shares.is_empty()) {
                "by the replicas' shares (speed)"
            } else {
                "evenly"
            },
            self.bubble_pct
        );
        if tp {
            let _ = writeln!(
                s,
                "per stage: TP groups of `tp` consecutive ranks{}, `dp` replicas of them; tp comm: the exposed per-layer TP collectives (part of exp.comm)",
                if self.sequence_parallel {
                    " with sequence parallelism"
                } else {
                    ""
                }
            );
        }
        if let Some(line) = self.expert_line() {
            let _ = writeln!(s, "{line}");
        }
        let knob = |on: bool| if on { "on" } else { "off" };
        let sync = match self.grad_sync.as_str() {
            "buckets" => "in buckets during the last backward",
            "per unit" => "per unit during the last backward (FSDP2)",
            "after backward" => "after the last backward",
            other => other,
        };
        let _ = writeln!(
            s,
            "overlap: tp-comm-overlap {}, overlap-grad-reduce {}, overlap-param-gather {}; data-parallel gradients reduced {sync}{}",
            knob(self.tp_comm_overlap),
            knob(self.overlap_grad_reduce),
            knob(self.overlap_param_gather),
            match &self.rank_order {
                Some(o) => format!("; ranks in {o} order"),
                None => String::new(),
            }
        );
        let mut header = vec!["stage", "blocks", "gpus", "ranks"];
        if tp {
            header.extend(["tp", "dp"]);
        }
        header.extend(["compute ms", "exp.comm ms"]);
        if tp {
            header.push("tp comm ms");
        }
        let ep = self.expert_parallel > 1;
        if ep {
            header.push("ep comm ms");
        }
        header.extend(["idle ms", "peak GiB", "usable GiB"]);
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        rows.extend(self.stages.iter().map(|st| self.stage_row(st, tp, ep)));
        write_aligned(s, &rows, |c| (1..=3).contains(&c));
    }
}
