//! Pull queues under load: `ttw server` (a child process, on SQLite, or on
//! PostgreSQL when `DATABASE_URL` is set) with the pull queue `jobs`, and
//! workers that are HTTP clients in this process.
//!
//! 1. Idle: `TTW_PULL_IDLE` (1,000) long polls waiting (`wait` 20 s, each
//!    on its own connection): the server's CPU a second and its memory,
//!    beside the same server with none.
//! 2. Precision: with those polls waiting, `TTW_PULL_TASKS` (1,000) tasks
//!    scheduled at 100 a second, each due 2 s after it is sent; each
//!    claim's answer less its task's `run_at` (none may be early).
//! 3. Drain: `TTW_PULL_DRAIN` (50,000) due now, written in batches of
//!    1,000, then `TTW_PULL_WORKERS` (64) workers, each on its own
//!    connection, claiming up to 100 and acking each task: tasks a second
//!    from the first claim to the last ack.
//!
//! `cargo bench -p ttw --bench pull`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod support;

use support::{now_ms, percentile, Server, TOKEN};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A claim of up to `max` tasks of `jobs`, waiting up to `wait`: the tasks
/// (id, claim, run_at in ms), or `None` if the request failed.
async fn claim(
    client: &reqwest::Client,
    base: &str,
    worker: usize,
    max: usize,
    wait: &str,
) -> Option<Vec<(i64, String, i64)>> {
    let body =
        format!(r#"{{"worker": "bench-{worker}", "max": {max}, "wait": "{wait}", "lease": "5m"}}"#);
    let answer = client
        .post(format!("{base}/v1/queues/jobs/claim"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .ok()?;
    if answer.status().as_u16() != 200 {
        return None;
    }
    let text = answer.text().await.ok()?;
    let list: serde_json::Value = serde_json::from_str(&text).ok()?;
    let tasks = list["tasks"].as_array()?;
    Some(
        tasks
            .iter()
            .map(|t| {
                let run_at = humantime::parse_rfc3339(t["run_at"].as_str().unwrap_or_default())
                    .map(|at| at.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64)
                    .unwrap_or(0);
                (
                    t["id"].as_i64().unwrap_or(0),
                    t["claim"].as_str().unwrap_or_default().to_string(),
                    run_at,
                )
            })
            .collect(),
    )
}

async fn ack(client: &reqwest::Client, base: &str, id: i64, claim: &str) -> bool {
    client
        .post(format!("{base}/v1/tasks/{id}/ack"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(format!(r#"{{"claim": "{claim}"}}"#))
        .send()
        .await
        .is_ok_and(|r| r.status().as_u16() == 200)
}

fn main() {
    let idle = setting("TTW_PULL_IDLE", 1_000);
    let tasks = setting("TTW_PULL_TASKS", 1_000);
    let drain = setting("TTW_PULL_DRAIN", 50_000);
    let workers = setting("TTW_PULL_WORKERS", 64);
    let dir = std::env::temp_dir().join(format!("ttw_pull_bench_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (database, backend) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, "PostgreSQL"),
        _ => (dir.join("tasks.db").display().to_string(), "SQLite"),
    };
    let schema = format!("ttw_pull_bench_{}", std::process::id());
    let config = dir.join("ttw.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{database}\"\n{}\n\n[[queues]]\nname = \"jobs\"\npull = true\n\n[[tokens]]\nname = \"bench\"\nsecret_env = \"TTW_BENCH_TOKEN\"\nscopes = [\"schedule\", \"consume\"]\n",
            if backend == "PostgreSQL" { format!("schema = \"{schema}\"") } else { String::new() }
        ),
    )
    .unwrap();
    let server = Server::start(&config, &[("TTW_BENCH_TOKEN", TOKEN)]);
    let (pid, base) = (server.pid(), server.base.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // 1. Idle, with none and with `idle` long polls waiting.
    let window = Duration::from_secs(10);
    std::thread::sleep(Duration::from_secs(2));
    let (cpu_none, rss_none) = {
        let before = support::cpu_time(pid);
        std::thread::sleep(window);
        (support::cpu_time(pid) - before, support::rss_kib(pid))
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(idle + workers)
        .build()
        .unwrap();
    let lateness: Arc<Mutex<Vec<i64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let pollers: Vec<_> = (0..idle)
        .map(|n| {
            let (client, base, lateness, stop) =
                (client.clone(), base.clone(), lateness.clone(), stop.clone());
            runtime.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Some(held) = claim(&client, &base, n, 1, "20s").await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let arrived = now_ms();
                    for (id, claim, run_at) in held {
                        lateness.lock().unwrap().push(arrived - run_at);
                        ack(&client, &base, id, &claim).await;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(5));
    let (cpu_polls, rss_polls) = {
        let before = support::cpu_time(pid);
        std::thread::sleep(window);
        (support::cpu_time(pid) - before, support::rss_kib(pid))
    };
    let per_s = |d: Duration| d.as_secs_f64() * 1000.0 / window.as_secs_f64();
    println!(
        "pull {backend}: idle, no polls: {:.1} ms CPU/s, {} MiB; {idle} long polls waiting: {:.1} ms CPU/s, {} MiB",
        per_s(cpu_none),
        rss_none / 1024,
        per_s(cpu_polls),
        rss_polls / 1024
    );

    // 2. Precision: tasks falling due while the polls wait.
    runtime.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        for n in 0..tasks {
            tick.tick().await;
            let run_at = UNIX_EPOCH + Duration::from_millis((now_ms() + 2_000) as u64);
            let body = format!(
                r#"{{"queue": "jobs", "run_at": "{}", "payload": {n}}}"#,
                humantime::format_rfc3339_millis(run_at)
            );
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move {
                let _ = client
                    .post(format!("{base}/v1/tasks"))
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
            });
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while lateness.lock().unwrap().len() < tasks && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut late = lateness.lock().unwrap().clone();
    late.sort_unstable();
    let early = late.iter().filter(|&&l| l < 0).count();
    println!(
        "pull {backend}: {} of {tasks} claimed by {idle} waiting polls; lateness p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms; early {early}",
        late.len(),
        percentile(&late, 0.5),
        percentile(&late, 0.99),
        percentile(&late, 0.999),
        late.last().copied().unwrap_or(0)
    );
    stop.store(true, Ordering::Relaxed);
    for poller in pollers {
        poller.abort();
    }

    // 3. Drain: `drain` due now, `workers` workers.
    let written = runtime.block_on(async {
        let past = humantime::format_rfc3339_millis(SystemTime::now() - Duration::from_secs(1));
        let one = format!(r#"{{"queue": "jobs", "run_at": "{past}", "payload": 1}}"#);
        let mut written = 0;
        while written < drain {
            let n = (drain - written).min(1_000);
            let batch = format!(r#"{{"tasks": [{}]}}"#, vec![one.as_str(); n].join(","));
            let answer = client
                .post(format!("{base}/v1/tasks/batch"))
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(batch)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status().as_u16(), 200, "a batch is written");
            written += n;
        }
        written
    });
    let acked = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    runtime.block_on(async {
        let pool: Vec<_> = (0..workers)
            .map(|n| {
                let (client, base, acked) = (
                    reqwest::Client::builder().build().unwrap(),
                    base.clone(),
                    acked.clone(),
                );
                tokio::spawn(async move {
                    loop {
                        let Some(held) = claim(&client, &base, n, 100, "0s").await else {
                            continue;
                        };
                        if held.is_empty() {
                            return;
                        }
                        for (id, claim, _) in held {
                            if ack(&client, &base, id, &claim).await {
                                acked.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        for worker in pool {
            worker.await.unwrap();
        }
    });
    let took = started.elapsed();
    let acked = acked.load(Ordering::Relaxed);
    println!(
        "pull {backend}: drained {acked} of {written} due now with {workers} workers (claims of 100, an ack each) in {:.2} s: {:.0} tasks/s",
        took.as_secs_f64(),
        acked as f64 / took.as_secs_f64()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
