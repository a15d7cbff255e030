//! `/v1/queues`: the settings every node obeys, read with a `read` token
//! and changed with an `admin` one. Extract, call the service, answer.

use axum::extract::{Path, State};
use axum::Json;

use super::super::extract::{Admin, Auth, Body, Read};
use super::super::refusal::{Answer, ErrorBody};
use super::super::service::queues;
use super::super::service::Shared;
use super::super::wire::{NewLimits, NewRetry, QueueList, QueueView};

/// Every configured queue the token may see, with its settings.
#[utoipa::path(get, path = "/v1/queues", tag = "queues",
    responses((status = 200, description = "The queues", body = QueueList)))]
pub(crate) async fn list(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
) -> Answer<Json<QueueList>> {
    let queues = queues::list(&api, &token).await?;
    Ok(Json(QueueList { queues }))
}

/// One queue's settings.
#[utoipa::path(get, path = "/v1/queues/{name}", tag = "queues",
    params(("name" = String, Path, description = "A queue of the configuration")),
    responses(
        (status = 200, description = "Its settings", body = QueueView),
        (status = 404, description = "`not_found`: no such queue in the configuration", body = ErrorBody),
    ))]
pub(crate) async fn get(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
    Path(name): Path<String>,
) -> Answer<Json<QueueView>> {
    Ok(Json(queues::get(&api, &token, &name).await?))
}

/// Pause the queue: no node starts its tasks until the resume.
#[utoipa::path(post, path = "/v1/queues/{name}/pause", tag = "queues",
    params(("name" = String, Path, description = "A queue of the configuration")),
    responses(
        (status = 200, description = "Its settings", body = QueueView),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn pause(
    State(api): State<Shared>,
    _: Auth<Admin>,
    Path(name): Path<String>,
) -> Answer<Json<QueueView>> {
    Ok(Json(queues::set_paused(&api, &name, true).await?))
}

/// Resume the queue.
#[utoipa::path(post, path = "/v1/queues/{name}/resume", tag = "queues",
    params(("name" = String, Path, description = "A queue of the configuration")),
    responses(
        (status = 200, description = "Its settings", body = QueueView),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn resume(
    State(api): State<Shared>,
    _: Auth<Admin>,
    Path(name): Path<String>,
) -> Answer<Json<QueueView>> {
    Ok(Json(queues::set_paused(&api, &name, false).await?))
}

/// Set the queue's limits across every node (an absent one is cleared).
#[utoipa::path(put, path = "/v1/queues/{name}/limits", tag = "queues",
    params(("name" = String, Path, description = "A queue of the configuration")),
    request_body = NewLimits,
    responses(
        (status = 200, description = "Its settings", body = QueueView),
        (status = 400, description = "`invalid_limit`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn put_limits(
    State(api): State<Shared>,
    _: Auth<Admin>,
    Path(name): Path<String>,
    Body(limits): Body<NewLimits>,
) -> Answer<Json<QueueView>> {
    Ok(Json(queues::put_limits(&api, &name, limits).await?))
}

/// Set the queue's retry policy over each node's own.
#[utoipa::path(put, path = "/v1/queues/{name}/retry", tag = "queues",
    params(("name" = String, Path, description = "A queue of the configuration")),
    request_body = NewRetry,
    responses(
        (status = 200, description = "Its settings", body = QueueView),
        (status = 400, description = "`invalid_limit`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn put_retry(
    State(api): State<Shared>,
    _: Auth<Admin>,
    Path(name): Path<String>,
    Body(retry): Body<NewRetry>,
) -> Answer<Json<QueueView>> {
    Ok(Json(queues::put_retry(&api, &name, retry).await?))
}
