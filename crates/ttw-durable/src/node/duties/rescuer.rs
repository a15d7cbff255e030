//! The rescuer: claims again the tasks left running whose lock ran out
//! (their node stopped, or an outcome could not be written), and those of
//! shards taken from a node that died (their epoch is older than the
//! lease's). It runs after a heartbeat, at once for shards just taken,
//! every reclaim period while locks may run out unseen
//! ([`Rescuer::watch_locks`]), and otherwise every [`QUIET`] as a safety
//! net. Between those, a heartbeat writes nothing but its membership row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::Error;
use crate::node::config::Config;
use crate::node::report::Failing;
use crate::node::Node;

/// How often reclaims run while no lock is expected to run out unseen: a
/// safety net (see [`Rescuer::watch_locks`]).
pub(crate) const QUIET: Duration = Duration::from_secs(60);

/// The rescuer's settings and state.
#[derive(Debug)]
pub(crate) struct Rescuer {
    /// How often it runs while locks may run out unseen: the lock grace,
    /// or the heartbeat if longer.
    period: Duration,
    /// How long from a failed claim or outcome until every lock it may
    /// have left has run out and a reclaim has come after: the callback
    /// timeout, the lock grace, a period and a heartbeat.
    lock_span: Duration,
    /// The attempt limit of tasks scheduled without one.
    max_attempts: i64,
    /// When it last ran.
    last: Mutex<Option<Instant>>,
    /// Shards were taken and their tasks not yet reclaimed (the reclaim
    /// failed): it runs after every heartbeat until one succeeds.
    owed: AtomicBool,
    /// Until when locks may run out in the shards held: it runs every
    /// period until then, and every [`QUIET`] after.
    watched: Mutex<Option<Instant>>,
    /// A heartbeat happened.
    beat: Notify,
}

impl Rescuer {
    pub(crate) fn new(config: &Config) -> Rescuer {
        let period = config.reclaim_period();
        Rescuer {
            period,
            lock_span: config.callback_timeout + config.lock_grace + period + config.heartbeat,
            max_attempts: i64::from(config.max_attempts),
            last: Mutex::new(None),
            owed: AtomicBool::new(false),
            watched: Mutex::new(None),
            beat: Notify::new(),
        }
    }

    /// Runs after each heartbeat, if due.
    pub(crate) async fn run(self: Arc<Self>, node: Arc<Node>) {
        loop {
            self.beat.notified().await;
            if let Err(err) = self.reclaim_if_due(&node).await {
                node.report(Failing::Heartbeat, &err);
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
            self.watch_locks();
        }
    }

    /// Locks may run out in the held shards without an outcome: a claim
    /// or outcome failed, or shards were taken from another owner whose
    /// deliveries may still hold locks. Every such lock ends within a
    /// callback timeout and the lock grace from now, so reclaims run every
    /// period until a reclaim is sure to have come after that: a reclaim
    /// runs at the first heartbeat a period after the last, so two are up
    /// to a period and a heartbeat apart. Otherwise a lock never runs out
    /// unseen (every delivery records an outcome, or fails to and lands
    /// here), and a reclaim runs only every [`QUIET`], as a safety net.
    ///
    /// (The watch once ended one period after the last lock: with reclaims
    /// a period and a heartbeat apart, the last one could come just before
    /// the lock ran out, and a task whose outcome was refused then waited
    /// for the safety net, a minute, to be delivered again.)
    pub(crate) fn watch_locks(&self) {
        let until = Instant::now() + self.lock_span;
        let mut watched = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        *watched = Some(watched.map_or(until, |t| t.max(until)));
    }

    /// Reclaims if it is due (see the module's notes), arming what comes
    /// back in the window.
    pub(crate) async fn reclaim_if_due(&self, node: &Node) -> Result<(), Error> {
        let last = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        let watched = *self.watched.lock().unwrap_or_else(|e| e.into_inner());
        let period = if watched.is_some_and(|t| Instant::now() < t) {
            self.period
        } else {
            self.period.max(QUIET)
        };
        if !self.owed.load(Ordering::SeqCst) && last.is_some_and(|t| t.elapsed() < period) {
            return Ok(());
        }
        let started = Instant::now();
        let reclaimed = node
            .claims
            .reclaim(self.max_attempts, node.config.clock.now_ms())
            .await?;
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
        self.owed.store(false, Ordering::SeqCst);
        for task in reclaimed {
            node.events().reclaimed(task.queue, task.dead);
            if let Some(due) = task.due {
                node.window.arm(due).await;
            }
        }
        Ok(())
    }
}
