//! The wire of a pull queue: a claim's request and the tasks it hands out,
//! and the settles of a claim (ack, nack, extend) with their answer.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use ttw_durable::Leased;
use utoipa::ToSchema;

use super::{payload_views, rfc3339};

// The bounds the schemas state, held to the ones the server enforces.
const _: () = assert!(ttw_durable::MAX_CLAIM == 100);
const _: () = assert!(ttw_durable::MAX_WORKER_NAME == 128);

/// A claim: up to `max` due tasks of the queue, each leased to `worker`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimRequest {
    /// Who claims: named in the attempt history and the console.
    #[schema(min_length = 1, max_length = 128, example = "worker-7")]
    pub(crate) worker: String,
    /// At most this many tasks (default 1).
    #[schema(minimum = 1, maximum = 100)]
    pub(crate) max: Option<u32>,
    /// How long to wait for a task to fall due when none is (default
    /// `0s`: answer at once), at most `60s`. The answer comes the moment
    /// one falls due, or empty at the end.
    #[schema(example = "20s")]
    pub(crate) wait: Option<String>,
    /// How long each task is held (default `30s`), `1s` to `12h`: unless
    /// acked, nacked or extended by then, it is due again.
    #[schema(example = "5m")]
    pub(crate) lease: Option<String>,
    /// Only tasks of these kinds (typed jobs this worker knows).
    pub(crate) kinds: Option<Vec<String>>,
}

/// The tasks a claim handed out (none when nothing fell due in `wait`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClaimedList {
    pub(crate) tasks: Vec<ClaimedTask>,
}

/// A task a worker holds.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClaimedTask {
    pub(crate) id: i64,
    /// Which attempt this is, from 1.
    pub(crate) attempt: u32,
    /// What the ack, nack or extend of this attempt names.
    pub(crate) claim: String,
    /// When the lease runs out unless extended.
    #[schema(format = DateTime)]
    pub(crate) lease_until: String,
    /// The same on every delivery of the task (as a webhook's
    /// `webhook-id`): deduplicate by it.
    pub(crate) message_id: String,
    pub(crate) queue: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    /// When it was due.
    #[schema(format = DateTime)]
    pub(crate) run_at: String,
    pub(crate) priority: i16,
    #[schema(content_encoding = "base64")]
    pub(crate) payload_base64: String,
    /// The payload, when it is JSON, as it was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub(crate) payload: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) idempotency_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tracestate: Option<String>,
}

impl From<&Leased> for ClaimedTask {
    fn from(held: &Leased) -> ClaimedTask {
        let task = held.task();
        let (payload_base64, payload) = payload_views(task.payload());
        let envelope = task.envelope();
        ClaimedTask {
            id: task.id().get(),
            attempt: task.attempt(),
            claim: held.claim().to_string(),
            lease_until: rfc3339(held.lease_until()),
            message_id: task.message_id(),
            queue: task.queue().to_string(),
            kind: task.kind().map(str::to_string),
            run_at: rfc3339(task.run_at()),
            priority: task.priority(),
            payload_base64,
            payload,
            partition_key: held.partition_key().map(str::to_string),
            idempotency_key: task.idempotency_key().map(str::to_string),
            traceparent: envelope
                .and_then(|e| e.get_traceparent())
                .map(str::to_string),
            tracestate: envelope
                .and_then(|e| e.get_tracestate())
                .map(str::to_string),
        }
    }
}

/// The workers that claimed from a pull queue in the last day.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WorkerList {
    pub(crate) workers: Vec<WorkerView>,
}

/// A worker of a pull queue.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WorkerView {
    /// Its name, as its claims gave it.
    pub(crate) worker: String,
    /// When it last claimed (a long poll: when it began, or last looked).
    #[schema(format = DateTime)]
    pub(crate) last_seen: String,
    /// The tasks it holds now.
    pub(crate) held: u64,
}

impl From<&ttw_durable::WorkerInfo> for WorkerView {
    fn from(w: &ttw_durable::WorkerInfo) -> WorkerView {
        WorkerView {
            worker: w.worker.clone(),
            last_seen: rfc3339(w.last_seen),
            held: w.held,
        }
    }
}

/// An ack: the attempt succeeded.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckRequest {
    /// The claim the task was handed out with.
    pub(crate) claim: String,
    /// Kept as the attempt's answer (its first 1,024 bytes).
    pub(crate) answer: Option<String>,
}

/// A nack: the attempt failed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NackRequest {
    pub(crate) claim: String,
    /// Why, kept as the attempt's error.
    pub(crate) error: String,
    /// Retry after this long (`30s`, `5m`), not the queue's backoff.
    pub(crate) retry_in: Option<String>,
    /// Give up: the task is dead now, whatever attempts are left.
    pub(crate) dead: Option<bool>,
}

/// An extend: the work goes on; hold the task longer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExtendRequest {
    pub(crate) claim: String,
    /// The lease from now, `1s` to `12h`.
    #[schema(example = "5m")]
    pub(crate) lease: String,
}

/// What a settle did.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SettleOutcome {
    /// Acked: the task is done.
    Done,
    /// Nacked: due again at `run_at`.
    Retry,
    /// Nacked: out of attempts, or given up.
    Dead,
    /// The lease now ends at `lease_until`.
    Extended,
}

/// A settled claim.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SettledView {
    pub(crate) id: i64,
    pub(crate) outcome: SettleOutcome,
    /// A retry's due time.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub(crate) run_at: Option<String>,
    /// An extended lease's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub(crate) lease_until: Option<String>,
}
