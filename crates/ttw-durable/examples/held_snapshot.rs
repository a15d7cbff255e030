//! What a transaction held open elsewhere does to a scheduler on
//! PostgreSQL: tasks due now are offered at a fixed rate through three
//! phases, and another session holds a snapshot through the second (an
//! analytics query, a backup, a forgotten `BEGIN`), so vacuum can remove
//! no dead row and no dead index entry until it ends.
//!
//! ```text
//! eval "$(bash scripts/postgres.sh start)"
//! cargo run --release -p ttw-durable --example held_snapshot -- --postgres "$DATABASE_URL"
//! ```
//!
//! For each phase (clean, snapshot held, recovery): pickup lateness (the
//! handler's start minus the time the task was due) p50, p99 and max, the
//! tasks done a second, the backlog at the phase's end (tasks due and not
//! yet claimed), the size of the task table with its indexes, and when the
//! tasks more than 100 ms late started; then, every minute of every
//! phase, the size of the hot table (`ttw_tasks`, what claims and outcomes
//! read) and of the history of finished tasks (`ttw_history`), each with
//! its indexes. Options: `--rate N` (tasks a second, default 800),
//! `--secs S` (each phase, default 120), `--concurrency N` (handlers in
//! flight, default 16), `--phases LIST` (of `clean`, `held`, `recovery`,
//! comma-separated; default all three). The tables are in a schema of
//! their own, dropped at the end. The size run of issue #45:
//! `--rate 1000 --secs 600 --phases clean`.

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "support/percentile.rs"]
mod percentile;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use percentile::percentile;
use sqlx::{Connection, PgConnection};
use ttw_durable::{NewTask, Scheduler, Store};

struct Options {
    url: String,
    rate: u64,
    secs: u64,
    concurrency: usize,
    phases: Vec<&'static str>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        url: std::env::var("DATABASE_URL").unwrap_or_default(),
        rate: 800,
        secs: 120,
        concurrency: 16,
        phases: vec!["clean", "snapshot held", "recovery"],
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--postgres" => o.url = value.clone(),
            "--rate" => o.rate = number()?,
            "--secs" => o.secs = number()?,
            "--concurrency" => o.concurrency = number()? as usize,
            "--phases" => {
                o.phases = value
                    .split(',')
                    .map(|p| match p {
                        "clean" => Ok("clean"),
                        "held" => Ok("snapshot held"),
                        "recovery" => Ok("recovery"),
                        other => Err(format!("--phases: unknown phase {other:?}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if o.url.is_empty() {
        return Err("needs PostgreSQL: --postgres URL or DATABASE_URL".into());
    }
    if o.rate == 0 || o.secs == 0 || o.concurrency == 0 {
        return Err("--rate, --secs and --concurrency must be at least 1".into());
    }
    Ok(o)
}

fn ms_since_epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1e3
}

async fn scalar(conn: &mut PgConnection, sql: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql).fetch_one(conn).await
}

/// The size of `table` with its indexes, in bytes.
async fn size(conn: &mut PgConnection, table: &str) -> Result<i64, sqlx::Error> {
    scalar(
        conn,
        &format!("SELECT pg_total_relation_size('{table}')::BIGINT"),
    )
    .await
}

async fn run(o: Options) -> Result<(), Box<dyn std::error::Error>> {
    let schema = format!("ttw_held_snapshot_{}", std::process::id());
    let store = Store::builder()
        .postgres_schema(schema.clone())
        .postgres(&o.url)
        .await?;
    // (when the handler started, ms since the epoch; how late, ms)
    let lateness = Arc::new(Mutex::new(Vec::<(f64, f64)>::new()));
    let done = Arc::new(AtomicU64::new(0));
    let (seen, count) = (lateness.clone(), done.clone());
    let scheduler = Scheduler::builder(store.clone())
        .max_concurrency(o.concurrency)
        .start(move |task| {
            let now = ms_since_epoch(SystemTime::now());
            seen.lock()
                .unwrap()
                .push((now, now - ms_since_epoch(task.run_at())));
            count.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, String>(()) }
        })
        .await?;

    // The offer starts once the node holds every lease: tasks offered
    // while it is still taking them would wait for that, and measure the
    // start instead of the phase.
    let started = Instant::now();
    while scheduler.stats().shards_owned < store.shards() {
        if started.elapsed() > Duration::from_secs(60) {
            return Err("the scheduler did not take every lease within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The offer: every 10 ms, the tasks of those 10 ms, due now.
    let producer = tokio::spawn({
        let store = store.clone();
        let rate = o.rate;
        async move {
            let start = tokio::time::Instant::now();
            let mut offered = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            loop {
                tick.tick().await;
                let due = start.elapsed().as_millis() as u64 * rate / 1000;
                let n = due.saturating_sub(offered);
                if n > 0 {
                    store
                        .schedule_batch((0..n).map(|_| NewTask::new(Vec::new())))
                        .await
                        .expect("schedule");
                    offered += n;
                }
            }
        }
    });

    let mut admin = PgConnection::connect(&o.url).await?;
    let table = format!("{schema}.ttw_tasks");
    let history = format!("{schema}.ttw_history");
    // (phase, seconds into it, hot table bytes, history bytes)
    let mut sizes: Vec<(&str, u64, i64, i64)> = Vec::new();
    println!(
        "{} tasks a second due now, {} handlers, {} s a phase, PostgreSQL",
        o.rate, o.concurrency, o.secs
    );
    println!(
        "| phase | pickup p50 / p99 / max, ms | done/s | backlog at end | ttw_tasks and indexes | over 100 ms late |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    for phase in o.phases.clone() {
        let holder = if phase == "snapshot held" {
            let mut holder = PgConnection::connect(&o.url).await?;
            sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut holder)
                .await?;
            scalar(&mut holder, &format!("SELECT COUNT(*) FROM {table}")).await?;
            Some(holder)
        } else {
            None
        };
        lateness.lock().unwrap().clear();
        let phase_start = ms_since_epoch(SystemTime::now());
        let done_before = done.load(Ordering::Relaxed);
        let started = Instant::now();
        let mut waited = 0;
        while waited < o.secs {
            let step = (o.secs - waited).min(60);
            tokio::time::sleep(Duration::from_secs(step)).await;
            waited += step;
            let hot = size(&mut admin, &table).await?;
            let old = size(&mut admin, &history).await?;
            sizes.push((phase, waited, hot, old));
        }
        let took = started.elapsed().as_secs_f64();
        let seen = std::mem::take(&mut *lateness.lock().unwrap());
        // When the tasks over 100 ms late started, in seconds into the
        // phase: the first and the last.
        let slow: Vec<f64> = seen
            .iter()
            .filter(|(_, late)| *late > 100.0)
            .map(|(at, _)| (at - phase_start) / 1e3)
            .collect();
        let first = slow.iter().copied().reduce(f64::min);
        let last = slow.iter().copied().reduce(f64::max);
        let slow = match (first, last) {
            (Some(first), Some(last)) => {
                format!("{} tasks, started {first:.1} – {last:.1} s in", slow.len())
            }
            _ => "none".to_string(),
        };
        let mut late: Vec<f64> = seen.into_iter().map(|(_, late)| late).collect();
        late.sort_by(f64::total_cmp);
        let rate = (done.load(Ordering::Relaxed) - done_before) as f64 / took;
        let now = ms_since_epoch(SystemTime::now()) as i64;
        let backlog = scalar(
            &mut admin,
            &format!("SELECT COUNT(*) FROM {table} WHERE state = 'scheduled' AND run_at <= {now}"),
        )
        .await?;
        let bytes = size(&mut admin, &table).await?;
        println!(
            "| {phase} | {:.1} / {:.1} / {:.1} | {rate:.0} | {backlog} | {:.0} MB | {slow} |",
            percentile(&late, 0.5),
            percentile(&late, 0.99),
            late.last().copied().unwrap_or(f64::NAN),
            bytes as f64 / 1e6,
        );
        if let Some(mut holder) = holder {
            sqlx::query("COMMIT").execute(&mut holder).await?;
        }
    }
    println!();
    println!("| phase | s into it | ttw_tasks and indexes | ttw_history and indexes |");
    println!("|---|---:|---:|---:|");
    for (phase, at, hot, old) in sizes {
        println!(
            "| {phase} | {at} | {:.1} MB | {:.1} MB |",
            hot as f64 / 1e6,
            old as f64 / 1e6
        );
    }
    producer.abort();
    scheduler.shutdown().await?;
    drop(store);
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut admin)
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(o).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
