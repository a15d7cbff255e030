use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
struct A;
static SZ: AtomicUsize = AtomicUsize::new(0);
unsafe impl GlobalAlloc for A {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.align() >= 64 {
            SZ.store(l.size() * 1000 + l.align(), Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
}
#[global_allocator]
static G: A = A;
use tokio_timing_wheel::TimingWheel;
fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let (h, _e) = TimingWheel::<u64, ()>::new();
        tokio::task::yield_now().await;
        let s = h.sleep(std::time::Duration::from_millis(5));
        let j = tokio::spawn(async move {
            s.await.unwrap();
        });
        println!("wheel cell {}", SZ.load(Ordering::Relaxed));
        let k = tokio::spawn(tokio::time::sleep(std::time::Duration::from_millis(5)));
        println!("tokio cell {}", SZ.load(Ordering::Relaxed));
        j.await.unwrap();
        k.await.unwrap();
    });
}
