//! How fast tasks are scheduled: single schedules (16 in flight) and
//! batches of 1,000 (`Store::schedule_batch`, one at a time), on a fresh
//! SQLite file or PostgreSQL schema, with no scheduler running; then how
//! fast a scheduler at its defaults drains as many tasks due now (a
//! handler that returns at once), until every one is done.
//!
//! ```text
//! cargo run --release -p ttw-durable --example schedule_rate
//! cargo run --release -p ttw-durable --example schedule_rate -- --commits synced
//! cargo run --release -p ttw-durable --example schedule_rate -- --postgres postgres://postgres@127.0.0.1:55432/postgres
//! ```
//!
//! Options: `--tasks N` (tasks per measurement, default 50,000),
//! `--batch N` (tasks per batch, default 1,000), `--postgres URL`,
//! `--commits flushed|synced` (SQLite: when a commit reaches the disk),
//! `--typed` (the drain's tasks are typed jobs run by `Workers`, beside
//! the bytes handler of the default).

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use serde::{Deserialize, Serialize};
use ttw_durable::{Commits, JobArgs, JobContext, NewTask, Scheduler, StoreBuilder, Workers};

/// The drain's typed job (`--typed`).
#[derive(Serialize, Deserialize)]
struct Drained {
    n: u64,
}

impl JobArgs for Drained {
    const KIND: &'static str = "drained";
}

struct Options {
    postgres: Option<String>,
    commits: Commits,
    tasks: usize,
    batch: usize,
    typed: bool,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        postgres: None,
        commits: Commits::default(),
        tasks: 50_000,
        batch: 1_000,
        typed: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--postgres" => o.postgres = Some(value("--postgres")?),
            "--typed" => o.typed = true,
            "--commits" => {
                o.commits = value("--commits")?
                    .parse()
                    .map_err(|e| format!("--commits: {e}"))?
            }
            "--tasks" => {
                o.tasks = value("--tasks")?
                    .parse()
                    .map_err(|e| format!("--tasks: {e}"))?
            }
            "--batch" => {
                o.batch = value("--batch")?
                    .parse()
                    .map_err(|e| format!("--batch: {e}"))?
            }
            other => {
                return Err(format!(
                    "unknown argument {other} (try --postgres URL, --commits flushed|synced, --tasks N, --batch N, --typed)"
                ))
            }
        }
    }
    if o.tasks == 0 || o.batch == 0 {
        return Err("--tasks and --batch must be at least 1".into());
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("schedule_rate: {e}");
            std::process::exit(2);
        }
    };
    let dir = std::env::temp_dir().join(format!("ttw-schedule-rate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    let store = match &o.postgres {
        Some(url) => {
            StoreBuilder::default()
                .postgres_schema(format!("schedule_rate_{}", std::process::id()))
                .postgres(url)
                .await
        }
        None => {
            StoreBuilder::default()
                .sqlite_commits(o.commits)
                .sqlite(dir.join("tasks.db"))
                .await
        }
    };
    let store = match store {
        Ok(store) => store,
        Err(e) => {
            eprintln!("schedule_rate: {e}");
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(1);
        }
    };
    let backend = if o.postgres.is_some() {
        "PostgreSQL".to_owned()
    } else {
        format!("SQLite ({:?} commits)", o.commits)
    };
    let later = Duration::from_secs(3600);

    let started = Instant::now();
    let single = stream::iter(0..o.tasks)
        .map(|i| {
            let store = store.clone();
            async move { store.schedule(i.to_le_bytes().to_vec()).delay(later).await }
        })
        .buffer_unordered(16)
        .filter(|r| std::future::ready(r.is_ok()))
        .count()
        .await;
    let single_rate = single as f64 / started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut batched = 0;
    let mut left = o.tasks;
    while left > 0 {
        let n = left.min(o.batch);
        let batch = (0..n).map(|i| NewTask::new(i.to_le_bytes().to_vec()).delay(later));
        match store.schedule_batch(batch).await {
            Ok(done) => batched += done.len(),
            Err(e) => {
                eprintln!("schedule_rate: a batch failed: {e}");
                break;
            }
        }
        left -= n;
    }
    let batch_rate = batched as f64 / started.elapsed().as_secs_f64();

    println!("{backend}: {single} single schedules (16 in flight) at {single_rate:.0}/s");
    println!(
        "{backend}: {batched} tasks in batches of {} at {batch_rate:.0}/s",
        o.batch
    );

    // The drain: as many tasks due now, delivered by a scheduler at its
    // defaults, until the store counts every one done.
    let due = store.counts().await.expect("counts").done + o.tasks as u64;
    let mut left = o.tasks;
    while left > 0 {
        let n = left.min(o.batch);
        let typed = o.typed;
        let batch = (0..n).map(|i| {
            if typed {
                NewTask::job(&Drained { n: i as u64 })
            } else {
                NewTask::new(i.to_le_bytes().to_vec())
            }
        });
        store.schedule_batch(batch).await.expect("a batch due now");
        left -= n;
    }
    let started = Instant::now();
    let builder = Scheduler::builder(store.clone());
    let scheduler = if o.typed {
        let workers = Workers::new()
            .register(|_job: Drained, _ctx: JobContext| async { Ok::<_, String>(()) });
        builder
            .work(ttw_durable::DEFAULT_QUEUE, workers)
            .start_queues()
            .await
    } else {
        builder.start(|_task| async { Ok::<_, String>(()) }).await
    }
    .expect("the scheduler starts");
    let deadline = started + Duration::from_secs(600);
    let mut done = 0;
    while Instant::now() < deadline {
        done = store.counts().await.expect("counts").done;
        if done >= due {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drain_rate = o.tasks as f64 / started.elapsed().as_secs_f64();
    scheduler.shutdown().await.expect("the scheduler stops");
    println!(
        "{backend}: {} {} tasks due now drained at {drain_rate:.0}/s",
        o.tasks,
        if o.typed { "typed" } else { "bytes" }
    );
    let _ = std::fs::remove_dir_all(&dir);
    if single < o.tasks || batched < o.tasks || done < due {
        std::process::exit(1);
    }
}
