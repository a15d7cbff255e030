//! End-to-end timer throughput: this crate beside `tokio_util`'s
//! `DelayQueue` (owned by the bench task, with a key map for keyed
//! semantics) and one `tokio::time::sleep` task per timer, all on a
//! current-thread runtime with a paused clock, in one run so the ratios can
//! be read off directly. Every wheel is built with the builder's defaults
//! (a command channel of 1,024), as a user would get it.
//!
//! Run with `cargo bench --bench wheel`; `TTW_INTERLEAVED=<rounds> cargo
//! bench --bench wheel` runs fire, touch and churn for both contenders
//! alternately instead (see [`interleaved`]).

mod support;

use support::median;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BatchSize, Criterion};
use futures::StreamExt;
use tokio_timing_wheel::bench_support::PureWheel;
use tokio_timing_wheel::TimingWheel;
use tokio_util::time::DelayQueue;

const TIMERS: u64 = 1_000_000;

/// `n` numbers below `bound` from a small deterministic generator, so every
/// contender gets the same work.
fn random(seed: u64, n: u64, bound: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % bound
        })
        .collect()
}

/// Delays from 1 ms to 60 s.
fn delays(n: u64) -> Vec<Duration> {
    random(0x9E37_79B9_7F4A_7C15, n, 60_000)
        .into_iter()
        .map(|ms| Duration::from_millis(1 + ms))
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

async fn fire_wheel(delays: &[Duration], reserve: bool) {
    let capacity = if reserve { delays.len() } else { 0 };
    let (wheel, mut expired) = TimingWheel::builder().capacity(capacity).build();
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

async fn fire_delay_queue(delays: &[Duration], reserve: bool) {
    let mut queue = if reserve {
        DelayQueue::with_capacity(delays.len())
    } else {
        DelayQueue::new()
    };
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
    // The second group reserves room for every timer up front on both
    // sides: `Builder::capacity` and `DelayQueue::with_capacity`.
    for (name, reserve) in [("fire_1m", false), ("fire_1m_reserved", true)] {
        let mut group = c.benchmark_group(name);
        group.sample_size(10);
        group.bench_function("timing_wheel", |b| {
            b.iter_batched(
                runtime,
                |rt| rt.block_on(fire_wheel(&delays, reserve)),
                BatchSize::PerIteration,
            )
        });
        group.bench_function("delay_queue", |b| {
            b.iter_batched(
                runtime,
                |rt| rt.block_on(fire_delay_queue(&delays, reserve)),
                BatchSize::PerIteration,
            )
        });
        if !reserve {
            group.bench_function("sleep_per_timer", |b| {
                b.iter_batched(
                    runtime,
                    |rt| rt.block_on(fire_sleep_tasks(&delays)),
                    BatchSize::PerIteration,
                )
            });
        }
        group.finish();
    }
}

/// The request-timeout pattern: every timer is cancelled before it fires.
async fn churn_wheel() {
    let (wheel, _expired) = TimingWheel::builder().build();
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
}

async fn churn_delay_queue() {
    let mut queue = DelayQueue::new();
    let mut keys = HashMap::new();
    for key in 0..TIMERS {
        keys.insert(key, queue.insert(key, Duration::from_secs(10)));
        if key >= 1_000 {
            let k = keys.remove(&(key - 1_000)).unwrap();
            queue.remove(&k);
        }
    }
}

fn churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("churn_1m");
    group.sample_size(10);
    group.bench_function("timing_wheel", |b| {
        b.iter_custom(|iters| {
            let rt = runtime();
            let start = Instant::now();
            for _ in 0..iters {
                rt.block_on(churn_wheel());
            }
            start.elapsed()
        })
    });
    group.bench_function("delay_queue", |b| {
        b.iter_custom(|iters| {
            let rt = runtime();
            let start = Instant::now();
            for _ in 0..iters {
                rt.block_on(churn_delay_queue());
            }
            start.elapsed()
        })
    });
    group.finish();
}

/// Heartbeats: 50,000 keys 30 s out, 1,000,000 pushes of a random key's
/// deadline to 30 s from now, the clock moving 1 ms per 1,000 pushes.
const TOUCH_KEYS: u64 = 50_000;
const TOUCHES: u64 = 1_000_000;

fn touch_keys() -> Vec<u64> {
    random(0x2545_F491_4F6C_DD1D, TOUCHES, TOUCH_KEYS)
}

/// The pushes alone, timed after the keys are set.
async fn touch_wheel(keys: &[u64]) -> Duration {
    let deadline = Duration::from_secs(30);
    let (wheel, _expired) = TimingWheel::builder().build();
    for key in 0..TOUCH_KEYS {
        wheel.set_timer(key, key, deadline).await.unwrap();
    }
    wheel.stats().await.unwrap();
    let start = Instant::now();
    for (i, key) in keys.iter().enumerate() {
        wheel.move_timer(*key, deadline).await.unwrap();
        if i % 1_000 == 999 {
            tokio::time::advance(Duration::from_millis(1)).await;
        }
    }
    wheel.stats().await.unwrap();
    start.elapsed()
}

async fn touch_delay_queue(keys: &[u64]) -> Duration {
    let deadline = Duration::from_secs(30);
    let mut queue = DelayQueue::with_capacity(TOUCH_KEYS as usize);
    let mut map = HashMap::with_capacity(TOUCH_KEYS as usize);
    for key in 0..TOUCH_KEYS {
        map.insert(key, queue.insert(key, deadline));
    }
    let start = Instant::now();
    for (i, key) in keys.iter().enumerate() {
        queue.reset(&map[key], deadline);
        if i % 1_000 == 999 {
            tokio::time::advance(Duration::from_millis(1)).await;
        }
    }
    start.elapsed()
}

fn touch(c: &mut Criterion) {
    let keys = touch_keys();
    let mut group = c.benchmark_group("touch_1m");
    group.sample_size(10);
    group.bench_function("timing_wheel", |b| {
        b.iter_custom(|iters| {
            let rt = runtime();
            (0..iters).map(|_| rt.block_on(touch_wheel(&keys))).sum()
        })
    });
    group.bench_function("delay_queue", |b| {
        b.iter_custom(|iters| {
            let rt = runtime();
            (0..iters)
                .map(|_| rt.block_on(touch_delay_queue(&keys)))
                .sum()
        })
    });
    group.finish();
}

/// Eight tasks on a multi-thread runtime (real clock) each issue set +
/// cancel pairs as fast as they can, with 1, 2 and 4 shards.
fn producers(c: &mut Criterion) {
    const TASKS: u64 = 8;
    const PAIRS: u64 = 25_000;
    let mut group = c.benchmark_group("producers_8x25k_pairs");
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(TASKS * PAIRS * 2));
    for shards in [1usize, 2, 4] {
        group.bench_function(format!("shards_{shards}"), |b| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_time()
                .build()
                .unwrap();
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += rt.block_on(async {
                        let (wheel, _expired) =
                            TimingWheel::builder().shards(shards).build::<u64, u64>();
                        let start = Instant::now();
                        let tasks: Vec<_> = (0..TASKS)
                            .map(|task| {
                                let wheel = wheel.clone();
                                tokio::spawn(async move {
                                    for i in 0..PAIRS {
                                        let key = task << 32 | i;
                                        wheel
                                            .set_timer(key, i, Duration::from_secs(10))
                                            .await
                                            .unwrap();
                                        wheel.cancel_timer(key).await.unwrap();
                                    }
                                })
                            })
                            .collect();
                        for task in tasks {
                            task.await.unwrap();
                        }
                        wheel.stats().await.unwrap();
                        let took = start.elapsed();
                        wheel.stop().await.unwrap();
                        took
                    });
                }
                total
            })
        });
    }
    group.finish();
}

/// The synchronous wheel alone, no runtime: insert, cancel, and
/// advance-and-expire, per operation.
fn pure(c: &mut Criterion) {
    const N: u64 = 100_000;
    let delays: Vec<u64> = delays(N).iter().map(|d| d.as_millis() as u64).collect();
    let mut group = c.benchmark_group("pure_wheel_100k");
    group.throughput(criterion::Throughput::Elements(N));
    group.bench_function("insert", |b| {
        b.iter_batched_ref(
            PureWheel::<u64, u64>::default,
            |wheel| {
                for (key, when) in delays.iter().enumerate() {
                    wheel.insert(key as u64, key as u64, *when);
                }
            },
            BatchSize::LargeInput,
        )
    });
    let filled = || {
        let mut wheel = PureWheel::<u64, u64>::default();
        for (key, when) in delays.iter().enumerate() {
            wheel.insert(key as u64, key as u64, *when);
        }
        wheel
    };
    group.bench_function("cancel", |b| {
        b.iter_batched_ref(
            filled,
            |wheel| {
                for key in 0..N {
                    wheel.remove(&key);
                }
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("advance_and_expire", |b| {
        b.iter_batched_ref(
            filled,
            |wheel| {
                wheel.advance(60_001);
                // As the driver takes them: up to 1,024 at a time.
                while wheel.take_due(1_024, |_, _, _| {}) == 1_024 {}
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// Runs `future` on a fresh paused runtime and times it, as churn's
/// `iter_custom` does: the runtime's shutdown is not timed.
fn timed<F: std::future::Future<Output = ()>>(future: F) -> Duration {
    let rt = runtime();
    let start = Instant::now();
    rt.block_on(future);
    start.elapsed()
}

/// Like [`timed`], with the runtime's shutdown timed too, as fire's
/// `iter_batched` does (its routine takes the runtime by value and drops
/// it). The wheel's driver task is still on the runtime when `fire_wheel`
/// returns, so its teardown (the wheel grown to a million timers) happens
/// there: 4 to 11 ms a run, left out, favoured this crate by about 1 %.
fn timed_with_shutdown<F: std::future::Future<Output = ()>>(future: F) -> Duration {
    let rt = runtime();
    let start = Instant::now();
    rt.block_on(future);
    drop(rt);
    start.elapsed()
}

/// One scenario's rounds for the interleaved run: ours and `DelayQueue`
/// back to back, which goes first alternating; each round's two times in
/// milliseconds.
fn rounds(
    rounds: usize,
    ours: &mut dyn FnMut() -> Duration,
    theirs: &mut dyn FnMut() -> Duration,
) -> Vec<(f64, f64)> {
    (0..rounds)
        .map(|round| {
            let (a, b) = if round % 2 == 0 {
                let a = ours();
                (a, theirs())
            } else {
                let b = theirs();
                (ours(), b)
            };
            (a.as_secs_f64() * 1e3, b.as_secs_f64() * 1e3)
        })
        .collect()
}

/// `TTW_INTERLEAVED=<rounds> cargo bench --bench wheel`: fire, touch and
/// churn, this crate and `DelayQueue` run alternately, one ratio per round.
/// The machine's load moves from minute to minute; criterion times all of
/// one contender's samples and then all of the other's, so a busy minute
/// lands on one side only. Here both sides of each ratio run within a
/// second or so of each other.
fn interleaved(count: usize) {
    let delays = delays(TIMERS);
    let keys = touch_keys();
    let touch = |keys: &[u64], ours: bool| {
        runtime().block_on(async {
            if ours {
                touch_wheel(keys).await
            } else {
                touch_delay_queue(keys).await
            }
        })
    };
    let scenarios = [
        (
            "fire_1m",
            rounds(
                count,
                &mut || timed_with_shutdown(fire_wheel(&delays, false)),
                &mut || timed_with_shutdown(fire_delay_queue(&delays, false)),
            ),
        ),
        (
            "touch_1m",
            rounds(count, &mut || touch(&keys, true), &mut || {
                touch(&keys, false)
            }),
        ),
        (
            "churn_1m",
            rounds(count, &mut || timed(churn_wheel()), &mut || {
                timed(churn_delay_queue())
            }),
        ),
    ];
    println!("{count} rounds; ratio = ours / DelayQueue in the same round");
    for (name, times) in scenarios {
        let ratios: Vec<f64> = times.iter().map(|(a, b)| a / b).collect();
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
        let (low, high) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
        // Each contender's fastest round is the one the machine disturbed
        // least: their ratio is a second, steadier reading.
        let fastest = times
            .iter()
            .fold((f64::MAX, f64::MAX), |(a, b), t| (a.min(t.0), b.min(t.1)));
        println!(
            "{name:<9} ratio median {:.3} (min {low:.3}, max {high:.3}); \
             median ms: ours {:.1}, DelayQueue {:.1}\n          \
             fastest ms: ours {:.1}, DelayQueue {:.1}, ratio {:.3}\n          [{}]",
            median(ratios.clone()),
            median(times.iter().map(|t| t.0).collect()),
            median(times.iter().map(|t| t.1).collect()),
            fastest.0,
            fastest.1,
            fastest.0 / fastest.1,
            each.join(" ")
        );
    }
}

criterion_group!(benches, fire, churn, touch, producers, pure);

fn main() {
    support::main(benches, interleaved);
}
