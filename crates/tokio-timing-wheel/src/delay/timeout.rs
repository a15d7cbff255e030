//! Timeouts on the wheel.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::delay::sleep::Sleep;

pin_project! {
    /// A future with a deadline on a [`TimingWheel`], created by
    /// [`TimingWheel::timeout`] and [`TimingWheel::timeout_at`].
    ///
    /// Resolves to `Ok` with the inner future's output if it completes
    /// first, else to `Err(Elapsed)` once the deadline has passed (never
    /// before it, within one tick after it). If the wheel stops first, it
    /// resolves at once to an `Elapsed` whose
    /// [`is_wheel_closed`](Elapsed::is_wheel_closed) is true, dropping the
    /// inner future, rather than waiting on a deadline nobody will signal.
    ///
    /// The inner future is polled before the deadline is checked.
    ///
    /// [`TimingWheel`]: crate::TimingWheel
    /// [`TimingWheel::timeout`]: crate::TimingWheel::timeout
    /// [`TimingWheel::timeout_at`]: crate::TimingWheel::timeout_at
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
    /// let quick = wheel.timeout(Duration::from_secs(1), async { 7 });
    /// assert_eq!(quick.await.unwrap(), 7);
    ///
    /// let slow = wheel.timeout(Duration::from_secs(1), std::future::pending::<()>());
    /// let elapsed = slow.await.unwrap_err();
    /// assert!(!elapsed.is_wheel_closed());
    /// # }
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    #[derive(Debug)]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        sleep: Sleep,
    }
}

impl<F> Timeout<F> {
    pub(crate) fn new(future: F, sleep: Sleep) -> Self {
        Timeout { future, sleep }
    }

    /// The inner future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// Takes the inner future out, dropping the deadline.
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(this.sleep).poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Err(Elapsed { closed: false })),
            Poll::Ready(Err(_)) => Poll::Ready(Err(Elapsed { closed: true })),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The error of a [`Timeout`] whose deadline came first.
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
/// let err = wheel
///     .timeout(Duration::from_millis(5), std::future::pending::<()>())
///     .await
///     .unwrap_err();
/// assert_eq!(err.to_string(), "deadline has elapsed");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed {
    closed: bool,
}

impl Elapsed {
    /// The wheel stopped before the deadline: the deadline did not pass,
    /// but nothing could signal it any more.
    pub fn is_wheel_closed(&self) -> bool {
        self.closed
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.closed {
            "timing wheel stopped before the deadline"
        } else {
            "deadline has elapsed"
        })
    }
}

impl std::error::Error for Elapsed {}
