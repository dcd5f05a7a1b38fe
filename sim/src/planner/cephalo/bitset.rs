//! Bitsets of reachable batch sums (bit `k` of word `k / 64` at `k % 64`):
//! the word-parallel subset-sum steps the bottleneck checks and the tie
//! policy share.

/// `dst |= src << s` on bitsets of `u64` words (bit `k` of the set is bit
/// `k % 64` of word `k / 64`).
fn shl_or(dst: &mut [u64], src: &[u64], s: usize) {
    let (ws, bs) = (s / 64, s % 64);
    let n = dst.len();
    if ws >= n {
        return;
    }
    if bs == 0 {
        for i in ws..n {
            dst[i] |= src[i - ws];
        }
    } else {
        dst[ws] |= src[0] << bs;
        for i in ws + 1..n {
            dst[i] |= (src[i - ws] << bs) | (src[i - ws - 1] >> (64 - bs));
        }
    }
}

/// `d |= d << s` in place (as [`shl_or`] from a copy of `d`): the words
/// are walked from the top, so every word read is still the original.
fn shl_or_self(d: &mut [u64], s: usize) {
    let (ws, bs) = (s / 64, s % 64);
    let n = d.len();
    if ws >= n {
        return;
    }
    for i in (ws..n).rev() {
        let mut v = d[i - ws] << bs;
        if bs > 0 && i > ws {
            v |= d[i - ws - 1] >> (64 - bs);
        }
        d[i] |= v;
    }
}

/// The sums of `m` batches, each one of `allowed` (ascending), added to
/// each of the sums in `cur` (bits, as [`shl_or`]): the subset-sum step of
/// `m` ranks of one type at once. A sum of sets does not depend on the order
/// of the ranks, so grouping a type's ranks changes no bit. When `allowed`
/// is a run of consecutive batches `a..=z` (the usual case: a type's costs
/// grow with its batch), `m` ranks take every sum in `m a..=m z`, a shift
/// and a spread of `log2(m (z - a))` shifted ORs; otherwise the ranks are
/// added one by one.
pub(super) fn sum_copies(cur: &[u64], allowed: &[usize], m: usize) -> Vec<u64> {
    let n = cur.len();
    if m == 0 {
        return cur.to_vec();
    }
    let (Some(&a), Some(&z)) = (allowed.first(), allowed.last()) else {
        return vec![0u64; n];
    };
    if z - a + 1 == allowed.len() {
        let mut d = vec![0u64; n];
        shl_or(&mut d, cur, m.saturating_mul(a));
        // `d` holds the shifts 0..covered of the spread, up to 0..=m (z - a).
        let width = m.saturating_mul(z - a).min(n * 64) + 1;
        let mut covered = 1usize;
        while covered < width {
            let s = covered.min(width - covered);
            shl_or_self(&mut d, s);
            covered += s;
        }
        return d;
    }
    let mut cur = cur.to_vec();
    let mut nxt = vec![0u64; n];
    for _ in 0..m {
        nxt.iter_mut().for_each(|w| *w = 0);
        for &b in allowed {
            shl_or(&mut nxt, &cur, b);
        }
        std::mem::swap(&mut cur, &mut nxt);
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The in-place shift-or is the shift-or from a copy, at every shift
    /// within and past the words.
    #[test]
    fn shift_or_in_place_matches_the_copy() {
        let d0: Vec<u64> = (0..5u64)
            .map(|i| 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i + 1))
            .collect();
        for s in 0..340 {
            let mut a = d0.clone();
            shl_or(&mut a, &d0, s);
            let mut b = d0.clone();
            shl_or_self(&mut b, s);
            assert_eq!(a, b, "shift {s}");
        }
    }
}
