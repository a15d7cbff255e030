//! Announcements: arms what the listener hears (tasks scheduled or moved
//! in this process, and on PostgreSQL in others); asks for a window load
//! when some may have been missed.

use std::sync::Arc;

use crate::node::Node;
use crate::notify::{Heard, Listener};

/// Hears until the listener closes.
pub(crate) async fn run(node: Arc<Node>, mut listener: Listener) {
    loop {
        match listener.next().await {
            Heard::Due(task) => node.window.arm_announced(&task).await,
            Heard::Missed => {
                node.reload.notify_one();
                node.recurring_wake.notify_one();
            }
            Heard::Recurring => node.recurring_wake.notify_one(),
            Heard::Room => {
                node.room_elsewhere
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                node.room.notify_one();
            }
            Heard::Closed => return,
        }
    }
}
