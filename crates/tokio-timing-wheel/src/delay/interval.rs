//! Intervals on the wheel.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{FusedStream, Stream};
use tokio::time::Instant;

use crate::delay::sleep::{far_future, Sleep, SleepHandle};

/// What an [`Interval`] does when ticks were missed (the consumer or the
/// runtime was busy past one or more tick instants).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio_timing_wheel::{MissedTicks, TimingWheel};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let (wheel, _expired) = TimingWheel::<u32, ()>::new();
/// let interval = wheel
///     .interval(Duration::from_millis(100))
///     .missed_ticks(MissedTicks::Skip);
/// assert_eq!(interval.period(), Duration::from_millis(100));
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MissedTicks {
    /// Yield the missed ticks at once, one after another, to catch up with
    /// the original schedule (the default, as in `tokio::time::Interval`).
    #[default]
    Burst,
    /// Yield one tick now and schedule the next a whole period after now:
    /// the schedule shifts later.
    Delay,
    /// Yield one tick now and skip the missed ones: the next tick is the
    /// next instant of the original schedule after now.
    Skip,
}

/// A stream of ticks a fixed period apart on a [`TimingWheel`], created by
/// [`TimingWheel::interval`] and [`TimingWheel::interval_at`].
///
/// Each item is the instant the tick was scheduled for; no tick is yielded
/// before its instant. The first tick is at the start instant (at once, for
/// [`TimingWheel::interval`]). The stream ends if the wheel stops.
///
/// [`TimingWheel`]: crate::TimingWheel
/// [`TimingWheel::interval`]: crate::TimingWheel::interval
/// [`TimingWheel::interval_at`]: crate::TimingWheel::interval_at
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use tokio::time::Instant;
/// use tokio_timing_wheel::TimingWheel;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let (wheel, _expired) = TimingWheel::<u32, ()>::new();
/// let start = Instant::now();
/// let ticks: Vec<Instant> = wheel.interval(Duration::from_millis(10)).take(3).collect().await;
/// assert_eq!(ticks, [start, start + Duration::from_millis(10), start + Duration::from_millis(20)]);
/// # }
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct Interval {
    handle: SleepHandle,
    sleep: Option<Sleep>,
    next: Instant,
    period: Duration,
    missed: MissedTicks,
}

impl Interval {
    pub(crate) fn new(handle: SleepHandle, start: Instant, period: Duration) -> Self {
        // A zero period would tick without end at one instant.
        let period = period.max(handle.clock().tick());
        let sleep = handle.sleep_until(start);
        Interval {
            handle,
            sleep: Some(sleep),
            next: start,
            period,
            missed: MissedTicks::default(),
        }
    }

    /// Sets what to do about missed ticks (default [`MissedTicks::Burst`]).
    pub fn missed_ticks(mut self, missed: MissedTicks) -> Self {
        self.missed = missed;
        self
    }

    /// The period between ticks (at least one tick of the wheel).
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Starts the schedule again from now: the next tick is one period
    /// from now, and the ones after it a period apart (as
    /// `tokio::time::Interval::reset`). Nothing happens once the stream
    /// has ended.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::<u8, ()>::new();
    /// let mut heartbeat = wheel.interval(Duration::from_secs(10));
    /// heartbeat.tick().await; // the first tick is at once
    /// tokio::time::sleep(Duration::from_secs(4)).await;
    /// // Traffic was seen: no heartbeat for another full period.
    /// heartbeat.reset();
    /// let reset_at = Instant::now();
    /// assert_eq!(heartbeat.tick().await, Some(reset_at + Duration::from_secs(10)));
    /// # }
    /// ```
    pub fn reset(&mut self) {
        let now = Instant::now();
        match now.checked_add(self.period) {
            Some(next) => self.reset_at(next),
            None => self.reset_never(now),
        }
    }

    /// Makes the next tick due at once, and the ones after it a period
    /// apart from now.
    pub fn reset_immediately(&mut self) {
        self.reset_at(Instant::now());
    }

    /// Makes the next tick due at `deadline`, and the ones after it a
    /// period apart from it.
    pub fn reset_at(&mut self, deadline: Instant) {
        if self.sleep.is_none() {
            return;
        }
        self.next = deadline;
        // The old sleep is dropped here, which frees its entry.
        self.sleep = Some(self.handle.sleep_until(deadline));
    }

    fn reset_never(&mut self, now: Instant) {
        if self.sleep.is_some() {
            self.next = far_future(now);
            self.sleep = Some(self.handle.sleep_forever());
        }
    }

    /// Waits for the next tick; `None` if the wheel has stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a tick is consumed only when this returns it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::<u8, ()>::new();
    /// let start = Instant::now();
    /// let mut interval = wheel.interval(Duration::from_millis(10));
    /// assert_eq!(interval.tick().await, Some(start));
    /// assert_eq!(interval.tick().await, Some(start + Duration::from_millis(10)));
    /// # }
    /// ```
    pub async fn tick(&mut self) -> Option<Instant> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// The instant after `tick` per the missed-tick policy, seen at `now`;
    /// `None` when it is too far out for an `Instant` (it never comes).
    fn following(&self, tick: Instant, now: Instant) -> Option<Instant> {
        let next = tick.checked_add(self.period)?;
        if next > now {
            return Some(next);
        }
        match self.missed {
            MissedTicks::Burst => Some(next),
            MissedTicks::Delay => now.checked_add(self.period),
            MissedTicks::Skip => {
                // The first instant of the original schedule after `now`.
                let period = self.period.as_nanos();
                let behind = now.duration_since(tick).as_nanos() / period;
                let ahead = (behind + 1).checked_mul(period)?;
                let secs = u64::try_from(ahead / NANOS_PER_SEC).ok()?;
                let nanos = (ahead % NANOS_PER_SEC) as u32;
                tick.checked_add(Duration::new(secs, nanos))
            }
        }
    }
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

impl Stream for Interval {
    type Item = Instant;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Instant>> {
        let Some(sleep) = self.sleep.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(sleep).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => {
                self.sleep = None;
                Poll::Ready(None)
            }
            Poll::Ready(Ok(())) => {
                let tick = self.next;
                let now = Instant::now();
                let sleep = match self.following(tick, now) {
                    Some(next) => {
                        self.next = next;
                        self.handle.sleep_until(next)
                    }
                    None => {
                        self.next = far_future(now);
                        self.handle.sleep_forever()
                    }
                };
                self.sleep = Some(sleep);
                Poll::Ready(Some(tick))
            }
        }
    }
}

impl FusedStream for Interval {
    fn is_terminated(&self) -> bool {
        self.sleep.is_none()
    }
}

impl fmt::Debug for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interval")
            .field("next", &self.next)
            .field("period", &self.period)
            .field("missed", &self.missed)
            .finish()
    }
}
