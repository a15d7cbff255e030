//! What an operator reads and does across many tasks: counts, pages of
//! tasks, the nodes and their leases, how late each queue is, what comes
//! due soon, and finished tasks run again in bulk.

use std::fmt::Write as _;

use crate::error::Error;
use crate::model::task::{TaskInfo, TaskState};
#[cfg(feature = "postgres")]
use crate::sql::announce;
use crate::sql::announce::{Announced, AnnouncedRow, ANNOUNCED};
use crate::sql::db::{placeholders, with_pool, write_with_pool, Db, Urgency};
use crate::sql::history::{from_history, BACK_COLUMNS};
use crate::sql::names::Names;
use crate::sql::tasks::{TaskInfoRow, HISTORY_INFO_COLUMNS, TASK_INFO_COLUMNS};

/// The newest schema migration applied.
pub(crate) async fn schema_version(db: &Db) -> Result<Option<i64>, Error> {
    let version = with_pool!(db, pool => {
        sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await?
    });
    Ok(version)
}

/// How many tasks are in each state: (state, count).
pub(crate) async fn state_counts(db: &Db) -> Result<Vec<(String, i64)>, Error> {
    let rows = with_pool!(db, pool => {
        sqlx::query_as("SELECT state, COUNT(*) FROM ttw_all_tasks GROUP BY state")
            .fetch_all(pool)
            .await?
    });
    Ok(rows)
}

/// How many tasks each queue holds in each state: (queue, state, count).
pub(crate) async fn queue_state_counts(db: &Db) -> Result<Vec<(String, String, i64)>, Error> {
    let rows = with_pool!(db, pool => {
        sqlx::query_as("SELECT queue, state, COUNT(*) FROM ttw_all_tasks GROUP BY queue, state")
            .fetch_all(pool)
            .await?
    });
    Ok(rows)
}

/// Pending tasks (scheduled, running, dead) per queue and state, each
/// count stopped at `bound`: one index probe of `(queue, state)` per
/// queue, found by a skip along that index, and at most `bound` entries
/// read per queue and state however many tasks there are.
pub(crate) async fn bounded_pending_counts(
    db: &Db,
    bound: i64,
) -> Result<Vec<(String, String, i64)>, Error> {
    const SQL: &str = "WITH RECURSIVE q(name) AS ( \
             SELECT MIN(queue) FROM ttw_tasks \
             UNION ALL \
             SELECT (SELECT MIN(t.queue) FROM ttw_tasks t WHERE t.queue > q.name) \
             FROM q WHERE q.name IS NOT NULL), \
         s(state) AS (SELECT 'scheduled' UNION ALL SELECT 'running' UNION ALL SELECT 'dead') \
         SELECT q.name, s.state, \
             (SELECT COUNT(*) FROM (SELECT 1 FROM ttw_tasks t \
               WHERE t.queue = q.name AND t.state = s.state LIMIT $1) AS c) \
         FROM q CROSS JOIN s WHERE q.name IS NOT NULL";
    let rows = match db {
        // PostgreSQL with the statistics of a table that just grew (a bulk
        // load autovacuum has not analyzed yet) counts each pair by a
        // sequential scan, or a bitmap of every entry, before the limit
        // applies: 1.6 s at 10 million. The probes must walk the index and
        // stop at the bound, whatever the statistics say.
        // Spawned, so that a caller dropped mid-way (a client that hung up)
        // never leaves the transaction half done on a pooled connection.
        #[cfg(feature = "postgres")]
        Db::Postgres(pool) => {
            let pool = pool.clone();
            let probes = tokio::spawn(async move {
                let mut tx = pool.begin().await?;
                for setting in ["enable_seqscan", "enable_bitmapscan"] {
                    sqlx::query(&format!("SET LOCAL {setting} = off"))
                        .execute(&mut *tx)
                        .await?;
                }
                let rows: Vec<(String, String, i64)> =
                    sqlx::query_as(SQL).bind(bound).fetch_all(&mut *tx).await?;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(rows)
            });
            probes
                .await
                .map_err(|err| Error::internal(format!("the counts' task ended: {err}")))??
        }
        #[cfg(feature = "sqlite")]
        Db::Sqlite(pool, _) => sqlx::query_as(SQL).bind(bound).fetch_all(pool).await?,
    };
    Ok(rows)
}

/// The newest `window` finished tasks (done, cancelled) of the history,
/// counted per queue and state: every one when the history holds fewer.
pub(crate) async fn recent_finished_counts(
    db: &Db,
    window: i64,
) -> Result<Vec<(String, String, i64)>, Error> {
    let rows = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT h.queue, h.state, COUNT(*) FROM \
             (SELECT queue, state FROM ttw_history ORDER BY id DESC LIMIT $1) AS h \
             GROUP BY h.queue, h.state",
        )
        .bind(window)
        .fetch_all(pool)
        .await?
    });
    Ok(rows)
}

/// The newest done tasks of the history that finished at `since` or later,
/// at most `limit` of them (the newest first, by the finished index): per
/// queue, how many, and the earliest finish among them.
pub(crate) async fn recent_done(
    db: &Db,
    since: i64,
    limit: i64,
) -> Result<Vec<(String, i64, i64)>, Error> {
    let rows = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT r.queue, COUNT(*), MIN(r.finished_at) FROM \
             (SELECT queue, finished_at FROM ttw_history WHERE finished_at >= $1 AND state = 'done' \
              ORDER BY finished_at DESC LIMIT $2) AS r \
             GROUP BY r.queue",
        )
        .bind(since)
        .bind(limit)
        .fetch_all(pool)
        .await?
    });
    Ok(rows)
}

/// Which tasks: the filter of a page, of a count, of a bulk cancel and of
/// a redrive. Every part is optional; times are milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Filter<'a> {
    pub(crate) state: Option<TaskState>,
    pub(crate) queue: Option<&'a str>,
    pub(crate) partition_key: Option<&'a str>,
    pub(crate) kind: Option<&'a str>,
    pub(crate) idempotency_key: Option<&'a str>,
    pub(crate) due_from: Option<i64>,
    pub(crate) due_before: Option<i64>,
    pub(crate) created_from: Option<i64>,
    pub(crate) created_before: Option<i64>,
}

/// A value a [`Filter`]'s clause binds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bound<'a> {
    Text(&'a str),
    Int(i64),
}

impl<'a> Filter<'a> {
    /// The `WHERE` clause, and the values to bind to it in order (`$1`,
    /// `$2`, ...).
    fn clause(self) -> (String, Vec<Bound<'a>>) {
        let mut clause = String::from("TRUE");
        let mut binds = Vec::new();
        let texts = [
            ("state", self.state.map(TaskState::as_sql)),
            ("queue", self.queue),
            ("partition_key", self.partition_key),
            ("kind", self.kind),
            ("idempotency_key", self.idempotency_key),
        ];
        for (column, value) in texts {
            if let Some(value) = value {
                binds.push(Bound::Text(value));
                let _ = write!(clause, " AND {column} = ${}", binds.len());
            }
        }
        let numbers = [
            ("run_at", ">=", self.due_from),
            ("run_at", "<", self.due_before),
            ("created_at", ">=", self.created_from),
            ("created_at", "<", self.created_before),
        ];
        for (column, op, value) in numbers {
            if let Some(value) = value {
                binds.push(Bound::Int(value));
                let _ = write!(clause, " AND {column} {op} ${}", binds.len());
            }
        }
        (clause, binds)
    }
}

/// Binds what [`Filter::clause`] asked for, in order.
macro_rules! bind_filter {
    ($query:expr, $binds:expr) => {{
        let mut q = $query;
        for bound in &$binds {
            q = match *bound {
                Bound::Text(text) => q.bind(text),
                Bound::Int(n) => q.bind(n),
            };
        }
        q
    }};
}

/// Where a [`Page`] starts: after a task id, or after a (due time, id).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cursor {
    Id(i64),
    Due(i64, i64),
}

/// The parameters of [`page`]: a filter, and where the page starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Page<'a> {
    pub(crate) filter: Filter<'a>,
    /// The page starts after this task (before it, newest first).
    pub(crate) after: Option<Cursor>,
    pub(crate) limit: u32,
    /// Downwards, the newest (or the latest due) first.
    pub(crate) newest_first: bool,
    /// By (due time, id) rather than by id.
    pub(crate) by_due: bool,
}

/// The table that holds the tasks in `state`: scheduled, running and dead
/// ones are in `ttw_tasks`, done and cancelled ones in the history (see
/// `sql::history`), any state in the view over both.
fn table_of(state: Option<TaskState>) -> &'static str {
    match state {
        None => "ttw_all_tasks",
        Some(TaskState::Done | TaskState::Cancelled) => "ttw_history",
        Some(_) => "ttw_tasks",
    }
}

/// One page of tasks, in id order or due order (or their reverse). A state
/// names the one table that holds it, so the page reads that table's
/// indexes: in due order, scheduled, running and dead tasks are a keyset
/// read of `(state, run_at)` whatever the filter selects.
pub(crate) async fn page(db: &Db, page: Page<'_>) -> Result<Vec<TaskInfo>, Error> {
    let (mut clause, mut binds) = page.filter.clause();
    let (op, order) = if page.newest_first {
        ("<", "DESC")
    } else {
        (">", "ASC")
    };
    match page.after {
        Some(Cursor::Id(after)) => {
            binds.push(Bound::Int(after));
            let _ = write!(clause, " AND id {op} ${}", binds.len());
        }
        Some(Cursor::Due(at, after)) => {
            binds.push(Bound::Int(at));
            binds.push(Bound::Int(after));
            let (a, b) = (binds.len() - 1, binds.len());
            // The bound on run_at alone lets either planner seek the index.
            let _ = write!(
                clause,
                " AND run_at {op}= ${a} AND (run_at, id) {op} (${a}, ${b})"
            );
        }
        None => {}
    }
    let table = table_of(page.filter.state);
    let by = if page.by_due {
        format!("run_at {order}, id {order}")
    } else {
        format!("id {order}")
    };
    let sql = format!(
        "SELECT {} FROM {table} WHERE {clause} ORDER BY {by} LIMIT {}",
        if table == "ttw_history" {
            HISTORY_INFO_COLUMNS
        } else {
            TASK_INFO_COLUMNS
        },
        page.limit
    );
    let tasks = with_pool!(db, pool => {
        bind_filter!(sqlx::query_as::<_, TaskInfoRow>(&sql), binds).fetch_all(pool).await?
    });
    tasks.into_iter().map(TaskInfo::try_from).collect()
}

/// How many tasks match `filter`.
pub(crate) async fn count(db: &Db, filter: Filter<'_>) -> Result<i64, Error> {
    let (clause, binds) = filter.clause();
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE {clause}",
        table_of(filter.state)
    );
    let count = with_pool!(db, pool => {
        bind_filter!(sqlx::query_scalar(&sql), binds).fetch_one(pool).await?
    });
    Ok(count)
}

/// The ids of at most `take` tasks matching `filter` after id `after`, in
/// id order: the pages of a bulk cancel and of a redrive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdPage<'a> {
    pub(crate) filter: Filter<'a>,
    pub(crate) after: i64,
    pub(crate) take: u64,
}

/// The ids of an [`IdPage`].
pub(crate) async fn ids(db: &Db, page: IdPage<'_>) -> Result<Vec<i64>, Error> {
    let IdPage {
        filter,
        after,
        take,
    } = page;
    let (clause, binds) = filter.clause();
    let sql = format!(
        "SELECT id FROM {} WHERE {clause} AND id > ${} ORDER BY id LIMIT ${}",
        table_of(filter.state),
        binds.len() + 1,
        binds.len() + 2
    );
    let ids = with_pool!(db, pool => {
        bind_filter!(sqlx::query_scalar(&sql), binds)
            .bind(after)
            .bind(i64::try_from(take).unwrap_or(i64::MAX))
            .fetch_all(pool)
            .await?
    });
    Ok(ids)
}

/// A scheduled task as [`pending`] reads it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct PendingRow {
    pub(crate) id: i64,
    pub(crate) run_at: i64,
    pub(crate) payload: Vec<u8>,
    pub(crate) queue: String,
    pub(crate) priority: i64,
    pub(crate) max_attempts: Option<i64>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) partition_key: Option<String>,
    pub(crate) recurring: Option<String>,
    pub(crate) envelope: Option<String>,
    pub(crate) kind: Option<String>,
}

/// Up to `limit` scheduled tasks with ids above `after`, in id order.
pub(crate) async fn pending(db: &Db, after: i64, limit: u32) -> Result<Vec<PendingRow>, Error> {
    let sql = format!(
        "SELECT id, run_at, payload, queue, priority, max_attempts, idempotency_key, \
         partition_key, recurring, envelope, kind FROM ttw_tasks WHERE state = 'scheduled' AND id > $1 \
         ORDER BY id LIMIT {limit}"
    );
    let rows: Vec<PendingRow> = with_pool!(db, pool => {
        sqlx::query_as(&sql).bind(after).fetch_all(pool).await?
    });
    Ok(rows)
}

/// A node's row, with the database's time and the leases it holds.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct NodeRow {
    pub(crate) node_id: String,
    /// Comma-separated.
    pub(crate) queues: String,
    pub(crate) heartbeat_at: i64,
    pub(crate) leaving: bool,
    /// When its leases run out, if it has a heartbeat.
    pub(crate) expires: Option<i64>,
    /// The database's clock as it read the row.
    pub(crate) now: i64,
    pub(crate) leases: i64,
    pub(crate) takeovers: i64,
}

/// The nodes that joined and have not left, by id.
pub(crate) async fn nodes(db: &Db) -> Result<Vec<NodeRow>, Error> {
    let sql = format!(
        "SELECT n.node_id, n.queues, n.heartbeat_at, n.leaving <> 0 AS leaving, \
         n.heartbeat_at + n.lease_ttl_ms AS expires, \
         {now} AS now, \
         (SELECT COUNT(*) FROM ttw_leases l WHERE l.owner_session = n.session) AS leases, \
         n.takeovers \
         FROM ttw_nodes n ORDER BY n.node_id",
        now = db.clock_sql()
    );
    let nodes = with_pool!(db, pool => {
        sqlx::query_as::<_, NodeRow>(&sql).fetch_all(pool).await?
    });
    Ok(nodes)
}

/// For each queue with a scheduled task due at `now` or before, the
/// oldest `run_at`.
pub(crate) async fn oldest_due(db: &Db, now: i64) -> Result<Vec<(String, i64)>, Error> {
    let rows = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT queue, MIN(run_at) FROM ttw_tasks WHERE state = 'scheduled' AND run_at <= $1 \
             GROUP BY queue",
        )
        .bind(now)
        .fetch_all(pool)
        .await?
    });
    Ok(rows)
}

/// The buckets [`due_buckets`] counts in: `width` ms each from `now`,
/// up to `end`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Buckets {
    pub(crate) now: i64,
    pub(crate) width: i64,
    pub(crate) end: i64,
}

/// Scheduled tasks due before `end`, counted per bucket of `width` ms from
/// `now`: (bucket, count), bucket -1 for those overdue.
pub(crate) async fn due_buckets(db: &Db, buckets: Buckets) -> Result<Vec<(i64, i64)>, Error> {
    let Buckets { now, width, end } = buckets;
    let rows = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT CASE WHEN run_at < $1 THEN -1 ELSE (run_at - $1) / $2 END AS b, COUNT(*) \
             FROM ttw_tasks WHERE state = 'scheduled' AND run_at < $3 GROUP BY b",
        )
        .bind(now)
        .bind(width)
        .bind(end)
        .fetch_all(pool)
        .await?
    });
    Ok(rows)
}

/// A redrive: the tasks `ids` in finished state `state`, due again at `at`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Redriving<'a> {
    pub(crate) ids: &'a [i64],
    pub(crate) state: TaskState,
    pub(crate) at: i64,
}

/// The tasks of a redrive scheduled again with their attempts reset (back
/// from the history for done and cancelled ones), announced. Returns them.
pub(crate) async fn redrive(
    db: &Db,
    names: &Names,
    redriving: Redriving<'_>,
) -> Result<Vec<Announced>, Error> {
    let Redriving { ids, state, at } = redriving;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    // `$1` is the time, `$2` the state; the ids follow.
    let list = placeholders(3, ids.len());
    if state == TaskState::Dead {
        let sql = names.announcing(&format!(
            "UPDATE ttw_tasks SET state = 'scheduled', run_at = $1, attempts = 0, finished_at = NULL, \
             updated_at = {} WHERE id IN ({list}) AND state = $2 RETURNING {ANNOUNCED}",
            names.clock()
        ));
        let changed = write_with_pool!(db, Urgency::Ordinary, pool => {
            let mut q = sqlx::query_as::<_, AnnouncedRow>(&sql).bind(at).bind(state.as_sql());
            for id in ids {
                q = q.bind(id);
            }
            let mut changed = Vec::new();
            for row in q.fetch_all(pool).await? {
                changed.push(row.into());
            }
            changed
        });
        return Ok(changed);
    }
    let back = from_history("$1", &names.clock());
    let _turn = db.write_turn(Urgency::Ordinary).await;
    let mut changed: Vec<Announced> = Vec::new();
    match db {
        #[cfg(feature = "postgres")]
        Db::Postgres(pool) => {
            let sql = announce::announcing_after(
                names.channel.as_deref(),
                &format!(
                    "back AS (DELETE FROM ttw_history WHERE id IN ({list}) AND state = $2 RETURNING *)"
                ),
                &format!(
                    "INSERT INTO ttw_tasks ({BACK_COLUMNS}) SELECT {back} FROM back RETURNING {ANNOUNCED}"
                ),
            );
            let mut q = sqlx::query_as::<_, AnnouncedRow>(&sql)
                .bind(at)
                .bind(state.as_sql());
            for id in ids {
                q = q.bind(id);
            }
            for row in q.fetch_all(pool).await? {
                changed.push(row.into());
            }
        }
        // Copy back, then delete what was copied, in one transaction.
        #[cfg(feature = "sqlite")]
        Db::Sqlite(pool, _) => {
            let sql = format!(
                "INSERT INTO ttw_tasks ({BACK_COLUMNS}) SELECT {back} FROM ttw_history \
                 WHERE id IN ({list}) AND state = $2 RETURNING {ANNOUNCED}"
            );
            let mut tx = pool.begin().await?;
            let mut q = sqlx::query_as::<_, AnnouncedRow>(&sql)
                .bind(at)
                .bind(state.as_sql());
            for id in ids {
                q = q.bind(id);
            }
            for row in q.fetch_all(&mut *tx).await? {
                changed.push(row.into());
            }
            if !changed.is_empty() {
                let sql = format!(
                    "DELETE FROM ttw_history WHERE id IN ({})",
                    placeholders(1, changed.len())
                );
                let mut q = sqlx::query(&sql);
                for task in &changed {
                    q = q.bind(task.id);
                }
                q.execute(&mut *tx).await?;
            }
            tx.commit().await?;
        }
    }
    Ok(changed)
}
