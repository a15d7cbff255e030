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
    /// command this way: built by the caller and passed in, it was moved
    /// through two more stack copies on its way to the queue, about a tenth
    /// of the instructions of a set and cancel pair.
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
        let n = self.try_recv_all(out);
        if n > 0 {
            return Poll::Ready(n);
        }
        self.0.rx_waker.register(cx.waker());
        // Look again: a send or the last sender's drop may have come between.
        // Whether every sender is gone is read *before* that look, so a last
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
        assert!(rx.0.lock().queue.capacity() >= 64);
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

    /// While a sender waits for room, a freed slot goes to it: a new
    /// `try_send` reports the channel full instead of overtaking.
    #[test]
    fn waiting_senders_are_not_overtaken() {
        let (tx, mut rx) = channel(1);
        tx.try_send(0).unwrap();
        let mut waiter = tokio_test::task::spawn(tx.send(1));
        assert!(waiter.poll().is_pending());
        let mut out = VecDeque::new();
        rx.try_recv_all(&mut out);
        rx.release(1);
        assert!(waiter.is_woken());
        assert!(matches!(tx.try_send(2), Err(TrySendError::Full(2))));
        assert_eq!(waiter.poll(), Poll::Ready(Ok(())));
        rx.try_recv_all(&mut out);
        rx.release(1);
        tx.try_send(2).unwrap();
        rx.try_recv_all(&mut out);
        assert_eq!(out, [0, 1, 2]);
    }

    /// Regression: while freed slots were left for waiting senders to
    /// claim when they ran, every other send had to queue behind them, so
    /// under steady load from several tasks each send waited its turn
    /// (eight producers ran 3.4 times slower). A freed slot is now granted
    /// to a waiter at once, and the rest are free to anyone.
    #[test]
    fn slots_left_after_granting_are_free_to_anyone() {
        let (tx, mut rx) = channel(4);
        for i in 0..4 {
            tx.try_send(i).unwrap();
        }
        let mut first = tokio_test::task::spawn(tx.send(4));
        let mut second = tokio_test::task::spawn(tx.send(5));
        assert!(first.poll().is_pending());
        assert!(second.poll().is_pending());
        let mut out = VecDeque::new();
        rx.try_recv_all(&mut out);
        rx.release(1);
        assert!(first.is_woken());
        assert!(!second.is_woken());
        assert!(matches!(tx.try_send(9), Err(TrySendError::Full(9))));
        rx.release(3);
        assert!(second.is_woken());
        // Two slots are left once both waiters have theirs: taken at once,
        // before either waiter has even run.
        tx.try_send(6).unwrap();
        tx.try_send(7).unwrap();
        assert!(matches!(tx.try_send(9), Err(TrySendError::Full(9))));
        assert_eq!(second.poll(), Poll::Ready(Ok(())));
        assert_eq!(first.poll(), Poll::Ready(Ok(())));
        rx.try_recv_all(&mut out);
        assert_eq!(out, [0, 1, 2, 3, 6, 7, 5, 4]);
    }

    /// Senders woken for granted slots are woken a few at a time, with the
    /// lock let go in between; a send made in that gap (here, by the
    /// wakers themselves) must not take a slot while a waiter is still in
    /// line.
    #[test]
    fn no_send_overtakes_the_line_while_it_is_being_granted() {
        use std::future::Future;
        use std::sync::Mutex as StdMutex;

        struct TrySendOnWake {
            tx: Sender<u32>,
            took: StdMutex<Vec<bool>>,
        }
        impl futures::task::ArcWake for TrySendOnWake {
            fn wake_by_ref(this: &Arc<Self>) {
                let took = this.tx.try_send(99).is_ok();
                this.took.lock().unwrap().push(took);
            }
        }

        const WAITERS: u32 = Wakes::ROOM as u32 + 1;
        let (tx, mut rx) = channel(WAITERS as usize + 1);
        for i in 0..=WAITERS {
            tx.try_send(i).unwrap();
        }
        let probe = Arc::new(TrySendOnWake {
            tx: tx.clone(),
            took: StdMutex::new(Vec::new()),
        });
        let waker = futures::task::waker(Arc::clone(&probe));
        let mut cx = Context::from_waker(&waker);
        let mut waiters: Vec<_> = (0..WAITERS).map(|i| Box::pin(tx.send(100 + i))).collect();
        for waiter in &mut waiters {
            assert!(waiter.as_mut().poll(&mut cx).is_pending());
        }
        let mut out = VecDeque::new();
        rx.try_recv_all(&mut out);
        rx.release(WAITERS as usize + 1);
        // The first few wake-ups come while the last waiter is still in
        // line; the last comes once every waiter holds a slot, with one
        // slot left over.
        let took = probe.took.lock().unwrap().clone();
        let (last, before) = took.split_last().unwrap();
        assert_eq!(took.len(), WAITERS as usize);
        assert!(before.iter().all(|&took| !took), "{took:?}");
        assert!(*last, "{took:?}");
        for waiter in &mut waiters {
            assert_eq!(waiter.as_mut().poll(&mut cx), Poll::Ready(Ok(())));
        }
    }

    /// A waiter granted a slot and then dropped hands the slot to the next
    /// in line; a waiter dropped while in line leaves it.
    #[test]
    fn a_dropped_waiter_hands_its_slot_on() {
        let (tx, mut rx) = channel(1);
        tx.try_send(0).unwrap();
        let mut first = tokio_test::task::spawn(tx.send(1));
        let mut second = tokio_test::task::spawn(tx.send(2));
        assert!(first.poll().is_pending());
        assert!(second.poll().is_pending());
        let mut out = VecDeque::new();
        rx.try_recv_all(&mut out);
        rx.release(1);
        assert!(first.is_woken());
        assert!(!second.is_woken());
        drop(first);
        assert!(second.is_woken());
        assert_eq!(second.poll(), Poll::Ready(Ok(())));
        rx.try_recv_all(&mut out);
        assert_eq!(out, [0, 2]);

        let mut third = tokio_test::task::spawn(tx.send(3));
        assert!(third.poll().is_pending());
        drop(third);
        rx.release(1);
        tx.try_send(4).unwrap();
        rx.try_recv_all(&mut out);
        assert_eq!(out, [0, 2, 4]);
    }

    /// Many senders on other threads, most of them waiting on a tiny
    /// channel and some giving up: every accepted value arrives once, in
    /// each sender's order, and nobody is left waiting on a free slot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_senders_on_many_threads_all_get_through() {
        const SENDERS: u64 = 8;
        const EACH: u64 = 2_000;
        let (tx, mut rx) = channel(2);
        let mut tasks = Vec::new();
        for s in 0..SENDERS {
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let mut sent = Vec::new();
                for i in 0..EACH {
                    let value = s * EACH + i;
                    if i % 7 == 3 {
                        // Give up at once if there is no room: exercises
                        // waiters dropped while queued or after a wake-up.
                        let send = tx.send(value);
                        tokio::pin!(send);
                        if futures::poll!(send.as_mut()).is_ready() {
                            sent.push(value);
                        }
                        continue;
                    }
                    tx.send(value).await.unwrap();
                    sent.push(value);
                }
                sent
            }));
        }
        drop(tx);
        let receiver = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut batch = VecDeque::new();
            loop {
                let n = std::future::poll_fn(|cx| rx.poll_recv_all(cx, &mut batch)).await;
                if n == 0 {
                    return got;
                }
                got.extend(batch.drain(..));
                rx.release(n);
                tokio::task::yield_now().await;
            }
        });
        let mut sent = Vec::new();
        for task in tasks {
            sent.extend(task.await.unwrap());
        }
        let got = tokio::time::timeout(std::time::Duration::from_secs(60), receiver)
            .await
            .expect("the receiver finishes once every sender is gone")
            .unwrap();
        for s in 0..SENDERS {
            let from = |v: &&u64| **v / EACH == s;
            let in_order: Vec<_> = got.iter().filter(from).collect();
            assert!(in_order.windows(2).all(|w| w[0] < w[1]), "sender {s}");
        }
        let mut got = got;
        got.sort_unstable();
        sent.sort_unstable();
        assert_eq!(got, sent);
    }

    /// The `send` future is `Send` for a `Send` value, so handles can be
    /// used from spawned tasks.
    #[test]
    fn the_send_future_is_send() {
        fn assert_send<F: Send>(_: &F) {}
        let (tx, _rx) = channel::<Vec<u8>>(1);
        assert_send(&tx.send(vec![1]));
    }

    /// Regression: the receiver looked at the queue again and only then
    /// read whether every sender was gone, so a last sender that pushed and
    /// dropped in between was taken for gone with its command unseen: the
    /// receiver reported the end, and the driver stopped reading with an
    /// accepted `set_timer` still queued.
    #[test]
    fn the_last_sender_leaving_never_hides_its_command() {
        const RUNS: u32 = 5_000;
        let mut hidden = 0;
        for _ in 0..RUNS {
            let (tx, mut rx) = channel::<u32>(4);
            let go = Arc::new(std::sync::Barrier::new(2));
            let sender = {
                let go = Arc::clone(&go);
                std::thread::spawn(move || {
                    go.wait();
                    tx.try_send(1).unwrap();
                })
            };
            go.wait();
            let mut out = VecDeque::new();
            let mut got = 0;
            loop {
                match rx.poll_recv_all(&mut noop(), &mut out) {
                    Poll::Ready(0) => break,
                    Poll::Ready(n) => got += n,
                    Poll::Pending => std::hint::spin_loop(),
                }
            }
            sender.join().unwrap();
            if got == 0 {
                hidden += 1;
            }
        }
        assert_eq!(
            hidden, 0,
            "the end was reported with a command queued in {hidden} of {RUNS} runs"
        );
    }

    /// Regression: a sender granted a slot that then found the channel
    /// closed, in the moment before it pushed, kept the slot, so the
    /// channel counted a command that was never queued.
    #[test]
    fn a_slot_granted_as_the_channel_closes_is_given_back() {
        use std::future::Future;

        const RUNS: u32 = 5_000;
        let mut kept = 0;
        for run in 0..RUNS {
            let (tx, mut rx) = channel::<u32>(1);
            tx.try_send(0).unwrap();
            let mut out = VecDeque::new();
            rx.try_recv_all(&mut out);
            let go = Arc::new(std::sync::Barrier::new(2));
            let sender = {
                let go = Arc::clone(&go);
                std::thread::spawn(move || {
                    let mut send = Box::pin(tx.send(1));
                    let mut cx = noop();
                    assert!(send.as_mut().poll(&mut cx).is_pending());
                    go.wait();
                    let sent = loop {
                        match send.as_mut().poll(&mut cx) {
                            Poll::Pending => std::hint::spin_loop(),
                            Poll::Ready(sent) => break sent.is_ok(),
                        }
                    };
                    drop(send);
                    (sent, tx)
                })
            };
            go.wait();
            rx.release(1);
            for _ in 0..run % 64 {
                std::hint::spin_loop();
            }
            rx.close();
            let (sent, tx) = sender.join().unwrap();
            out.clear();
            let n = rx.try_recv_all(&mut out);
            assert_eq!(n, usize::from(sent));
            rx.release(n);
            if tx.queued() != 0 {
                kept += 1;
            }
        }
        assert_eq!(kept, 0, "a slot was kept in {kept} of {RUNS} runs");
    }

    /// Random sequences of sends, waits, drops, partial releases and a
    /// close, checked after every step: slots are free only while nobody
    /// is in line, every slot is queued, taken, granted or free, and at
    /// the end nobody is stuck, every slot is free again, and every value
    /// accepted arrived exactly once.
    #[test]
    fn random_sequences_account_for_every_slot() {
        use futures::FutureExt;
        use std::future::Future;
        use std::pin::Pin;

        type Waiting = (u64, Pin<Box<dyn Future<Output = Result<(), u64>> + Send>>);

        struct Rng(u64);
        impl Rng {
            fn below(&mut self, n: u64) -> u64 {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0 % n
            }
        }

        fn poll_at(waiting: &mut Vec<Waiting>, i: usize, accepted: &mut Vec<u64>) -> bool {
            match waiting[i].1.as_mut().poll(&mut noop()) {
                Poll::Pending => false,
                Poll::Ready(result) => {
                    let (value, _) = waiting.remove(i);
                    match result {
                        Ok(()) => accepted.push(value),
                        Err(back) => assert_eq!(back, value),
                    }
                    true
                }
            }
        }

        for seed in 1..=3_000u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let capacity = 1 + rng.below(4) as usize;
            let (tx, mut rx) = channel::<u64>(capacity);
            let mut waiting: Vec<Waiting> = Vec::new();
            let (mut next, mut accepted, mut taken, mut unreleased) =
                (0u64, Vec::new(), VecDeque::new(), 0usize);
            for _ in 0..60 {
                match rng.below(7) {
                    0 => {
                        next += 1;
                        if tx.try_send(next).is_ok() {
                            accepted.push(next);
                        }
                    }
                    1 => {
                        next += 1;
                        let tx = tx.clone();
                        let value = next;
                        waiting.push((value, async move { tx.send(value).await }.boxed()));
                    }
                    2 | 3 if !waiting.is_empty() => {
                        let i = rng.below(waiting.len() as u64) as usize;
                        poll_at(&mut waiting, i, &mut accepted);
                    }
                    4 if !waiting.is_empty() => {
                        let i = rng.below(waiting.len() as u64) as usize;
                        drop(waiting.remove(i));
                    }
                    5 => {
                        unreleased += rx.try_recv_all(&mut taken);
                        let n = rng.below(unreleased as u64 + 1) as usize;
                        rx.release(n);
                        unreleased -= n;
                    }
                    6 if rng.below(10) == 0 => rx.close(),
                    _ => {}
                }
                let state = tx.0.lock();
                assert!(state.free == 0 || state.line.is_empty(), "seed {seed}");
                let granted = state.waiters.iter().filter(|(_, w)| w.granted).count();
                assert_eq!(
                    capacity - state.free,
                    state.queue.len() + unreleased + granted,
                    "seed {seed}"
                );
            }
            loop {
                unreleased += rx.try_recv_all(&mut taken);
                let released = std::mem::take(&mut unreleased);
                rx.release(released);
                let mut progressed = released > 0;
                let mut i = 0;
                while i < waiting.len() {
                    if poll_at(&mut waiting, i, &mut accepted) {
                        progressed = true;
                    } else {
                        i += 1;
                    }
                }
                if !progressed {
                    break;
                }
            }
            assert!(
                waiting.is_empty(),
                "seed {seed}: {} senders stuck",
                waiting.len()
            );
            assert_eq!(tx.queued(), 0, "seed {seed}");
            let mut got: Vec<_> = taken.into_iter().collect();
            got.sort_unstable();
            accepted.sort_unstable();
            assert_eq!(got, accepted, "seed {seed}");
        }
    }
}
