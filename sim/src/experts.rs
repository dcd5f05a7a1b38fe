//! Mixture-of-experts MLPs: which blocks route their tokens to experts, how
//! many experts there are, how many each token visits, and the parameters
//! and FLOPs per token that follow (REAL-SYSTEMS-3 §1.1-1.2).
//!
//! An MoE block replaces the dense MLP by a router (`h x E` logits, one
//! GEMM), `E` routed experts of which each token visits `k`, and `E_s`
//! shared experts every token visits. Every expert here is a SwiGLU FFN
//! (`h -> 2 f_e -> h`, `3 h f_e` weights), as in every model the catalog
//! names (Mixtral, Qwen-MoE, DeepSeek-V2/V3, Llama 4, GPT-OSS, OLMoE):
//!
//! ```text
//! P_expert = 3 h f_e     P_router = h E     P_shared = E_s 3 h f_s
//! P_moe    = E P_expert + P_shared + P_router            (what the block holds)
//! P_active = k P_expert + P_shared + P_router            (what a token meets)
//! forward GEMM FLOPs per token = 2 P_active
//! ```
//!
//! Biases inside experts or on the router (GPT-OSS has both) are not
//! counted: under 0.01% of any catalogued model.

use crate::limits::MAX_EXPERTS;
use serde::{Deserialize, Serialize};

/// A set of a model's blocks, as catalogs name it: `all`, `every:K`
/// (blocks K, 2K, 3K, ... counting from 1: Llama 4's
/// `interleave_moe_layer_step`, Qwen-MoE's `decoder_sparse_step`) or
/// `after:K` (all but the first K: DeepSeek's `first_k_dense_replace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum LayerSet {
    /// Every block.
    All,
    /// Every K-th block, counting from 1 (K >= 1).
    Every(u32),
    /// Every block after the first K.
    After(u32),
    /// Every block but every K-th (counting from 1): the complement of
    /// `every:K` (Llama 4's chunked-attention blocks, GPT-OSS's
    /// sliding-window blocks).
    AllButEvery(u32),
}

impl LayerSet {
    /// What the catalog and the errors call the accepted forms.
    pub const FORMS: &'static str = "`all`, `every:K` (blocks K, 2K, ... from 1), `all-but-every:K` (the others) or `after:K` (all but the first K)";

    /// Parses `all`, `every:K` or `after:K`.
    pub fn parse(text: &str) -> Result<LayerSet, String> {
        let t = text.trim();
        if t == "all" {
            return Ok(LayerSet::All);
        }
        let number = |s: &str| -> Result<u32, String> {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("expected {}, got `{text}`", LayerSet::FORMS))
        };
        if let Some(k) = t.strip_prefix("all-but-every:") {
            let k = number(k)?;
            if k < 2 {
                return Err(format!("all-but-every:K needs K >= 2, got `{text}`"));
            }
            return Ok(LayerSet::AllButEvery(k));
        }
        if let Some(k) = t.strip_prefix("every:") {
            let k = number(k)?;
            if k == 0 {
                return Err(format!("every:K needs K >= 1, got `{text}`"));
            }
            return Ok(if k == 1 {
                LayerSet::All
            } else {
                LayerSet::Every(k)
            });
        }
        if let Some(k) = t.strip_prefix("after:") {
            let k = number(k)?;
            return Ok(if k == 0 {
                LayerSet::All
            } else {
                LayerSet::After(k)
            });
        }
        Err(format!("expected {}, got `{text}`", LayerSet::FORMS))
    }

    /// The catalog form (`all`, `every:2`, `after:3`).
    pub fn name(&self) -> String {
        match self {
            LayerSet::All => "all".into(),
            LayerSet::Every(k) => format!("every:{k}"),
            LayerSet::After(k) => format!("after:{k}"),
            LayerSet::AllButEvery(k) => format!("all-but-every:{k}"),
        }
    }

    /// Whether block `index` (0-based) is in the set.
    pub fn contains(&self, index: u32) -> bool {
        match *self {
            LayerSet::All => true,
            LayerSet::Every(k) => (index + 1).is_multiple_of(k),
            LayerSet::After(k) => index >= k,
            LayerSet::AllButEvery(k) => !(index + 1).is_multiple_of(k),
        }
    }

    /// How many of `layers` blocks are in the set.
    pub fn count(&self, layers: u32) -> u32 {
        match *self {
            LayerSet::All => layers,
            LayerSet::Every(k) => layers / k,
            LayerSet::After(k) => layers.saturating_sub(k),
            LayerSet::AllButEvery(k) => layers - layers / k,
        }
    }

    /// The set whose membership of blocks `0..layers` is `member`, when
    /// it has one of the forms; `None` otherwise (or when it is empty).
    pub fn of_members(member: &[bool]) -> Option<LayerSet> {
        let n = member.len() as u32;
        let mut candidates = vec![LayerSet::All];
        for k in 1..=n {
            candidates.push(LayerSet::After(k));
        }
        for k in 2..=n.max(2) {
            candidates.push(LayerSet::Every(k));
            candidates.push(LayerSet::AllButEvery(k));
        }
        candidates
            .into_iter()
            .find(|s| s.count(n) > 0 && (0..n).all(|i| s.contains(i) == member[i as usize]))
    }
}

impl TryFrom<String> for LayerSet {
    type Error = String;
    fn try_from(s: String) -> Result<LayerSet, String> {
        LayerSet::parse(&s)
    }
}

impl From<LayerSet> for String {
    fn from(s: LayerSet) -> String {
        s.name()
    }
}

/// How tokens reach their experts under expert parallelism: Megatron-Core's
/// token dispatchers (`--moe-token-dispatcher-type`, REAL-SYSTEMS-3 §1.4).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub enum Dispatcher {
    /// All-to-all: each rank sends the `k` copies of its tokens to the
    /// ranks holding their experts and gets the outputs back (torchtitan,
    /// DeepSpeed-MoE, Megatron's `alltoall`).
    #[default]
    AllToAll,
    /// All-gather: every rank gathers every token of its expert-TP x EP
    /// group (hidden states, probabilities and routing map), keeps those
    /// routed to its experts and reduce-scatters the outputs back
    /// (Megatron's `allgather`, its default): volume independent of `k`.
    AllGather,
}

impl Dispatcher {
    /// Megatron's name: `alltoall` or `allgather`.
    pub fn name(self) -> &'static str {
        match self {
            Dispatcher::AllToAll => "alltoall",
            Dispatcher::AllGather => "allgather",
        }
    }

    /// Parses Megatron's name or the collective's (`all-to-all`,
    /// `all-gather`); `None` otherwise.
    pub fn parse(s: &str) -> Option<Dispatcher> {
        match s
            .trim()
            .to_ascii_lowercase()
            .replace(['-', '_'], "")
            .as_str()
        {
            "alltoall" => Some(Dispatcher::AllToAll),
            "allgather" => Some(Dispatcher::AllGather),
            _ => None,
        }
    }

    /// Whether this is the default ([`Dispatcher::AllToAll`]).
    pub fn is_default(&self) -> bool {
        *self == Dispatcher::AllToAll
    }
}

impl TryFrom<String> for Dispatcher {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Dispatcher::parse(&s).ok_or_else(|| {
            format!("expected a token dispatcher, `alltoall` or `allgather`, got `{s}`")
        })
    }
}

impl From<Dispatcher> for String {
    fn from(d: Dispatcher) -> String {
        d.name().to_string()
    }
}

/// The mixture-of-experts MLP of a model's MoE blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Moe {
    /// Routed experts `E`.
    pub experts: u32,
    /// Experts each token is routed to, `k`.
    pub top_k: u32,
    /// Inner width of one routed expert's SwiGLU, `f_e`.
    pub expert_ffn: u32,
    /// Shared experts every token goes through, `E_s` (0: none).
    pub shared_experts: u32,
    /// Inner width of one shared expert, `f_s` (DeepSeek: `f_e`; Qwen2-MoE
    /// gives its own).
    pub shared_expert_ffn: u32,
    /// Which blocks are MoE blocks (the others run the dense MLP of width
    /// `ffn`).
    pub layers: LayerSet,
    /// Expert capacity factor (tokens over `CF x k T / E` per expert are
    /// dropped); `None` = dropless, the default of Megatron-Core and
    /// torchtitan.
    pub capacity_factor: Option<f64>,
    /// Measured routing imbalance: the routed copies the busiest rank of an
    /// expert-parallel group receives, over the group's mean (1 = perfectly
    /// balanced); `None` = the statistical model of
    /// [`Moe::busiest_rank_load`]. A property of a training run's router,
    /// as the capacity factor is of its recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_imbalance: Option<f64>,
}

impl Moe {
    /// Weights of one routed expert: `3 h f_e`.
    pub fn expert_params(&self, hidden: u32) -> u64 {
        3 * hidden as u64 * self.expert_ffn as u64
    }

    /// Weights of the shared experts: `E_s 3 h f_s`.
    pub fn shared_params(&self, hidden: u32) -> u64 {
        self.shared_experts as u64 * 3 * hidden as u64 * self.shared_expert_ffn as u64
    }

    /// Token copies each expert computes, per routed copy: 1 dropless
    /// (balanced routing), the capacity factor when one is set (every
    /// expert padded to `CF k T / E` rows: DeepSpeed-MoE always pads,
    /// Megatron with `--moe-pad-expert-input-to-capacity`; the model's
    /// useful FLOPs stay `k T`).
    pub fn padding(&self) -> f64 {
        self.capacity_factor.unwrap_or(1.0)
    }

    /// Routed copies the busiest rank of an expert-parallel group of `e`
    /// ranks computes and receives, per copy of the group's mean, when a
    /// rank's mean is `mean_copies` (its share of the group's `k T` routed
    /// copies). The group meets at every dispatch and combine, so this rank
    /// sets the pace of every MoE block.
    ///
    /// - With a capacity factor every expert is padded (or cut) to capacity:
    ///   [`Moe::padding`], whatever the routing.
    /// - Without EP (`e = 1`) a rank computes exactly its own tokens' `k T`
    ///   copies: 1.
    /// - With a measured [`Moe::routing_imbalance`]: that.
    /// - Otherwise the stated model, balanced top-k routing (what a
    ///   load-balancing loss or DeepSeek's bias update aims at): each token
    ///   picks `k` distinct experts uniformly, so the copies landing on the
    ///   `e` ranks' expert sets (`E/e` each) are multivariate hypergeometric
    ///   per token, covariance `k c (diag(p) - p p^T)` with `p = 1/e` and
    ///   `c = (E-k)/(E-1)`. Summed over the group's tokens the loads are
    ///   normal with that covariance, which is `sigma^2 (I - J/e)`: the
    ///   deviations of `e` independent normals of spread
    ///   `sigma = sqrt(c mean_copies)` from their average. The busiest rank
    ///   thus sits [`expected_max_of_normals`]`(e)` times `sigma` above the
    ///   mean: a relative excess of `z_e sqrt(c / mean_copies)`. At the token counts of training (thousands of copies per
    ///   rank) this is 1-3%: routing that is only statistically unbalanced
    ///   costs little, and measured runs that lose more (a router that
    ///   prefers some experts within a batch) are given with the knob.
    pub fn busiest_rank_load(&self, e: u32, mean_copies: f64) -> f64 {
        if self.capacity_factor.is_some() {
            return self.padding();
        }
        if e <= 1 {
            return 1.0;
        }
        if let Some(x) = self.routing_imbalance {
            return x;
        }
        if mean_copies <= 0.0 || self.experts <= 1 {
            return 1.0;
        }
        let (experts, k) = (self.experts as f64, self.top_k as f64);
        let spread = ((experts - k) / (experts - 1.0) / mean_copies).sqrt();
        1.0 + expected_max_of_normals(e) * spread
    }

    /// The routing [`Moe::busiest_rank_load`] assumes, in words, for a
    /// report: the capacity rule, the measured factor, or the statistical
    /// model.
    pub fn routing_assumption(&self) -> String {
        match (self.capacity_factor, self.routing_imbalance) {
            (Some(cf), _) => format!("every expert padded to capacity factor {cf}"),
            (None, Some(x)) => format!(
                "measured imbalance: the busiest EP rank gets {x} x the mean of the routed copies (given; its compute and exchanges grow by it, memory keeps the mean share)"
            ),
            (None, None) => "balanced top-k routing (default): the busiest EP rank's load is the expected maximum of the ranks' random shares".to_string(),
        }
    }

    /// Whether routing is the identity: one routed expert, each token's
    /// only choice, no shared experts, no capacity. A softmax over one
    /// logit is 1 whatever the router's weights, so such a block is its
    /// dense twin: no router is counted or run.
    pub fn is_identity(&self) -> bool {
        self.experts == 1
            && self.top_k == 1
            && self.shared_experts == 0
            && self.capacity_factor.is_none()
    }

    /// Weights of the router: `h E` (none for [`Moe::is_identity`]).
    pub fn router_params(&self, hidden: u32) -> u64 {
        if self.is_identity() {
            return 0;
        }
        hidden as u64 * self.experts as u64
    }

    /// Every weight of one MoE MLP: routed, shared and router.
    pub fn mlp_params(&self, hidden: u32) -> u64 {
        self.experts as u64 * self.expert_params(hidden)
            + self.shared_params(hidden)
            + self.router_params(hidden)
    }

    /// The weights one token meets in one MoE MLP: `k` routed experts, the
    /// shared ones and the router.
    pub fn active_mlp_params(&self, hidden: u32) -> u64 {
        self.top_k as u64 * self.expert_params(hidden)
            + self.shared_params(hidden)
            + self.router_params(hidden)
    }

    /// Bytes per token an expert block keeps for its backward beyond a
    /// dense MLP of the width a token runs through (REAL-SYSTEMS-3 §1.3's
    /// table, Megatron's alltoall path): the router's logits in the
    /// compute dtype and its fp32 probabilities (`(e + 4) E`), the `k`
    /// dispatched copies of the token the experts' first GEMM keeps for
    /// its weight gradient, and the `k` expert outputs kept before the
    /// weighted combine for the probabilities' gradient (`2 k h e`), with
    /// `e` bytes per element.
    pub fn routing_bytes_per_token(&self, hidden: u32, e: f64) -> f64 {
        (e + 4.0) * self.experts as f64
            + 2.0 * self.top_k as f64 * self.padding() * hidden as f64 * e
    }

    /// Checks the numbers against each other and the model's depth;
    /// `bad(field, message)` makes the error.
    pub fn check<E>(&self, layers: u32, bad: &impl Fn(&str, String) -> E) -> Result<(), E> {
        for (f, v) in [
            ("experts", self.experts),
            ("top_k", self.top_k),
            ("expert_ffn", self.expert_ffn),
        ] {
            if v == 0 {
                return Err(bad(f, "expected a positive integer, got 0".into()));
            }
        }
        if self.experts > MAX_EXPERTS {
            return Err(bad(
                "experts",
                format!(
                    "expected at most {MAX_EXPERTS} experts (the largest released model has 384), got {}",
                    self.experts
                ),
            ));
        }
        if self.top_k > self.experts {
            return Err(bad(
                "top_k",
                format!(
                    "a token cannot visit {} of {} experts",
                    self.top_k, self.experts
                ),
            ));
        }
        if self.shared_experts > 0 && self.shared_expert_ffn == 0 {
            return Err(bad(
                "shared_expert_ffn",
                "expected a positive width for the shared experts".into(),
            ));
        }
        if self.layers.count(layers) == 0 {
            return Err(bad(
                "moe_layers",
                format!(
                    "`{}` selects none of the {layers} blocks",
                    self.layers.name()
                ),
            ));
        }
        if let Some(cf) = self.capacity_factor {
            let range = &crate::physical::CAPACITY_FACTOR;
            if !range.contains(cf) {
                return Err(bad("capacity_factor", range.expected(cf)));
            }
            if cf > self.experts as f64 {
                return Err(bad(
                    "capacity_factor",
                    format!(
                        "a factor of {} (the expert count) already takes every token, got {cf}",
                        self.experts
                    ),
                ));
            }
        }
        if let Some(x) = self.routing_imbalance {
            let range = &crate::physical::ROUTING_IMBALANCE;
            if !range.contains(x) {
                return Err(bad("routing_imbalance", range.expected(x)));
            }
            if let Some(cf) = self.capacity_factor {
                return Err(bad(
                    "routing_imbalance",
                    format!("every expert is padded to capacity factor {cf}: its experts compute the capacity whatever the routing"),
                ));
            }
        }
        Ok(())
    }
}

/// Expected maximum of `n` independent standard normal variables (0 for
/// `n <= 1`): `E[max] = integral of x d(Phi(x)^n)`, summed on a grid of
/// 1/256 over [-9, 9] with `Phi` accumulated by the trapezoid rule
/// (exact to 1e-6; 0.5642 for 2, 1.4236 for 8, 2.4655 for 64).
pub fn expected_max_of_normals(n: u32) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    // (Each thread integrates a group size once: pricing asks per block.)
    thread_local! {
        static KNOWN: std::cell::RefCell<rustc_hash::FxHashMap<u32, f64>> =
            std::cell::RefCell::default();
    }
    KNOWN.with(|k| *k.borrow_mut().entry(n).or_insert_with(|| integrate_max(n)))
}

/// [`expected_max_of_normals`] by quadrature.
fn integrate_max(n: u32) -> f64 {
    const STEP: f64 = 1.0 / 256.0;
    let pdf = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let (mut x, mut cdf, mut prev, mut sum) = (-9.0, 0.0f64, 0.0f64, 0.0);
    while x < 9.0 {
        let next = x + STEP;
        cdf += 0.5 * STEP * (pdf(x) + pdf(next));
        let now = cdf.min(1.0).powi(n as i32);
        sum += (x + 0.5 * STEP) * (now - prev);
        prev = now;
        x = next;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_sets_parse_print_and_count() {
        for (text, set, count_of_61) in [
            ("all", LayerSet::All, 61),
            ("every:1", LayerSet::All, 61),
            ("every:2", LayerSet::Every(2), 30),
            ("after:3", LayerSet::After(3), 58),
            ("after:0", LayerSet::All, 61),
            ("all-but-every:4", LayerSet::AllButEvery(4), 46),
        ] {
            let s = LayerSet::parse(text).unwrap();
            assert_eq!(s, set, "{text}");
            assert_eq!(s.count(61), count_of_61, "{text}");
            assert_eq!(LayerSet::parse(&s.name()).unwrap(), s);
            assert_eq!(
                (0..61).filter(|&i| s.contains(i)).count() as u32,
                count_of_61
            );
        }
        // Llama 4's interleave step 2: the second, fourth, ... blocks.
        assert!(!LayerSet::Every(2).contains(0) && LayerSet::Every(2).contains(1));
        let gpt_oss: Vec<bool> = (0..36).map(|i| i % 2 == 0).collect();
        assert_eq!(
            LayerSet::of_members(&gpt_oss),
            Some(LayerSet::AllButEvery(2))
        );
        let odd: Vec<bool> = (0..10).map(|i| i == 3).collect();
        assert_eq!(LayerSet::of_members(&odd), None);
        for bad in [
            "",
            "every:0",
            "every:x",
            "some",
            "after:-1",
            "all-but-every:1",
        ] {
            assert!(LayerSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn active_params_count_k_experts_the_shared_ones_and_the_router() {
        // DeepSeek-V3's MLP: 256 experts of 2048, top-8, one shared.
        let m = Moe {
            experts: 256,
            top_k: 8,
            expert_ffn: 2048,
            shared_experts: 1,
            shared_expert_ffn: 2048,
            layers: LayerSet::After(3),
            capacity_factor: None,
            routing_imbalance: None,
        };
        let h = 7168u64;
        assert_eq!(m.mlp_params(7168), 257 * 3 * h * 2048 + h * 256);
        assert_eq!(m.active_mlp_params(7168), 9 * 3 * h * 2048 + h * 256);
        // (8 + 1) x 2048 = 18,432, the dense MLP width: equal GEMM FLOPs.
        assert_eq!(
            m.active_mlp_params(7168) - m.router_params(7168),
            3 * h * 18432
        );
    }

    /// Known closed forms: `E[max of 2] = 1/sqrt(pi)`, `E[max of 3] =
    /// 3 / (2 sqrt(pi))`; and the tabulated 1.4236 for 8 (Harter 1961).
    #[test]
    fn expected_maxima_of_normals_match_their_closed_forms() {
        let pi = std::f64::consts::PI;
        assert_eq!(expected_max_of_normals(1), 0.0);
        for (n, want) in [(2, 1.0 / pi.sqrt()), (3, 1.5 / pi.sqrt()), (8, 1.4236)] {
            let got = expected_max_of_normals(n);
            assert!((got - want).abs() < 1e-4, "n {n}: {got} vs {want}");
        }
    }

    /// The statistical model against top-k routing drawn at random: each of
    /// `T` tokens picks `k` distinct experts uniformly, the busiest of `e`
    /// ranks (each `E/e` experts) counted, averaged over trials. The model's
    /// excess over the mean within 15% of the drawn one (normal
    /// approximation of a sum of thousands of hypergeometric draws; the
    /// ranks' loads sum to `k T`, which an independent-ranks model would
    /// miss by 29% at `e = 2`).
    #[test]
    fn the_busiest_rank_load_is_what_random_top_k_routing_gives() {
        let moe = Moe {
            experts: 16,
            top_k: 2,
            expert_ffn: 64,
            shared_experts: 0,
            shared_expert_ffn: 0,
            layers: LayerSet::All,
            capacity_factor: None,
            routing_imbalance: None,
        };
        // A counter-based generator (splitmix64): reproducible draws.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for (e, tokens) in [(2u32, 2048u32), (4, 1024), (8, 4096)] {
            let trials = 400;
            let mut excess = 0.0;
            for _ in 0..trials {
                let mut per_rank = vec![0u32; e as usize];
                for _ in 0..tokens {
                    let a = (next() % 16) as u32;
                    let mut b = (next() % 15) as u32;
                    if b >= a {
                        b += 1;
                    }
                    for x in [a, b] {
                        per_rank[(x / (16 / e)) as usize] += 1;
                    }
                }
                let mean = 2.0 * tokens as f64 / e as f64;
                excess += *per_rank.iter().max().unwrap() as f64 / mean - 1.0;
            }
            let drawn = excess / trials as f64;
            let mean_copies = 2.0 * tokens as f64 / e as f64;
            let model = moe.busiest_rank_load(e, mean_copies) - 1.0;
            assert!(
                (model - drawn).abs() <= 0.15 * drawn,
                "e {e}, {tokens} tokens: model +{:.2}%, drawn +{:.2}%",
                100.0 * model,
                100.0 * drawn
            );
        }
        // Without EP a rank computes its own copies; a measured factor and
        // a capacity win over the statistics.
        assert_eq!(moe.busiest_rank_load(1, 4096.0), 1.0);
        let given = Moe {
            routing_imbalance: Some(1.3),
            ..moe.clone()
        };
        assert_eq!(given.busiest_rank_load(8, 4096.0), 1.3);
        assert_eq!(given.busiest_rank_load(1, 4096.0), 1.0);
        let padded = Moe {
            capacity_factor: Some(1.25),
            ..moe.clone()
        };
        assert_eq!(padded.busiest_rank_load(8, 4096.0), 1.25);
        assert_eq!(padded.busiest_rank_load(1, 4096.0), 1.25);
    }

    #[test]
    fn impossible_experts_are_refused_naming_the_field() {
        let ok = Moe {
            experts: 8,
            top_k: 2,
            expert_ffn: 14336,
            shared_experts: 0,
            shared_expert_ffn: 0,
            layers: LayerSet::All,
            capacity_factor: Some(1.25),
            routing_imbalance: None,
        };
        let bad = |f: &str, m: String| format!("{f}: {m}");
        assert!(ok.check(32, &bad).is_ok());
        for (m, field) in [
            (
                Moe {
                    top_k: 9,
                    ..ok.clone()
                },
                "top_k",
            ),
            (
                Moe {
                    experts: 0,
                    ..ok.clone()
                },
                "experts",
            ),
            (
                Moe {
                    experts: 100_000,
                    top_k: 2,
                    ..ok.clone()
                },
                "experts",
            ),
            (
                Moe {
                    capacity_factor: Some(f64::NAN),
                    ..ok.clone()
                },
                "capacity_factor",
            ),
            (
                Moe {
                    capacity_factor: Some(0.0),
                    ..ok.clone()
                },
                "capacity_factor",
            ),
            (
                Moe {
                    routing_imbalance: Some(0.9),
                    ..ok.clone()
                },
                "routing_imbalance",
            ),
            (
                Moe {
                    routing_imbalance: Some(f64::INFINITY),
                    ..ok.clone()
                },
                "routing_imbalance",
            ),
            (
                // (`ok` pads to capacity: the routing cannot move it.)
                Moe {
                    routing_imbalance: Some(1.3),
                    ..ok.clone()
                },
                "routing_imbalance",
            ),
            (
                Moe {
                    layers: LayerSet::After(32),
                    ..ok.clone()
                },
                "moe_layers",
            ),
            (
                Moe {
                    shared_experts: 1,
                    ..ok.clone()
                },
                "shared_expert_ffn",
            ),
        ] {
            let e = m.check(32, &bad).unwrap_err();
            assert!(e.starts_with(field), "{e}");
        }
    }
}
