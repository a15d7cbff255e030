//! Recurring schedules: makes tasks of the occurrences of the schedules in
//! the shards held that fall due within `ahead` (see
//! [`crate::recurring`]), when the earliest next one comes within reach,
//! at least every half window (a schedule registered in another process,
//! on SQLite, is found then), and at once when a schedule changed or a
//! heartbeat took shards.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::node::config::Config;
use crate::node::report::Failing;
use crate::node::Node;
use crate::recurring;

/// The settings of the occurrences' duty.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Occurrences {
    /// How far ahead of an occurrence its task is made, in ms.
    ahead: i64,
    /// After a failure, when to try again.
    retry: Duration,
    /// The longest wait between two passes.
    longest: Duration,
}

impl Occurrences {
    pub(crate) fn new(config: &Config) -> Occurrences {
        Occurrences {
            ahead: recurring::ahead(config.catch_up),
            retry: config.catch_up,
            longest: config.window / 2,
        }
    }

    /// Passes over the schedules when due, or when woken.
    pub(crate) async fn run(self, node: Arc<Node>) {
        let mut changed = node.store.notifier().watch_recurring();
        let mut at = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = node.recurring_wake.notified() => {}
                Ok(()) = changed.changed() => {}
            }
            if let Err(err) = self.pass(&node, &mut at).await {
                node.report(Failing::Control, &err);
            }
        }
    }

    /// One pass; sets `at` to when to come back: `ahead` before the
    /// earliest next occurrence, at most the longest wait; after a
    /// failure, a catch-up period later.
    async fn pass(&self, node: &Node, at: &mut Instant) -> Result<(), Error> {
        let now = Instant::now();
        *at = now + self.retry;
        let earliest = node
            .store
            .make_occurrences(node.claims.session(), self.ahead)
            .await?;
        let fallback = now + self.longest;
        *at = match earliest {
            Some(next) => {
                let wait = next
                    .saturating_sub(self.ahead)
                    .saturating_sub(node.config.clock.now_ms())
                    .max(0);
                (now + Duration::from_millis(wait as u64)).min(fallback)
            }
            None => fallback,
        };
        Ok(())
    }
}
