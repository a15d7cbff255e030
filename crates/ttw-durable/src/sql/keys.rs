//! Idempotency keys: the key-in-history protocol every insert that takes a
//! key ends with ([`drop_finished_twins`]), the lookup of the tasks that
//! hold keys, and the replacement of a pending task by its key.
//!
//! A key stays taken while its task is in either table. `ttw_tasks`'s
//! unique index guards the tasks there; a task that finished has moved to
//! `ttw_history`, which an insert's `ON CONFLICT` cannot see. So an insert
//! that takes a key looks in the history after its own insert, in the same
//! transaction, and deletes what it inserted if a finished task holds the
//! key: the finished task is the key's.
//!
//! Why after the insert: a task leaving `ttw_tasks` for `ttw_history` frees
//! the key in `ttw_tasks`'s unique index as it commits. An insert that
//! looked in `ttw_history` first, in the same statement, could read it
//! before that commit and insert after it, under the same key. Looking in
//! a statement of its own after the insert sees the move: the insert
//! either found the finished task still in `ttw_tasks` (and conflicted),
//! or waited for the move to commit, which this statement then sees.

use std::collections::HashMap;

use crate::error::Error;
use crate::model::task::TaskState;
use crate::sql::announce::{Announced, AnnouncedRow, ANNOUNCED};
use crate::sql::db::{placeholders, with_conn, Conn};
use crate::sql::names::Names;
use crate::sql::tasks::ROWS_PER_STATEMENT;

/// A task that is pending: scheduled and never claimed. A task waiting for
/// its retry is scheduled too, but has had an attempt: its retries go on
/// with the payload the failed attempt was claimed with, at the time its
/// backoff set, so a replacement leaves it alone.
const PENDING: &str = "state = 'scheduled' AND attempts = 0";

/// The last step of every insert that takes a key: among the tasks just
/// inserted (`ids`), those whose key a finished task in the history holds
/// are deleted again. Returns them as (new task, the finished task that
/// holds its key). Run it in the insert's transaction.
pub(crate) async fn drop_finished_twins(
    mut conn: Conn<'_>,
    names: &Names,
    ids: &[i64],
) -> Result<Vec<(i64, i64)>, Error> {
    let mut twins = Vec::new();
    for chunk in ids.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "SELECT t.id AS new_id, h.id AS old_id FROM {} t \
             JOIN {} h ON h.idempotency_key = t.idempotency_key WHERE t.id IN ({})",
            names.tasks,
            names.history,
            placeholders(1, chunk.len())
        );
        with_conn!(conn.again(), c => {
            let mut query = sqlx::query_as::<_, (i64, i64)>(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            twins.extend(query.fetch_all(&mut *c).await?);
        });
    }
    for chunk in twins.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "DELETE FROM {} WHERE id IN ({})",
            names.tasks,
            placeholders(1, chunk.len())
        );
        with_conn!(conn.again(), c => {
            let mut query = sqlx::query(&sql);
            for (new, _) in chunk {
                query = query.bind(new);
            }
            query.execute(&mut *c).await?;
        });
    }
    Ok(twins)
}

/// The tasks, in either table, that hold `keys` (at most
/// [`ROWS_PER_STATEMENT`]): key to id.
pub(crate) async fn holders(
    conn: Conn<'_>,
    names: &Names,
    keys: &[&str],
) -> Result<HashMap<String, i64>, Error> {
    let sql = format!(
        "SELECT id, idempotency_key FROM {} WHERE idempotency_key IN ({})",
        names.all,
        placeholders(1, keys.len())
    );
    with_conn!(conn, c => {
        let mut query = sqlx::query_as::<_, (i64, String)>(&sql);
        for key in keys {
            query = query.bind(key);
        }
        let rows = query.fetch_all(&mut *c).await?;
        Ok(rows.into_iter().map(|(id, key)| (key, id)).collect::<HashMap<_, _>>())
    })
}

/// The task that holds a key, as a replacement needs to see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) id: i64,
    pub(crate) state: TaskState,
    pub(crate) attempts: i64,
}

impl Holder {
    /// Whether it is pending: scheduled and never claimed (see `PENDING`).
    pub(crate) fn is_pending(self) -> bool {
        self.state == TaskState::Scheduled && self.attempts == 0
    }
}

/// The task, in either table, that holds `key`.
pub(crate) async fn holder(
    conn: Conn<'_>,
    names: &Names,
    key: &str,
) -> Result<Option<Holder>, Error> {
    let sql = format!(
        "SELECT id, state, attempts FROM {} WHERE idempotency_key = $1",
        names.all
    );
    with_conn!(conn, c => {
        let row: Option<(i64, String, i64)> =
            sqlx::query_as(&sql).bind(key).fetch_optional(&mut *c).await?;
        match row {
            None => Ok(None),
            Some((id, state, attempts)) => Ok(Some(Holder {
                id,
                state: TaskState::from_sql(&state)?,
                attempts,
            })),
        }
    })
}

/// The parameters of [`replace_pending`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replacement<'a> {
    pub(crate) key: &'a str,
    pub(crate) payload: &'a [u8],
    /// The new due time; `None` keeps the task's.
    pub(crate) run_at: Option<i64>,
    /// The new attempt limit; `None` keeps the task's.
    pub(crate) max_attempts: Option<i64>,
    /// The new priority; `None` keeps the task's.
    pub(crate) priority: Option<i64>,
    /// A debounce's longest wait (ms): the task is due at the latest this
    /// long after it was created.
    pub(crate) max_wait: Option<i64>,
    /// The new payload's kind (`None`: untyped), as the payload is new.
    pub(crate) kind: Option<&'a str>,
}

/// Replaces the pending task that holds [`Replacement::key`], if there is
/// one, announcing it. Returns it.
pub(crate) async fn replace_pending(
    conn: Conn<'_>,
    names: &Names,
    with: Replacement<'_>,
) -> Result<Option<Announced>, Error> {
    let sql = names.announcing(&format!(
        "UPDATE {} SET payload = $2, \
         run_at = CASE WHEN $6 IS NOT NULL AND created_at + $6 < COALESCE($3, run_at) \
         THEN created_at + $6 ELSE COALESCE($3, run_at) END, \
         max_attempts = COALESCE($4, max_attempts), priority = COALESCE($5, priority), \
         kind = $7, updated_at = {} \
         WHERE idempotency_key = $1 AND {PENDING} RETURNING {ANNOUNCED}",
        names.tasks,
        names.clock()
    ));
    with_conn!(conn, c => {
        // Read to its end (see the notes of `db`).
        let replaced = sqlx::query_as::<_, AnnouncedRow>(&sql)
            .bind(with.key)
            .bind(with.payload)
            .bind(with.run_at)
            .bind(with.max_attempts)
            .bind(with.priority)
            .bind(with.max_wait)
            .bind(with.kind)
            .fetch_all(&mut *c)
            .await?;
        Ok(replaced.into_iter().next().map(Announced::from))
    })
}

/// Takes `key`'s hold off task `id`, in either table: a debounce's next
/// generation takes the key from a task that is no longer pending (see
/// [`Schedule::max_wait`](crate::Schedule::max_wait)).
pub(crate) async fn release(mut conn: Conn<'_>, names: &Names, id: i64) -> Result<(), Error> {
    for table in [&names.tasks, &names.history] {
        let sql = format!("UPDATE {table} SET idempotency_key = NULL WHERE id = $1");
        with_conn!(conn.again(), c => {
            sqlx::query(&sql).bind(id).execute(&mut *c).await?;
        });
    }
    Ok(())
}
