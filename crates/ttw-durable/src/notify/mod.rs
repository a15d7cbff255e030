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

pub(crate) use crate::sql::announce::{channel, key_hash, Announced};

pub(crate) use announce::{Made, Notifier};
pub(crate) use listen::{Heard, Listener};

/// What a `LISTEN` connection opens with: PostgreSQL's connection options.
#[cfg(feature = "postgres")]
pub(crate) type ListenOptions = sqlx::postgres::PgConnectOptions;
/// Without the `postgres` feature there is no `LISTEN` connection: a value
/// that cannot be made, so every `Option` of it is `None`.
#[cfg(not(feature = "postgres"))]
pub(crate) type ListenOptions = std::convert::Infallible;

/// A `NOTIFY` payload, `<id>:<run_at>:<priority>:<n>:<key><queue>`: the
/// partition key is its first `n` bytes after the fourth `:` (none if 0),
/// the queue the rest (a queue's name may hold `:`, a key anything).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(super) fn parse(payload: &str) -> Option<Announced> {
    let mut parts = payload.splitn(5, ':');
    let id = parts.next()?.parse().ok()?;
    let run_at = parts.next()?.parse().ok()?;
    let priority = parts.next()?.parse().ok()?;
    let key_len: usize = parts.next()?.parse().ok()?;
    let rest = parts.next()?;
    let (key, queue) = (rest.get(..key_len)?, rest.get(key_len..)?);
    if queue.is_empty() {
        return None;
    }
    Some(Announced {
        id,
        run_at,
        priority,
        queue: Arc::from(queue),
        key: key_hash((key_len > 0).then_some(key)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::announce::RECURRING;

    #[test]
    fn payloads_parse_or_are_ignored() {
        assert_eq!(
            parse("7:1000:-3:0:tenant:42"),
            Some(Announced {
                id: 7,
                run_at: 1000,
                priority: -3,
                queue: Arc::from("tenant:42"),
                key: 0,
            })
        );
        let keyed = parse("7:1000:0:9:acme:co:1default").unwrap();
        assert_eq!(
            (&*keyed.queue, keyed.key),
            ("default", key_hash(Some("acme:co:1")))
        );
        assert_ne!(keyed.key, 0);
        assert_eq!(
            parse("7:1000:0:99:short"),
            None,
            "a key longer than the rest"
        );
        assert_eq!(parse("7:1000:0:5:abcde"), None, "no queue after the key");
        assert_eq!(parse("7:1000"), None);
        assert_eq!(parse("7"), None);
        assert_eq!(parse("x:1:0:default"), None);
        assert_eq!(parse(RECURRING), None);
    }
}
