//! The answers of `cephalo whatif` (`cephalo-whatif/1`): each question's
//! JSON schema (the types, wrapping [`crate::whatif`]'s results with the
//! workload they answer for) and its text table.

use crate::whatif::{Fit, MemoryAnswer, OfferMin, Rental, TrainCost, Tried};
use serde::Serialize;

/// The schema tag of every answer.
pub const FORMAT: &str = "cephalo-whatif/1";

/// `whatif train-cost`'s answer.
#[derive(Debug, Serialize)]
pub struct TrainCostAnswer {
    /// [`FORMAT`].
    pub format: &'static str,
    /// `train-cost`.
    pub question: &'static str,
    /// The model.
    pub model: String,
    /// The cluster's GPUs, as runs of names.
    pub gpus: String,
    /// The planner that made the plan.
    pub planner: String,
    /// The plan's label.
    pub strategy: String,
    /// Days, GPU-hours and USD.
    #[serde(flatten)]
    pub cost: TrainCost,
}

/// `whatif min-gpus`'s answer on one GPU type.
#[derive(Debug, Serialize)]
pub struct MinGpusAnswer {
    /// [`FORMAT`].
    pub format: &'static str,
    /// `min-gpus`.
    pub question: &'static str,
    /// The model.
    pub model: String,
    /// The GPU type.
    pub gpu: String,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// The largest count tried.
    pub max_gpus: u32,
    /// The smallest count that fits and trains (null: none up to the max).
    pub min_gpus: Option<u32>,
    /// Simulated tokens/s of Cephalo's plan on that count.
    pub tokens_per_s: Option<f64>,
    /// Every count tried, in order.
    pub tried: Vec<Tried>,
}

/// `whatif min-gpus --pool`'s answer: each offer's fewest servers.
#[derive(Debug, Serialize)]
pub struct OfferMinsAnswer {
    /// [`FORMAT`].
    pub format: &'static str,
    /// `min-gpus`.
    pub question: &'static str,
    /// The model.
    pub model: String,
    /// The pool's name (or its file).
    pub pool: String,
    /// Per offer, its fewest servers that fit and train.
    pub offers: Vec<OfferMin>,
}

/// `whatif fit`'s answer.
#[derive(Debug, Serialize)]
pub struct FitAnswer {
    /// [`FORMAT`].
    pub format: &'static str,
    /// `fit`.
    pub question: &'static str,
    /// The model.
    pub model: String,
    /// The cluster's GPUs, as runs of names.
    pub gpus: String,
    /// The planner asked for.
    pub planner: String,
    /// Whether the workload fits as asked.
    pub fits_as_asked: bool,
    /// Every change tried.
    #[serde(flatten)]
    pub fit: Fit,
}

/// `whatif memory`'s answer.
#[derive(Debug, Serialize)]
pub struct MemoryAnswers {
    /// [`FORMAT`].
    pub format: &'static str,
    /// `memory`.
    pub question: &'static str,
    /// The model.
    pub model: String,
    /// Tokens per sample.
    pub seq_len: u32,
    /// The compute format.
    pub dtype: String,
    /// One answer per micro-batch size.
    pub rows: Vec<MemoryAnswer>,
}

/// `whatif cheapest`'s answer.
#[derive(Debug, Serialize)]
pub struct CheapestAnswer {
    /// [`FORMAT`].
    pub format: &'static str,
    /// `cheapest`.
    pub question: &'static str,
    /// The model.
    pub model: String,
    /// The pool's name (or its file).
    pub pool: String,
    /// The planner asked for.
    pub planner: String,
    /// The selections tried and the cheapest.
    #[serde(flatten)]
    pub rental: Rental,
}

impl TrainCostAnswer {
    /// The text table: the workload, then tokens, days, GPU-hours and USD.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let out = self;
        let mut s = String::new();
        let c = &out.cost;
        let _ = writeln!(
            s,
            "{} on [{}] with {} ({})",
            out.model, out.gpus, out.planner, out.strategy
        );
        let _ = writeln!(s, "{:<22} {:>16.4e}", "tokens", c.tokens);
        let _ = writeln!(s, "{:<22} {:>16.0}", "tokens/s", c.tokens_per_s);
        let _ = writeln!(s, "{:<22} {:>16.2}", "days", c.days);
        let _ = writeln!(s, "{:<22} {:>16.0}", "GPU-hours", c.gpu_hours);
        let _ = writeln!(
            s,
            "{:<22} {:>16.2}",
            "cluster USD/hour", c.price_per_hour_usd
        );
        let _ = writeln!(s, "{:<22} {:>16.0}", "USD", c.usd);
        let _ = writeln!(
            s,
            "(simulated throughput, no restarts, evaluation or data loading)"
        );
        s
    }
}

impl MinGpusAnswer {
    /// The text table: the fewest count (or none), then every count tried.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let out = self;
        let mut s = String::new();
        let _ = match (out.min_gpus, out.tokens_per_s) {
                (Some(n), tps) => writeln!(
s,
                    "{}: {n} x {} ({} per node) is the fewest that fits and trains (Cephalo's plan: {} tokens/s)",
                    out.model,
                    out.gpu,
                    out.gpus_per_node,
                    tps.map_or("-".into(), |t| format!("{t:.0}"))
                ),
                (None, _) => writeln!(
s,
                    "{}: no count of {} up to {} fits and trains",
                    out.model,
                    out.gpu,
                    out.max_gpus
                ),
            };
        let tried: Vec<String> = out
            .tried
            .iter()
            .map(|t| format!("{} {}", t.gpus, if t.fits { "fits" } else { "no" }))
            .collect();
        let _ = writeln!(s, "tried: {}", tried.join(", "));
        s
    }
}

impl OfferMinsAnswer {
    /// The text table: one row per offer.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let out = self;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: the fewest servers of each offer that fit and train (Cephalo's planner)",
            out.model
        );
        let _ = writeln!(
            s,
            "{:<16} {:>9} {:>9} {:>9} {:>11} {:>10}",
            "gpu", "per node", "nodes", "gpus", "tokens/s", "USD/hour"
        );
        for o in &out.offers {
            let f = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |v| format!("{v:.d$}"));
            let _ = writeln!(
                s,
                "{:<16} {:>9} {:>9} {:>9} {:>11} {:>10}",
                o.gpu,
                o.gpus_per_node,
                o.min_nodes
                    .map_or(format!("none of {}", o.max_nodes), |k| k.to_string()),
                o.min_gpus.map_or("-".into(), |g| g.to_string()),
                f(o.tokens_per_s, 0),
                f(o.usd_per_hour, 2)
            );
        }
        s
    }
}

impl FitAnswer {
    /// `whatif fit` as a table: the verdict, the cheapest change, one row per
    /// change, then why each that does not fit falls short.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let out = self;
        let mut s = String::new();
        let rows = &out.fit.rows;
        let opt = |x: Option<f64>, p: usize| x.map_or("-".to_string(), |v| format!("{v:.p$}"));
        let _ = writeln!(
            s,
            "{} on [{}] with --planner {}: {}",
            out.model,
            out.gpus,
            out.planner,
            if out.fits_as_asked {
                "fits as asked; other changes that fit are listed for comparison"
            } else {
                "does not fit as asked"
            }
        );
        let _ = match out.fit.cheapest {
            Some(0) => writeln!(
                s,
                "as asked is the cheapest of what was tried ({})",
                out.fit.judged_by
            ),
            Some(i) => {
                let r = &rows[i];
                writeln!(
                    s,
                    "{}: {} ({}): {} tokens/s on {} GPUs{} (judged by {})",
                    if out.fits_as_asked {
                        "cheaper than as asked"
                    } else {
                        "cheapest change that fits"
                    },
                    r.change,
                    if r.flags.is_empty() {
                        "no flag"
                    } else {
                        &r.flags
                    },
                    opt(r.tokens_per_s, 0),
                    r.gpus,
                    r.usd_per_mtokens.map_or(String::new(), |u| format!(
                        ", {u:.2} USD per million tokens"
                    )),
                    out.fit.judged_by
                )
            }
            None => writeln!(s, "no change tried fits"),
        };
        let w = rows
            .iter()
            .map(|r| r.change.len())
            .max()
            .unwrap_or(6)
            .max(6);
        let _ = writeln!(
            s,
            "{:<w$} {:>5} {:>4} {:>10} {:>9} {:>6} {:>8} {:>9}  {:<14} flags",
            "change",
            "gpus",
            "fits",
            "tokens/s",
            "tok/s/GPU",
            "MFU%",
            "peak%use",
            "USD/Mtok",
            "planner",
        );
        for r in rows {
            let _ = writeln!(
                s,
                "{:<w$} {:>5} {:>4} {:>10} {:>9} {:>6} {:>8} {:>9}  {:<14} {}",
                r.change,
                r.gpus,
                if r.fits { "yes" } else { "no" },
                opt(r.tokens_per_s.filter(|_| r.fits), 0),
                opt(r.tokens_per_s_per_gpu.filter(|_| r.fits), 1),
                opt(r.mfu.filter(|_| r.fits).map(|m| m * 100.0), 1),
                opt(r.peak_usable_pct, 1),
                opt(r.usd_per_mtokens, 2),
                r.planner.as_deref().unwrap_or("-"),
                r.flags
            );
        }
        for r in rows.iter().filter(|r| !r.fits) {
            if let Some(why) = &r.why {
                let _ = writeln!(s, "  {}: {why}", r.change);
            }
        }
        s
    }
}

impl MemoryAnswers {
    /// `whatif memory` as a table: the state, then per micro-batch size what
    /// the peak holds and which GPUs hold it.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let out = self;
        let mut s = String::new();
        let Some(first) = out.rows.first() else {
            return s;
        };
        let _ = writeln!(
            s,
            "{}: {:.3e} parameters, seq {}, {}; {} over {} GPUs, {} micro-batch(es) per iteration",
            out.model,
            first.params as f64,
            out.seq_len,
            out.dtype,
            first.strategy,
            first.gpus,
            first.microbatches
        );
        let _ = writeln!(
            s,
            "training state: {:.1} B/param, {:.2} GiB in all",
            first.state_bytes_per_param, first.state_total_gib
        );
        let _ = writeln!(
            s,
            "{:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "micro", "state", "params", "grads", "activ.", "framewk", "peak", "reserved"
        );
        for r in &out.rows {
            let b = &r.per_gpu;
            let _ = writeln!(
                s,
                "{:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                r.micro_batch_size,
                b.state_gib,
                b.unsharded_params_gib,
                b.gradients_gib,
                b.activations_gib,
                b.overhead_gib,
                b.peak_gib,
                b.reserved_gib
            );
        }
        s.push('\n');
        // Which GPUs hold it: headroom per micro-batch size (negative: short).
        let mut head = format!("{:<16} {:>8}", "gpu", "usable");
        for r in &out.rows {
            head.push_str(&format!(" {:>9}", format!("micro={}", r.micro_batch_size)));
        }
        let _ = writeln!(s, "{head}");
        for (i, f) in first.fits.iter().enumerate() {
            let mut line = format!("{:<16} {:>8.2}", f.gpu, f.usable_gib);
            for r in &out.rows {
                let g = &r.fits[i];
                line.push_str(&match &g.note {
                    Some(_) => format!(" {:>9}", "-"),
                    None => format!(" {:>+9.2}", g.headroom_gib),
                });
            }
            if let Some(n) = &f.note {
                line.push_str(&format!("  {n}"));
            }
            let _ = writeln!(s, "{line}");
        }
        let _ = writeln!(s, "(GiB per GPU at its simulated peak: state = its shard of parameters, gradients and optimizer moments;");
        let _ = writeln!(s, " params / grads = unsharded buffers alive at the peak; framewk = CUDA context, NCCL and workspaces;");
        let _ = writeln!(s, " reserved = what the caching allocator holds (torchtitan's `memory`), without the CUDA context;");
        let _ = writeln!(
            s,
            " the GPU table: usable memory less the peak, negative = short by that much)"
        );
        s
    }
}

impl CheapestAnswer {
    /// `whatif cheapest` as a table: the answer, then every selection tried,
    /// cheapest per hour first.
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let out = self;
        let mut s = String::new();
        let r = &out.rental;
        let _ = match r.cheapest.map(|i| &r.tried[i]) {
        Some(b) => writeln!(
s,
            "{}: rent {} ({} GPUs) for {:.2} USD/hour: {:.0} tokens/s, {:.3} USD per million tokens (target {:.0} tokens/s; {})",
            out.model,
            b.cluster,
            b.gpus,
            b.usd_per_hour,
            b.tokens_per_s.unwrap_or(f64::NAN),
            b.usd_per_mtokens.unwrap_or(f64::NAN),
            r.target_tokens_per_s,
            b.planner.as_deref().unwrap_or("-")
        ),
        None => writeln!(
s,
            "{}: nothing in the pool reaches {:.0} tokens/s (every selection tried is listed)",
            out.model,
            r.target_tokens_per_s
        ),
    };
        let mut order: Vec<&crate::whatif::RentRow> = r.tried.iter().collect();
        order.sort_by(|a, b| a.usd_per_hour.total_cmp(&b.usd_per_hour));
        let w = order
            .iter()
            .map(|x| x.cluster.len())
            .max()
            .unwrap_or(7)
            .max(7);
        let _ = writeln!(
            s,
            "{:<w$} {:>5} {:>10} {:>11} {:>9} {:>8}  planner",
            "servers", "gpus", "USD/hour", "tokens/s", "USD/Mtok", "reaches"
        );
        for x in order {
            let _ = writeln!(
                s,
                "{:<w$} {:>5} {:>10.2} {:>11} {:>9} {:>8}  {}",
                x.cluster,
                x.gpus,
                x.usd_per_hour,
                x.tokens_per_s
                    .map_or("no fit".into(), |t| format!("{t:.0}")),
                x.usd_per_mtokens.map_or("-".into(), |u| format!("{u:.3}")),
                if x.reaches { "yes" } else { "no" },
                x.planner.as_deref().unwrap_or("-")
            );
        }
        s
    }
}
