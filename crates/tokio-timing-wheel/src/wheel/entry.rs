//! Timer entries: one pending timer each, recording where it is filed
//! (its [`Place`]) and its position there. The slots that hold them are in
//! [`super::slot`].

/// An index no entry and no block has; in a block, a hole.
pub(crate) const NIL: u32 = u32::MAX;

/// Which slot an entry is filed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// The due queue: its deadline has been reached.
    Due,
    /// A slot of a level.
    Slot { level: u8, slot: u8 },
}

/// One pending timer.
#[derive(Debug)]
pub(crate) struct Entry<K, V> {
    pub(crate) key: K,
    pub(crate) value: V,
    /// Absolute deadline in ticks, already rounded up.
    pub(crate) when: u64,
    /// Where the entry is filed. After a lazy move this is a slot that comes
    /// due before `when`; the entry is filed again from `when` then.
    pub(crate) place: Place,
    /// Its position there: block, then offset in the block.
    pub(crate) pos: u32,
    /// Where in its tick the deadline falls, in 256ths rounded up
    /// (`crate::clock::WHOLE` for the whole tick): an entry of the next
    /// tick may fire once this much of the tick has passed
    /// ([`Wheel::fire_early`](super::Wheel::fire_early)).
    pub(crate) frac: u8,
}

impl<K, V> Entry<K, V> {
    /// An entry filed nowhere yet.
    #[cfg(test)]
    pub(crate) fn new(key: K, value: V, when: u64) -> Self {
        Entry {
            key,
            value,
            when,
            place: Place::Due,
            pos: NIL,
            frac: crate::clock::WHOLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_of_two_words_is_four_words() {
        // key + value + deadline + position, with the place and the place in
        // the tick in the padding.
        assert_eq!(std::mem::size_of::<Entry<u64, u64>>(), 32);
    }
}
