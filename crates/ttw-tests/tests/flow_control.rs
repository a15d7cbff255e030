//! Flow control across nodes, on SQLite and PostgreSQL: a queue's global
//! concurrency and rate hold over three nodes (each a store with a pool of
//! its own, as three processes would have), a limit lowered while tasks
//! run, a pause every node obeys (a node restarted while paused too), and
//! bad settings refused. The real-process measurements are the example
//! `flow_control` (BENCHMARKS.md).
//!
//! Real time, generous bounds: the limits are asserted exactly (never more
//! than the limit at once, never more starts than the bucket allows), how
//! busy the nodes kept the queue is only printed.

#[path = "support/settings.rs"]
mod settings;

#[path = "support/backends.rs"]
mod backends;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backends::{Backend, Db};
use settings::fast;
use ttw_durable::{Backoff, NewTask, QueueLimits, Rate, RetryPolicy, Scheduler, Store};

/// What the handlers saw: how many ran at once, the most at once, and
/// when each started and ended.
#[derive(Clone, Default)]
struct Overlap {
    now: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

impl Overlap {
    /// The most running at once, from the log of starts and ends.
    fn most(&self) -> usize {
        self.most_from(None)
    }

    /// The most running at once among the deliveries that started at or
    /// after `from`, counting every delivery still running then.
    fn most_from(&self, from: Option<Instant>) -> usize {
        let mut events: Vec<(Instant, i32)> = Vec::new();
        for &(start, end) in self.log.lock().unwrap().iter() {
            if from.is_none_or(|f| end > f) {
                events.push((start.max(from.unwrap_or(start)), 1));
                events.push((end, -1));
            }
        }
        // Ends before starts at the same instant.
        events.sort();
        let (mut now, mut most) = (0i32, 0i32);
        for (_, step) in events {
            now += step;
            most = most.max(now);
        }
        most as usize
    }

    fn starts(&self) -> Vec<Instant> {
        let mut starts: Vec<Instant> = self.log.lock().unwrap().iter().map(|s| s.0).collect();
        starts.sort();
        starts
    }

    fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    async fn wait_for(&self, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.count() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of {n} deliveries within {within:?}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// One run of a debounced task: when (by the test's clock and the wall
/// clock), when it was due, its payload.
type Run = (
    Instant,
    std::time::SystemTime,
    std::time::SystemTime,
    String,
);

/// A node serving `queue` on `store`, whose handler takes `took` and logs
/// into `overlap`.
async fn node(
    store: &Store,
    name: &str,
    queue: &str,
    took: Duration,
    overlap: &Overlap,
) -> Scheduler {
    let overlap = overlap.clone();
    fast(store)
        .node_id(name)
        .max_concurrency(64)
        .handle(queue, move |_task| {
            let overlap = overlap.clone();
            async move {
                overlap.now.fetch_add(1, Ordering::SeqCst);
                let start = Instant::now();
                tokio::time::sleep(took).await;
                overlap.now.fetch_sub(1, Ordering::SeqCst);
                overlap.log.lock().unwrap().push((start, Instant::now()));
                Ok::<_, String>(())
            }
        })
        .start_queues()
        .await
        .unwrap()
}

/// Three stores on `db`, each with a pool of its own.
async fn three(db: &Db) -> Vec<Store> {
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(db.open().await);
    }
    stores
}

async fn schedule_now(store: &Store, queue: &str, n: usize) {
    store
        .schedule_batch((0..n).map(|i| NewTask::new(format!("{i}")).queue(queue)))
        .await
        .unwrap();
}

/// Held by each case that counts how many of one key's tasks went ahead of
/// another's, so that two such cases (each three nodes on two cores) do not
/// run at once: on a machine this loaded, a task came due while its node
/// waited for a core, and the places that freed meanwhile went to the
/// other key, a count of 13 to 28 where the claim's turns allow 12 (seen
/// before this lock, on the commit before the session's changes too).
async fn one_fairness_case_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static CASES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    CASES.lock().await
}

on_both! {
    /// Concurrency 8 over three nodes, 100 ms handlers, 160 tasks due at
    /// once: never more than 8 run at once, all are delivered; lowered to 2
    /// half-way, never more than 8 before and, once the tasks started
    /// before the change have ended, never more than 2.
    async fn a_global_concurrency_holds_across_three_nodes_and_can_be_lowered(db: Db) {
        let stores = three(&db).await;
        stores[0].set_queue_limits("partner", QueueLimits::new().concurrency(8)).await.unwrap();
        let overlap = Overlap::default();
        let mut nodes = Vec::new();
        for (i, store) in stores.iter().enumerate() {
            nodes.push(node(store, &format!("n{i}"), "partner", Duration::from_millis(100), &overlap).await);
        }
        let started = Instant::now();
        schedule_now(&stores[0], "partner", 160).await;
        overlap.wait_for(80, Duration::from_secs(60)).await;
        let first_half = started.elapsed();
        stores[1].set_queue_limits("partner", QueueLimits::new().concurrency(2)).await.unwrap();
        let changed = Instant::now();
        overlap.wait_for(160, Duration::from_secs(120)).await;
        assert!(overlap.most() <= 8, "{} ran at once under a limit of 8", overlap.most());
        // The tasks claimed before the change end within 100 ms of it (and
        // a claim in flight just then within 200 ms).
        let settled = changed + Duration::from_millis(300);
        let after = overlap.most_from(Some(settled));
        assert!(after <= 2, "{after} ran at once under a limit of 2");
        let busy = 80.0 * 0.1 / first_half.as_secs_f64();
        println!("limit 8: {busy:.2} busy on average over the first 80; most at once after lowering to 2: {after}");
        for node in nodes {
            node.shutdown().await.unwrap();
        }
        assert_eq!(stores[0].counts().await.unwrap().done, 160);
    }
}

on_both! {
    /// A rate of 20 a second with bursts of 5, over three nodes, 60 tasks
    /// due at once: the first second holds at most 5 + 20 starts, every
    /// second at most 20 + 5, and the run takes at least (60 - 5) / 20 s.
    async fn a_rate_holds_across_three_nodes(db: Db) {
        let stores = three(&db).await;
        let rate = Rate::per_second(20).burst(5);
        stores[0].set_queue_limits("sms", QueueLimits::new().rate(rate)).await.unwrap();
        let overlap = Overlap::default();
        let mut nodes = Vec::new();
        for (i, store) in stores.iter().enumerate() {
            nodes.push(node(store, &format!("n{i}"), "sms", Duration::from_millis(1), &overlap).await);
        }
        schedule_now(&stores[0], "sms", 60).await;
        overlap.wait_for(60, Duration::from_secs(30)).await;
        let starts = overlap.starts();
        let span = *starts.last().unwrap() - starts[0];
        // Starts come a few ms after the claim that paid for them: a 1 s
        // window of starts may hold a claim's worth more than the bucket's.
        let busiest = starts
            .iter()
            .map(|&from| starts.iter().filter(|&&t| t >= from && t < from + Duration::from_secs(1)).count())
            .max()
            .unwrap();
        println!("rate 20/s burst 5: 60 starts over {span:?}; busiest second {busiest}");
        assert!(busiest <= 25 + 2, "{busiest} starts in one second");
        assert!(span >= Duration::from_millis(2_600), "60 starts in {span:?}");
        for node in nodes {
            node.shutdown().await.unwrap();
        }
    }
}

on_both! {
    /// A pause stops every node from starting the queue's tasks (a node
    /// restarted while paused too), another queue goes on, and a resume
    /// delivers everything.
    async fn a_pause_holds_on_every_node_and_across_a_restart(db: Db) {
        let stores = three(&db).await;
        let overlap = Overlap::default();
        let other = Overlap::default();
        let a = node(&stores[0], "a", "campaign", Duration::from_millis(1), &overlap).await;
        let b = node(&stores[1], "b", "campaign", Duration::from_millis(1), &overlap).await;
        let c = node(&stores[2], "c", "other", Duration::from_millis(1), &other).await;
        // Running, then paused.
        schedule_now(&stores[0], "campaign", 10).await;
        overlap.wait_for(10, Duration::from_secs(10)).await;
        stores[0].pause_queue("campaign").await.unwrap();
        let paused = Instant::now();
        stores[0]
            .schedule_batch((0..30).map(|i| NewTask::new(format!("{i}")).queue("campaign").delay(Duration::from_millis(200))))
            .await
            .unwrap();
        schedule_now(&stores[0], "other", 5).await;
        other.wait_for(5, Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Node b restarts while the queue is paused.
        b.shutdown().await.unwrap();
        let b = node(&stores[1], "b2", "campaign", Duration::from_millis(1), &overlap).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let late: Vec<_> = overlap.starts().into_iter().filter(|&t| t > paused).collect();
        assert!(late.is_empty(), "{} started after the pause", late.len());
        assert_eq!(stores[0].queue_counts().await.unwrap()["campaign"].scheduled, 30);
        stores[2].resume_queue("campaign").await.unwrap();
        let resumed = Instant::now();
        overlap.wait_for(40, Duration::from_secs(10)).await;
        println!("resumed: the first start {:?} after", overlap.starts()[10] - resumed);
        for node in [a, b, c] {
            node.shutdown().await.unwrap();
        }
    }
}

on_both! {
    /// Bad settings are refused with what is wrong, and store nothing.
    async fn bad_settings_are_refused(db: Db) {
        let store = db.open().await;
        let secs = Duration::from_secs;
        for limits in [
            QueueLimits::new().concurrency(0),
            QueueLimits::new().rate(Rate::new(0, secs(1))),
            QueueLimits::new().rate(Rate::new(1, Duration::ZERO)),
            QueueLimits::new().rate(Rate::per_second(10).burst(0)),
        ] {
            let err = store.set_queue_limits("q", limits).await.unwrap_err();
            assert!(err.is_config(), "{err}");
        }
        for bad in ["", "a,b", "with space"] {
            assert!(store.pause_queue(bad).await.unwrap_err().is_invalid_queue());
            assert!(store.set_queue_limits(bad, QueueLimits::new().concurrency(1)).await.unwrap_err().is_invalid_queue());
        }
        assert!(store.all_queue_settings().await.unwrap().is_empty());
        let q = store.queue_settings("q").await.unwrap();
        assert!(!q.paused && q.limits.is_empty());
    }
}

on_both! {
    /// A debounce with a longest wait: a key replaced every 100 ms for
    /// 6.5 s, each request due 1 s later, with a longest wait of 2 s, runs
    /// every 2 s (never before its time), each run a new generation with
    /// the latest payload of its own.
    async fn a_debounce_runs_at_its_longest_wait_then_starts_again(db: Db) {
        let store = db.open().await;
        let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
        let log = runs.clone();
        let node = fast(&store)
            .start(move |task| {
                let log = log.clone();
                async move {
                    let payload = String::from_utf8(task.payload().to_vec()).unwrap();
                    log.lock().unwrap().push((Instant::now(), std::time::SystemTime::now(), task.run_at(), payload));
                    Ok::<_, String>(())
                }
            })
            .await
            .unwrap();
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < Duration::from_millis(6_500) {
            store
                .schedule(format!("{n}"))
                .idempotency_key("debounce:sync")
                .delay(Duration::from_secs(1))
                .max_wait(Duration::from_secs(2))
                .replace_pending()
                .submit()
                .await
                .unwrap();
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let runs = runs.lock().unwrap().clone();
        let after: Vec<u128> = runs.iter().map(|r| (r.0 - started).as_millis()).collect();
        println!("debounce: runs at {after:?} ms after the first request");
        assert!(runs.len() >= 3, "{} runs", runs.len());
        for (_, ran, due, payload) in &runs {
            assert!(ran >= due, "run {payload} came early");
        }
        // The first at 2 s; each next one 2 s after a request that came
        // within 100 ms of the run before it.
        assert!((2_000..2_600).contains(&after[0]), "{after:?}");
        for pair in after.windows(2).take(2) {
            let gap = pair[1] - pair[0];
            assert!((2_000..2_700).contains(&gap), "{after:?}");
        }
        let payloads: Vec<&str> = runs.iter().map(|r| r.3.as_str()).collect();
        let unique: std::collections::BTreeSet<_> = payloads.iter().collect();
        assert_eq!(unique.len(), payloads.len(), "each generation runs once: {payloads:?}");
        node.shutdown().await.unwrap();
    }
}

on_both! {
    /// Regression: without a per-key cap, a queue's limited claim gave
    /// free places to the earliest due tasks, so key B's tasks waited
    /// behind key A's whole backlog (up to 1,560 of A's started ahead of
    /// one of B's, across three nodes). Free places now go to keys in turn
    /// across nodes: once one of B's tasks is due, only the A tasks already
    /// on their way to a place start before it (counted, not timed).
    async fn keys_take_turns_across_nodes_without_a_cap(db: Db) {
        let _alone = one_fairness_case_at_a_time().await;
        let stores = three(&db).await;
        stores[0]
            .set_queue_limits("tenants", QueueLimits::new().concurrency(4))
            .await
            .unwrap();
        type Run = (String, Instant, std::time::SystemTime, std::time::SystemTime);
        let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
        let mut nodes = Vec::new();
        for (i, store) in stores.iter().enumerate() {
            let runs = runs.clone();
            nodes.push(
                fast(store)
                    .node_id(format!("n{i}"))
                    .handle("tenants", move |task| {
                        let runs = runs.clone();
                        async move {
                            let who = String::from_utf8_lossy(task.payload()).to_string();
                            runs.lock().unwrap().push((who, Instant::now(), std::time::SystemTime::now(), task.run_at()));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok::<_, String>(())
                        }
                    })
                    .start_queues()
                    .await
                    .unwrap(),
            );
        }
        stores[0]
            .schedule_batch((0..400).map(|_| NewTask::new("A").queue("tenants").partition_key("A")))
            .await
            .unwrap();
        stores[0]
            .schedule_batch((0..5).map(|i| {
                NewTask::new("B").queue("tenants").partition_key("B").delay(Duration::from_millis(500 + 300 * i))
            }))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while runs.lock().unwrap().iter().filter(|r| r.0 == "B").count() < 5 {
            assert!(tokio::time::Instant::now() < deadline, "B's tasks did not all run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for node in nodes {
            node.shutdown().await.unwrap();
        }
        let runs = runs.lock().unwrap().clone();
        // For each of B's tasks: A's starts after it was due, before it ran.
        let ahead: Vec<usize> = runs
            .iter()
            .filter(|b| b.0 == "B")
            .map(|b| runs.iter().filter(|a| a.0 == "A" && a.2 >= b.3 && a.1 < b.1).count())
            .collect();
        let a_done = runs.iter().filter(|r| r.0 == "A").count();
        println!("keys in turn: A's starts ahead of each of B's {ahead:?}; {a_done} of A's 400 ran meanwhile");
        assert!(a_done < 400, "A's backlog drained first");
        // The 12 places of A's tasks on their way (4 on each of three nodes)
        // when one of B's came due, and the 4 that turn over while B's task,
        // due, waits up to one 50 ms handler time for a core to fire it on a
        // loaded machine. The fault this catches let 1,560 go ahead.
        assert!(ahead.iter().all(|&n| n <= 16), "A's tasks went ahead of B's: {ahead:?}");
    }
}

on_both! {
    /// Fairness by key over two nodes: key A's 600 tasks are due at once,
    /// key B's 10 come due over 2 s; with 4 at once in the queue and 2 at
    /// once per key, 50 ms handlers, B's tasks start with at most a few of
    /// A's started ahead of them (the places A held when B came due)
    /// although A's backlog would take 7 s and more to drain, and never
    /// more than 2 of A's run at once.
    async fn a_key_s_backlog_leaves_room_for_the_other_keys(db: Db) {
        let _alone = one_fairness_case_at_a_time().await;
        let stores = three(&db).await;
        stores[0]
            .set_queue_limits("tenants", QueueLimits::new().concurrency(4).per_key_concurrency(2))
            .await
            .unwrap();
        type Run = (String, Instant, Instant, std::time::SystemTime, std::time::SystemTime);
        let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
        let mut nodes = Vec::new();
        for (i, store) in stores.iter().take(2).enumerate() {
            let runs = runs.clone();
            nodes.push(
                fast(store)
                    .node_id(format!("n{i}"))
                    .handle("tenants", move |task| {
                        let runs = runs.clone();
                        async move {
                            let (start, wall) = (Instant::now(), std::time::SystemTime::now());
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            let who = String::from_utf8_lossy(task.payload()).to_string();
                            runs.lock().unwrap().push((who, start, Instant::now(), wall, task.run_at()));
                            Ok::<_, String>(())
                        }
                    })
                    .start_queues()
                    .await
                    .unwrap(),
            );
        }
        stores[0]
            .schedule_batch((0..600).map(|_| NewTask::new("A").queue("tenants").partition_key("A")))
            .await
            .unwrap();
        stores[0]
            .schedule_batch((0..10).map(|i| {
                NewTask::new("B").queue("tenants").partition_key("B").delay(Duration::from_millis(300 + 200 * i))
            }))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while runs.lock().unwrap().iter().filter(|r| r.0 == "B").count() < 10 {
            assert!(tokio::time::Instant::now() < deadline, "B's tasks did not all run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for node in nodes {
            node.shutdown().await.unwrap();
        }
        let runs = runs.lock().unwrap().clone();
        // For each of B's tasks: A's starts after it was due, before it ran.
        let ahead: Vec<usize> = runs
            .iter()
            .filter(|b| b.0 == "B")
            .map(|b| runs.iter().filter(|a| a.0 == "A" && a.3 >= b.4 && a.1 < b.1).count())
            .collect();
        let a_done = runs.iter().filter(|r| r.0 == "A").count();
        println!("fairness: A's starts ahead of each of B's {ahead:?}; {a_done} of A's 600 done meanwhile");
        // A's places (its cap, 2) on their way and 2 more, and the 2 that
        // turn over while B's task, due, waits up to one 50 ms handler time
        // for a core to fire it on a loaded machine; A's backlog is 600.
        assert!(ahead.iter().all(|&n| n <= 6), "B waited behind A: {ahead:?}");
        assert!(a_done < 600, "A's backlog drained first");
        let overlap = Overlap::default();
        overlap.log.lock().unwrap().extend(runs.iter().filter(|r| r.0 == "A").map(|r| (r.1, r.2)));
        assert!(overlap.most() <= 2, "{} of A's ran at once", overlap.most());
        let all = Overlap::default();
        all.log.lock().unwrap().extend(runs.iter().map(|r| (r.1, r.2)));
        assert!(all.most() <= 4, "{} ran at once", all.most());
    }
}

on_both! {
    /// A queue's retry policy from the database, over the node's own: the
    /// node would wait 30 s between 5 attempts; the queue says 3 attempts,
    /// 50 ms apart, so a failing task is dead after 3 within seconds.
    async fn a_queue_s_retry_policy_overrides_the_node_s(db: Db) {
        let store = db.open().await;
        store
            .set_queue_retry(
                "flaky",
                RetryPolicy::new()
                    .max_attempts(3)
                    .backoff(Backoff::exponential(Duration::from_millis(50), Duration::from_millis(100))),
            )
            .await
            .unwrap();
        let attempts = Arc::new(AtomicUsize::new(0));
        let count = attempts.clone();
        let node = fast(&store)
            .max_attempts(5)
            .backoff(Backoff::exponential(Duration::from_secs(30), Duration::from_secs(60)))
            .handle("flaky", move |_task| {
                count.fetch_add(1, Ordering::SeqCst);
                async { Err::<(), _>("down".to_string()) }
            })
            .start_queues()
            .await
            .unwrap();
        let id = store.schedule("x").queue("flaky").await.unwrap();
        settings::wait_state(&store, id, ttw_durable::TaskState::Dead, Duration::from_secs(15)).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
        assert_eq!(store.get(id).await.unwrap().unwrap().attempts, 3);
        let bad = RetryPolicy::new().max_attempts(0);
        assert!(store.set_queue_retry("flaky", bad).await.unwrap_err().is_config());
        node.shutdown().await.unwrap();
    }
}
