//! The durable layer on SQLite and PostgreSQL, continued from `durable.rs`:
//! the regressions and edge cases of delivery (a schedule that waited for
//! the write lock, a cut `LISTEN` connection, bad database addresses, a
//! scheduler dropped outside its runtime, a delivery past its deadline, the
//! stream's settling) and bad input.
//!
//! These run in real time (a database's clock cannot be paused), with small
//! windows and timeouts and generous bounds.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/backends.rs"]
mod backends;

#[path = "support/log.rs"]
mod log;

#[path = "support/deliveries.rs"]
mod deliveries;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use backends::{Backend, Db};
use deliveries::Log;
use futures::StreamExt;
use log::start_logging;
use settings::{fast, wait_state};
use ttw_durable::{
    Backoff, NewTask, Scheduled, Scheduler, SchedulerBuilder, Store, TaskId, TaskState,
    MAX_IDEMPOTENCY_KEY, MAX_PAYLOAD, MAX_RUN_AT,
};

/// Regression: a schedule from another process that waited for SQLite's
/// write lock longer than the catch-up poll's slack was stamped with the
/// time it was *called*, seconds before it committed. Every poll after the
/// commit looked only at rows changed since a later time, so the task was
/// found by the next window reload instead: half a window late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_that_waited_for_the_write_lock_is_found_by_the_poll() {
    let db = Db::new(Backend::Sqlite, "waited_for_the_write_lock");
    let store = db.open().await;
    let log = Log::default();
    // A long window, so only the catch-up poll (every 100 ms, looking 1.2 s
    // back) can find the task in time; leases long enough to outlive the
    // lock, so no takeover reloads the window either.
    let builder = fast(&store)
        .window(Duration::from_secs(120))
        .lease_ttl(Duration::from_secs(30))
        .heartbeat(Duration::from_secs(10));
    let scheduler = start_logging(builder, &log).await;
    let other = db.open().await;
    let lock = db.hold_write_lock().await.unwrap();
    let schedule = tokio::spawn(async move {
        other
            .schedule(b"waited".to_vec())
            .delay(Duration::from_millis(3_500))
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    lock.release().await;
    let id = schedule.await.unwrap();
    log.wait_for(1, Duration::from_secs(10)).await;
    let seen = log.0.lock().unwrap().clone();
    assert_eq!(seen[0].0, id);
    let late = seen[0].2.duration_since(seen[0].3).unwrap();
    assert!(late < Duration::from_millis(1_500), "{late:?} late");
    scheduler.shutdown().await.unwrap();
}

/// PostgreSQL: while its `LISTEN` connection is up a scheduler's catch-up
/// poll rests, so a connection cut by the server must be noticed and
/// opened again, and the window loaded, or a change whose notification was
/// lost meanwhile would wait for the next window load. Here the poll is an
/// hour apart and the window load ten minutes, so only that path can
/// deliver the task written while nobody listened (a row inserted by hand,
/// which notifies nobody).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn a_cut_listen_connection_is_opened_again_and_nothing_is_missed() {
    let db = Db::new(Backend::Postgres, "cut_listen");
    let store = db.open().await;
    let log = Log::default();
    let builder = fast(&store)
        .window(Duration::from_secs(1200))
        .catch_up_interval(Duration::from_secs(3600))
        .lease_ttl(Duration::from_secs(30))
        .heartbeat(Duration::from_secs(5));
    let scheduler = start_logging(builder, &log).await;
    // Another store: its schedules reach the scheduler only by NOTIFY,
    // sent by the insert itself.
    let other = db.open().await;
    let heard = other
        .schedule(b"heard".to_vec())
        .delay(Duration::from_millis(300))
        .await
        .unwrap();
    log.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(log.0.lock().unwrap()[0].0, heard);
    db.exec(
        "INSERT INTO ttw_tasks (run_at, payload, created_at, updated_at) VALUES \
         (CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) + 500, convert_to('missed', 'UTF8'), 0, 0)",
    )
    .await;
    let cut = db
        .query_i64(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE query LIKE 'LISTEN %' AND query LIKE '%' || current_schema() || '%') AS t",
        )
        .await;
    assert_eq!(cut, 1, "the scheduler's LISTEN connection");
    log.wait_for(2, Duration::from_secs(15)).await;
    let missed = log.0.lock().unwrap()[1].0;
    assert_eq!(store.get(missed).await.unwrap().unwrap().payload, b"missed");
    // And the connection opened again hears the next schedule.
    other
        .schedule(b"heard again".to_vec())
        .delay(Duration::from_millis(300))
        .await
        .unwrap();
    log.wait_for(3, Duration::from_secs(10)).await;
    scheduler.shutdown().await.unwrap();
}

on_both! {
    /// Done and cancelled tasks are deleted after the retention; dead ones
    /// are kept.
    async fn retention_sweeps_finished_tasks(db: Db) {
        let store = db.open().await;
        let scheduler = fast(&store)
            .window(Duration::from_millis(200))
            .retention(Duration::from_millis(100))
            .max_attempts(1)
            .start(|task| async move { if task.payload() == b"bad" { Err("bad") } else { Ok(()) } })
            .await
            .unwrap();
        let done = store.schedule(b"good".to_vec()).await.unwrap();
        let dead = store.schedule(b"bad".to_vec()).await.unwrap();
        let cancelled = store.schedule(b"later".to_vec()).delay(Duration::from_secs(3600)).await.unwrap();
        assert!(store.cancel(cancelled).await.unwrap());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while store.get(done).await.unwrap().is_some() || store.get(cancelled).await.unwrap().is_some() {
            assert!(tokio::time::Instant::now() < deadline, "not swept");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_state(&store, dead, TaskState::Dead, Duration::from_secs(5)).await;
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Bad input is an error, never a panic, and stores nothing.
    async fn bad_input_is_an_error(db: Db) {
        let store = db.open().await;
        let err = store.schedule(vec![0; MAX_PAYLOAD + 1]).await.unwrap_err();
        assert!(err.is_payload_too_large(), "{err}");
        store.schedule(vec![0; MAX_PAYLOAD]).delay(Duration::from_secs(3600)).await.unwrap();
        let err = store.schedule(vec![]).at(SystemTime::UNIX_EPOCH - Duration::from_secs(1)).await.unwrap_err();
        assert!(err.is_out_of_range(), "{err}");
        let err = store.schedule(vec![]).at(SystemTime::UNIX_EPOCH + MAX_RUN_AT + Duration::from_millis(1)).await.unwrap_err();
        assert!(err.is_out_of_range(), "{err}");
        let err = store.schedule(vec![]).delay(Duration::MAX).await.unwrap_err();
        assert!(err.is_out_of_range(), "{err}");
        let far = store.schedule(vec![]).at(SystemTime::UNIX_EPOCH + MAX_RUN_AT).await.unwrap();
        assert_eq!(store.get(far).await.unwrap().unwrap().run_at, SystemTime::UNIX_EPOCH + MAX_RUN_AT);
        assert_eq!(store.counts().await.unwrap().scheduled, 2);
        assert!(store.get(TaskId::new(i64::MAX)).await.unwrap().is_none());

        let err = db.try_open_with(Store::builder().shards(8)).await.unwrap_err();
        assert!(err.is_config(), "{err}");
        let err = Store::builder().shards(0).sqlite_in_memory().await.unwrap_err();
        assert!(err.is_config(), "{err}");
        let err = Scheduler::builder(store.clone()).max_concurrency(0).start(|_t| async { Ok::<_, String>(()) }).await.unwrap_err();
        assert!(err.is_config(), "{err}");
    }
}

on_both! {
    /// Regression: an empty idempotency key was a real key, so an unrelated
    /// task scheduled with one was silently dropped and the first task's id
    /// came back; keys had no length limit (1 MiB accepted); and
    /// `Schedule::max_attempts(0)` quietly became 1 where
    /// `SchedulerBuilder::max_attempts(0)` is an error. Each is refused now,
    /// storing nothing, and `submit` tells a created task from one its key
    /// found.
    async fn keys_and_attempt_limits_are_checked(db: Db) {
        let store = db.open().await;
        let err = store.schedule(b"a".to_vec()).idempotency_key("").await.unwrap_err();
        assert!(err.is_invalid_key(), "{err}");
        let long = "k".repeat(MAX_IDEMPOTENCY_KEY + 1);
        let err = store.schedule(b"a".to_vec()).idempotency_key(long).await.unwrap_err();
        assert!(err.is_invalid_key(), "{err}");
        let err = store.schedule(b"a".to_vec()).max_attempts(0).await.unwrap_err();
        assert!(err.is_invalid_task() && err.invalid_field() == Some("max_attempts"), "{err}");
        assert_eq!(store.counts().await.unwrap().scheduled, 0);

        let longest = "k".repeat(MAX_IDEMPOTENCY_KEY);
        let first = store.schedule(b"a".to_vec()).idempotency_key(longest.clone()).submit().await.unwrap();
        let again = store.schedule(b"b".to_vec()).idempotency_key(longest).submit().await.unwrap();
        assert!(first.is_created());
        assert_eq!(again, Scheduled::Existing(first.id()));
        let other = store.schedule(b"c".to_vec()).idempotency_key("other").submit().await.unwrap();
        assert!(other.is_created() && other.id() != first.id());
        assert_eq!(store.counts().await.unwrap().scheduled, 2);
        assert_eq!(store.get(first.id()).await.unwrap().unwrap().payload, b"a");
    }
}

on_both! {
    /// Regression: `SchedulerBuilder::callback_timeout(Duration::MAX)` was
    /// accepted, then the first claim panicked in a crate task ("overflow
    /// when adding duration to instant"): the task stayed scheduled with no
    /// attempt forever and the node's in-flight count stayed at 1. Every
    /// duration setting now takes any `Duration` (past 30 years it means
    /// never) or is refused by `start`; none panics.
    async fn every_duration_setting_takes_duration_max(db: Db) {
        let store = db.open().await;
        type Setting = fn(SchedulerBuilder) -> SchedulerBuilder;
        let settings: [(&str, Setting); 8] = [
            ("callback_timeout", |b| b.callback_timeout(Duration::MAX)),
            ("lock_grace", |b| b.lock_grace(Duration::MAX)),
            ("window", |b| b.window(Duration::MAX)),
            ("catch_up_interval", |b| b.catch_up_interval(Duration::MAX)),
            ("retention", |b| b.retention(Duration::MAX)),
            ("lease_ttl", |b| b.lease_ttl(Duration::MAX)),
            ("backoff", |b| b.backoff(Backoff::exponential(Duration::MAX, Duration::MAX))),
            ("heartbeat and lease_ttl", |b| b.heartbeat(Duration::MAX).lease_ttl(Duration::MAX)),
        ];
        for (name, setting) in settings {
            let log = Log::default();
            let handler_log = log.clone();
            let started = setting(fast(&store).node_id(name))
                .start(move |task| {
                    handler_log.record(&task);
                    async move {
                        // The first attempt fails, so the backoff is used.
                        if task.attempt() == 1 { Err("once") } else { Ok(()) }
                    }
                })
                .await;
            let scheduler = match started {
                Ok(scheduler) => scheduler,
                Err(err) => {
                    assert!(err.is_config(), "{name}: {err}");
                    continue;
                }
            };
            let id = store.schedule(name.as_bytes().to_vec()).await.unwrap();
            log.wait_for(1, Duration::from_secs(20)).await;
            let stats = scheduler.stats();
            assert_eq!(stats.delivered, 1, "{name}: {stats:?}");
            let info = store.get(id).await.unwrap().unwrap();
            assert_eq!(info.attempts, 1, "{name}");
            if name != "backoff" {
                log.wait_for(2, Duration::from_secs(20)).await;
                wait_state(&store, id, TaskState::Done, Duration::from_secs(20)).await;
            }
            scheduler.shutdown().await.unwrap();
        }
    }
}

on_both! {
    /// A database written by a newer version of the crate (a migration this
    /// build does not know) is refused, not altered.
    async fn schema_from_a_newer_version_is_refused(db: Db) {
        let store = db.open().await;
        drop(store);
        db.exec(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (999999, 'from the future', true, X'00', 0)"
                .replace("X'00'", if db.backend == Backend::Sqlite { "X'00'" } else { "'\\x00'::bytea" })
                .as_str(),
        )
        .await;
        let err = db.try_open_with(Store::builder()).await.unwrap_err();
        assert!(err.is_schema_too_new(), "{err}");
    }
}

/// Regression: a malformed PostgreSQL URL or one of another scheme waited
/// out the 10 s connect timeout and then said only "pool timed out while
/// waiting for an open connection" (or "relative URL without a base"), and
/// an SQLite path in a missing directory did not name the path. Now a URL
/// that cannot be PostgreSQL's is refused at once, a failed connection
/// names its cause and the server, and a missing directory is named.
#[tokio::test]
async fn a_bad_database_address_fails_fast_and_names_the_cause() {
    for url in ["not a url", "mysql://root@127.0.0.1/db", "postgres:/nohost"] {
        let started = std::time::Instant::now();
        let err = Store::postgres(url).await.unwrap_err();
        assert!(err.is_config(), "{url}: {err}");
        assert!(err.to_string().contains("postgres://"), "{url}: {err}");
        // Refused before any connect: well within the 10 s connect
        // timeout it used to wait out.
        assert!(started.elapsed() < Duration::from_secs(5), "{url}");
    }
    // A port nobody listens on: refused at once, not after the timeout.
    let started = std::time::Instant::now();
    let err = Store::builder()
        .connect_timeout(Duration::from_millis(500))
        .postgres("postgres://nobody@127.0.0.1:1/none")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(err.is_database(), "{text}");
    assert!(
        text.contains("127.0.0.1:1") && text.contains("refused"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let err = Store::sqlite("/nonexistent-dir/for/sure/tasks.db")
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(err.is_database(), "{text}");
    assert!(
        text.contains("/nonexistent-dir/for/sure/tasks.db") && text.contains("does not exist"),
        "{text}"
    );
}

on_both! {
    /// Regression: the in-process listener subscribed to new schedules only
    /// once its task first ran, so a task scheduled right after `start`
    /// returned could miss the wheel and wait for the catch-up poll.
    async fn scheduled_right_after_start_is_not_left_to_the_poll(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store).catch_up_interval(Duration::from_secs(30)), &log).await;
        let id = store.schedule(b"now".to_vec()).await.unwrap();
        log.wait_for(1, Duration::from_secs(2)).await;
        assert_eq!(log.0.lock().unwrap()[0].0, id);
        scheduler.shutdown().await.unwrap();
    }
}

/// Regression: dropping a scheduler after its runtime had shut down
/// panicked, because the drop spawned a task to stop the wheel.
#[test]
fn dropping_a_scheduler_outside_a_runtime_does_not_panic() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let scheduler = runtime.block_on(async {
        let store = Store::sqlite_in_memory().await.unwrap();
        Scheduler::builder(store)
            .start(|_task| async { Ok::<_, String>(()) })
            .await
            .unwrap()
    });
    drop(runtime);
    drop(scheduler);
}

on_both! {
    /// Tasks due beyond the window cost no memory: only those inside it
    /// wait in the wheel.
    async fn only_the_window_is_in_memory(db: Db) {
        let store = db.open().await;
        for _ in 0..500 {
            store.schedule(vec![]).delay(Duration::from_secs(365 * 24 * 3600)).await.unwrap();
        }
        for _ in 0..10 {
            store.schedule(vec![]).delay(Duration::from_secs(60)).await.unwrap();
        }
        let log = Log::default();
        let scheduler = start_logging(fast(&store).window(Duration::from_secs(120)), &log).await;
        assert_eq!(scheduler.wheel_stats().await.unwrap().pending, 10);
        scheduler.shutdown().await.unwrap();
    }
}

/// Regression: a delivery's timeout was counted from when its supervisor
/// first ran, not from the claim, so on a runtime too busy to start it in
/// time a handler could start after its task's lock had run out, while the
/// task was being reclaimed and delivered again. Here the first handler
/// blocks the only runtime thread past the other task's deadline: the other
/// task's first attempt must not run at all (it fails and is retried).
#[tokio::test(flavor = "current_thread")]
async fn a_delivery_never_starts_after_its_deadline() {
    let db = Db::new(Backend::Sqlite, "never_starts_late");
    let store = db.open().await;
    let at = SystemTime::now() + Duration::from_millis(500);
    let a = store.schedule(b"a".to_vec()).at(at).await.unwrap();
    let b = store.schedule(b"b".to_vec()).at(at).await.unwrap();
    let runs: Arc<Mutex<Vec<(TaskId, u32)>>> = Arc::default();
    let r = runs.clone();
    let scheduler = fast(&store)
        .callback_timeout(Duration::from_millis(300))
        .start(move |task| {
            let r = r.clone();
            async move {
                let first = {
                    let mut runs = r.lock().unwrap();
                    runs.push((task.id(), task.attempt()));
                    runs.len() == 1
                };
                if first {
                    // Starve the runtime, as a blocking handler or an
                    // overloaded machine would.
                    std::thread::sleep(Duration::from_millis(600));
                }
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    wait_state(&store, a, TaskState::Done, Duration::from_secs(10)).await;
    wait_state(&store, b, TaskState::Done, Duration::from_secs(10)).await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0].1, 1, "{runs:?}");
    assert_eq!(runs[1].1, 2, "the starved attempt ran late: {runs:?}");
    let info = store.get(runs[1].0).await.unwrap().unwrap();
    assert!(info
        .last_error
        .unwrap()
        .contains("not started before its deadline"));
    scheduler.shutdown().await.unwrap();
}

/// Regression: the stream skipped a delivery only once its supervisor had
/// dropped the settle channel, which happens when the supervisor's timer
/// task gets to run. A consumer that read at (or after) the deadline before
/// that moment, here on a runtime the consumer itself kept busy, was handed
/// the attempt the supervisor was about to fail: it worked on a task whose
/// retry was already on its way. A delivery past its deadline is now
/// skipped (and so failed) whoever notices first.
#[tokio::test(flavor = "current_thread")]
async fn a_delivery_read_at_its_deadline_is_not_handed_out() {
    let db = Db::new(Backend::Sqlite, "read_at_deadline");
    let store = db.open().await;
    let (scheduler, mut deliveries) = fast(&store)
        .callback_timeout(Duration::from_millis(300))
        .backoff(Backoff::exponential(
            Duration::from_millis(200),
            Duration::from_millis(200),
        ))
        .start_stream()
        .await
        .unwrap();
    let id = store.schedule(b"x".to_vec()).await.unwrap();
    wait_state(&store, id, TaskState::Running, Duration::from_secs(5)).await;
    // Let the supervisor put the delivery into the stream.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The consumer keeps the only runtime thread busy past the deadline,
    // then reads.
    std::thread::sleep(Duration::from_millis(400));
    let d = deliveries.next().await.unwrap();
    assert_eq!(
        (d.task().id(), d.task().attempt()),
        (id, 2),
        "an attempt past its deadline was handed out"
    );
    d.ack().await.unwrap();
    scheduler.shutdown().await.unwrap();
}

/// Regression: every heartbeat renewed each of the node's lease rows (256
/// by default), so an idle scheduler wrote hundreds of rows a minute and
/// grew SQLite's write-ahead log by about 600 KB a minute. A lease is now
/// held while its session's membership row is fresh: an idle heartbeat
/// writes that one row and no lease row. Counted here by triggers on
/// SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_heartbeat_writes_one_row() {
    let db = Db::new(Backend::Sqlite, "idle_heartbeat");
    let store = db.open_with(ttw_durable::Store::builder()).await;
    db.exec("CREATE TABLE probe (tbl TEXT NOT NULL)").await;
    db.exec("CREATE TRIGGER probe_leases AFTER UPDATE ON ttw_leases BEGIN INSERT INTO probe VALUES ('leases'); END")
        .await;
    db.exec("CREATE TRIGGER probe_nodes AFTER UPDATE ON ttw_nodes BEGIN INSERT INTO probe VALUES ('nodes'); END")
        .await;
    for event in ["INSERT", "DELETE"] {
        db.exec(&format!(
            "CREATE TRIGGER probe_leases_{event} AFTER {event} ON ttw_leases BEGIN INSERT INTO probe VALUES ('leases'); END"
        ))
        .await;
    }
    let scheduler = fast(&store)
        .heartbeat(Duration::from_millis(100))
        .start(|_task| async { Ok::<_, String>(()) })
        .await
        .unwrap();
    assert_eq!(scheduler.stats().shards_owned, store.shards());
    // Taking the shards at start wrote the lease rows; from here on the
    // node is idle.
    db.exec("DELETE FROM probe").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leases = db
        .query_i64("SELECT COUNT(*) FROM probe WHERE tbl = 'leases'")
        .await;
    let beats = db
        .query_i64("SELECT COUNT(*) FROM probe WHERE tbl = 'nodes'")
        .await;
    assert_eq!(leases, 0, "an idle heartbeat wrote lease rows");
    assert!(beats >= 3, "only {beats} heartbeats in 2 s");
    scheduler.shutdown().await.unwrap();
}

/// Runs `sql` on a connection of the test's own, beside the store's.
async fn execute(db: &Db, sql: &str) {
    match db.backend {
        Backend::Sqlite => {
            let mut conn = db.caller_sqlite().await;
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
        Backend::Postgres => {
            let mut conn = db.caller_postgres().await;
            sqlx::query(sql).execute(&mut conn).await.unwrap();
        }
    }
}

on_both! {
    /// Successes are written in batches on both backends, each row under
    /// its own fence: acks settled together, some of whose tasks were
    /// claimed again behind the node's back (as a redrive or a takeover
    /// would), are written or refused row by row. The stale ones answer
    /// lost and their tasks are left as they were; the others are done.
    async fn acks_settled_together_are_fenced_row_by_row(db: Db) {
        let store = db.open().await;
        let (scheduler, mut deliveries) = fast(&store).start_stream().await.unwrap();
        let ids: Vec<TaskId> = store
            .schedule_batch((0..24).map(|i| NewTask::new(format!("t{i}"))))
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id())
            .collect();
        let mut held = Vec::new();
        while held.len() < ids.len() {
            held.push(deliveries.next().await.unwrap());
        }
        let stale: Vec<TaskId> = ids.iter().copied().step_by(3).collect();
        let list = stale.iter().map(|id| id.get().to_string()).collect::<Vec<_>>().join(", ");
        execute(
            &db,
            &format!("UPDATE {} SET claims = claims + 1 WHERE id IN ({list})", db.qualified("ttw_tasks")),
        )
        .await;
        let answers = futures::future::join_all(held.into_iter().map(|d| {
            let id = d.task().id();
            async move { (id, d.ack().await) }
        }))
        .await;
        for (id, answer) in answers {
            if stale.contains(&id) {
                assert!(answer.as_ref().is_err_and(|e| e.is_lost()), "{id}: {answer:?}");
                assert_eq!(store.get(id).await.unwrap().unwrap().state, TaskState::Running, "{id}");
            } else {
                answer.unwrap();
                assert_eq!(store.get(id).await.unwrap().unwrap().state, TaskState::Done, "{id}");
            }
        }
        assert_eq!(scheduler.stats().completions_lost, stale.len() as u64);
        scheduler.shutdown().await.unwrap();
    }
}

/// A handler's place under `max_concurrency` is given back when it
/// returns, before its outcome is written: with room for one handler, a
/// second task runs while the first one's success waits to be written
/// (its row locked by another session, PostgreSQL's row lock, which on
/// SQLite has no counterpart that leaves the claim free). The first is
/// still recorded once the lock goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn a_handler_s_place_is_free_while_its_outcome_is_written() {
    let db = Db::new(Backend::Postgres, "place_free_before_outcome");
    let store = db.open().await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    let go = Arc::new(tokio::sync::Notify::new());
    let wait = go.clone();
    let scheduler = fast(&store)
        .max_concurrency(1)
        .start(move |task| {
            let name = String::from_utf8_lossy(task.payload()).to_string();
            let (started_tx, wait) = (started_tx.clone(), wait.clone());
            async move {
                started_tx.send(name.clone()).unwrap();
                if name == "first" {
                    wait.notified().await;
                }
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    let first = store.schedule(b"first".to_vec()).await.unwrap();
    assert_eq!(started.recv().await.unwrap(), "first");
    // The first task's row is locked before its handler returns.
    let mut locker = db.caller_postgres().await;
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query(&format!(
        "SELECT id FROM {} WHERE id = $1 FOR UPDATE",
        db.qualified("ttw_tasks")
    ))
    .bind(first.get())
    .execute(&mut locker)
    .await
    .unwrap();
    go.notify_one();
    store.schedule(b"second".to_vec()).await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), started.recv()).await;
    assert_eq!(
        second
            .expect("the second handler started while the first outcome waited")
            .as_deref(),
        Some("second")
    );
    assert_eq!(
        store.get(first).await.unwrap().unwrap().state,
        TaskState::Running
    );
    sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
    wait_state(&store, first, TaskState::Done, Duration::from_secs(10)).await;
    scheduler.shutdown().await.unwrap();
}

/// Tasks claimed and not yet settled are at most twice `max_concurrency`:
/// with room for one handler, and the first two successes waiting to be
/// written (their rows locked by another session), a third task is not
/// claimed although a place is free, so claims cannot run ahead of the
/// outcomes without bound. It runs once the two are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn claimed_and_unsettled_tasks_stay_within_twice_max_concurrency() {
    let db = Db::new(Backend::Postgres, "settling_cap");
    let store = db.open().await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<String>();
    // A handler returns once it is given a permit.
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let wait = go.clone();
    let scheduler = fast(&store)
        .max_concurrency(1)
        .start(move |task| {
            let name = String::from_utf8_lossy(task.payload()).to_string();
            let (started_tx, wait) = (started_tx.clone(), wait.clone());
            async move {
                started_tx.send(name).unwrap();
                wait.acquire().await.unwrap().forget();
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    let mut locker = db.caller_postgres().await;
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    let lock = format!(
        "SELECT id FROM {} WHERE id = $1 FOR UPDATE",
        db.qualified("ttw_tasks")
    );
    let mut held = Vec::new();
    for name in ["first", "second"] {
        let id = store.schedule(name.as_bytes().to_vec()).await.unwrap();
        let began = tokio::time::timeout(Duration::from_secs(10), started.recv()).await;
        assert_eq!(began.expect("the handler started").as_deref(), Some(name));
        // Its row is locked before its handler returns: its success waits.
        sqlx::query(&lock)
            .bind(id.get())
            .execute(&mut locker)
            .await
            .unwrap();
        go.add_permits(1);
        held.push(id);
    }
    let third = store.schedule(b"third".to_vec()).await.unwrap();
    let early = tokio::time::timeout(Duration::from_secs(2), started.recv()).await;
    assert!(
        early.is_err(),
        "a third task started with two successes unwritten: {early:?}"
    );
    for id in &held {
        assert_eq!(
            store.get(*id).await.unwrap().unwrap().state,
            TaskState::Running
        );
    }
    sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
    let began = tokio::time::timeout(Duration::from_secs(10), started.recv()).await;
    assert_eq!(
        began
            .expect("the third started once the two were written")
            .as_deref(),
        Some("third")
    );
    go.add_permits(1);
    for id in held.into_iter().chain([third]) {
        wait_state(&store, id, TaskState::Done, Duration::from_secs(10)).await;
    }
    scheduler.shutdown().await.unwrap();
}
