//! The expiration stream and the queue the driver fills it from.
//!
//! The driver never waits for the consumer: it appends expired timers to a
//! shared queue under a short lock and wakes the stream. The stream swaps the
//! whole queue out at once, so both sides keep their buffers' capacity and
//! nothing is allocated per timer once warm. The queue holds only timers that
//! existed anyway, so its memory is bounded by the timers set.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream};
use futures::task::AtomicWaker;

use crate::expired::Expired;
use crate::limit::PendingLimit;

/// State shared by the driver, the handles and the stream.
pub(crate) struct Shared<K, V> {
    queue: Mutex<Queue<K, V>>,
    waker: AtomicWaker,
    receiver_alive: AtomicBool,
    /// The bound on pending timers, if one was set.
    pub(crate) limit: Option<PendingLimit>,
    /// Drivers that may still deliver a timer; the stream ends when the
    /// last one is done (stopped, gone, or left with no handle and nothing
    /// to fire; live sleeps may keep it running after that).
    drivers: std::sync::atomic::AtomicUsize,
    /// Timers pending in the drivers' wheels, as each driver last published
    /// it (for `TimingWheel::len`).
    len: std::sync::atomic::AtomicUsize,
}

pub(crate) struct Queue<K, V> {
    pub(crate) items: VecDeque<Expired<K, V>>,
    closed: bool,
}

impl<K, V> Shared<K, V> {
    pub(crate) fn new(limit: Option<PendingLimit>, drivers: usize) -> Self {
        Shared {
            limit,
            drivers: std::sync::atomic::AtomicUsize::new(drivers),
            len: std::sync::atomic::AtomicUsize::new(0),
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                closed: false,
            }),
            waker: AtomicWaker::new(),
            receiver_alive: AtomicBool::new(true),
        }
    }

    /// Locks the queue for the driver to append to; call
    /// [`wake`](Self::wake) after the guard is dropped.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Queue<K, V>> {
        // A panic while the lock is held cannot leave the queue half-written
        // (pushes and swaps are whole), so a poisoned lock is still usable.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn wake(&self) {
        self.waker.wake();
    }

    /// Gives `n` places back to the pending limit, if there is one.
    pub(crate) fn release(&self, n: usize) {
        if let Some(limit) = &self.limit {
            limit.release(n);
        }
    }

    /// One driver's wheel went from `old` timers to `new`.
    pub(crate) fn add_len(&self, new: usize, old: usize) {
        if new > old {
            self.len.fetch_add(new - old, Ordering::Relaxed);
        } else {
            self.len.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    /// Timers pending in every driver's wheel, as last published.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub(crate) fn receiver_alive(&self) -> bool {
        self.receiver_alive.load(Ordering::Acquire)
    }

    /// One driver will deliver nothing more; after the last, the stream
    /// ends once its queue is empty.
    pub(crate) fn driver_done(&self) {
        if self.drivers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.close();
        }
    }

    /// Every driver is done: the stream ends once the queue is empty.
    fn close(&self) {
        self.lock().closed = true;
        self.wake();
    }
}

/// The stream of expired timers of a [`TimingWheel`](crate::TimingWheel).
///
/// Yields each timer once, in deadline order (timers with the same deadline
/// tick in the order they were set, a timer moved while pending anywhere
/// within its tick). It ends after the driver stops: after
/// [`stop`](crate::TimingWheel::stop), or once every handle is dropped and
/// every pending timer has fired, or when the runtime shuts down. Timers that
/// expired before that are still yielded first.
///
/// Reading slowly never holds up the wheel: expired timers wait in a queue
/// (holding memory only for timers that exist anyway) while commands keep
/// flowing, so a consumer may set timers from inside its loop.
///
/// Dropping the stream discards the timers waiting in it. Timers that expire
/// afterwards are dropped too (counted in [`Stats::discarded`]), and new
/// `set_timer` and `move_timer` calls fail with
/// [`Error::is_receiver_dropped`], handing the timer back.
///
/// [`Stats::discarded`]: crate::Stats::discarded
/// [`Error::is_receiver_dropped`]: crate::Error::is_receiver_dropped
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
/// let (wheel, expired) = TimingWheel::new();
/// wheel.set_timer(2, "later", Duration::from_secs(2)).await.unwrap();
/// wheel.set_timer(1, "sooner", Duration::from_secs(1)).await.unwrap();
/// drop(wheel); // pending timers still fire, then the stream ends
///
/// let keys: Vec<u32> = expired.map(|e| *e.key()).collect().await;
/// assert_eq!(keys, [1, 2]);
/// # }
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct Expirations<K, V> {
    shared: Arc<Shared<K, V>>,
    buffer: VecDeque<Expired<K, V>>,
    done: bool,
}

impl<K, V> Expirations<K, V> {
    pub(crate) fn new(shared: Arc<Shared<K, V>>) -> Self {
        Expirations {
            shared,
            buffer: VecDeque::new(),
            done: false,
        }
    }

    /// Waits for the next expired timer; `None` once the stream has ended.
    ///
    /// The same as `StreamExt::next`, without the import.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped before it completes, no timer
    /// is lost; the next call yields it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, mut expired) = TimingWheel::new();
    /// wheel.set_timer(1u8, 'a', Duration::from_secs(1)).await.unwrap();
    /// assert_eq!(expired.recv().await.unwrap().into_parts(), (1, 'a'));
    /// wheel.stop().await.unwrap();
    /// assert!(expired.recv().await.is_none());
    /// # }
    /// ```
    pub async fn recv(&mut self) -> Option<Expired<K, V>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Expired timers ready to be yielded without waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, expired) = TimingWheel::new();
    /// wheel.set_timer(1u8, (), Duration::ZERO).await.unwrap();
    /// wheel.set_timer(2u8, (), Duration::ZERO).await.unwrap();
    /// wheel.stats().await.unwrap(); // the driver has fired what is due
    /// assert_eq!(expired.ready_len(), 2);
    /// # }
    /// ```
    pub fn ready_len(&self) -> usize {
        self.buffer.len() + self.shared.lock().items.len()
    }
}

impl<K, V> Stream for Expirations<K, V> {
    type Item = Expired<K, V>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(item) = this.buffer.pop_front() {
            return Poll::Ready(Some(item));
        }
        if this.done {
            return Poll::Ready(None);
        }
        // Register before looking, so a push after the look still wakes us.
        this.shared.waker.register(cx.waker());
        let closed = {
            let mut queue = this.shared.lock();
            std::mem::swap(&mut queue.items, &mut this.buffer);
            queue.closed
        };
        match this.buffer.pop_front() {
            Some(item) => Poll::Ready(Some(item)),
            None if closed => {
                this.done = true;
                Poll::Ready(None)
            }
            None => Poll::Pending,
        }
    }
}

// The buffer is never pinned in place: the stream moves items out by value.
impl<K, V> Unpin for Expirations<K, V> {}

impl<K, V> FusedStream for Expirations<K, V> {
    fn is_terminated(&self) -> bool {
        self.done && self.buffer.is_empty()
    }
}

impl<K, V> Drop for Expirations<K, V> {
    fn drop(&mut self) {
        self.shared.receiver_alive.store(false, Ordering::Release);
        let discarded = std::mem::take(&mut self.shared.lock().items);
        drop(discarded);
    }
}

impl<K, V> fmt::Debug for Expirations<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Expirations")
            .field("buffered", &self.buffer.len())
            .field("done", &self.done)
            .finish()
    }
}
