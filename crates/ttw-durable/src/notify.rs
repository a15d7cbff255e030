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
//! The hearing side ([`Listener`], [`CatchUp`]) is the scheduler's. While
//! its `LISTEN` connection is up, a PostgreSQL scheduler needs no catch-up
//! poll: every change that makes a task due notifies, and a connection
//! that opens or comes back (when notifications could have been missed)
//! is heard as [`Heard::Missed`], which loads the window again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::claims::{priority_from_sql, Claims, Due};
use crate::db::fnv1a;
use crate::Error;

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

/// Schedules within this process the broadcast holds before a slow
/// listener lags (and reloads its window instead).
const LOCAL_BACKLOG: usize = 4096;

/// How long a `LISTEN` connection that could not be opened waits before
/// the next try.
const RECONNECT: Duration = Duration::from_secs(5);

/// PostgreSQL's longest identifier, in bytes.
const PG_IDENTIFIER: usize = 63;

/// The sending side, one per store.
pub(crate) struct Notifier {
    local: broadcast::Sender<Announced>,
    /// Bumped when a recurring schedule is registered, changed or resumed
    /// in this process: the schedulers make its occurrences tasks at once.
    recurring: watch::Sender<u64>,
    /// On PostgreSQL: the options a `LISTEN` connection opens with, and the
    /// channel (one per schema).
    postgres: Option<(PgConnectOptions, String)>,
}

impl Notifier {
    /// A notifier for a store; `postgres` holds the connection options and
    /// the schema of a PostgreSQL store.
    pub(crate) fn new(postgres: Option<(PgConnectOptions, Option<&str>)>) -> Notifier {
        let (local, _) = broadcast::channel(LOCAL_BACKLOG);
        Notifier {
            local,
            recurring: watch::Sender::new(0),
            postgres: postgres.map(|(options, schema)| (options, channel(schema))),
        }
    }

    /// `change`, a statement that makes tasks due and ends in
    /// `RETURNING` [`ANNOUNCED`] (and any other columns), made to announce them to the schedulers of
    /// other processes: on PostgreSQL it sends a `NOTIFY` per row it
    /// returns, in its own transaction, so the notifications go out if and
    /// only if the change commits, with no round trip of their own. On
    /// SQLite it is `change` itself; other processes' schedulers find the
    /// change by their catch-up poll.
    pub(crate) fn announcing(&self, change: &str) -> String {
        match &self.postgres {
            // The channel is letters, digits and '_' (see `channel`), safe
            // to write as a literal.
            Some((_, channel)) => format!(
                "WITH changed AS ({change}) SELECT changed.* FROM changed, \
                 pg_notify('{channel}', changed.id || ':' || changed.run_at || ':' || changed.priority \
                 || ':' || changed.queue)"
            ),
            None => change.to_string(),
        }
    }

    /// Tells this process's schedulers that a task is due, once the change
    /// has committed (those of other processes heard of it from the
    /// statement made by [`announcing`](Self::announcing)).
    pub(crate) fn announce(&self, task: Announced) {
        let _ = self.local.send(task);
    }

    /// Tells this process's schedulers that a recurring schedule was
    /// registered, changed or resumed.
    pub(crate) fn wake_recurring(&self) {
        self.recurring.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// What this process's schedulers watch for [`wake_recurring`](Self::wake_recurring).
    pub(crate) fn watch_recurring(&self) -> watch::Receiver<u64> {
        self.recurring.subscribe()
    }

    /// On PostgreSQL, a statement that tells the schedulers of other
    /// processes, at commit, that a recurring schedule changed.
    pub(crate) fn wake_recurring_sql(&self) -> Option<String> {
        self.postgres
            .as_ref()
            .map(|(_, channel)| format!("SELECT pg_notify('{channel}', '{RECURRING}')"))
    }

    /// Starts hearing announcements. The in-process subscription starts
    /// now, so call this before the first window load: nothing scheduled in
    /// this process from here on is missed. The `LISTEN` connection opens
    /// when the listener is first awaited; `listening` says, from then on,
    /// whether it is up.
    pub(crate) fn listen(&self, listening: Arc<AtomicBool>) -> Listener {
        Listener {
            local: self.local.subscribe(),
            connect: self.postgres.clone(),
            postgres: None,
            retry_at: None,
            listening,
        }
    }
}

/// The notification channel of a schema: `ttw_tasks`, or `ttw_tasks_<schema>`
/// (hashed when that is longer than PostgreSQL allows; every process
/// derives the same name).
fn channel(schema: Option<&str>) -> String {
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

/// What a [`Listener`] heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A task is due.
    Due(Announced),
    /// Announcements were missed (the listener fell behind, or its
    /// `LISTEN` connection has just opened): load the window again.
    Missed,
    /// A recurring schedule was registered, changed or resumed in another
    /// process.
    Recurring,
    /// The store is gone: nothing more will be heard.
    Closed,
}

/// The `NOTIFY` payload that says a recurring schedule changed.
const RECURRING: &str = "recurring";

/// The hearing side, one per scheduler.
pub(crate) struct Listener {
    local: broadcast::Receiver<Announced>,
    /// On PostgreSQL: the options and channel a `LISTEN` connection opens
    /// with.
    connect: Option<(PgConnectOptions, String)>,
    /// The `LISTEN` connection, while it is up.
    postgres: Option<PgListener>,
    /// When to try opening it again, after a try failed.
    retry_at: Option<Instant>,
    /// Whether the `LISTEN` connection is up, for the scheduler's catch-up
    /// poll, which rests while it is.
    listening: Arc<AtomicBool>,
}

impl Listener {
    /// The next announcement.
    ///
    /// On PostgreSQL, once the `LISTEN` connection is open (the first time,
    /// and again after it was lost), this is [`Heard::Missed`]: what was
    /// notified before it opened was not heard, so the window is loaded
    /// again, and from then on notifications bring every change. A
    /// connection lost is [`Heard::Missed`] as well, and another is opened;
    /// one that cannot be opened is tried again every [`RECONNECT`], and
    /// meanwhile the catch-up poll finds the changes.
    pub(crate) async fn next(&mut self) -> Heard {
        loop {
            if let Some(opened) = self.reopen().await {
                return opened;
            }
            let retry_at = self.retry_at;
            let remote = async {
                match (self.postgres.as_mut(), retry_at) {
                    (Some(listener), _) => Some(listener.try_recv().await),
                    (None, Some(at)) => {
                        tokio::time::sleep_until(at).await;
                        None
                    }
                    (None, None) => std::future::pending().await,
                }
            };
            tokio::select! {
                heard = self.local.recv() => return match heard {
                    Ok(due) => Heard::Due(due),
                    Err(broadcast::error::RecvError::Lagged(_)) => Heard::Missed,
                    Err(broadcast::error::RecvError::Closed) => Heard::Closed,
                },
                heard = remote => match heard {
                    Some(Ok(Some(notification))) => {
                        if let Some(due) = parse(notification.payload()) {
                            return Heard::Due(due);
                        }
                        if notification.payload() == RECURRING {
                            return Heard::Recurring;
                        }
                    }
                    // The connection was lost, and with it what was sent
                    // since it last delivered: load the window, and open
                    // another (`reopen`) at the next call.
                    Some(Ok(None)) => {
                        tracing::info!("LISTEN connection lost; opening another");
                        self.lost();
                        return Heard::Missed;
                    }
                    Some(Err(err)) => {
                        tracing::warn!(%err, "LISTEN failed; opening another, relying on the catch-up poll meanwhile");
                        self.lost();
                        return Heard::Missed;
                    }
                    // Time to try opening again.
                    None => {}
                },
            }
        }
    }

    /// The `LISTEN` connection is gone: the catch-up poll takes over until
    /// another opens.
    fn lost(&mut self) {
        self.postgres = None;
        self.retry_at = None;
        self.listening.store(false, Ordering::SeqCst);
    }

    /// Opens the `LISTEN` connection if there is none and it is time to
    /// try: `Some(Heard::Missed)` once it is open.
    async fn reopen(&mut self) -> Option<Heard> {
        let (options, channel) = self.connect.as_ref()?;
        if self.postgres.is_some() || self.retry_at.is_some_and(|at| Instant::now() < at) {
            return None;
        }
        match open(options.clone(), channel).await {
            Some(listener) => {
                self.postgres = Some(listener);
                self.retry_at = None;
                self.listening.store(true, Ordering::SeqCst);
                Some(Heard::Missed)
            }
            None => {
                self.retry_at = Some(Instant::now() + RECONNECT);
                None
            }
        }
    }
}

/// Opens a `LISTEN` connection on `channel`, or logs why not.
async fn open(options: PgConnectOptions, channel: &str) -> Option<PgListener> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(options);
    match PgListener::connect_with(&pool).await {
        Ok(mut listener) => match listener.listen(channel).await {
            Ok(()) => Some(listener),
            Err(err) => {
                tracing::warn!(%err, "LISTEN failed; relying on the catch-up poll");
                None
            }
        },
        Err(err) => {
            tracing::warn!(%err, "LISTEN connection failed; relying on the catch-up poll");
            None
        }
    }
}

/// A `NOTIFY` payload, `<id>:<run_at>:<priority>:<queue>`.
fn parse(payload: &str) -> Option<Announced> {
    let mut parts = payload.splitn(4, ':');
    Some(Announced {
        id: parts.next()?.parse().ok()?,
        run_at: parts.next()?.parse().ok()?,
        priority: parts.next()?.parse().ok()?,
        queue: Arc::from(parts.next()?),
    })
}

/// The catch-up poll's place: the database clock reading it looks back
/// from. Change stamps and the reading are both the database's clock, taken
/// while each statement runs, so neither a long wait for SQLite's write lock
/// nor a node's clock running behind hides a change from the poll; the
/// slack only has to cover the moment between a change's stamp and its
/// commit.
#[derive(Debug)]
pub(crate) struct CatchUp {
    since: Option<i64>,
    slack: i64,
}

impl CatchUp {
    /// A poll run every `every_ms` milliseconds. Its slack is two periods
    /// and a second; the first poll looks back one slack from its own
    /// start, which covers the time since the window was first loaded.
    pub(crate) fn new(every_ms: i64) -> CatchUp {
        CatchUp {
            since: None,
            slack: every_ms.saturating_mul(2).saturating_add(1000),
        }
    }

    /// Forgets where the last poll looked: the next looks back one slack
    /// from its own start, as the first does. For a poll resting while
    /// notifications bring every change; a window load follows when they
    /// stop (see [`Listener::next`]).
    pub(crate) fn restart(&mut self) {
        self.since = None;
    }

    /// One poll: the scheduled tasks of this session's shards due before
    /// `horizon` that changed since the last poll looked.
    pub(crate) async fn poll(&mut self, claims: &Claims, horizon: i64) -> Result<Vec<Due>, Error> {
        let changed = claims
            .changed_since(horizon, self.since, self.slack)
            .await?;
        self.since = Some(changed.db_now - self.slack);
        Ok(changed.due)
    }
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
