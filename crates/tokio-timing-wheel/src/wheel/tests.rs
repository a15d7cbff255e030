use std::collections::HashMap;

use std::hash::Hash;

use super::level::{slot_start, SLOTS};
use super::slot::Slot;
use super::{resolve, Place, Wheel};

/// Checks of the wheel's inner consistency, for the tests.
impl<K: Eq + Hash, V> Wheel<K, V> {
    /// Panics unless every entry is filed exactly where it says it is:
    /// its place (read through [`resolve`]) is the one chain that holds it,
    /// its position there holds its index, due entries are due, slot
    /// entries lie ahead in their slot, and a level-0 slot not marked as
    /// moved holds only entries of its own tick. The occupied bits match
    /// the slots, and a spliced slot is empty.
    pub(crate) fn check_invariants(&self) {
        let blocks = &self.blocks;
        let mut filed = HashMap::new();
        let mut visit = |chain: &Slot, place: Place| {
            chain.each(blocks, |idx| {
                assert!(
                    filed.insert(idx, place).is_none(),
                    "entry {idx} in two chains"
                );
            });
        };
        visit(&self.due, Place::Due);
        for (level, lvl) in self.levels.iter().enumerate() {
            let (occupied, _) = lvl.bits();
            for slot in 0..SLOTS {
                let chain = lvl.slot(slot);
                assert_eq!(
                    occupied >> slot & 1 == 1,
                    !chain.is_empty(),
                    "occupied bit of level {level} slot {slot}"
                );
                let (level, slot) = (level as u8, slot as u8);
                visit(chain, Place::Slot { level, slot });
            }
        }
        if let Some(slot) = self.spliced {
            assert!(
                self.levels[0].slot(slot as usize).is_empty(),
                "spliced slot {slot} filed again"
            );
        }
        assert_eq!(filed.len(), self.entries.len(), "entries filed vs pending");
        let (_, moved) = self.levels[0].bits();
        for (idx, entry) in self.entries.iter() {
            let idx = idx as u32;
            let place = resolve(self.spliced, entry.place);
            assert_eq!(
                filed.get(&idx),
                Some(&place),
                "entry {idx} says {:?}",
                entry.place
            );
            assert_eq!(blocks.at(entry.pos), idx, "entry {idx}'s position");
            match place {
                // Or fired early, in the tick after (`fire_early`).
                Place::Due => assert!(
                    entry.when <= self.elapsed.saturating_add(1),
                    "entry {idx} due before its deadline"
                ),
                Place::Slot { level, slot } => {
                    let start = slot_start(self.elapsed, level as usize, slot as usize);
                    assert!(
                        start > self.elapsed,
                        "entry {idx} in a slot behind the wheel"
                    );
                    assert!(
                        entry.when >= start,
                        "entry {idx} in a slot after its deadline"
                    );
                    if level == 0 && moved >> slot & 1 == 0 {
                        assert_eq!(entry.when, start, "entry {idx} moved, slot not marked");
                    }
                }
            }
        }
    }

    /// Blocks held by the due queue and every slot, counted by walking
    /// their chains.
    pub(super) fn blocks_in_slots(&self) -> usize {
        let blocks = &self.blocks;
        self.due.blocks(blocks)
            + (self.levels.iter())
                .map(|level| level.blocks(blocks))
                .sum::<usize>()
    }
}

pub(super) fn fire_all<K: Eq + std::hash::Hash, V>(
    wheel: &mut Wheel<K, V>,
    now: u64,
) -> Vec<(K, V, u64)> {
    wheel.advance(now);
    std::iter::from_fn(|| wheel.pop_due()).collect()
}

/// Like [`fire_all`], taking due entries `max` at a time with `take_due`.
pub(super) fn take_all<K: Eq + std::hash::Hash, V>(
    wheel: &mut Wheel<K, V>,
    now: u64,
    max: usize,
) -> Vec<(K, V, u64)> {
    wheel.advance(now);
    let mut out = Vec::new();
    loop {
        let before = out.len();
        let n = wheel.take_due(max, |k, v, when| out.push((k, v, when)));
        assert_eq!(n, out.len() - before, "count returned");
        assert!(n <= max, "took {n} of at most {max}");
        if n < max {
            break;
        }
    }
    assert!(!wheel.has_due());
    out
}

/// Taking due entries in runs gives what taking them one at a time gives,
/// in the same order, and leaves the key index as it found it for the keys
/// still pending.
#[test]
fn taking_due_in_runs_matches_one_at_a_time() {
    for max in [1, 5, 31, 32, 33, 64, 100, 1_000] {
        let mut one = Wheel::<u32, u32>::new();
        let mut runs = Wheel::<u32, u32>::new();
        runs.runs_from = 0;
        for key in 0..500u32 {
            let when = 1 + u64::from(key.wrapping_mul(2_654_435_761) % 300);
            one.insert(key, key, when).unwrap();
            runs.insert(key, key, when).unwrap();
        }
        for now in [0, 1, 50, 51, 200, 400] {
            assert_eq!(fire_all(&mut one, now), take_all(&mut runs, now, max));
            assert_eq!(one.len(), runs.len());
        }
        assert!(runs.is_empty());
        // Every key left the index: setting them again starts fresh timers.
        for key in 0..500u32 {
            assert_eq!(runs.insert(key, key, 500).unwrap(), None);
        }
        assert_eq!(take_all(&mut runs, 500, max).len(), 500);
    }
}

#[test]
fn fires_at_every_level_boundary_and_never_early() {
    for when in [
        1u64,
        63,
        64,
        65,
        4095,
        4096,
        4097,
        262_143,
        262_144,
        262_145,
        1 << 24,
        (1 << 30) + 7,
        1 << 36,
        (1 << 42) - 1,
        u64::MAX - 1,
        u64::MAX,
    ] {
        let mut wheel = Wheel::<u32, u32>::new();
        wheel.insert(1u32, 10u32, when).unwrap();
        assert!(
            fire_all(&mut wheel, when - 1).is_empty(),
            "when={when} fired early"
        );
        assert_eq!(
            fire_all(&mut wheel, when),
            vec![(1, 10, when)],
            "when={when}"
        );
        assert!(wheel.is_empty());
    }
}

#[test]
fn cascades_step_down_one_level_at_a_time() {
    let mut wheel = Wheel::new();
    let when = 3 * 262_144 + 5 * 4096 + 7 * 64 + 9;
    wheel.insert(1u32, (), when).unwrap();
    let mut stops = Vec::new();
    while let Some(next) = wheel.next_expiration() {
        stops.push(next);
        wheel.advance(next);
        if wheel.pop_due().is_some() {
            break;
        }
    }
    assert_eq!(
        stops,
        vec![3 * 262_144, 3 * 262_144 + 5 * 4096, when - 9, when]
    );
}

#[test]
fn equal_deadlines_fire_in_the_order_they_were_set() {
    let mut wheel = Wheel::new();
    // Filed from different levels: key 1 long before, key 2 later, key 0 last.
    wheel.insert(1u32, (), 5000).unwrap();
    wheel.advance(4000);
    wheel.insert(2, (), 5000).unwrap();
    wheel.advance(4990);
    wheel.insert(0, (), 5000).unwrap();
    let keys: Vec<u32> = fire_all(&mut wheel, 6000)
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(keys, vec![1, 2, 0]);
}

#[test]
fn past_deadlines_are_due_at_once() {
    let mut wheel = Wheel::new();
    wheel.advance(1000);
    wheel.insert(1u32, (), 3).unwrap();
    wheel.insert(2, (), 1000).unwrap();
    assert_eq!(wheel.next_expiration(), Some(1000));
    let keys: Vec<u32> = fire_all(&mut wheel, 1000)
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(keys, vec![1, 2]);
}

#[test]
fn replace_reschedule_and_remove() {
    let mut wheel = Wheel::new();
    assert_eq!(wheel.insert(7u32, "a", 100).unwrap(), None);
    assert_eq!(wheel.insert(7, "b", 200).unwrap(), Some("a"));
    assert_eq!(wheel.len(), 1);
    assert!(fire_all(&mut wheel, 150).is_empty());
    assert!(wheel.reschedule(&7, 300));
    assert!(!wheel.reschedule(&8, 300));
    assert!(fire_all(&mut wheel, 299).is_empty());
    assert_eq!(wheel.remove(&7), Some((7, "b")));
    assert_eq!(wheel.remove(&7), None);
    assert!(fire_all(&mut wheel, 10_000).is_empty());
    assert_eq!(wheel.next_expiration(), None);
}

#[test]
fn pushing_a_deadline_later_is_lazy_and_still_exact() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, (), 30_000).unwrap();
    let links = wheel.links;
    // A heartbeat every tick for 20 s pushes the deadline 30 s out each time.
    for now in 1..=20_000u64 {
        wheel.advance(now);
        assert!(wheel.pop_due().is_none(), "fired early at {now}");
        assert!(wheel.reschedule(&1, now + 30_000));
    }
    // Re-filed only when an old slot came due, not once per push.
    let relinks = wheel.links - links;
    assert!(relinks <= 8, "relinked {relinks} times for 20,000 pushes");
    assert!(fire_all(&mut wheel, 49_999).is_empty());
    assert_eq!(fire_all(&mut wheel, 50_000), vec![(1, (), 50_000)]);
}

#[test]
fn moving_a_deadline_earlier_than_its_slot_refiles_at_once() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, (), 5_000).unwrap();
    assert_eq!(wheel.next_expiration(), Some(4_096));
    wheel.reschedule(&1, 10);
    assert_eq!(wheel.next_expiration(), Some(10));
    assert_eq!(fire_all(&mut wheel, 10), vec![(1, (), 10)]);
}

#[test]
fn a_lazily_moved_entry_costs_a_wakeup_that_fires_nothing() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, (), 100).unwrap();
    wheel.reschedule(&1, 5_000);
    // Still linked where 100 belongs: its slot comes due at 64.
    assert_eq!(wheel.next_expiration(), Some(64));
    assert!(fire_all(&mut wheel, 4_999).is_empty());
    assert_eq!(fire_all(&mut wheel, 5_000), vec![(1, (), 5_000)]);
}

#[test]
fn re_setting_a_pending_key_later_is_lazy_too() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, 'a', 70).unwrap();
    let links = wheel.links;
    assert_eq!(wheel.insert(1, 'b', 90).unwrap(), Some('a'));
    assert_eq!(wheel.links, links);
    assert!(fire_all(&mut wheel, 89).is_empty());
    assert_eq!(fire_all(&mut wheel, 90), vec![(1, 'b', 90)]);
}

#[test]
fn removing_a_due_entry_takes_it_back() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, (), 10).unwrap();
    wheel.insert(2u32, (), 10).unwrap();
    wheel.advance(10);
    assert!(wheel.has_due());
    assert_eq!(wheel.remove(&1), Some((1, ())));
    assert_eq!(wheel.pop_due(), Some((2, (), 10)));
    assert_eq!(wheel.pop_due(), None);
}

/// A level-0 slot holds only entries due at its one tick, so when it comes
/// due its chain becomes the due queue as it is: no entry is filed again.
#[test]
fn a_level_zero_slot_becomes_the_due_queue_whole() {
    let mut wheel = Wheel::new();
    for k in 0..200u32 {
        wheel.insert(k, k, 10).unwrap();
    }
    let links = wheel.links;
    wheel.advance(10);
    assert_eq!(wheel.links, links, "no entry filed again");
    assert_eq!(wheel.remove(&7), Some((7, 7)));
    let fired: Vec<u32> = std::iter::from_fn(|| wheel.pop_due())
        .map(|(k, _, _)| k)
        .collect();
    let expected: Vec<u32> = (0..200).filter(|&k| k != 7).collect();
    assert_eq!(fired, expected);
    assert_eq!(wheel.blocks_in_slots(), 0);
    assert_eq!(wheel.blocks.free_len(), wheel.blocks.len());
}

/// A slot moved later while its entries waited is filed entry by entry, so
/// the moved one waits for its own deadline.
#[test]
fn a_level_zero_slot_with_a_moved_entry_is_filed_again() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, 'a', 10).unwrap();
    wheel.insert(2, 'b', 10).unwrap();
    assert!(wheel.reschedule(&1, 40));
    assert_eq!(fire_all(&mut wheel, 10), vec![(2, 'b', 10)]);
    assert!(fire_all(&mut wheel, 39).is_empty());
    assert_eq!(fire_all(&mut wheel, 40), vec![(1, 'a', 40)]);
}

/// A slot emptied of the entry that was moved in it forgets the move, so
/// the next entries filed there can become the due queue whole again.
#[test]
fn an_emptied_slot_forgets_its_moved_entry() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, (), 10).unwrap();
    assert!(wheel.reschedule(&1, 40)); // lazy: it stays in the slot of 10
    assert_eq!(wheel.remove(&1), Some((1, ())));
    wheel.insert(2, (), 10).unwrap();
    let links = wheel.links;
    wheel.advance(10);
    assert_eq!(wheel.links, links, "no entry filed again");
    assert_eq!(wheel.pop_due(), Some((2, (), 10)));
}

/// Entries spliced into the due queue say they are in their old level-0
/// slot. When that slot is filed again a revolution later, with the backlog
/// still waiting, they must first say `Due`: otherwise removing the new
/// entry would punch a hole in the due queue, and moving a waiting one
/// would leave it to fire at its old tick.
#[test]
fn a_due_backlog_outlives_its_slot_being_filed_again() {
    let mut wheel = Wheel::new();
    wheel.insert(1u32, 'a', 5).unwrap();
    wheel.insert(2, 'b', 5).unwrap();
    wheel.insert(4, 'd', 5).unwrap();
    wheel.advance(5);
    // Tick 69 is slot 5 of level 0's next revolution: level 1 until then.
    wheel.insert(3, 'c', 69).unwrap();
    wheel.advance(64);
    assert!(wheel.has_due());
    assert_eq!(wheel.remove(&3), Some((3, 'c')));
    assert!(wheel.reschedule(&1, 200));
    assert_eq!(wheel.remove(&4), Some((4, 'd')));
    assert_eq!(wheel.pop_due(), Some((2, 'b', 5)));
    assert_eq!(wheel.pop_due(), None);
    assert!(fire_all(&mut wheel, 199).is_empty());
    assert_eq!(fire_all(&mut wheel, 200), vec![(1, 'a', 200)]);
    assert!(wheel.is_empty());
    assert_eq!(wheel.blocks_in_slots(), 0);
    assert_eq!(wheel.blocks.free_len(), wheel.blocks.len());
}

#[test]
fn a_wheel_that_ran_for_ages_still_fires_on_time() {
    let mut wheel = Wheel::new();
    // Just before a top-level revolution boundary of a 1 ms wheel that has
    // run for 2^40 ms (about 35 years).
    let start = (1u64 << 42) - 3;
    wheel.advance(start);
    wheel.insert(1u32, (), start + 5).unwrap(); // across the boundary
    wheel.insert(2, (), start + 1).unwrap();
    assert!(fire_all(&mut wheel, start).is_empty());
    assert_eq!(fire_all(&mut wheel, start + 1), vec![(2, (), start + 1)]);
    assert!(fire_all(&mut wheel, start + 4).is_empty());
    assert_eq!(fire_all(&mut wheel, start + 5), vec![(1, (), start + 5)]);
}

#[test]
fn drain_empties_everything() {
    let mut wheel = Wheel::new();
    for k in 0..100u32 {
        wheel.insert(k, k, u64::from(k) * 1000).unwrap();
    }
    wheel.advance(5000);
    let mut out = Vec::new();
    wheel.drain_into(&mut out);
    out.sort_unstable();
    assert_eq!(out, (0..100).map(|k| (k, k)).collect::<Vec<_>>());
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_expiration(), None);
    // Still usable afterwards.
    wheel.insert(1, 1, 6000).unwrap();
    assert_eq!(fire_all(&mut wheel, 6000), vec![(1, 1, 6000)]);
}

/// Blocks come from one pool: bursts filed in one slot after another reuse
/// the blocks the last burst gave back, instead of each slot keeping room
/// for a burst.
#[test]
fn bursts_in_different_slots_share_blocks() {
    const BURST: u32 = 50_000;
    let mut wheel = Wheel::<u32, u32>::new();
    let mut now = 0;
    for burst in 0..40u64 {
        // Each burst lands in a different slot, far enough out to cascade.
        let when = now + 70_000 + burst * 1_000;
        for key in 0..BURST {
            wheel.insert(key, key, when).unwrap();
        }
        now = when;
        assert_eq!(fire_all(&mut wheel, now).len(), BURST as usize);
        assert_eq!(wheel.blocks.free_len(), wheel.blocks.len());
    }
    // A burst fills BURST / 16 blocks; a cascade frees each block it reads
    // before filing its entries, so it needs a few more, not twice as many.
    let most = BURST as usize / 16 + 16;
    assert!(
        wheel.blocks.len() <= most,
        "{} blocks, at most {most} expected",
        wheel.blocks.len()
    );
}

/// The key index, rebuilt from the slab when it fills, keeps every pending
/// key, through growth and through the rebuilds that removals (which leave
/// tombstones in the table) bring on.
#[test]
fn the_key_index_keeps_every_key_as_it_grows_and_churns() {
    let mut wheel = Wheel::<u32, u32>::new();
    let mut pending = HashMap::new();
    let mut rebuilds = 0;
    for key in 0..60_000u32 {
        rebuilds += usize::from(wheel.index.len() == wheel.index.capacity());
        wheel.insert(key, !key, 1 + u64::from(key % 5_000)).unwrap();
        pending.insert(key, !key);
        // Keep about 3,000 pending: the table fills with tombstones.
        if key >= 3_000 && key % 7 != 0 {
            let gone = key - 3_000;
            assert_eq!(wheel.remove(&gone).map(|(_, v)| v), pending.remove(&gone));
        }
    }
    assert!(rebuilds > 5, "{rebuilds} rebuilds");
    assert_eq!(wheel.len(), pending.len());
    for (key, value) in &pending {
        assert!(wheel.reschedule(key, 10_000), "key {key} lost");
        assert_eq!(wheel.insert(*key, *value, 10_000).unwrap(), Some(*value));
    }
    let fired = fire_all(&mut wheel, 10_000);
    assert_eq!(fired.len(), pending.len());
    assert!(fired.iter().all(|(k, v, _)| pending[k] == *v));
}

#[test]
fn reserved_room_takes_inserts_without_growing() {
    let mut wheel = Wheel::<u32, u32>::new();
    assert!(wheel.reserve(10_000));
    let (slab, index) = (wheel.entries.capacity(), wheel.index.capacity());
    let blocks = wheel.blocks.capacity();
    assert!(
        slab >= 10_000 && index >= 10_000,
        "slab {slab}, index {index}"
    );
    for key in 0..10_000u32 {
        wheel.insert(key, key, 1 + u64::from(key) * 7).unwrap();
    }
    assert_eq!(wheel.entries.capacity(), slab, "the slab grew");
    assert_eq!(wheel.index.capacity(), index, "the key index was rehashed");
    assert_eq!(wheel.blocks.capacity(), blocks, "the block pool grew");
    assert_eq!(fire_all(&mut wheel, 70_000).len(), 10_000);
}

#[test]
fn a_reservation_too_large_to_grant_is_refused_without_harm() {
    let mut wheel = Wheel::<u64, u64>::new();
    wheel.insert(1, 1, 5).unwrap();
    // More than the wheel can index.
    assert!(!wheel.reserve(usize::MAX));
    assert!(!wheel.reserve(u32::MAX as usize - 1));
    wheel.insert(2, 2, 3).unwrap();
    assert_eq!(fire_all(&mut wheel, 5), vec![(2, 2, 3), (1, 1, 5)]);
}

/// Regression: popping the last entry of a due block leaves the read
/// position at offset 64 of that block, which, for an even block, spells
/// the same position as offset 0 of the block numbered after it. Removing
/// the entry there (the next block of the due queue, numbered one more) was
/// taken for the oldest leaving: the read position moved on and no hole was
/// written, so the removed entry stayed in the queue and was popped again
/// (a freed slab index: the driver panicked and every pending timer was
/// lost; or a reused one: another timer fired early).
#[test]
fn removing_the_first_entry_of_the_next_due_block_after_popping_a_block() {
    let mut wheel = Wheel::<u32, u32>::new();
    for key in 0..128u32 {
        wheel.insert(key, key, 1).unwrap();
    }
    wheel.advance(1);
    for key in 0..64u32 {
        assert_eq!(wheel.pop_due(), Some((key, key, 1)));
    }
    assert_eq!(wheel.remove(&64), Some((64, 64)));
    wheel.check_invariants();
    let rest: Vec<u32> = std::iter::from_fn(|| wheel.pop_due())
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(rest, (65..128).collect::<Vec<_>>());
    assert!(wheel.is_empty());
    assert_eq!(wheel.blocks.free_len(), wheel.blocks.len());
}

/// Entries of the next tick fire before its end only once the part of the
/// tick their deadline lies in has passed; the rest wait, the slot's least
/// place is set from them, moved and removed entries are left alone, and
/// the wheel stays consistent. Entries of a tick that is not the next, or
/// filed for the whole tick, never fire early.
#[test]
fn next_tick_entries_fire_early_only_past_their_place() {
    let mut wheel = Wheel::<u32, u32>::new();
    wheel.advance(10);
    // Tick 11: places 0, 100, 200, and one for the whole tick.
    for (key, frac) in [(1, 200), (2, 0), (3, 100), (4, crate::clock::WHOLE)] {
        wheel.insert_in(key, key, 11, frac).unwrap();
    }
    // Another tick's entry, and one moved from tick 11 to tick 12.
    wheel.insert_in(5, 5, 12, 0).unwrap();
    wheel.insert_in(6, 6, 11, 1).unwrap();
    wheel.reschedule_in(&6, 12, 1);
    wheel.insert_in(7, 7, 11, 50).unwrap();
    wheel.remove(&7);
    wheel.check_invariants();
    // No more than the least place filed: the removed entry's 50 may stay.
    let (tick, least) = wheel.next_early().unwrap();
    assert_eq!(tick, 11);
    assert!(least <= 1, "least {least}");

    // Nothing is reached yet.
    assert_eq!(wheel.fire_early(11, 0), 0);
    assert_eq!(wheel.next_early(), Some((11, 0)));
    // 101 256ths in: places 0 and 100.
    assert_eq!(wheel.fire_early(11, 101), 2);
    wheel.check_invariants();
    let mut fired: Vec<u32> = std::iter::from_fn(|| wheel.pop_due())
        .map(|(k, ..)| k)
        .collect();
    fired.sort_unstable();
    assert_eq!(fired, [2, 3]);
    // The rest: place 200 is now the least.
    assert_eq!(wheel.next_early(), Some((11, 200)));
    assert_eq!(wheel.fire_early(11, 200), 0);
    // Tick 12 is not the next tick: nothing of it.
    assert_eq!(wheel.fire_early(12, 256), 0);
    // All but the tick's very end: the entry for the whole tick waits.
    assert_eq!(wheel.fire_early(11, 255), 1);
    assert_eq!(wheel.pop_due().map(|(k, ..)| k), Some(1));
    assert_eq!(wheel.next_early(), None);
    assert_eq!(wheel.fire_early(11, 255), 0);
    wheel.check_invariants();
    let at_11: Vec<u32> = fire_all(&mut wheel, 11)
        .into_iter()
        .map(|(k, ..)| k)
        .collect();
    assert_eq!(at_11, [4]);
    let mut at_12: Vec<u32> = fire_all(&mut wheel, 12)
        .into_iter()
        .map(|(k, ..)| k)
        .collect();
    at_12.sort_unstable();
    assert_eq!(at_12, [5, 6]);
    assert!(wheel.is_empty());
    wheel.check_invariants();
}

/// A tick that is a multiple of 64 waits at level 1 until it comes: its
/// entries used to fire only at its end, however early in it their
/// deadlines fell. Now its own entries fire from their places like any
/// other tick's, and the slot's other ticks still wait for theirs.
#[test]
fn a_tick_at_a_level_boundary_fires_early_from_level_one() {
    let mut wheel = Wheel::<u32, u32>::new();
    wheel.advance(100);
    // Tick 128 is at level 1 from 100 (and from 127): 128, at places 10
    // and 90, then 129 and a moved entry, in the same level-1 slot.
    wheel.insert_in(1, 1, 128, 90).unwrap();
    wheel.insert_in(2, 2, 128, 10).unwrap();
    wheel.insert_in(3, 3, 129, 0).unwrap();
    wheel.insert_in(4, 4, 150, 0).unwrap();
    wheel.reschedule_in(&4, 128, 5);
    wheel.insert_in(5, 5, 128, 0).unwrap();
    wheel.reschedule_in(&5, 140, 0);
    wheel.check_invariants();
    assert_eq!(wheel.next_early(), Some((128, 0)));
    wheel.advance(127);
    assert!(!wheel.has_due());
    let (tick, least) = wheel.next_early().unwrap();
    assert_eq!(tick, 128);
    assert!(least <= 5, "least {least}");
    // 50 256ths into tick 128: places 5 and 10, not 90, nor the entry
    // moved on to 140.
    assert_eq!(wheel.fire_early(128, 50), 2);
    wheel.check_invariants();
    let mut fired: Vec<u32> = std::iter::from_fn(|| wheel.pop_due())
        .map(|(k, ..)| k)
        .collect();
    fired.sort_unstable();
    assert_eq!(fired, [2, 4]);
    assert_eq!(wheel.next_early(), Some((128, 90)));
    assert_eq!(wheel.fire_early(128, 91), 1);
    assert_eq!(wheel.pop_due().map(|(k, ..)| k), Some(1));
    // Only later ticks are left in the slot.
    assert_eq!(wheel.next_early(), None);
    wheel.check_invariants();
    assert!(fire_all(&mut wheel, 128).is_empty());
    let at_129: Vec<u32> = fire_all(&mut wheel, 129)
        .into_iter()
        .map(|(k, ..)| k)
        .collect();
    assert_eq!(at_129, [3]);
    let at_140: Vec<u32> = fire_all(&mut wheel, 140)
        .into_iter()
        .map(|(k, ..)| k)
        .collect();
    assert_eq!(at_140, [5]);
    assert!(wheel.is_empty());
}

/// While entries are due, nothing fires early; and a key fired early can
/// still be removed before it is taken.
#[test]
fn early_firing_waits_for_the_due_queue_and_keeps_keys() {
    let mut wheel = Wheel::<u32, u32>::new();
    wheel.insert_in(1, 1, 3, 0).unwrap();
    wheel.insert_in(2, 2, 4, 0).unwrap();
    wheel.insert_in(3, 3, 4, 10).unwrap();
    wheel.advance(3);
    assert!(wheel.has_due());
    assert_eq!(wheel.next_early(), None);
    assert_eq!(wheel.fire_early(4, 256), 0);
    assert_eq!(wheel.pop_due().map(|(k, ..)| k), Some(1));
    assert_eq!(wheel.fire_early(4, 256), 2);
    assert_eq!(wheel.remove(&3), Some((3, 3)));
    wheel.check_invariants();
    assert_eq!(wheel.pop_due().map(|(k, ..)| k), Some(2));
    assert!(wheel.is_empty());
}
