//! Finished tasks: the statements that move a task that is done or
//! cancelled out of `ttw_tasks` into `ttw_history`, back when it is
//! redriven, and the sweep that deletes it when its retention ends.
//!
//! Retention: a task stays in `ttw_tasks` while it is scheduled, running
//! or dead (a dead task waits there for a redrive). The statement that
//! finishes it as done or cancelled moves it, in one transaction, to
//! `ttw_history`, where it stays for the retention (24 hours unless told)
//! before the sweep deletes it. `get`, `get_by_key`, the listings, the
//! counts, the CLI and the dashboard read `ttw_all_tasks`, a view of both.
//! An idempotency key stays taken while its task is in either table: an
//! insert that takes a key looks in `ttw_history` after its own insert, in
//! the same transaction (see [`keys`](crate::sql::keys)).

use crate::error::Error;
use crate::sql::db::{Db, Urgency};

/// The columns of `ttw_history`, in the order of [`into_history`].
pub(crate) const HISTORY_COLUMNS: &str =
    "id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error, \
     created_at, updated_at, finished_at, claims, recurring, queue, priority, partition_key, envelope, \
     started_at, locked_by, kind";

/// What a row of `ttw_tasks` becomes in `ttw_history` ([`HISTORY_COLUMNS`]):
/// `state` (a literal), last changed at `updated` and finished at
/// `finished` (both SQL). Its last attempt's start and session go with it:
/// a done task's successful attempt is read from them (see
/// [`attempts`](crate::model::attempts)).
pub(crate) fn into_history(state: &str, updated: &str, finished: &str) -> String {
    format!(
        "id, '{state}', run_at, payload, idempotency_key, max_attempts, attempts, last_error, \
         created_at, {updated}, {finished}, claims, recurring, queue, priority, partition_key, envelope, \
         started_at, locked_by, kind"
    )
}

/// The columns of `ttw_tasks` a redriven task is written back with, in the
/// order of [`from_history`].
pub(crate) const BACK_COLUMNS: &str =
    "id, state, run_at, payload, idempotency_key, max_attempts, attempts, last_error, \
     created_at, updated_at, claims, recurring, queue, priority, partition_key, envelope, kind";

/// What a row of `ttw_history` becomes in `ttw_tasks` when redriven
/// ([`BACK_COLUMNS`]): scheduled at `run_at` with its attempts reset, last
/// changed at `updated` (both SQL).
pub(crate) fn from_history(run_at: &str, updated: &str) -> String {
    format!(
        "id, 'scheduled', {run_at}, payload, idempotency_key, max_attempts, 0, last_error, \
         created_at, {updated}, claims, recurring, queue, priority, partition_key, envelope, kind"
    )
}

/// The retention sweep: deletes the finished tasks of `ttw_history` that
/// finished before `before`, at most `batch` a statement, each statement a write of its own: on
/// SQLite a claim or an outcome waiting for the one writer gets its
/// turn between two batches instead of after the whole sweep. Returns
/// how many were deleted.
pub(crate) async fn sweep(db: &Db, before: i64, batch: u64) -> Result<u64, Error> {
    let mut total = 0;
    loop {
        let n = sweep_once(db, before, batch).await?;
        total += n;
        if n < batch {
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
}

/// One batch of [`sweep`]: at most `batch` rows, with their attempts
/// (`ttw_attempts`), in one transaction.
async fn sweep_once(db: &Db, before: i64, batch: u64) -> Result<u64, Error> {
    let limit = i64::try_from(batch).unwrap_or(i64::MAX);
    let _turn = db.write_turn(Urgency::Ordinary).await;
    let n = match db {
        #[cfg(feature = "postgres")]
        Db::Postgres(pool) => {
            crate::sql::primary::unless_moved(async {
                Ok::<_, Error>({
                    let n: i64 = sqlx::query_scalar(
                "WITH gone AS (DELETE FROM ttw_history WHERE id IN (SELECT id FROM ttw_history \
                 WHERE finished_at < $1 LIMIT $2) RETURNING id), \
                 a AS (DELETE FROM ttw_attempts WHERE task_id IN (SELECT id FROM gone)) \
                 SELECT COUNT(*) FROM gone",
            )
            .bind(before)
            .bind(limit)
            .fetch_one(pool)
            .await?;
                    u64::try_from(n).unwrap_or(0)
                })
            })
            .await?
        }
        // The same rows twice in one transaction, under SQLite's one
        // writer: their attempts, then the rows.
        #[cfg(feature = "sqlite")]
        Db::Sqlite(pool, _) => {
            let chosen = "SELECT id FROM ttw_history WHERE finished_at < $1 LIMIT $2";
            let mut tx = pool.begin().await?;
            sqlx::query(&format!(
                "DELETE FROM ttw_attempts WHERE task_id IN ({chosen})"
            ))
            .bind(before)
            .bind(limit)
            .execute(&mut *tx)
            .await?;
            let n = sqlx::query(&format!("DELETE FROM ttw_history WHERE id IN ({chosen})"))
                .bind(before)
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            n
        }
    };
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::store::Store;

    /// The retention sweep deletes in bounded batches: each statement
    /// deletes at most its batch, and the sweep goes on until a batch comes
    /// back short, leaving scheduled tasks and those finished after the
    /// cutoff alone.
    #[tokio::test]
    async fn the_sweep_deletes_in_bounded_batches() {
        let store = Store::sqlite_in_memory().await.unwrap();
        let mut ids = Vec::new();
        for i in 0..30 {
            ids.push(store.schedule(format!("t{i}").into_bytes()).await.unwrap());
        }
        let Db::Sqlite(pool, _) = store.db() else {
            unreachable!("an SQLite store")
        };
        // 25 finished long ago, 3 finished after the cutoff, 2 scheduled.
        for (i, id) in ids.iter().enumerate().take(28) {
            let finished_at = if i < 25 { 1_000 } else { 9_000 };
            let state = if i % 2 == 0 { "done" } else { "cancelled" };
            let into = into_history(state, "updated_at", "$1");
            sqlx::query(&format!(
                "INSERT INTO ttw_history ({HISTORY_COLUMNS}) SELECT {into} FROM ttw_tasks WHERE id = $2"
            ))
            .bind(finished_at)
            .bind(id.get())
            .execute(pool)
            .await
            .unwrap();
            sqlx::query("DELETE FROM ttw_tasks WHERE id = $1")
                .bind(id.get())
                .execute(pool)
                .await
                .unwrap();
        }
        let db = store.db();
        assert_eq!(sweep_once(db, 5_000, 10).await.unwrap(), 10);
        assert_eq!(sweep(db, 5_000, 10).await.unwrap(), 15);
        assert_eq!(sweep(db, 5_000, 10).await.unwrap(), 0);
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ttw_all_tasks")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(
            left, 5,
            "the 3 finished after the cutoff and the 2 scheduled stay"
        );
    }
}
