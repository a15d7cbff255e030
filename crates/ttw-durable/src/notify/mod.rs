//! How a scheduler hears of tasks due inside its window that it did not
//! load itself, three ways: schedules of its own process directly (a
//! broadcast channel), those of other processes by PostgreSQL
//! `LISTEN/NOTIFY`, and in every case a catch-up poll for what a
//! notification missed (the only way on SQLite between processes).
//!
//! The announcing side is the client's: on PostgreSQL the statement that
//! makes a task due sends its `NOTIFY` itself (`sql::announce`),
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

pub(crate) use crate::sql::announce::{channel, Announced};

pub(crate) use announce::{Made, Notifier};
pub(crate) use listen::{Heard, Listener};

/// What a `LISTEN` connection opens with: PostgreSQL's connection options.
#[cfg(feature = "postgres")]
pub(crate) type ListenOptions = sqlx::postgres::PgConnectOptions;
/// Without the `postgres` feature there is no `LISTEN` connection: a value
/// that cannot be made, so every `Option` of it is `None`.
#[cfg(not(feature = "postgres"))]
pub(crate) type ListenOptions = std::convert::Infallible;

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
    use crate::sql::announce::RECURRING;

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
