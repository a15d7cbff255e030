//! The durable layer on SQLite and PostgreSQL: delivery at the right time,
//! idempotency keys, cancel and reschedule (also racing the firing),
//! retries, dead tasks and redrive, hung and panicking handlers, the
//! stream's ack / nack, restarts and crashes, and bad input.
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
use ttw_durable::{Backoff, TaskState};

on_both! {
    /// Tasks due inside and beyond the first window are each delivered once,
    /// never before their time, and end done.
    async fn delivers_each_task_once_never_early(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store).window(Duration::from_millis(600)), &log).await;
        let mut ids = Vec::new();
        for i in 0..60u64 {
            ids.push(store.schedule(vec![i as u8]).delay(Duration::from_millis(i * 25)).await.unwrap());
        }
        log.wait_for(60, Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(log.count(), 60);
        assert!(log.per_task().values().all(|&n| n == 1));
        log.assert_never_early();
        for id in ids {
            wait_state(&store, id, TaskState::Done, Duration::from_secs(5)).await;
        }
        let stats = scheduler.stats();
        assert_eq!((stats.delivered, stats.succeeded), (60, 60));
        assert_eq!(stats.shards_owned, 16);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// The same idempotency key twice creates one task and returns its id.
    async fn idempotency_key_creates_once(db: Db) {
        let store = db.open().await;
        let a = store.schedule(b"a".to_vec()).idempotency_key("k1").delay(Duration::from_secs(60)).await.unwrap();
        let b = store.schedule(b"b".to_vec()).idempotency_key("k1").await.unwrap();
        let c = store.schedule(b"c".to_vec()).idempotency_key("k2").await.unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let info = store.get(a).await.unwrap().unwrap();
        assert_eq!(info.payload, b"a");
        assert_eq!(info.idempotency_key.as_deref(), Some("k1"));
        assert_eq!(store.counts().await.unwrap().scheduled, 2);
    }
}

on_both! {
    /// A cancelled task never runs; a rescheduled one runs at its new time.
    async fn cancel_and_reschedule(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let cancelled = store.schedule(b"x".to_vec()).delay(Duration::from_millis(300)).await.unwrap();
        let moved = store.schedule(b"y".to_vec()).delay(Duration::from_millis(100)).await.unwrap();
        assert!(store.cancel(cancelled).await.unwrap());
        let new_time = SystemTime::now() + Duration::from_millis(700);
        assert!(store.reschedule(moved, new_time).await.unwrap());
        log.wait_for(1, Duration::from_secs(5)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let seen = log.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, moved);
        assert!(seen[0].2 >= new_time);
        assert_eq!(store.get(cancelled).await.unwrap().unwrap().state, TaskState::Cancelled);
        assert!(!store.cancel(cancelled).await.unwrap());
        assert!(!store.cancel(moved).await.unwrap(), "a finished task is not cancelled");
        assert!(!store.reschedule(moved, SystemTime::now()).await.unwrap());
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Cancels racing the firing: every task is either cancelled (and never
    /// delivered) or delivered once (and the cancel said it was too late).
    async fn cancel_races_firing(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let at = SystemTime::now() + Duration::from_millis(300);
        let mut ids = Vec::new();
        for i in 0..200u32 {
            ids.push(store.schedule(i.to_le_bytes().to_vec()).at(at).await.unwrap());
        }
        tokio::time::sleep_until(tokio::time::Instant::now() + at.duration_since(SystemTime::now()).unwrap_or_default()).await;
        let mut cancelled = Vec::new();
        for id in &ids {
            if store.cancel(*id).await.unwrap() {
                cancelled.push(*id);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let delivered = log.per_task();
        for id in &ids {
            let was_cancelled = cancelled.contains(id);
            let times = delivered.get(id).copied().unwrap_or(0);
            assert!(
                (was_cancelled && times == 0) || (!was_cancelled && times == 1),
                "task {id}: cancelled {was_cancelled}, delivered {times} times"
            );
        }
        log.assert_never_early();
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Reschedules racing the firing: a task either ran at its old time (and
    /// the reschedule said so) or runs once, not before its new time.
    async fn reschedule_races_firing(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store), &log).await;
        let at = SystemTime::now() + Duration::from_millis(300);
        let mut ids = Vec::new();
        for i in 0..100u32 {
            ids.push(store.schedule(i.to_le_bytes().to_vec()).at(at).await.unwrap());
        }
        tokio::time::sleep(at.duration_since(SystemTime::now()).unwrap_or_default()).await;
        let later = SystemTime::now() + Duration::from_millis(500);
        let mut moved = Vec::new();
        for id in &ids {
            if store.reschedule(*id, later).await.unwrap() {
                moved.push(*id);
            }
        }
        log.wait_for(100, Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(log.per_task().values().all(|&n| n == 1));
        for (id, _, ran, due) in log.0.lock().unwrap().iter() {
            assert!(ran >= due);
            if moved.contains(id) {
                assert!(*ran + Duration::from_millis(1) >= later, "task {id} ran before its new time");
            }
        }
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A handler that always fails is retried with backoff until its
    /// attempts run out, then the task is dead with its last error; redrive
    /// schedules it again.
    async fn retries_then_dead_then_redrive(db: Db) {
        let store = db.open().await;
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let healthy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, h) = (attempts.clone(), healthy.clone());
        let scheduler = fast(&store)
            .max_attempts(3)
            .start(move |task| {
                let (a, h) = (a.clone(), h.clone());
                async move {
                    a.lock().unwrap().push((task.attempt(), SystemTime::now()));
                    if h.load(std::sync::atomic::Ordering::SeqCst) {
                        Ok(())
                    } else {
                        Err(format!("boom on attempt {}", task.attempt()))
                    }
                }
            })
            .await
            .unwrap();
        let id = store.schedule(b"flaky".to_vec()).await.unwrap();
        wait_state(&store, id, TaskState::Dead, Duration::from_secs(10)).await;
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(info.attempts, 3);
        assert_eq!(info.last_error.as_deref(), Some("boom on attempt 3"));
        let seen = attempts.lock().unwrap().clone();
        assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        // Backoff: at least half the nominal 50 ms, then 100 ms.
        assert!(seen[1].1.duration_since(seen[0].1).unwrap() >= Duration::from_millis(25));
        assert!(seen[2].1.duration_since(seen[1].1).unwrap() >= Duration::from_millis(50));
        let stats = scheduler.stats();
        assert_eq!((stats.failed, stats.retried, stats.dead), (3, 2, 1));

        healthy.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(store.redrive(id).await.unwrap());
        assert!(!store.redrive(id).await.unwrap() || store.get(id).await.unwrap().unwrap().state == TaskState::Dead);
        wait_state(&store, id, TaskState::Done, Duration::from_secs(5)).await;
        assert_eq!(store.get(id).await.unwrap().unwrap().attempts, 1);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Regression: outcomes were fenced on the attempt number, which a
    /// redrive starts again from 0, so after a redrive on the same node the
    /// new claim was "attempt 1" once more. A stale delivery of the old
    /// attempt 1 (timed out before the task went dead) could then nack the
    /// new attempt into a dead task, or ack it done while it still ran.
    /// Outcomes are now fenced on a claim count that never starts again.
    async fn a_delivery_from_before_a_redrive_cannot_settle_the_new_attempt(db: Db) {
        let store = db.open().await;
        let (scheduler, mut deliveries) = fast(&store)
            .callback_timeout(Duration::from_millis(300))
            .max_attempts(1)
            .start_stream()
            .await
            .unwrap();
        let id = store.schedule(b"x".to_vec()).await.unwrap();
        let old = deliveries.next().await.unwrap();
        assert_eq!(old.task().attempt(), 1);
        // Not settled in time: the only attempt fails and the task is dead.
        wait_state(&store, id, TaskState::Dead, Duration::from_secs(5)).await;
        assert!(store.redrive(id).await.unwrap());
        let new = deliveries.next().await.unwrap();
        assert_eq!((new.task().id(), new.task().attempt()), (id, 1));
        let stale = old.nack("stale consumer").await.unwrap_err();
        assert!(stale.is_lost(), "{stale}");
        assert_eq!(store.get(id).await.unwrap().unwrap().state, TaskState::Running);
        new.ack().await.unwrap();
        assert_eq!(store.get(id).await.unwrap().unwrap().state, TaskState::Done);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A task's own max_attempts overrides the scheduler's.
    async fn per_task_max_attempts(db: Db) {
        let store = db.open().await;
        let scheduler = fast(&store)
            .max_attempts(10)
            .start(|_task| async { Err::<(), _>("no") })
            .await
            .unwrap();
        let id = store.schedule(b"once".to_vec()).max_attempts(1).await.unwrap();
        wait_state(&store, id, TaskState::Dead, Duration::from_secs(5)).await;
        assert_eq!(store.get(id).await.unwrap().unwrap().attempts, 1);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A hung handler and a panicking one beside 50 healthy tasks: the
    /// healthy ones all run while the hung one still holds its place (no
    /// healthy task waits for it); the hung one is cancelled at the
    /// callback timeout and the panicking one fails, each counted as an
    /// attempt.
    async fn hung_and_panicking_handlers_beside_healthy(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let l = log.clone();
        let scheduler = fast(&store)
            .callback_timeout(Duration::from_secs(3))
            .max_attempts(1)
            .start(move |task| {
                let l = l.clone();
                async move {
                    match task.payload() {
                        b"hang" => futures::future::pending::<()>().await,
                        b"panic" => panic!("handler bug"),
                        _ => l.record(&task),
                    }
                    Ok::<_, String>(())
                }
            })
            .await
            .unwrap();
        let hung = store.schedule(b"hang".to_vec()).await.unwrap();
        let panicked = store.schedule(b"panic".to_vec()).await.unwrap();
        for i in 0..50u64 {
            store.schedule(b"ok".to_vec()).delay(Duration::from_millis(50 + i * 4)).await.unwrap();
        }
        log.wait_for(50, Duration::from_secs(5)).await;
        assert_eq!(
            store.get(hung).await.unwrap().unwrap().state,
            TaskState::Running,
            "the healthy tasks ran only once the hung one was cancelled"
        );
        wait_state(&store, hung, TaskState::Dead, Duration::from_secs(10)).await;
        wait_state(&store, panicked, TaskState::Dead, Duration::from_secs(5)).await;
        let hung = store.get(hung).await.unwrap().unwrap();
        assert!(hung.last_error.as_ref().unwrap().contains("timed out"), "{hung:?}");
        let panicked = store.get(panicked).await.unwrap().unwrap();
        assert!(panicked.last_error.as_ref().unwrap().contains("handler bug"), "{panicked:?}");
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Regression: a handler that panicked while making its future (in the
    /// closure itself, before any `.await`) was not caught: the delivery's
    /// supervisor died with it, the attempt was never recorded (the task
    /// came back only when its lock ran out, with "lock expired"), and its
    /// shard counted a delivery in flight for ever, so it could never be
    /// given back. It now fails the attempt like any other panic.
    async fn a_handler_that_panics_making_its_future_fails_the_attempt(db: Db) {
        let store = db.open().await;
        let scheduler = fast(&store)
            .max_attempts(1)
            .start(|task| {
                if task.payload() == b"panic" {
                    panic!("panicked making the future");
                }
                std::future::ready(Ok::<_, String>(()))
            })
            .await
            .unwrap();
        let id = store.schedule(b"panic".to_vec()).await.unwrap();
        wait_state(&store, id, TaskState::Dead, Duration::from_secs(5)).await;
        let info = store.get(id).await.unwrap().unwrap();
        assert!(info.last_error.as_ref().unwrap().contains("panicked making the future"), "{info:?}");
        let started = std::time::Instant::now();
        while scheduler.stats().in_flight != 0 {
            assert!(started.elapsed() < Duration::from_secs(5), "{:?}", scheduler.stats());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(scheduler.stats().failed, 1);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// Stream delivery: ack marks done, nack retries, a dropped delivery
    /// and one not settled in time each count as failed, and a late ack is
    /// refused as lost.
    async fn stream_ack_nack_drop_and_timeout(db: Db) {
        let store = db.open().await;
        let (scheduler, mut deliveries) = fast(&store)
            .callback_timeout(Duration::from_secs(1))
            .max_attempts(2)
            .start_stream()
            .await
            .unwrap();
        let acked = store.schedule(b"ack".to_vec()).idempotency_key("ack").await.unwrap();
        let d = deliveries.next().await.unwrap();
        assert_eq!((d.task().id(), d.task().attempt()), (acked, 1));
        assert_eq!(d.task().idempotency_key(), Some("ack"));
        assert_eq!(d.task().payload(), b"ack");
        d.ack().await.unwrap();
        assert_eq!(store.get(acked).await.unwrap().unwrap().state, TaskState::Done);

        let nacked = store.schedule(b"nack".to_vec()).await.unwrap();
        let d = deliveries.next().await.unwrap();
        d.nack("not now").await.unwrap();
        let info = store.get(nacked).await.unwrap().unwrap();
        assert_eq!((info.state, info.last_error.as_deref()), (TaskState::Scheduled, Some("not now")), "{info:?}");
        let d = deliveries.next().await.unwrap();
        assert_eq!((d.task().id(), d.task().attempt()), (nacked, 2));
        drop(d); // dropped unsettled: the second and last attempt fails
        wait_state(&store, nacked, TaskState::Dead, Duration::from_secs(5)).await;
        assert!(store.get(nacked).await.unwrap().unwrap().last_error.unwrap().contains("dropped"));

        let slow = store.schedule(b"slow".to_vec()).await.unwrap();
        let d = deliveries.next().await.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let err = d.ack().await.unwrap_err();
        assert!(err.is_lost(), "{err}");
        let info = store.get(slow).await.unwrap().unwrap();
        assert!(info.last_error.unwrap().contains("not acknowledged"));
        assert!(scheduler.stats().completions_lost >= 1);
        let d = deliveries.next().await.unwrap();
        assert_eq!((d.task().id(), d.task().attempt()), (slow, 2));
        d.ack().await.unwrap();
        scheduler.shutdown().await.unwrap();
        assert!(deliveries.next().await.is_none(), "the stream ends at shutdown");
    }
}

on_both! {
    /// Regression: a delivery the consumer had not taken from the stream
    /// by its deadline stayed in the stream after its attempt was failed,
    /// and a consumer that read late got that stale attempt: it ran the
    /// task again while the retry was due, and its ack was refused.
    async fn a_delivery_left_in_the_stream_past_its_deadline_is_not_handed_out(db: Db) {
        let store = db.open().await;
        let (scheduler, mut deliveries) = fast(&store)
            .callback_timeout(Duration::from_millis(300))
            .backoff(Backoff::exponential(Duration::from_secs(2), Duration::from_secs(2)))
            .start_stream()
            .await
            .unwrap();
        let id = store.schedule(b"late reader".to_vec()).await.unwrap();
        // Nobody reads while the first attempt times out and is failed.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let info = store.get(id).await.unwrap().unwrap();
            if (info.state, info.attempts) == (TaskState::Scheduled, 1) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{info:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let d = deliveries.next().await.unwrap();
        assert_eq!((d.task().id(), d.task().attempt()), (id, 2), "the stale first attempt was handed out");
        d.ack().await.unwrap();
        assert_eq!(store.get(id).await.unwrap().unwrap().state, TaskState::Done);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A process killed with tasks pending (no graceful shutdown) and
    /// started again under the same node id delivers every task, none
    /// before its time and none lost.
    async fn restart_delivers_everything(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let first = start_logging(fast(&store).node_id("n1").lock_grace(Duration::from_millis(200)), &log).await;
        let mut ids = Vec::new();
        for i in 0..200u64 {
            ids.push(store.schedule(vec![1]).delay(Duration::from_millis(i * 8)).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        first.abort();
        let before = log.count();
        assert!(before > 0 && before < 200, "{before} delivered before the kill");
        drop(store);
        // A new process: a new pool on the same database.
        let store = db.open().await;
        let second = start_logging(fast(&store).node_id("n1"), &log).await;
        log.wait_for(200, Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let per_task = log.per_task();
        for id in &ids {
            assert!(per_task.contains_key(id), "task {id} was lost");
        }
        log.assert_never_early();
        let duplicates: usize = per_task.values().map(|n| n - 1).sum();
        // Only a task whose outcome the kill cut off can come twice.
        assert!(duplicates <= 5, "{duplicates} duplicates");
        assert!(second.stats().lease_takeovers >= 16, "took its shards back at once");
        second.shutdown().await.unwrap();
    }
}

on_both! {
    /// A process killed while its handler runs: the task stays running
    /// until its lock deadline, then the shard's new owner reclaims it and
    /// delivers it again (attempt 2). At least once, said plainly.
    async fn crash_in_handler_is_reclaimed_after_the_lock(db: Db) {
        let store = db.open().await;
        let started = Arc::new(tokio::sync::Notify::new());
        let s = started.clone();
        let first = fast(&store)
            .node_id("crashing")
            .callback_timeout(Duration::from_millis(500))
            .lock_grace(Duration::from_millis(200))
            .start(move |_task| {
                let s = s.clone();
                async move {
                    s.notify_one();
                    futures::future::pending::<()>().await;
                    Ok::<_, String>(())
                }
            })
            .await
            .unwrap();
        let id = store.schedule(b"work".to_vec()).await.unwrap();
        started.notified().await;
        let crashed_at = tokio::time::Instant::now();
        first.abort();
        assert_eq!(store.get(id).await.unwrap().unwrap().state, TaskState::Running);

        let log = Log::default();
        let second = start_logging(fast(&store).node_id("survivor"), &log).await;
        log.wait_for(1, Duration::from_secs(10)).await;
        // Not before the dead node's lease ran out and the lock expired.
        assert!(crashed_at.elapsed() >= Duration::from_millis(700));
        let seen = log.0.lock().unwrap().clone();
        assert_eq!((seen[0].0, seen[0].1), (id, 2));
        wait_state(&store, id, TaskState::Done, Duration::from_secs(5)).await;
        assert_eq!(second.stats().reclaimed, 1);
        second.shutdown().await.unwrap();
    }
}

on_both! {
    /// A task scheduled from another process (another pool on the same
    /// database) reaches the scheduler: by NOTIFY on PostgreSQL, by the
    /// catch-up poll on SQLite. The window is a minute long, so the next
    /// window load, the only other way in, comes long after the wait.
    async fn other_process_schedules_reach_the_wheel(db: Db) {
        let store = db.open().await;
        let log = Log::default();
        let scheduler = start_logging(fast(&store).window(Duration::from_secs(60)), &log).await;
        let other = db.open().await;
        let id = other.schedule(b"from afar".to_vec()).delay(Duration::from_millis(300)).await.unwrap();
        log.wait_for(1, Duration::from_secs(10)).await;
        let seen = log.0.lock().unwrap().clone();
        assert_eq!(seen[0].0, id);
        assert!(seen[0].2 >= seen[0].3, "delivered before it was due");
        scheduler.shutdown().await.unwrap();
    }
}
