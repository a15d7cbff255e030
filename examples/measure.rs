//! Figures for BENCHMARKS.md that are not times: resident memory per pending
//! timer (this crate beside `DelayQueue` plus a key map), driver wake-ups
//! over an idle simulated hour, and real-clock lateness.
//!
//! ```text
//! cargo run --release --example measure
//! ```

use std::collections::HashMap;
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

fn lateness() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        const N: u64 = 20_000;
        let (wheel, mut expired) = TimingWheel::<u64, ()>::new();
        let consumer = tokio::spawn(async move {
            let mut late = Vec::with_capacity(N as usize);
            let mut early = 0;
            while let Some(e) = expired.next().await {
                let now = Instant::now();
                if now < e.deadline() {
                    early += 1;
                }
                late.push(now.saturating_duration_since(e.deadline()));
                if late.len() as u64 == N {
                    break;
                }
            }
            (late, early)
        });
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for key in 0..N {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let delay = Duration::from_micros(1 + x % 2_000_000);
            wheel.set_timer(key, (), delay).await.unwrap();
        }
        let (mut late, early) = consumer.await.unwrap();
        late.sort_unstable();
        let pct = |p: f64| late[((late.len() - 1) as f64 * p) as usize];
        println!(
            "lateness, {N} timers under 2 s, real clock: p50 {:?}, p99 {:?}, max {:?}, early {early}",
            pct(0.5),
            pct(0.99),
            late[late.len() - 1]
        );
    });
}

fn main() {
    memory();
    idle();
    lateness();
}
