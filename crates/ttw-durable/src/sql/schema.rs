//! The schema: embedded migrations for each backend, and the rows created
//! once with it (the shard count and one lease row per shard of the
//! default queue; a queue's other rows come with the first node serving it).

use sqlx::migrate::Migrator;

use crate::error::Error;
use crate::model::queue::DEFAULT_QUEUE;
use crate::sql::db::{with_pool, write_with_pool, Db, Urgency};

/// The SQLite migrations, embedded at compile time.
#[cfg(feature = "sqlite")]
static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
/// The PostgreSQL migrations, embedded at compile time.
#[cfg(feature = "postgres")]
static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

/// The number of logical shards a schema gets when none is asked for.
pub const DEFAULT_SHARDS: u32 = 256;

/// Brings the schema up to date and returns its shard count.
///
/// A database that has a migration this build does not know (a newer
/// version of the crate wrote it) is refused with
/// [`Error::is_schema_too_new`] before anything is changed. The shard count
/// is fixed when the schema is created: `requested` is used then, and later
/// must be `None` or the same number.
pub(crate) async fn prepare(db: &Db, requested: Option<u32>) -> Result<u32, Error> {
    match db {
        #[cfg(feature = "sqlite")]
        Db::Sqlite(pool, _) => SQLITE.run(pool).await?,
        #[cfg(feature = "postgres")]
        Db::Postgres(pool) => POSTGRES.run(pool).await?,
    }
    let wanted = i64::from(requested.unwrap_or(DEFAULT_SHARDS));
    with_pool!(db, pool => {
        sqlx::query("INSERT INTO ttw_meta (key, value) VALUES ('shards', $1) ON CONFLICT (key) DO NOTHING")
            .bind(wanted)
            .execute(pool)
            .await?;
    });
    let shards: i64 = with_pool!(db, pool => {
        sqlx::query_scalar("SELECT value FROM ttw_meta WHERE key = 'shards'")
            .fetch_one(pool)
            .await?
    });
    if let Some(requested) = requested {
        if i64::from(requested) != shards {
            return Err(Error::config(format!(
                "the schema was created with {shards} shards, not {requested}"
            )));
        }
    }
    let shards = u32::try_from(shards)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| Error::corrupt(format!("ttw_meta holds a shard count of {shards}")))?;
    // One lease row per shard of the default queue; a re-run (or a
    // concurrent first open) adds nothing.
    add_lease_rows(db, DEFAULT_QUEUE, shards).await?;
    Ok(shards)
}

/// Adds the lease rows of `queue`, one per shard, that are missing.
pub(crate) async fn add_lease_rows(db: &Db, queue: &str, shards: u32) -> Result<(), Error> {
    let (have,): (i64,) = with_pool!(db, pool => {
        sqlx::query_as("SELECT COUNT(*) FROM ttw_leases WHERE queue = $1")
            .bind(queue)
            .fetch_one(pool)
            .await?
    });
    if have < i64::from(shards) {
        write_with_pool!(db, Urgency::Urgent, pool => {
            sqlx::query(
                "WITH RECURSIVE s(n) AS (SELECT CAST(0 AS BIGINT) UNION ALL SELECT n + 1 FROM s WHERE n + 1 < $1) \
                 INSERT INTO ttw_leases (queue, shard) SELECT $2, n FROM s WHERE true \
                 ON CONFLICT (queue, shard) DO NOTHING",
            )
            .bind(i64::from(shards))
            .bind(queue)
            .execute(pool)
            .await?;
        });
    }
    Ok(())
}
