//! Scheduling in the caller's own transaction: [`CallerConnection`] is a
//! connection of the application's, usually inside a transaction, that
//! [`Schedule::submit_in`] and [`Store::schedule_batch_in`] write through,
//! so a task exists if and only if the application's own writes commit.

#[cfg(feature = "postgres")]
use sqlx::PgConnection;
#[cfg(feature = "sqlite")]
use sqlx::SqliteConnection;

use crate::client::schedule::{Schedule, Scheduled};
use crate::client::store::Store;
use crate::error::Error;
use crate::model::new_task::{NewRow, NewTask};
use crate::notify::Announced;

/// A connection of the caller's own that tasks can be scheduled through:
/// `sqlx::SqliteConnection` or `sqlx::PgConnection`, to the database the
/// [`Store`] is on. Inside a `sqlx::Transaction`, pass `&mut *tx`.
///
/// Sealed: the crate implements it for those two types only, each with its
/// backend's feature (`sqlite`, `postgres`).
pub trait CallerConnection: sealed::Sealed {}

#[cfg(feature = "sqlite")]
impl CallerConnection for SqliteConnection {}
#[cfg(feature = "postgres")]
impl CallerConnection for PgConnection {}

mod sealed {
    #[cfg(feature = "postgres")]
    use sqlx::PgConnection;
    #[cfg(feature = "sqlite")]
    use sqlx::SqliteConnection;

    use crate::sql::db::Conn;

    pub trait Sealed {
        /// This connection, as one of the two backends.
        fn conn(&mut self) -> Conn<'_>;
    }

    #[cfg(feature = "sqlite")]
    impl Sealed for SqliteConnection {
        fn conn(&mut self) -> Conn<'_> {
            Conn::Sqlite(self)
        }
    }

    #[cfg(feature = "postgres")]
    impl Sealed for PgConnection {
        fn conn(&mut self) -> Conn<'_> {
            Conn::Postgres(self)
        }
    }
}

pub(crate) use crate::sql::db::Conn;

impl Store {
    /// The caller's connection, checked to be on this store's backend.
    fn caller<'c, C: CallerConnection + ?Sized>(&self, conn: &'c mut C) -> Result<Conn<'c>, Error> {
        let conn = conn.conn();
        match (conn.is_postgres(), self.is_postgres()) {
            (true, false) => Err(Error::config(
                "the connection is to PostgreSQL but the store is on SQLite",
            )),
            (false, true) => Err(Error::config(
                "the connection is to SQLite but the store is on PostgreSQL",
            )),
            _ => Ok(conn),
        }
    }

    /// Tells this process's schedulers of tasks written on a caller's
    /// connection, before the caller commits. On SQLite that is the only
    /// way they hear of them at once, and it is harmless early: a claim
    /// waits for the caller's write lock, then takes the task if it
    /// committed, and finds nothing if it rolled back (an id reused after
    /// a rollback is claimed only at its own time, since a claim checks
    /// the time it reads). On PostgreSQL the `NOTIFY` of the statement
    /// arrives at commit, to every process, this one included.
    fn announce_uncommitted(&self, created: Vec<Announced>) {
        crate::telemetry::scheduled_each(created.iter().map(|t| &*t.queue));
        if !self.is_postgres() {
            for task in created {
                self.notifier().announce(task);
            }
        }
    }

    /// Stores many tasks, as [`Store::schedule_batch`] does, through the
    /// caller's own connection: inside the caller's transaction, they are
    /// stored if and only if it commits. The answers come back at once; a
    /// task created is delivered only if the transaction commits.
    ///
    /// The statements name the store's tables (in its PostgreSQL schema, if
    /// it has one), so the connection may have any `search_path`; it must
    /// be to the database the store is on. The batch is written in one
    /// transaction of its own, or a savepoint of the caller's.
    ///
    /// How the schedulers hear of the tasks: on PostgreSQL by the `NOTIFY`
    /// each statement sends, which goes out at commit; on SQLite this
    /// process's schedulers at once, other processes' by their catch-up
    /// poll. On SQLite the rows carry the time of the statement that wrote
    /// them, so a transaction that commits more than the catch-up poll's
    /// look-back (two polls and a second: 3 s by default) after it
    /// scheduled is seen by other processes only at their next window load
    /// (every half window). Keep such transactions short, as SQLite asks of
    /// every writer: the transaction holds the database's write lock, so
    /// inside it schedule only through it, never through the store's own
    /// pool, which would wait for the lock.
    ///
    /// # Errors
    ///
    /// As [`Store::schedule_batch`]; [`Error::is_config`] for a connection
    /// to the other backend. A database error inside a PostgreSQL
    /// transaction leaves that transaction aborted, as any failed
    /// statement does: roll it back.
    ///
    /// # Examples
    ///
    /// ```
    /// use sqlx::Connection;
    /// use ttw_durable::{NewTask, Store};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = std::env::temp_dir().join(format!("ttw-doc-batch-in-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("app.db");
    /// let store = Store::sqlite(&path).await?;
    /// let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    ///
    /// let mut tx = conn.begin().await?;
    /// store.schedule_batch_in(&mut *tx, [NewTask::new("a"), NewTask::new("b")]).await?;
    /// tx.rollback().await?;
    /// assert_eq!(store.counts().await?.scheduled, 0);
    /// # drop(store);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub async fn schedule_batch_in<C: CallerConnection + ?Sized>(
        &self,
        conn: &mut C,
        tasks: impl IntoIterator<Item = NewTask>,
    ) -> Result<Vec<Scheduled>, Error> {
        let conn = self.caller(conn)?;
        let rows = NewRow::check_batch(tasks, self.clock())?;
        let (outcomes, created) = self.insert_rows(conn, &rows).await?;
        self.announce_uncommitted(created);
        Ok(outcomes)
    }
}

impl Schedule<'_> {
    /// Stores the task, as [`Schedule::submit`] does, through the caller's
    /// own connection: inside the caller's transaction, the task exists if
    /// and only if the transaction commits, and is delivered only then.
    /// With [`Schedule::replace_pending`], the replacement too is part of
    /// the transaction.
    ///
    /// See [`Store::schedule_batch_in`] for how the schedulers hear of it,
    /// and what SQLite asks of the transaction.
    ///
    /// # Errors
    ///
    /// As [`Schedule::submit`]; [`Error::is_config`] for a connection to the
    /// other backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use sqlx::Connection;
    /// use ttw_durable::Store;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = std::env::temp_dir().join(format!("ttw-doc-submit-in-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("app.db");
    /// let store = Store::sqlite(&path).await?;
    /// let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    /// sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)").execute(&mut conn).await?;
    ///
    /// // The order and its reminder commit together, or neither does.
    /// let mut tx = conn.begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
    /// let reminder = store
    ///     .schedule("remind order 42")
    ///     .delay(Duration::from_secs(3600))
    ///     .submit_in(&mut *tx)
    ///     .await?;
    /// tx.commit().await?;
    /// assert!(store.get(reminder.id()).await?.is_some());
    /// # drop(store);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub async fn submit_in<C: CallerConnection + ?Sized>(
        self,
        conn: &mut C,
    ) -> Result<Scheduled, Error> {
        let store = self.store;
        let conn = store.caller(conn)?;
        if self.task.max_wait.is_some() && !self.replace {
            return Err(Error::config(
                "max_wait is a debounce's: it needs replace_pending",
            ));
        }
        let row = NewRow::check(self.task, store.clock())?;
        let (outcome, created) = if self.replace {
            let (outcome, changed) = store.upsert_on(conn, &row).await?;
            (outcome, changed.into_iter().collect::<Vec<_>>())
        } else {
            let (mut outcomes, created) =
                store.insert_rows(conn, std::slice::from_ref(&row)).await?;
            let outcome = outcomes
                .pop()
                .ok_or_else(|| Error::internal("the task has no outcome"))?;
            (outcome, created)
        };
        store.announce_uncommitted(created);
        Ok(outcome)
    }
}
