//! Counting tasks: per state ([`Store::counts`]) and per queue and state
//! ([`Store::queue_counts`]).

use std::collections::BTreeMap;

use crate::client::store::Store;
use crate::error::Error;
use crate::model::task::{StateCounts, TaskState};
use crate::sql::admin;

impl Store {
    /// How many tasks are in each state, as `(scheduled, running, done,
    /// dead, cancelled)`.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn counts(&self) -> Result<StateCounts, Error> {
        let rows = admin::state_counts(self.db()).await?;
        let mut counts = StateCounts::default();
        for (state, n) in rows {
            *counts.slot(TaskState::from_sql(&state)?) = u64::try_from(n).unwrap_or(0);
        }
        Ok(counts)
    }

    /// How many tasks each queue holds in each state, by queue name; a
    /// queue appears once it has a task. Tasks of a queue that no node
    /// serves wait in `scheduled`.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("a").queue("emails").await?;
    /// store.schedule("b").await?;
    /// let counts = store.queue_counts().await?;
    /// assert_eq!(counts["emails"].scheduled, 1);
    /// assert_eq!(counts["default"].scheduled, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn queue_counts(&self) -> Result<BTreeMap<String, StateCounts>, Error> {
        let rows = admin::queue_state_counts(self.db()).await?;
        let mut counts: BTreeMap<String, StateCounts> = BTreeMap::new();
        for (queue, state, n) in rows {
            *counts
                .entry(queue)
                .or_default()
                .slot(TaskState::from_sql(&state)?) = u64::try_from(n).unwrap_or(0);
        }
        Ok(counts)
    }

    /// Sets the `ttw_tasks{queue, state}` gauge of the installed
    /// [`metrics`] recorder from [`Store::queue_counts`], and returns the
    /// counts. One `GROUP BY` over the tasks: call it every few seconds,
    /// from one process (the `ttw serve` command does), not per task. A
    /// queue this store published before and that has no task left now
    /// (its finished tasks swept by the retention, say) is set to zero in
    /// every state rather than left at its last counts.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("a").await?;
    /// let counts = store.publish_task_counts().await?;
    /// assert_eq!(counts["default"].scheduled, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn publish_task_counts(&self) -> Result<BTreeMap<String, StateCounts>, Error> {
        let counts = self.queue_counts().await?;
        let mut published = self.published_queues();
        // A queue published before with no task left now (its last finished
        // tasks swept, say) reads zero rather than its last counts.
        for gone in published.iter().filter(|q| !counts.contains_key(*q)) {
            publish_queue(gone, &StateCounts::default());
        }
        for (queue, c) in &counts {
            publish_queue(queue, c);
        }
        *published = counts.keys().cloned().collect();
        drop(published);
        Ok(counts)
    }
}

/// Sets the `ttw_tasks` gauges of `queue`.
fn publish_queue(queue: &str, c: &StateCounts) {
    for (state, n) in [
        (TaskState::Scheduled, c.scheduled),
        (TaskState::Running, c.running),
        (TaskState::Done, c.done),
        (TaskState::Dead, c.dead),
        (TaskState::Cancelled, c.cancelled),
    ] {
        crate::telemetry::task_gauge(queue, state.as_sql(), n);
    }
}
