//! The baseline every reader knows: every second, claim the due rows (on
//! PostgreSQL `SELECT ... FOR UPDATE SKIP LOCKED` and an `UPDATE` in one
//! transaction; on SQLite, which has no row locks, one `UPDATE ... WHERE id
//! IN (SELECT ... LIMIT n) RETURNING`), run them, and mark each done with one
//! statement. It works on the durable layer's own `ttw_tasks` table, so the
//! same store schedules for it.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;

/// How often the baseline looks for due rows.
pub const POLL_PERIOD: Duration = Duration::from_secs(1);
/// The most rows one claim takes.
pub const CLAIM_LIMIT: i64 = 500;

/// The baseline's own connections.
#[derive(Clone)]
pub enum Pool {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Pool {
    pub async fn sqlite(path: &Path) -> Pool {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(Duration::from_secs(10));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(16)
            .connect_with(options)
            .await
            .expect("open the SQLite file");
        Pool::Sqlite(pool)
    }

    /// `schema`: where the store made its tables, if not `public`.
    pub async fn postgres(url: &str, schema: Option<&str>) -> Pool {
        let mut options: sqlx::postgres::PgConnectOptions = url.parse().expect("a PostgreSQL URL");
        if let Some(schema) = schema {
            options = options.options([("search_path", schema)]);
        }
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(16)
            .connect_with(options)
            .await
            .expect("connect to PostgreSQL");
        Pool::Postgres(pool)
    }

    /// Claims up to [`CLAIM_LIMIT`] due rows: `(id, run_at ms)`.
    async fn claim(&self) -> Vec<(i64, i64)> {
        let now = now_ms();
        match self {
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await.expect("begin");
                let rows: Vec<(i64, i64)> = sqlx::query_as(
                    "SELECT id, run_at FROM ttw_tasks WHERE state = 'scheduled' AND run_at <= $1 \
                     ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED",
                )
                .bind(now)
                .bind(CLAIM_LIMIT)
                .fetch_all(&mut *tx)
                .await
                .expect("select due rows");
                let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
                sqlx::query(
                    "UPDATE ttw_tasks SET state = 'running', attempts = attempts + 1 \
                     WHERE id = ANY($1)",
                )
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .expect("claim");
                tx.commit().await.expect("commit");
                rows
            }
            Pool::Sqlite(pool) => sqlx::query_as(
                "UPDATE ttw_tasks SET state = 'running', attempts = attempts + 1 WHERE id IN \
                 (SELECT id FROM ttw_tasks WHERE state = 'scheduled' AND run_at <= $1 \
                 ORDER BY run_at LIMIT $2) RETURNING id, run_at",
            )
            .bind(now)
            .bind(CLAIM_LIMIT)
            .fetch_all(pool)
            .await
            .expect("claim"),
        }
    }

    async fn finish(&self, id: i64) {
        let sql = "UPDATE ttw_tasks SET state = 'done', finished_at = $2 WHERE id = $1";
        let done = match self {
            Pool::Postgres(pool) => sqlx::query(sql)
                .bind(id)
                .bind(now_ms())
                .execute(pool)
                .await
                .map(drop),
            Pool::Sqlite(pool) => sqlx::query(sql)
                .bind(id)
                .bind(now_ms())
                .execute(pool)
                .await
                .map(drop),
        };
        done.expect("mark done");
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Polls forever: `run(id, run_at_ms)` for each claimed row, at most
/// `concurrency` at once, then marks it done.
pub async fn poll_loop(pool: Pool, concurrency: usize, run: impl Fn(i64, i64)) {
    let mut tick = tokio::time::interval(POLL_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        loop {
            let claimed = pool.claim().await;
            if claimed.is_empty() {
                break;
            }
            futures::stream::iter(claimed)
                .for_each_concurrent(concurrency, |(id, run_at)| {
                    run(id, run_at);
                    let pool = pool.clone();
                    async move { pool.finish(id).await }
                })
                .await;
        }
    }
}
