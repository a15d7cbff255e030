//! What becomes of an attempt: success marks the task done; a failure
//! schedules a retry after the [`Backoff`], or marks the task dead when it
//! is out of attempts. Both are written under the claim's fence, and both
//! are counted in the node's [`SchedulerStats`].

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Error;
use crate::node::window::Window;
use crate::sql::claims::{Attempt, Claims, Due, Failed};
use crate::telemetry::NodeMetrics;
use crate::time::{ms, now_ms};

/// Counters of one node, from [`Scheduler::stats`](crate::Scheduler::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerStats {
    /// Shard leases this node holds, over all the queues it serves (leases
    /// are per queue and shard: a node serving one queue holds at most the
    /// store's shard count).
    pub shards_owned: u32,
    /// Leases this node took over from another owner (a dead, paused or
    /// departed node, or its own previous run).
    pub lease_takeovers: u64,
    /// Fired tasks this node tried to claim in a shard it believed it held,
    /// refused because another node holds the lease now.
    pub claims_lost: u64,
    /// Outcomes (`ack`, `nack`, handler results) refused because the
    /// attempt no longer belonged to this node.
    pub completions_lost: u64,
    /// Attempts started (claims won).
    pub delivered: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed (error, panic, timeout, dropped delivery).
    pub failed: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// Tasks marked dead.
    pub dead: u64,
    /// Running tasks reclaimed after their lock ran out.
    pub reclaimed: u64,
    /// Deliveries in flight now: claimed and not yet recorded, or fired
    /// and on their way to the claim.
    pub in_flight: u64,
}

/// The running counts behind [`SchedulerStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) takeovers: AtomicU64,
    pub(crate) claims_lost: AtomicU64,
    pub(crate) completions_lost: AtomicU64,
    pub(crate) delivered: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead: AtomicU64,
    pub(crate) reclaimed: AtomicU64,
}

impl Counters {
    /// Adds one to `counter`.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now, with the window's shard figures.
    pub(crate) fn snapshot(&self, window: &Window) -> SchedulerStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SchedulerStats {
            shards_owned: window.shards.owned_count(),
            lease_takeovers: get(&self.takeovers),
            claims_lost: get(&self.claims_lost),
            completions_lost: get(&self.completions_lost),
            delivered: get(&self.delivered),
            succeeded: get(&self.succeeded),
            failed: get(&self.failed),
            retried: get(&self.retried),
            dead: get(&self.dead),
            reclaimed: get(&self.reclaimed),
            in_flight: window.shards.in_flight_total(),
        }
    }
}

/// Records outcomes for one node: what a handler's supervisor and a
/// streamed [`Delivery`](crate::Delivery) settle through.
pub(crate) struct Outcomes {
    claims: Claims,
    window: Arc<Window>,
    backoff: Backoff,
    /// The attempt limit of tasks scheduled without their own.
    default_max: i64,
    node_id: String,
    pub(crate) counters: Counters,
    /// The node's metric handles.
    pub(crate) metrics: NodeMetrics,
    /// The node was aborted: outcomes are no longer written.
    aborted: AtomicBool,
}

impl Outcomes {
    pub(crate) fn new(
        claims: Claims,
        window: Arc<Window>,
        backoff: Backoff,
        max_attempts: u32,
        node_id: String,
    ) -> Outcomes {
        let metrics = NodeMetrics::new(&node_id, window.lanes.queues());
        Outcomes {
            metrics,
            claims,
            window,
            backoff,
            default_max: i64::from(max_attempts),
            node_id,
            counters: Counters::default(),
            aborted: AtomicBool::new(false),
        }
    }

    /// From now on, every outcome fails with [`Error::is_closed`]: the node
    /// stopped as a crash would.
    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.aborted.load(Ordering::SeqCst) {
            return Err(Error::closed());
        }
        Ok(())
    }

    /// The metrics of `attempt`'s queue.
    pub(crate) fn queue_metrics(&self, attempt: &Attempt) -> &crate::telemetry::QueueMetrics {
        self.metrics.queue(self.window.lanes.index_of(attempt.lane))
    }

    /// Records a successful attempt.
    pub(crate) async fn succeed(&self, attempt: &Attempt) -> Result<(), Error> {
        self.check_open()?;
        if self.claims.complete(attempt).await? {
            Counters::bump(&self.counters.succeeded);
            self.queue_metrics(attempt).succeeded.increment(1);
            Ok(())
        } else {
            Counters::bump(&self.counters.completions_lost);
            self.metrics.completions_lost.increment(1);
            Err(Error::lost())
        }
    }

    /// Records a failed attempt: a retry after the backoff, or dead.
    pub(crate) async fn fail(&self, attempt: &Attempt, error: &str) -> Result<(), Error> {
        self.check_open()?;
        let delay = self.backoff.delay(attempt.number, attempt.id as u64);
        let retry_at = now_ms().saturating_add(ms(delay));
        let failed = self
            .claims
            .fail(attempt, error, retry_at, self.default_max)
            .await?;
        match failed {
            Some(Failed::Retry(run_at)) => {
                Counters::bump(&self.counters.failed);
                Counters::bump(&self.counters.retried);
                let metrics = self.queue_metrics(attempt);
                metrics.failed.increment(1);
                metrics.retried.increment(1);
                self.window
                    .arm(Due {
                        id: attempt.id,
                        run_at,
                        lane: attempt.lane,
                        priority: attempt.priority,
                    })
                    .await;
                Ok(())
            }
            Some(Failed::Dead) => {
                Counters::bump(&self.counters.failed);
                Counters::bump(&self.counters.dead);
                let metrics = self.queue_metrics(attempt);
                metrics.failed.increment(1);
                metrics.dead.increment(1);
                tracing::warn!(node = %self.node_id, id = attempt.id, error, "task is dead: out of attempts");
                Ok(())
            }
            None => {
                Counters::bump(&self.counters.completions_lost);
                self.metrics.completions_lost.increment(1);
                Err(Error::lost())
            }
        }
    }
}

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
