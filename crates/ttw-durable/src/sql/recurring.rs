//! Statements on `ttw_recurring`: a schedule registered, changed, paused,
//! resumed, deleted and listed, and a node's pass that makes its
//! occurrences tasks ([`advance`]).

use crate::error::Error;
use crate::sql::announce::{self, Announced};
use crate::sql::db::{placeholders, with_conn, with_pool, Conn, Db, Urgency};
use crate::sql::keys;
use crate::sql::names::Names;
use crate::sql::tasks::{self, TaskParams, ROWS_PER_STATEMENT};

/// The columns a schedule's row is read with.
const COLUMNS: &str = "name, cron, time_zone, every_ms, catch_up, missed_after_ms, payload, \
                       max_attempts, queue, priority, kind, paused <> 0 AS is_paused, next_at, version";

/// A schedule's row, as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub(crate) struct RecurringRow {
    pub(crate) name: String,
    pub(crate) cron: Option<String>,
    pub(crate) time_zone: Option<String>,
    pub(crate) every_ms: Option<i64>,
    pub(crate) catch_up: String,
    pub(crate) missed_after_ms: i64,
    pub(crate) payload: Vec<u8>,
    pub(crate) max_attempts: Option<i64>,
    pub(crate) queue: String,
    pub(crate) priority: i64,
    pub(crate) kind: Option<String>,
    #[sqlx(rename = "is_paused")]
    pub(crate) paused: bool,
    /// Its next occurrence not yet made a task.
    pub(crate) next_at: i64,
    /// Bumped by every change of an operator; a pass is fenced on it.
    pub(crate) version: i64,
}

/// A schedule's definition, as [`register`] and [`Change::Define`] write it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Definition<'a> {
    pub(crate) name: &'a str,
    /// The shard it lives in.
    pub(crate) shard: i64,
    pub(crate) cron: Option<&'a str>,
    pub(crate) time_zone: Option<&'a str>,
    pub(crate) every_ms: Option<i64>,
    pub(crate) catch_up: &'a str,
    pub(crate) missed_after_ms: i64,
    pub(crate) payload: &'a [u8],
    pub(crate) max_attempts: Option<i64>,
    pub(crate) queue: &'a str,
    pub(crate) priority: i64,
    /// The kind of its occurrences, if they are typed jobs.
    pub(crate) kind: Option<&'a str>,
    /// Its first occurrence.
    pub(crate) next_at: i64,
}

/// Registers `def` unless its name is taken, at `now`, and tells other
/// processes' schedulers (PostgreSQL). Returns `None` if it was created,
/// else the schedule that holds the name.
pub(crate) async fn register(
    db: &Db,
    names: &Names,
    def: Definition<'_>,
    now: i64,
) -> Result<Option<RecurringRow>, Error> {
    let insert = format!(
        "INSERT INTO ttw_recurring (name, shard, cron, time_zone, every_ms, catch_up, missed_after_ms, \
         payload, max_attempts, queue, priority, next_at, created_at, updated_at, kind) \
         VALUES ({}, $13, $14) ON CONFLICT (name) DO NOTHING",
        placeholders(1, 13)
    );
    let look = format!("SELECT {COLUMNS} FROM ttw_recurring WHERE name = $1");
    let wake = announce::wake_recurring(names.channel.as_deref());
    let _turn = db.write_turn(Urgency::Ordinary).await;
    let found = with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let created = sqlx::query(&insert)
            .bind(def.name)
            .bind(def.shard)
            .bind(def.cron)
            .bind(def.time_zone)
            .bind(def.every_ms)
            .bind(def.catch_up)
            .bind(def.missed_after_ms)
            .bind(def.payload)
            .bind(def.max_attempts)
            .bind(def.queue)
            .bind(def.priority)
            .bind(def.next_at)
            .bind(now)
            .bind(def.kind)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        let found = if created {
            if let Some(wake) = &wake {
                sqlx::query(wake).execute(&mut *tx).await?;
            }
            None
        } else {
            Some(sqlx::query_as::<_, RecurringRow>(&look).bind(def.name).fetch_one(&mut *tx).await?)
        };
        tx.commit().await?;
        found
    });
    Ok(found)
}

/// Every schedule, by name.
pub(crate) async fn list(db: &Db) -> Result<Vec<RecurringRow>, Error> {
    let sql = format!("SELECT {COLUMNS} FROM ttw_recurring ORDER BY name");
    let rows = with_pool!(db, pool => {
        sqlx::query_as::<_, RecurringRow>(&sql).fetch_all(pool).await?
    });
    Ok(rows)
}

/// The schedules not paused in the shards whose leases `session` holds.
pub(crate) async fn held(db: &Db, session: &str) -> Result<Vec<RecurringRow>, Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM ttw_recurring r WHERE paused = 0 AND EXISTS \
         (SELECT 1 FROM ttw_leases l WHERE l.queue = r.queue AND l.shard = r.shard \
         AND l.owner_session = $1)"
    );
    let rows = with_pool!(db, pool => {
        sqlx::query_as::<_, RecurringRow>(&sql).bind(session).fetch_all(pool).await?
    });
    Ok(rows)
}

/// A change of an operator to a schedule (see [`change`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change<'a> {
    /// A new definition (the name and shard stay); the version is bumped.
    Define(Definition<'a>),
    /// Paused, its `next_at` moved back to the earliest occurrence deleted.
    Pause,
    /// Resumed.
    Resume,
    /// Deleted.
    Delete,
}

/// One change of an operator to schedule `name`, at `now`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Changing<'a> {
    pub(crate) name: &'a str,
    pub(crate) change: Change<'a>,
    pub(crate) now: i64,
}

/// One change, in one transaction: the schedule's occurrences made tasks
/// and not yet started are deleted, then the change is made, and (but for a
/// pause or a deletion) other processes' schedulers are told. Returns
/// whether the change found the schedule in the state it needs (if not,
/// nothing is deleted either).
pub(crate) async fn change(db: &Db, names: &Names, changing: Changing<'_>) -> Result<bool, Error> {
    let Changing { name, change, now } = changing;
    let delete = format!(
        "DELETE FROM {} WHERE recurring = $1 AND state = 'scheduled' AND attempts = 0 RETURNING run_at",
        names.tasks
    );
    let sql = match change {
        Change::Define(_) => {
            "UPDATE ttw_recurring SET cron = $2, time_zone = $3, every_ms = $4, catch_up = $5, \
             missed_after_ms = $6, payload = $7, max_attempts = $8, next_at = $9, \
             version = version + 1, updated_at = $10, queue = $11, priority = $12, kind = $13 \
             WHERE name = $1"
        }
        Change::Pause => {
            "UPDATE ttw_recurring SET paused = 1, version = version + 1, \
             next_at = CASE WHEN $2 < next_at THEN $2 ELSE next_at END, updated_at = $3 \
             WHERE name = $1 AND paused = 0"
        }
        Change::Resume => {
            "UPDATE ttw_recurring SET paused = 0, version = version + 1, updated_at = $2 \
             WHERE name = $1 AND paused = 1"
        }
        Change::Delete => "DELETE FROM ttw_recurring WHERE name = $1",
    };
    let wake = match change {
        Change::Define(_) | Change::Resume => announce::wake_recurring(names.channel.as_deref()),
        Change::Pause | Change::Delete => None,
    };
    let _turn = db.write_turn(Urgency::Ordinary).await;
    let changed = with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let mut earliest: Option<i64> = None;
        for at in sqlx::query_scalar::<_, i64>(&delete).bind(name).fetch_all(&mut *tx).await? {
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
        let query = sqlx::query(sql).bind(name);
        let query = match change {
            Change::Define(def) => query
                .bind(def.cron)
                .bind(def.time_zone)
                .bind(def.every_ms)
                .bind(def.catch_up)
                .bind(def.missed_after_ms)
                .bind(def.payload)
                .bind(def.max_attempts)
                .bind(def.next_at)
                .bind(now)
                .bind(def.queue)
                .bind(def.priority)
                .bind(def.kind),
            Change::Pause => query.bind(earliest.unwrap_or(i64::MAX)).bind(now),
            Change::Resume => query.bind(now),
            Change::Delete => query,
        };
        let n = query.execute(&mut *tx).await?.rows_affected();
        if n == 0 {
            // Nothing to change: keep the occurrences too.
            tx.rollback().await?;
            false
        } else {
            if let Some(wake) = &wake {
                sqlx::query(wake).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            true
        }
    });
    Ok(changed)
}

/// The parameters of [`advance`]: one schedule's pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Advance<'a> {
    pub(crate) name: &'a str,
    /// The occurrences to make tasks (each keyed by the schedule and its
    /// time).
    pub(crate) tasks: &'a [TaskParams<'a>],
    /// Where the schedule goes on from.
    pub(crate) next_at: i64,
    /// The `next_at` and `version` the pass read: the fence.
    pub(crate) read_next_at: i64,
    pub(crate) read_version: i64,
}

/// Makes `pass.tasks` tasks and moves the schedule to `pass.next_at`, in
/// one transaction fenced on what the pass read: if another node or an
/// operator changed the schedule since, nothing is written and `None` is
/// the answer. An occurrence that ran already holds its key from the
/// history (see [`keys`]) and is not made again. Returns the tasks created.
pub(crate) async fn advance(
    db: &Db,
    names: &Names,
    pass: Advance<'_>,
    now: i64,
) -> Result<Option<Vec<Announced>>, Error> {
    let fence = "UPDATE ttw_recurring SET next_at = $1, updated_at = $2 \
                 WHERE name = $3 AND next_at = $4 AND version = $5 AND paused = 0";
    let _turn = db.write_turn(Urgency::Ordinary).await;
    let created = with_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        let mut conn = Conn::from(&mut *tx);
        let mut created = Vec::new();
        for chunk in pass.tasks.chunks(ROWS_PER_STATEMENT) {
            for inserted in tasks::insert(conn.again(), names, chunk, now).await? {
                created.push(inserted.task);
            }
        }
        let ids: Vec<i64> = created.iter().map(|task| task.id).collect();
        let gone = keys::drop_finished_twins(conn.again(), names, &ids).await?;
        created.retain(|task| !gone.iter().any(|&(new, _)| new == task.id));
        let moved = with_conn!(conn, c => {
            sqlx::query(fence)
                .bind(pass.next_at)
                .bind(now)
                .bind(pass.name)
                .bind(pass.read_next_at)
                .bind(pass.read_version)
                .execute(&mut *c)
                .await?
                .rows_affected()
        });
        if moved == 1 {
            tx.commit().await?;
            Some(created)
        } else {
            tx.rollback().await?;
            None
        }
    });
    Ok(created)
}
