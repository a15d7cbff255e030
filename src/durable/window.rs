//! A node's in-memory window: the shards it believes it holds (with their
//! deliveries in flight), and the [`TimingWheel`] holding their scheduled
//! tasks due before the horizon. [`Window::arm`] is the one way a task
//! enters the wheel; every reason a task waits other than its own `run_at`
//! is a [`Retry`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::claims::Due;
use super::db::now_ms;
use super::shards::ShardTable;
use crate::TimingWheel;

/// Why a fired task goes back into the wheel before it is claimed, and for
/// how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Its shard is being given back right now: the release either
    /// succeeds (the task is then dropped quietly: the new owner loaded it)
    /// or fails (it is claimed here).
    ShardReleasing,
    /// The claim, or the look at why a task was not claimed, failed: the
    /// database is unreachable or refusing writes.
    DatabaseFailed,
    /// The database still saw it as not due: this node's clock ran ahead of
    /// the wheel's by a moment.
    NotDueYet,
}

impl Retry {
    fn delay(self) -> Duration {
        match self {
            Retry::ShardReleasing => Duration::from_millis(50),
            Retry::DatabaseFailed => Duration::from_millis(500),
            Retry::NotDueYet => Duration::from_millis(10),
        }
    }
}

/// The wheel of one node and what decides what belongs in it.
pub(crate) struct Window {
    wheel: TimingWheel<i64, i64>,
    /// Tasks due before this time (ms) belong in the wheel.
    horizon: AtomicI64,
    /// Which shards this node believes it holds, their deliveries in
    /// flight, and which are being given back.
    pub(crate) shards: ShardTable,
    shard_count: i64,
    /// A shard being given back has nothing in flight any more: the
    /// heartbeat gives it back now rather than leave its tasks waiting.
    pub(crate) drained: Notify,
}

impl Window {
    /// An empty window over `wheel` for a store of `shards` shards.
    pub(crate) fn new(wheel: TimingWheel<i64, i64>, shards: u32) -> Window {
        Window {
            wheel,
            horizon: AtomicI64::new(0),
            shards: ShardTable::new(shards),
            shard_count: i64::from(shards),
            drained: Notify::new(),
        }
    }

    /// The wheel, for its stats and to stop it.
    pub(crate) fn wheel(&self) -> &TimingWheel<i64, i64> {
        &self.wheel
    }

    /// The shard of task `id`.
    pub(crate) fn shard_of(&self, id: i64) -> usize {
        id.rem_euclid(self.shard_count) as usize
    }

    /// The horizon: tasks due before it belong in the wheel.
    pub(crate) fn horizon(&self) -> i64 {
        self.horizon.load(Ordering::Acquire)
    }

    /// Moves the horizon out to `horizon`, never back.
    pub(crate) fn extend(&self, horizon: i64) {
        self.horizon.fetch_max(horizon, Ordering::AcqRel);
    }

    /// Puts a task into the wheel at its `run_at`, if it is due inside the
    /// window and in a shard this node holds.
    pub(crate) async fn arm(&self, due: Due) {
        if due.run_at >= self.horizon() || !self.shards.owns(self.shard_of(due.id)) {
            return;
        }
        let delay = Duration::from_millis(u64::try_from(due.run_at - now_ms()).unwrap_or(0));
        self.put(due, delay).await;
    }

    /// Puts a fired task back into the wheel for `why`'s delay.
    pub(crate) async fn retry(&self, due: Due, why: Retry) {
        self.put(due, why.delay()).await;
    }

    async fn put(&self, due: Due, delay: Duration) {
        // Fails only once the scheduler is stopping.
        let _ = self.wheel.set_timer(due.id, due.run_at, delay).await;
    }

    /// Ends the registration of one delivery in `shard` (its claim took
    /// nothing, or its outcome is recorded), waking the heartbeat if that
    /// left a shard being given back idle.
    pub(crate) fn exit(&self, shard: usize) {
        if self.shards.exit(shard) {
            self.drained.notify_one();
        }
    }
}
