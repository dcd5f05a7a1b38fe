//! The sweep axes a figure may put on its x axis or split its series by:
//! their spellings, their labels (with units) and each one's value in a
//! row of results.

use super::rows::ResultRow;
use super::spelled::spelled;

spelled! {
    /// A sweep axis a figure may use (`x`, `series`).
    pub enum Axis {
        /// The cluster's label (file stem or `--gpus` list, and its variant).
        Cluster = "cluster",
        /// The model.
        Model = "model",
        /// The global batch, samples.
        GlobalBatch = "global_batch",
        /// Tokens per sample.
        SeqLen = "seq_len",
        /// The dtype.
        NumFormat = "dtype",
        /// The network bandwidth override, Gbit/s.
        NetworkGbitS = "network_gbit_s",
        /// GPUs in the cluster.
        Gpus = "gpus",
        /// The GPU type added to the cluster.
        AddGpu = "add_gpu",
        /// The planner.
        Planner = "planner",
        /// The strategy pins of the case.
        Strategy = "strategy",
        /// The memory policy.
        MemPolicy = "mem_policy",
        /// The 3D shape pins of the case.
        Shape = "shape",
        /// The collective algorithm.
        CommAlgo = "comm_algo",
        /// The measured collective tables.
        CommProfile = "comm_profile",
    }
}

impl Axis {
    /// A figure's axis label, with its unit.
    pub fn label(self) -> &'static str {
        match self {
            Axis::Cluster => "cluster",
            Axis::Model => "model",
            Axis::GlobalBatch => "global batch (samples)",
            Axis::SeqLen => "sequence length (tokens)",
            Axis::NumFormat => "dtype",
            Axis::NetworkGbitS => "network bandwidth between nodes (Gbit/s)",
            Axis::Gpus => "GPUs in the cluster",
            Axis::AddGpu => "GPU added to the cluster",
            Axis::Planner => "planner",
            Axis::Strategy => "strategy pinned",
            Axis::MemPolicy => "memory policy (physical or fraction of capacity)",
            Axis::Shape => "3D shape pinned",
            Axis::CommAlgo => "collective algorithm",
            Axis::CommProfile => "measured collectives",
        }
    }

    /// The name in a sentence (`_` as spaces).
    pub fn words(self) -> String {
        self.name().replace('_', " ")
    }

    /// This axis's value in row `r`, as text (what a figure groups by).
    pub fn of(self, r: &ResultRow) -> String {
        match self {
            Axis::Cluster => r.cluster.clone(),
            Axis::Model => r.model.clone(),
            Axis::GlobalBatch => r.global_batch.to_string(),
            Axis::SeqLen => r.seq_len.to_string(),
            Axis::NumFormat => r.dtype.clone(),
            Axis::NetworkGbitS => r.network_gbit_s.map_or(String::new(), |x| x.to_string()),
            Axis::Gpus => r.gpus.to_string(),
            Axis::AddGpu => or(&r.add_gpu, "(none)"),
            Axis::Planner => r.planner.clone(),
            Axis::Strategy => or(&r.pins, "(planner's choice)"),
            Axis::MemPolicy => r.mem_policy.clone(),
            Axis::Shape => or(&short_shape(&r.shape), "(search)"),
            Axis::CommAlgo => r.comm_algo.clone(),
            Axis::CommProfile => or(&r.comm_profile, "(analytic)"),
        }
    }
}

/// `value`, or `none` where it is empty (an axis left at its default).
fn or(value: &str, none: &str) -> String {
    if value.is_empty() { none } else { value }.to_string()
}

/// Shape pins as a figure labels them: `tp=8 pp=4 schedule=zb-h1` reads
/// `tp8 pp4 zb-h1` (chunks `v2`, micro-batch size `mb1`, `sp` / `no-sp`).
fn short_shape(pins: &str) -> String {
    pins.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some(("schedule", v)) => v.to_string(),
            Some(("virtual_stages", v)) => format!("v{v}"),
            Some(("microbatch_size", v)) => format!("mb{v}"),
            Some(("sequence_parallel", "true")) => "sp".into(),
            Some(("sequence_parallel", _)) => "no-sp".into(),
            Some((k, v)) => format!("{k}{v}"),
            None => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_axis_reads_and_writes_its_spelling() {
        for &a in Axis::ALL {
            let text = format!("a = \"{}\"\n", a.name());
            #[derive(serde::Deserialize, serde::Serialize)]
            struct T {
                a: Axis,
            }
            let t: T = toml::from_str(&text).unwrap();
            assert_eq!(t.a, a);
            assert_eq!(toml::to_string(&t).unwrap(), text);
        }
        assert_eq!(Axis::names().split(", ").count(), Axis::ALL.len());
        assert_eq!(Axis::from_name("colour"), None);
    }

    #[test]
    fn shape_labels_are_short() {
        assert_eq!(
            short_shape("tp=8 pp=4 schedule=zb-h1 virtual_stages=2 microbatch_size=1 sequence_parallel=false"),
            "tp8 pp4 zb-h1 v2 mb1 no-sp"
        );
    }
}
