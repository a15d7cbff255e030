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
