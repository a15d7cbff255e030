//! The webhook target against a real receiver written apart from the crate:
//! `support/receiver.py`, Python's standard library, which checks every
//! signature with its own `hmac` and is killed with `SIGKILL` and started
//! again mid-run. Real TCP on loopback; the scheduler on each backend.
#![cfg(all(target_os = "linux", feature = "webhook"))]

#[path = "support/backends.rs"]
#[macro_use]
mod backends;
#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/states.rs"]
mod states;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backends::{Backend, Db};
use receiver::{Receiver, SECRET};
use states::wait_for_state;
use ttw_durable::{
    Backoff, Destination, Envelope, Scheduler, SchedulerBuilder, Store, TaskId, TaskState, Webhook,
};

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// A scheduler with quick retries, serving queue `hooks` with `webhook`.
fn scheduler(store: &Store, webhook: Webhook) -> SchedulerBuilder {
    Scheduler::builder(store.clone())
        .backoff(Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(400),
        ))
        .max_attempts(100)
        .callback_timeout(Duration::from_secs(10))
        .deliver("hooks", webhook)
}

fn webhook(receiver: &Receiver) -> Webhook {
    Webhook::builder(receiver.url("/due"))
        .secret(SECRET)
        .timeout(Duration::from_secs(2))
        .content_type("text/plain")
        .build()
        .unwrap()
}

on_both! {
    /// Every task arrives once, on time, with a signature the receiver's
    /// own `hmac` verifies, a fresh timestamp, and the task's fields.
    async fn deliveries_are_signed_and_carry_the_task(db: Db) {
        let store = db.open().await;
        let receiver = Receiver::start().await;
        let scheduler = scheduler(&store, webhook(&receiver)).start_queues().await.unwrap();
        let mut ids = Vec::new();
        for i in 0..20u64 {
            let id = store
                .schedule(format!("order {i}").into_bytes())
                .queue("hooks")
                .delay(Duration::from_millis(100 + 20 * i))
                .idempotency_key(format!("order-{i}"))
                .await
                .unwrap();
            ids.push(id);
        }
        wait_for_state(&store, &ids, TaskState::Done, Duration::from_secs(30)).await;
        scheduler.shutdown().await.unwrap();
        let seen = receiver.requests();
        assert_eq!(seen.len(), 20, "one request a task: {seen:?}");
        for r in &seen {
            assert_eq!(r["verified"], true, "signature verified by Python: {r}");
            assert_eq!(r["fresh"], true, "timestamp is now: {r}");
            assert_eq!(r["path"], "/due");
            assert_eq!(r["queue"], "hooks");
            assert_eq!(r["attempt"], 1);
            assert_eq!(r["content_type"], "text/plain");
            let task = r["task"].as_i64().unwrap();
            assert_eq!(r["webhook_id"], format!("ttw-{task}-0"));
            let i = r["body"].as_str().unwrap().strip_prefix("order ").unwrap();
            assert_eq!(r["key"], format!("order-{i}"));
            assert!(
                r["arrived_ms"].as_f64().unwrap() >= r["run_at_ms"].as_f64().unwrap(),
                "never early: {r}"
            );
        }
        let tasks: HashSet<i64> = seen.iter().map(|r| r["task"].as_i64().unwrap()).collect();
        assert_eq!(tasks, ids.iter().map(|id| id.get()).collect());
    }
}

on_both! {
    /// The receiver is killed with `SIGKILL` while tasks fall due and comes
    /// back 1.5 s later on its port: every task is delivered once it is
    /// back, none is lost, none arrives early, and the attempts made while
    /// it was down were failed and retried.
    async fn a_receiver_killed_and_restarted_loses_nothing(db: Db) {
        let store = db.open().await;
        let mut receiver = Receiver::start().await;
        let scheduler = scheduler(&store, webhook(&receiver)).start_queues().await.unwrap();
        let mut ids = Vec::new();
        for i in 0..150u64 {
            let id = store
                .schedule(format!("t{i}").into_bytes())
                .queue("hooks")
                .delay(Duration::from_millis(200 + 20 * i))
                .await
                .unwrap();
            ids.push(id);
        }
        tokio::time::sleep(Duration::from_millis(1200)).await;
        receiver.kill().await;
        let killed_at = now_ms();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let receiver = receiver.restart().await;
        wait_for_state(&store, &ids, TaskState::Done, Duration::from_secs(60)).await;
        let stats = scheduler.stats();
        scheduler.shutdown().await.unwrap();

        let accepted = receiver.accepted();
        let per_task: HashMap<i64, usize> = accepted.iter().fold(HashMap::new(), |mut m, r| {
            *m.entry(r["task"].as_i64().unwrap()).or_default() += 1;
            m
        });
        for id in &ids {
            assert!(per_task.contains_key(&id.get()), "task {id} never arrived");
        }
        for r in receiver.requests() {
            assert!(r["arrived_ms"].as_f64().unwrap() >= r["run_at_ms"].as_f64().unwrap(), "early: {r}");
            assert_eq!(r["verified"], true);
        }
        let before = accepted.iter().filter(|r| r["arrived_ms"].as_f64().unwrap() < killed_at).count();
        assert!(before > 0 && before < ids.len(), "the kill fell mid-run: {before} before it");
        assert!(stats.retried > 0, "attempts while the receiver was down failed and were retried: {stats:?}");
        let retried = accepted.iter().filter(|r| r["attempt"].as_i64().unwrap() > 1).count();
        assert!(retried > 0, "some tasks arrived on a later attempt");
    }
}

on_both! {
    /// A receiver slower than the webhook's timeout: the attempt fails at
    /// the timeout (not the scheduler's much longer `callback_timeout`),
    /// with that in its last error, is retried, and the task is done;
    /// nothing is left running.
    async fn a_receiver_slower_than_the_timeout_fails_the_attempt_at_the_timeout(db: Db) {
        let store = db.open().await;
        let receiver = Receiver::start().await;
        let hook = Webhook::builder(receiver.url("/slow"))
            .secret(SECRET)
            .timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        let scheduler = scheduler(&store, hook).start_queues().await.unwrap();
        let id = store
            .schedule(b"sleep_ms=1500;times=1".to_vec())
            .queue("hooks")
            .await
            .unwrap();
        wait_for_state(&store, &[id], TaskState::Done, Duration::from_secs(30)).await;
        let info = store.get(id).await.unwrap().unwrap();
        assert_eq!(info.attempts, 2, "{info:?}");
        let error = info.last_error.unwrap_or_default();
        assert!(error.contains("webhook timed out after 300ms"), "{error}");
        // The second attempt followed the first's timeout and the backoff
        // (100-400 ms), not the 10 s callback_timeout.
        let seen = receiver.requests();
        let first = seen.iter().find(|r| r["attempt"] == 1).unwrap()["arrived_ms"].as_f64().unwrap();
        let second = seen.iter().find(|r| r["attempt"] == 2).unwrap()["arrived_ms"].as_f64().unwrap();
        // Measured at the receiver: the first request arrives a few ms
        // after its attempt (and its timeout) started, so allow 20 ms of it
        // (a loaded machine gave 346.5 where 350 was asked).
        assert!(second - first >= 300.0 + 50.0 - 20.0, "{first} {second}");
        assert!(second - first < 5_000.0, "retried long before the callback_timeout: {first} {second}");
        assert_eq!(store.counts().await.unwrap().running, 0);
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// What each answer means: `429` with `Retry-After: 2` puts the next
    /// attempt 2 s later (the backoff is 100-400 ms); `410` makes the task
    /// dead at once, its last error holding the status and the answer's
    /// body; a `500` is retried after the backoff with its body recorded
    /// meanwhile.
    async fn the_answer_decides_the_outcome(db: Db) {
        let store = db.open().await;
        let receiver = Receiver::start().await;
        let scheduler = scheduler(&store, webhook(&receiver)).start_queues().await.unwrap();
        let busy = store.schedule(b"status=429;retry_after=2;times=1".to_vec()).queue("hooks").await.unwrap();
        let gone = store.schedule(b"status=410".to_vec()).queue("hooks").await.unwrap();
        let broken = store.schedule(b"status=500;times=2".to_vec()).queue("hooks").await.unwrap();
        wait_for_state(&store, &[gone], TaskState::Dead, Duration::from_secs(30)).await;
        wait_for_state(&store, &[busy, broken], TaskState::Done, Duration::from_secs(30)).await;
        scheduler.shutdown().await.unwrap();

        let gone = store.get(gone).await.unwrap().unwrap();
        assert_eq!(gone.attempts, 1, "dead at once: {gone:?}");
        let error = gone.last_error.unwrap();
        assert!(error.contains("410") && error.contains("refused with 410 by the receiver"), "{error}");

        let arrivals = |id: TaskId| -> Vec<f64> {
            receiver
                .requests()
                .iter()
                .filter(|r| r["task"] == id.get())
                .map(|r| r["arrived_ms"].as_f64().unwrap())
                .collect()
        };
        let busy_at = arrivals(busy);
        assert_eq!(busy_at.len(), 2);
        assert!(busy_at[1] - busy_at[0] >= 1_990.0, "Retry-After: 2 was followed: {busy_at:?}");
        let broken_at = arrivals(broken);
        assert_eq!(broken_at.len(), 3);
        assert!(broken_at[1] - broken_at[0] < 1_500.0, "a 500 waits the backoff: {broken_at:?}");
        let broken = store.get(broken).await.unwrap().unwrap();
        assert_eq!(broken.attempts, 3);
    }
}

on_both! {
    /// The report: an answer of 100 KB of 4-byte characters, kept cut at
    /// its bound (1,024 bytes as a success's answer and an attempt's
    /// detail, 256 of the body in a failure's last error), ended in
    /// U+FFFD, a character the answer never had. Every text kept of it
    /// now ends at the last whole character within its bound.
    async fn a_wide_answer_is_kept_cut_at_a_character_boundary(db: Db) {
        let store = db.open().await;
        let receiver = Receiver::start().await;
        let scheduler = scheduler(&store, webhook(&receiver)).start_queues().await.unwrap();
        let done = store.schedule(b"answer=wide".to_vec()).queue("hooks").await.unwrap();
        let failed = store
            .schedule(b"status=500;answer=wide;times=1".to_vec())
            .queue("hooks")
            .await
            .unwrap();
        let dead = store.schedule(b"status=410;answer=wide".to_vec()).queue("hooks").await.unwrap();
        wait_for_state(&store, &[done, failed], TaskState::Done, Duration::from_secs(30)).await;
        wait_for_state(&store, &[dead], TaskState::Dead, Duration::from_secs(30)).await;
        scheduler.shutdown().await.unwrap();

        let whole = |text: &str, most: usize| {
            assert!(!text.contains('\u{FFFD}'), "a character the answer never had: ...{:?}", text.chars().rev().take(3).collect::<String>());
            assert!(text.len() <= most && text.len() + 4 > most, "{} bytes for a bound of {most}", text.len());
        };
        let answer = |attempts: &[ttw_durable::AttemptInfo], n: usize| attempts[n].detail.clone().unwrap();
        let attempts = store.attempts(done).await.unwrap();
        whole(&answer(&attempts, 0), 1_024);
        let attempts = store.attempts(failed).await.unwrap();
        let error = answer(&attempts, 0);
        assert!(error.starts_with("webhook answered HTTP 500"), "{error}");
        whole(error.split_once(": ").unwrap().1, 256);
        whole(&answer(&attempts, 1), 1_024);
        let dead = store.get(dead).await.unwrap().unwrap();
        let error = dead.last_error.unwrap();
        whole(error.split_once(": ").unwrap().1, 256);
    }
}

on_both! {
    /// A task's own destination: under a prefix the webhook allows, it goes
    /// there (its method, its header, the trace context it was scheduled
    /// with, signed as every delivery); under none, the task is dead at once
    /// with the reason and no request is made.
    async fn a_task_s_own_destination_is_used_only_under_an_allowed_prefix(db: Db) {
        let store = db.open().await;
        let receiver = Receiver::start().await;
        let hook = Webhook::builder(receiver.url("/due"))
            .secret(SECRET)
            .timeout(Duration::from_secs(2))
            .allow_destinations([receiver.url("/dest/")])
            .build()
            .unwrap();
        let scheduler = scheduler(&store, hook).start_queues().await.unwrap();
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let allowed = store
            .schedule(b"order 7".to_vec())
            .queue("hooks")
            .envelope(
                Envelope::new()
                    .destination(
                        Destination::new(receiver.url("/dest/orders/7"))
                            .method("PUT")
                            .header("x-tenant", "acme"),
                    )
                    .traceparent(traceparent)
                    .tracestate("vendor=1"),
            )
            .await
            .unwrap();
        let elsewhere = store
            .schedule(b"order 8".to_vec())
            .queue("hooks")
            .envelope(Envelope::new().destination(Destination::new(receiver.url("/other/8"))))
            .await
            .unwrap();
        wait_for_state(&store, &[allowed], TaskState::Done, Duration::from_secs(30)).await;
        wait_for_state(&store, &[elsewhere], TaskState::Dead, Duration::from_secs(30)).await;
        scheduler.shutdown().await.unwrap();

        let seen = receiver.requests();
        assert_eq!(seen.len(), 1, "one request, to the allowed destination: {seen:?}");
        let r = &seen[0];
        assert_eq!(r["task"], allowed.get());
        assert_eq!((r["method"].as_str(), r["path"].as_str()), (Some("PUT"), Some("/dest/orders/7")));
        assert_eq!(r["tenant"], "acme");
        assert_eq!(r["traceparent"], traceparent);
        assert_eq!(r["tracestate"], "vendor=1");
        assert_eq!(r["verified"], true);
        let dead = store.get(elsewhere).await.unwrap().unwrap();
        assert_eq!(dead.attempts, 1, "dead at once: {dead:?}");
        let error = dead.last_error.unwrap_or_default();
        assert!(error.contains("not under a prefix this webhook allows"), "{error}");
        let kept = store.get(allowed).await.unwrap().unwrap().envelope.unwrap();
        assert_eq!(kept.get_traceparent(), Some(traceparent));
    }
}

/// Bad configuration is refused with a clear error before anything runs: a
/// target whose timeout outlives the scheduler's `callback_timeout` (which
/// could not fence it), and each bad webhook setting.
#[tokio::test]
async fn bad_configuration_is_refused_at_start() {
    let db = Db::new(Backend::Sqlite, "webhook_bad_config");
    let store = db.open().await;
    let hook = Webhook::builder("http://127.0.0.1:9/")
        .secret(SECRET)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let err = Scheduler::builder(store.clone())
        .callback_timeout(Duration::from_secs(10))
        .deliver("hooks", hook)
        .start_queues()
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(
        err.to_string()
            .contains("longer than the scheduler's callback_timeout"),
        "{err}"
    );
    for (builder, says) in [
        (
            Webhook::builder("file:///etc/passwd").secret(SECRET),
            "http or https",
        ),
        (
            Webhook::builder("http://127.0.0.1/")
                .secret(SECRET)
                .timeout(Duration::ZERO),
            "timeout",
        ),
        (
            Webhook::builder("http://127.0.0.1/").secret("secret"),
            "whsec_",
        ),
    ] {
        let err = builder.build().unwrap_err();
        assert!(err.is_config() && err.to_string().contains(says), "{err}");
    }
}
