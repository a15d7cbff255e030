//! The cloneable handle callers use to set, move and remove timers.

mod delays;
mod whole;

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::callback::CallbackCtl;
use crate::channel::{queue, TrySendError};
use crate::clock::Clock;
use crate::command::Command;
use crate::delay::sleep::SleepHandle;
use crate::error::Error;
use crate::limit::Place;
use crate::shard::Shards;
use crate::stream::Shared;

/// A handle to a timing wheel run by its own Tokio task.
///
/// Cheap to clone and `Send + Sync`; every clone feeds the same driver
/// through one ordered channel, so the commands one task issues apply in the
/// order it issued them. Deadlines are computed when a method is called, not
/// when the driver gets to the command.
///
/// Expired timers come out of the [`Expirations`](crate::Expirations) stream returned beside the
/// handle. Each key has at most one pending timer: setting a key again
/// replaces its value and deadline.
///
/// # Guarantees
///
/// - A timer never fires before its deadline, and fires within one tick
///   after it (plus the time the runtime takes to run the driver).
/// - Timers fire in deadline order; equal deadline ticks fire in the order
///   they were set (a timer moved while pending takes no particular place
///   within its new tick). A deadline already past fires at once.
/// - Pushing a deadline later ([`move_timer`](Self::move_timer), or
///   [`set_timer`](Self::set_timer) on a pending key) is O(1): the new
///   deadline is recorded and the timer is re-filed only when its old slot
///   comes due.
/// - Every accepted timer ends exactly once: it fires, is removed, cancelled,
///   replaced, drained, or returned by [`stop`](Self::stop).
/// - Any delay is accepted: `Duration::ZERO` fires at once, and delays too
///   long to represent (up to `Duration::MAX`) simply never come.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures::StreamExt;
/// use tokio_timing_wheel::TimingWheel;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tokio_timing_wheel::Error> {
/// let (wheel, mut expired) = TimingWheel::<u32, &str>::new();
/// wheel.set_timer(1, "idle connection", Duration::from_secs(30)).await?;
/// wheel.set_timer(2, "another", Duration::from_secs(30)).await?;
/// wheel.move_timer(1, Duration::from_secs(60)).await?; // a heartbeat
/// assert_eq!(wheel.remove_timer(2).await?, Some("another"));
///
/// let e = expired.next().await.unwrap();
/// assert_eq!(e.into_parts(), (1, "idle connection"));
/// # Ok(())
/// # }
/// ```
pub struct TimingWheel<K, V> {
    shards: Arc<Shards<K, V>>,
    pub(crate) sleeps: SleepHandle,
    shared: Arc<Shared<K, V>>,
    pub(crate) clock: Clock,
    callbacks: Option<Arc<CallbackCtl<K, V>>>,
}

impl<K, V> Clone for TimingWheel<K, V> {
    fn clone(&self) -> Self {
        TimingWheel {
            shards: Arc::clone(&self.shards),
            sleeps: self.sleeps.clone(),
            shared: Arc::clone(&self.shared),
            clock: self.clock,
            callbacks: self.callbacks.clone(),
        }
    }
}

impl<K, V> fmt::Debug for TimingWheel<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingWheel")
            .field("tick", &self.clock.tick())
            .field("shards", &self.shards.all().len())
            .field("closed", &self.shards.is_closed())
            .field("queued", &self.shards.queued())
            .finish()
    }
}

impl<K, V> TimingWheel<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Send + 'static,
{
    pub(crate) fn new_handle(
        shards: Shards<K, V>,
        sleeps: SleepHandle,
        shared: Arc<Shared<K, V>>,
        clock: Clock,
    ) -> Self {
        TimingWheel {
            shards: Arc::new(shards),
            sleeps,
            shared,
            clock,
            callbacks: None,
        }
    }

    pub(crate) fn with_callbacks(mut self, ctl: Arc<CallbackCtl<K, V>>) -> Self {
        self.callbacks = Some(ctl);
        self
    }

    /// The wheel's tick.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::<u8, ()>::new();
    /// assert_eq!(wheel.tick(), Duration::from_millis(1));
    /// # }
    /// ```
    pub fn tick(&self) -> Duration {
        self.clock.tick()
    }

    /// Whether the driver has stopped (every call would fail with
    /// [`Error::is_closed`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::<u8, ()>::new();
    /// assert!(!wheel.is_closed());
    /// wheel.stop().await.unwrap();
    /// assert!(wheel.is_closed());
    /// # }
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shards.is_closed()
    }

    /// How many timers are pending, read without a round trip to the
    /// driver: the count as of the driver's last turn, so a `set_timer`
    /// still in the command channel is not counted yet, and a timer that
    /// fired is not counted even while it waits in the [`Expirations`]
    /// stream. Sleeps, timeouts and intervals are not timers here. 0 once
    /// the wheel has stopped. For the count after every command sent so
    /// far, `stats().await?.pending` waits for the driver.
    ///
    /// [`Expirations`]: crate::Expirations
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::new();
    /// assert!(wheel.is_empty());
    /// wheel.set_timer(1u32, (), Duration::from_secs(5)).await.unwrap();
    /// wheel.set_timer(2u32, (), Duration::from_secs(5)).await.unwrap();
    /// // The round trip of `stats` lets the driver take both commands.
    /// assert_eq!(wheel.stats().await.unwrap().pending, 2);
    /// assert_eq!(wheel.len(), 2);
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        if self.is_closed() {
            0
        } else {
            self.shared.len()
        }
    }

    /// Whether no timer is pending, as [`len`](Self::len) counts them.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When the timer for `key` is due, or `None` if it has no pending
    /// timer (it never existed, was removed, or has fired: a fired timer
    /// may still wait in the [`Expirations`] stream). Commands sent before
    /// this call are applied first, so it sees the caller's own
    /// `set_timer` and `move_timer`. The instant is the deadline's tick: at
    /// or after the deadline asked for, never before it. A deadline too
    /// far out to be an `Instant` (set with `Duration::MAX`) is reported
    /// as about 30 years from now; it never fires.
    ///
    /// [`Expirations`]: crate::Expirations
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver has stopped.
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
    /// let (wheel, _expired) = TimingWheel::new();
    /// let asked = Instant::now() + Duration::from_secs(30);
    /// wheel.set_timer_at("session-7", (), asked).await.unwrap();
    /// let due = wheel.deadline("session-7").await.unwrap().unwrap();
    /// assert!(due >= asked && due - asked < wheel.tick());
    /// assert_eq!(wheel.deadline("session-8").await.unwrap(), None);
    /// # }
    /// ```
    pub async fn deadline(&self, key: K) -> Result<Option<Instant>, Error> {
        let (reply, rx) = oneshot::channel();
        let shard = self.shards.for_key(&key);
        send_on(shard, Command::Deadline { key, reply }).await?;
        let tick = rx.await.map_err(|_| Error::closed())?;
        Ok(tick.map(|tick| {
            self.clock
                .instant(tick)
                .unwrap_or_else(|| crate::delay::sleep::far_future(Instant::now()))
        }))
    }

    /// Sets a timer for `key` to fire `delay` from now, or replaces the
    /// value and deadline of the pending timer for `key`.
    ///
    /// Returns once the command is queued, waiting only if the command
    /// channel is full. Callers that wait are served in the order they
    /// began to wait, and a call that finds others waiting queues behind
    /// them.
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver has stopped;
    /// [`Error::is_receiver_dropped`] if the stream was dropped. Either way
    /// [`Error::into_timer`] hands the key and value back.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the timer was not set
    /// and the key and value are dropped with it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use futures::StreamExt;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, mut expired) = TimingWheel::new();
    /// wheel.set_timer("k", 1, Duration::from_secs(5)).await.unwrap();
    /// wheel.set_timer("k", 2, Duration::from_secs(1)).await.unwrap(); // replaces
    /// assert_eq!(expired.next().await.unwrap().into_parts(), ("k", 2));
    /// # }
    /// ```
    pub async fn set_timer(&self, key: K, value: V, delay: Duration) -> Result<(), Error> {
        let (when, frac) = self.clock.delay_when(delay, Instant::now());
        match self.queue_set(key, value, when, frac)? {
            None => Ok(()),
            Some((command, place)) => self.send_set_waiting(command, place).await,
        }
    }

    /// Like [`set_timer`](Self::set_timer), with an absolute deadline.
    /// A deadline in the past fires at once.
    ///
    /// # Errors
    ///
    /// As for [`set_timer`](Self::set_timer).
    ///
    /// # Cancel safety
    ///
    /// As for [`set_timer`](Self::set_timer).
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
    /// let (wheel, mut expired) = TimingWheel::new();
    /// let deadline = Instant::now() + Duration::from_millis(250);
    /// wheel.set_timer_at(1u8, (), deadline).await.unwrap();
    /// assert!(expired.recv().await.unwrap().deadline() >= deadline);
    /// # }
    /// ```
    pub async fn set_timer_at(&self, key: K, value: V, deadline: Instant) -> Result<(), Error> {
        let (when, frac) = self.clock.deadline_when(deadline, Instant::now());
        match self.queue_set(key, value, when, frac)? {
            None => Ok(()),
            Some((command, place)) => self.send_set_waiting(command, place).await,
        }
    }

    /// Like [`set_timer`](Self::set_timer), but never waits: a full command
    /// channel is an error.
    ///
    /// # Errors
    ///
    /// [`Error::is_full`] if the channel is full, plus the errors of
    /// [`set_timer`](Self::set_timer); [`Error::into_timer`] hands the key
    /// and value back.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::builder().command_capacity(1).build();
    /// wheel.try_set_timer(1u32, (), Duration::from_secs(1)).unwrap();
    /// // The driver has not run yet, so the one slot is still taken.
    /// let err = wheel.try_set_timer(2, (), Duration::from_secs(1)).unwrap_err();
    /// assert!(err.is_full());
    /// assert_eq!(err.into_timer::<u32, ()>(), Some((2, ())));
    /// # }
    /// ```
    pub fn try_set_timer(&self, key: K, value: V, delay: Duration) -> Result<(), Error> {
        let (when, frac) = self.clock.delay_when(delay, Instant::now());
        let (key, value, place) = self.admit(key, value)?;
        // A timer not sent drops its place, which gives it back.
        self.shards
            .for_key(&key)
            .try_send(Command::Set {
                key,
                value,
                when,
                frac,
            })
            .map(|()| place.sent())
            .map_err(|err| match err {
                TrySendError::Full(command) => {
                    let (key, value) = into_timer(command);
                    Error::full_with(key, value)
                }
                TrySendError::Closed(command) => {
                    let (key, value) = into_timer(command);
                    Error::closed_with(key, value)
                }
            })
    }

    /// Moves the deadline of the pending timer for `key` to `delay` from
    /// now, earlier or later. A key with no pending timer is left alone.
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver has stopped;
    /// [`Error::is_receiver_dropped`] if the stream was dropped.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, the deadline was not
    /// moved.
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
    /// let (wheel, mut expired) = TimingWheel::new();
    /// let start = Instant::now();
    /// wheel.set_timer(1u32, (), Duration::from_secs(1)).await.unwrap();
    /// wheel.move_timer(1, Duration::from_secs(10)).await.unwrap();
    /// wheel.move_timer(99, Duration::from_secs(10)).await.unwrap(); // no such key: no-op
    /// expired.recv().await.unwrap();
    /// assert_eq!(start.elapsed(), Duration::from_secs(10));
    /// # }
    /// ```
    pub async fn move_timer(&self, key: K, delay: Duration) -> Result<(), Error> {
        let (when, frac) = self.clock.delay_when(delay, Instant::now());
        self.check_receiver()?;
        queue!(self.shards.for_key(&key), Command::Move { key, when, frac })
    }

    /// Like [`move_timer`](Self::move_timer), with an absolute deadline.
    ///
    /// # Errors
    ///
    /// As for [`move_timer`](Self::move_timer).
    ///
    /// # Cancel safety
    ///
    /// As for [`move_timer`](Self::move_timer).
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
    /// let (wheel, mut expired) = TimingWheel::new();
    /// wheel.set_timer(1u32, (), Duration::from_secs(60)).await.unwrap();
    /// let now = Instant::now();
    /// wheel.move_timer_at(1, now + Duration::from_secs(2)).await.unwrap();
    /// expired.recv().await.unwrap();
    /// assert_eq!(now.elapsed(), Duration::from_secs(2));
    /// # }
    /// ```
    pub async fn move_timer_at(&self, key: K, deadline: Instant) -> Result<(), Error> {
        let (when, frac) = self.clock.deadline_when(deadline, Instant::now());
        self.check_receiver()?;
        queue!(self.shards.for_key(&key), Command::Move { key, when, frac })
    }

    /// Removes the pending timer for `key` and returns its value, or `None`
    /// if it had no pending timer (it already fired, or never existed).
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver has stopped.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the command was queued, the timer is
    /// still removed and its value dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::new();
    /// wheel.set_timer(5u32, "conn", Duration::from_secs(30)).await.unwrap();
    /// assert_eq!(wheel.remove_timer(5).await.unwrap(), Some("conn"));
    /// assert_eq!(wheel.remove_timer(5).await.unwrap(), None);
    /// # }
    /// ```
    pub async fn remove_timer(&self, key: K) -> Result<Option<V>, Error> {
        let (reply, rx) = oneshot::channel();
        let shard = self.shards.for_key(&key);
        send_on(shard, Command::Remove { key, reply }).await?;
        rx.await.map_err(|_| Error::closed())
    }

    /// Removes the pending timer for `key`, if any, without waiting for a
    /// reply: the cheap form of [`remove_timer`](Self::remove_timer) for
    /// hot paths such as request timeouts that usually complete in time.
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver has stopped.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before it completes, nothing was cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::new();
    /// wheel.set_timer(5u32, (), Duration::from_secs(10)).await.unwrap();
    /// wheel.cancel_timer(5).await.unwrap();
    /// assert_eq!(wheel.stats().await.unwrap().pending, 0);
    /// # }
    /// ```
    pub async fn cancel_timer(&self, key: K) -> Result<(), Error> {
        // No second future unless the channel is full: the request-timeout
        // pattern sends one of these per request.
        queue!(self.shards.for_key(&key), Command::Cancel { key })
    }

    /// Checks that a new timer may be sent, and takes its place under the
    /// pending limit; hands the timer back if not.
    ///
    /// Always inlined, with the errors built out of line (their constructors
    /// are `#[cold]`), so that `set_timer` makes no call on its way to the
    /// queue (see BENCHMARKS.md).
    #[inline(always)]
    fn admit(&self, key: K, value: V) -> Result<(K, V, Place<'_>), Error> {
        // A stopped wheel says so, whether or not its stream is still there.
        if self.shards.is_closed() {
            return Err(Error::closed_with(key, value));
        }
        if !self.shared.receiver_alive() {
            return Err(Error::receiver_dropped_with(key, value));
        }
        let place = match &self.shared.limit {
            None => Place::NONE,
            Some(limit) => match limit.try_reserve() {
                Some(place) => place,
                None => return Err(Error::at_capacity_with(key, value)),
            },
        };
        Ok((key, value, place))
    }

    /// A move for a wheel whose stream is gone would only fire into
    /// nothing: refused, unless the wheel has stopped, which `queue!` says.
    fn check_receiver(&self) -> Result<(), Error> {
        if !self.shared.receiver_alive() && !self.shards.is_closed() {
            return Err(Error::receiver_dropped());
        }
        Ok(())
    }

    /// Queues a `Set` if its shard has room now. A full shard hands the
    /// command and its place back to wait for room in
    /// [`send_set_waiting`](Self::send_set_waiting); only that slow path
    /// enters a second future.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn queue_set(
        &self,
        key: K,
        value: V,
        when: u64,
        frac: u8,
    ) -> Result<Option<(Command<K, V>, Place<'_>)>, Error> {
        let (key, value, place) = self.admit(key, value)?;
        let shard = self.shards.for_key(&key);
        match shard.try_send_with(move || Command::Set {
            key,
            value,
            when,
            frac,
        }) {
            Ok(()) => {
                place.sent();
                Ok(None)
            }
            Err(TrySendError::Full(command)) => Ok(Some((command, place))),
            Err(TrySendError::Closed(command)) => Err(refused(command)),
        }
    }

    /// Waits for room for a `Set`. Its place goes back if the channel
    /// closes, or if this future is dropped while it waits: no timer was
    /// set.
    async fn send_set_waiting(
        &self,
        command: Command<K, V>,
        place: Place<'_>,
    ) -> Result<(), Error> {
        let Command::Set { key, .. } = &command else {
            unreachable!("only Set commands wait here");
        };
        let shard = self.shards.for_key(key);
        match shard.send(command).await {
            Ok(()) => {
                place.sent();
                Ok(())
            }
            Err(command) => Err(refused(command)),
        }
    }
}

/// The error for a `Set` the closed channel refused, with its timer.
fn refused<K: Send + 'static, V: Send + 'static>(command: Command<K, V>) -> Error {
    let (key, value) = into_timer(command);
    Error::closed_with(key, value)
}

/// Sends `command` on `shard`, waiting for room.
pub(super) async fn send_on<K, V>(
    shard: &crate::channel::Sender<Command<K, V>>,
    command: Command<K, V>,
) -> Result<(), Error> {
    queue!(shard, command)
}

/// The key and value of a `Set` command that could not be sent.
fn into_timer<K, V>(command: Command<K, V>) -> (K, V) {
    match command {
        Command::Set { key, value, .. } => (key, value),
        _ => unreachable!("only Set commands carry a timer"),
    }
}
