//! The document against the server: every route it names is served by its
//! handler; every bound it states is the one the server enforces; every
//! refusal the server gives is named under its route and status.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::*;
use crate::server::cluster::Stats;
use crate::server::service::Api;

const TOKEN: &str = "a-token-long-enough-0123456789";
const HOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The document, as the server serves it.
fn doc() -> Value {
    let doc: Value = serde_json::from_str(document_json()).expect("the document is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    doc
}

/// Every (method, path) the document names.
fn documented() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc()["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            out.push((method.to_uppercase(), path.clone()));
        }
    }
    out
}

/// A router on a fresh SQLite file, with one admin token ([`TOKEN`]) and
/// the queues `default` and `q`.
async fn router(name: &str) -> (Router, std::path::PathBuf) {
    router_with(name, "", "").await
}

/// The same, with `queues` (TOML) added to them and `token` (TOML) added to
/// the token's entry; a `secret_env = "HOOK"` reads a webhook secret.
async fn router_with(name: &str, queues: &str, token: &str) -> (Router, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ttw-routes-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ttw.toml");
    std::fs::write(
        &path,
        format!(
            "database = \"{}\"\nmax_body_bytes = 4194304\n[[queues]]\nname = \"default\"\n[[queues]]\nname = \"q\"\n{queues}\n[[tokens]]\nname = \"t\"\nsecret_env = \"T\"\nscopes = [\"admin\"]\n{token}\n",
            dir.join("tasks.db").display()
        ),
    )
    .unwrap();
    let settings = super::super::config::load(&path, |name| {
        Some(if name == "HOOK" { HOOK_SECRET } else { TOKEN }.into())
    })
    .expect("the configuration loads");
    let store = crate::store::open(&settings.database, None, true, settings.sqlite_commits)
        .await
        .unwrap();
    let api = Arc::new(Api {
        grouped: store.grouped(),
        store,
        stats: Stats::new(std::time::Duration::from_secs(10), None),
        settings,
        counts: Arc::default(),
    });
    (routes(api), dir)
}

/// `method uri` with `body` (JSON text, or none) and `token`: the status
/// and the answer.
async fn call(
    router: &Router,
    method: &str,
    uri: &str,
    body: Option<String>,
    token: bool,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if token {
        request = request.header("authorization", format!("Bearer {TOKEN}"));
    }
    let request = match body {
        Some(text) => request
            .header("content-type", "application/json")
            .body(Body::from(text)),
        None => request.body(Body::empty()),
    }
    .unwrap();
    send(router, request).await
}

/// Sends `request` to `router`: the status and the answer as JSON.
async fn send(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let answer = router.clone().oneshot(request).await.unwrap();
    let status = answer.status();
    let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// The description the document gives `status` of `method path`, if it
/// names that answer.
fn described(doc: &Value, method: &str, path: &str, status: StatusCode) -> Option<String> {
    doc["paths"][path][method.to_lowercase()]["responses"][status.as_str()]["description"]
        .as_str()
        .map(str::to_string)
}

/// Every route of the document is answered by its handler (without a
/// token: 401, or the open routes' 200), never by the fallback's `no such
/// route` or a 405; and a route outside it is a 404.
#[tokio::test]
async fn the_router_serves_every_route_the_document_names() {
    let (router, dir) = router("routes").await;
    let routes = documented();
    assert_eq!(routes.len(), 36, "{routes:?}");
    for (method, path) in &routes {
        let uri = path
            .replace("{id}", "1")
            .replace("{key}", "k")
            .replace("{name}", "n");
        let (status, answer) = call(&router, method, &uri, None, false).await;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert_ne!(
            answer["error"]["message"], "no such route",
            "{method} {uri}"
        );
        let open = ["/healthz", "/readyz", "/v1/openapi.json"].contains(&path.as_str());
        let expected = if open {
            StatusCode::OK
        } else {
            StatusCode::UNAUTHORIZED
        };
        assert_eq!(status, expected, "{method} {uri}: {answer}");
        let said = described(&doc(), method, path, status).unwrap_or_default();
        assert!(
            open || said.contains("`unauthorized`"),
            "{method} {path}: {said}"
        );
    }
    let (status, answer) = call(&router, "GET", "/v1/nothing", None, false).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(answer["error"]["code"], "not_found");
    let (status, answer) = call(&router, "PATCH", "/v1/tasks", None, true).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer["error"]["code"], "method_not_allowed");
    std::fs::remove_dir_all(&dir).ok();
}

/// The requests of [`every_bound_and_code_the_document_states_is_the_servers`]
/// made from one schema of the document: for each property with a bound
/// (length, minimum, maximum, items), a value at the bound (taken) and one
/// just past it (refused with 400).
fn cases_at_bounds(doc: &Value, schema: &str) -> Vec<(String, Value, bool)> {
    let mut cases = Vec::new();
    let props = doc["components"]["schemas"][schema]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("no schema {schema}"));
    let text = |n: u64| Value::from("k".repeat(n as usize));
    for (name, s) in props {
        if let Some(max) = s["maxLength"].as_u64() {
            cases.push((name.clone(), text(max), true));
            cases.push((name.clone(), text(max + 1), false));
        }
        if let Some(min) = s["minLength"].as_u64() {
            cases.push((name.clone(), text(min), true));
            if min > 0 {
                cases.push((name.clone(), text(min - 1), false));
            }
        }
        if let Some(max) = s["maximum"].as_i64() {
            cases.push((name.clone(), Value::from(max), true));
            cases.push((name.clone(), Value::from(max + 1), false));
        }
        if let Some(min) = s["minimum"].as_i64() {
            cases.push((name.clone(), Value::from(min), true));
            cases.push((name.clone(), Value::from(min - 1), false));
        }
    }
    cases
}

/// Regression: the hand-written document said `idempotency_key` had at
/// most 255 characters; the server took 1,024. The document is generated
/// now, and this holds it to the server: a request at every bound the
/// document states for a task (`NewTask`), a batch (`NewBatch`), a page
/// (`limit`), a queue's limits (`NewLimits`, `NewRate`) and a pull queue's
/// claim (`ClaimRequest`) is taken, one just past it refused with 400; and
/// each refusal's code is named in the document under its route and status.
#[tokio::test]
async fn every_bound_and_code_the_document_states_is_the_servers() {
    let (router, dir) = router_with("bounds", "[[queues]]\nname = \"p\"\npull = true\n", "").await;
    let doc = doc();
    let mut checked = 0;
    let mut check = async |method: &str,
                           path: &str,
                           uri: &str,
                           body: Option<Value>,
                           taken: bool,
                           what: &str| {
        let (status, answer) = call(&router, method, uri, body.map(|b| b.to_string()), true).await;
        assert_eq!(status.is_success(), taken, "{what}: {status} {answer}");
        if !taken {
            assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
            let code = answer["error"]["code"].as_str().unwrap().to_string();
            let said = described(&doc, method, path, status).unwrap_or_default();
            assert!(
                said.contains(&format!("`{code}`")),
                "{what}: {method} {path} answered {status} `{code}`, the document says {said:?}"
            );
        }
        checked += 1;
    };
    for (name, value, taken) in cases_at_bounds(&doc, "NewTask") {
        let mut body = json!({"delay": "1h", "payload": 1});
        body[name.as_str()] = value.clone();
        if name == "max_wait" {
            body["replace_pending"] = true.into();
            body["idempotency_key"] = "debounce".into();
        }
        if name == "tracestate" {
            body["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into();
        }
        let what = format!("task {name} = {value}");
        check(
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(body.clone()),
            taken,
            &what,
        )
        .await;
        let batch = json!({ "tasks": [body] });
        let what = format!("batch {what}");
        check(
            "POST",
            "/v1/tasks/batch",
            "/v1/tasks/batch",
            Some(batch),
            taken,
            &what,
        )
        .await;
    }
    let max = doc["components"]["schemas"]["NewBatch"]["properties"]["tasks"]["maxItems"]
        .as_u64()
        .expect("the batch's maxItems") as usize;
    for (n, taken) in [(max, true), (max + 1, false)] {
        let tasks = vec![json!({"delay": "1h"}); n];
        let what = format!("a batch of {n}");
        check(
            "POST",
            "/v1/tasks/batch",
            "/v1/tasks/batch",
            Some(json!({ "tasks": tasks })),
            taken,
            &what,
        )
        .await;
    }
    let limit = doc["paths"]["/v1/tasks"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .expect("the limit parameter")["schema"]
        .clone();
    for (n, taken) in [
        (limit["minimum"].as_i64().unwrap(), true),
        (limit["minimum"].as_i64().unwrap() - 1, false),
        (limit["maximum"].as_i64().unwrap(), true),
        (limit["maximum"].as_i64().unwrap() + 1, false),
    ] {
        let uri = format!("/v1/tasks?limit={n}");
        check("GET", "/v1/tasks", &uri, None, taken, &format!("limit={n}")).await;
    }
    let limits = "/v1/queues/{name}/limits";
    for (name, value, taken) in cases_at_bounds(&doc, "NewLimits") {
        let what = format!("limits {name} = {value}");
        check(
            "PUT",
            limits,
            "/v1/queues/q/limits",
            Some(json!({ name: value })),
            taken,
            &what,
        )
        .await;
    }
    for (name, value, taken) in cases_at_bounds(&doc, "NewRate") {
        let mut rate = json!({"count": 10, "per": "1s"});
        rate[name.as_str()] = value.clone();
        let what = format!("rate {name} = {value}");
        check(
            "PUT",
            limits,
            "/v1/queues/q/limits",
            Some(json!({ "rate": rate })),
            taken,
            &what,
        )
        .await;
    }
    for (name, value, taken) in cases_at_bounds(&doc, "ClaimRequest") {
        let mut claim = json!({"worker": "w"});
        claim[name.as_str()] = value.clone();
        let what = format!("claim {name} = {value}");
        check(
            "POST",
            "/v1/queues/{name}/claim",
            "/v1/queues/p/claim",
            Some(claim),
            taken,
            &what,
        )
        .await;
    }
    // Each task bound twice (single and batch), the batch's size, the
    // page's limit, the limits', the rate's and the claim's.
    assert!(
        checked >= 28 + 2 + 4 + 8 + 8 + 8,
        "only {checked} requests at bounds"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A bad request: (method, documented path, URI, body, with the token,
/// the code it is refused with).
type Refused<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, bool, Code);

/// Every refusal the API gives is named under its route and status in the
/// document, whatever the code: a table of bad requests, one or more per
/// code, each checked against the document.
#[tokio::test]
async fn every_refusal_is_documented_under_its_route() {
    let (router, dir) = router_with("codes", "[[queues]]\nname = \"p\"\npull = true\n", "").await;
    let doc = doc();
    let (_, made) = call(
        &router,
        "POST",
        "/v1/tasks",
        Some(r#"{"delay": "1s", "idempotency_key": "done"}"#.into()),
        true,
    )
    .await;
    let id = made["id"].as_i64().unwrap();
    call(&router, "DELETE", &format!("/v1/tasks/{id}"), None, true).await;
    let cases: &[Refused<'_>] = &[
        (
            "GET",
            "/v1/tasks/{id}",
            "/v1/tasks/1",
            None,
            false,
            Code::Unauthorized,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some("{"),
            true,
            Code::MalformedJson,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"colour": 1}"#),
            true,
            Code::InvalidRequest,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"run_at": "tomorrow"}"#),
            true,
            Code::InvalidTime,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"delay": "soon"}"#),
            true,
            Code::InvalidDelay,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"payload_base64": "%%"}"#),
            true,
            Code::InvalidPayload,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"queue": "nope"}"#),
            true,
            Code::UnknownQueue,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"idempotency_key": ""}"#),
            true,
            Code::InvalidKey,
        ),
        (
            "GET",
            "/v1/tasks/{id}",
            "/v1/tasks/abc",
            None,
            true,
            Code::InvalidId,
        ),
        (
            "GET",
            "/v1/tasks/{id}",
            "/v1/tasks/999999",
            None,
            true,
            Code::NotFound,
        ),
        (
            "GET",
            "/v1/tasks/{id}/attempts",
            "/v1/tasks/abc/attempts",
            None,
            true,
            Code::InvalidId,
        ),
        (
            "GET",
            "/v1/tasks/{id}/attempts",
            "/v1/tasks/999999/attempts",
            None,
            true,
            Code::NotFound,
        ),
        (
            "GET",
            "/v1/keys/{key}",
            "/v1/keys/nothing",
            None,
            true,
            Code::NotFound,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"target": {"url": "ftp://x.example/"}}"#),
            true,
            Code::InvalidDestination,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"target": {"url": "https://x.example/"}}"#),
            true,
            Code::DestinationNotAllowed,
        ),
        (
            "POST",
            "/v1/tasks/batch",
            "/v1/tasks/batch",
            Some(r#"{"tasks": [{"target": {"url": "https://x.example/"}}]}"#),
            true,
            Code::DestinationNotAllowed,
        ),
        (
            "POST",
            "/v1/tasks",
            "/v1/tasks",
            Some(r#"{"traceparent": "00-1-2-01"}"#),
            true,
            Code::InvalidTraceContext,
        ),
        (
            "DELETE",
            "/v1/keys/{key}",
            "/v1/keys/done",
            None,
            true,
            Code::NotScheduled,
        ),
        (
            "POST",
            "/v1/tasks/{id}/reschedule",
            &format!("/v1/tasks/{id}/reschedule"),
            Some(r#"{"delay": "1m"}"#),
            true,
            Code::NotScheduled,
        ),
        (
            "POST",
            "/v1/tasks/{id}/redrive",
            &format!("/v1/tasks/{id}/redrive"),
            None,
            true,
            Code::NotDead,
        ),
        (
            "POST",
            "/v1/tasks/cancel",
            "/v1/tasks/cancel",
            Some(r#"{"state": "dead"}"#),
            true,
            Code::InvalidState,
        ),
        (
            "POST",
            "/v1/tasks/cancel",
            "/v1/tasks/cancel",
            Some(r#"{"limit": 0}"#),
            true,
            Code::InvalidLimit,
        ),
        (
            "POST",
            "/v1/tasks/redrive",
            "/v1/tasks/redrive",
            Some(r#"{"created_before": "yesterday"}"#),
            true,
            Code::InvalidTime,
        ),
        (
            "POST",
            "/v1/keys/{key}/reschedule",
            "/v1/keys/done/reschedule",
            Some(r#"{"run_at": "x"}"#),
            true,
            Code::InvalidTime,
        ),
        (
            "GET",
            "/v1/tasks",
            "/v1/tasks?state=asleep",
            None,
            true,
            Code::InvalidState,
        ),
        (
            "GET",
            "/v1/tasks",
            "/v1/tasks?cursor=x",
            None,
            true,
            Code::InvalidCursor,
        ),
        (
            "GET",
            "/v1/tasks",
            "/v1/tasks?colour=red",
            None,
            true,
            Code::InvalidRequest,
        ),
        (
            "POST",
            "/v1/tasks/redrive",
            "/v1/tasks/redrive",
            Some(r#"{"state": "running"}"#),
            true,
            Code::InvalidState,
        ),
        (
            "POST",
            "/v1/tasks/redrive",
            "/v1/tasks/redrive",
            Some(r#"{"spread": "x"}"#),
            true,
            Code::InvalidDelay,
        ),
        (
            "PUT",
            "/v1/recurring/{name}",
            "/v1/recurring/r",
            Some(r#"{"every": "x"}"#),
            true,
            Code::InvalidSchedule,
        ),
        (
            "PUT",
            "/v1/recurring/{name}",
            "/v1/recurring/r",
            Some(r#"{"every": "1h", "queue": "nope"}"#),
            true,
            Code::UnknownQueue,
        ),
        (
            "POST",
            "/v1/recurring/{name}/pause",
            "/v1/recurring/none/pause",
            None,
            true,
            Code::NotFound,
        ),
        (
            "DELETE",
            "/v1/recurring/{name}",
            "/v1/recurring/none",
            None,
            true,
            Code::NotFound,
        ),
        (
            "GET",
            "/v1/queues/{name}",
            "/v1/queues/nope",
            None,
            true,
            Code::NotFound,
        ),
        (
            "PUT",
            "/v1/queues/{name}/limits",
            "/v1/queues/q/limits",
            Some(r#"{"rate": {"count": 1, "per": "x"}}"#),
            true,
            Code::InvalidLimit,
        ),
        (
            "PUT",
            "/v1/queues/{name}/retry",
            "/v1/queues/q/retry",
            Some(r#"{"max_attempts": 0}"#),
            true,
            Code::InvalidLimit,
        ),
        (
            "POST",
            "/v1/queues/{name}/claim",
            "/v1/queues/q/claim",
            Some(r#"{"worker": "w"}"#),
            true,
            Code::NotAPullQueue,
        ),
        (
            "POST",
            "/v1/queues/{name}/claim",
            "/v1/queues/p/claim",
            Some(r#"{"worker": "w", "lease": "0s"}"#),
            true,
            Code::InvalidLease,
        ),
        (
            "POST",
            "/v1/queues/{name}/claim",
            "/v1/queues/p/claim",
            Some(r#"{"worker": "w", "wait": "61s"}"#),
            true,
            Code::InvalidWait,
        ),
        (
            "POST",
            "/v1/queues/{name}/claim",
            "/v1/queues/p/claim",
            Some(r#"{"worker": ""}"#),
            true,
            Code::InvalidRequest,
        ),
        (
            "POST",
            "/v1/queues/{name}/claim",
            "/v1/queues/none/claim",
            Some(r#"{"worker": "w"}"#),
            true,
            Code::NotFound,
        ),
        (
            "POST",
            "/v1/tasks/{id}/ack",
            "/v1/tasks/1/ack",
            Some(r#"{"claim": "1"}"#),
            true,
            Code::StaleClaim,
        ),
        (
            "POST",
            "/v1/tasks/{id}/nack",
            "/v1/tasks/1/nack",
            Some(r#"{"claim": "not-a-claim", "error": "e"}"#),
            true,
            Code::StaleClaim,
        ),
        (
            "POST",
            "/v1/tasks/{id}/nack",
            "/v1/tasks/1/nack",
            Some(r#"{"claim": "1", "error": "e", "retry_in": "soon"}"#),
            true,
            Code::InvalidDelay,
        ),
        (
            "POST",
            "/v1/tasks/{id}/extend",
            "/v1/tasks/1/extend",
            Some(r#"{"claim": "1", "lease": "13h"}"#),
            true,
            Code::InvalidLease,
        ),
        (
            "POST",
            "/v1/tasks/{id}/extend",
            "/v1/tasks/x/extend",
            Some(r#"{"claim": "1", "lease": "1m"}"#),
            true,
            Code::InvalidId,
        ),
    ];
    for &(method, path, uri, body, token, code) in cases {
        let (status, answer) = call(&router, method, uri, body.map(str::to_string), token).await;
        assert_eq!(
            answer["error"]["code"],
            code.as_str(),
            "{method} {uri}: {status} {answer}"
        );
        assert_eq!(status, code.status(), "{method} {uri}");
        let said = described(&doc, method, path, status).unwrap_or_default();
        assert!(
            said.contains(&format!("`{}`", code.as_str())),
            "{method} {path}: {status} `{}` is not in the document ({said:?})",
            code.as_str()
        );
    }
    let tried: std::collections::BTreeSet<_> = cases.iter().map(|c| c.5.as_str()).collect();
    // Not made by a request here: forbidden (one token, admin), too large
    // bodies and batches (the bounds test), unavailable (a database down:
    // the service tests), method_not_allowed (the routes test).
    let elsewhere = [
        "forbidden",
        "body_too_large",
        "payload_too_large",
        "batch_too_large",
        "unavailable",
        "method_not_allowed",
        "invalid_limit",
    ];
    for code in Code::ALL {
        assert!(
            tried.contains(code.as_str()) || elsewhere.contains(&code.as_str()),
            "no request refused with `{}`",
            code.as_str()
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

mod tasks;
