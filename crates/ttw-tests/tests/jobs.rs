//! The durable layer's job-queue features on SQLite and PostgreSQL: tasks
//! by idempotency key (read, cancel, reschedule, replace while pending) and
//! scheduling inside the caller's own transaction (a task exists if and
//! only if the transaction commits).
//!
//! Real time, small windows, generous bounds, as in `durable.rs`.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/backends.rs"]
mod backends;

#[path = "support/log.rs"]
mod log;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use backends::{Backend, Db};
use log::{start_logging, Record};
use settings::{fast, wait_state};
use sqlx::Connection;
use tokio::sync::Notify;
use ttw_durable::{Backoff, NewTask, Redrive, Scheduled, TaskId, TaskState};

/// What the handler saw: task, payload, when it ran, when it was due.
type Seen = (TaskId, Vec<u8>, SystemTime, SystemTime);

type Log = log::Log<Seen>;

impl Record for Seen {
    fn record(task: &ttw_durable::Task) -> Self {
        (
            task.id(),
            task.payload().to_vec(),
            SystemTime::now(),
            task.run_at(),
        )
    }
}

on_both! {
    /// Cancel and reschedule by key act on a scheduled task only, as by id;
    /// an unknown key, a running or a finished task answer `false` and
    /// change nothing.
    async fn cancel_and_reschedule_by_key(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let far = Duration::from_secs(60);
        let moved = store.schedule("m").idempotency_key("move-me").delay(far).await.unwrap();
        let gone = store.schedule("c").idempotency_key("cancel-me").delay(Duration::from_millis(300)).await.unwrap();

        assert!(store.cancel_by_key("cancel-me").await.unwrap());
        assert!(!store.cancel_by_key("cancel-me").await.unwrap(), "cancelled already");
        assert!(!store.cancel_by_key("no-such-key").await.unwrap());
        assert!(!store.reschedule_by_key("no-such-key", SystemTime::now()).await.unwrap());
        let new_time = SystemTime::now() + Duration::from_millis(500);
        assert!(store.reschedule_by_key("move-me", new_time).await.unwrap());

        log.wait_for(1, Duration::from_secs(10)).await;
        wait_state(&store, moved, TaskState::Done, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let seen = log.seen();
        assert_eq!(seen.len(), 1, "the cancelled task never runs");
        assert_eq!(seen[0].0, moved);
        assert!(seen[0].2 >= new_time, "never before its new time");

        // Finished tasks keep their keys, and are left alone.
        assert!(!store.cancel_by_key("move-me").await.unwrap());
        assert!(!store.reschedule_by_key("move-me", SystemTime::now() + far).await.unwrap());
        assert_eq!(store.get_by_key("move-me").await.unwrap().unwrap().state, TaskState::Done);
        assert_eq!(store.get_by_key("cancel-me").await.unwrap().unwrap().id, gone);
        assert!(store.get_by_key("no-such-key").await.unwrap().is_none());
        let err = store.reschedule_by_key("move-me", SystemTime::UNIX_EPOCH - far).await.unwrap_err();
        assert!(err.is_out_of_range(), "{err}");
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// The debounce: each event replaces the one pending task, pushing it
    /// back and giving it the latest payload; one delivery follows the last
    /// event by the delay, carrying its payload.
    async fn replace_pending_debounces(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let delay = Duration::from_millis(400);
        let mut answers = Vec::new();
        let mut last = SystemTime::now();
        for i in 0..6 {
            last = SystemTime::now();
            answers.push(
                store
                    .schedule(format!("event {i}"))
                    .idempotency_key("debounce:user-7")
                    .delay(delay)
                    .replace_pending()
                    .submit()
                    .await
                    .unwrap(),
            );
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        let id = answers[0].id();
        assert!(answers[0].is_created());
        assert!(answers[1..].iter().all(|a| *a == Scheduled::Replaced(id)), "{answers:?}");

        log.wait_for(1, Duration::from_secs(10)).await;
        wait_state(&store, id, TaskState::Done, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let seen = log.seen();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].1, b"event 5");
        assert!(seen[0].2 >= last + delay, "ran before the last event's delay");

        // Done now: the key's task is no longer pending, so a replacement
        // changes nothing and creates nothing.
        let after = store.schedule("late").idempotency_key("debounce:user-7").replace_pending().submit().await.unwrap();
        assert_eq!(after, Scheduled::Existing(id));
        assert_eq!(store.get(id).await.unwrap().unwrap().payload, b"event 5");
        assert_eq!(store.counts().await.unwrap().scheduled, 0);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A replacement that gives no time keeps the pending task's time and
    /// attempt limit; one that gives them sets them. A replacement without
    /// a key is refused and writes nothing.
    async fn replace_pending_changes_only_what_it_is_given(db: Db) {
        let store = db.open().await;
        let at = SystemTime::now() + Duration::from_secs(3600);
        let id = store.schedule("v1").idempotency_key("k").at(at).max_attempts(4).await.unwrap();
        let before = store.get(id).await.unwrap().unwrap();

        let r = store.schedule("v2").idempotency_key("k").replace_pending().submit().await.unwrap();
        assert_eq!(r, Scheduled::Replaced(id));
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(info.payload, b"v2");
        assert_eq!(info.run_at, before.run_at, "no time given: the time is kept");
        assert_eq!(info.max_attempts, Some(4));

        let later = at + Duration::from_secs(60);
        store.schedule("v3").idempotency_key("k").at(later).max_attempts(2).replace_pending().await.unwrap();
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(info.payload, b"v3");
        assert!(info.run_at > before.run_at);
        assert_eq!(info.max_attempts, Some(2));

        let err = store.schedule("no key").replace_pending().await.unwrap_err();
        assert!(err.is_invalid_task(), "{err}");
        assert!(err.to_string().contains("idempotency key"), "{err}");
        assert_eq!(store.counts().await.unwrap().scheduled, 1);
    }
}

on_both! {
    /// A task claimed and running is not pending: a replacement leaves it
    /// alone (the attempt runs with the payload it was claimed with) and
    /// answers `Existing`; so do cancel and reschedule by key.
    async fn a_running_task_is_not_replaced(db: Db) {
        let store = db.open().await;
        let release = Arc::new(Notify::new());
        let started = Arc::new(Notify::new());
        let payloads = Arc::new(Mutex::new(Vec::new()));
        let scheduler = {
            let (release, started, payloads) = (release.clone(), started.clone(), payloads.clone());
            fast(&store)
                .start(move |task| {
                    let (release, started, payloads) = (release.clone(), started.clone(), payloads.clone());
                    async move {
                        payloads.lock().unwrap().push(task.payload().to_vec());
                        started.notify_one();
                        release.notified().await;
                        Ok::<_, String>(())
                    }
                })
                .await
                .unwrap()
        };
        let id = store.schedule("original").idempotency_key("job").await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), started.notified()).await.expect("the task starts");
        assert_eq!(store.get(id).await.unwrap().unwrap().state, TaskState::Running);

        let r = store.schedule("newer").idempotency_key("job").replace_pending().submit().await.unwrap();
        assert_eq!(r, Scheduled::Existing(id));
        assert!(!store.cancel_by_key("job").await.unwrap());
        assert!(!store.reschedule_by_key("job", SystemTime::now()).await.unwrap());
        assert_eq!(store.get(id).await.unwrap().unwrap().payload, b"original");

        release.notify_one();
        wait_state(&store, id, TaskState::Done, Duration::from_secs(10)).await;
        assert_eq!(*payloads.lock().unwrap(), vec![b"original".to_vec()]);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Regression: a task waiting for its retry was taken for pending. After
    /// its first attempt failed, a replacement answered `Replaced`, the
    /// stored payload became the new one, the backoff was skipped (the
    /// retry ran seconds early) and the retry was delivered with the new
    /// payload, where the docs promise that retries go on with the payload
    /// the attempt was claimed with. Now it answers `Existing` and changes
    /// nothing: the retry runs at its backoff's time with the original.
    async fn a_task_waiting_for_its_retry_is_not_replaced(db: Db) {
        let store = db.open().await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let scheduler = {
            let seen = seen.clone();
            fast(&store)
                .backoff(Backoff::exponential(Duration::from_secs(2), Duration::from_secs(2)))
                .start(move |task| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push((task.payload().to_vec(), task.attempt(), SystemTime::now()));
                        if task.attempt() == 1 {
                            Err("the first attempt fails".to_string())
                        } else {
                            Ok(())
                        }
                    }
                })
                .await
                .unwrap()
        };
        let id = store.schedule("original").idempotency_key("retry-me").await.unwrap();
        // Wait for the failed first attempt's outcome: scheduled again, for
        // its retry.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let waiting = loop {
            let info = store.get(id).await.unwrap().unwrap();
            if info.attempts == 1 && info.state == TaskState::Scheduled {
                break info;
            }
            assert!(tokio::time::Instant::now() < deadline, "no retry scheduled: {info:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };

        let r = store.schedule("newer").idempotency_key("retry-me").replace_pending().submit().await.unwrap();
        assert_eq!(r, Scheduled::Existing(id));
        let after = store.get(id).await.unwrap().unwrap();
        assert_eq!(after.payload, b"original");
        assert_eq!(after.run_at, waiting.run_at, "the retry's time is kept");
        assert_eq!(after.state, TaskState::Scheduled);

        wait_state(&store, id, TaskState::Done, Duration::from_secs(15)).await;
        let seen = seen.lock().unwrap().clone();
        let attempts: Vec<(Vec<u8>, u32)> = seen.iter().map(|(p, a, _)| (p.clone(), *a)).collect();
        assert_eq!(attempts, vec![(b"original".to_vec(), 1), (b"original".to_vec(), 2)]);
        assert!(seen[1].2 >= waiting.run_at, "the retry ran before its backoff's time");
        scheduler.shutdown().await.unwrap();
    }
}

/// Schedules a task, and a batch of two, inside a transaction on the
/// caller's connection `$conn` next to a business row, then commits or
/// rolls back; evaluates to the ids scheduled.
macro_rules! in_transaction {
    ($db:expr, $store:expr, $conn:expr, $commit:expr, $order:expr) => {{
        let mut tx = $conn.begin().await.unwrap();
        sqlx::query(&format!(
            "INSERT INTO {} (id) VALUES ({})",
            $db.qualified("orders"),
            $order
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        let one = $store
            .schedule(format!("order {}", $order))
            .delay(Duration::from_millis(300))
            .idempotency_key(format!("order:{}", $order))
            .submit_in(&mut *tx)
            .await
            .unwrap();
        let batch = $store
            .schedule_batch_in(
                &mut *tx,
                [
                    NewTask::new("batch a"),
                    NewTask::new("batch b").delay(Duration::from_millis(200)),
                ],
            )
            .await
            .unwrap();
        if $commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        let mut ids = vec![one.id()];
        ids.extend(batch.iter().map(|s| s.id()));
        assert!(one.is_created() && batch.iter().all(|s| s.is_created()));
        ids
    }};
}

on_both! {
    /// Scheduling in the caller's transaction: rolled back, neither the
    /// business row nor any task exists and nothing is delivered;
    /// committed, both exist and each task is delivered once, on time. The
    /// caller's connection has its own `search_path`: the crate names its
    /// tables itself.
    async fn a_task_scheduled_in_a_transaction_exists_iff_it_commits(db: Db) {
        let store = db.open().await;
        db.exec("CREATE TABLE orders (id BIGINT PRIMARY KEY)").await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let started = SystemTime::now();
        let (rolled_back, committed) = match db.backend {
            Backend::Sqlite => {
                let mut conn = db.caller_sqlite().await;
                (in_transaction!(db, store, conn, false, 1), in_transaction!(db, store, conn, true, 2))
            }
            Backend::Postgres => {
                let mut conn = db.caller_postgres().await;
                (in_transaction!(db, store, conn, false, 1), in_transaction!(db, store, conn, true, 2))
            }
        };
        log.wait_for(3, Duration::from_secs(10)).await;
        // Long enough for a rolled-back task to have come due and fired.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let seen = log.seen();
        assert_eq!(seen.len(), 3, "only the committed tasks run, once each: {seen:?}");
        let mut ran: Vec<TaskId> = seen.iter().map(|s| s.0).collect();
        ran.sort();
        let mut want = committed.clone();
        want.sort();
        assert_eq!(ran, want);
        assert!(seen.iter().all(|s| s.2 >= s.3 && s.3 >= started), "never early");
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM orders").await, 1);
        assert_eq!(db.query_i64("SELECT MIN(id) FROM orders").await, 2);
        let counts = store.counts().await.unwrap();
        assert_eq!((counts.scheduled, counts.running, counts.done), (0, 0, 3));
        assert!(store.get_by_key("order:1").await.unwrap().is_none(), "rolled back: {rolled_back:?}");
        assert!(store.get_by_key("order:2").await.unwrap().is_some());
        scheduler.shutdown().await.unwrap();
    }
}

/// A caller's connection to the other backend is refused before anything
/// is written, both ways round (which needs PostgreSQL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn a_connection_to_the_other_backend_is_refused() {
    let pg = Db::new(Backend::Postgres, "other_backend_pg");
    let lite = Db::new(Backend::Sqlite, "other_backend_lite");
    let (pg_store, lite_store) = (pg.open().await, lite.open().await);
    let mut pg_conn = pg.caller_postgres().await;
    let mut lite_conn = lite.caller_sqlite().await;

    let err = pg_store
        .schedule("x")
        .submit_in(&mut lite_conn)
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(err.to_string().contains("connection is to SQLite"), "{err}");
    let err = lite_store
        .schedule_batch_in(&mut pg_conn, [NewTask::new("x")])
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(
        err.to_string().contains("connection is to PostgreSQL"),
        "{err}"
    );
    assert_eq!(pg_store.counts().await.unwrap().scheduled, 0);
    assert_eq!(lite_store.counts().await.unwrap().scheduled, 0);
}

on_both! {
    /// A bulk redrive takes at most its limit, oldest ids first, resets the
    /// attempts, and spreads the due times over its span in groups of at
    /// most `REDRIVE_GROUP`: 1,100 of 1,200 dead tasks over an hour are
    /// three due times (500, 500, 100), the last 1000/1100 of the hour on.
    async fn a_bulk_redrive_spreads_its_due_times_in_groups(db: Db) {
        let store = db.open().await;
        let tasks = (0..1200).map(|i| NewTask::new(format!("t{i}")).delay(Duration::from_secs(3600)));
        store.schedule_batch(tasks).await.unwrap();
        db.exec("UPDATE ttw_tasks SET state = 'dead', attempts = 3, last_error = 'boom'").await;
        let redrive = Redrive::dead().limit(1100).spread(Duration::from_secs(3600));
        assert_eq!(store.redrive_many(&redrive).await.unwrap(), 1100);
        let counts = store.counts().await.unwrap();
        assert_eq!((counts.scheduled, counts.dead), (1100, 100));
        assert_eq!(db.query_i64("SELECT MIN(id) FROM ttw_tasks WHERE state = 'dead'").await,
            db.query_i64("SELECT MAX(id) FROM ttw_tasks WHERE state = 'scheduled'").await + 1,
            "oldest ids first");
        assert_eq!(db.query_i64("SELECT COUNT(DISTINCT run_at) FROM ttw_tasks WHERE state = 'scheduled'").await, 3);
        assert_eq!(db.query_i64(
            "SELECT MAX(c) FROM (SELECT COUNT(*) AS c FROM ttw_tasks WHERE state = 'scheduled' GROUP BY run_at) g").await, 500);
        assert_eq!(db.query_i64("SELECT MAX(run_at) - MIN(run_at) FROM ttw_tasks WHERE state = 'scheduled'").await,
            3_600_000 * 1000 / 1100);
        assert_eq!(db.query_i64("SELECT MAX(attempts) FROM ttw_tasks WHERE state = 'scheduled'").await, 0);
        // Only finished states.
        let running = Redrive::dead().state(TaskState::Running);
        assert!(store.redrive_many(&running).await.unwrap_err().is_config());
        // Again: the remaining 100, all due now (no spread).
        assert_eq!(store.redrive_many(&Redrive::dead()).await.unwrap(), 100);
        assert_eq!(store.counts().await.unwrap().dead, 0);
    }
}

on_both! {
    /// Finished tasks leave the hot table: a task done or cancelled moves
    /// to `ttw_history`, so `ttw_tasks` holds only what is pending (and
    /// dead). `get`, `get_by_key` and the counts still show them; their
    /// keys stay taken, to a single schedule, a batch, a replacement and a
    /// schedule in the caller's transaction alike (each insert finds the
    /// key in the history after its own insert and takes its task back);
    /// and a redrive brings done tasks back to run again.
    async fn finished_tasks_leave_the_hot_table_and_keep_their_keys(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let done_a = store.schedule("a").idempotency_key("k:a").await.unwrap();
        let done_b = store.schedule("b").await.unwrap();
        let cancelled = store.schedule("c").idempotency_key("k:c").delay(Duration::from_secs(3600)).await.unwrap();
        assert!(store.cancel_by_key("k:c").await.unwrap());
        log.wait_for(2, Duration::from_secs(10)).await;
        wait_state(&store, done_a, TaskState::Done, Duration::from_secs(5)).await;
        wait_state(&store, done_b, TaskState::Done, Duration::from_secs(5)).await;

        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_tasks").await, 0, "the hot table is empty");
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_history WHERE state = 'done'").await, 2);
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_history WHERE state = 'cancelled'").await, 1);
        assert_eq!(store.get_by_key("k:c").await.unwrap().unwrap().state, TaskState::Cancelled);
        let counts = store.counts().await.unwrap();
        assert_eq!((counts.done, counts.cancelled, counts.scheduled), (2, 1, 0));

        // The keys are still taken, whichever way a task asks for them.
        let later = Duration::from_secs(3600);
        assert_eq!(store.schedule("a2").idempotency_key("k:a").delay(later).await.unwrap(), done_a);
        let batch = store
            .schedule_batch([
                NewTask::new("c2").idempotency_key("k:c").delay(later),
                NewTask::new("n").idempotency_key("k:new").delay(later),
                NewTask::new("a3").idempotency_key("k:a").delay(later),
            ])
            .await
            .unwrap();
        assert_eq!(batch[0], Scheduled::Existing(cancelled));
        assert!(batch[1].is_created());
        assert_eq!(batch[2], Scheduled::Existing(done_a));
        let replaced = store.schedule("a4").idempotency_key("k:a").replace_pending().submit().await.unwrap();
        assert_eq!(replaced, Scheduled::Existing(done_a));
        let in_tx = match db.backend {
            Backend::Sqlite => {
                let mut conn = db.caller_sqlite().await;
                let mut tx = conn.begin().await.unwrap();
                let r = store.schedule("a5").idempotency_key("k:a").delay(later).submit_in(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
                r
            }
            Backend::Postgres => {
                let mut conn = db.caller_postgres().await;
                let mut tx = conn.begin().await.unwrap();
                let r = store.schedule("a5").idempotency_key("k:a").delay(later).submit_in(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
                r
            }
        };
        assert_eq!(in_tx, Scheduled::Existing(done_a));
        // Only the one new task is in the hot table; nothing ran twice.
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_tasks").await, 1);
        assert_eq!(store.get(done_a).await.unwrap().unwrap().payload, b"a");

        // Redriven, the done tasks come back from the history, run again
        // (at once, so they may be back in the history by the next line)
        // and return to the history.
        let redrive = Redrive::dead().state(TaskState::Done);
        assert_eq!(store.redrive_many(&redrive).await.unwrap(), 2);
        log.wait_for(4, Duration::from_secs(10)).await;
        wait_state(&store, done_a, TaskState::Done, Duration::from_secs(5)).await;
        wait_state(&store, done_b, TaskState::Done, Duration::from_secs(5)).await;
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_history").await, 3);
        let ran: Vec<TaskId> = log.seen().iter().map(|s| s.0).collect();
        assert_eq!(ran.iter().filter(|id| **id == done_a).count(), 2, "{ran:?}");
        scheduler.shutdown().await.unwrap();
    }
}
