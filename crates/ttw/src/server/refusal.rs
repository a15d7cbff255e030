//! Refusals: every answer of the API that is not a success is
//! `{"error": {"code": ..., "message": ...}}`, its status the code's own.
//! [`Code`] is the only way to refuse: each stable code is one variant,
//! and the variant alone decides the status, so one code never answers two
//! statuses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// A stable error code of the API, and the status it answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Code {
    /// 401: no `Authorization: Bearer` token, or one the server does not
    /// know.
    Unauthorized,
    /// 403: the token lacks the route's scope, or may not use the queue.
    Forbidden,
    /// 404: no such task, key, recurring schedule, queue or route.
    NotFound,
    /// 405: the route does not take this method.
    MethodNotAllowed,
    /// 409: a cancel or reschedule of a task that is no longer scheduled.
    NotScheduled,
    /// 409: a redrive of a task that is not dead.
    NotDead,
    /// 413: the body is over the server's `max_body`.
    BodyTooLarge,
    /// 400: the body is not JSON.
    MalformedJson,
    /// 400: a field of the wrong type, missing, unknown, or out of range.
    InvalidRequest,
    /// 400: a time that is not RFC 3339, or before 1970 or after 9999.
    InvalidTime,
    /// 400: a duration that does not parse (`30s`, `15m`, `1h 30m`), or is
    /// out of range.
    InvalidDelay,
    /// 400: a task id that is not a positive integer.
    InvalidId,
    /// 400: an idempotency key that is empty, too long, or two that
    /// differ.
    InvalidKey,
    /// 400: `payload_base64` that is not base64.
    InvalidPayload,
    /// 400: a payload over 1 MiB.
    PayloadTooLarge,
    /// 400: a queue not in the server's configuration, named in a body.
    UnknownQueue,
    /// 400: a batch of more than 1,000 tasks.
    BatchTooLarge,
    /// 400: a `cursor` this server did not give.
    InvalidCursor,
    /// 400: a `limit`, concurrency, rate or retry setting out of range.
    InvalidLimit,
    /// 400: a recurring schedule's `cron`, `time_zone` or `every` that does
    /// not parse.
    InvalidSchedule,
    /// 400: a task state that is not one of the five.
    InvalidState,
    /// 400: a `target` that is malformed (a URL not `http` or `https`
    /// with a host, an unknown method, a reserved header).
    InvalidDestination,
    /// 400: a `target` URL under none of the token's `destinations`, or a
    /// `target` in a queue not delivered by webhook.
    DestinationNotAllowed,
    /// 400: a `traceparent` that is not a W3C trace context, or a
    /// `tracestate` without one or too long.
    InvalidTraceContext,
    /// 409: an ack, nack or extend whose claim no longer holds the task
    /// (its lease ran out, or it was settled); nothing was changed.
    StaleClaim,
    /// 400: a claim of a queue that is not a pull queue (`pull = true`).
    NotAPullQueue,
    /// 400: a `lease` that does not parse or is not 1 s to 12 h.
    InvalidLease,
    /// 400: a claim's `wait` that does not parse or is over 60 s.
    InvalidWait,
    /// 503: the database did not answer, or the server is stopping.
    Unavailable,
}

impl Code {
    /// Every code, for the tests.
    #[cfg(test)]
    pub(crate) const ALL: [Code; 29] = [
        Code::Unauthorized,
        Code::Forbidden,
        Code::NotFound,
        Code::MethodNotAllowed,
        Code::NotScheduled,
        Code::NotDead,
        Code::BodyTooLarge,
        Code::MalformedJson,
        Code::InvalidRequest,
        Code::InvalidTime,
        Code::InvalidDelay,
        Code::InvalidId,
        Code::InvalidKey,
        Code::InvalidPayload,
        Code::PayloadTooLarge,
        Code::UnknownQueue,
        Code::BatchTooLarge,
        Code::InvalidCursor,
        Code::InvalidLimit,
        Code::InvalidSchedule,
        Code::InvalidState,
        Code::InvalidDestination,
        Code::DestinationNotAllowed,
        Code::InvalidTraceContext,
        Code::StaleClaim,
        Code::NotAPullQueue,
        Code::InvalidLease,
        Code::InvalidWait,
        Code::Unavailable,
    ];

    /// The status this code answers with.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Code::Unauthorized => StatusCode::UNAUTHORIZED,
            Code::Forbidden => StatusCode::FORBIDDEN,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Code::NotScheduled | Code::NotDead | Code::StaleClaim => StatusCode::CONFLICT,
            Code::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::MalformedJson
            | Code::InvalidRequest
            | Code::InvalidTime
            | Code::InvalidDelay
            | Code::InvalidId
            | Code::InvalidKey
            | Code::InvalidPayload
            | Code::PayloadTooLarge
            | Code::UnknownQueue
            | Code::BatchTooLarge
            | Code::InvalidCursor
            | Code::InvalidLimit
            | Code::InvalidSchedule
            | Code::InvalidState
            | Code::InvalidDestination
            | Code::DestinationNotAllowed
            | Code::InvalidTraceContext
            | Code::NotAPullQueue
            | Code::InvalidLease
            | Code::InvalidWait => StatusCode::BAD_REQUEST,
        }
    }

    /// The code as the answer spells it: `invalid_time`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Code::Unauthorized => "unauthorized",
            Code::Forbidden => "forbidden",
            Code::NotFound => "not_found",
            Code::MethodNotAllowed => "method_not_allowed",
            Code::NotScheduled => "not_scheduled",
            Code::NotDead => "not_dead",
            Code::BodyTooLarge => "body_too_large",
            Code::MalformedJson => "malformed_json",
            Code::InvalidRequest => "invalid_request",
            Code::InvalidTime => "invalid_time",
            Code::InvalidDelay => "invalid_delay",
            Code::InvalidId => "invalid_id",
            Code::InvalidKey => "invalid_key",
            Code::InvalidPayload => "invalid_payload",
            Code::PayloadTooLarge => "payload_too_large",
            Code::UnknownQueue => "unknown_queue",
            Code::BatchTooLarge => "batch_too_large",
            Code::InvalidCursor => "invalid_cursor",
            Code::InvalidLimit => "invalid_limit",
            Code::InvalidSchedule => "invalid_schedule",
            Code::InvalidState => "invalid_state",
            Code::InvalidDestination => "invalid_destination",
            Code::DestinationNotAllowed => "destination_not_allowed",
            Code::InvalidTraceContext => "invalid_trace_context",
            Code::StaleClaim => "stale_claim",
            Code::NotAPullQueue => "not_a_pull_queue",
            Code::InvalidLease => "invalid_lease",
            Code::InvalidWait => "invalid_wait",
            Code::Unavailable => "unavailable",
        }
    }

    /// A refusal with this code, saying `message`.
    pub(crate) fn refuse(self, message: impl Into<String>) -> Refusal {
        Refusal {
            code: self,
            message: message.into(),
        }
    }
}

/// An answer that is not a success: a [`Code`] and what went wrong.
#[derive(Debug)]
pub(crate) struct Refusal {
    code: Code,
    message: String,
}

impl Refusal {
    /// Its code.
    #[cfg(test)]
    pub(crate) fn code(&self) -> Code {
        self.code
    }

    /// The same refusal, its message put under `what` (`tasks[3]: ...`).
    pub(crate) fn within(mut self, what: &str) -> Refusal {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

/// The body of every refusal.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong: a stable code, and a message for a person.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ErrorDetail {
    code: Code,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        (self.code.status(), Json(body)).into_response()
    }
}

/// A store error as an answer: bad input is a 400 with its own code; a
/// database that fails is 503.
impl From<ttw_durable::Error> for Refusal {
    /// The one place the store's refusals become codes: what the store
    /// checks of a task (bounds, attempts, keys, times, the envelope's
    /// form) is the client's 400 with its code; an error about one task of
    /// a batch names it (`tasks[3]: ...`); anything else is the server's
    /// (`unavailable`, retried by clients).
    fn from(err: ttw_durable::Error) -> Refusal {
        let code = if err.is_payload_too_large() {
            Code::PayloadTooLarge
        } else if err.is_out_of_range() || err.is_invalid_time() {
            Code::InvalidTime
        } else if err.is_invalid_key() {
            Code::InvalidKey
        } else if err.is_invalid_queue() {
            Code::UnknownQueue
        } else if err.is_invalid_schedule() {
            Code::InvalidSchedule
        } else if err.is_invalid_trace_context() {
            Code::InvalidTraceContext
        } else if err.is_invalid_envelope() {
            Code::InvalidDestination
        } else if err.invalid_field() == Some("max_wait") {
            Code::InvalidDelay
        } else if err.is_stale_claim() {
            Code::StaleClaim
        } else if err.is_queue_not_allowed() {
            Code::Forbidden
        } else if err.invalid_field() == Some("lease") {
            Code::InvalidLease
        } else if err.invalid_field() == Some("wait") {
            Code::InvalidWait
        } else if err.is_invalid_task() {
            Code::InvalidRequest
        } else {
            tracing::warn!(%err, "ttw server: a store call failed");
            Code::Unavailable
        };
        match err.batch_index() {
            Some(index) => code
                .refuse(err.without_batch_index().to_string())
                .within(&format!("tasks[{index}]")),
            None => code.refuse(err.to_string()),
        }
    }
}

/// A handler's or a service's answer.
pub(crate) type Answer<T> = Result<T, Refusal>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each code's name is its serde name, and every code is in `ALL` once.
    /// A refusal of the store that the service did not check first (a
    /// task's destination, say) is the client's 400 with its code, not a
    /// 503 `unavailable` that a client retries for ever.
    #[test]
    fn the_store_s_refusals_of_input_are_the_client_s() {
        let get = ttw_durable::Envelope::new()
            .destination(ttw_durable::Destination::new("https://example.com/x").method("GET"));
        let refusal = Refusal::from(get.check_payload(3).unwrap_err());
        assert_eq!(refusal.code, Code::InvalidDestination);
    }

    /// What the store refuses of a task, alone or in a batch, maps to the
    /// code the API documents for it, in the one mapping: the service no
    /// longer checks these itself. A batch's refusal names its task once
    /// (`tasks[1]: ...`).
    #[tokio::test]
    async fn each_refusal_of_a_task_has_its_code() {
        use ttw_durable::{Envelope, NewTask, Store};
        let store = Store::sqlite_in_memory().await.unwrap();
        let cases: [(NewTask, Code); 7] = [
            (NewTask::new("x").max_attempts(0), Code::InvalidRequest),
            (NewTask::new("x").partition_key(""), Code::InvalidRequest),
            (NewTask::new("x").idempotency_key(""), Code::InvalidKey),
            (
                NewTask::new(vec![0; ttw_durable::MAX_PAYLOAD + 1]),
                Code::PayloadTooLarge,
            ),
            (
                NewTask::new("x")
                    .at(std::time::SystemTime::UNIX_EPOCH - std::time::Duration::from_secs(1)),
                Code::InvalidTime,
            ),
            (
                NewTask::new("x").envelope(Envelope::new().traceparent("00-abc-01")),
                Code::InvalidTraceContext,
            ),
            (
                NewTask::new("x").queue("no spaces here"),
                Code::UnknownQueue,
            ),
        ];
        for (task, code) in cases {
            let alone = Refusal::from(store.grouped().schedule(task.clone()).await.unwrap_err());
            assert_eq!(alone.code, code, "{}", alone.message);
            let batch = store.schedule_batch([NewTask::new("fine"), task]).await;
            let refusal = Refusal::from(batch.unwrap_err());
            assert_eq!(refusal.code, code, "{}", refusal.message);
            assert!(
                refusal.message.starts_with("tasks[1]: "),
                "{}",
                refusal.message
            );
            assert!(
                !refusal.message.contains("of the batch"),
                "{}",
                refusal.message
            );
        }
        let debounce = store
            .schedule("x")
            .idempotency_key("k")
            .max_wait(std::time::Duration::ZERO);
        let refusal = Refusal::from(debounce.replace_pending().await.unwrap_err());
        assert_eq!(refusal.code, Code::InvalidDelay, "{}", refusal.message);
        assert_eq!(
            store.counts().await.unwrap().scheduled,
            0,
            "nothing was written"
        );
    }

    #[test]
    fn every_code_is_listed_once_and_spelled_as_it_serializes() {
        let mut seen = std::collections::BTreeSet::new();
        for code in Code::ALL {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::from(code.as_str())
            );
            assert!(seen.insert(code.as_str()), "{code:?} twice");
            assert!(code.status().is_client_error() || code == Code::Unavailable);
        }
    }
}
