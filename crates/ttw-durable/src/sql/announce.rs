//! What a statement that makes tasks due returns ([`Announced`]), and on
//! PostgreSQL the `NOTIFY` it sends in the same statement, so that the
//! notification goes out if and only if the change commits.

use std::sync::Arc;

use crate::sql::db::{fnv1a, priority_from_sql};

/// The columns a statement that makes tasks due returns, for
/// [`AnnouncedRow`] (and, on PostgreSQL, its `NOTIFY`).
pub(crate) const ANNOUNCED: &str = "id, run_at, queue, priority, partition_key";

/// A task made due, as announced to schedulers: its queue by name, which
/// each scheduler maps to a lane of its own if it serves the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Announced {
    pub(crate) id: i64,
    pub(crate) run_at: i64,
    pub(crate) queue: Arc<str>,
    pub(crate) priority: i16,
    /// Its partition key, as [`key_hash`] gives it.
    pub(crate) key: u64,
}

/// A partition key as a node keeps it: a hash (0 for none), which decides
/// only which tasks take turns together on the node; the limits count the
/// keys themselves, in the database.
pub(crate) fn key_hash(key: Option<&str>) -> u64 {
    key.map_or(0, |k| fnv1a(k.as_bytes()).max(1))
}

/// A row of the [`ANNOUNCED`] columns, as a statement returns it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AnnouncedRow {
    id: i64,
    run_at: i64,
    queue: String,
    priority: i64,
    partition_key: Option<String>,
}

impl From<AnnouncedRow> for Announced {
    fn from(row: AnnouncedRow) -> Announced {
        Announced {
            id: row.id,
            run_at: row.run_at,
            queue: Arc::from(row.queue),
            priority: priority_from_sql(row.priority),
            key: key_hash(row.partition_key.as_deref()),
        }
    }
}

/// PostgreSQL's longest identifier, in bytes.
pub(crate) const PG_IDENTIFIER: usize = 63;

/// The `NOTIFY` payload that says a recurring schedule changed.
pub(crate) const RECURRING: &str = "recurring";

/// The `NOTIFY` payload that says a limited claim left a place to a key
/// waiting on another node: the nodes whose queues wait for a place look
/// again at once, not at their next retry.
pub(crate) const ROOM: &str = "room";

/// The notification channel of a schema: `ttw_tasks`, or `ttw_tasks_<schema>`
/// (hashed when that is longer than PostgreSQL allows; every process
/// derives the same name).
pub(crate) fn channel(schema: Option<&str>) -> String {
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

/// The bytes of `NOTIFY` payload past which a statement's announcements go
/// in another notification. An entry, with its comma, is at most 64 + 128 +
/// 64 bytes (numbers, a partition key of
/// [`MAX_PARTITION_KEY`](crate::MAX_PARTITION_KEY), a queue name of
/// [`MAX_QUEUE_NAME`](crate::MAX_QUEUE_NAME)), and a notification holds the
/// entries whose running total (commas counted) falls in one span of this
/// size, so less than this and one entry more: under PostgreSQL's 8,000.
pub(crate) const NOTIFY_PART: usize = 7000;

/// The announcements of the rows of `changed`, a notification on `channel`
/// for each [`NOTIFY_PART`] bytes of entries (`id:run_at:priority:n:<key><queue>`,
/// comma-separated: a queue's name holds no comma, and the key's length
/// comes before it), evaluated by the statement's final `SELECT`.
fn notified(channel: &str) -> String {
    // The channel is letters, digits and '_' (see `channel`), safe to
    // write as a literal.
    format!(
        "notified AS (SELECT pg_notify('{channel}', string_agg(entry, ',' ORDER BY n)) FROM \
         (SELECT entry, n, sum(octet_length(entry) + 1) OVER (ORDER BY n) / {NOTIFY_PART} AS part FROM \
         (SELECT row_number() OVER () AS n, changed.id || ':' || changed.run_at || ':' || changed.priority \
         || ':' || COALESCE(octet_length(changed.partition_key), 0) || ':' \
         || COALESCE(changed.partition_key, '') || changed.queue AS entry FROM changed) AS entries) AS parts \
         GROUP BY part)"
    )
}

/// `change`, a statement that makes tasks due and ends in `RETURNING`
/// [`ANNOUNCED`] (and any other columns), made to announce them on
/// `channel` (PostgreSQL): in its own transaction, with no round trip of
/// its own, a `NOTIFY` for each [`NOTIFY_PART`] bytes of announcements
/// (one for each task cost a tenth of an insert's time). Without a channel
/// (SQLite) it is `change` itself; other processes' schedulers find the
/// change by their catch-up poll.
pub(crate) fn announcing(channel: Option<&str>, change: &str) -> String {
    match channel {
        Some(channel) => format!(
            "WITH changed AS ({change}), {} SELECT changed.* FROM changed, \
             (SELECT count(*) FROM notified) AS sent",
            notified(channel)
        ),
        None => change.to_string(),
    }
}

/// [`announcing`] for a `change` that reads the common table expressions
/// `ctes` (`name AS (...)`, comma-separated): on PostgreSQL a
/// data-modifying `WITH` must be the statement's own.
#[cfg(feature = "postgres")]
pub(crate) fn announcing_after(channel: Option<&str>, ctes: &str, change: &str) -> String {
    match channel {
        Some(channel) => format!(
            "WITH {ctes}, changed AS ({change}), {} SELECT changed.* FROM changed, \
             (SELECT count(*) FROM notified) AS sent",
            notified(channel)
        ),
        None => format!("WITH {ctes} {change}"),
    }
}

/// On PostgreSQL, the statement that tells the schedulers of other
/// processes, at commit, that a recurring schedule changed.
pub(crate) fn wake_recurring(channel: Option<&str>) -> Option<String> {
    channel.map(|channel| format!("SELECT pg_notify('{channel}', '{RECURRING}')"))
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
}
