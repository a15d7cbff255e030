//! Delay futures on the wheel: [`Sleep`], and the handle that makes them.
//!
//! Sleeps live in a wheel of their own inside the driver, so they never
//! touch the user's key space, and the sleeps waiting on one tick share one
//! entry there: see [`crate::bucket`]. Making a sleep takes the time and
//! finds its tick's bucket; nothing reaches the driver until a sleep first
//! waits, and then only once per bucket.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::bucket::{bucket_for, last_bucket, Bucket, Outcome, SleepCommand, Sleeps, NO_SLOT};
use crate::clock::Clock;
use crate::error::Error;

/// What a handle needs to make sleeps: not generic, so `Sleep` is not.
#[derive(Debug, Clone)]
pub(crate) struct SleepHandle(Arc<Sleeps>);

impl SleepHandle {
    pub(crate) fn new(tx: mpsc::UnboundedSender<SleepCommand>, clock: Clock) -> Self {
        SleepHandle(Arc::new(Sleeps::new(tx, clock)))
    }

    pub(crate) fn clock(&self) -> Clock {
        self.0.clock
    }

    /// A sleep until `deadline` (stamped now).
    pub(crate) fn sleep_until(&self, deadline: Instant) -> Sleep {
        let now = Instant::now();
        if deadline <= now {
            return self.reached(deadline);
        }
        if let Some(sleep) = self.in_last(deadline) {
            return sleep;
        }
        let when = self.0.clock.deadline_tick(deadline, now);
        self.make(deadline, when, self.0.clock.window(when))
    }

    /// A sleep for `delay` from now.
    #[inline]
    pub(crate) fn sleep(&self, delay: Duration) -> Sleep {
        let now = Instant::now();
        let Some(deadline) = now.checked_add(delay) else {
            // The instant is only reported; an unrepresentable one never
            // comes.
            return self.make(far_future(now), self.0.clock.delay_tick(delay, now), None);
        };
        if delay.is_zero() {
            return self.reached(deadline);
        }
        if let Some(sleep) = self.in_last(deadline) {
            return sleep;
        }
        let (when, window) = self.0.clock.delay_window(delay, now, deadline);
        self.make(deadline, when, window)
    }

    /// A sleep in the bucket this thread used last, if `deadline` is in its
    /// tick: a burst of sleeps on one deadline tick skips working the tick
    /// out.
    #[inline]
    fn in_last(&self, deadline: Instant) -> Option<Sleep> {
        last_bucket(&self.0, deadline).map(|bucket| Sleep {
            wait: Wait::Bucket(bucket, NO_SLOT),
            deadline,
        })
    }

    /// A sleep that never completes, unless the wheel stops: for a deadline
    /// too far out to represent.
    pub(crate) fn sleep_forever(&self) -> Sleep {
        self.make(far_future(Instant::now()), u64::MAX, None)
    }

    /// A sleep whose deadline is already reached: it needs no bucket. On a
    /// stopped wheel it fails as closed, as every sleep made there does.
    fn reached(&self, deadline: Instant) -> Sleep {
        let wait = if self.0.is_closed() {
            Wait::Closed
        } else {
            Wait::Elapsed
        };
        Sleep { wait, deadline }
    }

    /// A sleep in the bucket of tick `when`, which is in the future, and
    /// whose deadlines lie in `window` ([`Clock::window`]). (If the wheel
    /// has stopped, the bucket says so when the sleep waits.)
    #[inline]
    fn make(&self, deadline: Instant, when: u64, window: Option<(Instant, Instant)>) -> Sleep {
        Sleep {
            wait: Wait::Bucket(bucket_for(&self.0, when, window), NO_SLOT),
            deadline,
        }
    }
}

/// An instant about 30 years out, standing for "never".
pub(crate) fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(86_400 * 365 * 30)
}

/// Where a sleep stands.
enum Wait {
    /// In a bucket, at a slot once it has waited.
    Bucket(Arc<Bucket>, u32),
    /// Its deadline was reached when it was made.
    Elapsed,
    /// The wheel had stopped when it was made.
    Closed,
}

/// A future that completes at a deadline on a [`TimingWheel`], created by
/// [`TimingWheel::sleep`] and [`TimingWheel::sleep_until`].
///
/// It completes no earlier than its deadline and within one tick after it,
/// with `Ok(())`. If the wheel stops (or its runtime shuts down) first, it
/// completes promptly with `Err` where [`Error::is_closed`] is true: it never
/// hangs, and it never reports an early deadline as reached.
///
/// A `Sleep` is registered when it is first polled and not yet due, as
/// Tokio's are. A pending one costs a slot in the bucket of its deadline
/// tick, and sleeps waiting on the same tick share one entry in the driver's
/// wheel, so a burst of timeouts with one deadline tick reaches the driver
/// once. Dropping a sleep takes its slot back without a message; the last
/// sleep of a tick to go cancels the driver's entry. Making, polling or
/// dropping a sleep never waits on the driver, even while the timers'
/// command channel is full.
///
/// [`TimingWheel`]: crate::TimingWheel
/// [`TimingWheel::sleep`]: crate::TimingWheel::sleep
/// [`TimingWheel::sleep_until`]: crate::TimingWheel::sleep_until
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
/// let (wheel, _expired) = TimingWheel::<u32, ()>::new();
/// let start = Instant::now();
/// wheel.sleep(Duration::from_millis(250)).await.unwrap();
/// assert_eq!(start.elapsed(), Duration::from_millis(250));
///
/// wheel.stop().await.unwrap();
/// assert!(wheel.sleep(Duration::from_secs(1)).await.unwrap_err().is_closed());
/// # }
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Sleep {
    wait: Wait,
    deadline: Instant,
}

impl Sleep {
    /// The instant this sleep was asked to last until. It completes at this
    /// instant rounded up to the wheel's tick.
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
    /// let sleep = wheel.sleep(Duration::from_secs(2));
    /// assert_eq!(sleep.deadline(), Instant::now() + Duration::from_secs(2));
    /// assert!(!sleep.is_elapsed());
    /// # }
    /// ```
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline has been reached (the future would return
    /// `Ok(())`).
    pub fn is_elapsed(&self) -> bool {
        match &self.wait {
            Wait::Bucket(bucket, _) => bucket.outcome() == Outcome::Fired,
            Wait::Elapsed => true,
            Wait::Closed => false,
        }
    }
}

impl Future for Sleep {
    type Output = Result<(), Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let outcome = match &mut self.get_mut().wait {
            Wait::Bucket(bucket, slot) => bucket.wait(slot, cx.waker()),
            Wait::Elapsed => Outcome::Fired,
            Wait::Closed => Outcome::Closed,
        };
        match outcome {
            Outcome::Waiting => Poll::Pending,
            Outcome::Fired => Poll::Ready(Ok(())),
            Outcome::Closed => Poll::Ready(Err(Error::closed())),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Wait::Bucket(bucket, slot) = &self.wait {
            bucket.leave(*slot);
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let closed = match &self.wait {
            Wait::Bucket(bucket, _) => bucket.outcome() == Outcome::Closed,
            Wait::Elapsed => false,
            Wait::Closed => true,
        };
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("elapsed", &self.is_elapsed())
            .field("closed", &closed)
            .finish()
    }
}
