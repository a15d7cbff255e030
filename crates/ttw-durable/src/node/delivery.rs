//! What a consumer receives: a [`Task`] (to a handler) or a [`Delivery`]
//! (from the [`Deliveries`] stream, to `ack` or `nack`).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use futures::Stream;
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::model::task::TaskId;
use crate::node::failure::Failure;
use crate::node::outcome::Outcomes;
use crate::sql::claims::{Attempt, Claimed};
use crate::time::from_ms;

/// One delivery attempt of a task: what a handler gets.
///
/// Delivery is at least once: the same task can arrive again (a retry, or a
/// redelivery after a node died mid-attempt), so consumers deduplicate by
/// [`Task::id`] or [`Task::idempotency_key`] where a repeat would matter.
#[derive(Clone, PartialEq, Eq)]
pub struct Task {
    /// The task's id, attempt number and claim count: what this
    /// delivery's outcome is fenced on.
    pub(crate) attempt: Attempt,
    pub(crate) run_at: SystemTime,
    pub(crate) payload: Vec<u8>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) queue: Arc<str>,
}

impl Task {
    pub(crate) fn from_claimed(c: Claimed, queue: Arc<str>) -> Task {
        Task {
            attempt: c.attempt,
            run_at: from_ms(c.run_at),
            payload: c.payload,
            idempotency_key: c.idempotency_key,
            queue,
        }
    }

    /// The queue it belongs to.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Its priority within its queue: of tasks waiting for room in the
    /// queue, lower numbers are claimed first.
    pub fn priority(&self) -> i16 {
        self.attempt.priority
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        TaskId(self.attempt.id)
    }

    /// Which attempt this is, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt.number
    }

    /// When the task was due; this attempt started no earlier.
    pub fn run_at(&self) -> SystemTime {
        self.run_at
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The idempotency key it was scheduled with.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// An id for this run of the task, the same in every attempt and
    /// redelivery of it, and new when the task runs again after a
    /// [redrive](crate::Store::redrive): `ttw-<id>-<run>`, where `<run>`
    /// counts the claims of the task before this run began (0 for its
    /// first). Targets send it as their message id (`webhook-id`,
    /// `Nats-Msg-Id`), so a receiver or a broker can drop a repeat of a
    /// delivery it already has while a deliberate redrive still arrives.
    ///
    /// ```
    /// # use ttw_durable::{Scheduler, Store};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// # let store = Store::sqlite_in_memory().await?;
    /// let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    /// let scheduler = Scheduler::builder(store.clone())
    ///     .start(move |task| {
    ///         tx.send(task.message_id()).ok();
    ///         async { Ok::<_, String>(()) }
    ///     })
    ///     .await?;
    /// let id = store.schedule(b"x".to_vec()).await?;
    /// assert_eq!(rx.recv().await.unwrap(), format!("ttw-{}-0", id.get()));
    /// # scheduler.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn message_id(&self) -> String {
        // Each claim counts in both `claims` and `attempts`; a redrive sets
        // `attempts` back to 0 and leaves `claims`, so their difference is
        // the same through a run and grows with each redrive that follows
        // an attempt.
        let run = self.attempt.claim - i64::from(self.attempt.number);
        format!("ttw-{}-{run}", self.attempt.id)
    }

    /// Takes the payload.
    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("id", &self.id())
            .field("attempt", &self.attempt.number)
            .field("queue", &self.queue)
            .field("payload_len", &self.payload.len())
            .field("idempotency_key", &self.idempotency_key)
            .finish()
    }
}

/// A task delivered on the [`Deliveries`] stream. Settle it with
/// [`Delivery::ack`] or [`Delivery::nack`] before the scheduler's
/// `callback_timeout`; a delivery dropped unsettled, or not settled in time,
/// counts as a failed attempt.
#[must_use = "a delivery that is dropped without ack counts as a failed attempt"]
pub struct Delivery {
    pub(crate) task: Task,
    /// Where its outcome is recorded.
    pub(crate) outcomes: Arc<Outcomes>,
    pub(crate) settled: Option<oneshot::Sender<()>>,
    /// When its supervisor fails the attempt (`callback_timeout` from the
    /// claim): from then on it is no longer handed out.
    pub(crate) deadline: tokio::time::Instant,
}

impl Delivery {
    /// The task and this attempt.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// Records success: the task is done.
    ///
    /// # Errors
    ///
    /// [`Error::is_lost`] if the attempt no longer belongs to this delivery
    /// (it timed out, or this node lost the task's shard): the task is, or
    /// will be, delivered again. [`Error::is_database`].
    pub async fn ack(mut self) -> Result<(), Error> {
        let result = self.outcomes.succeed(&self.task.attempt).await;
        self.settle();
        result
    }

    /// Records a failed attempt with this error: a retry after the backoff,
    /// or dead when out of attempts.
    ///
    /// # Errors
    ///
    /// As [`Delivery::ack`].
    pub async fn nack(self, error: impl fmt::Display) -> Result<(), Error> {
        self.fail(Failure::new(error.to_string())).await
    }

    /// Records a failed attempt as `failure` says: a retry after the
    /// backoff or at the time it names, or dead (out of attempts, or a
    /// [permanent](Failure::permanent) failure).
    ///
    /// # Errors
    ///
    /// As [`Delivery::ack`].
    pub async fn fail(mut self, failure: Failure) -> Result<(), Error> {
        let result = self.outcomes.fail(&self.task.attempt, &failure).await;
        self.settle();
        result
    }

    fn settle(&mut self) {
        if let Some(tx) = self.settled.take() {
            let _ = tx.send(());
        }
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("task", &self.task)
            .finish()
    }
}

/// The stream of deliveries of a scheduler started with
/// [`SchedulerBuilder::start_stream`](crate::SchedulerBuilder::start_stream).
/// It ends when the scheduler shuts down.
///
/// A delivery not taken from the stream before its deadline (the
/// scheduler's `callback_timeout`, from its claim) has already been failed
/// and is skipped: a consumer that reads late never gets an attempt that
/// its retry may be overlapping.
#[must_use = "streams do nothing unless polled"]
#[derive(Debug)]
pub struct Deliveries {
    pub(crate) rx: mpsc::Receiver<Delivery>,
}

impl Deliveries {
    /// The next delivery, or `None` once the scheduler has shut down.
    pub async fn recv(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.poll_live(cx)).await
    }

    /// The next delivery whose attempt is still waiting for its outcome.
    fn poll_live(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        loop {
            match self.rx.poll_recv(cx) {
                // Its supervisor gave up at the deadline and failed the
                // attempt, or is about to (its timer may not have run yet):
                // dropping it records nothing more than that failure.
                Poll::Ready(Some(d))
                    if d.settled.as_ref().is_none_or(|s| s.is_closed())
                        || tokio::time::Instant::now() >= d.deadline => {}
                other => return other,
            }
        }
    }
}

impl Stream for Deliveries {
    type Item = Delivery;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        self.poll_live(cx)
    }
}
