//! A running node: its settings, its window, its statements and leases,
//! and the state its duties share. The duties that keep it current
//! (heartbeat, rescuer, window loads and catch-up, sweep, recurring
//! schedules, announcements) are services in [`crate::node::duties`];
//! dispatch is in [`crate::node::dispatch`]; starting and stopping in
//! [`crate::node::scheduler`].

pub(crate) mod completer;
pub(crate) mod config;
pub(crate) mod delivery;
pub(crate) mod dispatch;
pub(crate) mod duties;
pub(crate) mod events;
pub(crate) mod faults;
pub(crate) mod lease;
pub(crate) mod outcome;
pub(crate) mod poll;
pub(crate) mod process;
pub(crate) mod ready;
pub(crate) mod report;
pub(crate) mod scheduler;
pub(crate) mod shards;
pub(crate) mod window;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{Notify, Semaphore};

use crate::client::store::Store;
use crate::error::Error;
use crate::node::config::Config;
use crate::node::duties::rescuer::Rescuer;
use crate::node::duties::{heartbeat, loader};
use crate::node::events::{Events, SchedulerStats};
use crate::node::faults::Faults;
use crate::node::lease::Leases;
use crate::node::outcome::Outcomes;
use crate::node::report::Failing;
use crate::node::window::Window;
use crate::sql::claims::Claims;

/// The state one scheduler's tasks share.
pub(crate) struct Node {
    pub(crate) node_id: String,
    pub(crate) config: Config,
    pub(crate) window: Arc<Window>,
    pub(crate) claims: Claims,
    pub(crate) leases: Leases,
    pub(crate) outcomes: Arc<Outcomes>,
    /// One permit per handler running (or streamed delivery unsettled),
    /// up to `max_concurrency`.
    pub(crate) semaphore: Arc<Semaphore>,
    /// One permit per claimed task whose outcome is not yet written, up to
    /// twice `max_concurrency`: a handler's place is given back when it
    /// returns, and this bounds the successes waiting for their write
    /// behind it, so claims cannot run ahead of outcomes.
    pub(crate) settling: Arc<Semaphore>,
    /// A place was given back before its task's outcome was written:
    /// dispatch looks for room again.
    pub(crate) room: Notify,
    /// Another node left a place to a key waiting here: the queues waiting
    /// for a place look again (see
    /// [`Ready::place_left_here`](crate::node::ready::Ready::place_left_here)).
    pub(crate) room_elsewhere: std::sync::atomic::AtomicBool,
    /// One permit per delivery in flight in each queue with a limit of its
    /// own, by queue index (see [`Lanes`](crate::model::lanes::Lanes)).
    pub(crate) queue_limits: Vec<Option<Arc<Semaphore>>>,
    /// A graceful shutdown began: dispatch takes no more fired tasks.
    pub(crate) stopping: Notify,
    /// Load the window now (shards were taken, or announcements missed).
    reload: Notify,
    /// Make the occurrences of recurring schedules tasks now (shards were
    /// taken, or a schedule changed in another process).
    recurring_wake: Notify,
    /// The store: recurring schedules are made tasks through it.
    store: Store,
    /// Claims again what was left running (see [`Rescuer`]).
    rescuer: Arc<Rescuer>,
    /// The `LISTEN` connection is up (PostgreSQL): announcements bring
    /// every change, and the catch-up poll rests.
    pub(crate) listening: Arc<AtomicBool>,
    /// Held by a heartbeat while it writes membership and leases, and by a
    /// shutdown while it starts leaving: a heartbeat that began before
    /// `leaving` was set must not write the membership row (counted in the
    /// shares again) after the shutdown marked it leaving.
    membership: tokio::sync::Mutex<()>,
    /// Shutting down: heartbeats give shards back as they come idle.
    leaving: AtomicBool,
    pub(crate) faults: Arc<Faults>,
    /// The node's event sink: every count and metric of what happens to
    /// its tasks and its database calls goes through it.
    events: Arc<Events>,
}

impl Node {
    /// Node `node_id`, its statements and leases bound to its session,
    /// before its first heartbeat.
    pub(crate) fn new(
        config: Config,
        node_id: String,
        window: Arc<Window>,
        claims: Claims,
        leases: Leases,
        store: Store,
    ) -> Node {
        let faults = Arc::new(Faults::default());
        let events = Arc::new(Events::new(&node_id, window.lanes.queues()));
        let outcomes = Arc::new(Outcomes::new(
            claims.clone(),
            window.clone(),
            &config,
            node_id.clone(),
            faults.clone(),
            events.clone(),
        ));
        let queue_limits = window
            .lanes
            .queues()
            .iter()
            .map(|queue| {
                config
                    .queue_concurrency
                    .get(&**queue)
                    .map(|&n| Arc::new(Semaphore::new(n)))
            })
            .collect();
        let rescuer = Arc::new(Rescuer::new(&config));
        Node {
            semaphore: Arc::new(Semaphore::new(config.max_concurrency)),
            settling: Arc::new(Semaphore::new(config.max_concurrency.saturating_mul(2))),
            room: Notify::new(),
            room_elsewhere: std::sync::atomic::AtomicBool::new(false),
            queue_limits,
            node_id,
            config,
            window,
            claims,
            leases,
            outcomes,
            stopping: Notify::new(),
            reload: Notify::new(),
            recurring_wake: Notify::new(),
            store,
            rescuer,
            listening: Arc::new(AtomicBool::new(false)),
            membership: tokio::sync::Mutex::new(()),
            leaving: AtomicBool::new(false),
            faults,
            events,
        }
    }

    /// Where what happens to the node's tasks is reported.
    pub(crate) fn events(&self) -> &Events {
        &self.events
    }

    pub(crate) fn stats(&self) -> SchedulerStats {
        self.events().snapshot(&self.window)
    }

    /// Warns of a failed database call, at most once per interval for each
    /// kind. An outcome refused by the fence (lost) or a node stopped
    /// (closed) is not a failure of the database and is not reported.
    ///
    /// A failed claim or outcome may still have committed (the reply was
    /// lost) or left a task claimed: its lock will run out, so reclaims
    /// watch for it (see [`Rescuer::watch_locks`]).
    pub(crate) fn report(&self, kind: Failing, err: &Error) {
        if !err.is_lost() && !err.is_closed() {
            self.events.database_failed(kind, err);
            if matches!(kind, Failing::Claim | Failing::Outcome) {
                self.rescuer.watch_locks();
            }
        }
    }

    /// Joins, takes this node's shards and loads their window: what
    /// `start` does before it returns.
    pub(crate) async fn join(&self) -> Result<(), Error> {
        self.leases.add_lease_rows().await?;
        heartbeat::beat(self).await?;
        self.rescuer.reclaim_if_due(self).await?;
        loader::load(self).await?;
        // The first heartbeat asked for a window load, which just happened.
        let _ = futures::FutureExt::now_or_never(self.reload.notified());
        Ok(())
    }

    /// Begins a graceful shutdown: marks the node leaving, so the other
    /// nodes count one node fewer and take its shards as it gives them back
    /// (idle ones at the next heartbeat, now; busy ones as their deliveries
    /// end), and stops dispatch.
    pub(crate) async fn leave(&self) {
        {
            // A heartbeat under way has read `leaving` already: let it
            // finish first, or its membership write could count the node in
            // again.
            let _membership = self.membership.lock().await;
            self.leaving.store(true, Ordering::SeqCst);
            if let Err(err) = self.leases.leave().await {
                tracing::warn!(node = %self.node_id, %err, "could not leave before the deliveries in flight ended");
            }
        }
        self.window.drained.notify_one();
        self.stopping.notify_one();
    }
}

#[cfg(test)]
mod tests;
