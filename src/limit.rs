//! The optional bound on pending timers (`Builder::max_pending`).
//!
//! Handles reserve a place before they send a `Set`, so a full wheel is
//! refused at the caller, with the timer handed back, rather than growing
//! memory; the driver gives places back as timers leave the wheel (fired,
//! removed, cancelled, replaced, drained or stopped). The count therefore
//! covers timers in the wheel plus `Set` commands still in the channel.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug)]
pub(crate) struct PendingLimit {
    limit: usize,
    count: AtomicUsize,
}

impl PendingLimit {
    pub(crate) fn new(limit: usize) -> Self {
        PendingLimit {
            limit,
            count: AtomicUsize::new(0),
        }
    }

    /// Takes a place if one is free.
    pub(crate) fn try_reserve(&self) -> bool {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives `n` places back.
    pub(crate) fn release(&self, n: usize) {
        if n > 0 {
            let before = self.count.fetch_sub(n, Ordering::AcqRel);
            debug_assert!(before >= n, "released {n} of {before} places");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_up_to_the_limit_and_gives_back() {
        let limit = PendingLimit::new(2);
        assert!(limit.try_reserve());
        assert!(limit.try_reserve());
        assert!(!limit.try_reserve());
        limit.release(1);
        assert!(limit.try_reserve());
        limit.release(2);
        assert!(limit.try_reserve());
    }
}
