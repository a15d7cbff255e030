//! A running node: its settings, its window, its statements and leases,
//! and the state its duties share. The duties that keep it current
//! (heartbeat, rescuer, window loads and catch-up, sweep, recurring
//! schedules, announcements) are services in [`crate::node::duties`];
//! dispatch is in [`crate::node::dispatch`]; starting and stopping in
//! [`crate::node::scheduler`].

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
pub(crate) mod report;
pub(crate) mod scheduler;
pub(crate) mod shards;
#[cfg(feature = "opentelemetry")]
pub(crate) mod trace;
pub(crate) mod waiting_room;
pub(crate) mod wakes;
pub(crate) mod window;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::client::store::Store;
use crate::error::Error;
use crate::node::config::Config;
use crate::node::events::{Events, Reporter, SchedulerStats};
use crate::node::faults::Faults;
use crate::node::lease::{Leases, Membership};
use crate::node::outcome::Outcomes;
use crate::node::report::{Failing, LockWatch};
use crate::node::wakes::Wakes;
use crate::node::window::Window;
use crate::sql::claims::Claims;

/// The state one scheduler's tasks share.
pub(crate) struct Node {
    pub(crate) node_id: String,
    pub(crate) config: Config,
    pub(crate) window: Arc<Window>,
    pub(crate) claims: Claims,
    pub(crate) leases: Arc<Leases>,
    pub(crate) outcomes: Arc<Outcomes>,
    /// The signals its duties and dispatch send one another.
    pub(crate) wakes: Arc<Wakes>,
    /// A graceful shutdown began: dispatch takes no more fired tasks.
    pub(crate) stopping: Notify,
    /// The store: recurring schedules are made tasks through it.
    pub(crate) store: Store,
    /// Whether locks may run out unseen: failed claims and outcomes, and
    /// shards taken over, watch them; the rescuer reads it.
    pub(crate) locks: Arc<LockWatch>,
    /// The `LISTEN` connection is up (PostgreSQL): announcements bring
    /// every change, and the catch-up poll rests.
    pub(crate) listening: Arc<AtomicBool>,
    /// Whether it counts itself in, and the heartbeat's lock.
    pub(crate) membership: Arc<Membership>,
    pub(crate) faults: Arc<Faults>,
    /// The node's event sink: every count and metric of what happens to
    /// its tasks and its database calls goes through it.
    pub(crate) events: Arc<Events>,
    /// How its failed database calls are reported.
    reporter: Reporter,
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
        let locks = Arc::new(LockWatch::new(config.lock_span()));
        Node {
            wakes: Arc::default(),
            node_id,
            config,
            window,
            claims,
            leases: Arc::new(leases),
            outcomes,
            stopping: Notify::new(),
            store,
            listening: Arc::new(AtomicBool::new(false)),
            membership: Arc::default(),
            faults,
            reporter: Reporter::new(events.clone(), locks.clone()),
            locks,
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

    /// Warns of a failed database call (see [`Reporter`]).
    pub(crate) fn report(&self, kind: Failing, err: &Error) {
        self.reporter.report(kind, err);
    }

    /// How its duties report failed database calls.
    pub(crate) fn reporter(&self) -> Reporter {
        self.reporter.clone()
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
            let _membership = self.membership.lock.lock().await;
            self.membership.leaving.store(true, Ordering::SeqCst);
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
