//! A running node: its settings, its window, its statements and leases, and
//! the loops that keep them current (heartbeats; window loads, catch-up
//! polls and sweeps; announcements heard). Dispatch is in
//! [`crate::node::dispatch`]; starting and stopping in [`crate::node::scheduler`].

pub(crate) mod completer;
pub(crate) mod config;
pub(crate) mod delivery;
pub(crate) mod dispatch;
pub(crate) mod events;
pub(crate) mod faults;
pub(crate) mod lease;
pub(crate) mod outcome;
pub(crate) mod poll;
pub(crate) mod process;
pub(crate) mod report;
pub(crate) mod scheduler;
pub(crate) mod shards;
pub(crate) mod window;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::{Instant, MissedTickBehavior};

use crate::client::store::Store;
use crate::error::Error;
use crate::model::time::ms;
use crate::node::config::Config;
use crate::node::events::{Events, SchedulerStats};
use crate::node::faults::Faults;
use crate::node::lease::Leases;
use crate::node::outcome::Outcomes;
use crate::node::poll::Poll;
use crate::node::report::{Failing, Reports};
use crate::node::window::Window;
use crate::notify::{Heard, Listener};
use crate::recurring;
use crate::sql::claims::Claims;

/// The most rows one statement of the retention sweep deletes.
const SWEEP_BATCH: u64 = 1_000;

/// How often reclaims run while no lock is expected to run out unseen: a
/// safety net (see [`Node::watch_locks`]).
const RECLAIM_QUIET: Duration = Duration::from_secs(60);

/// The longest time between two retention sweeps.
const SWEEP_LONGEST: Duration = Duration::from_secs(10 * 60);

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
    /// When a heartbeat last reclaimed tasks.
    last_reclaim: Mutex<Option<Instant>>,
    /// Shards were taken and their tasks not yet reclaimed (the reclaim
    /// failed): every heartbeat tries until one succeeds.
    reclaim_owed: AtomicBool,
    /// Until when locks may run out in the shards held (see
    /// [`Node::watch_locks`]): reclaims run every reclaim period until
    /// then, and every [`RECLAIM_QUIET`] after.
    locks_watched: Mutex<Option<Instant>>,
    /// When the retention sweep last ran.
    last_sweep: Mutex<Option<Instant>>,
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
    /// Failing database calls, warned of at most once per interval each.
    reports: Reports,
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
        let outcomes = Arc::new(Outcomes::new(
            claims.clone(),
            window.clone(),
            config.backoff,
            config.max_attempts,
            node_id.clone(),
            config.clock.clone(),
            faults.clone(),
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
        Node {
            semaphore: Arc::new(Semaphore::new(config.max_concurrency)),
            settling: Arc::new(Semaphore::new(config.max_concurrency.saturating_mul(2))),
            room: Notify::new(),
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
            last_reclaim: Mutex::new(None),
            reclaim_owed: AtomicBool::new(false),
            locks_watched: Mutex::new(None),
            last_sweep: Mutex::new(None),
            listening: Arc::new(AtomicBool::new(false)),
            membership: tokio::sync::Mutex::new(()),
            leaving: AtomicBool::new(false),
            faults,
            reports: Reports::default(),
        }
    }

    /// Where what happens to the node's tasks is reported.
    pub(crate) fn events(&self) -> &Events {
        &self.outcomes.events
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
    /// watch for it (see [`Node::watch_locks`]).
    pub(crate) fn report(&self, kind: Failing, err: &Error) {
        if !err.is_lost() && !err.is_closed() {
            crate::telemetry::database_error(kind.label());
            self.reports.failed(&self.node_id, kind, err);
            if matches!(kind, Failing::Claim | Failing::Outcome) {
                self.watch_locks();
            }
        }
    }

    /// Locks may run out in the held shards without an outcome: a claim
    /// or outcome failed, or shards were taken from another owner whose
    /// deliveries may still hold locks. Every such lock ends within a
    /// callback timeout and the lock grace from now, so reclaims run every
    /// reclaim period until a reclaim is sure to have come after that: a
    /// reclaim runs at the first heartbeat a period after the last, so two
    /// are up to a period and a heartbeat apart. Otherwise a lock never
    /// runs out unseen (every delivery records an outcome, or fails to and
    /// lands here), and a reclaim runs only every [`RECLAIM_QUIET`], as a
    /// safety net.
    ///
    /// (The watch once ended one period after the last lock: with reclaims
    /// a period and a heartbeat apart, the last one could come just before
    /// the lock ran out, and a task whose outcome was refused then waited
    /// for the safety net, a minute, to be delivered again.)
    fn watch_locks(&self) {
        let until = Instant::now()
            + self.config.callback_timeout
            + self.config.lock_grace
            + self.config.reclaim_period()
            + self.config.heartbeat;
        let mut watched = self.locks_watched.lock().unwrap_or_else(|e| e.into_inner());
        *watched = Some(watched.map_or(until, |t| t.max(until)));
    }

    /// Joins, takes this node's shards and loads their window: what
    /// `start` does before it returns.
    pub(crate) async fn join(&self) -> Result<(), Error> {
        self.leases.add_lease_rows().await?;
        self.beat().await?;
        self.load_window().await?;
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

    /// One heartbeat: liveness, renewals, rebalancing, then reclaiming
    /// expired locks in the shards held.
    async fn beat(&self) -> Result<(), Error> {
        if self.faults.heartbeat_paused() {
            return Ok(());
        }
        let membership = self.membership.lock().await;
        let shards = &self.window.shards;
        let beat = self
            .leases
            .heartbeat(
                self.leaving.load(Ordering::SeqCst),
                |shard| shards.begin_release(shard as usize),
                |shard| shards.drain(shard as usize),
            )
            .await;
        let beat = match beat {
            Ok(beat) => beat,
            Err(err) => {
                // A release may not have happened: the shards it marked
                // take claims again (and if it did, the database refuses
                // them).
                shards.end_releases(&[]);
                return Err(err);
            }
        };
        let lost = shards.set_owned(&beat.owned);
        // Only now that the shards given back are no longer held may the
        // marks go; shards still draining keep theirs.
        shards.end_releases(&beat.draining);
        drop(membership);
        if lost > 0 {
            tracing::info!(node = %self.node_id, lost, "gave back or lost shard leases");
        }
        self.events().took_over(beat.takeovers);
        if let Ok(wheel) = self.window.wheel().stats().await {
            self.events().gauges(shards.owned_count(), wheel.pending);
        }
        if !beat.acquired.is_empty() {
            tracing::debug!(node = %self.node_id, acquired = beat.acquired.len(), takeovers = beat.takeovers, "took shards");
            self.reload.notify_one();
            self.recurring_wake.notify_one();
            // What their last owner left running can no longer be recorded
            // by it (the epoch moved): reclaim now, and until a reclaim
            // succeeds; then, if an owner was still named (it may be only
            // silent, its tasks locked), as its locks run out. A shard
            // given back was idle, and one never held has no tasks running.
            self.reclaim_owed.store(true, Ordering::SeqCst);
            if beat.takeovers > 0 {
                self.watch_locks();
            }
        }
        for gone in &beat.gone {
            tracing::info!(node = %self.node_id, session = %gone, "a node's process on this machine is gone: its shards are free now");
        }
        self.reclaim_if_due().await
    }

    /// Reclaims at once for shards just taken; every reclaim period while
    /// locks may run out (see [`Node::watch_locks`]); otherwise every
    /// [`RECLAIM_QUIET`]. Between those, a heartbeat writes nothing but its
    /// membership row.
    async fn reclaim_if_due(&self) -> Result<(), Error> {
        let last = *self.last_reclaim.lock().unwrap_or_else(|e| e.into_inner());
        let watched = *self.locks_watched.lock().unwrap_or_else(|e| e.into_inner());
        let period = if watched.is_some_and(|t| Instant::now() < t) {
            self.config.reclaim_period()
        } else {
            self.config.reclaim_period().max(RECLAIM_QUIET)
        };
        if !self.reclaim_owed.load(Ordering::SeqCst) && last.is_some_and(|t| t.elapsed() < period) {
            return Ok(());
        }
        let started = Instant::now();
        let reclaimed = self
            .claims
            .reclaim(
                i64::from(self.config.max_attempts),
                self.config.clock.now_ms(),
            )
            .await?;
        *self.last_reclaim.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
        self.reclaim_owed.store(false, Ordering::SeqCst);
        for task in reclaimed {
            self.events().reclaimed(task.queue, task.dead);
            if let Some(due) = task.due {
                self.window.arm(due).await;
            }
        }
        Ok(())
    }

    /// Loads every scheduled task of the held shards due within the window.
    async fn load_window(&self) -> Result<(), Error> {
        if self.faults.fail_load() {
            return Err(Error::injected("the window load"));
        }
        let horizon = self
            .config
            .clock
            .now_ms()
            .saturating_add(ms(self.config.window));
        self.window.extend(horizon);
        for due in self.claims.due_before(horizon).await? {
            self.window.arm(due).await;
        }
        Ok(())
    }

    /// Heartbeats (lease renewal, rebalancing, reclaims), in a task of their
    /// own: a renewal must never wait behind a window load, a catch-up poll
    /// or a sweep, which take as long as there are rows; a node stalled past
    /// its lease TTL would lose its shards to others while healthy, and the
    /// outcomes of its deliveries in flight would be fenced off and
    /// delivered again.
    pub(crate) async fn heartbeats(self: Arc<Self>) {
        let mut heartbeat = tokio::time::interval(self.config.heartbeat);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        heartbeat.reset();
        loop {
            tokio::select! {
                _ = heartbeat.tick() => {}
                _ = self.window.drained.notified() => {}
            }
            if let Err(err) = self.beat().await {
                self.report(Failing::Heartbeat, &err);
            }
        }
    }

    /// Window refreshes, catch-up polls and retention sweeps. A window load
    /// runs when a heartbeat took shards; the two run side by side, and a
    /// load that raced a change of ownership is followed by another.
    pub(crate) async fn control(self: Arc<Self>) {
        let mut window = tokio::time::interval(self.config.window / 2);
        let mut catch_up = tokio::time::interval(self.config.catch_up);
        for i in [&mut window, &mut catch_up] {
            i.set_missed_tick_behavior(MissedTickBehavior::Delay);
            i.reset();
        }
        let mut poll = Poll::new(ms(self.config.catch_up));
        let ahead = recurring::ahead(self.config.catch_up);
        let mut recurring_changed = self.store.notifier().watch_recurring();
        let mut recurring_at = Instant::now();
        // A window load that failed is tried again at the next catch-up
        // tick, not half a window later: after a takeover the failed load
        // was the only one to bring in the new shards' tasks.
        let mut load_failed = false;
        loop {
            let result = tokio::select! {
                _ = self.reload.notified() => self.reload_window(&mut load_failed).await,
                _ = tokio::time::sleep_until(recurring_at) => self.make_occurrences(&mut recurring_at, ahead).await,
                _ = self.recurring_wake.notified() => self.make_occurrences(&mut recurring_at, ahead).await,
                Ok(()) = recurring_changed.changed() => self.make_occurrences(&mut recurring_at, ahead).await,
                _ = window.tick() => match self.reload_window(&mut load_failed).await {
                    Ok(()) => self.sweep_if_due().await,
                    Err(e) => Err(e),
                },
                _ = catch_up.tick() => {
                    if load_failed {
                        self.reload_window(&mut load_failed).await
                    } else if self.listening.load(Ordering::SeqCst) {
                        // Notifications bring every change; the poll starts
                        // again from the window load that follows a lost
                        // connection, looking back its slack.
                        poll.restart();
                        Ok(())
                    } else {
                        self.poll(&mut poll).await
                    }
                }
            };
            if let Err(err) = result {
                self.report(Failing::Control, &err);
            }
        }
    }

    /// Makes tasks of the occurrences of the recurring schedules in the
    /// shards held that are due within `ahead` ms, and sets `at` to when to
    /// come back: `ahead` before the earliest next occurrence, and at least
    /// every half window (a schedule registered in another process, on
    /// SQLite, is found then); after a failure, at the next catch-up tick.
    async fn make_occurrences(&self, at: &mut Instant, ahead: i64) -> Result<(), Error> {
        let now = Instant::now();
        *at = now + self.config.catch_up;
        let earliest = self
            .store
            .make_occurrences(self.claims.session(), ahead)
            .await?;
        let fallback = now + self.config.window / 2;
        *at = match earliest {
            Some(next) => {
                let wait = next
                    .saturating_sub(ahead)
                    .saturating_sub(self.config.clock.now_ms())
                    .max(0);
                (now + Duration::from_millis(wait as u64)).min(fallback)
            }
            None => fallback,
        };
        Ok(())
    }

    /// Loads the window, noting whether it failed.
    async fn reload_window(&self, failed: &mut bool) -> Result<(), Error> {
        let result = self.load_window().await;
        *failed = result.is_err();
        result
    }

    /// Deletes the done and cancelled tasks older than the retention, at
    /// most once a tenth of the retention (between half a window and
    /// [`SWEEP_LONGEST`] apart): finished tasks may outlive the retention
    /// by that much.
    async fn sweep_if_due(&self) -> Result<(), Error> {
        let period = (self.config.retention / 10)
            .min(SWEEP_LONGEST)
            .max(self.config.window / 2);
        let last = *self.last_sweep.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < period) {
            return Ok(());
        }
        let started = Instant::now();
        let before = self
            .config
            .clock
            .now_ms()
            .saturating_sub(ms(self.config.retention));
        self.claims.sweep(before, SWEEP_BATCH).await?;
        *self.last_sweep.lock().unwrap_or_else(|e| e.into_inner()) = Some(started);
        Ok(())
    }

    /// One catch-up poll: arms what changed since the last.
    async fn poll(&self, poll: &mut Poll) -> Result<(), Error> {
        for due in poll.poll(&self.claims, self.window.horizon()).await? {
            self.window.arm(due).await;
        }
        Ok(())
    }

    /// Arms what the listener hears; loads the window when it missed some.
    pub(crate) async fn listen(self: Arc<Self>, mut listener: Listener) {
        loop {
            match listener.next().await {
                Heard::Due(task) => self.window.arm_announced(&task).await,
                Heard::Missed => {
                    self.reload.notify_one();
                    self.recurring_wake.notify_one();
                }
                Heard::Recurring => self.recurring_wake.notify_one(),
                Heard::Closed => return,
            }
        }
    }
}

#[cfg(test)]
mod tests;
