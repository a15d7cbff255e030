//! Moving a store: its scheduled tasks read a page at a time with all that
//! [`NewTask`] takes, to be scheduled again in another store (`ttw export`
//! and `ttw import` move a SQLite store to PostgreSQL this way).

use std::time::SystemTime;

use crate::client::admin::MAX_PAGE;
use crate::client::store::Store;
use crate::error::Error;
use crate::model::new_task::NewTask;
use crate::model::task::TaskId;
use crate::sql::admin::{self, PendingRow};

/// A task waiting for its time, as [`Store::pending_page`] reads it: what
/// scheduling it again takes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingTask {
    /// Its id in the store it was read from.
    pub id: TaskId,
    /// When it is due.
    pub run_at: SystemTime,
    /// The payload.
    pub payload: Vec<u8>,
    /// Its queue.
    pub queue: String,
    /// Its priority within its queue.
    pub priority: i16,
    /// Its own attempt limit, if it was scheduled with one.
    pub max_attempts: Option<u32>,
    /// Its idempotency key.
    pub idempotency_key: Option<String>,
    /// Its partition key.
    pub partition_key: Option<String>,
    /// The recurring schedule it is an occurrence of, if any: such a task
    /// is made again by its schedule in the store the schedule moves to.
    pub recurring: Option<String>,
    /// Its envelope (destination, trace context), if any.
    pub envelope: Option<crate::model::envelope::Envelope>,
    /// Its kind, for a typed job.
    pub kind: Option<String>,
}

impl PendingTask {
    /// The key it is scheduled with in another store: its own, or
    /// `ttw-import:<its id>` for a task without one.
    pub fn import_key(&self) -> String {
        self.idempotency_key
            .clone()
            .unwrap_or_else(|| format!("ttw-import:{}", self.id.get()))
    }

    /// The task to schedule in another store: the same time, payload,
    /// queue, priority, limits and keys. A task without an idempotency key
    /// gets `ttw-import:<its id>`, so that scheduling the same export twice
    /// stores it once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// use std::time::Duration;
    /// use ttw_durable::{PendingTask, Store};
    ///
    /// let (from, to) = (Store::sqlite_in_memory().await?, Store::sqlite_in_memory().await?);
    /// from.schedule(r#"{"order":42}"#).kind("cancel_order").delay(Duration::from_secs(900)).await?;
    /// let page = from.pending_page(None, 1_000).await?;
    /// to.schedule_batch(page.iter().map(PendingTask::to_new_task)).await?;
    /// to.schedule_batch(page.iter().map(PendingTask::to_new_task)).await?; // stored once
    /// assert_eq!(to.counts().await?.scheduled, 1);
    /// let moved = &to.pending_page(None, 10).await?[0];
    /// assert_eq!(moved.run_at, page[0].run_at);
    /// assert_eq!(moved.kind.as_deref(), Some("cancel_order"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn to_new_task(&self) -> NewTask {
        let mut task = NewTask::new(self.payload.clone())
            .at(self.run_at)
            .queue(self.queue.clone())
            .priority(self.priority)
            .idempotency_key(self.import_key());
        if let Some(n) = self.max_attempts {
            task = task.max_attempts(n);
        }
        if let Some(key) = &self.partition_key {
            task = task.partition_key(key.clone());
        }
        if let Some(envelope) = &self.envelope {
            task = task.envelope(envelope.clone());
        }
        if let Some(kind) = &self.kind {
            task = task.kind(kind.clone());
        }
        task
    }
}

impl Store {
    /// Up to `limit` scheduled tasks (not yet running or finished) with ids
    /// after `after`, in id order: a page of the store's pending work, for
    /// moving it to another store ([`PendingTask::to_new_task`]). A task
    /// that runs or is cancelled between two pages is not in a later one.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for a limit of 0 or over
    /// [`MAX_PAGE`](crate::MAX_PAGE); [`Error::is_database`].
    pub async fn pending_page(
        &self,
        after: Option<TaskId>,
        limit: u32,
    ) -> Result<Vec<PendingTask>, Error> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::config(format!(
                "a page holds 1 to {} tasks",
                MAX_PAGE
            )));
        }
        let rows = admin::pending(self.db(), after.map(TaskId::get).unwrap_or(0), limit).await?;
        rows.into_iter().map(PendingTask::try_from).collect()
    }
}

impl TryFrom<PendingRow> for PendingTask {
    type Error = Error;

    fn try_from(row: PendingRow) -> Result<PendingTask, Error> {
        Ok(PendingTask {
            id: TaskId(row.id),
            run_at: crate::model::time::from_ms(row.run_at),
            payload: row.payload,
            queue: row.queue,
            priority: crate::sql::db::priority_from_sql(row.priority),
            max_attempts: row.max_attempts.map(crate::sql::db::clamp_u32),
            idempotency_key: row.idempotency_key,
            partition_key: row.partition_key,
            recurring: row.recurring,
            envelope: row
                .envelope
                .as_deref()
                .map(crate::model::envelope::Envelope::decode)
                .transpose()?,
            kind: row.kind,
        })
    }
}
