//! A node's in-memory window: the shards it believes it holds (with their
//! deliveries in flight), and the [`TimingWheel`] holding their scheduled
//! tasks due before the horizon. [`Window::arm`] is the one way a task
//! enters the wheel; every reason a task waits other than its own `run_at`
//! is a [`Retry`].

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::model::clock::Clock;
use crate::model::due::Due;
use crate::model::lanes::Lanes;
use crate::node::shards::ShardTable;
use crate::notify::Announced;
use tokio_timing_wheel::TimingWheel;

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
    wheel: TimingWheel<i64, Due>,
    /// Tasks due before this time (ms) belong in the wheel.
    horizon: AtomicI64,
    /// Which lanes (queue and shard) this node believes it holds, their
    /// deliveries in flight, and which are being given back.
    pub(crate) shards: ShardTable,
    pub(crate) lanes: Arc<Lanes>,
    /// A shard being given back has nothing in flight any more: the
    /// heartbeat gives it back now rather than leave its tasks waiting.
    pub(crate) drained: Notify,
    /// The node's clock, which arms the wheel.
    clock: Clock,
}

impl Window {
    /// An empty window over `wheel` for the lanes of `lanes`.
    pub(crate) fn new(wheel: TimingWheel<i64, Due>, lanes: Arc<Lanes>, clock: Clock) -> Window {
        Window {
            clock,
            wheel,
            horizon: AtomicI64::new(0),
            shards: ShardTable::new(lanes.count() as u32),
            lanes,
            drained: Notify::new(),
        }
    }

    /// The wheel, for its stats and to stop it.
    pub(crate) fn wheel(&self) -> &TimingWheel<i64, Due> {
        &self.wheel
    }

    /// The horizon: tasks due before it belong in the wheel.
    pub(crate) fn horizon(&self) -> i64 {
        self.horizon.load(Ordering::Acquire)
    }

    /// Moves the horizon out to `horizon`, never back.
    pub(crate) fn extend(&self, horizon: i64) {
        self.horizon.fetch_max(horizon, Ordering::AcqRel);
    }

    /// Puts an announced task into the wheel, as [`arm`](Self::arm) does,
    /// if this node serves its queue.
    pub(crate) async fn arm_announced(&self, task: &Announced) {
        if let Some(lane) = self.lanes.lane(&task.queue, task.id) {
            self.arm(Due {
                id: task.id,
                run_at: task.run_at,
                lane,
                priority: task.priority,
                key: task.key,
            })
            .await;
        }
    }

    /// Puts a task into the wheel at its `run_at`, if it is due inside the
    /// window and in a lane this node holds.
    pub(crate) async fn arm(&self, due: Due) {
        if due.run_at >= self.horizon() || !self.shards.owns(due.lane as usize) {
            return;
        }
        self.put(due, self.clock.until_ms(due.run_at)).await;
    }

    /// Puts a fired task back into the wheel for `why`'s delay.
    pub(crate) async fn retry(&self, due: Due, why: Retry) {
        self.put(due, why.delay()).await;
    }

    async fn put(&self, due: Due, delay: Duration) {
        // Fails only once the scheduler is stopping.
        let _ = self.wheel.set_timer(due.id, due, delay).await;
    }

    /// Ends the registration of one delivery in `lane` (its claim took
    /// nothing, or its outcome is recorded), waking the heartbeat if that
    /// left a lane being given back idle.
    pub(crate) fn exit(&self, lane: u32) {
        if self.shards.exit(lane as usize) {
            self.drained.notify_one();
        }
    }
}
