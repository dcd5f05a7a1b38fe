//! The metrics a figure may show: their spellings, units and labels,
//! which way is better, and each one's value in a row of results.

use super::rows::ResultRow;
use super::spelled::spelled;

spelled! {
    /// A metric a figure may show (`y`).
    pub enum Metric {
        /// Samples/s (none when out of memory).
        SamplesPerS = "samples_per_s",
        /// Tokens/s.
        TokensPerS = "tokens_per_s",
        /// Iteration time, ms.
        IterationMs = "iteration_ms",
        /// Model FLOPS utilisation, fraction.
        Mfu = "mfu",
        /// The largest peak memory, % of usable.
        PeakUsablePct = "peak_usable_pct",
        /// USD per million tokens.
        UsdPerMillionTokens = "usd_per_million_tokens",
        /// samples/s over even FSDP's on the same workload.
        SpeedupVsFsdp = "speedup_vs_fsdp",
        /// samples/s per USD/h of the cluster.
        SamplesPerSPerUsdHour = "samples_per_s_per_usd_hour",
        /// Candidate plans the planner priced.
        SearchCandidates = "search_candidates",
        /// Plans the planner simulated or fast-evaluated.
        SearchSimulations = "search_simulations",
    }
}

impl Metric {
    /// The unit.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::SamplesPerS => "samples/s",
            Metric::TokensPerS => "tokens/s",
            Metric::IterationMs => "ms",
            Metric::Mfu => "fraction",
            Metric::PeakUsablePct => "% of usable memory",
            Metric::UsdPerMillionTokens => "USD per million tokens",
            Metric::SpeedupVsFsdp => "x over even FSDP",
            Metric::SamplesPerSPerUsdHour => "samples/s per USD/h",
            Metric::SearchCandidates => "candidate plans priced",
            Metric::SearchSimulations => "plans simulated or fast-evaluated",
        }
    }

    /// What it measures, in a figure's axis label.
    fn quantity(self) -> &'static str {
        match self {
            Metric::SamplesPerS | Metric::TokensPerS => "throughput",
            Metric::IterationMs => "iteration time",
            Metric::Mfu => "MFU",
            Metric::PeakUsablePct => "peak memory",
            Metric::UsdPerMillionTokens => "cost",
            Metric::SpeedupVsFsdp => "speed-up",
            Metric::SamplesPerSPerUsdHour => "throughput per cost",
            Metric::SearchCandidates | Metric::SearchSimulations => self.name(),
        }
    }

    /// A figure's axis label: what it measures and its unit.
    pub fn label(self) -> String {
        format!("{} ({})", self.quantity(), self.unit())
    }

    /// The name in a sentence (`_` as spaces).
    pub fn words(self) -> String {
        self.name().replace('_', " ")
    }

    /// Whether smaller values are better (time, cost, memory).
    pub fn lower_is_better(self) -> bool {
        matches!(
            self,
            Metric::IterationMs | Metric::UsdPerMillionTokens | Metric::PeakUsablePct
        )
    }

    /// This metric's value in row `r` (none without a plan, and for the
    /// throughputs when out of memory).
    pub fn of(self, r: &ResultRow) -> Option<f64> {
        match self {
            Metric::SamplesPerS => r.samples_per_s,
            Metric::TokensPerS => r.tokens_per_s,
            Metric::IterationMs => r.iteration_ms.filter(|_| !r.oom),
            Metric::Mfu => r.mfu,
            Metric::PeakUsablePct => r.peak_usable_pct,
            Metric::UsdPerMillionTokens => r.usd_per_million_tokens,
            Metric::SpeedupVsFsdp => r.speedup_vs_fsdp,
            Metric::SamplesPerSPerUsdHour => r.samples_per_s_per_usd_hour,
            Metric::SearchCandidates => r.search_candidates.map(|v| v as f64),
            Metric::SearchSimulations => r.search_simulations.map(|v| v as f64),
        }
    }
}

impl Metric {
    /// Whether the metric is a cost (it needs every GPU's price).
    pub fn needs_price(self) -> bool {
        matches!(
            self,
            Metric::UsdPerMillionTokens | Metric::SamplesPerSPerUsdHour
        )
    }

    /// The interval of this metric in row `r` from its iteration-time
    /// interval (`interval_rel`, at the sources' median errors): times and
    /// costs scale with the iteration time, rates inversely; `None` for a
    /// metric the interval says nothing about (memory, search counts, a
    /// ratio of two predictions) or a row without one.
    pub fn band(self, r: &ResultRow) -> Option<(f64, f64)> {
        let v = self.of(r)?;
        let e = r
            .interval_rel
            .filter(|e| e.is_finite() && (0.0..1.0).contains(e))?;
        match self {
            Metric::IterationMs | Metric::UsdPerMillionTokens => {
                Some((v * (1.0 - e), v * (1.0 + e)))
            }
            Metric::SamplesPerS
            | Metric::TokensPerS
            | Metric::Mfu
            | Metric::SamplesPerSPerUsdHour => Some((v / (1.0 + e), v / (1.0 - e))),
            Metric::PeakUsablePct
            | Metric::SpeedupVsFsdp
            | Metric::SearchCandidates
            | Metric::SearchSimulations => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_reads_its_spelling_and_labels_with_its_unit() {
        for &m in Metric::ALL {
            let t: std::collections::BTreeMap<String, Metric> =
                toml::from_str(&format!("y = \"{}\"", m.name())).unwrap();
            assert_eq!(t["y"], m);
            assert!(m.label().ends_with(&format!("({})", m.unit())), "{m}");
        }
        assert_eq!(Metric::SamplesPerS.label(), "throughput (samples/s)");
        assert_eq!(
            Metric::SearchCandidates.label(),
            "search_candidates (candidate plans priced)"
        );
        assert!(Metric::IterationMs.lower_is_better() && !Metric::Mfu.lower_is_better());
    }

    #[test]
    fn an_out_of_memory_run_has_no_iteration_time() {
        let r = ResultRow {
            iteration_ms: Some(5.0),
            oom: true,
            ..ResultRow::default()
        };
        assert_eq!(Metric::IterationMs.of(&r), None);
        let fits = ResultRow { oom: false, ..r };
        assert_eq!(Metric::IterationMs.of(&fits), Some(5.0));
    }

    /// Bands hold the value, times widen up and down by the relative
    /// error, rates inversely; memory has none.
    #[test]
    fn bands_follow_the_iteration_time_interval() {
        let r = ResultRow {
            iteration_ms: Some(100.0),
            samples_per_s: Some(10.0),
            peak_usable_pct: Some(50.0),
            interval_rel: Some(0.1),
            ..ResultRow::default()
        };
        let (lo, hi) = Metric::IterationMs.band(&r).unwrap();
        assert!((lo - 90.0).abs() < 1e-9 && (hi - 110.0).abs() < 1e-9);
        let (lo, hi) = Metric::SamplesPerS.band(&r).unwrap();
        assert!((lo - 10.0 / 1.1).abs() < 1e-9 && (hi - 10.0 / 0.9).abs() < 1e-9);
        assert_eq!(Metric::PeakUsablePct.band(&r), None);
        assert_eq!(
            Metric::IterationMs.band(&ResultRow {
                interval_rel: None,
                ..r
            }),
            None
        );
    }
}
