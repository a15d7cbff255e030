//! One level of the hierarchical wheel: 64 slots, an occupancy bitmap, and
//! the pure arithmetic that says which level and slot a deadline belongs to.
//!
//! Level `n` has 64 slots of `64^n` ticks each, so it spans `64^(n + 1)`
//! ticks. Eleven levels cover every `u64` tick (`6 * 11 = 66 >= 64` bits), so
//! no deadline ever needs an overflow list and nothing wraps around.

use std::fmt;

use super::slot::{Blocks, Slot};

/// Slots per level, as a power of two.
pub(crate) const SLOT_BITS: u32 = 6;

/// Slots per level.
pub(crate) const SLOTS: usize = 1 << SLOT_BITS;

/// Levels needed so that every `u64` tick has a place.
pub(crate) const NUM_LEVELS: usize = 64_usize.div_ceil(SLOT_BITS as usize);

/// The level a deadline `when` is filed at, seen from `elapsed`.
///
/// It is the 6-bit group holding the highest bit in which the two differ:
/// above that group they agree, so `when` lies in the level's current
/// revolution, in a slot strictly after the one `elapsed` is in.
pub(crate) fn level_for(elapsed: u64, when: u64) -> usize {
    debug_assert!(when > elapsed, "when={when} elapsed={elapsed}");
    let significant = 63 - (elapsed ^ when).leading_zeros();
    (significant / SLOT_BITS) as usize
}

/// The slot of `when` at `level`.
pub(crate) fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (level as u32 * SLOT_BITS)) as usize) & (SLOTS - 1)
}

/// Ticks covered by one slot of `level`.
fn slot_range(level: usize) -> u64 {
    1 << (level as u32 * SLOT_BITS)
}

/// The first tick of the revolution of `level` that `elapsed` is in.
fn revolution_start(elapsed: u64, level: usize) -> u64 {
    let bits = (level as u32 + 1) * SLOT_BITS;
    if bits >= 64 {
        0
    } else {
        elapsed & !((1u64 << bits) - 1)
    }
}

/// The first tick of `slot` of `level`, in the revolution `elapsed` is in:
/// when that slot comes due.
pub(crate) fn slot_start(elapsed: u64, level: usize, slot: usize) -> u64 {
    revolution_start(elapsed, level) + slot as u64 * slot_range(level)
}

/// A level's slots and which of them hold entries.
pub(crate) struct Level {
    level: usize,
    /// Bit `i` is set when `slots[i]` is not empty.
    occupied: u64,
    /// Bit `i` is set when `slots[i]` may hold an entry whose deadline was
    /// pushed later than the slot while it waited there (a lazy move).
    moved: u64,
    slots: [Slot; SLOTS],
}

impl Level {
    pub(crate) fn new(level: usize) -> Self {
        Level {
            level,
            occupied: 0,
            moved: 0,
            slots: [Slot::EMPTY; SLOTS],
        }
    }

    /// The first tick of the next occupied slot after the one `elapsed` is
    /// in, and that slot, if any slot of this level is occupied.
    pub(crate) fn next_occupied(&self, elapsed: u64) -> Option<(u64, usize)> {
        if self.occupied == 0 {
            return None;
        }
        let now_slot = slot_for(elapsed, self.level);
        // Every entry here is in the current revolution and strictly after
        // `now_slot` (see `level_for`), so the lowest set bit above it is the
        // next one. Shift in two steps: `now_slot + 1` may be 64.
        let ahead = (self.occupied >> now_slot) >> 1;
        debug_assert!(
            self.occupied & (u64::MAX >> (63 - now_slot)) == 0,
            "occupied slot at or behind elapsed: level={} occupied={:#x} now_slot={now_slot}",
            self.level,
            self.occupied,
        );
        if ahead == 0 {
            return None;
        }
        let slot = now_slot + 1 + ahead.trailing_zeros() as usize;
        Some((slot_start(elapsed, self.level, slot), slot))
    }

    /// Slot `slot`, to read.
    pub(crate) fn slot(&self, slot: usize) -> &Slot {
        &self.slots[slot]
    }

    /// The occupied and moved bitmaps.
    #[cfg(test)]
    pub(crate) fn bits(&self) -> (u64, u64) {
        (self.occupied, self.moved)
    }

    pub(crate) fn slot_mut(&mut self, slot: usize) -> &mut Slot {
        &mut self.slots[slot]
    }

    /// Records that `slot` holds entries.
    pub(crate) fn mark_occupied(&mut self, slot: usize) {
        self.occupied |= 1 << slot;
    }

    /// Records whether `slot` holds entries after it changed.
    pub(crate) fn mark(&mut self, slot: usize) {
        if self.slots[slot].is_empty() {
            // An empty slot holds no moved entry either.
            self.occupied &= !(1 << slot);
            self.moved &= !(1 << slot);
        } else {
            self.occupied |= 1 << slot;
        }
    }

    /// Records that an entry of `slot` now has a deadline past the slot.
    pub(crate) fn mark_moved(&mut self, slot: usize) {
        self.moved |= 1 << slot;
    }

    /// Takes the chain of `slot`, holes included, leaving the slot empty,
    /// and whether any of its entries was moved later while it waited.
    pub(crate) fn take_slot(&mut self, slot: usize) -> (Slot, bool) {
        let moved = self.moved & 1 << slot != 0;
        self.occupied &= !(1 << slot);
        self.moved &= !(1 << slot);
        (self.slots[slot].take(), moved)
    }

    /// Blocks held by every slot.
    #[cfg(test)]
    pub(crate) fn blocks(&self, blocks: &Blocks) -> usize {
        self.slots.iter().map(|slot| slot.blocks(blocks)).sum()
    }

    /// Empties every slot, returning their blocks to the pool.
    pub(crate) fn clear(&mut self, blocks: &mut Blocks) {
        self.occupied = 0;
        self.moved = 0;
        for slot in self.slots.iter_mut() {
            slot.clear(blocks);
        }
    }
}

impl fmt::Debug for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Level")
            .field("level", &self.level)
            .field("occupied", &format_args!("{:#018x}", self.occupied))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eleven_levels_cover_every_tick() {
        assert_eq!(NUM_LEVELS, 11);
        assert_eq!(level_for(0, u64::MAX), NUM_LEVELS - 1);
    }

    #[test]
    fn level_boundaries_from_zero() {
        for (when, level) in [
            (1, 0),
            (63, 0),
            (64, 1),
            (4095, 1),
            (4096, 2),
            (262_143, 2),
            (262_144, 3),
            ((1 << 24) - 1, 3),
            (1 << 24, 4),
            (1 << 30, 5),
            (1 << 36, 6),
            (1 << 60, 10),
            (u64::MAX, 10),
        ] {
            assert_eq!(level_for(0, when), level, "when={when}");
        }
    }

    #[test]
    fn level_depends_on_shared_prefix_not_distance() {
        // One tick apart, but across a level-1 slot boundary: still level 0
        // only if the higher bits agree.
        assert_eq!(level_for(62, 63), 0);
        assert_eq!(level_for(63, 64), 1);
        assert_eq!(level_for(4095, 4096), 2);
        assert_eq!(level_for(262_143, 262_144), 3);
        assert_eq!(level_for(u64::MAX - 1, u64::MAX), 0);
    }

    #[test]
    fn slots_at_boundaries() {
        assert_eq!(slot_for(0, 0), 0);
        assert_eq!(slot_for(63, 0), 63);
        assert_eq!(slot_for(64, 0), 0);
        assert_eq!(slot_for(64, 1), 1);
        assert_eq!(slot_for(4095, 1), 63);
        assert_eq!(slot_for(4096, 1), 0);
        assert_eq!(slot_for(4096, 2), 1);
        assert_eq!(slot_for(262_144, 3), 1);
        assert_eq!(slot_for(u64::MAX, 10), 15);
    }

    #[test]
    fn revolution_starts() {
        assert_eq!(revolution_start(100, 0), 64);
        assert_eq!(revolution_start(100, 1), 0);
        assert_eq!(revolution_start(5000, 1), 4096);
        assert_eq!(revolution_start(u64::MAX, 10), 0);
        assert_eq!(revolution_start(u64::MAX, 9), 0xF000_0000_0000_0000);
    }

    #[test]
    fn next_occupied_finds_the_first_slot_ahead() {
        let mut level = Level::new(1);
        assert_eq!(level.next_occupied(0), None);
        // Pretend slots 3 and 9 hold entries.
        level.occupied = (1 << 3) | (1 << 9);
        assert_eq!(level.next_occupied(0), Some((3 * 64, 3)));
        assert_eq!(level.next_occupied(3 * 64 - 1), Some((3 * 64, 3)));
        level.occupied = 1 << 9;
        assert_eq!(level.next_occupied(3 * 64), Some((9 * 64, 9)));
        // A later revolution keeps its base.
        assert_eq!(
            level.next_occupied(4096 * 7 + 5),
            Some((4096 * 7 + 9 * 64, 9))
        );
    }

    #[test]
    fn next_occupied_at_the_last_slot_is_none() {
        let level = Level::new(0);
        assert_eq!(level.next_occupied(63), None);
        let top = Level::new(NUM_LEVELS - 1);
        assert_eq!(top.next_occupied(u64::MAX), None);
    }
}
