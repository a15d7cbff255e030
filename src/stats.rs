//! Counters the driver keeps.

/// A snapshot of a wheel's counters, from [`TimingWheel::stats`].
///
/// [`TimingWheel::stats`]: crate::TimingWheel::stats
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio_timing_wheel::TimingWheel;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let (wheel, _expired) = TimingWheel::<u32, ()>::new();
/// wheel.set_timer(1, (), Duration::from_secs(1)).await.unwrap();
/// let stats = wheel.stats().await.unwrap();
/// assert_eq!(stats.pending, 1);
/// assert_eq!(stats.fired, 0);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Timers waiting in the wheel, including any that are due but not yet
    /// handed to the stream.
    pub pending: usize,
    /// Timers handed to the [`Expirations`](crate::Expirations) stream.
    pub fired: u64,
    /// Times the driver woke because its clock reached a deadline or a
    /// cascade point; waking for commands does not count.
    pub wakeups: u64,
    /// Timers that expired after the stream was dropped, and were dropped.
    pub discarded: u64,
    /// Pending [`Sleep`](crate::Sleep)s (timeouts and intervals included).
    pub sleeps: usize,
    /// Callbacks running now (callback mode only).
    pub callbacks_running: u64,
    /// Callbacks that finished within their timeout (callback mode only).
    pub callbacks_completed: u64,
    /// Callbacks cancelled at their timeout (callback mode only).
    pub callbacks_timed_out: u64,
    /// Callbacks that panicked; the panic was caught (callback mode only).
    pub callbacks_panicked: u64,
}
