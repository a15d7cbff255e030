//! How a store's statements name what they touch: its tables (in its
//! PostgreSQL schema, if it has one), its `NOTIFY` channel, and the
//! database's clock.

use std::borrow::Cow;

use crate::sql::announce;
use crate::sql::db::Db;

/// The names every statement of one store writes.
///
/// The tables are named in the store's PostgreSQL schema if it has one:
/// statements on a caller's connection run with the caller's
/// `search_path`, which may differ from the pool's.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// `ttw_tasks`.
    pub(crate) tasks: String,
    /// `ttw_history`.
    pub(crate) history: String,
    /// `ttw_all_tasks`, the view of both.
    pub(crate) all: String,
    /// The `NOTIFY` channel, on PostgreSQL.
    pub(crate) channel: Option<String>,
    /// The database's clock as SQL (see [`Db::clock_sql`]).
    clock: &'static str,
    /// In this crate's tests, a clock read instead.
    #[cfg(test)]
    test_clock: Option<crate::model::clock::Clock>,
}

impl Names {
    /// The names of a store on `db`, in `schema` (PostgreSQL only).
    pub(crate) fn new(db: &Db, schema: Option<&str>) -> Names {
        let prefix = match schema {
            Some(schema) if !db.is_sqlite() => format!("{schema}."),
            _ => String::new(),
        };
        Names {
            tasks: format!("{prefix}ttw_tasks"),
            history: format!("{prefix}ttw_history"),
            all: format!("{prefix}ttw_all_tasks"),
            channel: (!db.is_sqlite()).then(|| announce::channel(schema)),
            clock: db.database_clock_sql(),
            #[cfg(test)]
            test_clock: db.test_clock().cloned(),
        }
    }

    /// The database's clock as SQL, as [`Db::clock_sql`] writes it.
    pub(crate) fn clock(&self) -> Cow<'static, str> {
        #[cfg(test)]
        if let Some(clock) = &self.test_clock {
            return Cow::Owned(format!("CAST({} AS BIGINT)", clock.now_ms()));
        }
        Cow::Borrowed(self.clock)
    }

    /// `change` made to announce the tasks it returns (see
    /// [`announce::announcing`]).
    pub(crate) fn announcing(&self, change: &str) -> String {
        announce::announcing(self.channel.as_deref(), change)
    }
}
