//! Starting and stopping a scheduler: [`SchedulerBuilder`] gathers the
//! settings and starts a node; [`Scheduler`] is the running node's handle,
//! which stops it gracefully ([`Scheduler::shutdown`]) or at once
//! ([`Scheduler::abort`]).

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::store::Store;
use crate::error::Error;
use crate::jobs::Workers;
use crate::model::attempt::Task;
use crate::model::attempts::Receipt;
use crate::model::backoff::Backoff;
use crate::model::due::Due;
use crate::model::failure::Failure;
use crate::model::lanes::Lanes;
use crate::model::queue::DEFAULT_QUEUE;
use crate::model::time::ms;
use crate::node::config::Config;
use crate::node::delivery::Deliveries;
use crate::node::dispatch::{dispatch, Handler, Mode};
use crate::node::duties::Duties;
use crate::node::events::SchedulerStats;
use crate::node::lease::Leases;
use crate::node::window::Window;
use crate::node::Node;
use crate::notify::Made;
use crate::sql::claims::Claims;
use crate::targets::Target;
use tokio_timing_wheel::TimingWheel;

/// Settings of a [`Scheduler`], from [`Scheduler::builder`].
///
/// Every duration setting accepts any `Duration`: one longer than 30 years
/// is taken as 30 years, which a scheduler treats as never. Settings that
/// cannot work together are refused by `start` with [`Error::is_config`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::{Backoff, Scheduler, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// let scheduler = Scheduler::builder(store.clone())
///     .node_id("worker-1")
///     .window(Duration::from_secs(60))
///     .callback_timeout(Duration::from_secs(30))
///     .max_concurrency(256)
///     .max_attempts(8)
///     .backoff(Backoff::exponential(Duration::from_secs(1), Duration::from_secs(600)))
///     .start(|task| async move {
///         println!("task {} attempt {}", task.id(), task.attempt());
///         Ok::<_, std::convert::Infallible>(())
///     })
///     .await?;
/// assert_eq!(scheduler.stats().shards_owned, store.shards());
/// scheduler.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SchedulerBuilder {
    store: Store,
    config: Config,
    /// The handlers given with [`handle`](Self::handle), in order.
    handlers: Vec<(String, Handler)>,
    /// The queues a stream serves, if named.
    stream_queues: Option<Vec<String>>,
    /// Each target's queue and timeout (see [`deliver`](Self::deliver)).
    target_timeouts: Vec<(String, Duration)>,
    /// Each target's queue and limit on deliveries in flight.
    target_limits: Vec<(String, usize)>,
    /// Each typed job's kind and the queue whose [`Workers`] serve it (see
    /// [`work`](Self::work)).
    kinds: Vec<(&'static str, String)>,
}

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("store", &self.store)
            .field("config", &self.config)
            .field(
                "handlers",
                &self.handlers.iter().map(|(q, _)| q).collect::<Vec<_>>(),
            )
            .field("stream_queues", &self.stream_queues)
            .finish()
    }
}

impl SchedulerBuilder {
    /// This node's name (default: `node-` and a random suffix). It must be
    /// unique among live nodes. A node restarted under the same name takes
    /// its shards back at once instead of waiting for their leases to
    /// expire; with the default name a restart does too when it runs on the
    /// same machine under Linux, where it can see that the old process is
    /// gone. Give a stable name where a restart comes back elsewhere (a pod
    /// rescheduled to another host) and should not wait for `lease_ttl`.
    pub fn node_id(mut self, id: impl Into<String>) -> Self {
        self.config.node_id = Some(id.into());
        self
    }

    /// How far ahead tasks are loaded into the in-memory wheel (default
    /// 60 s); the window is refreshed every half window. Tasks further out
    /// cost no memory.
    pub fn window(mut self, window: Duration) -> Self {
        self.config.window = window;
        self
    }

    /// How often to poll for tasks scheduled or moved into the window by
    /// other processes (default 1 s): the way such tasks arrive on SQLite,
    /// and on PostgreSQL while the scheduler's `LISTEN` connection is down
    /// (it rests while the connection is up: every change notifies, and a
    /// connection lost or opened again reloads the window).
    pub fn catch_up_interval(mut self, every: Duration) -> Self {
        self.config.catch_up = every;
        self
    }

    /// How long a handler may run, or a streamed delivery may stay
    /// unsettled, before the attempt counts as failed (default 60 s),
    /// measured from the claim. A handler past it is cancelled, and one the
    /// runtime could not even start by then is not started, so a delivery
    /// always ends before its lock (`callback_timeout + lock_grace`) runs out.
    pub fn callback_timeout(mut self, timeout: Duration) -> Self {
        self.config.callback_timeout = timeout;
        self
    }

    /// How much longer than `callback_timeout` a claimed task stays locked
    /// (default 10 s). If the node dies mid-delivery, the task's shard owner
    /// reclaims it once `callback_timeout + lock_grace` has passed.
    pub fn lock_grace(mut self, grace: Duration) -> Self {
        self.config.lock_grace = grace;
        self
    }

    /// The most deliveries in flight at once on this node, across its
    /// queues (default 1024). A delivery to a handler (or a target) that
    /// succeeds gives its place back when the handler returns, before its
    /// success is written, so the next claim need not wait for that write;
    /// tasks claimed and not yet settled stay at most twice this many. A
    /// failed attempt keeps its place until its failure is written, and a
    /// streamed delivery until it is settled.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.config.max_concurrency = n;
        self
    }

    /// The most deliveries of `queue` in flight at once on this node
    /// (default: only the node's `max_concurrency` applies). Tasks of the
    /// queue due while it is full wait, still scheduled, and are claimed
    /// as room comes: lowest [priority](crate::Schedule::priority) number
    /// first, then earliest due. The limit is per node: with `n` nodes
    /// serving the queue, up to `n` times this many run at once.
    ///
    /// `start` refuses a limit of zero, and a limit on a queue the
    /// scheduler does not serve (a misspelt name), with [`Error::is_config`].
    pub fn queue_concurrency(mut self, queue: impl Into<String>, n: usize) -> Self {
        self.config.queue_concurrency.insert(queue.into(), n);
        self
    }

    /// Serves `queue` with `handler`, run for each delivery of the queue's
    /// tasks under `callback_timeout`, the node's `max_concurrency` and the
    /// queue's own limit ([`queue_concurrency`](Self::queue_concurrency)).
    /// Start with [`start`](Self::start), which adds a handler for the
    /// default queue, or with [`start_queues`](Self::start_queues) to serve
    /// only the queues given here.
    ///
    /// Each queue's shards are shared among the nodes that serve it, so
    /// nodes may serve different queues (a node of its own for slow
    /// reports, say). A task whose queue no node serves waits, scheduled,
    /// until one does: it is counted in [`Store::queue_counts`], and never
    /// marked dead for it.
    ///
    /// `start` refuses a queue name that is invalid ([`Error::is_invalid_queue`])
    /// or given two handlers ([`Error::is_config`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use tokio::sync::mpsc;
    /// use ttw_durable::{Scheduler, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let (tx, mut rx) = mpsc::unbounded_channel();
    /// let mails = tx.clone();
    /// let scheduler = Scheduler::builder(store.clone())
    ///     .handle("emails", move |task| {
    ///         let tx = mails.clone();
    ///         async move { tx.send(format!("mail {}", task.priority())).map_err(|_| "gone") }
    ///     })
    ///     .queue_concurrency("emails", 4)
    ///     .start(move |task| {
    ///         let tx = tx.clone();
    ///         async move {
    ///             tx.send(format!("{} task", task.queue())).ok();
    ///             Ok::<_, Infallible>(())
    ///         }
    ///     })
    ///     .await?;
    ///
    /// store.schedule(b"hi".to_vec()).queue("emails").priority(-1).await?;
    /// assert_eq!(rx.recv().await.unwrap(), "mail -1");
    /// store.schedule(b"x".to_vec()).delay(Duration::from_millis(10)).await?;
    /// assert_eq!(rx.recv().await.unwrap(), "default task");
    /// scheduler.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn handle<F, Fut, E>(mut self, queue: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        let handler: Handler = Arc::new(move |task| {
            let fut = handler(task);
            async move {
                fut.await
                    .map(|()| Receipt::none())
                    .map_err(|e| Failure::new(e.to_string()))
            }
            .boxed()
        });
        self.handlers.push((queue.into(), handler));
        self
    }

    /// Serves `queue` with typed `workers`: each task runs on the worker
    /// registered for its kind, its arguments decoded (see [`Workers`]).
    /// Many kinds may share a queue; `start` refuses, with
    /// [`Error::is_config`], a kind served by two queues or registered
    /// twice. Otherwise as [`deliver`](Self::deliver).
    ///
    /// # Examples
    ///
    /// See [`Workers`].
    pub fn work(mut self, queue: impl Into<String>, workers: Workers) -> Self {
        let queue = queue.into();
        if let Some(kind) = workers.registered_twice() {
            self.kinds.push((kind, queue.clone()));
        }
        self.kinds
            .extend(workers.kinds().map(|kind| (kind, queue.clone())));
        if let Some(timeout) = workers.own_timeout() {
            self.target_timeouts.push((queue.clone(), timeout));
        }
        let workers = Arc::new(workers);
        let handler: Handler = Arc::new(move |task| workers.deliver(task));
        self.handlers.push((queue, handler));
        self
    }

    /// Serves `queue` by delivering its tasks to `target`: a [`Webhook`],
    /// a [`JetStream`] subject, or a [`Target`] of one's own. To the rest of
    /// the scheduler it is a handler as [`handle`](Self::handle) gives one:
    /// claimed and fenced the same way, run under `callback_timeout`, its
    /// failures retried after the backoff (or when the failure says), and
    /// start with [`start_queues`](Self::start_queues) (or
    /// [`start`](Self::start) to serve the default queue as well). The
    /// target's [`max_in_flight`](Target::max_in_flight) becomes the
    /// queue's [`queue_concurrency`](Self::queue_concurrency) unless one is
    /// given for it.
    ///
    /// `start` refuses, with [`Error::is_config`], a target whose
    /// [`timeout`](Target::timeout) is longer than `callback_timeout`.
    ///
    /// [`Webhook`]: crate::targets
    /// [`JetStream`]: crate::targets
    ///
    /// # Examples
    ///
    /// See [`Target`].
    pub fn deliver(mut self, queue: impl Into<String>, target: impl Target) -> Self {
        let queue = queue.into();
        let target = Arc::new(target);
        if let Some(n) = target.max_in_flight() {
            self.target_limits.push((queue.clone(), n));
        }
        self.target_timeouts.push((queue.clone(), target.timeout()));
        let handler: Handler = Arc::new(move |task| target.deliver(task));
        self.handlers.push((queue, handler));
        self
    }

    /// Serves `queue` as a pull queue: its due tasks wait for workers to
    /// claim them (see [`Pulls`](crate::Pulls)) instead of going to a
    /// handler. The node holds the queue's shards as for any queue: its
    /// wheel wakes the claims waiting on the queue the moment a task falls
    /// due (on PostgreSQL, those of every process, by a `NOTIFY`), and its
    /// reclaim, every heartbeat, makes a task whose lease ran out due again.
    /// Start with [`start_queues`](Self::start_queues).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{ClaimRequest, Scheduler, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let scheduler = Scheduler::builder(store.clone()).pull("jobs").start_queues().await?;
    /// store.schedule("later").queue("jobs").delay(Duration::from_millis(200)).await?;
    ///
    /// // Waits, and is answered as the task falls due.
    /// let request = ClaimRequest::new("worker-1").wait(Duration::from_secs(10));
    /// let held = store.pulls().claim("jobs", request).await?;
    /// assert_eq!(held[0].task().payload(), b"later");
    /// store.pulls().ack(held[0].task().id(), held[0].claim(), None).await?;
    /// scheduler.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn pull(mut self, queue: impl Into<String>) -> Self {
        let queue = queue.into();
        self.config.pull_queues.insert(queue.clone());
        // Never called: dispatch hands a pull queue's fired tasks to the
        // claims waiting on it instead.
        let handler: Handler = Arc::new(|_task| {
            futures::future::ready(Err(Failure::new(
                "a pull queue's task is claimed by workers",
            )))
            .boxed()
        });
        self.handlers.push((queue, handler));
        self
    }

    /// The queues a scheduler started with
    /// [`start_stream`](Self::start_stream) serves (default: the default
    /// queue alone). Each delivery tells its queue
    /// ([`Task::queue`](crate::Task::queue)).
    pub fn stream_queues<I, Q>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = Q>,
        Q: Into<String>,
    {
        self.stream_queues = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// Attempts before a task is marked dead, for tasks scheduled without
    /// their own limit (default 5).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.config.max_attempts = n;
        self
    }

    /// The delay before a retry (default 1 s doubling up to 1 h, jittered).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// How long done and cancelled tasks are kept before a background sweep
    /// deletes them (default 24 h). Dead tasks are kept until redriven.
    /// The sweep runs at most every tenth of the retention (between half a
    /// window and 10 minutes apart), so a finished task may outlive the
    /// retention by that much.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.config.retention = retention;
        self
    }

    /// How long a shard lease lasts without a heartbeat of its holder
    /// (default 10 s): how long a dead node's shards wait before others take
    /// them, unless its death is proven sooner (a restart under the same
    /// node id, or on Linux a process on the same machine found gone). The
    /// running tasks of a node proven dead come back with its shards; those
    /// of a node only silent, after their locks.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.config.lease_ttl = ttl;
        self
    }

    /// How often the node heartbeats (one small write, which keeps all its
    /// leases, and on PostgreSQL the read of the other nodes and its shards
    /// in the same statement) and rebalances (default 2 s). Tasks left
    /// running in shards it takes are reclaimed in the same heartbeat.
    /// Expired locks in shards it held all along are looked for every
    /// `lock_grace` while one may run out unseen (after shards were taken,
    /// or a claim or outcome failed, until `callback_timeout + lock_grace`
    /// later), and once a minute otherwise: a delivery that records its
    /// outcome leaves no lock behind.
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.config.heartbeat = every;
        self
    }

    /// Starts the scheduler with a handler run for each delivery of the
    /// default queue (and the handlers given with [`handle`](Self::handle)
    /// for theirs), under `callback_timeout` and `max_concurrency`. `Ok`
    /// marks the task done;
    /// `Err`, a panic or the timeout count as a failed attempt (a retry
    /// after the backoff, or dead when out of attempts). A slow, hung or
    /// panicking handler never holds up other tasks or the wheel.
    ///
    /// Before returning, the node has heartbeated, taken its share of the
    /// shards and loaded their window.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for invalid settings, [`Error::is_invalid_queue`]
    /// for a bad queue name, [`Error::is_database`] if the first heartbeat
    /// or window load fails.
    pub async fn start<F, Fut, E>(self, handler: F) -> Result<Scheduler, Error>
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        self.handle(DEFAULT_QUEUE, handler).start_queues().await
    }

    /// Starts the scheduler serving only the queues given with
    /// [`handle`](Self::handle), each with its handler; otherwise as
    /// [`start`](Self::start).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`Error::is_config`] if no queue was given.
    pub async fn start_queues(mut self) -> Result<Scheduler, Error> {
        if self.stream_queues.is_some() {
            return Err(Error::config(
                "stream_queues is for start_stream; give handlers with handle",
            ));
        }
        self.kinds.sort_unstable();
        if let Some(pair) = self.kinds.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::config(format!(
                "kind '{}' has two workers (queues '{}' and '{}'): a kind is served by one",
                pair[0].0, pair[0].1, pair[1].1
            )));
        }
        let mut handlers = std::mem::take(&mut self.handlers);
        handlers.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = handlers.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::config(format!(
                "queue '{}' was given two handlers",
                pair[0].0
            )));
        }
        let queues = handlers.iter().map(|(q, _)| q.clone()).collect();
        // Sorted as `Lanes` sorts them: a handler's index is its queue's.
        let handlers: Arc<[Handler]> = handlers.into_iter().map(|(_, h)| h).collect();
        self.start_inner(queues, Mode::Handlers(handlers)).await
    }

    /// Starts the scheduler delivering on a stream instead: the consumer
    /// calls [`Delivery::ack`](crate::Delivery::ack) or [`Delivery::nack`](crate::Delivery::nack); a delivery not
    /// settled within `callback_timeout` counts as failed.
    ///
    /// # Errors
    ///
    /// As [`SchedulerBuilder::start`].
    pub async fn start_stream(mut self) -> Result<(Scheduler, Deliveries), Error> {
        if !self.handlers.is_empty() {
            return Err(Error::config(
                "a scheduler delivers to handlers or on a stream, not both",
            ));
        }
        let queues = self
            .stream_queues
            .take()
            .unwrap_or_else(|| vec![DEFAULT_QUEUE.to_string()]);
        let (tx, rx) = mpsc::channel(self.config.max_concurrency.min(1 << 16));
        let scheduler = self.start_inner(queues, Mode::Stream(tx)).await?;
        Ok((scheduler, Deliveries { rx }))
    }

    async fn start_inner(mut self, queues: Vec<String>, mode: Mode) -> Result<Scheduler, Error> {
        for (queue, n) in std::mem::take(&mut self.target_limits) {
            self.config.queue_concurrency.entry(queue).or_insert(n);
        }
        let config = self.config.settle()?;
        if let Some((queue, timeout)) = self
            .target_timeouts
            .iter()
            .find(|(_, t)| *t > config.callback_timeout)
        {
            return Err(Error::config(format!(
                "the target of queue '{queue}' has a timeout of {timeout:?}, longer than \
                 the scheduler's callback_timeout ({:?}), past which a delivery is no \
                 longer fenced",
                config.callback_timeout
            )));
        }
        let store = self.store;
        let shards = store.shards();
        let lanes = Arc::new(Lanes::new(queues, shards)?);
        if let Some(queue) = config
            .queue_concurrency
            .keys()
            .find(|q| lanes.queue_index(q).is_none())
        {
            return Err(Error::config(format!(
                "queue_concurrency names queue '{queue}', which this scheduler does not serve"
            )));
        }
        let node_id = config
            .node_id
            .clone()
            .unwrap_or_else(|| format!("node-{:08x}", random_u64() as u32));
        let session = format!("{node_id}/{:016x}", random_u64());
        let (wheel, expirations) = TimingWheel::builder().build::<i64, Due>();
        let clock = config.clock.clone();
        let db = store.db().clone();
        let leases = Leases::new(
            db.clone(),
            lanes.clone(),
            shards,
            node_id.clone(),
            session.clone(),
            ms(config.lease_ttl),
        );
        let node = Arc::new(Node::new(
            config,
            node_id,
            Arc::new(Window::new(wheel, lanes.clone(), clock)),
            Claims::new(db, lanes, shards, session)
                .announcing_on(store.names().channel.clone())
                .telling({
                    let store = store.clone();
                    Arc::new(move |tasks| store.notifier().committed(tasks, Made::Created))
                }),
            leases,
            store.clone(),
        ));
        // Subscribed before the first window load, so that nothing scheduled
        // in-process from here on is missed.
        let listener = store.notifier().listen(node.listening.clone());
        let duties = Duties::join(&node, &node.config, listener).await?;
        let dispatcher = tokio::spawn(dispatch(node.clone(), expirations, mode));
        Ok(Scheduler {
            node,
            duties,
            dispatcher: Some(dispatcher),
        })
    }
}

/// A running scheduler: the node's leases, its wheel, and its deliveries.
///
/// Dropping it without [`Scheduler::shutdown`] stops it as
/// [`Scheduler::abort`] does.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio::sync::mpsc;
/// use ttw_durable::{Scheduler, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// let (tx, mut rx) = mpsc::unbounded_channel();
/// let scheduler = Scheduler::builder(store.clone())
///     .start(move |task| {
///         let tx = tx.clone();
///         async move { tx.send(task.into_payload()).map_err(|_| "receiver gone") }
///     })
///     .await?;
///
/// store.schedule(b"hello".to_vec()).delay(Duration::from_millis(50)).await?;
/// assert_eq!(rx.recv().await.unwrap(), b"hello");
/// scheduler.shutdown().await?;
/// # Ok(())
/// # }
/// ```
pub struct Scheduler {
    pub(super) node: Arc<Node>,
    /// The node's background duties.
    duties: Duties,
    dispatcher: Option<JoinHandle<()>>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("node_id", &self.node.node_id)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Scheduler {
    /// Settings for a scheduler on `store`.
    pub fn builder(store: Store) -> SchedulerBuilder {
        let config = Config {
            clock: store.clock().clone(),
            ..Config::default()
        };
        SchedulerBuilder {
            store,
            config,
            handlers: Vec::new(),
            stream_queues: None,
            target_timeouts: Vec::new(),
            target_limits: Vec::new(),
            kinds: Vec::new(),
        }
    }

    /// This node's name.
    pub fn node_id(&self) -> &str {
        &self.node.node_id
    }

    /// Counters of this node.
    pub fn stats(&self) -> SchedulerStats {
        self.node.stats()
    }

    /// The counters of this node's in-memory wheel: `pending` is how many
    /// tasks wait in memory (those of its shards due within the window).
    ///
    /// # Errors
    ///
    /// The wheel's [`tokio_timing_wheel::Error::is_closed`] once the scheduler stopped.
    pub async fn wheel_stats(
        &self,
    ) -> Result<tokio_timing_wheel::Stats, tokio_timing_wheel::Error> {
        self.node.window.wheel().stats().await
    }

    /// Stops gracefully: no new claims; deliveries in flight finish (within
    /// `callback_timeout`) and are recorded. Meanwhile the node is marked
    /// as leaving (the others no longer count it in their shares) and gives
    /// its shards back as they come idle (those
    /// with nothing in flight at once), so other nodes take them without
    /// waiting for the TTL or for the slowest delivery; whatever it still
    /// holds at the end is released then, and its membership row deleted.
    /// Tasks not yet claimed stay
    /// scheduled in the store. A shutdown whose future is dropped before it
    /// ends (cut short by a timeout) stops what is left as
    /// [`Scheduler::abort`] does.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`] if releasing the leases or deleting the
    /// membership row failed (the leases then lapse after the TTL, and the
    /// row is left to age).
    pub async fn shutdown(mut self) -> Result<(), Error> {
        self.node.leave().await;
        // The handle stays in `self` while it is awaited: a shutdown cut
        // short here (its future dropped) leaves `Drop` to stop the rest.
        if let Some(dispatcher) = self.dispatcher.as_mut() {
            let _ = dispatcher.await;
        }
        self.dispatcher = None;
        self.duties.stop().await;
        let _ = self.node.window.wheel().stop().await;
        self.node.leases.release(None).await?;
        self.node.leases.forget().await?;
        Ok(())
    }

    /// Stops at once, as a crash would: deliveries in flight are cancelled
    /// and not recorded, leases are not released (others take the shards
    /// when they expire), and later `ack`s fail. Returns the counters as
    /// the node died: `delivered - succeeded - failed` is what it had in
    /// flight, the most tasks its death can cause to be delivered twice.
    /// For fault drills and tests; use [`Scheduler::shutdown`] otherwise.
    pub fn abort(mut self) -> SchedulerStats {
        self.abort_now();
        self.stats()
    }

    fn abort_now(&mut self) {
        self.node.outcomes.abort();
        self.duties.abort();
        if let Some(dispatcher) = self.dispatcher.take() {
            dispatcher.abort();
        }
        // Outside a runtime (dropped after it ended) the driver is gone or
        // goes with the runtime.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let wheel = self.node.window.wheel().clone();
            runtime.spawn(async move {
                let _ = wheel.stop().await;
            });
        }
    }

    /// Fault injection (feature `test-faults`, for this crate's tests):
    /// stop (`true`) or resume (`false`) this node's heartbeats while its
    /// wheel keeps firing, as a long pause or a partition would. Its leases
    /// expire and other nodes take them; its claims are then refused by the
    /// fence.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_pause_heartbeat(&self, paused: bool) {
        self.node.faults.pause_heartbeat(paused);
    }

    /// Fault injection (feature `test-faults`): the next `n` window loads
    /// fail as a database error would, without reaching the database.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_fail_loads(&self, n: u64) {
        self.node.faults.fail_loads(n);
    }

    /// Fault injection (feature `test-faults`): the next `n` looks at why
    /// fired tasks were not claimed fail as a database error would, without
    /// reaching the database.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_fail_explains(&self, n: u64) {
        self.node.faults.fail_explains(n);
    }

    /// Fault injection (feature `test-faults`): the next `n` claims of
    /// fired tasks fail as a database error would (a full disk), without
    /// reaching the database.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_fail_claims(&self, n: u64) {
        self.node.faults.fail_claims(n);
    }

    /// Fault injection (feature `test-faults`): the next `n` outcome
    /// statements (a batch of successes, a success written alone after its
    /// batch failed, a failed attempt's retry or death) fail as a database
    /// error would, without reaching the database.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_fail_outcomes(&self, n: u64) {
        self.node.faults.fail_outcomes(n);
    }

    /// Fault injection (feature `test-faults`): how many of the claim and
    /// outcome failures asked for are still to come.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_left(&self) -> (u64, u64) {
        self.node.faults.left()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if self.dispatcher.is_some() {
            self.abort_now();
        }
    }
}

fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    // Each `RandomState` has keys of its own, drawn from the system's
    // randomness once per thread and then stepped.
    hasher.write_u32(std::process::id());
    hasher.finish()
}
