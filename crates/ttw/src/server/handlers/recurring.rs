//! `/v1/recurring`: extract, call the service, answer.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::super::extract::{Auth, Body, Read, Schedule};
use super::super::refusal::{Answer, ErrorBody};
use super::super::service::recurring::{self, Change};
use super::super::service::Shared;
use super::super::wire::{
    NewRecurring, RecurringChanged, RecurringList, RecurringOutcome, RecurringPut,
};

/// Every recurring schedule of the queues the token may use.
#[utoipa::path(get, path = "/v1/recurring", tag = "recurring",
    responses((status = 200, description = "The schedules", body = RecurringList)))]
pub(crate) async fn list(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
) -> Answer<Json<RecurringList>> {
    let recurring = recurring::list(&api, &token).await?;
    Ok(Json(RecurringList { recurring }))
}

/// Create the schedule `name`, or change it to this definition.
#[utoipa::path(put, path = "/v1/recurring/{name}", tag = "recurring",
    params(("name" = String, Path, description = "The schedule's name")),
    request_body = NewRecurring,
    responses(
        (status = 201, description = "`created`", body = RecurringPut),
        (status = 200, description = "`updated`, or `unchanged` if it had this definition", body = RecurringPut),
        (status = 400, description = "`invalid_schedule`, `invalid_payload`, `unknown_queue`", body = ErrorBody),
        (status = 404, description = "`not_found`: the name is another token's, of a queue this one may not use", body = ErrorBody),
    ))]
pub(crate) async fn put(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(name): Path<String>,
    Body(definition): Body<NewRecurring>,
) -> Answer<(StatusCode, Json<RecurringPut>)> {
    let outcome = recurring::put(&api, &token, &name, definition).await?;
    let status = match outcome {
        RecurringOutcome::Created => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    Ok((status, Json(RecurringPut { name, outcome })))
}

/// Pause the schedule `name`: `paused` is false if it was paused already.
#[utoipa::path(post, path = "/v1/recurring/{name}/pause", tag = "recurring",
    params(("name" = String, Path, description = "The schedule's name")),
    responses(
        (status = 200, description = "`paused`", body = RecurringChanged),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn pause(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(name): Path<String>,
) -> Answer<Json<RecurringChanged>> {
    let paused = recurring::change(&api, &token, &name, Change::Pause).await?;
    Ok(Json(RecurringChanged::new(name).paused(paused)))
}

/// Resume the schedule `name`: `resumed` is false if it was running.
#[utoipa::path(post, path = "/v1/recurring/{name}/resume", tag = "recurring",
    params(("name" = String, Path, description = "The schedule's name")),
    responses(
        (status = 200, description = "`resumed`", body = RecurringChanged),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn resume(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(name): Path<String>,
) -> Answer<Json<RecurringChanged>> {
    let resumed = recurring::change(&api, &token, &name, Change::Resume).await?;
    Ok(Json(RecurringChanged::new(name).resumed(resumed)))
}

/// Delete the schedule `name` (tasks it already made stay).
#[utoipa::path(delete, path = "/v1/recurring/{name}", tag = "recurring",
    params(("name" = String, Path, description = "The schedule's name")),
    responses(
        (status = 200, description = "`deleted`", body = RecurringChanged),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn delete(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(name): Path<String>,
) -> Answer<Json<RecurringChanged>> {
    let deleted = recurring::change(&api, &token, &name, Change::Delete).await?;
    Ok(Json(RecurringChanged::new(name).deleted(deleted)))
}
