//! The handle, the driver and the stream, under Tokio's paused clock.

#[path = "support/paused.rs"]
mod paused;

use std::time::Duration;

use futures::StreamExt;
use paused::{ms, ready, settle};
use tokio::time::{advance, Instant};
use tokio_test::{assert_pending, assert_ready, task};
use tokio_timing_wheel::TimingWheel;

#[tokio::test(start_paused = true)]
async fn fires_at_its_deadline_and_not_before() {
    let (wheel, mut expired) = TimingWheel::new();
    let start = Instant::now();
    wheel.set_timer(1u32, "a", ms(100)).await.unwrap();
    let mut next = task::spawn(expired.next());
    assert_pending!(next.poll());
    advance(ms(99)).await;
    settle(&wheel).await;
    assert_pending!(next.poll());
    advance(ms(1)).await;
    settle(&wheel).await;
    assert!(next.is_woken());
    let e = assert_ready!(next.poll()).unwrap();
    assert_eq!(e.deadline(), start + ms(100));
    assert_eq!(e.into_parts(), (1, "a"));
}

#[tokio::test(start_paused = true)]
async fn fires_on_time_at_every_level_boundary() {
    // 64^n ticks and one either side, up to beyond a year.
    let mut delays = Vec::new();
    for n in 1..=5u32 {
        let edge = 64u64.pow(n);
        delays.extend([edge - 1, edge, edge + 1]);
    }
    delays.push(3 * 365 * 86_400_000); // three years
    for delay in delays {
        let (wheel, mut expired) = TimingWheel::new();
        wheel.set_timer(delay, (), ms(delay)).await.unwrap();
        settle(&wheel).await;
        advance(ms(delay - 1)).await;
        settle(&wheel).await;
        assert!(
            ready(&mut expired).is_empty(),
            "delay {delay} ms fired early"
        );
        advance(ms(1)).await;
        settle(&wheel).await;
        assert_eq!(ready(&mut expired), [(delay, ())], "delay {delay} ms");
    }
}

#[tokio::test(start_paused = true)]
async fn equal_deadlines_fire_in_the_order_they_were_set() {
    let (wheel, mut expired) = TimingWheel::new();
    let deadline = Instant::now() + ms(5_000);
    for key in [3u32, 1, 4, 15, 9, 2, 6] {
        wheel.set_timer_at(key, (), deadline).await.unwrap();
        advance(ms(700)).await;
    }
    let keys: Vec<u32> = expired.by_ref().take(7).map(|e| *e.key()).collect().await;
    assert_eq!(keys, [3, 1, 4, 15, 9, 2, 6]);
}

#[tokio::test(start_paused = true)]
async fn deadlines_fire_in_order() {
    let (wheel, mut expired) = TimingWheel::new();
    let delays = [500u64, 3, 70_000, 64, 4_096, 1, 65, 262_144, 999];
    for (key, delay) in delays.iter().enumerate() {
        wheel.set_timer(key, *delay, ms(*delay)).await.unwrap();
    }
    let fired: Vec<u64> = expired
        .by_ref()
        .take(delays.len())
        .map(|e| *e.value())
        .collect()
        .await;
    let mut sorted = delays.to_vec();
    sorted.sort_unstable();
    assert_eq!(fired, sorted);
}

#[tokio::test(start_paused = true)]
async fn zero_and_past_deadlines_fire_at_once() {
    let (wheel, mut expired) = TimingWheel::new();
    advance(ms(10)).await;
    let past = Instant::now() - ms(5);
    wheel.set_timer(1u8, (), Duration::ZERO).await.unwrap();
    wheel.set_timer_at(2, (), past).await.unwrap();
    wheel.set_timer_at(3, (), Instant::now()).await.unwrap();
    settle(&wheel).await;
    assert_eq!(ready(&mut expired), [(1, ()), (2, ()), (3, ())]);
}

#[tokio::test(start_paused = true)]
async fn any_delay_is_accepted_without_a_panic() {
    let (wheel, mut expired) = TimingWheel::new();
    wheel.set_timer(1u8, (), Duration::MAX).await.unwrap();
    wheel
        .set_timer(2, (), Duration::from_secs(u64::MAX / 2))
        .await
        .unwrap();
    wheel
        .set_timer_at(
            3,
            (),
            Instant::now() + Duration::from_secs(200 * 365 * 86_400),
        )
        .await
        .unwrap();
    wheel.move_timer(3, Duration::MAX).await.unwrap();
    advance(Duration::from_secs(10 * 365 * 86_400)).await;
    let stats = wheel.stats().await.unwrap();
    assert_eq!((stats.pending, stats.fired), (3, 0));
    assert!(ready(&mut expired).is_empty());
    let mut all = wheel.drain().await.unwrap();
    all.sort_unstable();
    assert_eq!(all, [(1, ()), (2, ()), (3, ())]);
}

/// Regression: commands queued before the driver first ran were applied only
/// after the wheel had advanced to "now", so timers whose stamped deadlines
/// had all passed fired in arrival order instead of deadline order.
#[tokio::test(start_paused = true)]
async fn ten_years_in_one_step_fires_everything_in_order() {
    let (wheel, mut expired) = TimingWheel::new();
    let delays = [1u64, 86_400_000, 365 * 86_400_000, 9 * 365 * 86_400_000];
    for delay in delays.iter().rev() {
        wheel.set_timer(*delay, (), ms(*delay)).await.unwrap();
    }
    advance(Duration::from_secs(10 * 365 * 86_400)).await;
    settle(&wheel).await;
    let keys: Vec<u64> = ready(&mut expired).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, delays);
}

#[tokio::test(start_paused = true)]
async fn a_wheel_running_for_years_still_fires_on_time() {
    let (wheel, mut expired) = TimingWheel::new();
    // 2^36 ms (about 2.2 years) minus a little: right before a top-level
    // slot boundary of a six-level wheel.
    advance(ms((1 << 36) - 20)).await;
    let start = Instant::now();
    wheel.set_timer(1u8, (), ms(50)).await.unwrap();
    wheel.set_timer(2, (), ms(10)).await.unwrap();
    let mut next = task::spawn(expired.next());
    advance(ms(9)).await;
    settle(&wheel).await;
    assert_pending!(next.poll());
    advance(ms(1)).await;
    settle(&wheel).await;
    assert_eq!(assert_ready!(next.poll()).unwrap().into_parts(), (2, ()));
    drop(next);
    let e = expired.next().await.unwrap();
    assert_eq!((*e.key(), start.elapsed()), (1, ms(50)));
}

#[tokio::test(start_paused = true)]
async fn replace_move_remove_and_cancel() {
    let (wheel, mut expired) = TimingWheel::new();
    let start = Instant::now();
    wheel.set_timer("a", 1, ms(100)).await.unwrap();
    wheel.set_timer("a", 2, ms(300)).await.unwrap(); // replaces value and deadline
    wheel.set_timer("b", 3, ms(100)).await.unwrap();
    wheel.move_timer("b", ms(50)).await.unwrap(); // earlier
    wheel.set_timer("c", 4, ms(100)).await.unwrap();
    wheel.move_timer("c", ms(500)).await.unwrap(); // later
    wheel.move_timer("missing", ms(10)).await.unwrap(); // no-op
    wheel.set_timer("d", 5, ms(10)).await.unwrap();
    wheel.cancel_timer("d").await.unwrap();
    wheel.set_timer("e", 6, ms(10)).await.unwrap();
    assert_eq!(wheel.remove_timer("e").await.unwrap(), Some(6));
    assert_eq!(wheel.remove_timer("e").await.unwrap(), None);

    let mut seen = Vec::new();
    for _ in 0..3 {
        let e = expired.next().await.unwrap();
        seen.push((start.elapsed().as_millis(), *e.key(), *e.value()));
    }
    assert_eq!(seen, [(50, "b", 3), (300, "a", 2), (500, "c", 4)]);
    assert_eq!(wheel.stats().await.unwrap().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn remove_after_fire_returns_none() {
    let (wheel, mut expired) = TimingWheel::new();
    wheel.set_timer(1u8, 'x', ms(1)).await.unwrap();
    assert_eq!(expired.next().await.unwrap().into_parts(), (1, 'x'));
    assert_eq!(wheel.remove_timer(1).await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn drain_takes_everything_and_the_wheel_goes_on() {
    let (wheel, mut expired) = TimingWheel::new();
    for key in 0..100u32 {
        wheel
            .set_timer(key, key * 2, ms(u64::from(key) * 1_000 + 1))
            .await
            .unwrap();
    }
    let mut all = wheel.drain().await.unwrap();
    all.sort_unstable();
    assert_eq!(all, (0..100).map(|k| (k, k * 2)).collect::<Vec<_>>());
    wheel.set_timer(7, 7, ms(5)).await.unwrap();
    assert_eq!(expired.next().await.unwrap().into_parts(), (7, 7));
    assert_eq!(wheel.stats().await.unwrap().fired, 1);
}

#[tokio::test(start_paused = true)]
async fn stop_returns_pending_and_ends_the_stream_after_what_fired() {
    let (wheel, mut expired) = TimingWheel::new();
    let other = wheel.clone();
    wheel.set_timer(1u32, "fired", ms(10)).await.unwrap();
    wheel.set_timer(2, "pending", ms(1_000)).await.unwrap();
    advance(ms(10)).await;
    settle(&wheel).await;
    // A command queued before the stop is applied and accounted for.
    other.try_set_timer(3, "queued", ms(5)).unwrap();
    let mut pending = wheel.stop().await.unwrap();
    pending.sort_unstable();
    assert_eq!(pending, [(2, "pending"), (3, "queued")]);

    assert_eq!(expired.next().await.unwrap().into_parts(), (1, "fired"));
    assert!(expired.next().await.is_none());
    assert!(expired.next().await.is_none());

    assert!(wheel.stop().await.unwrap_err().is_closed());
    assert!(other.stats().await.unwrap_err().is_closed());
    assert!(other.remove_timer(2).await.unwrap_err().is_closed());
    assert!(wheel.is_closed());
    let err = wheel.set_timer(4, "late", ms(1)).await.unwrap_err();
    assert!(err.is_closed());
    assert_eq!(err.into_timer::<u32, &str>(), Some((4, "late")));
}

/// The driver takes everything queued at once and applies it in chunks:
/// a stop deep in a long queue, with more commands queued behind it, still
/// applies every command and hands back every timer, in a channel that
/// keeps its bound while the chunks are applied.
#[tokio::test(start_paused = true)]
async fn a_stop_behind_many_commands_applies_them_all() {
    let (wheel, _expired) = TimingWheel::builder().command_capacity(2_000).build();
    for key in 0..1_000u32 {
        wheel.try_set_timer(key, key, ms(100)).unwrap();
    }
    let mut stop = task::spawn(wheel.stop());
    assert_pending!(stop.poll());
    // Queued behind the stop before the driver ran: accepted, so counted.
    for key in 1_000..1_500u32 {
        wheel.try_set_timer(key, key, ms(100)).unwrap();
    }
    // Removals queued behind the stop are applied too.
    for key in 0..10u32 {
        wheel.try_set_timer(key + 10_000, 0, ms(100)).unwrap();
        wheel.cancel_timer(key + 10_000).await.unwrap();
    }
    let mut pending = stop.await.unwrap();
    pending.sort_unstable();
    assert_eq!(pending.len(), 1_500);
    assert!(pending.iter().map(|p| p.0).eq(0..1_500));
}

/// A full channel stays full while the driver still holds commands it took
/// and has not applied: a sender waits, and gets through once they are.
#[tokio::test(start_paused = true)]
async fn the_channel_bound_holds_until_commands_are_applied() {
    let (wheel, _expired) = TimingWheel::builder().command_capacity(4).build();
    for key in 0..4u32 {
        wheel.try_set_timer(key, (), ms(100)).unwrap();
    }
    assert!(wheel.try_set_timer(4, (), ms(100)).unwrap_err().is_full());
    wheel.set_timer(4, (), ms(100)).await.unwrap();
    assert_eq!(wheel.stats().await.unwrap().pending, 5);
}

#[tokio::test(start_paused = true)]
async fn concurrent_stops_one_wins_the_other_is_closed() {
    let (wheel, _expired) = TimingWheel::<u8, ()>::new();
    wheel.set_timer(1, (), ms(100)).await.unwrap();
    let (a, b) = tokio::join!(wheel.stop(), wheel.stop());
    let (ok, err) = match (a, b) {
        (Ok(pending), Err(e)) | (Err(e), Ok(pending)) => (pending, e),
        other => panic!("expected one success and one error, got {other:?}"),
    };
    assert_eq!(ok, [(1, ())]);
    assert!(err.is_closed());
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_still_fires_pending_timers_then_ends() {
    let (wheel, expired) = TimingWheel::new();
    let start = Instant::now();
    wheel.set_timer(1u8, (), ms(200)).await.unwrap();
    wheel.clone().set_timer(2, (), ms(100)).await.unwrap();
    drop(wheel);
    let fired: Vec<(u8, u128)> = expired
        .map(|e| (*e.key(), start.elapsed().as_millis()))
        .collect()
        .await;
    assert_eq!(fired, [(2, 100), (1, 200)]);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_discards_later_expirations_and_refuses_new_timers() {
    let (wheel, expired) = TimingWheel::new();
    wheel.set_timer(1u8, "x", ms(10)).await.unwrap();
    drop(expired);
    advance(ms(10)).await;
    let stats = wheel.stats().await.unwrap();
    assert_eq!((stats.pending, stats.fired, stats.discarded), (0, 0, 1));

    let err = wheel.set_timer(2, "y", ms(10)).await.unwrap_err();
    assert!(err.is_receiver_dropped());
    assert_eq!(err.into_timer::<u8, &str>(), Some((2, "y")));
    assert!(wheel
        .try_set_timer(3, "z", ms(1))
        .unwrap_err()
        .is_receiver_dropped());
    assert!(wheel
        .move_timer(1, ms(1))
        .await
        .unwrap_err()
        .is_receiver_dropped());
    // Taking timers back and stopping still work.
    assert_eq!(wheel.remove_timer(1).await.unwrap(), None);
    assert_eq!(wheel.stop().await.unwrap(), []);
}

#[tokio::test(start_paused = true)]
async fn stream_and_handles_dropped_ends_the_driver() {
    let (wheel, expired) = TimingWheel::new();
    wheel
        .set_timer(1u8, (), Duration::from_secs(3600))
        .await
        .unwrap();
    let probe = wheel.clone();
    drop(expired);
    drop(wheel);
    // `probe` is still a handle, so the driver keeps going; stop it.
    assert_eq!(probe.stop().await.unwrap(), [(1, ())]);
}

#[tokio::test(start_paused = true)]
async fn try_set_timer_reports_a_full_channel_and_hands_the_timer_back() {
    let (wheel, mut expired) = TimingWheel::builder().command_capacity(2).build();
    wheel.try_set_timer(1u32, 'a', ms(1)).unwrap();
    wheel.try_set_timer(2, 'b', ms(1)).unwrap();
    let err = wheel.try_set_timer(3, 'c', ms(1)).unwrap_err();
    assert!(err.is_full() && !err.is_closed());
    assert_eq!(err.into_timer::<u32, char>(), Some((3, 'c')));
    // Once the driver runs, the channel has room again.
    settle(&wheel).await;
    wheel.try_set_timer(3, 'c', ms(1)).unwrap();
    let keys: Vec<u32> = expired.by_ref().take(3).map(|e| *e.key()).collect().await;
    assert_eq!(keys, [1, 2, 3]);
}

/// A consumer that re-arms timers from inside its loop, with a channel of one
/// slot and a burst of expirations, must not deadlock.
#[tokio::test(start_paused = true)]
async fn consumer_setting_timers_in_its_loop_never_deadlocks() {
    let (wheel, mut expired) = TimingWheel::builder().command_capacity(1).build();
    let producer = wheel.clone();
    tokio::spawn(async move {
        for key in 0..5_000u32 {
            producer
                .set_timer(key, 0u32, ms(u64::from(key % 7)))
                .await
                .unwrap();
        }
    });
    let mut seen = 0;
    let done = tokio::time::timeout(Duration::from_secs(3600), async {
        while let Some(e) = expired.next().await {
            let (key, round) = e.into_parts();
            seen += 1;
            if round < 2 {
                wheel.set_timer(key, round + 1, ms(3)).await.unwrap();
            }
            if seen == 15_000 {
                break;
            }
        }
    })
    .await;
    assert!(done.is_ok(), "stalled after {seen} expirations");
    assert_eq!(wheel.stats().await.unwrap().pending, 0);
}

/// A consumer that does not read for a long time loses nothing and does not
/// hold up commands.
#[tokio::test(start_paused = true)]
async fn a_slow_consumer_loses_nothing_and_commands_keep_flowing() {
    let (wheel, mut expired) = TimingWheel::builder().command_capacity(4).build();
    for key in 0..20_000u32 {
        wheel
            .set_timer(key, key, ms(u64::from(key % 100) + 1))
            .await
            .unwrap();
    }
    advance(ms(200)).await;
    // Nobody reads; the driver still answers.
    for key in 20_000..21_000u32 {
        wheel
            .set_timer(key, key, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(wheel.remove_timer(key).await.unwrap(), Some(key));
    }
    let stats = wheel.stats().await.unwrap();
    assert_eq!((stats.pending, stats.fired), (0, 20_000));
    assert_eq!(expired.ready_len(), 20_000);
    let mut keys: Vec<u32> = ready(&mut expired).into_iter().map(|(k, _)| k).collect();
    keys.sort_unstable();
    assert_eq!(keys, (0..20_000).collect::<Vec<_>>());
}
