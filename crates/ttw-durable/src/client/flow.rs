//! Flow control an operator sets on a queue, for every node at once:
//! pause and resume ([`Store::pause_queue`]), global concurrency and rate
//! ([`Store::set_queue_limits`]), and reading them back.

use crate::client::store::Store;
use crate::error::Error;
use crate::model::flow::{QueueLimits, QueueSettings, RetryPolicy};
use crate::model::queue::check_queue;
use crate::sql::queues;

impl Store {
    /// Pauses `queue` on every node: no node starts another of its tasks
    /// (deliveries in flight finish), a node started later obeys it too,
    /// and its tasks wait, scheduled, until [`resume_queue`](Self::resume_queue).
    /// The plain claim reads the setting in its own statement, so a node
    /// starts none of the queue's tasks once this returns; a node holding
    /// fired tasks of a paused queue looks for the resume every 500 ms.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = ttw_durable::Store::sqlite_in_memory().await?;
    /// store.pause_queue("sms").await?;
    /// assert!(store.queue_settings("sms").await?.paused);
    /// store.resume_queue("sms").await?;
    /// assert!(!store.queue_settings("sms").await?.paused);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_queue`] for a bad name, [`Error::is_database`].
    pub async fn pause_queue(&self, queue: &str) -> Result<(), Error> {
        check_queue(queue)?;
        let queue = queue.to_owned();
        self.to_completion(move |store| async move {
            queues::set_paused(store.db(), &queue, true).await
        })
        .await
    }

    /// Resumes a paused `queue`: its due tasks start again, on the nodes
    /// that serve it, within 500 ms.
    ///
    /// # Errors
    ///
    /// As [`pause_queue`](Self::pause_queue).
    pub async fn resume_queue(&self, queue: &str) -> Result<(), Error> {
        check_queue(queue)?;
        let queue = queue.to_owned();
        self.to_completion(move |store| async move {
            queues::set_paused(store.db(), &queue, false).await
        })
        .await
    }

    /// Sets `queue`'s limits across every node, replacing the ones it had
    /// ([`QueueLimits::new`] clears them). A task counts as running from its
    /// claim until its outcome is recorded, or until its lock runs out if
    /// its node died; a task held back by a limit stays scheduled, waits on
    /// its node in due order, and its lateness counts from its due time.
    /// Setting the same rate again keeps the bucket as it is. A limit
    /// changed while tasks run applies to the next claim: tasks already
    /// running finish.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// use std::time::Duration;
    /// use ttw_durable::{QueueLimits, Rate};
    ///
    /// let store = ttw_durable::Store::sqlite_in_memory().await?;
    /// let limits = QueueLimits::new().concurrency(20).rate(Rate::per_second(100).burst(10));
    /// store.set_queue_limits("partner-api", limits).await?;
    /// assert_eq!(store.queue_settings("partner-api").await?.limits, limits);
    ///
    /// let zero = QueueLimits::new().rate(Rate::new(0, Duration::from_secs(1)));
    /// assert!(store.set_queue_limits("partner-api", zero).await.unwrap_err().is_config());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for a limit out of range (a concurrency, count
    /// or burst of 0, a period under 1 ms or over a year),
    /// [`Error::is_invalid_queue`], [`Error::is_database`].
    pub async fn set_queue_limits(&self, queue: &str, limits: QueueLimits) -> Result<(), Error> {
        check_queue(queue)?;
        limits.check()?;
        let queue = queue.to_owned();
        self.to_completion(move |store| async move {
            queues::set_limits(store.db(), &queue, &limits).await
        })
        .await
    }

    /// Sets `queue`'s retry policy for every node, replacing the one it had
    /// ([`RetryPolicy::new`] leaves each node's own): the attempts a task
    /// gets before it is dead (a task's own limit still comes first), and
    /// the backoff before each retry. A node reads the backoff when one of
    /// the queue's attempts fails, at most once a second; the attempt limit
    /// is read by the statement that records the failure.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// use std::time::Duration;
    /// use ttw_durable::{Backoff, RetryPolicy};
    ///
    /// let store = ttw_durable::Store::sqlite_in_memory().await?;
    /// let policy = RetryPolicy::new()
    ///     .max_attempts(3)
    ///     .backoff(Backoff::exponential(Duration::from_secs(10), Duration::from_secs(600)));
    /// store.set_queue_retry("partner-api", policy).await?;
    /// assert_eq!(store.queue_settings("partner-api").await?.retry, policy);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for an attempt limit of 0 or a backoff under
    /// 1 ms or over a year, [`Error::is_invalid_queue`],
    /// [`Error::is_database`].
    pub async fn set_queue_retry(&self, queue: &str, retry: RetryPolicy) -> Result<(), Error> {
        check_queue(queue)?;
        retry.check()?;
        let queue = queue.to_owned();
        self.to_completion(move |store| async move {
            queues::set_retry(store.db(), &queue, &retry).await
        })
        .await
    }

    /// The settings of `queue`: not paused and no limits if none were set.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_queue`], [`Error::is_database`].
    pub async fn queue_settings(&self, queue: &str) -> Result<QueueSettings, Error> {
        check_queue(queue)?;
        Ok(match queues::get(self.db(), queue).await? {
            Some(row) => row.settings(),
            None => QueueSettings {
                queue: queue.to_string(),
                paused: false,
                limits: QueueLimits::new(),
                retry: RetryPolicy::new(),
            },
        })
    }

    /// The settings of every queue that has any, by name.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn all_queue_settings(&self) -> Result<Vec<QueueSettings>, Error> {
        Ok(queues::list(self.db())
            .await?
            .into_iter()
            .map(|row| row.settings())
            .collect())
    }
}
