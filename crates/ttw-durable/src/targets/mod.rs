//! Delivery beyond the scheduler's process: a [`Target`] is what a queue's
//! deliveries go to when they are not a Rust closure. Two are built in,
//! each behind a cargo feature: [`Webhook`] (feature `webhook`: a signed
//! HTTP `POST`) and [`JetStream`] (feature `nats`: a NATS JetStream publish,
//! done once the stream acknowledges it).
//!
//! A target is an ordinary handler to the rest of the scheduler: it is bound
//! to a queue with [`SchedulerBuilder::deliver`](crate::SchedulerBuilder::deliver),
//! its tasks are claimed, fenced, retried and marked dead as any other's,
//! and it runs under the scheduler's `callback_timeout` as well as its own.
//!
//! Every delivery carries the same identifying fields, as HTTP headers or
//! NATS message headers: [`MESSAGE_ID`] in the target's own header
//! (`webhook-id`, `Nats-Msg-Id`), and [`TASK_ID`], [`ATTEMPT`], [`QUEUE`],
//! [`RUN_AT`] and, when the task has them, [`IDEMPOTENCY_KEY`] and the W3C
//! trace context it was scheduled with ([`TRACEPARENT`], [`TRACESTATE`]), so
//! that a trace runs from the request that scheduled a task to the handler
//! that runs it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::model::attempt::Task;
use crate::model::attempts::Receipt;
use crate::model::failure::Failure;
use crate::model::time::ms;

#[cfg(feature = "nats")]
mod jetstream;
#[cfg(feature = "webhook")]
mod webhook;

#[cfg(feature = "nats")]
pub use jetstream::{JetStream, JetStreamBuilder};
#[cfg(feature = "webhook")]
pub use webhook::{verify_webhook, Webhook, WebhookBuilder};

/// What a target's delivery of one task comes to: `Ok` marks it done, with
/// a [`Receipt`] kept in the attempt's history (the answer's status and
/// first bytes; [`Receipt::none`] says nothing more), a [`Failure`] is a
/// failed attempt.
pub type Delivered = Pin<Box<dyn Future<Output = Result<Receipt, Failure>> + Send + 'static>>;

/// Where a queue's deliveries go: see the [module](self) and
/// [`SchedulerBuilder::deliver`](crate::SchedulerBuilder::deliver).
///
/// # Examples
///
/// A target of one's own: deliveries counted into an atomic.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use ttw_durable::{Delivered, Receipt, Scheduler, Store, Target, Task};
///
/// struct Count(Arc<AtomicUsize>);
///
/// impl Target for Count {
///     fn deliver(&self, _task: Task) -> Delivered {
///         let count = self.0.clone();
///         Box::pin(async move {
///             count.fetch_add(1, Ordering::SeqCst);
///             Ok(Receipt::none())
///         })
///     }
///     fn timeout(&self) -> Duration {
///         Duration::from_secs(1)
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// let count = Arc::new(AtomicUsize::new(0));
/// let scheduler = Scheduler::builder(store.clone())
///     .deliver("counted", Count(count.clone()))
///     .start_queues()
///     .await?;
/// store.schedule(b"x".to_vec()).queue("counted").await?;
/// while count.load(Ordering::SeqCst) == 0 {
///     tokio::time::sleep(Duration::from_millis(5)).await;
/// }
/// scheduler.shutdown().await?;
/// # Ok(())
/// # }
/// ```
pub trait Target: Send + Sync + 'static {
    /// Delivers one attempt of `task`.
    fn deliver(&self, task: Task) -> Delivered;

    /// The longest one delivery may take; the target ends it then, as a
    /// failed attempt. `start` refuses a target whose timeout is longer
    /// than the scheduler's `callback_timeout`, since the scheduler could
    /// not fence a delivery that outlives it.
    fn timeout(&self) -> Duration;

    /// The most deliveries of a queue bound to this target in flight at
    /// once on one node, if the target has a limit: the queue's
    /// [`queue_concurrency`](crate::SchedulerBuilder::queue_concurrency),
    /// unless one is given explicitly. Tasks beyond it wait unclaimed.
    fn max_in_flight(&self) -> Option<usize> {
        None
    }
}

/// The header holding a task's id.
pub const TASK_ID: &str = "ttw-task-id";
/// The header holding the attempt number, from 1.
pub const ATTEMPT: &str = "ttw-attempt";
/// The header holding the task's queue.
pub const QUEUE: &str = "ttw-queue";
/// The header holding when the task was due, in milliseconds since the
/// Unix epoch.
pub const RUN_AT: &str = "ttw-run-at";
/// The header holding the task's idempotency key, when it has one.
pub const IDEMPOTENCY_KEY: &str = "ttw-idempotency-key";
/// The header holding a typed job's kind ([`Task::kind`]).
pub const KIND: &str = "ttw-kind";
/// What [`Task::message_id`] is sent as, besides the target's own id
/// header: the same value.
pub const MESSAGE_ID: &str = "ttw-message-id";
/// The W3C trace context header of the request that scheduled the task,
/// when it was scheduled with one ([`Envelope::traceparent`](crate::Envelope::traceparent)).
pub const TRACEPARENT: &str = "traceparent";
/// The W3C `tracestate` that goes with [`TRACEPARENT`], when there is one.
pub const TRACESTATE: &str = "tracestate";
/// On a delivery that tells a callback URL of a task's outcome, that
/// task's id (see [Callbacks](crate::Envelope#callbacks)).
pub const OUTCOME_OF: &str = "ttw-outcome-of";

/// The identifying headers of `task`'s delivery, as name and value.
#[cfg_attr(not(any(feature = "webhook", feature = "nats")), allow(dead_code))]
pub(crate) fn headers(task: &Task) -> [(&'static str, Option<String>); 10] {
    let envelope = task.envelope();
    [
        (MESSAGE_ID, Some(task.message_id())),
        (TASK_ID, Some(task.id().get().to_string())),
        (ATTEMPT, Some(task.attempt().to_string())),
        (QUEUE, Some(task.queue().to_string())),
        (RUN_AT, Some(ms_since_epoch(task).to_string())),
        (IDEMPOTENCY_KEY, task.idempotency_key().map(str::to_string)),
        (KIND, task.kind().map(str::to_string)),
        (
            TRACEPARENT,
            envelope
                .and_then(|e| e.get_traceparent())
                .map(str::to_string),
        ),
        (
            TRACESTATE,
            envelope
                .and_then(|e| e.get_tracestate())
                .map(str::to_string),
        ),
        (
            OUTCOME_OF,
            envelope
                .and_then(|e| e.outcome_of())
                .map(|id| id.get().to_string()),
        ),
    ]
}

/// When `task` was due, in milliseconds since the Unix epoch.
fn ms_since_epoch(task: &Task) -> i64 {
    ms(task
        .run_at()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default())
}
