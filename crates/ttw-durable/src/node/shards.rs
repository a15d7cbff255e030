//! One node's view of its shards: which leases it believes it holds, how
//! many deliveries each shard has in flight, and which shards are being
//! given back.
//!
//! A shard must not be given back while a claim in it is under way: the
//! claim would take a task under the old lease epoch, the shard's new owner
//! would find the task locked, reclaim it when the lock runs out and run it
//! again while the fenced first delivery could not record its outcome. So a
//! claim registers in its shard *before* it reaches the database
//! ([`ShardTable::enter`]) and a release marks the shard *before* it looks
//! for deliveries in flight ([`ShardTable::begin_release`]). Both write
//! first and read the other's word second, with sequentially consistent
//! ordering, so at least one of them sees the other and backs off.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};

/// Per-shard flags and counts, indexed by shard number.
pub(crate) struct ShardTable {
    owned: Vec<AtomicBool>,
    in_flight: Vec<AtomicU32>,
    releasing: Vec<AtomicBool>,
}

impl ShardTable {
    /// A table of `shards` shards, none held.
    pub(crate) fn new(shards: u32) -> Self {
        Self {
            owned: (0..shards).map(|_| AtomicBool::new(false)).collect(),
            in_flight: (0..shards).map(|_| AtomicU32::new(0)).collect(),
            releasing: (0..shards).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Whether this node believes it holds `shard` (the database decides).
    pub(crate) fn owns(&self, shard: usize) -> bool {
        self.owned[shard].load(SeqCst)
    }

    /// Registers one delivery about to be claimed in `shard`. Returns false,
    /// registering nothing, if the shard is not held or is being given back.
    /// A true return must be matched by one [`exit`](Self::exit).
    pub(crate) fn enter(&self, shard: usize) -> bool {
        if !self.owns(shard) {
            return false;
        }
        self.in_flight[shard].fetch_add(1, SeqCst);
        if self.releasing[shard].load(SeqCst) || !self.owns(shard) {
            let _ = self.exit(shard);
            return false;
        }
        true
    }

    /// Ends one delivery registered by [`enter`](Self::enter): its claim
    /// took nothing, or its outcome is recorded. Returns true if that left
    /// a shard marked for giving back with nothing in flight: a heartbeat
    /// now can give it back without waiting for the next one.
    pub(crate) fn exit(&self, shard: usize) -> bool {
        self.in_flight[shard].fetch_sub(1, SeqCst) == 1 && self.releasing[shard].load(SeqCst)
    }

    /// Marks `shard` as being given back unless a delivery is in flight in
    /// it. Returns whether it was marked; while it is, every
    /// [`enter`](Self::enter) for it fails, until
    /// [`end_releases`](Self::end_releases). A shard refused here keeps the
    /// mark it had (a shard [draining](Self::drain) stays draining).
    pub(crate) fn begin_release(&self, shard: usize) -> bool {
        let was = self.releasing[shard].swap(true, SeqCst);
        if self.in_flight[shard].load(SeqCst) > 0 {
            self.releasing[shard].store(was, SeqCst);
            return false;
        }
        true
    }

    /// Marks a busy `shard` as draining: no new claim starts in it, so its
    /// deliveries in flight end and a later heartbeat can give it back.
    /// Without this a shard that always has something in flight (steady
    /// load) would never be given back to a node that joined.
    pub(crate) fn drain(&self, shard: usize) {
        self.releasing[shard].store(true, SeqCst);
    }

    /// Records the shards held after a heartbeat; returns how many this
    /// node believed it held and no longer does.
    pub(crate) fn set_owned(&self, owned: &[u32]) -> usize {
        let mut lost = 0;
        for (shard, flag) in self.owned.iter().enumerate() {
            let now = owned.contains(&(shard as u32));
            if flag.swap(now, SeqCst) && !now {
                lost += 1;
            }
        }
        lost
    }

    /// Clears every release mark but those of the shards in `draining`.
    /// Called after a heartbeat has recorded which shards it gave back and
    /// which it is still draining, or failed (with nothing to keep).
    pub(crate) fn end_releases(&self, draining: &[u32]) {
        for (shard, flag) in self.releasing.iter().enumerate() {
            if !draining.contains(&(shard as u32)) {
                flag.store(false, SeqCst);
            }
        }
    }

    /// Whether `shard` has deliveries in flight.
    #[cfg(test)]
    pub(crate) fn busy(&self, shard: usize) -> bool {
        self.in_flight[shard].load(SeqCst) > 0
    }

    /// How many shards this node believes it holds.
    pub(crate) fn owned_count(&self) -> u32 {
        self.owned.iter().filter(|o| o.load(SeqCst)).count() as u32
    }

    /// Deliveries in flight across all shards.
    pub(crate) fn in_flight_total(&self) -> u64 {
        self.in_flight
            .iter()
            .map(|n| u64::from(n.load(SeqCst)))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    #[test]
    fn a_shard_with_a_claim_under_way_is_not_given_back() {
        let table = ShardTable::new(4);
        table.set_owned(&[1, 2]);
        assert!(table.enter(1));
        assert!(!table.begin_release(1), "a claim is under way in shard 1");
        assert!(table.begin_release(2));
        let _ = table.exit(1);
        assert!(table.begin_release(1));
    }

    #[test]
    fn no_claim_starts_in_a_shard_being_given_back() {
        let table = ShardTable::new(4);
        table.set_owned(&[1]);
        assert!(table.begin_release(1));
        assert!(!table.enter(1));
        assert!(!table.busy(1), "a refused claim leaves nothing registered");
        // The release went through: the shard is gone.
        assert_eq!(table.set_owned(&[]), 1);
        table.end_releases(&[]);
        assert!(!table.enter(1));
        // A failed release leaves the shard held and claimable again.
        table.set_owned(&[1]);
        assert!(table.begin_release(1));
        table.end_releases(&[]);
        assert!(table.enter(1));
        assert_eq!(table.in_flight_total(), 1);
    }

    #[test]
    fn a_draining_shard_takes_no_new_claims_and_is_given_back_once_idle() {
        let table = ShardTable::new(2);
        table.set_owned(&[0, 1]);
        assert!(table.enter(0));
        assert!(!table.begin_release(0));
        table.drain(0);
        table.end_releases(&[0]);
        assert!(!table.enter(0), "no new claim in a draining shard");
        assert!(table.enter(1));
        // Still busy: refused, and still draining.
        assert!(!table.begin_release(0));
        assert!(!table.enter(0));
        assert!(
            table.exit(0),
            "the last delivery of a draining shard says so"
        );
        assert!(table.begin_release(0), "idle now: given back");
        // A drain that is called off lets claims in again.
        table.end_releases(&[]);
        assert!(table.enter(0));
    }

    #[test]
    fn shards_not_held_take_no_claims() {
        let table = ShardTable::new(2);
        assert!(!table.enter(0));
        assert_eq!(table.owned_count(), 0);
        table.set_owned(&[0, 1]);
        assert_eq!(table.owned_count(), 2);
        assert_eq!(table.set_owned(&[1]), 1);
        assert!(!table.enter(0));
        assert!(table.enter(1));
    }

    /// Regression: a surplus shard was given back if it had nothing in
    /// flight *when the heartbeat looked*, while a claim that had checked
    /// ownership earlier was still on its way to the database. The claim
    /// took a task under the old epoch, the new owner reclaimed it after its
    /// lock ran out, and the task ran twice. Here a claimer and a releaser
    /// race on threads many times over: never may both proceed at once.
    #[test]
    fn a_claim_and_a_release_never_both_proceed() {
        const ROUNDS: usize = 5_000;
        let table = Arc::new(ShardTable::new(1));
        let barrier = Arc::new(Barrier::new(2));
        let claimer = {
            let (table, barrier) = (table.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut entered = Vec::with_capacity(ROUNDS);
                for _ in 0..ROUNDS {
                    barrier.wait();
                    entered.push(table.enter(0));
                    barrier.wait();
                    barrier.wait();
                }
                entered
            })
        };
        let mut released = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            table.set_owned(&[0]);
            barrier.wait();
            released.push(table.begin_release(0));
            barrier.wait();
            // Both sides are done with this round: reset it.
            if table.busy(0) {
                let _ = table.exit(0);
            }
            table.end_releases(&[]);
            barrier.wait();
        }
        let entered = claimer.join().unwrap();
        let both = entered.iter().zip(&released).filter(|(e, r)| **e && **r);
        assert_eq!(both.count(), 0);
        // The race was real: each side won some rounds.
        assert!(entered.iter().any(|&e| e));
        assert!(released.iter().any(|&r| r));
    }
}
