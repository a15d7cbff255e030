//! Traces exported by OTLP: `ttw server` built with the feature `otlp` (as
//! this package builds it) and pointed at a collector by the standard
//! `OTEL_EXPORTER_OTLP_*` variables exports each delivery's span as a
//! child of the trace its task was scheduled in.

#[path = "support/receiver.rs"]
mod receiver;

#[path = "support/ttw_server.rs"]
mod ttw_server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use receiver::{Receiver, SECRET};
use serde_json::Value;

const TOKEN: &str = "app-token-0123456789";

/// A collector of OTLP over HTTP in JSON: every body posted to
/// `/v1/traces`. Answers its address and what it received.
async fn collector() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = Router::new()
        .route(
            "/v1/traces",
            post(
                |State(seen): State<Arc<Mutex<Vec<Value>>>>, body: Bytes| async move {
                    if let Ok(json) = serde_json::from_slice(&body) {
                        seen.lock().unwrap().push(json);
                    }
                    "{}"
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

/// Every span the collector received, with its resource's attributes.
fn spans(seen: &[Value]) -> Vec<(Value, Value)> {
    let mut out = Vec::new();
    for body in seen {
        for resource in body["resourceSpans"].as_array().into_iter().flatten() {
            let attributes = resource["resource"]["attributes"].clone();
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    out.push((attributes.clone(), span.clone()));
                }
            }
        }
    }
    out
}

/// The string value of attribute `key` in an OTLP attribute list.
fn attribute(list: &Value, key: &str) -> Option<String> {
    list.as_array()?.iter().find(|a| a["key"] == key).map(|a| {
        let value = &a["value"];
        value["stringValue"]
            .as_str()
            .map(str::to_string)
            .or_else(|| value["intValue"].as_str().map(str::to_string))
            .or_else(|| value["intValue"].as_i64().map(|n| n.to_string()))
            .unwrap_or_default()
    })
}

/// A task scheduled with a `traceparent` is delivered in a `ttw_delivery`
/// span of that trace, whose parent is the span the `traceparent` names,
/// with the task's id, exported by OTLP under the service's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_a_span_of_the_trace_its_task_was_scheduled_in() {
    let receiver = Receiver::start().await;
    let (endpoint, seen) = collector().await;
    let dir = std::env::temp_dir().join(format!("ttw_otlp_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let database = format!("database = \"{}\"", dir.join("tasks.db").display());
    let config = ttw_server::write_config(
        &dir,
        &database,
        &format!(
            r#"[[queues]]
name = "hooks"
webhook = {{ url = "{}", secret_env = "TTW_HOOK_SECRET" }}

[[tokens]]
name = "app"
secret_env = "TTW_TOKEN_APP"
scopes = ["schedule", "read"]
"#,
            receiver.url("/hook"),
        ),
    );
    let (_child, addr, _out) = ttw_server::spawn(
        &config,
        &[
            ("TTW_TOKEN_APP", TOKEN),
            ("TTW_HOOK_SECRET", SECRET),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "ttw-under-test"),
        ],
    )
    .await;

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/v1/tasks"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{trace}-{parent}-01"))
        .body(r#"{"payload": {"order": 1}, "queue": "hooks"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 201);
    let made: Value = serde_json::from_slice(&answer.bytes().await.unwrap()).unwrap();
    let id = made["id"].as_i64().unwrap().to_string();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (resource, span) = loop {
        let found = spans(&seen.lock().unwrap())
            .into_iter()
            .find(|(_, span)| span["name"] == "ttw_delivery");
        if let Some(found) = found {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no ttw_delivery span exported within 30 s; received {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(span["traceId"].as_str(), Some(trace), "{span}");
    assert_eq!(span["parentSpanId"].as_str(), Some(parent), "{span}");
    assert_eq!(
        attribute(&span["attributes"], "task_id"),
        Some(id),
        "{span}"
    );
    assert_eq!(
        attribute(&resource, "service.name").as_deref(),
        Some("ttw-under-test")
    );
}
