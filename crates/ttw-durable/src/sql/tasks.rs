//! Statements on one task at a time, and the one insert every task is
//! written by: a single schedule, a batch, a replacement that found no
//! task, and a recurring schedule's occurrences all go through [`insert`].

use crate::error::Error;
use crate::model::new_task::NewRow;
use crate::model::task::{TaskInfo, TaskState};
use crate::sql::announce::{Announced, AnnouncedRow, ANNOUNCED};
use crate::sql::db::{with_pool, write_with_pool, Conn, Db, Urgency};
use crate::sql::history::{into_history, HISTORY_COLUMNS};
use crate::sql::names::Names;

/// The most tasks one insert statement carries: on SQLite eleven
/// parameters each, far below its 32,766; on PostgreSQL ten arrays of as
/// many.
pub(crate) const ROWS_PER_STATEMENT: usize = 1000;

/// The fewest tasks without keys that PostgreSQL takes by `COPY`
/// (`sql::copy`): it costs four round trips (ids, `COPY`, announcements,
/// commit) where an insert costs one.
pub(crate) const COPY_FROM: usize = 200;

/// One task to insert, checked already ([`NewRow::check`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskParams<'a> {
    pub(crate) run_at: i64,
    pub(crate) payload: &'a [u8],
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) max_attempts: Option<i64>,
    /// The recurring schedule whose occurrence this is.
    pub(crate) recurring: Option<&'a str>,
    pub(crate) queue: &'a str,
    pub(crate) priority: i64,
    pub(crate) partition_key: Option<&'a str>,
    /// Its [`Envelope`](crate::Envelope), encoded; `None` for none.
    pub(crate) envelope: Option<&'a str>,
    /// Its kind (a typed job's, [`JobArgs::KIND`](crate::JobArgs::KIND));
    /// `None` for an untyped task.
    pub(crate) kind: Option<&'a str>,
}

impl<'a> From<&'a NewRow> for TaskParams<'a> {
    fn from(row: &'a NewRow) -> Self {
        TaskParams {
            run_at: row.run_at,
            payload: &row.payload,
            idempotency_key: row.idempotency_key.as_deref(),
            max_attempts: row.max_attempts,
            recurring: None,
            queue: &row.queue,
            priority: row.priority_or_default(),
            partition_key: row.partition_key.as_deref(),
            envelope: row.envelope.as_deref(),
            kind: row.kind.as_deref(),
        }
    }
}

/// A row [`insert`] returned: a task created.
#[derive(Debug, Clone)]
pub(crate) struct Inserted {
    pub(crate) task: Announced,
    pub(crate) idempotency_key: Option<String>,
}

/// The columns every new task is given, in the order of [`insert`]'s
/// parameters, then `created_at` and `updated_at`.
const INSERT_COLUMNS: &str = "run_at, payload, idempotency_key, max_attempts, recurring, queue, \
     priority, partition_key, envelope, kind, created_at, updated_at";

/// The insert's tail: nothing for a key that is taken (`ON CONFLICT DO
/// NOTHING`), only when a row has a key (for rows without one no conflict
/// is possible, and the check costs PostgreSQL a speculative insertion, with
/// its own WAL record, a row), and the columns returned.
fn insert_tail(keyed: bool) -> String {
    format!(
        "{} RETURNING {ANNOUNCED}, idempotency_key",
        if keyed {
            " ON CONFLICT (idempotency_key) DO NOTHING"
        } else {
            ""
        }
    )
}

/// SQLite's insert of `n` rows, each row's `updated_at` from the
/// database's clock. Each row's parameters are `?`, bound in order:
/// binding numbered parameters looks each name up along a list of them
/// all, which over the thousands of a batch statement cost more than the
/// insert itself.
#[cfg(feature = "sqlite")]
fn insert_values_sql(names: &Names, n: usize, keyed: bool) -> String {
    use std::fmt::Write as _;
    let mut values = String::with_capacity(n * 48);
    for i in 0..n {
        if i > 0 {
            values.push_str(", ");
        }
        let _ = write!(
            values,
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {})",
            names.clock()
        );
    }
    names.announcing(&format!(
        "INSERT INTO {} ({INSERT_COLUMNS}) VALUES {values}{}",
        names.tasks,
        insert_tail(keyed)
    ))
}

/// PostgreSQL's insert of any number of rows: a parameter per column, an
/// array of every row's value, read back as rows by `unnest` in their
/// order. One statement text for every size (prepared once), eleven
/// parameters rather than eleven a row, and no plan of a thousand-row
/// `VALUES` list at each execution.
#[cfg(feature = "postgres")]
fn insert_arrays_sql(names: &Names, keyed: bool) -> String {
    names.announcing(&format!(
        "INSERT INTO {} ({INSERT_COLUMNS}) \
         SELECT r, p, k, m, rc, q, pr, pk, e, kd, $11, {} FROM unnest($1::BIGINT[], $2::BYTEA[], \
         $3::TEXT[], $4::BIGINT[], $5::TEXT[], $6::TEXT[], $7::BIGINT[], $8::TEXT[], $9::TEXT[], \
         $10::TEXT[]) AS u(r, p, k, m, rc, q, pr, pk, e, kd){}",
        names.tasks,
        names.clock(),
        insert_tail(keyed)
    ))
}

/// Inserts `rows` (at most [`ROWS_PER_STATEMENT`]) in one statement,
/// created at `created_at`. Returns the tasks created: every row without a
/// key, in the order of the rows (one statement draws its ids in that
/// order), and each row whose key was free. A row whose key a task in
/// `ttw_tasks` holds creates nothing; one whose key a finished task holds
/// in the history is created, and is for the caller to drop in the same
/// transaction ([`keys::drop_finished_twins`](crate::sql::keys::drop_finished_twins)).
pub(crate) async fn insert(
    conn: Conn<'_>,
    names: &Names,
    rows: &[TaskParams<'_>],
    created_at: i64,
) -> Result<Vec<Inserted>, Error> {
    debug_assert!(rows.len() <= ROWS_PER_STATEMENT);
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let keyed = rows.iter().any(|row| row.idempotency_key.is_some());
    // Read to its end, so that a commit that failed is an error here and
    // never an id (see the notes of `db`).
    match conn {
        #[cfg(feature = "sqlite")]
        Conn::Sqlite(c) => {
            let sql = insert_values_sql(names, rows.len(), keyed);
            let mut query = sqlx::query_as::<_, InsertedRow>(&sql);
            for row in rows {
                query = query
                    .bind(row.run_at)
                    .bind(row.payload)
                    .bind(row.idempotency_key)
                    .bind(row.max_attempts)
                    .bind(row.recurring)
                    .bind(row.queue)
                    .bind(row.priority)
                    .bind(row.partition_key)
                    .bind(row.envelope)
                    .bind(row.kind)
                    .bind(created_at);
            }
            Ok(query
                .fetch_all(&mut *c)
                .await?
                .into_iter()
                .map(Inserted::from)
                .collect())
        }
        #[cfg(feature = "postgres")]
        Conn::Postgres(c) => {
            let sql = insert_arrays_sql(names, keyed);
            let column = |f: fn(&TaskParams<'_>) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
            let text = |f: for<'b> fn(&TaskParams<'b>) -> Option<&'b str>| {
                rows.iter().map(f).collect::<Vec<Option<&str>>>()
            };
            Ok(sqlx::query_as::<_, InsertedRow>(&sql)
                .bind(column(|r| r.run_at))
                .bind(rows.iter().map(|r| r.payload).collect::<Vec<&[u8]>>())
                .bind(text(|r| r.idempotency_key))
                .bind(
                    rows.iter()
                        .map(|r| r.max_attempts)
                        .collect::<Vec<Option<i64>>>(),
                )
                .bind(text(|r| r.recurring))
                .bind(rows.iter().map(|r| r.queue).collect::<Vec<&str>>())
                .bind(column(|r| r.priority))
                .bind(text(|r| r.partition_key))
                .bind(text(|r| r.envelope))
                .bind(text(|r| r.kind))
                .bind(created_at)
                .fetch_all(&mut *c)
                .await?
                .into_iter()
                .map(Inserted::from)
                .collect())
        }
    }
}

/// A row [`insert`] returned.
#[derive(Debug, sqlx::FromRow)]
struct InsertedRow {
    #[sqlx(flatten)]
    task: AnnouncedRow,
    idempotency_key: Option<String>,
}

impl From<InsertedRow> for Inserted {
    fn from(row: InsertedRow) -> Inserted {
        Inserted {
            task: row.task.into(),
            idempotency_key: row.idempotency_key,
        }
    }
}

/// Which task a statement is about: by id, or by idempotency key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which<'a> {
    Id(i64),
    Key(&'a str),
}

/// A [`Which`] that owns its key: for a write that runs in a task of its
/// own ([`Store::to_completion`](crate::Store)).
#[derive(Debug, Clone)]
pub(crate) enum OwnedWhich {
    Id(i64),
    Key(String),
}

impl OwnedWhich {
    /// The task this names, borrowed.
    pub(crate) fn as_which(&self) -> Which<'_> {
        match self {
            OwnedWhich::Id(id) => Which::Id(*id),
            OwnedWhich::Key(key) => Which::Key(key),
        }
    }
}

impl Which<'_> {
    /// The same task, named by an owned value.
    pub(crate) fn to_owned_which(self) -> OwnedWhich {
        match self {
            Which::Id(id) => OwnedWhich::Id(id),
            Which::Key(key) => OwnedWhich::Key(key.to_owned()),
        }
    }

    /// The column that names the task.
    fn column(self) -> &'static str {
        match self {
            Which::Id(_) => "id",
            Which::Key(_) => "idempotency_key",
        }
    }
}

/// Binds the task a [`Which`] names as the next parameter.
macro_rules! bind_which {
    ($query:expr, $which:expr) => {
        match $which {
            Which::Id(id) => $query.bind(id),
            Which::Key(key) => $query.bind(key),
        }
    };
}

/// The columns a [`TaskInfo`] is read from, by [`read_task_info`].
pub(crate) const TASK_INFO_COLUMNS: &str =
    "id, state, run_at, attempts, max_attempts, last_error, \
     idempotency_key, payload, queue, priority, partition_key, envelope, kind, \
     created_at, updated_at, finished_at, locked_by, lock_epoch, locked_until";

/// The same of `ttw_history`, whose finished tasks no one holds (it has
/// no lock columns).
pub(crate) const HISTORY_INFO_COLUMNS: &str =
    "id, state, run_at, attempts, max_attempts, last_error, \
     idempotency_key, payload, queue, priority, partition_key, envelope, kind, \
     created_at, updated_at, finished_at, CAST(NULL AS TEXT) AS locked_by, \
     CAST(NULL AS BIGINT) AS lock_epoch, CAST(NULL AS BIGINT) AS locked_until";

/// A row of [`TASK_INFO_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TaskInfoRow {
    id: i64,
    state: String,
    run_at: i64,
    attempts: i64,
    max_attempts: Option<i64>,
    last_error: Option<String>,
    idempotency_key: Option<String>,
    payload: Vec<u8>,
    queue: String,
    priority: i64,
    partition_key: Option<String>,
    envelope: Option<String>,
    kind: Option<String>,
    created_at: i64,
    updated_at: i64,
    finished_at: Option<i64>,
    locked_by: Option<String>,
    lock_epoch: Option<i64>,
    locked_until: Option<i64>,
}

impl TryFrom<TaskInfoRow> for TaskInfo {
    type Error = Error;

    /// A state this build does not know is an error ([`TaskState::from_sql`]).
    fn try_from(row: TaskInfoRow) -> Result<TaskInfo, Error> {
        let by_worker =
            row.state == "running" && row.lock_epoch == Some(crate::sql::claims::pull::WORKER);
        Ok(TaskInfo {
            id: crate::model::task::TaskId(row.id),
            state: TaskState::from_sql(&row.state)?,
            run_at: crate::model::time::from_ms(row.run_at),
            attempts: crate::sql::db::clamp_u32(row.attempts),
            max_attempts: row.max_attempts.map(crate::sql::db::clamp_u32),
            last_error: row.last_error,
            idempotency_key: row.idempotency_key,
            payload: row.payload,
            queue: row.queue,
            priority: crate::sql::db::priority_from_sql(row.priority),
            partition_key: row.partition_key,
            envelope: row
                .envelope
                .as_deref()
                .map(crate::model::envelope::Envelope::decode)
                .transpose()?,
            kind: row.kind,
            created_at: crate::model::time::from_ms(row.created_at),
            updated_at: crate::model::time::from_ms(row.updated_at),
            finished_at: row.finished_at.map(crate::model::time::from_ms),
            worker: row.locked_by.filter(|_| by_worker),
            lease_until: row
                .locked_until
                .filter(|_| by_worker)
                .map(crate::model::time::from_ms),
        })
    }
}

/// The task `which` names, in either table, or `None`.
pub(crate) async fn get(db: &Db, which: Which<'_>) -> Result<Option<TaskInfo>, Error> {
    let sql = format!(
        "SELECT {TASK_INFO_COLUMNS} FROM ttw_all_tasks WHERE {} = $1",
        which.column()
    );
    let info = with_pool!(db, pool => {
        let query = sqlx::query_as::<_, TaskInfoRow>(&sql);
        bind_which!(query, which).fetch_optional(pool).await?
    });
    info.map(TaskInfo::try_from).transpose()
}

/// Cancels the task `which` names if it is scheduled, moving it to
/// `ttw_history` (see [`history`](crate::sql::history)) as finished at
/// `now`. Returns whether it was scheduled.
pub(crate) async fn cancel(db: &Db, which: Which<'_>, now: i64) -> Result<bool, Error> {
    let into = into_history("cancelled", &db.clock_sql(), "$2");
    let found = format!("{} = $1 AND state = 'scheduled'", which.column());
    let _turn = db.write_turn(Urgency::Ordinary).await;
    let moved: Option<i64> = match db {
        #[cfg(feature = "postgres")]
        Db::Postgres(pool) => {
            crate::sql::primary::unless_moved(async {
                Ok::<_, Error>({
                    let sql = format!(
                        "WITH moved AS (DELETE FROM ttw_tasks WHERE {found} RETURNING *) \
                 INSERT INTO ttw_history ({HISTORY_COLUMNS}) SELECT {into} FROM moved RETURNING id"
                    );
                    let query = sqlx::query_scalar(&sql);
                    bind_which!(query, which)
                        .bind(now)
                        .fetch_optional(pool)
                        .await?
                })
            })
            .await?
        }
        // Copy, then delete what was copied, in one transaction.
        #[cfg(feature = "sqlite")]
        Db::Sqlite(pool, _) => {
            let sql = format!(
                "INSERT INTO ttw_history ({HISTORY_COLUMNS}) SELECT {into} FROM ttw_tasks \
                 WHERE {found} RETURNING id"
            );
            let mut tx = pool.begin().await?;
            let query = sqlx::query_scalar(&sql);
            let moved: Option<i64> = bind_which!(query, which)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some(id) = moved {
                sqlx::query("DELETE FROM ttw_tasks WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            moved
        }
    };
    Ok(moved.is_some())
}

/// The parameters of [`make_due`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct MakeDue<'a> {
    /// The task.
    pub(crate) which: Which<'a>,
    /// The state it must be in.
    pub(crate) from: TaskState,
    /// Its new due time.
    pub(crate) run_at: i64,
    /// Whether its attempts start again (a redrive).
    pub(crate) restart: bool,
}

/// Makes the task [`MakeDue::which`] names scheduled and due at
/// [`MakeDue::run_at`] if it is in state [`MakeDue::from`], announcing it.
/// Returns the task changed, if any.
pub(crate) async fn make_due(
    db: &Db,
    names: &Names,
    change: MakeDue<'_>,
) -> Result<Vec<Announced>, Error> {
    let also = if change.restart {
        ", attempts = 0, finished_at = NULL"
    } else {
        ""
    };
    let sql = names.announcing(&format!(
        "UPDATE ttw_tasks SET state = 'scheduled', run_at = $2, updated_at = {}{also} \
         WHERE {} = $1 AND state = $3 RETURNING {ANNOUNCED}",
        names.clock(),
        change.which.column()
    ));
    // Read to its end (see the notes of `db`).
    let changed = write_with_pool!(db, Urgency::Ordinary, pool => {
        let query = sqlx::query_as::<_, AnnouncedRow>(&sql);
        bind_which!(query, change.which)
            .bind(change.run_at)
            .bind(change.from.as_sql())
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(Announced::from)
            .collect::<Vec<_>>()
    });
    Ok(changed)
}

/// Makes task `id` dead, finished at `finished_at`, as a last failed
/// attempt leaves it: the conformance suite's way to a dead task without
/// running one.
#[cfg(test)]
pub(crate) async fn mark_dead(db: &Db, id: i64, finished_at: i64) -> Result<(), Error> {
    with_pool!(db, pool => {
        sqlx::query("UPDATE ttw_tasks SET state = 'dead', finished_at = $1 WHERE id = $2")
            .bind(finished_at)
            .bind(id)
            .execute(pool)
            .await?;
    });
    Ok(())
}

/// Until when a running task is locked (for the node's tests).
#[cfg(test)]
pub(crate) async fn locked_until(db: &Db, id: i64) -> Result<i64, Error> {
    let until = with_pool!(db, pool => {
        sqlx::query_scalar("SELECT locked_until FROM ttw_tasks WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?
    });
    Ok(until)
}
