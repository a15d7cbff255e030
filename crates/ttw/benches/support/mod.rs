//! What the service's benches share: `ttw server` as a child process, a
//! webhook receiver that records each delivery's lateness, and the clock
//! and percentile arithmetic of their reports.

#![allow(dead_code)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// The CPU time (user and system) process `pid` has used, from /proc.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // Linux reports in USER_HZ, 100 a second on every platform it runs on.
    Duration::from_millis(ticks * 10)
}

/// The resident memory of process `pid`, in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
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
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
        // The rest of its output is read and dropped: a pipe closed under
        // it made the server's next line a broken pipe that ended it, and
        // a run then failed with "connection refused".
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
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

/// The token the benches' servers are configured with.
pub const TOKEN: &str = "bench-token-0123456789";

/// Sends `requests` POSTs to `path` (the `bodies` in turn) from
/// `connections` workers, each on its own keep-alive HTTP/1.1 connection
/// (hyper's connection API: the load generator shares the machine with the
/// server and the database, so it is kept light); every answer must be
/// `status`, and each one counts in `done`.
pub async fn load(
    addr: &str,
    connections: usize,
    requests: usize,
    path: &str,
    bodies: &[bytes::Bytes],
    status: u16,
    done: &Arc<AtomicUsize>,
) {
    let next = Arc::new(AtomicUsize::new(0));
    let auth = hyper::header::HeaderValue::from_str(&format!("Bearer {TOKEN}")).unwrap();
    let workers: Vec<_> = (0..connections)
        .map(|_| {
            let (next, addr, path, bodies, auth, done) = (
                next.clone(),
                addr.to_string(),
                path.to_string(),
                bodies.to_vec(),
                auth.clone(),
                done.clone(),
            );
            tokio::spawn(async move {
                let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut sender, conn) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .unwrap();
                tokio::spawn(conn);
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= requests {
                        break;
                    }
                    let request = hyper::Request::post(path.as_str())
                        .header("host", addr.as_str())
                        .header("authorization", auth.clone())
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bodies[n % bodies.len()].clone()))
                        .unwrap();
                    let answer = sender.send_request(request).await.unwrap();
                    assert_eq!(answer.status().as_u16(), status);
                    http_body_util::BodyExt::collect(answer.into_body())
                        .await
                        .unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
}
