//! The sleeps' own wheels, shared by the handles that make delay futures and
//! the driver that fires them.
//!
//! A wheel's sleeps are split in [`Shard`]s, one per thread the machine runs
//! at once (rounded up to a power of two, at most 64); a thread files its
//! sleeps in its own, so threads do not contend for one lock. Each
//! [`Sleep`](crate::Sleep) that waits files its waker in its shard's wheel
//! itself, under the shard's short lock, and keeps the place it got:
//! dropping it takes the waker back out the same way. The sleeps of one tick
//! share the tick's entry: a burst of them (timeouts of one length made
//! together) joins it without filing in the wheel again. Nothing crosses a
//! channel and nothing is allocated per sleep (a shard's slab and slots grow
//! to the most sleeps that ever waited there at once and keep that room).
//! The driver is told only when a sleep is filed before the earliest tick
//! its shard will wake the driver for (a raised [`signal`], a flag and a
//! waker); at each tick the driver takes each shard's due wakers under its
//! lock, records the tick as fired there, notes the shard's next tick in
//! the same hold, and wakes them. A tick of one sleep (scattered deadlines)
//! keeps its waker inline in a wheel entry of 32 bytes.
//!
//! A sleep is never woken before its tick, and every sleep's tick is its
//! deadline rounded up, so none completes early. When the driver stops, or
//! is dropped with its runtime, it closes the shards: every waiting sleep is
//! woken and fails as closed, and a sleep that would wait afterwards fails at
//! once (a shard made afterwards is made closed).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::task::Waker;

use spin::mutex::SpinMutex;
use spin::relax::Yield;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::wheel::Wheel;

pub(crate) use self::signal::{signal, SignalReceiver, Signaller};
use self::waiters::{Left, Waiters, NO_SLOT};

mod signal;
mod waiters;

/// Where a sleep waits: its tick's entry in the wheel, and its slot among
/// that entry's wakers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    entry: u32,
    slot: u32,
}

impl Place {
    /// Not filed yet.
    pub(crate) const NONE: Place = Place {
        entry: NO_SLOT,
        slot: NO_SLOT,
    };
}

/// Ids unique in the process, for the per-thread window to tell wheels
/// apart.
static WHEEL_IDS: AtomicU64 = AtomicU64::new(0);

/// The stretch of instants whose deadlines round up to one tick, on one
/// wheel.
#[derive(Debug, Clone, Copy)]
struct Window {
    wheel: u64,
    after: Instant,
    until: Instant,
    when: u64,
}

/// What a thread keeps to make sleeps quickly.
#[derive(Debug, Clone, Copy)]
struct Local {
    /// Its number among the threads that slept ([`UNNUMBERED`] until its
    /// first sleep), which picks its shard.
    thread: usize,
    /// The window of the tick it last worked out.
    window: Option<Window>,
}

const UNNUMBERED: usize = usize::MAX;

/// Threads numbered as they first sleep.
static THREADS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static LOCAL: Cell<Local> = const {
        Cell::new(Local {
            thread: UNNUMBERED,
            window: None,
        })
    };
}

/// This thread's [`Local`], numbered.
#[inline]
fn local() -> Local {
    LOCAL
        .try_with(|cell| {
            let mut local = cell.get();
            if local.thread == UNNUMBERED {
                local.thread = THREADS.fetch_add(1, Ordering::Relaxed);
                cell.set(local);
            }
            local
        })
        // While the thread's locals are torn down: shard 0, no window.
        .unwrap_or(Local {
            thread: 0,
            window: None,
        })
}

/// What the wheel tells a sleep that asks to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Waiting,
    Fired,
    Closed,
}

/// One wheel's sleeps: the handle's side. Every handle holds it; every
/// sleep holds the [`Shard`] it waits in.
pub(crate) struct Sleeps {
    /// Unique in the process, for the per-thread window to tell wheels
    /// apart.
    id: u64,
    pub(crate) clock: Clock,
    /// Keeps the driver running while a handle is left (each shard holds
    /// one too, for its sleeps).
    tx: Signaller,
    /// A shard per thread the machine runs at once (up to [`MAX_SHARDS`]),
    /// made on the first sleep of a thread that picks it: a thread files
    /// its sleeps in its own shard, so threads do not contend for one lock.
    shards: Box<[OnceLock<Arc<Shard>>]>,
    /// What the driver sees of them.
    table: Arc<Table>,
}

/// The shards as the driver holds them: weakly, so the sleeps' signal
/// tells the driver once no handle or sleep is left.
struct Table {
    /// Set before the driver closes the shards it finds: a shard made
    /// afterwards closes itself.
    closed: AtomicBool,
    shards: Box<[OnceLock<Weak<Shard>>]>,
}

/// Shards per wheel at most (a power of two).
const MAX_SHARDS: usize = 64;

/// The sleeps filed from some threads, in a wheel of their own under a lock
/// of their own.
pub(crate) struct Shard {
    /// Tells the driver a sleep was filed before the tick it will wake for.
    tx: Signaller,
    /// The last tick fired, as the wheel's `elapsed` once its due wakers
    /// are taken: a sleep of this tick or before has completed. Read
    /// without the lock on a sleep's fast path.
    fired: AtomicU64,
    /// A spin lock, yielding the thread while another holds it: every hold
    /// is a few instructions (filing or unfiling one waker), or the driver
    /// taking one tick's wakers, and an uncontended one costs one atomic
    /// read-modify-write (its release is a plain store).
    inner: SpinMutex<Inner, Yield>,
}

struct Inner {
    /// One entry per tick some sleep waits for (mostly: see `last`).
    wheel: Wheel<(), Waiters>,
    /// The tick last filed and its entry, while that entry waits: a burst
    /// of sleeps on one tick (timeouts of one length made together) joins
    /// one entry without filing in the wheel again.
    last: Option<(u64, u32)>,
    /// The earliest tick the driver will wake for (`u64::MAX`: none). A sleep
    /// filed before it lowers it and tells the driver.
    announced: u64,
    /// The driver stopped or is gone: it took every waker, and takes no
    /// more.
    closed: bool,
}

impl Inner {
    /// The next tick a sleep waits for (`u64::MAX`: none), which the
    /// driver will wake for: a sleep filed before it tells the driver.
    fn announce(&mut self) -> u64 {
        self.announced = self.wheel.next_expiration().unwrap_or(u64::MAX);
        self.announced
    }
}

impl std::fmt::Debug for Sleeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleeps")
            .field("id", &self.id)
            .field("shards", &self.shards.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("fired", &self.fired.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Sleeps {
    pub(crate) fn new(tx: Signaller, clock: Clock) -> Self {
        let n = std::thread::available_parallelism().map_or(1, usize::from);
        Self::with_shards(tx, clock, n)
    }

    /// With `n` shards, rounded up to a power of two (so a thread's shard
    /// is a mask away, not a division), at most [`MAX_SHARDS`].
    fn with_shards(tx: Signaller, clock: Clock, n: usize) -> Self {
        let n = n.clamp(1, MAX_SHARDS).next_power_of_two();
        Sleeps {
            id: WHEEL_IDS.fetch_add(1, Ordering::Relaxed),
            clock,
            tx,
            shards: (0..n).map(|_| OnceLock::new()).collect(),
            table: Arc::new(Table {
                closed: AtomicBool::new(false),
                shards: (0..n).map(|_| OnceLock::new()).collect(),
            }),
        }
    }

    /// The driver's side of these sleeps.
    pub(crate) fn driver(&self) -> SleepDriver {
        SleepDriver::new(Arc::clone(&self.table))
    }

    /// This thread's shard and, if `deadline` lies in the window this
    /// thread remembered for this wheel, the tick it rounds up to: a burst
    /// of sleeps on one deadline tick (timeouts of one length made together)
    /// finds it by comparing instants, without working it out.
    #[inline]
    pub(crate) fn look(&self, deadline: Instant) -> (Arc<Shard>, Option<u64>) {
        let local = local();
        let when = (local.window)
            .filter(|w| w.wheel == self.id && deadline > w.after && deadline <= w.until)
            .map(|w| w.when);
        (self.shard_at(local.thread), when)
    }

    /// This thread's shard.
    #[inline]
    pub(crate) fn shard(&self) -> Arc<Shard> {
        self.shard_at(local().thread)
    }

    /// The shard of thread number `thread`.
    #[inline]
    fn shard_at(&self, thread: usize) -> Arc<Shard> {
        let at = thread & (self.shards.len() - 1);
        let shard = self.shards[at].get_or_init(|| {
            let shard = Arc::new(Shard::new(self.tx.clone()));
            let _ = self.table.shards[at].set(Arc::downgrade(&shard));
            // Made as the driver closed the sleeps: it may have looked at
            // this place before the shard was there.
            if self.table.closed.load(Ordering::SeqCst) {
                shard.close();
            }
            shard
        });
        Arc::clone(shard)
    }

    /// Whether the driver stopped taking sleeps.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed() || self.table.closed.load(Ordering::SeqCst)
    }

    /// Remembers, for this thread, that deadlines in `window` (after the
    /// first instant, up to the second) round up to tick `when`.
    #[inline]
    pub(crate) fn remember_window(&self, when: u64, window: Option<(Instant, Instant)>) {
        let window = window.map(|(after, until)| Window {
            wheel: self.id,
            after,
            until,
            when,
        });
        let _ = LOCAL.try_with(|cell| {
            let mut local = cell.get();
            local.window = window;
            cell.set(local);
        });
    }
}

impl Shard {
    fn new(tx: Signaller) -> Self {
        Shard {
            tx,
            fired: AtomicU64::new(0),
            inner: SpinMutex::new(Inner {
                wheel: Wheel::new(),
                last: None,
                announced: u64::MAX,
                closed: false,
            }),
        }
    }

    /// Whether the driver stopped taking sleeps here.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed() || self.inner.lock().closed
    }

    /// Whether tick `when` has fired, without the lock.
    #[inline]
    pub(crate) fn has_fired(&self, when: u64) -> bool {
        self.fired.load(Ordering::Acquire) >= when
    }

    /// Waits for tick `when` with `waker`: files it, writing its place to
    /// `place`, the first time, or refreshes it there.
    pub(crate) fn wait(&self, when: u64, place: &mut Place, waker: &Waker) -> Outcome {
        if self.has_fired(when) {
            return Outcome::Fired;
        }
        let mut inner = self.inner.lock();
        // The driver fires a tick whole under the lock: past the wheel's
        // `elapsed`, this sleep's waker was taken and woken, or never filed.
        if when <= inner.wheel.elapsed() {
            return Outcome::Fired;
        }
        if inner.closed {
            return Outcome::Closed;
        }
        if place.entry != NO_SLOT {
            let old = (inner.wheel.value_at_mut(place.entry))
                .and_then(|waiters| waiters.get_mut(place.slot));
            if let Some(old) = old {
                if !old.will_wake(waker) {
                    old.clone_from(waker);
                }
            }
            return Outcome::Waiting;
        }
        if let Some((tick, entry)) = inner.last {
            if tick == when {
                let joined = (inner.wheel.value_at_mut(entry))
                    .and_then(|waiters| waiters.insert(waker.clone()));
                return match joined {
                    Some(slot) => {
                        *place = Place { entry, slot };
                        Outcome::Waiting
                    }
                    // Four billion sleeps on one tick: this one cannot wait,
                    // and fails rather than hang.
                    None => Outcome::Closed,
                };
            }
        }
        let waiters = Waiters::new(waker.clone());
        let Ok(entry) = inner.wheel.insert_unkeyed((), waiters, when) else {
            // Some billion ticks waited for: this one cannot be, and its
            // sleep fails rather than hang.
            return Outcome::Closed;
        };
        *place = Place { entry, slot: 0 };
        inner.last = Some((when, entry));
        let earlier = when < inner.announced;
        if earlier {
            inner.announced = when;
        }
        drop(inner);
        // No reply. If the driver is gone, it closes (or closed) the wheel
        // as it goes, which wakes this sleep.
        if earlier {
            self.tx.raise();
        }
        Outcome::Waiting
    }

    /// Takes back the waker a sleep of tick `when` filed at `place`, if it
    /// still waits: the sleep is going. The last sleep of a tick to go takes
    /// the tick's entry out of the wheel.
    #[inline]
    pub(crate) fn leave(&self, when: u64, place: Place) {
        if place.entry == NO_SLOT || self.has_fired(when) {
            return;
        }
        let mut inner = self.inner.lock();
        // Fired or closed in between: its waker went with the rest, and the
        // entry may be another tick's by now. Otherwise only its sleeps take
        // a waiting tick's entry out, the last of them, so the entry at
        // `place` is still this sleep's tick's.
        if inner.closed || when <= inner.wheel.elapsed() {
            return;
        }
        let Some(waiters) = inner.wheel.value_at_mut(place.entry) else {
            return;
        };
        let waker = match waiters.remove(place.slot) {
            Left::Others(waker) => {
                drop(inner);
                drop(waker);
                return;
            }
            Left::None(waker) => waker,
        };
        let gone = inner.wheel.remove_at(place.entry, &());
        if inner.last == Some((when, place.entry)) {
            inner.last = None;
        }
        drop(inner);
        drop((waker, gone));
    }

    /// Fires every tick up to `now`, moving the due wakers to `into`, and
    /// returns the next tick a sleep here waits for (`u64::MAX`: none), now
    /// the driver's wake; `None` if there was nothing to fire (the tick had
    /// fired, or the shard is closed), which leaves that tick as it was.
    fn fire(&self, now: u64, into: &mut Vec<Waker>) -> Option<u64> {
        // Only this advances the wheel, and it records where to: a tick
        // already fired needs no lock (the driver asks on every turn).
        if now <= self.fired.load(Ordering::Acquire) {
            return None;
        }
        let mut inner = self.inner.lock();
        if inner.closed || now <= inner.wheel.elapsed() {
            return None;
        }
        inner.wheel.advance(now);
        while let Some(((), waiters)) = inner.wheel.pop_due_unkeyed() {
            waiters.take_all(into);
        }
        self.fired.store(inner.wheel.elapsed(), Ordering::Release);
        Some(inner.announce())
    }

    /// The next tick a sleep here waits for (`u64::MAX`: none), now the
    /// driver's wake.
    fn next_tick(&self) -> u64 {
        self.inner.lock().announce()
    }

    fn waiting(&self) -> usize {
        self.inner.lock().wheel.values().map(Waiters::len).sum()
    }

    /// Fails every sleep waiting here as closed, and every sleep that would
    /// wait here from now on.
    fn close(&self) {
        let mut entries = Vec::new();
        let mut inner = self.inner.lock();
        inner.closed = true;
        inner.last = None;
        inner.wheel.drain_into(&mut entries);
        drop(inner);
        let mut woken = Vec::new();
        for ((), waiters) in entries {
            waiters.take_all(&mut woken);
        }
        woken.into_iter().for_each(Waker::wake);
    }
}

/// The driver's side of a wheel's sleeps: closes them when dropped (the
/// driver stopped, or was dropped with its runtime).
pub(crate) struct SleepDriver {
    table: Arc<Table>,
    /// For each shard, the next tick a sleep there waits for, as of the
    /// driver's last look (`u64::MAX`: none): a sleep filed before it
    /// raises the signal, and the driver looks again.
    next: Box<[u64]>,
}

impl std::fmt::Debug for SleepDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SleepDriver").finish_non_exhaustive()
    }
}

impl SleepDriver {
    fn new(table: Arc<Table>) -> Self {
        let next = vec![u64::MAX; table.shards.len()].into_boxed_slice();
        SleepDriver { table, next }
    }

    /// For a driver that fires no sleeps.
    pub(crate) fn none() -> Self {
        SleepDriver::new(Arc::new(Table {
            closed: AtomicBool::new(false),
            shards: Box::new([]),
        }))
    }

    /// The shards made so far, with their places: each still held by a
    /// handle or a sleep, or `None`, gone with its last sleep.
    fn made(table: &Table) -> impl Iterator<Item = (usize, Option<Arc<Shard>>)> + '_ {
        (table.shards.iter().enumerate())
            .filter_map(|(at, shard)| Some((at, shard.get()?.upgrade())))
    }

    /// The shards made so far and still held by a handle or a sleep, with
    /// their places.
    fn shards(table: &Table) -> impl Iterator<Item = (usize, Arc<Shard>)> + '_ {
        Self::made(table).filter_map(|(at, shard)| Some((at, shard?)))
    }

    /// Fires every tick up to `now`, moving the due wakers to `into` for the
    /// caller to wake.
    pub(crate) fn fire(&mut self, now: u64, into: &mut Vec<Waker>) {
        for (at, shard) in Self::made(&self.table) {
            match shard {
                Some(shard) => {
                    if let Some(next) = shard.fire(now, into) {
                        self.next[at] = next;
                    }
                }
                // Gone with its last sleep (which need not raise the
                // signal): nothing waits there, and a tick noted for it
                // would have the driver wake for it on every turn.
                None => self.next[at] = u64::MAX,
            }
        }
    }

    /// Looks again at the next tick each shard's sleeps wait for (the
    /// signal was raised: a sleep was filed before it).
    pub(crate) fn refresh(&mut self) {
        self.next.fill(u64::MAX);
        for (at, shard) in Self::shards(&self.table) {
            self.next[at] = shard.next_tick();
        }
    }

    /// The next tick a sleep waits for, as of the last look, now the
    /// driver's wake. (A sleep that left since may make it early: the
    /// driver wakes for nothing then, and looks again.)
    pub(crate) fn next_tick(&self) -> Option<u64> {
        self.next
            .iter()
            .copied()
            .min()
            .filter(|&tick| tick != u64::MAX)
    }

    /// The sleeps waiting now.
    pub(crate) fn waiting(&self) -> usize {
        Self::shards(&self.table)
            .map(|(_, shard)| shard.waiting())
            .sum()
    }

    /// Fails every waiting sleep as closed, and every sleep that would wait
    /// from now on.
    pub(crate) fn close(&self) {
        self.table.closed.store(true, Ordering::SeqCst);
        Self::shards(&self.table).for_each(|(_, shard)| shard.close());
    }
}

impl Drop for SleepDriver {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests;
