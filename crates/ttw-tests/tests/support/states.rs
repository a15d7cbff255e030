//! Waiting, on the real clock, for tasks to reach a state.

#![allow(dead_code)]

use std::time::Duration;

use ttw_durable::{Store, TaskId, TaskState};

/// Waits until every task in `ids` is in `state`; panics after `within`,
/// naming the task, its state and its last error.
pub async fn wait_for_state(store: &Store, ids: &[TaskId], state: TaskState, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    for id in ids {
        loop {
            let info = store.get(*id).await.unwrap().unwrap();
            if info.state == state {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} still {:?} (last error {:?}), not {state:?}, after {within:?}",
                info.state,
                info.last_error
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
