//! The tasks that tell a callback URL of another task's outcome (see
//! [Callbacks](crate::Envelope#callbacks)): written by one statement after
//! the outcome's, in its transaction, so that a task is done (or dead)
//! with its callback task or not at all, and a crash between the two
//! cannot lose the callback.
//!
//! The statement reads what it tells from the task as its outcome left it
//! (a done task from `ttw_history`, a dead one from `ttw_tasks`), so the
//! outcome statements pass only ids, and only of the tasks whose envelope
//! asked for it: an outcome without a callback runs no statement more.

use std::sync::Arc;

use crate::error::Error;
#[cfg(feature = "postgres")]
use crate::sql::announce::announcing;
use crate::sql::announce::{Announced, AnnouncedRow, ANNOUNCED};
use crate::sql::db::Conn;

/// Which outcome a callback tells of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Told {
    /// Done: its envelope's `callback` is told.
    Done,
    /// Dead: its envelope's `failure_callback` is told.
    Dead,
}

/// How this process's schedulers hear of the callback tasks written, once
/// their transaction has committed (the store's in-process broadcast;
/// other processes hear the statement's `NOTIFY`).
pub(crate) type Tell = Arc<dyn Fn(Vec<Announced>) + Send + Sync>;

impl Told {
    /// The table a task with this outcome is in, its state there, and the
    /// envelope's field that names the URL.
    fn parts(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Told::Done => ("ttw_history", "done", "callback"),
            Told::Dead => ("ttw_tasks", "dead", "failure_callback"),
        }
    }

    /// The outcome's HTTP status, as SQL on the task `t`: a done task's
    /// answer, a dead task's last recorded attempt.
    fn status(self) -> &'static str {
        match self {
            Told::Done => "t.answer_status",
            Told::Dead => {
                "(SELECT a.status FROM ttw_attempts a WHERE a.task_id = t.id \
                 ORDER BY a.claim DESC LIMIT 1)"
            }
        }
    }

    /// The answer's first bytes, as SQL on the task `t` (a dead task's
    /// last answer is in its error).
    fn answer(self) -> &'static str {
        match self {
            Told::Done => "t.answer",
            Told::Dead => "NULL",
        }
    }
}

/// The insert of the callback tasks of `told` outcomes, on SQLite: `$1` is
/// now, the ids from `$2`. A task whose envelope does not read as JSON
/// (edited by hand) tells nothing, rather than failing its outcome.
#[cfg(feature = "sqlite")]
fn sqlite_sql(told: Told, n: usize, clock: &str) -> String {
    let (table, state, field) = told.parts();
    format!(
        "INSERT INTO ttw_tasks (run_at, payload, queue, priority, partition_key, envelope, \
         created_at, updated_at) \
         SELECT $1, CAST(json_object('id', t.id, 'queue', t.queue, 'kind', t.kind, 'state', t.state, \
         'attempts', t.attempts, 'status', {status}, 'answer', {answer}, 'error', t.last_error, \
         'finished_at', t.finished_at) AS BLOB), t.queue, t.priority, t.partition_key, \
         json_object('destination', json_object('url', t.url), \
         'traceparent', json_extract(t.envelope, '$.traceparent'), \
         'tracestate', json_extract(t.envelope, '$.tracestate'), 'outcome_of', t.id), $1, {clock} \
         FROM (SELECT *, CASE WHEN json_valid(envelope) THEN json_extract(envelope, '$.{field}') END \
         AS url FROM {table} WHERE id IN ({ids}) AND state = '{state}') AS t \
         WHERE t.url IS NOT NULL RETURNING {ANNOUNCED}",
        status = told.status(),
        answer = told.answer(),
        ids = crate::sql::db::placeholders(2, n),
    )
}

/// The same on PostgreSQL: the ids as one array, `$2`, and a `NOTIFY` of
/// the tasks written (`channel`). PostgreSQL 15 has no `IS JSON`: only an
/// envelope that names the field is read as JSON.
#[cfg(feature = "postgres")]
fn postgres_sql(told: Told, clock: &str, channel: Option<&str>) -> String {
    let (table, state, field) = told.parts();
    announcing(
        channel,
        &format!(
            "INSERT INTO ttw_tasks (run_at, payload, queue, priority, partition_key, envelope, \
             created_at, updated_at) \
             SELECT $1, convert_to(json_build_object('id', t.id, 'queue', t.queue, 'kind', t.kind, \
             'state', t.state, 'attempts', t.attempts, 'status', {status}, 'answer', {answer}, \
             'error', t.last_error, 'finished_at', t.finished_at)::text, 'UTF8'), \
             t.queue, t.priority, t.partition_key, \
             json_strip_nulls(json_build_object('destination', json_build_object('url', t.url), \
             'traceparent', t.envelope::json->>'traceparent', \
             'tracestate', t.envelope::json->>'tracestate', 'outcome_of', t.id))::text, $1, {clock} \
             FROM (SELECT *, CASE WHEN envelope LIKE '%\"{field}\"%' \
             THEN envelope::json->>'{field}' END AS url FROM {table} \
             WHERE id = ANY($2::BIGINT[]) AND state = '{state}') AS t \
             WHERE t.url IS NOT NULL RETURNING {ANNOUNCED}",
            status = told.status(),
            answer = told.answer(),
        ),
    )
}

/// Writes, on `conn` (in the outcome's transaction), a callback task for
/// each of `ids` that has the outcome `told` and a URL for it in its
/// envelope: due at `now`, in the same queue, to that URL. `clock` is the
/// database's clock as SQL; `channel` PostgreSQL's, to announce them.
/// Answers the tasks written, for this process's schedulers once the
/// transaction commits.
pub(crate) async fn tell(
    conn: Conn<'_>,
    clock: &str,
    channel: Option<&str>,
    told: Told,
    ids: &[i64],
    now: i64,
) -> Result<Vec<Announced>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    #[cfg(not(feature = "postgres"))]
    let _ = channel;
    // Read to its end (see the notes of `db`).
    let rows: Vec<AnnouncedRow> = match conn {
        #[cfg(feature = "sqlite")]
        Conn::Sqlite(c) => {
            let sql = sqlite_sql(told, ids.len(), clock);
            let mut query = sqlx::query_as(&sql).bind(now);
            for id in ids {
                query = query.bind(id);
            }
            query.fetch_all(&mut *c).await?
        }
        #[cfg(feature = "postgres")]
        Conn::Postgres(c) => {
            sqlx::query_as(&postgres_sql(told, clock, channel))
                .bind(now)
                .bind(ids)
                .fetch_all(&mut *c)
                .await?
        }
    };
    Ok(rows.into_iter().map(Announced::from).collect())
}
