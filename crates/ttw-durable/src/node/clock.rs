//! The node's clock: what its decisions take as now (when a claim may
//! take a task, when a lock runs out, when a retry is due, where the
//! window ends), in milliseconds since the Unix epoch. The system's clock
//! in a running node; in tests, a clock that follows Tokio's, so a paused
//! runtime's `advance` moves it and nothing else does.

use tokio::time::Instant;

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

    /// Now, in milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        match self {
            Clock::System => crate::model::time::now_ms(),
            Clock::Tokio { start, at_ms } => {
                let elapsed = i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX);
                at_ms.saturating_add(elapsed)
            }
        }
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
        let system = Clock::System.now_ms();
        assert!(
            system > 1_700_000_000_000,
            "the system clock reads the epoch: {system}"
        );
    }
}
