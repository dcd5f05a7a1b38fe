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
    /// How a tensor-parallel group splits it.
    pub tp: TpSplit,
}

/// How a tensor-parallel group of `t` ranks splits one parameter tensor
/// (Megatron-LM's `ColumnParallelLinear` / `RowParallelLinear` /
/// `VocabParallelEmbedding`; weights are `[out, in]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TpSplit {
    /// Every rank holds all of it (norms, row-parallel biases, learned
    /// positions).
    Replicated,
    /// Dimension 0 is `n` equal blocks (the fused QKV's q, k and v), each
    /// split into `t` runs of rows; rank `r` holds run `r` of every block:
    /// column-parallel weights and biases, the vocabulary-parallel
    /// embedding and output layer.
    Rows(usize),
    /// Dimension 1 split into `t` runs of columns (row-parallel weights:
    /// the attention output projection, the MLP's last linear).
    Cols,
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

type Part = (&'static str, Vec<usize>, Init, TpSplit);

fn build(kind: UnitKind, parts: Vec<Part>) -> UnitLayout {
    let mut offset = 0;
    let segments = parts
        .into_iter()
        .map(|(name, shape, init, tp)| {
            let s = Segment {
                name,
                shape,
                offset,
                init,
                tp,
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
    let mut emb = vec![("tok", vec![v, h], Init::Normal(STD), TpSplit::Rows(1))];
    if cfg.family == BlockKind::Gpt {
        emb.push(("pos", vec![s, h], Init::Normal(STD), TpSplit::Replicated));
    }
    units.push(build(UnitKind::Embedding, emb));
    for l in 0..cfg.layers {
        let parts = match cfg.family {
            BlockKind::Gpt => vec![
                ("qkv_w", vec![3 * h, h], Init::Normal(STD), TpSplit::Rows(3)),
                ("qkv_b", vec![3 * h], Init::Zeros, TpSplit::Rows(3)),
                ("o_w", vec![h, h], Init::Normal(STD), TpSplit::Cols),
                ("o_b", vec![h], Init::Zeros, TpSplit::Replicated),
                ("ln1_w", vec![h], Init::Ones, TpSplit::Replicated),
                ("ln1_b", vec![h], Init::Zeros, TpSplit::Replicated),
                ("fc1_w", vec![f, h], Init::Normal(STD), TpSplit::Rows(1)),
                ("fc1_b", vec![f], Init::Zeros, TpSplit::Rows(1)),
                ("fc2_w", vec![h, f], Init::Normal(STD), TpSplit::Cols),
                ("fc2_b", vec![h], Init::Zeros, TpSplit::Replicated),
                ("ln2_w", vec![h], Init::Ones, TpSplit::Replicated),
                ("ln2_b", vec![h], Init::Zeros, TpSplit::Replicated),
            ],
            BlockKind::Llama => vec![
                ("n1_w", vec![h], Init::Ones, TpSplit::Replicated),
                ("q_w", vec![h, h], Init::Normal(STD), TpSplit::Rows(1)),
                ("k_w", vec![kv, h], Init::Normal(STD), TpSplit::Rows(1)),
                ("v_w", vec![kv, h], Init::Normal(STD), TpSplit::Rows(1)),
                ("o_w", vec![h, h], Init::Normal(STD), TpSplit::Cols),
                ("n2_w", vec![h], Init::Ones, TpSplit::Replicated),
                ("gate_w", vec![f, h], Init::Normal(STD), TpSplit::Rows(1)),
                ("up_w", vec![f, h], Init::Normal(STD), TpSplit::Rows(1)),
                ("down_w", vec![h, f], Init::Normal(STD), TpSplit::Cols),
            ],
        };
        units.push(build(UnitKind::Block(l), parts));
    }
    let head = match cfg.family {
        BlockKind::Gpt => vec![
            ("lnf_w", vec![h], Init::Ones, TpSplit::Replicated),
            ("lnf_b", vec![h], Init::Zeros, TpSplit::Replicated),
            ("lm_w", vec![v, h], Init::Normal(STD), TpSplit::Rows(1)),
        ],
        BlockKind::Llama => vec![
            ("nf_w", vec![h], Init::Ones, TpSplit::Replicated),
            ("lm_w", vec![v, h], Init::Normal(STD), TpSplit::Rows(1)),
        ],
    };
    units.push(build(UnitKind::Head, head));
    units
}

/// Runs of a segment's full flat elements (relative to the segment's
/// start) that TP rank `r` of `t` holds, in its local order:
/// (start, length).
fn tp_segment_runs(seg: &Segment, t: usize, r: usize) -> Vec<(usize, usize)> {
    let n = seg.numel();
    match seg.tp {
        _ if t <= 1 => vec![(0, n)],
        TpSplit::Replicated => vec![(0, n)],
        TpSplit::Rows(blocks) => {
            let rows = seg.shape[0];
            let inner = n / rows.max(1);
            let (per_block, part) = (rows / blocks, rows / blocks / t);
            (0..blocks)
                .map(|b| ((b * per_block + r * part) * inner, part * inner))
                .collect()
        }
        TpSplit::Cols => {
            let (rows, cols) = (seg.shape[0], seg.shape[1]);
            let part = cols / t;
            (0..rows).map(|i| (i * cols + r * part, part)).collect()
        }
    }
}

/// The layout TP rank of a group of `t` holds of unit `full` (the same
/// segments, each with its split dimension divided by `t`, back to back).
/// Every rank's local layout is the same; `t` must divide every split
/// dimension ([`crate::config::Job::validate`] checks it).
pub fn tp_layout(full: &UnitLayout, t: usize) -> UnitLayout {
    let parts = full
        .segments
        .iter()
        .map(|seg| {
            let mut shape = seg.shape.clone();
            match seg.tp {
                _ if t <= 1 => {}
                TpSplit::Replicated => {}
                TpSplit::Rows(_) => shape[0] /= t,
                TpSplit::Cols => shape[1] /= t,
            }
            (seg.name, shape, seg.init, seg.tp)
        })
        .collect();
    build(full.kind, parts)
}

/// Where TP rank `r` of `t`'s local flat vector of unit `full` lies in the
/// full one: (full offset, length) runs in local order, summing to the
/// local layout's size.
pub fn tp_runs(full: &UnitLayout, t: usize, r: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for seg in &full.segments {
        for (start, len) in tp_segment_runs(seg, t, r) {
            match out.last_mut() {
                Some((o, l)) if *o + *l == seg.offset + start => *l += len,
                _ => out.push((seg.offset + start, len)),
            }
        }
    }
    out
}

/// Initial values of TP rank `r` of `t`'s piece of unit number `unit`
/// (layout `full`) for `seed`: the full unit's values at its runs.
pub fn tp_init_values(full: &UnitLayout, unit: usize, seed: u64, t: usize, r: usize) -> Vec<f32> {
    tp_runs(full, t, r)
        .into_iter()
        .flat_map(|(o, l)| init_values(full, unit, seed, o..o + l))
        .collect()
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
    fn tp_pieces_tile_every_unit() {
        for cfg in [BlockConfig::tiny_gpt(), BlockConfig::tiny_llama()] {
            for full in unit_layouts(&cfg) {
                for t in [1usize, 2, 4] {
                    let local = tp_layout(&full, t);
                    let mut hit = vec![0u8; full.numel()];
                    for r in 0..t {
                        let runs = tp_runs(&full, t, r);
                        assert_eq!(runs.iter().map(|x| x.1).sum::<usize>(), local.numel());
                        for (o, l) in runs {
                            hit[o..o + l].iter_mut().for_each(|h| *h += 1);
                        }
                    }
                    // Split tensors once, replicated ones on every rank.
                    for seg in &full.segments {
                        let want = if seg.tp == TpSplit::Replicated {
                            t as u8
                        } else {
                            1
                        };
                        let got = &hit[seg.offset..seg.offset + seg.numel()];
                        assert!(got.iter().all(|&h| h == want), "{} t={t}", seg.name);
                    }
                }
            }
        }
        // The fused QKV: rank 1 of 2 holds the second half of q, k and v.
        let cfg = BlockConfig::tiny_gpt();
        let block = &unit_layouts(&cfg)[1];
        let h = cfg.hidden;
        let runs = tp_runs(block, 2, 1);
        assert_eq!(runs[0], (h / 2 * h, h / 2 * h));
        assert_eq!(runs[1], ((h + h / 2) * h, h / 2 * h));
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
