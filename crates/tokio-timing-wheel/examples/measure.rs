//! Figures for BENCHMARKS.md that are not times: resident memory per pending
//! timer (this crate beside `DelayQueue` plus a key map) and per pending
//! sleep (beside `tokio::time::sleep`), driver wake-ups over an idle
//! simulated hour, and real-clock lateness (beside a binary heap that sleeps
//! with `tokio::time::sleep_until` on its next deadline).
//!
//! ```text
//! cargo run --release --example measure
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_timing_wheel::TimingWheel;
use tokio_util::time::DelayQueue;

const TIMERS: u64 = 1_000_000;

/// Resident set size in bytes, from /proc (Linux).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn memory() {
    let hour = Duration::from_secs(3600);
    let rt = paused_runtime();
    let ours = rt.block_on(async {
        let (wheel, expired) = TimingWheel::builder().build::<u64, u64>();
        let before = rss();
        for key in 0..TIMERS {
            wheel.set_timer(key, key, hour).await.unwrap();
        }
        assert_eq!(wheel.stats().await.unwrap().pending, TIMERS as usize);
        let after = rss();
        wheel.stop().await.unwrap();
        drop(expired);
        after.saturating_sub(before)
    });
    drop(rt);
    let rt = paused_runtime();
    let theirs = rt.block_on(async {
        let before = rss();
        let mut queue = DelayQueue::new();
        let mut keys = HashMap::new();
        for key in 0..TIMERS {
            keys.insert(key, queue.insert(key, hour));
        }
        let after = rss();
        assert_eq!(queue.len(), TIMERS as usize);
        drop((queue, keys));
        after.saturating_sub(before)
    });
    println!(
        "memory, {TIMERS} timers (u64 keys and values) an hour out: timing wheel {:.1} B/timer, DelayQueue + HashMap<u64, Key> {:.1} B/timer",
        ours as f64 / TIMERS as f64,
        theirs as f64 / TIMERS as f64
    );
}

/// Pending sleeps measured for memory.
const SLEEPS: u64 = 1_000_000;

/// Resident bytes per pending sleep: [`SLEEPS`] sleeps made by `make` from
/// a delay, each boxed (as a spawned task or a `FuturesUnordered` would
/// hold it) and polled once, so each is registered.
fn per_sleep<F: Future>(make: impl Fn(Duration) -> F, delay: impl Fn(u64) -> Duration) -> f64 {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let before = rss();
    let mut sleeps: Vec<Pin<Box<F>>> = Vec::with_capacity(SLEEPS as usize);
    for i in 0..SLEEPS {
        let mut sleep = Box::pin(make(delay(i)));
        assert!(sleep.as_mut().poll(&mut cx).is_pending());
        sleeps.push(sleep);
    }
    let after = rss();
    drop(sleeps);
    after.saturating_sub(before) as f64 / SLEEPS as f64
}

/// Each sleep measurement runs in a process of its own (this example run
/// again with `--sleep-memory <contender> <shape>`): resident memory
/// freed by an earlier measurement would be reused unseen.
fn sleep_memory() {
    for shape in ["spread", "shared"] {
        let mut line = Vec::new();
        for contender in ["wheel", "tokio"] {
            let out = std::env::current_exe()
                .and_then(|exe| {
                    std::process::Command::new(exe)
                        .args(["--sleep-memory", contender, shape])
                        .output()
                })
                .expect("could not run this example again");
            line.push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        let shape = if shape == "spread" {
            "1 ms - 60 s apart"
        } else {
            "all an hour out"
        };
        println!(
            "memory, {SLEEPS} pending sleeps, {shape}: timing wheel {} B/sleep, tokio::time::sleep {} B/sleep",
            line[0], line[1]
        );
    }
}

/// One sleep measurement: prints bytes per sleep.
fn sleep_memory_of(contender: &str, shape: &str) {
    let delay = |i: u64| match shape {
        "spread" => Duration::from_millis(1 + i.wrapping_mul(7_919) % 60_000),
        _ => Duration::from_secs(3600),
    };
    let rt = paused_runtime();
    let bytes = rt.block_on(async {
        if contender == "wheel" {
            let (wheel, _expired) = TimingWheel::<u64, ()>::new();
            per_sleep(|d| wheel.sleep(d), delay)
        } else {
            per_sleep(tokio::time::sleep, delay)
        }
    });
    println!("{bytes:.1}");
}

fn idle() {
    let rt = paused_runtime();
    rt.block_on(async {
        let (wheel, mut expired) = TimingWheel::<u64, ()>::new();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let empty = wheel.stats().await.unwrap().wakeups;
        wheel.set_timer(1, (), Duration::from_secs(3600)).await.unwrap();
        expired.next().await.unwrap();
        let one = wheel.stats().await.unwrap().wakeups - empty;
        println!(
            "idle: {empty} wake-ups over a simulated hour with no timers; {one} for one timer an hour out"
        );
    });
}

/// Real-clock lateness of 20,000 keyed timers due within 2 s, the wheel
/// beside a binary heap that sleeps with `tokio::time::sleep_until` on its
/// next deadline, each measured from the instant asked for, and for the
/// wheel also from its deadline rounded up to its tick (what
/// `Expired::deadline` reports).
fn lateness() {
    const N: u64 = 20_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let delays: Vec<Duration> = (0..N)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Duration::from_micros(1 + x % 2_000_000)
        })
        .collect();
    let report = |name: &str, late: &mut Vec<Duration>, early: usize| {
        late.sort_unstable();
        let pct = |p: f64| late[((late.len() - 1) as f64 * p) as usize];
        println!(
            "lateness, {N} timers under 2 s, real clock, {name}: p50 {:?}, p99 {:?}, max {:?}, early {early}",
            pct(0.5),
            pct(0.99),
            late[late.len() - 1]
        );
    };
    let (mut asked, mut ticked, early, early_ticks) = rt.block_on(async {
        let (wheel, mut expired) = TimingWheel::<u64, Instant>::new();
        let consumer = tokio::spawn(async move {
            let (mut asked, mut ticked) = (Vec::new(), Vec::new());
            let (mut early, mut early_ticks) = (0, 0);
            while let Some(e) = expired.next().await {
                let now = Instant::now();
                early += usize::from(now < *e.value());
                early_ticks += usize::from(now < e.deadline());
                asked.push(now.saturating_duration_since(*e.value()));
                ticked.push(now.saturating_duration_since(e.deadline()));
                if asked.len() as u64 == N {
                    break;
                }
            }
            (asked, ticked, early, early_ticks)
        });
        for (key, delay) in (0..N).zip(&delays) {
            let deadline = Instant::now() + *delay;
            wheel.set_timer_at(key, deadline, deadline).await.unwrap();
        }
        consumer.await.unwrap()
    });
    report("timing wheel, from the instant asked", &mut asked, early);
    report("timing wheel, from its tick", &mut ticked, early_ticks);
    let (mut late, early) = rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        let (add, mut added) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        // The heap: a task that takes new deadlines and sleeps until the
        // earliest.
        tokio::spawn(async move {
            let mut heap = BinaryHeap::new();
            loop {
                let next = heap.peek().map(|Reverse(at): &Reverse<Instant>| *at);
                let sleep = tokio::time::sleep_until(
                    next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)),
                );
                tokio::select! {
                    at = added.recv() => match at {
                        Some(at) => heap.push(Reverse(at)),
                        None if heap.is_empty() => return,
                        None => {}
                    },
                    () = sleep, if next.is_some() => {
                        let now = Instant::now();
                        while heap.peek().is_some_and(|Reverse(at)| *at <= now) {
                            let Reverse(at) = heap.pop().unwrap();
                            let _ = tx.send(at);
                        }
                    }
                }
            }
        });
        for delay in &delays {
            add.send(Instant::now() + *delay).unwrap();
        }
        let (mut late, mut early) = (Vec::new(), 0);
        while let Some(at) = rx.recv().await {
            let now = Instant::now();
            early += usize::from(now < at);
            late.push(now.saturating_duration_since(at));
            if late.len() as u64 == N {
                break;
            }
        }
        (late, early)
    });
    report(
        "binary heap + sleep_until, from the instant asked",
        &mut late,
        early,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, contender, shape] = args.as_slice() {
        if flag == "--sleep-memory" {
            sleep_memory_of(contender, shape);
            return;
        }
    }
    memory();
    sleep_memory();
    idle();
    lateness();
}
