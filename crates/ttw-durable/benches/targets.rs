//! Delivery beyond the process: how fast, and how late, tasks reach a
//! webhook receiver and a NATS JetStream stream.
//!
//! ```text
//! cargo bench -p ttw-durable --features webhook,nats --bench targets
//! TTW_BENCH_TASKS=50000 cargo bench -p ttw-durable --features webhook,nats --bench targets
//! ```
//!
//! SQLite always, PostgreSQL too when `DATABASE_URL` is set; NATS when
//! `nats-server` is on the `PATH` (the bench starts its own, with JetStream,
//! on a free port). The webhook receiver is an HTTP server in this process
//! (axum), answering 200 at once. Targets at their defaults (webhook: 64
//! requests in flight; JetStream: 1,024 publishes in flight).
//!
//! `TTW_BENCH_BACKEND=sqlite` (or `postgresql`) runs one backend;
//! `TTW_BENCH_WEBHOOK_IN_FLIGHT=256` sets the webhook's `max_in_flight`
//! (default 64, the webhook's own default). Each
//! backend's first row is an in-process target under the same limit of 64
//! in flight: what the scheduler does without a network.
//!
//! - drain: N tasks due now, stored before the scheduler starts: tasks a
//!   second from the start until the receiver (or the stream's subscriber)
//!   has the last one, and until every task is marked done;
//! - steady: 10,000 tasks due evenly over 10 s (1,000 a second), scheduled
//!   3 s ahead with the scheduler running: lateness from the due time to
//!   the receiver, p50 / p99 / max.

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../examples/support/percentile.rs"]
mod percentile;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use futures::StreamExt;
use percentile::percentile;
use ttw_durable::{JetStream, NewTask, Scheduler, Store, StoreBuilder, Target, Webhook};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What a receiver saw: how many, and each one's lateness in ms.
#[derive(Default)]
struct Seen {
    count: AtomicU64,
    lateness: Mutex<Vec<f64>>,
}

impl Seen {
    fn record(&self, run_at_ms: Option<f64>) {
        if let Some(run_at) = run_at_ms {
            self.lateness.lock().unwrap().push(now_ms() - run_at);
        }
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    async fn wait_for(&self, n: u64) {
        while self.count.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = std::mem::take(&mut *self.lateness.lock().unwrap());
        v.sort_by(f64::total_cmp);
        v
    }
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3
}

/// A place for one run's tables.
struct Place {
    url: Option<String>,
    schema: String,
    dir: std::path::PathBuf,
}

impl Place {
    fn new(url: Option<String>, name: &str) -> Place {
        let schema = format!("bench_{name}_{}", std::process::id());
        let dir = std::env::temp_dir().join(&schema);
        std::fs::create_dir_all(&dir).unwrap();
        Place { url, schema, dir }
    }

    async fn store(&self) -> Store {
        let builder = StoreBuilder::default().max_connections(16);
        match &self.url {
            None => builder.sqlite(self.dir.join("tasks.db")).await,
            Some(url) => {
                builder
                    .postgres_schema(self.schema.clone())
                    .postgres(url)
                    .await
            }
        }
        .expect("open the store")
    }

    async fn drop_all(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(url) = &self.url {
            if let Ok(pool) = sqlx::PgPool::connect(url).await {
                let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema))
                    .execute(&pool)
                    .await;
                pool.close().await;
            }
        }
    }
}

/// The baseline: an in-process target that records each task and is done.
struct InProcess(Arc<Seen>);

impl Target for InProcess {
    fn deliver(&self, task: ttw_durable::Task) -> ttw_durable::Delivered {
        let run_at = task
            .run_at()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1e3;
        self.0.record(Some(run_at));
        Box::pin(async { Ok(ttw_durable::Receipt::none()) })
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn max_in_flight(&self) -> Option<usize> {
        Some(64)
    }
}

/// The webhook receiver: answers 200, records each request.
async fn receiver(seen: Arc<Seen>) -> String {
    let app = axum::Router::new().route(
        "/due",
        axum::routing::post(move |headers: HeaderMap, _body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let run_at = headers
                    .get("ttw-run-at")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok());
                seen.record(run_at);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/due", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// `nats-server -js` on a free port, if it is installed.
struct Nats {
    child: Child,
    url: String,
    dir: std::path::PathBuf,
}

impl Nats {
    async fn start() -> Option<Nats> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let dir = std::env::temp_dir().join(format!("ttw-bench-nats-{}", std::process::id()));
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let url = format!("nats://127.0.0.1:{port}");
        for _ in 0..500 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Some(Nats { child, url, dir });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fresh stream on `subject.>` and a subscriber recording arrivals.
async fn stream_and_subscriber(nats: &Nats, name: &str, seen: Arc<Seen>) -> async_nats::Client {
    let client = async_nats::connect(&nats.url).await.unwrap();
    async_nats::jetstream::new(client.clone())
        .create_stream(async_nats::jetstream::stream::Config {
            name: name.to_uppercase(),
            subjects: vec![format!("{name}.>")],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut sub = client.subscribe(format!("{name}.>")).await.unwrap();
    client.flush().await.unwrap();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let run_at = m
                .headers
                .as_ref()
                .and_then(|h| h.get("ttw-run-at"))
                .and_then(|v| v.as_str().parse().ok());
            seen.record(run_at);
        }
    });
    client
}

/// Schedules `n` tasks on `queue`, the i-th due `first + spread * i / n`.
async fn schedule(store: &Store, queue: &str, n: u64, first: Duration, spread: Duration) {
    let start = SystemTime::now() + first;
    let mut batch = Vec::with_capacity(1000);
    for i in 0..n {
        let at = start + spread.mul_f64(i as f64 / n as f64);
        batch.push(NewTask::new(vec![0u8; 64]).at(at).queue(queue));
        if batch.len() == 1000 {
            store
                .schedule_batch(std::mem::take(&mut batch))
                .await
                .unwrap();
        }
    }
    if !batch.is_empty() {
        store.schedule_batch(batch).await.unwrap();
    }
}

/// Drain: `n` tasks due now, stored first; the scheduler started with
/// `target`. Returns tasks/s to the receiver and to all done.
async fn drain(store: &Store, target: impl Target, seen: &Seen, n: u64) -> (f64, f64) {
    schedule(store, "out", n, Duration::ZERO, Duration::ZERO).await;
    let started = Instant::now();
    let scheduler = Scheduler::builder(store.clone())
        .deliver("out", target)
        .start_queues()
        .await
        .unwrap();
    seen.wait_for(n).await;
    let received = started.elapsed();
    while store.counts().await.unwrap().done < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = started.elapsed();
    scheduler.shutdown().await.unwrap();
    (
        n as f64 / received.as_secs_f64(),
        n as f64 / done.as_secs_f64(),
    )
}

/// Steady: 10,000 tasks at 1,000 a second, 3 s ahead. Returns the sorted
/// lateness to the receiver, in ms.
async fn steady(store: &Store, target: impl Target, seen: &Seen) -> Vec<f64> {
    let scheduler = Scheduler::builder(store.clone())
        .deliver("out", target)
        .start_queues()
        .await
        .unwrap();
    schedule(
        store,
        "out",
        10_000,
        Duration::from_secs(3),
        Duration::from_secs(10),
    )
    .await;
    seen.wait_for(10_000).await;
    scheduler.shutdown().await.unwrap();
    seen.sorted()
}

fn report(backend: &str, target: &str, drain: (f64, f64), steady: &[f64]) {
    println!(
        "{backend:<10} {target:<10} {:>17.0} {:>14.0} {:>10.1} {:>10.1} {:>10.1}",
        drain.0,
        drain.1,
        percentile(steady, 0.5),
        percentile(steady, 0.99),
        steady.last().copied().unwrap_or(f64::NAN)
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: u64 = std::env::var("TTW_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let mut backends = vec![("SQLite", None)];
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => backends.push(("PostgreSQL", Some(url))),
        _ => println!("PostgreSQL skipped: DATABASE_URL is not set"),
    }
    let nats = Nats::start().await;
    if nats.is_none() {
        println!("NATS skipped: nats-server is not installed");
    }
    println!(
        "drain: {n} tasks due now; steady: 10,000 due at 1,000/s; {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<10} {:<10} {:>17} {:>14} {:>10} {:>10} {:>10}",
        "backend", "target", "drain received/s", "drain done/s", "p50 ms", "p99 ms", "max ms"
    );
    let webhook_in_flight: usize = std::env::var("TTW_BENCH_WEBHOOK_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let only = std::env::var("TTW_BENCH_BACKEND")
        .unwrap_or_default()
        .to_lowercase();
    for (i, (backend, url)) in backends.into_iter().enumerate() {
        if !only.is_empty() && only != backend.to_lowercase() {
            continue;
        }
        // The in-process baseline, under the webhook's limit (64 in flight).
        {
            let seen = Arc::new(Seen::default());
            let place = Place::new(url.clone(), &format!("base_drain_{i}"));
            let drained = drain(&place.store().await, InProcess(seen.clone()), &seen, n).await;
            place.drop_all().await;
            let seen = Arc::new(Seen::default());
            let place = Place::new(url.clone(), &format!("base_steady_{i}"));
            let late = steady(&place.store().await, InProcess(seen.clone()), &seen).await;
            place.drop_all().await;
            report(backend, "in-process", drained, &late);
        }
        // Webhook.
        let (drained, late) = {
            let seen = Arc::new(Seen::default());
            let url_of = receiver(seen.clone()).await;
            let hook = || {
                Webhook::builder(&url_of)
                    .secret(SECRET)
                    .max_in_flight(webhook_in_flight)
                    .build()
                    .unwrap()
            };
            let place = Place::new(url.clone(), &format!("hook_drain_{i}"));
            let drained = drain(&place.store().await, hook(), &seen, n).await;
            place.drop_all().await;
            seen.sorted();
            seen.count.store(0, Ordering::SeqCst);
            let place = Place::new(url.clone(), &format!("hook_steady_{i}"));
            let late = steady(&place.store().await, hook(), &seen).await;
            place.drop_all().await;
            (drained, late)
        };
        report(backend, "webhook", drained, &late);
        // JetStream.
        if let Some(nats) = &nats {
            let seen = Arc::new(Seen::default());
            let subject = format!("drain{i}");
            let client = stream_and_subscriber(nats, &subject, seen.clone()).await;
            let js = |subject: &str| {
                JetStream::builder(client.clone())
                    .subject(format!("{subject}.{{queue}}"))
                    .build()
                    .unwrap()
            };
            let place = Place::new(url.clone(), &format!("nats_drain_{i}"));
            let drained = drain(&place.store().await, js(&subject), &seen, n).await;
            place.drop_all().await;
            let seen = Arc::new(Seen::default());
            let subject = format!("steady{i}");
            let client2 = stream_and_subscriber(nats, &subject, seen.clone()).await;
            drop(client2);
            let place = Place::new(url.clone(), &format!("nats_steady_{i}"));
            let late = steady(&place.store().await, js(&subject), &seen).await;
            place.drop_all().await;
            report(backend, "jetstream", drained, &late);
        }
    }
}
