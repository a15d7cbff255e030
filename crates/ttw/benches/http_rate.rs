//! How fast `ttw server` schedules over HTTP: single `POST /v1/tasks`
//! requests from many keep-alive connections (written in groups by the
//! server), then `POST /v1/tasks/batch` of 1,000. The server is the `ttw`
//! binary as a child process, with its scheduler off (the API and the
//! store alone), on SQLite, or on PostgreSQL when `DATABASE_URL` is set.
//!
//! `cargo bench -p ttw --bench http_rate` (`TTW_HTTP_SINGLES`,
//! `TTW_HTTP_CONNECTIONS`, `TTW_HTTP_BATCHES` change the sizes).

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

mod support;

use support::{Server, TOKEN};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let singles = setting("TTW_HTTP_SINGLES", 40_000);
    let connections = setting("TTW_HTTP_CONNECTIONS", 64);
    let batches = setting("TTW_HTTP_BATCHES", 200);
    let dir = std::env::temp_dir().join(format!("ttw_http_rate_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (database, backend) = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => (url, "PostgreSQL"),
        _ => (dir.join("tasks.db").display().to_string(), "SQLite"),
    };
    let schema = format!("ttw_http_rate_{}", std::process::id());
    let config = dir.join("ttw.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndatabase = \"{database}\"\n{}\n[scheduler]\nenabled = false\n\n[[tokens]]\nname = \"bench\"\nsecret_env = \"TTW_BENCH_TOKEN\"\nscopes = [\"schedule\"]\n",
            if backend == "PostgreSQL" { format!("schema = \"{schema}\"") } else { String::new() }
        ),
    )
    .unwrap();
    let server = Server::start(&config, &[("TTW_BENCH_TOKEN", TOKEN)]);
    let base = server.base.clone();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = base.strip_prefix("http://").unwrap().to_string();
    let done = Arc::new(AtomicUsize::new(0));
    runtime.block_on(async {
        // Singles: `connections` workers, each its own keep-alive connection.
        let body = r#"{"payload": {"coupon": "X"}, "delay": "1h"}"#;
        let started = Instant::now();
        support::load(&addr, connections, singles, "/v1/tasks", &[body.to_string().into()], 201, &done).await;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{backend}: {singles} single schedules over {connections} keep-alive connections in {secs:.2} s: {:.0} tasks/s",
            singles as f64 / secs
        );

        // Batches of 1,000 from 4 connections.
        let batch = format!("{{\"tasks\": [{}]}}", vec![body; 1000].join(","));
        let started = Instant::now();
        support::load(&addr, 4, batches, "/v1/tasks/batch", &[batch.into()], 200, &done).await;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{backend}: {} tasks in batches of 1,000 over 4 connections in {secs:.2} s: {:.0} tasks/s",
            batches * 1000,
            (batches * 1000) as f64 / secs
        );
    });
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
