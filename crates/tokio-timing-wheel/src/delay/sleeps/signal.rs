//! How sleeps tell the driver to look at their next tick again, and how the
//! driver learns that no sleep and no handle is left: a flag, a count and a
//! waker, looked at on every driver turn for a few instructions where a
//! channel of `()` cost some hundreds.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::task::AtomicWaker;

struct Inner {
    waker: AtomicWaker,
    /// Raised since the receiver last looked.
    raised: AtomicBool,
    /// Live [`Signaller`]s.
    senders: AtomicUsize,
    /// The receiver closed or is gone.
    closed: AtomicBool,
}

/// A new signal: its first signaller, and its receiver.
pub(crate) fn signal() -> (Signaller, SignalReceiver) {
    let inner = Arc::new(Inner {
        waker: AtomicWaker::new(),
        raised: AtomicBool::new(false),
        senders: AtomicUsize::new(1),
        closed: AtomicBool::new(false),
    });
    (Signaller(Arc::clone(&inner)), SignalReceiver(inner))
}

/// The sleeps' side: every handle's sleeps and every shard hold one, so the
/// last to go tells the driver nobody is left to wait.
pub(crate) struct Signaller(Arc<Inner>);

impl Signaller {
    /// Tells the receiver to look again (nothing, once it is closed).
    pub(crate) fn raise(&self) {
        if !self.is_closed() {
            self.0.raised.store(true, Ordering::Release);
            self.0.waker.wake();
        }
    }

    /// Whether the receiver closed or is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Acquire)
    }
}

impl Clone for Signaller {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::Relaxed);
        Signaller(Arc::clone(&self.0))
    }
}

impl Drop for Signaller {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.waker.wake();
        }
    }
}

impl std::fmt::Debug for Signaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signaller").finish_non_exhaustive()
    }
}

/// The driver's side.
pub(crate) struct SignalReceiver(Arc<Inner>);

impl SignalReceiver {
    /// `Ready(true)` if raised since the last look, `Ready(false)` once
    /// every signaller is gone, else `Pending` until one of those happens.
    pub(crate) fn poll_raised(&self, cx: &mut Context<'_>) -> Poll<bool> {
        self.0.waker.register(cx.waker());
        // The count first: once it reads none left, every raise made before
        // the last signaller went is seen by the look that follows. A
        // signaller going after the count was read wakes the receiver to
        // look again.
        let gone = self.0.senders.load(Ordering::Acquire) == 0;
        if self.take() {
            return Poll::Ready(true);
        }
        if gone {
            return Poll::Ready(false);
        }
        Poll::Pending
    }

    /// Whether the signal was raised since the last look, lowering it.
    pub(crate) fn take(&self) -> bool {
        self.0.raised.load(Ordering::Relaxed) && self.0.raised.swap(false, Ordering::Acquire)
    }

    /// Tells the signallers nobody listens any more.
    pub(crate) fn close(&self) {
        self.0.closed.store(true, Ordering::Release);
    }
}

impl Drop for SignalReceiver {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for SignalReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalReceiver").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    fn poll(rx: &SignalReceiver) -> Poll<bool> {
        rx.poll_raised(&mut Context::from_waker(Waker::noop()))
    }

    /// A raise is seen once; the last signaller going is seen after any
    /// raise it made; a closed receiver is seen by the signallers.
    #[test]
    fn raised_once_then_gone() {
        let (tx, rx) = signal();
        assert_eq!(poll(&rx), Poll::Pending);
        tx.raise();
        tx.raise();
        assert_eq!(poll(&rx), Poll::Ready(true));
        assert_eq!(poll(&rx), Poll::Pending, "seen once");
        let other = tx.clone();
        drop(tx);
        assert_eq!(poll(&rx), Poll::Pending, "one signaller is left");
        other.raise();
        drop(other);
        assert_eq!(poll(&rx), Poll::Ready(true));
        assert_eq!(poll(&rx), Poll::Ready(false));
        let (tx, rx) = signal();
        assert!(!tx.is_closed());
        rx.close();
        assert!(tx.is_closed());
        tx.raise();
        assert!(!rx.take(), "a closed receiver is not raised");
        drop(rx);
        assert!(tx.is_closed());
    }

    /// A raise wakes the task that waits on the receiver.
    #[tokio::test]
    async fn a_raise_wakes_the_waiting_receiver() {
        let (tx, rx) = signal();
        let waiting =
            tokio::spawn(async move { std::future::poll_fn(|cx| rx.poll_raised(cx)).await });
        tokio::task::yield_now().await;
        tx.raise();
        assert!(waiting.await.unwrap());
    }
}
