//! Reading a Prometheus text page, for the metrics tests.

/// The value of the sample `line_start` (a metric with its labels) in a
/// Prometheus text page.
pub fn sample(page: &str, line_start: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
