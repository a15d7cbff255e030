//! The hearing side, one per scheduler: the in-process broadcast, and on
//! PostgreSQL a `LISTEN` connection, opened again when it is lost.

#[cfg(feature = "postgres")]
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
#[cfg(feature = "postgres")]
use std::sync::atomic::Ordering;
use std::sync::Arc;
#[cfg(feature = "postgres")]
use std::time::Duration;

#[cfg(feature = "postgres")]
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use tokio::sync::broadcast;
#[cfg(feature = "postgres")]
use tokio::time::Instant;

#[cfg(feature = "postgres")]
use super::parse;
use super::{Announced, ListenOptions};
#[cfg(feature = "postgres")]
use crate::sql::announce::{RECURRING, ROOM};
#[cfg(feature = "postgres")]
use crate::sql::claims::pull::PULL;

/// How long a `LISTEN` connection that could not be opened waits before
/// the next try.
#[cfg(feature = "postgres")]
const RECONNECT: Duration = Duration::from_secs(5);

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
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Recurring,
    /// Another node's limited claim left a place to a key waiting here.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Room,
    /// This many tasks of this pull queue fell due on another node: as many
    /// of the claims waiting on it here look again.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Pull(String, usize),
    /// The store is gone: nothing more will be heard.
    Closed,
}

/// The hearing side, one per scheduler.
pub(crate) struct Listener {
    local: broadcast::Receiver<Announced>,
    /// On PostgreSQL: the store's pool (a `LISTEN` connection opens where
    /// its connections go) and the channel.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    connect: Option<(ListenOptions, String)>,
    /// The `LISTEN` connection, while it is up.
    #[cfg(feature = "postgres")]
    postgres: Option<PgListener>,
    /// When to try opening it again, after a try failed.
    #[cfg(feature = "postgres")]
    retry_at: Option<Instant>,
    /// Whether the `LISTEN` connection is up, for the scheduler's catch-up
    /// poll, which rests while it is.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    listening: Arc<AtomicBool>,
    /// The tasks of a notification not yet returned (one notification
    /// announces a statement's tasks, up to a payload's worth).
    #[cfg(feature = "postgres")]
    heard: VecDeque<Announced>,
}

impl Listener {
    /// A listener on the in-process broadcast `local` and, on PostgreSQL,
    /// the `LISTEN` connection `connect` opens when first awaited.
    pub(super) fn new(
        local: broadcast::Receiver<Announced>,
        connect: Option<(ListenOptions, String)>,
        listening: Arc<AtomicBool>,
    ) -> Listener {
        Listener {
            local,
            connect,
            #[cfg(feature = "postgres")]
            postgres: None,
            #[cfg(feature = "postgres")]
            retry_at: None,
            listening,
            #[cfg(feature = "postgres")]
            heard: VecDeque::new(),
        }
    }

    /// Opens the `LISTEN` connection now, before the window load that
    /// follows (a node's join): what is notified from here on is heard, so
    /// the load covers the rest, and the opening is not a
    /// [`Heard::Missed`] that loads the window a second time. A second load
    /// at the start read every task of a burst due now again while the
    /// first load's fires were being claimed, and armed them again: each
    /// fired once more, for a claim that found it taken or done. If it
    /// cannot be opened now, [`next`](Self::next) tries again as usual.
    pub(crate) async fn open_before_load(&mut self) {
        #[cfg(feature = "postgres")]
        {
            let _ = self.reopen().await;
        }
    }

    /// The next announcement: without the `postgres` feature, only this
    /// process's.
    #[cfg(not(feature = "postgres"))]
    pub(crate) async fn next(&mut self) -> Heard {
        heard_locally(self.local.recv().await)
    }

    /// The next announcement.
    ///
    /// On PostgreSQL, once the `LISTEN` connection is open (the first time,
    /// and again after it was lost), this is [`Heard::Missed`]: what was
    /// notified before it opened was not heard, so the window is loaded
    /// again, and from then on notifications bring every change. A
    /// connection lost is [`Heard::Missed`] as well, and another is opened;
    /// one that cannot be opened is tried again every [`RECONNECT`], and
    /// meanwhile the catch-up poll finds the changes.
    #[cfg(feature = "postgres")]
    pub(crate) async fn next(&mut self) -> Heard {
        loop {
            if let Some(due) = self.heard.pop_front() {
                return Heard::Due(due);
            }
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
                heard = self.local.recv() => return heard_locally(heard),
                heard = remote => match heard {
                    Some(Ok(Some(notification))) => {
                        if parse(notification.payload(), &mut self.heard) > 0 {
                            continue;
                        }
                        if notification.payload() == RECURRING {
                            return Heard::Recurring;
                        }
                        if notification.payload() == ROOM {
                            return Heard::Room;
                        }
                        if let Some((n, queue)) = notification
                            .payload()
                            .strip_prefix(PULL)
                            .and_then(|rest| rest.split_once(':'))
                        {
                            return Heard::Pull(queue.to_string(), n.parse().unwrap_or(1));
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
    #[cfg(feature = "postgres")]
    fn lost(&mut self) {
        self.postgres = None;
        self.retry_at = None;
        self.listening.store(false, Ordering::SeqCst);
    }

    /// Opens the `LISTEN` connection if there is none and it is time to
    /// try: `Some(Heard::Missed)` once it is open.
    #[cfg(feature = "postgres")]
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

/// What the in-process broadcast brought.
fn heard_locally(heard: Result<Announced, broadcast::error::RecvError>) -> Heard {
    match heard {
        Ok(due) => Heard::Due(due),
        Err(broadcast::error::RecvError::Lagged(_)) => Heard::Missed,
        Err(broadcast::error::RecvError::Closed) => Heard::Closed,
    }
}

/// Opens a `LISTEN` connection on `channel`, or logs why not.
#[cfg(feature = "postgres")]
async fn open(store: PgPool, channel: &str) -> Option<PgListener> {
    // `NOTIFY` reaches listeners on the server that commits, so the
    // connection goes where the store's pool connects now.
    let options = (*store.connect_options()).clone();
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
