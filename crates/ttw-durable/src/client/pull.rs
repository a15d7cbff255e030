//! Workers that pull: a pull queue's due tasks wait in the store until a
//! worker claims them under a lease, then settles the claim (ack, nack,
//! extend). [`Pulls`] is the handle; what wakes a waiting claim the moment
//! a task falls due, and the writer of the acks, are the store's
//! (`pull_state.rs`).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::client::pull_state::{AckItem, Acks, Allowed, MAX_ACK_GROUP};
use crate::client::store::Store;
use crate::error::Error;
use crate::model::attempt::{Attempt, Task, Tells};
use crate::model::backoff::Backoff;
use crate::model::envelope::Envelope;
use crate::model::task::TaskId;
use crate::model::time::{from_ms, ms};
use crate::notify::Made;
use crate::sql::announce::Announced;
use crate::sql::claims::pull::{self, Nacked, Nacking, PulledRow, Pulling, Settled};
use crate::sql::db::priority_from_sql;

/// The most tasks one claim hands out.
pub const MAX_CLAIM: usize = 100;
/// The longest a claim waits for a task to fall due.
pub const MAX_CLAIM_WAIT: Duration = Duration::from_secs(60);
/// The shortest lease.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
/// The longest lease.
pub const MAX_LEASE: Duration = Duration::from_secs(12 * 3600);
/// The longest worker name.
pub const MAX_WORKER_NAME: usize = 128;

/// A claim's token: what an ack, nack or extend names, and is fenced on.
/// Its text is what the service sends and takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Claim(i64);

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Claim {
    type Err = Error;

    /// # Errors
    ///
    /// [`Error::is_stale_claim`] for a text no claim has (it holds no task).
    fn from_str(s: &str) -> Result<Claim, Error> {
        match s.parse::<i64>() {
            Ok(n) if n > 0 => Ok(Claim(n)),
            _ => Err(Error::stale_claim()),
        }
    }
}

/// A task a worker holds: the task, its claim and its lease.
#[derive(Debug, Clone)]
pub struct Leased {
    task: Task,
    claim: Claim,
    lease_until: SystemTime,
    partition_key: Option<String>,
}

impl Leased {
    /// The task, as a handler gets it.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The claim to settle it with.
    pub fn claim(&self) -> Claim {
        self.claim
    }

    /// When the lease runs out unless extended: the task is due again then.
    pub fn lease_until(&self) -> SystemTime {
        self.lease_until
    }

    /// Its partition key, if it has one.
    pub fn partition_key(&self) -> Option<&str> {
        self.partition_key.as_deref()
    }

    fn from_row(row: PulledRow, queue: &Arc<str>, lease_until: i64) -> Leased {
        let envelope = row
            .envelope
            .and_then(|text| Envelope::decode(&text).ok().map(Box::new));
        let attempt = Attempt {
            id: row.id,
            number: u32::try_from(row.attempts).unwrap_or(u32::MAX),
            claim: row.claims,
            lane: 0,
            priority: priority_from_sql(row.priority),
            key: 0,
            tells: Tells::of(envelope.as_deref()),
        };
        Leased {
            task: Task {
                attempt,
                run_at: from_ms(row.run_at),
                payload: row.payload,
                idempotency_key: row.idempotency_key,
                queue: queue.clone(),
                envelope,
                kind: row.kind,
            },
            claim: Claim(row.claims),
            lease_until: from_ms(lease_until),
            partition_key: row.partition_key,
        }
    }
}

/// A claim's request: at most `max` tasks (1 to [`MAX_CLAIM`]), waiting up
/// to `wait` (at most [`MAX_CLAIM_WAIT`]) for one to fall due, each leased
/// for `lease` ([`MIN_LEASE`] to [`MAX_LEASE`]) to `worker`, and only of
/// `kinds` if any are named.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    max: usize,
    wait: Duration,
    lease: Duration,
    worker: String,
    kinds: Vec<String>,
}

impl ClaimRequest {
    /// A claim by `worker` of one task, answered at once, leased for 30 s.
    pub fn new(worker: impl Into<String>) -> ClaimRequest {
        ClaimRequest {
            max: 1,
            wait: Duration::ZERO,
            lease: Duration::from_secs(30),
            worker: worker.into(),
            kinds: Vec::new(),
        }
    }

    /// At most `n` tasks.
    pub fn max(mut self, n: usize) -> Self {
        self.max = n;
        self
    }

    /// Wait up to `wait` for a task to fall due when none is.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Each task leased for `lease`.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Only tasks of these kinds (typed jobs a worker knows).
    pub fn kinds<I, K>(mut self, kinds: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.kinds = kinds.into_iter().map(Into::into).collect();
        self
    }

    fn check(&self) -> Result<(), Error> {
        if self.max == 0 || self.max > MAX_CLAIM {
            return Err(Error::invalid_task(
                "max",
                format!("must be 1 to {MAX_CLAIM}"),
            ));
        }
        if self.wait > MAX_CLAIM_WAIT {
            return Err(Error::invalid_task("wait", "must be at most 60 s"));
        }
        if self.lease < MIN_LEASE || self.lease > MAX_LEASE {
            return Err(Error::invalid_task("lease", "must be 1 s to 12 h"));
        }
        if self.worker.is_empty() || self.worker.len() > MAX_WORKER_NAME {
            return Err(Error::invalid_task(
                "worker",
                format!("must be 1 to {MAX_WORKER_NAME} bytes"),
            ));
        }
        Ok(())
    }
}

/// A failed attempt, as a worker reports it.
#[derive(Debug, Clone)]
pub struct Nack {
    error: String,
    retry_in: Option<Duration>,
    dead: bool,
}

impl Nack {
    /// A failure with `error`, retried after the backoff.
    pub fn new(error: impl Into<String>) -> Nack {
        Nack {
            error: error.into(),
            retry_in: None,
            dead: false,
        }
    }

    /// Retried after `delay`, not the backoff (still dead when out of
    /// attempts).
    pub fn retry_in(mut self, delay: Duration) -> Self {
        self.retry_in = Some(delay);
        self
    }

    /// Given up: dead now, whatever attempts are left.
    pub fn dead(mut self) -> Self {
        self.dead = true;
        self
    }
}

/// What a nack did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NackOutcome {
    /// The task is due again at this time.
    Retry(SystemTime),
    /// The task is dead.
    Dead,
}

/// A worker that claimed from a pull queue in the last day, from
/// [`Pulls::workers`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// The pull queue.
    pub queue: String,
    /// The worker's name, as its claims gave it.
    pub worker: String,
    /// When it last claimed (a long poll counts when it began, and again
    /// each time it looked).
    pub last_seen: SystemTime,
    /// The tasks it holds now (their leases not run out).
    pub held: u64,
}

/// Workers that pull, on a store: claim due tasks of a pull queue under a
/// lease, and settle each claim.
///
/// A claim answers at once with what is due, or waits (up to its `wait`)
/// and answers the moment a task falls due: the node serving the queue
/// (see [`SchedulerBuilder::pull`](crate::SchedulerBuilder::pull)) wakes
/// it from its wheel. A claimed task is `running`, held by the worker
/// until its lease ends; [`ack`](Self::ack), [`nack`](Self::nack) and
/// [`extend`](Self::extend) name its [`Claim`] and are refused with
/// [`Error::is_stale_claim`] once the lease ran out or the task was
/// settled. A lease that runs out makes the task due again (the attempt
/// recorded as [`expired`](crate::AttemptOutcome::Expired)), within the
/// serving node's reclaim period.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::{ClaimRequest, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// store.schedule("send the receipt").queue("jobs").await?;
///
/// let pulls = store.pulls();
/// let held = pulls
///     .claim("jobs", ClaimRequest::new("worker-1").max(10).lease(Duration::from_secs(60)))
///     .await?;
/// assert_eq!(held.len(), 1);
/// assert_eq!(held[0].task().payload(), b"send the receipt");
/// pulls.ack(held[0].task().id(), held[0].claim(), None).await?;
///
/// // The same claim again is stale: the task is done.
/// let again = pulls.ack(held[0].task().id(), held[0].claim(), None).await;
/// assert!(again.unwrap_err().is_stale_claim());
///
/// // The worker was seen; it holds nothing now.
/// let workers = pulls.workers(Some("jobs")).await?;
/// assert_eq!((workers[0].worker.as_str(), workers[0].held), ("worker-1", 0));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Pulls {
    store: Store,
    backoff: Backoff,
    max_attempts: u32,
    allowed: Option<Allowed>,
}

impl fmt::Debug for Pulls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pulls")
            .field("backoff", &self.backoff)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl Store {
    /// Workers that pull from this store (see [`Pulls`]).
    pub fn pulls(&self) -> Pulls {
        Pulls {
            store: self.clone(),
            backoff: Backoff::default(),
            max_attempts: 5,
            allowed: None,
        }
    }
}

impl Pulls {
    /// The backoff of a nack's retry in a queue without its own (default:
    /// [`Backoff::default`]); set it to the serving scheduler's.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The attempts of a task with no limit of its own or its queue's
    /// (default 5); set it to the serving scheduler's.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// Settles only tasks of the queues `allowed` accepts; others are
    /// refused with [`Error::is_queue_not_allowed`].
    pub fn only(mut self, allowed: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.allowed = Some(Arc::new(allowed));
        self
    }

    /// Claims due tasks of `queue` (see [`Pulls`] and [`ClaimRequest`]),
    /// in priority then due order. Empty when none fell due within the
    /// request's `wait`, or once [`stop_waiting`](Self::stop_waiting) is
    /// called.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits, it claims nothing. A claim that committed
    /// as it was dropped leaves its tasks held until their lease ends.
    ///
    /// # Errors
    ///
    /// [`Error::is_invalid_task`] for a request out of bounds (its field in
    /// [`Error::invalid_field`]), [`Error::is_database`].
    pub async fn claim(&self, queue: &str, request: ClaimRequest) -> Result<Vec<Leased>, Error> {
        request.check()?;
        let wakes = self.store.pull_wakes();
        let notify = wakes.of(queue);
        let mut closing = wakes.closing.subscribe();
        let deadline = tokio::time::Instant::now() + request.wait;
        let name: Arc<str> = Arc::from(queue);
        let max = request.max as i64;
        let now = self.store.clock().now_ms();
        if wakes.record_seen(queue, &request.worker, now) {
            pull::seen(self.store.db(), queue, &request.worker, now).await?;
        }
        loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.store.clock().now_ms();
            let lease_until = now.saturating_add(ms(request.lease));
            let pulled = pull::claim(
                self.store.db(),
                Pulling {
                    queue,
                    max,
                    now,
                    lease_until,
                    worker: &request.worker,
                    kinds: &request.kinds,
                },
            )
            .await?;
            if !pulled.rows.is_empty() {
                return Ok(pulled
                    .rows
                    .into_iter()
                    .map(|row| Leased::from_row(row, &name, lease_until))
                    .collect());
            }
            if *closing.borrow_and_update() || tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            // Held back by the queue's flow control: look again when its
            // next token comes, or soon (room can free on another
            // instance without a wake here), never past the deadline.
            let again = pulled.again_in.map_or(deadline, |in_ms| {
                let at = tokio::time::Instant::now() + Duration::from_millis(in_ms.max(1) as u64);
                at.min(deadline)
            });
            tokio::select! {
                _ = &mut notified => {}
                _ = closing.changed() => {}
                _ = tokio::time::sleep_until(again) => {
                    if again >= deadline {
                        return Ok(Vec::new());
                    }
                }
            }
        }
    }

    /// The workers that claimed from `queue` (every queue: `None`) in the
    /// last day, by queue and name, each with the tasks it holds now; at
    /// most 1,000. Each process records a worker it answers a claim of (once
    /// a second), in the store: this is every instance's view.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn workers(&self, queue: Option<&str>) -> Result<Vec<WorkerInfo>, Error> {
        let now = self.store.clock().now_ms();
        let rows = pull::workers(self.store.db(), queue, now).await?;
        Ok(rows
            .into_iter()
            .map(|row| WorkerInfo {
                queue: row.queue,
                worker: row.worker,
                last_seen: from_ms(row.last_seen),
                held: u64::try_from(row.held).unwrap_or(0),
            })
            .collect())
    }

    /// Answers every waiting claim of this store empty, now and from now
    /// on (a graceful stop: the workers claim elsewhere).
    pub fn stop_waiting(&self) {
        self.store.pull_wakes().closing.send_replace(true);
    }

    fn allowed(&self) -> Allowed {
        self.allowed.clone().unwrap_or_else(|| Arc::new(|_| true))
    }

    /// Marks the task done, `answer` kept as its attempt's (its first
    /// [`MAX_ATTEMPT_DETAIL`](crate::MAX_ATTEMPT_DETAIL) bytes), with its
    /// callback.
    ///
    /// # Errors
    ///
    /// [`Error::is_stale_claim`], [`Error::is_queue_not_allowed`],
    /// [`Error::is_database`].
    pub async fn ack(&self, id: TaskId, claim: Claim, answer: Option<&str>) -> Result<(), Error> {
        let item = AckItem {
            id: id.0,
            claim: claim.0,
            now: self.store.clock().now_ms(),
            answer: answer.map(str::to_string),
            allowed: self.allowed(),
        };
        self.store
            .to_completion(move |store| async move {
                let writer = store.ack_writer().clone();
                let (done, told) = writer.write(item).await.unwrap_or_else(|| {
                    Err(Error::internal(
                        "the acks' writer is gone: the ack's outcome is unknown",
                    ))
                })?;
                hand_over(&store, told, None);
                let queue = settled(done)?;
                store.pull_wakes().wake(&queue, 1);
                Ok(())
            })
            .await
    }

    /// Records a failed attempt: a retry (after the backoff, or
    /// [`Nack::retry_in`]) or dead (out of attempts, or [`Nack::dead`]),
    /// in the attempt history under the worker's name.
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack); [`Error::is_out_of_range`] for a `retry_in`
    /// over a year.
    pub async fn nack(&self, id: TaskId, claim: Claim, nack: Nack) -> Result<NackOutcome, Error> {
        let retry_in = match nack.retry_in {
            Some(d) if d > Duration::from_secs(366 * 86_400) => {
                return Err(Error::out_of_range("retry_in"))
            }
            d => d.map(ms),
        };
        let allowed = self.allowed();
        let (backoff, default_max) = (self.backoff, i64::from(self.max_attempts));
        self.store
            .to_completion(move |store| async move {
                let now = store.clock().now_ms();
                let nacking = Nacking {
                    id: id.0,
                    claim: claim.0,
                    now,
                    error: &nack.error,
                    retry_in,
                    dead: nack.dead,
                    backoff,
                    default_max,
                };
                let (done, told, moved) =
                    pull::nack(store.db(), store.names(), nacking, &*allowed).await?;
                hand_over(&store, told, moved);
                let (outcome, queue) = match settled(done)? {
                    Nacked::Retry(at, queue) => (NackOutcome::Retry(from_ms(at)), queue),
                    Nacked::Dead(queue) => (NackOutcome::Dead, queue),
                };
                store.pull_wakes().wake(&queue, 1);
                Ok(outcome)
            })
            .await
    }

    /// Moves the lease to end `lease` from now (a heartbeat while the work
    /// runs). Answers when it ends now.
    ///
    /// # Errors
    ///
    /// As [`ack`](Self::ack); [`Error::is_invalid_task`] for a lease out of
    /// bounds.
    pub async fn extend(
        &self,
        id: TaskId,
        claim: Claim,
        lease: Duration,
    ) -> Result<SystemTime, Error> {
        if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
            return Err(Error::invalid_task("lease", "must be 1 s to 12 h"));
        }
        let allowed = self.allowed();
        self.store
            .to_completion(move |store| async move {
                let now = store.clock().now_ms();
                let until = now.saturating_add(ms(lease));
                let done = pull::extend(store.db(), id.0, claim.0, now, until, &*allowed).await?;
                settled(done)?;
                Ok(from_ms(until))
            })
            .await
    }
}

impl Store {
    /// The writer of this store's acks, started at its first ack.
    pub(crate) fn ack_writer(&self) -> &crate::group::GroupWriter<Acks> {
        self.acks_cell().get_or_init(|| {
            let writers = if self.is_postgres() { 2 } else { 1 };
            crate::group::GroupWriter::start(
                Acks {
                    db: self.db().clone(),
                    names: self.names().clone(),
                },
                writers,
                MAX_ACK_GROUP,
            )
        })
    }
}

/// Tells this process's schedulers of what a settle made due once it has
/// committed: the callback tasks it wrote (`told`) and the retry it moved.
fn hand_over(store: &Store, told: Vec<Announced>, moved: Option<Announced>) {
    if !told.is_empty() {
        store.notifier().committed(told, Made::Created);
    }
    if let Some(task) = moved {
        store.notifier().committed([task], Made::Moved);
    }
}

/// A settle's answer as this module's.
fn settled<T>(done: Settled<T>) -> Result<T, Error> {
    match done {
        Settled::Yes(value) => Ok(value),
        Settled::Stale => Err(Error::stale_claim()),
        Settled::NotAllowed(queue) => Err(Error::queue_not_allowed(queue)),
    }
}
