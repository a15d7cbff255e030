//! A scheduler's settings, as [`SchedulerBuilder`](crate::SchedulerBuilder)
//! gathers them, and the rules they must meet together.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::error::Error;
use crate::model::backoff::Backoff;
use crate::model::clock::Clock;

/// The longest any duration setting of a scheduler is taken to be: 30
/// years, forever for a scheduler. Longer settings (up to `Duration::MAX`)
/// are lowered to it, so that no deadline a setting implies can overflow.
const LONGEST: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// The settings; see the builder's methods for what each means.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) node_id: Option<String>,
    pub(crate) window: Duration,
    pub(crate) catch_up: Duration,
    pub(crate) callback_timeout: Duration,
    pub(crate) lock_grace: Duration,
    pub(crate) max_concurrency: usize,
    /// Limits on deliveries in flight per queue, for queues that have one.
    pub(crate) queue_concurrency: BTreeMap<String, usize>,
    /// The queues whose due tasks wait for workers to claim them.
    pub(crate) pull_queues: BTreeSet<String>,
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Backoff,
    pub(crate) retention: Duration,
    pub(crate) lease_ttl: Duration,
    pub(crate) heartbeat: Duration,
    /// What the node's decisions take as now: the system's clock, or in
    /// unit tests one that follows a paused Tokio clock.
    pub(crate) clock: Clock,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_id: None,
            window: Duration::from_secs(60),
            catch_up: Duration::from_secs(1),
            callback_timeout: Duration::from_secs(60),
            lock_grace: Duration::from_secs(10),
            max_concurrency: 1024,
            queue_concurrency: BTreeMap::new(),
            pull_queues: BTreeSet::new(),
            max_attempts: 5,
            backoff: Backoff::default(),
            retention: Duration::from_secs(24 * 3600),
            lease_ttl: Duration::from_secs(10),
            heartbeat: Duration::from_secs(2),
            clock: Clock::System,
        }
    }
}

impl Config {
    /// Lowers every duration setting to [`LONGEST`], then checks that the
    /// settings can work together.
    pub(crate) fn settle(mut self) -> Result<Config, Error> {
        for d in [
            &mut self.window,
            &mut self.catch_up,
            &mut self.callback_timeout,
            &mut self.lock_grace,
            &mut self.retention,
            &mut self.lease_ttl,
            &mut self.heartbeat,
        ] {
            *d = (*d).min(LONGEST);
        }
        self.check()?;
        Ok(self)
    }

    fn check(&self) -> Result<(), Error> {
        if self.window < Duration::from_millis(10) {
            return Err(Error::config("the window must be at least 10 ms"));
        }
        if self.heartbeat.is_zero() || self.catch_up.is_zero() {
            return Err(Error::config(
                "the heartbeat and catch-up intervals must not be zero",
            ));
        }
        if self.lease_ttl <= self.heartbeat {
            return Err(Error::config(
                "the lease TTL must be longer than the heartbeat",
            ));
        }
        if self.max_concurrency == 0 || self.max_attempts == 0 {
            return Err(Error::config(
                "max_concurrency and max_attempts must be at least 1",
            ));
        }
        if let Some((queue, _)) = self.queue_concurrency.iter().find(|(_, &n)| n == 0) {
            return Err(Error::config(format!(
                "the concurrency limit of queue '{queue}' must be at least 1"
            )));
        }
        if self.callback_timeout.is_zero() {
            return Err(Error::config("the callback timeout must not be zero"));
        }
        Ok(())
    }

    /// How often expired locks in shards held all along are looked for.
    pub(crate) fn reclaim_period(&self) -> Duration {
        self.lock_grace.max(self.heartbeat)
    }

    /// How long from a failed claim or outcome until every lock it may
    /// have left has run out and a reclaim has come after: the callback
    /// timeout, the lock grace, a reclaim period and a heartbeat. Every
    /// such lock ends within a callback timeout and the lock grace; a
    /// reclaim runs at the first heartbeat a period after the last, so two
    /// are up to a period and a heartbeat apart.
    ///
    /// (The watch once ended one period after the last lock: the last
    /// reclaim could come just before the lock ran out, and a task whose
    /// outcome was refused then waited for the safety net, a minute, to be
    /// delivered again.)
    pub(crate) fn lock_span(&self) -> Duration {
        self.callback_timeout + self.lock_grace + self.reclaim_period() + self.heartbeat
    }
}
