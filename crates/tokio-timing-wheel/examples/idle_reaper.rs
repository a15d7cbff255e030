//! A connection pool whose idle reaper is a timing wheel, against a real TCP
//! echo server on 127.0.0.1 in the same process.
//!
//! Every idle connection is the value of its own idle timer: `checkin` arms
//! it, `checkout` takes the connection back with `remove_timer`, and the
//! reaper closes what the expiration stream hands it, each at its own
//! deadline, waking only then (pools that scan on a fixed period keep idle
//! connections up to a period too long). A max-lifetime timer retires
//! connections even while busy, and `min_idle` keeps a few warm by vetoing
//! reaps from the stream.
//!
//! A burst of client work with a live progress line, then an idle phase, then
//! a summary. It ends by itself in about 12 seconds.
//!
//! ```text
//! cargo run --release --example idle_reaper
//! ```

#[path = "../tests/support/pool.rs"]
mod pool;

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use pool::{Config, EchoServer, Pool};
use tokio::time::Instant;

const CLIENTS: u64 = 48;
const BURST: Duration = Duration::from_secs(6);
const IDLE_PHASE: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let server = EchoServer::start().await?;
    let config = Config {
        idle_timeout: Duration::from_millis(800),
        max_lifetime: Duration::from_secs(4),
        min_idle: 4,
        tick: Duration::from_millis(1),
    };
    println!(
        "echo server on {}; idle timeout {:?}, max lifetime {:?}, min idle {}",
        server.addr, config.idle_timeout, config.max_lifetime, config.min_idle
    );
    let (pool, reaper) = Pool::new(server.addr, config);
    let start = Instant::now();

    // Clients come and go in waves, so the pool grows and then has idle
    // connections to reap.
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let pool = pool.clone();
        clients.push(tokio::spawn(async move {
            let mut requests = 0u64;
            let mut rng = client.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            while start.elapsed() < BURST {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                // Active for the first half of each 2-second wave, with a
                // share of clients that shrinks as the wave goes on.
                let phase = start.elapsed().as_millis() as u64 % 2_000;
                if phase > 1_000 || client * 1_000 / CLIENTS > 1_000 - phase {
                    tokio::time::sleep(Duration::from_millis(20 + rng % 30)).await;
                    continue;
                }
                let mut conn = pool.checkout().await.expect("checkout");
                if conn.echo(&requests.to_be_bytes()).await.is_ok() {
                    requests += 1;
                }
                tokio::time::sleep(Duration::from_millis(rng % 5)).await;
                pool.checkin(conn).await;
                tokio::time::sleep(Duration::from_millis(rng % 20)).await;
            }
            requests
        }));
    }

    // A live line on a terminal; piped, one plain line a second.
    let live = std::io::stdout().is_terminal();
    let mut last_line = None::<Instant>;
    let mut progress = |label: &str| {
        if !live {
            if last_line.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                return;
            }
            last_line = Some(Instant::now());
        }
        let c = pool.counters();
        let (start_of_line, end_of_line) = if live { ("\r", "   ") } else { ("", "\n") };
        print!(
            "{start_of_line}{label} {:>5.1}s  dialled {:>4}  reused {:>6}  idle {:>3}  open {:>3}  reaped idle {:>4}  lifetime {:>3}{end_of_line}",
            start.elapsed().as_secs_f64(),
            c.dialled.load(Ordering::Relaxed),
            c.reused.load(Ordering::Relaxed),
            pool.idle(),
            server.open(),
            c.reaped_idle.load(Ordering::Relaxed),
            c.reaped_lifetime.load(Ordering::Relaxed),
        );
        let _ = std::io::stdout().flush();
    };
    while start.elapsed() < BURST {
        progress("burst");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut requests = 0;
    for client in clients {
        requests += client.await.expect("client panicked");
    }
    if live {
        println!();
    }
    let idle_start = Instant::now();
    while idle_start.elapsed() < IDLE_PHASE {
        progress("idle ");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if live {
        println!();
    }

    let c = pool.counters();
    let mut lateness = c.lateness.lock().unwrap().clone();
    lateness.sort_unstable();
    let warm = pool.idle();
    let closed_at_shutdown = pool.shutdown().await;
    reaper.await.expect("reaper panicked");
    println!("summary after {:.1}s", start.elapsed().as_secs_f64());
    println!("  requests served        {requests}");
    println!(
        "  connections dialled    {}",
        c.dialled.load(Ordering::Relaxed)
    );
    println!(
        "  connections reused     {}",
        c.reused.load(Ordering::Relaxed)
    );
    println!(
        "  reaped for idleness    {}",
        c.reaped_idle.load(Ordering::Relaxed)
    );
    println!(
        "  reaped for lifetime    {}",
        c.reaped_lifetime.load(Ordering::Relaxed)
    );
    println!(
        "  closed on checkin      {}",
        c.closed_on_checkin.load(Ordering::Relaxed)
    );
    println!(
        "  reaps vetoed (min_idle) {}",
        c.kept_warm.load(Ordering::Relaxed)
    );
    println!(
        "  dialled to stay warm   {}",
        c.replenished.load(Ordering::Relaxed)
    );
    println!("  warm at the end        {warm} (closed at shutdown: {closed_at_shutdown})");
    println!(
        "  reap lateness          p50 {:?}  p99 {:?}  max {:?}  ({} reaps)",
        pool::percentile(&lateness, 0.50),
        pool::percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or_default(),
        lateness.len()
    );
    Ok(())
}
