//! A shared, fast, loss-free timer for Tokio: a hierarchical timing wheel
//! owned by one task, fed by commands over one ordered channel, handing
//! expired timers back as a stream.
//!
//! ```
//! use std::time::Duration;
//! use futures::StreamExt;
//! use tokio_timing_wheel::TimingWheel;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), tokio_timing_wheel::Error> {
//! // Idle connections: each gets a deadline, a heartbeat pushes it back,
//! // a checkout takes it back, and the stream yields the idle ones.
//! let (wheel, mut expired) = TimingWheel::<u32, &str>::new();
//! wheel.set_timer(1, "conn 1", Duration::from_secs(30)).await?;
//! wheel.set_timer(2, "conn 2", Duration::from_secs(30)).await?;
//! wheel.move_timer(1, Duration::from_secs(60)).await?;
//! assert_eq!(wheel.remove_timer(2).await?, Some("conn 2"));
//!
//! while let Some(e) = expired.next().await {
//!     let (id, conn) = e.into_parts();
//!     assert_eq!((id, conn), (1, "conn 1")); // close it
//!     break;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//!
//! - A pure, synchronous wheel (no Tokio inside) keeps timers in a slab,
//!   filed by index into 64-slot levels with an occupancy bitmap each, so
//!   the next deadline is found without a scan; a slot is a chain of blocks
//!   of indices, read a block at a time. Deadlines are absolute ticks,
//!   rounded up; a coarse slot that comes due re-files its timers by their own
//!   deadlines, and a finest slot (one tick) becomes the queue of due timers
//!   whole. Eleven levels cover every `u64` tick, so no delay is too long
//!   and nothing wraps around.
//! - One driver task owns the wheel. [`TimingWheel`] handles send it commands
//!   over one bounded channel, so one task's commands apply in the order it
//!   issued them; deadlines are stamped by the caller. The driver sleeps on
//!   one `tokio::time::Sleep` until the next deadline (or the next cascade of
//!   a coarse slot) and does not wake at all when nothing is pending. Since it
//!   uses `tokio::time`, `tokio::time::pause` and `advance` drive it.
//! - Expired timers go to the [`Expirations`] stream's queue without waiting
//!   for the consumer, so a slow consumer never stalls the wheel and a
//!   consumer may set timers from inside its loop without deadlock.
//!
//! # Delay futures: the wheel's, or `tokio::time`'s?
//!
//! [`TimingWheel::sleep`], [`timeout`](TimingWheel::timeout) and
//! [`interval`](TimingWheel::interval) keep the promises above (never early,
//! within a tick late, closed at once when the wheel stops). A sleep is
//! registered at its first `Pending`, as Tokio's are: it files its waker in
//! the sleeps' wheel of the thread that made it (a shard per thread the
//! machine runs at once, each under its own short lock), in its deadline
//! tick's entry, which the sleeps of that tick share. Nothing is allocated
//! and no message is sent per sleep; the driver hears of a sleep only when
//! its tick is earlier than any it will wake for.
//!
//! - **Request timeouts**, many short-lived deadlines cancelled before they
//!   pass: the wheel's [`Timeout`] adds a fifth to a third of what
//!   `tokio::time::timeout` adds with 16 tasks on a 2-worker runtime (where
//!   Tokio's timer is a shared lock) and about half on a current-thread
//!   runtime (0.45 – 0.58 by host; 0.58 by instruction count); a future
//!   that is ready at its first poll registers nothing.
//!   Prefer the wheel here.
//! - **Many sleeps on scattered deadlines**, each in a task of its own: the
//!   wheel takes 0.91 – 0.97 of `tokio::time::sleep`'s time on a
//!   current-thread runtime, and a pending sleep holds less memory (92
//!   bytes against 136). On a 2-worker runtime it takes about Tokio's CPU
//!   time (1.0 – 1.2 by host). Most of either side's time here is the
//!   tasks' own: the same tasks woken in deadline order by a timer that
//!   costs nothing take 0.73 of Tokio's time. `tokio::time` is enough when
//!   sleeps are few or each task already pays for much more than its
//!   timer.
//! - **Precision below a millisecond**: a delay future is rounded up to its
//!   tick, and then Tokio rounds the driver's own sleep up to its
//!   millisecond, so on the real clock it completes about half a
//!   millisecond later on average than a `tokio::time` sleep on its exact
//!   deadline. Keyed timers fire from their own deadlines: on the real
//!   clock, as late as a binary heap on `tokio::time::sleep_until` (about
//!   0.6 ms after the instant asked at the median, 1.9 ms at the 99th
//!   percentile); never early on either side.
//!
//! BENCHMARKS.md has the figures and the commands that measure them.
//!
//! # Guarantees
//!
//! - **Never early, at most a tick late**: a timer fires no earlier than its
//!   deadline and within one tick after it, plus the time the runtime takes
//!   to schedule the driver. Within its tick, a keyed timer fires from its
//!   own deadline (to a 256th of the tick) when the runtime's timer can wake
//!   the driver then, not only at the tick's end: on the real clock with the
//!   default tick its lateness is then that of a binary heap sleeping on
//!   `tokio::time::sleep_until` (about 0.6 ms at p50, 1.9 ms at p99), and
//!   with a coarse tick a timer no longer waits for the tick's end. (Not
//!   for a tick that is a multiple of 4096, whose timers wait two levels up
//!   until the tick's end; and the driver looks for them only when its own
//!   clock wakes it, at most once a millisecond.)
//! - **Ordered**: timers fire in deadline order; equal deadline ticks in the
//!   order they were set, except that those of a tick whose deadlines were
//!   reached before its end may go first. A timer whose deadline was moved while pending
//!   (`move_timer`, or `set_timer` on a pending key) fires in its new tick
//!   but takes no particular place among that tick's other timers. A
//!   deadline already past, or `Duration::ZERO`, fires at once. With
//!   [`Builder::shards`], this order holds within each shard; the stream
//!   interleaves shards.
//! - **Cheap heartbeats**: pushing a deadline later is O(1) and relinks
//!   nothing: the timer is filed again only when its old slot comes due.
//! - **Accounted for**: every timer a call accepted ends exactly once: it
//!   fires on the stream, or is removed, cancelled, replaced by a later set of
//!   the same key, drained, or returned by [`TimingWheel::stop`].
//! - **Any delay**: every `Duration` up to `Duration::MAX` is accepted
//!   without a panic; deadlines years out still fire on time.
//! - **Lifecycle**: when every handle is dropped, pending timers still fire
//!   into the stream, then it ends. When the stream is dropped, later
//!   expirations are discarded and new timers are refused
//!   ([`Error::is_receiver_dropped`]). If the runtime shuts down, the stream
//!   ends and every call fails with [`Error::is_closed`]; nothing hangs.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]
#![doc(test(no_crate_inject, attr(deny(warnings, rust_2018_idioms))))]

mod builder;
mod callback;
mod channel;
mod clock;
mod command;
mod delay;
mod driver;
mod error;
mod expired;
mod handle;
mod limit;
mod shard;
mod stats;
mod stream;
mod wheel;

pub use builder::{Builder, DEFAULT_COMMAND_CAPACITY, DEFAULT_TICK, MAX_TICK};
pub use callback::{DEFAULT_CALLBACK_TIMEOUT, DEFAULT_MAX_CONCURRENCY};
pub use delay::interval::{Interval, MissedTicks};
pub use delay::sleep::Sleep;
pub use delay::timeout::{Elapsed, Timeout};
pub use error::Error;
pub use expired::Expired;
pub use handle::TimingWheel;
pub use stats::Stats;
pub use stream::Expirations;

/// The pure wheel, exposed only so `benches/` can time it alone. Not part of
/// the public API: it may change in any release.
#[doc(hidden)]
pub mod bench_support {
    use std::hash::Hash;

    /// A thin wrapper around the crate's synchronous wheel.
    #[derive(Debug)]
    pub struct PureWheel<K, V>(crate::wheel::Wheel<K, V>);

    impl<K: Eq + Hash, V> Default for PureWheel<K, V> {
        fn default() -> Self {
            PureWheel(crate::wheel::Wheel::new())
        }
    }

    impl<K: Eq + Hash, V> PureWheel<K, V> {
        /// Sets `key` to fire at tick `when`; returns a replaced value.
        pub fn insert(&mut self, key: K, value: V, when: u64) -> Option<V> {
            self.0.insert(key, value, when).ok().flatten()
        }

        /// Moves the deadline of `key`.
        pub fn reschedule(&mut self, key: &K, when: u64) -> bool {
            self.0.reschedule(key, when)
        }

        /// Removes `key`.
        pub fn remove(&mut self, key: &K) -> Option<(K, V)> {
            self.0.remove(key)
        }

        /// Advances to tick `now`.
        pub fn advance(&mut self, now: u64) {
            self.0.advance(now);
        }

        /// Takes the next due timer.
        pub fn pop_due(&mut self) -> Option<(K, V, u64)> {
            self.0.pop_due()
        }

        /// Takes up to `max` due timers at once, oldest first.
        pub fn take_due(&mut self, max: usize, each: impl FnMut(K, V, u64)) -> usize {
            self.0.take_due(max, each)
        }

        /// Timers pending.
        pub fn len(&self) -> usize {
            self.0.len()
        }

        /// Whether no timer is pending.
        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
    }
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
