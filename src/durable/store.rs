//! The task store: a connection pool to SQLite or PostgreSQL, the client
//! operations (`schedule`, `cancel`, `reschedule`, `get`, `redrive`), and
//! the statements the scheduler runs (window loads, the fenced claim, the
//! fenced outcomes, reclaims and sweeps).
//!
//! Every write runs to its end: `execute`, or `fetch_all` when it returns
//! rows, never `fetch_one` or `fetch_optional`. On SQLite a statement read
//! only to its first row is reset rather than finished, and its automatic
//! commit happens at that reset, where a failure ("database or disk is
//! full") is never reported: the caller would get a row, an id, for a change
//! that was rolled back. Run to its end, a failed commit is the statement's
//! own error.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::path::Path;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Connection;
use sqlx::Row;
use tokio::sync::broadcast;

use super::{schema, Error, MAX_IDEMPOTENCY_KEY, MAX_PAYLOAD, MAX_RUN_AT};

/// Runs `$body` with `$pool` bound to whichever pool `$db` holds. The body is
/// compiled once per backend, so the same statement text and row decoding
/// serve both.
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::durable::store::Db::Sqlite($pool) => $body,
            $crate::durable::store::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// The pool of one backend.
#[derive(Clone)]
pub(crate) enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Db {
    /// The database's own clock, in milliseconds since the Unix epoch, as
    /// SQL read while the statement runs. On SQLite that is after the
    /// statement has the write lock, so a change is stamped with about the
    /// time it commits, however long it waited for the lock; on PostgreSQL
    /// it is the time of the call (`clock_timestamp()`, not the
    /// transaction's start), and no node's clock is involved.
    pub(crate) fn clock_sql(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
            Db::Postgres(_) => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }
}

/// The id of a durable task, unique in its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub(crate) i64);

impl TaskId {
    /// A task id from its stored number (as kept by an application that
    /// recorded [`TaskId::get`]).
    pub fn new(id: i64) -> TaskId {
        TaskId(id)
    }

    /// The id as stored in the database.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskState {
    /// Waiting for its `run_at` (or for a retry).
    Scheduled,
    /// Claimed by a node and being delivered.
    Running,
    /// Delivered and acknowledged; kept for the scheduler's retention, then
    /// deleted.
    Done,
    /// Failed on every allowed attempt; kept until redriven.
    Dead,
    /// Cancelled before it ran; kept for the retention, then deleted.
    Cancelled,
}

impl TaskState {
    fn parse(s: &str) -> TaskState {
        match s {
            "scheduled" => TaskState::Scheduled,
            "running" => TaskState::Running,
            "done" => TaskState::Done,
            "dead" => TaskState::Dead,
            _ => TaskState::Cancelled,
        }
    }
}

/// A task as the store holds it, from [`Store::get`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskInfo {
    /// The task's id.
    pub id: TaskId,
    /// Its state.
    pub state: TaskState,
    /// When it is (or was last) due.
    pub run_at: SystemTime,
    /// Delivery attempts started so far.
    pub attempts: u32,
    /// Its own attempt limit, if it was scheduled with one; otherwise the
    /// scheduler's applies.
    pub max_attempts: Option<u32>,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// Its idempotency key.
    pub idempotency_key: Option<String>,
    /// The payload.
    pub payload: Vec<u8>,
}

/// A task claimed for delivery: what the claim statement returned.
#[derive(Debug, Clone)]
pub(crate) struct Claimed {
    pub(crate) id: i64,
    pub(crate) run_at: i64,
    pub(crate) attempt: i64,
    /// The task's claim count after this claim: the fence of its outcome.
    pub(crate) claim: i64,
    pub(crate) payload: Vec<u8>,
    pub(crate) idempotency_key: Option<String>,
}

/// What a failure outcome did to the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// Scheduled again at this time (ms).
    Retry(i64),
    /// Out of attempts.
    Dead,
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A time as milliseconds since the Unix epoch, or an error outside
/// `UNIX_EPOCH..=UNIX_EPOCH + MAX_RUN_AT`.
pub(crate) fn to_ms(at: SystemTime) -> Result<i64, Error> {
    let since = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::out_of_range("a time before the Unix epoch"))?;
    if since > MAX_RUN_AT {
        return Err(Error::out_of_range("a time after MAX_RUN_AT"));
    }
    // MAX_RUN_AT fits in an i64 of milliseconds.
    Ok(since.as_millis() as i64)
}

/// The time `ms` milliseconds after the Unix epoch.
pub(crate) fn from_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// Parses a PostgreSQL URL, refusing at once what cannot be one (another
/// scheme, or not a URL at all) rather than trying to connect.
fn postgres_options(url: &str) -> Result<PgConnectOptions, Error> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("postgres" | "postgresql")) {
        return Err(Error::config(
            "a PostgreSQL URL starts with postgres:// or postgresql:// (postgres://user@host:port/database)",
        ));
    }
    PgConnectOptions::from_str(url)
        .map_err(|err| Error::config(format!("not a valid PostgreSQL URL: {err}")))
}

/// `$first, $first+1, ...`: `n` numbered placeholders.
pub(crate) fn placeholders(first: usize, n: usize) -> String {
    let mut s = String::with_capacity(n * 6);
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('$');
        s.push_str(&(first + i).to_string());
    }
    s
}

/// A durable task store on SQLite or PostgreSQL: the client that schedules
/// tasks, and what a [`Scheduler`](super::Scheduler) runs on.
///
/// Cheap to clone; clones share one pool. Tasks scheduled through a store
/// reach the schedulers of the same process at once, those of other
/// processes through PostgreSQL `LISTEN/NOTIFY`, and every scheduler's
/// catch-up poll finds what a notification missed.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio_timing_wheel::durable::{Store, TaskState};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tokio_timing_wheel::durable::Error> {
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
    pub(crate) inner: Arc<StoreInner>,
}

pub(crate) struct StoreInner {
    pub(crate) db: Db,
    pub(crate) shards: u32,
    /// The PostgreSQL URL, for the scheduler's `LISTEN` connection.
    pub(crate) listen: Option<PgConnectOptions>,
    /// The notification channel (per schema on PostgreSQL).
    pub(crate) channel: String,
    /// Schedules within this process: `(id, run_at)`.
    pub(crate) local: broadcast::Sender<(i64, i64)>,
    /// For an in-memory store, a connection outside the pool that keeps
    /// the database alive: an in-memory SQLite database ends with its last
    /// connection, and the pool may close and replace its one connection
    /// (after a statement cut off by a cancelled future).
    _memory_keeper: Option<std::sync::Mutex<sqlx::SqliteConnection>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field(
                "backend",
                &match self.inner.db {
                    Db::Sqlite(_) => "sqlite",
                    Db::Postgres(_) => "postgres",
                },
            )
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
/// use tokio_timing_wheel::durable::Store;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tokio_timing_wheel::durable::Error> {
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
#[derive(Debug, Clone)]
pub struct StoreBuilder {
    shards: Option<u32>,
    max_connections: u32,
    connect_timeout: Duration,
    schema: Option<String>,
    sqlite_max_size: Option<u64>,
}

impl Default for StoreBuilder {
    fn default() -> Self {
        StoreBuilder {
            shards: None,
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
            schema: None,
            sqlite_max_size: None,
        }
    }
}

/// SQLite's page size for the databases this crate creates (sqlx's
/// default), the unit of [`StoreBuilder::sqlite_max_size`].
const SQLITE_PAGE_SIZE: u64 = 4096;

/// The smallest size limit [`StoreBuilder::sqlite_max_size`] accepts: room
/// for the schema and a few tasks.
const SQLITE_MIN_SIZE: u64 = 64 * 1024;

impl StoreBuilder {
    /// The number of logical shards, used when the schema is created
    /// (default [`DEFAULT_SHARDS`](super::DEFAULT_SHARDS), 256). A task's
    /// shard is `id % shards`. Opening an existing schema with a different
    /// number is an error ([`Error::is_config`]).
    pub fn shards(mut self, shards: u32) -> Self {
        self.shards = Some(shards);
        self
    }

    /// The most connections the pool opens (default 8).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long to wait for a connection before failing with
    /// [`Error::is_database`] (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// PostgreSQL only: keep the tables in this schema (created if
    /// missing) instead of `public`, so several independent stores can share
    /// one database. Letters, digits and `_` only.
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
    /// SQLite's checkpoints, not by this limit.
    pub fn sqlite_max_size(mut self, bytes: u64) -> Self {
        self.sqlite_max_size = Some(bytes);
        self
    }

    fn check(&self) -> Result<(), Error> {
        if self.shards == Some(0) {
            return Err(Error::config("the shard count must be at least 1"));
        }
        if self.sqlite_max_size.is_some_and(|b| b < SQLITE_MIN_SIZE) {
            return Err(Error::config(format!(
                "the SQLite size limit must be at least {SQLITE_MIN_SIZE} bytes"
            )));
        }
        Ok(())
    }

    /// Applies the SQLite settings every connection shares.
    fn sqlite_options(&self, options: SqliteConnectOptions) -> SqliteConnectOptions {
        match self.sqlite_max_size {
            Some(bytes) => options.pragma("max_page_count", (bytes / SQLITE_PAGE_SIZE).to_string()),
            None => options,
        }
    }

    /// Opens (creating if missing) an SQLite database file in WAL mode.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`] if the file cannot be opened (its message
    /// names the path, and says when its directory does not exist),
    /// [`Error::is_schema_too_new`] if a newer version of the crate wrote it,
    /// [`Error::is_config`] for a shard count that does not match.
    pub async fn sqlite(self, path: impl AsRef<Path>) -> Result<Store, Error> {
        self.check()?;
        let path = path.as_ref();
        let shown = path.display().to_string();
        match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
                return Err(Error::open(
                    shown,
                    sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("its directory {} does not exist", dir.display()),
                    )),
                ));
            }
            _ => {}
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10));
        let options = self.sqlite_options(options);
        let pool = SqlitePoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
            .connect_with(options)
            .await
            .map_err(|err| Error::open(shown, err))?;
        self.finish(Db::Sqlite(pool), None, "ttw_tasks".into(), None)
            .await
    }

    /// Opens a private in-memory SQLite database, for tests and examples. It
    /// lives as long as the store (one connection, never recycled).
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::sqlite`].
    pub async fn sqlite_in_memory(self) -> Result<Store, Error> {
        self.check()?;
        let options = self.sqlite_options(SqliteConnectOptions::from_str("sqlite::memory:")?);
        // The options name one shared in-memory database; the keeper opens
        // it first and holds it for the store's life.
        let keeper = sqlx::ConnectOptions::connect(&options).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(self.connect_timeout)
            .connect_with(options)
            .await?;
        self.finish(Db::Sqlite(pool), None, "ttw_tasks".into(), Some(keeper))
            .await
    }

    /// Connects to PostgreSQL (`postgres://user@host:port/db`).
    ///
    /// # Errors
    ///
    /// [`Error::is_config`] at once for a URL that is not PostgreSQL's (not a
    /// URL, or another scheme); [`Error::is_database`] if the server cannot
    /// be reached within the connect timeout, with the cause (refused,
    /// unknown host, authentication) in its message; otherwise as
    /// [`StoreBuilder::sqlite`].
    pub async fn postgres(self, url: &str) -> Result<Store, Error> {
        self.check()?;
        let mut options = postgres_options(url)?;
        // One connection first, within the connect timeout: a pool would
        // retry a refused or failing connection until its timeout and then
        // report only that it timed out.
        let target = format!(
            "PostgreSQL at {}:{}",
            options.get_host(),
            options.get_port()
        );
        match tokio::time::timeout(self.connect_timeout, PgConnection::connect_with(&options)).await
        {
            Ok(Ok(conn)) => {
                let _ = conn.close().await;
            }
            Ok(Err(err)) => return Err(Error::open(target, err)),
            Err(_) => return Err(Error::open(target, sqlx::Error::PoolTimedOut)),
        }
        let mut channel = "ttw_tasks".to_string();
        if let Some(schema) = &self.schema {
            if schema.is_empty()
                || !schema
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(Error::config("a schema name is letters, digits and '_'"));
            }
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(self.connect_timeout)
                .connect_with(options.clone())
                .await?;
            sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .execute(&admin)
                .await?;
            admin.close().await;
            options = options.options([("search_path", schema.as_str())]);
            channel = format!("ttw_tasks_{schema}");
            if channel.len() > 63 {
                // PostgreSQL's identifier limit; every process derives the
                // same name.
                let hash = schema.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                channel = format!("ttw_tasks_{hash:016x}");
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
            .connect_with(options.clone())
            .await?;
        self.finish(Db::Postgres(pool), Some(options), channel, None)
            .await
    }

    async fn finish(
        self,
        db: Db,
        listen: Option<PgConnectOptions>,
        channel: String,
        memory_keeper: Option<sqlx::SqliteConnection>,
    ) -> Result<Store, Error> {
        let shards = schema::prepare(&db, self.shards).await?;
        let (local, _) = broadcast::channel(4096);
        Ok(Store {
            inner: Arc::new(StoreInner {
                db,
                shards,
                listen,
                channel,
                local,
                _memory_keeper: memory_keeper.map(std::sync::Mutex::new),
            }),
        })
    }
}

impl Store {
    /// Options for opening a store: shard count, pool size, timeouts.
    pub fn builder() -> StoreBuilder {
        StoreBuilder::default()
    }

    /// Opens (creating if missing) an SQLite database file: the embedded
    /// default, nothing to set up. See [`StoreBuilder::sqlite`].
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::sqlite`].
    pub async fn sqlite(path: impl AsRef<Path>) -> Result<Store, Error> {
        StoreBuilder::default().sqlite(path).await
    }

    /// A private in-memory SQLite store, for tests. See
    /// [`StoreBuilder::sqlite_in_memory`].
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::sqlite`].
    pub async fn sqlite_in_memory() -> Result<Store, Error> {
        StoreBuilder::default().sqlite_in_memory().await
    }

    /// Connects to PostgreSQL, for many processes. See
    /// [`StoreBuilder::postgres`].
    ///
    /// # Errors
    ///
    /// As [`StoreBuilder::postgres`].
    pub async fn postgres(url: &str) -> Result<Store, Error> {
        StoreBuilder::default().postgres(url).await
    }

    /// The schema's shard count.
    pub fn shards(&self) -> u32 {
        self.inner.shards
    }

    /// Whether this store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.inner.db, Db::Postgres(_))
    }

    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    pub(crate) fn shards_i64(&self) -> i64 {
        i64::from(self.inner.shards)
    }

    /// Starts scheduling a task carrying `payload` (at most
    /// [`MAX_PAYLOAD`](super::MAX_PAYLOAD) bytes). Await the returned
    /// builder to store it; by default it is due at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use tokio_timing_wheel::durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tokio_timing_wheel::durable::Error> {
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
            payload: payload.into(),
            at: When::Delay(Duration::ZERO),
            idempotency_key: None,
            max_attempts: None,
        }
    }

    async fn insert(
        &self,
        payload: Vec<u8>,
        when: When,
        idempotency_key: Option<String>,
        max_attempts: Option<u32>,
    ) -> Result<Scheduled, Error> {
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::payload_too_large(payload.len()));
        }
        match &idempotency_key {
            Some(key) if key.is_empty() => return Err(Error::invalid_key("it is empty")),
            Some(key) if key.len() > MAX_IDEMPOTENCY_KEY => {
                return Err(Error::invalid_key("it is longer than MAX_IDEMPOTENCY_KEY"))
            }
            _ => {}
        }
        if max_attempts == Some(0) {
            return Err(Error::config("max_attempts must be at least 1"));
        }
        let now = now_ms();
        let run_at = match when {
            When::At(at) => to_ms(at)?,
            When::Delay(delay) => {
                let at = SystemTime::now()
                    .checked_add(delay)
                    .ok_or_else(|| Error::out_of_range("the delay"))?;
                to_ms(at)?
            }
        };
        let max_attempts = max_attempts.map(i64::from);
        let db = self.db();
        // Two tries: a conflicting task could be deleted (its retention
        // ran out) between the insert and the lookup.
        let sql = format!(
            "INSERT INTO ttw_tasks (run_at, payload, idempotency_key, max_attempts, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, {}) ON CONFLICT (idempotency_key) DO NOTHING RETURNING id",
            db.clock_sql()
        );
        for _ in 0..2 {
            // Read to its end, so that a commit that failed is an error
            // here and never an id (see the module's notes).
            let inserted: Option<i64> = with_pool!(db, pool => {
                sqlx::query(&sql)
                .bind(run_at)
                .bind(&payload)
                .bind(&idempotency_key)
                .bind(max_attempts)
                .bind(now)
                .fetch_all(pool)
                .await?
                .first()
                .map(|row| row.try_get::<i64, _>("id"))
                .transpose()?
            });
            if let Some(id) = inserted {
                self.announce(id, run_at).await;
                return Ok(Scheduled::Created(TaskId(id)));
            }
            let existing: Option<i64> = with_pool!(db, pool => {
                sqlx::query("SELECT id FROM ttw_tasks WHERE idempotency_key = $1")
                    .bind(&idempotency_key)
                    .fetch_optional(pool)
                    .await?
                    .map(|row| row.try_get::<i64, _>("id"))
                    .transpose()?
            });
            if let Some(id) = existing {
                return Ok(Scheduled::Existing(TaskId(id)));
            }
        }
        Err(Error::config(
            "the idempotency key kept conflicting with a task being deleted",
        ))
    }

    /// Tells schedulers that a task is due at `run_at`: those of this
    /// process directly, those of other processes by `NOTIFY`.
    ///
    /// The change it announces has committed already, so a failed `NOTIFY`
    /// is not the caller's error (an error would invite a retry that
    /// schedules the task twice): it is logged, and the schedulers' catch-up
    /// poll finds the change instead.
    pub(crate) async fn announce(&self, id: i64, run_at: i64) {
        let _ = self.inner.local.send((id, run_at));
        if let Db::Postgres(pool) = self.db() {
            let sent = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&self.inner.channel)
                .bind(format!("{id}:{run_at}"))
                .execute(pool)
                .await;
            if let Err(err) = sent {
                tracing::debug!(id, %err, "NOTIFY failed; the catch-up poll will find the task");
            }
        }
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
        let now = now_ms();
        let sql = format!(
            "UPDATE ttw_tasks SET state = 'cancelled', updated_at = {}, finished_at = $2 \
             WHERE id = $1 AND state = 'scheduled'",
            self.db().clock_sql()
        );
        let n = with_pool!(self.db(), pool => {
            sqlx::query(&sql)
            .bind(id.0)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Moves a task that is still scheduled to a new time. Returns whether it
    /// was still scheduled (as [`Store::cancel`]).
    ///
    /// # Errors
    ///
    /// [`Error::is_out_of_range`] for a time the store cannot hold,
    /// [`Error::is_database`].
    pub async fn reschedule(&self, id: TaskId, at: SystemTime) -> Result<bool, Error> {
        let run_at = to_ms(at)?;
        let sql = format!(
            "UPDATE ttw_tasks SET run_at = $2, updated_at = {} WHERE id = $1 AND state = 'scheduled'",
            self.db().clock_sql()
        );
        let n = with_pool!(self.db(), pool => {
            sqlx::query(&sql)
                .bind(id.0)
                .bind(run_at)
                .execute(pool)
                .await?
                .rows_affected()
        });
        if n == 1 {
            self.announce(id.0, run_at).await;
        }
        Ok(n == 1)
    }

    /// Schedules a dead task again, due at once with its attempts reset.
    /// Returns whether it was dead.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn redrive(&self, id: TaskId) -> Result<bool, Error> {
        let now = now_ms();
        let sql = format!(
            "UPDATE ttw_tasks SET state = 'scheduled', attempts = 0, run_at = $2, updated_at = {}, \
             finished_at = NULL WHERE id = $1 AND state = 'dead'",
            self.db().clock_sql()
        );
        let n = with_pool!(self.db(), pool => {
            sqlx::query(&sql)
            .bind(id.0)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if n == 1 {
            self.announce(id.0, now).await;
        }
        Ok(n == 1)
    }

    /// A task's state, attempts, last error and payload, or `None` if there
    /// is no such task (never was, or deleted after its retention).
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn get(&self, id: TaskId) -> Result<Option<TaskInfo>, Error> {
        let info = with_pool!(self.db(), pool => {
            match sqlx::query(
                "SELECT id, state, run_at, attempts, max_attempts, last_error, idempotency_key, payload \
                 FROM ttw_tasks WHERE id = $1",
            )
            .bind(id.0)
            .fetch_optional(pool)
            .await?
            {
                None => None,
                Some(row) => Some(TaskInfo {
                    id: TaskId(row.try_get("id")?),
                    state: TaskState::parse(row.try_get::<String, _>("state")?.as_str()),
                    run_at: from_ms(row.try_get("run_at")?),
                    attempts: clamp_u32(row.try_get("attempts")?),
                    max_attempts: row.try_get::<Option<i64>, _>("max_attempts")?.map(clamp_u32),
                    last_error: row.try_get("last_error")?,
                    idempotency_key: row.try_get("idempotency_key")?,
                    payload: row.try_get("payload")?,
                }),
            }
        });
        Ok(info)
    }

    /// How many tasks are in each state, as `(scheduled, running, done,
    /// dead, cancelled)`.
    ///
    /// # Errors
    ///
    /// [`Error::is_database`].
    pub async fn counts(&self) -> Result<StateCounts, Error> {
        let rows: Vec<(String, i64)> = with_pool!(self.db(), pool => {
            sqlx::query_as("SELECT state, COUNT(*) FROM ttw_tasks GROUP BY state")
                .fetch_all(pool)
                .await?
        });
        let mut counts = StateCounts::default();
        for (state, n) in rows {
            let n = u64::try_from(n).unwrap_or(0);
            match TaskState::parse(&state) {
                TaskState::Scheduled => counts.scheduled = n,
                TaskState::Running => counts.running = n,
                TaskState::Done => counts.done = n,
                TaskState::Dead => counts.dead = n,
                TaskState::Cancelled => counts.cancelled = n,
            }
        }
        Ok(counts)
    }

    // ----- what the scheduler runs -----

    /// The database's clock ([`Db::clock_sql`]), the time the catch-up poll
    /// compares change stamps with.
    /// One catch-up poll in one statement: the database's clock, and the
    /// scheduled tasks of this session's shards due before `horizon` whose
    /// change stamp is at or after `since` (or, on the first poll, `slack`
    /// before that clock).
    pub(crate) async fn changed_since(
        &self,
        session: &str,
        horizon: i64,
        since: Option<i64>,
        slack: i64,
    ) -> Result<(i64, Vec<(i64, i64)>), Error> {
        let sql = format!(
            "WITH c AS (SELECT {} AS db_now) \
             SELECT c.db_now, t.id, t.run_at FROM c LEFT JOIN ttw_tasks t \
             ON t.state = 'scheduled' AND t.run_at < $1 AND t.updated_at >= COALESCE($2, c.db_now - $5) \
             AND (t.id % $3) IN (SELECT shard FROM ttw_leases WHERE owner_session = $4)",
            self.db().clock_sql()
        );
        let rows: Vec<(i64, Option<i64>, Option<i64>)> = with_pool!(self.db(), pool => {
            sqlx::query_as(&sql)
                .bind(horizon)
                .bind(since)
                .bind(self.shards_i64())
                .bind(session)
                .bind(slack)
                .fetch_all(pool)
                .await?
        });
        let now = rows
            .first()
            .map(|r| r.0)
            .ok_or_else(|| Error::config("the database returned no clock reading"))?;
        let due = rows
            .into_iter()
            .filter_map(|(_, id, run_at)| Some((id?, run_at?)))
            .collect();
        Ok((now, due))
    }

    /// Scheduled tasks of this session's shards due before `horizon`.
    pub(crate) async fn due_before(
        &self,
        session: &str,
        horizon: i64,
    ) -> Result<Vec<(i64, i64)>, Error> {
        let rows: Vec<(i64, i64)> = with_pool!(self.db(), pool => {
            sqlx::query_as(
                "SELECT id, run_at FROM ttw_tasks WHERE state = 'scheduled' AND run_at < $1 \
                 AND (id % $2) IN (SELECT shard FROM ttw_leases WHERE owner_session = $3)",
            )
            .bind(horizon)
            .bind(self.shards_i64())
            .bind(session)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// The claim, in one statement: of `ids`, those still scheduled, due by
    /// `now`, and in a shard whose lease this session holds move to running,
    /// with the attempt counted, the node and lease epoch stamped, and a lock
    /// until `locked_until`.
    pub(crate) async fn claim(
        &self,
        session: &str,
        ids: &[i64],
        now: i64,
        locked_until: i64,
    ) -> Result<Vec<Claimed>, Error> {
        let sql = format!(
            "UPDATE ttw_tasks SET state = 'running', attempts = attempts + 1, claims = claims + 1, locked_by = $1, \
             lock_epoch = (SELECT l.epoch FROM ttw_leases l WHERE l.shard = ttw_tasks.id % $2), \
             locked_until = $3, updated_at = {} \
             WHERE state = 'scheduled' AND run_at <= $4 \
             AND EXISTS (SELECT 1 FROM ttw_leases l WHERE l.shard = ttw_tasks.id % $2 AND l.owner_session = $1) \
             AND id IN ({}) \
             RETURNING id, run_at, attempts, claims, payload, idempotency_key",
            self.db().clock_sql(),
            placeholders(5, ids.len())
        );
        let claimed = with_pool!(self.db(), pool => {
            let mut query = sqlx::query(&sql).bind(session).bind(self.shards_i64()).bind(locked_until).bind(now);
            for id in ids {
                query = query.bind(id);
            }
            let rows = query.fetch_all(pool).await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                out.push(Claimed {
                    id: row.try_get("id")?,
                    run_at: row.try_get("run_at")?,
                    attempt: row.try_get("attempts")?,
                    claim: row.try_get("claims")?,
                    payload: row.try_get("payload")?,
                    idempotency_key: row.try_get("idempotency_key")?,
                });
            }
            out
        });
        Ok(claimed)
    }

    /// For ids a claim did not take: `(id, state, run_at, owned)` where
    /// `owned` says whether this session holds the shard's lease.
    pub(crate) async fn why_unclaimed(
        &self,
        session: &str,
        ids: &[i64],
    ) -> Result<Vec<(i64, String, i64, bool)>, Error> {
        let sql = format!(
            "SELECT t.id, t.state, t.run_at, \
             CASE WHEN l.owner_session = $1 THEN 1 ELSE 0 END AS owned \
             FROM ttw_tasks t JOIN ttw_leases l ON l.shard = t.id % $2 WHERE t.id IN ({})",
            placeholders(3, ids.len())
        );
        let rows = with_pool!(self.db(), pool => {
            let mut query = sqlx::query(&sql).bind(session).bind(self.shards_i64());
            for id in ids {
                query = query.bind(id);
            }
            let rows = query.fetch_all(pool).await?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                out.push((
                    row.try_get("id")?,
                    row.try_get("state")?,
                    row.try_get("run_at")?,
                    row.try_get::<i32, _>("owned")? == 1,
                ));
            }
            out
        });
        Ok(rows)
    }

    /// Marks task `id` done, if this session still holds the claim that
    /// counted `claim`: the task is running under this session with that
    /// claim count, and the shard's lease is this session's at the epoch the
    /// claim stamped. (The claim count, unlike the attempt number, never
    /// starts again, so a delivery from before a redrive is refused.)
    pub(crate) async fn complete(&self, session: &str, id: i64, claim: i64) -> Result<bool, Error> {
        let now = now_ms();
        let sql = format!(
            "UPDATE ttw_tasks SET state = 'done', locked_by = NULL, locked_until = NULL, \
             updated_at = {}, finished_at = $3 \
             WHERE id = $1 AND claims = $2 AND state = 'running' AND locked_by = $4 \
             AND EXISTS (SELECT 1 FROM ttw_leases l WHERE l.shard = ttw_tasks.id % $5 \
             AND l.owner_session = $4 AND l.epoch = ttw_tasks.lock_epoch)",
            self.db().clock_sql()
        );
        let n = with_pool!(self.db(), pool => {
            sqlx::query(&sql)
            .bind(id)
            .bind(claim)
            .bind(now)
            .bind(session)
            .bind(self.shards_i64())
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Records a failed attempt under the same fence as
    /// [`Store::complete`]: a retry at `retry_at`, or dead once the attempts
    /// reach the task's limit (`default_max` when it has none). `None` if
    /// the fence refused it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn fail(
        &self,
        session: &str,
        id: i64,
        claim: i64,
        error: &str,
        retry_at: i64,
        default_max: i64,
    ) -> Result<Option<Failed>, Error> {
        let now = now_ms();
        let sql = format!(
            "UPDATE ttw_tasks SET \
             state = CASE WHEN attempts >= COALESCE(max_attempts, $6) THEN 'dead' ELSE 'scheduled' END, \
             run_at = CASE WHEN attempts >= COALESCE(max_attempts, $6) THEN run_at ELSE $7 END, \
             finished_at = CASE WHEN attempts >= COALESCE(max_attempts, $6) THEN $3 ELSE NULL END, \
             last_error = $8, locked_by = NULL, locked_until = NULL, updated_at = {} \
             WHERE id = $1 AND claims = $2 AND state = 'running' AND locked_by = $4 \
             AND EXISTS (SELECT 1 FROM ttw_leases l WHERE l.shard = ttw_tasks.id % $5 \
             AND l.owner_session = $4 AND l.epoch = ttw_tasks.lock_epoch) \
             RETURNING state, run_at",
            self.db().clock_sql()
        );
        // Read to its end (see the module's notes).
        let rows: Vec<(String, i64)> = with_pool!(self.db(), pool => {
            sqlx::query_as(&sql)
            .bind(id)
            .bind(claim)
            .bind(now)
            .bind(session)
            .bind(self.shards_i64())
            .bind(default_max)
            .bind(retry_at)
            .bind(error)
            .fetch_all(pool)
            .await?
        });
        let row = rows.into_iter().next();
        Ok(row.map(|(state, run_at)| {
            if state == "dead" {
                Failed::Dead
            } else {
                Failed::Retry(run_at)
            }
        }))
    }

    /// Running tasks of this session's shards go back to scheduled, due at
    /// once, or to dead when out of attempts: those claimed under an earlier
    /// epoch of the shard's lease by a session proven dead (its membership
    /// row is gone: its process was found gone, or its node id started
    /// again), and those whose lock ran out. A task whose claimer is only
    /// silent waits for its lock: that node may be alive and still running
    /// the handler, which its own `callback_timeout` ends before the lock
    /// does. Returns `(id, run_at, dead)`.
    pub(crate) async fn reclaim(
        &self,
        session: &str,
        default_max: i64,
    ) -> Result<Vec<(i64, i64, bool)>, Error> {
        let now = now_ms();
        let sql = format!(
            "UPDATE ttw_tasks SET \
             state = CASE WHEN attempts >= COALESCE(max_attempts, $1) THEN 'dead' ELSE 'scheduled' END, \
             finished_at = CASE WHEN attempts >= COALESCE(max_attempts, $1) THEN $2 ELSE NULL END, \
             run_at = CASE WHEN attempts >= COALESCE(max_attempts, $1) THEN run_at ELSE $2 END, \
             last_error = CASE WHEN locked_until < $2 \
             THEN 'lock expired: the node delivering it stopped or lost its shard' \
             ELSE 'the node delivering it died; the shard''s new owner took it back' END, \
             locked_by = NULL, locked_until = NULL, updated_at = {} \
             WHERE state = 'running' \
             AND EXISTS (SELECT 1 FROM ttw_leases l WHERE l.shard = ttw_tasks.id % $3 AND l.owner_session = $4 \
             AND (ttw_tasks.locked_until < $2 \
             OR ((ttw_tasks.lock_epoch IS NULL OR ttw_tasks.lock_epoch < l.epoch) \
             AND NOT EXISTS (SELECT 1 FROM ttw_nodes n WHERE n.session = ttw_tasks.locked_by)))) \
             RETURNING id, run_at, state",
            self.db().clock_sql()
        );
        let rows: Vec<(i64, i64, String)> = with_pool!(self.db(), pool => {
            sqlx::query_as(&sql)
            .bind(default_max)
            .bind(now)
            .bind(self.shards_i64())
            .bind(session)
            .fetch_all(pool)
            .await?
        });
        Ok(rows
            .into_iter()
            .map(|(id, run_at, state)| (id, run_at, state == "dead"))
            .collect())
    }

    /// Deletes done and cancelled tasks that finished before `before`.
    pub(crate) async fn sweep(&self, before: i64) -> Result<u64, Error> {
        let n = with_pool!(self.db(), pool => {
            sqlx::query("DELETE FROM ttw_tasks WHERE state IN ('done', 'cancelled') AND finished_at < $1")
                .bind(before)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n)
    }
}

/// How many tasks are in each state, from [`Store::counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateCounts {
    /// Waiting for their time.
    pub scheduled: u64,
    /// Being delivered.
    pub running: u64,
    /// Delivered and acknowledged (within the retention).
    pub done: u64,
    /// Out of attempts.
    pub dead: u64,
    /// Cancelled (within the retention).
    pub cancelled: u64,
}

fn clamp_u32(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

enum When {
    At(SystemTime),
    Delay(Duration),
}

/// A task being scheduled, from [`Store::schedule`]; `.await` it to store the
/// task and get its [`TaskId`].
///
/// # Errors
///
/// [`Error::is_payload_too_large`], [`Error::is_out_of_range`] (a time before
/// the Unix epoch or after [`MAX_RUN_AT`](super::MAX_RUN_AT), or a delay that
/// overflows), [`Error::is_database`] ([`Error::is_disk_full`] when the
/// database's disk is full). A schedule that fails stored nothing; an id is
/// returned only once the task's row has committed.
#[must_use = "a task is stored only when the builder is awaited"]
pub struct Schedule<'a> {
    store: &'a Store,
    payload: Vec<u8>,
    at: When,
    idempotency_key: Option<String>,
    max_attempts: Option<u32>,
}

impl fmt::Debug for Schedule<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("payload_len", &self.payload.len())
            .field("idempotency_key", &self.idempotency_key)
            .field("max_attempts", &self.max_attempts)
            .finish()
    }
}

impl Schedule<'_> {
    /// Due this long from now.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.at = When::Delay(delay);
        self
    }

    /// Due at this time (a time in the past is due at once).
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at = When::At(at);
        self
    }

    /// Scheduling another task with the same key, while this one is kept,
    /// creates nothing and returns this task's id ([`Schedule::submit`]
    /// tells which happened). A key is 1 to
    /// [`MAX_IDEMPOTENCY_KEY`](super::MAX_IDEMPOTENCY_KEY) bytes; an empty
    /// or longer one fails with [`Error::is_invalid_key`].
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// This task's own attempt limit, instead of the scheduler's. Zero
    /// fails with [`Error::is_config`], as
    /// [`SchedulerBuilder::max_attempts`](super::SchedulerBuilder::max_attempts)
    /// does.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Stores the task, as `.await` does, and tells whether it was created
    /// or its idempotency key found a task already kept.
    ///
    /// # Errors
    ///
    /// As awaiting the [`Schedule`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio_timing_wheel::durable::{Scheduled, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tokio_timing_wheel::durable::Error> {
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
        self.store
            .insert(
                self.payload,
                self.at,
                self.idempotency_key,
                self.max_attempts,
            )
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
}

impl Scheduled {
    /// The task's id, either way.
    pub fn id(self) -> TaskId {
        match self {
            Scheduled::Created(id) | Scheduled::Existing(id) => id,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: an in-memory store lived only as long as its pool's one
    /// connection. A statement cut off by a cancelled future (a scheduler
    /// task aborted at shutdown) makes the pool close that connection and
    /// open another, which found a new, empty database ("no such table").
    /// A connection outside the pool now keeps the database for the store's
    /// life.
    #[tokio::test]
    async fn an_in_memory_store_outlives_its_pool_connection() {
        let store = Store::sqlite_in_memory().await.unwrap();
        let id = store.schedule(b"kept".to_vec()).await.unwrap();
        let Db::Sqlite(pool) = store.db() else {
            unreachable!("an SQLite store")
        };
        // Take the pool's one connection out of it and close it.
        let conn = pool.acquire().await.unwrap().detach();
        sqlx::Connection::close(conn).await.unwrap();
        let info = store
            .get(id)
            .await
            .unwrap()
            .expect("the task is still there");
        assert_eq!(info.payload, b"kept");
        assert_eq!(store.counts().await.unwrap().scheduled, 1);
    }
}
