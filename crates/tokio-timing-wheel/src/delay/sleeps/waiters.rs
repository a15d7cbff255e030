//! The wakers of the sleeps waiting on one tick: one inline (most ticks
//! have one), more in slots that a free list hands out again, so a tick's
//! burst of sleeps (timeouts of one length made together) reuses the room
//! its earlier sleeps left.

use std::task::Waker;

/// A slot number no waker has; also the end of the free list.
pub(super) const NO_SLOT: u32 = u32::MAX;

/// One of [`Many::slots`].
#[derive(Debug)]
enum Slot {
    Taken(Waker),
    /// Free, with the next free slot ([`NO_SLOT`]: none).
    Free(u32),
}

/// The wakers of the sleeps waiting on one tick, in the tick's entry of
/// the wheel. Most ticks have one sleep (scattered deadlines each get an
/// entry of their own): that one is kept inline, and the entry stays two
/// words, so a wheel entry is 32 bytes. A second sleep on the tick (a
/// burst of timeouts of one length) moves them to [`Many`], allocated once
/// for the entry's life.
#[derive(Debug)]
pub(super) enum Waiters {
    /// One waker, in slot 0.
    One(Waker),
    Many(Box<Many>),
}

/// More than one waker, or what is left of them: slot `n` is `slots[n]`.
#[derive(Debug)]
pub(super) struct Many {
    slots: Vec<Slot>,
    /// The first free slot, [`NO_SLOT`] if none.
    free: u32,
    /// Wakers in `slots`.
    taken: u32,
}

impl Waiters {
    /// `waker`, alone, in slot 0.
    #[inline]
    pub(super) fn new(waker: Waker) -> Self {
        Waiters::One(waker)
    }

    /// Puts `waker` in a free slot and returns its number, unless the tick
    /// holds as many as a slot number can name (some four billion).
    #[inline]
    pub(super) fn insert(&mut self, waker: Waker) -> Option<u32> {
        match self {
            Waiters::Many(many) => many.insert(waker),
            Waiters::One(_) => {
                self.second(waker);
                Some(1)
            }
        }
    }

    /// Makes one waker two: the first keeps slot 0, `waker` takes slot 1.
    #[cold]
    fn second(&mut self, waker: Waker) {
        if let Waiters::One(first) = self {
            let first = std::mem::replace(first, Waker::noop().clone());
            *self = Waiters::Many(Box::new(Many {
                slots: vec![Slot::Taken(first), Slot::Taken(waker)],
                free: NO_SLOT,
                taken: 2,
            }));
        }
    }

    /// The waker in `slot`, if one is there.
    #[inline]
    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut Waker> {
        match self {
            Waiters::One(waker) => (slot == 0).then_some(waker),
            Waiters::Many(many) => many.get_mut(slot),
        }
    }

    /// Takes the waker out of `slot`, freeing it, if one is there, and says
    /// whether any is left: when none is, the caller takes the whole entry
    /// away (with the waker of a tick of one sleep, which stays inline).
    #[inline]
    pub(super) fn remove(&mut self, slot: u32) -> Left {
        match self {
            Waiters::One(_) if slot == 0 => Left::None(None),
            Waiters::One(_) => Left::Others(None),
            Waiters::Many(many) => {
                let waker = many.remove(slot);
                if many.len() == 0 {
                    Left::None(waker)
                } else {
                    Left::Others(waker)
                }
            }
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        match self {
            Waiters::One(_) => 1,
            Waiters::Many(many) => many.len(),
        }
    }

    /// Moves every waker to `into`.
    pub(super) fn take_all(self, into: &mut Vec<Waker>) {
        match self {
            Waiters::One(waker) => into.push(waker),
            Waiters::Many(many) => {
                into.extend(many.slots.into_iter().filter_map(|slot| match slot {
                    Slot::Taken(waker) => Some(waker),
                    Slot::Free(_) => None,
                }));
            }
        }
    }
}

/// What [`Waiters::remove`] left, with the waker it took out, if any.
#[derive(Debug)]
pub(super) enum Left {
    /// No waker: the entry goes.
    None(Option<Waker>),
    /// Others wait still.
    Others(Option<Waker>),
}

impl Many {
    #[inline]
    fn insert(&mut self, waker: Waker) -> Option<u32> {
        let at = self.free;
        let at = match self.slots.get_mut(at as usize) {
            Some(slot) => {
                if let Slot::Free(next) = *slot {
                    self.free = next;
                }
                *slot = Slot::Taken(waker);
                at
            }
            None => {
                // A slot number, and not `NO_SLOT`.
                let at = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|&at| at < NO_SLOT)?;
                self.slots.push(Slot::Taken(waker));
                at
            }
        };
        self.taken += 1;
        Some(at)
    }

    #[inline]
    fn get_mut(&mut self, slot: u32) -> Option<&mut Waker> {
        match self.slots.get_mut(slot as usize) {
            Some(Slot::Taken(waker)) => Some(waker),
            _ => None,
        }
    }

    #[inline]
    fn remove(&mut self, slot: u32) -> Option<Waker> {
        let here = self.slots.get_mut(slot as usize)?;
        match std::mem::replace(here, Slot::Free(self.free)) {
            Slot::Taken(waker) => {
                self.free = slot;
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
    fn len(&self) -> usize {
        self.taken as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(left: Left) -> bool {
        matches!(left, Left::Others(Some(_)))
    }

    /// A tick of one sleep keeps it inline, in an entry of 32 bytes.
    #[test]
    fn one_waker_is_two_words() {
        assert_eq!(std::mem::size_of::<Waiters>(), 16);
        assert_eq!(crate::wheel::entry_size::<(), Waiters>(), 32);
        let mut one = Waiters::new(Waker::noop().clone());
        assert!(one.get_mut(0).is_some() && one.get_mut(1).is_none());
        assert!(matches!(one.remove(1), Left::Others(None)), "no such slot");
        assert!(matches!(one.remove(0), Left::None(None)));
        assert_eq!(one.len(), 1, "the last waker is left for the caller");
    }

    /// Slot 0 is the first; the others follow in order; a slot freed is
    /// reused, the last freed first, and the others keep theirs. Taking
    /// the last one out says none is left.
    #[test]
    fn waiters_hand_out_and_take_back_slots() {
        let waker = Waker::noop().clone();
        let mut waiters = Waiters::new(waker.clone());
        let slots: Vec<u32> = (0..3)
            .filter_map(|_| waiters.insert(waker.clone()))
            .collect();
        assert_eq!(slots, [1, 2, 3]);
        assert!(taken(waiters.remove(0)));
        assert!(!taken(waiters.remove(0)), "a slot is freed once");
        assert!(taken(waiters.remove(2)));
        assert!(!taken(waiters.remove(2)), "a slot is freed once");
        assert!(!taken(waiters.remove(9)), "no such slot");
        assert_eq!(waiters.len(), 2);
        assert!(taken(waiters.remove(1)));
        assert!(matches!(waiters.remove(1), Left::Others(None)));
        assert!(matches!(waiters.remove(3), Left::None(Some(_))));
        assert_eq!(waiters.len(), 0);
        // The free list, the last freed first (3, 1, 2, 0), then a new slot.
        assert_eq!(waiters.insert(waker.clone()), Some(3));
        assert_eq!(waiters.insert(waker.clone()), Some(1));
        assert_eq!(waiters.insert(waker.clone()), Some(2));
        assert_eq!(waiters.insert(waker.clone()), Some(0));
        assert_eq!(waiters.insert(waker.clone()), Some(4));
        assert!(waiters.get_mut(4).is_some() && waiters.get_mut(5).is_none());
        assert_eq!(waiters.len(), 5);
        let mut all = Vec::new();
        waiters.take_all(&mut all);
        assert_eq!(all.len(), 5);
        let mut all = Vec::new();
        Waiters::new(waker).take_all(&mut all);
        assert_eq!(all.len(), 1);
    }
}
