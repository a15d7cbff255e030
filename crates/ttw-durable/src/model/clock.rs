//! The clock: every read of the time in the task system goes through one
//! (a store's and its nodes': when a task is due, when a claim may take
//! it, when a lock runs out, when a retry is due, where the window ends,
//! when a recurring occurrence comes), in milliseconds since the Unix
//! epoch. The system's clock in a running store; in tests, a clock that
//! follows Tokio's, so a paused runtime's `advance` moves it and nothing
//! else does. Reading the system's time anywhere else is refused by
//! `clippy.toml` (`disallowed-methods`); Tokio's `Instant`, which a paused
//! runtime controls, measures waits and deadlines.
//!
//! What the database stamps (heartbeats, `updated_at`) is the database's
//! own clock, read in the statement (see `sql::db::Db::clock_sql`): leases
//! are compared by it so that nodes whose clocks disagree still agree on
//! who holds a shard.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::model::time::from_ms;

/// A clock in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Default)]
pub(crate) enum Clock {
    /// The system's clock.
    #[default]
    System,
    /// `at_ms` at `start`, then as Tokio's clock runs (paused or not).
    #[cfg_attr(not(test), allow(dead_code))]
    Tokio { start: Instant, at_ms: i64 },
}

impl Clock {
    /// A clock that reads `at_ms` now and follows Tokio's clock from here:
    /// under a paused runtime it moves only with `tokio::time::advance`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn following_tokio(at_ms: i64) -> Clock {
        Clock::Tokio {
            start: Instant::now(),
            at_ms,
        }
    }

    /// Now.
    pub(crate) fn now(&self) -> SystemTime {
        match self {
            // The one read of the system's time.
            #[allow(clippy::disallowed_methods)]
            Clock::System => SystemTime::now(),
            Clock::Tokio { start, at_ms } => from_ms(*at_ms) + start.elapsed(),
        }
    }

    /// Now, in milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        self.now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// How long from now until `at_ms` (milliseconds since the Unix epoch),
    /// to the nanosecond: a timer for this long fires at the millisecond
    /// `at_ms` by this clock, not after it. (Whole milliseconds from
    /// [`now_ms`](Self::now_ms), which truncates, were up to one too many:
    /// that much lateness on every task. A claim that still finds its task
    /// not due, the two clocks disagreeing by a moment, arms it again.)
    pub(crate) fn until_ms(&self, at_ms: i64) -> Duration {
        from_ms(at_ms)
            .duration_since(self.now())
            .unwrap_or(Duration::ZERO)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_clock_following_tokio_moves_only_when_tokio_s_does() {
        let clock = Clock::following_tokio(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(clock.now_ms(), 1_250);
        assert_eq!(clock.until_ms(1_300), Duration::from_millis(50));
        assert_eq!(clock.until_ms(1_000), Duration::ZERO);
        let system = Clock::System.now_ms();
        assert!(
            system > 1_700_000_000_000,
            "the system clock reads the epoch: {system}"
        );
    }
}
