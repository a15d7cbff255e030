//! From an HTTP schedule to the webhook arriving: `ttw server` (the `ttw`
//! binary as a child process, its scheduler on) gets `POST /v1/tasks` at a
//! steady rate, each task due a few seconds later, so that as many fall
//! due each second; a receiver in this process takes the webhooks and
//! records each one's lateness (arrival minus the `ttw-run-at` header).
//! First the server's idle cost: the CPU time it uses over a quiet spell,
//! read from `/proc`. SQLite, or PostgreSQL when `DATABASE_URL` is set.
//!
//! `cargo bench -p ttw --bench http_lateness` (`TTW_LATENESS_RATE`, tasks
//! a second, default 1000; `TTW_LATENESS_SECONDS`, default 20;
//! `TTW_IDLE_SECONDS`, default 30).

mod support;

use std::time::{Duration, Instant, UNIX_EPOCH};

use support::{now_ms, percentile, Server};

const TOKEN: &str = "bench-token-0123456789";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rate = setting("TTW_LATENESS_RATE", 1000);
    let seconds = setting("TTW_LATENESS_SECONDS", 20);
    let idle_seconds = setting("TTW_IDLE_SECONDS", 30);
    let total = rate * seconds;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    // The receiver: each webhook's lateness, in ms.
    let (receiver, seen) = support::receiver(&runtime);

    let dir = std::env::temp_dir().join(format!("ttw_http_lateness_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (database, backend) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, "PostgreSQL"),
        _ => (dir.join("tasks.db").display().to_string(), "SQLite"),
    };
    let schema = format!("ttw_http_lateness_{}", std::process::id());
    let config = dir.join("ttw.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{database}\"\n{}\n\n[[queues]]\nname = \"hooks\"\nwebhook = {{ url = \"{receiver}\", secret_env = \"TTW_HOOK_SECRET\", max_in_flight = 256 }}\n\n[[tokens]]\nname = \"bench\"\nsecret_env = \"TTW_BENCH_TOKEN\"\nscopes = [\"schedule\"]\n",
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
    let (pid, base) = (server.pid(), server.base.clone());

    // Idle: the server with its node, nothing scheduled.
    std::thread::sleep(Duration::from_secs(2));
    let before = support::cpu_time(pid);
    std::thread::sleep(Duration::from_secs(idle_seconds));
    let idle = support::cpu_time(pid) - before;
    println!(
        "http_lateness {backend}: idle {:.1} ms of CPU a second over {idle_seconds} s",
        idle.as_secs_f64() * 1000.0 / idle_seconds as f64
    );

    // Load: `rate` schedules a second, each due 2 s after it is sent.
    let delay_ms = 2_000;
    let failed = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .build()
            .unwrap();
        let url = format!("{base}/v1/tasks");
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        let per_tick = (rate / 100).max(1);
        let mut sent = 0;
        let mut requests = Vec::with_capacity(total as usize);
        while sent < total {
            tick.tick().await;
            for _ in 0..per_tick.min(total - sent) {
                let (client, url) = (client.clone(), url.clone());
                let run_at = now_ms() + delay_ms;
                let body = format!(
                    "{{\"queue\":\"hooks\",\"run_at\":\"{}\",\"payload\":{sent}}}",
                    humantime::format_rfc3339_millis(
                        UNIX_EPOCH + Duration::from_millis(run_at as u64)
                    )
                );
                requests.push(tokio::spawn(async move {
                    client
                        .post(url)
                        .bearer_auth(TOKEN)
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .map(|r| r.status().as_u16() == 201)
                        .unwrap_or(false)
                }));
                sent += 1;
            }
        }
        let mut failed = 0;
        for r in requests {
            if !r.await.unwrap_or(false) {
                failed += 1;
            }
        }
        failed
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while (seen.lock().unwrap().len() as u64) < total - failed && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut lateness = seen.lock().unwrap().clone();
    lateness.sort_unstable();
    println!(
        "http_lateness {backend}: {} of {total} scheduled at {rate}/s over {seconds} s ({failed} refused), {} webhooks: lateness p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms",
        total - failed,
        lateness.len(),
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        percentile(&lateness, 0.999),
        lateness.last().copied().unwrap_or(0)
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
