//! 10,000 durable tasks over 10 s, with a crash and a restart half-way.
//!
//! ```text
//! cargo run --release --features durable --example durable
//! cargo run --release --features durable --example durable -- --postgres postgres://postgres@127.0.0.1:55432/postgres
//! ```
//!
//! Runs on an SQLite file in a temporary directory (no setup), or on
//! PostgreSQL with `--postgres URL` (in a schema of its own, dropped at the
//! end). Every 50th task fails on its first attempt (and is retried after a
//! backoff); five tasks always fail and end dead after two attempts. Half-way
//! the scheduler is aborted as a crash would stop it and a new one starts
//! under the same node id on a new pool. At the end it prints delivered,
//! retried, dead, duplicates, lost (must be 0) and lateness, and exits
//! non-zero if anything was lost.

#[path = "support/percentile.rs"]
mod percentile;

use percentile::percentile;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use tokio_timing_wheel::durable::{Backoff, Scheduler, Store, StoreBuilder, Task, TaskState};

const TASKS: u64 = 10_000;
const SPREAD: Duration = Duration::from_secs(10);
const ALWAYS_FAIL: u64 = 5;

/// What the handlers saw, shared across both scheduler runs.
#[derive(Default)]
struct Ledger {
    /// Successful deliveries per task id.
    ok: HashMap<i64, u32>,
    /// Attempts that failed on purpose.
    failed: u64,
    /// Lateness of first attempts, in milliseconds.
    lateness: Vec<f64>,
}

fn handle(ledger: &Mutex<Ledger>, task: &Task) -> Result<(), String> {
    let seq = u64::from_le_bytes(task.payload().try_into().unwrap_or_default());
    let mut ledger = ledger.lock().unwrap();
    if task.attempt() == 1 {
        let late = SystemTime::now()
            .duration_since(task.run_at())
            .unwrap_or_default();
        ledger.lateness.push(late.as_secs_f64() * 1e3);
    }
    if seq < ALWAYS_FAIL || (seq % 50 == 7 && task.attempt() == 1) {
        ledger.failed += 1;
        return Err(format!("task {seq} failed on attempt {}", task.attempt()));
    }
    *ledger.ok.entry(task.id().get()).or_default() += 1;
    Ok(())
}

async fn open(postgres: Option<&str>, schema: &str, path: &std::path::Path) -> Store {
    match postgres {
        Some(url) => {
            StoreBuilder::default()
                .postgres_schema(schema)
                .postgres(url)
                .await
        }
        None => Store::sqlite(path).await,
    }
    .expect("open the store")
}

async fn start(store: Store, ledger: Arc<Mutex<Ledger>>) -> Scheduler {
    Scheduler::builder(store)
        .node_id("demo-node")
        .window(Duration::from_secs(5))
        .callback_timeout(Duration::from_secs(1))
        .lock_grace(Duration::from_millis(500))
        .heartbeat(Duration::from_millis(500))
        .lease_ttl(Duration::from_secs(3))
        .max_attempts(4)
        .backoff(Backoff::exponential(
            Duration::from_millis(200),
            Duration::from_secs(2),
        ))
        .start(move |task| {
            let ledger = ledger.clone();
            async move {
                // A little I/O-like work, so the crash catches some in flight.
                tokio::time::sleep(Duration::from_millis(1)).await;
                handle(&ledger, &task)
            }
        })
        .await
        .expect("start the scheduler")
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mut postgres = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--postgres" => postgres = Some(args.next().expect("--postgres URL")),
            other => panic!("unknown argument {other} (try --postgres URL)"),
        }
    }
    let dir = std::env::temp_dir().join(format!("ttw-durable-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tasks.db");
    let schema = format!("durable_demo_{}", std::process::id());
    match &postgres {
        Some(url) => println!("PostgreSQL at {url}, schema {schema}"),
        None => println!("SQLite at {}", path.display()),
    }

    let store = open(postgres.as_deref(), &schema, &path).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut scheduler = Some(start(store.clone(), ledger.clone()).await);

    // Schedule every task before the first is due.
    let begin = Instant::now();
    let first_due = SystemTime::now() + Duration::from_secs(8);
    let ids: Vec<i64> = futures::stream::iter(0..TASKS)
        .map(|seq| {
            let store = store.clone();
            async move {
                let at = first_due + SPREAD.mul_f64(seq as f64 / TASKS as f64);
                let mut task = store.schedule(seq.to_le_bytes().to_vec()).at(at);
                if seq < ALWAYS_FAIL {
                    task = task.max_attempts(2);
                }
                task.await.expect("schedule").get()
            }
        })
        .buffered(16)
        .collect()
        .await;
    println!(
        "scheduled {} tasks in {:.2?}, due over {SPREAD:?}",
        ids.len(),
        begin.elapsed()
    );

    let half = first_due + SPREAD / 2;
    let mut restarted = false;
    let end = first_due + SPREAD + Duration::from_secs(15);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut store = store;
    loop {
        tick.tick().await;
        let counts = store.counts().await.expect("counts");
        let stats = scheduler.as_ref().map(|s| s.stats()).unwrap_or_default();
        if let Ok(wait) = first_due.duration_since(SystemTime::now()) {
            println!(
                "waiting for the first task, due in {:.1} s ({} scheduled)",
                wait.as_secs_f64(),
                counts.scheduled
            );
            continue;
        }
        println!(
            "done {:>5}  running {:>3}  scheduled {:>5}  dead {}  | this run: delivered {:>5}, retried {:>3}, reclaimed {}",
            counts.done, counts.running, counts.scheduled, counts.dead, stats.delivered, stats.retried, stats.reclaimed
        );
        if !restarted && SystemTime::now() >= half {
            let at_crash = scheduler.take().unwrap().abort();
            println!(
                "*** crash: scheduler aborted with {} deliveries in flight; restarting on a new pool",
                at_crash.delivered - at_crash.succeeded - at_crash.failed
            );
            drop(store);
            store = open(postgres.as_deref(), &schema, &path).await;
            scheduler = Some(start(store.clone(), ledger.clone()).await);
            restarted = true;
        }
        if counts.done + counts.dead == TASKS || SystemTime::now() > end {
            break;
        }
    }
    scheduler
        .take()
        .unwrap()
        .shutdown()
        .await
        .expect("shutdown");

    let mut lost = 0;
    let mut dead = 0;
    for id in &ids {
        let info = store
            .get(tokio_timing_wheel::durable::TaskId::new(*id))
            .await
            .unwrap()
            .unwrap();
        match info.state {
            TaskState::Done => {}
            TaskState::Dead => dead += 1,
            _ => lost += 1,
        }
    }
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    let duplicates: u32 = ledger.ok.values().map(|n| n - 1).sum();
    let mut lateness = ledger.lateness.clone();
    lateness.sort_by(|a, b| a.total_cmp(b));
    println!();
    println!("delivered   {} tasks done", ledger.ok.len());
    println!(
        "retried     {} failed attempts were retried or ended dead",
        ledger.failed
    );
    println!(
        "dead        {dead} (the {ALWAYS_FAIL} tasks that always fail, after 2 attempts each)"
    );
    println!("duplicates  {duplicates} (at-least-once: tasks whose outcome the crash cut off, delivered again)");
    println!("lost        {lost}");
    println!(
        "lateness    first attempts: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (the max includes tasks due during the crash)",
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(f64::NAN)
    );

    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(url) = &postgres {
        if let Ok(pool) = sqlx::PgPool::connect(url).await {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&pool)
                .await;
        }
    }
    if lost > 0 {
        std::process::exit(1);
    }
}
