//! One task being scheduled: the [`Schedule`] builder that
//! [`Store::schedule`] returns, and what storing it did ([`Scheduled`]).

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use crate::client::store::Store;
use crate::error::Error;
use crate::model::new_task::{NewRow, NewTask};
use crate::model::task::TaskId;
use crate::notify::Made;
use crate::sql::db::{write_with_pool, Conn, Urgency};
use crate::sql::tasks::{self, TaskParams};

impl Store {
    /// Starts scheduling a task carrying `payload` (at most
    /// [`MAX_PAYLOAD`](crate::MAX_PAYLOAD) bytes). Await the returned
    /// builder to store it; by default it is due at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let at = SystemTime::now() + Duration::from_secs(15 * 60);
    /// let id = store.schedule(b"cancel unpaid order 7".to_vec()).at(at).await?;
    /// assert_eq!(store.get(id).await?.unwrap().attempts, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule(&self, payload: impl Into<Vec<u8>>) -> Schedule<'_> {
        Schedule {
            store: self,
            task: NewTask::new(payload),
            replace: false,
        }
    }

    /// The same as [`Store::schedule`], for a task built as a [`NewTask`]
    /// (the form batches and [`Grouped`](crate::Grouped) take): what
    /// only a single schedule can do ([`Schedule::replace_pending`],
    /// [`Schedule::max_wait`]) is added to it here.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{NewTask, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let task = NewTask::new("sync").idempotency_key("sync:user-7").delay(Duration::from_secs(5));
    /// let first = store.schedule_task(task.clone()).replace_pending().submit().await?;
    /// let again = store.schedule_task(task).replace_pending().submit().await?;
    /// assert_eq!(again.id(), first.id());
    /// # Ok(())
    /// # }
    /// ```
    pub fn schedule_task(&self, task: NewTask) -> Schedule<'_> {
        Schedule {
            store: self,
            task,
            replace: false,
        }
    }

    pub(crate) async fn insert(&self, task: NewTask) -> Result<Scheduled, Error> {
        let row = NewRow::check(task, self.clock())?;
        if row.idempotency_key.is_some() {
            // A key is checked against the history after the insert, in
            // its transaction (see `sql::history`): the batch's path.
            let mut outcomes = self.insert_checked(vec![row]).await?;
            return outcomes
                .pop()
                .ok_or_else(|| Error::internal("a scheduled task has no outcome"));
        }
        let db = self.db();
        let inserted = write_with_pool!(db, Urgency::Ordinary, pool => {
            let mut conn = pool.acquire().await?;
            tasks::insert(Conn::from(&mut *conn), self.names(), &[TaskParams::from(&row)], self.clock().now_ms())
                .await?
                .pop()
                .map(|inserted| inserted.task)
        });
        let task = inserted.ok_or_else(|| Error::internal("an insert returned no task"))?;
        let id = task.id;
        self.notifier().committed(Some(task), Made::Created);
        Ok(Scheduled::Created(TaskId(id)))
    }
}

/// A task being scheduled, from [`Store::schedule`]; `.await` it to store the
/// task and get its [`TaskId`].
///
/// # Errors
///
/// [`Error::is_payload_too_large`], [`Error::is_out_of_range`] (a time before
/// the Unix epoch or after [`MAX_RUN_AT`](crate::MAX_RUN_AT), or a delay that
/// overflows), [`Error::is_invalid_key`], [`Error::is_invalid_task`] (zero
/// attempts, a partition key out of bounds, or [`Schedule::replace_pending`]
/// without a key),
/// [`Error::is_database`] ([`Error::is_disk_full`] when the database's disk
/// is full). A schedule that fails stored nothing; an id is returned only
/// once the task's row has committed.
#[must_use = "a task is stored only when the builder is awaited"]
pub struct Schedule<'a> {
    pub(super) store: &'a Store,
    pub(super) task: NewTask,
    pub(super) replace: bool,
}

impl fmt::Debug for Schedule<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("task", &self.task)
            .field("replace", &self.replace)
            .finish()
    }
}

impl Schedule<'_> {
    /// Due this long from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.task = self.task.delay(delay);
        self
    }

    /// Due at this time (a time in the past is due at once).
    pub fn at(mut self, at: SystemTime) -> Self {
        self.task = self.task.at(at);
        self
    }

    /// Scheduling another task with the same key, while this one is kept,
    /// creates nothing and returns this task's id ([`Schedule::submit`]
    /// tells which happened). A key is 1 to
    /// [`MAX_IDEMPOTENCY_KEY`](crate::MAX_IDEMPOTENCY_KEY) bytes; an empty
    /// or longer one fails with [`Error::is_invalid_key`]. A key is kept
    /// as long as its task: until the retention sweep deletes it, after it
    /// finished.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.task = self.task.idempotency_key(key);
        self
    }

    /// This task's own attempt limit, instead of the scheduler's. Zero
    /// fails with [`Error::is_invalid_task`].
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.task = self.task.max_attempts(n);
        self
    }

    /// The queue the task belongs to (default
    /// [`DEFAULT_QUEUE`](crate::DEFAULT_QUEUE)): it is delivered by the
    /// nodes serving that queue, to its handler
    /// ([`SchedulerBuilder::handle`](crate::SchedulerBuilder::handle)), and
    /// waits, scheduled, while no node serves it. A name is 1 to
    /// [`MAX_QUEUE_NAME`](crate::MAX_QUEUE_NAME) bytes of ASCII letters,
    /// digits, `_`, `-`, `.` and `:`; any other fails with
    /// [`Error::is_invalid_queue`]. A task's queue never changes: a
    /// [replacement](Self::replace_pending) keeps it.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.task = self.task.queue(queue);
        self
    }

    /// The task's partition key (a tenant, a customer), 1 to
    /// [`MAX_PARTITION_KEY`](crate::MAX_PARTITION_KEY) bytes: the due tasks
    /// of a queue take turns by key on each node (priority orders them
    /// within a key), and a queue's
    /// [`per_key_concurrency`](crate::QueueLimits::per_key_concurrency)
    /// caps each key's running tasks across all nodes, so one key's backlog
    /// does not hold the others back. A replacement keeps the pending
    /// task's. Out of range: [`Error::is_invalid_task`].
    pub fn partition_key(mut self, key: impl Into<String>) -> Self {
        self.task = self.task.partition_key(key);
        self
    }

    /// What the task carries for its delivery beside its payload (see
    /// [`Envelope`](crate::Envelope)): a destination of its own, the trace
    /// context of the request scheduling it. Checked before
    /// anything is stored ([`Error::is_invalid_envelope`]). A
    /// [replacement](Self::replace_pending) keeps the pending task's.
    ///
    /// ```
    /// # use ttw_durable::{Destination, Envelope, Store};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let envelope = Envelope::new()
    ///     .destination(Destination::new("https://billing.internal/hooks/expire"))
    ///     .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    /// let id = store.schedule(b"{}".to_vec()).envelope(envelope.clone()).await?;
    /// assert_eq!(store.get(id).await?.unwrap().envelope, Some(envelope));
    /// # Ok(())
    /// # }
    /// ```
    pub fn envelope(mut self, envelope: crate::model::envelope::Envelope) -> Self {
        self.task = self.task.envelope(envelope);
        self
    }

    /// The task's priority within its queue (default 0). Priority orders
    /// tasks that are due and wait for room under the node's or the
    /// queue's concurrency limit: the lowest number is claimed first, then
    /// the earliest due, then the first scheduled. It never makes a task
    /// run before its time, and a node with room runs every due task at
    /// once whatever its priority. A [replacement](Self::replace_pending)
    /// takes it if given.
    pub fn priority(mut self, priority: i16) -> Self {
        self.task = self.task.priority(priority);
        self
    }

    /// If the idempotency key belongs to a task still pending (scheduled,
    /// not yet claimed), replace it rather than keep it: its payload
    /// becomes this payload, its due time this time (kept if neither
    /// [`at`](Self::at) nor [`delay`](Self::delay) was given), its attempt
    /// limit this one (kept if none was given), and
    /// [`Schedule::submit`] answers [`Scheduled::Replaced`] with its id.
    /// Without a task for the key, a new one is created, as without this
    /// option. This is the debounce of job queues: each event pushes the
    /// one pending task back and gives it the latest payload.
    ///
    /// A task that a node has claimed (running), that is waiting for a
    /// retry after a failed attempt (or for its redelivery after a lost
    /// one), or that has finished (done, dead, cancelled: kept until the
    /// retention sweep), is not pending: nothing is changed, and the answer
    /// is [`Scheduled::Existing`]. A running attempt goes on with the
    /// payload it was claimed with, and its retries too, each at the time
    /// its backoff set: a retry repeats the exact request that failed. To
    /// run again after it, schedule under a new key (for example with a
    /// generation number in it). A dead task [redriven](Store::redrive)
    /// starts its attempts again and is pending until it is claimed.
    ///
    /// A key is required: without one the schedule fails with
    /// [`Error::is_invalid_task`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{Scheduled, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let delay = Duration::from_secs(5);
    /// let first = store.schedule("v1").idempotency_key("sync:user-7").delay(delay)
    ///     .replace_pending().submit().await?;
    /// let second = store.schedule("v2").idempotency_key("sync:user-7").delay(delay)
    ///     .replace_pending().submit().await?;
    /// assert!(first.is_created());
    /// assert_eq!(second, Scheduled::Replaced(first.id()));
    /// assert_eq!(store.get(first.id()).await?.unwrap().payload, b"v2");
    /// assert_eq!(store.counts().await?.scheduled, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn replace_pending(mut self) -> Self {
        self.replace = true;
        self
    }

    /// The kind of work it is (see [`NewTask::kind`]): a typed job's name,
    /// set by [`Store::enqueue`]; here for bytes scheduled as a kind's
    /// arguments by hand.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.task = self.task.kind(kind);
        self
    }

    /// A debounce with a longest wait, with
    /// [`replace_pending`](Self::replace_pending): each request replaces
    /// the pending task and pushes its time back, but the task runs at the
    /// latest `wait` after the first request of its generation, however
    /// often replacements keep coming (Inngest's debounce `timeout`). Once
    /// it has been claimed, the next request starts a new generation: the
    /// task that held the key (running, waiting for a retry, or finished)
    /// gives the key up to a new task. So use a key of its own for a
    /// debounce: a key released this way no longer answers for the old
    /// task. At least 1 ms; without `replace_pending` the schedule fails
    /// with [`Error::is_invalid_task`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let sync = |v: &str| {
    ///     store.schedule(v.to_string()).idempotency_key("debounce:sync:user-7")
    ///         .delay(Duration::from_secs(5)).max_wait(Duration::from_secs(60)).replace_pending()
    /// };
    /// let first = sync("v1").submit().await?;
    /// let second = sync("v2").submit().await?;
    /// assert_eq!(second.id(), first.id());
    /// let due = store.get(first.id()).await?.unwrap().run_at;
    /// assert!(due <= std::time::SystemTime::now() + Duration::from_secs(60));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.task.max_wait = Some(wait);
        self
    }

    /// Stores the task, as `.await` does, and tells whether it was created,
    /// replaced a pending task ([`Schedule::replace_pending`]), or its
    /// idempotency key found a task already kept.
    ///
    /// # Errors
    ///
    /// As awaiting the [`Schedule`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::{Scheduled, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let first = store.schedule(b"a".to_vec()).idempotency_key("k").submit().await?;
    /// let again = store.schedule(b"b".to_vec()).idempotency_key("k").submit().await?;
    /// assert!(matches!(first, Scheduled::Created(_)));
    /// assert_eq!(again, Scheduled::Existing(first.id()));
    /// assert!(!again.is_created());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn submit(self) -> Result<Scheduled, Error> {
        if self.task.max_wait.is_some() && !self.replace {
            return Err(Error::invalid_task(
                "replace_pending",
                "max_wait is a debounce's longest wait: it needs replace_pending",
            ));
        }
        // Run to its end even if this future is dropped (see
        // `Store::to_completion`).
        let (task, replace) = (self.task, self.replace);
        self.store
            .to_completion(move |store| async move {
                if replace {
                    store.upsert(task).await
                } else {
                    store.insert(task).await
                }
            })
            .await
    }
}

/// What [`Schedule::submit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheduled {
    /// A new task was stored with this id.
    Created(TaskId),
    /// The idempotency key belongs to this task, kept already; nothing was
    /// stored.
    Existing(TaskId),
    /// The idempotency key belonged to this task, pending, and
    /// [`Schedule::replace_pending`] replaced its payload and time.
    Replaced(TaskId),
}

impl Scheduled {
    /// The task's id, either way.
    pub fn id(self) -> TaskId {
        match self {
            Scheduled::Created(id) | Scheduled::Existing(id) | Scheduled::Replaced(id) => id,
        }
    }

    /// Whether a new task was stored.
    pub fn is_created(self) -> bool {
        matches!(self, Scheduled::Created(_))
    }
}

impl<'a> IntoFuture for Schedule<'a> {
    type Output = Result<TaskId, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<TaskId, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.submit().await.map(Scheduled::id) })
    }
}
