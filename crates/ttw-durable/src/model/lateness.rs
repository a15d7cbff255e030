//! How late deliveries started, as counts in fixed buckets: cheap to keep
//! (one atomic add a delivery), and two readings subtract into the
//! deliveries between them, whose percentiles a console can draw.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The upper bounds of the buckets, in milliseconds; a last bucket holds
/// what is later than the last bound.
pub const LATENESS_BOUNDS_MS: [u64; 16] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000, 300_000,
];

const BUCKETS: usize = LATENESS_BOUNDS_MS.len() + 1;

/// Deliveries counted by how late they started (claimed after their due
/// time), in the buckets of [`LATENESS_BOUNDS_MS`]. Part of
/// [`SchedulerStats`](crate::SchedulerStats).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::Lateness;
///
/// let mut before = Lateness::default();
/// let mut now = Lateness::default();
/// for ms in [0, 1, 3, 3, 40] {
///     now.record(ms);
/// }
/// before.record(0);
/// let between = now.since(&before);
/// assert_eq!(between.count(), 4);
/// // Half of them started within 5 ms of their time; all within 50 ms.
/// assert_eq!(between.quantile(0.5), Some(Duration::from_millis(5)));
/// assert_eq!(between.quantile(1.0), Some(Duration::from_millis(50)));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    counts: [u64; BUCKETS],
}

/// The bucket of a lateness of `ms` milliseconds.
fn bucket(ms: u64) -> usize {
    LATENESS_BOUNDS_MS.partition_point(|&bound| bound < ms)
}

impl Lateness {
    /// Counts one delivery `ms` milliseconds late.
    pub fn record(&mut self, ms: u64) {
        self.counts[bucket(ms)] += 1;
    }

    /// The deliveries counted in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The deliveries in each bucket, the last one past the last bound.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// What this reading counted that `earlier` (a reading of the same
    /// node before it) had not.
    pub fn since(&self, earlier: &Lateness) -> Lateness {
        let mut counts = [0; BUCKETS];
        for (i, c) in counts.iter_mut().enumerate() {
            *c = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        Lateness { counts }
    }

    /// The upper bound of the bucket that holds the `q` quantile (0 to 1):
    /// at least that share of the deliveries started no later than it.
    /// `None` without deliveries; [`Duration::MAX`] when it falls past
    /// the last bound.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(
                    LATENESS_BOUNDS_MS
                        .get(i)
                        .map_or(Duration::MAX, |&ms| Duration::from_millis(ms)),
                );
            }
        }
        Some(Duration::MAX)
    }
}

/// A [`Lateness`] that deliveries on many tasks add to at once.
#[derive(Debug, Default)]
pub(crate) struct SharedLateness {
    counts: [AtomicU64; BUCKETS],
}

impl SharedLateness {
    /// Counts one delivery `ms` milliseconds late.
    pub(crate) fn record(&self, ms: u64) {
        self.counts[bucket(ms)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub(crate) fn read(&self) -> Lateness {
        let mut counts = [0; BUCKETS];
        for (c, a) in counts.iter_mut().zip(&self.counts) {
            *c = a.load(Ordering::Relaxed);
        }
        Lateness { counts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lateness_falls_in_the_first_bucket_whose_bound_holds_it() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 0);
        assert_eq!(bucket(2), 1);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(300_000), 15);
        assert_eq!(bucket(300_001), 16);
        let shared = SharedLateness::default();
        shared.record(1_000_000);
        assert_eq!(shared.read().quantile(0.99), Some(Duration::MAX));
        assert_eq!(Lateness::default().quantile(0.5), None);
    }
}
