//! Tasks by their idempotency key: read, cancel and move a task by its key
//! rather than its id, and the replacement behind
//! [`Schedule::replace_pending`](crate::Schedule::replace_pending).
//!
//! What each does depends on where the key's task is: cancel and
//! reschedule change a task that is scheduled (never claimed, or waiting
//! for its retry); a replacement changes only a pending task (scheduled and
//! never claimed), never one waiting for its retry. A running task goes on
//! as it was claimed; a finished one (done, dead, cancelled) keeps its key until the
//! retention sweep deletes it, and is left alone.

use std::time::SystemTime;

use crate::client::schedule::Scheduled;
use crate::client::store::{Store, Which};
use crate::error::Error;
use crate::model::new_task::{NewRow, NewTask};
use crate::model::task::{TaskId, TaskInfo, TaskState};
use crate::model::time::to_ms;
use crate::notify::{Announced, Made};
use crate::sql::db::{in_doubt, with_conn, Conn, Urgency};
use crate::sql::keys::{self, Replacement};
use crate::sql::tasks::{self, MakeDue, TaskParams};

/// How many times a replacement looks again when the key's task changed
/// between its statements (created, claimed or deleted by another writer).
const REPLACE_TRIES: usize = 3;

impl Store {
    /// The task that holds idempotency key `key`, as [`Store::get`] reads
    /// it, or `None` if no task has it (never had, or the task was deleted
    /// after its retention).
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
    /// let id = store.schedule("x").idempotency_key("invoice:9").await?;
    /// assert_eq!(store.get_by_key("invoice:9").await?.unwrap().id, id);
    /// assert!(store.get_by_key("invoice:10").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get_by_key(&self, key: &str) -> Result<Option<TaskInfo>, Error> {
        self.get_where(Which::Key(key)).await
    }

    /// Cancels the task that holds idempotency key `key`, if it is still
    /// scheduled, as [`Store::cancel`] does. Returns whether it was: `false`
    /// when no task has the key, or its task is running (the attempt goes
    /// on, and its retries if it fails), or finished. A cancelled task keeps
    /// its key until the retention sweep deletes it: scheduling with the
    /// key until then answers [`Scheduled::Existing`].
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Store, TaskState};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("x").idempotency_key("trial-ends:7").delay(Duration::from_secs(60)).await?;
    /// assert!(store.cancel_by_key("trial-ends:7").await?);
    /// assert!(!store.cancel_by_key("trial-ends:7").await?);
    /// let info = store.get_by_key("trial-ends:7").await?.unwrap();
    /// assert_eq!(info.state, TaskState::Cancelled);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cancel_by_key(&self, key: &str) -> Result<bool, Error> {
        self.cancel_where(Which::Key(key)).await
    }

    /// Moves the task that holds idempotency key `key`, if it is still
    /// scheduled, to a new time, as [`Store::reschedule`] does. Returns
    /// whether it was: `false` when no task has the key, or its task is
    /// running or finished (then nothing changes).
    ///
    /// # Errors
    ///
    /// [`Error::is_out_of_range`] for a time the store cannot hold,
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// store.schedule("x").idempotency_key("digest:ann").delay(Duration::from_secs(60)).await?;
    /// let later = SystemTime::now() + Duration::from_secs(3600);
    /// assert!(store.reschedule_by_key("digest:ann", later).await?);
    /// assert!(!store.reschedule_by_key("digest:bob", later).await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reschedule_by_key(&self, key: &str, at: SystemTime) -> Result<bool, Error> {
        self.make_due(MakeDue {
            which: Which::Key(key),
            from: TaskState::Scheduled,
            run_at: to_ms(at)?,
            restart: false,
        })
        .await
    }

    /// [`Schedule::replace_pending`](crate::Schedule::replace_pending) on
    /// the store's own pool: each statement commits by itself, and this
    /// process's schedulers hear of the change after it.
    pub(crate) async fn upsert(&self, task: NewTask) -> Result<Scheduled, Error> {
        let row = NewRow::check(task, self.clock())?;
        let db = self.db();
        let turn = db.write_turn(Urgency::Ordinary).await;
        let (outcome, changed) = match db {
            #[cfg(feature = "sqlite")]
            crate::sql::db::Db::Sqlite(pool, _) => {
                let mut conn = pool.acquire().await?;
                let done = self.upsert_on(Conn::from(&mut *conn), &row).await;
                if done.is_err() {
                    in_doubt(&mut conn);
                }
                done?
            }
            #[cfg(feature = "postgres")]
            crate::sql::db::Db::Postgres(pool) => {
                let mut conn = pool.acquire().await?;
                let done = self.upsert_on(Conn::from(&mut *conn), &row).await;
                if done.is_err() {
                    in_doubt(&mut conn);
                }
                done?
            }
        };
        drop(turn);
        let made = if matches!(outcome, Scheduled::Created(_)) {
            Made::Created
        } else {
            Made::Moved
        };
        self.notifier().committed(changed, made);
        Ok(outcome)
    }

    /// The replacement on `conn`: the key's task, if pending, takes
    /// `row`'s payload, and its time and attempt limit if they were given;
    /// without a task for the key, `row` is inserted. Returns what was done
    /// and, for a task created or replaced, the task to announce. A
    /// replaced task keeps its queue, and its priority unless one was given.
    ///
    /// Three statements in one transaction (a savepoint inside the
    /// caller's), alike on both backends: update the key's
    /// pending task; else insert, unless the key is taken; else read the
    /// key's task. Only if that task was pending after all (another writer
    /// got in between) does it go round again.
    pub(crate) async fn upsert_on(
        &self,
        conn: Conn<'_>,
        row: &NewRow,
    ) -> Result<(Scheduled, Option<Announced>), Error> {
        let Some(key) = row.idempotency_key.as_deref() else {
            return Err(Error::invalid_task(
                "replace_pending",
                "needs an idempotency key to find the task by",
            ));
        };
        let names = self.names();
        let replacement = Replacement {
            key,
            payload: &row.payload,
            run_at: row.time_given.then_some(row.run_at),
            max_attempts: row.max_attempts,
            priority: row.priority,
            max_wait: row.max_wait,
            kind: row.kind.as_deref(),
        };
        with_conn!(conn, c => {
            // A savepoint inside the caller's transaction, a transaction
            // of its own outside one (see `sql::keys`).
            let mut tx = sqlx::Connection::begin(c).await?;
            let mut conn = Conn::from(&mut *tx);
            for _ in 0..REPLACE_TRIES {
                if let Some(task) = keys::replace_pending(conn.again(), names, replacement).await? {
                    tx.commit().await?;
                    return Ok((Scheduled::Replaced(TaskId(task.id)), Some(task)));
                }
                let params = [TaskParams::from(row)];
                if let Some(inserted) = tasks::insert(conn.again(), names, &params, self.clock().now_ms()).await?.pop() {
                    let task = inserted.task;
                    let twins = keys::drop_finished_twins(conn.again(), names, &[task.id]).await?;
                    if let (Some(&(_, old)), Some(_)) = (twins.first(), row.max_wait) {
                        // A debounce's next generation: the finished task
                        // gives the key up.
                        keys::release(conn.again(), names, old).await?;
                        continue;
                    }
                    tx.commit().await?;
                    return Ok(match twins.first() {
                        Some(&(_, old)) => (Scheduled::Existing(TaskId(old)), None),
                        None => (Scheduled::Created(TaskId(task.id)), Some(task)),
                    });
                }
                if let Some(holder) = keys::holder(conn.again(), names, key).await? {
                    if !holder.is_pending() && row.max_wait.is_some() {
                        keys::release(conn.again(), names, holder.id).await?;
                        continue;
                    }
                    if !holder.is_pending() {
                        tx.commit().await?;
                        return Ok((Scheduled::Existing(TaskId(holder.id)), None));
                    }
                }
            }
            Err(Error::internal(
                "the idempotency key's task kept changing under the replacement",
            ))
        })
    }
}
