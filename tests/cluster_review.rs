//! Review tests of the multi-node path: shard bookkeeping, rebalancing and
//! lease renewal.
#![cfg(feature = "durable")]
#![allow(dead_code)]

#[path = "support/backends.rs"]
mod backends;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use backends::{Backend, Db};
use tokio_timing_wheel::durable::{Scheduler, SchedulerBuilder, Store, TaskId};

const HEARTBEAT: Duration = Duration::from_millis(300);
const TTL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
struct Run {
    node: usize,
    task: TaskId,
    started: SystemTime,
    ended: SystemTime,
    due: SystemTime,
}

#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<Vec<Run>>>);

impl Ledger {
    fn runs(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    fn per_task(&self) -> HashMap<TaskId, Vec<Run>> {
        let mut map: HashMap<TaskId, Vec<Run>> = HashMap::new();
        for run in self.runs() {
            map.entry(run.task).or_default().push(run);
        }
        map
    }

    fn unique(&self) -> usize {
        self.per_task().len()
    }

    async fn wait_unique(&self, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.unique() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} tasks delivered within {within:?}",
                self.unique()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn node(store: &Store, name: &str) -> SchedulerBuilder {
    Scheduler::builder(store.clone())
        .node_id(name)
        .window(Duration::from_secs(3))
        .catch_up_interval(Duration::from_millis(200))
        .heartbeat(HEARTBEAT)
        .lease_ttl(TTL)
        .callback_timeout(Duration::from_secs(5))
        .lock_grace(Duration::from_secs(3))
}

async fn start(
    builder: SchedulerBuilder,
    index: usize,
    ledger: &Ledger,
    work: Duration,
) -> Scheduler {
    let ledger = ledger.clone();
    builder
        .start(move |task| {
            let ledger = ledger.clone();
            async move {
                let started = SystemTime::now();
                tokio::time::sleep(work).await;
                ledger.0.lock().unwrap().push(Run {
                    node: index,
                    task: task.id(),
                    started,
                    ended: SystemTime::now(),
                    due: task.run_at(),
                });
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap()
}

async fn spread(store: &Store, n: u64, over: Duration, after: Duration) -> Vec<TaskId> {
    let start = SystemTime::now() + after;
    let mut ids = Vec::with_capacity(n as usize);
    for i in 0..n {
        let at = start + over.mul_f64(i as f64 / n as f64);
        ids.push(
            store
                .schedule(i.to_le_bytes().to_vec())
                .at(at)
                .await
                .unwrap(),
        );
    }
    ids
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

on_both! {
    /// A task due at once is armed by several paths (the in-process
    /// announcement, NOTIFY, the catch-up poll); two of them can put it in
    /// the same fired batch. Each delivery must still leave its shard's
    /// in-flight count as it found it: a count stuck above zero means the
    /// shard can never be given back to a node that joins.
    async fn in_flight_returns_to_zero_and_idle_shards_are_given_back(db: Db) {
        let (sa, sb) = (db.open().await, db.open().await);
        let shards = sa.shards();
        let ledger = Ledger::default();
        let a = start(node(&sa, "a"), 0, &ledger, Duration::from_millis(1)).await;
        let mut ids = Vec::new();
        for i in 0..300u32 {
            ids.push(sa.schedule(i.to_le_bytes().to_vec()).await.unwrap());
        }
        ledger.wait_unique(ids.len(), Duration::from_secs(20)).await;
        // Let the last outcomes be written and nothing fire any more.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let stats = a.stats();
        eprintln!("a: {stats:?}");
        let b = start(node(&sb, "b"), 1, &ledger, Duration::from_millis(1)).await;
        let joined = Instant::now();
        while b.stats().shards_owned < shards / 2 && joined.elapsed() < HEARTBEAT * 10 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (got_a, got_b) = (a.stats().shards_owned, b.stats().shards_owned);
        assert_eq!(stats.in_flight, 0, "nothing is in flight, yet a counts {}", stats.in_flight);
        assert_eq!((got_a, got_b), (shards / 2, shards / 2), "idle shards were not given back");
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }
}
on_both! {
    /// A node that joins while every shard of the other always has a
    /// delivery in flight (steady load, handlers slower than the gap between
    /// tasks of one shard) must still get its share: rebalancing cannot wait
    /// for a shard to be idle at the instant a heartbeat looks.
    async fn a_joining_node_gets_its_share_under_steady_load(db: Db) {
        let (sa, sb) = (db.open().await, db.open().await);
        let shards = sa.shards();
        let ledger = Ledger::default();
        // Each delivery takes 400 ms; a task every 10 ms, so each of the 16
        // shards gets one every 160 ms and always has two or three in flight.
        let a = start(node(&sa, "a"), 0, &ledger, Duration::from_millis(400)).await;
        let ids = spread(&sa, 1_200, Duration::from_secs(12), Duration::from_millis(300)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(a.stats().shards_owned, shards);

        let b = start(node(&sb, "b"), 1, &ledger, Duration::from_millis(400)).await;
        let joined = Instant::now();
        let bound = HEARTBEAT * 10;
        while b.stats().shards_owned < shards / 2 && joined.elapsed() < bound {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (got_a, got_b) = (a.stats().shards_owned, b.stats().shards_owned);
        eprintln!("after {:?}: a holds {got_a}, b holds {got_b}", joined.elapsed());
        assert_eq!(
            (got_a, got_b),
            (shards / 2, shards / 2),
            "the joining node did not get its share within {bound:?} under load"
        );
        // Nothing lost, no duplicates: a graceful rebalance.
        ledger.wait_unique(ids.len(), Duration::from_secs(25)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(ledger.per_task().values().all(|r| r.len() == 1), "no duplicates without a crash");
        for run in ledger.runs() {
            assert!(run.started >= run.due);
        }
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }
}

/// A burst of tasks scheduled into the window (here by another process,
/// found by the catch-up poll) makes the window loads and polls arm many
/// timers. The heartbeat must not wait behind them: no lease of a healthy,
/// running node may expire (another node would take it, and fence the
/// outcomes of the deliveries it had in flight).
///
/// PostgreSQL only: on SQLite the bulk insert that sets the scene holds the
/// one write lock, and that, not the scheduler, stalls the heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_do_not_wait_behind_window_loads() {
    let Some(db) = Db::new(
        Backend::Postgres,
        "heartbeats_do_not_wait_behind_window_loads",
    ) else {
        return;
    };
    let store = db.open().await;
    let ledger = Ledger::default();
    let builder = Scheduler::builder(store.clone())
        .node_id("a")
        .window(Duration::from_secs(60))
        .catch_up_interval(Duration::from_millis(100))
        .heartbeat(Duration::from_millis(100))
        .lease_ttl(Duration::from_millis(500));
    let a = start(builder, 0, &ledger, Duration::from_millis(1)).await;
    // 300,000 tasks due 40-50 s from now, written by "another process" (no
    // notification: the catch-up poll finds them).
    let base = now_ms() + 40_000;
    db.exec(&format!(
        "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 300000) \
         INSERT INTO ttw_tasks (run_at, payload, created_at, updated_at) \
         SELECT {base} + (n % 10000), CAST('' AS BYTEA), {now}, {now} FROM s",
        now = now_ms()
    ))
    .await;
    // Watch the leases for a few seconds: none may run out.
    let watch = Instant::now();
    let mut worst = i64::MIN;
    while watch.elapsed() < Duration::from_secs(6) {
        let now = now_ms();
        let lag = db
            .query_i64(&format!("SELECT {now} - MIN(expires_at) FROM ttw_leases"))
            .await;
        worst = worst.max(lag);
        assert!(
            lag <= 0,
            "a healthy node's lease expired {lag} ms ago, {:?} into the burst",
            watch.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("closest a lease came to expiring: {} ms before", -worst);
    a.abort();
}
