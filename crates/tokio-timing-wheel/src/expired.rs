//! An expired timer, as the stream yields it.

use tokio::time::Instant;

/// A timer whose deadline has passed, yielded by
/// [`Expirations`](crate::Expirations).
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
/// let (wheel, mut expired) = TimingWheel::new();
/// wheel.set_timer("conn-7", 7u32, Duration::from_millis(30)).await.unwrap();
///
/// let e = expired.next().await.unwrap();
/// assert_eq!(*e.key(), "conn-7");
/// assert!(Instant::now() >= e.deadline());
/// let (key, value) = e.into_parts();
/// assert_eq!((key, value), ("conn-7", 7));
/// # }
/// ```
#[derive(Debug)]
pub struct Expired<K, V> {
    key: K,
    value: V,
    deadline: Instant,
}

impl<K, V> Expired<K, V> {
    pub(crate) fn new(key: K, value: V, deadline: Instant) -> Self {
        Expired {
            key,
            value,
            deadline,
        }
    }

    /// The timer's key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// The timer's value.
    pub fn value(&self) -> &V {
        &self.value
    }

    /// The timer's deadline, rounded up to the wheel's tick, or, for a
    /// timer fired before its tick's end, to the 256th of the tick its
    /// deadline falls in. The timer was not handed out before this instant.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key and the value.
    pub fn into_parts(self) -> (K, V) {
        (self.key, self.value)
    }
}
