//! The wheel's delay futures beside `tokio::time`'s own, on a current-thread
//! runtime with a paused clock and the time driver only:
//!
//! - **timeouts**: 1,000,000 requests, 1,000 in flight (`FuturesUnordered`),
//!   each wrapped in a 10 s timeout around a future that completes on its
//!   second poll, so each timeout registers a deadline and then cancels
//!   it; run also with no timeout, so that what a timeout adds can be taken
//!   apart from the loop;
//! - **sleeps**: 200,000 spawned tasks each awaiting one sleep of 1 ms –
//!   60 s, all run to completion; in the interleaved mode also beside
//!   [`floor`], the same tasks woken in deadline order by a timer that
//!   costs nothing of its own, so that what each timer adds to the tasks
//!   can be read apart from what the tasks cost.
//!
//! and, in the interleaved mode only, the same two on a 2-worker
//! multi-thread runtime with the real clock: 16 tasks each issuing 62,500
//! of the requests one after another (wall time), and 200,000 sleeps of
//! 1 ms – 1 s (the process's CPU time, as the wall time is the longest
//! sleep).
//!
//! `cargo bench --bench futures` runs them under criterion;
//! `TTW_INTERLEAVED=<rounds> cargo bench --bench futures` runs the
//! contenders alternately, one ratio per round (see [`interleaved`]).

mod support;

use support::median;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio_timing_wheel::TimingWheel;

const REQUESTS: usize = 1_000_000;
const IN_FLIGHT: usize = 1_000;
const SLEEPS: u64 = 200_000;
const TIMEOUT: Duration = Duration::from_secs(10);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// A request that completes on its second poll: it wakes itself at once,
/// as a reply already on its way would.
struct Request(bool);

impl Future for Request {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Which timeout wraps each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timeouts {
    None,
    Tokio,
    Wheel,
}

/// The request loop: [`IN_FLIGHT`] requests at a time until [`REQUESTS`]
/// have completed.
async fn requests(timeouts: Timeouts) {
    let (wheel, expired) = TimingWheel::<u64, ()>::new();
    let make = |_: usize| -> Pin<Box<dyn Future<Output = ()>>> {
        match timeouts {
            Timeouts::None => Box::pin(Request(false)),
            Timeouts::Tokio => Box::pin(async {
                tokio::time::timeout(TIMEOUT, Request(false)).await.unwrap();
            }),
            Timeouts::Wheel => {
                let timeout = wheel.timeout(TIMEOUT, Request(false));
                Box::pin(async {
                    timeout.await.unwrap();
                })
            }
        }
    };
    let mut in_flight = FuturesUnordered::new();
    let mut issued = 0;
    while issued < IN_FLIGHT {
        in_flight.push(make(issued));
        issued += 1;
    }
    while in_flight.next().await.is_some() {
        if issued < REQUESTS {
            in_flight.push(make(issued));
            issued += 1;
        }
    }
    drop(expired);
}

/// Delays from 1 ms to 60 s, the same for every contender.
fn delays() -> Vec<Duration> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..SLEEPS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Duration::from_millis(1 + x % 60_000)
        })
        .collect()
}

/// [`SLEEPS`] spawned tasks, each awaiting one sleep, all to completion.
async fn sleeps(delays: &[Duration], wheel: bool) {
    let (handle, expired) = TimingWheel::<u64, ()>::new();
    let mut tasks = Vec::with_capacity(delays.len());
    for &delay in delays {
        tasks.push(if wheel {
            let sleep = handle.sleep(delay);
            tokio::spawn(async move {
                sleep.await.unwrap();
            })
        } else {
            tokio::spawn(tokio::time::sleep(delay))
        });
    }
    for task in tasks {
        task.await.unwrap();
    }
    drop(expired);
}

/// The floor under any timer that Tokio's own timer wakes: the tasks of
/// [`sleeps`], each waiting on a slot of its own in one table, woken in
/// deadline order by one task of its own (as the wheel's driver is) that
/// sleeps on Tokio's timer until each deadline millisecond in turn, while
/// the bench's task awaits them as in [`sleeps`]. The deadlines come sorted
/// (`order`, made outside the timed part): no clock is read per sleep,
/// nothing is filed, cascaded or cancelled. A real timer pays all of that
/// on top; the runtime wakes once per deadline millisecond here, as it must
/// for any timer on a millisecond grid.
async fn floor(order: Arc<[(Duration, usize)]>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    use std::task::Waker;

    struct Table {
        fired: Vec<AtomicBool>,
        wakers: Mutex<Vec<Option<Waker>>>,
    }
    struct Wait(Arc<Table>, usize);
    impl Future for Wait {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let fired = |t: &Table| t.fired[self.1].load(Ordering::Acquire);
            if fired(&self.0) {
                return Poll::Ready(());
            }
            let mut wakers = self.0.wakers.lock().unwrap();
            if fired(&self.0) {
                return Poll::Ready(());
            }
            wakers[self.1] = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    let n = order.len();
    let table = Arc::new(Table {
        fired: (0..n).map(|_| AtomicBool::new(false)).collect(),
        wakers: Mutex::new(vec![None; n]),
    });
    let tasks: Vec<_> = (0..n)
        .map(|i| tokio::spawn(Wait(Arc::clone(&table), i)))
        .collect();
    let start = tokio::time::Instant::now();
    let firer = tokio::spawn(async move {
        let mut woken = Vec::new();
        let mut tick = Duration::ZERO;
        for &(delay, i) in order.iter() {
            if delay != tick {
                woken.drain(..).for_each(Waker::wake);
                tokio::time::sleep_until(start + delay).await;
                tick = delay;
            }
            let mut wakers = table.wakers.lock().unwrap();
            table.fired[i].store(true, Ordering::Release);
            woken.extend(wakers[i].take());
        }
        woken.drain(..).for_each(Waker::wake);
    });
    for task in tasks {
        task.await.unwrap();
    }
    firer.await.unwrap();
}

/// `delays` with their places, sorted by deadline, for [`floor`].
fn sorted(delays: &[Duration]) -> Arc<[(Duration, usize)]> {
    let mut order: Vec<_> = delays.iter().copied().zip(0..).collect();
    order.sort_unstable();
    order.into()
}

fn timed<F: Future<Output = ()>>(future: F) -> Duration {
    let rt = runtime();
    let start = Instant::now();
    rt.block_on(future);
    start.elapsed()
}

fn criterion_timeouts(c: &mut Criterion) {
    let mut group = c.benchmark_group("timeouts_1m");
    group.sample_size(10);
    for (name, kind) in [
        ("none", Timeouts::None),
        ("tokio", Timeouts::Tokio),
        ("wheel", Timeouts::Wheel),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| timed(requests(kind))).sum())
        });
    }
    group.finish();
}

fn criterion_sleeps(c: &mut Criterion) {
    let delays = delays();
    let mut group = c.benchmark_group("sleeps_200k");
    group.sample_size(10);
    for (name, wheel) in [("tokio", false), ("wheel", true)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| timed(sleeps(&delays, wheel))).sum())
        });
    }
    let order = sorted(&delays);
    group.bench_function("floor", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| timed(floor(Arc::clone(&order)))).sum())
    });
    group.finish();
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

/// Tasks issuing requests at once on the multi-thread runtime.
const TASKS: usize = 16;

/// [`REQUESTS`] on a 2-worker runtime: [`TASKS`] tasks, each issuing its
/// share one after another. Returns the wall time.
fn requests_multi_thread(timeouts: Timeouts) -> Duration {
    let rt = multi_thread();
    let start = Instant::now();
    rt.block_on(async {
        let (wheel, expired) = TimingWheel::<u64, ()>::new();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let wheel = wheel.clone();
                tokio::spawn(async move {
                    for _ in 0..REQUESTS / TASKS {
                        match timeouts {
                            Timeouts::None => Request(false).await,
                            Timeouts::Tokio => {
                                tokio::time::timeout(TIMEOUT, Request(false)).await.unwrap()
                            }
                            Timeouts::Wheel => {
                                wheel.timeout(TIMEOUT, Request(false)).await.unwrap()
                            }
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        drop(expired);
    });
    start.elapsed()
}

/// The process's user and system CPU time so far, from /proc (Linux; 10 ms
/// steps), or nothing elsewhere.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// [`SLEEPS`] sleeps of 1 ms – 1 s on a 2-worker runtime with the real
/// clock: the CPU time they took.
fn sleeps_multi_thread(delays: &[Duration], wheel: bool) -> Duration {
    let rt = multi_thread();
    let short: Vec<Duration> = delays.iter().map(|d| *d / 60).collect();
    let before = cpu_time().unwrap_or_default();
    rt.block_on(sleeps(&short, wheel));
    drop(rt);
    cpu_time().unwrap_or_default().saturating_sub(before)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One round's times in milliseconds: `[none, tokio, wheel]` for the
/// request loops, `[tokio, wheel]` for the sleeps on 2 workers and
/// `[tokio, wheel, floor]` for those on one thread.
#[derive(Debug, Default, Clone, Copy)]
struct Round {
    requests: [f64; 3],
    sleeps: [f64; 3],
    requests_mt: [f64; 3],
    sleeps_mt_cpu: [f64; 2],
}

/// Runs `run` on each of `kinds`, starting at a different one each round.
fn turn<const N: usize>(round: usize, mut run: impl FnMut(usize) -> f64) -> [f64; N] {
    let mut t = [0.0; N];
    for i in 0..N {
        let kind = (i + round) % N;
        t[kind] = run(kind);
    }
    t
}

const KINDS: [Timeouts; 3] = [Timeouts::None, Timeouts::Tokio, Timeouts::Wheel];

/// `TTW_INTERLEAVED=<rounds> cargo bench --bench futures`: each round runs
/// every contender back to back, the order turning each round, so both
/// sides of a ratio meet the same load on the machine. Prints the median
/// over rounds of each round's ratio, wheel / `tokio::time`, and beside it
/// the ratio of the medians and that of each side's fastest round.
fn interleaved(count: usize) {
    let delays = delays();
    let order = sorted(&delays);
    let rounds: Vec<Round> = (0..count)
        .map(|round| Round {
            requests: turn(round, |k| ms(timed(requests(KINDS[k])))),
            sleeps: turn(round, |k| match k {
                2 => ms(timed(floor(Arc::clone(&order)))),
                _ => ms(timed(sleeps(&delays, k == 1))),
            }),
            requests_mt: turn(round, |k| ms(requests_multi_thread(KINDS[k]))),
            sleeps_mt_cpu: turn(round, |k| ms(sleeps_multi_thread(&delays, k == 1))),
        })
        .collect();
    let med = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let added = |t: [f64; 3]| (t[2] - t[0]) / (t[1] - t[0]);
    println!("{count} rounds; ratio = wheel / tokio::time in the same round, median over rounds");
    println!("  [in brackets: the ratio of the medians, then of each side's fastest round]");
    let requests = |name: &str, pick: &dyn Fn(&Round) -> [f64; 3]| {
        let medians: [f64; 3] = std::array::from_fn(|k| med(&|r| pick(r)[k]));
        let fastest: [f64; 3] = std::array::from_fn(|k| least(rounds.iter().map(|r| pick(r)[k])));
        println!(
            "{name}\n  whole loop: ratio {:.3} [{:.3}, {:.3}]; what a timeout adds: ratio {:.3} [{:.3}, {:.3}]\n  \
             median ms: no timeout {:.1}, tokio {:.1}, wheel {:.1}",
            med(&|r| pick(r)[2] / pick(r)[1]),
            medians[2] / medians[1],
            fastest[2] / fastest[1],
            med(&|r| added(pick(r))),
            added(medians),
            added(fastest),
            medians[0],
            medians[1],
            medians[2],
        );
    };
    let sleeps = |name: &str, pick: &dyn Fn(&Round) -> [f64; 2]| {
        let medians: [f64; 2] = std::array::from_fn(|k| med(&|r| pick(r)[k]));
        let fastest: [f64; 2] = std::array::from_fn(|k| least(rounds.iter().map(|r| pick(r)[k])));
        println!(
            "{name}\n  ratio {:.3} [{:.3}, {:.3}]; median ms: tokio {:.1}, wheel {:.1}",
            med(&|r| pick(r)[1] / pick(r)[0]),
            medians[1] / medians[0],
            fastest[1] / fastest[0],
            medians[0],
            medians[1],
        );
    };
    requests("timeouts_1m (current-thread, paused clock)", &|r| {
        r.requests
    });
    sleeps("sleeps_200k (current-thread, paused clock)", &|r| {
        [r.sleeps[0], r.sleeps[1]]
    });
    // What each timer adds over the floor, as "what a timeout adds" is
    // read over the loop with none.
    let over = |t: [f64; 3]| (t[1] - t[2]) / (t[0] - t[2]);
    let medians: [f64; 3] = std::array::from_fn(|k| med(&|r| r.sleeps[k]));
    println!(
        "  floor (no timer cost of its own): ratio to tokio {:.3}, median ms {:.1}; \
         what the timer adds over it: ratio {:.3} [{:.3}]",
        med(&|r| r.sleeps[2] / r.sleeps[0]),
        medians[2],
        med(&|r| over(r.sleeps)),
        over(medians),
    );
    requests(
        &format!("timeouts_1m, {TASKS} tasks (2 workers, real clock)"),
        &|r| r.requests_mt,
    );
    sleeps(
        "sleeps_200k of 1 ms - 1 s (2 workers, real clock), process CPU time",
        &|r| r.sleeps_mt_cpu,
    );
}

/// The least of `values`.
fn least(values: impl Iterator<Item = f64>) -> f64 {
    values.fold(f64::INFINITY, f64::min)
}

criterion_group!(benches, criterion_timeouts, criterion_sleeps);

fn main() {
    support::main(benches, interleaved);
}
