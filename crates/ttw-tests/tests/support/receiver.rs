//! The Python webhook receiver (`receiver.py`) as a child process: started,
//! killed with `SIGKILL`, started again on its port, and what it received
//! read back from its output.

#![allow(dead_code)]

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The secret the tests sign with.
pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One request the receiver saw, as it printed it.
pub type Request = Value;

/// A running receiver and every request it (and its earlier runs) saw.
pub struct Receiver {
    child: Child,
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Request>>>,
    workers: Option<usize>,
}

impl Receiver {
    /// A receiver on a free port.
    pub async fn start() -> Receiver {
        Self::start_on(0, Arc::default(), None).await
    }

    /// A receiver on a free port whose requests are read by a pool of
    /// `workers` threads: the connections beyond it wait in the accept
    /// queue, their requests unread, until a worker is free.
    pub async fn with_workers(workers: usize) -> Receiver {
        Self::start_on(0, Arc::default(), Some(workers)).await
    }

    async fn start_on(
        port: u16,
        seen: Arc<Mutex<Vec<Request>>>,
        workers: Option<usize>,
    ) -> Receiver {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/receiver.py");
        let pool = workers.map(|n| n.to_string());
        let mut child = Command::new("python3")
            .args([script, &port.to_string(), SECRET])
            .args(pool.as_deref())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 starts the receiver");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the receiver says where it listens")
            .unwrap()
            .expect("the receiver printed a line");
        let port = first
            .strip_prefix("LISTENING ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line from the receiver: {first}"));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let request: Value = serde_json::from_str(&line).expect("a JSON line");
                log.lock().unwrap().push(request);
            }
        });
        Receiver {
            child,
            port,
            seen,
            workers,
        }
    }

    /// Its URL, at `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// `SIGKILL`, and reaped: its port refuses connections.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("SIGKILL the receiver");
    }

    /// Started again on the same port, keeping what was seen.
    pub async fn restart(self) -> Receiver {
        let (port, seen, workers) = (self.port, self.seen.clone(), self.workers);
        drop(self);
        Self::start_on(port, seen, workers).await
    }

    /// What was seen so far.
    pub fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }

    /// The requests that were answered 2xx.
    pub fn accepted(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r["status"]
                    .as_i64()
                    .is_some_and(|s| (200..300).contains(&s))
            })
            .collect()
    }

    /// Waits until `done` holds for what was seen (at most `within`).
    pub async fn wait_until(&self, within: Duration, done: impl Fn(&[Request]) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if done(&self.requests()) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "the receiver did not see what was awaited within {within:?}; it saw {} requests",
                    self.requests().len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
