//! Callback mode: running a user function for each expired timer.
//!
//! A dispatcher task reads the expiration stream in order. For each timer it
//! first takes a permit of a semaphore sized `max_concurrency` (so timers
//! beyond the limit wait their turn, in order, and none is dropped), then
//! spawns the callback as a task of its own holding that permit, under
//! `callback_timeout`, with panics caught. The driver never waits for any of
//! this: a slow or stuck callback delays neither other timers nor commands.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use tokio::sync::{oneshot, Notify, Semaphore};
use tracing::{error, warn};

use crate::stream::Expirations;

/// The default time a callback may run: 60 s.
pub const DEFAULT_CALLBACK_TIMEOUT: Duration = Duration::from_secs(60);

/// The default number of callbacks that may run at once: 1024.
pub const DEFAULT_MAX_CONCURRENCY: usize = 1024;

/// The most callbacks that may run at once: more could not all be waited
/// for by `stop` (see `spawn`), nor fit a semaphore on 32-bit targets.
const MAX_PERMITS: usize = if (u32::MAX as usize) < Semaphore::MAX_PERMITS {
    u32::MAX as usize
} else {
    Semaphore::MAX_PERMITS
};

/// Callback counters, shared by the dispatcher and the handles.
#[derive(Debug, Default)]
pub(crate) struct CallbackCounters {
    pub(crate) running: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) panicked: AtomicU64,
}

/// Where the dispatcher hands back the timers whose callbacks never started.
type Unstarted<K, V> = oneshot::Receiver<Vec<(K, V)>>;

/// How `stop` reaches the dispatcher.
pub(crate) struct CallbackCtl<K, V> {
    pub(crate) counters: Arc<CallbackCounters>,
    stopping: Notify,
    /// Replies with the timers that expired but whose callbacks never
    /// started, once every running callback has finished.
    done: Mutex<Option<Unstarted<K, V>>>,
}

impl<K, V> CallbackCtl<K, V> {
    /// Tells the dispatcher to start no more callbacks.
    pub(crate) fn begin_stop(&self) {
        self.stopping.notify_one();
    }

    /// The timers whose callbacks never started, after running callbacks
    /// finished (each within its timeout). Only the first caller gets them.
    pub(crate) async fn finish_stop(&self) -> Vec<(K, V)> {
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        match done {
            Some(done) => done.await.unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

impl<K, V> std::fmt::Debug for CallbackCtl<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackCtl")
            .field("counters", &self.counters)
            .finish()
    }
}

/// Starts the dispatcher on `runtime`.
pub(crate) fn spawn<K, V, F, Fut>(
    runtime: &tokio::runtime::Handle,
    expired: Expirations<K, V>,
    callback: F,
    timeout: Duration,
    max_concurrency: usize,
) -> Arc<CallbackCtl<K, V>>
where
    K: Send + 'static,
    V: Send + 'static,
    F: Fn(K, V) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    // `stop` waits for the running callbacks by taking every permit back
    // in one `acquire_many`, which counts in `u32`: a larger limit (such as
    // `usize::MAX` for "no limit") would let it return while some still run.
    let max_concurrency = max_concurrency.clamp(1, MAX_PERMITS);
    let (done_tx, done_rx) = oneshot::channel();
    let ctl = Arc::new(CallbackCtl {
        counters: Arc::new(CallbackCounters::default()),
        stopping: Notify::new(),
        done: Mutex::new(Some(done_rx)),
    });
    let dispatcher = Dispatcher {
        expired,
        callback: Arc::new(callback),
        timeout,
        permits: Arc::new(Semaphore::new(max_concurrency)),
        max_concurrency,
        ctl: Arc::clone(&ctl),
        runtime: runtime.clone(),
    };
    runtime.spawn(dispatcher.run(done_tx));
    ctl
}

struct Dispatcher<K, V, F> {
    expired: Expirations<K, V>,
    callback: Arc<F>,
    timeout: Duration,
    permits: Arc<Semaphore>,
    max_concurrency: usize,
    ctl: Arc<CallbackCtl<K, V>>,
    runtime: tokio::runtime::Handle,
}

impl<K, V, F, Fut> Dispatcher<K, V, F>
where
    K: Send + 'static,
    V: Send + 'static,
    F: Fn(K, V) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    async fn run(mut self, done: oneshot::Sender<Vec<(K, V)>>) {
        loop {
            let permit = tokio::select! {
                biased;
                () = self.ctl.stopping.notified() => break,
                permit = Arc::clone(&self.permits).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
            };
            let expired = tokio::select! {
                biased;
                () = self.ctl.stopping.notified() => break,
                expired = self.expired.next() => expired,
            };
            let Some(expired) = expired else { break };
            let (key, value) = expired.into_parts();
            self.start(key, value, permit);
        }
        // Stopping (or the stream ended): what expired but never started is
        // handed back to `stop`. The stream ends once the driver has stopped.
        let mut unstarted = Vec::new();
        while let Some(expired) = self.expired.next().await {
            unstarted.push(expired.into_parts());
        }
        // Running callbacks hold permits; each gives its permit back within
        // its timeout.
        let all = u32::try_from(self.max_concurrency).unwrap_or(u32::MAX);
        debug_assert_eq!(all as usize, self.max_concurrency, "limit not clamped");
        let _ = self.permits.acquire_many(all).await;
        let _ = done.send(unstarted);
    }

    fn start(&self, key: K, value: V, permit: tokio::sync::OwnedSemaphorePermit) {
        let callback = Arc::clone(&self.callback);
        let counters = Arc::clone(&self.ctl.counters);
        let timeout = self.timeout;
        counters.running.fetch_add(1, Ordering::Relaxed);
        self.runtime.spawn(async move {
            // The call itself runs inside the guarded future, so a panic
            // while making the future is caught too.
            let call = AssertUnwindSafe(async move { callback(key, value).await }).catch_unwind();
            match tokio::time::timeout(timeout, call).await {
                Ok(Ok(())) => {
                    counters.completed.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err(panic)) => {
                    counters.panicked.fetch_add(1, Ordering::Relaxed);
                    let message = panic_message(&*panic);
                    error!(panic = %message, "timer callback panicked");
                }
                Err(_) => {
                    counters.timed_out.fetch_add(1, Ordering::Relaxed);
                    warn!(?timeout, "timer callback timed out and was cancelled");
                }
            }
            counters.running.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
}

/// What a caught panic said: its message, when it is a string.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}
