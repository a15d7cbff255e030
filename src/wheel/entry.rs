//! Timer entries and the intrusive, index-linked lists that hold them.
//!
//! Entries live in a [`Slab`]; a slot is a doubly linked list threaded through
//! the entries by slab index (`u32`, with [`NIL`] for "none"). Unlinking is
//! O(1) and nothing is allocated per link.

use slab::Slab;

/// "No entry" in a link.
pub(crate) const NIL: u32 = u32::MAX;

/// Which list an entry is linked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// The due list: its deadline has been reached.
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
    /// Where the entry is linked. After a lazy move this is a slot that
    /// comes due before `when`; the entry is filed again from `when` then.
    pub(crate) place: Place,
    prev: u32,
    next: u32,
}

impl<K, V> Entry<K, V> {
    pub(crate) fn new(key: K, value: V, when: u64) -> Self {
        Entry {
            key,
            value,
            when,
            place: Place::Due,
            prev: NIL,
            next: NIL,
        }
    }
}

/// A FIFO list of entries: appended at the tail, taken from the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct List {
    head: u32,
    tail: u32,
}

impl List {
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    pub(crate) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Appends entry `idx`, which must not be in any list.
    pub(crate) fn push_back<K, V>(&mut self, entries: &mut Slab<Entry<K, V>>, idx: u32) {
        let entry = &mut entries[idx as usize];
        debug_assert!(
            entry.prev == NIL && entry.next == NIL,
            "entry {idx} is still linked"
        );
        entry.prev = self.tail;
        entry.next = NIL;
        if self.tail == NIL {
            self.head = idx;
        } else {
            entries[self.tail as usize].next = idx;
        }
        self.tail = idx;
    }

    /// Takes the first entry out of the list.
    pub(crate) fn pop_front<K, V>(&mut self, entries: &mut Slab<Entry<K, V>>) -> Option<u32> {
        if self.head == NIL {
            return None;
        }
        let idx = self.head;
        self.unlink(entries, idx);
        Some(idx)
    }

    /// Unlinks entry `idx`, which must be in this list.
    pub(crate) fn unlink<K, V>(&mut self, entries: &mut Slab<Entry<K, V>>, idx: u32) {
        let (prev, next) = {
            let entry = &mut entries[idx as usize];
            let links = (entry.prev, entry.next);
            entry.prev = NIL;
            entry.next = NIL;
            links
        };
        if prev == NIL {
            debug_assert_eq!(self.head, idx, "entry {idx} is not this list's head");
            self.head = next;
        } else {
            entries[prev as usize].next = next;
        }
        if next == NIL {
            debug_assert_eq!(self.tail, idx, "entry {idx} is not this list's tail");
            self.tail = prev;
        } else {
            entries[next as usize].prev = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_of_two_words_is_five_words() {
        // key + value + deadline + two links, with the place in the padding.
        assert_eq!(std::mem::size_of::<Entry<u64, u64>>(), 40);
    }

    fn collect(list: &mut List, entries: &mut Slab<Entry<u32, ()>>) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(idx) = list.pop_front(entries) {
            out.push(entries[idx as usize].key);
        }
        out
    }

    #[test]
    fn fifo_order_and_unlink_anywhere() {
        let mut entries = Slab::new();
        let mut list = List::EMPTY;
        let ids: Vec<u32> = (0..5)
            .map(|k| entries.insert(Entry::new(k, (), 0)) as u32)
            .collect();
        for &id in &ids {
            list.push_back(&mut entries, id);
        }
        list.unlink(&mut entries, ids[0]); // head
        list.unlink(&mut entries, ids[2]); // middle
        list.unlink(&mut entries, ids[4]); // tail
        assert_eq!(collect(&mut list, &mut entries), vec![1, 3]);
        assert!(list.is_empty());
        // An unlinked entry can be appended again.
        list.push_back(&mut entries, ids[2]);
        assert_eq!(collect(&mut list, &mut entries), vec![2]);
    }
}
