//! Typed jobs on SQLite and PostgreSQL: a job's arguments are a `serde`
//! type with a kind; one is enqueued from Rust and one over HTTP from a
//! real `ttw server` with the same kind and arguments, both run on the
//! typed worker of a scheduler in this process and are found by kind in the
//! API and `ttw list`; arguments that do not decode are dead at once with
//! serde's message; a kind with no worker is a failed attempt, retried.

#[path = "support/backends.rs"]
#[macro_use]
mod backends;
#[path = "support/settings.rs"]
mod settings;
#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use backends::{Backend, Db};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use settings::{fast, wait_state};
use ttw_durable::{
    Failure, JobArgs, JobContext, JobOptions, NewTask, Recurring, Scheduler, Store, TaskId,
    TaskQuery, TaskState, Workers,
};

const TOKEN: &str = "app-token-0123456789";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SendReceipt {
    order: u64,
    email: String,
}

impl JobArgs for SendReceipt {
    const KIND: &'static str = "send_receipt";

    fn options() -> JobOptions {
        JobOptions {
            queue: Some("billing"),
            ..JobOptions::default()
        }
    }
}

/// Every receipt a worker ran: the order, the attempt.
type Ran = Arc<Mutex<Vec<(u64, u32)>>>;

/// A scheduler serving queue `billing` with the worker of `SendReceipt`,
/// recording each run in `ran` and answering `sent <order>`.
async fn scheduler(store: &Store, ran: &Ran) -> Scheduler {
    let ran = ran.clone();
    let workers = Workers::new().register(move |job: SendReceipt, ctx: JobContext| {
        ran.lock().unwrap().push((job.order, ctx.attempt()));
        async move { Ok::<_, Failure>(format!("sent {}", job.order)) }
    });
    fast(store)
        .backoff(ttw_durable::Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_millis(100),
        ))
        .max_attempts(100)
        .work("billing", workers)
        .start_queues()
        .await
        .unwrap()
}

/// `POST /v1/tasks` of `body` to the server at `addr`: the status and the
/// answer.
async fn post(client: &reqwest::Client, addr: &str, body: &Value) -> (u16, Value) {
    let answer = client
        .post(format!("http://{addr}/v1/tasks"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (
        status,
        serde_json::from_str(&answer.text().await.unwrap()).unwrap(),
    )
}

/// The ids of the tasks of kind `kind`.
async fn of_kind(store: &Store, kind: &str) -> Vec<TaskId> {
    let page = store.list(&TaskQuery::new().kind(kind)).await.unwrap();
    page.iter().map(|t| t.id).collect()
}

on_both! {
    /// A typed job runs on its worker with its arguments decoded and its
    /// answer kept; arguments of the wrong shape are dead at the first
    /// attempt with serde's message; a kind nobody serves is retried with
    /// `unknown kind`; each is found by its kind.
    async fn a_typed_job_runs_on_its_worker_and_a_bad_one_dies_at_once(db: Db) {
        let store = db.open().await;
        let ran = Ran::default();
        let scheduler = scheduler(&store, &ran).await;
        let job = SendReceipt { order: 42, email: "a@example.com".into() };
        let good = store.enqueue(&job).await.unwrap();
        let bad = store
            .schedule(r#"{"order": "forty-two"}"#)
            .queue("billing")
            .kind("send_receipt")
            .await
            .unwrap();
        let unknown = store
            .schedule_batch([NewTask::new("{}").queue("billing").kind("refund")])
            .await
            .unwrap()[0]
            .id();

        wait_state(&store, good, TaskState::Done, Duration::from_secs(30)).await;
        assert_eq!(*ran.lock().unwrap(), vec![(42, 1)], "run once, decoded");
        let info = store.get(good).await.unwrap().unwrap();
        assert_eq!(info.kind.as_deref(), Some("send_receipt"));
        assert_eq!(info.payload, serde_json::to_vec(&job).unwrap());
        let attempts = store.attempts(good).await.unwrap();
        assert_eq!(attempts[0].detail.as_deref(), Some(r#""sent 42""#));

        wait_state(&store, bad, TaskState::Dead, Duration::from_secs(30)).await;
        let dead = store.get(bad).await.unwrap().unwrap();
        assert_eq!(dead.attempts, 1, "dead at the first attempt: {dead:?}");
        let error = dead.last_error.unwrap_or_default();
        assert!(error.contains("do not decode as send_receipt") && error.contains("invalid type"), "{error}");

        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let retried = loop {
            let info = store.get(unknown).await.unwrap().unwrap();
            if info.attempts >= 2 || tokio::time::Instant::now() > deadline {
                break info;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(retried.attempts >= 2 && retried.state != TaskState::Dead, "{retried:?}");
        let error = retried.last_error.unwrap_or_default();
        assert!(error.contains("unknown kind \"refund\""), "{error}");

        assert_eq!(of_kind(&store, "send_receipt").await, vec![good, bad]);
        assert_eq!(of_kind(&store, "refund").await, vec![unknown]);
        assert!(of_kind(&store, "nothing").await.is_empty());
        assert_eq!(ran.lock().unwrap().len(), 1, "neither the bad nor the unknown ran");
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// A recurring schedule that names a job makes each occurrence that
    /// typed job, in its kind's queue, run on its worker.
    async fn a_recurring_schedule_makes_typed_jobs(db: Db) {
        let store = db.open().await;
        let ran = Ran::default();
        let scheduler = scheduler(&store, &ran).await;
        let every = Recurring::every("receipts", Duration::from_secs(1))
            .job(&SendReceipt { order: 7, email: "n@example.com".into() });
        store.register_recurring(every).await.unwrap();
        let listed = store.list_recurring().await.unwrap();
        assert_eq!((listed[0].kind.as_deref(), listed[0].queue.as_str()), (Some("send_receipt"), "billing"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while ran.lock().unwrap().len() < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let ran = ran.lock().unwrap().clone();
        assert!(ran.len() >= 2 && ran.iter().all(|(order, _)| *order == 7), "{ran:?}");
        let typed = store.list(&TaskQuery::new().kind("send_receipt")).await.unwrap();
        assert!(typed.iter().all(|t| t.queue == "billing"), "{typed:?}");
        assert!(typed.len() >= 2, "{typed:?}");
        scheduler.shutdown().await.unwrap();
    }
}

on_both! {
    /// The same kind and arguments posted to `ttw server` run on the
    /// Rust worker beside one enqueued in Rust; the API shows the kind and
    /// filters on it, and so does `ttw list --kind`.
    async fn a_job_posted_over_http_runs_on_the_rust_worker(db: Db) {
        let store = db.open().await;
        let backend = if db.postgres_parts().is_some() { "pg" } else { "lite" };
        let dir = std::env::temp_dir().join(format!("ttw_typed_{}_{backend}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = ttw_server::write_config(
            &dir,
            &db.toml(),
            r#"[[queues]]
name = "billing"

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read"]
"#,
        );
        let (_server, addr) = ttw_server::start(&config, &[("TTW_TOKEN_APP", TOKEN)]).await;
        let ran = Ran::default();
        let scheduler = scheduler(&store, &ran).await;
        let from_rust = store
            .enqueue(&SendReceipt { order: 1, email: "r@example.com".into() })
            .await
            .unwrap();
        let client = reqwest::Client::new();
        let body = json!({"queue": "billing", "kind": "send_receipt",
                          "payload": {"order": 2, "email": "h@example.com"}});
        let (status, made) = post(&client, &addr, &body).await;
        assert_eq!(status, 201, "{made}");
        let from_http = TaskId::new(made["id"].as_i64().unwrap());
        for id in [from_rust, from_http] {
            wait_state(&store, id, TaskState::Done, Duration::from_secs(30)).await;
        }
        let mut orders: Vec<u64> = ran.lock().unwrap().iter().map(|(o, _)| *o).collect();
        orders.sort_unstable();
        assert_eq!(orders, vec![1, 2]);

        let get = |path: String| {
            let (client, addr) = (client.clone(), addr.clone());
            async move {
                let answer = client.get(format!("http://{addr}{path}")).bearer_auth(TOKEN).send().await.unwrap();
                let status = answer.status().as_u16();
                (status, serde_json::from_str::<Value>(&answer.text().await.unwrap()).unwrap())
            }
        };
        let (status, one) = get(format!("/v1/tasks/{}", from_http.get())).await;
        assert_eq!((status, &one["kind"]), (200, &json!("send_receipt")), "{one}");
        let (status, page) = get("/v1/tasks?kind=send_receipt".into()).await;
        assert_eq!(status, 200, "{page}");
        let listed: Vec<i64> = page["tasks"].as_array().unwrap().iter().map(|t| t["id"].as_i64().unwrap()).collect();
        assert_eq!(listed, vec![from_rust.get(), from_http.get()]);
        let (_, none) = get("/v1/tasks?kind=refund".into()).await;
        assert_eq!(none["tasks"], json!([]), "{none}");
        let body = json!({"queue": "billing", "kind": "bad kind", "payload": {}});
        let (status, refused) = post(&client, &addr, &body).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");

        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_ttw-under-test"))
            .args(db.cli_args())
            .args(["--json", "list", "--kind", "send_receipt"])
            .env_remove("DATABASE_URL")
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let kinds: Vec<&str> = listed["tasks"].as_array().unwrap().iter().map(|t| t["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["send_receipt", "send_receipt"], "{listed}");
        scheduler.shutdown().await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
