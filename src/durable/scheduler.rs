//! The scheduler: one per process (or per node). It holds leases on shards,
//! keeps the next window of their tasks in a [`TimingWheel`], claims what
//! fires in one fenced statement, delivers it to a handler or a stream, and
//! records the outcome.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use tokio::sync::{broadcast, mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::MissedTickBehavior;

use super::delivery::{Backoff, Deliveries, Delivery, Task};
use super::lease;
use super::report::{Failing, Reports};
use super::shards::ShardTable;
use super::store::{now_ms, Failed, Store};
use super::Error;
use crate::{Expirations, TimingWheel};

/// The most ids claimed in one statement.
const CLAIM_BATCH: usize = 500;

type Handler = Arc<dyn Fn(Task) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// The longest any duration setting of a scheduler is taken to be: 30
/// years, forever for a scheduler. Longer settings (up to `Duration::MAX`)
/// are lowered to it, so that no deadline a setting implies can overflow.
const LONGEST: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

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
/// use tokio_timing_wheel::durable::{Backoff, Scheduler, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tokio_timing_wheel::durable::Error> {
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
#[derive(Debug, Clone)]
pub struct SchedulerBuilder {
    store: Store,
    config: Config,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    node_id: Option<String>,
    window: Duration,
    catch_up: Duration,
    callback_timeout: Duration,
    lock_grace: Duration,
    max_concurrency: usize,
    max_attempts: u32,
    backoff: Backoff,
    retention: Duration,
    lease_ttl: Duration,
    heartbeat: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_id: None,
            window: Duration::from_secs(60),
            catch_up: Duration::from_secs(1),
            callback_timeout: Duration::from_secs(60),
            lock_grace: Duration::from_secs(10),
            max_concurrency: 1024,
            max_attempts: 5,
            backoff: Backoff::default(),
            retention: Duration::from_secs(24 * 3600),
            lease_ttl: Duration::from_secs(10),
            heartbeat: Duration::from_secs(2),
        }
    }
}

impl Config {
    /// Lowers every duration setting to [`LONGEST`].
    fn clamp_durations(&mut self) {
        for d in [
            &mut self.window,
            &mut self.catch_up,
            &mut self.callback_timeout,
            &mut self.lock_grace,
            &mut self.retention,
            &mut self.lease_ttl,
            &mut self.heartbeat,
        ] {
            *d = (*d).min(LONGEST);
        }
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
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
    /// other processes (default 1 s): the safety net under `LISTEN/NOTIFY`,
    /// and the only way such tasks arrive on SQLite.
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

    /// The most deliveries in flight at once (default 1024).
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.config.max_concurrency = n;
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
    /// leases) and rebalances (default 2 s). Tasks left running in shards
    /// it takes are reclaimed in the same heartbeat; expired locks in
    /// shards it held all along are looked for every `lock_grace`.
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.config.heartbeat = every;
        self
    }

    fn check(&self) -> Result<(), Error> {
        let c = &self.config;
        if c.window < Duration::from_millis(10) {
            return Err(Error::config("the window must be at least 10 ms"));
        }
        if c.heartbeat.is_zero() || c.catch_up.is_zero() {
            return Err(Error::config(
                "the heartbeat and catch-up intervals must not be zero",
            ));
        }
        if c.lease_ttl <= c.heartbeat {
            return Err(Error::config(
                "the lease TTL must be longer than the heartbeat",
            ));
        }
        if c.max_concurrency == 0 || c.max_attempts == 0 {
            return Err(Error::config(
                "max_concurrency and max_attempts must be at least 1",
            ));
        }
        if c.callback_timeout.is_zero() {
            return Err(Error::config("the callback timeout must not be zero"));
        }
        Ok(())
    }

    /// Starts the scheduler with a handler run for each delivery, under
    /// `callback_timeout` and `max_concurrency`. `Ok` marks the task done;
    /// `Err`, a panic or the timeout count as a failed attempt (a retry
    /// after the backoff, or dead when out of attempts). A slow, hung or
    /// panicking handler never holds up other tasks or the wheel.
    ///
    /// Before returning, the node has heartbeated, taken its share of the
    /// shards and loaded their window.
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] for invalid settings, [`Error::is_database`] if
    /// the first heartbeat or window load fails.
    pub async fn start<F, Fut, E>(self, handler: F) -> Result<Scheduler, Error>
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        let handler: Handler = Arc::new(move |task| {
            let fut = handler(task);
            async move { fut.await.map_err(|e| e.to_string()) }.boxed()
        });
        self.start_inner(Mode::Handler(handler)).await
    }

    /// Starts the scheduler delivering on a stream instead: the consumer
    /// calls [`Delivery::ack`] or [`Delivery::nack`]; a delivery not
    /// settled within `callback_timeout` counts as failed.
    ///
    /// # Errors
    ///
    /// As [`SchedulerBuilder::start`].
    pub async fn start_stream(self) -> Result<(Scheduler, Deliveries), Error> {
        let (tx, rx) = mpsc::channel(self.config.max_concurrency.min(1 << 16));
        let scheduler = self.start_inner(Mode::Stream(tx)).await?;
        Ok((scheduler, Deliveries { rx }))
    }

    async fn start_inner(mut self, mode: Mode) -> Result<Scheduler, Error> {
        self.config.clamp_durations();
        self.check()?;
        let config = self.config;
        let node_id = config
            .node_id
            .clone()
            .unwrap_or_else(|| format!("node-{:08x}", random_u64() as u32));
        let session = format!("{node_id}/{:016x}", random_u64());
        let (wheel, expirations) = TimingWheel::builder().build::<i64, i64>();
        let shards = self.store.shards();
        // Subscribed before the first window load, so that nothing scheduled
        // in-process from here on is missed.
        let local = self.store.inner.local.subscribe();
        let node = Arc::new(Node {
            store: self.store,
            node_id,
            session,
            shards: ShardTable::new(shards),
            horizon: AtomicI64::new(0),
            wheel,
            semaphore: Arc::new(Semaphore::new(config.max_concurrency)),
            stopping: Notify::new(),
            reload: Notify::new(),
            drained: Notify::new(),
            heartbeat_paused: AtomicBool::new(false),
            last_reclaim: std::sync::Mutex::new(None),
            reclaim_owed: AtomicBool::new(false),
            membership: tokio::sync::Mutex::new(()),
            leaving: AtomicBool::new(false),
            failing_loads: AtomicU64::new(0),
            failing_explains: AtomicU64::new(0),
            aborted: AtomicBool::new(false),
            counters: Counters::default(),
            reports: Reports::default(),
            config,
        });
        // Join, take shards and load their window before returning.
        node.beat().await?;
        node.load_window().await?;
        // The first heartbeat asked for a window load, which just happened.
        let _ = node.reload.notified().now_or_never();
        let heartbeats = tokio::spawn(node.clone().heartbeats());
        let control = tokio::spawn(node.clone().control());
        let listener = tokio::spawn(node.clone().listen(local));
        let dispatcher = tokio::spawn(node.clone().dispatch(expirations, mode));
        Ok(Scheduler {
            node,
            heartbeats,
            control,
            listener,
            dispatcher: Some(dispatcher),
        })
    }
}

#[derive(Clone)]
enum Mode {
    Handler(Handler),
    Stream(mpsc::Sender<Delivery>),
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
/// use tokio_timing_wheel::durable::{Scheduler, Store};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tokio_timing_wheel::durable::Error> {
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
    node: Arc<Node>,
    heartbeats: JoinHandle<()>,
    control: JoinHandle<()>,
    listener: JoinHandle<()>,
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
        SchedulerBuilder {
            store,
            config: Config::default(),
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
    /// The wheel's [`crate::Error::is_closed`] once the scheduler stopped.
    pub async fn wheel_stats(&self) -> Result<crate::Stats, crate::Error> {
        self.node.wheel.stats().await
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
        // Leave first, so the other nodes count one node fewer and take
        // this node's shards as it gives them back: idle ones at the next
        // heartbeat (now), busy ones as their deliveries end, not all of
        // them only after the slowest delivery.
        // A heartbeat under way has read `leaving` already: let it finish
        // first, or its membership write could count the node in again.
        {
            let _membership = self.node.membership.lock().await;
            self.node.leaving.store(true, Ordering::SeqCst);
            if let Err(err) =
                lease::leave(&self.node.store, &self.node.node_id, &self.node.session).await
            {
                tracing::warn!(node = %self.node.node_id, %err, "could not leave before the deliveries in flight ended");
            }
        }
        self.node.drained.notify_one();
        self.node.stopping.notify_one();
        // The handle stays in `self` while it is awaited: a shutdown cut
        // short here (its future dropped) leaves `Drop` to stop the rest.
        if let Some(dispatcher) = self.dispatcher.as_mut() {
            let _ = dispatcher.await;
        }
        self.dispatcher = None;
        self.heartbeats.abort();
        self.control.abort();
        self.listener.abort();
        let _ = (&mut self.heartbeats).await;
        let _ = (&mut self.control).await;
        let _ = (&mut self.listener).await;
        let _ = self.node.wheel.stop().await;
        lease::release(&self.node.store, &self.node.session, None).await?;
        lease::forget(&self.node.store, &self.node.node_id, &self.node.session).await?;
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
        self.node.aborted.store(true, Ordering::SeqCst);
        self.heartbeats.abort();
        self.control.abort();
        self.listener.abort();
        if let Some(dispatcher) = self.dispatcher.take() {
            dispatcher.abort();
        }
        // Outside a runtime (dropped after it ended) the driver is gone or
        // goes with the runtime.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let wheel = self.node.wheel.clone();
            runtime.spawn(async move {
                let _ = wheel.stop().await;
            });
        }
    }

    /// Fault injection: stop (`true`) or resume (`false`) this node's
    /// heartbeats and lease renewals while its wheel keeps firing, as a
    /// long pause or a partition would. Its leases expire and other nodes
    /// take them; its claims are then refused by the fence.
    #[doc(hidden)]
    pub fn fault_pause_heartbeat(&self, paused: bool) {
        self.node.heartbeat_paused.store(paused, Ordering::SeqCst);
    }

    /// Fault injection: the next `n` window loads fail as a database error
    /// would, without reaching the database.
    #[doc(hidden)]
    pub fn fault_fail_loads(&self, n: u64) {
        self.node.failing_loads.store(n, Ordering::SeqCst);
    }

    /// Fault injection: the next `n` lookups of why fired tasks were not
    /// claimed fail as a database error would, without reaching the
    /// database.
    #[doc(hidden)]
    pub fn fault_fail_explains(&self, n: u64) {
        self.node.failing_explains.store(n, Ordering::SeqCst);
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if self.dispatcher.is_some() {
            self.abort_now();
        }
    }
}

/// Counters of one node, from [`Scheduler::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulerStats {
    /// Shards whose lease this node holds.
    pub shards_owned: u32,
    /// Leases this node took over from another owner (a dead, paused or
    /// departed node, or its own previous run).
    pub lease_takeovers: u64,
    /// Fired tasks this node tried to claim in a shard it believed it held,
    /// refused because another node holds the lease now.
    pub claims_lost: u64,
    /// Outcomes (`ack`, `nack`, handler results) refused because the
    /// attempt no longer belonged to this node.
    pub completions_lost: u64,
    /// Attempts started (claims won).
    pub delivered: u64,
    /// Attempts that succeeded.
    pub succeeded: u64,
    /// Attempts that failed (error, panic, timeout, dropped delivery).
    pub failed: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// Tasks marked dead.
    pub dead: u64,
    /// Running tasks reclaimed after their lock ran out.
    pub reclaimed: u64,
    /// Deliveries in flight now: claimed and not yet recorded, or fired
    /// and on their way to the claim.
    pub in_flight: u64,
}

#[derive(Debug, Default)]
struct Counters {
    takeovers: AtomicU64,
    claims_lost: AtomicU64,
    completions_lost: AtomicU64,
    delivered: AtomicU64,
    succeeded: AtomicU64,
    failed: AtomicU64,
    retried: AtomicU64,
    dead: AtomicU64,
    reclaimed: AtomicU64,
}

/// The state one scheduler's tasks share.
pub(crate) struct Node {
    store: Store,
    node_id: String,
    session: String,
    config: Config,
    /// Which shards this node believes it holds, their deliveries in
    /// flight, and which are being given back.
    shards: ShardTable,
    /// Tasks due before this time (ms) belong in the wheel.
    horizon: AtomicI64,
    wheel: TimingWheel<i64, i64>,
    semaphore: Arc<Semaphore>,
    stopping: Notify,
    reload: Notify,
    /// A shard being drained for giving back has nothing in flight any
    /// more: heartbeat now rather than leave its tasks waiting.
    drained: Notify,
    heartbeat_paused: AtomicBool,
    /// When a heartbeat last reclaimed tasks.
    last_reclaim: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Shards were taken and their tasks not yet reclaimed (the reclaim
    /// failed): every heartbeat tries until one succeeds.
    reclaim_owed: AtomicBool,
    /// Held by a heartbeat while it writes membership and leases, and by a
    /// shutdown while it starts leaving: a heartbeat that began before
    /// `leaving` was set must not write the membership row (counted in the
    /// shares again) after the shutdown marked it leaving.
    membership: tokio::sync::Mutex<()>,
    /// Shutting down: heartbeats give shards back as they come idle.
    leaving: AtomicBool,
    /// Window loads still to fail on purpose ([`Scheduler::fault_fail_loads`]).
    failing_loads: AtomicU64,
    /// Unclaimed lookups still to fail on purpose
    /// ([`Scheduler::fault_fail_explains`]).
    failing_explains: AtomicU64,
    aborted: AtomicBool,
    counters: Counters,
    /// Failing database calls, warned of at most once per interval each.
    reports: Reports,
}

impl Node {
    fn stats(&self) -> SchedulerStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SchedulerStats {
            shards_owned: self.shards.owned_count(),
            lease_takeovers: get(&c.takeovers),
            claims_lost: get(&c.claims_lost),
            completions_lost: get(&c.completions_lost),
            delivered: get(&c.delivered),
            succeeded: get(&c.succeeded),
            failed: get(&c.failed),
            retried: get(&c.retried),
            dead: get(&c.dead),
            reclaimed: get(&c.reclaimed),
            in_flight: self.shards.in_flight_total(),
        }
    }

    fn shard_of(&self, id: i64) -> usize {
        id.rem_euclid(self.store.shards_i64()) as usize
    }

    fn owns(&self, id: i64) -> bool {
        self.shards.owns(self.shard_of(id))
    }

    /// Warns of a failed database call, at most once per interval for each
    /// kind. An outcome refused by the fence (lost) or a node stopped
    /// (closed) is not a failure of the database and is not reported.
    fn report(&self, kind: Failing, err: &Error) {
        if !err.is_lost() && !err.is_closed() {
            self.reports.failed(&self.node_id, kind, err);
        }
    }

    /// Puts a task into the wheel if it is due inside the loaded window.
    async fn arm(&self, id: i64, run_at: i64) {
        if run_at >= self.horizon.load(Ordering::Acquire) || !self.owns(id) {
            return;
        }
        let delay = Duration::from_millis(u64::try_from(run_at - now_ms()).unwrap_or(0));
        let _ = self.wheel.set_timer(id, run_at, delay).await;
    }

    /// One heartbeat: liveness, renewals, rebalancing, then reclaiming
    /// expired locks in the shards held.
    async fn beat(&self) -> Result<(), Error> {
        if self.heartbeat_paused.load(Ordering::SeqCst) {
            return Ok(());
        }
        let membership = self.membership.lock().await;
        let beat = lease::heartbeat(
            &self.store,
            &self.node_id,
            &self.session,
            ms(self.config.lease_ttl),
            self.leaving.load(Ordering::SeqCst),
            |shard| self.shards.begin_release(shard as usize),
            |shard| self.shards.drain(shard as usize),
        )
        .await;
        let beat = match beat {
            Ok(beat) => beat,
            Err(err) => {
                // A release may not have happened: the shards it marked
                // take claims again (and if it did, the database refuses
                // them).
                self.shards.end_releases(&[]);
                return Err(err);
            }
        };
        let lost = self.shards.set_owned(&beat.owned);
        // Only now that the shards given back are no longer held may the
        // marks go; shards still draining keep theirs.
        self.shards.end_releases(&beat.draining);
        drop(membership);
        if lost > 0 {
            tracing::info!(node = %self.node_id, lost, "gave back or lost shard leases");
        }
        self.counters
            .takeovers
            .fetch_add(beat.takeovers, Ordering::Relaxed);
        if !beat.acquired.is_empty() {
            tracing::debug!(node = %self.node_id, acquired = beat.acquired.len(), takeovers = beat.takeovers, "took shards");
            self.reload.notify_one();
        }
        for gone in &beat.gone {
            tracing::info!(node = %self.node_id, session = %gone, "a node's process on this machine is gone: its shards are free now");
        }
        // Reclaims: at once for shards just taken (what their last owner
        // left running can no longer be recorded by it: the epoch moved),
        // and every lock grace for locks that ran out in shards held all
        // along (an outcome that could not be written). Between those, a
        // heartbeat writes nothing but its membership row.
        // A reclaim owed for shards taken stays owed until one succeeds.
        if !beat.acquired.is_empty() {
            self.reclaim_owed.store(true, Ordering::SeqCst);
        }
        let period = self.config.lock_grace.max(self.config.heartbeat);
        let last = *self.last_reclaim.lock().unwrap();
        if !self.reclaim_owed.load(Ordering::SeqCst) && last.is_some_and(|t| t.elapsed() < period) {
            return Ok(());
        }
        let started = tokio::time::Instant::now();
        let default_max = i64::from(self.config.max_attempts);
        let reclaimed = self.store.reclaim(&self.session, default_max).await?;
        *self.last_reclaim.lock().unwrap() = Some(started);
        self.reclaim_owed.store(false, Ordering::SeqCst);
        for (id, run_at, dead) in reclaimed {
            self.counters.reclaimed.fetch_add(1, Ordering::Relaxed);
            if dead {
                self.counters.dead.fetch_add(1, Ordering::Relaxed);
            } else {
                self.arm(id, run_at).await;
            }
        }
        Ok(())
    }

    /// Loads every scheduled task of the held shards due within the window.
    async fn load_window(&self) -> Result<(), Error> {
        if self
            .failing_loads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Error::config("window load failed by fault injection"));
        }
        let horizon = now_ms().saturating_add(ms(self.config.window));
        self.horizon.fetch_max(horizon, Ordering::AcqRel);
        for (id, run_at) in self.store.due_before(&self.session, horizon).await? {
            self.arm(id, run_at).await;
        }
        Ok(())
    }

    /// Heartbeats (lease renewal, rebalancing, reclaims), in a task of their
    /// own: a renewal must never wait behind a window load, a catch-up poll
    /// or a sweep, which take as long as there are rows; a node stalled past
    /// its lease TTL would lose its shards to others while healthy, and the
    /// outcomes of its deliveries in flight would be fenced off and
    /// delivered again.
    async fn heartbeats(self: Arc<Self>) {
        let mut heartbeat = tokio::time::interval(self.config.heartbeat);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        heartbeat.reset();
        loop {
            tokio::select! {
                _ = heartbeat.tick() => {}
                _ = self.drained.notified() => {}
            }
            if let Err(err) = self.beat().await {
                self.report(Failing::Heartbeat, &err);
            }
        }
    }

    /// Window refreshes, catch-up polls and retention sweeps. A window load
    /// runs when a heartbeat took shards; the two run side by side, and a
    /// load that raced a change of ownership is followed by another.
    async fn control(self: Arc<Self>) {
        let mut window = tokio::time::interval(self.config.window / 2);
        let mut catch_up = tokio::time::interval(self.config.catch_up);
        for i in [&mut window, &mut catch_up] {
            i.set_missed_tick_behavior(MissedTickBehavior::Delay);
            i.reset();
        }
        let slack = 2 * ms(self.config.catch_up) + 1000;
        // The first poll looks back one slack from its own start, which
        // covers the time since the window was first loaded.
        let mut since = None;
        // A window load that failed is tried again at the next catch-up
        // tick, not half a window later: after a takeover the failed load
        // was the only one to bring in the new shards' tasks.
        let mut load_failed = false;
        loop {
            let result = tokio::select! {
                _ = self.reload.notified() => self.reload_window(&mut load_failed).await,
                _ = window.tick() => match self.reload_window(&mut load_failed).await {
                    Ok(()) => self
                        .store
                        .sweep(now_ms().saturating_sub(ms(self.config.retention)))
                        .await
                        .map(drop),
                    Err(e) => Err(e),
                },
                _ = catch_up.tick() => {
                    if load_failed {
                        self.reload_window(&mut load_failed).await
                    } else {
                        self.catch_up(&mut since, slack).await
                    }
                }
            };
            if let Err(err) = result {
                self.report(Failing::Control, &err);
            }
        }
    }

    /// Loads the window, noting whether it failed.
    async fn reload_window(&self, failed: &mut bool) -> Result<(), Error> {
        let result = self.load_window().await;
        *failed = result.is_err();
        result
    }

    /// One catch-up poll: arms what changed since `since` and moves it on.
    /// Change stamps and `since` are both the database's clock, read while
    /// each statement runs, so neither a long wait for SQLite's write lock
    /// nor a node's clock running behind hides a change from the poll; the
    /// slack only has to cover the moment between a change's stamp and its
    /// commit.
    async fn catch_up(&self, since: &mut Option<i64>, slack: i64) -> Result<(), Error> {
        let horizon = self.horizon.load(Ordering::Acquire);
        let (start, rows) = self
            .store
            .changed_since(&self.session, horizon, *since, slack)
            .await?;
        *since = Some(start - slack);
        for (id, run_at) in rows {
            self.arm(id, run_at).await;
        }
        Ok(())
    }

    /// Takes schedules of this process directly, and of other processes by
    /// `LISTEN` on PostgreSQL.
    async fn listen(self: Arc<Self>, mut local: broadcast::Receiver<(i64, i64)>) {
        let mut pg = None;
        if let (Some(options), super::store::Db::Postgres(_)) =
            (&self.store.inner.listen, self.store.db())
        {
            match sqlx::postgres::PgListener::connect_with(
                &sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect_lazy_with(options.clone()),
            )
            .await
            {
                Ok(mut listener) => match listener.listen(&self.store.inner.channel).await {
                    Ok(()) => pg = Some(listener),
                    Err(err) => tracing::warn!(%err, "LISTEN failed; relying on the catch-up poll"),
                },
                Err(err) => {
                    tracing::warn!(%err, "LISTEN connection failed; relying on the catch-up poll")
                }
            }
        }
        loop {
            let next = async {
                match pg.as_mut() {
                    Some(l) => l.try_recv().await,
                    None => futures::future::pending().await,
                }
            };
            tokio::select! {
                msg = local.recv() => match msg {
                    Ok((id, run_at)) => self.arm(id, run_at).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => self.reload.notify_one(),
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                msg = next => match msg {
                    Ok(Some(n)) => {
                        if let Some((id, run_at)) = n.payload().split_once(':') {
                            if let (Ok(id), Ok(run_at)) = (id.parse(), run_at.parse()) {
                                self.arm(id, run_at).await;
                            }
                        }
                    }
                    // The connection dropped and came back: anything sent
                    // meanwhile is found by the catch-up poll.
                    Ok(None) => {}
                    Err(err) => {
                        tracing::warn!(%err, "LISTEN failed; relying on the catch-up poll");
                        pg = None;
                    }
                },
            }
        }
    }

    /// Claims what the wheel fires, and runs each delivery under its own
    /// supervisor.
    async fn dispatch(self: Arc<Self>, expirations: Expirations<i64, i64>, mode: Mode) {
        let batch = CLAIM_BATCH.min(self.config.max_concurrency);
        let mut fired = expirations.ready_chunks(batch);
        let mut running = JoinSet::new();
        loop {
            tokio::select! {
                biased;
                _ = self.stopping.notified() => break,
                Some(_) = running.join_next(), if !running.is_empty() => {}
                chunk = fired.next() => match chunk {
                    Some(chunk) => {
                        let ids: Vec<(i64, i64)> = chunk.into_iter().map(|e| e.into_parts()).collect();
                        if let Err(err) = self.claim_and_run(ids, &mode, &mut running).await {
                            self.report(Failing::Claim, &err);
                        }
                    }
                    None => break,
                },
            }
        }
        while running.join_next().await.is_some() {}
    }

    async fn claim_and_run(
        self: &Arc<Self>,
        mut fired: Vec<(i64, i64)>,
        mode: &Mode,
        running: &mut JoinSet<()>,
    ) -> Result<(), Error> {
        // A task armed twice in quick succession (the in-process
        // announcement, NOTIFY, the catch-up poll, a re-arm) can fire twice
        // into one batch: once from the queue, once armed again after it
        // left the wheel. Its claim takes it once, so it must register in
        // its shard once, or the shard's in-flight count never returns to
        // zero and the shard can never be given back.
        fired.sort_unstable_by_key(|&(id, _)| id);
        fired.dedup_by_key(|&mut (id, _)| id);
        // Each id registers in its shard before the claim, so the shard is
        // not given back under it. Ids of shards given back are dropped
        // quietly: the new owner has loaded them. Ids of a shard being
        // given back right now come back shortly, to be claimed here if
        // the release fails or dropped if it succeeds.
        let mut ids: Vec<i64> = Vec::with_capacity(fired.len());
        for &(id, run_at) in &fired {
            let shard = self.shard_of(id);
            if self.shards.enter(shard) {
                ids.push(id);
            } else if self.shards.owns(shard) {
                let _ = self
                    .wheel
                    .set_timer(id, run_at, Duration::from_millis(50))
                    .await;
            }
        }
        if ids.is_empty() {
            return Ok(());
        }
        let mut permits = match self
            .semaphore
            .clone()
            .acquire_many_owned(ids.len() as u32)
            .await
        {
            Ok(permits) => permits,
            Err(_) => {
                self.exit_all(&ids);
                return Err(Error::closed());
            }
        };
        // Each delivery must end by `deadline`, measured from before the
        // claim, so that it always ends (and its outcome is written within
        // the grace) before its lock runs out and the task is reclaimed.
        let deadline = tokio::time::Instant::now() + self.config.callback_timeout;
        let now = now_ms();
        let lock = now + ms(self.config.callback_timeout) + ms(self.config.lock_grace);
        let claimed = match self.store.claim(&self.session, &ids, now, lock).await {
            Ok(claimed) => claimed,
            Err(err) => {
                self.exit_all(&ids);
                // The database is unreachable: try these again shortly.
                for (id, run_at) in fired {
                    let _ = self
                        .wheel
                        .set_timer(id, run_at, Duration::from_millis(500))
                        .await;
                }
                return Err(err);
            }
        };
        let missing: Vec<i64> = if claimed.len() < ids.len() {
            ids.iter()
                .copied()
                .filter(|id| !claimed.iter().any(|c| c.id == *id))
                .collect()
        } else {
            Vec::new()
        };
        // The claimed ids stay registered until their outcome is recorded.
        self.exit_all(&missing);
        for c in claimed {
            self.counters.delivered.fetch_add(1, Ordering::Relaxed);
            let permit = permits.split(1).expect("one permit per claimed id");
            let task = Task::from_claimed(c);
            let shard = self.shard_of(task.id.0);
            running.spawn(
                self.clone()
                    .supervise(task, shard, mode.clone(), permit, deadline),
            );
        }
        // Only after the claimed tasks are running: a failure here must not
        // strand them.
        if !missing.is_empty() {
            if let Err(err) = self.explain_unclaimed(&missing).await {
                // Nothing else would arm these before the next window load:
                // look again shortly, as after a failed claim. (`missing`
                // is in id order, as `fired` is.)
                for (id, run_at) in fired {
                    if missing.binary_search(&id).is_ok() {
                        let _ = self
                            .wheel
                            .set_timer(id, run_at, Duration::from_millis(500))
                            .await;
                    }
                }
                return Err(err);
            }
        }
        Ok(())
    }

    /// Ends the registration of ids that will not be delivered.
    fn exit_all(&self, ids: &[i64]) {
        for &id in ids {
            if self.shards.exit(self.shard_of(id)) {
                self.drained.notify_one();
            }
        }
    }

    /// Sorts out fired ids the claim did not take: not due yet by the wall
    /// clock (re-armed), another node's lease (counted as lost to fencing),
    /// or finished, cancelled or claimed already (dropped).
    async fn explain_unclaimed(&self, missing: &[i64]) -> Result<(), Error> {
        if self
            .failing_explains
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Error::config("unclaimed lookup failed by fault injection"));
        }
        let now = now_ms();
        for (id, state, run_at, owned) in self.store.why_unclaimed(&self.session, missing).await? {
            // Another node's lease: lost to fencing, whether that node has
            // claimed the task by now or not.
            if !owned {
                self.counters.claims_lost.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if state != "scheduled" {
                continue;
            }
            if run_at > now {
                self.arm(id, run_at).await;
            } else {
                let _ = self
                    .wheel
                    .set_timer(id, run_at, Duration::from_millis(10))
                    .await;
            }
        }
        Ok(())
    }

    async fn supervise(
        self: Arc<Self>,
        task: Task,
        shard: usize,
        mode: Mode,
        permit: OwnedSemaphorePermit,
        deadline: tokio::time::Instant,
    ) {
        let timeout = self.config.callback_timeout;
        match mode {
            // A runtime too busy to start the delivery before its deadline:
            // starting it now could overlap a redelivery after the lock ran
            // out, so the attempt fails without running.
            _ if tokio::time::Instant::now() >= deadline => {
                let recorded = self
                    .failure(
                        &task,
                        "not started before its deadline (the runtime was too busy)",
                    )
                    .await;
                if let Err(err) = recorded {
                    self.report(Failing::Outcome, &err);
                }
            }
            Mode::Handler(handler) => {
                let run = AssertUnwindSafe(handler(task.clone())).catch_unwind();
                let outcome = match tokio::time::timeout_at(deadline, run).await {
                    Ok(Ok(Ok(()))) => Ok(()),
                    Ok(Ok(Err(err))) => Err(err),
                    Ok(Err(panic)) => Err(format!("handler panicked: {}", panic_message(&panic))),
                    Err(_) => Err(format!("handler timed out after {timeout:?}")),
                };
                let recorded = match outcome {
                    Ok(()) => self.succeed(&task).await,
                    Err(err) => self.failure(&task, &err).await,
                };
                if let Err(err) = recorded {
                    self.report(Failing::Outcome, &err);
                }
            }
            Mode::Stream(tx) => {
                let (settled_tx, settled_rx) = oneshot::channel();
                let delivery = Delivery {
                    task: task.clone(),
                    node: self.clone(),
                    settled: Some(settled_tx),
                    deadline,
                };
                // The send waits only if the stream holds more deliveries
                // than it has room for; it too must end by the deadline.
                let outcome = match tokio::time::timeout_at(deadline, tx.send(delivery)).await {
                    Ok(Err(_)) => Some("no consumer: the delivery stream was dropped".to_string()),
                    Err(_) => Some(format!("not taken from the stream within {timeout:?}")),
                    Ok(Ok(())) => match tokio::time::timeout_at(deadline, settled_rx).await {
                        Ok(Ok(())) => None,
                        Ok(Err(_)) => Some("delivery dropped without ack".to_string()),
                        Err(_) => Some(format!("not acknowledged within {timeout:?}")),
                    },
                };
                if let Some(err) = outcome {
                    if let Err(err) = self.failure(&task, &err).await {
                        self.report(Failing::Outcome, &err);
                    }
                }
            }
        }
        if self.shards.exit(shard) {
            self.drained.notify_one();
        }
        drop(permit);
    }

    /// Records a successful attempt.
    pub(crate) async fn succeed(&self, task: &Task) -> Result<(), Error> {
        if self.aborted.load(Ordering::SeqCst) {
            return Err(Error::closed());
        }
        if self
            .store
            .complete(&self.session, task.id.0, task.claim)
            .await?
        {
            self.counters.succeeded.fetch_add(1, Ordering::Relaxed);
            Ok(())
        } else {
            self.counters
                .completions_lost
                .fetch_add(1, Ordering::Relaxed);
            Err(Error::lost())
        }
    }

    /// Records a failed attempt: a retry after the backoff, or dead.
    pub(crate) async fn failure(&self, task: &Task, error: &str) -> Result<(), Error> {
        if self.aborted.load(Ordering::SeqCst) {
            return Err(Error::closed());
        }
        let delay = self.config.backoff.delay(task.attempt, task.id.0 as u64);
        let retry_at = now_ms().saturating_add(ms(delay));
        let default_max = i64::from(self.config.max_attempts);
        let result = self
            .store
            .fail(
                &self.session,
                task.id.0,
                task.claim,
                error,
                retry_at,
                default_max,
            )
            .await?;
        match result {
            Some(Failed::Retry(at)) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.counters.retried.fetch_add(1, Ordering::Relaxed);
                self.arm(task.id.0, at).await;
                Ok(())
            }
            Some(Failed::Dead) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.counters.dead.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(node = %self.node_id, id = %task.id, error, "task is dead: out of attempts");
                Ok(())
            }
            None => {
                self.counters
                    .completions_lost
                    .fetch_add(1, Ordering::Relaxed);
                Err(Error::lost())
            }
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string payload".to_string()
    }
}

fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}
