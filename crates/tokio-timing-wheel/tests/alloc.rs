//! No allocation per set, move, cancel or fire once the wheel is warm,
//! proven with a counting global allocator.
//!
//! The allocator counts only allocations made on the thread that enabled
//! counting; the runtime here is current-thread, so that is the test, the
//! driver and the stream consumer, and nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use tokio_timing_wheel::TimingWheel;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed straight to the system allocator; the only
// extra work is bumping a thread-local counter, which does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn count() {
    // `try_with`: the thread-locals may be gone while a thread exits.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
async fn allocations<F: std::future::Future<Output = ()>>(f: F) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    f.await;
    COUNTING.with(|on| on.set(false));
    ALLOCATIONS.with(|n| n.get())
}

const KEYS: u64 = 20_000;

/// One round of the hot paths: set every key, push half of them later,
/// cancel a quarter, and fire and consume the rest.
async fn round(
    wheel: &TimingWheel<u64, u64>,
    expired: &mut tokio_timing_wheel::Expirations<u64, u64>,
) {
    for key in 0..KEYS {
        wheel
            .set_timer(key, key, Duration::from_millis(1 + key % 500))
            .await
            .unwrap();
    }
    for key in (0..KEYS).step_by(2) {
        wheel
            .move_timer(key, Duration::from_millis(600 + key % 500))
            .await
            .unwrap();
    }
    for key in (0..KEYS).step_by(4) {
        wheel.cancel_timer(key).await.unwrap();
    }
    let expected = KEYS - KEYS / 4;
    for _ in 0..expected {
        expired.recv().await.unwrap();
    }
}

#[test]
fn warm_set_move_cancel_and_fire_do_not_allocate() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let (wheel, mut expired) = TimingWheel::builder().command_capacity(256).build();
        // Warm up: the slab, the key index, the queues and the channel's
        // blocks reach their working size.
        for _ in 0..3 {
            round(&wheel, &mut expired).await;
        }
        let n = allocations(round(&wheel, &mut expired)).await;
        let ops = KEYS + KEYS / 2 + KEYS / 4 + (KEYS - KEYS / 4);
        assert_eq!(n, 0, "{n} allocations for {ops} operations once warm");
    });
}
