//! The store's unit tests.

use super::*;

/// Regression: an in-memory store lived only as long as its pool's one
/// connection. A statement cut off by a cancelled future (a scheduler
/// task aborted at shutdown) makes the pool close that connection and
/// open another, which found a new, empty database ("no such table").
/// A connection outside the pool now keeps the database for the store's
/// life.
#[tokio::test]
async fn an_in_memory_store_outlives_its_pool_connection() {
    let store = Store::sqlite_in_memory().await.unwrap();
    let id = store.schedule(b"kept".to_vec()).await.unwrap();
    let Db::Sqlite(pool, _) = store.db() else {
        unreachable!("an SQLite store")
    };
    // Take the pool's one connection out of it and close it.
    let conn = pool.acquire().await.unwrap().detach();
    sqlx::Connection::close(conn).await.unwrap();
    let info = store
        .get(id)
        .await
        .unwrap()
        .expect("the task is still there");
    assert_eq!(info.payload, b"kept");
    assert_eq!(store.counts().await.unwrap().scheduled, 1);
}

/// The WAL of a database file is checkpointed off the write path while
/// writes go on, so it does not grow with everything written: SQLite's own
/// checkpoints (inside a commit, while this process's writes wait) are off,
/// and without the store's checkpointer the WAL would hold every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_checkpointed_while_writes_go_on() {
    let dir = std::env::temp_dir().join(format!("ttw-wal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tasks.db");
    let store = Store::sqlite(&path).await.unwrap();
    let wal = dir.join("tasks.db-wal");
    let round = || (0..2_000).map(|_| crate::model::new_task::NewTask::new(vec![7u8; 1024]));
    let mut largest = 0;
    for _ in 0..8 {
        store.schedule_batch(round()).await.unwrap();
        largest = largest.max(std::fs::metadata(&wal).unwrap().len());
        tokio::time::sleep(Duration::from_millis(1_300)).await;
    }
    let one_round = largest;
    // Eight rounds of 2 MiB of payload (about 3 MiB of WAL each): kept to
    // a few rounds, not eight.
    assert!(one_round > 0);
    let total = 8 * 2_000 * 1024;
    assert!(
        largest < total / 2,
        "WAL reached {largest} bytes of {total} written"
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each commit durability is SQLite's `synchronous` on every pooled
/// connection: `NORMAL` (1) by default, `FULL` (2) for synced commits.
#[tokio::test]
async fn synced_commits_are_sqlite_s_full_synchronous_on_every_connection() {
    let dir = std::env::temp_dir().join(format!("ttw-commits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (commits, level) in [
        (None, 1),
        (Some(Commits::Synced), 2),
        (Some(Commits::Flushed), 1),
    ] {
        let path = dir.join(format!("tasks-{level}-{}.db", commits.is_some()));
        let mut builder = Store::builder();
        if let Some(commits) = commits {
            builder = builder.sqlite_commits(commits);
        }
        let store = builder.sqlite(&path).await.unwrap();
        let Db::Sqlite(pool, _) = store.db() else {
            unreachable!("an SQLite store")
        };
        // More connections than one, each opened with the setting.
        let mut held = Vec::new();
        for _ in 0..3 {
            let mut conn = pool.acquire().await.unwrap();
            let (got,): (i64,) = sqlx::query_as("PRAGMA synchronous")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert_eq!(got, level, "{commits:?}");
            held.push(conn);
        }
        drop(held);
        store.schedule("kept").await.unwrap();
    }
    assert!("synced".parse::<Commits>().unwrap() == Commits::Synced);
    assert!("full".parse::<Commits>().unwrap() == Commits::Synced);
    assert!("normal".parse::<Commits>().unwrap() == Commits::Flushed);
    let err = "often".parse::<Commits>().unwrap_err();
    assert!(
        err.is_config() && err.to_string().contains("power cut"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `DATABASE_URL` with a dead host put before it.
#[cfg(feature = "postgres")]
fn behind_a_dead_host(attrs: &str) -> String {
    let url = std::env::var("DATABASE_URL").expect("built with DATABASE_URL");
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, rest) = rest.rsplit_once('@').map_or(("", rest), |(u, r)| (u, r));
    let at = if userinfo.is_empty() { "" } else { "@" };
    format!("{scheme}://{userinfo}{at}127.0.0.1:1,{rest}{attrs}")
}

/// A store on a multi-host URL opens on the first host of the list that
/// takes writes (the first one here refuses connections), and works.
#[cfg(feature = "postgres")]
#[tokio::test]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn a_store_opens_on_the_first_host_that_takes_writes() {
    let url = behind_a_dead_host("?target_session_attrs=read-write");
    let schema = format!("ttw_primary_{}", std::process::id());
    let store = StoreBuilder::default()
        .postgres_schema(schema.clone())
        .postgres(&url)
        .await
        .unwrap();
    let id = store.schedule("on the second host").await.unwrap();
    assert!(store.get(id).await.unwrap().is_some());
    crate::sql::testing::with_any_pool!(store.db(), pool => {
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(pool)
            .await
            .unwrap();
    });
}
