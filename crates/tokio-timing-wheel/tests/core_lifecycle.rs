//! The handle, the driver and the stream, under Tokio's paused clock,
//! continued from `core.rs`: idle wake-ups, coarse ticks, a runtime
//! shutting down, and the lifecycle of handles and the stream.

#[path = "support/paused.rs"]
mod paused;

use std::time::Duration;

use futures::StreamExt;
use paused::{ms, ready, settle};
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, task};
use tokio_timing_wheel::{Expirations, TimingWheel};

#[tokio::test(start_paused = true)]
async fn an_idle_wheel_never_wakes() {
    let (wheel, _expired) = TimingWheel::<u32, ()>::new();
    for _ in 0..60 {
        advance(Duration::from_secs(60)).await;
    }
    assert_eq!(wheel.stats().await.unwrap().wakeups, 0);
}

#[tokio::test(start_paused = true)]
async fn one_timer_an_hour_out_costs_a_handful_of_wakeups() {
    let (wheel, mut expired) = TimingWheel::new();
    wheel
        .set_timer(1u32, (), Duration::from_secs(3600))
        .await
        .unwrap();
    expired.next().await.unwrap();
    let wakeups = wheel.stats().await.unwrap().wakeups;
    assert!((1..=8).contains(&wakeups), "wakeups={wakeups}");
}

/// A timer fires from its own deadline, rounded up to a 256th of the
/// tick, not from the end of its tick: on a 10 ms tick, 25 ms is a 256th
/// boundary and fires then; 23 ms rounds up to 23.0078125 ms, which the
/// runtime's millisecond timer reaches at 24 ms; a whole tick fires at
/// its end. Never before the deadline.
#[tokio::test(start_paused = true)]
async fn a_tick_coarser_than_a_millisecond_fires_from_the_deadline_itself() {
    let (wheel, mut expired) = TimingWheel::builder().tick(ms(10)).build();
    let start = Instant::now();
    wheel.set_timer(1u8, (), ms(25)).await.unwrap();
    wheel.set_timer(2u8, (), ms(23)).await.unwrap();
    wheel.set_timer(3u8, (), ms(40)).await.unwrap();
    let e = expired.next().await.unwrap();
    assert_eq!(e.key(), &2);
    assert_eq!(
        e.deadline(),
        start + Duration::from_micros(23_007) + Duration::from_nanos(813)
    );
    assert_eq!(start.elapsed(), ms(24));
    let e = expired.next().await.unwrap();
    assert_eq!(e.key(), &1);
    assert_eq!(e.deadline(), start + ms(25));
    assert_eq!(start.elapsed(), ms(25));
    let e = expired.next().await.unwrap();
    assert_eq!(e.key(), &3);
    assert_eq!(e.deadline(), start + ms(40));
    assert_eq!(start.elapsed(), ms(40));
}

/// Regression: a driver task dropped by the runtime before its first poll
/// never closed the stream, so the consumer waited forever.
#[test]
fn a_runtime_shutting_down_ends_the_stream_and_fails_calls() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (wheel, mut expired) = rt.block_on(async {
        let (wheel, expired) = TimingWheel::new();
        wheel
            .set_timer(1u8, (), Duration::from_secs(60))
            .await
            .unwrap();
        (wheel, expired)
    });
    drop(rt);
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    other.block_on(async {
        assert!(expired.next().await.is_none());
        assert!(wheel.remove_timer(1).await.unwrap_err().is_closed());
        assert!(wheel.stop().await.unwrap_err().is_closed());
    });
}

#[test]
#[should_panic(expected = "inside a Tokio runtime")]
fn building_outside_a_runtime_panics_with_a_clear_message() {
    let _ = TimingWheel::<u8, ()>::new();
}

#[test]
fn handles_and_streams_have_the_documented_auto_traits() {
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    fn send_unpin<T: Send + Unpin>() {}
    fn stream<T: futures::Stream + futures::stream::FusedStream>() {}
    // Not `Unpin` and not `Sync`: the handle must still be `Send + Sync`.
    type K = std::marker::PhantomPinned;
    send_sync_clone::<TimingWheel<u8, std::cell::Cell<u8>>>();
    send_unpin::<Expirations<u8, K>>();
    stream::<Expirations<u8, K>>();
}

/// A reservation, whatever its size, never changes what the wheel does:
/// one too large to grant is skipped instead of panicking.
#[tokio::test(start_paused = true)]
async fn any_reserved_capacity_is_accepted() {
    for (capacity, shards) in [(1_000, 1), (1_000, 4), (usize::MAX, 1), (usize::MAX, 3)] {
        let (wheel, mut expired) = TimingWheel::builder()
            .capacity(capacity)
            .shards(shards)
            .build();
        for key in 0..100u32 {
            wheel
                .set_timer(key, key, Duration::from_millis(u64::from(100 - key)))
                .await
                .unwrap();
        }
        let mut fired = Vec::new();
        while fired.len() < 100 {
            fired.push(*expired.recv().await.unwrap().key());
        }
        fired.sort_unstable();
        assert_eq!(fired, (0..100).collect::<Vec<_>>(), "capacity {capacity}");
        assert_eq!(wheel.stop().await.unwrap(), []);
    }
}

/// With a channel of one slot, each command below finds it full and waits
/// in the channel's send path for the driver; every kind of keyed command
/// still arrives, and in the order it was issued.
#[tokio::test(start_paused = true)]
async fn keyed_commands_that_wait_for_room_keep_their_order() {
    let (wheel, mut expired) = TimingWheel::builder().command_capacity(1).build();
    let start = Instant::now();
    wheel.try_set_timer(0u32, 'z', ms(50)).unwrap();
    assert!(wheel.try_set_timer(9, 'x', ms(1)).unwrap_err().is_full());
    wheel.set_timer(1, 'a', ms(10)).await.unwrap();
    wheel.set_timer(2, 'b', ms(10)).await.unwrap();
    wheel.move_timer(1, ms(30)).await.unwrap();
    wheel.cancel_timer(2).await.unwrap();
    wheel.set_timer_at(3, 'c', start + ms(20)).await.unwrap();
    assert_eq!(wheel.remove_timer(3).await.unwrap(), Some('c'));
    wheel.move_timer_at(0, start + ms(40)).await.unwrap();
    let fired: Vec<(u32, char, Duration)> = expired
        .by_ref()
        .take(2)
        .map(|e| {
            let at = e.deadline() - start;
            let (key, value) = e.into_parts();
            (key, value, at)
        })
        .collect()
        .await;
    assert_eq!(fired, [(1, 'a', ms(30)), (0, 'z', ms(40))]);
    assert_eq!(wheel.stats().await.unwrap().pending, 0);
}

/// Regression: the driver applies the commands it takes 256 at a time, and
/// fired what was due after the first run with the rest still unapplied. A
/// `remove_timer` queued before its timer's deadline, behind 300 other
/// commands, found the timer already fired.
#[tokio::test(start_paused = true)]
async fn a_remove_queued_behind_a_long_queue_beats_the_deadline() {
    let (wheel, mut expired) = TimingWheel::<u32, ()>::new();
    // The driver has not run yet: all of this waits in the channel.
    wheel.set_timer(0, (), ms(10)).await.unwrap();
    for key in 1..=300 {
        wheel.set_timer(key, (), ms(60_000)).await.unwrap();
    }
    let mut remove = task::spawn(wheel.remove_timer(0));
    assert_pending!(remove.poll());
    // The driver is late: the deadline has passed when it gets to run.
    advance(ms(20)).await;
    assert_eq!(remove.await.unwrap(), Some(()));
    settle(&wheel).await;
    assert!(ready(&mut expired).is_empty());
}

/// Regression: `stats()` fired what was due the moment the driver reached
/// it, with commands queued behind it in the same batch still unapplied: a
/// `remove_timer` queued before its timer's deadline, right behind another
/// task's `stats()`, found the timer fired.
#[tokio::test(start_paused = true)]
async fn a_remove_queued_behind_stats_beats_the_deadline() {
    let (wheel, mut expired) = TimingWheel::<u32, ()>::new();
    wheel.set_timer(0, (), ms(10)).await.unwrap();
    let mut stats = task::spawn(wheel.stats());
    assert_pending!(stats.poll());
    let mut remove = task::spawn(wheel.remove_timer(0));
    assert_pending!(remove.poll());
    advance(ms(20)).await;
    assert_eq!(remove.await.unwrap(), Some(()));
    let stats = stats.await.unwrap();
    assert_eq!((stats.pending, stats.fired), (0, 0));
    settle(&wheel).await;
    assert!(ready(&mut expired).is_empty());
}

/// A `stats()` queued before a `stop()` in the same batch is answered with
/// the wheel as it was; one queued after it learns the wheel closed.
#[tokio::test(start_paused = true)]
async fn stats_around_a_stop_in_one_batch() {
    let (wheel, _expired) = TimingWheel::<u32, ()>::new();
    wheel.set_timer(0, (), ms(10_000)).await.unwrap();
    let mut before = task::spawn(wheel.stats());
    assert_pending!(before.poll());
    let mut stop = task::spawn(wheel.stop());
    assert_pending!(stop.poll());
    let mut after = task::spawn(wheel.stats());
    assert_pending!(after.poll());
    assert_eq!(before.await.unwrap().pending, 1);
    assert_eq!(stop.await.unwrap(), vec![(0, ())]);
    assert!(after.await.unwrap_err().is_closed());
}

/// Regression: a `stats()` queued just before a `stop()` was answered at the
/// stop, firing what was due before the commands queued behind the stop
/// were applied: a `remove_timer` queued before its timer's deadline, right
/// behind the stop, found the timer fired instead of taking it back.
#[tokio::test(start_paused = true)]
async fn a_remove_queued_behind_stats_and_stop_beats_the_deadline() {
    let (wheel, mut expired) = TimingWheel::<u32, ()>::new();
    wheel.set_timer(0, (), ms(10)).await.unwrap();
    let mut stats = task::spawn(wheel.stats());
    assert_pending!(stats.poll());
    let mut stop = task::spawn(wheel.stop());
    assert_pending!(stop.poll());
    let mut remove = task::spawn(wheel.remove_timer(0));
    assert_pending!(remove.poll());
    // The driver is late: the deadline has passed when it gets to run.
    advance(ms(20)).await;
    assert_eq!(remove.await.unwrap(), Some(()));
    assert_eq!(stop.await.unwrap(), vec![]);
    let stats = stats.await.unwrap();
    assert_eq!((stats.pending, stats.fired), (0, 0));
    assert!(ready(&mut expired).is_empty());
}

/// Regression: with more than 256 commands queued, timers that came due
/// while they waited fired in runs of 256, each run in deadline order but
/// not the whole.
#[tokio::test(start_paused = true)]
async fn a_long_queue_of_due_timers_fires_in_one_deadline_order() {
    let (wheel, mut expired) = TimingWheel::<u32, ()>::new();
    for key in 0..1_000u32 {
        let delay = ms(1 + u64::from(key) * 7_919 % 100_000);
        wheel.set_timer(key, (), delay).await.unwrap();
    }
    advance(Duration::from_secs(200)).await;
    let deadlines: Vec<Instant> = expired
        .by_ref()
        .take(1_000)
        .map(|e| e.deadline())
        .collect()
        .await;
    assert!(deadlines.windows(2).all(|w| w[0] <= w[1]));
}

/// Deadlines too far to come (`Duration::MAX`, and a few hundred million
/// years) neither hide a near timer nor keep the driver awake.
#[tokio::test(start_paused = true)]
async fn far_deadlines_neither_hide_near_ones_nor_wake_the_driver() {
    let (wheel, mut expired) = TimingWheel::<u32, ()>::new();
    wheel.set_timer(0, (), Duration::MAX).await.unwrap();
    wheel
        .set_timer(9, (), Duration::from_secs(u64::MAX / 2_000))
        .await
        .unwrap();
    advance(ms(5)).await;
    let start = Instant::now();
    wheel.set_timer(1, (), ms(10)).await.unwrap();
    assert_eq!(expired.next().await.unwrap().key(), &1);
    assert!(
        (ms(10)..=ms(11)).contains(&start.elapsed()),
        "{:?}",
        start.elapsed()
    );
    advance(Duration::from_secs(3_600)).await;
    let start = Instant::now();
    wheel.set_timer(2, (), ms(3)).await.unwrap();
    assert_eq!(expired.next().await.unwrap().key(), &2);
    assert!(
        (ms(3)..=ms(4)).contains(&start.elapsed()),
        "{:?}",
        start.elapsed()
    );
    let stats = wheel.stats().await.unwrap();
    assert_eq!(stats.pending, 2);
    assert!(stats.wakeups < 20, "{stats:?}");
}

/// Regression: `Builder::tick(Duration::MAX)` was accepted, and since the
/// first tick after the start lay beyond any `Instant`, no timer on that
/// wheel ever fired. Ticks are now capped at `MAX_TICK` (1 hour), and a
/// timer fires at its deadline rounded up to a 256th of the tick (here
/// 14.0625 s, which the runtime's millisecond timer reaches at 14.063 s).
#[tokio::test(start_paused = true)]
async fn the_coarsest_tick_is_capped_and_its_timers_fire() {
    use tokio_timing_wheel::MAX_TICK;
    let (wheel, mut expired) = TimingWheel::builder().tick(Duration::MAX).build();
    assert_eq!(wheel.tick(), MAX_TICK);
    let start = Instant::now();
    wheel.set_timer(1u8, (), ms(1500)).await.unwrap();
    assert_eq!(expired.next().await.unwrap().key(), &1);
    assert_eq!(start.elapsed(), ms(14_063));
}

/// Regression: a wheel built on a runtime without the time driver accepted
/// `set_timer`, then its driver panicked ("timers are disabled"), the stream
/// ended and the accepted timer was lost. Building it now panics at once,
/// with Tokio's message telling to enable time, before any timer is taken.
#[test]
fn a_runtime_without_time_is_refused_when_the_wheel_is_built() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let built = runtime.block_on(async {
        std::panic::catch_unwind(|| TimingWheel::builder().build::<u8, ()>()).map(drop)
    });
    let panic = built.expect_err("a wheel without a time driver must not be built");
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(message.contains("enable_time"), "{message}");
}

/// A deadline lookup by key: the pending timer's tick (never before the
/// deadline asked, less than a tick after it), moved with the timer, and
/// `None` once it fired or was removed; the caller's own commands are seen.
#[tokio::test(start_paused = true)]
async fn deadline_reports_a_pending_timer_and_none_otherwise() {
    let (wheel, mut expired) = TimingWheel::new();
    let tick = wheel.tick();
    let asked = Instant::now() + ms(250);
    wheel.set_timer_at(1u32, "a", asked).await.unwrap();
    let due = wheel.deadline(1).await.unwrap().unwrap();
    assert!(due >= asked && due - asked < tick, "{due:?} for {asked:?}");
    assert_eq!(wheel.deadline(2).await.unwrap(), None);

    wheel.move_timer(1, ms(1_000)).await.unwrap();
    let moved = wheel.deadline(1).await.unwrap().unwrap();
    assert!(moved >= Instant::now() + ms(1_000) && moved > due);

    wheel.set_timer(3u32, "never", Duration::MAX).await.unwrap();
    let far = wheel.deadline(3).await.unwrap().unwrap();
    assert!(far > Instant::now() + Duration::from_secs(86_400 * 365));

    advance(ms(1_000) + tick).await;
    settle(&wheel).await;
    assert_eq!(ready(&mut expired), vec![(1, "a")]);
    assert_eq!(wheel.deadline(1).await.unwrap(), None, "fired");
    wheel.remove_timer(3).await.unwrap();
    assert_eq!(wheel.deadline(3).await.unwrap(), None, "removed");

    wheel.stop().await.unwrap();
    assert!(wheel.deadline(1).await.unwrap_err().is_closed());
}

/// `len` and `is_empty` without a round trip: a replaced timer is not
/// counted twice, fired and removed ones leave the count, every shard is
/// counted, and a stopped wheel holds none.
#[tokio::test(start_paused = true)]
async fn len_counts_pending_timers_across_shards() {
    let (wheel, mut expired) = TimingWheel::builder().shards(4).build::<u32, u32>();
    assert!(wheel.is_empty());
    for key in 0..100 {
        let delay = if key < 40 { ms(100) } else { ms(10_000) };
        wheel.set_timer(key, key, delay).await.unwrap();
    }
    // Setting a pending key again replaces it.
    wheel.set_timer(7, 700, ms(100)).await.unwrap();
    settle(&wheel).await;
    assert_eq!(wheel.len(), 100);
    assert!(!wheel.is_empty());

    advance(ms(100) + wheel.tick()).await;
    settle(&wheel).await;
    assert_eq!(ready(&mut expired).len(), 40);
    assert_eq!(wheel.len(), 60);
    wheel.remove_timer(99).await.unwrap();
    settle(&wheel).await;
    assert_eq!(wheel.len(), 59);
    assert_eq!(wheel.stats().await.unwrap().pending, 59);

    assert_eq!(wheel.stop().await.unwrap().len(), 59);
    assert_eq!(wheel.len(), 0);
    assert!(wheel.is_empty());
}

/// A tick that is a multiple of 64 waits a level up until it comes: its
/// timers used to fire only at its end, up to a tick after their
/// deadlines. Now they fire from their deadlines as other ticks' do; a
/// multiple of 4096 still waits for its end.
#[tokio::test(start_paused = true)]
async fn a_tick_at_a_level_boundary_fires_from_its_deadline() {
    let tick = ms(10);
    let (wheel, mut expired) = TimingWheel::builder().tick(tick).build::<u32, ()>();
    let start = Instant::now();
    // Ticks 64 ((630, 640] ms) and 4096 ((40,950, 40,960] ms).
    for (key, at) in [(1u32, 631), (2, 40_951)] {
        wheel.set_timer_at(key, (), start + ms(at)).await.unwrap();
    }
    let first = expired.next().await.unwrap();
    assert_eq!((*first.key(), start.elapsed()), (1, ms(632)));
    assert!(first.deadline() >= start + ms(631) && first.deadline() < start + ms(632));
    let second = expired.next().await.unwrap();
    assert_eq!((*second.key(), start.elapsed()), (2, ms(40_960)));
}

/// The driver woke for a tick's last timer after the tick had ended (its
/// runtime timer rounds up to a millisecond) and found timers of the next
/// tick already reached: they used to wait for another wake of its own
/// (on a real clock, up to a millisecond later). Now they fire in the same
/// wake, once the tick's own timers have gone.
#[tokio::test(start_paused = true)]
async fn timers_of_the_next_tick_reached_fire_in_the_same_wake() {
    let tick = ms(10);
    let (wheel, mut expired) = TimingWheel::builder().tick(tick).build::<u32, ()>();
    let start = Instant::now();
    // Tick 3 ends at 30 ms; a timer of it and one of tick 4.
    let (end_of_3, early_in_4) = (Duration::from_micros(29_800), Duration::from_micros(30_200));
    wheel.set_timer_at(1, (), start + end_of_3).await.unwrap();
    wheel.set_timer_at(2, (), start + early_in_4).await.unwrap();
    let woke = wheel.stats().await.unwrap().wakeups;
    // Half a millisecond on, the paused runtime's timer wakes on the half
    // millisecond: at 30.5 ms for the first timer, past its tick's end.
    advance(Duration::from_micros(500)).await;
    for key in [1, 2] {
        let e = expired.next().await.unwrap();
        assert_eq!(*e.key(), key);
        assert_eq!(start.elapsed(), Duration::from_micros(30_500));
    }
    assert_eq!(wheel.stats().await.unwrap().wakeups - woke, 1);
}

/// Timers at deadlines scattered inside the ticks of a coarse wheel, some
/// across level boundaries (64 and 4096 ticks), fire never before their
/// deadline, within a tick after it, in tick order, and, where the
/// runtime's millisecond timer can wake the driver before the tick's end,
/// before it.
#[tokio::test(start_paused = true)]
async fn timers_inside_coarse_ticks_fire_from_their_deadlines_never_early() {
    let tick = ms(10);
    let (wheel, mut expired) = TimingWheel::builder().tick(tick).build();
    let start = Instant::now();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut asked = Vec::new();
    for key in 0..2_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let base = [0u64, 630, 640, 40_950, 40_960][key as usize % 5];
        let at = start + ms(base) + Duration::from_micros(1 + x % 20_000);
        wheel.set_timer_at(key, at, at).await.unwrap();
        asked.push(at);
    }
    let (mut before_tick_end, mut last) = (0, start);
    for _ in 0..asked.len() {
        let e = expired.next().await.unwrap();
        let now = Instant::now();
        let at = *e.value();
        assert!(
            now >= at,
            "early: {:?} before {:?}",
            now - start,
            at - start
        );
        assert!(e.deadline() >= at && now >= e.deadline());
        assert!(now - at < tick, "late by {:?}", now - at);
        let tick_end = start + tick * (((at - start).as_nanos().div_ceil(tick.as_nanos())) as u32);
        assert!(tick_end >= last, "a tick fired out of order");
        last = tick_end;
        before_tick_end += usize::from(now < tick_end);
    }
    assert!(
        before_tick_end > asked.len() / 2,
        "{before_tick_end} of {} fired before their tick's end",
        asked.len()
    );
}
