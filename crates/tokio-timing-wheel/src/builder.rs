//! Configuring and starting a wheel.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::callback::{self, DEFAULT_CALLBACK_TIMEOUT, DEFAULT_MAX_CONCURRENCY};
use crate::channel;
use crate::clock::Clock;
use crate::delay::sleep::SleepHandle;
use crate::delay::sleeps::{signal, SleepDriver};
use crate::driver::Driver;
use crate::handle::TimingWheel;
use crate::limit::PendingLimit;
use crate::shard::Shards;
use crate::stream::{Expirations, Shared};

/// The default tick: 1 ms, the resolution of `tokio::time`.
pub const DEFAULT_TICK: Duration = Duration::from_millis(1);

/// The coarsest tick: 1 hour. [`Builder::tick`] lowers longer ticks to it,
/// so that a tick always lies within what a `tokio::time::Instant` can
/// reach and every timer fires (at most one tick late).
pub const MAX_TICK: Duration = Duration::from_secs(3600);

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
    callback_timeout: Duration,
    max_concurrency: usize,
    max_pending: Option<usize>,
    shards: usize,
    capacity: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            tick: DEFAULT_TICK,
            command_capacity: DEFAULT_COMMAND_CAPACITY,
            callback_timeout: DEFAULT_CALLBACK_TIMEOUT,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            max_pending: None,
            shards: 1,
            capacity: 0,
        }
    }
}

impl Builder {
    /// A builder with the defaults: 1 ms tick, 1024 queued commands.
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio_timing_wheel::{Builder, DEFAULT_TICK};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = Builder::new().build::<u8, ()>();
    /// assert_eq!(wheel.tick(), DEFAULT_TICK);
    /// # }
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The wheel's resolution (default 1 ms). A timer fires no earlier than
    /// its deadline and at most one tick after it, plus scheduling delay.
    ///
    /// Values below 1 ms are raised to 1 ms: `tokio::time` cannot sleep
    /// more finely, so a finer tick would only cost wake-ups. Values above
    /// [`MAX_TICK`] (1 hour) are lowered to it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::builder()
    ///     .tick(Duration::from_micros(10))
    ///     .build::<u8, ()>();
    /// assert_eq!(wheel.tick(), Duration::from_millis(1));
    /// # }
    /// ```
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick.clamp(DEFAULT_TICK, MAX_TICK);
        self
    }

    /// How many commands may wait in the channel (default 1024) before
    /// senders wait and `try_set_timer` reports [`Error::is_full`].
    /// Zero is raised to 1.
    ///
    /// A command counts until the driver has applied it, not merely taken
    /// it: the driver takes everything queued at once and applies it in
    /// runs of 256, freeing room as it goes. The channel and the driver each
    /// keep a buffer that grows up to this many commands and is then
    /// reused, so nothing is allocated per command once warm.
    ///
    /// [`Error::is_full`]: crate::Error::is_full
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::builder().command_capacity(0).build();
    /// wheel.try_set_timer(1u8, (), Duration::from_secs(1)).unwrap();
    /// assert!(wheel.try_set_timer(2, (), Duration::from_secs(1)).unwrap_err().is_full());
    /// # }
    /// ```
    pub fn command_capacity(mut self, capacity: usize) -> Self {
        self.command_capacity = capacity.max(1);
        self
    }

    /// At most `limit` timers pending at once (default: no limit). Past it,
    /// `set_timer` and its variants fail at once with
    /// [`Error::is_at_capacity`](crate::Error::is_at_capacity), handing the
    /// timer back, instead of growing memory. The count covers timers in the
    /// wheel and `set_timer` calls still in the command channel; setting a
    /// key that is already pending counts too, as the caller cannot know it
    /// would replace. A place is free again once the driver has applied what
    /// freed it (a `cancel_timer`, having no reply, frees it a moment after
    /// it returns). Sleeps are not counted.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, mut expired) = TimingWheel::builder().max_pending(2).build();
    /// wheel.set_timer(1u8, (), Duration::from_secs(1)).await.unwrap();
    /// wheel.set_timer(2, (), Duration::from_secs(1)).await.unwrap();
    /// let err = wheel.set_timer(3, (), Duration::from_secs(1)).await.unwrap_err();
    /// assert!(err.is_at_capacity());
    /// expired.recv().await.unwrap(); // one fires: a place is free again
    /// wheel.set_timer(3, (), Duration::from_secs(1)).await.unwrap();
    /// # }
    /// ```
    pub fn max_pending(mut self, limit: usize) -> Self {
        self.max_pending = Some(limit);
        self
    }

    /// Reserves room for `timers` pending timers when the wheel starts
    /// (default 0: grow as timers come), like `Vec::with_capacity`. A wheel
    /// that grows on its own now and then moves its entries to a larger
    /// table, and that pause delays every expiration due meanwhile (some
    /// milliseconds at a million timers); reserving up front avoids it.
    /// With [`shards`](Self::shards), each shard reserves its share.
    ///
    /// This reserves memory, it is not a limit: for a bound, see
    /// [`max_pending`](Self::max_pending). A reservation the allocator
    /// refuses, or one beyond what a wheel can hold (2^30 timers
    /// a shard), is skipped (logged at `warn` through `tracing`) and the
    /// wheel grows as needed instead; it never panics.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::builder().capacity(100_000).build();
    /// for key in 0..100_000u64 {
    ///     wheel.set_timer(key, (), Duration::from_secs(60)).await.unwrap();
    /// }
    /// assert_eq!(wheel.stats().await.unwrap().pending, 100_000);
    /// # }
    /// ```
    pub fn capacity(mut self, timers: usize) -> Self {
        self.capacity = timers;
        self
    }

    /// Runs `n` drivers (default 1; zero is raised to 1), each owning a
    /// wheel and a command channel of `command_capacity`. A key always goes
    /// to the shard of its hash, so the commands for one key stay in order;
    /// `drain`, `stop` and `stats` cover every shard, and one stream yields
    /// from all of them. Sleeps, timeouts and intervals use the first shard.
    ///
    /// Shards help when many tasks on a multi-thread runtime issue commands
    /// at once. Timers of different shards may interleave on the stream
    /// within a tick; each is still never early and at most a tick late.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, mut expired) = TimingWheel::builder().shards(4).build();
    /// for key in 0..100u32 {
    ///     wheel.set_timer(key, key, Duration::from_secs(1)).await.unwrap();
    /// }
    /// assert_eq!(wheel.stats().await.unwrap().pending, 100);
    /// wheel.cancel_timer(7).await.unwrap();
    /// let mut fired = 0;
    /// while fired < 99 {
    ///     expired.recv().await.unwrap();
    ///     fired += 1;
    /// }
    /// assert_eq!(wheel.stop().await.unwrap(), []);
    /// # }
    /// ```
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = n.max(1);
        self
    }

    /// In callback mode, how long one callback may run (default 60 s);
    /// past it, the callback is cancelled and counted in
    /// [`Stats::callbacks_timed_out`](crate::Stats::callbacks_timed_out).
    /// Also bounds how long [`TimingWheel::stop`] waits for running
    /// callbacks. See [`build_with_callback`](Self::build_with_callback)
    /// for an example.
    pub fn callback_timeout(mut self, timeout: Duration) -> Self {
        self.callback_timeout = timeout;
        self
    }

    /// In callback mode, how many callbacks may run at once (default 1024;
    /// zero is raised to 1). Expired timers beyond the limit wait their
    /// turn, in order; none is dropped. See
    /// [`build_with_callback`](Self::build_with_callback) for an example.
    pub fn max_concurrency(mut self, limit: usize) -> Self {
        self.max_concurrency = limit.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        self
    }

    /// Spawns the driver and runs `callback` for each expired timer instead
    /// of handing expirations to a stream (the `execute` style).
    ///
    /// Each callback runs as a task of its own, off the driver's task, so a
    /// slow one delays neither other timers nor commands. Past
    /// [`callback_timeout`](Self::callback_timeout) it is cancelled and
    /// counted; a panic in it is caught, counted and reported through
    /// `tracing`, and the wheel keeps working. At most
    /// [`max_concurrency`](Self::max_concurrency) run at once; the rest wait
    /// in expiry order.
    ///
    /// [`TimingWheel::stop`] stops starting callbacks, waits for the running
    /// ones (each within its timeout), and returns the pending timers plus
    /// those that expired but whose callback never started.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime, as [`build`](Self::build).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let sum = Arc::new(AtomicU32::new(0));
    /// let total = Arc::clone(&sum);
    /// let wheel = TimingWheel::builder()
    ///     .callback_timeout(Duration::from_secs(5))
    ///     .max_concurrency(16)
    ///     .build_with_callback(move |_key: u64, amount: u32| {
    ///         let total = Arc::clone(&total);
    ///         async move {
    ///             total.fetch_add(amount, Ordering::SeqCst);
    ///         }
    ///     });
    /// wheel.set_timer(1, 40, Duration::from_millis(10)).await.unwrap();
    /// wheel.set_timer(2, 2, Duration::from_millis(20)).await.unwrap();
    /// tokio::time::sleep(Duration::from_millis(50)).await;
    /// assert_eq!(sum.load(Ordering::SeqCst), 42);
    /// assert_eq!(wheel.stats().await.unwrap().callbacks_completed, 2);
    /// # }
    /// ```
    pub fn build_with_callback<K, V, F, Fut>(self, callback: F) -> TimingWheel<K, V>
    where
        K: Eq + Hash + Clone + Send + 'static,
        V: Send + 'static,
        F: Fn(K, V) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (timeout, limit) = (self.callback_timeout, self.max_concurrency);
        let (wheel, expired) = self.build();
        let runtime = tokio::runtime::Handle::current();
        let ctl = callback::spawn(&runtime, expired, callback, timeout, limit);
        wheel.with_callbacks(ctl)
    }

    /// Spawns the driver on the current Tokio runtime and returns the
    /// handle and the expiration stream.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime, like `tokio::spawn`, and,
    /// with Tokio's own message, on a runtime whose time driver is not
    /// enabled (`enable_time` or `enable_all`): before any timer could be
    /// accepted, never later in the driver.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, mut expired) = TimingWheel::builder().build();
    /// wheel.set_timer("job", 1u8, Duration::from_secs(1)).await.unwrap();
    /// assert_eq!(expired.recv().await.unwrap().into_parts(), ("job", 1));
    /// # }
    /// ```
    pub fn build<K, V>(self) -> (TimingWheel<K, V>, Expirations<K, V>)
    where
        K: Eq + Hash + Clone + Send + 'static,
        V: Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().unwrap_or_else(|_| {
            panic!("TimingWheel must be built inside a Tokio runtime (its driver is a Tokio task)")
        });
        // Tokio's timer panics here, with a message that says to enable
        // time, on a runtime without its time driver: better now than in
        // the driver after timers were accepted.
        drop(tokio::time::sleep(Duration::ZERO));
        let clock = Clock::new(Instant::now(), self.tick);
        let limit = self.max_pending.map(PendingLimit::new);
        let shared = Arc::new(Shared::new(limit, self.shards));
        let mut senders = Vec::with_capacity(self.shards);
        // Sleeps go to the first shard's driver; the others' sleeps' signals
        // have no signaller from the start.
        let (sleep_tx, first_sleep_rx) = signal();
        let sleeps = SleepHandle::new(sleep_tx, clock);
        let mut first = Some((first_sleep_rx, sleeps.driver()));
        for _ in 0..self.shards {
            let (tx, rx) = channel::channel(self.command_capacity);
            let (sleep_rx, sleep_driver) = first.take().unwrap_or_else(|| {
                let (_, rx) = signal();
                (rx, SleepDriver::none())
            });
            let mut driver = Driver::new(rx, sleep_rx, sleep_driver, Arc::clone(&shared), clock);
            driver.reserve(self.capacity.div_ceil(self.shards));
            runtime.spawn(driver.run());
            senders.push(tx);
        }
        (
            TimingWheel::new_handle(
                Shards::new(senders, runtime),
                sleeps,
                Arc::clone(&shared),
                clock,
            ),
            Expirations::new(shared),
        )
    }
}

impl TimingWheel<(), ()> {
    /// A [`Builder`] to configure the tick and the channel capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::builder()
    ///     .tick(Duration::from_millis(5))
    ///     .build::<String, u32>();
    /// # drop(wheel);
    /// # }
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }
}

impl<K, V> TimingWheel<K, V>
where
    K: Eq + std::hash::Hash + Clone + Send + 'static,
    V: Send + 'static,
{
    /// Starts a wheel with the default settings (1 ms tick, 1024 queued
    /// commands) on the current Tokio runtime, and returns its handle and
    /// its expiration stream.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime. See [`Builder::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, expired) = TimingWheel::<u64, String>::new();
    /// # drop((wheel, expired));
    /// # }
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> (TimingWheel<K, V>, Expirations<K, V>) {
        Builder::new().build()
    }
}
