//! Queues on SQLite and PostgreSQL: handlers per queue, nodes serving
//! different queues, a queue no node serves (its tasks wait, counted, never
//! dead), a concurrency limit per queue with priority deciding who goes
//! first, bad queue names, and a database from before queues upgraded.
//!
//! Real time, small windows, generous bounds, as in `durable.rs`.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/backends.rs"]
mod backends;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use backends::{Backend, Db};
use settings::{fast, wait_state};
use tokio::sync::Notify;
use ttw_durable::{
    NewTask, Recurring, Scheduler, SchedulerBuilder, TaskId, TaskState, MAX_QUEUE_NAME,
};

/// One delivery: (handler's name, queue, payload).
type Delivered = (&'static str, String, Vec<u8>);

/// Who delivered what.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Delivered>>>);

impl Seen {
    fn all(&self) -> Vec<Delivered> {
        self.0.lock().unwrap().clone()
    }

    async fn wait_for(&self, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.all().len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of {n} deliveries within {within:?}: {:?}",
                self.all().len(),
                self.all()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `builder` with a handler named `who` for each of `queues`, recording
/// into `seen`.
fn serving(
    mut builder: SchedulerBuilder,
    who: &'static str,
    queues: &[&str],
    seen: &Seen,
) -> SchedulerBuilder {
    for &queue in queues {
        let seen = seen.clone();
        builder = builder.handle(queue, move |task| {
            let seen = seen.clone();
            async move {
                seen.0.lock().unwrap().push((
                    who,
                    task.queue().to_string(),
                    task.payload().to_vec(),
                ));
                Ok::<_, String>(())
            }
        });
    }
    builder
}

async fn wait_owned(scheduler: &Scheduler, lanes: u32, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    while scheduler.stats().shards_owned != lanes {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} holds {} lanes, not {lanes}",
            scheduler.node_id(),
            scheduler.stats().shards_owned
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

on_both! {
    /// Each queue's tasks go to its own handler. A task whose queue no node
    /// serves waits, scheduled and counted, with no attempt used, and so do
    /// the occurrences of a schedule in that queue; once a node serving the
    /// queue starts, they are delivered there.
    async fn handlers_per_queue_and_a_queue_no_node_serves_waits(db: Db) {
        let store = db.open().await;
        let seen = Seen::default();
        let a = serving(fast(&store).node_id("a"), "a", &["default", "emails"], &seen)
            .start_queues()
            .await
            .unwrap();
        store.schedule("d").delay(Duration::from_millis(100)).await.unwrap();
        store.schedule("e").queue("emails").delay(Duration::from_millis(100)).await.unwrap();
        let report = store.schedule("r").queue("reports").delay(Duration::from_millis(100)).await.unwrap();
        store
            .register_recurring(Recurring::every("tick", Duration::from_secs(1)).queue("reports").payload("tick"))
            .await
            .unwrap();
        seen.wait_for(2, Duration::from_secs(10)).await;
        let mut got = seen.all();
        got.sort();
        assert_eq!(
            got,
            vec![("a", "default".to_string(), b"d".to_vec()), ("a", "emails".to_string(), b"e".to_vec())]
        );

        // Well past its time, the report waits: not claimed, not dead.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let waiting = store.get(report).await.unwrap().unwrap();
        assert_eq!((waiting.state, waiting.attempts, waiting.queue.as_str()), (TaskState::Scheduled, 0, "reports"));
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_tasks WHERE recurring IS NOT NULL").await, 0,
            "no node serves the schedule's queue, so none of its occurrences is made a task");
        let counts = store.queue_counts().await.unwrap();
        assert_eq!(counts.keys().collect::<Vec<_>>(), ["default", "emails", "reports"]);
        assert_eq!((counts["default"].done, counts["emails"].done), (1, 1));
        assert_eq!((counts["reports"].scheduled, counts["reports"].dead), (1, 0));

        let b = serving(fast(&store).node_id("b"), "b", &["reports"], &seen)
            .start_queues()
            .await
            .unwrap();
        // The waiting task, and the schedule's next occurrences.
        seen.wait_for(4, Duration::from_secs(10)).await;
        let by_b: Vec<_> = seen.all().into_iter().filter(|s| s.0 == "b").collect();
        assert!(by_b.iter().all(|s| s.1 == "reports"), "{by_b:?}");
        assert!(by_b.iter().any(|s| s.2 == b"r"), "{by_b:?}");
        assert!(by_b.iter().any(|s| s.2 == b"tick"), "{by_b:?}");
        assert!(seen.all().iter().filter(|s| s.0 == "a").all(|s| s.1 != "reports"));
        // The handler has run; its outcome is written just after.
        wait_state(&store, report, TaskState::Done, Duration::from_secs(10)).await;
        b.shutdown().await.unwrap();
        a.shutdown().await.unwrap();
    }
}

on_both! {
    /// Two nodes serving different queues: each queue's shards are shared
    /// among the nodes that serve it (here node a serves "a"; node b serves
    /// "a" and "b"), every task is delivered once, and only node b runs
    /// queue "b".
    async fn nodes_serving_different_queues_share_each_queue_among_its_nodes(db: Db) {
        let store = db.open().await;
        let shards = store.shards();
        let seen = Seen::default();
        let a = serving(fast(&store).node_id("a"), "a", &["a"], &seen).start_queues().await.unwrap();
        let b = serving(fast(&store).node_id("b"), "b", &["a", "b"], &seen).start_queues().await.unwrap();
        // Node a holds half of queue a's shards; node b the other half and
        // all of queue b's.
        wait_owned(&a, shards / 2, Duration::from_secs(10)).await;
        wait_owned(&b, shards / 2 + shards, Duration::from_secs(10)).await;

        let tasks = (0..40)
            .map(|i| NewTask::new(format!("a{i}")).queue("a").delay(Duration::from_millis(300)))
            .chain((0..20).map(|i| NewTask::new(format!("b{i}")).queue("b").delay(Duration::from_millis(300))));
        store.schedule_batch(tasks).await.unwrap();
        seen.wait_for(60, Duration::from_secs(15)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let all = seen.all();
        assert_eq!(all.len(), 60, "every task once");
        let mut payloads: Vec<_> = all.iter().map(|s| s.2.clone()).collect();
        payloads.sort();
        payloads.dedup();
        assert_eq!(payloads.len(), 60, "no task twice");
        assert!(all.iter().filter(|s| s.1 == "b").all(|s| s.0 == "b"), "only node b serves queue b");
        assert!(all.iter().any(|s| s.1 == "a" && s.0 == "a") && all.iter().any(|s| s.1 == "a" && s.0 == "b"),
            "both nodes deliver queue a: {all:?}");

        // Node b leaves: node a takes queue a whole; queue b waits.
        b.shutdown().await.unwrap();
        wait_owned(&a, shards, Duration::from_secs(10)).await;
        let late = store.schedule("late b").queue("b").await.unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(store.get(late).await.unwrap().unwrap().state, TaskState::Scheduled);
        a.shutdown().await.unwrap();
    }
}

on_both! {
    /// A queue's concurrency limit holds however many of its tasks are due,
    /// and those waiting for room stay scheduled (no attempt used). When
    /// room comes they are claimed lowest priority number first, then
    /// earliest due.
    async fn a_full_queue_claims_by_priority_then_time(db: Db) {
        let store = db.open().await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(Notify::new());
        let scheduler = {
            let (order, running, most, release) = (order.clone(), running.clone(), most.clone(), release.clone());
            fast(&store)
                .queue_concurrency("default", 1)
                .callback_timeout(Duration::from_secs(20))
                .start(move |task| {
                    let (order, running, most, release) = (order.clone(), running.clone(), most.clone(), release.clone());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        if task.payload() == b"blocker" {
                            release.notified().await;
                        } else {
                            order.lock().unwrap().push(String::from_utf8(task.payload().to_vec()).unwrap());
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, String>(())
                    }
                })
                .await
                .unwrap()
        };
        let t0 = SystemTime::now() + Duration::from_millis(300);
        let blocker = store.schedule("blocker").at(t0).priority(i16::MAX).await.unwrap();
        let tasks = [
            ("p5", 5, 100),
            ("p-1", -1, 150),
            ("p1-late", 1, 250),
            ("p3", 3, 100),
            ("p0", 0, 200),
            ("p1-early", 1, 120),
            ("p2", 2, 100),
        ];
        store
            .schedule_batch(tasks.iter().map(|&(name, priority, after)| {
                NewTask::new(name).priority(priority).at(t0 + Duration::from_millis(after))
            }))
            .await
            .unwrap();

        // All due, the blocker holds the queue's one place.
        tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(1200)).await;
        assert_eq!(store.get(blocker).await.unwrap().unwrap().state, TaskState::Running);
        let counts = store.queue_counts().await.unwrap()["default"];
        assert_eq!((counts.running, counts.scheduled), (1, 7), "the others wait unclaimed");
        release.notify_one();

        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while order.lock().unwrap().len() < tasks.len() {
            assert!(tokio::time::Instant::now() < deadline, "{:?}", order.lock().unwrap());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["p-1", "p0", "p1-early", "p1-late", "p2", "p3", "p5"],
            "lowest priority number first, then earliest due"
        );
        assert_eq!(most.load(Ordering::SeqCst), 1, "the queue's limit held");
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A stream serves the queues named for it, and each delivery says its
    /// queue and priority; other queues' tasks wait.
    async fn a_stream_serves_the_queues_named_for_it(db: Db) {
        let store = db.open().await;
        let (scheduler, mut deliveries) = fast(&store).stream_queues(["x", "y"]).start_stream().await.unwrap();
        store.schedule("to x").queue("x").priority(7).await.unwrap();
        store.schedule("to y").queue("y").await.unwrap();
        let other = store.schedule("to default").await.unwrap();
        let mut got = BTreeMap::new();
        for _ in 0..2 {
            let delivery = tokio::time::timeout(Duration::from_secs(10), deliveries.recv()).await.unwrap().unwrap();
            got.insert(delivery.task().queue().to_string(), (delivery.task().payload().to_vec(), delivery.task().priority()));
            delivery.ack().await.unwrap();
        }
        assert_eq!(got["x"], (b"to x".to_vec(), 7));
        assert_eq!(got["y"], (b"to y".to_vec(), 0));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(store.get(other).await.unwrap().unwrap().state, TaskState::Scheduled);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Bad queue names are refused, saying why, and write nothing: when
    /// scheduling (alone, by key, in a batch), registering a schedule, or
    /// starting a scheduler. So are two handlers for one queue and a limit
    /// on a queue the scheduler does not serve.
    async fn bad_queue_names_and_settings_are_refused(db: Db) {
        let store = db.open().await;
        let long = "q".repeat(MAX_QUEUE_NAME + 1);
        for bad in ["", "a,b", "with space", long.as_str()] {
            let err = store.schedule("x").queue(bad).await.unwrap_err();
            assert!(err.is_invalid_queue(), "{bad:?}: {err}");
            let err = store.schedule("x").queue(bad).idempotency_key("k").replace_pending().await.unwrap_err();
            assert!(err.is_invalid_queue(), "{bad:?}: {err}");
            let err = store.register_recurring(Recurring::every("r", Duration::from_secs(5)).queue(bad)).await.unwrap_err();
            assert!(err.is_invalid_queue(), "{bad:?}: {err}");
            let err = fast(&store).handle(bad, |_| async { Ok::<_, String>(()) }).start_queues().await.unwrap_err();
            assert!(err.is_invalid_queue(), "{bad:?}: {err}");
        }
        let err = store
            .schedule_batch([NewTask::new("fine"), NewTask::new("also").queue("q"), NewTask::new("bad").queue("no way")])
            .await
            .unwrap_err();
        assert!(err.is_invalid_queue(), "{err}");
        assert_eq!(err.batch_index(), Some(2));
        assert!(err.to_string().contains("' '"), "the message names the character: {err}");
        assert_eq!(store.counts().await.unwrap().scheduled, 0, "nothing was written");
        assert!(store.list_recurring().await.unwrap().is_empty());

        let twice = fast(&store)
            .handle("q", |_| async { Ok::<_, String>(()) })
            .handle("q", |_| async { Ok::<_, String>(()) })
            .start_queues()
            .await
            .unwrap_err();
        assert!(twice.is_config() && twice.to_string().contains("'q'"), "{twice}");
        let unserved = fast(&store).queue_concurrency("emials", 2).start(|_| async { Ok::<_, String>(()) }).await.unwrap_err();
        assert!(unserved.is_config() && unserved.to_string().contains("emials"), "{unserved}");
        let zero = fast(&store).queue_concurrency("default", 0).start(|_| async { Ok::<_, String>(()) }).await.unwrap_err();
        assert!(zero.is_config(), "{zero}");
        let none = fast(&store).start_queues().await.unwrap_err();
        assert!(none.is_config(), "{none}");
    }
}

on_both! {
    /// A database written before queues (the earlier migrations' schema,
    /// rows and leases as the earlier code wrote them, a lease held) is
    /// brought up to date on open: every task is kept in the default queue
    /// at priority 0, schedules too, and a scheduler delivers the old task.
    async fn a_database_from_before_queues_upgrades_with_nothing_lost(db: Db) {
        db.migrate_before("0005").await;
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as i64;
        let bytes = |hex: &str| match db.backend {
            Backend::Sqlite => format!("X'{hex}'"),
            Backend::Postgres => format!("'\\x{hex}'::bytea"),
        };
        db.exec("INSERT INTO ttw_meta (key, value) VALUES ('shards', 16)").await;
        db.exec("WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 15) \
                 INSERT INTO ttw_leases (shard) SELECT n FROM s").await;
        db.exec("UPDATE ttw_leases SET owner_node = 'gone', owner_session = 'gone/1', epoch = 3 WHERE shard = 1").await;
        db.exec(&format!(
            "INSERT INTO ttw_tasks (id, state, run_at, payload, idempotency_key, attempts, created_at, updated_at) \
             VALUES (1, 'scheduled', {}, {}, 'old-key', 0, {now}, {now})",
            now + 500,
            bytes("6f6c64")
        ))
        .await;
        db.exec(&format!(
            "INSERT INTO ttw_tasks (id, state, run_at, payload, attempts, last_error, created_at, updated_at, finished_at, claims) \
             VALUES (2, 'dead', {now}, {}, 5, 'boom', {now}, {now}, {now}, 5)",
            bytes("00")
        ))
        .await;
        db.exec(&format!(
            "INSERT INTO ttw_recurring (name, shard, every_ms, catch_up, missed_after_ms, payload, next_at, created_at, updated_at) \
             VALUES ('hourly', 3, 3600000, 'skip', 60000, {}, {}, {now}, {now})",
            bytes("68"),
            now + 3_600_000
        ))
        .await;
        if db.backend == Backend::Postgres {
            db.exec("SELECT setval('ttw_tasks_id_seq', 2)").await;
        }

        let store = db.open().await;
        let kept = store.get(TaskId::new(1)).await.unwrap().expect("the scheduled task is kept");
        assert_eq!((kept.state, kept.queue.as_str(), kept.priority), (TaskState::Scheduled, "default", 0));
        assert_eq!(kept.idempotency_key.as_deref(), Some("old-key"));
        let dead = store.get(TaskId::new(2)).await.unwrap().expect("the dead task is kept");
        assert_eq!((dead.state, dead.attempts, dead.queue.as_str()), (TaskState::Dead, 5, "default"));
        let schedules = store.list_recurring().await.unwrap();
        assert_eq!((schedules[0].name.as_str(), schedules[0].queue.as_str()), ("hourly", "default"));
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_leases WHERE queue = 'default'").await, 16);
        assert_eq!(db.query_i64("SELECT epoch FROM ttw_leases WHERE queue = 'default' AND shard = 1").await, 3,
            "leases keep their epochs");

        let seen = Seen::default();
        let scheduler = serving(fast(&store), "new", &["default"], &seen).start_queues().await.unwrap();
        seen.wait_for(1, Duration::from_secs(10)).await;
        assert_eq!(seen.all()[0].2, b"old");
        assert_eq!(store.schedule("again").idempotency_key("old-key").await.unwrap(), TaskId::new(1));
        scheduler.shutdown().await.unwrap();
    }
}
