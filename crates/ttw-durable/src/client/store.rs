//! The client: [`Store`] opens the task store (SQLite or PostgreSQL) and
//! schedules, moves, cancels, reads and redrives tasks; one task being
//! scheduled is in [`schedule`](crate::client::schedule).

use std::collections::BTreeSet;
use std::fmt;
#[cfg(feature = "sqlite")]
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::error::Error;
use crate::model::attempts::AttemptInfo;
use crate::model::clock::Clock;
use crate::model::task::{TaskId, TaskInfo, TaskState};
use crate::model::time::to_ms;
use crate::notify::{ListenOptions, Made, Notifier};
use crate::sql::attempts;
#[cfg(feature = "sqlite")]
use crate::sql::commits::Commits;
use crate::sql::db::{Db, Follower, MemoryKeeper, PoolSettings, SQLITE_MIN_SIZE};
use crate::sql::names::Names;
use crate::sql::schema;
pub(crate) use crate::sql::tasks::Which;
use crate::sql::tasks::{self, MakeDue};

/// A durable task store on SQLite or PostgreSQL: the client that schedules
/// tasks, and what a [`Scheduler`](crate::Scheduler) runs on.
///
/// Cheap to clone; clones share one pool. Tasks scheduled through a store
/// reach the schedulers of the same process at once, those of other
/// processes through PostgreSQL `LISTEN/NOTIFY`, and every scheduler's
/// catch-up poll finds what a notification missed.
///
/// # Cancel safety
///
/// Every write on the store's own pool (schedule, batch, cancel, move,
/// redrive, queue settings, recurring schedules) runs to its end in a task
/// of its own once it has started: dropping its future (a client that hung
/// up, a timeout) leaves the write to commit or roll back, and the
/// connection it used goes back to the pool clean. Whether a dropped write
/// happened is unknown to the caller, as after a lost connection: schedule
/// again with the same idempotency key. A write on a caller's connection
/// (`schedule_in`, `schedule_batch_in`) is the caller's transaction's.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::{Store, TaskState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// let id = store
///     .schedule(b"send the reminder".to_vec())
///     .delay(Duration::from_secs(30 * 60))
///     .idempotency_key("reminder:order-42")
///     .max_attempts(5)
///     .await?;
/// // The same key again creates nothing and answers with the first id.
/// let again = store.schedule(b"other".to_vec()).idempotency_key("reminder:order-42").await?;
/// assert_eq!(again, id);
///
/// assert_eq!(store.get(id).await?.unwrap().state, TaskState::Scheduled);
/// assert!(store.cancel(id).await?);
/// assert!(!store.cancel(id).await?); // no longer pending
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    db: Db,
    shards: u32,
    notifier: Notifier,
    /// How its statements name its tables and channel.
    names: Names,
    /// What it takes as now (and its nodes, unless told otherwise).
    clock: Clock,
    /// The queues [`Store::publish_task_counts`] last set gauges for, so
    /// that a queue whose tasks are all gone is set to zero, not left at
    /// its last counts.
    published_queues: Mutex<BTreeSet<String>>,
    /// What wakes the claims waiting on its pull queues.
    pull_wakes: crate::client::pull_state::PullWakes,
    /// The writer of its pull queues' acks, started at the first.
    acks: std::sync::OnceLock<crate::group::GroupWriter<crate::client::pull_state::Acks>>,
    /// For an in-memory store, the connection outside the pool that keeps
    /// the database alive (see [`PoolSettings::sqlite_in_memory`]).
    _memory_keeper: Option<Mutex<MemoryKeeper>>,
    /// For a PostgreSQL store whose URL names several hosts (or a
    /// `target_session_attrs`), the task that follows the primary
    /// (`sql::primary`), stopped with the store.
    _follower: Option<Follower>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.inner.db.name())
            .field("shards", &self.inner.shards)
            .finish()
    }
}

/// Options for opening a [`Store`], from [`Store::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use ttw_durable::Store;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let dir = std::env::temp_dir().join(format!("ttw-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = Store::builder()
///     .shards(16)
///     .max_connections(4)
///     .connect_timeout(Duration::from_secs(5))
///     .sqlite(dir.join("tasks.db"))
///     .await?;
/// assert_eq!(store.shards(), 16);
/// # drop(store);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct StoreBuilder {
    shards: Option<u32>,
    schema: Option<String>,
    pool: PoolSettings,
    clock: Clock,
}

impl StoreBuilder {
    /// The clock the store, and its nodes, take as now: in this crate's
    /// tests, one that follows a paused Tokio clock.
    #[cfg(test)]
    pub(crate) fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The number of logical shards, used when the schema is created
    /// (default [`DEFAULT_SHARDS`](crate::DEFAULT_SHARDS), 256). A task's
    /// shard is `id % shards`. Opening an existing schema with a different
    /// number is an error ([`Error::is_config`]).
    pub fn shards(mut self, shards: u32) -> Self {
        self.shards = Some(shards);
        self
    }

    /// The most connections the pool opens (default 8).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.pool.max_connections = n.max(1);
        self
    }

    /// How long to wait for a connection before failing with
    /// [`Error::is_database`] (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.pool.connect_timeout = timeout;
        self
    }

    /// PostgreSQL only: keep the tables in this schema (created if
    /// missing) instead of `public`, so several independent stores can share
    /// one database. Letters, digits and `_` only. Needs the feature
    /// `postgres` (on by default).
    #[cfg(feature = "postgres")]
    pub fn postgres_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// SQLite only: the most bytes the database file may hold (SQLite's
    /// `max_page_count`, in whole 4 KiB pages; at least 64 KiB). A write
    /// that would grow it further fails with [`Error::is_disk_full`], as it
    /// would on a full disk, and stores nothing; reads, and writes that fit
    /// in pages freed by the retention sweep, go on. A database already
    /// larger keeps its size as its limit. Default: no limit but the disk.
    ///
    /// The write-ahead log (`-wal` file) is not counted: it is bounded by
    /// SQLite's checkpoints, not by this limit. Needs the feature `sqlite`
    /// (on by default).
    #[cfg(feature = "sqlite")]
    pub fn sqlite_max_size(mut self, bytes: u64) -> Self {
        self.pool.sqlite_max_size = Some(bytes);
        self
    }

    /// SQLite only: the size of the disk reserve, a file allocated beside
    /// the database (`tasks.db-reserve` next to `tasks.db`) and given up
    /// only when the disk is full and a checkpoint cannot move the
    /// write-ahead log into the database file without it. Without the
    /// reserve, a disk that filled up could stay stalled after space
    /// returned: the log could take the space back before a checkpoint had
    /// room to empty it. It is taken back once the disk has twice its size
    /// free. `0` for none. Default: the smaller of 16 MiB and an eighth of
    /// the file system. Needs the feature `sqlite` (on by default).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let dir = std::env::temp_dir().join(format!("ttw-doc-reserve-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let store = ttw_durable::Store::builder()
    ///     .sqlite_disk_reserve(4 << 20)
    ///     .sqlite(dir.join("tasks.db"))
    ///     .await?;
    /// assert_eq!(std::fs::metadata(dir.join("tasks.db-reserve")).unwrap().len(), 4 << 20);
    /// # drop(store);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "sqlite")]
    pub fn sqlite_disk_reserve(mut self, bytes: u64) -> Self {
        self.pool.sqlite_disk_reserve = Some(bytes);
        self
    }

    /// SQLite only: when a commit reaches the disk, and so what an
    /// acknowledged task survives. [`Commits::Flushed`] (the default,
    /// SQLite's `synchronous = NORMAL` in WAL mode) survives a killed
    /// process, not a power cut; [`Commits::Synced`] (`synchronous = FULL`)
    /// survives a power cut too, at the cost of an `fsync` per commit
    /// (BENCHMARKS.md has both rates). Schedules committed together (a
    /// batch, the service's group commit) share one `fsync`. Needs the
    /// feature `sqlite` (on by default).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// use ttw_durable::{Commits, Store};
    ///
    /// let path = std::env::temp_dir().join(format!("ttw-doc-synced-{}.db", std::process::id()));
    /// let store = Store::builder()
    ///     .sqlite_commits(Commits::Synced)
    ///     .sqlite(&path)
    ///     .await?;
    /// store.schedule("survives a power cut once this returns").await?;
    /// # drop(store);
    /// # for suffix in ["", "-wal", "-shm", "-reserve"] {
    /// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    /// # }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "sqlite")]
    pub fn sqlite_commits(mut self, commits: Commits) -> Self {
        self.pool.sqlite_commits = commits;
        self
    }

    fn check(&self) -> Result<(), Error> {
        if self.shards == Some(0) {
            return Err(Error::config("the shard count must be at least 1"));
        }
        if self
            .pool
            .sqlite_max_size
            .is_some_and(|b| b < SQLITE_MIN_SIZE)
        {
            return Err(Error::config(format!(
                "the SQLite size limit must be at least {SQLITE_MIN_SIZE} bytes"
            )));
        }
        Ok(())
    }

    /// Opens (creating if missing) an SQLite database file in WAL mode.
    /// Needs the feature `sqlite` (on by default).
    ///
    /// # Errors
    ///
    /// [`Error::is_database`] if the file cannot be opened (its message
    /// names the path, and says when its directory does not exist),
    /// [`Error::is_schema_too_new`] if a newer version of the crate wrote it,
    /// [`Error::is_config`] for a shard count that does not match.
    #[cfg(feature = "sqlite")]
    pub async fn sqlite(self, path: impl AsRef<Path>) -> Result<Store, Error> {
        self.check()?;
        let open = self.pool.sqlite(path.as_ref()).await?;
        self.finish(open.db, open.keeper, None).await
    }

    /// Opens a private in-memory SQLite database, for tests and examples. It
    /// lives as long as the store (one connection, never recycled). Needs
    /// the feature `sqlite` (on by default).
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::sqlite`].
    #[cfg(feature = "sqlite")]
    pub async fn sqlite_in_memory(self) -> Result<Store, Error> {
        self.check()?;
        let open = self.pool.sqlite_in_memory().await?;
        self.finish(open.db, open.keeper, None).await
    }

    /// Connects to PostgreSQL (`postgres://user@host:port/db`). Needs the
    /// feature `postgres` (on by default).
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] at once for a URL that is not PostgreSQL's (not a
    /// URL, or another scheme); [`Error::is_database`] if the server cannot
    /// be reached within the connect timeout, with the cause (refused,
    /// unknown host, authentication) in its message; otherwise as
    /// `StoreBuilder::sqlite`.
    #[cfg(feature = "postgres")]
    pub async fn postgres(self, url: &str) -> Result<Store, Error> {
        self.check()?;
        let open = self.pool.postgres(url, self.schema.as_deref()).await?;
        self.finish(open.db, None, open.follower).await
    }

    async fn finish(
        self,
        db: Db,
        memory_keeper: Option<MemoryKeeper>,
        follower: Option<Follower>,
    ) -> Result<Store, Error> {
        let shards = schema::prepare(&db, self.shards).await?;
        #[cfg(test)]
        let db = match self.clock {
            Clock::Tokio { .. } => db.with_test_clock(self.clock.clone()),
            Clock::System => db,
        };
        let names = Names::new(&db, self.schema.as_deref());
        // On PostgreSQL a `LISTEN` connection opens where the pool's do.
        let listen: Option<ListenOptions> = match &db {
            #[cfg(feature = "postgres")]
            Db::Postgres(pool) => Some(pool.clone()),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        let notifier = Notifier::new(listen.map(|pool| (pool, self.schema.as_deref())));
        Ok(Store {
            inner: Arc::new(StoreInner {
                db,
                shards,
                notifier,
                names,
                clock: self.clock,
                published_queues: Mutex::default(),
                pull_wakes: Default::default(),
                acks: std::sync::OnceLock::new(),
                _memory_keeper: memory_keeper.map(Mutex::new),
                _follower: follower,
            }),
        })
    }
}

impl Store {
    /// The queues whose task gauges were last published.
    pub(crate) fn published_queues(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // Only names are kept here: a panic elsewhere leaves them whole.
        self.inner
            .published_queues
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Store {
    /// Options for opening a store: shard count, pool size, timeouts.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    /// Opens (creating if missing) an SQLite database file: the embedded
    /// default, nothing to set up. See [`StoreBuilder::sqlite`]. Needs the
    /// feature `sqlite` (on by default).
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::sqlite`].
    #[cfg(feature = "sqlite")]
    pub async fn sqlite(path: impl AsRef<Path>) -> Result<Store, Error> {
        StoreBuilder::default().sqlite(path).await
    }

    /// A private in-memory SQLite store, for tests. See
    /// [`StoreBuilder::sqlite_in_memory`].
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::sqlite`].
    #[cfg(feature = "sqlite")]
    pub async fn sqlite_in_memory() -> Result<Store, Error> {
        StoreBuilder::default().sqlite_in_memory().await
    }

    /// Connects to PostgreSQL, for many processes. See
    /// [`StoreBuilder::postgres`].
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::postgres`].
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str) -> Result<Store, Error> {
        StoreBuilder::default().postgres(url).await
    }

    /// The schema's shard count.
    pub fn shards(&self) -> u32 {
        self.inner.shards
    }

    /// Whether this store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        !self.inner.db.is_sqlite()
    }

    /// Fault injection (feature `test-faults`, for this workspace's
    /// tests): the next `n` WAL checkpoints of an SQLite database file
    /// fail as on a full disk; nothing on PostgreSQL or in memory.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_fail_checkpoints(&self, n: u64) {
        #[cfg(feature = "sqlite")]
        if let Some(checkpoints) = self.inner.db.checkpointer() {
            checkpoints.fail_checkpoints(n);
        }
        #[cfg(not(feature = "sqlite"))]
        let _ = n;
    }

    /// Fault injection (feature `test-faults`): how many of the checkpoint
    /// failures asked for are still to come.
    #[cfg(feature = "test-faults")]
    #[doc(hidden)]
    pub fn fault_checkpoint_failures_left(&self) -> u64 {
        #[cfg(feature = "sqlite")]
        if let Some(checkpoints) = self.inner.db.checkpointer() {
            return checkpoints.checkpoint_failures_left();
        }
        0
    }

    /// Runs the write `work` to its end in a task of its own, and waits for
    /// it. Dropping the returned future (a client that hung up, a timeout
    /// that fired) leaves the write running: its transaction commits or
    /// rolls back, its `COPY` finishes, its connection goes back to the
    /// pool clean and the schedulers hear of what it created. Dropped half
    /// way instead, a transaction or a `COPY` would leave its connection
    /// mid-protocol, and the pool would hand that connection to the next
    /// statement (the node's own among them).
    ///
    /// A panic in `work` is the caller's panic; a runtime shutting down
    /// before the write ended is [`Error::is_internal`]: its outcome is
    /// unknown, as for a lost connection.
    pub(crate) async fn to_completion<T, F>(
        &self,
        work: impl FnOnce(Store) -> F,
    ) -> Result<T, Error>
    where
        F: std::future::Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        match tokio::spawn(work(self.clone())).await {
            Ok(result) => result,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => Err(Error::internal(
                "the runtime shut down before a write ended: its outcome is unknown",
            )),
        }
    }

    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    /// How this store's statements name its tables and channel.
    pub(crate) fn names(&self) -> &Names {
        &self.inner.names
    }

    /// What this store, and its nodes unless told otherwise, take as now.
    pub(crate) fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Where announcements of new and moved tasks go out, and schedulers
    /// listen.
    pub(crate) fn notifier(&self) -> &Notifier {
        &self.inner.notifier
    }

    /// What wakes the claims waiting on its pull queues.
    pub(crate) fn pull_wakes(&self) -> &crate::client::pull_state::PullWakes {
        &self.inner.pull_wakes
    }

    /// Where its acks' writer is kept (see [`Store::ack_writer`]).
    pub(crate) fn acks_cell(
        &self,
    ) -> &std::sync::OnceLock<crate::group::GroupWriter<crate::client::pull_state::Acks>> {
        &self.inner.acks
    }

    /// Cancels a task that is still scheduled. Returns whether it was: `false`
    /// if it is running, finished, dead, cancelled already, or unknown. A
    /// cancelled task is never delivered afterwards; one that a node claimed
    /// first is not cancelled.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn cancel(&self, id: TaskId) -> Result<bool, Error> {
        self.cancel_where(Which::Id(id.0)).await
    }

    /// Cancels the task `target` names if it is still scheduled, moving it
    /// to `ttw_history` (see [`history`](crate::sql::history)); returns
    /// whether it was.
    pub(crate) async fn cancel_where(&self, which: Which<'_>) -> Result<bool, Error> {
        let which = which.to_owned_which();
        self.to_completion(move |store| async move {
            tasks::cancel(store.db(), which.as_which(), store.clock().now_ms()).await
        })
        .await
    }

    /// Moves a task that is still scheduled to a new time. Returns whether it
    /// was still scheduled (as [`Store::cancel`]).
    ///
    /// # Errors
    ///
    /// [`Error::is_out_of_range`] for a time the store cannot hold,
    /// [`Error::is_database`].
    pub async fn reschedule(&self, id: TaskId, at: SystemTime) -> Result<bool, Error> {
        self.make_due(MakeDue {
            which: Which::Id(id.0),
            from: TaskState::Scheduled,
            run_at: to_ms(at)?,
            restart: false,
        })
        .await
    }

    /// Schedules a dead task again, due at once with its attempts reset.
    /// Returns whether it was dead.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn redrive(&self, id: TaskId) -> Result<bool, Error> {
        self.make_due(MakeDue {
            which: Which::Id(id.0),
            from: TaskState::Dead,
            run_at: self.clock().now_ms(),
            restart: true,
        })
        .await
    }

    /// Makes a task scheduled and due again (see [`MakeDue`]) and
    /// announces it. Returns whether it was in the state asked.
    pub(crate) async fn make_due(&self, change: MakeDue<'_>) -> Result<bool, Error> {
        let MakeDue {
            which,
            from,
            run_at,
            restart,
        } = change;
        let which = which.to_owned_which();
        self.to_completion(move |store| async move {
            let change = MakeDue {
                which: which.as_which(),
                from,
                run_at,
                restart,
            };
            let changed = tasks::make_due(store.db(), store.names(), change).await?;
            let any = !changed.is_empty();
            store.notifier().committed(changed, Made::Moved);
            Ok(any)
        })
        .await
    }

    /// A task's state, attempts, last error and payload, or `None` if there
    /// is no such task (never was, or deleted after its retention).
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn get(&self, id: TaskId) -> Result<Option<TaskInfo>, Error> {
        self.get_where(Which::Id(id.0)).await
    }

    /// Task `id`'s attempts, oldest first: each one that failed or was cut
    /// short by a crash, the one running now, and the one that succeeded,
    /// with when it started and ended, the node that ran it, the answer's
    /// status and its first bytes or the error (see [`AttemptInfo`]). The
    /// latest 1,000 at most; empty for a task never attempted or unknown.
    /// Kept as long as the task: the retention sweep deletes them with it.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use ttw_durable::{AttemptOutcome, Backoff, Scheduler, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let id = store.schedule(b"x".to_vec()).max_attempts(2).await?;
    /// let scheduler = Scheduler::builder(store.clone())
    ///     .backoff(Backoff::exponential(Duration::from_millis(1), Duration::from_millis(1)))
    ///     .start(|task| async move {
    ///         if task.attempt() == 1 {
    ///             Err("the database was busy")
    ///         } else {
    ///             Ok(())
    ///         }
    ///     })
    ///     .await?;
    /// while store.attempts(id).await?.last().map(|a| a.outcome) != Some(AttemptOutcome::Done) {
    ///     tokio::time::sleep(Duration::from_millis(5)).await;
    /// }
    /// let attempts = store.attempts(id).await?;
    /// assert_eq!(attempts[0].outcome, AttemptOutcome::Failed);
    /// assert_eq!(attempts[0].detail.as_deref(), Some("the database was busy"));
    /// assert_eq!(attempts[1].attempt, 2);
    /// scheduler.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn attempts(&self, id: TaskId) -> Result<Vec<AttemptInfo>, Error> {
        attempts::of_task(self.db(), id.0).await
    }

    /// The task `which` names, or `None`.
    pub(crate) async fn get_where(&self, which: Which<'_>) -> Result<Option<TaskInfo>, Error> {
        tasks::get(self.db(), which).await
    }
}

#[cfg(test)]
mod tests;
