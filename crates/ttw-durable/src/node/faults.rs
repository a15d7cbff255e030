//! Faults a test can inject into a running scheduler, with the cargo
//! feature `test-faults` (for this crate's own tests; not part of its
//! API). Without the feature nothing here can be switched on and every
//! check is a constant `false`.
//!
//! Each stands for a fault that cannot be produced for real in a test
//! precisely enough: a heartbeat that stops while the node's wheel keeps
//! firing (a long pause or a partition seen from one side), and one failed
//! window load, look at unclaimed tasks, claim or outcome write (a
//! database error at that statement and no other, as a full disk or a
//! lost connection gives).

#[cfg(feature = "test-faults")]
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The faults switched on for one node.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    #[cfg(feature = "test-faults")]
    heartbeat_paused: AtomicBool,
    #[cfg(feature = "test-faults")]
    failing_loads: AtomicU64,
    #[cfg(feature = "test-faults")]
    failing_explains: AtomicU64,
    #[cfg(feature = "test-faults")]
    failing_claims: AtomicU64,
    #[cfg(feature = "test-faults")]
    failing_outcomes: AtomicU64,
}

impl Faults {
    /// Whether heartbeats are to be skipped.
    pub(crate) fn heartbeat_paused(&self) -> bool {
        #[cfg(feature = "test-faults")]
        {
            self.heartbeat_paused.load(Ordering::SeqCst)
        }
        #[cfg(not(feature = "test-faults"))]
        false
    }

    /// Whether this window load is to fail (using up one of those asked).
    pub(crate) fn fail_load(&self) -> bool {
        #[cfg(feature = "test-faults")]
        {
            take_one(&self.failing_loads)
        }
        #[cfg(not(feature = "test-faults"))]
        false
    }

    /// Whether this look at unclaimed tasks is to fail (using up one of
    /// those asked).
    pub(crate) fn fail_explain(&self) -> bool {
        #[cfg(feature = "test-faults")]
        {
            take_one(&self.failing_explains)
        }
        #[cfg(not(feature = "test-faults"))]
        false
    }

    /// Whether this claim is to fail (using up one of those asked).
    pub(crate) fn fail_claim(&self) -> bool {
        #[cfg(feature = "test-faults")]
        {
            take_one(&self.failing_claims)
        }
        #[cfg(not(feature = "test-faults"))]
        false
    }

    /// Whether this outcome statement (a batch of successes, one success,
    /// or a failed attempt) is to fail (using up one of those asked).
    pub(crate) fn fail_outcome(&self) -> bool {
        #[cfg(feature = "test-faults")]
        {
            take_one(&self.failing_outcomes)
        }
        #[cfg(not(feature = "test-faults"))]
        false
    }

    /// Stops (`true`) or resumes heartbeats.
    #[cfg(feature = "test-faults")]
    pub(crate) fn pause_heartbeat(&self, paused: bool) {
        self.heartbeat_paused.store(paused, Ordering::SeqCst);
    }

    /// Makes the next `n` window loads fail.
    #[cfg(feature = "test-faults")]
    pub(crate) fn fail_loads(&self, n: u64) {
        self.failing_loads.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` looks at unclaimed tasks fail.
    #[cfg(feature = "test-faults")]
    pub(crate) fn fail_explains(&self, n: u64) {
        self.failing_explains.store(n, Ordering::SeqCst);
    }
}

impl Faults {
    /// Makes the next `n` claims fail.
    #[cfg(feature = "test-faults")]
    pub(crate) fn fail_claims(&self, n: u64) {
        self.failing_claims.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` outcome statements fail.
    #[cfg(feature = "test-faults")]
    pub(crate) fn fail_outcomes(&self, n: u64) {
        self.failing_outcomes.store(n, Ordering::SeqCst);
    }

    /// How many of the claim and outcome failures asked are still to come.
    #[cfg(feature = "test-faults")]
    pub(crate) fn left(&self) -> (u64, u64) {
        (
            self.failing_claims.load(Ordering::SeqCst),
            self.failing_outcomes.load(Ordering::SeqCst),
        )
    }
}

#[cfg(feature = "test-faults")]
fn take_one(count: &AtomicU64) -> bool {
    count
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}
