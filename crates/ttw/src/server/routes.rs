//! The routes of `ttw server`: one table, from which both the router and
//! the OpenAPI 3.1 document are built (`utoipa-axum`), so a route cannot
//! be served undocumented or documented unserved, and a type or a bound
//! is described where it is declared ([`wire`](super::wire)).
//!
//! Why `utoipa` (with `utoipa-axum`) and not `aide`: both generate 3.1 for
//! axum 0.8; utoipa derives the schemas from the `serde` types themselves
//! (bounds and descriptions in attributes and doc comments, no second
//! derive such as `schemars`), builds the router and the document from
//! one `routes!` table, and leaves handlers plain axum functions.

use std::sync::LazyLock;

use axum::response::IntoResponse;
use axum::Router;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Content, OpenApi as Document, Ref, RefOr, Response};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::handlers::{cluster, health, pull, queues, recurring, tasks};
use super::refusal::{Code, ErrorBody, Refusal};
use super::service::Shared;
use super::wire::CallbackOutcome;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "ttw server",
        version = "1",
        description = "Durable delayed tasks over HTTP: schedule a task for a time, and a node delivers it to its queue's webhook then, at least once and never early. Every answer that is not a success is `{\"error\": {\"code\", \"message\"}}` with a stable `code` (the `Code` schema) and the status that code always has. Every route but `/healthz`, `/readyz` and this document takes `Authorization: Bearer <token>`, and a token's scopes (read, schedule, consume, admin) and queues decide what it may do."
    ),
    security(("bearer" = [])),
    components(schemas(Code, ErrorBody, CallbackOutcome)),
    tags(
        (name = "tasks", description = "Schedule, look up, cancel, reschedule, list and redrive tasks"),
        (name = "recurring", description = "Schedules that make a task at each occurrence (cron or interval)"),
        (name = "queues", description = "Settings every node obeys: pause, concurrency, rate, retry"),
        (name = "pull", description = "Workers that pull: claim a pull queue's due tasks by long poll under a lease, then ack, nack or extend each claim"),
        (name = "cluster", description = "The nodes, this node's throughput and lateness, the caller's token"),
        (name = "health", description = "Open routes: liveness, readiness, this document"),
    )
)]
struct Doc;

/// Every route once: its handler and its part of the document.
fn table() -> OpenApiRouter<Shared> {
    OpenApiRouter::with_openapi(Doc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(openapi))
        .routes(routes!(tasks::schedule, tasks::list))
        .routes(routes!(tasks::schedule_batch))
        .routes(routes!(tasks::redrive))
        .routes(routes!(tasks::cancel_many))
        .routes(routes!(tasks::redrive_task))
        .routes(routes!(tasks::get_task, tasks::cancel_task))
        .routes(routes!(tasks::get_attempts))
        .routes(routes!(tasks::reschedule_task))
        .routes(routes!(tasks::get_key, tasks::cancel_key))
        .routes(routes!(tasks::reschedule_key))
        .routes(routes!(tasks::counts))
        .routes(routes!(recurring::list))
        .routes(routes!(recurring::put, recurring::delete))
        .routes(routes!(recurring::pause))
        .routes(routes!(recurring::resume))
        .routes(routes!(queues::list))
        .routes(routes!(queues::get))
        .routes(routes!(queues::pause))
        .routes(routes!(queues::resume))
        .routes(routes!(queues::put_limits))
        .routes(routes!(queues::put_retry))
        .routes(routes!(pull::claim))
        .routes(routes!(pull::ack))
        .routes(routes!(pull::nack))
        .routes(routes!(pull::extend))
        .routes(routes!(pull::workers))
        .routes(routes!(cluster::nodes))
        .routes(routes!(cluster::stats))
        .routes(routes!(cluster::whoami))
}

/// The router of the API, from [`table`].
pub(crate) fn routes(api: Shared) -> Router {
    let (router, _) = table().split_for_parts();
    router
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        .with_state(api)
}

/// The OpenAPI 3.1 document of the API, from [`table`], with the
/// refusals every route of a kind shares ([`Common`], applied once the
/// table's routes are in).
pub(crate) fn document() -> Document {
    let mut doc = table().split_for_parts().1;
    Common.modify(&mut doc);
    doc
}

static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    document()
        .to_pretty_json()
        .expect("the document serializes")
});

/// The document as `GET /v1/openapi.json` serves it (made once).
pub(crate) fn document_json() -> &'static str {
    &DOCUMENT
}

/// This document (OpenAPI 3.1), generated from the server's own routes
/// and types.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "The document", content_type = "application/json")))]
async fn openapi() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
}

async fn not_found() -> impl IntoResponse {
    Code::NotFound.refuse("no such route")
}

async fn not_allowed() -> Refusal {
    Code::MethodNotAllowed.refuse("the route does not take this method")
}

/// The refusals every route of a kind can give, added to each operation
/// beside the ones its handler names: 401 and 403 on every route that
/// takes a token, 503 on every one that reads the database, and for a
/// route with a body 413 `body_too_large` and 400 `malformed_json` and
/// `invalid_request` (also for a route with a query). The bearer scheme.
struct Common;

impl Modify for Common {
    fn modify(&self, doc: &mut Document) {
        doc.components.get_or_insert_default().add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        for item in doc.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                let open = op.tags.iter().flatten().any(|t| t == "health");
                let mut codes = Vec::new();
                if op.request_body.is_some() {
                    codes.extend([
                        Code::MalformedJson,
                        Code::InvalidRequest,
                        Code::BodyTooLarge,
                    ]);
                }
                if op.parameters.iter().flatten().any(|p| match p {
                    RefOr::T(p) => {
                        matches!(p.parameter_in, utoipa::openapi::path::ParameterIn::Query)
                    }
                    RefOr::Ref(_) => false,
                }) {
                    codes.push(Code::InvalidRequest);
                }
                if !open {
                    codes.extend([Code::Unauthorized, Code::Forbidden, Code::Unavailable]);
                }
                for code in codes {
                    refusal(&mut op.responses.responses, code);
                }
            }
        }
    }
}

/// Names `code` under its status in `responses`, adding the response if
/// the operation has none for that status.
fn refusal(responses: &mut std::collections::BTreeMap<String, RefOr<Response>>, code: Code) {
    let status = code.status().as_u16().to_string();
    let named = format!("`{}`", code.as_str());
    let entry = responses.entry(status).or_insert_with(|| {
        let mut response = Response::new(String::new());
        response.content.insert(
            "application/json".into(),
            Content::new(Some(Ref::from_schema_name("ErrorBody"))).into(),
        );
        RefOr::T(response)
    });
    if let RefOr::T(response) = entry {
        if !response.description.contains(&named) {
            response.description = if response.description.is_empty() {
                named
            } else {
                format!("{named}, {}", response.description)
            };
        }
    }
}

#[cfg(test)]
mod tests;
