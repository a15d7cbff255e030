//! How long a failed attempt waits before the next: the [`Backoff`].

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How long to wait before retrying a failed attempt: exponential from
/// `base`, doubling per attempt up to `max`, with jitter that picks a point
/// in the upper half (so retries of many tasks that failed together
/// spread out, and none waits less than half the nominal delay).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60));
/// let third = backoff.delay(3, 42);
/// assert!(third >= Duration::from_secs(2) && third <= Duration::from_secs(4));
/// assert!(backoff.delay(30, 42) <= Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Default for Backoff {
    /// 1 s doubling up to 1 h.
    fn default() -> Self {
        Backoff::exponential(Duration::from_secs(1), Duration::from_secs(3600))
    }
}

impl Backoff {
    /// `base` after the first failure, doubling after each, at most `max`.
    pub fn exponential(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max: max.max(base),
        }
    }

    /// The delay after the first failure.
    pub fn base_delay(&self) -> Duration {
        self.base
    }

    /// The longest delay.
    pub fn max_delay(&self) -> Duration {
        self.max
    }

    /// The delay after failed attempt `attempt` (from 1) of task `id`.
    pub fn delay(&self, attempt: u32, id: u64) -> Duration {
        let shift = attempt.saturating_sub(1).min(32);
        let nominal = self
            .base
            .checked_mul(1u32 << shift.min(31))
            .map_or(self.max, |d| d.min(self.max));
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(id);
        hasher.write_u32(attempt);
        let unit = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
        // Half to all of the nominal delay; a product too large for a
        // `Duration` (a `max` near `Duration::MAX`) stays nominal.
        Duration::try_from_secs_f64(nominal.as_secs_f64() * (0.5 + 0.5 * unit)).unwrap_or(nominal)
    }
}
