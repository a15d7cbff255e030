//! Callback mode: a function runs for each expired timer, off the driver's
//! task, with a timeout and a concurrency limit. A slow callback and a
//! panicking one run beside healthy ones; the healthy ones stay on time.
//!
//! ```text
//! cargo run --release --example callbacks
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_timing_wheel::TimingWheel;

#[derive(Debug, Clone, Copy)]
enum Job {
    Healthy,
    Slow,
    Panics,
}

#[tokio::main]
async fn main() {
    // The wheel reports callback panics and timeouts through `tracing`: show
    // them as log lines, and make a panic's own report one line too (not a
    // raw message and backtrace).
    tracing_subscriber::fmt().with_target(false).init();
    std::panic::set_hook(Box::new(|info| tracing::debug!("{info}")));
    let start = Instant::now();
    let lateness = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&lateness);
    let wheel = TimingWheel::builder()
        .callback_timeout(Duration::from_millis(300))
        .max_concurrency(64)
        .build_with_callback(move |id: u32, (job, due): (Job, Instant)| {
            let record = Arc::clone(&record);
            async move {
                match job {
                    Job::Healthy => {
                        record.lock().unwrap().push(due.elapsed());
                    }
                    Job::Slow => {
                        println!(
                            "[{:>4} ms] job {id}: slow, will outlive its timeout",
                            start.elapsed().as_millis()
                        );
                        tokio::time::sleep(Duration::from_secs(10)).await;
                        println!("job {id}: never printed, it was cancelled");
                    }
                    Job::Panics => {
                        println!(
                            "[{:>4} ms] job {id}: about to panic",
                            start.elapsed().as_millis()
                        );
                        panic!("job {id} failed");
                    }
                }
            }
        });

    for id in 0..1_000u32 {
        let job = match id {
            100 => Job::Slow,
            200 | 600 => Job::Panics,
            _ => Job::Healthy,
        };
        let delay = Duration::from_millis(u64::from(id % 500) + 1);
        wheel
            .set_timer(id, (job, Instant::now() + delay), delay)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(900)).await;

    let stats = wheel.stats().await.unwrap();
    let mut late = lateness.lock().unwrap().clone();
    late.sort_unstable();
    println!(
        "completed {}, timed out {}, panicked {}, running {}",
        stats.callbacks_completed,
        stats.callbacks_timed_out,
        stats.callbacks_panicked,
        stats.callbacks_running
    );
    println!(
        "healthy callbacks started {:?} (p50) / {:?} (p99) / {:?} (max) after their deadline",
        late[late.len() / 2],
        late[late.len() * 99 / 100],
        late[late.len() - 1]
    );
    let left = wheel.stop().await.unwrap();
    println!("stopped; {} timers never ran", left.len());
}
