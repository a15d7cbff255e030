//! How much a claim reads on PostgreSQL, where the planner picks the path:
//! counted in index entries read (`pg_stat_user_indexes`), never in time.
#![cfg(target_os = "linux")]

#[path = "support/backends.rs"]
mod backends;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use backends::{Backend, Db};
use futures::StreamExt;
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
///
/// Regression, too: with the lease check fixed, stale statistics still let
/// a claim read the due rows through the `(state, run_at)` index, about
/// 13,000 entries a task claimed here. The claim's conditions on state and
/// time are now checks on the rows its ids found, which no index serves.
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
    // About 200 a task: what is left is the window's loads and polls. With
    // the claim's state check served by an index it was about 13,000; with
    // the lease check as an `EXISTS`, about 160,000.
    let per_task = read / done as i64;
    assert!(
        per_task < 2_000,
        "{per_task} index entries read per task claimed"
    );
}

/// Waits until the statistics of the store's connections (dropped before)
/// have arrived: at least `updates` rows of the test's `ttw_tasks`
/// updated or deleted (a task done leaves it for the history). A counter
/// read before then could read 0 and prove nothing.
async fn statistics_arrived(db: &Db, updates: i64) {
    let schema = schema(db);
    let sql = format!(
        "SELECT COALESCE(SUM(n_tup_upd + n_tup_del), 0)::BIGINT FROM pg_stat_user_tables \
         WHERE schemaname = '{schema}' AND relname = 'ttw_tasks'"
    );
    for _ in 0..60 {
        if db.query_i64(&sql).await >= updates {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the statistics of {updates} updates did not arrive within 30 s");
}

/// A counter of the test's statistics (`sql`, one number), once two
/// readings half a second apart agree (see [`statistics_arrived`]).
async fn steady_reading(db: &Db, sql: &str) -> i64 {
    let mut read = -1;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = db.query_i64(sql).await;
        if now == read {
            break;
        }
        read = now;
    }
    read
}

/// The test's schema, where its tables are.
fn schema(db: &Db) -> String {
    let name = db.qualified("x");
    name.strip_suffix(".x").unwrap().to_string()
}

/// Index entries of `index` on the test's `ttw_tasks` read.
async fn entries_read(db: &Db, index: &str) -> i64 {
    let schema = schema(db);
    steady_reading(
        db,
        &format!(
            "SELECT COALESCE(SUM(idx_tup_read), 0)::BIGINT FROM pg_stat_user_indexes \
             WHERE schemaname = '{schema}' AND relname = 'ttw_tasks' AND indexrelname = '{index}'"
        ),
    )
    .await
}

/// Regression: an outcome finds its task by id, and checks the rest of the
/// fence (running, locked by this node, the lease's epoch) on that row.
/// PostgreSQL, with statistics from before a burst (a few rows running,
/// where thousands were), read the outcome through the `(state,
/// locked_until)` index instead, every running task's entry for each
/// batch of outcomes, and joined the batch's ids to them: in a burst of
/// 100,000 tasks a batch of 500 successes took 50 to 180 ms, and the last
/// task ran 17.6 s after its time where 7.5 s is the rate's due
/// (`peers` burst scenario). Here 2,000 deliveries are held running while
/// 500 others are acknowledged one at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn outcomes_read_only_their_rows_while_many_tasks_run() {
    const HELD: usize = 2_000;
    const ACKED: usize = 500;
    let db = Db::new(Backend::Postgres, "outcomes_by_id");
    let store = db.open().await;
    store
        .schedule_batch((0..HELD + ACKED).map(|i| NewTask::new(vec![i as u8])))
        .await
        .unwrap();
    // The statistics autovacuum gathers while a burst waits for its time:
    // every task scheduled, none running.
    let mut conn = db.caller_postgres().await;
    sqlx::query(&format!("ANALYZE {}", db.qualified("ttw_tasks")))
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    let (scheduler, mut deliveries) = Scheduler::builder(store.clone())
        .max_concurrency(HELD + ACKED)
        .callback_timeout(Duration::from_secs(120))
        .start_stream()
        .await
        .unwrap();
    let mut held = Vec::new();
    while held.len() < HELD + ACKED {
        held.push(deliveries.next().await.unwrap());
    }
    for delivery in held.drain(..ACKED) {
        delivery.ack().await.unwrap();
    }
    for delivery in held {
        delivery.ack().await.unwrap();
    }
    scheduler.shutdown().await.unwrap();
    drop(deliveries);
    drop(store);
    // Every task was claimed and marked done: an update and a delete each.
    statistics_arrived(&db, 2 * (HELD + ACKED) as i64).await;
    let read = entries_read(&db, "ttw_tasks_locked").await;
    println!(
        "{read} entries of the running tasks' index read for {ACKED} outcomes among {HELD} running"
    );
    // Read through that index, each of the first 500 outcomes read the
    // 2,000 entries of the tasks running: a million in all. What reads it
    // now is the reclaim, a few times.
    assert!(
        read < 100_000,
        "{read} entries of the running tasks' index read"
    );
}

/// Rows of the test's `ttw_tasks` read by sequential scans.
async fn rows_scanned(db: &Db) -> i64 {
    let schema = schema(db);
    steady_reading(
        db,
        &format!(
            "SELECT COALESCE(seq_tup_read, 0)::BIGINT FROM pg_stat_user_tables \
             WHERE schemaname = '{schema}' AND relname = 'ttw_tasks'"
        ),
    )
    .await
}

/// Regression: the statements that take tasks by id kept the plan
/// PostgreSQL made for them while the table was young (a few hundred rows,
/// never analyzed): a scan of the whole table. As tasks flowed the table
/// grew and every claim and every batch of outcomes read all of it, until
/// autovacuum first analyzed the table, 30 s or more in: at 800 tasks a
/// second, pickups ran up to 1.7 s late meanwhile (`examples/held_snapshot`).
/// They are now planned at each run. Here the plans are made while the
/// table is young, then it grows to 60,000 rows with autovacuum off for
/// it, and small batches of tasks run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn id_lookups_stay_lookups_as_a_young_table_grows() {
    const BATCH: usize = 20;
    let db = Db::new(Backend::Postgres, "young_table");
    let store = db.open().await;
    let mut conn = db.caller_postgres().await;
    sqlx::query(&format!(
        "ALTER TABLE {} SET (autovacuum_enabled = false)",
        db.qualified("ttw_tasks")
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    drop(conn);
    let handled = Arc::new(AtomicUsize::new(0));
    let count = handled.clone();
    let scheduler = Scheduler::builder(store.clone())
        .start(move |_task| {
            count.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, String>(()) }
        })
        .await
        .unwrap();
    let run_batches = |rounds: usize| {
        let (store, handled) = (store.clone(), handled.clone());
        async move {
            for _ in 0..rounds {
                let target = handled.load(Ordering::SeqCst) + BATCH;
                store
                    .schedule_batch((0..BATCH).map(|_| NewTask::new(Vec::new())))
                    .await
                    .unwrap();
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                while handled.load(Ordering::SeqCst) < target {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "a batch not done in 60 s"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    };
    // The plans are made while the table is young.
    run_batches(10).await;
    let later = std::time::SystemTime::now() + Duration::from_secs(86_400);
    store
        .schedule_batch((0..60_000).map(|_| NewTask::new(Vec::new()).at(later)))
        .await
        .unwrap();
    run_batches(20).await;
    scheduler.shutdown().await.unwrap();
    drop(store);
    // 30 batches, each task claimed and marked done.
    statistics_arrived(&db, 2 * 30 * BATCH as i64).await;
    let scanned = rows_scanned(&db).await;
    println!("{scanned} rows read by sequential scans");
    // Planned at each run, about 1,500 (the young table's); with the young
    // table's plans kept, over half a million (278,000 with 30,000 rows).
    assert!(scanned < 150_000, "{scanned} rows read by sequential scans");
}

/// The console's pages on PostgreSQL read a page's worth of index
/// entries, not the store's. 30,000 tasks due at one millisecond (a burst)
/// and 10 others.
///
/// The counts of the queues page, stopped at 1,000, read at most that
/// many entries per queue and state. The statistics of a backlog say that
/// nearly every task is scheduled in one queue, so PostgreSQL, planning
/// the probe for any (queue, state) at once, expected each to find its
/// 1,000 rows soon by a sequential scan, and for the states no task is in
/// read the whole table: 1.6 s a page at 10 million tasks (`cargo bench
/// -p ttw --bench backlog`), and here 151,050 rows for one page. The
/// probes now walk the index whatever the statistics.
///
/// Two pages of 50 in due order across the whole range, the second after
/// the first's cursor inside the burst, read the due index's entries of
/// those pages. With the index on `(state, run_at)` alone PostgreSQL read
/// the millisecond's entries to sort them by id (30,001 for the two pages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn console_pages_read_a_page_of_entries_among_a_burst() {
    use ttw_durable::{TaskQuery, TaskState};
    let db = Db::new(Backend::Postgres, "console_pages");
    let store = db.open().await;
    let burst = std::time::SystemTime::now() + Duration::from_secs(86_400);
    let tasks = (0..30_000).map(|i| NewTask::new(vec![i as u8]).queue("big").at(burst));
    store.schedule_batch(tasks).await.unwrap();
    for i in 0..10u64 {
        let at = burst + Duration::from_secs(i * 60 + 1);
        store.schedule(vec![1]).queue("small").at(at).await.unwrap();
    }
    // The statistics of a table in steady use (autovacuum's): a table so
    // young that it has none, PostgreSQL reads every entry a range selects
    // into a bitmap and sorts them.
    db.exec(&format!("ANALYZE {}", db.qualified("ttw_tasks")))
        .await;
    drop(store);
    let (queue_before, scanned_before) = (
        entries_read(&db, "ttw_tasks_queue").await,
        rows_scanned(&db).await,
    );

    let store = db.open().await;
    let counts = store.bounded_queue_counts(1_000).await.unwrap();
    assert_eq!(counts.counts["big"].scheduled, 1_000);
    assert!(counts.is_capped("big", TaskState::Scheduled));
    assert_eq!(counts.counts["small"].scheduled, 10);
    drop(store);
    let queue = entries_read(&db, "ttw_tasks_queue").await - queue_before;
    let scanned = rows_scanned(&db).await - scanned_before;
    println!("the bounded counts read {queue} index entries and {scanned} rows by scans");
    assert!(
        queue > 0 && queue < 3_000,
        "{queue} entries of the queue index read"
    );
    assert!(scanned < 1_000, "{scanned} rows read by sequential scans");

    let due_before = entries_read(&db, "ttw_tasks_due").await;
    let store = db.open().await;
    let query = TaskQuery::new()
        .state(TaskState::Scheduled)
        .due_from(burst - Duration::from_secs(1))
        .by_due()
        .limit(50);
    let first = store.list(&query).await.unwrap();
    let second = store
        .list(&query.clone().after_task(first.last().unwrap()))
        .await
        .unwrap();
    assert_eq!((first.len(), second.len()), (50, 50));
    assert!(first
        .iter()
        .chain(&second)
        .all(|t| t.run_at == first[0].run_at));
    assert!(second[0].id > first[49].id);
    drop(store);
    let due = entries_read(&db, "ttw_tasks_due").await - due_before;
    println!("two pages in due order read {due} entries of the due index");
    assert!(
        due > 0 && due < 1_000,
        "{due} entries of the due index read"
    );
}
