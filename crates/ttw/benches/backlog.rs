//! A large backlog through `ttw server`'s batches, and what it costs: the
//! server (the `ttw` binary as a child process, its scheduler on) gets
//! `POST /v1/tasks/batch` of 1,000 keyless tasks due 1 to 30 days out from
//! 4 keep-alive connections until `TTW_BACKLOG_TASKS` are pending (default
//! 10 million); the insert rate of each million, then the bytes a pending
//! task takes in the database, the server's memory, and the lateness of
//! tasks due now (1,000 a second for 10 s, due 2 s after they are sent,
//! taken by a webhook receiver in this process) with the backlog there;
//! then how long each page of the console takes to read (the `/v1` calls
//! it makes, 5 times each: the median and the slowest), 1,000 of the
//! tasks carrying a partition key for its filter. SQLite, or PostgreSQL
//! when `DATABASE_URL` is set.
//!
//! `cargo bench -p ttw --bench backlog` (`TTW_BACKLOG_TASKS`).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use support::{now_ms, percentile, Server, TOKEN};

const BATCH: usize = 1_000;

/// The resident memory of process `pid`, in bytes, from /proc.
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Eight batch bodies whose tasks are due 1 to 30 days out, spread.
fn backlog_bodies() -> Vec<bytes::Bytes> {
    (0..8u64)
        .map(|b| {
            let tasks: Vec<String> = (0..BATCH as u64)
                .map(|i| {
                    let secs = 86_400 + (b * 7_919 + i * 2_591) % (29 * 86_400);
                    format!(r#"{{"queue":"hooks","delay":"{secs}s","payload":{{"order":{i}}}}}"#)
                })
                .collect();
            bytes::Bytes::from(format!(r#"{{"tasks":[{}]}}"#, tasks.join(",")))
        })
        .collect()
}

fn main() {
    let total: usize = std::env::var("TTW_BACKLOG_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // The receiver: each webhook's lateness, in ms.
    let (receiver, seen) = support::receiver(&runtime);

    let dir = std::env::temp_dir().join(format!("ttw_backlog_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (database, backend) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, "PostgreSQL"),
        _ => (dir.join("tasks.db").display().to_string(), "SQLite"),
    };
    let schema = format!("ttw_backlog_{}", std::process::id());
    let config = dir.join("ttw.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{database}\"\n{}\n\n[[queues]]\nname = \"hooks\"\nwebhook = {{ url = \"{receiver}\", secret_env = \"TTW_HOOK_SECRET\", max_in_flight = 256 }}\n\n[[tokens]]\nname = \"bench\"\nsecret_env = \"TTW_BENCH_TOKEN\"\nscopes = [\"admin\"]\n",
            if backend == "PostgreSQL" { format!("schema = \"{schema}\"") } else { String::new() }
        ),
    )
    .unwrap();
    let server = Server::start(
        &config,
        &[
            ("TTW_BENCH_TOKEN", TOKEN),
            ("TTW_HOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        ],
    );
    let (pid, addr) = (server.pid(), server.addr());

    // The backlog, a million at a time.
    let bodies = backlog_bodies();
    let batches = total / BATCH;
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    runtime.block_on(async {
        let monitor = {
            let done = done.clone();
            tokio::spawn(async move {
                let (mut million, mut at) = (1usize, Instant::now());
                while million * 1_000_000 <= batches * BATCH {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if done.load(Ordering::Relaxed) * BATCH >= million * 1_000_000 {
                        println!(
                            "backlog {backend}: million {million}: {:.0} tasks/s",
                            1_000_000.0 / at.elapsed().as_secs_f64()
                        );
                        (million, at) = (million + 1, Instant::now());
                    }
                }
            })
        };
        support::load(&addr, 4, batches, "/v1/tasks/batch", &bodies, 200, &done).await;
        let _ = monitor.await;
    });
    let secs = started.elapsed().as_secs_f64();
    println!(
        "backlog {backend}: {} tasks in {secs:.0} s: {:.0} tasks/s over all; server memory {} MB",
        batches * BATCH,
        (batches * BATCH) as f64 / secs,
        rss(pid) / 1_000_000
    );

    // The bytes a pending task takes.
    let bytes = runtime.block_on(database_bytes(backend, &database, &schema, &dir));
    println!(
        "backlog {backend}: {} MB of database, {:.0} B a pending task",
        bytes / 1_000_000,
        bytes as f64 / (batches * BATCH) as f64
    );

    // Tasks due now, with the backlog there: 1,000 a second for 10 s.
    let sent = runtime.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            tick.tick().await;
            let run_at = humantime::format_rfc3339_millis(
                UNIX_EPOCH + Duration::from_millis((now_ms() + 2_000) as u64),
            );
            let tasks: Vec<String> = (0..100)
                .map(|i| format!(r#"{{"queue":"hooks","run_at":"{run_at}","payload":{i}}}"#))
                .collect();
            let body = bytes::Bytes::from(format!(r#"{{"tasks":[{}]}}"#, tasks.join(",")));
            let (addr, done) = (addr.clone(), done.clone());
            tokio::spawn(async move {
                support::load(&addr, 1, 1, "/v1/tasks/batch", &[body], 200, &done).await
            });
        }
        100 * 100
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().len() < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut lateness = seen.lock().unwrap().clone();
    lateness.sort_unstable();
    println!(
        "backlog {backend}: {} of {sent} due now delivered with the backlog pending: lateness p50 {} ms, p99 {} ms, max {} ms; server memory {} MB",
        lateness.len(),
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or(0),
        rss(pid) / 1_000_000
    );
    runtime.block_on(console_pages(backend, &addr));
    drop(server);
    if backend == "PostgreSQL" {
        runtime.block_on(async {
            if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&database).await
            {
                let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .execute(&mut conn)
                    .await;
            }
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Times the console's pages on the backlog: each page's `/v1` calls in
/// turn, 5 times; prints each page's median and slowest, and the slowest
/// page.
async fn console_pages(backend: &str, addr: &str) {
    let client = reqwest::Client::new();
    let base = format!("http://{addr}");
    let call = |method: reqwest::Method, path: String, body: Option<String>| {
        let mut request = client
            .request(method, format!("{base}{path}"))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        async move {
            let response = request.send().await.expect("the server answers");
            // A key nobody has is a 404, the page's answer too.
            let status = response.status();
            assert!(status.is_success() || status == 404, "{status}");
            response.text().await.unwrap()
        }
    };
    // A tenant's tasks among the backlog, for the filter by partition key.
    let tasks: Vec<String> = (0..1_000)
        .map(|i| {
            format!(r#"{{"queue":"hooks","delay":"20d","partition_key":"tenant-7","payload":{i}}}"#)
        })
        .collect();
    call(
        reqwest::Method::POST,
        "/v1/tasks/batch".into(),
        Some(format!(r#"{{"tasks":[{}]}}"#, tasks.join(","))),
    )
    .await;
    let newest = call(
        reqwest::Method::GET,
        "/v1/tasks?order=desc&limit=1".into(),
        None,
    )
    .await;
    let id = newest
        .split("\"id\":")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("1")
        .to_string();
    let hour_ago = humantime::format_rfc3339_millis(
        UNIX_EPOCH + Duration::from_millis((now_ms() - 3_600_000) as u64),
    );
    // The second page of the whole backlog in due order, by its cursor.
    let due_page = "/v1/tasks?state=scheduled&due_from=2026-01-01T00:00:00Z&order=due&limit=50";
    let first = call(reqwest::Method::GET, due_page.into(), None).await;
    let due_cursor = first
        .split("\"next_cursor\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or("0_1")
        .to_string();
    let get = |p: &str| (reqwest::Method::GET, p.to_string(), None::<String>);
    let post = |p: &str, b: &str| (reqwest::Method::POST, p.to_string(), Some(b.to_string()));
    let pages = [
        ("tasks (newest first)", vec![get("/v1/tasks?order=desc&limit=50")]),
        ("tasks, next page", vec![get(&format!("/v1/tasks?order=desc&limit=50&cursor={id}"))]),
        ("tasks, oldest first", vec![get("/v1/tasks?order=asc&limit=50")]),
        ("tasks, state dead", vec![get("/v1/tasks?state=dead&order=desc&limit=50")]),
        ("tasks, state scheduled, queue hooks", vec![get("/v1/tasks?state=scheduled&queue=hooks&order=desc&limit=50")]),
        ("tasks, partition key", vec![get("/v1/tasks?partition_key=tenant-7&order=desc&limit=50")]),
        ("tasks, idempotency key", vec![get("/v1/tasks?idempotency_key=nobody&limit=50")]),
        ("tasks, state scheduled, due between", vec![get("/v1/tasks?state=scheduled&due_before=2099-01-01T00:00:00Z&due_from=2026-01-01T00:00:00Z&limit=50")]),
        ("tasks, state scheduled, due from 2026, in due order", vec![get(due_page)]),
        ("tasks, the same, next page", vec![get(&format!("{due_page}&cursor={due_cursor}"))]),
        ("tasks, created in the last hour", vec![get(&format!("/v1/tasks?created_from={hour_ago}&order=desc&limit=50"))]),
        ("bulk cancel, dry run by partition key", vec![post("/v1/tasks/cancel", r#"{"partition_key":"tenant-7","dry_run":true}"#)]),
        ("a task", vec![get(&format!("/v1/tasks/{id}")), get(&format!("/v1/tasks/{id}/attempts"))]),
        ("a key", vec![get("/v1/keys/nobody-has-it")]),
        ("queues", vec![get("/v1/queues"), get("/v1/counts")]),
        ("recurring", vec![get("/v1/recurring")]),
        ("nodes", vec![get("/v1/nodes"), get("/v1/stats")]),
        ("charts", vec![get("/v1/stats")]),
    ];
    let mut slowest = (Duration::ZERO, "");
    for (page, requests) in &pages {
        let mut times = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            for (method, path, body) in requests {
                call(method.clone(), path.clone(), body.clone()).await;
            }
            times.push(started.elapsed());
        }
        times.sort();
        println!(
            "backlog {backend}: console page {page}: median {:.1} ms, slowest {:.1} ms",
            times[2].as_secs_f64() * 1000.0,
            times[4].as_secs_f64() * 1000.0
        );
        if times[4] > slowest.0 {
            slowest = (times[4], page);
        }
    }
    println!(
        "backlog {backend}: the slowest console page: {} at {:.1} ms",
        slowest.1,
        slowest.0.as_secs_f64() * 1000.0
    );
}

/// The bytes the store takes: the SQLite file and its WAL, or the tasks
/// table with its indexes and TOAST on PostgreSQL.
async fn database_bytes(backend: &str, database: &str, schema: &str, dir: &std::path::Path) -> u64 {
    if backend == "PostgreSQL" {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(database)
            .await
            .unwrap();
        let bytes: i64 = sqlx::query_scalar(&format!(
            "SELECT pg_total_relation_size('{schema}.ttw_tasks')"
        ))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        return bytes as u64;
    }
    ["tasks.db", "tasks.db-wal"]
        .iter()
        .map(|f| std::fs::metadata(dir.join(f)).map_or(0, |m| m.len()))
        .sum()
}
