//! Flow control: the limits a queue's settings put on every node at once
//! (see [`Store::set_queue_limits`](crate::Store::set_queue_limits)).

use std::time::Duration;

use crate::error::Error;
use crate::model::backoff::Backoff;

/// The shortest rate period: 1 ms.
const MIN_PERIOD: Duration = Duration::from_millis(1);
/// The longest rate period: a year.
const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);
/// The largest count a limit takes (concurrency, rate, burst).
pub const MAX_LIMIT: u32 = 1_000_000;

/// At most `count` starts every `per`, with bursts of up to `burst` (by
/// default `count`): a token bucket that holds `burst` tokens, refills at
/// `count / per` and pays one for each task that starts.
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::Rate;
///
/// let sms = Rate::new(100, Duration::from_secs(1)).burst(10);
/// assert_eq!((sms.count(), sms.period(), sms.burst_size()), (100, Duration::from_secs(1), 10));
/// assert_eq!(Rate::per_second(200).burst_size(), 200);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    count: u32,
    per: Duration,
    burst: Option<u32>,
}

impl Rate {
    /// At most `count` starts every `per` (checked when the limits are set:
    /// a count from 1 to [`MAX_LIMIT`], a period from 1 ms to a year).
    pub fn new(count: u32, per: Duration) -> Rate {
        Rate {
            count,
            per,
            burst: None,
        }
    }

    /// At most `count` starts a second.
    pub fn per_second(count: u32) -> Rate {
        Rate::new(count, Duration::from_secs(1))
    }

    /// Bursts of up to `burst` starts at once (at least 1); by default the
    /// count.
    pub fn burst(mut self, burst: u32) -> Rate {
        self.burst = Some(burst);
        self
    }

    /// The starts allowed each period.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.per
    }

    /// The most starts at once.
    pub fn burst_size(&self) -> u32 {
        self.burst.unwrap_or(self.count)
    }

    /// The period in whole milliseconds.
    pub(crate) fn period_ms(&self) -> i64 {
        i64::try_from(self.per.as_millis()).unwrap_or(i64::MAX)
    }

    fn check(&self) -> Result<(), Error> {
        if self.count == 0 || self.count > MAX_LIMIT {
            return Err(Error::config(format!(
                "a rate's count must be from 1 to {MAX_LIMIT}, not {}",
                self.count
            )));
        }
        if self.per < MIN_PERIOD || self.per > MAX_PERIOD {
            return Err(Error::config(format!(
                "a rate's period must be from 1 ms to a year, not {:?}",
                self.per
            )));
        }
        if !self.per.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::config(format!(
                "a rate's period must be whole milliseconds, not {:?}",
                self.per
            )));
        }
        match self.burst {
            Some(b) if b == 0 || b > MAX_LIMIT => Err(Error::config(format!(
                "a rate's burst must be from 1 to {MAX_LIMIT}, not {b}"
            ))),
            _ => Ok(()),
        }
    }
}

/// The limits of a queue across every node: how many of its tasks may run
/// at once, and how fast they may start. Unset, a limit does not apply.
///
/// ```
/// use ttw_durable::{QueueLimits, Rate};
///
/// let limits = QueueLimits::new().concurrency(8).rate(Rate::per_second(100).burst(10));
/// assert_eq!(limits.concurrency_limit(), Some(8));
/// assert_eq!(limits.rate_limit().map(|r| r.count()), Some(100));
/// assert!(QueueLimits::new().is_empty());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLimits {
    concurrency: Option<u32>,
    rate: Option<Rate>,
    per_key: Option<u32>,
}

impl QueueLimits {
    /// No limits.
    pub fn new() -> QueueLimits {
        QueueLimits::default()
    }

    /// At most `n` tasks of the queue running at once across all nodes
    /// (from 1 to [`MAX_LIMIT`]).
    pub fn concurrency(mut self, n: u32) -> QueueLimits {
        self.concurrency = Some(n);
        self
    }

    /// At most `rate` starts across all nodes.
    pub fn rate(mut self, rate: Rate) -> QueueLimits {
        self.rate = Some(rate);
        self
    }

    /// At most `n` tasks of each partition key
    /// ([`Schedule::partition_key`](crate::Schedule::partition_key))
    /// running at once across all nodes (from 1 to [`MAX_LIMIT`]), so that
    /// one key's backlog (a tenant's campaign) leaves room for the others.
    /// Tasks without a key are not counted.
    pub fn per_key_concurrency(mut self, n: u32) -> QueueLimits {
        self.per_key = Some(n);
        self
    }

    /// The per-key concurrency limit, if set.
    pub fn per_key_limit(&self) -> Option<u32> {
        self.per_key
    }

    /// The concurrency limit, if set.
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The rate limit, if set.
    pub fn rate_limit(&self) -> Option<Rate> {
        self.rate
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.concurrency.is_none() && self.rate.is_none() && self.per_key.is_none()
    }

    /// Checks the limits: [`Error::is_config`] names the one that is wrong.
    pub(crate) fn check(&self) -> Result<(), Error> {
        for (what, n) in [
            ("concurrency", self.concurrency),
            ("per-key concurrency", self.per_key),
        ] {
            if let Some(n) = n {
                if n == 0 || n > MAX_LIMIT {
                    return Err(Error::config(format!(
                        "a queue's {what} must be from 1 to {MAX_LIMIT}, not {n}"
                    )));
                }
            }
        }
        self.rate.as_ref().map_or(Ok(()), Rate::check)
    }
}

/// A queue's retry policy, over each node's own
/// ([`SchedulerBuilder::max_attempts`](crate::SchedulerBuilder::max_attempts),
/// [`SchedulerBuilder::backoff`](crate::SchedulerBuilder::backoff)); a
/// task's own [`Schedule::max_attempts`](crate::Schedule::max_attempts)
/// still comes first. Unset, a part does not apply.
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::{Backoff, RetryPolicy};
///
/// let policy = RetryPolicy::new()
///     .max_attempts(3)
///     .backoff(Backoff::exponential(Duration::from_secs(10), Duration::from_secs(600)));
/// assert_eq!(policy.max_attempts_limit(), Some(3));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: Option<u32>,
    backoff: Option<Backoff>,
}

impl RetryPolicy {
    /// Each node's own.
    pub fn new() -> RetryPolicy {
        RetryPolicy::default()
    }

    /// At most `n` attempts a task (at least 1), then dead.
    pub fn max_attempts(mut self, n: u32) -> RetryPolicy {
        self.max_attempts = Some(n);
        self
    }

    /// The delay before each retry.
    pub fn backoff(mut self, backoff: Backoff) -> RetryPolicy {
        self.backoff = Some(backoff);
        self
    }

    /// The attempt limit, if set.
    pub fn max_attempts_limit(&self) -> Option<u32> {
        self.max_attempts
    }

    /// The backoff, if set.
    pub fn backoff_policy(&self) -> Option<Backoff> {
        self.backoff
    }

    /// Checks the policy: [`Error::is_config`] names what is wrong.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if let Some(n) = self.max_attempts {
            if n == 0 || n > MAX_LIMIT {
                return Err(Error::config(format!(
                    "a queue's max_attempts must be from 1 to {MAX_LIMIT}, not {n}"
                )));
            }
        }
        if let Some(b) = self.backoff {
            if b.base_delay() < MIN_PERIOD || b.max_delay() > MAX_PERIOD {
                return Err(Error::config(format!(
                    "a queue's backoff must be from 1 ms to a year, not {:?} to {:?}",
                    b.base_delay(),
                    b.max_delay()
                )));
            }
        }
        Ok(())
    }
}

/// A queue's settings as the store holds them (see
/// [`Store::queue_settings`](crate::Store::queue_settings)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSettings {
    /// The queue.
    pub queue: String,
    /// Whether it is paused: no node starts its tasks.
    pub paused: bool,
    /// Its limits.
    pub limits: QueueLimits,
    /// Its retry policy.
    pub retry: RetryPolicy,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_limits_are_refused_with_what_is_wrong() {
        let secs = Duration::from_secs;
        for (limits, says) in [
            (QueueLimits::new().concurrency(0), "concurrency"),
            (QueueLimits::new().rate(Rate::new(0, secs(1))), "count"),
            (
                QueueLimits::new().rate(Rate::new(5, Duration::ZERO)),
                "period",
            ),
            (
                QueueLimits::new().rate(Rate::new(5, secs(400 * 86_400))),
                "period",
            ),
            (
                QueueLimits::new().rate(Rate::new(5, Duration::from_micros(1500))),
                "whole",
            ),
            (
                QueueLimits::new().rate(Rate::per_second(5).burst(0)),
                "burst",
            ),
            (QueueLimits::new().concurrency(MAX_LIMIT + 1), "concurrency"),
            (QueueLimits::new().per_key_concurrency(0), "per-key"),
        ] {
            let err = limits.check().unwrap_err();
            assert!(err.is_config() && err.to_string().contains(says), "{err}");
        }
        assert!(QueueLimits::new()
            .concurrency(1)
            .rate(Rate::new(1, Duration::from_millis(1)).burst(1))
            .check()
            .is_ok());
    }
}
