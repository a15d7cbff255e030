//! `/v1/queues`: the settings every node obeys for a queue of this server's
//! configuration (pause, global concurrency, rate), read by a `read` token,
//! changed by an `admin` one.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use ttw_durable::{Backoff, QueueLimits, Rate, RetryPolicy};

use super::api::{allow_queue, authorize, body, ApiError, ApiResult, Shared};
use super::config::Scope;
use crate::output::queue_settings_json;

/// A queue of the configuration, or 404 `unknown_queue`.
fn configured(api: &Shared, name: &str) -> ApiResult<()> {
    if api.settings.queues.iter().any(|q| q.name == name) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_queue",
            format!("no queue {name:?} in this server's configuration"),
        ))
    }
}

/// `GET /v1/queues`: every configured queue the token may see, with its
/// settings (not paused and no limits where none were set).
pub(crate) async fn list(State(api): State<Shared>, headers: HeaderMap) -> ApiResult<Json<Value>> {
    let token = authorize(&api, &headers, Scope::Read)?;
    let mut shown = Vec::new();
    for queue in &api.settings.queues {
        if allow_queue(token, &queue.name).is_ok() {
            shown.push(queue_settings_json(
                &api.store.queue_settings(&queue.name).await?,
            ));
        }
    }
    Ok(Json(json!({ "queues": shown })))
}

/// `GET /v1/queues/{name}`.
pub(crate) async fn get(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let token = authorize(&api, &headers, Scope::Read)?;
    configured(&api, &name)?;
    allow_queue(token, &name)?;
    Ok(Json(queue_settings_json(
        &api.store.queue_settings(&name).await?,
    )))
}

/// `POST /v1/queues/{name}/pause`: no node starts the queue's tasks until
/// the resume.
pub(crate) async fn pause(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(&api, &headers, &name, true).await
}

/// `POST /v1/queues/{name}/resume`.
pub(crate) async fn resume(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(&api, &headers, &name, false).await
}

/// Pauses or resumes a configured queue with an admin token; answers its
/// settings.
async fn set_paused(
    api: &Shared,
    headers: &HeaderMap,
    name: &str,
    paused: bool,
) -> ApiResult<Json<Value>> {
    authorize(api, headers, Scope::Admin)?;
    configured(api, name)?;
    if paused {
        api.store.pause_queue(name).await?;
    } else {
        api.store.resume_queue(name).await?;
    }
    Ok(Json(queue_settings_json(
        &api.store.queue_settings(name).await?,
    )))
}

/// The body of `PUT /v1/queues/{name}/limits`: the limits, replacing the
/// queue's (an absent or `null` one is cleared).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsBody {
    concurrency: Option<i64>,
    rate: Option<RateBody>,
    per_key_concurrency: Option<i64>,
}

/// A rate: `count` starts every `per` (`"1s"`, `"500ms"`), bursts of up to
/// `burst` (default `count`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateBody {
    count: i64,
    per: String,
    burst: Option<i64>,
}

/// A setting the store refused: 400 `invalid_limit` when it is out of
/// range, as any other store error otherwise.
fn refused_setting(err: ttw_durable::Error) -> ApiError {
    if err.is_config() {
        ApiError::bad("invalid_limit", err.to_string())
    } else {
        err.into()
    }
}

/// A count from the body: 400 `invalid_limit` when it is out of range.
fn count(what: &str, n: i64) -> ApiResult<u32> {
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=ttw_durable::MAX_LIMIT).contains(n))
        .ok_or_else(|| {
            ApiError::bad(
                "invalid_limit",
                format!(
                    "{what} must be from 1 to {}, not {n}",
                    ttw_durable::MAX_LIMIT
                ),
            )
        })
}

/// `PUT /v1/queues/{name}/limits`: sets the queue's limits across every
/// node; answers its settings.
pub(crate) async fn put_limits(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    authorize(&api, &headers, Scope::Admin)?;
    configured(&api, &name)?;
    let b: LimitsBody = body(bytes)?;
    let mut limits = QueueLimits::new();
    if let Some(n) = b.concurrency {
        limits = limits.concurrency(count("concurrency", n)?);
    }
    if let Some(n) = b.per_key_concurrency {
        limits = limits.per_key_concurrency(count("per_key_concurrency", n)?);
    }
    if let Some(r) = b.rate {
        let per: Duration = humantime::parse_duration(&r.per).map_err(|err| {
            ApiError::bad(
                "invalid_limit",
                format!(
                    "rate.per {:?} is not a duration ({err}; try 1s, 500ms)",
                    r.per
                ),
            )
        })?;
        let mut rate = Rate::new(count("rate.count", r.count)?, per);
        if let Some(burst) = r.burst {
            rate = rate.burst(count("rate.burst", burst)?);
        }
        limits = limits.rate(rate);
    }
    api.store
        .set_queue_limits(&name, limits)
        .await
        .map_err(refused_setting)?;
    Ok(Json(queue_settings_json(
        &api.store.queue_settings(&name).await?,
    )))
}

/// The body of `PUT /v1/queues/{name}/retry`: the retry policy, replacing
/// the queue's (an absent part is cleared: the nodes' own applies).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryBody {
    max_attempts: Option<i64>,
    backoff: Option<BackoffBody>,
}

/// A backoff: `base` after the first failure, doubling up to `max`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackoffBody {
    base: String,
    max: String,
}

/// `PUT /v1/queues/{name}/retry`: sets the queue's retry policy over each
/// node's own; answers its settings.
pub(crate) async fn put_retry(
    State(api): State<Shared>,
    headers: HeaderMap,
    Path(name): Path<String>,
    bytes: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    authorize(&api, &headers, Scope::Admin)?;
    configured(&api, &name)?;
    let b: RetryBody = body(bytes)?;
    let mut retry = RetryPolicy::new();
    if let Some(n) = b.max_attempts {
        retry = retry.max_attempts(count("max_attempts", n)?);
    }
    if let Some(backoff) = b.backoff {
        let parse = |what: &str, text: &str| {
            humantime::parse_duration(text).map_err(|err| {
                ApiError::bad(
                    "invalid_limit",
                    format!("backoff.{what} {text:?} is not a duration ({err}; try 10s, 10m)"),
                )
            })
        };
        retry = retry.backoff(Backoff::exponential(
            parse("base", &backoff.base)?,
            parse("max", &backoff.max)?,
        ));
    }
    api.store
        .set_queue_retry(&name, retry)
        .await
        .map_err(refused_setting)?;
    Ok(Json(queue_settings_json(
        &api.store.queue_settings(&name).await?,
    )))
}
