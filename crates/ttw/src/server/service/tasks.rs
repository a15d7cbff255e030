//! Tasks: schedule one or a batch, look one up by id or key, cancel or
//! reschedule it, list them by cursor, redrive finished ones, count them.

use std::time::{Duration, SystemTime};

use base64::Engine;
use serde_json::value::RawValue;
use ttw_durable::{NewTask, Scheduled, Store, TaskId, TaskInfo, TaskState};

use super::super::config::Token;
use super::super::refusal::{Answer, Code};
use super::super::wire::MAX_BATCH;
use super::super::wire::{self, NewBatch, NewTime};
use super::{allow_queue, duration, envelope, known_queue, Api};

/// When a task is due: `run_at`, or `delay` from now, or now.
pub(crate) fn due_time(
    run_at: &Option<String>,
    delay: &Option<String>,
) -> Answer<Option<SystemTime>> {
    match (run_at, delay) {
        (Some(_), Some(_)) => Err(Code::InvalidRequest.refuse("give run_at or delay, not both")),
        (Some(text), None) => ttw_durable::parse_time(text)
            .map(Some)
            .map_err(|err| Code::InvalidTime.refuse(format!("run_at: {err}"))),
        (None, Some(text)) => {
            let delay = duration(Code::InvalidDelay, "delay", text)?;
            SystemTime::now()
                .checked_add(delay)
                .map(Some)
                .ok_or_else(|| Code::InvalidDelay.refuse("the delay is too long"))
        }
        (None, None) => Ok(None),
    }
}

/// A payload given as JSON (stored as its text, byte for byte as the
/// request wrote it: key order, spacing and number forms kept) or as
/// base64 bytes, not both; none is empty.
pub(crate) fn decode_payload(
    json: Option<Box<RawValue>>,
    base64: Option<String>,
) -> Answer<Vec<u8>> {
    Ok(match (json, base64) {
        (Some(_), Some(_)) => {
            return Err(Code::InvalidRequest.refuse("give payload or payload_base64, not both"))
        }
        (Some(text), None) => text.get().as_bytes().to_vec(),
        (None, Some(text)) => base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|err| {
                Code::InvalidPayload.refuse(format!("payload_base64 is not base64: {err}"))
            })?,
        (None, None) => Vec::new(),
    })
}

/// A task to schedule, checked: the queue known and allowed, the payload
/// decoded, the time parsed. Nothing is written until every check passed.
pub(crate) struct Checked {
    payload: Vec<u8>,
    at: Option<SystemTime>,
    queue: String,
    priority: Option<i16>,
    max_attempts: Option<u32>,
    key: Option<String>,
    replace_pending: bool,
    max_wait: Option<Duration>,
    partition_key: Option<String>,
    kind: Option<String>,
    envelope: Option<ttw_durable::Envelope>,
}

impl Checked {
    /// The task for a batch or a group.
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
        if let Some(k) = self.kind {
            task = task.kind(k);
        }
        if let Some(e) = self.envelope {
            task = task.envelope(e);
        }
        task
    }

    /// Schedules it alone: a debounce (`replace_pending`, `max_wait`).
    async fn submit(self, store: &Store) -> Result<Scheduled, ttw_durable::Error> {
        let (replace, max_wait) = (self.replace_pending, self.max_wait);
        let mut schedule = store.schedule_task(self.into_new_task());
        if replace {
            schedule = schedule.replace_pending();
        }
        if let Some(wait) = max_wait {
            schedule = schedule.max_wait(wait);
        }
        schedule.submit().await
    }
}

/// The idempotency key of a task: the field's or the header's (the same
/// if both). Its bounds are the store's to check.
fn idempotency_key(field: Option<String>, header: Option<String>) -> Answer<Option<String>> {
    match (field, header) {
        (Some(a), Some(h)) if a != h => {
            Err(Code::InvalidKey.refuse("the Idempotency-Key header and idempotency_key differ"))
        }
        (Some(k), _) | (None, Some(k)) => Ok(Some(k)),
        (None, None) => Ok(None),
    }
}

/// Checks what is HTTP's in a task of a request for `token`: the queue
/// served here and allowed for the token, the body's shape (one payload,
/// one time, a time that parses), the headers beside the fields, and the
/// envelope's destinations allowed for the token. What a task may hold
/// (bounds, attempts, keys, the envelope's form) is the store's check,
/// when it is written: its refusals map to codes in one place
/// (`From<ttw_durable::Error> for Refusal`).
pub(crate) fn check(
    api: &Api,
    token: &Token,
    b: wire::NewTask,
    headers: Headers,
) -> Answer<Checked> {
    let Headers {
        key: header_key,
        traceparent,
        tracestate,
    } = headers;
    let queue = b
        .queue
        .unwrap_or_else(|| ttw_durable::DEFAULT_QUEUE.to_string());
    known_queue(api, &queue)?;
    allow_queue(token, &queue)?;
    if b.kind.is_some() && b.payload_base64.is_some() {
        return Err(Code::InvalidRequest.refuse(
            "a typed job's arguments are its JSON payload: give payload, not payload_base64",
        ));
    }
    let payload = decode_payload(b.payload, b.payload_base64)?;
    let key = idempotency_key(b.idempotency_key, header_key)?;
    let max_wait = match &b.max_wait {
        Some(text) => Some(duration(Code::InvalidDelay, "max_wait", text)?),
        None => None,
    };
    let at = due_time(&b.run_at, &b.delay)?;
    // The fields win over the headers; a tracestate header goes only with
    // the traceparent header.
    let (traceparent, tracestate) = match b.traceparent {
        Some(field) => (Some(field), b.tracestate),
        None => (traceparent, b.tracestate.or(tracestate)),
    };
    let envelope = envelope::check(
        api,
        token,
        &queue,
        envelope::Asked {
            target: b.target,
            traceparent,
            tracestate,
            callback: b.callback,
            failure_callback: b.failure_callback,
        },
    )?;
    Ok(Checked {
        payload,
        at,
        queue,
        priority: b.priority,
        max_attempts: b.max_attempts,
        key,
        replace_pending: b.replace_pending,
        max_wait,
        partition_key: b.partition_key,
        kind: b.kind,
        envelope,
    })
}

/// What a single schedule's request headers say of the task: its
/// `Idempotency-Key` and its W3C trace context.
#[derive(Debug, Default)]
pub(crate) struct Headers {
    pub(crate) key: Option<String>,
    pub(crate) traceparent: Option<String>,
    pub(crate) tracestate: Option<String>,
}

/// Schedules one task: a debounce alone (it reads and replaces a task),
/// any other in the next group: single requests are written in groups, one
/// transaction for all that arrived while the last group was written
/// ([`ttw_durable::Grouped`]).
pub(crate) async fn schedule(
    api: &Api,
    token: &Token,
    task: wire::NewTask,
    headers: Headers,
) -> Answer<Scheduled> {
    let checked = check(api, token, task, headers)?;
    if checked.replace_pending || checked.max_wait.is_some() {
        return Ok(checked.submit(&api.store).await?);
    }
    Ok(api.grouped.schedule(checked.into_new_task()).await?)
}

/// Schedules up to [`MAX_BATCH`] tasks in one transaction, every one or
/// none, each checked first (a refusal names the task: `tasks[3]: ...`).
///
/// The request's `traceparent` and `tracestate` headers apply to every
/// task of the batch that has no `traceparent` field of its own (the
/// field wins, as on a single schedule); an `Idempotency-Key` header is
/// refused (`invalid_key`): one key cannot name many tasks.
pub(crate) async fn schedule_batch(
    api: &Api,
    token: &Token,
    batch: NewBatch,
    headers: Headers,
) -> Answer<Vec<Scheduled>> {
    if headers.key.is_some() {
        return Err(Code::InvalidKey.refuse(
            "an Idempotency-Key header names one task: give each task of a batch its idempotency_key",
        ));
    }
    if batch.tasks.len() > MAX_BATCH {
        return Err(Code::BatchTooLarge.refuse(format!(
            "{} tasks; a batch holds at most {MAX_BATCH}",
            batch.tasks.len()
        )));
    }
    let mut tasks = Vec::with_capacity(batch.tasks.len());
    for (i, task) in batch.tasks.into_iter().enumerate() {
        let what = format!("tasks[{i}]");
        if task.replace_pending || task.max_wait.is_some() {
            return Err(Code::InvalidRequest
                .refuse("replace_pending and max_wait are for single schedules (a debounce)")
                .within(&what));
        }
        let trace = Headers {
            key: None,
            traceparent: headers.traceparent.clone(),
            tracestate: headers.tracestate.clone(),
        };
        let checked = check(api, token, task, trace).map_err(|err| err.within(&what))?;
        tasks.push(checked.into_new_task());
    }
    Ok(api.store.schedule_batch(tasks).await?)
}

/// A task named in a path: by id (`/v1/tasks/{id}`) or by idempotency
/// key (`/v1/keys/{key}`).
pub(crate) enum Named {
    Id(String),
    Key(String),
}

/// A task id as a path writes it: 400 `invalid_id` unless a positive
/// integer.
pub(crate) fn parse_id(text: &str) -> Answer<TaskId> {
    text.parse::<i64>()
        .ok()
        .filter(|&id| id > 0)
        .map(TaskId::new)
        .ok_or_else(|| Code::InvalidId.refuse(format!("{text:?} is not a task id")))
}

/// The task `named` names: 404 if there is none, or if it is in a queue
/// the token may not use (which is not told apart).
pub(crate) async fn find(api: &Api, token: &Token, named: Named) -> Answer<TaskInfo> {
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
        _ => Err(Code::NotFound.refuse(what)),
    }
}

/// Redrives the task `id` names, if it is dead: due at once, its attempts
/// reset.
pub(crate) async fn redrive_one(api: &Api, token: &Token, id: String) -> Answer<TaskId> {
    let info = find(api, token, Named::Id(id)).await?;
    if api.store.redrive(info.id).await? {
        return Ok(info.id);
    }
    let state = match api.store.get(info.id).await {
        Ok(Some(now)) => now.state,
        _ => info.state,
    };
    Err(Code::NotDead.refuse(format!("task {} is {state}, not dead", info.id)))
}

/// A change to a pending task that did not happen: 409 `not_scheduled`,
/// with the state it is in now.
async fn not_scheduled(api: &Api, info: TaskInfo) -> Answer<TaskId> {
    let info = match api.store.get(info.id).await {
        Ok(Some(now)) => now,
        _ => info,
    };
    Err(Code::NotScheduled.refuse(format!("task {} is {}, not scheduled", info.id, info.state)))
}

/// Cancels the task `named` names, if it is pending.
pub(crate) async fn cancel(api: &Api, token: &Token, named: Named) -> Answer<TaskId> {
    let info = find(api, token, named).await?;
    if api.store.cancel(info.id).await? {
        Ok(info.id)
    } else {
        not_scheduled(api, info).await
    }
}

/// Moves the task `named` names to the new time, if it is pending.
pub(crate) async fn reschedule(
    api: &Api,
    token: &Token,
    named: Named,
    to: NewTime,
) -> Answer<TaskId> {
    let info = find(api, token, named).await?;
    let at = due_time(&to.run_at, &to.delay)?
        .ok_or_else(|| Code::InvalidRequest.refuse("give run_at or delay"))?;
    if api.store.reschedule(info.id, at).await? {
        Ok(info.id)
    } else {
        not_scheduled(api, info).await
    }
}

/// A state named in a request: 400 `invalid_state` otherwise.
pub(crate) fn state(text: &str) -> Answer<TaskState> {
    text.parse()
        .map_err(|err: ttw_durable::ParseStateError| Code::InvalidState.refuse(err.to_string()))
}

/// An RFC 3339 time of a query.
pub(crate) fn time(field: &str, text: &str) -> Answer<SystemTime> {
    ttw_durable::parse_time(text).map_err(|err| Code::InvalidTime.refuse(format!("{field}: {err}")))
}

#[cfg(test)]
mod tests;
