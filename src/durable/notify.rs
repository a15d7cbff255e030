//! How a scheduler hears of tasks due inside its window that it did not
//! load itself, three ways: schedules of its own process directly (a
//! broadcast channel), those of other processes by PostgreSQL
//! `LISTEN/NOTIFY`, and in every case a catch-up poll for what a
//! notification missed (the only way on SQLite between processes).
//!
//! The announcing side ([`Notifier::announce`]) runs in the client after a
//! change commits; the hearing side ([`Listener`], [`CatchUp`]) in the
//! scheduler.

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::broadcast;

use super::claims::{Claims, Due};
use super::db::{fnv1a, Db};
use super::Error;

/// Schedules within this process the broadcast holds before a slow
/// listener lags (and reloads its window instead).
const LOCAL_BACKLOG: usize = 4096;

/// PostgreSQL's longest identifier, in bytes.
const PG_IDENTIFIER: usize = 63;

/// The sending side, one per store.
pub(crate) struct Notifier {
    db: Db,
    local: broadcast::Sender<Due>,
    /// On PostgreSQL: the options a `LISTEN` connection opens with, and the
    /// channel (one per schema).
    postgres: Option<(PgConnectOptions, String)>,
}

impl Notifier {
    /// A notifier for a store on `db`; `postgres` holds the connection
    /// options and the schema of a PostgreSQL store.
    pub(crate) fn new(db: Db, postgres: Option<(PgConnectOptions, Option<&str>)>) -> Notifier {
        let (local, _) = broadcast::channel(LOCAL_BACKLOG);
        Notifier {
            db,
            local,
            postgres: postgres.map(|(options, schema)| (options, channel(schema))),
        }
    }

    /// Tells schedulers that a task is due at `run_at`: those of this
    /// process directly, those of other processes by `NOTIFY`.
    ///
    /// The change it announces has committed already, so a failed `NOTIFY`
    /// is not the caller's error (an error would invite a retry that
    /// schedules the task twice): it is logged, and the schedulers' catch-up
    /// poll finds the change instead.
    pub(crate) async fn announce(&self, id: i64, run_at: i64) {
        let _ = self.local.send(Due { id, run_at });
        if let (Db::Postgres(pool), Some((_, channel))) = (&self.db, &self.postgres) {
            let sent = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(channel)
                .bind(format!("{id}:{run_at}"))
                .execute(pool)
                .await;
            if let Err(err) = sent {
                tracing::debug!(id, %err, "NOTIFY failed; the catch-up poll will find the task");
            }
        }
    }

    /// Starts hearing announcements. The in-process subscription starts
    /// now, so call this before the first window load: nothing scheduled in
    /// this process from here on is missed. The `LISTEN` connection opens
    /// when the listener is first awaited.
    pub(crate) fn listen(&self) -> Listener {
        Listener {
            local: self.local.subscribe(),
            connect: self.postgres.clone(),
            postgres: None,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A task is due at this time.
    Due(Due),
    /// Announcements were missed (the listener fell behind): load the
    /// window again.
    Missed,
    /// The store is gone: nothing more will be heard.
    Closed,
}

/// The hearing side, one per scheduler.
pub(crate) struct Listener {
    local: broadcast::Receiver<Due>,
    /// The `LISTEN` connection still to open: options and channel.
    connect: Option<(PgConnectOptions, String)>,
    postgres: Option<PgListener>,
}

impl Listener {
    /// The next announcement. A `LISTEN` connection that cannot be opened,
    /// or fails later, is dropped (logged), leaving the catch-up poll to
    /// find what it would have brought; one that reconnects brings nothing
    /// sent meanwhile, which the poll finds too.
    pub(crate) async fn next(&mut self) -> Heard {
        if let Some((options, channel)) = self.connect.take() {
            self.postgres = open(options, &channel).await;
        }
        loop {
            let remote = async {
                match self.postgres.as_mut() {
                    Some(listener) => listener.try_recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                heard = self.local.recv() => return match heard {
                    Ok(due) => Heard::Due(due),
                    Err(broadcast::error::RecvError::Lagged(_)) => Heard::Missed,
                    Err(broadcast::error::RecvError::Closed) => Heard::Closed,
                },
                heard = remote => match heard {
                    Ok(Some(notification)) => {
                        if let Some(due) = parse(notification.payload()) {
                            return Heard::Due(due);
                        }
                    }
                    Ok(None) => {}
                    Err(err) => {
                        tracing::warn!(%err, "LISTEN failed; relying on the catch-up poll");
                        self.postgres = None;
                    }
                },
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

/// A `NOTIFY` payload, `<id>:<run_at>`.
fn parse(payload: &str) -> Option<Due> {
    let (id, run_at) = payload.split_once(':')?;
    Some(Due {
        id: id.parse().ok()?,
        run_at: run_at.parse().ok()?,
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
            parse("7:1000"),
            Some(Due {
                id: 7,
                run_at: 1000
            })
        );
        assert_eq!(parse("7"), None);
        assert_eq!(parse("x:1"), None);
    }
}
