//! Uneven splits: shard piece sizes from state fractions, micro-batch sizes
//! from a local batch and a micro-batch count, sample offsets of each rank.
//!
//! Units: element counts (f32 parameters) and samples. Invariant: every split
//! sums exactly to what it splits.

/// Piece sizes (elements) of a flat vector of `total` elements split by
/// `fractions` (non-negative, summing to about 1): floor of each share, then
/// the remaining elements one each to the largest fractional remainders (ties
/// to the lower rank). The pieces sum exactly to `total`.
pub fn piece_sizes(total: usize, fractions: &[f64]) -> Vec<usize> {
    if fractions.is_empty() {
        return Vec::new();
    }
    let sum: f64 = fractions.iter().sum();
    let norm = if sum > 0.0 { sum } else { 1.0 };
    let exact: Vec<f64> = fractions.iter().map(|f| f / norm * total as f64).collect();
    let mut sizes: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let assigned: usize = sizes.iter().sum();
    let mut rest = total.saturating_sub(assigned);
    let mut order: Vec<usize> = (0..fractions.len()).collect();
    order.sort_by(|&a, &b| {
        let ra = exact[a] - exact[a].floor();
        let rb = exact[b] - exact[b].floor();
        rb.partial_cmp(&ra)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    let mut k = 0;
    while rest > 0 {
        sizes[order[k % order.len()]] += 1;
        rest -= 1;
        k += 1;
    }
    sizes
}

/// Start offsets of pieces of the given sizes (exclusive prefix sums).
pub fn offsets(sizes: &[usize]) -> Vec<usize> {
    let mut acc = 0;
    sizes
        .iter()
        .map(|s| {
            let o = acc;
            acc += s;
            o
        })
        .collect()
}

/// Micro-batch sizes (samples) of a local batch `batch` split into `count`
/// micro-batches: the first `batch % count` get one sample more, so sizes
/// differ by at most one and sum to `batch`. `count` must be in 1..=batch.
pub fn micro_batch_sizes(batch: usize, count: usize) -> Vec<usize> {
    let count = count.max(1);
    let base = batch / count;
    let extra = batch % count;
    (0..count).map(|j| base + usize::from(j < extra)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_sum_exactly() {
        for total in [0usize, 1, 7, 100, 12345] {
            for fr in [
                vec![0.5, 0.2, 0.3],
                vec![1.0],
                vec![0.0, 1.0],
                vec![0.333, 0.333, 0.334],
            ] {
                let p = piece_sizes(total, &fr);
                assert_eq!(p.iter().sum::<usize>(), total, "{total} {fr:?} {p:?}");
            }
        }
        assert_eq!(piece_sizes(10, &[0.5, 0.2, 0.3]), vec![5, 2, 3]);
        assert_eq!(piece_sizes(11, &[0.5, 0.2, 0.3]), vec![6, 2, 3]);
        assert_eq!(offsets(&[5, 2, 3]), vec![0, 5, 7]);
    }

    #[test]
    fn micro_batches_differ_by_at_most_one() {
        assert_eq!(micro_batch_sizes(8, 3), vec![3, 3, 2]);
        assert_eq!(micro_batch_sizes(5, 2), vec![3, 2]);
        assert_eq!(micro_batch_sizes(3, 1), vec![3]);
        for b in 1..20 {
            for n in 1..=b {
                let s = micro_batch_sizes(b, n);
                assert_eq!(s.iter().sum::<usize>(), b);
                assert!(s.iter().max().unwrap() - s.iter().min().unwrap() <= 1);
            }
        }
    }
}
