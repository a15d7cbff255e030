//! Batch scheduling: [`Store::schedule_batch`] stores many [`NewTask`]s in
//! one transaction, a thousand rows a statement, through the insert of many
//! rows that scheduling on a caller's connection shares.

use std::collections::HashMap;

use crate::client::schedule::Scheduled;
use crate::client::store::Store;
use crate::error::Error;
use crate::model::clock::Clock;
use crate::model::new_task::{NewRow, NewTask};
use crate::model::task::TaskId;
use crate::notify::{Announced, Made};
use crate::sql::db::{in_doubt, with_conn, with_pool, Conn, Urgency};
use crate::sql::keys;
use crate::sql::tasks::{self, Inserted, TaskParams, COPY_FROM, ROWS_PER_STATEMENT};

impl Store {
    /// Stores many tasks at once: all of them or none, in one transaction
    /// of a statement per thousand tasks. Returns what became of each, in
    /// the order given ([`Scheduled::Created`], or [`Scheduled::Existing`]
    /// for an idempotency key kept already or used earlier in the batch).
    /// The schedulers hear of every task created, as of a single schedule,
    /// once the transaction commits.
    ///
    /// # Errors
    ///
    /// A task that could not be scheduled alone (a payload over
    /// [`MAX_PAYLOAD`](crate::MAX_PAYLOAD), an empty or too long key, zero
    /// attempts, a time out of range) refuses the whole batch before
    /// anything is written: the error says what is wrong, as it would for
    /// that task alone, and [`Error::batch_index`] which task it is.
    /// [`Error::is_database`] if the transaction failed; then nothing was
    /// stored.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{NewTask, Store, MAX_PAYLOAD};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let done = store
    ///     .schedule_batch((0..3).map(|i| {
    ///         NewTask::new(format!("invoice {i}")).delay(Duration::from_secs(60 * i))
    ///     }))
    ///     .await?;
    /// assert!(done.iter().all(|s| s.is_created()));
    ///
    /// // One bad task refuses them all, and says which.
    /// let err = store
    ///     .schedule_batch([NewTask::new("fine"), NewTask::new(vec![0; MAX_PAYLOAD + 1])])
    ///     .await
    ///     .unwrap_err();
    /// assert!(err.is_payload_too_large());
    /// assert_eq!(err.batch_index(), Some(1));
    /// assert_eq!(store.counts().await?.scheduled, 3);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn schedule_batch(
        &self,
        tasks: impl IntoIterator<Item = NewTask>,
    ) -> Result<Vec<Scheduled>, Error> {
        let rows = NewRow::check_batch(tasks, self.clock())?;
        self.to_completion(move |store| async move { store.insert_checked(rows).await })
            .await
    }

    /// Inserts rows already checked, in one transaction, and announces the
    /// tasks created once it has committed. Dropped part-way, it may leave
    /// its connection mid-transaction: callers run it to its end
    /// ([`Store::to_completion`]). A connection whose transaction failed is
    /// closed, not pooled.
    pub(crate) async fn insert_checked(&self, rows: Vec<NewRow>) -> Result<Vec<Scheduled>, Error> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db();
        let keyless = rows.iter().all(|r| r.idempotency_key.is_none());
        let bulk = !db.is_sqlite() && rows.len() >= COPY_FROM;
        // On SQLite the whole transaction is this process's one write.
        let turn = db.write_turn(Urgency::Ordinary).await;
        let (outcomes, created) = with_pool!(db, pool => {
            let mut conn = pool.acquire().await?;
            let done = if keyless && (bulk || rows.len() <= ROWS_PER_STATEMENT) {
                self.insert_keyless(Conn::from(&mut *conn), &rows).await
            } else {
                self.insert_rows(Conn::from(&mut *conn), &rows).await
            };
            if done.is_err() {
                in_doubt(&mut conn);
            }
            done?
        });
        drop(turn);
        self.notifier().committed(created, Made::Created);
        Ok(outcomes)
    }

    /// Inserts rows without a key on `conn`, what
    /// [`insert_rows`](Self::insert_rows) returns for the same rows. On
    /// PostgreSQL from [`COPY_FROM`] rows on, by `COPY` (`sql::copy`), in a
    /// transaction of its own. Otherwise at most [`ROWS_PER_STATEMENT`], as
    /// one statement outside a transaction: it is atomic by itself, and
    /// with no key there is nothing to look up, so a `BEGIN` and `COMMIT`
    /// would be two round trips (on PostgreSQL) for nothing.
    async fn insert_keyless(
        &self,
        conn: Conn<'_>,
        rows: &[NewRow],
    ) -> Result<(Vec<Scheduled>, Vec<Announced>), Error> {
        let params: Vec<TaskParams<'_>> = rows.iter().map(TaskParams::from).collect();
        let now = self.clock().now_ms();
        let returned = match conn {
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) if rows.len() >= COPY_FROM => {
                crate::sql::copy::insert_keyless(c, self.names(), &params, now).await?
            }
            conn => tasks::insert(conn, self.names(), &params, now).await?,
        };
        let created = match_rows(rows, returned)?
            .into_iter()
            .map(|task| task.ok_or_else(|| Error::internal("a task without a key was not created")))
            .collect::<Result<Vec<_>, _>>()?;
        let outcomes = created
            .iter()
            .map(|task| Scheduled::Created(TaskId(task.id)))
            .collect();
        Ok((outcomes, created))
    }

    /// Inserts `rows` on `conn`, a statement per thousand, and looks up
    /// the tasks whose keys were kept already, in either table, all in one
    /// transaction: a savepoint when `conn` is in a transaction already.
    /// Returns what became of each row, in order, and each task created, to
    /// announce. Announces nothing in this process: that is the caller's.
    pub(crate) async fn insert_rows(
        &self,
        conn: Conn<'_>,
        rows: &[NewRow],
    ) -> Result<(Vec<Scheduled>, Vec<Announced>), Error> {
        if rows.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let now = self.clock().now_ms();
        let names = self.names();
        let mut outcomes: Vec<Option<Scheduled>> = vec![None; rows.len()];
        let mut created = Vec::with_capacity(rows.len());
        let mut kept = Vec::new();
        // (row, id) of each task created with a key.
        let mut keyed: Vec<(usize, i64)> = Vec::new();
        let mut params = Vec::with_capacity(ROWS_PER_STATEMENT.min(rows.len()));
        with_conn!(conn, c => {
            // One transaction (a savepoint inside the caller's), so that a
            // task whose key a finished one holds is never seen, and a
            // batch of many statements commits whole.
            let mut tx = sqlx::Connection::begin(c).await?;
            let mut conn = Conn::from(&mut *tx);
            for (n, chunk) in rows.chunks(ROWS_PER_STATEMENT).enumerate() {
                params.clear();
                params.extend(chunk.iter().map(TaskParams::from));
                let returned = tasks::insert(conn.again(), names, &params, now).await?;
                let base = n * ROWS_PER_STATEMENT;
                for (i, inserted) in match_rows(chunk, returned)?.into_iter().enumerate() {
                    match inserted {
                        Some(task) => {
                            outcomes[base + i] = Some(Scheduled::Created(TaskId(task.id)));
                            if chunk[i].idempotency_key.is_some() {
                                keyed.push((base + i, task.id));
                            }
                            created.push(task);
                        }
                        None => kept.push(base + i),
                    }
                }
            }
            // Keys a finished task holds in the history: the new task goes
            // (see `sql::keys`), the finished one is the key's task.
            let ids: Vec<i64> = keyed.iter().map(|&(_, id)| id).collect();
            let gone: HashMap<i64, i64> =
                keys::drop_finished_twins(conn.again(), names, &ids).await?.into_iter().collect();
            if !gone.is_empty() {
                for &(i, id) in &keyed {
                    if let Some(&old) = gone.get(&id) {
                        outcomes[i] = Some(Scheduled::Existing(TaskId(old)));
                    }
                }
                created.retain(|task| !gone.contains_key(&task.id));
            }
            // Keys that found a task: kept before, or created earlier in
            // this batch (visible in its own transaction), in either table.
            for chunk in kept.chunks(ROWS_PER_STATEMENT) {
                let wanted: Vec<&str> = chunk
                    .iter()
                    .map(|&i| rows[i].idempotency_key.as_deref().unwrap_or_default())
                    .collect();
                let found = keys::holders(conn.again(), names, &wanted).await?;
                for (&i, key) in chunk.iter().zip(wanted) {
                    let id = found.get(key).ok_or_else(|| {
                        Error::internal("the idempotency key kept conflicting with a task being deleted")
                            .in_batch(i)
                    })?;
                    outcomes[i] = Some(Scheduled::Existing(TaskId(*id)));
                }
            }
            tx.commit().await?;
        });
        let outcomes = outcomes
            .into_iter()
            .map(|o| o.ok_or_else(|| Error::internal("a task of the batch has no outcome")))
            .collect::<Result<_, _>>()?;
        Ok((outcomes, created))
    }
}

impl NewRow {
    /// Checks every task of a batch; the first bad one refuses them all,
    /// saying which it is.
    pub(crate) fn check_batch(
        tasks: impl IntoIterator<Item = NewTask>,
        clock: &Clock,
    ) -> Result<Vec<NewRow>, Error> {
        tasks
            .into_iter()
            .enumerate()
            .map(|(i, t)| NewRow::check(t, clock).map_err(|e| e.in_batch(i)))
            .collect()
    }
}

/// Which of `chunk` each returned row is: the task created, or `None` for
/// one whose key found a task. A row with a key is the
/// task with that key (the first of the chunk with it, since rows are
/// inserted in order and a later one conflicts with it); rows without are
/// the keyless tasks in order, since one statement draws its ids in the
/// order of its rows.
fn match_rows(chunk: &[NewRow], returned: Vec<Inserted>) -> Result<Vec<Option<Announced>>, Error> {
    let mut by_key = HashMap::new();
    let mut keyless = Vec::new();
    for row in returned {
        match row.idempotency_key {
            Some(key) => {
                by_key.insert(key, row.task);
            }
            None => keyless.push(row.task),
        }
    }
    keyless.sort_unstable_by_key(|task| task.id);
    let mut keyless = keyless.into_iter();
    let mut out = Vec::with_capacity(chunk.len());
    for row in chunk {
        out.push(match &row.idempotency_key {
            Some(key) => by_key.remove(key),
            None => Some(keyless.next().ok_or_else(|| {
                Error::from(sqlx::Error::Decode(
                    "an insert of a batch returned fewer rows than it had tasks without a key"
                        .into(),
                ))
            })?),
        });
    }
    Ok(out)
}
