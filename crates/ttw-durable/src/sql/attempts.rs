//! The history of a task's attempts (see
//! [`attempts`](crate::model::attempts)): the columns of `ttw_attempts`,
//! which the outcome statements of `claims.rs` write, and the read that
//! puts a task's attempts together.

use crate::error::Error;
use crate::model::attempts::{node_of, AttemptInfo};
use crate::model::time::from_ms;
use crate::sql::db::{with_pool, Db};

/// The columns of `ttw_attempts`, in the order the outcome statements
/// write them. Each insert says `ON CONFLICT DO NOTHING`: the fences let an
/// attempt be recorded once, and a row already there must never make the
/// outcome itself fail (a reclaim that failed would stall its tasks).
pub(crate) const ATTEMPT_COLUMNS: &str =
    "task_id, claim, attempt, locked_by, started_at, ended_at, outcome, status, detail";

/// The most attempts [`of_task`] reads: the latest ones.
pub(crate) const MAX_ATTEMPTS_READ: i64 = 1000;

/// Task `id`'s attempts, oldest first (at most [`MAX_ATTEMPTS_READ`], the
/// latest): those that failed or were cut short (`ttw_attempts`), the one
/// running now (the task's row), and the one that succeeded (its row in
/// `ttw_history`).
pub(crate) async fn of_task(db: &Db, id: i64) -> Result<Vec<AttemptInfo>, Error> {
    let sql = "SELECT attempt, claim, outcome, locked_by, started_at, ended_at, \
               CAST(status AS BIGINT) AS status, detail FROM ttw_attempts WHERE task_id = $1 \
               UNION ALL \
               SELECT attempts, claims, 'running', locked_by, started_at, CAST(NULL AS BIGINT), \
               CAST(NULL AS BIGINT), CAST(NULL AS TEXT) FROM ttw_tasks \
               WHERE id = $1 AND state = 'running' \
               UNION ALL \
               SELECT attempts, claims, 'done', locked_by, started_at, finished_at, \
               CAST(answer_status AS BIGINT), answer FROM ttw_history \
               WHERE id = $1 AND state = 'done' AND attempts > 0 \
               ORDER BY claim DESC LIMIT $2";
    let rows: Vec<AttemptRow> = with_pool!(db, pool => {
        sqlx::query_as(sql)
            .bind(id)
            .bind(MAX_ATTEMPTS_READ)
            .fetch_all(pool)
            .await?
    });
    let mut attempts = rows
        .into_iter()
        .map(AttemptInfo::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    attempts.reverse();
    Ok(attempts)
}

/// A row of `ttw_attempts`, or one made from a task's own row.
#[derive(Debug, sqlx::FromRow)]
struct AttemptRow {
    attempt: i64,
    claim: i64,
    outcome: String,
    locked_by: Option<String>,
    started_at: Option<i64>,
    ended_at: Option<i64>,
    status: Option<i64>,
    detail: Option<String>,
}

impl TryFrom<AttemptRow> for AttemptInfo {
    type Error = crate::error::Error;

    fn try_from(row: AttemptRow) -> Result<AttemptInfo, Self::Error> {
        Ok(AttemptInfo {
            attempt: u32::try_from(row.attempt.max(0)).unwrap_or(u32::MAX),
            claim: row.claim,
            outcome: row.outcome.parse()?,
            node: row.locked_by.map(|session| node_of(&session).to_string()),
            started_at: row.started_at.map(from_ms),
            ended_at: row.ended_at.map(from_ms),
            status: row.status.and_then(|s| u16::try_from(s).ok()),
            detail: row.detail,
        })
    }
}
