//! Water-filling of the sharded training state: every rank holds
//! `min(cap_i, level)` of it, the level the smallest that makes the shares
//! sum to 1, so state goes where memory is free and the largest piece
//! (which paces uneven collectives) is as small as it can be. Units:
//! fractions of the whole state.

/// Water-filling state split: every rank holds `min(cap_i, level)` where the
/// level is the smallest that makes the fractions sum to 1, so state goes
/// where memory is free and the largest piece (which paces the uneven
/// collectives) is as small as possible. `caps` are fractions of the total
/// state each rank has room for. `None` when `sum(caps) < 1`.
pub fn water_fill(caps: &[f64]) -> Option<Vec<f64>> {
    Some(water_fill_at(caps, water_level(caps)?))
}

/// [`water_fill`] at its known level (`water_level(caps)`), so a caller
/// that needs both sorts the caps once.
pub fn water_fill_at(caps: &[f64], level: f64) -> Vec<f64> {
    let mut r: Vec<f64> = caps.iter().map(|&c| c.clamp(0.0, 1.0).min(level)).collect();
    // Put the rounding residue (~1e-16) on the first largest piece.
    let sum: f64 = r.iter().sum();
    let big = (0..r.len()).fold(0, |best, i| if r[i] > r[best] { i } else { best });
    r[big] = (r[big] + 1.0 - sum).max(0.0);
    r
}

/// Tolerance on "the fractions reach 1" in water-filling and feasibility.
pub const FILL_TOL: f64 = 1e-12;

/// The water level of [`water_fill`]: the smallest `l >= 1/G` with
/// `sum(min(cap_i, l)) >= 1`; `None` when `sum(caps) < 1 - FILL_TOL`.
pub fn water_level(caps: &[f64]) -> Option<f64> {
    let g = caps.len();
    if g == 0 {
        return None;
    }
    let mut c: Vec<f64> = caps.iter().map(|&x| x.clamp(0.0, 1.0)).collect();
    let total: f64 = c.iter().sum();
    if total < 1.0 - FILL_TOL {
        return None;
    }
    c.sort_by(f64::total_cmp);
    let mut prefix = 0.0;
    for (k, &ck) in c.iter().enumerate() {
        let level = (1.0 - prefix) / (g - k) as f64;
        if level <= ck {
            return Some(level);
        }
        prefix += ck;
    }
    Some(c[g - 1])
}

/// [`water_level`] of caps given as classes: `caps[k]` held by `counts[k]`
/// ranks. The level is the same arithmetic in the same order (the prefix
/// over the caps in ascending order, one rank at a time), so the same bits,
/// without sorting one cap per rank: a plan of thousands of GPUs has a few
/// dozen classes. (Only the feasibility sum is taken per class.)
pub fn water_level_counted(caps: &[f64], counts: &[usize]) -> Option<f64> {
    let g: usize = counts.iter().sum();
    if g == 0 {
        return None;
    }
    let c: Vec<f64> = caps.iter().map(|&x| x.clamp(0.0, 1.0)).collect();
    let total: f64 = c.iter().zip(counts).map(|(x, &n)| x * n as f64).sum();
    if total < 1.0 - FILL_TOL {
        return None;
    }
    let mut order: Vec<usize> = (0..c.len()).filter(|&k| counts[k] > 0).collect();
    order.sort_by(|&a, &b| c[a].total_cmp(&c[b]));
    let (mut prefix, mut k) = (0.0, 0usize);
    for &cls in &order {
        let ck = c[cls];
        for _ in 0..counts[cls] {
            let level = (1.0 - prefix) / (g - k) as f64;
            if level <= ck {
                return Some(level);
            }
            prefix += ck;
            k += 1;
        }
    }
    order.last().map(|&cls| c[cls])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_fill_matches_reference_fix() {
        // The README's corrected split for the GPT-2.7B example: the first L4
        // is capped at its free memory, the rest share evenly.
        let caps = [
            0.22532744711597988,
            0.2882273881968276,
            0.4996839220012677,
            0.29721309406552004,
        ];
        let r = water_fill(&caps).unwrap();
        assert!((r[0] - 0.2253).abs() < 1e-4, "{r:?}");
        for x in &r[1..] {
            assert!((x - 0.2582).abs() < 1e-4, "{r:?}");
        }
        assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert_eq!(water_fill(&[0.2, 0.3]), None);
        // By classes: the same bits as one cap per rank.
        let mut x = 0x9e3779b97f4a7c15u64;
        for _ in 0..200 {
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let classes: Vec<f64> = (0..1 + next() % 6)
                .map(|_| (next() % 1000) as f64 / 997.0)
                .collect();
            let class_of: Vec<usize> = (0..1 + next() % 40)
                .map(|_| (next() % classes.len() as u64) as usize)
                .collect();
            let caps: Vec<f64> = class_of.iter().map(|&k| classes[k]).collect();
            let mut counts = vec![0usize; classes.len()];
            for &k in &class_of {
                counts[k] += 1;
            }
            assert_eq!(
                water_level_counted(&classes, &counts).map(f64::to_bits),
                water_level(&caps).map(f64::to_bits),
                "{classes:?} {class_of:?}"
            );
        }
        let even = water_fill(&[1.0, 1.0, 1.0, 1.0]).unwrap();
        assert!(even.iter().all(|x| (x - 0.25).abs() < 1e-15));
    }
}
