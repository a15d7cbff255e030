//! The rescuer: claims again the tasks left running whose lock ran out
//! (their node stopped, or an outcome could not be written), and those of
//! shards taken from a node that died (their epoch is older than the
//! lease's). It runs after a heartbeat, at once for shards just taken,
//! every reclaim period while locks may run out unseen ([`LockWatch`]),
//! every heartbeat while it serves a pull queue (a worker's lease runs out
//! unseen), and otherwise every [`QUIET`] as a safety net. Between those, a
//! heartbeat writes nothing but its membership row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::Error;
use crate::model::clock::Clock;
use crate::node::config::Config;
use crate::node::events::{Events, Reporter};
use crate::node::report::{Failing, LockWatch};
use crate::node::window::Window;
use crate::sql::claims::Claims;

/// How often reclaims run while no lock is expected to run out unseen: a
/// safety net (see [`LockWatch`]).
pub(crate) const QUIET: Duration = Duration::from_secs(60);

/// The rescuer's settings and state.
#[derive(Debug)]
pub(crate) struct Rescuer {
    /// How often it runs while locks may run out unseen: the lock grace,
    /// or the heartbeat if longer.
    period: Duration,
    /// The attempt limit of tasks scheduled without one.
    max_attempts: i64,
    /// When it last ran.
    last: Mutex<Option<Instant>>,
    /// Shards were taken and their tasks not yet reclaimed (the reclaim
    /// failed): it runs after every heartbeat until one succeeds.
    owed: AtomicBool,
    /// Whether locks may run out in the shards held: it runs every period
    /// while they may, and every [`QUIET`] after.
    locks: Arc<LockWatch>,
    /// The node serves pull queues, whose workers' leases run out unseen:
    /// it runs every heartbeat.
    pulls: bool,
    /// A heartbeat happened.
    beat: Notify,
}

/// What a reclaim uses: the node's statements, its clock, its window
/// (what comes back is armed there) and its events.
#[derive(Clone)]
pub(crate) struct Reclaim {
    pub(crate) claims: Claims,
    pub(crate) clock: Clock,
    pub(crate) window: Arc<Window>,
    pub(crate) events: Arc<Events>,
}

impl Rescuer {
    /// The rescuer of a node whose reporter watches `locks`.
    pub(crate) fn new(config: &Config, locks: Arc<LockWatch>) -> Rescuer {
        Rescuer {
            period: if config.pull_queues.is_empty() {
                config.reclaim_period()
            } else {
                config.heartbeat
            },
            max_attempts: i64::from(config.max_attempts),
            last: Mutex::new(None),
            owed: AtomicBool::new(false),
            locks,
            pulls: !config.pull_queues.is_empty(),
            beat: Notify::new(),
        }
    }

    /// Runs after each heartbeat, if due.
    pub(crate) async fn run(self: Arc<Self>, reclaim: Reclaim, reporter: Reporter) {
        loop {
            self.beat.notified().await;
            if let Err(err) = self.reclaim_if_due(&reclaim).await {
                reporter.report(Failing::Heartbeat, &err);
            }
        }
    }

    /// A heartbeat happened: the rescuer looks whether it is due.
    pub(crate) fn heard_heartbeat(&self) {
        self.beat.notify_one();
    }

    /// A heartbeat took shards: what their last owner left running can no
    /// longer be recorded by it (the epoch moved), so reclaim now, and
    /// until a reclaim succeeds; then, if an owner was still named
    /// (`takeovers`: it may be only silent, its tasks locked), as its locks
    /// run out. A shard given back was idle, and one never held has no
    /// tasks running.
    pub(crate) fn took_shards(&self, takeovers: bool) {
        self.owed.store(true, Ordering::SeqCst);
        if takeovers {
            self.locks.watch();
        }
    }

    /// Reclaims if it is due (see the module's notes), arming what comes
    /// back in the window. Otherwise a lock never runs out unseen (every
    /// delivery records an outcome, or fails to and is watched), and a
    /// reclaim runs only every [`QUIET`], as a safety net.
    pub(crate) async fn reclaim_if_due(&self, with: &Reclaim) -> Result<(), Error> {
        let last = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        let period = if self.pulls || self.locks.watching() {
            self.period
        } else {
            self.period.max(QUIET)
        };
        if !self.owed.load(Ordering::SeqCst) && last.is_some_and(|t| t.elapsed() < period) {
            return Ok(());
        }
        let started = Instant::now();
        let reclaimed = with
            .claims
            .reclaim(self.max_attempts, with.clock.now_ms())
            .await?;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
        self.owed.store(false, Ordering::SeqCst);
        for task in reclaimed {
            with.events.reclaimed(task.queue, task.dead);
            if let Some(due) = task.due {
                with.window.arm(due).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::task::TaskState;
    use crate::node::duties::fixture::Parts;
    use crate::sql::testing::lock_elsewhere;

    /// A task left running by another owner whose lock ran out is claimed
    /// back and armed; a second look right after is not due; shards taken
    /// over from an owner watch the locks.
    #[tokio::test]
    async fn a_lock_run_out_is_reclaimed_and_armed() {
        let mut parts = Parts::new().await;
        parts.take_shards().await;
        let id = parts.store.schedule("left running").await.unwrap();
        let db = parts.store.db();
        lock_elsewhere(db, id.get(), parts.config.clock.now_ms() - 1_000)
            .await
            .unwrap();
        let rescuer = Rescuer::new(&parts.config, parts.locks.clone());
        parts.window.extend(parts.config.clock.now_ms() + 60_000);
        rescuer.reclaim_if_due(&parts.reclaim()).await.unwrap();
        assert_eq!(
            parts.store.get(id).await.unwrap().unwrap().state,
            TaskState::Scheduled
        );
        // Armed again, and due at once: the wheel fires it.
        let fired = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            futures::StreamExt::next(&mut parts.fired),
        )
        .await
        .expect("fired")
        .expect("a timer");
        assert_eq!(*fired.key(), id.get(), "armed again");
        assert_eq!(parts.events.snapshot(&parts.window).reclaimed, 1);

        // Not due again at once: the same lock, set again, stays.
        lock_elsewhere(db, id.get(), 0).await.unwrap();
        rescuer.reclaim_if_due(&parts.reclaim()).await.unwrap();
        assert_eq!(
            parts.store.get(id).await.unwrap().unwrap().state,
            TaskState::Running
        );
        // Shards taken: owed at once, and locks watched.
        assert!(!parts.locks.watching());
        rescuer.took_shards(true);
        assert!(parts.locks.watching());
        rescuer.reclaim_if_due(&parts.reclaim()).await.unwrap();
        assert_eq!(
            parts.store.get(id).await.unwrap().unwrap().state,
            TaskState::Scheduled
        );
    }
}
