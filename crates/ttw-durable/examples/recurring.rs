//! Recurring schedules on SQLite shared by two nodes, one of them killed
//! half-way: a cron schedule (every 2 s) and an interval schedule (every
//! 3 s). Every occurrence becomes one task, made by whichever node holds
//! the schedule's shard; when node `a` dies, node `b` takes its shards
//! (after the lease runs out) and goes on.
//!
//! ```text
//! cargo run --release -p ttw-durable --example recurring [-- --secs N]
//! ```
//!
//! At the end, one line per schedule: occurrences due, run, duplicates
//! (an occurrence made two tasks: must be 0), missed (due and never run:
//! must be 0), and redelivered (a task delivered again because the node
//! running it died: at-least-once).

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ttw_durable::{Recurring, Scheduler, Store};

/// Deliveries seen: (schedule, occurrence ms) -> the task ids and attempts.
type Seen = Arc<Mutex<BTreeMap<(String, i64), Vec<(i64, u32)>>>>;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

async fn node(
    store: &Store,
    id: &str,
    seen: &Seen,
) -> Result<Scheduler, Box<dyn std::error::Error>> {
    let seen = seen.clone();
    let node = id.to_string();
    Ok(Scheduler::builder(store.clone())
        .node_id(id)
        .window(Duration::from_secs(4))
        .heartbeat(Duration::from_millis(500))
        .lease_ttl(Duration::from_secs(3))
        .start(move |task| {
            let seen = seen.clone();
            let node = node.clone();
            async move {
                let key = task.idempotency_key().unwrap_or_default();
                let Some((schedule, at)) = key
                    .strip_prefix("ttw:recurring:")
                    .and_then(|rest| rest.rsplit_once(':'))
                else {
                    return Err(format!("not an occurrence: {key}"));
                };
                let at: i64 = at.parse().map_err(|_| "bad occurrence time".to_string())?;
                let late = SystemTime::now()
                    .duration_since(task.run_at())
                    .unwrap_or_default();
                println!(
                    "{node}: {schedule} occurrence {at} (task {}, attempt {}), {late:?} late",
                    task.id(),
                    task.attempt()
                );
                seen.lock()
                    .unwrap()
                    .entry((schedule.to_string(), at))
                    .or_default()
                    .push((task.id().get(), task.attempt()));
                Ok(())
            }
        })
        .await?)
}

#[tokio::main]
async fn main() {
    if let Err(err) = run().await {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut secs = 16u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--secs" => {
                secs = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n >= 6)
                    .ok_or("--secs takes a number of seconds, at least 6")?
            }
            other => return Err(format!("unknown argument {other:?} (try --secs N)").into()),
        }
    }
    let dir = std::env::temp_dir().join(format!("ttw-recurring-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("tasks.db");
    // Two nodes, each with a store of its own on one file, as two
    // processes would have.
    let (store_a, store_b) = (Store::sqlite(&path).await?, Store::sqlite(&path).await?);
    let schedules = [
        Recurring::cron("cron-every-2s", "*/2 * * * * *").payload("cron"),
        Recurring::every("every-3s", Duration::from_secs(3)).payload("interval"),
    ];
    // Every node registers the schedules it runs at start: the second
    // registration of the same definition changes nothing.
    for store in [&store_a, &store_b] {
        for schedule in &schedules {
            let done = store.register_recurring(schedule.clone()).await?;
            println!("registered {schedule:?}: {done:?}");
        }
    }
    let firsts: BTreeMap<String, i64> = store_a
        .list_recurring()
        .await?
        .into_iter()
        .map(|r| {
            let at = r
                .next_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            (r.name, at)
        })
        .collect();
    let started = now_ms();
    let seen: Seen = Arc::default();
    let a = node(&store_a, "a", &seen).await?;
    let b = node(&store_b, "b", &seen).await?;
    tokio::time::sleep(Duration::from_secs(secs / 2)).await;
    println!("--- node a killed (aborted; its leases run out in 3 s) ---");
    a.abort();
    tokio::time::sleep(Duration::from_secs(secs - secs / 2)).await;
    // Occurrences due up to 4 s ago have had time to run.
    let checked_until = now_ms() - 4_000;
    b.shutdown().await?;

    let seen = seen.lock().unwrap().clone();
    println!();
    for (name, step) in [("cron-every-2s", 2_000), ("every-3s", 3_000)] {
        let first = firsts[name];
        // The cron schedule's occurrences are the even seconds; the
        // interval's are its first and every 3 s after.
        let due: Vec<i64> = (0..)
            .map(|k| first + k * step)
            .take_while(|t| *t <= checked_until)
            .collect();
        let mut run = 0;
        let mut duplicates = 0;
        let mut redelivered = 0;
        for t in &due {
            if let Some(deliveries) = seen.get(&(name.to_string(), *t)) {
                run += 1;
                let tasks: BTreeSet<i64> = deliveries.iter().map(|d| d.0).collect();
                duplicates += tasks.len() - 1;
                redelivered += deliveries.len() - tasks.len();
            }
        }
        println!(
            "{name:<14} occurrences due {:>3}, run {run:>3}, duplicates {duplicates}, missed {}, redelivered {redelivered} (over {:.1} s, two nodes, one killed half-way)",
            due.len(),
            due.len() - run,
            (checked_until - started) as f64 / 1000.0
        );
        if duplicates > 0 || run < due.len() {
            return Err(format!("{name}: an occurrence ran twice or not at all").into());
        }
    }
    drop((store_a, store_b));
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
