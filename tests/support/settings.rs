//! Quick scheduler settings for the durable layer's real-time tests.

use std::time::Duration;

use tokio_timing_wheel::durable::{Backoff, Scheduler, SchedulerBuilder, Store};

/// Quick settings for tests.
pub fn fast(store: &Store) -> SchedulerBuilder {
    Scheduler::builder(store.clone())
        .window(Duration::from_secs(2))
        .catch_up_interval(Duration::from_millis(100))
        .heartbeat(Duration::from_millis(200))
        .lease_ttl(Duration::from_secs(2))
        .callback_timeout(Duration::from_secs(2))
        // Long enough that a loaded machine never lets a lock run out
        // under a healthy node; the crash test shortens it.
        .lock_grace(Duration::from_secs(5))
        .backoff(Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_millis(200),
        ))
}
