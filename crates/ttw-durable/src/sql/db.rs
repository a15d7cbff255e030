//! The backend: a pool on SQLite or PostgreSQL, opened with the settings a
//! [`StoreBuilder`](crate::StoreBuilder) gathered, and what every statement
//! shares (numbered placeholders, the database's clock as SQL, times as
//! milliseconds since the Unix epoch).
//!
//! Every write runs to its end: `execute`, or `fetch_all` when it returns
//! rows, never `fetch_one` or `fetch_optional`. On SQLite a statement read
//! only to its first row is reset rather than finished, and its automatic
//! commit happens at that reset, where a failure ("database or disk is
//! full") is never reported: the caller would get a row, an id, for a change
//! that was rolled back. Run to its end, a failed commit is the statement's
//! own error.

use std::borrow::Cow;
#[cfg(feature = "sqlite")]
use std::path::Path;
#[cfg(feature = "sqlite")]
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "postgres")]
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
#[cfg(feature = "sqlite")]
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
#[cfg(feature = "postgres")]
use sqlx::Connection;
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::Error;
#[cfg(test)]
use crate::model::clock::Clock;
#[cfg(feature = "sqlite")]
use crate::sql::checkpoint::{Checkpointer, WAL_LIMIT};
use crate::sql::commits::Commits;
#[cfg(feature = "postgres")]
pub(crate) use crate::sql::primary::Follower;
#[cfg(feature = "postgres")]
use crate::sql::primary::{follow, takes_writes, Hosts, Moves};
#[cfg(feature = "sqlite")]
use crate::sql::reserve::Reserve;

/// Runs `$body` with `$pool` bound to whichever pool `$db` holds. The body is
/// compiled once per backend built (features `sqlite` and `postgres`), so
/// the same statement text and row decoding serve both.
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            #[cfg(feature = "sqlite")]
            $crate::sql::db::Db::Sqlite($pool, _) => $body,
            // Cut short if the store's primary moves meanwhile (see
            // `primary::unless_moved`).
            #[cfg(feature = "postgres")]
            $crate::sql::db::Db::Postgres($pool) => {
                $crate::sql::primary::unless_moved(async { Ok::<_, $crate::error::Error>($body) })
                    .await?
            }
        }
    };
}
pub(crate) use with_pool;

/// Runs the write `$body` as [`with_pool!`] does, after taking this
/// process's turn at SQLite's one writer with `$urgency` (see [`Writes`]);
/// on PostgreSQL it runs at once.
macro_rules! write_with_pool {
    ($db:expr, $urgency:expr, $pool:ident => $body:expr) => {{
        let db = $db;
        let _turn = db.write_turn($urgency).await;
        $crate::sql::db::with_pool!(db, $pool => $body)
    }};
}
pub(crate) use write_with_pool;

/// A borrowed connection of either backend: a caller's, or one taken
/// from the pool for a transaction.
#[derive(Debug)]
pub enum Conn<'a> {
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut SqliteConnection),
    #[cfg(feature = "postgres")]
    Postgres(&'a mut PgConnection),
}

#[cfg(feature = "sqlite")]
impl<'a> From<&'a mut SqliteConnection> for Conn<'a> {
    fn from(conn: &'a mut SqliteConnection) -> Self {
        Conn::Sqlite(conn)
    }
}

#[cfg(feature = "postgres")]
impl<'a> From<&'a mut PgConnection> for Conn<'a> {
    fn from(conn: &'a mut PgConnection) -> Self {
        Conn::Postgres(conn)
    }
}

impl Conn<'_> {
    /// Whether this is a PostgreSQL connection.
    pub(crate) fn is_postgres(&self) -> bool {
        match self {
            #[cfg(feature = "sqlite")]
            Conn::Sqlite(_) => false,
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => true,
        }
    }

    /// The same connection, borrowed again for one more statement.
    pub(crate) fn again(&mut self) -> Conn<'_> {
        match self {
            #[cfg(feature = "sqlite")]
            Conn::Sqlite(c) => Conn::Sqlite(c),
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => Conn::Postgres(c),
        }
    }
}

/// Runs `$body` with `$c` bound to the connection `$conn` borrows, as
/// [`with_pool!`] does for a pool.
macro_rules! with_conn {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            #[cfg(feature = "sqlite")]
            $crate::sql::db::Conn::Sqlite($c) => $body,
            #[cfg(feature = "postgres")]
            $crate::sql::db::Conn::Postgres($c) => $body,
        }
    };
}
pub(crate) use with_conn;

/// Marks a pooled connection whose write failed part-way as in doubt: on
/// PostgreSQL it is closed when dropped, not pooled, since a transaction or
/// a `COPY` that ended in an error may have left it mid-protocol. An SQLite
/// connection goes back to the pool (its driver rolls back on the worker
/// thread that owns it, and a full disk must not cost the pool its
/// connections).
pub(crate) fn in_doubt<DB: sqlx::Database>(conn: &mut sqlx::pool::PoolConnection<DB>) {
    if DB::NAME == "PostgreSQL" {
        conn.close_on_drop();
    }
}

/// The pool of one backend; on SQLite, with the turns its writes take.
#[derive(Clone)]
pub(crate) enum Db {
    #[cfg(feature = "sqlite")]
    Sqlite(SqlitePool, Writes),
    #[cfg(feature = "postgres")]
    Postgres(PgPool),
}

/// How soon a write must run: what decides its place among this process's
/// writes waiting for SQLite's one writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Urgency {
    /// Lateness depends on it: a claim at fire time, or a heartbeat that
    /// keeps the leases. It waits for the write running now and at most
    /// one ordinary write already at the head of the line.
    Urgent,
    /// Everything else (schedules, outcomes, reclaims, sweeps), in the
    /// order asked.
    Ordinary,
}

/// This process's writes to one SQLite database, taken in turn.
///
/// SQLite lets one connection write at a time. Left to themselves, the
/// pool's connections find the writer busy and sleep in SQLite's busy
/// handler (1, 2, 5, 10, 15, 20, 25 ms... between tries), so a claim at
/// fire time could sleep behind a burst of schedules for tens of
/// milliseconds. Here each write waits for its turn in the process
/// instead, and the turn passes the moment the last write ends: ordinary
/// writes line up first in a lobby (first come, first served), and only
/// the one at its head waits for the turn itself, where urgent writes go
/// straight. Writers in other processes still meet the busy handler.
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) struct Writes {
    lobby: Arc<Mutex<()>>,
    turn: Arc<Mutex<()>>,
    /// Checkpoints a database file's WAL off the write path (none in
    /// memory).
    #[cfg(feature = "sqlite")]
    checkpoints: Option<Arc<Checkpointer>>,
    /// In this crate's tests, the clock statements read as the database's.
    #[cfg(test)]
    test_clock: Option<Clock>,
}

/// A write's turn, held while it runs. The turn is given up before the
/// lobby, so an urgent write waiting gets it ahead of the next ordinary
/// one. Given up, it counts the write for the checkpointer, which looks at
/// the WAL a moment after a write ends (a look while a write runs does
/// not see its frames).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) struct WriteTurn {
    _turn: OwnedMutexGuard<()>,
    _lobby: Option<OwnedMutexGuard<()>>,
    #[cfg(feature = "sqlite")]
    checkpoints: Option<Arc<Checkpointer>>,
}

#[cfg(feature = "sqlite")]
impl Drop for WriteTurn {
    fn drop(&mut self) {
        if let Some(checkpoints) = &self.checkpoints {
            checkpoints.wrote();
        }
    }
}

impl Db {
    /// The database's own clock, in milliseconds since the Unix epoch, as
    /// SQL read while the statement runs. On SQLite that is after the
    /// statement has the write lock, so a change is stamped with about the
    /// time it commits, however long it waited for the lock; on PostgreSQL
    /// it is the time of the call (`clock_timestamp()`, not the
    /// transaction's start), and no node's clock is involved.
    ///
    /// In this crate's tests a store on a test clock has the database read
    /// that clock instead (see [`Db::with_test_clock`]): the clock's now, as
    /// a literal.
    pub(crate) fn clock_sql(&self) -> Cow<'static, str> {
        #[cfg(test)]
        if let Some(clock) = self.test_clock() {
            return Cow::Owned(format!("CAST({} AS BIGINT)", clock.now_ms()));
        }
        Cow::Borrowed(self.database_clock_sql())
    }

    /// The database's own clock as SQL (see [`Db::clock_sql`]).
    pub(crate) fn database_clock_sql(&self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(..) => "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)",
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
        }
    }

    /// This SQLite store's statements read `clock` as the database's time
    /// (a test clock: a paused runtime then moves the time leases are
    /// judged by, too).
    #[cfg(test)]
    pub(crate) fn with_test_clock(self, clock: Clock) -> Db {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(pool, mut writes) => {
                writes.test_clock = Some(clock);
                Db::Sqlite(pool, writes)
            }
            #[cfg(feature = "postgres")]
            other => other,
        }
    }

    /// The test clock the statements read, if any.
    #[cfg(test)]
    pub(crate) fn test_clock(&self) -> Option<&Clock> {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(_, writes) => writes.test_clock.as_ref(),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => None,
        }
    }

    /// `"sqlite"` or `"postgres"`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(..) => "sqlite",
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => "postgres",
        }
    }

    /// This process's turns at SQLite's writer; `None` on PostgreSQL.
    fn writes(&self) -> Option<&Writes> {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(_, writes) => Some(writes),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => None,
        }
    }

    /// The checkpointer of an SQLite database file; `None` in memory and
    /// on PostgreSQL.
    #[cfg(all(feature = "sqlite", feature = "test-faults"))]
    pub(crate) fn checkpointer(&self) -> Option<&Checkpointer> {
        self.writes()?.checkpoints.as_deref()
    }

    /// Whether this is an SQLite database.
    pub(crate) fn is_sqlite(&self) -> bool {
        match self {
            #[cfg(feature = "sqlite")]
            Db::Sqlite(..) => true,
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => false,
        }
    }

    /// Waits for this process's turn to write, on SQLite (see [`Writes`]);
    /// `None` at once on PostgreSQL, where writers lock rows, not the
    /// database.
    pub(crate) async fn write_turn(&self, urgency: Urgency) -> Option<WriteTurn> {
        let writes = self.writes()?;
        let lobby = match urgency {
            Urgency::Urgent => None,
            Urgency::Ordinary => Some(writes.lobby.clone().lock_owned().await),
        };
        let turn = writes.turn.clone().lock_owned().await;
        // After a full disk, the room for the checkpoint that waits for it
        // may be back: take it before this write does.
        #[cfg(feature = "sqlite")]
        if let Some(checkpoints) = &writes.checkpoints {
            checkpoints.before_write().await;
        }
        Some(WriteTurn {
            _turn: turn,
            _lobby: lobby,
            #[cfg(feature = "sqlite")]
            checkpoints: writes.checkpoints.clone(),
        })
    }
}

/// How to open a pool: the connection settings of a
/// [`StoreBuilder`](crate::StoreBuilder).
#[derive(Debug, Clone)]
pub(crate) struct PoolSettings {
    pub(crate) max_connections: u32,
    pub(crate) connect_timeout: Duration,
    /// SQLite only: the most bytes the database file may hold.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) sqlite_max_size: Option<u64>,
    /// SQLite only: the disk reserve's size (`None`: the default).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) sqlite_disk_reserve: Option<u64>,
    /// SQLite only: when a commit reaches the disk.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) sqlite_commits: Commits,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
            sqlite_max_size: None,
            sqlite_disk_reserve: None,
            sqlite_commits: Commits::default(),
        }
    }
}

/// SQLite's page size for the databases this crate creates (sqlx's
/// default), the unit of the size limit.
#[cfg(feature = "sqlite")]
const SQLITE_PAGE_SIZE: u64 = 4096;

/// The smallest SQLite size limit accepted: room for the schema and a few
/// tasks.
pub(crate) const SQLITE_MIN_SIZE: u64 = 64 * 1024;

/// What keeps an in-memory SQLite database alive: a connection outside its
/// pool (see [`OpenSqlite`]).
#[cfg(feature = "sqlite")]
pub(crate) type MemoryKeeper = SqliteConnection;
/// Without the `sqlite` feature there is no in-memory database to keep.
#[cfg(not(feature = "sqlite"))]
pub(crate) type MemoryKeeper = std::convert::Infallible;
/// Without the `postgres` feature no primary is followed: a value that
/// cannot be made.
#[cfg(not(feature = "postgres"))]
pub(crate) type Follower = std::convert::Infallible;

/// An open SQLite database: its pool, and for an in-memory one a
/// connection outside the pool that keeps the database alive (an in-memory
/// SQLite database ends with its last connection, and the pool may close
/// and replace its one connection after a statement cut off by a cancelled
/// future).
#[cfg(feature = "sqlite")]
pub(crate) struct OpenSqlite {
    pub(crate) db: Db,
    pub(crate) keeper: Option<SqliteConnection>,
}

/// Whether an SQLite connection given back to its pool may serve again:
/// not while sqlx counts it inside a transaction. Then it is closed (which
/// rolls back whatever SQLite still holds open) and the pool opens a new
/// one.
///
/// A commit refused by a full disk is rolled back by SQLite itself; the
/// rollback sqlx sends when the transaction is dropped then fails, and sqlx
/// goes on counting the connection as inside one. The next transaction on
/// it began as a savepoint, which a refused statement rolled back to,
/// leaving a transaction open that held SQLite's write lock: every other
/// write then failed with "database is locked" after the busy timeout, and
/// this connection's writes never committed (after a full disk, delivery
/// stalled). A transaction merely dropped also closes its connection, as
/// the rollback sqlx queued may not have run yet: errors are rare, and a
/// new connection costs a millisecond.
#[cfg(feature = "sqlite")]
fn reusable(conn: &mut SqliteConnection) -> bool {
    !sqlx::Connection::is_in_transaction(conn)
}

#[cfg(feature = "sqlite")]
impl PoolSettings {
    /// Applies the SQLite settings every connection shares.
    fn sqlite_options(&self, options: SqliteConnectOptions) -> SqliteConnectOptions {
        match self.sqlite_max_size {
            Some(bytes) => options.pragma("max_page_count", (bytes / SQLITE_PAGE_SIZE).to_string()),
            None => options,
        }
    }

    /// Opens (creating if missing) an SQLite database file in WAL mode.
    pub(crate) async fn sqlite(&self, path: &Path) -> Result<OpenSqlite, Error> {
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
            .synchronous(match self.sqlite_commits {
                Commits::Flushed => SqliteSynchronous::Normal,
                Commits::Synced => SqliteSynchronous::Full,
            })
            // Checkpoints run off the write path (see `checkpoint`).
            .pragma("wal_autocheckpoint", "0")
            .pragma("journal_size_limit", WAL_LIMIT.to_string())
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
            .after_release(|conn, _| Box::pin(std::future::ready(Ok(reusable(conn)))))
            .connect_with(self.sqlite_options(options))
            .await
            .map_err(|err| Error::open(shown, err))?;
        let mut writes = Writes::default();
        writes.checkpoints = Some(Arc::new(Checkpointer::start(
            pool.clone(),
            path,
            writes.turn.clone(),
            Reserve::beside(path, self.sqlite_disk_reserve),
        )));
        Ok(OpenSqlite {
            db: Db::Sqlite(pool, writes),
            keeper: None,
        })
    }

    /// Opens a private in-memory SQLite database: one pooled connection,
    /// never recycled, and a keeper outside the pool.
    pub(crate) async fn sqlite_in_memory(&self) -> Result<OpenSqlite, Error> {
        let options = self.sqlite_options(SqliteConnectOptions::from_str("sqlite::memory:")?);
        // The options name one shared in-memory database; the keeper opens
        // it first and holds it for the store's life.
        let keeper = sqlx::ConnectOptions::connect(&options).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .after_release(|conn, _| Box::pin(std::future::ready(Ok(reusable(conn)))))
            .acquire_timeout(self.connect_timeout)
            .connect_with(options)
            .await?;
        Ok(OpenSqlite {
            db: Db::Sqlite(pool, Writes::default()),
            keeper: Some(keeper),
        })
    }
}

/// A PostgreSQL store's pool, and the follower of its primary when its URL
/// names several hosts or a `target_session_attrs` (`sql::primary`).
#[cfg(feature = "postgres")]
pub(crate) struct OpenPostgres {
    pub(crate) db: Db,
    pub(crate) follower: Option<Follower>,
}

#[cfg(feature = "postgres")]
impl PoolSettings {
    /// Connects to PostgreSQL, with the tables in `schema` (created if
    /// missing) when one is given. `url` is libpq's, with one host or
    /// several (`sql::primary`).
    pub(crate) async fn postgres(
        &self,
        url: &str,
        schema: Option<&str>,
    ) -> Result<OpenPostgres, Error> {
        let mut hosts = Hosts::parse(url)?;
        if let Some(schema) = schema {
            if schema.is_empty()
                || !schema
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Err(Error::config("a schema name is letters, digits and '_'"));
            }
        }
        // One connection first, within the connect timeout: a pool would
        // retry a refused or failing connection until its timeout and then
        // report only that it timed out. With several hosts, the first
        // that takes writes.
        let shown = hosts.describe();
        let timed_out = || Error::open(shown.clone(), sqlx::Error::PoolTimedOut);
        let (current, mut options, probe) = if hosts.follows() {
            let (i, options, conn) = tokio::time::timeout(self.connect_timeout, hosts.find())
                .await
                .map_err(|_| timed_out())??;
            (i, options, Some(conn))
        } else {
            let options = hosts.first();
            match tokio::time::timeout(self.connect_timeout, PgConnection::connect_with(&options))
                .await
            {
                Ok(Ok(conn)) => {
                    let _ = conn.close().await;
                }
                Ok(Err(err)) => return Err(Error::open(shown, err)),
                Err(_) => return Err(timed_out()),
            }
            (0, options, None)
        };
        if let Some(schema) = schema {
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(self.connect_timeout)
                .connect_with(options.clone())
                .await?;
            sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .execute(&admin)
                .await?;
            admin.close().await;
            options = options.options([("search_path", schema)]);
            hosts.set_search_path(schema);
        }
        let mut pool = PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout);
        let moves = Arc::new(Moves::new());
        if probe.is_some() {
            let target = hosts.target();
            let looking = moves.clone();
            pool = pool
                .after_connect(move |conn, _| {
                    let looking = looking.clone();
                    Box::pin(async move {
                        if takes_writes(conn, target).await? {
                            return Ok(());
                        }
                        looking.look.notify_one();
                        Err(sqlx::Error::Protocol(
                            "the server does not take writes (a standby); looking for the primary"
                                .into(),
                        ))
                    })
                })
                .before_acquire({
                    let moves = moves.clone();
                    move |_, meta| {
                        let keep = moves.keeps(meta.age);
                        Box::pin(std::future::ready(Ok(keep)))
                    }
                })
                // A connection to a server left behind is closed as it comes
                // back, not pinged: on a frozen server (see `unless_moved`)
                // the ping would hold its place in the pool until it wakes.
                .after_release({
                    let moves = moves.clone();
                    move |_, meta| {
                        let keep = moves.keeps(meta.age);
                        Box::pin(std::future::ready(Ok(keep)))
                    }
                });
        }
        let pool = pool.connect_with(options).await?;
        let follower =
            probe.map(|conn| follow(pool.clone(), Arc::new(hosts), current, conn, moves));
        Ok(OpenPostgres {
            db: Db::Postgres(pool),
            follower,
        })
    }
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

/// A count read from the database as a `u32`, negative as zero and too
/// large as `u32::MAX`.
pub(crate) fn clamp_u32(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// FNV-1a of `bytes`: a stable spread (every process computes the same),
/// not a secret.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A task's priority as the store holds it, in the range the API takes.
pub(crate) fn priority_from_sql(p: i64) -> i16 {
    p.clamp(i64::from(i16::MIN), i64::from(i16::MAX)) as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order writes get their turn in: behind an ordinary write, an
    /// urgent one that asked last goes first, then the ordinary ones in the
    /// order they asked; behind an urgent write, the ordinary write at the
    /// head of the lobby (waiting for the turn itself already) goes before
    /// an urgent one that came after it.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn urgent_writes_pass_the_ordinary_ones_in_line() {
        let pool = SqlitePoolOptions::new()
            .connect_lazy("sqlite::memory:")
            .unwrap();
        let db = Db::Sqlite(pool, Writes::default());
        for (first, expected) in [
            (
                Urgency::Ordinary,
                ["urgent", "ordinary 1", "ordinary 2", "ordinary 3"],
            ),
            (
                Urgency::Urgent,
                ["ordinary 1", "urgent", "ordinary 2", "ordinary 3"],
            ),
        ] {
            let order = Arc::new(std::sync::Mutex::new(Vec::new()));
            let running = db.write_turn(first).await.expect("SQLite takes turns");
            let mut waiting = Vec::new();
            for (name, urgency) in [
                ("ordinary 1", Urgency::Ordinary),
                ("ordinary 2", Urgency::Ordinary),
                ("ordinary 3", Urgency::Ordinary),
                ("urgent", Urgency::Urgent),
            ] {
                let (db, order) = (db.clone(), order.clone());
                waiting.push(tokio::spawn(async move {
                    let _turn = db.write_turn(urgency).await;
                    order.lock().unwrap().push(name);
                    tokio::task::yield_now().await;
                }));
                // Let it get in line before the next one asks.
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
            }
            assert!(
                order.lock().unwrap().is_empty(),
                "nobody writes while a write runs"
            );
            drop(running);
            for task in waiting {
                task.await.unwrap();
            }
            assert_eq!(*order.lock().unwrap(), expected, "behind {first:?}");
        }
    }

    /// Regression: a transaction refused by a full disk left its pooled
    /// connection inside a transaction. SQLite rolls a transaction back by
    /// itself on "database or disk is full", so the rollback sqlx sends
    /// when the transaction is dropped failed ("no transaction is active")
    /// and sqlx still counted the connection as in one; the next
    /// transaction on it began as a savepoint, and a failure in that one
    /// rolled back to the savepoint and left the transaction open. The
    /// connection went back to the pool holding SQLite's write lock: every
    /// other write then waited out the busy timeout and failed with
    /// "database is locked", and writes on that connection never
    /// committed. After a full disk, delivery stalled for good.
    ///
    /// Here, on the pool's one connection, a transaction that SQLite rolled
    /// back by itself, then one with a refused statement; then a write
    /// must commit (another connection sees it), and a write from another
    /// connection must not find the database locked. (The tmpfs tests of
    /// `ttw-tests` fill a real disk.)
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_transaction_refused_by_a_full_disk_leaves_no_connection_inside_one() {
        use sqlx::{Connection, Row};
        let dir = std::env::temp_dir().join(format!("ttw-full-tx-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("full.db");
        let settings = PoolSettings {
            max_connections: 1,
            ..PoolSettings::default()
        };
        let Db::Sqlite(pool, _) = settings.sqlite(&path).await.unwrap().db else {
            unreachable!("a file opens on SQLite")
        };
        sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
            .execute(&pool)
            .await
            .unwrap();
        // A commit refused by a full disk: SQLite rolls the transaction
        // back by itself (a `ROLLBACK` stands for that here, unseen by
        // sqlx), and sqlx's own rollback at the drop then fails.
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("INSERT INTO t (body) VALUES (x'00')")
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query("ROLLBACK").execute(&mut *tx).await.unwrap();
        drop(tx);
        // The next transaction on the pool's one connection: a statement
        // refused (here by a constraint, which rolls back only the
        // statement), and the transaction dropped.
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("INSERT INTO t (id, body) VALUES (7, x'00')")
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query("INSERT INTO t (id, body) VALUES (7, x'00')")
            .execute(&mut *tx)
            .await
            .unwrap_err();
        drop(tx);
        sqlx::query("INSERT INTO t (body) VALUES (x'01')")
            .execute(&pool)
            .await
            .unwrap();
        let mut other = SqliteConnection::connect_with(
            &SqliteConnectOptions::new()
                .filename(&path)
                .busy_timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap();
        let count: i64 = sqlx::query("SELECT COUNT(*) FROM t")
            .fetch_one(&mut other)
            .await
            .unwrap()
            .get(0);
        assert_eq!(count, 1, "the write after the refusals was not committed");
        sqlx::query("INSERT INTO t (body) VALUES (x'02')")
            .execute(&mut other)
            .await
            .expect("another connection can write");
        drop(other);
        pool.close().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// PostgreSQL locks rows, not the database: its writes take no turn.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn postgres_writes_take_no_turn() {
        let pool = PgPoolOptions::new()
            .connect_lazy("postgres://nobody@127.0.0.1:1/none")
            .unwrap();
        assert!(Db::Postgres(pool)
            .write_turn(Urgency::Urgent)
            .await
            .is_none());
    }
}
