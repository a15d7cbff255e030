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
#[derive(Clone, Copy, Default, PartialEq, Eq)]
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
    /// [`Sleep`](crate::Sleep)s waiting on the wheel (timeouts and
    /// intervals included): those polled at least once that have neither
    /// completed nor been dropped. A sleep is registered at its first poll,
    /// so one made and not yet polled is not counted.
    pub sleeps: usize,
    /// Callbacks running now (callback mode only).
    pub callbacks_running: u64,
    /// Callbacks that finished within their timeout (callback mode only).
    pub callbacks_completed: u64,
    /// Callbacks cancelled at their timeout (callback mode only).
    pub callbacks_timed_out: u64,
    /// Callbacks that panicked; the panic was caught (callback mode only).
    pub callbacks_panicked: u64,
    /// Whether the wheel runs callbacks, so `Debug` shows their counters.
    pub(crate) callback_mode: bool,
}

/// Shows the callback counters only for a wheel in callback mode.
impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Stats");
        d.field("pending", &self.pending)
            .field("fired", &self.fired)
            .field("wakeups", &self.wakeups)
            .field("discarded", &self.discarded)
            .field("sleeps", &self.sleeps);
        if self.callback_mode {
            d.field("callbacks_running", &self.callbacks_running)
                .field("callbacks_completed", &self.callbacks_completed)
                .field("callbacks_timed_out", &self.callbacks_timed_out)
                .field("callbacks_panicked", &self.callbacks_panicked);
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Stats;

    /// Regression: `Debug` printed the four callback counters, always zero,
    /// for a wheel in stream mode.
    #[test]
    fn debug_shows_callback_counters_only_in_callback_mode() {
        let stream = Stats::default();
        assert!(!format!("{stream:?}").contains("callbacks"));
        let callbacks = Stats {
            callback_mode: true,
            callbacks_completed: 3,
            ..Stats::default()
        };
        assert!(format!("{callbacks:?}").contains("callbacks_completed: 3"));
    }
}
