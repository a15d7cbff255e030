//! The commands a handle sends to the driver over its one ordered channel.
//!
//! Deadlines are stamped as ticks on the caller's side, so a command that
//! waits in the channel while the driver is busy still means what the caller
//! meant when it sent it.

use tokio::sync::oneshot;

use crate::stats::Stats;

pub(crate) enum Command<K, V> {
    /// Insert, or replace the value and deadline of, a timer: its tick,
    /// and where in the tick the deadline falls (in 256ths, see
    /// `Clock::delay_when`).
    Set {
        key: K,
        value: V,
        when: u64,
        frac: u8,
    },
    /// Move a pending timer's deadline; a missing key is a no-op.
    Move { key: K, when: u64, frac: u8 },
    /// Remove a timer and reply with its value.
    Remove {
        key: K,
        reply: oneshot::Sender<Option<V>>,
    },
    /// Reply with a pending timer's deadline tick.
    Deadline {
        key: K,
        reply: oneshot::Sender<Option<u64>>,
    },
    /// Remove a timer, no reply.
    Cancel { key: K },
    /// Remove every pending timer and reply with them.
    Drain { reply: oneshot::Sender<Vec<(K, V)>> },
    /// Reply with the driver's counters.
    Stats { reply: oneshot::Sender<Stats> },
    /// Stop the driver and reply with every pending timer.
    Stop { reply: oneshot::Sender<Vec<(K, V)>> },
}
