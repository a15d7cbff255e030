//! The idle reaper with real sockets on loopback: a pool whose idle
//! connections live in the wheel (see `tests/support/pool.rs`).
//!
//! These run on the real clock, since real sockets are involved; bounds on
//! lateness are one tick plus a generous allowance for a loaded machine.

#[path = "support/pool.rs"]
mod pool;

use std::sync::atomic::Ordering;
use std::time::Duration;

use pool::{Config, EchoServer, Pool};
use tokio::time::Instant;

/// The reaper's tick. How late it reaps is measured by the `idle_reaper`
/// example, not asserted here: a loaded machine can delay any wake-up.
const TICK: Duration = Duration::from_millis(5);

/// Waits up to 5 s for `cond` to hold.
async fn eventually(cond: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    cond()
}

fn config(idle_ms: u64) -> Config {
    Config {
        idle_timeout: Duration::from_millis(idle_ms),
        max_lifetime: Duration::from_secs(3600),
        min_idle: 0,
        tick: TICK,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_at_its_idle_deadline() {
    let server = EchoServer::start().await.unwrap();
    let (pool, _reaper) = Pool::new(server.addr, config(200));
    let mut conn = pool.checkout().await.unwrap();
    assert_eq!(conn.echo(b"ping").await.unwrap(), b"ping");
    let checked_in = Instant::now();
    pool.checkin(conn).await;
    assert_eq!(pool.idle(), 1);

    assert_eq!(server.wait_open_at_most(0, Duration::from_secs(5)).await, 0);
    let closed_after = checked_in.elapsed();
    assert!(
        closed_after >= Duration::from_millis(200),
        "closed {closed_after:?} after the check-in, before its idle deadline"
    );
    let lateness = pool.counters().lateness.lock().unwrap().clone();
    assert_eq!(lateness.len(), 1);
    assert_eq!(pool.counters().reaped_idle.load(Ordering::SeqCst), 1);
    assert_eq!(pool.idle(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checked_out_connection_is_never_reaped_while_in_use() {
    let server = EchoServer::start().await.unwrap();
    let (pool, _reaper) = Pool::new(server.addr, config(30));
    let mut conn = pool.checkout().await.unwrap();
    // In use for ten idle periods.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(conn.echo(b"busy").await.unwrap(), b"busy");
    }
    assert_eq!(pool.counters().reaped_idle.load(Ordering::SeqCst), 0);
    assert_eq!(server.open(), 1);
    pool.checkin(conn).await;
    assert_eq!(server.wait_open_at_most(0, Duration::from_secs(5)).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkout_never_returns_a_reaped_connection() {
    let server = EchoServer::start().await.unwrap();
    // Idle time of one tick: checkouts race the reaper constantly.
    let (pool, _reaper) = Pool::new(server.addr, config(5));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..150u32 {
                let mut conn = pool.checkout().await.unwrap();
                let msg = round.to_be_bytes();
                // A reaped connection would fail here.
                assert_eq!(conn.echo(&msg).await.unwrap(), msg);
                pool.checkin(conn).await;
                tokio::time::sleep(Duration::from_millis(u64::from(round % 7))).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let c = pool.counters();
    let (dialled, reused, reaped) = (
        c.dialled.load(Ordering::SeqCst),
        c.reused.load(Ordering::SeqCst),
        c.reaped_idle.load(Ordering::SeqCst),
    );
    assert_eq!(dialled + reused, 8 * 150);
    assert!(
        reaped > 0 && reused > 0,
        "dialled={dialled} reused={reused} reaped={reaped}"
    );
    assert_eq!(server.wait_open_at_most(0, Duration::from_secs(5)).await, 0);
    assert_eq!(c.reaped_idle.load(Ordering::SeqCst), dialled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_staggered_connections_are_each_reaped() {
    let server = EchoServer::start().await.unwrap();
    let (pool, _reaper) = Pool::new(server.addr, config(1_000));
    let mut conns = Vec::new();
    for _ in 0..1_000 {
        conns.push(pool.checkout().await.unwrap());
    }
    // Connects complete before the server's accepts: wait for all of them.
    assert_eq!(
        server.wait_accepted(1_000, Duration::from_secs(10)).await,
        1_000
    );
    assert_eq!(server.open(), 1_000);
    // Check them in over half a second: idle deadlines staggered 0.5 ms apart.
    let start = Instant::now();
    for (i, conn) in conns.into_iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_micros(500 * i as u64)).await;
        pool.checkin(conn).await;
    }
    assert_eq!(
        server.wait_open_at_most(0, Duration::from_secs(10)).await,
        0
    );
    let mut lateness = pool.counters().lateness.lock().unwrap().clone();
    assert_eq!(lateness.len(), 1_000);
    lateness.sort_unstable();
    let max = *lateness.last().unwrap();
    let p99 = pool::percentile(&lateness, 0.99);
    println!("1,000 reaped: lateness p99 {p99:?}, max {max:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_idle_keeps_warm_connections_instead_of_closing_them() {
    let server = EchoServer::start().await.unwrap();
    let (pool, _reaper) = Pool::new(
        server.addr,
        Config {
            min_idle: 2,
            ..config(40)
        },
    );
    let mut conns = Vec::new();
    for _ in 0..5 {
        conns.push(pool.checkout().await.unwrap());
    }
    for conn in conns {
        pool.checkin(conn).await;
    }
    // Three are reaped; two stay warm through many idle periods.
    assert_eq!(server.wait_open_at_most(2, Duration::from_secs(5)).await, 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.open(), 2);
    assert_eq!(pool.idle(), 2);
    assert!(pool.counters().kept_warm.load(Ordering::SeqCst) >= 2);
    // And they are still usable.
    let mut conn = pool.checkout().await.unwrap();
    assert_eq!(conn.echo(b"warm").await.unwrap(), b"warm");
    assert_eq!(pool.counters().reused.load(Ordering::SeqCst), 1);
}

/// Regression (a flake under load): the wait for the server to see both
/// connections closed ran before it had accepted them, so it saw 0 open at
/// once and the busy socket was tried before its lifetime ended. The test
/// waits for both accepts first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_lifetime_closes_a_connection_even_while_busy() {
    let server = EchoServer::start().await.unwrap();
    let (pool, _reaper) = Pool::new(
        server.addr,
        Config {
            max_lifetime: Duration::from_millis(100),
            ..config(10_000)
        },
    );
    let mut busy = pool.checkout().await.unwrap();
    let idle = pool.checkout().await.unwrap();
    pool.checkin(idle).await;
    assert_eq!(server.wait_accepted(2, Duration::from_secs(5)).await, 2);
    assert_eq!(server.wait_open_at_most(0, Duration::from_secs(5)).await, 0);
    assert!(
        busy.echo(b"x").await.is_err(),
        "a retired socket still works"
    );
    // The socket closes a moment before the reaper counts it.
    assert!(
        eventually(|| pool.counters().reaped_lifetime.load(Ordering::SeqCst) == 2).await,
        "reaped for lifetime: {}",
        pool.counters().reaped_lifetime.load(Ordering::SeqCst)
    );
    // Handing back a retired connection closes it rather than pooling it.
    pool.checkin(busy).await;
    assert_eq!(pool.idle(), 0);
    assert_eq!(pool.counters().closed_on_checkin.load(Ordering::SeqCst), 1);
}

/// A pool with 19 idle connections and one checked out.
async fn nineteen_idle_one_busy() -> (EchoServer, Pool, tokio::task::JoinHandle<()>, pool::Conn) {
    let server = EchoServer::start().await.unwrap();
    let (pool, reaper) = Pool::new(server.addr, config(60_000));
    let mut conns = Vec::new();
    for _ in 0..20 {
        conns.push(pool.checkout().await.unwrap());
    }
    let busy = conns.pop().unwrap();
    for conn in conns {
        pool.checkin(conn).await;
    }
    (server, pool, reaper, busy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_the_pool_down_closes_everything_cleanly() {
    let (server, pool, reaper, busy) = nineteen_idle_one_busy().await;
    assert_eq!(pool.shutdown().await, 19);
    // The reaper's stream ends, so the reaper finishes.
    tokio::time::timeout(Duration::from_secs(5), reaper)
        .await
        .unwrap()
        .unwrap();
    // A connection handed back after shutdown is closed, not kept.
    pool.checkin(busy).await;
    assert_eq!(server.wait_open_at_most(0, Duration::from_secs(5)).await, 0);
    assert_eq!(pool.idle(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_pool_closes_everything_and_ends_the_reaper() {
    let (server, pool, reaper, busy) = nineteen_idle_one_busy().await;
    assert_eq!(server.wait_accepted(20, Duration::from_secs(5)).await, 20);
    drop(pool);
    // Idle ones are closed by the stop, the busy one by its lifetime handle.
    assert_eq!(server.wait_open_at_most(0, Duration::from_secs(5)).await, 0);
    tokio::time::timeout(Duration::from_secs(5), reaper)
        .await
        .unwrap()
        .unwrap();
    drop(busy);
}
