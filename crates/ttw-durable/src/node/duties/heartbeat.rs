//! The heartbeat: one small write that keeps every lease the node holds,
//! then rebalancing toward the fair share (see [`crate::node::lease`]).
//! In a task of its own: a renewal must never wait behind a window load,
//! a catch-up poll or a sweep, which take as long as there are rows; a
//! node stalled past its lease TTL would lose its shards to others while
//! healthy, and the outcomes of its deliveries in flight would be fenced
//! off and delivered again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::error::Error;
use crate::node::config::Config;
use crate::node::duties::rescuer::Rescuer;
use crate::node::events::{Events, Reporter};
use crate::node::faults::Faults;
use crate::node::lease::{Leases, Membership};
use crate::node::report::Failing;
use crate::node::wakes::Wakes;
use crate::node::window::Window;

/// What a heartbeat uses: the node's id, leases, window, membership, its
/// rescuer (told of shards taken and of each beat), its wake-ups, events
/// and injected faults.
#[derive(Clone)]
pub(crate) struct Beat {
    pub(crate) node_id: String,
    pub(crate) leases: Arc<Leases>,
    pub(crate) window: Arc<Window>,
    pub(crate) membership: Arc<Membership>,
    pub(crate) rescuer: Arc<Rescuer>,
    pub(crate) wakes: Arc<Wakes>,
    pub(crate) events: Arc<Events>,
    pub(crate) faults: Arc<Faults>,
}

/// The heartbeat's settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heartbeat {
    /// How often it beats
    /// ([`SchedulerBuilder::heartbeat`](crate::SchedulerBuilder::heartbeat)).
    every: Duration,
}

impl Heartbeat {
    pub(crate) fn new(config: &Config) -> Heartbeat {
        Heartbeat {
            every: config.heartbeat,
        }
    }

    /// Beats every period, and at once when a shard being given back has
    /// drained.
    pub(crate) async fn run(self, beat: Beat, reporter: Reporter) {
        let mut tick = tokio::time::interval(self.every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.reset();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = beat.window.drained.notified() => {}
            }
            if let Err(err) = beat.beat().await {
                reporter.report(Failing::Heartbeat, &err);
            }
        }
    }
}

impl Beat {
    /// One heartbeat: liveness, renewals, rebalancing. Shards taken are loaded
    /// into the window, their recurring schedules looked at, and their tasks
    /// left running by their last owner handed to the rescuer.
    pub(crate) async fn beat(&self) -> Result<(), Error> {
        if self.faults.heartbeat_paused() {
            return Ok(());
        }
        let membership = self.membership.lock.lock().await;
        let shards = &self.window.shards;
        let beat = self
            .leases
            .heartbeat(
                self.membership.leaving.load(Ordering::SeqCst),
                |shard| shards.begin_release(shard as usize),
                |shard| shards.drain(shard as usize),
            )
            .await;
        let beat = match beat {
            Ok(beat) => beat,
            Err(err) => {
                // A release may not have happened: the shards it marked take
                // claims again (and if it did, the database refuses them).
                shards.end_releases(&[]);
                return Err(err);
            }
        };
        let lost = shards.set_owned(&beat.owned);
        // Only now that the shards given back are no longer held may the marks
        // go; shards still draining keep theirs.
        shards.end_releases(&beat.draining);
        drop(membership);
        if lost > 0 {
            tracing::info!(node = %self.node_id, lost, "gave back or lost shard leases");
        }
        self.events.took_over(beat.takeovers);
        if let Ok(wheel) = self.window.wheel().stats().await {
            self.events.gauges(shards.owned_count(), wheel.pending);
        }
        if !beat.acquired.is_empty() {
            tracing::debug!(node = %self.node_id, acquired = beat.acquired.len(), takeovers = beat.takeovers, "took shards");
            self.wakes.reload.notify_one();
            self.wakes.recurring.notify_one();
            self.rescuer.took_shards(beat.takeovers > 0);
        }
        for gone in &beat.gone {
            tracing::info!(node = %self.node_id, session = %gone, "a node's process on this machine is gone: its shards are free now");
        }
        self.rescuer.heard_heartbeat();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::node::duties::fixture::Parts;

    /// A node alone takes every shard at its first beat and wakes the
    /// window load and the occurrences' duty; once leaving, a beat gives
    /// its idle shards back.
    #[tokio::test]
    async fn a_beat_takes_the_shards_and_a_leaving_one_gives_them_back() {
        let parts = Parts::new().await;
        parts.leases.add_lease_rows().await.unwrap();
        let beat = parts.beat();
        beat.beat().await.unwrap();
        assert_eq!(parts.window.shards.owned_count(), 4);
        for woken in [&parts.wakes.reload, &parts.wakes.recurring] {
            tokio::time::timeout(Duration::from_secs(1), woken.notified())
                .await
                .expect("woken by the shards taken");
        }
        beat.membership.leaving.store(true, Ordering::SeqCst);
        parts.leases.leave().await.unwrap();
        beat.beat().await.unwrap();
        assert_eq!(
            parts.window.shards.owned_count(),
            0,
            "idle shards given back"
        );

        // A paused heartbeat (an injected fault) writes nothing.
        parts.faults.pause_heartbeat(true);
        beat.beat().await.unwrap();
    }
}
