//! Writes that fail under a running scheduler: every path on which a write
//! can be refused (a claim, a batch of outcomes, a WAL checkpoint, a
//! PostgreSQL connection lost in the middle) must give back what it holds,
//! or leave it to a bounded reclaim, and the node must go on by itself once
//! writes succeed again: every task delivered at least once, none early.
//!
//! The refusals of claims, outcomes and checkpoints are injected (feature
//! `test-faults`: the statement fails as a full disk makes it fail, without
//! reaching the database); a real full disk is `disk_full.rs`. The lost
//! connections are real: PostgreSQL terminates the store's backends.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/backends.rs"]
mod backends;

#[path = "support/log.rs"]
mod log;

#[path = "support/deliveries.rs"]
mod deliveries;

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use backends::{Backend, Db};
use deliveries::Log;
use log::start_logging;
use settings::fast;
use ttw_durable::{Scheduler, Store, TaskId, TaskState};

/// Waits until the store counts `n` tasks done; fails the test with the
/// counts after `within`.
async fn wait_done(store: &Store, n: u64, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let counts = store.counts().await.unwrap();
        if counts.done == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} tasks done within {within:?}: {counts:?}",
            counts.done
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Schedules `n` tasks due `after` from now; their ids.
async fn schedule(store: &Store, n: usize, after: Duration) -> Vec<TaskId> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        ids.push(
            store
                .schedule(vec![i as u8; 64])
                .delay(after + Duration::from_millis(i as u64 % 20))
                .await
                .unwrap(),
        );
    }
    ids
}

/// Every task of `ids` delivered at least once, and none early.
fn assert_all_delivered(log: &Log, ids: &[TaskId]) -> HashMap<TaskId, usize> {
    let per_task = log.per_task();
    for id in ids {
        assert!(per_task.contains_key(id), "task {id} was never delivered");
    }
    log.assert_never_early();
    per_task
}

on_both! {
    /// Claims refused (as by a full disk) after their tasks fired: the
    /// tasks stay scheduled, their places under the limits are given back,
    /// and they are claimed again half a second later. Nothing was
    /// delivered for a refused claim, so each task runs exactly once.
    async fn refused_claims_are_tried_again_and_lose_nothing(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store).max_concurrency(4), &log).await;
        scheduler.fault_fail_claims(6);
        let ids = schedule(&store, 40, Duration::from_millis(300)).await;
        log.wait_for(40, Duration::from_secs(30)).await;
        assert_eq!(scheduler.fault_left().0, 0, "the claims did not all fail");
        let per_task = assert_all_delivered(&log, &ids);
        assert!(per_task.values().all(|&n| n == 1), "{per_task:?}");
        wait_done(&store, 40, Duration::from_secs(10)).await;
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Outcomes refused (as by a full disk): a batch of successes, the
    /// successes then written one by one, and failed attempts' retries.
    /// Each refused outcome leaves its task running until its lock runs
    /// out; then it is reclaimed and delivered again (at least once). The
    /// node gives back the places of the outcomes it could not write: with
    /// four places (eight claimed and unsettled at most), all 40 tasks are
    /// still delivered, and all end done.
    async fn refused_outcomes_are_redelivered_and_give_their_places_back(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let seen = log.clone();
        let scheduler = Scheduler::builder(store.clone())
            .window(Duration::from_secs(2))
            .catch_up_interval(Duration::from_millis(100))
            .heartbeat(Duration::from_millis(200))
            .lease_ttl(Duration::from_secs(2))
            .callback_timeout(Duration::from_secs(1))
            .lock_grace(Duration::from_millis(500))
            .backoff(ttw_durable::Backoff::exponential(
                Duration::from_millis(50),
                Duration::from_millis(200),
            ))
            .max_concurrency(4)
            .start(move |task| {
                seen.record(&task);
                // Every fifth task fails its first attempt: its retry is an
                // outcome too.
                let fail = task.payload()[0] % 5 == 0 && task.attempt() == 1;
                async move {
                    if fail {
                        Err("the first attempt fails".to_string())
                    } else {
                        Ok(())
                    }
                }
            })
            .await
            .unwrap();
        scheduler.fault_fail_outcomes(8);
        let ids = schedule(&store, 40, Duration::from_millis(300)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
        while store.counts().await.unwrap().done < 40 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for id in &ids {
            let info = store.get(*id).await.unwrap().unwrap();
            assert_eq!(
                info.state,
                TaskState::Done,
                "{info:?}; delivered {:?} times; stats {:?}",
                log.per_task().get(id),
                scheduler.stats()
            );
        }
        assert_eq!(scheduler.fault_left().1, 0, "the outcomes did not all fail");
        let per_task = assert_all_delivered(&log, &ids);
        let again = per_task.values().filter(|&&n| n > 1).count();
        assert!(again >= 1, "no task was delivered again: {per_task:?}");
        for id in &ids {
            let info = store.get(*id).await.unwrap().unwrap();
            assert_eq!(info.state, TaskState::Done, "{info:?}");
        }
        scheduler.shutdown().await.unwrap();
    }
}

/// WAL checkpoints refused (as by a full disk) while tasks with 8 KiB
/// payloads flow through an SQLite file: none of the checkpointer's
/// failures holds up a write (a failed checkpoint inside a write turn gives
/// the turn back), and once checkpoints succeed again the tasks scheduled
/// next are delivered as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_checkpoints_hold_up_no_write() {
    let db = Db::new(Backend::Sqlite, "refused_checkpoints");
    let store = db.open().await;
    let log = Log::default();
    let scheduler = start_logging(fast(&store), &log).await;
    const ASKED: u64 = 1_000_000;
    store.fault_fail_checkpoints(ASKED);
    let mut ids = Vec::new();
    for i in 0..300u32 {
        let mut payload = vec![0xab; 8 << 10];
        payload[..4].copy_from_slice(&i.to_be_bytes());
        ids.push(
            store
                .schedule(payload)
                .delay(Duration::from_millis(200 + u64::from(i) * 3))
                .await
                .unwrap(),
        );
    }
    log.wait_for(300, Duration::from_secs(30)).await;
    let failed = ASKED - store.fault_checkpoint_failures_left();
    assert!(failed >= 1, "no checkpoint was tried");
    store.fault_fail_checkpoints(0);
    ids.extend(schedule(&store, 50, Duration::from_millis(100)).await);
    log.wait_for(350, Duration::from_secs(30)).await;
    let per_task = assert_all_delivered(&log, &ids);
    assert!(per_task.values().all(|&n| n == 1), "{per_task:?}");
    wait_done(&store, 350, Duration::from_secs(10)).await;
    scheduler.shutdown().await.unwrap();
}

/// PostgreSQL connections lost in the middle of the work: every 150 ms for
/// 3 s the server terminates every backend of the scheduler's store (its
/// pool and its `LISTEN` connection), whatever statement each is in, a
/// batch of outcomes among them. Every task is delivered at least once,
/// none early, and all end done once the connections stay up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn lost_postgres_connections_lose_nothing() {
    let db = Db::new(Backend::Postgres, "lost_connections");
    let (url, schema) = db.postgres_parts().unwrap();
    let name = format!("ttw_lost_{}", std::process::id());
    let separator = if url.contains('?') { '&' } else { '?' };
    let tagged = format!("{url}{separator}application_name={name}");
    let store = Store::builder()
        .shards(16)
        .postgres_schema(schema)
        .connect_timeout(Duration::from_secs(20))
        .postgres(&tagged)
        .await
        .unwrap();
    let log = Log::default();
    let scheduler = start_logging(fast(&store), &log).await;
    // Scheduled through a store of its own, whose connections stay up.
    let client = db.open().await;
    let started = SystemTime::now();
    let ids = schedule(&client, 400, Duration::from_millis(300)).await;
    let mut more = Vec::new();
    let mut killer: sqlx::PgConnection = sqlx::Connection::connect(url).await.unwrap();
    let mut terminated = 0u64;
    for round in 0..20 {
        let killed: Vec<(bool,)> = sqlx::query_as(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&name)
        .fetch_all(&mut killer)
        .await
        .unwrap();
        terminated += killed.len() as u64;
        if round % 4 == 0 {
            more.extend(schedule(&client, 20, Duration::from_millis(50)).await);
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(terminated >= 10, "only {terminated} backends terminated");
    let all: Vec<TaskId> = ids.into_iter().chain(more).collect();
    wait_done(&client, all.len() as u64, Duration::from_secs(60)).await;
    assert_all_delivered(&log, &all);
    println!(
        "{} tasks, {} deliveries, {terminated} backends terminated, all done {:?} after the first was scheduled",
        all.len(),
        log.count(),
        started.elapsed().unwrap()
    );
    scheduler.shutdown().await.unwrap();
}
