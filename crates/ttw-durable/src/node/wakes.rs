//! The signals a node's duties and its dispatch send one another: each
//! duty is handed the ones it waits on or sends, not the node.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// A node's wake-ups, shared by its duties and dispatch.
#[derive(Debug, Default)]
pub(crate) struct Wakes {
    /// Load the window now (shards were taken, or announcements missed).
    pub(crate) reload: Notify,
    /// Make the occurrences of recurring schedules tasks now (shards were
    /// taken, or a schedule changed in another process).
    pub(crate) recurring: Notify,
    /// A place was given back before its task's outcome was written, or
    /// another node left one: dispatch looks for room again.
    pub(crate) room: Notify,
    /// Another node left a place to a key waiting here (see
    /// [`WaitingRoom::place_left_here`](crate::node::waiting_room::WaitingRoom::place_left_here)).
    room_elsewhere: AtomicBool,
}

impl Wakes {
    /// Another node left a place to a key waiting here: dispatch looks.
    pub(crate) fn room_left_elsewhere(&self) {
        self.room_elsewhere.store(true, Ordering::SeqCst);
        self.room.notify_one();
    }

    /// Whether another node left a place since the last call.
    pub(crate) fn take_room_elsewhere(&self) -> bool {
        self.room_elsewhere.swap(false, Ordering::SeqCst)
    }
}
