//! Unit tests of the sleeps' wheels.

use std::sync::Arc;
use std::time::Duration;

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A wheel's sleeps on a 1 ms clock starting now, with this thread's
/// shard and the driver's side.
fn sleeps() -> (Sleeps, Arc<Shard>, SleepDriver, SignalReceiver) {
    let (tx, rx) = signal();
    let sleeps = Sleeps::new(tx, Clock::new(Instant::now(), ms(1)));
    let shard = sleeps.shard();
    let driver = sleeps.driver();
    (sleeps, shard, driver, rx)
}

/// Sleeps with two shards, the driver's side, this thread's shard and
/// another thread's: it looks for a thread in the other shard (threads are
/// numbered as they first sleep, and the tests running beside these number
/// theirs too).
fn two_shards() -> (Sleeps, SleepDriver, Arc<Shard>, Arc<Shard>) {
    let (tx, _rx) = signal();
    let sleeps = Sleeps::with_shards(tx, Clock::new(Instant::now(), ms(1)), 2);
    let driver = sleeps.driver();
    let here = sleeps.shard();
    let there = (0..64)
        .map(|_| std::thread::scope(|scope| scope.spawn(|| sleeps.shard()).join().unwrap()))
        .find(|there| !Arc::ptr_eq(&here, there))
        .expect("64 threads in a row numbered into this thread's shard");
    (sleeps, driver, here, there)
}

fn entries(shard: &Shard) -> usize {
    shard.inner.lock().wheel.len()
}

/// Sleeps on one tick share its entry; another tick gets its own; the
/// last sleep of a tick to go takes the entry out, and the driver is
/// told only of a tick earlier than the one it wakes for.
#[test]
fn a_tick_has_one_entry_while_a_sleep_waits_on_it() {
    let (_sleeps, sleeps, mut driver, rx) = sleeps();
    let waker = futures::task::noop_waker();
    let mut a = Place::NONE;
    let mut b = Place::NONE;
    let mut c = Place::NONE;
    assert_eq!(sleeps.wait(10, &mut a, &waker), Outcome::Waiting);
    assert_eq!(sleeps.wait(10, &mut b, &waker), Outcome::Waiting);
    assert_eq!(entries(&sleeps), 1);
    assert!(rx.take(), "the first tick is news to the driver");
    driver.refresh();
    assert_eq!(driver.next_tick(), Some(10));
    assert_eq!(sleeps.wait(12, &mut c, &waker), Outcome::Waiting);
    assert_eq!(entries(&sleeps), 2);
    assert!(!rx.take(), "a later tick is not");
    assert_eq!(driver.waiting(), 3);
    sleeps.leave(10, a);
    assert_eq!((entries(&sleeps), driver.waiting()), (2, 2));
    sleeps.leave(10, b);
    assert_eq!((entries(&sleeps), driver.waiting()), (1, 1));
    sleeps.leave(12, c);
    assert_eq!((entries(&sleeps), driver.waiting()), (0, 0));
}

/// The driver keeps each shard's next tick from its last look: firing
/// looks again at the shards it fired, a later sleep changes nothing
/// and does not raise the signal, an earlier one raises it, and the
/// driver looks again then.
#[test]
fn the_driver_looks_again_after_firing_or_when_told() {
    let (_sleeps, sleeps, mut driver, rx) = sleeps();
    let waker = futures::task::noop_waker();
    let (mut a, mut b, mut c) = (Place::NONE, Place::NONE, Place::NONE);
    assert_eq!(driver.next_tick(), None);
    assert_eq!(sleeps.wait(5, &mut a, &waker), Outcome::Waiting);
    assert!(rx.take(), "a first tick raises the signal");
    assert_eq!(driver.next_tick(), None, "not looked at yet");
    driver.refresh();
    assert_eq!(driver.next_tick(), Some(5));
    assert_eq!(sleeps.wait(9, &mut b, &waker), Outcome::Waiting);
    assert!(!rx.take(), "a later tick does not");
    let mut woken = Vec::new();
    driver.fire(5, &mut woken);
    assert_eq!(woken.len(), 1);
    assert_eq!(driver.next_tick(), Some(9), "firing looked again");
    assert_eq!(sleeps.wait(7, &mut c, &waker), Outcome::Waiting);
    assert!(rx.take(), "an earlier tick raises the signal");
    driver.refresh();
    assert_eq!(driver.next_tick(), Some(7));
    sleeps.leave(7, c);
    assert_eq!(driver.next_tick(), Some(7), "a wake for nothing, at worst");
    driver.fire(7, &mut woken);
    assert_eq!((woken.len(), driver.next_tick()), (1, Some(9)));
}

/// A sleep whose tick fired completes, and going afterwards leaves the
/// sleeps that reuse its entry alone.
///
/// The entry of a fired tick is freed and its index handed to the next
/// tick filed: a sleep of the fired tick that took "its" entry out
/// when dropped would take another tick's sleeps with it.
#[test]
fn a_fired_sleep_leaves_the_entry_reused_after_it_alone() {
    let (_sleeps, sleeps, mut driver, _rx) = sleeps();
    let waker = futures::task::noop_waker();
    let mut early = Place::NONE;
    assert_eq!(sleeps.wait(5, &mut early, &waker), Outcome::Waiting);
    let mut woken = Vec::new();
    driver.fire(4, &mut woken);
    assert!(woken.is_empty() && !sleeps.has_fired(5), "never early");
    driver.fire(5, &mut woken);
    assert_eq!(woken.len(), 1);
    assert!(sleeps.has_fired(5));
    let mut late = Place::NONE;
    assert_eq!(sleeps.wait(9, &mut late, &waker), Outcome::Waiting);
    assert_eq!(late.entry, early.entry, "the freed entry is reused");
    assert_eq!(sleeps.wait(5, &mut early, &waker), Outcome::Fired);
    sleeps.leave(5, early);
    assert_eq!(driver.waiting(), 1, "the later tick's sleep still waits");
    // A sleep made for a tick already fired completes without filing.
    let mut past = Place::NONE;
    assert_eq!(sleeps.wait(3, &mut past, &waker), Outcome::Fired);
    assert_eq!(past, Place::NONE);
}

/// Closing wakes every waiting sleep, which then fails as closed, as
/// does every sleep that would wait afterwards; one whose tick had
/// fired still completes.
#[test]
fn closing_wakes_the_waiting_and_refuses_the_rest() {
    let (_sleeps, sleeps, mut driver, _rx) = sleeps();
    let woken = Arc::new(AtomicU64::new(0));
    let waker = futures::task::waker(Arc::new(Counter(Arc::clone(&woken))));
    let mut fired = Place::NONE;
    let mut waiting = [Place::NONE; 3];
    assert_eq!(sleeps.wait(2, &mut fired, &waker), Outcome::Waiting);
    for (n, place) in waiting.iter_mut().enumerate() {
        assert_eq!(sleeps.wait(7 + n as u64, place, &waker), Outcome::Waiting);
    }
    let mut taken = Vec::new();
    driver.fire(2, &mut taken);
    taken.into_iter().for_each(Waker::wake);
    assert_eq!(woken.load(Ordering::SeqCst), 1);
    drop(driver);
    assert_eq!(
        woken.load(Ordering::SeqCst),
        4,
        "dropping the driver closes"
    );
    assert!(sleeps.is_closed());
    assert_eq!(sleeps.wait(7, &mut waiting[0], &waker), Outcome::Closed);
    assert_eq!(sleeps.wait(2, &mut fired, &waker), Outcome::Fired);
    let mut new = Place::NONE;
    assert_eq!(sleeps.wait(20, &mut new, &waker), Outcome::Closed);
    waiting.iter().for_each(|place| sleeps.leave(8, *place));
}

/// Threads sleep in shards of their own, each under its own lock; the
/// driver fires and counts them all, and wakes for the earliest.
///
/// Regression (of the test): it took the next thread to sleep to be in
/// the other shard, but threads are numbered as they first sleep, and
/// the tests running beside it number theirs too: it failed about one
/// run in three. It now looks for a thread in the other shard.
#[test]
fn threads_sleep_in_shards_of_their_own() {
    let (_sleeps, mut driver, here, there) = two_shards();
    let waker = futures::task::noop_waker();
    let (mut a, mut b) = (Place::NONE, Place::NONE);
    assert_eq!(here.wait(9, &mut a, &waker), Outcome::Waiting);
    assert_eq!(there.wait(4, &mut b, &waker), Outcome::Waiting);
    driver.refresh();
    assert_eq!((driver.waiting(), driver.next_tick()), (2, Some(4)));
    let mut woken = Vec::new();
    driver.fire(9, &mut woken);
    assert_eq!(woken.len(), 2);
    assert!(here.has_fired(9) && there.has_fired(9));
}

/// Regression: the driver kept the next tick it had noted for a shard
/// after the shard went with its last sleep (every handle gone, and its
/// sleeps done or dropped, which need not raise the signal). Once that
/// tick passed, the driver found it due on every turn and spun, yielding
/// and looking again, until some other sleep raised the signal. A shard
/// found gone when firing now counts as waiting for nothing.
#[test]
fn a_shard_gone_with_its_last_sleep_is_not_waited_for() {
    let (sleeps, mut driver, here, there) = two_shards();
    let waker = futures::task::noop_waker();
    let (mut a, mut b) = (Place::NONE, Place::NONE);
    assert_eq!(here.wait(9, &mut a, &waker), Outcome::Waiting);
    assert_eq!(there.wait(4, &mut b, &waker), Outcome::Waiting);
    driver.refresh();
    assert_eq!(driver.next_tick(), Some(4));
    drop(sleeps);
    there.leave(4, b);
    drop(there);
    let mut woken = Vec::new();
    driver.fire(5, &mut woken);
    assert!(woken.is_empty());
    assert_eq!(
        driver.next_tick(),
        Some(9),
        "the gone shard's tick is forgotten"
    );
    driver.fire(9, &mut woken);
    assert_eq!((woken.len(), driver.next_tick()), (1, None));
}

/// A shard made once the driver has closed the sleeps (a thread's first
/// sleep, made as the wheel stops) refuses to wait, rather than hang.
#[test]
fn a_shard_made_after_closing_is_closed() {
    let (tx, _rx) = signal();
    let sleeps = Sleeps::with_shards(tx, Clock::new(Instant::now(), ms(1)), 2);
    drop(sleeps.driver());
    assert!(sleeps.is_closed());
    let shard = std::thread::scope(|scope| scope.spawn(|| sleeps.shard()).join().unwrap());
    let waker = futures::task::noop_waker();
    let mut place = Place::NONE;
    assert_eq!(shard.wait(3, &mut place, &waker), Outcome::Closed);
}

struct Counter(Arc<AtomicU64>);

impl futures::task::ArcWake for Counter {
    fn wake_by_ref(this: &Arc<Self>) {
        this.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The window a thread remembers gives the tick of deadlines inside it
/// only (after the tick before, up to its own tick), on its own wheel
/// only.
#[test]
fn the_window_gives_the_tick_of_deadlines_inside_it() {
    let (one, _s1, _d1, _r1) = sleeps();
    let (two, _s2, _d2, _r2) = sleeps();
    let window = one.clock.window(10);
    let (after, until) = window.unwrap();
    one.remember_window(10, window);
    let tick = |sleeps: &Sleeps, at| sleeps.look(at).1;
    assert_eq!(tick(&one, until), Some(10));
    assert_eq!(tick(&one, after + Duration::from_nanos(1)), Some(10));
    assert_eq!(tick(&one, after), None, "a deadline at tick 9 is tick 9's");
    assert_eq!(tick(&one, until + Duration::from_nanos(1)), None);
    assert_eq!(tick(&two, until), None, "another wheel's window");
}
