//! The durable scheduler beside "database plus polling", on the same tables
//! of the same database in the same run.
//!
//! ```text
//! cargo bench -p ttw-durable --bench durable             # SQLite, and PostgreSQL if DATABASE_URL is set
//! TTW_BENCH_TASKS=2000 cargo bench -p ttw-durable --bench durable
//! ```
//!
//! The baseline is the loop users write today: every second, claim the due
//! rows (on PostgreSQL `SELECT ... FOR UPDATE SKIP LOCKED` and an `UPDATE` in
//! one transaction; on SQLite, which has no row locks, one `UPDATE ... WHERE
//! id IN (SELECT ... LIMIT n) RETURNING`), run them, and mark each done. Ours
//! loads a window of tasks into the wheel and claims each batch as it comes
//! due. Both run the same no-op handler with the same concurrency (64) and
//! mark each task done with one statement.
//!
//! Two workloads per backend and system:
//! - spread: N tasks due evenly over 5 s, all scheduled more than a window
//!   ahead: lateness (handler start minus `run_at`) p50 / p99 / max;
//! - burst: N tasks due at one instant: completed tasks per second, from the
//!   due time until the last is marked done.

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../examples/support/percentile.rs"]
mod percentile;
#[path = "support/polling.rs"]
mod polling;

use percentile::percentile;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use ttw_durable::{Scheduler, Store, StoreBuilder};

const CONCURRENCY: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    Wheel,
    Polling,
}

/// Where one run keeps its tables.
struct Place {
    backend: Backend,
    url: Option<String>,
    schema: String,
    dir: std::path::PathBuf,
}

impl Place {
    fn new(backend: Backend, url: Option<String>, name: &str) -> Place {
        let schema = format!("bench_{name}_{}", std::process::id());
        let dir = std::env::temp_dir().join(&schema);
        std::fs::create_dir_all(&dir).unwrap();
        Place {
            backend,
            url,
            schema,
            dir,
        }
    }

    async fn store(&self) -> Store {
        let builder = StoreBuilder::default().max_connections(16);
        match self.backend {
            Backend::Sqlite => builder.sqlite(self.dir.join("tasks.db")).await,
            Backend::Postgres => {
                builder
                    .postgres_schema(self.schema.clone())
                    .postgres(self.url.as_deref().unwrap())
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

type Lateness = Arc<Mutex<Vec<f64>>>;

fn record(lateness: &Lateness, run_at: SystemTime) {
    let late = SystemTime::now().duration_since(run_at).unwrap_or_default();
    lateness.lock().unwrap().push(late.as_secs_f64() * 1e3);
}

struct Outcome {
    lateness: Vec<f64>,
    /// From the first due time until every task was done.
    span: Duration,
}

/// Schedules `n` tasks from `first_due` over `spread`, runs `system` until all
/// are done, and returns what it measured.
async fn run(place: &Place, system: System, n: u64, spread: Duration) -> Outcome {
    let store = place.store().await;
    // More than a window ahead, for both systems.
    let lead = Duration::from_secs(3) + Duration::from_micros(600 * n);
    let first_due = SystemTime::now() + lead;
    futures::stream::iter(0..n)
        .map(|i| {
            let store = store.clone();
            async move {
                let at = first_due + spread.mul_f64(i as f64 / n as f64);
                store.schedule(Vec::new()).at(at).await.expect("schedule");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    assert!(
        SystemTime::now() < first_due,
        "scheduling took longer than the lead"
    );

    let lateness: Lateness = Arc::default();
    let (scheduler, poller) = match system {
        System::Wheel => {
            let l = lateness.clone();
            let scheduler = Scheduler::builder(store.clone())
                .window(Duration::from_secs(1))
                .max_concurrency(CONCURRENCY)
                .start(move |task| {
                    let l = l.clone();
                    async move {
                        record(&l, task.run_at());
                        Ok::<_, String>(())
                    }
                })
                .await
                .expect("start");
            (Some(scheduler), None)
        }
        System::Polling => {
            let pool = match place.backend {
                Backend::Sqlite => polling::Pool::sqlite(&place.dir.join("tasks.db")).await,
                Backend::Postgres => {
                    polling::Pool::postgres(place.url.as_deref().unwrap(), Some(&place.schema))
                        .await
                }
            };
            let l = lateness.clone();
            let run = move |_id, run_at: i64| {
                record(&l, UNIX_EPOCH + Duration::from_millis(run_at as u64))
            };
            (
                None,
                Some(tokio::spawn(polling::poll_loop(pool, CONCURRENCY, run))),
            )
        }
    };
    let deadline = Instant::now() + lead + spread + Duration::from_secs(120);
    loop {
        let done = store.counts().await.expect("counts").done;
        if done >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{system:?}: only {done} of {n} done"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let span = SystemTime::now()
        .duration_since(first_due)
        .unwrap_or_default();
    if let Some(s) = scheduler {
        s.shutdown().await.expect("shutdown");
    }
    if let Some(p) = poller {
        p.abort();
    }
    let mut lateness = std::mem::take(&mut *lateness.lock().unwrap());
    lateness.sort_by(|a, b| a.total_cmp(b));
    Outcome { lateness, span }
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let n: u64 = std::env::var("TTW_BENCH_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let mut backends = vec![(Backend::Sqlite, None)];
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => backends.push((Backend::Postgres, Some(url))),
        _ => println!("PostgreSQL skipped: DATABASE_URL is not set"),
    }
    println!(
        "{n} tasks; concurrency {CONCURRENCY}; polling every {:?}; {} cores",
        polling::POLL_PERIOD,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<10} {:<8} {:>14} {:>14} {:>14} {:>18}",
        "backend", "system", "spread p50 ms", "spread p99 ms", "spread max ms", "burst tasks/s"
    );
    for (backend, url) in backends {
        for system in [System::Wheel, System::Polling] {
            let name = format!("{backend:?}_{system:?}").to_lowercase();
            let place = Place::new(backend, url.clone(), &format!("{name}_spread"));
            let spread = run(&place, system, n, Duration::from_secs(5)).await;
            place.drop_all().await;
            let place = Place::new(backend, url.clone(), &format!("{name}_burst"));
            let burst = run(&place, system, n, Duration::ZERO).await;
            place.drop_all().await;
            println!(
                "{:<10} {:<8} {:>14.1} {:>14.1} {:>14.1} {:>18.0}",
                format!("{backend:?}"),
                format!("{system:?}"),
                percentile(&spread.lateness, 0.5),
                percentile(&spread.lateness, 0.99),
                spread.lateness.last().copied().unwrap_or(f64::NAN),
                n as f64 / burst.span.as_secs_f64().max(1e-3)
            );
        }
    }
}
