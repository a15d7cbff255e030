//! How much a claim reads on PostgreSQL, where the planner picks the path:
//! counted in index entries read (`pg_stat_user_indexes`), never in time.
#![cfg(target_os = "linux")]

#[path = "support/backends.rs"]
mod backends;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backends::{Backend, Db};
use ttw_durable::{NewTask, Scheduler};

/// Regression: the claim's lease check was an `EXISTS`, which PostgreSQL
/// flattened into a join. With the statistics of a fresh table (from before
/// the tasks were stored and the node took its 256 leases) it drove the
/// claim from the leases and read every scheduled task of the queue once
/// per lease: about 5 million index entries for a claim of a few ids among
/// 20,000 due, up to a second each, so a queue with a concurrency limit
/// (many small claims) drained at about 300 tasks a second
/// (`cargo bench -p ttw-durable --features webhook,nats --bench targets`). The check is
/// now a per-row lookup of the lease, and the ids pick the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn small_claims_among_many_due_tasks_read_only_their_rows() {
    let db = Db::new(Backend::Postgres, "small_claims");
    let store = db.open().await;
    let tasks = (0..20_000).map(|i| NewTask::new(vec![i as u8]).queue("limited"));
    store.schedule_batch(tasks).await.unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let scheduler = Scheduler::builder(store.clone())
        .handle("limited", move |_task| {
            count.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, String>(()) }
        })
        .queue_concurrency("limited", 4)
        .start_queues()
        .await
        .unwrap();
    // At least 50 claims of at most 4 ids each.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    while handled.load(Ordering::SeqCst) < 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "200 tasks not done in 300 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = handled.load(Ordering::SeqCst);
    scheduler.shutdown().await.unwrap();
    // The pool's connections end, and with them report what they read.
    drop(store);

    let schema = db.qualified("x");
    let schema = schema.strip_suffix(".x").unwrap();
    let sql = format!(
        "SELECT COALESCE(SUM(idx_tup_read), 0)::BIGINT FROM pg_stat_user_indexes \
         WHERE schemaname = '{schema}' AND relname = 'ttw_tasks'"
    );
    // Read until two readings half a second apart agree.
    let mut read = -1;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = db.query_i64(&sql).await;
        if now > 0 && now == read {
            break;
        }
        read = now;
    }
    assert!(read > 0, "the statistics arrived");
    println!("{read} index entries read for {done} tasks claimed at most 4 at a time");
    // While the statistics are stale a claim may still read the due rows
    // (20,000) through their index: about 13,000 entries a task here. With
    // the lease check as an `EXISTS` it was about 160,000 a task.
    let per_task = read / done as i64;
    assert!(
        per_task < 50_000,
        "{per_task} index entries read per task claimed"
    );
}
