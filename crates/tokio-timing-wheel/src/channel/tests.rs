//! The channel's tests: ordering, fairness to waiting senders, and that
//! every slot is accounted for.

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
