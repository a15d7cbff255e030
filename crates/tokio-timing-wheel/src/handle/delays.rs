//! The wheel's delay futures, made from a handle: [`Sleep`],
//! [`Timeout`] and [`Interval`], which share the wheel's driver instead of
//! a runtime timer each.

use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::TimingWheel;
use crate::delay::interval::Interval;
use crate::delay::sleep::Sleep;
use crate::delay::timeout::Timeout;

impl<K, V> TimingWheel<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Send + 'static,
{
    /// A future that completes `delay` from now (never before, within one
    /// tick after), on this wheel: no task and no runtime timer per sleep.
    /// It resolves to `Err` with [`Error::is_closed`](crate::Error::is_closed) at once if the wheel
    /// stops first. See [`Sleep`].
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
    /// wheel.sleep(Duration::from_secs(3)).await.unwrap();
    /// assert_eq!(start.elapsed(), Duration::from_secs(3));
    /// # }
    /// ```
    pub fn sleep(&self, delay: Duration) -> Sleep {
        self.sleeps.sleep(delay)
    }

    /// Like [`sleep`](Self::sleep), until an instant. A deadline already
    /// past completes at once.
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
    /// let deadline = Instant::now() + Duration::from_millis(20);
    /// wheel.sleep_until(deadline).await.unwrap();
    /// assert!(Instant::now() >= deadline);
    /// # }
    /// ```
    pub fn sleep_until(&self, deadline: Instant) -> Sleep {
        self.sleeps.sleep_until(deadline)
    }

    /// Runs `future` with a deadline `delay` from now, like
    /// `tokio::time::timeout`, on this wheel. See [`Timeout`].
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
    /// let slow = tokio::time::sleep(Duration::from_secs(10));
    /// assert!(wheel.timeout(Duration::from_secs(1), slow).await.is_err());
    /// # }
    /// ```
    #[inline]
    pub fn timeout<F: std::future::Future>(&self, delay: Duration, future: F) -> Timeout<F> {
        Timeout::new(future, self.sleeps.sleep(delay))
    }

    /// Like [`timeout`](Self::timeout), with an absolute deadline.
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
    /// let deadline = Instant::now() + Duration::from_secs(1);
    /// assert_eq!(wheel.timeout_at(deadline, async { "done" }).await, Ok("done"));
    /// # }
    /// ```
    pub fn timeout_at<F: std::future::Future>(&self, deadline: Instant, future: F) -> Timeout<F> {
        Timeout::new(future, self.sleeps.sleep_until(deadline))
    }

    /// A stream of ticks every `period`, the first at once. See
    /// [`Interval`]. A period shorter than the wheel's tick is raised to
    /// one tick.
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
    /// let mut interval = wheel.interval(Duration::from_secs(1));
    /// interval.tick().await; // at once
    /// interval.tick().await;
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// # }
    /// ```
    pub fn interval(&self, period: Duration) -> Interval {
        Interval::new(self.sleeps.clone(), Instant::now(), period)
    }

    /// Like [`interval`](Self::interval), with the first tick at `start`.
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
    /// let start = Instant::now() + Duration::from_secs(5);
    /// let mut interval = wheel.interval_at(start, Duration::from_secs(1));
    /// assert_eq!(interval.tick().await, Some(start));
    /// # }
    /// ```
    pub fn interval_at(&self, start: Instant, period: Duration) -> Interval {
        Interval::new(self.sleeps.clone(), start, period)
    }
}
