//! Queue settings (`ttw_queues`): paused or not, the concurrency and the
//! rate every node obeys. The limited claim that reads them is
//! [`claims::limited`](crate::sql::claims).

use crate::error::Error;
use crate::model::backoff::Backoff;
use crate::model::flow::{QueueLimits, QueueSettings, Rate, RetryPolicy};
use crate::sql::db::{with_pool, write_with_pool, Db, Urgency};

/// The columns a [`QueueRow`] is read from.
const COLUMNS: &str = "queue, paused, concurrency, rate_count, rate_period, rate_burst, \
                       key_concurrency, max_attempts, backoff_base, backoff_max";

/// A row of `ttw_queues`, as an operator sees it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct QueueRow {
    queue: String,
    paused: i64,
    concurrency: Option<i64>,
    rate_count: Option<i64>,
    rate_period: Option<i64>,
    rate_burst: Option<i64>,
    key_concurrency: Option<i64>,
    max_attempts: Option<i64>,
    backoff_base: Option<i64>,
    backoff_max: Option<i64>,
}

impl QueueRow {
    /// The settings this row holds.
    pub(crate) fn settings(self) -> QueueSettings {
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        let mut limits = QueueLimits::new();
        if let Some(n) = self.concurrency {
            limits = limits.concurrency(count(n));
        }
        if let Some(n) = self.key_concurrency {
            limits = limits.per_key_concurrency(count(n));
        }
        if let (Some(n), Some(per), Some(burst)) =
            (self.rate_count, self.rate_period, self.rate_burst)
        {
            let per = std::time::Duration::from_millis(u64::try_from(per).unwrap_or(0));
            limits = limits.rate(Rate::new(count(n), per).burst(count(burst)));
        }
        let mut retry = RetryPolicy::new();
        if let Some(n) = self.max_attempts {
            retry = retry.max_attempts(count(n));
        }
        if let Some(backoff) = backoff(self.backoff_base, self.backoff_max) {
            retry = retry.backoff(backoff);
        }
        QueueSettings {
            queue: self.queue,
            paused: self.paused != 0,
            limits,
            retry,
        }
    }
}

/// The smaller of two values, as SQL: `MIN` on SQLite, `LEAST` on
/// PostgreSQL (both take two arguments).
pub(crate) fn least(db: &Db) -> &'static str {
    if db.is_sqlite() {
        "MIN"
    } else {
        "LEAST"
    }
}

/// The larger of two values, as SQL (see [`least`]).
pub(crate) fn greatest(db: &Db) -> &'static str {
    if db.is_sqlite() {
        "MAX"
    } else {
        "GREATEST"
    }
}

/// Pauses `queue` (or resumes it), creating its row if need be.
pub(crate) async fn set_paused(db: &Db, queue: &str, paused: bool) -> Result<(), Error> {
    let sql = format!(
        "INSERT INTO ttw_queues (queue, paused, updated_at) VALUES ($1, $2, {}) \
         ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at",
        db.clock_sql()
    );
    write_with_pool!(db, Urgency::Ordinary, pool => {
        sqlx::query(&sql)
            .bind(queue)
            .bind(i64::from(paused))
            .execute(pool)
            .await
            .map(drop)?
    });
    Ok(())
}

/// Sets `queue`'s limits, replacing the ones it had. A rate set again as
/// it was keeps its bucket (a deploy that sets its limits each time lets
/// no burst through); a new rate starts from the tokens left, at most its
/// burst; a first rate starts with a full bucket.
pub(crate) async fn set_limits(db: &Db, queue: &str, limits: &QueueLimits) -> Result<(), Error> {
    let least = least(db);
    let changed = "(ttw_queues.rate_count IS DISTINCT FROM excluded.rate_count \
                   OR ttw_queues.rate_period IS DISTINCT FROM excluded.rate_period \
                   OR ttw_queues.rate_burst IS DISTINCT FROM excluded.rate_burst)";
    let sql = format!(
        "INSERT INTO ttw_queues (queue, concurrency, rate_count, rate_period, rate_burst, key_concurrency, \
         tokens, refilled_at, updated_at) \
         SELECT $1, $2, $3, $4, $5, $6, COALESCE($5, 0), c.now, c.now FROM (SELECT {} AS now) c WHERE TRUE \
         ON CONFLICT (queue) DO UPDATE SET concurrency = excluded.concurrency, \
         key_concurrency = excluded.key_concurrency, \
         tokens = CASE WHEN NOT {changed} THEN ttw_queues.tokens \
         WHEN ttw_queues.rate_count IS NULL THEN excluded.tokens \
         ELSE {least}(ttw_queues.tokens, excluded.tokens) END, \
         refilled_at = CASE WHEN {changed} THEN excluded.refilled_at ELSE ttw_queues.refilled_at END, \
         rate_count = excluded.rate_count, rate_period = excluded.rate_period, \
         rate_burst = excluded.rate_burst, updated_at = excluded.updated_at",
        db.clock_sql()
    );
    let rate = limits.rate_limit();
    write_with_pool!(db, Urgency::Ordinary, pool => {
        sqlx::query(&sql)
            .bind(queue)
            .bind(limits.concurrency_limit().map(i64::from))
            .bind(rate.map(|r| i64::from(r.count())))
            .bind(rate.map(|r| r.period_ms()))
            .bind(rate.map(|r| i64::from(r.burst_size())))
            .bind(limits.per_key_limit().map(i64::from))
            .execute(pool)
            .await
            .map(drop)?
    });
    Ok(())
}

/// A backoff from its columns (ms), if both are set.
fn backoff(base: Option<i64>, max: Option<i64>) -> Option<Backoff> {
    let ms = |v: i64| std::time::Duration::from_millis(u64::try_from(v).unwrap_or(0));
    Some(Backoff::exponential(ms(base?), ms(max?)))
}

/// Sets `queue`'s retry policy, replacing the one it had.
pub(crate) async fn set_retry(db: &Db, queue: &str, retry: &RetryPolicy) -> Result<(), Error> {
    let sql = format!(
        "INSERT INTO ttw_queues (queue, max_attempts, backoff_base, backoff_max, updated_at) \
         VALUES ($1, $2, $3, $4, {}) ON CONFLICT (queue) DO UPDATE SET \
         max_attempts = excluded.max_attempts, backoff_base = excluded.backoff_base, \
         backoff_max = excluded.backoff_max, updated_at = excluded.updated_at",
        db.clock_sql()
    );
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let backoff = retry.backoff_policy();
    write_with_pool!(db, Urgency::Ordinary, pool => {
        sqlx::query(&sql)
            .bind(queue)
            .bind(retry.max_attempts_limit().map(i64::from))
            .bind(backoff.map(|b| ms(b.base_delay())))
            .bind(backoff.map(|b| ms(b.max_delay())))
            .execute(pool)
            .await
            .map(drop)?
    });
    Ok(())
}

/// The backoff `queue`'s settings give its retries, if any: what a node
/// reads when one of the queue's attempts fails.
pub(crate) async fn queue_backoff(db: &Db, queue: &str) -> Result<Option<Backoff>, Error> {
    let row: Option<(Option<i64>, Option<i64>)> = with_pool!(db, pool => {
        sqlx::query_as("SELECT backoff_base, backoff_max FROM ttw_queues WHERE queue = $1")
            .bind(queue)
            .fetch_optional(pool)
            .await?
    });
    Ok(row.and_then(|(base, max)| backoff(base, max)))
}

/// The settings of `queue`, if it has a row.
pub(crate) async fn get(db: &Db, queue: &str) -> Result<Option<QueueRow>, Error> {
    let sql = format!("SELECT {COLUMNS} FROM ttw_queues WHERE queue = $1");
    let row = with_pool!(db, pool => {
        sqlx::query_as(&sql).bind(queue).fetch_optional(pool).await?
    });
    Ok(row)
}

/// Every queue's settings, by name.
pub(crate) async fn list(db: &Db) -> Result<Vec<QueueRow>, Error> {
    let sql = format!("SELECT {COLUMNS} FROM ttw_queues ORDER BY queue");
    let rows = with_pool!(db, pool => {
        sqlx::query_as(&sql).fetch_all(pool).await?
    });
    Ok(rows)
}

/// The bucket of `queue`: its tokens and when they were counted (for the
/// conformance suite).
#[cfg(test)]
pub(crate) async fn bucket(db: &Db, queue: &str) -> Result<Option<(f64, i64)>, Error> {
    let row = with_pool!(db, pool => {
        sqlx::query_as("SELECT tokens, refilled_at FROM ttw_queues WHERE queue = $1")
            .bind(queue)
            .fetch_optional(pool)
            .await?
    });
    Ok(row)
}

/// The partition key a finished task keeps in `ttw_history` (for the
/// conformance suite).
#[cfg(test)]
pub(crate) async fn history_partition_key(db: &Db, id: i64) -> Result<Option<String>, Error> {
    let key = with_pool!(db, pool => {
        sqlx::query_scalar("SELECT partition_key FROM ttw_history WHERE id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?
    });
    Ok(key)
}

/// A wait for a place: `session`'s for `key`'s tasks of `queue`, until
/// `until`.
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyWait<'a> {
    pub(crate) queue: &'a str,
    pub(crate) key: &'a str,
    pub(crate) session: &'a str,
    pub(crate) until: i64,
}

/// Notes that `session` waits for a place for `key`'s tasks of `queue`
/// until `until` (for the conformance suite: as another node's limited
/// claim would).
#[cfg(test)]
pub(crate) async fn note_key_wait(db: &Db, wait: KeyWait<'_>) -> Result<(), Error> {
    let KeyWait {
        queue,
        key,
        session,
        until,
    } = wait;
    with_pool!(db, pool => {
        sqlx::query(
            "INSERT INTO ttw_key_waits (queue, partition_key, session, wait_until) VALUES ($1, $2, $3, $4)",
        )
        .bind(queue)
        .bind(key)
        .bind(session)
        .bind(until)
        .execute(pool)
        .await?;
    });
    Ok(())
}

/// The keys of `queue` waiting for a place, as (key, session), in order
/// (for the conformance suite).
#[cfg(test)]
pub(crate) async fn key_waits(db: &Db, queue: &str) -> Result<Vec<(String, String)>, Error> {
    let rows = with_pool!(db, pool => {
        sqlx::query_as(
            "SELECT partition_key, session FROM ttw_key_waits WHERE queue = $1 \
             ORDER BY partition_key, session",
        )
        .bind(queue)
        .fetch_all(pool)
        .await?
    });
    Ok(rows)
}
