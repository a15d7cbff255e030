//! The pure hierarchical timing wheel: synchronous, no Tokio inside.
//!
//! Time is a `u64` tick count that only the caller moves forward, with
//! [`Wheel::advance`]. Deadlines are absolute ticks. An entry with deadline
//! `when` sits at the level and slot that [`level::level_for`] and
//! [`level::slot_for`] compute from `when` and the wheel's `elapsed` tick;
//! when a coarse slot comes due its entries are filed again from their own
//! deadlines, so nothing ever fires early. Entries whose deadline has been
//! reached wait, in order, in the due queue until [`Wheel::pop_due`] hands
//! them out. A level-0 slot covers one tick, so when it comes due with the
//! due queue empty its chain simply becomes the due queue, its entries not
//! touched (unless one was moved later while it waited there). Slots and
//! the due queue are chains of blocks of slab indices (see [`entry`]): an
//! entry that leaves a slot leaves a hole behind, and filing a slot again
//! loads its entries a block at a time, so that their cache misses
//! overlap.
//!
//! Pushing a deadline later is lazy: the entry keeps its slot, which comes
//! due no later than the new deadline, and is filed again from its own
//! deadline then, so a heartbeat costs O(1) and touches no slot.
//!
//! Firing order is deadline order. Entries with the same deadline tick fire
//! in the order they were set, except that an entry whose deadline was moved
//! while pending takes no particular place within its tick. An entry filed
//! with a deadline already reached counts as due at the moment it is filed.

mod entry;
mod level;
mod slot;

use std::fmt;
use std::hash::{BuildHasher, Hash};

use hashbrown::{hash_table, DefaultHashBuilder, HashTable};
use slab::Slab;

use self::entry::{Entry, Place, NIL};

/// The size of one entry, for tests of the values kept in one.
#[cfg(test)]
pub(crate) const fn entry_size<K, V>() -> usize {
    std::mem::size_of::<Entry<K, V>>()
}
use self::level::{level_for, slot_for, slot_start, Level, NUM_LEVELS, SLOTS};
use self::slot::{filed, Blocks, Slot, BLOCK};
use crate::clock::WHOLE;

/// Key-index capacity from which [`Wheel::take_due`] removes fired entries
/// from the key index in runs. Below it the index (about 5 bytes a place)
/// fits in a core's own cache, so there are no misses to overlap, and
/// taking entries one at a time is cheaper (BENCHMARKS.md, "Figures behind
/// the code", has the measurements that placed it).
const RUNS_FROM: usize = 1 << 17;

/// Entries a wheel can hold: 2^30. Slab indices and positions in the slots'
/// blocks are `u32`, and a slot may hold up to about one hole per entry.
pub(crate) const MAX_LEN: usize = 1 << 30;

/// The wheel is full: it holds [`MAX_LEN`] entries.
#[derive(Debug)]
pub(crate) struct AtCapacity<K, V>(pub(crate) K, pub(crate) V);

/// A hierarchical timing wheel of keyed entries.
pub(crate) struct Wheel<K, V> {
    entries: Slab<Entry<K, V>>,
    /// Key index: slab indices, hashed and compared by the entry's key, so
    /// each key is stored once.
    index: HashTable<u32>,
    /// Items the key index holds when it has no tombstones: its capacity
    /// when last built or reserved.
    index_room: usize,
    hasher: DefaultHashBuilder,
    levels: Box<[Level]>,
    /// Entries whose deadline has been reached, oldest first.
    due: Slot,
    /// A level-0 slot whose chain became the due queue whole when it came
    /// due (see [`advance`](Self::advance)), without its entries being
    /// rewritten: an entry whose place is this slot is in the due queue. No
    /// entry is filed in the slot itself while this is set; one about to
    /// be makes the entries say `Due` first.
    spliced: Option<u8>,
    /// The blocks every slot and the due queue are made of.
    blocks: Blocks,
    /// The tick the wheel has advanced to.
    elapsed: u64,
    /// For each slot of levels 0 and 1, no more than the least place in
    /// its first tick ([`Entry::frac`]) of the entries filed there for that
    /// tick (at level 0, every entry is; at level 1, those due at a
    /// multiple of [`SLOTS`] ticks, which wait there until their tick):
    /// lowered as entries are filed, set exactly by
    /// [`fire_early`](Self::fire_early), reset when the slot is taken.
    early: [[u8; SLOTS]; 2],
    /// Entries [`fire_early`](Self::fire_early) takes, kept to reuse.
    early_taken: Vec<u32>,
    /// Size from which [`take_due`](Self::take_due) works in runs
    /// ([`RUNS_FROM`]; tests lower it).
    runs_from: usize,
    /// How many times an entry was linked into a list, for tests.
    #[cfg(test)]
    links: u64,
}

impl<K: Eq + Hash, V> Wheel<K, V> {
    /// An empty wheel at tick 0.
    pub(crate) fn new() -> Self {
        Wheel {
            entries: Slab::new(),
            index: HashTable::new(),
            index_room: 0,
            hasher: DefaultHashBuilder::default(),
            levels: (0..NUM_LEVELS).map(Level::new).collect(),
            due: Slot::EMPTY,
            spliced: None,
            blocks: Blocks::new(),
            elapsed: 0,
            early: [[WHOLE; SLOTS]; 2],
            early_taken: Vec::new(),
            runs_from: RUNS_FROM,
            #[cfg(test)]
            links: 0,
        }
    }

    /// Reserves room for `additional` more entries, so that many inserts
    /// neither allocate nor rehash the key index. Returns `false`, reserving
    /// nothing more, if the memory cannot be had; the wheel then grows as
    /// entries come, as it would have anyway.
    /// More than the wheel can ever hold ([`MAX_LEN`] entries) is refused
    /// outright.
    pub(crate) fn reserve(&mut self, additional: usize) -> bool {
        if additional > MAX_LEN - self.entries.len() {
            return false;
        }
        // The slab's own reservation aborts on failure: ask the allocator
        // for a block of its size first, and only go on if that was granted.
        let slab_bytes = additional.checked_mul(std::mem::size_of::<(usize, Entry<K, V>)>());
        let granted =
            slab_bytes.is_some_and(|bytes| Vec::<u8>::new().try_reserve_exact(bytes).is_ok());
        if !granted {
            return false;
        }
        let (entries, hasher) = (&self.entries, &self.hasher);
        if self
            .index
            .try_reserve(additional, |&i| hasher.hash_one(&entries[i as usize].key))
            .is_err()
        {
            return false;
        }
        self.index_room = self.index_room.max(self.index.capacity());
        // Every slot and the due queue may end in a part-filled block.
        if !self.blocks.try_reserve(additional, NUM_LEVELS * SLOTS + 1) {
            return false;
        }
        self.entries.reserve(additional);
        true
    }

    /// The tick the wheel has advanced to.
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Entries pending, due ones included.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets `key` to fire at tick `when`, or, if it is already pending,
    /// replaces its value and deadline and returns the old value.
    pub(crate) fn insert(
        &mut self,
        key: K,
        value: V,
        when: u64,
    ) -> Result<Option<V>, AtCapacity<K, V>> {
        self.insert_in(key, value, when, WHOLE)
    }

    /// [`insert`](Self::insert), with where in tick `when` the deadline
    /// falls ([`Entry::frac`]).
    #[inline(always)]
    pub(crate) fn insert_in(
        &mut self,
        key: K,
        value: V,
        when: u64,
        frac: u8,
    ) -> Result<Option<V>, AtCapacity<K, V>> {
        // Full, and not with tombstones it could clear in place: it grows.
        if self.index.len() == self.index.capacity() && self.index.len() > self.index_room / 2 {
            self.grow_index();
        }
        // One hash and one probe, whether the key is pending or new.
        let hash = self.hasher.hash_one(&key);
        let (entries, hasher) = (&self.entries, &self.hasher);
        let slot = self.index.entry(
            hash,
            |&i| entries[i as usize].key == key,
            |&i| hasher.hash_one(&entries[i as usize].key),
        );
        let vacant = match slot {
            hash_table::Entry::Occupied(found) => {
                let idx = *found.get();
                let old = std::mem::replace(&mut self.entries[idx as usize].value, value);
                self.move_to(idx, when, frac);
                return Ok(Some(old));
            }
            hash_table::Entry::Vacant(vacant) => vacant,
        };
        if self.entries.len() >= MAX_LEN {
            return Err(AtCapacity(key, value));
        }
        let idx = self.entries.vacant_key() as u32;
        vacant.insert(idx);
        self.add(idx, key, value, when, frac);
        Ok(None)
    }

    /// Files a new entry at `idx`, the slab's vacant key, and stores it:
    /// filed before it is stored, so the new entry is written once.
    #[inline(always)]
    fn add(&mut self, idx: u32, key: K, value: V, when: u64, frac: u8) {
        let (place, pos) = self.file_at(idx, when, frac);
        self.entries.insert(Entry {
            key,
            value,
            when,
            place,
            pos,
            frac,
        });
    }

    /// Files `value` at tick `when` without the key index, returning the
    /// index to remove it by with [`remove_at`](Self::remove_at). A wheel
    /// used this way is used only this way (with
    /// [`pop_due_unkeyed`](Self::pop_due_unkeyed)): there `key` is not
    /// looked up, only kept to check removals, and no hash is taken or
    /// probed on any path.
    pub(crate) fn insert_unkeyed(
        &mut self,
        key: K,
        value: V,
        when: u64,
    ) -> Result<u32, AtCapacity<K, V>> {
        if self.entries.len() >= MAX_LEN {
            return Err(AtCapacity(key, value));
        }
        let idx = self.entries.vacant_key() as u32;
        self.add(idx, key, value, when, WHOLE);
        Ok(idx)
    }

    /// Removes the entry filed at `idx` by
    /// [`insert_unkeyed`](Self::insert_unkeyed), if it is still that of
    /// `key` (the index is reused once its entry has gone).
    pub(crate) fn remove_at(&mut self, idx: u32, key: &K) -> Option<V> {
        if self.entries.get(idx as usize)?.key != *key {
            return None;
        }
        let entry = self.entries.remove(idx as usize);
        self.vacate(resolve(self.spliced, entry.place), entry.pos);
        Some(entry.value)
    }

    /// The value filed at `idx` by [`insert_unkeyed`](Self::insert_unkeyed),
    /// if an entry is there.
    pub(crate) fn value_at_mut(&mut self, idx: u32) -> Option<&mut V> {
        self.entries
            .get_mut(idx as usize)
            .map(|entry| &mut entry.value)
    }

    /// [`pop_due`](Self::pop_due) for a wheel filed by
    /// [`insert_unkeyed`](Self::insert_unkeyed).
    pub(crate) fn pop_due_unkeyed(&mut self) -> Option<(K, V)> {
        let (_, entry) = self.take_first_due()?;
        Some((entry.key, entry.value))
    }

    /// Builds the key index anew with room for twice its entries, before
    /// an insert would make the table grow by rehashing itself. (A table
    /// full of tombstones, at most half its room in items, is still left to
    /// clear them in place, which allocates nothing.)
    ///
    /// The table's own rehash visits its items in bucket order and loads
    /// each one's entry to hash the key: on a large wheel, a cache miss an
    /// entry. Here the slab is read front to back, which the processor
    /// streams, and only the new table is written out of order.
    fn grow_index(&mut self) {
        let (entries, hasher) = (&self.entries, &self.hasher);
        let mut index = HashTable::with_capacity(2 * entries.len().max(4));
        for (idx, entry) in entries.iter() {
            index.insert_unique(hasher.hash_one(&entry.key), idx as u32, |&i| {
                hasher.hash_one(&entries[i as usize].key)
            });
        }
        self.index_room = index.capacity();
        self.index = index;
    }

    /// Moves the deadline of `key` to `when`. Returns `false`, and does
    /// nothing, when `key` is not pending.
    pub(crate) fn reschedule(&mut self, key: &K, when: u64) -> bool {
        self.reschedule_in(key, when, WHOLE)
    }

    /// [`reschedule`](Self::reschedule), with where in tick `when` the
    /// deadline falls ([`Entry::frac`]).
    pub(crate) fn reschedule_in(&mut self, key: &K, when: u64, frac: u8) -> bool {
        let Some(idx) = self.find(key) else {
            return false;
        };
        self.move_to(idx, when, frac);
        true
    }

    /// Gives entry `idx` the deadline `when`.
    ///
    /// A deadline pushed later is only recorded (a lazy move, O(1), no slot
    /// touched): the entry stays in its slot, which comes due no later than
    /// `when`, and is filed again from `when` then. A deadline moved earlier
    /// than its slot, or an entry already due, is filed again at once,
    /// leaving a hole where it was.
    fn move_to(&mut self, idx: u32, when: u64, frac: u8) {
        let entry = &mut self.entries[idx as usize];
        entry.frac = frac;
        let place = resolve(self.spliced, entry.place);
        if let Place::Slot { level, slot } = place {
            let start = slot_start(self.elapsed, level as usize, slot as usize);
            if when >= start {
                entry.when = when;
                if level == 0 && when > start {
                    // The slot can no longer become the due queue whole.
                    self.levels[0].mark_moved(slot as usize);
                } else if level <= 1 && when == start {
                    let early = &mut self.early[level as usize][slot as usize];
                    *early = (*early).min(frac);
                }
                return;
            }
        }
        let at = entry.pos;
        entry.when = when;
        self.link(idx);
        self.vacate(place, at);
    }

    /// Removes `key`, returning its key and value if it was pending.
    #[inline(always)]
    pub(crate) fn remove(&mut self, key: &K) -> Option<(K, V)> {
        let hash = self.hasher.hash_one(key);
        let entries = &self.entries;
        let found = self
            .index
            .find_entry(hash, |&i| entries[i as usize].key == *key)
            .ok()?;
        let (idx, _) = found.remove();
        let entry = self.entries.remove(idx as usize);
        self.vacate(resolve(self.spliced, entry.place), entry.pos);
        Some((entry.key, entry.value))
    }

    /// Moves the wheel to tick `now`: every entry whose deadline is at or
    /// before `now` joins the due list, in deadline order. Moving backwards
    /// does nothing.
    ///
    /// A level-0 slot that comes due while the due queue is empty, and none
    /// of whose entries was moved later, becomes the due queue whole: its
    /// entries keep saying they are in that slot, and
    /// [`spliced`](Self::spliced) says where they really are. That saves
    /// filing every firing timer one more time.
    pub(crate) fn advance(&mut self, now: u64) {
        while let Some((level, slot, start)) = self.next_slot() {
            if start > now {
                break;
            }
            debug_assert!(
                start > self.elapsed,
                "start={start} elapsed={}",
                self.elapsed
            );
            self.elapsed = start;
            let place = Place::Slot {
                level: level as u8,
                slot: slot as u8,
            };
            let (mut chain, moved) = self.levels[level].take_slot(slot);
            if level <= 1 {
                self.early[level][slot] = WHOLE;
            }
            if level == 0 && !moved && self.due.is_empty() {
                // Every entry of a level-0 slot is due at its one tick,
                // unless one was moved later while it waited: the chain
                // becomes the due queue as it is, in order, and its entries
                // are not touched.
                self.due.clear(&mut self.blocks);
                self.due = chain;
                self.spliced = Some(slot as u8);
                continue;
            }
            // A block at a time: first load the block's entries, in a loop
            // that does nothing else, so their cache misses overlap; then
            // file them again, now in cache.
            let mut whens = [0; BLOCK as usize];
            while let Some(front) = chain.front() {
                let filed = filed(&self.blocks, front);
                let mut here = filed;
                while here != 0 {
                    let offset = here.trailing_zeros();
                    let entry = &self.entries[self.blocks.item(front.0, offset) as usize];
                    debug_assert_eq!(entry.place, place);
                    whens[offset as usize] = entry.when;
                    here &= here - 1;
                }
                here = filed;
                while here != 0 {
                    let offset = here.trailing_zeros();
                    self.file(self.blocks.item(front.0, offset), whens[offset as usize]);
                    here &= here - 1;
                }
                chain.drop_front(&mut self.blocks);
            }
        }
        self.elapsed = self.elapsed.max(now);
    }

    /// Takes the oldest due entry: its key, value and deadline tick.
    pub(crate) fn pop_due(&mut self) -> Option<(K, V, u64)> {
        let (idx, entry) = self.take_first_due()?;
        self.unindex(self.hasher.hash_one(&entry.key), idx);
        Some((entry.key, entry.value, entry.when))
    }

    /// Takes the oldest due entry out of the due queue and the slab, not
    /// the key index, with its slab index.
    #[inline(always)]
    fn take_first_due(&mut self) -> Option<(u32, Entry<K, V>)> {
        let idx = self.due.pop(&mut self.blocks)?;
        if self.due.is_empty() {
            self.spliced = None;
        }
        Some((idx, self.entries.remove(idx as usize)))
    }

    /// Hands up to `max` due entries to `each`, oldest first, as
    /// [`pop_due`](Self::pop_due) would one at a time; returns how many.
    ///
    /// Entries leave the key index a run at a time, in a loop that does
    /// nothing else: on a large wheel every removal misses the cache twice
    /// (control group, then bucket), and lookups that do not depend on one
    /// another let the processor wait for several of those misses at once.
    ///
    /// A wheel whose index has room for fewer than [`RUNS_FROM`] entries has
    /// it in cache, with no misses to overlap; it takes entries one at a
    /// time. (The room, not the entries pending: the index does not shrink
    /// as a large wheel empties.)
    pub(crate) fn take_due(&mut self, max: usize, mut each: impl FnMut(K, V, u64)) -> usize {
        self.take_due_in(max, |key, value, when, _| each(key, value, when))
    }

    /// [`take_due`](Self::take_due), handing each entry's place in its
    /// tick ([`Entry::frac`]) too.
    #[inline(always)]
    pub(crate) fn take_due_in(&mut self, max: usize, mut each: impl FnMut(K, V, u64, u8)) -> usize {
        const RUN: usize = 32;
        if self.index.capacity() < self.runs_from {
            let mut taken = 0;
            while taken < max {
                let Some((idx, entry)) = self.take_first_due() else {
                    break;
                };
                self.unindex(self.hasher.hash_one(&entry.key), idx);
                each(entry.key, entry.value, entry.when, entry.frac);
                taken += 1;
            }
            return taken;
        }
        let mut run = [(0u64, NIL); RUN];
        let mut taken = 0;
        while taken < max {
            let mut n = 0;
            while n < RUN.min(max - taken) {
                let Some(idx) = self.due.pop(&mut self.blocks) else {
                    break;
                };
                run[n] = (self.hasher.hash_one(&self.entries[idx as usize].key), idx);
                n += 1;
            }
            for &(hash, idx) in &run[..n] {
                self.unindex(hash, idx);
            }
            for &(_, idx) in &run[..n] {
                let entry = self.entries.remove(idx as usize);
                each(entry.key, entry.value, entry.when, entry.frac);
            }
            taken += n;
            if n < RUN {
                break;
            }
        }
        if self.due.is_empty() {
            self.spliced = None;
        }
        taken
    }

    /// Takes due entry `idx`, whose key hashes to `hash`, out of the key
    /// index; found by its slab index, so the entry is not read.
    fn unindex(&mut self, hash: u64, idx: u32) {
        match self.index.find_entry(hash, |&i| i == idx) {
            Ok(found) => {
                found.remove();
            }
            Err(_) => debug_assert!(false, "due entry {idx} missing from the key index"),
        }
    }

    /// Whether entries are waiting in the due list.
    pub(crate) fn has_due(&self) -> bool {
        !self.due.is_empty()
    }

    /// The tick at which [`advance`](Self::advance) next has work to do:
    /// `elapsed` if entries are due, else the start of the next occupied slot
    /// (which, for a coarse slot, is a cascade rather than a firing).
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if self.has_due() {
            return Some(self.elapsed);
        }
        self.next_slot().map(|(_, _, start)| start)
    }

    /// The next tick, if it comes due with entries whose deadlines fall
    /// inside it (filed at level 0, or at level 1 for a tick that is a
    /// multiple of [`SLOTS`]), and no more than the least place in the tick
    /// of those deadlines ([`Entry::frac`]): the driver may wake before the
    /// tick's instant, at that place, and [`fire_early`](Self::fire_early)
    /// what it has reached. Nothing while entries are due.
    pub(crate) fn next_early(&self) -> Option<(u64, u8)> {
        if self.has_due() {
            return None;
        }
        match self.next_slot()? {
            (level @ (0 | 1), slot, start) if self.early[level][slot] != WHOLE => {
                Some((start, self.early[level][slot]))
            }
            _ => None,
        }
    }

    /// Makes due, before their tick, the entries of tick `tick` (the one
    /// [`next_early`](Self::next_early) named) whose place in it is below
    /// `reached`: the 256ths of the tick that have passed, so none of them
    /// is early. Sets the slot's least place to that of the entries left.
    /// Returns how many it made due. Does nothing while entries are due.
    pub(crate) fn fire_early(&mut self, tick: u64, reached: u16) -> usize {
        if self.has_due() || tick <= self.elapsed {
            return 0;
        }
        let Some((level @ (0 | 1), slot, start)) = self.next_slot() else {
            return 0;
        };
        if start != tick {
            return 0;
        }
        let mut taken = std::mem::take(&mut self.early_taken);
        let mut least = WHOLE;
        let entries = &self.entries;
        self.levels[level].slot(slot).each(&self.blocks, |idx| {
            let entry = &entries[idx as usize];
            if entry.when == tick {
                if u16::from(entry.frac) < reached {
                    taken.push(idx);
                } else {
                    least = least.min(entry.frac);
                }
            }
        });
        self.early[level][slot] = least;
        let place = Place::Slot {
            level: level as u8,
            slot: slot as u8,
        };
        for &idx in &taken {
            // Vacating may move others' positions: read this one's now.
            let at = self.entries[idx as usize].pos;
            self.vacate(place, at);
            let pos = self.due.push(&mut self.blocks, idx);
            let entry = &mut self.entries[idx as usize];
            (entry.place, entry.pos) = (Place::Due, pos);
        }
        let n = taken.len();
        taken.clear();
        self.early_taken = taken;
        n
    }

    /// Every entry's value, due or not, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, entry)| &entry.value)
    }

    /// Removes every entry, due or not, into `out`, in no particular order.
    pub(crate) fn drain_into(&mut self, out: &mut Vec<(K, V)>) {
        out.reserve(self.entries.len());
        out.extend(self.entries.drain().map(|e| (e.key, e.value)));
        self.index.clear();
        self.due.clear(&mut self.blocks);
        self.spliced = None;
        for level in self.levels.iter_mut() {
            level.clear(&mut self.blocks);
        }
        self.early = [[WHOLE; SLOTS]; 2];
    }

    /// The lowest level's next occupied slot: lower levels always come due
    /// before higher ones, since a level's current revolution lies inside the
    /// current slot of the level above.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        // An empty wheel has no slot filed: asked on every turn of the
        // driver, it answers without looking at each level.
        if self.entries.is_empty() {
            return None;
        }
        self.levels.iter().enumerate().find_map(|(level, lvl)| {
            lvl.next_occupied(self.elapsed)
                .map(|(start, slot)| (level, slot, start))
        })
    }

    /// The deadline tick of `key`, if it is pending.
    pub(crate) fn deadline(&self, key: &K) -> Option<u64> {
        self.find(key).map(|idx| self.entries[idx as usize].when)
    }

    fn find(&self, key: &K) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.index
            .find(hash, |&i| self.entries[i as usize].key == *key)
            .copied()
    }

    /// The list a deadline belongs in, seen from `elapsed`.
    fn place(&self, when: u64) -> Place {
        if when <= self.elapsed {
            Place::Due
        } else {
            let level = level_for(self.elapsed, when);
            Place::Slot {
                level: level as u8,
                slot: slot_for(when, level) as u8,
            }
        }
    }

    /// Files entry `idx`, filed nowhere, at the end of the slot its
    /// deadline belongs in (or the due queue).
    fn link(&mut self, idx: u32) {
        self.file(idx, self.entries[idx as usize].when);
    }

    /// [`link`](Self::link), with the entry's deadline at hand.
    #[inline]
    fn file(&mut self, idx: u32, when: u64) {
        let frac = self.entries[idx as usize].frac;
        let (place, pos) = self.file_at(idx, when, frac);
        let entry = &mut self.entries[idx as usize];
        (entry.place, entry.pos) = (place, pos);
    }

    /// Files index `idx` at the end of the slot deadline `when` belongs in
    /// (or the due queue), and returns that place and the position there,
    /// for the entry to record. The entry itself is not touched: it may not
    /// be stored yet.
    #[inline(always)]
    fn file_at(&mut self, idx: u32, when: u64, frac: u8) -> (Place, u32) {
        #[cfg(test)]
        {
            self.links += 1;
        }
        let place = self.place(when);
        let slot = match place {
            Place::Due => &mut self.due,
            Place::Slot { level, slot } => {
                if level == 0 {
                    if self.spliced == Some(slot) {
                        self.unsplice();
                    }
                    let early = &mut self.early[0][slot as usize];
                    *early = (*early).min(frac);
                } else if level == 1 && when.is_multiple_of(SLOTS as u64) {
                    let early = &mut self.early[1][slot as usize];
                    *early = (*early).min(frac);
                }
                let lvl = &mut self.levels[level as usize];
                lvl.mark_occupied(slot as usize);
                lvl.slot_mut(slot as usize)
            }
        };
        (place, slot.push(&mut self.blocks, idx))
    }

    /// Makes the entries of the spliced slot say they are due, before an
    /// entry is filed in that slot again: a revolution of level 0 later,
    /// with a backlog of due entries still waiting.
    #[cold]
    fn unsplice(&mut self) {
        if let Some(slot) = self.spliced.take() {
            let spliced = Place::Slot { level: 0, slot };
            self.due.each(&self.blocks, |idx| {
                let entry = &mut self.entries[idx as usize];
                if entry.place == spliced {
                    entry.place = Place::Due;
                }
            });
        }
    }

    /// Records that an entry filed at `place`, position `at`, has left it:
    /// removed, or filed elsewhere already.
    #[inline(always)]
    fn vacate(&mut self, place: Place, at: u32) {
        match place {
            Place::Due => self.due.vacate(&mut self.entries, &mut self.blocks, at),
            Place::Slot { level, slot } => {
                let lvl = &mut self.levels[level as usize];
                lvl.slot_mut(slot as usize)
                    .vacate(&mut self.entries, &mut self.blocks, at);
                lvl.mark(slot as usize);
            }
        }
    }
}

/// Where an entry filed at `place` is: a place in the slot spliced into the
/// due queue means the due queue.
#[inline]
fn resolve(spliced: Option<u8>, place: Place) -> Place {
    match place {
        Place::Slot { level: 0, slot } if spliced == Some(slot) => Place::Due,
        place => place,
    }
}

impl<K, V> fmt::Debug for Wheel<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wheel")
            .field("len", &self.entries.len())
            .field("elapsed", &self.elapsed)
            .field("due", &!self.due.is_empty())
            .field("levels", &self.levels)
            .finish()
    }
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;
