//! What a handler takes, checked before it runs: the caller's token for
//! the route's scope ([`Auth`]), a JSON body ([`Body`]), a query
//! ([`Params`]) and the headers of a schedule ([`TaskHeaders`]), each
//! refused with the documented [`Code`]s. Axum runs the header extractors
//! before the body's, so a request without a token is a 401 whatever its
//! body.

use std::marker::PhantomData;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq;

use super::config::{Scope, Token};
use super::refusal::{Code, Refusal};
use super::service::tasks::Headers;
use super::service::Shared;

/// A scope a route needs.
pub(crate) trait Needs: Send + Sync + 'static {
    const SCOPE: Scope;
}

/// The `read` scope: looking.
pub(crate) struct Read;
/// The `schedule` scope: tasks and recurring schedules.
pub(crate) struct Schedule;
/// The `admin` scope: queues' settings and redrives.
pub(crate) struct Admin;
/// The `consume` scope: claiming a pull queue's tasks and settling them.
pub(crate) struct Consume;

impl Needs for Read {
    const SCOPE: Scope = Scope::Read;
}
impl Needs for Schedule {
    const SCOPE: Scope = Scope::Schedule;
}
impl Needs for Admin {
    const SCOPE: Scope = Scope::Admin;
}
impl Needs for Consume {
    const SCOPE: Scope = Scope::Consume;
}

/// The caller's token, allowed scope `S` (an admin token is allowed every
/// scope): 401 `unauthorized` without a known bearer token, 403
/// `forbidden` without the scope.
pub(crate) struct Auth<S>(pub(crate) Arc<Token>, pub(crate) PhantomData<S>);

impl<S: Needs> FromRequestParts<Shared> for Auth<S> {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, Refusal> {
        let given = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Code::Unauthorized.refuse("an Authorization: Bearer token is required")
            })?;
        // Every token is compared, whichever matches, so the time taken
        // does not tell which one came close.
        let mut found = None;
        for token in &api.settings.tokens {
            if bool::from(token.secret.as_bytes().ct_eq(given.as_bytes())) {
                found = Some(token);
            }
        }
        let token = found.ok_or_else(|| Code::Unauthorized.refuse("unknown token"))?;
        if token.scopes.contains(&Scope::Admin) || token.scopes.contains(&S::SCOPE) {
            Ok(Auth(token.clone(), PhantomData))
        } else {
            Err(Code::Forbidden.refuse(
                format!("token {:?} lacks the {:?} scope", token.name, S::SCOPE).to_lowercase(),
            ))
        }
    }
}

/// A JSON body: 413 `body_too_large` over the server's limit,
/// `malformed_json` when it is not JSON, `invalid_request` when a field is
/// of the wrong type, missing or unknown.
pub(crate) struct Body<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<Shared> for Body<T> {
    type Rejection = Refusal;

    async fn from_request(request: Request, api: &Shared) -> Result<Self, Refusal> {
        let bytes = Bytes::from_request(request, api)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    Code::BodyTooLarge.refuse("the request body is larger than the server's limit")
                } else {
                    Code::InvalidRequest.refuse(rejection.body_text())
                }
            })?;
        parse(&bytes).map(Body)
    }
}

/// `bytes` as JSON of `T`, refused as [`Body`] says.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(bytes).map_err(|err| {
        use serde_json::error::Category;
        match err.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                Code::MalformedJson.refuse(format!("the body is not JSON: {err}"))
            }
            Category::Data => Code::InvalidRequest.refuse(err.to_string()),
        }
    })
}

/// A query: `invalid_request` when a parameter does not parse or is
/// unknown.
pub(crate) struct Params<T>(pub(crate) T);

impl<T: DeserializeOwned + Send> FromRequestParts<Shared> for Params<T> {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, api: &Shared) -> Result<Self, Refusal> {
        let Query(query) = Query::<T>::from_request_parts(parts, api)
            .await
            .map_err(|err| Code::InvalidRequest.refuse(err.body_text()))?;
        Ok(Params(query))
    }
}

/// The headers a single schedule reads: `Idempotency-Key` (`invalid_key`
/// when it is not text), `traceparent` and `tracestate`
/// (`invalid_trace_context` when not text).
pub(crate) struct TaskHeaders(pub(crate) Headers);

impl FromRequestParts<Shared> for TaskHeaders {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, _: &Shared) -> Result<Self, Refusal> {
        let text = |name: &str, code: Code| {
            parts
                .headers
                .get(name)
                .map(|v| {
                    v.to_str()
                        .map(str::to_string)
                        .map_err(|_| code.refuse(format!("the {name} header is not text")))
                })
                .transpose()
        };
        Ok(TaskHeaders(Headers {
            key: text("idempotency-key", Code::InvalidKey)?,
            traceparent: text("traceparent", Code::InvalidTraceContext)?,
            tracestate: text("tracestate", Code::InvalidTraceContext)?,
        }))
    }
}
