//! The task that owns the wheel.
//!
//! One loop: take the commands that are queued (in batches, in order), fire
//! what is due, arm one `Sleep` for the next deadline, and wait for whichever
//! comes first. With nothing pending the `Sleep` is not polled at all, so an
//! idle wheel never wakes. Expired timers go to the stream's queue without
//! waiting for the consumer, so commands always keep flowing.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::time::Instant;
use tracing::{debug, error, trace, warn};

use crate::channel::Receiver;
use crate::clock::Clock;
use crate::command::Command;
use crate::delay::sleep::far_future;
use crate::delay::sleeps::{SignalReceiver, SleepDriver};
use crate::expired::Expired;
use crate::stats::Stats;
use crate::stream::Shared;
use crate::wheel::{AtCapacity, Wheel};

/// Commands applied per turn, between looks at the clock.
pub(crate) const COMMAND_BATCH: usize = 256;

/// Expired timers handed to the stream per turn before the driver yields.
const FIRE_BATCH: usize = 1024;

/// Firing this many ticks after the deadline is reported as lag.
const LAG_TICKS: u64 = 4;

pub(crate) struct Driver<K, V> {
    wheel: Wheel<K, V>,
    rx: Receiver<Command<K, V>>,
    /// The delay futures' wheels, apart from the user's keys and shared
    /// with the futures (see [`crate::delay::sleeps`]). A driver of another shard
    /// than the first holds none.
    sleeps: SleepDriver,
    /// Wakers of the sleeps whose tick fired, woken once taken.
    woken: Vec<std::task::Waker>,
    /// Raised when a sleep was filed before the driver's wake: look again.
    /// Says so once no handle or sleep is left.
    sleep_rx: SignalReceiver,
    shared: Arc<Shared<K, V>>,
    clock: Clock,
    /// Commands taken from the channel and not yet applied (they still
    /// hold their channel slots).
    batch: VecDeque<Command<K, V>>,
    stats: Stats,
    /// Whether the driver's own clock woke it (or its wake had passed by
    /// the time it would have slept) since it last looked for timers of
    /// the next tick already reached: it looks only then, so a driver busy
    /// with commands does not scan the next slot on each run (Tokio's timer
    /// wakes it at most once a millisecond). Kept while timers are due, so
    /// the look comes once they have gone.
    clock_woke: bool,
    /// `stats()` calls taken from the channel, answered once every command
    /// taken with them is applied and what is due has fired.
    stats_replies: Vec<tokio::sync::oneshot::Sender<Stats>>,
    /// How many of `stats_replies` were taken before the first `Stop`:
    /// answered once [`stop`](Self::stop) has applied every command queued
    /// behind the stop; the rest learn that the wheel closed.
    stats_before_stop: Option<usize>,
    /// The wheel's length as last published to the handles.
    published_len: usize,
    /// Places under the pending limit this driver holds: one per timer in
    /// its wheel, as of the last [`settle_places`](Self::settle_places).
    places: usize,
    /// Declared last, so it drops after the wheel: closes the stream even if
    /// the task is dropped before it ever ran.
    close: Option<CloseOnDrop<K, V>>,
}

/// Tells the stream this driver will deliver nothing more: dropped once no
/// handle is left and nothing is left to fire, or when the driver ends,
/// however it ends (a runtime that shuts down drops the task without
/// finishing it).
struct CloseOnDrop<K, V>(Arc<Shared<K, V>>);

impl<K, V> Drop for CloseOnDrop<K, V> {
    fn drop(&mut self) {
        self.0.driver_done();
    }
}

type StopReply<K, V> = tokio::sync::oneshot::Sender<Vec<(K, V)>>;

/// A reply a command owes, sent once the places it freed are given back.
enum Answer<K, V> {
    None,
    Removed(tokio::sync::oneshot::Sender<Option<V>>, Option<V>),
    Drained(StopReply<K, V>, Vec<(K, V)>),
}

/// What one turn of the loop saw.
enum Turn {
    Commands,
    Sleeps,
    SleepHandlesGone,
    HandlesGone,
    Clock,
    /// The next wake had passed by the time the driver would have slept.
    Passed,
    Yielded,
}

impl<K, V> Driver<K, V>
where
    K: Eq + std::hash::Hash + Send + 'static,
    V: Send + 'static,
{
    pub(crate) fn new(
        rx: Receiver<Command<K, V>>,
        sleep_rx: SignalReceiver,
        sleeps: SleepDriver,
        shared: Arc<Shared<K, V>>,
        clock: Clock,
    ) -> Self {
        Driver {
            wheel: Wheel::new(),
            rx,
            sleeps,
            sleep_rx,
            woken: Vec::new(),
            clock,
            batch: VecDeque::new(),
            stats: Stats::default(),
            clock_woke: false,
            stats_replies: Vec::new(),
            stats_before_stop: None,
            published_len: 0,
            places: 0,
            close: Some(CloseOnDrop(Arc::clone(&shared))),
            shared,
        }
    }

    /// Reserves room for `timers` pending timers; see
    /// [`Builder::capacity`](crate::Builder::capacity).
    pub(crate) fn reserve(&mut self, timers: usize) {
        if timers > 0 && !self.wheel.reserve(timers) {
            warn!(
                timers,
                "could not reserve room for the timers asked; the wheel will grow as needed"
            );
        }
    }

    pub(crate) async fn run(mut self) {
        debug!(tick = ?self.clock.tick(), "timing wheel driver started");
        let sleep = tokio::time::sleep_until(far_future(Instant::now()));
        tokio::pin!(sleep);
        let mut armed: Option<Instant> = None;
        let mut open = true;
        let mut sleeps_open = true;
        loop {
            // Commands already queued were stamped before now: apply them
            // before the clock moves the wheel past their deadlines.
            if sleeps_open {
                self.take_queued_sleeps();
            }
            if open && self.take_queued() {
                if let Some(reply) = self.apply_batch() {
                    self.stop(reply).await;
                    return;
                }
            }
            // Commands are applied a run at a time, yielding between runs;
            // nothing fires until every command taken is applied, as they
            // were all queued before the clock was looked at.
            if self.batch.is_empty() {
                self.fire_due();
                self.answer_stats();
            }
            let delivered = !open && (self.wheel.is_empty() || !self.shared.receiver_alive());
            if delivered {
                // No handle is left to set a timer and none is left to fire:
                // the stream has all it will get from this driver, even if
                // live sleeps keep the driver running.
                drop(self.close.take());
            }
            // Every `Sleep` and `Interval` holds a sleeps' signaller, so
            // once none is left nobody waits on the sleeps left.
            if delivered && !sleeps_open {
                debug!(
                    dropped = self.wheel.len(),
                    "every handle dropped and nothing left to deliver; driver exiting"
                );
                break;
            }
            let busy = self.wheel.has_due() || !self.batch.is_empty();
            // A wake already passed (commands kept the driver busy through
            // it) is taken at once: Tokio's timer would round it up to its
            // next millisecond.
            let mut passed = false;
            match self.next_wake() {
                Some(at) if !busy => {
                    if armed != Some(at) {
                        if at <= Instant::now() {
                            passed = true;
                            armed = None;
                        } else {
                            sleep.as_mut().reset(at);
                            armed = Some(at);
                        }
                    }
                }
                _ => armed = None,
            }
            self.publish_len();
            let turn = tokio::select! {
                biased;
                n = std::future::poll_fn(|cx| self.rx.poll_recv_all(cx, &mut self.batch)), if open && self.batch.is_empty() => {
                    if n == 0 { Turn::HandlesGone } else { Turn::Commands }
                }
                raised = std::future::poll_fn(|cx| self.sleep_rx.poll_raised(cx)), if sleeps_open => {
                    if raised { Turn::Sleeps } else { Turn::SleepHandlesGone }
                }
                () = &mut sleep, if armed.is_some() => Turn::Clock,
                () = tokio::task::yield_now(), if busy || passed => {
                    if passed { Turn::Passed } else { Turn::Yielded }
                }
            };
            match turn {
                Turn::Commands => {
                    if let Some(reply) = self.apply_batch() {
                        self.stop(reply).await;
                        return;
                    }
                    // Senders on other threads can keep the channel full
                    // for ever; give the runtime its turn now and then.
                    tokio::task::coop::consume_budget().await;
                }
                // A sleep was filed before the tick the driver wakes for.
                Turn::Sleeps => self.sleeps.refresh(),
                Turn::SleepHandlesGone => {
                    sleeps_open = false;
                    self.sleeps.refresh();
                }
                Turn::HandlesGone => {
                    debug!(pending = self.wheel.len(), "every handle dropped");
                    open = false;
                }
                Turn::Clock => {
                    self.stats.wakeups += 1;
                    self.clock_woke = true;
                    armed = None;
                }
                // Not a wake-up: the driver did not sleep.
                Turn::Passed => self.clock_woke = true,
                Turn::Yielded => {}
            }
        }
    }

    /// When the driver next has work on the clock: the instant of the next
    /// tick either wheel has work at, or sooner, the instant the earliest
    /// deadline inside the next tick is reached (timers fire from their own
    /// deadline, to a 256th of a tick, not only from their tick's end).
    fn next_wake(&self) -> Option<Instant> {
        let far = || far_future(Instant::now());
        let keyed = match self.wheel.next_early() {
            Some((tick, frac)) => Some(self.clock.early_instant(tick, frac).unwrap_or_else(far)),
            None => (self.wheel.next_expiration())
                .map(|tick| self.clock.instant(tick).unwrap_or_else(far)),
        };
        let sleeps =
            (self.sleeps.next_tick()).map(|tick| self.clock.instant(tick).unwrap_or_else(far));
        match (keyed, sleeps) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes every command waiting in the channel into `self.batch`,
    /// without waiting, once the commands taken before are all applied.
    /// Returns whether there is anything to apply.
    fn take_queued(&mut self) -> bool {
        if self.batch.is_empty() {
            self.rx.try_recv_all(&mut self.batch);
        }
        !self.batch.is_empty()
    }

    /// Looks again at the sleeps' next tick if a sleep was filed before the
    /// one the driver wakes for.
    fn take_queued_sleeps(&mut self) {
        if self.sleep_rx.take() {
            self.sleeps.refresh();
        }
    }

    /// Applies up to [`COMMAND_BATCH`] taken commands in order and frees
    /// their channel slots. A `Stop` among them is returned after all of
    /// them are applied; [`stop`](Self::stop) applies the rest (they were
    /// accepted before the channel closed, so they count).
    fn apply_batch(&mut self) -> Option<StopReply<K, V>> {
        let n = self.batch.len().min(COMMAND_BATCH);
        let mut stop = None;
        // Out of `self` while it is applied (nothing applying a command
        // looks at the batch), so the commands are drained in one go.
        let mut batch = std::mem::take(&mut self.batch);
        for command in batch.drain(..n) {
            if let Some(reply) = self.apply(command) {
                // A second `stop` learns "closed" from its dropped reply.
                stop.get_or_insert(reply);
            }
        }
        self.batch = batch;
        self.rx.release(n);
        stop
    }

    /// Applies one command; a `Stop` is returned for the caller to run.
    /// Places under the pending limit freed by the command go back before
    /// its caller hears of it.
    fn apply(&mut self, command: Command<K, V>) -> Option<StopReply<K, V>> {
        let answer = match command {
            Command::Set {
                key,
                value,
                when,
                frac,
            } => {
                // The `Set`'s place is this driver's now; a replacement, or a
                // timer refused at capacity, adds no timer and gives it
                // back below.
                self.places += 1;
                if let Err(AtCapacity(_, _)) = self.wheel.insert_in(key, value, when, frac) {
                    error!("timing wheel holds 2^30 timers; a new timer was dropped");
                }
                Answer::None
            }
            Command::Move { key, when, frac } => {
                self.wheel.reschedule_in(&key, when, frac);
                Answer::None
            }
            Command::Remove { key, reply } => {
                Answer::Removed(reply, self.wheel.remove(&key).map(|(_, value)| value))
            }
            Command::Deadline { key, reply } => {
                let _ = reply.send(self.wheel.deadline(&key));
                Answer::None
            }
            Command::Cancel { key } => {
                self.wheel.remove(&key);
                Answer::None
            }
            Command::Drain { reply } => {
                let mut all = Vec::new();
                self.wheel.drain_into(&mut all);
                Answer::Drained(reply, all)
            }
            // Answered once the commands taken with it are applied: it
            // fires what is due, which must wait for them.
            Command::Stats { reply } => {
                self.stats_replies.push(reply);
                Answer::None
            }
            Command::Stop { reply } => {
                // `stats()` calls queued before the stop are answered once
                // the commands queued behind it are applied too (answering
                // now would fire ahead of them); those after it learn that
                // it closed.
                self.stats_before_stop
                    .get_or_insert(self.stats_replies.len());
                return Some(reply);
            }
        };
        self.settle_places();
        match answer {
            Answer::None => {}
            Answer::Removed(reply, removed) => {
                let _ = reply.send(removed);
            }
            Answer::Drained(reply, all) => {
                let _ = reply.send(all);
            }
        }
        None
    }

    /// Gives back to the pending limit the places of the timers that left
    /// the wheel since the last call (fired, removed, cancelled, replaced,
    /// drained or stopped): the one place where this driver releases them.
    fn settle_places(&mut self) {
        let len = self.wheel.len();
        debug_assert!(self.places >= len, "places={} len={len}", self.places);
        self.shared.release(self.places - len);
        self.places = len;
    }

    /// Tells the handles how many timers this driver's wheel holds (for
    /// `TimingWheel::len`), when that changed since it last told them.
    fn publish_len(&mut self) {
        let len = self.wheel.len();
        if len != self.published_len {
            self.shared.add_len(len, self.published_len);
            self.published_len = len;
        }
    }

    /// Answers the `stats()` calls taken so far with the state as of now:
    /// every sleep made before the call is counted, and what is due has
    /// fired.
    fn answer_stats(&mut self) {
        if self.stats_replies.is_empty() {
            return;
        }
        self.take_queued_sleeps();
        self.fire_due();
        while self.wheel.has_due() {
            self.fire_due();
        }
        // Published first, so a caller woken by the reply reads a `len()`
        // that agrees with it.
        self.publish_len();
        let stats = Stats {
            pending: self.wheel.len(),
            sleeps: self.sleeps.waiting(),
            ..self.stats
        };
        for reply in self.stats_replies.drain(..) {
            let _ = reply.send(stats);
        }
    }

    /// Ends the driver: refuses new commands, applies the ones already
    /// queued, and replies with every timer still pending.
    async fn stop(&mut self, reply: StopReply<K, V>) {
        self.rx.close();
        // After `close`, nothing new comes in: apply what was taken, then
        // what is queued.
        while self.take_queued() {
            // A second `stop` learns "closed" from its dropped reply.
            drop(self.apply_batch());
        }
        // `stats()` calls queued before the stop, now that every command
        // queued behind it is applied too, with the sleeps still counted.
        self.stats_replies
            .truncate(self.stats_before_stop.take().unwrap_or(0));
        self.answer_stats();
        // Pending sleeps complete with a closed error, and any that would
        // wait from now on.
        self.sleep_rx.close();
        self.sleeps.close();
        let mut pending = Vec::new();
        self.wheel.drain_into(&mut pending);
        self.settle_places();
        debug!(pending = pending.len(), "timing wheel driver stopped");
        // This driver is done with the stream before it replies.
        drop(self.close.take());
        let _ = reply.send(pending);
    }

    /// Advances the wheel to now and hands up to [`FIRE_BATCH`] due timers
    /// to the stream.
    fn fire_due(&mut self) {
        let instant = Instant::now();
        let now = self.clock.now_tick(instant);
        self.wheel.advance(now);
        self.sleeps.fire(now, &mut self.woken);
        self.fire_reached(instant);
        self.woken.drain(..).for_each(std::task::Waker::wake);
        if !self.wheel.has_due() {
            return;
        }
        let mut fired = self.hand_out(now, instant);
        // The tick's own timers have gone: those of the next tick reached
        // by now go too, rather than after another wait on the clock.
        if self.fire_reached(instant) {
            fired += self.hand_out(now, instant);
        }
        if self.shared.receiver_alive() {
            self.shared.wake();
        }
        trace!(fired, "timers fired");
    }

    /// Once the driver's clock has woken it and no timer is due, makes due
    /// the timers of the next tick whose own deadlines `instant` has
    /// reached. Returns whether it made any due. While timers are due the
    /// look waits for them to go (the clock's wake is kept for it), so the
    /// order of ticks holds.
    fn fire_reached(&mut self, instant: Instant) -> bool {
        if !self.clock_woke || self.wheel.has_due() {
            return false;
        }
        self.clock_woke = false;
        let Some((tick, least)) = self.wheel.next_early() else {
            return false;
        };
        let reached = self.clock.frac_reached(instant, tick);
        u16::from(least) < reached && self.wheel.fire_early(tick, reached) > 0
    }

    /// Hands up to [`FIRE_BATCH`] due timers to the stream's queue (or
    /// discards them if nobody reads the stream), `now` being the tick
    /// reached at `instant`. Returns how many went.
    fn hand_out(&mut self, now: u64, instant: Instant) -> usize {
        let fired;
        let mut max_lag = 0u64;
        if self.shared.receiver_alive() {
            let mut queue = self.shared.lock();
            let clock = &self.clock;
            // Timers due together mostly share a deadline tick: its instant
            // is worked out once per tick, not once per timer.
            let mut last: Option<(u64, Instant)> = None;
            fired = self
                .wheel
                .take_due_in(FIRE_BATCH, |key, value, when, frac| {
                    max_lag = max_lag.max(now - when.min(now));
                    let deadline = match last {
                        // Fired before its tick's end: reached at its place in
                        // the tick.
                        _ if when > now => clock.early_instant(when, frac).unwrap_or(instant),
                        Some((tick, at)) if tick == when => at,
                        _ => {
                            let at = clock.instant(when).unwrap_or_else(Instant::now);
                            last = Some((when, at));
                            at
                        }
                    };
                    queue.items.push_back(Expired::new(key, value, deadline));
                });
            drop(queue);
            self.settle_places();
            self.stats.fired += fired as u64;
        } else {
            fired = self.wheel.take_due(FIRE_BATCH, |_, _, _| {});
            self.settle_places();
            self.stats.discarded += fired as u64;
        }
        if max_lag > LAG_TICKS {
            debug!(lag_ticks = max_lag, fired, "timers fired late");
        }
        fired
    }
}
