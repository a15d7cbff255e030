//! The wakers of the sleeps waiting on one tick: one inline, the rest in
//! slots that a free list hands out again, so a tick's burst of sleeps
//! (timeouts of one length made together) reuses the room its earlier
//! sleeps left.

use std::task::Waker;

/// A slot number no waker has; also the end of the free list.
pub(super) const NO_SLOT: u32 = u32::MAX;

/// One of [`Waiters::rest`].
#[derive(Debug)]
enum Slot {
    Taken(Waker),
    /// Free, with the next free slot ([`NO_SLOT`]: none).
    Free(u32),
}

/// The wakers of the sleeps waiting on one tick. Slot 0 is `first`; slot
/// `n + 1` is `rest[n]`.
#[derive(Debug)]
pub(super) struct Waiters {
    /// So a tick of one sleep allocates nothing more.
    first: Option<Waker>,
    rest: Vec<Slot>,
    /// The first free slot of `rest`, [`NO_SLOT`] if none.
    free: u32,
    /// Wakers in `rest`.
    taken: u32,
}

impl Waiters {
    /// `waker`, alone.
    #[inline]
    pub(super) fn new(waker: Waker) -> Self {
        Waiters {
            first: Some(waker),
            rest: Vec::new(),
            free: NO_SLOT,
            taken: 0,
        }
    }

    /// Puts `waker` in a free slot and returns its number, unless the tick
    /// holds as many as a slot number can name (some four billion).
    #[inline]
    pub(super) fn insert(&mut self, waker: Waker) -> Option<u32> {
        if self.first.is_none() {
            self.first = Some(waker);
            return Some(0);
        }
        let at = self.free;
        let at = match self.rest.get_mut(at as usize) {
            Some(slot) => {
                if let Slot::Free(next) = *slot {
                    self.free = next;
                }
                *slot = Slot::Taken(waker);
                at
            }
            None => {
                // Slot `at + 1` must be a number, and not `NO_SLOT`.
                let at = u32::try_from(self.rest.len())
                    .ok()
                    .filter(|&at| at < NO_SLOT - 1)?;
                self.rest.push(Slot::Taken(waker));
                at
            }
        };
        self.taken += 1;
        Some(at + 1)
    }

    /// The waker in `slot`, if one is there.
    #[inline]
    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut Waker> {
        match slot {
            0 => self.first.as_mut(),
            n => match self.rest.get_mut(n as usize - 1) {
                Some(Slot::Taken(waker)) => Some(waker),
                _ => None,
            },
        }
    }

    /// Takes the waker out of `slot`, freeing it, if one is there.
    #[inline]
    pub(super) fn remove(&mut self, slot: u32) -> Option<Waker> {
        if slot == 0 {
            return self.first.take();
        }
        let at = slot - 1;
        let here = self.rest.get_mut(at as usize)?;
        match std::mem::replace(here, Slot::Free(self.free)) {
            Slot::Taken(waker) => {
                self.free = at;
                self.taken -= 1;
                Some(waker)
            }
            free => {
                *here = free;
                None
            }
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.taken as usize
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none() && self.taken == 0
    }

    /// Moves every waker to `into`.
    pub(super) fn take_all(&mut self, into: &mut Vec<Waker>) {
        into.extend(self.first.take());
        into.extend(self.rest.drain(..).filter_map(|slot| match slot {
            Slot::Taken(waker) => Some(waker),
            Slot::Free(_) => None,
        }));
        (self.free, self.taken) = (NO_SLOT, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slot 0 is the inline one; the rest number `rest` one up; a slot
    /// freed is reused, the last freed first, and the others keep theirs.
    #[test]
    fn waiters_hand_out_and_take_back_slots() {
        let waker = futures::task::noop_waker();
        let mut waiters = Waiters::new(waker.clone());
        let slots: Vec<u32> = (0..3)
            .filter_map(|_| waiters.insert(waker.clone()))
            .collect();
        assert_eq!(slots, [1, 2, 3]);
        assert!(waiters.remove(0).is_some());
        assert!(waiters.remove(0).is_none(), "a slot is freed once");
        assert!(waiters.remove(2).is_some());
        assert!(waiters.remove(2).is_none(), "a slot is freed once");
        assert!(waiters.remove(1).is_some());
        assert!(waiters.remove(9).is_none(), "no such slot");
        assert_eq!(waiters.len(), 1);
        assert_eq!(waiters.insert(waker.clone()), Some(0));
        assert_eq!(waiters.insert(waker.clone()), Some(1));
        assert_eq!(waiters.insert(waker.clone()), Some(2));
        assert_eq!(waiters.insert(waker.clone()), Some(4));
        assert!(waiters.get_mut(3).is_some() && waiters.get_mut(5).is_none());
        assert_eq!(waiters.len(), 5);
        let mut taken = Vec::new();
        waiters.take_all(&mut taken);
        assert_eq!((taken.len(), waiters.len()), (5, 0));
        assert!(waiters.is_empty());
        assert_eq!(waiters.insert(waker.clone()), Some(0));
        assert_eq!(waiters.insert(waker), Some(1));
    }
}
