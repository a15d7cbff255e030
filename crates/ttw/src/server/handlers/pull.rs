//! A pull queue's routes, to a `consume` token: the claim by long poll
//! (`/v1/queues/{name}/claim`) and the settles of a claim
//! (`/v1/tasks/{id}/ack`, `nack`, `extend`). Extract, call the service,
//! answer.

use axum::extract::{Path, State};
use axum::Json;

use super::super::extract::{Auth, Body, Consume, Read};
use super::super::refusal::{Answer, ErrorBody};
use super::super::service::pull;
use super::super::service::Shared;
use super::super::wire::{
    AckRequest, ClaimRequest, ClaimedList, ExtendRequest, NackRequest, SettledView, WorkerList,
};

/// Claim due tasks of a pull queue, each leased to the worker: answered at
/// once with what is due, or held up to `wait` and answered the moment a
/// task falls due (empty at the end). A task handed to a request whose
/// client hung up is held until its lease ends, then due again.
#[utoipa::path(post, path = "/v1/queues/{name}/claim", tag = "pull",
    params(("name" = String, Path, description = "A pull queue of the configuration")),
    request_body = ClaimRequest,
    responses(
        (status = 200, description = "The tasks claimed (none if none fell due in `wait`)", body = ClaimedList),
        (status = 400, description = "`not_a_pull_queue`, `invalid_wait`, `invalid_lease`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such queue in the configuration", body = ErrorBody),
    ))]
pub(crate) async fn claim(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Consume>,
    Path(name): Path<String>,
    Body(request): Body<ClaimRequest>,
) -> Answer<Json<ClaimedList>> {
    Ok(Json(pull::claim(&api, &token, &name, request).await?))
}

/// The workers that claimed from a pull queue in the last day, with the
/// tasks each holds now (every instance's claims are recorded).
#[utoipa::path(get, path = "/v1/queues/{name}/workers", tag = "pull",
    params(("name" = String, Path, description = "A pull queue of the configuration")),
    responses(
        (status = 200, description = "Its workers, by name", body = WorkerList),
        (status = 400, description = "`not_a_pull_queue`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such queue in the configuration", body = ErrorBody),
    ))]
pub(crate) async fn workers(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
    Path(name): Path<String>,
) -> Answer<Json<WorkerList>> {
    Ok(Json(pull::workers(&api, &token, &name).await?))
}

/// Ack: the attempt succeeded and the task is done.
#[utoipa::path(post, path = "/v1/tasks/{id}/ack", tag = "pull",
    params(("id" = String, Path, description = "The task's id")),
    request_body = AckRequest,
    responses(
        (status = 200, description = "Done", body = SettledView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 409, description = "`stale_claim`: the claim no longer holds the task (its lease ran out, or it was settled); nothing changed", body = ErrorBody),
    ))]
pub(crate) async fn ack(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Consume>,
    Path(id): Path<String>,
    Body(request): Body<AckRequest>,
) -> Answer<Json<SettledView>> {
    Ok(Json(pull::ack(&api, &token, &id, request).await?))
}

/// Nack: the attempt failed. Retried after the queue's backoff (or
/// `retry_in`), dead when out of attempts or when `dead`.
#[utoipa::path(post, path = "/v1/tasks/{id}/nack", tag = "pull",
    params(("id" = String, Path, description = "The task's id")),
    request_body = NackRequest,
    responses(
        (status = 200, description = "Scheduled again, or dead", body = SettledView),
        (status = 400, description = "`invalid_id`, `invalid_delay`", body = ErrorBody),
        (status = 409, description = "`stale_claim`", body = ErrorBody),
    ))]
pub(crate) async fn nack(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Consume>,
    Path(id): Path<String>,
    Body(request): Body<NackRequest>,
) -> Answer<Json<SettledView>> {
    Ok(Json(pull::nack(&api, &token, &id, request).await?))
}

/// Extend the lease (a heartbeat while the work runs).
#[utoipa::path(post, path = "/v1/tasks/{id}/extend", tag = "pull",
    params(("id" = String, Path, description = "The task's id")),
    request_body = ExtendRequest,
    responses(
        (status = 200, description = "The lease's new end", body = SettledView),
        (status = 400, description = "`invalid_id`, `invalid_lease`", body = ErrorBody),
        (status = 409, description = "`stale_claim`", body = ErrorBody),
    ))]
pub(crate) async fn extend(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Consume>,
    Path(id): Path<String>,
    Body(request): Body<ExtendRequest>,
) -> Answer<Json<SettledView>> {
    Ok(Json(pull::extend(&api, &token, &id, request).await?))
}
