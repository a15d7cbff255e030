//! The whole handle (channel, driver, wheel, stream) against a `BTreeMap`
//! model, under Tokio's paused clock, over random set / move / remove /
//! cancel / drain / advance sequences with delays across every level.

#[path = "support/paused.rs"]
mod paused;

use paused::ready;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::StreamExt;
use proptest::prelude::*;
use tokio_timing_wheel::TimingWheel;

/// Pending timers in firing order: (effective deadline in ms, order set).
/// A deadline already reached when set counts as "now". The flag says the
/// timer's deadline was moved while pending, which frees its place among the
/// timers of its tick.
#[derive(Default)]
struct Model {
    now: u64,
    seq: u64,
    by_key: HashMap<u8, (u64, u64)>,
    queue: BTreeMap<(u64, u64), (u8, u32, bool)>,
}

impl Model {
    fn set(&mut self, key: u8, value: u32, deadline: u64) {
        let moved = self.remove(key).is_some();
        self.file(key, value, deadline, moved);
    }

    fn file(&mut self, key: u8, value: u32, deadline: u64, moved: bool) {
        self.seq += 1;
        let order = (deadline.max(self.now), self.seq);
        self.by_key.insert(key, order);
        self.queue.insert(order, (key, value, moved));
    }

    fn reschedule(&mut self, key: u8, deadline: u64) {
        if let Some(value) = self.remove(key) {
            self.file(key, value, deadline, true);
        }
    }

    fn remove(&mut self, key: u8) -> Option<u32> {
        let order = self.by_key.remove(&key)?;
        self.queue.remove(&order).map(|(_, value, _)| value)
    }

    fn advance(&mut self, by: u64) -> Vec<(u64, (u8, u32, bool))> {
        self.now += by;
        let mut fired = Vec::new();
        while let Some(entry) = self.queue.first_entry() {
            let tick = entry.key().0;
            if tick > self.now {
                break;
            }
            let timer = entry.remove();
            self.by_key.remove(&timer.0);
            fired.push((tick, timer));
        }
        fired
    }

    fn drain(&mut self) -> Vec<(u8, u32)> {
        self.by_key.clear();
        let queue = std::mem::take(&mut self.queue);
        let mut all: Vec<_> = queue.into_values().map(|(k, v, _)| (k, v)).collect();
        all.sort_unstable();
        all
    }
}

/// The same timers tick by tick, and within a tick, timers never moved in
/// the model's order.
fn same_firing(
    actual: &[(u8, u32)],
    expected: &[(u64, (u8, u32, bool))],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        actual.len(),
        expected.len(),
        "{:?} vs {:?}",
        actual,
        expected
    );
    let mut at = 0;
    for group in expected.chunk_by(|a, b| a.0 == b.0) {
        let got = &actual[at..at + group.len()];
        at += group.len();
        let mut got_set = got.to_vec();
        let mut want_set: Vec<_> = group.iter().map(|(_, (k, v, _))| (*k, *v)).collect();
        got_set.sort_unstable();
        want_set.sort_unstable();
        prop_assert_eq!(got_set, want_set, "tick {}", group[0].0);
        let fixed: Vec<u8> = group
            .iter()
            .filter(|(_, t)| !t.2)
            .map(|(_, t)| t.0)
            .collect();
        let got_fixed: Vec<u8> = got
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
    Set(u8, u32, u64),
    Move(u8, u64),
    Remove(u8),
    Cancel(u8),
    Drain,
    Advance(u64),
}

/// Delays in ms: every level of a 1 ms wheel, and beyond two years.
fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..70u64,
        3 => 0..5_000u64,
        2 => 0..300_000u64,
        1 => 0..(1u64 << 26),
        1 => (1u64 << 30)..(1u64 << 37),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..16u8;
    prop_oneof![
        5 => (key.clone(), any::<u32>(), delay()).prop_map(|(k, v, d)| Op::Set(k, v, d)),
        2 => (key.clone(), delay()).prop_map(|(k, d)| Op::Move(k, d)),
        1 => key.clone().prop_map(Op::Remove),
        1 => key.prop_map(Op::Cancel),
        1 => Just(Op::Drain),
        4 => delay().prop_map(Op::Advance),
    ]
}

async fn run(start: u64, shards: usize, ops: Vec<Op>) -> Result<(), TestCaseError> {
    tokio::time::advance(Duration::from_millis(start)).await;
    let (wheel, mut expired) = TimingWheel::builder().shards(shards).build::<u8, u32>();
    // With several shards each fires in order, but the stream interleaves
    // them: compare what fired, not its order.
    let same_firing = |actual: &[(u8, u32)], expected: &[(u64, (u8, u32, bool))]| {
        if shards == 1 {
            return same_firing(actual, expected);
        }
        let mut got = actual.to_vec();
        let mut want: Vec<_> = expected.iter().map(|(_, (k, v, _))| (*k, *v)).collect();
        got.sort_unstable();
        want.sort_unstable();
        prop_assert_eq!(got, want);
        Ok(())
    };
    let mut model = Model::default();
    // Fired in the model, not yet read from the stream.
    let mut unread = Vec::new();
    let ms = Duration::from_millis;
    for op in ops {
        // With several shards, only the shard that answers a reply runs, so
        // whether a zero-delay timer has fired or is still there to drain
        // depends on which shard ran: keep every deadline in the future.
        let op = match op {
            Op::Set(k, v, 0) if shards > 1 => Op::Set(k, v, 1),
            Op::Move(k, 0) if shards > 1 => Op::Move(k, 1),
            op => op,
        };
        match op {
            Op::Set(k, v, d) => {
                wheel.set_timer(k, v, ms(d)).await.unwrap();
                model.set(k, v, model.now + d);
            }
            Op::Move(k, d) => {
                wheel.move_timer(k, ms(d)).await.unwrap();
                model.reschedule(k, model.now + d);
            }
            Op::Remove(k) => {
                prop_assert_eq!(wheel.remove_timer(k).await.unwrap(), model.remove(k));
                // The driver ran: after the batch it fired what was due.
                unread.extend(model.advance(0));
            }
            Op::Cancel(k) => {
                wheel.cancel_timer(k).await.unwrap();
                model.remove(k);
            }
            Op::Drain => {
                let mut all = wheel.drain().await.unwrap();
                all.sort_unstable();
                prop_assert_eq!(all, model.drain());
                unread.extend(model.advance(0));
            }
            Op::Advance(d) => {
                tokio::time::advance(ms(d)).await;
                let stats = wheel.stats().await.unwrap();
                unread.extend(model.advance(d));
                same_firing(&ready(&mut expired), &unread)?;
                unread.clear();
                prop_assert_eq!(stats.pending, model.by_key.len());
            }
        }
    }
    let mut rest = wheel.stop().await.unwrap();
    rest.sort_unstable();
    prop_assert_eq!(rest, model.drain());
    let mut tail = Vec::new();
    while let Some(e) = expired.next().await {
        tail.push(e.into_parts());
    }
    same_firing(&tail, &unread)?;
    Ok(())
}

fn on_paused_runtime<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn handle_matches_the_model(
        start in prop_oneof![Just(0u64), 0..(1u64 << 36)],
        ops in prop::collection::vec(op(), 1..120),
    ) {
        on_paused_runtime(run(start, 1, ops))?;
    }

    /// The same with four shards: every key's commands stay in order on its
    /// shard, and `drain`, `stop` and `stats` cover them all.
    #[test]
    fn sharded_handle_matches_the_model(
        start in prop_oneof![Just(0u64), 0..(1u64 << 36)],
        ops in prop::collection::vec(op(), 1..120),
    ) {
        on_paused_runtime(run(start, 4, ops))?;
    }
}
