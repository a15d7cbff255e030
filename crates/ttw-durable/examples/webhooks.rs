//! Due tasks delivered by signed webhook: a receiver (an HTTP server in
//! this process, verifying each Standard Webhooks signature itself) and a
//! scheduler on a SQLite file. Prints what arrived, how late, and whether
//! every signature verified.
//!
//! ```text
//! cargo run --release -p ttw-durable --features webhook --example webhooks
//! ```
//!
//! One task's first attempt is answered `503` with `Retry-After: 1`: it
//! arrives again a second later, on its second attempt.

// A measurement, not the task system: it reads the system's clock
// directly (the library reads it only through its clock; see clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "support/percentile.rs"]
mod percentile;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use percentile::percentile;
use sha2::Sha256;
use ttw_durable::{Scheduler, Store, TaskState, Webhook};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const TASKS: u64 = 200;

/// One request as the receiver saw it.
struct Arrival {
    task: i64,
    attempt: u32,
    late_ms: f64,
    at_ms: f64,
    verified: bool,
}

/// The receiver's own check of a request's signature: HMAC-SHA256 of
/// `{webhook-id}.{webhook-timestamp}.{body}` under the secret's key.
fn verify(headers: &HeaderMap, body: &[u8]) -> bool {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let key = STANDARD.decode(&SECRET["whsec_".len()..]).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.", get("webhook-id"), get("webhook-timestamp")).as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()));
    get("webhook-signature")
        .split(' ')
        .any(|sig| sig == expected)
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The receiver.
    let arrivals: Arc<Mutex<Vec<Arrival>>> = Arc::default();
    let seen = arrivals.clone();
    let app = axum::Router::new().route(
        "/hooks/due",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let field = |name: &str| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<f64>().ok())
                        .unwrap_or(0.0)
                };
                let arrival = Arrival {
                    task: field("ttw-task-id") as i64,
                    attempt: field("ttw-attempt") as u32,
                    late_ms: now_ms() - field("ttw-run-at"),
                    at_ms: now_ms(),
                    verified: verify(&headers, &body),
                };
                let busy = &body[..] == b"busy" && arrival.attempt == 1;
                seen.lock().unwrap().push(arrival);
                if busy {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [("retry-after", "1")],
                        "busy",
                    )
                } else {
                    (StatusCode::OK, [("retry-after", "")], "ok")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hooks/due", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The scheduler, its queue bound to the receiver.
    let dir = std::env::temp_dir().join(format!("ttw-webhooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = Store::sqlite(dir.join("tasks.db")).await?;
    let hook = Webhook::builder(&url)
        .secret(SECRET)
        .timeout(Duration::from_secs(5))
        .content_type("text/plain")
        .build()?;
    let scheduler = Scheduler::builder(store.clone())
        .deliver("orders", hook)
        .start_queues()
        .await?;
    println!("receiver at {url}; {TASKS} tasks due over the next 2 s");

    let mut ids = Vec::new();
    for i in 0..TASKS {
        let payload = if i == 0 {
            "busy".to_string()
        } else {
            format!("cancel unpaid order {i}")
        };
        let id = store
            .schedule(payload.into_bytes())
            .queue("orders")
            .delay(Duration::from_millis(500 + 10 * i))
            .await?;
        ids.push(id);
    }
    let done = |store: Store, ids: Vec<_>| async move {
        for id in ids {
            while store.get(id).await?.map(|t| t.state) != Some(TaskState::Done) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok::<_, ttw_durable::Error>(())
    };
    tokio::time::timeout(Duration::from_secs(30), done(store.clone(), ids.clone())).await??;
    scheduler.shutdown().await?;

    let arrivals = std::mem::take(&mut *arrivals.lock().unwrap());
    let verified = arrivals.iter().filter(|a| a.verified).count();
    let mut first: Vec<f64> = arrivals
        .iter()
        .filter(|a| a.attempt == 1)
        .map(|a| a.late_ms)
        .collect();
    first.sort_by(f64::total_cmp);
    let busy = ids[0].get();
    let retried: Vec<&Arrival> = arrivals.iter().filter(|a| a.task == busy).collect();
    println!(
        "arrived: {} requests for {} tasks, all done",
        arrivals.len(),
        ids.len()
    );
    println!(
        "signatures verified by the receiver: {verified} of {}",
        arrivals.len()
    );
    println!(
        "first attempts, due to received: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; early: {}",
        percentile(&first, 0.5),
        percentile(&first, 0.99),
        first.last().copied().unwrap_or(f64::NAN),
        first.iter().filter(|l| **l < 0.0).count()
    );
    if let [one, two, ..] = &retried[..] {
        println!(
            "task {busy}: attempt 1 answered 503 Retry-After: 1; attempt 2 arrived {:.0} ms later",
            two.at_ms - one.at_ms
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(verified, arrivals.len(), "every signature verified");
    Ok(())
}
