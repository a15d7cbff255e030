//! `Builder::shards`: several drivers, one handle, one stream.

#[path = "support/paused.rs"]
mod paused;

use paused::ms;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_timing_wheel::TimingWheel;

/// Each key's commands stay ordered: many tasks each hammer their own key
/// with set / move / remove, and the last command of each wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_keys_commands_stay_in_order_across_shards() {
    let (wheel, mut expired) = TimingWheel::builder().shards(4).build();
    let mut tasks = Vec::new();
    for key in 0..64u32 {
        let wheel = wheel.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..200u32 {
                wheel
                    .set_timer(key, round, Duration::from_secs(3600))
                    .await
                    .unwrap();
                wheel
                    .move_timer(key, Duration::from_secs(7200))
                    .await
                    .unwrap();
                if round % 3 == 0 {
                    wheel.cancel_timer(key).await.unwrap();
                }
            }
            // The last round (199) was not cancelled: set it to fire soon.
            wheel.move_timer(key, ms(50)).await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut fired = Vec::new();
    for _ in 0..64 {
        fired.push(expired.next().await.unwrap().into_parts());
    }
    fired.sort_unstable();
    assert_eq!(fired, (0..64).map(|k| (k, 199)).collect::<Vec<_>>());
    assert_eq!(wheel.stats().await.unwrap().pending, 0);
}

#[tokio::test(start_paused = true)]
async fn drain_stop_and_stats_cover_every_shard() {
    let (wheel, mut expired) = TimingWheel::builder().shards(3).build();
    for key in 0..300u32 {
        wheel
            .set_timer(key, key, ms(u64::from(key) + 1))
            .await
            .unwrap();
    }
    let start = Instant::now();
    for _ in 0..100 {
        let e = expired.next().await.unwrap();
        assert!(Instant::now() >= e.deadline());
    }
    assert_eq!(start.elapsed(), ms(100));
    let stats = wheel.stats().await.unwrap();
    assert_eq!((stats.pending, stats.fired), (200, 100));
    let mut drained = wheel.drain().await.unwrap();
    drained.sort_unstable();
    assert_eq!(drained, (100..300).map(|k| (k, k)).collect::<Vec<_>>());
    for key in 0..30u32 {
        wheel
            .set_timer(key, key, Duration::from_secs(60))
            .await
            .unwrap();
    }
    let mut left = wheel.stop().await.unwrap();
    left.sort_unstable();
    assert_eq!(left, (0..30).map(|k| (k, k)).collect::<Vec<_>>());
    assert!(expired.next().await.is_none());
    assert!(wheel.stop().await.unwrap_err().is_closed());
}

#[tokio::test(start_paused = true)]
async fn of_two_concurrent_stops_exactly_one_succeeds() {
    let (wheel, _expired) = TimingWheel::builder().shards(4).build();
    for key in 0..40u32 {
        wheel
            .set_timer(key, (), Duration::from_secs(60))
            .await
            .unwrap();
    }
    let (a, b) = tokio::join!(wheel.stop(), wheel.stop());
    let (pending, err) = match (a, b) {
        (Ok(p), Err(e)) | (Err(e), Ok(p)) => (p, e),
        (a, b) => panic!(
            "expected one success: {:?} / {:?}",
            a.map(|p| p.len()),
            b.map(|p| p.len())
        ),
    };
    assert_eq!(pending.len(), 40);
    assert!(err.is_closed());
}

#[tokio::test(start_paused = true)]
async fn the_stream_ends_only_after_every_shard_is_done() {
    let (wheel, expired) = TimingWheel::builder().shards(4).build();
    for key in 0..40u32 {
        wheel
            .set_timer(key, (), ms(u64::from(key) * 10 + 10))
            .await
            .unwrap();
    }
    drop(wheel);
    let start = Instant::now();
    let fired: Vec<u32> = expired.map(|e| *e.key()).collect().await;
    assert_eq!(fired.len(), 40);
    assert_eq!(start.elapsed(), ms(400));
}

#[tokio::test(start_paused = true)]
async fn sleeps_and_limits_work_with_shards() {
    let (wheel, _expired) = TimingWheel::builder().shards(2).max_pending(10).build();
    for key in 0..10u32 {
        wheel
            .set_timer(key, (), Duration::from_secs(60))
            .await
            .unwrap();
    }
    assert!(wheel
        .set_timer(10, (), ms(1))
        .await
        .unwrap_err()
        .is_at_capacity());
    let start = Instant::now();
    wheel.sleep(ms(25)).await.unwrap();
    assert_eq!(start.elapsed(), ms(25));
}

/// Regression: a `drain` of several shards that met a concurrent `stop`
/// failed with `is_closed` at the first shard the stop had closed, and
/// dropped the timers it had already taken out of the shards before: they
/// were neither fired, nor drained, nor returned by the stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_meeting_a_stop_loses_no_timer() {
    const TIMERS: usize = 400;
    for round in 0..50 {
        let (wheel, mut expired) = TimingWheel::builder().shards(4).build::<usize, ()>();
        for key in 0..TIMERS {
            wheel.set_timer(key, (), ms(60_000)).await.unwrap();
        }
        let drain = tokio::spawn({
            let wheel = wheel.clone();
            async move { wheel.drain().await }
        });
        let stop = tokio::spawn({
            let wheel = wheel.clone();
            async move { wheel.stop().await }
        });
        let drained = drain.await.unwrap().map_or(0, |timers| timers.len());
        let stopped = stop.await.unwrap().unwrap().len();
        let fired = expired.by_ref().count().await;
        assert_eq!(
            drained + stopped + fired,
            TIMERS,
            "round {round}: {drained} drained, {stopped} returned by stop, {fired} fired"
        );
    }
}

/// Regression: a `stop` of several shards dropped after the first shard
/// had the stop left the other shards running for ever: no later `stop`
/// could reach them (the first shard said closed), yet their timers went
/// on firing and commands on their keys went on succeeding.
#[tokio::test(start_paused = true)]
async fn a_stop_dropped_midway_still_stops_every_shard() {
    let (wheel, mut expired) = TimingWheel::builder().shards(2).build::<u32, u32>();
    for key in 0..64 {
        wheel.set_timer(key, key, ms(60_000)).await.unwrap();
    }
    {
        let mut stop = tokio_test::task::spawn(wheel.stop());
        // The first shard has the stop queued; the future is then dropped.
        assert!(stop.poll().is_pending());
    }
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    assert!(wheel.is_closed());
    assert!(wheel.stop().await.unwrap_err().is_closed());
    for key in 0..64 {
        assert!(
            wheel.remove_timer(key).await.unwrap_err().is_closed(),
            "key {key}"
        );
    }
    assert!(wheel
        .set_timer(1_000, 0, ms(1))
        .await
        .unwrap_err()
        .is_closed());
    tokio::time::sleep(ms(120_000)).await;
    assert!(expired.next().await.is_none());
}
