use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio_timing_wheel::TimingWheel;
struct Request(bool);
impl Future for Request {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}
const T: Duration = Duration::from_secs(10);
async fn requests(kind: u8) {
    let (wheel, expired) = TimingWheel::<u64, ()>::new();
    let make = |_: usize| -> Pin<Box<dyn Future<Output = ()>>> {
        match kind {
            b'n' => Box::pin(Request(false)),
            b't' => Box::pin(async {
                tokio::time::timeout(T, Request(false)).await.unwrap();
            }),
            _ => {
                let t = wheel.timeout(T, Request(false));
                Box::pin(async {
                    t.await.unwrap();
                })
            }
        }
    };
    let mut f = FuturesUnordered::new();
    let mut issued = 0;
    while issued < 1000 {
        f.push(make(issued));
        issued += 1;
    }
    while f.next().await.is_some() {
        if issued < 1_000_000 {
            f.push(make(issued));
            issued += 1;
        }
    }
    drop(expired);
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let which = args.get(2).cloned().unwrap_or_else(|| "ntw".into());
    for _ in 0..rounds {
        for k in which.bytes() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            let s = Instant::now();
            rt.block_on(requests(k));
            let e = s.elapsed();
            drop(rt);
            print!("{}={:.1}ms ", k as char, e.as_secs_f64() * 1e3);
        }
        println!();
    }
}
