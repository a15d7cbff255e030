//! A node's background duties, each a service in a file of its own with
//! its settings (taken from the scheduler's [`Config`] when it starts) and
//! its loop, run as a task of its own:
//!
//! - [`heartbeat`]: membership, lease renewal and rebalancing;
//! - [`rescuer`]: tasks whose lock ran out, or whose shard was taken from
//!   their node, claimed again;
//! - [`loader`]: the window loaded, and caught up with what other
//!   processes scheduled (the catch-up poll);
//! - [`sweeper`]: finished tasks deleted after the retention;
//! - [`recurring`]: recurring schedules' occurrences made tasks;
//! - [`announcements`]: what the listener hears, armed.
//!
//! Each duty is handed what it uses (statements, window, clock, wake-ups,
//! a [`Reporter`](crate::node::events::Reporter) for its failures), never
//! the node, and has its tests beside it.
//! Dispatch is not a duty: it is the node's reason to be
//! ([`crate::node::dispatch`]).

pub(crate) mod announcements;
#[cfg(test)]
pub(crate) mod fixture;
pub(crate) mod heartbeat;
pub(crate) mod loader;
pub(crate) mod recurring;
pub(crate) mod rescuer;
pub(crate) mod sweeper;

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::error::Error;
use crate::node::config::Config;
use crate::node::duties::heartbeat::Beat;
use crate::node::duties::loader::Load;
use crate::node::duties::recurring::Occurring;
use crate::node::duties::rescuer::{Reclaim, Rescuer};
use crate::node::Node;
use crate::notify::Listener;

/// The tasks of a node's duties, running.
pub(crate) struct Duties {
    tasks: Vec<JoinHandle<()>>,
}

impl Duties {
    /// Joins: takes this node's shards, reclaims what their last owner
    /// left running and loads their window (what `start` does before it
    /// returns); then starts every duty of `node`, each with its settings
    /// from `config` and the handles it uses.
    pub(crate) async fn join(
        node: &Arc<Node>,
        config: &Config,
        mut listener: Listener,
    ) -> Result<Duties, Error> {
        let rescuer = Arc::new(Rescuer::new(config, node.locks.clone()));
        let beat = Beat {
            node_id: node.node_id.clone(),
            leases: node.leases.clone(),
            window: node.window.clone(),
            membership: node.membership.clone(),
            rescuer: rescuer.clone(),
            wakes: node.wakes.clone(),
            events: node.events.clone(),
            faults: node.faults.clone(),
        };
        let load = Load {
            claims: node.claims.clone(),
            window: node.window.clone(),
            clock: config.clock.clone(),
            ahead: config.window,
            faults: node.faults.clone(),
        };
        let reclaim = Reclaim {
            claims: node.claims.clone(),
            clock: config.clock.clone(),
            window: node.window.clone(),
            events: node.events.clone(),
        };
        let occurring = Occurring {
            store: node.store.clone(),
            claims: node.claims.clone(),
            clock: config.clock.clone(),
        };
        node.leases.add_lease_rows().await?;
        beat.beat().await?;
        rescuer.reclaim_if_due(&reclaim).await?;
        listener.open_before_load().await;
        load.load().await?;
        // The first heartbeat asked for a window load, which just happened.
        let _ = futures::FutureExt::now_or_never(node.wakes.reload.notified());

        let report = || node.reporter();
        let tasks = vec![
            tokio::spawn(heartbeat::Heartbeat::new(config).run(beat, report())),
            tokio::spawn(rescuer.run(reclaim, report())),
            tokio::spawn(loader::Loader::new(config).run(
                load,
                node.listening.clone(),
                node.wakes.clone(),
                report(),
            )),
            tokio::spawn(sweeper::Sweeper::new(config).run(
                node.claims.clone(),
                config.clock.clone(),
                report(),
            )),
            tokio::spawn(recurring::Occurrences::new(config).run(
                occurring,
                node.wakes.clone(),
                report(),
            )),
            tokio::spawn(announcements::run(
                node.window.clone(),
                node.wakes.clone(),
                node.store.clone(),
                listener,
            )),
        ];
        Ok(Duties { tasks })
    }

    /// Stops them all, and waits until they have stopped.
    pub(crate) async fn stop(&mut self) {
        for task in &mut self.tasks {
            task.abort();
            let _ = task.await;
        }
    }

    /// Stops them all at once.
    pub(crate) fn abort(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
