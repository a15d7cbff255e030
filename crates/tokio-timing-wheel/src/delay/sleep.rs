//! Delay futures on the wheel: [`Sleep`], and the handle that makes them.
//!
//! Sleeps live in wheels of their own, shared by the handles and the
//! driver (see [`crate::delay::sleeps`]), so they never touch the user's key
//! space. Making a sleep takes the time, works out its tick and picks the
//! shard of the thread; nothing is filed until a sleep first waits, and
//! then it files its own waker, with no message to the driver unless its
//! tick is the earliest.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::delay::sleeps::{Outcome, Place, Shard, Signaller, SleepDriver, Sleeps};
use crate::error::Error;

/// What a handle needs to make sleeps: not generic, so `Sleep` is not.
#[derive(Debug, Clone)]
pub(crate) struct SleepHandle(Arc<Sleeps>);

impl SleepHandle {
    pub(crate) fn new(tx: Signaller, clock: Clock) -> Self {
        SleepHandle(Arc::new(Sleeps::new(tx, clock)))
    }

    /// The driver's side of these sleeps.
    pub(crate) fn driver(&self) -> SleepDriver {
        self.0.driver()
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
        let (shard, when) = self.0.look(deadline);
        let when = when.unwrap_or_else(|| {
            let when = self.0.clock.deadline_tick(deadline, now);
            self.0.remember_window(when, self.0.clock.window(when));
            when
        });
        self.make_in(shard, deadline, when)
    }

    /// A sleep for `delay` from now.
    #[inline]
    pub(crate) fn sleep(&self, delay: Duration) -> Sleep {
        let now = Instant::now();
        let Some(deadline) = now.checked_add(delay) else {
            // The instant is only reported; an unrepresentable one never
            // comes.
            return self.make(far_future(now), self.0.clock.delay_tick(delay, now));
        };
        if delay.is_zero() {
            return self.reached(deadline);
        }
        let (shard, when) = self.0.look(deadline);
        let when = when.unwrap_or_else(|| {
            let (when, window) = self.0.clock.delay_window(delay, now, deadline);
            self.0.remember_window(when, window);
            when
        });
        self.make_in(shard, deadline, when)
    }

    /// A sleep that never completes, unless the wheel stops: for a deadline
    /// too far out to represent.
    pub(crate) fn sleep_forever(&self) -> Sleep {
        self.make(far_future(Instant::now()), u64::MAX)
    }

    /// A sleep whose deadline is already reached: it waits for nothing
    /// (tick 0 has always fired). On a stopped wheel it fails as closed, as
    /// every sleep made there does: it waits for a tick that never comes,
    /// which the closed wheel refuses.
    fn reached(&self, deadline: Instant) -> Sleep {
        let when = if self.0.is_closed() { u64::MAX } else { 0 };
        self.make(deadline, when)
    }

    /// A sleep for tick `when`. (If the wheel has stopped, it says so when
    /// the sleep waits.)
    #[inline]
    fn make(&self, deadline: Instant, when: u64) -> Sleep {
        self.make_in(self.0.shard(), deadline, when)
    }

    /// [`make`](Self::make), in `shard`.
    #[inline]
    fn make_in(&self, shard: Arc<Shard>, deadline: Instant, when: u64) -> Sleep {
        Sleep {
            shard,
            deadline,
            when,
            place: Place::NONE,
        }
    }
}

/// An instant about 30 years out, standing for "never".
pub(crate) fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(86_400 * 365 * 30)
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
/// Tokio's are: it files its waker in the sleeps' wheel of the thread that
/// made it (one per thread the machine runs at once, each under its own
/// short lock), in its deadline tick's entry, which the sleeps of one tick
/// share. Nothing is allocated and no message is sent per sleep; the driver
/// hears of a sleep only when its tick is earlier than any it will wake
/// for. Dropping a sleep takes its waker back out; the last sleep of a tick
/// to go takes the tick's entry out. Making, polling or dropping a sleep
/// never waits on the driver, even while the timers' command channel is
/// full.
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
    /// The shard of the thread that made it, where it waits.
    shard: Arc<Shard>,
    deadline: Instant,
    /// The tick it completes at: its deadline rounded up.
    when: u64,
    /// Where it waits, once it has.
    place: Place,
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
        self.shard.has_fired(self.when)
    }
}

impl Future for Sleep {
    type Output = Result<(), Error>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.shard.wait(this.when, &mut this.place, cx.waker()) {
            Outcome::Waiting => Poll::Pending,
            Outcome::Fired => Poll::Ready(Ok(())),
            Outcome::Closed => Poll::Ready(Err(Error::closed())),
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.shard.leave(self.when, self.place);
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let closed = !self.is_elapsed() && self.shard.is_closed();
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("elapsed", &self.is_elapsed())
            .field("closed", &closed)
            .finish()
    }
}
