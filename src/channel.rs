//! The bounded, ordered command channel from the handles to the driver.
//!
//! Built from well-kept parts: a `std` mutex around a `VecDeque` (the queue,
//! in send order), a Tokio `Semaphore` counting free slots (fair, so waiting
//! senders go in the order they started waiting), and an `AtomicWaker` for
//! the driver. The queue never holds more than the capacity, so once it has
//! grown to its working size nothing is allocated per command; a linked list
//! of blocks, as in Tokio's `mpsc`, allocates a block now and then. The
//! driver takes everything queued under one lock by swapping its own empty
//! buffer for the queue, so no command is copied on the way; the slots those
//! commands hold are freed only as the driver applies them, so the channel's
//! bound covers commands taken and not yet applied too.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use tokio::sync::{Semaphore, TryAcquireError};

struct Chan<T> {
    queue: Mutex<VecDeque<T>>,
    /// Free slots. Closed when the receiver closes or is dropped.
    slots: Semaphore,
    capacity: usize,
    rx_waker: AtomicWaker,
    senders: AtomicUsize,
}

impl<T> Chan<T> {
    fn lock(&self) -> MutexGuard<'_, VecDeque<T>> {
        // Pushes and pops are whole, so a poisoned queue is still sound.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A bounded channel of `capacity` (at least 1) commands.
pub(crate) fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let capacity = capacity.clamp(1, Semaphore::MAX_PERMITS);
    let chan = Arc::new(Chan {
        queue: Mutex::new(VecDeque::new()),
        slots: Semaphore::new(capacity),
        capacity,
        rx_waker: AtomicWaker::new(),
        senders: AtomicUsize::new(1),
    });
    (Sender(Arc::clone(&chan)), Receiver(chan))
}

/// Why `try_send` failed; the value comes back either way.
#[derive(Debug)]
pub(crate) enum TrySendError<T> {
    Full(T),
    Closed(T),
}

pub(crate) struct Sender<T>(Arc<Chan<T>>);

impl<T> Sender<T> {
    /// Waits for a free slot and queues `value`; gives it back if the
    /// receiver has closed. Cancel safe: dropped while waiting, nothing is
    /// queued.
    pub(crate) async fn send(&self, value: T) -> Result<(), T> {
        // Fast path: a free slot needs no waiter.
        if let Ok(slot) = self.0.slots.try_acquire() {
            slot.forget();
            return self.push(value);
        }
        match self.0.slots.acquire().await {
            Ok(slot) => {
                slot.forget();
                self.push(value)
            }
            Err(_) => Err(value),
        }
    }

    /// Queues `value` if a slot is free now.
    pub(crate) fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        match self.0.slots.try_acquire() {
            Ok(slot) => {
                slot.forget();
                self.push(value).map_err(TrySendError::Closed)
            }
            Err(TryAcquireError::NoPermits) => Err(TrySendError::Full(value)),
            Err(TryAcquireError::Closed) => Err(TrySendError::Closed(value)),
        }
    }

    fn push(&self, value: T) -> Result<(), T> {
        let was_empty = {
            let mut queue = self.0.lock();
            // Checked under the lock: `close` sets it under the same lock, so
            // nothing is queued after the receiver took its last batch.
            if self.0.slots.is_closed() {
                return Err(value);
            }
            queue.push_back(value);
            queue.len() == 1
        };
        // The receiver only waits after finding the queue empty under the
        // lock (with its waker registered first), so only the push that
        // makes the queue non-empty needs to wake it; later pushes find it
        // woken already or about to look again.
        if was_empty {
            self.0.rx_waker.wake();
        }
        Ok(())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.0.slots.is_closed()
    }

    /// Commands queued and not yet taken by the driver.
    pub(crate) fn queued(&self) -> usize {
        self.0.capacity - self.0.slots.available_permits()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Sender(Arc::clone(&self.0))
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.rx_waker.wake();
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("queued", &self.queued())
            .field("closed", &self.is_closed())
            .finish()
    }
}

pub(crate) struct Receiver<T>(Arc<Chan<T>>);

impl<T> Receiver<T> {
    /// Moves every queued command, in order, to the back of `out`. Returns
    /// how many, or `Ready(0)` once the channel is empty and every sender is
    /// gone (or it was closed). The commands keep their slots until
    /// [`release`](Self::release).
    pub(crate) fn poll_recv_all(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut VecDeque<T>,
    ) -> Poll<usize> {
        let n = self.try_recv_all(out);
        if n > 0 {
            return Poll::Ready(n);
        }
        self.0.rx_waker.register(cx.waker());
        // Look again: a send or the last sender's drop may have come between.
        let n = self.try_recv_all(out);
        if n > 0 || self.0.senders.load(Ordering::Acquire) == 0 || self.0.slots.is_closed() {
            return Poll::Ready(n);
        }
        Poll::Pending
    }

    /// Like [`poll_recv_all`](Self::poll_recv_all), without waiting.
    pub(crate) fn try_recv_all(&mut self, out: &mut VecDeque<T>) -> usize {
        let mut queue = self.0.lock();
        let n = queue.len();
        if out.is_empty() {
            // Trade buffers: the queue keeps `out`'s empty allocation, so
            // once both have grown to their working size nothing is
            // allocated or copied.
            std::mem::swap(&mut *queue, out);
        } else {
            out.append(&mut queue);
        }
        n
    }

    /// Frees the slots of `n` commands taken earlier and now applied.
    pub(crate) fn release(&self, n: usize) {
        if n > 0 {
            self.0.slots.add_permits(n);
        }
    }

    /// Refuses new commands; those already queued can still be taken.
    pub(crate) fn close(&mut self) {
        let _queue = self.0.lock();
        self.0.slots.close();
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("queued", &self.0.lock().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Context<'static> {
        Context::from_waker(futures::task::noop_waker_ref())
    }

    #[tokio::test]
    async fn keeps_order_and_bounds_the_queue() {
        let (tx, mut rx) = channel(2);
        tx.send(1).await.unwrap();
        tx.try_send(2).unwrap();
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        assert_eq!(tx.queued(), 2);
        let mut out = VecDeque::new();
        assert_eq!(rx.poll_recv_all(&mut noop(), &mut out), Poll::Ready(2));
        assert_eq!(out, [1, 2]);
        // Taken but not applied: the slots are still held.
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        rx.release(1);
        tx.try_send(3).unwrap();
        assert_eq!(rx.try_recv_all(&mut out), 1);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(tx.queued(), 2);
        assert_eq!(rx.poll_recv_all(&mut noop(), &mut out), Poll::Pending);
    }

    /// Taking into an empty buffer trades buffers, so neither side
    /// allocates once both have grown.
    #[test]
    fn taking_everything_trades_buffers_without_allocating() {
        let (tx, mut rx) = channel(64);
        let mut out = VecDeque::with_capacity(64);
        for round in 0..4 {
            for i in 0..64 {
                tx.try_send(round * 64 + i).unwrap();
            }
            assert_eq!(rx.try_recv_all(&mut out), 64);
            assert!(out.iter().copied().eq(round * 64..round * 64 + 64));
            out.clear();
            rx.release(64);
        }
        assert!(out.capacity() >= 64);
        assert!(rx.0.lock().capacity() >= 64);
    }

    /// Only a push into an empty queue wakes the receiver; pushes after it
    /// are found when the receiver runs, so none is missed.
    #[test]
    fn a_waiting_receiver_misses_no_push() {
        let (tx, mut rx) = channel(8);
        let mut out = VecDeque::new();
        let mut recv = tokio_test::task::spawn(());
        assert!(recv
            .enter(|cx, _| rx.poll_recv_all(cx, &mut out))
            .is_pending());
        tx.try_send(1).unwrap();
        assert!(recv.is_woken());
        tx.try_send(2).unwrap();
        assert_eq!(
            recv.enter(|cx, _| rx.poll_recv_all(cx, &mut out)),
            Poll::Ready(2)
        );
        assert!(recv
            .enter(|cx, _| rx.poll_recv_all(cx, &mut out))
            .is_pending());
        tx.try_send(3).unwrap();
        assert!(recv.is_woken());
        assert_eq!(
            recv.enter(|cx, _| rx.poll_recv_all(cx, &mut out)),
            Poll::Ready(1)
        );
        assert_eq!(out, [1, 2, 3]);
    }

    #[tokio::test]
    async fn ends_when_every_sender_is_gone() {
        let (tx, mut rx) = channel::<u8>(4);
        let tx2 = tx.clone();
        tx2.send(7).await.unwrap();
        drop(tx);
        drop(tx2);
        let mut out = VecDeque::new();
        assert_eq!(rx.poll_recv_all(&mut noop(), &mut out), Poll::Ready(1));
        assert_eq!(rx.poll_recv_all(&mut noop(), &mut out), Poll::Ready(0));
    }

    #[tokio::test]
    async fn close_refuses_new_commands_but_keeps_queued_ones() {
        let (tx, mut rx) = channel(4);
        tx.send(1).await.unwrap();
        rx.close();
        assert!(tx.is_closed());
        assert_eq!(tx.send(2).await, Err(2));
        assert!(matches!(tx.try_send(3), Err(TrySendError::Closed(3))));
        let mut out = VecDeque::new();
        assert_eq!(rx.try_recv_all(&mut out), 1);
        assert_eq!(rx.poll_recv_all(&mut noop(), &mut out), Poll::Ready(0));
    }

    #[tokio::test]
    async fn a_waiting_sender_is_released_by_a_receive_or_a_close() {
        let (tx, mut rx) = channel(1);
        tx.send(1).await.unwrap();
        let tx2 = tx.clone();
        let waiting = tokio::spawn(async move { tx2.send(2).await });
        tokio::task::yield_now().await;
        let mut out = VecDeque::new();
        rx.try_recv_all(&mut out);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the slot is held until released");
        rx.release(1);
        assert_eq!(waiting.await.unwrap(), Ok(()));
        let tx3 = tx.clone();
        let blocked = tokio::spawn(async move { tx3.send(3).await });
        tokio::task::yield_now().await;
        rx.close();
        assert_eq!(blocked.await.unwrap(), Err(3));
    }
}
