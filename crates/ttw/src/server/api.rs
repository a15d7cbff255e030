//! The HTTP API of `ttw server`, version 1: JSON over HTTP, under `/v1`.
//!
//! Every answer that is not a success is `{"error": {"code": ..., "message":
//! ...}}` with a 4xx status and a stable `code` (503 `unavailable` when the
//! database is): bad input never reaches the store half-checked, and never
//! gets a 500. The codes: `unauthorized` (401), `forbidden` (403),
//! `not_found` (404), `method_not_allowed` (405), `not_scheduled` (409: cancel or reschedule of a task
//! that is no longer pending), `body_too_large` (413), `malformed_json`,
//! `invalid_request` (a field of the wrong type, or missing, or unknown),
//! `invalid_time` (a time not RFC 3339, or before 1970 or after 9999),
//! `invalid_delay`, `invalid_id`, `unknown_queue`, `invalid_key` (empty, or
//! over `MAX_IDEMPOTENCY_KEY` bytes), `payload_too_large`, `invalid_payload`
//! (not base64), `batch_too_large` (all 400), and `unavailable` (503).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use ttw_durable::{NewTask, Scheduled, Store, TaskId, TaskInfo, TaskState};

use super::config::{Scope, Settings, Token};
use super::group::{Grouper, Refused};

/// The most tasks one batch request schedules.
pub(crate) const MAX_BATCH: usize = 1_000;

/// What the handlers share.
pub(crate) struct Api {
    pub(crate) store: Store,
    pub(crate) settings: Settings,
    /// Writes single schedules in groups.
    pub(crate) grouper: Grouper,
}

pub(crate) type Shared = Arc<Api>;

/// An answer that is not a success.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

/// A store error as an answer: bad input is a 400 with its own code; a
/// database that fails is 503.
impl From<ttw_durable::Error> for ApiError {
    fn from(err: ttw_durable::Error) -> ApiError {
        let message = err.to_string();
        if err.is_payload_too_large() {
            ApiError::bad("payload_too_large", message)
        } else if err.is_out_of_range() {
            ApiError::bad("invalid_time", message)
        } else if err.is_invalid_key() {
            ApiError::bad("invalid_key", message)
        } else if err.is_invalid_queue() {
            ApiError::bad("unknown_queue", message)
        } else {
            tracing::warn!(%err, "ttw server: a store call failed");
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
        }
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// The token the request carries, checked against every configured one in
/// constant time, and allowed `scope`.
pub(crate) fn authorize<'a>(
    api: &'a Api,
    headers: &HeaderMap,
    scope: Scope,
) -> ApiResult<&'a Token> {
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "an Authorization: Bearer token is required",
            )
        })?;
    // Every token is compared, whichever matches, so the time taken does
    // not tell which one came close.
    let mut found = None;
    for token in &api.settings.tokens {
        if bool::from(token.secret.as_bytes().ct_eq(given.as_bytes())) {
            found = Some(token);
        }
    }
    let token = found
        .ok_or_else(|| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", "unknown token"))?;
    if token.scopes.contains(&Scope::Admin) || token.scopes.contains(&scope) {
        Ok(token)
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("token {:?} lacks the {scope:?} scope", token.name).to_lowercase(),
        ))
    }
}

/// Whether `token` may touch tasks of `queue`; answers 403 otherwise.
pub(crate) fn allow_queue(token: &Token, queue: &str) -> ApiResult<()> {
    match &token.queues {
        Some(queues) if !token.scopes.contains(&Scope::Admin) && !queues.contains(queue) => {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("token {:?} may not use queue {queue:?}", token.name),
            ))
        }
        _ => Ok(()),
    }
}

/// A JSON body, or the error that says what is wrong with it.
pub(crate) fn body<T: for<'de> Deserialize<'de>>(
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    let bytes = bytes.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body is larger than the server's limit",
            )
        } else {
            ApiError::bad("invalid_request", rejection.body_text())
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|err| {
        use serde_json::error::Category;
        match err.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::bad("malformed_json", format!("the body is not JSON: {err}"))
            }
            Category::Data => ApiError::bad("invalid_request", err.to_string()),
        }
    })
}

/// One task to schedule, as the API takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTaskBody {
    /// Any JSON value: stored as its JSON text, byte for byte as sent.
    payload: Option<Box<RawValue>>,
    /// Or bytes, in standard base64.
    payload_base64: Option<String>,
    /// RFC 3339.
    run_at: Option<String>,
    /// From now: `"15m"`, `"1h 30m"`, `"250ms"`.
    delay: Option<String>,
    queue: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<u32>,
    idempotency_key: Option<String>,
    #[serde(default)]
    replace_pending: bool,
    /// A debounce's longest wait (`"2s"`), with `replace_pending`.
    max_wait: Option<String>,
    /// A tenant, a customer: keys take turns, a queue may cap each.
    partition_key: Option<String>,
}

/// When a task is due: `run_at`, or `delay` from now, or now.
fn due_time(run_at: &Option<String>, delay: &Option<String>) -> ApiResult<Option<SystemTime>> {
    match (run_at, delay) {
        (Some(_), Some(_)) => Err(ApiError::bad(
            "invalid_request",
            "give run_at or delay, not both",
        )),
        (Some(text), None) => ttw_durable::parse_time(text)
            .map(Some)
            .map_err(|err| ApiError::bad("invalid_time", format!("run_at: {err}"))),
        (None, Some(text)) => {
            let delay = humantime::parse_duration(text).map_err(|err| {
                ApiError::bad(
                    "invalid_delay",
                    format!("delay {text:?} is not a duration ({err}; try 30s, 15m, 1h)"),
                )
            })?;
            SystemTime::now()
                .checked_add(delay)
                .map(Some)
                .ok_or_else(|| ApiError::bad("invalid_delay", "the delay is too long"))
        }
        (None, None) => Ok(None),
    }
}

/// A task to schedule, checked: the queue known and allowed, the payload
/// decoded, the time parsed. Nothing is written until every check passed.
struct Checked {
    payload: Vec<u8>,
    at: Option<SystemTime>,
    queue: String,
    priority: Option<i16>,
    max_attempts: Option<u32>,
    key: Option<String>,
    replace_pending: bool,
    max_wait: Option<Duration>,
    partition_key: Option<String>,
}

impl Checked {
    /// The task for a batch.
    fn into_new_task(self) -> NewTask {
        let mut task = NewTask::new(self.payload).queue(self.queue);
        if let Some(at) = self.at {
            task = task.at(at);
        }
        if let Some(p) = self.priority {
            task = task.priority(p);
        }
        if let Some(n) = self.max_attempts {
            task = task.max_attempts(n);
        }
        if let Some(k) = self.key {
            task = task.idempotency_key(k);
        }
        if let Some(k) = self.partition_key {
            task = task.partition_key(k);
        }
        task
    }

    /// Schedules it alone.
    async fn submit(self, store: &Store) -> Result<Scheduled, ttw_durable::Error> {
        let mut schedule = store.schedule(self.payload).queue(self.queue);
        if let Some(at) = self.at {
            schedule = schedule.at(at);
        }
        if let Some(p) = self.priority {
            schedule = schedule.priority(p);
        }
        if let Some(n) = self.max_attempts {
            schedule = schedule.max_attempts(n);
        }
        if let Some(k) = self.key {
            schedule = schedule.idempotency_key(k);
        }
        if self.replace_pending {
            schedule = schedule.replace_pending();
        }
        if let Some(wait) = self.max_wait {
            schedule = schedule.max_wait(wait);
        }
        if let Some(k) = self.partition_key {
            schedule = schedule.partition_key(k);
        }
        schedule.submit().await
    }
}

/// A payload given as JSON (stored as its text, byte for byte as the
/// request wrote it: key order, spacing and number forms kept) or as
/// base64 bytes, not both; none is empty.
pub(crate) fn decode_payload(
    json: Option<Box<RawValue>>,
    base64: Option<String>,
) -> ApiResult<Vec<u8>> {
    Ok(match (json, base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad(
                "invalid_request",
                "give payload or payload_base64, not both",
            ))
        }
        (Some(text), None) => text.get().as_bytes().to_vec(),
        (None, Some(text)) => base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|err| {
                ApiError::bad(
                    "invalid_payload",
                    format!("payload_base64 is not base64: {err}"),
                )
            })?,
        (None, None) => Vec::new(),
    })
}

fn check(
    api: &Api,
    token: &Token,
    b: NewTaskBody,
    header_key: Option<String>,
) -> ApiResult<Checked> {
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
    let payload = decode_payload(b.payload, b.payload_base64)?;
    if payload.len() > ttw_durable::MAX_PAYLOAD {
        return Err(ApiError::bad(
            "payload_too_large",
            format!(
                "the payload is {} bytes, over the limit of {}",
                payload.len(),
                ttw_durable::MAX_PAYLOAD
            ),
        ));
    }
    let key = match (b.idempotency_key, header_key) {
        (Some(a), Some(h)) if a != h => {
            return Err(ApiError::bad(
                "invalid_key",
                "the Idempotency-Key header and idempotency_key differ",
            ))
        }
        (Some(k), _) | (None, Some(k)) => Some(k),
        (None, None) => None,
    };
    if let Some(k) = &key {
        if k.is_empty() || k.len() > ttw_durable::MAX_IDEMPOTENCY_KEY {
            return Err(ApiError::bad(
                "invalid_key",
                format!(
                    "an idempotency key is 1 to {} bytes",
                    ttw_durable::MAX_IDEMPOTENCY_KEY
                ),
            ));
        }
    }
    if b.replace_pending && key.is_none() {
        return Err(ApiError::bad(
            "invalid_request",
            "replace_pending needs an idempotency key",
        ));
    }
    if b.max_attempts == Some(0) {
        return Err(ApiError::bad("invalid_request", "max_attempts: at least 1"));
    }
    let partition_key = match b.partition_key {
        Some(k) if k.is_empty() || k.len() > ttw_durable::MAX_PARTITION_KEY => {
            return Err(ApiError::bad(
                "invalid_request",
                format!(
                    "partition_key: 1 to {} bytes",
                    ttw_durable::MAX_PARTITION_KEY
                ),
            ))
        }
        k => k,
    };
    let max_wait = match &b.max_wait {
        None => None,
        Some(_) if !b.replace_pending => {
            return Err(ApiError::bad(
                "invalid_request",
                "max_wait is a debounce's: it needs replace_pending",
            ))
        }
        Some(text) => match humantime::parse_duration(text) {
            Ok(wait) if wait >= Duration::from_millis(1) && wait <= ttw_durable::MAX_RUN_AT => {
                Some(wait)
            }
            Ok(_) => {
                return Err(ApiError::bad(
                    "invalid_delay",
                    "max_wait: from 1ms to the year 9999",
                ))
            }
            Err(err) => {
                return Err(ApiError::bad(
                    "invalid_delay",
                    format!("max_wait {text:?} is not a duration ({err}; try 2s, 15m)"),
                ))
            }
        },
    };
    let at = due_time(&b.run_at, &b.delay)?;
    if at.is_some_and(|at| at > SystemTime::UNIX_EPOCH + ttw_durable::MAX_RUN_AT) {
        return Err(ApiError::bad(
            "invalid_time",
            "run_at is after the year 9999",
        ));
    }
    Ok(Checked {
        payload,
        at,
        queue,
        priority: b.priority,
        max_attempts: b.max_attempts,
        key,
        replace_pending: b.replace_pending,
        max_wait,
        partition_key,
    })
}

fn scheduled_json(s: Scheduled) -> (StatusCode, Value) {
    let (status, outcome) = match s {
        Scheduled::Created(_) => (StatusCode::CREATED, "created"),
        Scheduled::Existing(_) => (StatusCode::OK, "existing"),
        Scheduled::Replaced(_) => (StatusCode::OK, "replaced"),
    };
    (status, json!({"id": s.id().get(), "outcome": outcome}))
}

/// `POST /v1/tasks`: one task.
pub(crate) async fn schedule(
    State(api): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let token = authorize(&api, &headers, Scope::Schedule)?;
    let request: NewTaskBody = body(bytes)?;
    let header_key = headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| ApiError::bad("invalid_key", "the Idempotency-Key header is not text"))
        })
        .transpose()?;
    let checked = check(&api, token, request, header_key)?;
    let scheduled = if checked.replace_pending {
        checked.submit(&api.store).await?
    } else {
        match api.grouper.schedule(checked.into_new_task()).await {
            Some(Ok(scheduled)) => scheduled,
            Some(Err(Refused::Store(err))) => return Err(err.into()),
            Some(Err(Refused::Group(said))) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    said,
                ))
            }
            None => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the server is stopping",
                ))
            }
        }
    };
    let (status, json) = scheduled_json(scheduled);
    Ok((status, Json(json)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    tasks: Vec<NewTaskBody>,
}

/// `POST /v1/tasks/batch`: up to [`MAX_BATCH`] tasks in one transaction,
/// every one or none.
pub(crate) async fn schedule_batch(
    State(api): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let token = authorize(&api, &headers, Scope::Schedule)?;
    let request: BatchBody = body(bytes)?;
    if request.tasks.len() > MAX_BATCH {
        return Err(ApiError::bad(
            "batch_too_large",
            format!(
                "{} tasks; a batch holds at most {MAX_BATCH}",
                request.tasks.len()
            ),
        ));
    }
    let mut tasks = Vec::with_capacity(request.tasks.len());
    for (i, t) in request.tasks.into_iter().enumerate() {
        if t.replace_pending {
            return Err(ApiError::bad(
                "invalid_request",
                format!("tasks[{i}]: replace_pending is for single schedules"),
            ));
        }
        let checked = check(&api, token, t, None).map_err(|mut err| {
            err.message = format!("tasks[{i}]: {}", err.message);
            err
        })?;
        tasks.push(checked.into_new_task());
    }
    let scheduled = api.store.schedule_batch(tasks).await?;
    let results: Vec<Value> = scheduled.into_iter().map(|s| scheduled_json(s).1).collect();
    Ok((StatusCode::OK, Json(json!({"tasks": results}))).into_response())
}

fn parse_id(text: &str) -> ApiResult<TaskId> {
    text.parse::<i64>()
        .ok()
        .filter(|&id| id > 0)
        .map(TaskId::new)
        .ok_or_else(|| ApiError::bad("invalid_id", format!("{text:?} is not a task id")))
}

fn state_name(state: TaskState) -> &'static str {
    state.as_str()
}

pub(crate) fn rfc3339(t: SystemTime) -> String {
    crate::output::time(t)
}

pub(crate) fn task_json(info: &TaskInfo) -> Value {
    let mut v = json!({
        "id": info.id.get(),
        "state": state_name(info.state),
        "run_at": rfc3339(info.run_at),
        "attempts": info.attempts,
        "max_attempts": info.max_attempts,
        "last_error": info.last_error,
        "idempotency_key": info.idempotency_key,
        "queue": info.queue,
        "priority": info.priority,
        "payload_base64": base64::engine::general_purpose::STANDARD.encode(&info.payload),
    });
    if let Ok(value) = serde_json::from_slice::<Value>(&info.payload) {
        v["payload"] = value;
    }
    v
}

/// A task named in the path: by id (`/v1/tasks/{id}`) or by idempotency
/// key (`/v1/keys/{key}`).
enum Named {
    Id(String),
    Key(String),
}

/// The task `named` names, for a token allowed `scope`: 404 if there is
/// none (or it is in a queue the token may not use, which is not told
/// apart).
async fn find(api: &Api, headers: &HeaderMap, scope: Scope, named: Named) -> ApiResult<TaskInfo> {
    let token = authorize(api, headers, scope)?;
    let (info, what) = match named {
        Named::Id(text) => {
            let id = parse_id(&text)?;
            (api.store.get(id).await?, format!("no task {id}"))
        }
        Named::Key(key) => {
            let what = format!("no task has the key {key:?}");
            (api.store.get_by_key(&key).await?, what)
        }
    };
    match info {
        Some(info) if allow_queue(token, &info.queue).is_ok() => Ok(info),
        _ => Err(ApiError::new(StatusCode::NOT_FOUND, "not_found", what)),
    }
}

/// `GET /v1/tasks/{id}`.
pub(crate) async fn get_task(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let info = find(&api, &headers, Scope::Read, Named::Id(id)).await?;
    Ok(Json(task_json(&info)))
}

/// `GET /v1/keys/{key}`.
pub(crate) async fn get_key(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    let info = find(&api, &headers, Scope::Read, Named::Key(key)).await?;
    Ok(Json(task_json(&info)))
}

/// A change to a pending task, answered 409 if it is no longer pending
/// (with the state it is in now).
async fn changed(api: &Api, done: bool, info: TaskInfo, what: &str) -> ApiResult<Json<Value>> {
    if done {
        return Ok(Json(json!({"id": info.id.get(), what: true})));
    }
    let info = match api.store.get(info.id).await {
        Ok(Some(now)) => now,
        _ => info,
    };
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "not_scheduled",
        format!(
            "task {} is {}, not scheduled",
            info.id,
            state_name(info.state)
        ),
    ))
}

/// Cancels the task `named` names, if it is pending.
async fn cancel(api: &Api, headers: &HeaderMap, named: Named) -> ApiResult<Json<Value>> {
    let info = find(api, headers, Scope::Schedule, named).await?;
    let done = api.store.cancel(info.id).await?;
    changed(api, done, info, "cancelled").await
}

/// `DELETE /v1/tasks/{id}`: cancel a pending task.
pub(crate) async fn cancel_task(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    cancel(&api, &headers, Named::Id(id)).await
}

/// `DELETE /v1/keys/{key}`.
pub(crate) async fn cancel_key(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> ApiResult<Json<Value>> {
    cancel(&api, &headers, Named::Key(key)).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RescheduleBody {
    run_at: Option<String>,
    delay: Option<String>,
}

/// Moves the task `named` names to the body's `run_at` or `delay`, if it
/// is pending.
async fn reschedule(
    api: &Api,
    headers: &HeaderMap,
    named: Named,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let info = find(api, headers, Scope::Schedule, named).await?;
    let request: RescheduleBody = body(bytes)?;
    let at = due_time(&request.run_at, &request.delay)?
        .ok_or_else(|| ApiError::bad("invalid_request", "give run_at or delay"))?;
    let done = api.store.reschedule(info.id, at).await?;
    changed(api, done, info, "rescheduled").await
}

/// `POST /v1/tasks/{id}/reschedule` with `run_at` or `delay`.
pub(crate) async fn reschedule_task(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    reschedule(&api, &headers, Named::Id(id), bytes).await
}

/// `POST /v1/keys/{key}/reschedule`.
pub(crate) async fn reschedule_key(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(key): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    reschedule(&api, &headers, Named::Key(key), bytes).await
}

/// `GET /v1/counts`: tasks per queue and state (of the queues the token
/// may use).
pub(crate) async fn counts(
    State(api): State<Shared>,
    headers: HeaderMap,
) -> ApiResult<Json<Value>> {
    let token = authorize(&api, &headers, Scope::Read)?;
    let mut out = BTreeMap::new();
    for (queue, c) in api.store.queue_counts().await? {
        if allow_queue(token, &queue).is_ok() {
            out.insert(
                queue,
                json!({
                    "scheduled": c.scheduled, "running": c.running, "done": c.done,
                    "dead": c.dead, "cancelled": c.cancelled,
                }),
            );
        }
    }
    Ok(Json(json!({ "queues": out })))
}

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the database answers, within a second.
pub(crate) async fn readyz(State(api): State<Shared>) -> ApiResult<Json<Value>> {
    match tokio::time::timeout(Duration::from_secs(1), api.store.counts()).await {
        Ok(Ok(_)) => Ok(Json(json!({"status": "ready"}))),
        Ok(Err(err)) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            err.to_string(),
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the database did not answer within 1 s",
        )),
    }
}

#[cfg(test)]
mod tests;
