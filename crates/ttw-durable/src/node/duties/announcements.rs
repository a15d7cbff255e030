//! Announcements: arms what the listener hears (tasks scheduled or moved
//! in this process, and on PostgreSQL in others); asks for a window load
//! when some may have been missed.

use std::sync::Arc;

use crate::node::wakes::Wakes;
use crate::node::window::Window;
use crate::notify::{Heard, Listener};

/// Hears until the listener closes: arms what falls due in `window`, and
/// wakes the duties (and dispatch) what it heard concerns.
pub(crate) async fn run(
    window: Arc<Window>,
    wakes: Arc<Wakes>,
    store: crate::client::store::Store,
    mut listener: Listener,
) {
    loop {
        match listener.next().await {
            Heard::Due(task) => window.arm_announced(&task).await,
            Heard::Missed => {
                wakes.reload.notify_one();
                wakes.recurring.notify_one();
                store.pull_wakes().wake_all();
            }
            Heard::Pull(queue, n) => store.pull_wakes().wake(&queue, n),
            Heard::Recurring => wakes.recurring.notify_one(),
            Heard::Room => wakes.room_left_elsewhere(),
            Heard::Closed => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use crate::node::duties::fixture::Parts;

    /// A task scheduled in this process is armed in the window of the
    /// shards held; a recurring schedule registered wakes the occurrences'
    /// duty; a lagging listener asks for a window load.
    #[tokio::test]
    async fn what_is_heard_is_armed_or_wakes_its_duty() {
        let parts = Parts::new().await;
        parts.take_shards().await;
        parts.load().load().await.unwrap();
        let listener = parts
            .store
            .notifier()
            .listen(Arc::new(AtomicBool::new(false)));
        let task = tokio::spawn(run(
            parts.window.clone(),
            parts.wakes.clone(),
            parts.store.clone(),
            listener,
        ));

        parts
            .store
            .schedule("soon")
            .delay(Duration::from_secs(30))
            .await
            .unwrap();
        for _ in 0..200 {
            if parts.armed().await == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(parts.armed().await, 1, "the announced task is armed");

        parts
            .store
            .register_recurring(crate::Recurring::every("tick", Duration::from_secs(60)))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), parts.wakes.recurring.notified())
            .await
            .expect("the occurrences' duty is woken");
        task.abort();
    }
}
