//! Summary statistics of measured or predicted series, one definition
//! for every reader: the median is the middle value, or the mean of the
//! two middle values for an even count (what `validate`, the run-log
//! reader and the studies' validation captions report). The calibration's
//! error statistics use nearest-rank percentiles instead
//! ([`crate::perfmodel`]'s `ErrorStats`).

/// The median of `values` (non-finite values sort by `total_cmp`);
/// `None` when there are none.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_value_or_mean_of_the_two() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(Vec::new()), None);
    }
}
