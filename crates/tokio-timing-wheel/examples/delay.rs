//! Sleeps and timeouts on one shared wheel, on the real clock: 10,000
//! concurrent request handlers, each with a wheel-backed timeout, against a
//! backend that sometimes answers too late. No task and no runtime timer per
//! pending deadline: each is one entry in the wheel.
//!
//! ```text
//! cargo run --release --example delay
//! ```

use std::time::Duration;

use tokio::time::Instant;
use tokio_timing_wheel::TimingWheel;

const REQUESTS: u64 = 10_000;
const TIMEOUT: Duration = Duration::from_millis(200);

#[tokio::main]
async fn main() {
    let (wheel, _expired) = TimingWheel::<u64, ()>::new();

    // A sleep: never before its deadline, within a tick after.
    let start = Instant::now();
    wheel
        .sleep(Duration::from_millis(50))
        .await
        .expect("wheel running");
    println!("slept 50 ms: took {:?}", start.elapsed());

    // Many timeouts at once. The "backend" answers after 0..400 ms, so about
    // half the requests time out.
    let start = Instant::now();
    let mut handlers = Vec::new();
    for request in 0..REQUESTS {
        let wheel = wheel.clone();
        handlers.push(tokio::spawn(async move {
            let latency = Duration::from_millis(request * 7919 % 400);
            let backend = tokio::time::sleep(latency);
            let began = Instant::now();
            match wheel.timeout(TIMEOUT, backend).await {
                Ok(()) => (true, began.elapsed()),
                Err(elapsed) => {
                    assert!(!elapsed.is_wheel_closed());
                    (false, began.elapsed())
                }
            }
        }));
    }
    let stats_mid = wheel.stats().await.expect("wheel running");
    let mut answered = 0;
    let mut timed_out = 0;
    let mut timeout_waits = Vec::new();
    for handler in handlers {
        let (ok, took) = handler.await.expect("handler panicked");
        if ok {
            answered += 1;
        } else {
            timed_out += 1;
            timeout_waits.push(took);
        }
    }
    timeout_waits.sort_unstable();
    let early = timeout_waits.iter().filter(|t| **t < TIMEOUT).count();
    println!(
        "{REQUESTS} requests in {:?}: {answered} answered, {timed_out} timed out ({early} early)",
        start.elapsed()
    );
    println!(
        "timeouts fired after {:?} (min) / {:?} (p99) / {:?} (max) for a {TIMEOUT:?} limit",
        timeout_waits[0],
        timeout_waits[timeout_waits.len() * 99 / 100],
        timeout_waits[timeout_waits.len() - 1]
    );
    println!("sleeps pending in the wheel mid-run: {}", stats_mid.sleeps);

    // A stopped wheel never leaves a sleep hanging.
    wheel.stop().await.expect("first stop");
    let err = wheel.sleep(Duration::from_secs(3600)).await.unwrap_err();
    println!("sleep after stop: {err}");
}
