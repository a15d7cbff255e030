//! The optional bound on pending timers (`Builder::max_pending`).
//!
//! A place has one owner at a time. A handle takes one as a [`Place`]
//! before it sends a `Set`, so a full wheel is refused at the caller, with
//! the timer handed back, rather than growing memory; a `Set` that is not
//! sent drops its `Place`, which gives it back. Once sent, the place is the
//! driver's: it holds one per timer in its wheel and gives back, in one
//! step after each change, as many as the wheel shrank by (timers fired,
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
    pub(crate) fn try_reserve(&self) -> Option<Place<'_>> {
        // `then`, not `then_some`: a `Place` made and dropped gives a place back.
        self.try_take().then(|| Place(Some(self)))
    }

    fn try_take(&self) -> bool {
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

/// A place under the limit held by a `Set` on its way to the driver (none
/// when there is no limit). Dropped, it is given back; [`Place::sent`]
/// hands it to the driver instead.
#[derive(Debug)]
pub(crate) struct Place<'a>(Option<&'a PendingLimit>);

impl Place<'_> {
    /// A place for a wheel without a limit: nothing to give back.
    pub(crate) const NONE: Place<'static> = Place(None);

    /// The `Set` reached the channel: the driver owns the place now.
    pub(crate) fn sent(mut self) {
        self.0 = None;
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(limit) = self.0 {
            limit.release(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_up_to_the_limit_and_gives_back() {
        let limit = PendingLimit::new(2);
        limit.try_reserve().unwrap().sent();
        let held = limit.try_reserve().unwrap();
        assert!(limit.try_reserve().is_none());
        // A place dropped unsent goes back.
        drop(held);
        limit.try_reserve().unwrap().sent();
        assert!(limit.try_reserve().is_none());
        // Places sent are given back by their new owner.
        limit.release(2);
        assert!(limit.try_reserve().is_some());
    }
}
