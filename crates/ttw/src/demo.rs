//! `ttw demo`: the service end to end, a new user's first minute. It starts
//! `ttw server` (the same code as the command) on a temporary SQLite store,
//! with a webhook receiver of its own that checks each delivery's
//! signature; schedules tasks over HTTP, as any client does, due one second
//! apart; prints each delivery as it arrives (how late, which attempt,
//! whether the signature held) and what the API says of the task after;
//! then the console's URL and token. With `--stay` it keeps running until
//! Ctrl-C, for a look at the console.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use base64::Engine as _;
use tokio::sync::mpsc;

use crate::cli::DemoArgs;
use crate::error::{Failure, Result};
use crate::server;

/// The queue the demo's tasks go to.
const QUEUE: &str = "demo";

/// One delivery, as the receiver saw it.
#[derive(Debug)]
struct Arrival {
    task: i64,
    attempt: u32,
    run_at_ms: i64,
    arrived_ms: i64,
    verified: bool,
}

/// What the receiver needs: the secret it checks signatures with, and
/// where it tells of each delivery.
#[derive(Clone)]
struct Receiver {
    secret: String,
    arrivals: mpsc::UnboundedSender<Arrival>,
}

/// Now, in milliseconds since the Unix epoch: the wall clock a receiver
/// has.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

/// `n` random bytes.
fn random(n: usize) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|err| Failure(format!("cannot make a secret: {err}")))?;
    Ok(bytes)
}

/// The receiver's one route: checks the signature as a receiver of any
/// language would, tells of the delivery, answers 200.
async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let arrived_ms = now_ms();
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let verified = ttw_durable::verify_webhook(
        &r.secret,
        text("webhook-id"),
        text("webhook-timestamp"),
        &body,
        text("webhook-signature"),
    )
    .unwrap_or(false);
    let _ = r.arrivals.send(Arrival {
        task: text("ttw-task-id").parse().unwrap_or(0),
        attempt: text("ttw-attempt").parse().unwrap_or(0),
        run_at_ms: text("ttw-run-at").parse().unwrap_or(0),
        arrived_ms,
        verified,
    });
    StatusCode::OK
}

/// The configuration `ttw server` runs on: a SQLite file in `dir`, the
/// queue [`QUEUE`] delivered to `hook`, one token for every scope. The
/// secrets are named by environment variables, as in any file; the demo
/// hands their values to the server itself.
fn config(dir: &Path, hook: &str) -> Result<PathBuf> {
    let path = dir.join("ttw.toml");
    let text = format!(
        r#"# Written by `ttw demo`: a configuration of `ttw server` (see ttw.example.toml).
listen = "127.0.0.1:0"
database = "{}"

[[queues]]
name = "{QUEUE}"
webhook = {{ url = "{hook}", secret_env = "TTW_DEMO_HOOK_SECRET" }}

[[tokens]]
name = "demo"
secret_env = "TTW_DEMO_TOKEN"
scopes = ["schedule", "read", "admin"]
"#,
        dir.join("tasks.db").display()
    );
    std::fs::write(&path, text)
        .map_err(|err| Failure(format!("cannot write {}: {err}", path.display())))?;
    Ok(path)
}

/// Runs the demo.
pub(crate) async fn demo(args: &DemoArgs) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("ttw-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|err| Failure(format!("cannot make {}: {err}", dir.display())))?;
    let result = run(args, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(args: &DemoArgs, dir: &Path) -> Result<()> {
    let secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(random(32)?)
    );
    let token: String = random(16)?.iter().map(|b| format!("{b:02x}")).collect();

    // The receiver: a webhook endpoint on loopback, as a user's would be.
    let (arrivals, mut arrived) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|err| Failure(format!("cannot listen on loopback: {err}")))?;
    let hook = format!("http://{}/hook", listener.local_addr()?);
    let receiver = Router::new()
        .route("/hook", post(receive))
        .with_state(Receiver {
            secret: secret.clone(),
            arrivals,
        });
    let receiving = tokio::spawn(async move { axum::serve(listener, receiver).await });

    // The service, on a store of its own.
    let path = config(dir, &hook)?;
    let settings = server::config::load(&path, |var| match var {
        "TTW_DEMO_HOOK_SECRET" => Some(secret.clone()),
        "TTW_DEMO_TOKEN" => Some(token.clone()),
        _ => None,
    })?;
    let (bound, address) = tokio::sync::oneshot::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server::run(settings, Some(bound), async move {
        let _ = stopped.await;
    }));
    let base = match address.await {
        Ok(addr) => format!("http://{addr}"),
        Err(_) => {
            return match serving.await {
                Ok(Err(err)) => Err(err),
                _ => Err(Failure("the service did not start".into())),
            }
        }
    };
    println!("ttw demo: the service runs on a SQLite file of its own, delivering queue {QUEUE:?} by signed webhook to a receiver on {hook}");

    // Tasks scheduled over HTTP, as any client does.
    let client = reqwest::Client::new();
    let mut due: BTreeMap<i64, i64> = BTreeMap::new();
    for n in 1..=args.tasks {
        let body = format!(
            r#"{{"queue": "{QUEUE}", "payload": {{"order": {n}}}, "delay": "{n}s", "idempotency_key": "demo:order:{n}"}}"#
        );
        let answer = client
            .post(format!("{base}/v1/tasks"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .map_err(|err| Failure(format!("POST /v1/tasks: {err}")))?;
        let status = answer.status();
        let text = answer
            .text()
            .await
            .map_err(|err| Failure(format!("POST /v1/tasks: {err}")))?;
        let view: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let Some(id) = view["id"].as_i64() else {
            return Err(Failure(format!("POST /v1/tasks answered {status}: {text}")));
        };
        due.insert(id, n.into());
        println!("ttw demo: POST /v1/tasks {body} -> {status} {text}");
    }
    println!(
        "ttw demo: {} task(s) scheduled, due one second apart; waiting for their deliveries",
        due.len()
    );

    // Each delivery as it arrives.
    let mut seen: BTreeMap<i64, Vec<Arrival>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(args.tasks) + 30);
    while seen.len() < due.len() {
        let Ok(Some(a)) = tokio::time::timeout_at(deadline, arrived.recv()).await else {
            break;
        };
        println!(
            "ttw demo: delivered task {} (attempt {}), {} ms after its due time, signature {}",
            a.task,
            a.attempt,
            a.arrived_ms - a.run_at_ms,
            if a.verified { "verified" } else { "WRONG" }
        );
        seen.entry(a.task).or_default().push(a);
    }
    // What the API says of each task now (a success is written in the
    // next group of outcomes: a moment after its answer).
    let mut done = 0;
    for id in due.keys() {
        let mut view = serde_json::Value::Null;
        for _ in 0..50 {
            view = task(&client, &base, &token, *id).await?;
            if view["state"] == "done" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        done += usize::from(view["state"] == "done");
    }
    let arrivals: Vec<&Arrival> = seen.values().flatten().collect();
    let early = arrivals
        .iter()
        .filter(|a| a.arrived_ms < a.run_at_ms)
        .count();
    let verified = arrivals.iter().filter(|a| a.verified).count();
    let latest = arrivals
        .iter()
        .map(|a| a.arrived_ms - a.run_at_ms)
        .max()
        .unwrap_or(0);
    println!(
        "ttw demo: {} of {} delivered ({} request(s)), {early} early, the latest {latest} ms after its due time, {verified} signature(s) verified; GET /v1/tasks/{{id}} says {done} done",
        seen.len(),
        due.len(),
        arrivals.len(),
    );
    println!("ttw demo: the console is at {base}/console/ (token {token})");
    let ok =
        seen.len() == due.len() && early == 0 && verified == arrivals.len() && done == due.len();
    if args.stay {
        println!("ttw demo: running until Ctrl-C");
        let _ = tokio::signal::ctrl_c().await;
    } else {
        println!("ttw demo: run `ttw demo --stay` to keep it open; `ttw server --config ttw.example.toml` is the service on a file of your own");
    }
    let _ = stop.send(());
    match serving.await {
        Ok(result) => result?,
        Err(err) => return Err(Failure(format!("the service failed: {err}"))),
    }
    receiving.abort();
    if ok {
        Ok(())
    } else {
        Err(Failure(
            "the demo did not see every task delivered once, on time and signed".into(),
        ))
    }
}

/// `GET /v1/tasks/{id}`, as JSON.
async fn task(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    id: i64,
) -> Result<serde_json::Value> {
    let text = client
        .get(format!("{base}/v1/tasks/{id}"))
        .bearer_auth(token)
        .send()
        .await
        .map_err(|err| Failure(format!("GET /v1/tasks/{id}: {err}")))?
        .text()
        .await
        .unwrap_or_default();
    Ok(serde_json::from_str(&text).unwrap_or_default())
}
