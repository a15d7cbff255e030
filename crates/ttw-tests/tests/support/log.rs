//! What a test's handler saw: one record a delivery, in the order they ran,
//! and a scheduler whose handler records each delivery and succeeds. Each
//! test file says what a record holds by implementing [`Record`].

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ttw_durable::{Scheduler, SchedulerBuilder, Task};

/// What one delivery leaves in a [`Log`].
pub trait Record: Clone + Send + 'static {
    /// The record of `task`, made as its handler runs.
    fn record(task: &Task) -> Self;
}

/// The records of the deliveries, shared with the handler.
pub struct Log<T>(pub Arc<Mutex<Vec<T>>>);

impl<T> Clone for Log<T> {
    fn clone(&self) -> Self {
        Log(self.0.clone())
    }
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Log(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<T: Record> Log<T> {
    /// Records `task`.
    pub fn record(&self, task: &Task) {
        self.0.lock().unwrap().push(T::record(task));
    }

    /// The records so far.
    pub fn seen(&self) -> Vec<T> {
        self.0.lock().unwrap().clone()
    }

    /// How many deliveries so far.
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Waits until `n` deliveries have been recorded; fails the test after
    /// `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.count() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of {n} deliveries within {within:?}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Starts `builder` with a handler that records each delivery in `log` and
/// succeeds.
pub async fn start_logging<T: Record>(builder: SchedulerBuilder, log: &Log<T>) -> Scheduler {
    let log = log.clone();
    builder
        .start(move |task| {
            let log = log.clone();
            async move {
                log.record(&task);
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap()
}
