//! 10,000 durable tasks over 10 s, delivered by a worker process that is
//! killed with `SIGKILL` half-way and started again.
//!
//! ```text
//! cargo run --release -p ttw-durable --example durable
//! cargo run --release -p ttw-durable --example durable -- --postgres postgres://postgres@127.0.0.1:55432/postgres
//! ```
//!
//! Runs on an SQLite file in a temporary directory (no setup), or on
//! PostgreSQL with `--postgres URL` (in a schema of its own, dropped at the
//! end). This process schedules the tasks and keeps the ledger; the
//! scheduler runs in a worker process (this program started again with
//! `--worker`) with the default settings but for a short backoff, and
//! reports each delivery on its standard output. Every 50th task fails on
//! its first attempt (and is retried); five tasks always fail and end dead
//! after two attempts. Half-way the worker is killed with `SIGKILL` in the
//! middle of its deliveries and a new one is started; it takes over the
//! dead one's shards and running tasks at once on Linux (it sees the old
//! process is gone); elsewhere the shards after the 10 s lease TTL and the
//! running tasks after their locks (70 s). At the end it
//! prints delivered, retried, dead, duplicates, lost (must be 0), the
//! recovery time and lateness, and exits non-zero if anything was lost.

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "support/percentile.rs"]
mod percentile;

use percentile::percentile;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use ttw_durable::{Backoff, Scheduler, Store, StoreBuilder, Task, TaskId, TaskState};

const TASKS: u64 = 10_000;
const SPREAD: Duration = Duration::from_secs(10);
const ALWAYS_FAIL: u64 = 5;

/// Where the tasks live.
#[derive(Debug, Clone)]
enum Place {
    Sqlite(PathBuf),
    Postgres { url: String, schema: String },
}

impl Place {
    fn args(&self) -> Vec<String> {
        match self {
            Place::Sqlite(path) => vec!["--sqlite".into(), path.display().to_string()],
            Place::Postgres { url, schema } => vec![
                "--postgres".into(),
                url.clone(),
                "--schema".into(),
                schema.clone(),
            ],
        }
    }

    async fn open(&self) -> Result<Store, String> {
        match self {
            Place::Sqlite(path) => Store::sqlite(path).await,
            Place::Postgres { url, schema } => {
                StoreBuilder::default()
                    .postgres_schema(schema)
                    .postgres(url)
                    .await
            }
        }
        .map_err(|e| e.to_string())
    }
}

/// One delivery, as a worker reports it.
#[derive(Debug)]
struct Delivered {
    worker: usize,
    id: i64,
    attempt: u32,
    late_ms: f64,
    ok: bool,
}

/// What the handlers saw, across both workers.
#[derive(Default)]
struct Ledger {
    /// Successful deliveries per task id.
    ok: HashMap<i64, u32>,
    /// Attempts that failed on purpose.
    failed: u64,
    /// Lateness of first attempts, in milliseconds.
    lateness: Vec<f64>,
    /// Deliveries per worker.
    per_worker: [u64; 2],
}

impl Ledger {
    fn record(&mut self, d: &Delivered) {
        self.per_worker[d.worker.min(1)] += 1;
        if d.attempt == 1 {
            self.lateness.push(d.late_ms);
        }
        if d.ok {
            *self.ok.entry(d.id).or_default() += 1;
        } else {
            self.failed += 1;
        }
    }
}

// ---- the worker process ----

/// Decides a delivery: every 50th task fails once, the first five always.
fn outcome(task: &Task) -> Result<(), String> {
    let seq = u64::from_le_bytes(task.payload().try_into().unwrap_or_default());
    if seq < ALWAYS_FAIL || (seq % 50 == 7 && task.attempt() == 1) {
        return Err(format!("task {seq} failed on attempt {}", task.attempt()));
    }
    Ok(())
}

/// Runs a scheduler until standard input closes (then shuts down) or the
/// process is killed, printing `READY` once started and `D id attempt
/// late_ms ok|err` per delivery.
async fn worker(place: Place) {
    let store = match place.open().await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("worker: cannot open the store: {e}");
            std::process::exit(1);
        }
    };
    let scheduler = Scheduler::builder(store)
        .window(Duration::from_secs(5))
        .max_attempts(4)
        .backoff(Backoff::exponential(
            Duration::from_millis(200),
            Duration::from_secs(2),
        ))
        .start(|task| async move {
            // A little I/O-like work, so the kill catches some in flight.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let late = SystemTime::now()
                .duration_since(task.run_at())
                .unwrap_or_default();
            let result = outcome(&task);
            println!(
                "D {} {} {:.3} {}",
                task.id().get(),
                task.attempt(),
                late.as_secs_f64() * 1e3,
                if result.is_ok() { "ok" } else { "err" }
            );
            result
        })
        .await;
    let scheduler = match scheduler {
        Ok(s) => s,
        Err(e) => {
            eprintln!("worker: cannot start the scheduler: {e}");
            std::process::exit(1);
        }
    };
    println!("READY {}", scheduler.stats().shards_owned);
    // Standard input closing is the request to stop.
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(_)) = stdin.next_line().await {}
    if let Err(e) = scheduler.shutdown().await {
        eprintln!("worker: shutdown: {e}");
    }
}

// ---- the coordinating process ----

/// A worker process; its reports arrive on the channel given at start.
struct Worker {
    child: Child,
}

impl Worker {
    fn start(place: &Place, index: usize, events: mpsc::UnboundedSender<Event>) -> Worker {
        let exe = std::env::current_exe().expect("own path");
        let mut child = Command::new(exe)
            .arg("--worker")
            .args(place.args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the worker process");
        let stdout = child.stdout.take().expect("piped");
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let parts: Vec<&str> = line.split(' ').collect();
                let event = match parts.as_slice() {
                    ["READY", shards] => Event::Ready {
                        worker: index,
                        shards: shards.parse().unwrap_or(0),
                    },
                    ["D", id, attempt, late, ok] => Event::Delivered(Delivered {
                        worker: index,
                        id: id.parse().unwrap_or(-1),
                        attempt: attempt.parse().unwrap_or(0),
                        late_ms: late.parse().unwrap_or(f64::NAN),
                        ok: *ok == "ok",
                    }),
                    _ => continue,
                };
                let _ = events.send(event);
            }
        });
        Worker { child }
    }

    /// `SIGKILL`, and the process reaped.
    async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// Closes its standard input (the request to stop) and waits for it.
    async fn stop(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait().await;
    }
}

#[derive(Debug)]
enum Event {
    Ready { worker: usize, shards: u32 },
    Delivered(Delivered),
}

fn parse() -> Result<(Option<String>, Option<Place>), String> {
    let mut args = std::env::args().skip(1);
    let (mut postgres, mut schema, mut sqlite, mut worker) = (None, None, None, false);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--postgres" => postgres = Some(value("--postgres URL")?),
            "--schema" => schema = Some(value("--schema NAME")?),
            "--sqlite" => sqlite = Some(PathBuf::from(value("--sqlite PATH")?)),
            "--worker" => worker = true,
            other => return Err(format!("unknown argument {other} (try --postgres URL)")),
        }
    }
    if !worker {
        return Ok((postgres, None));
    }
    let place = match (postgres, schema, sqlite) {
        (Some(url), Some(schema), None) => Place::Postgres { url, schema },
        (None, None, Some(path)) => Place::Sqlite(path),
        _ => {
            return Err("a worker needs --sqlite PATH, or --postgres URL and --schema NAME".into())
        }
    };
    Ok((None, Some(place)))
}

#[tokio::main]
async fn main() {
    let (postgres, worker_place) = match parse() {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("durable: {e}");
            std::process::exit(2);
        }
    };
    if let Some(place) = worker_place {
        worker(place).await;
        return;
    }
    let dir = std::env::temp_dir().join(format!("ttw-durable-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the demo's directory");
    let place = match postgres {
        Some(url) => Place::Postgres {
            url,
            schema: format!("durable_demo_{}", std::process::id()),
        },
        None => Place::Sqlite(dir.join("tasks.db")),
    };
    match &place {
        Place::Postgres { url, schema } => println!("PostgreSQL at {url}, schema {schema}"),
        Place::Sqlite(path) => println!("SQLite at {}", path.display()),
    }
    let lost = tokio::select! {
        lost = run(&place) => lost,
        _ = tokio::signal::ctrl_c() => {
            println!("interrupted");
            None
        }
    };
    // Every exit path below the worker start removes what the demo made
    // (the workers are killed when their handles drop).
    let _ = std::fs::remove_dir_all(&dir);
    if let Place::Postgres { url, schema } = &place {
        if let Ok(pool) = sqlx::PgPool::connect(url).await {
            let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&pool)
                .await;
        }
    }
    match lost {
        Some(0) => {}
        Some(_) => std::process::exit(1),
        None => std::process::exit(130),
    }
}

/// The demo; returns how many tasks were lost (`None` if it could not run).
async fn run(place: &Place) -> Option<u64> {
    let store = match place.open().await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("durable: cannot open the store: {e}");
            return None;
        }
    };
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let mut worker = Some(Worker::start(place, 0, events_tx.clone()));

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
    let end = first_due + SPREAD + Duration::from_secs(30);
    let mut ledger = Ledger::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut killed_at: Option<Instant> = None;
    let mut recovery: (Option<Duration>, Option<Duration>) = (None, None);
    loop {
        tokio::select! {
            event = events.recv() => {
                match event {
                    Some(Event::Delivered(d)) => {
                        if d.worker == 1 && recovery.1.is_none() {
                            recovery.1 = killed_at.map(|k| k.elapsed());
                        }
                        ledger.record(&d);
                    }
                    Some(Event::Ready { worker: 1, shards }) => {
                        recovery.0 = killed_at.map(|k| k.elapsed());
                        println!("*** the new worker is up, holding {shards} shards, {:.0?} after the kill", recovery.0.unwrap_or_default());
                    }
                    _ => {}
                }
                continue;
            }
            _ = tick.tick() => {}
        }
        let counts = match store.counts().await {
            Ok(c) => c,
            Err(e) => {
                println!("counts unavailable: {e}");
                continue;
            }
        };
        if let Ok(wait) = first_due.duration_since(SystemTime::now()) {
            println!(
                "waiting for the first task, due in {:.1} s ({} scheduled)",
                wait.as_secs_f64(),
                counts.scheduled
            );
            continue;
        }
        println!(
            "done {:>5}  running {:>3}  scheduled {:>5}  dead {}  | deliveries: first worker {:>5}, second {:>5}",
            counts.done, counts.running, counts.scheduled, counts.dead, ledger.per_worker[0], ledger.per_worker[1]
        );
        if killed_at.is_none() && SystemTime::now() >= half {
            let running = counts.running;
            if let Some(w) = worker.take() {
                w.kill().await;
            }
            killed_at = Some(Instant::now());
            println!(
                "*** SIGKILL to the worker ({running} tasks were running a moment before); starting a new one"
            );
            worker = Some(Worker::start(place, 1, events_tx.clone()));
        }
        if counts.done + counts.dead == TASKS || SystemTime::now() > end {
            break;
        }
    }
    if let Some(w) = worker.take() {
        w.stop().await;
    }
    // Reports the worker printed before it stopped.
    while let Ok(Event::Delivered(d)) = events.try_recv() {
        ledger.record(&d);
    }

    let mut lost = 0;
    let mut dead = 0;
    for id in &ids {
        match store.get(TaskId::new(*id)).await {
            Ok(Some(info)) if info.state == TaskState::Done => {}
            Ok(Some(info)) if info.state == TaskState::Dead => dead += 1,
            _ => lost += 1,
        }
    }
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
    println!("duplicates  {duplicates} (at-least-once: tasks whose outcome the kill cut off, delivered again)");
    println!("lost        {lost}");
    match recovery {
        (Some(up), Some(first)) => println!(
            "recovery    the new worker was up {up:.0?} after the kill and delivered its first task {first:.0?} after it"
        ),
        _ => println!("recovery    the new worker delivered nothing"),
    }
    println!(
        "lateness    first attempts: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (the max includes tasks due while no worker ran)",
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(f64::NAN)
    );
    drop(store);
    Some(lost)
}
