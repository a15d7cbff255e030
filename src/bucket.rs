//! Deadline buckets: the delay futures waiting on one deadline tick share
//! one entry in the driver's wheel.
//!
//! A [`Bucket`] holds the wakers of the sleeps waiting on its tick, in a slab
//! behind a lock of its own. Its life:
//!
//! - A sleep finds its tick's bucket in a small per-thread cache (see
//!   [`bucket_for`]), so sleeps made on one thread for one tick share a
//!   bucket without a lock or a message. A miss makes a new bucket.
//! - Nothing is registered until a sleep first returns `Pending`: a sleep
//!   that completes before (a timeout whose future was ready) costs the
//!   driver nothing. The first waker put in a bucket registers it with the
//!   driver, once, over the sleep channel.
//! - A sleep dropped while waiting takes its waker out. The driver holds
//!   only a [`Weak`] reference (in an [`Armed`]), so once the last sleep of
//!   a bucket is gone the bucket is dropped, and its drop cancels the
//!   driver's entry: dropped futures free what they held.
//! - At the tick the driver takes the wakers and wakes them; if the driver
//!   stops or is dropped first, each [`Armed`] it held, or that was still
//!   in the channel, closes its bucket as it is dropped, so no sleep hangs.
//!
//! A bucket is never fired before its tick, and every sleep in it has a
//! deadline no later than that tick's instant, so none completes early.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::task::Waker;

use slab::Slab;
use spin::mutex::{SpinMutex, SpinMutexGuard};
use spin::relax::Yield;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Clock;

/// Still waiting for its tick.
const WAITING: u8 = 0;
/// Its tick came: every sleep in it completes with `Ok`.
const FIRED: u8 = 1;
/// The driver stopped or is gone first: every sleep in it fails as closed.
const CLOSED: u8 = 2;

/// A sleep's place in its bucket: no place yet. (A `u32`, so a `Sleep`
/// takes 32 bytes.)
pub(crate) const NO_SLOT: u32 = u32::MAX;

/// A bucket's place in the driver's wheel: not filed yet.
const NOT_FILED: u32 = u32::MAX;

/// What a bucket tells a sleep that asks to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Waiting,
    Fired,
    Closed,
}

/// Commands on the sleep channel.
#[derive(Debug)]
pub(crate) enum SleepCommand {
    /// A bucket has a waiter: fire it at its tick. (The channel carries
    /// small messages: its blocks stay under the allocator's large sizes.)
    Register(Armed),
    /// A registered bucket, filed at `index` in the driver's wheel, was
    /// dropped before its tick.
    Cancel { id: u64, index: u32 },
}

/// Ids unique in the process, for the per-thread cache to tell wheels
/// apart.
static WHEEL_IDS: AtomicU64 = AtomicU64::new(0);

/// One wheel's sleep channel and what buckets need to be made. Every
/// handle and every bucket holds it, so the driver keeps running while
/// anything may still wait on it.
#[derive(Debug)]
pub(crate) struct Sleeps {
    tx: mpsc::UnboundedSender<SleepCommand>,
    wheel: u64,
    ids: AtomicU64,
    pub(crate) clock: Clock,
}

impl Sleeps {
    pub(crate) fn new(tx: mpsc::UnboundedSender<SleepCommand>, clock: Clock) -> Self {
        Sleeps {
            tx,
            wheel: WHEEL_IDS.fetch_add(1, Ordering::Relaxed),
            ids: AtomicU64::new(0),
            clock,
        }
    }

    /// Whether the driver stopped taking sleeps.
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The sleeps waiting on one tick.
#[derive(Debug)]
pub(crate) struct Bucket {
    id: u64,
    when: u64,
    state: AtomicU8,
    /// Where the driver filed it ([`NOT_FILED`] until then), for a cancel
    /// to find it without a key index.
    index: AtomicU32,
    /// A spin lock, yielding the thread while another holds it: every
    /// hold is a few instructions (a slab insert or remove, or moving the
    /// slab out to fire it), and an uncontended one costs one atomic
    /// read-modify-write instead of a mutex's two (its release is a plain
    /// store), which is a fifth of what a timeout costs.
    waiters: SpinMutex<Waiters, Yield>,
    sleeps: Arc<Sleeps>,
}

#[derive(Debug, Default)]
struct Waiters {
    /// Whether the driver was sent this bucket (it is then in the channel
    /// or the driver's wheel until it fires, closes or is cancelled).
    registered: bool,
    /// Slot 0, so a bucket of one sleep allocates nothing more.
    first: Option<Waker>,
    /// Slot `n + 1` is `rest[n]`.
    rest: Slab<Waker>,
}

impl Waiters {
    /// Puts `waker` in a free slot, unless the bucket holds as many as a
    /// slot number can name (some four billion).
    fn insert(&mut self, waker: Waker) -> Option<u32> {
        if self.first.is_none() {
            self.first = Some(waker);
            return Some(0);
        }
        let at = self.rest.insert(waker);
        match u32::try_from(at + 1) {
            Ok(slot) if slot != NO_SLOT => Some(slot),
            _ => {
                self.rest.remove(at);
                None
            }
        }
    }

    fn get_mut(&mut self, slot: u32) -> Option<&mut Waker> {
        match slot {
            0 => self.first.as_mut(),
            n => self.rest.get_mut(n as usize - 1),
        }
    }

    fn remove(&mut self, slot: u32) -> Option<Waker> {
        match slot {
            0 => self.first.take(),
            n => self.rest.try_remove(n as usize - 1),
        }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn take_all(&mut self, into: &mut Vec<Waker>) {
        into.extend(self.first.take());
        into.extend(self.rest.drain());
    }
}

impl Bucket {
    fn new(sleeps: &Arc<Sleeps>, when: u64) -> Self {
        Bucket {
            id: sleeps.ids.fetch_add(1, Ordering::Relaxed),
            when,
            state: AtomicU8::new(WAITING),
            index: AtomicU32::new(NOT_FILED),
            waiters: SpinMutex::new(Waiters::default()),
            sleeps: Arc::clone(sleeps),
        }
    }

    fn lock(&self) -> SpinMutexGuard<'_, Waiters> {
        self.waiters.lock()
    }

    /// The outcome so far, without the lock.
    pub(crate) fn outcome(&self) -> Outcome {
        match self.state.load(Ordering::Acquire) {
            WAITING => Outcome::Waiting,
            FIRED => Outcome::Fired,
            _ => Outcome::Closed,
        }
    }

    /// Waits in this bucket with `waker`: puts it in at `slot` (a new slot
    /// the first time, written back), or refreshes it there. The first
    /// waker in a bucket registers the bucket with the driver.
    pub(crate) fn wait(self: &Arc<Self>, slot: &mut u32, waker: &Waker) -> Outcome {
        let mut waiters = self.lock();
        // Read under the lock: firing and closing set it under the lock
        // before they take the wakers, so a waker put in now is taken.
        let outcome = self.outcome();
        if outcome != Outcome::Waiting {
            return outcome;
        }
        // Once filed, the driver holds the bucket until it fires it or,
        // stopping or dropped, closes it: only a bucket not yet filed needs
        // to ask whether the driver is gone.
        if self.index.load(Ordering::Acquire) == NOT_FILED && self.sleeps.is_closed() {
            // The driver stopped or is gone. A registration sent just as its
            // channel closed can be missed by the driver's last look and
            // stay in the channel, which nobody drains while senders live,
            // this bucket's among them: close the bucket here.
            drop(waiters);
            self.close();
            return Outcome::Closed;
        }
        if *slot != NO_SLOT {
            if let Some(old) = waiters.get_mut(*slot) {
                if !old.will_wake(waker) {
                    old.clone_from(waker);
                }
            }
            return Outcome::Waiting;
        }
        let Some(taken) = waiters.insert(waker.clone()) else {
            // Four billion sleeps on one tick: this one cannot wait, and
            // fails rather than hang.
            return Outcome::Closed;
        };
        *slot = taken;
        if !waiters.registered {
            waiters.registered = true;
            let register = SleepCommand::Register(Armed(Arc::downgrade(self)));
            if let Err(mpsc::error::SendError(command)) = self.sleeps.tx.send(register) {
                // The driver is gone. Its `Armed` must not close this
                // bucket from inside this lock: it is closed here instead.
                if let SleepCommand::Register(armed) = command {
                    armed.defuse();
                }
                drop(waiters);
                self.close();
                return Outcome::Closed;
            }
        }
        Outcome::Waiting
    }

    /// Its id and tick, to file it by.
    pub(crate) fn id_and_tick(&self) -> (u64, u64) {
        (self.id, self.when)
    }

    /// Records where the driver filed this bucket.
    pub(crate) fn filed_at(&self, index: u32) {
        self.index.store(index, Ordering::Release);
    }

    /// Takes the waker at `slot` out, if the bucket still waits: the sleep
    /// that put it there is going.
    pub(crate) fn leave(&self, slot: u32) {
        if slot == NO_SLOT || self.outcome() != Outcome::Waiting {
            return;
        }
        let mut waiters = self.lock();
        // Fired or closed in between: the slot was emptied with the rest.
        let waker = if self.outcome() == Outcome::Waiting {
            waiters.remove(slot)
        } else {
            None
        };
        drop(waiters);
        drop(waker);
    }

    /// Ends the wait of every sleep in this bucket with `state`, moving
    /// their wakers to `into`, if it still waits.
    fn end(&self, state: u8, into: &mut Vec<Waker>) {
        let mut waiters = self.lock();
        if self.outcome() == Outcome::Waiting {
            self.state.store(state, Ordering::Release);
            // Out from under the lock in O(1): nobody puts a waker in or
            // takes one out once the state has changed.
            let mut taken = std::mem::take(&mut *waiters);
            drop(waiters);
            taken.take_all(into);
        }
    }

    /// Fails every sleep in this bucket as closed, if it still waits, and
    /// wakes them.
    fn close(&self) {
        let mut woken = Vec::new();
        self.end(CLOSED, &mut woken);
        woken.into_iter().for_each(Waker::wake);
    }
}

impl Drop for Bucket {
    fn drop(&mut self) {
        let index = *self.index.get_mut();
        // Not filed (never registered, or the driver has not got to the
        // registration, and when it does it finds every sleep gone and files
        // nothing): nothing to cancel. The driver files while holding the
        // bucket, so a bucket it filed is dropped after it wrote `index`.
        if index != NOT_FILED && *self.state.get_mut() == WAITING {
            // No reply: the driver frees the entry when it gets to this.
            let _ = self
                .sleeps
                .tx
                .send(SleepCommand::Cancel { id: self.id, index });
        }
    }
}

/// The driver's hold on a registered bucket: it fires the bucket at its
/// tick, and closes it if dropped unfired (the driver stopped, or was
/// dropped with its runtime, or the registration never reached it).
#[derive(Debug)]
pub(crate) struct Armed(Weak<Bucket>);

impl Armed {
    /// The bucket, unless every sleep in it is gone.
    pub(crate) fn bucket(&self) -> Option<Arc<Bucket>> {
        self.0.upgrade()
    }

    /// Fires the bucket, if its sleeps have not all gone, moving their
    /// wakers to `into` for the caller to wake.
    pub(crate) fn fire(mut self, into: &mut Vec<Waker>) {
        if let Some(bucket) = std::mem::take(&mut self.0).upgrade() {
            bucket.end(FIRED, into);
        }
    }

    /// The sleeps waiting in the bucket now.
    pub(crate) fn waiting(&self) -> usize {
        self.0.upgrade().map_or(0, |bucket| {
            let waiters = bucket.lock();
            if bucket.outcome() == Outcome::Waiting {
                waiters.len()
            } else {
                0
            }
        })
    }

    /// Lets go of the bucket without closing it.
    fn defuse(mut self) {
        self.0 = Weak::new();
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Some(bucket) = self.0.upgrade() {
            bucket.close();
        }
    }
}

/// Cache slots per thread: enough for the deadlines a thread's recent
/// sleeps spread over to mostly meet again, small enough to stay in cache.
const CACHE_SLOTS: usize = 64;

/// A per-thread cache of recent buckets, by wheel and tick.
#[derive(Debug)]
struct CacheSlot {
    wheel: u64,
    when: u64,
    bucket: Weak<Bucket>,
}

/// The bucket this thread made or found last, with the instants whose
/// deadlines round up to its tick: a burst of sleeps on one deadline tick
/// finds it by comparing instants, without working the tick out.
#[derive(Debug)]
struct Last {
    wheel: u64,
    /// The instant of the tick before (deadlines after it).
    after: Instant,
    /// The tick's instant (deadlines up to it).
    until: Instant,
    bucket: Weak<Bucket>,
}

#[derive(Debug)]
struct Cache {
    last: Option<Last>,
    /// Allocated on a thread's first sleep.
    slots: Vec<CacheSlot>,
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            last: None,
            slots: Vec::new(),
        })
    };
}

/// The bucket this thread used last on the wheel of `sleeps`, if `deadline`
/// rounds up to its tick and it still waits.
#[inline]
pub(crate) fn last_bucket(sleeps: &Sleeps, deadline: Instant) -> Option<Arc<Bucket>> {
    CACHE
        .try_with(|cache| {
            let cache = cache.borrow();
            let last = cache.last.as_ref()?;
            if last.wheel != sleeps.wheel || deadline <= last.after || deadline > last.until {
                return None;
            }
            let bucket = last.bucket.upgrade()?;
            (bucket.outcome() == Outcome::Waiting).then_some(bucket)
        })
        .ok()
        .flatten()
}

/// The bucket for tick `when` on the wheel of `sleeps`: the one this thread
/// used last for that tick if it still waits, else a new one. `window`, the
/// instants after which and up to which deadlines round up to `when`, makes
/// it the one [`last_bucket`] finds.
pub(crate) fn bucket_for(
    sleeps: &Arc<Sleeps>,
    when: u64,
    window: Option<(Instant, Instant)>,
) -> Arc<Bucket> {
    let cached = CACHE.try_with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.slots.is_empty() {
            cache.slots.extend((0..CACHE_SLOTS).map(|_| CacheSlot {
                wheel: u64::MAX,
                when: 0,
                bucket: Weak::new(),
            }));
        }
        let mix = when ^ sleeps.wheel.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = &mut cache.slots[(mix % CACHE_SLOTS as u64) as usize];
        let found = (slot.wheel == sleeps.wheel && slot.when == when)
            .then(|| slot.bucket.upgrade())
            .flatten()
            .filter(|bucket| bucket.outcome() == Outcome::Waiting);
        let bucket = found.unwrap_or_else(|| {
            let bucket = Arc::new(Bucket::new(sleeps, when));
            *slot = CacheSlot {
                wheel: sleeps.wheel,
                when,
                bucket: Arc::downgrade(&bucket),
            };
            bucket
        });
        cache.last = window.map(|(after, until)| Last {
            wheel: sleeps.wheel,
            after,
            until,
            bucket: Arc::downgrade(&bucket),
        });
        bucket
    });
    // While the thread's locals are torn down: no sharing.
    cached.unwrap_or_else(|_| Arc::new(Bucket::new(sleeps, when)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slot 0 is the inline one; the rest index the slab one up; a slot
    /// freed is reused and the others keep theirs.
    #[test]
    fn waiters_hand_out_and_take_back_slots() {
        let waker = futures::task::noop_waker();
        let mut waiters = Waiters::default();
        let slots: Vec<u32> = (0..4)
            .filter_map(|_| waiters.insert(waker.clone()))
            .collect();
        assert_eq!(slots, [0, 1, 2, 3]);
        assert!(waiters.remove(0).is_some());
        assert!(waiters.remove(0).is_none(), "a slot is freed once");
        assert!(waiters.remove(2).is_some());
        assert_eq!(waiters.len(), 2);
        assert_eq!(waiters.insert(waker.clone()), Some(0));
        assert_eq!(waiters.insert(waker.clone()), Some(2));
        assert!(waiters.get_mut(3).is_some());
        let mut taken = Vec::new();
        waiters.take_all(&mut taken);
        assert_eq!((taken.len(), waiters.len()), (4, 0));
    }

    /// Sleeps made on one thread for one tick share a bucket; another tick
    /// or another wheel gets its own.
    #[test]
    fn a_thread_shares_one_bucket_per_wheel_and_tick() {
        let clock = Clock::new(
            tokio::time::Instant::now(),
            std::time::Duration::from_millis(1),
        );
        let (tx, _rx) = mpsc::unbounded_channel();
        let one = Arc::new(Sleeps::new(tx.clone(), clock));
        let two = Arc::new(Sleeps::new(tx, clock));
        let a = bucket_for(&one, 10, None);
        assert!(Arc::ptr_eq(&a, &bucket_for(&one, 10, None)));
        assert!(!Arc::ptr_eq(&a, &bucket_for(&one, 11, None)));
        assert!(!Arc::ptr_eq(&a, &bucket_for(&two, 10, None)));
        // Once every sleep of it is gone, the cache does not keep it.
        let id = a.id;
        drop(a);
        assert_ne!(bucket_for(&one, 10, None).id, id);
    }

    /// The last bucket a thread used is found for deadlines inside its
    /// window only (after the tick before, up to its own tick), on its own
    /// wheel only, and only while it waits.
    #[test]
    fn the_last_bucket_is_found_by_its_window() {
        let ms = std::time::Duration::from_millis;
        let start = Instant::now();
        let clock = Clock::new(start, ms(1));
        let (tx, _rx) = mpsc::unbounded_channel();
        let one = Arc::new(Sleeps::new(tx.clone(), clock));
        let two = Arc::new(Sleeps::new(tx, clock));
        let window = clock.window(10);
        assert_eq!(window, Some((start + ms(9), start + ms(10))));
        let a = bucket_for(&one, 10, window);
        let found = |at| last_bucket(&one, at).is_some_and(|b| Arc::ptr_eq(&a, &b));
        assert!(found(start + ms(10)));
        assert!(found(start + ms(9) + std::time::Duration::from_nanos(1)));
        assert!(!found(start + ms(9)), "a deadline at tick 9 is tick 9's");
        assert!(!found(start + ms(10) + std::time::Duration::from_nanos(1)));
        assert!(last_bucket(&two, start + ms(10)).is_none());
        // Fired: a new sleep must not join it.
        a.end(FIRED, &mut Vec::new());
        assert!(last_bucket(&one, start + ms(10)).is_none());
        // A bucket found without a window leaves no last one.
        let b = bucket_for(&one, 12, None);
        assert!(last_bucket(&one, start + ms(12)).is_none());
        drop(b);
    }
}
