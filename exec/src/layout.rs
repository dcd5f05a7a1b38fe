//! Parameter layout of every FSDP unit (embedding, each block, head): the
//! named tensors, their shapes, their initialisation, and their place in the
//! unit's flat f32 vector. Also the counter-based generators for initial
//! parameters and token data, so any shard of any unit can be produced
//! without materialising the rest, identically on every rank.
//!
//! Units: element counts (f32 parameters), token ids.

use crate::config::{BlockConfig, BlockKind};

/// Initial value rule of one parameter tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Normal with mean 0 and this standard deviation.
    Normal(f32),
    /// All zeros (biases).
    Zeros,
    /// All ones (norm gains).
    Ones,
}

/// One named parameter tensor inside a unit's flat vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Name (for debugging).
    pub name: &'static str,
    /// Shape (row-major).
    pub shape: Vec<usize>,
    /// Start (elements) in the unit's flat vector.
    pub offset: usize,
    /// Initialisation.
    pub init: Init,
}

impl Segment {
    /// Element count.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Kind of FSDP unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitKind {
    /// Token embedding (+ learned positions for GPT).
    Embedding,
    /// Transformer block with this index (0-based).
    Block(usize),
    /// Final norm + LM head (untied from the embedding).
    Head,
}

/// Layout of one unit's flat parameter vector.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitLayout {
    /// Which unit.
    pub kind: UnitKind,
    /// Its tensors, back to back.
    pub segments: Vec<Segment>,
}

impl UnitLayout {
    /// Parameter count (elements of the flat vector).
    pub fn numel(&self) -> usize {
        self.segments.iter().map(Segment::numel).sum()
    }
}

const STD: f32 = 0.02;

fn build(kind: UnitKind, parts: Vec<(&'static str, Vec<usize>, Init)>) -> UnitLayout {
    let mut offset = 0;
    let segments = parts
        .into_iter()
        .map(|(name, shape, init)| {
            let s = Segment {
                name,
                shape,
                offset,
                init,
            };
            offset += s.numel();
            s
        })
        .collect();
    UnitLayout { kind, segments }
}

/// Layouts of all units in execution order: embedding, blocks 0..layers,
/// head. The order of segments inside a unit is the order the model code in
/// `model.rs` reads them.
pub fn unit_layouts(cfg: &BlockConfig) -> Vec<UnitLayout> {
    let (h, f, v, s) = (cfg.hidden, cfg.ffn, cfg.vocab, cfg.seq_len);
    let kv = cfg.kv_heads * cfg.head_dim();
    let mut units = Vec::with_capacity(cfg.layers + 2);
    let mut emb = vec![("tok", vec![v, h], Init::Normal(STD))];
    if cfg.family == BlockKind::Gpt {
        emb.push(("pos", vec![s, h], Init::Normal(STD)));
    }
    units.push(build(UnitKind::Embedding, emb));
    for l in 0..cfg.layers {
        let parts = match cfg.family {
            BlockKind::Gpt => vec![
                ("qkv_w", vec![3 * h, h], Init::Normal(STD)),
                ("qkv_b", vec![3 * h], Init::Zeros),
                ("o_w", vec![h, h], Init::Normal(STD)),
                ("o_b", vec![h], Init::Zeros),
                ("ln1_w", vec![h], Init::Ones),
                ("ln1_b", vec![h], Init::Zeros),
                ("fc1_w", vec![f, h], Init::Normal(STD)),
                ("fc1_b", vec![f], Init::Zeros),
                ("fc2_w", vec![h, f], Init::Normal(STD)),
                ("fc2_b", vec![h], Init::Zeros),
                ("ln2_w", vec![h], Init::Ones),
                ("ln2_b", vec![h], Init::Zeros),
            ],
            BlockKind::Llama => vec![
                ("n1_w", vec![h], Init::Ones),
                ("q_w", vec![h, h], Init::Normal(STD)),
                ("k_w", vec![kv, h], Init::Normal(STD)),
                ("v_w", vec![kv, h], Init::Normal(STD)),
                ("o_w", vec![h, h], Init::Normal(STD)),
                ("n2_w", vec![h], Init::Ones),
                ("gate_w", vec![f, h], Init::Normal(STD)),
                ("up_w", vec![f, h], Init::Normal(STD)),
                ("down_w", vec![h, f], Init::Normal(STD)),
            ],
        };
        units.push(build(UnitKind::Block(l), parts));
    }
    let head = match cfg.family {
        BlockKind::Gpt => vec![
            ("lnf_w", vec![h], Init::Ones),
            ("lnf_b", vec![h], Init::Zeros),
            ("lm_w", vec![v, h], Init::Normal(STD)),
        ],
        BlockKind::Llama => vec![
            ("nf_w", vec![h], Init::Ones),
            ("lm_w", vec![v, h], Init::Normal(STD)),
        ],
    };
    units.push(build(UnitKind::Head, head));
    units
}

/// SplitMix64 finaliser: a well-mixed 64-bit hash of `x`.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn uniform(h: u64) -> f64 {
    // 53 random bits in (0, 1].
    ((h >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

/// Standard normal value number `idx` of stream `stream` (Box-Muller on two
/// hashed uniforms): a pure function, so shards are generated independently.
pub fn normal_at(seed: u64, stream: u64, idx: u64) -> f32 {
    let base = mix64(seed ^ mix64(stream.wrapping_mul(0x1000_0000_01B3)));
    let u1 = uniform(mix64(base ^ idx.wrapping_mul(2)));
    let u2 = uniform(mix64(base ^ idx.wrapping_mul(2).wrapping_add(1)));
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// Initial values of elements `range` of unit number `unit` (its index in
/// [`unit_layouts`]) for `seed`.
pub fn init_values(
    layout: &UnitLayout,
    unit: usize,
    seed: u64,
    range: std::ops::Range<usize>,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(range.len());
    for seg in &layout.segments {
        let lo = seg.offset.max(range.start);
        let hi = (seg.offset + seg.numel()).min(range.end);
        for i in lo..hi {
            out.push(match seg.init {
                Init::Zeros => 0.0,
                Init::Ones => 1.0,
                Init::Normal(std) => std * normal_at(seed, unit as u64 + 1, i as u64),
            });
        }
    }
    debug_assert_eq!(out.len(), range.len());
    out
}

/// Token ids (`seq_len + 1` of them: inputs are the first `seq_len`,
/// targets the last `seq_len`) of global sample `sample` in iteration
/// `iteration`. Random, uniform over the vocabulary, a pure function of its
/// arguments so every rank and the single-process reference agree.
pub fn sample_tokens(cfg: &BlockConfig, seed: u64, iteration: u64, sample: u64) -> Vec<i64> {
    let base = mix64(seed ^ 0xDA7A ^ mix64(iteration ^ mix64(sample.wrapping_add(0x5EED))));
    (0..=cfg.seq_len as u64)
        .map(|p| (mix64(base ^ mix64(p)) % cfg.vocab as u64) as i64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_count_parameters() {
        let g = BlockConfig::tiny_gpt();
        let u = unit_layouts(&g);
        assert_eq!(u.len(), g.layers + 2);
        let (h, f) = (g.hidden, g.ffn);
        assert_eq!(u[1].numel(), 4 * h * h + 2 * h * f + 9 * h + f);
        assert_eq!(u[0].numel(), g.vocab * h + g.seq_len * h);
        let l = BlockConfig::tiny_llama();
        let u = unit_layouts(&l);
        let kv = l.kv_heads * l.head_dim();
        assert_eq!(
            u[1].numel(),
            2 * l.hidden * l.hidden + 2 * kv * l.hidden + 3 * l.hidden * l.ffn + 2 * l.hidden
        );
    }

    #[test]
    fn shards_match_the_whole() {
        let cfg = BlockConfig::tiny_llama();
        let u = &unit_layouts(&cfg)[1];
        let all = init_values(u, 1, 7, 0..u.numel());
        let a = init_values(u, 1, 7, 0..100);
        let b = init_values(u, 1, 7, 100..u.numel());
        assert_eq!([a, b].concat(), all);
        let mean: f32 = all.iter().sum::<f32>() / all.len() as f32;
        assert!(mean.abs() < 0.1);
    }

    #[test]
    fn tokens_are_in_range_and_deterministic() {
        let cfg = BlockConfig::tiny_gpt();
        let t = sample_tokens(&cfg, 1, 2, 3);
        assert_eq!(t.len(), cfg.seq_len + 1);
        assert!(t.iter().all(|&x| x >= 0 && (x as usize) < cfg.vocab));
        assert_eq!(t, sample_tokens(&cfg, 1, 2, 3));
        assert_ne!(t, sample_tokens(&cfg, 1, 2, 4));
    }
}
