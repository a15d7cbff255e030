//! Sets 100,000 timers with random delays under two seconds on the real
//! clock, pushes a tenth of them back (a heartbeat), takes a tenth back
//! before they fire, and reads the rest from the expiration stream. Prints
//! how many fired, whether any fired early or twice, how late they were
//! (p50 / p99 / max), and how often the driver woke.
//!
//! ```text
//! cargo run --release --example expirations
//! ```

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tokio_timing_wheel::TimingWheel;

const TIMERS: u64 = 100_000;

#[tokio::main]
async fn main() -> Result<(), tokio_timing_wheel::Error> {
    let (wheel, mut expired) = TimingWheel::<u64, Instant>::new();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |bound: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % bound
    };

    // Read the stream from the start, concurrently with setting timers.
    let consumer = tokio::spawn(async move {
        let mut seen = HashSet::with_capacity(TIMERS as usize);
        let mut lateness = Vec::with_capacity(TIMERS as usize);
        let mut early = 0u64;
        while let Some(e) = expired.next().await {
            let now = Instant::now();
            if now < e.deadline() {
                early += 1;
            }
            lateness.push(now.saturating_duration_since(e.deadline()));
            let (key, _asked) = e.into_parts();
            assert!(seen.insert(key), "timer {key} fired twice");
        }
        (seen.len() as u64, lateness, early)
    });

    let started = Instant::now();
    for key in 0..TIMERS {
        let delay = Duration::from_millis(1 + next(2_000));
        // The value remembers the deadline asked for, to measure lateness.
        wheel.set_timer(key, Instant::now() + delay, delay).await?;
    }
    let mut removed = 0u64;
    let mut moved = 0u64;
    for key in (0..TIMERS).step_by(10) {
        if wheel.remove_timer(key).await?.is_some() {
            removed += 1;
        }
        let pushed = key + 5;
        let delay = Duration::from_millis(500 + next(1_500));
        // The new deadline is stamped here; the value keeps the old one, so
        // lateness for these is measured against the later deadline below.
        wheel.move_timer(pushed, delay).await?;
        moved += 1;
    }
    println!(
        "set {TIMERS} timers, removed {removed}, pushed back {moved} in {:?}",
        started.elapsed()
    );

    // Wait for the last deadline (under 3.5 s), then stop: the stream ends.
    tokio::time::sleep(Duration::from_millis(3_600).saturating_sub(started.elapsed())).await;
    let stats = wheel.stats().await?;
    let leftover = wheel.stop().await?;
    let (fired, mut lateness, early) = consumer.await.expect("consumer panicked");
    let expected = TIMERS - removed;

    lateness.sort_unstable();
    let pct = |p: f64| lateness[((lateness.len() - 1) as f64 * p) as usize];
    println!(
        "fired {fired} (expected {expected}), early {early}, left over {}",
        leftover.len()
    );
    println!(
        "lateness against the tick deadline: p50 {:?}, p99 {:?}, max {:?}",
        pct(0.50),
        pct(0.99),
        lateness[lateness.len() - 1]
    );
    println!(
        "driver wake-ups {} for {} expirations over {:?}",
        stats.wakeups,
        stats.fired,
        started.elapsed()
    );
    Ok(())
}
