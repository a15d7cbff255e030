//! `/healthz` and `/readyz`: open, no token. (The third open route, the
//! document itself, is served by `routes.rs`, which makes it.)

use std::time::Duration;

use axum::extract::State;
use axum::Json;

use super::super::refusal::{Answer, Code, ErrorBody};
use super::super::service::Shared;
use super::super::wire::Health;

/// The process answers.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "`ok`", body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// The database answers, within a second.
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "`ready`", body = Health),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    ))]
pub(crate) async fn readyz(State(api): State<Shared>) -> Answer<Json<Health>> {
    match tokio::time::timeout(Duration::from_secs(1), api.store.counts()).await {
        Ok(Ok(_)) => Ok(Json(Health { status: "ready" })),
        Ok(Err(err)) => Err(Code::Unavailable.refuse(err.to_string())),
        Err(_) => Err(Code::Unavailable.refuse("the database did not answer within 1 s")),
    }
}
