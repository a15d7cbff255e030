//! The schedule routes' refusals and headers that a task's own fields do
//! not carry: a `GET` target with a payload, a batch's trace context.

use super::{call, router, router_with, send, Router, TOKEN};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};

/// `POST uri` with `body` and the headers `headers`, with the token.
async fn post_with(
    router: &Router,
    uri: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method("POST")
        .uri(uri)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(router, request.body(Body::from(body.to_string())).unwrap()).await
}

/// The report: a task with `target: {method: "GET"}` and a payload was
/// accepted (201) and delivered with an empty body. It is refused now,
/// 400 `invalid_destination`, alone and in a batch, and nothing is
/// written; a `GET` without a payload and a `DELETE` with one are taken.
#[tokio::test]
async fn a_get_target_with_a_payload_is_refused() {
    let (router, dir) = router_with(
        "get-payload",
        "[[queues]]\nname = \"hooks\"\nwebhook = { url = \"http://127.0.0.1:9/hook\", secret_env = \"HOOK\" }\n",
        "destinations = [\"http://127.0.0.1:9/\"]\n",
    )
    .await;
    let target = |method: &str| json!({"url": "http://127.0.0.1:9/x", "method": method});
    let get = json!({"queue": "hooks", "payload": {"order": 42}, "target": target("GET")});
    let (status, answer) = post_with(&router, "/v1/tasks", get.clone(), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_destination", "{answer}");
    assert!(
        answer["error"]["message"].as_str().unwrap().contains("GET"),
        "{answer}"
    );
    let batch = json!({"tasks": [{"queue": "hooks", "payload": "ok"}, get]});
    let (status, answer) = post_with(&router, "/v1/tasks/batch", batch, &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("tasks[1]"),
        "{answer}"
    );
    let (_, page) = call(&router, "GET", "/v1/tasks?queue=hooks", None, true).await;
    assert_eq!(
        page["tasks"].as_array().unwrap().len(),
        0,
        "nothing written: {page}"
    );

    for task in [
        json!({"queue": "hooks", "target": target("GET")}),
        json!({"queue": "hooks", "payload": {"order": 42}, "target": target("DELETE")}),
    ] {
        let (status, answer) = post_with(&router, "/v1/tasks", task, &[]).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    std::fs::remove_dir_all(dir).ok();
}

/// The report: a `traceparent` header on `POST /v1/tasks/batch` was not
/// kept (the field on each task was). The header's trace context goes to
/// every task of the batch without a `traceparent` field of its own, and
/// the field wins where there is one; an `Idempotency-Key` header, which
/// cannot name many tasks, is 400 `invalid_key`.
#[tokio::test]
async fn a_batch_s_traceparent_header_goes_to_its_tasks_without_one() {
    let (router, dir) = router("batch-trace").await;
    let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let field = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let batch = json!({"tasks": [
        {"payload": "a"},
        {"payload": "b", "traceparent": field},
        {"payload": "c", "tracestate": "vendor=own"},
    ]});
    let (status, answer) = post_with(
        &router,
        "/v1/tasks/batch",
        batch.clone(),
        &[("traceparent", header), ("tracestate", "vendor=header")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let ids: Vec<i64> = answer["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect();
    let read = |id: i64| {
        let router = router.clone();
        async move {
            call(&router, "GET", &format!("/v1/tasks/{id}"), None, true)
                .await
                .1
        }
    };
    let a = read(ids[0]).await;
    assert_eq!(a["traceparent"], header, "{a}");
    assert_eq!(a["tracestate"], "vendor=header", "{a}");
    let b = read(ids[1]).await;
    assert_eq!(b["traceparent"], field, "the field wins: {b}");
    assert!(
        b["tracestate"].is_null(),
        "no header tracestate with a field traceparent: {b}"
    );
    let c = read(ids[2]).await;
    assert_eq!(c["traceparent"], header, "{c}");
    assert_eq!(c["tracestate"], "vendor=own", "its own tracestate: {c}");

    let (status, answer) = post_with(
        &router,
        "/v1/tasks/batch",
        batch,
        &[("idempotency-key", "k")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_key", "{answer}");
    let (status, answer) = post_with(
        &router,
        "/v1/tasks/batch",
        json!({"tasks": [{"payload": "d"}]}),
        &[("traceparent", "00-NOT-A-TRACE-01")],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_trace_context", "{answer}");
    std::fs::remove_dir_all(dir).ok();
}
