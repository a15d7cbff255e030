//! `/v1/tasks`, `/v1/keys` and `/v1/counts`: extract, call the service,
//! answer. Each refusal a route can give is named in its `responses`
//! (the ones every route shares are added by `routes::Common`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use ttw_durable::{Scheduled, TaskId};

use super::super::extract::{Admin, Auth, Body, Params, Read, Schedule, TaskHeaders};
use super::super::refusal::{Answer, ErrorBody};
use super::super::selection::{
    CancelRequest, CancelledManyView, ListQuery, RedriveRequest, RedrivenOneView, RedrivenView,
};
use super::super::service::tasks::{self, Named};
use super::super::service::{bulk, counts, Shared};
use super::super::wire::{
    AttemptView, AttemptsView, BatchView, CancelledView, NewBatch, NewTask, NewTime, PageView,
    QueueCountsView, RescheduledView, ScheduledView, TaskView,
};

/// 201 for a new task, 200 for one of its key.
fn status_of(s: &Scheduled) -> StatusCode {
    match s {
        Scheduled::Created(_) => StatusCode::CREATED,
        _ => StatusCode::OK,
    }
}

// Single requests are written in groups (the group commit of
// `server/group.rs`): what arrives while the previous insert runs goes in
// the next transaction, and each request is answered once its group has
// committed. A debounce (`replace_pending`) is written alone.
/// Schedule one task.
#[utoipa::path(post, path = "/v1/tasks", tag = "tasks",
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "The task's idempotency key (as `idempotency_key`)"),
        ("traceparent" = Option<String>, Header, description = "The W3C trace context, kept with the task and sent with each delivery (as `traceparent`)"),
        ("tracestate" = Option<String>, Header, description = "The W3C `tracestate` that goes with it"),
    ),
    request_body = NewTask,
    responses(
        (status = 201, description = "A new task", body = ScheduledView),
        (status = 200, description = "`existing`: the pending task of the key; `replaced`: it, replaced", body = ScheduledView),
        (status = 400, description = "`invalid_time`, `invalid_delay`, `invalid_key`, `invalid_payload`, `payload_too_large`, `unknown_queue`, `invalid_destination`, `destination_not_allowed`, `invalid_trace_context`", body = ErrorBody),
    ))]
pub(crate) async fn schedule(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    TaskHeaders(headers): TaskHeaders,
    Body(task): Body<NewTask>,
) -> Answer<(StatusCode, Json<ScheduledView>)> {
    let scheduled = tasks::schedule(&api, &token, task, headers).await?;
    Ok((status_of(&scheduled), Json(scheduled.into())))
}

/// Schedule up to 1,000 tasks in one transaction: every one or none.
/// The `traceparent` and `tracestate` headers apply to each task that has
/// no `traceparent` field of its own.
#[utoipa::path(post, path = "/v1/tasks/batch", tag = "tasks",
    params(
        ("traceparent" = Option<String>, Header, description = "The W3C trace context of every task of the batch without a `traceparent` field of its own (the field wins)"),
        ("tracestate" = Option<String>, Header, description = "The W3C `tracestate` that goes with it"),
        ("Idempotency-Key" = Option<String>, Header, description = "Refused (`invalid_key`): one key cannot name many tasks; each task has its own `idempotency_key`"),
    ),
    request_body = NewBatch,
    responses(
        (status = 200, description = "Each task's id and outcome, in the request's order", body = BatchView),
        (status = 400, description = "`batch_too_large`, `invalid_time`, `invalid_delay`, `invalid_key`, `invalid_payload`, `payload_too_large`, `unknown_queue`, `invalid_destination`, `destination_not_allowed`, `invalid_trace_context` (the message names the task: `tasks[3]: ...`)", body = ErrorBody),
    ))]
pub(crate) async fn schedule_batch(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    TaskHeaders(headers): TaskHeaders,
    Body(batch): Body<NewBatch>,
) -> Answer<Json<BatchView>> {
    let scheduled = tasks::schedule_batch(&api, &token, batch, headers).await?;
    let tasks = scheduled.into_iter().map(ScheduledView::from).collect();
    Ok(Json(BatchView { tasks }))
}

/// A page of tasks in id order (or newest first), filtered.
#[utoipa::path(get, path = "/v1/tasks", tag = "tasks",
    params(ListQuery),
    responses(
        (status = 200, description = "A page; `next_cursor` is absent on the last", body = PageView),
        (status = 400, description = "`invalid_state`, `invalid_time`, `invalid_cursor`, `invalid_limit`", body = ErrorBody),
    ))]
pub(crate) async fn list(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
    Params(query): Params<ListQuery>,
) -> Answer<Json<PageView>> {
    Ok(Json(bulk::list(&api, &token, query).await?))
}

/// Run finished tasks again (dead by default), their attempts reset,
/// chosen by the filters of `GET /v1/tasks`; `dry_run` only counts them.
#[utoipa::path(post, path = "/v1/tasks/redrive", tag = "tasks",
    request_body = RedriveRequest,
    responses(
        (status = 200, description = "How many were redriven (would be, in a dry run)", body = RedrivenView),
        (status = 400, description = "`invalid_state`, `invalid_delay`, `invalid_time`, `invalid_limit`", body = ErrorBody),
    ))]
pub(crate) async fn redrive(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Admin>,
    Body(request): Body<RedriveRequest>,
) -> Answer<Json<RedrivenView>> {
    let dry_run = request.dry_run;
    let redriven = bulk::redrive(&api, &token, request).await?;
    Ok(Json(RedrivenView { redriven, dry_run }))
}

/// Cancel the scheduled tasks the filters of `GET /v1/tasks` choose;
/// `dry_run` only counts them.
#[utoipa::path(post, path = "/v1/tasks/cancel", tag = "tasks",
    request_body = CancelRequest,
    responses(
        (status = 200, description = "How many were cancelled (would be, in a dry run)", body = CancelledManyView),
        (status = 400, description = "`invalid_state`, `invalid_time`, `invalid_limit`", body = ErrorBody),
    ))]
pub(crate) async fn cancel_many(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Admin>,
    Body(request): Body<CancelRequest>,
) -> Answer<Json<CancelledManyView>> {
    let dry_run = request.dry_run;
    let cancelled = bulk::cancel(&api, &token, request).await?;
    Ok(Json(CancelledManyView { cancelled, dry_run }))
}

/// Run a dead task again, due at once with its attempts reset.
#[utoipa::path(post, path = "/v1/tasks/{id}/redrive", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 200, description = "Redriven", body = RedrivenOneView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`not_dead`: the message says its state", body = ErrorBody),
    ))]
pub(crate) async fn redrive_task(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Admin>,
    Path(id): Path<String>,
) -> Answer<Json<RedrivenOneView>> {
    let id = tasks::redrive_one(&api, &token, id).await?;
    Ok(Json(RedrivenOneView {
        id: id.get(),
        redriven: true,
    }))
}

/// One task, by id.
#[utoipa::path(get, path = "/v1/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such task, or one of a queue the token may not use", body = ErrorBody),
    ))]
pub(crate) async fn get_task(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
    Path(id): Path<String>,
) -> Answer<Json<TaskView>> {
    let info = tasks::find(&api, &token, Named::Id(id)).await?;
    Ok(Json(TaskView::from(&info)))
}

/// A task's attempts, oldest first: each that failed or was cut short by
/// a crash, the one running now, and the one that succeeded.
#[utoipa::path(get, path = "/v1/tasks/{id}/attempts", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 200, description = "Its attempts (the latest 1,000 at most)", body = AttemptsView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such task, or one of a queue the token may not use", body = ErrorBody),
    ))]
pub(crate) async fn get_attempts(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
    Path(id): Path<String>,
) -> Answer<Json<AttemptsView>> {
    let info = tasks::find(&api, &token, Named::Id(id)).await?;
    let attempts = api.store.attempts(info.id).await?;
    Ok(Json(AttemptsView {
        id: info.id.get(),
        attempts: attempts.iter().map(AttemptView::from).collect(),
    }))
}

/// The pending task of an idempotency key.
#[utoipa::path(get, path = "/v1/keys/{key}", tag = "tasks",
    params(("key" = String, Path, description = "The idempotency key")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ))]
pub(crate) async fn get_key(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
    Path(key): Path<String>,
) -> Answer<Json<TaskView>> {
    let info = tasks::find(&api, &token, Named::Key(key)).await?;
    Ok(Json(TaskView::from(&info)))
}

fn cancelled(id: TaskId) -> Json<CancelledView> {
    Json(CancelledView {
        id: id.get(),
        cancelled: true,
    })
}

/// Cancel a pending task, by id.
#[utoipa::path(delete, path = "/v1/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 200, description = "Cancelled", body = CancelledView),
        (status = 400, description = "`invalid_id`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`not_scheduled`: it ran or is running (the message says its state)", body = ErrorBody),
    ))]
pub(crate) async fn cancel_task(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(id): Path<String>,
) -> Answer<Json<CancelledView>> {
    Ok(cancelled(tasks::cancel(&api, &token, Named::Id(id)).await?))
}

/// Cancel the pending task of an idempotency key.
#[utoipa::path(delete, path = "/v1/keys/{key}", tag = "tasks",
    params(("key" = String, Path, description = "The idempotency key")),
    responses(
        (status = 200, description = "Cancelled", body = CancelledView),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`not_scheduled`", body = ErrorBody),
    ))]
pub(crate) async fn cancel_key(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(key): Path<String>,
) -> Answer<Json<CancelledView>> {
    Ok(cancelled(
        tasks::cancel(&api, &token, Named::Key(key)).await?,
    ))
}

fn rescheduled(id: TaskId) -> Json<RescheduledView> {
    Json(RescheduledView {
        id: id.get(),
        rescheduled: true,
    })
}

/// Move a pending task to `run_at`, or `delay` from now.
#[utoipa::path(post, path = "/v1/tasks/{id}/reschedule", tag = "tasks",
    params(("id" = String, Path, description = "The task's id")),
    request_body = NewTime,
    responses(
        (status = 200, description = "Moved", body = RescheduledView),
        (status = 400, description = "`invalid_id`, `invalid_time`, `invalid_delay`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`not_scheduled`", body = ErrorBody),
    ))]
pub(crate) async fn reschedule_task(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(id): Path<String>,
    Body(to): Body<NewTime>,
) -> Answer<Json<RescheduledView>> {
    let id = tasks::reschedule(&api, &token, Named::Id(id), to).await?;
    Ok(rescheduled(id))
}

/// Move the pending task of an idempotency key.
#[utoipa::path(post, path = "/v1/keys/{key}/reschedule", tag = "tasks",
    params(("key" = String, Path, description = "The idempotency key")),
    request_body = NewTime,
    responses(
        (status = 200, description = "Moved", body = RescheduledView),
        (status = 400, description = "`invalid_time`, `invalid_delay`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`not_scheduled`", body = ErrorBody),
    ))]
pub(crate) async fn reschedule_key(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Schedule>,
    Path(key): Path<String>,
    Body(to): Body<NewTime>,
) -> Answer<Json<RescheduledView>> {
    let id = tasks::reschedule(&api, &token, Named::Key(key), to).await?;
    Ok(rescheduled(id))
}

/// Tasks per queue and state, of the queues the token may use.
#[utoipa::path(get, path = "/v1/counts", tag = "tasks",
    responses((status = 200, description = "The counts", body = QueueCountsView)))]
pub(crate) async fn counts(
    State(api): State<Shared>,
    Auth(token, ..): Auth<Read>,
) -> Answer<Json<QueueCountsView>> {
    Ok(Json(counts::counts(&api, &token).await?))
}
