//! The slots that hold entries, and the pool of blocks they are made of.
//!
//! A slot (and the due queue) is a chain of
//! fixed-size blocks of slab indices, in the order the entries were filed.
//! Filing a whole slot again reads a block of indices and then loads entries
//! that do not depend on one another: on a large wheel those loads miss the
//! cache, and the processor waits for many of them at once, where a list
//! linked through the entries would make it wait for one at a time. Blocks
//! come from one pool shared by every slot, so the memory held is about one
//! `u32` per pending entry, whichever slots the entries are in.
//!
//! Each entry records its place and its position (block and offset). An
//! entry that leaves a slot (removed, or moved to another slot) leaves a
//! hole: [`NIL`] written at its position. Holes at the front of a slot are
//! dropped at once, so timers cancelled oldest first (the request-timeout
//! pattern) leave nothing behind; a slot whose holes otherwise outnumber its
//! entries is compacted, so holes cost at most one `u32` per entry.

use slab::Slab;

use super::entry::{Entry, NIL};

/// Items per block, as a power of two: 64, so one `u64` holds a bit for
/// each.
const BLOCK_BITS: u32 = 6;
pub(crate) const BLOCK: u32 = 1 << BLOCK_BITS;

/// Holes a slot may hold beyond one per entry before it is compacted. Unit
/// tests squeeze at the first surplus hole, so that the model tests, with
/// their few keys, compact all the time.
const SLACK: u32 = if cfg!(test) { 0 } else { 32 };

fn pos(block: u32, offset: u32) -> u32 {
    block << BLOCK_BITS | offset
}

/// The items of `block`, from offset `from` to `to`, that are entries and
/// not holes, as a bit set over offsets.
pub(crate) fn filed(blocks: &Blocks, (block, from, to): (u32, u32, u32)) -> u64 {
    let items = &blocks.items[block as usize];
    let mut filed = 0;
    for offset in from..to {
        filed |= u64::from(items[offset as usize] != NIL) << offset;
    }
    filed
}

/// The pool of blocks every slot's chain is made of.
#[derive(Debug)]
pub(crate) struct Blocks {
    items: Vec<[u32; BLOCK as usize]>,
    /// The next block in a chain, or in the free list.
    next: Vec<u32>,
    /// First free block.
    free: u32,
}

impl Blocks {
    pub(crate) fn new() -> Self {
        Blocks {
            items: Vec::new(),
            next: Vec::new(),
            free: NIL,
        }
    }

    /// Item `offset` of `block`.
    pub(crate) fn item(&self, block: u32, offset: u32) -> u32 {
        self.items[block as usize][offset as usize]
    }

    /// The item at position `pos`.
    #[cfg(test)]
    pub(crate) fn at(&self, pos: u32) -> u32 {
        self.item(pos >> BLOCK_BITS, pos & (BLOCK - 1))
    }

    fn item_mut(&mut self, pos: u32) -> &mut u32 {
        &mut self.items[(pos >> BLOCK_BITS) as usize][(pos & (BLOCK - 1)) as usize]
    }

    fn alloc(&mut self) -> u32 {
        if self.free != NIL {
            let block = self.free;
            self.free = self.next[block as usize];
            self.next[block as usize] = NIL;
            return block;
        }
        let block = self.items.len() as u32;
        debug_assert!(block < 1 << (32 - BLOCK_BITS), "positions overflow");
        self.items.push([NIL; BLOCK as usize]);
        self.next.push(NIL);
        block
    }

    /// Frees the chain from `head` to `tail`.
    fn free_chain(&mut self, head: u32, tail: u32) {
        self.next[tail as usize] = self.free;
        self.free = head;
    }

    /// Makes room for blocks enough to file `entries` more entries in
    /// `slots` slots without growing; `false`, reserving nothing more, if
    /// the memory cannot be had.
    pub(crate) fn try_reserve(&mut self, entries: usize, slots: usize) -> bool {
        // Full blocks, and a part-filled one at the end of every slot.
        let more = entries.div_ceil(BLOCK as usize) + slots;
        self.items.try_reserve(more).is_ok() && self.next.try_reserve(more).is_ok()
    }

    /// Room the pool has for blocks without growing.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.items.capacity()
    }

    /// Blocks the pool holds, free or not.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Blocks in the free list.
    #[cfg(test)]
    pub(crate) fn free_len(&self) -> usize {
        let (mut n, mut block) = (0, self.free);
        while block != NIL {
            n += 1;
            block = self.next[block as usize];
        }
        n
    }
}

/// The entries filed in one slot, oldest first, with holes: a chain of
/// blocks, full but for the last.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    head: u32,
    /// Offset in `head` of the first item not yet read.
    start: u32,
    tail: u32,
    /// Items in `tail`.
    fill: u32,
    /// Items from `start` on, holes included.
    len: u32,
    /// Entries filed here: the items that are not holes.
    live: u32,
}

impl Slot {
    pub(crate) const EMPTY: Slot = Slot {
        head: NIL,
        start: 0,
        tail: NIL,
        fill: 0,
        len: 0,
        live: 0,
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Blocks in the chain.
    #[cfg(test)]
    pub(crate) fn blocks(&self, blocks: &Blocks) -> usize {
        let (mut n, mut block) = (0, self.head);
        while block != NIL {
            n += 1;
            if block == self.tail {
                break;
            }
            block = blocks.next[block as usize];
        }
        n
    }

    /// Files entry `idx` (not filed anywhere) at the end; returns its
    /// position, for the entry to record.
    #[inline]
    pub(crate) fn push(&mut self, blocks: &mut Blocks, idx: u32) -> u32 {
        if self.tail == NIL || self.fill == BLOCK {
            let block = blocks.alloc();
            if self.tail == NIL {
                self.head = block;
                self.start = 0;
            } else {
                blocks.next[self.tail as usize] = block;
            }
            self.tail = block;
            self.fill = 0;
        }
        blocks.items[self.tail as usize][self.fill as usize] = idx;
        let at = pos(self.tail, self.fill);
        self.fill += 1;
        self.len += 1;
        self.live += 1;
        at
    }

    /// Records that the entry filed here at `at` has left (been removed, or
    /// filed elsewhere), leaving a hole.
    #[inline(always)]
    pub(crate) fn vacate<K, V>(
        &mut self,
        entries: &mut Slab<Entry<K, V>>,
        blocks: &mut Blocks,
        at: u32,
    ) {
        // The common case, kept small enough to inline: the oldest entry
        // leaves, another one follows it in its block.
        let next = self.start + 1;
        if self.live > 1
            && at == pos(self.head, self.start)
            && next < BLOCK
            && blocks.item(self.head, next) != NIL
        {
            self.start = next;
            self.len -= 1;
            self.live -= 1;
            if self.len > 2 * self.live + SLACK {
                self.compact(entries, blocks);
            }
            return;
        }
        self.vacate_slow(entries, blocks, at);
    }

    /// [`vacate`](Self::vacate), in general.
    #[inline(never)]
    fn vacate_slow<K, V>(&mut self, entries: &mut Slab<Entry<K, V>>, blocks: &mut Blocks, at: u32) {
        self.live -= 1;
        if self.live == 0 {
            // Nothing left to read: no hole needs writing.
            self.clear(blocks);
            return;
        }
        // After `pop` takes a block's last entry, `start` is `BLOCK` until
        // the next read, and `pos(head, BLOCK)` is no position of `head`:
        // for an even `head` it spells offset 0 of block `head + 1`, which
        // may be the next block here, whose first entry is not the oldest
        // to have left.
        if self.start < BLOCK && at == pos(self.head, self.start) {
            // The oldest leaves (timeouts cancelled in the order they were
            // set): read past it rather than leave a hole to skip.
            self.start += 1;
            self.len -= 1;
            self.skip_holes(blocks);
        } else {
            *blocks.item_mut(at) = NIL;
        }
        if self.len > 2 * self.live + SLACK {
            self.compact(entries, blocks);
        }
    }

    /// Moves the read position past holes to the first entry, giving the
    /// blocks it leaves back to the pool. The slot must hold an entry.
    #[inline]
    fn skip_holes(&mut self, blocks: &mut Blocks) {
        debug_assert!(self.live > 0);
        loop {
            let items = &blocks.items[self.head as usize];
            let mut start = self.start as usize;
            // An entry lies ahead, so in the last block this stops at it,
            // before the items not written yet.
            while start < items.len() && items[start] == NIL {
                start += 1;
            }
            self.len -= start as u32 - self.start;
            if start < items.len() {
                self.start = start as u32;
                return;
            }
            // Past the end of a block that is not the last.
            let block = self.head;
            self.head = blocks.next[block as usize];
            self.start = 0;
            blocks.free_chain(block, block);
        }
    }

    /// The first block of the chain, and the offsets of its unread items:
    /// for a chain [`take`](Self::take)n whole, read a block at a time with
    /// [`filed`] and dropped with [`drop_front`](Self::drop_front).
    pub(crate) fn front(&self) -> Option<(u32, u32, u32)> {
        if self.head == NIL {
            return None;
        }
        let to = if self.head == self.tail {
            self.fill
        } else {
            BLOCK
        };
        Some((self.head, self.start, to))
    }

    /// Gives the first block of a chain [`take`](Self::take)n whole back to
    /// the pool. The slot's counts are left as they were.
    pub(crate) fn drop_front(&mut self, blocks: &mut Blocks) {
        let block = self.head;
        if block == self.tail {
            self.head = NIL;
            self.tail = NIL;
        } else {
            self.head = blocks.next[block as usize];
        }
        self.start = 0;
        blocks.free_chain(block, block);
    }

    /// Takes the whole chain, leaving the slot empty; read it with
    /// [`front`](Self::front).
    pub(crate) fn take(&mut self) -> Slot {
        std::mem::replace(self, Slot::EMPTY)
    }

    /// Calls `f` with every entry filed here, oldest first.
    pub(crate) fn each(&self, blocks: &Blocks, mut f: impl FnMut(u32)) {
        let mut block = self.head;
        let mut from = self.start;
        while block != NIL {
            let to = if block == self.tail { self.fill } else { BLOCK };
            for offset in from..to {
                let idx = blocks.item(block, offset);
                if idx != NIL {
                    f(idx);
                }
            }
            if block == self.tail {
                break;
            }
            block = blocks.next[block as usize];
            from = 0;
        }
    }

    /// Takes the oldest entry out, passing over holes.
    #[inline]
    pub(crate) fn pop(&mut self, blocks: &mut Blocks) -> Option<u32> {
        if self.live == 0 {
            return None;
        }
        self.skip_holes(blocks);
        let idx = blocks.item(self.head, self.start);
        self.start += 1;
        self.len -= 1;
        self.live -= 1;
        if self.live == 0 {
            self.clear(blocks);
        }
        Some(idx)
    }

    /// Squeezes out the holes, keeping the order, and gives the blocks that
    /// frees back to the pool.
    fn compact<K, V>(&mut self, entries: &mut Slab<Entry<K, V>>, blocks: &mut Blocks) {
        debug_assert!(self.live > 0);
        // Writing never overtakes reading: it starts at the same block and
        // writes only what it has read.
        let (mut write, mut written) = (self.head, 0);
        let (mut read, mut offset) = (self.head, self.start);
        loop {
            let to = if read == self.tail { self.fill } else { BLOCK };
            while offset < to {
                let idx = blocks.item(read, offset);
                if idx != NIL {
                    if written == BLOCK {
                        write = blocks.next[write as usize];
                        written = 0;
                    }
                    blocks.items[write as usize][written as usize] = idx;
                    entries[idx as usize].pos = pos(write, written);
                    written += 1;
                }
                offset += 1;
            }
            if read == self.tail {
                break;
            }
            read = blocks.next[read as usize];
            offset = 0;
        }
        if write != self.tail {
            let rest = blocks.next[write as usize];
            blocks.free_chain(rest, self.tail);
            blocks.next[write as usize] = NIL;
        }
        self.tail = write;
        self.fill = written;
        self.start = 0;
        self.len = self.live;
    }

    /// Empties the slot, returning its blocks to the pool.
    pub(crate) fn clear(&mut self, blocks: &mut Blocks) {
        if self.head != NIL {
            blocks.free_chain(self.head, self.tail);
        }
        *self = Slot::EMPTY;
    }
}

#[cfg(test)]
mod tests {
    use super::super::entry::Place;
    use super::*;

    const HERE: Place = Place::Slot { level: 1, slot: 2 };

    type Entries = Slab<Entry<u32, ()>>;

    /// The keys filed in `slot`, oldest first, read the way a cascade reads
    /// them (which empties the slot).
    fn read(slot: &mut Slot, blocks: &mut Blocks, entries: &Entries) -> Vec<u32> {
        let mut chain = slot.take();
        let mut keys = Vec::new();
        while let Some(front) = chain.front() {
            let mut here = filed(blocks, front);
            while here != 0 {
                let idx = blocks.item(front.0, here.trailing_zeros());
                keys.push(entries[idx as usize].key);
                here &= here - 1;
            }
            chain.drop_front(blocks);
        }
        keys
    }

    fn fill(
        slot: &mut Slot,
        blocks: &mut Blocks,
        entries: &mut Entries,
        keys: std::ops::Range<u32>,
    ) {
        for key in keys {
            let idx = entries.insert(Entry::new(key, (), 0)) as u32;
            let entry = &mut entries[idx as usize];
            (entry.place, entry.pos) = (HERE, slot.push(blocks, idx));
        }
    }

    /// Takes entry `idx` out of the slab and out of `slot`.
    fn remove(slot: &mut Slot, blocks: &mut Blocks, entries: &mut Entries, idx: u32) {
        let entry = entries.remove(idx as usize);
        slot.vacate(entries, blocks, entry.pos);
    }

    /// Entries leave holes that are passed over, also where a slab index is
    /// reused by an entry filed in the same slot again.
    #[test]
    fn holes_are_passed_over() {
        let (mut entries, mut blocks, mut slot) = (Slab::new(), Blocks::new(), Slot::EMPTY);
        fill(&mut slot, &mut blocks, &mut entries, 0..100);
        remove(&mut slot, &mut blocks, &mut entries, 70);
        // A new entry reuses index 70.
        fill(&mut slot, &mut blocks, &mut entries, 100..101);
        assert_eq!(entries[70].key, 100);
        remove(&mut slot, &mut blocks, &mut entries, 3);
        let mut expected: Vec<u32> = (0..100).filter(|&k| k != 3 && k != 70).collect();
        expected.push(100);
        assert_eq!(read(&mut slot, &mut blocks, &entries), expected);
        // Every block went back to the pool.
        assert_eq!(blocks.free_len(), blocks.len());
    }

    /// Entries removed oldest first, as timeouts that are cancelled in the
    /// order they were set, leave no holes behind: the front moves on and
    /// gives its blocks back, and nothing is ever compacted.
    #[test]
    fn removing_oldest_first_leaves_nothing_behind() {
        let (mut entries, mut blocks, mut slot) = (Slab::new(), Blocks::new(), Slot::EMPTY);
        fill(&mut slot, &mut blocks, &mut entries, 0..1_000);
        for key in 1_000..20_000u32 {
            fill(&mut slot, &mut blocks, &mut entries, key..key + 1);
            let oldest = (key - 1_000) as usize;
            let idx = entries
                .iter()
                .find(|(_, e)| e.key == oldest as u32)
                .unwrap()
                .0;
            remove(&mut slot, &mut blocks, &mut entries, idx as u32);
            assert_eq!(slot.len, slot.live, "holes left at key {key}");
        }
        assert!(slot.blocks(&blocks) <= 1_000 / 64 + 2);
        assert_eq!(
            read(&mut slot, &mut blocks, &entries),
            (19_000..20_000).collect::<Vec<_>>()
        );
    }

    /// Once holes outnumber entries, the chain is squeezed, keeping the
    /// order and giving blocks back.
    #[test]
    fn holes_are_squeezed_out_in_order() {
        let (mut entries, mut blocks, mut slot) = (Slab::new(), Blocks::new(), Slot::EMPTY);
        fill(&mut slot, &mut blocks, &mut entries, 0..1_000);
        // Remove all but every tenth, newest first, so the front stays put.
        for key in (0..1_000).rev().filter(|k| k % 10 != 0) {
            remove(&mut slot, &mut blocks, &mut entries, key);
            assert!(slot.len <= 2 * slot.live + SLACK);
            assert_eq!(slot.blocks(&blocks) + blocks.free_len(), blocks.len());
        }
        assert_eq!(slot.live, 100);
        assert!(slot.blocks(&blocks) <= 4, "{} blocks", slot.blocks(&blocks));
        assert_eq!(
            read(&mut slot, &mut blocks, &entries),
            (0..1_000).step_by(10).collect::<Vec<_>>()
        );
    }

    /// The due queue hands out entries oldest first, passing over holes,
    /// and is squeezed from its read position.
    #[test]
    fn popping_reads_in_order_across_squeezes() {
        let (mut entries, mut blocks, mut due) = (Slab::new(), Blocks::new(), Slot::EMPTY);
        for key in 0..300u32 {
            let idx = entries.insert(Entry::new(key, (), 0)) as u32;
            let entry = &mut entries[idx as usize];
            (entry.place, entry.pos) = (Place::Due, due.push(&mut blocks, idx));
        }
        let mut out = Vec::new();
        for _ in 0..50 {
            let idx = due.pop(&mut blocks).unwrap();
            out.push(entries.remove(idx as usize).key);
        }
        for key in (50..300).rev().filter(|k| k % 5 != 0) {
            remove(&mut due, &mut blocks, &mut entries, key);
        }
        while let Some(idx) = due.pop(&mut blocks) {
            out.push(entries.remove(idx as usize).key);
        }
        let expected: Vec<u32> = (0..50).chain((50..300).step_by(5)).collect();
        assert_eq!(out, expected);
        assert!(due.is_empty());
        assert_eq!(blocks.free_len(), blocks.len());
    }
}
