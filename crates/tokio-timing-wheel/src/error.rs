//! The error returned by the handle's operations.

use std::any::Any;
use std::fmt;
use std::sync::Mutex;

/// Why an operation on a [`TimingWheel`](crate::TimingWheel) failed.
///
/// An error from a call that carried a timer (`set_timer` and its variants)
/// hands the key and value back through [`Error::into_timer`], so a failed
/// call never loses data.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tokio_timing_wheel::TimingWheel;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (wheel, _expired) = TimingWheel::<u64, String>::new();
/// wheel.stop().await.unwrap();
///
/// let err = wheel
///     .set_timer(1, "hello".to_string(), Duration::from_secs(1))
///     .await
///     .unwrap_err();
/// assert!(err.is_closed());
/// assert_eq!(err.into_timer::<u64, String>(), Some((1, "hello".to_string())));
/// # }
/// ```
pub struct Error {
    kind: Kind,
    timer: Option<Mutex<Box<dyn Any + Send>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Closed,
    Full,
    ReceiverDropped,
    AtCapacity,
}

impl Error {
    pub(crate) fn closed() -> Self {
        Error {
            kind: Kind::Closed,
            timer: None,
        }
    }

    // The constructors that box a timer are kept out of line and marked
    // cold, so the send paths that may return them stay small (see
    // `TimingWheel::admit`).
    #[cold]
    #[inline(never)]
    pub(crate) fn closed_with<K: Send + 'static, V: Send + 'static>(key: K, value: V) -> Self {
        Self::with_timer(Kind::Closed, key, value)
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn full_with<K: Send + 'static, V: Send + 'static>(key: K, value: V) -> Self {
        Self::with_timer(Kind::Full, key, value)
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn receiver_dropped_with<K: Send + 'static, V: Send + 'static>(
        key: K,
        value: V,
    ) -> Self {
        Self::with_timer(Kind::ReceiverDropped, key, value)
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn at_capacity_with<K: Send + 'static, V: Send + 'static>(key: K, value: V) -> Self {
        Self::with_timer(Kind::AtCapacity, key, value)
    }

    pub(crate) fn receiver_dropped() -> Self {
        Error {
            kind: Kind::ReceiverDropped,
            timer: None,
        }
    }

    fn with_timer<K: Send + 'static, V: Send + 'static>(kind: Kind, key: K, value: V) -> Self {
        Error {
            kind,
            timer: Some(Mutex::new(Box::new((key, value)))),
        }
    }

    /// The wheel's driver has stopped: [`stop`](crate::TimingWheel::stop)
    /// was called, or the runtime that ran it shut down.
    pub fn is_closed(&self) -> bool {
        self.kind == Kind::Closed
    }

    /// The command channel was full and the call was not allowed to wait
    /// (only [`try_set_timer`](crate::TimingWheel::try_set_timer) returns
    /// this).
    pub fn is_full(&self) -> bool {
        self.kind == Kind::Full
    }

    /// The [`Expirations`](crate::Expirations) stream was dropped, so a new
    /// timer could never be delivered and was refused.
    pub fn is_receiver_dropped(&self) -> bool {
        self.kind == Kind::ReceiverDropped
    }

    /// The wheel holds as many timers as
    /// [`Builder::max_pending`](crate::Builder::max_pending) allows, so a new
    /// one was refused.
    pub fn is_at_capacity(&self) -> bool {
        self.kind == Kind::AtCapacity
    }

    /// The key and value of the timer the failed call carried, if it carried
    /// one of these types.
    pub fn into_timer<K: 'static, V: 'static>(self) -> Option<(K, V)> {
        let boxed = self
            .timer?
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        boxed.downcast::<(K, V)>().ok().map(|timer| *timer)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("has_timer", &self.timer.is_some())
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::Closed => "timing wheel has stopped",
            Kind::Full => "timing wheel command channel is full",
            Kind::ReceiverDropped => "timing wheel expiration stream was dropped",
            Kind::AtCapacity => "timing wheel holds as many timers as it may",
        })
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_the_timer_back_only_as_its_own_type() {
        let err = Error::full_with(3u32, vec![1u8]);
        assert!(err.is_full() && !err.is_closed());
        assert_eq!(err.to_string(), "timing wheel command channel is full");
        assert_eq!(err.into_timer::<u32, Vec<u8>>(), Some((3, vec![1])));
        assert_eq!(
            Error::closed_with(3u32, 4u32).into_timer::<u64, u32>(),
            None
        );
        assert_eq!(Error::closed().into_timer::<u32, u32>(), None);
    }

    #[test]
    fn is_send_sync_and_an_error() {
        fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
        assert_error::<Error>();
    }
}
