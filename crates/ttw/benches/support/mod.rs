//! What the service's benches share: `ttw server` as a child process, a
//! webhook receiver that records each delivery's lateness, and the clock
//! and percentile arithmetic of their reports.

#![allow(dead_code)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;

/// The wall clock, in ms since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The value at `p` (0 to 1) of `sorted`, 0 for none.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `ttw server` as a child process.
pub struct Server {
    pub child: Child,
    /// Its address, `http://host:port`.
    pub base: String,
}

impl Server {
    /// Starts the `ttw` binary on `config` with `env`, once it says where
    /// it listens.
    pub fn start(config: &Path, env: &[(&str, &str)]) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ttw"));
        command
            .args(["server", "--config"])
            .arg(config)
            .stdout(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("the ttw binary starts");
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let base = first
            .trim()
            .strip_prefix("ttw server: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_string();
        Server { child, base }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its address without the scheme: `host:port`.
    pub fn addr(&self) -> String {
        self.base.strip_prefix("http://").unwrap().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A webhook receiver on `runtime`, answering 204: its URL, and each
/// delivery's lateness in ms (arrival less the `ttw-run-at` header).
pub fn receiver(runtime: &tokio::runtime::Runtime) -> (String, Arc<Mutex<Vec<i64>>>) {
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let log = seen.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap| {
            let log = log.clone();
            async move {
                let arrived = now_ms();
                if let Some(run_at) = headers
                    .get("ttw-run-at")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i64>().ok())
                {
                    log.lock().unwrap().push(arrived - run_at);
                }
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    runtime.spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), seen)
}
