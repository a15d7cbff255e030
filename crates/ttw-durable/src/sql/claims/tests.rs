use super::*;
use crate::client::store::Store;
use crate::model::attempts::{AttemptOutcome, Receipt};

/// A batch of successes is fenced row by row: the rows whose attempt
/// still holds its task are written, and in the same statement a stale
/// claim, a task another session locked and a task in a shard whose
/// lease moved on are refused, and left as they were.
#[tokio::test]
async fn a_batch_of_successes_is_fenced_row_by_row() {
    let store = Store::sqlite_in_memory().await.unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            store
                .schedule(format!("t{i}").into_bytes())
                .await
                .unwrap()
                .get(),
        );
    }
    let Db::Sqlite(pool, _) = store.db() else {
        unreachable!("an SQLite store")
    };
    for sql in [
        "UPDATE ttw_leases SET owner_session = 's', epoch = 3".to_string(),
        "UPDATE ttw_tasks SET state = 'running', claims = 1, attempts = 1, locked_by = 's', lock_epoch = 3"
            .to_string(),
        // Task 3 is another session's; task 4's shard moved on since.
        format!(
            "UPDATE ttw_tasks SET locked_by = 'other' WHERE id = {}",
            ids[3]
        ),
        format!("UPDATE ttw_tasks SET lock_epoch = 2 WHERE id = {}", ids[4]),
    ] {
        sqlx::query(&sql).execute(pool).await.unwrap();
    }
    let lanes = Arc::new(
        Lanes::new(
            vec![crate::model::queue::DEFAULT_QUEUE.into()],
            store.shards(),
        )
        .unwrap(),
    );
    let claims = Claims::new(store.db().clone(), lanes, store.shards(), "s".into());
    let success = |i: usize, claim: i64| Success { id: ids[i], claim };
    let batch = [
        success(0, 1),
        success(1, 2), // a stale claim: the task's claim count is 1
        success(2, 1),
        success(3, 1),
        success(4, 1),
    ];
    let mut outcomes: Vec<Finished> = batch.iter().map(|&s| s.into()).collect();
    outcomes[0].receipt = Receipt::status(201).answer("queued as 9");
    let mut written = claims.complete_many(&outcomes, 7_000).await.unwrap();
    written.sort_unstable();
    assert_eq!(written, vec![success(0, 1), success(2, 1)]);
    for (i, state) in ["done", "running", "done", "running", "running"]
        .iter()
        .enumerate()
    {
        let got: String = sqlx::query_scalar("SELECT state FROM ttw_all_tasks WHERE id = $1")
            .bind(ids[i])
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(got, *state, "task {i}");
        // A task written done left the hot table for the history, with
        // its payload and attempt; the others stay where they were.
        let hot: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM ttw_tasks WHERE id = $1")
            .bind(ids[i])
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(hot, i64::from(*state != "done"), "task {i} in ttw_tasks");
    }
    let (payload, claims_then, finished): (Vec<u8>, i64, i64) =
        sqlx::query_as("SELECT payload, claims, finished_at FROM ttw_history WHERE id = $1")
            .bind(ids[0])
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!((payload, claims_then, finished), (b"t0".to_vec(), 1, 7_000));
    // The receipt went with it, and the attempt reads back as done.
    let attempts = crate::sql::attempts::of_task(store.db(), ids[0])
        .await
        .unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].outcome, AttemptOutcome::Done);
    assert_eq!(attempts[0].status, Some(201));
    assert_eq!(attempts[0].detail.as_deref(), Some("queued as 9"));
    assert_eq!(attempts[0].node.as_deref(), Some("s"));
    let running = crate::sql::attempts::of_task(store.db(), ids[1])
        .await
        .unwrap();
    assert_eq!(running.len(), 1, "{running:?}");
    assert_eq!(running[0].outcome, AttemptOutcome::Running);
    // Written once: the same success again finds nothing to write.
    assert!(claims
        .complete_many(&outcomes[..1], 8_000)
        .await
        .unwrap()
        .is_empty());
}
