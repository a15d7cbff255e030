//! Announcements: arms what the listener hears (tasks scheduled or moved
//! in this process, and on PostgreSQL in others); asks for a window load
//! when some may have been missed.

use std::sync::Arc;

use crate::node::wakes::Wakes;
use crate::node::window::Window;
use crate::notify::{Heard, Listener};

/// Hears until the listener closes: arms what falls due in `window`, and
/// wakes the duties (and dispatch) what it heard concerns.
pub(crate) async fn run(window: Arc<Window>, wakes: Arc<Wakes>, mut listener: Listener) {
    loop {
        match listener.next().await {
            Heard::Due(task) => window.arm_announced(&task).await,
            Heard::Missed => {
                wakes.reload.notify_one();
                wakes.recurring.notify_one();
            }
            Heard::Recurring => wakes.recurring.notify_one(),
            Heard::Room => wakes.room_left_elsewhere(),
            Heard::Closed => return,
        }
    }
}
