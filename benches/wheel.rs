//! End-to-end timer throughput: this crate beside `tokio_util`'s
//! `DelayQueue` (owned by the bench task, with a key map for keyed
//! semantics) and one `tokio::time::sleep` task per timer, all on a
//! current-thread runtime with a paused clock, in one run so the ratios can
//! be read off directly.
//!
//! Run with `cargo bench --bench wheel`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use futures::StreamExt;
use tokio_timing_wheel::TimingWheel;
use tokio_util::time::DelayQueue;

const TIMERS: u64 = 100_000;

/// A small deterministic generator, so every contender gets the same delays.
fn delays(n: u64) -> Vec<Duration> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Duration::from_millis(1 + x % 60_000)
        })
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

async fn fire_wheel(delays: &[Duration]) {
    let (wheel, mut expired) = TimingWheel::builder().command_capacity(4096).build();
    for (key, delay) in delays.iter().enumerate() {
        wheel
            .set_timer(key as u64, key as u64, *delay)
            .await
            .unwrap();
    }
    for _ in 0..delays.len() {
        expired.next().await.unwrap();
    }
}

async fn fire_delay_queue(delays: &[Duration]) {
    let mut queue = DelayQueue::new();
    let mut keys = HashMap::with_capacity(delays.len());
    for (key, delay) in delays.iter().enumerate() {
        keys.insert(key as u64, queue.insert(key as u64, *delay));
    }
    for _ in 0..delays.len() {
        let expired = futures::future::poll_fn(|cx| queue.poll_expired(cx))
            .await
            .unwrap();
        keys.remove(expired.get_ref());
    }
}

async fn fire_sleep_tasks(delays: &[Duration]) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (key, delay) in delays.iter().enumerate() {
        let (tx, delay) = (tx.clone(), *delay);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = tx.send(key as u64);
        });
    }
    for _ in 0..delays.len() {
        rx.recv().await.unwrap();
    }
}

fn fire(c: &mut Criterion) {
    let delays = delays(TIMERS);
    let mut group = c.benchmark_group("fire_100k");
    group.sample_size(10);
    group.bench_function("timing_wheel", |b| {
        b.iter_batched(
            runtime,
            |rt| rt.block_on(fire_wheel(&delays)),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("delay_queue", |b| {
        b.iter_batched(
            runtime,
            |rt| rt.block_on(fire_delay_queue(&delays)),
            BatchSize::PerIteration,
        )
    });
    group.bench_function("sleep_per_timer", |b| {
        b.iter_batched(
            runtime,
            |rt| rt.block_on(fire_sleep_tasks(&delays)),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// The request-timeout pattern: every timer is cancelled before it fires.
fn churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("churn_100k");
    group.sample_size(10);
    group.bench_function("timing_wheel", |b| {
        b.iter_custom(|iters| {
            let rt = runtime();
            let start = Instant::now();
            for _ in 0..iters {
                rt.block_on(async {
                    let (wheel, _expired) = TimingWheel::builder().command_capacity(4096).build();
                    for key in 0..TIMERS {
                        wheel
                            .set_timer(key, key, Duration::from_secs(10))
                            .await
                            .unwrap();
                        if key >= 1_000 {
                            wheel.cancel_timer(key - 1_000).await.unwrap();
                        }
                    }
                    wheel.stop().await.unwrap();
                });
            }
            start.elapsed()
        })
    });
    group.bench_function("delay_queue", |b| {
        b.iter_custom(|iters| {
            let rt = runtime();
            let start = Instant::now();
            for _ in 0..iters {
                rt.block_on(async {
                    let mut queue = DelayQueue::new();
                    let mut keys = HashMap::new();
                    for key in 0..TIMERS {
                        keys.insert(key, queue.insert(key, Duration::from_secs(10)));
                        if key >= 1_000 {
                            let k = keys.remove(&(key - 1_000)).unwrap();
                            queue.remove(&k);
                        }
                    }
                });
            }
            start.elapsed()
        })
    });
    group.finish();
}

criterion_group!(benches, fire, churn);
criterion_main!(benches);
