//! Configuring and starting a wheel.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::driver::Driver;
use crate::handle::TimingWheel;
use crate::stream::{Expirations, Shared};

/// The default tick: 1 ms, the resolution of `tokio::time`.
pub const DEFAULT_TICK: Duration = Duration::from_millis(1);

/// The default capacity of the command channel.
pub const DEFAULT_COMMAND_CAPACITY: usize = 1024;

/// Configures a [`TimingWheel`] before its driver starts.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio_timing_wheel::TimingWheel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (wheel, expired) = TimingWheel::builder()
///     .tick(Duration::from_millis(10))
///     .command_capacity(4096)
///     .build::<u64, String>();
/// assert_eq!(wheel.tick(), Duration::from_millis(10));
/// # drop((wheel, expired));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    tick: Duration,
    command_capacity: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            tick: DEFAULT_TICK,
            command_capacity: DEFAULT_COMMAND_CAPACITY,
        }
    }
}

impl Builder {
    /// A builder with the defaults: 1 ms tick, 1024 queued commands.
    pub fn new() -> Self {
        Self::default()
    }

    /// The wheel's resolution (default 1 ms). A timer fires no earlier than
    /// its deadline and at most one tick after it, plus scheduling delay.
    ///
    /// Values below 1 ms are raised to 1 ms: `tokio::time` cannot sleep
    /// more finely, so a finer tick would only cost wake-ups.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick.max(DEFAULT_TICK);
        self
    }

    /// How many commands may wait in the channel (default 1024) before
    /// senders wait and `try_set_timer` reports [`Error::is_full`].
    /// Zero is raised to 1.
    ///
    /// [`Error::is_full`]: crate::Error::is_full
    pub fn command_capacity(mut self, capacity: usize) -> Self {
        self.command_capacity = capacity.max(1);
        self
    }

    /// Spawns the driver on the current Tokio runtime and returns the
    /// handle and the expiration stream.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime, like `tokio::spawn`. The
    /// runtime needs its time driver enabled (`enable_time` or
    /// `enable_all`).
    pub fn build<K, V>(self) -> (TimingWheel<K, V>, Expirations<K, V>)
    where
        K: Eq + Hash + Clone + Send + 'static,
        V: Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().unwrap_or_else(|_| {
            panic!("TimingWheel must be built inside a Tokio runtime (its driver is a Tokio task)")
        });
        let clock = Clock::new(Instant::now(), self.tick);
        let shared = Arc::new(Shared::new());
        let (tx, rx) = mpsc::channel(self.command_capacity);
        let driver = Driver::new(rx, Arc::clone(&shared), clock);
        runtime.spawn(driver.run());
        (
            TimingWheel::new_handle(tx, Arc::clone(&shared), clock),
            Expirations::new(shared),
        )
    }
}
