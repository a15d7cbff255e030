//! Clients that hang up, against `ttw server` as a child process on SQLite
//! and PostgreSQL: two thousand requests to the write routes, each closed at
//! a random point (before its body is all sent, while it is handled, or
//! never read), and then the server is as healthy as it was: well-behaved
//! clients get no error, every task answered 2xx is stored, and the node
//! delivers what falls due.

#[path = "support/backends.rs"]
mod backends;
#[path = "support/rng.rs"]
mod rng;

#[path = "support/receiver.rs"]
mod receiver;

#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

use backends::{Backend, Db};
use receiver::{Receiver, SECRET};
use rng::Rng;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Child;

const TOKEN: &str = "ops-token-0123456789";

/// `ttw server` as a child process on `db`, and its address.
async fn server(db: &Db, dir: &Path, hook: &str) -> (Child, String) {
    let database = match db.postgres_parts() {
        Some(_) => db.toml(),
        None => format!("database = \"{}\"", dir.join("tasks.db").display()),
    };
    let config = ttw_server::write_config(
        dir,
        &database,
        &format!(
            r#"max_body_bytes = 4194304

[[queues]]
name = "hooks"
webhook = {{ url = "{hook}", secret_env = "TTW_HOOK_SECRET" }}

[[queues]]
name = "other"

[[tokens]]
name = "ops"
secret_env = "TTW_TOKEN_OPS"
scopes = ["schedule", "read", "admin"]
"#
        ),
    );
    ttw_server::start(
        &config,
        &[("TTW_TOKEN_OPS", TOKEN), ("TTW_HOOK_SECRET", SECRET)],
    )
    .await
}

/// One HTTP/1.1 request as bytes.
fn request(method: &str, path: &str, body: &Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "{method} {path} HTTP/1.1\r\nhost: ttw\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A request to one of the write routes, picked by `kind`.
fn write_request(kind: u64, n: u64) -> Vec<u8> {
    let later = "2h";
    match kind {
        0 => request(
            "POST",
            "/v1/tasks",
            &json!({"queue": "hooks", "delay": later, "payload": n}),
        ),
        // Keyless, large enough for PostgreSQL's `COPY`.
        1 => request(
            "POST",
            "/v1/tasks/batch",
            &json!({"tasks": vec![json!({"queue": "hooks", "delay": later, "payload": {"n": n}}); 1000]}),
        ),
        2 => request(
            "POST",
            "/v1/tasks/batch",
            &json!({"tasks": (0..20).map(|i| json!({"queue": "hooks", "delay": later,
                "idempotency_key": format!("k{n}-{i}")})).collect::<Vec<_>>()}),
        ),
        3 => request(
            "POST",
            "/v1/tasks",
            &json!({"queue": "hooks", "delay": later, "idempotency_key": format!("d{}", n % 5),
                    "replace_pending": true}),
        ),
        4 => request(
            "POST",
            &format!("/v1/keys/d{}/reschedule", n % 5),
            &json!({"delay": "3h"}),
        ),
        5 => request(
            "DELETE",
            &format!("/v1/keys/k{}-0", n.saturating_sub(3)),
            &json!({}),
        ),
        6 => request(
            "POST",
            &format!("/v1/tasks/{}/reschedule", 1 + n % 50),
            &json!({"delay": "3h"}),
        ),
        7 => request("DELETE", &format!("/v1/tasks/{}", 1 + n % 200), &json!({})),
        8 => request(
            "POST",
            "/v1/tasks/redrive",
            &json!({"state": "cancelled", "limit": 10, "spread": "1h"}),
        ),
        9 => request(
            "PUT",
            &format!("/v1/recurring/r{}", n % 3),
            &json!({"every": format!("{}h", 1 + n % 4), "queue": "hooks"}),
        ),
        10 => request("POST", "/v1/queues/other/pause", &json!({})),
        11 => request(
            "PUT",
            "/v1/queues/other/limits",
            &json!({"concurrency": 1 + n % 9}),
        ),
        _ => unreachable!(),
    }
}

/// Sends `bytes` and answers the status, or `None` if `hang_up` (bytes
/// sent before closing, and then milliseconds waited) cut it short.
async fn send(addr: &str, bytes: &[u8], hang_up: Option<(usize, u64)>) -> Option<(u16, Value)> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    if let Some((sent, wait)) = hang_up {
        let _ = stream.write_all(&bytes[..sent.min(bytes.len())]).await;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        // Closed with the answer unread: a reset if it had come.
        drop(stream);
        return None;
    }
    stream.write_all(bytes).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
            .await
            .expect("the server answers")
            .unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if answer.len() >= end + 4 + len {
                let status = head[9..12].parse().unwrap();
                let body =
                    serde_json::from_slice(&answer[end + 4..end + 4 + len]).unwrap_or(Value::Null);
                return Some((status, body));
            }
        }
    }
    panic!("the server closed the connection without a whole answer");
}

/// The ids of the tasks an answer to a schedule or a batch names.
fn ids(answer: &Value) -> Vec<i64> {
    match answer["tasks"].as_array() {
        Some(tasks) => tasks.iter().filter_map(|t| t["id"].as_i64()).collect(),
        None => answer["id"].as_i64().into_iter().collect(),
    }
}

on_both! {
    /// Regression: on PostgreSQL, batch load from clients that hung up
    /// mid-request poisoned the server's pool (503 `got unexpected
    /// connection status after attempting to begin transaction`, `the
    /// sequence gave fewer ids than rows`), then the node's own statements
    /// failed and tasks due were never delivered until a restart.
    async fn clients_that_hang_up_leave_the_server_healthy(db: Db) {
        let dir = std::env::temp_dir().join(format!("ttw_hangups_{:?}_{}", db.backend, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let receiver = Receiver::start().await;
        let (_server, addr) = server(&db, &dir, &receiver.url("/hook")).await;
        let seed = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
        println!("seed {seed}");
        let mut rng = Rng(seed);
        // Some tasks for the routes that name one.
        for n in 0..10 {
            send(&addr, &write_request(2, n), None).await.unwrap();
        }
        let mut hangers = tokio::task::JoinSet::new();
        for n in 0..2_000 {
            // Half of them batches, the writes that hold a connection longest.
            let kind = if rng.below(2) == 0 { 1 + rng.below(2) } else { rng.below(12) };
            let bytes = write_request(kind, n);
            // Mostly after the whole request (the handler runs), else
            // part-way through the body.
            let sent = if rng.below(4) == 0 { rng.below(bytes.len() as u64) as usize } else { bytes.len() };
            let wait = rng.below(30);
            let addr = addr.clone();
            hangers.spawn(async move { send(&addr, &bytes, Some((sent, wait))).await });
            if hangers.len() >= 16 {
                hangers.join_next().await;
            }
        }
        while hangers.join_next().await.is_some() {}

        // Well-behaved clients: no error on any route, every task answered
        // is stored.
        let mut stored = Vec::new();
        for n in 0..120 {
            let kind = n % 12;
            let (status, answer) = send(&addr, &write_request(kind, 5_000 + n), None).await.unwrap();
            assert!(
                // Routes that name a task may find it gone or finished.
                (200..300).contains(&status) || (matches!(status, 404 | 409) && matches!(kind, 4..=7)),
                "route kind {kind} answered {status} {answer} (seed {seed})"
            );
            if matches!(kind, 0..=3) {
                stored.extend(ids(&answer));
            }
        }
        for id in stored.iter().step_by(37) {
            let (status, answer) = send(&addr, &request("GET", &format!("/v1/tasks/{id}"), &json!({})), None)
                .await
                .unwrap();
            assert_eq!(status, 200, "task {id} was answered 2xx and is not stored: {answer}");
        }
        let (status, counts) = send(&addr, &request("GET", "/v1/counts", &json!({})), None).await.unwrap();
        assert_eq!(status, 200, "{counts}");

        // And the node delivers what falls due.
        let tasks: Vec<Value> = (0..300).map(|n| json!({"queue": "hooks", "delay": "1s", "payload": n})).collect();
        let (status, answer) = send(&addr, &request("POST", "/v1/tasks/batch", &json!({"tasks": tasks})), None)
            .await
            .unwrap();
        assert_eq!(status, 200, "{answer}");
        let due: BTreeSet<i64> = ids(&answer).into_iter().collect();
        assert_eq!(due.len(), 300);
        receiver
            .wait_until(Duration::from_secs(60), |seen| {
                let got: BTreeSet<i64> = seen.iter().map(|r| r["task"].as_i64().unwrap()).collect();
                due.is_subset(&got)
            })
            .await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
