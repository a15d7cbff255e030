//! The bounded, ordered command channel from the handles to the driver.
//!
//! One `std` mutex guards everything a send decides on: the queue (a
//! `VecDeque`, in send order), the count of free slots, the senders waiting
//! for one, and whether the channel is closed. A send that finds a free slot
//! costs one lock and one push, the common case on the hot
//! `set_timer`/`cancel_timer` path.
//!
//! A sender that finds no room joins a first-come-first-served line (a slab
//! of wakers and a queue of their keys). Freed slots are granted to the
//! line in order before anyone else may take them, and a granted slot is
//! reserved for its waiter until it runs, so a waiting sender is never
//! overtaken and a sender that got through goes straight back to the fast
//! path. A waiter dropped with a slot granted hands the slot to the next in
//! line. This is the fair semaphore of Tokio's bounded `mpsc`, kept under
//! the queue's own lock so the fast path needs no second atomic operation.
//!
//! The queue never holds more than the capacity, and the line never more
//! waiters than there are blocked senders, so once both have grown to their
//! working size nothing is allocated per command. The driver takes
//! everything queued under one lock by swapping its own empty buffer for the
//! queue, so no command is copied on the way; the slots those commands hold
//! are freed only as the driver applies them, so the channel's bound covers
//! commands taken and not yet applied too.

use std::collections::VecDeque;
use std::fmt;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::task::AtomicWaker;
use slab::Slab;

struct State<T> {
    queue: VecDeque<T>,
    /// Slots neither queued, taken and unapplied, nor granted to a waiter.
    /// Non-zero with anyone in line only while [`Chan::grant`] has let go
    /// of the lock to wake those it granted; nobody else takes a slot then.
    free: usize,
    /// Senders waiting for a slot, by key.
    waiters: Slab<Waiter>,
    /// The keys of waiters not yet granted a slot, first come first.
    line: VecDeque<usize>,
    /// Set when the receiver closes or is dropped.
    closed: bool,
}

struct Waiter {
    waker: Option<Waker>,
    granted: bool,
}

/// Wakers gathered under the lock and woken after it is released, a few at
/// a time so nothing is allocated.
struct Wakes {
    wakers: [Option<Waker>; Wakes::ROOM],
    len: usize,
}

impl Wakes {
    const ROOM: usize = 8;

    fn new() -> Self {
        Wakes {
            wakers: Default::default(),
            len: 0,
        }
    }

    fn is_full(&self) -> bool {
        self.len == Self::ROOM
    }

    fn push(&mut self, waker: Option<Waker>) {
        self.wakers[self.len] = waker;
        self.len += 1;
    }

    fn wake(&mut self) {
        for waker in &mut self.wakers[..self.len] {
            if let Some(waker) = waker.take() {
                waker.wake();
            }
        }
        self.len = 0;
    }
}

impl<T> State<T> {
    /// Grants free slots to the line in order, gathering the wakers of
    /// those granted; returns whether some are left to grant once `wakes`
    /// is full.
    fn grant(&mut self, wakes: &mut Wakes) -> bool {
        while self.free > 0 && !self.line.is_empty() {
            if wakes.is_full() {
                return true;
            }
            if let Some(key) = self.line.pop_front() {
                self.free -= 1;
                let waiter = &mut self.waiters[key];
                waiter.granted = true;
                wakes.push(waiter.waker.take());
            }
        }
        false
    }

    /// Takes waiter `key` out of the line; a slot granted to it goes to the
    /// next in line (or back to the free count).
    fn leave(&mut self, key: usize) {
        let waiter = self.waiters.remove(key);
        if waiter.granted {
            self.free += 1;
        } else if let Some(at) = self.line.iter().position(|&k| k == key) {
            self.line.remove(at);
        }
    }
}

struct Chan<T> {
    state: Mutex<State<T>>,
    capacity: usize,
    /// `State::closed`, readable without the lock.
    closed: AtomicBool,
    rx_waker: AtomicWaker,
    senders: AtomicUsize,
}

impl<T> Chan<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // Every change under the lock is whole, so a poisoned state is still
        // sound.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grants free slots to the line and wakes those granted.
    fn grant<'a>(&'a self, mut state: MutexGuard<'a, State<T>>) {
        let mut wakes = Wakes::new();
        loop {
            let more = state.grant(&mut wakes);
            drop(state);
            wakes.wake();
            if !more {
                return;
            }
            state = self.lock();
        }
    }
}

/// A bounded channel of `capacity` (at least 1) commands.
pub(crate) fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let capacity = capacity.max(1);
    let chan = Arc::new(Chan {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            free: capacity,
            waiters: Slab::new(),
            line: VecDeque::new(),
            closed: false,
        }),
        capacity,
        closed: AtomicBool::new(false),
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

/// A sender's place in line; dropped before its slot is used, it leaves
/// the line and hands on a slot granted to it.
struct InLine<'a, T> {
    chan: &'a Chan<T>,
    key: Option<usize>,
}

impl<T> InLine<'_, T> {
    /// Ready with `true` once a slot is this sender's, `false` if the
    /// channel closed first.
    fn poll_slot(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut state = self.chan.lock();
        if state.closed {
            if let Some(key) = self.key.take() {
                state.leave(key);
            }
            return Poll::Ready(false);
        }
        match self.key {
            None if state.free > 0 && state.line.is_empty() => {
                state.free -= 1;
                Poll::Ready(true)
            }
            None => {
                let key = state.waiters.insert(Waiter {
                    waker: Some(cx.waker().clone()),
                    granted: false,
                });
                state.line.push_back(key);
                self.key = Some(key);
                Poll::Pending
            }
            Some(key) => {
                let waiter = &mut state.waiters[key];
                if waiter.granted {
                    state.waiters.remove(key);
                    self.key = None;
                    return Poll::Ready(true);
                }
                match &mut waiter.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    waker => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for InLine<'_, T> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut state = self.chan.lock();
            state.leave(key);
            self.chan.grant(state);
        }
    }
}

impl<T> Sender<T> {
    /// Waits for a free slot and queues `value`; gives it back if the
    /// receiver has closed. Senders that find no room are served in the
    /// order they came. Cancel safe: dropped while waiting, nothing is
    /// queued.
    pub(crate) async fn send(&self, value: T) -> Result<(), T> {
        let value = match self.try_send(value) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(value)) => return Err(value),
            Err(TrySendError::Full(value)) => value,
        };
        let mut place = InLine {
            chan: &self.0,
            key: None,
        };
        if !poll_fn(|cx| place.poll_slot(cx)).await {
            return Err(value);
        }
        let was_empty = {
            let mut state = self.0.lock();
            if state.closed {
                // Closed since the slot became ours: give it back.
                state.free += 1;
                return Err(value);
            }
            state.queue.push_back(value);
            state.queue.len() == 1
        };
        if was_empty {
            self.0.rx_waker.wake();
        }
        Ok(())
    }

    /// Queues `value` if a slot is free now (never while senders wait in
    /// line).
    #[inline(always)]
    pub(crate) fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        self.try_send_with(move || value)
    }

    /// Like [`try_send`](Self::try_send), with the value made by `make`
    /// where it is pushed. `set_timer` and `cancel_timer` build their
    /// command this way, so that it is built in the queue rather than moved
    /// there through stack copies (BENCHMARKS.md has the figures).
    #[inline(always)]
    pub(crate) fn try_send_with(&self, make: impl FnOnce() -> T) -> Result<(), TrySendError<T>> {
        let was_empty = {
            let mut state = self.0.lock();
            // Checked under the lock: `close` sets it under the same lock, so
            // nothing is queued after the receiver took its last batch.
            if state.closed {
                return Err(TrySendError::Closed(make()));
            }
            if state.free == 0 || !state.line.is_empty() {
                return Err(TrySendError::Full(make()));
            }
            state.free -= 1;
            if state.queue.len() < state.queue.capacity() {
                // Room without growing: no call (and no unwinding path) lies
                // between making the command and storing it, so where the
                // push is inlined the command is built straight into its
                // slot rather than on the stack first.
                state.queue.push_back(make());
            } else {
                let value = make();
                state.queue.push_back(value);
            }
            state.queue.len() == 1
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
        self.0.closed.load(Ordering::Acquire)
    }

    /// Commands queued, taken by the driver and not yet applied, or about
    /// to be queued by a sender granted a slot.
    pub(crate) fn queued(&self) -> usize {
        self.0.capacity - self.0.lock().free
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
        // The waker first, then one look (the driver has just taken what was
        // queued, so a look before registering would mostly find nothing):
        // a send after the look wakes the receiver to look again.
        self.0.rx_waker.register(cx.waker());
        // Whether every sender is gone is read *before* the look, so a last
        // sender that pushes and then leaves is either seen leaving after
        // its push is taken here, or wakes the receiver to look once more.
        let gone = self.0.senders.load(Ordering::Acquire) == 0;
        let n = self.try_recv_all(out);
        if n > 0 || gone || self.0.closed.load(Ordering::Acquire) {
            return Poll::Ready(n);
        }
        Poll::Pending
    }

    /// Like [`poll_recv_all`](Self::poll_recv_all), without waiting.
    pub(crate) fn try_recv_all(&mut self, out: &mut VecDeque<T>) -> usize {
        let mut state = self.0.lock();
        let n = state.queue.len();
        if n == 0 {
            return 0;
        }
        if out.is_empty() {
            // Trade buffers: the queue keeps `out`'s empty allocation, so
            // once both have grown to their working size nothing is
            // allocated or copied.
            std::mem::swap(&mut state.queue, out);
        } else {
            out.append(&mut state.queue);
        }
        n
    }

    /// Frees the slots of `n` commands taken earlier and now applied,
    /// granting them to waiting senders first.
    pub(crate) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut state = self.0.lock();
        state.free += n;
        debug_assert!(
            state.free <= self.0.capacity,
            "free={} capacity={}",
            state.free,
            self.0.capacity
        );
        if !state.line.is_empty() {
            self.0.grant(state);
        }
    }

    /// Refuses new commands; those already queued can still be taken.
    /// Waiting senders wake and get their commands back.
    pub(crate) fn close(&mut self) {
        let mut state = self.0.lock();
        state.closed = true;
        self.0.closed.store(true, Ordering::Release);
        let mut wakes = Wakes::new();
        loop {
            while !wakes.is_full() {
                let Some(key) = state.line.pop_front() else {
                    break;
                };
                wakes.push(state.waiters[key].waker.take());
            }
            let more = !state.line.is_empty();
            drop(state);
            wakes.wake();
            if !more {
                return;
            }
            state = self.0.lock();
        }
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
            .field("queued", &self.0.lock().queue.len())
            .finish()
    }
}

/// Queues `$command` on the channel `$shard`, inside an `async fn` that
/// returns the handle's `Error`: a free slot is taken directly, the common
/// case, and the channel's own send future is entered only when it is full.
/// A macro rather than a helper `async fn`, so that the hot commands poll
/// one future, not two.
macro_rules! queue {
    ($shard:expr, $command:expr) => {{
        let shard = $shard;
        match shard.try_send_with(move || $command) {
            Ok(()) => Ok(()),
            Err($crate::channel::TrySendError::Full(command)) => shard
                .send(command)
                .await
                .map_err(|_| $crate::error::Error::closed()),
            Err($crate::channel::TrySendError::Closed(_)) => Err($crate::error::Error::closed()),
        }
    }};
}
pub(crate) use queue;

#[cfg(test)]
mod tests;
