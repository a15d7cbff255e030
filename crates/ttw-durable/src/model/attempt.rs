//! One delivery attempt of a task: the [`Task`] a handler or a
//! [`Target`](crate::Target) gets, and the [`Attempt`] its outcome is
//! fenced on.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use crate::model::task::TaskId;

/// One attempt at a task: what its outcome is fenced on, and where a
/// retry is armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub(crate) id: i64,
    /// Which attempt, from 1.
    pub(crate) number: u32,
    /// The task's claim count after this claim.
    pub(crate) claim: i64,
    /// The task's lane on this node.
    pub(crate) lane: u32,
    pub(crate) priority: i16,
    /// Its partition key's hash (see `sql::announce::key_hash`).
    pub(crate) key: u64,
    /// Which of its outcomes a callback URL is told of.
    pub(crate) tells: Tells,
}

/// Which outcomes of a task make a callback task (see
/// [Callbacks](crate::Envelope#callbacks)): known from its envelope at
/// the claim, so that an outcome without a callback costs nothing more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tells {
    /// Its `callback`, once done.
    pub(crate) done: bool,
    /// Its `failure_callback`, once dead.
    pub(crate) dead: bool,
}

impl Tells {
    /// What `envelope` asks to be told of.
    pub(crate) fn of(envelope: Option<&crate::model::envelope::Envelope>) -> Tells {
        envelope.map_or_else(Tells::default, |e| Tells {
            done: e.get_callback().is_some(),
            dead: e.get_failure_callback().is_some(),
        })
    }
}

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
    /// Boxed: most tasks have none, and a task is moved often.
    pub(crate) envelope: Option<Box<crate::model::envelope::Envelope>>,
    /// Its kind, for a typed job; `None` for an untyped task.
    pub(crate) kind: Option<String>,
}

impl Task {
    /// Its kind, for a typed job ([`JobArgs::KIND`](crate::JobArgs::KIND));
    /// `None` for an untyped task.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
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

    /// What the task carries for its delivery beside its payload, if
    /// anything ([`Schedule::envelope`](crate::Schedule::envelope)).
    pub fn envelope(&self) -> Option<&crate::model::envelope::Envelope> {
        self.envelope.as_deref()
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
