//! A small TCP connection pool whose idle reaper is a timing wheel, shared by
//! `examples/idle_reaper.rs` and `tests/idle_reaper.rs`.
//!
//! The wheel owns every idle connection: an idle connection *is* the value of
//! its idle timer. `checkin` arms that timer with the connection inside;
//! `checkout` takes a connection back with `remove_timer`; the reaper task
//! closes whatever the stream hands it. Because the wheel hands each timer
//! out exactly once, a checkout can never get a connection the reaper
//! closed, and the reaper can never close one that is checked out.
//!
//! A second timer per connection enforces a maximum lifetime: it holds a
//! clone of the socket and shuts it down when it fires, busy or not.
#![allow(dead_code)] // the example and the tests use different parts

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_timing_wheel::{Expirations, TimingWheel};

/// Which of a connection's two timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimerKey {
    Idle(u64),
    Lifetime(u64),
}

/// What a timer holds.
#[derive(Debug)]
pub enum Held {
    /// The idle connection itself.
    Idle(Conn),
    /// A second handle to the socket, to shut it down when its life is over.
    Lifetime(std::net::TcpStream),
}

/// A pooled connection.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    pub stream: TcpStream,
    pub born: Instant,
}

impl Conn {
    /// Sends `msg` and reads the echo back.
    pub async fn echo(&mut self, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        self.stream.write_all(msg).await?;
        let mut buf = vec![0; msg.len()];
        self.stream.read_exact(&mut buf).await?;
        Ok(buf)
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub idle_timeout: Duration,
    pub max_lifetime: Duration,
    /// Keep at least this many idle connections: the reaper re-arms instead
    /// of closing while the pool is at or below it.
    pub min_idle: usize,
    pub tick: Duration,
}

/// Counters, and how late each reap was against its deadline.
#[derive(Debug, Default)]
pub struct Counters {
    pub dialled: AtomicU64,
    pub reused: AtomicU64,
    pub reaped_idle: AtomicU64,
    pub reaped_lifetime: AtomicU64,
    pub kept_warm: AtomicU64,
    pub closed_on_checkin: AtomicU64,
    pub replenished: AtomicU64,
    pub lateness: Mutex<Vec<Duration>>,
}

struct Inner {
    addr: SocketAddr,
    config: Config,
    wheel: TimingWheel<TimerKey, Held>,
    /// Ids of connections checked in, most recent last. May hold ids the
    /// reaper closed since; `checkout` skips those.
    idle_ids: Mutex<Vec<u64>>,
    idle_count: AtomicUsize,
    next_id: AtomicU64,
    counters: Counters,
}

/// The pool. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

impl Pool {
    /// A pool of connections to `addr`, and its reaper task.
    pub fn new(addr: SocketAddr, config: Config) -> (Pool, JoinHandle<()>) {
        let (wheel, expired) = TimingWheel::builder().tick(config.tick).build();
        let pool = Pool {
            inner: Arc::new(Inner {
                addr,
                config,
                wheel,
                idle_ids: Mutex::new(Vec::new()),
                idle_count: AtomicUsize::new(0),
                next_id: AtomicU64::new(0),
                counters: Counters::default(),
            }),
        };
        let reaper = tokio::spawn(reap(Arc::downgrade(&pool.inner), expired));
        (pool, reaper)
    }

    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// Idle connections in the pool right now.
    pub fn idle(&self) -> usize {
        self.inner.idle_count.load(Ordering::SeqCst)
    }

    /// An idle connection if there is one, else a new one.
    pub async fn checkout(&self) -> std::io::Result<Conn> {
        loop {
            let id = self.inner.idle_ids.lock().unwrap().pop();
            let Some(id) = id else { break };
            // The wheel decides: if the reaper already has it, we get None.
            if let Ok(Some(Held::Idle(conn))) =
                self.inner.wheel.remove_timer(TimerKey::Idle(id)).await
            {
                self.inner.idle_count.fetch_sub(1, Ordering::SeqCst);
                self.inner.counters.reused.fetch_add(1, Ordering::Relaxed);
                return Ok(conn);
            }
        }
        self.dial().await
    }

    async fn dial(&self) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(self.inner.addr).await?;
        stream.set_nodelay(true)?;
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        // A second handle to the same socket, for the lifetime timer.
        let std = stream.into_std()?;
        let lifetime_handle = std.try_clone()?;
        let stream = TcpStream::from_std(std)?;
        self.inner
            .wheel
            .set_timer(
                TimerKey::Lifetime(id),
                Held::Lifetime(lifetime_handle),
                self.inner.config.max_lifetime,
            )
            .await
            .map_err(std::io::Error::other)?;
        self.inner.counters.dialled.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            id,
            stream,
            born: Instant::now(),
        })
    }

    /// Returns a connection to the pool, arming its idle timer; a connection
    /// past its lifetime is closed instead.
    pub async fn checkin(&self, conn: Conn) {
        if conn.born.elapsed() >= self.inner.config.max_lifetime {
            let _ = self
                .inner
                .wheel
                .cancel_timer(TimerKey::Lifetime(conn.id))
                .await;
            self.inner
                .counters
                .closed_on_checkin
                .fetch_add(1, Ordering::Relaxed);
            return; // dropping it closes it
        }
        let id = conn.id;
        self.inner.idle_count.fetch_add(1, Ordering::SeqCst);
        self.inner.idle_ids.lock().unwrap().push(id);
        let armed = self
            .inner
            .wheel
            .set_timer(
                TimerKey::Idle(id),
                Held::Idle(conn),
                self.inner.config.idle_timeout,
            )
            .await;
        if armed.is_err() {
            // The pool is shutting down; the connection was handed back in
            // the error and dropped with it, which closes it.
            self.inner.idle_count.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Stops the reaper's wheel and closes every connection it held.
    pub async fn shutdown(&self) -> usize {
        let pending = self.inner.wheel.stop().await.unwrap_or_default();
        let mut closed = 0;
        for (_, held) in pending {
            match held {
                Held::Idle(conn) => {
                    drop(conn);
                    closed += 1;
                }
                Held::Lifetime(socket) => {
                    let _ = socket.shutdown(std::net::Shutdown::Both);
                }
            }
        }
        self.inner.idle_count.store(0, Ordering::SeqCst);
        closed
    }
}

/// The reaper: closes what expires, unless `min_idle` vetoes it.
///
/// It holds the pool weakly: once the last `Pool` is dropped, the wheel is
/// stopped (see `Drop for Inner`), whatever it still held is dropped, and the
/// stream, and so the reaper, ends.
async fn reap(pool: Weak<Inner>, mut expired: Expirations<TimerKey, Held>) {
    while let Some(e) = expired.next().await {
        let Some(inner) = pool.upgrade() else {
            continue; // the pool is gone: dropping the timer closes it
        };
        let pool = Pool { inner };
        let inner = &pool.inner;
        let late = Instant::now().saturating_duration_since(e.deadline());
        match e.into_parts() {
            (TimerKey::Idle(id), Held::Idle(conn)) => {
                if inner.idle_count.load(Ordering::SeqCst) <= inner.config.min_idle
                    && conn.born.elapsed() < inner.config.max_lifetime
                {
                    // Veto: keep it warm, it stays in `idle_ids`.
                    inner.counters.kept_warm.fetch_add(1, Ordering::Relaxed);
                    let _ = inner
                        .wheel
                        .set_timer(
                            TimerKey::Idle(id),
                            Held::Idle(conn),
                            inner.config.idle_timeout,
                        )
                        .await;
                    continue;
                }
                inner.idle_count.fetch_sub(1, Ordering::SeqCst);
                let _ = inner.wheel.cancel_timer(TimerKey::Lifetime(id)).await;
                // Counted before the close, so whoever sees the close sees
                // the count.
                inner.counters.reaped_idle.fetch_add(1, Ordering::SeqCst);
                inner.counters.lateness.lock().unwrap().push(late);
                drop(conn);
                replenish(&pool);
            }
            (TimerKey::Lifetime(id), Held::Lifetime(socket)) => {
                // Busy or idle, its life is over. Counted before the close.
                inner
                    .counters
                    .reaped_lifetime
                    .fetch_add(1, Ordering::SeqCst);
                inner.counters.lateness.lock().unwrap().push(late);
                let _ = socket.shutdown(std::net::Shutdown::Both);
                if let Ok(Some(Held::Idle(conn))) =
                    inner.wheel.remove_timer(TimerKey::Idle(id)).await
                {
                    inner.idle_count.fetch_sub(1, Ordering::SeqCst);
                    drop(conn);
                }
                replenish(&pool);
            }
            (key, held) => unreachable!("timer {key:?} holds {held:?}"),
        }
    }
}

impl Drop for Inner {
    /// The last handle to the pool is gone: stop the wheel, which hands back
    /// every idle connection and lifetime handle, and close them all.
    fn drop(&mut self) {
        let wheel = self.wheel.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for (_, held) in wheel.stop().await.unwrap_or_default() {
                    if let Held::Lifetime(socket) = held {
                        let _ = socket.shutdown(std::net::Shutdown::Both);
                    }
                }
            });
        }
    }
}

/// Keeps `min_idle` warm after a close: dials a replacement off the
/// reaper's task.
fn replenish(pool: &Pool) {
    if pool.idle() < pool.inner.config.min_idle {
        let pool = pool.clone();
        tokio::spawn(async move {
            if let Ok(conn) = pool.dial().await {
                pool.inner
                    .counters
                    .replenished
                    .fetch_add(1, Ordering::Relaxed);
                pool.checkin(conn).await;
            }
        });
    }
}

/// An echo server on loopback that counts the connections it has open.
pub struct EchoServer {
    pub addr: SocketAddr,
    pub open: Arc<AtomicUsize>,
    pub accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl EchoServer {
    pub async fn start() -> std::io::Result<EchoServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let open = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let (open2, accepted2) = (Arc::clone(&open), Arc::clone(&accepted));
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                open2.fetch_add(1, Ordering::SeqCst);
                accepted2.fetch_add(1, Ordering::SeqCst);
                let open = Arc::clone(&open2);
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if socket.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Ok(EchoServer {
            addr,
            open,
            accepted,
            task,
        })
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Waits until the server has accepted `n` connections in all, or the
    /// timeout passes; returns how many it accepted.
    pub async fn wait_accepted(&self, n: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        while self.accepted.load(Ordering::SeqCst) < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits until the server has at most `n` connections open, or the
    /// timeout passes; returns how many are open.
    pub async fn wait_open_at_most(&self, n: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        while self.open() > n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.open()
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sorted lateness percentile.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
