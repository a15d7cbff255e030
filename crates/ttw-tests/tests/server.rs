//! `ttw server` as a child process, used from another language: a client
//! in Python's standard library (`support/client.py`) schedules, reads,
//! cancels and reschedules over HTTP, and the Python webhook receiver
//! (`support/receiver.py`) gets the deliveries and checks their signatures.
//! Then the table of bad requests, each answered with its documented status
//! and code, and SIGTERM.

#[path = "support/receiver.rs"]
mod receiver;

#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use receiver::{Receiver, SECRET};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use ttw_durable::{Store, TaskId, TaskState};

const TOKEN: &str = "app-token-0123456789";
const READER: &str = "reader-token-0123456789";
const OPS: &str = "ops-token-0123456789";

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ttw_server_{name}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The server process and the address it listens on.
struct Server {
    child: Child,
    base: String,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Server {
    async fn start(config: &Path) -> Server {
        let env = [
            ("TTW_TOKEN_APP", TOKEN),
            ("TTW_TOKEN_READER", READER),
            ("TTW_TOKEN_OPS", OPS),
            ("TTW_HOOK_SECRET", SECRET),
        ];
        let (child, addr, lines) = ttw_server::spawn(config, &env).await;
        Server {
            child,
            base: format!("http://{addr}"),
            lines,
        }
    }
}

/// The Python client in bridge mode: one request a line.
struct Bridge {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Bridge {
    fn start(base: &str) -> Bridge {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/client.py");
        let mut child = Command::new("python3")
            .args([script, base, TOKEN, "bridge"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the client");
        Bridge {
            stdin: child.stdin.take().unwrap(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
        }
    }

    async fn call(&mut self, request: Value) -> (u16, Value) {
        let mut line = request.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
            .await
            .expect("the client answers")
            .unwrap()
            .expect("a line");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        (
            answer["status"].as_u64().unwrap() as u16,
            answer["body"].clone(),
        )
    }
}

/// Waits until the receiver has seen every task of `expected`; fails the
/// test with how many and which are missing after `within`.
async fn wait_delivered(receiver: &Receiver, expected: &BTreeSet<i64>, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let seen: BTreeSet<i64> = receiver
            .requests()
            .iter()
            .map(|r| r["task"].as_i64().unwrap())
            .collect();
        if expected.is_subset(&seen) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivered {} of {} within {within:?}; missing {:?}",
            expected.intersection(&seen).count(),
            expected.len(),
            expected.difference(&seen).take(10).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn config(dir: &Path, hook: &str) -> PathBuf {
    let database = format!("database = \"{}\"", dir.join("tasks.db").display());
    ttw_server::write_config(
        dir,
        &database,
        &format!(
            r#"max_body_bytes = 65536

[[queues]]
name = "hooks"
webhook = {{ url = "{hook}", secret_env = "TTW_HOOK_SECRET" }}

[[queues]]
name = "library"

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read"]

[[tokens]]
name = "reader"
secret_env = "TTW_TOKEN_READER"
scopes = ["read"]
queues = ["library"]

[[tokens]]
name = "ops"
secret_env = "TTW_TOKEN_OPS"
scopes = ["admin"]
"#
        ),
    )
}

/// A Python client schedules 20 tasks, a keyed one twice, a batch of 5, one
/// it cancels and one it moves by key; the Python receiver gets every task
/// but the cancelled one, each signed as Standard Webhooks says and none
/// before it was due; the store then holds them done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_schedules_and_a_python_receiver_gets_the_webhooks() {
    let dir = temp_dir("python");
    let receiver = Receiver::start().await;
    let server = Server::start(&config(&dir, &receiver.url("/hook"))).await;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/client.py");
    let out = Command::new("python3")
        .args([script, &server.base, TOKEN, "flow", "hooks"])
        .output()
        .await
        .expect("python3 runs the client");
    assert!(
        out.status.success(),
        "the client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: Value = serde_json::from_slice(&out.stdout).expect("the client's summary");
    let mut expected: BTreeSet<i64> = done["ids"]
        .as_array()
        .unwrap()
        .iter()
        .chain(done["batch"].as_array().unwrap())
        .map(|v| v.as_i64().unwrap())
        .collect();
    expected.insert(done["keyed"].as_i64().unwrap());
    expected.insert(done["rescheduled"].as_i64().unwrap());
    assert_eq!(expected.len(), 27);
    let cancelled = done["cancelled"].as_i64().unwrap();

    wait_delivered(&receiver, &expected, Duration::from_secs(30)).await;
    // Every one signed, fresh, on time, in its queue; the cancelled never.
    for r in receiver.requests() {
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["fresh"], true, "{r}");
        assert_eq!(r["queue"], "hooks", "{r}");
        assert!(
            r["arrived_ms"].as_f64().unwrap() >= r["run_at_ms"].as_f64().unwrap(),
            "early: {r}"
        );
        assert_ne!(
            r["task"].as_i64().unwrap(),
            cancelled,
            "a cancelled task arrived"
        );
    }
    let store = Store::sqlite(dir.join("tasks.db")).await.unwrap();
    // A delivery whose answer was slow on a loaded machine may be retried
    // (the webhook's timeout is 10 s, then a backoff): well within 60 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for id in &expected {
        loop {
            let info = store.get(TaskId::new(*id)).await.unwrap().unwrap();
            if info.state == TaskState::Done {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{info:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A refused request: method, path, headers, body, status, code.
type Refused<'a> = (&'a str, &'a str, &'a Value, Option<Value>, u16, &'a str);

/// Flow control over HTTP, from Python: an admin token pauses the webhook
/// queue (nothing arrives at the Python receiver while it is paused),
/// resumes it (everything arrives), sets and reads its limits; bad limits,
/// an unknown queue and a token without the admin scope are refused with
/// their codes; and a debounce with a longest wait (`max_wait`) replaced
/// every 100 ms arrives once, at its longest wait, with the last payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_are_paused_limited_and_debounced_over_http() {
    let dir = temp_dir("queues");
    let receiver = Receiver::start().await;
    let server = Server::start(&config(&dir, &receiver.url("/hook"))).await;
    let mut client = Bridge::start(&server.base);
    let app = json!({"Authorization": format!("Bearer {TOKEN}")});
    let reader = json!({"Authorization": format!("Bearer {READER}")});
    let ops = json!({"Authorization": format!("Bearer {OPS}")});
    let mut call = async |method: &str, path: &str, headers: &Value, body: Option<Value>| {
        client
            .call(json!({"method": method, "path": path, "headers": headers,
                         "body": body.map(|b| b.to_string())}))
            .await
    };

    let (status, paused) = call("POST", "/v1/queues/hooks/pause", &ops, None).await;
    assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
    let mut ids = BTreeSet::new();
    for n in 0..5 {
        let (status, made) = call(
            "POST",
            "/v1/tasks",
            &app,
            Some(json!({"queue": "hooks", "payload": {"n": n}})),
        )
        .await;
        assert_eq!(status, 201, "{made}");
        ids.insert(made["id"].as_i64().unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        receiver.requests().is_empty(),
        "arrived while paused: {:?}",
        receiver.requests()
    );
    let (status, resumed) = call("POST", "/v1/queues/hooks/resume", &ops, None).await;
    assert_eq!((status, &resumed["paused"]), (200, &json!(false)));
    wait_delivered(&receiver, &ids, Duration::from_secs(30)).await;

    let limits = json!({"concurrency": 4, "per_key_concurrency": 2,
                        "rate": {"count": 50, "per": "1s", "burst": 5}});
    let (status, set) = call("PUT", "/v1/queues/hooks/limits", &ops, Some(limits)).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(
        set,
        json!({"queue": "hooks", "paused": false, "concurrency": 4, "per_key_concurrency": 2,
                           "rate": {"count": 50, "period_ms": 1000, "burst": 5},
                           "max_attempts": null, "backoff": null, "pull": false})
    );
    let (status, listed) = call("GET", "/v1/queues", &app, None).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = listed["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hooks", "library"]);
    let (status, one) = call("GET", "/v1/queues/hooks", &app, None).await;
    assert_eq!((status, &one["concurrency"]), (200, &json!(4)));
    // The reader may see only its queue.
    let (status, mine) = call("GET", "/v1/queues", &reader, None).await;
    assert_eq!((status, mine["queues"].as_array().unwrap().len()), (200, 1));
    assert_eq!(call("GET", "/v1/queues/hooks", &reader, None).await.0, 403);

    let refused: [Refused; 11] = [
        (
            "PUT",
            "/v1/queues/hooks/limits",
            &ops,
            Some(json!({"concurrency": 0})),
            400,
            "invalid_limit",
        ),
        (
            "PUT",
            "/v1/queues/hooks/limits",
            &ops,
            Some(json!({"concurrency": -3})),
            400,
            "invalid_limit",
        ),
        (
            "PUT",
            "/v1/queues/hooks/limits",
            &ops,
            Some(json!({"rate": {"count": 10, "per": "1s", "burst": 0}})),
            400,
            "invalid_limit",
        ),
        (
            "PUT",
            "/v1/queues/hooks/limits",
            &ops,
            Some(json!({"rate": {"count": 10, "per": "0s"}})),
            400,
            "invalid_limit",
        ),
        (
            "PUT",
            "/v1/queues/hooks/limits",
            &ops,
            Some(json!({"rate": {"count": 10, "per": "soon"}})),
            400,
            "invalid_limit",
        ),
        (
            "PUT",
            "/v1/queues/hooks/limits",
            &ops,
            Some(json!({"speed": 3})),
            400,
            "invalid_request",
        ),
        (
            "PUT",
            "/v1/queues/hooks/limits",
            &ops,
            Some(json!({"per_key_concurrency": 0})),
            400,
            "invalid_limit",
        ),
        (
            "POST",
            "/v1/tasks",
            &app,
            Some(json!({"queue": "hooks", "partition_key": ""})),
            400,
            "invalid_request",
        ),
        (
            "PUT",
            "/v1/queues/nowhere/limits",
            &ops,
            Some(json!({"concurrency": 1})),
            404,
            "not_found",
        ),
        (
            "POST",
            "/v1/queues/nowhere/pause",
            &ops,
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/v1/queues/hooks/pause",
            &app,
            None,
            403,
            "forbidden",
        ),
    ];
    for (method, path, headers, body, want, code) in refused {
        let (status, answer) = call(method, path, headers, body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (want, Some(code)),
            "{method} {path} {body:?}: {answer}"
        );
    }
    let retry = json!({"max_attempts": 3, "backoff": {"base": "10s", "max": "10m"}});
    let (status, retried) = call("PUT", "/v1/queues/hooks/retry", &ops, Some(retry)).await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(
        (&retried["max_attempts"], &retried["backoff"]),
        (&json!(3), &json!({"base_ms": 10_000, "max_ms": 600_000}))
    );
    let (status, answer) = call(
        "PUT",
        "/v1/queues/hooks/retry",
        &ops,
        Some(json!({"max_attempts": 0})),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_limit"))
    );
    let (status, _) = call("PUT", "/v1/queues/hooks/retry", &ops, Some(json!({}))).await;
    assert_eq!(status, 200);
    let (_, after) = call("GET", "/v1/queues/hooks", &app, None).await;
    assert_eq!(after, set, "refused changes change nothing");
    let (status, cleared) = call("PUT", "/v1/queues/hooks/limits", &ops, Some(json!({}))).await;
    assert_eq!(
        (status, &cleared["concurrency"], &cleared["rate"]),
        (200, &Value::Null, &Value::Null)
    );

    // A debounce: replaced every 100 ms for 3 s, each due 1 s later, at
    // most 2 s after the first request.
    let (status, answer) = call(
        "POST",
        "/v1/tasks",
        &app,
        Some(json!({"queue": "hooks", "payload": 1, "idempotency_key": "d", "max_wait": "2s"})),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{answer}"
    );
    let first = std::time::SystemTime::now();
    let mut debounced = None;
    for n in 0..18 {
        let (status, made) = call("POST", "/v1/tasks", &app, Some(json!({"queue": "hooks", "payload": {"v": n},
            "idempotency_key": "debounce:d", "delay": "1s", "max_wait": "2s", "replace_pending": true}))).await;
        assert!(status == 200 || status == 201, "{made}");
        if n == 0 {
            debounced = made["id"].as_i64();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = debounced.unwrap();
    wait_delivered(&receiver, &BTreeSet::from([id]), Duration::from_secs(10)).await;
    let hit: Vec<Value> = receiver
        .requests()
        .into_iter()
        .filter(|r| r["task"].as_i64() == Some(id))
        .collect();
    assert_eq!(hit.len(), 1, "{hit:?}");
    let first_ms = first
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let after = hit[0]["arrived_ms"].as_f64().unwrap() - first_ms;
    assert!(
        (2_000.0..3_000.0).contains(&after),
        "arrived {after} ms after the first request"
    );
    let payload: Value = serde_json::from_str(hit[0]["body"].as_str().unwrap()).unwrap();
    assert!(
        payload["v"].as_i64().unwrap() >= 15,
        "not the latest payload: {payload}"
    );
    println!("debounced over HTTP: arrived {after:.0} ms after the first request");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bad request: method, path, headers, body; the status and code it
/// must get.
type Case<'a> = (&'a str, &'a str, Value, Option<String>, u16, &'a str);

/// Every bad request gets its documented status and stable code, as JSON,
/// and leaves nothing behind; then SIGTERM stops the server cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_answered_as_documented_and_sigterm_stops_it() {
    let dir = temp_dir("bad");
    let mut server = Server::start(&config(&dir, "http://127.0.0.1:9/unused")).await;
    let mut client = Bridge::start(&server.base);
    let app = json!({"Authorization": format!("Bearer {TOKEN}")});
    let reader = json!({"Authorization": format!("Bearer {READER}")});
    let huge = format!(
        r#"{{"queue": "library", "payload": "{}"}}"#,
        "x".repeat(70_000)
    );
    let long_key = "k".repeat(ttw_durable::MAX_IDEMPOTENCY_KEY + 1);
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/v1/tasks",
            json!({}),
            Some("{}".into()),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/tasks",
            json!({"Authorization": "Bearer wrong-token-0123456"}),
            Some("{}".into()),
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/tasks",
            reader.clone(),
            Some("{}".into()),
            403,
            "forbidden",
        ),
        (
            "GET",
            "/v1/tasks/1",
            json!({"Authorization": "Basic abc"}),
            None,
            401,
            "unauthorized",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some("{\"payload\":".into()),
            400,
            "malformed_json",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some("[1, 2]".into()),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "priority": "high"}"#.into()),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"colour": "red"}"#.into()),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "nope"}"#.into()),
            400,
            "unknown_queue",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "run_at": "tomorrow"}"#.into()),
            400,
            "invalid_time",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "run_at": "1960-01-01T00:00:00Z"}"#.into()),
            400,
            "invalid_time",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "run_at": "10000-01-01T00:00:00Z"}"#.into()),
            400,
            "invalid_time",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "delay": "-5m"}"#.into()),
            400,
            "invalid_delay",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "delay": "5m", "run_at": "2030-01-01T00:00:00Z"}"#.into()),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(format!(
                r#"{{"queue": "library", "idempotency_key": "{long_key}"}}"#
            )),
            400,
            "invalid_key",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "payload_base64": "not base64!"}"#.into()),
            400,
            "invalid_payload",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "replace_pending": true}"#.into()),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(r#"{"queue": "library", "max_attempts": 0}"#.into()),
            400,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/tasks",
            app.clone(),
            Some(huge),
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/v1/tasks/batch",
            app.clone(),
            Some(r#"{"tasks": [{"queue": "library"}, {"queue": "nope"}]}"#.into()),
            400,
            "unknown_queue",
        ),
        ("GET", "/v1/tasks/abc", app.clone(), None, 400, "invalid_id"),
        ("GET", "/v1/tasks/-3", app.clone(), None, 400, "invalid_id"),
        (
            "GET",
            "/v1/tasks/999999",
            app.clone(),
            None,
            404,
            "not_found",
        ),
        (
            "DELETE",
            "/v1/keys/none-such",
            app.clone(),
            None,
            404,
            "not_found",
        ),
        (
            "POST",
            "/v1/tasks/1/reschedule",
            app.clone(),
            Some(r#"{"delay": "1m"}"#.into()),
            404,
            "not_found",
        ),
        ("GET", "/v2/anything", app.clone(), None, 404, "not_found"),
    ];
    for (method, path, headers, body, status, code) in &cases {
        let (got, answer) = client
            .call(json!({"method": method, "path": path, "headers": headers, "body": body}))
            .await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (*status, Some(*code)),
            "{method} {path} {body:?}: {answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{answer}"
        );
    }
    // Nothing was written by any of them.
    let (status, counts) = client
        .call(json!({"method": "GET", "path": "/v1/counts", "headers": app}))
        .await;
    assert_eq!(status, 200, "{counts}");
    assert_eq!(
        counts["queues"],
        json!({}),
        "a refused request wrote a task"
    );
    // The reader sees only its queue's tasks: a task of another queue is
    // not found for it.
    let (status, made) = client
        .call(
            json!({"method": "POST", "path": "/v1/tasks", "headers": app,
                     "body": r#"{"queue": "hooks", "delay": "1h"}"#}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let (status, _) = client
        .call(json!({"method": "GET", "path": format!("/v1/tasks/{}", made["id"]), "headers": reader}))
        .await;
    assert_eq!(status, 404);
    let (status, ready) = client
        .call(json!({"method": "GET", "path": "/readyz", "headers": {}}))
        .await;
    assert_eq!((status, ready["status"].as_str()), (200, Some("ready")));

    // SIGTERM: it stops accepting and exits 0.
    let pid = server.child.id().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), server.child.wait())
        .await
        .expect("the server stops within 30 s of SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    let mut rest = Vec::new();
    while let Ok(Some(line)) = server.lines.next_line().await {
        rest.push(line);
    }
    assert!(rest.iter().any(|l| l == "ttw server: stopped"), "{rest:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--check` names what is wrong with a file, in one line and exit 1; a
/// good file is exit 0.
/// Lists in pages by cursor, redrives, and manages a recurring schedule
/// through the Python client; then asks the real process for every route
/// its OpenAPI document names, each answered by its handler (401 without a
/// token), none by the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_redrive_recurring_schedules_and_the_openapi_routes() {
    let dir = temp_dir("manage");
    let server = Server::start(&config(&dir, "http://127.0.0.1:9/unused")).await;
    let mut client = Bridge::start(&server.base);
    let app = json!({"Authorization": format!("Bearer {TOKEN}")});
    let reader = json!({"Authorization": format!("Bearer {READER}")});
    let ops = json!({"Authorization": format!("Bearer {OPS}")});
    let mut call = async |method: &str, path: &str, headers: &Value, body: Option<Value>| {
        client
            .call(json!({"method": method, "path": path, "headers": headers,
                         "body": body.map(|b| b.to_string())}))
            .await
    };
    let mut ids = Vec::new();
    for i in 0..5 {
        let (status, made) = call(
            "POST",
            "/v1/tasks",
            &app,
            Some(json!({"queue": "library", "delay": format!("{}h", 5 - i), "payload": {"n": i}})),
        )
        .await;
        assert_eq!(status, 201, "{made}");
        ids.push(made["id"].as_i64().unwrap());
    }

    // Pages of two, by cursor, in id order; the last has no cursor.
    let mut listed = Vec::new();
    let mut path = "/v1/tasks?queue=library&limit=2".to_string();
    loop {
        let (status, page) = call("GET", &path, &reader, None).await;
        assert_eq!(status, 200, "{page}");
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 2);
        listed.extend(tasks.iter().map(|t| t["id"].as_i64().unwrap()));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/tasks?queue=library&limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(listed, ids);
    // In due order (the last made is due first), a cursor of (due, id).
    let mut listed = Vec::new();
    let first = "/v1/tasks?queue=library&state=scheduled&order=due&limit=2";
    let mut path = first.to_string();
    loop {
        let (status, page) = call("GET", &path, &reader, None).await;
        assert_eq!(status, 200, "{page}");
        listed.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_i64().unwrap()),
        );
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("{first}&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(listed, ids.iter().rev().copied().collect::<Vec<_>>());
    let (_, latest) = call(
        "GET",
        "/v1/tasks?queue=library&order=due_desc&limit=1",
        &reader,
        None,
    )
    .await;
    assert_eq!(latest["tasks"][0]["id"], ids[0]);
    let (_, one) = call("GET", "/v1/tasks?state=scheduled&limit=1", &app, None).await;
    assert_eq!(one["tasks"][0]["payload"], json!({"n": 0}));
    for (path, who, status, code) in [
        ("/v1/tasks?state=sleeping", &app, 400, "invalid_state"),
        ("/v1/tasks?limit=0", &app, 400, "invalid_limit"),
        ("/v1/tasks?limit=1001", &app, 400, "invalid_limit"),
        ("/v1/tasks?cursor=abc", &app, 400, "invalid_cursor"),
        ("/v1/tasks?order=due&cursor=12", &app, 400, "invalid_cursor"),
        (
            "/v1/tasks?order=due&cursor=12_x",
            &app,
            400,
            "invalid_cursor",
        ),
        (
            "/v1/tasks?cursor=1700000000000_12",
            &app,
            400,
            "invalid_cursor",
        ),
        ("/v1/tasks?order=sideways", &app, 400, "invalid_request"),
        ("/v1/tasks?due_before=soon", &app, 400, "invalid_time"),
        ("/v1/tasks?colour=red", &app, 400, "invalid_request"),
        ("/v1/tasks", &reader, 403, "forbidden"),
        ("/v1/tasks?queue=hooks", &reader, 403, "forbidden"),
    ] {
        let (got, answer) = call("GET", path, who, None).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{path}: {answer}"
        );
    }

    // A cancelled task, redriven by an admin token only.
    let (status, _) = call("DELETE", &format!("/v1/tasks/{}", ids[0]), &app, None).await;
    assert_eq!(status, 200);
    let redrive = json!({"state": "cancelled", "queue": "library"});
    let (status, answer) = call("POST", "/v1/tasks/redrive", &app, Some(redrive.clone())).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (403, Some("forbidden"))
    );
    let (status, answer) = call(
        "POST",
        "/v1/tasks/redrive",
        &ops,
        Some(json!({"state": "running"})),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_state"))
    );
    let far = json!({"state": "cancelled", "spread": "100000y"});
    let (status, answer) = call("POST", "/v1/tasks/redrive", &ops, Some(far)).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_delay")),
        "{answer}"
    );
    let (status, answer) = call("PUT", "/v1/tasks", &app, Some(json!({}))).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (405, Some("method_not_allowed")),
        "{answer}"
    );
    let (status, answer) = call("POST", "/v1/tasks/redrive", &ops, Some(redrive)).await;
    assert_eq!(
        (status, answer["redriven"].as_u64()),
        (200, Some(1)),
        "{answer}"
    );
    let (_, task) = call("GET", &format!("/v1/tasks/{}", ids[0]), &app, None).await;
    assert_eq!(task["state"], "scheduled");

    // A recurring schedule: created, unchanged, updated, refused, listed,
    // paused, resumed, deleted.
    let nightly = json!({"cron": "0 3 * * *", "time_zone": "Europe/Paris", "queue": "library",
                         "payload": {"job": "report"}});
    let (status, answer) = call("PUT", "/v1/recurring/nightly", &app, Some(nightly.clone())).await;
    assert_eq!(
        (status, answer["outcome"].as_str()),
        (201, Some("created")),
        "{answer}"
    );
    let (status, answer) = call("PUT", "/v1/recurring/nightly", &app, Some(nightly.clone())).await;
    assert_eq!(
        (status, answer["outcome"].as_str()),
        (200, Some("unchanged")),
        "{answer}"
    );
    let mut later = nightly.clone();
    later["cron"] = json!("0 4 * * *");
    let (status, answer) = call("PUT", "/v1/recurring/nightly", &app, Some(later)).await;
    assert_eq!(
        (status, answer["outcome"].as_str()),
        (200, Some("updated")),
        "{answer}"
    );
    for (body, code) in [
        (
            json!({"cron": "61 * * * *", "queue": "library"}),
            "invalid_schedule",
        ),
        (
            json!({"cron": "0 3 * * *", "time_zone": "Mars/Olympus", "queue": "library"}),
            "invalid_schedule",
        ),
        (
            json!({"every": "10ms", "queue": "library"}),
            "invalid_schedule",
        ),
        (json!({"queue": "library"}), "invalid_schedule"),
        (json!({"every": "1h", "queue": "nope"}), "unknown_queue"),
        (
            json!({"every": "1h", "catch_up": "sometimes", "queue": "library"}),
            "invalid_schedule",
        ),
        (
            json!({"every": "9000y", "queue": "library"}),
            "invalid_schedule",
        ),
    ] {
        let (got, answer) = call("PUT", "/v1/recurring/nightly", &app, Some(body.clone())).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}: {answer}"
        );
    }
    let (status, list) = call("GET", "/v1/recurring", &reader, None).await;
    assert_eq!(status, 200, "{list}");
    let listed = &list["recurring"][0];
    assert_eq!(
        (listed["name"].as_str(), listed["cron"].as_str()),
        (Some("nightly"), Some("0 4 * * *"))
    );
    assert_eq!(listed["payload"], json!({"job": "report"}));
    let (_, paused) = call("POST", "/v1/recurring/nightly/pause", &app, None).await;
    assert_eq!(paused["paused"], true, "{paused}");
    let (_, again) = call("POST", "/v1/recurring/nightly/pause", &app, None).await;
    assert_eq!(again["paused"], false);
    let (_, resumed) = call("POST", "/v1/recurring/nightly/resume", &app, None).await;
    assert_eq!(resumed["resumed"], true);
    let (status, _) = call("DELETE", "/v1/recurring/nightly", &app, None).await;
    assert_eq!(status, 200);
    let (status, answer) = call("DELETE", "/v1/recurring/nightly", &app, None).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("not_found"))
    );

    // Every route of the document is the server's.
    let (status, doc) = call("GET", "/v1/openapi.json", &json!({}), None).await;
    assert_eq!(status, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let mut routes = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let uri = path
                .replace("{id}", "1")
                .replace("{key}", "k")
                .replace("{name}", "n");
            let (got, answer) = call(&method.to_uppercase(), &uri, &json!({}), None).await;
            let open = ["/healthz", "/readyz", "/v1/openapi.json"].contains(&path.as_str());
            assert_eq!(
                got,
                if open { 200 } else { 401 },
                "{method} {path}: {answer}"
            );
            routes += 1;
        }
    }
    assert_eq!(routes, 36, "the routes the document names");

    // HTTP/2 (cleartext, with prior knowledge) from curl: the same API on
    // the same port.
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version} %{http_code}",
        ])
        .arg(format!("{}/v1/tasks?queue=library&limit=1", server.base))
        .arg("-H")
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200", "{out:?}");
    drop(server);
}

#[test]
fn check_names_what_is_wrong() {
    let dir = temp_dir("check");
    let good = config(&dir, "http://127.0.0.1:9/h");
    let run = |path: &Path, with_env: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ttw-under-test"));
        cmd.args(["server", "--check", "--config"]).arg(path);
        cmd.env_remove("TTW_TOKEN_APP")
            .env_remove("TTW_TOKEN_READER");
        if with_env {
            cmd.env("TTW_TOKEN_APP", TOKEN)
                .env("TTW_TOKEN_READER", READER)
                .env("TTW_TOKEN_OPS", OPS)
                .env("TTW_HOOK_SECRET", SECRET);
        }
        cmd.output().unwrap()
    };
    let ok = run(&good, true);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let missing = run(&good, false);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("TTW_HOOK_SECRET") || err.contains("TTW_TOKEN_APP"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let typo = dir.join("typo.toml");
    std::fs::write(&typo, "databse = \"x.db\"\n").unwrap();
    let bad = run(&typo, true);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("unknown field"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two instances of the service on one PostgreSQL schema, each a node and
/// each serving the API; the Python client schedules 300 tasks through the
/// first, due over 3 s; the second is SIGKILLed a second in. Every task
/// reaches the Python receiver at least once, signed, none early: the
/// survivor takes the dead node's shards when its lease runs out, and the
/// tasks it had claimed when their locks do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(ttw_no_postgres, ignore = "needs DATABASE_URL when built")]
async fn two_instances_on_postgres_one_killed_lose_nothing() {
    let url = std::env::var("DATABASE_URL").expect("built with DATABASE_URL, run with it");
    let schema = format!("ttw_server_two_{}", std::process::id());
    let dir = temp_dir("two");
    let receiver = Receiver::start().await;
    let write = |name: &str| {
        // A folder an instance: its file is its folder's `ttw.toml`.
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        ttw_server::write_config(
            &dir,
            &format!("database = \"{url}\"\nschema = \"{schema}\""),
            &format!(
                r#"[scheduler]
node_id = "{name}"
heartbeat = "200ms"
lease_ttl = "1s"
callback_timeout = "3s"
lock_grace = "1s"

[[queues]]
name = "hooks"
webhook = {{ url = "{}", secret_env = "TTW_HOOK_SECRET", timeout = "2s" }}

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read"]
"#,
                receiver.url("/hook")
            ),
        )
    };
    let a = Server::start(&write("a")).await;
    let mut b = Server::start(&write("b")).await;
    let mut client = Bridge::start(&a.base);
    let tasks: Vec<Value> = (0..300)
        .map(|n| json!({"queue": "hooks", "payload": {"n": n}, "delay": format!("{}ms", 500 + n * 10)}))
        .collect();
    let (status, made) = client
        .call(json!({"method": "POST", "path": "/v1/tasks/batch",
                     "headers": {"Authorization": format!("Bearer {TOKEN}")},
                     "body": json!({"tasks": tasks}).to_string()}))
        .await;
    assert_eq!(status, 200, "{made}");
    let expected: BTreeSet<i64> = made["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    assert_eq!(expected.len(), 300);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    b.child.kill().await.expect("SIGKILL the second instance");

    wait_delivered(&receiver, &expected, Duration::from_secs(60)).await;
    let requests = receiver.requests();
    for r in &requests {
        assert_eq!(r["verified"], true, "{r}");
        assert!(
            r["arrived_ms"].as_f64().unwrap() >= r["run_at_ms"].as_f64().unwrap(),
            "early: {r}"
        );
    }
    println!(
        "300 tasks, {} deliveries ({} repeats) with one of two instances killed",
        requests.len(),
        requests.len() - 300
    );
    drop(a);
    if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await {
        let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&mut conn)
            .await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// One door: `/metrics` is on the API's own port, to a token of scope
/// `read` (401 without one), with the node's delivery counters and the
/// task counts once a task was delivered; a file that still has the
/// `[dashboard]` of `ttw serve` is refused with one line saying what
/// replaced it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_on_the_api_s_port_and_the_dashboard_section_is_refused() {
    let dir = temp_dir("metrics");
    let receiver = Receiver::start().await;
    let config = config(&dir, &receiver.url("/hook"));
    let server = Server::start(&config).await;
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{}/v1/tasks", server.base))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(r#"{"queue": "hooks", "payload": "metered"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    receiver
        .wait_until(Duration::from_secs(30), |seen| !seen.is_empty())
        .await;
    let metrics = format!("{}/metrics", server.base);
    let refused = client.get(&metrics).send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let body: Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    // Written after the delivery's outcome, sampled every few seconds.
    let mut text = String::new();
    for _ in 0..150 {
        let answer = client
            .get(&metrics)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        text = answer.text().await.unwrap();
        if text.contains("ttw_tasks{") && text.contains("ttw_attempts_succeeded_total") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        text.contains(r#"ttw_deliveries_total{queue="hooks"} 1"#),
        "{text}"
    );
    assert!(text.contains("ttw_tasks{"), "{text}");

    let old = dir.join("old.toml");
    let mut file = std::fs::read_to_string(&config).unwrap();
    file.push_str("\n[dashboard]\nlisten = \"127.0.0.1:9090\"\n");
    std::fs::write(&old, file).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
        .args(["server", "--config"])
        .arg(&old)
        .arg("--check")
        .env("TTW_TOKEN_APP", TOKEN)
        .env("TTW_TOKEN_READER", READER)
        .env("TTW_TOKEN_OPS", OPS)
        .env("TTW_HOOK_SECRET", SECRET)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("[dashboard] is gone") && stderr.contains("/console/"),
        "{stderr}"
    );
    drop(server);
    std::fs::remove_dir_all(&dir).ok();
}
