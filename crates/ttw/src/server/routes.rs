//! The routes of `ttw server`: one table of (method, path), the router
//! built from it, and the OpenAPI 3.1 document a test holds equal to it.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::Router;

use super::api::{
    cancel_key, cancel_task, counts, get_key, get_task, healthz, readyz, reschedule_key,
    reschedule_task, schedule, schedule_batch, ApiError, Shared,
};
use super::{manage, queues};

/// Every route the server has, as (method, path): the router is built from
/// this table, and a test holds it equal to the OpenAPI document's.
pub(crate) const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/v1/openapi.json"),
    ("POST", "/v1/tasks"),
    ("GET", "/v1/tasks"),
    ("POST", "/v1/tasks/batch"),
    ("POST", "/v1/tasks/redrive"),
    ("GET", "/v1/tasks/{id}"),
    ("DELETE", "/v1/tasks/{id}"),
    ("POST", "/v1/tasks/{id}/reschedule"),
    ("GET", "/v1/keys/{key}"),
    ("DELETE", "/v1/keys/{key}"),
    ("POST", "/v1/keys/{key}/reschedule"),
    ("GET", "/v1/counts"),
    ("GET", "/v1/recurring"),
    ("PUT", "/v1/recurring/{name}"),
    ("DELETE", "/v1/recurring/{name}"),
    ("POST", "/v1/recurring/{name}/pause"),
    ("POST", "/v1/recurring/{name}/resume"),
    ("GET", "/v1/queues"),
    ("GET", "/v1/queues/{name}"),
    ("POST", "/v1/queues/{name}/pause"),
    ("POST", "/v1/queues/{name}/resume"),
    ("PUT", "/v1/queues/{name}/limits"),
    ("PUT", "/v1/queues/{name}/retry"),
];

/// The handler of one entry of [`ROUTES`].
fn handler(method: &str, path: &str) -> MethodRouter<Shared> {
    match (method, path) {
        ("GET", "/healthz") => get(healthz),
        ("GET", "/readyz") => get(readyz),
        ("GET", "/v1/openapi.json") => get(openapi),
        ("POST", "/v1/tasks") => post(schedule),
        ("GET", "/v1/tasks") => get(manage::list),
        ("POST", "/v1/tasks/batch") => post(schedule_batch),
        ("POST", "/v1/tasks/redrive") => post(manage::redrive),
        ("GET", "/v1/tasks/{id}") => get(get_task),
        ("DELETE", "/v1/tasks/{id}") => delete(cancel_task),
        ("POST", "/v1/tasks/{id}/reschedule") => post(reschedule_task),
        ("GET", "/v1/keys/{key}") => get(get_key),
        ("DELETE", "/v1/keys/{key}") => delete(cancel_key),
        ("POST", "/v1/keys/{key}/reschedule") => post(reschedule_key),
        ("GET", "/v1/counts") => get(counts),
        ("GET", "/v1/recurring") => get(manage::list_recurring),
        ("PUT", "/v1/recurring/{name}") => put(manage::put_recurring),
        ("DELETE", "/v1/recurring/{name}") => delete(manage::delete_recurring),
        ("POST", "/v1/recurring/{name}/pause") => post(manage::pause_recurring),
        ("POST", "/v1/recurring/{name}/resume") => post(manage::resume_recurring),
        ("GET", "/v1/queues") => get(queues::list),
        ("GET", "/v1/queues/{name}") => get(queues::get),
        ("POST", "/v1/queues/{name}/pause") => post(queues::pause),
        ("POST", "/v1/queues/{name}/resume") => post(queues::resume),
        ("PUT", "/v1/queues/{name}/limits") => put(queues::put_limits),
        ("PUT", "/v1/queues/{name}/retry") => put(queues::put_retry),
        _ => unreachable!("a route of ROUTES without a handler: {method} {path}"),
    }
}

/// The routes of the API, from [`ROUTES`].
pub(crate) fn routes(api: Shared) -> Router {
    let mut by_path: BTreeMap<&str, MethodRouter<Shared>> = BTreeMap::new();
    for &(method, path) in ROUTES {
        let route = handler(method, path);
        let merged = match by_path.remove(path) {
            Some(existing) => existing.merge(route),
            None => route,
        };
        by_path.insert(path, merged);
    }
    let mut router = Router::new();
    for (path, route) in by_path {
        router = router.route(path, route);
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        .with_state(api)
}

/// The OpenAPI 3.1 document of this API.
pub(crate) const OPENAPI: &str = include_str!("openapi.json");

/// `GET /v1/openapi.json`.
async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route")
}

async fn not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "the route does not take this method",
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::server::api::Api;
    use crate::server::group::Grouper;

    /// The (method, path) pairs the OpenAPI document describes.
    fn documented() -> BTreeSet<(String, String)> {
        let doc: Value = serde_json::from_str(OPENAPI).expect("the document is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let mut out = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
        out
    }

    /// The document describes exactly the routes of the table the router is
    /// built from: a route added without its description, or described and
    /// not served, fails here.
    #[test]
    fn the_openapi_document_describes_every_route_and_no_other() {
        let served: BTreeSet<(String, String)> = ROUTES
            .iter()
            .map(|&(m, p)| (m.to_string(), p.to_string()))
            .collect();
        assert_eq!(served.len(), ROUTES.len(), "a route is listed twice");
        let documented = documented();
        assert_eq!(
            served.difference(&documented).collect::<Vec<_>>(),
            Vec::<&(String, String)>::new(),
            "served, not documented"
        );
        assert_eq!(
            documented.difference(&served).collect::<Vec<_>>(),
            Vec::<&(String, String)>::new(),
            "documented, not served"
        );
    }

    /// Regression: the document said `idempotency_key` had at most 255
    /// characters; the server took 1,024. Every bound the document states
    /// for a task (its `NewTask` schema: lengths, minimum and maximum) and
    /// for a batch (`maxItems`) is the server's: a request at each bound is
    /// taken, one just past it is refused with 400.
    #[tokio::test]
    async fn every_bound_the_document_states_is_the_one_the_server_enforces() {
        let (router, dir) = router("bounds").await;
        let doc: Value = serde_json::from_str(OPENAPI).unwrap();
        let task = &doc["components"]["schemas"]["NewTask"]["properties"];
        let mut checked = 0;
        for (name, schema) in task.as_object().unwrap() {
            let mut cases: Vec<(Value, bool)> = Vec::new();
            let ascii = |n: u64| Value::from("k".repeat(n as usize));
            if let Some(max) = schema["maxLength"].as_u64() {
                cases.push((ascii(max), true));
                cases.push((ascii(max + 1), false));
            }
            if let Some(min) = schema["minLength"].as_u64() {
                cases.push((ascii(min), true));
                if min > 0 {
                    cases.push((ascii(min - 1), false));
                }
            }
            if let Some(max) = schema["maximum"].as_i64() {
                cases.push((Value::from(max), true));
                cases.push((Value::from(max + 1), false));
            }
            if let Some(min) = schema["minimum"].as_i64() {
                cases.push((Value::from(min), true));
                cases.push((Value::from(min - 1), false));
            }
            for (value, taken) in cases {
                let mut body = serde_json::json!({"delay": "1h", "payload": 1});
                body[name.as_str()] = value.clone();
                if name == "max_wait" {
                    body["replace_pending"] = true.into();
                    body["idempotency_key"] = "debounce".into();
                }
                let (status, answer) = send(&router, "/v1/tasks", &body).await;
                assert_eq!(
                    status.is_success(),
                    taken,
                    "{name} = {value}: the document says {}, the server answered {status} {answer}",
                    if taken { "taken" } else { "refused" }
                );
                if !taken {
                    assert_eq!(
                        status,
                        StatusCode::BAD_REQUEST,
                        "{name} = {value}: {answer}"
                    );
                }
                checked += 1;
            }
        }
        // idempotency_key, partition_key (each 4), priority (4), max_attempts (2).
        assert!(checked >= 14, "only {checked} bounds found in the document");

        let batch = &doc["paths"]["/v1/tasks/batch"]["post"]["requestBody"]["content"]
            ["application/json"]["schema"]["properties"]["tasks"];
        let max = batch["maxItems"].as_u64().expect("the batch's maxItems") as usize;
        for (n, taken) in [(max, true), (max + 1, false)] {
            let tasks = vec![serde_json::json!({"delay": "1h"}); n];
            let (status, answer) = send(
                &router,
                "/v1/tasks/batch",
                &serde_json::json!({ "tasks": tasks }),
            )
            .await;
            assert_eq!(
                status.is_success(),
                taken,
                "a batch of {n}: {status} {answer}"
            );
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A router on a fresh SQLite file, with one admin token ([`TOKEN`]).
    async fn router(name: &str) -> (Router, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("ttw-routes-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ttw.toml");
        std::fs::write(
            &path,
            format!(
                "database = \"{}\"\nmax_body_bytes = 4194304\n[[queues]]\nname = \"default\"\n[[tokens]]\nname = \"t\"\nsecret_env = \"T\"\nscopes = [\"admin\"]\n",
                dir.join("tasks.db").display()
            ),
        )
        .unwrap();
        let settings = super::super::config::load(&path, |_| Some(TOKEN.into()))
            .expect("the configuration loads");
        let store = crate::open(&settings.database, None, true).await.unwrap();
        let api = Arc::new(Api {
            grouper: Grouper::start(store.clone()),
            store,
            settings,
        });
        (routes(api), dir)
    }

    const TOKEN: &str = "a-token-long-enough-0123456789";

    /// `POST path` with `body` and the token: the status and the answer.
    async fn send(router: &Router, path: &str, body: &Value) -> (StatusCode, Value) {
        let answer = router
            .clone()
            .oneshot(
                Request::builder()
                    .method("POST")
                    .uri(path)
                    .header("authorization", format!("Bearer {TOKEN}"))
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = answer.status();
        let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Every route of the table is answered by its handler (without a
    /// token: 401, or the open routes' 200), never by the fallback's
    /// `no such route` or a 405; and a route outside it is.
    #[tokio::test]
    async fn the_router_serves_every_route_of_the_table() {
        let (router, dir) = router("routes").await;
        for &(method, path) in ROUTES {
            let uri = path
                .replace("{id}", "1")
                .replace("{key}", "k")
                .replace("{name}", "n");
            let answer = router
                .clone()
                .oneshot(
                    Request::builder()
                        .method(method)
                        .uri(&uri)
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let status = answer.status();
            let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20)
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&bytes);
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
            assert!(!text.contains("no such route"), "{method} {uri}: {text}");
            let open = path == "/healthz" || path == "/readyz" || path == "/v1/openapi.json";
            let expected = if open {
                StatusCode::OK
            } else {
                StatusCode::UNAUTHORIZED
            };
            assert_eq!(status, expected, "{method} {uri}: {text}");
        }
        let answer = router
            .oneshot(
                Request::builder()
                    .uri("/v1/nothing")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::NOT_FOUND);
        std::fs::remove_dir_all(&dir).ok();
    }
}
