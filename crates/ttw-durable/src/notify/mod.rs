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

/// Where a `LISTEN` connection opens: the server the store's pool connects
/// to when it opens (the primary, after a failover).
#[cfg(feature = "postgres")]
pub(crate) type ListenOptions = sqlx::postgres::PgPool;
/// Without the `postgres` feature there is no `LISTEN` connection: a value
/// that cannot be made, so every `Option` of it is `None`.
#[cfg(not(feature = "postgres"))]
pub(crate) type ListenOptions = std::convert::Infallible;

/// A `NOTIFY` payload: entries `<id>:<run_at>:<priority>:<n>:<key><queue>`
/// separated by commas, one a task. An entry's partition key is its first
/// `n` bytes after the fourth `:` (none if 0), its queue what follows, to
/// the next comma or the end (a queue's name may hold `:` but no comma, a
/// key anything). Appends each task to `out` and returns how many; an entry
/// that does not parse ends the reading (what follows could be misread).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(super) fn parse(payload: &str, out: &mut std::collections::VecDeque<Announced>) -> usize {
    let mut rest = payload;
    let mut read = 0;
    while !rest.is_empty() {
        let Some((task, after)) = parse_entry(rest) else {
            break;
        };
        out.push_back(task);
        read += 1;
        rest = after;
    }
    read
}

/// The first entry of `payload` and what follows its comma.
fn parse_entry(payload: &str) -> Option<(Announced, &str)> {
    let mut parts = payload.splitn(5, ':');
    let id = parts.next()?.parse().ok()?;
    let run_at = parts.next()?.parse().ok()?;
    let priority = parts.next()?.parse().ok()?;
    let key_len: usize = parts.next()?.parse().ok()?;
    let rest = parts.next()?;
    let (key, after) = (rest.get(..key_len)?, rest.get(key_len..)?);
    let (queue, next) = after.split_once(',').unwrap_or((after, ""));
    if queue.is_empty() {
        return None;
    }
    let task = Announced {
        id,
        run_at,
        priority,
        queue: Arc::from(queue),
        key: key_hash((key_len > 0).then_some(key)),
    };
    Some((task, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::announce::RECURRING;

    fn parse_one(payload: &str) -> Option<Announced> {
        let mut out = std::collections::VecDeque::new();
        (parse(payload, &mut out) == 1)
            .then(|| out.pop_front())
            .flatten()
    }

    #[test]
    fn payloads_parse_or_are_ignored() {
        assert_eq!(
            parse_one("7:1000:-3:0:tenant:42"),
            Some(Announced {
                id: 7,
                run_at: 1000,
                priority: -3,
                queue: Arc::from("tenant:42"),
                key: 0,
            })
        );
        let keyed = parse_one("7:1000:0:9:acme:co:1default").unwrap();
        assert_eq!(
            (&*keyed.queue, keyed.key),
            ("default", key_hash(Some("acme:co:1")))
        );
        assert_ne!(keyed.key, 0);
        assert_eq!(
            parse_one("7:1000:0:99:short"),
            None,
            "a key longer than the rest"
        );
        assert_eq!(
            parse_one("7:1000:0:5:abcde"),
            None,
            "no queue after the key"
        );
        assert_eq!(parse_one("7:1000"), None);
        assert_eq!(parse_one("7"), None);
        assert_eq!(parse_one("x:1:0:default"), None);
        assert_eq!(parse_one(RECURRING), None);
    }

    #[test]
    fn a_payload_of_many_tasks_is_read_entry_by_entry() {
        let mut out = std::collections::VecDeque::new();
        // A key may hold commas; a queue may hold colons.
        let read = parse(
            "1:10:0:0:default,2:20:-1:5:a,b:cq:1,3:30:2:0:last",
            &mut out,
        );
        assert_eq!(read, 3);
        let got: Vec<(i64, i64, &str)> = out.iter().map(|t| (t.id, t.run_at, &*t.queue)).collect();
        assert_eq!(got, [(1, 10, "default"), (2, 20, "q:1"), (3, 30, "last")]);
        assert_eq!(out[1].key, key_hash(Some("a,b:c")));
        // A bad entry ends the reading; what came before it stands.
        out.clear();
        assert_eq!(parse("1:10:0:0:default,2:x:0:0:q,3:30:0:0:q", &mut out), 1);
        assert_eq!(out.len(), 1);
        // An empty entry (a trailing comma) is not a task.
        out.clear();
        assert_eq!(parse("1:10:0:0:default,", &mut out), 1);
    }
}
