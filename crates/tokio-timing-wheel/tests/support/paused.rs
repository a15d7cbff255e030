//! What the paused-clock tests of the handle share: milliseconds, the
//! stream's ready expirations, and waiting for the driver to catch up.

#![allow(dead_code)]

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio_timing_wheel::{Expirations, TimingWheel};

/// `n` milliseconds.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Everything the stream can yield right now, without waiting.
pub fn ready<K, V>(expired: &mut Expirations<K, V>) -> Vec<(K, V)> {
    std::iter::from_fn(|| {
        expired
            .next()
            .now_or_never()
            .flatten()
            .map(|e| e.into_parts())
    })
    .collect()
}

/// Lets the driver catch up with the clock: `stats` replies only after the
/// driver has fired what is due.
pub async fn settle<K, V>(wheel: &TimingWheel<K, V>)
where
    K: Eq + std::hash::Hash + Clone + Send + 'static,
    V: Send + 'static,
{
    wheel.stats().await.unwrap();
}
