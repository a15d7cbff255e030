//! What an idle durable scheduler costs: the statements it sends to the
//! database per minute (reads and writes apart), the bytes it makes the
//! database write, and the process's CPU time.
//!
//! ```text
//! cargo run --release -p ttw-durable --example idle_cost
//! cargo run --release -p ttw-durable --example idle_cost -- --postgres postgres://postgres@127.0.0.1:55432/postgres
//! ```
//!
//! One scheduler with the default settings and a few tasks pending an hour
//! out (so nothing fires), measured after a warm-up. Statements are counted
//! from sqlx's own per-statement events; on SQLite the bytes written are the
//! write-ahead log's growth after a checkpoint that empties it, on
//! PostgreSQL the server's WAL position moved (any other client of the same
//! server counts too) and its committed transactions.
//!
//! Options: `--secs N` (measured time, default 60), `--pending N` (tasks
//! pending, default 5), `--postgres URL`, `--heartbeat SECS` and
//! `--lease-ttl SECS` (the scheduler's, default 2 and 10).

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;
use ttw_durable::{Scheduler, Store, StoreBuilder};

/// Counts sqlx's statement events by their first words ("UPDATE
/// ttw_nodes", "SELECT shard", ...), while `on` is set.
#[derive(Clone, Default)]
struct Statements {
    on: Arc<AtomicU64>,
    seen: Arc<Mutex<BTreeMap<String, u64>>>,
}

struct Summary(String);

impl Visit for Summary {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" {
            self.0 = value.to_string();
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            self.0 = format!("{value:?}").trim_matches('"').to_string();
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" || self.on.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut summary = Summary(String::new());
        event.record(&mut summary);
        let key: String = summary
            .0
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        *self.seen.lock().unwrap().entry(key).or_default() += 1;
    }
}

/// The process's CPU time (user and system), from `/proc` on Linux.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some(Duration::from_millis(ticks * 10))
}

struct Options {
    postgres: Option<String>,
    secs: u64,
    pending: u64,
    heartbeat: Option<f64>,
    lease_ttl: Option<f64>,
}

/// A positive number of seconds.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n < 86_400.0 => Ok(n),
        _ => Err(format!(
            "{s} is not a number of seconds between 0 and 86400"
        )),
    }
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        postgres: None,
        secs: 60,
        pending: 5,
        heartbeat: None,
        lease_ttl: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--postgres" => o.postgres = Some(value("--postgres")?),
            "--secs" => {
                o.secs = value("--secs")?
                    .parse()
                    .map_err(|e| format!("--secs: {e}"))?
            }
            "--pending" => {
                o.pending = value("--pending")?
                    .parse()
                    .map_err(|e| format!("--pending: {e}"))?
            }
            "--heartbeat" => {
                o.heartbeat = Some(seconds(&value("--heartbeat")?).map_err(|e| format!("--heartbeat: {e}"))?)
            }
            "--lease-ttl" => {
                o.lease_ttl = Some(seconds(&value("--lease-ttl")?).map_err(|e| format!("--lease-ttl: {e}"))?)
            }
            other => {
                return Err(format!(
                    "unknown argument {other} (try --postgres URL, --secs N, --pending N, --heartbeat SECS, --lease-ttl SECS)"
                ))
            }
        }
    }
    if o.secs == 0 {
        return Err("--secs must be at least 1".into());
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("idle_cost: {e}");
            std::process::exit(2);
        }
    };
    let counter = Statements::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(counter.clone()))
        .expect("install the statement counter");

    let dir = std::env::temp_dir().join(format!("ttw-idle-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    let path = dir.join("tasks.db");
    let schema = format!("idle_cost_{}", std::process::id());
    let store = match &o.postgres {
        Some(url) => {
            StoreBuilder::default()
                .postgres_schema(&schema)
                .postgres(url)
                .await
        }
        None => Store::sqlite(&path).await,
    };
    let store = match store {
        Ok(store) => store,
        Err(e) => {
            eprintln!("idle_cost: {e}");
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(1);
        }
    };
    for i in 0..o.pending {
        store
            .schedule(i.to_le_bytes().to_vec())
            .delay(Duration::from_secs(3600))
            .await
            .expect("schedule");
    }
    let mut builder = Scheduler::builder(store.clone());
    if let Some(secs) = o.heartbeat {
        builder = builder.heartbeat(Duration::from_secs_f64(secs));
    }
    if let Some(secs) = o.lease_ttl {
        builder = builder.lease_ttl(Duration::from_secs_f64(secs));
    }
    let scheduler = match builder
        .start(|_task| async { Ok::<_, std::convert::Infallible>(()) })
        .await
    {
        Ok(scheduler) => scheduler,
        Err(e) => {
            eprintln!("idle_cost: {e}");
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(1);
        }
    };
    let settings = match (o.heartbeat, o.lease_ttl) {
        (None, None) => "default settings".to_string(),
        (h, l) => format!(
            "heartbeat {} s, lease TTL {} s",
            h.unwrap_or(2.0),
            l.unwrap_or(10.0)
        ),
    };
    println!(
        "{} with {} tasks pending an hour out; {settings}; warming up 5 s, then measuring {} s",
        if o.postgres.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        },
        o.pending,
        o.secs
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    // A side connection for the database's own figures, not counted.
    let side = Side::open(&o, &path).await;
    let before = side.figures().await;
    let cpu_before = cpu_time();
    let start = Instant::now();
    counter.on.store(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(o.secs)).await;
    counter.on.store(0, Ordering::Relaxed);
    let elapsed = start.elapsed();
    let cpu_after = cpu_time();
    let after = side.figures().await;
    scheduler.shutdown().await.expect("shutdown");

    let per_min = |n: f64| n * 60.0 / elapsed.as_secs_f64();
    let seen = counter.seen.lock().unwrap().clone();
    let total: u64 = seen.values().sum();
    let of = |words: &[&str]| -> u64 {
        seen.iter()
            .filter(|(k, _)| words.iter().any(|w| k.starts_with(w)))
            .map(|(_, n)| n)
            .sum()
    };
    // The crate's data-modifying `WITH` statements (a heartbeat's stamp,
    // a schedule that notifies) are writes; other `WITH`s read.
    let modifying = ["WITH stamped", "WITH changed"];
    let writes = of(&["INSERT", "UPDATE", "DELETE"]) + of(&modifying);
    let reads = of(&["SELECT", "WITH"]) - of(&modifying);
    println!();
    println!("over {:.1} s:", elapsed.as_secs_f64());
    for (kind, n) in &seen {
        println!("  {:>7.1}/min  {kind}", per_min(*n as f64));
    }
    println!(
        "statements  {:.1}/min ({:.1} writes, {:.1} reads, {:.1} other)",
        per_min(total as f64),
        per_min(writes as f64),
        per_min(reads as f64),
        per_min((total - writes - reads) as f64)
    );
    // SQLite's second reading is the growth itself (the first emptied
    // the log); PostgreSQL's are two positions.
    let before_bytes = if o.postgres.is_some() {
        before.bytes
    } else {
        Some(0)
    };
    match (before_bytes, after.bytes) {
        (Some(b), Some(a)) => println!(
            "written     {:.1} KB/min ({})",
            per_min(a.saturating_sub(b) as f64) / 1000.0,
            side.what()
        ),
        _ => println!("written     n/a"),
    }
    if let (Some(b), Some(a)) = (before.commits, after.commits) {
        // The side connection's own two readings are one commit each.
        println!(
            "commits     {:.1}/min (the server's, less this program's own readings)",
            per_min(a.saturating_sub(b).saturating_sub(2) as f64)
        );
    }
    match (cpu_before, cpu_after) {
        (Some(b), Some(a)) => println!(
            "cpu         {:.1} ms/min",
            per_min((a - b).as_secs_f64() * 1e3)
        ),
        _ => println!("cpu         n/a"),
    }
    side.close(&schema).await;
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Figures read from the database itself.
struct Figures {
    bytes: Option<u64>,
    commits: Option<u64>,
}

enum Side {
    Sqlite(std::path::PathBuf, sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Side {
    async fn open(o: &Options, path: &std::path::Path) -> Side {
        match &o.postgres {
            Some(url) => Side::Postgres(sqlx::PgPool::connect(url).await.expect("side connection")),
            None => {
                let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
                    .await
                    .expect("side connection");
                Side::Sqlite(path.with_extension("db-wal"), pool)
            }
        }
    }

    fn what(&self) -> &'static str {
        match self {
            Side::Sqlite(..) => "the write-ahead log's growth",
            Side::Postgres(_) => "the server's WAL",
        }
    }

    async fn figures(&self) -> Figures {
        match self {
            Side::Sqlite(wal, pool) => {
                // The log's size, then the log emptied: the second reading
                // is what was written since the first.
                let bytes = std::fs::metadata(wal).map(|m| m.len()).ok();
                let _ = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                    .execute(pool)
                    .await;
                Figures {
                    bytes,
                    commits: None,
                }
            }
            Side::Postgres(pool) => {
                let row: Option<(i64, i64)> = sqlx::query_as(
                    "SELECT CAST(pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') AS BIGINT), \
                     (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) \
                     FROM (SELECT pg_stat_clear_snapshot()) s",
                )
                .fetch_optional(pool)
                .await
                .ok()
                .flatten();
                Figures {
                    bytes: row.map(|r| r.0 as u64),
                    commits: row.map(|r| r.1 as u64),
                }
            }
        }
    }

    async fn close(self, schema: &str) {
        match self {
            Side::Sqlite(_, pool) => pool.close().await,
            Side::Postgres(pool) => {
                let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .execute(&pool)
                    .await;
                pool.close().await;
            }
        }
    }
}
