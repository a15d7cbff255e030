//! The retention sweep: deletes the done and cancelled tasks older than
//! the retention from the history, in bounded batches (see
//! [`crate::sql::history::sweep`]), once a tenth of the retention (between
//! half a window and [`LONGEST`] apart): finished tasks may outlive the
//! retention by that much.

use std::time::Duration;

use crate::model::clock::Clock;
use crate::model::time::ms;
use crate::node::config::Config;
use crate::node::events::Reporter;
use crate::node::report::Failing;
use crate::sql::claims::Claims;

/// The most rows one statement of the sweep deletes.
const BATCH: u64 = 1_000;

/// The longest time between two sweeps.
const LONGEST: Duration = Duration::from_secs(10 * 60);

/// The sweeper's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sweeper {
    /// How long finished tasks are kept
    /// ([`SchedulerBuilder::retention`](crate::SchedulerBuilder::retention)).
    retention: Duration,
    /// The first sweep, half a window after the node starts.
    first: Duration,
    /// Between two sweeps.
    every: Duration,
}

impl Sweeper {
    pub(crate) fn new(config: &Config) -> Sweeper {
        Sweeper {
            retention: config.retention,
            first: config.window / 2,
            every: (config.retention / 10).min(LONGEST).max(config.window / 2),
        }
    }

    /// Sweeps half a window after the start, then every period; a sweep
    /// that failed is tried again half a window later.
    pub(crate) async fn run(self, claims: Claims, clock: Clock, reporter: Reporter) {
        let mut wait = self.first;
        loop {
            tokio::time::sleep(wait).await;
            let before = clock.now_ms().saturating_sub(ms(self.retention));
            wait = match claims.sweep(before, BATCH).await {
                Ok(_) => self.every,
                Err(err) => {
                    reporter.report(Failing::Control, &err);
                    self.first
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::node::duties::fixture::Parts;

    /// Finished tasks older than the retention are deleted from the
    /// history; a newer one and a task still scheduled stay.
    #[tokio::test]
    async fn finished_tasks_past_the_retention_are_swept_and_no_others() {
        let parts = Parts::new().await;
        let old = parts.store.schedule("old").await.unwrap();
        let new = parts.store.schedule("new").await.unwrap();
        let pending = parts
            .store
            .schedule("pending")
            .delay(Duration::from_secs(3600))
            .await
            .unwrap();
        let now = parts.config.clock.now_ms();
        for (id, finished) in [(old, now - 120_000), (new, now)] {
            crate::sql::testing::finish_into_history(parts.store.db(), id.get(), finished)
                .await
                .unwrap();
        }
        let sweeper = Sweeper {
            retention: Duration::from_secs(60),
            first: Duration::from_millis(1),
            every: Duration::from_millis(10),
        };
        let task = tokio::spawn(sweeper.run(
            parts.claims.clone(),
            parts.config.clock.clone(),
            parts.reporter(),
        ));
        for _ in 0..500 {
            if parts.store.get(old).await.unwrap().is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.abort();
        assert!(parts.store.get(old).await.unwrap().is_none(), "swept");
        assert!(
            parts.store.get(new).await.unwrap().is_some(),
            "inside the retention"
        );
        assert!(
            parts.store.get(pending).await.unwrap().is_some(),
            "not finished"
        );
    }
}
