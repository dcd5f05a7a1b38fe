//! A pipeline layout as Megatron-Core's `--pipeline-model-parallel-layout`
//! writes it (`megatron/core/transformer/pipeline_parallel_layer_layout.py`,
//! REAL-SYSTEMS-2 section 3): the model chunks in virtual-stage order
//! separated by `|`, each a run of layer symbols: `E` the embedding, `t` a
//! transformer block, `L` the loss (the head), `m` a multi-token-prediction
//! layer; `X*N` repeats a symbol, `(...)*N` a group (which may hold `|`),
//! commas are cosmetic. Chunk `x` runs on pipeline stage `x % PP` as its
//! chunk `x / PP`, so `PP x VP` chunks give VP chunks per stage: e.g.
//! DeepSeek-V3's 61 blocks on PP 4 x VP 4, or `Et|(tt|)*7t|tL` for 17
//! blocks on PP 2 x VP 4 where the first and the last chunk carry the
//! embedding and the loss beside one block.
//!
//! What this tool models of it: the embedding first in the first chunk,
//! the loss last in the last, every chunk at least one transformer block
//! (Megatron also allows a chunk of the embedding or the loss alone, which
//! the lowering does not build); multi-token-prediction layers are refused
//! (not modelled).

/// Longest layout text read, bytes (a layout of 128 chunks of a few
/// symbols each is about a kilobyte).
pub const MAX_TEXT_BYTES: usize = 4096;

/// Most layer symbols a layout may expand to (a 1,000-block model on 256
/// chunks with its separators is about 1,300; the bound stops a `*N`
/// expansion from growing without end).
pub const MAX_SYMBOLS: usize = 65_536;

/// A parsed pipeline layout: transformer blocks per model chunk, in
/// virtual-stage order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineLayout {
    /// Blocks of each model chunk, in virtual-stage order.
    pub chunks: Vec<u32>,
}

/// One expanded layer symbol or a chunk boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sym {
    Embedding,
    Block,
    Loss,
    Bar,
}

impl PipelineLayout {
    /// Parses `text` (Megatron's syntax, see the module doc); an error
    /// says what was expected (the caller names the flag or field).
    pub fn parse(text: &str) -> Result<PipelineLayout, String> {
        let bad = |msg: String| format!("expected {msg}");
        if text.len() > MAX_TEXT_BYTES {
            return Err(bad(format!(
                "a layout of at most {MAX_TEXT_BYTES} bytes, got {}",
                text.len()
            )));
        }
        let chars: Vec<char> = text.chars().collect();
        let syms = expand(&chars, &mut 0, 0).map_err(bad)?;
        Self::from_symbols(&syms).map_err(bad)
    }

    /// The chunks of expanded symbols: the embedding first, the loss last,
    /// every chunk at least one block.
    fn from_symbols(syms: &[Sym]) -> Result<PipelineLayout, String> {
        let mut chunks: Vec<Vec<Sym>> = vec![Vec::new()];
        for &s in syms {
            match s {
                Sym::Bar => chunks.push(Vec::new()),
                s => chunks.last_mut().expect("one chunk").push(s),
            }
        }
        let n = chunks.len();
        for (x, c) in chunks.iter().enumerate() {
            for (i, &s) in c.iter().enumerate() {
                let first = x == 0 && i == 0;
                let last = x + 1 == n && i + 1 == c.len();
                if s == Sym::Embedding && !first {
                    return Err(format!("the embedding `E` first in the first model chunk and nowhere else (chunk {x} has it elsewhere)"));
                }
                if s == Sym::Loss && !last {
                    return Err(format!("the loss `L` last in the last model chunk and nowhere else (chunk {x} has it elsewhere)"));
                }
            }
        }
        if chunks[0].first() != Some(&Sym::Embedding) {
            return Err("the embedding `E` at the start of the first model chunk".into());
        }
        if chunks[n - 1].last() != Some(&Sym::Loss) {
            return Err("the loss `L` at the end of the last model chunk".into());
        }
        let blocks: Vec<u32> = chunks
            .iter()
            .map(|c| c.iter().filter(|&&s| s == Sym::Block).count() as u32)
            .collect();
        if let Some(x) = blocks.iter().position(|&b| b == 0) {
            return Err(format!(
                "at least one transformer block `t` in every model chunk: chunk {x} has none (Megatron allows a chunk of the embedding or the loss alone; this tool does not build one)"
            ));
        }
        Ok(PipelineLayout { chunks: blocks })
    }

    /// Model chunks per pipeline stage on `pp` stages (`None` when the
    /// chunks do not divide over them).
    pub fn virtual_stages(&self, pp: u32) -> Option<u32> {
        let n = self.chunks.len() as u32;
        (pp > 0 && n.is_multiple_of(pp)).then_some(n / pp)
    }

    /// Blocks of each chunk of each of `p` stages (`v` chunks each) of a
    /// model of `layers` blocks; errors say what does not match (the
    /// caller names the flag).
    pub fn split(&self, layers: u32, p: u32, v: u32) -> Result<Vec<Vec<u32>>, String> {
        let n = self.chunks.len();
        if n != (p * v) as usize {
            return Err(format!(
                "the layout has {n} model chunks (separated by `|`) but PP {p} x VP {v} makes {}: expected one chunk per stage and virtual stage",
                p * v
            ));
        }
        let total: u32 = self.chunks.iter().sum();
        if total != layers {
            return Err(format!(
                "the layout places {total} transformer blocks `t` but the model has {layers}: expected every block placed once"
            ));
        }
        Ok((0..p as usize)
            .map(|s| {
                (0..v as usize)
                    .map(|c| self.chunks[c * p as usize + s])
                    .collect()
            })
            .collect())
    }

    /// The layout written back in Megatron's syntax (runs of blocks as
    /// `t*N`, no commas).
    pub fn text(&self) -> String {
        let n = self.chunks.len();
        self.chunks
            .iter()
            .enumerate()
            .map(|(x, &b)| {
                let e = if x == 0 { "E" } else { "" };
                let l = if x + 1 == n { "L" } else { "" };
                let t = if b == 1 {
                    "t".to_string()
                } else {
                    format!("t*{b}")
                };
                format!("{e}{t}{l}")
            })
            .collect::<Vec<_>>()
            .join("|")
    }
}

/// The symbols of `chars` from `*at` to the end or the `)` closing a group
/// (left at it), groups and repeats expanded; `depth` counts open groups.
fn expand(chars: &[char], at: &mut usize, depth: usize) -> Result<Vec<Sym>, String> {
    let mut out: Vec<Sym> = Vec::new();
    while *at < chars.len() {
        let c = chars[*at];
        let (piece, after): (Vec<Sym>, usize) = match c {
            ',' => {
                *at += 1;
                continue;
            }
            ')' if depth > 0 => return Ok(out),
            ')' => return Err(format!("no unmatched `)` (character {})", *at + 1)),
            '(' => {
                if depth >= 8 {
                    return Err("groups nested at most 8 deep".into());
                }
                *at += 1;
                let inner = expand(chars, at, depth + 1)?;
                if chars.get(*at) != Some(&')') {
                    return Err("a `)` closing every `(`".into());
                }
                (inner, *at + 1)
            }
            'E' => (vec![Sym::Embedding], *at + 1),
            't' => (vec![Sym::Block], *at + 1),
            'L' => (vec![Sym::Loss], *at + 1),
            '|' => (vec![Sym::Bar], *at + 1),
            'm' => {
                return Err("no `m`: multi-token-prediction layers are not modelled".into());
            }
            other => {
                return Err(format!(
                    "E (embedding), t (transformer block), L (loss), | (chunk boundary), X*N or (...)*N, got `{}` at character {}",
                    other.escape_default(),
                    *at + 1
                ))
            }
        };
        *at = after;
        let times = repeat(chars, at)?;
        for _ in 0..times {
            if out.len() + piece.len() > MAX_SYMBOLS {
                return Err(format!(
                    "a layout that expands to at most {MAX_SYMBOLS} symbols"
                ));
            }
            out.extend_from_slice(&piece);
        }
    }
    Ok(out)
}

/// A `*N` after a symbol or group at `*at` (consumed): `N`, else 1.
fn repeat(chars: &[char], at: &mut usize) -> Result<usize, String> {
    if chars.get(*at) != Some(&'*') {
        return Ok(1);
    }
    *at += 1;
    let start = *at;
    while chars.get(*at).is_some_and(char::is_ascii_digit) {
        *at += 1;
    }
    let digits: String = chars[start..*at].iter().collect();
    digits
        .parse::<usize>()
        .ok()
        .filter(|&n| (1..=MAX_SYMBOLS).contains(&n))
        .ok_or_else(|| {
            format!("a repeat count from 1 to {MAX_SYMBOLS} after `*` at character {start}, got `{digits}`")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<PipelineLayout, String> {
        PipelineLayout::parse(s)
    }

    #[test]
    fn megatron_syntax_expands() {
        // DeepSeek-V3's 61 blocks on 16 chunks: 3 on the embedding's
        // chunk, 4 on the 14 middle ones, 2 beside the loss.
        let l = parse("Et*3|(t*4|)*14,t*2L").unwrap();
        assert_eq!(l.chunks.len(), 16);
        assert_eq!(l.chunks.iter().sum::<u32>(), 61);
        assert_eq!(l.chunks[0], 3);
        assert_eq!(l.chunks[15], 2);
        assert_eq!(l.virtual_stages(4), Some(4));
        assert_eq!(l.virtual_stages(3), None);
        // Chunk x runs on stage x % PP as its chunk x / PP.
        let split = l.split(61, 4, 4).unwrap();
        assert_eq!(split[0], vec![3, 4, 4, 4]);
        assert_eq!(split[3], vec![4, 4, 4, 2]);
        // Written back and read again: the same layout.
        assert_eq!(parse(&l.text()).unwrap(), l);
        assert_eq!(parse("Ett|ttL").unwrap().chunks, vec![2, 2]);
    }

    #[test]
    fn layouts_that_do_not_fit_are_refused_with_why() {
        let err = |s: &str| parse(s).unwrap_err();
        assert!(err("ttL").contains("embedding"));
        assert!(err("Ett").contains("loss"));
        assert!(err("Et|L").contains("chunk 1 has none"));
        assert!(err("Et|m|tL").contains("multi-token"));
        assert!(err("Et|tEL").contains("nowhere else"));
        assert!(err("Et(t|tL").contains("`)`"));
        assert!(err("Et)|tL").contains("unmatched"));
        assert!(err("Et*0|tL").contains("repeat count"));
        assert!(err("E(t*60000)*60000|tL").contains("at most"));
        assert!(err("Ex|tL").contains("`x` at character 2"));
        assert!(err(&"t".repeat(MAX_TEXT_BYTES + 1)).contains("bytes"));
        let l = parse("Et*3|t*4L").unwrap();
        assert!(l.split(7, 2, 2).unwrap_err().contains("2 model chunks"));
        assert!(l.split(8, 2, 1).unwrap_err().contains("model has 8"));
    }
}
