//! Recurring schedules: makes tasks of the occurrences of the schedules in
//! the shards held that fall due within `ahead` (see
//! [`crate::recurring`]), when the earliest next one comes within reach,
//! at least every half window (a schedule registered in another process,
//! on SQLite, is found then), and at once when a schedule changed or a
//! heartbeat took shards.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::store::Store;
use crate::error::Error;
use crate::model::clock::Clock;
use crate::node::config::Config;
use crate::node::events::Reporter;
use crate::node::report::Failing;
use crate::node::wakes::Wakes;
use crate::recurring;
use crate::sql::claims::Claims;

/// Where occurrences are made tasks: the store, the session whose shards
/// they are looked for in (its statements), and the clock.
#[derive(Clone)]
pub(crate) struct Occurring {
    pub(crate) store: Store,
    pub(crate) claims: Claims,
    pub(crate) clock: Clock,
}

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

    /// Passes over the schedules of the shards `claims`' session holds
    /// when due, or when woken.
    pub(crate) async fn run(self, with: Occurring, wakes: Arc<Wakes>, reporter: Reporter) {
        let mut changed = with.store.notifier().watch_recurring();
        let mut at = Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = wakes.recurring.notified() => {}
                Ok(()) = changed.changed() => {}
            }
            if let Err(err) = self.pass(&with, &mut at).await {
                reporter.report(Failing::Control, &err);
            }
        }
    }

    /// One pass; sets `at` to when to come back: `ahead` before the
    /// earliest next occurrence, at most the longest wait; after a
    /// failure, a catch-up period later.
    async fn pass(&self, with: &Occurring, at: &mut Instant) -> Result<(), Error> {
        let now = Instant::now();
        *at = now + self.retry;
        let earliest = with
            .store
            .make_occurrences(with.claims.session(), self.ahead)
            .await?;
        let fallback = now + self.longest;
        *at = match earliest {
            Some(next) => {
                let wait = next
                    .saturating_sub(self.ahead)
                    .saturating_sub(with.clock.now_ms())
                    .max(0);
                (now + Duration::from_millis(wait as u64)).min(fallback)
            }
            None => fallback,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::duties::fixture::Parts;

    /// A pass makes the next occurrence of a schedule in a held shard a
    /// task, and comes back before the one after falls due.
    #[tokio::test]
    async fn a_pass_makes_the_next_occurrence_a_task_and_comes_back_in_time() {
        let parts = Parts::new().await;
        parts.take_shards().await;
        parts
            .store
            .register_recurring(crate::Recurring::every("tick", Duration::from_secs(60)))
            .await
            .unwrap();
        let duty = Occurrences {
            ahead: 70_000,
            retry: Duration::from_secs(1),
            longest: Duration::from_secs(600),
        };
        let mut at = Instant::now();
        duty.pass(&parts.occurring(), &mut at).await.unwrap();
        let made: Vec<_> = parts
            .store
            .pending_page(None, 10)
            .await
            .unwrap()
            .into_iter()
            .filter(|t| t.recurring.as_deref() == Some("tick"))
            .collect();
        assert_eq!(made.len(), 1, "the occurrence within reach: {made:?}");
        // The next one is 120 s out, made 70 s ahead: back within 50 s.
        assert!(
            at <= Instant::now() + Duration::from_secs(51),
            "back in time"
        );
        duty.pass(&parts.occurring(), &mut at).await.unwrap();
        let again = parts.store.pending_page(None, 10).await.unwrap();
        assert_eq!(again.len(), 1, "an occurrence is made once");
    }
}
