//! The window loader: loads every scheduled task of the held shards due
//! within the window into the wheel, every half window and at once when a
//! heartbeat took shards or announcements were missed; and in between,
//! the catch-up poll for what other processes scheduled or moved into the
//! window (on SQLite the only way such tasks arrive; on PostgreSQL it
//! rests while the `LISTEN` connection is up).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use crate::error::Error;
use crate::model::clock::Clock;
use crate::model::time::ms;
use crate::node::config::Config;
use crate::node::events::Reporter;
use crate::node::faults::Faults;
use crate::node::poll::Poll;
use crate::node::report::Failing;
use crate::node::wakes::Wakes;
use crate::node::window::Window;
use crate::sql::claims::Claims;

/// What a window load and a catch-up poll use: the node's statements, its
/// window, its clock, how far ahead it loads, and its injected faults.
#[derive(Clone)]
pub(crate) struct Load {
    pub(crate) claims: Claims,
    pub(crate) window: Arc<Window>,
    pub(crate) clock: Clock,
    /// How far ahead tasks are loaded.
    pub(crate) ahead: Duration,
    pub(crate) faults: Arc<Faults>,
}

impl Load {
    /// Loads every scheduled task of the held shards due within the window.
    pub(crate) async fn load(&self) -> Result<(), Error> {
        if self.faults.fail_load() {
            return Err(Error::injected("the window load"));
        }
        let horizon = self.clock.now_ms().saturating_add(ms(self.ahead));
        self.window.extend(horizon);
        for due in self.claims.due_before(horizon).await? {
            self.window.arm(due).await;
        }
        Ok(())
    }

    /// Loads the window, noting whether it failed.
    async fn reload(&self, failed: &mut bool) -> Result<(), Error> {
        let result = self.load().await;
        *failed = result.is_err();
        result
    }

    /// One catch-up poll: arms what changed since the last.
    async fn catch_up_once(&self, poll: &mut Poll) -> Result<(), Error> {
        for due in poll.poll(&self.claims, self.window.horizon()).await? {
            self.window.arm(due).await;
        }
        Ok(())
    }
}

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
    pub(crate) async fn run(
        self,
        load: Load,
        listening: Arc<AtomicBool>,
        wakes: Arc<Wakes>,
        reporter: Reporter,
    ) {
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
                _ = wakes.reload.notified() => load.reload(&mut load_failed).await,
                _ = window.tick() => load.reload(&mut load_failed).await,
                _ = catch_up.tick() => {
                    if load_failed {
                        load.reload(&mut load_failed).await
                    } else if listening.load(Ordering::SeqCst) {
                        // Notifications bring every change; the poll starts
                        // again from the window load that follows a lost
                        // connection, looking back its slack.
                        poll.restart();
                        Ok(())
                    } else {
                        load.catch_up_once(&mut poll).await
                    }
                }
            };
            if let Err(err) = result {
                reporter.report(Failing::Control, &err);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::node::duties::fixture::Parts;

    /// A load arms the tasks of the held shards due within the window, and
    /// not one due later; a load that fails (injected) says so.
    #[tokio::test]
    async fn a_load_arms_what_falls_due_within_the_window() {
        let parts = Parts::new().await;
        parts.take_shards().await;
        let within = parts.config.window / 2;
        parts.store.schedule("within").delay(within).await.unwrap();
        parts
            .store
            .schedule("later")
            .delay(parts.config.window * 3)
            .await
            .unwrap();
        let load = parts.load();
        load.load().await.unwrap();
        assert_eq!(
            parts.armed().await,
            1,
            "only the task due within the window"
        );
        assert!(load.window.horizon() >= parts.config.clock.now_ms() + ms(within));

        parts.faults.fail_loads(1);
        assert!(
            load.load().await.is_err(),
            "the injected failure is reported"
        );
    }

    /// Without a `LISTEN` connection (SQLite), the catch-up poll arms what
    /// another process scheduled into the window after the load.
    #[tokio::test]
    async fn the_catch_up_poll_arms_what_came_after_the_load() {
        let parts = Parts::new().await;
        parts.take_shards().await;
        parts.load().load().await.unwrap();
        let loader = Loader {
            window: Duration::from_secs(3600),
            catch_up: Duration::from_millis(20),
        };
        let task = tokio::spawn(loader.run(
            parts.load(),
            Arc::new(AtomicBool::new(false)),
            parts.wakes.clone(),
            parts.reporter(),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Written straight to the table, as another process would: no
        // announcement in this one.
        let now = parts.config.clock.now_ms();
        crate::sql::testing::insert_unannounced(parts.store.db(), now + 5_000, now)
            .await
            .unwrap();
        for _ in 0..400 {
            if parts.armed().await == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        task.abort();
        assert_eq!(parts.armed().await, 1, "the poll found it");
    }
}
