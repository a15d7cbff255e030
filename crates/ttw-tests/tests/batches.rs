//! Batches on SQLite and PostgreSQL: every task of a batch answered in
//! order, stored with every column as given, or none of them; delivered
//! once each; and on PostgreSQL, a batch's announcements in notifications
//! that each fit.
//!
//! These run in real time (a database's clock cannot be paused), with small
//! windows and generous bounds.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/backends.rs"]
mod backends;

#[path = "support/log.rs"]
mod log;

#[path = "support/deliveries.rs"]
mod deliveries;

use std::time::{Duration, SystemTime};

use backends::{Backend, Db};
use deliveries::Log;
use log::start_logging;
use settings::fast;
use ttw_durable::{NewTask, Scheduled, MAX_PAYLOAD};

on_both! {
    /// A batch stores every task in one transaction, more than one
    /// statement's worth here, and answers for each in the order given: a
    /// key kept before, or used earlier in the batch, creates nothing and
    /// answers with that task's id.
    async fn a_batch_answers_for_every_task_in_order(db: Db) {
        let store = db.open().await;
        let hour = Duration::from_secs(3600);
        let kept = store.schedule(b"kept".to_vec()).idempotency_key("kept").delay(hour).await.unwrap();
        let mut tasks: Vec<NewTask> = (0..2_500)
            .map(|i| {
                let task = NewTask::new(format!("task {i}")).delay(hour);
                if i % 7 == 0 { task.idempotency_key(format!("key {i}")) } else { task }
            })
            .collect();
        tasks.push(NewTask::new("same key as task 14").idempotency_key("key 14"));
        tasks.push(NewTask::new("same key as before").idempotency_key("kept"));
        let out = store.schedule_batch(tasks).await.unwrap();
        assert_eq!(out.len(), 2_502);
        for (i, scheduled) in out[..2_500].iter().enumerate() {
            assert!(scheduled.is_created(), "task {i}: {scheduled:?}");
            let info = store.get(scheduled.id()).await.unwrap().unwrap();
            assert_eq!(info.payload, format!("task {i}").into_bytes(), "task {i}");
        }
        assert_eq!(out[2_500], Scheduled::Existing(out[14].id()));
        assert_eq!(out[2_501], Scheduled::Existing(kept));
        assert_eq!(store.counts().await.unwrap().scheduled, 2_501);

        // Two tasks with one key in one statement: the first is stored.
        let out = store
            .schedule_batch([NewTask::new("first").idempotency_key("twice"), NewTask::new("second").idempotency_key("twice")])
            .await
            .unwrap();
        assert!(out[0].is_created());
        assert_eq!(out[1], Scheduled::Existing(out[0].id()));
        assert_eq!(store.get(out[0].id()).await.unwrap().unwrap().payload, b"first");
        assert!(store.schedule_batch(Vec::new()).await.unwrap().is_empty());
    }
}

on_both! {
    /// A batch without keys (on PostgreSQL it goes by `COPY`, in its text
    /// format, with ids drawn first; on SQLite one statement) stores every
    /// task with its own time, payload (every byte value), queue, priority,
    /// attempt limit and partition key (tabs, backslashes, line ends and
    /// non-ASCII in it), and answers in the order given.
    async fn a_keyless_batch_stores_every_column_as_given(db: Db) {
        let store = db.open().await;
        let base = SystemTime::now() + Duration::from_secs(3600);
        let tasks: Vec<NewTask> = (0..1_000u64)
            .map(|i| {
                let payload = if i == 0 { (0..=255u8).collect() } else { format!("task {i}").into_bytes() };
                let task = NewTask::new(payload)
                    .at(base + Duration::from_millis(i * 7))
                    .queue(format!("q{}", i % 3))
                    .priority(i as i16 % 5 - 2);
                let task = if i.is_multiple_of(5) { task.partition_key(format!("key\t{i}\\\n é")) } else { task };
                if i.is_multiple_of(2) { task.max_attempts(1 + (i % 9) as u32) } else { task }
            })
            .collect();
        let out = store.schedule_batch(tasks).await.unwrap();
        assert_eq!(out.len(), 1_000);
        for (i, scheduled) in out.iter().enumerate() {
            let i = i as u64;
            assert!(scheduled.is_created(), "task {i}: {scheduled:?}");
            let info = store.get(scheduled.id()).await.unwrap().unwrap();
            let payload: Vec<u8> = if i == 0 { (0..=255u8).collect() } else { format!("task {i}").into_bytes() };
            assert_eq!(info.payload, payload, "task {i}");
            assert_eq!(info.queue, format!("q{}", i % 3), "task {i}");
            assert_eq!(info.priority, i as i16 % 5 - 2, "task {i}");
            assert_eq!(info.max_attempts, i.is_multiple_of(2).then(|| 1 + (i % 9) as u32), "task {i}");
            let want = base + Duration::from_millis(i * 7);
            let off = info.run_at.duration_since(want).unwrap_or_else(|e| e.duration());
            assert!(off < Duration::from_millis(1), "task {i}: {:?} for {want:?}", info.run_at);
        }
        assert_eq!(db.query_i64("SELECT COUNT(*) FROM ttw_tasks WHERE partition_key IS NOT NULL").await, 200);
        let one = db.query_i64("SELECT COUNT(*) FROM ttw_tasks WHERE partition_key = 'key\t5\\\n é'").await;
        assert_eq!(one, 1, "task 5's partition key, as given");
    }
}

on_both! {
    /// One task that could not be scheduled alone refuses the whole batch
    /// before anything is written, and the error says which and why.
    async fn a_batch_with_one_bad_task_stores_nothing(db: Db) {
        let store = db.open().await;
        type Check = fn(&ttw_durable::Error) -> bool;
        let bad: [(NewTask, Check); 4] = [
            (NewTask::new(vec![0; MAX_PAYLOAD + 1]), |e| e.is_payload_too_large()),
            (NewTask::new("x").idempotency_key(""), |e| e.is_invalid_key()),
            (NewTask::new("x").max_attempts(0), |e| e.is_invalid_task()),
            (NewTask::new("x").at(SystemTime::UNIX_EPOCH - Duration::from_secs(1)), |e| e.is_out_of_range()),
        ];
        for (task, is) in bad {
            let err = store
                .schedule_batch([NewTask::new("fine"), NewTask::new("fine too").idempotency_key("k"), task])
                .await
                .unwrap_err();
            assert!(is(&err), "{err}");
            assert_eq!(err.batch_index(), Some(2), "{err}");
            assert!(err.to_string().starts_with("task 2 of the batch"), "{err}");
        }
        let counts = store.counts().await.unwrap();
        assert_eq!(counts.scheduled + counts.done + counts.dead + counts.cancelled + counts.running, 0);
        // The key of the refused batch is free.
        assert!(store.schedule(b"k".to_vec()).idempotency_key("k").submit().await.unwrap().is_created());
    }
}

on_both! {
    /// A batch scheduled from another store (another process's, as far as
    /// the scheduler can tell: on PostgreSQL it hears by NOTIFY, on SQLite
    /// by its catch-up poll) is delivered once each, none early.
    async fn a_batch_is_delivered_once_each(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let other = db.open().await;
        let out = other
            .schedule_batch((0..300).map(|i| NewTask::new(format!("{i}")).delay(Duration::from_millis(300 + i))))
            .await
            .unwrap();
        log.wait_for(300, Duration::from_secs(30)).await;
        let per_task = log.per_task();
        for scheduled in &out {
            assert_eq!(per_task.get(&scheduled.id()), Some(&1), "{scheduled:?}");
        }
        log.assert_never_early();
        scheduler.shutdown().await.unwrap();
    }
}

/// PostgreSQL: a statement's announcements travel in notifications of a
/// payload's worth of tasks each (a notification a task cost a tenth of an
/// insert's time). A batch of 1,000 tasks with the longest partition keys
/// and queue name fills many notifications, none over PostgreSQL's 8,000
/// bytes; a scheduler that hears of them only by `NOTIFY` (its catch-up
/// poll an hour apart, its window loaded every twenty minutes, started
/// before the batch) delivers every one, once, none early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn a_batch_s_announcements_fill_notifications_that_each_fit() {
    let db = Db::new(Backend::Postgres, "notify_parts");
    let store = db.open().await;
    let (url, schema) = db.postgres_parts().unwrap();
    let mut listener = sqlx::postgres::PgListener::connect(url).await.unwrap();
    listener
        .listen(&format!("ttw_tasks_{schema}"))
        .await
        .unwrap();
    let log = Log::default();
    let queue = "q".repeat(ttw_durable::MAX_QUEUE_NAME);
    let recorder = log.clone();
    let builder = fast(&store)
        .window(Duration::from_secs(1200))
        .catch_up_interval(Duration::from_secs(3600))
        .lease_ttl(Duration::from_secs(30))
        .heartbeat(Duration::from_secs(5))
        .handle(queue.clone(), move |task| {
            let recorder = recorder.clone();
            async move {
                recorder.record(&task);
                Ok::<_, String>(())
            }
        });
    let scheduler = start_logging(builder, &log).await;
    // The scheduler's LISTEN connection opens (and loads the window) first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = db.open().await;
    let out = other
        .schedule_batch((0..1_000u64).map(|i| {
            let key = format!("{i:04}{}", "k".repeat(ttw_durable::MAX_PARTITION_KEY - 4));
            NewTask::new(format!("{i}"))
                .queue(queue.clone())
                .partition_key(key)
                .delay(Duration::from_millis(1_000 + i))
        }))
        .await
        .unwrap();
    let (mut notifications, mut entries) = (0, 0);
    while entries < 1_000 {
        let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .expect("the batch's notifications")
            .unwrap();
        let payload = heard.payload();
        assert!(
            payload.len() < 8_000,
            "a payload of {} bytes",
            payload.len()
        );
        notifications += 1;
        entries += payload
            .split(',')
            .filter(|e| e.ends_with(queue.as_str()))
            .count();
    }
    assert_eq!(entries, 1_000);
    assert!(
        notifications > 1 && notifications < 100,
        "{notifications} notifications"
    );
    log.wait_for(1_000, Duration::from_secs(30)).await;
    let per_task = log.per_task();
    for scheduled in &out {
        assert_eq!(per_task.get(&scheduled.id()), Some(&1), "{scheduled:?}");
    }
    log.assert_never_early();
    scheduler.shutdown().await.unwrap();
}

on_both! {
    /// Every task of a batch keeps its own envelope, on each way a batch is
    /// written (on PostgreSQL, 300 tasks without keys go by `COPY`, a few
    /// with keys by the insert), and an export page carries it too.
    async fn a_batch_keeps_each_task_s_envelope(db: Db) {
        let store = db.open().await;
        let envelope = |i: usize| {
            ttw_durable::Envelope::new()
                .destination(
                    ttw_durable::Destination::new(format!("https://a.example/hooks/{i}"))
                        .header("x-n", i.to_string()),
                )
                .traceparent(format!("00-{:032x}-00f067aa0ba902b7-01", i + 1))
        };
        let mut tasks: Vec<NewTask> = (0..300)
            .map(|i| NewTask::new(b"x".to_vec()).envelope(envelope(i)))
            .collect();
        tasks.extend((300..305).map(|i| {
            NewTask::new(b"x".to_vec())
                .idempotency_key(format!("k{i}"))
                .envelope(envelope(i))
        }));
        tasks.push(NewTask::new(b"plain".to_vec()));
        let made = store.schedule_batch(tasks).await.unwrap();
        for (i, s) in made.iter().enumerate() {
            let info = store.get(s.id()).await.unwrap().unwrap();
            let want = (i < 305).then(|| envelope(i));
            assert_eq!(info.envelope, want, "task {i}");
        }
        let page = store.pending_page(None, 1000).await.unwrap();
        assert_eq!(page.len(), 306);
        assert_eq!(page[7].envelope, Some(envelope(7)));
        assert_eq!(page[305].envelope, None);
        let bad = store
            .schedule_batch(vec![NewTask::new(b"x".to_vec())
                .envelope(ttw_durable::Envelope::new().traceparent("nope"))])
            .await
            .unwrap_err();
        assert!(bad.is_invalid_envelope() && bad.batch_index() == Some(0), "{bad}");
    }
}
