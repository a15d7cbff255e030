//! The announcing side, one per store: the `NOTIFY` a statement that
//! makes tasks due sends on PostgreSQL, and the in-process broadcast to this
//! process's schedulers after the change commits.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use super::listen::Listener;
use super::{channel, Announced, ListenOptions};

/// Schedules within this process the broadcast holds before a slow
/// listener lags (and reloads its window instead).
const LOCAL_BACKLOG: usize = 4096;

/// The sending side, one per store.
pub(crate) struct Notifier {
    local: broadcast::Sender<Announced>,
    /// Bumped when a recurring schedule is registered, changed or resumed
    /// in this process: the schedulers make its occurrences tasks at once.
    recurring: watch::Sender<u64>,
    /// On PostgreSQL: the store's pool (a `LISTEN` connection opens where
    /// its connections go), and the channel (one per schema).
    postgres: Option<(ListenOptions, String)>,
}

impl Notifier {
    /// A notifier for a store; `postgres` holds the pool and the schema of
    /// a PostgreSQL store.
    pub(crate) fn new(postgres: Option<(ListenOptions, Option<&str>)>) -> Notifier {
        let (local, _) = broadcast::channel(LOCAL_BACKLOG);
        Notifier {
            local,
            recurring: watch::Sender::new(0),
            postgres: postgres.map(|(options, schema)| (options, channel(schema))),
        }
    }

    /// Tells this process's schedulers that a task is due, once the change
    /// has committed (those of other processes heard of it from the
    /// statement, `sql::announce::announcing`).
    pub(crate) fn announce(&self, task: Announced) {
        let _ = self.local.send(task);
    }

    /// The announce protocol's last step, once the change that made
    /// `tasks` due has committed: counts those it created (as
    /// `ttw_tasks_scheduled_total`, once per run of one queue) and tells
    /// this process's schedulers of each. A change whose tasks are not
    /// announced leaves them waiting for the next window load or poll.
    pub(crate) fn committed(&self, tasks: impl IntoIterator<Item = Announced>, made: Made) {
        let mut run: Option<(Arc<str>, u64)> = None;
        for task in tasks {
            if made == Made::Created {
                match &mut run {
                    Some((queue, n)) if **queue == *task.queue => *n += 1,
                    _ => {
                        if let Some((queue, n)) = run.replace((task.queue.clone(), 1)) {
                            crate::telemetry::scheduled(&queue, n);
                        }
                    }
                }
            }
            self.announce(task);
        }
        if let Some((queue, n)) = run {
            crate::telemetry::scheduled(&queue, n);
        }
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

    /// Starts hearing announcements. The in-process subscription starts
    /// now, so call this before the first window load: nothing scheduled in
    /// this process from here on is missed. The `LISTEN` connection opens
    /// when the listener is first awaited; `listening` says, from then on,
    /// whether it is up.
    pub(crate) fn listen(&self, listening: Arc<AtomicBool>) -> Listener {
        Listener::new(self.local.subscribe(), self.postgres.clone(), listening)
    }
}

/// What a committed change did to the tasks it announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Made {
    /// Created them: they are counted as scheduled.
    Created,
    /// Made existing tasks due at a new time (moved, replaced, redriven).
    Moved,
}
