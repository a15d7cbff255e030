use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::Wheel;

fn fire_all<K: Eq + std::hash::Hash, V>(wheel: &mut Wheel<K, V>, now: u64) -> Vec<(K, V, u64)> {
    wheel.advance(now);
    std::iter::from_fn(|| wheel.pop_due()).collect()
}

/// Like [`fire_all`], taking due entries `max` at a time with `take_due`.
fn take_all<K: Eq + std::hash::Hash, V>(
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

/// A timer as the model fires it: key, value, deadline, and whether its
/// deadline was moved while pending (which frees its place within its tick).
type Fired = (u32, u32, u64, bool);

/// The reference model: pending timers keyed by (effective deadline, order
/// filed), where a deadline already reached when filed counts as "now".
#[derive(Default)]
struct Model {
    elapsed: u64,
    seq: u64,
    by_key: HashMap<u32, (u64, u64)>,
    queue: BTreeMap<(u64, u64), Fired>,
}

impl Model {
    fn file(&mut self, key: u32, value: u32, when: u64) {
        let moved = self.remove(key).is_some();
        self.file_moved(key, value, when, moved);
    }

    fn file_moved(&mut self, key: u32, value: u32, when: u64, moved: bool) {
        self.seq += 1;
        let order = (when.max(self.elapsed), self.seq);
        self.by_key.insert(key, order);
        self.queue.insert(order, (key, value, when, moved));
    }

    fn reschedule(&mut self, key: u32, when: u64) {
        if let Some(order) = self.by_key.remove(&key) {
            let (_, value, _, _) = self.queue.remove(&order).unwrap();
            self.file_moved(key, value, when, true);
        }
    }

    fn remove(&mut self, key: u32) -> Option<u32> {
        let order = self.by_key.remove(&key)?;
        self.queue.remove(&order).map(|(_, v, _, _)| v)
    }

    /// Moves time on without taking anything: what is due stays pending,
    /// as in a wheel advanced and not yet popped.
    fn pass(&mut self, now: u64) {
        self.elapsed = self.elapsed.max(now);
    }

    fn advance(&mut self, now: u64) -> Vec<(u64, Fired)> {
        self.elapsed = self.elapsed.max(now);
        let mut fired = Vec::new();
        while let Some(entry) = self.queue.first_entry() {
            let tick = entry.key().0;
            if tick > self.elapsed {
                break;
            }
            let timer = entry.remove();
            self.by_key.remove(&timer.0);
            fired.push((tick, timer));
        }
        fired
    }
}

/// Compares what the wheel fired with what the model fired: the same timers
/// tick by tick, and within a tick, timers never moved in the model's order.
fn same_firing(actual: &[(u32, u32, u64)], expected: &[(u64, Fired)]) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        actual.len(),
        expected.len(),
        "actual={:?} expected={:?}",
        actual,
        expected
    );
    let mut at = 0;
    for group in expected.chunk_by(|a, b| a.0 == b.0) {
        let got = &actual[at..at + group.len()];
        at += group.len();
        let mut got_set: Vec<_> = got.to_vec();
        let mut want_set: Vec<_> = group.iter().map(|(_, (k, v, w, _))| (*k, *v, *w)).collect();
        got_set.sort_unstable();
        want_set.sort_unstable();
        prop_assert_eq!(&got_set, &want_set, "tick {}", group[0].0);
        let fixed: Vec<u32> = group
            .iter()
            .filter(|(_, t)| !t.3)
            .map(|(_, t)| t.0)
            .collect();
        let got_fixed: Vec<u32> = got
            .iter()
            .map(|t| t.0)
            .filter(|k| fixed.contains(k))
            .collect();
        prop_assert_eq!(got_fixed, fixed, "order within tick {}", group[0].0);
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, u32, u64),
    InsertAt(u32, u32, u64),
    Reschedule(u32, u64),
    Remove(u32),
    Advance(u64),
    /// Advance, then take due entries with `take_due`, this many at a time.
    AdvanceTaking(u64, usize),
    /// Advance and take nothing: a backlog of due entries stays, to be
    /// removed, moved, or fired later behind entries filed meanwhile.
    AdvanceLeaving(u64),
    AdvanceToNext,
}

/// Distances that reach every level, past the top of a 36-bit wheel, and to
/// the end of time.
fn distance() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..70u64,
        3 => 0..5_000u64,
        2 => 0..300_000u64,
        2 => 0..(1u64 << 26),
        1 => 0..(1u64 << 40),
        1 => (1u64 << 36)..(1u64 << 62),
        1 => Just(u64::MAX),
    ]
}

/// Mostly distances inside level 0 and its neighbour, so that level-0
/// slots are spliced, moved in, and filed again behind a waiting backlog.
fn short_distance() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..4u64,
        6 => 0..70u64,
        3 => 0..300u64,
        1 => 0..5_000u64,
    ]
}

/// How often each operation comes, in the order of [`Op`]'s variants.
type Mix = [u32; 8];

/// Operations on keys `0..keys` at distances drawn from `distance`, taking
/// fewer than `most_taken` due entries at a time, weighted by `mix`.
fn ops_of(
    keys: u32,
    distance: BoxedStrategy<u64>,
    most_taken: usize,
    mix: Mix,
) -> impl Strategy<Value = Op> {
    let key = 0..keys;
    prop_oneof![
        mix[0] => (key.clone(), any::<u32>(), distance.clone()).prop_map(|(k, v, d)| Op::Insert(k, v, d)),
        mix[1] => (key.clone(), any::<u32>(), distance.clone()).prop_map(|(k, v, w)| Op::InsertAt(k, v, w)),
        mix[2] => (key.clone(), distance.clone()).prop_map(|(k, d)| Op::Reschedule(k, d)),
        mix[3] => key.prop_map(Op::Remove),
        mix[4] => distance.clone().prop_map(Op::Advance),
        mix[5] => (distance.clone(), 1..most_taken).prop_map(|(d, max)| Op::AdvanceTaking(d, max)),
        mix[6] => distance.prop_map(Op::AdvanceLeaving),
        mix[7] => Just(Op::AdvanceToNext),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    ops_of(24, distance().boxed(), 70, [4, 1, 2, 1, 2, 1, 1, 2])
}

/// Few keys, many moves, removes and backlogs left waiting.
fn short_op() -> impl Strategy<Value = Op> {
    ops_of(8, short_distance().boxed(), 4, [4, 1, 3, 2, 2, 1, 3, 2])
}

fn check(start: u64, runs: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut wheel = Wheel::<u32, u32>::new();
    if runs {
        wheel.runs_from = 0;
    }
    let mut model = Model::default();
    prop_assert!(fire_all(&mut wheel, start).is_empty());
    model.advance(start);
    for op in ops {
        let elapsed = wheel.elapsed();
        prop_assert_eq!(elapsed, model.elapsed);
        match op {
            Op::Insert(k, v, d) => {
                let when = elapsed.saturating_add(d);
                let old = wheel.insert(k, v, when).unwrap();
                prop_assert_eq!(old, model.by_key.get(&k).map(|o| model.queue[o].1));
                model.file(k, v, when);
            }
            Op::InsertAt(k, v, when) => {
                let old = wheel.insert(k, v, when).unwrap();
                prop_assert_eq!(old, model.by_key.get(&k).map(|o| model.queue[o].1));
                model.file(k, v, when);
            }
            Op::Reschedule(k, d) => {
                let when = elapsed.saturating_add(d);
                let moved = wheel.reschedule(&k, when);
                prop_assert_eq!(moved, model.by_key.contains_key(&k));
                model.reschedule(k, when);
            }
            Op::Remove(k) => {
                prop_assert_eq!(wheel.remove(&k).map(|(_, v)| v), model.remove(k));
            }
            Op::Advance(d) => {
                let now = elapsed.saturating_add(d);
                same_firing(&fire_all(&mut wheel, now), &model.advance(now))?;
            }
            Op::AdvanceTaking(d, max) => {
                let now = elapsed.saturating_add(d);
                same_firing(&take_all(&mut wheel, now, max), &model.advance(now))?;
            }
            Op::AdvanceLeaving(d) => {
                let now = elapsed.saturating_add(d);
                wheel.advance(now);
                model.pass(now);
            }
            Op::AdvanceToNext => {
                if let Some(next) = wheel.next_expiration() {
                    let earliest = model.queue.keys().next().map(|o| o.0);
                    // A lazily moved entry may bring a wake-up that only
                    // files it again; never one after the earliest deadline.
                    prop_assert!(earliest.is_some(), "next={next} with nothing pending");
                    // (Entries left due wake it at once.)
                    prop_assert!(
                        next <= earliest.unwrap().max(model.elapsed),
                        "next={next} earliest={earliest:?}"
                    );
                    same_firing(&fire_all(&mut wheel, next), &model.advance(next))?;
                } else {
                    prop_assert!(model.queue.is_empty());
                }
            }
        }
        check_step(&wheel, &model)?;
    }
    check_end(&mut wheel, &mut model)
}

/// After every step: the wheel's own invariants, its size, and no block
/// lost or shared (every block is in one chain or free).
fn check_step(wheel: &Wheel<u32, u32>, model: &Model) -> Result<(), TestCaseError> {
    wheel.check_invariants();
    prop_assert_eq!(wheel.len(), model.by_key.len());
    prop_assert_eq!(
        wheel.blocks_in_slots() + wheel.blocks.free_len(),
        wheel.blocks.len()
    );
    Ok(())
}

/// At the end: everything left fires at the end of time, in order.
fn check_end(wheel: &mut Wheel<u32, u32>, model: &mut Model) -> Result<(), TestCaseError> {
    same_firing(&fire_all(wheel, u64::MAX), &model.advance(u64::MAX))?;
    prop_assert!(wheel.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The wheel against a `BTreeMap` model, from tick 0 and from a wheel
    /// that has been running for a long time, taking fired entries one at a
    /// time or in runs.
    #[test]
    fn matches_the_model(
        start in prop_oneof![Just(0u64), 0..(1u64 << 50)],
        runs in any::<bool>(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        check(start, runs, ops)?;
    }

    /// The same with eight keys and short distances, where level-0 slots
    /// become the due queue whole all the time: timers spliced into it are
    /// removed and moved, and their old slot is filed again while they wait.
    #[test]
    fn matches_the_model_with_few_keys_and_short_delays(
        start in prop_oneof![Just(0u64), 0..200u64, Just(u64::MAX - 300), 0..(1u64 << 50)],
        runs in any::<bool>(),
        ops in prop::collection::vec(short_op(), 1..300),
    ) {
        check(start, runs, ops)?;
    }
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

/// One step of [`model_with_partial_takes`]: like the model test's, plus
/// bulk inserts and removes (slots over several blocks, cancelled oldest
/// first) and takes that leave the due queue partly full.
#[derive(Debug, Clone)]
enum StepOp {
    Insert(u32, u64),
    Reschedule(u32, u64),
    Remove(u32),
    RemoveRange(u32, u32),
    Advance(u64),
    AdvanceLeaving(u64),
    TakeSome(usize),
    TakeRuns(usize),
    InsertMany(u32, u32, u64),
}

fn step_op(keys: u32) -> impl Strategy<Value = StepOp> {
    let d = prop_oneof![4 => 0..3u64, 3 => 0..70u64, 2 => 0..5000u64, 1 => 0..300_000u64];
    prop_oneof![
        4 => (0..keys, d.clone()).prop_map(|(k, d)| StepOp::Insert(k, d)),
        2 => (0..keys, d.clone()).prop_map(|(k, d)| StepOp::Reschedule(k, d)),
        3 => (0..keys).prop_map(StepOp::Remove),
        2 => (0..keys, 1..200u32).prop_map(|(k, n)| StepOp::RemoveRange(k, n)),
        2 => d.clone().prop_map(StepOp::Advance),
        2 => d.clone().prop_map(StepOp::AdvanceLeaving),
        3 => prop_oneof![1..3usize, 60..70usize, 1..300usize].prop_map(StepOp::TakeSome),
        2 => prop_oneof![1..3usize, 30..70usize, 1..300usize].prop_map(StepOp::TakeRuns),
        2 => (0..keys, 1..300u32, d).prop_map(|(k, n, d)| StepOp::InsertMany(k, n, d)),
    ]
}

/// Checks entries taken from the due queue against the model: each was
/// pending, due, and the earliest left.
fn check_taken(model: &mut Model, got: Vec<(u32, u32, u64)>) -> Result<(), TestCaseError> {
    for (k, v, w) in got {
        let order = model.by_key.get(&k).copied();
        prop_assert!(order.is_some(), "popped {k} not pending");
        let order = order.unwrap();
        prop_assert!(order.0 <= model.elapsed, "{k} popped early");
        let first = model.queue.keys().next().unwrap().0;
        prop_assert_eq!(order.0, first, "{} out of order", k);
        let t = model.queue.remove(&order).unwrap();
        model.by_key.remove(&k);
        prop_assert_eq!((t.0, t.1, t.2), (k, v, w));
    }
    Ok(())
}

fn check_partial_takes(runs: bool, keys: u32, ops: Vec<StepOp>) -> Result<(), TestCaseError> {
    let mut wheel = Wheel::<u32, u32>::new();
    if runs {
        wheel.runs_from = 0;
    }
    let mut model = Model::default();
    let mut val = 0u32;
    for op in ops {
        let elapsed = wheel.elapsed();
        match op {
            StepOp::Insert(k, d) => {
                val += 1;
                let when = elapsed + d;
                let old = wheel.insert(k, val, when).unwrap();
                prop_assert_eq!(old, model.by_key.get(&k).map(|o| model.queue[o].1));
                model.file(k, val, when);
            }
            StepOp::InsertMany(k0, n, d) => {
                for i in 0..n {
                    let k = (k0 + i) % keys;
                    val += 1;
                    let when = elapsed + d;
                    let old = wheel.insert(k, val, when).unwrap();
                    prop_assert_eq!(old, model.by_key.get(&k).map(|o| model.queue[o].1));
                    model.file(k, val, when);
                }
            }
            StepOp::Reschedule(k, d) => {
                let when = elapsed + d;
                prop_assert_eq!(wheel.reschedule(&k, when), model.by_key.contains_key(&k));
                model.reschedule(k, when);
            }
            StepOp::Remove(k) => {
                prop_assert_eq!(wheel.remove(&k).map(|(_, v)| v), model.remove(k));
            }
            StepOp::RemoveRange(k0, n) => {
                for i in 0..n {
                    let k = (k0 + i) % keys;
                    prop_assert_eq!(wheel.remove(&k).map(|(_, v)| v), model.remove(k));
                }
            }
            StepOp::Advance(d) => {
                let now = elapsed + d;
                same_firing(&fire_all(&mut wheel, now), &model.advance(now))?;
            }
            StepOp::AdvanceLeaving(d) => {
                let now = elapsed + d;
                wheel.advance(now);
                model.pass(now);
            }
            StepOp::TakeSome(n) => {
                let got: Vec<_> = (0..n).map_while(|_| wheel.pop_due()).collect();
                check_taken(&mut model, got)?;
            }
            StepOp::TakeRuns(n) => {
                let mut got = Vec::new();
                wheel.take_due(n, |k, v, w| got.push((k, v, w)));
                check_taken(&mut model, got)?;
            }
        }
        check_step(&wheel, &model)?;
    }
    check_end(&mut wheel, &mut model)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// The wheel against the model with the due queue taken from partly,
    /// one at a time and in runs, between inserts, removes and moves:
    /// the model test above always empties it.
    #[test]
    fn model_with_partial_takes(
        runs in any::<bool>(),
        ops in prop::collection::vec(step_op(400), 1..200),
    ) {
        check_partial_takes(runs, 400, ops)?;
    }
}
