//! Delay futures on the wheel: [`Sleep`], and the plumbing that registers
//! them with the driver.
//!
//! Sleeps live in a wheel of their own inside the driver, keyed by an id the
//! handle hands out, so they never touch the user's key space. They are
//! registered and cancelled over an unbounded channel of their own: creating
//! or dropping a sleep never waits and needs no reply, and what that channel
//! can hold is bounded by the `Sleep` values that exist (each holds at most
//! one registration and one cancellation).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::Error;

/// What a `Sleep` and the driver share.
#[derive(Debug, Default)]
pub(crate) struct SleepState {
    waker: AtomicWaker,
    fired: AtomicBool,
    closed: AtomicBool,
}

/// The driver's side of a sleep. Firing it completes the `Sleep`; dropping it
/// unfired (the driver stopped, or the runtime shut down) completes the
/// `Sleep` with a closed error, so no sleep ever hangs.
#[derive(Debug)]
pub(crate) struct Waiter(Arc<SleepState>);

impl Waiter {
    pub(crate) fn fire(self) {
        self.0.fired.store(true, Ordering::Release);
        self.0.waker.wake();
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if !self.0.fired.load(Ordering::Acquire) {
            self.0.closed.store(true, Ordering::Release);
            self.0.waker.wake();
        }
    }
}

/// Commands on the sleep channel.
#[derive(Debug)]
pub(crate) enum SleepCommand {
    Register { id: u64, when: u64, waiter: Waiter },
    Cancel { id: u64 },
}

/// What a handle needs to make sleeps: not generic, so `Sleep` is not.
#[derive(Debug, Clone)]
pub(crate) struct SleepHandle {
    tx: mpsc::UnboundedSender<SleepCommand>,
    ids: Arc<AtomicU64>,
    clock: Clock,
}

impl SleepHandle {
    pub(crate) fn new(tx: mpsc::UnboundedSender<SleepCommand>, clock: Clock) -> Self {
        SleepHandle {
            tx,
            ids: Arc::new(AtomicU64::new(0)),
            clock,
        }
    }

    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// A registered sleep until `deadline` (stamped now).
    pub(crate) fn sleep_until(&self, deadline: Instant) -> Sleep {
        let when = self.clock.deadline_tick(deadline, Instant::now());
        self.register(deadline, when)
    }

    /// A registered sleep for `delay` from now.
    pub(crate) fn sleep(&self, delay: Duration) -> Sleep {
        let now = Instant::now();
        let when = self.clock.delay_tick(delay, now);
        // The instant is only reported; an unrepresentable one never comes.
        let deadline = now.checked_add(delay).unwrap_or_else(|| far_future(now));
        self.register(deadline, when)
    }

    /// A registered sleep that never completes, unless the wheel stops:
    /// for a deadline too far out to represent.
    pub(crate) fn sleep_forever(&self) -> Sleep {
        self.register(far_future(Instant::now()), u64::MAX)
    }

    fn register(&self, deadline: Instant, when: u64) -> Sleep {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(SleepState::default());
        let waiter = Waiter(Arc::clone(&state));
        // If the driver is gone the command, and the waiter in it, is handed
        // back and dropped here, which marks the sleep closed.
        let registered = self
            .tx
            .send(SleepCommand::Register { id, when, waiter })
            .is_ok();
        Sleep {
            tx: self.tx.clone(),
            id,
            deadline,
            state,
            registered,
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
/// A pending `Sleep` costs one entry in the driver's wheel and no task.
/// Dropping it before its deadline cancels the entry without a reply.
/// Sleeps are registered and cancelled over a channel of their own, apart
/// from the timers' command channel, so making or dropping one never waits,
/// even while that channel is full.
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
    tx: mpsc::UnboundedSender<SleepCommand>,
    id: u64,
    deadline: Instant,
    state: Arc<SleepState>,
    registered: bool,
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
        self.state.fired.load(Ordering::Acquire)
    }
}

impl Future for Sleep {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let state = &self.state;
        for attempt in 0..2 {
            if state.fired.load(Ordering::Acquire) {
                return Poll::Ready(Ok(()));
            }
            // The channel closes when the driver stops or is gone, after
            // which nothing fires; and a registration that raced the close
            // can sit in the channel, its waiter never dropped, for as long
            // as this sleep holds a sender.
            if state.closed.load(Ordering::Acquire) || self.tx.is_closed() {
                return Poll::Ready(Err(Error::closed()));
            }
            if attempt == 0 {
                // Register, then look again, so a wake in between is seen.
                state.waker.register(cx.waker());
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        let done =
            self.state.fired.load(Ordering::Acquire) || self.state.closed.load(Ordering::Acquire);
        if self.registered && !done {
            // No reply: the driver frees the entry when it gets to this.
            let _ = self.tx.send(SleepCommand::Cancel { id: self.id });
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("elapsed", &self.is_elapsed())
            .field("closed", &self.state.closed.load(Ordering::Acquire))
            .finish()
    }
}
