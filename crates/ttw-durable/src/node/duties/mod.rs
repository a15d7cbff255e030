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
//! A duty's failures are reported through the node ([`Node::report`]).
//! Dispatch is not a duty: it is the node's reason to be
//! ([`crate::node::dispatch`]).

pub(crate) mod announcements;
pub(crate) mod heartbeat;
pub(crate) mod loader;
pub(crate) mod recurring;
pub(crate) mod rescuer;
pub(crate) mod sweeper;

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::node::config::Config;
use crate::node::Node;
use crate::notify::Listener;

/// The tasks of a node's duties, running.
pub(crate) struct Duties {
    tasks: Vec<JoinHandle<()>>,
}

impl Duties {
    /// Starts every duty of `node`, each with its settings from `config`.
    pub(crate) fn start(node: &Arc<Node>, config: &Config, listener: Listener) -> Duties {
        let tasks = vec![
            tokio::spawn(heartbeat::Heartbeat::new(config).run(node.clone())),
            tokio::spawn(node.rescuer.clone().run(node.clone())),
            tokio::spawn(loader::Loader::new(config).run(node.clone())),
            tokio::spawn(sweeper::Sweeper::new(config).run(node.clone())),
            tokio::spawn(recurring::Occurrences::new(config).run(node.clone())),
            tokio::spawn(announcements::run(node.clone(), listener)),
        ];
        Duties { tasks }
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
