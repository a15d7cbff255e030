//! `Builder::max_pending`: a full wheel refuses new timers instead of
//! growing, and every way a timer leaves the wheel frees its place.

#[path = "support/paused.rs"]
mod paused;

use paused::ms;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_timing_wheel::TimingWheel;

#[tokio::test(start_paused = true)]
async fn a_full_wheel_refuses_new_timers_and_hands_them_back() {
    let (wheel, _expired) = TimingWheel::builder().max_pending(3).build();
    for key in 0..3u32 {
        wheel
            .set_timer(key, key, Duration::from_secs(60))
            .await
            .unwrap();
    }
    let err = wheel.set_timer(3, 3, ms(1)).await.unwrap_err();
    assert!(err.is_at_capacity() && !err.is_full() && !err.is_closed());
    assert_eq!(
        err.to_string(),
        "timing wheel holds as many timers as it may"
    );
    assert_eq!(err.into_timer::<u32, u32>(), Some((3, 3)));
    assert!(wheel
        .try_set_timer(3, 3, ms(1))
        .unwrap_err()
        .is_at_capacity());
    let deadline = tokio::time::Instant::now() + ms(1);
    assert!(wheel
        .set_timer_at(3, 3, deadline)
        .await
        .unwrap_err()
        .is_at_capacity());
    assert_eq!(wheel.stats().await.unwrap().pending, 3);
}

#[tokio::test(start_paused = true)]
async fn every_way_out_of_the_wheel_frees_a_place() {
    let (wheel, mut expired) = TimingWheel::builder().max_pending(2).build();
    let long = Duration::from_secs(60);
    // Fired.
    wheel.set_timer(1u32, (), ms(5)).await.unwrap();
    wheel.set_timer(2, (), long).await.unwrap();
    expired.recv().await.unwrap();
    // Removed.
    wheel.set_timer(3, (), long).await.unwrap();
    assert!(wheel
        .set_timer(4, (), long)
        .await
        .unwrap_err()
        .is_at_capacity());
    assert_eq!(wheel.remove_timer(3).await.unwrap(), Some(()));
    // Cancelled.
    wheel.set_timer(4, (), long).await.unwrap();
    wheel.cancel_timer(4).await.unwrap();
    // A cancel has no reply: its place is free once the driver applied it.
    wheel.stats().await.unwrap();
    // Replaced: setting a pending key again adds nothing once applied.
    wheel.set_timer(5, (), long).await.unwrap();
    wheel.stats().await.unwrap();
    assert!(wheel
        .set_timer(5, (), long)
        .await
        .unwrap_err()
        .is_at_capacity());
    // Drained.
    assert_eq!(wheel.drain().await.unwrap().len(), 2);
    wheel.set_timer(6, (), long).await.unwrap();
    wheel.set_timer(7, (), long).await.unwrap();
    // Removing or cancelling a missing key frees nothing.
    wheel.cancel_timer(99).await.unwrap();
    assert_eq!(wheel.remove_timer(98).await.unwrap(), None); // after the cancel
    assert!(wheel
        .set_timer(8, (), long)
        .await
        .unwrap_err()
        .is_at_capacity());
    assert_eq!(wheel.stats().await.unwrap().pending, 2);
}

#[tokio::test(start_paused = true)]
async fn refused_sends_give_their_place_back() {
    let (wheel, _expired) = TimingWheel::builder()
        .max_pending(1)
        .command_capacity(1)
        .build();
    wheel.try_set_timer(1u32, (), ms(10)).unwrap();
    // Channel full and limit reached: the limit answers first.
    assert!(wheel
        .try_set_timer(2, (), ms(10))
        .unwrap_err()
        .is_at_capacity());
    wheel.stop().await.unwrap();
    // Closed: the failed send does not keep a place.
    let err = wheel.set_timer(3, (), ms(10)).await.unwrap_err();
    assert!(err.is_closed());
}

/// A flood of 1,000,000 set/cancel commands from 8 tasks against a channel of
/// 16 and a limit of 1,000 completes, and the wheel never holds more than the
/// limit: memory is bounded by the channel and the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_stays_within_the_channel_and_the_limit() {
    const LIMIT: usize = 1_000;
    let (wheel, _expired) = TimingWheel::builder()
        .max_pending(LIMIT)
        .command_capacity(16)
        .build();
    let refused = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..8u64 {
        let (wheel, refused) = (wheel.clone(), Arc::clone(&refused));
        tasks.push(tokio::spawn(async move {
            for i in 0..62_500u64 {
                let key = task * 1_000_000 + i;
                match wheel.set_timer(key, i, Duration::from_secs(3600)).await {
                    Ok(()) => {}
                    Err(e) if e.is_at_capacity() => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("unexpected error: {e}"),
                }
                if i >= 100 {
                    wheel.cancel_timer(key - 100).await.unwrap();
                }
            }
        }));
    }
    let watcher = {
        let wheel = wheel.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            for _ in 0..200 {
                let Ok(stats) = wheel.stats().await else {
                    break;
                };
                peak = peak.max(stats.pending);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            peak
        })
    };
    let flood = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), flood)
        .await
        .expect("the flood did not complete");
    let peak = watcher.await.unwrap();
    let stats = wheel.stats().await.unwrap();
    assert!(peak <= LIMIT, "peak pending {peak}");
    // Each task leaves at most its last 100 keys pending.
    assert!(stats.pending <= 800, "pending {}", stats.pending);
    eprintln!(
        "flood: refused {} of 500000 sets, peak pending {peak}",
        refused.load(Ordering::Relaxed)
    );
}

/// Regression: a `set_timer` waiting for room in a full channel and then
/// dropped (by a `select!` or a timeout) set no timer but kept its place
/// under the limit for ever; enough of them and the wheel refused every
/// new timer.
#[tokio::test(start_paused = true)]
async fn a_set_timer_dropped_while_waiting_gives_its_place_back() {
    let (wheel, _expired) = TimingWheel::builder()
        .command_capacity(1)
        .max_pending(2)
        .build::<u32, ()>();
    // The driver has not run: this takes the channel's one slot.
    wheel.try_set_timer(1, (), ms(10)).unwrap();
    {
        let mut waiting = tokio_test::task::spawn(wheel.set_timer(2, (), ms(10)));
        assert!(waiting.poll().is_pending());
    }
    tokio::time::sleep(ms(20)).await;
    assert_eq!(wheel.stats().await.unwrap().pending, 0);
    wheel.try_set_timer(3, (), ms(100)).unwrap();
    wheel.stats().await.unwrap();
    wheel.try_set_timer(4, (), ms(100)).unwrap();
    assert_eq!(wheel.stats().await.unwrap().pending, 2);
}
