//! Pull queues from outside, on SQLite and PostgreSQL: a real `ttw server`
//! whose queue `jobs` has `pull = true`, and workers that are plain HTTP
//! requests. A long poll is answered the moment its task falls due, never
//! before; a claim is fenced (a stale ack, nack or extend is 409 and
//! changes nothing); a lease that runs out makes the task due again as the
//! next attempt, recorded as `expired`; a client that hangs up mid-poll
//! takes nothing with it; SIGTERM answers the waiting polls empty; an
//! instance SIGKILLed while it holds polls loses no task; the queue's
//! limits count claims; a held task shows its worker and lease, and the
//! queue its workers.

#[path = "support/backends.rs"]
#[macro_use]
mod backends;
#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::time::{Duration, Instant};

use backends::{Backend, Db};
use serde_json::{json, Value};

const TOKEN: &str = "worker-token-0123456789";
const SCHEDULE_ONLY: &str = "other-token-0123456789";

/// A client of one `ttw server`.
#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    addr: String,
}

impl Api {
    /// `POST path` of `body` with `token`: the status and the answer.
    async fn post_as(&self, token: &str, path: &str, body: Value) -> (u16, Value) {
        let answer = self
            .http
            .post(format!("http://{}{path}", self.addr))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let text = answer.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.post_as(TOKEN, path, body).await
    }

    async fn get(&self, path: &str) -> Value {
        let answer = self
            .http
            .get(format!("http://{}{path}", self.addr))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 200, "GET {path}");
        serde_json::from_str(&answer.text().await.unwrap()).unwrap()
    }

    /// `PUT path` of `body`: the status.
    async fn put(&self, path: &str, body: Value) -> u16 {
        let answer = self
            .http
            .put(format!("http://{}{path}", self.addr))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        answer.status().as_u16()
    }

    /// A claim of queue `jobs` by `worker`: the tasks handed out.
    async fn claim(&self, worker: &str, wait: &str, lease: &str) -> Vec<Value> {
        let body = json!({"worker": worker, "wait": wait, "lease": lease, "max": 10});
        let (status, answer) = self.post("/v1/queues/jobs/claim", body).await;
        assert_eq!(status, 200, "claim: {answer}");
        answer["tasks"].as_array().unwrap().clone()
    }

    /// Schedules `payload` in `jobs` after `delay`: its id.
    async fn schedule(&self, delay: &str, payload: Value) -> i64 {
        let body = json!({"queue": "jobs", "delay": delay, "payload": payload, "kind": "resize"});
        let (status, made) = self.post("/v1/tasks", body).await;
        assert_eq!(status, 201, "{made}");
        made["id"].as_i64().unwrap()
    }

    /// A settle (`ack`, `nack`, `extend`) of task `id`.
    async fn settle(&self, id: i64, what: &str, body: Value) -> (u16, Value) {
        self.post(&format!("/v1/tasks/{id}/{what}"), body).await
    }

    /// The outcomes of task `id`'s attempts, oldest first.
    async fn outcomes(&self, id: i64) -> Vec<String> {
        let page = self.get(&format!("/v1/tasks/{id}/attempts")).await;
        page["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["outcome"].as_str().unwrap().to_string())
            .collect()
    }
}

/// The configuration of a server with the pull queue `jobs`, the push
/// queue `hooks` (no target), a `consume` (and `admin`) token and one
/// without it, and a heartbeat of 500 ms (the rescuer's turn, which takes back a
/// lease run out).
fn config(db: &Db, name: &str) -> std::path::PathBuf {
    let backend = if db.postgres_parts().is_some() {
        "pg"
    } else {
        "lite"
    };
    let dir =
        std::env::temp_dir().join(format!("ttw_pull_{name}_{}_{backend}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    ttw_server::write_config(
        &dir,
        &db.toml(),
        r#"[scheduler]
heartbeat = "500ms"

[[queues]]
name = "jobs"
pull = true

[[queues]]
name = "hooks"

[[tokens]]
name = "worker"
secret_env = "TTW_TOKEN_WORKER"
scopes = ["consume", "schedule", "read", "admin"]

[[tokens]]
name = "other"
secret_env = "TTW_TOKEN_OTHER"
scopes = ["schedule", "read"]
"#,
    )
}

const ENV: &[(&str, &str)] = &[
    ("TTW_TOKEN_WORKER", TOKEN),
    ("TTW_TOKEN_OTHER", SCHEDULE_ONLY),
];

on_both! {
    /// A worker's life with a pull queue: a long poll answered when its
    /// task falls due (never early, within 500 ms); the task as the
    /// worker sees it; an ack under a wrong or settled claim is 409
    /// `stale_claim` and the right one is done; a nack retries after
    /// `retry_in` with the same message id and a new claim, a nack `dead`
    /// gives up; a lease that runs out redelivers as the next attempt,
    /// `expired` in the history, and the old claim is stale; an extend
    /// keeps the task past its first lease; a token without `consume`
    /// cannot claim, and a push queue is not a pull queue.
    async fn a_worker_pulls_on_time_and_settles_under_its_claim(db: Db) {
        let config = config(&db, "life");
        let (_server, addr) = ttw_server::start(&config, ENV).await;
        let api = Api { http: reqwest::Client::new(), addr };

        // A long poll, then the task that answers it.
        let poller = tokio::spawn({
            let api = api.clone();
            async move {
                let tasks = api.claim("w1", "20s", "30s").await;
                (tasks, Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let scheduled = Instant::now();
        let id = api.schedule("1s", json!({"image": 7})).await;
        let (tasks, answered) = poller.await.unwrap();
        let after = answered - scheduled;
        assert!(after >= Duration::from_millis(1000), "early: {after:?}");
        assert!(after < Duration::from_millis(1500), "late: {after:?}");
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        let task = &tasks[0];
        assert_eq!((task["id"].as_i64(), task["attempt"].as_u64()), (Some(id), Some(1)), "{task}");
        assert_eq!((&task["payload"], &task["kind"], &task["queue"]), (&json!({"image": 7}), &json!("resize"), &json!("jobs")));
        let claim = task["claim"].as_str().unwrap().to_string();
        let message_id = task["message_id"].as_str().unwrap().to_string();
        assert!(task["lease_until"].is_string() && task["run_at"].is_string(), "{task}");
        let shown = api.get(&format!("/v1/tasks/{id}")).await;
        assert_eq!((&shown["state"], &shown["worker"]), (&json!("running"), &json!("w1")), "{shown}");
        assert_eq!(shown["lease_until"], task["lease_until"], "{shown}");
        let workers = api.get("/v1/queues/jobs/workers").await;
        assert_eq!(workers["workers"][0]["worker"], "w1", "{workers}");
        assert_eq!(workers["workers"][0]["held"], 1, "{workers}");
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
            .args(db.cli_args())
            .args(["show", &id.to_string()])
            .env_remove("DATABASE_URL")
            .output()
            .await
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(printed.lines().any(|l| l.starts_with("worker") && l.ends_with("w1")), "{printed}");
        assert!(printed.contains("lease until"), "{printed}");

        // Fenced settles.
        let (status, refused) = api.settle(id, "ack", json!({"claim": "999"})).await;
        assert_eq!((status, &refused["error"]["code"]), (409, &json!("stale_claim")), "{refused}");
        let (status, done) = api.settle(id, "ack", json!({"claim": claim, "answer": "resized"})).await;
        assert_eq!((status, &done["outcome"]), (200, &json!("done")), "{done}");
        let (status, again) = api.settle(id, "ack", json!({"claim": claim})).await;
        assert_eq!((status, &again["error"]["code"]), (409, &json!("stale_claim")), "{again}");
        let (status, late) = api.settle(id, "nack", json!({"claim": claim, "error": "x"})).await;
        assert_eq!((status, &late["error"]["code"]), (409, &json!("stale_claim")), "{late}");
        let shown = api.get(&format!("/v1/tasks/{id}")).await;
        assert_eq!(shown["state"], "done", "{shown}");
        assert!(shown.get("worker").is_none(), "a done task is held by no one: {shown}");
        assert_eq!(api.outcomes(id).await, ["done"]);
        let workers = api.get("/v1/queues/jobs/workers").await;
        assert_eq!(workers["workers"][0]["held"], 0, "{workers}");

        // A nack with retry_in, then a nack that gives up.
        let id = api.schedule("0s", json!("n")).await;
        let first = api.claim("w1", "10s", "30s").await;
        assert_eq!(first[0]["id"].as_i64(), Some(id), "{first:?}");
        let (status, retry) = api
            .settle(id, "nack", json!({"claim": first[0]["claim"], "error": "boom", "retry_in": "1s"}))
            .await;
        assert_eq!((status, &retry["outcome"]), (200, &json!("retry")), "{retry}");
        let nacked = Instant::now();
        let second = api.claim("w2", "10s", "30s").await;
        assert!(nacked.elapsed() >= Duration::from_millis(900), "retried early: {:?}", nacked.elapsed());
        assert_eq!((second[0]["id"].as_i64(), second[0]["attempt"].as_u64()), (Some(id), Some(2)), "{second:?}");
        assert_eq!(second[0]["message_id"], first[0]["message_id"]);
        assert_ne!(second[0]["claim"], first[0]["claim"]);
        let (status, dead) = api
            .settle(id, "nack", json!({"claim": second[0]["claim"], "error": "bad image", "dead": true}))
            .await;
        assert_eq!((status, &dead["outcome"]), (200, &json!("dead")), "{dead}");
        let shown = api.get(&format!("/v1/tasks/{id}")).await;
        assert_eq!((&shown["state"], &shown["last_error"]), (&json!("dead"), &json!("bad image")), "{shown}");
        assert_eq!(api.outcomes(id).await, ["failed", "dead"]);

        // A lease that runs out: the next attempt, after the lease.
        let id = api.schedule("0s", json!("lease")).await;
        let held = api.claim("w1", "10s", "1s").await;
        let claimed = Instant::now();
        assert_eq!(held[0]["id"].as_i64(), Some(id));
        let again = api.claim("w2", "15s", "30s").await;
        assert!(claimed.elapsed() >= Duration::from_millis(1000), "taken back early: {:?}", claimed.elapsed());
        assert_eq!((again[0]["id"].as_i64(), again[0]["attempt"].as_u64()), (Some(id), Some(2)), "{again:?}");
        let (status, stale) = api.settle(id, "ack", json!({"claim": held[0]["claim"]})).await;
        assert_eq!((status, &stale["error"]["code"]), (409, &json!("stale_claim")), "{stale}");
        let (status, stale) = api.settle(id, "extend", json!({"claim": held[0]["claim"], "lease": "1m"})).await;
        assert_eq!((status, &stale["error"]["code"]), (409, &json!("stale_claim")), "{stale}");
        assert_eq!(api.outcomes(id).await, ["expired", "running"]);
        let (status, _) = api.settle(id, "ack", json!({"claim": again[0]["claim"]})).await;
        assert_eq!(status, 200);

        // An extend holds the task past its first lease.
        let id = api.schedule("0s", json!("long")).await;
        let held = api.claim("w1", "10s", "1s").await;
        let (status, extended) = api.settle(id, "extend", json!({"claim": held[0]["claim"], "lease": "30s"})).await;
        assert_eq!((status, &extended["outcome"]), (200, &json!("extended")), "{extended}");
        assert!(extended["lease_until"].as_str().unwrap() > held[0]["lease_until"].as_str().unwrap(), "{extended}");
        let nothing = api.claim("w2", "2s", "30s").await;
        assert!(nothing.is_empty(), "an extended task was handed out again: {nothing:?}");
        let (status, _) = api.settle(id, "ack", json!({"claim": held[0]["claim"]})).await;
        assert_eq!(status, 200, "the extended claim still holds");
        assert_eq!(api.outcomes(id).await, ["done"]);
        assert!(!message_id.is_empty());

        // Who may claim what.
        let body = json!({"worker": "w"});
        let (status, refused) = api.post_as(SCHEDULE_ONLY, "/v1/queues/jobs/claim", body.clone()).await;
        assert_eq!((status, &refused["error"]["code"]), (403, &json!("forbidden")), "{refused}");
        let (status, refused) = api.post("/v1/queues/hooks/claim", body).await;
        assert_eq!((status, &refused["error"]["code"]), (400, &json!("not_a_pull_queue")), "{refused}");
        let _ = std::fs::remove_dir_all(config.parent().unwrap());
    }
}

on_both! {
    /// A client that hangs up mid-poll takes no task with it: the task
    /// that falls due afterwards goes to the next claim at once. SIGTERM
    /// answers a waiting poll empty at once rather than at its `wait`.
    async fn a_hang_up_takes_nothing_and_sigterm_answers_the_polls(db: Db) {
        let config = config(&db, "hangup");
        let (mut server, addr) = ttw_server::start(&config, ENV).await;
        let api = Api { http: reqwest::Client::new(), addr: addr.clone() };
        let hasty = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
        let gone = hasty
            .post(format!("http://{addr}/v1/queues/jobs/claim"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(json!({"worker": "gone", "wait": "30s"}).to_string())
            .send()
            .await;
        assert!(gone.is_err(), "the hasty client hung up: {gone:?}");
        let id = api.schedule("500ms", json!(1)).await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        let started = Instant::now();
        let tasks = api.claim("next", "10s", "30s").await;
        assert_eq!(tasks.len(), 1, "{tasks:?}");
        assert_eq!(tasks[0]["id"].as_i64(), Some(id));
        assert!(started.elapsed() < Duration::from_secs(2), "it waited: {:?}", started.elapsed());

        let waiting = tokio::spawn({
            let api = api.clone();
            async move {
                let tasks = api.claim("w", "60s", "30s").await;
                (tasks, Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pid = server.id().unwrap().to_string();
        let termed = Instant::now();
        let kill = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(kill.success());
        let (tasks, answered) = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the poll was answered")
            .unwrap();
        assert!(tasks.is_empty(), "{tasks:?}");
        assert!(answered - termed < Duration::from_secs(10), "answered after {:?}", answered - termed);
        let status = tokio::time::timeout(Duration::from_secs(60), server.wait()).await.unwrap().unwrap();
        assert!(status.success(), "{status:?}");
        let _ = std::fs::remove_dir_all(config.parent().unwrap());
    }
}

on_both! {
    /// Two instances on one database; the one holding the shards is
    /// SIGKILLed while a worker's poll waits on it. The worker's poll
    /// fails, it claims on the other instance, and the task that fell due
    /// meanwhile is handed out once, to it.
    async fn an_instance_killed_while_it_holds_polls_loses_nothing(db: Db) {
        let config = config(&db, "killed");
        let (mut first, first_addr) = ttw_server::start(&config, ENV).await;
        let (_second, second_addr) = ttw_server::start(&config, ENV).await;
        let on_first = Api { http: reqwest::Client::new(), addr: first_addr };
        let on_second = Api { http: reqwest::Client::new(), addr: second_addr };
        let waiting = tokio::spawn({
            let api = on_first.clone();
            async move {
                let body = json!({"worker": "w", "wait": "30s"});
                api.http
                    .post(format!("http://{}/v1/queues/jobs/claim", api.addr))
                    .bearer_auth(TOKEN)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
            }
        });
        let id = on_second.schedule("1s", json!("survivor")).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        first.start_kill().unwrap();
        first.wait().await.unwrap();
        let failed = waiting.await.unwrap();
        assert!(failed.is_err() || failed.unwrap().status().as_u16() != 200 , "the killed instance answered");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = Vec::new();
        while got.is_empty() && Instant::now() < deadline {
            got = on_second.claim("w", "5s", "30s").await;
        }
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0]["id"].as_i64(), got[0]["attempt"].as_u64()), (Some(id), Some(1)), "{got:?}");
        let (status, _) = on_second.settle(id, "ack", json!({"claim": got[0]["claim"]})).await;
        assert_eq!(status, 200);
        assert_eq!(on_second.outcomes(id).await, ["done"]);
        let _ = std::fs::remove_dir_all(config.parent().unwrap());
    }
}

on_both! {
    /// The queue's limits count claimed tasks: under a concurrency of 1 a
    /// second worker's claim waits, and is answered as soon as the first
    /// acks; under a rate of 2 a second (a burst of 2) a claim takes the
    /// burst, and the next waits for the next token.
    async fn limits_count_claims_and_an_ack_makes_room(db: Db) {
        let config = config(&db, "limits");
        let (_server, addr) = ttw_server::start(&config, ENV).await;
        let api = Api { http: reqwest::Client::new(), addr };
        assert_eq!(api.put("/v1/queues/jobs/limits", json!({"concurrency": 1})).await, 200);
        let first = api.schedule("0s", json!(1)).await;
        let second = api.schedule("0s", json!(2)).await;
        let held = api.claim("a", "5s", "30s").await;
        assert_eq!(held.iter().map(|t| t["id"].as_i64().unwrap()).collect::<Vec<_>>(), [first]);
        let waiting = tokio::spawn({
            let api = api.clone();
            async move {
                let tasks = api.claim("b", "20s", "30s").await;
                (tasks, Instant::now())
            }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "the queue is full");
        let acked = Instant::now();
        let (status, _) = api.settle(first, "ack", json!({"claim": held[0]["claim"]})).await;
        assert_eq!(status, 200);
        let (tasks, answered) = waiting.await.unwrap();
        assert_eq!(tasks.iter().map(|t| t["id"].as_i64().unwrap()).collect::<Vec<_>>(), [second]);
        assert!(answered - acked < Duration::from_secs(1), "answered {:?} after the ack", answered - acked);
        let (status, _) = api.settle(second, "ack", json!({"claim": tasks[0]["claim"]})).await;
        assert_eq!(status, 200);

        let rate = json!({"rate": {"count": 2, "per": "1s", "burst": 2}});
        assert_eq!(api.put("/v1/queues/jobs/limits", rate).await, 200);
        for n in 0..4 {
            api.schedule("0s", json!(n)).await;
        }
        let burst = api.claim("a", "0s", "30s").await;
        assert_eq!(burst.len(), 2, "the burst: {burst:?}");
        let started = Instant::now();
        let next = api.claim("a", "10s", "30s").await;
        let took = started.elapsed();
        assert_eq!(next.len(), 1, "one token: {next:?}");
        assert!(took >= Duration::from_millis(300), "a token came early: {took:?}");
        assert!(took < Duration::from_secs(3), "the claim waited {took:?}");
        let _ = std::fs::remove_dir_all(config.parent().unwrap());
    }
}

/// A worker process of a client, as its README starts one, given every
/// instance's URL: each task it runs is a line `ran <id> <early: 0 or 1>`.
/// The TypeScript client compiled by its own `tsc` into a folder of this
/// run (not the checkout's `dist/`, which a fresh clone does not have and
/// another test may be rewriting): the path of its `index.js`.
fn node_client() -> String {
    static BUILT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/typescript");
            let out =
                std::env::temp_dir().join(format!("ttw-pull-node-client-{}", std::process::id()));
            let status = std::process::Command::new(format!("{source}/node_modules/.bin/tsc"))
                .args(["-p", source, "--outDir"])
                .arg(&out)
                .status()
                .expect("the TypeScript compiler from `npm ci` in clients/typescript");
            assert!(status.success(), "tsc: {status:?}");
            out.join("index.js").to_str().unwrap().to_string()
        })
        .clone()
}

fn worker_process(lang: &str, urls: &str) -> tokio::process::Child {
    let clients = concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients");
    let mut command = match lang {
        "python" => {
            let mut c = tokio::process::Command::new("python3");
            c.args(["-c", PYTHON_WORKER]);
            c
        }
        _ => {
            let mut c = tokio::process::Command::new("node");
            c.args(["--input-type=module", "-e", NODE_WORKER]);
            c
        }
    };
    command
        .env("TTW_CLIENTS", clients)
        .env("TTW_NODE_CLIENT", node_client())
        .env("TTW_URLS", urls)
        .env("TTW_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

const PYTHON_WORKER: &str = r#"
import datetime, os, sys, threading, time
sys.path.insert(0, os.environ["TTW_CLIENTS"] + "/python/src")
from ttw_client import Client, Worker

# print() writes a line and its end separately: handlers on four threads
# would interleave them ("ran 1 0ran 2 0", then an empty line).
out = threading.Lock()

def handle(task):
    due = datetime.datetime.fromisoformat(task["run_at"].replace("Z", "+00:00"))
    early = datetime.datetime.now(datetime.timezone.utc) < due
    time.sleep(0.02)
    with out:
        print("ran", task["id"], int(early), flush=True)
    return "ok"

ttw = Client(os.environ["TTW_URLS"].split(","), os.environ["TTW_TOKEN"], retries=8, backoff=0.1)
Worker(ttw, "jobs", handle, concurrency=4, wait="2s", lease="5s", name="py").run()
"#;

const NODE_WORKER: &str = r#"
const { Client, Worker } = await import(process.env.TTW_NODE_CLIENT);
const handle = async (task) => {
  const early = Date.now() < Date.parse(task.run_at);
  await new Promise((r) => setTimeout(r, 20));
  console.log("ran", task.id, early ? 1 : 0);
  return "ok";
};
const ttw = new Client(process.env.TTW_URLS.split(","), process.env.TTW_TOKEN, { retries: 8, backoffMs: 100 });
await new Worker(ttw, "jobs", handle, { concurrency: 4, wait: "2s", lease: "5s", name: "node" }).run();
"#;

on_both! {
    /// What pull queues are for, end to end: a Python and a Node worker
    /// process, each started as its README starts one with the URLs of
    /// two instances on one database, drain 200 tasks falling due over 3 s
    /// while the first instance is SIGKILLed mid-run. Every task is acked
    /// once (one `done` attempt, any other only a lease that ran out), none
    /// ran early, and each worker stops at SIGTERM. (It once failed 1 run
    /// in 7 with "a task ran early: \"\"": the Python worker's handlers,
    /// on four threads, printed their lines unlocked and two interleaved.)
    #[cfg_attr(ttw_no_npm_client, ignore = "needs `npm ci` in clients/typescript when built")]
    async fn python_and_node_workers_drain_two_instances_one_killed(db: Db) {
        let config = config(&db, "drain");
        let (mut first, a) = ttw_server::start(&config, ENV).await;
        let (_second, b) = ttw_server::start(&config, ENV).await;
        let api = Api { http: reqwest::Client::new(), addr: b.clone() };
        let urls = format!("http://{a},http://{b}");
        let mut workers = [worker_process("python", &urls), worker_process("node", &urls)];
        let tasks: Vec<Value> = (0..200u64)
            .map(|n| json!({"queue": "jobs", "payload": n, "delay": format!("{}ms", 1_000 + n * 15)}))
            .collect();
        let (status, made) = api.post("/v1/tasks/batch", json!({ "tasks": tasks })).await;
        assert_eq!(status, 200, "{made}");
        let ids: Vec<i64> = made["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_i64().unwrap()).collect();
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        first.start_kill().unwrap();
        first.wait().await.unwrap();

        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let page = api.get("/v1/tasks?queue=jobs&state=done&limit=1000").await;
            let done = page["tasks"].as_array().unwrap().len();
            if done == ids.len() || Instant::now() > deadline {
                assert_eq!(done, ids.len(), "every task done");
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for id in &ids {
            let outcomes = api.outcomes(*id).await;
            let done = outcomes.iter().filter(|o| *o == "done").count();
            assert_eq!(done, 1, "task {id}: {outcomes:?}");
            assert!(outcomes.iter().all(|o| o == "done" || o == "expired"), "task {id}: {outcomes:?}");
        }
        let mut ran = Vec::new();
        for worker in &mut workers {
            let pid = worker.id().unwrap().to_string();
            assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
            let status = tokio::time::timeout(Duration::from_secs(30), worker.wait()).await.expect("a worker stops at SIGTERM").unwrap();
            assert!(status.success(), "{status:?}");
            let mut out = String::new();
            tokio::io::AsyncReadExt::read_to_string(worker.stdout.as_mut().unwrap(), &mut out).await.unwrap();
            ran.extend(out.lines().map(str::to_string));
        }
        // Each line is `ran <id> <early>`; every task ran, none early.
        let mut seen = std::collections::BTreeSet::new();
        for line in &ran {
            let words: Vec<&str> = line.split(' ').collect();
            assert!(words.len() == 3 && words[0] == "ran", "a worker's line: {line:?}");
            assert_eq!(words[2], "0", "a task ran early: {line:?}");
            seen.insert(words[1].parse::<i64>().unwrap());
        }
        assert_eq!(seen, ids.iter().copied().collect(), "every task ran");
        let _ = std::fs::remove_dir_all(config.parent().unwrap());
    }
}
