//! The error returned by the durable layer.

use std::fmt;

/// Why a durable operation failed.
///
/// Opaque, with one predicate per cause. Nothing in the durable layer panics
/// on bad input or a failing database; it returns one of these.
///
/// # Examples
///
/// ```
/// use ttw_durable::{Store, MAX_PAYLOAD};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttw_durable::Error> {
/// let store = Store::sqlite_in_memory().await?;
/// let err = store.schedule(vec![0; MAX_PAYLOAD + 1]).await.unwrap_err();
/// assert!(err.is_payload_too_large());
/// # Ok(())
/// # }
/// ```
pub struct Error {
    kind: Kind,
    /// The task of a batch this error is about, from 0.
    task: Option<usize>,
}

enum Kind {
    Database(sqlx::Error),
    /// The database named here could not be opened or reached.
    Open(String, sqlx::Error),
    Migrate(sqlx::migrate::MigrateError),
    SchemaTooNew(i64),
    PayloadTooLarge {
        len: usize,
        limit: usize,
    },
    OutOfRange(&'static str),
    Config(String),
    /// The database holds what this version cannot read.
    Corrupt(String),
    /// An invariant of this crate did not hold, or a race it retries did
    /// not settle.
    Internal(String),
    InvalidKey(&'static str),
    InvalidSchedule(String),
    InvalidQueue(String),
    /// A time written as text was not RFC 3339.
    InvalidTime(String),
    /// A task's envelope (destination, callbacks) was malformed.
    InvalidEnvelope(String),
    /// A task's trace context was malformed.
    InvalidTraceContext(String),
    /// A field of a task was refused: the field, and why.
    InvalidTask(&'static str, String),
    /// The database failed the group a task was written in; this is what
    /// it said (the group's first caller has the error itself).
    GroupFailed(String),
    Lost,
    Closed,
    /// A settle named a claim that no longer holds its task.
    StaleClaim,
    /// A settle's task is in a queue its caller may not use.
    QueueNotAllowed(String),
}

impl Error {
    /// A payload of `len` bytes, over `limit`.
    pub(crate) fn payload_too_large(len: usize, limit: usize) -> Self {
        Self::from_kind(Kind::PayloadTooLarge { len, limit })
    }

    pub(crate) fn out_of_range(what: &'static str) -> Self {
        Self::from_kind(Kind::OutOfRange(what))
    }

    pub(crate) fn config(what: impl Into<String>) -> Self {
        Self::from_kind(Kind::Config(what.into()))
    }

    /// The database holds `what`, which this version cannot read: a value
    /// written by a newer version, or edited by hand.
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        Self::from_kind(Kind::Corrupt(what.into()))
    }

    /// `what` went wrong inside this crate: a bug, or a race given up on.
    pub(crate) fn internal(what: impl Into<String>) -> Self {
        Self::from_kind(Kind::Internal(what.into()))
    }

    /// A database failure made up by fault injection (the workspace's own
    /// tests): to the code under test it is a failed statement.
    #[cfg_attr(not(feature = "test-faults"), allow(dead_code))]
    pub(crate) fn injected(what: &str) -> Self {
        Self::from(sqlx::Error::Io(std::io::Error::other(format!(
            "{what} failed by fault injection"
        ))))
    }

    pub(crate) fn invalid_schedule(why: impl Into<String>) -> Self {
        Self::from_kind(Kind::InvalidSchedule(why.into()))
    }

    pub(crate) fn invalid_queue(why: impl Into<String>) -> Self {
        Self::from_kind(Kind::InvalidQueue(why.into()))
    }

    pub(crate) fn invalid_time(why: impl Into<String>) -> Self {
        Self::from_kind(Kind::InvalidTime(why.into()))
    }

    pub(crate) fn invalid_envelope(why: impl Into<String>) -> Self {
        Self::from_kind(Kind::InvalidEnvelope(why.into()))
    }

    pub(crate) fn invalid_trace_context(why: impl Into<String>) -> Self {
        Self::from_kind(Kind::InvalidTraceContext(why.into()))
    }

    /// Field `field` of a task is refused, for `why`.
    pub(crate) fn invalid_task(field: &'static str, why: impl Into<String>) -> Self {
        Self::from_kind(Kind::InvalidTask(field, why.into()))
    }

    /// The database failed the write of a group, saying `said`.
    pub(crate) fn group_failed(said: &str) -> Self {
        Self::from_kind(Kind::GroupFailed(said.to_string()))
    }

    pub(crate) fn invalid_key(why: &'static str) -> Self {
        Self::from_kind(Kind::InvalidKey(why))
    }

    /// `err` from opening `target` (a file path, or a PostgreSQL host).
    pub(crate) fn open(target: String, err: sqlx::Error) -> Self {
        Self::from_kind(Kind::Open(target, err))
    }

    pub(crate) fn lost() -> Self {
        Self::from_kind(Kind::Lost)
    }

    pub(crate) fn closed() -> Self {
        Self::from_kind(Kind::Closed)
    }

    pub(crate) fn stale_claim() -> Self {
        Self::from_kind(Kind::StaleClaim)
    }

    pub(crate) fn queue_not_allowed(queue: String) -> Self {
        Self::from_kind(Kind::QueueNotAllowed(queue))
    }

    fn from_kind(kind: Kind) -> Self {
        Error { kind, task: None }
    }

    /// This error, about task `index` (from 0) of a batch.
    pub(crate) fn in_batch(mut self, index: usize) -> Self {
        self.task = Some(index);
        self
    }

    /// For an error about one task of a batch given to
    /// [`Store::schedule_batch`](crate::Store::schedule_batch), which task
    /// (its place in the batch, from 0); the predicates say what is wrong
    /// with it. `None` for any other error.
    pub fn batch_index(&self) -> Option<usize> {
        self.task
    }

    /// This error, no longer said to be about a task of a batch: its
    /// message says only what is wrong, for a caller that names the task
    /// its own way ([`Error::batch_index`] is then `None`).
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::{NewTask, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let err = store
    ///     .schedule_batch([NewTask::new("a"), NewTask::new("b").max_attempts(0)])
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(err.batch_index(), Some(1));
    /// let err = err.without_batch_index();
    /// assert_eq!((err.batch_index(), err.to_string().as_str()), (None, "max_attempts: at least 1"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn without_batch_index(mut self) -> Self {
        self.task = None;
        self
    }

    /// The database failed or could not be reached (connection refused,
    /// timed out, a statement failed). [`std::error::Error::source`] holds
    /// the driver's error.
    pub fn is_database(&self) -> bool {
        matches!(
            self.kind,
            Kind::Database(_)
                | Kind::Open(..)
                | Kind::Migrate(_)
                | Kind::Corrupt(_)
                | Kind::GroupFailed(_)
        )
    }

    /// The database holds something this version of the crate cannot read
    /// (an unknown task state or catch-up policy, an impossible shard
    /// count, no answer where one is always given): written by a newer
    /// version, or edited by hand. The message names it. Also
    /// [`Error::is_database`].
    pub fn is_corrupt(&self) -> bool {
        matches!(self.kind, Kind::Corrupt(_))
    }

    /// Something went wrong inside this crate: an invariant that did not
    /// hold (a bug: please report it with the message), or a race with
    /// other writers that did not settle after a few tries (try again).
    pub fn is_internal(&self) -> bool {
        matches!(self.kind, Kind::Internal(_))
    }

    /// The database could not write because its disk is full (SQLite's
    /// "database or disk is full", also when a store's
    /// [`sqlite_max_size`](crate::StoreBuilder::sqlite_max_size) is reached;
    /// PostgreSQL's `disk_full`, SQLSTATE 53100). Such a write did not
    /// happen: a schedule that fails with it stored nothing. Also
    /// [`Error::is_database`].
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let dir = std::env::temp_dir().join(format!("ttw-doc-full-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// // A database allowed to grow to 1 MiB, filled with 64 KiB payloads.
    /// let store = Store::builder().sqlite_max_size(1 << 20).sqlite(dir.join("tasks.db")).await?;
    /// let err = loop {
    ///     if let Err(err) = store.schedule(vec![7; 64 << 10]).await {
    ///         break err;
    ///     }
    /// };
    /// assert!(err.is_disk_full() && err.is_database());
    /// # drop(store);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_disk_full(&self) -> bool {
        match &self.kind {
            Kind::Database(err) | Kind::Open(_, err) => disk_full(err),
            Kind::Migrate(sqlx::migrate::MigrateError::Execute(err))
            | Kind::Migrate(sqlx::migrate::MigrateError::ExecuteMigration(err, _)) => {
                disk_full(err)
            }
            _ => false,
        }
    }

    /// The database holds a schema from a newer version of this crate than
    /// the running one; nothing was changed.
    pub fn is_schema_too_new(&self) -> bool {
        matches!(self.kind, Kind::SchemaTooNew(_))
    }

    /// A payload was larger than [`MAX_PAYLOAD`](crate::MAX_PAYLOAD) bytes.
    pub fn is_payload_too_large(&self) -> bool {
        matches!(self.kind, Kind::PayloadTooLarge { .. })
    }

    /// A time was outside what the store can hold: before the Unix epoch,
    /// or after [`MAX_RUN_AT`](crate::MAX_RUN_AT).
    pub fn is_out_of_range(&self) -> bool {
        matches!(self.kind, Kind::OutOfRange(_))
    }

    /// A setting was invalid (for example zero shards, or a shard count
    /// different from the one the schema was created with).
    pub fn is_config(&self) -> bool {
        matches!(self.kind, Kind::Config(_))
    }

    /// An idempotency key was empty or longer than
    /// [`MAX_IDEMPOTENCY_KEY`](crate::MAX_IDEMPOTENCY_KEY) bytes; nothing
    /// was stored.
    pub fn is_invalid_key(&self) -> bool {
        matches!(self.kind, Kind::InvalidKey(_))
    }

    /// A recurring schedule was refused: a cron expression that does not
    /// parse (the message names the field), an unknown time zone, a bad
    /// interval or name, or a name registered with another definition.
    /// Nothing was written.
    pub fn is_invalid_schedule(&self) -> bool {
        matches!(self.kind, Kind::InvalidSchedule(_))
    }

    /// A queue name was empty, longer than
    /// [`MAX_QUEUE_NAME`](crate::MAX_QUEUE_NAME) bytes, or held a character
    /// other than ASCII letters, digits, `_`, `-`, `.` and `:`; nothing was
    /// stored (or the scheduler did not start).
    pub fn is_invalid_queue(&self) -> bool {
        matches!(self.kind, Kind::InvalidQueue(_))
    }

    /// A time given as text ([`parse_time`](crate::parse_time)) was not an
    /// RFC 3339 date and time with an offset.
    pub fn is_invalid_time(&self) -> bool {
        matches!(self.kind, Kind::InvalidTime(_))
    }

    /// A task's [`Envelope`](crate::Envelope) was refused: a destination
    /// URL that is not `http` or `https` with a host, an
    /// unknown method, a reserved or malformed header, a malformed trace
    /// context ([`Error::is_invalid_trace_context`]), or one too large.
    /// Nothing was stored.
    pub fn is_invalid_envelope(&self) -> bool {
        matches!(
            self.kind,
            Kind::InvalidEnvelope(_) | Kind::InvalidTraceContext(_)
        )
    }

    /// A task's W3C trace context was refused: a `traceparent` that is not
    /// one, or a `tracestate` without one or too long. Also
    /// [`Error::is_invalid_envelope`].
    pub fn is_invalid_trace_context(&self) -> bool {
        matches!(self.kind, Kind::InvalidTraceContext(_))
    }

    /// A field of a task was refused: zero attempts, a partition key empty
    /// or over [`MAX_PARTITION_KEY`](crate::MAX_PARTITION_KEY) bytes, a
    /// longest wait under 1 ms or without
    /// [`replace_pending`](crate::Schedule::replace_pending), a debounce
    /// without an idempotency key. [`Error::invalid_field`] names the
    /// field. Nothing was stored.
    ///
    /// # Examples
    ///
    /// ```
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ttw_durable::Error> {
    /// let store = Store::sqlite_in_memory().await?;
    /// let err = store.schedule("x").max_attempts(0).await.unwrap_err();
    /// assert!(err.is_invalid_task());
    /// assert_eq!(err.invalid_field(), Some("max_attempts"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_invalid_task(&self) -> bool {
        matches!(self.kind, Kind::InvalidTask(..))
    }

    /// For [`Error::is_invalid_task`], the field refused, named as the
    /// service's API names it (`max_attempts`, `partition_key`, `max_wait`,
    /// `replace_pending`); `None` for any other error.
    pub fn invalid_field(&self) -> Option<&'static str> {
        match self.kind {
            Kind::InvalidTask(field, _) => Some(field),
            _ => None,
        }
    }

    /// An `ack` or `nack` came too late: the attempt no longer belongs to
    /// this delivery (its deadline passed and it was counted as failed, or
    /// this node lost the task's shard). The task will be, or was, delivered
    /// again.
    pub fn is_lost(&self) -> bool {
        matches!(self.kind, Kind::Lost)
    }

    /// The scheduler was shut down.
    pub fn is_closed(&self) -> bool {
        matches!(self.kind, Kind::Closed)
    }

    /// An ack, nack or extend of a pulled task named a claim that no
    /// longer holds it: its lease ran out (and it may have gone to another
    /// worker), or it was settled already. Nothing was changed.
    pub fn is_stale_claim(&self) -> bool {
        matches!(self.kind, Kind::StaleClaim)
    }

    /// A settle of a pulled task whose queue the [`Pulls`](crate::Pulls)
    /// handle may not use (see [`Pulls::only`](crate::Pulls::only)); the
    /// queue is [`Error::queue`]. Nothing was changed.
    pub fn is_queue_not_allowed(&self) -> bool {
        matches!(self.kind, Kind::QueueNotAllowed(_))
    }

    /// The queue an [`is_queue_not_allowed`](Self::is_queue_not_allowed)
    /// error names.
    pub fn queue(&self) -> Option<&str> {
        match &self.kind {
            Kind::QueueNotAllowed(queue) => Some(queue),
            _ => None,
        }
    }
}

/// The cause of a failed open in words: the I/O error's own message
/// ("Connection refused", "failed to lookup address information") or the
/// server's ("password authentication failed for user ..."), without
/// sqlx's wrapping.
fn open_cause(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::Database(db) => db.message().to_string(),
        sqlx::Error::PoolTimedOut => "timed out waiting for a connection".to_string(),
        other => other.to_string(),
    }
}

/// SQLite's `SQLITE_FULL` (primary result code 13) or PostgreSQL's
/// `disk_full` (SQLSTATE 53100).
pub(crate) fn disk_full(err: &sqlx::Error) -> bool {
    #[cfg(feature = "sqlite")]
    const SQLITE_FULL: i64 = 13;
    const PG_DISK_FULL: &str = "53100";
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    let Some(code) = db.code() else {
        return false;
    };
    #[cfg(feature = "sqlite")]
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        return code.parse::<i64>().is_ok_and(|c| c & 0xff == SQLITE_FULL);
    }
    code == PG_DISK_FULL
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        Self::from_kind(Kind::Database(err))
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        match err {
            sqlx::migrate::MigrateError::VersionMissing(v) => {
                Self::from_kind(Kind::SchemaTooNew(v))
            }
            err => Self::from_kind(Kind::Migrate(err)),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(index) = self.task {
            write!(f, "task {index} of the batch (nothing was stored): ")?;
        }
        match &self.kind {
            Kind::Database(err) if disk_full(err) => {
                write!(
                    f,
                    "database error (the disk is full; nothing was written): {err}"
                )
            }
            Kind::Database(err) => write!(f, "database error: {err}"),
            Kind::Open(target, err) => write!(f, "could not open {target}: {}", open_cause(err)),
            Kind::Migrate(err) => write!(f, "schema migration failed: {err}"),
            Kind::SchemaTooNew(v) => write!(
                f,
                "the database schema is newer than this version of the crate (it has migration {v})"
            ),
            Kind::PayloadTooLarge { len, limit } => write!(
                f,
                "payload of {len} bytes is larger than the limit of {limit} bytes"
            ),
            Kind::OutOfRange(what) => write!(f, "{what} is out of range"),
            Kind::Config(what) => write!(f, "invalid configuration: {what}"),
            Kind::Corrupt(what) => write!(
                f,
                "the database holds what this version cannot read: {what}"
            ),
            Kind::Internal(what) => write!(f, "internal error: {what}"),
            Kind::InvalidKey(why) => write!(f, "invalid idempotency key: {why}"),
            Kind::InvalidSchedule(why) => write!(f, "invalid recurring schedule: {why}"),
            Kind::InvalidQueue(why) => write!(f, "invalid queue name: {why}"),
            Kind::InvalidTime(why) => write!(f, "invalid time: {why}"),
            Kind::InvalidEnvelope(why) => write!(f, "invalid envelope: {why}"),
            Kind::InvalidTraceContext(why) => write!(f, "invalid trace context: {why}"),
            Kind::InvalidTask(field, why) => write!(f, "{field}: {why}"),
            Kind::GroupFailed(said) => write!(
                f,
                "the database failed the group this task was written in (nothing of it was stored): {said}"
            ),
            Kind::Lost => f.write_str("the delivery no longer holds its task"),
            Kind::Closed => f.write_str("the scheduler was shut down"),
            Kind::StaleClaim => f.write_str(
                "the claim no longer holds the task (its lease ran out, or it was settled); nothing was changed",
            ),
            Kind::QueueNotAllowed(queue) => {
                write!(f, "the task is in queue '{queue}', which may not be used here")
            }
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Database(err) => f.debug_tuple("Database").field(err).finish(),
            Kind::Open(target, err) => f.debug_tuple("Open").field(target).field(err).finish(),
            Kind::Migrate(err) => f.debug_tuple("Migrate").field(err).finish(),
            _ => write!(f, "Error({self})"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            Kind::Database(err) | Kind::Open(_, err) => Some(err),
            Kind::Migrate(err) => Some(err),
            _ => None,
        }
    }
}
