//! The wheel against a reference model: proptest drives random sequences
//! of sets, moves, removes and advances through both, and compares what
//! fires after every step.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::tests::{fire_all, take_all};
use super::Wheel;

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

/// One step of [`check_early`]: file a timer `d` ticks ahead at a place in
/// its tick, move one, remove one, or let time pass to a place in a tick
/// (advancing, firing what that reached early, and taking what is due).
#[derive(Debug, Clone)]
enum EarlyOp {
    Insert(u32, u64, u8),
    Reschedule(u32, u64, u8),
    Remove(u32),
    Pass(u64, u16),
}

fn early_op(keys: u32) -> impl Strategy<Value = EarlyOp> {
    // Deadlines up to two level-1 slots ahead, so ticks at level
    // boundaries (multiples of 64) come up often.
    // Places and parts reached on a coarse grid, so that they often meet.
    let place = prop_oneof![(0..8u8).prop_map(|f| f * 32), Just(u8::MAX)];
    prop_oneof![
        4 => (0..keys, 1..200u64, place.clone()).prop_map(|(k, d, f)| EarlyOp::Insert(k, d, f)),
        1 => (0..keys, 1..200u64, place).prop_map(|(k, d, f)| EarlyOp::Reschedule(k, d, f)),
        1 => (0..keys).prop_map(EarlyOp::Remove),
        3 => (0..70u64, 0..=8u16).prop_map(|(d, r)| EarlyOp::Pass(d, r * 32)),
    ]
}

/// Timers fired from their places in their ticks, as the driver fires
/// them: after advancing to tick `now` and taking what is due, the next
/// tick's entries whose place is below the part of it reached. None fires
/// before its deadline (its tick reached, or its place in the next tick),
/// none fires twice or is lost, and the wheel stays consistent.
fn check_early(ops: Vec<EarlyOp>) -> Result<(), TestCaseError> {
    let mut wheel = Wheel::<u32, u32>::new();
    // Pending timers: key -> (value, tick, place).
    let mut pending: HashMap<u32, (u32, u64, u8)> = HashMap::new();
    let mut val = 0u32;
    let take = |wheel: &mut Wheel<u32, u32>,
                pending: &mut HashMap<u32, (u32, u64, u8)>,
                reached: Option<(u64, u16)>|
     -> Result<(), TestCaseError> {
        let mut got = Vec::new();
        wheel.take_due_in(usize::MAX, |k, v, w, f| got.push((k, v, w, f)));
        for (k, v, w, f) in got {
            prop_assert_eq!(pending.remove(&k), Some((v, w, f)), "{} fired once", k);
            let on_time = w <= wheel.elapsed()
                || reached.is_some_and(|(tick, r)| w == tick && u16::from(f) < r);
            prop_assert!(
                on_time,
                "{} early: tick {} place {} at {}",
                k,
                w,
                f,
                wheel.elapsed()
            );
        }
        Ok(())
    };
    for op in ops {
        let elapsed = wheel.elapsed();
        match op {
            EarlyOp::Insert(k, d, f) => {
                val += 1;
                wheel.insert_in(k, val, elapsed + d, f).unwrap();
                pending.insert(k, (val, elapsed + d, f));
            }
            EarlyOp::Reschedule(k, d, f) => {
                let moved = wheel.reschedule_in(&k, elapsed + d, f);
                prop_assert_eq!(moved, pending.contains_key(&k));
                if let Some(timer) = pending.get_mut(&k) {
                    (timer.1, timer.2) = (elapsed + d, f);
                }
            }
            EarlyOp::Remove(k) => {
                let removed = wheel.remove(&k).map(|(_, v)| v);
                prop_assert_eq!(removed, pending.remove(&k).map(|(v, ..)| v));
            }
            EarlyOp::Pass(d, reached) => {
                let now = elapsed + d;
                wheel.advance(now);
                take(&mut wheel, &mut pending, None)?;
                let tick = now + 1;
                if let Some((next, least)) = wheel.next_early() {
                    prop_assert!(next >= tick);
                    // No entry of the next tick has a place below the least
                    // named.
                    let below = pending
                        .values()
                        .any(|&(_, w, f)| w == tick && f < least && next == tick);
                    prop_assert!(!below, "least {} too high", least);
                    if next == tick {
                        wheel.fire_early(tick, reached);
                    }
                }
                take(&mut wheel, &mut pending, Some((tick, reached)))?;
                // Every entry of the next tick reached has gone, if it was
                // filed for its own tick at level 0 or 1.
                if wheel.next_early().is_some_and(|(next, _)| next == tick) {
                    let (_, least) = wheel.next_early().unwrap();
                    prop_assert!(u16::from(least) >= reached || least == u8::MAX);
                }
            }
        }
        wheel.check_invariants();
    }
    // Everything left fires by its tick.
    let end = pending.values().map(|&(_, w, _)| w).max().unwrap_or(0);
    wheel.advance(end);
    take(&mut wheel, &mut pending, None)?;
    prop_assert!(pending.is_empty(), "lost {:?}", pending);
    prop_assert!(wheel.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Early firing against a record of what is pending, across level
    /// boundaries.
    #[test]
    fn early_firing_is_never_early_and_loses_nothing(
        ops in prop::collection::vec(early_op(64), 1..300),
    ) {
        check_early(ops)?;
    }
}
