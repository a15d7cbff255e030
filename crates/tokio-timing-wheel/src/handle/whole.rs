//! The handle's operations on the whole wheel, every shard of it:
//! [`drain`](TimingWheel::drain), [`stop`](TimingWheel::stop) and
//! [`stats`](TimingWheel::stats).

use std::hash::Hash;

use tokio::sync::oneshot;

use super::{send_on, TimingWheel};
use crate::command::Command;
use crate::error::Error;
use crate::stats::Stats;

impl<K, V> TimingWheel<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Send + 'static,
{
    /// Removes and returns every pending timer, in no particular order. The
    /// wheel keeps running.
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver has stopped.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the command was queued, the timers are
    /// still removed and dropped. With several shards
    /// ([`Builder::shards`](crate::Builder::shards)) the shards are drained
    /// one after another, and those not reached yet keep their timers.
    ///
    /// A [`stop`](Self::stop) that comes while a drain of several shards is
    /// under way returns the timers of the shards the drain had not reached;
    /// the drain returns the others.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::new();
    /// wheel.set_timer(1u32, 'a', Duration::from_secs(1)).await.unwrap();
    /// wheel.set_timer(2, 'b', Duration::from_secs(2)).await.unwrap();
    /// let mut all = wheel.drain().await.unwrap();
    /// all.sort();
    /// assert_eq!(all, [(1, 'a'), (2, 'b')]);
    /// # }
    /// ```
    pub async fn drain(&self) -> Result<Vec<(K, V)>, Error> {
        let (first, rest) = self.shards.all().split_first().expect("at least one shard");
        let mut all = drain_shard(first).await?;
        for shard in rest {
            // A later shard found closed was stopped by a concurrent `stop`,
            // which has its timers; those taken already are returned here.
            if let Ok(timers) = drain_shard(shard).await {
                all.extend(timers);
            }
        }
        Ok(all)
    }

    /// Stops the driver and returns every timer that had not fired, in no
    /// particular order. Commands queued before the driver closed its
    /// channel are applied first. The stream yields what had already expired
    /// and then ends; every later call on any handle, a second `stop`
    /// included, fails with [`Error::is_closed`].
    ///
    /// In callback mode ([`Builder::build_with_callback`](crate::Builder::build_with_callback)) it also starts no
    /// more callbacks, waits for the running ones (each for at most the
    /// callback timeout), and returns, beside the pending timers, the
    /// expired ones whose callback had not started: no timer is lost.
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver had already stopped.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped before the command was queued, nothing
    /// happened (in callback mode, callbacks keep running). If it is dropped
    /// after, the driver still stops and the pending timers are dropped;
    /// with several shards, every shard still stops (the others are stopped
    /// from a task of their own).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (wheel, mut expired) = TimingWheel::new();
    /// wheel.set_timer(1u32, "pending", Duration::from_secs(60)).await.unwrap();
    /// assert_eq!(wheel.stop().await.unwrap(), [(1, "pending")]);
    /// assert!(expired.recv().await.is_none());
    /// assert!(wheel.stop().await.unwrap_err().is_closed());
    /// # }
    /// ```
    pub async fn stop(&self) -> Result<Vec<(K, V)>, Error> {
        // The first shard decides: only the stop it answers goes on to the
        // others, so of two concurrent stops exactly one succeeds.
        let (first, rest) = self.shards.all().split_first().expect("at least one shard");
        let (reply, rx) = oneshot::channel();
        send_on(first, Command::Stop { reply }).await?;
        // Only once the stop is queued: a `stop` dropped while it waited for
        // room in the channel leaves the callbacks running.
        if let Some(callbacks) = &self.callbacks {
            callbacks.begin_stop();
        }
        let mut pending = if rest.is_empty() {
            rx.await.map_err(|_| Error::closed())?
        } else {
            // Once the first shard has the stop, the others must stop too,
            // even if this future is dropped: they are stopped from a task.
            let rest = rest.to_vec();
            let all = self.shards.runtime().spawn(async move {
                let mut pending = rx.await.ok()?;
                for shard in &rest {
                    let (reply, rx) = oneshot::channel();
                    // A shard already gone (its runtime shut down) has
                    // nothing left.
                    if send_on(shard, Command::Stop { reply }).await.is_ok() {
                        pending.extend(rx.await.unwrap_or_default());
                    }
                }
                Some(pending)
            });
            all.await.ok().flatten().ok_or_else(Error::closed)?
        };
        if let Some(callbacks) = &self.callbacks {
            pending.extend(callbacks.finish_stop().await);
        }
        Ok(pending)
    }

    /// The driver's counters, after it has fired every timer already due.
    ///
    /// The driver answers once it has applied every command it took from
    /// the channel along with this one, so commands queued just behind a
    /// `stats()` (another task's `remove_timer`, say) still come before the
    /// firing it does.
    ///
    /// # Errors
    ///
    /// [`Error::is_closed`] if the driver has stopped, or stops before it
    /// gets to this call (a `stats()` queued after a [`stop`](Self::stop)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tokio_timing_wheel::TimingWheel;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let (wheel, _expired) = TimingWheel::new();
    /// wheel.set_timer(1u32, (), Duration::from_secs(1)).await.unwrap();
    /// tokio::time::sleep(Duration::from_secs(2)).await;
    /// let stats = wheel.stats().await.unwrap();
    /// assert_eq!((stats.pending, stats.fired), (0, 1));
    /// # }
    /// ```
    pub async fn stats(&self) -> Result<Stats, Error> {
        let mut stats = Stats::default();
        for shard in self.shards.all() {
            let (reply, rx) = oneshot::channel();
            send_on(shard, Command::Stats { reply }).await?;
            let one = rx.await.map_err(|_| Error::closed())?;
            stats.pending += one.pending;
            stats.fired += one.fired;
            stats.wakeups += one.wakeups;
            stats.discarded += one.discarded;
            stats.sleeps += one.sleeps;
        }
        if let Some(callbacks) = &self.callbacks {
            let c = &callbacks.counters;
            let load =
                |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
            stats.callbacks_running = load(&c.running);
            stats.callbacks_completed = load(&c.completed);
            stats.callbacks_timed_out = load(&c.timed_out);
            stats.callbacks_panicked = load(&c.panicked);
            stats.callback_mode = true;
        }
        Ok(stats)
    }
}

/// Drains one shard.
async fn drain_shard<K, V>(
    shard: &crate::channel::Sender<Command<K, V>>,
) -> Result<Vec<(K, V)>, Error> {
    let (reply, rx) = oneshot::channel();
    send_on(shard, Command::Drain { reply }).await?;
    rx.await.map_err(|_| Error::closed())
}
