//! How a scheduler hears of tasks due inside its window that it did not
//! load itself, three ways: schedules of its own process directly (a
//! broadcast channel), those of other processes by PostgreSQL
//! `LISTEN/NOTIFY`, and in every case a catch-up poll for what a
//! notification missed (the only way on SQLite between processes).
//!
//! The announcing side is the client's: on PostgreSQL the statement that
//! makes a task due sends its `NOTIFY` itself ([`Notifier::announcing`]),
//! so the notification goes out if and only if the change commits, and
//! after the commit [`Notifier::announce`] tells this process's schedulers.
//! The hearing side ([`Listener`], and the poll in `node/poll.rs`) is the scheduler's. While
//! its `LISTEN` connection is up, a PostgreSQL scheduler needs no catch-up
//! poll: every change that makes a task due notifies, and a connection
//! that opens or comes back (when notifications could have been missed)
//! is heard as [`Heard::Missed`], which loads the window again.
//!
//! `announce.rs` is the announcing side, `listen.rs` the hearing side; the
//! catch-up poll is the node's (`node/poll.rs`).

pub(crate) mod announce;
pub(crate) mod listen;

use std::sync::Arc;

use crate::sql::db::{fnv1a, priority_from_sql};

pub(crate) use announce::{Made, Notifier};
pub(crate) use listen::{Heard, Listener};

/// What a `LISTEN` connection opens with: PostgreSQL's connection options.
#[cfg(feature = "postgres")]
pub(crate) type ListenOptions = sqlx::postgres::PgConnectOptions;
/// Without the `postgres` feature there is no `LISTEN` connection: a value
/// that cannot be made, so every `Option` of it is `None`.
#[cfg(not(feature = "postgres"))]
pub(crate) type ListenOptions = std::convert::Infallible;

/// The columns a statement that makes tasks due returns, for
/// [`Announced::read`] (and, on PostgreSQL, its `NOTIFY`).
pub(crate) const ANNOUNCED: &str = "id, run_at, queue, priority";

/// A task made due, as announced to schedulers: its queue by name, which
/// each scheduler maps to a lane of its own if it serves the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Announced {
    pub(crate) id: i64,
    pub(crate) run_at: i64,
    pub(crate) queue: Arc<str>,
    pub(crate) priority: i16,
}

impl Announced {
    /// Reads the [`ANNOUNCED`] columns of a row.
    pub(crate) fn read<'r, R>(row: &'r R) -> Result<Announced, sqlx::Error>
    where
        R: sqlx::Row,
        &'r str: sqlx::ColumnIndex<R>,
        i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    {
        Ok(Announced {
            id: row.try_get("id")?,
            run_at: row.try_get("run_at")?,
            queue: Arc::from(row.try_get::<String, _>("queue")?),
            priority: priority_from_sql(row.try_get("priority")?),
        })
    }
}

/// PostgreSQL's longest identifier, in bytes.
pub(super) const PG_IDENTIFIER: usize = 63;

/// The notification channel of a schema: `ttw_tasks`, or `ttw_tasks_<schema>`
/// (hashed when that is longer than PostgreSQL allows; every process
/// derives the same name).
pub(super) fn channel(schema: Option<&str>) -> String {
    let Some(schema) = schema else {
        return "ttw_tasks".to_string();
    };
    let channel = format!("ttw_tasks_{schema}");
    if channel.len() <= PG_IDENTIFIER {
        channel
    } else {
        format!("ttw_tasks_{:016x}", fnv1a(schema.as_bytes()))
    }
}

/// The `NOTIFY` payload that says a recurring schedule changed.
pub(super) const RECURRING: &str = "recurring";

/// A `NOTIFY` payload, `<id>:<run_at>:<priority>:<queue>`.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(super) fn parse(payload: &str) -> Option<Announced> {
    let mut parts = payload.splitn(4, ':');
    Some(Announced {
        id: parts.next()?.parse().ok()?,
        run_at: parts.next()?.parse().ok()?,
        priority: parts.next()?.parse().ok()?,
        queue: Arc::from(parts.next()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_schema_name_gets_a_short_stable_channel() {
        assert_eq!(channel(None), "ttw_tasks");
        assert_eq!(channel(Some("app")), "ttw_tasks_app");
        let long = "s".repeat(80);
        let name = channel(Some(&long));
        assert!(name.len() <= PG_IDENTIFIER, "{name}");
        assert_eq!(name, channel(Some(&long)));
    }

    #[test]
    fn payloads_parse_or_are_ignored() {
        assert_eq!(
            parse("7:1000:-3:tenant:42"),
            Some(Announced {
                id: 7,
                run_at: 1000,
                priority: -3,
                queue: Arc::from("tenant:42"),
            })
        );
        assert_eq!(parse("7:1000"), None);
        assert_eq!(parse("7"), None);
        assert_eq!(parse("x:1:0:default"), None);
        assert_eq!(parse(RECURRING), None);
    }
}
