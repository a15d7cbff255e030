//! Quick scheduler settings for the durable layer's real-time tests.

use std::time::Duration;

use ttw_durable::{Backoff, Scheduler, SchedulerBuilder, Store, TaskId, TaskState};

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

/// Waits until task `id` is in `state`, polling the store; fails the test
/// with the task's state, attempts and last error after `within`.
///
/// A handler's return and the write of its outcome are not one step, so a
/// test that saw a handler run polls for the outcome rather than reading it
/// once.
#[allow(dead_code)] // not every test file that includes this module uses it
pub async fn wait_state(store: &Store, id: TaskId, state: TaskState, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let info = store.get(id).await.unwrap().unwrap();
        if info.state == state {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} is {:?} after {} attempts ({:?}), not {state:?}",
            info.state,
            info.attempts,
            info.last_error
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
