//! Percentiles of a sorted sample, shared by the durable examples and bench.

/// The value at fraction `p` (0.0 to 1.0) of `sorted`, or NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
