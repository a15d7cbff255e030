//! What a consumer receives: a [`Task`] (to a handler) or a [`Delivery`]
//! (from the [`Deliveries`] stream, to `ack` or `nack`).

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::model::attempt::Task;
use crate::model::attempts::Receipt;
use crate::model::failure::Failure;
use crate::node::outcome::Outcomes;

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
        let result = self
            .outcomes
            .succeed(&self.task.attempt, Receipt::none())
            .await;
        self.settle();
        result
    }

    /// Records success with what the consumer's work answered (a status,
    /// the answer's first bytes), kept in the attempt's history (see
    /// [`Store::attempts`](crate::Store::attempts)).
    ///
    /// # Errors
    ///
    /// As [`Delivery::ack`].
    pub async fn ack_with(mut self, receipt: Receipt) -> Result<(), Error> {
        let result = self.outcomes.succeed(&self.task.attempt, receipt).await;
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
