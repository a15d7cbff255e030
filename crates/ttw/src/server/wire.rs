//! What goes over the wire: every request body and query the API takes
//! and every answer it gives, as `serde` types. The OpenAPI document's
//! schemas are derived from these (`utoipa`), so a field, a bound or a
//! description is written once, here. Bounds are literals in the schema
//! attributes; the `const` assertions below hold each to the constant the
//! server enforces, and the bounds test in `routes.rs` sends a request at
//! each one, inside and out.

use std::collections::BTreeMap;
use std::time::SystemTime;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use ttw_durable::{
    AttemptInfo, AttemptOutcome, CatchUp, QueueSettings, RecurringInfo, Scheduled, StateCounts,
    TaskInfo, TaskState,
};
use utoipa::ToSchema;

// The bounds the schemas state, held to the ones the server enforces.
const _: () = assert!(ttw_durable::MAX_IDEMPOTENCY_KEY == 1024);
const _: () = assert!(ttw_durable::MAX_PARTITION_KEY == 128);
const _: () = assert!(ttw_durable::MAX_PAGE == 1000);
const _: () = assert!(ttw_durable::MAX_LIMIT == 1_000_000);

mod pull;
pub(crate) use pull::*;

/// The most tasks one batch request schedules (`NewBatch`'s `maxItems`).
pub(crate) const MAX_BATCH: usize = 1_000;

/// One task to schedule.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTask {
    /// Any JSON value: kept as its JSON text, byte for byte as the request
    /// wrote it, and delivered as that text. Not with `payload_base64`;
    /// neither: an empty payload.
    #[schema(value_type = Option<serde_json::Value>)]
    pub(crate) payload: Option<Box<RawValue>>,
    /// The payload as bytes, in standard base64 (at most 1 MiB decoded).
    #[schema(content_encoding = "base64")]
    pub(crate) payload_base64: Option<String>,
    /// When it is due: RFC 3339 with any offset (`2026-12-01T10:00:00Z`,
    /// `2026-12-01T11:00:00.000+01:00`), 1970 to 9999. Not with `delay`;
    /// neither: now.
    #[schema(format = DateTime)]
    pub(crate) run_at: Option<String>,
    /// Due this long from now: `"15m"`, `"1h 30m"`, `"250ms"`.
    #[schema(example = "15m")]
    pub(crate) delay: Option<String>,
    /// A queue of the server's configuration (default `default`).
    pub(crate) queue: Option<String>,
    /// Among tasks due together, the lower runs first (default 0).
    #[schema(minimum = -32768, maximum = 32767)]
    pub(crate) priority: Option<i16>,
    /// Attempts before it is dead (default: the queue's, else the
    /// server's).
    #[schema(minimum = 1, maximum = 4294967295_u64)]
    pub(crate) max_attempts: Option<u32>,
    /// At most one pending task has it; scheduling it again answers that
    /// task (`existing`). Same as the `Idempotency-Key` header.
    #[schema(min_length = 1, max_length = 1024)]
    pub(crate) idempotency_key: Option<String>,
    /// With a key: replace the pending task of the key (a debounce).
    #[serde(default)]
    pub(crate) replace_pending: bool,
    /// With `replace_pending`: the longest a debounced task is put off
    /// from its first schedule (`"2s"`).
    pub(crate) max_wait: Option<String>,
    /// A tenant or customer: keys take turns for a queue's places, and a
    /// queue may cap each.
    #[schema(min_length = 1, max_length = 128)]
    pub(crate) partition_key: Option<String>,
    /// The kind of a typed job (its arguments are the JSON `payload`):
    /// shown and filtered on wherever a task is, and what its queue's
    /// workers dispatch on. ASCII letters, digits, `_`, `-`, `.`, `:`.
    #[schema(min_length = 1, max_length = 64)]
    pub(crate) kind: Option<String>,
    /// Deliver this task here rather than to its queue's webhook endpoint,
    /// signed as every delivery (`destination_not_allowed` unless the URL
    /// is under one of the token's `destinations`, and the queue is
    /// delivered by webhook).
    pub(crate) target: Option<TargetSpec>,
    /// The W3C trace context of the scheduling request (as the
    /// `traceparent` header, which is read when the field is absent): sent
    /// with every delivery of the task.
    #[schema(example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]
    pub(crate) traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent` (at most 512
    /// bytes).
    #[schema(max_length = 512)]
    pub(crate) tracestate: Option<String>,
    /// Told of the outcome once the task is done: a `POST` of the outcome
    /// (`CallbackOutcome`) by a task of its own in the same queue, signed and
    /// retried as every delivery, with the header `ttw-outcome-of`. The
    /// same allowlist as `target`.
    #[schema(example = "https://billing.internal/hooks/done")]
    pub(crate) callback: Option<String>,
    /// Told of the outcome once the task is dead (out of attempts, or
    /// refused for good), as `callback` is.
    pub(crate) failure_callback: Option<String>,
}

/// What a `callback` or `failure_callback` receives: the outcome of the
/// task it tells of (the task named by the header `ttw-outcome-of`).
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub(crate) struct CallbackOutcome {
    /// The task told of.
    pub(crate) id: i64,
    pub(crate) queue: String,
    /// Its kind, if it is a typed job.
    pub(crate) kind: Option<String>,
    /// `done` or `dead`.
    #[schema(example = "done")]
    pub(crate) state: String,
    /// The attempts it took.
    pub(crate) attempts: u32,
    /// The HTTP status of its last answer, if it had one.
    pub(crate) status: Option<u16>,
    /// A done task's answer: its first 1,024 bytes.
    pub(crate) answer: Option<String>,
    /// A dead task's last error.
    pub(crate) error: Option<String>,
    /// When it finished, in milliseconds since the Unix epoch.
    pub(crate) finished_at: i64,
}

/// Where one task is delivered, in place of its queue's webhook endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TargetSpec {
    /// An `http` or `https` URL.
    pub(crate) url: String,
    /// `POST` (default), `PUT`, `PATCH`, `DELETE` or `GET` (no body).
    pub(crate) method: Option<String>,
    /// Headers of its own (at most 16; not `webhook-*`, `ttw-*`,
    /// `traceparent`, `tracestate`, `host`, `content-length`,
    /// `connection`, `transfer-encoding`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) headers: BTreeMap<String, String>,
}

/// Up to 1,000 tasks, scheduled in one transaction: every one or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewBatch {
    /// The tasks (no `replace_pending` in a batch).
    #[schema(max_items = 1000)]
    pub(crate) tasks: Vec<NewTask>,
}

/// A new due time: `run_at` or `delay`, one of them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTime {
    /// RFC 3339 with any offset.
    #[schema(format = DateTime)]
    pub(crate) run_at: Option<String>,
    /// From now: `"15m"`.
    pub(crate) delay: Option<String>,
}

/// What a schedule did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// A new task (201).
    Created,
    /// The pending task of the idempotency key, unchanged (200).
    Existing,
    /// The pending task of the key, replaced (200, `replace_pending`).
    Replaced,
}

/// A task scheduled.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ScheduledView {
    /// The task's id.
    pub(crate) id: i64,
    pub(crate) outcome: Outcome,
}

impl From<Scheduled> for ScheduledView {
    fn from(s: Scheduled) -> ScheduledView {
        let outcome = match s {
            Scheduled::Created(_) => Outcome::Created,
            Scheduled::Existing(_) => Outcome::Existing,
            Scheduled::Replaced(_) => Outcome::Replaced,
        };
        ScheduledView {
            id: s.id().get(),
            outcome,
        }
    }
}

/// A batch scheduled, in the order of the request.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BatchView {
    pub(crate) tasks: Vec<ScheduledView>,
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StateName {
    Scheduled,
    Running,
    Done,
    Dead,
    Cancelled,
}

impl From<TaskState> for StateName {
    fn from(s: TaskState) -> StateName {
        match s {
            TaskState::Scheduled => StateName::Scheduled,
            TaskState::Running => StateName::Running,
            TaskState::Done => StateName::Done,
            TaskState::Dead => StateName::Dead,
            _ => StateName::Cancelled,
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum OutcomeName {
    /// Running now.
    Running,
    /// Succeeded: the task is done.
    Done,
    /// Failed; the task was scheduled again.
    Failed,
    /// Failed, and the task is dead.
    Dead,
    /// Cut short without an outcome (its node died, or its lock ran out);
    /// the task was taken back and delivered again.
    Interrupted,
    /// A worker's lease ran out before it settled its claim; the task was
    /// due again.
    Expired,
}

impl From<AttemptOutcome> for OutcomeName {
    fn from(o: AttemptOutcome) -> OutcomeName {
        match o {
            AttemptOutcome::Running => OutcomeName::Running,
            AttemptOutcome::Done => OutcomeName::Done,
            AttemptOutcome::Failed => OutcomeName::Failed,
            AttemptOutcome::Dead => OutcomeName::Dead,
            AttemptOutcome::Expired => OutcomeName::Expired,
            _ => OutcomeName::Interrupted,
        }
    }
}

/// One attempt of a task.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptView {
    /// Its number since the task was scheduled or last redriven (1 first).
    pub(crate) attempt: u32,
    /// The task's claim count at this attempt: unique over the task's life.
    pub(crate) claim: i64,
    pub(crate) outcome: OutcomeName,
    /// The node that ran it, when known.
    pub(crate) node: Option<String>,
    /// When it was claimed, when known.
    #[schema(format = DateTime)]
    pub(crate) started_at: Option<String>,
    /// When its outcome was written (absent while running).
    #[schema(format = DateTime)]
    pub(crate) ended_at: Option<String>,
    /// How long it took, in milliseconds, when both ends are known.
    pub(crate) duration_ms: Option<u64>,
    /// The answer's HTTP status, when the target reported one.
    pub(crate) status: Option<u16>,
    /// The answer's first bytes (a success) or the error (a failure), at
    /// most 1,024 bytes.
    pub(crate) detail: Option<String>,
}

impl From<&AttemptInfo> for AttemptView {
    fn from(a: &AttemptInfo) -> AttemptView {
        AttemptView {
            attempt: a.attempt,
            claim: a.claim,
            outcome: a.outcome.into(),
            node: a.node.clone(),
            started_at: a.started_at.map(rfc3339),
            ended_at: a.ended_at.map(rfc3339),
            duration_ms: a
                .duration()
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            status: a.status,
            detail: a.detail.clone(),
        }
    }
}

/// One task as `ttw --json` prints it: the service's own view, as
/// `GET /v1/tasks/{id}` answers (one shape of a task everywhere).
pub(crate) fn task_json(t: &TaskInfo) -> serde_json::Value {
    serde_json::to_value(TaskView::from(t)).unwrap_or_default()
}

/// One attempt as `ttw --json` prints it, as in
/// `GET /v1/tasks/{id}/attempts`.
pub(crate) fn attempt_json(a: &AttemptInfo) -> serde_json::Value {
    serde_json::to_value(AttemptView::from(a)).unwrap_or_default()
}

/// A task's attempts, oldest first (the latest 1,000 at most).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptsView {
    pub(crate) id: i64,
    pub(crate) attempts: Vec<AttemptView>,
}

/// A time as the API writes it: RFC 3339 in UTC, to the millisecond.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    crate::output::time(t)
}

/// A payload as the API shows it: its bytes in base64, and the JSON value
/// itself when it is JSON (as it was written).
pub(crate) fn payload_views(payload: &[u8]) -> (String, Option<Box<RawValue>>) {
    (
        base64::engine::general_purpose::STANDARD.encode(payload),
        serde_json::from_slice(payload).ok(),
    )
}

/// A task.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TaskView {
    pub(crate) id: i64,
    pub(crate) state: StateName,
    /// When it is (or was) due.
    #[schema(format = DateTime)]
    pub(crate) run_at: String,
    /// When it was scheduled.
    #[schema(format = DateTime)]
    pub(crate) created_at: String,
    /// When its row last changed.
    #[schema(format = DateTime)]
    pub(crate) updated_at: String,
    /// When it finished, if it has.
    #[schema(format = DateTime)]
    pub(crate) finished_at: Option<String>,
    /// Attempts begun.
    pub(crate) attempts: u32,
    pub(crate) max_attempts: Option<u32>,
    /// The last failed attempt's error.
    pub(crate) last_error: Option<String>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) queue: String,
    pub(crate) priority: i16,
    /// The payload's bytes, in standard base64.
    #[schema(content_encoding = "base64")]
    pub(crate) payload_base64: String,
    /// The payload, when it is JSON, as it was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub(crate) payload: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition_key: Option<String>,
    /// The kind of a typed job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    /// Its own destination, if it was scheduled with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<TargetSpec>,
    /// The trace context it was scheduled with, sent with each delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tracestate: Option<String>,
    /// Told of its outcome once done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) callback: Option<String>,
    /// Told of its outcome once dead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) failure_callback: Option<String>,
    /// On a task that tells a callback of another's outcome, that task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome_of: Option<i64>,
    /// While a worker holds it (a pull queue's claim): the worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worker: Option<String>,
    /// While a worker holds it: when its lease runs out unless extended.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub(crate) lease_until: Option<String>,
}

impl From<&TaskInfo> for TaskView {
    fn from(info: &TaskInfo) -> TaskView {
        let (payload_base64, payload) = payload_views(&info.payload);
        let envelope = info.envelope.as_ref();
        TaskView {
            id: info.id.get(),
            state: info.state.into(),
            run_at: rfc3339(info.run_at),
            created_at: rfc3339(info.created_at),
            updated_at: rfc3339(info.updated_at),
            finished_at: info.finished_at.map(rfc3339),
            attempts: info.attempts,
            max_attempts: info.max_attempts,
            last_error: info.last_error.clone(),
            idempotency_key: info.idempotency_key.clone(),
            queue: info.queue.clone(),
            priority: info.priority,
            payload_base64,
            payload,
            partition_key: info.partition_key.clone(),
            kind: info.kind.clone(),
            target: envelope
                .and_then(|e| e.get_destination())
                .map(|d| TargetSpec {
                    url: d.url().to_string(),
                    method: Some(d.get_method().to_string()),
                    headers: d.headers().iter().cloned().collect(),
                }),
            traceparent: text(envelope.and_then(|e| e.get_traceparent())),
            tracestate: text(envelope.and_then(|e| e.get_tracestate())),
            callback: text(envelope.and_then(|e| e.get_callback())),
            failure_callback: text(envelope.and_then(|e| e.get_failure_callback())),
            outcome_of: envelope.and_then(|e| e.outcome_of()).map(|id| id.get()),
            worker: info.worker.clone(),
            lease_until: info.lease_until.map(rfc3339),
        }
    }
}

fn text(s: Option<&str>) -> Option<String> {
    s.map(str::to_string)
}

/// A page of tasks, in id order.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PageView {
    pub(crate) tasks: Vec<TaskView>,
    /// Pass it back as `cursor` for the next page; absent on the last.
    pub(crate) next_cursor: Option<String>,
}

/// A task cancelled.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CancelledView {
    pub(crate) id: i64,
    pub(crate) cancelled: bool,
}

/// A task moved to its new due time.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RescheduledView {
    pub(crate) id: i64,
    pub(crate) rescheduled: bool,
}

/// Tasks of one queue, per state.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CountsView {
    pub(crate) scheduled: u64,
    pub(crate) running: u64,
    pub(crate) done: u64,
    pub(crate) dead: u64,
    pub(crate) cancelled: u64,
    /// How late its oldest due scheduled task is (absent when none is
    /// due).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) late_ms: Option<u64>,
    /// The states whose figure is not exact: the store is large, and the
    /// count of this page stopped at 10,000 (of pending tasks per state,
    /// of finished ones among the newest); the figure is the larger of
    /// that and the last full count's (see `counted_at`). Absent when
    /// every figure is exact.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<StateName>)]
    pub(crate) estimated: Vec<String>,
    /// Tasks done per second by every node over the last minute (from the
    /// history of finished tasks; over the span of the newest 100,000 when
    /// more finished in that minute).
    pub(crate) done_per_s: f64,
}

impl From<StateCounts> for CountsView {
    fn from(c: StateCounts) -> CountsView {
        CountsView {
            scheduled: c.scheduled,
            running: c.running,
            done: c.done,
            dead: c.dead,
            cancelled: c.cancelled,
            late_ms: None,
            estimated: Vec::new(),
            done_per_s: 0.0,
        }
    }
}

/// Tasks per queue (the queues the token may use) and state.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueCountsView {
    pub(crate) queues: BTreeMap<String, CountsView>,
    /// When the full count behind an `estimated` figure was taken (a
    /// count of every task, run in the background, again after twenty
    /// times its own duration: 10 s to 30 min). Absent when no figure is
    /// from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub(crate) counted_at: Option<String>,
}

/// A recurring schedule's definition: `cron` (with `time_zone`) or
/// `every`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewRecurring {
    /// A cron expression: 5 fields, or 6 with seconds.
    #[schema(example = "0 10 * * *")]
    pub(crate) cron: Option<String>,
    /// The cron's time zone (an IANA name); UTC if absent.
    pub(crate) time_zone: Option<String>,
    /// Or an interval: `"30s"`, `"1h"`.
    pub(crate) every: Option<String>,
    /// Each occurrence's payload, as for a task.
    #[schema(value_type = Option<serde_json::Value>)]
    pub(crate) payload: Option<Box<RawValue>>,
    #[schema(content_encoding = "base64")]
    pub(crate) payload_base64: Option<String>,
    pub(crate) queue: Option<String>,
    #[schema(minimum = -32768, maximum = 32767)]
    pub(crate) priority: Option<i16>,
    #[schema(minimum = 1, maximum = 4294967295_u64)]
    pub(crate) max_attempts: Option<u32>,
    /// Every occurrence is a typed job of this kind (its arguments the
    /// JSON `payload`).
    #[schema(min_length = 1, max_length = 64)]
    pub(crate) kind: Option<String>,
    /// Occurrences missed while no node ran: skip (default), last or all.
    #[schema(value_type = Option<CatchUpName>)]
    pub(crate) catch_up: Option<String>,
    /// How late an occurrence may still be made a task.
    pub(crate) missed_after: Option<String>,
}

/// Occurrences missed while no node ran.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CatchUpName {
    /// None of them.
    Skip,
    /// The last one.
    Last,
    /// Every one (up to a thousand).
    All,
}

impl From<CatchUp> for CatchUpName {
    fn from(c: CatchUp) -> CatchUpName {
        match c {
            CatchUp::Skip => CatchUpName::Skip,
            CatchUp::Last => CatchUpName::Last,
            _ => CatchUpName::All,
        }
    }
}

/// A recurring schedule.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RecurringView {
    pub(crate) name: String,
    pub(crate) cron: Option<String>,
    pub(crate) time_zone: Option<String>,
    /// The interval, as `"1h 30m"`.
    pub(crate) every: Option<String>,
    pub(crate) catch_up: CatchUpName,
    pub(crate) missed_after: String,
    pub(crate) paused: bool,
    /// Its next occurrence.
    #[schema(format = DateTime)]
    pub(crate) next_at: String,
    /// Its next five occurrences, `next_at` first.
    pub(crate) next: Vec<String>,
    pub(crate) queue: String,
    pub(crate) priority: i16,
    pub(crate) max_attempts: Option<u32>,
    /// Its occurrences' kind, if they are typed jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    #[schema(content_encoding = "base64")]
    pub(crate) payload_base64: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub(crate) payload: Option<Box<RawValue>>,
}

impl From<&RecurringInfo> for RecurringView {
    fn from(info: &RecurringInfo) -> RecurringView {
        let (payload_base64, payload) = payload_views(&info.payload);
        RecurringView {
            name: info.name.clone(),
            cron: info.cron.clone(),
            time_zone: info.time_zone.clone(),
            every: info
                .every
                .map(|d| humantime::format_duration(d).to_string()),
            catch_up: info.catch_up.into(),
            missed_after: humantime::format_duration(info.missed_after).to_string(),
            paused: info.paused,
            next_at: rfc3339(info.next_at),
            next: info.next_occurrences(5).into_iter().map(rfc3339).collect(),
            queue: info.queue.clone(),
            priority: info.priority,
            max_attempts: info.max_attempts,
            kind: info.kind.clone(),
            payload_base64,
            payload,
        }
    }
}

/// Every recurring schedule the token may see.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RecurringList {
    pub(crate) recurring: Vec<RecurringView>,
}

/// What `PUT /v1/recurring/{name}` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RecurringOutcome {
    /// A new schedule (201).
    Created,
    /// The schedule now has this definition (200).
    Updated,
    /// It had this definition already (200).
    Unchanged,
}

/// A recurring schedule put.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RecurringPut {
    pub(crate) name: String,
    pub(crate) outcome: RecurringOutcome,
}

/// A change to a recurring schedule: `paused`, `resumed` or `deleted`,
/// false if it was so already.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RecurringChanged {
    pub(crate) name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) paused: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resumed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) deleted: Option<bool>,
}

impl RecurringChanged {
    pub(crate) fn new(name: String) -> RecurringChanged {
        RecurringChanged {
            name,
            paused: None,
            resumed: None,
            deleted: None,
        }
    }

    pub(crate) fn paused(mut self, changed: bool) -> Self {
        self.paused = Some(changed);
        self
    }

    pub(crate) fn resumed(mut self, changed: bool) -> Self {
        self.resumed = Some(changed);
        self
    }

    pub(crate) fn deleted(mut self, changed: bool) -> Self {
        self.deleted = Some(changed);
        self
    }
}

/// A queue's limits, replacing its own (an absent or `null` one is
/// cleared).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewLimits {
    /// Tasks running at once, over every node.
    #[schema(minimum = 1, maximum = 1000000)]
    pub(crate) concurrency: Option<i64>,
    /// Starts over every node.
    pub(crate) rate: Option<NewRate>,
    /// Tasks of one partition key running at once.
    #[schema(minimum = 1, maximum = 1000000)]
    pub(crate) per_key_concurrency: Option<i64>,
}

/// `count` starts every `per`, in bursts of up to `burst`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewRate {
    #[schema(minimum = 1, maximum = 1000000)]
    pub(crate) count: i64,
    /// A duration: `"1s"`, `"500ms"`.
    pub(crate) per: String,
    /// Default `count`.
    #[schema(minimum = 1, maximum = 1000000)]
    pub(crate) burst: Option<i64>,
}

/// A queue's retry policy, over each node's own (an absent part is
/// cleared).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewRetry {
    #[schema(minimum = 1, maximum = 1000000)]
    pub(crate) max_attempts: Option<i64>,
    pub(crate) backoff: Option<NewBackoff>,
}

/// `base` after the first failure, doubling up to `max` (durations).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewBackoff {
    pub(crate) base: String,
    pub(crate) max: String,
}

/// A queue's settings, as every node obeys them.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueView {
    pub(crate) queue: String,
    pub(crate) paused: bool,
    pub(crate) concurrency: Option<u32>,
    pub(crate) per_key_concurrency: Option<u32>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<BackoffView>,
    pub(crate) rate: Option<RateView>,
    /// A pull queue: its due tasks wait for workers to claim them.
    pub(crate) pull: bool,
}

/// A backoff, in milliseconds.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BackoffView {
    pub(crate) base_ms: u64,
    pub(crate) max_ms: u64,
}

/// A rate: `count` starts every `period_ms`, bursts of `burst`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RateView {
    pub(crate) count: u32,
    pub(crate) period_ms: u64,
    pub(crate) burst: u32,
}

impl From<&QueueSettings> for QueueView {
    fn from(s: &QueueSettings) -> QueueView {
        QueueView {
            queue: s.queue.clone(),
            paused: s.paused,
            concurrency: s.limits.concurrency_limit(),
            per_key_concurrency: s.limits.per_key_limit(),
            max_attempts: s.retry.max_attempts_limit(),
            backoff: s.retry.backoff_policy().map(|b| BackoffView {
                base_ms: b.base_delay().as_millis() as u64,
                max_ms: b.max_delay().as_millis() as u64,
            }),
            rate: s.limits.rate_limit().map(|r| RateView {
                count: r.count(),
                period_ms: r.period().as_millis() as u64,
                burst: r.burst_size(),
            }),
            pull: false,
        }
    }
}

/// The queues the token may see.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct QueueList {
    pub(crate) queues: Vec<QueueView>,
}

/// The process (`ok`) or the database (`ready`) answers.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    #[schema(example = "ok")]
    pub(crate) status: &'static str,
}
