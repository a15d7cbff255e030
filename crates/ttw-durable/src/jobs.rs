//! Typed jobs: a job's arguments are a `serde` type with a name, its kind
//! ([`JobArgs`]); [`Store::enqueue`] schedules one (its JSON the payload,
//! its kind in a column of its own), and [`Workers`], a delivery target,
//! runs each task on the worker registered for its kind, with the
//! arguments decoded.
//!
//! What becomes of a task a worker cannot run: arguments that do not
//! decode as their kind are dead at once, with serde's message (retrying
//! cannot help); a kind with no worker on this node, or a task without a
//! kind in a queue of workers, is a failed attempt (`unknown kind`),
//! retried under the queue's backoff, so that a rolling deploy that adds
//! the worker later runs it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::client::schedule::Schedule;
use crate::client::store::Store;
use crate::model::attempt::Task;
use crate::model::attempts::Receipt;
use crate::model::failure::Failure;
use crate::model::new_task::NewTask;
use crate::model::task::TaskId;
use crate::targets::{Delivered, Target};

/// The arguments of one kind of job: a `serde` type with a stable name.
///
/// The kind is stored with each task and names it everywhere a task is
/// seen (the API, the console, `ttw list --kind`); rename the type freely,
/// never the kind of jobs already scheduled.
///
/// # Examples
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use ttw_durable::{JobArgs, JobOptions};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendReceipt {
///     order: u64,
/// }
///
/// impl JobArgs for SendReceipt {
///     const KIND: &'static str = "send_receipt";
///
///     fn options() -> JobOptions {
///         JobOptions { queue: Some("mail"), max_attempts: Some(5), ..JobOptions::default() }
///     }
/// }
///
/// let task = ttw_durable::NewTask::job(&SendReceipt { order: 42 });
/// # drop(task);
/// assert_eq!(SendReceipt::options().queue, Some("mail"));
/// ```
pub trait JobArgs: Serialize + DeserializeOwned + Send + 'static {
    /// The kind: 1 to [`MAX_KIND`](crate::MAX_KIND) bytes of ASCII letters,
    /// digits, `_`, `-`, `.` and `:`.
    const KIND: &'static str;

    /// What every job of this kind is scheduled with unless its schedule
    /// says otherwise (default: none of it).
    fn options() -> JobOptions {
        JobOptions::default()
    }
}

/// The defaults of a kind of job ([`JobArgs::options`]); each schedule may
/// override them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobOptions {
    /// Its queue (default: the default queue).
    pub queue: Option<&'static str>,
    /// Its priority within its queue (default: 0).
    pub priority: Option<i16>,
    /// Its attempt limit (default: its queue's, else the scheduler's).
    pub max_attempts: Option<u32>,
}

impl NewTask {
    /// A typed job: `job`'s JSON as the payload, its kind, and its kind's
    /// [`JobOptions`]. For batches ([`Store::schedule_batch`]) and groups
    /// ([`Grouped`](crate::Grouped)); [`Store::enqueue`] is the single
    /// schedule.
    ///
    /// Arguments that do not serialize (a map with keys that are not
    /// strings, say) make a task that is refused when scheduled
    /// ([`Error::is_invalid_task`](crate::Error::is_invalid_task), field
    /// `payload`).
    pub fn job<J: JobArgs>(job: &J) -> NewTask {
        let (payload, unmade) = match serde_json::to_vec(job) {
            Ok(payload) => (payload, None),
            Err(err) => (
                Vec::new(),
                Some(format!(
                    "the arguments of {} do not serialize: {err}",
                    J::KIND
                )),
            ),
        };
        let options = J::options();
        let mut task = NewTask::new(payload).kind(J::KIND);
        task.unmade = unmade;
        if let Some(queue) = options.queue {
            task = task.queue(queue);
        }
        if let Some(priority) = options.priority {
            task = task.priority(priority);
        }
        if let Some(n) = options.max_attempts {
            task = task.max_attempts(n);
        }
        task
    }
}

impl Store {
    /// Schedules a typed job: the same builder as [`Store::schedule`]
    /// (a delay or a time, an idempotency key, `replace_pending`, a
    /// partition key, in your own transaction), for `job`'s JSON with its
    /// kind and its kind's [`JobOptions`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use serde::{Deserialize, Serialize};
    /// use ttw_durable::{JobArgs, Store};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct SendReceipt {
    ///     order: u64,
    /// }
    ///
    /// impl JobArgs for SendReceipt {
    ///     const KIND: &'static str = "send_receipt";
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let id = store
    ///     .enqueue(&SendReceipt { order: 42 })
    ///     .delay(Duration::from_secs(60))
    ///     .idempotency_key("receipt:42")
    ///     .await?;
    /// let task = store.get(id).await?.unwrap();
    /// assert_eq!(task.kind.as_deref(), Some("send_receipt"));
    /// assert_eq!(task.payload, br#"{"order":42}"#);
    /// # Ok(())
    /// # }
    /// ```
    pub fn enqueue<J: JobArgs>(&self, job: &J) -> Schedule<'_> {
        self.schedule_task(NewTask::job(job))
    }
}

/// What a worker knows of the task it runs beside its arguments.
#[derive(Debug, Clone)]
pub struct JobContext {
    id: TaskId,
    attempt: u32,
    queue: String,
    run_at: SystemTime,
    message_id: String,
    traceparent: Option<String>,
}

impl JobContext {
    fn of(task: &Task) -> JobContext {
        JobContext {
            id: task.id(),
            attempt: task.attempt(),
            queue: task.queue().to_string(),
            run_at: task.run_at(),
            message_id: task.message_id(),
            traceparent: task
                .envelope()
                .and_then(|e| e.get_traceparent())
                .map(str::to_string),
        }
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Which attempt this is, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The queue it belongs to.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// When it was due.
    pub fn run_at(&self) -> SystemTime {
        self.run_at
    }

    /// An id the same across this task's attempts (see
    /// [`Task::message_id`]): the key for a worker's own deduplication.
    pub fn message_id(&self) -> &str {
        &self.message_id
    }

    /// The W3C trace context of the request that scheduled it, if any.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }
}

type Work = Arc<dyn Fn(Task) -> Delivered + Send + Sync>;

/// A delivery target that runs each task on the worker registered for its
/// kind, with its arguments decoded: give it to
/// [`SchedulerBuilder::work`](crate::SchedulerBuilder::work) for a queue
/// (many kinds may share a queue; a kind is served by one queue).
///
/// A worker answers `Ok(value)`, kept (bounded, as JSON) as the attempt's
/// answer in its history (`()` keeps nothing), or `Err(e)` for a failed
/// attempt, retried under the queue's backoff: any `E` that is a
/// [`Failure`] (`Failure::new(..).permanent()` gives up at once) or turns
/// into one (`String`, `&str`). A worker is cancelled by being dropped, as
/// any future: at the scheduler's `callback_timeout`, or at this target's
/// own [`timeout`](Workers::timeout) if it has a shorter one.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use serde::{Deserialize, Serialize};
/// use ttw_durable::{JobArgs, JobContext, Scheduler, Store, TaskState, Workers};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendReceipt {
///     order: u64,
/// }
///
/// impl JobArgs for SendReceipt {
///     const KIND: &'static str = "send_receipt";
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// let workers = Workers::new().register(|job: SendReceipt, ctx: JobContext| async move {
///     println!("receipt for order {} (attempt {})", job.order, ctx.attempt());
///     Ok::<_, String>(format!("sent {}", job.order))
/// });
/// let scheduler = Scheduler::builder(store.clone())
///     .work("default", workers)
///     .start_queues()
///     .await?;
/// let id = store.enqueue(&SendReceipt { order: 42 }).await?;
/// while store.get(id).await?.unwrap().state != TaskState::Done {
///     tokio::time::sleep(Duration::from_millis(10)).await;
/// }
/// let attempts = store.attempts(id).await?;
/// assert_eq!(attempts[0].detail.as_deref(), Some(r#""sent 42""#));
/// scheduler.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Workers {
    by_kind: HashMap<&'static str, Work>,
    /// A kind registered twice: refused when the scheduler starts.
    twice: Option<&'static str>,
    /// Its own bound on a worker's run, if given.
    timeout: Option<Duration>,
}

impl fmt::Debug for Workers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&str> = self.by_kind.keys().copied().collect();
        kinds.sort_unstable();
        f.debug_struct("Workers")
            .field("kinds", &kinds)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Default for Workers {
    fn default() -> Self {
        Workers::new()
    }
}

impl Workers {
    /// No workers yet; a worker runs for at most the scheduler's
    /// `callback_timeout`.
    pub fn new() -> Workers {
        Workers {
            by_kind: HashMap::new(),
            twice: None,
            timeout: None,
        }
    }

    /// The longest one worker may run, if shorter than the scheduler's
    /// `callback_timeout` (which `start` checks); then its attempt fails,
    /// and is retried.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Its own bound on a worker's run, if one was given.
    pub(crate) fn own_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Registers `worker` for the kind `J`: each task of that kind is
    /// decoded as a `J` and run by it. A kind registered twice makes the
    /// scheduler refuse to start
    /// ([`Error::is_config`](crate::Error::is_config)).
    pub fn register<J, F, Fut, R, E>(mut self, worker: F) -> Self
    where
        J: JobArgs,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        R: Serialize,
        E: Into<Failure>,
    {
        let work: Work = Arc::new(move |task: Task| {
            let job = match serde_json::from_slice::<J>(task.payload()) {
                Ok(job) => job,
                Err(err) => {
                    let why = format!("the arguments do not decode as {}: {err}", J::KIND);
                    return async move { Err(Failure::new(why).permanent()) }.boxed();
                }
            };
            let ran = worker(job, JobContext::of(&task));
            async move {
                match ran.await {
                    Ok(value) => Ok(answer(&value)),
                    Err(err) => Err(err.into()),
                }
            }
            .boxed()
        });
        if self.by_kind.insert(J::KIND, work).is_some() {
            self.twice.get_or_insert(J::KIND);
        }
        self
    }

    /// The kinds registered, in no order.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.by_kind.keys().copied()
    }

    /// The kind registered twice, if one was.
    pub(crate) fn registered_twice(&self) -> Option<&'static str> {
        self.twice
    }
}

/// A worker's value as the attempt's answer: its JSON, nothing for `()`.
fn answer<R: Serialize>(value: &R) -> Receipt {
    match serde_json::to_string(value) {
        Ok(text) if text != "null" => Receipt::none().answer(text),
        _ => Receipt::none(),
    }
}

impl Target for Workers {
    fn deliver(&self, task: Task) -> Delivered {
        let work = task.kind().and_then(|kind| self.by_kind.get(kind)).cloned();
        match (work, self.timeout) {
            (Some(work), None) => work(task),
            (Some(work), Some(bound)) => async move {
                match tokio::time::timeout(bound, work(task)).await {
                    Ok(ran) => ran,
                    Err(_) => Err(Failure::new(format!(
                        "the worker ran past its timeout of {bound:?}"
                    ))),
                }
            }
            .boxed(),
            (None, _) => {
                let why = match task.kind() {
                    Some(kind) => format!("unknown kind {kind:?}: no worker for it on this node"),
                    None => {
                        "unknown kind: a task without a kind, in a queue of workers".to_string()
                    }
                };
                async move { Err(Failure::new(why)) }.boxed()
            }
        }
    }

    /// Its own timeout; without one, none but the scheduler's
    /// `callback_timeout` (given to [`work`](crate::SchedulerBuilder::work),
    /// which knows it; [`deliver`](crate::SchedulerBuilder::deliver) would
    /// refuse this as too long).
    fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(Duration::MAX)
    }
}
