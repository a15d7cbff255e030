//! The window loader: loads every scheduled task of the held shards due
//! within the window into the wheel, every half window and at once when a
//! heartbeat took shards or announcements were missed; and in between,
//! the catch-up poll for what other processes scheduled or moved into the
//! window (on SQLite the only way such tasks arrive; on PostgreSQL it
//! rests while the `LISTEN` connection is up).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::error::Error;
use crate::model::time::ms;
use crate::node::config::Config;
use crate::node::poll::Poll;
use crate::node::report::Failing;
use crate::node::Node;

/// The loader's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Loader {
    /// How far ahead tasks are loaded
    /// ([`SchedulerBuilder::window`](crate::SchedulerBuilder::window)); a
    /// load runs every half of it.
    window: Duration,
    /// How often the catch-up poll runs
    /// ([`SchedulerBuilder::catch_up`](crate::SchedulerBuilder::catch_up)).
    catch_up: Duration,
}

impl Loader {
    pub(crate) fn new(config: &Config) -> Loader {
        Loader {
            window: config.window,
            catch_up: config.catch_up,
        }
    }

    /// Loads and polls. A load runs when a heartbeat took shards; the two
    /// run side by side, and a load that raced a change of ownership is
    /// followed by another.
    pub(crate) async fn run(self, node: Arc<Node>) {
        let mut window = tokio::time::interval(self.window / 2);
        let mut catch_up = tokio::time::interval(self.catch_up);
        for i in [&mut window, &mut catch_up] {
            i.set_missed_tick_behavior(MissedTickBehavior::Delay);
            i.reset();
        }
        let mut poll = Poll::new(ms(self.catch_up));
        // A window load that failed is tried again at the next catch-up
        // tick, not half a window later: after a takeover the failed load
        // was the only one to bring in the new shards' tasks.
        let mut load_failed = false;
        loop {
            let result = tokio::select! {
                _ = node.reload.notified() => reload(&node, &mut load_failed).await,
                _ = window.tick() => reload(&node, &mut load_failed).await,
                _ = catch_up.tick() => {
                    if load_failed {
                        reload(&node, &mut load_failed).await
                    } else if node.listening.load(Ordering::SeqCst) {
                        // Notifications bring every change; the poll starts
                        // again from the window load that follows a lost
                        // connection, looking back its slack.
                        poll.restart();
                        Ok(())
                    } else {
                        catch_up_once(&node, &mut poll).await
                    }
                }
            };
            if let Err(err) = result {
                node.report(Failing::Control, &err);
            }
        }
    }
}

/// Loads every scheduled task of the held shards due within the window.
pub(crate) async fn load(node: &Node) -> Result<(), Error> {
    if node.faults.fail_load() {
        return Err(Error::injected("the window load"));
    }
    let horizon = node
        .config
        .clock
        .now_ms()
        .saturating_add(ms(node.config.window));
    node.window.extend(horizon);
    for due in node.claims.due_before(horizon).await? {
        node.window.arm(due).await;
    }
    Ok(())
}

/// Loads the window, noting whether it failed.
async fn reload(node: &Node, failed: &mut bool) -> Result<(), Error> {
    let result = load(node).await;
    *failed = result.is_err();
    result
}

/// One catch-up poll: arms what changed since the last.
async fn catch_up_once(node: &Node, poll: &mut Poll) -> Result<(), Error> {
    for due in poll.poll(&node.claims, node.window.horizon()).await? {
        node.window.arm(due).await;
    }
    Ok(())
}
