use std::time::{Duration, Instant};
use tokio_timing_wheel::TimingWheel;

fn delays(n: u64) -> Vec<Duration> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Duration::from_millis(1 + x % 60_000)
        })
        .collect()
}

async fn sleeps(delays: &[Duration], kind: u8) {
    let (handle, expired) = TimingWheel::<u64, ()>::new();
    let mut tasks = Vec::with_capacity(delays.len());
    for &delay in delays {
        tasks.push(match kind {
            b'w' => {
                let sleep = handle.sleep(delay);
                tokio::spawn(async move {
                    sleep.await.unwrap();
                })
            }
            b't' => tokio::spawn(tokio::time::sleep(delay)),
            _ => tokio::spawn(async move {
                tokio::task::yield_now().await;
            }),
        });
    }
    for task in tasks {
        task.await.unwrap();
    }
    drop(expired);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let which = args.get(2).cloned().unwrap_or_else(|| "tw".into());
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let d = delays(n);
    for _ in 0..rounds {
        for k in which.bytes() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let s = Instant::now();
            rt.block_on(sleeps(&d, k));
            let e = s.elapsed();
            drop(rt);
            print!("{}={:.1}ms ", k as char, e.as_secs_f64() * 1e3);
        }
        println!();
    }
}
