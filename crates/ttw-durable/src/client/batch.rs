//! Batch scheduling: [`Store::schedule_batch`] stores many [`NewTask`]s in
//! one transaction, a thousand rows a statement, through the insert of many
//! rows that scheduling on a caller's connection shares.

use std::collections::HashMap;

use sqlx::Row;

use crate::client::connection::{with_conn, Conn};
use crate::client::schedule::Scheduled;
use crate::client::store::Store;
use crate::error::Error;
use crate::model::new_task::{NewRow, NewTask};
use crate::model::task::TaskId;
use crate::model::time::now_ms;
use crate::notify::{Announced, Made, ANNOUNCED};
use crate::sql::db::{placeholders, with_pool, Urgency};
use crate::sql::history::finished_twins;

/// The most tasks one insert statement of a batch carries: seven parameters
/// each, far below SQLite's 32,766 and PostgreSQL's 65,535.
const ROWS_PER_STATEMENT: usize = 1000;

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
        let rows = NewRow::check_batch(tasks)?;
        self.insert_checked(rows).await
    }

    /// Inserts rows already checked, in one transaction, and announces the
    /// tasks created once it has committed.
    pub(crate) async fn insert_checked(&self, rows: Vec<NewRow>) -> Result<Vec<Scheduled>, Error> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let db = self.db();
        // On SQLite the whole transaction is this process's one write.
        let turn = db.write_turn(Urgency::Ordinary).await;
        let (outcomes, created) = with_pool!(db, pool => {
            let mut conn = pool.acquire().await?;
            self.insert_rows(Conn::from(&mut *conn), &rows).await?
        });
        drop(turn);
        self.notifier().committed(created, Made::Created);
        Ok(outcomes)
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
        let now = now_ms();
        let tasks = self.tasks_table();
        // `{rows}` is where the rows of each statement go.
        let insert = self.notifier().announcing(&format!(
            "INSERT INTO {tasks} (run_at, payload, idempotency_key, max_attempts, queue, priority, created_at, updated_at) \
             VALUES {{rows}} ON CONFLICT (idempotency_key) DO NOTHING RETURNING {ANNOUNCED}, idempotency_key",
        ));
        let clock = self.db().clock_sql();
        // On SQLite each row's parameters are `?`, bound in order: binding
        // a statement's numbered parameters looks each name up along a list
        // of them all, which over the thousands of parameters of a batch
        // statement cost more than the insert itself.
        let sqlite = !self.is_postgres();
        let statement = |n: usize| {
            let values = (0..n)
                .map(|i| {
                    let params = if sqlite {
                        "?, ?, ?, ?, ?, ?, ?".to_string()
                    } else {
                        placeholders(1 + 7 * i, 7)
                    };
                    format!("({params}, {clock})")
                })
                .collect::<Vec<_>>()
                .join(", ");
            insert.replace("{rows}", &values)
        };
        let full = statement(ROWS_PER_STATEMENT.min(rows.len()));
        let mut outcomes: Vec<Option<Scheduled>> = vec![None; rows.len()];
        let mut created = Vec::with_capacity(rows.len());
        let mut kept = Vec::new();
        // (row, id) of each task created with a key.
        let mut keyed: Vec<(usize, i64)> = Vec::new();
        let history = self.history_table();
        let all = self.all_tasks_view();
        with_conn!(conn, c => {
            // One transaction (a savepoint inside the caller's), so that a
            // task whose key a finished one holds is never seen, and a
            // batch of many statements commits whole.
            let mut tx = sqlx::Connection::begin(c).await?;
            let c = &mut *tx;
            for (n, chunk) in rows.chunks(ROWS_PER_STATEMENT).enumerate() {
                let sql = if chunk.len() == ROWS_PER_STATEMENT.min(rows.len()) {
                    full.clone()
                } else {
                    statement(chunk.len())
                };
                let mut query = sqlx::query(&sql);
                for row in chunk {
                    query = query
                        .bind(row.run_at)
                        .bind(&row.payload)
                        .bind(&row.idempotency_key)
                        .bind(row.max_attempts)
                        .bind(&row.queue)
                        .bind(row.priority_or_default())
                        .bind(now);
                }
                // Read to its end (see the notes of `db`).
                let mut returned = Vec::with_capacity(chunk.len());
                for row in query.fetch_all(&mut *c).await? {
                    returned.push(Inserted {
                        task: Announced::read(&row)?,
                        idempotency_key: row.try_get("idempotency_key")?,
                    });
                }
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
            // (see `sql::history`), the finished one is the key's task.
            let mut gone = HashMap::new();
            for chunk in keyed.chunks(ROWS_PER_STATEMENT) {
                let sql = finished_twins(
                    tasks,
                    history,
                    &format!("t.id IN ({})", placeholders(1, chunk.len())),
                );
                let mut query = sqlx::query_as::<_, (i64, i64)>(&sql);
                for (_, id) in chunk {
                    query = query.bind(id);
                }
                gone.extend(query.fetch_all(&mut *c).await?);
            }
            if !gone.is_empty() {
                let ids: Vec<i64> = gone.keys().copied().collect();
                for chunk in ids.chunks(ROWS_PER_STATEMENT) {
                    let sql = format!("DELETE FROM {tasks} WHERE id IN ({})", placeholders(1, chunk.len()));
                    let mut query = sqlx::query(&sql);
                    for id in chunk {
                        query = query.bind(id);
                    }
                    query.execute(&mut *c).await?;
                }
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
                let sql = format!(
                    "SELECT id, idempotency_key FROM {all} WHERE idempotency_key IN ({})",
                    placeholders(1, chunk.len())
                );
                let mut query = sqlx::query(&sql);
                for &i in chunk {
                    query = query.bind(&rows[i].idempotency_key);
                }
                let mut found = HashMap::with_capacity(chunk.len());
                for row in query.fetch_all(&mut *c).await? {
                    found.insert(row.try_get::<String, _>("idempotency_key")?, row.try_get::<i64, _>("id")?);
                }
                for &i in chunk {
                    let key = rows[i].idempotency_key.as_deref().unwrap_or_default();
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
    ) -> Result<Vec<NewRow>, Error> {
        tasks
            .into_iter()
            .enumerate()
            .map(|(i, t)| NewRow::check(t).map_err(|e| e.in_batch(i)))
            .collect()
    }
}

/// A row an insert of a batch returned.
struct Inserted {
    task: Announced,
    idempotency_key: Option<String>,
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
