//! Statements only tests run: they put a task in a state another process
//! (or a crash) would have left it in, without the node under test seeing
//! it happen.

use crate::error::Error;
use crate::sql::db::{with_pool, Db};

/// [`with_pool!`](crate::sql::db::with_pool) without the cut on a move, for the conformance cases and
/// tests, whose bodies unwrap instead of returning an error.
macro_rules! with_any_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            #[cfg(feature = "sqlite")]
            $crate::sql::db::Db::Sqlite($pool, _) => $body,
            #[cfg(feature = "postgres")]
            $crate::sql::db::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_any_pool;

/// Marks task `id` running under another node's lock until
/// `locked_until` (attempt 1, an epoch no lease has), as a node that died
/// while delivering it would have left it.
pub(crate) async fn lock_elsewhere(db: &Db, id: i64, locked_until: i64) -> Result<(), Error> {
    with_pool!(db, pool => {
        sqlx::query(
            "UPDATE ttw_tasks SET state = 'running', attempts = 1, claims = claims + 1, \
             locked_by = 'another/1', lock_epoch = 1000000, locked_until = $1 WHERE id = $2",
        )
        .bind(locked_until)
        .bind(id)
        .execute(pool)
        .await?;
    });
    Ok(())
}

/// Writes a task of the default queue due at `run_at`, as another process
/// would: no announcement reaches this one. Returns its id.
pub(crate) async fn insert_unannounced(db: &Db, run_at: i64, now: i64) -> Result<i64, Error> {
    let id = with_pool!(db, pool => {
        sqlx::query_scalar(
            "INSERT INTO ttw_tasks (state, run_at, payload, attempts, created_at, updated_at, claims, queue, priority) \
             VALUES ('scheduled', $1, $2, 0, $3, $3, 0, 'default', 0) RETURNING id",
        )
        .bind(run_at)
        .bind(vec![0u8])
        .bind(now)
        .fetch_one(pool)
        .await?
    });
    Ok(id)
}

/// Moves task `id` into the history as done, finished at `finished_at`.
pub(crate) async fn finish_into_history(db: &Db, id: i64, finished_at: i64) -> Result<(), Error> {
    with_pool!(db, pool => {
        sqlx::query(
            "INSERT INTO ttw_history (id, state, run_at, payload, attempts, created_at, updated_at, finished_at, claims, queue, priority) \
             SELECT id, 'done', run_at, payload, 1, created_at, updated_at, $1, 1, queue, priority FROM ttw_tasks WHERE id = $2",
        )
        .bind(finished_at)
        .bind(id)
        .execute(pool)
        .await?;
        sqlx::query("DELETE FROM ttw_tasks WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await?;
    });
    Ok(())
}

/// The plan of `select` with `args` (each an integer) bound, one line a
/// step: `EXPLAIN QUERY PLAN` on SQLite, `EXPLAIN` on PostgreSQL with
/// sequential scans discouraged, so that a small table's plan takes an
/// index whenever the statement lets it.
pub(crate) async fn plan(db: &Db, select: &str, args: &[i64]) -> String {
    let postgres = !db.is_sqlite();
    let sql = format!(
        "{} {select}",
        if postgres {
            "EXPLAIN"
        } else {
            "EXPLAIN QUERY PLAN"
        }
    );
    let lines: Vec<String> = with_any_pool!(db, pool => {
        let mut conn = pool.acquire().await.unwrap();
        if postgres {
            sqlx::query("SET enable_seqscan = off").execute(&mut *conn).await.unwrap();
        }
        let mut query = sqlx::query(&sql);
        for arg in args {
            query = query.bind(*arg);
        }
        let rows = query.fetch_all(&mut *conn).await.unwrap();
        if postgres {
            sqlx::query("RESET enable_seqscan").execute(&mut *conn).await.unwrap();
        }
        rows.iter()
            .map(|row| sqlx::Row::get::<String, _>(row, sqlx::Row::len(row) - 1))
            .collect()
    });
    lines.join("\n")
}
