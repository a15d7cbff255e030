//! The API's reads and changes across many tasks, and recurring
//! schedules: `GET /v1/tasks` (a filtered page, with a cursor for the
//! next), `POST /v1/tasks/redrive` (finished tasks run again), and
//! `/v1/recurring` (list; create or update, pause, resume, delete by name).
//!
//! The codes added to those of [`api`](super::api): `invalid_state`,
//! `invalid_limit`, `invalid_cursor`, `invalid_schedule` (a cron
//! expression that does not parse, an unknown time zone, an interval under
//! a second, a bad name: the message names the field), all 400.

use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use ttw_durable::{
    CatchUp, Recurring, RecurringInfo, Redrive, Registered, TaskId, TaskQuery, TaskState, MAX_PAGE,
};

use super::api::{
    allow_queue, authorize, body, decode_payload, rfc3339, task_json, ApiError, ApiResult, Shared,
};
use super::config::Scope;

/// A state by its name, as the API writes it.
fn parse_state(text: &str) -> ApiResult<TaskState> {
    Ok(match text {
        "scheduled" => TaskState::Scheduled,
        "running" => TaskState::Running,
        "done" => TaskState::Done,
        "dead" => TaskState::Dead,
        "cancelled" => TaskState::Cancelled,
        _ => {
            return Err(ApiError::bad(
                "invalid_state",
                format!("{text:?} is not a state (scheduled, running, done, dead, cancelled)"),
            ))
        }
    })
}

/// An RFC 3339 time of a query.
fn parse_time(field: &str, text: &str) -> ApiResult<SystemTime> {
    ttw_durable::parse_time(text)
        .map_err(|err| ApiError::bad("invalid_time", format!("{field}: {err}")))
}

/// The query of `GET /v1/tasks`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    state: Option<String>,
    queue: Option<String>,
    /// Due at or after (RFC 3339).
    due_from: Option<String>,
    /// Due before (RFC 3339).
    due_before: Option<String>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
    /// At most this many (1 to 1000, default 100).
    limit: Option<u32>,
}

/// `GET /v1/tasks`: tasks in id order, filtered; `next_cursor` names the
/// page after (absent on the last page). A token limited to some queues
/// must name one of them.
pub(crate) async fn list(
    State(api): State<Shared>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Value>> {
    let token = authorize(&api, &headers, Scope::Read)?;
    let Query(q) = query.map_err(|err| ApiError::bad("invalid_request", err.body_text()))?;
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad(
            "invalid_limit",
            format!("limit is 1 to {MAX_PAGE}, not {limit}"),
        ));
    }
    let mut query = TaskQuery::new().limit(limit);
    match &q.queue {
        Some(queue) => {
            allow_queue(token, queue)?;
            query = query.queue(queue.clone());
        }
        None if token.queues.is_some() && !token.scopes.contains(&Scope::Admin) => {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("token {:?} may list only its queues: name one", token.name),
            ))
        }
        None => {}
    }
    if let Some(state) = &q.state {
        query = query.state(parse_state(state)?);
    }
    if let Some(from) = &q.due_from {
        query = query.due_from(parse_time("due_from", from)?);
    }
    if let Some(before) = &q.due_before {
        query = query.due_before(parse_time("due_before", before)?);
    }
    if let Some(cursor) = &q.cursor {
        let after = cursor
            .parse::<i64>()
            .ok()
            .filter(|&id| id > 0)
            .ok_or_else(|| {
                ApiError::bad("invalid_cursor", format!("{cursor:?} is not a cursor"))
            })?;
        query = query.after(TaskId::new(after));
    }
    let tasks = api.store.list(&query).await?;
    let next = (tasks.len() == limit as usize)
        .then(|| tasks.last().map(|t| t.id.get().to_string()))
        .flatten();
    Ok(Json(json!({
        "tasks": tasks.iter().map(task_json).collect::<Vec<_>>(),
        "next_cursor": next,
    })))
}

/// The body of `POST /v1/tasks/redrive`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RedriveBody {
    /// dead (default), cancelled or done.
    state: Option<String>,
    queue: Option<String>,
    /// At most this many (default 1000).
    limit: Option<u64>,
    /// Their due times spread from now over this (`"10m"`; default at once).
    spread: Option<String>,
}

/// `POST /v1/tasks/redrive` (admin): finished tasks run again, their
/// attempts reset. Answers how many.
pub(crate) async fn redrive(
    State(api): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    authorize(&api, &headers, Scope::Admin)?;
    let b: RedriveBody = body(bytes)?;
    let mut redrive = Redrive::dead().limit(b.limit.unwrap_or(1000));
    if let Some(state) = &b.state {
        let state = parse_state(state)?;
        if !matches!(
            state,
            TaskState::Dead | TaskState::Done | TaskState::Cancelled
        ) {
            return Err(ApiError::bad(
                "invalid_state",
                "only finished tasks (dead, done, cancelled) are redriven",
            ));
        }
        redrive = redrive.state(state);
    }
    if let Some(queue) = &b.queue {
        redrive = redrive.queue(queue.clone());
    }
    if let Some(spread) = &b.spread {
        let spread = humantime::parse_duration(spread).map_err(|err| {
            ApiError::bad(
                "invalid_delay",
                format!("spread {spread:?} is not a duration ({err})"),
            )
        })?;
        if SystemTime::now()
            .checked_add(spread)
            .is_none_or(|at| at > SystemTime::UNIX_EPOCH + ttw_durable::MAX_RUN_AT)
        {
            return Err(ApiError::bad(
                "invalid_delay",
                "spread reaches past the year 9999",
            ));
        }
        redrive = redrive.spread(spread);
    }
    let n = api.store.redrive_many(&redrive).await?;
    Ok(Json(json!({ "redriven": n })))
}

/// A recurring schedule, as the API writes it.
fn recurring_json(info: &RecurringInfo) -> Value {
    let mut v = json!({
        "name": info.name,
        "cron": info.cron,
        "time_zone": info.time_zone,
        "every": info.every.map(|d| humantime::format_duration(d).to_string()),
        "catch_up": catch_up_name(info.catch_up),
        "missed_after": humantime::format_duration(info.missed_after).to_string(),
        "paused": info.paused,
        "next_at": rfc3339(info.next_at),
        "queue": info.queue,
        "priority": info.priority,
        "max_attempts": info.max_attempts,
        "payload_base64": base64::engine::general_purpose::STANDARD.encode(&info.payload),
    });
    if let Ok(value) = serde_json::from_slice::<Value>(&info.payload) {
        v["payload"] = value;
    }
    v
}

fn catch_up_name(c: CatchUp) -> &'static str {
    match c {
        CatchUp::Skip => "skip",
        CatchUp::Last => "last",
        _ => "all",
    }
}

/// `GET /v1/recurring`: every schedule (of the queues the token may use).
pub(crate) async fn list_recurring(
    State(api): State<Shared>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let token = authorize(&api, &headers, Scope::Read)?;
    let list = api.store.list_recurring().await?;
    let shown: Vec<Value> = list
        .iter()
        .filter(|info| allow_queue(token, &info.queue).is_ok())
        .map(recurring_json)
        .collect();
    Ok(Json(json!({ "recurring": shown })))
}

/// The body of `PUT /v1/recurring/{name}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecurringBody {
    /// A cron expression (5 fields, or 6 with seconds).
    cron: Option<String>,
    /// Its time zone (IANA name); UTC if absent.
    time_zone: Option<String>,
    /// Or an interval (`"30s"`, `"1h"`).
    every: Option<String>,
    payload: Option<Box<serde_json::value::RawValue>>,
    payload_base64: Option<String>,
    queue: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<u32>,
    /// skip (default), last or all.
    catch_up: Option<String>,
    /// How late an occurrence may be made a task before it is missed.
    missed_after: Option<String>,
}

/// `PUT /v1/recurring/{name}`: creates the schedule (201), or changes it
/// to this definition (200, `"updated"`; `"unchanged"` if it was this).
pub(crate) async fn put_recurring(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let token = authorize(&api, &headers, Scope::Schedule)?;
    let b: RecurringBody = body(bytes)?;
    let invalid = |message: String| ApiError::bad("invalid_schedule", message);
    let mut schedule = match (&b.cron, &b.every) {
        (Some(cron), None) => Recurring::cron(name.clone(), cron.clone()),
        (None, Some(every)) => {
            let every = humantime::parse_duration(every)
                .map_err(|err| invalid(format!("every {every:?} is not a duration ({err})")))?;
            Recurring::every(name.clone(), every)
        }
        _ => return Err(invalid("give cron or every, one of them".into())),
    };
    if let Some(zone) = b.time_zone {
        schedule = schedule.time_zone(zone);
    }
    let queue = b
        .queue
        .unwrap_or_else(|| ttw_durable::DEFAULT_QUEUE.to_string());
    if !api.settings.queues.iter().any(|q| q.name == queue) {
        return Err(ApiError::bad(
            "unknown_queue",
            format!("no queue {queue:?} in this server's configuration"),
        ));
    }
    allow_queue(token, &queue)?;
    schedule = schedule.queue(queue);
    let payload = decode_payload(b.payload, b.payload_base64)?;
    schedule = schedule.payload(payload);
    if let Some(p) = b.priority {
        schedule = schedule.priority(p);
    }
    if let Some(n) = b.max_attempts {
        if n == 0 {
            return Err(ApiError::bad("invalid_request", "max_attempts: at least 1"));
        }
        schedule = schedule.max_attempts(n);
    }
    if let Some(c) = &b.catch_up {
        schedule = schedule.catch_up(match c.as_str() {
            "skip" => CatchUp::Skip,
            "last" => CatchUp::Last,
            "all" => CatchUp::All,
            _ => return Err(invalid(format!("catch_up {c:?}: skip, last or all"))),
        });
    }
    if let Some(m) = &b.missed_after {
        let m = humantime::parse_duration(m)
            .map_err(|err| invalid(format!("missed_after {m:?} is not a duration ({err})")))?;
        schedule = schedule.missed_after(m);
    }
    if let Some(every) = schedule_interval(&b.every) {
        if SystemTime::now()
            .checked_add(every)
            .is_none_or(|at| at > SystemTime::UNIX_EPOCH + ttw_durable::MAX_RUN_AT)
        {
            return Err(invalid(format!(
                "every {every:?} reaches past the year 9999"
            )));
        }
    }
    // Registering first: a new name is created, the same definition
    // changes nothing (its queue is the one checked above). Registering
    // refuses another definition under the name, and a bad definition:
    // then the schedule is updated if it exists (in a queue the token may
    // use; otherwise it is not found), which says what is wrong with a bad
    // one.
    let (status, outcome) = match api.store.register_recurring(schedule.clone()).await {
        Ok(Registered::Created) => (StatusCode::CREATED, "created"),
        Ok(_) => (StatusCode::OK, "unchanged"),
        Err(err) if err.is_invalid_schedule() => {
            let existing = api
                .store
                .list_recurring()
                .await?
                .into_iter()
                .find(|info| info.name == name);
            let not_found = || {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no recurring schedule {name:?}"),
                )
            };
            match existing {
                None => return Err(recurring_error(err)),
                Some(info) if allow_queue(token, &info.queue).is_err() => return Err(not_found()),
                Some(_) => {
                    if !api
                        .store
                        .update_recurring(schedule)
                        .await
                        .map_err(recurring_error)?
                    {
                        return Err(not_found());
                    }
                    (StatusCode::OK, "updated")
                }
            }
        }
        Err(err) => return Err(recurring_error(err)),
    };
    Ok((status, Json(json!({"name": name, "outcome": outcome}))).into_response())
}

/// The interval `every` names, if it parses (a bad one is refused when the
/// schedule is built).
fn schedule_interval(every: &Option<String>) -> Option<std::time::Duration> {
    every
        .as_ref()
        .and_then(|text| humantime::parse_duration(text).ok())
}

/// A store error of a recurring schedule: its definition is the caller's
/// fault (400), as the other store errors say.
fn recurring_error(err: ttw_durable::Error) -> ApiError {
    if err.is_invalid_schedule() {
        ApiError::bad("invalid_schedule", err.to_string())
    } else if err.is_config() {
        ApiError::bad("invalid_request", err.to_string())
    } else {
        err.into()
    }
}

/// The schedule `name`, if the token may see it: 404 otherwise.
async fn found(api: &Shared, headers: &HeaderMap, name: &str) -> ApiResult<RecurringInfo> {
    let token = authorize(api, headers, Scope::Schedule)?;
    let info = api
        .store
        .list_recurring()
        .await?
        .into_iter()
        .find(|info| info.name == name);
    match info {
        Some(info) if allow_queue(token, &info.queue).is_ok() => Ok(info),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no recurring schedule {name:?}"),
        )),
    }
}

/// `POST /v1/recurring/{name}/pause`: `{"paused": true}`, or `false` if it
/// was paused already.
pub(crate) async fn pause_recurring(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    found(&api, &headers, &name).await?;
    let changed = api.store.pause_recurring(&name).await?;
    Ok(Json(json!({"name": name, "paused": changed})))
}

/// `POST /v1/recurring/{name}/resume`: `{"resumed": true}`, or `false` if
/// it was running.
pub(crate) async fn resume_recurring(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    found(&api, &headers, &name).await?;
    let changed = api.store.resume_recurring(&name).await?;
    Ok(Json(json!({"name": name, "resumed": changed})))
}

/// `DELETE /v1/recurring/{name}`.
pub(crate) async fn delete_recurring(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    found(&api, &headers, &name).await?;
    let deleted = api.store.delete_recurring(&name).await?;
    Ok(Json(json!({"name": name, "deleted": deleted})))
}
