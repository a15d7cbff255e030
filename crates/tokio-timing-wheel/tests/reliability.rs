//! Nothing lost, nothing twice: accounting under concurrency, and the
//! batch edge cases of the command channel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_timing_wheel::TimingWheel;

/// Drops of every token, by id.
#[derive(Default)]
struct Ledger {
    drops: Mutex<HashMap<u64, u32>>,
}

/// A timer value that records its own drop, so a timer that is cancelled,
/// replaced or discarded is accounted for as surely as one handed back.
struct Token {
    id: u64,
    ledger: Arc<Ledger>,
}

impl Drop for Token {
    fn drop(&mut self) {
        *self
            .ledger
            .drops
            .lock()
            .unwrap()
            .entry(self.id)
            .or_default() += 1;
    }
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Regression (the assertion at the end): after `stop`, with the stream
/// also gone, `set_timer` reported "stream dropped" rather than "closed".
///
/// Eight tasks set, move, remove and cancel random keys of one shared range
/// while a consumer reads the stream; then `stop`. Every token a `set_timer`
/// accepted is dropped exactly once (fired, removed, cancelled, replaced or
/// returned by `stop`), no token is seen twice, none fires early, and calls
/// after `stop` are closed.
async fn accounting(seed: u64, ops_per_task: u64) {
    let ledger = Arc::new(Ledger::default());
    let ids = Arc::new(AtomicU64::new(0));
    let (wheel, mut expired) = TimingWheel::builder()
        .command_capacity(64)
        .build::<u16, Token>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let consumer = {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut early = 0u64;
            while let Some(e) = expired.next().await {
                // The timer's own deadline: a `move_timer` may have moved it
                // away from the one the token was made with.
                if Instant::now() < e.deadline() {
                    early += 1;
                }
                let (_, token) = e.into_parts();
                seen.lock().unwrap().push(token.id);
            }
            early
        })
    };
    let mut tasks = Vec::new();
    for task in 0..8u64 {
        let (wheel, ledger, ids, seen) = (
            wheel.clone(),
            Arc::clone(&ledger),
            Arc::clone(&ids),
            Arc::clone(&seen),
        );
        tasks.push(tokio::spawn(async move {
            let mut x = seed.wrapping_mul(31).wrapping_add(task) | 1;
            let mut accepted = 0u64;
            for _ in 0..ops_per_task {
                let key = (next(&mut x) % 64) as u16;
                let delay = Duration::from_micros(next(&mut x) % 20_000);
                match next(&mut x) % 6 {
                    0..=2 => {
                        let id = ids.fetch_add(1, Ordering::Relaxed);
                        let token = Token {
                            id,
                            ledger: Arc::clone(&ledger),
                        };
                        wheel.set_timer(key, token, delay).await.unwrap();
                        accepted += 1;
                    }
                    3 => wheel.move_timer(key, delay).await.unwrap(),
                    4 => {
                        if let Some(token) = wheel.remove_timer(key).await.unwrap() {
                            seen.lock().unwrap().push(token.id);
                        }
                    }
                    _ => wheel.cancel_timer(key).await.unwrap(),
                }
            }
            accepted
        }));
    }
    let mut accepted = 0;
    for task in tasks {
        accepted += task.await.unwrap();
    }
    let rest = wheel.stop().await.unwrap();
    seen.lock().unwrap().extend(rest.iter().map(|(_, t)| t.id));
    drop(rest);
    let early = consumer.await.unwrap();

    assert_eq!(early, 0, "seed {seed}: timers fired early");
    assert_eq!(ids.load(Ordering::Relaxed), accepted);
    {
        // Scoped: a token dropped while this is held would lock it again.
        let drops = ledger.drops.lock().unwrap();
        for id in 0..accepted {
            assert_eq!(
                drops.get(&id),
                Some(&1),
                "seed {seed}: token {id} dropped {:?} times",
                drops.get(&id)
            );
        }
    }
    let mut seen = seen.lock().unwrap().clone();
    let total = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen.len(),
        total,
        "seed {seed}: a token was handed out twice"
    );
    assert!(wheel
        .set_timer(
            1,
            Token {
                id: u64::MAX,
                ledger: Arc::clone(&ledger)
            },
            Duration::ZERO
        )
        .await
        .unwrap_err()
        .is_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_accepted_timer_ends_exactly_once_under_concurrency() {
    for seed in [1, 7, 42, 1_000_003] {
        accounting(seed, 5_000).await;
    }
}

/// Shards, a pending limit and every kind of call (set and try-set,
/// move, remove, cancel, drain, stats) from six tasks at once, twice: first
/// to the end, after which every place under the limit must be free again;
/// then with `stop` racing the tasks. Every token accepted is dropped
/// exactly once, none is handed out twice, none fires early, and the only
/// error a call meets is the stop's `is_closed`.
async fn sharded_and_limited(seed: u64, shards: usize) {
    const LIMIT: usize = 48;
    let ledger = Arc::new(Ledger::default());
    let ids = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (wheel, mut expired) = TimingWheel::builder()
        .shards(shards)
        .max_pending(LIMIT)
        .command_capacity(8)
        .build::<u16, Token>();
    let consumer = {
        let seen = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut early = 0;
            while let Some(e) = expired.next().await {
                if Instant::now() < e.deadline() {
                    early += 1;
                }
                seen.lock().unwrap().push(e.into_parts().1.id);
            }
            early
        })
    };
    let worker = |task: u64, stopping: bool| {
        let (wheel, ledger, ids) = (wheel.clone(), Arc::clone(&ledger), Arc::clone(&ids));
        let (seen, accepted) = (Arc::clone(&seen), Arc::clone(&accepted));
        tokio::spawn(async move {
            let mut x = seed.wrapping_mul(31).wrapping_add(task) | 1;
            for _ in 0..3_000 {
                let key = (next(&mut x) % 64) as u16;
                let delay = Duration::from_micros(next(&mut x) % 5_000);
                let result = match next(&mut x) % 9 {
                    0..=2 => {
                        let id = ids.fetch_add(1, Ordering::Relaxed);
                        let token = Token {
                            id,
                            ledger: Arc::clone(&ledger),
                        };
                        let set = if next(&mut x).is_multiple_of(2) {
                            wheel.set_timer(key, token, delay).await
                        } else {
                            wheel.try_set_timer(key, token, delay)
                        };
                        match set {
                            Ok(()) => {
                                accepted.lock().unwrap().push(id);
                                Ok(())
                            }
                            Err(e) if e.is_at_capacity() || e.is_full() => Ok(()),
                            Err(e) => Err(e),
                        }
                    }
                    3 => wheel.move_timer(key, delay).await,
                    4 => wheel.remove_timer(key).await.map(|token| {
                        seen.lock().unwrap().extend(token.map(|t| t.id));
                    }),
                    5 => wheel.cancel_timer(key).await,
                    6 => wheel.drain().await.map(|timers| {
                        seen.lock()
                            .unwrap()
                            .extend(timers.iter().map(|(_, t)| t.id));
                    }),
                    7 => wheel.stats().await.map(|stats| {
                        assert!(stats.pending <= LIMIT, "{stats:?}");
                    }),
                    _ => {
                        tokio::task::yield_now().await;
                        Ok(())
                    }
                };
                if let Err(e) = result {
                    assert!(stopping && e.is_closed(), "seed {seed}: {e:?}");
                    return;
                }
            }
        })
    };
    for task in (0..6).map(|t| worker(t, false)).collect::<Vec<_>>() {
        task.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(wheel.stats().await.unwrap().pending, 0, "seed {seed}");
    for k in 0..LIMIT as u16 {
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let token = Token {
            id,
            ledger: Arc::clone(&ledger),
        };
        wheel
            .set_timer(1_000 + k, token, Duration::from_secs(3_600))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: place {k} under the limit lost: {e:?}"));
        accepted.lock().unwrap().push(id);
    }
    for k in 0..LIMIT as u16 {
        let token = wheel.remove_timer(1_000 + k).await.unwrap().unwrap();
        seen.lock().unwrap().push(token.id);
    }
    let tasks: Vec<_> = (10..16).map(|t| worker(t, true)).collect();
    tokio::time::sleep(Duration::from_micros(next(&mut (seed | 1)) % 3_000)).await;
    let rest = wheel.stop().await.unwrap();
    seen.lock().unwrap().extend(rest.iter().map(|(_, t)| t.id));
    drop(rest);
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(consumer.await.unwrap(), 0, "seed {seed}: fired early");
    let drops = ledger.drops.lock().unwrap();
    for id in accepted.lock().unwrap().iter() {
        assert_eq!(drops.get(id), Some(&1), "seed {seed}: token {id}");
    }
    let mut seen = seen.lock().unwrap().clone();
    let all = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), all, "seed {seed}: a token handed out twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shards_and_a_pending_limit_lose_nothing_under_concurrency() {
    for seed in [7_919, 15_838, 104_729] {
        sharded_and_limited(seed, 1).await;
        sharded_and_limited(seed, 3).await;
    }
}

/// The long soak: 10 million operations. Run it on demand with
/// `cargo test --release --test reliability -- --ignored soak`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "long soak, run on demand"]
async fn soak_ten_million_operations() {
    accounting(99, 10_000_000 / 8).await;
}

/// Every handle dropped while its commands are still queued: the commands
/// are applied, the timers fire, and then the stream ends.
#[tokio::test(start_paused = true)]
async fn handles_dropped_with_commands_still_queued() {
    let (wheel, expired) = TimingWheel::builder().command_capacity(1_000).build();
    for key in 0..1_000u32 {
        wheel
            .try_set_timer(key, key, Duration::from_millis(u64::from(key % 10)))
            .unwrap();
    }
    drop(wheel); // before the driver ever ran
    let mut fired: Vec<u32> = expired.map(|e| *e.key()).collect().await;
    fired.sort_unstable();
    assert_eq!(fired, (0..1_000).collect::<Vec<_>>());
}

/// A key set 1,000 times in one batch: the last value and deadline win and
/// exactly one timer fires.
#[tokio::test(start_paused = true)]
async fn the_same_key_set_a_thousand_times_in_one_batch() {
    let (wheel, mut expired) = TimingWheel::builder().command_capacity(2_000).build();
    for round in 0..1_000u64 {
        wheel
            .try_set_timer("k", round, Duration::from_millis(1_000 - round))
            .unwrap();
    }
    let start = Instant::now();
    assert_eq!(expired.recv().await.unwrap().into_parts(), ("k", 999));
    assert_eq!(start.elapsed(), Duration::from_millis(1));
    let stats = wheel.stats().await.unwrap();
    assert_eq!((stats.pending, stats.fired), (0, 1));
}

/// A key set and removed in the same batch: the removal sees the timer.
#[tokio::test(start_paused = true)]
async fn a_key_set_and_removed_in_the_same_batch() {
    let (wheel, _expired) = TimingWheel::builder().build();
    wheel.try_set_timer(5u8, 'v', Duration::ZERO).unwrap();
    assert_eq!(wheel.remove_timer(5).await.unwrap(), Some('v'));
    assert_eq!(wheel.stats().await.unwrap().fired, 0);
}
